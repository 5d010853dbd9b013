"""Chapter 02's entry of the exercise table (tests/exercise_table.py)."""

from __future__ import annotations

import math

import numpy as np

from exercise_table import ChapterSpec
from nbhelpers.rounding import round_to

SPEC = ChapterSpec(
    2,
    "ex02_accumulation.ipynb",
    lambda: {"math": math, "np": np, "round_to": round_to},
    ("kahan_sum", "pairwise_sum", "dot_product", "stall_length", "order_matters"),
    19,
    12345,
    tuple(
        [
            # plain sequential sum: the compensation is never used
            ("kahan_sum", "y = float(round_to(xk - c, acc))", "y = xk"),
            # y kept unrounded (float64): the compensation is applied at higher precision
            ("kahan_sum", "y = float(round_to(xk - c, acc))", "y = xk - c"),
            # the inner difference t - s not rounded before subtracting y
            ("kahan_sum", "float(round_to(t - s, acc)) - y", "(t - s) - y"),
            # compensation added with the wrong sign
            ("kahan_sum", "round_to(xk - c, acc)", "round_to(xk + c, acc)"),
            # returns the float64 value s - c (not a value of acc) instead of s
            ("kahan_sum", "    return s\n", "    return s - c\n"),
            # splits in the middle instead of at the largest power of two below n
            ("pairwise_sum", "h = 1 << ((n - 1).bit_length() - 1)", "h = n // 2"),
            # adds the halves in float64 and never rounds
            (
                "pairwise_sum",
                "float(round_to(pairwise_sum(x[:h], acc) + pairwise_sum(x[h:], acc), acc))",
                "pairwise_sum(x[:h], acc) + pairwise_sum(x[h:], acc)",
            ),
            # the power of two on the right: x[:n-h] + x[n-h:]
            ("pairwise_sum", "h = 1 << ((n - 1).bit_length() - 1)", "h = n - (1 << ((n - 1).bit_length() - 1))"),
            # the largest power of two up to n instead of strictly below it (no split when n is one)
            ("pairwise_sum", "h = 1 << ((n - 1).bit_length() - 1)", "h = 1 << (n.bit_length() - 1)"),
            # inputs not rounded to in_fmt
            (
                "dot_product",
                "round_to(np.asarray(a, dtype=float), in_fmt) * round_to(\n"
                "        np.asarray(b, dtype=float), in_fmt\n    )",
                "np.asarray(a, dtype=float) * np.asarray(b, dtype=float)",
            ),
            # accumulates in float64 and rounds once at the end
            ("dot_product", "s = float(round_to(s + pk, acc))", "s = s + pk"),
            # products rounded to the accumulator format before adding
            ("dot_product", "round_to(s + pk, acc)", "round_to(s + float(round_to(pk, acc)), acc)"),
            # inputs rounded to the accumulator format instead of in_fmt
            ("dot_product", "in_fmt)", "acc)"),
            # off by one: counts the first lost term too
            ("stall_length", "return k\n", "return k + 1\n"),
            # returns where the sum stalls instead of how many terms it took
            ("stall_length", "return k\n", "return int(s)\n"),
            # rounds toward zero instead of to nearest even
            (
                "stall_length",
                "t = float(round_to(s + value, acc))",
                "t = float(round_to(s + value, acc, 'toward_zero'))",
            ),
            # ties away from zero instead of to even
            (
                "stall_length",
                "t = float(round_to(s + value, acc))",
                "t = float(round_to(s + value, acc, 'nearest_away'))",
            ),
            # terms that are float64 values but not values of acc: the format rounds them
            ("order_matters", "q = 2.0**-p\n", "q = 1 / (2**p + 1)\n"),
            # the orders swapped: exact in reverse, lossy as returned
            ("order_matters", "return np.array(terms)", "return np.array(terms[::-1])"),
            # one term too few: 2**p terms of the unit counted with the total instead of before it
            ("order_matters", "terms = [q] * 2**p", "terms = [q] * (2**p - 1)"),
            # all terms equal: the sum stalls in both orders
            ("order_matters", "return np.array(terms)", "return np.full(n, q)"),
            # no growing levels: past 2**p equal terms the forward sum stalls too
            ("order_matters", "terms += [2.0**level * q]", "terms += [q]"),
            # a negative term
            ("order_matters", "terms = [q] * 2**p", "terms = [-q] + [q] * (2**p - 1)"),
        ]
    ),
)
