"""GPU-free: every argument error of tilegemm.matmul, with its exact message, raised before launch."""

import re

import numpy as np
import pytest

import tilegemm
from tilegemm import access, builds, model, registry
from tilegemm import plan as planning
from tilegemm.arrays import Operand, classify, describe

from conftest import HAVE_GPU


def f32(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


class FakeCAI:
    """A GPU array as only its __cuda_array_interface__ (no GPU needed to describe it)."""

    def __init__(self, shape, strides=None, typestr="<f4", ptr=0x7F0000000000):
        self.__cuda_array_interface__ = {
            "shape": shape, "strides": strides, "typestr": typestr, "data": (ptr, False), "version": 3,
        }


def check(a, b, out=None, kernel=None):
    """Validation only (what matmul runs before anything touches a GPU)."""
    A, B = describe(a, "a"), describe(b, "b")
    O = describe(out, "out") if out is not None else None
    return planning.plan(A, B, O, kernel)


def raises(exc, message, *args, **kw):
    with pytest.raises(exc, match="^" + re.escape(message) + "$"):
        tilegemm.matmul(*args, **kw)


def test_wrong_dtype_a():
    raises(TypeError, "a has dtype float64, but tilegemm computes in float32 and never casts "
           "silently; convert it first: a.astype(numpy.float32)", f32(3, 4).astype(np.float64), f32(4, 5))


def test_wrong_dtype_b():
    raises(TypeError, "b has dtype float16, but tilegemm computes in float32 and never casts "
           "silently; convert it first: b.astype(numpy.float32)", f32(3, 4), f32(4, 5).astype(np.float16))


def test_integer_dtype():
    raises(TypeError, "a has dtype int32, but tilegemm computes in float32 and never casts "
           "silently; convert it first: a.astype(numpy.float32)", np.ones((3, 4), np.int32), f32(4, 5))


def test_scalar_operand():
    raises(ValueError, "a is a 0-d array (a scalar); matmul needs at least one dimension (use "
           "multiplication for scalars)", np.ones((), np.float32), f32(4, 5))


def test_inner_dimensions():
    raises(ValueError, "inner dimensions do not match: a has shape (3, 4) and b has shape (5, 6) "
           "(a.shape[-1] = 4 must equal b.shape[-2] = 5)", f32(3, 4), f32(5, 6))
    raises(ValueError, "inner dimensions do not match: a has shape (3, 4) and b has shape (5,) "
           "(a.shape[-1] = 4 must equal b.shape[0] = 5)", f32(3, 4), f32(5))


def test_not_an_array():
    raises(TypeError, "a must be an array (NumPy, CuPy, a torch CUDA tensor, or an object with "
           "__cuda_array_interface__ or __dlpack__), got list; wrap it with "
           "numpy.asarray(a, dtype=numpy.float32)", [[1.0]], f32(1, 1))


def test_out_wrong_shape():
    raises(ValueError, "out has shape (3, 4), but the result has shape (3, 5)",
           f32(3, 4), f32(4, 5), out=f32(3, 4))


def test_out_wrong_dtype():
    raises(TypeError, "out has dtype float64; it must be float32 (the result's dtype)",
           f32(3, 4), f32(4, 5), out=np.zeros((3, 5)))


def test_out_overlapping_an_input():
    buf = f32(8, 8)
    raises(ValueError, "out overlaps a in memory; tilegemm reads a while it writes out, so pass a "
           "separate out array", buf, f32(8, 8), out=buf)
    raises(ValueError, "out overlaps b in memory; tilegemm reads b while it writes out, so pass a "
           "separate out array", f32(4, 4), buf[:4, :], out=buf[2:6, :])


def test_out_in_a_disjoint_part_of_one_buffer_is_fine():
    buf = f32(12, 4)
    p = check(buf[:4], buf[4:8], out=buf[8:])
    assert (p.M, p.N, p.K) == (4, 4, 4)


def test_interleaved_views_that_share_no_element_are_accepted():
    # the spans of X[:, 0:5] and X[:, 5:9] intersect, but no element is in both (numpy.shares_memory)
    buf = f32(4, 9)
    p = check(buf[:, 0:5], f32(5, 4), out=buf[:, 5:9])
    assert (p.M, p.N, p.K) == (4, 4, 5)
    check(f32(4, 4), buf[:, 1:5], out=buf[:, 5:9])
    # the same on a GPU, by addresses alone: a is columns 0-4 of a 4 x 9 buffer, out columns 5-8
    a = FakeCAI((4, 5), strides=(36, 4), ptr=0x7F0000000000)
    out = FakeCAI((4, 4), strides=(36, 4), ptr=0x7F0000000000 + 20)
    check(a, FakeCAI((5, 4), ptr=0x7F1000000000), out=out)


@pytest.mark.parametrize("a_cols,out_cols", [((0, 5), (4, 8)), ((0, 9), (8, 9)), ((3, 6), (0, 4))])
def test_interleaved_views_that_share_an_element_are_refused(a_cols, out_cols):
    buf = f32(4, 9)
    (a0, a1), (o0, o1) = a_cols, out_cols
    a, out = buf[:, a0:a1], buf[:, o0:o1]
    assert np.shares_memory(a, out)
    with pytest.raises(ValueError, match="out overlaps a in memory"):
        check(a, f32(a1 - a0, o1 - o0), out=out)
    # the same views on a GPU, described by their addresses alone
    base = 0x7F0000000000
    ga = FakeCAI(a.shape, strides=(36, 4), ptr=base + 4 * a0)
    gout = FakeCAI(out.shape, strides=(36, 4), ptr=base + 4 * o0)
    with pytest.raises(ValueError, match="out overlaps a in memory"):
        check(ga, FakeCAI((a1 - a0, o1 - o0), ptr=0x7F1000000000), out=gout)


def test_the_exact_overlap_test_matches_numpy_on_strided_views():
    from tilegemm.arrays import shares_bytes

    buf = np.zeros((6, 10), np.float32)
    views = [buf, buf[:, ::2], buf[:, 1::2], buf[::2], buf[1::2, 3:], buf[:3, :5], buf[3:, 5:], buf.T[2:4]]
    for x in views:
        for y in views:
            dx, dy = describe(x, "x"), describe(y, "y")
            assert dx.overlaps(dy) == np.shares_memory(x, y), (x.strides, y.strides)
            assert shares_bytes(dx.ptr, dx.footprint, dy.ptr, dy.footprint) == np.shares_memory(x, y)


def test_read_only_inputs_are_fine_but_a_read_only_out_is_not():
    ro = FakeCAI((3, 4))
    ro.__cuda_array_interface__["data"] = (0x7F0000000000, True)  # the interface's read-only flag
    assert describe(ro, "a").readonly
    p = check(ro, FakeCAI((4, 5), ptr=0x7F1000000000))
    assert p.a.op.readonly and (p.M, p.N, p.K) == (3, 5, 4)
    host = f32(3, 4)
    host.flags.writeable = False
    check(host, f32(4, 5))
    out = FakeCAI((3, 5), ptr=0x7F2000000000)
    out.__cuda_array_interface__["data"] = (0x7F2000000000, True)
    with pytest.raises(ValueError, match=re.escape("out is a read-only array; pass a writable out array (or none)")):
        check(FakeCAI((3, 4)), FakeCAI((4, 5), ptr=0x7F1000000000), out=out)


def test_dlpack_dtypes_numpy_has_no_name_for_read_plainly():
    class DLPackBF16:
        shape, dtype = (3, 4), "torch.bfloat16"

        def __dlpack__(self, stream=None):  # pragma: no cover - never consumed
            raise AssertionError

        def __dlpack_device__(self):
            return (2, 0)

    op = describe(DLPackBF16(), "a")
    assert str(op.dtype) == "bfloat16"
    with pytest.raises(TypeError, match=re.escape("a has dtype bfloat16, but tilegemm computes in float32")):
        planning.plan(op, describe(FakeCAI((4, 5)), "b"))


def test_a_named_split_count_is_at_most():
    """config's "splits" is an upper bound (dispatch runs at most ceil(K / 4), test_launch), so one
    config serves any K: no error where K is short."""
    a, b = FakeCAI((64, 10)), FakeCAI((10, 64), ptr=0x7F1000000000)
    A, B = describe(a, "a"), describe(b, "b")
    for splits in (3, 4, 64):
        assert planning.plan(A, B, config={"splits": splits}).config == (("splits", splits),)
    empty = describe(FakeCAI((64, 0)), "a"), describe(FakeCAI((0, 64), ptr=0x7F1000000000), "b")
    planning.plan(*empty, config={"splits": 8})  # K = 0: nothing is split (the result is beta * c)


def test_host_and_gpu_mixed():
    raises(ValueError, "a is on the host but b is on a GPU; pass all arrays on the host (NumPy) or "
           "all on one GPU", f32(3, 4), FakeCAI((4, 5)))
    raises(ValueError, "a is on a GPU but out is on the host; pass all arrays on the host (NumPy) or "
           "all on one GPU", FakeCAI((3, 4)), FakeCAI((4, 5), ptr=0x7F1000000000), out=f32(3, 5))


def _gpu_op(name, shape, device, ptr, strides=None):
    strides = strides or (shape[1], 1)
    return Operand(name, "cupy", None, shape, strides, np.dtype(np.float32), device, ptr)


def test_different_devices():
    a, b = _gpu_op("a", (3, 4), 0, 0x1000), _gpu_op("b", (4, 5), 1, 0x9000)
    with pytest.raises(ValueError, match=re.escape("a is on GPU 0 but b is on GPU 1; move them to one device")):
        planning.plan(a, b)
    out = _gpu_op("out", (3, 5), 2, 0x20000)
    with pytest.raises(ValueError, match=re.escape("a is on GPU 0 but out is on GPU 2")):
        planning.plan(a, _gpu_op("b", (4, 5), 0, 0x9000), out)


def test_view_that_needs_a_copy():
    with pytest.raises(ValueError, match=re.escape(
        "a is a view with strides (16, 2) (in elements) whose matrices are neither row- nor "
        "column-major, so reading it would need a copy; tilegemm never copies silently: pass a contiguous copy "
        "(a.copy() or ascontiguousarray(a))")):
        check(FakeCAI((3, 4), strides=(64, 8)), FakeCAI((4, 5), ptr=0x7F1000000000))


def test_negative_and_broadcast_strides_need_a_copy():
    for strides in [(-16, 4), (0, 4)]:
        with pytest.raises(ValueError, match="needs a copy|would need a copy"):
            check(FakeCAI((3, 4), strides=strides), FakeCAI((4, 5), ptr=0x7F1000000000))


def test_unknown_kernel():
    raises(ValueError, f"kernel='fast' is not a tilegemm kernel; choose one of {tilegemm.kernels()}",
           f32(3, 4), f32(4, 5), kernel="fast")


def test_torch_cpu_tensor_is_rejected():
    torch = pytest.importorskip("torch")
    raises(ValueError, "a is a torch tensor on the CPU; tilegemm computes on the GPU and does not copy "
           "torch tensors silently: pass a.cuda()", torch.ones(3, 4), torch.ones(4, 5))


@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU error")
def test_no_gpu():
    a, b = f32(3, 4), f32(4, 5)
    a0, b0 = a.copy(), b.copy()
    message = ("tilegemm needs a CUDA GPU, and none is usable here (no device or no driver). Run it "
               "on a machine with an NVIDIA GPU; compiling (tilegemm.compiler) works without one.")
    for call in (tilegemm.matmul, tilegemm.gemm):  # one message, naming no function the caller did not call
        with pytest.raises(tilegemm.NoGPUError, match="^" + re.escape(message) + "$"):
            call(a, b)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)  # inputs untouched


