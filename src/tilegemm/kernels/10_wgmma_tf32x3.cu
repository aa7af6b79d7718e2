// Rung 10 - 10_wgmma_tf32x3: Hopper's warpgroup mma, fed by TMA through an mbarrier pipeline, with
// a producer warpgroup and two consumer warpgroups (one with -D BM=64).  Follows the 3xTF32 split as rung 9 does, and
// the PTX ISA's wgmma / TMA / mbarrier sections (docs/sources.md); measured in docs/perf-notes.md.
//
// Changed from rung 9:
// - wgmma.mma_async m64n128k8 (sm_90a): a warpgroup (4 warps) multiplies a 64 x 8 by an 8 x 128 tile
//   per instruction, asynchronously (issued, committed as a group, waited for).  B is read by the
//   tensor cores straight from shared memory, K-major, in 8-row x 16-byte "core matrices"
//   (tg_wgmma.cuh, tg_desc); A comes from registers.
// - TMA: one thread copies a whole operand tile global -> shared with cp.async.bulk.tensor, the
//   tensor map (shape, strides, box, swizzle) built on the host by cuTensorMapEncodeTiled; elements
//   outside the matrix arrive as zeros, so there is no edge code.  Tiles land in their global
//   orientation, A's swizzled so that the consumers' fragment reads hit distinct banks.
// - Warp specialisation: warpgroup 0 is the producer.  It issues the TMA copies and splits each B
//   tile into big + small TF32 (rung 9's split), written K-major whatever B's global layout: the
//   layout wgmma's TF32 form requires, reached in shared memory with no copy in global memory.
//   Warpgroups 1 and 2 are the consumers, rows 0-63 and 64-127 of the 128 x 128 tile (-D BM=64:
//   one consumer and a 64 x 128 tile, for products of few rows; TMA only): they read
//   their A fragments, split them in registers, and issue three wgmma per k step of 8 (big*big into
//   the k tile's sum, big*small and small*big into the small sums); setmaxnreg moves registers from
//   the producer (40) to the consumers (232: three 64-float sets of sums per thread).
// - Persistent (tiles copied by TMA): a block an SM (for each split over K), walking tiles x,
//   x + gridDim.x, ...; its k
//   tiles are numbered over all its tiles, so the producer fills the next tile's stages while the
//   consumers store the last one's sums (a block a tile paid the pipeline's fill and the stores at
//   every tile).
// - Pipeline: mbarriers instead of __syncthreads.  RS stages of raw B (b_full: the TMA bytes
//   landed; the producer reuses a stage once its own threads are done with it) and SS stages of
//   [raw A | B big | B small] (a_full: A's bytes landed; s_full: the 128 producer threads wrote B's
//   halves; s_empty: the consumer threads are done with the stage).
// Kept from rung 9: the split and its accuracy (the big products of a k tile summed on the tensor
// cores, then added in FP32; the small ones apart; tg_mma.cuh), the block swizzle.
// Needs: 16-byte aligned operands with leading dimensions a multiple of 4 (TMA's rule).
#include "tg_common.cuh"
#include "tg_async.cuh"  // tg_smem
#include "tg_mma.cuh"    // tg_tf32, tg_mma_sum
#include "tg_wgmma.cuh"

