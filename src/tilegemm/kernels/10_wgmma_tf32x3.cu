// Rung 10 - 10_wgmma_tf32x3: Hopper's warpgroup mma, fed by TMA through an mbarrier pipeline, with
// a producer warpgroup and two consumer warpgroups.  Follows the 3xTF32 split as rung 9 does, and
// the PTX ISA's wgmma / TMA / mbarrier sections (docs/sources.md); measured in docs/perf-notes.md.
//
// Changed from rung 9:
// - wgmma.mma_async m64n128k8 (sm_90a): a warpgroup (4 warps) multiplies a 64 x 8 by an 8 x 128 tile
//   per instruction, both operands read by the tensor cores straight from shared memory, the
//   instruction asynchronous (issued, committed as a group, waited for).  TF32 wgmma reads both
//   operands K-major, in 8-row x 16-byte "core matrices" (tg_wgmma.cuh, tg_desc).
// - TMA: one thread copies a whole operand tile global -> shared with cp.async.bulk.tensor, the
//   tensor map (shape, strides, box) built on the host by cuTensorMapEncodeTiled; elements outside
//   the matrix arrive as zeros, so there is no edge code.  The tile lands in its global orientation.
// - Warp specialisation: warpgroup 0 is the producer.  It issues the TMA copies into RS raw stages,
//   then splits each raw tile into big + small TF32 (as rung 9 does in registers) and writes both,
//   K-major whatever the global layout, into SS split stages; so the operand layouts wgmma's TF32
//   form requires are reached in shared memory, with no copy in global memory.  Warpgroups 1 and 2
//   are the consumers: rows 0-63 and 64-127 of the 128 x 128 tile, three wgmma per k step of 8
//   (big*big into the tile's sum, big*small and small*big into the small sums), and they hand a
//   split stage back once its wgmma are done.  setmaxnreg moves registers from the producer (40) to
//   the consumers (232): three 64-float sets of sums per consumer thread.
// - Pipeline: mbarriers, not __syncthreads: raw_full[r] (TMA bytes landed), spl_full[s] (the 128
//   producer threads wrote stage s), spl_empty[s] (the 256 consumer threads are done reading it).
// Kept from rung 9: the split and its accuracy (the big products of a k tile summed on the tensor
// cores, then added in FP32; the small ones apart; tg_mma.cuh), the block swizzle.
// Needs: 16-byte aligned operands with leading dimensions a multiple of 4 (TMA's rule).
#include "tg_common.cuh"
#include "tg_async.cuh"  // tg_smem
#include "tg_mma.cuh"    // tg_tf32, tg_mma_sum
#include "tg_wgmma.cuh"

#define BM 128
#define BN 128
#define BK 16
#define NT 384
#ifndef RS
#define RS 4  // raw stages (TMA)
#endif
#ifndef SS
#define SS 3  // split stages (wgmma)
#endif
#ifndef SWIZZLE
#define SWIZZLE 8
#endif
constexpr int RAW_A = BM * BK * 4, RAW_B = BK * BN * 4;  // bytes of a raw tile
constexpr int SPL_A = BM * BK * 4, SPL_B = BN * BK * 4;  // bytes of one split half (big or small)
constexpr int RAW_STAGE = RAW_A + RAW_B, SPL_STAGE = 2 * (SPL_A + SPL_B);
constexpr int SBO = BK / 4 * 128;  // split layout: bytes from one 8-row group to the next
constexpr int LBO = 128;           // ... and from one 4-k column of core matrices to the next
static_assert(BK == 16, "split_tile's lane arrangement covers 4 chunks of 4 k per row");

