// tg_staged_b.cuh - B's rows that are not 16-byte aligned copied into aligned rows by the product's own
// blocks, a chunk of k tiles at a time ahead of their K loops (gemm.cu, SK = 2, TG_VEC_B = TG_STAGED).
//
// Copied by a kernel of its own before the product (pack.cu), B costs the product a pass over B at
// DRAM speed; read as it is, its tiles take 4- or 8-byte copies.  Started beside the product on a
// second stream, the copy does not overlap it: the product's blocks fill the SMs.  Here the blocks
// that run split s of the tiles of one column of tiles (one a tile; all resident at once: the host
// launches the product in one grid of resident blocks) share the copying of split s's rows of B in
// that column, a chunk of TG_STAGE_CH k tiles at a time, TG_STAGE_AHEAD chunks ahead of their own K
// loops; each block copies its slice of a chunk (4-byte loads and stores, coalesced along the rows),
// then marks its slice done (its flag set to the launch's epoch after a fence: the hand-over of
// gemm.cu's SK = 2 fix-up); before the copies of a k tile that starts a chunk are issued, warp 0
// waits for every slice of that chunk, a flag a lane.  (Shared by every tile of the split, a chunk's
// slices took each block hundreds of flags to read, one after another, at every chunk: measured
// 1.5-2x slower than reading B as it is.)  The K loop
// then reads B from the aligned rows 16 bytes at a time (cp.async.cg: from L2, where the slices are).
//
// No block waits for a chunk it has not contributed to, and a block contributes to chunk c before it
// waits for any chunk past c - TG_STAGE_AHEAD + 1 (TG_STAGE_AHEAD * TG_STAGE_CH > STAGES - 1), so with
// every block resident every wait ends.  Residency is the host's expectation, not a guarantee (another
// stream's kernel may hold SMs while blocks of this grid wait to start): a block that has waited
// TG_STAGE_PATIENCE polls for a chunk copies the whole chunk itself.  Copies of a slice write the same
// values, so a slice written twice, or read while a late block writes it again, reads the same.
#pragma once
#include "tg_common.cuh"

#ifndef TG_STAGE_CH
#define TG_STAGE_CH (STAGES > 4 ? STAGES : 4)  // k tiles a chunk
#endif
#define TG_STAGE_AHEAD 2  // chunks a block copies ahead of the chunk its K loop reads
#ifndef TG_STAGE_BATCH
#define TG_STAGE_BATCH 2  // loads a thread has in flight while it copies (more spill in the 80- and 128-register builds)
#endif
#ifndef TG_STAGE_PATIENCE
#define TG_STAGE_PATIENCE 8192  // polls (about 64 ns apart) of a chunk's flags before a block copies the chunk itself
#endif

// One block's part in staging its split's rows of B, its tile's columns (cols of them): the source
// rows (B as stored) and the aligned rows, both at the split's first row and the tile's first column;
// the split's rows (its K loop's K) and k tiles (its T); the chunk flags of the tile's column (chunk c's
// slices at flags[c * stride ..]); the blocks that share them (group: the tiles of the column) and this
// block's place among them (me: its tile's row).
struct TgStage {
    const float *src;
    tg_idx lds;
    float *dst;
    tg_idx ldd;
    int *flags;
    int stride, epoch, group, me, cols, rows, T;
};

__device__ __forceinline__ int tg_stage_chunks(int T) { return (T + TG_STAGE_CH - 1) / TG_STAGE_CH; }

// The loop tiles of chunk c are [c CH, (c + 1) CH); tile t holds the split's rows
// [rows - (T - t) BK, rows - (T - t - 1) BK) (the first tile partial): chunk c's rows, clipped to [0, rows)
template <int BK_>
__device__ __forceinline__ void tg_stage_rows(const TgStage &s, int c, int &lo, int &hi) {
    lo = max(0, s.rows - (s.T - c * TG_STAGE_CH) * BK_);
    hi = min(s.rows, s.rows - (s.T - (c + 1) * TG_STAGE_CH) * BK_);
}

// Copy elements [e0, e1) of chunk c (its rows lo.. of s.cols elements each, row by row).  Every thread,
// TG_STAGE_BATCH loads in flight before their stores: one at a time, each load waits out the store
// before it (B and the aligned rows are not restrict pointers), and a chunk's slice takes a DRAM
// latency per element a thread copies.
template <int NT_>
__device__ __forceinline__ void tg_stage_part(const TgStage &s, int lo, int e0, int e1, int tid) {
    int r = lo + (e0 + tid) / s.cols, col = (e0 + tid) % s.cols;  // this thread's first, then NT_ on
    for (int e = e0 + tid; e < e1; e += TG_STAGE_BATCH * NT_) {
        float v[TG_STAGE_BATCH];
        tg_idx at[TG_STAGE_BATCH];
#pragma unroll
        for (int u = 0; u < TG_STAGE_BATCH; ++u) {
            at[u] = -1;
            if (e + u * NT_ < e1) {
                v[u] = __ldg(s.src + (tg_idx)r * s.lds + col);
                at[u] = (tg_idx)r * s.ldd + col;
            }
            for (col += NT_; col >= s.cols; col -= s.cols) ++r;
        }
#pragma unroll
        for (int u = 0; u < TG_STAGE_BATCH; ++u)
            if (at[u] >= 0) s.dst[at[u]] = v[u];
    }
}

// Copy this block's slice of chunk c of its column (if there is such a chunk), then mark it done.  Every thread.
template <int BK_, int NT_>
__device__ __forceinline__ void tg_stage_copy(const TgStage &s, int c, int tid) {
    if (c >= tg_stage_chunks(s.T)) return;
    int lo, hi;
    tg_stage_rows<BK_>(s, c, lo, hi);
    const long long n = (long long)(hi - lo) * s.cols;  // the chunk's elements
    tg_stage_part<NT_>(s, lo, (int)(n * s.me / s.group), (int)(n * (s.me + 1) / s.group), tid);
    __syncthreads();  // the block's stores, then its flag
    if (tid == 0) {
        __threadfence();
        asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(s.flags + c * s.stride + s.me), "r"(s.epoch)
                     : "memory");
    }
}

// Wait until every slice of chunk c is done: warp 0's lanes watch the group's flags (the host keeps a
// group to a flag a lane: access.STAGE_GROUP); where one has not come after TG_STAGE_PATIENCE polls,
// the block copies the column's whole chunk itself.  Every thread; the
// caller's barrier follows, before the copies that read the chunk are issued.
template <int BK_, int NT_>
__device__ __forceinline__ void tg_stage_wait(const TgStage &s, int c, int tid) {
    int mine = 0;  // this lane gave up (its polls, over all of its flags, ran out)
    if (tid < 32) {
        int polls = 0;
        for (int b = tid; b < s.group && !mine; b += 32) {
            const int *f = s.flags + c * s.stride + b;
            for (;;) {
                int v;
                asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
                if (v == s.epoch) break;
                if (++polls == TG_STAGE_PATIENCE) { mine = 1; break; }
                __nanosleep(64);
            }
        }
    }
    if (__syncthreads_or(mine)) {  // a barrier that also tells every thread whether a flag was late
        int lo, hi;
        tg_stage_rows<BK_>(s, c, lo, hi);
        tg_stage_part<NT_>(s, lo, 0, (hi - lo) * s.cols, tid);
        __syncthreads();
    }
}
