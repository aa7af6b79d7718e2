// wgmma_tf32.cu - the library's one-pass TF32 product on Hopper (precision "tf32", sm_90a): both
// operands stream from global memory to shared memory by TMA and from there to the tensor cores,
// untouched by any thread.  Follows the PTX ISA's wgmma / TMA / mbarrier sections (docs/sources.md);
// measured in docs/perf-notes.md.
//
// What differs from rung 10 (10_wgmma_tf32x3.cu), whose one-pass form it replaces for "tf32":
// - No split and no producer pass: the producer is one thread issuing TMA copies.  wgmma's TF32 form
//   reads an operand from shared memory only K-major.  The kernel's B (its tile's columns) is always
//   K-major in global memory (B^T row-major); its A is read from shared memory where it is K-major
//   too (wgmma's SS form), and with -D TG_P_MN=1, where it is M-major (A column-major), into
//   registers (the RS form: rung 10's layout of a column-major A tile and its fragment reads).
// - -D TG_SWAP=1: the kernel computes C^T = B^T A^T (the host passes B as the kernel's A, A as its
//   B, M and N swapped), so that a row-major B, stored N-major, is the register operand; each result
//   (row, col) of the kernel is C's (col, row).  Row-major A and B (torch's a @ b) need no copy.
// - Operands in shared memory in the 128-byte swizzle TMA writes: rows of BK = 32 TF32, descriptors
//   tg_desc_sw128, a k step of 8 at +32 bytes.
// - TF32 operands as the tensor cores take them: the low 13 bits of each FP32 value ignored
//   (truncated; rounding them would need a pass over every tile).
// - Tiles of BM x BN = 128 x 256 (-D BN=128 for narrow products): two consumer warpgroups of 64 x BN,
//   one wgmma m64nBNk8 per k step; a STAGES-deep ring of [A | B] tiles, full/empty mbarriers.
// - The products are summed on the tensor cores over all of K, one wgmma group in flight: TF32's
//   10-bit operands dominate its error (docs/accuracy.md), as in cuBLAS's TF32 mode.
// - Persistent: the grid is at most a block an SM for each split over K, each block walking its tiles; the producer runs
//   on into the next tile's k tiles while the consumers store the last one (measured: 0.98x ->
//   1.00-1.02x cuBLAS TF32 at 4096^3 and 8192^3, docs/perf-notes.md).
// Needs: 16-byte aligned operands with leading dimensions a multiple of 4 (TMA's rule).
#include "tg_common.cuh"
#include "tg_async.cuh"  // tg_smem
#include "tg_wgmma.cuh"

#define BM 128
#ifndef BN
#define BN 256  // 256 (m64n256k8) or 128 (m64n128k8)
#endif
#define BK 32  // one 128-byte swizzle row of TF32
#ifndef STAGES
#define STAGES 4
#endif
#ifndef SWIZZLE
#define SWIZZLE 8
#endif
#define NT 384  // a producer warpgroup and two consumers
#ifndef TG_P_MN
#define TG_P_MN 0  // 1: the kernel's A is M-major in global memory (read into registers)
#endif
#ifndef TG_SWAP
#define TG_SWAP 0  // 1: the kernel's (row, col) is C's (col, row)
#endif
constexpr int A_TILE = BM * BK * 4, B_TILE = BN * BK * 4, STAGE = A_TILE + B_TILE;  // bytes, multiples of 1024
static_assert(BN == 128 || BN == 256, "BN is 128 or 256");

__device__ __forceinline__ void wgmma_ss(float *d, unsigned long long a, unsigned long long b, int acc) {
    if (BN == 256) tg_wgmma_256_ss(d, a, b, acc);
    else           tg_wgmma_128_ss(d, a, b, acc);
}
__device__ __forceinline__ void wgmma_rs(float *d, const unsigned *a, unsigned long long b, int acc) {
    if (BN == 256) tg_wgmma_256_rs(d, a, b, acc);
    else           tg_wgmma_128_rs(d, a, b, acc);
}

// TG_P_MN: element (m, k) of the kernel's A tile (BM x BK) as TMA wrote it: BM / 32 boxes of [BK k][32
// m], 128-byte rows, 16-byte chunks XOR k % 8 (rung 10's a_idx for a column-major A): a warp's
// fragment reads hit distinct banks, 2-way at worst
__device__ __forceinline__ int a_mn_idx(int m, int k) {
    return (m / 32) * (32 * BK) + k * 32 + ((((m % 32) / 4) ^ (k % 8)) * 4) + m % 4;
}

