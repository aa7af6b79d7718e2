"""Compiled kernels on the GPU: a cubin loaded once per device, and launches of it.

Every launch goes through the driver's ``cuLaunchKernelEx`` with a launch config and a parameter
buffer built once per grid: a call only packs the argument values and sets the stream.  A launch
may be a programmatic dependent of the kernel before it in the stream (PDL, sm_90+): its grid may
then be scheduled while that kernel finishes, so the kernel must execute ``griddepcontrol.wait``
before it touches memory that kernel writes (gemm.cu and splitk_reduce.cu do, first thing).
"""

from __future__ import annotations

import ctypes
import struct
import threading

from . import gpu
from .compiler import CompiledKernel

# C parameter type -> how it is packed into its slot of the parameter buffer: 8 bytes, or for a TMA
# tensor map (a __grid_constant__ CUtensorMap) its 128 bytes, 64-byte aligned
SLOT = {"int": "i4x", "long long": "q", "float": "f4x", "ptr": "Q", "tmap": "128s"}


def _layout(types: tuple) -> tuple[str, list[int]]:
    """The parameter buffer's struct format (padding included) and each slot's byte offset."""
    fmt, offsets, off = "<", [], 0
    for t in types:
        align = 64 if t == "tmap" else 8
        pad = -off % align
        fmt += f"{pad}x" if pad else ""
        off += pad
        offsets.append(off)
        fmt += SLOT[t]
        off += struct.calcsize("<" + SLOT[t])
    return fmt, offsets


def _driver():
    from cuda.bindings import driver

    return driver


def check(err, what: str) -> None:
    driver = _driver()
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {getattr(err, 'name', err)}")


def bind(device: int) -> None:
    """Make ``device``'s primary context current on this thread (``cudaSetDevice`` does).  A thread that
    has made no runtime call has no current context, and CuPy's ``Device(...)`` binds none where the
    device already is the thread's (torch's autograd threads, a new ``threading.Thread``): driver calls
    from it fail with CUDA_ERROR_INVALID_CONTEXT."""
    gpu.cupy().cuda.runtime.setDevice(int(device))


def bound(device: int | None, call, first: tuple | None = None) -> tuple:
    """``call()`` (a driver call's result tuple, its CUresult first; ``first``: its result where the
    caller made it already), again after ``bind(device)`` where it found no current context (nothing
    was done then); with no ``device``, as it came.  The common path pays nothing."""
    res = call() if first is None else first
    if device is not None and res[0] == _driver().CUresult.CUDA_ERROR_INVALID_CONTEXT:
        bind(device)
        res = call()
    return res


