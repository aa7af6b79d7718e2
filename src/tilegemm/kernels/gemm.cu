// gemm.cu - the production kernel family behind tilegemm.matmul / tilegemm.gemm.
//
// D[z] = alpha * A[z] B[z] + beta * C[z] for every batch z, one kernel for all configs.  It is rung 8
// (08_hopper.cu) with every fixed number turned into a parameter, plus what a library needs on top:
// batches, alpha/beta, a separate C input, split-K.  The config and its constraints are declared once
// in Python (registry.py, FAMILY); the static_asserts below repeat the ones this file relies on.
//
// Parameters (-D):
//   BM, BN     block tile (rows, columns of D per block)      BK   tile depth (k per shared tile)
//   TM, TN     thread tile, each split into 4 x 4 patches (GEMM illustrated §5.2, docs/sources.md)
//              so every fragment read is one LDS.128 and a quarter-warp reads one contiguous run of B
//   LN         lanes of a warp along N (the warp is 32/LN x LN threads)
//   MINB       blocks per SM asked of ptxas (__launch_bounds__); 0: no request
//   SWIZZLE    block rows per group of the 1-D block order (L2 reuse, rung 8); 0/1: off
//   STAGES     0: tiles pass through registers into two shared buffers (rung 8's pipeline);
//              >= 2: STAGES shared buffers filled by cp.async, STAGES - 1 tiles in flight while
//              one is read, no staging registers and no branch in the K loop (tg_async.cuh)
//   ORDER      the order of a k step's TM x TN FFMAs: 0 row by row; 1 row by row, every other
//              row backwards (a serpentine).  The FFMAs are the same; ptxas allocates registers
//              differently, and the register-bank conflicts differ (docs/perf-notes.md)
//   MMA        0: FFMAs (everything above).  1 or 3: the products on the tensor cores, TF32 or
//              TF32x3 (tg_mma.cuh; rung 9): warps of 64 x 32, TM = TN = 8, BK a multiple of 8,
//              STAGES >= 2; LN and ORDER are not used
//   TG_VEC_A, TG_VEC_B, TG_VEC_D: each operand's access width (tg_common.cuh; 3 or 6 for A or B: rows of
//              odd length, or of twice an odd length, copied by rows, tg_async.cuh's RowClassTile); TG_TRANS_A,
//              TG_TRANS_B as in every rung; TG_OFF64 as in tg_async.cuh
//   KS         k slices a block: KS groups of (BM/TM) x (BN/TN) threads share each stage's copies and
//              each reads BK/KS of its k rows into its own accumulators of the whole tile; at the end
//              slices 1.. hand theirs to slice 0 through shared memory, which adds them in slice
//              order and stores the tile (sliced K within a block: KS times the warps a tile, for
//              products with too few tiles to fill the SMs, without split-K's pass through global
//              memory).  KS > 1 takes STAGES >= 2, MMA = 0, SK = 0 and BK an even multiple of KS
//   SK         0: one block per tile (and split).  1: stream-K (Osama et al., PPoPP'23): a fixed grid
//              of G resident blocks shares the count * tiles * ceil(K / BK) k-iterations evenly;
//              see tilegemm_gemm's stream-K branch.  2: split-K whose splits add up the tile
//              themselves, each a share of it, with no second kernel (SK == 2 branch)
//   SK_SPREAD  stream-K: a tile shared by n blocks is added up by all n, a share each, where n - 1 > SK_SPREAD
//              times the blocks an SM, else by its owner alone (builds.SK_SPREAD)
// W, flags, epoch, count, first: the workspace, hand-over flags, launch epoch, number of products
// and first block of the launch for SK = 1, 2 (unused when SK = 0).
// Grid (SK = 0): x = block tiles of one product (swizzled), z = batch * splits.  Split s of batch b
// sums k in [s * k_split, min(K, (s + 1) * k_split)) and writes its own D[z]; the host then adds the
// splits (splitk_reduce.cu), so results stay deterministic.
// Edges: unchecked interior path, zero-filled predicated loads and checked stores at the edges.
// PDL (sm_90+): the host launches the kernel as a programmatic dependent of the kernel before it in
// the stream, so its blocks may be scheduled while that kernel finishes; griddepcontrol.wait, the
// first thing every thread does, holds them until that kernel has completed and its stores are
// visible (it returns at once after an ordinary launch).
#include "tg_tiles.cuh"
#include "tg_async.cuh"
#if MMA
#define TG_MMA_PASSES MMA
#include "tg_mma.cuh"
#endif

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef LN
#define LN 8
#endif
#ifndef MINB
#define MINB 2
#endif
#ifndef SWIZZLE
#define SWIZZLE 8
#endif
#ifndef STAGES
#define STAGES 0
#endif
#ifndef ORDER
#define ORDER 1
#endif
#ifndef SK
#define SK 0
#endif
#ifndef MMA
#define MMA 0
#endif
#ifndef KS
#define KS 1
#endif
#ifndef SK_SPREAD
#define SK_SPREAD 3
#endif

