"""Validation and planning of one call, from array metadata alone (no GPU needed).

Semantics are NumPy's ``matmul``: 2-D products, stacks of them with broadcast batch dimensions, and
1-D operands promoted to a row (``a``) or a column (``b``) and dropped from the result.  ``gemm``
adds ``alpha * a @ b + beta * c`` with ``c`` broadcast to the result.  Everything that metadata can
tell is checked here, before anything is launched or written; inputs are never modified.

The plan ends in the product as the kernels compute it (``Geometry``): a row-major D = A B (+ beta
C) over a run of batch entries the kernel walks with one stride per operand, and outer offsets the
host loops over.  A column-major result is computed as D^T = B^T A^T: the operands swap and each
layout flips.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from dataclasses import dataclass

import numpy as np

from . import registry
from .arrays import UNKNOWN, Operand, classify
from .occupancy import Limits

FLOAT32 = np.dtype(np.float32)
INT32_MAX = 2**31 - 1
GRID_Z = 65535
FLIP = {"N": "T", "T": "N"}
_F32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Mat:
    """One operand as a stack of matrices: batch strides over the plan's batch shape (0 where
    broadcast) and the matrix layout (("N"|"T", ld), or for c: (row stride, column stride))."""

    op: Operand
    bstrides: tuple
    layout: tuple


@dataclass(frozen=True)
class Geometry:
    """The product as the kernels compute it: row-major D (M x N) = A (M x K) B (K x N), A and B in
    ``layout`` ("NN" .. "TT") with leading dimensions lda, ldb; C read with row stride ldc (0: a
    broadcast row); ``count`` products the kernel walks with element strides ``strides`` (A, B, C,
    D), once per entry of ``offsets`` (element offsets of A, B, C, D the host loops over).
    ``swap``: A is the call's b and B its a (a column-major result)."""

    swap: bool
    M: int
    N: int
    K: int
    layout: str
    lda: int
    ldb: int
    ldc: int
    ldd: int
    count: int
    strides: tuple
    offsets: tuple

    @property
    def key(self) -> tuple:
        """What the config selection looks at: (layout, M, N, K, count)."""
        return (self.layout, self.M, self.N, self.K, self.count)


@dataclass(frozen=True)
class Plan:
    M: int
    N: int
    K: int
    batch: tuple  # broadcast batch shape
    shape: tuple  # the result's shape
    a: Mat
    b: Mat
    c: Mat | None  # None when beta == 0 (c is not read)
    out: Mat | None  # None: allocated
    out_colmajor: bool  # the result's matrices are column-major (given out, or to match c)
    alpha: float
    beta: float
    kernel: str
    device: int | None  # None: host inputs (copied to the current GPU)
    config: tuple = ()  # user-given kernel parameters, as sorted items
    pdl: bool = True  # launch as programmatic dependents where the kernel and the GPU allow
    geom: Geometry | None = None
    precision: str = "fp32"  # registry.PRECISIONS: what the products are computed with

    @property
    def count(self) -> int:
        return math.prod(self.batch)

    @property
    def host(self) -> bool:
        return self.a.op.on_host


# --------------------------------------------------------------------------- checks


def _check_dtype(op: Operand) -> None:
    if op.dtype != FLOAT32:
        fix = f"{op.name}.float()" if op.kind == "torch" else f"{op.name}.astype(numpy.float32)"
        raise TypeError(
            f"{op.name} has dtype {op.dtype}, but tilegemm computes in float32 and never casts "
            f"silently; convert it first: {fix}"
        )


def _check_aligned(op: Operand) -> None:
    if not op.on_host and op.ptr % 4:
        raise ValueError(
            f"{op.name} starts at a byte address that is not a multiple of 4 (a float32 view at an odd "
            f"byte offset); pass a copy ({op.name}.copy())"
        )


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


def _batch_strides(op: Operand, nbatch: int, batch: tuple) -> tuple:
    """Strides of op's leading (batch) dimensions over the broadcast ``batch`` shape."""
    own_shape, own_strides = op.shape[:nbatch], op.strides[:nbatch]
    pad = len(batch) - nbatch
    return (0,) * pad + tuple(0 if n == 1 else s for n, s in zip(own_shape, own_strides))


