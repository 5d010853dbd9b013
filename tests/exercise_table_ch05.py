"""Chapter 05's entry of the exercise table (tests/exercise_table.py)."""

from __future__ import annotations

import math

import numpy as np

from exercise_table import ChapterSpec

SPEC = ChapterSpec(
    5,
    "ex05_loss_scaling.ipynb",
    lambda: {"math": math, "np": np},
    ("scale_trajectory", "underflow_fraction", "settled_scale"),
    12,
    2718,
    tuple(
        [
            # the scale kept in float64: products not rounded to float32
            (
                "scale_trajectory",
                "scale = float(np.float32(scale * backoff_factor))",
                "scale = scale * backoff_factor",
            ),
            (
                "scale_trajectory",
                "grown = float(np.float32(scale * growth_factor))",
                "grown = scale * growth_factor",
            ),
            # init_scale not rounded to float32
            ("scale_trajectory", "scale = float(np.float32(init_scale))", "scale = float(init_scale)"),
            # no overflow guard: the scale becomes inf
            ("scale_trajectory", "if math.isfinite(grown):", "if True:"),
            # an inf step does not reset the count of good steps
            (
                "scale_trajectory",
                "                good = 0\n            else:",
                "                pass\n            else:",
            ),
            # off by one: grows one step late
            ("scale_trajectory", "if good == growth_interval:", "if good > growth_interval:"),
            # the count is not reset after growing (grows at every step after the first interval)
            (
                "scale_trajectory",
                "                        scale = grown\n                    good = 0",
                "                        scale = grown",
            ),
            # the tie at half the smallest subnormal counted as surviving
            ("underflow_fraction", "<= smallest_subnormal / 2", "< smallest_subnormal / 2"),
            # zeros counted in the denominator
            ("underflow_fraction", "return flushed / n", "return flushed / x.size"),
            # everything below the smallest normal counted as lost (subnormals forgotten)
            (
                "underflow_fraction",
                "smallest_subnormal = 2.0 ** (1 - bias - man_bits)",
                "smallest_subnormal = 2.0 ** (2 - bias)",
            ),
            # threshold at the smallest subnormal instead of half of it
            ("underflow_fraction", "<= smallest_subnormal / 2", "< smallest_subnormal"),
            # no absolute value: every negative element counted as lost
            ("underflow_fraction", "np.abs(x) <=", "x <="),
            # overflow taken to start above fp16's largest value 65504, not at the rounding midpoint 65520
            ("settled_scale", "return scaled >= limit", "return scaled > 65504.0"),
            # the tie at 65520 thought to round down to 65504 (it goes to the even neighbour, 2**16: inf)
            ("settled_scale", "return scaled >= limit", "return scaled > limit"),
            # S one factor of 2 too high: the peak of the cycle, the scale of the overflowing step
            ("settled_scale", "return s, skipped", "return 2 * s, skipped"),
            # S one factor of 2 too low: one back-off too many
            ("settled_scale", "return s, skipped", "return s / 2, skipped"),
            # one skip per growth_interval steps: the overflowing step not counted in the cycle
            ("settled_scale", "1 / (growth_interval + 1)", "1 / growth_interval"),
            # the cycle thought to last one step longer (growth counted on the step after the last good one)
            ("settled_scale", "1 / (growth_interval + 1)", "1 / (growth_interval + 2)"),
            # init_scale's mantissa ignored: S taken as a power of two
            ("settled_scale", "s = float(np.float32(init_scale))", "s = 2.0 ** math.floor(math.log2(init_scale))"),
            # init_scale not rounded to float32
            ("settled_scale", "s = float(np.float32(init_scale))", "s = float(init_scale)"),
            # no float32 cap: the scale grows past float32's largest value
            ("settled_scale", " and s * 2 <= top:", ":"),
            # the cap reached but a growth attempt still counted as a skipped step
            ("settled_scale", "capped = s * 2 > top", "capped = False"),
            # no back-off: a start above S is kept
            ("settled_scale", "while overflows(max_abs_grad * s):", "while False:"),
        ]
    ),
)
