"""Chapter 01's exercises beyond the table (test_exercises.py). Stochastic rounding: the check's
false-failure rate with exact binomial tails, its neighbours against an enumeration of each
format, what its compare accepts and rejects, and the regions its random cases reach. Exercises
1 to 4: their references against outside oracles (ml_dtypes' fp8/fp6/fp4/fp16/bf16 codes, the
exact rounding of an enumerated grid, listing every value, numpy's bit patterns, exact
fractions), on formats too wide to list as well."""

from fractions import Fraction

import numpy as np
import pytest
from exercise_table import CHAPTERS
from helpers import SolutionNotebook

from nbhelpers.answer_keys.ch01 import SR_N, SR_Z, round_stochastic_ref, stochastic_compare, stochastic_false_failure
from nbhelpers.checks import cases_for, run_check
from nbhelpers.formats import FloatFormat, finite_values

SPEC = next(s for s in CHAPTERS if s.chapter == 1)
SEEDS = (0, SPEC.hidden_seed, 8142093377)


def binomial_outside(n: int, p: float, lo: float, hi: float) -> float:
    """P(K < lo or K > hi) for K ~ Binomial(n, p), summed from the exact pmf in log space."""
    k = np.arange(n + 1)
    logc = np.concatenate([[0.0], np.cumsum(np.log((n - k[1:] + 1) / k[1:]))])  # log C(n, k)
    logpmf = logc + k * np.log(p) + (n - k) * np.log1p(-p)
    outside = (k < lo) | (k > hi)
    return float(np.exp(logpmf[outside]).sum())


@pytest.mark.parametrize("seed", SEEDS)
def test_a_right_answer_fails_a_check_rarely_by_exact_binomial_tails(seed):
    """The acceptance band |k - n p| <= Z sqrt(n p (1 - p)) with the exact binomial law of k
    (not its normal approximation): at most 2e-8 per case (the two large cases, about 78 elements
    expected of 40,000, have a skewed tail; the others stay under 1e-8), 1e-6 per check (the test
    across the cases adds SR_ALL_TAIL)."""
    total = 0.0
    n_either = 0
    for case in cases_for("ex01.round_stochastic", seed):
        t = round_stochastic_ref(*case.args)
        p = float(t.p.flat[0])
        assert np.all(t.p == p)  # one value repeated
        if p == 0.0:
            continue
        n_either += 1
        n = t.x.size  # SR_N, or a million for the finest fractions
        band = SR_Z * np.sqrt(n * p * (1 - p))
        tail = binomial_outside(n, p, n * p - band, n * p + band)
        assert tail <= 2e-8, (case.label, p, tail)  # 1e-8 but for the two large cases near 2/1024
        total += tail
    assert total <= 1e-6
    n, normal = stochastic_false_failure(seed)  # what the notebook prints
    assert n == n_either
    assert total / 10 <= normal <= total * 10  # the normal figure is the right size


def test_binomial_outside_against_a_small_direct_sum():
    n, p = 12, 0.25
    direct = sum(
        float(Fraction(1) * __import__("math").comb(n, k) * Fraction(1, 4) ** k * Fraction(3, 4) ** (n - k))
        for k in range(n + 1)
        if k < 2 or k > 5
    )
    assert binomial_outside(n, p, 2, 5) == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_neighbours_and_probability_against_an_enumeration_of_the_format(seed):
    """lower and upper are consecutive values of the format around x (x itself when x is one),
    and p is the exact fraction of the way from lower to upper."""
    for case in cases_for("ex01.round_stochastic", seed):
        x, e, m, _ = case.args
        t = round_stochastic_ref(*case.args)
        if (e, m) == (8, 23):  # fp32: too many values to enumerate; numpy's float32 steps instead
            a, lo, hi = abs(float(x.flat[0])), abs(float(t.lower.flat[0])), abs(float(t.upper.flat[0]))
            assert float(np.float32(lo)) == lo and float(np.float32(hi)) == hi
            if t.p.flat[0] == 0:
                assert lo == hi == a
            else:
                assert lo < a < hi == float(np.nextafter(np.float32(lo), np.float32(np.inf)))
            continue
        if 1 + e + m > 16:  # all_codes enumerates formats of at most 16 bits
            continue
        v = finite_values(FloatFormat.custom(e, m), nonnegative=True)
        a = abs(float(x.flat[0]))
        lo, hi = abs(float(t.lower.flat[0])), abs(float(t.upper.flat[0]))
        if a in v:
            assert lo == hi == a
            assert t.p.flat[0] == 0
            continue
        i = int(np.searchsorted(v, a))  # v[i - 1] < a < v[i]
        assert (lo, hi) == (v[i - 1], v[i]), case.label
        assert Fraction(float(t.p.flat[0])) == (Fraction(a) - Fraction(lo)) / (Fraction(hi) - Fraction(lo))
        assert np.all(np.signbit(t.upper) == np.signbit(x))


