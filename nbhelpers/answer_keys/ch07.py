"""Chapter 07 exercises: fp8 accumulation and block formats. Listed in ``EXERCISES`` for
:mod:`nbhelpers.answer_keys`.

- ``mx_shared_exponent``: the e8m0 scale exponent of one MX block by either rule, OCP MX v1.0's
  floor or the RCEIL of cuBLAS and torchao; its reference is
  :func:`nbhelpers.scaling.e8m0_exponents` of the block's amax (tested in tests/test_scaling.py),
  with one case the engine leaves to its caller: an amax whose fp32 quotient ``amax / max``
  underflows to 0 gets -127 (``log2(0)`` is -inf, raised to the smallest exponent). Compared
  exactly (an integer).
- ``blockwise_scaled_gemm``: the promotion of a GEMM whose scales vary along K. The student gets
  what the tensor cores hand over, the codes' partial product of each K-block rounded to fp32
  (``P``, ``(nk, M, N)``), with the scales, and applies the scales: the codes are gone, so
  dequantizing the operands is not open to them. Any evaluation in fp32 or better is right (the
  FMA ``acc += P_b * (sA * sB)`` of chapter 07, two multiplies in either order, a float64
  accumulator): the reference gives ``sum_b sA sB P_b`` in float64 and the error that fp32
  arithmetic may add, ``gamma_(nk + 2) * sum_b |sA sB P_b|`` (gamma_n = n u / (1 - n u),
  u = 2**-24, nk K-blocks), and the comparator accepts what lies within it. Scales applied in
  the wrong place miss by orders of magnitude more.
- ``largest_promotion_interval``: the largest promotion interval (group, 2 group, ..., K) whose
  error, measured on a stated data family with a narrow accumulator chapter 07 did not tabulate
  (``acc_bits`` 10 to 16 significant bits, ``group`` 16, 32 or 64 products fused per alignment,
  e4m3fn or e5m2 operands; chapter 07's 14 / 32 / e4m3fn among them), stays within a bound. The
  student builds the model from chapter 07's definition with its two numbers made parameters; the
  reference measures with the course's (:func:`nbhelpers.scaled_gemm.fp8_tensor_core_mm`). The
  statement fixes every rounding of the model, so two right implementations measure the same errors
  to the last bits of a float64 norm; the cases' bounds keep a margin of a factor
  ``PROMOTION_MARGIN`` (1%) from every measured error. Most bounds lie just past one error
  (``TIGHT_PROMOTION``), on either side: a model that misses a step (the running sum left uncut,
  the data drawn from another seed or in another order) or fixes a parameter at chapter 07's value
  measures errors off, and crosses them.
- ``two_level_scales``: NVFP4's scheme (an e4m3fn scale per block under one fp32 tensor scale) for
  elements and blocks beyond the formula chapter 07 wrote out for e2m1 (e2m3fn and e3m2fn elements;
  16 x 1, 16 x 16 and 1 x 32 blocks) as well as NVFP4's own: the tensor scale, the block scales and the
  bytes per parameter of a tensor. The statement gives the scheme's design in words (what each
  scale is for), not its formulas, so the constants of the chapter's NVFP4 formula (448 * 6, the
  block of 16, 4 bits) are the student's to derive for each element and block. The references
  :func:`nbhelpers.scaling.nvfp4_scales` and :func:`nbhelpers.scaling.storage_bits` (the NVFP4
  scales tested against torchao in tests/test_exercises_ch07.py). The scales are compared bit for
  bit, the bytes within a relative 1e-12 (a sum of three quotients is as right as one).

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..comparators import close_to, compare, float_array
from ..exercise_types import Case, Exercise
from ..formats import get_format
from ..metrics import relative_error
from ..recipes import PER_COLUMN, PER_ROW, Recipe
from ..report_text import describe
from ..rounding import round_to
from ..scaled_gemm import fp8_tensor_core_mm
from ..scaling import block_amax, e8m0_exponents, nvfp4_scales, quantize, storage_bits

#: The element formats of the MX exercise (the OCP MX v1.0 element types).
MX_ELEMENTS = ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")
#: The e8m0 rules of the MX exercise.
MX_RULES = ("floor", "rceil")

# ------------------------------------------------------------------ 1. the MX shared exponent


def mx_shared_exponent_ref(block: np.ndarray, element: str, rule: str) -> int:
    """The e8m0 scale exponent of a block by ``rule``: "floor" (OCP MX v1.0) or "rceil"
    (ceil(log2(fp32(amax / max_element))), exactly); at least -127, and -127 for a zero block."""
    amax = float(np.max(np.abs(np.asarray(block, dtype=np.float64))))
    return int(e8m0_exponents(amax, element, rule))


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


def _near_rceil_edges(rng: np.random.Generator, element: str) -> float:
    """An amax at, or a few float64 or float32 steps either side of, max_element * 2**k: where the
    quotient amax / max_element sits at a power of two before or after its rounding to fp32."""
    kind = int(rng.choice(5, p=[0.15, 0.3, 0.3, 0.125, 0.125]))
    k = int(rng.integers(-20, 21)) if kind != 2 else int(rng.choice([-1, 1])) * int(rng.integers(8, 101))
    base = get_format(element).max * 2.0**k  # exact: 2 to 4 significant bits
    j = int(rng.integers(1, 9))
    if kind == 0:
        return base
    if kind == 1:  # float64 steps above: fp32(amax / max) is still 2**k
        return base + j * float(np.spacing(base))
    if kind == 2:  # float32 steps above: the quotient is just above 2**k, a float32 log2 rounds to k
        return base * (1 + (j % 4 + 1) * 2.0**-23)
    if kind == 3:  # float64 steps below
        return base - j * float(np.spacing(base)) / 2
    return base * (1 - j * 2.0**-24)


def _mx_cases(rng: np.random.Generator) -> list[Case]:
    below8 = np.nextafter(8.0, 0)
    cases = [
        Case((np.array([7.0, -1.0, 0.5]), "e2m1fn", "floor"), label="MXFP4, amax 7: floor(log2 7) - 2 = 0"),
        Case((np.array([448.0, 1.0]), "e4m3fn", "floor"), label="MXFP8, amax 448: 8 - 8 = 0"),
        Case((np.array([below8, 1.0]), "e4m3fn", "floor"), label="amax just below 8: floor(log2) is 2, not 3"),
        Case((np.array([0.0, -0.0, 0.0]), "e4m3fn", "floor"), label="all zeros: the smallest exponent, -127"),
        Case((np.array([2.0**-130, 0.0]), "e5m2", "floor"), label="below e8m0's range: raised to -127"),
        Case((np.array([1.0, -6.0, 3.0]), "e2m1fn", "floor"), label="the largest magnitude is negative"),
        Case((np.array([2.0**100 * 1.5]), "e5m2", "floor"), label="a large amax"),
        Case((np.array([1.9, 0.3]), "e2m3fn", "floor"), label="round(log2 1.9) would be 1, floor is 0"),
        Case((np.array([28.0, -27.0]), "e3m2fn", "floor"), label="MXFP6 e3m2, amax 28 (its max)"),
        Case((np.array([5e-324, -5e-324]), "e2m1fn", "floor"), label="a float64 subnormal amax"),
        Case((np.array([7.0, -1.0, 0.5]), "e2m1fn", "rceil"), label="RCEIL, MXFP4 amax 7: ceil(log2(7 / 6)) = 1"),
        Case(
            (np.array([5.0, 1.0]), "e2m1fn", "rceil"),
            label="RCEIL, MXFP4 amax 5: 0, where ceil(log2 5) - 2 = 1 leaves e2m1's top binade unused",
        ),
        Case((np.array([-6.0, 1.0]), "e2m1fn", "rceil"), label="RCEIL at a power of two: amax 6 in e2m1fn, E = 0"),
        Case((np.array([448.0 * 2.0**-5]), "e4m3fn", "rceil"), label="RCEIL, amax 448 * 2**-5: E = -5"),
        Case(
            (np.array([np.nextafter(56.0, np.inf), 3.0]), "e4m3fn", "rceil"),
            label="one float64 step above 56 in e4m3fn: fp32(amax / 448) is 2**-3, E = -3",
        ),
        Case(
            (np.array([6.0 * 2.0**5 * (1 + 2.0**-23)]), "e2m1fn", "rceil"),
            label="the quotient one float32 step above 2**5: E = 6 (a float32 log2 rounds to 5)",
        ),
        Case((np.array([0.0, -0.0]), "e5m2", "rceil"), label="RCEIL, all zeros: -127"),
        Case((np.array([1e-300, 0.0]), "e4m3fn", "rceil"), label="RCEIL, fp32(amax / 448) underflows to 0: -127"),
        Case((np.array([2.0**-140]), "e4m3fn", "rceil"), label="RCEIL, the quotient an fp32 subnormal: -127"),
        Case(
            (np.array([448.0 * 1.5 * 2.0**-127, -1e-40]), "e4m3fn", "rceil"),
            label="RCEIL, d = 1.5 * 2**-127, an fp32 subnormal above 2**-127: E = -126 (flushed to 0: -127)",
        ),
        Case((np.array([57344.0 * 2.0**127]), "e5m2", "rceil"), label="RCEIL, the largest exponent: 127"),
    ]
    for _ in range(180):
        element = MX_ELEMENTS[int(rng.integers(len(MX_ELEMENTS)))]
        rule = MX_RULES[int(rng.integers(2))]
        f = get_format(element)
        emax = f.emax
        n = int(rng.integers(1, 33))
        r = rng.random()
        if rule == "rceil" and r < 0.6:  # the quotient at, or a step either side of, a power of two
            edge = _near_rceil_edges(rng, element)
            block = edge * rng.choice([-1.0, 1.0], size=n) * rng.uniform(0, 1, size=n) ** 4
            block[int(rng.integers(n))] = edge
            cases.append(Case((block * rng.choice([-1.0, 1.0]), element, rule)))
            continue
        r = rng.random() if rule == "floor" else rng.uniform(0.3, 1.0)
        if r < 0.45:  # amax at, or one float64 step from, a power of two
            block = _near_powers_of_two(rng, n, -20, 20) * rng.uniform(0, 1, size=n) ** 4
            block[int(rng.integers(n))] = _near_powers_of_two(rng, 1, -40, 40)[0]
        elif r < 0.6:  # amax near the bottom of e8m0: exponents around -127 (RCEIL: quotients that underflow fp32)
            lo, hi = (-175, -125) if rule == "rceil" else (-140 + emax, -110 + emax)
            block = rng.standard_normal(n) * 2.0 ** float(rng.uniform(lo, hi))
        elif r < 0.7:  # amax near the top: exponents up to 127
            block = rng.standard_normal(n) * 2.0 ** float(rng.uniform(100, 127 + emax - 1))
            top = f.max * 2.0**127 if rule == "rceil" else 2.0 ** (127 + emax + 1)
            block = np.clip(block, -top * 0.99, top * 0.99)
        elif r < 0.78:  # all zeros
            block = np.zeros(n) * rng.choice([-1.0, 1.0], size=n)
        else:  # ordinary data, magnitudes of any size
            block = rng.standard_normal(n) * 2.0 ** float(rng.uniform(-30, 30))
        if rng.random() < 0.3:  # the largest magnitude negative
            i = int(np.argmax(np.abs(block)))
            block[i] = -abs(block[i])
        cases.append(Case((block, element, rule)))
    return cases


# ------------------------------------------------------------------ 2. the block-scaled GEMM


def _gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


def blockwise_scaled_gemm_ref(
    P: np.ndarray, sA: np.ndarray, sB: np.ndarray, block_n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(C, allowed error), both (M, N) float64. C = sum over K-blocks b of sA[:, b] sB[b, :] P[b]
    in float64; the allowed error is what fp32 arithmetic may add, gamma_(nk + 2) *
    sum_b |sA sB P_b| with u = 2**-24 (per K-block: two roundings to scale the partial, one to
    add it), plus float64's own error on C (u = 2**-53), so that a float64 evaluation passes
    too."""
    P = np.asarray(P, dtype=np.float64)
    nk, M, N = P.shape
    sa = np.asarray(sA, dtype=np.float64)
    sb = np.repeat(np.asarray(sB, dtype=np.float64), block_n, axis=1)[:, :N]
    # the product of two fp32 scales is exact in float64; one rounding for the scaled partial
    x = (sa.T[:, :, None] * sb[:, None, :]) * P
    C = x.sum(axis=0)
    size = np.abs(x).sum(axis=0)  # sum_b |sA sB P_b|
    return C, (_gamma(nk + 2, 2.0**-24) + _gamma(nk + 2, 2.0**-53)) * size


