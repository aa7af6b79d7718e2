// tg_tma_rows.cuh - B's rows that are not 16-byte aligned, copied whole by TMA (sm_90+), for gemm.cu's
// cp.async pipeline (TG_VEC_B = 5, B as stored: row-major K x N).
//
// cp.async copies 16 bytes only from a 16-byte aligned address, so rows of a leading dimension that is
// not a multiple of 4 floats are copied 8 or 4 bytes at a time (tg_async.cuh).  TMA has no such limit
// on where a box starts, only on the tensor's base address and strides (16-byte multiples).  Rows k
// and k + 4 of B lie 4 ldb floats apart, a multiple of 16 bytes, so the rows of one class k mod 4 form a
// tensor TMA can read: base B + r ldb rounded down to 16 bytes, its columns shifted right by what was
// rounded off (0..3 floats), row i being B's row 4 i + r.  The host encodes the four classes' maps
// (tma.py); a tile's rows of each class are then one box of BK/4 x BN floats, and a stage holds the
// four boxes one after another (row kk of the tile at row TG_TMA_ROW(kk), rows BN floats long), which
// the fragments read as they read a 16-byte copied tile, at other row offsets.  Elements outside a
// class's tensor (k < 0 in the first, partial tile; columns past N) arrive as zeros.
//
// Completion: one mbarrier per stage, armed with the tile's bytes by thread 0; lane 0 of warps 0-3
// issues the four boxes.  Every thread waits on the stage's barrier (its parity kept per stage in `phase`) before it
// reads the tile; the block's barrier that ends each tile orders the reads of a stage before TMA
// refills it (and a proxy fence, since TMA writes through the async proxy).
#pragma once
#include "tg_wgmma.cuh"  // TgTensorMap, mbarriers, tg_tma_2d

// the row of a stage's B tile (of BK_ rows) that holds the tile's row kk: the rows of class kk mod 4 together
#define TG_TMA_ROW(kk, BK_) (((kk) % 4) * ((BK_) / 4) + (kk) / 4)

// the four classes' tensor maps, passed by value as one __grid_constant__ kernel parameter
struct __align__(64) TgTmaRows {
    TgTensorMap m[4];
};

// What the K loop needs to copy B's tiles by TMA: the maps, the stages' mbarriers, their parities,
// B's row 0 as the loop sees it (the absolute k of its first row) and the classes' column shifts; and,
// for the loop under way, each box's map, column and class row (the same for the whole block: uniform
// registers), the rows moved on by BK/4 a tile.
struct TgTmaB {
    const TgTensorMap *maps;
    unsigned bars;   // shared byte address of STAGES mbarriers, 8 bytes each
    unsigned phase;  // bit s: the parity of stage s's next completion
    int k0;          // B's row 0 in the K loop is row k0 of the product's B
    int shifts;      // 2 bits per class r: the column of B's element (4 i + r, 0) in the class's tensor
    const TgTensorMap *map[4];  // box j of the next tile: rows of class map[j] - maps,
    int col[4];                 // from column col[j],
    int row[4];                 // from row row[j] of the class
};

// The mbarriers (count 1: thread 0's arrive), before any copy; the caller's barrier follows.
template <int STAGES_>
__device__ __forceinline__ void tg_tma_rows_init(unsigned bars, int tid) {
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES_; ++s) tg_mbar_init(bars + 8 * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
}

// A K loop's first tile starts at row k of the loop's B, its tiles at columns from n0: box j of every
// tile holds the tile's rows j, j + 4, ... (k + j is the first's row of B: its class and class row;
// two's complement gives both for negative k too, rows that arrive as zeros)
__device__ __forceinline__ void tg_tma_rows_start(TgTmaB &t, int k, int n0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int kk = t.k0 + k + j, r = kk & 3;
        t.map[j] = t.maps + r;
        t.col[j] = n0 + ((t.shifts >> (2 * r)) & 3);
        t.row[j] = kk >> 2;
    }
}

// Issue the copies of the loop's next BK_ x BN_ tile into the stage at shared byte address dst, its
// barrier that of stage `stage` (`on`: a tile of the loop; else nothing): box j lands as rows
// j BK_ / 4 .. (j + 1) BK_ / 4 - 1 of the stage (TG_TMA_ROW: where the fragments find row kk).  Called
// by every thread of a block of NT_ threads; lane 0 of warp j mod (NT_ / 32) issues box j, thread 0
// arms the barrier first (the boxes' bytes may land before: its arrival completes the phase), so the
// issue is shared by the warps' schedulers (thread 0 alone took 60 instructions a tile in its warp).
template <int BK_, int BN_, int NT_>
__device__ __forceinline__ void tg_tma_rows_copy(TgTmaB &t, unsigned dst, int stage, bool on, int tid) {
    static_assert(BK_ % 4 == 0 && BK_ / 4 <= 256 && NT_ % 32 == 0, "whole rows of each class, a box at most 256 rows");
    constexpr int NW = NT_ / 32;
    if (on && tid % 32 == 0 && tid / 32 < 4) {
        const unsigned bar = t.bars + 8 * stage;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the block's reads of the stage, then TMA's writes
        if (tid == 0) tg_mbar_expect_tx(bar, BK_ * BN_ * 4);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (j % NW == tid / 32) tg_tma_2d(dst + j * (BK_ / 4) * BN_ * 4, t.map[j], t.col[j], t.row[j], bar);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) t.row[j] += BK_ / 4;
}

// Zero the first `rows` rows of a landed tile (at `tile`, BK_ x BN_ as TMA lays it out), every thread a
// share: a loop's first tile starts before its first row where its K is no multiple of BK_, and where
// those rows are B's (a split or stream-K segment after the first) TMA reads them as they are.  A's
// copies zero-fill theirs, so they add nothing, but for 0 x Inf = NaN: zeroed, as cp.async zero-fills.
template <int BK_, int BN_, int NT_>
__device__ __forceinline__ void tg_tma_rows_zero(float *tile, int rows, int tid) {
    for (int kk = 0; kk < rows; ++kk)
        for (int c = tid; c < BN_; c += NT_) tile[TG_TMA_ROW(kk, BK_) * BN_ + c] = 0.0f;
}

// Wait until stage `stage`'s tile has landed (every thread, before reading it).
__device__ __forceinline__ void tg_tma_rows_wait(TgTmaB &t, int stage) {
    tg_mbar_wait(t.bars + 8 * stage, (t.phase >> stage) & 1);
    t.phase ^= 1u << stage;
}
