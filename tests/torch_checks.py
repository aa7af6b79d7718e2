"""Checks shared by the CPU and the GPU tests of tilegemm.torch (imported by both; needs torch)."""

import torch

import tilegemm.torch as tgt

TOL = 1e-5


def rel(x, ref) -> float:
    """||x - ref|| / ||ref||, both taken in float64."""
    return scaled(x, ref, ref)


def scaled(x, ref, mag) -> float:
    """||x - ref|| / ||mag||, all in float64: the error against the size of the terms that were summed
    (``mag``: the product on the operands' absolute values), the scale floating-point GEMM's error
    bound has.  Unlike ``rel`` it stays small where the sum cancels (a vector-vector product's one
    value near 0), and a wrong element still shows at the size of its terms."""
    x, ref, mag = x.detach().double(), ref.detach().double(), mag.detach().double()
    return float((x - ref).norm() / max(float(mag.norm()), 1e-30))


def assert_gemm_and_gradients(a, b, c, alpha: float, beta: float) -> None:
    """tgt.gemm(a, b, c)'s value and the gradients of a, b and c (all requiring grad) against torch's
    in float64: shapes, float32 dtypes and errors below TOL of the terms' size (``scaled``; the
    gradients' sizes are the same products' gradients on absolute values)."""
    ins = [x for x in (a, b, c) if x is not None]
    res = tgt.gemm(a, b, c, alpha=alpha, beta=beta if c is not None else 0.0)
    grad = torch.randn_like(res)
    got = torch.autograd.grad(res, ins, grad)

    def product(xs, al, be, g):
        xs = [x.requires_grad_() for x in xs]
        out = al * torch.matmul(xs[0], xs[1]) + (be * xs[2] if c is not None else 0)
        return out, torch.autograd.grad(out, xs, g)

    ref, want = product([x.detach().double() for x in ins], alpha, beta, grad.double())
    mag, sizes = product([x.detach().double().abs() for x in ins], abs(alpha), abs(beta), grad.double().abs())
    assert res.shape == ref.shape and res.dtype == torch.float32 and scaled(res, ref, mag) < TOL
    for name, g, w, m in zip("abc", got, want, sizes):
        assert g.shape == w.shape and g.dtype == torch.float32, name
        assert scaled(g, w, m) < TOL, name
