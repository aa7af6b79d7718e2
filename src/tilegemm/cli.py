"""The ``tilegemm`` command line (also ``python -m tilegemm``).

Every argument is checked before any work starts; errors are one line on stderr (parsing.py's
``ArgParser`` and ``run_command``): status 2 for bad input, 1 for a failure during the work; no
tracebacks (TILEGEMM_DEBUG=1 shows them)."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

from rich.table import Table

from . import __version__, api, compiler, gpu, registry, results
from .parsing import SHAPE_HELP, ArgParser, argtype, format_shape, parse_args, parse_config, parse_shape, run_command
from .render import add_columns, console, fmt, progress_bar, report_failures, results_table, static_table

DEFAULT_SIZES = ["1024", "2048", "4096", "4095"]

def _cases(shapes, layouts) -> list[tuple]:  # (M, N, K, layout, batch) for each parsed shape and layout
    return [(M, N, K, lay, batch) for (M, N, K, batch) in shapes for lay in layouts]


def _kernel_names(names) -> list[str]:
    from .bench import kernel_name
    return [n for n in names if kernel_name(n)]  # unknown names and precisions raise here, before any work


def _writable_out(args) -> None:
    from .folders import writable
    if not args.no_write:
        writable(args.out, "pass --out with a writable folder (or --no-write)")


def _bench_cases(args) -> tuple[list, dict]:
    """[(case, its name or None)] and the results file's extra header: the suite, --sizes, a random
    draw (kind "random", its seed: --seed, else a fresh one) or the real-world set (kind "real")."""
    from . import suites

    if args.seed is not None and not args.random:
        raise ValueError("--seed applies to --random only (it draws the random shapes); pass --random N too, "
                         "or leave --seed out")
    if args.layouts is not None and not (args.sizes or args.random):
        raise ValueError("--layouts applies to --sizes and --random only (the suite and --real set their own "
                         "layouts); pass --sizes or --random N too, or leave --layouts out")
    layouts = args.layouts or ["NN"]
    if args.random:
        seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
        cases = suites.random_shapes(args.random, seed, tuple(layouts))
        return [(c, None) for c in cases], {"kind": "random", "seed": seed, "n": args.random,
                                            "draw": {**suites.DRAW, "layouts": layouts}}
    if args.real:
        return [(c, name) for name, c in suites.REAL], {"kind": "real"}
    return [(c, None) for c in (_cases(args.sizes, layouts) if args.sizes else suites.SUITE)], {}


def cmd_bench(args) -> int:
    from . import bench

    names = _kernel_names(args.kernels or ["gemm"])
    cases, header = _bench_cases(args)
    draw = bool(header)  # a random draw or the real-world set: many shapes, each timed more briefly
    if not gpu.have_gpu():
        console.print(static_table(names, args.arch or "sm_90"))
        console.print("[yellow]No CUDA GPU here: kernels compiled and their resources shown; the "
                      f"{len(cases)} benchmark cases (checks and timings) need a GPU.[/yellow]")
        return 0
    _writable_out(args)
    wanted = args.refs if args.refs is not None else ("torch",) if draw else ("torch", "triton")
    refs = [r for r in bench.available_references() if r in wanted]
    if draw:
        console.print(f"{len(cases)} shapes" + (f", seed {header['seed']}" if "seed" in header else ""))
    rows = []
    with progress_bar() as progress:
        task = progress.add_task("benchmarking", total=len(cases) * (len(names) + 1 + len(refs)))
        for (M, N, K, layout, batch), case in cases:
            rows += bench.measure(names, M, N, K, layout, batch=batch, refs=refs, case=case,
                                  target_s=0.3 if draw else 0.6, progress=lambda r: progress.advance(task))
    console.print(results_table(rows, f"tilegemm bench on {gpu.device_properties().name}"))
    extra = dict(header)
    ours = [r for r in rows if r.kernel.startswith("tilegemm") or r.kernel in names]
    if ours:
        extra["geomean_ratio"] = {k: bench.geomean([r.ratio for r in ours if r.kernel == k])
                                  for k in dict.fromkeys(r.kernel for r in ours)}
        for ref in refs:
            extra["geomean_ratio"][ref] = bench.geomean([r.ratio for r in rows if r.kernel == ref])
        console.print("geometric mean of the ratio to cuBLAS: " +
                      ", ".join(f"{k} {v:.3f}x" for k, v in extra["geomean_ratio"].items()))
    if draw and ours:
        rs = sorted(r.ratio for r in ours if r.kernel == ours[0].kernel)
        console.print(f"5th percentile {rs[len(rs) // 20]:.3f}x, lowest {rs[0]:.3f}x, below 1.00x: "
                      f"{sum(x < 1 for x in rs)} of {len(rs)}")
    if not args.no_overhead and not draw:
        extra["call_overhead_us"] = bench.call_overhead()
        console.print("host time per call (µs): " + ", ".join(
            f"{o['impl']} {o['size']}³ {o['us_per_call']:.1f}" for o in extra["call_overhead_us"]))
    if not args.no_write:
        doc = results.document(rows, cmd=args.command_line, **extra)
        tag = args.tag or (f"random-s{header['seed']}" if "seed" in header else header.get("kind"))
        path = results.write(doc, args.out, tag)
        (bench.plot_draw if draw else bench.plot_suite)(doc, path.with_suffix(".png"))
        console.print(f"results written to {path} and {path.with_suffix('.png')}")
    return report_failures(rows, bench.TOLERANCES)


def cmd_ladder(args) -> int:
    from . import bench, ladder
    from .instruments import probe

    names = _kernel_names(args.kernels or sorted(registry.RUNGS))
    if not gpu.have_gpu():
        console.print(static_table(names, args.arch or "sm_90"))
        console.print("[yellow]No CUDA GPU here: static columns only; timings, checks and the "
                      "measured FP32 peak need a GPU.[/yellow]")
        return 0
    _writable_out(args)
    study = [] if args.no_parameter_study else [("05_double_buffered", ladder.study_config(t))
                                                 for t, _, _ in ladder.PARAMETER_STUDY]
    rows = []
    with progress_bar() as progress:
        task = progress.add_task("ladder", total=1 + len(args.sizes) * (len(names) + 1) + len(study) + 1)
        peak = probe.fp32_peak()
        progress.advance(task)
        for (M, N, K, batch) in args.sizes:
            rows += bench.measure(names, M, N, K, "NN", batch=batch, progress=lambda r: progress.advance(task))
        if study:
            rows += bench.measure(study, 4096, 4096, 4096, "NN", progress=lambda r: progress.advance(task))
    table = Table(title=f"The SGEMM ladder on {gpu.device_properties().name}: FP32 FFMA peak measured {peak:.1f} TFLOPS")
    add_columns(table, ("kernel", "shape", "TFLOPS", "% of cuBLAS", "% of peak", "rel. error", "what changed"))
    for r in rows:
        if r.config:
            continue
        what = "reference" if r.kernel == "cublas" else registry.get(r.kernel).summary
        table.add_row(r.kernel, format_shape(r.M, r.N, r.K, r.batch), fmt(r.tflops), fmt(100 * r.ratio, "{:.1f}%"),
                      fmt(100 * r.tflops / peak, "{:.1f}%"), fmt(r.rel_err, "{:.1e}"), what)
    console.print(table)
    if study:
        t = Table(title="GEMM part 2's parameter study, 05_double_buffered at 4096³")
        add_columns(t, ("bm/bk/bn/rm/rn", "TFLOPS", "% of cuBLAS", "article (V100): % of cuBLAS"))
        for (cfg, _, pct), r in zip(ladder.PARAMETER_STUDY, [r for r in rows if r.config]):
            t.add_row("/".join(map(str, cfg)), fmt(r.tflops), fmt(100 * r.ratio, "{:.1f}%"), f"{pct}%")
        console.print(t)
    if not args.no_write:
        doc = results.document(rows, cmd=args.command_line, fp32_peak_tflops=peak)
        path = results.write(doc, args.out, args.tag)
        ladder.plot(doc, path.with_suffix(".png"))
        console.print(f"results written to {path} and {path.with_suffix('.png')}")
    return report_failures(rows, bench.TOLERANCES)


def cmd_tune(args) -> int:
    from . import autotune, entries, selection, suites

    if args.shapes:
        cases = _cases(args.shapes, args.layouts)
    else:
        cases = [c for c in suites.SUITE if c[3] in args.layouts]
    if not gpu.have_gpu():
        from .occupancy import Limits

        limits = Limits.for_arch(args.arch or "sm_90")
        table = Table(title=f"tuning candidates for {args.arch or 'sm_90'} (no GPU: nothing timed)")
        add_columns(table, ("shape", "layout", "candidates", "heuristic config"))
        for (M, N, K, layout, batch) in cases:
            cands = autotune.candidates(M, N, K, batch, 132, limits, args.top or 24)
            h = selection.heuristic(M, N, K, batch)
            table.add_row(format_shape(M, N, K, batch), layout, str(len(cands)), " ".join(f"{k}={v}" for k, v in h.items()))
        console.print(table)
        console.print("[yellow]No CUDA GPU here: candidates enumerated and pruned; compiling, checking "
                      "and timing them needs a GPU.[/yellow]")
        return 0
    dev = gpu.current_device()
    sel = selection.selector(dev)
    selection.check_writable(sel.cache_path.parent)
    ship = Path(args.ship) / sel.table_path.name if args.ship else None
    from .folders import writable

    for folder, fix in ((args.ship, "pass --ship with a writable folder"), (args.out, "pass --out with a writable folder")):
        if folder:
            writable(folder, fix)
    tuned = []
    with progress_bar() as progress:
        task = progress.add_task("tuning", total=len(cases))
        for (M, N, K, layout, batch) in cases:
            progress.update(task, description=f"tuning {format_shape(M, N, K, batch)} {layout}")
            tuned.append(autotune.tune_shape(dev, layout, M, N, K, batch, matmul=api.matmul, top=args.top,
                                               full=args.full))
            progress.advance(task)
    table = Table(title=f"tuned on {gpu.device_properties().name}")
    add_columns(table, ("shape", "layout", "TFLOPS", "tried", "seconds", "config"))
    for r in tuned:
        table.add_row(format_shape(r["M"], r["N"], r["K"], r["count"]), r["layout"], fmt(r["tflops"]),
                      f'{len(r["tried"])} ({r["mode"]})', f'{r["seconds"]:.1f}', " ".join(f"{k}={v}" for k, v in r["config"].items()))
    console.print(table)
    console.print(f"tuning cache: {sel.cache_path}")
    if ship:
        shipped = {entries.entry_key(r["layout"], entries.bucket(r["M"], r["N"], r["K"], r["count"])):
                   entries.measured(r["layout"], r["M"], r["N"], r["K"], r["count"], r, sel.props.name) for r in tuned}
        entries.merge_entries(ship, shipped, {"gpu": sel.props.name, "command": args.command_line,
                                              "commit": results.commit()})
        console.print(f"table written to {ship}")
    if args.out:
        doc = {"schema": results.SCHEMA, "kind": "tune", "command": args.command_line, "commit": results.commit(),
               **results.environment(), "shapes": tuned}
        (Path(args.out) / "tune.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0


def cmd_explain(args) -> int:
    from .instruments import explain

    M, N, K, batch = args.shape
    if batch != 1:
        raise ValueError(f"explain takes one product, MxNxK; got a batch of {batch}")
    report = explain.build(args.kernel, args.config, (M, N, K), args.layout, args.arch, args.gpu,
                           measure=False if args.no_measure else None)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        explain.render(report, console)
    return 0


def _tag(text: str) -> str:
    if not text or not all(ch.isalnum() or ch in "._-" for ch in text):
        raise ValueError(f"tag {text!r} may hold only letters, digits, '.', '_' and '-'")
    return text


def _natural(text: str) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"{text!r} is not a non-negative integer")
    return int(text)


def _positive(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"{text!r} is not a positive integer")
    return int(text)


SHAPE, CONFIG, ARCH, POSITIVE, TAG = (argtype(parse_shape, "shape"), argtype(parse_config, "config"),
                                      argtype(compiler.normalize_arch, "arch"), argtype(_positive, "count"),
                                      argtype(_tag, "tag"))
POSITIVE_OR_ZERO = argtype(_natural, "seed")


def build_parser() -> ArgParser:
    parser = ArgParser(prog="tilegemm", description="FP32 GEMM kernels for NVIDIA GPUs")
    parser.add_argument("--version", action="version", version=f"tilegemm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgParser)
    layouts = dict(nargs="+", default=["NN"], choices=registry.LAYOUTS)

    p = sub.add_parser("bench", help="verify and time kernels beside cuBLAS; write a results JSON",
                       description="On a GPU: check each kernel against float64, time it beside "
                       "cuBLAS, print a table and write benchmarks/results/<gpu>-<date>.json. "
                       "Without a GPU: compile the kernels and show their resources.")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--sizes", nargs="+", metavar="SHAPE", type=SHAPE,
                       help=f"{SHAPE_HELP}; default: the suite (the reference shapes, other layouts, batches)")
    which.add_argument("--random", type=POSITIVE, metavar="N",
                       help="N shapes nobody tuned for: M, N, K each log-uniform in [128, 16384], at least 1024^3 "
                       "multiply-adds (layouts drawn from --layouts)")
    which.add_argument("--real", action="store_true",
                       help="common real-world shapes: transformer layers, non-power-of-two squares, long-K "
                       "reductions, least squares")
    p.add_argument("--seed", type=POSITIVE_OR_ZERO, help="the random draw's seed (default: a fresh one, recorded)")
    p.add_argument("--kernels", nargs="+", metavar="NAME", help="gemm (the default path), gemm-tf32x3, gemm-tf32 (the "
                   "default path at that precision) and/or ladder rungs; default: gemm")
    p.add_argument("--layouts", **{**layouts, "default": None}, help="operand layouts for --sizes (each) and "
                   "--random (drawn), T = transposed view; default: NN")
    p.add_argument("--refs", nargs="*", choices=("torch", "triton", "cublas-tf32"),
                   help="references beside cuBLAS, where installed; default: torch triton")
    p.add_argument("--no-overhead", action="store_true", help="skip the per-call host overhead measurement")
    p.add_argument("--out", default="benchmarks/results", help="results folder; default: %(default)s")
    p.add_argument("--tag", type=TAG, help="suffix of the results file name")
    p.add_argument("--no-write", action="store_true", help="print only, write no results file")
    p.add_argument("--arch", type=ARCH, help="arch for the GPU-free compile (default sm_90)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("ladder", help="every rung of the optimization ladder beside cuBLAS, plus the FP32 peak",
                       description="On a GPU: measure the FP32 FFMA peak, verify and time every rung "
                       "beside cuBLAS, repeat GEMM part 2's parameter study on rung 5 at 4096^3, print "
                       "the tables, write the results JSON and a PNG plot. Without a GPU: registers, "
                       "shared memory, spills and theoretical occupancy.")
    p.add_argument("--sizes", nargs="+", default=[parse_shape(s) for s in DEFAULT_SIZES], metavar="SHAPE",
                   type=SHAPE, help=f"{SHAPE_HELP}; default: {' '.join(DEFAULT_SIZES)}")
    p.add_argument("--kernels", nargs="+", metavar="NAME", help="default: every rung")
    p.add_argument("--no-parameter-study", action="store_true", help="skip the parameter study on rung 5")
    p.add_argument("--out", default="benchmarks/results", help="results folder; default: %(default)s")
    p.add_argument("--tag", type=TAG, default="ladder", help="suffix of the results file name; default: %(default)s")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--arch", type=ARCH, help="arch for the GPU-free columns (default sm_90)")
    p.set_defaults(func=cmd_ladder)

    p = sub.add_parser("tune", help="tune the kernel family for this GPU; results go to the tuning cache",
                       description="For each shape: enumerate configs from the constraints, prune with "
                       "the resource model, compile in parallel, check each against float64, time the "
                       "rest, and record the fastest in the tuning cache (later calls use it).")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--shapes", nargs="+", metavar="SHAPE", type=SHAPE, help=f"{SHAPE_HELP}; default: the bench suite")
    which.add_argument("--suite", action="store_true", help="the bench suite (the default)")
    p.add_argument("--layouts", **layouts, help="layouts to tune; default: NN (other layouts fall back to NN's entry)")
    p.add_argument("--top", type=POSITIVE, help="the model's best N timed per shape (default 6); with --full, the "
                   "grid's N best by score (default 24), besides the configs it always times and the model's 12 best")
    p.add_argument("--full", action="store_true",
                   help="search the family's whole grid and the cost model's twelve best (tens of seconds a "
                   "shape) instead of timing the model's best few (a few seconds a shape)")
    p.add_argument("--ship", metavar="DIR", help="also write the results as a shippable table into DIR")
    p.add_argument("--out", help="also write every candidate's timing to OUT/tune.json")
    p.add_argument("--arch", type=ARCH, help="arch for the GPU-free listing (default sm_90)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("explain", help="why a rung or a family config is as fast as it is",
                       description="Compile the kernel, then report its resources and occupancy, the "
                       "shared-memory bank behaviour of its declared accesses, its SASS main loop "
                       "(instruction mix, FFMA share, reuse, register-bank estimate) and the roofline "
                       "floors. With a GPU: also the driver's occupancy and a timed run beside cuBLAS.")
    p.add_argument("kernel", help="a rung (e.g. 08_hopper) or gemm (the family; --config sets its params)")
    p.add_argument("--config", type=CONFIG, help="kernel parameters NAME=VALUE,... (e.g. bm=128,bn=128,bk=16)")
    p.add_argument("--shape", type=SHAPE, default=parse_shape("4096x4096x4096"), metavar="MxNxK",
                   help="problem shape; default: 4096x4096x4096")
    p.add_argument("--layout", default="NN", choices=registry.LAYOUTS)
    p.add_argument("--arch", type=ARCH, help="compile for this arch (default: the GPU's, else sm_90)")
    p.add_argument("--gpu", help="whose measured peaks the roofline uses (default: this GPU's, else the first shipped)")
    p.add_argument("--no-measure", action="store_true", help="skip the timed run even with a GPU")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_explain)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):
        return args
    args.command_line = results.command(["tilegemm"] + argv, prog="tilegemm")
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
