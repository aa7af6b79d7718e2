"""One-off probe: which kernels cuBLAS (through cupy.matmul) runs on given shapes, with their grid,
block and time, beside tilegemm's selected config and time (torch.profiler's CUDA activity).

usage: python scripts/probe_cublas.py SHAPE ... (MxNxK)   writes $OUT/cublas-kernels.json
"""
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import tilegemm
from tilegemm import gpu, results, selection, suites, timing
from tilegemm.parsing import parse_shape


def main(argv):
    cp = gpu.cupy()
    rows = []
    for text in argv:
        M, N, K, _ = parse_shape(text)
        sets, outs = timing.input_sets(M, N, K, "NN", 1)
        a, b = sets[0]
        for _ in range(3):
            cp.matmul(a, b, out=outs[0])
            tilegemm.matmul(a, b, out=outs[0])
        cp.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(len(sets)):
                cp.matmul(*sets[i], out=outs[i])
            cp.cuda.Device().synchronize()
        events = [e for e in prof.events() if e.device_type.name == "CUDA"]
        kernels = {}
        for e in events:
            k = kernels.setdefault(e.name, {"name": e.name, "calls": 0, "us": 0.0})
            k["calls"] += 1
            k["us"] += e.device_time / len(sets)
        trace = os.path.join(os.environ.get("OUT", "/tmp"), f"trace-{M}x{N}x{K}.json")
        prof.export_chrome_trace(trace)
        grids = {}
        for ev in json.load(open(trace)).get("traceEvents", []):
            if ev.get("cat") == "kernel":
                args = ev.get("args", {})
                grids[ev["name"]] = {"grid": args.get("grid"), "block": args.get("block"),
                                     "registers": args.get("registers per thread"),
                                     "smem": args.get("shared memory")}
        os.remove(trace)
        for k in kernels.values():
            k.update(grids.get(k["name"], {}))
        cfg, src = selection.select(gpu.current_device(), "NN", M, N, K, 1)
        ms = timing.time_interleaved([lambda i: cp.matmul(*sets[i], out=outs[i]),
                                      lambda i: tilegemm.matmul(*sets[i], out=outs[i])], len(sets), target_s=0.3)
        rows.append({"M": M, "N": N, "K": K, "cublas_kernels": list(kernels.values()), "cublas_ms": ms[0],
                     "tilegemm_ms": ms[1], "ratio": ms[0] / ms[1], "selected": {**cfg, "source": src}})
        print(f"{M}x{N}x{K}: cuBLAS {ms[0]*1e3:.1f} us, tilegemm {ms[1]*1e3:.1f} us ({ms[0]/ms[1]:.3f}x) "
              f"[{src} {cfg}]", flush=True)
        for k in kernels.values():
            print(f"    {k['us']:8.1f} us  grid {k.get('grid')} block {k.get('block')} regs {k.get('registers')} "
                  f"smem {k.get('smem')}  {k['name'][:150]}", flush=True)
    doc = results.document(rows, cmd=results.command(prog="python scripts/probe_cublas.py"), kind="cublas-kernels")
    path = os.path.join(os.environ.get("OUT", "/tmp"), "cublas-kernels.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
