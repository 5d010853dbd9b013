"""Chapter 02 exercises: accumulation error. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Every exercise adds numbers in a chosen accumulator format, every operation rounded once with
:func:`nbhelpers.rounding.round_to` (the student may use it). Two are constructions
(:func:`kahan_beats_plain_ref`, :func:`order_matters_ref`): the student returns terms with a
property, and the check judges the property itself with the course's emulations
(:func:`nbhelpers.accumulation.emulated_sum` in the Kahan and sequential orders) and exact
rational sums, since many answers are right. The other three are compared bit for bit with
references built from those emulations by another route than a student's: the blocked pairwise
sum from sequential leaves and the pairwise order, the split-K sum's count of roundings chunk
by chunk, and the sum of n copies by a simulation (checked against the plain sum of n copies in
tests/test_exercises_ch02.py) where a student works binade by binade.

Why bit-exact is fair: the case generators only pass terms that are values of the accumulator
format (or, for the dot product, inputs whose rounded products are short), spread over a few
binades, with short sums. Every number a correct solution computes is then an integer multiple
of one power of two q, below 2**53 q in magnitude, so each float64 addition or subtraction a
student writes before calling ``round_to`` is exact, and ``round_to`` of it is the correctly
rounded result the reference computes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

from ..accumulation import emulated_sum, stall_length
from ..exercise_types import Case, Exercise, ExerciseKind
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


# ------------------------------------------------------------------ 1. Kahan beats the plain sum (a construction)


def kahan_reference_sum(x, acc: str) -> float:
    """Kahan's compensated sum of x in ``acc`` (Order.KAHAN: s and c in acc, every operation rounded)."""
    return float(emulated_sum(np.asarray(x, dtype=np.float64), acc, "kahan"))


# the judge's own arithmetic: numpy's float16 and ml_dtypes' bfloat16 compute each operation in
# float32 and round once to the format, which is correctly rounded (float32's 24 bits are at
# least 2p + 2 for p = 8 or 11, so rounding twice is innocuous); tests/test_exercises_ch02.py
# checks them against the course's emulation. A scalar loop in them is about 50 times faster.
_NATIVE = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}


