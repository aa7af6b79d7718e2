"""The folders tilegemm writes: the kernel cache, the tuning cache, and a check that a folder can be
written, made before work that takes minutes."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def cache_dir() -> Path:
    """The kernel cache: $TILEGEMM_CACHE_DIR, else $XDG_CACHE_HOME/tilegemm or ~/.cache/tilegemm."""
    env = os.environ.get("TILEGEMM_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilegemm"


def tuning_dir() -> Path:
    """The tuning cache: $TILEGEMM_TUNE_DIR, else the kernel cache's tuning/ folder."""
    env = os.environ.get("TILEGEMM_TUNE_DIR")
    return Path(env) if env else cache_dir() / "tuning"


def writable(folder: str | os.PathLike, fix: str) -> Path:
    """``folder``, created if need be; a one-line OSError naming it and ``fix`` where it cannot be
    written."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}-{threading.get_ident()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise OSError(f"{folder} cannot be written ({exc.strerror or exc}); {fix}") from None
    return folder
