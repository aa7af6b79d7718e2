"""GPU-free: README tables are generated from the committed results files."""

import json
import re
from pathlib import Path

from tilegemm import report, results

ROOT = Path(__file__).resolve().parents[1]


def test_readme_tables_match_committed_results():
    readme = (ROOT / "README.md").read_text()
    assert "<!-- results:" in readme
    assert report.render(readme, ROOT / "benchmarks" / "results") == readme, \
        "README tables are stale: run `python -m tilegemm.report README.md`"


RESULTS = ROOT / "benchmarks" / "results"


def test_every_results_file_records_its_command_and_commit():
    files = sorted([*RESULTS.rglob("*.json"), *RESULTS.rglob("*.json.gz")])
    assert len(files) > 20 and any(f.suffix == ".gz" for f in files)
    for f in files:
        doc = results.read(f)
        assert isinstance(doc, dict) and doc.get("command"), f
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", doc.get("commit", "")), (f, doc.get("commit"))


def test_results_top_level_is_the_standing_and_experiments_are_indexed():
    top = sorted(p.name for p in RESULTS.glob("*.json"))
    kinds = {json.loads((RESULTS / n).read_text()).get("kind", "timings") for n in top}
    assert {"timings", "banks", "peaks"} <= kinds
    index = (RESULTS / "experiments" / "README.md").read_text()
    missing = [p.name for p in (RESULTS / "experiments").rglob("*") if p.is_file() and p.name != "README.md"
               and p.name not in index]
    assert not missing, missing


def test_results_files_follow_schema_1():
    files = sorted(RESULTS.glob("*.json"))
    assert files
    keys = {"kernel", "M", "N", "K", "layout", "batch", "tflops", "ms", "cublas_tflops", "ratio", "rel_err"}
    # instrument measurements carry a "kind" and their own body instead of timing rows
    bodies = {"banks": ("probes", "kernels", "cases"), "peaks": ("fp32_tflops", "dram_gbs", "l2_gbs"),
              "stalls": ("kernels",), "kernels": ("kernels", "command"), "clocks": ("phases", "samples"),
              "timing": ("timings",), "overhead": ("runs",), "pdl": ("timings", "checks"),
              "random": ("rows", "seed", "draw"), "real": ("rows",), "accuracy": ("rows", "seed")}
    for f in files:
        doc = json.loads(f.read_text())
        assert doc["schema"] == 1
        kind = doc.get("kind", "timings")
        assert kind in ("timings", *bodies), (f.name, kind)
        named = f.stem.endswith(f"-random-s{doc['seed']}") if kind == "random" else f.stem.endswith(kind)
        assert named or kind == "timings", (f.name, kind)
        for k in ("date", "gpu", "sm", "sms", "driver", "versions", *bodies.get(kind, ("rows",))):
            assert k in doc, (f.name, k)
        assert {"tilegemm", "cupy", "nvrtc", "torch"} <= set(doc["versions"])
        for row in doc.get("rows", []) if kind != "accuracy" else []:  # accuracy rows: errors by case
            assert keys <= set(row), (f.name, row)
            assert row["layout"] in ("NN", "NT", "TN", "TT")
        for row in doc.get("rows", []) if kind == "accuracy" else []:
            assert "case" in row and ("errors" in row or "same" in row), (f.name, row)


def test_pivot_table():
    doc = {"gpu": "G", "driver": "1", "date": "d", "versions": {"cupy": "c", "nvrtc": "n"}, "rows": [
        {"kernel": "cublas", "M": 8, "N": 8, "K": 8, "layout": "NN", "batch": 1, "tflops": 2.0, "ratio": 1.0, "rel_err": 1e-7},
        {"kernel": "01_naive", "M": 8, "N": 8, "K": 8, "layout": "NN", "batch": 1, "tflops": 1.0, "ratio": 0.5, "rel_err": 2e-7},
        {"kernel": "01_naive", "M": 8, "N": 4, "K": 2, "layout": "TN", "batch": 1, "tflops": None, "ratio": None, "rel_err": 1.0},
    ]}
    text = report.pivot_table(doc)
    assert "| kernel | 8³ | 8x4x2 TN | max rel. error |" in text
    assert "| 01_naive | 1.0 (50%) | failed | 1.0e+00 |" in text
    assert "| cublas | 2.0 |  | 1.0e-07 |" in text


