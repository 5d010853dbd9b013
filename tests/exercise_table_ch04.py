"""Chapter 04's entry of the exercise table (tests/exercise_table.py)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from exercise_table import ChapterSpec

SPEC = ChapterSpec(
    4,
    "ex04_master_weights.ipynb",
    lambda: {"math": math, "np": np, "ml_dtypes": ml_dtypes},
    ("lost_update_threshold", "first_copy_change"),
    8,
    4321,
    tuple(
        [
            # ---- first_copy_change
            # the master's steps added exactly: no float32 rounding of master - step
            ("first_copy_change", "n = np.rint(d / v)", "n = d / v"),
            # the product in float64: lr not rounded to float32, the product not rounded
            (
                "first_copy_change",
                "d = np.abs((np.float32(lr) * g).astype(np.float64))",
                "d = np.abs(lr * g.astype(np.float64))",
            ),
            # the product rounded to float32, but formed with lr at float64 precision
            (
                "first_copy_change",
                "d = np.abs((np.float32(lr) * g).astype(np.float64))",
                "d = np.abs((lr * g.astype(np.float64)).astype(np.float32).astype(np.float64))",
            ),
            # a step of half a float32 spacing rounded up (half away from zero), not to even
            ("first_copy_change", "n = np.rint(d / v)", "n = np.floor(d / v + 0.5)"),
            # a step below half a float32 spacing still moves the master (rounded up)
            ("first_copy_change", "n = np.rint(d / v)", "n = np.ceil(d / v)"),
            # the tie on the bf16 midpoint forgotten: the copy always moves one step later
            ("first_copy_change", "k = np.where((q == np.floor(q)) & odd, q, k)", "k = k"),
            # the tie on the midpoint the wrong way round: it moves from an even last bit
            ("first_copy_change", "(q == np.floor(q)) & odd", "(q == np.floor(q)) & ~odd"),
            # every tie moves the copy (round half away from w)
            ("first_copy_change", "k = np.floor(q) + 1", "k = np.ceil(q)"),
            # off by one: the steps that do not move the copy counted instead
            ("first_copy_change", "k = np.floor(q) + 1", "k = np.floor(q)"),
            # always the gap above |w|: the finer binade below a power of two forgotten
            (
                "first_copy_change",
                "gap = np.where(toward_zero & (a == np.exp2(e)) & (e > -126), gap / 2, gap)",
                "gap = gap",
            ),
            # the finer binade below 2**-126 too (the subnormals below it are not finer)
            ("first_copy_change", "& (e > -126), gap / 2, gap)", ", gap / 2, gap)"),
            # the master's float32 grid taken at w, also when it moves down into the finer binade
            ("first_copy_change", "v = gap * 2.0**-16", "v = np.exp2(e - 23.0)"),
            # the direction of +g instead of -g
            ("first_copy_change", "np.signbit(w) == np.signbit(g)", "np.signbit(w) != np.signbit(g)"),
            # no subnormal range: the binade of a subnormal taken from its own exponent
            ("first_copy_change", "np.maximum(e - 1, -126)", "e - 1"),
            # ---- lost_update_threshold
            # the neighbour above w in value, whatever the sign of g
            ("lost_update_threshold", "(np.signbit(w) == np.signbit(g))", "np.signbit(w)"),
            # the direction of +g instead of -g (w + lr*g)
            ("lost_update_threshold", "np.signbit(w) == np.signbit(g)", "np.signbit(w) != np.signbit(g)"),
            # the direction from the sign of g alone, as if every weight were positive
            ("lost_update_threshold", "(np.signbit(w) == np.signbit(g))", "~np.signbit(g)"),
            # always the spacing above |w|: the finer binade below a power of two forgotten
            ("lost_update_threshold", "gap / 2, gap)", "gap, gap)"),
            # the gap halved at a power of two in both directions
            ("lost_update_threshold", "toward_zero & power_of_two & (e > -126)", "power_of_two & (e > -126)"),
            # the gap halved below the smallest normal too (the subnormals below it are not finer)
            ("lost_update_threshold", "power_of_two & (e > -126)", "power_of_two"),
            # no subnormal range: the binade of a subnormal taken from its own exponent
            ("lost_update_threshold", "np.maximum(e - 1, -126)", "e - 1"),
            # w == 0 not special: frexp's exponent of 0 used as a binade
            (
                "lost_update_threshold",
                "e = np.where(a > 0, np.maximum(e - 1, -126), -126)",
                "e = np.maximum(e - 1, -126)",
            ),
            # the full gap instead of half: the update is lost until it reaches the neighbour
            ("lost_update_threshold", "(gap / 2) / np.abs(g)", "gap / np.abs(g)"),
            # float32's spacing (24 significant bits) instead of bf16's
            ("lost_update_threshold", "np.exp2(e - 7.0)", "np.exp2(e - 23.0)"),
            # a tiny epsilon against division by zero: finite where g == 0
            ("lost_update_threshold", "/ np.abs(g)", "/ (np.abs(g) + 1e-30)"),
            # the result returned in float32
            (
                "lost_update_threshold",
                "return (gap / 2) / np.abs(g)",
                "return ((gap / 2) / np.abs(g)).astype(np.float32)",
            ),
        ]
    ),
)
