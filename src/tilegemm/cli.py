"""The ``tilegemm`` command line."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from . import __version__, registry, runtime

DEFAULT_SIZES = ["1024", "2048", "4096", "4095"]

console = Console()


def _static_table(names, arch: str) -> Table:
    table = Table(title=f"Kernels compiled for {arch} (NVRTC; no GPU needed)")
    _add_columns(table, ("kernel", "regs", "static smem B", "dynamic smem B", "spills B", "stack B", "what it does"))
    for name in names:
        spec = registry.get(name)
        params = spec.params()
        k = spec.compile(params, arch=arch)
        r = k.resources
        table.add_row(name, str(r.registers), str(r.shared_bytes), str(spec.smem(params)),
                      str(r.spills), str(r.stack_bytes), spec.summary)
    return table


def _add_columns(table: Table, cols, left=("kernel", "shape", "layout", "what it does")) -> None:
    for col in cols:
        if col in ("kernel", "shape"):  # identifiers: never truncated
            table.add_column(col, no_wrap=True, min_width=15 if col == "kernel" else 14)
        else:
            table.add_column(col, justify="left" if col in left else "right")


def _fmt(x, spec="{:.2f}"):
    return "-" if x is None or x != x else spec.format(x)


def _results_table(rows, title) -> Table:
    table = Table(title=title)
    _add_columns(table, ("kernel", "shape", "layout", "TFLOPS", "% of cuBLAS", "ms", "rel. error"))
    for r in rows:
        table.add_row(r.kernel, f"{r.M}x{r.N}x{r.K}", r.layout, _fmt(r.tflops),
                      _fmt(100 * r.ratio, "{:.1f}%"), _fmt(r.ms, "{:.3f}"), _fmt(r.rel_err, "{:.1e}"))
    return table


def cmd_bench(args) -> int:
    from . import bench

    names = args.kernels or sorted(registry.RUNGS)
    for n in names:
        registry.get(n)  # unknown names fail here, before any work
    sizes = [bench.parse_size(s) for s in args.sizes]
    if not runtime.have_gpu():
        console.print(_static_table(names, args.arch or "sm_90"))
        console.print("[yellow]No CUDA GPU here: kernels compiled and their resources shown; "
                      "timings and checks need a GPU.[/yellow]")
        return 0
    rows = []
    from rich.progress import Progress

    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmarking", total=len(sizes) * len(args.layouts) * (len(names) + 1))
        for (M, N, K) in sizes:
            for layout in args.layouts:
                rows += bench.measure(names, M, N, K, layout,
                                      progress=lambda r: progress.advance(task))
    props = runtime.device_properties()
    console.print(_results_table(rows, f"tilegemm bench on {props.name}"))
    failed = [r for r in rows if not r.rel_err < bench.TOLERANCE]
    if not args.no_write:
        path = bench.write_results(bench.results_document(rows), args.out, args.tag)
        console.print(f"results written to {path}")
    if failed:
        for r in failed:
            console.print(f"[red]FAILED[/red] {r.kernel} {r.M}x{r.N}x{r.K} {r.layout}: "
                          f"relative error {r.rel_err:.2e} >= {bench.TOLERANCE:.0e}")
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilegemm", description="FP32 GEMM kernels for NVIDIA GPUs")
    parser.add_argument("--version", action="version", version=f"tilegemm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("bench", help="verify and time kernels beside cuBLAS; write a results JSON",
                       description="On a GPU: check each kernel against float64, time it beside "
                       "cuBLAS, print a table and write benchmarks/results/<gpu>-<date>.json. "
                       "Without a GPU: compile the kernels and show their resources.")
    p.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES, metavar="SIZE",
                   help="N (square) or MxNxK; default: %(default)s")
    p.add_argument("--kernels", nargs="+", metavar="NAME", help=f"default: all of {sorted(registry.RUNGS)}")
    p.add_argument("--layouts", nargs="+", default=["NN"], choices=registry.LAYOUTS,
                   help="operand layouts, T = transposed view; default: NN")
    p.add_argument("--out", default="benchmarks/results", help="results folder; default: %(default)s")
    p.add_argument("--tag", help="suffix of the results file name")
    p.add_argument("--no-write", action="store_true", help="print only, write no results file")
    p.add_argument("--arch", help="arch for the GPU-free compile (default sm_90)")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
