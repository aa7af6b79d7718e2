// splitk_reduce.cu - the second half of split-K (gemm.cu): D[b] = alpha * sum_s W[b, s] + beta * C[b].
//
// W holds the splits' partial products in planes of M rows of ldw floats (ldw >= N, a multiple of 4
// so that the family's float4 stores into W stay aligned): W[((b * splits + s) * M + m) * ldw + n].  With
// splits = 0 this is D = beta * C (or zeros): the K = 0 case.  C is not read when beta == 0.  The
// splits are added in a fixed order, so the result does not depend on timing.
// Grid: x = column groups of 256 threads, y = rows (batch-major, grid-stride): no index division.
// VEC (runtime): 4 = a thread takes 4 columns with float4 accesses (the host checks N % 4 == 0 and
// the 16-byte alignment of D, and of C when beta != 0); 1 = one column.  64-bit offsets.
// On sm_90+ the host launches it as a programmatic dependent of the GEMM before it (PDL): its blocks
// may be scheduled while the GEMM's last blocks run, and griddepcontrol.wait holds every thread
// until that grid has completed and its stores are visible (without the PDL launch the wait
// returns at once).
typedef long long tg_idx;

template <int VEC>
__device__ __forceinline__ void reduce_rows(int M, int N, int batches, int splits, const float *__restrict__ W,
                                            tg_idx ldw, const float *C, tg_idx ldc, tg_idx sC, float *D, tg_idx ldd,
                                            tg_idx sD, float alpha, float beta) {
    const int n = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (n >= N) return;
    const tg_idx rows = (tg_idx)M * batches, plane = (tg_idx)M * ldw;
    for (tg_idx r = blockIdx.y; r < rows; r += gridDim.y) {
        const tg_idx b = r / M, m = r - b * M;
        const float *w = W + b * splits * plane + m * ldw + n;
        float s[VEC] = {};
        for (int j = 0; j < splits; ++j) {
            if constexpr (VEC == 4) {
                const float4 v = *reinterpret_cast<const float4 *>(w + j * plane);
                s[0] += v.x; s[1] += v.y; s[2] += v.z; s[3] += v.w;
            } else {
                s[0] += w[j * plane];
            }
        }
        const float *c = C + b * sC + m * ldc + n;
        float *d = D + b * sD + m * ldd + n;
        float o[VEC];
#pragma unroll
        for (int q = 0; q < VEC; ++q) o[q] = alpha * s[q];
        if (beta != 0.0f) {
            if constexpr (VEC == 4) {
                const float4 v = *reinterpret_cast<const float4 *>(c);
                o[0] += beta * v.x; o[1] += beta * v.y; o[2] += beta * v.z; o[3] += beta * v.w;
            } else {
                o[0] += beta * c[0];
            }
        }
        if constexpr (VEC == 4) *reinterpret_cast<float4 *>(d) = make_float4(o[0], o[1], o[2], o[3]);
        else                    d[0] = o[0];
    }
}

extern "C" __global__ void __launch_bounds__(256) tilegemm_splitk_reduce(
    int M, int N, int batches, int splits, const float *__restrict__ W, long long ldw, const float *C, long long ldc,
    long long sC, float *D, long long ldd, long long sD, float alpha, float beta, int vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    if (vec == 4) reduce_rows<4>(M, N, batches, splits, W, ldw, C, ldc, sC, D, ldd, sD, alpha, beta);
    else          reduce_rows<1>(M, N, batches, splits, W, ldw, C, ldc, sC, D, ldd, sD, alpha, beta);
}
