// Rung 6 - 06_warp_tiled: thread and warp layouts that make every shared-memory access conflict-free.
//
// Follows: GEMM illustrated §5.2 (its 4 x 8 warp, and the 8 x 8 thread tile split into four 4 x 4);
// sources in docs/sources.md.
// Changed from rung 5: the 256 threads form warps of 4 x 8 threads (4 warps down, 2 across a
// 16 x 16 thread grid), and each thread's 8 x 8 outputs are four 4 x 4 patches 64 rows
// / 64 columns apart: rows tr*4.. and 64+tr*4.., columns tc*4.. and 64+tc*4...  A fragment read
// (LDS.128) is then one address per quarter-warp (a broadcast) and a B fragment read is eight
// consecutive float4 per quarter-warp, one contiguous 128-byte row: no bank conflicts.  Stores
// into shared memory that transpose a tile (A when row-major, B when column-major) are padded by 4
// words per row (As[k][BM+4]) so the two halves of a warp land in different banks.
// Same double buffering as rung 5; tile 128 x 128 x BK (-D BK, default 16; 16 measured 15% faster
// than 8 at 4096^3, docs/perf-notes.md) with 8 x 8 outputs per thread.
// Edges: unchecked interior path, zero-filled loads and checked stores at the edges; any M, N, K.
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
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += a[k % 2][i] * b[k % 2][j];
        }
        if (more) {
            ta.store<LDA_S>(&As[buf ^ 1][0][0], tid);
            tb.store<LDB_S>(&Bs[buf ^ 1][0][0], tid);
            __syncthreads();
            buf ^= 1;
            frag8(a[BK % 2], As[buf][0], tr * 4);
            frag8(b[BK % 2], Bs[buf][0], tc * 4);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] += a[(BK - 1) % 2][i] * b[(BK - 1) % 2][j];
    }
    // acc[i][j]: row (i < 4 ? tr*4 + i : 64 + tr*4 + i-4), column (j < 4 ? tc*4 + j : 64 + tc*4 + j-4)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + (i / 4) * 64 + tr * 4 + i % 4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + h * 64 + tc * 4;
            const float4 v = make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            if (interior) tg_store4<false>(C, ldc, m, n, M, N, v);
            else          tg_store4<true>(C, ldc, m, n, M, N, v);
        }
    }
}
