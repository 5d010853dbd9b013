"""Chapter 07 exercises: fp8 accumulation and block formats. Listed in ``EXERCISES`` for
:mod:`nbhelpers.answer_keys`.

- ``mx_exponent_range``: the rules the other way round: the smallest and the largest positive
  float64 amax that get a given e8m0 exponent E, by OCP MX v1.0's floor or the RCEIL of cuBLAS and
  torchao (both rules are printed; their inverse is the work: float32's rounding of the quotient,
  its ties and its subnormals at the bottom of e8m0). The reference derives the ends
  (:func:`mx_exponent_range_ref`), tested against the forward rule
  (:func:`nbhelpers.scaling.e8m0_exponents`) one float64 step either side. Compared bit for bit.
  Each call asks for an array of exponents (up to 200, in random order), so no answer recurs
  from one seed to another: a table of the public answers is no use at a hidden seed.
- ``blockwise_scaled_gemm``: the promotion of a GEMM whose scales vary along K. The student gets
  what the tensor cores hand over, the codes' partial product of each K-block rounded to fp32
  (``P``, ``(nk, M, N)``), with the scales, and applies the scales: the codes are gone, so
  dequantizing the operands is not open to them. Any evaluation in fp32 or better is right (the
  FMA ``acc += P_b * (sA * sB)`` of chapter 07, two multiplies in either order, a float64
  accumulator): the reference gives ``sum_b sA sB P_b`` in float64 and the error that fp32
  arithmetic may add, ``gamma_(nk + 2) * sum_b |sA sB P_b|`` (gamma_n = n u / (1 - n u),
  u = 2**-24, nk K-blocks), and the comparator accepts what lies within it. Scales applied in
  the wrong place miss by orders of magnitude more.
- ``largest_promotion_interval``: chapter 07's narrow accumulator with its two numbers made
  parameters (``acc_bits`` 10 to 24, ``group`` 1 to 64), on K copies of one product p, K up to
  2**40: the largest promotion interval N whose error (N p - S_N) / (N p) stays within a bound.
  No simulation reaches such K; the sum's growth, one binade of the alignment at a time, is the
  student's to work out (:func:`narrow_sum_of_copies`, exact integers, checked against the course's
  engine :func:`nbhelpers.scaled_gemm.fp8_tensor_core_mm` in tests/test_exercises_ch07.py). Most
  bounds lie a relative 2**-20 from one error, so a model that cuts one thing wrongly crosses it.
  A few products just below a power of two (:data:`ALIGNMENT_TRAPS`) land a group's sum within one
  product of the next binade, where aligning to the sum plus a product instead of the sum carried
  in cuts one bit more: the cases hold them at every seed.
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
from fractions import Fraction

import numpy as np

from ..comparators import close_to, compare, float_array
from ..exercise_types import COMPUTING_TOOLS, Case, Exercise, ExerciseKind
from ..formats import get_format
from ..recipes import Recipe
from ..report_text import describe
from ..rounding import round_to
from ..scaling import block_amax, e8m0_exponents, nvfp4_scales, storage_bits

#: The element formats of the MX exercise (the OCP MX v1.0 element types).
MX_ELEMENTS = ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")
#: The e8m0 rules of the MX exercise.
MX_RULES = ("floor", "rceil")

# ------------------------------------------------------------------ 1. which amax gets which exponent

#: The smallest positive float64: the lower end of the range of exponent -127, which every amax
#: too small for e8m0 is raised to.
SMALLEST_AMAX = math.ulp(0.0)


def mx_exponent(amax: float, element: str, rule: str) -> int:
    """The e8m0 exponent of one amax by ``rule`` (:func:`nbhelpers.scaling.e8m0_exponents`), with
    no upper limit: 128 past the largest amax of exponent 127."""
    if rule == "rceil" and float(np.float32(amax / get_format(element).max)) > 2.0**127:
        return 128
    if rule == "floor" and math.frexp(amax)[1] - 1 - get_format(element).emax > 127:
        return 128
    return int(e8m0_exponents(amax, element, rule))


def _rceil_top(element: str, k: int) -> float:
    """The largest amax whose quotient amax / max, rounded to float32, is at most 2**k: the quotient
    halfway from 2**k to the next float32 (float32's spacing above 2**k is 2**(max(k, -126) - 23),
    subnormals included) goes to 2**k, the even one. Exact in float64: max has at most 4 significant
    bits, the midpoint 25."""
    return get_format(element).max * (2.0**k + 2.0 ** (max(k, -126) - 24))


def mx_exponent_range_ref(element: str, rule: str, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), two float64 arrays of E's shape: for each exponent of E (int64, -127 to 127), the
    smallest and the largest positive float64 amax whose e8m0 exponent by ``rule`` is that one.
    floor: [2**(E + emax), 2**(E + emax + 1)) one float64 step short; rceil: the quotients
    fp32(amax / max) in (2**(E - 1), 2**E]; E = -127 reaches down to the smallest positive float64
    (raised). Derived here, and tested against the forward rule (:func:`mx_exponent`) and exact
    arithmetic in tests/test_exercises_ch07.py."""
    E = np.asarray(E, dtype=np.int64)
    lo, hi = np.empty(E.shape), np.empty(E.shape)
    for i, e in enumerate(E.flat):
        lo.flat[i], hi.flat[i] = _mx_range(element, rule, int(e))
    return lo, hi


