"""SASS through nvdisasm: disassemble a cubin and count its instructions (GPU-free)."""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path


def nvdisasm_path() -> str:
    """nvdisasm from the nvidia-cuda-nvdisasm wheel, else PATH, else $CUDA_HOME/bin."""
    candidates = []
    try:
        import nvidia

        for root in nvidia.__path__:
            candidates += sorted(Path(root).glob("cu*/bin/nvdisasm"))
            candidates += sorted(Path(root).glob("cuda_nvdisasm/bin/nvdisasm"))
    except ImportError:
        pass
    found = shutil.which("nvdisasm")
    if found:
        candidates.append(Path(found))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "bin" / "nvdisasm")
    candidates.append(Path("/usr/local/cuda/bin/nvdisasm"))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise FileNotFoundError(
        "nvdisasm not found; install it with `pip install nvidia-cuda-nvdisasm` (or the CUDA toolkit)"
    )


def disassemble(cubin: bytes) -> str:
    """nvdisasm's listing of ``cubin`` (plain text, one instruction a line)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        res = subprocess.run([nvdisasm_path(), "-c", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if res.returncode != 0:
        raise RuntimeError(f"nvdisasm failed: {res.stderr.strip()}")
    return res.stdout


_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def instructions(listing: str) -> list[str]:
    """Full opcodes (with modifiers, e.g. ``LDS.128``) in program order."""
    return [m.group(1) for m in map(_INSTR.search, listing.splitlines()) if m]


def opcode_counts(listing: str) -> collections.Counter:
    return collections.Counter(instructions(listing))


def uses_local_memory(listing: str) -> bool:
    """True when the code touches local memory (LDL/STL: spills or run-time indexed arrays)."""
    return any(op.split(".")[0] in ("LDL", "STL") for op in instructions(listing))
