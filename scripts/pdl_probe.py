"""Programmatic dependent launch (PDL) on and off: the split-K reduction as a dependent of its GEMM,
and the family's kernels as dependents of the kernel before them; cuBLAS beside, all timed taking
turns (bench.time_interleaved).  Each variant is checked first against float64 on fresh inputs,
several times (a missing wait would show as a wrong or moving error).

usage: python scripts/pdl_probe.py [quick | host]   (results: $OUT/<gpu>-<date>-pdl.json; quick: two
timing rounds instead of three; host: only the host cost per call, into ...-host-pdl.json)
"""
import os
import sys
import time

from tilegemm import api, bench, runtime, tuning

SHAPES = [(128, 4096, 4096, 1), (1024, 1024, 16384, 1), (16, 4096, 4096, 1), (1024, 1024, 1024, 1),
          (3000, 1000, 500, 1), (128, 128, 128, 256), (512, 512, 512, 64), (4096, 4096, 4096, 1),
          (256, 256, 256, 1)]
# 1024³ ships sk = 2; its split-K twin (same tile, separate reduction) is timed beside it
SPLIT_TWIN = {(1024, 1024, 1024, 1): dict(bm=128, bn=128, bk=8, tm=16, tn=8, ln=8, minb=2, swizzle=8, stages=3,
                                          splits=4)}
# name: (PDL for the family's kernels, PDL for the reduction)
MODES = {"no PDL": (False, False), "PDL reduce": (False, True), "PDL": (True, True)}


def _set(mode):
    api.PDL_GEMM, api.PDL_REDUCE = MODES[mode]


def main() -> int:
    cupy = runtime._cupy()
    rows, checks = [], []
    host_only = sys.argv[1:] == ["host"]
    for (M, N, K, batch) in ([] if host_only else SHAPES):
        n_sets = bench._n_sets(M, N, K, batch)
        sets = [bench.make_operands(M, N, K, "NN", batch=batch) for _ in range(n_sets)]
        shape = ((batch,) if batch > 1 else ()) + (M, N)
        outs = [cupy.empty(shape, dtype="float32") for _ in range(n_sets)]
        flop = 2.0 * M * N * K * batch
        shipped = dict(tuning.select(0, "NN", M, N, K, batch))
        variants = {}
        for cfg_name, cfg in [("", shipped)] + ([("split-K ", SPLIT_TWIN[(M, N, K, batch)])]
                                               if (M, N, K, batch) in SPLIT_TWIN else []):
            split = int(cfg.get("splits", 1)) > 1 and not cfg.get("sk")
            for mode in MODES:
                if mode == "PDL reduce" and not split:
                    continue
                variants[cfg_name + mode] = (mode, cfg)
        for name, (mode, cfg) in variants.items():
            for rep in range(4):
                a, b = bench.make_operands(M, N, K, "NN", batch=batch)
                out = cupy.full(shape, float("nan"), dtype="float32")
                _set(mode)
                for _ in range(3):  # queued back to back, checked once
                    api.matmul(a, b, out=out, config=cfg)
                cupy.cuda.get_current_stream().synchronize()
                checks.append(dict(M=M, N=N, K=K, batch=batch, variant=name, rep=rep,
                                   rel_err=bench.rel_err(out, a, b)))
        errs = [c["rel_err"] for c in checks if (c["M"], c["N"], c["K"], c["batch"]) == (M, N, K, batch)]
        print(f"{batch}x{M}x{N}x{K} shipped {shipped}: rel err {min(errs):.2e}..{max(errs):.2e}", flush=True)

        def run(mode, cfg):
            def go(i):
                _set(mode)
                api.matmul(*sets[i], out=outs[i], config=cfg)
            return go

        fns = {"cublas": lambda i: cupy.matmul(*sets[i], out=outs[i])}
        fns.update({name: run(mode, cfg) for name, (mode, cfg) in variants.items()})
        names = list(fns)
        for rep in range(2 if len(sys.argv) > 1 else 3):
            res = dict(zip(names, bench.time_interleaved(list(fns.values()), n_sets)))
            for name, ms in res.items():
                rows.append(dict(M=M, N=N, K=K, batch=batch, impl=name, rep=rep, ms=ms, tflops=flop / ms / 1e9,
                                 config=variants[name][1] if name in variants else None))
            ref = flop / res["cublas"] / 1e9
            print(f"{batch}x{M}x{N}x{K} rep {rep}: " + "  ".join(
                f"{n} {flop / ms / 1e9:6.2f} ({flop / ms / 1e9 / ref:.3f}x)" for n, ms in res.items()), flush=True)
    # host cost of one call by path (GPU work tiny: 16 x 64 x 4096): 200 calls, fewer than the
    # driver's queue of pending launches, so the host never waits for the GPU
    a, b = bench.make_operands(16, 64, 4096, "NN")
    out = cupy.empty((16, 64), dtype="float32")
    base = dict(tuning.BIG)
    paths = {"one launch": dict(base, splits=1), "split-K": dict(base, splits=8), "sk = 2": dict(base, splits=8, sk=2),
             "stream-K": dict(base, sk=1)}
    host = {}
    for rep in range(3):
        for mode in ("no PDL", "PDL"):
            for name, cfg in paths.items():
                _set(mode)
                api.matmul(a, b, out=out, config=cfg)
                cupy.cuda.get_current_stream().synchronize()
                t0 = time.perf_counter()
                for _ in range(200):
                    api.matmul(a, b, out=out, config=cfg)
                host.setdefault(f"{name}, {mode}", []).append((time.perf_counter() - t0) / 200 * 1e6)
                cupy.cuda.get_current_stream().synchronize()
    print("host us per call (16x64x4096):", {k: [round(x, 1) for x in v] for k, v in host.items()}, flush=True)
    _set("PDL")
    doc = bench.results_document([], kind="pdl", timings=rows, checks=checks, host_us_per_call=host)
    print("wrote", bench.write_results(doc, os.environ.get("OUT", "benchmarks/results"),
                                       tag="host-pdl" if host_only else "pdl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
