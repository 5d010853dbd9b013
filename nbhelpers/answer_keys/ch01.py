"""Chapter 01 exercises: float bit layouts. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Every exercise works on custom IEEE-style formats given by (exp_bits, man_bits): inf and NaN at
the all-ones exponent, subnormals at the all-zeros exponent, like fp16 and bf16. The references
are the course's own tested helpers; edge cases come first, then random cases from the seed.
"""

from __future__ import annotations

import math

import numpy as np

from ..comparators import float_array
from ..exercise_types import Case, Exercise
from ..formats import FloatFormat, all_codes, decode, finite_values, ulp
from ..rounding import absorption_threshold, round_to

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


# ------------------------------------------------------------------ 1. decode a code


def decode_bits_ref(bits: int, exp_bits: int, man_bits: int) -> float:
    """Value of the code ``bits`` in the IEEE-style format (exp_bits, man_bits)."""
    return float(decode(int(bits), _spec(exp_bits, man_bits)))


def _decode_cases(rng: np.random.Generator) -> list[Case]:
    cases = [Case((int(b), 3, 2), label="every code of e3m2") for b in all_codes(_spec(3, 2))]
    named = {
        (0x0000, 8, 7): "bf16 +0",
        (0x8000, 8, 7): "bf16 -0",
        (0x7F80, 8, 7): "bf16 +inf",
        (0xFF80, 8, 7): "bf16 -inf",
        (0x7FC0, 8, 7): "bf16 NaN",
        (0x0001, 8, 7): "bf16 smallest subnormal",
        (0x0080, 8, 7): "bf16 smallest normal",
        (0x7F7F, 8, 7): "bf16 max",
        (0x4049, 8, 7): "bf16 pi",
        (0x7BFF, 5, 10): "fp16 max",
        (0x0400, 5, 10): "fp16 smallest normal",
        (0x03FF, 5, 10): "fp16 largest subnormal",
        (0x3C01, 5, 10): "fp16 1 + eps",
        (0x7F800001, 8, 23): "fp32 signalling NaN",
        (0x00000001, 8, 23): "fp32 2**-149",
    }
    cases += [Case(args, label=label) for args, label in named.items()]
    # the random codes over-sample the two special exponent fields (uniform codes of fp32 or
    # bf16 almost never have them): a wrong subnormal or NaN rule must fail here too
    for _ in range(150):
        e, m, _ = _random_shape(rng)
        r = rng.random()
        E = 0 if r < 0.3 else 2**e - 1 if r < 0.45 else None  # zero/subnormal, inf/NaN, any
        cases.append(Case((_code(rng, e, m, E), e, m)))
    return cases


# ------------------------------------------------------------------ 2. round to nearest even


def round_nearest_even_ref(x: float, exp_bits: int, man_bits: int) -> float:
    """``x`` rounded to the nearest value of (exp_bits, man_bits); ties to even; overflow to +-inf."""
    return float(round_to(float(x), _spec(exp_bits, man_bits)))


