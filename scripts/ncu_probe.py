"""One-off: the family's 64 x 64 tile and cuBLAS on one shape, for Nsight Compute (profiled region only)."""
import sys
import numpy as np
import cupy as cp
import tilegemm
M, N, K = (int(x) for x in sys.argv[1].split("x"))
cfg = dict(bm=64, bn=64, tm=8, tn=4, ln=8, minb=0, bk=8, swizzle=8, stages=3, splits=1)
a = cp.random.standard_normal((M, K), dtype=np.float32)
b = cp.random.standard_normal((K, N), dtype=np.float32)
o = cp.empty((M, N), np.float32)
for _ in range(3):
    tilegemm.matmul(a, b, out=o, config=cfg); cp.matmul(a, b, out=o)
cp.cuda.Device().synchronize()
cp.cuda.profiler.start()
tilegemm.matmul(a, b, out=o, config=cfg)
cp.matmul(a, b, out=o)
cp.cuda.Device().synchronize()
cp.cuda.profiler.stop()
