#!/usr/bin/env bash
# One call on the GPU machine: tune the family on the bench suite (shippable table), then run the
# bench suite with the tuned configs.  Results land in $OUT.
# usage (device tool): bash scripts/device_suite.sh [TOP]
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache TILEGEMM_TUNE_DIR=/tmp/tgtune
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
timeout "${TUNE_S:-330}" python3 -m tilegemm.cli tune --top "${1:-16}" --ship "$OUT" --out "$OUT" 2>&1 | tee "$OUT/tune.log" | grep -v "^\s*$" | tail -40
timeout "${BENCH_S:-220}" python3 -m tilegemm.cli bench --out "$OUT" --tag suite 2>&1 | tee "$OUT/bench.log"
