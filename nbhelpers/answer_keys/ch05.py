"""Chapter 05 exercises: loss scaling. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

The window of usable static scales is found with the course's ``round_to`` (each candidate scale
applied and rounded, by bisection): no threshold of its own; tests/test_exercises_ch05.py holds it
against numpy's float16 and ml_dtypes' casts scale by scale. The gradients-with-a-window exercise
is a construction, judged by that reference. The settled scale's reference is a closed form from
the fp16 and float32 formats; tests/test_exercises_ch05.py measures it by running the chapter's
scaler (:class:`nbhelpers.loss_scaling.DynamicLossScaler`, which tests/test_loss_scaling.py holds
bit for bit against ``torch.amp.GradScaler("cpu")``). Edge cases come first, then random ones from
the seed.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..comparators import close_to, same_value
from ..exercise_types import Case, Exercise, ExerciseKind
from ..formats import FORMATS, FloatFormat
from ..rounding import round_to

# ------------------------------------------------------------------ 1. the window of usable static scales
#
# Implement from a spec, for any IEEE-style format (exp_bits, man_bits) with subnormals and inf: the
# smallest and largest power of two that scale a gradient sample with at most a given fraction of
# underflows and no overflow. The reference decides underflow and overflow with the course's round_to
# (no threshold of its own) and finds both ends by bisection over the exponent: each property is
# monotone in the scale.

_E_RANGE = 2200  # ldexp(x, +-2200) is inf or 0 in float64 for every finite nonzero x


def _fmt(exp_bits: int, man_bits: int) -> FloatFormat:
    return FloatFormat.custom(int(exp_bits), int(man_bits))


def _nonzero(x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    return a[a != 0]


def _overflows(a: np.ndarray, e: int, fmt: FloatFormat) -> bool:
    """Some element of a * 2**e rounds to inf (ldexp is exact here, or inf beyond float64)."""
    with np.errstate(over="ignore"):
        return bool(np.isinf(round_to(np.ldexp(a, e), fmt)).any())


def _underflow_count(a: np.ndarray, e: int, fmt: FloatFormat) -> int:
    """How many (nonzero) elements of a * 2**e round to zero."""
    with np.errstate(over="ignore"):
        return int(np.count_nonzero(round_to(np.ldexp(a, e), fmt) == 0))


def _underflow_ok(a: np.ndarray, e: int, fmt: FloatFormat, max_underflow: float) -> bool:
    return _underflow_count(a, e, fmt) / a.size <= max_underflow


def _bisect(pred, lo: int, hi: int) -> int:
    """The smallest e in (lo, hi] with pred(e) true, for pred false at lo, true at hi, monotone."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pred(mid) else (mid, hi)
    return hi


def scale_window_ref(x: np.ndarray, max_underflow: float, exp_bits: int, man_bits: int) -> tuple[float, float] | None:
    """(lo, hi): the smallest and largest power of two S such that no element of x * S rounds to inf
    in (exp_bits, man_bits) and at most the fraction max_underflow of x's nonzero elements round to 0;
    None when no power of two does both."""
    fmt = _fmt(exp_bits, man_bits)
    a = _nonzero(x)
    e_hi = _bisect(lambda e: _overflows(a, e, fmt), -_E_RANGE, _E_RANGE) - 1  # the last e without overflow
    e_lo = _bisect(lambda e: _underflow_ok(a, e, fmt, max_underflow), -_E_RANGE, _E_RANGE)
    if e_lo > e_hi:
        return None
    return math.ldexp(1.0, e_lo), math.ldexp(1.0, e_hi)


def _describe_scale(s) -> str:
    try:
        f = float(s)
        m, e = math.frexp(f)
        return f"2**{e - 1}" if f > 0 and m == 0.5 else repr(f)
    except Exception:  # a student's odd object
        return repr(s)


def window_compare(got, expected) -> str | None:
    """Bit-exact, like same_value, with the window's ends named as powers of two. Never raises."""
    reason = same_value(got, expected)
    if reason is None:
        return None
    if expected is None:
        return f"no power of two is usable here: expected None ({reason})"
    if got is None:
        return f"expected the window ({_describe_scale(expected[0])}, {_describe_scale(expected[1])}), got None"
    try:
        lo, hi = got
        return (
            f"window ({_describe_scale(lo)}, {_describe_scale(hi)}), expected "
            f"({_describe_scale(expected[0])}, {_describe_scale(expected[1])}) ({reason})"
        )
    except Exception:
        return reason


