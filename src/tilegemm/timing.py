"""How tilegemm checks and times an implementation, shared by the bench, the tuner and the ladder.

Checks: fresh random normal inputs (never zeros), the output poisoned with NaN (an unwritten element
fails), the relative Frobenius error ``||out - ref|| / ||ref||`` against a float64 reference.
Timing: CUDA events around batches of back-to-back launches, after warm-up, rotating among input
sets that together exceed the L2 cache three times (no warm-L2 numbers), median over the batches;
several implementations take turns batch by batch; small products are timed from CUDA graphs
(the GPU's time, not the host's).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from . import gpu

TOLERANCE = 1e-5  # relative Frobenius error against float64


def device(index: int):
    """A context in which CuPy works on GPU ``index``."""
    return gpu.cupy().cuda.Device(index)


def operands(M, N, K, layout="NN", batch=1, seed=None):
    """Random normal float32 CuPy operands in ``layout`` (T = a transposed view); with batch > 1,
    stacks of ``batch`` matrices (batch, rows, cols)."""
    cupy = gpu.cupy()
    rng = cupy.random.default_rng(seed)
    lead = (batch,) if batch > 1 else ()
    a = rng.standard_normal(lead + ((K, M) if layout[0] == "T" else (M, K)), dtype=np.float32)
    b = rng.standard_normal(lead + ((N, K) if layout[1] == "T" else (K, N)), dtype=np.float32)
    return (a.swapaxes(-1, -2) if layout[0] == "T" else a), (b.swapaxes(-1, -2) if layout[1] == "T" else b)


def reference(a, b):
    """a @ b in float64."""
    cupy = gpu.cupy()
    return cupy.matmul(a.astype(np.float64), b.astype(np.float64))


def rel_err(out, ref) -> float:
    """||out - ref|| / ||ref|| (Frobenius); inf where out holds a NaN or an infinity."""
    cupy = gpu.cupy()
    num = float(cupy.linalg.norm(out.astype(np.float64) - ref))
    den = float(cupy.linalg.norm(ref))
    if not math.isfinite(num):
        return float("inf")
    return num / den if den else num


def check(run, M, N, K, layout="NN", batch=1, inputs=None) -> float:
    """The relative error of ``run(a, b, out)`` on fresh inputs (or ``inputs`` = (a, b, ref)), its
    output poisoned with NaN first."""
    cupy = gpu.cupy()
    if inputs is None:
        a, b = operands(M, N, K, layout, batch)
        ref = reference(a, b)
    else:
        a, b, ref = inputs
    out = cupy.full(ref.shape, np.nan, dtype=np.float32)
    run(a, b, out)
    cupy.cuda.get_current_stream().synchronize()
    return rel_err(out, ref)


def n_sets(M, N, K, batch=1) -> int:
    """Input sets to rotate among so that together they exceed three times the L2 cache (<= 8)."""
    set_bytes = 4 * batch * (M * K + K * N + M * N)
    l2 = gpu.device_properties().l2_bytes or (50 << 20)
    return max(1, min(8, math.ceil(3 * l2 / set_bytes)))


def input_sets(M, N, K, layout="NN", batch=1) -> tuple[list, list]:
    """([(a, b)] * n_sets, [out] * n_sets) for timing."""
    cupy = gpu.cupy()
    n = n_sets(M, N, K, batch)
    shape = ((batch,) if batch > 1 else ()) + (M, N)
    return ([operands(M, N, K, layout, batch) for _ in range(n)],
            [cupy.empty(shape, dtype=np.float32) for _ in range(n)])


def time_launches(run, n_sets: int, target_s: float = 0.6, batch_ms: float = 15.0, graph: bool = False) -> float:
    """Milliseconds per ``run(i)`` (i = input set index): median over batches of back-to-back launches."""
    return time_interleaved([run], n_sets, target_s, batch_ms, graph)[0]


def time_interleaved(runs, n_sets: int, target_s: float = 0.6, batch_ms: float = 15.0, graph: bool = False) -> list[float]:
    """Milliseconds per call of each of ``runs`` (``run(i)``, i = input set index): the median over
    batches of back-to-back launches, the runs' batches taking turns so that drifts in clock,
    temperature and power over the measurement reach every run alike.  Each turn takes the runs in a
    new order (a fixed-seed shuffle): a batch runs faster right after one that drew less power (the
    clocks have not come down yet; a tensor-core kernel timed after cuBLAS SGEMM in every turn
    measured up to 10% above the same kernel timed after another), so no run always follows the
    same one.

    Each batch is timed with CUDA events.  A launch is queued before the start event so the GPU is
    busy when it is recorded, and batches are long enough that the host's per-call cost hides
    behind the queue instead of showing up as idle GPU time.  ``target_s``: the time each run gets.

    ``graph``: each run's batch is captured once into a CUDA graph (on a stream of its own) and the
    graph is replayed between the events, so that a call's time is the GPU's alone even where the
    host takes longer per call than the GPU (small products); every run must be capturable.
    """
    cupy = gpu.cupy()
    stream = cupy.cuda.get_current_stream()
    if graph:  # a stream of its own (capture), after everything queued so far (the inputs' fill)
        stream, ready = cupy.cuda.Stream(non_blocking=True), stream.record()
        stream.wait_event(ready)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()

    def eager(run, n: int, first: int):
        for r in range(n):
            run((first + r) % n_sets)

    def batch(run, n: int, first: int, replay=None) -> float:
        with stream if graph else contextlib.nullcontext():
            run(first % n_sets)
            start.record(stream)
            if replay is None:
                eager(run, n, first + 1)
            else:
                replay.launch(stream)
            end.record(stream)
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / n

    sizes, graphs = [], []
    for run in runs:
        batch(run, 1, 0)  # warm-up: module load, first touch, clocks
        one = batch(run, 1, 1)
        per_batch = max(1, min(200, int(batch_ms / max(one, 1e-3))))
        sizes.append((per_batch, max(5, min(30, int(target_s * 1e3 / max(one * per_batch, 1e-3))))))
        g = None
        if graph:
            with stream:
                stream.begin_capture()
                try:
                    eager(run, per_batch, 1)
                finally:
                    g = stream.end_capture()
            batch(run, per_batch, 0, g)  # the first replay uploads the graph
        graphs.append(g)
    times: list[list[float]] = [[] for _ in runs]
    rng = np.random.default_rng(0)
    for i in range(max(n for _, n in sizes)):
        for j in rng.permutation(len(runs)):
            per_batch, n_batches = sizes[j]
            if i < n_batches:
                times[j].append(batch(runs[j], per_batch, i * (per_batch + 1), graphs[j]))
    return [float(np.median(t)) for t in times]
