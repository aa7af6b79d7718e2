// Rung 4 - 04_vectorized: 16-byte global and shared loads, A transposed in shared memory.
//
// Follows: GEMM part 2 §2.2 and GEMM illustrated §5.2; sources in docs/sources.md.
// Changed from rung 3: global loads are float4 along each operand's contiguous direction
// (LDG.128: a quarter of the load instructions), and A is stored transposed, As[k][m], so a
// thread's 8 A values for one k are contiguous like its 8 B values: two LDS.128 each instead of
// eight LDS.32 (GEMM part 2 §2.2; GEMM illustrated §5.2, "store A transposed").  Same tile
// (128/8/128/8/8, 256 threads), same single shared buffer with two barriers per K step.
// Edges: as rung 3 (unchecked interior path; zero-filled loads and checked stores at the edges).
// Constraints: operands 16-byte aligned with leading dimensions divisible by 4 for TG_VEC=4; the
// host picks TG_VEC=1 (4-byte loads, same arithmetic) otherwise.  Any M, N, K >= 1.
#include "tg_tiles.cuh"

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define NT ((BM / TM) * (BN / TN))
static_assert(NT == 256, "256 threads");

extern "C" __global__ void __launch_bounds__(NT) tilegemm_kernel(TG_GEMM_PARAMS) {
    __shared__ __align__(16) float As[BK][BM];
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x, ty = tid / (BN / TN), tx = tid % (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool interior = m0 + BM <= M && n0 + BN <= N;

    ATile<BM, BK, NT> ta;
    BTile<BK, BN, NT> tb;
    ta.start(A, lda, m0, tid);
    tb.start(B, ldb, n0, tid);
    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        if (interior && k0 + BK <= K) {
            ta.load<false>(lda, m0, k0, M, K, tid);
            tb.load<false>(ldb, k0, n0, K, N, tid);
        } else {
            ta.load<true>(lda, m0, k0, M, K, tid);
            tb.load<true>(ldb, k0, n0, K, N, tid);
        }
        ta.store<BM>(&As[0][0], tid);
        tb.store<BN>(&Bs[0][0], tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            *reinterpret_cast<float4 *>(&a[0]) = *reinterpret_cast<const float4 *>(&As[k][ty * TM]);
            *reinterpret_cast<float4 *>(&a[4]) = *reinterpret_cast<const float4 *>(&As[k][ty * TM + 4]);
            *reinterpret_cast<float4 *>(&b[0]) = *reinterpret_cast<const float4 *>(&Bs[k][tx * TN]);
            *reinterpret_cast<float4 *>(&b[4]) = *reinterpret_cast<const float4 *>(&Bs[k][tx * TN + 4]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
        ta.next(lda);
        tb.next(ldb);
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const float4 v = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            if (interior) tg_store4<false>(C, ldc, m0 + ty * TM + i, n0 + tx * TN + j, M, N, v);
            else          tg_store4<true>(C, ldc, m0 + ty * TM + i, n0 + tx * TN + j, M, N, v);
        }
}
