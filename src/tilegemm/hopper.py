"""The Hopper tensor-core path's plan (precision tf32x3 / tf32 on sm_90, a single product): whether a
GPU runs it, which operands are copied into 16-byte aligned rows for TMA, and the tile height and
split over K from a predicted time.  Used by dispatch (what runs) and bench (what it records)."""

from __future__ import annotations

from . import registry
from .access import COPY_LIMIT, copy_floats, stored_views


def hopper_tensor_cores(props) -> bool:
    """Whether tensor-core calls on this GPU run the Hopper kernels (rung 10's for tf32x3,
    wgmma_tf32.cu for tf32: wgmma and TMA need sm_90a)."""
    return f"sm_{props.major}{props.minor}a" in registry.WGMMA_FAMILY.archs


# The Hopper path's time, in microseconds, for the plan below: a block (one an SM) takes
# WGMMA_TILE_US a tile plus WGMMA_K_TILE_US per k tile of 32 on a 128-row tile, a 64-row tile (one
# consumer warpgroup) WGMMA_ROW_TIME of that; split-K adds the reduction, a launch and a pass over
# the planes and D.  Fitted (least squares on relative error) to the 17 timings, of 110, of rung
# 10's persistent kernel whose operands were read as stored (128- and 64-row tiles, split and not,
# on 40 shapes of the seed-411 draw and 8 fixed ones): 2.3% mean error (the constants before the
# walk, 3.5 and 1.24: 7.1%); experiments/...-2026-11-24-r10-persistent.json, docs/model.md.
WGMMA_TILE_US, WGMMA_K_TILE_US = 1.64, 1.29
WGMMA_ROW_TIME = {128: 1.0, 64: 0.70}
WGMMA_REDUCE_US, WGMMA_REDUCE_BYTES_PER_US = 3.0, 2.5e6


