"""Chapter 03 exercises: the fp32-accumulated GEMM. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

The references are the course's tested helpers in :mod:`nbhelpers.accumulation`; edge cases come
first, then random cases from the seed. Inputs are bf16 values held in float64 arrays, so every
product is exact and every expected result is a definite set of bits: the comparisons are
bit-exact, except that +0.0 and -0.0 count as equal (an accumulator that starts from its first
product instead of from zero may produce either for an exactly cancelling sum, and nothing in
the chapter depends on the sign of a zero). ``relative_error`` is the exception: norms may be
computed in any order, so it is compared with a relative tolerance (:func:`nbhelpers.comparators.close_to`).
``fool_the_tensor_core`` is a construction (:func:`fool_the_tensor_core_ref`): the student returns
inputs with a property, and the check judges the property itself with the GPU's tensor-core model
(:data:`nbhelpers.tensor_cores.TENSOR_CORES`) and exact sums, since many answers are right.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..accumulation import emulated_dot, emulated_matmul
from ..metrics import relative_error
from ..tensor_cores import TENSOR_CORES, accumulator_probe, tensor_core_group_sum
from ..comparators import close_to, same_value_up_to_zero_sign
from ..exercise_types import Case, Exercise
from ..formats import ulp
from ..rounding import round_to


def _bf16(x) -> np.ndarray:
    return round_to(np.asarray(x, dtype=np.float64), "bf16")


# ------------------------------------------------------------------ 1. the relative error

# Frobenius norms computed by another formula (np.linalg.norm, sqrt of a sum of squares, in any
# order) differ from the reference by a few float64 ulps, about 1e-15 relative; a wrong norm
# (the largest element, a missing square root) or the wrong denominator differs by far more.
_close = close_to(1e-12)


def relative_error_ref(C, C_ref) -> float:
    """||C - C_ref||_F / ||C_ref||_F; 0.0 if both are zero, inf if only C_ref is."""
    return relative_error(C, C_ref)


def _relative_error_cases(rng: np.random.Generator) -> list[Case]:
    z = np.zeros((3, 4))
    one = np.ones((2, 2))
    cases = [
        Case((one, one), label="identical: 0.0"),
        Case((z, z.copy()), label="both zero: 0.0"),
        Case((one, np.zeros((2, 2))), label="C_ref zero, C not: inf"),
        Case((np.array([[3.0, 0.0]]), np.array([[0.0, 4.0]])), label="3-4-5: ||(3, -4)|| / 4 = 1.25"),
        Case((np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0])), label="1-D arrays"),
        Case((np.array([[2.0]]), np.array([[1.0]])), label="1 x 1"),
        Case(
            (np.array([[1.0, 100.0], [1.0, 1.0]]), np.array([[0.0, 100.0], [1.0, 1.0]])),
            label="one small element wrong: the norm weighs large elements",
        ),
        Case((-one, one), label="sign flipped: 2.0"),
    ]
    for _ in range(40):
        shape = tuple(int(s) for s in rng.integers(1, 9, size=int(rng.integers(1, 4))))
        scale = 2.0 ** int(rng.integers(-20, 20))
        C_ref = rng.standard_normal(shape) * scale
        C = C_ref * (1 + rng.standard_normal(shape) * 10.0 ** float(rng.uniform(-8, 0)))
        r = rng.random()
        if r < 0.25:  # a zero reference: 0.0 if C is zero too, inf if not
            C_ref = np.zeros(shape)
            C = np.zeros(shape) if rng.random() < 0.5 else C * (rng.random(shape) < 0.3)
        elif r < 0.35:  # C equal to C_ref
            C = C_ref.copy()
        elif r < 0.5:  # the error sits where C_ref is zero
            C_ref = C_ref * (rng.random(shape) < 0.5)
        cases.append(Case((C, C_ref)))
    return cases


# ------------------------------------------------------------------ 2. output rounding: once vs every step


def round_once_and_every_step_ref(a, b) -> tuple[float, float]:
    """(fp32 sequential dot product rounded once to bf16, bf16-accumulated dot product)."""
    once = float(round_to(emulated_dot(a, b, "bf16", "fp32"), "bf16"))
    every = float(emulated_dot(a, b, "bf16", "bf16"))
    return once, every


def _random_bf16_vector(rng: np.random.Generator, K: int) -> np.ndarray:
    x = rng.standard_normal(K) * 2.0 ** rng.integers(-3, 4, size=K)
    x = _bf16(x)
    x[x == 0] = 1.0  # no zero products: nothing hinges on the sign of a zero
    return x


def _dot_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for first in (True, False):
        A, B = accumulator_probe(8, tiny_first=first)
        cases.append(
            Case(
                (A[0].copy(), B[:, 0].copy()),
                label=f"probe, tiny terms {'first' if first else 'last'}: 1 + 2**-8 is a bf16 tie",
            )
        )
    cases += [
        Case((np.ones(1), np.array([3.0])), label="K = 1"),
        Case((np.ones(600), np.full(600, 2.0**-9)), label="equal small terms: a bf16 sum stalls"),
        Case((np.ones(300), np.ones(300)), label="sum of ones: bf16 stops at 256"),
        Case(
            (np.r_[1.0, np.full(64, 1.0)], np.r_[1.0, np.full(64, 2.0**-8)]),
            label="1 then 64 terms of 2**-8: each is a bf16 tie",
        ),
        Case((np.array([1.0, 1.0, -1.0]), np.array([2.0**20, 1.0, 2.0**20])), label="cancellation"),
        Case(
            (np.array([1.5, -1.5, 1.0]), np.array([3.0, 3.0, 2.0**-30])), label="exact cancellation, then a tiny term"
        ),
        Case((np.full(5, 1.0 + 2.0**-7), np.full(5, 1.0 + 2.0**-7)), label="products with 16 significant bits"),
    ]
    for _ in range(60):
        if rng.random() < 0.25:
            cases.append(Case(_tie_then_tiny(rng)))
            continue
        K = int(rng.integers(1, 400))
        a, b = _random_bf16_vector(rng, K), _random_bf16_vector(rng, K)
        if rng.random() < 0.3:  # same signs: the sum grows, the bf16 accumulator lags
            a, b = np.abs(a), np.abs(b)
        cases.append(Case((a, b)))
    return cases


def _tie_then_tiny(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random probe: random products whose fp32 sum is exact, a few more that bring it to a
    tie between two bf16 neighbours, then tiny products below half an fp32 spacing. fp32 drops
    the tiny ones and the final rounding to bf16 sees the tie; a wider sum tips it (random
    products alone almost never end on a bf16 tie, so only cases like these tell)."""
    K = int(rng.integers(0, 300))
    m = 2.0 ** int(rng.integers(-6, 7))  # every product a multiple of m * 2**-10, the sum far below 2**24 of those
    a = _bf16(rng.uniform(1, 16, K) * rng.choice([-1.0, 1.0], K))
    b = m * 2.0 ** rng.integers(0, 4, K)
    total = float(np.sum(a * b))  # exact
    r = float(_bf16(total)) if total != 0 else m
    spacing = float(ulp(r, "bf16"))
    tie = r + math.copysign(spacing / 2, r)  # halfway to the next bf16 value away from zero
    pieces, rest = [], tie - total  # split the step to the tie into bf16 values (8 bits each)
    while rest != 0:
        pieces.append(float(round_to(rest, "bf16", "toward_zero")))
        rest -= pieces[-1]
    e = int(np.floor(np.log2(abs(tie))))
    tiny = _bf16(rng.uniform(1, 2, int(rng.integers(1, 4))) * 2.0 ** (e - 26 - rng.integers(0, 4)))
    # mostly toward the odd neighbour, so that a sum that kept them ends elsewhere than the tie's even one
    away = float(_bf16(tie)) == r  # r is the even neighbour: the odd one is away from zero
    tiny *= (
        math.copysign(1.0, r) * (1.0 if away else -1.0) if rng.random() < 0.8 else rng.choice([-1.0, 1.0], tiny.size)
    )
    a = np.r_[a, np.ones(len(pieces)), np.ones(tiny.size)]
    b = np.r_[b, pieces, tiny]
    return a, b