def test_compare_accepts_and_rejects():
    rng = np.random.default_rng(0)
    t = round_stochastic_ref(np.full(SR_N, 1 + 2.0**-8), 8, 7, rng)  # halfway between 1 and 1 + 2**-7
    exact = np.where(np.arange(SR_N) < SR_N // 2, 1.0, 1 + 2.0**-7)
    assert stochastic_compare(exact, t) is None
    assert stochastic_compare(exact.astype(np.float32), t) is None
    assert stochastic_compare(list(exact), t) is None
    assert "biased" in stochastic_compare(np.ones(SR_N), t)
    assert "biased" in stochastic_compare(np.full(SR_N, 1 + 2.0**-7), t)
    off = exact.copy()
    off[3] = 1 + 2.0**-8
    assert "not a neighbour" in stochastic_compare(off, t)
    assert "shape" in stochastic_compare(exact[:-1], t)
    assert stochastic_compare("abc", t) is not None
    assert stochastic_compare(None, t) is not None
    # an element already in the format must not move
    t0 = round_stochastic_ref(np.full(SR_N, 1.0), 8, 7, rng)
    assert stochastic_compare(np.ones(SR_N), t0) is None
    moved = np.ones(SR_N)
    moved[0] = 1 + 2.0**-7
    assert "already in the format" in stochastic_compare(moved, t0)


def test_the_solution_passes_with_many_seeds():
    fn = SolutionNotebook(SPEC.solution, SPEC.namespace).functions()["round_stochastic"]
    for seed in range(1, 11):
        result = run_check("ex01.round_stochastic", fn, seed=seed)
        assert result.passed, str(result)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_cases_reach_every_hard_region(seed):
    """Without the fixed edge cases: ties, subnormals, values in the format, negatives, eighths."""
    cases = [c for c in cases_for("ex01.round_stochastic", seed) if not c.label]
    assert len(cases) >= 20
    seen = set()
    for c in cases:
        x, e, m, _ = c.args
        t = round_stochastic_ref(*c.args)
        f = FloatFormat.custom(e, m)
        p = float(t.p.flat[0])
        seen.add("in the format" if p == 0 else "tie" if p == 0.5 else "eighth" if p in (0.125, 0.875) else "other")
        if p > 0 and abs(x.flat[0]) < f.smallest_normal:
            seen.add("subnormal")
        if x.flat[0] < 0:
            seen.add("negative")
    assert {"in the format", "tie", "subnormal", "negative"} <= seen, seen


def test_the_notebooks_numbers_are_the_checkers():
    """The solution notebook states N, Z and the number of cases in a cell (a student's kernel
    cannot import the checker): they must be the checker's, for every seed."""
    import math
    import re

    import nbformat
    from helpers import ROOT

    nb = nbformat.read(ROOT / "solutions" / SPEC.solution, as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and re.search(r"^N, Z =", c.source, re.M))
    ns = {"math": math}
    exec(src, ns)
    assert (ns["N"], ns["Z"]) == (SR_N, SR_Z)
    for seed in SEEDS:
        assert ns["n_cases"] == len(cases_for("ex01.round_stochastic", seed))
    assert ns["p_case"] == pytest.approx(stochastic_false_failure(0)[1] / stochastic_false_failure(0)[0], rel=1e-6)


# ---- exercises 1 to 4: their references against outside oracles ---------------------------------


# every small float type of ml_dtypes as a data sheet gives it: widths and convention (its bias
# comes from its largest value)
_ML_DTYPES_SHEETS = [
    ("float8_e4m3fn", 4, 3, "fn"),
    ("float8_e4m3fnuz", 4, 3, "fnuz"),
    ("float8_e5m2fnuz", 5, 2, "fnuz"),
    ("float8_e4m3b11fnuz", 4, 3, "fnuz"),
    ("float8_e5m2", 5, 2, "ieee"),
    ("float8_e4m3", 4, 3, "ieee"),
    ("float8_e3m4", 3, 4, "ieee"),
    ("float6_e2m3fn", 2, 3, "finite"),
    ("float6_e3m2fn", 3, 2, "finite"),
    ("float4_e2m1fn", 2, 1, "finite"),
]


@pytest.mark.parametrize("name,e,m,specials", _ML_DTYPES_SHEETS)
def test_decode_reference_against_ml_dtypes(name, e, m, specials):
    """Given ml_dtypes' widths, convention and largest value, the reference decodes every code as
    ml_dtypes does (the sign of a zero included; NaN by NaN, whatever its sign bit)."""
    import ml_dtypes

    from nbhelpers.answer_keys.ch01 import decode_bits_ref

    dt = getattr(ml_dtypes, name)
    largest = float(ml_dtypes.finfo(dt).max)
    codes = np.arange(2 ** (1 + e + m), dtype=np.uint8)  # a sub-byte type's code is in the low bits
    want = codes.view(dt).astype(np.float64)
    got = np.array([decode_bits_ref(int(c), e, m, specials, largest) for c in codes])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok]) and np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


