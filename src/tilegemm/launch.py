"""Kernel launches: each kernel's parameter list as named fields, launchers, and programs.

- ``Signature``: a kernel's parameters by name and C type, defined once here and checked against
  the ``.cu`` file by a test.  Arguments are built from keywords and patched by name.
- ``Launcher``: one kernel of the registry for one layout, load width, device and config, compiled
  and loaded once; whether it may be launched as a programmatic dependent (PDL) is an option of
  each launch, allowed where the kernel waits for its predecessor and the GPU is sm_90+.
- ``Program``: the launches one call needs, with everything fixed but the operands' pointers, the
  split-K / stream-K workspace (taken per run from CuPy's pool, in the stream's order) and the
  stream-K hand-over flags.  A repeat call runs the stored program with new pointers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from . import gpu, registry, runtime
from .occupancy import Limits
from .access import WIDE_LD_MIN, needs_wide_offsets


@dataclass(frozen=True)
class Signature:
    """A kernel entry's parameters, in order: (name, C type), the type one of "int", "long long",
    "float", "ptr", "tmap" (a TMA tensor map, passed as its 128 bytes)."""

    entry: str
    file: str  # the file that declares the entry, checked by tests/test_launch.py
    fields: tuple

    def __post_init__(self):
        object.__setattr__(self, "_index", {n: i for i, (n, _) in enumerate(self.fields)})

    @property
    def types(self) -> tuple:
        return tuple(t for _, t in self.fields)

    def slot(self, name: str) -> int:
        return self._index[name]

    @classmethod
    def of(cls, entry: str, file: str, text: str) -> "Signature":
        """From "M int, lda long long, A ptr, ..." (the parameters in order)."""
        return cls(entry, file, tuple(tuple(f.strip().split(" ", 1)) for f in text.split(",")))

    def values(self, **kw) -> list:
        """The argument list: every field by name, as a Python int or float."""
        missing = [n for n, _ in self.fields if n not in kw]
        extra = [k for k in kw if k not in self._index]
        if missing or extra:
            raise TypeError(f"{self.entry}: missing arguments {missing}, unknown {extra}")
        return [float(kw[n]) if t == "float" else kw[n] if t == "tmap" else int(kw[n]) for n, t in self.fields]


# gemm.cu's tilegemm_gemm (the family)
GEMM = Signature.of("tilegemm_gemm", "gemm.cu", (
    "M int, N int, K int, A ptr, lda long long, sA long long, B ptr, ldb long long, sB long long, C ptr, "
    "ldc long long, sC long long, D ptr, ldd long long, sD long long, alpha float, beta float, k_split int, "
    "splits int, W ptr, flags ptr, epoch int, count int, first int"))
# splitk_reduce.cu's tilegemm_splitk_reduce: D = alpha * (the sum of W's splits) + beta * C
REDUCE = Signature.of("tilegemm_splitk_reduce", "splitk_reduce.cu", (
    "M int, N int, batches int, splits int, W ptr, ldw long long, C ptr, ldc long long, sC long long, D ptr, "
    "ldd long long, sD long long, alpha float, beta float, vec int"))
# every rung's tilegemm_kernel (TG_GEMM_PARAMS in tg_common.cuh): C = A B
RUNG = Signature.of("tilegemm_kernel", "tg_common.cuh", (
    "M int, N int, K int, A ptr, lda long long, B ptr, ldb long long, C ptr, ldc long long"))
# rung 10's tilegemm_wgmma (also the tensor-core path on Hopper): D = alpha A B + beta C, the operands
# read by TMA through tensor maps (tma.py), split-K planes z at D + z sD
WGMMA = Signature.of("tilegemm_wgmma", "10_wgmma_tf32x3.cu", (
    "M int, N int, K int, tA tmap, tB tmap, A ptr, lda long long, B ptr, ldb long long, C ptr, ldc long long, "
    "D ptr, ldd long long, sD long long, alpha float, beta float, k_split int"))
# wgmma_tf32.cu's tilegemm_wgmma_tf32 (precision "tf32" on Hopper): rung 10's parameters
WGMMA_TF32 = Signature("tilegemm_wgmma_tf32", "wgmma_tf32.cu", WGMMA.fields)
# pack.cu's tilegemm_pack: an operand's rows x cols view copied into rows of ldd floats (16-byte aligned)
PACK = Signature.of("tilegemm_pack", "pack.cu", (
    "rows int, cols int, src ptr, lds long long, dst ptr, ldd long long, gpr int"))
# pack.cu's tilegemm_pack_t: the transposed copy (cols x rows, rows of ldd floats)
PACK_T = Signature.of("tilegemm_pack_t", "pack.cu", "rows int, cols int, src ptr, lds long long, dst ptr, ldd long long")
SIGNATURES = {s.entry: s for s in (GEMM, REDUCE, RUNG, WGMMA, WGMMA_TF32, PACK, PACK_T)}


# --------------------------------------------------------------------------- launchers


class Launcher:
    """One kernel for one layout, load width, device and config: compiled and loaded once."""

    def __init__(self, spec: registry.KernelSpec, layout: str, vec: int, device: int, config: tuple = (),
                 wide: bool = False):
        props = gpu.device_properties(device)
        limits = Limits.from_props(props)
        self.spec = spec
        self.params = spec.params(dict(config))
        spec.check(self.params, limits)
        self.signature = SIGNATURES[spec.entry]
        self.block = spec.block(self.params)
        self.smem = spec.smem(self.params)
        self.device = device
        compiled = spec.compile(spec.compiled_params(self.params), layout, arch=props.arch, vec=vec,
                                limits=limits, wide=wide)
        self.kernel = runtime.load(compiled, device)
        self.can_pdl = spec.waits and props.major >= 9
        self._resident = None

    def prepare(self, grid, pdl: bool) -> runtime.PreparedLaunch:
        return self.kernel.prepare(grid, self.block, self.signature.types, self.smem, pdl and self.can_pdl)

    def resident_blocks(self) -> int:
        """Blocks of this kernel resident on the whole GPU at once."""
        if self._resident is None:
            per_sm = self.kernel.max_active_blocks(int(np.prod(self.block)), self.smem)
            self._resident = per_sm * gpu.device_properties(self.device).sms
        return self._resident


_launchers: dict[tuple, Launcher] = {}
_launch_lock = threading.Lock()


def _cached(key: tuple, make) -> Launcher:
    fn = _launchers.get(key)
    if fn is None:
        with _launch_lock:
            fn = _launchers.get(key) or make()
            _launchers[key] = fn
    return fn


def launcher(name: str, layout: str, vec: int, device: int, config: tuple = (), lds: tuple = ()) -> Launcher:
    """The loaded kernel for (name, layout, vec, device, config); ``lds``: the operands' leading
    dimensions, which decide whether it needs 64-bit copy offsets."""
    spec = registry.get(name)
    wide = False
    if lds and max(abs(int(ld)) for ld in lds) >= WIDE_LD_MIN:  # rare: no parsing on common calls
        wide = needs_wide_offsets(spec.tile_extent(spec.params(dict(config))), *lds)
    return _cached((name, layout, vec, device, config, wide),
                   lambda: Launcher(spec, layout, vec, device, config, wide))


def wgmma_launcher(layout: str, device: int, passes: int, tma: bool = True, bm: int = 128) -> Launcher:
    """The tensor-core path's kernel on Hopper (registry.WGMMA_FAMILY) with 3 (TF32x3) or 1 (TF32)
    passes, bm-row tiles (128, or 64 with TMA), its tiles copied by TMA or (any alignment) by
    cp.async, then with three raw B stages (the copies take longer to land: 62.4 against 61.3
    TFLOPS at 4095^3, docs/perf-notes.md)."""
    config = (("tg_mma_passes", passes), ("tg_tma", int(tma))) + ((("rs", 3),) if not tma else ()) + (
        (("bm", bm),) if bm != 128 else ())
    return _cached((registry.WGMMA_FAMILY.name, layout, device, config),
                   lambda: Launcher(registry.WGMMA_FAMILY, layout, 4, device, config))


def wgmma_tf32_launcher(device: int, bn: int = 256, p_mn: int = 0, swap: int = 0) -> Launcher:
    """Precision "tf32" on Hopper (registry.WGMMA_TF32): 128 x bn tiles, its A K-major or (p_mn)
    M-major, its result C or (swap) C^T; the call's layout is in those (hopper.tf32_operands)."""
    config = tuple((k, v) for k, v in (("bn", bn), ("tg_p_mn", p_mn), ("tg_swap", swap))
                   if v != registry.WGMMA_TF32.defaults[k])
    return _cached((registry.WGMMA_TF32.name, device, config),
                   lambda: Launcher(registry.WGMMA_TF32, "NN", 4, device, config))


