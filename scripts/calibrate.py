"""Calibration data for the selection's cost model: every candidate of tilegemm.model timed on a
random draw of shapes, cuBLAS beside, each candidate checked against float64 first.

usage: python scripts/calibrate.py --seed S --n N [--small] [--layout L] [--out DIR] [--target-s T]
(--small: small products, the draw of tilegemm.suites.SMALL_DRAW, every candidate and cuBLAS timed
from CUDA graphs, since there the host takes longer per call than the GPU; the file is named
calibration-small-s<S>)
(--layout: the operands' layout, NN by default; another is named in the file, calibration-<l>-s<S>)
(--tiles: time only the candidates of these tiles of tilegemm.builds.TILES, e.g. a new one; the file
is named calibration-<tiles>-s<S>, and fits take it beside the files that time the rest)
(--filling-only: time only the candidates the split counts that fill the SMs' block slots add to
the powers of two (builds.filling_splits); named calibration-filling-s<S>)
(--narrow-b: only the draw's shapes whose B the kernels read along its rows less than 16 bytes at a
time (access.row_widths: rows not 16-byte aligned and not copied), the first N of them; named
calibration-narrowb-s<S>: the class of the lowest shapes, about a quarter of a full draw; NN or TN,
where B is read along its rows; --narrow-a: the same for A, in TN or TT, where A is a transposed view;
named calibration-<l>-narrowa-s<S>)
(--long-k: only the draw's shapes of long K with few tiles (tilegemm.suites.long_k, at this GPU's SMs), the first
N of them; named calibration-<l>-longk-s<S>: the class of most of the draws' lowest shapes, about a fifth of a draw)
The candidates include the filling split counts, found from each build's blocks per SM.
Writes DIR (default $OUT, else benchmarks/results)/<gpu>-<date>-calibration-s<S>.json.gz (gzipped; kind
"calibration"), rewritten after every shape so that a run cut short keeps what it measured.  Rows:
the shape, the candidate's name and config, ms, TFLOPS and relative error; per config the blocks
that fit on an SM (the driver's occupancy).  Calibrate on one seed, report on another.
"""
import os
import sys
import time

from tilegemm import access, api, autotune, builds, calibration, gpu, launch, registry, results, suites, timing
from tilegemm.parsing import ArgParser, parse_args, run_command


