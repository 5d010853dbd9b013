"""Chapter 04 exercises: master weights. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Arrays are numpy float32; bf16 values travel as float32 arrays that hold bf16 values (every bf16
value is a float32 value). The lost-update threshold is a float64 number that a student may compute
in another order: it is compared within a few float64 ulps (:data:`THRESHOLD_RTOL`), and its
reference is checked by measurement (applying the update with round_to) in
tests/test_exercises_ch04.py. The step at which the bf16 or fp16 copy of an fp32 master first moves
is an integer, compared exactly; its reference runs the loop's first float32 step and counts from
there, and tests/test_exercises_ch04.py runs the whole loop on the cases of two seeds to confirm it.
An fp16 copy travels as a float16 array.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..comparators import float_array
from ..exercise_types import COMPUTING_TOOLS, Case, Exercise, ExerciseKind
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


def _relative_compare(got, expected: np.ndarray, rtol: float, tol_text: str) -> str | None:
    """None if ``got`` has expected's shape, inf exactly where expected is inf, and finite values
    within a relative ``rtol`` of expected; else a short reason. Never raises."""
    a = float_array(got)
    if isinstance(a, str):
        return a
    if a.shape != expected.shape:
        return f"returned shape {a.shape}, expected {expected.shape}"
    inf = np.isinf(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.where(inf, a == expected, np.abs(a - expected) <= rtol * np.abs(expected))
    if ok.all():
        return None
    i = int(np.flatnonzero(~ok.reshape(-1))[0])
    return (
        f"{int((~ok).sum())} of {a.size} elements differ; first at flat index {i}: got {float(a.flat[i])!r}, "
        f"expected {float(expected.flat[i])!r} (tolerance: relative {tol_text}, inf exactly)"
    )


def threshold_compare(got, expected: np.ndarray) -> str | None:
    """:func:`_relative_compare` within ``THRESHOLD_RTOL``."""
    return _relative_compare(got, expected, THRESHOLD_RTOL, f"{THRESHOLD_RTOL:.3g}")


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


# ------------------------------------------------------------------ 2. when the copy of an fp32 master first moves
#
# A predict-then-measure problem: SGD with a constant gradient, fp32 master weights, a copy in bf16 or
# in fp16 (the original mixed-precision recipe), the copy's format given by w's dtype. The reference
# runs the loop's own float32 step once (the master's first move) and then counts exactly, resolving a
# landing on the midpoint by rounding that midpoint to the copy's format (ml_dtypes, numpy); it uses
# no rule about parities or grids. tests/test_exercises_ch04.py runs the whole loop on the cases of two
# seeds (a sample of the long arrays) and finds the same step.
#
# In fp16's subnormal range the copy's spacing stays 2**-24 while the master's float32 spacing shrinks
# with |w|: the copy of 2**-24 can take 2**23 steps to move. Each seed's cases end with LONG_ARRAYS
# arrays of LONG_SIZE such weights, which a loop stepping the master cannot finish in the grader's time
# (tests/test_exercises_ch04.py counts the steps it would take).

BF16_MAX_STEPS = 2**15 + 1  # the master moves at least one float32 spacing a step: 2**16 make a bf16 gap
FP16_MAX_STEPS = 2**23  # 2**-24 down to the midpoint 2**-25: 2**23 spacings of 2**-48 (odd: moves on the tie)
LONG_ARRAYS, LONG_SIZE = 5, 100_000
FP16_SMALLEST_SUBNORMAL = 2.0**-24


def _copy_gap_toward(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The copy's gap toward -g: for a float16 w, the float64 distance to its fp16 neighbour in that
    direction, found by stepping its code as :func:`_gap_toward` does for bf16; else that function's."""
    if w.dtype != np.float16:
        return _gap_toward(w, g)
    mag = (w.view(np.uint16) & 0x7FFF).astype(np.int64)
    toward_zero = (mag != 0) & (np.signbit(w) == np.signbit(g)) & (g != 0)
    step = np.where(toward_zero, mag - 1, mag + 1)
    neighbour = step.astype(np.uint16).view(np.float16).astype(np.float64)
    return np.abs(neighbour - np.abs(w.astype(np.float64)))


def _to_copy(x: np.ndarray, fp16: bool) -> np.ndarray:
    """float32 x rounded to the copy's format (nearest, ties to even): float16, or bf16 as float32."""
    x = np.asarray(x, dtype=np.float32)
    return x.astype(np.float16) if fp16 else x.astype(ml_dtypes.bfloat16).astype(np.float32)


