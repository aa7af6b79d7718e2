"""Triton's FP32 matmul as a reference for ``tilegemm bench`` (only where Triton is installed).

A plain tiled ``tl.dot`` kernel with ``input_precision="ieee"`` (true FP32 FMA, no TF32), batched
over the grid's third axis, with Triton's autotuner choosing among a few tile shapes.  Operands are
read through their strides, so transposed views need no copy.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    configs = [
        triton.Config({"BM": bm, "BN": bn, "BK": bk, "G": 8}, num_stages=s, num_warps=w)
        for bm, bn, bk, s, w in [(128, 128, 32, 3, 8), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
                                 (64, 64, 32, 4, 4), (128, 256, 16, 3, 8), (32, 64, 32, 4, 4)]
    ]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def mm(a, b, c, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
        pid, z = tl.program_id(0), tl.program_id(2)
        gm, gn = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (G * gn)
        first = group * G
        rows = min(gm - first, G)
        pm = first + (pid % (G * gn)) % rows
        pn = (pid % (G * gn)) // rows
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        pa = a + z * sab + rm[:, None] * sam + rk[None, :] * sak
        pb = b + z * sbb + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + rk
            x = tl.load(pa, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            y = tl.load(pb, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc, input_precision="ieee")
            pa += BK * sak
            pb += BK * sbk
        pc = c + z * scb + rm[:, None] * scm + rn[None, :] * scn
        tl.store(pc, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    return mm


def available() -> bool:
    try:
        import triton  # noqa: F401

        return True
    except Exception:
        return False


def matmul(a, b, out):
    """out = a @ b for torch CUDA tensors of shape (count, M, K), (count, K, N), (count, M, N)."""
    import triton

    count, M, K = a.shape
    N = b.shape[2]
    mm = _kernel()
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]), 1, count)  # noqa: E731
    mm[grid](a, b, out, M, N, K, *a.stride(), *b.stride(), *out.stride())
    return out