#define ROWS_T (BM / TM)            // threads along M
#define COLS_T (BN / TN)            // threads along N
#define NTS (ROWS_T * COLS_T)       // threads per k slice
#define NT (NTS * KS)               // threads per block
#define BKS (BK / KS)               // k rows of a stage each slice reads
#define LM (32 / LN)                // lanes of a warp along M
#define WARPS_N (COLS_T / LN)
#define PAD 4
// a thread's acc[i][j] is C(m0 + (i / 4) * RSTEP + tr * 4 + i % 4, n0 + (j / 4) * CSTEP + tc * 4 + j % 4)
#if MMA
#define RSTEP 32  // tg_mma.cuh: a lane's rows are two runs of four, 32 apart; its 8 columns one run
#define CSTEP 4
#define WN_MMA (BN / 32)  // warps along N, each a 64 x 32 tile
#else
#define RSTEP (ROWS_T * 4)
#define CSTEP (COLS_T * 4)
#endif
#define LDA_S (BM + PAD)
#define LDB_S (BN + PAD)
static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4 x 4 patches");
static_assert(BM % TM == 0 && BN % TN == 0, "the thread tile divides the block tile");
static_assert(32 % LN == 0 && COLS_T % LN == 0 && ROWS_T % LM == 0, "warps tile the block");
static_assert(NT % 32 == 0 && NT <= 1024, "whole warps, at most 1024 threads");
static_assert(BK % 4 == 0, "BK is a multiple of 4 (float4 loads along k)");
static_assert(STAGES == 0 || (STAGES >= 2 && STAGES <= 8), "STAGES is 0 or 2..8");
static_assert(ORDER == 0 || ORDER == 1, "ORDER is 0 (rows) or 1 (serpentine)");
static_assert(MMA == 0 || (TM == 8 && TN == 8 && BM % 64 == 0 && BN % 32 == 0 && BK % 8 == 0 && STAGES >= 2),
              "MMA: 8 x 8 per lane, warps of 64 x 32, BK a multiple of 8, a cp.async pipeline");
static_assert(KS == 1 || (KS >= 2 && KS <= 4 && BK % (2 * KS) == 0 && NTS % 32 == 0 && STAGES >= 2 && MMA == 0 && SK == 0),
              "KS > 1: BK an even multiple of KS (a tile's next first row lands in fragment buffer 0), whole warps a "
              "slice, a cp.async pipeline, FFMAs, one block per tile");
static_assert(SK >= 0 && SK <= 2, "SK is 0 (a block per tile), 1 (stream-K) or 2 (split-K summed in the kernel)");

#if MINB > 0
#define TG_BOUNDS __launch_bounds__(NT, MINB)
#else
#define TG_BOUNDS __launch_bounds__(NT)
#endif

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
        for (int jj = 0; jj < TN; ++jj) {
            const int j = (ORDER == 1 && (i & 1)) ? TN - 1 - jj : jj;
            acc[i][j] += a[i] * b[j];
        }
}

// D(m, n..n+3) = alpha * v (+ beta * C(m, n..n+3) when BETA); the caller takes BETA = false when
// beta == 0, so C is not read then (BLAS semantics: NaN or Inf in C must not leak through a zero
// beta), and the accumulators' registers are not shared with C's values in that common case.
template <bool EDGE, bool BETA>
__device__ __forceinline__ void store4(float *D, tg_idx ldd, const float *C, tg_idx ldc, int m, int n,
                                       int M, int N, float4 v, float alpha, float beta) {
    if (EDGE && m >= M) return;
    float r[4] = {alpha * v.x, alpha * v.y, alpha * v.z, alpha * v.w};
    float *d = D + (tg_idx)m * ldd + n;
    const float *c = C + (tg_idx)m * ldc + n;
    if (!EDGE && !BETA && TG_VEC_D == 4) {
        *reinterpret_cast<float4 *>(d) = make_float4(r[0], r[1], r[2], r[3]);
    } else if (!EDGE && !BETA && TG_VEC_D == 2) {
        reinterpret_cast<float2 *>(d)[0] = make_float2(r[0], r[1]);
        reinterpret_cast<float2 *>(d)[1] = make_float2(r[2], r[3]);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (EDGE && n + j >= N) break;
            d[j] = BETA ? r[j] + beta * c[j] : r[j];
        }
    }
}

// Epilogue: acc[i][j] is row (i/4)*ROWS_T*4 + tr*4 + i%4, column (j/4)*COLS_T*4 + tc*4 + j%4.
// One float4 store per 4 x 4 patch row: a warp writes LM rows of LN*16 contiguous bytes each.
template <bool EDGE, bool BETA>
__device__ __forceinline__ void epilogue(float (*acc)[TN], float *D, tg_idx ldd, const float *C, tg_idx ldc,
                                         int m0, int n0, int tr, int tc, int M, int N, float alpha, float beta) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + (i / 4) * RSTEP + tr * 4 + i % 4;
