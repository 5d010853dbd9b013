"""Chapter 01 exercises: the solutions pass with any seed, deliberately wrong implementations
fail, memorised answers fail with another seed. (Whole-notebook scores: test_exercise_notebooks.py.)"""
import math
import re

import pytest

from nbhelpers.checks import cases_for, exercises_of, get_exercise, run_check
from solution_tools import SolutionNotebook

SOLUTION = SolutionNotebook("ex01_float_formats.ipynb", lambda: {"math": math})
solution_functions = SOLUTION.functions
mutate = SOLUTION.mutated


@pytest.mark.parametrize("seed", [0, 12345])
def test_solutions_pass_in_process_with_any_seed(seed):
    ns = solution_functions()
    for ex in exercises_of(1):
        result = run_check(ex, ns[ex.name], seed=seed)
        assert result.passed, str(result)


WRONG = [
    # forgets that subnormals have no implicit leading 1
    ("decode_bits", "if E == 0:", "if False:"),
    # NaN codes read as infinities
    ("decode_bits", "sign * math.inf if M == 0 else math.nan", "sign * math.inf"),
    # ties away from zero instead of to even
    ("round_nearest_even", "round(abs(x) / q)", "math.floor(abs(x) / q + 0.5)"),
    # no subnormal clamp: the spacing keeps shrinking below the normal range
    ("round_nearest_even", "max(math.frexp(abs(x))[1] - 1, emin)", "math.frexp(abs(x))[1] - 1"),
    # overflow saturates instead of going to inf
    ("round_nearest_even", "r = math.inf", "r = largest"),
    # loses the sign of zero
    ("round_nearest_even", "return math.copysign(r, x)", "return math.copysign(r, x) + 0.0"),
    # spacing of the binade below at powers of two
    ("ulp_at", "math.frexp(abs(x))[1] - 1 if", "math.frexp(abs(x) * 0.999)[1] - 1 if"),
    # off by one binade
    ("smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** man_bits"),
]


@pytest.mark.parametrize("name,old,new", WRONG, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_wrong_implementations_fail(name, old, new):
    result = run_check(f"ex01.{name}", mutate(name, old, new))
    assert not result.passed and result.points == 0
    assert result.mismatches, "a failing check lists the first mismatching inputs"
    assert re.search(rf"{name}\(", result.mismatches[0])


def test_hard_coded_public_cases_fail_with_another_seed():
    ex = get_exercise("ex01.round_nearest_even")
    ns = solution_functions()
    answers = {repr(c.args): ns["round_nearest_even"](*c.args) for c in cases_for(ex, 0)}

    def memorised(x, e, m):  # a "solution" that only knows the public cases
        return answers.get(repr((x, e, m)), 0.0)

    assert run_check(ex, memorised, seed=0).passed
    assert not run_check(ex, memorised, seed=2024).passed