# ------------------------------------------------------------------ 3. blocked GEMM with fp32 accumulators


def blocked_matmul_fp32_ref(A, B, block: int) -> np.ndarray:
    """fp32 partial sums of ``block`` consecutive products, added into an fp32 outer accumulator."""
    return emulated_matmul(A, B, "bf16", "fp32", order="blocked", block=int(block))


def _random_bf16_matrix(rng: np.random.Generator, shape) -> np.ndarray:
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 7, size=shape)
    return _bf16(x)


def _blocked_cases(rng: np.random.Generator) -> list[Case]:
    A1, B1 = accumulator_probe(6, tiny_first=False, M=2, N=3)
    cases = [
        Case(
            (A1, B1, 2), label="probe (tiny terms last) in blocks of 2: each pair of tiny terms is a tie at 1 + 2**-8"
        ),
        Case((A1, B1, 1), label="block = 1: sequential"),
        Case((A1, B1, 8), label="block >= K: one block, sequential"),
        Case((np.ones((1, 5)), np.ones((5, 1)), 2), label="K = 5 in blocks of 2: a short last block"),
        Case((np.ones((1, 1)), np.full((1, 1), 3.0), 4), label="K = 1"),
    ]
    # 1 followed by many terms a quarter of fp32's spacing at 1: sequential loses them, blocks keep them
    K = 129
    a = np.ones((1, K))
    b = np.r_[1.0, np.full(K - 1, 2.0**-25)].reshape(K, 1)
    cases += [
        Case((a, b, 32), label="1 + 128 terms of 2**-25 in blocks of 32"),
        Case((a, b, 1), label="1 + 128 terms of 2**-25 one at a time (all lost)"),
    ]
    for _ in range(50):
        M, N = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        K = int(rng.integers(1, 300))
        block = int(rng.choice([1, 2, 3, 4, 7, 8, 16, 32, 64, 100]))
        r = rng.random()  # over-sample the shapes of the split: whole blocks, one block, one product over
        if r < 0.45:
            K = int(rng.integers(1, block + 1)) if r < 0.15 else block * int(rng.integers(1, 4)) + (r >= 0.3)
        cases.append(Case((_random_bf16_matrix(rng, (M, K)), _random_bf16_matrix(rng, (K, N)), block)))
    return cases


