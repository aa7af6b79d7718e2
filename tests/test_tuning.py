"""GPU-free: the family's constraints, the tuner's candidate enumeration and pruning, the tuning
cache (keys, concurrent writers, corrupt files) and the shipped tables."""

import dataclasses
import json
import multiprocessing as mp
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from tilegemm import access, autotune, builds, compiler, entries, registry
from tilegemm import selection as tuning
from tilegemm.occupancy import Limits

F = registry.FAMILY
SM90 = Limits.for_arch("sm_90")


def test_enumerated_configs_meet_the_constraints():
    cfgs = autotune.enumerate_configs(SM90)
    assert len(cfgs) > 100
    for c in cfgs:
        assert not F.violations(F.params(c), SM90), c
        assert registry.family_regs_estimate(c) <= 255


@pytest.mark.parametrize("cfg,broken", [
    ({"bm": 100}, "bm % tm == 0"),
    ({"tm": 6}, "tm and tn are 4, 8, 12 or 16"),
    ({"ln": 3}, "ln divides 32"),
    ({"bm": 256, "bn": 256, "bk": 64, "minb": 1}, "shared memory per block"),
    ({"bk": 16, "tn": 8, "ln": 8, "minb": 2}, "minb >= 0, and minb blocks fit"),  # 136 registers > 128
    ({"splits": 0}, "splits >= 1"),
])
def test_constraints_name_what_is_broken(cfg, broken):
    assert any(broken in v for v in F.violations(F.params(cfg), SM90))


def test_pruning_keeps_the_default_and_the_heuristic():
    for shape in [(4096, 4096, 4096, 1), (16, 4096, 4096, 1), (128, 128, 128, 256)]:
        cands = autotune.candidates(*shape, 132, SM90, top=8)
        for order in (0, 1):  # both FFMA orders of the configs that win most often
            assert {**tuning.BIG, "splits": 1, "order": order} in cands
            assert {**tuning.HUGE, "splits": 1, "order": order} in cands
            assert {**tuning.HUGE, "splits": 1, "order": order, "ln": 8} in cands
            assert {**tuning.heuristic(*shape), "order": order} in cands
        assert not any(registry.FAMILY.violations(registry.FAMILY.params(c), SM90) for c in cands)


def test_split_k_only_where_tiles_are_few():
    big = autotune.candidates(4096, 4096, 4096, 1, 132, SM90, top=24)
    assert all(c["splits"] == 1 for c in big)
    skinny = autotune.candidates(16, 4096, 4096, 1, 132, SM90, top=24)
    assert any(c["splits"] > 1 for c in skinny)


def test_heuristic():
    assert tuning.heuristic(4096, 4096, 4096, 1) == {**tuning.HUGE, "splits": 1}
    assert tuning.heuristic(2048, 2048, 2048, 1) == {**tuning.BIG, "splits": 1}  # 128 HUGE tiles: < 2 waves
    h = tuning.heuristic(16, 4096, 4096, 1)
    assert h["splits"] > 1 and h["bm"] == 64
    assert tuning.heuristic(16, 16, 16, 1)["splits"] == 1  # K too short to share



def test_heuristic_stream_k_rule():
    """Stream-K with BIG's tiles for a partial wave of them whose operands fit in half the L2
    (measured: scripts/heuristic_probe.py); not for long K on few tiles, tiny shapes, large ones."""
    for shape in ((3000, 1000, 500, 1), (1024, 1024, 1024, 1), (1500, 1500, 1500, 1)):
        assert tuning.heuristic(*shape) == {**tuning.BIG, "splits": 1, "sk": 1}, shape
    for shape in ((128, 4096, 4096, 1), (256, 256, 256, 1), (128, 128, 128, 256), (4096, 4096, 4096, 1),
                  (2048, 2048, 2048, 1)):
        assert not tuning.heuristic(*shape).get("sk"), shape
    assert not tuning.heuristic(1500, 1500, 1500, 1, l2_bytes=8 << 20).get("sk")  # operands beyond L2 / 2


def test_bucket():
    assert entries.bucket(4096, 4096, 4096, 1) == (12, 12, 12, 0, 0)
    assert entries.bucket(4095, 4095, 4095, 1) == (12, 12, 12, 0, 1)  # same sizes, but edges
    assert entries.bucket(4095, 3000, 1, 64) == (12, 12, 0, 6, 1)
    assert entries.bucket(5000, 6000, 7000, 1) == (12, 13, 13, 0, 1)