def _mx_range(element: str, rule: str, E: int) -> tuple[float, float]:
    if rule == "floor":
        emax = get_format(element).emax
        lo = SMALLEST_AMAX if E == -127 else 2.0 ** (E + emax)
        return lo, math.nextafter(2.0 ** (E + emax + 1), 0.0)
    lo = SMALLEST_AMAX if E == -127 else math.nextafter(_rceil_top(element, E - 1), math.inf)
    return lo, _rceil_top(element, E)


def _exponents(rng: np.random.Generator) -> np.ndarray:
    """int64 exponents for one call: 8 to 200 of them, repeats allowed, in random order; a third of
    them (at least 3) at the bottom of e8m0 (-127 to -120, where the clamp and float32's
    subnormals meet), some at its top, the rest anywhere; every third array 2-d."""
    n = int(rng.integers(8, 201))
    r = rng.random(n)
    E = rng.integers(-127, 128, size=n)
    E = np.where(r < 0.35, rng.integers(-127, -119, size=n), E)
    E = np.where((r >= 0.35) & (r < 0.45), rng.integers(120, 128, size=n), E)
    E[rng.choice(n, size=3, replace=False)] = rng.choice([-127, -126, -125], size=3)
    if rng.random() < 1 / 3 and n % 2 == 0:
        E = E.reshape(2, -1)
    return E.astype(np.int64)


def _mx_cases(rng: np.random.Generator) -> list[Case]:
    def fixed(element: str, rule: str, E: list[int], label: str) -> Case:
        return Case((element, rule, np.array(E, dtype=np.int64)), label=label)

    cases = [
        fixed("e2m1fn", "floor", [0], "MXFP4 floor, E = 0: amax in [4, 8), the 7 of chapter 07 among them"),
        fixed("e4m3fn", "floor", [0, 1, -1], "MXFP8 floor, E = 0, 1, -1: amax in [256, 512), [512, 1024), ..."),
        fixed("e4m3fn", "floor", [-127], "floor, E = -127: every amax below 2**-118, raised"),
        fixed("e2m3fn", "floor", [127, 126], "floor, the largest exponents"),
        fixed("e5m2", "floor", [-3], "e5m2 (largest 57344 = 1.75 * 2**15)"),
        fixed("e3m2fn", "floor", [5], "e3m2fn (largest 28 = 1.75 * 2**4)"),
        fixed("e2m1fn", "rceil", [0], "MXFP4 RCEIL, E = 0: amax / 6 in (1/2, 1] after float32 rounding"),
        fixed("e2m1fn", "rceil", [1], "MXFP4 RCEIL, E = 1: the 7 of chapter 07, 7 / 6 rounds up to 2"),
        fixed("e4m3fn", "rceil", [0], "MXFP8 RCEIL, E = 0: up to 448 and the float32 rounding's slack"),
        fixed("e2m3fn", "rceil", [-20], "e2m3fn (largest 7.5) RCEIL"),
        fixed("e4m3fn", "rceil", [-127], "RCEIL, E = -127: quotients up to 2**-127, a float32 subnormal"),
        fixed("e4m3fn", "rceil", [-126], "RCEIL, E = -126: quotients in (2**-127, 2**-126], subnormal spacing"),
        fixed("e2m1fn", "rceil", [-125], "RCEIL, E = -125: the lower end at float32's smallest normal"),
        fixed("e5m2", "rceil", [127], "RCEIL, the largest exponent"),
        fixed("e3m2fn", "rceil", [-1], "e3m2fn RCEIL, E = -1"),
        Case(("e2m1fn", "rceil", np.array([[3, -127], [-126, 3]], dtype=np.int64)), label="a 2-d array, repeats"),
    ]
    for _ in range(60):
        element = MX_ELEMENTS[int(rng.integers(len(MX_ELEMENTS)))]
        rule = MX_RULES[int(rng.integers(2))]
        cases.append(Case((element, rule, _exponents(rng))))
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

