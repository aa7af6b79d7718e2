"""GPU: B's rows that are not 16-byte aligned staged into aligned rows by the blocks of split-K summed
in the kernel (access.STAGED, tg_staged_b.cuh), switched on here (STAGED_ON): every build that stages
(model.STAGED_BUILDS) on odd shapes, offset and padded views and several split counts, against
float64, each program checked to stage B; repeated calls (new epochs), two streams at once, a
captured graph, and the property test of test_gemm.py with staging on."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tilegemm
from tilegemm import access, fastpath, kernelspec, launch, model

from .test_gemm import CONFIGS, _matrix, cases, check_case

pytestmark = pytest.mark.gpu

TOL = 1e-5


@pytest.fixture
def staging(cp, monkeypatch):
    monkeypatch.setattr(access, "STAGED_ON", True)
    tilegemm.clear_caches()
    yield
    tilegemm.clear_caches()  # no program built under this rule outlives the test


SHAPES = [(37, 1, 5), (130, 3, 9), (300, 131, 17), (129, 258, 1003), (64, 67, 64), (200, 515, 4099), (77, 250, 33),
          (283, 1545, 1629), (513, 1027, 130)]


def _staged(program) -> bool:
    return any(len(st.args) == len(launch.GEMM_STAGED.fields) for st in program.steps)


def _check(cp, a, b, cfg, runs=2):
    ref = np.matmul(cp.asnumpy(a).astype(np.float64), cp.asnumpy(b).astype(np.float64))
    for _ in range(runs):  # the later calls through the memo, at new epochs
        out = cp.full((a.shape[0], b.shape[1]), np.nan, dtype=np.float32)
        tilegemm.matmul(a, b, out=out, config=cfg)
        err = np.linalg.norm(cp.asnumpy(out) - ref) / max(np.linalg.norm(ref), 1e-30)
        assert err < TOL, (cfg, a.shape, b.shape, err)


@pytest.mark.parametrize("view", ["plain", "offset", "padded"])
@pytest.mark.parametrize("splits", [1, 3, 8])
@pytest.mark.parametrize("build", model.STAGED_BUILDS)
def test_every_staging_build_on_odd_shapes(cp, staging, build, splits, view):
    rng = np.random.default_rng()
    cfg = {**model.TILES[build.split()[0]], "splits": splits, "sk": 2}
    staged = 0
    for M, N, K in SHAPES:
        a = _matrix(cp, rng, M, K, False, 0, 0)
        # offset: B 4 bytes past an aligned start; padded: rows of an odd leading dimension longer than N
        b = _matrix(cp, rng, K, N, False, {"plain": 0, "offset": 0, "padded": 6 + (N % 2 == 0)}[view],
                    1 if view == "offset" else 0)
        if access.vector_width((int(b.data.ptr), b.strides[0] // 4), pairs=True) == 4:
            continue  # aligned rows: nothing to stage
        tilegemm.clear_caches()
        _check(cp, a, b, cfg)
        (entry,) = fastpath.entries()
        staged += _staged(entry.program)
    assert staged > 0  # the small shapes' blocks fit in one launch


def test_staging_on_two_streams_at_once(cp, staging):
    """Two products staging B on two streams at once: each stream's epochs and chunk flags are its own."""
    rng = np.random.default_rng()
    cfg = {**model.TILES["64x64"], "splits": 4, "sk": 2}
    pairs = [(_matrix(cp, rng, 300, 2001, False, 0, 0), _matrix(cp, rng, 2001, 515, False, 0, 1)) for _ in range(2)]
    refs = [np.matmul(cp.asnumpy(a).astype(np.float64), cp.asnumpy(b).astype(np.float64)) for a, b in pairs]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in pairs]
    outs = [cp.full((300, 515), np.nan, dtype=np.float32) for _ in pairs]
    for _ in range(3):
        for (a, b), out, s in zip(pairs, outs, streams):
            with s:
                out[...] = np.nan  # on the product's stream, before it
                tilegemm.matmul(a, b, out=out, config=cfg)
        for s in streams:
            s.synchronize()
        for out, ref in zip(outs, refs):
            assert np.linalg.norm(cp.asnumpy(out) - ref) / np.linalg.norm(ref) < TOL
    assert all(_staged(e.program) for e in fastpath.entries())


