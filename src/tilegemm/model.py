"""The candidates a cost model chooses among: tile configs of the family, each run one block per
tile (data-parallel), split over K with a reduction, split over K summed in the kernel (sk = 2) or
as stream-K (sk = 1).  Calibration (scripts/calibrate.py) times them on a random draw of shapes.
"""

from __future__ import annotations

# tile configs of the family, all with the cp.async pipeline (3 stages, bk = 8)
_PIPE = {"bk": 8, "swizzle": 8, "stages": 3}
TILES = {
    "256x128": {"bm": 256, "bn": 128, "tm": 16, "tn": 8, "ln": 2, "minb": 1, **_PIPE},
    "128x256": {"bm": 128, "bn": 256, "tm": 16, "tn": 8, "ln": 4, "minb": 1, **_PIPE},
    "128x128": {"bm": 128, "bn": 128, "tm": 16, "tn": 8, "ln": 8, "minb": 2, **_PIPE},
    "128x128w": {"bm": 128, "bn": 128, "tm": 8, "tn": 8, "ln": 4, "minb": 0, **_PIPE},
    "64x256": {"bm": 64, "bn": 256, "tm": 8, "tn": 16, "ln": 8, "minb": 0, **_PIPE},
    "64x128": {"bm": 64, "bn": 128, "tm": 8, "tn": 8, "ln": 8, "minb": 0, **_PIPE},
    "128x64": {"bm": 128, "bn": 64, "tm": 8, "tn": 8, "ln": 4, "minb": 0, **_PIPE},
    "64x64": {"bm": 64, "bn": 64, "tm": 4, "tn": 8, "ln": 8, "minb": 0, **_PIPE},
    "32x256": {"bm": 32, "bn": 256, "tm": 8, "tn": 16, "ln": 8, "minb": 0, **_PIPE},
}
SPLITS = (2, 4, 8, 16, 32)
SPLIT_TILES = ("128x128", "64x128", "64x64", "32x256")  # also run split over K
STREAM_K_TILES = ("256x128", "128x128", "128x128w")  # also run as stream-K
SUMMED_TILES = ("128x128", "64x128")  # also split over K and summed in the kernel


def candidates(M: int, N: int, K: int, count: int = 1, sms: int = 132) -> list[tuple[str, dict]]:
    """(name, config) of every candidate for this shape: each tile data-parallel; where the
    128 x 128 tiles fill fewer than four waves of two blocks per SM, the split-K, stream-K and
    summed variants too (splits leaving at least 128 of K each)."""
    out = [(name, {**cfg, "splits": 1}) for name, cfg in TILES.items()]
    tiles = -(-M // 128) * -(-N // 128) * count
    if tiles >= 8 * sms:
        return out
    splits = [s for s in SPLITS if K // s >= 128]
    for name in SPLIT_TILES:
        out += [(f"{name} split{s}", {**TILES[name], "splits": s}) for s in splits]
    for name in STREAM_K_TILES:
        out.append((f"{name} stream-K", {**TILES[name], "splits": 1, "sk": 1}))
    for name in SUMMED_TILES:
        out += [(f"{name} split{s} summed", {**TILES[name], "splits": s, "sk": 2}) for s in splits[:3]]
    return out