#pragma unroll
        for (int p = 0; p < TN / 4; ++p) {
            const int n = n0 + p * CSTEP + tc * 4;
            const float4 v = make_float4(acc[i][4 * p], acc[i][4 * p + 1], acc[i][4 * p + 2], acc[i][4 * p + 3]);
            store4<EDGE, BETA>(D, ldd, C, ldc, m, n, M, N, v, alpha, beta);
        }
    }
}

// The interior epilogue (beta = 0) where D's rows are not all 8-byte aligned (TG_VEC_D = 1: an odd
// leading dimension, every other row 4 bytes off, or D itself 4 bytes off): a row that starts
// aligned takes two 8-byte stores per patch; one that starts 4 bytes off stores (n + 1, n + 2) and
// (n + 3, n + 4), n + 4 shuffled from the next of the LN lanes that share the row, the run's first
// and last column alone (4-byte stores fill a quarter of each of 4 sectors per warp store: the
// result's stores took as long as a short K loop).
__device__ __forceinline__ void epilogue_pairs(float (*acc)[TN], float *D, tg_idx ldd, int m0, int n0, int tr,
                                               int tc, float alpha) {
    const int run = tc % LN;  // this lane's place in its warp's run of LN lanes along the row
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        float *row = D + (tg_idx)(m0 + (i / 4) * RSTEP + tr * 4 + i % 4) * ldd;
        const bool shift = (reinterpret_cast<unsigned long long>(row) & 7) != 0;
#pragma unroll
        for (int p = 0; p < TN / 4; ++p) {
            const int n = n0 + p * CSTEP + tc * 4;
            const float r0 = alpha * acc[i][4 * p], r1 = alpha * acc[i][4 * p + 1];
            const float r2 = alpha * acc[i][4 * p + 2], r3 = alpha * acc[i][4 * p + 3];
            const float next = __shfl_down_sync(0xffffffff, r0, 1);  // column n + 4 (unless run == LN - 1)
            if (!shift) {
                *reinterpret_cast<float2 *>(row + n) = make_float2(r0, r1);
                *reinterpret_cast<float2 *>(row + n + 2) = make_float2(r2, r3);
            } else {
                if (run == 0) row[n] = r0;
                *reinterpret_cast<float2 *>(row + n + 1) = make_float2(r1, r2);
                if (run < LN - 1) *reinterpret_cast<float2 *>(row + n + 3) = make_float2(r3, next);
                else              row[n + 3] = r3;
            }
        }
    }
}

// The K loop of rung 8 (STAGES == 0): tile t+1 is loaded into registers while tile t is read from
// one of two shared buffers, then stored to the other; one barrier per tile.
__device__ __forceinline__ void k_loop_registers(float (*acc)[TN], float *smem, const float *A, tg_idx lda,
                                                 const float *B, tg_idx ldb, int M, int N, int K, int m0,
                                                 int n0, bool interior, int tid, int ao, int bo) {
    float *As = smem;                      // [2][BK][LDA_S]
    float *Bs = smem + 2 * BK * LDA_S;     // [2][BK][LDB_S]
    ATile<BM, BK, NT> ta;
    BTile<BK, BN, NT> tb;
    ta.start(A, lda, m0, tid);
    tb.start(B, ldb, n0, tid);
    float a[2][TM], b[2][TN];

    if (interior && BK <= K) { ta.load<false>(lda, m0, 0, M, K, tid); tb.load<false>(ldb, 0, n0, K, N, tid); }
    else                     { ta.load<true>(lda, m0, 0, M, K, tid);  tb.load<true>(ldb, 0, n0, K, N, tid); }
    ta.store<LDA_S>(As, tid);
    tb.store<LDB_S>(Bs, tid);
    __syncthreads();
    frag<TM / 4, ROWS_T * 4>(a[0], As + ao);
    frag<TN / 4, COLS_T * 4>(b[0], Bs + bo);

    int buf = 0;
    for (int kt = 0; kt < K; kt += BK) {
        const int next = kt + BK;
        const bool more = next < K;
        if (more) {  // prefetch tile t+1 into registers
            ta.next(lda);
            tb.next(ldb);
            if (interior && next + BK <= K) { ta.load<false>(lda, m0, next, M, K, tid); tb.load<false>(ldb, next, n0, K, N, tid); }
            else                            { ta.load<true>(lda, m0, next, M, K, tid);  tb.load<true>(ldb, next, n0, K, N, tid); }
        }
        const float *as = As + buf * BK * LDA_S, *bs = Bs + buf * BK * LDB_S;
#pragma unroll
        for (int k = 0; k < BK - 1; ++k) {
            frag<TM / 4, ROWS_T * 4>(a[(k + 1) % 2], as + (k + 1) * LDA_S + ao);
            frag<TN / 4, COLS_T * 4>(b[(k + 1) % 2], bs + (k + 1) * LDB_S + bo);
            outer(acc, a[k % 2], b[k % 2]);
        }
        if (more) {
            buf ^= 1;
            ta.store<LDA_S>(As + buf * BK * LDA_S, tid);
            tb.store<LDB_S>(Bs + buf * BK * LDB_S, tid);
            __syncthreads();
            frag<TM / 4, ROWS_T * 4>(a[BK % 2], As + buf * BK * LDA_S + ao);
            frag<TN / 4, COLS_T * 4>(b[BK % 2], Bs + buf * BK * LDB_S + bo);
        }
        outer(acc, a[(BK - 1) % 2], b[(BK - 1) % 2]);
    }
}

