"""Stream-K (sk = 1) and split-K summed in the kernel (sk = 2) on the GPU: correctness on hard
cases, then timing beside cuBLAS and the shipped selection at the suite's weak shapes.

usage: python scripts/streamk_probe.py [--quick | --split | --weak]   (results: $OUT/<gpu>-<date>-<tag>.json)
--split: only the sk = 2 checks and timings (tag streamk-split)
--weak: sk = 1 (stream-K) at the shapes where the suite is closest to cuBLAS (tag streamk-spread)
"""
import argparse
import os
import sys

import numpy as np

from tilegemm import api, bench, runtime

B256 = dict(bm=256, bn=128, bk=8, tm=16, tn=8, ln=4, minb=1, swizzle=8, stages=3, order=1)
B128 = dict(bm=128, bn=128, bk=8, tm=16, tn=8, ln=8, minb=2, swizzle=8, stages=3, order=1)
B128s = dict(bm=128, bn=128, bk=8, tm=8, tn=8, ln=4, minb=0, swizzle=8, stages=3, order=1)
W256 = dict(bm=128, bn=256, bk=8, tm=16, tn=8, ln=4, minb=1, swizzle=8, stages=3, order=1)
M64 = dict(bm=128, bn=64, bk=8, tm=16, tn=4, ln=4, minb=0, swizzle=8, stages=0, order=1)
SK = {"256x128": B256, "128x128": B128, "128x128/ln4": {**B128, "ln": 4}, "128x128/8x8": B128s, "128x256": W256,
      "128x64/regs": M64}
# sk = 2: (name, config with its split count)
SPLIT = {"128x128/s8": {**B128, "splits": 8}, "128x128/s4": {**B128, "splits": 4},
         "128x256/s4": {**W256, "splits": 4}, "128x256/s8": {**W256, "splits": 8},
         "128x128/8x8/s4": {**B128s, "splits": 4}}


def check(cupy, configs) -> list[dict]:
    """float64 comparisons (fresh inputs, poisoned outputs) and bitwise repeatability."""
    out = []
    cases = [((1, 1, 1), "NN", 1), ((7, 13, 5), "NN", 1), ((300, 200, 4097), "NN", 1),
             ((129, 257, 9), "TN", 1), ((33, 65, 100000), "NN", 1), ((100, 50, 300), "NT", 3),
             ((3000, 1000, 500), "NN", 1), ((1000, 999, 777), "TT", 1), ((128, 4096, 4096), "NN", 1),
             ((513, 255, 1031), "NN", 5), ((3000, 3000, 100), "NN", 1), ((500, 500, 300), "TN", 40)]
    for (M, N, K), lay, batch in cases:
        for name, cfg in configs.items():
            a, b = bench.make_operands(M, N, K, lay, batch=batch)
            r1 = cupy.full((batch, M, N) if batch > 1 else (M, N), np.nan, dtype=np.float32)
            api.matmul(a, b, out=r1, config=cfg)
            err = bench.rel_err(r1, a, b)
            r2 = cupy.full_like(r1, np.nan)
            api.matmul(a, b, out=r2, config=cfg)
            same = bool(cupy.array_equal(r1, r2))
            # gemm with beta: C read, alpha scaled
            c = cupy.random.default_rng().standard_normal(r1.shape, dtype=np.float32)
            g = api.gemm(a, b, c, alpha=0.5, beta=-2.0, config=cfg)
            ref = 0.5 * cupy.matmul(a.astype(np.float64), b.astype(np.float64)) - 2.0 * c.astype(np.float64)
            gerr = float(cupy.linalg.norm(g - ref) / cupy.linalg.norm(ref))
            ok = err < 1e-5 and gerr < 1e-5 and same
            out.append(dict(M=M, N=N, K=K, layout=lay, batch=batch, config=name, rel_err=err, gemm_err=gerr,
                            repeatable=same, ok=ok))
            print(f"check {M}x{N}x{K} {lay} x{batch} {name:12s} err {err:.1e} gemm {gerr:.1e} "
                  f"repeat {same} {'ok' if ok else 'FAIL'}", flush=True)
    return out


