// fp32_peak: FP32 FFMA throughput of the GPU, measured (not taken from a datasheet).
//
// Every thread runs CHAINS independent FFMA chains, so no FFMA waits on the one before it once
// a few warps share a scheduler; the host launches enough blocks to fill every SM.  No memory
// traffic inside the loop.  FLOPs = 2 * CHAINS * iters * threads.  The final sum is written so
// the compiler cannot drop the work.
#ifndef CHAINS
#define CHAINS 16
#endif

extern "C" __global__ void __launch_bounds__(256) fp32_peak(float *out, int iters, float x, float y) {
    float acc[CHAINS];
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) acc[j] = threadIdx.x * 1e-3f + j;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) acc[j] = fmaf(acc[j], x, y);
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) s += acc[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
