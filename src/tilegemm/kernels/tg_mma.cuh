// tg_mma.cuh - a warp's 64 x 32 tile of C on the tensor cores: mma.sync m16n8k8 with TF32 operands
// (sm_80+), one pass (TF32) or three (TF32x3: FP32 accuracy).  Used by rung 9 and the family
// (gemm.cu, MMA = 1 or 3).
//
// TF32x3 (Ootomo & Yokota; CUTLASS's 3xTF32, docs/sources.md): every operand value x is split as
// big = tf32(x), small = tf32(x - big), both rounded to nearest (cvt.rna), so x = big + small to
// about 2^-22 relative; then a b = big_a big_b + (big_a small_b + small_a big_b) + small_a small_b,
// and the last term (2^-22 relative) is dropped.  The two small products go into their own
// accumulators, added to the big one once, after the K loop: summed into the big accumulator as
// they come, they would lose their low bits to its magnitude at every step.
//
// Shared memory holds the tiles as the FFMA kernels do, As[k][m] and Bs[k][n] with rows LD floats
// long, LD % 32 == 4 (tg_async.cuh writes them).  Fragments are read with LDS.128, which the
// fragment layout of mma.m16n8k8 (PTX ISA, "Matrix fragments for mma.m16n8k8") does not give as
// such; two freedoms make it so, for lane (g, t) = (lane / 4, lane % 4):
//   - k: the sum over the 8 k of one mma does not depend on their order, so the mma's k = t and
//     k = t + 4 are read from shared rows 2t and 2t + 1 (the same for A and B);
//   - rows and columns: which shared row feeds an mma row is free, as long as the result lands in
//     the right place.  Lane group g supplies the A rows (q = 0..7) at warp rows
//     R(q) = (q / 4) * 32 + 4g + q % 4 (two runs of four: two LDS.128 per k row), mma tile i
//     taking q = 2i as its row g and q = 2i + 1 as its row g + 8; and the B columns 4g + j of
//     n-tile j (one LDS.128 per k row).
// The result: lane (g, t) holds acc[q][j] = C(R(q), 8t + j), an 8 x 8 thread tile of whole float4
// runs (rows in two runs of four 32 apart, columns 8t .. 8t+7), and each quarter-warp's LDS.128
// hits 32 different banks (rows 2t*LD apart, LD % 32 == 4: banks 8t + 4g + 0..3).
// Per k step of 8, a lane reads 6 LDS.128 (16 A values, 8 B values) for 16 mma (48 for TF32x3).
#pragma once

#ifndef TG_MMA_PASSES
#define TG_MMA_PASSES 3
#endif
static_assert(TG_MMA_PASSES == 1 || TG_MMA_PASSES == 3, "TG_MMA_PASSES is 1 (TF32) or 3 (TF32x3)");

// The TF32 value nearest to x, ties away from zero, as the bits mma reads (what cvt.rna.tf32.f32
// computes; ptxas expands that to five instructions, this is four).  A NaN becomes the canonical
// NaN: the rounding's carry would run out of a NaN's all-ones mantissa into its sign (0x7fffffff,
// the NaN the GPU makes, would become -0), and the NaN must reach the big sums (an Inf there would
// otherwise hide it).  Inf stays Inf; |x| within half a TF32 step of FLT_MAX rounds to Inf
// (docs/accuracy.md).
__device__ __forceinline__ unsigned tg_tf32(float x) {
    return x == x ? (__float_as_uint(x) + 0x1000u) & 0xffffe000u : 0x7fffe000u;
}
// the small half d = x - big: where x is NaN, big already carries it, so no NaN test here
__device__ __forceinline__ unsigned tg_tf32_small(float d) { return (__float_as_uint(d) + 0x1000u) & 0xffffe000u; }