_WINDOW_FORMATS = [(5, 10)] * 6 + [(5, 2), (4, 3), (8, 7), (6, 9), (3, 2), (5, 7), (8, 23), (4, 6)]
_FRACTIONS = [0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5]


def _pow2_exponents_crossing(a: np.ndarray, limit: float) -> np.ndarray:
    """For each value, the exponent e for which a * 2**e lies in [limit / 2, limit)."""
    return np.floor(np.log2(limit / a)).astype(np.int64)


def _window_case(rng: np.random.Generator, kind: str = "down") -> Case:
    """A gradient sample for one format: log-normal magnitudes of random sign, spread over some
    binades, some zeros; in most cases elements moved onto the hard places of one scale near the
    answer: exactly the underflow tie (half the smallest subnormal), just above it, exactly the
    overflow midpoint (max + half an ulp, which rounds to inf), just below it, between max and the
    midpoint; max_underflow sometimes exactly the fraction that underflows at some scale, or a float
    next to a count over n where the float product with n rounds ``kind`` ("down" or "up")."""
    eb, mb = _WINDOW_FORMATS[rng.integers(len(_WINDOW_FORMATS))]
    fmt = _fmt(eb, mb)
    n = int(rng.integers(1, 300))
    spread = float(rng.uniform(1, 40 if eb >= 5 else 12))  # binades of the sample, 1 sigma
    x = rng.choice([-1.0, 1.0], size=n) * np.exp2(rng.normal(float(rng.uniform(-60, 20)), spread / 4, size=n))
    x[rng.random(n) < 0.08] = 0.0
    if not np.any(x):
        x[0] = 1.0
    tiny, top = fmt.smallest_subnormal, fmt.max
    mid = top + math.ldexp(fmt.eps, math.frexp(top)[1] - 1) / 2  # rounds to inf (its tie goes up)
    a = np.abs(x[x != 0])
    f = float(rng.choice(_FRACTIONS))
    r = rng.random()
    if r < 0.75:
        # the scale that the case aims at: an end of the window, nearly
        window = scale_window_ref(x, f, eb, mb)
        e0 = int(math.log2(window[0])) if window else int(_pow2_exponents_crossing(np.array([a.max()]), mid)[0])
        e1 = int(math.log2(window[1])) if window else e0
        pick = rng.random(n)
        sign = np.sign(x)
        lows = rng.choice([tiny / 2, tiny / 2, np.nextafter(tiny / 2, 1.0), tiny, 0.75 * tiny], size=n)
        highs = rng.choice([mid, mid, np.nextafter(mid, 0.0), top, (top + mid) / 2], size=n)
        # a few elements onto the underflow tie at 2**(e0 + j), and onto the overflow midpoint at 2**(e1 + j)
        x = np.where((pick < 0.06) & (x != 0), sign * np.ldexp(lows, -(e0 + rng.integers(-1, 2, size=n))), x)
        x = np.where((pick > 0.985) & (x != 0), sign * np.ldexp(highs, -(e1 + rng.integers(0, 2, size=n))), x)
    if rng.random() < 0.3:  # max_underflow exactly the fraction that underflows at a scale near the answer
        nz = _nonzero(x)
        window = scale_window_ref(x, f, eb, mb)
        e = int(math.log2(window[0])) if window else 0
        f = min(_underflow_count(nz, e + int(rng.integers(-2, 1)), fmt) / nz.size, 0.9)
    if rng.random() < 0.5 and scale_window_ref(x, f, eb, mb) is not None:
        # a count c where the float product of the fraction with n rounds the wrong way ("down":
        # c / n times n falls below c; "up": the float just below c / n, times n, is c), and where
        # the window with c values underflowing differs from the one with c - 1: off by one there
        # is wrong
        n_nz = _nonzero(x).size
        telling = [
            c
            for c in (_hazards(n_nz) if kind == "down" else _hazards_up(n_nz))
            if c / n_nz <= 0.9
            and scale_window_ref(x, c / n_nz, eb, mb) != scale_window_ref(x, math.nextafter(c / n_nz, 0.0), eb, mb)
        ]
        if telling and rng.random() < 0.7:
            c = telling[int(rng.integers(len(telling)))]
            f = c / n_nz if kind == "down" else math.nextafter(c / n_nz, 0.0)
        else:
            f = _float_hazard(rng, f, n_nz, kind if rng.random() < 0.6 else "below")
    return Case((x, f, eb, mb))


