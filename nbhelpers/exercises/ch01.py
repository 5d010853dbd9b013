"""Chapter 01 exercises: float bit layouts. Listed in ``EXERCISES`` for :mod:`nbhelpers.checks`.

Every exercise works on custom IEEE-style formats given by (exp_bits, man_bits): inf and NaN at
the all-ones exponent, subnormals at the all-zeros exponent, like fp16 and bf16. The references
are the course's own tested helpers; edge cases come first, then random cases from the seed.
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import Case, Exercise
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
        (0x0000, 8, 7): "bf16 +0", (0x8000, 8, 7): "bf16 -0", (0x7F80, 8, 7): "bf16 +inf",
        (0xFF80, 8, 7): "bf16 -inf", (0x7FC0, 8, 7): "bf16 NaN", (0x0001, 8, 7): "bf16 smallest subnormal",
        (0x0080, 8, 7): "bf16 smallest normal", (0x7F7F, 8, 7): "bf16 max", (0x4049, 8, 7): "bf16 pi",
        (0x7BFF, 5, 10): "fp16 max", (0x0400, 5, 10): "fp16 smallest normal", (0x03FF, 5, 10): "fp16 largest subnormal",
        (0x3C01, 5, 10): "fp16 1 + eps", (0x7F800001, 8, 23): "fp32 signalling NaN", (0x00000001, 8, 23): "fp32 2**-149",
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
        Case((math.pi, 8, 7), label="bf16 pi"), Case((65519.0, 5, 10), label="fp16 65519 -> 65504"),
        Case((65520.0, 5, 10), label="fp16 65520 -> inf"), Case((math.inf, 5, 10), label="inf"),
        Case((-math.inf, 4, 3), label="-inf"), Case((math.nan, 5, 2), label="NaN"), Case((0.0, 4, 3)),
        Case((-0.0, 4, 3), label="-0.0 keeps its sign"), Case((0.1, 8, 23), label="fp32 0.1"),
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
            x = float(rng.choice([t, np.nextafter(t, 0), np.nextafter(t, np.inf),
                                  rng.uniform(f.max, t), rng.uniform(t, 2 * t)]))
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
            Case((1.0, e, m), label="1.0: eps"), Case((-1.0, e, m), label="-1.0"),
            Case((f.max, e, m), label="max"), Case((2.0, e, m), label="a power of two: the gap above"),
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
    cases = [Case((8, 7), label="bf16"), Case((5, 10), label="fp16"), Case((4, 3), label="e4m3"),
             Case((2, 3), label="e2m3: no such x (returns inf)"), Case((2, 1), label="e2m1")]
    pairs = [(e, m) for e in range(2, 9) for m in range(1, 8) if 1 + e + m <= 16]
    # most random formats near where 2**(m + 1) passes the largest value (the answer turns to
    # inf there), the others from the rest
    near = [(e, m) for e, m in pairs if m + 1 >= _spec(e, m).emax - 1]
    far = [p for p in pairs if p not in near]
    for group, size in ((near, 6), (far, 4)):
        for i in rng.choice(len(group), size=size, replace=False):
            cases.append(Case(group[int(i)]))
    return cases


EXERCISES = [
    Exercise("ex01.decode_bits", "Decode a bit pattern", 4, decode_bits_ref, _decode_cases),
    Exercise("ex01.round_nearest_even", "Round to nearest, ties to even", 6,
             round_nearest_even_ref, _round_cases),
    Exercise("ex01.ulp_at", "The spacing of the grid at x", 3, ulp_at_ref, _ulp_cases),
    Exercise("ex01.smallest_absorbing", "Where x + 1 == x", 2, smallest_absorbing_ref,
             _absorbing_cases),
]
