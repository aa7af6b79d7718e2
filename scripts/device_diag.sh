#!/usr/bin/env bash
# Where do the issue slots go?  Per-reason warp stalls (Nsight Compute) and the per-instruction SASS
# view (stall samples) of rung 8, the family default and cuBLAS (through cupy.matmul) at 4096^3 NN,
# plus the cuBLAS kernel's name and launch shape.  usage: bash scripts/device_diag.sh -> $RAW/diag-*
# env: GEMM_CONFIG (family config, default: the family defaults), DIAG_RUNG=0 / DIAG_CUBLAS=0 skip those
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache
RAW="${RAW:-/tmp/raw}"; mkdir -p "$RAW"
S=${DIAG_SIZE:-4096}
P="python3 -m tilegemm.instruments.probe"
GEMM_DEFAULT=${GEMM_CONFIG:-$(python3 -c "from tilegemm import registry as r; print(','.join(f'{k}={v}' for k,v in r.FAMILY.defaults.items()))")}
SECTIONS="--section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section InstructionStats --section ComputeWorkloadAnalysis --section SourceCounters"
prof() {  # name, kernel regex, command...
  local name=$1 rx=$2; shift 2
  ncu $SECTIONS --import-source no -k "regex:$rx" -c 1 -f -o "$RAW/diag-$name" "$@" > "$RAW/diag-$name.log" 2>&1
  ncu -i "$RAW/diag-$name.ncu-rep" --page raw --csv > "$RAW/diag-$name-raw.csv" 2>>"$RAW/diag-$name.log"
  ncu -i "$RAW/diag-$name.ncu-rep" --page details --csv > "$RAW/diag-$name-details.csv" 2>>"$RAW/diag-$name.log"
  ncu -i "$RAW/diag-$name.ncu-rep" --page source --csv --print-source sass > "$RAW/diag-$name-sass.csv" 2>>"$RAW/diag-$name.log" \
    || ncu -i "$RAW/diag-$name.ncu-rep" --page source --csv > "$RAW/diag-$name-sass.csv" 2>>"$RAW/diag-$name.log"
  python3 - "$RAW/diag-$name-raw.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) < 3: print("no rows", sys.argv[1]); sys.exit()
head, vals = rows[0], rows[2]
keep = ("Kernel Name", "launch__registers", "launch__block_size", "launch__grid_size", "launch__shared_mem",
        "smsp__average_warps_issue_stalled", "smsp__issue_active.avg.pct", "sm__pipe_fma_cycles_active.avg.pct",
        "smsp__inst_executed.sum", "sm__warps_active.avg.per_cycle_active", "smsp__thread_inst_executed_per_inst")
for h, v in zip(head, vals):
    if h.startswith(keep) and v not in ("", "0", "0.00"):
        print(f"{h} = {v}")
PY
}
[ "${DIAG_RUNG:-1}" = 1 ] && prof 08_hopper '^tilegemm_kernel$' $P launch 08_hopper $S $S $S
prof gemm '^tilegemm_gemm$' $P launch gemm $S $S $S --config "$GEMM_DEFAULT"
[ "${DIAG_CUBLAS:-1}" = 1 ] && prof cublas 'gemm|Kernel' python3 -c "
import cupy as cp
a = cp.random.standard_normal(($S, $S), dtype=cp.float32); b = cp.random.standard_normal(($S, $S), dtype=cp.float32)
cp.cuda.Device().synchronize(); c = a @ b; cp.cuda.Device().synchronize()"