def _native_sums(x: np.ndarray, acc: str) -> tuple[float, float]:
    """(Kahan's sum, the plain sequential sum) of x in acc, in the format's own arithmetic."""
    t_ = _NATIVE[acc]
    xs = x.astype(t_).tolist() if acc == "fp16" else list(x.astype(t_))
    s = c = plain = t_(0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        for xk in xs:
            xk = t_(xk)
            y = t_(xk - c)
            t = t_(s + y)
            c = t_(t_(t - s) - y)
            s = t
            plain = t_(plain + xk)
    return float(s), float(plain)


def fewest_kahan_terms(acc: str, lost: float) -> int:
    """The smallest n for which :func:`kahan_beats_plain_ref`'s property can hold:
    ``2**p * lost / (1 - lost) + 1`` for p significant bits (257 in bf16 for lost = 1/2).

    Why no fewer: the plain sum R ends at most (1 - lost) T, and its partial sums only grow
    (positive terms, monotone rounding), so each is at most R. One rounded addition of positive
    values loses at most 2**-p of its rounded result (half a spacing; the lemma of
    :func:`fewest_order_matters_terms`), so at most 2**-p R, and the first addition, 0 + x_0,
    loses nothing: T - R <= (n - 1) 2**-p R. With R <= (1 - lost) T that needs
    n - 1 >= 2**p lost / (1 - lost).
    """
    ratio = Fraction(lost) / (1 - Fraction(lost))
    return int(math.ceil(2 ** _significant_bits(acc) * ratio)) + 1


def kahan_beats_plain_example(n: int, acc: str, lost: float) -> np.ndarray:
    """n positive values of acc whose Kahan sum in acc is exact and whose plain sequential sum
    is at most (1 - lost) of the exact sum (n from :func:`fewest_kahan_terms` up to twice it).

    B = 2**p, then S = 2**p lost / (1 - lost) units, as ones and halves: every one and every
    half is lost by the plain sum at B (a tie to the even B, or less than half a spacing), and
    the exact sum B + S = B / (1 - lost) is a value of acc, which Kahan's compensation reaches.
    """
    fewest = fewest_kahan_terms(acc, lost)
    s = fewest - 1  # the units after B
    halved = n - fewest  # ones split into two halves, one more term each
    if not 0 <= halved <= s:
        raise ValueError(f"the example covers {fewest} to {2 * fewest - 1} terms, not {n}")
    return np.array([2.0 ** _significant_bits(acc)] + [1.0] * (s - halved) + [0.5] * (2 * halved))


class KahanTarget:
    """What :func:`kahan_beats_plain_ref` expects: n values of ``acc`` with the property for
    ``lost``, and one example that has it (it shows that the case is solvable; not compared)."""

    __slots__ = ("n", "acc", "lost", "example")

    def __init__(self, n: int, acc: str, lost: float, example: np.ndarray) -> None:
        self.n, self.acc, self.lost, self.example = n, acc, lost, example

    def __repr__(self) -> str:
        return f"{self.n} positive values of {self.acc}: Kahan exact, plain sum <= {1 - self.lost:g} of the exact sum"


def _positive_values_reason(got, n: int, acc: str) -> tuple[np.ndarray | None, str | None]:
    """(x, None) if ``got`` is n positive finite values of acc, else (None, why not)."""
    if got is None or isinstance(got, (str, bytes, dict)) or np.ndim(got) != 1:
        return None, f"expected a 1-D array of {n} numbers"
    try:
        if np.iscomplexobj(got):  # float64 would silently drop the imaginary parts
            return None, f"expected a 1-D array of {n} real numbers"
        x = np.asarray(got, dtype=np.float64)
    except Exception:  # a student's odd object
        return None, f"expected a 1-D array of {n} numbers"
    if x.shape != (n,):
        return None, f"returned {x.size} terms, expected {n}"
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        return None, f"term {bad[0]} is {float(x[bad[0]])!r}, not a finite number"
    bad = np.flatnonzero(x <= 0)
    if bad.size:
        return None, f"term {bad[0]} is {float(x[bad[0]])!r}, not positive"
    rounded = round_to(x, acc)
    bad = np.flatnonzero(rounded != x)
    if bad.size:
        i = bad[0]
        return None, f"term {i} = {float(x[i])!r} is not a value of {acc} (it rounds to {float(rounded[i])!r})"
    return x, None


def _kahan_reason(got, n: int, acc: str, lost: float) -> str | None:
    """None if ``got`` has the property of :func:`kahan_beats_plain_ref`, else why not."""
    x, reason = _positive_values_reason(got, n, acc)
    if reason:
        return reason
    exact = sum(map(Fraction, x.tolist()))  # exact rational sum
    kahan, plain = _native_sums(x, acc)
    if not math.isfinite(kahan) or Fraction(kahan) != exact:
        return f"Kahan's sum in {acc} is {kahan!r}, not the exact {float(exact)!r}"
    if not math.isfinite(plain):
        return f"the plain sum in {acc} is {plain!r}"
    if Fraction(plain) > (1 - Fraction(lost)) * exact:
        return (
            f"the plain sum in {acc} is {plain!r}, more than {1 - lost:g} of the exact {float(exact)!r} "
            f"(it loses {float(1 - Fraction(plain) / exact):.4g}, not {lost:g})"
        )
    return None


def kahan_beats_plain_ref(n: int, acc: str, lost: float) -> KahanTarget:
    """The property the student's terms must have, with the course's example (which
    tests/test_exercises_ch02.py verifies has it); the check judges the property alone."""
    return KahanTarget(n, acc, lost, kahan_beats_plain_example(n, acc, lost))


def _kahan_compare(got, expected: KahanTarget) -> str | None:
    try:
        return _kahan_reason(got, expected.n, expected.acc, expected.lost)
    except Exception as e:  # a hostile object: a failed case, never a crash
        return f"could not judge the terms ({type(e).__name__})"


_KAHAN_LOST = [0.5, 0.75, 0.875]  # 1 - lost a power of two: the stated fraction is exact


def _kahan_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((257, "bf16", 0.5), label="the fewest terms possible in bf16, losing half"),
        Case((769, "bf16", 0.75), label="the fewest terms possible in bf16, losing three quarters"),
        Case((258, "bf16", 0.5), label="one more than the fewest"),
        Case((260, "bf16", 0.5)),
        Case((2049, "fp16", 0.5), label="the fewest terms possible in fp16"),
        Case((1000, "bf16", 0.75)),
        Case((1800, "bf16", 0.875), label="fewer than the 1793 + 256 a plain stall from 2**p would need"),
    ]
    for _ in range(8):  # n from the fewest up to twice it; most of them not the fewest plus a power of two
        acc = "fp16" if rng.random() < 0.1 else "bf16"
        lost = 0.5 if acc == "fp16" else float(rng.choice(_KAHAN_LOST[:2]))
        fewest = fewest_kahan_terms(acc, lost)
        top = fewest + (400 if acc == "fp16" else fewest - 1)
        cases.append(Case((int(rng.integers(fewest + 1, top + 1)), acc, lost)))
    return cases


