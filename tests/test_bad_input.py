"""GPU-free: every kind of bad input the library and the command line reject, in one table.

Each row gives the call, the error it must raise (type and message) and the arrays it touches; the
test checks the message, that it is one line, and that no input and no ``out`` changed.  Command
lines must exit non-zero with one line on stderr and no traceback.
"""

import copy
import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import tilegemm
from tilegemm import cli, folders, registry, selection
from tilegemm.arrays import Operand
from tilegemm.plan import plan

from conftest import HAVE_GPU


def f32(*shape):
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


class CAI:
    """A GPU array as only its __cuda_array_interface__ (described without a GPU)."""

    def __init__(self, shape, strides=None, typestr="<f4", ptr=0x7F0000000000, mask=None, readonly=False):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (ptr, readonly), "version": 3, "mask": mask}


class RawCAI:
    """An object whose __cuda_array_interface__ is exactly the given dict (a broken one, say)."""

    def __init__(self, **cai):
        self.__cuda_array_interface__ = cai


class DLPack:
    """A DLPack-only array on a device of the given DLPack type (1: CPU, 2: CUDA)."""

    def __init__(self, dev_type, shape=(3, 4)):
        self.dev_type, self.shape, self.dtype = dev_type, shape, "float32"

    def __dlpack__(self, stream=None):  # pragma: no cover - never consumed
        raise AssertionError("must be rejected before conversion")

    def __dlpack_device__(self):
        return (self.dev_type, 0)


class CPUTensor:
    """Looks like a torch tensor on the CPU (no torch needed)."""

    __module__ = "torch"

    def __init__(self, shape):
        self.shape, self.dtype, self.is_cuda = shape, "torch.float32", False
        self.device = SimpleNamespace(type="cpu", index=None)

    def stride(self):
        return (self.shape[1], 1)

    def data_ptr(self):
        return 0


def gpu_op(name, shape, device, ptr):
    return Operand(name, "cupy", None, shape, (shape[1], 1), np.dtype(np.float32), device, ptr)


A34, B45 = CAI((3, 4)), CAI((4, 5), ptr=0x7F1000000000)
BUF = f32(8, 8)
RO = f32(3, 5)
RO.flags.writeable = False
C_COL = CAI((3, 5), strides=(4, 12), ptr=0x7F2000000000)
OUT_ROW = CAI((3, 5), ptr=0x7F3000000000)


