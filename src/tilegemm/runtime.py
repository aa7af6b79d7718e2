"""GPU runtime through CuPy: device properties (queried once per device), cubin loading, launches."""

from __future__ import annotations

import functools
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

    def attribute(self, name: str) -> int:
        """A CU_FUNC_ATTRIBUTE_* value, e.g. ``attribute("NUM_REGS")``."""
        from cupy_backends.cuda.api import driver

        return driver.funcGetAttribute(getattr(driver, f"CU_FUNC_ATTRIBUTE_{name}"), self._fn.ptr)


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
