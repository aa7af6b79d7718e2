"""GPU-free: tilegemm.torch's operators, fakes, autograd formulas, torch.compile tracing and
nn.Linear swap, with torch's CPU build.

The fakes are checked on meta tensors against torch.matmul's shapes and against tilegemm's own
planning (plan.py decides the real result's layout; the result is allocated as dispatch.run does).
Everything that needs the operators to run uses ``cpu_tilegemm``: tilegemm's planning with torch's
CPU matmul in place of the kernels, so opcheck, gradients and compiled graphs are exercised here;
tests/gpu/test_torch.py runs the same on the GPU with the real kernels.
"""

import importlib
import subprocess
import sys
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilegemm.torch as tgt  # noqa: E402
from tilegemm import registry, torch_ops  # noqa: E402
from tilegemm.arrays import Operand  # noqa: E402
from tilegemm.plan import plan  # noqa: E402
from torch_checks import assert_gemm_and_gradients  # noqa: E402



# --------------------------------------------------------------------------- a CPU stand-in for tilegemm


def _operand(t, name):
    """t's metadata as tilegemm sees a GPU tensor's (float64 is planned as float32 would be)."""
    dtype = np.dtype("float32") if t.dtype == torch.float64 else np.dtype(str(t.dtype).removeprefix("torch."))
    return Operand(name, "torch", t, tuple(t.shape), tuple(t.stride()), dtype, 0, t.data_ptr())


def planned_result(a, b, c=None, alpha=1.0, beta=0.0, out=None, precision="fp32"):
    """(plan, a new result laid out as tilegemm allocates it: dispatch.run's allocation and reshape)."""
    p = plan(_operand(a, "a"), _operand(b, "b"), _operand(out, "out") if out is not None else None, None, None,
             _operand(c, "c") if c is not None else None, alpha, beta, True, precision)
    mshape = p.batch + ((p.N, p.M) if p.out_colmajor else (p.M, p.N))
    res = torch.empty(mshape, dtype=a.dtype, device=a.device)
    res = res.transpose(-1, -2) if p.out_colmajor else res
    return p, res


class CPUTilegemm:
    """tilegemm.gemm / tilegemm.matmul on CPU tensors: the real planning and checks, torch's matmul.
    ``precisions``: the precision of every call, in order."""

    def __init__(self):
        self.precisions = []

    def gemm(self, a, b, c=None, *, alpha=1.0, beta=0.0, out=None, precision="fp32"):
        self.precisions.append(precision)
        p, res = planned_result(a, b, c, alpha, beta, out, precision)
        ref = alpha * torch.matmul(a, b)
        if p.c is not None:
            ref = ref + beta * c
        if out is not None:
            return out.copy_(ref)
        res.copy_(ref.reshape(res.shape))
        return res.reshape(p.shape) if tuple(res.shape) != p.shape else res

    def matmul(self, a, b, *, out=None, precision="fp32"):
        return self.gemm(a, b, out=out, precision=precision)


@pytest.fixture
def cpu_tilegemm(monkeypatch):
    stand_in = CPUTilegemm()
    monkeypatch.setattr(torch_ops, "api", stand_in)
    return stand_in


def meta(*shape):
    return torch.empty(*shape, device="meta")


def view(shape, layout="N", device="meta", dtype=torch.float32):
    """A tensor of ``shape`` whose matrices are row-major ("N") or column-major ("T", a .mT view)."""
    if layout == "N":
        return torch.randn(shape, device=device, dtype=dtype)
    return torch.randn(shape[:-2] + (shape[-1], shape[-2]), device=device, dtype=dtype).mT


# --------------------------------------------------------------------------- fakes


SHAPES = [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)), ((1, 3, 4), (7, 4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
    ((4,), (2, 4, 5)), ((2, 3, 4), (4,)), ((0, 3, 4), (4, 5)), ((3, 0), (0, 5)), ((1, 1), (1, 1)),
]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=str)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_the_fake_gives_torch_matmul_s_shape_and_a_contiguous_float32_result(sa, sb, layout):
    a = view(sa, layout[0]) if len(sa) > 1 else meta(*sa)
    b = view(sb, layout[1]) if len(sb) > 1 else meta(*sb)
    for res in (torch.ops.tilegemm.matmul(a, b), torch.ops.tilegemm.gemm(a, b, None, 2.0, 0.0)):
        assert res.shape == torch.matmul(a, b).shape
        assert res.dtype == torch.float32 and res.device.type == "meta" and res.is_contiguous()


