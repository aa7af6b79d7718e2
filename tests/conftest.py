import pytest


def _have_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


HAVE_GPU = _have_gpu()


def pytest_collection_modifyitems(config, items):
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run tests/gpu through the device tool)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A private, empty kernel cache (disk and in-process memo)."""
    from tilegemm import compiler

    monkeypatch.setenv("TILEGEMM_CACHE_DIR", str(tmp_path / "cache"))
    compiler.clear_memory_cache()
    yield tmp_path / "cache"
    compiler.clear_memory_cache()
