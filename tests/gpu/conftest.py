import numpy as np
import pytest


@pytest.fixture(scope="session")
def cp():
    return pytest.importorskip("cupy")


def rel_err(cp, out, a, b) -> float:
    """||out - ref|| / ||ref|| with ref = a @ b in float64 (NaN anywhere gives inf)."""
    ref = cp.asarray(a, dtype=np.float64) @ cp.asarray(b, dtype=np.float64)
    diff = float(cp.linalg.norm(cp.asarray(out, dtype=np.float64) - ref))
    den = float(cp.linalg.norm(ref))
    if diff != diff:
        return float("inf")
    return diff / den if den else diff
