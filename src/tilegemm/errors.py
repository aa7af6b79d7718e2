"""Exceptions raised by tilegemm.

Every error names the argument at fault and says how to fix it.  They are raised before anything
is launched or written.
"""


class TilegemmError(Exception):
    """Base class of tilegemm's errors."""


class CompileError(TilegemmError):
    """NVRTC rejected a kernel.  ``log`` holds NVRTC's log, ``source_path`` the dumped source."""

    def __init__(self, message: str, log: str = "", source_path: str | None = None):
        self.log = log
        self.source_path = source_path
        text = message
        if source_path:
            text += f"\nsource dumped to: {source_path}"
        if log:
            text += f"\nNVRTC log:\n{log}"
        super().__init__(text)


class NoGPUError(TilegemmError, RuntimeError):
    """No usable CUDA GPU (no device, no driver, or CuPy cannot reach it)."""


class UnsupportedOperands(TilegemmError, ValueError):
    """A kernel named by the call cannot read these operands (e.g. TMA's 16-byte rows): the bench
    records such a case as refused, not as a failure."""


class ConfigError(TilegemmError, ValueError):
    """A kernel configuration breaks one of its declared constraints."""
