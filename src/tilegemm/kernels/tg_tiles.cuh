// tg_tiles.cuh - moving an operand tile from global memory into shared memory (rungs 4-8).
//
// Shared memory always holds the A tile k-major, As[k][m], and the B tile as Bs[k][n], so a thread's
// A values and B values for one k are contiguous (LDS.128).  Whether that needs a transpose on the
// way in depends on the operand's layout in global memory (GEMM part 2 §2.2, docs/sources.md: A is
// transposed on its way into shared memory); the loads themselves are always along the contiguous
// direction in global memory, 16 bytes wide (TG_VEC_A / TG_VEC_B = 4) when the operand is 16-byte
// aligned with ld % 4 == 0, 8 bytes (= 2) when 8-byte aligned with ld even, else 4 bytes wide (= 1;
// same values, more instructions).
#pragma once
#include "tg_common.cuh"

// A ROWS x COLS block of a view whose element (r, c) lives at base[r * ld + c] (c contiguous),
// held in registers as float4 along c, read 16 bytes at a time when VEC == 4 (8 when 2, else 4); THREADS
// threads share the block, N float4 each.  A
// thread's float4s sit in one column and rows RSTEP apart.  It keeps one pointer, moved along with
// the tile, so the main loop does no 64-bit index arithmetic; the sizes and leading dimension are
// passed in from the kernel's parameters (constant memory, no registers).
template <int ROWS, int COLS, int THREADS, int VEC>
struct GTile {
    static_assert(COLS % 4 == 0 && (ROWS * COLS) % (4 * THREADS) == 0 && THREADS % (COLS / 4) == 0,
                  "the tile must split into whole float4s per thread, a column per thread");
    static constexpr int N = ROWS * COLS / (4 * THREADS);
    static constexpr int RSTEP = THREADS / (COLS / 4);
    float4 v[N];
    const float *p;  // this thread's first element of the current tile

    __device__ __forceinline__ void init(const float *base, tg_idx ld, int r0, int c0, int tid) {
        p = base + (tg_idx)(r0 + tid / (COLS / 4)) * ld + c0 + (tid % (COLS / 4)) * 4;
    }
    __device__ __forceinline__ void next_rows(int n, tg_idx ld) { p += n * ld; }
    __device__ __forceinline__ void next_cols(int n) { p += n; }

    // The tile at (r0, c0).  EDGE: elements with row >= rows or column >= cols read as 0 (Memory and
    // data locality §4.6, Fig. 4.20), so a partial tile adds nothing to the sums.
    template <bool EDGE>
    __device__ __forceinline__ void load(tg_idx ld, int r0, int c0, int rows, int cols, int tid) {
        const int r = r0 + tid / (COLS / 4), c = c0 + (tid % (COLS / 4)) * 4;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const float *q = p + (i * RSTEP) * ld;
            if (!EDGE) {
                if (VEC == 4) {
                    v[i] = __ldg(reinterpret_cast<const float4 *>(q));
                } else if (VEC == 2) {
                    const float2 lo = __ldg(reinterpret_cast<const float2 *>(q));
                    const float2 hi = __ldg(reinterpret_cast<const float2 *>(q + 2));
                    v[i] = make_float4(lo.x, lo.y, hi.x, hi.y);
                } else
                    v[i] = make_float4(__ldg(q), __ldg(q + 1), __ldg(q + 2), __ldg(q + 3));
            } else {
                const bool row_ok = r + i * RSTEP < rows;
                v[i].x = (row_ok && c + 0 < cols) ? __ldg(q + 0) : 0.0f;
                v[i].y = (row_ok && c + 1 < cols) ? __ldg(q + 1) : 0.0f;
                v[i].z = (row_ok && c + 2 < cols) ? __ldg(q + 2) : 0.0f;
                v[i].w = (row_ok && c + 3 < cols) ? __ldg(q + 3) : 0.0f;
            }
        }
    }

    // To shared memory as s[r][c] (one STS.128 per float4) or, TRANSPOSED, as s[c][r]
    // (four STS.32).  LD is the length of a shared-memory row; r, c are tile-relative.
    template <bool TRANSPOSED, int LD>
    __device__ __forceinline__ void store(float *s, int tid) const {
        const int r0 = tid / (COLS / 4), c0 = (tid % (COLS / 4)) * 4;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const int rr = r0 + i * RSTEP;
            if (TRANSPOSED) {
                s[(c0 + 0) * LD + rr] = v[i].x;
                s[(c0 + 1) * LD + rr] = v[i].y;
                s[(c0 + 2) * LD + rr] = v[i].z;
                s[(c0 + 3) * LD + rr] = v[i].w;
            } else {
                *reinterpret_cast<float4 *>(&s[rr * LD + c0]) = v[i];
            }
        }
    }
};

