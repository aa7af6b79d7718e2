#!/usr/bin/env bash
# Nsight Compute warp-state (stall) and scheduler statistics of rung 8 and the family default at
# 4096^3, one launch each, for the perf notes.  usage: bash scripts/device_stalls.sh  -> $RAW/stalls-*.csv
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache
RAW="${RAW:-/tmp/raw}"; mkdir -p "$RAW"
P="python3 -m tilegemm.instruments.probe"
GEMM_DEFAULT=$(python3 -c "from tilegemm import registry as r; print(','.join(f'{k}={v}' for k,v in r.FAMILY.defaults.items()))")
for name in 08_hopper gemm; do
  cfg=""; [ "$name" = gemm ] && cfg="--config $GEMM_DEFAULT"
  ncu --csv --print-units base --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section ComputeWorkloadAnalysis -k regex:'^tilegemm_(kernel|gemm)$' -c 1 \
      --log-file "$RAW/stalls-$name.csv" $P launch $name 4096 4096 4096 $cfg
  grep -E "Stall|Issued|Eligible|Active Warps|Achieved Occupancy|Executed Ipc|Issue Slots" "$RAW/stalls-$name.csv" \
      | awk -F'","' '{print $13" = "$15}' | head -40
done
