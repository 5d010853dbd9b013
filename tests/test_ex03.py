"""Chapter 03 exercises: the solutions pass with any seed, deliberately wrong implementations
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


SOLUTION = SolutionNotebook("ex03_gemm.ipynb", namespace)
solution_functions = SOLUTION.functions
mutate = SOLUTION.mutated


def test_chapter_has_about_fifteen_points():
    exercises = exercises_of(3)
    assert [e.name for e in exercises] == [
        "relative_error", "round_once_and_every_step", "blocked_matmul_fp32", "tensor_core_group"]
    assert sum(e.points for e in exercises) == 15


@pytest.mark.parametrize("seed", [0, 4242])
def test_solutions_pass_in_process_with_any_seed(seed):
    ns = solution_functions()
    for ex in exercises_of(3):
        result = run_check(ex, ns[ex.name], seed=seed)
        assert result.passed, str(result)


WRONG = [
    # the largest element instead of the Frobenius norm
    ("relative_error", "num = math.sqrt(float(np.sum((C - C_ref) ** 2)))", "num = float(np.max(np.abs(C - C_ref)))"),
    # divides by the norm of C instead of C_ref
    ("relative_error", "den = math.sqrt(float(np.sum(C_ref**2)))", "den = math.sqrt(float(np.sum(C**2)))"),
    # no square roots
    ("relative_error", "return num / den", "return (num / den) ** 2"),
    # a zero reference gives 0 whatever C is
    ("relative_error", "return 0.0 if num == 0.0 else math.inf", "return 0.0"),
    # "once": a float64 accumulator instead of fp32 (the probe with the tiny terms last tells)
    ("round_once_and_every_step", "s32 = np.float32(s32 + np.float32(p))", "s32 = np.float64(s32) + p"),
    # "every step": an fp32 accumulator instead of bf16
    ("round_once_and_every_step", 's16 = float(round_to(s16 + p, "bf16"))', "s16 = float(np.float32(s16 + p))"),
    # "every step" truncates instead of rounding to nearest
    ("round_once_and_every_step", 'round_to(s16 + p, "bf16")', 'round_to(s16 + p, "bf16", "toward_zero")'),
    # float64 everywhere
    ("blocked_matmul_fp32", "np.float32", "np.float64"),
    # no blocks: sequential
    ("blocked_matmul_fp32", "for start in range(0, K, block):", "for start in range(0, K, K):"),
    # the partial sum is not reset: each block adds the previous ones again
    ("blocked_matmul_fp32", "        partial = np.zeros((M, N), dtype=np.float32)\n", ""),
    # blocks overlap by one product
    ("blocked_matmul_fp32", "min(start + block, K)", "min(start + block + 1, K)"),
    # floor instead of truncation toward zero (negative terms)
    ("tensor_core_group", "math.trunc(v / q)", "math.floor(v / q)"),
    # rounds the aligned terms to nearest instead of truncating
    ("tensor_core_group", "math.trunc(v / q)", "round(v / q)"),
    # rounds the sum to nearest in fp32 instead of truncating
    ("tensor_core_group", '"toward_zero"', '"nearest_even"'),
    # aligns to the products only, leaving the accumulator out
    ("tensor_core_group", "largest = max(abs(v) for v in values)",
     "largest = max([abs(v) for v in values[1:]] or [abs(values[0])])"),
    # one bit fewer kept
    ("tensor_core_group", "E = math.frexp(largest)[1] - 1", "E = math.frexp(largest)[1]"),
]


@pytest.mark.parametrize("name,old,new", WRONG, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_wrong_implementations_fail(name, old, new):
    result = run_check(f"ex03.{name}", mutate(name, old, new))
    assert not result.passed and result.points == 0
    assert result.mismatches, "a failing check lists the first mismatching inputs"
    assert re.search(rf"{name}\(", result.mismatches[0])


def test_sign_of_zero_is_not_held_against_a_student():
    ns = solution_functions()

    def negative_zero_group(c, products, align_bits=23):  # an exact zero returned as -0.0
        r = ns["tensor_core_group"](c, products, align_bits)
        return -0.0 if r == 0 else r

    assert run_check("ex03.tensor_core_group", negative_zero_group).passed


def test_relative_error_tolerance_accepts_another_summation_order_only():
    ns = solution_functions()

    def by_linalg(C, C_ref):
        C, C_ref = np.asarray(C, dtype=np.float64), np.asarray(C_ref, dtype=np.float64)
        den = np.linalg.norm(C_ref)
        if den == 0:
            return 0.0 if np.linalg.norm(C - C_ref) == 0 else math.inf
        return float(np.linalg.norm((C - C_ref).ravel()[::-1]) / den)

    def slightly_off(C, C_ref):
        return ns["relative_error"](C, C_ref) * (1 + 1e-9)

    assert run_check("ex03.relative_error", by_linalg).passed
    assert not run_check("ex03.relative_error", slightly_off).passed


def test_hard_coded_public_cases_fail_with_another_seed():
    ex = get_exercise("ex03.tensor_core_group")
    ns = solution_functions()
    answers = {repr(c.args): ns["tensor_core_group"](*c.args) for c in cases_for(ex, 0)}

    def memorised(c, products, align_bits=23):  # a "solution" that only knows the public cases
        return answers.get(repr((c, products, align_bits)), answers.get(repr((c, products)), 0.0))

    assert run_check(ex, memorised, seed=0).passed
    assert not run_check(ex, memorised, seed=2024).passed
