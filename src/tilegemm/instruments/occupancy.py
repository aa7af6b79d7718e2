"""Theoretical occupancy (seed 004 §4.7): how many blocks fit on one SM, and what limits them.

Each resource alone allows some number of resident blocks; the smallest wins:
- threads: max threads per SM // threads per block (rounded up to whole warps);
- registers: a warp gets ``regs x 32`` registers rounded up to ``reg_alloc_unit``; the register
  file is split over ``reg_partitions`` sub-partitions, so the warps that fit are counted per
  sub-partition, then blocks are whole multiples of the block's warps;
- shared memory: each block takes its static + dynamic bytes rounded up to ``smem_alloc_unit``
  plus ``smem_reserved`` bytes the system keeps per block;
- blocks: the hardware cap on resident blocks per SM.
The allocation rules come from ``Limits`` (queried on a GPU, or per compute capability); seed
004's "device D" uses exact allocation (``SEED004_DEVICE_D``).  The GPU tests check the result
against the driver's ``cuOccupancyMaxActiveBlocksPerMultiprocessor``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import Limits

# Seed 004 §4.7's device D: 1536 threads, 16384 registers and 16 KB of shared memory per SM, at
# most 8 blocks per SM, every resource given out exactly (no allocation units, nothing reserved).
SEED004_DEVICE_D = Limits(
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