C_CASES = [  # (a, b, c shape, c layout): c full, a bias row, a column, broadcast batches, 1-D products
    ((3, 4), (4, 5), (3, 5), "N"), ((3, 4), (4, 5), (3, 5), "T"), ((3, 4), (4, 5), (5,), "N"),
    ((3, 4), (4, 5), (3, 1), "N"), ((3, 4), (4, 5), (1, 5), "N"), ((2, 3, 4), (4, 5), (2, 3, 5), "T"),
    ((2, 3, 4), (4, 5), (3, 5), "T"), ((2, 3, 4), (4, 5), (5,), "N"), ((2, 3, 4), (2, 4, 5), (2, 1, 5), "N"),
    ((4,), (4, 5), (5,), "N"), ((3, 4), (4,), (3,), "N"), ((2, 4), (2, 4, 5), (2, 2, 5), "T"),
    ((1, 4), (4, 5), (1, 5), "T"), ((3, 4), (4, 1), (3, 1), "T"), ((3, 0), (0, 5), (3, 5), "T"),
]


@pytest.mark.parametrize("sa,sb,sc,lc", C_CASES, ids=str)
def test_the_fake_s_strides_follow_tilegemm_s_plan(sa, sb, sc, lc):
    """With c read (beta != 0) tilegemm's result follows c's layout: the fake must give the same."""
    a, b = torch.randn(sa), torch.randn(sb)
    c = view(sc, lc, device="cpu") if len(sc) > 1 else torch.randn(sc)
    p, res = planned_result(a, b, c, 1.0, 1.0)
    want = res.reshape(p.shape) if tuple(res.shape) != p.shape else res
    got = torch.ops.tilegemm.gemm(a.to("meta"), b.to("meta"), c.to("meta"), 1.0, 1.0)
    assert (tuple(got.shape), got.stride()) == (tuple(want.shape), want.stride())
    plain = torch.ops.tilegemm.gemm(a.to("meta"), b.to("meta"), c.to("meta"), 1.0, 0.0)  # c not read
    assert plain.shape == got.shape and plain.is_contiguous()


def test_a_strided_bias_row_gives_what_tilegemm_gives():
    b, c = torch.randn(4, 5), torch.randn(10)[::2]
    with pytest.raises(ValueError, match="^c is a view with strides"):
        planned_result(torch.randn(3, 4), b, c, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"^c is a view with strides \(2,\) \(in elements\) whose matrices"):
        torch.ops.tilegemm.gemm(meta(3, 4), b.to("meta"), meta(10)[::2], 1.0, 1.0)
    p, res = planned_result(torch.randn(4), b, c, 1.0, 1.0)  # one row: column-major, then reshaped
    assert p.out_colmajor
    got = torch.ops.tilegemm.gemm(meta(4), b.to("meta"), meta(10)[::2], 1.0, 1.0)
    assert got.shape == (5,) and got.stride() == res.reshape(p.shape).stride() == (1,)


