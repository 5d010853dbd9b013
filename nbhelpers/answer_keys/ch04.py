"""Chapter 04 exercises: master weights. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Arrays are numpy float32; bf16 values travel as float32 arrays that hold bf16 values (every bf16
value is a float32 value). The master-weight step's reference is the training loop's own update
function in :mod:`nbhelpers.training` (tested against numpy/ml_dtypes in tests/test_training.py);
its results must match bit for bit, because the spec fixes every rounding. The lost-update
threshold is a float64 number that a student may compute in another order: it is compared within
a few float64 ulps (:data:`THRESHOLD_RTOL`), and its reference is checked by measurement (applying
the update with round_to) in tests/test_exercises_ch04.py.
"""

from __future__ import annotations

import numpy as np

from ..comparators import float_array
from ..exercise_types import Case, Exercise
from ..rounding import round_to
from ..training import sgd_master_step

_LRS = [1e-3, 3e-4, 1e-2, 0.1, 1e-4, 0.5]


def _bf16(x) -> np.ndarray:
    """float32 array of the bf16 values nearest to x."""
    return round_to(np.asarray(x, dtype=np.float64), "bf16").astype(np.float32)


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return rng.choice([-1.0, 1.0], size=n) * np.exp2(rng.uniform(lo, hi, size=n))


