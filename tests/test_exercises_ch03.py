"""Chapter 03's exercises beyond the table (test_exercises.py): what the comparisons forgive
(the sign of an exact zero, a norm summed in another order) and what they do not."""
import math

import numpy as np

from exercise_table import CHAPTERS
from helpers import SolutionNotebook
from nbhelpers.checks import run_check

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 3)


def solution_functions() -> dict:
    return SolutionNotebook(SPEC.solution, SPEC.namespace).functions()


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
