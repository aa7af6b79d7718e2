"""A cost model of the family's candidates: predict each one's time on a shape from what the shape
does to it (tiles, waves at the blocks that fit on an SM, k-iterations per block, the reduction or
hand-over), with a few constants per tile config fitted to measurements; pick the least.

Candidates (builds.py): tile configs of the family (``builds.TILES``), each run one block per tile
(data-parallel), split over K with a reduction, split and summed in the kernel (sk = 2) or as
stream-K (sk = 1).

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
  partial sums of the others one after another; where more than 1 + builds.SK_SPREAD * r share a
  tile, the kernel has them all add it up together, which this term does not model: capped there, or
  priced at hand * S for any S, it picked no better on fresh shapes, docs/perf-notes.md);
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
predictions where the constants are wrong the same way on nearby shapes (residuals.py); the table's
``corrections`` keep, per other layout, the residuals of that layout's calibrations under the set that
ranks it there, which correct that layout's single products the same way (``near_for``).
"""

from __future__ import annotations

import math

from . import access, builds, residuals

# Builds the GPU's calibrations never timed (the H200's did; its table ranks them), offered to single NN products by the
# main set at the driver's blocks per SM: 41 picks changed of 300 fresh NN shapes 1.075x -> 1.100x; TT 1.057x -> 1.045x
OFFERED_BUILDS = {"NVIDIA H100 80GB HBM3": {"128x64 stream-K": 3, "64x128 stream-K": 3}}
# Tiles of k slices (ks > 1) ranked only where a block's K is at most KS_MAX_K: the slices hide a short main loop's
# latency, and their constants, fitted on all K, price a long one too cheaply.  On the 20 picks 64x64s made among 1900
# fresh shapes (four layouts, H200), the picks without it ran 3-10% faster on 5 of the 6 whose blocks took more K; on
# fresh draws after, the 23 picks the bound changed, 18 faster (NN 1.020x -> 1.045x on 18; docs/perf-notes.md).
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
# The share of the narrow-access costs ``u`` and ``l`` paid at each width (access.row_widths): 8-byte accesses
# recovered 49% of the log-time gap to 16-byte ones, so pay half; rows of odd length read by rows (ODD_ROWS)
# 0.7, measured 0.65-0.79; rows of twice an odd length (ODD_PAIRS) half of the 8-byte gap by the copies'
# count times the 0.37 measured, about 0.2 (docs/model.md, docs/perf-notes.md).
NARROW_SHARE = {4: 0.0, access.ODD_PAIRS: 0.2, 2: 0.5, access.ODD_ROWS: 0.7, 1: 1.0}


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
    copied along its rows ``width`` floats at a time (access.row_widths; builds.read_width), A ``a_width``
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
    splits, k_split = builds.split_k(K, cfg.get("splits", 1))
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
    """Every candidate with a build in ``per_sm`` (blocks per SM by build, ``builds.build``) and its tile's
    constants in ``c`` (k-sliced tiles where a block's K is at most KS_MAX_K) as (name, config,
    predicted microseconds), the fastest first; the operands
    and the result taken as contiguous arrays of ``layout`` (their rows' alignment follows from the
    shape), unless ``width`` (B's; A's ``a_width``) and ``out_width`` give the access widths
    (access.row_widths, out_width); each candidate is charged for B's rows at ``builds.read_width`` and for
    A's (TN, TT) by its share of the tile (``predict``).
    ``near``: calibration residuals of this layout under these constants (residuals.py, ``near_for``), by
    which a single product's predictions are corrected (the calibrations time single products)."""
    a_width, width = access.row_widths(layout, M, N, K, count) if width is None else (a_width, width)
    out_width = access.out_width(N) if out_width is None else out_width
    cands = [(name, cfg) for name, cfg in builds.candidates(M, N, K, count, sms, per_sm)
             if builds.build(name) in per_sm and f"{name.split()[0]}.f" in c
             and (cfg.get("ks", 1) == 1 or builds.split_k(K, cfg["splits"])[1] <= KS_MAX_K)]
    widths = {name: builds.read_width(name, width) for name, _ in cands}
    corr = {}
    if count == 1 and near:
        for w in set(widths.values()):
            corr.update(residuals.corrections(near, M, N, K, w, [n for n, _ in cands if widths[n] == w]))
    out = [(name, cfg, predict(c, name, cfg, M, N, K, count, per_sm[builds.build(name)], sms, widths[name], out_width,
                               a_width) * math.exp(corr.get(name, 0.0))) for name, cfg in cands]
    return sorted(out, key=lambda x: x[2])


