"""Theoretical occupancy (seed 004 §4.7): how many blocks fit on one SM, and what limits them."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Limits

REG_ALLOC_UNIT = 256  # registers are given to a warp in units of 256 (sm_50 .. sm_90)
SMEM_RESERVED = 1024  # bytes the system reserves per block (sm_80 and later)


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
    warps = -(-threads // 32)
    regs_per_warp = -(-max(registers, 1) * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    by = {
        "threads": limits.max_threads_per_sm // (warps * 32),
        "registers": limits.regs_per_sm // (regs_per_warp * warps),
        "shared memory": (limits.smem_per_sm // (smem_bytes + SMEM_RESERVED)) if smem_bytes else limits.max_blocks_per_sm,
        "blocks": limits.max_blocks_per_sm,
    }
    limiter = min(by, key=lambda k: by[k])
    blocks = by[limiter]
    return Occupancy(blocks, blocks * warps, limiter, by)
