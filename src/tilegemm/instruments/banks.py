"""Shared-memory bank-conflict simulator (GEMM illustrated §5.1; docs/sources.md).

Shared memory has 32 banks of 4-byte words; byte address ``a`` lives in bank ``(a // 4) % 32``.
One wavefront (a "memory transaction" in the article) serves at most one word per bank, and any
number of threads reading the same word (a broadcast).  For one warp-wide instruction of 32, 64
or 128 bits per thread, given each thread's byte address, this module counts the wavefronts.

Two models:
- ``"classic"``: GEMM illustrated's rules.  LDS.32 is served for the whole warp at once; LDS.64 in 2 phases of
  16 threads (0-15, 16-31); LDS.128 in 4 phases of 8 threads.  Within a phase the wavefronts are
  the largest number of distinct words any one bank must serve; the phases add up.
- ``"hopper"``: the classic rules refined by Nsight Compute measurements on an H100 and an H200
  (sm_90; benchmarks/results/*-banks.json, docs/perf-notes.md).  Stores, and loads of 32 bits,
  follow the classic rules exactly.  Loads of 64 and 128 bits take their phases in pairs (the two 16-lane
  halves for LDS.64; quarters 0-1 and 2-3 for LDS.128): a pair with no two distinct words in one
  bank is served in one wavefront when each phase reads at most two distinct addresses, or when
  the two phases read disjoint words that together fill all 32 banks once; any other pair costs
  what the classic rules say for its two phases.  So a quarter-warp broadcast (the A fragment of a
  4 x 8 warp) costs half a wavefront: such an LDS.128 takes 2, not 4; quarters reading four
  float4s each, the two of a pair 64 bytes apart (rung 8's A fragment, 16 x 2 warps), take 1 per
  pair; other pairs of quarters with three or more float4s are not merged.

A lane with address ``None`` is inactive (predicated off).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

BANKS = 32
WORD = 4
MODELS = ("classic", "hopper")


def _check(addrs: Sequence[int | None], width: int) -> None:
    if width not in (4, 8, 16):
        raise ValueError(f"width must be 4, 8 or 16 bytes (LDS.32/64/128), got {width!r}")
    if len(addrs) != 32:
        raise ValueError(f"a warp has 32 lanes; got {len(addrs)} addresses")
    for lane, a in enumerate(addrs):
        if a is not None and (a < 0 or a % width):
            raise ValueError(f"lane {lane}: byte address {a} is not a non-negative multiple of {width}")


def _words(addr: int, width: int) -> range:
    return range(addr // WORD, (addr + width) // WORD)


def _max_per_bank(words: Iterable[int]) -> int:
    per_bank: dict[int, set] = defaultdict(set)
    for w in words:
        per_bank[w % BANKS].add(w)
    return max((len(s) for s in per_bank.values()), default=0)


def phases(width: int) -> int:
    """How many phases the classic rules split a warp into: 1, 2 or 4."""
    return width // WORD


@dataclass(frozen=True)
class Prediction:
    wavefronts: int  # shared-memory wavefronts (transactions) the instruction needs
    ideal: int  # what it would need with no bank conflicts, under the same model

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal

    @property
    def ways(self) -> float:
        """Wavefronts over the conflict-free ideal: 1.0 is conflict-free, 2.0 a 2-way conflict."""
        return self.wavefronts / self.ideal if self.ideal else 1.0


def predict(addrs: Sequence[int | None], width: int, model: str = "classic", store: bool = False) -> Prediction:
    """Wavefronts for one warp-wide shared-memory load (or ``store``) of ``width`` bytes per lane."""
    _check(addrs, width)
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    size = 32 // phases(width)
    per_phase = []  # (distinct addresses, distinct words, classic wavefronts) of each live phase
    for p in range(0, 32, size):
        active = {a for a in addrs[p:p + size] if a is not None}
        words = {w for a in active for w in _words(a, width)}
        per_phase.append((len(active), words, _max_per_bank(words)) if active else None)
    if model == "classic" or width == WORD or store:
        live = [x for x in per_phase if x]
        return Prediction(sum(x[2] for x in live), len(live))
    waves = ideal = 0
    for pair in zip(per_phase[0::2], per_phase[1::2]):
        live = [x for x in pair if x]
        # a pair merges when it is conflict-free and each phase reads <= 2 addresses, or when the
        # two phases read disjoint words that fill the 32 banks exactly once (one full wavefront)
        full = len(live) == 2 and len(live[0][1]) + len(live[1][1]) == len(live[0][1] | live[1][1]) == BANKS
        small = len(live) == 2 and (max(x[0] for x in live) <= 2 or full)
        if small and _max_per_bank(live[0][1] | live[1][1]) <= 1:
            waves += 1
        else:
            waves += sum(x[2] for x in live)
        ideal += 1 if small else len(live)
    return Prediction(waves, ideal)

