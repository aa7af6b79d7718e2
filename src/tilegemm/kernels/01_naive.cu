// Rung 1 - 01_naive: one thread per output element.
//
// Follows: Memory and data locality (Kirk & Hwu, ch. 4) §4.2, Fig. 4.3 (the basic matrix
// multiplication kernel) and GEMM illustrated §2 (naive GEMM); sources in docs/sources.md.
// What it does: thread (x, y) of the grid computes C(m, n) with m = y, n = x as a dot product of
// row m of A and column n of B, read straight from global memory.  Each FMA needs two 4-byte loads:
// a compute-to-global-memory-access ratio of 0.25 FLOP/B (Memory and data locality §4.2), so it is
// bound by memory (mostly L1/L2 hits) at a few percent of FP32 peak.
// Constraints: block = BLOCK_X x BLOCK_Y threads (defaults 16 x 16; BLOCK_X * BLOCK_Y <= 1024);
// grid covers N x M; any M, N, K >= 1; any layout (tg_common.cuh).
#include "tg_common.cuh"

#ifndef BLOCK_X
#define BLOCK_X 16
#endif
#ifndef BLOCK_Y
#define BLOCK_Y 16
#endif
static_assert(BLOCK_X * BLOCK_Y <= 1024, "a block holds at most 1024 threads");

extern "C" __global__ void __launch_bounds__(BLOCK_X * BLOCK_Y) tilegemm_kernel(TG_GEMM_PARAMS) {
    const int n = blockIdx.x * BLOCK_X + threadIdx.x;
    const int m = blockIdx.y * BLOCK_Y + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += A[tg_a_off(m, k, lda)] * B[tg_b_off(k, n, ldb)];
    C[(tg_idx)m * ldc + n] = acc;
}
