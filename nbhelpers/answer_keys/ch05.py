"""Chapter 05 exercises: loss scaling. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

The dynamic scaler's reference is :class:`nbhelpers.loss_scaling.DynamicLossScaler`, which
tests/test_loss_scaling.py holds bit for bit against ``torch.amp.GradScaler("cpu")``; the
underflow reference (:func:`nbhelpers.metrics.underflow_fraction`) counts with the course's
``round_to``. The settled scale's reference is a closed form from the fp16 and float32 formats;
tests/test_exercises_ch05.py measures it by running the scaler. Edge cases come first, then random
ones (hidden sequences and arrays) from the seed.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..exercise_types import Case, Exercise
from ..formats import FORMATS, FloatFormat
from ..loss_scaling import scale_trajectory
from ..metrics import underflow_fraction

# ------------------------------------------------------------------ 1. the dynamic loss scaler


def scale_trajectory_ref(
    found_inf: list, init_scale: float, growth_factor: float, backoff_factor: float, growth_interval: int
) -> list[float]:
    """GradScaler's scale after each step of the sequence (a list of floats)."""
    return scale_trajectory(found_inf, init_scale, growth_factor, backoff_factor, growth_interval)


def _scale_cases(rng: np.random.Generator) -> list[Case]:
    F, T = False, True
    cases = [
        Case(([], 65536.0, 2.0, 0.5, 2000), label="no steps"),
        Case(([F, F, F, F, F], 65536.0, 2.0, 0.5, 2), label="grows every 2 finite steps"),
        Case(([T, T, F, T, F, F], 65536.0, 2.0, 0.5, 2), label="an inf resets the count of good steps"),
        Case(([F, F, F, F], 3.0e38, 2.0, 0.5, 1), label="growth that would overflow float32 is skipped"),
        Case(([T] * 8, 2.0**-145, 2.0, 0.5, 10), label="backoff underflows to 0"),
        Case(([F, T, F, F], 0.1, 2.0, 0.5, 2), label="init_scale 0.1 is rounded to float32"),
        Case(([F, F, T, F, F, F], 1000.0, 1.5, 0.3, 2), label="factors that need float32 rounding"),
        Case(([F, F, F, F, F, F], 1.0, 1.1, 0.5, 1), label="growth factor 1.1 at every step"),
    ]
    growths = [2.0, 1.5, 3.0, 1.1, 4.0, 1.25]
    backoffs = [0.5, 0.25, 0.3, 0.9, 0.125]
    inits = [2.0**16, 1.0, 3.0, 1000.0, 2.0**100, 0.1, 2.0**-100]
    for _ in range(80):
        n = int(rng.integers(1, 121))
        p = float(rng.uniform(0, 0.5))
        seq = [bool(v) for v in rng.random(n) < p]
        init = float(rng.choice(inits)) if rng.random() < 0.7 else float(np.exp2(rng.uniform(-20, 40)))
        r = rng.random()
        if r < 0.25:  # near float32's max with few infs: growth overflows and is skipped, then backoffs
            init, seq = float(np.exp2(rng.uniform(118, 127.9))), [bool(v) for v in rng.random(n) < 0.1]
        elif r < 0.35:  # near the bottom with many infs: backoffs into the subnormals and to 0
            init, seq = float(np.exp2(rng.uniform(-149, -120))), [bool(v) for v in rng.random(n) < 0.7]
        cases.append(
            Case((seq, init, float(rng.choice(growths)), float(rng.choice(backoffs)), int(rng.integers(1, 9))))
        )
    return cases


# ------------------------------------------------------------------ 2. the fraction that underflows

_SHAPES = [(5, 10), (8, 7), (4, 3), (5, 2), (3, 2), (6, 9), (8, 23), (2, 1)]


def underflow_fraction_ref(x: np.ndarray, exp_bits: int, man_bits: int) -> float:
    """Fraction of the nonzero elements of x that round to zero in (exp_bits, man_bits)."""
    return underflow_fraction(x, FloatFormat.custom(int(exp_bits), int(man_bits)))