def first_copy_change_ref(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    """int64 array, w's shape: the first step k >= 1 of the loop (master = w as float32; each step
    master = master - float32(lr) * g in float32; copy = master rounded to w's format, fp16 for a
    float16 w and bf16 for a float32 one, to nearest even) at which the copy differs from w; 0 where
    it never does."""
    fp16 = np.asarray(w).dtype == np.float16
    w = np.ascontiguousarray(w, dtype=np.float16 if fp16 else np.float32)
    g = np.ascontiguousarray(g, dtype=np.float32)
    w32 = w.astype(np.float32)
    d = np.float32(lr) * g  # the loop's step, a float32 product
    moved = np.abs((w32 - d).astype(np.float64) - w32.astype(np.float64))  # the master's first move, exact
    half = _copy_gap_toward(w, g) / 2  # from w to the midpoint toward -g
    out = np.zeros(w.shape, dtype=np.int64)
    m = moved > 0
    step, h = moved[m], half[m]
    # every later step moves the master by the same amount (it stays on one float32 grid until it has
    # passed the midpoint), so after k steps it is k * step from w: k = ceil(h / step), made exact by
    # comparing k * step with h (exact in float64: k < 2**24, step on float32's grid near w)
    k = np.ceil(h / step)
    k = np.where(k * step < h, k + 1, k)
    k = np.where((k > 1) & ((k - 1) * step >= h), k - 1, k)
    # on the midpoint: a tie, decided by rounding the midpoint itself (exact: one bit more than the copy)
    mid = (w32[m].astype(np.float64) - np.copysign(h, d[m].astype(np.float64))).astype(np.float32)
    stays = _to_copy(mid, fp16).astype(np.float64) == w[m].astype(np.float64)
    out[m] = np.where((k * step == h) & stays, k + 1, k)
    return out


def _master_grid(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    """float32's spacing where a master that starts at w (a value of the copy's format) and moves
    toward -g travels before its copy changes: that of w's binade, or of the binade below when it
    moves down from a power of two; float32's subnormal spacing 2**-149 at the least."""
    w = np.asarray(w)
    a = np.abs(w.astype(np.float64))
    _, e = np.frexp(a)
    e = np.where(a > 0, e - 1, -126)
    down = (a > 0) & (np.signbit(w) == np.signbit(g)) & (np.asarray(g) != 0) & (a == np.exp2(e))
    return np.exp2(np.maximum(e - down, -126) - 23.0)


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


def _fp16_weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """fp16 weights (float16, nonzero): log-uniform normals, powers of two from 2**-24 up (the finer
    float32 binade below each, the finer fp16 one below the normal ones), the smallest normal 2**-14
    and its neighbours, subnormals (many of a few units of 2**-24); half the codes odd."""
    pick = rng.random(n)
    sign = rng.choice([-1.0, 1.0], size=n)
    w = np.exp2(rng.uniform(-14, 10, size=n))
    w = np.where(pick < 0.25, np.exp2(rng.integers(-24, 11, size=n).astype(np.float64)), w)
    near = 2.0**-14 + rng.integers(-2, 3, size=n) * FP16_SMALLEST_SUBNORMAL
    w = np.where((pick >= 0.25) & (pick < 0.32), near, w)
    units = np.floor(np.exp2(rng.uniform(0, 10, size=n)))  # 1 to 1023 units of 2**-24, most of them few
    w = np.where((pick >= 0.32) & (pick < 0.6), units * FP16_SMALLEST_SUBNORMAL, w)
    w = (sign * w).astype(np.float16)
    bits = w.view(np.uint16)
    odd = (rng.random(n) < 0.5) & ((bits & 0x3FF) != 0)
    return np.where(odd, bits | 1, bits).astype(np.uint16).view(np.float16)


def _product_rounding_lr(rng: np.random.Generator) -> tuple[float, int, int]:
    """(lr, c, z): lr = o * 2**z / c for odd c and o, so that float32(lr) * (c * r * 2**b) for odd r,
    a float32 product of up to 32 bits, can round exactly onto o * r * 2**(z + b), a half-integer
    number of spacings, while the exact product lies a hair off it."""
    c = int(rng.choice([3, 5, 9, 11, 17, 19, 21, 23, 25, 27, 29, 31, 33, 43, 49]))
    o = int(rng.choice([1, 1, 3, 5, 7]))
    z = int(rng.integers(-28, -2))
    return o * 2.0**z / c, c, z


def _copy_case(rng: np.random.Generator, fp16: bool = False) -> Case:
    """One random case. The master's step in units of its float32 spacing v (``d / v``) decides the
    answer; kinds: (0) any lr, d / v log-uniform from 2**-2 to past the midpoint; (1) lr a power of two
    and d / v a power of two or a multiple of 1/2 exactly (ties of the float32 rounding, powers of two
    that land on the midpoint); (2) and (3) lr not a float32 value, d / v exactly a half-integer only
    after lr is rounded to float32 (the product in float64, and in (3) the product of lr itself
    rounded to float32, round the other way); (4) float32(lr) * g rounded to float32 lands exactly on a
    half-integer that the exact product misses by a hair, to the side that rounds the other way."""
    n = int(rng.integers(4, 49))
    kind = int(rng.integers(5))
    w = _fp16_weights(rng, n) if fp16 else _copy_weights(rng, n)
    sign = rng.choice([-1.0, 1.0], size=n)  # the direction of -g against w's sign
    v = _master_grid(w, sign)  # the grid for g of this sign; checked below for the real g
    spacings = np.log2(_copy_gap_toward(w, sign) / 2 / v)  # log2 of the spacings from w to the midpoint
    if kind == 0:
        lr = float(np.exp2(rng.uniform(-30, 0)))
        lr = lr if rng.random() < 0.5 else float(rng.choice([1e-3, 3e-4, 1e-2, 0.1, 1e-4, 1e-5]))
        ratio = np.exp2(rng.uniform(-2, spacings + 2))
        g = _bf16(sign * ratio * v / np.float32(lr))
    elif kind == 1:
        a = int(rng.integers(0, 40))
        lr = 2.0**-a
        r = rng.random(n)
        half_steps = np.where(
            r < 0.5,
            np.exp2(np.floor(rng.uniform(1, spacings + 2))),  # d / v a power of two up to the midpoint's
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
    elif kind == 3:
        # lr just above a power of two 2**-c (float32 rounds it down to that), g = q * 2**b with q = 2i + 1 odd
        # and i even: float32(lr) * g = (i + 1/2) v exactly, which rounds to i; the product with lr itself,
        # rounded to float32 or not, lies above the half-integer and rounds to i + 1
        q = int(rng.choice(np.arange(5, 256, 4)))
        c = int(rng.integers(10, 40))
        eps = 2.0**-24 * (1 + 2.0 ** math.floor(math.log2(q)) / q) / 2  # between d's half ulp and lr's
        lr = 2.0**-c * (1 + eps)
        g = _f32(sign * q * v * 2.0 ** (c - 1))
    else:
        # g = c * r * v / 2**(z + 1): float32(lr) * g is o * r * 2**(z + b) * (1 + a hair), whose float32
        # rounding is o * r * v / 2, a half-integer number of spacings; o * r = 1 (mod 4) where the hair
        # is above (a tie that goes down to the even count, the exact product up), 3 where it is below
        lr, c, z = _product_rounding_lr(rng)
        r = 2 * rng.integers(0, (255 // c + 1) // 2, size=n) + 1  # c * r < 256: an 8-bit gradient
        g = _f32(sign * c * r * v * 2.0 ** -(z + 1))
        exact = np.abs(g.astype(np.float64)) * float(np.float32(lr))  # the product, exact in float64
        units = np.abs((np.float32(lr) * g).astype(np.float64)) / v  # o * r / 2 where it lands on the half
        telling = (units - np.floor(units) == 0.5) & (np.rint(exact / v) != np.rint(units))
    g = np.where(rng.random(n) < 0.04, rng.choice([0.0, -0.0], size=n), g)
    # keep the elements whose gradient is a normal bf16 value (or zero) and whose grid is the one aimed at
    ok = np.isfinite(g) & ((g == 0) | (np.abs(g) >= 2.0**-126)) & (_bf16(g) == g) & (np.abs(g) < 2.0**100)
    ok &= (g == 0) | (_master_grid(w, g) == v)
    if kind == 4:
        ok &= telling | (rng.random(n) < 0.1)  # mostly the elements where the two products part
    if ok.sum() < 2:
        return _copy_case(rng, fp16)
    return Case((w[ok], _f32(g[ok]), lr))


def _tiny_fp16_case(rng: np.random.Generator, n: int) -> Case:
    """n fp16 weights of a few units of 2**-24 (each moving up or down), one lr, steps of one to a few
    float32 spacings (some half-integers: ties), some lost, some zero gradients: copies that take up
    to millions of steps to move."""
    pick = rng.random(n)
    units = np.where(pick < 0.3, rng.integers(2, 5, size=n), np.floor(np.exp2(rng.uniform(0, 6, size=n))))
    units = np.where(pick < 0.5, 1.0, units)
    w = (rng.choice([-1.0, 1.0], size=n) * units * FP16_SMALLEST_SUBNORMAL).astype(np.float16)
    sign = rng.choice([-1.0, 1.0], size=n)
    v = _master_grid(w, sign)
    lr = float(rng.choice([1e-3, 3e-4, 1e-4, 2.0**-10, 2.0**-12])) * float(np.exp2(rng.integers(-2, 3)))
    pick = rng.random(n)
    ratio = rng.choice([2.0, 3.0, 1.5, 2.5, 0.5, 4.0], size=n)  # float32 spacings a step
    ratio = np.where(pick < 0.15, np.exp2(rng.uniform(-1.5, 4, size=n)), ratio)
    ratio = np.where(pick > 0.4, 1.0, ratio)
    g = _f32(sign * ratio * v / np.float32(lr))
    g = np.where(rng.random(n) < 0.01, 0.0, g).astype(np.float32)
    ok = (g == 0) | (_master_grid(w, g) == v)
    return Case((w[ok], g[ok], lr))


def _copy_cases(rng: np.random.Generator) -> list[Case]:
    s = BF16_SMALLEST_SUBNORMAL
    t = FP16_SMALLEST_SUBNORMAL
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
        Case(
            (_f32([1.0, 1.0, 1.0]), _f32([-3 * 2.0**-14, -15 * 2.0**-14, -27 * 2.0**-14]), 2.0**-10 / 3),
            label="lr = 2**-10 / 3: float32(lr) * g rounds onto 0.5, 2.5 and 4.5 spacings, from a hair above",
        ),
        Case(
            (_f32([1.0, 1.0]), _f32([-75 * 2.0**-14, -175 * 2.0**-14]), 2.0**-10 / 25),
            label="lr = 2**-10 / 25: float32(lr) * g rounds onto 1.5 and 3.5 spacings, from a hair below",
        ),
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
        Case(
            (np.float16([1.0, 1.0]), _f32([-(2.0**-12), 2.0**-12]), 2.0**-11),
            label="an fp16 copy of 1, up and down: 11 significant bits",
        ),
        Case(
            (np.float16([2.0**-14, 2.0**-14]), _f32([2.0**-30, -(2.0**-29)]), 2.0**-8),
            label="fp16's smallest normal 2**-14, down and up: its gap stays 2**-24 below, the master's grid halves",
        ),
        Case(
            (np.float16([t, t, 3 * t, -2 * t]), _f32([2.0**-38, -(2.0**-37), -(2.0**-36), -(2.0**-37)]), 2.0**-10),
            label="fp16 subnormals 2**-24 (down, up), 3 * 2**-24, -2**-23 (down): millions of steps",
        ),
        Case(
            (np.float16([[1e-3, -5e-6], [6e-5, 30.0]]), _f32([[1e-6, 1e-9], [-1e-8, 2e-3]]), 1e-3),
            label="an fp16 copy, lr 1e-3, a 2-d tensor",
        ),
    ]
    with np.errstate(over="ignore", invalid="ignore"):  # gradients past float32's range: drawn, then dropped
        random = [_copy_case(rng) for _ in range(60)] + [_copy_case(rng, fp16=True) for _ in range(30)]
        long = [_tiny_fp16_case(rng, LONG_SIZE) for _ in range(LONG_ARRAYS)]
    return cases + _some_2d(random) + long


# ------------------------------------------------------------------ 3. stochastic rounding: the m-th move
#
# A derivation: a bf16 weight with no master copy, updated by w - lr * g rounded stochastically to
# bf16 (to each neighbour with probability proportional to closeness). While the step d = lr |g| is
# at most the gap ahead, a step moves the weight by that one gap with probability d / gap, so the
# wait at each value is geometric with mean gap / d, and the m-th move comes after the sum of those
# means: the distance to the m-th bf16 value ahead over d (the gap grows or shrinks binade by binade,
# and a weight going toward zero passes through it, counted once). Once the gap ahead is below d,
# every step moves (by one value or more); the cases keep every later step up to the m-th move so,
# and each of those steps counts one. The reference walks bf16 values by their ordinals (the code's
# magnitude, signed) and finds the first value whose gap ahead is below d by bisection;
# tests/test_exercises_ch04.py measures the mean with round_to's stochastic rounding and checks that
# every case keeps the promise.

MOVE_RTOL = 2.0**-40  # a few roundings of float64; any mistake about a gap or a count is far larger
MOVE_MAX_ORDINAL = (100 + 127) * 128  # the bf16 ordinal of 2**100: the walks stay below it


def _bf16_ordinal(w: np.ndarray) -> np.ndarray:
    """int64: the rank of each bf16 value of w (float32 array) among bf16 values, 0 for both zeros."""
    code = (np.ascontiguousarray(w, dtype=np.float32).view(np.uint32) >> 16).astype(np.int64)
    mag = code & 0x7FFF
    return np.where(code & 0x8000, -mag, mag)


def _bf16_at(o: np.ndarray) -> np.ndarray:
    """float64: the bf16 value of rank o (an int64 array of finite ranks)."""
    o = np.asarray(o, dtype=np.int64)
    code = np.where(o < 0, 0x8000 | -o, o).astype(np.uint32)
    return (code << 16).view(np.float32).astype(np.float64)


def _wide_moves(o: np.ndarray, s: np.ndarray, d: np.ndarray, m: np.ndarray) -> np.ndarray:
    """int64: the number J <= m of leading values of the walk o, o + s, o + 2s, ... whose gap ahead
    is at least d. The gaps ahead only grow away from zero, so there J is 0 or m; toward zero they
    shrink (the cases end such walks before zero unless d is at most every gap): J by bisection."""
    first = np.abs(_bf16_at(o + s) - _bf16_at(o)) >= d
    lo, hi = np.zeros_like(m), np.where(first, m, 0)
    while (lo < hi).any():
        mid = (lo + hi + 1) // 2  # is the gap ahead of value mid - 1 at least d?
        a = o + s * (mid - 1)
        wide = np.abs(_bf16_at(a + s) - _bf16_at(a)) >= d
        lo = np.where((lo < hi) & wide, mid, lo)
        hi = np.where((lo < hi) & ~wide, mid - 1, hi)
    return lo


def expected_mth_move_ref(w: np.ndarray, g: np.ndarray, lr: float, m: np.ndarray) -> np.ndarray:
    """float64 array, the shape of w: the expected step at which a bf16 weight w, updated by SGD with
    the constant gradient g and learning rate lr in bf16 with stochastic rounding (no master), makes
    its m-th move (a step at which it changes); inf where g == 0."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    g = np.ascontiguousarray(g, dtype=np.float32)
    m = np.ascontiguousarray(m, dtype=np.int64)
    o = _bf16_ordinal(w)
    s = np.where(g < 0, 1, -1)  # the direction of -g
    d = lr * np.abs(g.astype(np.float64))  # one rounding: the exact product is the real step
    moving = g != 0
    j = np.zeros_like(m)
    j[moving] = _wide_moves(o[moving], s[moving], d[moving], m[moving])
    dist = np.abs(_bf16_at(np.where(moving, o + s * j, o)) - w.astype(np.float64))  # one rounding at most
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(moving, dist / d + (m - j), np.inf)


def move_compare(got, expected: np.ndarray) -> str | None:
    """:func:`_relative_compare` within ``MOVE_RTOL`` (2**-40)."""
    return _relative_compare(got, expected, MOVE_RTOL, "2**-40")


def _move_counts(rng: np.random.Generator, w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    """int64 m for each weight: log-uniform from 1 up to the walk's room (below 2**100 away from zero;
    toward it, short of zero unless d is below the subnormal gap), then cut where a weight that has
    reached the values whose gap ahead is below d could, moving 2d a step at most, come near zero or
    (away from zero) a value whose gap ahead exceeds d: the cases keep the promise."""
    n = w.size
    o = _bf16_ordinal(w)
    s = np.where(g < 0, 1, -1)
    d = lr * np.abs(g.astype(np.float64))
    toward = (o != 0) & (np.sign(o) != s)
    tiny = d <= 2.0**-133  # every gap ahead is at least d, through zero and beyond
    room = np.where(toward & ~tiny, np.abs(o), MOVE_MAX_ORDINAL - np.abs(o))
    room = np.where(toward & tiny, np.abs(o) + MOVE_MAX_ORDINAL // 2, room)
    room = np.clip(room, 1, 30_000)
    m = np.floor(np.exp2(rng.uniform(0, np.log2(room + 1)))).astype(np.int64)
    m = np.where(rng.random(n) < 0.1, 1, np.clip(m, 1, room))
    j = _wide_moves(o, s, d, m)
    u = np.abs(_bf16_at(o + s * j))  # where the certain steps start (j < m)
    with np.errstate(divide="ignore", over="ignore"):
        spare = np.where(toward, u / (2 * d), 0.0)  # certain steps that cannot reach zero
        # away from zero: the gap ahead exceeds d from 2**E on, E = floor(log2 d) + 8
        top = np.exp2(np.frexp(d)[1] + 7.0)
        spare = np.where(toward, spare, (top - u) / (2 * d) - 1)
    spare = np.floor(np.clip(spare, 0, 2**40)).astype(np.int64)
    capped = j < m
    m = np.where(capped, np.maximum(np.minimum(m, j + spare), 1), m)
    return m.astype(np.int64)


def _move_case(rng: np.random.Generator) -> Case:
    n = int(rng.integers(1, 65))
    s = BF16_SMALLEST_SUBNORMAL
    pick = rng.random(n)
    w = _log_uniform(rng, -30, 30, n)
    w = np.where(pick < 0.25, _pow2_weights(rng, n), w)
    w = np.where((pick >= 0.25) & (pick < 0.33), rng.integers(-127, 128, size=n) * s, w)
    w = np.where((pick >= 0.33) & (pick < 0.36), rng.choice([0.0, -0.0], size=n), w)
    small = rng.random() < 0.25  # near bf16's smallest numbers: subnormals, 2**-126 .. 2**-124, zero
    if small:
        w = np.where(rng.random(n) < 0.6, rng.integers(-127, 128, size=n) * s, _pow2_weights(rng, n))
        w = np.where(np.abs(w) > 2.0**-122, np.sign(w) * 2.0**-125, w)
    w = _bf16(w)
    direction = rng.choice([-1.0, 1.0], size=n)  # of -g
    gap = _gap_toward(w, -direction)
    # the step over the gap ahead: mostly far below it (waits of millions of steps and more), some
    # near it, some above it (certain moves), a few exactly on it or on a power of two
    r = rng.random(n)
    ratio = np.exp2(rng.uniform(-40, -6, size=n))
    ratio = np.where(r < 0.3, np.exp2(rng.uniform(-10, 0, size=n)), ratio)
    ratio = np.where((r >= 0.3) & (r < 0.4), np.exp2(rng.uniform(0, 6, size=n)), ratio)
    ratio = np.where((r >= 0.4) & (r < 0.45), np.exp2(rng.integers(-12, 3, size=n).astype(np.float64)), ratio)
    # a step exactly the gap ahead: certain now, but away from zero the gaps of the next binade are
    # wider, and their moves are waits again
    ratio = np.where(r >= 0.95, 1.0, ratio)
    if small:  # steps around the subnormal gap: below it a weight crosses zero, above it the gaps run out
        ratio = np.where(r < 0.5, np.exp2(rng.uniform(-3, 3, size=n)) * s / gap, ratio)
    lr = float(np.exp2(rng.uniform(-45, -25) if small else rng.uniform(-20, 0)))
    if rng.random() < 0.2:
        lr = float(2.0 ** rng.integers(-20, 1))
    g = _f32(-direction * ratio * gap / lr)
    g = np.where(rng.random(n) < 0.05, rng.choice([0.0, -0.0], size=n), g).astype(np.float32)
    g = np.where(np.isfinite(g) & (np.abs(g) < 2.0**100), g, np.float32(-direction)).astype(np.float32)
    m = _move_counts(rng, w, g, lr)
    return Case((w, g, lr, m))


def _move_cases(rng: np.random.Generator) -> list[Case]:
    t = BF16_SMALLEST_SUBNORMAL

    def fixed(w, g, lr, m, label):
        return Case((_bf16(w), _f32(g), lr, np.asarray(m, dtype=np.int64)), label=label)

    cases = [
        fixed([1.0, 1.0], [-1e-3, 1e-3], 0.5, [1, 1], "w = 1 moving up, and down: the gap below is half"),
        fixed([1.0, 1.0], [-1.0, 1.0], 2.0**-9, [3, 3], "three moves, up and down: 3 * 4 and 3 * 2 steps"),
        fixed(
            [2 - 2.0**-7, 2 - 2.0**-7], [-1.0, -1.0], 2.0**-9, [1, 2], "up across 2: the second gap is twice the first"
        ),
        fixed(
            [1.0, -1.0], [-1.0, 1.0], 2.0**-10, [129, 129], "a whole binade away from zero (128 gaps) and one gap more"
        ),
        fixed([1.0], [1.0], 2.0**-10, [129], "down from 1: 128 gaps of 2**-8, then one of 2**-9"),
        fixed([1.0], [1.0], 2.0**-8, [200], "down, steps of 2**-8: every step moves, the first 128 by one gap"),
        fixed([1.5], [1.0], 2.0**-8, [70], "down from 1.5: 64 gaps of 2**-7, 2 steps each, then certain steps"),
        fixed([1.0], [-3.0], 1.0, [1], "a step of several gaps: the first step, never later"),
        fixed([2 * t, -t], [2.0**-140, -(2.0**-140)], 2.0**-2, [5, 4], "through zero: counted once"),
        fixed([0.0, -0.0], [1e-3, -1e-3], 1e-38, [1, 3], "w = 0: the gap is the smallest subnormal"),
        fixed(
            [2.0**-126, 2.0**-125], [1.0, 1.0], 2.0**-140, [1, 130], "toward zero from the smallest normal, and 2**-125"
        ),
        fixed([1.0, -2.0], [0.0, -0.0], 0.1, [1, 5], "zero gradient: never moves (inf)"),
        fixed(
            [242 * 2.0**-12],
            [-0.125],
            2.0**-9,
            [255],
            "a step equal to the gap ahead: 14 certain moves to 2**-4, then waits of 2 and 4 steps",
        ),
        fixed([2.0**-20, 3.0], [-1e-30, 1e-30], 1e-3, [15_000, 300], "15,000 moves up, across 117 binades"),
        Case(
            (
                _bf16(np.linspace(-2, 2, 6).reshape(2, 3)),
                _f32(np.full((2, 3), 1e-2)),
                1e-3,
                np.full((2, 3), 7, dtype=np.int64),
            ),
            label="a 2-d tensor",
        ),
    ]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        random = [_move_case(rng) for _ in range(60)]
    return cases + _some_2d(random)


# ------------------------------------------------------------------ 4. updates a Kahan buffer loses, a master keeps
#
# A prediction from the formats, two numbers per weight. For each bf16 weight w (normal, 2**-100 <=
# |w| <= 2**100), a direction and a step budget K: hi, the largest float32 update of that direction
# that chapter 04's Kahan-compensated bf16 update (kahan_update in nbhelpers.training: y = fp32(delta
# - c), w' = RN_bf16(fp32(w + y)), c = RN_bf16(fp32(fp32(w' - w) - y)), c starting at 0) never
# applies; and lo, the smallest float32 update of that direction with which an fp32 master's bf16 copy
# (exercise 2's loop with lr = 1 and g = -delta) moves within K steps. Both are compared exactly.
#
# hi has a closed form (below), which tests/test_exercises_ch04.py checks by running the Kahan loop on
# hi (never applied) and on the next float32 value above it and on larger ones (applied), and the
# chapter's own kahan_update (torch) on a sample. lo is found here without any rule about counts: by
# bisection over float32's bit patterns, with exercise 2's reference as the oracle (the count only
# falls as the update grows); the test runs the master's loop on a sample. Each seed's cases end with
# LONG_KAHAN_ARRAYS arrays of LONG_KAHAN_SIZE weights with budgets of their own: a search for lo that
# runs the master's loop (up to 2**15 + 1 steps) for each of some 30 trial updates per weight takes far
# longer than the grader's 60 seconds. hi depends on w and the direction alone, and the Kahan loop
# stalls within about 2**9 steps: a search for it by running that loop takes a few seconds per 100,000
# weights, and a table over bf16's codes is small; only lo is out of a search's reach.

KAHAN_MAX_STEPS = 8192  # the buffer stalls within about 2**9 steps of an update (bf16 has 8 bits)
KAHAN_W_RANGE = (2.0**-100, 2.0**100)  # |w|: normal, where hi's rule holds (it breaks below 2**-116)
KAHAN_K_RANGE = (512, 2**15 + 1)  # 2**15 + 1: the most a bf16 copy waits for a master that moves
LONG_KAHAN_ARRAYS, LONG_KAHAN_SIZE = 2, 100_000


def _kahan_moves(w: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """bool array: whether chapter 04's Kahan-compensated bf16 update with the constant float32 update
    delta ever changes the bf16 weight w (float32 arrays of one shape), run until the buffer stalls."""
    w = np.asarray(w, dtype=np.float32).ravel()
    delta = np.asarray(delta, dtype=np.float32).ravel()
    c = np.zeros_like(w)
    moved = np.zeros(w.shape, dtype=bool)
    live = np.ones(w.shape, dtype=bool)
    for _ in range(KAHAN_MAX_STEPS):
        y = delta[live] - c[live]  # float32
        s = _to_copy(w[live] + y, False)  # RN_bf16 of the float32 sum
        c_new = _to_copy((s - w[live]) - y, False)
        moved[live] = s != w[live]
        done = (s != w[live]) | (c_new == c[live])  # moved, or stalled: nothing changes any more
        c[live] = c_new
        idx = np.flatnonzero(live)
        live[idx[done]] = False
        if not live.any():
            return moved
    raise RuntimeError("the Kahan buffer did not stall")  # cannot happen for a finite update


def _f32_bits_to_value(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint32).view(np.float32)


def kahan_stall_limit(w: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """float32 array: sign * 2**j * (1 + 2**-16), with 2**j = (half the bf16 gap of w toward sign) / 2**9.

    While w stays, -c is the bf16 running sum of the update, exact up to 2**(j + 8) for 2**j. There
    float32 first rounds 2**(j + 8) + 2**j * (1 + 2**-16) (half a float32 spacing above 2**(j + 8) +
    2**j: a tie) to the even 2**(j + 8) + 2**j, and bf16 sends that (a tie again) back to the even
    2**(j + 8): the buffer stalls, and w never sees more than 257 * 2**j, below half its gap
    2**(j + 9). The next float32 value above climbs to half the gap and moves w (checked by running
    the loop in tests/test_exercises_ch04.py, for 2**-100 <= |w| <= 2**100)."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    sign = np.asarray(sign, dtype=np.float32)
    h = _gap_toward(w, -sign) / 2  # toward -g = toward sign
    return (sign * (h / 2.0**9 * (1 + 2.0**-16))).astype(np.float32)


def master_smallest_update(w: np.ndarray, sign: np.ndarray, K: np.ndarray) -> np.ndarray:
    """float32 array: sign * the smallest float32 magnitude d with which exercise 2's master (lr = 1,
    g = -sign * d) moves its bf16 copy within K steps, by bisection over float32 bit patterns with
    :func:`first_copy_change_ref` as the oracle (its count never rises as d grows)."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    sign = np.asarray(sign, dtype=np.float32)
    K = np.asarray(K, dtype=np.int64)

    def moves_in_time(bits: np.ndarray) -> np.ndarray:
        k = first_copy_change_ref(w, -sign * _f32_bits_to_value(bits), 1.0)
        return (k > 0) & (k <= K)

    gap = (_gap_toward(w, -sign) * 2).astype(np.float32)  # twice the gap: moves at the first step
    lo = np.zeros(w.shape, dtype=np.int64)  # bits of 0: never moves
    hi = gap.view(np.uint32).astype(np.int64)
    assert moves_in_time(hi).all()
    while (hi - lo > 1).any():
        mid = (lo + hi) // 2
        ok = moves_in_time(mid)
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    return (sign * _f32_bits_to_value(hi)).astype(np.float32)


class KahanInterval:
    """What :func:`kahan_interval_ref` returns: the case's parameters (for the messages) and the two
    float32 arrays (lo, hi) that an answer must equal bit for bit."""

    __slots__ = ("w", "sign", "K", "lo", "hi")

    def __init__(self, w, sign, K, lo, hi) -> None:
        self.w, self.sign, self.K, self.lo, self.hi = w, sign, K, lo, hi

    def __repr__(self) -> str:
        return f"(lo, hi) for {self.w.size} bf16 weights, K from {int(self.K.min())} to {int(self.K.max())}"


def kahan_interval_ref(w: np.ndarray, sign: np.ndarray, K: np.ndarray) -> KahanInterval:
    w = np.ascontiguousarray(w, dtype=np.float32)
    sign = np.ascontiguousarray(sign, dtype=np.float32)
    K = np.ascontiguousarray(K, dtype=np.int64)
    return KahanInterval(w, sign, K, master_smallest_update(w, sign, K), kahan_stall_limit(w, sign))


def _one_array(x, shape: tuple, name: str) -> np.ndarray | str:
    """x as a float32 ndarray of ``shape``, or a reason why it is not one."""
    if x is None or isinstance(x, (str, bytes, dict, tuple, list)):
        return f"{name}: expected a float32 array of shape {shape}, got {type(x).__name__}"
    if np.iscomplexobj(x):
        return f"{name}: expected a float32 array of shape {shape}, got complex numbers"
    a = np.asarray(x)
    if a.dtype != np.float32:
        return f"{name}: expected a float32 array, got dtype {a.dtype}"
    if a.shape != shape:
        return f"{name}: returned shape {a.shape}, expected {shape}"
    return a


def _kahan_interval_reason(got, t: KahanInterval) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a tuple (lo, hi) of two float32 arrays of shape {t.w.shape}, got {type(got).__name__}"
    w, sign, K = t.w.ravel(), t.sign.ravel(), t.K.ravel()
    for name, x, ref in (("lo", got[0], t.lo), ("hi", got[1], t.hi)):
        a = _one_array(x, t.w.shape, name)
        if isinstance(a, str):
            return a
        a, ref = a.ravel(), ref.ravel()
        bad = a.view(np.uint32) != ref.view(np.uint32)  # bit for bit: NaN and -0.0 are wrong too
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return (
                f"{name}: {int(bad.sum())} of {a.size} values differ; first at flat index {i}: w = {float(w[i])!r}, "
                f"sign {float(sign[i]):+g}, K = {int(K[i])}: got {float(a[i])!r}, expected {float(ref[i])!r}"
            )
    return None


def kahan_interval_compare(got, expected: KahanInterval) -> str | None:
    """None if ``got`` is (lo, hi) equal bit for bit to expected's, else a short reason. Never raises."""
    try:
        return _kahan_interval_reason(got, expected)
    except Exception as e:  # a hostile object: a failed case, never a crash
        return f"could not judge the answer ({type(e).__name__})"


def _kahan_weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """bf16 weights (float32) with 2**-100 <= |w| <= 2**100: log-uniform, powers of two (the finer gap
    below), the ends of the range; half the codes with an odd last bit (ties of the master's copy)."""
    pick = rng.random(n)
    sign = rng.choice([-1.0, 1.0], size=n)
    w = np.exp2(rng.uniform(-100, 100, size=n))
    w = np.where(pick < 0.3, np.exp2(rng.uniform(-12, 12, size=n)), w)
    w = np.where((pick >= 0.3) & (pick < 0.5), np.exp2(rng.integers(-100, 101, size=n).astype(np.float64)), w)
    w = np.where((pick >= 0.5) & (pick < 0.53), rng.choice([2.0**-100, 2.0**100], size=n), w)
    w = _bf16(sign * w)
    bits = w.view(np.uint32)
    odd = (rng.random(n) < 0.5) & ((bits & 0x7F0000) != 0) & (np.abs(w) < 2.0**100)
    return np.where(odd, (bits | 0x10000).view(np.float32), w).astype(np.float32)


def _kahan_budgets(rng: np.random.Generator, n: int) -> np.ndarray:
    """int64 K in KAHAN_K_RANGE: log-uniform, powers of two (a count that lands on the midpoint), and
    the edges where the fewest float32 spacings a step changes (2**15 / s and one either side)."""
    pick = rng.random(n)
    lo, top = KAHAN_K_RANGE
    K = np.floor(np.exp2(rng.uniform(np.log2(lo), np.log2(top + 1), size=n)))
    K = np.where(pick < 0.25, np.exp2(rng.integers(9, 16, size=n).astype(np.float64)), K)
    s = rng.integers(1, 65, size=n)  # float32 spacings a step
    edge = np.floor(2.0**15 / s) + rng.integers(-1, 2, size=n)
    K = np.where((pick >= 0.25) & (pick < 0.6), edge, K)
    K = np.where(pick > 0.95, rng.choice([lo, lo + 1, top - 1, top], size=n), K)
    return np.clip(K, lo, top).astype(np.int64)


def _kahan_case(w, sign, K, label: str = "") -> Case:
    w = _bf16(w)
    return Case((w, _f32(sign), np.asarray(K, dtype=np.int64)), label=label)


def _kahan_cases(rng: np.random.Generator) -> list[Case]:
    odd = 1 + 2.0**-7
    top = KAHAN_K_RANGE[1]
    cases = [
        _kahan_case([1.0, 1.0], [1.0, -1.0], [513, 513], "w = 1, up and down: the gap below 1 is half"),
        _kahan_case([1.5, odd, -3.0], [1.0, 1.0, -1.0], [512, 512, 512], "an even and an odd last bit, a negative w"),
        _kahan_case([1.0, odd], [1.0, 1.0], [1024, 1024], "K a power of two: the master lands on the midpoint"),
        _kahan_case([1.0, odd, 1.0], [1.0, 1.0, -1.0], [top, top - 1, top], "K = 2**15 + 1, 2**15: one spacing"),
        _kahan_case([2.0**-100, -(2.0**100)], [-1.0, 1.0], [700, 3000], "the ends of the range, toward zero"),
        _kahan_case([0.0117, 300.0, -1e-20], [-1.0, 1.0, 1.0], [1000, 5000, 20000], "a few thousand steps"),
        _kahan_case(np.linspace(-2, 2, 6).reshape(2, 3) + 0.1, np.ones((2, 3)), np.full((2, 3), 600), "a 2-d tensor"),
    ]
    n_fixed = len(cases)
    for _ in range(50):
        n = int(rng.integers(2, 40))
        cases.append(_kahan_case(_kahan_weights(rng, n), rng.choice([-1.0, 1.0], size=n), _kahan_budgets(rng, n)))
    random = cases[:n_fixed] + _some_2d(cases[n_fixed:])
    n = LONG_KAHAN_SIZE
    long = [
        Case((_kahan_weights(rng, n), rng.choice([-1.0, 1.0], size=n).astype(np.float32), _kahan_budgets(rng, n)))
        for _ in range(LONG_KAHAN_ARRAYS)
    ]
    return random + long


#: What an answer may not call (Exercise.forbidden): the statement: nothing of nbhelpers.
FORBIDDEN = ("nbhelpers",)
#: What its functions may use besides their notebook's own code: see Exercise.tools.
TOOLS = COMPUTING_TOOLS

EXERCISES = [
    Exercise(
        "ex04.lost_update_threshold",
        "The learning rate below which a bf16 update is lost",
        5,
        lost_update_threshold_ref,
        _threshold_cases,
        compare=threshold_compare,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex04.first_copy_change",
        "When the copy of an fp32 master first moves",
        4,
        first_copy_change_ref,
        _copy_cases,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex04.expected_mth_move",
        "Stochastic rounding: when a bf16 weight has moved m times",
        4,
        expected_mth_move_ref,
        _move_cases,
        compare=move_compare,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex04.stalled_kahan_update",
        "The updates a bf16 Kahan buffer loses and an fp32 master keeps",
        4,
        kahan_interval_ref,
        _kahan_cases,
        compare=kahan_interval_compare,
        forbidden=FORBIDDEN,
        tools=TOOLS,
        kind=ExerciseKind.PREDICT,
    ),
]
