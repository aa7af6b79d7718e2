#!/usr/bin/env bash
# H200 pass: bank table (instruments), then tune the suite and run the bench on the new table.
set -uo pipefail
OUT="${OUT:-/tmp/out}"
bash scripts/device_instruments.sh 2>&1 | tail -5
mkdir -p "$OUT/instr"; mv "$OUT"/*-banks.json "$OUT/peaks.json" "$OUT/raw.tar.gz" "$OUT/instr/" 2>/dev/null
TOP=12 bash scripts/device_tune.sh 2>&1 | grep -E "geometric|host time|µs|tilegemm " | tail -25