class Call:
    """A call of the library with its arguments, and the arrays among them."""

    def __init__(self, fn, *args, **kw):
        self.fn, self.args, self.kw = fn, args, kw

    def __call__(self):
        return self.fn(*self.args, **self.kw)

    def arrays(self) -> list:
        return [x for x in (*self.args, *self.kw.values())
                if isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__")]


def mm(*args, **kw):
    return Call(tilegemm.matmul, *args, **kw)


def gm(*args, **kw):
    return Call(tilegemm.gemm, *args, **kw)


# (id, call, exception type, message (a regex), arrays that must not change)
API = [
    ("dtype-float64", mm(f32(3, 4).astype(np.float64), f32(4, 5)), TypeError,
     r"a has dtype float64, but tilegemm computes in float32 and never casts silently; convert it first: "
     r"a\.astype\(numpy\.float32\)"),
    ("dtype-float16-b", mm(f32(3, 4), f32(4, 5).astype(np.float16)), TypeError, "b has dtype float16"),
    ("dtype-int32", mm(np.ones((3, 4), np.int32), f32(4, 5)), TypeError, "a has dtype int32"),
    ("dtype-complex", mm(f32(3, 4), np.ones((4, 5), np.complex64)), TypeError, "b has dtype complex64"),
    ("dtype-bool", mm(np.ones((3, 4), bool), f32(4, 5)), TypeError, "a has dtype bool"),
    ("ndim-0-a", mm(np.ones((), np.float32), f32(4, 5)), ValueError, "a is a 0-d array"),
    ("ndim-0-b", mm(f32(3, 4), np.ones((), np.float32)), ValueError, "b is a 0-d array"),
    ("inner-dims", mm(f32(3, 4), f32(5, 6)), ValueError,
     r"inner dimensions do not match: a has shape \(3, 4\) and b has shape \(5, 6\)"),
    ("inner-dims-vector", mm(f32(3, 4), f32(5)), ValueError, r"b\.shape\[0\] = 5"),
    ("batch-broadcast", mm(f32(2, 3, 4), f32(3, 4, 5)), ValueError,
     r"the batch dimensions of a \(2,\) and b \(3,\) do not broadcast"),
    ("not-an-array", mm([[1.0]], f32(1, 1)), TypeError, "a must be an array"),
    ("out-shape", mm(f32(3, 4), f32(4, 5), out=f32(3, 4)), ValueError,
     r"out has shape \(3, 4\), but the result has shape \(3, 5\)"),
    ("out-batch-shape", mm(f32(2, 3, 4), f32(4, 5), out=f32(3, 5)), ValueError, r"result has shape \(2, 3, 5\)"),
    ("out-dtype", mm(f32(3, 4), f32(4, 5), out=np.zeros((3, 5))), TypeError, "out has dtype float64"),
    ("out-overlaps-a", mm(BUF, f32(8, 8), out=BUF), ValueError, "out overlaps a in memory"),
    ("out-overlaps-b", mm(f32(4, 4), BUF[:4, :], out=BUF[2:6, :]), ValueError, "out overlaps b in memory"),
    ("out-read-only", mm(f32(3, 4), f32(4, 5), out=RO), ValueError, "out is a read-only array"),
    ("out-read-only-cai", mm(A34, B45, out=CAI((3, 5), ptr=0x7F3000000000, readonly=True)), ValueError,
     r"^out is a read-only array; pass a writable out array \(or none\)$"),
    ("cai-typestr", mm(CAI((3, 4), typestr="<x9"), B45), ValueError,
     r"^a's __cuda_array_interface__ is malformed \(typestr '<x9', .*\); pass a CuPy array \(cupy\.asarray\(a\)\)"),
    ("cai-shape-not-a-tuple", mm(A34, CAI(5, ptr=0x7F1000000000)), ValueError,
     r"^b's __cuda_array_interface__ is malformed \(typestr '<f4', shape 5,"),
    ("cai-no-shape", mm(RawCAI(typestr="<f4", data=(0x7F0000000000, False), version=3), B45), ValueError,
     r"^a's __cuda_array_interface__ lacks \['shape'\] \(it must give shape, typestr and data\); pass a CuPy"),
    ("cai-not-a-dict", mm(A34, type("ListCAI", (), {"__cuda_array_interface__": [4, 5]})()), ValueError,
     r"^b's __cuda_array_interface__ is a list, not a dict; pass a CuPy array \(cupy\.asarray\(b\)\)"),
    ("out-zero-batch-stride", mm(CAI((2, 3, 4)), B45, out=CAI((2, 3, 5), strides=(0, 20, 4), ptr=0x7F3000000000)),
     ValueError, "out has a zero stride in a batch dimension"),
    ("out-not-row-or-column-major", mm(A34, B45, out=CAI((3, 5), strides=(40, 8), ptr=0x7F3000000000)), ValueError,
     "out is a view with strides"),
    ("view-needs-copy", mm(CAI((3, 4), strides=(64, 8)), B45), ValueError,
     r"a is a view with strides \(16, 2\) .* would need a copy"),
    ("negative-strides", mm(CAI((3, 4), strides=(-16, 4)), B45), ValueError, "would need a copy"),
    ("broadcast-rows", mm(CAI((3, 4), strides=(0, 4)), B45), ValueError, "would need a copy"),
    ("misaligned-view", mm(CAI((3, 4), ptr=0x7F0000000002), B45), ValueError,
     "a starts at a byte address that is not a multiple of 4"),
    ("odd-byte-strides", mm(CAI((3, 4), strides=(18, 4)), B45), ValueError, "byte strides .* not multiples"),
    ("masked", mm(CAI((3, 4), mask="a mask"), B45), ValueError, "a is a masked array"),
    ("host-and-gpu", mm(f32(3, 4), CAI((4, 5))), ValueError, "a is on the host but b is on a GPU"),
    ("torch-cpu", mm(CPUTensor((3, 4)), B45), ValueError, r"a is a torch tensor on the CPU; .* pass a\.cuda\(\)"),
    ("dlpack-cpu", mm(DLPack(1), B45), ValueError, "a is a DLPack array on device type 1, not a CUDA GPU"),
    ("too-large", mm(CAI((2**31, 4)), B45), ValueError, r"M = 2147483648 is larger than 2\^31 - 1"),
    ("alpha-str", gm(f32(3, 4), f32(4, 5), alpha="2"), TypeError,
     r"^alpha must be a real number, got str '2'; pass a Python float \(e\.g\. alpha=2\.0\)$"),
    ("alpha-rounds-to-zero", gm(f32(3, 4), f32(4, 5), alpha=1e-50), ValueError,
     r"^alpha = 1e-50 rounds to 0 in float32 .*; pass alpha=0\.0, or rescale the operands$"),
    ("beta-rounds-to-zero", gm(f32(3, 4), f32(4, 5), f32(3, 5), beta=-1e-46), ValueError,
     "beta = -1e-46 rounds to 0 in float32"),
    ("alpha-complex", gm(f32(3, 4), f32(4, 5), alpha=1j), TypeError, "alpha must be a real number, got complex"),
    ("alpha-bool", gm(f32(3, 4), f32(4, 5), alpha=True), TypeError, "alpha must be a real number, got bool"),
    ("alpha-nan", gm(f32(3, 4), f32(4, 5), alpha=float("nan")), ValueError, "alpha = nan is not a finite float32"),
    ("beta-inf", gm(f32(3, 4), f32(4, 5), f32(3, 5), beta=float("inf")), ValueError, "beta = inf is not a finite"),
    ("alpha-overflows-float32", gm(f32(3, 4), f32(4, 5), alpha=1e300), ValueError, "alpha = 1e[+]300 is not a finite"),
    ("beta-without-c", gm(f32(3, 4), f32(4, 5), beta=0.5), ValueError, "beta = 0.5 scales c, but no c was given"),
    ("c-broadcast", gm(f32(3, 4), f32(4, 5), f32(4), beta=1.0), ValueError,
     r"c has shape \(4,\), which does not broadcast to the result's shape \(3, 5\)"),
    ("c-dtype", gm(f32(3, 4), f32(4, 5), np.ones((3, 5)), beta=1.0), TypeError, "c has dtype float64"),
    ("c-dtype-beta-zero", gm(f32(3, 4), f32(4, 5), np.ones((3, 5))), TypeError, "c has dtype float64"),
    ("c-broadcast-beta-zero", gm(f32(3, 4), f32(4, 5), f32(4)), ValueError,
     r"c has shape \(4,\), which does not broadcast to the result's shape \(3, 5\)"),
    ("c-device-beta-zero", gm(A34, B45, f32(3, 5)), ValueError, "a is on a GPU but c is on the host"),
    ("c-not-row-or-column-major", gm(A34, B45, CAI((3, 5), strides=(40, 8), ptr=0x7F2000000000), beta=1.0),
     ValueError, "c is a view with strides"),
    ("c-and-out-layouts", gm(A34, B45, C_COL, beta=1.0, out=OUT_ROW), ValueError,
     "c's matrices are column-major but out's are row-major"),
    ("out-overlaps-c", gm(A34, B45, CAI((3, 5), ptr=0x7F2000000000), beta=1.0,
                          out=CAI((3, 5), ptr=0x7F2000000004)), ValueError, "out overlaps c without being the same"),
    ("kernel-unknown", mm(f32(3, 4), f32(4, 5), kernel="fast"), ValueError,
     r"kernel='fast' is not a tilegemm kernel; choose one of \['gemm', '01_naive'"),
    ("kernel-not-a-name", mm(f32(3, 4), f32(4, 5), kernel=5), TypeError, "kernel must be a kernel name"),
    ("alpha-with-a-rung", gm(f32(3, 4), f32(4, 5), alpha=2.0, kernel="05_double_buffered"), ValueError,
     "is a ladder rung, which computes a @ b only"),
    ("config-unknown-name", mm(f32(3, 4), f32(4, 5), config={"rm": 4}), tilegemm.ConfigError,
     r"^config\['rm'\]: gemm has no parameter 'rm'; its parameters are \['bk', 'bm'"),
    ("config-float", mm(f32(3, 4), f32(4, 5), config={"bm": 64.0}), tilegemm.ConfigError,
     r"config\['bm'\] must be an integer, got float 64.0"),
    ("config-bool", mm(f32(3, 4), f32(4, 5), config={"stages": True}), tilegemm.ConfigError,
     r"config\['stages'\] must be an integer, got bool"),
    ("config-not-a-dict", mm(f32(3, 4), f32(4, 5), config=[("bm", 64)]), tilegemm.ConfigError,
     "config must be a dict"),
    ("config-constraint", mm(f32(3, 4), f32(4, 5), config={"bm": 100}), tilegemm.ConfigError,
     r"^config=\{'bm': 100\} for gemm \(the defaults filled in: \{'bm': 100, .*\}\) breaks: bm % tm == 0 and bn % tn == 0; .*; "
     r"change config to meet them, or leave config=None$"),
    ("config-zero-size", mm(f32(3, 4), f32(4, 5), config={"bm": 0}), tilegemm.ConfigError,
     "bm and bn are positive"),
    ("config-rung5-odd-tile", mm(f32(3, 4), f32(4, 5), kernel="05_double_buffered", config={"bm": 7}),
     tilegemm.ConfigError, r"^config=\{'bm': 7\} for 05_double_buffered \(the defaults filled in: .*\) breaks: bm % rm == 0"),
    ("config-rung2-zero", mm(f32(3, 4), f32(4, 5), kernel="02_smem_tiled", config={"tile": 0}),
     tilegemm.ConfigError, "tile >= 1"),
    ("pdl-not-bool", mm(f32(3, 4), f32(4, 5), pdl="no"), TypeError, "pdl must be True or False"),
    ("precision-unknown", mm(f32(3, 4), f32(4, 5), precision="fp16"), ValueError,
     r"^precision must be one of 'fp32', 'tf32x3', 'tf32', got 'fp16' \('fp32': FFMAs, the default;"),
    ("precision-of-a-rung", mm(f32(3, 4), f32(4, 5), kernel="05_double_buffered", precision="tf32"), ValueError,
     r"^kernel='05_double_buffered' computes fp32, but precision='tf32'; pass precision='fp32' to run it$"),
    ("config-mma-precision", mm(f32(3, 4), f32(4, 5), config={"mma": 3}), ValueError,
     r"^config\['mma'\] = 3 computes tf32x3, but precision='fp32'; leave 'mma' out of config \(precision= sets it\)$"),
]


@pytest.mark.parametrize("case", API, ids=[c[0] for c in API])
def test_the_library_rejects(case):
    _, call, exc, message = case
    arrays = call.arrays()
    before = [copy.deepcopy(x.__cuda_array_interface__) if hasattr(x, "__cuda_array_interface__") else x.copy()
              for x in arrays]
    with pytest.raises(exc, match=message) as info:
        call()
    assert "\n" not in str(info.value)
    for x, x0 in zip(arrays, before):
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, x0, equal_nan=True) and x.dtype == x0.dtype, "an array changed"
        else:
            assert x.__cuda_array_interface__ == x0