@pytest.mark.parametrize("call,exc,message", [
    (lambda: torch.ops.tilegemm.matmul(meta(2, 3), meta(4, 5)), ValueError,
     r"^inner dimensions do not match: a has shape \(2, 3\) and b has shape \(4, 5\) \(a.shape\[-1\] = 3 must"),
    (lambda: torch.ops.tilegemm.matmul(meta(3), meta(4)), ValueError, "inner dimensions do not match"),
    (lambda: torch.ops.tilegemm.gemm(meta(2, 3, 4), meta(3, 4, 5), None, 1.0, 0.0), ValueError,
     r"^the batch dimensions of a \(2,\) and b \(3,\) do not broadcast"),
    (lambda: torch.ops.tilegemm.matmul(meta(3, 4).double(), meta(4, 5)), TypeError,
     r"^a has dtype torch.float64, but tilegemm computes in float32 .* a.float\(\)$"),
    (lambda: torch.ops.tilegemm.matmul(meta(()), meta(4, 5)), ValueError, "^a is a 0-d tensor"),
    (lambda: torch.ops.tilegemm.gemm(meta(3, 4), meta(4, 5), meta(4, 5), 1.0, 1.0), ValueError,
     r"^c has shape \(4, 5\), which does not broadcast to the result's shape \(3, 5\)$"),
    (lambda: torch.ops.tilegemm.gemm(meta(3, 4), meta(4, 5), None, 1.0, 2.0), ValueError,
     "^beta = 2.0 scales c, but no c was given"),
    (lambda: torch.ops.tilegemm.gemm(meta(3, 4), meta(4, 5), meta(1, 1), 1.0, 2.0), ValueError,
     "^c is a view with strides"),
    (lambda: torch.ops.tilegemm.gemm_out(meta(3, 4), meta(4, 5), None, 1.0, 0.0, meta(3, 4)), ValueError,
     r"^out has shape \(3, 4\), but the result has shape \(3, 5\)$"),
    (lambda: torch.ops.tilegemm.gemm_out(meta(3, 4), meta(4, 5), None, 1.0, 0.0, meta(3, 5).double()),
     TypeError, "^out has dtype torch.float64"),
    (lambda: torch.ops.tilegemm.matmul(meta(3, 4), torch.ones(4, 5)), ValueError,
     "^a is on meta but b is on cpu; move them to one device$"),
    (lambda: torch.ops.tilegemm.gemm(meta(3, 4), meta(4, 5), meta(4, 5), 1.0, 0.0), ValueError,
     r"^c has shape \(4, 5\), which does not broadcast to the result's shape \(3, 5\)$"),
    (lambda: torch.ops.tilegemm.gemm_out(meta(3, 4), meta(4, 5), meta(3, 5).double(), 1.0, 0.0, meta(3, 5)),
     TypeError, "^c has dtype torch.float64"),
], ids=["K", "K 1-D", "batch", "dtype", "0-d", "c shape", "beta without c", "c scalar", "out shape",
        "out dtype", "devices", "c shape, beta 0", "c dtype, beta 0"])
