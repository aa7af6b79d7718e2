"""Probe: B's rows that are not 16-byte aligned staged by the blocks of split-K summed in the kernel
(access.STAGED, tg_staged_b.cuh) against today's reads (a copy before the product, or 4- and 8-byte reads).

On fresh NN shapes of a seed whose B's rows are not 16-byte aligned and whose tiles are few (the
summed candidates' blocks fit in one launch), each timed beside cuBLAS, interleaved, after a check
against float64:
  today       the pick with staging off (the default path now)
  summed      the model's best summed candidate, B as today (copied or read narrow)
  staged      the same candidate staging B (staged1, staged4: 1 and 4 loads in flight a thread as it stages)
  summed_aligned  the same candidate on B in aligned rows (staging's ceiling)
  new         the model's pick with staging on (it charges staging candidates as 16-byte rows)
  aligned     today's pick on B in aligned rows (a padded view: nothing to copy or stage)
Writes OUT/staged-b-probe.json (OUT: --out, else $OUT) after every shape.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, "src")
from tilegemm import access, arrays, dispatch, gpu, kernelspec, launch, selection, suites, timing  # noqa: E402
from tilegemm import plan as P  # noqa: E402

DEV = 0
KEYS = ("today", "summed", "staged", "staged1", "staged4", "summed_aligned", "new", "aligned")


BATCH = [None]  # TG_STAGE_BATCH of the staging builds compiled now (None: the kernel's default)
_plain = kernelspec.KernelSpec.defines


def _defines(self, params, layout="NN", vec=4, wide=False):
    d = _plain(self, params, layout, vec, wide)
    return {**d, "TG_STAGE_BATCH": BATCH[0]} if BATCH[0] and "TG_STAGE_CH" in d else d


kernelspec.KernelSpec.defines = _defines


def program(a, b, out, cfg, on: bool, batch=None):
    """The launches of a @ b into out with config ``cfg``, B staged where ``on`` allows (``batch`` loads
    in flight a thread while it stages)."""
    access.STAGED_ON = on
    BATCH[0] = batch
    launch._launchers.clear()  # loaded kernels are remembered by config, not by defines
    try:
        p = P.plan(arrays.describe(a, "a"), arrays.describe(b, "b"), arrays.describe(out, "out"), None, cfg)
        return dispatch.build(p, DEV, (int(a.data.ptr), int(b.data.ptr), 0, int(out.data.ptr)), lambda k, q: cfg)
    finally:
        access.STAGED_ON = False


def picks(sel, M, N, K):
    """(today's pick, the best summed candidate, the pick with staging on), from the model."""
    access.STAGED_ON = False
    old = sel.source("NN", M, N, K, 1)[0]
    access.STAGED_ON = True
    try:
        ranked = sel.predicted(M, N, K, 1, 40)
        new = sel.source("NN", M, N, K, 1)[0]
    finally:
        access.STAGED_ON = False
    summed = next((c for c in ranked if c.get("sk") == 2), None)
    return old, summed, new


def main() -> None:
    ap = argparse.ArgumentParser(description="B staged by the summed blocks against today's reads (a probe; needs a GPU)")
    ap.add_argument("--seed", type=int, default=703, help="the draw of the timed shapes")
    ap.add_argument("--n", type=int, default=24, help="timed shapes (the draw's with N %% 4 != 0 and a summed candidate)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"), help="folder of staged-b-probe.json")
    opts = ap.parse_args()
    import cupy as cp

    sel = selection.selector(DEV)
    stream = cp.cuda.get_current_stream()
    res = {"gpu": gpu.device_properties(DEV).name, "command": " ".join(sys.argv), "seed": opts.seed,
           "commit": os.environ.get("TILEGEMM_COMMIT", ""), "rows": [], "script": open(__file__).read()}
    out_path = os.path.join(opts.out, "staged-b-probe.json")
    for M, N, K, _, _ in suites.random_shapes(600, opts.seed):
        if len(res["rows"]) >= opts.n or N % 4 == 0:
            continue
        old, summed, new = picks(sel, M, N, K)
        if summed is None:
            continue
        sets, outs = timing.input_sets(M, N, K)
        pads = []
        for _, b in sets:
            bp = cp.empty((K, -(-N // 4) * 4), dtype=np.float32)[:, :N]
            bp[...] = b
            pads.append(bp)
        runs = {"today": (old, False, False, None), "summed": (summed, False, False, None),
                "staged": (summed, True, False, None), "staged1": (summed, True, False, 1),
                "staged4": (summed, True, False, 4), "summed_aligned": (summed, False, True, None),
                "new": (new, True, False, None), "aligned": (old, False, True, None)}
        progs = {k: [program(a, pads[i] if pad else b, outs[i], c, on, batch) for i, (a, b) in enumerate(sets)]
                 for k, (c, on, pad, batch) in runs.items()}
        staged = {k: any(len(st.args) == len(launch.GEMM_STAGED.fields) for st in v[0].steps) for k, v in progs.items()}
        if not staged["staged"]:
            continue  # its blocks do not fit in one launch
        ref = timing.reference(*sets[0])
        row = {"M": M, "N": N, "K": K, "today": old, "summed": summed, "new": new, "staged": staged, "errs": {}}
        fns = []
        for k in progs:
            def go(i, k=k):
                progs[k][i].run(int(sets[i][0].data.ptr), int((pads[i] if runs[k][2] else sets[i][1]).data.ptr), 0,
                                int(outs[i].data.ptr), stream)
            outs[0][...] = np.nan
            go(0)
            stream.synchronize()
            row["errs"][k] = timing.rel_err(outs[0], ref)
            fns.append(go)
        fns.append(lambda i: cp.matmul(sets[i][0], sets[i][1], out=outs[i]))
        row["ms"] = dict(zip(list(progs) + ["cublas"], timing.time_interleaved(fns, len(sets))))
        res["rows"].append(row)
        r = row["ms"]
        print(f"{M}x{N}x{K} " + " ".join(f"{k} {r['cublas'] / r[k]:.3f}" for k in progs)
              + f" errs {max(row['errs'].values()):.1e}", flush=True)
        json.dump(res, open(out_path, "w"), indent=1, default=str)
        del sets, outs, pads, progs, fns
        cp.get_default_memory_pool().free_all_blocks()
    for k in KEYS:
        xs = [t["ms"]["cublas"] / t["ms"][k] for t in res["rows"]]
        if xs:
            res[f"geomean_{k}"] = math.exp(sum(map(math.log, xs)) / len(xs))
    print({k: round(v, 4) for k, v in res.items() if k.startswith("geomean")}, flush=True)
    json.dump(res, open(out_path, "w"), indent=1, default=str)


if __name__ == "__main__":
    main()
