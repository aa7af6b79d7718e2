"""GPU: every rung against float64 on many shapes and layouts, outputs poisoned with NaN first."""

import numpy as np
import pytest

import tilegemm
from tilegemm import registry

from .conftest import rel_err

pytestmark = pytest.mark.gpu

TOL = 1e-5

FIXED = [
    (1, 1, 1), (1, 1, 7), (7, 1, 1), (1, 9, 1), (2, 3, 5), (13, 17, 19), (31, 37, 41),
    (127, 131, 137), (257, 263, 269), (1, 4096, 512), (4096, 1, 512), (1, 1, 8191),
    (64, 64, 1), (300, 200, 1), (4095, 4095, 4095), (128, 4096, 4096), (16, 1024, 2048),
    (1024, 16, 2048), (2, 2048, 3), (33, 65, 16384), (1000, 3, 1000), (3, 1000, 1000),
    (96, 96, 96), (128, 128, 8), (129, 129, 9), (255, 257, 7), (512, 511, 513),
    (1023, 1025, 33), (17, 4099, 63), (4099, 17, 63),
]


def _random_shapes(n, seed=12345):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        dims = [int(x) for x in np.exp(rng.uniform(0, np.log(1500), 3)).astype(int) + 1]
        out.append(tuple(dims))
    return out


SHAPES = FIXED + _random_shapes(30)
assert len(SHAPES) >= 50
LAYOUTS = registry.LAYOUTS


def operand(cp, rng, rows, cols, trans: bool, pad: int = 0):
    """rows x cols float32; trans -> a transposed view of a cols x (rows+pad) array; pad -> wider ld."""
    if trans:
        base = cp.asarray(rng.standard_normal((cols, rows + pad), dtype=np.float32))
        return base[:, :rows].T
    base = cp.asarray(rng.standard_normal((rows, cols + pad), dtype=np.float32))
    return base[:, :cols]


# rung 10 reads its operands with TMA (aligned rows only): its own tests are in test_precision.py
ANY_OPERANDS = [k for k in sorted(registry.RUNGS) if not registry.get(k).archs]


@pytest.mark.parametrize("kernel", ANY_OPERANDS)
def test_rung_against_float64(cp, kernel):
    rng = np.random.default_rng()  # fresh inputs on every run
    failures = []
    for i, (M, N, K) in enumerate(SHAPES):
        layout = LAYOUTS[i % 4]
        pad = int(rng.integers(0, 3)) if i % 3 == 0 else 0
        a = operand(cp, rng, M, K, layout[0] == "T", pad)
        b = operand(cp, rng, K, N, layout[1] == "T", pad)
        a0, b0 = a.copy(), b.copy()
        out = cp.full((M, N), np.nan, dtype=np.float32)
        res = tilegemm.matmul(a, b, out=out, kernel=kernel, precision=registry.get(kernel).precision)
        assert res is out
        err = rel_err(cp, out, a, b)
        if not err < TOL:
            failures.append(((M, N, K), layout, pad, err))
        assert cp.array_equal(a, a0) and cp.array_equal(b, b0), "an input was modified"
    assert not failures, f"{kernel}: {failures}"


@pytest.mark.parametrize("kernel", ANY_OPERANDS)
def test_column_major_out(cp, kernel):
    rng = np.random.default_rng()
    M, N, K = 77, 45, 129
    a, b = operand(cp, rng, M, K, False), operand(cp, rng, K, N, True)
    out = cp.full((N, M), np.nan, dtype=np.float32).T  # column-major M x N
    tilegemm.matmul(a, b, out=out, kernel=kernel, precision=registry.get(kernel).precision)
    assert rel_err(cp, out, a, b) < TOL


def test_default_kernel_allocates_result(cp):
    rng = np.random.default_rng()
    a, b = operand(cp, rng, 300, 200, False), operand(cp, rng, 200, 100, False)
    c = tilegemm.matmul(a, b)
    assert isinstance(c, cp.ndarray) and c.shape == (300, 100) and c.dtype == np.float32
    assert rel_err(cp, c, a, b) < TOL


def test_numpy_in_numpy_out(cp):
    rng = np.random.default_rng()
    a = rng.standard_normal((65, 33), dtype=np.float32)
    b = rng.standard_normal((33, 17), dtype=np.float32).T.copy().T  # column-major host view
    c = tilegemm.matmul(a, b)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < TOL
    out = np.full((65, 17), np.nan, dtype=np.float32)
    assert tilegemm.matmul(a, b, out=out) is out
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < TOL


def test_torch_zero_copy(cp):
    torch = pytest.importorskip("torch")
    a = torch.randn(129, 65, device="cuda")
    b = torch.randn(33, 65, device="cuda").T  # transposed view
    c = tilegemm.matmul(a, b)
    assert isinstance(c, torch.Tensor) and c.is_cuda and c.dtype == torch.float32
    ref = a.double() @ b.double()
    assert float((c.double() - ref).norm() / ref.norm()) < TOL
    out = torch.full((129, 33), float("nan"), device="cuda")
    assert tilegemm.matmul(a, b, out=out) is out
    assert float((out.double() - ref).norm() / ref.norm()) < TOL


