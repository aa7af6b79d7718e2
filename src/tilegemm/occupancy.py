"""Theoretical occupancy (Memory and data locality §4.7): how many blocks fit on one SM, and what
limits them; and the per-device limits behind it.

Each resource alone allows some number of resident blocks; the smallest wins:
- threads: max threads per SM // threads per block (rounded up to whole warps);
- registers: a warp gets ``regs x 32`` registers rounded up to ``reg_alloc_unit``; the register
  file is split over ``reg_partitions`` sub-partitions, so the warps that fit are counted per
  sub-partition, then blocks are whole multiples of the block's warps;
- shared memory: each block takes its static + dynamic bytes rounded up to ``smem_alloc_unit``
  plus ``smem_reserved`` bytes the system keeps per block;
- blocks: the hardware cap on resident blocks per SM.
The allocation rules come from ``Limits`` (queried on a GPU, or per compute capability); the
textbook's "device D" uses exact allocation (``TEXTBOOK_DEVICE_D``).  The GPU tests check the
result against the driver's ``cuOccupancyMaxActiveBlocksPerMultiprocessor``.  The kernel
constraints (registry), the tuner, the selection model and the instruments all use this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from .compiler import normalize_arch


@dataclass(frozen=True)
class Limits:
    """Per-device limits the constraints need; from the device query, or a table by arch."""

    smem_per_block_optin: int
    smem_per_sm: int
    regs_per_sm: int
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    # allocation rules of sm_80 .. sm_90
    reg_alloc_unit: int = 256  # registers are given to a warp in units of this many
    reg_partitions: int = 4  # the register file is split over this many SM sub-partitions
    smem_alloc_unit: int = 128  # shared memory is given to a block in units of this many bytes
    smem_reserved: int = 1024  # bytes the system reserves per resident block

    @classmethod
    def for_arch(cls, arch: str) -> "Limits":
        base = normalize_arch(arch).rstrip("af")
        # newer archs get the sm_90 table, the closest we have measured
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
            smem_reserved=getattr(props, "smem_reserved", 1024),
        )


# CUDA C Programming Guide, "Technical Specifications per Compute Capability".
_ARCH_LIMITS = {
    "sm_80": Limits(163 * 1024, 164 * 1024, 65536, 1024, 2048, 32),
    "sm_86": Limits(99 * 1024, 100 * 1024, 65536, 1024, 1536, 16),
    "sm_89": Limits(99 * 1024, 100 * 1024, 65536, 1024, 1536, 24),
    "sm_90": Limits(227 * 1024, 228 * 1024, 65536, 1024, 2048, 32),
}

# Memory and data locality §4.7's device D: 1536 threads, 16384 registers and 16 KB of shared memory
# per SM, at most 8 blocks per SM, every resource given out exactly (no allocation units, nothing
# reserved).
TEXTBOOK_DEVICE_D = Limits(
    smem_per_block_optin=16 * 1024, smem_per_sm=16 * 1024, regs_per_sm=16384,
    max_threads_per_block=512, max_threads_per_sm=1536, max_blocks_per_sm=8,
    reg_alloc_unit=1, reg_partitions=1, smem_alloc_unit=1, smem_reserved=0,
)


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    blocks: int  # resident blocks per SM
    warps: int  # resident warps per SM
    limiter: str  # "threads" | "registers" | "shared memory" | "blocks"
    by: dict  # the limit each resource alone would allow

    def fraction(self, limits: Limits) -> float:
        return self.warps / (limits.max_threads_per_sm // 32)


def occupancy(threads: int, registers: int, smem_bytes: int, limits: Limits) -> Occupancy:
    """Blocks per SM for blocks of ``threads`` threads using ``registers`` per thread and
    ``smem_bytes`` of shared memory (static + dynamic) per block."""
    if threads < 1 or threads > limits.max_threads_per_block:
        raise ValueError(f"threads={threads} is outside 1..{limits.max_threads_per_block}")
    if registers < 0 or smem_bytes < 0:
        raise ValueError(f"registers={registers} and smem_bytes={smem_bytes} must be >= 0")
    warps = -(-threads // 32)
    regs_per_warp = _round_up(max(registers, 1) * 32, limits.reg_alloc_unit)
    per_partition = limits.regs_per_sm // limits.reg_partitions
    warps_by_regs = (per_partition // regs_per_warp) * limits.reg_partitions
    smem = _round_up(smem_bytes, limits.smem_alloc_unit) + limits.smem_reserved
    by = {
        "threads": limits.max_threads_per_sm // (warps * 32),
        "registers": warps_by_regs // warps,
        "shared memory": limits.smem_per_sm // smem if smem else limits.max_blocks_per_sm,
        "blocks": limits.max_blocks_per_sm,
    }
    limiter = min(by, key=lambda k: by[k])
    blocks = by[limiter]
    return Occupancy(blocks, blocks * warps, limiter, by)
