// tf32_peak: the tensor cores' TF32 throughput, measured (not taken from a datasheet), the way the
// tensor-core rungs use them: wgmma.mma_async m64n128k8 with A in registers and B in shared memory
// (sm_90a; tg_wgmma.cuh).  Each warpgroup of a block issues GROUP wgmma into its own accumulators per
// commit group and keeps one group in flight; the host launches a block per SM.  B is a 128 x 8 tile
// of nonzero values in shared memory, A nonzero constants.  FLOPs = 2 * 64 * 128 * 8 per wgmma.  The
// sums are written so the compiler cannot drop the work.
#include "tg_async.cuh"  // tg_smem
#include "tg_wgmma.cuh"

#ifndef GROUP
#define GROUP 4
#endif
#define WARPGROUPS 2

extern "C" __global__ void __launch_bounds__(128 * WARPGROUPS, 1) tf32_peak(float *out, int iters) {
    __shared__ __align__(128) float b[128 * 8];
    for (int i = threadIdx.x; i < 128 * 8; i += blockDim.x) b[i] = 1.0f + (i % 7) * 0.125f;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, then wgmma's reads
    __syncthreads();
    // B K-major in 8-row x 16-byte core matrices: k columns 0-3 and 4-7 128 bytes apart, 8-row groups 256
    const unsigned long long desc = tg_desc(tg_smem(b), 128, 256);
    const unsigned a[4] = {0x3f800000u, 0x3f000000u, 0x3e800000u, 0x3f400000u};  // 1, 0.5, 0.25, 0.75
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    for (int it = 0; it < iters; ++it) {
        tg_wgmma_fence();
#pragma unroll
        for (int g = 0; g < GROUP; ++g) tg_wgmma_128_rs(d, a, desc, 1);
        tg_wgmma_commit();
        tg_wgmma_wait<1>();
    }
    tg_wgmma_wait<0>();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) s += d[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