def test_validation_comes_before_the_gpu_check():
    # bad input is reported as bad input even where there is no GPU
    raises(ValueError, "inner dimensions do not match: a has shape (2, 3) and b has shape (2, 3) "
           "(a.shape[-1] = 3 must equal b.shape[-2] = 2)", f32(2, 3), f32(2, 3))


def test_layouts_are_read_from_strides():
    assert check(FakeCAI((4, 12)), FakeCAI((12, 5), ptr=0x7F1000000000)).a.layout == ("N", 12)
    # a transposed view of a 12 x 4 row-major array: column-major with ld 4
    p = check(FakeCAI((4, 12), strides=(4, 16)), FakeCAI((12, 5), ptr=0x7F1000000000))
    assert p.a.layout == ("T", 4)
    # a column slice of a wider array keeps its leading dimension (no copy)
    p = check(FakeCAI((4, 6), strides=(48, 4)), FakeCAI((6, 5), ptr=0x7F1000000000))
    assert p.a.layout == ("N", 12)


@pytest.mark.parametrize("shape,strides,expected", [
    ((3, 4), (4, 1), ("N", 4)),
    ((3, 4), (1, 3), ("T", 3)),
    ((3, 4), (10, 1), ("N", 10)),
    ((3, 4), (1, 7), ("T", 7)),
    ((1, 4), (99, 1), ("N", 4)),  # a single row: its row stride is irrelevant
    ((4, 1), (1, 99), ("N", 1)),  # a single column
    ((1, 1), (5, 5), ("N", 1)),
    ((3, 4), (2, 1), None),  # rows overlap
    ((3, 4), (8, 2), None),
    ((3, 4), (-4, 1), None),
    ((3, 4), (0, 1), None),  # broadcast rows
])
def test_classify(shape, strides, expected):
    assert classify(shape, strides) == expected


