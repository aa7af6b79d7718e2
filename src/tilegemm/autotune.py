"""The autotuner.  Quick (the default): time the cost model's few best candidates for the shape
(model.py), a few seconds a shape.  Full: enumerate the family's configs from its constraints,
prune with the resource model, compile in parallel, check each against a float64 reference, time
the survivors.

Candidates run through the ``matmul`` the caller hands in (the public one: ``tilegemm.matmul``),
with each candidate's config named, so what is timed is the path a user's calls take.  Checks and
timing are timing.py's (the bench's method).  The winner goes to the user's tuning cache through
the selection (``Selector.record``), merged under a file lock.
"""

from __future__ import annotations

import itertools
import os
import time
from concurrent.futures import ProcessPoolExecutor

from . import access, builds, gpu, registry, selection, suites, timing
from .occupancy import Limits, occupancy

F = registry.FAMILY
GRID = {
    "bm": (32, 64, 128, 256), "bn": (32, 64, 128, 256), "tm": (4, 8, 16), "tn": (4, 8, 16),
    "bk": (8, 16, 32), "ln": (4, 8, 16), "stages": (0, 2, 3, 4),
}
SK_EFF = 0.93  # stream-K's efficiency against a full wave of one-tile blocks (H100: 0.95-0.975 at 4096^3)
# the 1024^3 winner in the first stream-K measurement (more blocks per SM than BIG)
SK_SMALL = {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "ln": 4, "minb": 0, "swizzle": 8, "stages": 3}
SK2_BEST = 4  # split-K configs (by score) also tried summed in the kernel (sk = 2)
SK_WAVES = 3  # stream-K variants are tried where the one-tile-per-block grid has fewer waves than this
ORDERS = (1, 0)  # the family's FFMA orders; the grid's configs take the default (1)
MUST_LN = (4, 8)  # warp shapes also tried for the must-measure configs