// Split the raw tile at `raw` (ROWS rows of the split layout: m for A, n for B, by BK k) into big and
// small halves at shared byte addresses `big`, `small` (element (r, k) at (r / 8) SBO + (k / 4) LBO +
// (r % 8) 16 + (k % 4) 4).  KINNER: the raw tile is raw[r][k] (its global rows run along k), else
// raw[k][r].  128 producer threads, each a 16-byte chunk (r, 4 k) at a time; the lanes are arranged
// so the reads and the writes of each quarter-warp hit distinct banks.
template <int ROWS, bool KINNER>
__device__ __forceinline__ void split_tile(const float *raw, unsigned big, unsigned small, int ptid) {
    constexpr int CHUNKS = ROWS * BK / 4 / 128;  // per thread
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        int r, kc;
        float x[4];
        if (KINNER) {  // 8 rows per quarter-warp, the 4-k chunk rotated by row pair: distinct banks
            const int lane = ptid % 32, q = (ptid / 32) + 4 * i;  // q: group of 8 rows of one warp
            r = 8 * (q % (ROWS / 8)) + lane % 8;
            kc = ((lane % 8) / 2 + lane / 8 + 4 * (q / (ROWS / 8))) % (BK / 4);
            const float4 v = *reinterpret_cast<const float4 *>(raw + r * BK + 4 * kc);
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        } else {  // consecutive lanes, consecutive rows: scalar reads along a raw row
            const int c = ptid + 128 * i;
            r = c % ROWS;
            kc = c / ROWS;
#pragma unroll
            for (int e = 0; e < 4; ++e) x[e] = raw[(4 * kc + e) * ROWS + r];
        }
        unsigned b[4], s[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            b[e] = tg_tf32(x[e]);
            s[e] = tg_tf32(x[e] - __uint_as_float(b[e]));
        }
        const unsigned off = (r / 8) * SBO + kc * LBO + (r % 8) * 16;
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(big + off), "r"(b[0]), "r"(b[1]), "r"(b[2]),
                     "r"(b[3]) : "memory");
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(small + off), "r"(s[0]), "r"(s[1]), "r"(s[2]),
                     "r"(s[3]) : "memory");
    }
}