def partial_products(qA: np.ndarray, qB: np.ndarray, block_k: int) -> np.ndarray:
    """(nk, M, N): the codes' partial product over each K-block of ``block_k`` (the last one
    shorter), exact in float64 (products of e4m3fn values are multiples of 2**-18 below 2**18,
    exact sums for K < 2**17), then rounded to fp32: what the tensor cores hand over."""
    K = qA.shape[1]
    return np.stack(
        [(qA[:, k0 : k0 + block_k] @ qB[k0 : k0 + block_k]).astype(np.float32) for k0 in range(0, K, block_k)]
    ).astype(np.float64)


def blockwise_scaled_gemm_engine(P, sA, sB, block_n: int) -> np.ndarray:
    """The promotion of :func:`nbhelpers.scaled_gemm.blockwise_scaled_mm` (``fl32(fl32(P_b sA)
    sB)`` added into an fp32 accumulator), on the partials: one of the answers the check must
    accept."""
    P = np.asarray(P, dtype=np.float32)
    N = P.shape[2]
    sa = np.asarray(sA, dtype=np.float32)
    sb = np.repeat(np.asarray(sB, dtype=np.float32), block_n, axis=1)[:, :N]
    acc = np.zeros(P.shape[1:], dtype=np.float32)
    for b in range(P.shape[0]):
        acc += (P[b] * sa[:, b : b + 1]) * sb[b : b + 1, :]
    return acc.astype(np.float64)


