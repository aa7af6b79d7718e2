"""Tables for the README, generated from committed results JSON (never typed by hand).

A README block ``<!-- results:FILE[:VIEW] -->`` ... ``<!-- /results -->`` is replaced by the table
built from ``benchmarks/results/FILE.json``.  Run ``python -m tilegemm.report README.md``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

BLOCK = re.compile(r"(<!-- results:(?P<file>[\w.\-]+)(?::(?P<view>\w+))? -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


def _shape(r) -> str:
    M, N, K = r["M"], r["N"], r["K"]
    s = f"{M}³" if M == N == K else f"{M}x{N}x{K}"
    if r.get("batch", 1) > 1:
        s = f"{r['batch']} x {s}"
    return s if r.get("layout", "NN") == "NN" else f"{s} {r['layout']}"


def _cell(r) -> str:
    if r.get("tflops") is None:
        return "refused" if r.get("refused") else "failed"
    if r["kernel"] == "cublas":
        return f"{r['tflops']:.1f}"
    return f"{r['tflops']:.1f} ({100 * r['ratio']:.0f}%)"


def pivot_table(doc: dict) -> str:
    """Kernels as rows, shapes as columns: TFLOPS (percent of cuBLAS).  Rows run with a
    non-default config (parameter studies) are left to their own views."""
    rows = [r for r in doc["rows"] if not r.get("config")]
    shapes, kernels = [], []
    for r in rows:
        s = _shape(r)
        if s not in shapes:
            shapes.append(s)
        if r["kernel"] not in kernels:
            kernels.append(r["kernel"])
    cells = {(r["kernel"], _shape(r)): r for r in rows}
    errs = {}
    for r in rows:
        if r.get("rel_err") is not None:
            errs[r["kernel"]] = max(errs.get(r["kernel"], 0.0), r["rel_err"])
    head = "| kernel | " + " | ".join(shapes) + " | max rel. error |"
    sep = "|---|" + "---|" * len(shapes) + "---|"
    lines = [head, sep]
    for k in kernels:
        vals = [_cell(cells[(k, s)]) if (k, s) in cells else "" for s in shapes]
        err = f"{errs[k]:.1e}" if k in errs else "-"
        lines.append(f"| {k} | " + " | ".join(vals) + f" | {err} |")
    caption = (f"TFLOPS (percent of cuBLAS in the same run) on {doc['gpu']}, driver {doc['driver']}, "
               f"{doc['date']}; CuPy {doc['versions'].get('cupy')}, NVRTC {doc['versions'].get('nvrtc')}.")
    if doc.get("fp32_peak_tflops"):
        caption += f" FP32 FFMA peak measured in the same run: {doc['fp32_peak_tflops']:.1f} TFLOPS."
    return caption + "\n\n" + "\n".join(lines) + "\n"


def study_table(doc: dict) -> str:
    """Rung 5's parameter study at 4096^3 beside the article's own V100 figures (GEMM part 2 §3)."""
    from .ladder import PARAMETER_STUDY

    ours = {}
    for r in doc["rows"]:
        c = r.get("config")
        if r["kernel"] == "05_double_buffered" and c:
            ours[tuple(c[k] for k in ("bm", "bk", "bn", "rm", "rn"))] = r
    lines = ["| bm/bk/bn/rm/rn | TFLOPS (ours) | % of cuBLAS (ours) | article: V100 GFLOPS | article: % of cuBLAS |",
             "|---|---|---|---|---|"]
    for cfg, gflops, pct in PARAMETER_STUDY:
        r = ours.get(cfg)
        t = "-" if r is None or r.get("tflops") is None else f"{r['tflops']:.1f}"
        q = "-" if r is None or r.get("ratio") is None else f"{100 * r['ratio']:.1f}%"
        lines.append(f"| {'/'.join(map(str, cfg))} | {t} | {q} | {gflops:g} | {pct}% |")
    return (f"05_double_buffered at 4096³ on {doc['gpu']} ({doc['date']}), beside the V100 table of GEMM part 2 "
            "(docs/sources.md).\n\n" + "\n".join(lines) + "\n")


def suite_table(doc: dict) -> str:
    """The bench suite: one row per case, one column per implementation (TFLOPS, % of cuBLAS),
    the config tilegemm chose and where it came from, then the geometric means and the per-call
    host overhead."""
    rows = [r for r in doc["rows"] if not r.get("config")]
    cases, impls = [], []
    for r in rows:
        key = _shape(r)
        if key not in cases:
            cases.append(key)
        if r["kernel"] not in impls:
            impls.append(r["kernel"])
    cell = {(_shape(r), r["kernel"]): r for r in rows}
    lines = ["| case | " + " | ".join(impls) + " | tilegemm config (source) |",
             "|---|" + "---|" * len(impls) + "---|"]
    for c in cases:
        vals = [_cell(cell[(c, k)]) if (c, k) in cell else "" for k in impls]
        sel = (cell.get((c, "tilegemm")) or {}).get("selected") or {}
        pipe = f" cp.async x{sel['stages']}" if sel.get("stages") else ""
        work = (" stream-K" if sel.get("sk") == 1 else " split{splits} summed in-kernel".format(**sel)
                if sel.get("sk") == 2 else " split{splits}".format(**sel) if sel else "")
        cfg = ("{bm}x{bn}x{bk} t{tm}x{tn} ln{ln} minb{minb}".format(**sel) + pipe + work
               + " ({source})".format(**sel) if sel else "")
        lines.append(f"| {c} | " + " | ".join(vals) + f" | {cfg} |")
    caption = (f"TFLOPS (percent of cuBLAS in the same run) on {doc['gpu']}, driver {doc['driver']}, "
               f"{doc['date']}; CuPy {doc['versions'].get('cupy')}, torch {doc['versions'].get('torch')}, "
               f"NVRTC {doc['versions'].get('nvrtc')}. Shapes are M x N x K, batch x shape for batches.")
    tail = ""
    if doc.get("geomean_ratio"):
        tail += "\nGeometric mean of the ratio to cuBLAS over the suite: " + ", ".join(
            f"{k} {v:.3f}x" for k, v in doc["geomean_ratio"].items()) + ".\n"
    if doc.get("call_overhead_us"):
        tail += "\nHost time per call, µs (`out=` given, calls back to back): " + ", ".join(
            f"{o['impl']} {o['size']}³ {o['us_per_call']:.1f}" for o in doc["call_overhead_us"]) + ".\n"
    return caption + "\n\n" + "\n".join(lines) + "\n" + tail


def draw_table(doc: dict) -> str:
    """Shapes nobody tuned for (a random draw, kind "random", or the real-world set, kind "real"):
    the distribution of tilegemm's ratio to cuBLAS, then the cases where it is lowest."""
    from .bench import geomean

    rows = {}
    ours = next(r["kernel"] for r in doc["rows"] if r["kernel"].startswith("tilegemm"))  # the first path measured
    for r in doc["rows"]:
        kernel = "tilegemm" if r["kernel"] == ours else r["kernel"]
        rows.setdefault((r["M"], r["N"], r["K"], r["layout"], r["batch"], r.get("case")), {})[kernel] = r
    cases = [(key, v) for key, v in rows.items() if "tilegemm" in v]
    rs = sorted((v["tilegemm"].get("ratio") or 0.0) for _, v in cases)
    what = (f"{len(cases)} shapes drawn with seed {doc['seed']} (M, N, K each log-uniform in "
            f"[{doc['draw']['lo']}, {doc['draw']['hi']}], at least {_cube(doc['draw']['min_macs'])} multiply-adds, "
            f"layouts {'/'.join(doc['draw']['layouts'])})" if doc.get("kind") == "random"
            else f"{len(cases)} common real-world shapes")
    path = "the default path" if ours == "tilegemm" else f"the default path at precision {ours.split('-', 1)[1]}"
    head = (f"{what} on {doc['gpu']}, driver {doc['driver']}, {doc['date']}, {path} (no tuning "
            f"on these shapes) beside cuBLAS SGEMM in the same run: geometric mean {geomean(rs):.3f}x, 5th "
            f"percentile {rs[len(rs) // 20]:.3f}x, lowest {rs[0]:.3f}x; below 1.00x: {sum(x < 1 for x in rs)}, "
            f"below 0.97x: {sum(x < 0.97 for x in rs)}, below 0.90x: {sum(x < 0.9 for x in rs)}.")
    lines = ["| case | layout | cuBLAS TFLOPS | tilegemm TFLOPS | ratio | tilegemm config (source) |",
             "|---|---|---|---|---|---|"]
    for (M, N, K, layout, batch, name), v in sorted(cases, key=lambda kv: kv[1]["tilegemm"].get("ratio") or 0)[:10]:
        t, c, sel = v["tilegemm"], v.get("cublas", {}), v["tilegemm"].get("selected") or {}
        cfg = " ".join(f"{k}={sel[k]}" for k in ("bm", "bn", "bk", "ks", "stages", "splits", "sk", "mma") if k in sel)
        shape = (f"{name}: " if name else "") + f"{M}x{N}x{K}"
        lines.append(f"| {shape} | {layout} | {_num(c.get('tflops'))} | {_num(t.get('tflops'))} | "
                     f"{_num(t.get('ratio'), '{:.3f}')} | {cfg} ({sel.get('source', '-')}) |")
    return head + "\n\nThe ten lowest:\n\n" + "\n".join(lines) + "\n"