def test_decode_reference_on_wide_formats_and_other_biases():
    """fp16 and bf16 (IEEE) by numpy and ml_dtypes on every seventh code; the same layouts with another
    bias are the same values times a power of two; an fn format is IEEE's below the top binade."""
    import ml_dtypes

    from nbhelpers.answer_keys.ch01 import decode_bits_ref, sheet_bias, sheet_largest

    for dt, e, m in [(np.float16, 5, 10), (ml_dtypes.bfloat16, 8, 7)]:
        largest = float(np.finfo(dt).max) if dt is np.float16 else float(ml_dtypes.finfo(dt).max)
        codes = np.arange(2**16, dtype=np.uint16)[::7]
        with np.errstate(invalid="ignore"):  # the NaN codes
            want = codes.view(dt).astype(np.float64)
        got = np.array([decode_bits_ref(int(c), e, m, "ieee", largest) for c in codes])
        ok = ~np.isnan(want)
        assert np.array_equal(np.isnan(got), ~ok)
        assert np.array_equal(got[ok], want[ok]) and np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))
        for shift in (-3, 2):
            other = sheet_largest(e, m, "ieee", 2 ** (e - 1) - 1 + shift)
            assert sheet_bias(e, m, "ieee", other) == 2 ** (e - 1) - 1 + shift
            moved = np.array([decode_bits_ref(int(c), e, m, "ieee", other) for c in codes[ok]])
            assert np.array_equal(moved, want[ok] * 2.0**-shift)
        below_top = ((codes >> m) & (2**e - 1)) != 2**e - 1
        fn_largest = sheet_largest(e, m, "fn", 2 ** (e - 1) - 1)
        got_fn = np.array([decode_bits_ref(int(c), e, m, "fn", fn_largest) for c in codes[below_top]])
        assert np.array_equal(got_fn, want[below_top])
    for bad in [
        (0, 4, 3, "ieee", 447.0),
        (0, 4, 3, "fnu", 448.0),
        (256, 4, 3, "fn", 448.0),
        (0, 1, 3, "fn", 1.0),
        (0, 4, 0, "fn", 256.0),
    ]:
        with pytest.raises(ValueError):
            decode_bits_ref(*bad)


