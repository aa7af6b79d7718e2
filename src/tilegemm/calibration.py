"""Fitting the cost model (model.py) to calibration measurements (scripts/calibrate.py): the
constants that minimise the squared error of log time, by Levenberg-Marquardt with NumPy alone, and
the model table the selection reads (``tilegemm/tables/model-<gpu>.json``), which keeps the main
and small products' sets' residuals too (``residual_rows``: what corrects their predictions, residuals.py).

    python -m tilegemm.calibration fit CALIBRATION.json.gz ... [--small CALIBRATION-SMALL.json.gz ...] \
        [--layouts CALIBRATION-TT.json.gz ...] [--corrections CALIBRATION-NT.json.gz ...] \
        --out src/tilegemm/tables/model-<gpu>.json

The main set of constants is fitted to the bench draw's calibrations, the small products' set
(``--small``) to calibrations of ``calibrate.py --small``, timed from CUDA graphs; it applies below
its draw's bound of multiply-adds.  ``--layouts FILE...``: calibrations of other operand layouts
(``calibrate.py --layout``), a set fitted per layout, which serves that layout's shapes above the
small products' bound.  ``--corrections FILE...``: calibrations of other layouts whose residuals under
the fitted table correct that layout's predictions (``corrections``, model.near_for).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from . import access, builds, model, residuals, results
from .parsing import ArgParser, parse_args, run_command


def _names(tiles, mix: bool = True) -> list[str]:
    """The constants' names: six per tile config of ``tiles``, then the global ones (``mix`` among
    them where asked: model.MIX)."""
    return ([f"{t}.{k}" for t in builds.TILES if t in tiles for k in ("f", "a", "b", "u", "l", "v")] + list(model.GLOBALS)
            + [model.MIX] * mix)


def _start() -> dict:
    c = {}
    for t, cfg in builds.TILES.items():
        flop = 2.0 * cfg["bm"] * cfg["bn"] * cfg["bk"]  # one k-iteration of a block
        c[f"{t}.b"] = flop / 0.45e6  # an SM near 0.45 TFLOPS: us
        c[f"{t}.a"] = 1.5 * c[f"{t}.b"]
        c[f"{t}.f"] = 8.0
        c[f"{t}.u"] = 0.1
        c[f"{t}.l"] = 0.1
        c[f"{t}.v"] = 100.0  # us per million narrow result elements on one SM
    c.update({"red0": 3.0, "red1": 0.004, "hand": 5.0, "summed": 2.0, "launch": 3.0, model.MIX: 4.0})
    return c


def predicted(c: dict, r: dict, per_sm: dict, sms: int) -> float:
    """The model's microseconds for calibration row ``r`` (``load_calibration``) under constants ``c``, its
    build at ``per_sm`` blocks an SM, with the access widths the row was measured at."""
    return model.predict(c, r["candidate"], r["config"], r["M"], r["N"], r["K"], r["batch"],
                         per_sm[builds.build(r["candidate"])], sms, r["read"], r["out_width"], r["a_read"])


def fit(rows: list[dict], per_sm: dict, sms: int, iterations: int = 60, mix: bool = True) -> tuple[dict, float]:
    """Constants minimising the squared error of log time over ``rows`` (calibration rows with
    ms), model.MIX among them where ``mix`` (else a round takes the larger bound); returns
    (constants, root mean square of the log error)."""
    import numpy as np

    rows = [r for r in rows if r.get("ms") and builds.build(r["candidate"]) in per_sm
            and builds.current(r["candidate"], r["config"])]
    names = _names({r["candidate"].split()[0] for r in rows}, mix)
    x = np.log(np.array([_start()[n] for n in names]))
    y = np.log(np.array([1e3 * r["ms"] for r in rows]))

    def residuals(v):
        with np.errstate(over="ignore", invalid="ignore"):  # a trial step may overflow; its error is then rejected
            c = dict(zip(names, np.exp(v)))
            return np.log([predicted(c, r, per_sm, sms) for r in rows]) - y

    lam, res = 1e-2, residuals(x)
    for _ in range(iterations):
        J = np.empty((len(rows), len(x)))
        for j in range(len(x)):
            d = np.zeros_like(x)
            d[j] = 1e-4
            J[:, j] = (residuals(x + d) - res) / 1e-4
        A, g = J.T @ J, J.T @ res
        while True:
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), -g)
            new = residuals(x + step)
            if new @ new < res @ res:
                x, res, lam = x + step, new, max(lam / 3, 1e-7)
                break
            lam *= 4
            if lam > 1e8:
                break
        if lam > 1e8 or np.abs(step).max() < 1e-6:
            break
    return dict(zip(names, map(float, np.exp(x)))), float(np.sqrt(res @ res / len(res)))


def residual_rows(rows: list[dict], c: dict, per_sm: dict, sms: int) -> dict:
    """The residuals (residuals.py) of calibration ``rows`` under constants ``c``, by candidate."""
    out: dict = {}
    for r in rows:
        if r.get("ms") and r["batch"] == 1 and builds.build(r["candidate"]) in per_sm:
            _add_residual(out, r, predicted(c, r, per_sm, sms))
    return out


def _add_residual(out: dict, r: dict, t: float) -> None:
    """Calibration row ``r``'s residual against ``t`` predicted microseconds, added to ``out`` by candidate."""
    out.setdefault(r["candidate"], []).append(residuals.row(r["M"], r["N"], r["K"], r["read"], math.log(1e3 * r["ms"] / t)))


