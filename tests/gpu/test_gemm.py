"""GPU: the production family through matmul/gemm, against float64, property-based (hypothesis).

Every case draws fresh random inputs, poisons the output with NaN, and checks the inputs are
unchanged afterwards.  Shapes, layouts, padded leading dimensions, unaligned (offset) views, batch
dimensions with broadcasting, 1-D operands, alpha/beta, K = 0 and split-K configs are all drawn.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilegemm
from tilegemm import access, autotune, builds, fastpath, gpu, launch, registry, selection

pytestmark = pytest.mark.gpu

TOL = 1e-5
N_CASES = 640

# configs the property test also forces (config=...), besides the default selection
CONFIGS = [
    None, None, None,
    {**selection.BIG, "splits": 3},
    {**selection.SMALL, "splits": 1},
    {**selection.MEDIUM, "splits": 2},
    {"bm": 128, "bn": 256, "bk": 8, "tm": 8, "tn": 16, "ln": 4, "minb": 1, "swizzle": 8, "stages": 0, "splits": 1},
    {"bm": 32, "bn": 64, "bk": 16, "tm": 4, "tn": 8, "ln": 8, "minb": 0, "swizzle": 0, "splits": 4},
    # cp.async pipelines (stages >= 2): partial first tile, clamped edges, predicated copies
    {**selection.HUGE, "splits": 2},
    {"bm": 256, "bn": 128, "bk": 8, "tm": 8, "tn": 16, "ln": 4, "minb": 1, "swizzle": 8, "stages": 3, "splits": 1},
    {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4, "ln": 8, "minb": 4, "swizzle": 0, "stages": 2, "splits": 1},
    {"bm": 32, "bn": 64, "bk": 8, "tm": 4, "tn": 8, "ln": 8, "minb": 0, "swizzle": 4, "stages": 4, "splits": 3},
    # stream-K: blocks share tiles' k-iterations, partial sums handed over through the workspace
    {**selection.BIG, "splits": 1, "sk": 1},
    {**autotune.SK_SMALL, "splits": 1, "sk": 1},
    {**selection.SMALL, "splits": 1, "sk": 1},
    # split-K summed in the kernel: the splits of a tile wait for one another, then share the sum
    {**selection.BIG, "splits": 3, "sk": 2},
    {**selection.MEDIUM, "splits": 2, "sk": 2},
    # k slices a block (gemm.cu KS): four slices of 16 k rows' quarters, two of a 64 x 128 tile
    {"bm": 64, "bn": 64, "bk": 16, "tm": 8, "tn": 8, "ln": 8, "minb": 0, "swizzle": 8, "stages": 3, "ks": 4, "splits": 1},
    {"bm": 64, "bn": 128, "bk": 16, "tm": 8, "tn": 8, "ln": 8, "minb": 0, "swizzle": 8, "stages": 3, "ks": 2, "splits": 5},
    # a split count that is no power of two, summed in the kernel (builds.filling_splits)
    {**builds.TILES["64x64f"], "splits": 11, "sk": 2},
]
# every class of config the cost model can choose: each tile one block per tile, split over K with
# the reduction, summed in the kernel, and stream-K
CONFIGS += [{**cfg, "splits": 1} for cfg in builds.TILES.values()]
CONFIGS += [{**builds.TILES[t], "splits": 3} for t in builds.SPLIT_TILES]
CONFIGS += [{**builds.TILES[t], "splits": 3, "sk": 2} for t in builds.SUMMED_TILES]
CONFIGS += [{**builds.TILES[t], "splits": 1, "sk": 1} for t in builds.STREAM_K_TILES]


def _matrix(cp, rng, rows, cols, trans, pad, offset, lead=()):
    """lead + (rows, cols) float32 view: transposed storage, a padded ld, and an element offset
    (offset 1 makes the view start 4 bytes into its buffer: not 16-byte aligned; 2: 8-byte aligned only)."""
    inner = (cols, rows + pad) if trans else (rows, cols + pad)
    n = int(np.prod(lead + inner)) + offset
    flat = cp.asarray(rng.standard_normal(n, dtype=np.float32))
    base = flat[offset:].reshape(lead + inner)
    view = base[..., :rows] if trans else base[..., :cols]
    return view.swapaxes(-1, -2) if trans else view


@st.composite
def cases(draw):
    small = st.integers(1, 70)
    size = st.one_of(small, small, st.integers(1, 300), st.sampled_from([128, 129, 255, 256, 513]))
    M, N = draw(size), draw(size)
    K = draw(st.one_of(st.just(0), size, size, size, st.integers(300, 3000)))
    a_vec = draw(st.booleans()) and draw(st.booleans())  # ~25%: 1-D a
    b_vec = draw(st.booleans()) and draw(st.booleans())
    batch_a = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
    batch_b = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
    # make the batches broadcastable: where both have a dimension, one is 1 or they match
    ra, rb = list(batch_a[::-1]), list(batch_b[::-1])
    for i in range(min(len(ra), len(rb))):
        if ra[i] != rb[i] and 1 not in (ra[i], rb[i]):
            rb[i] = ra[i]
    batch_a, batch_b = tuple(ra[::-1]), tuple(rb[::-1])
    if a_vec:
        batch_a = ()
    if b_vec:
        batch_b = ()
    return dict(
        M=M, N=N, K=K, a_vec=a_vec, b_vec=b_vec, batch_a=batch_a, batch_b=batch_b,
        ta=draw(st.booleans()), tb=draw(st.booleans()),
        pad_a=draw(st.sampled_from([0, 0, 1, 3])), pad_b=draw(st.sampled_from([0, 0, 2])),
        off_a=draw(st.sampled_from([0, 0, 0, 1, 2])), off_b=draw(st.sampled_from([0, 0, 0, 1, 2])),
        alpha=draw(st.sampled_from([1.0, 1.0, -0.5, 2.0])),
        beta=draw(st.sampled_from([0.0, 0.0, 1.0, 0.25])),
        c_kind=draw(st.sampled_from(["full", "full", "row", "col", "out"])),
        out_given=draw(st.booleans()),
        config=draw(st.sampled_from(range(len(CONFIGS)))),
    )


@settings(max_examples=N_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_property_against_float64(cp, case):
    check_case(cp, case, CONFIGS[case["config"]])


@settings(max_examples=160, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_property_with_every_misaligned_operand_copied(cp, case, monkeypatch):
    """As above, with the copy of misaligned operands into aligned rows made to pay for any shape
    (access.COPY_MACS_PER_ELEMENT = 1), so small shapes, edges and every config class take it."""
    monkeypatch.setattr(access, "COPY_MACS_PER_ELEMENT", 1)
    tilegemm.clear_caches()
    try:
        check_case(cp, case, CONFIGS[case["config"]])
    finally:
        tilegemm.clear_caches()  # no program built under this rule outlives the test


@pytest.mark.parametrize("cfg", [None, {**selection.BIG, "splits": 1}, {**selection.BIG, "splits": 3},
                                 {**selection.BIG, "splits": 1, "sk": 1}, {**selection.BIG, "splits": 3, "sk": 2},
                                 {**builds.TILES["64x64f"], "splits": 1}, {**selection.SMALL, "splits": 1}])
@pytest.mark.parametrize("layout", ["NN", "TN"])
@pytest.mark.parametrize("sizes", [(2100, 301), (700, 1001)])
def test_misaligned_operands_copied_where_it_pays(cp, cfg, layout, sizes):
    """Shapes where the copy pays at the shipped thresholds: B of 301 columns under 2100 rows of A (NN),
    A of 301 rows as a transposed view beside 2100 columns of B (TN); and rows read 4 bytes at a time
    from 512 multiply-adds per element (1001 columns of B under 700 rows, and the transpose); alpha,
    beta and repeats."""
    M, N = sizes if layout == "NN" else sizes[::-1]
    K = 700
    assert any(access.family_copies(layout, True, (1, 1), M, N, K, 1))
    if sizes == (700, 1001):  # copied only by the rule for 4-byte rows
        assert not any(access.family_copies(layout, True, (1, 1), M, N, K, 1, odd=False))
    rng = np.random.default_rng()
    a = _matrix(cp, rng, M, K, layout[0] == "T", 0, 0)
    b = _matrix(cp, rng, K, N, False, 0, 0)
    _calls_with_one_step(cp, rng, a, b, cfg, launch.PACK)


@pytest.mark.parametrize("cfg", [None, {**selection.BIG, "splits": 1}, {**selection.BIG, "splits": 3},
                                 {**selection.BIG, "splits": 1, "sk": 1}, {**selection.BIG, "splits": 3, "sk": 2},
                                 {**builds.TILES["64x64f"], "splits": 1}])
@pytest.mark.parametrize("n, pad, off", [(301, 0, 0), (300, 3, 1), (2, 0, 2)])  # (one column of B is NN as well)
@pytest.mark.parametrize("layout", ["NT", "TT"])
def test_nt_and_tt_run_on_b_transposed_where_it_pays(cp, cfg, n, pad, off, layout, monkeypatch, request):
    """NT and TT products from 2048 rows of A: B (a transposed view, padded rows, a view some floats in)
    is transposed into aligned rows and the kernel runs NN or TN (access.family_transposes, made to pay
    from any product's size, access.TRANSPOSE_MIN_MACS = 1, so that narrow B takes it; A of TT has rows
    of odd length, read 4 bytes at a time); alpha, beta, repeats, and a result stored column-major (the
    problem turned around: NT stays NT, TT becomes NN)."""
    monkeypatch.setattr(access, "TRANSPOSE_MIN_MACS", 1)
    request.addfinalizer(tilegemm.clear_caches)  # no program built under this rule outlives the test
    M, K = 2048 + 37, 517
    assert access.family_transposes(layout, True, M, n, K, 1)
    rng = np.random.default_rng()
    a = _matrix(cp, rng, M, K, layout == "TT", 0, 0)
    b = _matrix(cp, rng, K, n, True, pad, off)
    ref = _calls_with_one_step(cp, rng, a, b, cfg, launch.PACK_T)
    outf = cp.asfortranarray(cp.full((M, n), np.nan, dtype=np.float32))
    tilegemm.matmul(a, b, out=outf, config=cfg)
    assert np.linalg.norm(cp.asnumpy(outf) - ref) / np.linalg.norm(ref) < TOL


@pytest.mark.parametrize("cfg", [None, {**selection.BIG, "splits": 1}, {**selection.BIG, "splits": 3},
                                 {**selection.BIG, "splits": 1, "sk": 1}, {**selection.BIG, "splits": 3, "sk": 2},
                                 {**builds.TILES["64x64f"], "splits": 1}])
@pytest.mark.parametrize("m, pad, off", [(301, 0, 0), (300, 3, 1), (2, 0, 2)])
def test_nn_runs_on_a_transposed_where_it_pays(cp, cfg, m, pad, off, monkeypatch, request):
    """NN products from 2048 columns of B: A (padded rows, a view some floats in) is transposed into aligned rows and
    the kernel runs TN (access.family_transposes_a, made to pay from any product's size so that short A takes it, on
    this GPU whatever it is); alpha, beta, repeats, and a result stored column-major (the problem turned around: TT,
    which runs as TN)."""
    name = gpu.device_properties().name
    monkeypatch.setattr(access, "TRANSPOSE_MIN_MACS", 1)
    monkeypatch.setattr(access, "A_TRANSPOSE_GPUS", (name,))
    request.addfinalizer(tilegemm.clear_caches)
    N, K = 2048 + 37, 517
    assert access.family_transposes_a("NN", True, m, N, K, 1, name)
    rng = np.random.default_rng()
    a = _matrix(cp, rng, m, K, False, pad, off)
    b = _matrix(cp, rng, K, N, False, 0, 0)
    ref = _calls_with_one_step(cp, rng, a, b, cfg, launch.PACK_T)
    outf = cp.asfortranarray(cp.full((m, N), np.nan, dtype=np.float32))
    tilegemm.matmul(a, b, out=outf, config=cfg)
    assert np.linalg.norm(cp.asnumpy(outf) - ref) / np.linalg.norm(ref) < TOL


def _calls_with_one_step(cp, rng, a, b, cfg, kind):
    """a @ b with ``cfg`` twice into a poisoned result (the second call through the memo), checked
    against float64; the program both calls ran holds one ``kind`` step (launch.PACK: a copy into
    aligned rows, launch.PACK_T: a transposed copy) where the config copies by cp.async, none
    otherwise; then gemm with alpha and beta.  Returns the float64 product."""
    M, N = a.shape[0], b.shape[1]
    c = cp.asarray(rng.standard_normal((M, N), dtype=np.float32))
    ref = np.matmul(cp.asnumpy(a).astype(np.float64), cp.asnumpy(b).astype(np.float64))
    tilegemm.clear_caches()
    for _ in range(2):
        out = cp.full((M, N), np.nan, dtype=np.float32)
        tilegemm.matmul(a, b, out=out, config=cfg)
        assert np.linalg.norm(cp.asnumpy(out) - ref) / np.linalg.norm(ref) < TOL
    (entry,) = fastpath.entries()
    steps = sum(len(step.args) == len(kind.fields) for step in entry.program.steps)
    assert steps == (1 if registry.FAMILY.params(entry.program.config)["stages"] >= 2 else 0), entry.program.config
    g = tilegemm.gemm(a, b, c, alpha=-0.5, beta=2.0, config=cfg)
    gref = -0.5 * ref + 2.0 * cp.asnumpy(c).astype(np.float64)
    assert np.linalg.norm(cp.asnumpy(g) - gref) / np.linalg.norm(gref) < TOL
    return ref


def check_case(cp, case, config, precision="fp32", tol=TOL):
    """One drawn case through tilegemm.gemm at ``precision`` with ``config`` (None: selected)."""
    rng = np.random.default_rng()
    M, N, K = case["M"], case["N"], case["K"]
    if case["a_vec"]:
        a = _matrix(cp, rng, 1, K, False, 0, case["off_a"])[0]
    else:
        a = _matrix(cp, rng, M, K, case["ta"], case["pad_a"], case["off_a"], case["batch_a"])
    if case["b_vec"]:
        b = _matrix(cp, rng, K, 1, True, 0, case["off_b"])[..., 0]
    else:
        b = _matrix(cp, rng, K, N, case["tb"], case["pad_b"], case["off_b"], case["batch_b"])
    ref_shape = np.matmul(np.empty(a.shape, np.float32), np.empty(b.shape, np.float32)).shape
    alpha, beta = case["alpha"], case["beta"]
    c = None
    if beta != 0.0:
        if case["c_kind"] == "row" and not case["b_vec"]:
            c = cp.asarray(rng.standard_normal(ref_shape[-1:], dtype=np.float32))  # a bias row
        elif case["c_kind"] == "col" and len(ref_shape) >= 2:  # column-major matrices
            c = cp.asarray(rng.standard_normal(ref_shape[:-2] + ref_shape[-2:][::-1], dtype=np.float32))
            c = c.swapaxes(-1, -2)
        else:
            c = cp.asarray(rng.standard_normal(ref_shape, dtype=np.float32))
    inputs = [x.copy() for x in (a, b) + ((c,) if c is not None else ())]
    a64, b64 = cp.asnumpy(a).astype(np.float64), cp.asnumpy(b).astype(np.float64)
    ref = alpha * np.matmul(a64, b64)
    yard = abs(alpha) * np.matmul(np.abs(a64), np.abs(b64))
    if c is not None:
        ref = ref + beta * cp.asnumpy(c).astype(np.float64)
        yard = yard + abs(beta) * np.abs(cp.asnumpy(c).astype(np.float64))
    if case["c_kind"] == "out" and c is not None and c.shape == ref_shape:
        out = c  # in place: out = alpha a @ b + beta out
        res = tilegemm.gemm(a, b, c, alpha=alpha, beta=beta, out=out, config=config, precision=precision)
        assert res is out
        inputs = inputs[:2]
    elif case["out_given"]:
        if c is not None and case["c_kind"] == "col" and len(ref_shape) >= 2:  # out in c's layout
            out = cp.full(ref_shape[:-2] + ref_shape[-2:][::-1], np.nan, dtype=np.float32).swapaxes(-1, -2)
        else:
            out = cp.full(ref_shape, np.nan, dtype=np.float32)
        res = tilegemm.gemm(a, b, c, alpha=alpha, beta=beta, out=out, config=config, precision=precision)
        assert res is out
    else:
        res = tilegemm.gemm(a, b, c, alpha=alpha, beta=beta, config=config, precision=precision)
    assert res.shape == ref_shape, (res.shape, ref_shape)
    got = cp.asnumpy(res).astype(np.float64)
    den = max(np.linalg.norm(ref), 0.1 * np.linalg.norm(yard))  # see conftest.scale
    err = np.linalg.norm(got - ref) / (den if den else 1.0)
    assert err < tol, (case, precision, err)
    for x, x0 in zip((a, b, c), inputs):
        assert cp.array_equal(x, x0), "an input was modified"


def test_k_zero_gives_beta_c_or_zeros(cp):
    a, b = cp.ones((5, 0), np.float32), cp.ones((0, 7), np.float32)
    assert cp.array_equal(tilegemm.matmul(a, b), cp.zeros((5, 7), np.float32))
    c = cp.full((5, 7), 3.0, np.float32)
    assert cp.allclose(tilegemm.gemm(a, b, c, beta=0.5), 1.5)


def test_beta_zero_does_not_read_c(cp):
    a, b = cp.ones((64, 32), np.float32), cp.ones((32, 64), np.float32)
    c = cp.full((64, 64), np.nan, np.float32)
    out = tilegemm.gemm(a, b, c, beta=0.0)
    assert cp.all(out == 32.0)


@pytest.mark.parametrize("shape", [(1024, 1024, 16384), (16, 4096, 4096), (128, 4096, 4096), (4095, 4095, 4095)])
def test_default_selection_on_anchor_shapes(cp, shape):
    M, N, K = shape
    rng = cp.random.default_rng()
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    out = tilegemm.matmul(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref)) < TOL


def test_batched_torch_and_numpy(cp):
    torch = pytest.importorskip("torch")
    a = torch.randn(4, 33, 17, device="cuda")
    b = torch.randn(17, 65, device="cuda")
    out = tilegemm.matmul(a, b)
    assert isinstance(out, torch.Tensor) and out.shape == (4, 33, 65)
    ref = a.double() @ b.double()
    assert float((out.double() - ref).norm() / ref.norm()) < TOL
    an, bn = np.random.rand(3, 9, 5).astype(np.float32), np.random.rand(3, 5, 2).astype(np.float32)
    res = tilegemm.matmul(an, bn)
    assert isinstance(res, np.ndarray)
    assert np.allclose(res, an.astype(np.float64) @ bn, rtol=1e-5, atol=1e-5)


def test_large_batch_beyond_grid_z(cp):
    rng = cp.random.default_rng()
    a = rng.standard_normal((70000, 2, 3), dtype=np.float32)
    b = rng.standard_normal((70000, 3, 2), dtype=np.float32)
    out = tilegemm.matmul(a, b)
    ref = cp.matmul(a.astype(np.float64), b.astype(np.float64))
    assert float(cp.abs(out - ref).max()) < 1e-4


def test_shipped_table_loads_and_is_used(cp):
    from tilegemm import gpu

    sel = selection.selector(gpu.current_device())
    user, shipped = sel.tables()
    if not sel.table_path.exists():
        pytest.skip(f"no shipped table for {sel.props.name}")
    assert shipped, f"{sel.table_path} is empty or unreadable"
    key = next(iter(shipped))
    layout = key.split(":")[0]
    m, n, k, cnt = shipped[key]["shape"]
    if user:
        pytest.skip("a user tuning cache overrides the shipped table here")
    cfg, src = sel.source(layout, m, n, k, cnt)
    assert src == "shipped" and cfg == shipped[key]["config"]


def test_tuner_picks_a_checked_config(cp, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(tmp_path))
    selection.reset()
    try:
        res = autotune.tune_shape(0, "NN", 300, 200, 100, 1, matmul=tilegemm.matmul, top=4)
        assert res["rel_err"] < TOL and res["tflops"] > 0
        assert len(list(tmp_path.glob("*.json"))) == 1
        sel = selection.selector(0)
        cfg, src = sel.source("NN", 300, 200, 100, 1)
        assert src == "tuned" and cfg == res["config"]
    finally:
        selection.reset()


def test_every_family_config_of_the_tuner_grid_compiles_and_is_correct_somewhere(cp):
    """A sample of the enumerated configs: each runs an edge-heavy shape correctly."""
    lim = registry.Limits.for_arch("sm_90")
    cfgs = autotune.enumerate_configs(lim)[::40]
    rng = cp.random.default_rng()
    a = rng.standard_normal((133, 71), dtype=np.float32)
    b = rng.standard_normal((71, 261), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for cfg in cfgs:
        out = cp.full((133, 261), np.nan, np.float32)
        tilegemm.matmul(a, b, out=out, config=cfg)
        err = float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref))
        assert err < TOL, (cfg, err)


def test_repeat_calls_reuse_the_plan_and_stay_correct(cp):

    rng = cp.random.default_rng()
    for _ in range(3):  # same metadata, new arrays: the memoised path
        a = rng.standard_normal((70, 50), dtype=np.float32)
        b = rng.standard_normal((50, 90), dtype=np.float32)
        out = cp.full((70, 90), np.nan, np.float32)
        assert tilegemm.matmul(a, b, out=out) is out
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref)) < TOL
        res = tilegemm.matmul(a, b)
        assert float(cp.linalg.norm(res - ref) / cp.linalg.norm(ref)) < TOL
    assert fastpath.size()
    buf = rng.standard_normal((70, 90), dtype=np.float32)
    with pytest.raises(ValueError, match="out overlaps a in memory"):  # the overlap test still runs
        tilegemm.matmul(buf[:, :50], b, out=buf)


def test_repeat_calls_with_a_config_use_their_own_memo_entry(cp):
    """The tuner times explicit configs through the memo: each config is its own entry, and a
    config that breaks a constraint still raises on every call."""
    from tilegemm.errors import ConfigError

    rng = cp.random.default_rng()
    cfgs = [dict(selection.HUGE), dict(selection.SMALL), {"stages": 2}]
    for _ in range(2):
        a = rng.standard_normal((300, 70), dtype=np.float32)
        b = rng.standard_normal((70, 130), dtype=np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        for cfg in cfgs:
            out = cp.full((300, 130), np.nan, np.float32)
            assert tilegemm.matmul(a, b, out=out, config=cfg) is out
            assert float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref)) < TOL, cfg
    ran = [e.program.config for e in fastpath.entries() if e.program is not None and e.shape == (300, 130)]
    # each entry launches its own config (not the tuned one)
    for c in cfgs[:2]:
        assert c in ran
    for _ in range(2):
        with pytest.raises(ConfigError):
            tilegemm.matmul(a, b, config={"stages": 9})


@pytest.mark.parametrize("cfg", [{**selection.BIG, "splits": 4}, {**selection.BIG, "sk": 1},
                                 {**selection.BIG, "sk": 2, "splits": 3}])
@pytest.mark.parametrize("shape", [(96, 260, 3000), (200, 130, 517), (33, 4, 4096)])
def test_repeat_split_k_calls_take_the_direct_path(cp, shape, cfg):
    """Split-K, stream-K and sk = 2 through the memo's direct path (split-K: the GEMM into a
    workspace, then the reduction launched as a programmatic dependent on sm_90+).  Many calls
    queued back to back with fresh inputs and poisoned outputs, checked only afterwards: a kernel
    that did not wait for the one before it, or a workspace or flags handed to the next call too
    early, give a wrong or moving result."""

    M, N, K = shape
    rng = cp.random.default_rng()
    jobs = []
    for _ in range(12):
        a = rng.standard_normal((M, K), dtype=np.float32)
        b = rng.standard_normal((K, N), dtype=np.float32)
        out = cp.full((M, N), np.nan, np.float32)
        assert tilegemm.matmul(a, b, out=out, config=cfg) is out
        jobs.append((a, b, out, tilegemm.matmul(a, b, config=cfg)))
    for a, b, out, res in jobs:
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref)) < TOL
        assert bool(cp.array_equal(out, res))
    ran = [e.program.config for e in fastpath.entries() if e.program is not None and e.shape == (M, N)]
    assert cfg in ran


def test_results_with_and_without_pdl_agree(cp):

    rng = cp.random.default_rng()
    a = rng.standard_normal((128, 2048), dtype=np.float32)
    b = rng.standard_normal((2048, 512), dtype=np.float32)
    for cfg in ({**selection.BIG, "splits": 8}, selection.BIG, {**selection.BIG, "sk": 1}):
        outs = [tilegemm.matmul(a, b, config=cfg, pdl=pdl) for pdl in (True, False, True)]
        assert bool(cp.array_equal(outs[0], outs[1])) and bool(cp.array_equal(outs[0], outs[2])), cfg


@pytest.mark.parametrize("cfg", [{**selection.BIG, "splits": 3}, selection.BIG, selection.SMALL, {**selection.BIG, "sk": 2,
                                                                                      "splits": 2}])
def test_chained_products_read_what_the_kernel_before_wrote(cp, cfg):
    """x <- x @ m, twenty times back to back, each product reading the one before it (or, now and
    then, a CuPy kernel's output): with PDL a kernel may be scheduled while the one before it runs,
    and only its wait keeps it from reading an unfinished x.  Compared with the same chain in
    float64 (m orthogonal, so x keeps its size)."""
    rng = cp.random.default_rng()
    n = 192
    q, _ = cp.linalg.qr(rng.standard_normal((n, n)))
    m = q.astype(np.float32)
    x = rng.standard_normal((100, n), dtype=np.float32)
    ref = x.astype(np.float64)
    for i in range(20):
        if i % 4 == 3:  # now and then a CuPy kernel writes the next input
            x, ref = x * 0.5, ref * 0.5
        x = tilegemm.matmul(x, m, config=cfg)
        ref = ref @ m.astype(np.float64)
    assert float(cp.linalg.norm(x - ref) / cp.linalg.norm(ref)) < 20 * TOL


def test_chained_copies_read_what_the_kernel_before_wrote(cp):
    """x <- m @ x, twenty times back to back with nothing between, x's rows of odd length (131 floats)
    under 1100 rows of m: before each product x is copied into aligned rows (access.family_copies),
    the copy launched as a PDL dependent of the product before it, which wrote x and read the
    workspace the copy overwrites; only the copy's wait orders them (a guard: no kernel of the library
    triggers its dependents early, so an unordered copy would race in a small window).  Compared with
    the same chain in float64 afterwards (m orthogonal)."""
    rng = cp.random.default_rng()
    n, N = 1100, 131
    q, _ = cp.linalg.qr(rng.standard_normal((n, n)))
    m = q.astype(np.float32)
    x0 = rng.standard_normal((n, N), dtype=np.float32)
    x = x0
    for _ in range(20):
        x = tilegemm.matmul(m, x)
    steps = [e.program.steps for e in fastpath.entries() if e.program is not None and e.shape == (n, N)]
    assert steps and len(steps[0][0].args) == len(launch.PACK.fields)  # the program starts with the copy
    m64, ref = m.astype(np.float64), x0.astype(np.float64)
    for _ in range(20):
        ref = m64 @ ref
    assert float(cp.linalg.norm(x - ref) / cp.linalg.norm(ref)) < 20 * TOL


def test_split_k_on_a_torch_stream(cp):
    """The memo's split-K workspace is taken for the stream the launches go to (torch's current one)."""
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    cfg = {**selection.BIG, "splits": 4}
    with torch.cuda.stream(s):
        pairs = [(torch.randn(96, 3000, device="cuda"), torch.randn(3000, 260, device="cuda")) for _ in range(8)]
        outs = [tilegemm.matmul(a, b, config=cfg) for a, b in pairs]
        outs += [tilegemm.matmul(a, b, out=torch.full((96, 260), float("nan"), device="cuda"), config=cfg)
                 for a, b in pairs]
    s.synchronize()
    for (a, b), out in zip(pairs + pairs, outs):
        ref = a.double() @ b.double()
        assert float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)) < TOL


def test_repeat_calls_with_other_alignment(cp):
    """Same shapes and strides, but one call's views start 4 bytes in: each gets its own load width."""
    rng = cp.random.default_rng()
    for off in (0, 1, 0, 1):
        buf_a = rng.standard_normal(64 * 64 + 1, dtype=np.float32)
        buf_b = rng.standard_normal(64 * 64 + 1, dtype=np.float32)
        a, b = buf_a[off:off + 64 * 64].reshape(64, 64), buf_b[off:off + 64 * 64].reshape(64, 64)
        out = tilegemm.matmul(a, b)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref)) < TOL


