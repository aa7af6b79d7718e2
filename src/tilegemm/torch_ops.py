"""The tilegemm products as torch custom operators, for ``tilegemm.torch``.

``torch.ops.tilegemm.matmul(a, b)``, ``torch.ops.tilegemm.gemm(a, b, c, alpha, beta)`` and
``torch.ops.tilegemm.gemm_out(a, b, c, alpha, beta, out)`` (which writes ``out``) run
``tilegemm.matmul`` / ``tilegemm.gemm``; each takes a last ``precision="fp32"`` (``tilegemm.matmul``'s).
Each has a fake implementation that gives the real result's shape, strides and dtype from metadata
alone (symbolic sizes included), so torch.compile traces through them; the two functional ones have
autograd formulas computed with the same operators, at the forward's precision.

``matmul``, ``gemm`` and ``gemm_out`` here pick the operator or, where the operator would add nothing
(eager, no autograd to record, plain CUDA tensors, no torch mode active), tilegemm itself: the same
computation, without the dispatcher's few microseconds.  Registration is done once per process;
importing this module again (``importlib.reload``) keeps the operators registered first.
"""

from __future__ import annotations

import math

try:
    import torch
except ImportError:  # torch is an optional dependency of tilegemm
    raise ImportError("tilegemm.torch needs PyTorch; install it first (pip install torch)") from None

from . import api, fastpath, registry
from .arrays import classify

NAMESPACE = "tilegemm"
SCHEMAS = {
    "matmul": '(Tensor a, Tensor b, str precision="fp32") -> Tensor',
    "gemm": '(Tensor a, Tensor b, Tensor? c, float alpha, float beta, str precision="fp32") -> Tensor',
    "gemm_out": '(Tensor a, Tensor b, Tensor? c, float alpha, float beta, Tensor(a!) out, '
                'str precision="fp32") -> ()',
}
MUTATES = {"matmul": (), "gemm": (), "gemm_out": ("out",)}


# --------------------------------------------------------------------------- shapes and layouts


def _check_float32(x, name: str) -> None:
    if x.dtype != torch.float32:
        raise TypeError(f"{name} has dtype {x.dtype}, but tilegemm computes in float32 and never casts "
                        f"silently; convert it first: {name}.float()")


def _check_device(x, name: str, a) -> None:
    if x.device != a.device:
        raise ValueError(f"a is on {a.device} but {name} is on {x.device}; move them to one device")


def product_shape(a, b) -> tuple:
    """(batch, M, N, result shape) of ``a @ b`` under numpy.matmul's rules, checked as tilegemm checks
    them (sizes may be symbolic)."""
    for x, name in ((a, "a"), (b, "b")):
        _check_float32(x, name)
        if x.dim() == 0:
            raise ValueError(f"{name} is a 0-d tensor (a scalar); matmul needs at least one dimension "
                             f"(use multiplication for scalars)")
    _check_device(b, "b", a)
    a_vec, b_vec = a.dim() == 1, b.dim() == 1
    M, K = (1, a.shape[0]) if a_vec else tuple(a.shape[-2:])
    K2, N = (b.shape[0], 1) if b_vec else tuple(b.shape[-2:])
    torch._check_with(ValueError, K == K2, lambda: (
        f"inner dimensions do not match: a has shape {tuple(a.shape)} and b has shape {tuple(b.shape)} "
        f"(a.shape[-1] = {K} must equal b.shape[{0 if b_vec else -2}] = {K2})"))
    try:
        batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except RuntimeError:
        raise ValueError(f"the batch dimensions of a {tuple(a.shape[:-2])} and b {tuple(b.shape[:-2])} do "
                         f"not broadcast (NumPy rules: equal, or 1, aligned from the right)") from None
    return batch, M, N, batch + (() if a_vec else (M,)) + (() if b_vec else (N,))


def _check_c(c, a, shape) -> None:
    """What tilegemm checks of a given c whether or not it reads it: dtype, device, shape."""
    _check_float32(c, "c")
    _check_device(c, "c", a)
    if c.dim() > len(shape) or any(n != 1 and n != want for n, want in zip(c.shape[::-1], shape[::-1])):
        raise ValueError(f"c has shape {tuple(c.shape)}, which does not broadcast to the result's shape "
                         f"{tuple(shape)}")


def _c_colmajor(c, a, b, batch, M, N, shape) -> bool:
    """Whether tilegemm makes the result column-major to follow c (read with beta != 0): c's
    column stride in the result's matrices is not 1.  Raises where tilegemm rejects c's layout
    (``_check_c`` first)."""
    nd = c.dim()
    strides = (0,) * (len(shape) - nd) + tuple(0 if n == 1 else s for n, s in zip(c.shape, c.stride()))
    mat = list(strides[len(batch):])
    rs = 0 if a.dim() == 1 else mat.pop(0)
    cs = 0 if b.dim() == 1 else mat.pop(0)
    row_ok = N == 1 or (N > 1 and cs == 1)
    col_ok = M == 1 or (M > 1 and rs == 1)
    if not (row_ok or col_ok):
        raise ValueError(f"c is a view with strides {tuple(c.stride())} (in elements) whose matrices are "
                         f"neither row- nor column-major (after broadcasting to {tuple(shape)}); pass a "
                         f"contiguous copy of c")
    return not row_ok


