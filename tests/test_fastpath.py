"""The repeat-call memo's key (CPU): the scalars it tells apart and those it does not."""

from tilegemm import fastpath

META = (("cupy", (64, 64), (256, 4), "f", 0), 4096)


def key(alpha, beta):
    return fastpath._key(META, META, META, fastpath._NO_OUT, alpha, beta, "gemm", (), True, "fp32")


def test_alpha_zero_keeps_its_sign():
    assert key(0.0, 0.0) != key(-0.0, 0.0)  # -0.0 * a @ b gives other zeros than 0.0 * a @ b
    assert key(0.0, 0.0) == key(0, 0.0)


def test_equal_scalars_share_a_key_whatever_their_type():
    assert key(1.0, 0.0) == key(1, 0)
    assert key(2.5, 1.0) == key(2.5, 1)
    assert key(-1.0, 0.0) != key(1.0, 0.0)


def test_beta_zero_of_either_sign_is_one_key():
    assert key(1.0, 0.0) == key(1.0, -0.0)  # a zero beta reads no c


def test_metadata_and_scalars_are_apart():
    n = fastpath.SCALARS
    assert key(1.0, 0.0)[:-n] == key(3.0, 2.0)[:-n]
    assert key(1.0, 0.0)[-n:] != key(3.0, 2.0)[-n:]