def test_cache_key_names_everything_that_matters():
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0)
    key = tuning.cache_key(props, "580.159.04", "13.0")
    assert key.startswith("NVIDIA-H200-sm90-drv580-159-04-nvrtc13-0-tg")
    assert tuning.cache_key(props, "580.1", "13.0") != key


def test_lookup_falls_back_to_nn():
    table = {"NN:12x12x12x0x0": {"config": {"bm": 64}}}
    assert entries.lookup(table, "TT", 4096, 4096, 4096, 1) == {"bm": 64}
    assert entries.lookup(table, "NN", 1024, 4096, 4096, 1) is None


def test_an_exact_shape_comes_before_its_bucket():
    """Two shapes of one bucket tuned one after the other: each keeps its own winner; a layout's
    own entries come before NN's."""
    b = entries.bucket(4096, 4096, 4096, 1)
    assert entries.bucket(3968, 4096, 4096, 1) == b  # one bucket
    table = {entries.entry_key("NN", b): {"config": {"bm": 64}},
             entries.shape_key("NN", 3968, 4096, 4096, 1): {"config": {"bm": 128}},
             entries.shape_key("TN", 4096, 4096, 4096, 1): {"config": {"bm": 32}},
             entries.entry_key("NT", b): {"config": {"bm": 16}}}
    assert entries.lookup(table, "NN", 3968, 4096, 4096, 1) == {"bm": 128}
    assert entries.lookup(table, "NN", 4096, 4096, 4096, 1) == {"bm": 64}  # the bucket's entry
    assert entries.lookup(table, "TN", 4096, 4096, 4096, 1) == {"bm": 32}
    assert entries.lookup(table, "TT", 3968, 4096, 4096, 1) == {"bm": 128}  # NN's exact entry
    assert entries.lookup(table, "NT", 3968, 4096, 4096, 1) == {"bm": 16}  # NT's bucket before NN's exact entry
    assert [lay for _, lay, _ in entries.lookups(table, "NT", 3968, 4096, 4096, 1)] == ["NT", "NN", "NN"]


def test_a_tt_product_run_as_tn_borrows_tn_entries_before_nn_ones():
    """A TT product whose kernel runs it as TN on B transposed (access.kernel_layout) takes TN's
    entries before NN's; one left in TT does not look at TN's."""
    b = entries.bucket(4096, 4096, 4096, 1)
    table = {entries.entry_key("NN", b): {"config": {"bm": 64}}, entries.entry_key("TN", b): {"config": {"bm": 32}},
             entries.entry_key("NN", entries.bucket(1024, 4096, 4096, 1)): {"config": {"bm": 128}},
             entries.entry_key("TN", entries.bucket(1024, 4096, 4096, 1)): {"config": {"bm": 16}}}
    assert access.kernel_layout("TT", 4096, 4096, 4096, 1) == "TN"
    assert entries.lookup(table, "TT", 4096, 4096, 4096, 1) == {"bm": 32}
    assert [lay for _, lay, _ in entries.lookups(table, "TT", 4096, 4096, 4096, 1)] == ["TN", "NN"]
    assert access.kernel_layout("TT", 1024, 4096, 4096, 1) == "TT"  # fewer than 2048 rows of A
    assert entries.lookup(table, "TT", 1024, 4096, 4096, 1) == {"bm": 128}