TIMES = [((3000, 1000, 500), 1, "NN", ["128x128", "128x128/8x8"]),
         ((1024, 1024, 1024), 1, "NN", ["128x128/8x8", "128x128"]),
         ((512, 512, 512), 64, "NN", ["256x128", "128x128"]),
         ((2048, 2048, 2048), 8, "NN", ["256x128", "128x128"]),
         ((4095, 4095, 4095), 1, "NN", ["256x128", "128x128"]),
         ((4096, 4096, 4096), 1, "NN", ["256x128", "128x128"]),
         ((4096, 4096, 4096), 1, "NT", ["256x128"]),
         ((4096, 4096, 4096), 1, "TN", ["256x128", "128x128"]),
         ((4096, 4096, 4096), 1, "TT", ["256x128"]),
         ((8192, 8192, 8192), 1, "NN", ["256x128"]),
         ((2048, 2048, 2048), 1, "NN", ["256x128", "128x128"]),
         ((4096, 4096, 1024), 1, "NN", ["256x128"]),
         ((128, 4096, 4096), 1, "NN", ["128x128", "128x128/8x8"]),
         ((1024, 1024, 16384), 1, "NN", ["128x128", "256x128"]),
         ((128, 128, 128), 256, "NN", ["128x128"])]


TIMES2 = [((128, 4096, 4096), 1, "NN", ["128x128/s8", "128x256/s8", "128x256/s4", "128x128/8x8/s4"]),
          ((1024, 1024, 16384), 1, "NN", ["128x256/s4", "128x128/s4", "128x128/8x8/s4"]),
          ((1024, 1024, 1024), 1, "NN", ["128x128/8x8/s4", "128x128/s4"]),
          ((16, 4096, 4096), 1, "NN", ["128x128/s8"])]


TIMES3 = [((128, 4096, 4096), 1, "NN", ["128x128", "128x128/ln4", "128x128/8x8", "128x256"]),
          ((1024, 1024, 16384), 1, "NN", ["128x128", "128x256", "256x128"]),
          ((512, 512, 512), 64, "NN", ["256x128", "128x128"]),
          ((1024, 1024, 1024), 1, "NN", ["128x128/8x8", "128x128"]),
          ((3000, 1000, 500), 1, "NN", ["128x128", "128x128/8x8"]),
          ((16, 4096, 4096), 1, "NN", ["128x128", "128x128/8x8"]),
          ((4096, 4096, 4096), 1, "NN", ["256x128"])]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--split", action="store_true")
    p.add_argument("--weak", action="store_true")
    args = p.parse_args()
    cupy = runtime._cupy()
    configs = ({n: {**c, "sk": 2} for n, c in SPLIT.items()} if args.split
               else {n: {**c, "sk": 1} for n, c in SK.items()})
    checks = check(cupy, configs)
    rows = []
    times = TIMES2 if args.split else TIMES3 if args.weak else TIMES[:3] if args.quick else TIMES
    for (M, N, K), batch, lay, names in times:
        kernels = ["tilegemm"] + [("gemm", configs[n]) for n in names]
        for r in bench.measure(kernels, M, N, K, lay, batch=batch):
            rows.append(r)
            print(f"time {M}x{N}x{K} {lay} x{batch} {r.kernel:9s} {r.tflops:6.2f} TFLOPS {r.ratio:5.3f}x "
                  f"{r.config or r.selected}", flush=True)
    doc = bench.results_document(rows, checks=checks)
    path = bench.write_results(doc, os.environ.get("OUT", "benchmarks/results"),
                               tag="streamk-split" if args.split else "streamk-spread" if args.weak else "streamk")
    print("wrote", path)
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
