"""The repeat-call memo: after a first call has been planned, checked and run, a call with the same
array types, shapes, strides, dtypes, device, 16-byte alignment, alpha and beta, kernel, config,
PDL choice and precision (only the pointers differ) runs the stored program of launches: no
validation beyond the overlap tests (which depend on the pointers), no selection, no compiling, no
file I/O.

Calls of ``matmul`` and ``gemm`` (c, alpha and beta included; alpha and beta as Python numbers) on
CuPy arrays or torch tensors only; everything else takes the full path.  A call's alpha and beta
are part of its key (the stored launches hold them), so calls that change them every time would
only fill the memo: it keeps at most ``SCALAR_VARIANTS`` (alpha, beta) pairs for the same arrays
(counted on a miss, never on a hit).  The memo holds at most ``LIMIT`` entries (the oldest goes
first); ``clear()`` empties it.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from . import gpu, selection
from .arrays import shares_bytes
from .dispatch import empty, pointer, stream_for, stream_kind
from .launch import Program
from .plan import Plan

LIMIT = 4096
SCALAR_VARIANTS = 8  # (alpha, beta) pairs remembered for one set of array metadata
MISS = object()

_memo: dict[tuple, "Entry"] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Entry:
    program: Program | None  # None: nothing to launch (an empty result)
    device: int
    kind: str  # "cupy" | "torch": the result's type
    stream: str  # "cupy" | "torch": whose current stream the call runs on
    generation: int | None  # the selection's generation its config was chosen in (None: given)
    shape: tuple  # the result's shape
    alloc: tuple  # the shape it is allocated in: batch + (M, N)
    spans: tuple  # (lo, hi) byte extents of a, b and out relative to their pointers
    c_span: tuple | None  # c's, where the call reads c (beta != 0)
    colmajor: bool  # a new result's matrices are column-major (they follow c's layout)
    footprints: tuple  # (shape, element strides, item size) of a, b, out and c: the exact overlap test


def _meta(x):
    """(metadata key, pointer) of a CuPy array or a torch CUDA tensor; None for anything else."""
    kind = _kinds.get(type(x))
    if kind is None:
        kind = _kinds[type(x)] = _kind_of(type(x))
    if kind == "torch" and x.is_cuda:
        return ("torch", x.shape, x.stride(), x.dtype, x.get_device()), x.data_ptr()
    if kind == "cupy":
        mem = x.data
        return ("cupy", x.shape, x.strides, x.dtype.char, mem.device_id), mem.ptr
    return None


def _kind_of(t: type) -> str:
    mod = t.__module__
    return "torch" if mod.startswith("torch") else "cupy" if mod.startswith("cupy") else ""


_kinds: dict[type, str] = {}  # array type -> "torch", "cupy" or "" (the rest)


_NO_OUT = ((None,), 0)


def _device() -> int:
    """The current CUDA device (CuPy's runtime query, looked up once)."""
    global _get_device
    if _get_device is None:
        _get_device = gpu.cupy().cuda.runtime.getDevice
    return _get_device()


_get_device = None


SCALARS = 3  # the key's last items: alpha, its sign where it is zero, beta


def _key(ma, mb, mo, mc, alpha, beta, kernel, config, pdl, precision) -> tuple:
    """The arrays' metadata and the call's options, then the ``SCALARS`` scalars: alpha with its sign
    (-0.0 gives other zeros than 0.0; a zero alpha's sign as +-1.0 beside it, a nonzero alpha's is its
    own), beta as a value (a zero beta reads no c, whatever its sign).  One flat tuple: the hit path
    builds and hashes it every call."""
    alpha = float(alpha)
    return (ma[0], ma[1] % 16, mb[0], mb[1] % 16, mo[0], mo[1] % 16, mc[0], mc[1] % 16, kernel, config, pdl,
            precision, alpha, alpha or math.copysign(1.0, alpha), float(beta))


def call(a, b, out, kernel, config, pdl, precision="fp32", c=None, alpha=1.0, beta=0.0):
    """The result of a remembered call, or MISS."""
    ma, mb = _meta(a), _meta(b)
    mo = _meta(out) if out is not None else _NO_OUT
    mc = _meta(c) if c is not None else _NO_OUT
    if (ma is None or mb is None or mo is None or mc is None or type(pdl) is not bool
            or type(precision) is not str or type(alpha) not in (int, float) or type(beta) not in (int, float)):
        return MISS
    if config is not None:  # only what the full path accepts as it is: a dict of ints (it reports the rest)
        if type(config) is not dict or any(type(v) is not int for v in config.values()):
            return MISS
        config = tuple(sorted(config.items()))
    try:
        e = _memo.get(_key(ma, mb, mo, mc, alpha, beta, kernel, config or (), pdl, precision))
    except TypeError:  # unhashable: the full path reports it
        return MISS
    if e is None or _device() != e.device:
        return MISS
    if e.generation is not None and e.generation != selection.generation():
        return MISS  # the tuning cache changed since its config was chosen
    stream = stream_for(e.stream, e.device)
    if out is not None:  # the overlap test depends on the pointers: redo it (the full path reports)
        (alo, ahi), (blo, bhi), (olo, ohi) = e.spans
        po, pa, pb = mo[1], ma[1], mb[1]
        lo, hi = po + olo, po + ohi  # the cheap test on the byte spans first, the exact one where they meet
        if ((lo < pa + ahi and pa + alo < hi and shares_bytes(po, e.footprints[2], pa, e.footprints[0]))
                or (lo < pb + bhi and pb + blo < hi and shares_bytes(po, e.footprints[2], pb, e.footprints[1]))):
            return MISS
        if e.c_span is not None:  # c may be out itself (an in-place update), else apart from it
            clo, chi = e.c_span
            if (lo < mc[1] + chi and mc[1] + clo < hi and (mc[1], mc[0]) != (po, mo[0])
                    and shares_bytes(po, e.footprints[2], mc[1], e.footprints[3])):
                return MISS
        result = out
    else:
        result = empty(e.kind, e.alloc, e.device, stream, e.colmajor)
        po = pointer(result)
    if e.program is not None:
        e.program.run(ma[1], mb[1], mc[1] if e.c_span is not None else 0, po, stream)
    if out is None and e.alloc != e.shape:
        result = result.reshape(e.shape)
    return result


def _span(op) -> tuple:
    lo, hi = op.span()
    return lo - op.ptr, hi - op.ptr


def remember(p: Plan, program: Program | None, generation: int | None = None, c=None) -> None:
    """Keep ``p``'s program for repeat calls, where the call is one the memo serves; ``generation``:
    the selection's generation its config was chosen in (None where the call named its config);
    ``c``: the call's c (read or not: the key holds what the call passed)."""
    if p.host:
        return
    ma, mb = _meta(p.a.op.obj), _meta(p.b.op.obj)
    mo = _meta(p.out.op.obj) if p.out is not None else _NO_OUT
    mc = _meta(c) if c is not None else _NO_OUT
    if ma is None or mb is None or mo is None or mc is None:
        return
    spans = (_span(p.a.op), _span(p.b.op), _span(p.out.op) if p.out is not None else None)
    chosen = program is not None and program.config is not None and not p.config
    footprints = tuple(m.op.footprint if m is not None else None for m in (p.a, p.b, p.out, p.c))
    entry = Entry(program, p.device, ma[0][0], stream_kind(p), generation if chosen else None, p.shape,
                  p.batch + (p.M, p.N), spans, _span(p.c.op) if p.c is not None else None, p.out_colmajor,
                  footprints)
    key = _key(ma, mb, mo, mc, p.alpha, p.beta, p.kernel, p.config, p.pdl, p.precision)
    with _lock:
        if key in _memo:
            _memo[key] = entry
            return
        arrays = key[:-SCALARS]
        if sum(k[:-SCALARS] == arrays for k in _memo) >= SCALAR_VARIANTS:
            return  # alpha or beta changes from call to call: those calls take the full path
        if len(_memo) >= LIMIT:
            del _memo[next(iter(_memo))]
        _memo[key] = entry


def clear() -> None:
    """Forget every remembered call (the next call of each takes the full path again)."""
    with _lock:
        _memo.clear()


def size() -> int:
    return len(_memo)


def entries() -> list[Entry]:
    """The remembered calls (for tests and measurements)."""
    return list(_memo.values())
