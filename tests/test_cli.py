"""GPU-free: the command line."""

import subprocess
import sys

import pytest

from tilegemm import cli
from tilegemm.bench import parse_case, parse_size

from conftest import HAVE_GPU


def run(*args):
    return subprocess.run([sys.executable, "-m", "tilegemm.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("cmd", [[], ["bench"], ["tune"], ["ladder"]])
def test_help(cmd):
    res = run(*cmd, "--help")
    assert res.returncode == 0 and "usage: tilegemm" in res.stdout


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
    res = run("tune", "--shapes", "4096", "16x4096x4096")
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert "No CUDA GPU here: candidates enumerated and pruned" in out and "splits=4" in out


def test_bench_rejects_unknown_kernel():
    res = run("bench", "--kernels", "nope")
    assert res.returncode == 2 and "kernel='nope' is not a tilegemm kernel" in res.stdout


def test_bench_rejects_bad_size():
    assert cli.main(["bench", "--sizes", "12xq", "--no-write"]) == 2


@pytest.mark.parametrize("text,dims", [("4096", (4096,) * 3), ("128x4096x4096", (128, 4096, 4096)), ("3x5x7", (3, 5, 7))])
def test_parse_size(text, dims):
    assert parse_size(text) == dims


@pytest.mark.parametrize("text", ["0", "2x3", "ax3x4", "1x2x3x4", "-5"])
def test_parse_size_errors(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("text,case", [("4096", (4096, 4096, 4096, 1)), ("128x4096x4096", (128, 4096, 4096, 1)),
                                       ("64x512x512x512", (512, 512, 512, 64)), ("2x3x5x7", (3, 5, 7, 2))])
def test_parse_case(text, case):
    assert parse_case(text) == case


@pytest.mark.parametrize("text", ["0", "2x3", "0x3x4x5", "ax3x4x5", "1x2x3x4x5"])
def test_parse_case_errors(text):
    with pytest.raises(ValueError):
        parse_case(text)
