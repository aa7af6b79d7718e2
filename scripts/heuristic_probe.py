"""The heuristic's stream-K rule on shapes outside the tuned tables: the config it picks now
beside the one it picked before (the rule off: l2_bytes = 0) and cuBLAS, each checked against
float64.  usage: python scripts/heuristic_probe.py   (results: $OUT/<gpu>-<date>-heuristic.json)"""
import os

from tilegemm import bench, runtime, tuning

SHAPES = [(2000, 1000, 700), (1500, 1500, 1500), (2500, 700, 1000), (1024, 1024, 1024)]


def main() -> None:
    sms = runtime.device_properties().sms
    rows = []
    for M, N, K in SHAPES:
        new = tuning.heuristic(M, N, K, 1, sms)
        old = tuning.heuristic(M, N, K, 1, sms, l2_bytes=0)
        for r in bench.measure([("gemm", old), ("gemm", new)], M, N, K):
            rows.append(r)
            print(f"{M}x{N}x{K} {r.kernel:7s} {r.tflops:6.2f} {r.ratio:5.3f}x sk={(r.config or {}).get('sk', 0)}",
                  flush=True)
    print("wrote", bench.write_results(bench.results_document(rows), os.environ.get("OUT", "."), tag="heuristic"))


if __name__ == "__main__":
    main()
