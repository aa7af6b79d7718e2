"""The GPU this process sees, through CuPy: is there one, which is current, its properties (queried
once per device) and the driver's version.  Nothing here compiles or launches."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .errors import NoGPUError

STATIC_SMEM_LIMIT = 48 * 1024  # beyond this a block needs the opt-in attribute


def cupy():
    """The cupy module, or NoGPUError saying how to get it."""
    try:
        import cupy as cp
    except Exception as exc:  # pragma: no cover - environment dependent
        raise NoGPUError(
            f"CuPy could not be imported ({exc}); install cupy-cuda13x on a machine with a CUDA GPU"
        ) from exc
    return cp


@functools.lru_cache(maxsize=None)
def device_count() -> int:
    """CUDA devices visible to this process (asked once: every call of matmul needs it)."""
    cp = cupy()
    try:
        return cp.cuda.runtime.getDeviceCount()
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
    return cupy().cuda.runtime.getDevice()


def current_arch() -> str | None:
    """``sm_XY`` of the current device, or None where no GPU is usable."""
    try:
        return device_properties().arch if have_gpu() else None
    except Exception:
        return None


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
    p = cupy().cuda.runtime.getDeviceProperties(device)
    name = p["name"]
    if isinstance(name, bytes):
        name = name.decode()

    def get(key, default=0):
        return int(p.get(key, default) or default)

    return DeviceProps(
        id=device, name=name, major=get("major"), minor=get("minor"), sms=get("multiProcessorCount"),
        smem_per_block=get("sharedMemPerBlock", STATIC_SMEM_LIMIT),
        smem_per_block_optin=get("sharedMemPerBlockOptin", get("sharedMemPerBlock")),
        smem_per_sm=get("sharedMemPerMultiprocessor"), regs_per_sm=get("regsPerMultiprocessor"),
        regs_per_block=get("regsPerBlock"), max_threads_per_block=get("maxThreadsPerBlock", 1024),
        max_threads_per_sm=get("maxThreadsPerMultiProcessor", 2048),
        max_blocks_per_sm=get("maxBlocksPerMultiProcessor", 32), warp_size=get("warpSize", 32),
        l2_bytes=get("l2CacheSize"), clock_khz=get("clockRate"),
        smem_reserved=int(p.get("reservedSharedMemPerBlock", 1024)),
    )


def device_properties(device: int | None = None) -> DeviceProps:
    """Properties of ``device`` (default: the current one), queried once and cached."""
    if device is None:
        device = current_device()
    return _props(int(device))


@functools.lru_cache(maxsize=1)
def driver_version() -> str:
    """The NVIDIA driver's version (NVML), else the CUDA driver API's version."""
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        v = cupy().cuda.runtime.driverGetVersion()
        return f"CUDA {v // 1000}.{v % 1000 // 10}"