def _round_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for e, m in [(3, 2), (4, 3), (5, 2), (2, 3)]:
        f = _spec(e, m)
        v = finite_values(f, nonnegative=True)
        mids = (v[:-1] + v[1:]) / 2
        for t in mids[:: max(1, mids.size // 12)]:
            cases.append(Case((float(t), e, m), label=f"tie between neighbours of e{e}m{m}"))
            cases.append(Case((-float(t), e, m), label=f"negative tie in e{e}m{m}"))
        top = f.max + (f.max - v[-2]) / 2
        cases += [
            Case((float(top), e, m), label=f"e{e}m{m}: max + half a spacing (overflows)"),
            Case((float(np.nextafter(top, 0)), e, m), label=f"e{e}m{m}: just below max + half a spacing"),
            Case((f.smallest_subnormal / 2, e, m), label=f"e{e}m{m}: half the smallest subnormal (tie to 0)"),
            Case((f.smallest_subnormal * 0.75, e, m), label=f"e{e}m{m}: 3/4 of the smallest subnormal"),
            Case((-1e-300, e, m), label="tiny negative underflows to -0.0"),
        ]
    cases += [
        Case((1 + 2.0**-8, 8, 7), label="bf16: 1 + 2**-8 is a tie, goes to 1"),
        Case((1 + 3 * 2.0**-8, 8, 7), label="bf16: tie, goes up to the even neighbour"),
        Case((math.pi, 8, 7), label="bf16 pi"),
        Case((65519.0, 5, 10), label="fp16 65519 -> 65504"),
        Case((65520.0, 5, 10), label="fp16 65520 -> inf"),
        Case((math.inf, 5, 10), label="inf"),
        Case((-math.inf, 4, 3), label="-inf"),
        Case((math.nan, 5, 2), label="NaN"),
        Case((0.0, 4, 3)),
        Case((-0.0, 4, 3), label="-0.0 keeps its sign"),
        Case((0.1, 8, 23), label="fp32 0.1"),
    ]
    # random cases from every hard region, not only random magnitudes (which are never ties):
    # ties between random neighbours (subnormal ones too), the overflow threshold, underflow to
    # a signed zero, specials
    for _ in range(200):
        e, m, f = _random_shape(rng)
        r = rng.random()
        if r < 0.35:  # a tie between two neighbours; half of them subnormal
            top = 2**m - 1 if rng.random() < 0.3 else (2**e - 1) * 2**m - 2  # last code below max
            c = int(rng.integers(0, top + 1))
            E, M = max(c >> m, 1), c & (2**m - 1)  # the value is (2**m [if normal] + M) * q
            q = 2.0 ** (E - f.bias - m)
            x = ((c >> m > 0) * 2**m + M + 0.5) * q  # halfway to the next value (code c + 1)
        elif r < 0.5:  # around the overflow threshold max + half a spacing
            t = f.max + 2.0 ** (f.emax - m - 1)
            x = float(
                rng.choice(
                    [t, np.nextafter(t, 0), np.nextafter(t, np.inf), rng.uniform(f.max, t), rng.uniform(t, 2 * t)]
                )
            )
        elif r < 0.65:  # below the smallest subnormal: to zero (with the sign), or up to it
            s = f.smallest_subnormal
            x = float(rng.choice([s / 2, np.nextafter(s / 2, 1), rng.uniform(0, s / 2), rng.uniform(s / 2, s)]))
        elif r < 0.7:
            x = float(rng.choice([0.0, math.inf, math.nan]))
        else:
            x = 2.0 ** rng.uniform(np.log2(f.smallest_positive) - 2, np.log2(f.max) + 1)
        cases.append(Case((_sign(rng) * x, e, m)))
    return cases


# ------------------------------------------------------------------ 3. the spacing at x


def ulp_at_ref(x: float, exp_bits: int, man_bits: int) -> float:
    """Gap between |x| (a finite value of the format) and the next larger value of its binade."""
    return float(ulp(float(x), _spec(exp_bits, man_bits)))


def _ulp_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for e, m in [(3, 2), (5, 10), (8, 7), (4, 3)]:
        f = _spec(e, m)
        cases += [
            Case((0.0, e, m), label="zero: the subnormal spacing"),
            Case((f.smallest_subnormal, e, m), label="smallest subnormal"),
            Case((f.smallest_normal, e, m), label="smallest normal"),
            Case((f.smallest_normal - f.smallest_subnormal, e, m), label="largest subnormal"),
            Case((1.0, e, m), label="1.0: eps"),
            Case((-1.0, e, m), label="-1.0"),
            Case((f.max, e, m), label="max"),
            Case((2.0, e, m), label="a power of two: the gap above"),
        ]
    # random values of the format, over-sampling powers of two (where the binade changes), the
    # subnormals and zeros (where the spacing stops shrinking), and the largest value
    for _ in range(150):
        e, m, f = _random_shape(rng)
        r = rng.random()
        if r < 0.25:
            x = 2.0 ** int(rng.integers(f.emin - m, f.emax + 1))
        elif r < 0.45:
            x = float(decode(_code(rng, e, m, 0), f))  # a subnormal or a signed zero
        elif r < 0.5:
            x = f.max
        else:
            x = float(round_to(2.0 ** rng.uniform(np.log2(f.smallest_positive), np.log2(f.max)), f))
        cases.append(Case((_sign(rng) * x, e, m)))
    return cases


# ------------------------------------------------------------------ 4. where x + 1 == x


def smallest_absorbing_ref(exp_bits: int, man_bits: int) -> float:
    """Smallest positive x of the format with round(x + 1) == x (nearest-even); inf if none."""
    return absorption_threshold(_spec(exp_bits, man_bits), 1.0)


def _absorbing_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((8, 7), label="bf16"),
        Case((5, 10), label="fp16"),
        Case((4, 3), label="e4m3"),
        Case((2, 3), label="e2m3: no such x (returns inf)"),
        Case((2, 1), label="e2m1"),
    ]
    pairs = [(e, m) for e in range(2, 9) for m in range(1, 8) if 1 + e + m <= 16]
    # most random formats near where 2**(m + 1) passes the largest value (the answer turns to
    # inf there), the others from the rest
    near = [(e, m) for e, m in pairs if m + 1 >= _spec(e, m).emax - 1]
    far = [p for p in pairs if p not in near]
    for group, size in ((near, 6), (far, 4)):
        for i in rng.choice(len(group), size=size, replace=False):
            cases.append(Case(group[int(i)]))
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

    def __init__(self, x: np.ndarray, lower: np.ndarray, upper: np.ndarray, p: np.ndarray) -> None:
        self.x, self.lower, self.upper, self.p = x, lower, upper, p

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
    of the upper one (away from zero), for :func:`stochastic_compare`. Does not draw from rng."""
    f = _spec(exp_bits, man_bits)
    x = np.asarray(x, dtype=np.float64)
    lower = np.asarray(round_to(x, f, "toward_zero"), dtype=np.float64)  # toward zero: the smaller magnitude
    on_grid = lower == x
    upper = np.where(on_grid, x, lower + np.copysign(ulp(lower, f), x))  # one spacing further out
    gap = np.abs(upper - lower)
    p = np.where(on_grid, 0.0, np.abs(x - lower) / np.where(on_grid, 1.0, gap))  # exact: a short dyadic
    return StochasticTarget(x, lower, upper, p)


def stochastic_compare(got, expected: StochasticTarget) -> str | None:
    """None if ``got`` could come from stochastic rounding, else a short reason.

    Every element must be one of its two neighbours (by value: the sign of a zero is not
    checked), an element already in the format must come back as it is, and the number of
    elements rounded away from zero must be within ``SR_Z`` standard deviations of its expectation:
    |k - sum p| <= SR_Z * sqrt(sum p (1 - p)). For one x repeated n times this is
    |mean - x| <= SR_Z * sqrt(p (1 - p) / n) * gap. A right answer fails one case by bad luck
    with probability about 2e-9 (``SR_FALSE_FAILURE_PER_CASE``, the two-sided normal tail beyond
    6), a check of 45 cases with probability below 1e-7 (tests/test_exercises_ch01.py bounds it
    with the exact binomial tails).
    """
    t = expected
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
    return None


def _between(f: FloatFormat, code: int, frac: float) -> float:
    """The value frac of the way from the magnitude with code ``code`` to the next one."""
    lo = float(decode(code, f))
    return lo + frac * (float(decode(code + 1, f)) - lo)


def _sr_case(x: float, e: int, m: int, rng: np.random.Generator, label: str = "") -> Case:
    return Case((np.full(SR_N, float(x)), e, m, rng), label=label)


# The last random cases lie 2**-12 above and below 2/64 and 62/64 of the way between two values.
# An implementation that draws its uniform number with only 5 or 6 random bits rounds them away
# with a probability off by about 1/64 (above or below, as it compares), which 10,000 elements
# tell apart from the right one; a right answer still fails one of them with probability below
# 6e-9 (exact binomial tails, tests/test_exercises_ch01.py).
_FINE_FRACS = (2 / 64 + 2.0**-12, 2 / 64 - 2.0**-12, 62 / 64 + 2.0**-12, 62 / 64 - 2.0**-12)


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
        elif (r := rng.random()) < 0.1:
            frac = 0.0  # already in the format
        elif r < 0.7:
            frac = fracs[int(rng.integers(len(fracs)))]
        else:
            frac = int(rng.integers(4, 61)) / 64
        x = _sign(rng) * _between(f, code, frac)
        cases.append(_sr_case(x, e, m, np.random.default_rng(int(rng.integers(2**63)))))
    return cases


EXERCISES = [
    Exercise("ex01.decode_bits", "Decode a bit pattern", 4, decode_bits_ref, _decode_cases),
    Exercise("ex01.round_nearest_even", "Round to nearest, ties to even", 6, round_nearest_even_ref, _round_cases),
    Exercise("ex01.ulp_at", "The spacing of the grid at x", 3, ulp_at_ref, _ulp_cases),
    Exercise("ex01.smallest_absorbing", "Where x + 1 == x", 2, smallest_absorbing_ref, _absorbing_cases),
    Exercise(
        "ex01.round_stochastic",
        "Stochastic rounding",
        4,
        round_stochastic_ref,
        _stochastic_cases,
        compare=stochastic_compare,
    ),
]


def stochastic_false_failure(seed: int = 0) -> tuple[int, float]:
    """For the cases of ``ex01.round_stochastic`` with this seed: how many have an element that
    can go either way (the others cannot fail a right answer), and the chance, from the normal
    tail, that a right answer fails at least one of them."""
    cases = _stochastic_cases(np.random.default_rng(seed))
    n = sum(1 for c in cases if np.any(round_stochastic_ref(*c.args).p > 0))
    return n, 1 - (1 - SR_FALSE_FAILURE_PER_CASE) ** n
