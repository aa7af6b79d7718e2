// tg_async.cuh - operand tiles copied global -> shared with cp.async (LDGSTS, sm_80+), no registers
// in between.  Used by rung 8 and the family (gemm.cu, STAGES >= 2).
//
// Same shared layout as tg_tiles.cuh: As[k][m] and Bs[k][n], rows LD floats long.  Copies run along
// the contiguous direction in global memory: 16 bytes per copy when the tile keeps its orientation
// and the operand is 16-byte aligned (TG_VEC_A / TG_VEC_B = 4), 8 bytes when it is 8-byte aligned
// (= 2), else 4 bytes; a tile that must be transposed (its
// k runs along global rows: A row-major, B column-major) always goes by 4-byte copies, each lane
// writing one element of As[k][m].  Lanes take 8 k at a time, so a warp writes 4 rows x 8 k, which
// lands in 32 distinct banks when LD % 32 == 4.
//
// Addressing: each operand keeps one 64-bit pointer (moved BK along k per tile) and, per copy, an
// element offset from it that is fixed for the whole loop: 32-bit (TG_OFF64=0), or 64-bit when the
// host finds that a tile can span 2^31 elements of a view (a huge leading dimension; TG_OFF64=1).
// Shared-memory destinations are 32-bit byte addresses: a per-thread base plus compile-time
// offsets, so each copy is one LDGSTS with an immediate shared offset.  (Per-copy 64-bit pointers
// moved every tile, the first design, cost ptxas two MOVs per copy to form aligned register pairs;
// NT ran 45.2 TFLOPS that way and 48.2 this way on the H200, docs/perf-notes.md.)
//
// Edges, without a branch in the K loop:
// - m / n beyond the matrix: the source row (or 16-byte column group) is clamped into the matrix
//   when the pointers are set up; the values land in rows / columns of the tile whose results are
//   never stored.  A 16- or 8-byte copy that straddles the last column copies only the columns
//   inside (cp.async's src-size) and zero-fills the rest.
// - k: the tiles are placed so that only the first one is partial (it starts at k = K - T*BK <= 0);
//   its elements with k < 0 are zero-filled (src-size 0), so they add nothing.  Every later tile
//   is whole.
#pragma once
#include "tg_common.cuh"

#ifndef TG_OFF64
#define TG_OFF64 0
#endif
#if TG_OFF64
typedef long long tg_off;
#else
typedef int tg_off;
#endif

// the shared-memory byte address of a generic pointer into shared memory
__device__ __forceinline__ unsigned tg_smem(const void *p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// shared dst[0..CP) = src[0..nbytes) then zeros; nothing is read when nbytes == 0.  Issued only if `on`.
// 16 bytes bypass L1 (.cg); 8 and 4 (.ca, the only form PTX has for them) go through it.
template <int CP>
__device__ __forceinline__ void tg_cp_async(unsigned dst, const float *src, int nbytes, bool on) {
    if (CP == 16)
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n"
                     " @p cp.async.cg.shared.global [%0], [%1], 16, %2;\n}\n"
                     :: "r"(dst), "l"(src), "r"(nbytes), "r"((int)on) : "memory");
    else if (CP == 8)
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n"
                     " @p cp.async.ca.shared.global [%0], [%1], 8, %2;\n}\n"
                     :: "r"(dst), "l"(src), "r"(nbytes), "r"((int)on) : "memory");
    else
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n"
                     " @p cp.async.ca.shared.global [%0], [%1], 4, %2;\n}\n"
                     :: "r"(dst), "l"(src), "r"(nbytes), "r"((int)on) : "memory");
}
__device__ __forceinline__ void tg_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void tg_cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(PENDING) : "memory"); }

// One operand's ROWS x COLS tile of a view whose element (r, c) is at base[r * ld + c].
// TRANSPOSED: stored as s[c][r] (then c is k), else as s[r][c] (then r is k).  VEC: the operand's
// access width in floats, 4, 2 or 1 (TG_VEC_A or TG_VEC_B; a transposed tile always copies 4 bytes).  THREADS threads
// share the copies, N each; each copy has its own source pointer, set up once and moved by the same
// step every tile (so the clamping at the edges costs nothing in the loop).  The shared-memory
// offsets depend only on (i, tid) and are recomputed, not kept in registers.
template <int ROWS, int COLS, int THREADS, bool TRANSPOSED, int LD, int VEC>
struct AsyncTile {
    static constexpr int V = TRANSPOSED ? 1 : VEC;  // floats per copy
    static_assert(V == 1 || V == 2 || V == 4, "copies of 4, 8 or 16 bytes");
    static constexpr int N = ROWS * COLS / (V * THREADS);
    static constexpr int G = COLS < 8 ? COLS : 8;  // transposed: lanes take G consecutive k
    static_assert(N * V * THREADS == ROWS * COLS && N >= 1, "the tile splits into whole copies per thread");
    static_assert(COLS % V == 0 && (!TRANSPOSED || COLS % G == 0), "copies stay inside a row");
    const float *base;  // the tile's element (0, 0), moved BK along k per tile
    tg_off o[N];        // copy i reads base + o[i]
    int nb[N];  // bytes each copy reads: 4 * V, fewer for a wide copy at the last column group

