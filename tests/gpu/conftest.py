import numpy as np
import pytest


@pytest.fixture(scope="session")
def cp():
    return pytest.importorskip("cupy")


def scale(xp, ref, a, b) -> float:
    """The error's yardstick: max(||ref||, 0.1 ||abs(a) @ abs(b)||).  Rounding error in a sum of K
    products is bounded by K eps (|a| @ |b|) (the standard GEMM bound), not by |a @ b|: where the
    products cancel (a 1 x 1 dot product that lands near 0) ||ref|| alone makes a correct FP32 result
    look wrong, so the scale never drops below a tenth of the bound's."""
    bound = xp.abs(xp.asarray(a, dtype=np.float64)) @ xp.abs(xp.asarray(b, dtype=np.float64))
    return max(float(xp.linalg.norm(ref)), 0.1 * float(xp.linalg.norm(bound)))


def rel_err(cp, out, a, b) -> float:
    """||out - ref|| / scale with ref = a @ b in float64 (NaN anywhere gives inf)."""
    ref = cp.asarray(a, dtype=np.float64) @ cp.asarray(b, dtype=np.float64)
    diff = float(cp.linalg.norm(cp.asarray(out, dtype=np.float64) - ref))
    den = scale(cp, ref, a, b)
    if diff != diff:
        return float("inf")
    return diff / den if den else diff
