"""Family configs timed beside cuBLAS at one shape and layout, taking turns (bench.time_interleaved),
three rounds; each config checked against float64 first.  The shipped config is always included.

usage: python scripts/config_probe.py LAYOUT BATCHxMxNxK TAG [CONFIG_JSON | tune:PATH ...]
       tune:PATH = the three fastest configs of a `tilegemm tune --out` file's first shape
       (results: $OUT/<gpu>-<date>-TAG-timing.json)
"""
import json
import os
import sys

from tilegemm import api, bench, runtime, tuning


def main() -> int:
    layout, case, tag = sys.argv[1:4]
    M, N, K, batch = bench.parse_case(case)
    cfgs = {"shipped": dict(tuning.select(0, layout, M, N, K, batch))}
    extra = []
    for arg in sys.argv[4:]:
        if arg.startswith("tune:"):
            tried = [t for t in json.load(open(arg[5:]))[0]["tried"] if t.get("tflops")]
            extra += [t["config"] for t in sorted(tried, key=lambda t: -t["tflops"])[:3]]
        else:
            extra.append(json.loads(arg))
    cfgs.update({f"config {i}": c for i, c in enumerate(extra) if c != cfgs["shipped"]})
    cupy = runtime._cupy()
    n_sets = bench._n_sets(M, N, K, batch)
    sets = [bench.make_operands(M, N, K, layout, batch=batch) for _ in range(n_sets)]
    shape = ((batch,) if batch > 1 else ()) + (M, N)
    outs = [cupy.empty(shape, dtype="float32") for _ in range(n_sets)]
    flop = 2.0 * M * N * K * batch
    fns = {"cublas": lambda i: cupy.matmul(*sets[i], out=outs[i])}
    for name, cfg in cfgs.items():
        a, b = bench.make_operands(M, N, K, layout, batch=batch)
        out = cupy.full(shape, float("nan"), dtype="float32")
        api.matmul(a, b, out=out, config=cfg)
        err = bench.rel_err(out, a, b)
        print(f"{name} {cfg}: rel err {err:.2e}", flush=True)
        if err < bench.TOLERANCE:
            fns[name] = lambda i, cfg=cfg: api.matmul(*sets[i], out=outs[i], config=cfg)
    rows = []
    for rep in range(3):
        res = dict(zip(fns, bench.time_interleaved(list(fns.values()), n_sets)))
        ref = flop / res["cublas"] / 1e9
        for name, ms in res.items():
            rows.append(dict(M=M, N=N, K=K, batch=batch, layout=layout, impl=name, rep=rep, ms=ms,
                             tflops=flop / ms / 1e9, config=cfgs.get(name)))
        print(f"rep {rep}: " + "  ".join(f"{n} {flop / ms / 1e9:6.2f} ({flop / ms / 1e9 / ref:.3f}x)"
                                         for n, ms in res.items()), flush=True)
    doc = bench.results_document([], kind="timing", timings=rows)
    print("wrote", bench.write_results(doc, os.environ.get("OUT", "benchmarks/results"), tag=f"{tag}-timing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
