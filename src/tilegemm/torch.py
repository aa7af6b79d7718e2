"""tilegemm for PyTorch: autograd, torch.compile and ``nn.Linear``.

    import tilegemm.torch as tgt
    y = tgt.matmul(a, b)                              # torch.matmul's rules, float32 CUDA tensors
    y = tgt.gemm(x, w.mT, bias, alpha=1.0, beta=1.0)  # alpha * x @ w^T + beta * bias
    model = tgt.replace_linear(model)                 # every float32 nn.Linear now runs on tilegemm
    y = tgt.matmul(a, b, precision="tf32x3")          # tensor cores at FP32 accuracy (also "tf32")

The products are torch custom operators (``torch.ops.tilegemm.matmul``, ``.gemm`` and ``.gemm_out``,
see ``tilegemm.torch_ops``): they differentiate (both operands, and c), trace under
``torch.compile(fullgraph=True)`` with static or dynamic shapes, and run on torch's current CUDA
stream.  Transposed views (``w.mT``) are read in place, forward and backward.  Eager calls that record
no autograd call tilegemm directly, skipping the dispatcher; the results are the same.

This module needs torch (an optional dependency of tilegemm); ``import tilegemm`` does not load it.
"""

from __future__ import annotations

import math
import numbers

try:
    import torch
    from torch import nn
except ImportError:  # torch is an optional dependency of tilegemm
    raise ImportError("tilegemm.torch needs PyTorch; install it first (pip install torch)") from None

from . import registry, torch_ops

__all__ = ["matmul", "gemm", "Linear", "replace_linear"]


def _tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor, got {type(x).__name__}; use tilegemm.matmul or "
                        f"tilegemm.gemm for NumPy and CuPy arrays")


