"""The ``tilegemm`` command line."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from . import __version__, registry, runtime
from .errors import TilegemmError

DEFAULT_SIZES = ["1024", "2048", "4096", "4095"]

console = Console()


def _add_columns(table: Table, cols, left=("kernel", "shape", "layout", "what changed")) -> None:
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


def _names_and_sizes(args):
    """--kernels and --sizes, checked before any work (unknown names and bad sizes raise)."""
    from .bench import parse_size

    names = args.kernels or sorted(registry.RUNGS)
    for n in names:
        registry.get(n)
    return names, [parse_size(s) for s in args.sizes]


def _report_failures(rows, tolerance) -> int:
    failed = [r for r in rows if not r.rel_err < tolerance]
    for r in failed:
        console.print(f"[red]FAILED[/red] {r.kernel} {r.config or ''} {r.M}x{r.N}x{r.K} {r.layout}: "
                      f"relative error {r.rel_err:.2e} >= {tolerance:.0e}")
    return 1 if failed else 0


def _cases(sizes, layouts) -> list[tuple]:
    """(M, N, K, layout, batch) for each size given on the command line (N, MxNxK, BATCHxMxNxK) and layout."""
    from .bench import parse_case

    return [(M, N, K, lay, b) for sz in sizes for (M, N, K, b) in [parse_case(sz)] for lay in layouts]


def _bench_cases(args):
    from .bench import SUITE

    return _cases(args.sizes, args.layouts) if args.sizes else list(SUITE)


def cmd_bench(args) -> int:
    from . import bench

    names = args.kernels or ["gemm"]
    for n in names:
        registry.get(n)
    cases = _bench_cases(args)
    if not runtime.have_gpu():
        console.print(_static_table(names, args.arch or "sm_90"))
        console.print("[yellow]No CUDA GPU here: kernels compiled and their resources shown; the "
                      f"{len(cases)} benchmark cases (checks and timings) need a GPU.[/yellow]")
        return 0
    refs = [r for r in bench.available_references() if r in (args.refs if args.refs is not None else ("torch", "triton"))]
    rows = []
    from rich.progress import Progress

    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmarking", total=len(cases) * (len(names) + 1 + len(refs)))
        for (M, N, K, layout, batch) in cases:
            rows += bench.measure(names, M, N, K, layout, batch=batch, refs=refs,
                                  progress=lambda r: progress.advance(task))
    props = runtime.device_properties()
    console.print(_results_table(rows, f"tilegemm bench on {props.name}"))
    extra = {}
    ours = [r for r in rows if r.kernel in ("tilegemm",) + tuple(names)]
    if ours:
        gm = bench.geomean([r.ratio for r in ours if r.kernel == ours[0].kernel])
        extra["geomean_ratio"] = {ours[0].kernel: gm}
        for ref in refs:
            extra["geomean_ratio"][ref] = bench.geomean([r.ratio for r in rows if r.kernel == ref])
        console.print("geometric mean of the ratio to cuBLAS: " +
                      ", ".join(f"{k} {v:.3f}x" for k, v in extra["geomean_ratio"].items()))
    if not args.no_overhead:
        extra["call_overhead_us"] = bench.call_overhead()
        console.print("host time per call (µs): " + ", ".join(
            f"{o['impl']} {o['size']}³ {o['us_per_call']:.1f}" for o in extra["call_overhead_us"]))
    if not args.no_write:
        doc = bench.results_document(rows, **extra)
        path = bench.write_results(doc, args.out, args.tag)
        bench.plot_suite(doc, path.with_suffix(".png"))
        console.print(f"results written to {path} and {path.with_suffix('.png')}")
    return _report_failures(rows, bench.TOLERANCE)


def cmd_tune(args) -> int:
    from . import autotune, tuning
    from .bench import SUITE

    if args.shapes:
        cases = _cases(args.shapes, args.layouts)
    else:
        cases = [c for c in SUITE if c[3] in args.layouts or args.layouts == ["NN"] and c[3] == "NN"]
    if not runtime.have_gpu():
        limits = registry.Limits.for_arch(args.arch or "sm_90")
        table = Table(title=f"tuning candidates for {args.arch or 'sm_90'} (no GPU: nothing timed)")
        _add_columns(table, ("shape", "layout", "candidates", "heuristic config"))
        for (M, N, K, layout, batch) in cases:
            cands = autotune.candidates(M, N, K, batch, 132, limits, args.top)
            h = tuning.heuristic(M, N, K, batch)
            table.add_row(f"{batch}x{M}x{N}x{K}" if batch > 1 else f"{M}x{N}x{K}", layout, str(len(cands)),
                          " ".join(f"{k}={v}" for k, v in h.items()))
        console.print(table)
        console.print("[yellow]No CUDA GPU here: candidates enumerated and pruned; compiling, checking "
                      "and timing them needs a GPU.[/yellow]")
        return 0
    from rich.progress import Progress

    dev = runtime.current_device()
    results = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("tuning", total=len(cases))
        for (M, N, K, layout, batch) in cases:
            progress.update(task, description=f"tuning {batch}x{M}x{N}x{K} {layout}")
            results.append(autotune.tune_shape(dev, layout, M, N, K, batch, top=args.top))
            progress.advance(task)
    table = Table(title=f"tuned on {runtime.device_properties().name}")
    _add_columns(table, ("shape", "layout", "TFLOPS", "tried", "config"))
    for r in results:
        table.add_row(f"{r['count']}x{r['M']}x{r['N']}x{r['K']}" if r["count"] > 1 else f"{r['M']}x{r['N']}x{r['K']}",
                      r["layout"], _fmt(r["tflops"]), str(len(r["tried"])),
                      " ".join(f"{k}={v}" for k, v in r["config"].items()))
    console.print(table)
    sel = tuning.selector(dev)
    console.print(f"tuning cache: {sel.cache_path}")
    if args.ship:
        from pathlib import Path

        path = Path(args.ship) / sel.table_path.name
        entries = {tuning._entry_key(r["layout"], tuning.bucket(r["M"], r["N"], r["K"], r["count"])):
                   {"config": r["config"], "tflops": r["tflops"], "ms": r["ms"],
                    "shape": [r["M"], r["N"], r["K"], r["count"]]} for r in results}
        tuning.merge_entries(path, entries, {"gpu": sel.props.name})
        console.print(f"table written to {path}")
    if args.out:
        import json
        from pathlib import Path

        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "tune.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


def _occupancy_text(spec, params, res, limits) -> str:
    from .instruments.occupancy import occupancy

    occ = occupancy(spec.threads(params), res.registers, res.shared_bytes + spec.smem(params), limits)
    return f"{occ.blocks} x {spec.threads(params)} thr ({100 * occ.fraction(limits):.0f}%, {occ.limiter})"


def _static_table(names, arch: str) -> Table:
    """What needs no GPU: each kernel compiled for ``arch``, its resources and occupancy."""
    limits = registry.Limits.for_arch(arch)
    table = Table(title=f"Kernels compiled for {arch} (NVRTC; no GPU needed)")
    _add_columns(table, ("kernel", "regs", "smem B", "spills B", "occupancy/SM", "what changed"))
    for name in names:
        spec = registry.get(name)
        params = spec.params()
        r = spec.compile(params, arch=arch).resources
        table.add_row(name, str(r.registers), str(r.shared_bytes + spec.smem(params)), str(r.spills),
                      _occupancy_text(spec, params, r, limits), spec.summary)
    return table


def cmd_ladder(args) -> int:
    from . import bench, ladder

    names, sizes = _names_and_sizes(args)
    if not runtime.have_gpu():
        console.print(_static_table(names, args.arch or "sm_90"))
        console.print("[yellow]No CUDA GPU here: static columns only; timings, checks and the "
                      "measured FP32 peak need a GPU.[/yellow]")
        return 0
    from rich.progress import Progress

    seed_cfgs = [] if args.no_seed_table else [("05_double_buffered", ladder.seed001_config(t))
                                               for t, _, _ in ladder.SEED001_TABLE]
    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("ladder", total=1 + len(sizes) * (len(names) + 1) + len(seed_cfgs) + 1)
        peak = ladder.measure_fp32_peak()
        progress.advance(task)
        for (M, N, K) in sizes:
            rows += bench.measure(names, M, N, K, "NN", progress=lambda r: progress.advance(task))
        if seed_cfgs:
            rows += bench.measure(seed_cfgs, 4096, 4096, 4096, "NN", progress=lambda r: progress.advance(task))
    props = runtime.device_properties()
    table = Table(title=f"The SGEMM ladder on {props.name}: FP32 FFMA peak measured {peak:.1f} TFLOPS")
    _add_columns(table, ("kernel", "shape", "TFLOPS", "% of cuBLAS", "% of peak", "rel. error", "what changed"))
    for r in rows:
        if r.config:
            continue
        what = "reference" if r.kernel == "cublas" else registry.get(r.kernel).summary
        table.add_row(r.kernel, f"{r.M}x{r.N}x{r.K}", _fmt(r.tflops), _fmt(100 * r.ratio, "{:.1f}%"),
                      _fmt(100 * r.tflops / peak, "{:.1f}%"), _fmt(r.rel_err, "{:.1e}"), what)
    console.print(table)
    if seed_cfgs:
        seed = Table(title="seed 001 §3 parameter table, 05_double_buffered at 4096³")
        _add_columns(seed, ("bm/bk/bn/rm/rn", "TFLOPS", "% of cuBLAS", "seed (V100) % of cuBLAS"))
        for (t, _, pct), r in zip(ladder.SEED001_TABLE, [r for r in rows if r.config]):
            seed.add_row("/".join(map(str, t)), _fmt(r.tflops), _fmt(100 * r.ratio, "{:.1f}%"), f"{pct}%")
        console.print(seed)
    if not args.no_write:
        doc = bench.results_document(rows, fp32_peak_tflops=peak)
        path = bench.write_results(doc, args.out, args.tag)
        ladder.plot(doc, path.with_suffix(".png"))
        console.print(f"results written to {path} and {path.with_suffix('.png')}")
    return _report_failures(rows, bench.TOLERANCE)


def parse_config(text: str | None) -> dict | None:
    """``"bm=128,bn=64"`` -> {"bm": 128, "bn": 64}."""
    if not text:
        return None
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config item {item!r} is not NAME=VALUE (e.g. --config bm=128,bn=64)")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise ValueError(f"--config {key.strip()}={value!r}: the value must be an integer") from None
    return out


def cmd_explain(args) -> int:
    import json

    from .instruments import explain

    report = explain.build(args.kernel, parse_config(args.config), tuple(args.shape), args.layout,
                           args.arch, args.gpu, measure=False if args.no_measure else None)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        explain.render(report, console)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilegemm", description="FP32 GEMM kernels for NVIDIA GPUs")
    parser.add_argument("--version", action="version", version=f"tilegemm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("bench", help="verify and time kernels beside cuBLAS; write a results JSON",
                       description="On a GPU: check each kernel against float64, time it beside "
                       "cuBLAS, print a table and write benchmarks/results/<gpu>-<date>.json. "
                       "Without a GPU: compile the kernels and show their resources.")
    p.add_argument("--sizes", nargs="+", metavar="SIZE",
                   help="N (square), MxNxK or BATCHxMxNxK; default: the suite (../shared/ANCHORS.md, other layouts, batches)")
    p.add_argument("--kernels", nargs="+", metavar="NAME",
                   help="gemm (the tuned default path) and/or ladder rungs; default: gemm")
    p.add_argument("--layouts", nargs="+", default=["NN"], choices=registry.LAYOUTS,
                   help="operand layouts for --sizes, T = transposed view; default: NN")
    p.add_argument("--refs", nargs="*", choices=("torch", "triton"),
                   help="references beside cuBLAS, where installed; default: torch triton")
    p.add_argument("--no-overhead", action="store_true", help="skip the per-call host overhead measurement")
    p.add_argument("--out", default="benchmarks/results", help="results folder; default: %(default)s")
    p.add_argument("--tag", help="suffix of the results file name")
    p.add_argument("--no-write", action="store_true", help="print only, write no results file")
    p.add_argument("--arch", help="arch for the GPU-free compile (default sm_90)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("ladder", help="every rung of the optimization ladder beside cuBLAS, plus the FP32 peak",
                       description="On a GPU: measure the FP32 FFMA peak, verify and time every rung "
                       "beside cuBLAS, reproduce the seed-001 parameter table on rung 5 at 4096^3, "
                       "print the tables, write the results JSON and a PNG plot. Without a GPU: "
                       "registers, shared memory, spills and theoretical occupancy.")
    p.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES, metavar="SIZE",
                   help="N (square) or MxNxK; default: %(default)s")
    p.add_argument("--kernels", nargs="+", metavar="NAME", help="default: every rung")
    p.add_argument("--no-seed-table", action="store_true", help="skip the seed-001 table on rung 5")
    p.add_argument("--out", default="benchmarks/results", help="results folder; default: %(default)s")
    p.add_argument("--tag", default="ladder", help="suffix of the results file name; default: %(default)s")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--arch", help="arch for the GPU-free columns (default sm_90)")
    p.set_defaults(func=cmd_ladder)

    p = sub.add_parser("tune", help="tune the kernel family for this GPU; results go to the tuning cache",
                       description="For each shape: enumerate configs from the constraints, prune with "
                       "the resource model, compile in parallel, check each against float64, time the "
                       "rest, and record the fastest in the tuning cache (later calls use it).")
    p.add_argument("--shapes", nargs="+", metavar="SIZE", help="N, MxNxK or BATCHxMxNxK; default: the bench suite")
    p.add_argument("--suite", action="store_true", help="the bench suite (the default)")
    p.add_argument("--layouts", nargs="+", default=["NN"], choices=registry.LAYOUTS,
                   help="layouts to tune; default: NN (other layouts fall back to NN's entry)")
    p.add_argument("--top", type=int, default=24, help="candidates timed per shape; default: %(default)s")
    p.add_argument("--ship", metavar="DIR", help="also write the results as a shippable table into DIR")
    p.add_argument("--out", help="also write every candidate's timing to OUT/tune.json")
    p.add_argument("--arch", help="arch for the GPU-free listing (default sm_90)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("explain", help="why a rung or a family config is as fast as it is",
                       description="Compile the kernel, then report its resources and occupancy, the "
                       "shared-memory bank behaviour of its declared accesses, its SASS main loop "
                       "(instruction mix, FFMA share, reuse, register-bank estimate) and the roofline "
                       "floors. With a GPU: also the driver's occupancy and a timed run beside cuBLAS.")
    p.add_argument("kernel", help="a rung (e.g. 08_hopper) or gemm (the family; --config sets its params)")
    p.add_argument("--config", help="kernel parameters NAME=VALUE,... (e.g. bm=128,bn=128,bk=16)")
    p.add_argument("--shape", nargs=3, type=int, default=[4096, 4096, 4096], metavar=("M", "N", "K"),
                   help="problem shape; default: 4096 4096 4096")
    p.add_argument("--layout", default="NN", choices=registry.LAYOUTS)
    p.add_argument("--arch", help="compile for this arch (default: the GPU's, else sm_90)")
    p.add_argument("--gpu", help="whose measured peaks the roofline uses (default: this GPU's, else the first shipped)")
    p.add_argument("--no-measure", action="store_true", help="skip the timed run even with a GPU")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_explain)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    except TilegemmError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
