"""The family's builds that the cost model (model.py) ranks: the tile configs (``TILES``), how each
runs (one block per tile, split over K with a reduction, split and summed in the kernel, stream-K),
the candidates a shape is offered (``candidates``), and what each build is on an arch and in a
layout: the minb it is compiled with, the rows it reads by rows, the blocks an SM it holds.  Declared
once here, they serve the model, the calibrations, dispatch, the tuner and the tests."""

from __future__ import annotations

from . import access

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
# run as stream-K also where there are 8 * SMs or more of 128 x 128 tiles (whole waves, stream-K sharing only the last): on
# 54 picks of a fresh draw that changed to stream-K when all four were offered there, against the data-parallel picks,
# 256 x 128 ran its 25 2.1% faster, 128 x 128 its 20 1.2%; 128 x 128w its 8 6.0% slower, 64 x 64f its one 8.5% (perf-notes)
WAVE_STREAM_K_TILES = ("256x128", "128x128")
# stream-K: a tile shared by n blocks is added up by its owner, the tails one after another, unless n - 1 >
# SK_SPREAD * (blocks an SM); then by all n, a share each, once their ranges are done (gemm.cu).  The owner's adds
# then cost about what the shares do: each block writes up to two parts and reads two tiles' worth, against the
# owner's n - 1 parts (docs/perf-notes.md)
SK_SPREAD = 3
SUMMED_TILES = ("128x128", "64x128", "128x64", "64x64", "64x64f", "32x32")  # also split over K and summed in the kernel
# summed in the kernel at up to SUMMED_MAX_SPLITS splits: on a probe of 16 long-K shapes
# with few tiles (four tiles split 8, 16 and 32 ways, both ways), summed at 16 splits was the fastest
# of the probe's 24 configs on 3 (by 2.6-6.4%); at 32 the sum was slower than the reduction kernel
# for 62 of 64 tile-shape pairs (docs/perf-notes.md)
SUMMED_MAX_SPLITS = 16
SMALL_ONLY = ("32x32",)  # offered only for products below SMALL_MACS multiply-adds
SMALL_MACS = 1024**3  # the bench draw's smallest product (suites.DRAW), the small set's bound
# The builds that read each class of rows by rows; the others read them at the narrower width.  Rows
# of odd length: on the probe of model.NARROW_SHARE's shares the others ran level or slower by rows:
# 256 x 128 by 1%, 64 x 128 summed by 10%, with the same instruction counts in the K loop and another
# schedule of its copies;
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
    """The access width candidate ``name`` is charged for (model.NARROW_SHARE) reading B's rows, ``width``
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


# The blocks an SM asked of ptxas (minb) on an arch by a build reading B's rows in NN at each access
# width (4, 2, 1: 16, 8 or 4 bytes a copy; rows read by rows take BY_ROWS_MINB), where the tile's own
# minb leaves ptxas free to take more registers and fewer blocks an SM than it can hold without
# spills (the model holds a capped 16-byte build at its minb: blocks_per_sm).  128 x 64 reading B
# narrow: 130-148 registers (3 blocks of 128 threads) against the 16-byte build's 127 (4), 126-128
# at minb 4 (on sm_80 some spill); on 18 picks of a fresh draw level but one (233x571x12612 split
# 29: 0.82x the time), and 1866x2202x594 0.79x.  128 x 64 summed: 129 registers at 16 bytes (3
# blocks), 124 at minb 4 (4); on 10 shapes where the model ranks it among its four best, at the same
# split count, 0.95x the time on the 4 that read B 16 bytes at a time (2 of them a copy of B) and
# 0.95x on the 6 that read it narrow, where it holds 4 blocks either way (127-128 registers): there
# the gain is ptxas' schedule under the cap, not occupancy.  64 x 64 summed reading B narrow: 86-96
# registers (5 blocks) against 80 (6): 0.97x on 7 (6 faster).  Not capped: 64 x 64f and 64 x 64f
# summed at minb 8 (8 blocks of 64 threads instead of 6; 127-128 registers, the summed 16-byte build
# spilling 16 bytes) ran 1.01x slower on 14 picks and 1.04x on 24.  64 x 128 at minb 4 ran 1.4%
# slower on 5 picks whose B rows are of odd length, where it keeps 4 blocks either way (docs/perf-notes.md).
ARCH_MINB = {"sm_90": {"128x64": {2: 4, 1: 4}, "128x64 summed": {4: 4, 2: 4, 1: 4}, "64x64 summed": {2: 6, 1: 6}}}
# Builds asked a minb in a layout other than NN on an arch, at every width of A or ({A's width: minb}) at some: where the
# tile's own minb leaves ptxas free to take a block an SM fewer there than in NN.  64 x 64f stream-K in TT: 175
# registers (5 blocks of 64 threads) with stream-K's two ways of adding up a tile (gemm.cu SK_SPREAD), 162-164 (6) at
# minb 6 at every width, no spills; in TN with A read 4 or 8 bytes at a time (TT's products run as TN,
# access.TRANSPOSED_RUNS), 170 (4), 163-165 (6) at minb 6: 0.988x the time on its 45 picks of fresh TN and TT draws, the
# lowest 0.778x -> 0.852x cuBLAS.  64 x 128 in TT with A read 4 bytes at a time: 148 registers (3 blocks of 128
# threads), 127 (4) at minb 4: 0.984x the time on its 29 picks of fresh TT draws (3 faster by 11-18%, none slower by
# 1%); at 8 and 16 bytes it holds 4 at its own minb (docs/perf-notes.md)
LAYOUT_MINB = {"sm_90": {"TT": {"64x64f stream-K": 6, "64x128": {1: 4}}, "TN": {"64x64f stream-K": 6}}}
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
    candidate's build and B's width in NN, from LAYOUT_MINB where it names the layout and the build (and A's
    width, where it names widths), else ``params``."""
    a_width, b_width = widths[:2] if isinstance(widths, tuple) else (widths, widths)
    if layout == "NN":
        minb = ARCH_MINB.get(arch, {}).get(_build_of(params), {}).get(b_width)
    else:
        minb = LAYOUT_MINB.get(arch, {}).get(layout, {}).get(_build_of(params))
        minb = minb.get(a_width) if isinstance(minb, dict) else minb
    return params if minb is None else {**params, "minb": minb}


