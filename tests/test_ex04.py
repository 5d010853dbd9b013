"""Chapter 04 exercises: the solutions pass with any seed, deliberately wrong implementations
fail, memorised answers fail with another seed. (Whole-notebook scores: test_exercise_notebooks.py.)"""
import math
import re

import ml_dtypes
import numpy as np
import pytest

from nbhelpers.checks import cases_for, exercises_of, get_exercise, run_check
from solution_tools import SolutionNotebook


def _namespace() -> dict:
    return {"math": math, "np": np, "ml_dtypes": ml_dtypes}


SOLUTION = SolutionNotebook("ex04_master_weights.ipynb", _namespace)
solution_functions = SOLUTION.functions
mutate = SOLUTION.mutated


@pytest.mark.parametrize("seed", [0, 4321])
def test_solutions_pass_in_process_with_any_seed(seed):
    ns = solution_functions()
    exercises = exercises_of(4)
    assert [e.name for e in exercises] == ["master_weight_step", "kahan_step"]
    for ex in exercises:
        result = run_check(ex, ns[ex.name], seed=seed)
        assert result.passed, str(result)


WRONG = [
    # the product in float64 (lr not rounded to float32, product not rounded)
    ("master_weight_step", "np.float32(lr) * grad", "lr * grad.astype(np.float64)"),
    # the product rounded, but lr used at float64 precision
    ("master_weight_step", "np.float32(lr) * grad", "(lr * grad.astype(np.float64)).astype(np.float32)"),
    # bf16 copy by truncation (upper 16 bits) instead of round to nearest
    ("master_weight_step", "new_master.astype(ml_dtypes.bfloat16).astype(np.float32)",
     "(new_master.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)"),
    # the copy made from the old master (one step behind)
    ("master_weight_step", "weights = new_master.astype", "weights = master.astype"),
    # the master itself kept in bf16: no master at all
    ("master_weight_step", "return new_master, weights", "return weights, weights"),
    # the compensation added with the wrong sign
    ("kahan_step", "y = delta - c", "y = delta + c"),
    # no compensation carried: c forgotten
    ("kahan_step", "return s, c_new", "return s, np.zeros_like(c_new)"),
    # the compensation kept in float32 instead of bf16
    ("kahan_step", "c_new = ((s - w) - y).astype(ml_dtypes.bfloat16).astype(np.float32)", "c_new = (s - w) - y"),
    # the loss computed the other way round
    ("kahan_step", "((s - w) - y)", "(y - (s - w))"),
    # plain round-to-nearest update, compensation ignored
    ("kahan_step", "y = delta - c", "y = delta"),
]


@pytest.mark.parametrize("name,old,new", WRONG, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_wrong_implementations_fail(name, old, new):
    result = run_check(f"ex04.{name}", mutate(name, old, new))
    assert not result.passed and result.points == 0
    assert result.mismatches, "a failing check lists the first mismatching inputs"
    assert re.search(rf"{name}\(", result.mismatches[0])


def test_hard_coded_public_cases_fail_with_another_seed():
    ex = get_exercise("ex04.kahan_step")
    ns = solution_functions()
    answers = {repr(c.args): ns["kahan_step"](*c.args) for c in cases_for(ex, 0)}

    def memorised(w, c, delta):  # a "solution" that only knows the public cases
        return answers.get(repr((w, c, delta)), (w, c))

    assert run_check(ex, memorised, seed=0).passed
    assert not run_check(ex, memorised, seed=99).passed


def test_edge_cases_hold_what_their_labels_say():
    ex = get_exercise("ex04.master_weight_step")
    case = next(c for c in cases_for(ex, 0) if "copy stays at 1" in c.label)
    new_master, weights = ex.reference(*case.args)
    assert new_master[0] != 1.0 and weights[0] == 1.0
    ex = get_exercise("ex04.kahan_step")
    case = next(c for c in cases_for(ex, 0) if "kept in c" in c.label)
    s, c = ex.reference(*case.args)
    assert s[0] == 1.0 and c[0] < 0
