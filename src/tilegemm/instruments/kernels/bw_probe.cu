// bw_probe: read bandwidth of the memory level a buffer fits in.  Every thread reads float4s in a
// grid-stride loop over n4 elements, REPS times over; a buffer far larger than L2 measures DRAM,
// one that fits in L2 measures L2 (loads use ld.global.cg, so they are not served by L1).  The
// sum is written only when it matches an impossible value, so the compiler keeps the loads.
extern "C" __global__ void __launch_bounds__(256) bw_probe(const float4 *__restrict__ p, long long n4,
                                                           int reps, float *out) {
    float acc = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (int r = 0; r < reps; ++r)
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
            const float4 v = __ldcg(p + i);
            acc += v.x + v.y + v.z + v.w;
        }
    if (acc == -1.2345e-30f) out[0] = acc;
}
