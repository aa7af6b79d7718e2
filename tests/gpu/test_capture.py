"""GPU: every path captured into a CUDA graph, under CuPy's stream capture and torch.cuda.graph (its
default, global capture mode), replayed 100 times with fresh inputs between replays; two graphs
replayed at once on two streams; eager calls between replays.

The split-K workspace and the stream-K flags are allocated, zeroed and freed inside the graph
(launch.Program._run_captured), so a replay never sees the flags an earlier replay set."""

import numpy as np
import pytest

import tilegemm
from tilegemm import autotune, builds, registry, selection, timing

from .conftest import rel_err

pytestmark = pytest.mark.gpu

TOL = 1e-5
REPLAYS = 100
SK2 = {**selection.BIG, "splits": 3, "sk": 2}
# (name, shape (M, N, K, batch), config, kernel, precision)
PATHS = [
    ("plain", (700, 500, 300, 1), {**selection.BIG, "splits": 1}, None),
    ("default", (1000, 900, 700, 1), None, None),
    ("split-K", (1000, 900, 700, 1), {**selection.BIG, "splits": 3}, None),
    ("split-sum", (1000, 900, 700, 1), SK2, None),
    ("split-sum, small tiles", (300, 1000, 2000, 1), {**selection.MEDIUM, "splits": 4, "sk": 2}, None),
    ("stream-K", (3000, 1000, 500, 1), {**selection.BIG, "splits": 1, "sk": 1}, None),
    ("stream-K, small", (1024, 1024, 1024, 1), {**autotune.SK_SMALL, "splits": 1, "sk": 1}, None),
    ("batched", (300, 200, 100, 3), None, None),
    ("batched split-K", (300, 200, 1000, 2), {**selection.BIG, "splits": 2}, None),
    ("K = 0", (64, 48, 0, 1), None, None),
    ("small product, 32 x 32 tiles", (64, 64, 64, 1), None, None),
    ("small product, 32 x 32 split-sum", (45, 106, 676, 1), {**builds.TILES["32x32"], "splits": 4, "sk": 2}, None),
    # the tensor cores: rung 10's kernel on Hopper (one launch; split-K with its reduction), the
    # mma.sync family (a config names it)
    ("tf32x3 wgmma", (1000, 900, 700, 1), None, None, "tf32x3"),
    ("tf32x3 wgmma split-K", (64, 64, 40000, 1), None, None, "tf32x3"),
    ("tf32 wgmma", (1000, 900, 700, 1), None, None, "tf32"),
    ("tf32x3 mma.sync split-K", (300, 200, 1000, 1), {**selection.MMA_SMALL, "splits": 3}, None, "tf32x3"),
] + [(f"rung {name}", (132, 68, 92, 2), None, name, registry.get(name).precision) for name in tilegemm.kernels()[1:]]
PATHS = [p if len(p) == 5 else p + ("fp32",) for p in PATHS]


def _inputs(xp, shape, rng):
    M, N, K, batch = shape
    lead = (batch,) if batch > 1 else ()
    a = xp.asarray(rng.standard_normal(lead + (M, K), dtype=np.float32))
    b = xp.asarray(rng.standard_normal(lead + (K, N), dtype=np.float32))
    return a, b


def _check(cp, out, a, b, precision="fp32"):
    if a.shape[-1] == 0:
        assert float(cp.abs(out).max()) == 0.0
        return
    assert rel_err(cp, out, a, b) < (5e-3 if precision == "tf32" else TOL)


