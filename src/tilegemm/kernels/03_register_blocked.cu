// Rung 3 - 03_register_blocked: each thread computes an 8x8 micro-tile from registers.
//
// Follows: GEMM illustrated §3-4 and GEMM part 2 §1.1; sources in docs/sources.md.
// Changed from rung 2: the block tile grows to 128 x 128 with BK = 8, and each of the 256 threads
// owns 8 x 8 = 64 outputs (rows ty*8.., columns tx*8..).  Per k it reads 8 values of A and 8 of B
// from shared memory into registers and does 64 FMAs: 4 FMAs per shared-memory load instead of
// 1 (GEMM illustrated §4, sgemm_V1, on §3's split-by-k tiles; block/thread parameters bm=bn=128,
// bk=8, rm=rn=8 of GEMM part 2 §1.1).
// Shared memory keeps A as stored (As[m][k]), so a thread's 8 A values are 8 words apart: scalar
// loads with 2-way bank conflicts, fixed by rung 4.  Loads are 4-byte, one element at a time.
// Edges: a block whose tile lies inside C and whose K tile is full takes the unchecked path;
// otherwise out-of-range elements load as 0 and only valid outputs are stored.  Any M, N, K >= 1.
// Constraints: fixed 128/8/128/8/8 with 256 threads (static_asserts below).
#include "tg_common.cuh"

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define NT ((BM / TM) * (BN / TN))
static_assert(NT == 256 && (BM * BK) % NT == 0 && (BK * BN) % NT == 0, "256 threads share each tile");

template <bool EDGE>
__device__ __forceinline__ void load_tiles(float (*As)[BK], float (*Bs)[BN], const float *A, tg_idx lda,
                                           const float *B, tg_idx ldb, int m0, int n0, int k0, int M,
                                           int N, int K, int tid) {
#pragma unroll
    for (int i = 0; i < BM * BK / NT; ++i) {  // As[r][c] = A(m0 + r, k0 + c)
        const int e = tid + i * NT, r = e / BK, c = e % BK;
        As[r][c] = (!EDGE || (m0 + r < M && k0 + c < K)) ? A[tg_a_off(m0 + r, k0 + c, lda)] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < BK * BN / NT; ++i) {  // Bs[r][c] = B(k0 + r, n0 + c)
        const int e = tid + i * NT, r = e / BN, c = e % BN;
        Bs[r][c] = (!EDGE || (k0 + r < K && n0 + c < N)) ? B[tg_b_off(k0 + r, n0 + c, ldb)] : 0.0f;
    }
}

extern "C" __global__ void __launch_bounds__(NT) tilegemm_kernel(TG_GEMM_PARAMS) {
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x, ty = tid / (BN / TN), tx = tid % (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool interior = m0 + BM <= M && n0 + BN <= N;

    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        if (interior && k0 + BK <= K)
            load_tiles<false>(As, Bs, A, lda, B, ldb, m0, n0, k0, M, N, K, tid);
        else
            load_tiles<true>(As, Bs, A, lda, B, ldb, m0, n0, k0, M, N, K, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[ty * TM + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + tx * TN + j;
            if (interior || (m < M && n < N)) C[(tg_idx)m * ldc + n] = acc[i][j];
        }
    }
}
