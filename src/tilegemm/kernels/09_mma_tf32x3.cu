// Rung 9 - 09_mma_tf32x3: the products move from the FFMA pipe to the tensor cores, at FP32
// accuracy.  Follows the 3xTF32 split of Ootomo & Yokota and CUTLASS (docs/sources.md); measured
// in docs/perf-notes.md.
//
// Changed from rung 8:
// - The inner product is mma.sync.m16n8k8 with TF32 operands (sm_80+): a warp multiplies a 16 x 8
//   by an 8 x 8 tile in one instruction.  TF32 keeps 10 of FP32's 23 mantissa bits, so each value
//   is split into two TF32 numbers, big + small, as its fragment is read from shared memory, and
//   three products are summed: big*big, and apart from it big*small + small*big, added at the end
//   (-D TG_MMA_PASSES=1 keeps big*big alone: plain TF32).  tg_mma.cuh has the split, the fragment
//   layout and why its LDS.128 reads are conflict-free.
// - Work is divided by warps, not threads: 4 warps side by side, each a 64 x 32 tile of C (16 mma
//   tiles), on a 64 x 128 block tile, two blocks an SM (their 64 x 128 tiles beat one 128 x 128
//   block of 8 warps: 54.8 against 50.5 TFLOPS at 4096^3, the second block's warps hiding the mma
//   latency; docs/perf-notes.md).  A lane still ends with an 8 x 8 tile of C in registers (plus
//   8 x 8 small-product sums), in whole float4 runs, so the epilogue is rung 8's.
// - BK = 8 by default (one mma k step per shared tile; the big products handed to FP32 every 8 k;
//   -D BK=16 also builds).
// Kept from rung 8: the cp.async pipeline (-D STAGES=3) and its shared layout As[k][m], Bs[k][n],
// rows padded by 4 words; the block swizzle (tg_tile_origin).
// Edges: any M, N, K >= 1 (zero-filled first tile, clamped m/n, checked stores), as in rung 8.
#include "tg_tiles.cuh"  // tg_store4
#include "tg_async.cuh"
#include "tg_mma.cuh"

#define BM 64
#define BN 128
#define NT 128
#define WN 4  // warps along N (1 along M)
#ifndef BK
#define BK 8
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef SWIZZLE
#define SWIZZLE 8
#endif
#define LDA_S (BM + 4)
#define LDB_S (BN + 4)
static_assert(BK % 8 == 0, "BK is a multiple of 8 (the mma's k)");
static_assert(STAGES >= 2 && STAGES <= 4, "STAGES is 2, 3 or 4");
static_assert(NT / 32 == (BM / 64) * (BN / 32) && BN / 32 == WN, "warps of 64 x 32 tile the block");

extern "C" __global__ void __launch_bounds__(NT, 2) tilegemm_kernel(TG_GEMM_PARAMS) {
    extern __shared__ __align__(16) float smem[];
    constexpr int SA = BK * LDA_S, SS = SA + BK * LDB_S;  // floats: A tile, whole stage [A | B]
    const unsigned s0 = tg_smem(smem);
    const int tid = threadIdx.x;
    int m0, n0;
    tg_tile_origin<BM, BN>(blockIdx.x, M, N, SWIZZLE, m0, n0);
    float acc[8][8], big[8][8], lo[8][8];  // all of K; a k tile's big products; the small ones
#pragma unroll
    for (int q = 0; q < 8; ++q)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[q][j] = lo[q][j] = 0.0f;
    const TgMmaLane<WN> lane(tid);
    const int row = tg_mma_row(0, tid);  // this lane's first shared row of a k step

    const int T = (K + BK - 1) / BK;
    AsyncOperands<BM, BN, BK, NT, LDA_S, LDB_S> g;
    g.init(A, lda, B, ldb, M, N, K, m0, n0, K - T * BK, tid);
    g.copy<true>(s0, s0 + 4 * SA, true, lda, ldb, tid);
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) g.copy<false>(s0 + 4 * s * SS, s0 + 4 * (s * SS + SA), s < T, lda, ldb, tid);
    const float *as0 = smem + row * LDA_S + lane.a, *bs0 = smem + SA + row * LDB_S + lane.b;

    int ro = 0, wo = (STAGES - 1) * SS;  // the stage read now (tile t) and the one filled now
    for (int t = 0; t < T; ++t) {
        tg_cp_wait<STAGES - 2>();  // this thread's copies of tile t have landed...
        __syncthreads();           // ...and everyone's; everyone is done reading tile t-1
        g.copy<false>(s0 + 4 * wo, s0 + 4 * (wo + SA), t + STAGES - 1 < T, lda, ldb, tid);
        tg_mma_tile<BK, LDA_S, LDB_S>(acc, big, lo, as0 + ro, bs0 + ro);
        wo = ro;
        ro = ro == (STAGES - 1) * SS ? 0 : ro + SS;
    }
    tg_cp_wait<0>();

    // acc[q][j] + lo[q][j] (tg_mma_sum) is C(m0 + lane.r0 + (q / 4) * 32 + q % 4, n0 + lane.c0 + j)
    const bool interior = m0 + BM <= M && n0 + BN <= N;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const int m = m0 + lane.r0 + (q / 4) * 32 + q % 4;
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const float4 v = make_float4(tg_mma_sum(acc[q][4 * p], lo[q][4 * p]), tg_mma_sum(acc[q][4 * p + 1], lo[q][4 * p + 1]),
                                         tg_mma_sum(acc[q][4 * p + 2], lo[q][4 * p + 2]), tg_mma_sum(acc[q][4 * p + 3], lo[q][4 * p + 3]));
            if (interior) tg_store4<false>(C, ldc, m, n0 + lane.c0 + 4 * p, M, N, v);
            else          tg_store4<true>(C, ldc, m, n0 + lane.c0 + 4 * p, M, N, v);
        }
    }
}
