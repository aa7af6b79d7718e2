"""Verify, then time kernels beside cuBLAS; write the results JSON (format: benchmarks/README.md).

Method: fresh random normal inputs (never zeros), output poisoned with NaN before the checked run,
error = ||out - ref|| / ||ref|| against float64; timing with CUDA events around each launch, after
warm-up, rotating among input sets that together exceed the L2 cache, median of the timed runs.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import api, runtime
from ._version import __version__

SCHEMA = 1
TOLERANCE = 1e-5  # relative Frobenius error against float64


@dataclass
class Row:
    kernel: str
    M: int
    N: int
    K: int
    layout: str
    batch: int
    tflops: float
    ms: float
    cublas_tflops: float
    ratio: float
    rel_err: float
    config: dict | None = None  # kernel parameters, where not the kernel's defaults


def parse_size(text: str) -> tuple[int, int, int]:
    """``"4096"`` -> (4096, 4096, 4096); ``"128x4096x4096"`` -> (M, N, K)."""
    parts = [p for p in re.split(r"[x,*]", text.lower().strip()) if p]
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"size {text!r} is not N or MxNxK") from None
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or min(dims) < 1:
        raise ValueError(f"size {text!r} is not N or MxNxK with positive numbers")
    return tuple(dims)


def _cupy():
    return runtime._cupy()


def make_operands(M, N, K, layout="NN", seed=None, cupy=None):
    """Random normal float32 operands in the given layout (T = a transposed view)."""
    cupy = cupy or _cupy()
    rng = cupy.random.default_rng(seed)
    a = rng.standard_normal((K, M) if layout[0] == "T" else (M, K), dtype=np.float32)
    b = rng.standard_normal((N, K) if layout[1] == "T" else (K, N), dtype=np.float32)
    return (a.T if layout[0] == "T" else a), (b.T if layout[1] == "T" else b)


def rel_err(out, a, b) -> float:
    cupy = _cupy()
    ref = cupy.matmul(a.astype(np.float64), b.astype(np.float64))
    num = float(cupy.linalg.norm(out.astype(np.float64) - ref))
    den = float(cupy.linalg.norm(ref))
    if not math.isfinite(num):
        return float("inf")
    return num / den if den else num


def time_launches(run, n_sets: int, target_s: float = 0.6, batch_ms: float = 15.0) -> float:
    """Milliseconds per ``run(i)`` (i = input set index): median over batches of back-to-back launches.

    Each batch is timed with CUDA events.  A launch is queued before the start event so the GPU is
    busy when it is recorded, and batches are long enough that the host's per-call cost hides
    behind the queue instead of showing up as idle GPU time.
    """
    cupy = _cupy()
    stream = cupy.cuda.get_current_stream()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()

    def batch(n: int, first: int) -> float:
        run(first % n_sets)
        start.record(stream)
        for r in range(n):
            run((first + 1 + r) % n_sets)
        end.record(stream)
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / n

    batch(1, 0)  # warm-up: module load, first touch, clocks
    one = batch(1, 1)
    per_batch = max(1, min(200, int(batch_ms / max(one, 1e-3))))
    n_batches = max(5, min(30, int(target_s * 1e3 / max(one * per_batch, 1e-3))))
    times = [batch(per_batch, i * (per_batch + 1)) for i in range(n_batches)]
    return float(np.median(times))


def _n_sets(M, N, K, batch=1) -> int:
    set_bytes = 4 * batch * (M * K + K * N + M * N)
    l2 = runtime.device_properties().l2_bytes or (50 << 20)
    return max(1, min(8, math.ceil(3 * l2 / set_bytes)))


def measure(kernels, M, N, K, layout="NN", progress=None) -> list[Row]:
    """cuBLAS first, then each kernel (a name, or (name, config)): checked against float64, then
    timed.  One Row each."""
    cupy = _cupy()
    n_sets = _n_sets(M, N, K)
    sets = [make_operands(M, N, K, layout) for _ in range(n_sets)]
    outs = [cupy.empty((M, N), dtype=np.float32) for _ in range(n_sets)]
    flop = 2.0 * M * N * K

    def check(fn) -> float:
        a, b = make_operands(M, N, K, layout)  # fresh inputs for every check
        out = cupy.full((M, N), np.nan, dtype=np.float32)  # poison: unwritten elements fail
        fn(a, b, out)
        cupy.cuda.get_current_stream().synchronize()
        return rel_err(out, a, b)

    def cublas(a, b, out):
        cupy.matmul(a, b, out=out)

    rows = []
    err = check(cublas)
    ms = time_launches(lambda i: cublas(*sets[i], outs[i]), n_sets)
    ref_tflops = flop / ms / 1e9
    rows.append(Row("cublas", M, N, K, layout, 1, ref_tflops, ms, ref_tflops, 1.0, err))
    if progress:
        progress(rows[-1])
    for entry in kernels:
        name, config = (entry, None) if isinstance(entry, str) else entry

        def ours(a, b, out, name=name, config=config):
            api.matmul(a, b, out=out, kernel=name, config=config)

        err = check(ours)
        if not err < TOLERANCE:
            ms = float("nan")  # a wrong kernel is not timed
        else:
            ms = time_launches(lambda i: ours(*sets[i], outs[i]), n_sets)
        tflops = flop / ms / 1e9
        rows.append(Row(name, M, N, K, layout, 1, tflops, ms, ref_tflops, tflops / ref_tflops, err, config))
        if progress:
            progress(rows[-1])
    return rows


# --------------------------------------------------------------------------- results file


def _driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        v = _cupy().cuda.runtime.driverGetVersion()
        return f"CUDA {v // 1000}.{v % 1000 // 10}"


def environment() -> dict:
    from . import compiler

    cupy = _cupy()
    props = runtime.device_properties()
    try:
        import torch

        torch_v = torch.__version__
    except Exception:
        torch_v = None
    return {
        "gpu": props.name,
        "sm": f"{props.major}{props.minor}",
        "sms": props.sms,
        "driver": _driver_version(),
        "versions": {
            "tilegemm": __version__,
            "cupy": cupy.__version__,
            "nvrtc": "%d.%d" % compiler.nvrtc_version(),
            "torch": torch_v,
        },
    }


def results_document(rows: list[Row], env: dict | None = None, **extra) -> dict:
    doc = {"schema": SCHEMA, "date": _dt.date.today().isoformat(), **(env or environment())}
    doc.update(extra)
    doc["rows"] = [asdict(r) if isinstance(r, Row) else r for r in rows]
    return doc


def _json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def write_results(doc: dict, directory: str | os.PathLike = "benchmarks/results", tag: str | None = None) -> Path:
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", doc["gpu"]).strip("-")
    name = f"{gpu}-{doc['date']}" + (f"-{tag}" if tag else "") + ".json"
    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(doc), indent=1) + "\n")
    return path
