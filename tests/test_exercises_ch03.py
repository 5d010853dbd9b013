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


# ---- ex03.fool_the_tensor_core: a construction, judged by its property

GPUS = ("V100", "A100", "H100")


def test_fool_the_tensor_core_cases_cover_every_established_gpu():
    from nbhelpers.checks import cases_for
    from nbhelpers.tensor_cores import TENSOR_CORES

    assert set(GPUS) == {gpu for gpu, spec in TENSOR_CORES.items() if spec.established}
    for seed in (0, SPEC.hidden_seed, 7):
        gpus = [case.args[0] for case in cases_for("ex03.fool_the_tensor_core", seed)]
        assert all(gpus.count(gpu) >= 5 for gpu in GPUS), gpus


def test_fool_the_tensor_core_examples_have_the_property():
    """The course's example answers every case of several seeds (every case is solvable), and
    the model really is off: it returns 0 where the exact dot product is ``exact``."""
    from nbhelpers.checks import cases_for
    from nbhelpers.answer_keys.ch03 import _fool_compare, fool_the_tensor_core_ref
    from nbhelpers.tensor_cores import TENSOR_CORES

    for seed in (0, SPEC.hidden_seed, 1, 2, 3):
        for case in cases_for("ex03.fool_the_tensor_core", seed):
            gpu, exact = case.args
            target = fool_the_tensor_core_ref(gpu, exact)
            assert _fool_compare(target.example, target) is None, (gpu, exact)
            a, b = target.example
            assert len(a) == TENSOR_CORES[gpu].group("fp16")
            assert TENSOR_CORES[gpu].matmul(a[None, :], b[:, None], "fp16")[0, 0] == 0.0
            assert math.fsum((a * b).tolist()) == exact != 0


def test_an_answer_built_for_the_v100_fools_only_the_v100():
    """The V100's answer (alignment 23 bits), padded with zeros to the other GPUs' group sizes:
    the A100 (24 bits) and H100 (25 bits) keep exact's leading bit, so the model is off by less
    than half, in every case the check draws for them."""
    from nbhelpers.checks import cases_for
    from nbhelpers.answer_keys.ch03 import _fool_compare, fool_the_tensor_core_example, fool_the_tensor_core_ref
    from nbhelpers.tensor_cores import TENSOR_CORES

    for seed in (0, SPEC.hidden_seed):
        for case in cases_for("ex03.fool_the_tensor_core", seed):
            gpu, exact = case.args
            a4, b4 = fool_the_tensor_core_example("V100", exact)
            g = TENSOR_CORES[gpu].group("fp16")
            a, b = np.r_[a4, np.zeros(g - 4)], np.r_[b4, np.zeros(g - 4)]
            reason = _fool_compare((a, b), fool_the_tensor_core_ref(gpu, exact))
            if gpu == "V100":
                assert reason is None
            else:
                assert reason is not None and "less than half" in reason, (gpu, exact, reason)


def test_fool_the_tensor_core_compare_names_the_broken_condition_and_never_crashes():
    from nbhelpers.answer_keys.ch03 import _fool_compare, fool_the_tensor_core_ref

    target = fool_the_tensor_core_ref("A100", 2.0**-10)
    a, b = target.example
    a_before, b_before = a.copy(), b.copy()
    assert _fool_compare((a, b), target) is None
    assert _fool_compare([a.astype(np.float16), b.astype(np.float16)], target) is None  # float16 arrays
    assert _fool_compare((list(a), tuple(b)), target) is None  # any sequences of numbers
    np.testing.assert_array_equal(a, a_before)  # the student's arrays are not modified
    np.testing.assert_array_equal(b, b_before)

    def reason(got):
        r = _fool_compare(got, target)
        assert isinstance(r, str) and r, got
        return r

    for odd in (
        None,
        3.0,
        "ab",
        (a,),
        (a, b, b),
        (None, b),
        (a, "x" * 8),
        ({}, b),
        target,
        (a.reshape(2, 4), b),
        (a + 0j, b),
        (np.array(["1"] * 8), b),
        object(),
    ):
        reason(odd)
    assert "has 7 values, expected 8" in reason((a[:7], b[:7]))
    assert "not a finite number" in reason((np.r_[np.nan, a[1:]], b))
    assert "not a finite number" in reason((np.r_[np.inf, a[1:]], b))
    assert "not an fp16 value" in reason((np.r_[a[:2], 2.0**-10 * 3, a[3:]], np.r_[b[:2], 1 / 3, b[3:]]))
    assert "beyond fp16's largest value" in reason((np.r_[256.0, -256.0, a[2:]], np.r_[256.0, 256.0, b[2:]]))
    assert "not 0.0009765625" in reason((np.zeros(8), np.zeros(8)))
    assert "not 0.0009765625" in reason((np.r_[a[0], 0.0, a[2:]], b))  # P not cancelled
    # exact kept: 2**-10 with P = 2**14 on the A100 (24 bits: the last kept is 2**-10)
    assert "less than half" in reason((np.r_[2.0**14, -(2.0**14), a[2:]], b))
    # the exact sum must be exact itself, not merely round to it in float64 or fp32
    assert "not 0.0009765625" in reason((np.r_[a[:2], 2.0**-10, 2.0**-24, a[4:]], np.r_[b[:3], 2.0**-24, b[4:]]))

    class Hostile:
        def __len__(self):
            return 2

        def __iter__(self):
            raise RuntimeError("no")

    reason(Hostile())
    reason((np.ones(8) * np.nan, np.ones(8)))


def test_fool_the_tensor_core_target_states_the_property():
    from nbhelpers.answer_keys.ch03 import fool_the_tensor_core_ref

    assert repr(fool_the_tensor_core_ref("H100", -(2.0**-11))) == (
        "a, b: 16 fp16 values each, every |a[i]*b[i]| <= 65504, sum(a*b) == -0.00048828125 exactly, "
        "and the H100 model off by >= |-0.00048828125|/2"
    )
