"""Verify, then time kernels beside cuBLAS; write the results JSON (format: benchmarks/README.md).

Method: fresh random normal inputs (never zeros), output poisoned with NaN before the checked run,
error = ||out - ref|| / ||ref|| against float64; timing with CUDA events around batches of
back-to-back launches, after warm-up, rotating among input sets that together exceed the L2 cache,
median of the timed batches; the implementations of one case take turns batch by batch.
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
    selected: dict | None = None  # the tuned path: the config it chose and where from


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


def parse_case(text: str) -> tuple[int, int, int, int]:
    """A bench or tune case: ``parse_size``'s forms, (M, N, K, 1), or ``"64x512x512x512"`` -> a batch
    of 64 products of 512 x 512 x 512: (M, N, K, 64)."""
    parts = [p for p in re.split(r"[x,*]", text.lower().strip()) if p]
    if len(parts) != 4:
        return (*parse_size(text), 1)
    try:
        batch, *dims = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"case {text!r} is not N, MxNxK or BATCHxMxNxK") from None
    if min(batch, *dims) < 1:
        raise ValueError(f"case {text!r} is not N, MxNxK or BATCHxMxNxK with positive numbers")
    return (*dims, batch)


def _cupy():
    return runtime._cupy()


def make_operands(M, N, K, layout="NN", seed=None, cupy=None, batch=1):
    """Random normal float32 operands in the given layout (T = a transposed view); with batch > 1,
    stacks of ``batch`` matrices (count, rows, cols)."""
    cupy = cupy or _cupy()
    rng = cupy.random.default_rng(seed)
    lead = (batch,) if batch > 1 else ()
    a = rng.standard_normal(lead + ((K, M) if layout[0] == "T" else (M, K)), dtype=np.float32)
    b = rng.standard_normal(lead + ((N, K) if layout[1] == "T" else (K, N)), dtype=np.float32)
    return (a.swapaxes(-1, -2) if layout[0] == "T" else a), (b.swapaxes(-1, -2) if layout[1] == "T" else b)


def rel_err(out, a, b) -> float:
    cupy = _cupy()
    ref = cupy.matmul(a.astype(np.float64), b.astype(np.float64))
    num = float(cupy.linalg.norm(out.astype(np.float64) - ref))
    den = float(cupy.linalg.norm(ref))
    if not math.isfinite(num):
        return float("inf")
    return num / den if den else num


def time_launches(run, n_sets: int, target_s: float = 0.6, batch_ms: float = 15.0) -> float:
    """Milliseconds per ``run(i)`` (i = input set index): median over batches of back-to-back launches."""
    return time_interleaved([run], n_sets, target_s, batch_ms)[0]


def time_interleaved(runs, n_sets: int, target_s: float = 0.6, batch_ms: float = 15.0) -> list[float]:
    """Milliseconds per call of each of ``runs`` (``run(i)``, i = input set index): the median over
    batches of back-to-back launches, the runs' batches taking turns (run 0, 1, ..., 0, 1, ...) so
    that drifts in clock, temperature and power over the measurement reach every run alike.

    Each batch is timed with CUDA events.  A launch is queued before the start event so the GPU is
    busy when it is recorded, and batches are long enough that the host's per-call cost hides
    behind the queue instead of showing up as idle GPU time.  ``target_s``: the time each run gets.
    """
    cupy = _cupy()
    stream = cupy.cuda.get_current_stream()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()

    def batch(run, n: int, first: int) -> float:
        run(first % n_sets)
        start.record(stream)
        for r in range(n):
            run((first + 1 + r) % n_sets)
        end.record(stream)
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / n

    sizes = []
    for run in runs:
        batch(run, 1, 0)  # warm-up: module load, first touch, clocks
        one = batch(run, 1, 1)
        per_batch = max(1, min(200, int(batch_ms / max(one, 1e-3))))
        sizes.append((per_batch, max(5, min(30, int(target_s * 1e3 / max(one * per_batch, 1e-3))))))
    times: list[list[float]] = [[] for _ in runs]
    for i in range(max(n for _, n in sizes)):
        for j, (run, (per_batch, n_batches)) in enumerate(zip(runs, sizes)):
            if i < n_batches:
                times[j].append(batch(run, per_batch, i * (per_batch + 1)))
    return [float(np.median(t)) for t in times]


def _n_sets(M, N, K, batch=1) -> int:
    set_bytes = 4 * batch * (M * K + K * N + M * N)
    l2 = runtime.device_properties().l2_bytes or (50 << 20)
    return max(1, min(8, math.ceil(3 * l2 / set_bytes)))


def _torch_mm():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # strict FP32 (cuBLAS SGEMM)

    def run(a, b, out):
        torch.matmul(torch.from_dlpack(a), torch.from_dlpack(b), out=torch.from_dlpack(out))

    return run


def _triton_mm():
    import torch

    from . import triton_ref

    def run(a, b, out):
        ta, tb, to = (torch.from_dlpack(x) for x in (a, b, out))
        if ta.dim() == 2:
            ta, tb, to = ta.unsqueeze(0), tb.unsqueeze(0), to.unsqueeze(0)
        triton_ref.matmul(ta, tb, to)

    return run


REFERENCES = {"torch": _torch_mm, "triton": _triton_mm}


def available_references() -> list[str]:
    out = []
    try:
        import torch  # noqa: F401

        out.append("torch")
        from . import triton_ref

        if triton_ref.available():
            out.append("triton")
    except Exception:
        pass
    return out


def measure(kernels, M, N, K, layout="NN", progress=None, batch=1, refs=()) -> list[Row]:
    """cuBLAS, the other references (``refs``: "torch", "triton") and each kernel (a name, "gemm"
    for the default tuned path, or (name, config)): each checked against float64, then all timed
    together (``time_interleaved``).  One Row each, cuBLAS first."""
    cupy = _cupy()
    n_sets = _n_sets(M, N, K, batch)
    sets = [make_operands(M, N, K, layout, batch=batch) for _ in range(n_sets)]
    oshape = ((batch,) if batch > 1 else ()) + (M, N)
    outs = [cupy.empty(oshape, dtype=np.float32) for _ in range(n_sets)]
    flop = 2.0 * M * N * K * batch

    def check(fn) -> float:
        a, b = make_operands(M, N, K, layout, batch=batch)  # fresh inputs for every check
        out = cupy.full(oshape, np.nan, dtype=np.float32)  # poison: unwritten elements fail
        fn(a, b, out)
        cupy.cuda.get_current_stream().synchronize()
        return rel_err(out, a, b)

    entries = [("cublas", lambda a, b, out: cupy.matmul(a, b, out=out), None, None)]
    entries += [(name, REFERENCES[name](), None, None) for name in refs]
    for entry in kernels:
        name, config = (entry, None) if isinstance(entry, str) else entry
        if name in ("gemm", "tilegemm") and config is None:
            from . import tuning

            cfg, src = tuning.selector(runtime.current_device()).source(layout, M, N, K, batch)
            entries.append(("tilegemm", lambda a, b, out: api.matmul(a, b, out=out), None, {"source": src, **cfg}))
        else:
            entries.append((name, lambda a, b, out, name=name, config=config:
                            api.matmul(a, b, out=out, kernel=name, config=config), config, None))
    # every implementation is checked first; the ones that pass are timed together, taking turns
    errs = [check(fn) for _, fn, _, _ in entries]
    timed = [j for j, err in enumerate(errs) if err < TOLERANCE]
    ms = [float("nan")] * len(entries)
    for j, t in zip(timed, time_interleaved([lambda i, fn=entries[j][1]: fn(*sets[i], outs[i]) for j in timed],
                                            n_sets)):
        ms[j] = t
    ref_tflops = flop / ms[0] / 1e9
    rows = []
    for (name, _, config, selected), err, t in zip(entries, errs, ms):
        tflops = flop / t / 1e9
        rows.append(Row(name, M, N, K, layout, batch, tflops, t, ref_tflops, tflops / ref_tflops, err, config,
                        selected))
        if progress:
            progress(rows[-1])
    return rows


# The suite of ../shared/ANCHORS.md plus the other layouts at 4096³ and batched cases:
# (M, N, K, layout, batch)
SUITE = [
    (1024, 1024, 1024, "NN", 1), (2048, 2048, 2048, "NN", 1), (4096, 4096, 4096, "NN", 1),
    (8192, 8192, 8192, "NN", 1), (4096, 4096, 1024, "NN", 1), (1024, 1024, 16384, "NN", 1),
    (128, 4096, 4096, "NN", 1), (16, 4096, 4096, "NN", 1), (4095, 4095, 4095, "NN", 1),
    (3000, 1000, 500, "NN", 1), (256, 256, 256, "NN", 1),
    (4096, 4096, 4096, "NT", 1), (4096, 4096, 4096, "TN", 1), (4096, 4096, 4096, "TT", 1),
    (512, 512, 512, "NN", 64), (2048, 2048, 2048, "NN", 8), (128, 128, 128, "NN", 256),
]


def geomean(xs) -> float:
    xs = [x for x in xs if x and x == x]
    return float(math.exp(sum(math.log(x) for x in xs) / len(xs))) if xs else float("nan")


def plot_suite(doc: dict, path) -> None:
    """Bars per suite case: TFLOPS of every implementation, cuBLAS first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc["rows"] if not r.get("config")]
    cases, impls = [], []
    for r in rows:
        key = (r["M"], r["N"], r["K"], r["layout"], r["batch"])
        if key not in cases:
            cases.append(key)
        if r["kernel"] not in impls:
            impls.append(r["kernel"])
    val = {((r["M"], r["N"], r["K"], r["layout"], r["batch"]), r["kernel"]): r["tflops"] for r in rows}
    fig, ax = plt.subplots(figsize=(max(8, len(cases) * 0.9), 4.5))
    width = 0.8 / max(1, len(impls))
    for i, impl in enumerate(impls):
        ys = [val.get((c, impl)) or 0.0 for c in cases]
        ax.bar([x + i * width for x in range(len(cases))], ys, width, label=impl)
    labels = [(f"{c[4]}x" if c[4] > 1 else "") + f"{c[0]}x{c[1]}x{c[2]}" + ("" if c[3] == "NN" else f" {c[3]}")
              for c in cases]
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(cases))], labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("TFLOPS (FP32)")
    ax.set_title(f"tilegemm bench on {doc['gpu']} ({doc['date']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def call_overhead(sizes=(64, 256), calls: int = 2000, repeats: int = 5) -> list[dict]:
    """Host time per call (µs) of tilegemm.matmul, cupy.matmul and torch.matmul with ``out=``,
    at sizes where the GPU work is a few microseconds: the calls are issued back to back and the
    wall time is divided by their number (median of ``repeats``)."""
    import time

    cupy = _cupy()
    fns = {"tilegemm": lambda a, b, o: api.matmul(a, b, out=o),
           "cupy": lambda a, b, o: cupy.matmul(a, b, out=o)}
    try:
        import torch

        fns["torch"] = lambda a, b, o: torch.matmul(a, b, out=o)
    except Exception:
        torch = None
    rows = []
    for n in sizes:
        a, b = make_operands(n, n, n)
        o = cupy.empty((n, n), np.float32)
        for name, fn in fns.items():
            args = (a, b, o)
            if name == "torch":
                args = tuple(torch.from_dlpack(x) for x in args)
            for _ in range(50):
                fn(*args)
            cupy.cuda.Device().synchronize()
            per = []
            for _ in range(repeats):
                t = time.perf_counter()
                for _ in range(calls):
                    fn(*args)
                per.append((time.perf_counter() - t) / calls * 1e6)
                cupy.cuda.Device().synchronize()
            rows.append({"impl": name, "size": n, "us_per_call": float(np.median(per))})
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
