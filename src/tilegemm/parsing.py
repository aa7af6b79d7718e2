"""The text every command takes: shapes and kernel configs, one syntax everywhere.

Shapes: ``MxNxK`` (C is M x N, the inner dimension K), ``BATCHxMxNxK`` (a batch of products), or
``N`` for the cube NxNxN; positive integers joined by ``x``, nothing else.  Configs:
``NAME=VALUE,NAME=VALUE`` with integer values.  Every error is one line that names the text.
"""

from __future__ import annotations

import re

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
