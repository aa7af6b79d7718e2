#!/usr/bin/env bash
# Full test suite on the GPU, then a sweep of rung 8 and family configs (scripts/sweep.py).
# usage (device tool): bash scripts/device_check.sh   env: ENTRIES, SIZES, TAG as in device_async.sh
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache
OUT="${OUT:-/tmp/out}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.log" | tail -8
TESTS=0 bash scripts/device_async.sh
