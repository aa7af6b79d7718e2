"""Time kernel configs beside cuBLAS (each checked against float64 first) and write a results file.

usage: python scripts/sweep.py --tag NAME [--sizes SHAPE ...] [--layouts NN ...] [--refs R ...] [--out DIR] -- ENTRY...
ENTRY: a kernel name, gemm-tf32x3 / gemm-tf32 (the default path at that precision), or
KERNEL:NAME=VALUE,... (e.g. gemm:stages=3,bk=16; gemm:mma=3,... runs the family on the tensor
cores).  R: torch, triton, cublas-tf32 (references beside cuBLAS).  SHAPE: MxNxK,
BATCHxMxNxK or N.  Results go to DIR (default $OUT, else benchmarks/results) as
<gpu>-<date>-<tag>.json, recording this command and the commit (set TILEGEMM_COMMIT on a machine
whose copy of the checkout has no .git).
"""
import os
import sys

from tilegemm import bench, gpu, registry, results
from tilegemm.parsing import ArgParser, argtype, format_shape, parse_args, parse_config, parse_shape, run_command


def main(argv=None) -> int:
    p = ArgParser(prog="scripts/sweep.py", description=__doc__.split("\n")[0])
    p.add_argument("--tag", required=True)
    p.add_argument("--sizes", nargs="+", type=argtype(parse_shape, "shape"), default=[parse_shape("4096")])
    p.add_argument("--layouts", nargs="+", default=["NN"], choices=registry.LAYOUTS)
    p.add_argument("--refs", nargs="*", default=[], choices=sorted(bench.REFERENCES))
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    p.add_argument("entries", nargs="+")
    args = parse_args(p, argv)
    return args if isinstance(args, int) else run_command(run, args)


def run(args) -> int:
    kernels = []
    for e in args.entries:
        name, _, cfg = e.partition(":")
        bench.kernel_name(name)
        kernels.append((name, parse_config(cfg)))
    arch = gpu.device_properties().arch
    for name, cfg in kernels:  # what ptxas made of each (this machine's NVRTC); the default path selects per shape
        kernel, prec = bench.kernel_name(name)
        if kernel == registry.FAMILY.name and not cfg:
            continue
        full = {"mma": registry.PRECISIONS[prec], **cfg} if kernel == registry.FAMILY.name else cfg
        for layout in args.layouts:
            r = registry.get(kernel).compile(full, layout=layout, arch=arch).resources
            print(f"{name}:{cfg} {layout} regs {r.registers} spills {r.spill_stores}/{r.spill_loads} stack {r.stack_bytes}")
    rows = []
    for M, N, K, batch in args.sizes:
        for layout in args.layouts:
            for r in bench.measure(kernels, M, N, K, layout, batch=batch, refs=args.refs):
                rows.append(r)
                cfg = ",".join(f"{k}={v}" for k, v in (r.config or {}).items())
                print(f"{layout} {format_shape(M, N, K, batch)} {r.kernel:12s} {r.tflops:7.2f} TFLOPS {r.ratio:6.3f}x "
                      f"err {r.rel_err:.1e} {cfg}", flush=True)
    path = results.write(results.document(rows, cmd=results.command(prog="python scripts/sweep.py")),
                         args.out, args.tag)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
