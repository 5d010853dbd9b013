"""Chapter 02 exercises: accumulation error. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Every exercise adds numbers in a chosen accumulator format, every operation rounded once with
:func:`nbhelpers.rounding.round_to` (the student may use it). The references are the course's
own tested emulations (:func:`nbhelpers.accumulation.emulated_sum` in the right order,
:func:`~nbhelpers.accumulation.emulated_dot`, :func:`~nbhelpers.accumulation.stall_length`),
and the results are compared bit for bit. The last exercise is a construction
(:func:`order_matters_ref`): the student returns terms with a property, and the check judges
the property itself with those emulations and :func:`nbhelpers.metrics.exact_sum`, since many
answers are right.

Why bit-exact is fair: the case generators only pass terms that are values of the accumulator
format (or, for the dot product, inputs whose rounded products are short), spread over a few
binades, with short sums. Every number a correct solution computes is then an integer multiple
of one power of two q, below 2**53 q in magnitude, so each float64 addition or subtraction a
student writes before calling ``round_to`` is exact, and ``round_to`` of it is the correctly
rounded result the reference computes.
"""

from __future__ import annotations

import numpy as np

from ..accumulation import emulated_dot, emulated_sum, stall_length
from ..exercise_types import Case, Exercise
from ..formats import get_format
from ..metrics import exact_sum
from ..rounding import round_to

# accumulator formats the random cases draw from (IEEE-style: inf/NaN at the top, subnormals)
_ACCS = ["bf16", "fp16", "e5m2", "e4m3", "e6m5", "e5m4", "e8m3", "fp32"]


def _grid_terms(rng: np.random.Generator, n: int, acc: str, signs: str, spread: int = 4) -> np.ndarray:
    """n values of ``acc``: random mantissa in [1, 2) times 2**k, k in [-spread, spread]."""
    x = rng.uniform(1, 2, n) * np.exp2(rng.integers(-spread, spread + 1, n))
    if signs == "mixed":
        x *= rng.choice([-1.0, 1.0], n)
    return round_to(x, acc)


def _stall_terms(rng: np.random.Generator, n: int, acc: str) -> np.ndarray:
    """A big term, then n - 1 small ones near half its spacing (many exactly half: ties), so
    that a plain running sum loses them and only an exact compensation keeps them."""
    m = get_format(acc).man_bits
    k = int(rng.integers(-2, 4))
    small = rng.uniform(1, 2, n - 1) * np.exp2(k - m - 2 + rng.integers(0, 3, n - 1))
    small[rng.random(n - 1) < 0.4] = 2.0 ** (k - m - 1)  # exactly half a spacing of the big term
    if rng.random() < 0.3:
        small *= rng.choice([-1.0, 1.0], n - 1)
    return round_to(np.r_[rng.uniform(1, 2) * 2.0**k, small], acc)


