"""Time kernel variants beside cuBLAS in one run (used to choose rung 8's settings).

usage: python benchmarks/sweep.py OUT_DIR [SIZE ...]
Prints a table and writes OUT_DIR/<gpu>-<date>-sweep.json in the results format (rows carry
their config).
"""

import itertools
import sys

from tilegemm import bench

VARIANTS = (
    [("05_double_buffered", {"bm": 128, "bk": bk, "bn": 128, "rm": 8, "rn": 8}) for bk in (8, 16)]
    + [(name, {"bk": bk}) for name in ("06_warp_tiled", "07_maxas") for bk in (8, 16)]
    + [("08_hopper", {"bk": bk, "minb": mb, "swizzle": sw})
       for bk, mb, sw in ((8, -1, 0), (8, -1, 4), (8, -1, 8), (8, -1, 16), (8, 0, 8), (16, 1, 8))]
)


def main():
    out = sys.argv[1]
    sizes = [bench.parse_size(s) for s in (sys.argv[2:] or ["4096", "4095", "8192", "2048"])]
    rows = []
    for M, N, K in sizes:
        rows += bench.measure(VARIANTS, M, N, K, "NN")
    for r in rows:
        print(f"{r.kernel:20s} {str(r.config or ''):45s} {r.M}x{r.N}x{r.K} {r.tflops:7.2f} TFLOPS "
              f"{100 * r.ratio:6.1f}% of cuBLAS  err {r.rel_err:.1e}")
    print(bench.write_results(bench.results_document(rows), out, "sweep"))


if __name__ == "__main__":
    main()