def _writer(path, i):
    for j in range(20):
        entries.merge_entries(path, {f"NN:{i}x{j}x0x0": {"config": {"bm": i}}})


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "cache.json"
    procs = [mp.get_context("spawn").Process(target=_writer, args=(path, i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    table = entries.read_table(path)
    assert len(table) == 80


def test_corrupt_cache_is_ignored_with_a_warning_and_rebuilt(tmp_path):
    path = tmp_path / "cache.json"
    path.write_text("{ not json")
    with pytest.warns(RuntimeWarning, match="ignoring the unreadable tuning file"):
        assert entries.read_table(path) == {}
    entries.merge_entries(path, {"NN:1x1x1x0": {"config": {"bm": 64}}})
    assert json.loads(path.read_text())["entries"] == {"NN:1x1x1x0": {"config": {"bm": 64}}}


def test_shipped_tables_hold_valid_spill_free_configs():
    tables = sorted(t for t in tuning.TABLE_DIR.glob("*.json") if not t.name.startswith("model-"))
    assert tables, "no tuning table ships with the package"
    seen = set()
    for t in tables:
        table, name = entries.read_table(t), json.loads(t.read_text())["gpu"]  # the GPU it was tuned on
        assert table, t
        for key, e in table.items():
            layout, dims = key.split(":")
            assert layout in registry.LAYOUTS and len(dims.split("x")) == 5
            assert key == entries.entry_key(layout, entries.bucket(*e["shape"])), "key from the shape it was tuned on"
            assert e["ran_as"] in (layout, access.TRANSPOSED_RUNS.get(layout), access.A_TRANSPOSED_RUNS.get(layout))
            # every shape a table was measured on is served by an entry of today's run (entries.current): an entry
            # measured before its layout's products ran on an operand transposed comes after one that measured that run
            assert any(entries.current(table[k], k.split(":")[0], name) for k in (
                entries.entry_key(lay, entries.bucket(*e["shape"]))
                for lay in entries.entry_layouts(layout, *e["shape"], name))
                if k in table and table[k]["shape"] == e["shape"]), (t.name, key)
            cfg = F.params(e["config"])
            assert not F.violations(cfg, SM90), (t.name, key)
            seen.add((tuple(sorted(F.compiled_params(cfg).items())), layout))
    # each config in the layout it was tuned for, each built in a fresh process with no disk cache:
    # NVRTC 13.5's register allocation depends on what the process compiled before (perf notes,
    # "NVRTC's output depends on the process's history"), and a build after other kernels can spill
    # where the build that was measured did not
    code = ("import sys, json; from tilegemm import registry, compiler; F = registry.FAMILY; "
            "cfg, lay = json.loads(sys.argv[1]); p = F.params(cfg); "
            "r = compiler.compile_file(F.file, entry=F.entry, defines=F.defines(p, lay, 4), arch='sm_90', "
            "use_cache=False).resources; print(r.spill_stores + r.spill_loads)")

    def fresh_spills(job):
        items, layout = job
        out = subprocess.run([sys.executable, "-c", code, json.dumps([dict(items), layout])],
                             capture_output=True, text=True, check=True)
        return int(out.stdout.split()[-1])

    jobs = sorted(seen)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for job, n in zip(jobs, pool.map(fresh_spills, jobs)):
            assert n == 0, job


def _test_selector(monkeypatch, tmp_path):
    """A Selector of an sm_90 GPU with no tables of its own, its tuning cache in ``tmp_path``."""
    props = SimpleNamespace(name="Test GPU", major=9, minor=0, arch="sm_90", sms=132, id=0,
                            smem_per_block_optin=SM90.smem_per_block_optin, smem_per_sm=SM90.smem_per_sm,
                            regs_per_sm=SM90.regs_per_sm, max_threads_per_block=1024, max_threads_per_sm=2048,
                            max_blocks_per_sm=32)
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(tmp_path))
    return tuning.Selector(props, "1", "13.0")


def test_a_borrowed_config_that_spills_is_not_used(monkeypatch, tmp_path):
    spilling = {"bm": 32, "bn": 256, "bk": 32, "tm": 8, "tn": 8, "ln": 8, "minb": 2, "swizzle": 8, "splits": 1}
    # whether a config spills depends on the NVRTC version: pretend this one spills in TT only
    monkeypatch.setattr(tuning, "spills", lambda cfg, layout, arch: layout == "TT")
    sel = _test_selector(monkeypatch, tmp_path)
    sel._user, sel._shipped = {}, {"NN:4x12x12x0x1": {"config": spilling}}
    assert sel.source("NN", 16, 4096, 4096, 1) == (spilling, "shipped")
    cfg, src = sel.source("TT", 16, 4096, 4096, 1)
    assert src == "heuristic"
    # in the user's cache, the next entry that can serve the shape is taken: here NN's bucket entry
    other = {**tuning.BIG, "splits": 1}
    monkeypatch.setattr(tuning, "spills", lambda cfg, layout, arch: layout == "TT" and cfg == spilling)
    sel._user = {entries.shape_key("NN", 16, 4096, 4096, 1): {"config": spilling}, "NN:4x12x12x0x1": {"config": other}}
    assert sel.source("TT", 16, 4096, 4096, 1) == (other, "tuned")
    assert sel.source("NN", 16, 4096, 4096, 1) == (spilling, "tuned")


def test_a_borrowed_config_is_checked_in_the_layout_its_kernel_runs(monkeypatch, tmp_path):
    # an NT product whose B is transposed first runs as NN (access.family_layout): a config tuned
    # on NN is not checked again there, and one tuned on NT is checked as NN, not as NT
    checked = []
    monkeypatch.setattr(tuning, "spills", lambda cfg, layout, arch: checked.append(layout) or layout == "NT")
    sel = _test_selector(monkeypatch, tmp_path)
    cfg = {**tuning.BIG, "splits": 1}
    for M in (4096, 1024):
        sel._shipped = {entries.shape_key("NN", M, 4096, 4096, 1): {"config": cfg, "shape": [M, 4096, 4096, 1]}}
        sel._user = {}
        checked.clear()
        found = sel.source("NT", M, 4096, 4096, 1)
        if M == 4096:  # transposed: runs as NN, the layout it was tuned for
            assert found == (cfg, "shipped") and checked == []
        else:  # runs as NT, where (here) it spills
            assert found[1] == "heuristic" and checked and set(checked) == {"NT"}
    # tuned on NT at a shape the transposition serves: measured in the NN build that runs it (as the entry records),
    # not checked again; tuned on NT below the bound (built as NT) and serving a transposed product of the
    # same bucket: checked as NN, where it does not spill
    nt = entries.shape_key("NT", 4096, 4096, 4096, 1)
    sel._shipped, sel._user = {}, {nt: {"config": cfg, "shape": [4096, 4096, 4096, 1], "ran_as": "NN"}}
    checked.clear()
    assert sel.source("NT", 4096, 4096, 4096, 1) == (cfg, "tuned") and checked == []
    # the same entry written before entries recorded their run: how it ran is not known, so it is stale and checked
    sel._user = {nt: {"config": cfg, "shape": [4096, 4096, 4096, 1]}}
    assert sel.source("NT", 4096, 4096, 4096, 1) == (cfg, "stale") and checked == ["NN"]
    sel._user = {entries.entry_key("NT", entries.bucket(2500, 4096, 4096, 1)):
                 {"config": cfg, "shape": [1500, 4096, 4096, 1], "ran_as": "NT"}}
    checked.clear()
    assert sel.source("NT", 2500, 4096, 4096, 1) == (cfg, "tuned") and checked == ["NN"]
    # an NT bucket entry measured where B was transposed (2500 rows: built as NN) serving a product of
    # the same bucket that runs as NT (1500 rows): checked as NT, where (here) it spills
    sel._shipped = {}
    sel._user = {entries.entry_key("NT", entries.bucket(1500, 4096, 4096, 1)):
                 {"config": cfg, "shape": [2500, 4096, 4096, 1], "ran_as": "NN"}}
    checked.clear()
    assert entries.bucket(1500, 4096, 4096, 1) == entries.bucket(2500, 4096, 4096, 1)
    assert sel.source("NT", 1500, 4096, 4096, 1)[1] == "heuristic" and checked and set(checked) == {"NT"}
    # an entry whose run is not known is checked wherever it runs: NT as NT, TT as TN from 2048 rows, else as TT
    assert tuning.borrowed_spills(cfg, None, "NT", 1500, 4096, 4096, 1, "sm_90") and checked[-1] == "NT"
    checked.clear()
    assert not tuning.borrowed_spills(cfg, None, "TT", 2500, 4096, 4096, 1, "sm_90") and checked == ["TN"]
    assert not tuning.borrowed_spills(cfg, None, "TT", 1500, 4096, 4096, 1, "sm_90") and checked == ["TN", "TT"]
    # the tensor-core configs read B as it is: checked as NT
    assert tuning.borrowed_spills({**cfg, "mma": 3}, "NN", "NT", 4096, 4096, 4096, 1, "sm_90")
    assert checked[-1] == "NT"


def test_an_entry_records_the_run_it_measured_and_knows_when_that_run_no_longer_happens():
    cfg = {**tuning.BIG, "splits": 1}
    res = {"config": cfg, "tflops": 50.0, "ms": 2.0}
    assert entries.measured("NT", 4096, 4096, 4096, 1, res) == {**res, "shape": [4096, 4096, 4096, 1], "ran_as": "NN",
                                                                 "ptxas": []}
    assert entries.measured("NT", 1024, 4096, 4096, 1, res)["ran_as"] == "NT"  # below the rule's bound
    assert entries.measured("TT", 4096, 4096, 4096, 1, res)["ran_as"] == "TN"
    assert entries.measured("TT", 4096, 4096, 4096, 1, {**res, "config": {**cfg, "stages": 0}})["ran_as"] == "TT"
    tt = entries.measured("TT", 4096, 4096, 4096, 1, res)
    assert entries.current(tt, "TT") and not entries.current({**tt, "ran_as": "TT"}, "TT")  # measured as TT: stale
    assert entries.current({**tt, "shape": [1024, 4096, 4096, 1], "ran_as": "TT"}, "TT")
    wide = {**cfg, "tm": 8, "ln": 4, "minb": 0}  # 8 x 8 a thread: built with no ptxas options in any layout
    legacy = {"config": wide, "shape": [4096, 4096, 4096, 1]}  # written before entries recorded their run
    assert entries.current(legacy, "NN") and entries.current(legacy, "TN")  # never transposed
    assert not entries.current(legacy, "NT") and not entries.current(legacy, "TT")  # not known
    assert entries.current({"config": cfg}, "NN") and not entries.current({"config": cfg}, "TT")  # no shape either
    assert [found[2] for found in entries.lookups({"TT:=4096x4096x4096x1": legacy}, "TT", 4096, 4096, 4096, 1)] == [None]


def test_an_entry_records_the_ptxas_options_of_its_build_and_is_stale_when_they_change(monkeypatch):
    """A 16 x 8 tile run as TN is built at ptxas's register usage level builds.WIDE_A_PTXAS_LEVEL: its entry records
    that; one measured before (no record: no options then) or under another rule measured another build."""
    cfg = {**tuning.BIG, "splits": 1}
    res = {"config": cfg, "tflops": 50.0, "ms": 2.0}
    level = [f"--register-usage-level={builds.WIDE_A_PTXAS_LEVEL}"]
    tn = entries.measured("TN", 4096, 4096, 4096, 1, res)
    assert tn["ptxas"] == level and entries.measured("NN", 4096, 4096, 4096, 1, res)["ptxas"] == []
    assert entries.current(tn, "TN") and entries.current(entries.measured("NN", 4096, 4096, 4096, 1, res), "NN")
    assert not entries.current({k: v for k, v in tn.items() if k != "ptxas"}, "TN")  # measured with none
    assert not entries.current({**tn, "ptxas": ["--register-usage-level=5"]}, "TN")
    # the options of the build as it ran the product: A's rows read 4 bytes at a time (TT of 1023 rows, not copied in a
    # batch) take the spill exception's default, copied into aligned rows the level
    sk = {**builds.TILES["128x128"], "splits": 1, "sk": 1}
    assert ("128x128 stream-K", "TT", 1) in builds.WIDE_A_PTXAS_SPILLS
    assert entries.measured("TT", 1023, 300, 4096, 1, {**res, "config": sk})["ptxas"] == []
    assert entries.measured("TT", 1023, 4096, 4096, 2, {**res, "config": sk})["ptxas"] == []
    assert entries.measured("TT", 1023, 4096, 4096, 1, {**res, "config": sk})["ptxas"] == level
    # an entry without a shape: compared with its build reading 16 bytes at a time
    assert not entries.current({"config": cfg, "ran_as": "TN"}, "TN")
    assert entries.current({"config": cfg, "ran_as": "TN", "ptxas": level}, "TN")
    # the rule moves: the entry measured under the old one is stale, one measured under the new one current
    monkeypatch.setattr(registry, "FAMILY", dataclasses.replace(registry.FAMILY, ptxas=lambda p, layout, vec: ()))
    assert not entries.current(tn, "TN") and entries.current({**tn, "ptxas": []}, "TN")


def test_stale_entries_come_after_every_current_one(monkeypatch, tmp_path):
    """A TT entry measured when TT ran as TT, for a shape TT now runs as TN: TN's exact entry and NN's come first;
    alone, it is taken as "stale" (TILEGEMM_AUTOTUNE=1 tunes the shape again); a current one as "tuned"."""
    monkeypatch.setattr(tuning, "spills", lambda cfg, layout, arch: False)
    sel = _test_selector(monkeypatch, tmp_path)
    old, tn, nn = ({**tuning.BIG, "splits": 1, "sk": k} for k in (0, 1, 2))
    shape = [4096, 4096, 4096, 1]
    stale = {entries.shape_key("TT", *shape): {"config": old, "shape": shape, "ran_as": "TT"}}
    rec = lambda layout, cfg: entries.measured(layout, *shape, {"config": cfg, "tflops": 1, "ms": 1})  # noqa: E731
    sel._user, sel._shipped = stale, {entries.entry_key("TN", entries.bucket(*shape)): rec("TN", tn)}
    assert sel.source("TT", *shape) == (tn, "shipped")
    sel._shipped = {entries.entry_key("NN", entries.bucket(*shape)): rec("NN", nn)}
    assert sel.source("TT", *shape) == (nn, "shipped")
    sel._shipped = {}
    assert sel.source("TT", *shape) == (old, "stale")
    sel._user = {entries.shape_key("TT", *shape): rec("TT", old)}
    assert sel.source("TT", *shape) == (old, "tuned")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("vec", [4, 1])
def test_family_default_compiles_without_spills(arch, vec):
    # with the NVRTC that CI installs; ptxas' allocation moves between versions, which is why the
    # tuner and the selector check spills with the compiler at hand as well
    for layout in registry.LAYOUTS:
        params = F.params()
        r = F.compile(F.compiled_params(params), layout, arch=arch, vec=vec).resources
        assert r.spill_stores == 0 and r.spill_loads == 0, (arch, layout, vec, r)


@pytest.mark.parametrize("spec", [registry.REDUCE, registry.PACK], ids=lambda s: s.name)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_helper_kernels_compile(spec, arch):
    k = spec.compile({}, arch=arch)
    assert k.resources.spill_stores == 0 and k.resources.spill_loads == 0


def test_static_asserts_back_the_python_constraints():
    # a config the Python side rejects also fails in the kernel itself (bm not a multiple of tm)
    d = F.defines(F.params(), "NN", 4)
    d["TM"] = 6
    with pytest.raises(Exception, match="4 x 4 patches"):
        compiler.compile_file("gemm.cu", entry=F.entry, defines=d, arch="sm_90", use_cache=False)


def test_candidates_always_include_the_cp_async_pipeline():
    for shape in [(3000, 1000, 500, 1), (1024, 1024, 1024, 1), (256, 256, 256, 1)]:
        cands = autotune.candidates(*shape, 132, SM90, top=12)
        grid_pipelined = [c for c in cands if c["stages"] >= 2 and "order" not in c]
        assert len({(c["bm"], c["bn"], c["tm"], c["tn"]) for c in grid_pipelined}) >= 2, shape


def test_an_entry_that_is_not_the_family_s_is_skipped(monkeypatch, tmp_path):
    """A cache entry written by another version, whose config names a parameter this one lacks: not current, and
    passed over for the next entry, not raised."""
    monkeypatch.setattr(tuning, "spills", lambda cfg, layout, arch: False)
    sel = _test_selector(monkeypatch, tmp_path)
    cfg = {**tuning.BIG, "splits": 1}
    alien = {"config": {**cfg, "warp_specialized": 1}, "shape": [4096, 4096, 4096, 1], "ran_as": "NN"}
    assert not entries.current(alien, "NN")
    sel._shipped = {}
    sel._user = {entries.shape_key("NN", 4096, 4096, 4096, 1): alien,
                 entries.entry_key("NN", entries.bucket(4096, 4096, 4096, 1)): {"config": cfg, "shape": [4000, 4096, 4096, 1]}}
    assert sel.source("NN", 4096, 4096, 4096, 1) == (cfg, "tuned")
    assert tuning.check_config(alien["config"], SM90) and not tuning.check_config(cfg, SM90)
