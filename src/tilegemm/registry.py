"""The kernels tilegemm knows: each a ``.cu`` file plus its parameters and their constraints
(kernelspec.py says what a kernel spec is).

Constraints are declared here once, in Python, and used by everything that needs them: the call
path (errors), the tuner (pruning), the selection and the kernel build (passed as defines; the
kernels also ``static_assert`` the ones they rely on).  Constraints are checked in order and the
first ones guard the later ones (positive sizes before divisions by them).  The sources a rung
follows are cited by title (docs/sources.md).
"""

from __future__ import annotations

import dataclasses

from . import access, builds
from .kernelspec import LAYOUTS, PRECISIONS, Constraint, KernelSpec, check_precision  # noqa: F401 (re-exported)
from .occupancy import Limits  # noqa: F401 (re-exported)

RUNGS: dict[str, KernelSpec] = {}


def _register(spec: KernelSpec) -> KernelSpec:
    RUNGS[spec.name] = spec
    return spec


_register(KernelSpec(
    name="01_naive",
    file="01_naive.cu",
    summary="one thread per output element, operands straight from global memory",
    source="Memory and data locality §4.2, Fig. 4.3; GEMM illustrated §2",
    defaults={"block_x": 16, "block_y": 16},
    block=lambda p: (p["block_x"], p["block_y"], 1),
    tile=lambda p: (p["block_y"], p["block_x"]),
    constraints=(
        Constraint("block_x >= 1 and block_y >= 1", lambda p, lim: min(p["block_x"], p["block_y"]) >= 1),
        Constraint("block_x * block_y <= max threads per block",
                   lambda p, lim: p["block_x"] * p["block_y"] <= lim.max_threads_per_block),
    ),
))

_register(KernelSpec(
    name="02_smem_tiled",
    file="02_smem_tiled.cu",
    summary="TILE x TILE shared-memory tiles, barriers, zero-filled edges",
    source="Memory and data locality §4.4-4.6 (Fig. 4.16, 4.20), §4.7",
    defaults={"tile": 16},
    block=lambda p: (p["tile"], p["tile"], 1),
    tile=lambda p: (p["tile"], p["tile"]),
    smem=lambda p: 2 * p["tile"] * p["tile"] * 4,
    constraints=(
        Constraint("tile >= 1", lambda p, lim: p["tile"] >= 1),
        Constraint("tile * tile <= max threads per block",
                   lambda p, lim: p["tile"] ** 2 <= lim.max_threads_per_block),
        Constraint("2 * tile^2 * 4 bytes <= shared memory per block",
                   lambda p, lim: 8 * p["tile"] ** 2 <= lim.smem_per_block_optin),
    ),
))


def _c(text, fn):
    return Constraint(text, fn)


_STATIC_SMEM = 48 * 1024

_register(KernelSpec(
    name="03_register_blocked",
    file="03_register_blocked.cu",
    summary="128x128 block tile, BK=8, 8x8 outputs per thread from registers",
    source="GEMM illustrated §3-4 (sgemm_V1)",
    defaults={},
    block=lambda p: (256, 1, 1),
    tile=lambda p: (128, 128),
))

_register(KernelSpec(
    name="04_vectorized",
    file="04_vectorized.cu",
    summary="float4 global and shared loads, A transposed in shared memory",
    source="GEMM part 2 §2.2; GEMM illustrated §5.2",
    defaults={},
    block=lambda p: (256, 1, 1),
    tile=lambda p: (128, 128),
    vec=True,
))


