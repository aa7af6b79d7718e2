"""GPU: the call path's own behaviour: autotune on a miss, the repeat-call memo's bound and its
clearing, numpy inputs through the whole path, and calls from threads without a CUDA context."""

import json
import threading

import numpy as np
import pytest

import tilegemm
from tilegemm import builds, entries, fastpath, gpu, selection

pytestmark = pytest.mark.gpu

TOL = 1e-5


def _err(cp, out, a, b):
    ref = cp.asarray(a, dtype=np.float64) @ cp.asarray(b, dtype=np.float64)
    return float(cp.linalg.norm(cp.asarray(out, dtype=np.float64) - ref) / cp.linalg.norm(ref))


def test_autotune_on_a_miss_returns_a_correct_result_and_writes_the_cache(cp, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGEMM_TUNE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEGEMM_AUTOTUNE", "1")
    selection.reset()
    tilegemm.clear_caches()
    try:
        dev = gpu.current_device()
        M, N, K = 777, 1111, 999  # no shipped table has this bucket (odd sizes: the edge bucket)
        assert selection.select(dev, "NN", M, N, K, 1)[1] in ("model", "heuristic")
        selection.forget()
        rng = cp.random.default_rng()
        a = rng.standard_normal((M, K), dtype=np.float32)
        b = rng.standard_normal((K, N), dtype=np.float32)
        out = tilegemm.matmul(a, b)
        assert out.shape == (M, N) and _err(cp, out, a, b) < TOL
        files = list(tmp_path.glob("*.json"))
        assert len(files) == 1
        entry = json.loads(files[0].read_text())["entries"][entries.entry_key("NN", entries.bucket(M, N, K, 1))]
        assert entry["shape"] == [M, N, K, 1] and entry["tflops"] > 0 and entry["ran_as"] == "NN"
        assert selection.select(dev, "NN", M, N, K, 1) == (entry["config"], "tuned")
        again = tilegemm.matmul(a, b)  # a hit: nothing tuned again, the same result
        assert bool(cp.array_equal(again, out)) and len(list(tmp_path.glob("*.json"))) == 1
    finally:
        selection.reset()
        tilegemm.clear_caches()


def test_the_memo_is_bounded_and_cleared(cp, monkeypatch):
    tilegemm.clear_caches()
    monkeypatch.setattr(fastpath, "LIMIT", 8)
    rng = cp.random.default_rng()
    for n in range(1, 21):
        a = rng.standard_normal((n, 16), dtype=np.float32)
        b = rng.standard_normal((16, 8), dtype=np.float32)
        assert _err(cp, tilegemm.matmul(a, b), a, b) < TOL
    assert fastpath.size() == 8
    tilegemm.clear_caches()
    assert fastpath.size() == 0
    assert _err(cp, tilegemm.matmul(a, b), a, b) < TOL and fastpath.size() == 1


def test_numpy_in_numpy_out_with_an_out_array(cp):
    a = np.random.default_rng().standard_normal((3, 40, 30)).astype(np.float32)
    b = np.random.default_rng().standard_normal((30, 50)).astype(np.float32)
    out = np.full((3, 40, 50), np.nan, np.float32)
    assert tilegemm.matmul(a, b, out=out) is out
    assert np.abs(out - a.astype(np.float64) @ b).max() < 1e-4


def test_a_torch_operand_puts_the_call_on_torch_s_stream(cp):
    """A CuPy a with a torch b (or out): the launches go to torch's current stream, in order with
    the torch work that made b and that reads out (repeat calls too)."""
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    a = cp.random.default_rng().standard_normal((300, 2000), dtype=np.float32)
    with torch.cuda.stream(s):
        for _ in range(3):
            b = torch.randn(2000, 500, device="cuda") * 2.0  # queued on s, not finished when matmul is called
            out = torch.full((300, 500), float("nan"), device="cuda")
            tilegemm.matmul(a, b, out=out)
            res = out * 1.0  # torch reads out on s
            s.synchronize()
            ref = torch.as_tensor(a, device="cuda").double() @ b.double()
            assert float(torch.linalg.norm(res.double() - ref) / torch.linalg.norm(ref)) < TOL


def test_a_remembered_call_still_rejects_what_the_full_path_rejects(cp):
    rng = cp.random.default_rng()
    a = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal((32, 48), dtype=np.float32)
    cfg = {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4, "ln": 8, "minb": 4, "swizzle": 8, "stages": 0}
    for _ in range(2):  # the second call is a memo hit
        assert _err(cp, tilegemm.matmul(a, b, config=cfg), a, b) < TOL
        assert _err(cp, tilegemm.matmul(a, b), a, b) < TOL
    with pytest.raises(tilegemm.ConfigError, match="must be an integer"):
        tilegemm.matmul(a, b, config={**cfg, "bm": 64.0})
    with pytest.raises(tilegemm.ConfigError, match="config must be a dict"):
        tilegemm.matmul(a, b, config=list(cfg.items()))
    with pytest.raises(tilegemm.ConfigError, match="config must be a dict"):
        tilegemm.matmul(a, b, config=0)
    with pytest.raises(TypeError, match="pdl must be True or False"):
        tilegemm.matmul(a, b, pdl=1)


def test_a_remembered_gemm_with_c_alpha_and_beta(cp):
    """gemm with c, alpha and beta takes the memo on repeat calls (new pointers, new values of c),
    keyed by alpha and beta; out=c stays an in-place update, and an out that overlaps c without
    being it is still refused on a repeat call."""
    torch = pytest.importorskip("torch")
    rng = cp.random.default_rng()
    M, N, K = 301, 203, 157  # odd: narrow rows, every edge
    tilegemm.clear_caches()

    def ref(a, b, c, alpha, beta):
        a64, b64, c64 = (cp.asarray(x, dtype=np.float64) for x in (a, b, c))
        return alpha * (a64 @ b64) + beta * c64

    def err(out, want):
        return float(cp.linalg.norm(cp.asarray(out, dtype=np.float64) - want) / cp.linalg.norm(want))

    for alpha, beta in ((1.0, 1.0), (0.5, -2.0), (2, 0.0)):
        for rep in range(3):  # the first call plans; the next two are hits with new arrays
            a = rng.standard_normal((M, K), dtype=np.float32)
            b = rng.standard_normal((K, N), dtype=np.float32)
            c = rng.standard_normal((M, N), dtype=np.float32)
            c_before = c.copy()
            out = tilegemm.gemm(a, b, c, alpha=alpha, beta=beta)
            assert err(out, ref(a, b, c, alpha, beta)) < TOL and bool(cp.array_equal(c, c_before))
            bias = rng.standard_normal((N,), dtype=np.float32)  # a broadcast row
            out = tilegemm.gemm(a, b, bias, alpha=alpha, beta=beta)
            assert err(out, ref(a, b, cp.broadcast_to(bias, (M, N)), alpha, beta)) < TOL
            cf = cp.asfortranarray(c)  # the new result follows c's layout
            out = tilegemm.gemm(a, b, cf, alpha=alpha, beta=beta)
            assert err(out, ref(a, b, c, alpha, beta)) < TOL and out.flags.f_contiguous == (beta != 0)
            tilegemm.gemm(a, b, c, alpha=alpha, beta=beta, out=c)  # in place
            assert err(c, ref(a, b, c_before, alpha, beta)) < TOL
            tc = torch.as_tensor(c_before, device="cuda")
            res = tilegemm.gemm(torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda"), tc,
                                alpha=alpha, beta=beta)
            assert err(cp.asarray(res), ref(a, b, c_before, alpha, beta)) < TOL
    read_c = [e for e in fastpath.entries() if e.c_span is not None]
    assert len(read_c) >= 8  # c read: per (alpha, beta) with beta != 0, four layouts or kinds of c
    # out overlapping c without being it: refused, also once a call of the same metadata (and
    # 16-byte alignment: rows of 204 floats) is remembered
    N4 = 204
    big = rng.standard_normal((M + 4, N4), dtype=np.float32)
    b4 = rng.standard_normal((K, N4), dtype=np.float32)
    before = fastpath.size()
    tilegemm.gemm(a, b4, big[:M], beta=1.0, out=rng.standard_normal((M, N4), dtype=np.float32)[:M])
    assert fastpath.size() == before + 1
    for _ in range(2):
        with pytest.raises(ValueError, match="out overlaps c without being the same array"):
            tilegemm.gemm(a, b4, big[:M], beta=1.0, out=big[4:])
    # alpha = -0.0 and 0.0 are remembered apart (the signs of their zeros may differ)
    for first, then in ((-0.0, 0.0), (0.0, -0.0)):
        tilegemm.gemm(a, b4, alpha=first)
        hit = tilegemm.gemm(a, b4, alpha=then)
        fastpath.clear()
        full = tilegemm.gemm(a, b4, alpha=then)
        assert bool(cp.array_equal(cp.signbit(hit), cp.signbit(full)))
    # calls whose alpha changes every time: a bounded number of them is remembered
    before = fastpath.size()
    for i in range(3 * fastpath.SCALAR_VARIANTS):
        out = tilegemm.gemm(a, b4, alpha=1.0 + i / 64)
        assert err(out, ref(a, b4, cp.zeros((M, N4), np.float32), 1.0 + i / 64, 0.0)) < TOL
    assert fastpath.size() <= before + fastpath.SCALAR_VARIANTS


@pytest.mark.parametrize("kwargs", [{}, {"config": {**builds.TILES["64x64f"], "splits": 3, "sk": 2}},
                                    {"precision": "tf32x3"}], ids=["default", "summed", "tf32x3"])
def test_calls_from_threads_without_a_current_context(cp, kwargs):
    """A thread that has made no CUDA runtime call has no current context (torch's autograd threads
    are such threads); a call from one, planned there or remembered, runs as from the main thread: the
    FFMA family's launches, and on Hopper the tensor-core path's, whose tensor maps are encoded per
    pointer in the thread.  Each thread makes no CUDA call before tilegemm's."""
    if "precision" in kwargs and gpu.device_properties().major < 9:
        pytest.skip("the tf32x3 path with tensor maps is Hopper's")
    M, N, K = (256, 128, 1024) if "precision" in kwargs else (131, 77, 1003)  # TMA: 16-byte aligned rows
    rng = cp.random.default_rng()
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    outs = [cp.full((M, N), np.nan, dtype=np.float32) for _ in range(2)]
    cp.cuda.Device().synchronize()
    tilegemm.clear_caches()
    errors = []

    def call(out):
        try:
            tilegemm.matmul(a, b, out=out, **kwargs)
        except Exception as e:  # noqa: BLE001 (reported by the test's thread)
            errors.append(e)

    for out in outs:  # the first plans the call in its thread, the second finds it remembered
        t = threading.Thread(target=call, args=(out,))
        t.start()
        t.join()
    assert not errors, errors
    cp.cuda.Device().synchronize()
    for out in outs:
        assert _err(cp, out, a, b) < TOL
