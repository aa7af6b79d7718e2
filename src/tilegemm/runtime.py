"""GPU runtime through CuPy: device properties (queried once per device), cubin loading, launches."""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from dataclasses import dataclass

from .compiler import CompiledKernel
from .errors import NoGPUError

_STATIC_SMEM_LIMIT = 48 * 1024  # beyond this a block needs the opt-in attribute


def _cupy():
    try:
        import cupy
    except Exception as exc:  # pragma: no cover - environment dependent
        raise NoGPUError(
            f"CuPy could not be imported ({exc}); install cupy-cuda13x on a machine with a CUDA GPU"
        ) from exc
    return cupy


@functools.lru_cache(maxsize=None)
def device_count() -> int:
    """CUDA devices visible to this process (asked once: matmul calls it on every call)."""
    cupy = _cupy()
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def have_gpu() -> bool:
    return device_count() > 0


def require_gpu(what: str = "this operation") -> None:
    if not have_gpu():
        raise NoGPUError(
            f"{what} needs a CUDA GPU, and none is usable here (no device or no driver). "
            "Run it on a machine with an NVIDIA GPU; compiling (tilegemm.compiler) works without one."
        )


def current_device() -> int:
    require_gpu()
    return _cupy().cuda.runtime.getDevice()


@dataclass(frozen=True)
class DeviceProps:
    id: int
    name: str
    major: int
    minor: int
    sms: int
    smem_per_block: int  # default per-block limit (48 KB)
    smem_per_block_optin: int  # what a block may get after raising its attribute
    smem_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    warp_size: int
    l2_bytes: int
    clock_khz: int
    smem_reserved: int = 1024  # shared memory the system keeps per resident block

    @property
    def arch(self) -> str:
        return f"sm_{self.major}{self.minor}"


@functools.lru_cache(maxsize=None)
def _props(device: int) -> DeviceProps:
    p = _cupy().cuda.runtime.getDeviceProperties(device)
    name = p["name"]
    if isinstance(name, bytes):
        name = name.decode()

    def get(key, default=0):
        return int(p.get(key, default) or default)

    return DeviceProps(
        id=device,
        name=name,
        major=get("major"),
        minor=get("minor"),
        sms=get("multiProcessorCount"),
        smem_per_block=get("sharedMemPerBlock", _STATIC_SMEM_LIMIT),
        smem_per_block_optin=get("sharedMemPerBlockOptin", get("sharedMemPerBlock")),
        smem_per_sm=get("sharedMemPerMultiprocessor"),
        regs_per_sm=get("regsPerMultiprocessor"),
        regs_per_block=get("regsPerBlock"),
        max_threads_per_block=get("maxThreadsPerBlock", 1024),
        max_threads_per_sm=get("maxThreadsPerMultiProcessor", 2048),
        max_blocks_per_sm=get("maxBlocksPerMultiProcessor", 32),
        warp_size=get("warpSize", 32),
        l2_bytes=get("l2CacheSize"),
        clock_khz=get("clockRate"),
        smem_reserved=int(p.get("reservedSharedMemPerBlock", 1024)),
    )


def device_properties(device: int | None = None) -> DeviceProps:
    """Properties of ``device`` (default: the current one), queried once and cached."""
    if device is None:
        device = current_device()
    return _props(int(device))