def _time(M: int, N: int, K: int, sms: int, bm: int, bn: int, splits: int, tile_us: float,
          k_tile_us: float, bk: int) -> tuple[float, int, int]:
    """(microseconds, splits, k_split) of bm x bn tiles split ``splits`` ways over K (k tiles of bk; k_split
    rounded up to whole k tiles, so the splits may come out fewer), one block an SM at a time."""
    k_split = -(-(-(-K // splits)) // bk) * bk
    splits = -(-K // k_split)
    blocks = -(-M // bm) * -(-N // bn) * splits
    t = -(-blocks // sms) * (tile_us + k_split // bk * k_tile_us)
    if splits > 1:
        t += WGMMA_REDUCE_US + 4.0 * M * N * (splits + 1) / WGMMA_REDUCE_BYTES_PER_US
    return t, splits, k_split


def _least(K: int, options) -> tuple:
    """(option, splits, k_split) of the least predicted time over ``options`` ((option, its time as a
    function of the split count)), s splits where K / s >= 256; the first of equals (within 2%) in the
    options' order, fewer splits first."""
    best = None
    for option, time in options:
        for s in range(1, 129):
            if s > 1 and K // s < 256:
                break
            t, splits, k_split = time(s)
            if best is None or t < best[0] * 0.98:
                best = (t, option, splits, k_split)
    return best[1:]


# the tiles an SM (of one split) from which rung 10's blocks walk tiles; below, a block a tile
WGMMA_WALK_FROM = 3


def wgmma_grid(tiles: int, sms: int, tma: bool = True) -> tuple[int, int, int]:
    """Rung 10's grid for one split over K.  Persistent (a block an SM, each walking tiles x,
    x + blocks, ...: 10_wgmma_tf32x3.cu) where there are at least WGMMA_WALK_FROM tiles an SM: the
    next tile's copies overlap the last one's stores (measured +2-20% at 3-35 tiles an SM, most at
    short K).  Fewer, a block a tile: with one to three tiles an SM the walk measured 3-6% slower at
    short K.  A block a tile too where the producer copies tiles by cp.async (``tma`` false: its
    consumers have no registers to spare for the walk)."""
    return (sms if tma and tiles >= WGMMA_WALK_FROM * sms else tiles, 1, 1)


def wgmma_time(M: int, N: int, K: int, sms: int, bm: int, splits: int) -> tuple[float, int, int]:
    """(predicted microseconds, splits, k_split) of rung 10's kernel on bm x 128 tiles split ``splits``
    ways over K."""
    return _time(M, N, K, sms, bm, 128, splits, WGMMA_TILE_US, WGMMA_K_TILE_US * WGMMA_ROW_TIME[bm],
                 registry.WGMMA_FAMILY.defaults["bk"])


def wgmma_plan(M: int, N: int, K: int, sms: int = 132, rows: tuple = (128, 64)) -> tuple[int, int, int]:
    """(bm, splits, k_split) of the Hopper tensor-core path: the tile height (128, or 64 for products
    whose rows leave 128-row tiles empty or too few) and its split over K, whichever ``wgmma_time``
    predicts fastest (``_least``).  ``rows``: the tile heights allowed (64 needs TMA)."""
    return _least(K, [(bm, lambda s, bm=bm: wgmma_time(M, N, K, sms, bm, s)) for bm in rows])


# precision "tf32" (wgmma_tf32.cu, 128 x bn tiles): a block's fixed cost (not measured yet: rung 10's,
# less its split) and its time per k tile of 32, from 4096^3 NN (370 TFLOPS on 128 x 256 tiles, 277 on
# 128 x 128: four and eight rounds of 128 k tiles; experiments/...-2026-11-23-tf32-probe-b.json)
TF32_TILE_US = 3.0
TF32_K_TILE_US = {256: 0.72, 128: 0.48}
TF32_BK = 32  # wgmma_tf32.cu's k tile: a split starts at a multiple of it


def tf32_plan(M: int, N: int, K: int, sms: int = 132) -> tuple[int, int, int]:
    """(bn, splits, k_split) of precision "tf32" on Hopper: 128 x 256 tiles, or 128 x 128 where those
    are too few or half empty, split over K as ``wgmma_plan`` splits."""
    return _least(K, [(bn, lambda s, bn=bn: _time(M, N, K, sms, 128, bn, s, TF32_TILE_US, TF32_K_TILE_US[bn], TF32_BK))
                      for bn in (256, 128)])


# the most floats of one operand the Hopper tensor-core path copies into aligned rows (1 GiB); a
# larger unaligned operand is copied tile by tile by the kernel's producer (cp.async) instead
PACK_LIMIT = COPY_LIMIT


def wgmma_pack(aligned: tuple, views: tuple) -> int | None:
    """Which operands the Hopper tensor-core path copies into 16-byte aligned rows before rung 10's
    kernel reads them by TMA: a bit mask (1: A, 2: B) of those not ``aligned`` (``views``: their
    access.stored_views); None where such an operand's copy would hold more than PACK_LIMIT floats, and the
    kernel's producer copies the tiles with cp.async instead."""
    if any(not ok and copy_floats(v) > PACK_LIMIT for ok, v in zip(aligned, views)):
        return None
    return sum(1 << i for i, ok in enumerate(aligned) if not ok)


def wgmma_config(layout: str, M: int, N: int, K: int, aligned: tuple, sms: int = 132) -> dict:
    """What rung 10's kernel runs for a call on Hopper: "pack" (``wgmma_pack``: the operands copied
    into aligned rows, None where the producer copies tiles by cp.async) and ``wgmma_plan``'s "bm",
    "splits", "k_split" (64-row tiles need TMA).  Used by dispatch (what runs) and bench (what it
    records: ``wgmma_record``)."""
    pack = wgmma_pack(aligned, stored_views(layout, M, N, K))
    bm, splits, k_split = wgmma_plan(M, N, K, sms, (128, 64) if pack is not None else (128,))
    return {"pack": pack, "bm": bm, "splits": splits, "k_split": k_split}


def wgmma_record(c: dict) -> dict:
    """The config a results file records for a ``wgmma_config``."""
    return {"bm": c["bm"], "splits": c["splits"], "pack": c["pack"] or 0, "tg_tma": int(c["pack"] is not None)}


def tf32_operands(layout: str, M: int, N: int, K: int, aligned: tuple) -> dict | None:
    """How precision "tf32" (wgmma_tf32.cu) reads the call's operands: {"swap": the kernel computes
    C^T = B^T A^T (its A is the call's B), "p_mn": the kernel's A is M-major (read into registers),
    "a", "b": how the kernel's A and B get to it: "stored" (as they are: rows 16-byte aligned),
    "copy" (into aligned rows, pack.cu) or "transpose" (into K-major rows, pack.cu's pack_t)}.  The
    kernel's B must be K-major, its A either: NT and TT need no copy, NN swaps (B, stored N-major, is
    the register operand); TN transposes the smaller operand.  None where a copy would hold more than
    PACK_LIMIT floats (rung 10's kernel runs it then).  ``aligned``: whether each operand's rows are
    16-byte aligned as stored."""
    kmajor = (layout[0] == "N", layout[1] == "T")
    if layout == "TN":  # both M/N-major: transpose the smaller; the other is the register operand
        swap = M < N
    else:
        swap = layout == "NN"
    order = (1, 0) if swap else (0, 1)  # the call's operand that is the kernel's A, then its B
    rows = (M, N)
    hows = []
    for kernel_op, i in enumerate(order):
        if kernel_op == 1 and not kmajor[i]:
            how, floats = "transpose", copy_floats((rows[i], K))
        else:
            how, floats = ("stored" if aligned[i] else "copy"), copy_floats((rows[i], K) if kmajor[i] else (K, rows[i]))
        if how != "stored" and floats > PACK_LIMIT:
            return None
        hows.append(how)
    return {"swap": int(swap), "p_mn": int(not kmajor[order[0]]), "a": hows[0], "b": hows[1]}


def tf32_config(layout: str, M: int, N: int, K: int, aligned: tuple, sms: int = 132) -> dict | None:
    """What precision "tf32" runs on Hopper for a call: ``tf32_operands``'s choices, the kernel's M
    and N ("Mk", "Nk": swapped with "swap"), and ``tf32_plan``'s tile width and split ("bn",
    "splits", "k_split"); None where rung 10's kernel runs it.  Used by dispatch (what runs) and
    bench (what it records: ``tf32_record``)."""
    ops = tf32_operands(layout, M, N, K, aligned)
    if ops is None:
        return None
    Mk, Nk = (N, M) if ops["swap"] else (M, N)
    bn, splits, k_split = tf32_plan(Mk, Nk, K, sms)
    return {**ops, "Mk": Mk, "Nk": Nk, "bn": bn, "splits": splits, "k_split": k_split}


def tf32_record(c: dict) -> dict:
    """The config a results file records for a ``tf32_config``."""
    return {"bn": c["bn"], "splits": c["splits"], "swap": c["swap"], "copies": f"{c['a']}/{c['b']}"}