# ------------------------------------------------------------------ 4. one tensor-core group


def tensor_core_group_ref(c: float, products, align_bits: int = 23) -> float:
    """Align c and the products to the largest exponent, truncate, add exactly, truncate to fp32."""
    return tensor_core_group_sum(float(c), np.asarray(products, dtype=np.float64), int(align_bits))


def _group_cases(rng: np.random.Generator) -> list[Case]:
    s24 = 2.0**-24
    cases = [
        Case((1.0, np.full(8, 1.5 * s24)), label="8 products of 0.75 fp32 spacings: all truncated away"),
        Case((1.0, np.full(8, -1.5 * s24)), label="negative small products truncate toward zero (to 0)"),
        Case((1.0, np.array([-3.0 * s24, 2.0**-20])), label="a negative product loses its low bits toward zero"),
        Case((2.0**-10, np.array([1.0, 3.0 * 2.0**-40])), label="a product is the largest: c is truncated too"),
        Case((0.0, np.zeros(4)), label="all zero"),
        Case((0.0, np.array([1.0, 2.0**-23, 2.0**-24])), label="c = 0: alignment to the largest product"),
        Case((1.5, np.array([-1.5])), label="exact cancellation"),
        Case((2.0 - 2.0**-23, np.array([2.0**-23, 2.0**-23])), label="the sum carries into the next binade"),
        Case(
            (2.0 - 2.0**-23, np.array([1.0 - 2.0**-24, 2.0**-23])),
            label="carry: the final truncation to fp32 drops a bit",
        ),
        Case((1.0, np.array([0.75, 0.375, 0.1875]), 3), label="align_bits = 3: only 3 bits below the leading one"),
        Case((-1.0, np.array([0.3, -0.7]), 5), label="align_bits = 5, mixed signs"),
        Case((1.0, np.array([])), label="no products: c passes through"),
        Case((-(2.0**100), np.array([2.0**76, 2.0**75])), label="large exponents"),
    ]
    for _ in range(80):
        g = int(rng.integers(1, 17))
        align_bits = int(rng.choice([3, 5, 8, 11, 16, 23, 23, 23, 30]))
        if rng.random() < 0.2:  # more bits kept than fp32 holds: the final truncation to fp32 decides
            align_bits = int(rng.integers(24, 31))
        a, b = _random_bf16_vector(rng, g), _random_bf16_vector(rng, g)
        products = a * b * 2.0 ** rng.integers(-12, 3, size=g)  # exact: bf16 x bf16 x a power of two
        c = float(round_to(rng.standard_normal() * 2.0 ** int(rng.integers(-4, 8)), "fp32"))
        r = rng.random()
        if r < 0.15:
            c = 0.0
        elif r < 0.3:  # c far larger than every product: the products lose most of their bits
            c = float(round_to(rng.standard_normal() * 2.0 ** int(rng.integers(10, 30)), "fp32"))
        if rng.random() < 0.15:
            products[rng.random(g) < 0.5] = 0.0
        if rng.random() < 0.3:  # same signs, as in a sum that only grows
            c, products = abs(c), np.abs(products)
        cases.append(Case((c, products, align_bits)))
    return cases