def _free_bytes(cp) -> int:
    return cp.cuda.runtime.memGetInfo()[0]


@pytest.mark.parametrize("order", [0, 1])
def test_huge_leading_dimension_uses_64_bit_offsets(cp, order):
    """A row-major A whose rows are 2^31 / 200 elements apart: a 256-row tile spans more than 2^31
    elements, so the cp.async kernels' 32-bit copy offsets would wrap; the planner must pick the
    TG_OFF64 build (access.needs_wide_offsets).  No copy: A is a strided view of one large buffer."""
    M, N, K = 300, 136, 24
    lda = 2**31 // 200
    nbytes = 4 * ((M - 1) * lda + K)
    if _free_bytes(cp) < nbytes + (1 << 30):
        pytest.skip("needs about 11 GB of free GPU memory")
    from tilegemm import plan

    assert access.needs_wide_offsets(256, lda, N)
    buf = cp.empty((M - 1) * lda + K, dtype=np.float32)
    a = cp.lib.stride_tricks.as_strided(buf, shape=(M, K), strides=(4 * lda, 4))
    rng = cp.random.default_rng()
    a[...] = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    a_host = cp.asnumpy(a)
    for config in ({**selection.HUGE, "splits": 1, "order": order}, {**selection.BIG, "splits": 2, "order": order}):
        out = cp.full((M, N), np.nan, dtype=np.float32)
        tilegemm.matmul(a, b, out=out, config=config)
        ref = a_host.astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
        err = np.abs(cp.asnumpy(out) - ref).max() / np.abs(ref).max()
        assert err < TOL, (config, err)
    assert np.array_equal(cp.asnumpy(a), a_host)  # the input is untouched
    del buf, a


