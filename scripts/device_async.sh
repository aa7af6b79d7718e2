#!/usr/bin/env bash
# cp.async pipeline experiment: family GPU tests, then a config sweep at 4096^3 and 4095^3.
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache
OUT="${OUT:-/tmp/out}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
if [ "${TESTS:-1}" = 1 ]; then
  python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_gemm.py 2>&1 | tail -5
fi
T="tm=8,tn=16,ln=4,minb=1"
python3 scripts/sweep.py --tag "${TAG:-async}" --sizes ${SIZES:-4096 4095} -- ${ENTRIES:-08_hopper gemm:stages=0 \
  gemm:stages=2 gemm:stages=3 gemm:stages=4 gemm:bk=16,stages=3 \
  gemm:bm=256,bn=128,$T,stages=3 gemm:bm=256,bn=128,$T,stages=4 gemm:bm=256,bn=128,$T,stages=3,bk=16 \
  gemm:bm=128,bn=256,$T,stages=3 gemm:bm=128,bn=256,tm=16,tn=8,ln=8,minb=1,stages=3 \
  gemm:bm=128,bn=128,tm=8,tn=8,ln=8,minb=2,stages=3}
