"""``tilegemm.matmul``: validate (no GPU needed), then launch the chosen kernel with no copies.

Validation happens entirely on metadata before anything is launched or written; inputs are never
modified.  GPU arrays are read in place whatever their layout (row-major, column-major, transposed
views, padded leading dimensions).  A column-major ``out`` is computed as out.T = b.T @ a.T.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from . import registry, runtime
from .arrays import UNKNOWN, Operand, _kind, classify, describe

_FLOAT32 = np.dtype(np.float32)
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Plan:
    M: int
    N: int
    K: int
    a: Operand
    b: Operand
    out: Operand | None
    layout_a: tuple  # ("N"|"T", ld)
    layout_b: tuple
    layout_out: tuple | None
    kernel: str
    device: int | None  # None: host inputs (copied to the current GPU)
    config: tuple = ()  # the kernel's parameters (defaults filled in), as sorted items


# --------------------------------------------------------------------------- validation (GPU-free)


def _check_dtype(op: Operand) -> None:
    if op.dtype != _FLOAT32:
        fix = f"{op.name}.float()" if op.kind == "torch" else f"{op.name}.astype(numpy.float32)"
        raise TypeError(
            f"{op.name} has dtype {op.dtype}, but tilegemm computes in float32 and never casts "
            f"silently; convert it first: {fix}"
        )


def _check_2d(op: Operand, dims: str) -> None:
    if len(op.shape) != 2:
        raise ValueError(
            f"{op.name} must be a 2-D array ({dims}), got {len(op.shape)}-D with shape {op.shape}"
        )


def _layout(op: Operand) -> tuple:
    if op.on_host:
        return ("N", op.shape[1])  # host arrays are copied to the GPU anyway; any strides are fine
    lay = classify(op.shape, op.strides)
    if lay is None:
        raise ValueError(
            f"{op.name} is a view with strides {op.strides} (in elements) that is neither row- nor "
            f"column-major, so reading it would need a copy; tilegemm never copies silently: pass "
            f"a contiguous copy ({op.name}.copy() or ascontiguousarray({op.name}))"
        )
    return lay


def _check_devices(ops: list[Operand]) -> int | None:
    host = [o for o in ops if o.on_host]
    gpu = [o for o in ops if not o.on_host]
    if host and gpu:
        h, g = host[0], gpu[0]
        first, second = (h, g) if ops.index(h) < ops.index(g) else (g, h)
        raise ValueError(
            f"{first.name} is {first.where()} but {second.name} is {second.where()}; pass all "
            f"arrays on the host (NumPy) or all on one GPU"
        )
    known = [o for o in gpu if o.device != UNKNOWN]
    for o in known[1:]:
        if o.device != known[0].device:
            raise ValueError(
                f"{known[0].name} is {known[0].where()} but {o.name} is {o.where()}; move them to "
                f"one device"
            )
    return known[0].device if known else (None if host else UNKNOWN)


def _overlaps(x: Operand, y: Operand) -> bool:
    if x.on_host != y.on_host:
        return False
    (a0, a1), (b0, b1) = x.span(), y.span()
    return a0 < b1 and b0 < a1


def plan(a: Operand, b: Operand, out: Operand | None = None, kernel: str | None = None,
         config: dict | None = None) -> Plan:
    """Check everything about a matmul call that metadata can tell; raise before any launch."""
    for op in (a, b):
        _check_dtype(op)
    _check_2d(a, "M x K")
    _check_2d(b, "K x N")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(
            f"inner dimensions do not match: a is {M} x {K} and b is {K2} x {N} "
            f"(a.shape[1] must equal b.shape[0])"
        )
    for dim, v in (("M", M), ("N", N), ("K", K)):
        if v > _INT32_MAX:
            raise ValueError(f"{dim} = {v} is larger than 2^31 - 1, which tilegemm does not support")
    ops = [a, b] + ([out] if out is not None else [])
    device = _check_devices(ops)
    lay_a, lay_b = _layout(a), _layout(b)
    lay_out = None
    if out is not None:
        if out.dtype != _FLOAT32:
            raise TypeError(f"out has dtype {out.dtype}; it must be float32 (the result's dtype)")
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out has shape {tuple(out.shape)}, but the result has shape ({M}, {N})")
        for op in (a, b):
            if _overlaps(out, op):
                raise ValueError(
                    f"out overlaps {op.name} in memory; tilegemm reads {op.name} while it writes "
                    f"out, so pass a separate out array"
                )
        lay_out = _layout(out)
    name = choose_kernel(kernel, config)
    params = registry.get(name).params(config)  # unknown parameter names raise here
    return Plan(M, N, K, a, b, out, lay_a, lay_b, lay_out, name, device, tuple(sorted(params.items())))


def choose_kernel(kernel: str | None, config: dict | None = None) -> str:
    """The named kernel, or the best one.  Every kernel takes every layout and alignment (the
    16-byte path is chosen per call from the actual pointers and leading dimensions)."""
    if kernel is not None:
        registry.get(kernel)  # unknown names raise here
        return kernel
    if config:
        raise ValueError("config= sets a kernel's parameters, so it needs kernel= too")
    return registry.best_order()[0]


def vector_width(*operands: tuple) -> int:
    """4 when every (pointer, leading dimension) allows 16-byte accesses, else 1."""
    return 4 if all(ptr % 16 == 0 and ld % 4 == 0 for ptr, ld in operands) else 1


# --------------------------------------------------------------------------- launching


class _Launcher:
    """One kernel, one layout, one device: compiled, loaded and checked once."""

    def __init__(self, name: str, layout: str, vec: int, device: int, config: tuple = ()):
        spec = registry.get(name)
        props = runtime.device_properties(device)
        self.params = spec.params(dict(config))
        spec.check(self.params, registry.Limits.from_props(props))
        self.spec = spec
        self.block = spec.block(self.params)
        self.smem = spec.smem(self.params)
        self.kernel = runtime.load(spec.compile(self.params, layout, arch=props.arch, vec=vec), device)

    def __call__(self, M, N, K, pa, lda, pb, ldb, pc, ldc, stream) -> None:
        grid = self.spec.grid(M, N, self.params)
        if grid[1] > 65535 or grid[0] > 2**31 - 1:
            raise ValueError(f"M = {M} is too large for {self.spec.name}'s grid (at most 65535 block rows)")
        i32, i64, u64 = np.int32, np.int64, np.uint64
        self.kernel(grid, self.block,
                    (i32(M), i32(N), i32(K), u64(pa), i64(lda), u64(pb), i64(ldb), u64(pc), i64(ldc)),
                    smem=self.smem, stream=stream)


_launchers: dict[tuple, _Launcher] = {}
_launch_lock = threading.Lock()


def launcher(name: str, layout: str, vec: int, device: int, config: tuple = ()) -> _Launcher:
    key = (name, layout, vec, device, config)
    fn = _launchers.get(key)
    if fn is None:
        with _launch_lock:
            fn = _launchers.get(key) or _Launcher(name, layout, vec, device, config)
            _launchers[key] = fn
    return fn


def _stream(ops: list[Operand], device: int):
    cupy = runtime._cupy()
    for op in ops:
        if op.kind == "torch":
            import torch

            ts = torch.cuda.current_stream(device)
            if hasattr(cupy.cuda.Stream, "from_external"):
                return cupy.cuda.Stream.from_external(ts)
            return cupy.cuda.ExternalStream(ts.cuda_stream, device)
    return cupy.cuda.get_current_stream()


def _resolve_device(op: Operand) -> Operand:
    if op.device != UNKNOWN:
        return op
    attrs = runtime._cupy().cuda.runtime.pointerGetAttributes(op.ptr)
    return Operand(op.name, op.kind, op.obj, op.shape, op.strides, op.dtype, int(attrs.device), op.ptr)


def _to_device(op: Operand, cupy) -> tuple[Operand, tuple]:
    if not op.on_host:
        return op, classify(op.shape, op.strides)
    dev = describe(cupy.asarray(op.obj), op.name)
    lay = classify(dev.shape, dev.strides)
    if lay is None:  # pragma: no cover - cupy copies host arrays contiguously
        dev = describe(cupy.ascontiguousarray(dev.obj), op.name)
        lay = classify(dev.shape, dev.strides)
    return dev, lay


def _alloc_out(p: Plan, cupy, device: int):
    if p.a.kind == "torch":
        import torch

        t = torch.empty((p.M, p.N), dtype=torch.float32, device=f"cuda:{device}")
        return t, describe(t, "out")
    arr = cupy.empty((p.M, p.N), dtype=np.float32)
    return arr, describe(arr, "out")


def execute(p: Plan):
    cupy = runtime._cupy()
    runtime.require_gpu("tilegemm.matmul")
    a, b, out = p.a, p.b, p.out
    if p.device == UNKNOWN:
        a, b = _resolve_device(a), _resolve_device(b)
        out = _resolve_device(out) if out is not None else None
        p = plan(a, b, out, p.kernel, dict(p.config))
    host = a.on_host
    device = cupy.cuda.runtime.getDevice() if host else p.device
    with cupy.cuda.Device(device):
        stream = _stream([a, b] + ([out] if out is not None else []), device)
        with stream:
            a, lay_a = _to_device(a, cupy)
            b, lay_b = _to_device(b, cupy)
            if out is None or host:
                result, o = _alloc_out(p, cupy, device)
                lay_o = ("N", p.N)
            else:
                result, o, lay_o = out.obj, out, p.layout_out
            if p.M and p.N:
                if p.K == 0:
                    cupy.asarray(result).fill(0)
                else:
                    _launch(p, a, lay_a, b, lay_b, o, lay_o, device, stream)
            if host:
                res = result.get(stream=stream)
                if out is None:
                    return res
                out.obj[...] = res
                return out.obj
    return result


def _launch(p: Plan, a, lay_a, b, lay_b, o, lay_o, device, stream) -> None:
    M, N, K = p.M, p.N, p.K
    if lay_o[0] == "T":  # column-major C: compute C^T (row-major N x M) = B^T A^T
        flip = {"N": "T", "T": "N"}
        a, lay_a, b, lay_b = b, (flip[lay_b[0]], lay_b[1]), a, (flip[lay_a[0]], lay_a[1])
        M, N = N, M
    vec = vector_width((a.ptr, lay_a[1]), (b.ptr, lay_b[1]), (o.ptr, lay_o[1]))
    fn = launcher(p.kernel, lay_a[0] + lay_b[0], vec, device, p.config)
    fn(M, N, K, a.ptr, lay_a[1], b.ptr, lay_b[1], o.ptr, lay_o[1], stream)


def matmul(a, b, *, out=None, kernel: str | None = None, config: dict | None = None):
    """``a @ b`` for 2-D float32 arrays, in FP32 on the GPU.

    a: M x K, b: K x N; NumPy, CuPy, torch CUDA tensors, or anything with
    ``__cuda_array_interface__`` / ``__dlpack__``.  The result has a's array type (NumPy in,
    NumPy out; a CUDA-array-interface or DLPack object gives a CuPy array).  GPU arrays are read in
    place in any row- or column-major layout (``a.T`` included); no input is modified.
    ``out``: optional M x N float32 array to write into.  ``kernel``: a kernel name
    (``tilegemm.kernels()``); by default the best one available.  ``config``: that kernel's
    parameters (e.g. ``{"bm": 64, "bk": 16, "bn": 64, "rm": 4, "rn": 4}`` for
    ``05_double_buffered``), checked against its declared constraints.
    """
    a, b = _from_dlpack(a, "a"), _from_dlpack(b, "b")
    out = _from_dlpack(out, "out") if out is not None else None
    A, B = describe(a, "a"), describe(b, "b")
    O = describe(out, "out") if out is not None else None
    return execute(plan(A, B, O, kernel, config))


def _from_dlpack(x, name: str):
    """DLPack-only objects become CuPy views (zero copy); everything else passes through."""
    if _kind(x) != "dlpack":
        return x
    describe(x, name)  # rejects DLPack arrays that are not on a CUDA GPU
    runtime.require_gpu("tilegemm.matmul")
    return runtime._cupy().from_dlpack(x)