def test_output_beyond_2_31_elements(cp):
    """M * N > 2^31: the epilogue's row offsets must be 64-bit.  Rows are checked on a sample that
    includes the last ones."""
    M, N, K = 65537, 32800, 8
    if _free_bytes(cp) < 4 * M * N + (1 << 30):
        pytest.skip("needs about 10 GB of free GPU memory")
    rng = cp.random.default_rng()
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    out = cp.full((M, N), np.nan, dtype=np.float32)
    tilegemm.matmul(a, b, out=out)
    rows = np.r_[0:64, M // 2 - 32:M // 2 + 32, M - 64:M]
    ref = cp.asnumpy(a[rows]).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    got = cp.asnumpy(out[rows])
    assert np.isfinite(got).all()
    assert np.abs(got - ref).max() / np.abs(ref).max() < TOL
    del out


@pytest.mark.parametrize("splits", [2, 3])
def test_split_k_into_a_padded_output_with_odd_n(cp, splits):
    """N % 4 != 0 with a 16-byte-aligned padded output (and B transposed, so B's ld is K): the
    family runs with float4 stores (vec = 4), and the split-K workspace must keep them aligned."""
    M, N, K = 200, 130, 512
    rng = cp.random.default_rng()
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((N, K), dtype=np.float32).T  # NT: column-major B
    buf = cp.full((M, 132), np.nan, dtype=np.float32)
    out = buf[:, :N]
    cfg = {**selection.BIG, "splits": splits}
    tilegemm.matmul(a, b, out=out, config=cfg)
    ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    assert np.abs(cp.asnumpy(out) - ref).max() / np.abs(ref).max() < TOL
    assert cp.isnan(buf[:, N:]).all()  # the padding is not written


def _correct_and_repeatable(cp, cfg, shape, alpha, beta):
    """matmul with ``cfg`` (fresh inputs, NaN-poisoned outputs) against float64, twice with
    bit-identical results; then gemm with alpha/beta and a C."""
    M, N, K, batch = shape
    rng = cp.random.default_rng()
    lead = (batch,) if batch > 1 else ()
    a = rng.standard_normal(lead + (M, K), dtype=np.float32)
    b = rng.standard_normal(lead + (K, N), dtype=np.float32)
    c = rng.standard_normal(lead + (M, N), dtype=np.float32)
    ref = cp.matmul(a.astype(np.float64), b.astype(np.float64))
    outs = []
    for _ in range(2):
        out = cp.full(lead + (M, N), np.nan, dtype=np.float32)
        tilegemm.matmul(a, b, out=out, config=cfg)
        outs.append(out)
    assert float(cp.linalg.norm(outs[0] - ref) / cp.linalg.norm(ref)) < TOL
    assert bool(cp.array_equal(outs[0], outs[1]))
    g = tilegemm.gemm(a, b, c, alpha=alpha, beta=beta, config=cfg)
    gref = alpha * ref + beta * c.astype(np.float64)
    assert float(cp.linalg.norm(g - gref) / cp.linalg.norm(gref)) < TOL


@pytest.mark.parametrize("cfg", [{**selection.BIG, "sk": 1}, {**selection.HUGE, "sk": 1}, {**autotune.SK_SMALL, "sk": 1}])
@pytest.mark.parametrize("shape", [(3000, 1000, 500, 1), (33, 65, 40000, 1), (513, 255, 1031, 3), (1, 1, 1, 1),
                                   (2049, 8447, 136, 1), (128, 4096, 4100, 1), (383, 11387, 1000, 1)])
def test_stream_k_is_correct_and_repeatable(cp, cfg, shape):
    """Stream-K at shapes where tiles are split among blocks (many partials per tile at long K,
    batches, edges, many whole waves before the shared one): float64 agreement, alpha/beta, and bit-identical repeats (a
    tile's blocks add its parts in block order).  Where a tile's blocks add it up together (gemm.cu SK_SPREAD):
    128x4096x4100 in 128 x 128 tiles (32 tiles for 264 blocks), and 383x11387x1000, whose 267 such tiles are a whole
    wave of 264 and 3 tiles shared by 88 blocks each (at 2 blocks an SM on 132 SMs)."""
    _correct_and_repeatable(cp, cfg, shape, alpha=-0.5, beta=2.0)


@pytest.mark.parametrize("M, K, N", [(1500, 700, 900), (128, 4100, 4096)])
def test_stream_k_on_two_streams_at_once(cp, M, K, N):
    """Each stream has its own hand-over flags: launches on two streams may overlap (at 128x4096x4100 a tile's
    blocks add it up together)."""
    cfg = {**selection.BIG, "sk": 1}
    rng = cp.random.default_rng()
    jobs = []
    for _ in range(2):
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            a = rng.standard_normal((M, K), dtype=np.float32)
            b = rng.standard_normal((K, N), dtype=np.float32)
            out = cp.full((M, N), np.nan, dtype=np.float32)
        jobs.append((s, a, b, out))
    cp.cuda.Device().synchronize()
    for _ in range(5):
        for s, a, b, out in jobs:
            with s:
                tilegemm.matmul(a, b, out=out, config=cfg)
    cp.cuda.Device().synchronize()
    for s, a, b, out in jobs:
        ref = cp.matmul(a.astype(np.float64), b.astype(np.float64))
        assert float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref)) < TOL


