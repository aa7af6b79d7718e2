"""GPU-free: the cost model behind the selection, its fit, and what the selection takes from it."""

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from tilegemm import access, autotune, builds, calibration, entries, model, registry, residuals, results, selection, suites
from tilegemm.occupancy import Limits

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "src" / "tilegemm" / "tables" / "model-NVIDIA-H100-80GB-HBM3.json"
SM90 = Limits.for_arch("sm_90")


@pytest.fixture(scope="module")
def fitted():
    return json.loads(TABLE.read_text())


def _shapes(n=300, seed=5):
    rng = random.Random(seed)
    return [tuple(int(rng.uniform(1, 16384)) for _ in range(3)) for _ in range(n)]


def test_more_work_is_never_predicted_faster(fitted):
    """At one access width (a larger shape may get an aligned copy of an operand, which the fit's
    timings include), and narrower accesses (reads or the result's stores) are never predicted faster.  Stream-K is checked for
    more K and a batch, not for more tiles: its kernel shares the k-iterations of the tiles left
    after whole waves among all its blocks, so a few more tiles can shorten each tile's hand-over
    chain (3 tiles left are shared by 44 blocks each, 16 by 9), and the model says so."""
    c, per_sm = fitted["constants"], fitted["blocks_per_sm"]
    assert any(c[k] > 0.01 for k in c if k.endswith(".u")) and any(c[k] > 1.0 for k in c if k.endswith(".v"))
    for M, N, K in _shapes(120):
        for name, cfg in builds.candidates(M, N, K, 1, 132, per_sm):
            if builds.build(name) not in per_sm:  # a tile this set of constants was not fitted for
                continue
            r = per_sm[builds.build(name)]
            last = 0.0
            for w in (4, 2, 1):
                t = model.predict(c, name, cfg, M, N, K, 1, r, 132, w)
                assert t > 0 and t >= last - 1e-9
                last = t
                grow = ((M, N, K + 64),) if name.endswith("stream-K") else ((M, N, K + 64), (M + 128, N, K), (M, N + 128, K))
                for more in grow:  # more K, more tiles (waves)
                    assert model.predict(c, name, cfg, *more, 1, r, 132, w) >= t - 1e-9, (name, (M, N, K), more, w)
                assert model.predict(c, name, cfg, M, N, K, 2, r, 132, w) >= t - 1e-9  # a batch of two
            last = 0.0
            for ow in (4, 2, 1):  # narrower stores of the result never faster
                t = model.predict(c, name, cfg, M, N, K, 1, r, 132, 4, ow)
                assert t >= last - 1e-9
                last = t


def test_the_choice_is_always_a_valid_candidate(fitted):
    for M, N, K in _shapes():
        name, cfg, t = model.choose(fitted["constants"], fitted["blocks_per_sm"], M, N, K, 1, 132)
        assert name in dict(builds.candidates(M, N, K, 1, 132, fitted["blocks_per_sm"])) and not registry.FAMILY.violations(
            registry.FAMILY.params(cfg), SM90)


def test_filling_splits_fill_the_block_slots():
    assert builds.filling_splits(72, 792) == [11, 22]  # 72 tiles, 6 blocks an SM on 132 SMs
    assert builds.filling_splits(500, 792) == [3]  # one round holds no second split
    assert builds.filling_splits(900, 792) == [] and builds.filling_splits(0, 792) == []
    plain = dict(builds.candidates(336, 718, 8988))
    per_sm = {builds.build(n): 6 for n in plain}
    more = dict(builds.candidates(336, 718, 8988, 1, 132, per_sm))
    assert set(plain) <= set(more)
    assert {"64x64f split11", "64x64f split22", "64x64f split11 summed"} <= set(more) - set(plain)
    assert "64x64f split22 summed" not in more  # over SUMMED_MAX_SPLITS
    assert all(more[n]["splits"] == int(n.split()[1][5:]) for n in more if " split" in n)
    assert builds.candidates(8000, 8000, 8000, 1, 132, per_sm) == builds.candidates(8000, 8000, 8000)  # no splits there


