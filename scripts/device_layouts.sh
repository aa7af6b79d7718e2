#!/usr/bin/env bash
# Why is one layout slower than another?  Nsight Compute memory / scheduler / stall metrics of the
# family default and of cuBLAS (through cupy.matmul) at 4096^3 in the layouts of LAYOUTS, one launch
# each, boiled down to one JSON ($RAW/layouts.json); plus the SASS of each profiled kernel (ncu's
# source page) for the register-bank inspector.  usage: bash scripts/device_layouts.sh
# env: LAYOUTS (default "NN NT TN TT"), CUBLAS_LAYOUTS (default "NN NT"; empty: none), GEMM_CONFIG,
# S (size), TAG (prefix of the family's run names, to profile several configs into one RAW)
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 TILEGEMM_CACHE_DIR=/tmp/tgcache
RAW="${RAW:-/tmp/raw}"; mkdir -p "$RAW"
S=${S:-4096}
GEMM=${GEMM_CONFIG:-$(python3 -c "from tilegemm import registry as r; print(','.join(f'{k}={v}' for k,v in r.FAMILY.defaults.items()))")}
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section LaunchStats --section InstructionStats --section SourceCounters"
prof() {  # name, kernel regex, command...
  local name=$1 rx=$2; shift 2
  ncu $SECTIONS --import-source no -k "regex:$rx" -c 1 -f -o "$RAW/lay-$name" "$@" > "$RAW/lay-$name.log" 2>&1
  ncu -i "$RAW/lay-$name.ncu-rep" --page raw --csv > "$RAW/lay-$name-raw.csv" 2>>"$RAW/lay-$name.log"
  ncu -i "$RAW/lay-$name.ncu-rep" --page source --csv --print-source sass > "$RAW/lay-$name-sass.csv" 2>>"$RAW/lay-$name.log"
}
for L in ${LAYOUTS:-NN NT TN TT}; do
  prof gemm-${TAG:-}$L '^tilegemm_gemm$' python3 -m tilegemm.instruments.probe launch gemm $S $S $S --config "$GEMM" --layout $L
done
for L in ${CUBLAS_LAYOUTS-NN NT}; do
  prof cublas-$L 'gemm|Kernel' python3 -c "
from tilegemm import bench
import cupy as cp
a, b = bench.make_operands($S, $S, $S, '$L', cupy=cp)
cp.cuda.Device().synchronize(); c = a @ b; cp.cuda.Device().synchronize()"
done
python3 - "$RAW" <<'PY'
import csv, glob, json, os, re, sys
raw = sys.argv[1]
keep = re.compile(r"^(Kernel Name|gpu__time_duration.sum|launch__(registers|grid_size|block_size)|"
                  r"smsp__average_warps_issue_stalled_.*_per_issue_active.ratio|smsp__issue_active.avg.pct.*|"
                  r"sm__throughput.avg.pct.*|l1tex__throughput.avg.pct.*|lts__throughput.avg.pct.*|"
                  r"dram__throughput.avg.pct.*|dram__bytes_read.sum|lts__t_sector_hit_rate.pct|"
                  r"l1tex__data_pipe_lsu_wavefronts.*sum|l1tex__t_(requests|sectors)_pipe_lsu_mem_global.*sum|"
                  r"l1tex__data_bank_conflicts.*sum|lts__t_sectors_srcunit_tex.*sum|smsp__inst_executed.sum|"
                  r"l1tex__lsu_writeback_active.*|l1tex__m_.*sum|smsp__warps_eligible.avg.per_cycle_active|"
                  r"sm__pipe_fma_cycles_active.avg.pct.*|sm__cycles_elapsed.avg.per_second)$")
out = {}
for f in sorted(glob.glob(os.path.join(raw, "lay-*-raw.csv"))):
    name = os.path.basename(f)[4:-8]
    rows = list(csv.reader(open(f)))
    if len(rows) < 3:
        out[name] = {"error": open(f.replace("-raw.csv", ".log")).read()[-2000:]}
        continue
    d = {h: v for h, v in zip(rows[0], rows[2]) if keep.match(h) and v not in ("", "n/a")}
    sass = []
    sf = f.replace("-raw.csv", "-sass.csv")
    if os.path.exists(sf):
        srows = list(csv.reader(open(sf)))
        # ncu writes the kernel's name on a line of its own before the header row
        first = next((i for i, r in enumerate(srows) if r and r[0] == "Address"), None)
        if first is not None:
            srows = srows[first:]
            hi = {h: i for i, h in enumerate(srows[0])}
            col = hi.get("Source")
            addr = hi.get("Address")
            stall = [i for h, i in hi.items() if h.startswith("Warp Stall Sampling (All")]
            for r in srows[1:]:
                if col is not None and len(r) > col:
                    sass.append([r[addr] if addr is not None else "", r[col], r[stall[0]] if stall else ""])
    d["sass"] = sass
    out[name] = d
json.dump(out, open(os.path.join(raw, "layouts.json"), "w"), indent=1)
for n, d in out.items():
    print(n, d.get("gpu__time_duration.sum"), d.get("smsp__issue_active.avg.pct_of_peak_sustained_active"),
          d.get("l1tex__throughput.avg.pct_of_peak_sustained_active"), len(d.get("sass", [])))
PY