def _matrix_layout(op: Operand, shape: tuple, strides: tuple) -> tuple:
    if op.on_host:
        return ("N", shape[1])  # host arrays are copied to the GPU (and planned again there)
    lay = classify(shape, strides)
    if lay is None:
        raise ValueError(
            f"{op.name} is a view with strides {op.strides} (in elements) whose matrices are "
            f"neither row- nor column-major, so reading it would need a copy; tilegemm never "
            f"copies silently: pass a contiguous copy ({op.name}.copy() or "
            f"ascontiguousarray({op.name}))"
        )
    return lay


def _scalar(x, name: str) -> float:
    """A scale as the kernels apply it: a float32 number (one that float32 holds nonzero if it is nonzero)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}; pass a Python float "
                        f"(e.g. {name}=2.0)")
    v = float(x)
    if not math.isfinite(v) or abs(v) > _F32_MAX:
        raise ValueError(f"{name} = {v!r} is not a finite float32 number; pass a finite scale")
    if v != 0.0 and abs(v) <= 2.0**-150:  # rounds to 0 in float32 (half its smallest subnormal, 2^-149)
        raise ValueError(f"{name} = {v!r} rounds to 0 in float32 (the kernels scale in float32; the smallest "
                         f"nonzero float32 is about 1.4e-45); pass {name}=0.0, or rescale the operands")
    return v


def _config_items(spec: registry.KernelSpec, config) -> tuple:
    """The user's config as sorted (name, int) items, each name known to ``spec``."""
    if config is None:
        return ()
    params = spec.params(config)  # unknown names, non-integers and non-dicts raise here
    return tuple(sorted((k, params[k]) for k in config))


# --------------------------------------------------------------------------- the plan


