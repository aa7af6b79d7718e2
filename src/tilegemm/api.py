"""``tilegemm.matmul`` and ``tilegemm.gemm``: a remembered call runs at once; any other is planned
(plan.py, no GPU needed), run (dispatch.py) and remembered (fastpath.py).  The family's config comes
from the selection (selection.py); with ``TILEGEMM_AUTOTUNE=1`` a shape the selection has no
measured config of today's run for is tuned first (autotune.py), outside the selection's lock."""

from __future__ import annotations

import os
import threading

from . import autotune, dispatch, fastpath, gpu, registry, selection
from .arrays import _kind, describe
from .plan import plan

_FAMILY = registry.FAMILY.name


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, out=None, kernel: str | None = None,
         config: dict | None = None, pdl: bool = True, precision: str = "fp32"):
    """``alpha * (a @ b) + beta * c`` in FP32 on the GPU, with ``numpy.matmul``'s shape rules.

    ``c`` broadcasts to the result's shape (a bias row of shape (N,) works) and is read only when
    beta != 0 (as in BLAS: NaN in c does not leak through beta = 0); a given c is checked either
    way (dtype, shape, device).  ``out``: the array to write
    (it may be c itself for an in-place update); by default a new array of a's type whose matrices
    follow c's layout.  Inputs are never modified.  ``pdl``: on sm_90+ launch the family's kernels,
    the reduction and the copies of operands as programmatic dependents of the kernel before them
    (the default; results are the same either way).  See ``matmul`` for the rest, ``precision`` included.
    """
    res = fastpath.call(a, b, out, _FAMILY if kernel is None else kernel, config, pdl, precision, c, alpha, beta)
    if res is not fastpath.MISS:
        return res
    a, b = _from_dlpack(a, "a"), _from_dlpack(b, "b")
    c = _from_dlpack(c, "c") if c is not None else None
    out = _from_dlpack(out, "out") if out is not None else None
    p = plan(describe(a, "a"), describe(b, "b"), describe(out, "out") if out is not None else None, kernel,
             config, describe(c, "c") if c is not None else None, alpha, beta, pdl, precision)
    generation = selection.generation()
    result, program = dispatch.run(p, choose_config)
    fastpath.remember(p, program, generation, c)
    return result


def matmul(a, b, *, out=None, kernel: str | None = None, config: dict | None = None, pdl: bool = True,
           precision: str = "fp32"):
    """``a @ b`` for float32 arrays, in FP32 on the GPU, with ``numpy.matmul``'s semantics.

    a: (..., M, K) or (K,); b: (..., K, N) or (K,); batch dimensions broadcast.  NumPy, CuPy, torch
    CUDA tensors, or anything with ``__cuda_array_interface__`` / ``__dlpack__``.  The result has
    a's array type (NumPy in, NumPy out; a CUDA-array-interface or DLPack object gives a CuPy
    array).  GPU arrays are read in place in any row- or column-major layout (``a.T`` included) and
    batch strides (Hopper's tensor cores: unaligned rows via a workspace copy); no input is modified.  ``out``: optional float32 array to write into.
    ``kernel``: a kernel name (``tilegemm.kernels()``); by default the production family with the
    config tuned for this GPU and shape.  ``config``: that kernel's parameters (e.g.
    ``{"bm": 64, "bk": 16, "bn": 64, "rm": 4, "rn": 4}`` for ``05_double_buffered``), checked
    against its declared constraints.  ``precision``: "fp32" (FFMAs, the default), "tf32x3" (tensor
    cores at FP32 accuracy) or "tf32" (tensor cores, 10-bit mantissas); docs/accuracy.md.
    """
    return gemm(a, b, None, out=out, kernel=kernel, config=config, pdl=pdl, precision=precision)


def choose_config(device: int, key: tuple, precision: str = "fp32") -> dict:
    """The family's config for ``key`` (layout, M, N, K, count) on ``device``.  With
    TILEGEMM_AUTOTUNE=1, a shape the selection has no measured config of today's run for (its config comes
    from the model, the heuristic, or a "stale" entry: entries.current) is tuned first through
    this module's ``matmul`` (which names every candidate's config, so it selects nothing), one
    tuner per shape: a second caller waits for the first and takes its result."""
    if precision != "fp32":  # the tensor cores
        return selection.select_mma(device, precision, *key)
    config, source = selection.select(device, *key)
    if source in ("tuned", "shipped") or os.environ.get("TILEGEMM_AUTOTUNE") != "1":
        return config
    with _tuning_guard:
        lock = _tuning.setdefault((device, key), threading.Lock())
    with lock:
        config, source = selection.select(device, *key)
        if source not in ("tuned", "shipped"):  # a prediction, or a measurement of another run
            autotune.tune_shape(device, *key, matmul=matmul)
            config, source = selection.select(device, *key)
    return config


_tuning: dict[tuple, threading.Lock] = {}
_tuning_guard = threading.Lock()


def clear_caches() -> None:
    """Forget remembered calls and selected configs (in this process; the disk caches stay): the
    next call of each shape plans and selects again, reading the tuning cache anew."""
    fastpath.clear()
    selection.forget()


def _from_dlpack(x, name: str):
    """DLPack-only objects become CuPy views (zero copy); everything else passes through."""
    if _kind(x) != "dlpack":
        return x
    describe(x, name)  # rejects DLPack arrays that are not on a CUDA GPU
    gpu.require_gpu("tilegemm")
    return gpu.cupy().from_dlpack(x)