@pytest.mark.parametrize("cfg", [{**selection.BIG, "splits": 4, "sk": 2}, {**autotune.SK_SMALL, "splits": 8, "sk": 2},
                                 {**builds.TILES["64x128"], "splits": builds.SUMMED_MAX_SPLITS, "sk": 2}])
@pytest.mark.parametrize("shape", [(128, 4096, 4096, 1), (2000, 2000, 1000, 1), (300, 129, 777, 3), (5, 7, 9, 1)])
def test_split_k_summed_in_the_kernel(cp, cfg, shape):
    """sk = 2 against float64 and against itself (bit-identical repeats), with alpha/beta; at
    2000 x 2000 the tiles' splits exceed the resident blocks, so it takes several launches."""
    _correct_and_repeatable(cp, cfg, shape, alpha=2.0, beta=-1.0)


@pytest.mark.parametrize("cfg", [{**selection.BIG, "sk": 1}, {**selection.HUGE, "sk": 1}, {**autotune.SK_SMALL, "sk": 1}])
@pytest.mark.parametrize("shape", [(525, 13468, 254, 1), (129, 130, 8, 300), (1000, 9335, 284, 1)])
def test_stream_k_with_fewer_k_iterations_left_than_blocks(cp, cfg, shape):
    """After the whole waves of whole tiles, the stream-K range can hold fewer k-iterations than
    the grid has blocks: it is shared by as many blocks as it has k-iterations, and the others hold
    nothing of any tile and set no flag (a tile's blocks would otherwise wait for them for ever)."""
    _correct_and_repeatable(cp, cfg, shape, alpha=1.5, beta=0.5)


