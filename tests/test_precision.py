"""GPU-free: ``precision=`` ("fp32" by default, "tf32x3", "tf32"): validation, the rules that keep a
precision from changing silently, the config the call path builds for each, and the tensor-core
selection (valid, spill-free configs for every layout)."""

import inspect

import pytest

import tilegemm
from tilegemm import bench, dispatch, hopper, launch, registry, selection, tma
from tilegemm.errors import ConfigError
from tilegemm.occupancy import Limits
from tilegemm.plan import plan

from test_launch import PA, PB, PD, op, stubs  # noqa: F401 (a fixture)

A, B = op("a", (300, 200), ptr=PA), op("b", (200, 100), ptr=PB)


@pytest.mark.parametrize("fn", [tilegemm.matmul, tilegemm.gemm])
def test_fp32_stays_the_default(fn):
    assert inspect.signature(fn).parameters["precision"].default == "fp32"
    assert plan(A, B).precision == "fp32"


@pytest.mark.parametrize("bad", ["fp16", "TF32x3", "", None, 3, "tf32 "])
def test_unknown_precisions_are_refused_with_the_choices(bad):
    with pytest.raises(ValueError, match=r"precision must be one of 'fp32', 'tf32x3', 'tf32', got"):
        plan(A, B, precision=bad)


def test_a_rung_runs_only_at_its_own_precision():
    with pytest.raises(ValueError, match=r"kernel='09_mma_tf32x3' computes tf32x3, but precision='fp32'; pass "
                                         r"precision='tf32x3'"):
        plan(A, B, kernel="09_mma_tf32x3")
    with pytest.raises(ValueError, match=r"kernel='08_hopper' computes fp32, but precision='tf32x3'"):
        plan(A, B, kernel="08_hopper", precision="tf32x3")
    assert plan(A, B, kernel="09_mma_tf32x3", precision="tf32x3").precision == "tf32x3"


def test_a_config_cannot_name_another_precision():
    with pytest.raises(ValueError, match=r"config\['mma'\] = 3 computes tf32x3, but precision='fp32'"):
        plan(A, B, config={"mma": 3})
    with pytest.raises(ValueError, match=r"config\['mma'\] = 2 computes nothing"):
        plan(A, B, config={"mma": 2}, precision="tf32")
    # an FFMA-only config at a tensor-core precision breaks the family's declared constraints
    with pytest.raises(ConfigError, match=r"with mma: tm = tn = 8"):
        plan(A, B, config={"tm": 16, "tn": 8, "bm": 256}, precision="tf32x3")
    cfg = {**selection.MMA_WIDE, "mma": 1}
    assert dict(plan(A, B, config=cfg, precision="tf32").config) == cfg


@pytest.mark.parametrize("precision, mma", [("fp32", None), ("tf32x3", 3), ("tf32", 1)])
def test_the_program_runs_the_family_at_the_call_s_precision(stubs, monkeypatch, precision, mma):  # noqa: F811
    monkeypatch.setattr(dispatch, "_on_hopper_tensor_cores", lambda *a: False)  # not an H100: mma.sync
    seen = []

    def choose(key, prec):
        seen.append(prec)
        return {**(selection.MMA_WIDE if prec != "fp32" else selection.BIG), "splits": 1}

    prog = dispatch.build(plan(A, B, op("out", (300, 100), ptr=PD), precision=precision), 0, (PA, PB, 0, PD), choose)
    assert seen == [precision]
    assert prog.config.get("mma") == mma
    assert stubs.built[-1][3].get("mma") == mma


def test_family_constraints_on_mma():
    F, lim = registry.FAMILY, Limits.for_arch("sm_90")
    ok = F.params({**selection.MMA_WIDE, "mma": 3})
    assert F.violations(ok, lim) == []
    assert any("mma is 0" in v for v in F.violations({**ok, "mma": 2}, lim))
    for bad in ({"bm": 96}, {"bn": 48}, {"bk": 12}, {"stages": 0}, {"tm": 4}):
        assert any("with mma" in v for v in F.violations({**ok, **bad}, lim)), bad
    # 256 threads of TF32x3 take all of an SM's registers: two blocks per SM cannot be asked for
    assert F.violations({**ok, "bm": 128, "bn": 128, "minb": 2}, lim)


