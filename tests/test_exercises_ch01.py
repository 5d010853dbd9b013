"""Chapter 01's stochastic rounding exercise beyond the table (test_exercises.py): the check's
false-failure rate with exact binomial tails, its neighbours against an enumeration of each
format, what its compare accepts and rejects, and the regions its random cases reach."""

from fractions import Fraction

import numpy as np
import pytest

from exercise_table import CHAPTERS
from helpers import SolutionNotebook
from nbhelpers.checks import cases_for, run_check
from nbhelpers.answer_keys.ch01 import SR_N, SR_Z, round_stochastic_ref, stochastic_compare, stochastic_false_failure
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
    (not its normal approximation): at most 1e-8 per case, 1e-6 per check."""
    total = 0.0
    n_either = 0
    for case in cases_for("ex01.round_stochastic", seed):
        t = round_stochastic_ref(*case.args)
        p = float(t.p[0])
        assert np.all(t.p == p)  # one value repeated
        if p == 0.0:
            continue
        n_either += 1
        band = SR_Z * np.sqrt(SR_N * p * (1 - p))
        tail = binomial_outside(SR_N, p, SR_N * p - band, SR_N * p + band)
        assert tail <= 1e-8, (case.label, p, tail)
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
            a, lo, hi = abs(float(x[0])), abs(float(t.lower[0])), abs(float(t.upper[0]))
            assert float(np.float32(lo)) == lo and float(np.float32(hi)) == hi
            if t.p[0] == 0:
                assert lo == hi == a
            else:
                assert lo < a < hi == float(np.nextafter(np.float32(lo), np.float32(np.inf)))
            continue
        if 1 + e + m > 16:  # all_codes enumerates formats of at most 16 bits
            continue
        v = finite_values(FloatFormat.custom(e, m), nonnegative=True)
        a = abs(float(x[0]))
        lo, hi = abs(float(t.lower[0])), abs(float(t.upper[0]))
        if a in v:
            assert lo == hi == a
            assert t.p[0] == 0
            continue
        i = int(np.searchsorted(v, a))  # v[i - 1] < a < v[i]
        assert (lo, hi) == (v[i - 1], v[i]), case.label
        assert Fraction(float(t.p[0])) == (Fraction(a) - Fraction(lo)) / (Fraction(hi) - Fraction(lo))
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
        p = float(t.p[0])
        seen.add("in the format" if p == 0 else "tie" if p == 0.5 else "eighth" if p in (0.125, 0.875) else "other")
        if p > 0 and abs(x[0]) < f.smallest_normal:
            seen.add("subnormal")
        if x[0] < 0:
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
