"""Probe: B's rows that are not 16-byte aligned read by TMA (tg_tma_rows.cuh) against today's reads.

1. Correctness of the TMA builds: every model build (data-parallel, split, stream-K, summed, k-sliced) on
   odd shapes, offset and padded views, against float64 (poisoned outputs).
2. The host's cost of encoding a map (four per new B).
3. Timing on fresh NN shapes whose B rows are not 16-byte aligned: the model's pick as today (B copied
   or read narrow), the same config with B by TMA, the pick the model makes with B by TMA (charged as
   aligned rows), and today's pick on B held in aligned rows (a padded view: the ceiling), beside
   cuBLAS, interleaved.
Writes OUT/tma-rows-probe.json (OUT: --out, else $OUT), after every timed shape.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, "src")
from tilegemm import access, arrays, dispatch, gpu, model, selection, suites, timing, tma  # noqa: E402
from tilegemm import plan as P  # noqa: E402

DEV = 0
SHAPES = [(37, 1, 5), (130, 3, 9), (257, 5, 1), (300, 131, 17), (129, 258, 1003), (64, 67, 64), (1000, 1001, 999),
          (200, 515, 4099), (77, 250, 33), (513, 1027, 130)]


def program(a, b, out, cfg, on: bool):
    """The launches of a @ b into out with config ``cfg``, B's rows by TMA where ``on``."""
    access.TMA_ROWS_ON = on
    try:
        p = P.plan(arrays.describe(a, "a"), arrays.describe(b, "b"), arrays.describe(out, "out"), None, cfg)
        return dispatch.build(p, DEV, (int(a.data.ptr), int(b.data.ptr), 0, int(out.data.ptr)), lambda k, q: cfg)
    finally:
        access.TMA_ROWS_ON = True


def run(prog, a, b, out, stream):
    prog.run(int(a.data.ptr), int(b.data.ptr), 0, int(out.data.ptr), stream)


def builds() -> list:
    out = []
    for name, cfg in model.TILES.items():
        out.append((name, {**cfg, "splits": 1}))
        if name in model.SPLIT_TILES:
            out.append((name + " split3", {**cfg, "splits": 3}))
        if name in model.STREAM_K_TILES:
            out.append((name + " stream-K", {**cfg, "splits": 1, "sk": 1}))
        if name in model.SUMMED_TILES:
            out.append((name + " split3 summed", {**cfg, "splits": 3, "sk": 2}))
    return out


def checks(cp, res) -> None:
    rng = cp.random.default_rng(7)
    stream = cp.cuda.get_current_stream()
    t0 = time.time()
    for name, cfg in builds():
        for M, N, K in SHAPES:
            for view in ("plain", "offset", "padded"):
                a = rng.standard_normal((M, K), dtype=np.float32)
                if view == "plain":
                    b = rng.standard_normal((K, N), dtype=np.float32)
                elif view == "offset":  # B 4 bytes past an aligned start
                    b = rng.standard_normal((K, N + 1), dtype=np.float32)[:, 1:]
                else:  # rows of an odd leading dimension longer than N
                    b = rng.standard_normal((K, N + 6 + (N % 2 == 0)), dtype=np.float32)[:, :N]
                ref = timing.reference(a, b)
                out = cp.full((M, N), np.nan, dtype=np.float32)
                row = {"build": name, "M": M, "N": N, "K": K, "view": view}
                try:
                    prog = program(a, b, out, cfg, True)
                    run(prog, a, b, out, stream)
                    stream.synchronize()
                    err = timing.rel_err(out, ref)
                    row.update(err=err, tma=any(st.maps for st in prog.steps), ok=err <= timing.TOLERANCE)
                except Exception as e:  # noqa: BLE001
                    row["error"] = repr(e)[:300]
                res["checks"].append(row)
    bad = [c for c in res["checks"] if not c.get("ok")]
    print(f"checks: {len(res['checks'])}, bad {len(bad)}, by TMA {sum(bool(c.get('tma')) for c in res['checks'])}, "
          f"{time.time() - t0:.0f} s", flush=True)
    for c in bad[:20]:
        print("BAD", c, flush=True)