def test_vector_width_follows_alignment():
    assert access.vector_width((0x1000, 8), (0x2000, 4)) == 4
    assert access.vector_width((0x1004, 8), (0x2000, 4)) == 1  # a view starting 4 bytes in
    assert access.vector_width((0x1000, 6), (0x2000, 4)) == 1  # leading dimension not a multiple of 4
    # the family's 8-byte accesses: an 8-byte aligned start and even leading dimensions and strides
    assert access.vector_width((0x1000, 6), (0x2000, 4), pairs=True) == 2
    assert access.vector_width((0x1008, 8, 4), pairs=True) == 2
    assert access.vector_width((0x1000, 8, 4), pairs=True) == 4
    assert access.vector_width((0x1004, 8), pairs=True) == 1
    assert access.vector_width((0x1000, 6, 3), pairs=True) == 1  # an odd batch stride


def test_row_width_follows_the_layout():
    """The width the cost model charges: A's rows (of M) count in TN / TT, B's (of N) in NN / TN."""
    assert min(access.row_widths("NN", 500, 1001, 64)) == 1 and min(access.row_widths("NN", 1000, 1002, 64)) == 2
    assert min(access.row_widths("NT", 1001, 1001, 64)) == 4  # both copied across their rows
    assert min(access.row_widths("TN", 1001, 500, 64)) == 1 and min(access.row_widths("TT", 1002, 1001, 64)) == 2
    assert min(access.row_widths("NN", 500, 1002, 64, pairs=False)) == 1
    assert min(access.row_widths("NN", 4096, 1001, 4096)) == 4  # B is copied into aligned rows (M >= 2048)
    assert min(access.row_widths("NN", 512, 1001, 4096)) == 4  # rows 4 bytes off: copied from M >= 512
    assert min(access.row_widths("NN", 511, 1001, 4096)) == 1
    assert min(access.row_widths("NN", 1000, 1001, 4096, odd_from=1024)) == 1  # as calibrations under 1024 ran
    assert min(access.row_widths("NN", 1024, 1001, 4096, odd=False)) == 1  # as calibrations before any ran
    assert min(access.row_widths("NN", 1024, 1002, 4096)) == 2  # 8-byte aligned rows: from 2048


def test_out_width_follows_the_result_s_rows():
    """The width the cost model charges for the result's stores: its rows of N floats."""
    assert [access.out_width(n) for n in (1000, 1002, 1001)] == [4, 2, 1]
    assert access.out_width(1002, pairs=False) == 1
    assert access.out_width(4096) == 4 and min(access.row_widths("NN", 4096, 1001, 4096)) == 4 != access.out_width(1001)


