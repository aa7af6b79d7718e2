// Rung 2 - 02_smem_tiled: shared-memory tiles with barriers and boundary checks.
//
// Follows: Memory and data locality (Kirk & Hwu, ch. 4) §4.4-4.7; sources in docs/sources.md.
// Changed from rung 1: the block's TILE x TILE threads cooperatively load one TILE x TILE tile of A
// and one of B into shared memory per phase ("strip-mining" K), synchronise, then each thread does
// TILE FMAs from shared memory.  Every global element is loaded by one thread and used TILE times,
// so global traffic drops by TILE (Memory and data locality §4.4-4.5, Fig. 4.16).
// Boundary checks (§4.6, Fig. 4.20): tile elements outside A or B are loaded as 0.0f, so the
// partial last phase adds nothing; only outputs inside C are stored.  Any M, N, K >= 1.
// Shared memory is `extern __shared__`, sized at launch (2 * TILE * TILE floats) after the host
// checks it against the device's per-block limit (§4.7).
// Constraints: TILE * TILE <= 1024 threads; 2 * TILE^2 * 4 bytes <= shared memory per block.
#include "tg_common.cuh"

#ifndef TILE
#define TILE 16
#endif
static_assert(TILE * TILE <= 1024, "one thread per tile element: TILE*TILE <= 1024");

extern "C" __global__ void __launch_bounds__(TILE * TILE) tilegemm_kernel(TG_GEMM_PARAMS) {
    extern __shared__ float smem[];
    float *As = smem;                // As[ty][tx] = A(row, phase*TILE + tx)
    float *Bs = smem + TILE * TILE;  // Bs[ty][tx] = B(phase*TILE + ty, col)
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int ka = k0 + tx, kb = k0 + ty;
        As[ty * TILE + tx] = (row < M && ka < K) ? A[tg_a_off(row, ka, lda)] : 0.0f;
        Bs[ty * TILE + tx] = (kb < K && col < N) ? B[tg_b_off(kb, col, ldb)] : 0.0f;
        __syncthreads();  // the tile is complete before anyone reads it
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += As[ty * TILE + k] * Bs[k * TILE + tx];
        __syncthreads();  // everyone is done reading before the next phase overwrites it
    }
    if (row < M && col < N) C[(tg_idx)row * ldc + col] = acc;
}