// The K loop with cp.async (STAGES >= 2): tiles t+1 .. t+STAGES-1 are in flight while tile t is
// read; the copy of tile t+STAGES-1 goes into the stage tile t-1 used, which every thread finished
// reading before the last barrier.  One barrier per tile; the first tile is the partial one, so the
// loop itself has no edge code (tg_async.cuh).  A stage holds the A tile, then the B tile, so one
// offset, moved by additions (no multiply on the FMA pipe), locates both.
__device__ __forceinline__ void k_loop_async(float (*acc)[TN], float *smem, const float *A, tg_idx lda,
                                             const float *B, tg_idx ldb, int M, int N, int K, int m0,
                                             int n0, int tid, int ao, int bo) {
#if STAGES >= 2
    constexpr int SA = BK * LDA_S, SS = SA + BK * LDB_S;  // floats: A tile, whole stage [A | B]
    const unsigned s0 = tg_smem(smem);
    const int T = (K + BK - 1) / BK;   // tiles; the first holds k in [K - T*BK, K - (T-1)*BK)
    AsyncOperands<BM, BN, BK, NT, LDA_S, LDB_S> g;
    g.init(A, lda, B, ldb, M, N, K, m0, n0, K - T * BK, tid);
    g.template copy<true>(s0, s0 + 4 * SA, true, lda, ldb, tid);
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) g.template copy<false>(s0 + 4 * s * SS, s0 + 4 * (s * SS + SA), s < T, lda, ldb, tid);
    tg_cp_wait<STAGES - 2>();
    __syncthreads();
    float a[2][TM], b[2][TN];
    const float *as0 = smem + ao, *bs0 = smem + SA + bo;  // this thread's fragments in stage 0
    frag<TM / 4, ROWS_T * 4>(a[0], as0);
    frag<TN / 4, COLS_T * 4>(b[0], bs0);

    int ro = 0, wo = (STAGES - 1) * SS;  // offsets of the stage read now (tile t) and filled now
    for (int t = 0; t < T; ++t) {
        g.template copy<false>(s0 + 4 * wo, s0 + 4 * (wo + SA), t + STAGES - 1 < T, lda, ldb, tid);
        const float *as = as0 + ro, *bs = bs0 + ro;
#pragma unroll
        for (int k = 0; k < BKS - 1; ++k) {  // this slice's k rows of the tile (all of them when KS = 1)
            frag<TM / 4, ROWS_T * 4>(a[(k + 1) % 2], as + (k + 1) * LDA_S);
            frag<TN / 4, COLS_T * 4>(b[(k + 1) % 2], bs + (k + 1) * LDB_S);
            outer(acc, a[k % 2], b[k % 2]);
        }
        tg_cp_wait<STAGES - 2>();  // this thread's copies of tile t+1 have landed...
        __syncthreads();           // ...and everyone's; everyone is done reading tile t
        wo = ro;
        ro = ro == (STAGES - 1) * SS ? 0 : ro + SS;
        frag<TM / 4, ROWS_T * 4>(a[BKS % 2], as0 + ro);
        frag<TN / 4, COLS_T * 4>(b[BKS % 2], bs0 + ro);
        outer(acc, a[(BKS - 1) % 2], b[(BKS - 1) % 2]);
    }
    tg_cp_wait<0>();
#endif
}