#ifndef BM
#define BM 128  // rows of C per block: 128 (two consumer warpgroups) or 64 (one: skinny products)
#endif
#define BN 128
#ifndef BK
#define BK 32  // k per tile: 16 or 32 (one 64- or 128-byte swizzle span of a row of A)
#endif
#define NC (BM / 64)         // consumer warpgroups
#define NT (128 * (1 + NC))  // and the producer's
#ifndef RS
#define RS 2  // raw B stages
#endif
#ifndef SS
#define SS 3  // [raw A | B big | B small] stages
#endif
#ifndef SWIZZLE
#define SWIZZLE 8
#endif
// registers a thread after setmaxnreg (launched with 65536 / NT, rounded down to 8: 168 or 256): the
// producer's 128 threads give theirs up to the consumers, which hold three 64-float sets of sums;
// 128 x 40 + 256 x 232 = 64512 <= 384 x 168 (BM = 64 takes 240: at 232 its consumer spilled)
#define PRODUCER_REGS 40
#define CONSUMER_REGS (BM == 128 ? 232 : 240)
#ifndef TG_TMA
#define TG_TMA 1  // 1: tiles copied by TMA; 0: by the producer's cp.async (any alignment; see load_tile)
#endif
constexpr int TILE = BN * BK * 4;    // bytes of a B tile (raw or one split half)
constexpr int A_TILE = BM * BK * 4;  // bytes of an A tile
constexpr int S_STAGE = A_TILE + 2 * TILE;  // raw A, B big, B small
constexpr int CH = BK / 4;           // 16-byte chunks per row of BK
constexpr int SBO = CH * 128;        // split layout: bytes from one 8-row group to the next
constexpr int LBO = 128;             // ... and from one 4-k column of core matrices to the next
static_assert(BK == 16 || BK == 32, "BK is 16 or 32: a row of A is one 64- or 128-byte swizzle span");
static_assert(BM == 128 || (BM == 64 && TG_TMA), "BM is 128, or 64 with TMA (the cp.async producer copies 128 rows)");

// Split the raw B tile at `raw` (BK x BN) into big and small halves at shared byte addresses `big`,
// `small`, element (n, k) at (n / 8) SBO + (k / 4) LBO + (n % 8) 16 + (k % 4) 4.  KINNER: raw[n][k]
// (B's global rows run along k), else raw[k][n].  128 producer threads, a 16-byte chunk (n, 4 k) at
// a time, CH chunks each; lanes arranged so each quarter-warp's reads and writes hit distinct banks
// (the writes: 8 rows n % 8; the reads: raw rows are CH * 16 bytes, so the chunk is rotated by row).
template <bool KINNER>
__device__ __forceinline__ void split_b(const float *raw, unsigned big, unsigned small, int ptid) {
#pragma unroll
    for (int i = 0; i < CH; ++i) {
        int n, kc;
        float x[4];
        if (KINNER) {
            const int lane = ptid % 32, r = lane % 8;
            n = 8 * (ptid / 32 + 4 * (i % 4)) + r;
            kc = CH == 4 ? (r / 2 + lane / 8) % 4 : (r + lane / 8 + 4 * (i / 4)) % 8;
            const float4 v = *reinterpret_cast<const float4 *>(raw + n * BK + 4 * kc);
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        } else {  // consecutive lanes, consecutive n: scalar reads along a raw row
            n = ptid;
            kc = i;
#pragma unroll
            for (int e = 0; e < 4; ++e) x[e] = raw[(4 * kc + e) * BN + n];
        }
        unsigned b[4], s[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            b[e] = tg_tf32(x[e]);
            s[e] = tg_tf32_small(x[e] - __uint_as_float(b[e]));
        }
        const unsigned off = (n / 8) * SBO + kc * LBO + (n % 8) * 16;
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(big + off), "r"(b[0]), "r"(b[1]), "r"(b[2]),
                     "r"(b[3]) : "memory");
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(small + off), "r"(s[0]), "r"(s[1]), "r"(s[2]),
                     "r"(s[3]) : "memory");
    }
}

// Element (m, k) of the raw A tile (BM x BK) as TMA swizzled it: A row-major lands as [m][BK k],
// rows of CH 16-byte chunks, chunk XOR (m CH / 8) % CH (TMA's 64- or 128-byte swizzle); A
// column-major as BM / 32 [BK k][32 m] boxes, 128-byte rows, chunk XOR k % 8.  Either way a warp's
// fragment reads hit distinct banks (2-way at worst).
__device__ __forceinline__ int a_idx(int m, int k) {
    if (!TG_TRANS_A) return m * BK + ((((k / 4) ^ (m * CH / 8)) & (CH - 1)) * 4) + k % 4;
    return (m / 32) * (32 * BK) + k * 32 + ((((m % 32) / 4) ^ (k % 8)) * 4) + m % 4;
}
__device__ __forceinline__ float a_at(const float *raw, int m, int k) { return raw[a_idx(m, k)]; }

