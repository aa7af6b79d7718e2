"""Fitting the cost model (model.py) to calibration measurements (scripts/calibrate.py): the
constants that minimise the squared error of log time, by Levenberg-Marquardt with NumPy alone, and
the model table the selection reads (``tilegemm/tables/model-<gpu>.json``).

    python -m tilegemm.calibration fit CALIBRATION.json ... --out src/tilegemm/tables/model-<gpu>.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import model, results
from .parsing import ArgParser, parse_args, run_command


def _names() -> list[str]:
    """The constants' names: three per tile config, then the global ones."""
    return [f"{t}.{k}" for t in model.TILES for k in ("f", "a", "b")] + list(model.GLOBALS)


def _start() -> dict:
    c = {}
    for t, cfg in model.TILES.items():
        flop = 2.0 * cfg["bm"] * cfg["bn"] * cfg["bk"]  # one k-iteration of a block
        c[f"{t}.b"] = flop / 0.45e6  # an SM near 0.45 TFLOPS: us
        c[f"{t}.a"] = 1.5 * c[f"{t}.b"]
        c[f"{t}.f"] = 8.0
    c.update(red0=3.0, red1=0.004, hand=5.0, summed=2.0, launch=3.0)
    return c


def fit(rows: list[dict], per_sm: dict, sms: int, iterations: int = 60) -> tuple[dict, float]:
    """Constants minimising the squared error of log time over ``rows`` (calibration rows with
    ms); returns (constants, root mean square of the log error)."""
    import numpy as np

    rows = [r for r in rows if r.get("ms") and model.build(r["candidate"]) in per_sm
            and model.current(r["candidate"], r["config"])]
    names = _names()
    x = np.log(np.array([_start()[n] for n in names]))
    y = np.log(np.array([1e3 * r["ms"] for r in rows]))

    def residuals(v):
        c = dict(zip(names, np.exp(v)))
        return np.log([model.predict(c, r["candidate"], r["config"], r["M"], r["N"], r["K"], r["batch"],
                               per_sm[model.build(r["candidate"])], sms) for r in rows]) - y

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


def load_calibration(paths) -> tuple[list[dict], dict, int, str]:
    """(rows, blocks per SM by build (model.build), SMs, GPU name) of calibration files of one GPU;
    rows and blocks per SM of tile configs the model no longer runs (``model.current``) are left out."""
    rows, per_sm, sms, gpu = [], {}, None, None
    for p in paths:
        d = json.loads(Path(p).read_text())
        if d.get("kind") != "calibration" or (gpu and d["gpu"] != gpu):
            raise ValueError(f"{p} is not a calibration file of {gpu or 'one GPU'}")
        rows += [r for r in d["rows"] if model.current(r["candidate"], r["config"])]
        per_sm.update({model.build(name): n for name, n in d["blocks_per_sm"].items()
                       if model.current(name, d["configs"][name])})
        sms, gpu = d["sms"], d["gpu"]
    return rows, per_sm, sms, gpu


def main(argv=None) -> int:
    p = ArgParser(prog="python -m tilegemm.calibration", description="fit the cost model's constants")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=ArgParser)
    f = sub.add_parser("fit", help="fit the constants to calibration files of one GPU; write its model table")
    f.add_argument("files", nargs="+")
    f.add_argument("--out", required=True, help="the model table to write (src/tilegemm/tables/model-<gpu>.json)")
    args = parse_args(p, argv)
    if isinstance(args, int):
        return args

    def run(a):
        rows, per_sm, sms, gpu = load_calibration(a.files)
        consts, rms = fit(rows, per_sm, sms)
        doc = {"schema": 1, "kind": "model", "gpu": gpu, "sms": sms, "command": results.command(prog="python -m tilegemm.calibration"),
               "commit": results.commit(), "fitted_on": [Path(x).name for x in a.files], "rows": len(rows),
               "rms_log_error": rms, "blocks_per_sm": per_sm, "constants": consts}
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"fitted {len(consts)} constants to {len(rows)} timings: rms log error {rms:.3f}; wrote {a.out}")
        return 0

    return run_command(run, args)


if __name__ == "__main__":
    sys.exit(main())
