"""The shapes the bench measures: the reference suite, shapes nobody tuned for (a random draw, the
same for the same seed on any machine), and a named set of common real-world shapes.

A case is (M, N, K, layout, batch): C is M x N, the inner dimension K; layout NN/NT/TN/TT says
which operands are transposed views (T).
"""

from __future__ import annotations

import math
import random

# The reference suite (its figures at the time it was set are in the README) plus the other
# layouts at 4096^3 and batched cases
SUITE = [
    (1024, 1024, 1024, "NN", 1), (2048, 2048, 2048, "NN", 1), (4096, 4096, 4096, "NN", 1),
    (8192, 8192, 8192, "NN", 1), (4096, 4096, 1024, "NN", 1), (1024, 1024, 16384, "NN", 1),
    (128, 4096, 4096, "NN", 1), (16, 4096, 4096, "NN", 1), (4095, 4095, 4095, "NN", 1),
    (3000, 1000, 500, "NN", 1), (256, 256, 256, "NN", 1),
    (4096, 4096, 4096, "NT", 1), (4096, 4096, 4096, "TN", 1), (4096, 4096, 4096, "TT", 1),
    (512, 512, 512, "NN", 64), (2048, 2048, 2048, "NN", 8), (128, 128, 128, "NN", 256),
]

# How shapes nobody tuned for are drawn: each of M, N, K log-uniform in [LO, HI], kept when the
# product has at least MIN_MACS multiply-adds and its three float32 matrices fit in MAX_BYTES
DRAW = {"lo": 128, "hi": 16384, "min_macs": 1024**3, "max_bytes": 4 << 30}
# Small products, where a block's latency and the launch rule (the cost model's second set of
# constants, timed from CUDA graphs): below the bench draw's multiply-adds, any dimension from 16
SMALL_DRAW = {"lo": 16, "hi": 16384, "min_macs": 0, "max_macs": DRAW["min_macs"], "max_bytes": 4 << 30}

# Long K with few output tiles, the class of most of the draws' lowest shapes: fewer 128 x 128 tiles than SMs (a data-
# parallel wave leaves SMs idle; split-K or stream-K must fill them) and K of at least LONG_K_MIN
LONG_K_MIN = 2048


def long_k(M: int, N: int, K: int, count: int = 1, sms: int = 132) -> bool:
    """Whether a product is of the class of long K with few tiles (LONG_K_MIN)."""
    return K >= LONG_K_MIN and -(-M // 128) * -(-N // 128) * count < sms


def random_shapes(n: int, seed: int, layouts=("NN",), lo: int = DRAW["lo"], hi: int = DRAW["hi"],
                  min_macs: int = DRAW["min_macs"], max_bytes: int = DRAW["max_bytes"],
                  max_macs: int | None = None) -> list[tuple]:
    """``n`` cases drawn with ``seed`` (Python's own generator: the same shapes for the same seed
    with any Python or NumPy), each layout drawn from ``layouts``; with ``max_macs``, only products
    of fewer multiply-adds than that."""
    if n < 1 or lo < 1 or hi < lo:
        raise ValueError(f"a random draw needs n >= 1 and 1 <= lo <= hi, got n={n}, lo={lo}, hi={hi}")
    if min_macs > hi**3 or 12 * lo * lo > max_bytes or (max_macs is not None and max_macs <= max(min_macs, lo**3)):
        raise ValueError(f"no shape in [{lo}, {hi}]^3 meets min_macs={min_macs}, max_macs={max_macs} and "
                         f"max_bytes={max_bytes}")
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        M, N, K = (int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))))) for _ in range(3))
        layout = layouts[rng.randrange(len(layouts))]
        if (M * N * K >= min_macs and (max_macs is None or M * N * K < max_macs)
                and 4 * (M * K + K * N + M * N) <= max_bytes):
            out.append((M, N, K, layout, 1))
    return out


def _linear(tokens: int, out_features: int, in_features: int) -> tuple:
    """A linear layer y = x W^T as torch stores it: x (tokens x in), W (out x in), so B = W^T is a
    transposed view (NT)."""
    return (tokens, out_features, in_features, "NT", 1)


# Common real-world shapes: (name, case)
REAL = [
    *[(f"attention projection, {t} tokens", _linear(t, 4096, 4096)) for t in (128, 512, 2048, 8192)],
    *[(f"MLP up, {t} tokens", _linear(t, 11008, 4096)) for t in (128, 512, 2048, 8192)],
    *[(f"MLP down, {t} tokens", _linear(t, 4096, 11008)) for t in (128, 512, 2048, 8192)],
    *[(f"vocabulary head, {t} tokens", _linear(t, 32000, 4096)) for t in (128, 512, 2048)],
    *[(f"square {n}", (n, n, n, "NN", 1)) for n in (1000, 3000, 5000, 10000)],
    ("long-K reduction 640 x 640", (640, 640, 65536, "NN", 1)),
    ("long-K reduction 256 x 256", (256, 256, 131072, "NN", 1)),
    ("long-K reduction 1024 x 1024", (1024, 1024, 32768, "NN", 1)),
    # least squares: the normal equations A^T A of a tall A (rows x cols), A^T a transposed view
    ("normal equations, 1M x 64", (64, 64, 1 << 20, "TN", 1)),
    ("normal equations, 512k x 256", (256, 256, 1 << 19, "TN", 1)),
    ("normal equations, 128k x 1024", (1024, 1024, 1 << 17, "TN", 1)),
]
