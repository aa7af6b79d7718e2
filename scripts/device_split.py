"""Family main loop split (SPLIT=0/1) at large squares beside cuBLAS, one run: results JSON in $OUT."""
import os

from tilegemm import bench, registry

F = registry.FAMILY
base = F.params()
cfgs = [("gemm", dict(base)), ("gemm", {**base, "split": 1}),
        ("gemm", {**base, "tn": 8, "ln": 8}), ("gemm", {**base, "tn": 8, "ln": 8, "split": 1})]
rows = []
for M in (4096, 8192, 4095, 2048):
    for r in bench.measure(cfgs, M, M, M):
        rows.append(r)
        c = r.config or {}
        print(r.kernel, {k: c.get(k) for k in ("tn", "ln", "split")}, M, f"{r.tflops:.1f}", f"{r.ratio:.3f}", f"{r.rel_err:.1e}", flush=True)
doc = bench.results_document(rows)
print(bench.write_results(doc, os.environ.get("OUT", "/tmp"), tag="split"))
