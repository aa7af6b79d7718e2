"""Normwise relative error against float64 of every precision beside cuBLAS, on the accuracy classes
(docs/accuracy.md), and the error against K; writes a results file of kind "accuracy" and its plot.

usage: python scripts/accuracy.py [--out DIR] [--seed S]
Classes: normal data, data scaled by 2^60, 2^-60 and 2^-63 (products near and below FP32's smallest
normal number, 2^-126: TF32x3's small products, 2^-11 of the big ones, fall below it first), magnitudes mixed within a row (2^-20 .. 2^20), a cancellation-heavy
product (orthogonal rows), K from 256 to 10^6; then NaN and Inf placed in the operands, the result's
NaN / Inf pattern compared with cuBLAS SGEMM's.  Implementations: cuBLAS SGEMM, cuBLAS TF32 (torch
with allow_tf32), tilegemm with precision fp32, tf32x3 and tf32.
"""
import os
import sys

import numpy as np

from tilegemm import gpu, matmul, results, timing
from tilegemm.parsing import ArgParser, parse_args, run_command

PRECISIONS = ("fp32", "tf32x3", "tf32")
KS = (256, 1024, 4096, 16384, 65536, 262144, 1000000)


def main(argv=None) -> int:
    p = ArgParser(prog="scripts/accuracy.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    p.add_argument("--seed", type=int, default=1)
    args = parse_args(p, argv)
    return args if isinstance(args, int) else run_command(run, args)


def _errors(a, b) -> dict:
    import torch

    ref = timing.reference(a, b)
    errs = {"cublas": timing.rel_err(gpu.cupy().matmul(a, b), ref)}
    torch.backends.cuda.matmul.allow_tf32 = True
    t = torch.matmul(torch.from_dlpack(a), torch.from_dlpack(b))
    torch.backends.cuda.matmul.allow_tf32 = False
    errs["cublas-tf32"] = timing.rel_err(gpu.cupy().from_dlpack(t), ref)
    for prec in PRECISIONS:
        errs[prec] = timing.rel_err(matmul(a, b, precision=prec), ref)
    return errs


def run(args) -> int:
    cp = gpu.cupy()
    rng = cp.random.default_rng(args.seed)
    rows = []

    def case(name, a, b, **extra):
        row = {"case": name, "M": a.shape[0], "N": b.shape[1], "K": a.shape[1], **extra, "errors": _errors(a, b)}
        rows.append(row)
        print(f"{name:28s} {row['M']}x{row['N']}x{row['K']}  " +
              "  ".join(f"{k} {v:.2e}" for k, v in row["errors"].items()), flush=True)

    n = 2048
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    case("normal", a, b)
    for e in (60, -60, -63):
        s = np.float32(2.0 ** e)
        case(f"scaled 2^{e}", a * s, b * s)
    case("mixed magnitudes in a row", a * cp.exp2(rng.integers(-20, 21, size=a.shape).astype(np.float32)), b)
    q, _ = cp.linalg.qr(rng.standard_normal((n, n)))
    case("cancellation (orthogonal rows)", q[: n // 2].astype(np.float32), q[n // 2:].T.astype(np.float32))
    for K in KS:
        case("against K", rng.standard_normal((128, K), dtype=np.float32), rng.standard_normal((K, 128), dtype=np.float32))
    a = rng.standard_normal((256, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    a[3, 5], b[7, 2], a[9, :], a[9, 11], a[20, 30], b[30, :] = np.inf, np.nan, 0, -np.inf, np.inf, 1
    a.view(np.uint32)[40, 7] = 0x7FFFFFFF  # the NaN the GPU makes (all-ones mantissa)
    b[50, 60] = (cp.zeros(1, np.float32) / cp.zeros(1, np.float32))[0]  # 0 / 0 computed on the GPU
    ref = cp.matmul(a, b)
    for prec in PRECISIONS:
        got = matmul(a, b, precision=prec)
        same = all(bool(cp.array_equal(f(got), f(ref))) for f in (cp.isnan, cp.isposinf, cp.isneginf))
        rows.append({"case": "NaN and Inf as cuBLAS", "precision": prec, "same": same})
        print(f"NaN / Inf pattern of {prec} as cuBLAS SGEMM's: {same}")
    doc = results.document(rows, cmd=results.command(prog="python scripts/accuracy.py"), kind="accuracy",
                           seed=args.seed)
    path = results.write(doc, args.out, "accuracy")
    plot(doc, path.with_suffix(".png"))
    print("wrote", path)
    return 0


def plot(doc: dict, path) -> None:
    """Normwise relative error against K (M = N = 128, normal data), one line per implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc["rows"] if r.get("case") == "against K"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for impl, style in (("cublas", "k--"), ("cublas-tf32", "k:"), ("fp32", "o-"), ("tf32x3", "s-"), ("tf32", "^-")):
        label = {"cublas": "cuBLAS SGEMM", "cublas-tf32": "cuBLAS TF32"}.get(impl, f"tilegemm {impl}")
        ax.loglog([r["K"] for r in rows], [r["errors"][impl] for r in rows], style, label=label)
    ax.set_xlabel("K (M = N = 128, standard normal operands)")
    ax.set_ylabel("||C - C_float64|| / ||C_float64||")
    ax.set_title(f"Error against K on {doc['gpu']} ({doc['date']})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
