"""Chapter 06's exercises beyond the table (test_exercises.py): the epilogue's reference is held bit for
bit against the engine's scaled_mm on real int8 and fp8 GEMMs, and the solution's epilogue against
torch._scaled_mm where no step rounds; the cases of quantize_blocks reach the regions they claim (the
clamp, zero blocks, exact ties, edge blocks) with every seed; the granularity cases keep their margin,
measured with the solution's own quantizer, and their answers vary."""

import math
from collections import Counter

import numpy as np
import pytest
import torch

from exercise_table import CHAPTERS
from helpers import SolutionNotebook
from nbhelpers.checks import cases_for, get_exercise
from nbhelpers.answer_keys.ch06 import MARGIN_DB, by_scale_count, epilogue_ref, int8_sqnr_db
from nbhelpers.rounding import round_to
from nbhelpers.scaled_gemm import int8_matmul, scaled_mm

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 6)
SEEDS = (0, SPEC.hidden_seed, 12345)


def solution_functions() -> dict:
    return SolutionNotebook(SPEC.solution, SPEC.namespace).functions()


def f32_scales(rng, shape):
    return np.exp2(rng.uniform(-8, 4, shape)).astype(np.float32)


# ---- ex06.epilogue


@pytest.mark.parametrize("seed", range(6))
def test_epilogue_reference_is_scaled_mm_on_real_gemms(seed):
    """epilogue_ref(accumulator) equals scaled_mm(operands) bit for bit: int8 (K large enough that the
    int32 accumulator passes 2**24, so its conversion to fp32 rounds) and e4m3fn / e5m2 operands (the
    accumulator: the exact sum rounded once to fp32)."""
    rng = np.random.default_rng(seed)
    M, N = 5, 7
    sA, sB = f32_scales(rng, (M, 1)), f32_scales(rng, (1, N))
    K = 3000
    qA = rng.integers(100, 128, (M, K)) * rng.choice([-1, 1], (M, 1))  # same signs along K: large sums
    qB = rng.integers(100, 128, (K, N))
    acc = int8_matmul(qA, qB)
    assert np.abs(acc).max() > 2**24
    np.testing.assert_array_equal(epilogue_ref(acc, sA, sB), scaled_mm(qA, qB, sA, sB, in_fmt="int8"))
    for fmt in ("e4m3fn", "e5m2"):
        qA = round_to(rng.standard_normal((M, 200)) * 30, fmt)
        qB = round_to(rng.standard_normal((200, N)) * 30, fmt)
        acc = (qA @ qB).astype(np.float32)  # exact products, exact float64 sum (K small), rounded once
        for a, b in ((sA, sB), (sA[:1, :1], sB), (sA, sB[:1, :1])):
            np.testing.assert_array_equal(epilogue_ref(acc, a, b), scaled_mm(qA, qB, a, b, in_fmt=fmt))


@pytest.mark.parametrize("seed", range(4))
def test_solution_epilogue_matches_torch_scaled_mm_where_nothing_rounds(seed):
    """torch._scaled_mm multiplies the operands by their scales and runs an fp32 GEMM, so it matches an
    epilogue bit for bit only when no step rounds: small-integer fp8 operands (every partial sum exact in
    fp32) and power-of-two scales. Then the student's epilogue must equal it."""
    epilogue = solution_functions()["epilogue"]
    rng = np.random.default_rng(seed)
    M, K, N = 6, 96, 5
    qA = rng.integers(-16, 17, (M, K)).astype(np.float64)
    qB = rng.integers(-16, 17, (K, N)).astype(np.float64)
    A8 = torch.tensor(qA, dtype=torch.float32).to(torch.float8_e4m3fn)
    B8 = torch.tensor(qB.T.copy(), dtype=torch.float32).to(torch.float8_e4m3fn).t()
    assert (A8.double().numpy() == qA).all() and (B8.double().numpy() == qB).all()
    sA = np.exp2(rng.integers(-8, 8, (M, 1))).astype(np.float32)
    sB = np.exp2(rng.integers(-8, 8, (1, N))).astype(np.float32)
    theirs = torch._scaled_mm(A8, B8, torch.tensor(sA), torch.tensor(sB), out_dtype=torch.float32).double().numpy()
    np.testing.assert_array_equal(epilogue((qA @ qB).astype(np.float32), sA, sB), theirs)


