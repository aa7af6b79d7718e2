"""SM clock and power under sustained load: the FFMA peak kernel, tilegemm and cuBLAS at 4096³ and
8192³, each run back to back for a few seconds while nvidia-smi samples the GPU every 50 ms.
It answers what FFMA peak a GEMM can reach at the clock the GPU holds while running it.

usage: python scripts/clock_probe.py [seconds per phase]   (results: $OUT/<gpu>-<date>-clocks.json)
"""
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

from tilegemm import api, bench, compiler, runtime

FIELDS = "timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active"


def run_for(seconds, launch, flop_per_launch):
    """Launch back to back for ``seconds``; (host start, host end, TFLOPS over the whole phase)."""
    cupy = runtime._cupy()
    launch()
    cupy.cuda.Device().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    t0 = time.time()
    n = 0
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(4):
            launch()
        n += 4
        if n % 64 == 0:
            end.record()
            end.synchronize()  # keep the queue short, so the phase ends when the host says
    end.record()
    end.synchronize()
    ms = cupy.cuda.get_elapsed_time(start, end)
    return t0, time.time(), flop_per_launch * n / ms / 1e9


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
    cupy = runtime._cupy()
    props = runtime.device_properties()
    out_dir = os.environ.get("OUT", "benchmarks/results")
    log = os.path.join(out_dir, "clocks.csv")
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=open(log, "w"), stderr=subprocess.DEVNULL)
    time.sleep(1.0)

    k = compiler.compile_file("fp32_peak.cu", entry="fp32_peak", defines={"CHAINS": 16}, arch=props.arch)
    peak_fn = runtime.load(k, props.id)
    threads, blocks, iters = 256, props.sms * (props.max_threads_per_sm // 256) * 4, 8192
    pout = cupy.empty(threads * blocks, dtype=np.float32)
    pargs = (pout, np.int32(iters), np.float32(0.999999), np.float32(1e-7))
    phases = [("fp32_peak", lambda: peak_fn((blocks, 1, 1), (threads, 1, 1), pargs), 2.0 * 16 * iters * threads * blocks)]
    for n in (4096, 8192):
        a, b = bench.make_operands(n, n, n, "NN")
        d = cupy.empty((n, n), dtype=np.float32)
        phases.append((f"tilegemm {n}^3", lambda a=a, b=b, d=d: api.matmul(a, b, out=d), 2.0 * n ** 3))
        phases.append((f"cublas {n}^3", lambda a=a, b=b, d=d: cupy.matmul(a, b, out=d), 2.0 * n ** 3))
    results = []
    for name, fn, flop in phases:
        t0, t1, tflops = run_for(seconds, fn, flop)
        results.append(dict(phase=name, start=t0, end=t1, tflops=tflops))
        time.sleep(1.0)  # a gap between phases in the clock log
    smi.terminate()
    smi.wait()

    samples = []
    for line in open(log):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6:
            continue
        try:
            ts = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append(dict(t=ts, sm_mhz=float(parts[1]), power_w=float(parts[2]), limit_w=float(parts[3]),
                                temp_c=float(parts[4]), reasons=parts[5]))
        except ValueError:
            continue
    for r in results:
        # the middle of the phase (skip its first and last half second: ramps)
        inside = [s for s in samples if r["start"] + 0.5 <= s["t"] <= r["end"] - 0.5]
        if inside:
            mhz = float(np.median([s["sm_mhz"] for s in inside]))
            r.update(samples=len(inside), sm_mhz=mhz, power_w=float(np.median([s["power_w"] for s in inside])),
                     temp_c=max(s["temp_c"] for s in inside), reasons=sorted({s["reasons"] for s in inside}),
                     ffma_peak_at_clock=props.sms * 128 * 2 * mhz * 1e6 / 1e12)
            r["fraction_of_peak_at_clock"] = r["tflops"] / r["ffma_peak_at_clock"]
        print(f"{r['phase']:16s} {r['tflops']:6.2f} TFLOPS  SM {r.get('sm_mhz', float('nan')):6.0f} MHz  "
              f"{r.get('power_w', float('nan')):5.0f} W  peak at that clock {r.get('ffma_peak_at_clock', float('nan')):5.1f}"
              f"  ({100 * r.get('fraction_of_peak_at_clock', float('nan')):.1f}%)  {r.get('reasons')}", flush=True)
    doc = bench.results_document([], kind="clocks")
    doc.update(phases=results, samples=samples, seconds_per_phase=seconds)
    path = bench.write_results(doc, out_dir, tag="clocks")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
