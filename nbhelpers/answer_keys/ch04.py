"""Chapter 04 exercises: master weights. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Arrays are numpy float32; bf16 values travel as float32 arrays that hold bf16 values (every bf16
value is a float32 value). The lost-update threshold is a float64 number that a student may compute
in another order: it is compared within a few float64 ulps (:data:`THRESHOLD_RTOL`), and its
reference is checked by measurement (applying the update with round_to) in
tests/test_exercises_ch04.py. The step at which the bf16 copy of an fp32 master first moves is an
integer, compared exactly; its reference runs the loop's first float32 step and counts from there,
and tests/test_exercises_ch04.py runs the whole loop on the cases of two seeds to confirm it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

from ..comparators import float_array
from ..exercise_types import Case, Exercise
from ..rounding import round_to


def _bf16(x) -> np.ndarray:
    """float32 array of the bf16 values nearest to x."""
    return round_to(np.asarray(x, dtype=np.float64), "bf16").astype(np.float32)


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return rng.choice([-1.0, 1.0], size=n) * np.exp2(rng.uniform(lo, hi, size=n))


def _gap_toward(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    """float64 distance from each bf16 value of w (float32 array) to its bf16 neighbour in the
    direction of -g (for g == 0: away from zero), found by stepping w's bf16 code (code + 1 away
    from zero, code - 1 toward it): no rule for powers of two, subnormals or zero needed."""
    code = (w.view(np.uint32) >> 16).astype(np.int64)
    mag = code & 0x7FFF
    toward_zero = (mag != 0) & (np.signbit(w) == np.signbit(g)) & (g != 0)  # w - lr*g shrinks |w|
    step = np.where(toward_zero, mag - 1, mag + 1)
    neighbour = (step.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.abs(neighbour - np.abs(w.astype(np.float64)))  # exact: both on the bf16 grid


# ------------------------------------------------------------------ 1. the learning rate below which an update is lost

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
    gap = _gap_toward(w, g)
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


def _some_2d(cases: list[Case]) -> list[Case]:
    """Every third of these cases with an even number of weights, its arrays as 2 rows: the
    random cases have 2-d tensors too, not only the fixed ones (an answer that flattens fails)."""
    out = []
    for i, c in enumerate(cases):
        arrays = [a for a in c.args if isinstance(a, np.ndarray)]
        if i % 3 == 0 and arrays and arrays[0].size % 2 == 0 and arrays[0].size > 1:
            c = Case(tuple(a.reshape(2, -1) if isinstance(a, np.ndarray) else a for a in c.args), label=c.label)
        out.append(c)
    return out


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
    n_fixed = len(cases)
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
    return cases[:n_fixed] + _some_2d(cases[n_fixed:])


# ------------------------------------------------------------------ 2. when the bf16 copy of an fp32 master first moves
#
# A predict-then-measure problem: SGD with a constant gradient, fp32 master weights, a bf16 copy.
# The reference runs the loop's own float32 step once (the master's first move) and then counts
# exactly, resolving a landing on the bf16 midpoint by rounding that midpoint with ml_dtypes; it uses
# no rule about parities or grids. tests/test_exercises_ch04.py runs the whole loop (up to 2**15 + 1
# steps) on every case of two seeds and finds the same step.

MAX_STEPS = 2**15 + 1  # the master moves at least one float32 spacing per step: 2**16 of them make a bf16 gap


def first_copy_change_ref(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    """int64 array, w's shape: the first step k >= 1 of the loop (master = w as float32; each step
    master = master - float32(lr) * g in float32; copy = bf16(master), to nearest even) at which the
    copy differs from w; 0 where it never does."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    g = np.ascontiguousarray(g, dtype=np.float32)
    d = np.float32(lr) * g  # the loop's step, a float32 product
    moved = np.abs((w - d).astype(np.float64) - w.astype(np.float64))  # the master's first move, in float32
    half = _gap_toward(w, g) / 2  # from w to the midpoint toward -g
    out = np.zeros(w.shape, dtype=np.int64)
    for i in zip(*np.nonzero(moved)):
        step, h = Fraction(float(moved[i])), Fraction(float(half[i]))
        # every later step moves the master by the same amount (it stays on one float32 grid until it
        # has passed the midpoint), so after k steps it is k * step from w
        k = math.ceil(h / step)
        if k * step == h:  # on the midpoint: a tie, decided by the bf16 rounding itself
            mid = np.float32(float(w[i]) - math.copysign(float(h), float(d[i])))  # exact: 9 significant bits
            k += int(mid.astype(ml_dtypes.bfloat16).astype(np.float32) == w[i])
        out[i] = k
    return out


