#!/usr/bin/env bash
# One call on the GPU machine for the instruments: peaks (FP32 FFMA, DRAM and L2 bandwidth), Nsight
# Compute shared-memory counters for the bank probes and for every rung and the family, the
# predicted-vs-measured comparison, and the instrument GPU tests.
# usage: TILEGEMM_COMMIT=<sha> bash scripts/device_instruments.sh  -> $OUT/<gpu>-banks.json, peaks.json, raw.tar.gz
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"; RAW=/tmp/raw; mkdir -p "$RAW/kernels"
P="python3 -m tilegemm.instruments.probe"
METRICS=$(python3 -c "from tilegemm.instruments.probe import NCU_METRICS as m; print(','.join(m))")
NCU="ncu --csv --print-units base --metrics $METRICS"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$RAW/gpu.txt"

$P peaks "$OUT/peaks.json" && cat "$OUT/peaks.json"
$P cases "$RAW/cases.json"
$NCU -k regex:bank_probe --log-file "$RAW/probe.csv" $P banks "$RAW/cases.json"
echo "probe rows: $(grep -c bank_probe "$RAW/probe.csv")"
GEMM_DEFAULT=$(python3 -c "from tilegemm import registry as r; print(','.join(f'{k}={v}' for k,v in r.FAMILY.defaults.items()))")
for name in 02_smem_tiled 03_register_blocked 04_vectorized 05_double_buffered 06_warp_tiled 07_maxas 08_hopper gemm; do
  cfg=""; [ "$name" = gemm ] && cfg="--config $GEMM_DEFAULT"
  $NCU -k regex:'^tilegemm_(kernel|gemm)$' -c 1 --log-file "$RAW/kernels/$name.csv" $P launch $name 1024x1024x1024 $cfg
done
GPU=$(python3 -c "from tilegemm import gpu; import re; print(re.sub(r'[^A-Za-z0-9]+','-',gpu.device_properties().name).strip('-'))")
$P compare "$RAW/cases.json" "$RAW/probe.csv" "$RAW/kernels" "$OUT/$GPU-banks.json"
python3 - "$OUT/$GPU-banks.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["probes"]:
    print(f"{r['name'][:60]:60s} meas {r['measured_wavefronts']} classic {r['classic_wavefronts']} hopper {r['hopper_wavefronts']} confl {r['measured_conflicts']}")
for r in d["kernels"]:
    print(r)
PY
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_instruments.py 2>&1 | tee "$RAW/pytest.log" | tail -15
tar czf "$OUT/raw.tar.gz" -C /tmp raw