// The BM x BK tiles of A along a block row: start() at (m0, k = 0), load() the tile at k0, next()
// moves the pointer BK along k.  Stored as As[k][m] with row length LD.
template <int TILE_M, int TILE_K, int THREADS>
struct ATile {
    GTile<TG_TRANS_A ? TILE_K : TILE_M, TG_TRANS_A ? TILE_M : TILE_K, THREADS, TG_VEC_A> t;  // global rows: k if transposed, else m
    __device__ __forceinline__ void start(const float *A, tg_idx lda, int m0, int tid) {
        if (TG_TRANS_A) t.init(A, lda, 0, m0, tid);
        else            t.init(A, lda, m0, 0, tid);
    }
    __device__ __forceinline__ void next(tg_idx lda) {
        if (TG_TRANS_A) t.next_rows(TILE_K, lda);
        else            t.next_cols(TILE_K);
    }
    template <bool EDGE>
    __device__ __forceinline__ void load(tg_idx lda, int m0, int k0, int M, int K, int tid) {
        if (TG_TRANS_A) t.template load<EDGE>(lda, k0, m0, K, M, tid);
        else            t.template load<EDGE>(lda, m0, k0, M, K, tid);
    }
    template <int LD>
    __device__ __forceinline__ void store(float *As, int tid) const { t.template store<!TG_TRANS_A, LD>(As, tid); }
};

// The BK x BN tiles of B down a block column, stored as Bs[k][n] with row length LD.
template <int TILE_K, int TILE_N, int THREADS>
struct BTile {
    GTile<TG_TRANS_B ? TILE_N : TILE_K, TG_TRANS_B ? TILE_K : TILE_N, THREADS, TG_VEC_B> t;  // global rows: n if transposed, else k
    __device__ __forceinline__ void start(const float *B, tg_idx ldb, int n0, int tid) {
        if (TG_TRANS_B) t.init(B, ldb, n0, 0, tid);
        else            t.init(B, ldb, 0, n0, tid);
    }
    __device__ __forceinline__ void next(tg_idx ldb) {
        if (TG_TRANS_B) t.next_cols(TILE_K);
        else            t.next_rows(TILE_K, ldb);
    }
    template <bool EDGE>
    __device__ __forceinline__ void load(tg_idx ldb, int k0, int n0, int K, int N, int tid) {
        if (TG_TRANS_B) t.template load<EDGE>(ldb, n0, k0, N, K, tid);
        else            t.template load<EDGE>(ldb, k0, n0, K, N, tid);
    }
    template <int LD>
    __device__ __forceinline__ void store(float *Bs, int tid) const { t.template store<TG_TRANS_B, LD>(Bs, tid); }
};

// Store a run of 4 results of row m starting at column n: one STG.128 when the whole run is inside
// C and aligned (TG_VEC_D == 4), two STG.64 when 8-byte aligned (2), else element by element with
// bounds checks.
template <bool EDGE>
__device__ __forceinline__ void tg_store4(float *C, tg_idx ldc, int m, int n, int M, int N, float4 v) {
    float *q = C + (tg_idx)m * ldc + n;
    if (!EDGE && TG_VEC_D == 4) {
        *reinterpret_cast<float4 *>(q) = v;
    } else if (!EDGE && TG_VEC_D == 2) {
        reinterpret_cast<float2 *>(q)[0] = make_float2(v.x, v.y);
        reinterpret_cast<float2 *>(q)[1] = make_float2(v.z, v.w);
    } else if (!EDGE) {
        q[0] = v.x; q[1] = v.y; q[2] = v.z; q[3] = v.w;
    } else if (m < M) {
        if (n + 0 < N) q[0] = v.x;
        if (n + 1 < N) q[1] = v.y;
        if (n + 2 < N) q[2] = v.z;
        if (n + 3 < N) q[3] = v.w;
    }
}