# The flag a calibration file carries when its builds (builds.BY_ROWS_BUILDS) read that class of rows
# (access.ROW_CLASSES) by rows; scripts/calibrate.py writes them all
ROW_CLASS_FLAGS = {access.ODD_ROWS: "odd_rows", access.ODD_PAIRS: "odd_pairs"}


def load_calibration(paths) -> tuple[list[dict], dict, int, str]:
    """(rows, blocks per SM by build (builds.build), SMs, GPU name) of calibration files of one GPU;
    rows of tile configs the model no longer runs (``builds.current``) or no longer offers for the
    row's shape (``builds.candidates``) are left out, and the blocks per SM of builds no row is left of.
    Files marked ``"arch_minb": true`` timed the builds dispatch runs at builds.ARCH_MINB's minb: where
    such a file times a build ARCH_MINB names, that build's rows from files without the mark measured
    at other blocks per SM (an earlier build of it) are left out, and its blocks per SM are the marked
    files'.
    Each row gets the access widths its operands allow and its result was stored with
    (the narrower of access.row_widths, and out_width; "width", "out_width") and the width its candidate read with, as the
    model charges it (B's, "read", builds.read_width, of B's width "b_width"; A's, "a_read"): files measured before the kernels took
    8-byte accesses lack ``"pairs": true``, and those measured before rows read 4 bytes at a time
    were copied from a threshold lack ``"odd_copies": true``, and ``"odd_copy_macs"`` gives the threshold
    (access.ODD_COPY_MACS_FIRST where absent); those measured
    before the builds of ``builds.BY_ROWS_BUILDS`` read rows of odd length by rows lack
    ``"odd_rows": true``, and their rows were read at width 1; those measured before they read rows
    of twice an odd length by rows lack ``"odd_pairs": true``, and their rows were read at width 2."""
    rows, per_sm, marked, sms, gpu = [], {}, {}, None, None
    for p in paths:
        d = _read(p, gpu)
        offered = {}
        classes = tuple(code for code, flag in ROW_CLASS_FLAGS.items() if d.get(flag))  # read by rows
        per_build = {builds.build(name): n for name, n in d["blocks_per_sm"].items()}  # for the filling split counts
        for r in d["rows"]:
            key = (r["M"], r["N"], r["K"], r["batch"])
            if key not in offered:
                offered[key] = {n for n, _ in builds.candidates(*key, d["sms"], per_build)}
            if builds.current(r["candidate"], r["config"]) and r["candidate"] in offered[key]:
                pairs = bool(d.get("pairs"))
                a, b = access.row_widths(r["layout"], *key, pairs=pairs, odd=bool(d.get("odd_copies")),
                                         odd_from=d.get("odd_copy_macs", access.ODD_COPY_MACS_FIRST))
                rows.append({**r, "width": min(a, b), "out_width": access.out_width(r["N"], pairs=pairs),
                             "read": builds.read_width(r["candidate"], b, classes), "a_read": a, "b_width": b,
                             "marked": bool(d.get("arch_minb")),
                             "blocks": d["blocks_per_sm"].get(r["candidate"])})
        blocks = {builds.build(name): n for name, n in d["blocks_per_sm"].items()
                  if builds.current(name, d["configs"][name])}
        per_sm.update(blocks)
        if d.get("arch_minb"):
            marked.update(blocks)
        sms, gpu = d["sms"], d["gpu"]
    newer = {b: n for b, n in marked.items() if any(b in caps for caps in builds.ARCH_MINB.values())}
    kept = []
    for r in rows:
        was_marked, blocks = r.pop("marked"), r.pop("blocks")
        if was_marked or newer.get(builds.build(r["candidate"]), blocks) == blocks:
            kept.append(r)
    rows = kept
    per_sm.update(newer)
    built = {builds.build(r["candidate"]) for r in rows}
    return rows, {b: n for b, n in per_sm.items() if b in built}, sms, gpu