@pytest.mark.parametrize("tile", ["128x128", "128x128w", "64x64f", "64x128", "32x32", "256x128", "128x256", "64x64"])
def test_results_with_rows_4_bytes_off(cp, tile):
    """Interior tiles whose result rows alternate between 8-byte aligned and 4 bytes off (odd N), or
    are all 4 bytes off (D a view one float in): pairs stored one column on, the ends of each warp's
    run alone; every element written once, against float64, NN and NT, edges included."""
    rng = cp.random.default_rng(11)
    cfg = {**builds.TILES[tile], "splits": 1}
    for M, N, K, layout, off in ((517, 1001, 96, "NN", 0), (300, 771, 40, "NT", 0), (260, 1024, 64, "NN", 1)):
        a = rng.standard_normal((M, K), dtype=np.float32)
        b = rng.standard_normal((N, K), dtype=np.float32).T if layout == "NT" else rng.standard_normal((K, N), dtype=np.float32)
        ld = N + 2 * off  # off = 1: rows of N + 2 floats from one float in: every row 4 bytes off
        out = cp.full(M * ld + off, np.nan, np.float32)[off:].reshape(M, ld)[:, :N]
        tilegemm.matmul(a, b, out=out, config=cfg)
        ref = cp.asarray(a, np.float64) @ cp.asarray(b, np.float64)
        err = float(cp.linalg.norm(out.astype(np.float64) - ref) / cp.linalg.norm(ref))
        assert err < TOL, (tile, M, N, K, layout, off, err)