// D = alpha A B + beta C (C read only when beta != 0); split-K as rung 10's kernel (block z sums k in
// [z k_split, (z + 1) k_split), k_split a multiple of BK, and writes D + z sD).  The signature is
// rung 10's (A, lda, B, ldb unused: the tensor maps carry them).
extern "C" __global__ void __launch_bounds__(NT, 1)
    tilegemm_wgmma_tf32(int M, int N, int K, const __grid_constant__ TgTensorMap tA,
                        const __grid_constant__ TgTensorMap tB, const float *A, long long lda, const float *B,
                        long long ldb, const float *C, long long ldc, float *D, long long ldd, long long sD,
                        float alpha, float beta, int k_split) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned s0 = (tg_smem(smem) + 1023) & ~1023u;  // the swizzle needs 1024-byte aligned tiles
    const unsigned bar0 = s0 + STAGES * STAGE;
    auto full = [&](int s) { return bar0 + 8 * s; };
    auto empty = [&](int s) { return bar0 + 8 * (STAGES + s); };
    const int tid = threadIdx.x, wg = tid / 128;

    // persistent: block x takes tiles x, x + gridDim.x, ... (at most a block an SM for each split z);
    // a k tile's stage and phase follow `it`, the block's k tiles counted over all its tiles
    const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    const int k0 = blockIdx.z * k_split;
    const int T = (min(K - k0, k_split) + BK - 1) / BK;  // k tiles from k0 (the last may run past K: zeros)

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            tg_mbar_init(full(s), 1);
            tg_mbar_init(empty(s), 256);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // ------------------------------------------------ the producer: one thread
        tg_setmaxnreg_dec<40>();
        if (tid != 0) return;
        int it = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int m0, n0;
            tg_tile_origin<BM, BN>(tile, M, N, SWIZZLE, m0, n0);
            for (int kt = 0; kt < T; ++kt, ++it) {
                const int s = it % STAGES;
                if (it >= STAGES) tg_mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);  // the consumers are done with it
                const unsigned st = s0 + s * STAGE;
                tg_mbar_expect_tx(full(s), STAGE);
                if (TG_P_MN)  // A: BM / 32 boxes of 32 k rows, 32 m each
                    for (int q = 0; q < BM / 32; ++q)
                        tg_tma_2d(st + q * 32 * BK * 4, &tA, m0 + 32 * q, k0 + kt * BK, full(s));
                else
                    tg_tma_2d(st, &tA, k0 + kt * BK, m0, full(s));       // A: rows m, 32 k each
                tg_tma_2d(st + A_TILE, &tB, k0 + kt * BK, n0, full(s));  // B^T: rows n, 32 k each
            }
        }
        return;
    }

    // ---------------------------------------------------------------- the consumer warpgroups
    tg_setmaxnreg_inc<232>();
    const int c = wg - 1, w = (tid % 128) / 32, g = (tid % 32) / 4, t = tid % 4;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    const int r0 = 64 * c + 16 * w + g;  // this lane's rows of the tile: r0 and r0 + 8
    // TG_P_MN: A's fragments of a k tile in registers, two sets by the parity of kt (the set of tile
    // kt - 2 is rewritten at tile kt: its wgmma were waited for at tile kt - 1)
    unsigned frag0[BK / 8][4], frag1[BK / 8][4];
    auto k_tile = [&](int kt, int it, unsigned (&frag)[BK / 8][4]) {
        const int s = it % STAGES;
        const unsigned a = s0 + s * STAGE + c * 64 * 128, b = s0 + s * STAGE + A_TILE;  // this warpgroup's 64 rows of A
        tg_mbar_wait(full(s), (it / STAGES) & 1);
        if (TG_P_MN) {
            const float *pa = reinterpret_cast<const float *>(smem + (s0 - tg_smem(smem)) + s * STAGE);
#pragma unroll
            for (int j = 0; j < BK / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    frag[j][e] = __float_as_uint(pa[a_mn_idx(r0 + 8 * (e % 2), 8 * j + t + 4 * (e / 2))]);
        }
        tg_wgmma_fence();
#pragma unroll
        for (int j = 0; j < BK / 8; ++j) {
            if (TG_P_MN) wgmma_rs(acc, frag[j], tg_desc_sw128(b + 32 * j), kt > 0 || j > 0);
            else         wgmma_ss(acc, tg_desc_sw128(a + 32 * j), tg_desc_sw128(b + 32 * j), kt > 0 || j > 0);
        }
        tg_wgmma_commit();
        tg_wgmma_wait<1>();  // the previous k tile's group is done: its stage may be refilled
        if (kt > 0) tg_mbar_arrive(empty((it - 1) % STAGES));
    };
    D += blockIdx.z * sD;
    const auto even = [](const float *p, long long ld) { return ((reinterpret_cast<unsigned long long>(p) | (unsigned long long)ld * 4) & 7) == 0; };
    const bool pairs = !TG_SWAP && even(D, ldd) && (beta == 0.0f || even(C, ldc));
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        tg_tile_origin<BM, BN>(tile, M, N, SWIZZLE, m0, n0);
        for (int kt = 0; kt < T; ++kt, ++it) {
            if (kt % 2) k_tile(kt, it, frag1);
            else        k_tile(kt, it, frag0);
        }
        tg_wgmma_wait<0>();
        tg_mbar_arrive(empty((it - 1) % STAGES));  // the tile's last stage (the producer may be waiting for it)

        // acc[4j + i] is the kernel's (A B)(m0 + 64c + 16w + g + 8 (i / 2), n0 + 8j + 2t + i % 2): column
        // pairs stored as one 8-byte access where D (and C, when read) allow it (rung 10's epilogue); with
        // TG_SWAP that is C's (col, row), stored one at a time (the 8 lanes of a column pair's g write 32
        // consecutive bytes)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + r0 + 8 * h;
            if (m >= M) continue;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int n = n0 + 8 * j + 2 * t;
                float v[2] = {alpha * acc[4 * j + 2 * h], alpha * acc[4 * j + 2 * h + 1]};
                if (pairs && n + 1 < N) {
                    if (beta != 0.0f) {
                        const float2 cv = *reinterpret_cast<const float2 *>(C + (tg_idx)m * ldc + n);
                        v[0] += beta * cv.x;
                        v[1] += beta * cv.y;
                    }
                    *reinterpret_cast<float2 *>(D + (tg_idx)m * ldd + n) = make_float2(v[0], v[1]);
                } else {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        if (n + e >= N) continue;
                        const tg_idx at = TG_SWAP ? (tg_idx)(n + e) * ldd + m : (tg_idx)m * ldd + n + e;
                        const tg_idx cat = TG_SWAP ? (tg_idx)(n + e) * ldc + m : (tg_idx)m * ldc + n + e;
                        D[at] = beta != 0.0f ? v[e] + beta * C[cat] : v[e];
                    }
                }
            }
        }
    }  // tiles
}