def _read(path, gpu: str | None) -> dict:
    d = results.read(path)
    if d.get("kind") != "calibration" or (gpu and d["gpu"] != gpu):
        raise ValueError(f"{path} is not a calibration file of {gpu or 'one GPU'}")
    return d


def small_bound(paths) -> int:
    """The multiply-adds below which the small products' constants apply: the bound of the small
    calibrations' draw; each must be timed from CUDA graphs and drawn below one bound."""
    bounds = set()
    for p in paths:
        d = _read(p, None)
        if d.get("timer") != "graph" or not d.get("draw", {}).get("max_macs"):
            raise ValueError(f"{p} is not a calibration of small products (scripts/calibrate.py --small)")
        bounds.add(d["draw"]["max_macs"])
    if len(bounds) != 1:
        raise ValueError(f"the small calibrations were drawn below different bounds: {sorted(bounds)}")
    return bounds.pop()


def _fit_set(rows: list[dict], per_sm: dict, sms: int, mix: bool, what: str) -> tuple[dict, float]:
    """``fit``, refusing a blend's exponent below 1 (model.MIX: a round would take longer than its two bounds summed)."""
    consts, rms = fit(rows, per_sm, sms, mix=mix)
    if consts.get(model.MIX, 1.0) < 1.0:
        raise ValueError(f"the {what} set's blend exponent fitted to {consts[model.MIX]:.2f}, below 1; fit it with --no-mix")
    return consts, rms


def _by_layout(files, what: str) -> dict:
    """Calibration files of the bench draw (timed call by call, not from graphs) by their layout, none in NN."""
    out: dict = {}
    for f in files:
        d = _read(f, None)
        if d.get("timer") == "graph":
            raise ValueError(f"{f} is a calibration of small products; {what} the bench draw's")
        layout = d.get("layout", "NN")
        if layout == "NN":
            raise ValueError(f"{f} is a calibration in NN, which the main set is fitted to; pass it there")
        out.setdefault(layout, []).append(f)
    return out


def corrections(doc: dict, layout: str, files) -> dict:
    """The residuals (residuals.py) of ``layout``'s calibration ``files`` under the set of table ``doc``
    that ranks each shape in that layout (model.set_for, at the blocks an SM it ranks with, LAYOUT_RATES
    included), by candidate: what corrects that layout's single products (model.near_for)."""
    rows, _, sms, gpu = load_calibration(files)
    if (gpu, sms) != (doc["gpu"], doc["sms"]) or any(r["layout"] != layout for r in rows):
        raise ValueError(f"the {layout} calibrations mix layouts, or are of {gpu}, the table of {doc['gpu']}")
    sm = _read(files[0], None).get("sm")
    arch = f"sm_{sm}" if sm else None
    out: dict = {}
    for r in rows:
        s = model.set_for(doc, r["M"], r["N"], r["K"], r["batch"], layout)
        per_sm = builds.blocks_per_sm(s["blocks_per_sm"], layout, arch)
        if not r.get("ms") or r["batch"] != 1 or s is doc.get("small") or builds.build(r["candidate"]) not in per_sm:
            continue
        rate = model.rates(doc, s, layout).get(r["candidate"].split()[0], 1.0)
        _add_residual(out, r, predicted(s["constants"], r, per_sm, sms) * rate)
    return out


