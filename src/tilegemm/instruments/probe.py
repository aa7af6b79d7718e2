"""GPU-side measurements behind the instruments: driver occupancy, bank-probe launches for Nsight
Compute, one-shot kernel launches for ncu, the FP32 FFMA peak and memory bandwidth, and the check of
predicted against measured bank conflicts.  The probe kernels are in instruments/kernels/.

    python -m tilegemm.instruments.probe banks CASES.json      # one bank_probe launch per case
    python -m tilegemm.instruments.probe launch NAME MxNxK [--config k=v,..] [--layout NN]
    python -m tilegemm.instruments.probe peaks OUT.json        # FP32 FFMA peak, DRAM and L2 bandwidth
    python -m tilegemm.instruments.probe cases OUT.json        # the probe cases (no GPU needed)
    python -m tilegemm.instruments.probe compare CASES.json PROBE.csv RUNGS_DIR OUT.json
"""

from __future__ import annotations

import csv
import datetime
import json
import random
import sys
from pathlib import Path

import numpy as np

from .. import compiler, gpu, registry, results, runtime, timing
from ..launch import Signature
from ..parsing import ArgParser, argtype, parse_args, parse_config, parse_shape, run_command
from . import banks, patterns

PROG = "python -m tilegemm.instruments.probe"
PROBE_KERNELS = Path(__file__).resolve().parent / "kernels"
# the probe kernels' parameter lists (checked against their .cu files by tests/test_launch.py)
BANK_PROBE = Signature.of("bank_probe", "bank_probe.cu", "offs ptr, out ptr")
BW_PROBE = Signature.of("bw_probe", "bw_probe.cu", "p ptr, n4 long long, reps int, out ptr")
FP32_PEAK = Signature.of("fp32_peak", "fp32_peak.cu", "out ptr, iters int, x float, y float")
TF32_PEAK = Signature.of("tf32_peak", "tf32_peak.cu", "out ptr, iters int")

NCU_METRICS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
)

# rungs and the family at a shape every tile divides, for the per-kernel table
KERNEL_SHAPE = (1024, 1024, 1024)


def driver_occupancy(spec, params: dict, layout: str = "NN", device: int | None = None) -> int:
    """Blocks per SM from cuOccupancyMaxActiveBlocksPerMultiprocessor for a compiled kernel."""
    compiled = spec.compile(params, layout=layout, arch=gpu.device_properties(device).arch)
    p = spec.params(params)
    return runtime.load(compiled, device).max_active_blocks(spec.threads(p), spec.smem(p))


def _probe_kernel(name: str, defines: dict | None = None, suffix: str = ""):
    """A probe kernel of instruments/kernels/ compiled for and loaded on the current GPU (``suffix``
    "a": its arch-specific variant, for wgmma)."""
    path = PROBE_KERNELS / f"{name}.cu"
    return runtime.load(compiler.compile_file(str(path), entry=name, defines=defines,
                                              arch=gpu.device_properties().arch + suffix))


# --------------------------------------------------------------------------- bank probe cases


def _case(name, width, addrs, store=False):
    return {"name": name, "width": width, "store": bool(store),
            "addrs": [(-1 if a is None else int(a)) for a in addrs]}