@pytest.mark.parametrize("code,build", [(c, b) for c, names in builds.BY_ROWS_BUILDS.items() for b in names],
                         ids=lambda x: {access.ODD_ROWS: "odd", access.ODD_PAIRS: "pairs"}.get(x, x))
def test_rows_read_by_rows(cp, code, build, monkeypatch):
    """The builds that read a class of rows by rows (builds.BY_ROWS_BUILDS): rows of odd length
    (access.ODD_ROWS: N odd, B views one float in) and of twice an odd length (access.ODD_PAIRS:
    N = 2 mod 4, views two floats in).  B in NN and TN, edges, a partial first k tile, split counts,
    a batch whose batch stride moves which rows start at the wider alignment, and the views; against
    float64 with NaN-poisoned outputs, and checked to take the class's width code at its minb."""
    tile, kind = build.split()[0], build.split()[1] if " " in build else ""
    sk = {"": 0, "stream-K": 1, "summed": 2}[kind]
    lo = access.ROW_CLASSES[code][1]  # the narrower width: B's view starts lo floats in
    cols = (131, 257, 71, 33) if code == access.ODD_ROWS else (130, 258, 70, 34)
    seen = []
    real = launch.launcher
    monkeypatch.setattr("tilegemm.dispatch.launcher", lambda *a, **k: seen.append((a[2], dict(a[4]))) or real(*a, **k))
    minb = builds.BY_ROWS_MINB[code].get(build, builds.TILES[tile]["minb"])

    def by_rows():  # the last family launch read B by rows, at the build's minb
        vec, cfg = seen[-1]
        return code in (vec if isinstance(vec, tuple) else (vec,)) and cfg["minb"] == minb
    tilegemm.clear_caches()
    rng = cp.random.default_rng(17)
    for (layout, M, K, splits), N in zip((("NN", 70, 93, 1), ("NN", 65, 1000, 3), ("TN", 131, 93, 1),
                                          ("TN", 257, 600, 2)), cols):
        cfg = {**builds.TILES[tile], "sk": sk, "splits": 1 if sk == 1 else splits}
        a = rng.standard_normal((M, K), dtype=np.float32) if layout[0] == "N" else \
            rng.standard_normal((K, M), dtype=np.float32).T
        for off in (0, lo):  # B a view lo floats in: the other half of its rows starts at the wider alignment
            b = rng.standard_normal(K * N + off, dtype=np.float32)[off:].reshape(K, N)
            out = cp.full((M, N), np.nan, np.float32)
            del seen[:]
            tilegemm.matmul(a, b, out=out, config=cfg)
            ref = cp.asarray(a, np.float64) @ cp.asarray(b, np.float64)
            err = float(cp.linalg.norm(out.astype(np.float64) - ref) / cp.linalg.norm(ref))
            assert err < TOL, (build, layout, M, N, K, off, err)
            assert by_rows(), seen
    # batch strides 77 x 131 = 3 mod 4 and 77 x 130 = 2 mod 4: the products' rows start alternately
    N = cols[0]
    batch = rng.standard_normal(3 * 77 * N + lo, dtype=np.float32)[lo:].reshape(3, 77, N)
    a3 = rng.standard_normal((3, 50, 77), dtype=np.float32)
    out = cp.full((3, 50, N), np.nan, np.float32)
    del seen[:]
    tilegemm.matmul(a3, batch, out=out, config={**builds.TILES[tile], "sk": sk, "splits": 1})
    ref = cp.matmul(a3.astype(np.float64), batch.astype(np.float64))
    assert float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref)) < TOL and by_rows(), seen
    tilegemm.clear_caches()


