"""Verify, then time kernels beside cuBLAS (and torch, Triton): the rows of a results file, the bench
suite, per-call host cost, and the suite's plot.  Checks and timing: timing.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import access, api, gpu, hopper, registry, selection, timing
from .errors import UnsupportedOperands

TOLERANCE = timing.TOLERANCE
# the check's bound on the relative error, per precision: TF32 keeps 10 of FP32's 23 mantissa bits
TOLERANCES = {"fp32": TOLERANCE, "tf32x3": TOLERANCE, "tf32": 5e-3}


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
    case: str | None = None  # the case's name, in named sets (suites.REAL)
    precision: str = "fp32"  # what the products were computed with (registry.PRECISIONS)
    refused: str | None = None  # why the kernel refused the case (e.g. TMA's alignment), where it did


def _torch_mm(tf32: bool = False):
    import torch

    def run(a, b, out):  # strict FP32 (cuBLAS SGEMM), or cuBLAS in TF32 (torch's allow_tf32), restored after
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            torch.matmul(torch.from_dlpack(a), torch.from_dlpack(b), out=torch.from_dlpack(out))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before

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


REFERENCES = {"torch": _torch_mm, "triton": _triton_mm, "cublas-tf32": lambda: _torch_mm(tf32=True)}
REFERENCE_PRECISION = {"cublas-tf32": "tf32"}


def static_config(kernel: str, precision: str) -> tuple:
    """(spec, params) shown for a bench entry with no GPU: the rung's defaults, or the family's
    config at that precision (the tensor cores: the mma.sync family's wide tile)."""
    spec = registry.get(kernel)
    if spec is registry.FAMILY and precision != "fp32":
        return spec, spec.params({**selection.MMA_WIDE, "mma": registry.PRECISIONS[precision]})
    return spec, spec.params()


def kernel_name(name: str) -> tuple[str, str]:
    """(kernel, precision) of a bench entry: "gemm" (the default path in FP32), "gemm-tf32x3" or
    "gemm-tf32" (the default path at that precision), or a rung (its own precision)."""
    base, _, precision = name.partition("-") if name.startswith(("gemm-", "tilegemm-")) else (name, "", "")
    spec = registry.get("gemm" if base == "tilegemm" else base)
    return spec.name, registry.check_precision(precision) if precision else spec.precision


def available_references() -> list[str]:
    out = []
    try:
        import torch  # noqa: F401

        out += ["torch", "cublas-tf32"]
        from . import triton_ref

        if triton_ref.available():
            out.append("triton")
    except Exception:
        pass
    return out


def _aligned(layout: str, M: int, N: int, K: int) -> tuple:
    """Whether each of the bench's contiguous operands has 16-byte aligned rows (rows of cols floats)."""
    return tuple(cols % 4 == 0 for _, cols in access.stored_views(layout, M, N, K))


def _tf32_config(prec: str, layout: str, M: int, N: int, K: int, sms: int) -> dict | None:
    """For precision "tf32", what the Hopper path runs on the bench's contiguous operands
    (hopper.tf32_config; None: rung 10's kernel runs it); None for other precisions."""
    return hopper.tf32_config(layout, M, N, K, _aligned(layout, M, N, K), sms) if prec == "tf32" else None


def measure(kernels, M, N, K, layout="NN", progress=None, batch=1, refs=(), case=None,
            target_s: float = 0.6) -> list[Row]:
    """cuBLAS, the other references (``refs``: "torch", "triton") and each kernel (a name, "gemm"
    for the default tuned path, or (name, config)): each checked against float64, then all timed
    together (``time_interleaved``, ``target_s`` each).  One Row each, cuBLAS first."""
    cupy = gpu.cupy()
    sets, outs = timing.input_sets(M, N, K, layout, batch)
    flop = 2.0 * M * N * K * batch
    entries = [("cublas", lambda a, b, out: cupy.matmul(a, b, out=out), None, None, "fp32")]
    entries += [(name, REFERENCES[name](), None, None, REFERENCE_PRECISION.get(name, "fp32")) for name in refs]
    for entry in kernels:
        name, config = (entry, None) if isinstance(entry, str) else entry
        kernel, prec = kernel_name(name)
        if config and "mma" in config:  # a family config on the tensor cores
            prec = {v: k for k, v in registry.PRECISIONS.items()}[config["mma"]]
            config = {k: v for k, v in config.items() if k != "mma"}
        if kernel == registry.FAMILY.name and config is None:
            dev = gpu.current_device()
            props = gpu.device_properties(dev)
            if prec == "fp32":
                cfg, src = selection.select(dev, layout, M, N, K, batch)
            elif hopper.hopper_tensor_cores(props) and batch == 1 and _tf32_config(prec, layout, M, N, K, props.sms):
                cfg = hopper.tf32_record(_tf32_config(prec, layout, M, N, K, props.sms))
                src = "wgmma-tf32"  # dispatch's Hopper path: wgmma_tf32.cu
            elif hopper.hopper_tensor_cores(props) and batch == 1:  # dispatch's Hopper path: rung 10's kernel
                cfg = hopper.wgmma_record(hopper.wgmma_config(layout, M, N, K, _aligned(layout, M, N, K), props.sms))
                src = "wgmma"
            else:
                cfg, src = selection.select_mma(dev, prec, layout, M, N, K, batch), "heuristic"
            entries.append(("tilegemm" if prec == "fp32" else f"tilegemm-{prec}",
                            lambda a, b, out, prec=prec: api.matmul(a, b, out=out, precision=prec), None,
                            {"source": src, **cfg}, prec))
        else:
            entries.append((name, lambda a, b, out, name=kernel, config=config, prec=prec:
                            api.matmul(a, b, out=out, kernel=name, config=config, precision=prec), config, None, prec))
    # every implementation is checked first (fresh inputs each); the ones that pass are timed
    # together, taking turns
    errs, refused = [], {}
    for j, e in enumerate(entries):
        try:
            errs.append(timing.check(e[1], M, N, K, layout, batch))
        except UnsupportedOperands as exc:  # a kernel that cannot take these operands (its error says why)
            errs.append(float("nan"))
            refused[j] = str(exc)
    timed = [j for j, err in enumerate(errs) if err < TOLERANCES[entries[j][4]]]
    ms = [float("nan")] * len(entries)
    runs = [lambda i, fn=entries[j][1]: fn(*sets[i], outs[i]) for j in timed]
    for j, t in zip(timed, timing.time_interleaved(runs, len(sets), target_s)):
        ms[j] = t
    ref_tflops = flop / ms[0] / 1e9
    rows = []
    for j, ((name, _, config, selected, prec), err, t) in enumerate(zip(entries, errs, ms)):
        tflops = flop / t / 1e9
        rows.append(Row(name, M, N, K, layout, batch, tflops, t, ref_tflops, tflops / ref_tflops, err, config,
                        selected, case, prec, refused.get(j)))
        if progress:
            progress(rows[-1])
    return rows


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
    """Host time per call (µs) of tilegemm.matmul, cupy.matmul and torch.matmul with ``out=``, and
    of ``D = A B + C`` (tilegemm.gemm with c and beta = 1, torch.addmm), at sizes where the GPU work
    is a few microseconds: the calls are issued back to back and the wall time is divided by their
    number (median of ``repeats``)."""
    import time

    cupy = gpu.cupy()
    fns = {"tilegemm": lambda a, b, c, o: api.matmul(a, b, out=o),
           "cupy": lambda a, b, c, o: cupy.matmul(a, b, out=o),
           "tilegemm gemm+c": lambda a, b, c, o: api.gemm(a, b, c, beta=1.0, out=o)}
    try:
        import torch

        fns["torch"] = lambda a, b, c, o: torch.matmul(a, b, out=o)
        fns["torch addmm"] = lambda a, b, c, o: torch.addmm(c, a, b, out=o)
    except Exception:
        torch = None
    rows = []
    for n in sizes:
        a, b = timing.operands(n, n, n)
        c = cupy.ones((n, n), np.float32)
        o = cupy.empty((n, n), np.float32)
        for name, fn in fns.items():
            args = (a, b, c, o)
            if name.startswith("torch"):
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


def ratios(doc: dict, kernel: str = "tilegemm") -> list[float]:
    """The kernel's ratio to cuBLAS in each case of a results document (failed cases as 0)."""
    return [r["ratio"] or 0.0 for r in doc["rows"] if r["kernel"] == kernel]


def plot_draw(doc: dict, path) -> None:
    """Shapes nobody tuned for: the ratio to cuBLAS of each case against its work (multiply-adds),
    coloured by its aspect (largest over smallest dimension), and the distribution of the ratios."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = list(dict.fromkeys(r["kernel"] for r in doc["rows"] if r["kernel"].startswith("tilegemm")))
    rows = [r for r in doc["rows"] if r["kernel"] == ours[0]]  # the first of ours in the scatter
    xs = [r["M"] * r["N"] * r["K"] * r["batch"] for r in rows]
    ys = [r["ratio"] or 0.0 for r in rows]
    aspect = [math.log10(max(r["M"], r["N"], r["K"]) / min(r["M"], r["N"], r["K"])) for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    pts = ax.scatter(xs, ys, c=aspect, cmap="viridis", s=18)
    fig.colorbar(pts, ax=ax, label="log10(largest / smallest dimension)")
    for level, style in ((1.0, "-"), (0.97, "--"), (0.90, ":")):
        ax.axhline(level, color="gray", linestyle=style, linewidth=1)
        ax2.axvline(level, color="gray", linestyle=style, linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("multiply-adds (M N K)")
    ax.set_ylabel(f"{ours[0]} / cuBLAS (TFLOPS)")
    for name in ours:  # the distribution of each of ours
        ordered = sorted(r["ratio"] or 0.0 for r in doc["rows"] if r["kernel"] == name)
        ax2.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", label=name)
    if len(ours) > 1:
        ax2.legend(fontsize=8)
    ax2.set_xlabel("tilegemm / cuBLAS SGEMM")
    ax2.set_ylabel("share of cases at or below")
    what = f"seed {doc['seed']}" if doc.get("seed") is not None else doc.get("kind", "")
    fig.suptitle(f"{len(rows)} shapes ({what}) on {doc['gpu']} ({doc['date']}): geometric mean "
                 f"{geomean(ys):.3f}x, lowest {min(ys):.2f}x")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

