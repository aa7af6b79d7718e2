"""Split-K with the reduction launched as a programmatic dependent of the GEMM (PDL) or plainly,
cuBLAS beside, all timed taking turns (bench.time_interleaved); each PDL build checked first against
float64 on fresh inputs, several times (a missing wait would show as a moving error).

usage: python scripts/pdl_probe.py   (results: $OUT/<gpu>-<date>-pdl.json)
"""
import os
import sys
import time

from tilegemm import api, bench, runtime, tuning

SHAPES = [(128, 4096, 4096, 1), (1024, 1024, 16384, 1), (16, 4096, 4096, 1), (1024, 1024, 1024, 1)]
# 1024³ ships sk = 2; its split-K twin (same tile, separate reduction) is timed beside it
SPLIT_TWIN = {(1024, 1024, 1024, 1): dict(bm=128, bn=128, bk=8, tm=16, tn=8, ln=8, minb=2, swizzle=8, stages=3,
                                          splits=4)}


def main() -> int:
    cupy = runtime._cupy()
    rows, checks = [], []
    for (M, N, K, batch) in SHAPES:
        n_sets = bench._n_sets(M, N, K, batch)
        sets = [bench.make_operands(M, N, K, "NN", batch=batch) for _ in range(n_sets)]
        outs = [cupy.empty((M, N), dtype="float32") for _ in range(n_sets)]
        flop = 2.0 * M * N * K * batch
        cfg = SPLIT_TWIN.get((M, N, K, batch)) or dict(tuning.select(0, "NN", M, N, K, batch))

        def ours(pdl, config=None):
            def run(i):
                api.PDL_REDUCE = pdl
                api.matmul(*sets[i], out=outs[i], config=config)
            return run

        for pdl in (False, True):
            for rep in range(10):
                a, b = bench.make_operands(M, N, K, "NN")
                out = cupy.full((M, N), float("nan"), dtype="float32")
                api.PDL_REDUCE = pdl
                api.matmul(a, b, out=out, config=cfg)
                cupy.cuda.get_current_stream().synchronize()
                checks.append(dict(M=M, N=N, K=K, pdl=pdl, rep=rep, rel_err=bench.rel_err(out, a, b)))
        errs = [c["rel_err"] for c in checks if c["M"] == M and c["K"] == K]
        print(f"{M}x{N}x{K} config {cfg}: rel err {min(errs):.2e}..{max(errs):.2e}", flush=True)
        fns = {"cublas": lambda i: cupy.matmul(*sets[i], out=outs[i]),
               "split-K": ours(False, cfg), "split-K + PDL": ours(True, cfg)}
        if (M, N, K, batch) in SPLIT_TWIN:
            fns["shipped (sk = 2)"] = ours(True)
        names = list(fns)
        for rep in range(3):
            for name, ms in zip(names, bench.time_interleaved(list(fns.values()), n_sets)):
                rows.append(dict(M=M, N=N, K=K, batch=batch, impl=name, rep=rep, ms=ms, tflops=flop / ms / 1e9,
                                 config=cfg))
            base = {r["impl"]: r["tflops"] for r in rows[-len(names):]}
            print(f"{M}x{N}x{K} rep {rep}: " + "  ".join(f"{n} {t:6.2f} ({t / base['cublas']:.3f}x)"
                                                        for n, t in base.items()), flush=True)
    api.PDL_REDUCE = True
    # host cost of one call by path (GPU work tiny: 16 x 64 x 4096): 200 calls, fewer than the
    # driver's queue of pending launches, so the host never waits for the GPU
    a, b = bench.make_operands(16, 64, 4096, "NN")
    out = cupy.empty((16, 64), dtype="float32")
    base = dict(tuning.BIG)
    paths = {"one launch": dict(base, splits=1), "split-K": dict(base, splits=8),
             "split-K + PDL": dict(base, splits=8), "sk = 2": dict(base, splits=8, sk=2),
             "stream-K": dict(base, sk=1)}
    host = {}
    for rep in range(3):
        for name, cfg in paths.items():
            api.PDL_REDUCE = name != "split-K"
            api.matmul(a, b, out=out, config=cfg)
            cupy.cuda.get_current_stream().synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                api.matmul(a, b, out=out, config=cfg)
            host.setdefault(name, []).append((time.perf_counter() - t0) / 200 * 1e6)
            cupy.cuda.get_current_stream().synchronize()
    print("host us per call (16x64x4096):", {k: [round(x, 1) for x in v] for k, v in host.items()}, flush=True)
    api.PDL_REDUCE = True
    doc = bench.results_document([], kind="pdl", timings=rows, checks=checks, host_us_per_call=host)
    print("wrote", bench.write_results(doc, os.environ.get("OUT", "benchmarks/results"), tag="pdl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
