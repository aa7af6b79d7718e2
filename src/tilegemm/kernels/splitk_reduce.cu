// splitk_reduce.cu - the second half of split-K (gemm.cu): D[b] = alpha * sum_s W[b, s] + beta * C[b].
//
// W holds the splits' partial products in planes of M rows of ldw floats (ldw >= N, a multiple of 4
// so that the family's float4 stores into W stay aligned): W[((b * splits + s) * M + m) * ldw + n].  With
// splits = 0 this is D = beta * C (or zeros): the K = 0 case.  C is not read when beta == 0.  The
// splits are added in a fixed order, so the result does not depend on timing.  One thread per
// element, grid-stride; 64-bit indices throughout.
typedef long long tg_idx;

extern "C" __global__ void __launch_bounds__(256) tilegemm_splitk_reduce(
    int M, int N, int batches, int splits, const float *__restrict__ W, long long ldw, const float *C, long long ldc,
    long long sC, float *D, long long ldd, long long sD, float alpha, float beta) {
    const tg_idx mn = (tg_idx)M * N, total = mn * batches;
    for (tg_idx i = blockIdx.x * (tg_idx)blockDim.x + threadIdx.x; i < total; i += (tg_idx)gridDim.x * blockDim.x) {
        const tg_idx b = i / mn, e = i % mn, m = e / N, n = e % N;
        float s = 0.0f;
        const tg_idx plane = (tg_idx)M * ldw;
        const float *w = W + b * splits * plane + m * ldw + n;
        for (int j = 0; j < splits; ++j) s += w[j * plane];
        float r = alpha * s;
        if (beta != 0.0f) r += beta * C[b * sC + m * ldc + n];
        D[b * sD + m * ldd + n] = r;
    }
}
