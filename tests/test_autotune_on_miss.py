"""GPU-free: TILEGEMM_AUTOTUNE=1 on a shape the selection has no measured config for.

The whole path runs (the call's config choice, the selection and its lock, the candidates, the
tuner, the write to the tuning cache, the selection again) with only the lowest level stubbed: the
GPU's properties, compiling (GPU-free, but slow for fifty configs) and the measurements of
timing.py.  It must return (the tuner once ran under the selection's lock and waited on it for ever)
the fastest candidate, and leave it in the cache where the next selection finds it."""

import contextlib
import json
import threading
from types import SimpleNamespace

import pytest

from tilegemm import access, api, autotune, entries, gpu, selection, timing
from tilegemm.occupancy import Limits

PROPS = SimpleNamespace(id=0, name="Test GPU", major=9, minor=0, arch="sm_90", sms=132, l2_bytes=50 << 20,
                        smem_per_block_optin=227 * 1024, smem_per_sm=228 * 1024, regs_per_sm=65536,
                        max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=32)
KEY = ("NN", 777, 999, 1111, 1)
GRAPHS = []  # whether each timing the stub saw was asked for CUDA graphs


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "device_properties", lambda device=None: PROPS)
    monkeypatch.setattr(gpu, "driver_version", lambda: "580.0")
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(tmp_path))
    selection.reset()
    yield tmp_path
    selection.reset()