// The K loop on the tensor cores (MMA = 1: TF32, 3: TF32x3; tg_mma.cuh): k_loop_async's pipeline,
// each tile's k steps of 8 done by a warp's 16 (or 48) mma.sync; acc ends as the sum of the big
// and the small products.
__device__ __forceinline__ void k_loop_mma(float (*acc)[TN], float *smem, const float *A, tg_idx lda,
                                           const float *B, tg_idx ldb, int M, int N, int K, int m0, int n0,
                                           int tid) {
#if MMA
    constexpr int SA = BK * LDA_S, SS = SA + BK * LDB_S;
    const unsigned s0 = tg_smem(smem);
    const int T = (K + BK - 1) / BK;
    AsyncOperands<BM, BN, BK, NT, LDA_S, LDB_S> g;
    g.init(A, lda, B, ldb, M, N, K, m0, n0, K - T * BK, tid);
    g.template copy<true>(s0, s0 + 4 * SA, true, lda, ldb, tid);
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) g.template copy<false>(s0 + 4 * s * SS, s0 + 4 * (s * SS + SA), s < T, lda, ldb, tid);
    const TgMmaLane<WN_MMA> lane(tid);
    const int row = tg_mma_row(0, tid);
    const float *as0 = smem + row * LDA_S + lane.a, *bs0 = smem + SA + row * LDB_S + lane.b;
    float big[8][8], lo[8][8];  // a k tile's big products; the small ones over all of K
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) lo[i][j] = 0.0f;
    int ro = 0, wo = (STAGES - 1) * SS;
    for (int t = 0; t < T; ++t) {
        tg_cp_wait<STAGES - 2>();  // tile t has landed, everyone is done reading tile t-1
        __syncthreads();
        g.template copy<false>(s0 + 4 * wo, s0 + 4 * (wo + SA), t + STAGES - 1 < T, lda, ldb, tid);
        tg_mma_tile<BK, LDA_S, LDB_S>(acc, big, lo, as0 + ro, bs0 + ro);
        wo = ro;
        ro = ro == (STAGES - 1) * SS ? 0 : ro + SS;
    }
    tg_cp_wait<0>();
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = tg_mma_sum(acc[i][j], lo[i][j]);
#endif
}

// Helpers of the SK = 1 and SK = 2 kernels.  The SK = 0 kernel spells the same steps out inline, as it was measured:
// calling these from it changes ptxas's register allocation of the K loop in some configs (TT at
// 256 x 128, NN at 128 x 128 with 8 x 8 threads), and with it the speed (docs/perf-notes.md).

// block tile number r of a product -> (m0, n0): SWIZZLE block rows at a time (rung 8)
__device__ __forceinline__ void tile_origin(int r, int M, int N, int &m0, int &n0) {
    tg_tile_origin<BM, BN>(r, M, N, SWIZZLE, m0, n0);
}

// acc = the product of the tile at (m0, n0) over the K columns of A (rows of B) that A and B start at
__device__ __forceinline__ void tile_mac(float (*acc)[TN], float *smem, const float *A, tg_idx lda, const float *B,
                                         tg_idx ldb, int M, int N, int K, int m0, int n0, int tid, int tr, int tc) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    const int ao = tr * 4, bo = tc * 4;  // a thread's first column in the As / Bs rows
    const bool interior = m0 + BM <= M && n0 + BN <= N;
    if (MMA)              k_loop_mma(acc, smem, A, lda, B, ldb, M, N, K, m0, n0, tid);
    else if (STAGES >= 2) k_loop_async(acc, smem, A, lda, B, ldb, M, N, K, m0, n0, tid, ao, bo);
    else                  k_loop_registers(acc, smem, A, lda, B, ldb, M, N, K, m0, n0, interior, tid, ao, bo);
}

__device__ __forceinline__ void tile_store(float (*acc)[TN], float *D, tg_idx ldd, const float *C, tg_idx ldc,
                                           int m0, int n0, int tr, int tc, int M, int N, float alpha, float beta) {
    // beta != 0 takes the checked path (scalar C reads): a fused float4 read-modify-write made
    // ptxas spill in the main loop of the 128-register configs
    const bool interior = m0 + BM <= M && n0 + BN <= N;
    if (beta == 0.0f && interior && TG_VEC_D == 1 && !MMA) epilogue_pairs(acc, D, ldd, m0, n0, tr, tc, alpha);
    else if (beta == 0.0f && interior) epilogue<false, false>(acc, D, ldd, C, ldc, m0, n0, tr, tc, M, N, alpha, beta);
    else if (beta == 0.0f)        epilogue<true, false>(acc, D, ldd, C, ldc, m0, n0, tr, tc, M, N, alpha, beta);
    else                          epilogue<true, true>(acc, D, ldd, C, ldc, m0, n0, tr, tc, M, N, alpha, beta);
}

