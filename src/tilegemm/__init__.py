"""tilegemm: hand-written, autotuned FP32 GEMM kernels for NVIDIA GPUs.

    import tilegemm
    c = tilegemm.matmul(a, b)            # a: M x K, b: K x N, float32; NumPy, CuPy or torch
    c = tilegemm.matmul(a, b, kernel="02_smem_tiled")   # one rung of the optimization ladder
"""

from ._version import __version__
from .api import matmul
from .errors import CompileError, ConfigError, NoGPUError, TilegemmError
from .registry import RUNGS


def kernels() -> list[str]:
    """Names of the kernels ``matmul(kernel=...)`` accepts, slowest rung first."""
    return sorted(RUNGS)


__all__ = [
    "__version__", "matmul", "kernels",
    "CompileError", "ConfigError", "NoGPUError", "TilegemmError",
]
