"""Chapter 01's entry of the exercise table (tests/exercise_table.py)."""

from __future__ import annotations

import math

import numpy as np

from exercise_table import ChapterSpec

SPEC = ChapterSpec(
    1,
    "ex01_float_formats.ipynb",
    lambda: {"math": math, "np": np},
    ("decode_bits", "round_nearest_even", "ulp_at", "smallest_absorbing", "round_stochastic"),
    19,
    12345,
    tuple(
        [
            # forgets that subnormals have no implicit leading 1
            ("decode_bits", "if E == 0:", "if False:"),
            # NaN codes read as infinities
            ("decode_bits", "sign * math.inf if M == 0 else math.nan", "sign * math.inf"),
            # subnormals with the exponent -bias instead of 1 - bias (that of the smallest normal)
            ("decode_bits", "math.ldexp(M, 1 - bias - man_bits)", "math.ldexp(M, -bias - man_bits)"),
            # ties away from zero instead of to even
            ("round_nearest_even", "round(abs(x) / q)", "math.floor(abs(x) / q + 0.5)"),
            # no subnormal clamp: the spacing keeps shrinking below the normal range
            ("round_nearest_even", "max(math.frexp(abs(x))[1] - 1, emin)", "math.frexp(abs(x))[1] - 1"),
            # overflow saturates instead of going to inf
            ("round_nearest_even", "r = math.inf", "r = largest"),
            # loses the sign of zero
            ("round_nearest_even", "return math.copysign(r, x)", "return math.copysign(r, x) + 0.0"),
            # overflow decided before rounding: values just above the largest that round down to it
            ("round_nearest_even", "if r > largest:", "if abs(x) > largest:"),
            # spacing of the binade below at powers of two
            ("ulp_at", "math.frexp(abs(x))[1] - 1 if", "math.frexp(abs(x) * 0.999)[1] - 1 if"),
            # no subnormal clamp: the spacing keeps shrinking below the smallest normal
            ("ulp_at", "2.0 ** (max(k, emin) - man_bits)", "2.0 ** (k - man_bits)"),
            # off by one binade
            ("smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** man_bits"),
            # the tie x + 1 thought to go up: the spacing must reach 4
            ("smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** (man_bits + 2)"),
            # forgets the formats too small to have such a value
            ("smallest_absorbing", "return x if x <= largest else math.inf", "return x"),
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
