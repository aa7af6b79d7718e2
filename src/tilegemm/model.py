"""A cost model of the family's candidates: predict each one's time on a shape from what the shape
does to it (tiles, waves at the blocks that fit on an SM, k-iterations per block, the reduction or
hand-over), with a few constants per tile config fitted to measurements; pick the least.

Candidates: tile configs of the family (``TILES``), each run one block per tile (data-parallel), split over K with a
reduction, split and summed in the kernel (sk = 2) or as stream-K (sk = 1).

The model, in microseconds.  A tile config T has six constants: ``f`` (a block's fixed cost:
prologue, epilogue), ``a`` (one k-iteration of a block alone on an SM, bound by latency), ``b``
(the SM's time per k-iteration per resident block when several share it, bound by throughput),
``u`` and ``l`` (the share a k-iteration takes longer when an operand copied along its rows is read
4 bytes at a time: rows not 16-byte aligned, not copied; access.row_widths; ``u`` where the SM's
throughput binds, ``l`` where a lone block's latency does) and ``v`` (an SM's time per million
elements of the result stored 4 bytes at a time: its rows not 16-byte aligned; access.out_width).
An SM holding q blocks of i iterations each takes ``f + i * max(wl * a, wu * q * b)``, the max a
p-norm where the set holds ``mix`` (MIX), wu = 1 + u * s, wl = 1 + l * s, s = NARROW_SHARE[B's width] + NARROW_SHARE[A's width] * bm / bn
(``u`` and ``l`` were fitted on B's narrow reads, B's tile bn floats along its rows, A's bm; a table
without ``l`` takes ``u`` for it); the narrow stores add ``v * NARROW_SHARE[out width] * M * N *
count / (1e6 * SMs)`` to every candidate.  (In the NN calibrations a result's rows are misaligned
exactly where B's are, so ``v`` is told apart from ``u`` only where B is copied into aligned rows,
whose timings include the copy: docs/model.md.)
- data-parallel over ``blocks = tiles * splits``: each SM gets ceil(blocks / SMs) blocks, run
  ``r`` at a time (r = blocks per SM from the occupancy), the last round with what is left;
- split-K adds the reduction: ``red0 + red1 * (splits + 1) * M * N * count`` (reading the
  partials, writing D);
- stream-K (sk = 1): whole waves of whole tiles, then the rest's k-iterations shared by all
  r * SMs blocks, plus a hand-over ``hand`` per block that shares a tile (a tile's owner adds the
  partial sums of the others one after another);
- split-K summed in the kernel (sk = 2): launch by launch, as dispatch runs it (a launch holds whole
  tiles, no more blocks than r * SMs), each launch's blocks as data-parallel, plus ``summed * splits``;
- every launch costs ``launch``.
The constants are fitted to calibration measurements by calibration.py
(``python -m tilegemm.calibration fit FILE... [--small FILE...] --out TABLE``).  A model table holds
two sets: one for the bench's draw (at least 1024^3 multiply-adds, timed call by call) and one for
smaller products (timed from CUDA graphs: there the host takes longer per call than the GPU, and a
call-by-call timing would fit the host's cost).  It may hold a set per operand layout too (its
``layouts``: fitted to calibrations of that layout), which serves that layout's shapes, and its
stand-ins' (SET_STAND_INS), in the main set's domain.  ``set_for`` picks the set for a shape.  The main
and small products' sets keep their calibrations' residuals too, which correct a single NN product's
predictions where the constants are wrong the same way on nearby shapes (residuals.py).
"""

from __future__ import annotations

import math

from . import access, residuals