@pytest.mark.parametrize("e,m", [(3, 2), (2, 3), (4, 3), (2, 1)])
def test_rounding_interval_reference_against_the_exact_rounding(e, m):
    """For every value v of small formats: lo and hi round to v, and the float64 just outside
    them does not, by round_to_ref (a search over the enumerated grid, not round_to)."""
    from nbhelpers.answer_keys.ch01 import rounding_interval_ref
    from nbhelpers.rounding import round_to_ref

    f = FloatFormat.custom(e, m)
    for v in finite_values(f):
        lo, hi = rounding_interval_ref(float(v), e, m)
        inside = round_to_ref(np.array([lo, hi]), f)
        outside = round_to_ref(np.array([np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)]), f)
        assert np.all(inside == v), (v, lo, hi)
        assert np.all(outside != v), (v, lo, hi)


def _count_by_bits(a: float, b: float, dt) -> int:
    """Values of numpy's float type dt in [a, b], from their bit patterns, which are ordered like
    the values (+-0 share key 0)."""
    big = float(np.finfo(dt).max)
    if a > b or a > big or b < -big:
        return 0
    with np.errstate(over="ignore"):
        lo, hi = dt(max(a, -big)), dt(min(b, big))  # nearest; step inward where it rounded outward
    if float(lo) < a:
        lo = np.nextafter(lo, dt(np.inf))
    if float(hi) > b:
        hi = np.nextafter(hi, dt(-np.inf))
    if float(lo) > float(hi):
        return 0
    ibits = {2: np.int16, 4: np.int32, 8: np.int64}[np.dtype(dt).itemsize]

    def key(x) -> int:
        k = int(dt(abs(x)).view(ibits))
        return -k if x < 0 else k

    return key(hi) - key(lo) + 1


def _interval_ends(v: np.ndarray, rng: np.random.Generator, n: int = 300) -> np.ndarray:
    """Ends on values of a format, halfway and a hair off them, zeros, infinities, past the top."""
    picked = v[rng.integers(0, v.size, n)]
    with np.errstate(over="ignore"):  # past float64's top: inf, an end like any other
        off = [picked * (1 + 2.0**-30), rng.uniform(-2, 2, n) * v[-1], picked[:-1] / 2 + picked[1:] / 2]
    return np.concatenate([picked, *off, [0.0, -0.0, np.inf, -np.inf]])


def test_count_reference_against_a_listing_of_every_value():
    """The reference (float64 codes cut to the format's width, never a list) against listing
    every value, for every IEEE-style format of up to 12 bits and for fp16 and bf16."""
    from nbhelpers.answer_keys.ch01 import count_values_ref

    rng = np.random.default_rng(1)
    shapes = [(e, m) for e in range(2, 9) for m in range(1, 10) if 1 + e + m <= 12] + [(5, 10), (8, 7)]
    for e, m in shapes:
        v = finite_values(FloatFormat.custom(e, m))
        ends = _interval_ends(v, rng, 60)
        for _ in range(150):
            a, b = (float(x) for x in rng.choice(ends, 2))
            want = int(max(0, np.searchsorted(v, b, side="right") - np.searchsorted(v, a, side="left")))
            assert count_values_ref(a, b, e, m) == want, (a, b, e, m)


