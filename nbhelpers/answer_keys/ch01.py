"""Chapter 01 exercises: float bit layouts. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Exercises 2 to 5 work on custom IEEE-style formats given by (exp_bits, man_bits): inf and NaN at
the all-ones exponent, subnormals at the all-zeros exponent, like fp16 and bf16; exercise 1 on
formats given by their widths, their convention for special codes and their largest value.
Exercises 3 and 4 also ask about formats up to 64 bits wide (exp_bits <= 11, man_bits <= 52, so
that every value is a float64), far too many values to list or to try one by one; their references
are closed forms in exact arithmetic (float64 bit patterns, Fractions), which
tests/test_exercises_ch01.py holds to a listing of every value of the small formats and to numpy's
float16, float32 and float64. The others use the course's own tested helpers. Edge cases come
first, then random cases from the seed.
"""

from __future__ import annotations

import copy
import functools
import math
from fractions import Fraction

import numpy as np

from ..comparators import float_array
from ..exercise_types import COMPUTING_TOOLS, AfterCall, Case, Exercise, ExerciseKind
from ..formats import FloatFormat, Specials, decode, ulp
from ..rounding import round_to

# (exp_bits, man_bits) pairs the random cases draw from: small formats, fp8/fp16/bf16 shapes
_SHAPES = [(2, 1), (2, 3), (3, 2), (3, 4), (4, 3), (5, 2), (5, 10), (8, 7), (6, 9), (8, 23), (8, 10)]


def _spec(exp_bits: int, man_bits: int) -> FloatFormat:
    return FloatFormat.custom(int(exp_bits), int(man_bits))


def _random_shape(rng: np.random.Generator) -> tuple[int, int, FloatFormat]:
    e, m = _SHAPES[rng.integers(len(_SHAPES))]
    return e, m, _spec(e, m)


def _code(rng: np.random.Generator, e: int, m: int, E: int | None = None) -> int:
    """A code of (e, m) with a random sign and mantissa; exponent field E (random if None)."""
    E = int(rng.integers(0, 2**e)) if E is None else E
    M = int(rng.integers(0, 2**m)) if rng.random() < 0.8 else 0  # M = 0 often: zeros, infs, powers of two
    return (int(rng.integers(0, 2)) << (e + m)) | (E << m) | M


def _sign(rng: np.random.Generator) -> float:
    return float(rng.choice([-1.0, 1.0]))


# ------------------------------------------------------------------ 1. decode a format from its data sheet

#: the conventions for special codes decode_bits takes, by name
DECODE_SPECIALS = ("ieee", "fn", "fnuz", "finite")


def _sheet_spec(exp_bits: int, man_bits: int, specials: str) -> FloatFormat:
    """The course's format with these widths, the default bias and the same top binade (fnuz:
    FINITE's, its one NaN code is the negative zero's, handled apart)."""
    kind = {"ieee": Specials.IEEE, "fn": Specials.FN, "fnuz": Specials.FINITE, "finite": Specials.FINITE}
    if specials not in kind:
        raise ValueError(f"specials must be one of {DECODE_SPECIALS}, got {specials!r}")
    if int(exp_bits) < 2 or int(man_bits) < 1:
        raise ValueError(f"exp_bits >= 2 and man_bits >= 1, got {exp_bits}, {man_bits}")
    return FloatFormat.custom(int(exp_bits), int(man_bits), kind[specials])


def sheet_bias(exp_bits: int, man_bits: int, specials: str, largest: float) -> int:
    """The exponent bias of the format whose largest finite value is ``largest``: the course's
    format of these widths and convention has the default bias and its own ``max``; a bias
    larger by k divides every value by 2**k."""
    f = _sheet_spec(exp_bits, man_bits, specials)
    ratio = f.max / float(largest)
    k = math.frexp(ratio)[1] - 1
    if not (largest > 0 and ratio == 2.0**k):
        raise ValueError(f"no {specials} format e{exp_bits}m{man_bits} has the largest value {largest!r}")
    return f.bias + k


def sheet_largest(exp_bits: int, man_bits: int, specials: str, bias: int) -> float:
    """The largest finite value of the format with this bias: what a data sheet prints."""
    f = _sheet_spec(exp_bits, man_bits, specials)
    return math.ldexp(f.max, f.bias - int(bias))


def decode_bits_ref(bits: int, exp_bits: int, man_bits: int, specials: str, largest: float) -> float:
    """Value of the code ``bits`` of the format given by its widths, its convention for special
    codes (``DECODE_SPECIALS``) and its largest finite value: the course's decode of the code in
    the format of the same widths and convention with the default bias, scaled by the power of
    two the bias differs by (exact); fnuz's negative-zero code is its one NaN."""
    f = _sheet_spec(exp_bits, man_bits, specials)
    bits = int(bits)
    if not 0 <= bits < 2**f.bits:
        raise ValueError(f"code {bits} is not a {f.bits}-bit code")
    if specials == "fnuz" and bits == 1 << (f.exp_bits + f.man_bits):
        return math.nan
    bias = sheet_bias(exp_bits, man_bits, specials, largest)
    return float(np.ldexp(decode(bits, f), f.bias - bias))


# formats of ml_dtypes every code of which is a case: (type name, widths, convention, bias);
# tests/test_exercises_ch01.py holds the reference to ml_dtypes on every code of these and more
DECODE_SHEETS = [
    ("float8_e4m3fn", 4, 3, "fn", 7),
    ("float8_e4m3b11fnuz", 4, 3, "fnuz", 11),
    ("float8_e5m2", 5, 2, "ieee", 15),
    ("float4_e2m1fn", 2, 1, "finite", 1),
]