def _underflow_cases(rng: np.random.Generator) -> list[Case]:
    s16 = 2.0**-24
    sbf = 2.0**-133
    cases = [
        Case((np.array([s16 / 2]), 5, 10), label="fp16: exactly half the smallest subnormal (tie to 0)"),
        Case((np.array([np.nextafter(s16 / 2, 1.0)]), 5, 10), label="fp16: just above the tie"),
        Case((np.array([s16, -s16 / 4, 1.0, 0.0]), 5, 10), label="zeros are not counted"),
        Case((np.zeros(5), 5, 10), label="no nonzero element"),
        Case((np.array([-3e-8, 3e-8, -2.9e-8, 1e-9]), 5, 10), label="negative values"),
        Case((np.array([1e-45, 1e-40, sbf / 2, sbf]), 8, 7), label="bf16: its subnormals go down to 2**-133"),
        Case((np.array([1e-45, 1e-40, 2.0**-149, 2.0**-150]), 8, 23), label="fp32"),
        Case((np.array([[1e-5, 1e-3], [1e-2, 0.0]]), 4, 3), label="a 2-d array, e4m3 shape"),
    ]
    for _ in range(80):
        e, m = _SHAPES[rng.integers(len(_SHAPES))]
        f = FloatFormat.custom(e, m)
        n = int(rng.integers(1, 400))
        k = np.log2(f.smallest_subnormal)
        x = rng.choice([-1.0, 1.0], size=n) * np.exp2(rng.uniform(k - 6, k + 8, size=n))
        x[rng.random(n) < 0.1] = 0.0
        if rng.random() < 0.6:  # some exact ties at half the smallest subnormal, and their neighbours
            tie = f.smallest_subnormal / 2
            near = rng.choice([tie, tie, np.nextafter(tie, 0), np.nextafter(tie, 1)], size=n)
            x = np.where(rng.random(n) < 0.2, rng.choice([-1.0, 1.0], size=n) * near, x)
        cases.append(Case((x, e, m)))
    return cases


# ------------------------------------------------------------------ 3. the scale a dynamic scaler settles at
#
# A predict-then-measure problem: the scaler of exercise 1, with factors 2 and 0.5, fed a gradient of
# the same largest magnitude g every step, overflowing in fp16. The reference is the closed form from
# the two formats; tests/test_exercises_ch05.py measures the same numbers by running the chapter's
# DynamicLossScaler with found_inf from a real rounding to fp16.

_FP16 = FORMATS["fp16"]
# the smallest magnitude that rounds to inf in fp16: the largest finite value plus half its ulp (the
# midpoint between it and 2**16, where the rounded value would land if the exponent went on); the tie
# itself goes to 2**16 (its mantissa is even), so a product >= this overflows
FP16_OVERFLOW = _FP16.max + math.ldexp(_FP16.eps, math.frexp(_FP16.max)[1] - 1) / 2


def settled_scale_ref(max_abs_grad: float, init_scale: float, growth_interval: int) -> tuple[float, float]:
    """(S, skipped): the scale a GradScaler-rule scaler (x2 / x0.5) keeps once settled, and the fraction
    of steps it skips then, for a gradient whose largest magnitude is max_abs_grad at every step."""
    g = Fraction(max_abs_grad)
    s0 = float(np.float32(init_scale))
    _, e = math.frexp(s0)  # s0 = m * 2**e, 0.5 <= m < 1; the scale stays s0 * 2**k
    # the largest k with g * s0 * 2**k < FP16_OVERFLOW, exactly
    k = math.floor(math.log2(FP16_OVERFLOW / (float(g) * s0)))
    while g * Fraction(s0) * Fraction(2) ** k >= FP16_OVERFLOW:
        k -= 1
    while g * Fraction(s0) * Fraction(2) ** (k + 1) < FP16_OVERFLOW:
        k += 1
    k_cap = 128 - e  # s0 * 2**k is finite in float32 up to this k (one more: m * 2**129 > float32's max)
    if k >= k_cap:  # growth past float32's range is refused: no growth attempt, no overflow
        return math.ldexp(s0, k_cap), 0.0
    # once at S: growth_interval taken steps, growth to 2 S, one overflowing (skipped) step, back to S
    return math.ldexp(s0, k), 1 / (growth_interval + 1)


def _grad_for(product: float, scale: float) -> float:
    """A max_abs_grad with at most 29 significant bits whose product with ``scale`` (a float32 value) is
    ``product`` or just below (the exact product with scale is then a float64: 29 + 24 bits)."""
    q = product / scale
    mq, eq = math.frexp(q)
    return math.ldexp(math.floor(mq * 2**29), eq - 29)