def _grid(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    """float32's spacing where a master that starts at w and moves toward -g travels before its copy
    changes: a 2**-16 of the bf16 gap in that direction (24 significant bits against 8)."""
    return _gap_toward(np.ascontiguousarray(w, dtype=np.float32), np.ascontiguousarray(g, dtype=np.float32)) / 2**16


def _copy_weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """bf16 weights (float32): log-uniform, powers of two (the finer binade below), the smallest
    normal and its neighbours, subnormals, zeros of both signs; half the codes odd, half even."""
    pick = rng.random(n)
    w = _log_uniform(rng, -40, 40, n)
    w = np.where(pick < 0.25, _pow2_weights(rng, n), w)
    w = np.where((pick >= 0.25) & (pick < 0.35), rng.integers(-300, 301, size=n) * BF16_SMALLEST_SUBNORMAL, w)
    w = np.where((pick >= 0.35) & (pick < 0.4), rng.choice([0.0, -0.0], size=n), w)
    w = _bf16(w)
    # an odd last bit on a random half of the normal weights that are not powers of two
    bits = w.view(np.uint32)
    odd = (rng.random(n) < 0.5) & (np.abs(w) > 2.0**-120) & ((bits & 0x7F0000) != 0)
    return np.where(odd, (bits | 0x10000).view(np.float32), w)


def _copy_case(rng: np.random.Generator) -> Case:
    """One random case. The master's step in units of its float32 spacing v (``d / v``) decides the
    answer; kinds: (0) any lr, d / v log-uniform from 2**-2 to 2**17; (1) lr a power of two and
    d / v a small integer or half-integer exactly (ties of the float32 rounding, powers of two that
    land on the bf16 midpoint); (2) and (3) lr not a float32 value, d / v exactly a half-integer only
    after lr is rounded to float32 (the product in float64, and in (3) the product of lr itself
    rounded to float32, round the other way)."""
    n = int(rng.integers(4, 49))
    kind = int(rng.integers(4))
    w = _copy_weights(rng, n)
    sign = rng.choice([-1.0, 1.0], size=n)  # the direction of -g against w's sign
    v = _grid(w, sign)  # the grid for g of this sign; recomputed below for the real g
    if kind == 0:
        lr = float(np.exp2(rng.uniform(-30, 0)))
        lr = lr if rng.random() < 0.5 else float(rng.choice([1e-3, 3e-4, 1e-2, 0.1, 1e-4, 1e-5]))
        ratio = np.exp2(rng.uniform(-2, 17, size=n))
        g = _bf16(sign * ratio * v / np.float32(lr))
    elif kind == 1:
        a = int(rng.integers(0, 40))
        lr = 2.0**-a
        r = rng.random(n)
        half_steps = np.where(
            r < 0.5,
            2.0 ** rng.integers(1, 17, size=n),  # d / v a power of two up to 2**15
            rng.integers(1, 256, size=n),  # d / v = m / 2, m < 256: integers and half-integers
        )
        g = _f32(sign * half_steps / 2 * v * 2.0**a)
    elif kind == 2:
        i = int(rng.integers(1, 1024))  # d / v = i + 1/2: float32 rounds to the even of i, i + 1
        c = int(rng.integers(20, 40))
        lr32 = (2 * i + 1) * 2.0**-c
        # a relative 2**-27 off: float32(lr) is lr32 again, the float64 product crosses the half-integer
        lr = lr32 * (1 + (2.0**-27 if i % 2 == 0 else -(2.0**-27)))
        g = _f32(sign * v * 2.0 ** (c - 1))  # a power of two: d = lr32 * g = (i + 1/2) v exactly
    else:
        # lr just above a power of two 2**-c (float32 rounds it down to that), g = q * 2**b with q = 2i + 1 odd
        # and i even: float32(lr) * g = (i + 1/2) v exactly, which rounds to i; the product with lr itself,
        # rounded to float32 or not, lies above the half-integer and rounds to i + 1
        q = int(rng.choice(np.arange(5, 256, 4)))
        c = int(rng.integers(10, 40))
        eps = 2.0**-24 * (1 + 2.0 ** math.floor(math.log2(q)) / q) / 2  # between d's half ulp and lr's
        lr = 2.0**-c * (1 + eps)
        g = _f32(sign * q * v * 2.0 ** (c - 1))
    g = np.where(rng.random(n) < 0.04, rng.choice([0.0, -0.0], size=n), g)
    # keep the elements whose gradient is a normal bf16 value (or zero) and whose grid is the one aimed at
    ok = np.isfinite(g) & ((g == 0) | (np.abs(g) >= 2.0**-126)) & (_bf16(g) == g) & (np.abs(g) < 2.0**100)
    ok &= (g == 0) | (_grid(w, g) == v)
    if not ok.any():
        return _copy_case(rng)
    return Case((w[ok], _f32(g[ok]), lr))


def _copy_cases(rng: np.random.Generator) -> list[Case]:
    s = BF16_SMALLEST_SUBNORMAL
    odd = 1 + 2.0**-7  # bf16 code with the last mantissa bit set
    cases = [
        Case(
            (_f32([1.0, 1.0]), _f32([-(2.0**-9), 2.0**-9]), 2.0**-12),
            label="w = 1, up and down: the grid below 1 is finer",
        ),
        Case(
            (_f32([1.0, odd, 1.5, 1.5 + 2.0**-7]), _f32([-(2.0**-13)] * 4), 2.0**-10),
            label="the master lands on the bf16 midpoint: the copy moves only from an odd last bit",
        ),
        Case(
            (_f32([1.0, 1.0]), _f32([-(2.0**-12), -(2.0**-11)]), 2.0**-12),
            label="a step of half (and a whole) float32 spacing",
        ),
        Case(
            (_f32([1.0, 1.0, 1.0]), _f32([-3.0, -5.0, -7.0]), 2.0**-24), label="1.5, 2.5, 3.5 float32 spacings per step"
        ),
        Case((_bf16([1.0, 3.0, -0.3]), _bf16([-1e-3, 2e-3, 5e-4]), 1e-3), label="lr 1e-3: steps that float32 rounds"),
        Case((_f32([0.0, -0.0, 0.0]), _bf16([1e-30, 1e-30, -1e-38]), 1e-3), label="w = 0: the neighbour is 2**-133"),
        Case((_f32([s, 5 * s, -s]), _bf16([1e-38, -1e-38, -1e-39]), 0.5), label="subnormal weights"),
        Case(
            (_f32([2.0**-126, 2.0**-125]), _bf16([1e-38, 1e-38]), 0.25),
            label="2**-126 down: no finer binade below it; 2**-125 down: there is",
        ),
        Case((_f32([1.0, -2.0, 0.5]), _bf16([0.0, -0.0, 1e-20]), 1e-3), label="no step: zero gradient, or lost"),
        Case((_bf16([1.0, 1e4]), _bf16([0.5, -3.0]), 0.1), label="a step past the midpoint at once"),
        Case(
            (_f32(np.full((2, 3), 0.25)), _bf16(np.linspace(-1e-4, 1e-4, 6).reshape(2, 3)), 0.01), label="a 2-d tensor"
        ),
    ]
    with np.errstate(over="ignore"):  # gradients past float32's range are drawn, then dropped
        return cases + _some_2d([_copy_case(rng) for _ in range(60)])


# ------------------------------------------------------------------ 3. stochastic rounding: the expected first move
#
# A derivation: a bf16 weight with no master copy, updated by w - lr * g rounded stochastically to
# bf16 (to each neighbour with probability proportional to closeness), moves at a step with
# probability p = min(lr |g| / gap, 1), independently of the steps before while it has not moved,
# so its first move comes after 1 / p steps on average (a geometric distribution). The gap is
# exercise 1's, toward -g. tests/test_exercises_ch04.py measures the mean with round_to's
# stochastic rounding.


def expected_first_move_ref(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    """float64 array, the shape of w: the expected number of the step at which a bf16 weight w,
    updated by SGD with the constant gradient g and learning rate lr in bf16 with stochastic
    rounding (no master), first changes; inf where g == 0."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    g = np.ascontiguousarray(g, dtype=np.float32)
    gap = _gap_toward(w, g)
    d = lr * np.abs(g.astype(np.float64))  # one rounding: the exact product is the real step
    with np.errstate(divide="ignore"):
        return np.where(g == 0, np.inf, np.maximum(gap / d, 1.0))


def _first_move_cases(rng: np.random.Generator) -> list[Case]:
    s = BF16_SMALLEST_SUBNORMAL
    cases = [
        Case((_bf16([1.0, 1.0]), _f32([-1e-3, 1e-3]), 0.5), label="w = 1 moving up, and down: the gap below is half"),
        Case((_bf16([1.5, -0.3]), _f32([2e-3, 5e-4]), 1.0), label="not a power of two: both gaps equal"),
        Case((_bf16([1.0, 1.0]), _f32([-1.0, 1.0]), 2.0**-7), label="one gap up, two gaps down: the first step"),
        Case((_bf16([1.0, 2.0]), _f32([-1.0, -1.0]), 2.0**-9), label="a quarter and an eighth of a gap: 4 and 8 steps"),
        Case((_bf16([1.0]), _f32([-1.0]), 2.0**-8), label="half a gap up: round to nearest's tie, 2 steps"),
        Case((_bf16([1.0]), _f32([-3.0]), 1.0), label="a step of several gaps: the first step, never fewer"),
        Case((_bf16([0.0, -0.0]), _f32([1e-3, -1e-3]), 1e-38), label="w = 0: the gap is the smallest subnormal"),
        Case((_bf16([s, 5 * s]), _f32([1.0, -1.0]), 2.0**-140), label="subnormal weights"),
        Case(
            (_bf16([2.0**-126, 2.0**-125]), _f32([1.0, 1.0]), 2.0**-140),
            label="toward zero from the smallest normal: no halving; from 2**-125: halved",
        ),
        Case((_bf16([1.0, -2.0]), _f32([0.0, -0.0]), 0.1), label="zero gradient: never moves (inf)"),
        Case(
            (_bf16([2.0**-125, 2.0**-100]), _f32([2.0**-30, 1e-40]), 2.0**-110),
            label="toward zero from powers of two with gradients whose product with w underflows float32",
        ),
        Case((_bf16(np.linspace(-2, 2, 6).reshape(2, 3)), _f32(np.full((2, 3), 1e-2)), 1e-3), label="a 2-d tensor"),
    ]
    n_fixed = len(cases)
    for _ in range(60):
        n = int(rng.integers(1, 65))
        pick = rng.random(n)
        w = _log_uniform(rng, -20, 4, n)
        w = np.where(pick < 0.25, _pow2_weights(rng, n), w)
        w = np.where((pick >= 0.25) & (pick < 0.33), rng.integers(-127, 128, size=n) * s, w)
        w = np.where((pick >= 0.33) & (pick < 0.36), rng.choice([0.0, -0.0], size=n), w)
        if rng.random() < 0.3:  # near bf16's smallest numbers only: subnormals, 2**-126 .. 2**-124, zero
            w = np.where(rng.random(n) < 0.6, rng.integers(-127, 128, size=n) * s, _pow2_weights(rng, n))
            w = np.where(np.abs(w) > 2.0**-122, np.sign(w) * 2.0**-125, w)
        g = _log_uniform(rng, -12, 2, n)
        g = np.where(rng.random(n) < 0.08, _log_uniform(rng, -149, -100, n), g)  # |w * g| may underflow
        g = np.where(rng.random(n) < 0.05, rng.choice([0.0, -0.0], size=n), g)
        w, g = _bf16(w), _f32(g)
        # a learning rate that puts most steps between a thousandth of a gap and a few gaps
        gap = _gap_toward(w, g)
        moving = g != 0
        ratio = float(np.median(gap[moving] / np.abs(g[moving].astype(np.float64)))) if moving.any() else 1.0
        lr = float(ratio * np.exp2(rng.uniform(-10, 2)))
        cases.append(Case((w, g, lr)))
    return cases[:n_fixed] + _some_2d(cases[n_fixed:])


#: What an answer may not call (Exercise.forbidden): the statement: nothing of nbhelpers.
FORBIDDEN = ("nbhelpers",)

EXERCISES = [
    Exercise(
        "ex04.lost_update_threshold",
        "The learning rate below which a bf16 update is lost",
        5,
        lost_update_threshold_ref,
        _threshold_cases,
        compare=threshold_compare,
        forbidden=FORBIDDEN,
    ),
    Exercise(
        "ex04.first_copy_change",
        "When the bf16 copy of an fp32 master first moves",
        3,
        first_copy_change_ref,
        _copy_cases,
        forbidden=FORBIDDEN,
    ),
    Exercise(
        "ex04.expected_first_move",
        "Stochastic rounding: when a bf16 weight first moves",
        3,
        expected_first_move_ref,
        _first_move_cases,
        compare=threshold_compare,
        forbidden=FORBIDDEN,
    ),
]
