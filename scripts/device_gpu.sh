#!/usr/bin/env bash
# On the GPU machine: versions, every test (the GPU tests included), then the bench suite, its
# results file, plot and log landing in $OUT.  Arguments go to `tilegemm bench` (e.g. --tag suite).
# usage: TILEGEMM_COMMIT=<sha> bash scripts/device_gpu.sh [bench arguments]
#   TESTS=0 skips the tests, BENCH=0 the bench; TEST_ARGS replaces the pytest targets (default: tests)
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR="${TILEGEMM_CACHE_DIR:-/tmp/tgcache}"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
python3 -c "import cupy, cuda.bindings as cb; from tilegemm import compiler; from tilegemm.instruments import sass
print('cupy', cupy.__version__, 'cuda-bindings', cb.__version__, 'nvrtc', compiler.nvrtc_version(), 'nvdisasm', sass.nvdisasm_path())"
status=0
if [ "${TESTS:-1}" = 1 ]; then
  python3 -m pytest -q -p no:cacheprovider ${TEST_ARGS:-tests} 2>&1 | tee "$OUT/pytest.log" | tail -25
  status=${PIPESTATUS[0]}
fi
if [ "${BENCH:-1}" = 1 ]; then
  python3 -m tilegemm bench --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -40
fi
exit $status