// A lane's A fragment of k step j (e: a_at(r0 + 8 (e % 2), 8 j + t + 4 (e / 2)), r0 = 64 c + 16 w + g) with
// BK = 32, from one register: its offset in the stage splits into bit fields that do not carry
// into each other, those that vary with (j, e) joined by an XOR and an add of constants.  Row-major
// A: 32 m + t + 4 ((2 j + e / 2) ^ (m % 8)); column-major: 1024 (m / 32) + 32 k + m % 4 + 4 (((m % 32) / 4)
// ^ (k % 8)), where (m % 32) / 4 has no bit 1 (16 (w % 2) + g < 24), so adding 2 (e % 2) is an XOR.
// (Held in a register each, the 16 offsets left the consumers too few for the persistent walk.)
__device__ __forceinline__ unsigned a_lane(int r0, int t) {
    const int g = r0 % 8;
    if (!TG_TRANS_A) return 4 * (32 * r0 + t + 4 * g);
    return 4 * (1024 * (r0 / 32) + 32 * t + g % 4 + 4 * ((((r0 % 32) / 4)) ^ t));
}
// (smem: the kernel's shared array; off: the stage's byte offset in it plus a_lane)
__device__ __forceinline__ float a_frag(const unsigned char *smem, unsigned off, int j, int e) {
    const unsigned x = !TG_TRANS_A ? 4 * (8 * j + 4 * (e / 2)) : 4 * (8 * (e % 2) + 16 * (e / 2));
    const unsigned add = !TG_TRANS_A ? 4 * 256 * (e % 2) : 4 * (256 * j + 128 * (e / 2));
    return *reinterpret_cast<const float *>(smem + ((off ^ x) + add));
}

