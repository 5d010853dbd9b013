"""Chapter 05's entry of the exercise table (tests/exercise_table.py)."""

from __future__ import annotations

import math

import numpy as np

from exercise_table import ChapterSpec

SPEC = ChapterSpec(
    5,
    "ex05_loss_scaling.ipynb",
    lambda: {"math": math, "np": np},
    ("scale_window", "window_gradients", "settled_scale"),
    12,
    2718,
    tuple(
        [
            # ---- scale_window
            # overflow taken to start above the largest finite value (65504 in fp16), not at the midpoint 65520
            ("scale_window", "limit = top + 2.0 ** (bias - man_bits) / 2", "limit = math.nextafter(top, math.inf)"),
            # the tie at the midpoint thought to round down to the largest finite value
            ("scale_window", "return v >= limit", "return v > limit"),
            # the tie at half the smallest subnormal thought to survive
            ("scale_window", "return v <= tiny / 2", "return v < tiny / 2"),
            # everything below the smallest subnormal counted as lost
            ("scale_window", "return v <= tiny / 2", "return v < tiny"),
            # subnormals forgotten (flush to zero): everything below the smallest normal lost
            ("scale_window", "return v <= tiny / 2", "return v < 2.0 ** (1 - bias)"),
            # the all-ones exponent taken for finite values: no inf, a largest value twice as large
            (
                "scale_window",
                "top = (2 - 2.0**-man_bits) * 2.0**bias",
                "top = (2 - 2.0**-man_bits) * 2.0 ** (bias + 1)",
            ),
            # zeros counted, as elements that underflow
            ("scale_window", "a = np.sort(a[a != 0])", "a = np.sort(a)"),
            # the fraction must stay strictly below max_underflow
            ("scale_window", "(k + 1) / n <= max_underflow", "(k + 1) / n < max_underflow"),
            # the k-th smallest element must survive instead of the (k + 1)-th
            ("scale_window", "a[k]", "a[k - 1]"),
            # an empty window not noticed: lo above hi returned
            ("scale_window", "if e_lo > e_hi:", "if False:"),
            # no absolute value: the largest and smallest gradients taken by sign
            (
                "scale_window",
                "a = np.abs(np.asarray(x, dtype=np.float64)).ravel()",
                "a = np.asarray(x, dtype=np.float64).ravel()",
            ),
            # ---- window_gradients
            # values that underflow below the smallest subnormal: they survive at lo / 2 too
            ("window_gradients", "x = np.full(n, 2.0**-24 / lo)", "x = np.full(n, 1.5 * 2.0**-24 / lo)"),
            # half the smallest subnormal thought to survive: those values underflow at lo already
            ("window_gradients", "x = np.full(n, 2.0**-24 / lo)", "x = np.full(n, 2.0**-25 / lo)"),
            # subnormals forgotten: values at the smallest normal, which survive at lo / 2
            ("window_gradients", "x = np.full(n, 2.0**-24 / lo)", "x = np.full(n, 2.0**-14 / lo)"),
            # one value too few at the bottom: at lo / 2 the allowed fraction still holds
            ("window_gradients", "x[k + 1 :] = ", "x[k:] = "),
            # overflow thought to start above 65504: 65505 at 2 hi rounds to 65504
            ("window_gradients", "65520.0 / (2 * hi)", "65505.0 / (2 * hi)"),
            # the tie 65520 thought finite: placed at hi, where it overflows
            ("window_gradients", "65520.0 / (2 * hi)", "65520.0 / hi"),
            # the allowed fraction strictly below max_underflow: one value too few when it is exact
            ("window_gradients", "(k + 1) / n <= max_underflow", "(k + 1) / n < max_underflow"),
            # ---- settled_scale
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
