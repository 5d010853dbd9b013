"""Chapter 02 exercises: the solutions pass with any seed, deliberately wrong implementations
fail, memorised answers fail with another seed. (Whole-notebook scores: test_exercise_notebooks.py.)"""
import math
import re

import numpy as np
import pytest

from nbhelpers.checks import cases_for, exercises_of, get_exercise, run_check
from solution_tools import SolutionNotebook
from nbhelpers.rounding import round_to


def namespace() -> dict:
    return {"math": math, "np": np, "round_to": round_to}


SOLUTION = SolutionNotebook("ex02_accumulation.ipynb", namespace)
solution_functions = SOLUTION.functions
mutate = SOLUTION.mutated


def test_chapter_has_the_four_exercises_worth_15_points():
    exs = exercises_of(2)
    assert [e.name for e in exs] == ["kahan_sum", "pairwise_sum", "dot_product", "stall_length"]
    assert sum(e.points for e in exs) == 15


@pytest.mark.parametrize("seed", [0, 12345])
def test_solutions_pass_in_process_with_any_seed(seed):
    ns = solution_functions()
    for ex in exercises_of(2):
        result = run_check(ex, ns[ex.name], seed=seed)
        assert result.passed, str(result)


WRONG = [
    # plain sequential sum: the compensation is never used
    ("kahan_sum", "y = float(round_to(xk - c, acc))", "y = xk"),
    # y kept unrounded (float64): the compensation is applied at higher precision
    ("kahan_sum", "y = float(round_to(xk - c, acc))", "y = xk - c"),
    # the inner difference t - s not rounded before subtracting y
    ("kahan_sum", "float(round_to(t - s, acc)) - y", "(t - s) - y"),
    # compensation added with the wrong sign
    ("kahan_sum", "round_to(xk - c, acc)", "round_to(xk + c, acc)"),
    # returns the float64 value s - c (not a value of acc) instead of s
    ("kahan_sum", "    return s\n", "    return s - c\n"),
    # splits in the middle instead of at the largest power of two below n
    ("pairwise_sum", "h = 1 << ((n - 1).bit_length() - 1)", "h = n // 2"),
    # adds the halves in float64 and never rounds
    ("pairwise_sum", "float(round_to(pairwise_sum(x[:h], acc) + pairwise_sum(x[h:], acc), acc))",
     "pairwise_sum(x[:h], acc) + pairwise_sum(x[h:], acc)"),
    # the power of two on the right: x[:n-h] + x[n-h:]
    ("pairwise_sum", "h = 1 << ((n - 1).bit_length() - 1)", "h = n - (1 << ((n - 1).bit_length() - 1))"),
    # inputs not rounded to in_fmt
    ("dot_product", "round_to(np.asarray(a, dtype=float), in_fmt) * round_to(np.asarray(b, dtype=float), in_fmt)",
     "np.asarray(a, dtype=float) * np.asarray(b, dtype=float)"),
    # accumulates in float64 and rounds once at the end
    ("dot_product", "s = float(round_to(s + pk, acc))", "s = s + pk"),
    # products rounded to the accumulator format before adding
    ("dot_product", "round_to(s + pk, acc)", "round_to(s + float(round_to(pk, acc)), acc)"),
    # off by one: counts the first lost term too
    ("stall_length", "return k\n", "return k + 1\n"),
    # returns where the sum stalls instead of how many terms it took
    ("stall_length", "return k\n", "return int(s)\n"),
    # rounds toward zero instead of to nearest even
    ("stall_length", "t = float(round_to(s + value, acc))", "t = float(round_to(s + value, acc, 'toward_zero'))"),
]


@pytest.mark.parametrize("name,old,new", WRONG, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_wrong_implementations_fail(name, old, new):
    result = run_check(f"ex02.{name}", mutate(name, old, new))
    assert not result.passed and result.points == 0
    assert result.mismatches, "a failing check lists the first mismatching inputs"
    assert re.search(rf"{name}\(", result.mismatches[0])


def test_hard_coded_public_cases_fail_with_another_seed():
    ex = get_exercise("ex02.kahan_sum")
    ns = solution_functions()
    answers = {repr(c.args): ns["kahan_sum"](*c.args) for c in cases_for(ex, 0)}

    def memorised(x, acc):  # a "solution" that only knows the public cases
        return answers.get(repr((x, acc)), 0.0)

    assert run_check(ex, memorised, seed=0).passed
    assert not run_check(ex, memorised, seed=2024).passed


def test_cases_keep_every_float64_step_exact():
    """The promise behind bit-exact checks: a correct solution's float64 additions are exact.
    Checked directly for the Kahan cases: every intermediate is an integer multiple of the
    smallest power of two among the terms' last bits, and far below 2**53 of those units."""
    for case in cases_for("ex02.kahan_sum", 0) + cases_for("ex02.pairwise_sum", 3):
        x, acc = case.args
        if len(x) == 0:
            continue
        nz = np.abs(x[x != 0])
        if nz.size == 0:
            continue
        _, ex = np.frexp(nz)
        from nbhelpers.formats import get_format
        q = 2.0 ** (int(ex.min()) - 1 - get_format(acc).man_bits)  # every term is a multiple of q
        assert np.all(np.mod(x, q) == 0)
        assert np.abs(x).sum() / q < 2.0**52