class LoadedKernel:
    """A compiled kernel loaded on one device."""

    def __init__(self, compiled: CompiledKernel, device: int):
        cupy = _cupy()
        self.compiled = compiled
        self.device = device
        with cupy.cuda.Device(device):
            self._module = cupy.cuda.function.Module()
            self._module.load(compiled.cubin)
            self._fn = self._module.get_function(compiled.entry)
        self._smem_limit = _STATIC_SMEM_LIMIT - compiled.resources.shared_bytes
        self._lock = threading.Lock()
        self._dependent: dict[tuple, _DependentLaunch] = {}

    def _allow_smem(self, nbytes: int) -> None:
        with self._lock:
            if nbytes <= self._smem_limit:
                return
            from cupy_backends.cuda.api import driver

            props = device_properties(self.device)
            if nbytes + self.compiled.resources.shared_bytes > props.smem_per_block_optin:
                raise ValueError(
                    f"{self.compiled.name} asks for {nbytes} bytes of dynamic shared memory, more "
                    f"than {props.name} allows a block ({props.smem_per_block_optin} bytes)"
                )
            driver.funcSetAttribute(
                self._fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes
            )
            self._smem_limit = nbytes

    def __call__(self, grid, block, args, *, smem: int = 0, stream=None) -> None:
        if smem:
            self._allow_smem(smem)
        self._fn(tuple(grid), tuple(block), tuple(args), shared_mem=smem, stream=stream)

    def dependent(self, grid, block, chars: str, smem: int = 0) -> "_DependentLaunch":
        """A launcher of this kernel as a programmatic dependent of the kernel before it in the
        stream (sm_90+), for one grid, block, parameter list (NumPy type codes) and shared memory
        size: the grid may be scheduled while that kernel's last blocks still run, so the kernel
        must execute ``griddepcontrol.wait`` before it touches memory that kernel writes."""
        key = (tuple(grid), tuple(block), chars, smem)
        launch = self._dependent.get(key)
        if launch is None:
            if smem:
                self._allow_smem(smem)
            launch = _DependentLaunch(self._fn.ptr, *key)
            if len(self._dependent) < 1024:
                self._dependent[key] = launch
        return launch

    def launch_dependent(self, grid, block, args, *, smem: int = 0, stream=None) -> None:
        """``dependent(...)`` and launch it: ``args`` NumPy scalars, as for ``__call__``."""
        self.dependent(grid, block, "".join(a.dtype.char for a in args), smem)(args, stream)

    def attribute(self, name: str) -> int:
        """A CU_FUNC_ATTRIBUTE_* value, e.g. ``attribute("NUM_REGS")``."""
        from cupy_backends.cuda.api import driver

        return driver.funcGetAttribute(getattr(driver, f"CU_FUNC_ATTRIBUTE_{name}"), self._fn.ptr)


# NumPy scalar type code -> how a kernel parameter of that type is packed into its 8-byte slot
_SLOT = {"i": "i4x", "l": "q", "q": "q", "L": "Q", "Q": "Q", "f": "f4x"}


class _DependentLaunch:
    """cuLaunchKernelEx with the programmatic-stream-serialization attribute, for one function, grid,
    block and parameter list: the launch config and the parameter buffer are built once; each
    launch packs the values and sets the stream under a lock (the driver copies the parameters
    during the call)."""

    def __init__(self, fn_ptr: int, grid: tuple, block: tuple, chars: str, smem: int = 0):
        from cuda.bindings import driver

        self._driver = driver
        self._fn = driver.CUfunction(fn_ptr)
        self._fmt = struct.Struct("<" + "".join(_SLOT[c] for c in chars))
        self._buf = ctypes.create_string_buffer(max(8, self._fmt.size))
        base = ctypes.addressof(self._buf)
        self._ptrs = (ctypes.c_void_p * len(chars))(*(base + 8 * i for i in range(len(chars))))
        self._params = ctypes.addressof(self._ptrs)
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        cfg = self._cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(g) for g in grid)
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(b) for b in block)
        cfg.sharedMemBytes = int(smem)
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        self._lock = threading.Lock()

    def __call__(self, args, stream) -> None:
        driver = self._driver
        with self._lock:
            self._fmt.pack_into(self._buf, 0, *args)
            self._cfg.hStream = driver.CUstream(int(getattr(stream, "ptr", 0) or 0))
            (err,) = driver.cuLaunchKernelEx(self._cfg, self._fn, self._params, 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernelEx failed: {err.name}")


_loaded: dict[tuple[int, str], LoadedKernel] = {}
_loaded_lock = threading.Lock()


def load(compiled: CompiledKernel, device: int | None = None) -> LoadedKernel:
    """Load ``compiled`` on ``device`` once; later calls return the same object."""
    if device is None:
        device = current_device()
    key = (int(device), compiled.key)
    kernel = _loaded.get(key)
    if kernel is None:
        with _loaded_lock:
            kernel = _loaded.get(key)
            if kernel is None:
                kernel = _loaded[key] = LoadedKernel(compiled, int(device))
    return kernel
