"""Why the tuner and the bench disagree at the 64 x 512³ batch: the same kernel timed by the tuner's
method (short batches, config= path) and the bench's (long batches, default path), cuBLAS beside.

usage: python scripts/timing_probe.py   (results: $OUT/<gpu>-<date>-timing.json)
"""
import os
import sys

from tilegemm import api, bench, runtime, tuning


def main() -> int:
    cupy = runtime._cupy()
    rows = []
    for (M, N, K, batch) in [(512, 512, 512, 64), (4096, 4096, 4096, 1), (128, 4096, 4096, 1)]:
        n_sets = bench._n_sets(M, N, K, batch)
        sets = [bench.make_operands(M, N, K, "NN", batch=batch) for _ in range(n_sets)]
        shape = ((batch,) if batch > 1 else ()) + (M, N)
        outs = [cupy.empty(shape, dtype="float32") for _ in range(n_sets)]
        cfg = dict(tuning.select(0, "NN", M, N, K, batch))
        flop = 2.0 * M * N * K * batch
        fns = {"cublas": lambda i: cupy.matmul(*sets[i], out=outs[i]),
               "tilegemm default": lambda i: api.matmul(*sets[i], out=outs[i]),
               "tilegemm config=": lambda i: api.matmul(*sets[i], out=outs[i], config=cfg)}
        for rep in range(2):
            for how, kw in [("tuner", dict(target_s=0.15, batch_ms=5.0)), ("bench", {})]:
                for name, fn in fns.items():
                    ms = bench.time_launches(fn, n_sets, **kw)
                    rows.append(dict(M=M, N=N, K=K, batch=batch, impl=name, timing=how, rep=rep, ms=ms,
                                     tflops=flop / ms / 1e9, config=cfg))
                    print(f"{batch}x{M}x{N}x{K} rep {rep} {how:5s} {name:17s} {flop / ms / 1e9:6.2f} TFLOPS", flush=True)
    doc = bench.results_document([], kind="timing", timings=rows)
    print("wrote", bench.write_results(doc, os.environ.get("OUT", "benchmarks/results"), tag="timing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