def _hazards(n: int) -> list[int]:
    """The counts c < n whose fraction c / n, times n in floats, falls below c (1 / 49 * 49 < 1)."""
    return [c for c in range(1, n) if (c / n) * n < c]


def _hazards_up(n: int) -> list[int]:
    """The counts c < n for which the float just below c / n, times n in floats, rounds up to c
    (nextafter(0.2, 0) * 100 == 20.0): a floor of the product counts one too many there."""
    return [c for c in range(1, n) if math.nextafter(c / n, 0.0) * n >= c]


def _float_hazard(rng: np.random.Generator, f: float, n: int, kind: str, top: float = 0.9) -> float:
    """A fraction at most ``top`` next to a count over n, where a count computed from the float
    product ``f * n`` is off by one, the count nearest f's own: "down", a fraction c / n whose
    product with n falls below c (``int(f * n)`` one too few); "up", the float just below c / n,
    whose product with n rounds up to c (``floor(f * n)`` one too many); "below", f a hair less than
    itself (one count fewer when f is a count over n: an epsilon takes one too many). f itself
    where n has no such count."""
    if kind == "below":
        return math.nextafter(f, 0.0) if f > 0 else f
    counts = [c for c in (_hazards(n) if kind == "down" else _hazards_up(n)) if c / n <= top]
    if not counts:
        return f
    c = min(counts, key=lambda c: (abs(c - f * n), rng.random()))
    return c / n if kind == "down" else math.nextafter(c / n, 0.0)


def _window_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((np.array([1.0]), 0.0, 5, 10), label="one gradient of 1 in fp16"),
        Case((np.array([65520.0 * 2.0**-20]), 0.0, 5, 10), label="65520 at 2**20: the tie rounds to inf"),
        Case((np.array([-65519.0 * 2.0**-20]), 0.0, 5, 10), label="65519 at 2**20: above 65504, still finite"),
        Case((np.array([2.0**-55, 2.0**-20]), 0.0, 5, 10), label="2**-25 at 2**30: the tie rounds to 0"),
        Case((np.array([2.0**-54, -(2.0**-20)]), 0.0, 5, 10), label="2**-24 at 2**30: the smallest subnormal"),
        Case((np.array([1e-12, 1e-3, 1.0, 3.0]), 0.25, 5, 10), label="one of four may underflow: exactly a quarter"),
        Case(
            (np.array([1e-12, 1e-3, 1.0, 3.0]), 0.2499, 5, 10), label="none may: 1e-12 needs a scale 3.0 overflows at"
        ),
        Case((np.array([1e-12, 0.0, 1e-3, 0.0, 1.0]), 0.25, 5, 10), label="zeros are not counted"),
        Case((np.array([2.0**-40, 1.0]), 0.0, 3, 2), label="e3m2: no power of two holds both"),
        Case((np.array([-(2.0**-140), 1.0, -1e30]), 0.0, 8, 7), label="bf16: a wide range, negative values"),
        Case((np.array([[1e-9, 1e-5], [0.5, 0.0]]), 0.0, 5, 2), label="e5m2, a 2-d array"),
    ]
    # c of n may underflow, max_underflow = c / n, whose float product with n falls just below c
    # (1 / 49 * 49 < 1): c values far below n - c values of 1, so only letting all c underflow
    # leaves a window
    for c, n in ((1, 49), (3, 47), (15, 44), (5, 12)):
        x = np.concatenate([np.full(c, 2.0**-60), np.ones(n - c)])
        if (c / n) * n < c:
            cases.append(Case((x, c / n, 5, 10), label=f"{c} of {n} may underflow: {c} / {n} * {n} < {c} in floats"))
            below = math.nextafter(c / n, 0.0)  # a hair less: c - 1 may
            cases.append(Case((x, below, 5, 10), label=f"{c} - 1 of {n} may underflow: just below {c} / {n}"))
        else:  # the float just below c / n, times n, rounds up to c: still only c - 1 may
            label = f"{c} - 1 of {n} may underflow: just below {c} / {n}, although times {n} it rounds to {c}"
            cases.append(Case((x, math.nextafter(c / n, 0.0), 5, 10), label=label))
    cases += [_window_case(rng, ("down", "up")[i % 2]) for i in range(70)]
    return cases


