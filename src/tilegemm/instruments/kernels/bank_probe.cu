// bank_probe: one warp issues exactly one shared-memory access of WIDTH bytes per lane, each lane at
// the byte offset given in offs[lane] (-1: the lane is predicated off).  Run under Nsight Compute,
// the launch's shared-memory wavefront and bank-conflict counters then belong to that single
// instruction, which is how the bank simulator (instruments/banks.py) is checked on real hardware.
// -D WIDTH=4|8|16, -D STORE=0|1.  Inline PTX so the compiler emits the one access and nothing else.
#ifndef WIDTH
#define WIDTH 16
#endif
#ifndef STORE
#define STORE 0
#endif
static_assert(WIDTH == 4 || WIDTH == 8 || WIDTH == 16, "WIDTH is 4, 8 or 16 bytes");

extern "C" __global__ void __launch_bounds__(32) bank_probe(const int *offs, float *out) {
    __shared__ __align__(16) float s[8192];  // 32 KB: offsets up to 32767 bytes
    const int lane = threadIdx.x, o = offs[lane];
    float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f, r3 = 0.0f;
    if (o >= 0) {
        const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s)) + o;
#if STORE
        r0 = lane;
#if WIDTH == 4
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(r0) : "memory");
#elif WIDTH == 8
        asm volatile("st.shared.v2.f32 [%0], {%1, %1};" ::"r"(a), "f"(r0) : "memory");
#else
        asm volatile("st.shared.v4.f32 [%0], {%1, %1, %1, %1};" ::"r"(a), "f"(r0) : "memory");
#endif
#else
#if WIDTH == 4
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(r0) : "r"(a) : "memory");
#elif WIDTH == 8
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(r0), "=f"(r1) : "r"(a) : "memory");
#else
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(r0), "=f"(r1), "=f"(r2), "=f"(r3) : "r"(a) : "memory");
#endif
#endif
    }
    out[lane] = r0 + r1 + r2 + r3;
}
