"""What the command line prints: its rich tables (results, compiled kernels), failure lines and
progress bar, on one console.  Nothing here parses arguments or measures anything."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .errors import ConfigError
from .parsing import format_shape

console = Console()


def add_columns(table: Table, cols, left=("kernel", "shape", "layout", "what changed")) -> None:
    for col in cols:
        if col in ("kernel", "shape"):  # identifiers: never truncated
            table.add_column(col, no_wrap=True, min_width=15 if col == "kernel" else 14)
        else:
            table.add_column(col, justify="left" if col in left else "right")


def fmt(x, spec="{:.2f}"):
    return "-" if x is None or x != x else spec.format(x)


def results_table(rows, title) -> Table:
    table = Table(title=title)
    add_columns(table, ("kernel", "shape", "layout", "TFLOPS", "% of cuBLAS", "ms", "rel. error"))
    for r in rows:
        table.add_row(r.kernel, format_shape(r.M, r.N, r.K, r.batch), r.layout, fmt(r.tflops),
                      fmt(100 * r.ratio, "{:.1f}%"), fmt(r.ms, "{:.3f}"), fmt(r.rel_err, "{:.1e}"))
    return table


def report_failures(rows, tolerances) -> int:
    failed = [r for r in rows if not r.rel_err < tolerances[r.precision] and not r.refused]
    for r in failed:
        console.print(f"[red]FAILED[/red] {r.kernel} {r.config or ''} {format_shape(r.M, r.N, r.K, r.batch)} "
                      f"{r.layout}: relative error {r.rel_err:.2e} >= {tolerances[r.precision]:.0e}")
    return 1 if failed else 0


def static_table(names, arch: str) -> Table:
    """What needs no GPU: each kernel compiled for ``arch``, its resources and occupancy."""
    from .occupancy import Limits, occupancy

    limits = Limits.for_arch(arch)
    table = Table(title=f"Kernels compiled for {arch} (NVRTC; no GPU needed)")
    add_columns(table, ("kernel", "regs", "smem B", "spills B", "occupancy/SM", "what changed"))
    from .bench import kernel_name, static_config
    for name in names:
        spec, params = static_config(*kernel_name(name))
        try:
            r = spec.compile(params, arch=arch).resources
        except ConfigError as exc:  # a kernel this arch cannot run (rung 10 needs sm_90a)
            table.add_row(name, "-", "-", "-", str(exc), spec.summary)
            continue
        occ = occupancy(spec.threads(params), r.registers, r.shared_bytes + spec.smem(params), limits)
        table.add_row(name, str(r.registers), str(r.shared_bytes + spec.smem(params)), str(r.spills),
                      f"{occ.blocks} x {spec.threads(params)} thr ({100 * occ.fraction(limits):.0f}%, {occ.limiter})",
                      spec.summary)
    return table


def progress_bar():
    from rich.progress import Progress

    return Progress(console=console, transient=True)
