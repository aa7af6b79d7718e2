"""GPU (Hopper): B's rows that are not 16-byte aligned read by TMA (access.TMA_ROWS, tg_tma_rows.cuh),
switched on here for any product (TMA_ROWS_ON, TMA_ROWS_MIN_MACS = 0): every build the cost model
ranks on odd shapes, offset and padded views, against float64, each program checked to read B by
its four row classes' maps; then the property test of test_gemm.py with the rule on."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tilegemm
from tilegemm import access, fastpath, gpu, launch, model

from .test_gemm import CONFIGS, _matrix, cases, check_case

pytestmark = pytest.mark.gpu

TOL = 1e-5


@pytest.fixture
def tma_rows(cp, monkeypatch):
    if gpu.device_properties(gpu.current_device()).major < 9:
        pytest.skip("TMA is Hopper's (sm_90+)")
    monkeypatch.setattr(access, "TMA_ROWS_ON", True)
    monkeypatch.setattr(access, "TMA_ROWS_MIN_MACS", 0)
    tilegemm.clear_caches()
    yield
    tilegemm.clear_caches()  # no program built under this rule outlives the test


BUILDS = {model.build(n): cfg for n, cfg in model.candidates(2000, 2000, 20000, sms=132)
          + model.candidates(200, 200, 200, sms=132)}
SHAPES = [(37, 1, 5), (130, 3, 9), (257, 5, 1), (300, 131, 17), (129, 258, 1003), (64, 67, 64),
          (1000, 1001, 999), (200, 515, 4099), (77, 250, 33), (513, 1027, 130)]


@pytest.mark.parametrize("view", ["plain", "offset", "padded"])
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_every_build_reads_misaligned_b_by_tma(cp, tma_rows, build, view):
    rng = np.random.default_rng()
    cfg = {**BUILDS[build], "splits": 3 if build.endswith("summed") else 1}
    for M, N, K in SHAPES:
        a = _matrix(cp, rng, M, K, False, 0, 0)
        # offset: B 4 bytes into its buffer; padded: rows of an odd leading dimension longer than N
        b = _matrix(cp, rng, K, N, False, {"plain": 0, "offset": 0, "padded": 6 + (N % 2 == 0)}[view],
                    1 if view == "offset" else 0)
        if access.vector_width((int(b.data.ptr), b.strides[0] // 4), pairs=True) == 4:
            continue  # aligned rows: nothing for TMA to do
        ref = np.matmul(cp.asnumpy(a).astype(np.float64), cp.asnumpy(b).astype(np.float64))
        tilegemm.clear_caches()
        for _ in range(2):  # the second call through the memo
            out = cp.full((M, N), np.nan, dtype=np.float32)
            tilegemm.matmul(a, b, out=out, config=cfg)
            err = np.linalg.norm(cp.asnumpy(out) - ref) / max(np.linalg.norm(ref), 1e-30)
            assert err < TOL, (build, view, M, N, K, err)
        (entry,) = fastpath.entries()
        kernels = [st for st in entry.program.steps if len(st.args) == len(launch.GEMM_TMA_ROWS.fields)]
        assert kernels and all(len(st.maps) == 4 for st in kernels), (build, M, N, K)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_property_with_b_rows_read_by_tma(cp, tma_rows, case):
    check_case(cp, case, CONFIGS[case["config"]])


def test_b_by_tma_in_a_captured_graph(cp, tma_rows):
    """A product reading B by TMA replays from a CUDA graph (its maps are launch parameters) with new
    values in the same buffers."""
    rng = np.random.default_rng()
    M, N, K = 300, 1001, 700
    a, b = _matrix(cp, rng, M, K, False, 0, 0), _matrix(cp, rng, K, N, False, 0, 0)
    out = cp.full((M, N), np.nan, dtype=np.float32)
    cfg = {**model.TILES["64x64f"], "splits": 1, "sk": 1}
    tilegemm.matmul(a, b, out=out, config=cfg)  # compile and load outside the capture
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        tilegemm.matmul(a, b, out=out, config=cfg)
        graph = stream.end_capture()
    for _ in range(2):
        a[...] = cp.asarray(rng.standard_normal((M, K), dtype=np.float32))
        b[...] = cp.asarray(rng.standard_normal((K, N), dtype=np.float32))
        out[...] = np.nan
        graph.launch(stream)
        stream.synchronize()
        ref = np.matmul(cp.asnumpy(a).astype(np.float64), cp.asnumpy(b).astype(np.float64))
        assert np.linalg.norm(cp.asnumpy(out) - ref) / np.linalg.norm(ref) < TOL


@pytest.mark.parametrize("cfg,K,row", [
    ({**model.TILES["128x128"], "splits": 4}, 1004, 250),          # split 1 starts at 252: its first tile at 244
    ({**model.TILES["128x128"], "splits": 4, "sk": 2}, 1004, 250),  # the same, summed in the kernel
    ({**model.TILES["128x128"], "splits": 1, "sk": 1}, 1004, 997),  # a tile's last segment starts at 1000: at 996
])
def test_an_inf_before_a_split_stays_inf(cp, tma_rows, cfg, K, row):
    """A split or stream-K segment whose K is no multiple of bk starts its first tile before its first
    row; TMA reads those rows of B as they are (another split's), A's copies zero theirs: B's are zeroed
    too, so an Inf there gives Inf, as in every other build, not 0 x Inf = NaN."""
    rng = np.random.default_rng()
    M, N = 100, 129
    a = cp.asarray(np.abs(rng.standard_normal((M, K), dtype=np.float32)) + 0.5)
    b = cp.asarray(rng.standard_normal((K, N), dtype=np.float32))
    b[row, :] = np.inf
    out = tilegemm.matmul(a, b, config=cfg)
    (entry,) = fastpath.entries()
    assert any(st.maps for st in entry.program.steps)
    assert bool(cp.isposinf(out).all()), int(cp.isnan(out).sum())