#: The accumulators of the cases: significant bits kept (chapter 07's 14 among them, up to fp32's
#: 24) and products fused per alignment (1: each product aligned alone; chapter 07's 32).
PROMOTION_BITS = tuple(range(10, 25))
PROMOTION_GROUPS = (1, 4, 16, 32, 64)
#: The formats whose products p are: e4m3fn (at most 8 significant bits) and e5m2 (at most 6).
PROMOTION_FORMATS = ("e4m3fn", "e5m2")
#: K: powers of two from 2**7 up to 2**PROMOTION_LOG2_K_MAX, far past what a simulation can reach.
PROMOTION_LOG2_K_MAX = 40
#: A tight bound lies this factor above or below one error, and at least PROMOTION_MARGIN away from
#: every other (errors below TIGHT_FLOOR are never a tight bound's target: float64's own rounding
#: of a tiny error is not the student's mistake).
TIGHT_PROMOTION = 1 + 2.0**-20
PROMOTION_MARGIN = 1 + 2.0**-21
TIGHT_FLOOR = 1e-9
#: Chapter 07's accumulator: 14 bits, 32 products per group.
CHAPTER_ACCUMULATOR = (14, 32)
#: (P, group, acc_bits) where a group's alignment to max(p, S) and to S + p (the sum once one
#: product is in: a plausible slip) give different errors that a tight bound tells apart, for
#: P = a * b, a and b odd significands of e4m3fn values (at most 4 bits), among the cases'
#: accumulators: 7 * 9, 11 * 11 and 15 * 15, just below a power of two, put a group's sum within one
#: product of the next binade (32 * 63 = 2016). All of them (tests/test_exercises_ch07.py).
ALIGNMENT_TRAPS = ((63, 16, 10), (63, 32, 10), (63, 32, 11), (121, 16, 11), (225, 4, 10))


def promotion_intervals(K: int, group: int = 32) -> tuple[int, ...]:
    """group, 2 group, 4 group, ..., K (K a power of two, at least group)."""
    return tuple(group * 2**i for i in range(K.bit_length()) if group * 2**i <= K)