@pytest.mark.parametrize("dt,e,m", [(np.float16, 5, 10), (np.float32, 8, 23), (np.float64, 11, 52)])
def test_count_reference_against_numpys_bit_patterns(dt, e, m):
    """fp16, fp32 and float64 (e11m52, a format no list holds) by numpy's bit patterns, on
    intervals with ends on, between and beyond the values, across the subnormals and the top."""
    from nbhelpers.answer_keys.ch01 import count_values_ref

    rng = np.random.default_rng(2)
    info = np.finfo(dt)
    # values of dt from bit patterns drawn over every exponent, and the values next to them
    ibits = {2: np.int16, 4: np.int32, 8: np.int64}[np.dtype(dt).itemsize]
    top = int(np.array(info.max, dtype=dt).view(ibits))
    keys = rng.integers(0, top + 1, 400, dtype=ibits)
    v = np.sort(keys.view(dt).astype(np.float64))
    ends = _interval_ends(v, rng)
    with np.errstate(over="ignore"):
        ends = np.concatenate([ends, -ends, [float(info.max), float(info.smallest_subnormal), float(info.tiny)]])
    for _ in range(2000):
        a, b = (float(x) for x in rng.choice(ends, 2))
        assert count_values_ref(a, b, e, m) == _count_by_bits(a, b, dt), (a, b)
    assert count_values_ref(-np.inf, np.inf, 8, 23) == 2**32 - 2**24 - 1  # all but inf/NaN and -0
    assert count_values_ref(1.0, 2.0, 8, 23) == 2**23 + 1
    assert count_values_ref(-np.inf, np.inf, 11, 52) == 2**64 - 2**53 - 1


def test_count_reference_adds_up_on_formats_too_wide_to_list():
    """On wide formats: [a, b] split at any point c counts the same (c, when it is a value, is in
    both parts), a binade holds 2**man_bits values and the subnormals 2**man_bits - 1 on a side."""
    from nbhelpers.answer_keys.ch01 import count_values_ref

    rng = np.random.default_rng(3)
    for _ in range(300):
        e, m = int(rng.integers(2, 12)), int(rng.integers(17, 53))
        bias = 2 ** (e - 1) - 1
        k = int(rng.integers(1 - bias, 2**e - 1 - bias))
        assert count_values_ref(2.0**k, np.nextafter(2.0 ** (k + 1), 0), e, m) == 2**m
        assert count_values_ref(np.nextafter(0.0, 1), np.nextafter(2.0 ** (1 - bias), 0), e, m) == 2**m - 1
        a, c, b = sorted(float(x) for x in rng.choice([-1, 1], 3) * 2.0 ** rng.uniform(-bias - m, bias, 3))
        both = count_values_ref(c, c, e, m)
        assert count_values_ref(a, b, e, m) == count_values_ref(a, c, e, m) + count_values_ref(c, b, e, m) - both


def test_absorbing_reference_against_a_search_over_every_value():
    """The binade search against absorption_threshold, which tries every value of the format
    with round_to: every positive c of every format of up to 10 bits, and some hundreds of c on
    each 16-bit format."""
    from nbhelpers.answer_keys.ch01 import smallest_absorbing_ref
    from nbhelpers.rounding import absorption_threshold

    rng = np.random.default_rng(4)
    shapes = [(e, m) for e in range(2, 9) for m in range(1, 8) if 1 + e + m <= 10] + [(5, 10), (8, 7), (4, 11)]
    for e, m in shapes:
        f = FloatFormat.custom(e, m)
        v = finite_values(f, nonnegative=True)[1:]
        cs = v if v.size <= 512 else np.concatenate([v[:32], v[rng.integers(0, v.size, 100)], v[-32:]])
        for c in cs:
            assert smallest_absorbing_ref(float(c), e, m) == absorption_threshold(f, float(c)), (c, e, m)