# ptxas's register usage level (0-10, its default 5) for the 16 x 8 thread tiles where A is read as stored (TN, TT).
# Held out on 40 fresh TN and TT shapes whose picks were 128 x 128, 256 x 128 or 128 x 256, level 7 took 0.993x the
# time, the 5 below 0.97x cuBLAS 0.936x -> 0.996x; in NN it ran 1.008x (25 shapes) and stays at the default.  Why is
# not known: these builds' fragment loads do not lie further from their use at level 7 (sass.load_leads,
# docs/perf-notes.md).  Not where the level spills: (build, layout, A's access width in floats)
WIDE_A_PTXAS_LEVEL = 7
WIDE_A_PTXAS_SPILLS = {("128x128 stream-K", "TT", 1)}  # 68 bytes spilled at level 7 (none at the default)


def ptxas_options(params: dict, layout: str, widths=4) -> tuple[str, ...]:
    """The options gemm.cu's build of ``params`` (every parameter given) in ``layout``, its operands read at
    ``widths`` (one access width in floats, or (A, B, D)), passes on to ptxas."""
    a = widths if isinstance(widths, int) else widths[0]
    if params["tm"] == 16 and params["tn"] == 8 and layout[0] == "T" \
            and (_build_of(params), layout, a) not in WIDE_A_PTXAS_SPILLS:
        return (f"--register-usage-level={WIDE_A_PTXAS_LEVEL}",)
    return ()


def current(name: str, cfg: dict) -> bool:
    """Whether ``cfg`` (a calibration row's config) is the tile config that candidate ``name`` runs
    now: rows measured with an earlier config of a tile are left out of the fit."""
    tile = TILES.get(name.split()[0])
    return tile is not None and all(cfg.get(k) == v for k, v in tile.items())


def blocks_per_sm(per_sm: dict, layout: str, arch: str | None) -> dict:
    """A set's blocks per SM by build (its 16-byte builds', as calibrated), each build ARCH_MINB builds
    at a higher minb in NN on ``arch`` at 16-byte access held at that minb, in other layouts capped by LAYOUT_BLOCKS."""
    caps, most = (ARCH_MINB.get(arch, {}) if layout == "NN" else {}), LAYOUT_BLOCKS.get(arch, {}).get(layout, {})
    held = {b: max(n, caps.get(b, {}).get(4, 0)) for b, n in per_sm.items()}
    return {b: min(n, most.get(b, n)) for b, n in held.items()}
