"""Time variant sources of a kernel (default the family, gemm.cu) beside cuBLAS, each checked
against float64.

usage: python scripts/variants.py [--kernel NAME] --tag NAME --sizes 4096 --layouts NN NT -- FILE[:k=v,...] ...
FILE: a .cu file that builds like the kernel's own (same entry and parameters), or its shipped
file name (e.g. "gemm.cu"); the config is the kernel's default unless given.  Each variant
replaces the kernel's source for its own rows only.  Results: $OUT/<gpu>-<date>-<tag>.json.
"""
import argparse
import os
import sys
from pathlib import Path

from tilegemm import api, bench, cli, compiler, registry, runtime


def use_source(spec, path: str) -> None:
    object.__setattr__(spec, "file", path)
    for memo in (api._launchers, api._prepared, api._fast):
        memo.clear()
    compiler.clear_memory_cache()


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tag", required=True)
    p.add_argument("--kernel", default=registry.FAMILY.name)
    p.add_argument("--sizes", nargs="+", default=["4096"])
    p.add_argument("--layouts", nargs="+", default=["NN"])
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    p.add_argument("entries", nargs="+")
    args = p.parse_args(argv)
    arch = runtime.device_properties().arch
    spec = registry.get(args.kernel)
    shipped = spec.file
    rows = []
    for entry in args.entries:
        path, _, cfg = entry.partition(":")
        cfg = cli.parse_config(cfg) if cfg else dict(spec.defaults)
        src = shipped if path == shipped else str(Path(path).resolve())
        use_source(spec, src)
        for layout in args.layouts:
            r = spec.compile(cfg, layout=layout, arch=arch).resources
            print(f"{path} {layout} regs {r.registers} spills {r.spill_stores}/{r.spill_loads}", flush=True)
        for size in args.sizes:
            M, N, K = bench.parse_size(size)
            for layout in args.layouts:
                for r in bench.measure([(spec.name, cfg)], M, N, K, layout):
                    if r.kernel != "cublas":
                        r.kernel = Path(path).stem
                    rows.append(r)
                    print(f"{layout} {M}x{N}x{K} {r.kernel:14s} "
                          f"{r.tflops:7.2f} TFLOPS {r.ratio:6.3f}x err {r.rel_err:.1e}", flush=True)
    use_source(spec, shipped)
    out = bench.write_results(bench.results_document(rows, what=" ".join(sys.argv[1:])), args.out, args.tag)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