def probe_cases(n_random: int = 12, seed: int = 7) -> list[dict]:
    """GEMM illustrated's worked cases (§5.1), each declared kernel access (warp 0), and random
    patterns."""
    L = range(32)
    c = [
        _case("LDS.32 linear", 4, [4 * i for i in L]),
        _case("LDS.32 one address (broadcast)", 4, [0] * 32),
        _case("LDS.32 two lanes, one bank, two rows (worked case: 2-way)", 4, [128 if i == 1 else 4 * i for i in L]),
        _case("LDS.32 stride 2 words", 4, [8 * i for i in L]),
        _case("LDS.32 stride 32 words", 4, [128 * i for i in L]),
        _case("LDS.32 half warps read the same words", 4, [4 * (i % 16) for i in L]),
        _case("LDS.64 linear", 8, [8 * i for i in L]),
        _case("LDS.64 lanes 0,1 conflict (worked case: 3 transactions)", 8, [256 if i == 1 else 8 * i for i in L]),
        _case("LDS.64 one address", 8, [0] * 32),
        _case("LDS.64 half warps read the same words", 8, [8 * (i % 16) for i in L]),
        _case("LDS.64 stride 2", 8, [16 * i for i in L]),
        _case("LDS.128 linear", 16, [16 * i for i in L]),
        _case("LDS.128 one address", 16, [0] * 32),
        _case("LDS.128 quarter warps read the same words", 16, [16 * (i % 8) for i in L]),
        _case("LDS.128 half warps read the same words", 16, [16 * (i % 16) for i in L]),
        _case("LDS.128 2x16 warp reading B (worked case: 2-way per quarter)", 16, [32 * (i % 16) for i in L]),
        _case("LDS.128 4x8 warp, A fragment (4x4 patches)", 16, [16 * (i // 8) for i in L]),
        _case("LDS.128 4x8 warp, B fragment (4x4 patches)", 16, [16 * (i % 8) for i in L]),
        _case("LDS.128 stride 2", 16, [32 * i for i in L]),
        _case("LDS.128 half the lanes off", 16, [16 * i if i % 2 == 0 else None for i in L]),
        _case("STS.32 linear", 4, [4 * i for i in L], True),
        _case("STS.32 stride 32 words", 4, [128 * i for i in L], True),
        _case("STS.32 two lanes, one bank", 4, [128 if i == 1 else 4 * i for i in L], True),
        _case("STS.64 linear", 8, [8 * i for i in L], True),
        _case("STS.128 linear", 16, [16 * i for i in L], True),
        _case("STS.128 stride 2", 16, [32 * i for i in L], True),
        _case("STS.128 one address", 16, [0] * 32, True),
        _case("STS.128 quarter warps read one float4 each", 16, [16 * (i // 8) for i in L], True),
        # cases that test the refined ("hopper") model's pairing of phases
        _case("LDS.128 pairs of quarters with 3+1 float4 (16 words)", 16,
              [16 * (i % 3) if i % 16 < 8 else 48 for i in L]),
        _case("LDS.128 pairs of quarters with 3+2 float4 (20 words)", 16,
              [16 * (i % 3) if i % 16 < 8 else 48 + 16 * (i % 2) for i in L]),
        _case("LDS.128 quarter broadcasts, one bank, two rows", 16, [0 if i % 16 < 8 else 512 for i in L]),
        _case("LDS.128 full quarters 0, 3; broadcasts in 1, 2", 16,
              [16 * (i % 8) if i < 8 or i >= 24 else 512 + 16 * (i // 8) for i in L]),
        _case("LDS.128 two float4 per quarter, all different", 16, [32 * (i // 8) + 16 * (i % 2) for i in L]),
        _case("LDS.128 two float4 per quarter, same in a pair", 16, [16 * (i % 2) + 64 * (i // 16) for i in L]),
        _case("LDS.128 only quarter 0, linear", 16, [16 * i if i < 8 else None for i in L]),
        _case("LDS.128 lanes 0 and 8 only", 16, [0 if i == 0 else 16 if i == 8 else None for i in L]),
        _case("LDS.64 halves with 4 pairs each (16 words)", 8, [8 * (i % 4) + 32 * (i // 16) for i in L]),
        _case("LDS.64 halves with 5 + 4 pairs (18 words)", 8,
              [8 * (i % 5) if i < 16 else 64 + 8 * (i % 4) for i in L]),
        _case("LDS.64 quarter-warp broadcast", 8, [8 * (i // 8) for i in L]),
    ]
    for name in patterns.DECLARED:
        for a in patterns.accesses(name):
            if a.width in (4, 8, 16):
                c.append(_case(f"{name}: {a.name}", a.width, a.warp_addrs(0), a.op == "st"))
    rng = random.Random(seed)
    for i in range(n_random):
        width = (4, 8, 16)[i % 3]
        span = rng.choice((256, 1024, 4096))
        c.append(_case(f"random {i} (LDS.{8 * width}, {span} B)", width,
                       [rng.randrange(0, span // width) * width for _ in L]))
    return c


def run_bank_probes(cases: list[dict]) -> None:
    """Launch bank_probe once per case, in order (ncu then reports one result per launch)."""
    cupy = gpu.cupy()
    out = cupy.empty(32, dtype=np.float32)
    for case in cases:
        fn = _probe_kernel("bank_probe", {"WIDTH": case["width"], "STORE": int(case["store"])})
        offs = cupy.asarray(np.array(case["addrs"], dtype=np.int32))
        fn.launch((1, 1, 1), (32, 1, 1), BANK_PROBE.types, BANK_PROBE.values(offs=offs.data.ptr, out=out.data.ptr))
    cupy.cuda.Device().synchronize()


def launch_once(name: str, M: int, N: int, K: int, config: dict | None = None, layout: str = "NN") -> None:
    """Launch kernel ``name`` once on random inputs (ncu: profile with ``-c 1``)."""
    from .. import api

    cupy = gpu.cupy()
    a, b = timing.operands(M, N, K, layout)
    out = cupy.empty((M, N), dtype=np.float32)
    api.matmul(a, b, out=out, kernel=name, config=config)
    cupy.cuda.Device().synchronize()


# --------------------------------------------------------------------------- peaks


def _median_ms(launch, reps: int, skip: int = 0) -> float:
    cupy = gpu.cupy()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for rep in range(reps):
        start.record()
        launch()
        end.record()
        end.synchronize()
        if rep >= skip:
            times.append(cupy.cuda.get_elapsed_time(start, end))
    return float(np.median(times))


def fp32_peak(iters: int = 8192, chains: int = 16) -> float:
    """FFMA throughput in TFLOPS: the median of several launches of a chain-free FFMA kernel."""
    cupy = gpu.cupy()
    props = gpu.device_properties()
    fn = _probe_kernel("fp32_peak", {"CHAINS": chains})
    threads, blocks = 256, props.sms * (props.max_threads_per_sm // 256) * 4
    out = cupy.empty(threads * blocks, dtype=np.float32)
    args = FP32_PEAK.values(out=out.data.ptr, iters=iters, x=0.999999, y=1e-7)
    ms = _median_ms(lambda: fn.launch((blocks, 1, 1), (threads, 1, 1), FP32_PEAK.types, args), 7, skip=1)
    if not np.isfinite(out[:8].get()).all():
        raise RuntimeError("the FFMA peak kernel produced non-finite values")
    return 2.0 * chains * iters * threads * blocks / ms / 1e9


def tf32_peak(iters: int = 4096, group: int = 4) -> float | None:
    """TF32 tensor-core throughput in TFLOPS (wgmma m64n128k8, A in registers, B in shared memory, as
    the tensor-core rungs run it): the median of several launches of a block per SM; None below sm_90."""
    from ..hopper import hopper_tensor_cores

    props = gpu.device_properties()
    if not hopper_tensor_cores(props):
        return None
    cupy = gpu.cupy()
    fn = _probe_kernel("tf32_peak", {"GROUP": group}, "a")
    threads, blocks = 256, props.sms
    out = cupy.empty(threads * blocks, dtype=np.float32)
    args = TF32_PEAK.values(out=out.data.ptr, iters=iters)
    ms = _median_ms(lambda: fn.launch((blocks, 1, 1), (threads, 1, 1), TF32_PEAK.types, args), 7, skip=1)
    if not np.isfinite(out[:8].get()).all():
        raise RuntimeError("the TF32 peak kernel produced non-finite values")
    return 2.0 * 64 * 128 * 8 * group * iters * (threads // 128) * blocks / ms / 1e9


def bandwidth(nbytes: int, reps: int) -> float:
    """Read bandwidth in GB/s over a buffer of ``nbytes`` read ``reps`` times (median of 5)."""
    cupy = gpu.cupy()
    props = gpu.device_properties()
    fn = _probe_kernel("bw_probe")
    buf = cupy.random.standard_normal(nbytes // 4, dtype=np.float32)
    out = cupy.empty(1, dtype=np.float32)
    blocks = props.sms * (props.max_threads_per_sm // 256)

    def launch():
        fn.launch((blocks, 1, 1), (256, 1, 1), BW_PROBE.types,
                  BW_PROBE.values(p=buf.data.ptr, n4=nbytes // 16, reps=reps, out=out.data.ptr))

    launch()  # warm-up (and L2 fill for the small buffer)
    return nbytes * reps / _median_ms(launch, 5) / 1e6


def measure_peaks() -> dict:
    return {"schema": results.SCHEMA, "kind": "peaks", "command": results.command(prog=PROG), "commit": results.commit(),
            "date": _today(), **results.environment(),
            "fp32_tflops": fp32_peak(), "tf32_tflops": tf32_peak(), "dram_gbs": bandwidth(2 << 30, 1),
            "l2_gbs": bandwidth(16 << 20, 64)}


# --------------------------------------------------------------------------- predicted vs measured


def read_ncu_csv(path) -> list[dict]:
    """ncu --csv --metrics output -> one dict per profiled launch, in launch order: metric -> value."""
    rows: dict[int, dict] = {}
    text = Path(path).read_text().splitlines()
    start = next((i for i, line in enumerate(text) if line.startswith('"ID"')), None)
    if start is None:
        return []
    for r in csv.DictReader(text[start:]):
        d = rows.setdefault(int(r["ID"]), {"kernel": r.get("Kernel Name", "")})
        try:
            d[r["Metric Name"]] = float(str(r["Metric Value"]).replace(",", ""))
        except ValueError:
            d[r["Metric Name"]] = None
    return [rows[i] for i in sorted(rows)]


def compare(cases: list[dict], probe_rows: list[dict], kernel_rows: dict[str, dict]) -> dict:
    """Predicted (both models) against measured wavefronts, for the probes and the kernels."""
    probes = []
    for case, m in zip(cases, probe_rows):
        op = "st" if case["store"] else "ld"
        addrs = [None if a < 0 else a for a in case["addrs"]]
        row = {"name": case["name"], "width": case["width"], "op": op,
               "measured_wavefronts": m.get(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum"),
               "measured_conflicts": m.get(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum")}
        for model in banks.MODELS:
            p = banks.predict(addrs, case["width"], model, case["store"])
            row[f"{model}_wavefronts"], row[f"{model}_conflicts"] = p.wavefronts, p.conflicts
        probes.append(row)
    kernels = []
    M, N, K = KERNEL_SHAPE
    for name, m in kernel_rows.items():
        row = {"kernel": name, "shape": [M, N, K]}
        for op in ("ld", "st"):
            row[f"measured_{op}_wavefronts"] = m.get(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum")
            row[f"measured_{op}_conflicts"] = m.get(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum")
            row[f"measured_{op}_requests"] = m.get(f"smsp__inst_executed_op_shared_{op}.sum")
        for model in banks.MODELS:
            t = patterns.launch_totals(name, M, N, K, model=model)
            for op in ("ld", "st"):
                row[f"{model}_{op}_wavefronts"] = t[f"{op}_wavefronts"]
                row[f"{model}_{op}_conflicts"] = t[f"{op}_wavefronts"] - t[f"{op}_ideal"]
                row[f"predicted_{op}_requests"] = t[f"{op}_requests"]
        kernels.append(row)
    return {"probes": probes, "kernels": kernels, "cases": cases,
            "metrics": list(NCU_METRICS), "kernel_shape": list(KERNEL_SHAPE)}


def _today() -> str:
    return datetime.date.today().isoformat()


def _run(a) -> int:
    if a.cmd == "cases":
        Path(a.out).write_text(json.dumps(probe_cases(), indent=1) + "\n")
    elif a.cmd == "banks":
        run_bank_probes(json.loads(Path(a.cases).read_text()))
    elif a.cmd == "launch":
        M, N, K, batch = a.shape
        if batch != 1:
            raise ValueError(f"launch takes one product, MxNxK; got a batch of {batch}")
        registry.get(a.name)
        launch_once(a.name, M, N, K, a.config, a.layout)
    elif a.cmd == "peaks":
        Path(a.out).write_text(json.dumps(measure_peaks(), indent=1) + "\n")
    elif a.cmd == "compare":
        cases = json.loads(Path(a.cases).read_text())
        kernel_rows = {}
        for f in sorted(Path(a.kernel_dir).glob("*.csv")):
            rows = read_ncu_csv(f)
            if rows:
                kernel_rows[f.stem] = rows[-1]
        env = results.environment() if gpu.have_gpu() else {}
        doc = {"schema": results.SCHEMA, "kind": "banks", "command": results.command(prog=PROG),
               "commit": results.commit(), "date": _today(), **env,
               **compare(cases, read_ncu_csv(a.probe_csv), kernel_rows)}
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    ap = ArgParser(prog=PROG)
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=ArgParser)
    p = sub.add_parser("cases"); p.add_argument("out")
    p = sub.add_parser("banks"); p.add_argument("cases")
    p = sub.add_parser("launch"); p.add_argument("name"); p.add_argument("shape", type=argtype(parse_shape, "shape"))
    p.add_argument("--config", type=argtype(parse_config, "config"))
    p.add_argument("--layout", default="NN", choices=registry.LAYOUTS)
    p = sub.add_parser("peaks"); p.add_argument("out")
    p = sub.add_parser("compare"); p.add_argument("cases"); p.add_argument("probe_csv")
    p.add_argument("kernel_dir"); p.add_argument("out")
    a = parse_args(ap, argv)
    return a if isinstance(a, int) else run_command(_run, a)


if __name__ == "__main__":
    sys.exit(main())
