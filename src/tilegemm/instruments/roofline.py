"""Roofline (Memory and data locality §4.1-4.2): FLOPs, bytes and arithmetic intensity of a GEMM and of a block
tile, the compute and bandwidth floors from measured peaks, and a plot of the ladder against them.

Two intensities:
- the shape's: 2MNK FLOPs over the bytes a GEMM must move at least (read A and B once, write C:
  4(MK + KN + MN), plus 4MN when C is read for beta);
- the tile's (the textbook's compute-to-global-memory-access ratio): a block of bm x bn outputs loads
  (bm + bn) floats per k for 2 bm bn FLOPs, so bm bn / (2 (bm + bn)) FLOP per byte of loads issued
  to the memory system (L2); the naive rung loads both operands per FMA: 2 / 8 = 0.25.
Peaks come from the shipped table (``instruments/peaks.json``, measured by ``probe peaks``) or a dict.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources

from .. import registry


def shipped_peaks() -> dict:
    """{GPU name: {fp32_tflops, dram_gbs, l2_gbs, date, ...}} measured and shipped with tilegemm."""
    text = resources.files("tilegemm.instruments").joinpath("peaks.json").read_text()
    return json.loads(text)


def peaks_for(gpu: str | None = None) -> tuple[str, dict]:
    """The measured peaks for ``gpu`` (a name or a part of one; default: the first shipped)."""
    table = shipped_peaks()
    if gpu is None:
        name = next(iter(table))
        return name, table[name]
    for name, p in table.items():
        if gpu.lower() in name.lower():
            return name, p
    raise ValueError(f"no measured peaks for GPU {gpu!r}; tilegemm ships peaks for {sorted(table)}")


def tile_intensity(name: str, params: dict | None = None) -> float:
    """FLOPs per byte of global loads a kernel issues (the textbook's compute-to-memory ratio)."""
    if name == "01_naive":
        return 0.25
    spec = registry.get(name)
    bm, bn = spec.tile(spec.params(params))
    return bm * bn / (2.0 * (bm + bn))


@dataclass(frozen=True)
class Roofline:
    flops: float
    min_bytes: float  # compulsory DRAM traffic
    intensity: float  # flops / min_bytes
    tile_bytes: float  # loads issued with the block tile (+ the C store)
    tile_intensity: float
    compute_floor_us: float
    dram_floor_us: float
    l2_floor_us: float
    bound: str  # "compute" | "DRAM" | "L2"
    attainable_tflops: float

    def as_dict(self) -> dict:
        return asdict(self)


def compute_peak(name: str, peaks: dict, params: dict | None = None) -> float:
    """The arithmetic peak a kernel's products run against (TFLOPS of FP32 products): the FFMA peak,
    or for a tensor-core kernel (a tf32x3 rung, the family with mma = 1 or 3) the measured TF32 peak
    over its passes where that peak was measured, else the FFMA peak."""
    if name == registry.FAMILY.name:
        passes = (params or {}).get("mma", 0)
    else:
        passes = registry.PRECISIONS.get(registry.get(name).precision, 0)
    if passes and peaks.get("tf32_tflops"):
        return peaks["tf32_tflops"] / passes
    return peaks["fp32_tflops"]


def roofline(M: int, N: int, K: int, peaks: dict, name: str = "gemm", params: dict | None = None,
             beta: bool = False, batch: int = 1) -> Roofline:
    flops = 2.0 * M * N * K * batch
    min_bytes = 4.0 * (M * K + K * N + M * N * (2 if beta else 1)) * batch
    ti = tile_intensity(name, params)
    tile_bytes = flops / ti + 4.0 * M * N * batch
    floors = {
        "compute": flops / (compute_peak(name, peaks, params) * 1e12),
        "DRAM": min_bytes / (peaks["dram_gbs"] * 1e9),
        "L2": tile_bytes / (peaks["l2_gbs"] * 1e9),
    }
    bound = max(floors, key=floors.get)
    return Roofline(flops, min_bytes, flops / min_bytes, tile_bytes, ti, floors["compute"] * 1e6,
                    floors["DRAM"] * 1e6, floors["L2"] * 1e6, bound, flops / floors[bound] / 1e12)


def plot_ladder(ladder_doc: dict, peaks: dict, path, size: int = 4096) -> None:
    """The ladder's measured TFLOPS at ``size``^3 placed at each rung's tile intensity, under the
    FP32 peak and the L2 and DRAM bandwidth roofs (log-log), cuBLAS dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in ladder_doc["rows"] if r["M"] == r["N"] == r["K"] == size
            and r.get("layout", "NN") == "NN" and not r.get("config") and r.get("tflops")]
    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    xs = [2.0 ** e for e in range(-3, 12)]
    peak = peaks["fp32_tflops"]
    ax.plot(xs, [min(peak, x * peaks["l2_gbs"] / 1e3) for x in xs], color="tab:blue",
            label=f"L2 roof ({peaks['l2_gbs'] / 1e3:.1f} TB/s, measured)")
    ax.plot(xs, [min(peak, x * peaks["dram_gbs"] / 1e3) for x in xs], color="tab:orange",
            label=f"DRAM roof ({peaks['dram_gbs'] / 1e3:.1f} TB/s, measured)")
    ax.axhline(peak, color="gray", linestyle=":", label=f"FP32 FFMA peak {peak:.1f} TFLOPS (measured)")
    shape_ai = 2.0 * size ** 3 / (12.0 * size * size)
    ax.axvline(shape_ai, color="gray", linestyle="-.", linewidth=0.8,
               label=f"{size}³ compulsory intensity ({shape_ai:.0f} FLOP/B)")
    cublas = next((r for r in rows if r["kernel"] == "cublas"), None)
    if cublas:
        ax.axhline(cublas["tflops"], color="black", linestyle="--", label=f"cuBLAS {cublas['tflops']:.1f}")
    points = {}
    for r in rows:
        if r["kernel"] != "cublas":
            points.setdefault(r["kernel"], r["tflops"])
    by_x: dict = {}
    for k, y in points.items():
        by_x.setdefault(tile_intensity(k), []).append((y, k))
    for x, group in by_x.items():
        ax.scatter([x] * len(group), [y for y, _ in group], zorder=3, color="tab:red", s=18)
        label_y = None
        for y, k in sorted(group, reverse=True):  # labels to the right, at least 14% apart
            label_y = y if label_y is None else min(y, label_y / 1.14)
            ax.annotate(f"{k} {y:.1f}", (x, y), xytext=(x * 1.25, label_y), fontsize=7,
                        va="center", arrowprops=dict(arrowstyle="-", color="gray", linewidth=0.5))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("FLOP per byte of global loads issued (the block tile's compute-to-memory ratio)")
    ax.set_ylabel("TFLOPS")
    ax.set_title(f"The ladder on the roofline: {ladder_doc['gpu']}, {size}³ ({ladder_doc['date']})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

