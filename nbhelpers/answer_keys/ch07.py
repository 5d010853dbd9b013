"""Chapter 07 exercises: fp8 accumulation and block formats. Listed in ``EXERCISES`` for
:mod:`nbhelpers.answer_keys`.

- ``mx_shared_exponent``: the OCP MX v1.0 scale exponent of one block; its reference is
  :func:`nbhelpers.scaling.e8m0_exponents` of the block's amax (tested in tests/test_scaling.py),
  compared exactly (an integer).
- ``blockwise_scaled_gemm``: scales that vary along K, each K-block's partial product scaled and
  promoted into an fp32 accumulator; its reference is
  :func:`nbhelpers.scaled_gemm.blockwise_scaled_mm` (tested against a float64 GEMM of the
  dequantized operands in tests/test_scaled_gemm.py), compared bit for bit.

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import numpy as np

from ..exercise_types import Case, Exercise
from ..formats import get_format
from ..recipes import Recipe
from ..rounding import round_to
from ..scaled_gemm import blockwise_scaled_mm
from ..scaling import e8m0_exponents

#: The element formats of the MX exercise (the OCP MX v1.0 element types).
MX_ELEMENTS = ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")

# ------------------------------------------------------------------ 1. the MX shared exponent


def mx_shared_exponent_ref(block: np.ndarray, element: str) -> int:
    """The e8m0 scale exponent of a block by the OCP MX v1.0 rule (floor, -127 at the bottom)."""
    amax = float(np.max(np.abs(np.asarray(block, dtype=np.float64))))
    return int(e8m0_exponents(amax, element))


def _near_powers_of_two(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    """Values at, just below and just above powers of two in [2**lo, 2**hi], both signs."""
    k = rng.integers(lo, hi, size=n).astype(float)
    p = np.exp2(k)
    kind = rng.integers(0, 4, size=n)
    v = np.where(
        kind == 0,
        p,
        np.where(
            kind == 1, np.nextafter(p, 0), np.where(kind == 2, np.nextafter(p, np.inf), p * rng.uniform(1, 2, size=n))
        ),
    )
    return rng.choice([-1.0, 1.0], size=n) * v


def _mx_cases(rng: np.random.Generator) -> list[Case]:
    below8 = np.nextafter(8.0, 0)
    cases = [
        Case((np.array([7.0, -1.0, 0.5]), "e2m1fn"), label="MXFP4, amax 7: floor(log2 7) - 2 = 0"),
        Case((np.array([448.0, 1.0]), "e4m3fn"), label="MXFP8, amax 448: 8 - 8 = 0"),
        Case((np.array([below8, 1.0]), "e4m3fn"), label="amax just below 8: floor(log2) is 2, not 3"),
        Case((np.array([0.0, -0.0, 0.0]), "e4m3fn"), label="all zeros: the smallest exponent, -127"),
        Case((np.array([2.0**-130, 0.0]), "e5m2"), label="below e8m0's range: raised to -127"),
        Case((np.array([1.0, -6.0, 3.0]), "e2m1fn"), label="the largest magnitude is negative"),
        Case((np.array([2.0**100 * 1.5]), "e5m2"), label="a large amax"),
        Case((np.array([1.9, 0.3]), "e2m3fn"), label="round(log2 1.9) would be 1, floor is 0"),
        Case((np.array([28.0, -27.0]), "e3m2fn"), label="MXFP6 e3m2, amax 28 (its max)"),
        Case((np.array([5e-324, -5e-324]), "e2m1fn"), label="a float64 subnormal amax"),
    ]
    for _ in range(120):
        element = MX_ELEMENTS[int(rng.integers(len(MX_ELEMENTS)))]
        emax = get_format(element).emax
        n = int(rng.integers(1, 33))
        r = rng.random()
        if r < 0.45:  # amax at, or one float64 step from, a power of two
            block = _near_powers_of_two(rng, n, -20, 20) * rng.uniform(0, 1, size=n) ** 4
            block[int(rng.integers(n))] = _near_powers_of_two(rng, 1, -40, 40)[0]
        elif r < 0.6:  # amax near the bottom of e8m0: exponents around -127
            block = rng.standard_normal(n) * 2.0 ** float(rng.uniform(-140 + emax, -110 + emax))
        elif r < 0.7:  # amax near the top: exponents up to 127
            block = rng.standard_normal(n) * 2.0 ** float(rng.uniform(100, 127 + emax - 1))
            block = np.clip(block, -(2.0 ** (127 + emax + 1)) * 0.99, 2.0 ** (127 + emax + 1) * 0.99)
        elif r < 0.78:  # all zeros
            block = np.zeros(n) * rng.choice([-1.0, 1.0], size=n)
        else:  # ordinary data, magnitudes of any size
            block = rng.standard_normal(n) * 2.0 ** float(rng.uniform(-30, 30))
        if rng.random() < 0.3:  # the largest magnitude negative
            i = int(np.argmax(np.abs(block)))
            block[i] = -abs(block[i])
        cases.append(Case((block, element)))
    return cases


# ------------------------------------------------------------------ 2. the block-scaled GEMM


def blockwise_scaled_gemm_ref(
    qA: np.ndarray, qB: np.ndarray, sA: np.ndarray, sB: np.ndarray, block_k: int, block_n: int
) -> np.ndarray:
    """(M, N) float64: each K-block's exact partial product rounded to fp32, scaled
    fl32(fl32(p * sA) * sB), added into an fp32 accumulator in K order (the engine's)."""
    recipes = (Recipe("e4m3fn", (1, block_k)), Recipe("e4m3fn", (block_k, block_n)))
    return blockwise_scaled_mm(qA, qB, sA, sB, recipes=recipes)


def _e4m3(rng: np.random.Generator, shape, spread: float = 4.0) -> np.ndarray:
    """e4m3fn values of both signs over several binades, some zeros."""
    x = rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, size=shape)) * 16
    x[rng.random(shape) < 0.05] = 0.0
    return round_to(np.clip(x, -448, 448), "e4m3fn")