def test_staging_in_a_captured_graph(cp, staging):
    """A staging product replays from a CUDA graph (its flags zeroed in the graph's own memory) with new
    values in the same buffers."""
    rng = np.random.default_rng()
    M, N, K = 300, 1001, 1700
    a, b = _matrix(cp, rng, M, K, False, 0, 0), _matrix(cp, rng, K, N, False, 0, 0)
    out = cp.full((M, N), np.nan, dtype=np.float32)
    cfg = {**model.TILES["64x64f"], "splits": 3, "sk": 2}
    tilegemm.matmul(a, b, out=out, config=cfg)  # compile and load outside the capture
    (entry,) = fastpath.entries()
    assert _staged(entry.program)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        tilegemm.matmul(a, b, out=out, config=cfg)
        graph = stream.end_capture()
    for _ in range(3):
        with stream:  # the refills on the graph's stream, before it
            a[...] = cp.asarray(rng.standard_normal((M, K), dtype=np.float32))
            b[...] = cp.asarray(rng.standard_normal((K, N), dtype=np.float32))
            out[...] = np.nan
        graph.launch(stream)
        stream.synchronize()
        ref = np.matmul(cp.asnumpy(a).astype(np.float64), cp.asnumpy(b).astype(np.float64))
        assert np.linalg.norm(cp.asnumpy(out) - ref) / np.linalg.norm(ref) < TOL


def test_an_inf_before_a_split_stays_inf(cp, staging):
    """A split whose K is no multiple of bk starts its first tile before its first row; those rows are
    another split's, which this split's blocks do not stage: the copies zero them, so an Inf there
    gives Inf, as without staging, not 0 x Inf = NaN."""
    rng = np.random.default_rng()
    M, N, K = 100, 129, 1004
    a = cp.asarray(np.abs(rng.standard_normal((M, K), dtype=np.float32)) + 0.5)
    b = cp.asarray(rng.standard_normal((K, N), dtype=np.float32))
    b[250, :] = np.inf  # split 1 of 4 starts at 252, its first tile at 248
    out = tilegemm.matmul(a, b, config={**model.TILES["128x128"], "splits": 4, "sk": 2})
    (entry,) = fastpath.entries()
    assert _staged(entry.program)
    assert bool(cp.isposinf(out).all()), int(cp.isnan(out).sum())


def test_late_chunks_copied_by_the_waiting_block(cp, staging, monkeypatch):
    """Built with a patience of one poll, nearly every chunk wait gives up and its block copies the whole
    chunk itself, over the copies of the chunk's own blocks (the same values): the result stays exact."""
    plain = kernelspec.KernelSpec.defines

    def impatient(self, params, layout="NN", vec=4, wide=False):
        d = plain(self, params, layout, vec, wide)
        return {**d, "TG_STAGE_PATIENCE": 1} if "TG_STAGE_CH" in d else d

    monkeypatch.setattr(kernelspec.KernelSpec, "defines", impatient)
    monkeypatch.setattr(launch, "_launchers", {})  # loaded kernels are remembered by config, not by defines
    rng = np.random.default_rng()
    for build, splits in (("64x64 summed", 4), ("64x128 summed", 3)):
        cfg = {**model.TILES[build.split()[0]], "splits": splits, "sk": 2}
        a, b = _matrix(cp, rng, 300, 2001, False, 0, 0), _matrix(cp, rng, 2001, 515, False, 0, 1)
        tilegemm.clear_caches()
        _check(cp, a, b, cfg, runs=3)
        (entry,) = fastpath.entries()
        assert _staged(entry.program)
    tilegemm.clear_caches()  # no impatient program outlives the test


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_property_with_b_staged(cp, staging, case):
    check_case(cp, case, CONFIGS[case["config"]])
