"""Chapter 02's entry of the exercise table (tests/exercise_table.py)."""

from __future__ import annotations

import math

import numpy as np

from exercise_table import ChapterSpec
from nbhelpers.formats import get_format
from nbhelpers.rounding import round_to

SPEC = ChapterSpec(
    2,
    "ex02_accumulation.ipynb",
    lambda: {"math": math, "np": np, "round_to": round_to, "get_format": get_format},
    ("kahan_beats_plain", "pairwise_blocked_sum", "split_k_dot", "sum_of_copies", "order_matters"),
    19,
    12345,
    tuple(
        [
            # all ones after 2**p: the exact sum is not always a value of acc, and what is left
            # in Kahan's c at the end is never paid back
            ("kahan_beats_plain", "[1.0] * (units - halved) + [0.5] * (2 * halved)", "[1.0] * (n - 1)"),
            # starts below the stall: the plain sum counts the ones up to 2**p
            ("kahan_beats_plain", "terms = [2.0**p]", "terms = [2.0 ** (p - 1)]"),
            # a start with an odd last bit: the first tie goes up, and the exact sum is no value of acc
            ("kahan_beats_plain", "terms = [2.0**p]", "terms = [2.0**p + 2]"),
            # padded with zeros instead of halves: not positive
            ("kahan_beats_plain", "[0.5] * (2 * halved)", "[1.0] * halved + [0.0] * halved"),
            # the big term last: the plain sum counts every one
            ("kahan_beats_plain", "return np.array(terms)", "return np.array(terms[::-1])"),
            # leaves added sequentially (the blocked order), not by a tree
            ("pairwise_blocked_sum", "h = 1 << ((leaves - 1).bit_length() - 1)", "h = leaves - 1"),
            # the leaves split in the middle instead of at the largest power of two below L
            ("pairwise_blocked_sum", "h = 1 << ((leaves - 1).bit_length() - 1)", "h = leaves // 2"),
            # the terms split at a power of two, not at a leaf boundary
            ("pairwise_blocked_sum", "m = h * b", "m = 1 << ((n - 1).bit_length() - 1)"),
            # each leaf added in float64 and rounded once at the end
            ("pairwise_blocked_sum", "s = float(round_to(s + xk, acc))", "s = s + float(xk)"),
            # no split: a plain dot product in acc
            ("split_k_dot", "c = -(-len(p) // splits)", "c = len(p)"),
            # chunks of floor(K / splits): an extra short chunk at the end
            ("split_k_dot", "c = -(-len(p) // splits)", "c = max(1, len(p) // splits)"),
            # the partial sums added in float64, rounded once to out_fmt
            ("split_k_dot", "total = float(round_to(total + part, acc))", "total = total + part"),
            # each partial sum written in out_fmt before the reduction
            (
                "split_k_dot",
                "total = float(round_to(total + part, acc))",
                "total = float(round_to(total + float(round_to(part, out_fmt)), acc))",
            ),
            # the partial sums added in out_fmt
            ("split_k_dot", "round_to(total + part, acc)", "round_to(total + part, out_fmt)"),
            # inputs not rounded to in_fmt
            (
                "split_k_dot",
                "round_to(np.asarray(a, dtype=float), in_fmt) * round_to(\n"
                "        np.asarray(b, dtype=float), in_fmt\n    )",
                "np.asarray(a, dtype=float) * np.asarray(b, dtype=float)",
            ),
            # rounding once at the end: fl(n * value)
            ("sum_of_copies", "    s, k = 0.0, 0\n", "    return float(round_to(n * value, acc))\n"),
            # the sum taken to stall at 2**p copies, and exact until then
            ("sum_of_copies", "    s, k = 0.0, 0\n", "    return float(min(n, 2 ** (f.man_bits + 1)) * value)\n"),
            # off by one term: n - 1 copies
            ("sum_of_copies", "while k < n:", "while k < n - 1:"),
            # ties going up (away from zero) instead of to even
            (
                "sum_of_copies",
                "up = 2 * r > g or (2 * r == g and ((value - r) / g) % 2 == 1)",
                "up = 2 * r >= g",
            ),
            # the binade's end reached by s instead of by s + value: one step too many
            ("sum_of_copies", "room = 2.0 ** (e + 1) - s - value", "room = 2.0 ** (e + 1) - s"),
            # the spacing taken as 2**(e - p) (half a spacing) instead of 2**(e - man_bits)
            ("sum_of_copies", "g = 2.0 ** (e - f.man_bits)", "g = 2.0 ** (e - f.man_bits - 1)"),
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