# ------------------------------------------------------------------ 2. gradients with a given window
#
# Construct inputs: n gradients whose fp16 window (exercise 1, judged by its reference) is exactly a
# given one, and at whose lo / 2 as few values underflow as make that scale unusable (so the count of
# values allowed to underflow must be found exactly: one value too many at the bottom fails as well as
# one too few). Many answers are right; the check judges the property, and the reference's example
# only shows that every case is solvable (tests/test_exercises_ch05.py checks it on every case).

FP16_RANGE_BITS = 38  # hi / lo up to 2**38: 2**-24 / lo stays below the largest value allowed at hi


class WindowTarget:
    """What :func:`window_gradients_ref` expects: n values whose fp16 window for max_underflow is
    (lo, hi), and one example that has it. The check reads the parameters and judges the property."""

    __slots__ = ("n", "lo", "hi", "max_underflow", "example")

    def __init__(self, n: int, lo: float, hi: float, max_underflow: float, example: np.ndarray) -> None:
        self.n, self.lo, self.hi, self.max_underflow, self.example = n, lo, hi, max_underflow, example

    def __repr__(self) -> str:
        return (
            f"{self.n} values with fp16 window ({_describe_scale(self.lo)}, {_describe_scale(self.hi)}) "
            f"at max_underflow {self.max_underflow!r}"
        )


def window_gradients_example(n: int, lo: float, hi: float, max_underflow: float) -> np.ndarray:
    """k + 1 values at 2**-24 / lo (k: the most that may underflow), the rest at 65520 / (2 hi)."""
    k = 0
    while (k + 1) / n <= max_underflow:
        k += 1
    x = np.full(n, 65520.0 / (2 * hi))
    x[: k + 1] = 2.0**-24 / lo
    return x


def window_gradients_ref(n: int, lo: float, hi: float, max_underflow: float) -> WindowTarget:
    return WindowTarget(n, lo, hi, max_underflow, window_gradients_example(n, lo, hi, max_underflow))


def _window_gradients_reason(got, t: WindowTarget) -> str | None:
    if got is None or isinstance(got, (str, bytes, dict)) or np.ndim(got) != 1:
        return f"expected a 1-D array of {t.n} numbers"
    try:
        if np.iscomplexobj(got):
            return f"expected a 1-D array of {t.n} real numbers"
        x = np.asarray(got, dtype=np.float64)
    except Exception:  # a student's odd object
        return f"expected a 1-D array of {t.n} numbers"
    if x.shape != (t.n,):
        return f"returned {x.size} values, expected {t.n}"
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        return f"value {bad[0]} is {float(x[bad[0]])!r}, not a finite number"
    if not np.any(x):
        return "every value is zero: nothing to scale"
    window = scale_window_ref(x, t.max_underflow, 5, 10)
    want = (t.lo, t.hi)
    if window == want:
        return _narrowest_miss_reason(x, t)
    if window is None:
        return "no power of two is usable for these values"
    nz = _nonzero(x)
    fmt = _fmt(5, 10)
    lo_e, hi_e = (int(math.log2(v)) for v in window)
    want_lo, want_hi = (int(math.log2(v)) for v in want)
    parts = []
    if lo_e != want_lo:
        e = min(lo_e, want_lo)
        parts.append(
            f"the window starts at 2**{lo_e}, not 2**{want_lo} "
            f"(at 2**{e}, {_underflow_count(nz, e, fmt)} of {nz.size} nonzero values underflow)"
        )
    if hi_e != want_hi:
        e = max(hi_e, want_hi)
        parts.append(
            f"it ends at 2**{hi_e}, not 2**{want_hi} (at 2**{e} "
            f"{'something overflows' if _overflows(nz, e, fmt) else 'nothing overflows'})"
        )
    return "; ".join(parts)


