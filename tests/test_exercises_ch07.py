"""Chapter 07's exercises beyond the table (test_exercises.py): the MX exponent's reference against the
OCP MX v1.0 definition in exact arithmetic and the solution against torchao's MX quantization; the
largest element values the statement lists against the formats; the block-scaled GEMM against a
float64 GEMM of the dequantized operands within a bound derived from the fp32 roundings; the labelled
cases say what they claim."""

import math
import re
from fractions import Fraction

import ml_dtypes
import nbformat
import numpy as np
import pytest

from exercise_table import CHAPTERS
from helpers import ROOT, SolutionNotebook
from nbhelpers.checks import cases_for, get_exercise
from nbhelpers.formats import get_format
from nbhelpers.answer_keys.ch07 import MX_ELEMENTS

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 7)
SEEDS = (0, SPEC.hidden_seed, 12345)


def solution_functions() -> dict:
    return SolutionNotebook(SPEC.solution, SPEC.namespace).functions()


# ---- ex07.mx_shared_exponent


def ocp_exponent(block, element) -> int:
    """OCP MX v1.0, from its definition in exact arithmetic: the largest k with 2**k <= amax (the
    floor of log2), minus emax_elem (the exponent of the element's largest normal, found the same
    way from its max), at least -127; -127 for a zero block."""
    amax = max((abs(Fraction(float(v))) for v in block), default=Fraction(0))
    if amax == 0:
        return -127

    def floor_log2(v: Fraction) -> int:
        k = v.numerator.bit_length() - v.denominator.bit_length()
        while Fraction(2) ** k > v:
            k -= 1
        while Fraction(2) ** (k + 1) <= v:
            k += 1
        return k

    return max(floor_log2(amax) - floor_log2(Fraction(get_format(element).max)), -127)


def test_mx_reference_is_the_ocp_definition():
    ex = get_exercise("ex07.mx_shared_exponent")
    for seed in SEEDS:
        for c in cases_for(ex, seed):
            assert ex.reference(*c.args) == ocp_exponent(*c.args), c
            e = ex.reference(*c.args)
            assert -127 <= e <= 127
            assert float(ml_dtypes.float8_e8m0fnu(2.0**e)) == 2.0**e  # an e8m0 value


def test_statement_lists_the_formats_largest_values():
    """The statement types the largest value of each element format; they must be the formats'."""
    nb = nbformat.read(ROOT / "solutions" / SPEC.solution, as_version=4)
    text = next(c.source for c in nb.cells if c.cell_type == "markdown" and "The largest values:" in c.source)
    listed = dict(re.findall(r"(e\dm\dfn|e5m2) (\d+(?:\.\d+)?)", text.split("The largest values:")[1]))
    assert set(listed) == set(MX_ELEMENTS)
    for name, value in listed.items():
        assert float(value) == get_format(name).max


@pytest.mark.parametrize("element", ["e4m3fn", "e5m2", "e2m1fn"])
def test_mx_solution_matches_torchao(element):
    """torchao.prototype.mx_formats.to_mx (FLOOR rule) on the cases' blocks as float32 (torchao takes
    float32; the test extra installs it, and the test skips only where it is not installed)."""
    torch = pytest.importorskip("torch")
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    sol = solution_functions()["mx_shared_exponent"]
    rows = []
    for c in cases_for("ex07.mx_shared_exponent", 0) + cases_for("ex07.mx_shared_exponent", SPEC.hidden_seed):
        with np.errstate(over="ignore"):
            b = c.args[0].astype(np.float32)
        if np.isfinite(b).all():
            rows.append(np.concatenate([b, np.zeros(32 - b.size, np.float32)]))
    x = np.stack(rows)
    elem = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e2m1fn": torch.float4_e2m1fn_x2}[element]
    codes, _ = mx.to_mx(torch.from_numpy(x), elem, 32)
    theirs = codes.view(torch.uint8).numpy().astype(np.int64).ravel() - 127
    ours = np.array([sol(r.astype(np.float64), element) for r in x])
    np.testing.assert_array_equal(ours, theirs)
    assert len(x) > 150


