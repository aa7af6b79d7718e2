"""GPU: tilegemm.torch with the real kernels: opcheck on every operator, values and gradients
against float64 torch (layouts, batches, broadcasting, 1-D operands, c), double backward,
torch.compile(fullgraph=True) with static and dynamic shapes, training an MLP against nn.Linear,
replace_linear, out=, the direct eager path and torch's current stream."""

import pytest

torch = pytest.importorskip("torch")

import tilegemm.torch as tgt  # noqa: E402
from tilegemm import torch_ops  # noqa: E402
from torch_checks import TOL, assert_gemm_and_gradients, rel  # noqa: E402

pytestmark = pytest.mark.gpu



@pytest.fixture(scope="module")
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    return torch.device("cuda")


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def rand(shape, layout="N", grad=False):
    """A float32 CUDA tensor whose matrices are row-major ("N") or column-major ("T": a .mT view)."""
    if len(shape) < 2 or layout == "N":
        x = torch.randn(shape, device="cuda")
    else:
        x = torch.randn(shape[:-2] + (shape[-1], shape[-2]), device="cuda").mT
    return x.requires_grad_(grad)


# --------------------------------------------------------------------------- opcheck


def _opcheck_cases():
    return [
        ("matmul", (rand((65, 33), grad=True), rand((33, 17), grad=True))),
        ("matmul", (rand((3, 65, 33), "T", True), rand((33, 17), "T", True))),
        ("matmul", (rand((33,), grad=True), rand((2, 33, 17), grad=True))),
        ("gemm", (rand((65, 33), grad=True), rand((33, 17), grad=True), rand((17,), grad=True), 1.0, 1.0)),
        ("gemm", (rand((2, 65, 33), "T", True), rand((2, 33, 17), grad=True), rand((65, 17), "T", True), 0.5, 2.0)),
        ("gemm", (rand((65, 33)), rand((33, 17), "T"), None, 2.0, 0.0)),
        ("gemm_out", (rand((65, 33)), rand((33, 17)), rand((65, 17)), 1.0, 1.0, torch.empty(65, 17, device="cuda"))),
        ("gemm_out", (rand((2, 65, 33), "T"), rand((33, 17)), None, 3.0, 0.0,
                      torch.empty(2, 17, 65, device="cuda").mT)),
    ]


@pytest.mark.parametrize("i", range(8))
def test_opcheck(cuda, i):
    name, args = _opcheck_cases()[i]
    torch.library.opcheck(getattr(torch.ops.tilegemm, name).default, args)


# --------------------------------------------------------------------------- values and gradients


GRAD_CASES = [  # (a shape, b shape, c shape or None)
    ((65, 33), (33, 17), None), ((4, 65, 33), (33, 17), None), ((65, 33), (4, 33, 17), None),
    ((2, 1, 65, 33), (3, 33, 17), None), ((3, 65, 33), (3, 33, 17), None),
    ((33,), (33, 17), None), ((65, 33), (33,), None), ((33,), (4, 33, 17), None), ((33,), (33,), None),
    ((65, 33), (33, 17), (65, 17)), ((65, 33), (33, 17), (17,)), ((4, 65, 33), (33, 17), (17,)),
    ((4, 65, 33), (33, 17), (65, 1)), ((4, 65, 33), (4, 33, 17), (4, 65, 17)),
    ((4, 65, 0), (0, 17), (17,)), ((0, 65, 33), (33, 17), None),
]


def check(sa, sb, sc, layout, alpha, beta):
    a, b = rand(sa, layout[0], True), rand(sb, layout[1], True)
    c = rand(sc, layout[1], True) if sc is not None else None
    assert_gemm_and_gradients(a, b, c, alpha, beta)


@pytest.mark.parametrize("sa,sb,sc", GRAD_CASES, ids=str)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_values_and_gradients_against_float64(cuda, sa, sb, sc, layout):
    check(sa, sb, sc, layout, alpha=1.5, beta=0.5)


def test_matmul_gradients(cuda):
    a, b = rand((4, 65, 33), "T", True), rand((33, 17), "T", True)
    tgt.matmul(a, b).sum().backward()  # the incoming gradient is an expanded (zero-strided) view
    da, db = a.detach().double(), b.detach().double()
    ones = torch.ones(4, 65, 17, device="cuda", dtype=torch.float64)
    assert rel(a.grad, ones @ db.mT) < TOL and rel(b.grad, (da.mT @ ones).sum(0)) < TOL