def test_the_fakes_reject_what_tilegemm_rejects(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


def test_a_scalar_c_is_rejected_by_tilegemm_too():
    with pytest.raises(ValueError, match="^c is a view with strides"):
        planned_result(torch.randn(3, 4), torch.randn(4, 5), torch.randn(()), 1.0, 1.0)


def test_the_fakes_keep_sizes_symbolic():
    from torch.fx.experimental.proxy_tensor import make_fx

    seen = []

    def fn(a, b, c, ct):
        for args in ((a, b, c, 1.0, 1.0), (a, b.mT.contiguous().mT, ct, 1.0, 1.0), (a[0, 0], b, c, 1.0, 1.0)):
            res = torch.ops.tilegemm.gemm(*args)
            seen.append((tuple(res.shape), res.stride()))
        return res

    make_fx(fn, tracing_mode="symbolic")(torch.randn(6, 3, 4), torch.randn(4, 5), torch.randn(5),
                                         torch.randn(6, 5, 3).mT)
    (shape, strides), (shape_t, strides_t), (row, _) = seen
    assert all(isinstance(n, torch.SymInt) for n in shape + strides[:2] + row) and shape_t == shape
    assert [str(n) for n in strides] == [f"{shape[2]}*{shape[1]}", str(shape[2]), "1"] or \
        [str(n) for n in strides] == [f"{shape[1]}*{shape[2]}", str(shape[2]), "1"]
    assert strides_t[1] == 1 and str(strides_t[2]) == str(shape[1])  # c's column-major layout, symbolically


# --------------------------------------------------------------------------- registration


def test_importing_again_keeps_the_operators():
    ops = [torch.ops.tilegemm.matmul.default, torch.ops.tilegemm.gemm.default]
    for _ in range(2):
        importlib.reload(torch_ops)
        importlib.reload(tgt)
    assert [torch.ops.tilegemm.matmul.default, torch.ops.tilegemm.gemm.default] == ops
    assert torch.ops.tilegemm.matmul(meta(2, 3), meta(3, 4)).shape == (2, 4)
    script = ("import sys, torch, tilegemm.torch\n"
              "for name in ('tilegemm.torch', 'tilegemm.torch_ops'): del sys.modules[name]\n"
              "import tilegemm.torch\n"
              "print(torch.ops.tilegemm.gemm_out.default._schema)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "tilegemm::gemm_out(Tensor a, Tensor b, Tensor? c, float alpha, float beta, " \
                                 "Tensor(a!) out, str precision=\"fp32\") -> ()"


def test_the_schemas():
    assert str(torch.ops.tilegemm.matmul.default._schema) == (
        'tilegemm::matmul(Tensor a, Tensor b, str precision="fp32") -> Tensor')
    assert str(torch.ops.tilegemm.gemm.default._schema) == (
        'tilegemm::gemm(Tensor a, Tensor b, Tensor? c, float alpha, float beta, str precision="fp32") -> Tensor')
    for name in ("matmul", "gemm", "gemm_out"):
        schema = str(getattr(torch.ops.tilegemm, name).default._schema)
        assert schema.endswith('str precision="fp32") -> Tensor' if name != "gemm_out" else
                               'str precision="fp32") -> ()'), schema


def test_no_other_tilegemm_module_imports_the_torch_modules():
    from test_architecture import import_graph

    users = {m for m, deps in import_graph().items() if deps & {"tilegemm.torch", "tilegemm.torch_ops"}}
    assert users == {"tilegemm.torch"}


def test_import_tilegemm_loads_neither_torch_nor_this_module():
    script = "import sys, tilegemm; print('torch' in sys.modules, 'tilegemm.torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["False", "False"], out.stderr


# --------------------------------------------------------------------------- the public functions


def test_argument_errors_name_the_argument():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with pytest.raises(TypeError, match="^a must be a torch tensor, got ndarray; use tilegemm.matmul"):
        tgt.matmul(np.ones((3, 4), np.float32), b)
    with pytest.raises(TypeError, match="^alpha must be a real number or a torch tensor, got bool True$"):
        tgt.gemm(a, b, alpha=True)
    with pytest.raises(ValueError, match="^beta = inf is not a finite float32 number"):
        tgt.gemm(a, b, a, beta=float("inf"))
    with pytest.raises(TypeError, match="^c has dtype torch.float64"):  # not read with beta = 0, still checked
        tgt.gemm(meta(3, 4), meta(4, 5), meta(3, 5).double(), alpha=torch.tensor(2.0, device="meta"))
    for tiny in (1e-50, -2.0**-150):  # what rounds to 0 in float32, as tilegemm's own check
        with pytest.raises(ValueError, match=f"^alpha = {tiny!r} rounds to 0 in float32"):
            tgt.gemm(a, b, alpha=tiny)
        assert np.float32(tiny) == 0.0
    assert np.float32(2.0**-149) != 0.0 and tgt._scale(2.0**-149, "alpha") == 2.0**-149  # the smallest kept
    w = torch.randn(4, 5, requires_grad=True)
    with pytest.raises(ValueError, match="^b requires grad, but out= does not support autograd"):
        tgt.matmul(a, w, out=torch.empty(3, 5))
    with torch.no_grad():
        with pytest.raises(ValueError, match="^a is a torch tensor on the CPU"):  # tilegemm's own message
            tgt.matmul(a, w, out=torch.empty(3, 5))


def test_no_direct_call_where_the_operator_is_needed():
    a = torch.randn(3, 4)
    assert not torch_ops.direct(a)  # a CPU tensor
    assert not torch_ops.direct(meta(3, 4))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert not torch_ops.direct(torch.empty(3, 4))


# --------------------------------------------------------------------------- running, with cpu_tilegemm


def _opcheck_cases():
    r = torch.randn
    return [
        ("matmul", (r(5, 7), r(7, 3))), ("matmul", (r(2, 5, 7), r(7, 3).mT.contiguous().mT)),
        ("matmul", (r(7), r(2, 7, 3))), ("gemm", (r(5, 7), r(7, 3), r(3), 1.0, 1.0)),
        ("gemm", (r(2, 5, 7).mT.contiguous().mT, r(2, 7, 3), r(3, 5).mT, 0.5, 2.0)),
        ("gemm", (r(5, 7), r(7, 3), None, 2.0, 0.0)),
        ("gemm_out", (r(5, 7), r(7, 3), r(5, 3), 1.0, 1.0, torch.empty(5, 3))),
    ]


@pytest.mark.parametrize("i", range(7))
def test_opcheck(cpu_tilegemm, i):
    name, args = _opcheck_cases()[i]
    if name != "gemm_out":
        args = tuple(x.requires_grad_() if isinstance(x, torch.Tensor) else x for x in args)
    torch.library.opcheck(getattr(torch.ops.tilegemm, name).default, args)


GRAD_CASES = [  # (a shape, b shape, c shape or None): layouts are parametrized separately
    ((5, 7), (7, 3), None), ((4, 5, 7), (7, 3), None), ((5, 7), (4, 7, 3), None), ((2, 1, 5, 7), (3, 7, 3), None),
    ((7,), (7, 3), None), ((5, 7), (7,), None), ((7,), (4, 7, 3), None), ((7,), (7,), None),
    ((5, 7), (7, 3), (5, 3)), ((5, 7), (7, 3), (3,)), ((4, 5, 7), (7, 3), (3,)), ((4, 5, 7), (7, 3), (5, 1)),
    ((4, 5, 0), (0, 3), None), ((4, 0, 7), (7, 3), (3,)), ((0, 5, 7), (7, 3), None), ((5, 7), (7, 0), None),
]


def check_gradients(sa, sb, sc, layout, alpha, beta, device):
    """Values and gradients of tgt.gemm against torch's in float64 (errors below TOL of the terms'
    size: torch_checks.scaled), on fresh inputs."""
    def make(shape, lay):
        return view(shape, lay if len(shape) > 1 else "N", device=device).requires_grad_()

    a, b = make(sa, layout[0]), make(sb, layout[1])
    c = make(sc, layout[1]) if sc is not None else None
    assert_gemm_and_gradients(a, b, c, alpha, beta)


@pytest.mark.parametrize("sa,sb,sc", GRAD_CASES, ids=str)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_gradients(cpu_tilegemm, sa, sb, sc, layout):
    check_gradients(sa, sb, sc, layout, alpha=1.5, beta=0.5, device="cpu")


def test_gradcheck_and_double_backward(cpu_tilegemm):
    r = lambda *s: torch.randn(*s, dtype=torch.float64, requires_grad=True)  # noqa: E731
    for args in [(r(2, 3, 4), r(4, 5), r(5), 1.5, 0.5), (r(4), r(2, 4, 5).mT.mT, r(2, 1), 2.0, 1.0)]:
        fn = lambda a, b, c: torch.ops.tilegemm.gemm(a, b, c, args[3], args[4])  # noqa: E731
        assert torch.autograd.gradcheck(fn, args[:3])
        assert torch.autograd.gradgradcheck(fn, args[:3])


def test_an_operand_no_gradient_needs_is_not_kept(cpu_tilegemm):
    x = torch.randn(5, 7, requires_grad=True)
    a, b = x * 2.0, torch.randn(7, 3)  # b's gradient is not needed, so a is not saved for it
    alive = weakref.ref(a)
    res = tgt.gemm(a, b, torch.randn(3), alpha=1.0, beta=1.0)
    del a
    assert alive() is None
    res.sum().backward()
    assert torch.allclose(x.grad, 2.0 * b.sum(1).expand(5, 7), rtol=1e-5, atol=1e-5)


def test_the_sum_s_expanded_gradient_is_read(cpu_tilegemm):
    a, b = torch.randn(4, 5, 7, requires_grad=True), torch.randn(7, 3, requires_grad=True)
    tgt.matmul(a, b).sum().backward()  # the incoming gradient is a zero-strided view of one value
    assert torch.allclose(b.grad, a.detach().sum((0, 1))[:, None].expand(7, 3), rtol=1e-5, atol=1e-5)


def test_tensor_alpha_and_beta_get_gradients(cpu_tilegemm):
    a, b, c = torch.randn(5, 7), torch.randn(7, 3), torch.randn(3)
    alpha, beta = torch.tensor(1.5, requires_grad=True), torch.tensor(0.5, requires_grad=True)
    res = tgt.gemm(a, b, c, alpha=alpha, beta=beta)
    res.sum().backward()
    assert torch.allclose(res, 1.5 * a @ b + 0.5 * c, rtol=1e-5, atol=1e-5)
    assert torch.allclose(alpha.grad, (a @ b).sum()) and torch.allclose(beta.grad, c.sum() * 5)


def test_out_writes_out_and_returns_it(cpu_tilegemm):
    a, b, c = torch.randn(5, 7), torch.randn(7, 3), torch.randn(5, 3)
    out = torch.full((5, 3), float("nan"))
    assert tgt.gemm(a, b, c, alpha=2.0, beta=1.0, out=out) is out
    assert torch.allclose(out, 2 * a @ b + c, rtol=1e-5, atol=1e-5)
    assert tgt.matmul(a, b, out=out) is out and torch.allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def mlp(layer, sizes=(16, 32, 8), seed=0, bias=True):
    torch.manual_seed(seed)
    return torch.nn.Sequential(layer(sizes[0], sizes[1], bias=bias), torch.nn.ReLU(),
                               layer(sizes[1], sizes[2], bias=bias))


@pytest.mark.parametrize("bias", [True, False])
def test_compiled_fullgraph_mlp_matches_eager_with_dynamic_batches(cpu_tilegemm, bias):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    model, ref = mlp(tgt.Linear, bias=bias), mlp(torch.nn.Linear, bias=bias)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    for batch in (5, 9):
        x = torch.randn(batch, 3, 16)
        res = compiled(x)
        want = ref(x)
        assert torch.allclose(res, want, rtol=1e-5, atol=1e-5)
        res.square().sum().backward()
        want.square().sum().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    assert counter.frame_count == 1  # one graph for both batch sizes
    targets = {n.target for g in counter.graphs for n in g.graph.nodes}
    assert (torch.ops.tilegemm.gemm.default if bias else torch.ops.tilegemm.matmul.default) in targets
    torch._dynamo.reset()


def _capturing_backend():
    """A torch.compile backend that keeps the graphs it is given and runs them as they are."""
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def test_compiled_graph_holds_the_operators(cpu_tilegemm):
    graphs, backend = _capturing_backend()
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w, c: tgt.gemm(x, w.mT, c, alpha=2.0, beta=1.0), backend=backend, fullgraph=True)
    x, w, c = torch.randn(4, 6), torch.randn(5, 6), torch.randn(5)
    assert torch.allclose(fn(x, w, c), 2 * x @ w.T + c, rtol=1e-5, atol=1e-5)
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.ops.tilegemm.gemm.default in targets
    torch._dynamo.reset()


def test_out_under_compile(cpu_tilegemm):
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b, out: tgt.matmul(a, b, out=out), backend="aot_eager", fullgraph=True)
    a, b, out = torch.randn(4, 6), torch.randn(6, 5), torch.empty(4, 5)
    assert fn(a, b, out) is out and torch.allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


# --------------------------------------------------------------------------- Linear and replace_linear


def test_linear_is_nn_linear_with_the_same_init_and_state():
    ours, theirs = mlp(tgt.Linear), mlp(torch.nn.Linear)
    assert isinstance(ours[0], torch.nn.Linear)
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert repr(ours[0]) == "Linear(in_features=16, out_features=32, bias=True, precision='fp32')"


def test_linear_rejects_other_dtypes():
    with pytest.raises(TypeError, match=r"^dtype must be torch.float32 \(or None\), got torch.float64: "
                                        r"tilegemm.torch.Linear computes in float32 and never casts silently"):
        tgt.Linear(4, 3, dtype=torch.float64)
    layer = tgt.Linear(4, 3).double()
    with pytest.raises(TypeError, match="^weight has dtype torch.float64"):
        layer(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="^input has dtype torch.float16"):
        tgt.Linear(4, 3)(torch.randn(2, 4).half())


def test_linear_forward_and_backward(cpu_tilegemm):
    for bias in (True, False):
        ours, theirs = mlp(tgt.Linear, bias=bias), mlp(torch.nn.Linear, bias=bias)
        for x in (torch.randn(16), torch.randn(5, 16), torch.randn(2, 3, 16)):
            assert torch.allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-6)
        ours(x).sum().backward()
        theirs(x).sum().backward()
        for p, q in zip(ours.parameters(), theirs.parameters()):
            assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-5)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.inner = torch.nn.Sequential(torch.nn.Linear(8, 4, bias=False), torch.nn.GELU())
        self.keep = torch.nn.Linear(4, 4).double()
        self.attn = torch.nn.MultiheadAttention(8, 2)  # its out_proj is a subclass of nn.Linear