def plan(a: Operand, b: Operand, out: Operand | None = None, kernel: str | None = None,
         config: dict | None = None, c: Operand | None = None, alpha=1.0, beta=0.0, pdl: bool = True,
         precision: str = "fp32") -> Plan:
    """Check everything about a call that metadata can tell; raise before any launch."""
    precision = registry.check_precision(precision)
    alpha, beta = _scalar(alpha, "alpha"), _scalar(beta, "beta")
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be True or False, got {type(pdl).__name__} {pdl!r}")
    for op in (a, b):
        _check_dtype(op)
        if len(op.shape) == 0:
            raise ValueError(
                f"{op.name} is a 0-d array (a scalar); matmul needs at least one dimension "
                f"(use multiplication for scalars)"
            )
    # 1-D promotion (numpy.matmul): a (K,) -> (1, K); b (K,) -> (K, 1); the added axis is dropped
    a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
    a_mat = ((1, a.shape[0]), (0, a.strides[0])) if a_vec else (a.shape[-2:], a.strides[-2:])
    b_mat = ((b.shape[0], 1), (b.strides[0], 0)) if b_vec else (b.shape[-2:], b.strides[-2:])
    (M, K), (K2, N) = a_mat[0], b_mat[0]
    if K != K2:
        raise ValueError(
            f"inner dimensions do not match: a has shape {a.shape} and b has shape {b.shape} "
            f"(a.shape[-1] = {K} must equal b.shape[{0 if b_vec else -2}] = {K2})"
        )
    na, nb = max(len(a.shape) - 2, 0), max(len(b.shape) - 2, 0)
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:na], b.shape[:nb]))
    except ValueError:
        raise ValueError(
            f"the batch dimensions of a {a.shape[:na]} and b {b.shape[:nb]} do not broadcast "
            f"(NumPy rules: equal, or 1, aligned from the right)"
        ) from None
    shape = batch + (() if a_vec else (M,)) + (() if b_vec else (N,))
    for dim, v in (("M", M), ("N", N), ("K", K)):
        if v > INT32_MAX:
            raise ValueError(f"{dim} = {v} is larger than 2^31 - 1, which tilegemm does not support")
    if c is not None:  # checked whether or not it is read (beta = 0 reads no c: NumPy/BLAS semantics)
        _check_dtype(c)
    elif beta != 0.0:
        raise ValueError(f"beta = {beta} scales c, but no c was given; pass c, or beta=0")
    use_c = c if beta != 0.0 else None
    ops = [a, b] + ([c] if c is not None else []) + ([out] if out is not None else [])
    device = _check_devices(ops)
    for op in ops:
        if op is not c or use_c is not None:
            _check_aligned(op)

    A = Mat(a, _batch_strides(a, na, batch), _matrix_layout(a, *a_mat))
    B = Mat(b, _batch_strides(b, nb, batch), _matrix_layout(b, *b_mat))

    def as_result(op: Operand) -> tuple:
        """(batch strides, (row stride, column stride)) of op read as the result's M x N matrices,
        with 0 for broadcast dimensions and dimensions of size 1."""
        nd = len(op.shape)
        if nd > len(shape) or any(n not in (1, want) for n, want in zip(op.shape[::-1], shape[::-1])):
            raise ValueError(f"{op.name} has shape {op.shape}, which does not broadcast to the "
                             f"result's shape {shape}")
        strides = (0,) * (len(shape) - nd) + tuple(0 if n == 1 else s for n, s in zip(op.shape, op.strides))
        mat = list(strides[len(batch):])
        rs = 0 if a_vec else mat.pop(0)
        cs = 0 if b_vec else mat.pop(0)
        return strides[:len(batch)], (rs if M > 1 else 0, cs if N > 1 else 0)

    O = None
    out_colmajor = False
    if out is not None:
        if out.dtype != FLOAT32:
            raise TypeError(f"out has dtype {out.dtype}; it must be float32 (the result's dtype)")
        if tuple(out.shape) != shape:
            raise ValueError(f"out has shape {tuple(out.shape)}, but the result has shape {shape}")
        if out.readonly:
            raise ValueError("out is a read-only array; pass a writable out array (or none)")
        for op in (a, b):
            if out.overlaps(op):
                raise ValueError(
                    f"out overlaps {op.name} in memory; tilegemm reads {op.name} while it writes "
                    f"out, so pass a separate out array"
                )
        if use_c is not None and out.overlaps(use_c) and (out.ptr, out.shape, out.strides) != (
                use_c.ptr, use_c.shape, use_c.strides):
            raise ValueError(
                "out overlaps c without being the same array; pass out=c (an in-place update) or "
                "a separate out array"
            )
        bs, (rs, cs) = as_result(out)
        if out.on_host:
            lay = ("N", N)
        else:
            if any(s == 0 and n > 1 for s, n in zip(bs, batch)):
                raise ValueError(
                    f"out has a zero stride in a batch dimension (a broadcast view), so several "
                    f"results would land on one element; pass a writable array of shape {shape}"
                )
            lay = classify((M, N), (rs if M > 1 else N, cs if N > 1 else 1))
            if lay is None:
                raise ValueError(
                    f"out is a view with strides {out.strides} (in elements) whose matrices are "
                    f"neither row- nor column-major; pass a contiguous out array"
                )
        O = Mat(out, bs, lay)
        out_colmajor = lay[0] == "T"
    C = None
    if c is not None:
        bs, (rs, cs) = as_result(c)  # c broadcasts to the result, read or not
    if use_c is not None:
        if use_c.on_host:  # copied to the GPU contiguously before the launch
            rs, cs = (N if M > 1 else 0), (1 if N > 1 else 0)
        row_ok, col_ok = N == 1 or cs == 1, M == 1 or rs == 1
        if out is None:  # the result takes c's layout
            if not (row_ok or col_ok):
                raise ValueError(
                    f"c is a view with strides {use_c.strides} (in elements) whose matrices are "
                    f"neither row- nor column-major (after broadcasting to {shape}); pass a "
                    f"contiguous copy of c"
                )
            out_colmajor = not row_ok
        elif not (col_ok if out_colmajor else row_ok):
            raise ValueError(
                f"c's matrices are {'row' if row_ok else 'column'}-major but out's are "
                f"{'column' if out_colmajor else 'row'}-major; pass c and out in the same layout "
                f"(or leave out=None to get c's layout)"
            )
        C = Mat(use_c, bs, (rs, cs))
    name = registry.FAMILY.name if kernel is None else kernel
    spec = registry.get(name)  # unknown names raise here
    items = _config_items(spec, config)
    registry.check_kernel_precision(spec, config, precision)
    if name != registry.FAMILY.name and (alpha != 1.0 or beta != 0.0):
        raise ValueError(
            f"kernel={name!r} is a ladder rung, which computes a @ b only; alpha and beta need "
            f"the default kernel (leave kernel=None)"
        )
    if config:
        extra = {"mma": registry.PRECISIONS[precision]} if spec is registry.FAMILY else {}
        params = spec.params({**config, **extra})
        spec.check(params, Limits.for_arch("sm_90"), given=config)
    p = Plan(M, N, K, batch, shape, A, B, C, O, out_colmajor, alpha, beta, name, device, items, pdl,
             precision=precision)
    return dataclasses.replace(p, geom=geometry(p))