def test_family_widths_per_operand():
    ok, bad = (0x1000, 8), (0x1004, 8)
    assert access.family_widths("NN", True, bad, ok, ok) == 4  # A copied across its rows: any alignment
    assert access.family_widths("NN", False, bad, ok, ok) == (1, 4, 4)  # the register pipeline reads along rows
    assert access.family_widths("NN", True, ok, bad, bad) == (4, 1, 1)
    assert access.family_widths("NN", True, ok, bad, None) == (4, 1, 4)  # D is the split-K workspace
    assert access.family_widths("NT", True, bad, bad, ok) == 4
    assert access.family_widths("TT", True, bad, bad, bad) == (1, 4, 1)
    pair = (0x1000, 6)  # 8-byte aligned rows
    assert access.family_widths("NN", True, ok, pair, pair) == (4, 2, 2)
    assert access.family_widths("NN", True, ok, pair, bad) == (4, 2, 1)
    assert access.family_widths("TN", True, pair, pair, pair) == 2
    # rows of odd length, by rows where the config takes them (access.ODD_ROWS): only an operand
    # copied along its rows, only with cp.async, only an odd leading dimension
    odd, off = (0x1000, 7), (0x1004, 8)
    assert access.family_widths("NN", True, ok, odd, odd, classes=(access.ODD_ROWS,)) == (4, 3, 1)
    assert access.family_widths("NN", True, ok, odd, odd) == (4, 1, 1)  # a config that does not take them
    assert access.family_widths("NN", False, ok, odd, ok, classes=(access.ODD_ROWS,)) == (4, 1, 4)  # the register pipeline
    assert access.family_widths("NN", True, ok, off, ok, classes=(access.ODD_ROWS,)) == (4, 1, 4)  # every row 4 bytes off
    assert access.family_widths("TN", True, odd, ok, ok, classes=(access.ODD_ROWS,)) == (1, 4, 4)  # A's: not measured to pay
    assert access.family_widths("NT", True, odd, odd, ok, classes=(access.ODD_ROWS,)) == 4  # both copied across their rows
    assert access.family_widths("TN", True, (0x1004, 6), odd, ok, classes=(access.ODD_ROWS,)) == (1, 3, 4)
    # rows of twice an odd length from an 8-byte aligned start (access.ODD_PAIRS), likewise: only B
    # copied along its rows, only with cp.async, only a leading dimension of 2 mod 4, only a config
    # that takes the class
    both = (access.ODD_ROWS, access.ODD_PAIRS)
    eight = (0x1008, 8)  # ld 0 mod 4 from an 8-byte aligned start: every row 8 bytes off
    assert access.family_widths("NN", True, ok, pair, ok, classes=both) == (4, access.ODD_PAIRS, 4)
    assert access.family_widths("NN", True, ok, pair, pair, classes=(access.ODD_PAIRS,)) == (4, 6, 2)
    assert access.family_widths("NN", True, ok, pair, ok, classes=(access.ODD_ROWS,)) == (4, 2, 4)  # not taken
    assert access.family_widths("NN", True, ok, pair, ok) == (4, 2, 4)
    assert access.family_widths("NN", True, ok, eight, ok, classes=both) == (4, 2, 4)  # every row 8 bytes off
    assert access.family_widths("NN", False, ok, pair, ok, classes=both) == (4, 2, 4)  # the register pipeline
    assert access.family_widths("TN", True, pair, ok, ok, classes=both) == (2, 4, 4)  # A's: never
    assert access.family_widths("NT", True, pair, pair, ok, classes=both) == 4  # both copied across their rows
    assert access.family_widths("NN", True, ok, odd, ok, classes=both) == (4, access.ODD_ROWS, 4)
    assert access.family_widths("NN", True, ok, odd, ok, classes=(access.ODD_PAIRS,)) == (4, 1, 4)
    assert access.family_widths("TN", True, (0x1004, 6), pair, ok, classes=both) == (1, access.ODD_PAIRS, 4)
    assert access.row_class(2, 6) == access.ODD_PAIRS and access.row_class(1, 7) == access.ODD_ROWS
    assert access.row_class(2, 8) is None and access.row_class(4, 6) is None and access.row_class(1, 6) is None


