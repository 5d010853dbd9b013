"""Chapter 05 exercises: the solutions pass with any seed, deliberately wrong implementations
fail, memorised answers fail with another seed. (Whole-notebook scores: test_exercise_notebooks.py.)"""
import math
import re

import numpy as np
import pytest

from nbhelpers.checks import cases_for, exercises_of, get_exercise, run_check
from solution_tools import SolutionNotebook
from nbhelpers.mixed_precision import gradscaler_trajectory


def _namespace() -> dict:
    return {"math": math, "np": np}


SOLUTION = SolutionNotebook("ex05_loss_scaling.ipynb", _namespace)
solution_functions = SOLUTION.functions
mutate = SOLUTION.mutated


@pytest.mark.parametrize("seed", [0, 2718])
def test_solutions_pass_in_process_with_any_seed(seed):
    ns = solution_functions()
    exercises = exercises_of(5)
    assert [e.name for e in exercises] == ["scale_trajectory", "underflow_fraction"]
    for ex in exercises:
        result = run_check(ex, ns[ex.name], seed=seed)
        assert result.passed, str(result)


def test_solution_scaler_equals_gradscaler_on_hidden_sequences():
    """The exercise's reference is nbhelpers' scaler; here the student's solution meets GradScaler
    itself on some of the hidden random sequences (torch.amp.GradScaler("cpu"))."""
    ns = solution_functions()
    cases = [c for c in cases_for("ex05.scale_trajectory", 7) if not c.label][:15]
    for c in cases:
        seq, init, growth, backoff, interval = c.args
        if not 2.0**-60 < init < 2.0**60:
            continue  # GradScaler's unscale (grad * 1/scale) needs a moderate scale
        expected, _ = gradscaler_trajectory(seq, init, growth, backoff, interval)
        assert ns["scale_trajectory"](seq, init, growth, backoff, interval) == expected


WRONG = [
    # the scale kept in float64: products not rounded to float32
    ("scale_trajectory", "scale = float(np.float32(scale * backoff_factor))", "scale = scale * backoff_factor"),
    ("scale_trajectory", "grown = float(np.float32(scale * growth_factor))", "grown = scale * growth_factor"),
    # init_scale not rounded to float32
    ("scale_trajectory", "scale = float(np.float32(init_scale))", "scale = float(init_scale)"),
    # no overflow guard: the scale becomes inf
    ("scale_trajectory", "if math.isfinite(grown):", "if True:"),
    # an inf step does not reset the count of good steps
    ("scale_trajectory", "                good = 0\n            else:", "                pass\n            else:"),
    # off by one: grows one step late
    ("scale_trajectory", "if good == growth_interval:", "if good > growth_interval:"),
    # the count is not reset after growing (grows at every step after the first interval)
    ("scale_trajectory", "                        scale = grown\n                    good = 0",
     "                        scale = grown"),
    # the tie at half the smallest subnormal counted as surviving
    ("underflow_fraction", "<= smallest_subnormal / 2", "< smallest_subnormal / 2"),
    # zeros counted in the denominator
    ("underflow_fraction", "return flushed / n", "return flushed / x.size"),
    # everything below the smallest normal counted as lost (subnormals forgotten)
    ("underflow_fraction", "smallest_subnormal = 2.0 ** (1 - bias - man_bits)", "smallest_subnormal = 2.0 ** (2 - bias)"),
    # threshold at the smallest subnormal instead of half of it
    ("underflow_fraction", "<= smallest_subnormal / 2", "< smallest_subnormal"),
]


@pytest.mark.parametrize("name,old,new", WRONG, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_wrong_implementations_fail(name, old, new):
    result = run_check(f"ex05.{name}", mutate(name, old, new))
    assert not result.passed and result.points == 0
    assert result.mismatches, "a failing check lists the first mismatching inputs"
    assert re.search(rf"{name}\(", result.mismatches[0])


def test_hard_coded_public_cases_fail_with_another_seed():
    ex = get_exercise("ex05.scale_trajectory")
    ns = solution_functions()
    answers = {repr(c.args): ns["scale_trajectory"](*c.args) for c in cases_for(ex, 0)}

    def memorised(*args):
        return answers.get(repr(args), [65536.0] * len(args[0]))

    assert run_check(ex, memorised, seed=0).passed
    assert not run_check(ex, memorised, seed=11).passed