def result_strides(shape: tuple, colmajor: bool) -> tuple:
    """The strides of tilegemm's new result: contiguous, its matrices column-major where
    ``colmajor`` (a result with a vector operand is contiguous either way)."""
    alloc = shape[:-2] + (shape[-1], shape[-2]) if colmajor else shape
    strides, acc = [], 1
    for n in reversed(alloc):
        strides.append(acc)
        acc = acc * torch.sym_max(n, 1)
    strides = strides[::-1]
    return tuple(strides[:-2]) + (strides[-1], strides[-2]) if colmajor else tuple(strides)


def result_layout(a, b, c, beta: float) -> tuple:
    """(shape, strides) of ``tilegemm.gemm(a, b, c, beta=beta)``'s new result."""
    batch, M, N, shape = product_shape(a, b)
    if beta != 0.0 and c is None:
        raise ValueError(f"beta = {beta} scales c, but no c was given; pass c, or beta=0")
    if c is not None:
        _check_c(c, a, shape)
    colmajor = beta != 0.0 and _c_colmajor(c, a, b, batch, M, N, shape)
    return shape, result_strides(shape, colmajor and a.dim() > 1 and b.dim() > 1)


# --------------------------------------------------------------------------- the operators' bodies


def _matmul_impl(a: torch.Tensor, b: torch.Tensor, precision: str = "fp32") -> torch.Tensor:
    return api.matmul(a, b, precision=precision)


def _gemm_impl(a, b, c, alpha: float, beta: float, precision: str = "fp32") -> torch.Tensor:
    return api.gemm(a, b, c, alpha=alpha, beta=beta, precision=precision)


def _gemm_out_impl(a, b, c, alpha: float, beta: float, out, precision: str = "fp32") -> None:
    api.gemm(a, b, c, alpha=alpha, beta=beta, out=out, precision=precision)


# The fakes check precision first, as tilegemm's plan does (the result's layout does not depend on it).


def _matmul_fake(a, b, precision="fp32"):
    return _gemm_fake(a, b, None, 1.0, 0.0, precision)


def _gemm_fake(a, b, c, alpha, beta, precision="fp32"):
    registry.check_precision(precision)
    shape, strides = result_layout(a, b, c, beta)
    return torch.empty_strided(shape, strides, dtype=torch.float32, device=a.device)


def _gemm_out_fake(a, b, c, alpha, beta, out, precision="fp32"):
    registry.check_precision(precision)
    shape, _ = result_layout(a, b, c, beta)  # c checked as for a new result
    _check_float32(out, "out")
    _check_device(out, "out", a)
    if tuple(out.shape) != shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, but the result has shape {shape}")


# --------------------------------------------------------------------------- autograd


def _readable(x):
    """x itself where tilegemm reads its matrices in place (row- or column-major), else a contiguous
    copy (incoming gradients can be expanded views with zero strides)."""
    if x.dim() >= 2 and classify(tuple(x.shape[-2:]), tuple(x.stride()[-2:])) is None:
        return x.contiguous()
    return x


def _matmul_grads(a, b, shapes: tuple, grad, alpha: float, need_a: bool, need_b: bool,
                  precision: str = "fp32") -> tuple:
    """alpha * grad @ b^T and alpha * a^T @ grad at ``precision``, summed over broadcast batch
    dimensions back to a's and b's ``shapes``, 1-D operands handled as torch.matmul handles them."""
    a_shape, b_shape = shapes
    a_vec, b_vec = len(a_shape) == 1, len(b_shape) == 1
    g = grad.unsqueeze(-1) if b_vec else grad
    g = _readable(g.unsqueeze(-2) if a_vec else g)
    ga = gb = None
    if need_a:
        b2 = b.unsqueeze(-1) if b_vec else b
        ga = gemm(g, b2.mT, None, alpha, 0.0, precision)
        ga = ga.sum_to_size(((1,) if a_vec else ()) + tuple(a_shape))
        ga = ga.reshape(a_shape)
    if need_b:
        a2 = a.unsqueeze(0) if a_vec else a
        if len(b_shape) <= 2 and g.dim() > 2 and a2.shape[:-2] == g.shape[:-2]:  # one product over all rows
            rows = math.prod(g.shape[:-1])
            a_rows, g_rows = a2.reshape(rows, a2.shape[-1]), g.reshape(rows, g.shape[-1])
            gb = gemm(_readable(a_rows).mT, _readable(g_rows), None, alpha, 0.0, precision)
        else:
            gb = gemm(a2.mT, g, None, alpha, 0.0, precision)
            gb = gb.sum_to_size(tuple(b_shape) + ((1,) if b_vec else ()))
        gb = gb.reshape(b_shape)
    return ga, gb


def _save_operands(ctx, a, b) -> None:
    """Keep what the gradients need: b for a's, a for b's (an operand needed by neither is freed)."""
    need_a, need_b = ctx.needs_input_grad[:2]
    ctx.save_for_backward(a if need_b else None, b if need_a else None)
    ctx.shapes = (a.shape, b.shape)


