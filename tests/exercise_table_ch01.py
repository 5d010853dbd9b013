"""Chapter 01's entry of the exercise table (tests/exercise_table.py)."""

from __future__ import annotations

import math

import numpy as np

from exercise_table import ChapterSpec

SPEC = ChapterSpec(
    1,
    "ex01_float_formats.ipynb",
    lambda: {"math": math, "np": np},
    ("decode_bits", "rounding_interval", "count_values", "smallest_absorbing", "round_stochastic"),
    19,
    12345,
    tuple(
        [
            # forgets that subnormals have no implicit leading 1
            ("decode_bits", "if E == 0:", "if False:"),
            # IEEE's rule: the top binade is +-inf (mantissa 0) and NaN
            (
                "decode_bits",
                "and M == (1 << man_bits) - 1:\n        return math.nan",
                ":\n        return sign * math.inf if M == 0 else math.nan",
            ),
            # the whole top binade NaN
            ("decode_bits", " and M == (1 << man_bits) - 1:", ":"),
            # MX's fp6/fp4 convention: the NaN code read as a number
            ("decode_bits", "        return math.nan", "        pass"),
            # only the positive NaN code
            (
                "decode_bits",
                "if E == (1 << exp_bits) - 1 and M == (1 << man_bits) - 1:",
                "if bits == (1 << (exp_bits + man_bits)) - 1:",
            ),
            # subnormals with the exponent -bias instead of 1 - bias (that of the smallest normal)
            ("decode_bits", "math.ldexp(M, 1 - bias - man_bits)", "math.ldexp(M, -bias - man_bits)"),
            # bias off by one
            ("decode_bits", "bias = 2 ** (exp_bits - 1) - 1", "bias = 2 ** (exp_bits - 1)"),
            # ties the wrong way: both midpoints always in the interval
            ("rounding_interval", "if round(a / q) % 2 == 1:", "if False:"),
            # ... or never
            ("rounding_interval", "if round(a / q) % 2 == 1:", "if True:"),
            # ... or the even value loses its ties
            ("rounding_interval", "if round(a / q) % 2 == 1:", "if round(a / q) % 2 == 0:"),
            # the binade asymmetry ignored: the gap below a power of two taken as the gap above
            ("rounding_interval", "below = q / 2 if a == 2.0**k and k > emin else q", "below = q"),
            # the gap below halved at the smallest normal too (the subnormals have its spacing)
            ("rounding_interval", "if a == 2.0**k and k > emin else q", "if a == 2.0**k and a != 0 else q"),
            # the largest value's interval thought to run on to inf (saturation)
            (
                "rounding_interval",
                "    if v < 0:",
                "    if a == (2 - 2.0**-man_bits) * 2.0 ** (1 - emin):\n        hi = math.inf\n    if v < 0:",
            ),
            # zero's interval only on the positive side
            ("rounding_interval", "    if v < 0:", "    if a == 0:\n        lo = 0.0\n    if v < 0:"),
            # negative v mirrored without swapping the ends
            ("rounding_interval", "return (-hi, -lo)", "return (-lo, -hi)"),
            # no subnormal clamp: the spacing keeps shrinking below the smallest normal
            (
                "rounding_interval",
                "max(math.frexp(a)[1] - 1, emin) if a else emin",
                "math.frexp(a)[1] - 1 if a else emin",
            ),
            # +0 and -0 counted as two values
            ("count_values", "code(b, False) + code(-a, False) + 1", "code(b, False) + code(-a, False) + 2"),
            # half-open interval: a value at b not counted
            ("count_values", "return code(b, False) - code(a, True) + 1", "return code(b, False) - code(a, True)"),
            # the ends rounded to nearest instead of inward
            ("count_values", "math.ceil(y / q) if up else math.floor(y / q)", "round(y / q)"),
            # the ends rounded the wrong way (outward)
            (
                "count_values",
                "math.ceil(y / q) if up else math.floor(y / q)",
                "math.floor(y / q) if up else math.ceil(y / q)",
            ),
            # no subnormal clamp: codes below the smallest normal come out wrong
            ("count_values", "max(math.frexp(y)[1] - 1, emin) if y else emin", "math.frexp(y)[1] - 1 if y else emin"),
            # nothing past the largest value is clamped: counts codes of inf and NaN as values
            (
                "count_values",
                "a, b = max(a, -largest), min(b, largest)",
                "a, b = max(a, -2 * largest), min(b, 2 * largest)",
            ),
            # off by one binade
            ("smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** man_bits"),
            # the tie x + c thought to go up: the half gap must exceed c
            ("smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** (man_bits + 1) * (2 if p == c else 1)"),
            # forgets the formats too small to have such a value
            ("smallest_absorbing", "return x if x <= largest else math.inf", "return x"),
            # c's own mantissa ignored: c times 2**(man_bits + 1)
            ("smallest_absorbing", "x = p * 2.0 ** (man_bits + 1)", "x = c * 2.0 ** (man_bits + 1)"),
            # c rounded down to a power of two, not up
            ("smallest_absorbing", "        p *= 2", "        pass"),
            # deterministic: round to nearest even
            ("round_stochastic", "r = (lower + (u < frac)) * q", "r = np.rint(y) * q"),
            # the probability the wrong way round: up with probability 1 - frac
            ("round_stochastic", "(u < frac)", "(u < 1 - frac)"),
            # one random number for every element
            ("round_stochastic", "u = rng.random(x.shape)", "u = rng.random()"),
            # a uniform number of only 6 random bits (or 5), compared as u < frac
            ("round_stochastic", "u = rng.random(x.shape)", "u = np.floor(rng.random(x.shape) * 64) / 64"),
            ("round_stochastic", "u = rng.random(x.shape)", "u = np.floor(rng.random(x.shape) * 32) / 32"),
            # the same, rounding y + u down (away from zero when u >= 1 - frac)
            (
                "round_stochastic",
                "r = (lower + (u < frac)) * q",
                "r = np.floor(y + np.floor(u * 64) / 64) * q",
            ),
            # always toward zero (truncation)
            ("round_stochastic", "(lower + (u < frac))", "lower"),
            # no subnormal clamp: the spacing keeps shrinking below the smallest normal
            ("round_stochastic", "np.maximum(np.frexp(a)[1] - 1, emin)", "np.frexp(a)[1] - 1"),
        ]
    ),
)
