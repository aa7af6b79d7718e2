"""tilegemm's version (kept equal to pyproject.toml's): ``tilegemm.__version__``, ``tilegemm --version``
and the results files report it, and the kernel and tuning caches key on it (a new version compiles
its kernels and looks up its tuned configs anew)."""

__version__ = "0.1.0"