def test_replace_linear_swaps_in_place_and_shares_the_parameters():
    model = torch.nn.Sequential(Block(), torch.nn.Linear(8, 2))
    params = {name: p for name, p in model.named_parameters()}
    layers = [model[0].proj, model[0].inner[0], model[1]]
    assert tgt.replace_linear(model) is model
    assert all(type(m) is tgt.Linear for m in layers)
    assert [model[0].proj, model[0].inner[0], model[1]] == layers  # the same module objects
    assert all(p is params[name] for name, p in model.named_parameters())
    assert type(model[0].keep) is torch.nn.Linear and type(model[0].attn.out_proj) is not tgt.Linear
    assert type(tgt.replace_linear(torch.nn.Linear(2, 2))) is tgt.Linear
    with pytest.raises(TypeError, match="^module must be a torch.nn.Module"):
        tgt.replace_linear([torch.nn.Linear(2, 2)])


def test_replace_linear_keeps_the_outputs(cpu_tilegemm):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    x = torch.randn(4, 8)
    before = model(x)
    assert torch.allclose(tgt.replace_linear(model)(x), before, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- precision


PRECISIONS = ["fp32", "tf32x3", "tf32"]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("sa,sb,sc,lc", C_CASES[:6] + [((2, 3, 4), (4,), None, "N"), ((4,), (4,), None, "N")],
                         ids=str)
def test_the_fakes_accept_every_precision_and_give_the_same_layout(precision, sa, sb, sc, lc):
    a, b = meta(*sa), meta(*sb)
    c = None if sc is None else view(sc, lc) if len(sc) > 1 else meta(*sc)
    beta = 0.0 if c is None else 1.0
    for want, got in ((torch.ops.tilegemm.matmul(a, b), torch.ops.tilegemm.matmul(a, b, precision)),
                      (torch.ops.tilegemm.gemm(a, b, c, 2.0, beta),
                       torch.ops.tilegemm.gemm(a, b, c, 2.0, beta, precision=precision))):
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)
    out = torch.empty(torch.matmul(a, b).shape, device="meta")
    assert torch.ops.tilegemm.gemm_out(a, b, c, 2.0, beta, out, precision) is None


