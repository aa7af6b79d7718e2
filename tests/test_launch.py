"""GPU-free: the launch records against the kernels, and the programs of launches each path builds.

The kernels' parameter lists (launch.GEMM, REDUCE, RUNG) are read back from the .cu files.  The
programs are built by dispatch.build with the launchers stubbed (no compile, no GPU): their grids,
their arguments by name, the pointers patched per run and the workspaces are checked against the
path's arithmetic; the GPU tests check the results themselves.
"""

import enum
import re
from types import SimpleNamespace

import numpy as np
import pytest

from tilegemm import access, builds, dispatch, launch, registry, runtime, steps
from tilegemm.arrays import Operand
from tilegemm.compiler import KERNEL_DIR
from tilegemm.plan import plan


def _c_params(text: str) -> list[tuple[str, str]]:
    out = []
    for p in text.split(","):
        p = re.sub(r"\b(const|__restrict__|__grid_constant__)\b", " ", p).strip()
        p = p.replace("TgTensorMap", "tmap")
        ptr = "*" in p
        words = p.replace("*", " ").split()
        name, ctype = words[-1], " ".join(words[:-1])
        out.append((name, "ptr" if ptr else ctype))
    return out


def _declared(sig: launch.Signature, folder=KERNEL_DIR) -> list[tuple[str, str]]:
    src = (folder / sig.file).read_text()
    if sig is launch.RUNG:
        m = re.search(r"#define TG_GEMM_PARAMS((?:.*\\\n)*.*)", src)
        return _c_params(m.group(1).replace("\\\n", " "))
    m = re.search(r'extern "C" __global__ void\b.*?\b' + sig.entry + r"\((.*?)\)\s*\{", src, re.S)
    return _c_params(m.group(1))


@pytest.mark.parametrize("sig", [launch.GEMM, launch.REDUCE, launch.RUNG, launch.WGMMA, launch.PACK], ids=lambda s: s.entry)
def test_signatures_match_the_kernels(sig):
    assert _declared(sig) == list(sig.fields)


@pytest.mark.parametrize("name", ["BANK_PROBE", "BW_PROBE", "FP32_PEAK", "TF32_PEAK"])
def test_probe_signatures_match_the_probe_kernels(name):
    from tilegemm.instruments import probe

    sig = getattr(probe, name)
    assert _declared(sig, probe.PROBE_KERNELS) == list(sig.fields)


def test_every_rung_uses_the_shared_signature():
    for spec in registry.RUNGS.values():
        src = (KERNEL_DIR / spec.file).read_text()
        assert not spec.waits
        if spec.entry == launch.WGMMA.entry:  # rung 10 reads its operands through TMA tensor maps
            continue
        assert "tilegemm_kernel(TG_GEMM_PARAMS)" in src, spec.file
        assert spec.entry == launch.RUNG.entry