def _cube(x: int) -> str:
    n = round(x ** (1 / 3))
    return f"{n}³" if n**3 == x else f"{x:.3g}"


def _num(x, spec="{:.1f}") -> str:
    return "-" if x is None else spec.format(x)


def _m(x) -> str:
    return "-" if x is None else f"{x / 1e6:.2f}"


def banks_table(doc: dict) -> str:
    """Shared-memory wavefronts of every kernel at one shape: the classic model, the refined model
    and Nsight Compute, loads and stores (instruments/banks.py, instruments/probe.py)."""
    M, N, K = doc["kernel_shape"]
    lines = ["| kernel | loads: classic model | loads: Hopper model | loads: ncu | ncu load conflicts "
             "| stores: model | stores: ncu | ncu store conflicts |",
             "|---|---|---|---|---|---|---|---|"]
    for k in doc["kernels"]:
        lines.append(f"| {k['kernel']} | {_m(k['classic_ld_wavefronts'])} | {_m(k['hopper_ld_wavefronts'])} "
                     f"| {_m(k['measured_ld_wavefronts'])} | {_m(k['measured_ld_conflicts'])} "
                     f"| {_m(k['hopper_st_wavefronts'])} | {_m(k['measured_st_wavefronts'])} "
                     f"| {_m(k['measured_st_conflicts'])} |")
    probes = doc["probes"]
    hit = {m: sum(r[f"{m}_wavefronts"] == r["measured_wavefronts"] for r in probes) for m in ("classic", "hopper")}
    return (f"Shared-memory wavefronts (millions) of one {M}x{N}x{K} launch on {doc['gpu']} ({doc['date']}, "
            f"driver {doc['driver']}): predicted from each kernel's declared accesses, measured by Nsight "
            "Compute (l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld/st.sum). Single-instruction probes: "
            f"the classic model (GEMM illustrated's rules) predicts {hit['classic']} of {len(probes)}, the refined "
            f"model {hit['hopper']} "
            f"of {len(probes)}.\n\n" + "\n".join(lines) + "\n")