    // copy i of thread tid -> (row, column) in the tile.  Written so that the part that depends
    // on tid is the same for every i and the rest is a compile-time constant: one shared-memory
    // base per thread plus immediate offsets.
    __device__ __forceinline__ static void place(int i, int tid, int &r, int &c) {
        if (TRANSPOSED) {  // G consecutive k per lane group, all rows, then the next G
            static_assert(THREADS % G == 0, "whole lane groups");
            constexpr int RPI = THREADS / G;  // rows one copy index covers
            const int q = tid / G;
            if (RPI <= ROWS) {
                static_assert(RPI > ROWS || ROWS % RPI == 0, "copies cover whole rows");
                constexpr int CPC = RPI <= ROWS ? ROWS / RPI : 1;  // copies per chunk of G columns
                r = (i % CPC) * RPI + q;
                c = tid % G + G * (i / CPC);
            } else {
                static_assert(RPI <= ROWS || RPI % ROWS == 0, "copies cover whole rows");
                constexpr int CPI = RPI <= ROWS ? 1 : RPI / ROWS;  // chunks per copy index
                r = q % ROWS;
                c = tid % G + G * (i * CPI + q / ROWS);
            }
        } else {
            constexpr int W = COLS / V;  // copies per row
            if (THREADS % W == 0) {
                r = i * (THREADS / W) + tid / W;
                c = (tid % W) * V;
            } else {
                static_assert(THREADS % W == 0 || W % THREADS == 0, "copies cover whole rows");
                constexpr int PR = THREADS % W == 0 ? 1 : W / THREADS;  // copy indices per row
                r = i / PR;
                c = ((i % PR) * THREADS + tid) * V;
            }
        }
    }

    // base: element (r0, c0) of the view, the tile's first row and column (the k one is negative
    // for a partial first tile); rows x cols: the view's extent.
    __device__ __forceinline__ void init(const float *b0, tg_idx ld, int r0, int c0, int rows, int cols, int tid) {
        base = b0;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            int r, c;
            place(i, tid, r, c);
            // clamp m / n into the matrix (k is left alone: only the first tile has k < 0)
            int rr = r0 + r, cc = c0 + c;
            if (TRANSPOSED) rr = min(rr, rows - 1);
            else if (cc >= cols) cc = 0;  // a column group wholly outside: any valid one
            nb[i] = V > 1 ? 4 * min(V, cols - cc) : 4;
            o[i] = (tg_off)((tg_idx)(rr - r0) * ld + (cc - c0));
        }
    }
    // the element offset of copy i of thread tid in the shared tile
    __device__ __forceinline__ static int soff(int i, int tid) {
        int r, c;
        place(i, tid, r, c);
        return TRANSPOSED ? c * LD + r : r * LD + c;
    }
    // issue this tile's copies into the stage at shared byte address s (if `on`); FIRST: zero-fill
    // the copies with k < k_lo.  soff(i, tid) - soff(0, tid) does not depend on tid: one base
    // address per thread, an immediate offset per copy.
    template <bool FIRST>
    __device__ __forceinline__ void copy(unsigned s, bool on, int k_lo, const float *safe, int tid) const {
        const unsigned t = s + 4u * soff(0, tid);
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const unsigned d = t + 4u * (soff(i, 0) - soff(0, 0));
            if (FIRST) {
                int r, c;
                place(i, tid, r, c);
                const bool in = (TRANSPOSED ? c : r) >= k_lo;
                tg_cp_async<4 * V>(d, in ? base + o[i] : safe, in ? nb[i] : 0, on);
            } else {
                tg_cp_async<4 * V>(d, base + o[i], nb[i], on);
            }
        }
    }
    // move to the next tile: BK along k
    __device__ __forceinline__ void next(int bk, tg_idx ld) { base += TRANSPOSED ? (tg_idx)bk : bk * ld; }
};

