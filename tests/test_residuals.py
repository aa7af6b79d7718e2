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
    # a batch is not corrected: the calibrations time single products
    assert model.ranked(c, per_sm, 3000, 3000, 3000, 2, 132, near=near) == model.ranked(c, per_sm, 3000, 3000, 3000, 2, 132)


def test_each_layout_is_corrected_by_its_own_calibrations_only():
    """model.near_for: NN by the set's residuals (NN calibrations), another layout by the table's corrections
    for it (its calibrations under the set that ranks it), none where the table has none, and never the
    small products' set by a layout's corrections (they were taken above its bound)."""
    ranks = {}
    for tile, cfg in builds.TILES.items():
        ranks.update({f"{tile}.f": 5.0, f"{tile}.a": 1.0, f"{tile}.b": 0.3, f"{tile}.u": 0.1, f"{tile}.l": 0.1,
                      f"{tile}.v": 10.0})
    ranks.update(red0=3.0, red1=0.004, hand=5.0, summed=2.0, launch=3.0)
    per_sm = {builds.build(n): 2 for n, _ in builds.candidates(3000, 3000, 3000)}
    small = {"below_macs": 1024**3, "constants": ranks, "blocks_per_sm": per_sm, "residuals": {"x": []}}
    plain = {n: t for n, _, t in model.ranked(ranks, per_sm, 3000, 3000, 3000, 1, 132, "TN")}
    first = min(plain, key=plain.get)
    nn = {first: [residuals.row(3000, 3000, 3000, 4, 1.0)] * 50}
    tn = {first: [residuals.row(3000, 3000, 3000, 4, -1.0)] * 50}
    table = {"gpu": "a GPU", "constants": ranks, "blocks_per_sm": per_sm, "residuals": nn, "small": small,
             "corrections": {"TN": {"fitted_on": [], "residuals": tn}}}
    assert model.near_for(table, table, "NN") is nn and model.near_for(table, table, "TN") is tn
    assert model.near_for(table, table, "TT") is None and model.near_for(table, small, "TN") is None
    assert model.near_for(table, small, "NN") is small["residuals"]
    got = {n: t for n, _, t in model.ranked_for(table, 3000, 3000, 3000, 1, 132, "TN", 4, 4)}
    assert got[first] == pytest.approx(plain[first] * math.exp(-50 / (50 + residuals.PRIOR)), rel=1e-3)
    assert all(got[n] == plain[n] for n in plain if n != first)
    tt = {n: t for n, _, t in model.ranked(ranks, per_sm, 3000, 3000, 3000, 1, 132, "TT")}
    assert {n: t for n, _, t in model.ranked_for(table, 3000, 3000, 3000, 1, 132, "TT", 4, 4)} == tt


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
        checked = {}  # by layout
        # NN by the sets' own residuals; the other layouts the table corrects (model.near_for), by theirs
        for layout in ["NN"] * 80 + [lay for lay in t.get("corrections", {}) for _ in range(40)]:
            M, N, K = (int(2 ** rng.uniform(7, 13.5)) for _ in range(3))
            s = model.set_for(t, M, N, K, 1, layout)
            near = model.near_for(t, s, layout)
            if not near:
                continue

            def times(m, n, k):
                return {name: (cfg, tt) for name, cfg, tt in model.ranked(
                    s["constants"], builds.blocks_per_sm(s["blocks_per_sm"], layout, "sm_90"), m, n, k, 1, t["sms"],
                    layout, near=near)}
            base, more_k, more_m = times(M, N, K), times(M, N, 2 * K), times(2 * M, N, K)
            for name, (cfg, tt) in base.items():
                assert more_k.get(name, (cfg, tt))[1] >= tt, (table, name, (M, N, K))
                wave = t["sms"] * builds.blocks_per_sm(s["blocks_per_sm"], layout, "sm_90")[builds.build(name)]
                rounds = [-(-(-(-m // cfg["bm"]) * -(-N // cfg["bn"]) * cfg["splits"]) // wave) for m in (M, 2 * M)]
                if rounds[1] > rounds[0] and name in more_m and not name.endswith("stream-K"):
                    assert more_m[name][1] >= tt, (table, name, (M, N, K))
                    checked[layout] = checked.get(layout, 0) + 1
        assert checked.pop("NN") > 500 and checked.keys() == t.get("corrections", {}).keys()
        assert all(n > 300 for n in checked.values()), checked