def test_double_backward(cuda):
    a, b, c = rand((3, 40, 30), "T", True), rand((30, 20), grad=True), rand((20,), grad=True)
    res = tgt.gemm(a, b, c, alpha=1.5, beta=0.5)
    ga, gb = torch.autograd.grad(res.square().sum(), (a, b), create_graph=True)
    (ga.square().sum() + gb.square().sum()).backward()
    d = [x.detach().double().requires_grad_() for x in (a, b, c)]
    ref = 1.5 * d[0] @ d[1] + 0.5 * d[2]
    ra, rb = torch.autograd.grad(ref.square().sum(), d[:2], create_graph=True)
    (ra.square().sum() + rb.square().sum()).backward()
    for x, r in zip((a, b, c), d):
        assert rel(x.grad, r.grad) < TOL


def test_tensor_alpha_and_beta_get_gradients(cuda):
    a, b, c = rand((65, 33)), rand((33, 17), "T"), rand((17,))
    alpha = torch.tensor(1.5, device="cuda", requires_grad=True)
    beta = torch.tensor(0.5, device="cuda", requires_grad=True)
    res = tgt.gemm(a, b, c, alpha=alpha, beta=beta)
    res.sum().backward()
    ab = a.double() @ b.double()
    assert rel(res, 1.5 * ab + 0.5 * c.double()) < TOL
    # the scalars' gradients are sums of 1105 terms of either sign: their error is measured against
    # the sum of the terms' magnitudes (a sum near zero makes any relative error large)
    assert abs(float(alpha.grad) - float(ab.sum())) / float(ab.abs().sum()) < TOL
    assert abs(float(beta.grad) - 65 * float(c.double().sum())) / (65 * float(c.double().abs().sum())) < TOL


@pytest.mark.parametrize("precision,tol", [("tf32x3", 1e-5), ("tf32", 5e-3)])
def test_tensor_core_precisions_forward_and_backward(cuda, precision, tol):
    """tgt.matmul and Linear at precision=: values and gradients against float64 (the backward's
    products at the forward's precision: tf32's error shows in the gradients too)."""
    a, b = rand((3, 65, 33), "T", True), rand((33, 17), grad=True)
    res = tgt.matmul(a, b, precision=precision)
    grad = torch.randn_like(res)
    ga, gb = torch.autograd.grad(res, (a, b), grad)
    da, db, dg = a.detach().double(), b.detach().double(), grad.double()
    errs = [rel(res, da @ db), rel(ga, dg @ db.mT), rel(gb, (da.mT @ dg).sum(0))]
    assert max(errs) < tol, errs
    if precision == "tf32":
        assert min(errs) > 1e-5, errs  # 10-bit mantissas, forward and backward
    with torch.no_grad():  # the direct path
        assert rel(tgt.matmul(a, b, precision=precision), da @ db) < tol
    model = mlp(lambda n_in, n_out, device: tgt.Linear(n_in, n_out, device=device, precision=precision))
    assert all(m.precision == precision for m in model if isinstance(m, tgt.Linear))
    x = torch.randn(48, 32, device="cuda")
    out = model(x)
    ref, ref_grads = float64_reference(model, x)
    assert rel(out, ref) < tol
    out.square().sum().backward()
    for p, g in zip(model.parameters(), ref_grads):
        assert rel(p.grad, g) < tol


# --------------------------------------------------------------------------- paths, out=, streams


def test_the_direct_path_and_the_operator_agree_bit_for_bit(cuda):
    a, b, c = rand((3, 65, 33), "T"), rand((33, 17)), rand((65, 17), "T")
    for direct, op in ((tgt.matmul(a, b), torch.ops.tilegemm.matmul(a, b)),
                       (tgt.gemm(a, b, c, alpha=2.0, beta=0.5), torch.ops.tilegemm.gemm(a, b, c, 2.0, 0.5))):
        assert torch.equal(direct, op) and direct.stride() == op.stride()
    with_grad = tgt.gemm(a.requires_grad_(), b, c, alpha=2.0, beta=0.5)
    assert with_grad.grad_fn is not None and torch.equal(with_grad.detach(), op)


def test_eager_calls_without_autograd_skip_the_dispatcher(cuda, monkeypatch):
    def refuse(*args):
        raise AssertionError("the operator was called")

    for name in ("MATMUL", "GEMM", "GEMM_OUT"):
        monkeypatch.setattr(torch_ops, name, refuse)
    layer = tgt.Linear(33, 17, device="cuda")
    x = rand((5, 33))
    with torch.no_grad():
        assert rel(layer(x), x.double() @ layer.weight.double().mT + layer.bias.double()) < TOL
        tgt.matmul(x, layer.weight.mT, out=torch.empty(5, 17, device="cuda"))
    with pytest.raises(AssertionError, match="the operator was called"):
        layer(x)  # autograd to record: the operator