@pytest.mark.parametrize("layout", registry.LAYOUTS)
@pytest.mark.parametrize("mma", [3, 1])
def test_tensor_core_selection_picks_valid_spill_free_configs(layout, mma):
    """Over a grid of shapes: every pick passes the family's constraints and compiles for sm_90
    without spilling in the layout it runs in; splits stay >= 512 long."""
    lim = Limits.for_arch("sm_90")
    wide_ok = not selection.spills({**selection.MMA_WIDE, "mma": mma}, layout, "sm_90")
    seen = set()
    for M in (1, 64, 500, 2048, 9000):
        for N in (1, 130, 4096):
            for K in (1, 700, 5000, 1000000):
                cfg = selection.mma_heuristic(M, N, K, 1, mma, 132, wide_ok)
                full = registry.FAMILY.params({**cfg, "mma": mma})
                assert registry.FAMILY.violations(full, lim) == [], (M, N, K, cfg)
                assert cfg["splits"] == 1 or K // cfg["splits"] >= 512
                seen.add(tuple(sorted((k, v) for k, v in cfg.items() if k != "splits")))
    for cfg in seen:
        assert not selection.spills({**dict(cfg), "mma": mma}, layout, "sm_90"), cfg


def test_bench_names_carry_their_precision():
    assert bench.kernel_name("gemm") == ("gemm", "fp32")
    assert bench.kernel_name("gemm-tf32x3") == ("gemm", "tf32x3")
    assert bench.kernel_name("tilegemm-tf32") == ("gemm", "tf32")
    assert bench.kernel_name("09_mma_tf32x3") == ("09_mma_tf32x3", "tf32x3")
    assert bench.kernel_name("08_hopper") == ("08_hopper", "fp32")
    with pytest.raises(ValueError, match="precision must be one of"):
        bench.kernel_name("gemm-fp16")
    assert bench.TOLERANCES["tf32x3"] == bench.TOLERANCES["fp32"]  # FP32 accuracy is checked as such