def test_absorbing_reference_by_exact_rounding_on_formats_too_wide_to_search():
    """On wide formats, with an exact round to nearest even in Fractions: the answer x absorbs c,
    and the value below x does not (nor does anything smaller: every binade below has a smaller
    gap); inf only when the largest power of two does not absorb c either."""
    from nbhelpers.answer_keys.ch01 import smallest_absorbing_ref

    def rne(y: Fraction, e: int, m: int) -> Fraction:
        bias = 2 ** (e - 1) - 1
        k = max(y.numerator.bit_length() - y.denominator.bit_length(), 1 - bias)
        while Fraction(2) ** k > y:
            k -= 1
        k = max(k, 1 - bias)
        gap = Fraction(2) ** (k - m)
        q, r = divmod(y, gap)
        q += 1 if 2 * r > gap or (2 * r == gap and q % 2 == 1) else 0
        return q * gap  # overflow does not arise below the largest power of two plus its half gap

    rng = np.random.default_rng(5)
    for _ in range(300):
        e, m = int(rng.integers(2, 12)), int(rng.integers(17, 53))
        bias = 2 ** (e - 1) - 1
        E, M = int(rng.integers(0, 2**e - 1)), int(rng.choice([0, 1, int(rng.integers(0, 2**m))]))
        if E == M == 0:
            M = 1
        c = Fraction(2**m + M if E else M) * Fraction(2) ** (max(E, 1) - bias - m)
        x = smallest_absorbing_ref(float(c), e, m)
        if x == np.inf:
            top = Fraction(2) ** (2**e - 2 - bias)
            assert rne(top + c, e, m) != top, (c, e, m)
            continue
        x = Fraction(x)
        assert rne(x + c, e, m) == x, (c, e, m, x)
        below = x - Fraction(2) ** (x.numerator.bit_length() - x.denominator.bit_length() - 1 - m)
        if below > 0:
            assert rne(below + c, e, m) != below, (c, e, m, x)


def test_absorbing_reference_is_exact_for_tiny_c():
    """For a tiny c against a large x: the reference agrees with a direct check of the tie and
    of the binade below, and with the exact rounding of the enumerated grid."""
    from nbhelpers.answer_keys.ch01 import smallest_absorbing_ref
    from nbhelpers.rounding import round_to_ref

    for c, e, m in [(2.0**-133, 8, 7), (3 * 2.0**-133, 8, 7), (5 * 2.0**-24, 5, 10), (0.75, 4, 3)]:
        f = FloatFormat.custom(e, m)
        x = smallest_absorbing_ref(c, e, m)
        gap = Fraction(2) ** (int(np.frexp(x)[1]) - 1 - m)  # the gap above x, a power of two
        assert Fraction(c) <= gap / 2  # x absorbs c (at a tie: x, a power of two, is even)
        assert Fraction(c) > gap / 4  # the binade below does not
        assert float(round_to_ref(x + c, f)) == x


def _is_value(x: float, e: int, m: int) -> bool:
    """Whether x > 0 is a finite value of (e, m): a whole number of its binade's spacings."""
    bias = 2 ** (e - 1) - 1
    k = max(int(np.frexp(x)[1]) - 1, 1 - bias)
    return k <= 2**e - 2 - bias and (Fraction(x) / Fraction(2) ** (k - m)).denominator == 1


def test_absorbing_cases_give_a_positive_value_of_the_format_and_the_solution_passes():
    """The spec promises c is a positive value of the format: every case of 300 seeds keeps that
    promise (a power of two drawn near the top of a format with few binades, such as e2m6, once
    fell below its smallest subnormal, where the formula of a right answer does not apply), and
    the solution passes with 40 random seeds."""
    for seed in range(300):
        for case in cases_for("ex01.smallest_absorbing", seed):
            c, e, m = case.args
            assert c > 0 and _is_value(c, e, m), (seed, case.args)
    fn = SolutionNotebook(SPEC.solution, SPEC.namespace).functions()["smallest_absorbing"]
    rng = np.random.default_rng(2024)
    for seed in rng.integers(10**11, 10**12, size=40):
        result = run_check("ex01.smallest_absorbing", fn, seed=int(seed))
        assert result.passed, str(result)


def test_count_and_absorbing_cases_reach_formats_too_wide_to_list():
    """With any seed, the fixed cases and the random ones alone ask about formats of 2**40 values
    and more (no list of values, no search over them, finishes), with counts past 2**53."""
    for seed in SEEDS:
        for ex in ("ex01.count_values", "ex01.smallest_absorbing"):
            cases = cases_for(ex, seed)
            for part in (cases, [c for c in cases if not c.label]):
                wide = [c for c in part if 1 + c.args[-2] + c.args[-1] >= 40]
                assert len(wide) >= 10, (ex, seed)
        from nbhelpers.answer_keys.ch01 import count_values_ref

        random = [c for c in cases_for("ex01.count_values", seed) if not c.label]
        assert sum(count_values_ref(*c.args) > 2**53 for c in random) >= 10


