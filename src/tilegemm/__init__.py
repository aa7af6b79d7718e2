"""tilegemm: hand-written, autotuned FP32 GEMM kernels for NVIDIA GPUs.

    import tilegemm
    c = tilegemm.matmul(a, b)            # numpy.matmul semantics, float32; NumPy, CuPy or torch
    d = tilegemm.gemm(a, b, c, alpha=2.0, beta=1.0)      # alpha * a @ b + beta * c
    c = tilegemm.matmul(a, b, kernel="02_smem_tiled")   # one rung of the optimization ladder
"""

from ._version import __version__
from .api import clear_caches, gemm, matmul
from .errors import CompileError, ConfigError, NoGPUError, TilegemmError
from .registry import FAMILY, RUNGS


def kernels() -> list[str]:
    """Names of the kernels ``matmul(kernel=...)`` accepts: the production family, then the
    ladder's rungs, slowest first."""
    return [FAMILY.name] + sorted(RUNGS)


__all__ = [
    "__version__", "matmul", "gemm", "kernels", "clear_caches",
    "CompileError", "ConfigError", "NoGPUError", "TilegemmError",
]