def encode_cost(res) -> None:
    enc = tma.row_class_encoder(4000, 1001, 1001, 2, 128)
    t0 = time.perf_counter()
    for i in range(200):
        enc(0x7F0000000000 + 4096 * i)  # four maps each
    res["encode_us_per_map"] = (time.perf_counter() - t0) / 800 * 1e6
    print(f"encode: {res['encode_us_per_map']:.1f} us a map", flush=True)


def timings(cp, res, seed: int, n: int, out_path: str) -> None:
    sel = selection.selector(DEV)
    stream = cp.cuda.get_current_stream()
    for M, N, K, _, _ in [c for c in suites.random_shapes(400, seed) if c[1] % 4][:n]:
        access.TMA_ROWS_ON = False
        old, src = sel.source("NN", M, N, K, 1)
        access.TMA_ROWS_ON = True
        new, src_new = sel.source("NN", M, N, K, 1)  # the model charging B by TMA as aligned rows
        sets, outs = timing.input_sets(M, N, K)
        pads = []
        for _, b in sets:
            bp = cp.empty((K, -(-N // 4) * 4), dtype=np.float32)[:, :N]
            bp[...] = b
            pads.append(bp)
        ref = timing.reference(*sets[0])
        bs = {k: [b for _, b in sets] for k in ("today", "tma", "tma_new")}
        bs["aligned"] = pads
        cfgs = {"today": (old, False), "tma": (old, True), "tma_new": (new, True), "aligned": (old, True)}
        progs = {k: [program(a, b, o, c, on) for (a, _), b, o in zip(sets, bs[k], outs)] for k, (c, on) in cfgs.items()}
        row = {"M": M, "N": N, "K": K, "old": old, "source": src, "new": new, "source_new": src_new, "errs": {},
               "maps": {k: [len(st.maps) for st in v[0].steps] for k, v in progs.items()}}
        runs = []
        for k in progs:
            def go(i, k=k):
                run(progs[k][i], sets[i][0], bs[k][i], outs[i], stream)
            outs[0][...] = np.nan
            go(0)
            stream.synchronize()
            row["errs"][k] = timing.rel_err(outs[0], ref)
            runs.append(go)
        runs.append(lambda i: cp.matmul(sets[i][0], sets[i][1], out=outs[i]))
        row["ms"] = dict(zip(list(progs) + ["cublas"], timing.time_interleaved(runs, len(sets))))
        res["timings"].append(row)
        r = row["ms"]
        print(f"{M}x{N}x{K} {src} " + " ".join(f"{k} {r['cublas'] / r[k]:.3f}" for k in progs)
              + f" errs {max(row['errs'].values()):.1e}", flush=True)
        json.dump(res, open(out_path, "w"), indent=1, default=str)
        del sets, outs, pads, progs, bs, runs
        cp.get_default_memory_pool().free_all_blocks()
    if res["timings"]:
        for k in ("today", "tma", "tma_new", "aligned"):
            xs = [t["ms"]["cublas"] / t["ms"][k] for t in res["timings"]]
            res[f"geomean_{k}"] = math.exp(sum(map(math.log, xs)) / len(xs))
        print({k: round(v, 4) for k, v in res.items() if k.startswith("geomean")}, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="B's rows read by TMA against today's reads (a probe; needs a Hopper GPU)")
    ap.add_argument("--seed", type=int, default=601, help="the draw of the timed shapes")
    ap.add_argument("--n", type=int, default=30, help="timed shapes (the draw's with N %% 4 != 0)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"), help="folder of tma-rows-probe.json")
    opts = ap.parse_args()
    import cupy as cp

    access.TMA_ROWS_MIN_MACS = 0  # the checks' small shapes too
    res = {"gpu": gpu.device_properties(DEV).name, "command": " ".join(sys.argv), "seed": opts.seed, "checks": [],
           "timings": [], "script": open(__file__).read()}
    out_path = os.path.join(opts.out, "tma-rows-probe.json")
    checks(cp, res)
    encode_cost(res)
    json.dump(res, open(out_path, "w"), indent=1, default=str)
    timings(cp, res, opts.seed, opts.n, out_path)
    json.dump(res, open(out_path, "w"), indent=1, default=str)


if __name__ == "__main__":
    main()
