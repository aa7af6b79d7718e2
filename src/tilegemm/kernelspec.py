"""What a kernel is to tilegemm: its ``.cu`` file, parameters and their declared constraints
(``KernelSpec``), and the precisions the kernels compute.  The kernels themselves are registered in
registry.py."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Callable

from . import access, compiler
from .errors import ConfigError
from .occupancy import Limits

LAYOUTS = ("NN", "NT", "TN", "TT")
# what a kernel computes: FP32 FFMAs, or tensor-core TF32 products in three passes (FP32 accuracy)
# or one (TF32); the family's "mma" parameter for each
PRECISIONS = {"fp32": 0, "tf32x3": 3, "tf32": 1}


@dataclass(frozen=True)
class Constraint:
    text: str  # shown in errors, e.g. "tile * tile <= 1024"
    check: Callable[[dict, Limits], bool]


@dataclass(frozen=True)
class KernelSpec:
    name: str  # "NN_name"
    file: str
    summary: str  # what changed from the rung before
    defaults: dict
    block: Callable[[dict], tuple[int, int, int]]
    tile: Callable[[dict], tuple[int, int]]  # (rows of C, cols of C) per block
    smem: Callable[[dict], int] = lambda p: 0  # dynamic shared memory per block, bytes
    constraints: tuple[Constraint, ...] = ()
    vec: bool = False  # takes TG_VEC: 4 = 16-byte loads/stores (aligned operands), 2 = 8-byte, 1 = 4-byte;
    # compile's vec may also give one width per operand, (A, B, D)
    row_classes: bool = False  # A's and B's width may also be 3 or 6 (access.ROW_CLASSES: tg_async.cuh's RowClassTile)
    linear_grid: bool = False  # 1-D grid of all tiles (the kernel maps block index -> tile)
    entry: str = "tilegemm_kernel"
    source: str = ""  # the document and section it follows (docs/sources.md)
    runtime: tuple = ()  # parameters passed at launch, not compiled in (e.g. split-K's "splits")
    waits: bool = False  # executes griddepcontrol.wait first, so it may be launched as a PDL dependent
    precision: str = "fp32"  # what a rung computes (PRECISIONS); the family's follows its "mma"
    extra: dict = dataclasses.field(default_factory=dict)  # fixed defines (e.g. TG_MMA_PASSES)
    archs: tuple = ()  # the only archs it compiles for (e.g. ("sm_90a",): Hopper-only PTX); () = any
    ptxas: Callable[[dict, str, object], tuple] = lambda p, layout, vec: ()  # ptxas options by params, layout, widths

    def target(self, arch) -> str:
        """The arch to compile for: ``arch`` (normalised), or for a kernel that needs an "a" variant
        (wgmma, setmaxnreg) that variant of the same GPU; ConfigError where it has none."""
        arch = compiler.normalize_arch(arch)
        if not self.archs or arch in self.archs:
            return arch
        if arch + "a" in self.archs:
            return arch + "a"
        raise ConfigError(f"{self.name} runs only on {', '.join(self.archs)} (Hopper: wgmma and TMA), not {arch}")

    def params(self, overrides: dict | None = None) -> dict:
        """The defaults with ``overrides`` applied; unknown names and values that are not integers
        raise ConfigError (no silent rounding of 3.5 to 3, no bools)."""
        if overrides is not None and not isinstance(overrides, dict):
            raise ConfigError(f"config must be a dict of parameter names to integers, got "
                              f"{type(overrides).__name__}")
        p = dict(self.defaults)
        for k, v in (overrides or {}).items():
            if k not in p:
                raise ConfigError(
                    f"config[{k!r}]: {self.name} has no parameter {k!r}; its parameters are {sorted(p)}"
                )
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise ConfigError(f"config[{k!r}] must be an integer, got {type(v).__name__} {v!r}")
            p[k] = int(v)
        return p

    def violations(self, params: dict, limits: Limits) -> list[str]:
        """The constraints ``params`` break, in declaration order.  A constraint that cannot even be
        evaluated (a division by a size an earlier constraint already rejected) counts as broken."""
        bad = []
        for c in self.constraints:
            try:
                ok = c.check(params, limits)
            except ArithmeticError:
                ok = False
            if not ok:
                bad.append(c.text)
        return bad

    def check(self, params: dict, limits: Limits, given: dict | None = None) -> None:
        """ConfigError naming every constraint ``params`` break; ``given``: the call's config, which
        the message names (``params`` are it with the defaults filled in)."""
        bad = self.violations(params, limits)
        if bad and given is not None:
            raise ConfigError(f"config={given!r} for {self.name} (the defaults filled in: {params}) breaks: "
                              + "; ".join(bad) + "; change config to meet them, or leave config=None")
        if bad:
            raise ConfigError(
                f"{self.name} with {params} breaks: " + "; ".join(bad)
            )

    def defines(self, params: dict, layout: str = "NN", vec: int = 4, wide: bool = False) -> dict:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        d = {**self.extra, **{k.upper(): v for k, v in params.items() if k not in self.runtime}}
        d["TG_TRANS_A"] = int(layout[0] == "T")
        d["TG_TRANS_B"] = int(layout[1] == "T")
        if self.vec:
            widths = (vec,) * 3 if isinstance(vec, int) else tuple(vec)
            by_rows = tuple(access.ROW_CLASSES) if self.row_classes else ()  # two widths by rows: A and B
            also = " (A and B also 3 or 6: two widths by rows)" if self.row_classes else ""
            if len(widths) != 3 or any(w not in (1, 2, 4) + (by_rows if i < 2 else ()) for i, w in enumerate(widths)):
                raise ValueError(f"vec must be 4, 2 or 1, or one of those per operand (A, B, D){also}, got {vec!r}")
            if len(set(widths)) == 1:
                d["TG_VEC"] = widths[0]
            else:  # per operand (tg_common.cuh)
                d.update(TG_VEC_A=widths[0], TG_VEC_B=widths[1], TG_VEC_D=widths[2])
            if wide:  # 64-bit copy offsets (tg_async.cuh): see needs_wide_offsets
                d["TG_OFF64"] = 1
        return d

    def tile_extent(self, params: dict) -> int:
        """The most rows or columns an operand tile of this kernel spans (bm, bn or bk)."""
        return max(*self.tile(params), int(params.get("bk", 32)))

    def compiled_params(self, params: dict) -> dict:
        """The parameters that select a cubin (runtime ones set to their defaults)."""
        return {k: (self.defaults[k] if k in self.runtime else v) for k, v in params.items()}

    def compile(self, params: dict | None = None, layout: str = "NN", arch=None,
                use_cache: bool = True, vec: int = 4, limits: "Limits | None" = None,
                wide: bool = False) -> compiler.CompiledKernel:
        p = self.params(params)
        arch = self.target(arch)
        self.check(p, limits or Limits.for_arch(arch))
        return compiler.compile_file(
            self.file, entry=self.entry, defines=self.defines(p, layout, vec, wide), arch=arch,
            use_cache=use_cache, ptxas=self.ptxas(p, layout, vec),
        )

    def threads(self, params: dict) -> int:
        x, y, z = self.block(params)
        return x * y * z

    def grid(self, M: int, N: int, params: dict) -> tuple[int, int, int]:
        bm, bn = self.tile(params)
        gm, gn = (M + bm - 1) // bm, (N + bn - 1) // bn
        return (gm * gn, 1, 1) if self.linear_grid else (gn, gm, 1)


def check_precision(precision) -> str:
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r} "
                         f"('fp32': FFMAs, the default; 'tf32x3': tensor cores at FP32 accuracy; "
                         f"'tf32': tensor cores with TF32's 10-bit mantissa)")
    return precision