// TG_TMA = 0: the producer's 128 threads copy an operand's 128 x BK tile themselves, 4 bytes per
// cp.async (LDGSTS), to where TMA would have put it (A: a_idx; B: raw[n][k] or raw[k][n]), elements
// outside the matrix (row >= rows or k >= K) zero-filled; then each thread has the mbarrier count
// its copies' completion (cp.async.mbarrier.arrive.noinc: 128 arrivals complete the phase).  Lanes
// run along the operand's contiguous direction in global memory: 128-byte requests.
// A: op = 0, row = m; B: op = 1, row = n.  KCONT: k is the contiguous direction.
template <int OP, bool KCONT>
__device__ __forceinline__ void load_tile(unsigned dst, const float *G, tg_idx ld, int row0, int rows, int kb, int K,
                                          unsigned bar, int ptid) {
    // copy i: row r0 + RSTEP i, k k0 + KSTEP i; the source moves by a fixed step per copy
    constexpr int RSTEP = KCONT ? 128 / BK : 0, KSTEP = KCONT ? 0 : 1;
    const int r0 = KCONT ? ptid / BK : ptid, k0 = KCONT ? ptid % BK : 0;
    const tg_idx step = KCONT ? RSTEP * ld : ld;  // rows of the stored matrix are ld apart
    const float *src = G + (OP == 0 ? tg_a_off(row0 + r0, kb + k0, ld) : tg_b_off(kb + k0, row0 + r0, ld));
#pragma unroll 4
    for (int i = 0; i < BK; ++i, src += step) {
        const int r = r0 + RSTEP * i, k = k0 + KSTEP * i;
        const bool in = row0 + r < rows && kb + k < K;
        const int e = OP == 0 ? a_idx(r, k) : (TG_TRANS_B ? r * BK + k : k * BN + r);
        tg_cp_async<4>(dst + 4 * e, in ? src : G, in ? 4 : 0, true);
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// D = alpha A B + beta C (C read only when beta != 0).  The library's tensor-core path (precision
// tf32x3 or tf32 on Hopper) runs this kernel too, so it takes what a library needs beyond the ladder's
// C = A B: alpha, beta and a separate C, and split-K (block z sums k in [z k_split, (z + 1) k_split),
// k_split a multiple of BK so that only the last split reads past K, where TMA gives zeros, and
// writes D + z sD; the host adds the splits, splitk_reduce.cu).  TG_MMA_PASSES = 1 makes it TF32.
// Persistent: at most a block an SM for each split; block x takes tiles x, x + gridDim.x, ... (with
// TG_TMA = 0 a block a tile: hopper.wgmma_grid).
extern "C" __global__ void __launch_bounds__(NT, 1)
    tilegemm_wgmma(int M, int N, int K, const __grid_constant__ TgTensorMap tA, const __grid_constant__ TgTensorMap tB,
                   const float *A, long long lda, const float *B, long long ldb, const float *C, long long ldc,
                   float *D, long long ldd, long long sD, float alpha, float beta, int k_split) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned s0 = tg_smem(smem);
    // [SS stages of raw A | B big | B small][RS stages of raw B][barriers]
    const unsigned st0 = s0, rb0 = s0 + SS * S_STAGE, bar0 = rb0 + RS * TILE;
    auto b_full = [&](int r) { return bar0 + 8 * r; };
    auto a_full = [&](int s) { return bar0 + 8 * (RS + s); };
    auto s_full = [&](int s) { return bar0 + 8 * (RS + SS + s); };
    auto s_empty = [&](int s) { return bar0 + 8 * (RS + 2 * SS + s); };
    const int tid = threadIdx.x, wg = tid / 128;

    // the block's k tiles, numbered j over all its tiles: the stages and phases follow j, so the
    // producer fills the next tile's stages while the consumers store the last one's sums.  T: k
    // tiles of a tile from k0 (the last may run past K); J: the block's.  (Computed by each
    // warpgroup after setmaxnreg: values held across it must fit the producer's 40 registers.)
    // TG_TMA = 0 (the cp.async producer, for operands too large to copy into aligned rows): a block a
    // tile, launched as such (tiles of its own walked, its consumers spill: too few registers)
    const auto count = [&](int &k0, int &T, int &J) {
        const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
        k0 = blockIdx.z * k_split;
        T = (min(K - k0, k_split) + BK - 1) / BK;
        J = !TG_TMA ? T : (int)blockIdx.x < tiles ? T * ((tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1) : 0;
    };

    if (tid == 0) {
        for (int r = 0; r < RS; ++r) tg_mbar_init(b_full(r), TG_TMA ? 1 : 128);
        for (int s = 0; s < SS; ++s) {
            tg_mbar_init(a_full(s), TG_TMA ? 1 : 128);
            tg_mbar_init(s_full(s), 128);
            tg_mbar_init(s_empty(s), 128 * NC);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // ------------------------------------------------ the producer warpgroup
        tg_setmaxnreg_dec<PRODUCER_REGS>();
        int k0, T, J;
        count(k0, T, J);
        // where the A and B copies are in the block's walk: a tile and k tile each, stepped one k tile
        // at a time (the origin computed once a tile: its divisions kept off the split's path)
        struct Walk {
            int tile, kt, m0, n0;
        } wa, wb;
        const auto start = [&](Walk &w) {
            w.tile = blockIdx.x, w.kt = 0;
            tg_tile_origin<BM, BN>(w.tile, M, N, SWIZZLE, w.m0, w.n0);
        };
        const auto next = [&](Walk &w) {
            if (++w.kt < T) return;
            w.kt = 0, w.tile += gridDim.x;
            if (w.tile < ((M + BM - 1) / BM) * ((N + BN - 1) / BN))  // (past the last: no origin)
                tg_tile_origin<BM, BN>(w.tile, M, N, SWIZZLE, w.m0, w.n0);
        };
        auto load_b = [&](int r) {  // B's next k tile into raw stage r (coordinates innermost first)
            const int kb = k0 + wb.kt * BK, n0 = wb.n0;
            if (!TG_TMA) {
                load_tile<1, (bool)TG_TRANS_B>(rb0 + r * TILE, B, ldb, n0, N, kb, K, b_full(r), tid);
            } else if (tid == 0) {
                tg_mbar_expect_tx(b_full(r), TILE);
                if (TG_TRANS_B) tg_tma_2d(rb0 + r * TILE, &tB, kb, n0, b_full(r));
                else            tg_tma_2d(rb0 + r * TILE, &tB, n0, kb, b_full(r));
            }
            next(wb);
        };
        auto load_a = [&](int s) {  // A's next k tile straight into stage s (BM / 32 32-column boxes when column-major)
            const unsigned st = st0 + s * S_STAGE;
            const int kb = k0 + wa.kt * BK, m0 = wa.m0;
            if (!TG_TMA) {
                load_tile<0, !TG_TRANS_A>(st, A, lda, m0, M, kb, K, a_full(s), tid);
            } else if (tid == 0) {
                tg_mbar_expect_tx(a_full(s), A_TILE);
                if (TG_TRANS_A)
                    for (int q = 0; q < BM / 32; ++q) tg_tma_2d(st + q * 32 * BK * 4, &tA, m0 + 32 * q, kb, a_full(s));
                else
                    tg_tma_2d(st, &tA, kb, m0, a_full(s));
            }
            next(wa);
        };
        start(wa);
        start(wb);
        // every stage is free at the start: the first SS tiles of A are requested at once (requested
        // one tile at a time, behind each split, the second tile's A arrived a whole latency late)
        for (int j = 0; j < RS && j < J; ++j) load_b(j);
        for (int j = 0; j < SS && j < J; ++j) load_a(j);
        for (int j = 0; j < J; ++j) {
            const int r = j % RS, s = j % SS;
            const unsigned st = st0 + s * S_STAGE;
            if (j >= SS) {
                tg_mbar_wait(s_empty(s), ((j / SS) & 1) ^ 1);  // the consumers are done with stage s
                load_a(s);
            }
            tg_mbar_wait(b_full(r), (j / RS) & 1);
            split_b<(bool)TG_TRANS_B>(reinterpret_cast<const float *>(smem + (rb0 - s0) + r * TILE), st + A_TILE,
                                      st + A_TILE + TILE, tid);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our stores, then wgmma's reads
            tg_mbar_arrive(s_full(s));
            asm volatile("bar.sync 1, 128;" ::: "memory");  // every producer thread is done with raw B stage r
            if (j + RS < J) load_b(r);
        }
        return;
    }

    // ---------------------------------------------------------------- the consumer warpgroups
    tg_setmaxnreg_inc<CONSUMER_REGS>();
    int k0, T, J;
    count(k0, T, J);
    const int c = wg - 1, w = (tid % 128) / 32, g = (tid % 32) / 4, t = tid % 4;
    const int r0 = 64 * c + 16 * w + g;  // this lane's A rows: r0 and r0 + 8
    const unsigned a_off = a_lane(r0, t);
    float acc[64], big[64], lo[64];  // all of K in FP32; a k tile's big products; the small ones
#pragma unroll
    for (int i = 0; i < 64; ++i) big[i] = 0.0f;  // (each k tile's first wgmma overwrites it)
    for (int j0 = 0; j0 < J; j0 += T) {  // the block's tiles, T k tiles each
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = lo[i] = 0.0f;
        for (int jj = j0; jj < j0 + T; ++jj) {
            const int s = jj % SS;
            const unsigned st = st0 + s * S_STAGE, bb = st + A_TILE, bs = st + A_TILE + TILE;
            tg_mbar_wait(a_full(s), (jj / SS) & 1);
            const float *ra = reinterpret_cast<const float *>(smem + s * S_STAGE);
            tg_mbar_wait(s_full(s), (jj / SS) & 1);
            // k step j: A's fragment split into ab / as[j % 2] (the wgmma of step j - 2, which read those
            // registers, are waited for first: one group of three wgmma per step, one group left in
            // flight), then three wgmma on B's core-matrix columns 2j, 2j + 1
            unsigned ab[2][4], as[2][4];
#pragma unroll
            for (int j = 0; j < BK / 8; ++j) {
                if (j >= 2) tg_wgmma_wait<1>();
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float x = BK == 32 ? a_frag(smem, s * S_STAGE + a_off, j, e)
                                             : a_at(ra, r0 + 8 * (e % 2), 8 * j + t + 4 * (e / 2));
                    ab[j % 2][e] = tg_tf32(x);
                    as[j % 2][e] = tg_tf32_small(x - __uint_as_float(ab[j % 2][e]));
                }
                tg_wgmma_fence();
                const unsigned k = j * 2 * LBO;
                tg_wgmma_128_rs(big, ab[j % 2], tg_desc(bb + k, LBO, SBO), j > 0);
                if (TG_MMA_PASSES == 3) {
                    tg_wgmma_128_rs(lo, ab[j % 2], tg_desc(bs + k, LBO, SBO), 1);
                    tg_wgmma_128_rs(lo, as[j % 2], tg_desc(bb + k, LBO, SBO), 1);
                }
                tg_wgmma_commit();
            }
            tg_wgmma_wait<0>();
            tg_mbar_arrive(s_empty(s));
#pragma unroll
            for (int i = 0; i < 64; ++i) acc[i] += big[i];  // the k tile's big products, added in FP32
        }

        // acc[4j + i] + lo[4j + i] is (A B)(m0 + 64c + 16w + g + 8 (i / 2), n0 + 8j + 2t + i % 2): a lane
        // holds pairs of adjacent columns (n, n + 1), n even, stored as one 8-byte access so that a
        // warp's store fills whole 32-byte sectors (4-byte stores: half of each of 8, at twice the
        // time).  A row of D that starts 4 bytes off (an odd leading dimension: every other row) takes
        // its pairs one column on, (n + 1, n + 2), n + 2 from the next lane of the four that share
        // the row (shuffled), the tile's first and last column alone.  C, where read, as its rows allow.
        // (what the stores need is computed here, not held through the k loop: registers)
        int m0, n0;
        tg_tile_origin<BM, BN>(blockIdx.x + (j0 / T) * gridDim.x, M, N, SWIZZLE, m0, n0);
        float *Dz = D + blockIdx.z * sD;
        const auto at = [&](int h, int j, int e) { return alpha * tg_mma_sum(acc[4 * j + 2 * h + e], lo[4 * j + 2 * h + e]); };
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + r0 + 8 * h;
            const bool in = m < M;  // (rows past M still take part in the shuffles)
            float *row = Dz + (tg_idx)m * ldd;
            const float *crow = C + (tg_idx)m * ldc;
            const bool shift = (reinterpret_cast<unsigned long long>(row) & 7) != 0;
            const bool cpairs = (reinterpret_cast<unsigned long long>(crow) & 7) == (reinterpret_cast<unsigned long long>(row) & 7);
            float x = at(h, 0, 0);
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const int n = n0 + 8 * j + 2 * t;
                float v[2] = {x, at(h, j, 1)};
                x = j < 15 ? at(h, j + 1, 0) : 0.0f;
                // the column after this lane's pair: the next lane's first, or (t = 3) lane 0's of pair j + 1
                const float nl = __shfl_down_sync(0xffffffff, v[0], 1, 4);
                const float nj = __shfl_sync(0xffffffff, x, 0, 4);
                if (!in) continue;
                int q = n;  // the pair stored: (q, q + 1)
                if (shift) {
                    if (j == 0 && t == 0 && n < N) row[n] = beta != 0.0f ? v[0] + beta * crow[n] : v[0];
                    q = n + 1;
                    v[0] = v[1];
                    v[1] = t < 3 ? nl : nj;
                }
                if (q + 1 < N && !(shift && j == 15 && t == 3)) {
                    if (beta != 0.0f) {
                        float2 cv;
                        if (cpairs) cv = *reinterpret_cast<const float2 *>(crow + q);
                        else        cv = make_float2(crow[q], crow[q + 1]);
                        v[0] += beta * cv.x;
                        v[1] += beta * cv.y;
                    }
                    *reinterpret_cast<float2 *>(row + q) = make_float2(v[0], v[1]);
                } else if (q < N) {  // the last column of D, or (shifted) of the tile
                    row[q] = beta != 0.0f ? v[0] + beta * crow[q] : v[0];
                }
            }
        }
        __syncwarp();  // the warp converged again before the next tile's wgmma (.sync.aligned)
    }  // tiles
}