@pytest.mark.parametrize("call", [
    lambda p: torch.ops.tilegemm.matmul(meta(3, 4), meta(4, 5), p),
    lambda p: torch.ops.tilegemm.matmul(meta(2, 3), meta(4, 5), precision=p),  # precision is checked first
    lambda p: torch.ops.tilegemm.gemm(meta(3, 4), meta(4, 5), meta(5), 1.0, 1.0, p),
    lambda p: torch.ops.tilegemm.gemm_out(meta(3, 4), meta(4, 5), None, 1.0, 0.0, meta(3, 5), p),
    lambda p: tgt.matmul(meta(3, 4), meta(4, 5), precision=p),
    lambda p: tgt.gemm(meta(3, 4), meta(4, 5), meta(5), beta=1.0, precision=p),
    lambda p: tgt.matmul(meta(3, 4), meta(4, 5), out=meta(3, 5), precision=p),
], ids=["matmul", "matmul, bad K", "gemm", "gemm_out", "tgt.matmul", "tgt.gemm", "tgt.matmul out="])
def test_the_fakes_reject_a_bad_precision_as_tilegemm_does(call):
    with pytest.raises(ValueError, match="^precision must be one of 'fp32', 'tf32x3', 'tf32', got 'fp16'") as fake:
        call("fp16")
    with pytest.raises(ValueError) as real:  # tilegemm's planning, given the same call
        planned_result(torch.randn(2, 3), torch.randn(4, 5), precision="fp16")
    assert str(fake.value) == str(real.value)


