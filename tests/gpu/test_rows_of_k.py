"""GPU: A kept as rows of k in shared memory (the family's ``ak``) against float64: every tile class
that takes it, split, summed in the kernel and stream-K, batches, partial tiles, in NN and NT; where
A's rows do not allow it (K not a multiple of 4, a transposed A, a view 4 bytes off) the config runs
A as usual."""

import numpy as np
import pytest

import tilegemm
from tilegemm import model

from .conftest import rel_err

pytestmark = pytest.mark.gpu

CONFIGS = [("128x64", {"minb": 4}), ("128x64", {"minb": 4, "splits": 3}), ("64x64f", {"sk": 1}),
           ("64x64f", {"splits": 3, "sk": 2}), ("64x64s", {"splits": 2}), ("64x128", {"minb": 3, "splits": 3, "sk": 2}),
           ("128x128", {"sk": 1}), ("128x128", {})]
SHAPES = [(1, 1, 4), (37, 29, 12), (131, 67, 36), (257, 131, 1004), (64, 64, 8), (300, 77, 4100), (33, 45, 37)]


@pytest.mark.parametrize("tile, extra", CONFIGS)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
def test_rows_of_k_against_float64(cp, tile, extra, layout):
    rng = np.random.default_rng()
    cfg = {**model.TILES[tile], "splits": 1, **extra, "ak": 1}
    for M, N, K in SHAPES:
        a = cp.asarray(rng.standard_normal((2, K, M) if layout[0] == "T" else (2, M, K), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((2, N, K) if layout[1] == "T" else (2, K, N), dtype=np.float32))
        a = a.swapaxes(-1, -2) if layout[0] == "T" else a
        b = b.swapaxes(-1, -2) if layout[1] == "T" else b
        a0, b0 = a.copy(), b.copy()
        out = cp.full((2, M, N), np.nan, dtype=np.float32)
        tilegemm.matmul(a, b, out=out, config=cfg)
        assert rel_err(cp, out, a, b) < 1e-5, (tile, extra, layout, (M, N, K))
        assert bool((a == a0).all()) and bool((b == b0).all())


def test_rows_of_k_on_a_view_4_bytes_off(cp):
    """A starts 4 bytes into its buffer: its rows are not 16-byte aligned, so A is read as usual."""
    rng = np.random.default_rng()
    M, N, K = 131, 96, 1000
    flat = cp.asarray(rng.standard_normal(M * K + 1, dtype=np.float32))
    a = flat[1:].reshape(M, K)
    b = cp.asarray(rng.standard_normal((K, N), dtype=np.float32))
    out = tilegemm.matmul(a, b, config={**model.TILES["128x64"], "splits": 1, "ak": 1})
    assert rel_err(cp, out, a, b) < 1e-5