def test_cuda_array_interface_object(cp):
    class Wrapped:
        def __init__(self, arr):
            self.arr = arr
            self.__cuda_array_interface__ = arr.__cuda_array_interface__

    rng = np.random.default_rng()
    a, b = operand(cp, rng, 40, 30, True), operand(cp, rng, 30, 20, False)
    c = tilegemm.matmul(Wrapped(a), Wrapped(b))
    assert isinstance(c, cp.ndarray)
    assert rel_err(cp, c, a, b) < TOL


def test_dlpack_object(cp):
    class OnlyDLPack:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    rng = np.random.default_rng()
    a, b = operand(cp, rng, 40, 30, False), operand(cp, rng, 30, 20, False)
    c = tilegemm.matmul(OnlyDLPack(a), OnlyDLPack(b))
    assert rel_err(cp, c, a, b) < TOL


def test_empty_and_k_zero(cp):
    a, b = cp.ones((0, 5), np.float32), cp.ones((5, 3), np.float32)
    assert tilegemm.matmul(a, b).shape == (0, 3)
    a, b = cp.ones((4, 0), np.float32), cp.ones((0, 3), np.float32)
    out = cp.full((4, 3), np.nan, np.float32)
    tilegemm.matmul(a, b, out=out)
    assert cp.all(out == 0)


def test_overlap_with_gpu_arrays_is_refused(cp):
    buf = cp.ones((8, 8), np.float32)
    with pytest.raises(ValueError, match="out overlaps a in memory"):
        tilegemm.matmul(buf, cp.ones((8, 8), np.float32), out=buf)


def test_strided_gpu_view_is_refused(cp):
    a = cp.ones((8, 8), np.float32)[::2, ::2]
    with pytest.raises(ValueError, match="would need a copy"):
        tilegemm.matmul(a, cp.ones((4, 4), np.float32))


STUDY = [  # GEMM part 2's parameter study (bm, bk, bn, rm, rn)
    (64, 16, 64, 4, 4), (64, 32, 64, 4, 4), (64, 4, 64, 8, 8), (64, 8, 64, 8, 8),
           (64, 16, 64, 8, 8), (64, 32, 64, 8, 8), (128, 16, 128, 8, 8), (128, 8, 128, 8, 8)]
ODD = [(1, 1, 1), (67, 129, 31), (255, 65, 130), (1000, 999, 77), (64, 64, 64), (130, 3, 1025), (4095, 33, 17)]


@pytest.mark.parametrize("cfg", STUDY)
def test_rung5_parameter_study_configs(cp, cfg):
    config = dict(zip(("bm", "bk", "bn", "rm", "rn"), cfg))
    rng = np.random.default_rng()
    for i, (M, N, K) in enumerate(ODD):
        layout = LAYOUTS[i % 4]
        a, b = operand(cp, rng, M, K, layout[0] == "T"), operand(cp, rng, K, N, layout[1] == "T")
        out = cp.full((M, N), np.nan, dtype=np.float32)
        tilegemm.matmul(a, b, out=out, kernel="05_double_buffered", config=config)
        err = rel_err(cp, out, a, b)
        assert err < TOL, (cfg, (M, N, K), layout, err)


@pytest.mark.parametrize("config", [{"swizzle": 0}, {"swizzle": 4}, {"swizzle": 16}, {"stages": 2},
                                    {"stages": 4}, {"ln": 4}, {"ln": 16}])
def test_rung8_variants(cp, config):
    rng = np.random.default_rng()
    for i, (M, N, K) in enumerate(ODD + [(1030, 2050, 300)]):
        layout = LAYOUTS[i % 4]
        a, b = operand(cp, rng, M, K, layout[0] == "T"), operand(cp, rng, K, N, layout[1] == "T")
        out = cp.full((M, N), np.nan, dtype=np.float32)
        tilegemm.matmul(a, b, out=out, kernel="08_hopper", config=config)
        assert rel_err(cp, out, a, b) < TOL, (config, (M, N, K), layout)


@pytest.mark.parametrize("kernel", [k for k in ANY_OPERANDS if k >= "04"])
def test_unaligned_operands_take_the_narrow_path(cp, kernel):
    rng = np.random.default_rng()
    M, N, K = 300, 260, 129
    a = cp.asarray(rng.standard_normal((M, K + 1), dtype=np.float32))[:, 1:]  # starts 4 bytes in
    b = cp.asarray(rng.standard_normal((K, N + 3), dtype=np.float32))[:, :N]  # ld = N + 3
    out = cp.full((M, N + 1), np.nan, dtype=np.float32)[:, 1:]  # unaligned output too
    tilegemm.matmul(a, b, out=out, kernel=kernel, precision=registry.get(kernel).precision)
    assert rel_err(cp, out, a, b) < TOL


@pytest.mark.parametrize("kernel", ["06_warp_tiled", "07_maxas"])
@pytest.mark.parametrize("bk", [8])
def test_warp_tiled_depths(cp, kernel, bk):
    rng = np.random.default_rng()
    for i, (M, N, K) in enumerate(ODD):
        layout = LAYOUTS[i % 4]
        a, b = operand(cp, rng, M, K, layout[0] == "T"), operand(cp, rng, K, N, layout[1] == "T")
        out = cp.full((M, N), np.nan, dtype=np.float32)
        tilegemm.matmul(a, b, out=out, kernel=kernel, config={"bk": bk})
        assert rel_err(cp, out, a, b) < TOL, (kernel, bk, (M, N, K), layout)