def test_out_writes_out_and_returns_it(cuda):
    a, b, c = rand((2, 65, 33)), rand((33, 17), "T"), rand((2, 65, 17))
    out = torch.full((2, 65, 17), float("nan"), device="cuda")
    assert tgt.gemm(a, b, c, alpha=2.0, beta=1.0, out=out) is out
    assert rel(out, 2 * a.double() @ b.double() + c.double()) < TOL
    out_t = torch.full((2, 17, 65), float("nan"), device="cuda").mT
    assert tgt.matmul(a, b, out=out_t) is out_t and rel(out_t, a.double() @ b.double()) < TOL
    with pytest.raises(ValueError, match="^a requires grad, but out= does not support autograd"):
        tgt.matmul(a.requires_grad_(), b, out=out)


@pytest.mark.parametrize("grad", [False, True])
def test_calls_run_on_torch_s_current_stream(cuda, grad):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            a = torch.randn(300, 2000, device="cuda").requires_grad_(grad)
            b = torch.randn(2000, 500, device="cuda") * 2.0  # queued on s, unfinished when matmul is called
            res = tgt.matmul(a, b) * 1.0
            ref = a.detach().double() @ b.double()
            assert rel(res, ref) < TOL


# --------------------------------------------------------------------------- modules and torch.compile


def mlp(layer, sizes=(32, 64, 64, 8), seed=0):
    torch.manual_seed(seed)
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        layers += [layer(n_in, n_out, device="cuda")] + ([torch.nn.Tanh()] if i < len(sizes) - 2 else [])
    return torch.nn.Sequential(*layers)


def float64_reference(model, x):
    """The model's output and parameter gradients (of output.square().sum()) in float64."""
    ref = mlp(torch.nn.Linear)
    ref.load_state_dict(model.state_dict())
    ref = ref.double()
    out = ref(x.double())
    out.square().sum().backward()
    return out, [p.grad for p in ref.parameters()]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_mlp_matches_eager_and_float64(cuda, fresh_dynamo, backend):
    model = mlp(tgt.Linear)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    x = torch.randn(48, 32, device="cuda")
    eager = model(x)
    out = compiled(x)
    ref, ref_grads = float64_reference(model, x)
    assert rel(out, ref) < TOL and rel(eager, ref) < TOL
    out.square().sum().backward()
    for p, g in zip(model.parameters(), ref_grads):
        assert rel(p.grad, g) < TOL


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_mlp_with_dynamic_batches(cuda, fresh_dynamo, backend):
    from torch._dynamo.testing import CompileCounterWithBackend

    model = mlp(tgt.Linear)
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    for batch in (37, 91):
        x = torch.randn(batch, 5, 32, device="cuda")
        out = compiled(x)
        ref, ref_grads = float64_reference(model, x)
        assert out.shape == (batch, 5, 8) and rel(out, ref) < TOL
        out.square().sum().backward()
        for p, g in zip(model.parameters(), ref_grads):
            assert rel(p.grad, g) < TOL
            p.grad = None
    assert counter.frame_count == 1


def test_training_matches_nn_linear(cuda):
    """200 SGD steps on the same data from the same init: the loss curves agree within float32 noise."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(256, 32, device="cuda", generator=gen)
    y = torch.tanh(x @ torch.randn(32, 8, device="cuda", generator=gen))
    curves = []
    for layer in (tgt.Linear, torch.nn.Linear):
        model = mlp(layer)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for _ in range(200):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(torch.tensor(losses, dtype=torch.float64))
    ours, theirs = curves
    assert theirs[-1] < 0.5 * theirs[0]  # it learns
    assert float(((ours - theirs).abs() / theirs).max()) < 1e-3


def test_replace_linear_keeps_the_outputs(cuda):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8, bias=False)).cuda()
    x = torch.randn(4, 7, 32, device="cuda")
    with torch.no_grad():
        before = model(x)
        ref = model.double()(x.double())
        model.float()
    weights = list(model.parameters())
    assert tgt.replace_linear(model) is model and all(type(model[i]) is tgt.Linear for i in (0, 2))
    assert all(p is q for p, q in zip(model.parameters(), weights, strict=True))
    after = model(x)
    assert rel(after, ref) < TOL and rel(after, before) < 2 * TOL
