"""The kernels tilegemm knows: each a ``.cu`` file plus its parameters and their constraints.

Constraints are declared here once, in Python, and used by everything that needs them: the launch
path (errors), the tuner (pruning) and the kernel build (passed as defines; the kernels also
``static_assert`` the ones they rely on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import compiler
from .errors import ConfigError

LAYOUTS = ("NN", "NT", "TN", "TT")


@dataclass(frozen=True)
class Limits:
    """Per-device limits the constraints need; from the device query, or a table by arch."""

    smem_per_block_optin: int
    smem_per_sm: int
    regs_per_sm: int
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32

    @classmethod
    def for_arch(cls, arch: str) -> "Limits":
        arch = compiler.normalize_arch(arch)
        base = arch.rstrip("af")
        # unknown (newer) archs get the sm_90 table, the closest we have measured
        return _ARCH_LIMITS.get(base, _ARCH_LIMITS["sm_90"])

    @classmethod
    def from_props(cls, props) -> "Limits":
        return cls(
            smem_per_block_optin=props.smem_per_block_optin,
            smem_per_sm=props.smem_per_sm,
            regs_per_sm=props.regs_per_sm,
            max_threads_per_block=props.max_threads_per_block,
            max_threads_per_sm=props.max_threads_per_sm,
            max_blocks_per_sm=props.max_blocks_per_sm,
        )


# CUDA C Programming Guide, "Technical Specifications per Compute Capability".
_ARCH_LIMITS = {
    "sm_80": Limits(163 * 1024, 164 * 1024, 65536, 1024, 2048, 32),
    "sm_86": Limits(99 * 1024, 100 * 1024, 65536, 1024, 1536, 16),
    "sm_89": Limits(99 * 1024, 100 * 1024, 65536, 1024, 1536, 24),
    "sm_90": Limits(227 * 1024, 228 * 1024, 65536, 1024, 2048, 32),
}


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
    aligned16: bool = False  # needs 16-byte aligned operands (float4 path)
    entry: str = "tilegemm_kernel"
    seed: str = ""

    def params(self, overrides: dict | None = None) -> dict:
        p = dict(self.defaults)
        for k, v in (overrides or {}).items():
            if k not in p:
                raise ConfigError(
                    f"{self.name} has no parameter {k!r}; its parameters are {sorted(p)}"
                )
            p[k] = int(v)
        return p

    def violations(self, params: dict, limits: Limits) -> list[str]:
        return [c.text for c in self.constraints if not c.check(params, limits)]

    def check(self, params: dict, limits: Limits) -> None:
        bad = self.violations(params, limits)
        if bad:
            raise ConfigError(
                f"{self.name} with {params} breaks: " + "; ".join(bad)
            )

    def defines(self, params: dict, layout: str = "NN") -> dict:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        d = {k.upper(): v for k, v in params.items()}
        d["TG_TRANS_A"] = int(layout[0] == "T")
        d["TG_TRANS_B"] = int(layout[1] == "T")
        return d

    def compile(self, params: dict | None = None, layout: str = "NN", arch=None,
                use_cache: bool = True) -> compiler.CompiledKernel:
        p = self.params(params)
        arch = compiler.normalize_arch(arch)
        self.check(p, Limits.for_arch(arch))
        return compiler.compile_file(
            self.file, entry=self.entry, defines=self.defines(p, layout), arch=arch,
            use_cache=use_cache,
        )

    def grid(self, M: int, N: int, params: dict) -> tuple[int, int, int]:
        bm, bn = self.tile(params)
        return ((N + bn - 1) // bn, (M + bm - 1) // bm, 1)


RUNGS: dict[str, KernelSpec] = {}


def _register(spec: KernelSpec) -> KernelSpec:
    RUNGS[spec.name] = spec
    return spec


_register(KernelSpec(
    name="01_naive",
    file="01_naive.cu",
    summary="one thread per output element, operands straight from global memory",
    seed="004 Fig. 4.3; 002 §1",
    defaults={"block_x": 16, "block_y": 16},
    block=lambda p: (p["block_x"], p["block_y"], 1),
    tile=lambda p: (p["block_y"], p["block_x"]),
    constraints=(
        Constraint("block_x * block_y <= max threads per block",
                   lambda p, lim: p["block_x"] * p["block_y"] <= lim.max_threads_per_block),
        Constraint("block_x >= 1 and block_y >= 1", lambda p, lim: min(p["block_x"], p["block_y"]) >= 1),
    ),
))

_register(KernelSpec(
    name="02_smem_tiled",
    file="02_smem_tiled.cu",
    summary="TILE x TILE shared-memory tiles, barriers, zero-filled edges",
    seed="004 Fig. 4.16, 4.20, §4.7",
    defaults={"tile": 16},
    block=lambda p: (p["tile"], p["tile"], 1),
    tile=lambda p: (p["tile"], p["tile"]),
    smem=lambda p: 2 * p["tile"] * p["tile"] * 4,
    constraints=(
        Constraint("tile * tile <= max threads per block",
                   lambda p, lim: p["tile"] ** 2 <= lim.max_threads_per_block),
        Constraint("2 * tile^2 * 4 bytes <= shared memory per block",
                   lambda p, lim: 8 * p["tile"] ** 2 <= lim.smem_per_block_optin),
        Constraint("tile >= 1", lambda p, lim: p["tile"] >= 1),
    ),
))


def get(name: str) -> KernelSpec:
    try:
        return RUNGS[name]
    except KeyError:
        raise ValueError(
            f"kernel={name!r} is not a tilegemm kernel; choose one of {sorted(RUNGS)}"
        ) from None


def best_order() -> list[str]:
    """Kernel names from the fastest expected to the slowest (the default pick is the first that fits)."""
    return sorted(RUNGS, reverse=True)
