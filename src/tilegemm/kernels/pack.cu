// pack.cu - an operand copied into 16-byte aligned rows, for the Hopper tensor-core path: TMA
// (rung 10's kernel) reads only rows that start on 16-byte boundaries, so an operand whose rows do
// not (a row length that is not a multiple of 4 floats, or an unaligned pointer) is copied first;
// rung 10's kernel then reads the copy through TMA (docs/perf-notes.md: about twice as fast as its
// producer's 4-byte cp.async copies, the copy included).
//
// dst[r * ldd + c] = src[r * lds + c] for r < rows, c < cols; ldd is cols rounded up to a multiple
// of 4 and dst is 16-byte aligned, so each thread writes one float4 (the columns past cols as zeros:
// TMA's view stops at cols, they are never read).  The source is read one float at a time (its rows
// start anywhere); consecutive threads take consecutive column groups, so a warp reads 512
// consecutive bytes of a row (rows of more than 124 floats; narrower rows: a warp spans several).
// Grid: GPR (runtime, a power of two dividing 256) column groups of 4 per row and 256 / GPR rows per
// block, so that narrow rows still fill the block; blocks along x take further column groups, along
// y further rows (grid-stride).  64-bit offsets.
// PDL (sm_90+), both kernels: the host may launch a copy as a programmatic dependent of the kernel
// before it in the stream (the previous call's, whose workspace this copy may overwrite);
// griddepcontrol.wait, the first thing every thread does, holds it until that kernel has completed
// and its stores are visible (it returns at once after an ordinary launch).
typedef long long tg_idx;

extern "C" __global__ void __launch_bounds__(256) tilegemm_pack(int rows, int cols, const float *__restrict__ src,
                                                                long long lds, float *__restrict__ dst, long long ldd,
                                                                int gpr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int c = (blockIdx.x * gpr + threadIdx.x % gpr) * 4;
    if (c >= cols) return;
    const int per_block = blockDim.x / gpr;
    for (tg_idx r = (tg_idx)blockIdx.y * per_block + threadIdx.x / gpr; r < rows; r += (tg_idx)gridDim.y * per_block) {
        const float *s = src + r * lds + c;
        float4 v;
        v.x = s[0];
        v.y = c + 1 < cols ? s[1] : 0.0f;
        v.z = c + 2 < cols ? s[2] : 0.0f;
        v.w = c + 3 < cols ? s[3] : 0.0f;
        *reinterpret_cast<float4 *>(dst + r * ldd + c) = v;
    }
}

// tilegemm_pack_t: the transposed copy, for the TF32 path (wgmma_tf32.cu reads both operands K-major):
// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols; ldd is rows rounded up to a multiple of
// 4 and dst 16-byte aligned (the columns past rows as zeros).  A block of 32 x 8 threads moves a 32 x
// 32 tile through shared memory (a column padded by one float: no bank conflicts either way), reading
// along src's rows and writing along dst's; blocks along x take column tiles, along y row tiles
// (grid-stride).
extern "C" __global__ void __launch_bounds__(256) tilegemm_pack_t(int rows, int cols, const float *__restrict__ src,
                                                                  long long lds, float *__restrict__ dst,
                                                                  long long ldd) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    __shared__ float tile[32][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int c0 = blockIdx.x * 32;
    const tg_idx pad_rows = (rows + 3) / 4 * 4;
    for (tg_idx r0 = (tg_idx)blockIdx.y * 32; r0 < pad_rows; r0 += (tg_idx)gridDim.y * 32) {
#pragma unroll
        for (int i = 0; i < 32; i += 8) {
            const tg_idx r = r0 + ty + i;
            const int c = c0 + tx;
            tile[ty + i][tx] = r < rows && c < cols ? src[r * lds + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 32; i += 8) {
            const int c = c0 + ty + i;
            const tg_idx r = r0 + tx;
            if (c < cols && r < pad_rows) dst[(tg_idx)c * ldd + r] = tile[tx][ty + i];
        }
        __syncthreads();
    }
}