def _within_fp32_error(got, expected) -> str | None:
    """got within the allowed error of the exact product, elementwise; never raises."""
    C, allowed = expected
    g = float_array(got)
    if isinstance(g, str):
        return g
    if g.shape != C.shape:
        return f"returned an array of shape {g.shape}, expected shape {C.shape}"
    err = np.abs(g - C)
    bad = ~(err <= allowed)  # NaN fails too
    if not bad.any():
        return None
    i, j = (int(v) for v in np.argwhere(bad)[0])
    return (
        f"{int(bad.sum())} of {bad.size} elements off; C[{i}, {j}] = {g[i, j]!r}, exact {C[i, j]!r}, "
        f"off by {err[i, j]:.3g}, fp32 arithmetic allows {allowed[i, j]:.3g}"
    )


def _e4m3(rng: np.random.Generator, shape, spread: float = 4.0) -> np.ndarray:
    """e4m3fn values of both signs over several binades, some zeros."""
    x = rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, size=shape)) * 16
    x[rng.random(shape) < 0.05] = 0.0
    return round_to(np.clip(x, -448, 448), "e4m3fn")


def _block_scales(rng: np.random.Generator, shape, spread: float) -> np.ndarray:
    """fp32 scales with full mantissas, varying by up to 2**spread from block to block."""
    return np.exp2(rng.uniform(-8 - spread, -8 + spread, size=shape)).astype(np.float32).astype(np.float64)