def test_decode_cases_have_zero_and_negative_biases():
    """Biases of zero and below among the fixed cases and, with any seed, among the random ones."""
    from nbhelpers.answer_keys.ch01 import sheet_bias

    for seed in SEEDS:
        cases = cases_for("ex01.decode_bits", seed)
        for part in (cases, [c for c in cases if not c.label]):
            biases = [sheet_bias(*c.args[1:]) for c in part]
            assert sum(b == 0 for b in biases) >= 3 and sum(b < 0 for b in biases) >= 10, seed


def test_the_chi_square_tail_against_closed_forms_and_a_simulation():
    """_chi2_cdf: 1 - exp(-x/2) for two degrees of freedom, erf for one, and a simulation of 40."""
    import math

    from nbhelpers.answer_keys.ch01 import _chi2_cdf

    for x in (0.01, 1.0, 3.0, 9.0):
        assert _chi2_cdf(x, 2) == pytest.approx(1 - math.exp(-x / 2), rel=1e-12)
        assert _chi2_cdf(x, 1) == pytest.approx(math.erf(math.sqrt(x / 2)), rel=1e-12)
    draws = np.random.default_rng(0).chisquare(40, 400_000)
    for x in (25.0, 40.0, 55.0):
        assert _chi2_cdf(x, 40) == pytest.approx(np.mean(draws <= x), abs=3e-3)
    assert _chi2_cdf(0.0, 5) == 0.0 and _chi2_cdf(1.0, 48) < 1e-30


