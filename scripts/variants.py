"""Time variant sources of a kernel (default the family, gemm.cu) beside cuBLAS, each checked
against float64, and write a results file.

usage: python scripts/variants.py --tag NAME [--kernel NAME] [--sizes SHAPE ...] [--layouts NN ...] -- FILE[:k=v,...] ...
FILE: a .cu file that builds like the kernel's own (same entry and parameters), or the kernel's
shipped file name (e.g. gemm.cu); the config is the kernel's default unless given.  Each variant
runs in a process of its own whose kernel folder (TILEGEMM_KERNEL_DIR) is a copy of the shipped
one with the kernel's file replaced.  Results: $OUT (else benchmarks/results)/<gpu>-<date>-<tag>.json.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tilegemm import compiler, registry, results
from tilegemm.parsing import ArgParser, argtype, parse_args, parse_config, parse_shape, run_command


def child(spec_json: str) -> int:
    """One variant, in this process: its rows as JSON on stdout's last line."""
    from dataclasses import asdict

    from tilegemm import bench, gpu

    job = json.loads(spec_json)
    spec = registry.get(job["kernel"])
    arch = gpu.device_properties().arch
    rows = []
    for layout in job["layouts"]:
        r = spec.compile(job["config"], layout=layout, arch=arch).resources
        print(f"{job['label']} {layout} regs {r.registers} spills {r.spill_stores}/{r.spill_loads}", file=sys.stderr)
    for M, N, K, batch in job["sizes"]:
        for layout in job["layouts"]:
            for r in bench.measure([(spec.name, job["config"])], M, N, K, layout, batch=batch):
                if r.kernel != "cublas":
                    r.kernel = job["label"]
                rows.append(asdict(r))
                print(f"{layout} {M}x{N}x{K} {r.kernel:14s} {r.tflops:7.2f} TFLOPS {r.ratio:6.3f}x err {r.rel_err:.1e}",
                      file=sys.stderr, flush=True)
    print(json.dumps(rows))
    return 0


def main(argv=None) -> int:
    p = ArgParser(prog="scripts/variants.py", description=__doc__.split("\n")[0])
    p.add_argument("--tag", required=True)
    p.add_argument("--kernel", default=registry.FAMILY.name)
    p.add_argument("--sizes", nargs="+", type=argtype(parse_shape, "shape"), default=[parse_shape("4096")])
    p.add_argument("--layouts", nargs="+", default=["NN"], choices=registry.LAYOUTS)
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    p.add_argument("entries", nargs="+")
    args = parse_args(p, argv)
    return args if isinstance(args, int) else run_command(run, args)


def run(args) -> int:
    spec = registry.get(args.kernel)
    rows = []
    for entry in args.entries:
        path, _, cfg = entry.partition(":")
        source = compiler.KERNEL_DIR / spec.file if path == spec.file else Path(path).resolve()
        with tempfile.TemporaryDirectory(prefix="tilegemm-variant-") as folder:
            for f in compiler.KERNEL_DIR.iterdir():
                shutil.copy(f, folder)
            shutil.copy(source, Path(folder) / spec.file)
            job = {"kernel": spec.name, "label": Path(path).stem, "config": parse_config(cfg) or dict(spec.defaults),
                   "sizes": args.sizes, "layouts": args.layouts}
            env = {**os.environ, "TILEGEMM_KERNEL_DIR": folder}
            done = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], env=env, stdout=subprocess.PIPE,
                                  text=True, check=True)
            rows += json.loads(done.stdout.strip().splitlines()[-1])
    path = results.write(results.document(rows, cmd=results.command(prog="python scripts/variants.py")),
                         args.out, args.tag)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2]))
    sys.exit(main())
