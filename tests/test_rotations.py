"""nbhelpers.rotations: Hadamard matrices are orthogonal, a blockwise rotation of both GEMM operands
leaves the product unchanged, and a rotation spreads one large value over its block."""

import numpy as np
import pytest

from nbhelpers.rotations import hadamard, random_hadamard, rotate_blocks


@pytest.mark.parametrize("n", [1, 2, 4, 16, 64])
def test_hadamard_is_orthogonal_with_entries_of_one_size(n):
    H = hadamard(n)
    np.testing.assert_allclose(H @ H.T, np.eye(n), atol=1e-15)
    np.testing.assert_array_equal(np.abs(H), np.full((n, n), 1 / np.sqrt(n)))
    R = random_hadamard(n, np.random.default_rng(n))
    np.testing.assert_allclose(R @ R.T, np.eye(n), atol=1e-15)


def test_hadamard_of_order_2_by_hand():
    np.testing.assert_array_equal(hadamard(2) * np.sqrt(2), [[1.0, 1.0], [1.0, -1.0]])


def test_rotating_both_operands_keeps_the_product():
    rng = np.random.default_rng(0)
    X, W = rng.standard_normal((8, 64)), rng.standard_normal((64, 5))
    R = random_hadamard(16, rng)
    np.testing.assert_allclose(rotate_blocks(X, R, 1) @ rotate_blocks(W, R, 0), X @ W, rtol=0, atol=1e-12)
    # along axis 1 each block of 16 is rotated on its own: the first block by hand
    np.testing.assert_allclose(rotate_blocks(X, R, 1)[:, :16], X[:, :16] @ R, atol=1e-15)


def test_a_rotation_spreads_one_large_value_over_its_block():
    x = np.zeros((1, 16))
    x[0, 3] = 20.0
    y = rotate_blocks(x, hadamard(16), 1)
    np.testing.assert_allclose(np.abs(y), 20.0 / 4.0)  # 20 / sqrt(16) in every element
    assert np.sum(y**2) == pytest.approx(400.0)  # the energy is kept


def test_bad_input_says_what_is_accepted():
    with pytest.raises(ValueError, match="power of two"):
        hadamard(12)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        random_hadamard(4, 0)
    with pytest.raises(ValueError, match="not a multiple of the rotation's size 16"):
        rotate_blocks(np.zeros((2, 20)), hadamard(16))
    with pytest.raises(ValueError, match="axis must be 0 or 1"):
        rotate_blocks(np.zeros((2, 16)), hadamard(16), axis=2)
    with pytest.raises(ValueError, match="square"):
        rotate_blocks(np.zeros((2, 16)), np.zeros((16, 8)))