// the hand-over between blocks (SK = 1, 2): a flag per block (SK = 1: two, one per slot of W), set to
// this launch's epoch (the host counts launches per stream, so flags never need resetting);
// release/acquire at GPU scope.  Blocks wait for flags that blocks of the same launch set, so those
// blocks must be resident at once: the host sizes the grids from the occupancy query
__device__ __forceinline__ int tg_ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void tg_st_release(int *p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The fix-up of SK = 1 and 2: this block's share of a tile, the float4 groups q in [q0, q1) of every
// thread's acc (q = i * TN / 4 + p: row i, columns 4p..4p+3 of the thread tile), is the sum of the
// tile's n partials in W, the first at `first`, the others at second, second + stride, ... (a slot
// of W holds element (i, j) of thread tid at (i * TN + j) * NT + tid), added in contributor order,
// so results do not depend on timing; then it is written to D (the tile at m0, n0).  Two groups at
// a time, four contributors unrolled: 32 independent loads in flight per thread (a chain of
// dependent L2 loads per element made a fix-up latency-bound, docs/perf-notes.md).
__device__ __forceinline__ void share_fixup(const float *first, const float *second, tg_idx stride, int n, int q0,
                                            int q1, int tid, float *D, tg_idx ldd, const float *C, tg_idx ldc,
                                            int m0, int n0, int tr, int tc, int M, int N, float alpha, float beta) {
    const bool interior = m0 + BM <= M && n0 + BN <= N;
#pragma unroll 1
    for (int q = q0; q < q1; q += 2) {
        const int qb = min(q + 1, q1 - 1);  // the second group (the first again when q is the last)
        const int e0 = ((q / (TN / 4)) * TN + 4 * (q % (TN / 4))) * NT + tid;
        const int e1 = ((qb / (TN / 4)) * TN + 4 * (qb % (TN / 4))) * NT + tid;
        float4 v0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v1 = v0;
#pragma unroll 4
        for (int c = 0; c < n; ++c) {
            const float *w = c == 0 ? first : second + (c - 1) * stride;
            v0.x += __ldcg(w + e0);
            v0.y += __ldcg(w + e0 + NT);
            v0.z += __ldcg(w + e0 + 2 * NT);
            v0.w += __ldcg(w + e0 + 3 * NT);
            v1.x += __ldcg(w + e1);
            v1.y += __ldcg(w + e1 + NT);
            v1.z += __ldcg(w + e1 + 2 * NT);
            v1.w += __ldcg(w + e1 + 3 * NT);
        }
        for (int h = 0; h < 2 && q + h < q1; ++h) {
            const int qq = q + h, i = qq / (TN / 4), p = qq % (TN / 4);
            const int m = m0 + (i / 4) * RSTEP + tr * 4 + i % 4, nn = n0 + p * CSTEP + tc * 4;
            const float4 v = h == 0 ? v0 : v1;
            if (beta == 0.0f && interior) store4<false, false>(D, ldd, C, ldc, m, nn, M, N, v, alpha, beta);
            else if (beta == 0.0f)        store4<true, false>(D, ldd, C, ldc, m, nn, M, N, v, alpha, beta);
            else                          store4<true, true>(D, ldd, C, ldc, m, nn, M, N, v, alpha, beta);
        }
    }
}

extern "C" __global__ void TG_BOUNDS tilegemm_gemm(
    int M, int N, int K, const float *__restrict__ A, long long lda, long long sA,
    const float *__restrict__ B, long long ldb, long long sB, const float *C, long long ldc,
    long long sC, float *D, long long ldd, long long sD, float alpha, float beta, int k_split,
    int splits, float *W, int *flags, int epoch, int count, int first) {
    extern __shared__ __align__(16) float smem[];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");  // PDL: see the header
#endif
    const int tid = threadIdx.x, slice = tid / NTS, warp = (tid % NTS) / 32, lane = tid % 32;
#if MMA  // tg_mma.cuh's lane layout: warp rows of 64, columns of 32
    const int tr = (warp / WN_MMA) * 16 + lane / 4, tc = (warp % WN_MMA) * 8 + 2 * (lane % 4);
#else
    const int tr = (warp / WARPS_N) * LM + lane / LN;  // 0 .. ROWS_T-1
    const int tc = (warp % WARPS_N) * LN + lane % LN;  // 0 .. COLS_T-1
#endif
#if SK == 0
    // which product, which k range (C and D are offset after the main loop: fewer live registers)
    const int k0 = (blockIdx.z % splits) * k_split;
    K = min(K - k0, k_split);
    A += (blockIdx.z / splits) * sA + tg_a_off(0, k0, lda);
    B += (blockIdx.z / splits) * sB + tg_b_off(k0, 0, ldb);

    // 1-D grid -> (block row, block column), SWIZZLE block rows at a time (rung 8)
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

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    // a thread's first element in the As / Bs rows: its columns, its slice's first k row
    const int ao = tr * 4 + slice * BKS * LDA_S, bo = tc * 4 + slice * BKS * LDB_S;
    if (MMA)              k_loop_mma(acc, smem, A, lda, B, ldb, M, N, K, m0, n0, tid);
    else if (STAGES >= 2) k_loop_async(acc, smem, A, lda, B, ldb, M, N, K, m0, n0, tid, ao, bo);
    else                  k_loop_registers(acc, smem, A, lda, B, ldb, M, N, K, m0, n0, interior, tid, ao, bo);
#if KS > 1
    // slices 1.. hand their sums to slice 0 through the stages (every copy has landed: k_loop_async
    // waits for all), element (i, j) of thread t of slice s at ((s - 1) * TM * TN + i * TN + j) * NTS + t
    __syncthreads();  // every slice is done reading the stages
    if (slice > 0) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) smem[((slice - 1) * TM * TN + i * TN + j) * NTS + tid % NTS] = acc[i][j];
    }
    __syncthreads();
    if (slice > 0) return;
