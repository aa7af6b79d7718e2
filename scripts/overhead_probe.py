"""Host time per call at 64³ and 256³ (bench.call_overhead), three times each with the bench's
setting (2000 calls per timing, more than the driver's queue of pending launches holds) and with
200 calls, to see whether a full queue turns the figure into GPU time per kernel (it did not).

usage: python scripts/overhead_probe.py   (results: $OUT/<gpu>-<date>-overhead.json)
"""
import os
import sys

from tilegemm import bench


def main() -> int:
    runs = []
    for rep in range(3):
        for calls, repeats in ((2000, 5), (200, 21)):
            rows = bench.call_overhead(calls=calls, repeats=repeats)
            runs.append(dict(rep=rep, calls=calls, repeats=repeats, rows=rows))
            print(f"rep {rep} calls {calls:4d}: " + ", ".join(f"{r['impl']} {r['size']}³ {r['us_per_call']:.1f}"
                                                             for r in rows), flush=True)
    doc = bench.results_document([], kind="overhead", runs=runs)
    print("wrote", bench.write_results(doc, os.environ.get("OUT", "benchmarks/results"), tag="overhead"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