@pytest.mark.parametrize("precision, passes", [("tf32x3", 3), ("tf32", 1)])
def test_on_hopper_tensor_core_calls_run_rung_10s_kernel_split_over_k(stubs, monkeypatch, precision, passes):  # noqa: F811
    """Few 128 x 128 tiles and a long K: the wgmma kernel writes split-K planes of the workspace
    (alpha 1, beta 0; its operands as TMA tensor maps, encoded per launch), the reduction applies
    alpha and beta.  Many tiles: one launch straight into D with alpha and beta."""
    if precision == "tf32":  # rung 10's kernel runs tf32 only where wgmma_tf32.cu's copies would be too large
        monkeypatch.setattr(hopper, "tf32_operands", lambda *a: None)
    from types import SimpleNamespace

    from test_launch import FakeLauncher

    monkeypatch.setattr(dispatch, "_on_hopper_tensor_cores", lambda *a: True)
    monkeypatch.setattr(dispatch.gpu, "device_properties", lambda device=None: SimpleNamespace(sms=132, name=None))
    monkeypatch.setattr(dispatch, "wgmma_launcher", lambda layout, device, p, tma, bm=128: FakeLauncher(
        registry.WGMMA_FAMILY, (("tg_mma_passes", p), ("tg_tma", int(tma)), ("bm", bm)), 4, stubs.log))
    W = launch.WGMMA
    a, b = op("a", (64, 100000), ptr=PA), op("b", (100000, 64), ptr=PB)
    c, out = op("c", (64, 64), ptr=PD + 2**24), op("out", (64, 64), ptr=PD)
    prog = dispatch.build(plan(a, b, out, c=c, alpha=0.5, beta=2.0, precision=precision), 0,
                          (PA, PB, PD + 2**24, PD), lambda *k: pytest.fail("no mma.sync config is chosen"))
    mm, red = prog.steps
    splits = prog.config["splits"]
    assert prog.config["tg_mma_passes"] == passes and splits > 8
    assert mm.go.grid == (1, 1, splits) and [m[0] for m in mm.maps] == [W.slot("tA"), W.slot("tB")]
    assert prog.config["tg_tma"] == 1  # aligned operands: TMA
    args = dict(zip((n for n, _ in W.fields), mm.args))
    assert args["k_split"] % 32 == 0 and args["k_split"] * (splits - 1) < 100000 <= args["k_split"] * splits
    assert (args["alpha"], args["beta"]) == (1.0, 0.0) and prog.work_floats == splits * 64 * 64
    red_args = dict(zip((n for n, _ in launch.REDUCE.fields), red.args))
    assert (red_args["splits"], red_args["alpha"], red_args["beta"]) == (splits, 0.5, 2.0)
    a, b = op("a", (4096, 512), ptr=PA), op("b", (512, 4096), ptr=PB)
    prog = dispatch.build(plan(a, b, op("out", (4096, 4096), ptr=PD), precision=precision), 0, (PA, PB, 0, PD),
                          lambda *k: pytest.fail("no mma.sync config is chosen"))
    (mm,) = prog.steps
    # persistent: a block an SM, walking the 1024 tiles
    assert mm.go.grid == (132, 1, 1) and prog.config["splits"] == 1 and prog.work_floats == 0
    # an operand TMA cannot read (rows of 511 floats): copied first into rows of 512 in the workspace,
    # which the tensor map then reads; B (rows of 4096) is read where it is
    a, b = op("a", (4096, 511), ptr=PA), op("b", (511, 4096), ptr=PB)
    prog = dispatch.build(plan(a, b, op("out", (4096, 4096), ptr=PD), precision=precision), 0, (PA, PB, 0, PD),
                          lambda *k: pytest.fail("no mma.sync config is chosen"))
    pk, mm = prog.steps
    assert prog.config["tg_tma"] == 1 and prog.config["pack"] == 1 and prog.work_floats == 4096 * 512
    pargs = dict(zip((n for n, _ in launch.PACK.fields), pk.args))
    assert (pargs["rows"], pargs["cols"], pargs["lds"], pargs["ldd"]) == (4096, 511, 511, 512)
    assert pk.ptrs == ((launch.PACK.slot("src"), launch.A, 0), (launch.PACK.slot("dst"), launch.W, 0))
    assert pk.go.grid[0] * pargs["gpr"] * 4 >= 511 and pk.go.grid[1] * (256 // pargs["gpr"]) >= 4096
    assert [(m[1], m[2]) for m in mm.maps] == [(launch.W, 0), (launch.B, 0)]
    assert dict(zip((n for n, _ in W.fields), mm.args))["lda"] == 512
    # the copy waits first and follows the kernel before it as a PDL dependent, unless the call says
    # pdl=False; rung 10's kernel is launched plainly after it
    assert pk.go.pdl and not mm.go.pdl
    pk, _ = dispatch.build(plan(a, b, op("out", (4096, 4096), ptr=PD), precision=precision, pdl=False), 0,
                           (PA, PB, 0, PD), lambda *k: pytest.fail("no mma.sync config is chosen")).steps
    assert not pk.go.pdl
    # both unaligned, and split over K: the planes first, then the copies, 256-byte aligned
    a, b = op("a", (64, 99999), ptr=PA), op("b", (99999, 63), ptr=PB)
    prog = dispatch.build(plan(a, b, op("out", (64, 63), ptr=PD), precision=precision), 0, (PA, PB, 0, PD),
                          lambda *k: pytest.fail("no mma.sync config is chosen"))
    pa_, pb_, mm, red = prog.steps
    splits, planes = prog.config["splits"], prog.config["splits"] * 64 * 64
    assert prog.config["pack"] == 3 and splits > 8
    da, db = -(-planes // 64) * 64, -(-(-(-planes // 64) * 64 + 64 * 100000) // 64) * 64
    assert pa_.ptrs[1] == (launch.PACK.slot("dst"), launch.W, 4 * da)
    assert pb_.ptrs[1] == (launch.PACK.slot("dst"), launch.W, 4 * db)
    assert [(m[1], m[2]) for m in mm.maps] == [(launch.W, 4 * da), (launch.W, 4 * db)]
    assert prog.work_floats == db + 99999 * 64
    # past the copy limit the producer copies the tiles itself (cp.async), no tensor maps
    monkeypatch.setattr(hopper, "PACK_LIMIT", 1000)
    a, b = op("a", (4096, 511), ptr=PA), op("b", (511, 4096), ptr=PB)
    prog = dispatch.build(plan(a, b, op("out", (4096, 4096), ptr=PD), precision=precision), 0, (PA, PB, 0, PD),
                          lambda *k: pytest.fail("no mma.sync config is chosen"))
    assert prog.config["tg_tma"] == 0 and prog.config["pack"] == 0 and prog.steps[0].maps == ()
    assert prog.steps[0].go.grid == (32 * 32, 1, 1)  # a block a tile: no walk without TMA


def test_the_hopper_path_takes_64_row_tiles_where_128_rows_waste_the_gpu():
    """One block an SM: 64-row tiles (one consumer warpgroup, 0.76 of a 128-row tile's time) where
    128-row tiles would be mostly empty; 128 elsewhere; 128 only without TMA (the producer's
    cp.async copies 128 rows).  Splits over K where the tiles leave SMs idle, not at short K."""
    plan_ = hopper.wgmma_plan
    assert plan_(16, 4096, 4096)[0] == 64 and plan_(64, 8192, 4096)[0] == 64
    for M, N, K in ((181, 13280, 4096), (256, 8192, 4096), (4096, 4096, 192), (4096, 4096, 4096), (8192, 8192, 8192)):
        assert plan_(M, N, K)[0] == 128, (M, N, K)
    assert plan_(16, 4096, 4096, rows=(128,))[0] == 128
    assert plan_(4096, 4096, 4096)[1] == 1 and plan_(2578, 9931, 131)[1] == 1 and plan_(128, 2450, 7322)[1] > 2
    for M, N, K in ((16, 4096, 4096), (64, 64, 100000), (5000, 5000, 5000), (300, 7000, 300)):
        bm, splits, k_split = plan_(M, N, K)
        assert k_split % 32 == 0 and (splits - 1) * k_split < K <= splits * k_split


def test_the_hopper_path_s_predicted_time_never_falls_with_more_work():
    """The least predicted time (which the plan takes, within 2%): more K, more rows or more columns
    never faster; one split at a given tile: never faster with more K, rows or columns."""
    rng = __import__("random").Random(7)

    def best(M, N, K):  # the least predicted time (the plan takes one within 2% of it)
        t = min(hopper.wgmma_time(M, N, K, 132, bm, s)[0] for bm in (128, 64) for s in range(1, 129)
                if s == 1 or K // s >= 256)
        bm, splits, _ = hopper.wgmma_plan(M, N, K)
        assert hopper.wgmma_time(M, N, K, 132, bm, splits)[0] <= t / 0.98 + 1e-9
        return t

    for _ in range(300):
        M, N, K = (int(rng.uniform(1, 16384)) for _ in range(3))
        t = best(M, N, K)
        for more in ((M, N, K + 32), (M + 64, N, K), (M, N + 128, K)):
            assert best(*more) >= t - 1e-9, ((M, N, K), more)
        for bm in (128, 64):
            t1 = hopper.wgmma_time(M, N, K, 132, bm, 1)[0]
            for more in ((M, N, K + 32), (M + bm, N, K), (M, N + 128, K)):
                assert hopper.wgmma_time(*more, 132, bm, 1)[0] >= t1 - 1e-9


def test_the_64_row_tile_builds_and_is_checked():
    F = registry.WGMMA_FAMILY
    p = F.params({"bm": 64})
    assert F.block(p) == (256, 1, 1) and F.tile(p) == (64, 128)
    assert F.smem(p) < F.smem(F.params())
    with pytest.raises(ConfigError, match="bm is 128"):
        F.check(F.params({"bm": 64, "tg_tma": 0}), Limits.for_arch("sm_90"))
    with pytest.raises(ConfigError, match="bm is 128"):
        F.check(F.params({"bm": 32}), Limits.for_arch("sm_90"))


def test_on_hopper_tf32_reads_its_b_k_major_and_its_a_either_way(stubs, monkeypatch):  # noqa: F811
    """precision "tf32": wgmma_tf32.cu, whose B is K-major (N x K) and whose A is K-major or M-major
    (read into registers); row-major A and B (NN) swap (the kernel computes C^T = B^T A^T, B its
    register operand), TN transposes its smaller operand into the workspace (pack_t), an unaligned
    operand is copied (pack); split over K with the reduction where tiles are few; past the copy limit
    rung 10's kernel in one pass."""
    from types import SimpleNamespace

    from test_launch import FakeLauncher

    monkeypatch.setattr(dispatch, "_on_hopper_tensor_cores", lambda *a: True)
    monkeypatch.setattr(dispatch.gpu, "device_properties", lambda device=None: SimpleNamespace(sms=132, name=None))
    built, maps = [], []

    def launcher(device, bn=256, p_mn=0, swap=0):
        built.append((bn, p_mn, swap))
        return FakeLauncher(registry.WGMMA_TF32, (("bn", bn), ("tg_p_mn", p_mn), ("tg_swap", swap)), 4, stubs.log)

    monkeypatch.setattr(dispatch, "wgmma_tf32_launcher", launcher)
    monkeypatch.setattr(tma, "encoder", lambda *a: maps.append(a[:6]) or (lambda ptr: bytes(128)))  # less the device
    monkeypatch.setattr(dispatch, "wgmma_launcher", lambda layout, device, p, tma, bm=128: FakeLauncher(
        registry.WGMMA_FAMILY, (("tg_mma_passes", p), ("tg_tma", int(tma)), ("bm", bm)), 4, stubs.log))
    T, PT = launch.WGMMA_TF32, launch.PACK_T

    def build(a, b, out, **kw):
        return dispatch.build(plan(a, b, out, precision="tf32", **kw), 0, (PA, PB, 0, PD),
                              lambda *k: pytest.fail("no mma.sync config is chosen"))

    def args(step, sig=T):
        return dict(zip((n for n, _ in sig.fields), step.args))

    # NN: no copy; the kernel's A is B (2048 rows of N, M-major), its B is A, M and N swapped
    prog = build(op("a", (4096, 512), ptr=PA), op("b", (512, 2048), ptr=PB), op("out", (4096, 2048), ptr=PD))
    (mm,) = prog.steps
    assert prog.config == {"bn": 256, "splits": 1, "swap": 1, "copies": "stored/stored"} and prog.work_floats == 0
    assert (args(mm)["M"], args(mm)["N"], args(mm)["lda"], args(mm)["ldb"]) == (2048, 4096, 2048, 512)
    assert built[-1] == (256, 1, 1)  # the kernel's A (B) M-major, in registers; C^T
    # its A map: B's stored view (K x N), boxes of 32 k x 32 n; its B map: A (M x K), boxes of 256 rows
    assert maps[-2:] == [(512, 2048, 2048, 32, 32, 128), (4096, 512, 512, 256, 32, 128)]
    # 16 x 16 tiles, a block an SM walking them (persistent)
    assert mm.go.grid == (132, 1, 1) and [(m[1], m[2]) for m in mm.maps] == [(launch.B, 0), (launch.A, 0)]
    # NT (x @ W.T, as torch's Linear): both K-major as stored, no swap
    b = op("b", (512, 4096), strides=(1, 512), ptr=PB)
    prog = build(op("a", (4096, 512), ptr=PA), b, op("out", (4096, 4096), ptr=PD))
    assert prog.config["swap"] == 0 and [(m[1], m[2]) for m in prog.steps[0].maps] == [(launch.A, 0), (launch.B, 0)]
    assert built[-1] == (256, 0, 0) and maps[-2:] == [(4096, 512, 512, 128, 32, 128), (4096, 512, 512, 256, 32, 128)]
    # TN, M >= N: A (stored 511 x 300) read M-major as stored, B (511 x 200) transposed into rows of 512
    a = op("a", (300, 511), strides=(1, 300), ptr=PA)
    prog = build(a, op("b", (511, 200), ptr=PB), op("out", (300, 200), ptr=PD))
    tr, mm = prog.steps
    assert prog.config["copies"] == "stored/transpose" and prog.config["swap"] == 0
    targs = args(tr, PT)
    assert (targs["rows"], targs["cols"], targs["lds"], targs["ldd"]) == (511, 200, 200, 512)
    assert tr.ptrs == ((PT.slot("src"), launch.B, 0), (PT.slot("dst"), launch.W, 0))
    assert tr.go.grid[0] * 32 >= 200 and tr.go.grid[1] * 32 >= 512 and prog.work_floats == 200 * 512
    assert [(m[1], m[2]) for m in mm.maps] == [(launch.A, 0), (launch.W, 0)] and args(mm)["ldb"] == 512
    assert tr.go.pdl  # the transposed copy follows the kernel before it as a PDL dependent
    # TN, M < N: A transposed, swapped
    a = op("a", (200, 511), strides=(1, 200), ptr=PA)
    prog = build(a, op("b", (511, 300), ptr=PB), op("out", (200, 300), ptr=PD))
    assert prog.config["swap"] == 1 and prog.steps[0].ptrs[0] == (PT.slot("src"), launch.A, 0)
    # NT unaligned (rows of 511 floats): both copied into aligned rows, the second 256-byte aligned
    b = op("b", (511, 200), strides=(1, 511), ptr=PB)
    prog = build(op("a", (300, 511), ptr=PA), b, op("out", (300, 200), ptr=PD))
    pa_, pb_, mm = prog.steps
    assert prog.config["copies"] == "copy/copy" and pb_.ptrs[1] == (launch.PACK.slot("dst"), launch.W, 4 * 300 * 512)
    assert pa_.go.pdl and pb_.go.pdl
    assert [(m[1], m[2]) for m in mm.maps] == [(launch.W, 0), (launch.W, 4 * 300 * 512)]
    # few tiles and a long K: split over K, planes written alpha 1, beta 0, the reduction applies them
    b = op("b", (100000, 64), strides=(1, 100000), ptr=PB)
    prog = build(op("a", (64, 100000), ptr=PA), b, op("out", (64, 64), ptr=PD), alpha=0.5)
    mm, red = prog.steps
    assert prog.config["splits"] > 8 and mm.go.grid[2] == prog.config["splits"] and args(mm)["alpha"] == 1.0
    assert args(red, launch.REDUCE)["alpha"] == 0.5 and prog.work_floats == prog.config["splits"] * 64 * 64
    # past the copy limit: rung 10's kernel, one pass
    monkeypatch.setattr(hopper, "PACK_LIMIT", 1000)
    prog = build(op("a", (4096, 511), ptr=PA), op("b", (511, 4096), ptr=PB), op("out", (4096, 4096), ptr=PD))
    assert prog.config["tg_mma_passes"] == 1


@pytest.mark.parametrize("layout, aligned, M, N, want", [
    ("NN", (True, True), 300, 200, (1, 1, "stored", "stored")),    # swap: B (N-major) in registers
    ("NT", (True, True), 300, 200, (0, 0, "stored", "stored")),    # both K-major
    ("TN", (True, True), 300, 200, (0, 1, "stored", "transpose")),  # the smaller (B) transposed
    ("TN", (True, True), 200, 300, (1, 1, "stored", "transpose")),  # the smaller (A) transposed, swap
    ("TT", (True, True), 300, 200, (0, 1, "stored", "stored")),    # A M-major in registers
    ("NN", (False, True), 300, 200, (1, 1, "stored", "copy")),     # the kernel's B is the call's A
    ("NN", (True, False), 300, 200, (1, 1, "copy", "stored")),
    ("NT", (False, True), 300, 200, (0, 0, "copy", "stored")),
    ("NT", (True, False), 300, 200, (0, 0, "stored", "copy")),
    ("TN", (False, True), 300, 200, (0, 1, "copy", "transpose")),
    ("TT", (True, False), 300, 200, (0, 1, "stored", "copy")),
])
def test_tf32_reads_each_layout_k_major_or_from_registers(layout, aligned, M, N, want):
    ops = hopper.tf32_operands(layout, M, N, 512, aligned)
    assert (ops["swap"], ops["p_mn"], ops["a"], ops["b"]) == want


def test_tf32_splits_start_at_whole_k_tiles():
    for M, N, K in ((64, 64, 100000), (128, 4096, 70001), (300, 200, 9000)):
        bn, splits, k_split = hopper.tf32_plan(M, N, K)
        assert k_split % hopper.TF32_BK == 0 and (splits - 1) * k_split < K <= splits * k_split