def near_for(table: dict, s: dict, layout: str) -> dict | None:
    """The residuals that correct set ``s`` of ``table`` in ``layout`` (the layout a product runs in): the set's
    own in RESIDUALS_LAYOUT, whose calibrations it keeps; in another, the table's ``corrections`` for it (that
    layout's calibrations under the set that ranks it above the small products' bound, as they were timed:
    held out seed by seed on the H200's four NT calibrations, the picks 0.9945x -> 1.0086x cuBLAS, docs/model.md);
    else none: another layout copies other operands another way, and no calibration measured it."""
    if layout == RESIDUALS_LAYOUT:
        return s.get("residuals")
    return None if s is table.get("small") else table.get("corrections", {}).get(layout, {}).get("residuals")


def rates(table: dict, s: dict, layout: str) -> dict:
    """The factors LAYOUT_RATES puts on each tile's time in ``layout``, ranked by set ``s`` of ``table`` (a tile not
    listed: 1.0)."""
    return LAYOUT_RATES.get((table.get("gpu"), layout), {}) if LAYOUT_RATES_ON and s is table else {}


def ranked_for(table: dict, M: int, N: int, K: int, count: int, sms: int, layout: str = "NN",
               width: int | None = None, out_width: int | None = None,
               arch: str | None = None, a_width: int = 4) -> list[tuple[str, dict, float]]:
    """``ranked`` with the set of a model table that serves this shape (``set_for``): its constants,
    blocks per SM (on ``arch``: ``builds.blocks_per_sm``) and the residuals ``near_for`` gives; a product the family runs in
    another layout (access.kernel_layout: NT and TT as NN and TN on a transposed copy of B, NN as TN on one of A,
    the copy's rows aligned) is ranked as that one, the other operand at the width it is read with there; a layout
    with no set of its own, ranked by the main set, takes LAYOUT_RATES (where LAYOUT_RATES_ON); single NN products
    ranked by the main set are offered its GPU's OFFERED_BUILDS too."""
    asked = layout  # NT run as NN (TT as TN) keeps its own offers
    run_as = access.kernel_layout(layout, M, N, K, count, table.get("gpu")) if width is None else layout
    if run_as != layout:
        widths = access.row_widths(run_as, M, N, K, count)
        a_width, width = (4 if run_as[i] != layout[i] else w for i, w in enumerate(widths))  # a copy's rows: aligned
        layout = run_as
    s = set_for(table, M, N, K, count, layout)
    per_sm = builds.blocks_per_sm(s["blocks_per_sm"], layout, arch)
    if s is table and asked == RESIDUALS_LAYOUT and count == 1:  # as measured: single NN products
        per_sm = {**OFFERED_BUILDS.get(table.get("gpu"), {}), **per_sm}
    out = ranked(s["constants"], per_sm, M, N, K, count, sms, layout, width, out_width, near_for(table, s, layout),
                 a_width)
    factors = rates(table, s, layout)
    if factors:
        out = sorted(((n, cfg, t * factors.get(n.split()[0], 1.0)) for n, cfg, t in out), key=lambda x: x[2])
    return out


def choose(c: dict, per_sm: dict, M: int, N: int, K: int, count: int, sms: int,
           layout: str = "NN", near: dict | None = None) -> tuple[str, dict, float] | None:
    """(name, config, predicted microseconds) of the candidate the model predicts fastest."""
    return next(iter(ranked(c, per_sm, M, N, K, count, sms, layout, near=near)), None)