def test_rows_by_rows_by_build():
    """The builds of builds.BY_ROWS_BUILDS[code] read rows of each class of access.ROW_CLASSES by rows
    (ODD_ROWS: rows of odd length; ODD_PAIRS: of twice an odd length), and the model charges them
    NARROW_SHARE[code] of the narrow reads' cost; the others read them at the narrower width (4 or
    8 bytes), charged in full for it."""
    F = registry.FAMILY
    kinds = {0: "", 1: " stream-K", 2: " summed"}
    for code in access.ROW_CLASSES:
        on = {name + kinds[sk] for name, cfg in builds.TILES.items() for sk in (0, 1, 2)
              if builds.by_rows(F.params({**cfg, "sk": sk}), code)}
        assert on == set(builds.BY_ROWS_BUILDS[code]), code
    assert set(builds.BY_ROWS_BUILDS) == set(access.ROW_CLASSES) == {access.ODD_ROWS, access.ODD_PAIRS}
    assert access.ROW_CLASSES == {access.ODD_ROWS: (2, 1), access.ODD_PAIRS: (4, 2)}
    # the kernel takes a class where B's tile splits into whole copies of both widths per thread
    assert all(access.ODD_ROWS in registry.family_row_classes(F.params(cfg)) for cfg in builds.TILES.values())
    assert all(access.ODD_PAIRS in registry.family_row_classes(F.params(builds.TILES[b.split()[0]]))
               for b in builds.BY_ROWS_BUILDS[access.ODD_PAIRS])
    for name in ("256x128", "128x64", "64x64s", "128x128w"):  # B's tile: no whole 16-byte copies per thread
        assert access.ODD_PAIRS not in registry.family_row_classes(F.params(builds.TILES[name])), name
        assert not any(b.split()[0] == name for b in builds.BY_ROWS_BUILDS[access.ODD_PAIRS]), name
    assert registry.family_row_classes(F.params(builds.TILES["128x128"])) == (access.ODD_ROWS, access.ODD_PAIRS)
    assert registry.family_row_classes(F.params({**builds.TILES["128x128"], "stages": 0})) == ()
    assert not builds.by_rows(F.params({**builds.TILES["256x128"], "sk": 1}), access.ODD_ROWS)  # not in the list
    assert not builds.by_rows(F.params(builds.TILES["256x128"]), access.ODD_PAIRS)
    assert not builds.by_rows(F.params(builds.TILES["64x64s"]), access.ODD_PAIRS)  # by rows of odd length only
    assert builds.by_rows(F.params(builds.TILES["64x64s"]), access.ODD_ROWS) == F.params(builds.TILES["64x64s"])
    assert not builds.by_rows(F.params(builds.TILES["64x128"]), access.ODD_ROWS)  # by rows of twice an odd length only
    # the variants that keep their blocks an SM (BY_ROWS_MINB)
    sk = F.params({**builds.TILES["64x64f"], "sk": 1})
    for code in access.ROW_CLASSES:
        assert builds.BY_ROWS_MINB[code]["64x64f stream-K"] == 5
        assert builds.by_rows(sk, code) == {**sk, "minb": 5}  # keeps its blocks an SM
        assert builds.by_rows(F.params(builds.TILES["64x64f"]), code) == F.params(builds.TILES["64x64f"])
        assert not builds.by_rows(F.params({**builds.TILES["128x128"], "tm": 8, "ln": 4, "minb": 1}), code)  # no candidate's
        assert not builds.by_rows(F.params({**builds.TILES["128x128"], "mma": 1}), code)  # the tensor cores
    assert builds.BY_ROWS_MINB[access.ODD_PAIRS]["64x128"] == builds.BY_ROWS_MINB[access.ODD_PAIRS]["64x128 summed"] == 4
    for sk in (0, 2):
        q = F.params({**builds.TILES["64x128"], "sk": sk})
        assert q["minb"] == 0 and builds.by_rows(q, access.ODD_PAIRS) == {**q, "minb": 4}
    q = F.params(builds.TILES["128x128"])
    assert builds.by_rows(q, access.ODD_PAIRS) == builds.by_rows(q, access.ODD_ROWS) == q  # the tile's own minb
    # the width each build is charged for
    assert builds.read_width("128x128 split8 summed", 1) == access.ODD_ROWS
    assert builds.read_width("256x128 stream-K", 1) == 1
    assert builds.read_width("128x128", 2) == access.ODD_PAIRS
    assert builds.read_width("128x128 split8 summed", 2) == access.ODD_PAIRS
    assert builds.read_width("128x64", 2) == 2 and builds.read_width("64x64s", 2) == 2  # not in the list
    assert builds.read_width("64x128", 2) == access.ODD_PAIRS and builds.read_width("64x128", 1) == 1
    assert builds.read_width("128x128", 2, classes=(access.ODD_ROWS,)) == 2  # a calibration before the class
    assert builds.read_width("128x128", 1, classes=(access.ODD_PAIRS,)) == 1
    assert builds.read_width("128x128", 1, classes=()) == 1 and builds.read_width("128x128", 2, classes=()) == 2
    assert builds.read_width("128x128", 4) == 4  # A's rows are charged in predict, by their share of the tile
    assert access.row_widths("TN", 1001, 500, 64) == (1, 4) and access.row_widths("NN", 500, 1001, 64) == (4, 1)
    assert access.row_widths("NT", 1001, 1001, 64) == (4, 4)
    assert access.row_widths("NN", 500, 1002, 8000) == (4, 2)
    assert 0.5 < model.NARROW_SHARE[access.ODD_ROWS] < 1.0
    assert 0.0 < model.NARROW_SHARE[access.ODD_PAIRS] < model.NARROW_SHARE[2]
    c = {f"128x128.{k}": v for k, v in dict(f=5.0, a=1.0, b=0.5, u=0.4, l=0.2, v=0.0).items()}
    c.update(red0=3.0, red1=0.004, hand=5.0, summed=2.0, launch=3.0)
    cfg = {**builds.TILES["128x128"], "splits": 1}
    t = {w: model.predict(c, "128x128", cfg, 500, 1001, 8000, 1, 2, 132, w)
         for w in (4, access.ODD_PAIRS, 2, access.ODD_ROWS, 1)}
    assert t[4] < t[access.ODD_PAIRS] < t[2] < t[access.ODD_ROWS] < t[1]
    ranked = {n: p for n, _, p in model.ranked(c, {"128x128": 2}, 500, 1001, 8000, 1, 132)}
    assert ranked["128x128"] == pytest.approx(model.predict(c, "128x128", cfg, 500, 1001, 8000, 1, 2, 132,
                                                            access.ODD_ROWS, access.out_width(1001)))
    # N = 2 mod 4: B's rows of twice an odd length, read by rows in the 128 x 128 build
    ranked = {n: p for n, _, p in model.ranked(c, {"128x128": 2}, 500, 1002, 8000, 1, 132)}
    assert ranked["128x128"] == pytest.approx(model.predict(c, "128x128", cfg, 500, 1002, 8000, 1, 2, 132,
                                                            access.ODD_PAIRS, access.out_width(1002)))
    assert ranked["128x128"] < model.predict(c, "128x128", cfg, 500, 1002, 8000, 1, 2, 132, 2, access.out_width(1002))
    # TN with A's rows of odd length (M odd) and B's aligned: A read 4 bytes at a time, charged in full
    tn = {n: p for n, _, p in model.ranked(c, {"128x128": 2}, 501, 500, 8000, 1, 132, "TN")}
    assert tn["128x128"] == pytest.approx(model.predict(c, "128x128", cfg, 501, 500, 8000, 1, 2, 132, 1, 4))
    # TN with A's rows of twice an odd length (M = 2 mod 4): A read 8 bytes at a time, charged in full
    tn = {n: p for n, _, p in model.ranked(c, {"128x128": 2}, 502, 1000, 8000, 1, 132, "TN")}
    assert tn["128x128"] == pytest.approx(model.predict(c, "128x128", cfg, 502, 1000, 8000, 1, 2, 132, 2, 4))


