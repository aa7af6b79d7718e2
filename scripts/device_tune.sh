#!/usr/bin/env bash
# Tune the suite on this GPU, merge the winners into a copy of its shipped table, install that
# copy, then run the bench suite on it.  usage (device tool): bash scripts/device_tune.sh
# -> $OUT/tables/<gpu>.json (to copy into src/tilegemm/tables), $OUT/tune.json, the suite results
# Set TILEGEMM_COMMIT=<sha> so the results record the commit they measured.
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache TILEGEMM_TUNE_DIR=/tmp/tgtune
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/tables"
GPU=$(python3 -c "from tilegemm import selection; print(selection.selector(0).table_path.name)")
cp "src/tilegemm/tables/$GPU" "$OUT/tables/" 2>/dev/null || true
# TUNE: the tune command's arguments (default: the suite, NN)
python3 -m tilegemm tune ${TUNE:---suite} --top "${TOP:-16}" --ship "$OUT/tables" --out "$OUT" 2>&1 | tail -30
cp "$OUT/tables/$GPU" "src/tilegemm/tables/$GPU"
rm -rf /tmp/tgtune   # the bench below reads the shipped table, not the tuning cache
python3 -m tilegemm bench --out "$OUT" 2>&1 | tail -40