def model_table(files, small_files=(), layout_files=(), mix: bool = True, correction_files=()) -> tuple[dict, str]:
    """The model table fitted to calibration ``files`` (``small_files`` for the small products' set,
    ``layout_files`` for a set per layout they were measured in), and a line saying what was fitted;
    ``mix``: the main and layout sets fit the rounds' blend (model.MIX; without it, as tables before it).
    The main and small sets take NN calibrations only; a layout's set, calibrations of the bench
    draw (timed call by call, not from graphs); ``correction_files``, such calibrations of other layouts,
    whose residuals under the fitted table correct that layout's predictions (``corrections``)."""
    for f in (*files, *small_files):
        layout = _read(f, None).get("layout", "NN")
        if layout != "NN":
            raise ValueError(f"{f} is a calibration in {layout}; pass it with --layouts")
    by_layout = _by_layout(layout_files, "a layout's set is fitted to")
    by_correction = _by_layout(correction_files, "corrections are taken from")
    rows, per_sm, sms, gpu = load_calibration(files)
    consts, rms = _fit_set(rows, per_sm, sms, mix, "main")
    # the residuals correct the main set and the small products' set, where held out they were
    # measured (docs/model.md); the layouts' sets have two seeds each, too few to hold one out
    doc = {"schema": 1, "kind": "model", "gpu": gpu, "sms": sms, "command": results.command(prog="python -m tilegemm.calibration"),
           "commit": results.commit(), "fitted_on": [Path(x).name for x in files], "rows": len(rows),
           "rms_log_error": rms, "blocks_per_sm": per_sm, "constants": consts,
           "residuals": residual_rows(rows, consts, per_sm, sms)}
    said = f"fitted {len(consts)} constants to {len(rows)} timings: rms log error {rms:.3f}"
    if small_files:
        s_rows, s_per_sm, s_sms, s_gpu = load_calibration(small_files)
        if (s_gpu, s_sms) != (gpu, sms):
            raise ValueError(f"the small calibrations are of {s_gpu}, the others of {gpu}")
        s_consts, s_rms = fit(s_rows, s_per_sm, sms, mix=False)  # model.MIX: not measured on small products
        doc["small"] = {"below_macs": small_bound(small_files), "timer": "graph",
                        "fitted_on": [Path(x).name for x in small_files], "rows": len(s_rows),
                        "rms_log_error": s_rms, "blocks_per_sm": s_per_sm, "constants": s_consts,
                        "residuals": residual_rows(s_rows, s_consts, s_per_sm, sms)}
        said += f"; small products: {len(s_consts)} constants to {len(s_rows)} timings, rms log error {s_rms:.3f}"
    for layout, fs in sorted(by_layout.items()):
        l_rows, l_per_sm, l_sms, l_gpu = load_calibration(fs)
        if (l_gpu, l_sms) != (gpu, sms) or any(r["layout"] != layout for r in l_rows):
            raise ValueError(f"the {layout} calibrations mix layouts, or are of {l_gpu}, the others of {gpu}")
        l_consts, l_rms = _fit_set(l_rows, l_per_sm, sms, mix, layout)
        doc.setdefault("layouts", {})[layout] = {"fitted_on": [Path(x).name for x in fs], "rows": len(l_rows),
                                                  "rms_log_error": l_rms, "blocks_per_sm": l_per_sm,
                                                  "constants": l_consts}
        said += f"; {layout}: {len(l_consts)} constants to {len(l_rows)} timings, rms log error {l_rms:.3f}"
    for layout, fs in sorted(by_correction.items()):
        near = corrections(doc, layout, fs)
        doc.setdefault("corrections", {})[layout] = {"fitted_on": [Path(x).name for x in fs], "residuals": near}
        said += f"; {layout} corrected by {sum(map(len, near.values()))} timings"
    return doc, said


