// Rung 8 - 08_hopper: what the H100 needs beyond the source documents (docs/sources.md), each choice
// measured (docs/perf-notes.md).
//
// Changed from rung 7:
// - cp.async pipeline (-D STAGES=3): tiles go global -> shared by LDGSTS, with STAGES-1 tiles in
//   flight while one is read.  No staging registers and no STS; the A tile is transposed on the
//   way in by 4-byte copies, the B tile goes by 16-byte copies (tg_async.cuh).  The first tile is
//   the partial one and m/n edges are clamped, so the K loop has no branch and no edge code.
//   A stage holds the A tile then the B tile, and the read / write stages move by additions.
// - A larger thread tile: 16 x 8 outputs per thread (four 4 x 4 patches), 256 threads on a 256 x
//   128 block tile, one block per SM (about 240 registers).  Per k step a thread reads 16 + 8
//   values for 128 FFMAs instead of 8 + 8 for 64.
// - Warps of (32/LN) x LN threads (-D LN=2: 16 x 2), chosen by measurement among 2, 4, 8.
// - Block swizzle (-D SWIZZLE=G, 0 = off): blocks are numbered down groups of G block-rows, so the
//   blocks resident together share A rows and B columns in L2.
// - Epilogue: float4 stores straight from registers (see the note there); rung 7's staging
//   through shared memory is not carried over (the epilogue is <1% of the time at 4096^3).
// Kept: 4 x 4 patches so fragment reads are LDS.128, rows padded by 4 words, BK = 8.
// Constraints: STAGES is 2, 3 or 4 (dynamic shared memory: STAGES * 8 * (260 + 132) * 4 bytes).
// Edges: any M, N, K >= 1 (zero-filled first tile, clamped m/n, checked stores).
#include "tg_tiles.cuh"  // tg_store4
#include "tg_async.cuh"

#define BM 256
#define BN 128
#define BK 8
#define TM 16
#define TN 8
#define NT 256
#ifndef STAGES
#define STAGES 3
#endif
#ifndef SWIZZLE
#define SWIZZLE 8
#endif
#ifndef LN
#define LN 2
#endif
#define LM (32 / LN)
#define ROWS_T (BM / TM)  // 16 threads along M
#define COLS_T (BN / TN)  // 16 threads along N
#define WARPS_N (COLS_T / LN)
#define LDA_S (BM + 4)
#define LDB_S (BN + 4)
static_assert(STAGES >= 2 && STAGES <= 4, "STAGES is 2, 3 or 4");
static_assert(32 % LN == 0 && COLS_T % LN == 0 && ROWS_T % LM == 0, "warps tile the block");

// the 4*P values a thread needs from one k-row of a tile: P float4s, STRIDE floats apart
template <int P, int STRIDE>
__device__ __forceinline__ void frag(float *r, const float *row) {
#pragma unroll
    for (int p = 0; p < P; ++p)
        *reinterpret_cast<float4 *>(r + 4 * p) = *reinterpret_cast<const float4 *>(row + p * STRIDE);
}

__device__ __forceinline__ void outer(float (*acc)[TN], const float *a, const float *b) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
}