def reducer(device: int) -> Launcher:
    """The split-K reduction (also D = beta * C for K = 0) on ``device``."""
    return _cached((registry.REDUCE.name, device), lambda: Launcher(registry.REDUCE, "NN", 1, device))


def packer(device: int) -> Launcher:
    """The copy of an operand into 16-byte aligned rows (pack.cu) on ``device``."""
    return _cached((registry.PACK.name, device), lambda: Launcher(registry.PACK, "NN", 1, device))


def transposer(device: int) -> Launcher:
    """The transposed copy of an operand (pack.cu's tilegemm_pack_t) on ``device``."""
    return _cached((registry.PACK_T.name, device), lambda: Launcher(registry.PACK_T, "NN", 1, device))


# --------------------------------------------------------------------------- stream-K flags

# The hand-over flags of sk = 1, 2: one int per block (two for sk = 1), per (device, stream), zeroed once; each launch
# on the stream counts up an epoch that the flags are set to, so nothing resets them (launches on
# one stream run in order; streams do not share flags; the lock keeps two threads launching on one
# stream from taking the same epoch).
_sk_state: dict[tuple, list] = {}
_sk_lock = threading.Lock()


def sk_flags(device: int, stream, blocks: int) -> tuple[int, int]:
    """(flags pointer, epoch) for a stream-K launch of ``blocks`` blocks on ``stream``."""
    cupy = gpu.cupy()
    key = (device, int(getattr(stream, "ptr", 0) or 0))
    with _sk_lock:
        st = _sk_state.get(key)
        if st is None or st[0].size < blocks:
            with cupy.cuda.Device(device):
                st = _sk_state[key] = [cupy.zeros(max(blocks, 4096), dtype=np.int32), 0]
                cupy.cuda.get_current_stream().synchronize()  # the zeros are in place before any use
        st[1] = st[1] % (2**31 - 2) + 1
        return int(st[0].data.ptr), st[1]