# ------------------------------------------------------------------ 5. fool the tensor core

_FOOL_GPUS = ("V100", "A100", "H100")  # the established rows of TENSOR_CORES
_FP16_MAX = 65504.0


def fool_top_exponent(gpu: str) -> int:
    """The largest e for which the cases of :func:`fool_the_tensor_core_ref` draw |exact| in
    [2**e, 2**(e+1)): ``14 - align_bits`` (V100: -9, A100: -10, H100: -11).

    Why an answer exists there: a term of exponent E (|P| in [2**E, 2**(E+1))) that is the
    largest in the group cuts every other term to a multiple of 2**(E - align_bits), so a term
    below that vanishes. With E = e + align_bits + 1 the cut is 2**(e+1) > |exact|, and
    2**E <= 2**15, the largest power of two in fp16, as long as e <= 14 - align_bits."""
    return 14 - TENSOR_CORES[gpu].align_bits


def fool_the_tensor_core_example(gpu: str, exact: float) -> tuple[np.ndarray, np.ndarray]:
    """One answer: the products P, -P and exact (then zeros), with P a power of two large enough
    that the model's alignment to P cuts ``exact`` to nothing; the model returns 0."""
    spec = TENSOR_CORES[gpu]
    e = math.frexp(abs(exact))[1] - 1
    P = 2.0 ** (e + spec.align_bits + 1)
    a, b = np.zeros(spec.group("fp16")), np.zeros(spec.group("fp16"))
    a[:3], b[:3] = [P, -P, exact], 1.0
    return a, b


class FoolTheTensorCoreTarget:
    """What :func:`fool_the_tensor_core_ref` expects: for ``gpu``, two arrays of ``length`` fp16
    values whose exact dot product is ``exact`` and on which that GPU's tensor-core model is off
    by at least |exact|/2; ``example`` is one such pair. The check judges the property; the
    example is not compared with anything (many answers are right): it shows that the case is
    solvable (tests/test_exercises_ch03.py)."""

    __slots__ = ("gpu", "exact", "length", "example")

    def __init__(self, gpu: str, exact: float, length: int, example) -> None:
        self.gpu, self.exact, self.length, self.example = gpu, exact, length, example

    def __repr__(self) -> str:
        return (
            f"a, b: {self.length} fp16 values each, every |a[i]*b[i]| <= 65504, sum(a*b) == "
            f"{self.exact!r} exactly, and the {self.gpu} model off by >= |{self.exact!r}|/2"
        )


def _fp16_vector(v, name: str, n: int) -> np.ndarray | str:
    """v as a new float64 array of n fp16 values, or the reason why it is not one."""
    want = f"{name}: expected a 1-D array of {n} fp16 values"
    if v is None or isinstance(v, (str, bytes, dict)) or np.ndim(v) != 1:
        return want
    if np.iscomplexobj(v):  # float64 would silently drop the imaginary parts
        return want + " (got complex numbers)"
    try:
        x = np.array(v, dtype=np.float64)  # a copy: the student's array is never touched
    except Exception:  # noqa: BLE001 - a student's odd object
        return want
    if x.shape != (n,):
        return f"{name} has {x.size} values, expected {n}"
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        return f"{name}[{bad[0]}] is {float(x[bad[0]])!r}, not a finite number"
    rounded = round_to(x, "fp16")
    bad = np.flatnonzero(rounded != x)
    if bad.size:
        return f"{name}[{bad[0]}] = {float(x[bad[0]])!r} is not an fp16 value (it rounds to {float(rounded[bad[0]])!r})"
    return x