@pytest.mark.parametrize("spec", [registry.FAMILY, registry.REDUCE, registry.PACK, registry.PACK_T], ids=lambda s: s.name)
def test_kernels_launched_as_dependents_wait_first(spec):
    src = (KERNEL_DIR / spec.file).read_text()
    body = src[src.index(spec.entry + "("):]
    body = body[body.index("{") + 1:]
    first = [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    assert spec.waits and any("griddepcontrol.wait" in ln for ln in first[:4]), first[:4]


def test_values_by_name():
    v = launch.RUNG.values(M=1, N=2, K=3, A=4, lda=5, B=6, ldb=7, C=8, ldc=9)
    assert v == [1, 2, 3, 4, 5, 6, 7, 8, 9] and launch.RUNG.slot("C") == 7
    with pytest.raises(TypeError, match=r"missing arguments \['ldc'\], unknown \['ldd'\]"):
        launch.RUNG.values(M=1, N=2, K=3, A=4, lda=5, B=6, ldb=7, C=8, ldd=9)
    assert isinstance(launch.GEMM.values(**{n: 1 for n, _ in launch.GEMM.fields})[launch.GEMM.slot("alpha")], float)


# --------------------------------------------------------------------------- programs, stubbed launchers


class Prepared:
    def __init__(self, grid, pdl, log):
        self.grid, self.pdl, self.log = grid, pdl, log

    def __call__(self, args, stream):
        self.log.append((self.grid, list(args)))


class FakeLauncher:
    def __init__(self, spec, config, vec, log):
        self.spec, self.params, self.vec, self.log = spec, spec.params(dict(config)), vec, log
        self.signature = launch.SIGNATURES[spec.entry]
        self.device = 0

    def prepare(self, grid, pdl):
        return Prepared(grid, pdl and self.spec.waits, self.log)

    def resident_blocks(self):
        return 2 * 132


@pytest.fixture
def stubs(monkeypatch):
    log, built = [], []

    def launcher(name, layout, vec, device, config=(), lds=()):
        fn = FakeLauncher(registry.get(name), config, vec, log)
        built.append((name, layout, vec, dict(config)))
        stubs_lds.append(tuple(lds))
        return fn

    stubs_lds = []

    monkeypatch.setattr(dispatch, "launcher", launcher)
    monkeypatch.setattr(steps, "reducer", lambda device: FakeLauncher(registry.REDUCE, (), 1, log))
    monkeypatch.setattr(steps, "packer", lambda device: FakeLauncher(registry.PACK, (), 1, log))
    monkeypatch.setattr(steps, "transposer", lambda device: FakeLauncher(registry.PACK_T, (), 1, log))
    monkeypatch.setattr(launch, "workspace", lambda floats, stream: SimpleNamespace(data=SimpleNamespace(ptr=WORK)))
    monkeypatch.setattr(launch, "sk_flags", lambda device, stream, blocks: (0x800000, 7))
    monkeypatch.setattr(dispatch.gpu, "device_properties", lambda device=0: SimpleNamespace(arch=ARCH[0], name=NAME[0]))
    return SimpleNamespace(log=log, built=built, lds=stubs_lds)


ARCH = ["sm_90"]  # the arch the stubbed device reports (builds.ARCH_MINB is per arch)
NAME = ["NVIDIA H100 80GB HBM3"]  # its name (access.A_TRANSPOSE_GPUS: NN runs as NN there)


WORK = 0x900000


F32 = np.dtype(np.float32)


def op(name, shape, strides=None, ptr=0x100000):
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
    return Operand(name, "cupy", None, tuple(shape), tuple(strides), F32, 0, ptr)


def args(sig, values) -> dict:
    return {n: values[i] for i, (n, _) in enumerate(sig.fields)}


BIG = {"bm": 128, "bn": 128, "bk": 8, "tm": 16, "tn": 8, "ln": 8, "minb": 2, "swizzle": 8, "stages": 3}
HUGE = {"bm": 256, "bn": 128, "bk": 8, "tm": 16, "tn": 8, "ln": 2, "minb": 1, "swizzle": 8, "stages": 3}
PA, PB, PD = 0x10000000, 0x20000000, 0x30000000


def run(p, cfg, stubs):
    prog = dispatch.build(p, 0, (PA, PB, 0, PD), lambda key, precision: cfg)
    prog.run(PA, PB, 0, PD, stream=None)
    return prog, [(g, a) for g, a in stubs.log]


def test_one_tile_per_block(stubs):
    p = plan(op("a", (1000, 300), ptr=PA), op("b", (300, 700), ptr=PB), op("out", (1000, 700), ptr=PD))
    prog, launches = run(p, {**BIG, "splits": 1}, stubs)
    assert prog.work_floats == 0 and not prog.swap and len(launches) == 1
    grid, a = launches[0]
    assert grid == (8 * 6, 1, 1)
    g = args(launch.GEMM, a)
    assert (g["M"], g["N"], g["K"], g["lda"], g["ldb"], g["ldd"], g["A"], g["B"], g["D"]) == \
        (1000, 700, 300, 300, 700, 700, PA, PB, PD)
    assert (g["splits"], g["k_split"], g["alpha"], g["beta"], g["count"]) == (1, 300, 1.0, 0.0, 1)
    assert stubs.built == [("gemm", "NN", 4, BIG)]


def test_a_column_major_result_swaps_the_operands(stubs):
    out = op("out", (1000, 700), strides=(1, 1000), ptr=PD)  # column-major
    p = plan(op("a", (1000, 300), ptr=PA), op("b", (300, 700), ptr=PB), out)
    prog, launches = run(p, {**BIG, "splits": 1}, stubs)
    g = args(launch.GEMM, launches[0][1])
    assert prog.swap and (g["M"], g["N"], g["A"], g["B"], g["ldd"]) == (700, 1000, PB, PA, 1000)
    assert stubs.built[0][1] == "TT"  # b^T and a^T are column-major views of row-major arrays


def test_split_k_writes_a_workspace_then_reduces(stubs):
    p = plan(op("a", (96, 3000), ptr=PA), op("b", (3000, 130), ptr=PB))
    prog, launches = run(p, {**BIG, "splits": 4}, stubs)
    ldw = 132  # 130 rounded up to a multiple of 4
    assert prog.work_floats == 4 * 96 * ldw and len(launches) == 2
    (g_grid, g_args), (r_grid, r_args) = launches
    g, r = args(launch.GEMM, g_args), args(launch.REDUCE, r_args)
    assert g_grid == (1 * 2, 1, 4) and (g["D"], g["ldd"], g["sD"], g["alpha"], g["beta"]) == (WORK, ldw, 96 * ldw,
                                                                                               1.0, 0.0)
    assert g["k_split"] == 752 and g["splits"] == 4  # ceil(3000 / 4) = 750, rounded up to a multiple of 4
    assert (r["W"], r["ldw"], r["D"], r["ldd"], r["splits"], r["batches"]) == (WORK, ldw, PD, 130, 4, 1)
    assert r_grid == (1, 96, 1) and r["vec"] == 1  # 130 columns: no float4


def test_splits_are_clamped_to_the_depth(stubs):
    p = plan(op("a", (64, 8), ptr=PA), op("b", (8, 64), ptr=PB), op("out", (64, 64), ptr=PD))
    _, launches = run(p, {**BIG, "splits": 16}, stubs)
    assert args(launch.GEMM, launches[0][1])["splits"] == 2  # at most ceil(K / 4)


def test_no_split_is_left_empty(stubs):
    # K = 17 in 4 splits: ceil(17 / 4) = 5, rounded up to 8 a split, which 3 splits cover; a fourth would
    # start past K and only add zeros
    p = plan(op("a", (64, 17), ptr=PA), op("b", (17, 64), ptr=PB), op("out", (64, 64), ptr=PD))
    _, launches = run(p, {**BIG, "splits": 4}, stubs)
    (grid, a), (_, r) = launches
    g = args(launch.GEMM, a)
    assert (g["splits"], g["k_split"], grid[2]) == (3, 8, 3) and args(launch.REDUCE, r)["splits"] == 3


def test_stream_k_takes_the_resident_grid_and_its_flags(stubs):
    p = plan(op("a", (3000, 500), ptr=PA), op("b", (500, 1000), ptr=PB), op("out", (3000, 1000), ptr=PD))
    prog, launches = run(p, {**BIG, "splits": 1, "sk": 1}, stubs)
    grid, a = launches[0]
    g = args(launch.GEMM, a)
    assert grid == (264, 1, 1) and prog.work_floats == 2 * 264 * 128 * 128  # a head and a tail slot a block
    assert prog.steps[0].flags[2] == 2 * 264  # and a flag for each
    assert (g["W"], g["flags"], g["epoch"], g["first"]) == (WORK, 0x800000, 7, 0)


def test_split_k_summed_in_the_kernel_runs_whole_tiles_per_launch(stubs):
    p = plan(op("a", (2000, 1000), ptr=PA), op("b", (1000, 2000), ptr=PB), op("out", (2000, 2000), ptr=PD))
    prog, launches = run(p, {**BIG, "splits": 4, "sk": 2}, stubs)
    units = 16 * 16 * 4
    assert [lg for lg, _ in launches] == [(264, 1, 1)] * (units // 264) + [(units % 264, 1, 1)]
    assert [args(launch.GEMM, a)["first"] for _, a in launches] == list(range(0, units, 264))
    assert prog.work_floats == 264 * 128 * 128


def test_batches_beyond_the_grid_limit_take_several_launches(stubs):
    p = plan(op("a", (70000, 2, 3), ptr=PA), op("b", (70000, 3, 2), ptr=PB), op("out", (70000, 2, 2), ptr=PD))
    _, launches = run(p, {**BIG, "splits": 1}, stubs)
    assert [lg[2] for lg, _ in launches] == [65535, 70000 - 65535]
    second = args(launch.GEMM, launches[1][1])
    assert (second["A"], second["B"], second["D"], second["count"]) == (PA + 4 * 65535 * 6, PB + 4 * 65535 * 6,
                                                                       PD + 4 * 65535 * 4, 70000 - 65535)


def test_k_zero_only_scales_c(stubs):
    p = plan(op("a", (5, 0), ptr=PA), op("b", (0, 7), ptr=PB), op("out", (5, 7), ptr=PD))
    prog, launches = run(p, None, stubs)
    r = args(launch.REDUCE, launches[0][1])
    assert prog.config is None and len(launches) == 1 and (r["splits"], r["D"], r["alpha"]) == (0, PD, 1.0)


def test_a_rung_launches_once_per_product(stubs):
    p = plan(op("a", (3, 40, 30), ptr=PA), op("b", (30, 50), ptr=PB), op("out", (3, 40, 50), ptr=PD),
             kernel="02_smem_tiled")
    prog, launches = run(p, None, stubs)
    assert prog.config is None and len(launches) == 3
    assert [args(launch.RUNG, a)["A"] for _, a in launches] == [PA + 4 * i * 1200 for i in range(3)]
    assert [args(launch.RUNG, a)["B"] for _, a in launches] == [PB] * 3  # b broadcasts
    assert [args(launch.RUNG, a)["C"] for _, a in launches] == [PD + 4 * i * 2000 for i in range(3)]
    assert launches[0][0] == (4, 3, 1)


def _built_widths(stubs, pa=PA, pb=PB, pd=PD, config=None, **shapes):
    p = plan(op("a", shapes.get("a", (64, 64)), ptr=pa), op("b", shapes.get("b", (64, 64)), ptr=pb),
             op("out", shapes.get("out", (64, 64)), ptr=pd))
    dispatch.build(p, 0, (pa, pb, 0, pd), lambda key, precision: config or {**BIG, "splits": 1})
    return stubs.built[-1][2]


def test_unaligned_operands_take_narrow_accesses_for_themselves_only(stubs):
    # NN with cp.async: A's tile is copied 4 bytes at a time whatever its alignment
    assert _built_widths(stubs, pa=PA + 4) == 4
    assert _built_widths(stubs, pb=PB + 4) == (4, 1, 4)
    assert _built_widths(stubs, pd=PD + 4) == (4, 4, 1)
    assert _built_widths(stubs, pa=PA + 4, pb=PB + 4, pd=PD + 4) == (4, 1, 1)
    # a row length that is not a multiple of 4 floats: B (63 columns) and D; BIG's build (the 128 x 128
    # candidate's) reads B's rows of odd length by rows (access.ODD_ROWS), HUGE's 4 bytes at a time
    assert _built_widths(stubs, b=(64, 63), out=(64, 63)) == (4, access.ODD_ROWS, 1)
    assert _built_widths(stubs, b=(64, 63), out=(64, 63), config={**HUGE, "splits": 1}) == (4, 1, 1)
    # rows of twice an odd length (62 columns) from a 16-byte aligned start: BIG's build reads B's by
    # rows (access.ODD_PAIRS), HUGE's (B's tile does not split into whole 16-byte copies a thread) 8
    # bytes at a time; D is written 8 bytes at a time in both
    assert _built_widths(stubs, b=(64, 62), out=(64, 62)) == (4, access.ODD_PAIRS, 2)
    assert stubs.built[-1][3]["minb"] == 2
    assert _built_widths(stubs, b=(64, 62), out=(64, 62), config={**HUGE, "splits": 1}) == (4, 2, 2)
    assert _built_widths(stubs, pb=PB + 8, b=(64, 64), out=(64, 64)) == (4, 2, 4)  # every row 8 bytes off
    # 64x64f stream-K reads both classes by rows at its own minb (builds.BY_ROWS_MINB), aligned rows at the tile's
    sk = {"bm": 64, "bn": 64, "tm": 8, "tn": 8, "ln": 8, "minb": 4, "bk": 8, "swizzle": 8, "stages": 3, "sk": 1}
    assert _built_widths(stubs, a=(64, 4000), b=(4000, 63), out=(64, 63), config={**sk, "splits": 1}) == (4, 3, 1)
    assert stubs.built[-1][3]["minb"] == 5
    assert _built_widths(stubs, a=(64, 4000), b=(4000, 62), out=(64, 62), config={**sk, "splits": 1}) == (4, 6, 2)
    assert stubs.built[-1][3]["minb"] == 5
    assert _built_widths(stubs, a=(64, 4000), b=(4000, 64), out=(64, 64), config={**sk, "splits": 1}) == 4
    assert stubs.built[-1][3]["minb"] == 4
    # 64x128 reads rows of twice an odd length by rows at minb 4 (builds.BY_ROWS_MINB), rows of odd
    # length 4 bytes at a time and aligned rows at the tile's minb 0
    wide = {"bm": 64, "bn": 128, "tm": 8, "tn": 8, "ln": 8, "minb": 0, "bk": 8, "swizzle": 8, "stages": 3}
    for cfg in ({**wide, "splits": 1}, {**wide, "sk": 2, "splits": 4}):  # the tile's build and its summed one
        assert _built_widths(stubs, a=(64, 4000), b=(4000, 62), out=(64, 62), config=cfg) == (4, access.ODD_PAIRS, 2)
        assert stubs.built[-1][3]["minb"] == 4
        assert _built_widths(stubs, a=(64, 4000), b=(4000, 64), out=(64, 64), config=cfg) == 4
        assert stubs.built[-1][3]["minb"] == 0
        assert _built_widths(stubs, a=(64, 4000), b=(4000, 63), out=(64, 63), config=cfg) == (4, 1, 1)
        assert stubs.built[-1][3]["minb"] == 0
    # 128x64 reads B's rows narrow in NN at minb 4 on sm_90 (builds.ARCH_MINB: the 16-byte build's blocks
    # an SM), aligned rows, a narrow result alone and other archs at the tile's minb 0, split or not
    tall = {"bm": 128, "bn": 64, "tm": 8, "tn": 8, "ln": 8, "minb": 0, "bk": 8, "swizzle": 8, "stages": 3}
    for cfg in ({**tall, "splits": 1}, {**tall, "splits": 4}):
        for cols, widths in ((63, (4, 1, 1)), (62, (4, 2, 2)), (64, 4)):
            got = _built_widths(stubs, a=(64, 4000), b=(4000, cols), out=(64, cols), config=cfg)
            assert got == (widths if cfg["splits"] == 1 or widths == 4 else (4, widths[1], 4))
            assert stubs.built[-1][3]["minb"] == (0 if cols == 64 else builds.ARCH_MINB["sm_90"]["128x64"][1])
        assert _built_widths(stubs, pd=PD + 4, config=cfg) == ((4, 4, 1) if cfg["splits"] == 1 else 4)
        assert stubs.built[-1][3]["minb"] == 0
        ARCH[0] = "sm_80"
        try:
            assert _built_widths(stubs, a=(64, 4000), b=(4000, 63), out=(64, 63), config=cfg)[1] == 1
            assert stubs.built[-1][3]["minb"] == 0
        finally:
            ARCH[0] = "sm_90"
    # summed in the kernel, 128x64 runs at minb 4 on sm_90 at every width of B (four blocks an SM, not
    # three), 64x64 at minb 6 where it reads B's rows narrow; on sm_80 at minb 0
    summed = {"sk": 2, "splits": 4}
    small = {"bm": 64, "bn": 64, "tm": 8, "tn": 4, "ln": 8, "minb": 0, "bk": 8, "swizzle": 8, "stages": 3}
    for cfg, minbs in (({**tall, **summed}, (4, 4, 4)), ({**small, **summed}, (6, 6, 0))):
        for cols, minb in zip((63, 62, 64), minbs):
            _built_widths(stubs, a=(64, 4000), b=(4000, cols), out=(64, cols), config=cfg)
            assert stubs.built[-1][3]["minb"] == minb, (cfg, cols)
        ARCH[0] = "sm_80"
        try:
            _built_widths(stubs, a=(64, 4000), b=(4000, 63), out=(64, 63), config=cfg)
            assert stubs.built[-1][3]["minb"] == 0
        finally:
            ARCH[0] = "sm_90"
    # the register pipeline reads A along its rows 16 bytes at a time where it can
    assert _built_widths(stubs, pa=PA + 4, config={**BIG, "stages": 0, "splits": 1}) == (1, 4, 4)
    assert _built_widths(stubs, pa=PA + 4, pb=PB + 4, pd=PD + 4, config={**BIG, "stages": 0, "splits": 1}) == 1
    # C is read 4 bytes at a time: its alignment never narrows the build
    pc = 0x40000004
    p = plan(op("a", (64, 64), ptr=PA), op("b", (64, 64), ptr=PB), op("out", (64, 64), ptr=PD),
             c=op("c", (64, 64), ptr=pc), beta=1.0)
    dispatch.build(p, 0, (PA, PB, pc, PD), lambda key, precision: {**BIG, "splits": 1})
    assert stubs.built[-1][2] == 4
    # TN: A as a transposed view is copied along its rows (m), 16 bytes at a time where it can
    p = plan(op("a", (64, 64), strides=(1, 64), ptr=PA + 4), op("b", (64, 64), ptr=PB), op("out", (64, 64), ptr=PD))
    dispatch.build(p, 0, (PA + 4, PB, 0, PD), lambda key, precision: {**BIG, "splits": 1})
    assert stubs.built[-1][1:3] == ("TN", (1, 4, 4))
    # split over K, the kernel writes the workspace (padded rows): D's alignment does not matter
    assert _built_widths(stubs, pd=PD + 4, config={**BIG, "splits": 4}) == 4
    assert _built_widths(stubs, pd=PD + 4, config={**BIG, "splits": 4, "sk": 2}) == (4, 4, 1)


def test_the_selection_sees_the_oriented_problem(stubs):
    seen = []
    out = op("out", (300, 200), strides=(1, 300), ptr=PD)
    p = plan(op("a", (300, 50), ptr=PA), op("b", (50, 200), ptr=PB), out)
    dispatch.build(p, 0, (PA, PB, 0, PD), lambda key, precision: seen.append(key) or {**BIG, "splits": 1})
    assert seen == [("TT", 200, 300, 50, 1)]


def test_a_misaligned_operand_is_copied_where_the_copy_pays(stubs):
    # NN, B of 301 columns (rows not 16-byte aligned), 4096 rows of A: 4096 >= COPY_MACS_PER_ELEMENT
    # multiply-adds per element of B, so B is copied into rows of 304 floats after the split planes
    M, N, K = 4096, 301, 1000
    p = plan(op("a", (M, K), ptr=PA), op("b", (K, N), ptr=PB), op("out", (M, N), ptr=PD))
    prog, launches = run(p, {**BIG, "splits": 2}, stubs)
    ldw = 304
    planes = 2 * M * ldw
    assert [len(a) for _, a in launches][0] == len(launch.PACK.fields)
    pk, g = args(launch.PACK, launches[0][1]), args(launch.GEMM, launches[1][1])
    dst = WORK + 4 * (-(-planes // 64) * 64)
    assert (pk["rows"], pk["cols"], pk["src"], pk["lds"], pk["dst"], pk["ldd"]) == (K, N, PB, N, dst, 304)
    assert (g["B"], g["ldb"], g["A"], g["lda"], g["D"], g["ldd"]) == (dst, 304, PA, K, WORK, ldw)
    assert prog.work_floats == -(-planes // 64) * 64 + K * 304
    assert stubs.built[-1][2] == 4  # B's copy aligned, D is the workspace
    assert stubs.lds[-1] == (K, 304)  # the copy's leading dimension decides on 64-bit offsets
    assert len(launches) == 3  # the copy, the kernel, the reduction


def test_copies_launch_as_dependents_where_the_call_asks(stubs):
    # the copies wait first (pack.cu), so they follow the kernel before them as PDL dependents, as the
    # family's kernels do, unless the call passes pdl=False
    M, N, K = 4096, 301, 1000
    nt = Operand("b", "cupy", None, (K, N), (1, K + 1), F32, 0, PB)
    for b, sig in ((op("b", (K, N), ptr=PB), launch.PACK), (nt, launch.PACK_T)):
        for pdl in (True, False):
            p = plan(op("a", (M, K), ptr=PA), b, op("out", (M, N), ptr=PD), pdl=pdl)
            prog, _ = run(p, {**BIG, "splits": 1}, stubs)
            assert len(prog.steps) == 2 and len(prog.steps[0].args) == len(sig.fields)  # the copy, then the kernel
            assert [st.go.pdl for st in prog.steps] == [pdl, pdl]


@pytest.mark.parametrize("case", [
    ("NN", 500, 401, 1000, {}),               # too few rows of A per element of B: not worth a copy
    ("NN", 600, 302, 1000, {}),               # narrow rows of B (8-byte aligned), still too few rows of A
    ("NN", 4096, 304, 1000, {}),              # aligned already
    ("NT", 2047, 301, 1000, {}),              # B's tiles are copied 4 bytes at a time anyway (k along rows; ldb
                                              # 1001), and too few rows of A to transpose it
    ("NN", 4096, 301, 1000, {"stages": 0}),   # the register pipeline: no copies
])
def test_operands_not_copied(stubs, case):
    layout, M, N, K, extra = case
    b = Operand("b", "cupy", None, (K, N), (1, K + 1), F32, 0, PB) if layout[1] == "T" else op("b", (K, N), ptr=PB)
    p = plan(op("a", (M, K), ptr=PA), b, op("out", (M, N), ptr=PD))
    prog, launches = run(p, {**BIG, "splits": 1, **extra}, stubs)
    assert len(launches) == 1 and prog.work_floats == 0
    assert args(launch.GEMM, launches[0][1])["B"] == PB


def test_nt_runs_as_nn_on_b_transposed_where_the_copy_pays(stubs):
    # NT, B stored 301 x 2000 (ldb 2001), 2048 rows of A: 2048 >= COPY_MACS_PER_ELEMENT multiply-adds
    # per element of B and the product >= TRANSPOSE_MIN_MACS, so B is transposed into 2000 rows of
    # 304 floats after the split planes and the kernel is built for NN with aligned B
    M, N, K = 2048, 301, 2000
    b = Operand("b", "cupy", None, (K, N), (1, K + 1), F32, 0, PB)
    p = plan(op("a", (M, K), ptr=PA), b, op("out", (M, N), ptr=PD))
    prog, launches = run(p, {**BIG, "splits": 2}, stubs)
    planes = 2 * M * 304
    tr, g = args(launch.PACK_T, launches[0][1]), args(launch.GEMM, launches[1][1])
    dst = WORK + 4 * (-(-planes // 64) * 64)
    assert (tr["rows"], tr["cols"], tr["src"], tr["lds"], tr["dst"], tr["ldd"]) == (N, K, PB, K + 1, dst, 304)
    assert (g["B"], g["ldb"], g["A"], g["lda"]) == (dst, 304, PA, K)
    assert prog.work_floats == -(-planes // 64) * 64 + K * 304
    assert stubs.built[-1][1:3] == ("NN", 4)
    assert len(launches) == 3  # the transpose, the kernel, the reduction
    # run as NN, the build takes NN's minb on sm_90 (builds.ARCH_MINB): 128 x 64 summed at four blocks an
    # SM; read as NT (one row of A fewer: not transposed), the tile's own
    tall = {**builds.TILES["128x64"], "sk": 2, "splits": 3}
    run(p, tall, stubs)
    assert stubs.built[-1][1] == "NN" and stubs.built[-1][3]["minb"] == 4
    run(plan(op("a", (M - 1, K), ptr=PA), b, op("out", (M - 1, N), ptr=PD)), tall, stubs)
    assert stubs.built[-1][1] == "NT" and stubs.built[-1][3]["minb"] == 0
    # one row of A fewer, a batch, the register pipeline, the tensor cores, or a product below
    # TRANSPOSE_MIN_MACS: NT as it is, B read in place
    mma = {"bm": 64, "bn": 64, "tm": 8, "tn": 8, "ln": 8, "stages": 4, "mma": 3}  # TF32x3 on the tensor cores
    for (m, count, extra, k) in ((M - 1, 1, {}, K), (M, 2, {}, K), (M, 1, {"stages": 0}, K), (M, 1, mma, K),
                                 (M, 1, {}, 1000)):
        bb = Operand("b", "cupy", None, (k, N), (1, k + 1), F32, 0, PB) if count == 1 else \
            Operand("b", "cupy", None, (count, k, N), (k * (k + 1), 1, k + 1), F32, 0, PB)
        a = op("a", (m, k), ptr=PA) if count == 1 else op("a", (count, m, k), ptr=PA)
        out = op("out", (m, N), ptr=PD) if count == 1 else op("out", (count, m, N), ptr=PD)
        del stubs.log[:]
        prog, launches = run(plan(a, bb, out), {**BIG, "splits": 1, **extra}, stubs)
        assert len(launches) == 1 and prog.work_floats == 0 and stubs.built[-1][1] == "NT"
        assert args(launch.GEMM, launches[0][1])["B"] == PB


def test_nn_runs_as_tn_on_a_transposed_on_the_h200(stubs):
    # NN, A stored 700 x 2000 (lda 2001), 4096 columns of B: on the H200 4096 >= COPY_MACS_PER_ELEMENT multiply-adds per
    # element of A and the product >= TRANSPOSE_MIN_MACS, so A is transposed into 2000 rows of 700 floats after the
    # split planes and the kernel is built for TN with aligned A; on the H100, NN as it is
    M, N, K = 700, 4096, 2000
    a = lambda: Operand("a", "cupy", None, (M, K), (K + 1, 1), F32, 0, PA)
    p = plan(a(), op("b", (K, N), ptr=PB), op("out", (M, N), ptr=PD))
    prog, launches = run(p, {**BIG, "splits": 1}, stubs)
    assert len(launches) == 1 and prog.work_floats == 0 and stubs.built[-1][1] == "NN"
    NAME[0] = "NVIDIA H200"
    try:
        del stubs.log[:]
        prog, launches = run(p, {**BIG, "splits": 2}, stubs)
        planes = 2 * M * N
        tr, g = args(launch.PACK_T, launches[0][1]), args(launch.GEMM, launches[1][1])
        dst = WORK + 4 * (-(-planes // 64) * 64)
        assert (tr["rows"], tr["cols"], tr["src"], tr["lds"], tr["dst"], tr["ldd"]) == (M, K, PA, K + 1, dst, 700)
        assert (g["A"], g["lda"], g["B"], g["ldb"]) == (dst, 700, PB, N)
        assert prog.work_floats == -(-planes // 64) * 64 + K * 700
        assert stubs.built[-1][1:3] == ("TN", 4) and len(launches) == 3  # the transpose, the kernel, the reduction
        # the register pipeline, or fewer columns of B: NN as it is
        for extra, n in (({"stages": 0}, N), ({}, 2044)):
            del stubs.log[:]
            prog, launches = run(plan(a(), op("b", (K, n), ptr=PB), op("out", (M, n), ptr=PD)),
                                 {**BIG, "splits": 1, **extra}, stubs)
            assert len(launches) == 1 and stubs.built[-1][1] == "NN" and args(launch.GEMM, launches[0][1])["A"] == PA
    finally:
        NAME[0] = "NVIDIA H100 80GB HBM3"


def test_a_misaligned_a_is_copied_in_tn_after_the_stream_k_slots(stubs):
    M, N, K = 301, 4096, 1000
    a = Operand("a", "cupy", None, (M, K), (1, M), F32, 0, PA)  # a transposed view: K x M as stored
    p = plan(a, op("b", (K, N), ptr=PB), op("out", (M, N), ptr=PD))
    prog, launches = run(p, {**BIG, "splits": 1, "sk": 1}, stubs)
    pk, g = args(launch.PACK, launches[0][1]), args(launch.GEMM, launches[1][1])
    slots = 2 * 264 * 128 * 128
    assert (pk["rows"], pk["cols"], pk["lds"], pk["ldd"]) == (K, M, M, 304)
    assert (g["A"], g["lda"], g["B"]) == (WORK + 4 * slots, 304, PB) and pk["dst"] == g["A"]
    assert prog.work_floats == slots + K * 304
    assert stubs.built[-1][1:3] == ("TN", 4)


# --------------------------------------------------------------------------- the repeat-call memo


class _CupyLike:
    """What the memo reads of a CuPy array (its type's module says cupy): shape, byte strides, dtype, memory."""

    __module__ = "cupy._core.core"

    def __init__(self, shape, strides, ptr):
        self.shape, self.strides, self.dtype = shape, tuple(4 * s for s in strides), np.dtype(np.float32)
        self.data = SimpleNamespace(ptr=ptr, device_id=0)


def _op(name, x):
    return Operand(name, "cupy", x, x.shape, tuple(s // 4 for s in x.strides), x.dtype, 0, x.data.ptr)


def test_the_memo_redoes_the_overlap_test_exactly(monkeypatch):
    """A remembered call with out in other columns of a's buffer runs again from the memo (no element is
    shared); one whose out shares an element with a goes to the full path, which reports it."""
    from tilegemm import fastpath

    monkeypatch.setattr(fastpath, "_get_device", lambda: 0)
    monkeypatch.setattr(fastpath, "stream_for", lambda kind, device: None)
    fastpath.clear()
    base, other = 0x7F0000000000, 0x7F1000000000
    a, b = _CupyLike((4, 0), (9, 1), base), _CupyLike((0, 4), (4, 1), other)  # K = 0: nothing to launch
    out = _CupyLike((4, 4), (9, 1), base + 4 * 5)  # columns 5-8 of a 4 x 9 buffer; a is columns 0-4
    a5 = _CupyLike((4, 5), (9, 1), base)
    b5 = _CupyLike((5, 4), (4, 1), other)
    for x, y in ((a, b), (a5, b5)):
        p = plan(_op("a", x), _op("b", y), _op("out", out))
        fastpath.remember(p, None)
        assert fastpath.call(x, y, out, "gemm", None, True) is out  # a hit: run from the memo
    shifted = _CupyLike((4, 4), (9, 1), base + 4 * 4)  # columns 4-7: column 4 is also a's
    assert fastpath.call(a5, b5, shifted, "gemm", None, True) is fastpath.MISS
    with pytest.raises(ValueError, match="out overlaps a in memory"):
        plan(_op("a", a5), _op("b", b5), _op("out", shifted))
    fastpath.clear()


class _Result(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_INVALID_CONTEXT = 201


class _FakeDriver:
    """cuLaunchKernelEx answering the given results in turn."""
    CUresult = _Result
    CUlaunchConfig = SimpleNamespace

    def __init__(self, results):
        self.results, self.calls = list(results), 0

    CUfunction = CUstream = staticmethod(lambda x: x)

    def cuLaunchKernelEx(self, cfg, fn, params, extra):
        self.calls += 1
        return (self.results.pop(0),)


@pytest.mark.parametrize("results,device,launches,binds,ok", [
    ([_Result.CUDA_SUCCESS], 0, 1, 0, True),
    ([_Result.CUDA_ERROR_INVALID_CONTEXT, _Result.CUDA_SUCCESS], 0, 2, 1, True),  # bound, then launched once
    ([_Result.CUDA_ERROR_INVALID_CONTEXT, _Result.CUDA_ERROR_INVALID_CONTEXT], 0, 2, 1, False),  # retried once only
    ([_Result.CUDA_ERROR_INVALID_VALUE], 0, 1, 0, False),  # other errors: no retry
    ([_Result.CUDA_ERROR_INVALID_CONTEXT], None, 1, 0, False),  # no device to bind
], ids=["ok", "no-context", "no-context-twice", "other-error", "no-device"])
def test_a_launch_without_a_context_binds_and_retries_once(monkeypatch, results, device, launches, binds, ok):
    """A launch from a thread without a current context (CUDA_ERROR_INVALID_CONTEXT: nothing launched)
    binds its device's primary context and launches again, once; any other failure raises at once."""
    fake, bound_to = _FakeDriver(results), []
    monkeypatch.setattr(runtime, "_driver", lambda: fake)
    monkeypatch.setattr(runtime, "bind", bound_to.append)
    go = runtime.PreparedLaunch(0x1000, (1, 1, 1), (32, 1, 1), ("int",), device=device)
    if ok:
        go((7,), None)
    else:
        with pytest.raises(RuntimeError, match="cuLaunchKernelEx failed: CUDA_ERROR_INVALID"):
            go((7,), None)
    assert fake.calls == launches and len(bound_to) == binds and set(bound_to) <= {device}


def test_bound_retries_a_driver_call_once_after_binding(monkeypatch):
    answers, bound_to = [(_Result.CUDA_ERROR_INVALID_CONTEXT, None), (_Result.CUDA_SUCCESS, 5)], []
    monkeypatch.setattr(runtime, "_driver", lambda: _FakeDriver([]))
    monkeypatch.setattr(runtime, "bind", bound_to.append)
    assert runtime.bound(3, lambda: answers.pop(0)) == (_Result.CUDA_SUCCESS, 5) and bound_to == [3]
    assert runtime.bound(3, lambda: (_Result.CUDA_SUCCESS, 6)) == (_Result.CUDA_SUCCESS, 6) and bound_to == [3]
