"""``tilegemm explain``: one report on why a kernel (a rung, or a family config) is as fast as it is.

Everything but the measured columns needs no GPU: the kernel is compiled for ``arch`` by NVRTC,
its SASS read by nvdisasm, occupancy computed from the arch's table, shared-memory banks
predicted from the kernel's declared access patterns, and the roofline floors taken from the
shipped measured peaks.  With a GPU, the driver's occupancy and a timed run beside cuBLAS are added.
"""

from __future__ import annotations

from .. import access, builds, compiler, gpu as _gpu, occupancy, registry
from . import patterns, roofline, sass


def build(name: str, config: dict | None = None, shape=(4096, 4096, 4096), layout: str = "NN",
          arch: str | None = None, gpu: str | None = None, measure: bool | None = None) -> dict:
    """The report as plain data (tests and ``--json`` use it; ``render`` prints it).  Everything
    given is checked before anything is compiled or measured."""
    spec = registry.get(name)
    params = spec.params(config)
    if len(shape) != 3 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in shape):
        raise ValueError(f"shape {tuple(shape)} is not three positive integers M, N, K")
    if layout not in registry.LAYOUTS:
        raise ValueError(f"layout must be one of {registry.LAYOUTS}, got {layout!r}")
    have_gpu = _gpu.have_gpu()
    props = _gpu.device_properties() if have_gpu else None
    arch = compiler.normalize_arch(arch or (props.arch if props else "sm_90"))
    queried = bool(props and props.arch == arch)
    limits = occupancy.Limits.from_props(props) if queried else occupancy.Limits.for_arch(arch)
    spec.check(params, limits, given=config)
    if gpu is not None:
        roofline.peaks_for(gpu)  # an unknown GPU name raises here, before the compile
    M, N, K = shape
    # the layout the kernel runs this product in (the family runs an NT product whose B it transposes first as NN,
    # on the H200 an NN product whose A it transposes first as TN: the GPU named, or this one): what is compiled,
    # read and predicted
    run_as = (access.family_layout(params, layout, M, N, K, 1, gpu or (props.name if queried else None))
              if spec is registry.FAMILY else layout)
    # the build dispatch runs for operands read 16 bytes at a time: on some archs at more blocks an SM
    # than the config asks (builds.ARCH_MINB); its registers, occupancy and SASS are the ones reported
    # (sm_90a builds of the FFMA family are sm_90's)
    built = builds.arch_minb(params, run_as, 4, arch.removesuffix("a")) if spec is registry.FAMILY else params
    compiled = spec.compile(spec.compiled_params(built), layout=run_as, arch=arch)
    res = compiled.resources
    threads = spec.threads(params)
    dyn = spec.smem(params)
    occ = occupancy.occupancy(threads, res.registers, res.shared_bytes + dyn, limits)
    report = {
        "kernel": spec.name, "summary": spec.summary, "source": spec.source, "params": params,
        "built_minb": built["minb"] if built is not params else None,
        "layout": layout, "kernel_layout": run_as, "arch": arch, "shape": [M, N, K],
        "resources": {"threads": threads, "tile": list(spec.tile(params)), "registers": res.registers,
                      "static_smem": res.shared_bytes, "dynamic_smem": dyn,
                      "spill_bytes": res.spill_stores + res.spill_loads},
        "occupancy": {"blocks": occ.blocks, "warps": occ.warps, "limiter": occ.limiter, "by": occ.by,
                      "fraction": occ.fraction(limits),
                      "limits": "queried from the GPU" if queried else f"{arch} table"},
    }
    report["banks"] = [
        {"access": s.access.name, "op": s.access.op, "width_bits": 8 * s.access.width,
         "requests_per_block": s.requests,
         "classic_per_request": s.per_request, "hopper_per_request": h.per_request,
         "hopper_ideal_per_request": h.ideal / max(1, h.requests)}
        for s, h in zip(patterns.predict(name, params, K, run_as, "classic"),
                        patterns.predict(name, params, K, run_as, "hopper"))
    ]
    listing = sass.disassemble(compiled.cubin)
    loop = sass.inspect(listing)
    issue_ceiling = loop.ffma / max(1, loop.instructions + loop.bank_conflicts)
    hopper = sass.inspect(listing, "hopper")  # two same-bank reads cost: fitted to H100 timings
    report["sass"] = {
        "loop_instructions": loop.instructions, "ffma": loop.ffma, "ffma_share": loop.ffma_share,
        "mix": loop.mix, "reuse_operands": loop.reuse_operands, "reuse_hits": loop.reuse_hits,
        "ffma_sources": loop.ffma_sources, "register_bank_conflicts": loop.bank_conflicts,
        "bank_model": loop.bank_model, "issue_ceiling": issue_ceiling,
        "hopper_bank_conflicts": hopper.bank_conflicts,
        "hopper_issue_ceiling": hopper.ffma / max(1, hopper.instructions + hopper.bank_conflicts),
        "tensor_core_mma": loop.hmma,  # HMMA (mma.sync) or HGMMA (wgmma): the tensor-core rungs' products
        # shared loads read fewer than sass.LATE_LOAD instructions later (ptxas may load a k step's fragments just
        # before it, whatever the source's double buffering says), and the nearest
        "shared_loads": len(loop.lds_leads), "late_shared_loads": sum(0 < x < sass.LATE_LOAD for x in loop.lds_leads),
        "nearest_shared_load_use": min((x for x in loop.lds_leads if x), default=None),
    }
    try:
        gpu_name, peaks = roofline.peaks_for(gpu or (props.name if props else None))
    except ValueError:
        if gpu:
            raise
        gpu_name, peaks = roofline.peaks_for(None)  # an unmeasured GPU: say whose peaks these are
    rf = roofline.roofline(M, N, K, peaks, name, params)
    report["roofline"] = {"gpu": gpu_name, "peaks": peaks, **rf.as_dict()}
    if measure if measure is not None else have_gpu:
        report["measured"] = _measure(spec, name, params, built, M, N, K, layout, run_as, peaks)
    return report