def probes_table(doc: dict) -> str:
    """The single-instruction probes where the classic model and the measurement differ, and the
    worked cases of GEMM illustrated."""
    lines = ["| probe (one warp-wide instruction) | classic model | Hopper model | ncu |", "|---|---|---|---|"]
    for r in doc["probes"]:
        worked = "worked case" in r["name"] or "4x8" in r["name"]
        if worked or r["classic_wavefronts"] != r["measured_wavefronts"]:
            lines.append(f"| {r['name']} | {r['classic_wavefronts']} | {r['hopper_wavefronts']} "
                         f"| {r['measured_wavefronts']:.0f} |")
    return (f"Wavefronts of single shared-memory instructions on {doc['gpu']} ({doc['date']}): GEMM illustrated's "
            "worked cases, and every probe where the classic model misses.\n\n" + "\n".join(lines) + "\n")


def accuracy_table(doc: dict) -> str:
    """scripts/accuracy.py's file: the normwise relative error of each implementation per case, and
    whether NaN and Inf come out where cuBLAS SGEMM puts them."""
    impls = ("cublas", "fp32", "tf32x3", "tf32", "cublas-tf32")
    names = {"cublas": "cuBLAS SGEMM", "cublas-tf32": "cuBLAS TF32"}
    lines = ["| case | M x N x K | " + " | ".join(names.get(i, f"tilegemm {i}") for i in impls) + " |",
             "|---|---|" + "---|" * len(impls)]
    for r in doc["rows"]:
        if "errors" in r:
            lines.append(f"| {r['case']} | {r['M']}x{r['N']}x{r['K']} | "
                         + " | ".join(_num(r["errors"].get(i), "{:.2e}") for i in impls) + " |")
    same = [f"{r['precision']}: {'yes' if r['same'] else 'NO'}" for r in doc["rows"] if "same" in r]
    return (f"||C - C_float64|| / ||C_float64|| on {doc['gpu']} ({doc['date']}), the same inputs for every "
            f"implementation (seed {doc['seed']}).\n\n" + "\n".join(lines)
            + "\n\nNaN and Inf where cuBLAS SGEMM puts them (Inf and NaN placed in the operands): "
            + ", ".join(same) + ".\n")


VIEWS = {"pivot": pivot_table, "study": study_table, "draw": draw_table, "suite": suite_table, "banks": banks_table,
         "probes": probes_table, "accuracy": accuracy_table}


def render(text: str, results_dir: Path) -> str:
    def sub(m):
        doc = json.loads((results_dir / f"{m.group('file')}.json").read_text())
        body = VIEWS[m.group("view") or "pivot"](doc)
        return m.group(1) + body + m.group(5)

    return BLOCK.sub(sub, text)


def main(argv=None) -> int:
    argv = argv or sys.argv[1:]
    readme = Path(argv[0] if argv else "README.md")
    results = Path(argv[1]) if len(argv) > 1 else readme.parent / "benchmarks" / "results"
    new = render(readme.read_text(), results)
    if new != readme.read_text():
        readme.write_text(new)
        print(f"updated {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