def _bf16_ties(w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """float32 midpoints between each bf16 value of w (finite, nonzero) and its neighbour one
    step up or down in magnitude: exact ties, which random data almost never gives."""
    bits = w.astype(np.float32).view(np.uint32).astype(np.int64)
    step = np.where((rng.random(w.size) < 0.5) & ((bits & 0x7FFFFFFF) > 0x10000), -0x10000, 0x10000)
    neighbour = (bits + step).astype(np.uint32).view(np.float32)
    return ((w.astype(np.float64) + neighbour) / 2).astype(np.float32)  # exact: 9 bits


# ------------------------------------------------------------------ 1. the master-weight step


def master_weight_step_ref(master: np.ndarray, grad: np.ndarray, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """(new fp32 master, its bf16 copy as float32): SGD with lr, all arithmetic in float32."""
    return sgd_master_step(master, grad, lr)


def _master_cases(rng: np.random.Generator) -> list[Case]:
    t = 2.0**-12
    cases = [
        Case((_f32([1.0]), _bf16([1.0]), 1e-3), label="update below half a bf16 spacing: the copy stays at 1"),
        Case((_f32([1.0, -1.0, 0.25]), _bf16([-1.0, 1.0, 2.0]), 1e-3), label="master moves, copy does not"),
        Case((_f32([1 + 2.0**-8 + t]), _f32([t]), 1.0), label="new master is a bf16 tie: to even (1.0)"),
        Case((_f32([1 + 3 * 2.0**-8 + t]), _f32([t]), 1.0), label="new master is a bf16 tie: to even (up)"),
        Case((_f32([0.3, -0.7, 5.0]), _bf16([0.1, 0.2, 0.3]), 0.1), label="lr 0.1 is not a float32 value"),
        Case((_f32([0.0, -0.0, 2.5]), _f32([0.0, 0.0, 0.0]), 1e-3), label="zero gradient, signed zeros"),
        Case((_f32([1e-30, 3.0]), _bf16([1e-10, 1e-30]), 1e-30), label="the product underflows float32"),
        Case((_f32(np.zeros((2, 3))), _bf16(np.arange(6).reshape(2, 3)), 0.25), label="a 2-d tensor"),
    ]
    for _ in range(60):
        n = int(rng.integers(1, 65))
        master = _f32(_log_uniform(rng, -10, 3, n))
        grad = _bf16(_log_uniform(rng, -14, 2, n))
        lr = float(rng.choice(_LRS)) if rng.random() < 0.6 else float(np.exp(rng.uniform(np.log(1e-5), np.log(1e-1))))
        if rng.random() < 0.4:
            # some new masters exactly on a bf16 tie (to even, not away), some products that
            # underflow float32, some signed zeros
            tie = _bf16_ties(_bf16(master), rng)
            step = np.float32(lr) * grad
            moved = tie + step  # a master that the step brings back to the tie, where that is exact
            exact = (moved - step) == tie
            pick = rng.random(n)
            master = np.where(pick < 0.4, np.where(exact, moved, tie), master)
            grad = np.where((pick < 0.4) & ~exact, 0, grad)
            grad = np.where((pick >= 0.4) & (pick < 0.55), _bf16(_log_uniform(rng, -140, -125, n)), grad)
            master = _f32(np.where(pick >= 0.9, rng.choice([0.0, -0.0]), master))
            grad = _f32(np.where(pick >= 0.95, 0, grad))
        cases.append(Case((master, grad, lr)))
    return cases


# ------------------------------------------------------------------ 2. the learning rate below which an update is lost

BF16_SMALLEST_SUBNORMAL = 2.0**-133
THRESHOLD_RTOL = 4 * 2.0**-52  # a few float64 ulps: the reference divides once, a student may round twice


def lost_update_threshold_ref(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    """float64 array t, the shape of w: 0 < lr < t loses the update round_bf16(w - lr * g) == w.

    w holds bf16 values (finite, not the largest magnitude), g float32 gradients. Found by
    stepping w's bf16 code one step toward -g (code + 1 away from zero, code - 1 toward it), so
    it needs no rule for powers of two, subnormals or zero; t is half that gap (a power of two)
    over |g|, one correctly rounded division; inf where g == 0.
    """
    w = np.ascontiguousarray(w, dtype=np.float32)
    g = np.ascontiguousarray(g, dtype=np.float32)
    code = (w.view(np.uint32) >> 16).astype(np.int64)
    mag = code & 0x7FFF
    toward_zero = (mag != 0) & (np.signbit(w) == np.signbit(g))  # w - lr*g shrinks |w|
    step = np.where(toward_zero, mag - 1, mag + 1)
    neighbour = (step.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    gap = np.abs(neighbour - np.abs(w.astype(np.float64)))  # exact: both on the bf16 grid
    with np.errstate(divide="ignore"):
        return np.where(g == 0, np.inf, (gap / 2) / np.abs(g.astype(np.float64)))


def threshold_compare(got, expected: np.ndarray) -> str | None:
    """None if ``got`` has expected's shape, inf exactly where expected is inf, and finite values
    within a relative ``THRESHOLD_RTOL`` of expected; else a short reason. Never raises."""
    a = float_array(got)
    if isinstance(a, str):
        return a
    if a.shape != expected.shape:
        return f"returned shape {a.shape}, expected {expected.shape}"
    inf = np.isinf(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.where(inf, a == expected, np.abs(a - expected) <= THRESHOLD_RTOL * np.abs(expected))
    if ok.all():
        return None
    i = int(np.flatnonzero(~ok.reshape(-1))[0])
    return (
        f"{int((~ok).sum())} of {a.size} elements differ; first at flat index {i}: got {float(a.flat[i])!r}, "
        f"expected {float(expected.flat[i])!r} (tolerance: relative {THRESHOLD_RTOL:.3g}, inf exactly)"
    )


def _pow2_weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """Signed powers of two in bf16's range, half of them around the normal/subnormal boundary."""
    near = rng.integers(-133, -123, size=n)  # 2**-133 .. 2**-124: subnormal, smallest normal, just above
    anywhere = rng.integers(-133, 127, size=n)
    e = np.where(rng.random(n) < 0.5, near, anywhere)
    return rng.choice([-1.0, 1.0], size=n) * np.exp2(e.astype(np.float64))


def _threshold_cases(rng: np.random.Generator) -> list[Case]:
    s = BF16_SMALLEST_SUBNORMAL
    cases = [
        Case((_bf16([1.0, 1.0]), _f32([-1e-3, 1e-3])), label="w = 1 moving up, and down: the gap below 1 is half"),
        Case((_bf16([-1.0, -1.0]), _f32([1e-3, -1e-3])), label="w = -1 moving away from zero, and toward it"),
        Case((_bf16([1.5, 1.5, -0.3]), _f32([2e-3, -2e-3, 5e-4])), label="not a power of two: both gaps equal"),
        Case(
            (_bf16([0.0, -0.0, 0.0]), _f32([1e-3, 1e-3, -3.0])), label="w = 0: the neighbour is the smallest subnormal"
        ),
        Case((_bf16([s, 5 * s, -s]), _f32([1e-3, -1e-3, -2.0])), label="subnormal weights, one step to zero"),
        Case(
            (_bf16([2.0**-126, 2.0**-125, -(2.0**-126)]), _f32([1.0, 1.0, -1.0])),
            label="smallest normal toward zero: no halving; 2**-125: halved",
        ),
        Case((_bf16([1.0, -2.0, 0.0]), _f32([0.0, -0.0, 0.0])), label="zero gradient: never moves (inf)"),
        Case(
            (_bf16([2.0**127, 3e38, 1e-3]), _f32([-1.0, 1e-45, 1e10])), label="large weights, tiny and huge gradients"
        ),
        Case((_bf16(np.linspace(-2, 2, 6).reshape(2, 3)), _f32(np.full((2, 3), 1e-2))), label="a 2-d tensor"),
    ]
    for _ in range(60):
        n = int(rng.integers(1, 65))
        pick = rng.random(n)
        w = _log_uniform(rng, -20, 4, n)
        w = np.where(pick < 0.08, _log_uniform(rng, -60, 126.5, n), w)
        w = np.where((pick >= 0.08) & (pick < 0.3), _pow2_weights(rng, n), w)
        w = np.where((pick >= 0.3) & (pick < 0.4), rng.integers(-127, 128, size=n) * s, w)  # subnormals, zero
        w = np.where((pick >= 0.4) & (pick < 0.43), rng.choice([0.0, -0.0], size=n), w)
        g = _log_uniform(rng, -30, 5, n)
        g = np.where(rng.random(n) < 0.05, _log_uniform(rng, -149, -126, n), g)  # float32 subnormal gradients
        g = np.where(rng.random(n) < 0.06, rng.choice([0.0, -0.0], size=n), g)
        cases.append(Case((_bf16(w), _f32(g))))
    return cases


EXERCISES = [
    Exercise("ex04.master_weight_step", "The master-weight update step", 3, master_weight_step_ref, _master_cases),
    Exercise(
        "ex04.lost_update_threshold",
        "The learning rate below which a bf16 update is lost",
        5,
        lost_update_threshold_ref,
        _threshold_cases,
        compare=threshold_compare,
    ),
]