def held_out(table: dict, paths) -> dict:
    """What a model table picks on calibration files it was not fitted to (each shape by the set
    ``model.set_for`` gives it, corrected by the residuals ``model.near_for`` gives): per shape the
    measured time of the candidate it ranks first among those measured, of the best measured, and
    cuBLAS's; the geometric means of cuBLAS's time over each (candidates timed one at a time), and
    per shape (``per_shape``) the pick and cuBLAS's time over the pick's and over the best's."""
    rows, _, sms, _ = load_calibration(paths)
    sm = results.read(paths[0]).get("sm")  # the builds ranked as on the calibrations' arch
    arch = f"sm_{sm}" if sm else None
    shapes: dict = {}
    for r in rows:
        shapes.setdefault((r["layout"], r["M"], r["N"], r["K"], r["batch"], r["a_read"], r["b_width"], r["out_width"]),
                          {})[r["candidate"]] = r
    per_shape = []
    for (layout, M, N, K, count, a_width, width, out_width), rs in shapes.items():
        ranked = model.ranked_for(table, M, N, K, count, sms, layout, width, out_width, arch, a_width)
        pick = next((name for name, _, _ in ranked if name in rs), None)
        if pick is None:
            continue
        cublas = rs[pick]["cublas_ms"]
        per_shape.append({"shape": [layout, M, N, K, count], "pick": pick, "ratio": cublas / rs[pick]["ms"],
                          "best": cublas / min(r["ms"] for r in rs.values())})
    mean = lambda key: (math.exp(sum(math.log(p[key]) for p in per_shape) / len(per_shape)) if per_shape
                        else float("nan"))
    return {"shapes": len(per_shape), "pick": mean("ratio"), "best": mean("best"), "per_shape": per_shape}


def dump_table(doc: dict) -> str:
    """A model table as JSON text: indented, each candidate's residuals on one line (the main set
    holds thousands of them, the small products' set too)."""
    blocks = {}

    def compact(d: dict, token: str, pad: str) -> dict:
        if "residuals" not in d:
            return d
        blocks[json.dumps(token)] = "{\n" + ",\n".join(
            f"{pad} {json.dumps(name)}: {json.dumps(rows, separators=(',', ':'))}"
            for name, rows in d["residuals"].items()) + f"\n{pad}}}"
        return {**d, "residuals": token}

    out = compact(doc, "@residuals@", " ")
    if "small" in out:
        out = {**out, "small": compact(out["small"], "@small residuals@", "  ")}
    if "corrections" in out:
        out = {**out, "corrections": {layout: compact(c, f"@{layout} residuals@", "   ")
                                      for layout, c in out["corrections"].items()}}
    text = json.dumps(out, indent=1)
    for token, block in blocks.items():
        text = text.replace(token, block)
    return text + "\n"


def main(argv=None) -> int:
    p = ArgParser(prog="python -m tilegemm.calibration", description="fit the cost model's constants")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=ArgParser)
    f = sub.add_parser("fit", help="fit the constants to calibration files of one GPU; write its model table")
    f.add_argument("files", nargs="+")
    f.add_argument("--small", nargs="+", default=[], help="calibrations of small products (calibrate.py --small)")
    f.add_argument("--layouts", nargs="+", default=[], help="calibrations of other layouts (calibrate.py --layout)")
    f.add_argument("--corrections", nargs="+", default=[],
                   help="calibrations of other layouts whose residuals correct that layout's predictions")
    f.add_argument("--out", required=True, help="the model table to write (src/tilegemm/tables/model-<gpu>.json)")
    h = sub.add_parser("held-out", help="fit to FILES, then measure the picks on calibrations it was not fitted to")
    h.add_argument("files", nargs="+")
    h.add_argument("--layouts", nargs="+", default=[], help="calibrations of other layouts (calibrate.py --layout)")
    h.add_argument("--on", nargs="+", required=True, help="calibration files of other seeds, same GPU")
    for q in (f, h):
        q.add_argument("--no-mix", action="store_true", help="take a round's larger bound, not the fitted blend (model.MIX)")
    args = parse_args(p, argv)
    if isinstance(args, int):
        return args

    def run(a):
        doc, said = model_table(a.files, a.small if a.cmd == "fit" else (), a.layouts, not a.no_mix,
                                a.corrections if a.cmd == "fit" else ())
        if a.cmd == "held-out":
            r = held_out(doc, a.on)
            print(f"{said}; on {r['shapes']} held-out shapes its picks run at {r['pick']:.3f}x cuBLAS, "
                  f"the best candidate at {r['best']:.3f}x (each timed alone)")
            return 0
        Path(a.out).write_text(dump_table(doc))
        print(f"{said}; wrote {a.out}")
        return 0

    return run_command(run, args)


if __name__ == "__main__":
    sys.exit(main())