// Rows whose starts alternate between two alignments, copied by rows: a tile copied along its rows (k the
// row) of a view whose leading dimension is odd (TG_VEC_A / TG_VEC_B = 3), or twice an odd number
// (= 6).  Row r starts p + r * ld floats from a 16-byte boundary (p: the tile's first element), so
// every other row starts HI floats aligned and the others LO = HI / 2: HI = 2 for an odd ld (of
// four rows, one 16-byte aligned and one 8), HI = 4 for ld = 2 mod 4 from an 8-byte aligned p.  BK
// is even, so they are the same rows of every tile.  The HI-aligned rows are copied 4 HI bytes at a
// time, the others 4 LO, into the shared tile AsyncTile fills: a pair of rows in COLS/HI + COLS/LO
// copies instead of 2 COLS/LO (25% fewer).  Which rows start HI-aligned is found at run time from p.
// (For an odd ld, the 16-byte aligned rows alone, one in four, would take BK/4 x COLS/4 copies, fewer
// than the threads of most configs the family runs: a copy for some threads only, whose predicate
// cost ptxas more registers a thread in the 64 x 128 tile, and a block an SM.)

// The rows first + 2 j (j < ROWS / 2) of a tile, V floats a copy, spread over the threads as
// AsyncTile spreads a tile's.  Its placement and copy loop repeat AsyncTile's for a tile of ROWS / 2
// rows 2 LD apart; built on AsyncTile instead (a base pointer each half), every build that uses it
// compiled to more K-loop instructions and most to more registers (sm_90), so it stays apart.
template <int ROWS, int COLS, int THREADS, int LD, int V>
struct RowClass {
    static constexpr int R = ROWS / 2, W = COLS / V, N = R * W / THREADS;
    static_assert(ROWS % 2 == 0 && COLS % V == 0 && N * THREADS == R * W, "whole copies per thread, whole rows");
    static_assert(THREADS % W == 0 || W % THREADS == 0, "copies cover whole rows");
    tg_off o[N];  // copy i reads base + o[i]
    int nb[N];    // bytes copy i reads: 4 * V, fewer at the last column group

    // copy i of thread tid -> (row of the class, column)
    __device__ __forceinline__ static void place(int i, int tid, int &r, int &c) {
        if (THREADS % W == 0) {
            r = i * (THREADS / W) + tid / W;
            c = (tid % W) * V;
        } else {
            constexpr int PR = THREADS % W == 0 ? 1 : W / THREADS;  // copy indices per row
            r = i / PR;
            c = ((i % PR) * THREADS + tid) * V;
        }
    }
    __device__ __forceinline__ static int soff(int i, int tid) {
        int r, c;
        place(i, tid, r, c);
        return 2 * r * LD + c;
    }
    __device__ __forceinline__ void init(int first, tg_idx ld, int c0, int cols, int tid) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            int r, c;
            place(i, tid, r, c);
            int cc = c0 + c;
            if (cc >= cols) cc = 0;  // a column group wholly outside: any valid one
            nb[i] = V > 1 ? 4 * min(V, cols - cc) : 4;
            o[i] = (tg_off)((tg_idx)(first + 2 * r) * ld + (cc - c0));
        }
    }
    // issue the class's copies of this tile (base: its element (0, 0)) into the stage at shared byte
    // address s; FIRST: zero-fill rows with k < k_lo (safe: a readable address aligned to 4 V bytes)
    template <bool FIRST>
    __device__ __forceinline__ void copy(unsigned s, const float *base, int first, bool on, int k_lo,
                                         const float *safe, int tid) const {
        const unsigned t = s + 4u * (first * LD + soff(0, tid));
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const unsigned d = t + 4u * (soff(i, 0) - soff(0, 0));
            if (FIRST) {
                int r, c;
                place(i, tid, r, c);
                const bool in = first + 2 * r >= k_lo;
                tg_cp_async<4 * V>(d, in ? base + o[i] : safe, in ? nb[i] : 0, on);
            } else {
                tg_cp_async<4 * V>(d, base + o[i], nb[i], on);
            }
        }
    }
};

template <int ROWS, int COLS, int THREADS, int LD, int HI>
struct RowClassTile {
    static constexpr int LO = HI / 2;
    static_assert(HI == 2 || HI == 4, "rows of odd length (2 + 1), or of twice an odd length (4 + 2)");
    RowClass<ROWS, COLS, THREADS, LD, HI> hi;  // the rows starting 4 HI-byte aligned, e + 2 j
    RowClass<ROWS, COLS, THREADS, LD, LO> lo;  // the others, (e ^ 1) + 2 j
    const float *base;  // the tile's element (0, 0), moved BK along k per tile
    int e;              // 0: the tile's even rows start 4 HI-byte aligned, 1: its odd ones

