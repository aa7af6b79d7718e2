"""The shared-memory accesses each kernel makes, declared as addresses per thread (GEMM illustrated §5).

Every rung (and the family, for any config) declares its warp-wide shared loads and stores: the
byte address each thread touches as a function of its thread index, the access width, and how
many times each thread issues it per block for a given K.  Accesses that differ only by an offset
shared by all lanes (the next k row, the second float4 of a fragment, the other buffer) have the
same bank behaviour and are declared once with their count.  ``predict`` runs the bank simulator
over every warp of a block and adds up the wavefronts for a whole launch, the figure Nsight
Compute reports (l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld/st.sum).

The declarations mirror the ``.cu`` files; a CPU test checks them against the SASS (the LDS/STS/
LDGSTS widths and per-tile counts of the main loop).  cp.async copies (LDGSTS) write shared memory
as stores do and are simulated as such, but kept apart ("cp") from the LDS/STS totals that ncu's
load and store counters report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .. import registry
from . import banks

W = 4  # bytes per float


@dataclass(frozen=True)
class Access:
    name: str
    op: str  # "ld" (LDS), "st" (STS) or "cp" (LDGSTS: cp.async writing shared memory)
    width: int  # bytes per lane: 4, 8, 16
    addr: Callable[[int], int]  # thread index -> byte address (block-relative)
    count: Callable[[int], int]  # K -> times each thread issues it in one block

    def warp_addrs(self, warp: int) -> list[int | None]:
        return [self.addr(warp * 32 + lane) for lane in range(32)]


def _tiles(bk: int) -> Callable[[int], int]:
    return lambda K: math.ceil(K / bk)


def _gtile_store(name: str, rows: int, cols: int, threads: int, transposed: bool, ld: int,
                 base: int, bk: int) -> Access:
    """tg_tiles.cuh GTile::store: a rows x cols global tile held as float4 along cols, written as
    s[r][c] (STS.128) or, transposed, s[c][r] (four STS.32).  Per tile of depth bk."""
    per = rows * cols // (4 * threads)
    tiles = _tiles(bk)
    if transposed:
        addr = lambda t: W * (base + ((t % (cols // 4)) * 4) * ld + t // (cols // 4))
        return Access(f"{name} store (transposed, STS.32)", "st", 4, addr, lambda K: 4 * per * tiles(K))
    addr = lambda t: W * (base + (t // (cols // 4)) * ld + (t % (cols // 4)) * 4)
    return Access(f"{name} store (STS.128)", "st", 16, addr, lambda K: per * tiles(K))


def _operand_stores(layout: str, bm: int, bn: int, bk: int, threads: int, lda_s: int,
                    ldb_s: int, b_base: int) -> list[Access]:
    """The A tile (stored As[k][m]) and the B tile (Bs[k][n]) in any layout."""
    ta, tb = layout[0] == "T", layout[1] == "T"
    a = (_gtile_store("A", bk, bm, threads, False, lda_s, 0, bk) if ta
         else _gtile_store("A", bm, bk, threads, True, lda_s, 0, bk))
    b = (_gtile_store("B", bn, bk, threads, True, ldb_s, b_base, bk) if tb
         else _gtile_store("B", bk, bn, threads, False, ldb_s, b_base, bk))
    return [a, b]


def _async_copy(name: str, rows: int, cols: int, threads: int, transposed: bool, vec: int, ld: int,
                base: int, bk: int) -> Access:
    """tg_async.cuh AsyncTile: copy i of thread t lands at s[r][c] (or, transposed, s[c][r]);
    declared for copy 0 (the others add a constant to every lane).  Per tile of depth bk."""
    v = 1 if transposed else vec
    per = rows * cols // (v * threads)
    tiles = _tiles(bk)
    if transposed:
        g = min(8, cols)
        addr = lambda t: W * (base + (t % g + g * (t // g // rows)) * ld + (t // g) % rows)
        return Access(f"{name} copy (transposed, LDGSTS.32)", "cp", 4, addr, lambda K: per * tiles(K))
    w = cols // v
    addr = lambda t: W * (base + (t // w) * ld + (t % w) * v)
    return Access(f"{name} copy (LDGSTS.{32 * v})", "cp", 4 * v, addr, lambda K: per * tiles(K))


def _async_copies(layout: str, bm: int, bn: int, bk: int, threads: int, lda_s: int, ldb_s: int,
                  b_base: int, vec: int = 4) -> list[Access]:
    """The A tile (As[k][m]) and B tile (Bs[k][n]) copied by cp.async, in any layout."""
    ta, tb = layout[0] == "T", layout[1] == "T"
    a = (_async_copy("A", bk, bm, threads, False, vec, lda_s, 0, bk) if ta
         else _async_copy("A", bm, bk, threads, True, vec, lda_s, 0, bk))
    b = (_async_copy("B", bn, bk, threads, True, vec, ldb_s, b_base, bk) if tb
         else _async_copy("B", bk, bn, threads, False, vec, ldb_s, b_base, bk))
    return [a, b]


def _fragments(a_off: Callable[[int], int], b_off: Callable[[int], int], pa: int, pb: int,
               b_base: int, extra: int = 0, slices: int = 1) -> list[Access]:
    """Per k: pa float4s of A from As[k][a_off..] and pb of B from Bs[k][b_off..]; ``extra``
    more k rows per block (the cp.async loop reads the next tile's first row after the last tile
    too, from a stage nobody uses); with k ``slices``, each warp reads 1/slices of the k rows."""
    return [
        Access("A fragment (LDS.128)", "ld", 16, lambda t: W * a_off(t), lambda K: pa * (K // slices + extra)),
        Access("B fragment (LDS.128)", "ld", 16, lambda t: W * (b_base + b_off(t)), lambda K: pb * (K // slices + extra)),
    ]


def _handover(outputs: int, slice_threads: int, slices: int) -> list[Access]:
    """gemm.cu KS > 1: slices 1.. store their ``outputs`` sums a thread, slice 0 loads them, element e
    of thread t at e * slice_threads + t (consecutive lanes, consecutive words); per block, averaged
    over all warps (the storing and the loading warps are (slices - 1) / slices of them each way)."""
    n = outputs * (slices - 1) // slices
    at = lambda t: W * (t % slice_threads)
    return [Access("k slices' sums handed over (STS.32)", "st", 4, at, lambda K: n),
            Access("k slices' sums added (LDS.32)", "ld", 4, at, lambda K: n)]


def _placeholders(name: str, p: dict, layout: str, bk: int, stages: int) -> list[Access]:
    """ptxas puts never-executed loads (``@!PT LDS RZ, [RZ]``) beside the LDGSTS of each tile; they
    move no data, but Nsight Compute counts them as shared-load requests.  How many per tile is
    read from the SASS of the main loop (sm_90); one tile's worth per copy call (tiles + stages - 2:
    the partial first tile has none)."""
    from . import sass

    spec = registry.get(name)
    listing = sass.disassemble(spec.compile(p, layout=layout, arch="sm_90").cubin)
    instrs, labels = sass.parse(listing)
    n = sum(1 for i in sass.main_loop(instrs, labels) if i.pred == "@!PT" and i.base == "LDS")
    if not n:
        return []
    calls = lambda K: math.ceil(K / bk) + stages - 2
    return [Access("cp.async placeholder (@!PT LDS, no data)", "ld", 4, lambda t: None, lambda K: n * calls(K))]


def _staging() -> list[Access]:
    """Rungs 7-8: C through a warp's 4 x 64 shared buffer, 8 rows x 2 float4 each way."""
    put = lambda t: W * ((t // 32) * 256 + (t % 32 // 8) * 64 + (t % 8) * 4)
    get = lambda t: W * ((t // 32) * 256 + (t % 32 // 16) * 64 + (t % 16) * 4)
    return [Access("C staging store (STS.128)", "st", 16, put, lambda K: 16),
            Access("C staging load (LDS.128)", "ld", 16, get, lambda K: 16)]


def _rung2(p, layout):
    t = p["tile"]
    tiles = _tiles(t)
    return [
        Access("A store (STS.32)", "st", 4, lambda i: W * i, tiles),
        Access("B store (STS.32)", "st", 4, lambda i: W * (t * t + i), tiles),
        # As[ty][k..k+3]: ptxas reads a thread's row four k at a time
        Access("A row (LDS.128)", "ld", 16, lambda i: W * (i // t) * t, lambda K: t // 4 * tiles(K)),
        Access("B column (LDS.32)", "ld", 4, lambda i: W * (t * t + i % t), lambda K: t * tiles(K)),
    ]


def _rung3(p, layout):
    tiles = _tiles(8)
    ty, tx = (lambda i: i // 16), (lambda i: i % 16)
    return [
        Access("A store (STS.32)", "st", 4, lambda i: W * i, lambda K: 4 * tiles(K)),
        Access("B store (STS.32)", "st", 4, lambda i: W * (1024 + i), lambda K: 4 * tiles(K)),
        # As[ty*8 + r][0..7]: ptxas reads each of a thread's 8 rows as two LDS.128 along k
        Access("A rows (LDS.128)", "ld", 16, lambda i: W * ty(i) * 64, lambda K: 16 * tiles(K)),
        Access("B fragment (LDS.128)", "ld", 16, lambda i: W * (1024 + tx(i) * 8), lambda K: 2 * K),
    ]


def _blocked_map(bm, bn, bk, rm, rn, layout, threads):
    """Rungs 4-5: thread (ty, tx) = (tid / (bn/rn), tid % (bn/rn)) owns rows ty*rm.., cols tx*rn..;
    As[k][bm], Bs[k][bn], no padding (rung 5: two buffers)."""
    cols = bn // rn
    b_base = 2 * bk * bm  # rung 5's As[2][bk][bm]; rung 4 has one buffer, same banks (bk*bm % 32 == 0)
    return _operand_stores(layout, bm, bn, bk, threads, bm, bn, b_base) + _fragments(
        lambda t: (t // cols) * rm, lambda t: (t % cols) * rn, rm // 4, rn // 4, b_base)


def _rung4(p, layout):
    return _blocked_map(128, 128, 8, 8, 8, layout, 256)


def _rung5(p, layout):
    threads = (p["bm"] // p["rm"]) * (p["bn"] // p["rn"])
    return _blocked_map(p["bm"], p["bn"], p["bk"], p["rm"], p["rn"], layout, threads)


def _warp_map(bm, bn, bk, tm, tn, ln, layout, staged, stages=0, ks=1):
    """Rungs 6-8 and the family: warps of (32/ln) x ln threads, 4 x 4 patches, rows padded by 4;
    tiles through registers (stages = 0, two buffers) or copied by cp.async (stages buffers);
    ks k slices (the family's KS): ks such thread grids share the copies, slice s reading k rows
    s * bk / ks.. of each tile, then handing its sums over."""
    rows_t, cols_t = bm // tm, bn // tn
    threads, lm, warps_n = rows_t * cols_t, 32 // ln, cols_t // ln  # threads of one slice
    tr = lambda t: (t % threads // 32 // warps_n) * lm + t % 32 // ln
    tc = lambda t: (t % threads // 32 % warps_n) * ln + t % 32 % ln
    lda_s, ldb_s = bm + 4, bn + 4
    first = lambda t: t // threads * (bk // ks)  # the slice's first k row of a tile
    b_base = max(2, stages) * bk * lda_s
    fill = _async_copies if stages else _operand_stores
    acc = fill(layout, bm, bn, bk, threads * ks, lda_s, ldb_s, b_base) + _fragments(
        lambda t: tr(t) * 4 + first(t) * lda_s, lambda t: tc(t) * 4 + first(t) * ldb_s, tm // 4, tn // 4, b_base,
        1 if stages else 0, ks)
    return acc + (_staging() if staged else []) + (_handover(tm * tn, threads, ks) if ks > 1 else [])


def _rung6(p, layout):
    return _warp_map(128, 128, p["bk"], 8, 8, 8, layout, False)


def _rung7(p, layout):  # rung 6's map plus the C staging of the epilogue
    return _warp_map(128, 128, p["bk"], 8, 8, 8, layout, True)


def _rung8(p, layout):  # 256 x 128 tile, 16 x 8 threads, cp.async stages
    return (_warp_map(256, 128, 8, 16, 8, p["ln"], layout, False, p["stages"])
            + _placeholders("08_hopper", p, layout, 8, p["stages"]))


def _family(p, layout):
    acc = _warp_map(p["bm"], p["bn"], p["bk"], p["tm"], p["tn"], p["ln"], layout, False, p["stages"], p.get("ks", 1))
    return acc + (_placeholders("gemm", p, layout, p["bk"], p["stages"]) if p["stages"] else [])


DECLARED = {
    "02_smem_tiled": _rung2, "03_register_blocked": _rung3, "04_vectorized": _rung4,
    "05_double_buffered": _rung5, "06_warp_tiled": _rung6, "07_maxas": _rung7,
    "08_hopper": _rung8, "gemm": _family,
}


def accesses(name: str, params: dict | None = None, layout: str = "NN") -> list[Access]:
    """The declared shared-memory accesses of kernel ``name`` (rung 1 has none)."""
    spec = registry.get(name)
    p = spec.params(params)
    fn = DECLARED.get(spec.name)
    return fn(p, layout) if fn else []


@dataclass(frozen=True)
class AccessPrediction:
    access: Access
    requests: int  # warp-wide instructions per block
    wavefronts: int  # per block
    ideal: int  # per block, with no bank conflicts
    per_request: float  # average wavefronts per warp-wide request


def predict(name: str, params: dict | None = None, K: int = 1024, layout: str = "NN",
            model: str = "classic") -> list[AccessPrediction]:
    """Per declared access: requests and wavefronts for one block at depth K."""
    spec = registry.get(name)
    p = spec.params(params)
    warps = spec.threads(p) // 32
    out = []
    for a in accesses(name, p, layout):
        n = a.count(K)
        preds = [banks.predict(a.warp_addrs(w), a.width, model, a.op != "ld") for w in range(warps)]
        waves = sum(x.wavefronts for x in preds) * n
        ideal = sum(x.ideal for x in preds) * n
        out.append(AccessPrediction(a, warps * n, waves, ideal, waves / max(1, warps * n)))
    return out


def launch_totals(name: str, M: int, N: int, K: int, params: dict | None = None,
                  layout: str = "NN", model: str = "classic") -> dict:
    """Whole-launch totals for a shape the tile divides: what ncu's counters sum to."""
    spec = registry.get(name)
    p = spec.params(params)
    bm, bn = spec.tile(p)
    blocks = math.ceil(M / bm) * math.ceil(N / bn)
    tot = {f"{op}_{k}": 0 for op in ("ld", "st", "cp") for k in ("requests", "wavefronts", "ideal")}
    for x in predict(name, p, K, layout, model):
        tot[f"{x.access.op}_requests"] += x.requests * blocks
        tot[f"{x.access.op}_wavefronts"] += x.wavefronts * blocks
        tot[f"{x.access.op}_ideal"] += x.ideal * blocks
    return tot