def test_across_the_cases_an_answer_must_use_its_generator_and_be_random():
    """stochastic_compare_all, on the real cases: the solution passes with many seeds; answers
    that pass every case alone fail it together: one that draws from a generator of its own
    (seeded the same every call, or from numpy's global state), and one with no randomness at all
    (evenly spread numbers, shuffled). Each draws its x.size numbers from rng all the same, so the
    check of the generator's state after the call does not catch them first."""
    from nbhelpers.answer_keys.ch01 import SR_ALL_TAIL

    fn = SolutionNotebook(SPEC.solution, SPEC.namespace).functions()["round_stochastic"]

    def parts(x, e, m):
        x = np.asarray(x, dtype=np.float64)
        a = np.abs(x)
        k = np.maximum(np.frexp(a)[1] - 1, 2 - 2 ** (e - 1))
        q = np.ldexp(1.0, k - m)
        lower = np.floor(a / q)
        return x, q, lower, a / q - lower

    def even(x, e, m, rng):
        x, q, lower, frac = parts(x, e, m)
        shuffle = np.random.Generator(type(rng.bit_generator)())  # rng's copy, by ex01's tools
        shuffle.bit_generator.state = rng.bit_generator.state
        rng.random(x.size)
        u = shuffle.permutation((np.arange(x.size) + 0.5) / x.size).reshape(x.shape)
        return np.copysign((lower + (u < frac)) * q, x)

    def drawn(answer):  # the numbers rng.random(x.shape) would give, drawn and not used
        def f(x, e, m, rng):
            rng.random(np.shape(x))
            return answer(x, e, m, rng)

        return f

    wrong = {
        "a generator of its own": drawn(lambda x, e, m, rng: fn(x, e, m, np.random.default_rng(0))),
        "numpy's global generator": drawn(
            lambda x, e, m, rng: fn(x, e, m, np.random.default_rng(np.random.randint(2**31)))
        ),
        "no randomness": even,
    }
    for seed in (0, SPEC.hidden_seed):
        for name, w in wrong.items():
            result = run_check("ex01.round_stochastic", w, seed=seed)
            assert not result.passed and "across the cases" in str(result), (name, str(result))
    assert SR_ALL_TAIL == 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_random_cases_hold_enough_ties_to_test_independence(seed):
    """The later half of the cases (random) holds ties with at least five generator states: an
    answer whose elements choose in antithetic pairs puts each of their counts on n/2, which
    independent choices do for all five with probability below 0.008**5, under the test's tail."""
    from nbhelpers.answer_keys.ch01 import SR_ALL_TAIL, _half_abs_pmf

    cases = cases_for("ex01.round_stochastic", seed)
    states = set()
    p_exact = 1.0
    for c in cases[len(cases) // 2 :]:
        t = round_stochastic_ref(*c.args)
        if np.all(t.p == 0.5) and t.state not in states:
            states.add(t.state)
            p_exact *= float(_half_abs_pmf(t.x.size, 0)[0])
    assert len(states) >= 5 and p_exact < SR_ALL_TAIL / 8


def test_ties_independence_rejects_paired_and_reused_numbers():
    """The test of the tie cases (on eight tie cases alone, where the chi-square test of
    stochastic_compare_all would also catch the paired ones): independent choices pass; numbers
    paired as u and 1 - u (halves, neighbours or shuffled), reused or mirrored fail, each with
    its reason."""
    from nbhelpers.answer_keys.ch01 import _ties_independent

    def tie_case(seed):
        return round_stochastic_ref(np.full(SR_N, 1 + 2.0**-8), 8, 7, np.random.default_rng(seed))

    targets = [tie_case(s) for s in range(8)]
    gen = np.random.default_rng(99)

    def judge(draw):
        got = [np.where(draw() < 0.5, t.upper, t.lower) for t in targets]
        return _ties_independent(targets, got)

    h = lambda: gen.random(SR_N // 2)  # noqa: E731
    assert judge(lambda: gen.random(SR_N)) is None
    assert "u and 1 - u" in judge(lambda: np.concatenate([v := h(), 1 - v]))
    assert "u and 1 - u" in judge(lambda: np.stack([v := h(), 1 - v], axis=-1).ravel())
    assert "u and 1 - u" in judge(lambda: gen.permutation(np.concatenate([v := h(), 1 - v])))
    assert "i and i + 5000" in judge(lambda: np.concatenate([v := h(), v]))
    assert "i and n - 1 - i" in judge(lambda: np.concatenate([v := h(), v[::-1]]))

    def copy_back(v, d, every):  # every `every`-th element takes the number d places before
        i = np.arange(d, v.size, every)
        v[i] = v[i - d]
        return v

    assert "i and i + 3 " in judge(lambda: copy_back(gen.random(SR_N), 3, 4))
    assert "i and i + 1234 " in judge(lambda: copy_back(gen.random(SR_N), 1234, 4))
    assert "i and i + 4999 " in judge(lambda: copy_back(gen.random(SR_N), 4999, 4))


def test_pairs_of_a_tie_case_are_counted_at_every_distance_within_the_budget():
    """The sums of s_i s_j of _pair_agreements (by FFT) against direct sums at every lag up to
    n/2 and for the mirrored pairs, on odd and even n; the bound on the largest standard score
    spends SR_ALL_TAIL / 4 over all the tests by Hoeffding's bound and Bonferroni."""
    import math

    from nbhelpers.answer_keys.ch01 import SR_ALL_TAIL, _pair_agreements, _pair_z_bound

    gen = np.random.default_rng(5)
    for n in (2, 3, 10, 257, 1000):
        up = gen.random(n) < 0.5
        s = np.where(up, 1, -1)
        sums, pairs, lags = _pair_agreements(up)
        assert list(lags) == [*range(1, n // 2 + 1), 0]
        assert list(pairs) == [n - d for d in range(1, n // 2 + 1)] + [n // 2]
        direct = [int(s[:-d] @ s[d:]) for d in range(1, n // 2 + 1)] + [int(s[: n // 2] @ s[::-1][: n // 2])]
        assert sums.tolist() == direct
    for tests in (1, 11 * 5001):
        b = _pair_z_bound(tests)
        assert 2 * tests * math.exp(-(b**2) / 2) == pytest.approx(SR_ALL_TAIL / 4, rel=1e-9)
