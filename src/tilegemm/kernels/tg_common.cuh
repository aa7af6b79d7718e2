// tg_common.cuh - what every rung shares: operand layouts, the entry signature, the block swizzle.
//
// Every kernel computes C = A * B with A: M x K, B: K x N, C: M x N row-major (ldc >= N).
// Layouts come in as defines (0 = row-major as stored, 1 = a transposed view, i.e. column-major):
//   TG_TRANS_A=0: A(m,k) at A[m*lda + k]      TG_TRANS_A=1: A(m,k) at A[k*lda + m]
//   TG_TRANS_B=0: B(k,n) at B[k*ldb + n]      TG_TRANS_B=1: B(k,n) at B[n*ldb + k]
// Offsets are 64-bit, so a matrix may hold more than 2^31 elements.
#pragma once

#ifndef TG_TRANS_A
#define TG_TRANS_A 0
#endif
#ifndef TG_TRANS_B
#define TG_TRANS_B 0
#endif

// Access widths: TG_VEC = 4 when an operand allows 16-byte accesses along its contiguous direction
// (16-byte aligned, leading dimension a multiple of 4), else 1 (4-byte accesses).  The family takes
// one per operand (TG_VEC_A, TG_VEC_B, and TG_VEC_D for its stores), so one misaligned operand does
// not narrow the others' accesses; each defaults to TG_VEC, which the rungs use for all three.  The
// family also takes 2 (8-byte accesses: 8-byte aligned, leading dimension even), where the rungs
// take 1.
#ifndef TG_VEC
#define TG_VEC 4
#endif
#ifndef TG_VEC_A
#define TG_VEC_A TG_VEC
#endif
#ifndef TG_VEC_B
#define TG_VEC_B TG_VEC
#endif
#ifndef TG_VEC_D
#define TG_VEC_D TG_VEC
#endif
// The family's cp.async copies also take, for A or B, two widths by rows (tg_async.cuh, RowClassTile):
// 3 for rows of odd length (the rows that start 8-byte aligned copied 8 bytes at a time, the others
// 4), 6 for rows of twice an odd length (the rows that start 16-byte aligned 16 bytes at a time, the
// others 8).
#define TG_WIDTH_OK(w) ((w) == 4 || (w) == 2 || (w) == 1)
#define TG_ROWS_OK(w) (TG_WIDTH_OK(w) || (w) == 3 || (w) == 6)
static_assert(TG_WIDTH_OK(TG_VEC) && TG_WIDTH_OK(TG_VEC_D) && TG_ROWS_OK(TG_VEC_A) && TG_ROWS_OK(TG_VEC_B),
              "access widths are 4 (16-byte accesses), 2 (8-byte) or 1 (4-byte); A and B also 3 or 6 (two "
              "widths by rows)");

typedef long long tg_idx;

__device__ __forceinline__ tg_idx tg_a_off(tg_idx m, tg_idx k, tg_idx lda) {
    return TG_TRANS_A ? k * lda + m : m * lda + k;
}
__device__ __forceinline__ tg_idx tg_b_off(tg_idx k, tg_idx n, tg_idx ldb) {
    return TG_TRANS_B ? n * ldb + k : k * ldb + n;
}

#define TG_GEMM_PARAMS                                                             \
    int M, int N, int K, const float *__restrict__ A, long long lda,               \
        const float *__restrict__ B, long long ldb, float *__restrict__ C, long long ldc

// Block b of a 1-D grid of BM_ x BN_ tiles -> the tile's first row and column, swizzle block rows at
// a time (rung 8's block swizzle: the blocks resident together share A rows and B columns in L2)
template <int BM_, int BN_>
__device__ __forceinline__ void tg_tile_origin(int b, int M, int N, int swizzle, int &m0, int &n0) {
    const int grid_m = (M + BM_ - 1) / BM_, grid_n = (N + BN_ - 1) / BN_;
    int bm = b / grid_n, bn = b % grid_n;
    if (swizzle > 1) {
        const int per_group = swizzle * grid_n, first = (b / per_group) * swizzle;
        const int rows = min(grid_m - first, swizzle), in_group = b % per_group;
        bm = first + in_group % rows;
        bn = in_group / rows;
    }
    m0 = bm * BM_;
    n0 = bn * BN_;
}
