"""Kernel names, grids and durations of cuBLAS and tilegemm at the split-K suite shapes (run under ncu)."""
import cupy, numpy as np, sys
sys.path.insert(0, 'src')
import tilegemm
for (M, N, K) in [(128, 4096, 4096), (1024, 1024, 16384)]:
    a = cupy.random.standard_normal((M, K), dtype=np.float32); b = cupy.random.standard_normal((K, N), dtype=np.float32)
    for _ in range(2):
        cupy.matmul(a, b); tilegemm.matmul(a, b)
    cupy.cuda.Device().synchronize()