def _fewest_to_fail(n_nonzero: int, max_underflow: float) -> int:
    """The smallest count c of underflows that makes a scale unusable: c / n_nonzero > max_underflow
    (Python's float division, as the spec of exercise 1 has it)."""
    c = 0
    while c / n_nonzero <= max_underflow:
        c += 1
    return c


def _narrowest_miss_reason(x: np.ndarray, t: WindowTarget) -> str | None:
    """None if lo / 2 is unusable by the narrowest margin: as few values underflow there as make it
    unusable (one fewer and it would be usable); else why not. The window is (lo, hi) already."""
    nz = _nonzero(x)
    e = int(math.log2(t.lo)) - 1
    count = _underflow_count(nz, e, _fmt(5, 10))
    fewest = _fewest_to_fail(nz.size, t.max_underflow)
    if count == fewest:
        return None
    return (
        f"the window is right, but at 2**{e} {count} of {nz.size} nonzero values underflow, where "
        f"{fewest} make that scale unusable: lo / 2 must fail by as few values as possible"
    )


def window_gradients_compare(got, expected: WindowTarget) -> str | None:
    try:
        return _window_gradients_reason(got, expected)
    except Exception as e:  # a hostile object: a failed case, never a crash
        return f"could not judge the values ({type(e).__name__})"