def test_mx_labelled_cases_say_what_they_claim():
    by_label = {c.label: c.args for c in cases_for("ex07.mx_shared_exponent", 0) if c.label}
    ref = get_exercise("ex07.mx_shared_exponent").reference
    block, element = by_label["MXFP4, amax 7: floor(log2 7) - 2 = 0"]
    assert ref(block, element) == 0
    assert float(ml_dtypes.float4_e2m1fn(min(7.0 / 2.0**0, 6.0))) == 6.0  # the 7 is stored as 6
    block, _ = by_label["amax just below 8: floor(log2) is 2, not 3"]
    assert math.log2(block.max()) == 3.0 and math.frexp(block.max())[1] - 1 == 2  # math.log2 rounds up here
    assert ref(*by_label["all zeros: the smallest exponent, -127"]) == -127
    assert ref(*by_label["below e8m0's range: raised to -127"]) == -127


def test_mx_cases_reach_the_hard_regions():
    for seed in SEEDS:
        cases = [c for c in cases_for("ex07.mx_shared_exponent", seed) if not c.label]
        below_pow2 = sum(
            math.log2(np.abs(c.args[0]).max()) != math.frexp(np.abs(c.args[0]).max())[1] - 1
            for c in cases
            if np.abs(c.args[0]).max() > 0
            and math.floor(math.log2(np.abs(c.args[0]).max())) != math.frexp(np.abs(c.args[0]).max())[1] - 1
        )
        clamped = sum(
            math.frexp(np.abs(c.args[0]).max())[1] - 1 - get_format(c.args[1]).emax < -127
            for c in cases
            if np.abs(c.args[0]).max() > 0
        )
        zeros = sum(not np.abs(c.args[0]).max() for c in cases)
        assert below_pow2 >= 2 and clamped >= 5 and zeros >= 3, (seed, below_pow2, clamped, zeros)


# ---- ex07.blockwise_scaled_gemm


def dequantized_f64(qA, qB, sA, sB, bk, bn):
    M, K = qA.shape
    N = qB.shape[1]
    A = qA * np.repeat(sA, bk, axis=1)[:, :K]
    B = qB * np.repeat(np.repeat(sB, bk, axis=0), bn, axis=1)[:K, :N]
    return A, B


def test_blockwise_solution_against_float64_of_dequantized_operands():
    """Each output goes through, per K-block, one rounding of the partial to fp32, two of the scaled
    product, and one of the addition into the accumulator: the error of the result is at most
    gamma_(nk + 3) * sum over blocks |sA sB P_b|, gamma_n = n u / (1 - n u), u = 2**-24 (for values
    in fp32's normal range). The float64 GEMM of the dequantized operands is itself off the exact C by
    at most gamma_(K + 1) with u = 2**-53 (a dequantized operand has up to 4 + 24 significant bits, a
    product up to 56): both terms make the bound."""
    sol = solution_functions()["blockwise_scaled_gemm"]
    u = 2.0**-24
    for c in cases_for("ex07.blockwise_scaled_gemm", SPEC.hidden_seed):
        qA, qB, sA, sB, bk, bn = c.args
        A, B = dequantized_f64(qA, qB, sA, sB, bk, bn)
        exact = A @ B
        nk = sA.shape[1]
        K = qA.shape[1]
        gamma = (nk + 3) * u / (1 - (nk + 3) * u) + (K + 1) * 2.0**-53 / (1 - (K + 1) * 2.0**-53)
        bound = gamma * (np.abs(A) @ np.abs(B))
        assert (np.abs(sol(*c.args) - exact) <= bound).all(), c


def test_blockwise_labelled_cases_say_what_they_claim():
    by_label = {c.label: c.args for c in cases_for("ex07.blockwise_scaled_gemm", 0) if c.label}
    ref = get_exercise("ex07.blockwise_scaled_gemm").reference
    args = by_label["two K-blocks that cancel exactly: +0.0"]
    out = ref(*args)
    assert out[0, 0] == 0.0 and not np.signbit(out[0, 0])
    qA, qB, sA, sB, bk, bn = by_label["K = 100 with blocks of 32: a short last K-block"]
    assert qA.shape[1] % bk and sA.shape[1] == 4
    qA, qB, sA, sB, bk, bn = by_label["K-block scales drawn from 24 binades"]
    assert sA.max() / sA.min() > 2.0**12 or sB.max() / sB.min() > 2.0**12
