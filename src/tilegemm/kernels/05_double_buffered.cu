// Rung 5 - 05_double_buffered: prefetching at two levels, one barrier per K step.
//
// Follows: GEMM part 2 §1.2-2.4 (prefetching) and §3 (its parameter table); sources in
// docs/sources.md.
// Changed from rung 4: two shared-memory buffers and two register fragments.
// While the block computes on tile t from one buffer, each thread already holds tile t+1 in
// registers (its LDG.128s were issued before the FMAs, so their latency hides behind them); after
// the last FMA step it stores them into the other buffer and the block meets one __syncthreads().
// Inside a tile, the fragment for step k+1 is read from shared memory while step k's FMAs run.
// The block tile bm x bn, its depth bk and the thread tile rm x rn are parameters (-D BM, BK, BN,
// RM, RN; GEMM part 2 §3 tunes them).  The default 128/8/256/16/8 was chosen on the H100: the
// config of that table that is fastest there (128/16/128/8/8) loses 17% when the rows are not
// 16-byte aligned (4095^3: 4-byte loads), this one 5% (docs/perf-notes.md).  Thread (ty, tx) owns
// rows ty*RM.. and columns tx*RN.. as in GEMM part 2, which leaves shared-memory bank conflicts
// that rung 6 removes.
// Edges: unchecked interior path, zero-filled loads and checked stores at the edges; any M, N, K.
// Constraints (checked in registry.py, asserted here): RM, RN multiples of 4; BM % RM == BN % RN
// == 0; threads (BM/RM)*(BN/RN) <= 1024; each tile splits into whole float4s per thread.
#include "tg_tiles.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef BK
#define BK 8
#endif
#ifndef RM
#define RM 16
#endif
#ifndef RN
#define RN 8
#endif
#define NT ((BM / RM) * (BN / RN))
static_assert(RM % 4 == 0 && RN % 4 == 0 && BM % RM == 0 && BN % RN == 0, "thread tile shape");
static_assert(NT <= 1024 && BK % 4 == 0, "block shape");

extern "C" __global__ void __launch_bounds__(NT) tilegemm_kernel(TG_GEMM_PARAMS) {
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Bs[2][BK][BN];
    const int tid = threadIdx.x, ty = tid / (BN / RN), tx = tid % (BN / RN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool interior = m0 + BM <= M && n0 + BN <= N;

    ATile<BM, BK, NT> ta;
    BTile<BK, BN, NT> tb;
    ta.start(A, lda, m0, tid);
    tb.start(B, ldb, n0, tid);
    float acc[RM][RN] = {};
    float a[2][RM], b[2][RN];

    // prologue: tile 0 -> shared buffer 0, its first fragment -> registers
    if (interior && BK <= K) { ta.load<false>(lda, m0, 0, M, K, tid); tb.load<false>(ldb, 0, n0, K, N, tid); }
    else                     { ta.load<true>(lda, m0, 0, M, K, tid);  tb.load<true>(ldb, 0, n0, K, N, tid); }
    ta.store<BM>(&As[0][0][0], tid);
    tb.store<BN>(&Bs[0][0][0], tid);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < RM; i += 4) *reinterpret_cast<float4 *>(&a[0][i]) = *reinterpret_cast<const float4 *>(&As[0][0][ty * RM + i]);
#pragma unroll
    for (int j = 0; j < RN; j += 4) *reinterpret_cast<float4 *>(&b[0][j]) = *reinterpret_cast<const float4 *>(&Bs[0][0][tx * RN + j]);

    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const int next = k0 + BK;
        const bool more = next < K;
        if (more) {  // prefetch tile t+1 into registers; stored after this tile's FMAs
            ta.next(lda);
            tb.next(ldb);
            if (interior && next + BK <= K) { ta.load<false>(lda, m0, next, M, K, tid); tb.load<false>(ldb, next, n0, K, N, tid); }
            else                            { ta.load<true>(lda, m0, next, M, K, tid);  tb.load<true>(ldb, next, n0, K, N, tid); }
        }
#pragma unroll
        for (int k = 0; k < BK - 1; ++k) {  // load fragment k+1 while computing fragment k
#pragma unroll
            for (int i = 0; i < RM; i += 4) *reinterpret_cast<float4 *>(&a[(k + 1) % 2][i]) = *reinterpret_cast<const float4 *>(&As[buf][k + 1][ty * RM + i]);
#pragma unroll
            for (int j = 0; j < RN; j += 4) *reinterpret_cast<float4 *>(&b[(k + 1) % 2][j]) = *reinterpret_cast<const float4 *>(&Bs[buf][k + 1][tx * RN + j]);
#pragma unroll
            for (int i = 0; i < RM; ++i)
#pragma unroll
                for (int j = 0; j < RN; ++j) acc[i][j] += a[k % 2][i] * b[k % 2][j];
        }
        if (more) {  // the other buffer was last read before the previous barrier: safe to fill
            ta.store<BM>(&As[buf ^ 1][0][0], tid);
            tb.store<BN>(&Bs[buf ^ 1][0][0], tid);
            __syncthreads();
            buf ^= 1;
#pragma unroll
            for (int i = 0; i < RM; i += 4) *reinterpret_cast<float4 *>(&a[BK % 2][i]) = *reinterpret_cast<const float4 *>(&As[buf][0][ty * RM + i]);
#pragma unroll
            for (int j = 0; j < RN; j += 4) *reinterpret_cast<float4 *>(&b[BK % 2][j]) = *reinterpret_cast<const float4 *>(&Bs[buf][0][tx * RN + j]);
        }
#pragma unroll
        for (int i = 0; i < RM; ++i)  // last step of this tile
#pragma unroll
            for (int j = 0; j < RN; ++j) acc[i][j] += a[(BK - 1) % 2][i] * b[(BK - 1) % 2][j];
    }
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; j += 4) {
            const float4 v = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            if (interior) tg_store4<false>(C, ldc, m0 + ty * RM + i, n0 + tx * RN + j, M, N, v);
            else          tg_store4<true>(C, ldc, m0 + ty * RM + i, n0 + tx * RN + j, M, N, v);
        }
}