# tile configs of the family, all with the cp.async pipeline (3 stages, bk = 8)
_PIPE = {"bk": 8, "swizzle": 8, "stages": 3}
TILES = {
    "256x128": {"bm": 256, "bn": 128, "tm": 16, "tn": 8, "ln": 2, "minb": 1, **_PIPE},
    "128x256": {"bm": 128, "bn": 256, "tm": 16, "tn": 8, "ln": 4, "minb": 1, **_PIPE},
    "128x128": {"bm": 128, "bn": 128, "tm": 16, "tn": 8, "ln": 8, "minb": 2, **_PIPE},
    "128x128w": {"bm": 128, "bn": 128, "tm": 8, "tn": 8, "ln": 4, "minb": 0, **_PIPE},
    "64x256": {"bm": 64, "bn": 256, "tm": 8, "tn": 16, "ln": 8, "minb": 0, **_PIPE},
    "64x128": {"bm": 64, "bn": 128, "tm": 8, "tn": 8, "ln": 8, "minb": 0, **_PIPE},
    "128x64": {"bm": 128, "bn": 64, "tm": 8, "tn": 8, "ln": 8, "minb": 0, **_PIPE},
    "64x64": {"bm": 64, "bn": 64, "tm": 8, "tn": 4, "ln": 8, "minb": 0, **_PIPE},
    # two warps of 8 x 8 a thread: twice the FFMAs per shared-memory read of "64x64", four blocks an SM
    "64x64f": {"bm": 64, "bn": 64, "tm": 8, "tn": 8, "ln": 8, "minb": 4, **_PIPE},
    # "64x64f" with two k slices a block (gemm.cu KS): twice the warps a tile for products of few tiles, each
    # slice reading half of every k tile; one block per tile or split (the slices take SK = 0)
    "64x64s": {"bm": 64, "bn": 64, "tm": 8, "tn": 8, "ln": 8, "minb": 4, "ks": 2, **_PIPE},
    "32x256": {"bm": 32, "bn": 256, "tm": 8, "tn": 16, "ln": 8, "minb": 0, **_PIPE},
    # two warps of 4 x 4 a thread: for small products, where more blocks mean more SMs at work
    "32x32": {"bm": 32, "bn": 32, "tm": 4, "tn": 4, "ln": 8, "minb": 0, "bk": 16, "swizzle": 8, "stages": 2},
}
SPLITS = (2, 4, 8, 16, 32, 64, 128, 256)
SPLIT_TILES = ("128x128", "64x128", "128x64", "64x64", "64x64f", "64x64s", "32x256", "32x32")  # also run split over K
STREAM_K_TILES = ("256x128", "128x128", "128x128w", "64x64f", "128x64", "64x128")  # also run as stream-K
# Builds the GPU's calibrations never timed (the H200's did; its table ranks them), offered to single NN products by the
# main set at the driver's blocks per SM: 41 picks changed of 300 fresh NN shapes 1.075x -> 1.100x; TT 1.057x -> 1.045x
OFFERED_BUILDS = {"NVIDIA H100 80GB HBM3": {"128x64 stream-K": 3, "64x128 stream-K": 3}}
# run as stream-K also where there are 8 * SMs or more of 128 x 128 tiles (whole waves, stream-K sharing only the last): on
# 54 picks of a fresh draw that changed to stream-K when all four were offered there, against the data-parallel picks,
# 256 x 128 ran its 25 2.1% faster, 128 x 128 its 20 1.2%; 128 x 128w its 8 6.0% slower, 64 x 64f its one 8.5% (perf-notes)
WAVE_STREAM_K_TILES = ("256x128", "128x128")
SUMMED_TILES = ("128x128", "64x128", "128x64", "64x64", "64x64f", "32x32")  # also split over K and summed in the kernel
# summed in the kernel at up to SUMMED_MAX_SPLITS splits: on a probe of 16 long-K shapes
# with few tiles (four tiles split 8, 16 and 32 ways, both ways), summed at 16 splits was the fastest
# of the probe's 24 configs on 3 (by 2.6-6.4%); at 32 the sum was slower than the reduction kernel
# for 62 of 64 tile-shape pairs (docs/perf-notes.md)
SUMMED_MAX_SPLITS = 16
# Tiles of k slices (ks > 1) ranked only where a block's K is at most KS_MAX_K: the slices hide a short main loop's latency;
# on the 20 picks 64x64s made among 1900 fresh shapes (four layouts, H200), the picks without it ran 3-10% faster on 5 of
# the 6 whose blocks took more K, 1% slower on the 14 with less (docs/perf-notes.md).  Its constants are fitted on all K.
KS_MAX_K = 1024
GLOBALS = ("red0", "red1", "hand", "summed", "launch")
# A set's constant that blends a round's two bounds, (lat^p + thr^p)^(1/p), instead of taking the larger (a set
# without it: the max): few resident warps hide less of the latency than the max says (docs/model.md)
MIX = "mix"
RESIDUALS_LAYOUT = "NN"  # the layout of the main and small sets' calibrations, whose residuals correct them (residuals.py)
# A layout with no set of its own takes that of the layout whose B is read the same way, where the table has it
# (TT's B, as NT's, is copied 4 bytes at a time and transposed), with the main set's fitted u and l (STAND_IN_MAIN:
# NT reads nothing narrow, so its own stay at the fit's start; TT reads A narrow): measured, docs/model.md.
SET_STAND_INS, STAND_IN_MAIN = {"TT": "NT"}, (".u", ".l")
# Else it is ranked with the main set's constants (fitted to NN), each tile's time scaled by its measured time in that
# layout against NN, on the GPU measured: in TN the 16 x 8 tiles ran 4-7% slower; the 8 x 8 tiles' 3-8% speed-ups moved
# close calls to picks up to 20% slower (docs/model.md); a tile not listed keeps 1.0
LAYOUT_RATES = {("NVIDIA H100 80GB HBM3", "TN"): {"256x128": 1.05, "128x256": 1.06}}
LAYOUT_RATES_ON = True  # the switch that A/B runs turn off
SMALL_ONLY = ("32x32",)  # offered only for products below SMALL_MACS multiply-adds
SMALL_MACS = 1024**3  # the bench draw's smallest product (suites.DRAW), the small set's bound
# The share of the narrow-access costs ``u`` and ``l`` paid at each width (access.row_widths): 8-byte accesses
# recovered 49% of the log-time gap to 16-byte ones, so pay half; rows of odd length read by rows (ODD_ROWS)
# 0.7, measured 0.65-0.79; rows of twice an odd length (ODD_PAIRS) half of the 8-byte gap by the copies'
# count times the 0.37 measured, about 0.2 (docs/model.md, docs/perf-notes.md).
NARROW_SHARE = {4: 0.0, access.ODD_PAIRS: 0.2, 2: 0.5, access.ODD_ROWS: 0.7, 1: 1.0}
# The builds that read each class of rows by rows; the others read them at the narrower width.  Rows
# of odd length: on the probe above the others ran level or slower by rows: 256 x 128 by 1%, 64 x 128
# summed by 10%, with the same instruction counts in the K loop and another schedule of its copies;
# 64 x 64f stream-K by 1% (0.90-1.16x) with a block an SM less, and 1.5% faster on 19 timings with it
# kept (BY_ROWS_MINB; docs/perf-notes.md).  Rows of twice an odd length: every build whose B tile
# splits into whole 16-byte copies per thread (registry.family_row_classes) ran faster by rows on that
# probe (0.89x-0.99x by build) but 32 x 256, which no shape of it ranked among its best.
BY_ROWS_BUILDS = {
    access.ODD_ROWS: ("128x128", "128x128 stream-K", "128x128 summed", "64x64f", "64x64f stream-K", "64x64f summed",
                      "64x64s"),
    access.ODD_PAIRS: ("128x256", "128x128", "128x128 stream-K", "128x128 summed", "64x256", "64x128",
                       "64x128 summed", "64x64f", "64x64f stream-K", "64x64f summed"),
}


