"""Time kernel configs beside cuBLAS (each checked against float64 first) and write a results file.

usage: python scripts/sweep.py --tag NAME --sizes 4096 4095 --layouts NN -- ENTRY...
ENTRY: a rung name, or KERNEL:NAME=VALUE,... (e.g. gemm:stages=3,bk=16).  Results go to
$OUT (or benchmarks/results) as <gpu>-<date>-<tag>.json.
"""
import argparse
import os
import sys

from tilegemm import bench, cli, registry, runtime


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tag", required=True)
    p.add_argument("--sizes", nargs="+", default=["4096"])
    p.add_argument("--layouts", nargs="+", default=["NN"])
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    p.add_argument("entries", nargs="+")
    args = p.parse_args(argv)
    kernels = []
    for e in args.entries:
        name, _, cfg = e.partition(":")
        kernels.append((name, cli.parse_config(cfg) if cfg else None))
    arch = runtime.device_properties().arch
    for name, cfg in kernels:  # what ptxas made of each (this machine's NVRTC)
        for layout in args.layouts:
            r = registry.get(name).compile(cfg, layout=layout, arch=arch).resources
            print(f"{name}:{cfg} {layout} regs {r.registers} spills {r.spill_stores}/{r.spill_loads} stack {r.stack_bytes}")
    rows = []
    for size in args.sizes:
        M, N, K = bench.parse_size(size)
        for layout in args.layouts:
            for r in bench.measure(kernels, M, N, K, layout):
                rows.append(r)
                cfg = ",".join(f"{k}={v}" for k, v in (r.config or {}).items())
                print(f"{layout} {M}x{N}x{K} {r.kernel:12s} {r.tflops:7.2f} TFLOPS {r.ratio:6.3f}x err {r.rel_err:.1e} {cfg}",
                      flush=True)
    path = bench.write_results(bench.results_document(rows, what=" ".join(sys.argv[1:])), args.out, args.tag)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