#pragma unroll
    for (int s = 1; s < KS; ++s)
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += smem[((s - 1) * TM * TN + i * TN + j) * NTS + tid];
#endif

    tile_store(acc, D + blockIdx.z * sD, ldd, C + (blockIdx.z / splits) * sC, ldc, m0, n0, tr, tc, M, N, alpha, beta);
#elif SK == 2
    // Split-K summed in the kernel, the summing spread over the splits.  Block first + blockIdx.x is
    // split s of tile t (splits consecutive blocks per tile; the host launches whole tiles, at most
    // as many blocks as are resident at once).  Each block stores its partial sums in its slot of W
    // and sets its flag; once the tile's splits have all set theirs, block s adds up its share of
    // the tile (the float4 groups q of every thread's acc in [s Q / splits, (s + 1) Q / splits))
    // over the splits, in split order (results do not depend on timing), and writes it to D.
    float acc[TM][TN];
    constexpr int Q = TM * TN / 4, SLOT = NT * TM * TN;
    const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    const int u = first + blockIdx.x, t = u / splits, s = u - t * splits, z = t / tiles;
    int m0, n0;
    tile_origin(t - z * tiles, M, N, m0, n0);
    const int k0 = s * k_split;
    tile_mac(acc, smem, A + z * sA + tg_a_off(0, k0, lda), lda, B + z * sB + tg_b_off(k0, 0, ldb), ldb, M, N,
             min(K - k0, k_split), m0, n0, tid, tr, tc);
    // scalar, coalesced stores (a float4 store of raw accumulators ties them to register quads)
    float *slot = W + (tg_idx)blockIdx.x * SLOT + tid;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) __stcg(slot + (i * TN + j) * NT, acc[i][j]);
    __syncthreads();
    const int b0 = blockIdx.x - s;  // the tile's first block in this launch
    if (tid == 0) {
        __threadfence();
        tg_st_release(flags + blockIdx.x, epoch);
        for (int h = 0; h < splits; ++h)
            while (tg_ld_acquire(flags + b0 + h) != epoch) __nanosleep(64);
    }
    __syncthreads();
    const int q0 = s * Q / splits, q1 = (s + 1) * Q / splits;
    share_fixup(W + (tg_idx)b0 * SLOT, W + (tg_idx)(b0 + 1) * SLOT, SLOT, splits, q0, q1, tid, D + z * sD, ldd,
                C + z * sC, ldc, m0, n0, tr, tc, M, N, alpha, beta);