def test_the_splits_as_run_cover_k_with_none_empty():
    """builds.split_k is what dispatch launches and what the model prices: at most the splits asked
    for and ceil(K / 4), each but the last starting at a multiple of 4, none empty."""
    for K in [0, 1, 3, 4, 5, 17, 1000, 4097, 8191, 65536] + list(range(1, 200, 7)):
        for asked in (1, 2, 3, 7, 8, 16, 45, 64, 500):
            splits, k_split = builds.split_k(K, asked)
            assert 1 <= splits <= max(1, min(asked, -(-K // 4))) and k_split % 4 == 0
            if K:
                assert (splits - 1) * k_split < K <= splits * k_split  # none empty, all of K covered
    assert builds.split_k(17, 4) == (3, 8) and builds.split_k(1000, 64) == (63, 16)


def test_the_model_prices_the_splits_that_run(fitted):
    """1000 split 64 ways runs as 63 splits of 16 (builds.split_k): priced as the 63 that run."""
    c = fitted["constants"]
    cfg = {**builds.TILES["64x64f"], "splits": 64}
    asked = model.predict(c, "64x64f split64", cfg, 256, 256, 1000, 1, 6, 132)
    assert asked == model.predict(c, "64x64f split63", {**cfg, "splits": 63}, 256, 256, 1000, 1, 6, 132)


def test_a_s_narrow_reads_are_charged_by_its_share_of_the_tile(fitted):
    """A's rows read narrow (TN, TT: a transposed view not aligned nor copied) cost bm / bn times B's
    at the same width, since u and l were fitted on B's (bn floats of a tile's row) and A's tile row
    is bm floats: level for square tiles, twice for 128 x 64, half for 64 x 128; both narrow add up;
    with A at 16 bytes, as every NN and NT product, nothing changes.  (The time is not linear in the share,
    neither blended (model.MIX) nor under a max that changes bound, so the share is checked itself.)"""
    c = fitted["constants"]
    shape = (3000, 3000, 3000, 1, 2, 132)

    def t(name, a_width=4, width=4):
        return model.predict(c, name, builds.TILES[name], *shape, width, 4, a_width)

    assert t("128x128", a_width=1) == pytest.approx(t("128x128", width=1)) and t("128x128", a_width=1) > t("128x128")
    for name, a_width in (("128x128", 1), ("128x64", 1), ("64x128", 2)):
        s = model.NARROW_SHARE[a_width] * builds.TILES[name]["bm"] / builds.TILES[name]["bn"]
        assert t(name, a_width=a_width) == pytest.approx(model._predict(c, name, builds.TILES[name], *shape, s))
        assert t(name, a_width=a_width) > t(name)
    assert t("128x64", a_width=4, width=1) == model.predict(c, "128x64", builds.TILES["128x64"], *shape, 1, 4)
    for name in ("128x64", "64x64f", "256x128"):
        s = model.NARROW_SHARE[1] + model.NARROW_SHARE[2] * builds.TILES[name]["bm"] / builds.TILES[name]["bn"]
        assert t(name, a_width=2, width=1) == pytest.approx(model._predict(c, name, builds.TILES[name], *shape, s))
    # in TN with A's rows of odd length (M = 9479) the tall 128 x 64 tile is no longer the pick
    # (measured 0.77x cuBLAS there, 64 x 64f stream-K 0.95x)
    assert access.row_widths("TN", 9479, 406, 1384)[0] == 1
    assert model.ranked_for(fitted, 9479, 406, 1384, 1, 132, "TN", arch="sm_90")[0][0] != "128x64"


def test_stream_k_shares_the_last_wave_of_many(fitted):
    """With 8 * SMs or more of 128 x 128 tiles, no split is offered but WAVE_STREAM_K_TILES run as
    stream-K still: whole waves of whole tiles, the last wave's k-iterations shared.  Where the data-parallel
    tiles leave a last wave nearly empty, the model picks it (2048 x 11008: 688 tiles of 256 x 128 are 5.2
    waves of one block an SM)."""
    names = [n for n, _ in builds.candidates(2048, 11008, 4096)]
    assert -(-2048 // 128) * -(-11008 // 128) >= 8 * 132
    assert not any(" split" in n for n in names)
    assert [n for n in names if n.endswith("stream-K")] == [f"{t} stream-K" for t in builds.WAVE_STREAM_K_TILES]
    assert set(builds.WAVE_STREAM_K_TILES) <= set(builds.STREAM_K_TILES)
    name, cfg, _ = model.choose(fitted["constants"], fitted["blocks_per_sm"], 2048, 11008, 4096, 1, 132)
    assert name.endswith("stream-K") and cfg["sk"] == 1
    # the bound: 1055 tiles of 128 x 128 (5 x 211) take splits and all four stream-K tiles, 1056 (32 x 33) not
    below = [n for n, _ in builds.candidates(5 * 128, 211 * 128, 4096)]
    at = [n for n, _ in builds.candidates(32 * 128, 33 * 128, 4096)]
    assert any(" split" in n for n in below) and not any(" split" in n for n in at)
    assert {n for n in below if n.endswith("stream-K")} == {f"{t} stream-K" for t in builds.STREAM_K_TILES}
    assert [n for n in at if n.endswith("stream-K")] == [f"{t} stream-K" for t in builds.WAVE_STREAM_K_TILES]


def test_the_ranking_holds_the_arch_s_capped_builds_at_their_blocks(fitted):
    """On sm_90 the 128 x 64 summed build runs at four blocks an SM (builds.ARCH_MINB, three as
    calibrated): its predictions change with the arch, no other build's does, and not in NT."""
    M, N, K = 495, 691, 4098
    free = {n: p for n, _, p in model.ranked_for(fitted, M, N, K, 1, 132)}
    capped = {n: p for n, _, p in model.ranked_for(fitted, M, N, K, 1, 132, arch="sm_90")}
    assert fitted["blocks_per_sm"]["128x64 summed"] == 3 and builds.ARCH_MINB["sm_90"]["128x64 summed"][4] == 4
    both = free.keys() & capped.keys()
    summed = [n for n in both if builds.build(n) == "128x64 summed"]
    assert summed and any(capped[n] != free[n] for n in summed)
    assert all(capped[n] == free[n] for n in both if builds.build(n) != "128x64 summed")
    assert model.ranked_for(fitted, M, N, K, 1, 132, "NT", 4) == model.ranked_for(fitted, M, N, K, 1, 132, "NT", 4,
                                                                                 arch="sm_90")


@pytest.mark.parametrize("gpu", ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"])
def test_k_sliced_tiles_are_ranked_only_where_a_block_s_k_is_short(gpu):
    """model.KS_MAX_K: every ranked candidate of a k-sliced tile (ks > 1) runs at most KS_MAX_K of K a block, in
    every layout; below it they are ranked, above it the split ones still where the splits bring a block's K down."""
    table = json.loads((TABLE.parent / f"model-{gpu}.json").read_text())
    seen = {"short": 0, "split": 0}
    for M, N, K, layout, b in suites.random_shapes(200, 3, ("NN", "NT", "TN", "TT")):
        for name, cfg, _ in model.ranked_for(table, M, N, K, b, 132, layout, arch="sm_90"):
            if cfg.get("ks", 1) > 1:
                assert builds.split_k(K, cfg["splits"])[1] <= model.KS_MAX_K, (M, N, K, name)
                seen["short" if K <= model.KS_MAX_K else "split"] += 1
    assert seen["short"] and seen["split"]
    long_k = [n for n, _, _ in model.ranked_for(table, 4000, 200, 3000, 1, 132, arch="sm_90")]
    assert "64x64s" not in long_k and "64x64f" in long_k and "64x64s split4" in long_k
    for count in (1, 3):  # the bound is a block's K, batches or not
        at = lambda K: [n for n, _, _ in model.ranked_for(table, 4000, 200, K, count, 132, arch="sm_90")]  # noqa: E731
        assert "64x64s" in at(1024) and "64x64s" not in at(1028) and "64x64s split2" in at(1028)


def test_split_k_summed_in_the_kernel_is_priced_by_launch(fitted):
    """A launch of split-K summed in the kernel holds whole tiles and no more blocks than are resident
    (dispatch): 75 tiles of 128 x 128 split 7 ways at 2 blocks an SM (264 slots) are 525 blocks in
    launches of 259, so three launches, the last of 7 blocks, where 74 tiles take two.  (Priced as
    rounds of all the blocks, 525 would take two, and the H200 picked such a config at 0.75x cuBLAS.)"""
    c = fitted["constants"]
    cfg = {**builds.TILES["128x128"], "splits": 7, "sk": 2}
    K = 8029
    t = {n: model.predict(c, "128x128 split7 summed", cfg, n * 128, 128, K, 1, 2, 132) for n in (74, 75)}
    iters = 144  # k-iterations of a split: ceil(8029 / 7) = 1147, 1148 rounded up to 4, over bk = 8
    assert t[75] - t[74] == pytest.approx(model._round(c, "128x128", 1, iters, (1.0, 1.0)) + c["launch"])
    assert t[75] - t[74] > 0.15 * t[74]  # a third round (of one block an SM), not a few blocks more in the second


def test_every_candidate_compiles_without_spills_in_every_layout():
    cfgs = {}
    for M, N, K in ((300, 300, 4096), (8000, 8000, 8000)):
        cfgs.update(builds.candidates(M, N, K))
    built = autotune.compile_all(list(cfgs.values()), registry.LAYOUTS, "sm_90")
    bad = {k: v for k, v in built.items() if v[2] is not None or v[1]}
    assert not bad, bad


def test_the_calibration_data_loads_and_refits_to_the_shipped_constants(fitted):
    folder = ROOT / "benchmarks" / "results" / "experiments"
    files = [folder / f for f in fitted["fitted_on"]]
    rows, per_sm, sms, gpu = calibration.load_calibration(files)
    assert gpu == fitted["gpu"] and sms == 132 and len(rows) == fitted["rows"]
    small = [folder / f for f in fitted["small"]["fitted_on"]]
    nt = [folder / f for f in fitted["layouts"]["NT"]["fitted_on"]]
    doc, _ = calibration.model_table(files, small, nt)
    assert list(doc["layouts"]) == ["NT"] and all("-nt-" in f for f in fitted["layouts"]["NT"]["fitted_on"])
    for got, want, fs in ((doc, fitted, files), (doc["small"], fitted["small"], small),
                          (doc["layouts"]["NT"], fitted["layouts"]["NT"], nt)):
        assert got["rows"] == want["rows"] and got["blocks_per_sm"] == want["blocks_per_sm"]
        assert got["rms_log_error"] == pytest.approx(want["rms_log_error"], rel=1e-3)
        assert got["constants"].keys() == want["constants"].keys()
        # the same model, judged by what it predicts on every timing it was fitted to: a constant itself may
        # move along a direction the timings leave flat (a tile of one block an SM under the blend takes
        # (a^p + b^p)^(1/p), not a and b apart), where NumPy's linear algebra of another release walks elsewhere
        set_rows, set_per_sm, _, _ = calibration.load_calibration(fs)
        worst = max(abs(math.log(calibration.predicted(got["constants"], r, set_per_sm, 132)
                                 / calibration.predicted(want["constants"], r, set_per_sm, 132)))
                    for r in set_rows if builds.build(r["candidate"]) in set_per_sm)
        assert worst < 0.01, worst
    assert doc["small"]["below_macs"] == fitted["small"]["below_macs"] == suites.DRAW["min_macs"]
    # the main and small sets keep their residuals (residuals.py), the NT set none
    assert "residuals" not in doc["layouts"]["NT"]
    # the rounds' blend is fitted with the main and layout sets, not the small products' (model.MIX)
    assert model.MIX in doc["constants"] and model.MIX in doc["layouts"]["NT"]["constants"]
    assert model.MIX not in doc["small"]["constants"]
    for got_set, want_set in ((doc, fitted), (doc["small"], fitted["small"])):
        assert got_set["residuals"].keys() == want_set["residuals"].keys()
        for name, want in want_set["residuals"].items():
            got = got_set["residuals"][name]
            assert len(got) == len(want) and all(g[:4] == w[:4] and abs(g[4] - w[4]) < 0.01 for g, w in zip(got, want)), name
    assert json.loads(calibration.dump_table(doc)) == json.loads(json.dumps(doc))  # the compact text is the same table
    assert calibration.dump_table(fitted) == TABLE.read_text()  # and the shipped file is that text
    with pytest.raises(ValueError, match="not a calibration of small products"):
        calibration.model_table(files, files[:1])  # event-timed calibrations are not the small set
    with pytest.raises(ValueError, match="is a calibration in NT; pass it with --layouts"):
        calibration.model_table(nt)
    with pytest.raises(ValueError, match="a layout's set is fitted to the bench draw's"):
        calibration.model_table(files, (), small)


def test_the_h200_table_refits_from_its_calibration_data():
    """The H200's table keeps a round's larger bound (model.MIX: refitted with the blend it was measured no
    better there): it refits with ``--no-mix``; it holds a set for TT, fitted to TT calibrations, and none for NT;
    NT, TN and TT are corrected by their calibrations' residuals (model.near_for)."""
    table = json.loads((TABLE.parent / "model-NVIDIA-H200.json").read_text())
    folder = ROOT / "benchmarks" / "results" / "experiments"
    tt = [folder / f for f in table["layouts"]["TT"]["fitted_on"]]
    fixing = [folder / f for c in table["corrections"].values() for f in c["fitted_on"]]
    doc, _ = calibration.model_table([folder / f for f in table["fitted_on"]],
                                     [folder / f for f in table["small"]["fitted_on"]], tt, mix=False,
                                     correction_files=fixing)
    assert list(doc["corrections"]) == list(table["corrections"]) == ["NT", "TN", "TT"]
    assert table["corrections"]["TT"]["fitted_on"] == table["layouts"]["TT"]["fitted_on"]
    assert all("-nt-" in f for f in table["corrections"]["NT"]["fitted_on"])
    assert all("-tn-" in f for f in table["corrections"]["TN"]["fitted_on"])
    for layout, want in table["corrections"].items():
        got = doc["corrections"][layout]
        assert got["fitted_on"] == want["fitted_on"] and got["residuals"].keys() == want["residuals"].keys()
        for name, rows in want["residuals"].items():
            assert len(got["residuals"][name]) == len(rows), name
            assert all(g[:4] == w[:4] and abs(g[4] - w[4]) < 0.01 for g, w in zip(got["residuals"][name], rows)), name
    assert calibration.dump_table(table) == (TABLE.parent / "model-NVIDIA-H200.json").read_text()
    assert model.MIX not in doc["constants"] and model.MIX not in doc["layouts"]["TT"]["constants"]
    assert doc["gpu"] == table["gpu"] and doc["rows"] == table["rows"] and list(table["layouts"]) == ["TT"]
    assert all("-tt-" in f.name for f in tt) and "residuals" not in doc["layouts"]["TT"]
    assert doc["blocks_per_sm"] == table["blocks_per_sm"] and "64x64f" in doc["blocks_per_sm"]
    main, small = [folder / f for f in table["fitted_on"]], [folder / f for f in table["small"]["fitted_on"]]
    for got, want, files in ((doc, table, main), (doc["small"], table["small"], small),
                             (doc["layouts"]["TT"], table["layouts"]["TT"], tt)):
        assert got["rows"] == want["rows"] and got["blocks_per_sm"] == want["blocks_per_sm"]
        loose = {k for k, v in want["constants"].items() if got["constants"][k] != pytest.approx(v, rel=1e-2, abs=1e-3)}
        if loose:  # constants on a flat direction of the fit, which the BLAS kernels move (TT's 64 x 64s a and l:
            # OpenBLAS's AVX-512 kernels against its Haswell ones): the same fit and the same predictions of their rows
            assert got["rms_log_error"] == pytest.approx(want["rms_log_error"], rel=1e-6), sorted(loose)
            rows, per_sm, sms, _ = calibration.load_calibration(files)
            mine = [r for r in rows if any(r["candidate"].split()[0] == k.split(".")[0] for k in loose)]
            assert mine and all(calibration.predicted(got["constants"], r, per_sm, sms) == pytest.approx(
                calibration.predicted(want["constants"], r, per_sm, sms), rel=1e-2) for r in mine), sorted(loose)
        assert got.get("residuals", {}).keys() == want.get("residuals", {}).keys()
    assert "64x64s" in table["small"]["blocks_per_sm"] and "32x32" in table["small"]["blocks_per_sm"]
    # TT shapes above the small products' bound take the TT set; NT, with no set of its own nor a stand-in's, the main set
    assert model.set_for(table, 2000, 3000, 4000, 1, "TT") is table["layouts"]["TT"]
    for layout in ("NN", "NT", "TN"):
        assert model.set_for(table, 2000, 3000, 4000, 1, layout) is table
    assert model.set_for(table, 64, 64, 64, 1, "TT") is table["small"]


def test_a_layout_with_its_own_set_takes_it_above_the_small_bound(fitted):
    nt = fitted["layouts"]["NT"]
    assert model.set_for(fitted, 2000, 3000, 4000, 1, "NT") is nt
    for layout in ("NN", "TN"):  # the main set
        assert model.set_for(fitted, 2000, 3000, 4000, 1, layout) is fitted
    assert model.set_for(fitted, 64, 64, 64, 1, "NT") is fitted["small"]


def test_tt_takes_the_nt_set_where_the_table_has_one_and_no_tt_set(fitted):
    """TT reads B as NT does (4-byte copies that transpose it): it is ranked by NT's set, with the main
    set's u and l (NT reads nothing narrow, TT reads A narrow), where the table has one and no TT set
    of its own, by the main set where it has neither, and by the small set below its bound either way."""
    nt = fitted["layouts"]["NT"]
    shape = (2000, 3000, 4000, 1)
    tt_set = model.set_for(fitted, *shape, "TT")
    assert tt_set == model.set_for(fitted, 1000, 2000, 3000, 1, "TT") and tt_set["blocks_per_sm"] is nt["blocks_per_sm"]
    assert tt_set["constants"].keys() == nt["constants"].keys()
    for k, v in tt_set["constants"].items():
        taken = k.endswith((".u", ".l")) and k in fitted["constants"]
        assert v == (fitted["constants"][k] if taken else nt["constants"][k]), k
    assert any(tt_set["constants"][k] != nt["constants"][k] for k in nt["constants"] if k.endswith(".l"))
    assert model.set_for(fitted, *shape, "NT") is nt and nt["constants"] is not tt_set["constants"]
    other = {**fitted, "constants": {**fitted["constants"], "64x64f.l": 9.0}}  # NT's set shared, other main u, l
    assert model.set_for(other, *shape, "TT")["constants"]["64x64f.l"] == 9.0
    assert model.set_for(fitted, *shape, "TT")["constants"]["64x64f.l"] == fitted["constants"]["64x64f.l"]
    assert model.set_for(fitted, 64, 64, 64, 1, "TT") is fitted["small"]
    no_sets = {k: v for k, v in fitted.items() if k != "layouts"}
    assert model.set_for(no_sets, *shape, "TT") is no_sets
    own = {**fitted, "layouts": {**fitted["layouts"], "TT": dict(nt)}}
    assert model.set_for(own, *shape, "TT") is own["layouts"]["TT"]
    # the ranking follows the set: TT's predictions are that set's, with TT's read widths
    tt = model.ranked_for(fitted, *shape, 132, "TT", arch="sm_90")
    by_set = model.ranked(tt_set["constants"], builds.blocks_per_sm(nt["blocks_per_sm"], "TT", "sm_90"), *shape, 132,
                          "TT")
    assert [(n, t) for n, _, t in tt] == [(n, t) for n, _, t in by_set]


def test_small_products_take_the_small_set_below_its_bound(fitted):
    bound = fitted["small"]["below_macs"]
    assert model.set_for(fitted, 64, 64, 64, 1) is fitted["small"]
    assert model.set_for(fitted, 1024, 1024, 1024, 1) is fitted  # exactly the bound
    assert model.set_for(fitted, 512, 512, 512, 8) is fitted  # a batch counts its work
    assert model.set_for(fitted, 1023, 1024, 1024, 1) is fitted["small"]
    assert 1024**3 == bound
    # the 32 x 32 tile exists only in the small set; products of 64^3 take it, large ones never see it
    assert "32x32" in fitted["small"]["blocks_per_sm"] and "32x32" not in fitted["blocks_per_sm"]
    assert model.ranked_for(fitted, 64, 64, 64, 1, 132)[0][0] == "32x32"
    for M, N, K in _shapes(200):
        if M * N * K >= bound:
            name = model.ranked_for(fitted, M, N, K, 1, 132)[0][0]
            assert not name.startswith("32x32"), (M, N, K, name)


def test_the_h200_selection_takes_its_nn_entries_measured_as_tn_and_records_that_run(tmp_path, monkeypatch):
    """On the H200, whose NN products from 2048 columns of B run as TN on A transposed (access.family_transposes_a), the
    shipped NN entries tuned as they now run are current (the selection passes the GPU's name wherever it decides the
    run), an NN product below the bound still takes its NN entry, and a tuning's winner recorded for such a product
    records the run as TN with TN's build options."""
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(tmp_path))
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, arch="sm_90", sms=132, id=0, l2_bytes=50 << 20,
                            smem_per_block_optin=SM90.smem_per_block_optin, smem_per_sm=SM90.smem_per_sm,
                            regs_per_sm=SM90.regs_per_sm, max_threads_per_block=1024, max_threads_per_sm=2048,
                            max_blocks_per_sm=32)
    assert props.name in access.A_TRANSPOSE_GPUS
    sel = selection.Selector(props, "1", "13.0")
    for shape in ((4096, 4096, 1024), (2048, 2048, 2048), (1024, 1024, 1024)):
        assert sel("NN", *shape, 1)[1] == "shipped", shape
    shipped = sel.tables()[1]
    assert shipped[entries.entry_key("NN", entries.bucket(2048, 2048, 2048, 1))]["ran_as"] == "TN"
    cfg = {**builds.TILES["128x256"], "splits": 1}
    sel.record("NN", 3000, 2500, 2000, 1, {"config": cfg, "tflops": 50.0, "ms": 1.0})
    e = entries.read_table(sel.cache_path)[entries.shape_key("NN", 3000, 2500, 2000, 1)]
    assert e["ran_as"] == "TN" and e["ptxas"] == entries.ptxas(registry.FAMILY.params(cfg), "TN", 3000, 2500, 2000, 1)
    assert e["ptxas"] and sel("NN", 3000, 2500, 2000, 1) == (cfg, "tuned")


def test_the_selection_takes_the_model_where_no_table_holds_the_shape(fitted, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(tmp_path))
    props = SimpleNamespace(name=fitted["gpu"], major=9, minor=0, arch="sm_90", sms=132, id=0, l2_bytes=50 << 20,
                            smem_per_block_optin=SM90.smem_per_block_optin, smem_per_sm=SM90.smem_per_sm,
                            regs_per_sm=SM90.regs_per_sm, max_threads_per_block=1024, max_threads_per_sm=2048,
                            max_blocks_per_sm=32)
    sel = selection.Selector(props, "1", "13.0")
    for shape in ((777, 999, 1111), (1777, 999, 2111), (48, 48, 48)):  # the main set, the small set
        cfg, source = sel("NN", *shape, 1)
        expected = model.ranked_for(fitted, *shape, 1, 132, arch="sm_90")[0][1]  # the set's constants and residuals
        assert source == "model" and cfg == expected
    # the ranking takes the device's arch (the blocks per SM of its capped builds: builds.blocks_per_sm)
    seen = []
    real = builds.blocks_per_sm
    monkeypatch.setattr(builds, "blocks_per_sm", lambda per_sm, layout, arch: seen.append(arch) or real(per_sm, layout, arch))
    sel.predicted(495, 691, 4098, 1, 3)
    assert seen and set(seen) == {"sm_90"}
    monkeypatch.setattr(builds, "blocks_per_sm", real)
    assert sel("NN", 4096, 4096, 4096, 1)[1] == "shipped"  # measured entries first
    assert sel("NN", 4095, 4095, 4095, 1)[1] == "shipped"
    # a shape the shipped table was not measured on, in the bucket of one it was: the model
    assert entries.bucket(3000, 3000, 3000, 1) == entries.bucket(4095, 4095, 4095, 1)
    assert sel("NN", 3000, 3000, 3000, 1)[1] == "model"
    # a shape tuned by the user fills its bucket's key too; a shipped shape of that bucket keeps its
    # own measured entry, and other shapes of the bucket take the tuned one
    tuned = {"config": dict(builds.TILES["64x128"], splits=1), "shape": [3000, 3000, 3000, 1]}
    sel._user = {entries.shape_key("NN", 3000, 3000, 3000, 1): tuned,
                 entries.entry_key("NN", entries.bucket(3000, 3000, 3000, 1)): tuned}
    sel._memo.clear()
    assert sel("NN", 4095, 4095, 4095, 1)[1] == "shipped"
    assert sel("NN", 3000, 3000, 3000, 1) == (tuned["config"], "tuned")
    assert sel("NN", 3500, 3500, 3500, 1) == (tuned["config"], "tuned")
    # another layout: its own bucket entry before NN's entry for the very shape (borrowed)
    own = {"config": dict(builds.TILES["128x64"], splits=1), "shape": [4096, 4096, 4096, 1], "ran_as": "NN"}
    sel._user = {entries.shape_key("NN", 3968, 4096, 4096, 1): {**tuned, "shape": [3968, 4096, 4096, 1]},
                 entries.entry_key("NT", entries.bucket(3968, 4096, 4096, 1)): own}
    sel._memo.clear()
    assert sel("NT", 3968, 4096, 4096, 1) == (own["config"], "tuned")
    assert sel("TN", 3968, 4096, 4096, 1) == (tuned["config"], "tuned")  # none of its own: NN's
    other = SimpleNamespace(**{**props.__dict__, "name": "Another GPU"})
    assert selection.Selector(other, "1", "13.0")("NN", 777, 999, 1111, 1)[1] == "heuristic"


def test_small_only_tiles_below_the_bench_draw():
    assert builds.SMALL_MACS == suites.DRAW["min_macs"]
    big = {n.split()[0] for n, _ in builds.candidates(1024, 1024, 1024)}
    small = {n.split()[0] for n, _ in builds.candidates(1023, 1024, 1024)}
    assert not big & set(builds.SMALL_ONLY) and set(builds.SMALL_ONLY) <= small
    assert not {n.split()[0] for n, _ in builds.candidates(512, 512, 512, 8)} & set(builds.SMALL_ONLY)


def test_held_out_picks_are_measured_on_other_seeds():
    folder = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "experiments"
    a, b = (folder / f"NVIDIA-H100-80GB-HBM3-2026-11-23-calibration-s{s}.json.gz" for s in (331, 333))
    table, _ = calibration.model_table([a])
    r = calibration.held_out(table, [b])
    assert r["shapes"] >= 30 and r["pick"] > 0.9 * r["best"]  # fitted on one seed, it picks well on another
    assert len(r["per_shape"]) == r["shapes"]  # each shape's figures, whose logs average to the geometric means
    assert math.exp(sum(math.log(p["ratio"]) for p in r["per_shape"]) / r["shapes"]) == pytest.approx(r["pick"])
    assert math.exp(sum(math.log(p["best"]) for p in r["per_shape"]) / r["shapes"]) == pytest.approx(r["best"])
    assert all(p["ratio"] <= p["best"] * (1 + 1e-12) for p in r["per_shape"])
    timed = {row["candidate"] for row in results.read(b)["rows"]}
    assert all(p["pick"] in timed and p["shape"][0] == "NN" for p in r["per_shape"])


def test_held_out_ranks_a_tn_calibration_as_the_selection_does(fitted, tmp_path):
    """On a TN calibration held_out ranks each shape with A's and B's widths as the selection does
    (A's narrow reads by their share of the tile), not with the narrower of the two taken as B's:
    on 9479x406x1384 (A's rows odd, B's copied) 64 x 64f stream-K is ranked above 128 x 64."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "experiments"
    doc = results.read(folder / "NVIDIA-H100-80GB-HBM3-2026-11-27-calibration-tn-s901.json.gz")
    shape = (9479, 406, 1384)
    assert access.row_widths("TN", *shape) == (1, 4)
    names = [n for n, _, _ in model.ranked_for(fitted, *shape, 1, 132, "TN", arch="sm_90")]
    assert names.index("64x64f stream-K") < names.index("128x64")
    ms = {"64x64f stream-K": 0.261, "128x64": 0.324}  # as tuned on the H100
    doc["rows"] = [{"M": shape[0], "N": shape[1], "K": shape[2], "layout": "TN", "batch": 1, "candidate": n,
                    "config": doc["configs"][n], "ms": t, "rel_err": 1e-7, "cublas_ms": 0.248} for n, t in ms.items()]
    path = tmp_path / "NVIDIA-H100-80GB-HBM3-2026-11-27-calibration-tn-s1.json"  # plain: results.read takes either
    path.write_text(json.dumps(doc))
    r = calibration.held_out(fitted, [path])
    assert r["shapes"] == 1 and r["pick"] == pytest.approx(0.248 / 0.261) and r["best"] == pytest.approx(0.248 / 0.261)


def test_narrow_reads_charge_latency_and_throughput_apart(fitted):
    """``l`` weighs the lone block's latency term, ``u`` the SM's throughput term; a table without
    ``l`` charges ``u`` for both (the form before ``l``), and a larger ``l`` never predicts faster."""
    c, per_sm = dict(fitted["constants"]), fitted["blocks_per_sm"]
    M, N, K = 187, 1367, 10753  # few tiles, long K: rounds of one or two blocks an SM
    for name, cfg in builds.candidates(M, N, K, 1, 132, per_sm):
        if builds.build(name) not in per_sm:
            continue
        r, tile = per_sm[builds.build(name)], name.split()[0]
        old = {k: v for k, v in c.items() if k != f"{tile}.l"}
        same = {**old, f"{tile}.l": old[f"{tile}.u"]}
        assert model.predict(old, name, cfg, M, N, K, 1, r, 132, 1) == model.predict(same, name, cfg, M, N, K, 1, r, 132, 1)
        more = {**c, f"{tile}.l": c[f"{tile}.l"] + 0.5}
        assert model.predict(more, name, cfg, M, N, K, 1, r, 132, 1) >= model.predict(c, name, cfg, M, N, K, 1, r, 132, 1)
        assert model.predict(more, name, cfg, M, N, K, 1, r, 132, 4) == model.predict(c, name, cfg, M, N, K, 1, r, 132, 4)
    # at one block of 64x64f an SM the latency term binds: under the max (a set without model.MIX) l, not u,
    # sets the narrow cost; blended, u moves it far less than l does
    cfg = {**builds.TILES["64x64f"], "splits": 1}
    lone = {**{k: v for k, v in c.items() if k != model.MIX}, "64x64f.b": c["64x64f.a"] / 10}
    t = lambda consts: model.predict(consts, "64x64f", cfg, 64, 64, 4096, 1, 6, 132, 1)
    assert t({**lone, "64x64f.u": lone["64x64f.u"] + 1.0}) == t(lone)
    mixed = {**lone, model.MIX: c[model.MIX]}
    by_u = t({**mixed, "64x64f.u": mixed["64x64f.u"] + 1.0}) - t(mixed)
    by_l = t({**mixed, "64x64f.l": mixed["64x64f.l"] + 1.0}) - t(mixed)
    assert 0 < by_u < by_l / 4


def test_a_round_blends_its_latency_and_throughput_bounds(fitted):
    """model.MIX: a round takes (lat^p + thr^p)^(1/p), between the larger bound and their sum, falling
    towards the max as p grows; a set without it takes the max.  The H100's main and layout sets
    hold it; its small products' set (not measured there) and the H200's table (measured no better) do not."""
    c = fitted["constants"]
    assert 1.0 < c[model.MIX] < 8.0 and model.MIX in fitted["layouts"]["NT"]["constants"]
    assert model.MIX not in fitted["small"]["constants"]
    assert model.MIX not in json.loads((TABLE.parent / "model-NVIDIA-H200.json").read_text())["constants"]
    w = (1.0, 1.0)
    for q in (1, 2, 3, 6):
        lat, thr = c["64x64f.a"], q * c["64x64f.b"]
        bare = {k: v for k, v in c.items() if k != model.MIX}
        assert model._round(bare, "64x64f", q, 10, w) == pytest.approx(c["64x64f.f"] + 10 * max(lat, thr))
        blends = [model._round({**c, model.MIX: p}, "64x64f", q, 10, w) for p in (1.0, 1.7, 4.0, 64.0)]
        assert blends[0] == pytest.approx(c["64x64f.f"] + 10 * (lat + thr))
        assert all(x > y for x, y in zip(blends, blends[1:])) and blends[-1] == pytest.approx(model._round(bare, "64x64f", q, 10, w), rel=0.02)


def test_few_resident_blocks_are_priced_slower_than_the_max_said(fitted):
    """The blend's reason: on three TT shapes of few columns with A read narrow, 64 x 64f summed in the
    kernel at about 3 two-warp blocks an SM ran 1.27x the time of the same tile split twice as many ways
    at about 6 (the TT lows probe); the max priced them level and picked the first.  Ranked now, the
    second is ahead (the shapes were probed, not fitted: the exponent was fitted to NN calibrations)."""
    for (M, N, K), slow, fast in (((4147, 151, 3503), 2, 4), ((2010, 180, 12878), 4, 8), ((2014, 146, 8530), 4, 8)):
        order = [n for n, _, _ in model.ranked_for(fitted, M, N, K, 1, 132, "TT", arch="sm_90")]
        assert order.index(f"64x64f split{fast} summed") < order.index(f"64x64f split{slow} summed")
        bare = {**fitted, "constants": {k: v for k, v in fitted["constants"].items() if k != model.MIX},
                "layouts": {"NT": {**fitted["layouts"]["NT"], "constants": {
                    k: v for k, v in fitted["layouts"]["NT"]["constants"].items() if k != model.MIX}}}}
        order = [n for n, _, _ in model.ranked_for(bare, M, N, K, 1, 132, "TT", arch="sm_90")]
        assert order.index(f"64x64f split{slow} summed") < order.index(f"64x64f split{fast} summed")


def test_calibrations_with_odd_rows_label_the_builds_that_read_them(fitted, tmp_path):
    """A calibration measured after the builds of builds.BY_ROWS_BUILDS[ODD_ROWS] read rows of odd
    length by rows says so (``"odd_rows": true``): its rows of those builds on such shapes were read
    at width ODD_ROWS ("read", what the fit charges), the rest as their shape allows; files without it
    were read 4 bytes at a time.  Likewise one measured after the builds of
    builds.BY_ROWS_BUILDS[ODD_PAIRS] read rows of twice an odd length by rows (``"odd_pairs": true``):
    its rows of those builds on such shapes (width 2) were read at ODD_PAIRS; files without it were
    read 8 bytes at a time.  "width" (the shape's, which groups a shape's rows) is the same."""
    paths = [ROOT / "benchmarks" / "results" / "experiments" / f for f in fitted["fitted_on"]]
    docs = {p: results.read(p) for p in paths}
    # the last fitted file measured before both, and one measured after both (the narrow-B calibration)
    path = next(p for p in reversed(paths) if not docs[p].get("odd_rows") and not docs[p].get("odd_pairs"))
    doc = docs[path]
    after_both = next(p for p in paths if docs[p].get("odd_rows") and docs[p].get("odd_pairs"))
    reads = {r["read"] for r in calibration.load_calibration([after_both])[0]}
    assert {access.ODD_ROWS, access.ODD_PAIRS} <= reads
    files = {}
    for flags in ((), ("odd_rows",), ("odd_pairs",), ("odd_rows", "odd_pairs")):
        marked = tmp_path / "-".join(("marked",) + flags) / path.name.removesuffix(".gz")
        marked.parent.mkdir()
        marked.write_text(json.dumps({**doc, **{f: True for f in flags}}))
        files[flags] = calibration.load_calibration([marked])[0]
    before = calibration.load_calibration([path])[0]
    assert files[()] == before
    assert {1, 2} <= {r["width"] for r in before}
    for flags, after in files.items():
        classes = {code for code, flag in ((access.ODD_ROWS, "odd_rows"), (access.ODD_PAIRS, "odd_pairs"))
                   if flag in flags}
        assert len(before) == len(after)
        changed = dict.fromkeys(classes, 0)
        for b, a in zip(before, after):
            on = next((code for code in classes if b["width"] == access.ROW_CLASSES[code][1]
                       and builds.build(b["candidate"]) in builds.BY_ROWS_BUILDS[code]), None)
            assert b["read"] == b["width"] == a["width"] and a["read"] == (b["width"] if on is None else on)
            if on is not None:
                changed[on] += 1
        assert all(n > 0 for n in changed.values()), (flags, changed)
    # a build that reads only one class by rows keeps the other class's rows at the narrower width
    both = files[("odd_rows", "odd_pairs")]
    assert any(r["width"] == 2 and builds.build(r["candidate"]) == "64x64s" and r["read"] == 2 for r in both)
    assert any(r["width"] == 1 and builds.build(r["candidate"]) == "64x128" and r["read"] == 1 for r in both)
    assert any(r["width"] == 2 and builds.build(r["candidate"]) == "64x128" and r["read"] == access.ODD_PAIRS
               for r in both)


def test_a_calibration_of_the_arch_s_capped_builds_replaces_their_earlier_rows(fitted):
    """A calibration marked ``"arch_minb": true`` timed the builds builds.ARCH_MINB names at their minb
    (128 x 64 summed at four blocks an SM on sm_90): fitted beside files without the mark, that build's
    rows measured at other blocks per SM (three) are left out, the rest kept (two early files measured
    it at four), and its blocks per SM are the marked file's, first or last.  Without a marked file
    (the shipped tables' files) nothing is left out."""
    folder = ROOT / "benchmarks" / "results" / "experiments"
    earlier = [folder / f for f in fitted["fitted_on"]]
    marked = folder / "NVIDIA-H100-80GB-HBM3-2026-11-25-calibration-128x64-s523.json.gz"
    assert results.read(marked)["arch_minb"]
    rows, per_sm, _, _ = calibration.load_calibration(earlier)
    assert len(rows) == fitted["rows"] and per_sm["128x64 summed"] == 3
    both, per_sm2, _, _ = calibration.load_calibration(earlier + [marked])
    new = calibration.load_calibration([marked])[0]
    stale = kept = 0
    for f in earlier:
        recorded = results.read(f)["blocks_per_sm"]
        for r in calibration.load_calibration([f])[0]:
            if builds.build(r["candidate"]) == "128x64 summed":
                stale += recorded[r["candidate"]] != 4
                kept += recorded[r["candidate"]] == 4
    assert stale > 0 and kept > 0
    assert len(both) == len(rows) - stale + len(new) and per_sm2 == {**per_sm, "128x64 summed": 4}
    assert calibration.load_calibration([marked] + earlier)[1]["128x64 summed"] == 4


def test_calibration_rows_keep_the_copy_threshold_they_ran_under(tmp_path):
    """Rows of odd length are copied from access.ODD_COPY_MACS_PER_ELEMENT multiply-adds per element (512),
    but the calibrations were measured when that was ODD_COPY_MACS_FIRST (1024): a file without
    ``"odd_copy_macs"`` keeps its shapes between the two labelled as read 4 bytes at a time, and one that
    says 512 has them copied (16-byte reads)."""
    path = ROOT / "benchmarks" / "results" / "experiments" / "NVIDIA-H100-80GB-HBM3-2026-11-25-calibration-narrowb-s481.json.gz"
    doc = results.read(path)
    assert doc.get("odd_copies") and "odd_copy_macs" not in doc
    shape = (863, 2831, 5175)  # N odd, ODD_COPY_MACS_PER_ELEMENT <= M < ODD_COPY_MACS_FIRST
    assert access.ODD_COPY_MACS_PER_ELEMENT <= shape[0] < access.ODD_COPY_MACS_FIRST

    def widths(p):
        rows = calibration.load_calibration([p])[0]
        return {r["width"] for r in rows if (r["M"], r["N"], r["K"]) == shape}

    assert widths(path) == {1}
    marked = tmp_path / path.name.removesuffix(".gz")
    marked.write_text(json.dumps({**doc, "odd_copy_macs": access.ODD_COPY_MACS_PER_ELEMENT}))
    assert widths(marked) == {4}


def _tn_pick(table, shape):
    return model.ranked_for(table, *shape, 1, 132, "TN", arch="sm_90")[0][0]


def test_layout_rates_scale_only_their_layout_on_their_gpu(fitted, monkeypatch):
    """TN ranked by the main set takes the tiles' measured TN rates where they are on: the wide 16 x 8
    tiles lose to 128 x 128 at 2048 x 2048 x 2048; NN, another GPU's table and a table with a TN set of
    its own are ranked as without them; switched off, TN is ranked as without them too."""
    shape = (2048, 2048, 2048)
    assert model.LAYOUT_RATES_ON  # on by default
    monkeypatch.setattr(model, "LAYOUT_RATES_ON", False)
    plain = _tn_pick(fitted, shape)
    nn = model.ranked_for(fitted, *shape, 1, 132, "NN", arch="sm_90")
    assert plain.split()[0] in ("128x256", "256x128")  # the premise: the NN constants pick a wide tile
    monkeypatch.setattr(model, "LAYOUT_RATES_ON", True)
    assert _tn_pick(fitted, shape).split()[0] == "128x128"
    assert model.ranked_for(fitted, *shape, 1, 132, "NN", arch="sm_90") == nn
    assert _tn_pick({**fitted, "gpu": "NVIDIA H200"}, shape) == plain
    assert _tn_pick({**fitted, "layouts": {**fitted.get("layouts", {}), "TN": fitted}}, shape) == plain
    monkeypatch.setattr(model, "LAYOUT_RATES_ON", False)
    assert _tn_pick(fitted, shape) == plain


def test_layout_rates_rescale_the_predictions_they_rank(fitted, monkeypatch):
    shape = (1024, 4096, 4096)
    monkeypatch.setattr(model, "LAYOUT_RATES_ON", False)
    before = {n: t for n, _, t in model.ranked_for(fitted, *shape, 1, 132, "TN", arch="sm_90")}
    monkeypatch.setattr(model, "LAYOUT_RATES_ON", True)
    after = model.ranked_for(fitted, *shape, 1, 132, "TN", arch="sm_90")
    rates = model.LAYOUT_RATES[(fitted["gpu"], "TN")]
    assert [t for _, _, t in after] == sorted(t for _, _, t in after)
    for n, _, t in after:
        assert t == pytest.approx(before[n] * rates.get(n.split()[0], 1.0))


def test_layout_rates_leave_the_small_products_set_alone(fitted, monkeypatch):
    shape = (600, 700, 900)  # below the small set's bound: ranked by the small set, graph-timed, not scaled
    assert fitted["small"]["below_macs"] > 600 * 700 * 900
    monkeypatch.setattr(model, "LAYOUT_RATES_ON", False)
    before = model.ranked_for(fitted, *shape, 1, 132, "TN", arch="sm_90")
    monkeypatch.setattr(model, "LAYOUT_RATES_ON", True)
    assert model.ranked_for(fitted, *shape, 1, 132, "TN", arch="sm_90") == before


def test_offered_builds_are_ranked_for_nn_by_the_main_set_only(fitted):
    """OFFERED_BUILDS (no calibration timed them) are ranked for single NN products by the main set of their
    GPU's table, at their blocks per SM; not in the layouts measured slower or not measured (NT run as NN
    included), not for batched products, not by the small set, not on another GPU."""
    offered = model.OFFERED_BUILDS[fitted["gpu"]]
    assert offered and all(b not in fitted["blocks_per_sm"] for b in offered)
    assert all(builds.build(n) == n and n.split()[0] in builds.STREAM_K_TILES for n in offered)
    shape = (701, 6768, 2304, 1)  # few rows, wide, mid K, rows 16-byte aligned: 64 x 128 stream-K ranks first in NN
    names = lambda t, layout, s=shape: {n for n, _, _ in model.ranked_for(t, *s, 132, layout, arch="sm_90")}
    assert set(offered) <= names(fitted, "NN")
    for b in offered:  # priced at the offered blocks per SM
        cfg = dict(builds.candidates(*shape, 132))[b]
        t = next(t for n, _, t in model.ranked_for(fitted, *shape, 132, "NN", arch="sm_90") if n == b)
        assert t == pytest.approx(model.predict(fitted["constants"], b, cfg, *shape, offered[b], 132))
    assert model.ranked_for(fitted, *shape, 132, "NN", arch="sm_90")[0][0] in offered
    for layout in ("NT", "TN", "TT"):
        assert not set(offered) & names(fitted, layout), layout
    nt_as_nn = (4411, 222, 8761, 1)  # NT run as NN on B transposed: ranked by the main set, not measured there
    assert access.kernel_layout("NT", *nt_as_nn) == "NN" and set(offered) <= names(fitted, "NN", nt_as_nn)
    assert not set(offered) & names(fitted, "NT", nt_as_nn)
    assert not set(offered) & names(fitted, "NN", shape[:3] + (3,))  # batched: not measured
    assert not set(offered) & names(fitted, "NN", (300, 500, 600, 1))  # the small products' set
    other = {**fitted, "gpu": "another GPU"}
    assert not set(offered) & names(other, "NN")


def test_a_table_that_timed_the_offered_builds_ranks_them_itself():
    """The H200's calibrations timed 128 x 64 and 64 x 128 as stream-K: no builds are offered to it, its table
    holds their blocks per SM and ranks them in every layout, single products and batches alike."""
    table = json.loads((TABLE.parent / "model-NVIDIA-H200.json").read_text())
    offered = set(model.OFFERED_BUILDS["NVIDIA H100 80GB HBM3"])
    assert table["gpu"] not in model.OFFERED_BUILDS and offered <= set(table["blocks_per_sm"])
    for layout in registry.LAYOUTS:
        for count in (1, 3):
            names = {n for n, _, _ in model.ranked_for(table, 701, 6768, 2304, count, 132, layout, arch="sm_90")}
            assert offered <= names, (layout, count)


def test_fit_and_held_out_take_no_mix(monkeypatch):
    """Both subcommands fit the blend unless --no-mix (the H200's table is reproduced without it); ``fit`` passes
    --corrections on."""
    asked, fixing = [], []
    monkeypatch.setattr(calibration, "model_table", lambda files, small, layouts, mix, corrections:
                        asked.append(mix) or fixing.append(list(corrections)) or ({}, "fitted"))
    monkeypatch.setattr(calibration, "held_out", lambda doc, on: {"shapes": 1, "pick": 1.0, "best": 1.0})
    monkeypatch.setattr(calibration, "dump_table", lambda doc: "{}")
    monkeypatch.setattr(calibration.Path, "write_text", lambda self, text: None)
    for extra, mix in (([], True), (["--no-mix"], False)):
        assert calibration.main(["held-out", "a.json", "--on", "b.json", *extra]) == 0
        assert calibration.main(["fit", "a.json", "--out", "t.json", *extra]) == 0
        assert asked[-2:] == [mix, mix]
    assert calibration.main(["fit", "a.json", "--corrections", "nt.json", "tt.json", "--out", "t.json"]) == 0
    assert fixing == [[], [], [], [], ["nt.json", "tt.json"]]


def test_a_blend_exponent_below_one_is_refused(monkeypatch):
    """A p-norm with p below 1 exceeds the sum of the bounds: the fit refuses it and names the way out."""
    monkeypatch.setattr(calibration, "load_calibration", lambda files: ([], {}, 132, "GPU"))
    monkeypatch.setattr(calibration, "fit", lambda rows, per_sm, sms, mix=True: ({model.MIX: 0.8} if mix else {}, 0.1))
    monkeypatch.setattr(calibration, "_read", lambda f, gpu: {"layout": "NN"})
    with pytest.raises(ValueError, match="below 1; fit it with --no-mix"):
        calibration.model_table(["a.json"])
    monkeypatch.setattr(calibration, "residual_rows", lambda *a: {})
    assert model.MIX not in calibration.model_table(["a.json"], mix=False)[0]["constants"]


@pytest.mark.parametrize("table_name, layout, calib, candidate", [
    ("model-NVIDIA-H200.json", "NT", "NVIDIA-H200-2026-11-28-calibration-nt-s1439.json.gz", "128x64 split4 summed"),
    ("model-NVIDIA-H100-80GB-HBM3.json", "TN", "NVIDIA-H100-80GB-HBM3-2026-11-27-calibration-tn-s901.json.gz", "256x128")])
def test_a_layouts_corrections_are_measured_against_what_the_selection_predicts(table_name, layout, calib, candidate):
    """calibration.corrections: each timing's log of measured over the time ``model.ranked_for`` gives that candidate
    on that shape, as the selection ranks it uncorrected: the H200's NT by the main set at NT's blocks an SM
    (builds.LAYOUT_BLOCKS: 128 x 64 holds 3 in NT, 4 in NN), the H100's TN with its rate (model.LAYOUT_RATES: 256 x
    128 1.05x in TN)."""
    folder = ROOT / "benchmarks" / "results" / "experiments"
    bare = {k: v for k, v in json.loads((TABLE.parent / table_name).read_text()).items() if k != "corrections"}
    near = calibration.corrections(bare, layout, [folder / calib])
    rows, _, _, _ = calibration.load_calibration([folder / calib])
    checked = 0
    for r in rows:
        if r["candidate"] != candidate or not r.get("ms"):
            continue
        ranks = {n: t for n, _, t in model.ranked_for(bare, r["M"], r["N"], r["K"], 1, 132, layout, r["b_width"],
                                                      r["out_width"], "sm_90", r["a_read"])}
        want = residuals.row(r["M"], r["N"], r["K"], r["read"], math.log(1e3 * r["ms"] / ranks[candidate]))
        assert want in near[candidate], (r["M"], r["N"], r["K"])
        checked += 1
    assert checked >= 10 and len(near[candidate]) == checked


def test_nn_run_as_tn_is_ranked_as_tn_with_b_read_as_stored():
    """An NN product from 2048 columns of B and 2^30 multiply-adds runs as TN on A transposed into aligned rows on the
    H200 (access.kernel_layout): ranked as TN (the main set, TN's corrections), A 16 bytes at a time, B at the width it
    is read with as stored (rows of N floats: of odd length here, 4 bytes at a time); below the bound, as NN; by the
    H100's table, as NN (the rule is the H200's)."""
    table = json.loads((TABLE.parent / "model-NVIDIA-H200.json").read_text())
    shape = (301, 4097, 2001, 1)  # A's rows (K) of odd length, aligned once transposed; B's of odd length
    assert access.kernel_layout("NN", *shape, table["gpu"]) == "TN" and access.row_widths("TN", *shape)[1] == 1
    as_tn = model.ranked_for(table, *shape, 132, "TN", 1, access.out_width(4097), "sm_90", 4)
    assert model.ranked_for(table, *shape, 132, "NN", arch="sm_90") == as_tn
    assert as_tn != model.ranked_for(table, *shape, 132, "TN", 4, access.out_width(4097), "sm_90", 4)  # B charged
    h100 = json.loads((TABLE.parent / "model-NVIDIA-H100-80GB-HBM3.json").read_text())
    a, b = access.row_widths("NN", *shape)
    assert model.ranked_for(h100, *shape, 132, "NN", arch="sm_90") == model.ranked_for(
        h100, *shape, 132, "NN", b, access.out_width(4097), "sm_90", a)
    small = (301, 2047, 2001, 1)
    assert access.kernel_layout("NN", *small, table["gpu"]) == "NN"
    a, b = access.row_widths("NN", *small)
    assert model.ranked_for(table, *small, 132, "NN", arch="sm_90") == model.ranked_for(
        table, *small, 132, "NN", b, access.out_width(2047), "sm_90", a)


def test_tt_run_as_tn_is_ranked_as_tn_with_a_read_as_in_tn():
    """A TT product from 2048 rows of A and 2^30 multiply-adds runs as TN on B transposed into aligned rows
    (access.kernel_layout): ranked as TN (the main set, TN's corrections), B 16 bytes at a time, A at the width TN
    reads it (rows of M floats: of odd length here, 4 bytes at a time); below the bound, as TT (its own set)."""
    table = json.loads((TABLE.parent / "model-NVIDIA-H200.json").read_text())
    shape = (4097, 301, 2001, 1)  # A's rows of odd length; B's of odd length, aligned once transposed
    assert access.kernel_layout("TT", *shape) == "TN" and access.row_widths("TN", *shape)[0] == 1
    as_tn = model.ranked_for(table, *shape, 132, "TN", 4, access.out_width(301), "sm_90", 1)
    assert model.ranked_for(table, *shape, 132, "TT", arch="sm_90") == as_tn
    assert as_tn != model.ranked_for(table, *shape, 132, "TN", 4, access.out_width(301), "sm_90", 4)  # A charged
    assert model.set_for(table, *shape, "TN") is table and "TN" in table["corrections"]
    small = (2047, 301, 2001, 1)
    assert access.kernel_layout("TT", *small) == "TT"
    a, b = access.row_widths("TT", *small)
    assert model.ranked_for(table, *small, 132, "TT", arch="sm_90") == model.ranked_for(
        table, *small, 132, "TT", b, access.out_width(301), "sm_90", a)
    assert model.set_for(table, *small, "TT") is table["layouts"]["TT"]


def test_a_layouts_corrections_pick_better_held_out():
    """Held out, corrections from three of the H200's NT calibrations pick better on the fourth (0.991x -> 1.005x
    cuBLAS when made, every seed better; docs/model.md).  NN and small products' calibrations are refused."""
    folder = ROOT / "benchmarks" / "results" / "experiments"
    table = json.loads((TABLE.parent / "model-NVIDIA-H200.json").read_text())
    bare = {k: v for k, v in table.items() if k != "corrections"}
    nt = [folder / f"NVIDIA-H200-2026-11-28-calibration-nt-s{s}.json.gz" for s in (1439, 1447, 1471, 1481)]
    near = calibration.corrections(bare, "NT", nt[:3])
    assert model.LAYOUT_RATES and ("NVIDIA H200", "NT") not in model.LAYOUT_RATES
    plain = calibration.held_out(bare, nt[3:])
    fixed = calibration.held_out({**bare, "corrections": {"NT": {"fitted_on": [], "residuals": near}}}, nt[3:])
    assert fixed["shapes"] == plain["shapes"] >= 20 and fixed["pick"] > plain["pick"] + 0.005
    with pytest.raises(ValueError, match="is a calibration in NN, which the main set is fitted to"):
        calibration.model_table([folder / table["fitted_on"][0]], correction_files=[folder / table["fitted_on"][0]])
    with pytest.raises(ValueError, match="corrections are taken from the bench draw's"):
        calibration.model_table([folder / table["fitted_on"][0]],
                                correction_files=[folder / table["small"]["fitted_on"][0]])