def narrow_sum_of_copies(
    p: float, n: int, acc_bits: int, group: int, cut_sum: bool = True, align_with_p: bool = False
) -> Fraction:
    """The narrow partial sum after n groups of ``group`` copies of p > 0, exactly: each group
    aligned to max(p, S), p and S cut toward zero to acc_bits bits from that leading bit, the
    group's cut products added exactly. Skips ahead a binade at a time (S grows by the same
    increment while the alignment stays in one binade): O(binades), whatever n. ``cut_sum`` False
    leaves the partial sum carried in uncut, ``align_with_p`` True aligns each run of groups to S + p
    instead of max(p, S) (neither is the statement's model: for the cases' choice of bounds where
    they matter)."""
    m, e = math.frexp(p)
    P = int(m * 2**53)  # p = P * 2**(e - 53), every value below a multiple of the unit 2**(u)
    shift = (P & -P).bit_length() - 1
    P >>= shift
    u = e - 53 + shift
    S, done = 0, 0
    while done < n:
        E = (S + P if align_with_p else max(P, S)).bit_length() - 1  # the alignment's leading bit, in units
        j = E - (acc_bits - 1)  # the last kept bit
        if j > 0:
            S, c = ((S >> j) << j if cut_sum else S), (P >> j) << j
        else:
            c = P
        inc = group * c
        if inc == 0:  # p is cut to nothing: the sum has stalled for good
            break
        k = min(n - done, -(-((1 << (E + 1)) - S) // inc))  # groups that start in this binade
        S += k * inc
        done += k
    return Fraction(S) * Fraction(2) ** u


@functools.cache
def copies_errors(p: float, K: int, acc_bits: int, group: int) -> tuple[tuple[int, Fraction], ...]:
    """((N, relative error), ...) for N = group, 2 group, ..., K: (N p - S_N) / (N p), S_N the
    narrow sum of N copies (every interval of N sees the same products, so each promotion adds
    the same S_N), exactly."""
    return tuple(
        (N, 1 - narrow_sum_of_copies(p, N // group, acc_bits, group) / (N * Fraction(p)))
        for N in promotion_intervals(K, group)
    )


def largest_promotion_interval_ref(p: float, K: int, bound: float, acc_bits: int, group: int) -> int | None:
    """The largest N in (group, 2 group, ..., K) whose error is at most ``bound``; None if none."""
    ok = [N for N, err in copies_errors(p, K, acc_bits, group) if err <= Fraction(bound)]
    return max(ok) if ok else None


def _clear(bound: float, errors) -> bool:
    """Whether ``bound`` is at least PROMOTION_MARGIN away from every error (relatively), and a
    float64 rounding of none of them (absolutely: 2**-40) could cross it."""
    b = Fraction(bound)
    return all(
        (err * PROMOTION_MARGIN <= b or err >= b * PROMOTION_MARGIN) and abs(err - b) > 2.0**-40 for err in errors
    )


def _random_product(rng: np.random.Generator, fmt: str) -> float:
    """The product of two positive values of fmt, normal or subnormal; one time in four a value of
    fmt times a power of two (at most 3 significant bits: its binades' groups fit exactly)."""
    f = get_format(fmt)
    if rng.random() < 0.25:
        return float(rng.choice([1.0, 1.25, 1.5, 1.75])) * 2.0 ** int(rng.integers(-12, 13))
    a, b = (
        max(
            float(round_to(float(np.exp2(rng.uniform(f.emin - f.man_bits, f.emax + 0.8))), fmt, saturate=True)),
            f.smallest_subnormal,
        )
        for _ in range(2)
    )
    return a * b


def _promotion_case(
    rng: np.random.Generator, p: float, K: int, acc: tuple[int, int], tight: bool, first: bool = False
) -> Case | None:
    """A bound TIGHT_PROMOTION above or below one error (tight), or log-uniform between two
    neighbouring errors, below all or above all; None if no bound is clear. ``first``: just above
    the first error above the floor (where a narrow accumulator's first groups are cut)."""
    errors = [err for _, err in copies_errors(p, K, *acc)]
    if first:
        targets = [err for err in errors if err > TIGHT_FLOOR]
        if not targets:
            return None
        bound = float(targets[0] * Fraction(TIGHT_PROMOTION))
    elif tight:
        targets = [err for err in errors if err > TIGHT_FLOOR]
        if not targets:
            return None
        # the first error above the floor (few bits lost: a slip in one cut moves it past the
        # margin), or one where the cut of the partial sum carried in changes S_N (rarely: most
        # sums are whole multiples of the quantum when they enter a binade), or any
        sum_cut = [
            err
            for N, err in copies_errors(p, K, *acc)
            if err > TIGHT_FLOOR
            and narrow_sum_of_copies(p, N // acc[1], *acc, cut_sum=False) != (1 - err) * N * Fraction(p)
        ]
        r = rng.random()
        if r < 0.4 and sum_cut:
            err = sum_cut[int(rng.integers(len(sum_cut)))]
        elif r < 0.65:
            err = targets[0]
        else:
            err = targets[int(rng.integers(len(targets)))]
        bound = float(err * Fraction(TIGHT_PROMOTION) ** int(rng.choice([-1, 1])))
    else:
        positive = sorted({float(err) for err in errors if err > 0}) or [2.0**-30]
        edges = [positive[0] / 64, *positive, min(positive[-1] * 4, 2.0)]
        i = int(rng.integers(len(edges) - 1))
        bound = float(np.exp(rng.uniform(np.log(edges[i]), np.log(edges[i + 1]))))
    return Case((p, K, bound, *acc)) if _clear(bound, errors) else None


def _promotion_cases(rng: np.random.Generator) -> list[Case]:

    def tight(p, K, acc, N, side):
        err = dict(copies_errors(p, K, *acc))[N]
        return (p, K, float(err * Fraction(TIGHT_PROMOTION) ** side), *acc)

    cases = [
        Case((1.0, 4096, 1e-3, 14, 32), label="p = 1, chapter 07's accumulator: exact up to 2**14, so K = 4096 itself"),
        Case(
            tight(1.0, 2**40, (14, 32), 2**15, -1),
            label="p = 1, K = 2**40, a bound just below 1/2: the sum stalls at exactly 2**14, 16384",
        ),
        Case((1.0, 2**40, 1e-3, 14, 32), label="p = 1, K = 2**40, 1e-3: past the stall every error is large, 16384"),
        Case((0.875, 2**30, 1e-2, 24, 1), label="24 bits, each product aligned alone (group 1), p = 7/8: 2**21"),
        Case(
            (2.0**-18, 2**20, 0.5, 10, 64),
            label="p = 2**-18, a bound equal to the error at 2048, exactly 1/2 ('at most' counts it): 2048",
        ),
        Case((1.875 * 1.875, 2**24, 1e-9, 16, 16), label="p = 1.875**2 (8 significant bits), exact up to 256 only"),
        Case((3.0, 512, 0.9, 10, 16), label="a bound above every error: K itself"),
        Case(
            tight(1.875 * 1.75, 2**16, (12, 16), 256, -1),
            label="12 bits, groups of 16, a bound just below the error at 256: 128",
        ),
        Case(
            tight(1.875 * 1.75, 2**16, (12, 16), 256, 1),
            label="12 bits, groups of 16, a bound just above the error at 256: 256",
        ),
        Case(
            tight(1.875 * 1.875, 2**14, (12, 64), 128, 1),
            label="12 bits, groups of 64, p = 1.875**2: the first group is exact; just above the error at 128",
        ),
        Case(
            tight(1.875 * 1.75, 2**20, (10, 64), 128, 1),
            label="10 bits, groups of 64, an 8-bit p: just above the first error, at 128",
        ),
        Case(
            tight(1.25 * 1.125, 2**36, (24, 4), 2**25, -1),
            label="24 bits, groups of 4, just below the error at 2**25: 2**24",
        ),
        Case(
            tight(1.25 * 1.125, 2**36, (24, 4), 2**25, 1),
            label="24 bits, groups of 4, just above the error at 2**25: 2**25",
        ),
        Case(
            (1.75 * 1.125, 1024, 0.1395, 11, 32),
            label="11 bits, groups of 32, p = 1.75 * 1.125 (32 p is 2016, one p below 2048):"
            " the first group's sum is aligned to itself, not to it plus p: 512",
        ),
    ]
    labelled = len(cases)
    while len(cases) < labelled + 60:
        fmt = PROMOTION_FORMATS[int(rng.integers(2))]
        p = _random_product(rng, fmt)
        if rng.random() < 1 / 6:
            acc = CHAPTER_ACCUMULATOR
        else:
            acc = (int(rng.choice(PROMOTION_BITS)), int(rng.choice(PROMOTION_GROUPS)))
        K = 2 ** int(rng.integers(max(7, acc[1].bit_length()), PROMOTION_LOG2_K_MAX + 1))
        case = _promotion_case(rng, p, K, acc, tight=(len(cases) - labelled) % 4 != 3)
        if case is not None:
            cases.append(case)
    # and a narrow accumulator with groups of 64, an e4m3 product of at least 6 significant bits, a
    # bound just above the first error: where the first groups' alignment decides what is cut
    while len(cases) < labelled + 72:
        p = _random_product(rng, "e4m3fn")
        if Fraction(p).numerator.bit_length() < 6:
            continue
        acc = (int(rng.integers(10, 13)), 64)
        K = 2 ** int(rng.integers(7, PROMOTION_LOG2_K_MAX + 1))
        case = _promotion_case(rng, p, K, acc, tight=True, first=True)
        if case is not None:
            cases.append(case)
    # and a product of ALIGNMENT_TRAPS, a bound just above or below an error that aligning to S + p
    # would change past it
    while len(cases) < labelled + 76:
        P, group, acc_bits = ALIGNMENT_TRAPS[int(rng.integers(len(ALIGNMENT_TRAPS)))]
        # p = P * 2**k in [2**-12, 2**13): a product of two e4m3fn values
        p = math.ldexp(P, int(rng.integers(-12, 13)) - (P.bit_length() - 1))
        K = 2 ** int(rng.integers(max(7, group.bit_length()), PROMOTION_LOG2_K_MAX + 1))
        case = _alignment_case(rng, p, K, acc_bits, group)
        if case is not None:
            cases.append(case)
    return cases


def _alignment_case(rng: np.random.Generator, p: float, K: int, acc_bits: int, group: int) -> Case | None:
    """A bound TIGHT_PROMOTION above or below an error whose N the sum aligned to S + p answers
    differently; None if there is none for this K, or the bound is not clear."""
    errors = copies_errors(p, K, acc_bits, group)
    choices = []
    for N, err in errors:
        slipped = narrow_sum_of_copies(p, N // group, acc_bits, group, align_with_p=True)
        if err > TIGHT_FLOOR and slipped != (1 - err) * N * Fraction(p):
            choices += [(err, side) for side in (-1, 1)]
    if not choices:
        return None
    err, side = choices[int(rng.integers(len(choices)))]
    bound = float(err * Fraction(TIGHT_PROMOTION) ** side)
    if not _clear(bound, [e for _, e in errors]):
        return None
    b = Fraction(bound)
    within = [N for N, e in errors if e <= b]
    slipped = [
        N
        for N, _ in errors
        if 1 - narrow_sum_of_copies(p, N // group, acc_bits, group, align_with_p=True) / (N * Fraction(p)) <= b
    ]
    return Case((p, K, bound, acc_bits, group)) if max(slipped, default=None) != max(within, default=None) else None


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


#: What an answer may not call (Exercise.forbidden): numpy and round_to only.
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.scaling", "nbhelpers.scaled_gemm", "nbhelpers.tensor_cores")
#: What its functions may use besides their notebook's own code: see Exercise.tools.
TOOLS = COMPUTING_TOOLS + ("nbhelpers.formats", "nbhelpers.rounding", "nbhelpers.recipes")

EXERCISES = [
    Exercise(
        "ex07.mx_exponent_range",
        "Which amax gets which MX exponent",
        4,
        mx_exponent_range_ref,
        _mx_cases,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex07.blockwise_scaled_gemm",
        "Promoting a block-scaled GEMM",
        5,
        blockwise_scaled_gemm_ref,
        _gemm_cases,
        compare=_within_fp32_error,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex07.largest_promotion_interval",
        "How often to promote a narrow accumulator",
        4,
        largest_promotion_interval_ref,
        _promotion_cases,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex07.two_level_scales",
        "Two-level block scales and their bytes",
        4,
        two_level_scales_ref,
        _two_level_cases,
        compare=_two_level_compare,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.IMPLEMENT,
    ),
]