def _scale(x, name: str):
    """A finite real number as a float, or a torch tensor as it is."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number or a torch tensor, got {type(x).__name__} {x!r}")
    v = float(x)
    if not math.isfinite(v) or abs(v) > torch.finfo(torch.float32).max:
        raise ValueError(f"{name} = {v!r} is not a finite float32 number; pass a finite scale")
    # plan._scalar's test, written again here: calling into plan from this path cost torch.compile a
    # second compiled frame (tests/test_torch_ops.py counts them)
    if v != 0.0 and abs(v) <= 2.0**-150:  # rounds to 0 in float32 (half its smallest subnormal, 2^-149)
        raise ValueError(f"{name} = {v!r} rounds to 0 in float32 (the kernels scale in float32; the smallest "
                         f"nonzero float32 is about 1.4e-45); pass {name}=0.0, or rescale the operands")
    return v


def _no_grad_with_out(**tensors) -> None:
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if t is not None and t.requires_grad:
            raise ValueError(f"{name} requires grad, but out= does not support autograd (as in torch); "
                             f"call without out=, or under torch.no_grad()")


def matmul(a, b, *, out=None, precision="fp32"):
    """``a @ b`` in float32 with tilegemm, under ``torch.matmul``'s rules (1-D operands, broadcast
    batch dimensions), differentiable in a and b.

    a, b: float32 CUDA tensors in any row- or column-major layout (``x.mT`` is read in place).  The
    result is a new contiguous float32 tensor; with ``out`` it is written there and ``out`` is
    returned (no autograd then, as in torch).  ``precision``: "fp32" (FFMAs, the default), "tf32x3"
    (tensor cores at FP32 accuracy) or "tf32" (tensor cores with 10-bit mantissas); the backward's
    products use the same.
    """
    if out is not None and torch_ops.matmul_out_remembered(a, b, out, precision):
        return out  # a repeat call, checked before (the first call of its kind takes the path below)
    _tensor(a, "a")
    _tensor(b, "b")
    if out is None:
        return torch_ops.matmul(a, b, precision)
    _tensor(out, "out")
    _no_grad_with_out(a=a, b=b, out=out)
    torch_ops.gemm_out(a, b, None, 1.0, 0.0, out, precision)
    return out


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, out=None, precision="fp32"):
    """``alpha * (a @ b) + beta * c`` in float32 with tilegemm, differentiable in a, b and c.

    ``c`` broadcasts to the result's shape (a bias row of shape (N,) works) and is read only when
    beta != 0 (with beta == 0 it gets no gradient; its dtype, shape and device are checked either way).  The result is new, its matrices in c's layout where c is
    read (row-major otherwise); with ``out`` it is written there and ``out`` is returned (no autograd
    then).  alpha and beta are numbers, fixed in the traced graph; a torch tensor for either makes
    this ``alpha * matmul(a, b) + beta * c`` with torch's own scaling and addition, so autograd
    reaches alpha and beta too (at the cost of two elementwise passes).  ``precision``: as in
    ``matmul`` ("fp32": FFMAs, the default; "tf32x3": tensor cores at FP32 accuracy; "tf32": tensor
    cores with 10-bit mantissas).
    """
    _tensor(a, "a")
    _tensor(b, "b")
    if c is not None:
        _tensor(c, "c")
    alpha, beta = _scale(alpha, "alpha"), _scale(beta, "beta")
    if out is not None:
        _tensor(out, "out")
        _no_grad_with_out(a=a, b=b, c=None if isinstance(beta, float) and beta == 0.0 else c, out=out,
                          alpha=alpha if isinstance(alpha, torch.Tensor) else None,
                          beta=beta if isinstance(beta, torch.Tensor) else None)
    if isinstance(alpha, torch.Tensor) or isinstance(beta, torch.Tensor):
        res = _scaled(a, b, c, alpha, beta, precision)
        return res if out is None else out.copy_(res)
    if out is None:
        return torch_ops.gemm(a, b, c, alpha, beta, precision)
    torch_ops.gemm_out(a, b, c, alpha, beta, out, precision)
    return out


def _scaled(a, b, c, alpha, beta, precision):
    """alpha * (a @ b) + beta * c with alpha or beta a tensor, built from torch ops."""
    res = torch_ops.matmul(a, b, precision)
    if not (isinstance(alpha, float) and alpha == 1.0):
        res = alpha * res
    if isinstance(beta, float) and beta == 0.0:
        if c is not None:
            torch_ops.result_layout(a, b, c, 0.0)  # c is not read, but checked as tilegemm checks it
        return res
    if c is None:
        raise ValueError("beta scales c, but no c was given; pass c, or beta=0")
    return res + beta * c


def _float32_only(what: str, dtype) -> None:
    if dtype != torch.float32:
        raise TypeError(f"{what} has dtype {dtype}, but tilegemm.torch.Linear computes in float32 and never "
                        f"casts silently; convert it with .float() (or use torch.nn.Linear for {dtype})")


class Linear(nn.Linear):
    """``torch.nn.Linear`` computed with tilegemm: ``y = x @ weight^T + bias`` as one tilegemm call
    (the bias is added through gemm's c, broadcast as a row; weight^T is read in place).

    The same parameters, initialisation and state_dict as ``nn.Linear``; float32 only (another dtype
    raises rather than changing precision).  x: (..., in_features), a float32 CUDA tensor.
    ``precision``: how forward and backward compute their products: "fp32" (FFMAs, the default),
    "tf32x3" (tensor cores at FP32 accuracy) or "tf32" (tensor cores with 10-bit mantissas).
    """

    precision: str = "fp32"  # the class's default, for layers whose class replace_linear changed

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 precision: str = "fp32"):
        if dtype is not None and dtype != torch.float32:
            raise TypeError(f"dtype must be torch.float32 (or None), got {dtype}: tilegemm.torch.Linear computes "
                            f"in float32 and never casts silently (torch.nn.Linear runs other dtypes)")
        registry.check_precision(precision)
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.precision = precision

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, precision={self.precision!r}"

    def forward(self, input):
        _float32_only("weight", self.weight.dtype)
        _float32_only("input", input.dtype)
        if self.bias is None:
            return matmul(input, self.weight.mT, precision=self.precision)
        return gemm(input, self.weight.mT, self.bias, alpha=1.0, beta=1.0, precision=self.precision)


def replace_linear(module: nn.Module, *, precision: str = "fp32") -> nn.Module:
    """Make every float32 ``nn.Linear`` in ``module`` (itself included) a ``tilegemm.torch.Linear``,
    in place, and return ``module``.

    Each layer stays the same object with the same Parameters (nothing is copied, so optimizers,
    hooks and other references to them keep working); only its class changes.  Subclasses of
    nn.Linear and layers of another dtype are left as they are.  ``precision``: the new layers'
    (``Linear``'s: "fp32", FFMAs, the default; "tf32x3": tensor cores at FP32 accuracy; "tf32":
    tensor cores with 10-bit mantissas).
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    registry.check_precision(precision)
    for m in module.modules():
        if type(m) is nn.Linear and m.weight.dtype == torch.float32:
            m.__class__ = Linear
            m.precision = precision
    return module