def _stub_measurements(monkeypatch, winner_index: int, built: list | None = None):
    """Every candidate compiles without spills and passes its check; the one timed ``winner_index``-th
    is the fastest; ``built``: a list that collects each (config, layout) compiled."""
    F = autotune.F

    def compile_all(cfgs, layouts, arch, **kw):
        if built is not None:
            built.extend((c, lay) for c in cfgs for lay in layouts)
        return {(tuple(sorted(F.compiled_params(F.params(c)).items())), lay): (128, 0, None)
                for c in cfgs for lay in layouts}

    timed = []
    GRAPHS.clear()

    def time_launches(run, n_sets, **kw):
        timed.append(run)
        GRAPHS.append(kw.get("graph", False))
        return 1.0 if len(timed) - 1 == winner_index else 2.0

    monkeypatch.setattr(autotune, "compile_all", compile_all)
    monkeypatch.setattr(timing, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(timing, "operands", lambda *a, **k: ("a", "b"))
    monkeypatch.setattr(timing, "reference", lambda a, b: "ref")
    monkeypatch.setattr(timing, "input_sets", lambda *a, **k: ([("a", "b")], ["out"]))
    monkeypatch.setattr(timing, "check", lambda run, *a, **k: 1e-7)
    monkeypatch.setattr(timing, "time_launches", time_launches)
    return timed


def _in_a_thread(fn, timeout=120):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("value", fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the call did not return: a deadlock"
    return box["value"]


def test_autotune_on_miss_returns_the_fastest_and_writes_the_cache(fake_gpu, monkeypatch):
    cands = autotune.candidates(*KEY[1:], PROPS.sms, Limits.from_props(PROPS))
    timed = _stub_measurements(monkeypatch, winner_index=3)
    assert selection.select(0, *KEY)[1] == "heuristic"  # a miss
    selection.forget()
    monkeypatch.setenv("TILEGEMM_AUTOTUNE", "1")
    config = _in_a_thread(lambda: api.choose_config(0, KEY))
    assert len(timed) == len(cands) and config == cands[3]
    files = list(fake_gpu.glob("*.json"))
    assert len(files) == 1
    written = json.loads(files[0].read_text())["entries"]
    entry = {"config": cands[3], "tflops": pytest.approx(2 * 777 * 999 * 1111 / 1e9), "ms": 1.0,
             "shape": [777, 999, 1111, 1], "ran_as": "NN", "ptxas": []}
    assert written == {entries.entry_key("NN", entries.bucket(*KEY[1:])): entry,
                       entries.shape_key("NN", *KEY[1:]): entry}
    assert selection.select(0, *KEY) == (cands[3], "tuned")
    # a second call is a hit: nothing is tuned again
    assert _in_a_thread(lambda: api.choose_config(0, KEY)) == cands[3] and len(timed) == len(cands)


def test_without_the_variable_a_miss_takes_the_heuristic(fake_gpu, monkeypatch):
    timed = _stub_measurements(monkeypatch, winner_index=0)
    monkeypatch.delenv("TILEGEMM_AUTOTUNE", raising=False)
    assert api.choose_config(0, KEY) == selection.heuristic(*KEY[1:], PROPS.sms, PROPS.l2_bytes)
    assert not timed and not list(fake_gpu.glob("*.json"))


def test_two_threads_missing_at_once_tune_once(fake_gpu, monkeypatch):
    cands = autotune.candidates(*KEY[1:], PROPS.sms, Limits.from_props(PROPS))
    timed = _stub_measurements(monkeypatch, winner_index=1)
    monkeypatch.setenv("TILEGEMM_AUTOTUNE", "1")
    results = []
    threads = [threading.Thread(target=lambda: results.append(api.choose_config(0, KEY)), daemon=True)
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == [cands[1], cands[1]] and len(timed) == len(cands)


H100 = SimpleNamespace(**{**vars(PROPS), "name": "NVIDIA H100 80GB HBM3"})  # has a fitted model table


@pytest.fixture
def on_h100(monkeypatch, tmp_path):
    """A GPU with a fitted model table (the H100's), its tuning cache in ``tmp_path``."""
    monkeypatch.setattr(gpu, "device_properties", lambda device=None: H100)
    monkeypatch.setattr(gpu, "driver_version", lambda: "580.0")
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(tmp_path))
    selection.reset()
    yield
    selection.reset()


def test_the_quick_tuning_times_the_model_s_best_few(monkeypatch, on_h100):
    sel = selection.selector(0)
    best = sel.predicted(*KEY[1:], autotune.QUICK_TOP)
    assert len(best) == autotune.QUICK_TOP and selection.select(0, *KEY) == (best[0], "model")
    assert autotune.quick_candidates(sel, *KEY) == best  # no table holds this shape
    timed = _stub_measurements(monkeypatch, winner_index=2)
    res = autotune.tune_shape(0, *KEY, matmul=None)
    assert res["mode"] == "quick" and len(timed) == len(best) and res["config"] == best[2]
    assert selection.select(0, *KEY) == (best[2], "tuned")
    # the tuned entry is a candidate of the next quick tuning, besides the model's
    assert autotune.quick_candidates(sel, *KEY) == best
    timed.clear()
    full = autotune.tune_shape(0, *KEY, matmul=None, full=True, write=False)
    grid = autotune.candidates(*KEY[1:], 132, Limits.from_props(H100))
    # the full search times the grid and the model's best: k slices and filling split counts are not in the grid
    launch = lambda c: tuple(sorted(autotune.F.params(c).items()))
    assert not any(c.get("ks", 1) > 1 for c in grid) and any(c.get("ks", 1) > 1 for c in best)
    tried = [t["config"] for t in full["tried"]]
    assert full["mode"] == "full" and tried[:len(grid)] == grid and len(set(map(launch, tried))) == len(tried)
    model_best = sel.predicted(*KEY[1:], autotune.FULL_MODEL_TOP)
    assert {launch(c) for c in tried} == {launch(c) for c in grid + model_best}
    assert any(c.get("ks", 1) > 1 for c in tried[len(grid):])  # 777 x 999 x 1111: the k-sliced tile among the model's best
    # products below the bench draw's work are timed from graphs (one by one they time the host)
    assert GRAPHS and all(GRAPHS)  # 777 x 999 x 1111
    GRAPHS.clear()
    autotune.tune_shape(0, "NN", 2000, 1000, 1000, 1, matmul=None, write=False)
    assert GRAPHS and not any(GRAPHS)


def test_the_tuner_builds_each_candidate_in_the_layout_it_runs(monkeypatch, on_h100):
    # an NT product from 2048 rows runs as NN on B transposed (access.family_layout): the tuner's
    # compile-and-spill filter must look at the NN build, not the NT one
    built = []
    _stub_measurements(monkeypatch, winner_index=0, built=built)
    for M, want in ((4096, "NN"), (1000, "NT")):
        built.clear()
        res = autotune.tune_shape(0, "NT", M, 3000, 2000, 1, matmul=None, write=False)
        assert built and {lay for _, lay in built} == {want} and res["layout"] == "NT"
        assert len(res["tried"]) == len(built)


def test_the_tuner_builds_an_nn_product_as_tn_on_the_h200(monkeypatch, tmp_path):
    # on the H200 an NN product from 2048 columns of B runs as TN on A transposed (access.family_transposes_a, the GPU's
    # name given): the tuner builds TN there, NN below the bound, and NN on the H100
    built = []
    _stub_measurements(monkeypatch, winner_index=0, built=built)
    monkeypatch.setattr(gpu, "driver_version", lambda: "580.0")
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(tmp_path))
    for props, N, want in ((SimpleNamespace(**{**vars(PROPS), "name": "NVIDIA H200"}), 3000, "TN"),
                           (SimpleNamespace(**{**vars(PROPS), "name": "NVIDIA H200"}), 2044, "NN"), (H100, 3000, "NN")):
        monkeypatch.setattr(gpu, "device_properties", lambda device=None, props=props: props)
        selection.reset()
        built.clear()
        res = autotune.tune_shape(0, "NN", 1000, N, 2000, 1, matmul=None, write=False)
        assert built and {lay for _, lay in built} == {want} and res["layout"] == "NN", (props.name, N)
    selection.reset()


def test_a_stale_entry_is_tuned_again_and_replaced(fake_gpu, monkeypatch):
    """A TT entry measured when TT ran as TT, for a shape TT now runs as TN (entries.current): selected as "stale",
    tuned again under TILEGEMM_AUTOTUNE=1 and replaced by an entry of today's run."""
    key = ("TT", 4096, 4096, 4096, 1)
    sel = selection.selector(0)
    old = {**selection.BIG, "splits": 1}  # cp.async: runs a TT product of 4096 rows as TN today
    path = sel.cache_path
    stale = {"config": old, "tflops": 40.0, "ms": 3.0, "shape": list(key[1:]), "ran_as": "TT"}
    entries.merge_entries(path, {entries.shape_key(*key): stale})
    sel.forget()
    monkeypatch.setattr(selection, "borrowed_spills", lambda *a: False)
    assert selection.select(0, *key) == (old, "stale")
    cands = autotune.candidates(*key[1:], PROPS.sms, Limits.from_props(PROPS))
    timed = _stub_measurements(monkeypatch, winner_index=0)
    monkeypatch.setenv("TILEGEMM_AUTOTUNE", "1")
    config = _in_a_thread(lambda: api.choose_config(0, key))
    assert len(timed) == len(cands) and config == cands[0]
    new = entries.read_table(path)[entries.shape_key(*key)]
    assert new["ran_as"] == access.family_layout(autotune.F.params(cands[0]), *key) and entries.current(new, "TT")
    assert selection.select(0, *key) == (cands[0], "tuned")


def test_a_stale_entry_is_a_candidate_of_the_quick_tuning(on_h100):
    """On a GPU with a model table the quick tuning times the model's best few and the config the selection takes from
    a table: a stale entry's too."""
    key = ("TT", 4096, 4096, 4096, 1)
    sel = selection.selector(0)
    old = dict(sel.predicted(*key[1:], 20, key[0])[-1])  # a config the model ranks below its best few
    sel._user = {entries.shape_key(*key): {"config": old, "shape": list(key[1:]), "ran_as": "TT"}}
    sel._shipped = {}
    sel._memo.clear()
    assert selection.select(0, *key) == (old, "stale")
    cands = autotune.quick_candidates(sel, *key)
    assert old not in sel.predicted(*key[1:], autotune.QUICK_TOP, key[0]) and cands[-1] == old
