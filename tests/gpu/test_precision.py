"""GPU: the tensor-core precisions.  tf32x3 and tf32 through matmul/gemm, property-based against
float64 (the drawn cases of test_gemm: odd shapes, every layout, padded and unaligned views,
batches with broadcasting, 1-D operands, alpha/beta, out=), with the selection's configs and the
tensor-core configs forced; rung 9; and tf32x3's accuracy against cuBLAS SGEMM's on the classes of
docs/accuracy.md, NaN and Inf included."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilegemm
from tilegemm import selection

from gpu.test_gemm import cases, check_case
from gpu.conftest import rel_err

pytestmark = pytest.mark.gpu

TOL = {"tf32x3": 1e-5, "tf32": 5e-3}
MMA_CONFIGS = [
    None, None, None,
    {**selection.MMA_WIDE, "splits": 1},
    {**selection.MMA_WIDE, "splits": 3},
    {**selection.MMA_SMALL, "splits": 1},
    {**selection.MMA_SMALL, "splits": 4},
    {**selection.MMA_WIDE, "bm": 128, "minb": 1, "splits": 1},
    {**selection.MMA_SMALL, "bk": 16, "stages": 2, "swizzle": 0, "splits": 2},
]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases(), config=st.sampled_from(range(len(MMA_CONFIGS))))
def test_tf32x3_property_against_float64(cp, case, config):
    check_case(cp, case, MMA_CONFIGS[config], "tf32x3", TOL["tf32x3"])


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases(), config=st.sampled_from(range(len(MMA_CONFIGS))))
def test_tf32_property_against_float64(cp, case, config):
    check_case(cp, case, MMA_CONFIGS[config], "tf32", TOL["tf32"])


# rung 9 takes any shape; rung 10 reads with TMA, so its shapes keep every leading dimension a
# multiple of 4 in every layout
RUNG_SHAPES = [("09_mma_tf32x3", s) for s in ((1, 1, 1), (129, 65, 33), (1000, 900, 700), (300, 257, 4099))]
RUNG_SHAPES += [("10_wgmma_tf32x3", s) for s in ((4, 4, 4), (132, 68, 36), (1000, 900, 700), (300, 256, 4100))]


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("kernel, shape", RUNG_SHAPES)
def test_tensor_core_rungs_against_float64(cp, kernel, shape, layout):
    M, N, K = shape
    rng = cp.random.default_rng()
    a = rng.standard_normal((K, M) if layout[0] == "T" else (M, K), dtype=np.float32)
    b = rng.standard_normal((N, K) if layout[1] == "T" else (K, N), dtype=np.float32)
    a, b = (a.T if layout[0] == "T" else a), (b.T if layout[1] == "T" else b)
    out = cp.full((M, N), np.nan, np.float32)
    tilegemm.matmul(a, b, out=out, kernel=kernel, precision="tf32x3")
    assert rel_err(cp, out, a, b) < 1e-5


def test_rung10_refuses_what_tma_cannot_read(cp):
    a = cp.ones((64, 30), np.float32)  # rows of 30 floats: not a multiple of 16 bytes
    with pytest.raises(ValueError, match="copies its operands with TMA, which needs them 16-byte aligned"):
        tilegemm.matmul(a, cp.ones((30, 64), np.float32), kernel="10_wgmma_tf32x3", precision="tf32x3")


def test_tensor_core_paths_on_hopper(cp):
    """On an H100/H200, aligned single products take rung 10's kernel (split over K where tiles are
    few), others the mma.sync family; both correct, alpha/beta included."""
    rng = cp.random.default_rng(4)
    for M, N, K in ((64, 64, 100000), (2048, 1024, 512), (130, 66, 34)):
        a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
        c = rng.standard_normal((M, N), dtype=np.float32)
        for prec in ("tf32x3", "tf32"):
            got = tilegemm.gemm(a, b, c, alpha=0.5, beta=-2.0, precision=prec)
            ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) - 2.0 * c
            assert _err(cp, got, ref) < TOL[prec], (M, N, K, prec)


def test_the_copied_and_64_row_paths_on_hopper(cp):
    """Fixed cases for what the random draws reach only by chance: both operands copied into aligned
    rows and split over K with beta and C; a copied operand in a transposed layout with a
    column-major result; the 64-row tile with C unaligned and D aligned; a one-row operand."""
    rng = cp.random.default_rng(5)

    def check(a, b, c, alpha, beta, out):
        for prec in ("tf32x3", "tf32"):
            out[...] = np.nan
            got = tilegemm.gemm(a, b, c, alpha=alpha, beta=beta, out=out, precision=prec)
            ref = alpha * (cp.asarray(a, np.float64) @ cp.asarray(b, np.float64))
            if c is not None:
                ref = ref + beta * cp.asarray(c, np.float64)
            assert _err(cp, got, ref) < TOL[prec], (a.shape, b.shape, prec)

    # both unaligned (rows of 20003 and 63 floats), few tiles: split over K, reduction with beta
    a, b = rng.standard_normal((64, 20003), dtype=np.float32), rng.standard_normal((20003, 63), dtype=np.float32)
    check(a, b, rng.standard_normal((64, 63), dtype=np.float32), 0.5, -2.0, cp.empty((64, 63), np.float32))
    # A transposed with rows of 301 floats; a column-major result (the operands swap)
    a = rng.standard_normal((777, 301), dtype=np.float32).T
    b = rng.standard_normal((777, 130), dtype=np.float32)
    check(a, b, None, 1.0, 0.0, cp.empty((130, 301), np.float32).T)
    # few rows: the 64-row tile; C a view at an odd offset (4-byte aligned only), D aligned
    a, b = rng.standard_normal((40, 2048), dtype=np.float32), rng.standard_normal((2048, 4096), dtype=np.float32)
    c = rng.standard_normal((40 * 4096 + 1,), dtype=np.float32)[1:].reshape(40, 4096)
    check(a, b, c, 1.5, 0.25, cp.empty((40, 4096), np.float32))
    # one row of A whose leading dimension is odd (a row of a wider matrix)
    a = rng.standard_normal((3, 1001), dtype=np.float32)[1:2, :1000]
    check(a, rng.standard_normal((1000, 300), dtype=np.float32), None, 1.0, 0.0, cp.empty((1, 300), np.float32))


def test_rung10_blocks_walking_several_tiles(cp, monkeypatch):
    """The persistent walk: blocks take one tile or several, in unequal numbers, with one or two k
    tiles each (the stages' phases carried from tile to tile), 64-row tiles and splits over K forced,
    beta and C; each result bitwise the one a block a tile gives, and against float64.  Without TMA
    (the producer's cp.async) a block a tile."""
    from tilegemm import hopper

    rng = cp.random.default_rng(6)
    plan = hopper.wgmma_plan

    def run(M, N, K, force=None, beta=0.0, layout="NN"):
        a = rng.standard_normal((K, M) if layout[0] == "T" else (M, K), dtype=np.float32)
        b = rng.standard_normal((N, K) if layout[1] == "T" else (K, N), dtype=np.float32)
        a, b = (a.T if layout[0] == "T" else a), (b.T if layout[1] == "T" else b)
        c = rng.standard_normal((M, N), dtype=np.float32)
        outs = []
        walk = (lambda tiles, sms, tma=True: (min(tiles, sms) if tma else tiles, 1, 1))  # at any tile count
        for grid in ((lambda tiles, sms, tma=True: (tiles, 1, 1)), walk):
            monkeypatch.setattr(hopper, "wgmma_grid", grid)
            if force:
                monkeypatch.setattr(hopper, "wgmma_plan", lambda M_, N_, K_, sms=132, rows=(128, 64): (
                    force[0], force[1], -(-(-(-K_ // force[1])) // 32) * 32))
            tilegemm.clear_caches()
            out = cp.full((M, N), np.nan, np.float32)
            tilegemm.gemm(a, b, c, alpha=1.5, beta=beta, out=out, precision="tf32x3")
            outs.append(out)
            monkeypatch.setattr(hopper, "wgmma_plan", plan)
        ref = 1.5 * (cp.asarray(a, np.float64) @ cp.asarray(b, np.float64)) + beta * cp.asarray(c, np.float64)
        assert _err(cp, outs[1], ref) < TOL["tf32x3"], (M, N, K, force, layout)
        assert bool(cp.array_equal(outs[0], outs[1])), (M, N, K, force, layout)

    try:
        for layout in ("NN", "NT", "TN", "TT"):
            run(2000, 1900, 20, layout=layout)        # 240 tiles: blocks of 1 and 2 tiles, a k tile each
            run(3000, 3000, 60, beta=-0.5, layout=layout)  # 576 tiles: 4 or 5 a block, 2 k tiles each
        run(1000, 4000, 100, force=(64, 1))           # 64-row tiles: 16 x 32 = 512
        run(2000, 2000, 4100, force=(128, 3), beta=2.0)  # 3 splits over K, 256 tiles each: walked in every split
        run(2000, 1900, 333)                          # K not a multiple of the k tile
        # odd N: every other row of D (and C) starts 4 bytes off, its pairs stored a column on
        run(8384, 1527, 149, beta=0.5)
        for layout in ("NT", "TN", "TT"):
            run(2001, 1999, 64, beta=-1.0, layout=layout)
        # D's rows 4 bytes off where C's are aligned (and the reverse), and D = C in place
        a, b = rng.standard_normal((2001, 96), dtype=np.float32), rng.standard_normal((96, 1999), dtype=np.float32)
        ref = 1.5 * (cp.asarray(a, np.float64) @ cp.asarray(b, np.float64))
        for d_off, c_off in ((1, 0), (0, 1)):
            c = cp.asarray(rng.standard_normal((2001 * 2002 + 1,), dtype=np.float32))[c_off:c_off + 2001 * 2002]
            c = c.reshape(2001, 2002)[:, :1999]
            d = cp.full((2001 * 2002 + 1,), np.nan, np.float32)[d_off:d_off + 2001 * 2002].reshape(2001, 2002)[:, :1999]
            tilegemm.gemm(a, b, c, alpha=1.5, beta=-0.5, out=d, precision="tf32x3")
            assert _err(cp, d, ref - 0.5 * cp.asarray(c, np.float64)) < TOL["tf32x3"], (d_off, c_off)
        c = cp.asarray(rng.standard_normal((2001, 1999), dtype=np.float32))  # odd N: rows alternate
        want = ref + 2.0 * cp.asarray(c, np.float64)
        assert tilegemm.gemm(a, b, c, alpha=1.5, beta=2.0, out=c, precision="tf32x3") is c
        assert _err(cp, c, want) < TOL["tf32x3"]
        monkeypatch.setattr(hopper, "PACK_LIMIT", -1)  # unaligned: the producer's cp.async, a block a tile
        run(1001, 1999, 99)
    finally:
        tilegemm.clear_caches()


def _err(cp, out, ref):
    return float(cp.linalg.norm(out.astype(np.float64) - ref) / cp.linalg.norm(ref))


def _classes(cp):
    rng = cp.random.default_rng(7)
    n = 1024
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    yield "normal", a, b
    yield "scaled 2^60", a * np.float32(2.0**60), b * np.float32(2.0**60)
    yield "scaled 2^-60", a * np.float32(2.0**-60), b * np.float32(2.0**-60)
    yield "mixed magnitudes", a * cp.exp2(rng.integers(-20, 21, size=a.shape).astype(np.float32)), b
    yield "long K", rng.standard_normal((64, 262144), dtype=np.float32), rng.standard_normal((262144, 64),
                                                                                           dtype=np.float32)


@pytest.mark.parametrize("case", ["normal", "scaled 2^60", "scaled 2^-60", "mixed magnitudes", "long K"])
def test_tf32x3_is_as_accurate_as_cublas_sgemm(cp, case):
    """Normwise error against float64 no larger than cuBLAS SGEMM's on the same inputs (a 5% margin
    for the classes where both sit at FP32's rounding floor)."""
    name, a, b = next(c for c in _classes(cp) if c[0] == case)
    ref = cp.matmul(a.astype(np.float64), b.astype(np.float64))
    ours, cublas = _err(cp, tilegemm.matmul(a, b, precision="tf32x3"), ref), _err(cp, cp.matmul(a, b), ref)
    assert ours <= 1.05 * cublas, (name, ours, cublas)
    tf32 = _err(cp, tilegemm.matmul(a, b, precision="tf32"), ref)
    assert 1e-4 < tf32 < 2e-3  # TF32 is labelled as such: 7.7e-4 on normal data on Hopper (truncated), 3e-4 else


@pytest.mark.parametrize("precision", ["fp32", "tf32x3", "tf32"])
def test_nan_and_inf_propagate_as_in_sgemm(cp, precision):
    rng = cp.random.default_rng(3)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    a[3, 5], b[7, 2], a[9, :], a[9, 11], a[20, 30], b[30, :] = np.inf, np.nan, 0, -np.inf, np.inf, 1
    a.view(np.uint32)[40, 7] = 0x7FFFFFFF  # the NaN the GPU makes (all-ones mantissa)
    b[50, 60] = (cp.zeros(1, np.float32) / cp.zeros(1, np.float32))[0]  # 0 / 0 computed on the GPU
    ref, got = cp.matmul(a, b), tilegemm.matmul(a, b, precision=precision)
    for f in (cp.isnan, cp.isposinf, cp.isneginf):
        assert cp.array_equal(f(got), f(ref)), f.__name__
