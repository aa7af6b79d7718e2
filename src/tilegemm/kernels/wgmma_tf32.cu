// wgmma_tf32.cu - the library's one-pass TF32 product on Hopper (precision "tf32", sm_90a): both
// operands stream from global memory to shared memory by TMA and from there to the tensor cores,
// untouched by any thread.  Follows the PTX ISA's wgmma / TMA / mbarrier sections (docs/sources.md);
// measured in docs/perf-notes.md.
//
// What differs from rung 10 (10_wgmma_tf32x3.cu), whose one-pass form it replaces for "tf32":
// - No split and no producer pass.  wgmma's TF32 form reads both operands K-major; here they arrive
//   K-major from global memory (A row-major, B as a transposed view, i.e. B^T row-major; the host
//   transposes an operand stored the other way into the workspace first, pack.cu), so the producer
//   is one thread issuing TMA copies, and the consumers only issue wgmma.
// - Both operands from shared memory (wgmma's SS form), in the 128-byte swizzle TMA writes: rows of
//   BK = 32 TF32, descriptors tg_desc_sw128, a k step of 8 at +32 bytes.
// - Tiles of BM x BN = 128 x 256 (-D BN=128 for narrow products): two consumer warpgroups of 64 x BN,
//   one wgmma m64nBNk8 per k step; a STAGES-deep ring of [A | B] tiles, full/empty mbarriers.
// - The products are summed on the tensor cores over all of K, one wgmma group in flight: TF32's
//   10-bit operands dominate its error (docs/accuracy.md), as in cuBLAS's TF32 mode.
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
constexpr int A_TILE = BM * BK * 4, B_TILE = BN * BK * 4, STAGE = A_TILE + B_TILE;  // bytes, multiples of 1024
static_assert(BN == 128 || BN == 256, "BN is 128 or 256");

template <int N_>
__device__ __forceinline__ void wgmma_ss(float *d, unsigned long long a, unsigned long long b, int acc);
template <>
__device__ __forceinline__ void wgmma_ss<128>(float *d, unsigned long long a, unsigned long long b, int acc) {
    tg_wgmma_128_ss(d, a, b, acc);
}
template <>
__device__ __forceinline__ void wgmma_ss<256>(float *d, unsigned long long a, unsigned long long b, int acc) {
    tg_wgmma_256_ss(d, a, b, acc);
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

    int m0, n0;
    tg_tile_origin<BM, BN>(blockIdx.x, M, N, SWIZZLE, m0, n0);
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
        tg_setmaxnreg_dec40();
        if (tid != 0) return;
        for (int kt = 0; kt < T; ++kt) {
            const int s = kt % STAGES;
            if (kt >= STAGES) tg_mbar_wait(empty(s), ((kt / STAGES) & 1) ^ 1);  // the consumers are done with it
            const unsigned st = s0 + s * STAGE;
            tg_mbar_expect_tx(full(s), STAGE);
            tg_tma_2d(st, &tA, k0 + kt * BK, m0, full(s));           // A: rows m, 32 k each
            tg_tma_2d(st + A_TILE, &tB, k0 + kt * BK, n0, full(s));  // B^T: rows n, 32 k each
        }
        return;
    }

    // ---------------------------------------------------------------- the consumer warpgroups
    tg_setmaxnreg_inc232();
    const int c = wg - 1, w = (tid % 128) / 32, g = (tid % 32) / 4, t = tid % 4;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    for (int kt = 0; kt < T; ++kt) {
        const int s = kt % STAGES;
        const unsigned a = s0 + s * STAGE + c * 64 * 128, b = s0 + s * STAGE + A_TILE;  // this warpgroup's 64 rows of A
        tg_mbar_wait(full(s), (kt / STAGES) & 1);
        tg_wgmma_fence();
#pragma unroll
        for (int j = 0; j < BK / 8; ++j)
            wgmma_ss<BN>(acc, tg_desc_sw128(a + 32 * j), tg_desc_sw128(b + 32 * j), kt > 0 || j > 0);
        tg_wgmma_commit();
        tg_wgmma_wait<1>();  // the previous k tile's group is done: its stage may be refilled
        if (kt > 0) tg_mbar_arrive(empty((kt - 1) % STAGES));
    }
    tg_wgmma_wait<0>();

    // acc[4j + i] is (A B)(m0 + 64c + 16w + g + 8 (i / 2), n0 + 8j + 2t + i % 2): column pairs stored as
    // one 8-byte access where D (and C, when read) allow it (rung 10's epilogue)
    D += blockIdx.z * sD;
    const auto even = [](const float *p, long long ld) { return ((reinterpret_cast<unsigned long long>(p) | (unsigned long long)ld * 4) & 7) == 0; };
    const bool pairs = even(D, ldd) && (beta == 0.0f || even(C, ldc));
    const int r0 = 64 * c + 16 * w + g;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int m = m0 + r0 + 8 * h;
        if (m >= M) continue;
        float *row = D + (tg_idx)m * ldd;
        const float *crow = C + (tg_idx)m * ldc;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int n = n0 + 8 * j + 2 * t;
            float v[2] = {alpha * acc[4 * j + 2 * h], alpha * acc[4 * j + 2 * h + 1]};
            if (pairs && n + 1 < N) {
                if (beta != 0.0f) {
                    const float2 cv = *reinterpret_cast<const float2 *>(crow + n);
                    v[0] += beta * cv.x;
                    v[1] += beta * cv.y;
                }
                *reinterpret_cast<float2 *>(row + n) = make_float2(v[0], v[1]);
            } else {
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    if (n + e < N) row[n + e] = beta != 0.0f ? v[e] + beta * crow[n + e] : v[e];
            }
        }
    }
}
