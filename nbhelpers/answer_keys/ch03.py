"""Chapter 03 exercises: the fp32-accumulated GEMM. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Four kinds of answer, each judged by something the student's route does not share:

- ``first_inexact_K`` and ``once_and_every_step`` are predictions (closed forms worked out on
  paper), for fp32 and for accumulators of up to 60 mantissa bits, whose sums of 2**40 terms
  and more no loop runs. Their references follow the running sum in exact integers and
  Fractions instead: binade by binade, the first multiple of the product that is not a value of
  the accumulator; and the accumulators stepped one addition at a time, jumping over runs of
  additions that are exact. tests/test_exercises_ch03.py holds them to numpy's float32 sum and
  to one round_to at a time (fp32, bf16 and narrower accumulators). Compared bit-exactly.
- ``split_k_rescue`` is a construction: the student returns bf16 vectors whose split-K dot
  product (slices summed in fp32 with :func:`nbhelpers.accumulation.emulated_matmul`, the
  partial sums joined in the stated tree: :func:`split_k_matmul_ref`) is exact while the plain
  sequential fp32 dot product misses by a stated number of fp32 spacings; the check judges the
  property with exact sums.
- ``moved_accumulators`` is a prediction about the tensor-core model over ranges of up to every
  fp32 value: the reference runs the model (:meth:`TensorCoreSpec.matmul` with the incoming
  accumulators as C) on the first and last value of every binade of either sign and on zero, and
  counts the values of the binades it moves by their fp32 codes; tests/test_exercises_ch03.py
  holds it to the model run on every fp32 value of wide ranges.
- ``fool_the_tensor_core`` is a construction (:func:`fool_the_tensor_core_ref`): the student
  returns inputs with a property, and the check judges the property itself with the GPU's
  tensor-core model (:data:`nbhelpers.tensor_cores.TENSOR_CORES`) and exact sums, since many
  answers are right.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from ..accumulation import emulated_matmul
from ..comparators import same_value_up_to_zero_sign
from ..exercise_types import Case, Exercise, ExerciseKind
from ..rounding import round_to
from ..tensor_cores import TENSOR_CORES


def _bf16(x) -> np.ndarray:
    return round_to(np.asarray(x, dtype=np.float64), "bf16")


# ------------------------------------------------------------------ 1. the first K a sum of equal products gets wrong

#: the accumulators' mantissa bits the first two exercises ask about: fp32's 23 up to these
FIRST_INEXACT_MAX_MAN_BITS = 60
ONCE_MAX_MAN_BITS = 52  # the p-bit sum stays a float64


def _first_inexact_sum(x: Fraction, man_bits: int) -> int:
    """The first K at which a sequential sum of K copies of x > 0, in an accumulator of man_bits
    mantissa bits (nearest-even, no overflow or underflow), differs from K * x.

    While the additions are exact the running sum is k * x, so the first inexact one is at the
    first k whose k * x is not a value of the accumulator. A search over the binades the sum
    passes through: in [2**E, 2**(E+1)) the values are the multiples of 2**(E - man_bits), the
    multiples of x there are k * x for a range of k, and the first two k of the range are tested
    exactly (one of them is odd: when both are values, x is a multiple of the spacing, and so
    is every k * x in the binade)."""
    E = x.numerator.bit_length() - x.denominator.bit_length() - 1  # 2**E <= x, for a start
    while True:
        lo, hi = Fraction(2) ** E, Fraction(2) ** (E + 1)
        k_first = max(1, math.ceil(lo / x))
        gap = Fraction(2) ** (E - man_bits)
        for k in (k_first, k_first + 1):
            if lo <= k * x < hi and (k * x / gap).denominator != 1:
                return k
        E += 1


@functools.lru_cache(maxsize=1024)
def first_inexact_K_ref(a: float, b: float, man_bits: int) -> int:
    """The smallest K for which adding K products a*b one at a time into an accumulator of
    ``man_bits`` mantissa bits and fp32's exponent range (from zero, nearest-even) does not give
    K*a*b exactly (23: fp32). Exact arithmetic, binade by binade (:func:`_first_inexact_sum`);
    tests/test_exercises_ch03.py holds it to numpy's float32 sum and to one addition at a time
    with round_to for narrower accumulators."""
    x = abs(Fraction(float(a)) * Fraction(float(b)))
    m = int(man_bits)
    if x == 0 or not 1 <= m <= FIRST_INEXACT_MAX_MAN_BITS:
        raise ValueError(f"a*b nonzero, man_bits in [1, {FIRST_INEXACT_MAX_MAN_BITS}]; got {a!r}, {b!r}, {man_bits!r}")
    return _first_inexact_sum(x, m)


def _bf16_value(rng: np.random.Generator, lo: int, hi: int) -> float:
    """A random bf16 value: 8 significant bits, exponent in [lo, hi), either sign."""
    sig = int(rng.integers(128, 256)) / 128
    return float(rng.choice([-1.0, 1.0])) * sig * 2.0 ** int(rng.integers(lo, hi))


# significands with few bits (1, 1.5, 1.25, 1.75, ...): products with a small odd part, long exact runs
_FEW_BITS = (1.0, 1.5, 1.25, 1.75, 1.125, 1.375, 1.625, 1.875)


def _wide_man_bits(rng: np.random.Generator, hi: int) -> int:
    """fp32's 23 for half the cases; else 24 to hi mantissa bits, mostly 40 and more: sums of
    2**40 additions and more, which no loop runs."""
    r = rng.random()
    return 23 if r < 0.5 else int(rng.integers(40, hi + 1)) if r < 0.85 else int(rng.integers(24, 40))


def _first_inexact_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((1.0, 1.0, 23), label="fp32: a sum of ones"),
        Case((2.0**-20, 2.0**7, 23), label="fp32: a power of two, the same as a sum of ones"),
        Case((1.5, 1.0, 23), label="fp32: 1.5, odd part 3"),
        Case((-1.5, 1.5, 23), label="fp32: -2.25, odd part 9, a negative product"),
        Case((1.25, -3.0, 23), label="fp32: -3.75, odd part 15"),
        Case((255 / 128, 255 / 128, 23), label="fp32: the most significant bits a bf16 product has, odd part 255**2"),
        Case((1.0 + 2.0**-7, 3.0, 23), label="fp32: odd part 129 * 3"),
        Case((7.0, 2.0**-30, 23), label="fp32: 7 * 2**-30"),
        # accumulators wider than any loop reaches
        Case((1.0, 1.0, 52), label="52 mantissa bits (float64's precision): a sum of ones"),
        Case((1.5, 1.0, 40), label="40 mantissa bits: 1.5"),
        Case((255 / 128, -255 / 128, 47), label="47 mantissa bits: odd part 255**2"),
        Case((1.0 + 2.0**-7, 3.0, 60), label="60 mantissa bits: odd part 129 * 3"),
        Case((5.0, 2.0**-40, 31), label="31 mantissa bits: 5 * 2**-40"),
        Case((3.0, 3.0, 58), label="58 mantissa bits: odd part 9"),
        Case(
            (255 / 128 * 2.0**-20, -255 / 128 * 2.0**-20, 23),
            label="fp32: a product near 2**-40 whose bits reach 2**-54",
        ),
    ]
    for i in range(36):
        r = rng.random()
        if r < 0.1 or i % 15 == 7:  # a power of two: the sum of ones' answer, 2**(man_bits + 1) + 1
            a = float(rng.choice([-1.0, 1.0])) * 2.0 ** int(rng.integers(-20, 20))
            b = 2.0 ** int(rng.integers(-20, 20))
        elif r < 0.4:  # few significant bits: long runs, and the parity of K decides
            a = float(rng.choice(_FEW_BITS)) * float(rng.choice([-1.0, 1.0])) * 2.0 ** int(rng.integers(-20, 20))
            b = float(rng.choice(_FEW_BITS)) * 2.0 ** int(rng.integers(-20, 20))
        else:
            a, b = _bf16_value(rng, -20, 20), _bf16_value(rng, -20, 20)
        if i % 6 == 2:  # a product near the bottom of the range, its low bits far below 2**-40
            a, b = _bf16_value(rng, -20, -18), _bf16_value(rng, -20, -18)
        man_bits = _wide_man_bits(rng, FIRST_INEXACT_MAX_MAN_BITS)
        if i % 6 == 5:  # an odd part below 16 and 57 or more mantissa bits: answers past 2**53
            a = float(rng.choice(_FEW_BITS)) * float(rng.choice([-1.0, 1.0])) * 2.0 ** int(rng.integers(-20, 20))
            b = 2.0 ** int(rng.integers(-20, 20))
            man_bits = int(rng.integers(57, FIRST_INEXACT_MAX_MAN_BITS + 1))
        cases.append(Case((a, b, man_bits)))
    return cases


# ------------------------------------------------------------------ 2. 1 + n tiny terms: round once or at every step


def _round_int(N: int, p: int) -> int:
    """The integer N > 0 rounded to p significant bits, ties to even."""
    shift = N.bit_length() - p
    if shift <= 0:
        return N
    q, r = divmod(N, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q % 2 == 1):
        q += 1
    return q << shift


def _stepped_sum(n: int, j: int, man_bits: int) -> float:
    """1 + t + t + ... (n terms of t = 2**-j) in an accumulator of man_bits mantissa bits
    (nearest-even, no overflow), in exact integers: the sum is S * t. Stepped one addition at a
    time, except that a run of exact additions inside one binade is taken in one jump (once S and
    S + 1 are both values in one binade, its spacing is 1 and every S + k up to the binade's end
    is a value too); stops at a fixed point (the rounded S + 1 is S: every later step gives S
    again). At most a few steps a binade, so n up to 2**60 is quick. Returns S * t (exact:
    S <= 2**53)."""
    p = int(man_bits) + 1
    S, left = 2 ** int(j), int(n)
    while left:
        nxt = _round_int(S + 1, p)
        if nxt == S:
            break
        left -= 1
        if nxt == S + 1 and nxt.bit_length() == S.bit_length():  # exact, same binade
            k = min(left, (1 << nxt.bit_length()) - nxt)  # the exact steps still inside it, up to its end
            nxt, left = nxt + k, left - k
        S = nxt
    return math.ldexp(S, -int(j))


def once_and_every_step_ref(n: int, j: int, man_bits: int) -> tuple[float, float]:
    """(an accumulator of man_bits mantissa bits rounded once to bf16, a bf16 accumulator) for
    the products 1, then n times 2**-j, added in that order (man_bits 23: fp32)."""
    if not (int(n) >= 1 and 0 <= int(j) <= 30 and 8 <= int(man_bits) <= ONCE_MAX_MAN_BITS):
        raise ValueError(f"n >= 1, 0 <= j <= 30, 8 <= man_bits <= {ONCE_MAX_MAN_BITS}; got {n!r}, {j!r}, {man_bits!r}")
    once = float(round_to(_stepped_sum(n, j, man_bits), "bf16"))
    return once, _stepped_sum(n, j, 7)


def _once_every_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((1, 8, 23), label="1 + 2**-8: a bf16 tie, to even"),
        Case((1, 7, 23), label="1 + 2**-7: exact in bf16"),
        Case((300, 0, 23), label="a sum of ones: bf16 stops at 256"),
        Case((255, 0, 23), label="255 ones after the 1: 256, exact"),
        Case((1000, 9, 23), label="terms below half a bf16 spacing at 1"),
        Case((3, 24, 23), label="2**-24: a tie at 1 in fp32 too"),
        Case((2**24, 0, 23), label="fp32 stops at 2**24"),
        Case((2**40, 30, 23), label="2**40 terms of 2**-30 in fp32"),
        Case((2**16 + 2**9, 16, 23), label="the fp32 sum is a bf16 tie: 2 + 2**-7"),
        # accumulators wider than any loop reaches
        Case((2**52, 0, 52), label="52 mantissa bits (float64's precision): the ones stop at 2**53"),
        Case((2**60, 30, 45), label="45 mantissa bits: 2**60 terms of 2**-30 stop at 2**16"),
        Case((2**40, 0, 40), label="40 mantissa bits: 2**40 ones, exact"),
        Case((2**30 + 2**23, 30, 44), label="44 mantissa bits: the sum is a bf16 tie, 2 + 2**-7"),
        Case(((2**20 + 3 * 2**12 - 1) * 2**30, 30, 52), label="52 mantissa bits: a bf16 tie above an odd value"),
        Case((2**22 + 1, 30, 40), label="40 mantissa bits: 2**-30 above a bf16 tie, less than fp32 keeps"),
        Case((3 * 2**22 - 1, 30, 36), label="36 mantissa bits: 2**-30 below a bf16 tie above an odd value"),
        Case((3 * 2**38, 30, 38), label="38 mantissa bits: past the stopping point 2**9"),
    ]
    for _ in range(60):
        man_bits = _wide_man_bits(rng, ONCE_MAX_MAN_BITS)
        p = man_bits + 1
        j = int(rng.integers(0, 31))
        r = rng.random()
        if r < 0.2:  # around the bf16 accumulator's stopping point, 2**(8 - j) when j < 8
            n = max(1, 2**8 - 2**j + int(rng.integers(-3, 4))) if j < 8 else int(rng.integers(1, 2**12))
        elif r < 0.5:  # around the wide accumulator's stopping point, 2**(p - j) when j < p, or far past it
            j = int(rng.integers(0, min(p, 31)))
            past = int(2**p * rng.uniform(0.01, 8)) if rng.random() < 0.5 else int(rng.integers(-3, 4))
            n = max(1, 2**p - 2**j + past)
        elif r < 0.85:  # the exact sum on a bf16 tie (odd multiples of half a bf16 spacing), or next to it
            e = int(rng.integers(0, min(p - 8, 40)))  # the sum in [2**e, 2**(e+1)): half a bf16 spacing is 2**(e-8)
            j = int(rng.integers(max(0, 8 - e), min(31, p - e)))  # 2**-j divides half a spacing, the sum below 2**(p-j)
            # the sum is odd * 2**(e-8), in [2**e, 2**(e+1)), between the bf16 values lo and lo + 1
            # (in units of the spacing); mostly lo even, where nearest-even rounds down, not away
            lo = 2 * int(rng.integers(2**6, 2**7)) + int(rng.random() < 0.25)
            odd = 2 * lo + 1
            n = (odd * 2**j * 2**e) // 2**8 - 2**j + int(rng.choice([0, 0, 0, 0, -1, 1]))
            n = max(n, 1)
        elif r < 0.92:  # a wide exact sum one term off a bf16 tie, by less than fp32 keeps there: rounded
            # once it goes to the nearer bf16 value; through fp32 first it lands on the tie, which goes
            # to the even one (the other one: above the tie from an even value, below it to an odd one)
            man_bits = int(rng.integers(30, ONCE_MAX_MAN_BITS + 1))
            p = man_bits + 1
            e = int(rng.integers(0, min(p - 26, 40)))
            j = int(rng.integers(25 - e if e < 25 else 0, min(31, p - e)))
            lo = 2 * int(rng.integers(2**6, 2**7)) + int(rng.random() < 0.5)
            n = ((2 * lo + 1) * 2**j * 2**e) // 2**8 - 2**j + (1 if lo % 2 == 0 else -1)
        else:
            n = int(2 ** rng.uniform(0, min(p + 3, 60)))
        cases.append(Case((n, j, man_bits)))
    return cases


# ------------------------------------------------------------------ 3. split-K: slices in fp32, joined in a tree


def _fp32_tree(parts: list[np.ndarray]) -> np.ndarray:
    """Neighbours added in pairs, (0, 1), (2, 3), ..., each sum rounded to fp32 (a float64 sum of
    two fp32 values rounded once to fp32 is the correctly rounded fp32 sum: float64 has more than
    2 * 24 + 2 bits); an odd last one goes up a level unchanged; until one is left."""
    while len(parts) > 1:
        joined = [round_to(parts[i] + parts[i + 1], "fp32") for i in range(0, len(parts) - 1, 2)]
        parts = joined + parts[len(parts) - len(parts) % 2 :]
    return parts[0]


def split_k_matmul_ref(A, B, S: int) -> np.ndarray:
    """K cut into S slices of ceil(K / S) consecutive products (the last ones shorter or
    empty), each slice summed in fp32 in K order from zero, the S partial results joined by
    :func:`_fp32_tree`. (M, N) float64."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    (M, K), N, S = A.shape, B.shape[1], int(S)
    L = -(-K // S)
    parts = []
    for s in range(S):
        lo, hi = min(s * L, K), min((s + 1) * L, K)
        parts.append(emulated_matmul(A[:, lo:hi], B[lo:hi], "bf16", "fp32") if hi > lo else np.zeros((M, N)))
    return _fp32_tree(parts)


def split_k_rescue_example(K: int, S: int) -> tuple[np.ndarray, np.ndarray]:
    """One answer: the product 2**24 alone in slice 0 (the rest of it zeros), then ones in every
    other slice, an even number of them (a zero where a slice's length is odd). Sequentially each
    one meets 2**24 and ties back to it (fp32's spacing there is 2); split, the ones add up exactly
    in their slices and join 2**24 in pairs."""
    L = -(-K // S)
    a, b = np.zeros(K), np.zeros(K)
    a[0] = b[0] = 2.0**12
    for s in range(1, S):
        lo, hi = min(s * L, K), min((s + 1) * L, K)
        even = (hi - lo) // 2 * 2
        a[lo : lo + even] = b[lo : lo + even] = 1.0
    return a, b


def _rescue_reach(K: int, S: int) -> int:
    """What the course's example loses in the plain sum, in units of fp32's spacing at the exact
    dot product (2 there): half the ones it holds."""
    a, b = split_k_rescue_example(K, S)
    return int(np.count_nonzero(a == 1.0)) // 2


class SplitKRescueTarget:
    """What :func:`split_k_rescue_ref` expects: two arrays of K bf16 values whose split-K dot
    product (S slices, the tree) is exact, while the plain sequential fp32 dot product misses the
    exact one by at least ``lost`` units of fp32's spacing there; ``example`` is one such pair (the
    check judges the property, tests/test_exercises_ch03.py that the example has it)."""

    __slots__ = ("K", "S", "lost", "example")

    def __init__(self, K: int, S: int, lost: int, example) -> None:
        self.K, self.S, self.lost, self.example = K, S, lost, example

    def __repr__(self) -> str:
        return (
            f"a, b: {self.K} bf16 values each; split-K dot in {self.S} slices exact; the plain fp32 dot "
            f"off by >= {self.lost} fp32 spacing(s) at the exact value"
        )


def _bf16_vector(v, name: str, n: int) -> np.ndarray | str:
    """v as a new float64 array of n bf16 values, or the reason why it is not one."""
    return _format_vector(v, name, n, "bf16")


def _fp32_spacing(x: float) -> float:
    """fp32's spacing at x: 2**(e - 23) for |x| in [2**e, 2**(e+1)), the subnormal spacing below."""
    if x == 0:
        return 2.0**-149
    return 2.0 ** (max(math.frexp(abs(x))[1] - 1, -126) - 23)


def _rescue_reason(got, K: int, S: int, lost: int) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (a, b) of arrays, got {type(got).__name__}"
    vectors = [_bf16_vector(v, name, K) for v, name in zip(got, "ab")]
    for v in vectors:
        if isinstance(v, str):
            return v
    a, b = vectors
    products = a * b  # exact in float64: 8 x 8 significant bits
    if not np.all(np.isfinite(products)) or np.abs(products).max() > 2.0**100:
        return "the products must stay far inside fp32's range (|a[k]*b[k]| <= 2**100)"
    negative = np.flatnonzero(products < 0)
    if negative.size:
        k = int(negative[0])
        return f"a[{k}]*b[{k}] = {float(products[k])!r} is negative: every product must be 0 or more"
    exact = Fraction(0)
    for p in products.tolist():
        exact += Fraction(p)
    split = float(split_k_matmul_ref(a[None, :], b[:, None], S)[0, 0])
    if Fraction(split) != exact:
        return f"the split-K dot product in {S} slices gives {split!r}, not the exact {float(exact)!r}"
    plain = float(split_k_matmul_ref(a[None, :], b[:, None], 1)[0, 0])
    spacing = Fraction(_fp32_spacing(float(exact)))
    off = abs(Fraction(plain) - exact) / spacing
    if off < lost:
        return (
            f"the plain fp32 dot product gives {plain!r}, off from the exact {float(exact)!r} by {float(off):g} "
            f"spacings of fp32 there, fewer than {lost}"
        )
    return None


def split_k_rescue_ref(K: int, S: int, lost: int) -> SplitKRescueTarget:
    """The property the student's pair must have, with the course's example."""
    return SplitKRescueTarget(int(K), int(S), int(lost), split_k_rescue_example(K, S))


def _rescue_compare(got, expected: SplitKRescueTarget) -> str | None:
    try:
        return _rescue_reason(got, expected.K, expected.S, expected.lost)
    except Exception as e:  # a hostile object: a failed case, never a crash
        return f"could not judge the pair ({type(e).__name__})"


def _rescue_case(K: int, S: int, label: str = "") -> Case:
    """lost: half what the course's example reaches, at least one spacing."""
    return Case((K, S, max(1, _rescue_reach(K, S) // 2)), label=label)


def _rescue_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        _rescue_case(4, 2, "K = 4, S = 2: one slice besides the first"),
        _rescue_case(10, 4, "slices of 3, 3, 3, 1: odd lengths"),
        _rescue_case(5, 4, "slices of 2, 2, 1 and an empty one"),
        _rescue_case(64, 8, "eight slices of 8"),
        _rescue_case(1000, 7, "seven slices of 143"),
        _rescue_case(4096, 2, "two slices: the second carries everything"),
    ]
    while len(cases) < 36:
        S = int(rng.integers(2, 17))
        K = int(rng.integers(4, 17 * 300))
        if _rescue_reach(K, S) >= 2:  # a case the course's example answers with room to spare
            cases.append(_rescue_case(K, S))
    return cases


# ------------------------------------------------------------------ 4. the accumulators a group of small products moves

_TC_GPUS = ("V100", "A100", "H100")  # the established rows of TENSOR_CORES
_TC_IN = {"V100": "fp16", "A100": "bf16", "H100": "bf16"}  # the V100 has no bf16
#: the exponents k of the products p = 2**k the cases take: a product of two powers of two of the
#: GPU's input format (fp16: 2**-24 to 2**15; bf16 down to 2**-133), capped at 2**100 so that no
#: sum leaves fp32's range
_MOVED_K = {"fp16": (-48, 30), "bf16": (-266, 100)}


def _fp32_magnitude_blocks() -> list[tuple[float, float]]:
    """(first, last) of each run of fp32 magnitudes one binade wide: [2**E, 2**(E+1)) for E from
    -149 (the subnormals' binades: their spacing is 2**-149) to 127 (its last value is fp32's
    largest). Zero is not among them."""
    blocks = []
    for E in range(-149, 128):
        spacing = 2.0 ** (max(E, -126) - 23)
        blocks.append((2.0**E, 2.0 ** (E + 1) - spacing))
    return blocks


_FP32_BLOCKS = _fp32_magnitude_blocks()
_FP32_MAX = float(np.finfo(np.float32).max)


def _fp32_code_floor(y: float) -> int:
    """The code of the largest fp32 magnitude <= y (y >= 0), -1 if none; codes of nonnegative fp32
    values count them in order (0: zero, 1: 2**-149, ...)."""
    if y < 0:
        return -1
    v = float(round_to(min(y, _FP32_MAX), "fp32", "toward_zero"))
    return int(np.float32(v).view(np.uint32))


def _fp32_count(lo: float, hi: float) -> int:
    """How many fp32 magnitudes v (v >= 0) lie in [lo, hi]; lo, hi may be +-inf."""
    lo = max(float(lo), 0.0)
    if lo > hi:
        return 0
    below_lo = _fp32_code_floor(lo) + 1  # magnitudes <= lo
    if float(np.float32(min(lo, _FP32_MAX))) == lo or lo == 0.0:  # lo is one: it counts
        below_lo -= 1
    return max(0, _fp32_code_floor(hi) + 1 - below_lo)


def _moved_flags(gpu: str, p: float, n: int, values: np.ndarray) -> np.ndarray:
    """Whether one fused group of ``gpu``'s model (the incoming accumulator c, n products equal to
    p, the fp32 accumulator and the GPU's final rounding) returns something other than c, for
    each c of ``values``: one call of the model for all of them, the products made from two
    inputs of the GPU's format."""
    spec = TENSOR_CORES[gpu]
    k = math.frexp(p)[1] - 1
    C = np.asarray(values, dtype=np.float64)[None, :]
    A = np.full((1, n), 2.0 ** (k // 2))
    B = np.full((n, C.shape[1]), 2.0 ** (k - k // 2))
    out = spec.matmul(A, B, _TC_IN[gpu], "fp32", C=C)
    return out[0] != C[0]


def moved_accumulators_ref(gpu: str, p: float, n: int, a: float, b: float) -> int:
    """How many fp32 values c with a <= c <= b (+0 and -0 one value) one fused group of ``gpu``'s
    tensor-core model changes, with the incoming accumulator c and n products equal to p (a power
    of two). The model runs on the first and the last value of every binade of either sign, and
    on zero (one call, :func:`_moved_flags`); within a binade the two agree (an AssertionError
    otherwise: never, tests/test_exercises_ch03.py, which also holds the count to the model run on
    every fp32 value of wide ranges), and the binade's values in [a, b] are counted by their codes."""
    spec = TENSOR_CORES[gpu]
    n, p, a, b = int(n), float(p), float(a), float(b)
    lo_k, hi_k = _MOVED_K[_TC_IN[gpu]]
    k = math.frexp(p)[1] - 1
    if not (p > 0 and p == 2.0**k and lo_k <= k <= hi_k and 1 <= n <= spec.group(_TC_IN[gpu])):
        raise ValueError(f"p a power of two 2**{lo_k}..2**{hi_k}, 1 <= n <= the group size; got {p!r}, {n!r}")
    if math.isnan(a) or math.isnan(b):
        raise ValueError(f"a and b must not be NaN; got {a!r}, {b!r}")
    ends = np.array([v for block in _FP32_BLOCKS for v in block])
    flags = _moved_flags(gpu, p, n, np.concatenate([[0.0], ends, -ends]))
    zero, pos, neg = flags[0], flags[1 : 1 + ends.size].reshape(-1, 2), flags[1 + ends.size :].reshape(-1, 2)
    assert np.array_equal(pos[:, 0], pos[:, 1]) and np.array_equal(neg[:, 0], neg[:, 1]), (gpu, p, n)
    total = int(zero and a <= 0.0 <= b)
    for (first, last), moved_pos, moved_neg in zip(_FP32_BLOCKS, pos[:, 0], neg[:, 0]):
        if moved_pos:
            total += _fp32_count(max(first, a), min(last, b))
        if moved_neg:
            total += _fp32_count(max(first, -b), min(last, -a))
    return total


def _moved_edges(gpu: str, p: float, n: int) -> tuple[float, float]:
    """Where the moved values end on each side (from the reference's blocks): the smallest
    magnitude that is not moved, negative side and positive side (0.0 when none moves: the
    positive side with zero unmoved). For the cases' ends only, not for the check."""
    ends = np.array([first for first, _ in _FP32_BLOCKS] + [2.0**128])
    flags_neg = _moved_flags(gpu, p, n, -ends[:-1])
    flags_pos = _moved_flags(gpu, p, n, np.concatenate([[0.0], ends[:-1]]))
    neg = float(ends[int(np.argmin(np.append(flags_neg, False)))])
    pos = 0.0 if not flags_pos[0] else float(ends[int(np.argmin(np.append(flags_pos[1:], False)))])
    return neg, pos


def _near(rng: np.random.Generator, edge: float) -> float:
    """A float near ``edge`` (a power of two, or 0): on it, one fp32 spacing either side, or a few
    binades away with a random significand (no fp32 value)."""
    if edge == 0.0:
        edge = 2.0 ** int(rng.integers(-149, -120))
    r = rng.random()
    if r < 0.25:
        return edge
    if r < 0.5:
        with np.errstate(over="ignore"):
            e32 = np.float32(edge)
        return float(np.nextafter(e32, np.float32(0 if rng.random() < 0.5 else np.inf)))
    return float(rng.uniform(1, 2)) * edge * 2.0 ** int(rng.integers(-6, 6))


def _moved_cases(rng: np.random.Generator) -> list[Case]:
    inf = math.inf
    cases = []
    for gpu in _TC_GPUS:
        g = TENSOR_CORES[gpu].group(_TC_IN[gpu])
        cases += [
            Case((gpu, 1.0, 1, -inf, inf), label=f"{gpu}: p = 1, n = 1, every fp32 value"),
            Case((gpu, 2.0**-20, g, -inf, inf), label=f"{gpu}: p = 2**-20, a full group of {g}, every fp32 value"),
            Case((gpu, 2.0**-10, 3, -1.0, 1.0), label=f"{gpu}: three products, c in [-1, 1]"),
            Case((gpu, 1.0, 1, -0.0, 0.0), label=f"{gpu}: c = 0 only"),
            Case((gpu, 1.0, 2, 1.0, -1.0), label=f"{gpu}: a > b"),
        ]
    cases += [
        Case(("A100", 2.0**-160, 8, -inf, inf), label="A100: 8 * 2**-160 is below fp32's smallest subnormal"),
        Case(("H100", 2.0**-153, 16, -inf, inf), label="H100: 16 * 2**-153 is fp32's smallest subnormal"),
        Case(("H100", 2.0**-154, 15, -inf, inf), label="H100: 15 * 2**-154, just below it"),
        Case(("H100", 2.0**-150, 3, 0.0, inf), label="H100: 3 * 2**-150, c >= 0: the subnormals move"),
        Case(
            ("A100", 2.0**-151, 3, 0.0, inf),
            label="A100: 3 * 2**-151, in [2**-150, 2**-149), c >= 0: zero and the subnormals stay",
        ),
        Case(
            ("H100", 2.0**-150, 1, -inf, inf),
            label="H100: one product of 2**-150, every fp32 value: zero and the positive side stay",
        ),
        Case(("A100", 2.0**-266, 8, -inf, 0.0), label="A100: the smallest bf16 product, c <= 0"),
        Case(("V100", 2.0**30, 4, -inf, inf), label="V100: the largest fp16 product of powers of two"),
        Case(("H100", 2.0**100, 16, -inf, inf), label="H100: 16 * 2**100, c up to fp32's largest"),
        Case(("A100", 2.0**-5, 1, -(2.0**20), 2.0**19), label="A100: both ends on the edges, not moved"),
        Case(("A100", 2.0**-5, 1, -(2.0**20 - 2**-4), 2.0**19 - 2**-5), label="A100: one fp32 value inside each edge"),
    ]
    for i in range(63):
        gpu = _TC_GPUS[i % 3]
        lo_k, hi_k = _MOVED_K[_TC_IN[gpu]]
        g = TENSOR_CORES[gpu].group(_TC_IN[gpu])
        n = [1, 2, 1, 3, 4, int(rng.integers(1, g + 1)), g][(i // 3) % 7]
        if i % 8 == 7 and gpu != "V100":
            # n * p near fp32's smallest subnormal, 2**-149, below it or not: zero and the subnormals
            # (in turn; n * p of a count that is no power of two lies between two powers of two)
            # (n of 2 or more: whether n or p alone reaches 2**-149 matters)
            n = int(rng.integers(2, g + 1))
            t = -149 - int(rng.integers(1, 4)) if (i // 8) % 2 else -149 + int(rng.integers(0, 3))
            if i == 31:  # the first below: n * p in [2**-150, 2**-149), one binade under the bottom
                t = -150
            k = t - (n.bit_length() - 1)
        else:
            k = int(rng.integers(lo_k, hi_k + 1))
        p = 2.0**k
        neg, pos = _moved_edges(gpu, p, n)
        r = rng.random()
        if r < 0.15:  # everything
            a, b = -inf, inf
        elif r < 0.75:  # both ends near the edges of the moved values
            a, b = -_near(rng, neg), _near(rng, pos)
        elif r < 0.9:  # one side
            a, b = (-_near(rng, neg), -_near(rng, 0.0)) if rng.random() < 0.5 else (_near(rng, 0.0), _near(rng, pos))
        else:  # one side whole
            a, b = (-inf, 0.0) if rng.random() < 0.5 else (-0.0, inf)
        if i % 12 == 5:  # the nonnegative side from a = -0.0 (+0.0's code is 0, -0.0's is not)
            a = -0.0
        if i == 31:  # ... with zero in the range: a bottom taken one binade too low moves it
            a, b = min(a, -0.0), max(b, 0.0)
        cases.append(Case((gpu, p, n, a, b)))
    return cases


# ------------------------------------------------------------------ 5. fool the tensor core

_FOOL_GPUS = _TC_GPUS
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


def _format_vector(v, name: str, n: int, fmt: str) -> np.ndarray | str:
    """v as a new float64 array of n values of fmt ("fp16", "bf16"), or the reason why it is not one."""
    want = f"{name}: expected a 1-D array of {n} {fmt} values"
    if v is None or isinstance(v, (str, bytes, dict)) or np.ndim(v) != 1:
        return want
    if np.iscomplexobj(v):  # float64 would silently drop the imaginary parts
        return want + " (got complex numbers)"
    try:
        x = np.array(v, dtype=np.float64)  # a copy: the student's array is never touched
    except Exception:  # a student's odd object
        return want
    if x.shape != (n,):
        return f"{name} has {x.size} values, expected {n}"
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        return f"{name}[{bad[0]}] is {float(x[bad[0]])!r}, not a finite number"
    rounded = round_to(x, fmt)
    bad = np.flatnonzero(rounded != x)
    if bad.size:
        article = "an" if fmt.startswith("f") else "a"  # an fp16, a bf16
        return (
            f"{name}[{bad[0]}] = {float(x[bad[0]])!r} is not {article} {fmt} value "
            f"(it rounds to {float(rounded[bad[0]])!r})"
        )
    return x


def _fp16_vector(v, name: str, n: int) -> np.ndarray | str:
    """v as a new float64 array of n fp16 values, or the reason why it is not one."""
    return _format_vector(v, name, n, "fp16")


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
    except Exception as e:  # a hostile object: a failed case, never a crash
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


#: What an answer may not call (Exercise.forbidden). Exercises 3 and 5 may try candidates with the
#: chapter's emulations; 1, 2 and 4 may not run them.
FORBIDDEN = ("nbhelpers.answer_keys",)
#: Exercises 1, 2 and 4 predict: they may not run the sums and the tensor-core model the check runs.
EMULATIONS = FORBIDDEN + (
    "nbhelpers.accumulation",
    "nbhelpers.tensor_cores:tensor_core_matmul",
    "nbhelpers.tensor_cores:tensor_core_matmul_ref",
    "nbhelpers.tensor_cores:tensor_core_group_sum",
    "nbhelpers.tensor_cores:align_group",
    "nbhelpers.tensor_cores:_aligned_sum",
    "nbhelpers.tensor_cores:TensorCoreSpec.matmul",
)

EXERCISES = [
    Exercise(
        "ex03.first_inexact_K",
        "The first K a sum of equal products gets wrong",
        2,
        first_inexact_K_ref,
        _first_inexact_cases,
        forbidden=EMULATIONS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex03.once_and_every_step",
        "Round once or at every step: predict both",
        3,
        once_and_every_step_ref,
        _once_every_cases,
        compare=same_value_up_to_zero_sign,
        forbidden=EMULATIONS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex03.split_k_rescue",
        "A sum that split-K gets right and one accumulator gets wrong",
        5,
        split_k_rescue_ref,
        _rescue_cases,
        compare=_rescue_compare,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.CONSTRUCT,
    ),
    Exercise(
        "ex03.moved_accumulators",
        "Which accumulators a group of small products moves",
        3,
        moved_accumulators_ref,
        _moved_cases,
        forbidden=EMULATIONS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex03.fool_the_tensor_core",
        "Fool the tensor core: inputs its alignment gets wrong",
        5,
        fool_the_tensor_core_ref,
        _fool_cases,
        compare=_fool_compare,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.CONSTRUCT,
    ),
]