def _decode_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for name, e, m, sp, bias in DECODE_SHEETS:
        big = sheet_largest(e, m, sp, bias)
        cases += [Case((b, e, m, sp, big), label=f"every code of {name}") for b in range(2 ** (1 + e + m))]
    named = [
        (0x80, 4, 3, "fnuz", 8, "e4m3fnuz: the negative-zero code"),
        (0x00, 4, 3, "fnuz", 8, "e4m3fnuz: zero"),
        (0x7F, 4, 3, "fnuz", 8, "e4m3fnuz: e4m3fn's NaN code"),
        (0xFF, 4, 3, "fnuz", 8, "e4m3fnuz: e4m3fn's negative NaN code"),
        (0x01, 4, 3, "fnuz", 8, "e4m3fnuz: smallest subnormal"),
        (0x7C, 5, 2, "fnuz", 16, "e5m2fnuz: e5m2's inf code"),
        (0x7F, 5, 2, "fnuz", 16, "e5m2fnuz: e5m2's NaN code"),
        (0x80, 5, 2, "fnuz", 16, "e5m2fnuz: the negative-zero code"),
        (0x78, 4, 3, "ieee", 7, "e4m3 (IEEE): inf"),
        (0x7F, 4, 3, "ieee", 7, "e4m3 (IEEE): NaN"),
        (0x77, 4, 3, "ieee", 7, "e4m3 (IEEE): the largest value"),
        (0x7F, 3, 4, "ieee", 3, "e3m4: NaN"),
        (0x6F, 3, 4, "ieee", 3, "e3m4: the largest value"),
        (0x4049, 8, 7, "ieee", 127, "bf16: pi"),
        (0x7F80, 8, 7, "ieee", 127, "bf16: +inf"),
        (0xFF80, 8, 7, "ieee", 127, "bf16: -inf"),
        (0x7F80, 8, 7, "fn", 127, "e8m7fn: bf16's +inf code is a number"),
        (0x7FFF, 8, 7, "fn", 127, "e8m7fn: the NaN code"),
        (0x8000, 8, 7, "fn", 127, "e8m7fn: -0"),
        (0x7C00, 5, 10, "ieee", 15, "fp16: +inf"),
        (0x3C00, 5, 10, "ieee", 14, "fp16's layout with bias 14: fp16's code of 1.0"),
        (0x03FF, 5, 10, "ieee", 17, "fp16's layout with bias 17: largest subnormal"),
        (0x7BFF, 5, 10, "fn", 15, "e5m10fn: fp16's max, no longer the largest"),
        (0x7F800001, 8, 23, "fn", 127, "e8m23fn: fp32's signalling NaN code is a number"),
        (0xFFFFFFFF, 8, 23, "fn", 127, "e8m23fn: the negative NaN code"),
        (0x00000001, 8, 23, "ieee", 127, "fp32: 2**-149"),
        (0x1F, 3, 2, "finite", 3, "e3m2fn: the largest value"),
        (0x3F, 3, 2, "finite", 3, "e3m2fn: -largest"),
        (0x07, 2, 1, "fn", 1, "e2m1, fn convention: the NaN code"),
        (0x06, 2, 1, "fn", 1, "e2m1, fn convention: the largest value"),
        (0x0E, 2, 1, "fnuz", 1, "e2m1, fnuz convention, bias 1: -6 is a number"),
        # a bias of zero or below: every value at least 1 (or 2**(1 - bias - man_bits) and up)
        (0x38, 4, 3, "fn", 0, "e4m3fn's layout with bias 0: its code of 1.0 is 2**7"),
        (0x01, 4, 3, "fn", 0, "e4m3fn's layout with bias 0: smallest subnormal"),
        (0x7E, 4, 3, "fn", -1, "e4m3fn's layout with bias -1: the largest value"),
        (0x85, 4, 3, "fnuz", -2, "e4m3fnuz's layout with bias -2: a negative subnormal"),
        (0x80, 4, 3, "fnuz", -2, "e4m3fnuz's layout with bias -2: the NaN code"),
        (0x7B, 5, 2, "ieee", -1, "e5m2's layout with bias -1: the largest value"),
        (0xFC, 5, 2, "ieee", -1, "e5m2's layout with bias -1: -inf"),
        (0x05, 2, 1, "finite", -2, "e2m1 with bias -2: 1.5 * 2**4"),
        (0x01, 2, 1, "finite", 0, "e2m1 with bias 0: the subnormal"),
        (0x3C00, 5, 10, "ieee", 0, "fp16's layout with bias 0: fp16's code of 1.0 is 2**15"),
        (0x8001, 5, 10, "ieee", -5, "fp16's layout with bias -5: -smallest subnormal"),
        (0x4049, 8, 7, "ieee", -20, "bf16's layout with bias -20: pi * 2**147"),
        (0x0080, 8, 7, "fn", 0, "e8m7fn with bias 0: the smallest normal, 2"),
        (0x1F, 3, 2, "finite", -3, "e3m2fn with bias -3: the largest value"),
        (0x03, 3, 2, "finite", -1, "e3m2fn with bias -1: the largest subnormal"),
        # a bias above the largest exponent field: every value below 1/2 (largest's integer part is 0)
        (0x0F, 2, 2, "finite", 5, "e2m2 with bias 5: the largest value, 0.4375"),
        (0x03, 2, 2, "finite", 5, "e2m2 with bias 5: the largest subnormal, 0.046875"),
        (0x7E, 4, 3, "fn", 20, "e4m3fn's layout with bias 20: the largest value, 448 * 2**-13"),
        (0x3C00, 5, 10, "ieee", 40, "fp16's layout with bias 40: its code of 1.0 is 2**-25"),
    ]
    for bits, e, m, sp, bias, label in named:
        cases.append(Case((bits, e, m, sp, sheet_largest(e, m, sp, bias)), label=label))
    # random formats: each convention, widths up to fp32's, biases near the default and far from
    # it; the codes over-sample zero and the subnormals, the top binade, the NaN codes of fn and
    # the negative-zero code (fnuz's NaN), so that each convention's rule is tested on its own
    for _ in range(240):
        sp = DECODE_SPECIALS[int(rng.integers(len(DECODE_SPECIALS)))]
        if rng.random() < 0.5:
            e, m, _ = _random_shape(rng)
        else:
            e, m = int(rng.integers(2, 9)), int(rng.integers(1, 24))
        default = 2 ** (e - 1) - 1
        rb = rng.random()
        if rb < 0.55:
            bias = default + int(rng.integers(-3, 4))
        elif rb < 0.8:
            bias = int(rng.integers(1, 2**e + 1))
        else:  # zero or negative: every normal value at least 2
            bias = -int(rng.integers(0, 2 ** (e - 1) + 1))
        r = rng.random()
        top = 2**e - 1
        if r < 0.25:
            bits = _code(rng, e, m, 0)  # zero or a subnormal
        elif r < 0.5:
            bits = _code(rng, e, m, top)  # the top binade (M = 0 often)
        elif r < 0.6:  # an all-ones magnitude, either sign
            bits = (int(rng.integers(0, 2)) << (e + m)) | (2 ** (e + m) - 1)
        elif r < 0.7:  # a zero code, either sign
            bits = int(rng.integers(0, 2)) << (e + m)
        elif r < 0.78:  # the code just below the top binade's largest
            bits = (int(rng.integers(0, 2)) << (e + m)) | (2 ** (e + m) - 2)
        elif r < 0.86:  # IEEE's infinity codes, either sign
            bits = (int(rng.integers(0, 2)) << (e + m)) | (top << m)
        else:
            bits = _code(rng, e, m)
        cases.append(Case((bits, e, m, sp, sheet_largest(e, m, sp, bias))))
    # formats whose bias lies above the largest exponent field: every value below 1/2, so that the
    # power of two of largest is negative (drawn after the others, which stay as they were)
    for _ in range(24):
        sp = DECODE_SPECIALS[int(rng.integers(len(DECODE_SPECIALS)))]
        e, m = int(rng.integers(2, 9)), int(rng.integers(1, 11))
        bias = 2**e + int(rng.integers(1, 2 ** (e + 1)))
        cases.append(Case((_code(rng, e, m), e, m, sp, sheet_largest(e, m, sp, bias))))
    return cases


# ------------------------------------------------------------------ 2. the rounding interval of a value

# A float64 is ordered like its bit pattern read as a signed magnitude: key(x) = bits(|x|), negated
# for negative x (both zeros get key 0). A search over keys finds the first and last float64 that
# round to v, with nothing but round_to as the oracle (round_to is monotone in x).
_F64_MAX_KEY = int(np.float64(np.finfo(np.float64).max).view(np.int64))


def _key(x: float) -> int:
    k = int(np.float64(abs(x)).view(np.int64))
    return -k if math.copysign(1.0, x) < 0 else k