def _setup_matmul(ctx, inputs, output) -> None:
    a, b, precision = inputs
    _save_operands(ctx, a, b)
    ctx.precision = precision  # the backward's products are computed as the forward's


def _setup_gemm(ctx, inputs, output) -> None:
    a, b, c, alpha, beta, precision = inputs
    _save_operands(ctx, a, b)
    ctx.alpha, ctx.beta, ctx.precision = alpha, beta, precision
    ctx.c_shape = None if c is None else c.shape


def _matmul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    ga, gb = _matmul_grads(a, b, ctx.shapes, grad, 1.0, *ctx.needs_input_grad[:2], ctx.precision)
    return ga, gb, None  # precision: no gradient


def _gemm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    ga, gb = _matmul_grads(a, b, ctx.shapes, grad, ctx.alpha, *ctx.needs_input_grad[:2], ctx.precision)
    gc = None
    if ctx.needs_input_grad[2] and ctx.beta != 0.0:  # c is not read when beta == 0
        gc = (grad if ctx.beta == 1.0 else grad * ctx.beta).sum_to_size(ctx.c_shape)
    return ga, gb, gc, None, None, None  # alpha, beta, precision: no gradients


# --------------------------------------------------------------------------- registration


def _registered(name: str) -> bool:
    try:
        getattr(getattr(torch.ops, NAMESPACE), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _define(name: str, impl, fake, backward=None, setup=None) -> None:
    """Register ``tilegemm::name`` unless this process already has it (a reloaded module keeps the
    first registration: the operators' bodies read this module's globals at call time)."""
    if _registered(name):
        return
    op = torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=MUTATES[name],
                                 schema=SCHEMAS[name])
    op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup)
    _DEFS[name] = op


_DEFS = globals().get("_DEFS", {})  # the CustomOpDef objects, kept alive across reloads
_define("matmul", _matmul_impl, _matmul_fake, _matmul_backward, _setup_matmul)
_define("gemm", _gemm_impl, _gemm_fake, _gemm_backward, _setup_gemm)
_define("gemm_out", _gemm_out_impl, _gemm_out_fake)
MATMUL = torch.ops.tilegemm.matmul.default
GEMM = torch.ops.tilegemm.gemm.default
GEMM_OUT = torch.ops.tilegemm.gemm_out.default


# --------------------------------------------------------------------------- calling them


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_FAMILY = registry.FAMILY.name


# what ``direct`` asks torch, looked up once (each a C function: the lookups cost more than the calls)
_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_modes = (torch._C._len_torch_dispatch_stack, torch._C._len_torch_function_stack,
          torch._C._are_functorch_transforms_active)


def direct(*tensors, cuda: bool = True) -> bool:
    """True where calling tilegemm directly computes exactly what the operator would: not under
    torch.compile, no autograd to record, plain CUDA tensors, no torch mode or functorch transform.
    ``cuda=False``: the tensors' device is left to the caller."""
    if _compiling():
        return False
    grad = _grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or (cuda and not t.is_cuda) or (grad and t.requires_grad)):
            return False
    dispatch_modes, function_modes, functorch = _modes
    return not (dispatch_modes() or function_modes() or functorch())


def matmul(a, b, precision: str = "fp32"):
    """a @ b at ``precision`` through the operator, or tilegemm directly where that is the same
    (``direct``)."""
    return api.matmul(a, b, precision=precision) if direct(a, b) else MATMUL(a, b, precision)


def gemm(a, b, c, alpha: float, beta: float, precision: str = "fp32"):
    """alpha * a @ b + beta * c at ``precision``, as ``matmul`` picks its path."""
    if c is None and alpha == 1.0 and beta == 0.0:
        return matmul(a, b, precision)
    if direct(a, b, c):
        return api.gemm(a, b, c, alpha=alpha, beta=beta, precision=precision)
    return GEMM(a, b, c, alpha, beta, precision)


def matmul_out_remembered(a, b, out, precision: str) -> bool:
    """``out = a @ b`` where tilegemm may be called directly (``direct``) and the call is one it
    remembers (fastpath): True when done; False leaves everything to the caller's full path (which
    checks the arguments and reports what is wrong)."""
    # (a CPU tensor is left to fastpath, which does not take it)
    return direct(a, b, out, cuda=False) and fastpath.call(a, b, out, _FAMILY, None, True, precision) is not fastpath.MISS


def gemm_out(a, b, c, alpha: float, beta: float, out, precision: str = "fp32") -> None:
    """Write alpha * a @ b + beta * c at ``precision`` into ``out``, as ``matmul`` picks its path."""
    if c is None and alpha == 1.0 and beta == 0.0 and direct(a, b, out):
        api.matmul(a, b, out=out, precision=precision)
    elif direct(a, b, c, out):
        api.gemm(a, b, c, alpha=alpha, beta=beta, out=out, precision=precision)
    else:
        GEMM_OUT(a, b, c, alpha, beta, out, precision)
