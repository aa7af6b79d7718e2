"""Per-call host cost on torch tensors and the gain of CUDA graphs: back-to-back calls with out=
given (torch.mm, tilegemm.matmul, tilegemm.torch.matmul and the registered operator through the
dispatcher), and 100 small products captured into one graph against the same 100 called eagerly.

usage: python scripts/torch_costs.py [--sizes SHAPE ...] [--calls N] [--out DIR]
Writes DIR (default $OUT, else benchmarks/results)/<gpu>-<date>-torch-costs.json.
"""
import os
import sys
import time

from tilegemm import results
from tilegemm.parsing import ArgParser, argtype, parse_args, parse_shape, run_command


def main(argv=None) -> int:
    p = ArgParser(prog="scripts/torch_costs.py", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", nargs="+", type=argtype(parse_shape, "shape"), default=[parse_shape("64"), parse_shape("256")])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parse_args(p, argv)
    return args if isinstance(args, int) else run_command(run, args)


def _per_call(fn, calls: int, torch) -> float:
    """Microseconds per call of one back-to-back run of ``calls`` calls (host-bound for small products)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def _taking_turns(ways: dict, calls: int, torch, rounds: int = 7) -> dict:
    """Median microseconds per call of each way, the ways taking turns for ``rounds`` rounds (so that
    a slow stretch of the host reaches them all alike)."""
    times = {k: [] for k in ways}
    for _ in range(rounds):
        for k, fn in ways.items():
            times[k].append(_per_call(fn, calls, torch))
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def run(args) -> int:
    import torch

    import tilegemm
    import tilegemm.torch as tgt

    rows = []
    for M, N, K, _ in args.sizes:
        a = torch.randn(M, K, device="cuda")
        b = torch.randn(K, N, device="cuda")
        o = torch.empty(M, N, device="cuda")
        ways = {
            "torch.mm": lambda: torch.mm(a, b, out=o),
            "tilegemm.matmul": lambda: tilegemm.matmul(a, b, out=o),
            "tilegemm.torch.matmul": lambda: tgt.matmul(a, b, out=o),
            "torch.ops.tilegemm.gemm_out": lambda: torch.ops.tilegemm.gemm_out(a, b, None, 1.0, 0.0, o),
        }
        for fn in ways.values():  # warm-up
            fn()
        row = {"M": M, "N": N, "K": K, "kind": "per-call", **_taking_turns(ways, args.calls, torch)}
        # 100 independent products captured into one graph against the same 100 called eagerly
        xs = [(torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda"), torch.empty(M, N, device="cuda"))
              for _ in range(100)]

        def hundred():
            for x, y, z in xs:
                tilegemm.matmul(x, y, out=z)

        hundred()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            hundred()
        turns = _taking_turns({"eager": hundred, "graph": g.replay}, max(1, args.calls // 100), torch)
        row["eager_100_us_per_product"] = turns["eager"] / 100
        row["graph_100_us_per_product"] = turns["graph"] / 100
        row["graph_speedup"] = row["eager_100_us_per_product"] / row["graph_100_us_per_product"]
        ref = xs[7][0].double() @ xs[7][1].double()
        row["graph_rel_err"] = float((xs[7][2].double() - ref).norm() / ref.norm())
        rows.append(row)
        print(row, flush=True)
    doc = results.document(rows, cmd=results.command(prog="python scripts/torch_costs.py"), kind="torch-costs",
                           torch=torch.__version__)
    path = results.write(doc, args.out, "torch-costs")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