# ------------------------------------------------------------------ 2. how many roundings each term goes through
#
# A prediction: the order of chapter 02's blocked pairwise sum (sequential leaves of b terms, the
# leaves added by the chapter's pairwise tree) and, for each term, the number of rounded additions
# that touch it or a partial sum holding it: the count in its gamma bound. The reference follows
# the structure (leaf by leaf, node by node), with no closed form; tests/test_exercises_ch02.py
# counts the same numbers by tracing which partial sums hold which terms.


def pairwise_blocked_sum_ref(x, acc: str, b: int) -> float:
    """The blocked pairwise sum itself, the order the exercise counts (the tests hold it): leaves
    of b consecutive terms summed sequentially in acc, then the chapter's pairwise tree over the
    leaves in acc (Order.SEQUENTIAL per leaf, Order.PAIRWISE over the leaves)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return 0.0
    leaves = [float(emulated_sum(x[i : i + b], acc)) for i in range(0, x.size, b)]
    return float(emulated_sum(np.array(leaves), acc, "pairwise"))


def _leaf_depths(leaves: int) -> list[int]:
    """The tree depth of each leaf in the chapter's pairwise order: one leaf is its own sum; L >= 2
    leaves split at the largest power of two strictly below L, and each half adds one level."""
    if leaves == 1:
        return [0]
    h = 1 << ((leaves - 1).bit_length() - 1)
    return [d + 1 for d in _leaf_depths(h) + _leaf_depths(leaves - h)]


def roundings_per_term_ref(n: int, b: int) -> np.ndarray:
    """int64 array of n: the rounded additions each term of a blocked pairwise sum (leaves of b,
    the last shorter; each leaf summed from 0.0, whose first addition is exact) goes through."""
    out = np.zeros(n, dtype=np.int64)
    starts = list(range(0, n, b))
    for start, depth in zip(starts, _leaf_depths(len(starts))):
        length = min(b, n - start)
        for i in range(length):
            # term 0 enters exactly (0.0 + x); term i >= 1 is rounded in, and so on to the end
            out[start + i] = (length - 1 if i == 0 else length - i) + depth
    return out


def _chain_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((1, 1), label="one term: no rounding"),
        Case((1, 8), label="one term, a longer block: no rounding"),
        Case((5, 8), label="one leaf: a sequential sum"),
        Case((2, 1), label="two terms, b = 1: one rounding each"),
        Case((3, 1), label="three leaves: the tree splits 2 + 1"),
        Case((5, 1), label="five leaves: 4 + 1, the last term one level up"),
        Case((7, 2), label="leaves of 2, 2, 2, 1"),
        Case((10, 3), label="leaves of 3, 3, 3, 1: four leaves, one level each side"),
        Case((12, 4), label="three full leaves"),
        Case((16, 4), label="a power of two of leaves"),
        Case((17, 4), label="one term past a power of two of leaves"),
        Case((600, 128), label="600 terms in leaves of 128"),
    ]
    for _ in range(60):
        n = int(rng.integers(1, 3000)) if rng.random() < 0.7 else int(rng.integers(1, 40))
        r = rng.random()
        if r < 0.3:
            b = int(rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 100, 128]))
        elif r < 0.5:
            b = int(rng.integers(n, n + 5))  # one leaf
        else:
            b = int(rng.integers(1, max(2, n // 2) + 1))
        cases.append(Case((n, b)))
    return cases


# ------------------------------------------------------------------ 3. how many splits for a split-K sum
#
# A prediction over integers: split-K cuts K exact products into chunks of c = ceil(K / s), sums each
# chunk sequentially from 0.0 and the chunks' partial sums sequentially from 0.0. For K products of
# one magnitude the error bound sum_k gamma(m_k) |x_k| is, to first order in u, u |x| sum_k m_k: the
# total count of rounded additions the products go through. The reference groups the s by their
# chunk length and adds the counts chunk by chunk with numpy (no closed form across the chunks).


def _split_total(K: int, c: int) -> int:
    """sum_k m_k for K products in chunks of c: in a chunk of L summed from 0.0 the first two
    products go through L - 1 roundings and the t-th (t >= 1) L - t; every product of chunk i then
    goes through the roundings of its partial sum across the chunks: p - 1 for chunk 0 (it enters
    0.0 exactly), p - i for chunk i >= 1."""
    p = -(-K // c)
    L = np.full(p, c, dtype=np.int64)
    L[-1] = K - (p - 1) * c
    within = (L - 1) + L * (L - 1) // 2
    across = p - np.arange(p, dtype=np.int64)
    across[0] = p - 1
    return int(within.sum() + (L * across).sum())


def best_splits_ref(K: int, max_splits: int) -> tuple[int, int]:
    """(s, total): the split count s in 1..max_splits whose split-K sum of K products has the
    smallest total count of rounded additions over the products (the smallest such s on a tie),
    and that total. Every s with the same chunk length gives the same sum: each length once."""
    K, max_splits = int(K), int(max_splits)
    if K < 1 or max_splits < 1:
        raise ValueError(f"K >= 1 and max_splits >= 1, got {K}, {max_splits}")
    s = np.arange(1, max_splits + 1, dtype=np.int64)
    chunk, first = np.unique(-(-K // s), return_index=True)  # each length and its smallest s
    best = min((_split_total(K, int(c)), int(s[i])) for c, i in zip(chunk, first))
    return best[1], best[0]


def _split_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((1, 4), label="one product: nothing to split"),
        Case((2, 1), label="no split allowed"),
        Case((16, 16), label="K = 16"),
        Case((10, 6), label="K = 10, at most 6 splits"),
        Case((4096, 4096), label="K = 4096"),
        Case((4096, 16), label="at most 16 splits: the cap binds"),
        Case((1000, 1000), label="K = 1000: many splits give the same chunks"),
        Case((7168, 132), label="DeepSeek-V3's hidden size, at most one split per SM"),
    ]
    for _ in range(60):
        K = int(np.exp2(rng.uniform(0, 20)))
        max_splits = int(rng.integers(1, K + 1)) if rng.random() < 0.7 else int(rng.integers(1, 300))
        cases.append(Case((K, max_splits)))
    return cases


# ------------------------------------------------------------------ 4. the sum of n copies, binade by binade


def sum_of_copies_ref(value: float, n: int, acc: str) -> float:
    """s_n for s_0 = 0, s_k = fl(s_(k-1) + value) in acc (round to nearest even).

    A simulation with round_to, one step at a time, that skips ahead only where it has seen the
    increment repeat: once two consecutive steps inside one binade of acc added the same amount,
    every step adds it while s + value stays below the binade's end (the steps are counted
    exactly with Fractions). tests/test_exercises_ch02.py checks it against the plain sum of n
    copies (emulated_sum) wherever that is affordable.
    """
    f = get_format(acc)
    v = float(value)
    s, k = 0.0, 0
    prev = None
    while k < n:
        t = float(round_to(s + v, acc))
        if t == s:
            return s  # stalled: every later term is lost too
        inc = t - s
        e = max(math.frexp(t)[1] - 1, f.emin)
        s, k = t, k + 1
        if prev == (inc, e):
            room = Fraction(min(math.ldexp(1.0, e + 1), f.max)) - Fraction(s) - Fraction(v)
            if room > 0:
                j = min(n - k, math.ceil(room / Fraction(inc)))
                s, k = float(Fraction(s) + j * Fraction(inc)), k + j
        prev = (inc, e)
    return s


# accumulators for this exercise: from 3 to 24 significant bits (fp32's sums take over ten
# million terms to stall: too many to add one at a time)
_COPIES_ACCS = ["bf16", "fp16", "fp32", "tf32", "e5m2", "e4m3", "e5m4", "e8m3", "e6m5", "e8m12", "e8m20"]
_TIE_ACCS = [a for a in _COPIES_ACCS if get_format(a).man_bits <= 10]


def _copies_value(rng: np.random.Generator, acc: str, short: bool = False) -> float:
    """A value of acc near 1: a power of two, a short mantissa (ties on the way), or a long one;
    ``short``: a short mantissa."""
    r = 0.3 if short else rng.random()
    if r < 0.2:
        mantissa = 1.0
    elif r < 0.5:
        mantissa = float(rng.choice([1.5, 1.25, 1.75, 1.125, 1.375, 1.0625]))
    else:
        mantissa = rng.uniform(1, 2)
    return float(round_to(mantissa * 2.0 ** int(rng.integers(-4, 3)), acc))


def _stalls_finite(value: float, acc: str) -> int | None:
    """The stall length of value in acc, or None where the sum overflows first."""
    try:
        return stall_length(value, acc)
    except ValueError:
        return None


def _first_terms_reaching(value: float, acc: str, K: int, bound: float) -> int:
    """The first n <= K with s_n >= bound (K when none): sums only grow, so a bisection."""
    lo, hi = 0, K
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if sum_of_copies_ref(value, mid, acc) < bound else (lo, mid)
    return lo


def _tie_binade_terms(value: float, acc: str, K: int) -> tuple[int, int] | None:
    """(first, past): the first n whose sum s_n lies in the binade of acc where s + value is a tie
    (the spacing there is twice value's lowest set bit), and the first n whose sum is past that
    binade (K when none is). The sum must enter the binade at an odd multiple of the spacing, so
    that the first step there differs from the next ones; None when it stalls before the binade
    or enters it at an even multiple."""
    f = get_format(acc)
    low_bit = 2.0 ** (math.frexp(value)[1] - 1)
    while value % low_bit:  # value's lowest set bit
        low_bit /= 2
    e = int(math.log2(2 * low_bit)) + f.man_bits  # the binade whose spacing is 2 * low_bit
    if e < f.emin or e >= f.emax:
        return None
    first = _first_terms_reaching(value, acc, K, 2.0**e)
    if first >= K or (sum_of_copies_ref(value, first, acc) / (2 * low_bit)) % 2 == 0:
        return None
    return first, _first_terms_reaching(value, acc, K, 2.0 ** (e + 1))


def _copies_cases(rng: np.random.Generator) -> list[Case]:
    bf01, fp01 = float(round_to(0.1, "bf16")), float(round_to(0.1, "fp16"))
    cases = [
        Case((1.0, 10**6, "bf16"), label="ones in bf16: stalls at 256"),
        Case((1.0, 256, "bf16"), label="256 ones in bf16"),
        Case((1.0, 255, "bf16"), label="255 ones in bf16"),
        Case((3.0, 300, "bf16"), label="3 in bf16: a tie in every step from 256 to 512"),
        Case((1.5, 200, "e4m3"), label="1.5 in e4m3"),
        Case((bf01, 30, "bf16"), label="bf16(0.1), 30 terms: rounded on the way"),
        Case((fp01, 10**9, "fp16"), label="fp16(0.1): chapter 02's problem 1"),
        Case((fp01, 2000, "fp16"), label="fp16(0.1), 2000 terms: above the exact sum"),
        Case((1.0, 2**40, "fp32"), label="ones in fp32: 2**24"),
        Case((float(np.float32(0.1)), 10**12, "fp32"), label="fp32(0.1): over ten million terms to stall"),
        Case((float(np.float32(0.1)), 5 * 10**6, "fp32"), label="fp32(0.1), five million terms"),
        Case((0.75, 0, "bf16"), label="no terms: 0.0"),
        Case((0.75, 1, "bf16"), label="one term"),
        Case((2.5, 10, "e5m2"), label="2.5 in e5m2: the sum crosses 4, 8 and 16, the increment changing"),
        Case((1.2374228239059448, 2, "fp32"), label="fp32, two terms: the second crosses 2"),
        Case((2.29931640625, 3, "e8m12"), label="e8m12, three terms: the third crosses 4"),
        Case((3 * 2.0**-9, 2, "e4m3"), label="a subnormal value of e4m3: the sum stays subnormal"),
        Case((3 * 2.0**-9, 7, "e4m3"), label="a subnormal value of e4m3 whose sum grows past 2**emin"),
        Case((2.0**-16, 3, "e5m2"), label="e5m2's smallest subnormal, three terms"),
    ]
    while len(cases) < 50:
        # every fifth: a short mantissa (ties on the way) in an accumulator of at most 11 significant
        # bits (few enough terms to bisect for a binade's first)
        tie_case = len(cases) % 5 == 0
        accs = _TIE_ACCS if tie_case else _COPIES_ACCS
        acc = accs[rng.integers(len(accs))]
        value = _copies_value(rng, acc, short=tie_case)
        K = _stalls_finite(value, acc)
        if K is None:  # this value overflows the format before it stalls: not a case
            continue
        r = rng.random()
        if tie_case:  # inside the binade where value is a tie, entered at an odd sum
            tie = _tie_binade_terms(value, acc, K)
            if tie is None or tie[1] - tie[0] < 4:
                continue
            n = int(rng.integers(tie[0] + 2, tie[1] + 1))
        elif r < 0.3:  # past the stall
            n = int(rng.integers(K, 2**50))
        elif r < 0.5:  # one term either side of the stall
            n = K + int(rng.integers(-2, 2))
        elif r < 0.75:  # at a binade's end, where the spacing doubles: the first n that reaches 2**e
            top = sum_of_copies_ref(value, K, acc)
            e = int(rng.integers(math.frexp(value)[1], math.frexp(top)[1] + 1))
            lo, hi = 0, K  # sums only grow: bisect for the first n with s_n >= 2**(e - 1)
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (mid + 1, hi) if sum_of_copies_ref(value, mid, acc) < 2.0 ** (e - 1) else (lo, mid)
            n = lo + int(rng.integers(-1, 2))
        else:  # anywhere before it
            n = int(rng.integers(1, K + 1))
        cases.append(Case((value, max(n, 0), acc)))
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


# formats whose sums native arithmetic rounds exactly as emulated_sum does (see _sums_both_ways)
_NATIVE_SUM_DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}


def _sums_both_ways(x: np.ndarray, acc: str) -> tuple[float, float]:
    """The sums of ``x`` in order and in reverse order, each addition rounded to ``acc``
    (nearest-even): what ``emulated_sum(..., acc, "sequential")`` gives for each.

    For bf16 and fp16 the same bits come from native arithmetic, about a thousand times faster:
    numpy (fp16) and ml_dtypes (bf16) add two such values in float32 and round the result to the
    format, and float32's 24 significant bits are at least 2p + 2 for p = 8 and p = 11, where
    rounding to float32 first and then to the format gives the same result as rounding once
    (S. A. Figueroa, "When is double rounding innocuous?", ACM SIGNUM Newsletter 30(3), 1995).
    tests/test_exercises_ch02.py compares the two bit for bit."""
    both = np.stack([x, x[::-1]])
    dtype = _NATIVE_SUM_DTYPES.get(acc)
    if dtype is None:
        forward, backward = emulated_sum(both, acc, "sequential")
        return float(forward), float(backward)
    with np.errstate(over="ignore"):  # a sum past the format's largest value is inf, as emulated
        sums = np.add.accumulate(both.astype(dtype), axis=1, dtype=dtype)[:, -1]
    return float(sums[0]), float(sums[1])


def _order_matters_reason(got, n: int, acc: str) -> str | None:
    """None if ``got`` has the property of :func:`order_matters_ref` for (n, acc), else why not."""
    if got is None or isinstance(got, (str, bytes, dict)) or np.ndim(got) != 1:
        return f"expected a 1-D array of {n} numbers"
    try:
        if np.iscomplexobj(got):  # float64 would silently drop the imaginary parts
            return f"expected a 1-D array of {n} real numbers"
        x = np.asarray(got, dtype=np.float64)
    except Exception:  # a student's odd object
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
    forward, backward = _sums_both_ways(x, acc)
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
    except Exception as e:  # a hostile object: a failed case, never a crash
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


#: What an answer may not call (Exercise.forbidden): the statement: round_to and get_format, not nbhelpers.accumulation.
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.accumulation")

EXERCISES = [
    Exercise(
        "ex02.kahan_beats_plain",
        "Terms that Kahan adds exactly and a plain sum does not",
        5,
        kahan_beats_plain_ref,
        _kahan_cases,
        compare=_kahan_compare,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.CONSTRUCT,
    ),
    Exercise(
        "ex02.roundings_per_term",
        "How many roundings each term of a blocked pairwise sum goes through",
        4,
        roundings_per_term_ref,
        _chain_cases,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex02.best_splits",
        "How many splits for a split-K sum",
        3,
        best_splits_ref,
        _split_cases,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex02.sum_of_copies",
        "The sum of n copies, binade by binade",
        3,
        sum_of_copies_ref,
        _copies_cases,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex02.order_matters",
        "A sum that is exact in one order and loses half in the other",
        4,
        order_matters_ref,
        _order_matters_cases,
        compare=_order_matters_compare,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.CONSTRUCT,
    ),
]
