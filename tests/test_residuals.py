"""GPU-free: the calibration residuals' correction of the cost model (residuals.py)."""

import math

import pytest

from tilegemm import builds, model, residuals


def correction(near, name, M, N, K, width):
    return residuals.corrections(near, M, N, K, width, [name]).get(name, 0.0)


def test_no_residuals_no_correction():
    assert correction(None, "128x128", 1000, 1000, 1000, 4) == 0.0
    assert correction({"64x64": [residuals.row(1000, 1000, 1000, 4, 0.3)]}, "128x128", 1000, 1000, 1000, 4) == 0.0


def test_the_correction_is_a_shrunk_weighted_mean():
    one = residuals.row(1024, 2048, 4096, 4, 0.2)
    # one timing at the shape itself: half its error (its weight 1 against PRIOR 1)
    assert correction({"t": [one]}, "t", 1024, 2048, 4096, 4) == pytest.approx(0.2 * 1 / (1 + residuals.PRIOR))
    # many timings there: nearly all of it
    assert correction({"t": [one] * 200}, "t", 1024, 2048, 4096, 4) == pytest.approx(0.2, rel=0.01)
    # a factor of two away in one dimension weighs exp(-1/2); another access width one doubling more
    w = math.exp(-0.5 / residuals.BANDWIDTH**2)
    assert correction({"t": [one]}, "t", 2048, 2048, 4096, 4) == pytest.approx(0.2 * w / (residuals.PRIOR + w), rel=1e-3)
    assert correction({"t": [one]}, "t", 1024, 2048, 4096, 1) == pytest.approx(0.2 * w / (residuals.PRIOR + w), rel=1e-3)
    # far away: nothing
    assert correction({"t": [one]}, "t", 128, 16384, 128, 4) == pytest.approx(0.0, abs=1e-6)
    # two errors of opposite sign at the same distance cancel
    both = [one, residuals.row(1024, 2048, 4096, 4, -0.2)]
    assert correction({"t": both}, "t", 1024, 2048, 4096, 4) == pytest.approx(0.0, abs=1e-12)


def test_split_counts_borrow_from_their_neighbours():
    one = residuals.row(1024, 2048, 4096, 4, 0.2)
    near = {"64x64f split8": [one]}
    w = math.exp(-0.5 / residuals.BANDWIDTH**2)
    assert correction(near, "64x64f split8", 1024, 2048, 4096, 4) == pytest.approx(0.2 / (1 + residuals.PRIOR))
    # twice the splits is a doubling away; 11 splits log2(11/8) of one
    assert correction(near, "64x64f split16", 1024, 2048, 4096, 4) == pytest.approx(0.2 * w / (residuals.PRIOR + w))
    w11 = math.exp(-0.5 * math.log2(11 / 8) ** 2 / residuals.BANDWIDTH**2)
    assert correction(near, "64x64f split11", 1024, 2048, 4096, 4) == pytest.approx(0.2 * w11 / (residuals.PRIOR + w11))
    # another kind, another tile, or no split at all borrows nothing
    for other in ("64x64f split8 summed", "128x64 split8", "64x64f", "64x64f stream-K"):
        assert correction(near, other, 1024, 2048, 4096, 4) == 0.0
    assert residuals.group("64x64f split11 summed") == ("64x64f split* summed", math.log2(11))
    assert residuals.group("64x64f stream-K") == ("64x64f stream-K", 0.0)


def test_ranked_multiplies_a_single_products_prediction_by_the_correction():
    c = {}
    for t, cfg in builds.TILES.items():
        c.update({f"{t}.f": 5.0, f"{t}.a": 1.0, f"{t}.b": 0.3, f"{t}.u": 0.1, f"{t}.l": 0.1, f"{t}.v": 10.0})
    c.update(red0=3.0, red1=0.004, hand=5.0, summed=2.0, launch=3.0)
    per_sm = {builds.build(n): 2 for n, _ in builds.candidates(3000, 3000, 3000)}
    plain = {n: t for n, _, t in model.ranked(c, per_sm, 3000, 3000, 3000, 1, 132)}
    first = min(plain, key=plain.get)
    near = {first: [residuals.row(3000, 3000, 3000, 4, 1.0)] * 50}  # the model's favourite, measured e times slower
    fixed = {n: t for n, _, t in model.ranked(c, per_sm, 3000, 3000, 3000, 1, 132, near=near)}
    assert fixed[first] == pytest.approx(plain[first] * math.exp(50 / (50 + residuals.PRIOR)), rel=1e-3)
    assert all(fixed[n] == plain[n] for n in plain if n != first)
    assert model.choose(c, per_sm, 3000, 3000, 3000, 1, 132, near=near)[0] != first
    # a batch is not corrected: the calibrations time single products; nor another layout than theirs
    assert model.ranked(c, per_sm, 3000, 3000, 3000, 2, 132, near=near) == model.ranked(c, per_sm, 3000, 3000, 3000, 2, 132)
    for layout in ("NT", "TN", "TT"):
        assert (model.ranked(c, per_sm, 3000, 3000, 3000, 1, 132, layout, near=near)
                == model.ranked(c, per_sm, 3000, 3000, 3000, 1, 132, layout))


def test_corrected_predictions_still_grow_with_k_and_waves():
    """The shipped tables' corrected times: twice the K is never predicted faster for a candidate,
    nor twice the rows where that adds rounds of blocks on an SM (stream-K aside: its last round
    is shared, test_model.py).  The correction
    moves smoothly: a doubling changes it by a fraction of what the work adds.  (Within one partial
    wave the model's time stays level as rows are added, and the correction may fall a little.)"""
    import json
    import random
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "src" / "tilegemm" / "tables"
    rng = random.Random(11)
    for table in ("model-NVIDIA-H100-80GB-HBM3.json", "model-NVIDIA-H200.json"):
        t = json.loads((folder / table).read_text())
        assert t["residuals"]
        checked = 0
        for _ in range(80):
            M, N, K = (int(2 ** rng.uniform(7, 13.5)) for _ in range(3))
            s = model.set_for(t, M, N, K, 1)
            if "residuals" not in s:
                continue

            def times(m, n, k):
                return {name: (cfg, tt) for name, cfg, tt in model.ranked(s["constants"], s["blocks_per_sm"], m, n, k, 1,
                                                                          t["sms"], near=s["residuals"])}
            base, more_k, more_m = times(M, N, K), times(M, N, 2 * K), times(2 * M, N, K)
            for name, (cfg, tt) in base.items():
                assert more_k.get(name, (cfg, tt))[1] >= tt, (table, name, (M, N, K))
                wave = t["sms"] * s["blocks_per_sm"][builds.build(name)]
                rounds = [-(-(-(-m // cfg["bm"]) * -(-N // cfg["bn"]) * cfg["splits"]) // wave) for m in (M, 2 * M)]
                if rounds[1] > rounds[0] and name in more_m and not name.endswith("stream-K"):
                    assert more_m[name][1] >= tt, (table, name, (M, N, K))
                    checked += 1
        assert checked > 500