def test_suite_view():
    from tilegemm.report import suite_table

    doc = {"gpu": "G", "driver": "1", "date": "d", "versions": {"cupy": "c", "nvrtc": "n", "torch": "t"},
           "geomean_ratio": {"tilegemm": 0.5}, "call_overhead_us": [{"impl": "tilegemm", "size": 64, "us_per_call": 9.0}],
           "rows": [
        {"kernel": "cublas", "M": 8, "N": 8, "K": 8, "layout": "NN", "batch": 1, "tflops": 2.0, "ratio": 1.0},
        {"kernel": "tilegemm", "M": 8, "N": 8, "K": 8, "layout": "NN", "batch": 1, "tflops": 1.0, "ratio": 0.5,
         "selected": {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4, "ln": 8, "minb": 4, "swizzle": 8,
                      "splits": 2, "source": "shipped"}},
        {"kernel": "cublas", "M": 8, "N": 8, "K": 8, "layout": "NN", "batch": 4, "tflops": 3.0, "ratio": 1.0},
        {"kernel": "cublas", "M": 8, "N": 8, "K": 8, "layout": "TN", "batch": 1, "tflops": 2.0, "ratio": 1.0},
        {"kernel": "tilegemm", "M": 8, "N": 8, "K": 8, "layout": "TN", "batch": 1, "tflops": 2.0, "ratio": 1.0,
         "selected": {"bm": 64, "bn": 64, "bk": 8, "tm": 4, "tn": 4, "ln": 8, "minb": 4, "swizzle": 8,
                      "splits": 4, "sk": 2, "source": "tuned"}},
        {"kernel": "cublas", "M": 8, "N": 8, "K": 8, "layout": "NT", "batch": 1, "tflops": 2.0, "ratio": 1.0},
        {"kernel": "tilegemm", "M": 8, "N": 8, "K": 8, "layout": "NT", "batch": 1, "tflops": 2.0, "ratio": 1.0,
         "selected": {"bm": 64, "bn": 64, "bk": 8, "tm": 4, "tn": 4, "ln": 8, "minb": 4, "swizzle": 8,
                      "splits": 1, "sk": 1, "source": "tuned"}},
    ]}
    text = suite_table(doc)
    assert "| 8³ TN | 2.0 | 2.0 (100%) | 64x64x8 t4x4 ln8 minb4 split4 summed in-kernel (tuned) |" in text
    assert "| 8³ NT | 2.0 | 2.0 (100%) | 64x64x8 t4x4 ln8 minb4 stream-K (tuned) |" in text
    assert "| 8³ | 2.0 | 1.0 (50%) | 64x64x16 t4x4 ln8 minb4 split2 (shipped) |" in text
    assert "| 4 x 8³ | 3.0 |  |  |" in text
    assert "tilegemm 0.500x" in text and "tilegemm 64³ 9.0" in text


def test_a_new_results_document_records_command_and_commit(monkeypatch):
    from tilegemm import results

    env = {"gpu": "Test GPU", "sm": "90", "sms": 132, "driver": "1", "versions": {}}
    doc = results.document([], env=env, cmd=results.command(["x", "--sizes", "4096x4096x4096", "a b"], prog="tilegemm"))
    assert doc["command"] == "tilegemm --sizes 4096x4096x4096 'a b'"
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown", doc["commit"]), doc["commit"]
    monkeypatch.setenv("TILEGEMM_COMMIT", "0123456789" * 4)
    assert results.document([], env=env)["commit"] == "0123456789" * 4


def test_a_results_file_may_be_gzipped(tmp_path):
    env = {"gpu": "Test GPU", "sm": "90", "sms": 132, "driver": "1", "versions": {}}
    doc = results.document([{"M": 1}], env=env, cmd="x", kind="calibration")
    plain = results.write(doc, tmp_path, "calibration-s1")
    packed = results.write(doc, tmp_path, "calibration-s1", compress=True)
    assert plain.name.endswith("-calibration-s1.json") and packed.name == plain.name + ".gz"
    assert results.read(packed) == results.read(plain) == json.loads(plain.read_text())
    first = packed.read_bytes()
    assert results.write(doc, tmp_path, "calibration-s1", compress=True).read_bytes() == first  # no timestamp


def test_draw_view():
    from tilegemm.report import draw_table

    def row(kernel, M, ratio):
        return {"kernel": kernel, "M": M, "N": 512, "K": 4096, "layout": "NN", "batch": 1, "tflops": 40 * ratio,
                "ratio": ratio, "selected": {"bm": 128, "bn": 128, "bk": 8, "source": "heuristic"} if kernel == "tilegemm"
                else None}

    rows = [r for i, x in enumerate([0.8, 0.95, 1.0, 1.1] * 5) for r in (row("cublas", 1000 + i, 1.0),
                                                                          row("tilegemm", 1000 + i, x))]
    doc = {"kind": "random", "seed": 7, "draw": {"lo": 128, "hi": 16384, "min_macs": 1024**3, "layouts": ["NN"]},
           "gpu": "G", "driver": "d", "date": "2026-11-22", "rows": rows}
    text = draw_table(doc)
    assert "20 shapes drawn with seed 7" in text and "lowest 0.800x" in text and "below 1.00x: 10" in text
    assert "below 0.90x: 5" in text and text.count("| 1") == 10 and "(heuristic)" in text
