// tg_wgmma.cuh - Hopper's asynchronous machinery, as rung 10 and wgmma_tf32.cu use it (sm_90a):
// mbarriers, TMA tile copies (cp.async.bulk.tensor), warpgroup mma (wgmma.mma_async, TF32, m64n128k8
// and m64n256k8, A from registers or shared memory) and its shared-memory matrix descriptors.  PTX ISA
// sections: "Asynchronous warpgroup level matrix multiply-accumulate", "Tensor copy", "mbarrier"
// (docs/sources.md).
#pragma once

// A CUtensorMap (the driver's 128-byte TMA descriptor, cuTensorMapEncodeTiled), passed by value as a
// __grid_constant__ kernel parameter; the kernel only takes its address.
struct __align__(64) TgTensorMap {
    unsigned long long v[16];
};

// ---------------------------------------------------------------- mbarriers (shared byte addresses)
__device__ __forceinline__ void tg_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// arrive, and expect `bytes` more of transaction (TMA) traffic before the phase completes
__device__ __forceinline__ void tg_mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tg_mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// wait until the phase of parity `parity` has completed (a new barrier counts its phase "1" done)
__device__ __forceinline__ void tg_mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n TG_WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra TG_WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// ---------------------------------------------------------------- TMA: a box of a 2-D tensor -> shared
// dst: shared byte address; (c0, c1): the box's first element, innermost coordinate first (out of
// range elements arrive as zeros); bar: the mbarrier that counts the bytes in
__device__ __forceinline__ void tg_tma_2d(unsigned dst, const TgTensorMap *map, int c0, int c1, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// ---------------------------------------------------------------- wgmma
// the output operands of a warpgroup's 64 (m64n128) or 128 (m64n256) FP32 sums, d[0] .. d[N-1]
#define TG_D64 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define TG_D128 \
    TG_D64, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
// A shared-memory matrix descriptor, no swizzle: the operand is K-major in "core matrices" of 8 rows
// x 16 bytes (4 TF32), 128 contiguous bytes each; lbo: bytes from one core matrix to the next along
// K, sbo: along M (or N).
__device__ __forceinline__ unsigned long long tg_desc(unsigned saddr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((saddr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32);
}
__device__ __forceinline__ void tg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void tg_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// d (64 x 128 FP32, 64 per thread) = a (64 x 8) b (8 x 128) + (accumulate ? d : 0), TF32 operands:
// b in shared memory (its descriptor), a in registers (lane (g, t) of warp w holds (16w + g, t),
// (16w + g + 8, t), (16w + g, t + 4), (16w + g + 8, t + 4) in a[0..3]).  Lane (g, t) of warp w holds
// d[4j + i] = D(16w + g + 8 (i / 2), 8j + 2t + i % 2).
__device__ __forceinline__ void tg_wgmma_128_rs(float *d, const unsigned *a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : TG_D64
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// ---------------------------------------------------------------- wgmma with both operands in shared memory
// A descriptor of a K-major operand tile as TMA writes it with the 128-byte swizzle: rows of 32 TF32
// (128 bytes), 8-row groups 1024 bytes apart (SBO), the tile 1024-byte aligned; a k step of 8 within
// the row starts 32 bytes further (the swizzle is applied by the hardware to the address bits).
__device__ __forceinline__ unsigned long long tg_desc_sw128(unsigned saddr) {
    return (unsigned long long)((saddr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}
// d (64 x 128 FP32, 64 per thread) = a (64 x 8) b (8 x 128) + (accumulate ? d : 0), TF32 operands both
// in shared memory (descriptors: tg_desc_sw128).  d's layout as tg_wgmma_128_rs's, j up to 15.
__device__ __forceinline__ void tg_wgmma_128_ss(float *d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
        : TG_D64
        : "l"(a), "l"(b), "r"(accumulate));
}

// d (64 x 256 FP32, 128 per thread) = a (64 x 8) b (8 x 256) + (accumulate ? d : 0), TF32 operands both
// in shared memory (descriptors: tg_desc_sw128).  d's layout as tg_wgmma_128_rs's, j up to 31.
__device__ __forceinline__ void tg_wgmma_256_ss(float *d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1;\n}\n"
        : TG_D128
        : "l"(a), "l"(b), "r"(accumulate));
}

// tg_wgmma_128_rs's m64n256k8 form: d 64 x 256 (128 per thread), a from registers, b in shared memory.
__device__ __forceinline__ void tg_wgmma_256_rs(float *d, const unsigned *a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %133, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
        : TG_D128
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// setmaxnreg: a warpgroup gives up registers (dec) or takes them (inc), R per thread (a multiple of 8)
template <int R>
__device__ __forceinline__ void tg_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R) : "memory"); }
template <int R>
__device__ __forceinline__ void tg_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R) : "memory"); }
