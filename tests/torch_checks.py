"""Checks shared by the CPU and the GPU tests of tilegemm.torch (imported by both; needs torch)."""

import torch

import tilegemm.torch as tgt

TOL = 1e-5


def rel(x, ref) -> float:
    """||x - ref|| / ||ref||, both taken in float64."""
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).norm() / max(float(ref.norm()), 1e-30))


def assert_gemm_and_gradients(a, b, c, alpha: float, beta: float) -> None:
    """tgt.gemm(a, b, c)'s value and the gradients of a, b and c (all requiring grad) against torch's
    in float64: shapes, float32 dtypes and relative errors below TOL."""
    ins = [x for x in (a, b, c) if x is not None]
    res = tgt.gemm(a, b, c, alpha=alpha, beta=beta if c is not None else 0.0)
    grad = torch.randn_like(res)
    got = torch.autograd.grad(res, ins, grad)
    d = [x.detach().double().requires_grad_() for x in ins]
    ref = alpha * torch.matmul(d[0], d[1]) + (beta * d[2] if c is not None else 0)
    want = torch.autograd.grad(ref, d, grad.double())
    assert res.shape == ref.shape and res.dtype == torch.float32 and rel(res, ref) < TOL
    for name, g, w in zip("abc", got, want):
        assert g.shape == w.shape and g.dtype == torch.float32, name
        assert rel(g, w) < TOL, name