def _from_key(k: int) -> float:
    x = float(np.int64(abs(k)).view(np.float64))
    return -x if k < 0 else x


_PROBES = 256  # keys tried at once per search and round: 8 rounds cover the 2**64 keys


def _from_keys(keys: np.ndarray) -> np.ndarray:
    """_from_key of every int64 key at once."""
    x = np.abs(keys).view(np.float64)
    return np.where(keys < 0, -x, x)


def _search2(pred, lo: list[int], hi: list[int]) -> list[int]:
    """Two searches at once: per element the smallest key in [lo, hi] where pred (false, then
    true along the keys) holds; pred must hold at hi. Each round tries up to _PROBES keys of each
    bracket in one call of pred (a k-ary search: the same answer as a bisection, in 8 rounds
    instead of 64). pred takes two float64 arrays and returns two boolean arrays.
    Python ints for the brackets: the difference of two keys overflows int64."""
    lo, hi = list(lo), list(hi)
    while lo[0] < hi[0] or lo[1] < hi[1]:
        probes = []
        for a, b in zip(lo, hi):
            step = max((b - a) // _PROBES, 1)
            n = min(_PROBES, b - a)  # keys a, a + step, ..., all below b (none if a == b)
            probes.append(np.int64(a) + np.int64(step) * np.arange(n, dtype=np.int64))
        ok = pred(*(_from_keys(k) for k in probes))
        for i in range(2):
            if lo[i] == hi[i]:
                continue
            keys, hit = probes[i], np.asarray(ok[i])
            first = int(np.argmax(hit)) if hit.any() else len(keys)
            if first < len(keys):
                hi[i] = int(keys[first])  # pred holds here
            if first > 0:
                lo[i] = int(keys[first - 1]) + 1  # and not at the key before
    return lo


@functools.lru_cache(maxsize=4096)
def rounding_interval_ref(v: float, exp_bits: int, man_bits: int) -> tuple[float, float]:
    """(lo, hi): the smallest and the largest float64 x whose round to nearest even in the
    IEEE-style format (exp_bits, man_bits) equals v (by value; v a finite value of the format).
    Two searches over the float64s with round_to as the only oracle (it is monotone in x);
    cached, as a check computes the same cases for every function it judges."""
    f = _spec(exp_bits, man_bits)
    v = float(v)
    k = _key(v)

    def pred(x_lo: np.ndarray, x_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = round_to(np.concatenate([x_lo, x_hi]), f)
        # the first key that rounds to v or above; the first key that rounds above v
        return r[: len(x_lo)] >= v, r[len(x_lo) :] > v

    lo, above = _search2(pred, [-_F64_MAX_KEY, k], [k, _F64_MAX_KEY])
    return _from_key(lo), _from_key(above - 1)


def _interval_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for e, m in [(3, 2), (4, 3), (5, 10), (8, 7)]:
        f = _spec(e, m)
        s, n = f.smallest_subnormal, f.smallest_normal
        named = [
            (0.0, "zero"),
            (-0.0, "-0.0: the same value as zero"),
            (s, "smallest subnormal (odd)"),
            (2 * s, "twice the smallest subnormal (even)"),
            (n - s, "largest subnormal"),
            (n, "smallest normal: the gap below is the subnormal spacing, the same as above"),
            (2 * n, "twice the smallest normal: the gap below is half the gap above"),
            (1.0, "1.0: a power of two"),
            (-1.0, "-1.0"),
            (1.0 + f.eps, "1 + eps (odd)"),
            (1.0 + 2 * f.eps, "1 + 2 eps (even)"),
            (-(2.0 - f.eps), "-(2 - eps): odd, below a power of two"),
            (f.max, "max: the tie above it overflows to inf"),
            (f.max - 2.0 ** (f.emax - m), "the value below max (even)"),
            (-f.max, "-max"),
            (2.0**f.emax, "the largest power of two"),
        ]
        cases += [Case((float(x), e, m), label=f"e{e}m{m}: {label}") for x, label in named]
    fp32 = _spec(8, 23)
    cases += [
        Case((1.0, 8, 23), label="fp32 1.0"),
        Case((float(np.float32(0.1)), 8, 23), label="fp32 0.1"),
        Case((fp32.smallest_subnormal, 8, 23), label="fp32 2**-149"),
        Case((fp32.max, 8, 23), label="fp32 max"),
        Case((0.0, 8, 23), label="fp32 zero"),
    ]
    # random values of the format, over-sampling where the interval is not the plain
    # [v - q/2, v + q/2]: powers of two (half the gap below), the subnormals and the smallest
    # normal, zero, the largest values; random signs, odd and even mantissas
    for _ in range(200):
        e, m, f = _random_shape(rng)
        r = rng.random()
        if r < 0.25:
            x = 2.0 ** int(rng.integers(f.emin, f.emax + 1))
        elif r < 0.45:
            x = float(decode(_code(rng, e, m, 0), f))  # a subnormal or a signed zero
        elif r < 0.55:
            x = float(decode(_code(rng, e, m, 1), f))  # the binade of the smallest normal
        elif r < 0.65:
            x = f.max - int(rng.integers(0, 4)) * 2.0 ** (f.emax - m)
        else:
            x = float(round_to(2.0 ** rng.uniform(np.log2(f.smallest_positive), np.log2(f.max)), f))
        cases.append(Case((_sign(rng) * x, e, m)))
    return cases


# ------------------------------------------------------------------ 3. how many values between a and b

# Exercises 3 and 4 also take formats far too large to list or to try value by value: IEEE-style
# (exp_bits, man_bits) up to these widths, where every value is a float64 (e8m40 has 2**49 positive
# values). The references are closed forms in exact arithmetic, for any such format.
WIDE_MAX_EXP_BITS = 11
WIDE_MAX_MAN_BITS = 52
_F64_FRAC_BITS = 52


def _check_widths(exp_bits: int, man_bits: int) -> tuple[int, int]:
    e, m = int(exp_bits), int(man_bits)
    if not (2 <= e <= WIDE_MAX_EXP_BITS and 1 <= m <= WIDE_MAX_MAN_BITS):
        raise ValueError(
            f"exp_bits in [2, {WIDE_MAX_EXP_BITS}] and man_bits in [1, {WIDE_MAX_MAN_BITS}], got {exp_bits}, {man_bits}"
        )
    return e, m


def _emin_emax(e: int) -> tuple[int, int]:
    bias = 2 ** (e - 1) - 1
    return 1 - bias, 2**e - 2 - bias


def _largest(e: int, m: int) -> float:
    return math.ldexp(2 ** (m + 1) - 1, _emin_emax(e)[1] - m)  # exact: m + 1 <= 53 bits


def _ieee_value(code: int, e: int, m: int) -> float:
    """The value of a finite code (sign bit highest, exponent field below all ones) of (e, m), in
    plain Python: for any width up to WIDE_MAX_*, where FloatFormat stops at fp32's."""
    s, E, M = code >> (e + m), (code >> m) & (2**e - 1), code & (2**m - 1)
    if E == 2**e - 1:
        raise ValueError(f"code {code:#x} of e{e}m{m} is inf or NaN")
    emin = _emin_emax(e)[0]
    x = math.ldexp(M, emin - m) if E == 0 else math.ldexp(2**m + M, E - 1 + emin - m)
    return -x if s else x


def _values_up_to(y: float, e: int, m: int) -> tuple[int, bool]:
    """(how many values v of (e, m) have 0 <= v <= y, whether y is one of them), for
    0 <= y <= the largest value. A normal y's code is its float64 code cut short: float64's
    exponent rebased to the format's, and its 52 fraction bits cut to man_bits (cutting rounds
    down); a y below the smallest normal is a whole number of subnormal spacings, plus a part."""
    emin = _emin_emax(e)[0]
    if y < math.ldexp(1.0, emin):
        n = y / math.ldexp(1.0, emin - m)  # exact: a power of two, and y has room below it
        return math.floor(n) + 1, n == math.floor(n)
    bits = int(np.float64(y).view(np.int64))
    E64, frac = bits >> _F64_FRAC_BITS, bits & (2**_F64_FRAC_BITS - 1)
    cut = _F64_FRAC_BITS - m
    code = ((E64 - 1023 - emin + 1) << m) | (frac >> cut)
    return code + 1, frac & (2**cut - 1) == 0


def count_values_ref(a: float, b: float, exp_bits: int, man_bits: int) -> int:
    """How many finite values of the IEEE-style format (exp_bits, man_bits) lie in [a, b]
    (+0 and -0 are one value), for any format whose values are float64s (exp_bits <= 11,
    man_bits <= 52): from the codes of the values next to the ends (:func:`_values_up_to`),
    never by listing."""
    e, m = _check_widths(exp_bits, man_bits)
    big = _largest(e, m)
    a, b = max(float(a), -big), min(float(b), big)
    if a > b:
        return 0
    if a >= 0:  # [a, b] on the positive side: up to b, less those below a
        (nb, _), (na, a_on) = _values_up_to(b, e, m), _values_up_to(a, e, m)
        return nb - na + a_on
    if b <= 0:  # the mirror image
        (na, _), (nb, b_on) = _values_up_to(-a, e, m), _values_up_to(-b, e, m)
        return na - nb + b_on
    return _values_up_to(b, e, m)[0] + _values_up_to(-a, e, m)[0] - 1  # zero on both sides, once


def _wide_shape(rng: np.random.Generator) -> tuple[int, int]:
    """A format of 17 to 52 mantissa bits (mostly 40 or more: counts past 2**53) and 2 to 11
    exponent bits: no numpy type (but e8m23 and e11m52), 2**17 or more values in every binade."""
    m = int(rng.integers(40, WIDE_MAX_MAN_BITS + 1)) if rng.random() < 0.6 else int(rng.integers(17, 40))
    return int(rng.integers(2, WIDE_MAX_EXP_BITS + 1)), m


def _count_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for e, m in [(3, 2), (4, 3), (8, 7)]:
        f = _spec(e, m)
        s, n = f.smallest_subnormal, f.smallest_normal
        named = [
            ((-math.inf, math.inf), "every finite value"),
            ((0.0, math.inf), "zero and the positive values"),
            ((-0.0, 0.0), "zero alone"),
            ((-s, s), "zero and the two smallest subnormals"),
            ((1.0, 2.0), "one binade and the next power of two"),
            ((1.0, 1.0), "one value"),
            ((1.0 + f.eps / 2, 1.0 + f.eps / 2), "a == b between two values: none"),
            ((2.0, 1.0), "a > b: none"),
            ((1.0 + f.eps / 2, 2.0 - f.eps / 2), "ends between values"),
            ((s / 2, n), "the subnormals and the smallest normal"),
            ((-n, n / 2), "around zero, ends on and between values"),
            ((f.max, 10 * f.max), "past the largest value"),
            ((2 * f.max, math.inf), "only beyond the largest value: none"),
            ((-math.inf, -f.max), "from -inf to -max"),
            ((-3.0, -1.0), "negative"),
        ]
        cases += [Case((float(a), float(b), e, m), label=f"e{e}m{m}: {label}") for (a, b), label in named]
    cases += [
        Case((-math.inf, math.inf, 8, 23), label="fp32: every finite value"),
        Case((1.0, 2.0, 8, 23), label="fp32: the binade [1, 2]"),
        Case((0.0, 1.0, 8, 23), label="fp32: [0, 1]"),
        Case((-1e-40, 1e-40, 8, 23), label="fp32: around zero, among the subnormals"),
        Case((-0.0, 0.0, 5, 10), label="fp16: zero alone"),
        Case((-65504.0, 65504.0, 5, 10), label="fp16: every finite value"),
        # formats no list of values can hold
        Case((-math.inf, math.inf, 11, 52), label="e11m52 (float64's layout): every finite value"),
        Case((-math.inf, math.inf, 8, 40), label="e8m40: every finite value"),
        Case((1.0, 2.0, 10, 45), label="e10m45: the binade [1, 2]"),
        Case((0.0, 8 - 2.0**-50, 11, 52), label="e11m52: up to the last value below 8"),
        Case((8 - 2.0**-50, 16.0, 11, 52), label="e11m52: from the last value below 8"),
        Case((-(2.0**-20), -(2.0**-30 - 2.0**-83), 11, 52), label="e11m52: negative, to the last value above -2**-30"),
        Case((2.0**-60 + 2.0**-100, 2.0**-59 - 2.0**-100, 9, 40), label="e9m40: a binade without its first value"),
        Case((-(2.0**-1030), 2.0**-1030, 11, 40), label="e11m40: around zero, among the subnormals"),
        Case((1 + 2.0**-41, 2 - 2.0**-41, 8, 40), label="e8m40: ends between values"),
        Case((-3.0, -1.0, 9, 50), label="e9m50: negative"),
        Case((_largest(6, 30), math.inf, 6, 30), label="e6m30: from the largest value on"),
        Case((-1.0, 3.0 * 2.0**-40, 2, 40), label="e2m40: bias 1, ends at -1 and a subnormal"),
    ]
    # random intervals whose ends are values of the format (closed ends matter), the last value
    # below a power of two, midpoints and other numbers between values, zero, infinities and
    # numbers past the largest value; the ends fall in the subnormals, in the normal range and at
    # the top, either sign; small formats and fp16/fp32, and formats too wide to list
    shapes = [(e, m) for e, m in _SHAPES if 1 + e + m <= 16 or (e, m) in ((8, 23), (5, 10))] + [(8, 23), (5, 10)]
    for i in range(200):
        e, m = shapes[int(rng.integers(len(shapes)))] if i % 5 < 3 else _wide_shape(rng)
        if i % 10 == 9:  # 52 mantissa bits, both ends the last value of a binade (below are more)
            e, m = int(rng.integers(2, WIDE_MAX_EXP_BITS + 1)), WIDE_MAX_MAN_BITS
            a, b = (_sign(rng) * _ieee_value((int(rng.integers(0, 2**e - 1)) << m) | (2**m - 1), e, m) for _ in "ab")
            cases.append(Case((min(a, b), max(a, b), e, m)))
            continue
        big = _largest(e, m)
        smallest = math.ldexp(1.0, _emin_emax(e)[0] - m)

        def end() -> float:
            r = rng.random()
            if r < 0.3:
                x = _ieee_value(_code(rng, e, m, int(rng.integers(0, 2**e - 1))), e, m)  # a value
            elif r < 0.4:
                x = _ieee_value(_code(rng, e, m, 0), e, m)  # zero or a subnormal
            elif r < 0.5:  # the last value of a binade, just below a power of two
                E = int(rng.integers(0, 2**e - 1))
                x = _sign(rng) * _ieee_value((E << m) | (2**m - 1), e, m)
            elif r < 0.6:  # between two values, below the largest
                c = min(_code(rng, e, m, int(rng.integers(0, 2**e - 1))) & ~(1 << (e + m)), 2 ** (e + m) - 2**m - 2)
                lo, hi = _ieee_value(c, e, m), _ieee_value(c + 1, e, m)
                x = _sign(rng) * (lo + float(rng.choice([0.5, 0.25, 0.999])) * (hi - lo))
            elif r < 0.7:
                x = float(rng.choice([0.0, -0.0, math.inf, -math.inf, big, -big]))
            elif r < 0.75:
                x = _sign(rng) * min(big * float(rng.uniform(1, 4)), np.finfo(np.float64).max)  # past the largest
            else:
                x = _sign(rng) * 2.0 ** rng.uniform(np.log2(smallest) - 1, np.log2(big))
            return x

        a, b = end(), end()
        if rng.random() < 0.9:
            a, b = min(a, b), max(a, b)
        if rng.random() < 0.08:  # an empty or one-point interval: a == b, on a value or between
            b = a
        cases.append(Case((a, b, e, m)))
    return cases


# ------------------------------------------------------------------ 4. where x + c == x


@functools.lru_cache(maxsize=4096)
def smallest_absorbing_ref(c: float, exp_bits: int, man_bits: int) -> float:
    """Smallest positive x of the format with round(x + c) == x (nearest-even), for a positive
    value c of the format; inf if none. For any format whose values are float64s.

    x absorbs c when c is below half the gap above x, or exactly half of it and x's last bit is
    even. Every value of a binade has the same gap above it, and the first one, a power of two,
    is even; no subnormal absorbs c (its half gap is below the smallest subnormal). So the answer
    is the first power of two whose half gap reaches c: a search over the binades, at most 2046,
    compared exactly (Fractions). tests/test_exercises_ch01.py holds it to a search over every
    value of every format of up to 16 bits."""
    e, m = _check_widths(exp_bits, man_bits)
    emin, emax = _emin_emax(e)
    c = Fraction(float(c))
    if not c > 0:
        raise ValueError(f"c must be a positive value of the format, got {float(c)!r}")
    for k in range(emin, emax + 1):
        if c <= Fraction(2) ** (k - m - 1):  # half the gap above 2**k
            return math.ldexp(1.0, k)
    return math.inf


def _absorbing_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((1.0, 8, 7), label="bf16, c = 1"),
        Case((1.0, 5, 10), label="fp16, c = 1"),
        Case((0.75, 5, 10), label="fp16, c = 0.75"),
        Case((3.0, 8, 7), label="bf16, c = 3"),
        Case((2.0**-133, 8, 7), label="bf16, c = the smallest subnormal"),
        Case((1.0, 4, 3), label="e4m3, c = 1"),
        Case((1.5, 4, 3), label="e4m3, c = 1.5"),
        Case((1.0, 2, 3), label="e2m3, c = 1: no such x (returns inf)"),
        Case((0.5, 2, 1), label="e2m1, c = 0.5 (its only subnormal)"),
        Case((2.0**-16, 5, 10), label="fp16, c = a subnormal power of two"),
        Case((5 * 2.0**-24, 5, 10), label="fp16, c = 5 smallest subnormals"),
        # formats too wide to try every value
        Case((1.0, 8, 40), label="e8m40, c = 1"),
        Case((1 + 2.0**-40, 8, 40), label="e8m40, c = 1 + 2**-40"),
        Case((4 * (1 + 2.0**-52), 11, 52), label="e11m52 (float64's layout), c = 4 + 2**-50"),
        Case((3 * 2.0**-30, 10, 45), label="e10m45, c = 3 * 2**-30"),
        Case((2.0**-1074, 11, 52), label="e11m52, c = the smallest subnormal"),
        Case((2.0 ** (1023 - 53), 11, 52), label="e11m52, c = 2**970: x is the largest power of two"),
        Case((2.0 ** (1023 - 52), 11, 52), label="e11m52, c = 2**971: no such x"),
        Case((2.0**-40, 2, 40), label="e2m40, c = its smallest subnormal"),
        Case((2.0**-39, 2, 40), label="e2m40, c = 2**-39: no such x"),
    ]
    pairs = [(e, m) for e in range(2, 9) for m in range(1, 8) if 1 + e + m <= 16]
    # c a random value of a random format: a power of two (x + c can be a tie) or not, just above
    # one, a subnormal or normal, often large enough that no value of the format absorbs it (inf);
    # small formats and formats too wide to try every value
    for i in range(40):
        e, m = pairs[int(rng.integers(len(pairs)))] if i % 2 == 0 else _wide_shape(rng)
        emin, emax = _emin_emax(e)
        if i % 4 == 3:  # 48 to 52 mantissa bits, c just above a power of two far from 1
            e, m = int(rng.integers(8, WIDE_MAX_EXP_BITS + 1)), int(rng.integers(48, WIDE_MAX_MAN_BITS + 1))
            emin, emax = _emin_emax(e)
            k = int(rng.choice([-1, 1])) * int(rng.integers(64, emax - m))
            cases.append(Case((math.ldexp(2**m + 1, k - m), e, m)))
            continue
        r = rng.random()
        E = 0 if r < 0.2 else int(rng.integers(1, 2**e - 1))
        r = rng.random()
        M = 0 if r < 0.35 else 1 if r < 0.5 else int(rng.integers(1, 2**m))
        if E == 0 and M == 0:
            M = 1
        c = _ieee_value((E << m) | M, e, m)
        if rng.random() < 0.2:  # near the top: answer inf, or the last binades that still absorb
            # (never below the smallest subnormal: in a format with few binades, such as e2m6,
            # 2**(emax - m - 2) is not a value of the format, and c must be one)
            c = max(2.0 ** (emax - m - int(rng.integers(0, 3))), math.ldexp(1.0, emin - m))
        cases.append(Case((c, e, m)))
    return cases


# ------------------------------------------------------------------ 5. stochastic rounding

SR_N = 10_000  # elements per case: one value of x repeated, each element rounded on its own
SR_Z = 6.0  # standard deviations allowed for the count of elements rounded away from zero
# Two-sided normal tail beyond SR_Z: the chance that a right answer fails one case, about 2e-9.
# A check has 45 cases (fewer can go either way), so a right answer fails a whole check with
# probability below 1e-7 (tests/test_exercises_ch01.py bounds it with the exact binomial tails).
SR_FALSE_FAILURE_PER_CASE = math.erfc(SR_Z / math.sqrt(2))


class StochasticTarget:
    """What a stochastic rounding of ``x`` may return: per element the neighbours ``lower`` and
    ``upper`` (the same value where x is in the format) and the probability ``p`` of ``upper``
    (the distance from ``lower`` in units of the gap). Not a value to match: see
    :func:`stochastic_compare`."""

    def __init__(
        self, x: np.ndarray, lower: np.ndarray, upper: np.ndarray, p: np.ndarray, state: str = "", after: str = ""
    ) -> None:
        self.x, self.lower, self.upper, self.p = x, lower, upper, p
        self.state = state  # the generator's state when the case was called (stochastic_compare_all)
        self.after = after  # its state after x.size numbers of rng.random: one per element

    def __repr__(self) -> str:
        if self.x.size and np.all(self.x == self.x.flat[0]):
            i = 0  # one value repeated: say what each element may be
            return (
                f"each element {float(self.lower.flat[i])!r} or {float(self.upper.flat[i])!r}, "
                f"the one farther from zero with probability {self.p.flat[i]:.6g}"
            )
        return f"each element its lower or upper neighbour ({self.x.size} elements)"


def round_stochastic_ref(x, exp_bits: int, man_bits: int, rng: np.random.Generator) -> StochasticTarget:
    """The two neighbours of every element of ``x`` in (exp_bits, man_bits) and the probability
    of the upper one (away from zero), for :func:`stochastic_compare`, and the generator's state
    before and after ``x.size`` draws of ``rng.random`` (from a copy: ``rng`` is left as it is)."""
    f = _spec(exp_bits, man_bits)
    x = np.asarray(x, dtype=np.float64)
    lower = np.asarray(round_to(x, f, "toward_zero"), dtype=np.float64)  # toward zero: the smaller magnitude
    on_grid = lower == x
    upper = np.where(on_grid, x, lower + np.copysign(ulp(lower, f), x))  # one spacing further out
    gap = np.abs(upper - lower)
    p = np.where(on_grid, 0.0, np.abs(x - lower) / np.where(on_grid, 1.0, gap))  # exact: a short dyadic
    clone = copy.deepcopy(rng)
    clone.random(x.size)
    return StochasticTarget(x, lower, upper, p, repr(rng.bit_generator.state), repr(clone.bit_generator.state))


def stochastic_compare(got, expected: StochasticTarget) -> str | None:
    """None if ``got`` could come from stochastic rounding, else a short reason.

    Every element must be one of its two neighbours (by value: the sign of a zero is not
    checked), an element already in the format must come back as it is, and the number of
    elements rounded away from zero must be within ``SR_Z`` standard deviations of its expectation:
    |k - sum p| <= SR_Z * sqrt(sum p (1 - p)). For one x repeated n times this is
    |mean - x| <= SR_Z * sqrt(p (1 - p) / n) * gap. A right answer fails one case by bad luck
    with probability about 2e-9 (``SR_FALSE_FAILURE_PER_CASE``, the two-sided normal tail beyond
    6), a check of 45 cases with probability below 1e-7 (tests/test_exercises_ch01.py bounds it
    with the exact binomial tails). Given as an :class:`AfterCall` (as the check gives it), the
    generator must also have advanced by exactly ``x.size`` numbers of ``rng.random``: one per
    element.
    """
    t = expected
    rng_after = got.args[0] if isinstance(got, AfterCall) and got.args else None
    got = got.value if isinstance(got, AfterCall) else got
    g = float_array(got)
    if isinstance(g, str):
        return g
    if g.shape != t.x.shape:
        return f"returned shape {g.shape}, expected {t.x.shape}"
    up = g == t.upper
    bad = ~(up | (g == t.lower))
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        what = (
            "x is already in the format"
            if t.lower.flat[i] == t.upper.flat[i]
            else f"neighbours {float(t.lower.flat[i])!r} and {float(t.upper.flat[i])!r}"
        )
        return (
            f"{int(bad.sum())} of {g.size} elements are not a neighbour of x; first at index {i}: "
            f"got {float(g.flat[i])!r} for x = {float(t.x.flat[i])!r} ({what})"
        )
    moving = t.lower != t.upper
    k = int((up & moving).sum())
    mean_k = float(t.p.sum())
    sd = math.sqrt(float((t.p * (1 - t.p)).sum()))
    if abs(k - mean_k) > SR_Z * sd:
        return (
            f"{k} of {g.size} elements rounded away from zero, expected {mean_k:.0f} +- {SR_Z * sd:.0f} "
            f"({SR_Z:g} standard deviations): the rounding is biased"
        )
    if rng_after is not None:
        state = rng_after.bit_generator.state if isinstance(rng_after, np.random.Generator) else None
        if repr(state) != t.after:
            return (
                f"rng did not advance by exactly {t.x.size} numbers of rng.random (one per element, "
                f"{t.x.size} elements): draw one number per element, e.g. rng.random(x.shape), and no others"
            )
    return None


#: a set of answers fails when its spread is this unlikely (below, for every case together)
SR_ALL_TAIL = 1e-9


def _chi2_cdf(x: float, m: int) -> float:
    """P(chi-square with m degrees of freedom <= x): the regularized lower incomplete gamma
    function P(m / 2, x / 2), by its series (for x up to a few times m)."""
    if x <= 0:
        return 0.0
    a, h = m / 2, x / 2
    term = total = 1.0 / a
    n = 0
    while term > 1e-17 * total:
        n += 1
        term *= h / (a + n)
        total += term
    return math.exp(a * math.log(h) - h - math.lgamma(a) + math.log(total))


def stochastic_compare_all(expected: list, got: list) -> str | None:
    """What no one case shows, asked once every case passed :func:`stochastic_compare`:

    * cases with the same x and a generator in the same state must give the same elements (the
      choice comes from the generator, nothing else), and cases with the same x and generators
      in different states must not (an answer that ignores ``rng``);
    * the counts of elements rounded away from zero must spread as much as chance spreads them:
      the sum over cases of their squared standard scores is a chi-square of as many degrees of
      freedom as cases that can move, over every case and over the later half alone (the random
      cases); a sum whose lower tail is below ``SR_ALL_TAIL / 4`` means the counts sit too close
      to their expectations (an answer with no randomness, every count exact);
    * the elements of the cases of ties must choose independently (:func:`_ties_independent`).

    A right answer fails with probability at most ``SR_ALL_TAIL``: a quarter for each chi-square
    test, an eighth for each test of the ties' counts, and a quarter for the ties' pairs."""
    groups: dict = {}
    scores = []  # each case's squared standard score, None for a case that cannot move
    got = [g.value if isinstance(g, AfterCall) else g for g in got]
    for t, g in zip(expected, got):
        g = np.asarray(g, dtype=np.float64)
        key = (t.x.shape, t.x.tobytes(), t.lower.tobytes(), t.upper.tobytes())
        groups.setdefault(key, []).append((t, g))
        moving = t.lower != t.upper
        mean_k = float(t.p.sum())
        var = float((t.p * (1 - t.p)).sum())
        if var > 0:
            k = int(((g == t.upper) & moving).sum())
            scores.append((k - mean_k) ** 2 / var)
    for members in groups.values():
        for i, (t1, g1) in enumerate(members):
            for t2, g2 in members[i + 1 :]:
                same = bool(np.array_equal(g1, g2))
                spread = 2 * float((t1.p * (1 - t1.p)).sum())  # -ln P(two draws agree), about
                if t1.state == t2.state and not same:
                    return (
                        "two cases with the same x and a generator in the same state gave different "
                        "elements: draw every number from rng, and nothing else"
                    )
                if t1.state != t2.state and same and spread > 50:
                    return (
                        "two cases with the same x and different generators gave the same elements: "
                        "the choice does not depend on rng"
                    )
    # every case, and the later half alone (the random cases come last: an answer that is right
    # on the fixed cases only must not hide there), each tested at half the tail
    for part in (scores, scores[len(scores) // 2 :]):
        z2, m = sum(part), len(part)
        if m and _chi2_cdf(z2, m) < SR_ALL_TAIL / 4:
            return (
                f"the counts of elements rounded away from zero sit too close to their expectations "
                f"(sum of squared standard scores {z2:.3g} over {m} cases, chance gives about {m}): "
                "each element's choice must be random, not spread evenly"
            )
    return _ties_independent(expected, got)


def _half_abs_pmf(n: int, top: int) -> np.ndarray:
    """P(|2k - n| = e) for e = 0..top, k binomial(n, 1/2): the spread of a tie case's count."""
    e = np.arange(top + 1)
    k = (n + e) // 2
    ok = ((n + e) % 2 == 0) & (k <= n)
    kk = np.where(ok, k, 0)
    logp = np.array([math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in kk]) - n * math.log(2)
    return np.where(ok, np.exp(logp) * np.where(e == 0, 1.0, 2.0), 0.0)


def _pair_z_bound(n_tests: int) -> float:
    """The |z| above which one of ``n_tests`` sums of m independent random signs (z = sum /
    sqrt(m)) lies with probability at most ``SR_ALL_TAIL / 4`` in all: Hoeffding's bound
    P(|z| >= t) <= 2 exp(-t**2 / 2) for each, summed over the tests (Bonferroni)."""
    return math.sqrt(2 * math.log(2 * n_tests / (SR_ALL_TAIL / 4)))


def _pair_agreements(up: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the choices ``up`` of a tie case (n elements, flat order): per test, the sum over its
    pairs of s_i s_j (s = +1 up, -1 down) and its number of pairs m: the pairs i and i + d for
    every lag d from 1 to n/2 (the autocorrelation, by FFT; exact integers, rounded), then i and
    n - 1 - i. Also each test's lag (0 for the mirrored pairs). For independent fair choices
    the products s_i s_j of one test are independent random signs."""
    n = up.size
    s = np.where(up, 1.0, -1.0)
    spec = np.fft.rfft(s, 2 * n)
    auto = np.rint(np.fft.irfft(spec * np.conj(spec), 2 * n)[1 : n // 2 + 1])
    lags = np.arange(1, n // 2 + 1)
    mirror = float(s[: n // 2] @ s[::-1][: n // 2])
    return np.append(auto, mirror), np.append(n - lags, n // 2), np.append(lags, 0)


def _ties_independent(expected: list, got: list) -> str | None:
    """The cases where every element lies halfway between its neighbours (ties: each goes either
    way with probability 1/2) are asked whether the elements choose independently, as the
    statement requires. Each generator state once (a twin with the same state repeats a case):

    * the total distance of their counts from n/2, sum |2k - n|, over every tie case and over
      those of the later half alone (the random cases), must not be smaller than chance makes it
      with probability ``SR_ALL_TAIL / 8`` (exact, from the binomial: :func:`_tie_counts_spread`): pairs of
      elements that always choose opposite ways (antithetic numbers u and 1 - u) put every count
      on n/2 exactly;
    * the elements i and i + d, for every d from 1 to n/2 (in the flat order), and i and n-1-i
      must agree as often as independent coins do: the largest standard score over all these
      tests of all tie cases must stay under the bound (:func:`_pair_z_bound`) that a right
      answer passes with probability ``SR_ALL_TAIL / 4``: numbers reused, mirrored or paired at
      any distance agree always or never, and even a quarter of the elements copying others at
      one distance lifts that distance's score to about sqrt(n) / 4 (25 for 10,000 elements)."""
    ties, seen, later = [], set(), []
    for i, (t, g) in enumerate(zip(expected, got)):
        if t.p.size and np.all(t.p == 0.5) and t.state not in seen:
            seen.add(t.state)
            ties.append((np.asarray(g, dtype=np.float64) == t.upper).reshape(-1))
            later.append(i >= len(expected) // 2)
    # every tie case, and those of the later half alone (the random cases), each at an eighth of the tail
    for part in (ties, [up for up, late in zip(ties, later) if late]):
        why = _tie_counts_spread(part)
        if why:
            return why
    tests = [_pair_agreements(up) for up in ties if up.size >= 2]
    if not tests:
        return None
    bound = _pair_z_bound(sum(sums.size for sums, _, _ in tests))
    for up, (sums, pairs, lags) in zip([up for up in ties if up.size >= 2], tests):
        z = np.abs(sums) / np.sqrt(pairs)
        j = int(np.argmax(z))
        if z[j] > bound:
            n, d, m = up.size, int(lags[j]), int(pairs[j])
            name = f"i and i + {d}" if d else "i and n - 1 - i"
            agree = (m + int(sums[j])) // 2
            return (
                f"on a case of ties ({n} elements, each halfway between its neighbours) the elements "
                f"{name} chose the same way {agree} times in {m}, where independent choices agree "
                f"about half the time ({z[j]:.1f} standard deviations off; the check allows {bound:.1f} "
                "at every distance): each element must have its own random number"
            )
    return None


def _tie_counts_spread(ties: list) -> str | None:
    """None unless the counts of these tie cases (``ties``: per case, which elements went up) lie
    so close to half their elements in all that chance gives it with probability below
    ``SR_ALL_TAIL / 8``."""
    if not ties:
        return None
    dist = [abs(2 * int(up.sum()) - up.size) for up in ties]
    s = sum(dist)
    if s <= 40 * len(ties):  # else far from small: nothing to compute
        total = np.zeros(s + 1)
        total[0] = 1.0
        for up in ties:
            total = np.convolve(total, _half_abs_pmf(up.size, s))[: s + 1]
        if float(total.sum()) < SR_ALL_TAIL / 8:
            return (
                f"on {len(ties)} cases of ties (x halfway between its neighbours), the counts of elements "
                f"rounded away from zero lie {s} in all from half the elements: chance gives that with "
                f"probability {float(total.sum()):.1e}. Each element must choose on its own: numbers paired "
                "as u and 1 - u make every count exact"
            )
    return None


def _between(f: FloatFormat, code: int, frac: float) -> float:
    """The value frac of the way from the magnitude with code ``code`` to the next one."""
    lo = float(decode(code, f))
    return lo + frac * (float(decode(code + 1, f)) - lo)


def _sr_case(x: float, e: int, m: int, rng: np.random.Generator, label: str = "", shape: tuple = (SR_N,)) -> Case:
    return Case((np.full(shape, float(x)), e, m, rng), label=label)


# The last two random cases lie 2**-20 above 2/1024 and below 1022/1024 of the way between two
# values, with SR_FINE_N elements. An implementation that draws its uniform number with 9 random
# bits or fewer rounds them away with a probability off by at least 2/1024 (up or down, as it
# compares), some nine standard deviations of the count there; a right answer still fails one of
# them with probability below 2e-8 (the exact binomial tail, skewed with about 78 elements expected
# to move: tests/test_exercises_ch01.py). 40,000 elements each keep a
# whole check's results under the grader's 16 MB, even as a list of strings.
_FINE_FRACS = (2 / 1024 + 2.0**-20, 1022 / 1024 - 2.0**-20)
SR_FINE_N = 40_000


def _stochastic_cases(rng: np.random.Generator) -> list[Case]:
    # the edge cases draw from generators of their own, the same for every seed; the random
    # cases from generators seeded by rng
    fixed = iter(range(1000, 2000))

    def own() -> np.random.Generator:
        return np.random.default_rng(next(fixed))

    fp16, e4m3 = _spec(5, 10), _spec(4, 3)
    cases = [
        _sr_case(1 + 2.0**-8, 8, 7, own(), "bf16: 1 + 2**-8, exactly halfway"),
        _sr_case(1 + 2.0**-7 / 8, 8, 7, own(), "bf16: 1/8 of the way from 1 to 1 + 2**-7"),
        _sr_case(1 + 7 * 2.0**-7 / 8, 8, 7, own(), "bf16: 7/8 of the way"),
        _sr_case(-(3 + 3 * 2.0**-6 / 8), 8, 7, own(), "bf16: negative, 3/8 of the way"),
        _sr_case(math.pi, 8, 7, own(), "bf16: pi"),
        _sr_case(fp16.smallest_subnormal / 2, 5, 10, own(), "fp16: half the smallest subnormal"),
        _sr_case(-fp16.smallest_subnormal / 8, 5, 10, own(), "fp16: -1/8 of the smallest subnormal"),
        _sr_case(5.25 * fp16.smallest_subnormal, 5, 10, own(), "fp16: subnormal, 1/4 of the way"),
        _sr_case(
            fp16.smallest_normal - fp16.smallest_subnormal / 8,
            5,
            10,
            own(),
            "fp16: 7/8 of the way from the largest subnormal to the smallest normal",
        ),
        _sr_case(_between(e4m3, 7, 3 / 8), 4, 3, own(), "e4m3: between the largest subnormal and the smallest normal"),
        _sr_case(4 + 0.5 / 8, 4, 3, own(), "e4m3: just above a power of two"),
        _sr_case(-(4 + 0.5 / 8), 4, 3, own(), "e4m3: negative, just above a power of two"),
        _sr_case(1.0, 4, 3, own(), "e4m3: 1.0 is in the format"),
        _sr_case(-0.1875, 4, 3, own(), "e4m3: -0.1875 is in the format"),
        _sr_case(0.0, 4, 3, own(), "zero is in the format"),
        _sr_case(e4m3.max, 4, 3, own(), "e4m3: the largest value"),
        _sr_case(_between(e4m3, 15 * 8 - 2, 7 / 8), 4, 3, own(), "e4m3: 7/8 of the way to the largest value"),
        _sr_case(2.5, 2, 1, own(), "e2m1 (IEEE-style, largest 3): 2.5, halfway between 2 and 3"),
        _sr_case(-0.25, 2, 1, own(), "e2m1: -0.25, halfway to the only subnormal"),
        _sr_case(65504 - 32 * 3 / 4, 5, 10, own(), "fp16: near the largest value"),
        _sr_case(0.1, 8, 23, own(), "fp32: 0.1"),
    ]
    # random cases from the same hard regions: ties, eighths, subnormals, values just above a
    # power of two, values already in the format; random signs and formats
    fracs = [0.5, 0.125, 0.875, 0.25, 0.75, 0.375, 0.625]
    for i in range(24):
        e, m, f = _random_shape(rng)
        top = (2**e - 1) * 2**m - 2  # the last magnitude code below the largest
        r = rng.random()
        if r < 0.3:  # between two subnormals, or between zero and the smallest subnormal
            code = int(rng.integers(0, 2**m))
        elif r < 0.55:  # just above a power of two: the first value of a binade
            code = int(rng.integers(1, 2**e - 1)) << m
        else:
            code = int(rng.integers(0, top + 1))
        if i >= 24 - len(_FINE_FRACS):
            frac = _FINE_FRACS[i - (24 - len(_FINE_FRACS))]
        elif i % 4 == 1:
            frac = 0.5  # a tie: the elements' independence is tested there (stochastic_compare_all)
        elif (r := rng.random()) < 0.1:
            frac = 0.0  # already in the format
        elif r < 0.7:
            frac = fracs[int(rng.integers(len(fracs)))]
        else:
            frac = int(rng.integers(4, 61)) / 64
        x = _sign(rng) * _between(f, code, frac)
        fine = i >= 24 - len(_FINE_FRACS)
        shape = (SR_FINE_N,) if fine else ((100, SR_N // 100) if i % 3 == 0 else (SR_N,))
        cases.append(_sr_case(x, e, m, np.random.default_rng(int(rng.integers(2**63))), shape=shape))
    # twins: one x twice with generators in different states (the results must differ), and once
    # more with a generator in the same state as the first (the result must be the same)
    e, m, f = _random_shape(rng)
    x = _sign(rng) * _between(f, int(rng.integers(0, 2**m)) + (1 << m), 0.5)
    seed = int(rng.integers(2**63))
    for s in (seed, int(rng.integers(2**63)), seed):
        cases.append(_sr_case(x, e, m, np.random.default_rng(s)))
    return cases


#: What an answer may not call (Exercise.forbidden): the statement: no nbhelpers.formats, no nbhelpers.rounding.
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.formats", "nbhelpers.rounding")
#: What its functions may use besides their notebook's own code: see Exercise.tools. Not ml_dtypes,
#: whose types the checks judge with (the statement says so): numpy's names for them are hidden too.
TOOLS = tuple(t for t in COMPUTING_TOOLS if t != "ml_dtypes")

EXERCISES = [
    Exercise(
        "ex01.decode_bits",
        "Decode a format from its data sheet",
        4,
        decode_bits_ref,
        _decode_cases,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex01.rounding_interval",
        "What rounds to v",
        6,
        rounding_interval_ref,
        _interval_cases,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex01.count_values",
        "How many values between a and b",
        3,
        count_values_ref,
        _count_cases,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex01.smallest_absorbing",
        "Where x + c == x",
        2,
        smallest_absorbing_ref,
        _absorbing_cases,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex01.round_stochastic",
        "Stochastic rounding",
        4,
        round_stochastic_ref,
        _stochastic_cases,
        compare=stochastic_compare,
        compare_all=stochastic_compare_all,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        returned_args=(3,),  # rng: it must have drawn one number per element
        kind=ExerciseKind.IMPLEMENT,
    ),
]


def stochastic_false_failure(seed: int = 0) -> tuple[int, float]:
    """For the cases of ``ex01.round_stochastic`` with this seed: how many have an element that
    can go either way (the others cannot fail a right answer), and the chance, from the normal
    tail, that a right answer fails at least one of them."""
    cases = _stochastic_cases(np.random.default_rng(seed))
    n = sum(1 for c in cases if np.any(round_stochastic_ref(*c.args).p > 0))
    return n, 1 - (1 - SR_FALSE_FAILURE_PER_CASE) ** n