def _measure(spec, name, params, built, M, N, K, layout, run_as, peaks) -> dict:
    from .. import bench  # the bench (above the library) measures; the report itself needs no GPU
    from . import probe

    rows = bench.measure([(name, params)], M, N, K, layout)
    cub, ours = rows[0], rows[1]
    return {"tflops": ours.tflops, "cublas_tflops": cub.tflops, "ratio": ours.ratio,
            "rel_err": ours.rel_err, "fraction_of_peak": ours.tflops / roofline.compute_peak(name, peaks, params),
            "driver_blocks_per_sm": probe.driver_occupancy(spec, spec.compiled_params(built), run_as)}


def render(report: dict, console) -> None:
    """Print ``report`` as rich tables."""
    from rich.table import Table

    r, res, occ = report, report["resources"], report["occupancy"]
    M, N, K = r["shape"]
    runs = r.get("kernel_layout", r["layout"])
    first = "A" if runs[0] != r["layout"][0] else "B"
    how = f"{r['layout']}" if runs == r["layout"] else f"{r['layout']}, run as {runs} on {first} transposed first"
    console.rule(f"[bold]{r['kernel']}[/bold] on {M}x{N}x{K} ({how}), compiled for {r['arch']}")
    console.print(f"{r['summary']}  [dim](follows: {r['source']}; docs/sources.md)[/dim]")
    console.print(f"params {r['params']}")
    if r.get("built_minb") is not None:
        console.print(f"  built with minb {r['built_minb']}: on {r['arch']} this build holds that many blocks an SM "
                      f"without spills, so dispatch asks ptxas for them (builds.ARCH_MINB)")
    t = Table(title="Resources and occupancy (Memory and data locality §4.7)")
    for c in ("threads", "tile", "registers", "smem B (static+dyn)", "spills B", "blocks/SM", "warps/SM", "limited by"):
        t.add_column(c)
    t.add_row(str(res["threads"]), "x".join(map(str, res["tile"])), str(res["registers"]),
              f"{res['static_smem']}+{res['dynamic_smem']}", str(res["spill_bytes"]), str(occ["blocks"]),
              f"{occ['warps']} ({100 * occ['fraction']:.0f}%)", occ["limiter"])
    console.print(t)
    console.print("  blocks each resource allows: " + ", ".join(f"{k} {v}" for k, v in occ["by"].items())
                  + f"  [dim]({occ['limits']})[/dim]")
    if r["banks"]:
        t = Table(title="Shared memory: wavefronts per warp-wide access (GEMM illustrated §5.1; refined model: "
                  "measured on Hopper)")
        for c in ("access", "op", "bits", "requests/block", "classic model", "Hopper model", "conflict-free"):
            t.add_column(c)
        for b in r["banks"]:
            t.add_row(b["access"], b["op"], str(b["width_bits"]), str(b["requests_per_block"]),
                      f"{b['classic_per_request']:.2f}", f"{b['hopper_per_request']:.2f}",
                      f"{b['hopper_ideal_per_request']:.2f}")
        console.print(t)
    s = r["sass"]
    t = Table(title="SASS main loop (nvdisasm; static counts, edge path included)")
    for c in ("instructions", "FFMA", "FFMA share", "LDS", "LDG / LDGSTS", "STS", "BAR", "reuse hits", f"reg-bank conflicts ({s['bank_model']})"):
        t.add_column(c)
    pick = lambda base: ", ".join(f"{k.split('.')[1]}b x{v}" for k, v in sorted(s["mix"].items()) if k.startswith(base + ".")) or "-"
    glob = " / ".join(x for x in (pick("LDG"), pick("LDGSTS")) if x != "-") or "-"
    t.add_row(str(s["loop_instructions"]), str(s["ffma"]), f"{100 * s['ffma_share']:.1f}%", pick("LDS"), glob,
              pick("STS"), str(s["mix"].get("BAR", 0)), f"{s['reuse_hits']}/{s['ffma_sources']}",
              str(s["register_bank_conflicts"]))
    console.print(t)
    if s.get("shared_loads"):
        console.print(f"  shared loads read fewer than {sass.LATE_LOAD} instructions later: "
                      f"[bold]{s['late_shared_loads']}[/bold] of {s['shared_loads']} (nearest {s['nearest_shared_load_use']}); "
                      f"with two warps a scheduler each such load stalls its warp (docs/perf-notes.md)")
    if s.get("tensor_core_mma"):
        console.print(f"  tensor-core mma instructions in the main loop: [bold]{s['tensor_core_mma']}[/bold] "
                      f"(the products; the FFMA columns and the issue ceiling apply to the FFMA kernels)")
    else:
        console.print(f"  issue ceiling: FFMA / (instructions + register-bank stalls) = "
                      f"[bold]{100 * s['issue_ceiling']:.1f}%[/bold] of the FP32 peak (one warp instruction "
                      f"per cycle per scheduler); with the \"hopper\" bank model ({s['hopper_bank_conflicts']} "
                      f"stalls, fitted to H100 timings): [bold]{100 * s['hopper_issue_ceiling']:.1f}%[/bold]")
    rf = r["roofline"]
    t = Table(title=f"Roofline (Memory and data locality §4.1-4.2), peaks measured on {rf['gpu']}")
    for c in ("GFLOP", "min MB", "FLOP/B", "tile FLOP/B", "compute floor us", "DRAM floor us", "L2 floor us", "bound", "attainable TFLOPS"):
        t.add_column(c)
    t.add_row(f"{rf['flops'] / 1e9:.1f}", f"{rf['min_bytes'] / 1e6:.1f}", f"{rf['intensity']:.1f}",
              f"{rf['tile_intensity']:.1f}", f"{rf['compute_floor_us']:.1f}", f"{rf['dram_floor_us']:.1f}",
              f"{rf['l2_floor_us']:.1f}", rf["bound"], f"{rf['attainable_tflops']:.1f}")
    console.print(t)
    if "measured" in r:
        m = r["measured"]
        console.print(f"[bold]measured[/bold]: {m['tflops']:.1f} TFLOPS = {100 * m['fraction_of_peak']:.0f}% of peak, "
                      f"{m['ratio']:.2f}x cuBLAS ({m['cublas_tflops']:.1f}); rel. error {m['rel_err']:.1e}; "
                      f"driver occupancy {m['driver_blocks_per_sm']} blocks/SM")
    else:
        console.print("[yellow]Not measured (no GPU here, or --no-measure): the timed run and the "
                      "driver's occupancy need a GPU.[/yellow]")
