"""The optimization ladder: every rung verified and timed beside cuBLAS, the FP32 peak measured in
the same run (instruments.probe.fp32_peak), GEMM part 2's parameter study on rung 5, and the plot."""

from __future__ import annotations

# GEMM part 2 §3: bm/bk/bn/rm/rn and the article's own V100 results at 4096^3 (GFLOPS, % of cuBLAS)
PARAMETER_STUDY = [
    ((64, 16, 64, 4, 4), 13036.2, 86.0),
    ((64, 32, 64, 4, 4), 11738.8, 77.5),
    ((64, 4, 64, 8, 8), 13065.6, 86.2),
    ((64, 8, 64, 8, 8), 13463.9, 88.9),
    ((64, 16, 64, 8, 8), 12682.8, 83.7),
    ((64, 32, 64, 8, 8), 8517.43, 56.2),
    ((128, 16, 128, 8, 8), 13506.8, 89.1),
    ((128, 8, 128, 8, 8), 14167.1, 93.5),
]


def study_config(t) -> dict:
    """A row of the parameter study as rung 5's config."""
    return dict(zip(("bm", "bk", "bn", "rm", "rn"), t))


def plot(doc: dict, path) -> None:
    """TFLOPS against size, one line per rung, cuBLAS dashed, the measured FP32 peak dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc["rows"] if not r.get("config") and r.get("layout", "NN") == "NN"]
    shapes = []
    for r in rows:
        s = f"{r['M']}x{r['N']}x{r['K']}" if not r["M"] == r["N"] == r["K"] else str(r["M"])
        if s not in shapes:
            shapes.append(s)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    kernels = []
    for r in rows:
        if r["kernel"] not in kernels:
            kernels.append(r["kernel"])
    for k in kernels:
        xs, ys = [], []
        for r in rows:
            if r["kernel"] == k and r.get("tflops") is not None:
                s = f"{r['M']}x{r['N']}x{r['K']}" if not r["M"] == r["N"] == r["K"] else str(r["M"])
                xs.append(shapes.index(s))
                ys.append(r["tflops"])
        style = dict(linestyle="--", color="black", linewidth=2) if k == "cublas" else dict(marker="o")
        ax.plot(xs, ys, label="cuBLAS" if k == "cublas" else k, **style)
    if doc.get("fp32_peak_tflops"):
        ax.axhline(doc["fp32_peak_tflops"], linestyle=":", color="gray",
                   label=f"FP32 FFMA peak (measured) {doc['fp32_peak_tflops']:.1f}")
    ax.set_xticks(range(len(shapes)), shapes)
    ax.set_xlabel("M = N = K" if all("x" not in s for s in shapes) else "shape")
    ax.set_ylabel("TFLOPS")
    ax.set_title(f"SGEMM ladder on {doc['gpu']} ({doc['date']})")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
