#!/usr/bin/env bash
# One call on the GPU machine: environment, GPU tests, then the benchmark.  Results land in $OUT.
# usage (device tool): bash scripts/device_run.sh [bench args...]
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
python3 -c "import cupy, torch, cuda.bindings as cb; from tilegemm import compiler, sass; print('cupy', cupy.__version__, 'torch', torch.__version__, 'cuda-bindings', cb.__version__, 'nvrtc', compiler.nvrtc_version(), 'nvdisasm', sass.nvdisasm_path())"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.log" | tail -25
fi
if [ "$#" -gt 0 ]; then
  python3 -m tilegemm.cli "$@" --out "$OUT" 2>&1 | tee "$OUT/bench.log"
fi
