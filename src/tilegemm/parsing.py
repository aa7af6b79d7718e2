"""The text every command takes, one syntax everywhere, and how every command reports an error.

Shapes: ``MxNxK`` (C is M x N, the inner dimension K), ``BATCHxMxNxK`` (a batch of products), or
``N`` for the cube NxNxN; positive integers joined by ``x``, nothing else.  Configs:
``NAME=VALUE,NAME=VALUE`` with integer values.  Every error is one line that names the text.
Commands (``tilegemm``, ``python -m tilegemm.instruments.probe``, the scripts) parse with
``ArgParser`` and run with ``run_command``: a bad argument is one line on stderr and exit status 2,
a failure during the work one line and status 1 (2 where the input was at fault); no tracebacks
unless TILEGEMM_DEBUG=1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

_SHAPE = re.compile(r"[0-9]+(?:x[0-9]+)*")
_MAX = 2**31 - 1
SHAPE_HELP = "MxNxK, BATCHxMxNxK, or N for NxNxN"


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """``"4096"`` -> (4096, 4096, 4096, 1); ``"128x4096x4096"`` -> (128, 4096, 4096, 1);
    ``"64x512x512x512"`` -> a batch of 64 products of 512 x 512 x 512: (512, 512, 512, 64)."""
    s = str(text).strip().lower()
    if not _SHAPE.fullmatch(s):
        raise ValueError(f"shape {text!r} is not {SHAPE_HELP} (positive integers joined by 'x')")
    dims = [int(p) for p in s.split("x")]
    if len(dims) not in (1, 3, 4):
        raise ValueError(f"shape {text!r} has {len(dims)} numbers; pass {SHAPE_HELP}")
    if min(dims) < 1:
        raise ValueError(f"shape {text!r} has a zero; every size must be at least 1")
    if max(dims) > _MAX:
        raise ValueError(f"shape {text!r} has a size above 2^31 - 1, which tilegemm does not support")
    if len(dims) == 1:
        return (dims[0],) * 3 + (1,)
    if len(dims) == 3:
        return (*dims, 1)
    batch, M, N, K = dims
    return (M, N, K, batch)


def format_shape(M: int, N: int, K: int, batch: int = 1) -> str:
    """The inverse of ``parse_shape`` (batches as BATCHxMxNxK)."""
    return (f"{batch}x" if batch > 1 else "") + f"{M}x{N}x{K}"


def parse_config(text: str | None) -> dict | None:
    """``"bm=128,bn=64"`` -> {"bm": 128, "bn": 64}; None or "" -> None.  Names are checked against
    the kernel's parameters later (``KernelSpec.params``), values here."""
    if text is None or not str(text).strip():
        return None
    out = {}
    for item in str(text).split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"config item {item!r} is not NAME=VALUE (e.g. bm=128,bn=64)")
        if key in out:
            raise ValueError(f"config names {key!r} twice")
        try:
            out[key] = int(value.strip())
        except ValueError:
            raise ValueError(f"config {key}={value.strip()!r}: the value must be an integer") from None
    return out


# --------------------------------------------------------------------------- commands


class ArgParser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block) and exit status 2."""

    def error(self, message):
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def argtype(fn, name: str):
    """An argparse type from one of the parsers here: its message becomes argparse's error."""
    def convert(text):
        try:
            return fn(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = name
    return convert


def parse_args(parser: argparse.ArgumentParser, argv) -> argparse.Namespace | int:
    """The parsed arguments, or the exit status where parsing ended (--help, --version, an error)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def run_command(func, args) -> int:
    """``func(args)``'s status, every exception reported as one line on stderr."""
    from .errors import TilegemmError

    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        status, message = 130, "interrupted"
    except Exception as exc:
        if os.environ.get("TILEGEMM_DEBUG") == "1":
            raise
        if isinstance(exc, (ValueError, TypeError)):  # bad input (ConfigError is a ValueError)
            status, message = 2, str(exc)
        elif isinstance(exc, MemoryError):
            status, message = 1, f"out of memory: {exc}"
        elif isinstance(exc, (TilegemmError, OSError, RuntimeError)):
            status, message = 1, str(exc)
        else:  # a bug: still one line, the traceback only on request
            status, message = 1, f"internal error ({type(exc).__name__}: {exc}); TILEGEMM_DEBUG=1 shows the traceback"
    first, _, rest = message.strip().partition("\n")
    print("error: " + first + (" (the rest: TILEGEMM_DEBUG=1)" if rest.strip() else ""), file=sys.stderr)
    return status
