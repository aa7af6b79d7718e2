// Rung 8 - 08_hopper: what the H100 needs beyond the seeds, each choice measured (docs/perf-notes.md).
//
// Changed from rung 7:
// - Block swizzle (-D SWIZZLE=G, 0 = off): blocks are numbered down groups of G block-rows before
//   moving right, so the blocks resident at one time share A rows and B columns in the 50 MB L2
//   instead of streaming a whole row of B tiles each.  The grid is 1-D; the map is below.
// - Tile depth (-D BK=8 or 16): rung 7 runs BK = 16 at one block per SM (175 registers); here two
//   blocks per SM under a 128-register cap, where BK = 16 spills, so BK = 8 (measured: 2 blocks at
//   BK = 8 beat 1 block at BK = 16 by 3%).
// - Occupancy (-D MINB): blocks per SM requested from ptxas via __launch_bounds__ (0: no request;
//   -1, the default: 2 on sm_90, where ptxas otherwise takes 173 registers and one block per SM,
//   and none before sm_90, where the 128-register cap made ptxas spill).
// Kept from rung 7: 256 threads, 128 x 128 tile, 4 x 8 warps with 4 x 4 patches, double buffering,
// C staged through shared memory, zero-filled predicated edge loads.
// Edges: unchecked interior path; any M, N, K >= 1.
#include "tg_tiles.cuh"

#define BM 128
#define BN 128
#ifndef BK
#define BK 8
#endif
#ifndef SWIZZLE
#define SWIZZLE 8
#endif
#ifndef MINB
#define MINB -1
#endif
static_assert(BK == 8 || BK == 16, "BK is 8 or 16");
#define NT 256
#define PAD 4
#define LDA_S (BM + PAD)
#define LDB_S (BN + PAD)

// the 8 values a thread needs from one k-row of a tile: two float4, 64 floats apart
__device__ __forceinline__ void frag8(float *r, const float *row, int off) {
    *reinterpret_cast<float4 *>(r) = *reinterpret_cast<const float4 *>(row + off);
    *reinterpret_cast<float4 *>(r + 4) = *reinterpret_cast<const float4 *>(row + off + 64);
}

// acc += a * b^T (an outer product: the K loop as maxas runs it, seed 003)
__device__ __forceinline__ void outer8(float (*acc)[8], const float *a, const float *b) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
}

#if MINB > 0
#define TG_BOUNDS __launch_bounds__(NT, MINB)
#elif MINB < 0 && __CUDA_ARCH__ >= 900  // auto: two blocks per SM on Hopper
#define TG_BOUNDS __launch_bounds__(NT, 2)
#else
#define TG_BOUNDS __launch_bounds__(NT)
#endif
extern "C" __global__ void TG_BOUNDS tilegemm_kernel(TG_GEMM_PARAMS) {
    __shared__ __align__(16) float As[2][BK][LDA_S];
    __shared__ __align__(16) float Bs[2][BK][LDB_S];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int tr = (warp / 2) * 4 + lane / 8;  // thread row 0..15: a warp is 4 rows...
    const int tc = (warp % 2) * 8 + lane % 8;  // ...by 8 columns of threads
    // 1-D grid -> (block row, block column), SWIZZLE block rows at a time
    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    int bm = blockIdx.x / grid_n, bn = blockIdx.x % grid_n;
    if (SWIZZLE > 1) {
        const int per_group = SWIZZLE * grid_n, first = (blockIdx.x / per_group) * SWIZZLE;
        const int rows = min(grid_m - first, SWIZZLE), in_group = blockIdx.x % per_group;
        bm = first + in_group % rows;
        bn = in_group / rows;
    }
    const int m0 = bm * BM, n0 = bn * BN;
    const bool interior = m0 + BM <= M && n0 + BN <= N;

    ATile<BM, BK, NT> ta;
    BTile<BK, BN, NT> tb;
    ta.start(A, lda, m0, tid);
    tb.start(B, ldb, n0, tid);
    float acc[8][8] = {};
    float a[2][8], b[2][8];

    if (interior && BK <= K) { ta.load<false>(lda, m0, 0, M, K, tid); tb.load<false>(ldb, 0, n0, K, N, tid); }
    else                     { ta.load<true>(lda, m0, 0, M, K, tid);  tb.load<true>(ldb, 0, n0, K, N, tid); }
    ta.store<LDA_S>(&As[0][0][0], tid);
    tb.store<LDB_S>(&Bs[0][0][0], tid);
    __syncthreads();
    frag8(a[0], As[0][0], tr * 4);
    frag8(b[0], Bs[0][0], tc * 4);

    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const int next = k0 + BK;
        const bool more = next < K;
        if (more) {  // prefetch tile t+1 into registers
            ta.next(lda);
            tb.next(ldb);
            if (interior && next + BK <= K) { ta.load<false>(lda, m0, next, M, K, tid); tb.load<false>(ldb, next, n0, K, N, tid); }
            else                            { ta.load<true>(lda, m0, next, M, K, tid);  tb.load<true>(ldb, next, n0, K, N, tid); }
        }
#pragma unroll
        for (int k = 0; k < BK - 1; ++k) {
            frag8(a[(k + 1) % 2], As[buf][k + 1], tr * 4);
            frag8(b[(k + 1) % 2], Bs[buf][k + 1], tc * 4);
            outer8(acc, a[k % 2], b[k % 2]);
        }
        if (more) {
            ta.store<LDA_S>(&As[buf ^ 1][0][0], tid);
            tb.store<LDB_S>(&Bs[buf ^ 1][0][0], tid);
            __syncthreads();
            buf ^= 1;
            frag8(a[BK % 2], As[buf][0], tr * 4);
            frag8(b[BK % 2], Bs[buf][0], tc * 4);
        }
        outer8(acc, a[(BK - 1) % 2], b[(BK - 1) % 2]);
    }
    // Epilogue through shared memory.  acc[i][j] belongs to row (i/4)*64 + tr*4 + i%4 and column
    // (j/4)*64 + tc*4 + j%4.  For each i the warp's 32 threads hold 4 rows x 64 columns.
    __syncthreads();  // the tile buffers are free: reuse As as 8 warp buffers of 4 x 64 floats
    float *stage = &As[0][0][0] + warp * 256;
    const int wm = warp / 2, wn = warp % 2;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h)  // row lane/8, columns h*32 + (lane%8)*4: 128 B per quarter-warp
            *reinterpret_cast<float4 *>(&stage[(lane / 8) * 64 + h * 32 + (lane % 8) * 4]) =
                make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
        __syncwarp();
#pragma unroll
        for (int s = 0; s < 2; ++s) {  // 16 lanes per staged row: 2 rows per STG.128
            const int r = s * 2 + lane / 16, c = (lane % 16) * 4;
            const float4 v = *reinterpret_cast<const float4 *>(&stage[r * 64 + c]);
            const int m = m0 + (i / 4) * 64 + (wm * 4 + r) * 4 + i % 4;
            const int n = n0 + (c / 32) * 64 + wn * 32 + c % 32;
            if (interior) tg_store4<false>(C, ldc, m, n, M, N, v);
            else          tg_store4<true>(C, ldc, m, n, M, N, v);
        }
        __syncwarp();
    }
}
