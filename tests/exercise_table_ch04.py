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
    ("master_weight_step", "lost_update_threshold"),
    8,
    4321,
    tuple(
        [
            # the product in float64 (lr not rounded to float32, product not rounded)
            ("master_weight_step", "np.float32(lr) * grad", "lr * grad.astype(np.float64)"),
            # the product rounded, but lr used at float64 precision
            ("master_weight_step", "np.float32(lr) * grad", "(lr * grad.astype(np.float64)).astype(np.float32)"),
            # bf16 copy by truncation (upper 16 bits) instead of round to nearest
            (
                "master_weight_step",
                "new_master.astype(ml_dtypes.bfloat16).astype(np.float32)",
                "(new_master.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)",
            ),
            # the copy made from the old master (one step behind)
            ("master_weight_step", "weights = new_master.astype", "weights = master.astype"),
            # the master itself kept in bf16: no master at all
            ("master_weight_step", "return new_master, weights", "return weights, weights"),
            # bf16 copy rounded half away from zero (add half an ulp, truncate) instead of to even
            (
                "master_weight_step",
                "new_master.astype(ml_dtypes.bfloat16).astype(np.float32)",
                "((new_master.view(np.uint32) + np.uint32(0x8000)) & np.uint32(0xFFFF0000)).view(np.float32)",
            ),
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
