"""GPU-free: the shapes the bench draws."""

import pytest

from tilegemm import suites


def test_the_random_draw_is_the_same_for_the_same_seed():
    a = suites.random_shapes(50, seed=1)
    assert a == suites.random_shapes(50, seed=1) and a != suites.random_shapes(50, seed=2)
    assert a[:3] == suites.random_shapes(3, seed=1)
    # pinned: a change of the generator or of the rules would move the shapes the figures name
    assert a[:3] == PINNED


PINNED = [(246, 7815, 5208, "NN", 1), (227, 5137, 1266, "NN", 1), (466, 6264, 2254, "NN", 1)]


def test_the_random_draw_keeps_its_rules():
    d = suites.DRAW
    shapes = suites.random_shapes(500, seed=11, layouts=("NN", "NT", "TN", "TT"))
    assert {s[3] for s in shapes} == {"NN", "NT", "TN", "TT"}
    for M, N, K, layout, batch in shapes:
        assert d["lo"] <= min(M, N, K) and max(M, N, K) <= d["hi"] and batch == 1
        assert M * N * K >= d["min_macs"] and 4 * (M * K + K * N + M * N) <= d["max_bytes"]
    with pytest.raises(ValueError, match="needs n >= 1"):
        suites.random_shapes(0, seed=1)


def test_the_small_draw_stays_below_the_bench_draw():
    s = suites.SMALL_DRAW
    shapes = suites.random_shapes(300, seed=3, **s)
    assert shapes == suites.random_shapes(300, seed=3, **s) and s["max_macs"] == suites.DRAW["min_macs"]
    for M, N, K, _, _ in shapes:
        assert s["lo"] <= min(M, N, K) and max(M, N, K) <= s["hi"] and M * N * K < s["max_macs"]
    assert min(M * N * K for M, N, K, _, _ in shapes) < 64**3  # it reaches tiny products too
    with pytest.raises(ValueError, match="max_macs"):
        suites.random_shapes(5, seed=1, max_macs=100)  # nothing of the bench draw lies below 100


def test_the_real_world_set():
    names = [n for n, _ in suites.REAL]
    assert len(names) == len(set(names)) >= 20
    assert all(layout in ("NN", "NT", "TN", "TT") and min(M, N, K) >= 1 for _, (M, N, K, layout, _) in suites.REAL)