extern "C" __global__ void __launch_bounds__(NT, 1) tilegemm_kernel(TG_GEMM_PARAMS) {
    extern __shared__ __align__(16) float smem[];
    // a stage is the A tile [BK][LDA_S] then the B tile [BK][LDB_S]: one offset locates both
    constexpr int SA = BK * LDA_S, SS = SA + BK * LDB_S;  // floats: A tile, whole stage
    const unsigned s0 = tg_smem(smem);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int tr = (warp / WARPS_N) * LM + lane / LN;  // thread row 0..15
    const int tc = (warp % WARPS_N) * LN + lane % LN;  // thread column 0..15
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
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    const int ao = tr * 4, bo = tc * 4;  // a thread's first column in the As / Bs rows

    // prologue: tiles 0 .. STAGES-2 in flight (tile 0 is the partial one)
    const int T = (K + BK - 1) / BK;
    AsyncOperands<BM, BN, BK, NT, LDA_S, LDB_S> g;
    g.init(A, lda, B, ldb, M, N, K, m0, n0, K - T * BK, tid);
    g.copy<true>(s0, s0 + 4 * SA, true, lda, ldb, tid);
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) g.copy<false>(s0 + 4 * s * SS, s0 + 4 * (s * SS + SA), s < T, lda, ldb, tid);
    tg_cp_wait<STAGES - 2>();
    __syncthreads();
    float a[2][TM], b[2][TN];
    const float *as0 = smem + ao, *bs0 = smem + SA + bo;  // this thread's fragments in stage 0
    frag<TM / 4, ROWS_T * 4>(a[0], as0);
    frag<TN / 4, COLS_T * 4>(b[0], bs0);

    // offsets of the stage read now (tile t) and of the one filled now (tile t+STAGES-1), moved by
    // additions: a multiply here (stage index x stage size) runs on the FMA pipe beside the FFMAs
    int ro = 0, wo = (STAGES - 1) * SS;
    for (int t = 0; t < T; ++t) {
        // the stage of tile t-1: every thread finished reading it before the last barrier
        g.copy<false>(s0 + 4 * wo, s0 + 4 * (wo + SA), t + STAGES - 1 < T, lda, ldb, tid);
        const float *as = as0 + ro, *bs = bs0 + ro;
#pragma unroll
        for (int k = 0; k < BK - 1; ++k) {  // fragment k+1 from shared memory while k is used
            frag<TM / 4, ROWS_T * 4>(a[(k + 1) % 2], as + (k + 1) * LDA_S);
            frag<TN / 4, COLS_T * 4>(b[(k + 1) % 2], bs + (k + 1) * LDB_S);
            outer(acc, a[k % 2], b[k % 2]);
        }
        tg_cp_wait<STAGES - 2>();  // this thread's copies of tile t+1 have landed...
        __syncthreads();           // ...and everyone's; everyone is done reading tile t
        wo = ro;
        ro = ro == (STAGES - 1) * SS ? 0 : ro + SS;
        frag<TM / 4, ROWS_T * 4>(a[BK % 2], as0 + ro);
        frag<TN / 4, COLS_T * 4>(b[BK % 2], bs0 + ro);
        outer(acc, a[(BK - 1) % 2], b[(BK - 1) % 2]);
    }
    tg_cp_wait<0>();

    // acc[i][j] is row (i/4)*64 + tr*4 + i%4, column (j/4)*64 + tc*4 + j%4.  Stored as float4,
    // but of acc + 0 (exact: an FFMA sum started at +0 is never -0): an STG.128 of the
    // accumulators themselves needs each four in consecutive registers, and under that
    // constraint ptxas paired FFMA sources in one register bank far more often (SASS inspector,
    // "hopper" model: 1036 extra cycles per tile of 1024 FFMAs, against 226 this way).  Measured
    // on the H100 (docs/perf-notes.md): 50.0 TFLOPS at 4096^3 this way, 48.9 with scalar stores,
    // 44.0 for an earlier version that scored 348.
    const bool interior = m0 + BM <= M && n0 + BN <= N;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + (i / 4) * ROWS_T * 4 + tr * 4 + i % 4;
#pragma unroll
        for (int p = 0; p < TN / 4; ++p) {
            const int n = n0 + p * COLS_T * 4 + tc * 4;
            const float4 v = make_float4(__fadd_rn(acc[i][4 * p], 0.0f), __fadd_rn(acc[i][4 * p + 1], 0.0f),
                                         __fadd_rn(acc[i][4 * p + 2], 0.0f), __fadd_rn(acc[i][4 * p + 3], 0.0f));
            if (interior) tg_store4<false>(C, ldc, m, n, M, N, v);
            else          tg_store4<true>(C, ldc, m, n, M, N, v);
        }
    }
}