def _cancelling_terms(rng: np.random.Generator, n: int, acc: str) -> np.ndarray:
    """Terms and their negatives in a random order, plus a few others: the running sum keeps
    falling back near zero, where the next term is far larger than it (t - s is inexact)."""
    base = _grid_terms(rng, n // 2, acc, "mixed")
    x = np.r_[base, -base, _grid_terms(rng, n - 2 * (n // 2), acc, "mixed")]
    return x[rng.permutation(n)]


def _random_sum_cases(rng: np.random.Generator, count: int, max_n: int, near_powers: bool = False) -> list[Case]:
    """Random sums: a third of them plain grid terms, a third a stall after a big term, a third
    cancelling; with ``near_powers``, a third of the lengths are a power of two, one less or one more."""
    cases = []
    for _ in range(count):
        acc = _ACCS[rng.integers(len(_ACCS))]
        n = int(rng.integers(1, max_n + 1))
        if near_powers and rng.random() < 0.35:
            n = min(max_n, 2 ** int(rng.integers(1, 9)) + int(rng.integers(-1, 2)))
        kind = rng.random()
        if kind < 0.35 or n < 2:
            signs = "mixed" if rng.random() < 0.5 else "positive"
            x = _grid_terms(rng, n, acc, signs)
        elif kind < 0.7:
            x = _stall_terms(rng, n, acc)
        else:
            x = _cancelling_terms(rng, n, acc)
        cases.append(Case((x, acc)))
    return cases


def _edge_sum_cases() -> list[Case]:
    ones = np.ones(600)
    harmonic = round_to(1 / np.arange(1, 301), "bf16")
    big_then_small = np.concatenate([[256.0], np.full(200, 2.0**-1)])
    return [
        Case((np.zeros(0), "bf16"), label="no terms: 0.0"),
        Case((np.array([3.5]), "bf16"), label="one term"),
        Case((np.array([1.0, 2.0**-9]), "bf16"), label="two terms, the second lost"),
        Case((ones, "bf16"), label="600 ones in bf16 (sequential stalls at 256)"),
        Case((ones[:300], "e5m2"), label="300 ones in e5m2"),
        Case((harmonic, "bf16"), label="harmonic terms 1..1/300 in bf16"),
        Case((round_to(1 / np.arange(1, 301), "fp16"), "fp16"), label="harmonic terms in fp16"),
        Case((big_then_small, "bf16"), label="256 then 200 halves in bf16"),
        Case((np.array([1.0, 2.0**-8, -1.0, 2.0**-8]), "bf16"), label="cancellation"),
        Case((np.array([1.0, 2.0**-24, 2.0**-24, 2.0**-24]), "fp32"), label="fp32: tiny terms after 1"),
        Case((np.arange(1.0, 38.0), "fp16"), label="1 + 2 + ... + 37 in fp16 (37 terms)"),
    ]


# ------------------------------------------------------------------ 1. Kahan summation


def kahan_sum_ref(x, acc: str) -> float:
    """Kahan-compensated sum of x with s and c in ``acc``, every operation rounded (Order.KAHAN)."""
    return float(emulated_sum(np.asarray(x, dtype=np.float64), acc, "kahan"))


def _kahan_cases(rng: np.random.Generator) -> list[Case]:
    return _edge_sum_cases() + _random_sum_cases(rng, 40, 200)


# ------------------------------------------------------------------ 2. pairwise summation


def pairwise_sum_ref(x, acc: str) -> float:
    """Pairwise sum in ``acc`` (Order.PAIRWISE: split at the largest power of two below n)."""
    return float(emulated_sum(np.asarray(x, dtype=np.float64), acc, "pairwise"))


def _pairwise_cases(rng: np.random.Generator) -> list[Case]:
    cases = _edge_sum_cases()
    for n in [2, 3, 5, 6, 7, 8, 9, 13, 31, 33, 100, 129]:  # every shape of the split near powers of two
        acc = _ACCS[rng.integers(len(_ACCS))]
        cases.append(Case((_grid_terms(rng, n, acc, "mixed"), acc), label=f"n = {n}"))
    return cases + _random_sum_cases(rng, 60, 300, near_powers=True)


# ------------------------------------------------------------------ 3. a dot product


def dot_product_ref(a, b, in_fmt: str, acc: str) -> float:
    """Inputs rounded to ``in_fmt``, exact products, sequential sum in ``acc`` (emulated_dot)."""
    return float(emulated_dot(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), in_fmt, acc))


_IN_FMTS = ["bf16", "fp16", "e4m3fn", "e5m2"]
_DOT_ACCS = ["fp32", "bf16", "fp16"]


def _dot_inputs(rng: np.random.Generator, n: int, signs: str) -> np.ndarray:
    # |x| in [2**-3, 2**3): products below 64, sums of up to 256 of them stay far below fp16's max
    x = rng.uniform(1, 2, n) * np.exp2(rng.integers(-3, 3, n))
    if signs == "mixed":
        x *= rng.choice([-1.0, 1.0], n)
    return x


def _dot_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((np.ones(600), np.ones(600), "bf16", "bf16"), label="600 ones, bf16 accumulator (stalls at 256)"),
        Case((np.ones(600), np.ones(600), "bf16", "fp32"), label="600 ones, fp32 accumulator"),
        Case((np.full(50, 0.1), np.full(50, 3.0), "bf16", "fp32"), label="inputs that must be rounded first"),
        Case((np.array([1.0, 300.0]), np.array([1.0, 1.0]), "e4m3fn", "fp32"), label="e4m3fn: 300 rounds to 288"),
        Case((np.array([2.0]), np.array([-3.0]), "fp16", "fp16"), label="K = 1"),
        Case((np.array([1.0, 2.0**-6, -1.0]), np.array([1.0, 1.0, 1.0]), "bf16", "e5m2"), label="e5m2 accumulator"),
    ]
    for _ in range(50):
        n = int(rng.integers(1, 257))
        signs = "mixed" if rng.random() < 0.5 else "positive"
        in_fmt = _IN_FMTS[rng.integers(len(_IN_FMTS))]
        acc = _DOT_ACCS[rng.integers(len(_DOT_ACCS))]
        a, b = _dot_inputs(rng, n, signs), _dot_inputs(rng, n, signs)
        if n >= 2 and rng.random() < 0.35:
            # a large first product, then products near half the accumulator's spacing there:
            # a low-precision accumulator stalls or rounds at every step, a float64 one does not
            a[0], b[0] = rng.uniform(4, 8, 2)
            a[1:], b[1:] = (
                rng.uniform(1, 2, (2, n - 1)) * 2.0**-3 * rng.choice([-1.0, 1.0], (2, n - 1))
                if signs == "mixed"
                else rng.uniform(1, 2, (2, n - 1)) * 2.0**-3
            )
        cases.append(Case((a, b, in_fmt, acc)))
    return cases


# ------------------------------------------------------------------ 4. where a sum of equal terms stalls


def stall_length_ref(value: float, acc: str) -> int:
    """K: how many copies of ``value`` a sequential round-to-nearest-even sum in acc counts."""
    return stall_length(float(value), acc)


# formats for this exercise: at most 8 significant bits, so a loop of single steps stays short
_STALL_ACCS = ["bf16", "e5m2", "e4m3", "e5m4", "e6m5", "e8m3", "e3m4", "e5m6"]


def _stall_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((1.0, "bf16"), label="ones in bf16: 256"),
        Case((1.0, "e5m2"), label="ones in e5m2"),
        Case((0.5, "bf16"), label="a power of two"),
        Case((3.0, "bf16"), label="3 in bf16: rounding moves the sum on the way"),
        Case((1.5, "e4m3"), label="1.5 in e4m3"),
        Case((float(round_to(0.1, "bf16")), "bf16"), label="bf16(0.1)"),
        Case((1.0, "fp16"), label="ones in fp16: 2048"),
    ]
    while len(cases) < 40:
        acc = _STALL_ACCS[rng.integers(len(_STALL_ACCS))]
        # a random mantissa is never a power of two (where the stall is a tie) and rarely short
        # (where the running sum meets ties on the way): over-sample both
        r = rng.random()
        mantissa = 1.0 if r < 0.25 else float(rng.choice([1.5, 1.25, 1.75, 1.125])) if r < 0.5 else rng.uniform(1, 2)
        value = float(round_to(mantissa * 2.0 ** int(rng.integers(-4, 3)), acc))
        try:
            stall_length(value, acc)
        except ValueError:  # this value overflows the format before it stalls: not a case
            continue
        cases.append(Case((value, acc)))
    return cases


# ------------------------------------------------------------------ 5. a sum where the order matters


def _significant_bits(acc: str) -> int:
    return get_format(acc).man_bits + 1


def fewest_order_matters_terms(acc: str) -> int:
    """The smallest n for which :func:`order_matters_ref`'s property can hold: ``2**p + 1`` for
    p significant bits (257 in bf16, 2049 in fp16).

    Why no fewer: the reversed sum R is at most half the exact sum T, and its partial sums only
    grow (positive terms, monotone rounding), so each is at most T/2. A rounded addition whose
    result lies in [2**e, 2**(e+1)), 2**e <= T/2, loses at most half a spacing there,
    2**(e-p) <= T * 2**-(p+1) (a subnormal result is exact). The first addition, 0 + x_0, is
    exact, so losing T/2 takes at least 2**p more: n - 1 >= 2**p.
    """
    return 2 ** _significant_bits(acc) + 1


def order_matters_example(n: int, acc: str) -> np.ndarray:
    """n positive values of ``acc`` whose sequential sum in acc is exact in this order and at
    most half the exact sum in reverse (n >= :func:`fewest_order_matters_terms`).

    With p significant bits and a unit q: 2**p terms q, then levels of 2**(p-1) terms 2q, 4q, ...
    (each term one spacing of the running sum, so every partial sum is exact) up to the sum
    B = 2**(p+L) q, then k terms, multiples of B's spacing 2**(L+1) q, that add up to B. Reversed,
    those k terms add up to B exactly, and every later term is at most half a spacing of B (ties
    go to B's even mantissa): the reversed sum stays B, half the exact 2B.
    """
    p = _significant_bits(acc)
    if n < 2**p + 1:
        raise ValueError(f"no {n} values of {acc} have the property: it takes at least {2**p + 1}")
    levels, k = divmod(n - 2**p - 1, 2 ** (p - 1))
    k += 1  # 1 <= k <= 2**(p-1) terms at the end
    q = 2.0**-p
    terms = [q] * 2**p
    for level in range(1, levels + 1):
        terms += [2.0**level * q] * 2 ** (p - 1)
    g = 2.0 ** (levels + 1) * q  # the spacing at B = 2**(p+levels) q
    terms += [g] * (k - 1) + [(2 ** (p - 1) - (k - 1)) * g]
    return np.array(terms)


class OrderMattersTarget:
    """What :func:`order_matters_ref` expects: n values of ``acc`` with the property, and one
    example that has it. The check reads n and acc from it and judges the property; the example
    is not compared with anything (many answers are right): it shows that the case is solvable."""

    __slots__ = ("n", "acc", "example")

    def __init__(self, n: int, acc: str, example: np.ndarray) -> None:
        self.n, self.acc, self.example = n, acc, example

    def __repr__(self) -> str:
        return f"{self.n} positive values of {self.acc}: sum exact in this order, <= half in reverse"


def _order_matters_reason(got, n: int, acc: str) -> str | None:
    """None if ``got`` has the property of :func:`order_matters_ref` for (n, acc), else why not."""
    if got is None or isinstance(got, (str, bytes, dict)) or np.ndim(got) != 1:
        return f"expected a 1-D array of {n} numbers"
    try:
        if np.iscomplexobj(got):  # float64 would silently drop the imaginary parts
            return f"expected a 1-D array of {n} real numbers"
        x = np.asarray(got, dtype=np.float64)
    except Exception:  # noqa: BLE001 - a student's odd object
        return f"expected a 1-D array of {n} numbers"
    if x.shape != (n,):
        return f"returned {x.size} terms, expected {n}"
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        return f"term {bad[0]} is {float(x[bad[0]])!r}, not a finite number"
    bad = np.flatnonzero(x <= 0)
    if bad.size:
        return f"term {bad[0]} is {float(x[bad[0]])!r}, not positive"
    rounded = round_to(x, acc)
    bad = np.flatnonzero(rounded != x)
    if bad.size:
        return f"term {bad[0]} = {float(x[bad[0]])!r} is not a value of {acc} (it rounds to {float(rounded[bad[0]])!r})"
    forward, backward = emulated_sum(np.stack([x, x[::-1]]), acc, "sequential")
    exact = float(exact_sum(x))
    if exact_sum(np.r_[x, -forward]) != 0:
        return f"the sum in this order in {acc} is {float(forward)!r}, not the exact {exact!r}"
    if exact_sum(np.r_[x, -2.0 * backward]) < 0:
        return f"the sum in reverse order in {acc} is {float(backward)!r}, more than half of the exact {exact!r}"
    return None


def order_matters_ref(n: int, acc: str) -> OrderMattersTarget:
    """The property the student's terms must have, with the course's example (which
    tests/test_exercises_ch02.py verifies has it); the check judges the property alone."""
    return OrderMattersTarget(n, acc, order_matters_example(n, acc))


def _order_matters_compare(got, expected: OrderMattersTarget) -> str | None:
    try:
        return _order_matters_reason(got, expected.n, expected.acc)
    except Exception as e:  # noqa: BLE001 - a hostile object: a failed case, never a crash
        return f"could not judge the terms ({type(e).__name__})"


def _order_matters_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((257, "bf16"), label="the fewest terms possible in bf16"),
        Case((2049, "fp16"), label="the fewest terms possible in fp16"),
        Case((258, "bf16"), label="one more than the fewest"),
        Case((384, "bf16")),
        Case((385, "bf16")),
        Case((1000, "bf16")),
        Case((3073, "fp16")),
    ]
    for _ in range(8):  # n up to 896 in bf16 (up to four levels in the example), 3198 in fp16 (one)
        acc = "fp16" if rng.random() < 0.3 else "bf16"
        fewest = fewest_order_matters_terms(acc)
        cases.append(Case((int(rng.integers(fewest, fewest + (640 if acc == "bf16" else 1150))), acc)))
    return cases


EXERCISES = [
    Exercise("ex02.kahan_sum", "Kahan summation in a low-precision accumulator", 5, kahan_sum_ref, _kahan_cases),
    Exercise("ex02.pairwise_sum", "Pairwise summation", 4, pairwise_sum_ref, _pairwise_cases),
    Exercise("ex02.dot_product", "A dot product with a chosen accumulator", 3, dot_product_ref, _dot_cases),
    Exercise("ex02.stall_length", "Where a sum of equal terms stalls", 3, stall_length_ref, _stall_cases),
    Exercise(
        "ex02.order_matters",
        "A sum that is exact in one order and loses half in the other",
        4,
        order_matters_ref,
        _order_matters_cases,
        compare=_order_matters_compare,
    ),
]
