"""GPU-free: the command line and the one shape/config syntax every command shares."""

import subprocess
import sys

import pytest

from tilegemm import cli
from tilegemm.parsing import format_shape, parse_config, parse_shape

from conftest import HAVE_GPU


def run(*args, module="tilegemm"):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True)


@pytest.mark.parametrize("cmd", [[], ["bench"], ["tune"], ["ladder"], ["explain"]])
def test_help(cmd):
    res = run(*cmd, "--help")
    assert res.returncode == 0 and "usage: tilegemm" in res.stdout


def test_python_dash_m_runs_the_cli():
    res = run("--version")
    assert res.returncode == 0 and res.stdout.startswith("tilegemm ")
    assert run("--version", module="tilegemm.cli").stdout == res.stdout


@pytest.mark.skipif(HAVE_GPU, reason="checks the GPU-free path")
def test_bench_without_gpu_compiles_and_says_so():
    res = run("bench", "--no-write")
    assert res.returncode == 0, res.stderr
    assert "gemm" in res.stdout and "No CUDA GPU here" in res.stdout
    assert "17 benchmark cases (checks and timings) need a GPU" in " ".join(res.stdout.split())
    res = run("bench", "--no-write", "--kernels", "01_naive", "02_smem_tiled")
    assert "01_naive" in res.stdout and "02_smem_tiled" in res.stdout


@pytest.mark.skipif(HAVE_GPU, reason="checks the GPU-free path")
def test_tune_without_gpu_lists_candidates():
    res = run("tune", "--shapes", "4096", "16x4096x4096", "64x512x512x512")
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert "No CUDA GPU here: candidates enumerated and pruned" in out and "splits=4" in out
    assert "64x512x512x512" in out


@pytest.mark.skipif(HAVE_GPU, reason="checks the GPU-free path")
def test_explain_takes_the_shared_shape_syntax(capsys):
    assert cli.main(["explain", "gemm", "--shape", "512x256x128", "--no-measure", "--json"]) == 0
    assert '"shape": [\n  512,\n  256,\n  128\n ]' in capsys.readouterr().out


@pytest.mark.parametrize("text,dims", [("4096", (4096, 4096, 4096, 1)), ("128x4096x4096", (128, 4096, 4096, 1)),
                                       ("3x5x7", (3, 5, 7, 1)), ("64x512x512x512", (512, 512, 512, 64)),
                                       ("2x3x5x7", (3, 5, 7, 2)), (" 8X9X10 ", (8, 9, 10, 1))])
def test_parse_shape(text, dims):
    assert parse_shape(text) == dims
    M, N, K, b = dims
    assert parse_shape(format_shape(M, N, K, b)) == dims


@pytest.mark.parametrize("text,why", [
    ("0", "has a zero"), ("-5", "is not MxNxK"), ("2x3", "has 2 numbers"), ("4096x", "is not MxNxK"),
    ("x4096", "is not MxNxK"), ("1x2x3x4x5", "has 5 numbers"), ("ax3x4", "is not MxNxK"), ("0x3x4x5", "has a zero"),
    ("4096x0x8", "has a zero"), ("4,4,4", "is not MxNxK"), ("4*4*4", "is not MxNxK"), ("", "is not MxNxK"),
    ("1.5x2x3", "is not MxNxK"), ("3000000000x2x2", r"above 2\^31 - 1"),
])
def test_parse_shape_errors(text, why):
    with pytest.raises(ValueError, match=why) as info:
        parse_shape(text)
    assert "\n" not in str(info.value)


def test_parse_config():
    assert parse_config("bm=128, bn=64") == {"bm": 128, "bn": 64}
    assert parse_config(None) is None and parse_config("") is None
    for bad, why in [("bm", "is not NAME=VALUE"), ("=4", "is not NAME=VALUE"), ("bm=x", "must be an integer"),
                     ("bm=1.5", "must be an integer"), ("bm=1,bm=2", "twice"), ("b m=1", "is not NAME=VALUE")]:
        with pytest.raises(ValueError, match=why):
            parse_config(bad)


@pytest.mark.parametrize("argv,message", [
    (["bench", "--real", "--seed", "5"], "--seed applies to --random only (it draws the random shapes); pass "
                                         "--random N too, or leave --seed out"),
    (["bench", "--seed", "5"], "--seed applies to --random only"),
    (["bench", "--real", "--layouts", "NT"], "--layouts applies to --sizes and --random only (the suite and --real "
                                             "set their own layouts); pass --sizes or --random N too, or leave "
                                             "--layouts out"),
    (["bench", "--layouts", "TN"], "--layouts applies to --sizes and --random only"),
])
def test_bench_options_that_would_be_ignored_are_refused(argv, message, capsys):
    assert cli.main(argv + ["--no-write"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: " + message) and err.count("\n") == 1, err
    assert "Traceback" not in out + err and not out  # refused before any work


def test_bench_takes_seed_and_layouts_where_they_apply(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli.gpu, "have_gpu", lambda: False)  # the GPU-free path: cases counted, nothing timed

    def static_table(names, arch):
        seen["names"] = names
        return ""

    monkeypatch.setattr(cli, "static_table", static_table)
    args = cli.parse_args(cli.build_parser(), ["bench", "--random", "5", "--seed", "7", "--layouts", "NT", "TN"])
    cases, header = cli._bench_cases(args)
    assert (header["seed"], header["draw"]["layouts"], len(cases)) == (7, ["NT", "TN"], 5)
    assert {c[3] for c, _ in cases} <= {"NT", "TN"}
    args = cli.parse_args(cli.build_parser(), ["bench", "--sizes", "64", "2x8x16x32", "--layouts", "NN", "TT"])
    assert [c for c, _ in cli._bench_cases(args)[0]] == [(64, 64, 64, "NN", 1), (64, 64, 64, "TT", 1),
                                                         (8, 16, 32, "NN", 2), (8, 16, 32, "TT", 2)]
    assert cli.main(["bench", "--real", "--no-write"]) == 0 and seen["names"] == ["gemm"]