extern "C" __global__ void __launch_bounds__(NT, 1)
    tilegemm_wgmma(int M, int N, int K, const __grid_constant__ TgTensorMap tA, const __grid_constant__ TgTensorMap tB,
                   float *__restrict__ C, long long ldc) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned s0 = tg_smem(smem);
    const unsigned raw0 = s0, spl0 = s0 + RS * RAW_STAGE, bar0 = spl0 + SS * SPL_STAGE;
    // barriers: raw_full[RS], spl_full[SS], spl_empty[SS], 8 bytes each
    auto raw_full = [&](int r) { return bar0 + 8 * r; };
    auto spl_full = [&](int s) { return bar0 + 8 * (RS + s); };
    auto spl_empty = [&](int s) { return bar0 + 8 * (RS + SS + s); };
    const int tid = threadIdx.x, wg = tid / 128;

    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    int bm = blockIdx.x / grid_n, bn = blockIdx.x % grid_n;
    if (SWIZZLE > 1) {
        const int per_group = SWIZZLE * grid_n, first = (blockIdx.x / per_group) * SWIZZLE;
        const int rows = min(grid_m - first, SWIZZLE), in_group = blockIdx.x % per_group;
        bm = first + in_group % rows;
        bn = in_group / rows;
    }
    const int m0 = bm * BM, n0 = bn * BN, T = (K + BK - 1) / BK;

    if (tid == 0) {
        for (int r = 0; r < RS; ++r) tg_mbar_init(raw_full(r), 1);
        for (int s = 0; s < SS; ++s) {
            tg_mbar_init(spl_full(s), 128);
            tg_mbar_init(spl_empty(s), 256);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // ------------------------------------------------ the producer warpgroup
        tg_setmaxnreg_dec40();
        // the TMA copies of k tile kt into raw stage r (coordinates innermost first)
        auto load = [&](int kt, int r) {
            const unsigned a = raw0 + r * RAW_STAGE, b = a + RAW_A;
            tg_mbar_expect_tx(raw_full(r), RAW_STAGE);
            if (TG_TRANS_A) tg_tma_2d(a, &tA, m0, kt * BK, raw_full(r));
            else            tg_tma_2d(a, &tA, kt * BK, m0, raw_full(r));
            if (TG_TRANS_B) tg_tma_2d(b, &tB, kt * BK, n0, raw_full(r));
            else            tg_tma_2d(b, &tB, n0, kt * BK, raw_full(r));
        };
        if (tid == 0)
            for (int kt = 0; kt < RS && kt < T; ++kt) load(kt, kt);
        for (int kt = 0; kt < T; ++kt) {
            const int r = kt % RS, s = kt % SS;
            tg_mbar_wait(raw_full(r), (kt / RS) & 1);
            tg_mbar_wait(spl_empty(s), ((kt / SS) & 1) ^ 1);  // the consumers are done with stage s
            const float *ra = reinterpret_cast<const float *>(smem + r * RAW_STAGE);
            const unsigned sp = spl0 + s * SPL_STAGE;
            split_tile<BM, !TG_TRANS_A>(ra, sp, sp + SPL_A, tid);
            split_tile<BN, (bool)TG_TRANS_B>(ra + RAW_A / 4, sp + 2 * SPL_A, sp + 2 * SPL_A + SPL_B, tid);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our stores, then wgmma's reads
            tg_mbar_arrive(spl_full(s));
            asm volatile("bar.sync 1, 128;" ::: "memory");  // every producer thread is done with raw stage r
            if (tid == 0 && kt + RS < T) load(kt + RS, r);
        }
        return;
    }

    // ---------------------------------------------------------------- the consumer warpgroups
    tg_setmaxnreg_inc232();
    const int c = wg - 1;  // rows 64c .. 64c + 63 of the tile
    float acc[64], big[64], lo[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = big[i] = lo[i] = 0.0f;
    for (int kt = 0; kt < T; ++kt) {
        const int s = kt % SS;
        tg_mbar_wait(spl_full(s), (kt / SS) & 1);
        const unsigned sp = spl0 + s * SPL_STAGE;
        const unsigned ab = sp + c * 8 * SBO, as = ab + SPL_A, bb = sp + 2 * SPL_A, bs = bb + SPL_B;
        tg_wgmma_fence();
#pragma unroll
        for (int j = 0; j < BK / 8; ++j) {  // k step j: core-matrix columns 2j, 2j + 1
            const unsigned k = j * 2 * LBO;
            tg_wgmma_128(big, tg_desc(ab + k, LBO, SBO), tg_desc(bb + k, LBO, SBO), j > 0);
            if (TG_MMA_PASSES == 3) {
                tg_wgmma_128(lo, tg_desc(ab + k, LBO, SBO), tg_desc(bs + k, LBO, SBO), 1);
                tg_wgmma_128(lo, tg_desc(as + k, LBO, SBO), tg_desc(bb + k, LBO, SBO), 1);
            }
        }
        tg_wgmma_commit();
        tg_wgmma_wait<0>();
        tg_mbar_arrive(spl_empty(s));
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] += big[i];  // the k tile's big products, added in FP32
    }

    // acc[4j + i] + lo[4j + i] is C(m0 + 64c + 16w + g + 8 (i / 2), n0 + 8j + 2t + i % 2)
    const int w = (tid % 128) / 32, g = (tid % 32) / 4, t = tid % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int m = m0 + 64 * c + 16 * w + g + 8 * h;
        if (m >= M) continue;
        float *row = C + (tg_idx)m * ldc;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int n = n0 + 8 * j + 2 * t;
            if (n < N) row[n] = tg_mma_sum(acc[4 * j + 2 * h], lo[4 * j + 2 * h]);
            if (n + 1 < N) row[n + 1] = tg_mma_sum(acc[4 * j + 2 * h + 1], lo[4 * j + 2 * h + 1]);
        }
    }
}
