"""The results file (schema 1; format: benchmarks/README.md): the environment header, the command and
the git commit that produced it, the rows, and where it is written."""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path

from . import compiler, gpu
from ._version import __version__

SCHEMA = 1
_REPO = Path(__file__).resolve().parents[2]  # the checkout, when tilegemm runs from one


def commit() -> str:
    """The git commit of the code that runs: $TILEGEMM_COMMIT (for copies of a checkout without its
    .git, e.g. on a remote machine), else ``git rev-parse HEAD`` of the checkout, with "+dirty"
    where tracked files differ from it; "unknown" outside a checkout."""
    env = os.environ.get("TILEGEMM_COMMIT")
    if env:
        return env
    try:
        def git(*args):
            return subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=10)
        head = git("rev-parse", "HEAD")
        if head.returncode:
            return "unknown"
        dirty = git("diff", "--quiet", "HEAD", "--").returncode != 0
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def command(argv: list[str] | None = None, prog: str | None = None) -> str:
    """The command line that is running; ``prog`` (e.g. "tilegemm", "python scripts/sweep.py")
    replaces argv[0] as it is, the arguments are quoted for a shell."""
    argv = list(sys.argv if argv is None else argv)
    return " ".join([prog or shlex.quote(argv[0])] + [shlex.quote(a) for a in argv[1:]])


def environment() -> dict:
    """GPU, driver and library versions of this process."""
    props = gpu.device_properties()
    try:
        import torch

        torch_v = torch.__version__
    except Exception:
        torch_v = None
    return {
        "gpu": props.name, "sm": f"{props.major}{props.minor}", "sms": props.sms,
        "driver": gpu.driver_version(),
        "versions": {"tilegemm": __version__, "cupy": gpu.cupy().__version__,
                     "nvrtc": "%d.%d" % compiler.nvrtc_version(), "torch": torch_v},
    }


def document(rows: list, env: dict | None = None, cmd: str | None = None, **extra) -> dict:
    """A schema-1 results document: header, ``extra`` keys, then the rows (dataclasses or dicts)."""
    doc = {"schema": SCHEMA, "command": cmd or command(), "commit": commit(),
           "date": _dt.date.today().isoformat(), **(env or environment())}
    doc.update(extra)
    doc["rows"] = [asdict(r) if is_dataclass(r) else r for r in rows]
    return doc


def _json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def write(doc: dict, directory: str | os.PathLike = "benchmarks/results", tag: str | None = None,
          compress: bool = False) -> Path:
    """Write ``doc`` as ``<directory>/<gpu>-<date>[-<tag>].json``; ``compress``: gzipped, as
    ``.json.gz`` (for files of thousands of rows, such as calibrations: a tenth of the size)."""
    gpu_name = re.sub(r"[^A-Za-z0-9]+", "-", doc["gpu"]).strip("-")
    path = Path(directory) / (f"{gpu_name}-{doc['date']}" + (f"-{tag}" if tag else "") + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_json_safe(doc), indent=1) + "\n"
    if not compress:
        path.write_text(text)
        return path
    path = path.with_name(path.name + ".gz")
    path.write_bytes(gzip.compress(text.encode(), mtime=0))  # the same bytes for the same document
    return path


def read(path: str | os.PathLike) -> dict:
    """A results file's document: ``.json``, or gzipped ``.json.gz`` (``write``)."""
    path = Path(path)
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)