class LoadedKernel:
    """A compiled kernel loaded on one device."""

    def __init__(self, compiled: CompiledKernel, device: int):
        cupy = gpu.cupy()
        self.compiled = compiled
        self.device = device
        with cupy.cuda.Device(device):
            bind(device)  # the loading thread may have no current context (bind): load into the device's
            self._module = cupy.cuda.function.Module()  # primary context, where every launch runs
            self._module.load(compiled.cubin)
            self._fn = self._module.get_function(compiled.entry)
        self._smem_limit = gpu.STATIC_SMEM_LIMIT - compiled.resources.shared_bytes
        self._lock = threading.Lock()
        self._prepared: dict[tuple, PreparedLaunch] = {}

    def allow_smem(self, nbytes: int) -> None:
        """Raise the kernel's dynamic shared memory limit to ``nbytes`` (once)."""
        with self._lock:
            if nbytes <= self._smem_limit:
                return
            driver = _driver()
            props = gpu.device_properties(self.device)
            if nbytes + self.compiled.resources.shared_bytes > props.smem_per_block_optin:
                raise ValueError(
                    f"{self.compiled.name} asks for {nbytes} bytes of dynamic shared memory, more "
                    f"than {props.name} allows a block ({props.smem_per_block_optin} bytes)"
                )
            (err,) = bound(self.device, lambda: driver.cuFuncSetAttribute(
                driver.CUfunction(self._fn.ptr),
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes))
            check(err, "cuFuncSetAttribute")
            self._smem_limit = nbytes

    def prepare(self, grid, block, types: tuple, smem: int = 0, pdl: bool = False) -> "PreparedLaunch":
        """A launcher of this kernel for one grid, block, parameter list (C types: "int",
        "long long", "float", "ptr"), dynamic shared memory size and PDL choice; kept per key."""
        key = (tuple(grid), tuple(block), tuple(types), smem, bool(pdl))
        launch = self._prepared.get(key)
        if launch is None:
            if smem:
                self.allow_smem(smem)
            launch = PreparedLaunch(self._fn.ptr, *key, device=self.device)
            if len(self._prepared) < 1024:
                self._prepared[key] = launch
        return launch

    def launch(self, grid, block, types: tuple, args, *, smem: int = 0, stream=None, pdl: bool = False) -> None:
        """``prepare(...)`` and launch it with ``args`` (Python numbers; pointers as ints) on ``stream``
        (default: CuPy's current stream)."""
        if stream is None:
            stream = gpu.cupy().cuda.get_current_stream()
        self.prepare(grid, block, types, smem, pdl)(args, stream)

    def max_active_blocks(self, threads: int, smem: int = 0) -> int:
        """Blocks of this kernel that fit on one SM at once (the driver's occupancy calculator)."""
        driver = _driver()
        if smem:
            self.allow_smem(smem)
        with gpu.cupy().cuda.Device(self.device):
            err, blocks = bound(self.device, lambda: driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                driver.CUfunction(self._fn.ptr), int(threads), int(smem)))
        check(err, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return int(blocks)


class PreparedLaunch:
    """``cuLaunchKernelEx`` for one function, grid, block, parameter list and shared memory size,
    with the programmatic-stream-serialization attribute when ``pdl``: the launch config and the
    parameter buffer are built once; each call packs the values (Python numbers) and sets the
    stream under a lock (the driver copies the parameters during the call)."""

    def __init__(self, fn_ptr: int, grid: tuple, block: tuple, types: tuple, smem: int = 0, pdl: bool = False,
                 device: int | None = None):
        driver = _driver()
        self._device = device  # whose primary context a launch from a thread without one binds (bind)
        self._driver = driver
        self._fn = driver.CUfunction(fn_ptr)
        fmt, offsets = _layout(types)
        self._fmt = struct.Struct(fmt)
        self._buf = ctypes.create_string_buffer(max(8, self._fmt.size) + 64)
        base = ctypes.addressof(self._buf)
        base += -base % 64  # a tensor map slot 64-byte aligned, as the driver reads it
        self._base = base - ctypes.addressof(self._buf)
        self._ptrs = (ctypes.c_void_p * len(types))(*(base + o for o in offsets))
        self._params = ctypes.addressof(self._ptrs)
        cfg = self._cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(g) for g in grid)
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(b) for b in block)
        cfg.sharedMemBytes = int(smem)
        if pdl:
            attr = driver.CUlaunchAttribute()
            attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            cfg.attrs = [attr]
            cfg.numAttrs = 1
        else:
            cfg.numAttrs = 0
        self.pdl = bool(pdl)
        self._lock = threading.Lock()
        self._key = (fn_ptr, tuple(grid), tuple(block), tuple(types), smem)
        self._plain = None

    def without_pdl(self) -> "PreparedLaunch":
        """The same launch without the PDL attribute."""
        if not self.pdl:
            return self
        if self._plain is None:
            self._plain = PreparedLaunch(*self._key, pdl=False, device=self._device)
        return self._plain

    def __call__(self, args, stream) -> None:
        driver = self._driver
        with self._lock:
            self._fmt.pack_into(self._buf, self._base, *args)
            self._cfg.hStream = driver.CUstream(int(getattr(stream, "ptr", 0) or 0))
            (err,) = driver.cuLaunchKernelEx(self._cfg, self._fn, self._params, 0)
            if err != driver.CUresult.CUDA_SUCCESS:  # the common path tests err once
                (err,) = bound(self._device, lambda: driver.cuLaunchKernelEx(self._cfg, self._fn, self._params, 0),
                               (err,))
                if err != driver.CUresult.CUDA_SUCCESS:
                    raise RuntimeError(f"cuLaunchKernelEx failed: {err.name}")


_loaded: dict[tuple[int, str], LoadedKernel] = {}
_loaded_lock = threading.Lock()


def load(compiled: CompiledKernel, device: int | None = None) -> LoadedKernel:
    """Load ``compiled`` on ``device`` once; later calls return the same object."""
    if device is None:
        device = gpu.current_device()
    key = (int(device), compiled.key)
    kernel = _loaded.get(key)
    if kernel is None:
        with _loaded_lock:
            kernel = _loaded.get(key)
            if kernel is None:
                kernel = _loaded[key] = LoadedKernel(compiled, int(device))
    return kernel