def _gemm_case(rng, M, K, N, bk, bn, spread=6.0) -> Case:
    nk, nn = -(-K // bk), -(-N // bn)
    P = partial_products(_e4m3(rng, (M, K)), _e4m3(rng, (K, N)), bk)
    return Case((P, _block_scales(rng, (M, nk), spread), _block_scales(rng, (nk, nn), spread), bn))


def _gemm_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(707)  # the labelled cases are the same for every seed
    cases = [
        Case(
            (np.full((2, 2, 3), 4.0), np.array([[1.0, 2.0], [0.5, 8.0]]), np.array([[1.0], [0.25]]), 3),
            label="two K-blocks whose scales differ: not one scale at the end",
        ),
        Case(_gemm_case(fixed, 3, 256, 4, 128, 128).args, label="DeepSeek-V3's shapes: 1x128 and 128x128 blocks"),
        Case(_gemm_case(fixed, 2, 100, 5, 32, 2).args, label="K = 100 with blocks of 32: four K-blocks"),
        Case(_gemm_case(fixed, 4, 20, 7, 64, 3).args, label="one K-block; N = 7 in column blocks of 3"),
        Case(_gemm_case(fixed, 3, 96, 4, 32, 1).args, label="one scale per column of B (block_n = 1)"),
        Case(_gemm_case(fixed, 4, 96, 4, 32, 1).args, label="a square output: a row's scale is not a column's"),
        Case(_gemm_case(fixed, 1, 64, 1, 16, 8, spread=12.0).args, label="K-block scales drawn from 24 binades"),
        Case(
            (np.array([[[2 * 448.0**2]], [[-2 * 448.0**2]]]), np.array([[1.0, 1.0]]), np.array([[1.0], [1.0]]), 1),
            label="two K-blocks that cancel exactly: 0",
        ),
    ]
    for _ in range(50):
        M, N = int(rng.integers(1, 6)), int(rng.integers(1, 9))
        bk = int(rng.choice([8, 16, 32, 48, 64, 128]))
        K = int(rng.integers(1, 5 * bk + 1)) if rng.random() < 0.8 else int(rng.integers(1, 400))
        bn = int(rng.choice([1, 2, 3, 4, 128]))
        spread = float(rng.choice([0.0, 2.0, 6.0, 12.0]))
        cases.append(_gemm_case(rng, M, K, N, bk, bn, spread))
    return cases


# ------------------------------------------------------------------ 3. the promotion interval

#: The data family of the promotion exercise: M = N = 16 outputs, a scale per row of A and per
#: column of B, elements in the case's fp8 format.
PROMOTION_M = PROMOTION_N = 16
#: Every case's bound is at least this factor away from every measured error.
PROMOTION_MARGIN = 1.01
#: A tight case's bound: this factor above or below one measured error.
TIGHT_PROMOTION = 1.012
PROMOTION_KS = (128, 256, 512, 1024, 2048, 4096)
#: The accumulators of the cases: significant bits kept (chapter 07's is 14), products fused per
#: alignment (chapter 07's 32), the operands' format. acc_bits + 7 <= 24: a fused group's exact sum
#: (65 terms at most, each below 2**acc_bits units of its quantum) fits a float32, so the model's
#: toward-zero rounding of it into fp32 is exact and the statement can call the sum exact.
PROMOTION_BITS = tuple(range(10, 17))
PROMOTION_GROUPS = (16, 32, 64)
PROMOTION_FORMATS = ("e4m3fn", "e5m2")
#: Chapter 07's accumulator: 14 bits, 32 e4m3 products per group.
CHAPTER_ACCUMULATOR = (14, 32, "e4m3fn")


def promotion_intervals(K: int, group: int = 32) -> tuple[int, ...]:
    """group, 2 group, 4 group, ..., K (K a power of two, at least group)."""
    return tuple(group * 2**i for i in range(K.bit_length()) if group * 2**i <= K)


def promotion_recipes(fmt: str) -> tuple[Recipe, Recipe]:
    """A scale per row of A and per column of B, ``fmt`` elements."""
    return Recipe(fmt, PER_ROW), Recipe(fmt, PER_COLUMN)


def promotion_operands(K: int, signs: str, fmt: str = "e4m3fn"):
    """(qA, sA, qB, sB): the data family, A (16, K) and B (K, 16) standard normal from
    ``np.random.default_rng(K)`` (A first), their absolute values for signs "same", quantized to
    ``fmt`` with a scale per row of A and per column of B."""
    rng = np.random.default_rng(K)
    A = rng.standard_normal((PROMOTION_M, K))
    B = rng.standard_normal((K, PROMOTION_N))
    if signs == "same":
        A, B = np.abs(A), np.abs(B)
    rA, rB = promotion_recipes(fmt)
    (qA, sA), (qB, sB) = quantize(A, rA, "A"), quantize(B, rB, "B")
    return qA, sA, qB, sB


@functools.cache
def promotion_errors(
    K: int, signs: str, acc_bits: int = 14, group: int = 32, fmt: str = "e4m3fn"
) -> tuple[tuple[int, float], ...]:
    """((N, relative error), ...) for N = group, 2 group, ..., K: the Frobenius relative error of
    fp8_tensor_core_mm (acc_bits bits, groups of ``group``, promoted every N) against the exact
    product of the fp8 operands."""
    qA, sA, qB, sB = promotion_operands(K, signs, fmt)
    exact = (qA @ qB) * sA * sB  # exact in float64, then the two scales (chapter 07's reference)
    return tuple(
        (
            N,
            relative_error(
                fp8_tensor_core_mm(
                    qA,
                    qB,
                    sA,
                    sB,
                    accumulator_bits=acc_bits,
                    promote_every=N,
                    group=group,
                    recipes=promotion_recipes(fmt),
                ),
                exact,
            ),
        )
        for N in promotion_intervals(K, group)
    )


def largest_promotion_interval_ref(K: int, bound: float, signs: str, acc_bits: int, group: int, fmt: str) -> int | None:
    """The largest N in (group, 2 group, ..., K) whose measured error is at most ``bound``; None if
    none."""
    ok = [N for N, e in promotion_errors(K, signs, acc_bits, group, fmt) if e <= bound]
    return max(ok) if ok else None


def _bound_between(rng: np.random.Generator, lo: float, hi: float) -> float | None:
    """A bound log-uniform in [lo * margin, hi / margin], or None if that is empty."""
    a, b = math.log(lo * PROMOTION_MARGIN), math.log(hi / PROMOTION_MARGIN)
    return None if a > b else float(math.exp(rng.uniform(a, b)))


def _clear(bound: float, errors) -> bool:
    """Whether ``bound`` is at least PROMOTION_MARGIN away from every error."""
    return all(e <= bound / PROMOTION_MARGIN or e >= bound * PROMOTION_MARGIN for e in errors)


def _promotion_case(rng: np.random.Generator, K: int, signs: str, acc: tuple, target: int | None = None) -> Case:
    errors = sorted(e for _, e in promotion_errors(K, signs, *acc))
    edges = [errors[0] / 8, *errors, errors[-1] * 8]  # below all, between two, above all
    gaps = [i for i in range(len(edges) - 1) if edges[i + 1] / edges[i] > PROMOTION_MARGIN**2]
    i = gaps[int(rng.integers(len(gaps)))] if target is None else gaps[target]
    return Case((K, _bound_between(rng, edges[i], edges[i + 1]), signs, *acc))


def _tight_promotion_case(
    rng: np.random.Generator, K: int, signs: str, acc: tuple, N: int | None = None, side: int = 0
) -> Case | None:
    """A bound TIGHT_PROMOTION above (side 1) or below (side -1; 0: either, drawn) the error of
    promoting every N (drawn when None), among the errors at least PROMOTION_MARGIN away from it;
    None if no error of the accumulator has one."""
    errors = dict(promotion_errors(K, signs, *acc))
    side = side or (-1, 1)[int(rng.integers(2))]

    def bound_at(n: int) -> float:
        return errors[n] * TIGHT_PROMOTION**side

    if N is None:
        fits = [n for n in errors if _clear(bound_at(n), errors.values())]
        if not fits:
            return None
        N = fits[int(rng.integers(len(fits)))]
    return Case((K, bound_at(N), signs, *acc))


def _random_accumulator(rng: np.random.Generator) -> tuple[int, int, str]:
    """(acc_bits, group, fmt): chapter 07's one time in six, else drawn."""
    if rng.random() < 1 / 6:
        return CHAPTER_ACCUMULATOR
    bits = int(PROMOTION_BITS[int(rng.integers(len(PROMOTION_BITS)))])
    group = int(PROMOTION_GROUPS[int(rng.integers(len(PROMOTION_GROUPS)))])
    return bits, group, PROMOTION_FORMATS[int(rng.integers(len(PROMOTION_FORMATS)))]


def _promotion_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(7070)  # the labelled cases are the same for every seed
    chapter = CHAPTER_ACCUMULATOR
    cases = [
        Case((4096, 1e-3, "same", *chapter), label="chapter 07's accumulator, K = 4096, same signs, 1e-3: N_C = 128"),
        Case(
            (4096, 1e-3, "same", 12, 16, "e4m3fn"),
            label="12 bits, groups of 16, same signs, 1e-3: the napkin says not even 16",
        ),
        Case((4096, 1e-3, "random", 12, 16, "e4m3fn"), label="12 bits, groups of 16, random signs, 1e-3"),
        Case(
            (4096, 1e-3, "same", 14, 32, "e5m2"),
            label="e5m2 operands, chapter 07's accumulator: products of 6 bits lose less to the cut",
        ),
        Case((1024, 1e-6, "random", 16, 64, "e4m3fn"), label="a bound below the error of promoting every group: None"),
        Case((512, 0.5, "same", 10, 16, "e5m2"), label="a bound above the never-promoted error: K itself"),
        Case((128, 2e-3, "same", 16, 64, "e4m3fn"), label="K = 128 in groups of 64: two intervals, 64 and 128"),
        Case(
            _tight_promotion_case(fixed, 2048, "same", (13, 32, "e4m3fn"), 64, -1).args,
            label="13 bits, K = 2048, same signs, a bound 1.2% below the error of promoting every 64: 32",
        ),
        Case(
            _tight_promotion_case(fixed, 1024, "random", (15, 16, "e5m2"), 128, 1).args,
            label="15 bits, groups of 16, e5m2, random signs, a bound 1.2% above the error of promoting every 128",
        ),
        # errors near float32's own rounding: an fp32 accumulator or epilogue done in float64 moves
        # them past 1.2%
        Case(
            _tight_promotion_case(fixed, 4096, "same", (16, 16, "e5m2"), 16, -1).args,
            label="16 bits, groups of 16, e5m2, a bound 1.2% below the error of promoting every 16: None",
        ),
        Case(
            _tight_promotion_case(fixed, 4096, "same", (16, 16, "e5m2"), 16, 1).args,
            label="16 bits, groups of 16, e5m2, a bound 1.2% above the error of promoting every 16: 16",
        ),
    ]
    labelled = len(cases)
    while len(cases) < labelled + 21:  # five in six just past one error, the sixth anywhere between two
        K = PROMOTION_KS[int(rng.integers(len(PROMOTION_KS)))]
        signs = ("same", "random")[int(rng.integers(2))]
        acc = _random_accumulator(rng)
        if (len(cases) - labelled) % 6 == 2:
            cases.append(_promotion_case(rng, K, signs, acc))
        else:
            case = _tight_promotion_case(rng, K, signs, acc)
            if case is not None:
                cases.append(case)
    # random signs, promoting every 2 groups at a long K, where the running sum's own cut matters
    # most (a model that cuts the running sum and the group's sum together measures errors a few
    # percent off there): bounds 1.0-1.5% above and below that error, drawn
    for K in (1024, 2048):
        acc = _random_accumulator(rng)
        errors = dict(promotion_errors(K, "random", *acc))
        for side in (-1, 1):
            bound = errors[2 * acc[1]] * float(rng.uniform(PROMOTION_MARGIN, 1.015)) ** side
            if _clear(bound, errors.values()):
                cases.append(Case((K, bound, "random", *acc)))
    return cases


# ------------------------------------------------------------------ 4. two-level scales and bytes

#: The element formats of the two-level exercise: NVFP4's e2m1fn and the 6-bit OCP MX element types.
TWO_LEVEL_ELEMENTS = ("e2m1fn", "e2m3fn", "e3m2fn")
#: Its blocks (rows, columns): NVFP4's 1 x 16 along a row, 16 x 1 along a column (the operand whose
#: K runs down its rows), the 16 x 16 weight blocks of NVIDIA's NVFP4 training recipe, and MX's 32.
TWO_LEVEL_BLOCKS = ((1, 16), (16, 1), (16, 16), (1, 32))


def two_level_recipe(element: str, block_rows: int, block_cols: int) -> Recipe:
    """NVFP4's scheme (an e4m3fn scale per block under one fp32 tensor scale) with ``element``
    elements and blocks of block_rows x block_cols."""
    return Recipe(element, (block_rows, block_cols), "e4m3_over_fp32")


def two_level_scales_ref(
    x: np.ndarray, element: str, block_rows: int, block_cols: int
) -> tuple[float, np.ndarray, float]:
    """(s_t, s_b (ceil(M / block_rows), ceil(K / block_cols)), bytes per parameter) of x (M, K): the
    engine's two scale factors (:func:`nbhelpers.scaling.nvfp4_scales`) and its storage count,
    elements, block scales and tensor scale."""
    x = np.asarray(x, dtype=np.float64)
    recipe = two_level_recipe(element, block_rows, block_cols)
    s_b, s_t = nvfp4_scales(block_amax(x, recipe), element)
    bits = storage_bits(recipe, x.shape)["total"]
    return float(s_t), s_b, bits / 8 / x.size


_close_bytes = close_to(1e-12)


def _two_level_compare(got, expected) -> str | None:
    """s_t and s_b bit for bit, the bytes within a relative 1e-12; never raises."""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"returned {describe(got)}, expected a tuple (s_t, s_b, bytes_per_param)"
    for i, name in enumerate(("s_t", "s_b")):
        try:
            reason = compare(got[i], expected[i])
        except Exception as e:  # a student's odd object
            reason = f"could not compare ({type(e).__name__})"
        if reason is not None:
            return f"element {i} ({name}): {reason}"
    reason = _close_bytes(got[2], expected[2])
    return None if reason is None else f"element 2 (bytes_per_param): {reason}"


def _grid(shape, block) -> tuple[int, int]:
    return -(-shape[0] // block[0]), -(-shape[1] // block[1])


def _expand(per_block: np.ndarray, shape, block) -> np.ndarray:
    """One value per block repeated over the block's elements, cut to ``shape``."""
    return np.repeat(np.repeat(per_block, block[0], axis=0), block[1], axis=1)[: shape[0], : shape[1]]


def _two_level_x(rng: np.random.Generator, M: int, K: int, block) -> np.ndarray:
    """Values whose blocks differ in size by up to 2**30, some zero blocks, now and then one
    element much larger than the rest (its neighbours' scales fall to e4m3's subnormals and 2**-9)."""
    x = rng.standard_normal((M, K)) * np.exp2(rng.uniform(-3, 3, size=(M, K)))
    grid = _grid((M, K), block)
    per_block = np.exp2(rng.uniform(-15, 15, size=grid)) if rng.random() < 0.5 else np.ones(grid)
    per_block[rng.random(grid) < 0.1] = 0.0
    x = x * _expand(per_block, (M, K), block)
    if rng.random() < 0.3:
        x[int(rng.integers(M)), int(rng.integers(K))] *= 2.0**20
    return x * 2.0 ** float(rng.uniform(-20, 20))


def _top(element: str) -> float:
    """448 times the element's largest value: the tensor's amax over the tensor scale."""
    return 448 * get_format(element).max


def _tiny_tensor(rng: np.random.Generator, M: int, K: int, element: str = "e2m1fn") -> np.ndarray:
    """A tensor whose amax / (448 * max_element) lies near fp32's smallest subnormals: s_t rounds (or
    is raised) far from that quotient, and the largest block's quotient passes e4m3's 448: it must
    saturate."""
    x = rng.standard_normal((M, K))
    x *= _top(element) * 2.0**-149 * float(rng.uniform(1.05, 1.45)) / np.abs(x).max()
    return x


def _near_e4m3_ties(rng: np.random.Generator, x: np.ndarray, element: str, block) -> np.ndarray:
    """x with one to three blocks rescaled so that amax_b / max_element / s_t lies a relative 2**-30
    above or below a midpoint between two neighbouring normal e4m3fn values. Rounded once from
    float64 it goes to the nearer of the two; rounded to float32 first (as ml_dtypes 0.6.0's float64
    cast does) it lands on the midpoint and goes to the even one, the wrong one half the time. The
    tensor's largest element, and so s_t, stays."""
    x = x.copy()
    M, K = x.shape
    a = np.abs(x)
    if a.max() == 0:
        return x
    emax = get_format(element).max
    s_t = max(float(np.float32(a.max() / _top(element))), 2.0**-149)
    top_row, top_col = np.unravel_index(int(np.argmax(a)), a.shape)
    gm, gk = _grid((M, K), block)
    for _ in range(int(rng.integers(1, 4))):
        i, j = int(rng.integers(gm)), int(rng.integers(gk))
        r0, r1 = block[0] * i, min(block[0] * (i + 1), M)
        c0, c1 = block[1] * j, min(block[1] * (j + 1), K)
        if r0 <= top_row < r1 and c0 <= top_col < c1:
            continue
        # L = (1 + j / 8) * 2**e and the next value up: normal e4m3fn values below 448
        mid = (1 + (int(rng.integers(8)) + 0.5) / 8) * 2.0 ** int(rng.integers(-6, 8))
        target = mid * (1 + float(rng.choice([-1.0, 1.0])) * 2.0**-30) * emax * s_t
        blk = x[r0:r1, c0:c1]
        m = float(np.abs(blk).max())
        x[r0:r1, c0:c1] = blk * (0.9 * target / m) if m > 0 else 0.0
        x[r0 + int(rng.integers(r1 - r0)), c0 + int(rng.integers(c1 - c0))] = float(rng.choice([-1.0, 1.0])) * target
    return x


def _two_level_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(717)
    ramp = np.arange(1.0, 33.0).reshape(1, 32)
    nvfp4 = ("e2m1fn", 1, 16)
    cases = [
        Case((ramp, *nvfp4), label="NVFP4, one row of 1..32: two blocks, amax 16 and 32, s_t = fp32(32 / (448 * 6))"),
        Case(
            (fixed.standard_normal((4, 40)), *nvfp4), label="NVFP4, K = 40: the last block of each row holds 8 values"
        ),
        Case((np.zeros((2, 16)), *nvfp4), label="all zeros: the smallest scales, 2**-149 and 2**-9"),
        Case(
            (np.concatenate([np.full((1, 16), 1e-6), np.full((1, 16), 1e3)], axis=1), *nvfp4),
            label="a block 1e9 times smaller: its scale is raised to 2**-9",
        ),
        Case((_tiny_tensor(fixed, 2, 32), *nvfp4), label="amax / 2688 near fp32's smallest subnormal: 448, saturated"),
        Case((fixed.standard_normal((1, 1)), *nvfp4), label="a 1 x 1 tensor: one block of 16 for one value"),
        Case(
            (np.array([[2688.0] + [0.0] * 15 + [6.6] + [0.1] * 15]), *nvfp4),
            label="s_t = 1: 6.6 / 6 = 1.1 rounds to the nearest e4m3, 1.125, not down to 1",
        ),
        Case(
            (np.array([[2688.0] + [0.0] * 15 + [6.375] + [0.1] * 15 + [-7.125] + [1.0] * 15]), *nvfp4),
            label="s_t = 1: 6.375 / 6 = 1.0625 and 7.125 / 6 = 1.1875, exact e4m3 ties: to the even 1 and 1.25",
        ),
        Case(
            (np.array([[12544.0, 1.0, 0.0, -3.5]]), "e3m2fn", 1, 16),
            label="e3m2fn elements (largest 28): amax 12544 = 448 * 28 gives s_t = 1, the block 448",
        ),
        Case(
            (fixed.standard_normal((3, 20)), "e2m3fn", 1, 16),
            label="e2m3fn elements: 6 bits each, largest 7.5",
        ),
        Case(
            (fixed.standard_normal((20, 40)), "e2m1fn", 16, 16),
            label="16 x 16 blocks on a 20 x 40 tensor: 2 x 3 block scales, the edge blocks stored whole",
        ),
        Case(
            (fixed.standard_normal((40, 3)) * np.array([1.0, 1e-3, 50.0]), "e2m1fn", 16, 1),
            label="16 x 1 blocks (down a column) on a 40 x 3 tensor whose columns differ in size",
        ),
        Case(
            (fixed.standard_normal((2, 70)), "e2m3fn", 1, 32),
            label="blocks of 32 along a row: K = 70 holds three, the last of 6 values",
        ),
    ]
    for _ in range(44):
        element = TWO_LEVEL_ELEMENTS[int(rng.integers(len(TWO_LEVEL_ELEMENTS)))]
        block = TWO_LEVEL_BLOCKS[int(rng.integers(len(TWO_LEVEL_BLOCKS)))]
        M = int(rng.choice([16, 32, 48])) if rng.random() < 0.4 else int(rng.integers(1, 41))
        K = int(rng.choice([16, 32, 64])) if rng.random() < 0.4 else int(rng.integers(1, 70))
        if rng.random() < 0.15:
            x = _tiny_tensor(rng, M, K, element)
        else:
            x = _two_level_x(rng, M, K, block)
        if len(cases) % 4 == 0:  # block quotients a hair from an e4m3 tie
            x = _near_e4m3_ties(rng, _two_level_x(rng, M, K, block), element, block)
        cases.append(Case((x, element, *block)))
    return cases


#: What an answer may not call (Exercise.forbidden): numpy and round_to only, and quantize for
#: exercise 3's data.
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.scaling", "nbhelpers.scaled_gemm", "nbhelpers.tensor_cores")

EXERCISES = [
    Exercise(
        "ex07.mx_shared_exponent",
        "The MX shared exponent, two rules",
        4,
        mx_shared_exponent_ref,
        _mx_cases,
        forbidden=FORBIDDEN,
    ),
    Exercise(
        "ex07.blockwise_scaled_gemm",
        "Promoting a block-scaled GEMM",
        5,
        blockwise_scaled_gemm_ref,
        _gemm_cases,
        compare=_within_fp32_error,
        forbidden=FORBIDDEN,
    ),
    Exercise(
        "ex07.largest_promotion_interval",
        "How often to promote a narrow accumulator",
        4,
        largest_promotion_interval_ref,
        _promotion_cases,
        forbidden=FORBIDDEN,
        allowed=("nbhelpers.scaling:quantize",),
    ),
    Exercise(
        "ex07.two_level_scales",
        "Two-level block scales and their bytes",
        4,
        two_level_scales_ref,
        _two_level_cases,
        compare=_two_level_compare,
        forbidden=FORBIDDEN,
    ),
]