# --------------------------------------------------------------------------- the kernels' view


def result_strides(p: Plan) -> tuple:
    """(batch strides, ("N"|"T", ld)) of the result as tilegemm allocates it: contiguous, its
    matrices column-major where ``p.out_colmajor``."""
    mshape = (p.N, p.M) if p.out_colmajor else (p.M, p.N)
    strides, acc = [], 1
    for n in reversed(p.batch + mshape):
        strides.append(acc)
        acc *= max(int(n), 1)
    strides = tuple(reversed(strides))
    return strides[:len(p.batch)], ("T", max(p.M, 1)) if p.out_colmajor else ("N", max(p.N, 1))


def groups(batch: tuple, strides: list[tuple]) -> tuple[int, tuple, list[tuple]]:
    """Split the batch into an inner run the kernel walks with one stride per operand and outer
    offsets the host loops over: (inner count, inner strides, [outer offsets per operand])."""
    dims = [(n, [s[i] for s in strides]) for i, n in enumerate(batch) if n != 1]
    if not dims:
        return 1, tuple(0 for _ in strides), [tuple(0 for _ in strides)]
    n_in, s_in = dims[-1][0], list(dims[-1][1])
    j = len(dims) - 1
    while j > 0:
        n, s = dims[j - 1]
        if all(so == si * n_in for so, si in zip(s, s_in)):
            n_in *= n
            j -= 1
        else:
            break
    outer = dims[:j]
    offsets = []
    for idx in itertools.product(*(range(n) for n, _ in outer)):
        offsets.append(tuple(sum(i * d[1][k] for i, d in zip(idx, outer)) for k in range(len(strides))))
    return n_in, tuple(s_in), offsets or [tuple(0 for _ in strides)]


def geometry(p: Plan) -> Geometry:
    """The product as the kernels compute it (row-major D): for column-major results D^T (N x M) =
    B^T A^T (+ beta C^T), so the operands swap and each layout flips."""
    d_b, d_lay = (p.out.bstrides, p.out.layout) if p.out is not None and not p.host else result_strides(p)
    c_b, (c_rs, c_cs) = (p.c.bstrides, p.c.layout) if p.c else ((0,) * len(p.batch), (0, 0))
    swap = d_lay[0] == "T"
    if swap:
        M, N = p.N, p.M
        lay_a, lay_b = (FLIP[p.b.layout[0]], p.b.layout[1]), (FLIP[p.a.layout[0]], p.a.layout[1])
        a_b, b_b = p.b.bstrides, p.a.bstrides
        c_rs, c_cs = c_cs, c_rs
    else:
        M, N, lay_a, lay_b, a_b, b_b = p.M, p.N, p.a.layout, p.b.layout, p.a.bstrides, p.b.bstrides
    count, strides, offsets = groups(p.batch, [a_b, b_b, c_b, d_b])
    return Geometry(swap, M, N, p.K, lay_a[0] + lay_b[0], lay_a[1], lay_b[1], c_rs, d_lay[1], count,
                    strides, tuple(offsets))
