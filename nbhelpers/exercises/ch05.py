"""Chapter 05 exercises: loss scaling. Listed in ``EXERCISES`` for :mod:`nbhelpers.checks`.

The dynamic scaler's reference is :class:`nbhelpers.loss_scaling.DynamicLossScaler`, which
tests/test_loss_scaling.py holds bit for bit against ``torch.amp.GradScaler("cpu")``; the
underflow reference (:func:`nbhelpers.metrics.underflow_fraction`) counts with the course's
``round_to``. Edge cases come first, then random ones (hidden sequences and arrays) from the seed.
"""
from __future__ import annotations

import numpy as np

from ..checks import Case, Exercise
from ..formats import FloatFormat
from ..loss_scaling import scale_trajectory
from ..metrics import underflow_fraction

# ------------------------------------------------------------------ 1. the dynamic loss scaler


def scale_trajectory_ref(found_inf: list, init_scale: float, growth_factor: float, backoff_factor: float,
                         growth_interval: int) -> list[float]:
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
        cases.append(Case((seq, init, float(rng.choice(growths)), float(rng.choice(backoffs)),
                           int(rng.integers(1, 9)))))
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


EXERCISES = [
    Exercise("ex05.scale_trajectory", "The dynamic loss scaler", 5, scale_trajectory_ref, _scale_cases),
    Exercise("ex05.underflow_fraction", "The fraction that underflows", 3, underflow_fraction_ref,
             _underflow_cases),
]