def _fool_reason(got, gpu: str, exact: float) -> str | None:
    """None if ``got`` has the property of :func:`fool_the_tensor_core_ref` for (gpu, exact)."""
    spec = TENSOR_CORES[gpu]
    n = spec.group("fp16")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (a, b) of arrays, got {type(got).__name__}"
    vectors = [_fp16_vector(v, name, n) for v, name in zip(got, "ab")]
    for v in vectors:
        if isinstance(v, str):
            return v
    a, b = vectors
    products = a * b  # exact: 11 x 11 significant bits, far inside float64's range
    bad = np.flatnonzero(np.abs(products) > _FP16_MAX)
    if bad.size:
        return f"a[{bad[0]}]*b[{bad[0]}] = {float(products[bad[0]])!r} is beyond fp16's largest value 65504"
    if math.fsum([*products.tolist(), -exact]) != 0:  # fsum is correctly rounded: 0 only if exact
        return f"the exact dot product is {math.fsum(products.tolist())!r}, not {exact!r}"
    got_tc = float(spec.matmul(a[None, :], b[:, None], "fp16", "fp32")[0, 0])
    if 2 * abs(Fraction(got_tc) - Fraction(exact)) < abs(Fraction(exact)):
        return f"the {gpu} model returns {got_tc!r}: off by {abs(got_tc - exact)!r}, less than half of |{exact!r}|"
    return None


def fool_the_tensor_core_ref(gpu: str, exact: float) -> FoolTheTensorCoreTarget:
    """The property the student's pair must have, with the course's example (which
    tests/test_exercises_ch03.py verifies has it); the check judges the property alone."""
    spec = TENSOR_CORES[gpu]
    return FoolTheTensorCoreTarget(gpu, float(exact), spec.group("fp16"), fool_the_tensor_core_example(gpu, exact))


def _fool_compare(got, expected: FoolTheTensorCoreTarget) -> str | None:
    try:
        return _fool_reason(got, expected.gpu, expected.exact)
    except Exception as e:  # noqa: BLE001 - a hostile object: a failed case, never a crash
        return f"could not judge the pair ({type(e).__name__})"


def _fool_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for gpu in _FOOL_GPUS:
        top = fool_top_exponent(gpu)
        cases += [
            Case((gpu, 2.0**top), label=f"{gpu}: 2**{top}, the top of the cases' range"),
            Case(
                (gpu, -(2.0 ** (top + 1) - 2.0 ** (top - 10))),
                label=f"{gpu}: the largest fp16 value below 2**{top + 1}, negative",
            ),
            Case((gpu, 2.0**-24), label=f"{gpu}: 2**-24, fp16's smallest subnormal"),
        ]
    for i in range(15):  # every GPU in turn; half of them in the top binade, where fp16's range is tight
        gpu = _FOOL_GPUS[i % 3]
        top = fool_top_exponent(gpu)
        e = top if rng.random() < 0.5 else int(rng.integers(max(-24, top - 12), top))
        exact = float(round_to(rng.uniform(1, 2) * 2.0**e, "fp16", "toward_zero"))  # in [2**e, 2**(e+1))
        cases.append(Case((gpu, exact * float(rng.choice([-1.0, 1.0])))))
    return cases


EXERCISES = [
    Exercise(
        "ex03.relative_error",
        "The relative error of a GEMM",
        2,
        relative_error_ref,
        _relative_error_cases,
        compare=_close,
    ),
    Exercise(
        "ex03.round_once_and_every_step",
        "Round the output once or at every step",
        3,
        round_once_and_every_step_ref,
        _dot_cases,
        compare=same_value_up_to_zero_sign,
    ),
    Exercise(
        "ex03.blocked_matmul_fp32",
        "A blocked GEMM with fp32 accumulators",
        5,
        blocked_matmul_fp32_ref,
        _blocked_cases,
        compare=same_value_up_to_zero_sign,
    ),
    Exercise(
        "ex03.tensor_core_group",
        "One tensor-core group: align, truncate, add",
        5,
        tensor_core_group_ref,
        _group_cases,
        compare=same_value_up_to_zero_sign,
    ),
    Exercise(
        "ex03.fool_the_tensor_core",
        "Fool the tensor core: inputs its alignment gets wrong",
        5,
        fool_the_tensor_core_ref,
        _fool_cases,
        compare=_fool_compare,
    ),
]