@pytest.mark.parametrize("name,shape,config,kernel,precision", PATHS, ids=[p[0] for p in PATHS])
def test_cupy_capture_and_replay(cp, name, shape, config, kernel, precision):
    rng = np.random.default_rng()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a, b = _inputs(cp, shape, rng)
        out = cp.full(a.shape[:-1] + b.shape[-1:], np.nan, np.float32)
        tilegemm.matmul(a, b, out=out, config=config, kernel=kernel, precision=precision)  # warm-up: compile, load, memo
        stream.synchronize()
        stream.begin_capture()
        tilegemm.matmul(a, b, out=out, config=config, kernel=kernel, precision=precision)
        graph = stream.end_capture()
        for r in range(REPLAYS):
            new_a, new_b = _inputs(cp, shape, rng)
            a[...] = new_a
            b[...] = new_b
            out.fill(np.nan)
            graph.launch(stream)
            if r % 10 == 0 or r == REPLAYS - 1:
                stream.synchronize()
                _check(cp, out, a, b, precision)


@pytest.mark.parametrize("name,shape,config,kernel,precision", PATHS, ids=[p[0] for p in PATHS])
def test_torch_graph_capture_and_replay(cp, name, shape, config, kernel, precision):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    a, b = (torch.as_tensor(x, device="cuda") for x in _inputs(np, shape, rng))
    out = torch.full(a.shape[:-1] + b.shape[-1:], float("nan"), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch asks
        tilegemm.matmul(a, b, out=out, config=config, kernel=kernel, precision=precision)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tilegemm.matmul(a, b, out=out, config=config, kernel=kernel, precision=precision)
    for r in range(REPLAYS):
        new_a, new_b = (torch.as_tensor(x, device="cuda") for x in _inputs(np, shape, rng))
        a.copy_(new_a)
        b.copy_(new_b)
        out.fill_(float("nan"))
        g.replay()
        if r % 10 == 0 or r == REPLAYS - 1:
            torch.cuda.synchronize()
            _check(cp, cp.asarray(out), cp.asarray(a), cp.asarray(b), precision)


@pytest.mark.parametrize("config", [{**selection.BIG, "splits": 1, "sk": 1}, SK2], ids=["stream-K", "split-sum"])
def test_two_graphs_replayed_at_once_on_two_streams_with_eager_calls_between(cp, config):
    rng = np.random.default_rng()
    shape = (3000, 1000, 500, 1)
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    sets, graphs = [], []
    for s in streams:
        with s:
            a, b = _inputs(cp, shape, rng)
            out = cp.full((shape[0], shape[1]), np.nan, np.float32)
            tilegemm.matmul(a, b, out=out, config=config)
            s.synchronize()
            s.begin_capture()
            tilegemm.matmul(a, b, out=out, config=config)
            graphs.append(s.end_capture())
            sets.append((a, b, out))
    ea, eb = _inputs(cp, shape, rng)
    eager_out = cp.empty((shape[0], shape[1]), np.float32)
    for r in range(REPLAYS // 2):
        for (a, b, out), s in zip(sets, streams):
            with s:
                a[...], b[...] = _inputs(cp, shape, rng)
                out.fill(np.nan)
        for g, s in zip(graphs, streams):
            g.launch(s)
        with streams[0]:  # an eager stream-K call on a stream a graph is replaying on
            tilegemm.matmul(ea, eb, out=eager_out, config=config)
        if r % 10 == 0 or r == REPLAYS // 2 - 1:
            for (a, b, out), s in zip(sets, streams):
                s.synchronize()
                _check(cp, out, a, b)
            _check(cp, eager_out, ea, eb)


def test_graph_timing_replays_the_calls_it_captured():
    """timing's graph mode (the small products' calibration): the captured calls compute the right
    product, and a product of 64^3 takes the GPU a few microseconds, not the host's ~10 per call."""
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(3)
    sets = [(cp.asarray(rng.standard_normal((64, 64), dtype=np.float32)),
             cp.asarray(rng.standard_normal((64, 64), dtype=np.float32))) for _ in range(3)]
    outs = [cp.full((64, 64), np.nan, dtype=cp.float32) for _ in sets]
    ms = timing.time_launches(lambda i: tilegemm.matmul(*sets[i], out=outs[i]), len(sets), target_s=0.02,
                              batch_ms=1.0, graph=True)
    for (a, b), o in zip(sets, outs):
        assert rel_err(cp, o, a, b) < TOL
    assert 0 < ms < 8e-3