def workspace(floats: int, stream):
    """A float32 scratch buffer from CuPy's pool, handed out in ``stream``'s order."""
    cupy = gpu.cupy()
    with stream:
        return cupy.empty(floats, dtype=np.float32)


# --------------------------------------------------------------------------- programs

A, B, C, D, W = range(5)  # the pointers a step takes: the operands, and the workspace


@dataclass(frozen=True)
class Step:
    """One launch: its arguments with pointers patched per run (slot, pointer, byte offset), for
    stream-K launches the (flags slot, epoch slot, flags) of its hand-over flags, and ``repeat``:
    launched that many times, each pointer moved on by its ``strides`` (bytes) every time (a rung's
    batch, one launch per product)."""

    go: runtime.PreparedLaunch
    args: tuple
    ptrs: tuple
    flags: tuple | None = None
    repeat: int = 1
    strides: tuple = ()
    maps: tuple = ()  # (slot, pointer, byte offset, stride, encode): a tensor map of the pointer, per launch

    def launch(self, base: tuple, flags: tuple | None, stream, pdl: bool = True) -> None:
        """Launch on ``stream`` with the pointers ``base`` (A, B, C, D, W) and ``flags`` ((flags
        pointer, epoch) for a stream-K launch); ``pdl=False`` drops PDL from the first launch."""
        args = list(self.args)
        for slot, which, off in self.ptrs:
            args[slot] = base[which] + off
        for slot, which, off, _, encode in self.maps:
            args[slot] = encode(base[which] + off)
        if flags is not None:
            args[self.flags[0]], args[self.flags[1]] = flags
        (self.go if pdl else self.go.without_pdl())(args, stream)
        for r in range(1, self.repeat):
            for (slot, _, _), step in zip(self.ptrs, self.strides):
                args[slot] += step
            for slot, which, off, step, encode in self.maps:
                args[slot] = encode(base[which] + off + r * step)
            self.go(args, stream)


@dataclass(frozen=True)
class Program:
    """The launches of one call.  ``run(pa, pb, pc, pd, stream)`` with the call's pointers (a and b
    as the call names them; ``swap`` exchanges them for a column-major result)."""

    device: int
    swap: bool
    work_floats: int
    steps: tuple
    config: dict | None = None  # the family config it runs (None: a rung, or K = 0)
    scratch: bool = field(init=False)  # needs a workspace or hand-over flags

    def __post_init__(self):
        object.__setattr__(self, "scratch", bool(self.work_floats) or any(st.flags is not None for st in self.steps))

    def run(self, pa: int, pb: int, pc: int, pd: int, stream) -> None:
        if self.swap:
            pa, pb = pb, pa
        if self.scratch and capturing(stream):
            return self._run_captured(pa, pb, pc, pd, stream)
        work = workspace(self.work_floats, stream) if self.work_floats else None
        base = (pa, pb, pc, pd, int(work.data.ptr) if work is not None else 0)
        for st in self.steps:
            flags = sk_flags(self.device, stream, st.flags[2]) if st.flags is not None else None
            st.launch(base, flags, stream)

    def _run_captured(self, pa: int, pb: int, pc: int, pd: int, stream) -> None:
        """The same launches recorded into a CUDA graph being captured on ``stream``: the workspace
        and the hand-over flags are allocated, zeroed and freed inside the graph (stream-ordered
        allocation nodes and a memset node), so every replay starts from zeroed flags in memory
        the graph owns; the flagged launches take epochs 1, 2, ... in order.  The first launch after
        those nodes goes without PDL (its programmatic edge would follow a memory node)."""
        rt = gpu.cupy().cuda.runtime
        s = int(stream.ptr)
        work_bytes = -(-4 * self.work_floats // 256) * 256
        flag_ints = max((st.flags[2] for st in self.steps if st.flags is not None), default=0)
        mem = rt.mallocAsync(work_bytes + 4 * flag_ints, s)
        if flag_ints:
            rt.memsetAsync(mem + work_bytes, 0, 4 * flag_ints, s)
        base, epoch = (pa, pb, pc, pd, mem if self.work_floats else 0), 0
        for i, st in enumerate(self.steps):
            flags = None
            if st.flags is not None:
                epoch += 1
                flags = (mem + work_bytes, epoch)
            st.launch(base, flags, stream, pdl=i > 0)
        rt.freeAsync(mem, s)


def capturing(stream) -> bool:
    """Whether ``stream`` is capturing a CUDA graph (CuPy's or torch's capture)."""
    ptr = int(getattr(stream, "ptr", 0) or 0)
    return bool(ptr) and gpu.cupy().cuda.runtime.streamIsCapturing(ptr) != 0