// c += a b for one m16n8k8 tile (a: 4 registers, b: 2, c: 4; PTX fragment order)
__device__ __forceinline__ void tg_mma_16x8x8(float *c, const unsigned *a, const unsigned *b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// x -> (big, small); with one pass only big is used
__device__ __forceinline__ void tg_split(float x, unsigned &big, unsigned &small) {
    big = tg_tf32(x);
    small = TG_MMA_PASSES == 3 ? tg_tf32_small(x - __uint_as_float(big)) : 0u;
}

// The warp's 64 x 32 tile, one k step of 8: as, bs point at the warp's A column 4g and B column 4g
// in shared row 2t of the step (the caller adds the step's k offset).  big: the big products of
// the current k tile (FIRST: the tile's first step, which starts them from zero), lo: the small
// products (TF32x3), over all of K.
template <int LDA, int LDB, bool FIRST>
__device__ __forceinline__ void tg_mma_step(float (*big)[8], float (*lo)[8], const float *as, const float *bs) {
    static_assert(LDA % 32 == 4 && LDB % 32 == 4, "rows LD % 32 == 4 floats long: conflict-free LDS.128");
    float av[2][8], bv[2][4];  // [k row 2t + h][q] and [k row 2t + h][j]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        *reinterpret_cast<float4 *>(&av[h][0]) = *reinterpret_cast<const float4 *>(as + h * LDA);
        *reinterpret_cast<float4 *>(&av[h][4]) = *reinterpret_cast<const float4 *>(as + h * LDA + 32);
        *reinterpret_cast<float4 *>(&bv[h][0]) = *reinterpret_cast<const float4 *>(bs + h * LDB);
    }
    unsigned bb[4][2], bsm[4][2];  // per n-tile j: b0 (k = t) and b1 (k = t + 4)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) tg_split(bv[h][j], bb[j][h], bsm[j][h]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        // a0 = (row g, k t), a1 = (row g + 8, k t), a2 = (row g, k t + 4), a3 = (row g + 8, k t + 4)
        unsigned ab[4], asm_[4];
        tg_split(av[0][2 * i], ab[0], asm_[0]);
        tg_split(av[0][2 * i + 1], ab[1], asm_[1]);
        tg_split(av[1][2 * i], ab[2], asm_[2]);
        tg_split(av[1][2 * i + 1], ab[3], asm_[3]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            // c0, c1 = row g, columns 2t, 2t + 1 -> C(R(2i), 8t + j), C(R(2i), 8t + 4 + j);
            // c2, c3 the same for row g + 8 -> R(2i + 1)
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (!FIRST) c[0] = big[2 * i][j], c[1] = big[2 * i][4 + j], c[2] = big[2 * i + 1][j], c[3] = big[2 * i + 1][4 + j];
            tg_mma_16x8x8(c, ab, bb[j]);
            big[2 * i][j] = c[0];
            big[2 * i][4 + j] = c[1];
            big[2 * i + 1][j] = c[2];
            big[2 * i + 1][4 + j] = c[3];
            if (TG_MMA_PASSES == 3) {
                float d[4] = {lo[2 * i][j], lo[2 * i][4 + j], lo[2 * i + 1][j], lo[2 * i + 1][4 + j]};
                tg_mma_16x8x8(d, ab, bsm[j]);
                tg_mma_16x8x8(d, asm_, bb[j]);
                lo[2 * i][j] = d[0];
                lo[2 * i][4 + j] = d[1];
                lo[2 * i + 1][j] = d[2];
                lo[2 * i + 1][4 + j] = d[3];
            }
        }
    }
}

// A k tile of BK: its big products summed on the tensor cores from zero, then added to acc by FADD.
// The tensor cores' FP32 sums do not round to nearest: measured on the H100, an mma accumulator
// carried over all of K drifts one way, its relative error growing in proportion to K (2.4e-9 K:
// 9.6e-6 at K = 4096, against cuBLAS SGEMM's 1.1e-6), so each tile's sum is handed to an FP32 add
// (round to nearest) after BK k.  The small products are 2^-11 of the big ones and stay on the
// tensor cores over all of K.  TF32 (one pass) sums on the tensor cores throughout, as cuBLAS does.
template <int BK_, int LDA, int LDB>
__device__ __forceinline__ void tg_mma_tile(float (*acc)[8], float (*big)[8], float (*lo)[8], const float *as,
                                            const float *bs) {
    static_assert(BK_ % 8 == 0, "whole k steps");
    if (TG_MMA_PASSES == 1) {  // TF32: its 10-bit operands dominate the error; summed on the tensor cores
#pragma unroll
        for (int kk = 0; kk < BK_; kk += 8) tg_mma_step<LDA, LDB, false>(acc, lo, as + kk * LDA, bs + kk * LDB);
        return;
    }
    tg_mma_step<LDA, LDB, true>(big, lo, as, bs);
#pragma unroll
    for (int kk = 8; kk < BK_; kk += 8) tg_mma_step<LDA, LDB, false>(big, lo, as + kk * LDA, bs + kk * LDB);
#pragma unroll
    for (int q = 0; q < 8; ++q)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[q][j] += big[q][j];
}

// the result of one element: big + small sums, or the big one alone where it is Inf or NaN (an Inf
// operand makes its small part Inf - Inf = NaN, which must not turn SGEMM's Inf into NaN)
__device__ __forceinline__ float tg_mma_sum(float big, float small) { return fabsf(big) < __int_as_float(0x7f800000) ? big + small : big; }

// where a lane's fragments start in a tile's shared rows, and its C tile in the block tile: warp w of
// a block of WN warps along N covers rows (w / WN) * 64 and columns (w % WN) * 32
template <int WN>
struct TgMmaLane {
    int a, b;    // float offsets into As[0][.] and Bs[0][.] (add k * LD for row k)
    int r0, c0;  // acc[q][j] is C(r0 + (q / 4) * 32 + q % 4, c0 + j) of the block tile
    __device__ __forceinline__ TgMmaLane(int tid) {
        const int warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
        const int wm = (warp / WN) * 64, wn = (warp % WN) * 32;
        r0 = wm + 4 * g;
        c0 = wn + 8 * t;
        a = wm + 4 * g;  // + 2t rows: added by the caller as 2 * t * LDA (see tg_mma_row)
        b = wn + 4 * g;
    }
};

// the shared row of k step kk (a multiple of 8) that lane t reads first: kk + 2t
__device__ __forceinline__ int tg_mma_row(int kk, int tid) { return kk + 2 * (tid % 4); }