def set_for(table: dict, M: int, N: int, K: int, count: int, layout: str = "NN") -> dict:
    """The set of a model table that serves this shape: its small products' set below that set's
    bound of multiply-adds, where the table has one; else the set of this layout, or of its stand-in
    (SET_STAND_INS, with the main set's u and l), where the table has one; else the main set (the table
    itself).  A set holds ``constants``, ``blocks_per_sm`` and maybe ``residuals`` (residuals.py)."""
    small, sets = table.get("small"), table.get("layouts", {})
    if small and M * N * K * count < small["below_macs"]:
        return small
    if layout not in sets and SET_STAND_INS.get(layout) in sets:  # built per call: ranked once per shape
        s, main = sets[SET_STAND_INS[layout]], table["constants"]
        return {**s, "constants": {k: main.get(k, v) if k.endswith(STAND_IN_MAIN) else v
                                   for k, v in s["constants"].items()}}
    return sets.get(layout) or table


def candidates(M: int, N: int, K: int, count: int = 1, sms: int = 132,
               per_sm: dict | None = None) -> list[tuple[str, dict]]:
    """(name, config) of every candidate for this shape: each tile data-parallel (the SMALL_ONLY ones
    below SMALL_MACS multiply-adds only); where the
    128 x 128 tiles fill fewer than four waves of two blocks per SM, the split-K and summed variants
    too (splits leaving at least 128 of K each; over 32 only while the blocks fill two waves), and stream-K where there are at least eight of
    those tiles (with fewer, each would be shared by dozens of blocks, summed one after another); with
    8 * SMs of those tiles or more, only the data-parallel tiles and WAVE_STREAM_K_TILES as stream-K.
    ``per_sm`` (blocks per SM by ``build``): each split and summed tile also at the split counts whose
    blocks fill the SMs' block slots once and twice (``filling_splits``)."""
    small = M * N * K * count < SMALL_MACS
    out = [(name, {**cfg, "splits": 1}) for name, cfg in TILES.items() if small or name not in SMALL_ONLY]
    tiles = -(-M // 128) * -(-N // 128) * count
    if tiles >= 8 * sms:  # many waves: stream-K would share only the last
        return out + [(f"{name} stream-K", {**TILES[name], "splits": 1, "sk": 1}) for name in WAVE_STREAM_K_TILES]
    # splits that leave at least 128 of K each, up to about two waves of 128 x 128 blocks
    splits = [s for s in SPLITS if K // s >= 128 and (s <= 32 or tiles * s <= 2 * sms)]

    def more(name, build_, top):  # the filling split counts of this build not among ``splits``
        if not per_sm or build_ not in per_sm:
            return []
        t = -(-M // TILES[name]["bm"]) * -(-N // TILES[name]["bn"]) * count
        return [s for s in filling_splits(t, per_sm[build_] * sms) if s not in splits and s <= top and K // s >= 128]

    for name in SPLIT_TILES:
        if small or name not in SMALL_ONLY:
            out += [(f"{name} split{s}", {**TILES[name], "splits": s}) for s in splits + more(name, name, SPLITS[-1])]
    if tiles >= 8:  # fewer tiles would each be shared by dozens of blocks, summed one after another
        for name in STREAM_K_TILES:
            out.append((f"{name} stream-K", {**TILES[name], "splits": 1, "sk": 1}))
    for name in SUMMED_TILES:
        if small or name not in SMALL_ONLY:
            out += [(f"{name} split{s} summed", {**TILES[name], "splits": s, "sk": 2})
                    for s in [s for s in splits if s <= SUMMED_MAX_SPLITS] + more(name, f"{name} summed", SUMMED_MAX_SPLITS)]
    return out


def filling_splits(tiles: int, slots: int) -> list[int]:
    """Split counts (2 or more) whose ``tiles * splits`` blocks fill ``slots`` block slots (the SMs
    times the blocks each holds) once and twice, as nearly as whole splits can: with powers of two
    only, 72 tiles in 792 slots run split 8 (576 blocks, 73% of one round) or 16 (1152: a second
    round 45% full), where split 11 fills one round.  Measured on 12 long-K products of few tiles, the
    best filling count ran them 3.4% faster than the best power of two (docs/perf-notes.md)."""
    return sorted({s for s in (slots // tiles, 2 * slots // tiles) if s >= 2}) if tiles > 0 else []


def split_k(K: int, splits: int) -> tuple[int, int]:
    """(splits, k_split) as the family runs ``splits`` over K: every split but the last starts at a
    multiple of 4 (16-byte loads), so K allows ceil(K / 4) of them and a config asking for more runs
    with that many (one config serves any K); k_split is rounded up to a multiple of 4, and a split
    the rounding leaves empty is not run (K = 17 in 4: 3 of 8; K = 1000 in 64: 63 of 16)."""
    splits = max(1, min(int(splits), -(-K // 4)))
    k_split = -(-(-(-K // splits)) // 4) * 4
    return (-(-K // k_split) if k_split else splits), k_split


def build(name: str) -> str:
    """The build a candidate runs (its blocks per SM): the tile, "<tile> stream-K" or "<tile> summed";
    a split count is a launch argument, not a build."""
    tile = name.split()[0]
    return f"{tile} stream-K" if name.endswith("stream-K") else f"{tile} summed" if name.endswith("summed") else tile


def read_width(name: str, width: int, classes: tuple = tuple(access.ROW_CLASSES)) -> int:
    """The access width candidate ``name`` is charged for (NARROW_SHARE) reading B's rows, ``width``
    floats wide at best (access.row_widths): rows of a class of ``classes`` (access.ROW_CLASSES:
    contiguous rows of width 1 have odd length, of width 2 twice an odd length) are read by rows in
    that class's BY_ROWS_BUILDS, at ``width`` by the others.  (A's rows are never read by rows.)"""
    return next((code for code in classes if access.ROW_CLASSES[code][1] == width and build(name) in BY_ROWS_BUILDS[code]),
                width)


# The blocks an SM asked of ptxas (minb) by a build's variant that reads rows by rows, where the
# tile's own minb leaves ptxas free to take more registers than the build at the narrower width and
# lose a block an SM (the model's blocks per SM are the build's, so the variant keeps them).
# 64 x 64f stream-K: by rows of odd length it took 183 registers (5 blocks of 64 threads) against
# 168 (6), at minb 5 156 (6); by rows of twice an odd length 177 (5) against 166.  64 x 128, by rows
# of twice an odd length: 139 registers (3 blocks of 128 threads) against 128 (4), and 146 against
# 124 summed in the kernel (NVRTC 13.0); 3 blocks ran its split-K launches up to 17% slower.
BY_ROWS_MINB = {access.ODD_ROWS: {"64x64f stream-K": 5},
                access.ODD_PAIRS: {"64x64f stream-K": 5, "64x128": 4, "64x128 summed": 4}}


# The blocks an SM asked of ptxas (minb) on an arch by a build reading B's rows in NN at each access width (4, 2, 1:
# 16, 8 or 4 bytes a copy; rows read by rows take BY_ROWS_MINB), where the tile's own minb leaves ptxas free to take
# more registers and fewer blocks an SM than it can hold without spills (the model holds a capped 16-byte build at its
# minb: blocks_per_sm).  128 x 64 reading B narrow: 130-148 registers (3 blocks of 128 threads) against 127 (4) at 16
# bytes, 126-128 at minb 4; on 18 picks of a fresh draw level but one (0.82x the time), and 1866x2202x594 0.79x.
# 128 x 64 summed: 129 registers at 16 bytes (3 blocks), 124 at minb 4; 0.95x the time on 10 shapes, at 16 bytes and
# narrow (there 4 blocks either way: ptxas' schedule under the cap).  64 x 64 summed reading B narrow: 86-96 registers
# (5 blocks) against 80 (6): 0.97x on 7.  Not capped: 64 x 64f and its summed build at minb 8 ran 1.01x and 1.04x
# slower; 64 x 128 at minb 4 1.4% slower on 5 picks of odd-length B rows (docs/perf-notes.md).
ARCH_MINB = {"sm_90": {"128x64": {2: 4, 1: 4}, "128x64 summed": {4: 4, 2: 4, 1: 4}, "64x64 summed": {2: 6, 1: 6}}}
# The 16-byte builds that hold fewer blocks an SM in another layout than in NN (by ptxas' registers; tested)
LAYOUT_BLOCKS = {"sm_90": {"NT": {"128x64": 3, "128x64 summed": 3, "64x128": 3, "64x128 summed": 3, "32x32": 10,
                                  "32x32 summed": 12}, "TT": {"64x128 summed": 3}}}


def _build_of(params: dict) -> str | None:
    """The build (``build``) of the candidate whose tile config the family config ``params`` (every
    parameter given) is, or None (another config, or a tensor-core one)."""
    if params.get("mma", 0):
        return None
    sk = params.get("sk", 0)
    for name, tile in TILES.items():
        if all(params.get(k) == v for k, v in tile.items()) and params.get("ks", 1) == tile.get("ks", 1):
            return name + (" stream-K" if sk == 1 else " summed" if sk == 2 else "")
    return None


def by_rows(params: dict, code: int) -> dict | None:
    """The parameters with which the family config ``params`` (every parameter given) reads rows of
    class ``code`` (access.ROW_CLASSES) by rows: ``params`` (minb from BY_ROWS_MINB where it names the
    build) where it is a candidate's whose build is in BY_ROWS_BUILDS[code], else None (it reads them
    at the narrower width)."""
    b = _build_of(params)
    if b is None or b not in BY_ROWS_BUILDS[code]:
        return None
    return {**params, "minb": BY_ROWS_MINB[code].get(b, params["minb"])}


def arch_minb(params: dict, layout: str, widths, arch: str | None) -> dict:
    """The parameters with which the family config ``params`` (every parameter given) runs a product
    of ``layout`` at access widths ``widths`` (access.family_widths: one number or (A, B, D)) on
    ``arch``, not reading B's rows by rows (``by_rows``): minb from ARCH_MINB where it names the
    candidate's build and B's width in NN, else ``params``."""
    b_width = widths[1] if isinstance(widths, tuple) else widths
    minb = ARCH_MINB.get(arch, {}).get(_build_of(params), {}).get(b_width) if layout == "NN" else None
    return params if minb is None else {**params, "minb": minb}


def current(name: str, cfg: dict) -> bool:
    """Whether ``cfg`` (a calibration row's config) is the tile config that candidate ``name`` runs
    now: rows measured with an earlier config of a tile are left out of the fit."""
    tile = TILES.get(name.split()[0])
    return tile is not None and all(cfg.get(k) == v for k, v in tile.items())


def _round(c: dict, tile: str, q: int, iters: int, w: tuple[float, float]) -> float:
    """A round of ``q`` blocks of ``iters`` k-iterations on an SM, ``w`` the narrow reads' (wl, wu)."""
    lat, thr, p = w[0] * c[f"{tile}.a"], w[1] * q * c[f"{tile}.b"], c.get(MIX)
    return c[f"{tile}.f"] + iters * (max(lat, thr) if p is None else (lat ** p + thr ** p) ** (1.0 / p))


def _waves(c: dict, tile: str, blocks: int, per_sm: int, iters: int, sms: int, w: tuple[float, float]) -> float:
    """Time of ``blocks`` blocks of ``iters`` k-iterations, ``per_sm`` resident per SM at a time."""
    on_sm = -(-blocks // sms)
    full, last = divmod(on_sm, per_sm)
    return full * _round(c, tile, per_sm, iters, w) + (_round(c, tile, last, iters, w) if last else 0.0)


def predict(c: dict, name: str, cfg: dict, M: int, N: int, K: int, count: int, per_sm: int, sms: int,
            width: int = 4, out_width: int = 4, a_width: int = 4) -> float:
    """Predicted microseconds of candidate ``name`` (config ``cfg``, ``per_sm`` blocks per SM), B
    copied along its rows ``width`` floats at a time (access.row_widths; read_width), A ``a_width``
    (where a transposed view: rows of M floats), the result stored ``out_width`` floats at a time
    (access.out_width).  The narrow reads' share of the tile's time (u, l) was fitted on B's, whose
    tile is bn floats along its rows; A's tile is bm along its rows, so A's narrow reads are charged
    bm / bn times B's at the same width."""
    tile = name.split()[0]
    share = NARROW_SHARE[width] + NARROW_SHARE[a_width] * cfg["bm"] / cfg["bn"]
    return _predict(c, tile, cfg, M, N, K, count, per_sm, sms, share) + (
        c.get(f"{tile}.v", 0.0) * NARROW_SHARE[out_width] * M * N * count * 1e-6 / sms)


def _predict(c: dict, tile: str, cfg: dict, M: int, N: int, K: int, count: int, per_sm: int, sms: int,
             share: float) -> float:
    """``predict`` without the narrow stores' term, the narrow reads' ``share`` of u and l given."""
    u = c.get(f"{tile}.u", 0.0)
    w = (1.0 + c.get(f"{tile}.l", u) * share, 1.0 + u * share)
    bm, bn, bk = cfg["bm"], cfg["bn"], cfg["bk"]
    tiles = -(-M // bm) * -(-N // bn) * count
    ipt = -(-K // bk)
    sk = cfg.get("sk", 0)
    splits, k_split = split_k(K, cfg.get("splits", 1))
    if sk == 1:
        grid = per_sm * sms
        whole = tiles // grid
        rest = (tiles - whole * grid) * ipt
        sharers = -(-grid // max(1, tiles - whole * grid))  # blocks that share a tile of the rest
        t = whole * _round(c, tile, per_sm, ipt, w)
        if rest:
            t += _round(c, tile, per_sm, -(-rest // grid), w) + c["hand"] * sharers
        return t + c["launch"]
    iters = -(-k_split // bk)
    if sk == 2:
        # a launch holds whole tiles and no more blocks than are resident (dispatch): each launch's
        # blocks run their own rounds, so 525 blocks in launches of 259 take three rounds, not two
        per = max(splits, (per_sm * sms // splits) * splits)
        full, rest = divmod(tiles * splits, per)
        t = full * _waves(c, tile, per, per_sm, iters, sms, w) + (_waves(c, tile, rest, per_sm, iters, sms, w) if rest else 0.0)
        return t + c["summed"] * splits + (full + (rest > 0)) * c["launch"]
    t = _waves(c, tile, tiles * splits, per_sm, iters, sms, w) + c["launch"]
    if splits > 1:
        t += c["red0"] + c["red1"] * (splits + 1) * M * N * count * 1e-6 + c["launch"]
    return t


def ranked(c: dict, per_sm: dict, M: int, N: int, K: int, count: int, sms: int,
           layout: str = "NN", width: int | None = None, out_width: int | None = None,
           near: dict | None = None, a_width: int = 4) -> list[tuple[str, dict, float]]:
    """Every candidate with a build in ``per_sm`` (blocks per SM by build, ``build``) and its tile's
    constants in ``c`` (k-sliced tiles where a block's K is at most KS_MAX_K) as (name, config,
    predicted microseconds), the fastest first; the operands
    and the result taken as contiguous arrays of ``layout`` (their rows' alignment follows from the
    shape), unless ``width`` (B's; A's ``a_width``) and ``out_width`` give the access widths
    (access.row_widths, out_width); each candidate is charged for B's rows at ``read_width`` and for
    A's (TN, TT) by its share of the tile (``predict``).
    ``near``: the set's calibration residuals (residuals.py); a single product's predictions in
    RESIDUALS_LAYOUT are corrected by them (the main set's calibrations time single NN products;
    another layout copies other operands another way, and no calibration measured the correction there)."""
    a_width, width = access.row_widths(layout, M, N, K, count) if width is None else (a_width, width)
    out_width = access.out_width(N) if out_width is None else out_width
    cands = [(name, cfg) for name, cfg in candidates(M, N, K, count, sms, per_sm)
             if build(name) in per_sm and f"{name.split()[0]}.f" in c
             and (cfg.get("ks", 1) == 1 or split_k(K, cfg["splits"])[1] <= KS_MAX_K)]
    widths = {name: read_width(name, width) for name, _ in cands}
    corr = {}
    if count == 1 and layout == RESIDUALS_LAYOUT:
        for w in set(widths.values()):
            corr.update(residuals.corrections(near, M, N, K, w, [n for n, _ in cands if widths[n] == w]))
    out = [(name, cfg, predict(c, name, cfg, M, N, K, count, per_sm[build(name)], sms, widths[name], out_width,
                               a_width) * math.exp(corr.get(name, 0.0))) for name, cfg in cands]
    return sorted(out, key=lambda x: x[2])


def blocks_per_sm(per_sm: dict, layout: str, arch: str | None) -> dict:
    """A set's blocks per SM by build (its 16-byte builds', as calibrated), each build ARCH_MINB builds
    at a higher minb in NN on ``arch`` at 16-byte access held at that minb, in other layouts capped by LAYOUT_BLOCKS."""
    caps, most = (ARCH_MINB.get(arch, {}) if layout == "NN" else {}), LAYOUT_BLOCKS.get(arch, {}).get(layout, {})
    held = {b: max(n, caps.get(b, {}).get(4, 0)) for b, n in per_sm.items()}
    return {b: min(n, most.get(b, n)) for b, n in held.items()}


def ranked_for(table: dict, M: int, N: int, K: int, count: int, sms: int, layout: str = "NN",
               width: int | None = None, out_width: int | None = None,
               arch: str | None = None, a_width: int = 4) -> list[tuple[str, dict, float]]:
    """``ranked`` with the set of a model table that serves this shape (``set_for``): its constants,
    blocks per SM (on ``arch``: ``blocks_per_sm``) and residuals; a product the family runs in
    another layout (access.kernel_layout: NT as NN on a transposed copy of B, whose rows are aligned)
    is ranked as that one; a layout with no set of its own, ranked by the main set, takes LAYOUT_RATES
    (where LAYOUT_RATES_ON); single NN products ranked by the main set are offered its GPU's OFFERED_BUILDS too."""
    asked = layout  # NT run as NN keeps NT's offers
    run_as = access.kernel_layout(layout, M, N, K, count) if width is None else layout
    if run_as != layout:
        layout, width, a_width = run_as, 4, 4
    s = set_for(table, M, N, K, count, layout)
    per_sm = blocks_per_sm(s["blocks_per_sm"], layout, arch)
    if s is table and asked == RESIDUALS_LAYOUT and count == 1:  # as measured: single NN products
        per_sm = {**OFFERED_BUILDS.get(table.get("gpu"), {}), **per_sm}
    out = ranked(s["constants"], per_sm, M, N, K, count, sms, layout, width, out_width, s.get("residuals"), a_width)
    rates = LAYOUT_RATES.get((table.get("gpu"), layout), {}) if LAYOUT_RATES_ON and s is table else {}
    if rates:
        out = sorted(((n, cfg, t * rates.get(n.split()[0], 1.0)) for n, cfg, t in out), key=lambda x: x[2])
    return out


def choose(c: dict, per_sm: dict, M: int, N: int, K: int, count: int, sms: int,
           layout: str = "NN", near: dict | None = None) -> tuple[str, dict, float] | None:
    """(name, config, predicted microseconds) of the candidate the model predicts fastest."""
    return next(iter(ranked(c, per_sm, M, N, K, count, sms, layout, near=near)), None)
