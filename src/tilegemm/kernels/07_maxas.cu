// Rung 7 - 07_maxas: the maxas ideas that still apply on today's GPUs.
//
// Follows: the maxas article (The ultimate GEMM optimization on GPU: how the maxas assembler
// works, on Scott Gray's maxas SGEMM), and its part 9 for the output; sources in docs/sources.md.
//
// Changed from rung 6:
// - C is staged through shared memory (the maxas article, part 9): for each of its 8 rows a warp
//   writes its 4 x 64 slice of results into a private 1 KB shared buffer (STS.128, conflict-free)
//   and reads it back so that each quarter-warp stores 32 consecutive floats of C: every STG.128
//   writes whole 128-byte lines, whatever the thread map of the main loop.
// - maxas chose the FFMA order and register numbers by hand (the maxas article); through NVRTC
//   that is ptxas' job.  A serpentine source order was tried: ptxas then needed 143 registers and
//   spilled under a 2-blocks/SM cap, so the plain order stays (docs/perf-notes.md).
// - Occupancy: at most 128 registers a thread keeps two blocks per SM; ptxas meets that on sm_90
//   without a __launch_bounds__ minimum (with one, sm_80 spilled), so none is set.
// Kept from rungs 4-6: 256 threads, 128 x 128 tile, BK = 16 (-D BK), 4 x 8 warps with 4 x 4 patches (LDS.128
// conflict-free), double buffering, zero-filled predicated loads at the edges (maxas relied on
// texture loads returning 0 out of range; here the edge path does the same).
// Edges: unchecked interior path; any M, N, K >= 1.
#include "tg_tiles.cuh"

#define BM 128
#define BN 128
#ifndef BK
#define BK 16
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

// acc += a * b^T (an outer product: the K loop as maxas runs it, per the maxas article)
__device__ __forceinline__ void outer8(float (*acc)[8], const float *a, const float *b) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
}

extern "C" __global__ void __launch_bounds__(NT) tilegemm_kernel(TG_GEMM_PARAMS) {
    __shared__ __align__(16) float As[2][BK][LDA_S];
    __shared__ __align__(16) float Bs[2][BK][LDB_S];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int tr = (warp / 2) * 4 + lane / 8;  // thread row 0..15: a warp is 4 rows...
    const int tc = (warp % 2) * 8 + lane % 8;  // ...by 8 columns of threads
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
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