def _rung5_threads(p):
    return (p["bm"] // p["rm"]) * (p["bn"] // p["rn"])


_register(KernelSpec(
    name="05_double_buffered",
    file="05_double_buffered.cu",
    summary="two shared buffers + two register fragments, one barrier per K step",
    source="GEMM part 2 §1.2, §2.2-2.4 (parameters: §3)",
    # chosen on the H100 for both of the ladder's bars (0.70x cuBLAS at 4096^3, at most 10% lost at
    # 4095^3): 0.80x and -5% (GEMM part 2's table's best, 128/16/128/8/8, runs 0.77x but loses 17%)
    defaults={"bm": 128, "bk": 8, "bn": 256, "rm": 16, "rn": 8},
    block=lambda p: (_rung5_threads(p), 1, 1),
    tile=lambda p: (p["bm"], p["bn"]),
    vec=True,
    constraints=(
        _c("bm, bk, bn, rm and rn are positive",
           lambda p, lim: min(p["bm"], p["bk"], p["bn"], p["rm"], p["rn"]) > 0),
        _c("rm and rn are multiples of 4 (LDS.128 fragments)", lambda p, lim: p["rm"] % 4 == 0 and p["rn"] % 4 == 0 and p["rm"] > 0 and p["rn"] > 0),
        _c("bm % rm == 0 and bn % rn == 0", lambda p, lim: p["bm"] % p["rm"] == 0 and p["bn"] % p["rn"] == 0),
        _c("bk is a positive multiple of 4", lambda p, lim: p["bk"] > 0 and p["bk"] % 4 == 0),
        _c("1 <= (bm/rm)*(bn/rn) threads <= max threads per block",
           lambda p, lim: 1 <= _rung5_threads(p) <= lim.max_threads_per_block),
        _c("bm*bk and bk*bn split into whole float4s per thread",
           lambda p, lim: (p["bm"] * p["bk"]) % (4 * _rung5_threads(p)) == 0
           and (p["bk"] * p["bn"]) % (4 * _rung5_threads(p)) == 0),
        _c("threads divisible by bk/4, bm/4 and bn/4 (each thread loads float4s of one column)",
           lambda p, lim: all(_rung5_threads(p) % (x // 4) == 0 for x in (p["bk"], p["bm"], p["bn"]))),
        _c("2 buffers * bk*(bm+bn) * 4 bytes <= 48 KB static shared memory",
           lambda p, lim: 8 * p["bk"] * (p["bm"] + p["bn"]) <= _STATIC_SMEM),
    ),
))

_BK_8_OR_16 = _c("bk is 8 or 16 (a warp-wide float4 split of the tile)", lambda p, lim: p["bk"] in (8, 16))
_STAGES_2_4 = _c("stages is 2, 3 or 4", lambda p, lim: p["stages"] in (2, 3, 4))
_SWIZZLE = _c("swizzle >= 0", lambda p, lim: p["swizzle"] >= 0)


def _tile128(name: str, summary: str, source: str, defaults: dict, *constraints, linear_grid=False) -> KernelSpec:
    """Rungs 6-8: 256 threads, a 128 x 128 block tile, 8 x 8 outputs per thread, depth bk."""
    return _register(KernelSpec(
        name=name, file=f"{name}.cu", summary=summary, source=source, defaults=defaults,
        block=lambda p: (256, 1, 1), tile=lambda p: (128, 128), vec=True, linear_grid=linear_grid,
        constraints=(_BK_8_OR_16, *constraints),
    ))


_tile128("06_warp_tiled", "4x8 warps, 8x8 split into four 4x4 patches: conflict-free LDS.128",
         "GEMM illustrated §5.2", {"bk": 16})
_tile128("07_maxas", "C staged through shared memory: whole 128-B lines per store",
         "the maxas article (part 9 for the output)", {"bk": 16})
_register(KernelSpec(
    name="08_hopper", file="08_hopper.cu",
    summary="cp.async 3-stage pipeline, 16x8 threads on a 256x128 tile, block swizzle; chosen by measurement",
    source="beyond the sources: each choice measured (docs/perf-notes.md)",
    defaults={"stages": 3, "swizzle": 8, "ln": 2},
    block=lambda p: (256, 1, 1), tile=lambda p: (256, 128), vec=True, linear_grid=True,
    smem=lambda p: p["stages"] * 8 * (260 + 132) * 4,
    constraints=(
        _STAGES_2_4,
        _SWIZZLE,
        _c("ln is 2, 4, 8 or 16 (warps of 32/ln x ln threads on a 16 x 16 thread grid)",
           lambda p, lim: p["ln"] in (2, 4, 8, 16)),
    ),
))


def _mma_smem(p) -> int:
    """Rung 9's shared memory: stages of [A 64 + 4 | B 128 + 4] floats a k row, bk rows."""
    return p["stages"] * p["bk"] * 200 * 4


_register(KernelSpec(
    name="09_mma_tf32x3", file="09_mma_tf32x3.cu",
    summary="mma.sync m16n8k8 TF32 on the tensor cores, operands split big + small: FP32 accuracy",
    source="3xTF32 (Ootomo & Yokota; CUTLASS), docs/perf-notes.md",
    # bk 8: at 16 ptxas spills (sm_80 and sm_90, NN, NT and TT; 57.8 TFLOPS at 4096^3 that way, but
    # 46.2 at 4095^3 against 51.0 at bk 8: docs/perf-notes.md)
    defaults={"bk": 8, "stages": 3, "swizzle": 8},
    block=lambda p: (128, 1, 1), tile=lambda p: (64, 128), vec=True, linear_grid=True,
    smem=_mma_smem,
    precision="tf32x3", extra={"TG_MMA_PASSES": 3},
    constraints=(
        _c("bk is 8, 16 or 32 (whole mma k steps)", lambda p, lim: p["bk"] in (8, 16, 32)),
        _STAGES_2_4,
        _SWIZZLE,
        _c("stages * bk * 200 * 4 bytes <= shared memory per block",
           lambda p, lim: _mma_smem(p) <= lim.smem_per_block_optin),
    ),
))


def _wgmma_smem(p) -> int:
    """Rung 10's shared memory: rs raw B tiles and ss stages of [raw A | B big | B small] (B: 128 x bk
    floats, A: bm x bk), and the mbarriers."""
    return (p["rs"] * 128 + p["ss"] * (p["bm"] + 256)) * 4 * p["bk"] + 8 * (p["rs"] + 3 * p["ss"])


_register(KernelSpec(
    name="10_wgmma_tf32x3", file="10_wgmma_tf32x3.cu",
    summary="wgmma m64n128k8 TF32 fed by TMA and mbarriers; a producer warpgroup splits B into K-major tiles",
    source="3xTF32 (Ootomo & Yokota; CUTLASS); PTX ISA wgmma, TMA, mbarrier; docs/perf-notes.md",
    defaults={"bk": 32, "rs": 2, "ss": 3, "swizzle": 8, "tg_tma": 1, "bm": 128},
    block=lambda p: (128 * (1 + p["bm"] // 64), 1, 1), tile=lambda p: (p["bm"], 128), linear_grid=True,
    entry="tilegemm_wgmma",
    smem=_wgmma_smem,
    precision="tf32x3", extra={"TG_MMA_PASSES": 3}, archs=("sm_90a",),
    constraints=(
        _c("bk is 16 or 32 (a row of A is one 64- or 128-byte swizzle span)", lambda p, lim: p["bk"] in (16, 32)),
        _c("tg_tma is 1 (tiles copied by TMA) or 0 (by the producer's cp.async: any alignment)",
           lambda p, lim: p["tg_tma"] in (0, 1)),
        _c("rs >= 2 and ss >= 2 (raw B stages and A + split B stages)", lambda p, lim: p["rs"] >= 2 and p["ss"] >= 2),
        _c("bm is 128 (two consumer warpgroups), or 64 (one) with tg_tma = 1",
           lambda p, lim: p["bm"] == 128 or (p["bm"] == 64 and p["tg_tma"] == 1)),
        _c("(128 rs + (bm + 256) ss) * 4 * bk bytes <= shared memory per block",
           lambda p, lim: _wgmma_smem(p) <= lim.smem_per_block_optin),
        _SWIZZLE,
    ),
))


# --------------------------------------------------------------------------- the production family


def family_threads(p) -> int:
    """Threads per block of gemm.cu: a (bm/tm) x (bn/tn) grid of threads per k slice, ks slices."""
    return (p["bm"] // p["tm"]) * (p["bn"] // p["tn"]) * p.get("ks", 1)


def _tile_loads(rows: int, cols: int, threads: int) -> bool:
    """tg_tiles.cuh's GTile: whole float4s per thread, each thread's float4s in one column."""
    return cols % 4 == 0 and (rows * cols) % (4 * threads) == 0 and threads % (cols // 4) == 0


def family_row_classes(p) -> tuple[int, ...]:
    """The width codes of access.ROW_CLASSES that gemm.cu's cp.async copies can take by rows for B in
    this config (tg_async.cuh, RowClassTile): those whose two widths split B's bk x bn tile, per half
    of its rows, into whole copies per thread, each thread's in one column of copies.  (A, as a
    transposed view, takes them in the kernel where its bk x bm tile splits so; the host gives them
    to B only.)  Configs without one read such rows at the narrower width on every row."""
    threads, cols = family_threads(p), p["bn"]
    if p["stages"] < 2 or p["bk"] % 2:
        return ()
    return tuple(code for code, vs in access.ROW_CLASSES.items()
                 if all(cols % v == 0 and (p["bk"] // 2) * (cols // v) % threads == 0
                        and (threads % (cols // v) == 0 or (cols // v) % threads == 0) for v in vs))


def family_buffers(p) -> int:
    """Shared-memory tile buffers of gemm.cu: two (stages = 0), else one per stage."""
    return max(2, p["stages"])


def family_smem(p) -> int:
    """Dynamic shared memory of gemm.cu: per buffer a BK x (BM+4) and a BK x (BN+4) tile; with ks k
    slices at least the ks - 1 tiles of sums handed to slice 0 (they reuse the buffers)."""
    return max(family_buffers(p) * p["bk"] * (p["bm"] + p["bn"] + 8), (p.get("ks", 1) - 1) * p["bm"] * p["bn"]) * 4


def family_regs_estimate(p) -> int:
    """Registers a config needs at least (accumulators, two fragment sets, the tile staged in
    registers when stages = 0, ~24 for pointers and indices; with mma: the 64 accumulators, as
    many again for the small products (mma = 3), the fragments split in two, ~60 for addresses, as
    ptxas allocates them: 225-250 and 125-170); the tuner prunes on it before compiling, ptxas has
    the last word."""
    if p.get("mma", 0):
        return 224 if p["mma"] == 3 else 124
    staged = (p["bm"] * p["bk"] + p["bk"] * p["bn"]) // family_threads(p) if p["stages"] == 0 else 0
    return p["tm"] * p["tn"] + 2 * (p["tm"] + p["tn"]) + staged + 24


def _warps_fit(p) -> bool:
    ln = p["ln"]
    return 32 % ln == 0 and (p["bn"] // p["tn"]) % ln == 0 and (p["bm"] // p["tm"]) % (32 // ln) == 0


FAMILY_CONSTRAINTS = (
    _c("bm and bn are positive", lambda p, lim: p["bm"] > 0 and p["bn"] > 0),
    _c("tm and tn are 4, 8, 12 or 16 (4 x 4 patches, LDS.128 fragments)",
       lambda p, lim: p["tm"] in (4, 8, 12, 16) and p["tn"] in (4, 8, 12, 16)),
    _c("bm % tm == 0 and bn % tn == 0", lambda p, lim: p["bm"] % p["tm"] == 0 and p["bn"] % p["tn"] == 0),
    _c("bk is a positive multiple of 4", lambda p, lim: p["bk"] > 0 and p["bk"] % 4 == 0),
    _c("ln divides 32 and warps of (32/ln) x ln threads tile the (bm/tm) x (bn/tn) thread grid",
       lambda p, lim: p["bm"] % p["tm"] == 0 and p["bn"] % p["tn"] == 0 and _warps_fit(p)),
    _c("(bm/tm)*(bn/tn)*ks threads is a multiple of 32 and <= max threads per block",
       lambda p, lim: family_threads(p) % 32 == 0 and 0 < family_threads(p) <= lim.max_threads_per_block),
    _c("the bm x bk and bk x bn tiles split into float4 loads, one column per thread, in both layouts",
       lambda p, lim: all(_tile_loads(r, c, family_threads(p)) for r, c in
                          ((p["bm"], p["bk"]), (p["bk"], p["bm"]), (p["bk"], p["bn"]), (p["bn"], p["bk"])))),
    _c("stages is 0 (through registers) or 2..8 (cp.async); with cp.async, bk is 4 or a multiple of 8",
       lambda p, lim: p["stages"] == 0 or (2 <= p["stages"] <= 8 and (p["bk"] == 4 or p["bk"] % 8 == 0))),
    _c("max(max(2, stages) * bk * (bm + bn + 8), (ks - 1) * bm * bn) * 4 bytes <= shared memory per block",
       lambda p, lim: family_smem(p) <= lim.smem_per_block_optin),
    _c("minb >= 0, and minb blocks fit on an SM (threads, shared memory, >= the register estimate)",
       lambda p, lim: p["minb"] >= 0 and p["minb"] * family_threads(p) <= lim.max_threads_per_sm
       and p["minb"] * (family_smem(p) + 1024) <= lim.smem_per_sm
       and family_regs_estimate(p) <= min(255, lim.regs_per_sm // max(1, p["minb"] * family_threads(p)))),
    _SWIZZLE,
    _c("splits >= 1", lambda p, lim: p["splits"] >= 1),
    _c("order is 0 (FFMAs row by row) or 1 (serpentine rows)", lambda p, lim: p["order"] in (0, 1)),
    _c("sk is 0 (a block per tile), 1 (stream-K, which takes splits = 1) or 2 (split-K summed in the kernel)",
       lambda p, lim: p["sk"] in (0, 1, 2) and (p["sk"] != 1 or p["splits"] == 1)),
    _c("mma is 0 (FFMA), 1 (TF32 tensor cores) or 3 (TF32x3)", lambda p, lim: p["mma"] in (0, 1, 3)),
    _c("ks (k slices a block) is 1, or 2..4 with stages >= 2, mma = 0, sk = 0, bk an even multiple of ks "
       "(the fragments alternate between two buffers) and (bm/tm)*(bn/tn) a multiple of 32",
       lambda p, lim: p["ks"] == 1 or (2 <= p["ks"] <= 4 and p["stages"] >= 2 and p["mma"] == 0 and p["sk"] == 0
                                       and p["bk"] % (2 * p["ks"]) == 0
                                       and (p["bm"] // p["tm"]) * (p["bn"] // p["tn"]) % 32 == 0)),
    _c("with mma: tm = tn = 8, bm a multiple of 64 and bn of 32 (warps of 64 x 32), bk a multiple of 8, "
       "stages >= 2", lambda p, lim: p["mma"] == 0 or (p["tm"] == p["tn"] == 8 and p["bm"] % 64 == 0
                                                       and p["bn"] % 32 == 0 and p["bk"] % 8 == 0 and p["stages"] >= 2)),
)

FAMILY = KernelSpec(
    name="gemm",
    file="gemm.cu",
    summary="the production family: rung 8 with every tile size a parameter, batches, alpha/beta, split-K, "
            "stream-K; rung 9's tensor-core products with mma = 1 or 3",
    source="beyond the sources: rung 8 generalised (docs/perf-notes.md)",
    # the best config of the H100/H200 sweeps at 4096^3 and 8192^3 (selection.HUGE; rung 8's shape)
    defaults={"bm": 256, "bn": 128, "bk": 8, "tm": 16, "tn": 8, "ln": 2, "minb": 1, "swizzle": 8,
              "stages": 3, "splits": 1, "order": 1, "sk": 0, "mma": 0, "ks": 1},
    block=lambda p: (family_threads(p), 1, 1),
    tile=lambda p: (p["bm"], p["bn"]),
    smem=family_smem,
    constraints=FAMILY_CONSTRAINTS,
    vec=True,
    row_classes=True,
    linear_grid=True,
    entry="tilegemm_gemm",
    runtime=("splits",), waits=True,
    extra={"SK_SPREAD": builds.SK_SPREAD}, ptxas=builds.ptxas_options,  # stream-K's shared adds; ptxas options by build
)

REDUCE = KernelSpec(
    name="splitk_reduce", file="splitk_reduce.cu", summary="split-K: add the partial products",
    defaults={}, block=lambda p: (256, 1, 1), tile=lambda p: (1, 1), entry="tilegemm_splitk_reduce",
    waits=True,
)

# the Hopper tensor-core path's copy of an operand whose rows TMA cannot read into 16-byte aligned rows
PACK = KernelSpec(
    name="pack", file="pack.cu", summary="an operand copied into 16-byte aligned rows (for TMA)",
    defaults={}, block=lambda p: (256, 1, 1), tile=lambda p: (1, 1), entry="tilegemm_pack", waits=True,
)

PACK_T = KernelSpec(
    name="pack_t", file="pack.cu", summary="an operand's transposed copy (for the TF32 path's K-major operands)",
    defaults={}, block=lambda p: (256, 1, 1), tile=lambda p: (1, 1), entry="tilegemm_pack_t", waits=True,
)


def check_kernel_precision(spec: "KernelSpec", config, precision: str) -> None:
    """A rung computes one precision, and the family's config may name its "mma": either must agree
    with ``precision`` (no silent change of precision)."""
    if spec is not FAMILY and spec.precision != precision:
        raise ValueError(f"kernel={spec.name!r} computes {spec.precision}, but precision={precision!r}; pass "
                         f"precision={spec.precision!r} to run it")
    if spec is FAMILY and config and "mma" in config and config["mma"] != PRECISIONS[precision]:
        want = {v: k for k, v in PRECISIONS.items()}.get(config["mma"])
        raise ValueError(f"config['mma'] = {config['mma']!r} computes {want or 'nothing'}, but precision={precision!r}; "
                         f"leave 'mma' out of config (precision= sets it)")


# the tensor-core path on Hopper (precision tf32x3 / tf32, sm_90): rung 10's kernel with its pass count
# a parameter; not a kernel= name (the call's precision picks it), launched by launch.wgmma_launcher
WGMMA_FAMILY = dataclasses.replace(
    RUNGS["10_wgmma_tf32x3"], name="gemm_wgmma", extra={},
    summary="the tensor-core path on Hopper: rung 10 with alpha/beta, split-K, TF32 or TF32x3",
    defaults={**RUNGS["10_wgmma_tf32x3"].defaults, "tg_mma_passes": 3},
    constraints=RUNGS["10_wgmma_tf32x3"].constraints + (
        _c("tg_mma_passes is 1 (TF32) or 3 (TF32x3)", lambda p, lim: p["tg_mma_passes"] in (1, 3)),))


def _tf32_smem(p) -> int:
    """wgmma_tf32.cu's shared memory: stages of [A 128 x 32 | B^T bn x 32] floats, the mbarriers, and
    1024 bytes to align the tiles (the 128-byte swizzle)."""
    return p["stages"] * (128 + p["bn"]) * 32 * 4 + 16 * p["stages"] + 1024


# precision "tf32" on Hopper: operands through TMA to wgmma with no producer pass, B K-major from shared
# memory, A K-major from shared memory or M-major from registers (TN transposes one operand first)
WGMMA_TF32 = KernelSpec(
    name="gemm_wgmma_tf32", file="wgmma_tf32.cu",
    summary="the tensor-core path's TF32: wgmma fed by TMA, no producer pass, 128 x 256 tiles, persistent",
    source="PTX ISA wgmma, TMA, mbarrier; docs/perf-notes.md",
    defaults={"bn": 256, "stages": 4, "swizzle": 8, "tg_p_mn": 0, "tg_swap": 0},
    block=lambda p: (384, 1, 1), tile=lambda p: (128, p["bn"]), linear_grid=True,
    entry="tilegemm_wgmma_tf32", smem=_tf32_smem, precision="tf32", archs=("sm_90a",),
    constraints=(
        _c("bn is 128 or 256 (wgmma m64n128k8 or m64n256k8)", lambda p, lim: p["bn"] in (128, 256)),
        _c("stages >= 2", lambda p, lim: p["stages"] >= 2),
        _c("tg_p_mn and tg_swap are 0 or 1", lambda p, lim: p["tg_p_mn"] in (0, 1) and p["tg_swap"] in (0, 1)),
        _c("stages * (128 + bn) * 128 bytes (+ 1 KB) <= shared memory per block",
           lambda p, lim: _tf32_smem(p) <= lim.smem_per_block_optin),
        _SWIZZLE,
    ),
)


def get(name: str) -> KernelSpec:
    if not isinstance(name, str):
        raise TypeError(f"kernel must be a kernel name (a str), got {type(name).__name__} {name!r}; "
                        f"choose one of {[FAMILY.name] + sorted(RUNGS)}")
    if name == FAMILY.name:
        return FAMILY
    try:
        return RUNGS[name]
    except KeyError:
        raise ValueError(
            f"kernel={name!r} is not a tilegemm kernel; choose one of {[FAMILY.name] + sorted(RUNGS)}"
        ) from None
