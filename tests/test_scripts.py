"""GPU-free: the scripts that are kept are documented in scripts/README.md and parse; the Python
ones answer --help."""

import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TOOLS = sorted(p for p in SCRIPTS.iterdir() if p.suffix in (".py", ".sh"))


def test_every_script_is_documented():
    readme = (SCRIPTS / "README.md").read_text()
    assert TOOLS and all(f"`{p.name}" in readme for p in TOOLS), [p.name for p in TOOLS if f"`{p.name}" not in readme]


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: p.name)
def test_script_parses(path):
    if path.suffix == ".sh":
        subprocess.run(["bash", "-n", str(path)], check=True)
    else:
        py_compile.compile(str(path), doraise=True)
        res = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True)
        assert res.returncode == 0 and "usage:" in res.stdout, res.stderr


@pytest.fixture
def calibrate():
    """scripts/calibrate.py as a module."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import calibrate
    finally:
        sys.path.remove(str(SCRIPTS))
    return calibrate


def test_calibrate_narrow_b_draws_only_shapes_whose_b_is_read_narrow(calibrate, monkeypatch):
    from tilegemm import access, suites

    draw = dict(suites.DRAW)
    shapes = calibrate.narrow(12, 481, "NN", draw)
    assert len(shapes) == 12 and shapes == calibrate.narrow(12, 481, "NN", draw)  # deterministic per seed
    assert all(access.row_widths("NN", M, N, K)[1] != 4 for M, N, K, _, _ in shapes)
    full = suites.random_shapes(240, 481, ("NN",), **draw)
    assert shapes == [s for s in full if access.row_widths("NN", *s[:3])[1] != 4][:12]  # the draw's own, in order
    # the committed narrow-B calibration drew these under the copy threshold of its day (ODD_COPY_MACS_FIRST)
    monkeypatch.setattr(access, "ODD_COPY_MACS_PER_ELEMENT", access.ODD_COPY_MACS_FIRST)
    then = calibrate.narrow(12, 481, "NN", draw)
    assert [s[:3] for s in then[:3]] == [(425, 579, 7458), (863, 2831, 5175), (160, 14307, 10154)]  # as calibrated
    assert (863, 2831, 5175) not in [s[:3] for s in shapes]  # copied from M = 512 now
    assert {N % 4 for _, N, _, _, _ in shapes} >= {1, 2, 3}  # rows of odd length and of twice an odd length
    with pytest.raises(ValueError, match="NN or TN"):
        calibrate.narrow(5, 481, "NT", draw)  # B a transposed view is never read along its rows


def test_calibrate_narrow_a_draws_only_shapes_whose_a_is_read_narrow(calibrate):
    from tilegemm import access, suites

    draw = dict(suites.DRAW)
    for layout in ("TT", "TN"):
        shapes = calibrate.narrow(10, 1019, layout, draw, "A")
        assert len(shapes) == 10 and shapes == calibrate.narrow(10, 1019, layout, draw, "A")
        assert all(s[3] == layout and access.row_widths(layout, *s[:3])[0] != 4 for s in shapes)
        full = suites.random_shapes(200, 1019, (layout,), **draw)
        runs_in = [s for s in full if access.kernel_layout(layout, *s[:3], s[4]) == layout]  # TT run as TN left out
        assert shapes == [s for s in runs_in if access.row_widths(layout, *s[:3])[0] != 4][:10]
        assert (runs_in == full) == (layout == "TN")
    for layout in ("NN", "NT"):
        with pytest.raises(ValueError, match="TN or TT"):
            calibrate.narrow(5, 1019, layout, draw, "A")  # A as stored is never read along its rows


def test_calibrate_draws_in_a_layout_only_the_shapes_the_family_runs_in_it(calibrate):
    from tilegemm import access, suites

    draw = dict(suites.DRAW)
    shapes = calibrate.run_in(28, 1439, "NT", draw)  # the committed NT calibration's draw
    assert len(shapes) == 28 and shapes == calibrate.run_in(28, 1439, "NT", draw)  # deterministic per seed
    assert all(access.kernel_layout("NT", *s[:3], s[4]) == "NT" for s in shapes)
    full = suites.random_shapes(560, 1439, ("NT",), **draw)
    assert shapes == [s for s in full if access.kernel_layout("NT", *s[:3], s[4]) == "NT"][:28]  # in order
    assert any(access.kernel_layout("NT", *s[:3], s[4]) == "NN" for s in full[:28])  # some are left to NN's
    for layout in ("NN", "TN"):  # run as drawn: the draw itself
        assert calibrate.run_in(20, 1423, layout, draw) == suites.random_shapes(20, 1423, (layout,), **draw)
    tt = calibrate.run_in(20, 1423, "TT", draw)  # TT run as TN on B transposed left out, as NT's
    assert all(access.kernel_layout("TT", *s[:3], s[4]) == "TT" for s in tt)
    assert tt != suites.random_shapes(20, 1423, ("TT",), **draw)


def test_calibrate_long_k_draws_only_the_class_that_runs_in_the_layout(calibrate):
    from tilegemm import access, suites

    draw = dict(suites.DRAW)
    shapes = calibrate.long_k(12, 1747, "TT", draw, 132)
    assert len(shapes) == 12 and shapes == calibrate.long_k(12, 1747, "TT", draw, 132)  # deterministic per seed
    full = suites.random_shapes(600, 1747, ("TT",), **draw)
    runs_in = [s for s in full if access.kernel_layout("TT", *s[:3], s[4]) == "TT"]
    assert shapes == [s for s in runs_in if suites.long_k(*s[:3], s[4], 132)][:12]  # the draw's own, in order
    assert all(K >= suites.LONG_K_MIN and -(-M // 128) * -(-N // 128) < 132 for M, N, K, _, _ in shapes)
    few = calibrate.long_k(12, 1747, "TT", draw, 16)  # fewer SMs: fewer shapes have few tiles
    assert len(few) == 12 and few != shapes and all(-(-M // 128) * -(-N // 128) < 16 for M, N, _, _, _ in few)
    assert not suites.long_k(4096, 4096, 8192) and not suites.long_k(256, 256, 2047) and suites.long_k(256, 256, 2048)
    assert suites.long_k(1408, 1536, 4096) is False and suites.long_k(1408, 1408, 4096)  # 132 tiles; 121
