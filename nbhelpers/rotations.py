"""Orthogonal rotations applied before quantization: Hadamard matrices and their random-sign
versions, used blockwise along K.

A rotation R (n x n, orthogonal: R R^T = I) applied to each block of n consecutive elements along
the reduction dimension leaves a GEMM unchanged in exact arithmetic: (X R)(R^T W) = X W when X's
columns and W's rows are rotated by the same block-diagonal R. What it changes is what the
quantizer sees: a Hadamard rotation spreads one large value of a block over all n of its outputs
(each output is +-x_i / sqrt(n) summed over the block), so a block's amax shrinks toward its root
mean square. NVIDIA's NVFP4 training recipe applies a random Hadamard transform of size 16 to the
inputs of the weight-gradient GEMM before quantizing them.

:func:`hadamard` is Sylvester's construction, normalised to be orthogonal; :func:`random_hadamard`
multiplies its rows by random signs (the randomisation that keeps one fixed pattern of the data
from lining up with the matrix); :func:`rotate_blocks` applies R to each block of n along an axis.
"""

from __future__ import annotations

import numpy as np

from .validation import positive_int, real_float64

__all__ = ["hadamard", "random_hadamard", "rotate_blocks"]


def hadamard(n: int) -> np.ndarray:
    """The n x n Sylvester Hadamard matrix divided by sqrt(n): orthogonal, entries +-1/sqrt(n).
    n a power of two."""
    n = positive_int("n (the size of the Hadamard matrix)", n)
    if n & (n - 1):
        raise ValueError(f"n must be a power of two (Sylvester's construction), got {n}")
    H = np.ones((1, 1))
    while H.shape[0] < n:
        H = np.block([[H, H], [H, -H]])
    return H / np.sqrt(n)


def random_hadamard(n: int, rng: np.random.Generator) -> np.ndarray:
    """diag(s) H for random signs s (one per row) and H = :func:`hadamard`(n): orthogonal."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    signs = rng.choice([-1.0, 1.0], size=n)
    return signs[:, None] * hadamard(n)


def rotate_blocks(x, R: np.ndarray, axis: int = 1) -> np.ndarray:
    """x (M, K) with every block of n = R.shape[0] consecutive elements along ``axis`` multiplied
    by R: along axis 1, row block b becomes x[:, b] @ R; along axis 0, column block b becomes
    R.T @ x[b, :] (so that rotate_blocks(X, R, 1) @ rotate_blocks(W, R, 0) == X @ W up to
    rounding). The length along ``axis`` must be a multiple of n."""
    x = real_float64(x)
    R = real_float64(R)
    if x.ndim != 2:
        raise ValueError(f"x must be a 2-D array (M, K), got shape {x.shape}")
    if R.ndim != 2 or R.shape[0] != R.shape[1]:
        raise ValueError(f"R must be a square matrix, got shape {R.shape}")
    if axis not in (0, 1):
        raise ValueError(f"axis must be 0 or 1, got {axis!r}")
    n = R.shape[0]
    length = x.shape[axis]
    if length % n:
        raise ValueError(f"x has {length} elements along axis {axis}, not a multiple of the rotation's size {n}")
    if axis == 1:
        M, K = x.shape
        return (x.reshape(M, K // n, n) @ R).reshape(M, K)
    K, N = x.shape
    return np.einsum("ji,bjn->bin", R, x.reshape(K // n, n, N)).reshape(K, N)