#else
    // Stream-K, after whole waves of whole tiles (the "data-parallel + stream-K" hybrid).  Of the
    // count * tiles block tiles, the first dp (whole waves: a multiple of the grid) go a tile per
    // block per wave, as without stream-K.  The k-iterations of the rest (ipt = ceil(K / BK) per
    // tile) are cut into S = min(gridDim.x, their count) equal contiguous ranges, one per block, none
    // empty; all blocks are resident at once (the host sizes the grid from the occupancy query).  A
    // block walks its range a tile segment at a time.  A whole tile is stored.  A part of a tile goes
    // to the block's slot of W for it (2 g: the tile's first k-iterations, its head; 2 g + 1: a later
    // part, its tail; a block holds at most one of each), and the slot's flag is set.  A tile shared
    // by n blocks is then added up one of two ways:
    //   - by its owner, the block of its head, which adds the tails one after another to its own
    //     sums (its head stays in registers) and writes the tile: the tails are the first segments
    //     of the later blocks' ranges and the head the last of the owner's, so waits are short;
    //   - where n - 1 > SK_SPREAD * (blocks an SM), which the owner's serial adds would make the
    //     longest part of the launch, by all n blocks once their ranges are done: the j-th adds the
    //     float4 groups [j Q / n, (j + 1) Q / n) of every part (as SK = 2) and writes them.
    // Either way the parts are added in block order: results do not depend on timing.
    float acc[TM][TN];
    constexpr int Q = TM * TN / 4, SLOT = NT * TM * TN;
    const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN), ipt = (K + BK - 1) / BK;
    const int G = gridDim.x, g = blockIdx.x, dp = (count * tiles / G) * G;
    const long long total = (long long)(count * tiles - dp) * ipt;
    const int S = (int)min((long long)G, total);
    long long it = g < S ? total * g / S : 0;
    const long long end = g < S ? total * (g + 1) / S : 0;
    // k-iteration x of the range is in block ((x + 1) S - 1) / total (block b's range starts at total * b / S)
    auto block_of = [&](long long x) { return (int)(((x + 1) * S - 1) / total); };
    // whether the n = b1 - b0 + 1 blocks of a tile add it up together: n - 1 > SK_SPREAD * G / SMs.  %nsmid stands
    // for the SM count: 132 on the H200, as its SMs (PTX allows it larger; then more tiles spread, still correct)
    auto spreads = [&](int b0, int b1) {
        unsigned sms;
        asm volatile("mov.u32 %0, %%nsmid;" : "=r"(sms));
        return (unsigned)(b1 - b0) * sms > (unsigned)(SK_SPREAD * G);
    };
    for (int wave = g;;) {
        int t, kb, ke;
        if (wave < dp) {  // a whole tile
            t = wave;
            kb = 0;
            ke = ipt;
            wave += G;
        } else if (it < end) {  // a segment of the stream-K range
            t = (int)(it / ipt);
            kb = (int)(it - (long long)t * ipt);
            ke = (int)min((long long)ipt, kb + (end - it));
            it += ke - kb;
            t += dp;
        } else {
            break;
        }
        const int z = t / tiles, kk = kb * BK;
        int m0, n0;
        tile_origin(t - z * tiles, M, N, m0, n0);
        __syncthreads();  // the last segment's fragment reads are done before its stages are refilled
        tile_mac(acc, smem, A + z * sA + tg_a_off(0, kk, lda), lda, B + z * sB + tg_b_off(kk, 0, ldb), ldb, M, N,
                 min(K, ke * BK) - kk, m0, n0, tid, tr, tc);
        if (kb == 0 && ke == ipt) {
            tile_store(acc, D + z * sD, ldd, C + z * sC, ldc, m0, n0, tr, tc, M, N, alpha, beta);
            continue;
        }
        const long long x0 = (long long)(t - dp) * ipt;  // the tile's first k-iteration in the range
        const int b0 = block_of(x0), b1 = block_of(x0 + ipt - 1);
        const bool spread = spreads(b0, b1);
        if (kb == 0 && !spread) {
            // the owner: adds the tails of blocks b0 + 1 .. b1 in order
            for (int h = b0 + 1; h <= b1; ++h) {
                if (tid == 0)
                    while (tg_ld_acquire(flags + 2 * h + 1) != epoch) __nanosleep(32);
                __syncthreads();
                const float *other = W + (tg_idx)(2 * h + 1) * SLOT + tid;
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] += __ldcg(other + (i * TN + j) * NT);
            }
            tile_store(acc, D + z * sD, ldd, C + z * sC, ldc, m0, n0, tr, tc, M, N, alpha, beta);
            continue;
        }
        // a part to hand over: element (i, j) of every thread's acc in a row of NT.  Scalar accesses,
        // coalesced: a float4 store of acc[i][4p..4p+3] would make ptxas keep the accumulators in aligned
        // register quads, and the K loop's FFMAs then hit 8x more register-bank conflicts (SASS model;
        // docs/perf-notes.md, "Stream-K")
        const int s = 2 * g + (kb != 0);
        float *slot = W + (tg_idx)s * SLOT + tid;
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) __stcg(slot + (i * TN + j) * NT, acc[i][j]);
        __syncthreads();
        if (tid == 0) {
            __threadfence();
            tg_st_release(flags + s, epoch);
        }
    }
    if (g >= S) return;
    // the tiles this block adds a share of: those of its range's first and last segments that spread
    const int uf = (int)(total * g / S / ipt), ul = (int)((end - 1) / ipt);
#pragma unroll 1
    for (int h = 0; h < 1 + (ul != uf); ++h) {
        const int u = h == 0 ? uf : ul, t = u + dp, z = t / tiles;
        const int b0 = block_of((long long)u * ipt), b1 = block_of((long long)u * ipt + ipt - 1), n = b1 - b0 + 1;
        if (!spreads(b0, b1)) continue;
        // the head of block b0, then the tails of b0 + 1 .. b1; a thread a flag (a tile may have hundreds of blocks)
        for (int b = b0 + tid; b <= b1; b += NT)
            while (tg_ld_acquire(flags + 2 * b + (b != b0)) != epoch) __nanosleep(32);
        __syncthreads();
        int m0, n0;
        tile_origin(t - z * tiles, M, N, m0, n0);
        const int j = g - b0;
        share_fixup(W + (tg_idx)(2 * b0) * SLOT, W + (tg_idx)(2 * b0 + 3) * SLOT, 2 * (tg_idx)SLOT, n, j * Q / n,
                    (j + 1) * Q / n, tid, D + z * sD, ldd, C + z * sC, ldc, m0, n0, tr, tc, M, N, alpha, beta);
    }
#endif
}