def test_opcheck_with_each_precision(cpu_tilegemm):
    r = lambda *s: torch.randn(*s, requires_grad=True)  # noqa: E731
    for precision in PRECISIONS:
        torch.library.opcheck(torch.ops.tilegemm.matmul.default, (r(2, 5, 7), r(7, 3), precision))
        torch.library.opcheck(torch.ops.tilegemm.gemm.default, (r(5, 7), r(7, 3), r(3), 0.5, 2.0, precision))
        torch.library.opcheck(torch.ops.tilegemm.gemm_out.default,
                              (torch.randn(5, 7), torch.randn(7, 3), None, 1.0, 0.0, torch.empty(5, 3)),
                              {"precision": precision})


@pytest.mark.parametrize("precision", ["tf32x3", "tf32"])
def test_the_backward_computes_at_the_forward_s_precision(cpu_tilegemm, precision):
    a, b, c = torch.randn(4, 5, 7, requires_grad=True), torch.randn(7, 3, requires_grad=True), torch.randn(3)
    res = tgt.gemm(a, b, c.requires_grad_(), alpha=1.5, beta=0.5, precision=precision)
    res.square().sum().backward()
    tgt.matmul(torch.randn(7, requires_grad=True), b, precision=precision).sum().backward()
    assert cpu_tilegemm.precisions == [precision] * 6  # 2 forwards, 4 products of gradients
    r = lambda *s: torch.randn(*s, dtype=torch.float64, requires_grad=True)  # noqa: E731
    fn = lambda a, b, c: torch.ops.tilegemm.gemm(a, b, c, 1.5, 0.5, precision)  # noqa: E731
    args = (r(2, 3, 4), r(4, 5), r(5))
    assert torch.autograd.gradcheck(fn, args) and torch.autograd.gradgradcheck(fn, args)
    assert set(cpu_tilegemm.precisions) == {precision}