def _trim(x: float) -> float:
    """x cut to 29 significant bits (toward zero)."""
    m, e = math.frexp(x)
    return math.ldexp(math.floor(m * 2**29), e - 29)


# odd parts of 65520 = 2**4 * 3**2 * 5 * 7 * 13: with such a mantissa in the scale the tie can be hit
_TIE_ODD = [3, 5, 7, 9, 13, 15, 21, 35, 45, 63, 91, 105, 315, 455, 819, 4095]


def _settled_cases(rng: np.random.Generator) -> list[Case]:
    T = FP16_OVERFLOW
    below = np.nextafter(T, 0)
    cases = [
        Case((1.0, 65536.0, 2000), label="GradScaler's defaults, a gradient of 1 (the answer is from a back-off)"),
        Case((T / 2.0**17, 1.0, 4), label="scaled gradient exactly 65520 at 2**17: the tie rounds to inf"),
        Case((below / 2.0**17, 1.0, 4), label="scaled gradient just below 65520 at 2**17: rounds to 65504"),
        Case((65510.0 / 2.0**16, 65536.0, 3), label="scaled gradient 65510 at 2**16: above 65504, still finite"),
        Case((65504.0 / 2.0**10, 1024.0, 2), label="scaled gradient exactly 65504: finite"),
        Case((3.0e5, 1.0, 5), label="even a scale of 1 overflows: the answer is below 1"),
        Case((2.0**-130, 1.0, 3), label="a tiny gradient: growth stops at float32's largest power-of-two multiple"),
        Case((2.0**-130, 3.0, 3), label="the float32 cap with a scale of the form 3 * 2**k"),
        Case((_trim(1e-3), 1000.0, 1), label="growth_interval 1, a scale of the form 1000 * 2**k"),
        Case((_trim(0.3), 0.1, 7), label="init_scale 0.1 (rounded to float32 first)"),
        Case((65520.0 / (45 * 2.0**8), 45.0 * 2**20, 2), label="a tie with a scale of the form 45 * 2**k, from above"),
    ]
    for i in range(90):
        kind = i % 9
        # the starting scale: a power of two, a short odd multiple (which can hit the tie exactly), or any
        # float64 (rounded to float32 by the scaler)
        r = rng.random()
        if r < 0.3 or kind == 0 and r < 0.5:
            init = math.ldexp(1.0, int(rng.integers(-30, 60)))
        elif r < 0.6 or kind == 0:
            init = math.ldexp(float(rng.choice(_TIE_ODD)), int(rng.integers(-30, 50)))
        else:
            init = float(np.exp2(rng.uniform(-30, 60)))
        if kind == 4:  # the float32 cap: start high, or the climb takes too many steps to simulate
            init = math.ldexp(init, 96 - math.frexp(init)[1] + int(rng.integers(0, 30)))
        s0 = float(np.float32(init))
        interval = int(rng.choice([1, 2, 3, 5, 8, 16, 100, 2000]))
        # the scale at which the scaled gradient lands in a hard place: grown to, backed off to, or the start
        scale = math.ldexp(s0, int(rng.integers(-12, 13)))
        if kind == 0:  # exactly on the tie 65520 (rounds to inf): S is half of this scale
            g = T / scale
        elif kind == 1:  # just below the tie: rounds to 65504, finite
            g = _grad_for(float(below), scale)
        elif kind in (2, 3):  # between 65504 and 65520: finite, although above fp16's largest
            g = _grad_for(float(rng.uniform(65504.5, 65519.5)), scale)
        elif kind == 4:  # a tiny gradient: S would pass float32's largest value
            g = _trim(float(np.exp2(rng.uniform(-140, -112))))
        elif kind == 5:  # a large gradient: S below 1
            g = _trim(float(np.exp2(rng.uniform(17, 90))))
        else:  # anywhere in a binade below the overflow
            g = _grad_for(float(np.exp2(rng.uniform(15, 16))), scale)
        cases.append(Case((g, init, interval)))
    return cases


EXERCISES = [
    Exercise("ex05.scale_trajectory", "The dynamic loss scaler", 5, scale_trajectory_ref, _scale_cases),
    Exercise("ex05.underflow_fraction", "The fraction that underflows", 3, underflow_fraction_ref, _underflow_cases),
    Exercise("ex05.settled_scale", "Predict where the scaler settles", 4, settled_scale_ref, _settled_cases),
]