def test_family_transposes_rule():
    t = access.family_transposes
    assert t("NT", True, 2048, 300, 2000, 1) and access.kernel_layout("NT", 2048, 300, 2000) == "NN"
    assert not t("NT", True, 2047, 300, 2000, 1) and access.kernel_layout("NT", 2047, 300, 2000) == "NT"
    # products below TRANSPOSE_MIN_MACS multiply-adds read B as it is
    assert not t("NT", True, 2048, 300, 1000, 1) and access.kernel_layout("NT", 2048, 300, 1000) == "NT"
    assert t("NT", True, 2048, 512, 1024, 1) and not t("NT", True, 2048, 512, 1023, 1)  # 2^30 exactly
    assert not t("NT", False, 4096, 300, 1000, 1)  # the register pipeline reads B along k itself
    assert not t("NT", True, 4096, 300, 1000, 2)  # batches: no copies
    assert not t("NT", True, 4096, 300, 0, 1)
    assert not any(t(lay, True, 4096, 300, 1000, 1) for lay in ("NN", "TN"))  # B read along its rows
    assert not t("NT", True, 4096, 2**15, 2**14, 1)  # a copy over COPY_LIMIT floats
    # TT by the same rule, as TN
    assert t("TT", True, 2048, 300, 2000, 1) and access.kernel_layout("TT", 2048, 300, 2000) == "TN"
    assert not t("TT", True, 2047, 300, 2000, 1) and access.kernel_layout("TT", 2047, 300, 2000) == "TT"
    assert not t("TT", True, 2048, 300, 1000, 1) and access.kernel_layout("TT", 2048, 300, 1000) == "TT"
    assert not t("TT", True, 4096, 300, 1000, 2)
    # the layout a config's kernel is built for: the cp.async FFMA configs only
    F = registry.FAMILY
    lay = lambda cfg, M: access.family_layout(F.params(cfg), "NT", M, 300, 2000)
    assert lay({}, 2048) == "NN" and lay({}, 2047) == "NT"
    assert lay({"mma": 3}, 4096) == "NT" and lay({"mma": 1}, 4096) == "NT"  # tensor cores read B as it is
    assert lay({"stages": 0}, 4096) == "NT"  # the register pipeline
    assert access.family_layout(F.params({}), "TN", 4096, 300, 1000) == "TN"
    assert access.family_layout(F.params({}), "TT", 4096, 300, 1000) == "TN"
    assert access.family_layout(F.params({"mma": 3}), "TT", 4096, 300, 1000) == "TT"