def test_epilogue_cases_reach_int32_values_beyond_2_24():
    """The int32 -> fp32 conversion rounds only past 2**24: the random cases alone reach it."""
    for seed in SEEDS:
        cases = [c for c in cases_for("ex06.epilogue", seed) if not c.label]
        big = [c for c in cases if c.args[0].dtype == np.int32 and (np.abs(c.args[0].astype(np.int64)) > 2**24).any()]
        assert len(big) >= 10
        square = [c for c in cases if c.args[0].shape[0] == c.args[0].shape[1] > 1]
        assert square


# ---- ex06.quantize_blocks


def regions(case) -> set:
    """Which hard regions a case reaches, measured on the reference's answer."""
    x, br, bc, element = case.args
    q, scales = get_exercise("ex06.quantize_blocks").reference(x, br, bc, element)
    qmax = 127.0 if element == "int8" else 448.0
    M, K = x.shape
    r, c = M if br is None else br, K if bc is None else bc
    s_full = np.repeat(np.repeat(scales, r, 0), c, 1)[:M, :K]
    out = set()
    if (np.abs(x / s_full) > qmax).any():
        out.add("clamp")
    if (scales == 2.0**-149).any() and (x == 0).any():
        out.add("zero block")
    if element == "int8" and (np.abs(x / s_full) % 1 == 0.5).any():
        out.add("tie")
    if M % r or K % c:
        out.add("edge")
    return out


def test_quantize_cases_reach_every_region_with_every_seed():
    for seed in SEEDS:
        seen = Counter()
        for c in cases_for("ex06.quantize_blocks", seed):
            if not c.label:
                seen.update(regions(c))
        assert all(seen[k] >= 5 for k in ("clamp", "zero block", "tie", "edge")), (seed, seen)


def test_quantize_solution_error_is_at_most_half_a_step():
    """A property of the right answer that does not use the engine: every int8 element is within half a
    scale of x (nearest rounding, nothing clamped away except in the scale's subnormal corner)."""
    quantize_blocks = solution_functions()["quantize_blocks"]
    for c in cases_for("ex06.quantize_blocks", 3):
        x, br, bc, element = c.args
        if element != "int8":
            continue
        q, scales = quantize_blocks(x, br, bc, element)
        M, K = x.shape
        s_full = np.repeat(np.repeat(scales, M if br is None else br, 0), K if bc is None else bc, 1)[:M, :K]
        ok = np.abs(x / s_full) <= 127
        assert (np.abs(q * s_full - x)[ok] <= s_full[ok] / 2).all()


# ---- ex06.coarsest_granularity


def solution_sqnr(quantize_blocks, x, block) -> float:
    br, bc = block
    q, scales = quantize_blocks(x, br, bc, "int8")
    M, K = x.shape
    s_full = np.repeat(np.repeat(scales, M if br is None else br, 0), K if bc is None else bc, 1)[:M, :K]
    return 10 * math.log10(np.sum(x**2) / np.sum((x - q * s_full) ** 2))


def test_granularity_cases_keep_their_margin_and_their_answers_vary():
    """Every SQNR of every case, measured with the solution's quantizer (numpy only), equals the
    engine's and lies at least MARGIN_DB from the threshold; the lists are ordered by scale count; the
    answers over the public and a hidden seed include per tensor, per row, a finer granularity and None."""
    quantize_blocks = solution_functions()["quantize_blocks"]
    ex = get_exercise("ex06.coarsest_granularity")
    answers = Counter()
    for seed in (0, SPEC.hidden_seed):
        for c in cases_for(ex, seed):
            x, gs, threshold = c.args
            assert gs == by_scale_count(x, gs)
            for _, block in gs:
                s = solution_sqnr(quantize_blocks, x, block)
                assert s == pytest.approx(int8_sqnr_db(x, block), abs=1e-9)
                assert abs(s - threshold) >= MARGIN_DB
            answers[ex.reference(*c.args)] += 1
    assert {"per-tensor", "per-row", "per-column", None} <= set(answers), answers
    assert sum(v for k, v in answers.items() if k not in ("per-tensor", "per-row", None)) >= 8, answers