def _raised_texts(path) -> list[tuple[int, str]]:
    """(line, the longest literal piece of its message) of every ``raise X("...")`` in ``path``."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            msg = node.exc.args[0]
            parts = [msg.value] if isinstance(msg, ast.Constant) and isinstance(msg.value, str) else \
                [v.value for v in msg.values if isinstance(v, ast.Constant)] if isinstance(msg, ast.JoinedStr) else []
            if parts:
                found.append((node.lineno, max(parts, key=len).strip()))
    return found


# raised by the call path's checks, but not reachable from a call's arguments alone (no GPU): why
NOT_IN_THE_TABLE = {
    "; move them to one device": "arrays on two GPUs: a CUDA-array-interface array's GPU is known only at run "
                                 "time (test_arrays_on_different_devices plans such operands directly)",
    "(Hopper: wgmma and TMA), not": "the arch a kernel is built for: the GPU's, not an argument",
    "layout must be one of": "kernel build options, set by the call path, not by a caller",
    "vec must be 4, 2 or 1, or one of those per operand (A, B, D)": "kernel build options, as above",
}


def test_every_check_of_the_call_path_is_in_the_table():
    """Each error message the call's checks can raise is raised by some row of ``API`` (or is listed, with
    the reason, in NOT_IN_THE_TABLE): a new check cannot go untested."""
    from pathlib import Path

    raised = []
    for _, call, _, _ in API:
        try:
            call()
        except Exception as exc:
            raised.append(str(exc))
    src = Path(tilegemm.__file__).parent
    texts = [(f, line, t) for f in ("plan.py", "arrays.py", "kernelspec.py", "registry.py")
             for line, t in _raised_texts(src / f)]
    assert len(texts) > 30, "the scan must find the checks"
    missing = [f"{f}:{line}: {t!r}" for f, line, t in texts if t not in NOT_IN_THE_TABLE
               and not any(t in m for m in raised)]
    assert not missing, "checks no row raises: " + "; ".join(missing)
    stale = [t for t in NOT_IN_THE_TABLE if t not in {t for _, _, t in texts}]
    assert not stale, f"NOT_IN_THE_TABLE names checks that are gone: {stale}"


def test_arrays_on_different_devices():
    a, b = gpu_op("a", (3, 4), 0, 0x1000), gpu_op("b", (4, 5), 1, 0x9000)
    with pytest.raises(ValueError, match=re.escape("a is on GPU 0 but b is on GPU 1; move them to one device")):
        plan(a, b)


@pytest.mark.skipif(HAVE_GPU, reason="the no-GPU error")
def test_valid_input_without_a_gpu():
    a, b, out = f32(3, 4), f32(4, 5), np.full((3, 5), 7.0, np.float32)
    a0, b0 = a.copy(), b.copy()
    with pytest.raises(tilegemm.NoGPUError, match="^tilegemm needs a CUDA GPU, and none is usable here"):
        tilegemm.matmul(a, b, out=out)
    assert np.array_equal(a, a0) and np.array_equal(b, b0) and (out == 7.0).all()


def test_unwritable_kernel_cache_warns_once_and_still_compiles(tmp_path, monkeypatch):
    from tilegemm import compiler

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TILEGEMM_CACHE_DIR", str(blocker))
    compiler.clear_memory_cache()
    compiler._warned.clear()
    with pytest.warns(RuntimeWarning, match="cannot write the kernel cache in .*; kernels will be compiled again"):
        k = registry.get("01_naive").compile(arch="sm_90")
    assert k.cubin[:4] == b"\x7fELF"
    compiler.clear_memory_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per folder
        registry.get("01_naive").compile(arch="sm_90")
    compiler.clear_memory_cache()


def test_unwritable_tuning_cache_is_refused_before_tuning(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(blocker / "tuning"))
    with pytest.raises(OSError, match="cannot be written .*; set TILEGEMM_TUNE_DIR to a writable folder"):
        selection.check_writable()
    with pytest.raises(OSError, match="pass --out with a writable folder"):
        folders.writable(blocker / "results", "pass --out with a writable folder")


def test_corrupt_tuning_cache_is_reported_and_ignored(tmp_path):
    props = SimpleNamespace(name="Test GPU", major=9, minor=0, arch="sm_90", sms=132, id=0, l2_bytes=50 << 20,
                            smem_per_block_optin=227 * 1024, smem_per_sm=228 * 1024, regs_per_sm=65536,
                            max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=32)
    sel = selection.Selector(props, "1", "13.0")
    sel.cache_path = tmp_path / "cache.json"
    sel.cache_path.write_text('{"schema": 1, "entries": [1, 2')
    with pytest.warns(RuntimeWarning, match="ignoring the unreadable tuning file .*cache.json"):
        cfg, source = sel("NN", 4096, 4096, 4096, 1)
    assert source in ("shipped", "heuristic") and cfg


# --------------------------------------------------------------------------- the command line

CLI = [
    ("bench-size-trailing-x", ["bench", "--sizes", "4096x"], "shape '4096x' is not MxNxK"),
    ("bench-size-leading-x", ["bench", "--sizes", "x4096"], "shape 'x4096' is not MxNxK"),
    ("bench-size-five", ["bench", "--sizes", "1x2x3x4x5"], "has 5 numbers"),
    ("bench-size-zero", ["bench", "--sizes", "0"], "has a zero"),
    ("bench-size-two", ["bench", "--sizes", "2x3"], "has 2 numbers"),
    ("bench-size-word", ["bench", "--sizes", "big"], "shape 'big' is not MxNxK"),
    ("bench-kernel", ["bench", "--kernels", "nope"], "kernel='nope' is not a tilegemm kernel"),
    ("bench-layout", ["bench", "--layouts", "XX"], "invalid choice: 'XX'"),
    ("bench-arch-old", ["bench", "--arch", "sm_70"], "arch='sm_70' is not supported: tilegemm compiles for sm_80"),
    ("bench-arch-word", ["bench", "--arch", "hopper"], "arch='hopper' is not a GPU architecture; pass one of sm_80"),
    ("bench-tag", ["bench", "--tag", "../elsewhere"], "tag '../elsewhere' may hold only"),
    ("ladder-size", ["ladder", "--sizes", "4096x"], "shape '4096x' is not MxNxK"),
    ("ladder-kernel", ["ladder", "--kernels", "09_nope"], "kernel='09_nope' is not a tilegemm kernel"),
    ("tune-top-zero", ["tune", "--top", "0"], "'0' is not a positive integer"),
    ("tune-top-negative", ["tune", "--top", "-3"], "expected one argument|'-3' is not a positive integer"),
    ("tune-shape", ["tune", "--shapes", "0x3x4x5"], "has a zero"),
    ("explain-kernel", ["explain", "nope"], "kernel='nope' is not a tilegemm kernel"),
    ("explain-shape-zero", ["explain", "gemm", "--shape", "0x0x0"], "has a zero"),
    ("explain-shape-negative", ["explain", "gemm", "--shape", "-5x3x2"], "expected one argument"),
    ("explain-shape-three-words", ["explain", "gemm", "--shape", "4096", "4096", "4096"], "unrecognized arguments"),
    ("explain-batch", ["explain", "gemm", "--shape", "2x3x4x5"], "explain takes one product, MxNxK"),
    ("explain-config-odd", ["explain", "gemm", "--config", "bm=7"], r"config=\{'bm': 7\} for gemm .* breaks: bm % tm == 0"),
    ("explain-config-zero", ["explain", "gemm", "--config", "bm=0"], "bm and bn are positive"),
    ("explain-rung5-odd", ["explain", "05_double_buffered", "--config", "bm=7"], "bm % rm == 0"),
    ("explain-config-syntax", ["explain", "gemm", "--config", "bm"], "config item 'bm' is not NAME=VALUE"),
    ("explain-config-name", ["explain", "gemm", "--config", "bq=64"], "gemm has no parameter 'bq'"),
    ("explain-gpu", ["explain", "gemm", "--gpu", "Voodoo2", "--no-measure"], "no measured peaks for GPU 'Voodoo2'"),
    ("explain-layout", ["explain", "gemm", "--layout", "XY"], "invalid choice: 'XY'"),
    ("explain-arch", ["explain", "gemm", "--arch", "sm_61"], "arch='sm_61' is not supported"),
    ("no-command", [], "the following arguments are required: command"),
    ("bench-random-zero", ["bench", "--random", "0"], "'0' is not a positive integer"),
    ("bench-seed-alone", ["bench", "--seed", "3"], "--seed applies to --random only"),
    ("bench-seed-with-real", ["bench", "--real", "--seed", "3"], "--seed applies to --random only .*; pass --random N"),
    ("bench-layouts-with-real", ["bench", "--real", "--layouts", "NT"], "--layouts applies to --sizes and --random only"),
    ("bench-layouts-alone", ["bench", "--layouts", "TN", "TT"], "--layouts applies to --sizes and --random only"),
    ("bench-random-and-sizes", ["bench", "--random", "3", "--sizes", "64"], "not allowed with argument --random"),
    ("bench-seed-negative", ["bench", "--random", "3", "--seed", "x1"], "'x1' is not a non-negative integer"),
]


@pytest.mark.parametrize("case", CLI, ids=[c[0] for c in CLI])
def test_the_command_line_rejects(case, capsys):
    _, argv, message = case
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert status == 2, (status, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert re.search(message, err), err
    assert "Traceback" not in out + err


OTHER = [
    ("probe-kernel", ["-m", "tilegemm.instruments.probe", "launch", "nope", "64"], "kernel='nope' is not a tilegemm kernel"),
    ("probe-batch", ["-m", "tilegemm.instruments.probe", "launch", "gemm", "2x3x4x5"], "launch takes one product"),
    ("probe-layout", ["-m", "tilegemm.instruments.probe", "launch", "gemm", "64", "--layout", "XY"], "invalid choice"),
    ("probe-shape", ["-m", "tilegemm.instruments.probe", "launch", "gemm", "4096x"], "shape '4096x' is not MxNxK"),
    ("sweep-shape", ["scripts/sweep.py", "--tag", "t", "--sizes", "0x1x1", "--", "gemm"], "has a zero"),
    ("sweep-kernel", ["scripts/sweep.py", "--tag", "t", "--", "nope"], "kernel='nope' is not a tilegemm kernel"),
    ("variants-shape", ["scripts/variants.py", "--tag", "t", "--sizes", "1x2x3x4x5", "--", "gemm.cu"], "has 5 numbers"),
]


@pytest.mark.parametrize("case", OTHER, ids=[c[0] for c in OTHER])
def test_the_other_commands_reject(case):
    import subprocess
    import sys
    from pathlib import Path

    _, argv, message = case
    res = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and re.search(message, lines[0]), res.stderr
    assert "Traceback" not in res.stdout + res.stderr