def _window_gradient_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((10, 1.0, 1.0, 0.0), label="the window of one scale, 1"),
        Case((4, 2.0**16, 2.0**16 * 2.0**FP16_RANGE_BITS, 0.0), label="the widest window asked"),
        Case((100, 2.0**-10, 2.0**5, 0.05), label="5 of 100 may underflow at the bottom end"),
        Case((7, 2.0**3, 2.0**20, 3 / 7), label="3 of 7 may underflow"),
        Case((2, 2.0**-40, 2.0**-38, 0.0), label="two values, scales below 1"),
        Case((49, 2.0**-3, 2.0**9, 1 / 49), label="1 of 49 may underflow: 1 / 49 * 49 < 1 in floats"),
        Case((47, 2.0**5, 2.0**12, 3 / 47), label="3 of 47 may underflow: 3 / 47 * 47 < 3 in floats"),
        Case((44, 2.0**-8, 2.0**20, 15 / 44), label="15 of 44 may underflow: 15 / 44 * 44 < 15 in floats"),
        Case((49, 2.0**-3, 2.0**9, math.nextafter(1 / 49, 0.0)), label="none of 49 may: just below 1 / 49"),
        Case((44, 2.0**-8, 2.0**20, math.nextafter(15 / 44, 0.0)), label="14 of 44 may: just below 15 / 44"),
        # the float just below c / n, whose product with n rounds up to c: c - 1 may
        Case(
            (100, 2.0**-6, 2.0**15, math.nextafter(0.2, 0.0)),
            label="19 of 100 may: just below 20 / 100, although times 100 it rounds to 20",
        ),
        Case(
            (12, 2.0**4, 2.0**30, math.nextafter(5 / 12, 0.0)),
            label="4 of 12 may: just below 5 / 12, although times 12 it rounds to 5",
        ),
    ]
    for i in range(25):
        n = int(rng.integers(2, 400))
        e_lo = int(rng.integers(-60, 60))
        e_hi = e_lo + int(rng.integers(0, FP16_RANGE_BITS + 1))
        f = float(rng.choice(_FRACTIONS)) if rng.random() < 0.6 else int(rng.integers(0, n // 2 + 1)) / n
        # a float product that rounds down, or up, across a count, in every fourth case each
        kind = ("down", "up", "below", None)[i % 4]
        if kind == "below" and rng.random() < 0.5:
            kind = None
        if kind is not None:
            f = _float_hazard(rng, f, n, kind, top=0.5)
        if n == 2 and f >= 0.5:  # no two values have a window if one may underflow (the spec says so)
            f = 0.0
        cases.append(Case((n, math.ldexp(1.0, e_lo), math.ldexp(1.0, e_hi), f)))
    return cases


# ------------------------------------------------------------------ 3. the scale a dynamic scaler settles at
#
# A predict-then-measure problem: the scaler of exercise 1, with factors 2 and 0.5, fed a gradient of
# the same largest magnitude g every step, overflowing in fp16. The reference is the closed form from
# the two formats; tests/test_exercises_ch05.py measures the same numbers by running the chapter's
# DynamicLossScaler with found_inf from a real rounding to fp16. A third of the random cases have
# intervals (LONG_INTERVALS) and starts far from S that put a loop stepping the rule out of reach; the
# test runs those with short intervals from the same start (S does not depend on the interval).

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


def _near_cap(rng: np.random.Generator, s0: float, where: int) -> float:
    """A tiny max_abs_grad for a scale of float32 ``s0``'s mantissa: anywhere from far below the cap to
    one binade below it (``where`` 0); S one doubling below the cap, where growth to the cap overflows
    fp16 (1); or S at the cap although the product with float32's largest value overflows fp16 (2:
    the cap is the largest s0 * 2**k, not float32's largest value)."""
    cap = math.ldexp(math.frexp(s0)[0], 128)  # the largest s0 * 2**k float32 holds
    edge = math.log2(FP16_OVERFLOW / cap)  # S is the cap for g below 2**edge
    if where == 0:
        lo, hi = -140.0, -109.0
    elif where == 1:
        lo, hi = edge, edge + 1
    else:
        lo, hi = math.log2(FP16_OVERFLOW / float(np.finfo(np.float32).max)), edge
    return _trim(float(np.exp2(rng.uniform(lo, hi))))


#: growth intervals far too long to step through: the settled cycle alone lasts one of them plus a step
LONG_INTERVALS = (10**6, 10**8, 10**9)

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
        Case(
            (_trim(2.0**-111), 1.0, 4),
            label="S = 2**126, one doubling below the cap: growth to 2**127 fits float32 and overflows fp16",
        ),
        Case(
            (_trim(0.9999 * 65520 / 2.0**127), 1.0, 4),
            label="capped at 2**127 although float32's largest value times the gradient overflows fp16",
        ),
        Case(
            (_trim(0.9999 * 65520 / 2.0**127), 3.0, 4),
            label="the same gradient with a scale of the form 3 * 2**k: 3 * 2**126 fits float32, growth overflows",
        ),
        Case(
            (2.0**-130, (2 - 2.0**-23) * 2.0**100, 3),
            label="a scale with an all-ones float32 significand: it reaches float32's largest value exactly",
        ),
        Case((_trim(1e-3), 1000.0, 1), label="growth_interval 1, a scale of the form 1000 * 2**k"),
        Case((_trim(0.3), 0.1, 7), label="init_scale 0.1 (rounded to float32 first)"),
        Case((65520.0 / (45 * 2.0**8), 45.0 * 2**20, 2), label="a tie with a scale of the form 45 * 2**k, from above"),
        Case(
            (_trim(0.0853), 3000.0 * 2.0**-100, 10**9),
            label="growth_interval 10**9 and a start 100 doublings below S: about 10**11 steps to settle",
        ),
        Case((_trim(7.0), 2.0**40, LONG_INTERVALS[1]), label="from above, then cycles of 10**8 + 1 steps"),
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
        elif kind == 4:  # a tiny gradient, S at or near float32's cap
            g = _near_cap(rng, s0, i // 9 % 3)
        elif kind == 5:  # a large gradient: S below 1
            g = _trim(float(np.exp2(rng.uniform(17, 90))))
        else:  # anywhere in a binade below the overflow
            g = _grad_for(float(np.exp2(rng.uniform(15, 16))), scale)
        if i % 3 == 1:
            # too long to step: an interval of 10**6 to 10**9 steps, and half the time a start 30 to 100
            # doublings below S (each doubling takes an interval), where float32 keeps the start normal
            interval = int(rng.choice(LONG_INTERVALS)) + int(rng.integers(0, 1000))
            S, _ = settled_scale_ref(g, init, 1)  # S, a float32 value, does not depend on the interval
            below = int(rng.integers(30, 101))
            if rng.random() < 0.5 and math.frexp(S)[1] - below > -125:
                init = math.ldexp(S, -below)
        cases.append(Case((g, init, interval)))
    return cases


# ------------------------------------------------------------------ 4. clipping before unscaling
#
# A prediction: the ratio of the update's norm when the gradients are clipped before the scaler
# unscales them to the update's norm in the right order, for torch's clip_grad_norm_ rule (a factor
# min(1, max_norm / (norm + 1e-6)) on all gradients together) and one step of SGD (lr 1) or the
# first step of torch.optim.Adam with its defaults, in float64, computed the way torch's Adam does
# (moments, bias corrections, eps added to the corrected root). tests/test_exercises_ch05.py
# measures it with torch's clip_grad_norm_ and optimizers on the cases' gradients.

#: torch.nn.utils.clip_grad_norm_'s guard: clip_coef = max_norm / (total_norm + 1e-6)
CLIP_EPS = 1e-6
#: torch.optim.Adam's defaults
ADAM_LR, ADAM_BETAS, ADAM_EPS = 1e-3, (0.9, 0.999), 1e-8
CLIP_OPTIMIZERS = ("sgd", "adam")


def _clip_factor(norm: float, max_norm: float) -> float:
    return min(1.0, max_norm / (norm + CLIP_EPS))


def _first_update(g: np.ndarray, optimizer: str) -> np.ndarray:
    """The update of one step from a fresh optimizer that receives the gradients g."""
    if optimizer == "sgd":
        return g  # lr 1, no momentum
    b1, b2 = ADAM_BETAS
    m = (1 - b1) * g  # the moments after one step from zero
    v = (1 - b2) * g * g
    denom = np.sqrt(v) / math.sqrt(1 - b2) + ADAM_EPS  # bias-corrected root, then eps
    return ADAM_LR / (1 - b1) * m / denom


def misordered_clip_ratio_ref(grads, scale: float, max_norm: float, optimizer: str) -> float:
    """||update when clipping the scaled gradients, then unscaling|| / ||update when unscaling, then
    clipping||, for the true (unscaled) gradients ``grads`` (1-D, not all zero), a loss scale, a
    max_norm and one step of a fresh "sgd" (lr 1) or "adam" (torch's defaults)."""
    if optimizer not in CLIP_OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {CLIP_OPTIMIZERS}, got {optimizer!r}")
    g = np.asarray(grads, dtype=np.float64)
    norm = float(np.linalg.norm(g))
    if g.ndim != 1 or not norm > 0 or not math.isfinite(norm):
        raise ValueError("grads must be a 1-D array of finite values, not all zero")
    scaled = scale * g
    wrong = scaled * _clip_factor(float(np.linalg.norm(scaled)), max_norm) / scale
    right = g * _clip_factor(norm, max_norm)
    return float(np.linalg.norm(_first_update(wrong, optimizer)) / np.linalg.norm(_first_update(right, optimizer)))


def _grads(rng: np.random.Generator, n: int, norm: float, zeros: bool = False) -> np.ndarray:
    """n gradients of the given norm whose sizes spread over a few orders of magnitude."""
    g = rng.standard_normal(n) * np.exp(rng.normal(0.0, 1.5, n))
    if zeros and n > 1:
        g[rng.random(n) < 0.25] = 0.0
        g[0] = g[0] or 1.0
    return g * (norm / np.linalg.norm(g))


def _clip_cases(rng: np.random.Generator) -> list[Case]:
    own = np.random.default_rng(505)  # the named cases' gradients: the same for every seed
    small, big = _grads(own, 16, 0.5), _grads(own, 4096, 0.5)
    tiny = _grads(own, 64, 64 * 1e-9)  # elements near Adam's eps before any clip
    # the scaled norm 5e-7 below max_norm: the guard still clips, where "norm > max_norm" would not
    near = 2.0**20 * float(np.linalg.norm(tiny)) + 5e-7
    cases = []
    for opt in CLIP_OPTIMIZERS:
        cases += [
            Case((small, 65536.0, 1.0, opt), label=f"{opt}, 16 weights, GradScaler's default scale"),
            Case((small, 1024.0, 0.25, opt), label=f"{opt}, 16 weights: both orders clip"),
            Case((big, 65536.0, 0.5, opt), label=f"{opt}, 4096 weights: the wrong order's elements near eps"),
            Case((big, 2.0**24, 0.5, opt), label=f"{opt}, 4096 weights, scale 2**24: elements below eps"),
            Case((tiny, 1024.0, 1.0, opt), label=f"{opt}, gradients near eps, neither order clips"),
            Case((tiny, 2.0**20, 1e-6, opt), label=f"{opt}, max_norm at the guard 1e-6"),
            Case(
                (np.array([3e-7]), 8.0, 1e-6, opt),
                label=f"{opt}, one gradient: both orders clip, by factors the guard sets",
            ),
            Case((_grads(own, 100, 1.0, zeros=True), 3000.0, 1.0, opt), label=f"{opt}, some gradients 0, scale 3000"),
            Case(
                (tiny, 2.0**20, near, opt),
                label=f"{opt}, the scaled norm 5e-7 below max_norm: the wrong order still clips",
            ),
        ]
    # random gradients of random sizes; half the cases put the elements the wrong order leaves,
    # about max_norm / (scale sqrt(n)), near Adam's eps, where its update stops being lr * sign;
    # one in four puts the scaled norm less than the guard 1e-6 below max_norm (kind 4)
    for i in range(64):
        opt = CLIP_OPTIMIZERS[i % 2]
        n = int(np.exp2(rng.uniform(0, 12)))
        kind = 4 if i % 8 >= 6 else int(rng.integers(0, 4))
        if kind in (0, 1):  # the wrong order clips; its elements near eps
            element = float(np.exp2(rng.uniform(math.log2(1e-10), math.log2(1e-6))))
            c = float(np.exp2(rng.uniform(-6, 4)))
            scale = min(max(c / (element * math.sqrt(n)), 1.0), 2.0**24)
            if rng.random() < 0.7:
                scale = math.ldexp(1.0, round(math.log2(scale)))
            # a true norm above max_norm / scale, on either side of max_norm
            lo = math.log2(c / scale) + 0.2
            norm = float(np.exp2(rng.uniform(lo, max(lo + 0.1, math.log2(c) + 3))))
        elif kind == 2:  # around the guard: norms and max_norm near 1e-6
            scale = math.ldexp(1.0, int(rng.integers(0, 25)))
            norm = float(np.exp2(rng.uniform(-26, -14)))
            c = float(np.exp2(rng.uniform(-22, -10)))
        elif kind == 3:  # anywhere
            scale = math.ldexp(1.0, int(rng.integers(0, 25))) if rng.random() < 0.7 else float(rng.uniform(1.0, 1e5))
            norm = float(np.exp2(rng.uniform(-30, 12)))
            c = float(np.exp2(rng.uniform(-20, 6)))
        else:  # the scaled norm in (max_norm - 1e-6, max_norm): torch's guard clips, norm > max_norm does not
            element = float(np.exp2(rng.uniform(math.log2(1e-10), math.log2(1e-6))))
            c = float(np.exp2(rng.uniform(-20, 0)))
            scale = min(max(c / (element * math.sqrt(n)), 1.0), 2.0**24)
            if rng.random() < 0.7:
                scale = math.ldexp(1.0, round(math.log2(scale)))
            norm = (c - float(rng.uniform(0.05, 0.9)) * CLIP_EPS) / scale
        cases.append(Case((_grads(rng, n, norm, zeros=rng.random() < 0.2), scale, c, opt)))
    return cases


#: What an answer may not call (Exercise.forbidden): the statement: nothing of nbhelpers.
FORBIDDEN = ("nbhelpers",)
#: ... and for exercise 4, all of torch: its optimizers and clipping, and the C functions under them
#: (torch._fused_adam_, torch._foreach_norm), would measure instead of predict (the watch sees torch's
#: C functions through a torch function mode: nbhelpers.call_watch)
CLIP_FORBIDDEN = (*FORBIDDEN, "torch")

EXERCISES = [
    Exercise(
        "ex05.scale_window",
        "The window of usable loss scales",
        5,
        scale_window_ref,
        _window_cases,
        compare=window_compare,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex05.window_gradients",
        "Gradients with a given window",
        3,
        window_gradients_ref,
        _window_gradient_cases,
        compare=window_gradients_compare,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.CONSTRUCT,
    ),
    Exercise(
        "ex05.settled_scale",
        "Predict where the scaler settles",
        4,
        settled_scale_ref,
        _settled_cases,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex05.misordered_clip_ratio",
        "Clipping before unscaling, with SGD and Adam",
        4,
        misordered_clip_ratio_ref,
        _clip_cases,
        compare=close_to(1e-9),
        forbidden=CLIP_FORBIDDEN,
        kind=ExerciseKind.PREDICT,
    ),
]