def test_the_direct_path_passes_precision_on(cpu_tilegemm, monkeypatch):
    monkeypatch.setattr(torch_ops, "direct", lambda *tensors, **kw: True)
    monkeypatch.setattr(torch_ops, "MATMUL", None)  # not called
    a, b, c = torch.randn(5, 7), torch.randn(7, 3), torch.randn(3)
    assert torch.allclose(tgt.matmul(a, b, precision="tf32"), a @ b, rtol=1e-5, atol=1e-5)
    tgt.gemm(a, b, c, alpha=2.0, beta=1.0, precision="tf32")
    tgt.matmul(a, b, out=torch.empty(5, 3), precision="tf32")
    tgt.gemm(a, b, c, beta=1.0, out=torch.empty(5, 3), precision="tf32")
    assert cpu_tilegemm.precisions == ["tf32"] * 4


def test_linear_keeps_its_precision():
    layer = tgt.Linear(16, 32, precision="tf32x3")
    assert layer.precision == "tf32x3" and "precision='tf32x3'" in layer.extra_repr()
    assert repr(layer) == "Linear(in_features=16, out_features=32, bias=True, precision='tf32x3')"
    assert tgt.Linear(4, 3).precision == "fp32"
    with pytest.raises(ValueError, match="^precision must be one of 'fp32', 'tf32x3', 'tf32', got 'bad'"):
        tgt.Linear(4, 3, precision="bad")


@pytest.mark.parametrize("bias", [True, False])
def test_linear_computes_at_its_precision(cpu_tilegemm, bias):
    ours = mlp(lambda *args, **kw: tgt.Linear(*args, **kw, precision="tf32"), bias=bias)
    x = torch.randn(5, 16)
    res = ours(x)
    assert torch.allclose(res, mlp(torch.nn.Linear, bias=bias)(x), rtol=1e-5, atol=1e-6)
    res.sum().backward()
    assert cpu_tilegemm.precisions == ["tf32"] * 5  # 2 forwards; 3 gradient products (x needs none)


def test_replace_linear_gives_the_layers_its_precision(cpu_tilegemm):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3, bias=False))
    with pytest.raises(ValueError, match="^precision must be one of"):
        tgt.replace_linear(model, precision="fp16")
    assert type(model[0]) is torch.nn.Linear  # nothing changed
    assert tgt.replace_linear(model, precision="tf32x3") is model
    assert model[0].precision == model[2].precision == "tf32x3" and "precision='tf32x3'" in repr(model)
    model(torch.randn(4, 8)).sum().backward()
    assert cpu_tilegemm.precisions == ["tf32x3"] * 5  # 2 forwards; 3 gradient products (x needs none)
    assert tgt.replace_linear(torch.nn.Linear(2, 2)).precision == "fp32"


def test_compiled_linear_keeps_its_precision(cpu_tilegemm):
    graphs, backend = _capturing_backend()
    torch._dynamo.reset()
    layer = tgt.Linear(6, 5, precision="tf32x3")
    fn = torch.compile(layer, backend=backend, fullgraph=True)
    x = torch.randn(4, 6)
    assert torch.allclose(fn(x), layer(x), rtol=1e-5, atol=1e-5)
    calls = [n for n in graphs[0].graph.nodes if n.target is torch.ops.tilegemm.gemm.default]
    assert len(calls) == 1 and "tf32x3" in list(calls[0].args) + list(calls[0].kwargs.values())
    torch._dynamo.reset()


def test_a_remembered_out_call_goes_straight_to_it(monkeypatch):
    """tilegemm.torch.matmul(out=) hands a direct call to the memo first; a miss, or a call the
    operator must record (autograd), takes the full path with its checks."""
    from tilegemm import fastpath

    seen = []

    def remembered(a, b, out, kernel, config, pdl, precision="fp32"):
        seen.append((kernel, config, pdl, precision))
        return out

    monkeypatch.setattr(fastpath, "call", remembered)
    monkeypatch.setattr(torch_ops, "gemm_out", None)  # not reached on a hit
    a, b, out = torch.randn(5, 7), torch.randn(7, 3), torch.empty(5, 3)
    assert tgt.matmul(a, b, out=out, precision="tf32x3") is out
    assert seen == [(registry.FAMILY.name, None, True, "tf32x3")]
    with pytest.raises(ValueError, match="requires grad, but out= does not support autograd"):
        tgt.matmul(a.requires_grad_(), b, out=out)
    assert len(seen) == 1