def _block_scales(rng: np.random.Generator, shape, spread: float) -> np.ndarray:
    """fp32 scales with full mantissas, varying by up to 2**spread from block to block."""
    return np.exp2(rng.uniform(-8 - spread, -8 + spread, size=shape)).astype(np.float32).astype(np.float64)


def _gemm_case(rng, M, K, N, bk, bn, spread=6.0, a=None, b=None) -> Case:
    nk, nn = -(-K // bk), -(-N // bn)
    qA = _e4m3(rng, (M, K)) if a is None else a
    qB = _e4m3(rng, (K, N)) if b is None else b
    return Case((qA, qB, _block_scales(rng, (M, nk), spread), _block_scales(rng, (nk, nn), spread), bk, bn))


def _gemm_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(707)  # the labelled cases are the same for every seed
    ones_a, ones_b = np.ones((2, 8)), np.ones((8, 3))
    cases = [
        Case(
            (ones_a, ones_b, np.array([[1.0, 2.0], [0.5, 4.0]]), np.array([[1.0], [0.25]]), 4, 3),
            label="two K-blocks whose scales differ: not one scale at the end",
        ),
        Case(_gemm_case(fixed, 3, 256, 4, 128, 128).args, label="DeepSeek-V3's shapes: 1x128 and 128x128 blocks"),
        Case(_gemm_case(fixed, 2, 100, 5, 32, 2).args, label="K = 100 with blocks of 32: a short last K-block"),
        Case(_gemm_case(fixed, 4, 20, 7, 64, 3).args, label="one K-block shorter than block_k; N = 7 in blocks of 3"),
        Case(_gemm_case(fixed, 3, 96, 4, 32, 1).args, label="one scale per column of B (block_n = 1)"),
        Case(_gemm_case(fixed, 1, 64, 1, 16, 8, spread=12.0).args, label="K-block scales drawn from 24 binades"),
        Case(
            (
                np.array([[448.0, 448.0, -448.0, -448.0]]),
                np.array([[448.0], [448.0], [448.0], [448.0]]),
                np.array([[1.0, 1.0]]),
                np.array([[1.0], [1.0]]),
                2,
                1,
            ),
            label="two K-blocks that cancel exactly: +0.0",
        ),
    ]
    for i in range(50):
        M, N = int(rng.integers(1, 6)), int(rng.integers(1, 9))
        bk = int(rng.choice([8, 16, 32, 48, 64, 128]))
        K = int(rng.integers(1, 5 * bk + 1)) if rng.random() < 0.8 else int(rng.integers(1, 400))
        bn = int(rng.choice([1, 2, 3, 4, 128]))
        spread = float(rng.choice([0.0, 2.0, 6.0, 12.0]))
        cases.append(_gemm_case(rng, M, K, N, bk, bn, spread))
    return cases


EXERCISES = [
    Exercise("ex07.mx_shared_exponent", "The MX shared exponent", 3, mx_shared_exponent_ref, _mx_cases),
    Exercise(
        "ex07.blockwise_scaled_gemm", "A block-scaled GEMM with promotion", 5, blockwise_scaled_gemm_ref, _gemm_cases
    ),
]