def test_family_transposes_a_rule():
    """On the H200, NN runs as TN on A transposed by B's rule with N multiply-adds per element of A; no other layout
    does, and on another GPU (or none named) NN runs as NN."""
    h200 = "NVIDIA H200"
    t = lambda *a: access.family_transposes_a(*a, h200)
    assert t("NN", True, 300, 2048, 2000, 1) and access.kernel_layout("NN", 300, 2048, 2000, 1, h200) == "TN"
    assert not t("NN", True, 300, 2047, 2000, 1) and access.kernel_layout("NN", 300, 2047, 2000, 1, h200) == "NN"
    assert not t("NN", True, 300, 2048, 1000, 1) and access.kernel_layout("NN", 300, 2048, 1000, 1, h200) == "NN"
    assert t("NN", True, 512, 2048, 1024, 1) and not t("NN", True, 512, 2048, 1023, 1)  # 2^30 exactly
    assert not t("NN", False, 300, 4096, 1000, 1) and not t("NN", True, 300, 4096, 1000, 2)
    assert not t("NN", True, 300, 4096, 0, 1) and not t("NN", True, 2**15, 4096, 2**14, 1)  # over COPY_LIMIT
    assert not any(t(lay, True, 4096, 4096, 1000, 1) for lay in ("NT", "TN", "TT"))
    assert access.kernel_layout("NT", 4096, 4096, 1000, 1, h200) == "NN"  # B transposed, A as it is
    assert access.kernel_layout("NT", 300, 4096, 1000, 1, h200) == "NT"  # neither: A's rule is NN's alone
    for other in (None, "NVIDIA H100 80GB HBM3"):
        assert not access.family_transposes_a("NN", True, 300, 4096, 2000, 1, other)
        assert access.kernel_layout("NN", 300, 4096, 2000, 1, other) == "NN"
    F = registry.FAMILY
    assert access.family_layout(F.params({}), "NN", 300, 2048, 2000, 1, h200) == "TN"
    assert access.family_layout(F.params({}), "NN", 300, 2048, 2000) == "NN"
    assert access.family_layout(F.params({"mma": 3}), "NN", 300, 2048, 2000, 1, h200) == "NN"
    assert access.family_layout(F.params({"stages": 0}), "NN", 300, 2048, 2000, 1, h200) == "NN"


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_family_copies_rule(layout):
    def copies(M, N, K, widths=(1, 1), cp_async=True, count=1, odd=True, odd_from=None):
        return access.family_copies(layout, cp_async, widths, M, N, K, count, odd, odd_from)

    along = (layout[0] == "T", layout[1] == "N")  # the operands copied along their rows
    big = (2048, 2048, 1000)
    assert copies(*big) == along == copies(*big, widths=(2, 2))
    assert copies(*big, widths=(4, 4)) == (False, False)
    assert copies(*big, cp_async=False) == (False, False)
    assert copies(*big, count=2) == (False, False)
    assert copies(2048, 2048, 0) == (False, False)
    # B (K x N) pays from M >= 2048, or M >= 640 when its rows are narrow, or M >= 512 when they are
    # not even 8-byte aligned; A (K x M) likewise with N
    assert copies(2047, 2047, 1000, widths=(2, 2)) == (False, False)
    assert copies(512, 512, 1000) == along and copies(511, 511, 1000) == (False, False)
    assert copies(1023, 1023, 1000, odd_from=1024) == (False, False)  # the calibrations' first threshold
    assert copies(1024, 1024, 1000, odd=False) == (False, False)  # the rule before the odd threshold
    assert copies(1024, 1024, 1000, widths=(2, 2)) == (False, False)
    assert copies(1024, 1024, 1000, widths=(1, 2)) == (along[0], False)
    assert copies(640, 384, 1000, widths=(2, 2)) == (along[0] and False, along[1])
    assert copies(384, 640, 1000, widths=(2, 2)) == (along[0], along[1] and False)
    assert copies(639, 384, 1000, widths=(2, 2))[1] is False and copies(640, 385, 1000, widths=(2, 2))[1] is False
    with pytest.raises(ValueError, match="access widths"):
        copies(*big, widths=(True, False))  # the aligned booleans of the rule before widths
    # more multiply-adds per element copied never turns a copy off
    for w in (1, 2):
        for M in (100, 640, 1000, 1023, 1024, 2047, 2048, 5000):
            assert copies(M + 1, 300, 700, widths=(w, w))[1] >= copies(M, 300, 700, widths=(w, w))[1]


def test_default_kernel_is_the_family():
    p = check(f32(3, 4), f32(4, 5))
    assert p.kernel == "gemm" == tilegemm.kernels()[0]


# --------------------------------------------------------------------------- matmul semantics, gemm


def test_batch_and_broadcast_shapes():
    p = check(f32(2, 1, 3, 4), f32(5, 4, 6))
    assert p.batch == (2, 5) and p.shape == (2, 5, 3, 6) and (p.M, p.N, p.K) == (3, 6, 4)
    assert p.b.bstrides == (0, 24)  # b is broadcast along the first batch dimension
    assert p.a.bstrides == (12, 0)


def test_one_d_promotion():
    assert check(f32(4), f32(4, 5)).shape == (5,)
    assert check(f32(3, 4), f32(4)).shape == (3,)
    assert check(f32(4), f32(4)).shape == ()
    assert check(f32(7, 3, 4), f32(4)).shape == (7, 3)


def test_batch_dimensions_that_do_not_broadcast():
    raises(ValueError, "the batch dimensions of a (2,) and b (3,) do not broadcast (NumPy rules: "
           "equal, or 1, aligned from the right)", f32(2, 3, 4), f32(3, 4, 5))


def test_out_shape_with_batches():
    raises(ValueError, "out has shape (3, 5), but the result has shape (2, 3, 5)",
           f32(2, 3, 4), f32(4, 5), out=f32(3, 5))


def gcheck(a, b, c=None, out=None, **kw):
    ops = [describe(x, n) if x is not None else None for x, n in ((a, "a"), (b, "b"), (c, "c"), (out, "out"))]
    return planning.plan(ops[0], ops[1], ops[3], kw.pop("kernel", None), kw.pop("config", None), ops[2], **kw)


def test_gemm_needs_c_for_beta():
    with pytest.raises(ValueError, match=re.escape("beta = 0.5 scales c, but no c was given; pass c, or beta=0")):
        gcheck(f32(3, 4), f32(4, 5), beta=0.5)


def test_gemm_c_broadcasts():
    a, b = FakeCAI((3, 4)), FakeCAI((4, 5), ptr=0x7F1000000000)
    p = gcheck(a, b, FakeCAI((5,), ptr=0x7F2000000000), beta=1.0)  # a bias row: row stride 0
    assert p.c.layout == (0, 1) and not p.out_colmajor
    p = gcheck(a, b, FakeCAI((3, 1), ptr=0x7F2000000000), beta=1.0)  # a bias column
    assert p.c.layout == (1, 0) and p.out_colmajor  # read along columns: the result is column-major
    with pytest.raises(ValueError, match=re.escape("c has shape (4,), which does not broadcast to the result's shape (3, 5)")):
        gcheck(f32(3, 4), f32(4, 5), f32(4), beta=1.0)