def main(argv=None) -> int:
    p = ArgParser(prog="scripts/calibrate.py", description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    p.add_argument("--target-s", type=float, default=0.1)
    p.add_argument("--small", action="store_true", help="small products, timed from CUDA graphs")
    p.add_argument("--layout", choices=registry.LAYOUTS, default="NN", help="the operands' layout (default NN)")
    p.add_argument("--tiles", nargs="+", choices=sorted(builds.TILES), help="time only these tiles' candidates")
    p.add_argument("--filling-only", action="store_true",
                   help="time only the candidates the filling split counts add")
    narrow_class = p.add_mutually_exclusive_group()
    narrow_class.add_argument("--narrow-b", action="store_true",
                              help="only shapes whose B is read along its rows less than 16 bytes at a time")
    narrow_class.add_argument("--narrow-a", action="store_true",
                              help="only shapes whose A is read along its rows less than 16 bytes at a time (TN, TT)")
    narrow_class.add_argument("--long-k", action="store_true",
                              help="only shapes of long K with few tiles (tilegemm.suites.long_k)")
    args = parse_args(p, argv)
    return args if isinstance(args, int) else run_command(run, args)


def _cublas(sets, outs, graph: bool, dev: int):
    """run(j): cuBLAS on input set j; for graph timing through torch (on CuPy's current stream),
    since CuPy refuses cuBLAS calls while a stream is captured."""
    cupy = gpu.cupy()
    if not graph:
        return lambda j: cupy.matmul(*sets[j], out=outs[j])
    import torch

    ts = [(torch.as_tensor(a, device=f"cuda:{dev}"), torch.as_tensor(b, device=f"cuda:{dev}")) for a, b in sets]
    to = [torch.as_tensor(o, device=f"cuda:{dev}") for o in outs]
    streams = {}

    def run(j):
        ptr = cupy.cuda.get_current_stream().ptr
        s = streams.get(ptr) or streams.setdefault(ptr, torch.cuda.ExternalStream(ptr))
        with torch.cuda.stream(s):
            torch.mm(*ts[j], out=to[j])

    return run


def _candidates(M, N, K, count, sms, tiles, per_sm=None, filling_only=False):
    """The model's candidates for the shape (with the filling split counts of ``per_sm``), of
    ``tiles`` only if given; ``filling_only``: only those the filling counts add."""
    plain = {n for n, _ in builds.candidates(M, N, K, count, sms)} if filling_only else set()
    return [(n, c) for n, c in builds.candidates(M, N, K, count, sms, per_sm)
            if (not tiles or n.split()[0] in tiles) and n not in plain]


def _first(n: int, seed: int, layout: str, draw: dict, keep, what: str, gpu: str | None = None) -> list[tuple]:
    """The first ``n`` shapes of seed ``seed``'s draw that the family runs in ``layout`` on the GPU named ``gpu``
    (access.kernel_layout: the NT and TT products it runs as NN and TN, on a copy of B transposed, are those layouts'
    calibrations' to time, and on the H200 the NN products it runs as TN on a copy of A transposed, TN's) and for which
    ``keep(shape)`` holds, in the draw's order; ValueError where its first 200 * n hold fewer (``what`` names them)."""
    out = []
    for size in (20 * n, 200 * n):
        out = [s for s in suites.random_shapes(size, seed, (layout,), **draw)
               if access.kernel_layout(layout, *s[:3], s[4], gpu) == layout and keep(s)][:n]
        if len(out) == n:
            return out
    raise ValueError(f"seed {seed}'s first {200 * n} shapes hold only {len(out)} {what}; ask for fewer")


def run_in(n: int, seed: int, layout: str, draw: dict, gpu: str | None = None) -> list[tuple]:
    """The first ``n`` shapes of seed ``seed``'s draw that the family runs in ``layout`` on the GPU named ``gpu`` (the
    draw itself in TN, and in NN but on the H200)."""
    return _first(n, seed, layout, draw, lambda s: True, f"that run in {layout}", gpu)


def narrow(n: int, seed: int, layout: str, draw: dict, operand: str = "B", gpu: str | None = None) -> list[tuple]:
    """The first ``n`` shapes of seed ``seed``'s draw whose ``operand`` ("A" or "B") the family reads
    along its rows less than 16 bytes at a time (access.row_widths), among those it runs in ``layout``
    (``run_in``); ValueError in a layout where that operand is not read along its rows (A as stored, B a
    transposed view), or where the draw holds too few such shapes."""
    i, along = (0, "T") if operand == "A" else (1, "N")
    if layout[i] != along:
        which = "TN or TT" if operand == "A" else "NN or TN"
        raise ValueError(f"--narrow-{operand.lower()} takes a layout whose {operand} is read along its rows "
                         f"({which}), not {layout}")
    return _first(n, seed, layout, draw, lambda s: access.row_widths(layout, s[0], s[1], s[2])[i] != 4,
                  f"whose {operand} is read narrow", gpu)


def long_k(n: int, seed: int, layout: str, draw: dict, sms: int, gpu: str | None = None) -> list[tuple]:
    """The first ``n`` shapes of seed ``seed``'s draw of long K with few tiles (suites.long_k on ``sms`` SMs), among
    those the family runs in ``layout`` (``run_in``)."""
    return _first(n, seed, layout, draw, lambda s: suites.long_k(*s[:3], s[4], sms), "of long K with few tiles", gpu)


def run(args) -> int:
    dev = gpu.current_device()
    props = gpu.device_properties(dev)
    draw = dict(suites.SMALL_DRAW if args.small else suites.DRAW)
    shapes = (narrow(args.n, args.seed, args.layout, draw, "A" if args.narrow_a else "B", props.name)
              if args.narrow_a or args.narrow_b else long_k(args.n, args.seed, args.layout, draw, props.sms, props.name)
              if args.long_k else run_in(args.n, args.seed, args.layout, draw, props.name))
    configs = {}
    for M, N, K, _, _ in shapes:
        configs.update(dict(_candidates(M, N, K, 1, props.sms, args.tiles)))
    t0 = time.time()
    autotune.compile_all(list(configs.values()), [args.layout], props.arch)
    print(f"{len(configs)} configs compiled in {time.time() - t0:.0f} s", flush=True)
    occupancy = {}
    for name, cfg in configs.items():
        # the build dispatch runs at 16-byte access (at the minb of builds.ARCH_MINB where it names it)
        params = registry.FAMILY.params({k: v for k, v in cfg.items() if k != "splits"})
        q = builds.arch_minb(params, args.layout, 4, props.arch)
        fn = launch.launcher(registry.FAMILY.name, args.layout, 4, dev, tuple(sorted(q.items())))
        occupancy[name] = fn.resident_blocks() // props.sms
    # the split counts that fill each build's block slots (the same builds: splits is a launch argument)
    per_sm = {builds.build(name): n for name, n in occupancy.items()}
    timed = {}
    for M, N, K, _, _ in shapes:
        timed.update(_candidates(M, N, K, 1, props.sms, args.tiles, per_sm, args.filling_only))
    configs, occupancy = timed, {n: per_sm[builds.build(n)] for n in timed}
    rows = []
    # pairs: the kernels read rows that are 8- but not 16-byte aligned 8 bytes at a time; odd_copies:
    # rows read 4 bytes at a time are copied from access.ODD_COPY_MACS_PER_ELEMENT (odd_copy_macs); the flags of
    # calibration.ROW_CLASS_FLAGS: the builds of builds.BY_ROWS_BUILDS read those classes of rows by
    # rows (the calibration's loader labels the rows accordingly; files without them were measured before);
    # arch_minb: the builds were run, and their blocks per SM counted, at builds.ARCH_MINB's minb
    doc = results.document(rows, cmd=results.command(prog="python scripts/calibrate.py"), kind="calibration",
                           seed=args.seed, n=args.n, draw=draw, timer="graph" if args.small else "events",
                           configs=configs, blocks_per_sm=occupancy, pairs=True, odd_copies=True,
                           odd_copy_macs=access.ODD_COPY_MACS_PER_ELEMENT, arch_minb=True,
                           **dict.fromkeys(calibration.ROW_CLASS_FLAGS.values(), True),
                           layout=args.layout, **({"tiles": args.tiles} if args.tiles else {}),
                           **({"filling_only": True} if args.filling_only else {}),
                           **({"narrow_b": True} if args.narrow_b else {}),
                           **({"narrow_a": True} if args.narrow_a else {}),
                           **({"long_k": True} if args.long_k else {}))
    for i, (M, N, K, layout, count) in enumerate(shapes):
        cands = _candidates(M, N, K, count, props.sms, args.tiles, per_sm, args.filling_only)
        if not cands:
            continue
        sets, outs = timing.input_sets(M, N, K, layout, count)
        cublas = timing.time_launches(_cublas(sets, outs, args.small, dev), len(sets), target_s=args.target_s,
                                      batch_ms=5.0, graph=args.small)
        tried = autotune.measure([c for _, c in cands], M, N, K, count, layout, dev, api.matmul,
                                 target_s=args.target_s, graph=args.small)
        for (name, _), t in zip(cands, tried):
            rows.append({"M": M, "N": N, "K": K, "layout": layout, "batch": count, "candidate": name,
                         "config": t["config"], "ms": t["ms"], "tflops": t["tflops"], "rel_err": t["rel_err"],
                         "cublas_ms": cublas, **({"error": t["error"]} if "error" in t else {})})
        best = max((t for t in tried if t["tflops"]), key=lambda t: t["tflops"])
        print(f"[{i + 1}/{len(shapes)}] {M}x{N}x{K}: cuBLAS {2e-9 * M * N * K / cublas:.1f}, best "
              f"{best['tflops']:.1f} ({cands[tried.index(best)][0]}), {time.time() - t0:.0f} s", flush=True)
        doc["rows"] = rows
        lay = "" if args.layout == "NN" else args.layout.lower() + "-"
        only = ("".join(f"{t}-" for t in args.tiles or ()) + ("filling-" if args.filling_only else "")
                + ("narrowb-" if args.narrow_b else "") + ("narrowa-" if args.narrow_a else "") + ("longk-" if args.long_k else ""))
        tag = f"calibration-{'small-' if args.small else ''}{lay}{only}s{args.seed}"
        results.write(doc, args.out, tag, compress=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