def enumerate_configs(limits: Limits) -> list[dict]:
    """Every config of the grid that meets the family's constraints, with its register cap
    (minb) set to the most blocks per SM that the register estimate allows, and to 0 (none)."""
    out = []
    for bm, bn, tm, tn, bk, ln, stages in itertools.product(*GRID.values()):
        base = {"bm": bm, "bn": bn, "tm": tm, "tn": tn, "bk": bk, "ln": ln, "swizzle": 8, "stages": stages,
                "splits": 1}
        threads = (bm // tm) * (bn // tn) if bm % tm == 0 and bn % tn == 0 else 0
        if not 64 <= threads <= 512:
            continue
        est = registry.family_regs_estimate({**base, "minb": 0}) if threads else 999
        if est > 255:
            continue
        fit = min(limits.regs_per_sm // (threads * max(est, 1)), limits.max_threads_per_sm // threads,
                  limits.smem_per_sm // (registry.family_smem(base) + 1024))
        for minb in sorted({0, fit}):
            cfg = {**base, "minb": minb}
            if not F.violations(F.params(cfg), limits):
                out.append(cfg)
    return out


def score(cfg: dict, M: int, N: int, K: int, count: int, sms: int, limits: Limits) -> float:
    """A rough expected efficiency used only to order candidates: wave quantisation x FFMA per
    shared load x a cost for split-K's extra pass."""
    threads = registry.family_threads(cfg)
    regs = registry.family_regs_estimate(cfg)
    if cfg["minb"]:
        regs = min(regs, limits.regs_per_sm // (cfg["minb"] * threads))
    occ = occupancy(threads, regs, registry.family_smem(cfg), limits)
    blocks = -(-M // cfg["bm"]) * -(-N // cfg["bn"]) * count * cfg["splits"]
    resident = max(1, occ.blocks) * sms
    waves = -(-blocks // resident)
    wave_eff = blocks / (waves * resident)
    if cfg.get("sk"):  # stream-K: no partial wave, but a slower K loop and the hand-overs (perf notes)
        wave_eff = SK_EFF
    tile_eff = min(1.0, (cfg["tm"] * cfg["tn"]) / 64) ** 0.5 * min(1.0, occ.warps / 8) ** 0.5
    # global loads per FMA fall with the block tile: bm*bn/(bm+bn) is 64 for 128 x 128
    tile_eff *= min(1.0, cfg["bm"] * cfg["bn"] / (cfg["bm"] + cfg["bn"]) / 64) ** 0.5
    edge_eff = (M * N) / (-(-M // cfg["bm"]) * cfg["bm"] * -(-N // cfg["bn"]) * cfg["bn"])
    split_cost = 1.0 / (1.0 + 0.05 * (cfg["splits"] > 1) + cfg["splits"] * M * N * 8 / (2.0 * M * N * K) * 30)
    # cp.async stages: +5-8% over the register pipeline at equal tiles on the H100/H200, best at
    # 3 stages with bk = 8 (docs/perf-notes.md, "cp.async pipeline")
    pipe = {0: 1.0, 2: 1.05, 3: 1.08, 4: 1.04}.get(cfg.get("stages", 0), 1.0) if cfg["bk"] == 8 else 1.0
    return wave_eff * tile_eff * edge_eff * split_cost * pipe


def candidates(M: int, N: int, K: int, count: int, sms: int, limits: Limits,
               top: int = 24) -> list[dict]:
    """The ``top`` configs by score, split-K variants included where K is long."""
    base = enumerate_configs(limits)
    pool = []
    for cfg in base:
        for splits in (1, 2, 4, 8, 16, 32):
            if splits > 1 and (K // splits < 128 or -(-M // cfg["bm"]) * -(-N // cfg["bn"]) * count >= sms):
                continue
            pool.append({**cfg, "splits": splits})
    pool.sort(key=lambda c: -score(c, M, N, K, count, sms, limits))
    chosen, per_tile = [], {}
    for c in pool:  # at most two variants (bk, ln, minb) per tile shape and split: a varied set
        key = (c["bm"], c["bn"], c["tm"], c["tn"], c["splits"])
        if per_tile.get(key, 0) < 2 and len(chosen) < top:
            per_tile[key] = per_tile.get(key, 0) + 1
            chosen.append(c)
    # the score underrates the cp.async pipeline where it costs occupancy (its smem per stage), yet
    # it wins most large shapes: keep its two best-scoring tile shapes (bk = 8, its best depth in
    # every sweep) in the set
    pipelined = [c for c in pool if c["stages"] >= 2 and c["bk"] == 8 and c not in chosen]
    seen = set()
    for c in pipelined:
        key = (c["bm"], c["bn"], c["tm"], c["tn"], c["splits"])
        if key not in seen and len(seen) < 2:
            seen.add(key)
            chosen.append(c)
    # stream-K (sk = 1) where the last partial wave costs most: few waves of tiles.  Variants of the
    # configs that win the full-wave shapes and of the two best-scoring tile shapes
    musts = (selection.HUGE, selection.BIG, selection.heuristic(M, N, K, count, sms))
    sk_bases = [*musts[:2], SK_SMALL] + [c for c in pool if c["splits"] == 1 and c["stages"] >= 2
                                         and c["tm"] * c["tn"] >= 64][:1]
    for c in sk_bases:
        c = {**c, "splits": 1, "sk": 1}
        threads = registry.family_threads(c)
        occ = occupancy(threads, registry.family_regs_estimate(c), registry.family_smem(c), limits)
        tiles = -(-M // c["bm"]) * -(-N // c["bn"]) * count
        if tiles < SK_WAVES * max(1, occ.blocks) * sms and c not in chosen and not F.violations(F.params(c), limits):
            chosen.append(c)
    # split-K's winners get the same tickets: the musts with the split counts of the two
    # best-scoring split configs (long K, few tiles)
    split_counts = []
    for c in pool:
        if c["splits"] > 1 and c["splits"] not in split_counts:
            split_counts.append(c["splits"])
    musts = musts + tuple({**m, "splits": s} for m in musts[:2] for s in split_counts[:2])
    # the same split-K configs summed in the kernel (sk = 2: no second kernel, no pass over a
    # workspace of every split), for the best-scoring split configs and the musts with splits
    split_cfgs = [c for c in chosen if c["splits"] > 1 and not c.get("sk")][:SK2_BEST] + [m for m in musts if m.get("splits", 1) > 1]
    for c in split_cfgs:
        c2 = {**c, "sk": 2}
        if c2 not in chosen and not F.violations(F.params(c2), limits):
            chosen.append(c2)
    for must in musts:  # always measure these
        # in both FFMA orders and with the warp shapes (ln) that fit: the FFMAs are the same, but
        # ptxas allocates registers differently, and the register-bank conflicts and the speed
        # differ by config and layout (docs/perf-notes.md, "FFMA order").  These are the configs
        # that win most often, so they get the extra tickets.
        for order in ORDERS:
            for ln in sorted({must["ln"], *MUST_LN}):
                m = {**must, "splits": must.get("splits", 1), "order": order, "ln": ln}
                if m not in chosen and not F.violations(F.params(m), limits):
                    chosen.append(m)
    once = {}  # a config written two ways (a default spelled out or left out) is timed once
    for c in chosen:
        once.setdefault(_key(c), c)
    return list(once.values())


def _compile_one(args):
    cfg, layout, arch, vec = args
    try:
        k = F.compile(F.compiled_params(F.params(cfg)), layout, arch=arch, vec=vec)
        return k.resources.registers, k.resources.spill_stores + k.resources.spill_loads, None
    except Exception as exc:  # reported, never fatal for the tuner
        return None, None, str(exc)[:300]


def compile_all(cfgs: list[dict], layouts, arch: str, vec: int = 4, progress=None, workers=None) -> dict:
    """Compile every (config, layout) in a process pool (results land in the disk cache);
    returns {(config items, layout): (registers, spilled bytes, error)}."""
    jobs = [(c, lay, arch, vec) for c in cfgs for lay in layouts]
    uniq = {}
    for j in jobs:
        key = (tuple(sorted(F.compiled_params(F.params(j[0])).items())), j[1])
        uniq.setdefault(key, j)
    results = {}
    workers = workers or min(len(uniq), os.cpu_count() or 2) or 1
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for key, res in zip(uniq, pool.map(_compile_one, uniq.values())):
            results[key] = res
            if progress:
                progress()
    return results


QUICK_TOP = 6  # the model's best candidates timed by the quick tuning (the default)
QUICK_TARGET_S = 0.05  # seconds of timing per quick candidate (the full search: 0.15)
# the full search also times the cost model's best this many: its candidates include what GRID does not
# enumerate (k-sliced tiles, split counts that fill the SMs' block slots, builds.candidates)
FULL_MODEL_TOP = 12


def _key(cfg: dict) -> tuple:
    """A config with every parameter it leaves at its default written out: the launch it names."""
    return tuple(sorted(F.params(cfg).items()))


def quick_candidates(sel, layout: str, M: int, N: int, K: int, count: int, top: int = QUICK_TOP) -> list[dict]:
    """The quick tuning's candidates: the ``top`` configs the cost model predicts fastest, and the
    config the selection takes from a table (the tuning cache or the shipped table, stale entries too) for the
    shape, if any; none where the GPU has no fitted model table."""
    cands = sel.predicted(M, N, K, count, top, layout)
    if not cands:
        return []
    cfg, source = sel.source(layout, M, N, K, count)
    if source in ("tuned", "shipped", "stale") and cfg not in cands:
        cands.append(dict(cfg))
    return cands


def tune_shape(device: int, layout: str, M: int, N: int, K: int, count: int = 1, *, matmul, top: int | None = None,
               full: bool = False, progress=None, write: bool = True) -> dict:
    """Tune one shape on ``device`` through ``matmul`` (``tilegemm.matmul``); returns {"config",
    "tflops", "ms", "rel_err", "tried", "mode", ...} and (``write``) records the winner in the
    user's tuning cache.  By default ("quick", a few seconds a shape) the cost model's ``top``
    (6) best candidates are timed; ``full``, or a GPU with no fitted model, searches the family's
    grid (``candidates``, ``top`` 24: tens of seconds a shape), and with a model its FULL_MODEL_TOP
    best beside it.  Products below the bench draw's work
    (``suites.SMALL_DRAW``) are timed from CUDA graphs: called one by one, they measure the host."""
    start = time.perf_counter()
    props = gpu.device_properties(device)
    sel = selection.selector(device)
    if write:
        selection.check_writable(sel.cache_path.parent)
    cands = [] if full else quick_candidates(sel, layout, M, N, K, count, top or QUICK_TOP)
    mode, target_s = ("quick", QUICK_TARGET_S) if cands else ("full", 0.15)
    if not cands:
        cands = candidates(M, N, K, count, props.sms, Limits.from_props(props), top or 24)
        launches = {_key(c) for c in cands}  # one kernel is timed once, however its config is written
        cands += [c for c in sel.predicted(M, N, K, count, FULL_MODEL_TOP, layout) if _key(c) not in launches]
    # each built as it will run the product (an NT or TT product whose B is transposed first runs as NN or TN, an NN
    # product whose A is, on the H200, as TN),
    # at 16-byte access at the minb the arch's build takes (builds.ARCH_MINB)
    run_as = [access.family_layout(F.params(c), layout, M, N, K, count, props.name) for c in cands]
    runs = [builds.arch_minb(F.params(c), r, 4, props.arch) for c, r in zip(cands, run_as)]
    built = {}
    for lay in dict.fromkeys(run_as):
        built.update(compile_all([q for q, r in zip(runs, run_as) if r == lay], [lay], props.arch))
    ok = [c for c, q, r in zip(cands, runs, run_as)
          if built[(tuple(sorted(F.compiled_params(q).items())), r)][1:] == (0, None)]
    tried = measure(ok, M, N, K, count, layout, device, matmul, progress, target_s=target_s,
                    graph=M * N * K * count < suites.SMALL_DRAW["max_macs"])
    timed = [t for t in tried if t["tflops"]]
    if not timed:
        raise RuntimeError(f"no candidate config passed the check for {M}x{N}x{K} x{count} {layout}")
    best = max(timed, key=lambda t: t["tflops"])
    if write:
        sel.record(layout, M, N, K, count, {k: best[k] for k in ("config", "tflops", "ms")})
    return {**best, "M": M, "N": N, "K": K, "count": count, "layout": layout, "tried": tried, "mode": mode,
            "seconds": time.perf_counter() - start}


def measure(cfgs: list[dict], M, N, K, count, layout, device, matmul, progress=None, target_s: float = 0.15,
            graph: bool = False) -> list[dict]:
    """Each config checked against float64 (one set of inputs for all), then timed alone on rotating
    input sets (``graph``: replayed from CUDA graphs, the GPU's time alone): [{"config", "rel_err",
    "ms", "tflops"}] (ms and tflops None where the check failed, and "error" where the call raised)."""
    flop = 2.0 * M * N * K * count
    tried = []
    with timing.device(device):
        a, b = timing.operands(M, N, K, layout, count)
        inputs = (a, b, timing.reference(a, b))
        sets, outs = timing.input_sets(M, N, K, layout, count)
        for c in cfgs:
            try:
                err = timing.check(lambda a, b, out, c=c: matmul(a, b, out=out, config=c), M, N, K, layout, count,
                                   inputs)
            except (ValueError, RuntimeError) as exc:  # a config this shape or GPU cannot run
                tried.append({"config": c, "rel_err": None, "ms": None, "tflops": None, "error": str(exc)[:200]})
                continue
            if not err < timing.TOLERANCE:
                tried.append({"config": c, "rel_err": err, "ms": None, "tflops": None})
                continue
            ms = timing.time_launches(lambda i, c=c: matmul(*sets[i], out=outs[i], config=c), len(sets),
                                      target_s=target_s, batch_ms=5.0, graph=graph)
            tried.append({"config": c, "rel_err": err, "ms": ms, "tflops": flop / ms / 1e9})
            if progress:
                progress(tried[-1])
    return tried