@pytest.mark.parametrize("build", sorted({b for caps in builds.ARCH_MINB.values() for b in caps}))
def test_arch_minb_builds(cp, build, monkeypatch):
    """The builds builds.ARCH_MINB raises to more blocks an SM, at each class of B's rows (16-byte rows,
    N = 2 mod 4, N odd; B not copied), split over K, with edges and a partial first k tile, alpha and
    beta, against float64 with NaN-poisoned outputs; the launch takes the minb ARCH_MINB gives the
    device's arch at that class, else the tile's."""
    from tilegemm import gpu
    tile, kind = build.split()[0], build.split()[1] if " " in build else ""
    sk = {"": 0, "stream-K": 1, "summed": 2}[kind]
    seen = []
    real = launch.launcher
    monkeypatch.setattr("tilegemm.dispatch.launcher", lambda *a, **k: seen.append(dict(a[4])) or real(*a, **k))
    caps = builds.ARCH_MINB.get(gpu.device_properties().arch, {}).get(build, {})
    tilegemm.clear_caches()
    rng = cp.random.default_rng(23)
    for (M, N, K), width in (((333, 516, 1203), 4), ((129, 258, 2001), 2), ((509, 131, 777), 1)):
        assert not any(access.family_copies("NN", True, (4, width), M, N, K, 1))  # B read as stored, at that width
        for splits in ((3, 8) if sk == 2 else (1, 4)):
            cfg = {**builds.TILES[tile], "sk": sk, "splits": splits}
            a = rng.standard_normal((M, K), dtype=np.float32)
            b = rng.standard_normal((K, N), dtype=np.float32)
            c = rng.standard_normal((M, N), dtype=np.float32)
            out = cp.full((M, N), np.nan, np.float32)
            del seen[:]
            tilegemm.gemm(a, b, c, out=out, alpha=1.5, beta=-0.5, config=cfg)
            ref = 1.5 * (cp.asarray(a, np.float64) @ cp.asarray(b, np.float64)) - 0.5 * cp.asarray(c, np.float64)
            err = float(cp.linalg.norm(out.astype(np.float64) - ref) / cp.linalg.norm(ref))
            assert err < TOL, (build, M, N, K, splits, err)
            assert seen and seen[-1]["minb"] == caps.get(width, builds.TILES[tile]["minb"]), (build, width, seen)