def test_gemm_c_is_not_read_when_beta_is_zero_but_still_checked():
    p = gcheck(f32(3, 4), f32(4, 5), f32(3, 5))
    assert p.c is None  # not read: NaN in c cannot leak through beta = 0
    p = gcheck(FakeCAI((3, 4)), FakeCAI((4, 5), ptr=0x7F1000000000), FakeCAI((3, 5), strides=(40, 8), ptr=0x7F2000000000))
    assert p.c is None and not p.out_colmajor  # its layout does not matter: it is not read
    with pytest.raises(TypeError, match=re.escape("c has dtype float64, but tilegemm computes in float32")):
        gcheck(f32(3, 4), f32(4, 5), f32(3, 5).astype(np.float64))
    with pytest.raises(ValueError, match=re.escape("c has shape (99, 99), which does not broadcast to the "
                                                   "result's shape (3, 5)")):
        gcheck(f32(3, 4), f32(4, 5), f32(99, 99))
    with pytest.raises(ValueError, match=re.escape("a is on the host but c is on a GPU; pass all arrays")):
        gcheck(f32(3, 4), f32(4, 5), FakeCAI((3, 5)))


def test_gemm_alpha_beta_types():
    with pytest.raises(TypeError, match=re.escape("alpha must be a real number, got str '2'")):
        gcheck(f32(3, 4), f32(4, 5), alpha="2")
    with pytest.raises(TypeError, match=re.escape("beta must be a real number, got complex 1j")):
        gcheck(f32(3, 4), f32(4, 5), f32(3, 5), beta=1j)


def test_a_nonzero_scale_float32_cannot_hold_is_refused():
    assert gcheck(f32(3, 4), f32(4, 5), alpha=2.0**-149).alpha == 2.0**-149  # float32's smallest subnormal
    assert gcheck(f32(3, 4), f32(4, 5), alpha=-0.0).alpha == 0.0  # zero is zero
    for name, tiny in (("alpha", 2.0**-150), ("alpha", -1e-50), ("beta", 1e-46)):
        with pytest.raises(ValueError, match=f"^{name} = {re.escape(repr(tiny))} rounds to 0 in float32"):
            gcheck(f32(3, 4), f32(4, 5), f32(3, 5), **{name: tiny})


def test_gemm_out_may_be_c_but_not_overlap_it():
    c = FakeCAI((3, 5), ptr=0x7F2000000000)
    a, b = FakeCAI((3, 4)), FakeCAI((4, 5), ptr=0x7F1000000000)
    gcheck(a, b, c, out=c, beta=1.0)  # in place: fine
    shifted = FakeCAI((3, 5), ptr=0x7F2000000000 + 4)
    with pytest.raises(ValueError, match="out overlaps c without being the same array"):
        gcheck(a, b, c, out=shifted, beta=1.0)


def test_gemm_c_and_out_layouts_must_agree():
    a, b = FakeCAI((3, 4)), FakeCAI((4, 5), ptr=0x7F1000000000)
    c_col = FakeCAI((3, 5), strides=(4, 12), ptr=0x7F2000000000)  # column-major
    out_row = FakeCAI((3, 5), ptr=0x7F3000000000)
    with pytest.raises(ValueError, match=re.escape("c's matrices are column-major but out's are row-major")):
        gcheck(a, b, c_col, out=out_row, beta=1.0)
    assert gcheck(a, b, c_col, beta=1.0).out_colmajor  # with no out, the result follows c


def test_alpha_beta_need_the_family():
    with pytest.raises(ValueError, match="is a ladder rung, which computes a @ b only"):
        gcheck(f32(3, 4), f32(4, 5), alpha=2.0, kernel="05_double_buffered")


def test_out_broadcast_batch_is_refused():
    a, b = FakeCAI((2, 3, 4)), FakeCAI((4, 5), ptr=0x7F1000000000)
    out = FakeCAI((2, 3, 5), strides=(0, 20, 4), ptr=0x7F3000000000)
    with pytest.raises(ValueError, match="out has a zero stride in a batch dimension"):
        gcheck(a, b, out=out)


def test_family_config_is_checked_before_launch():
    with pytest.raises(tilegemm.ConfigError, match="bm % tm == 0"):
        check_cfg = dict(bm=100)
        gcheck(f32(3, 4), f32(4, 5), config=check_cfg)
    with pytest.raises(tilegemm.ConfigError, match="gemm has no parameter 'rm'"):
        gcheck(f32(3, 4), f32(4, 5), config={"rm": 4})


def test_batch_groups_merge_and_loop():
    # contiguous batches merge into one run the kernel walks
    assert planning.groups((2, 3), [(12, 4), (0, 0), (6, 2)]) == (6, (4, 0, 2), [(0, 0, 0)])
    # a broadcast that breaks the merge: the host loops over the outer dimension
    n, s, offs = planning.groups((2, 3), [(3 * 7, 7), (0, 5), (30, 10)])
    assert n == 3 and s == (7, 5, 10) and offs == [(0, 0, 0), (21, 0, 30)]
    assert planning.groups((), [(), ()]) == (1, (0, 0), [(0, 0)])