    __device__ __forceinline__ void init(const float *b0, tg_idx ld, int r0, int c0, int rows, int cols, int tid) {
        base = b0;
        // b0 is 4 LO-byte aligned; row 1 starts 4 LO bytes off the alignment row 0 has
        e = (int)((reinterpret_cast<unsigned long long>(b0) / (4 * LO)) & 1);
        hi.init(e, ld, c0, cols, tid);
        lo.init(e ^ 1, ld, c0, cols, tid);
    }
    template <bool FIRST>
    __device__ __forceinline__ void copy(unsigned s, bool on, int k_lo, const float *safe, int tid) const {
        const auto at = [](const float *p, unsigned long long bytes) {  // p rounded down to a multiple of bytes
            return reinterpret_cast<const float *>(reinterpret_cast<unsigned long long>(p) & ~(bytes - 1));
        };
        hi.template copy<FIRST>(s, base, e, on, k_lo, at(safe, 4 * HI), tid);
        lo.template copy<FIRST>(s, base, e ^ 1, on, k_lo, at(safe, 4 * LO), tid);
    }
    __device__ __forceinline__ void next(int bk, tg_idx ld) { base += bk * ld; }
};

// AsyncTile, or RowClassTile for a tile copied along its rows with TG_VEC_x = 3 or 6 (access.ROW_CLASSES):
// HI its wider width, 0 for a plain width; PLAIN the width AsyncTile copies at (the narrower one)
template <int VEC> struct TgRowClass {
    static constexpr int HI = VEC == 3 ? 2 : VEC == 6 ? 4 : 0;
    static constexpr int PLAIN = HI ? HI / 2 : VEC;
};
template <bool ODD, typename Plain, typename Odd> struct TgPick { typedef Plain type; };
template <typename Plain, typename Odd> struct TgPick<true, Plain, Odd> { typedef Odd type; };
template <int ROWS, int COLS, int THREADS, bool TRANSPOSED, int LD, int VEC>
using TgTile = typename TgPick<TgRowClass<VEC>::HI != 0 && !TRANSPOSED,
                               AsyncTile<ROWS, COLS, THREADS, TRANSPOSED, LD, TgRowClass<VEC>::PLAIN>,
                               RowClassTile<ROWS, COLS, THREADS, LD, TgRowClass<VEC>::HI>>::type;

// The two operands of C = A B as AsyncTiles (global orientation from TG_TRANS_A / TG_TRANS_B).
template <int BM_, int BN_, int BK_, int THREADS, int LDA, int LDB>
struct AsyncOperands {
    // A(m, k): row-major (TG_TRANS_A=0) rows are m, k contiguous -> transposed into As[k][m]
    TgTile<TG_TRANS_A ? BK_ : BM_, TG_TRANS_A ? BM_ : BK_, THREADS, !TG_TRANS_A, LDA, TG_VEC_A> a;
    // B(k, n): row-major rows are k, n contiguous -> Bs[k][n] as it is
    TgTile<TG_TRANS_B ? BN_ : BK_, TG_TRANS_B ? BK_ : BN_, THREADS, (bool)TG_TRANS_B, LDB, TG_VEC_B> b;
    const float *A0, *B0;  // element (0, 0) of each: a valid address for zero-filled copies
    int k_lo;              // the first tile holds k in [kbeg, kbeg + BK); kbeg = K - T*BK <= 0

    // A, B: the product's operands at k = 0; the first tile starts at kbeg
    __device__ __forceinline__ void init(const float *A, tg_idx lda, const float *B, tg_idx ldb,
                                         int M, int N, int K, int m0, int n0, int kbeg, int tid) {
        A0 = A;
        B0 = B;
        k_lo = -kbeg;
        if (TG_TRANS_A) a.init(A + tg_a_off(m0, kbeg, lda), lda, kbeg, m0, K, M, tid);
        else            a.init(A + tg_a_off(m0, kbeg, lda), lda, m0, kbeg, M, K, tid);
        if (TG_TRANS_B) b.init(B + tg_b_off(kbeg, n0, ldb), ldb, n0, kbeg, N, K, tid);
        else            b.init(B + tg_b_off(kbeg, n0, ldb), ldb, kbeg, n0, K, N, tid);
    }
    // issue one tile's copies into the stage at shared byte addresses (sa, sb) and move on by BK;
    // on == false: issue none (past K)
    template <bool FIRST>
    __device__ __forceinline__ void copy(unsigned sa, unsigned sb, bool on, tg_idx lda, tg_idx ldb, int tid) {
        a.template copy<FIRST>(sa, on, k_lo, A0, tid);
        b.template copy<FIRST>(sb, on, k_lo, B0, tid);
        a.next(BK_, lda);
        b.next(BK_, ldb);
        tg_cp_commit();
    }
};
