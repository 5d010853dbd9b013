"""Chapter 06's exercises beyond the table (test_exercises.py): the references against outside oracles
(scaled_mm for the epilogue, torch's integer matmul and casts for the asymmetric GEMM, ml_dtypes and torch
fp8 casts for the underflow and overflow counts, Transformer Engine's reciprocal scale for the delayed
scaler), and the cases against their claims: flushed_per_tensor's examples hold against torch's roundings,
its cases put lo on the tie, hi off every exact amax, k at its largest with edge blocks, with and without
blocks that flush whole, and its comparator never raises nor alters the answer; the asymmetric GEMM's
random cases pass 2**24, wrap the zero points' uint8 product and have per-tensor zero points on either
side; the granularity cases keep the model's predictions from the threshold and the measured SQNRs from
the predictions, and every wrong model misses on most of them; the fp8 cases hold weights, wide
gradients and stale scales, exact ties and values one float64 step from them (which a cast through
float32 rounds twice), and both answers, and an answer that rounds with ml_dtypes' fp8 scalar types (right
counts) or torch scores nothing while numpy-only ones pass; the delayed-scaling model's expected counts are what the
engine loses on tensors drawn from its law, and the cases need margins from 0 to 16, break ties split
between clamped and flushed values, and hold losses that rise with the margin and then fall lower."""

import inspect
import math
from collections import Counter

import ml_dtypes
import numpy as np
import pytest
import torch
from exercise_table import CHAPTERS
from helpers import SolutionNotebook

from nbhelpers.answer_keys.ch06 import (
    E4M3_FLUSH,
    E4M3_MAX,
    ELEMENT_MAX,
    FLUSH_SHARE,
    FP8_FORMATS,
    GRANULARITIES,
    MARGIN_DB,
    MARGINS,
    MEASURED_GAP_DB,
    TOLERANCE_DB,
    asym_int8_gemm_ref,
    asym_pieces,
    block_amax_at_most,
    block_slices,
    by_scale_count,
    crest_factor_sqnr_db,
    delayed_scales,
    epilogue_ref,
    expected_losses,
    flush_capacity,
    flushed_per_tensor_example,
    fp8_loss_counts,
    fp8_scale,
    free_zero_model_sqnr_db,
    int8_sqnr_db,
    min_model_sqnr_db,
    naive_model_sqnr_db,
    noise_model_sqnr_db,
    third_model_sqnr_db,
    zeros_only_model_sqnr_db,
)
from nbhelpers.checks import cases_for, expected_outputs, get_exercise
from nbhelpers.recipes import PER_TENSOR, Recipe
from nbhelpers.rounding import round_to
from nbhelpers.scaled_gemm import int8_matmul, scaled_mm
from nbhelpers.scaling import DelayedScaler

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 6)
SEEDS = (0, SPEC.hidden_seed, 12345)


def solution_functions() -> dict:
    return SolutionNotebook(SPEC.solution, SPEC.namespace).functions()


def random_cases(name: str, seed: int) -> list:
    return [c for c in cases_for(f"ex06.{name}", seed) if not c.label]


def labelled(name: str) -> dict:
    return {c.label: c for c in cases_for(f"ex06.{name}", 0) if c.label}


def f32_scales(rng, shape):
    return np.exp2(rng.uniform(-8, 4, shape)).astype(np.float32)


# ---- the epilogue (asym_int8_gemm's last step, and chapter 09's kernel exercise)


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


# ---- ex06.asym_int8_gemm


def codes_from_pieces(case):
    """(acc, corrected) of a case as int64: its acc, and the exact sum_k (qx - zx)(qw - zw) that the
    pieces stand for, expanded (the reference's own rule is held against torch below)."""
    acc, rowsum, colsum, K, zx, zw, sx, sw = case.args
    zx, zw = zx.astype(np.int64), zw.astype(np.int64)
    return acc.astype(np.int64), acc - zx * colsum - rowsum.astype(np.int64) * zw + K * zx * zw


def torch_asym_gemm(qx, zx, sx, qw, zw, sw) -> np.ndarray:
    """The same GEMM in torch from the codes: an int64 matmul of the shifted codes (qx - zx) @ (qw - zw), a
    cast to float32 and two float32 multiplies."""
    x = torch.from_numpy(qx.astype(np.int64)) - torch.from_numpy(zx.astype(np.int64))
    w = torch.from_numpy(qw.astype(np.int64)) - torch.from_numpy(zw.astype(np.int64))
    out = ((x @ w).to(torch.float32) * torch.from_numpy(sx)) * torch.from_numpy(sw)
    return out.double().numpy()


@pytest.mark.parametrize("seed", range(4))
def test_asym_reference_matches_torch_on_the_codes(seed):
    """From the pieces (acc, row and column sums) the reference gives what torch gives from the codes
    themselves, bit for bit, and lies within fp32 rounding (three roundings, a few ulps) of the float64
    product of the dequantized operands; per row / column and per tensor, K up to 16384."""
    rng = np.random.default_rng(seed)
    for K in (1, 7, 300, 4096, 16384):
        M, N = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        qx = rng.integers(0, 256, (M, K)).astype(np.uint8)
        qw = rng.integers(0, 256, (K, N)).astype(np.uint8)
        zx = rng.integers(0, 256, (M, 1) if rng.random() < 0.7 else (1, 1)).astype(np.uint8)
        zw = rng.integers(0, 256, (1, N) if rng.random() < 0.7 else (1, 1)).astype(np.uint8)
        sx = np.exp2(rng.uniform(-10, 0, zx.shape)).astype(np.float32)
        sw = np.exp2(rng.uniform(-10, 0, (1, N))).astype(np.float32)
        ours = asym_int8_gemm_ref(*asym_pieces(qx, zx, sx, qw, zw, sw))
        np.testing.assert_array_equal(ours, torch_asym_gemm(qx, zx, sx, qw, zw, sw))
        exact = ((qx.astype(np.float64) - zx) * sx.astype(np.float64)) @ ((qw.astype(np.float64) - zw) * sw)
        np.testing.assert_allclose(ours, exact, rtol=4 * 2.0**-24, atol=1e-300)


def test_asym_pieces_refuse_integers_past_int32():
    with pytest.raises(ValueError, match="acc leaves int32"):
        asym_pieces(np.full((1, 33026), 255), [[0]], [[1.0]], np.full((33026, 1), 255), [[0]], [[1.0]])


def test_asym_labelled_cases_say_what_they_claim():
    cases = labelled("asym_int8_gemm")
    by_start = {label.split(":")[0]: c for label, c in cases.items()}
    acc, rowsum, colsum, K, zx, zw, *_ = by_start["zero points 0"].args
    assert not zx.any() and not zw.any()
    *_, zx, zw, _, _ = by_start["both zero points 128, K = 4"].args
    assert (zx * zw == 0).all() and (zx.astype(int) * zw == 16384).all()
    c = by_start["codes below their zero points on both sides"]
    acc, corrected = codes_from_pieces(c)
    assert (corrected < 0).any()
    c = next(c for label, c in cases.items() if label.startswith("K = 33,025"))
    acc, corrected = codes_from_pieces(c)
    assert c.args[3] == (2**31 - 1) // 255**2 and 2**31 - 2**16 < acc.max() < 2**31
    assert (corrected.astype(np.float32) != corrected).any()
    acc, corrected = codes_from_pieces(by_start["corrected accumulator past 2**24"])
    assert (np.abs(corrected) > 2**24).all() and (corrected.astype(np.float32) != corrected).any()
    acc, _ = codes_from_pieces(by_start["square output (M == N)"])
    assert acc.shape[0] == acc.shape[1] > 1


def test_asym_random_cases_reach_every_region_with_every_seed():
    """The random cases alone pass 2**24 with the raw codes and with the corrected sum (whose float32
    conversion rounds), have zero points whose product wraps around in uint8, K past 255 (K * a uint8
    array overflows), square outputs, per-tensor zero points on either side, and stay inside int32."""
    for seed in SEEDS:
        seen = Counter()
        for c in random_cases("asym_int8_gemm", seed):
            acc_in, rowsum, colsum, K, zx, zw, sx, sw = c.args
            assert acc_in.dtype == rowsum.dtype == colsum.dtype == np.int32
            assert zx.dtype == zw.dtype == np.uint8 and sx.dtype == sw.dtype == np.float32
            acc, corrected = codes_from_pieces(c)
            assert np.abs(corrected).max() < 2**31 and 0 <= rowsum.min() and rowsum.max() <= 255 * K
            seen["raw past 2**24"] += bool(np.abs(acc).max() > 2**24)
            seen["corrected rounds"] += bool((corrected.astype(np.float32) != corrected).any())
            seen["uint8 product wraps"] += bool((zx.astype(int) * zw > 255).any())
            seen["K past 255"] += K > 255
            seen["square"] += acc.shape[0] == acc.shape[1] > 1
            seen["zx per tensor"] += zx.shape == (1, 1) and acc.shape[0] > 1
            seen["zw per tensor"] += zw.shape == (1, 1) and acc.shape[1] > 1
        assert all(v >= 5 for v in seen.values()) and len(seen) == 7, (seed, seen)


# ---- ex06.flushed_per_tensor


def flush_regions(case) -> set:
    """Which hard regions a case reaches, measured on its parameters and the course's example."""
    M, K, br, bc, element, k, lo, hi = case.args
    qmax, t = ELEMENT_MAX[element], FLUSH_SHARE[element]
    A = block_amax_at_most(hi, lo, element)
    tie = t * A / qmax
    out = set()
    if k and lo == tie:
        out.add("lo on the tie")
    if hi > A:
        out.add("hi no exact amax")
    if float(np.float32(hi / qmax)) * qmax > hi:
        out.add("fp32(hi / qmax) rounds up")
    if k and tie >= lo:
        out.add("whole blocks" if block_amax_at_most(tie, lo, element) is not None else "no whole block")
    sizes = [np.ones((M, K))[r, c].size for r, c in block_slices(M, K, br, bc)]
    if k and k == flush_capacity(M, K, br, bc, element, lo, hi) and sizes[0] > sizes[-1]:
        out.add("k at its largest, edge blocks")
    if k == 0:
        out.add("k = 0")
    out.add(element)
    return out


def test_flush_cases_reach_every_region_with_every_seed():
    want = ("lo on the tie", "hi no exact amax", "fp32(hi / qmax) rounds up", "whole blocks", "no whole block")
    want += ("k at its largest, edge blocks", "k = 0", "int8", "e4m3fn")
    for seed in SEEDS:
        seen = Counter()
        for c in random_cases("flushed_per_tensor", seed):
            seen.update(flush_regions(c))
        assert all(seen[k] >= 4 for k in want), (seed, seen)


def _codes_by_outside_casts(x: np.ndarray, scale: np.ndarray, element: str) -> np.ndarray:
    """x / scale clamped and rounded by an outside oracle: torch's rounding to integers (ties to even)
    for int8, torch's float8_e4m3fn cast (exact from float64 ties aside: the cases' ties are checked
    on the float32 quotient, which the cast rounds once) for e4m3fn."""
    qmax = ELEMENT_MAX[element]
    v = torch.tensor(np.clip(x / scale, -qmax, qmax))
    if element == "int8":
        return torch.round(v).numpy()
    return v.to(torch.float8_e4m3fn).to(torch.float64).numpy()


def test_flush_examples_hold_against_outside_casts():
    """The course's example for every case meets the property by torch's roundings, not the engine's:
    each block's fp32 scale gives every element back; the tensor's scale flushes exactly k."""
    ex = get_exercise("ex06.flushed_per_tensor")
    for seed in SEEDS:
        for c in cases_for(ex, seed):
            M, K, br, bc, element, k, lo, hi = c.args
            x = ex.reference(*c.args).example.astype(np.float64)
            assert x.dtype == np.float64 and (np.abs(x) >= lo).all() and (np.abs(x) <= hi).all()
            qmax = ELEMENT_MAX[element]
            for rows, cols in block_slices(M, K, br, bc):
                blk = x[rows, cols]
                s = float(np.float32(np.abs(blk).max() / qmax))
                assert (_codes_by_outside_casts(blk, s, element) * s == blk).all(), c.args
            S = float(np.float32(np.abs(x).max() / qmax))
            assert int((_codes_by_outside_casts(x, S, element) == 0).sum()) == k, c.args


def test_the_tie_flushes_and_the_next_float32_does_not():
    """What the exercise turns on, by torch's roundings: per tensor, t * S rounds to 0 and the float32
    above it does not, for int8 (t = 1/2) and e4m3fn (t = 2**-10), at scales with a full mantissa."""
    rng = np.random.default_rng(6)
    for element in ("int8", "e4m3fn"):
        for S in np.float32(np.exp2(rng.uniform(-30, 30, 50))).astype(np.float64):
            tie = FLUSH_SHARE[element] * S
            above = float(np.nextafter(np.float32(tie), np.float32(np.inf)))
            assert _codes_by_outside_casts(np.array([tie, above]), S, element).tolist()[0] == 0
            assert _codes_by_outside_casts(np.array([above]), S, element)[0] != 0


def test_flush_capacity_is_the_most_the_example_reaches():
    """k = capacity has an answer (the example passes the judge), capacity + 1 none by the example's
    construction (which flushes nothing in the amax's block, whose scale is the tensor's)."""
    ex = get_exercise("ex06.flushed_per_tensor")
    for c in random_cases("flushed_per_tensor", 0):
        M, K, br, bc, element, k, lo, hi = c.args
        cap = flush_capacity(M, K, br, bc, element, lo, hi)
        assert k <= cap
        target = ex.reference(M, K, br, bc, element, cap, lo, hi)
        assert ex.compare(target.example, target) is None
        with pytest.raises(ValueError, match="more than"):
            flushed_per_tensor_example(M, K, br, bc, element, cap + 1, lo, hi)


def test_flush_compare_judges_without_raising_or_altering():
    """Odd returns get a reason and never raise; the answer is not changed by the check; the wrong
    dtype, shape, a zero and a value past hi each get a reason that names them."""
    ex = get_exercise("ex06.flushed_per_tensor")
    c = cases_for(ex, 0)[0]
    target = ex.reference(*c.args)
    x = target.example.copy()
    before = x.copy()
    assert ex.compare(x, target) is None and np.array_equal(x, before)
    assert "float32" in ex.compare(x.astype(np.float64), target)
    assert "shape" in ex.compare(x[:1], target)
    z = x.copy()
    z[0, 0] = 0
    assert "zero" in ex.compare(z, target)
    big = x.copy()
    big[0, 0] = np.float32(target.hi * 2)
    assert "outside" in ex.compare(big, target)
    nan = x.copy()
    nan[0, 0] = np.nan
    assert "finite" in ex.compare(nan, target)
    for odd in (None, "abc", x.tolist(), (x,), object(), np.array(["a"] * x.size).reshape(x.shape)):
        reason = ex.compare(odd, target)
        assert isinstance(reason, str) and reason

    class Float32OnPaper(np.ndarray):  # float64 data under a dtype that says float32
        @property
        def dtype(self):
            return np.dtype(np.float32)

    for sub in (x.astype(np.float64).view(Float32OnPaper), np.ma.masked_array(x)):
        reason = ex.compare(sub, target)
        assert "subclass" in reason and "plain numpy.ndarray of dtype float32" in reason, reason


def test_flush_solution_matches_the_wrong_k_detector():
    """The solution's tensor for k flushes k per tensor and is judged wrong for k + 1 and k - 1."""
    flushed_per_tensor = solution_functions()["flushed_per_tensor"]
    ex = get_exercise("ex06.flushed_per_tensor")
    for c in random_cases("flushed_per_tensor", SPEC.hidden_seed)[:20]:
        x = flushed_per_tensor(*c.args)
        assert ex.compare(x, ex.reference(*c.args)) is None
        M, K, br, bc, element, k, lo, hi = c.args
        for other in (k - 1, k + 1):
            if 0 <= other <= flush_capacity(M, K, br, bc, element, lo, hi):
                target = ex.reference(M, K, br, bc, element, other, lo, hi)
                assert "round to 0" in ex.compare(x, target)


# ---- ex06.coarsest_granularity


def model_answer(model, case):
    x, gs, threshold = case.args
    return next((name for name, b in gs if model(x, b) >= threshold), None)


def test_granularity_cases_keep_their_margin_and_their_answers_vary():
    """Every prediction of every case lies at least MARGIN_DB from the threshold, and the measured SQNR
    (the engine's quantizer) at least MEASURED_GAP_DB from the prediction for some granularity, so that
    measuring fails on every case; the lists are ordered by scale count; the answers over the public and
    a hidden seed include per tensor, per row, a finer granularity and None."""
    ex = get_exercise("ex06.coarsest_granularity")
    answers = Counter()
    for seed in (0, SPEC.hidden_seed):
        cases = cases_for(ex, seed)
        for c, (name, predicted) in zip(cases, expected_outputs(ex, cases)):
            x, gs, threshold = c.args
            assert gs == by_scale_count(x, gs)
            assert all(abs(p - threshold) >= MARGIN_DB for p in predicted)
            gaps = [abs(int8_sqnr_db(x, b) - p) for (_, b), p in zip(gs, predicted)]
            assert max(gaps) >= MEASURED_GAP_DB > 10 * TOLERANCE_DB, c.label
            answers[name] += 1
    assert {"per-tensor", "per-row", "per-column", None} <= set(answers), answers
    assert sum(v for k, v in answers.items() if k not in ("per-tensor", "per-row", None)) >= 8, answers


WRONG_PREDICTIONS = {
    "step**2 / 12 for all": naive_model_sqnr_db,
    "zeros free, step**2 / 12 for the rest": zeros_only_model_sqnr_db,
    "crest factor": crest_factor_sqnr_db,
    "capped at step**2 / 12": min_model_sqnr_db,
    "b**2 / 3 below half a step": third_model_sqnr_db,
    "rounded to 0 costs nothing": free_zero_model_sqnr_db,
    "measured": int8_sqnr_db,
}


def test_granularity_wrong_models_and_measuring_miss_on_the_random_cases_of_every_seed():
    """Each wrong model, and measuring, misses some prediction by more than the tolerance on most random
    cases of every seed (the grading seeds of the wrong-answer tests too), and each wrong model names
    another granularity on some; the labelled cases that say so separate them."""
    ex = get_exercise("ex06.coarsest_granularity")
    for seed in (*SEEDS, 1, 7, 2026, 8142093377, 2**40 + 7):
        cases = [c for c in cases_for(ex, seed) if not c.label]
        missed, renamed = Counter(), Counter()
        for c, (name, predicted) in zip(cases, expected_outputs(ex, cases)):
            x, gs, _ = c.args
            for what, model in WRONG_PREDICTIONS.items():
                wrong = [model(x, b) for _, b in gs]
                missed[what] += any(not abs(w - p) <= TOLERANCE_DB for w, p in zip(wrong, predicted))
                renamed[what] += model_answer(model, c) != name
        assert all(missed[w] >= 0.8 * len(cases) for w in WRONG_PREDICTIONS), (seed, missed)
        # measuring misses by tenths of a dB at most: the margin keeps its names mostly right
        assert all(renamed[w] >= 2 for w in WRONG_PREDICTIONS if w != "measured"), (seed, renamed)
    cases = labelled("coarsest_granularity")
    by_start = {label.split(":")[0]: c for label, c in cases.items()}
    relu = by_start["90% exact zeros cost no noise"]
    assert ex.reference(*relu.args)[0] == "per-tensor" != model_answer(naive_model_sqnr_db, relu)
    tails = by_start["Student-t tails, 36 dB"]
    assert ex.reference(*tails.args)[0] == "per-column" and model_answer(crest_factor_sqnr_db, tails) == "1x128"
    leak = by_start["a gate that leaks, 90% of the values 2**-10 of their size (not zero)"]
    x = leak.args[0]
    small = (x != 0) & (np.abs(x) < np.abs(x).max() / 254)  # nonzero, below half a per-tensor step
    assert small.mean() > 0.5 and (x == 0).any()
    assert ex.reference(*leak.args)[0] == "per-tensor" and model_answer(zeros_only_model_sqnr_db, leak) == "1x32"
    band = by_start["90% of the values between 0.3 and 0.49 of a step (per tensor)"]
    x = band.args[0]
    step = np.abs(x).max() / 127
    assert np.mean((np.abs(x) > step / 12**0.5) & (np.abs(x) < step / 2)) > 0.8
    assert ex.reference(*band.args)[0] == "per-row" and model_answer(min_model_sqnr_db, band) == "per-tensor"
    low = by_start["90% of the values between 0.05 and 0.25 of a step (per tensor)"]
    assert ex.reference(*low.args)[0] == "per-row"
    assert model_answer(third_model_sqnr_db, low) == model_answer(free_zero_model_sqnr_db, low) == "per-tensor"


def test_granularity_tolerance_admits_the_step_rounded_to_float32():
    """The solution with step = fp32(amax / 127) (the scale exercise 1 stores) passes: the tolerance
    tells models apart, not the last bits of one."""
    from nbhelpers.checks import run_check

    spec_solution = SolutionNotebook(SPEC.solution, SPEC.namespace)
    fp32_step = spec_solution.mutated(
        "coarsest_granularity",
        "step = np.max(np.abs(b)) / 127",
        "step = float(np.float32(np.max(np.abs(b)) / 127))",
    )
    for seed in (0, SPEC.hidden_seed):
        assert run_check("ex06.coarsest_granularity", fp32_step, seed=seed).passed


# ---- ex06.fp8_choice

ML_DTYPES = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
TORCH = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def boundary_values(fmt: str) -> np.ndarray:
    """float32 values on and around every boundary of fmt: half the smallest subnormal, the smallest
    subnormal, the max and the midpoint above it, with their float32 neighbours."""
    tiny = {"e4m3fn": 2.0**-9, "e5m2": 2.0**-16}[fmt]
    top, mid = {"e4m3fn": (448.0, 464.0), "e5m2": (57344.0, 61440.0)}[fmt]
    v = np.array([tiny / 2, tiny, tiny * 0.75, top, mid, 240.0, 248.0], dtype=np.float32)
    return np.concatenate([v, np.nextafter(v, np.float32(0)), np.nextafter(v, np.float32(np.inf))])


@pytest.mark.parametrize("fmt", FP8_FORMATS)
def test_fp8_counts_match_ml_dtypes_and_torch_casts(fmt):
    """fp8_loss_counts against the casts: x = v * scale with v float32, so x / scale is v exactly and the
    float32 -> fp8 cast rounds once. ml_dtypes gives 0 where a value underflows and NaN (e4m3fn) or inf
    (e5m2) where it overflows; torch's cast agrees on the zeros (it saturates on overflow)."""
    rng = np.random.default_rng(6)
    for amax in (448.0, 1.0, 3.7, 2.0**-20 * 1.3):
        scale = fp8_scale(amax, fmt)
        mags = np.exp2(rng.uniform(-20, 18, 4000))
        v = np.concatenate([boundary_values(fmt), mags.astype(np.float32), np.zeros(3, np.float32)])
        v = v * rng.choice(np.array([-1.0, 1.0], np.float32), v.size)
        x = v.astype(np.float64) * scale
        assert np.array_equal(x / scale, v.astype(np.float64))
        with np.errstate(over="ignore", invalid="ignore"):
            cast = v.astype(ML_DTYPES[fmt]).astype(np.float64)
        nonzero = v != 0
        want = (int(np.sum(nonzero & (cast == 0))), int(np.sum(~np.isfinite(cast))))
        assert fp8_loss_counts(x, amax, fmt) == want
        t = torch.from_numpy(v).to(TORCH[fmt]).double().numpy()
        assert int(np.sum(nonzero & (t == 0))) == want[0]


def test_fp8_boundaries_by_hand():
    """The ties the exercise turns on, on ml_dtypes' casts: 464 stays at e4m3fn's 448 and 465 overflows;
    e5m2's 61440 overflows and the value below it does not; half the smallest subnormal goes to 0."""
    with np.errstate(over="ignore", invalid="ignore"):
        e4 = np.array([464.0, 465.0, 2.0**-10], np.float32).astype(ml_dtypes.float8_e4m3fn).astype(float)
        e5 = np.array([61440.0, 61439.996, 2.0**-17], np.float32).astype(ml_dtypes.float8_e5m2).astype(float)
    assert e4[0] == 448 and np.isnan(e4[1]) and e4[2] == 0
    assert np.isinf(e5[0]) and e5[1] == 57344 and e5[2] == 0


def sqnr_choice(x, amax) -> str:
    def sqnr(fmt):
        top = {"e4m3fn": 448.0, "e5m2": 57344.0}[fmt]
        s = fp8_scale(amax, fmt)
        err = np.sum((round_to(np.clip(x / s, -top, top), fmt) * s - x) ** 2)
        return np.inf if err == 0 else np.sum(x**2) / err

    return max(FP8_FORMATS, key=sqnr)


def test_fp8_cases_have_the_characters_they_claim():
    """Both answers in the random cases of every seed; exact ties at 464 * scale, 61440 * scale and half
    a subnormal; cases where the tolerance decides (e4m3fn loses a few more, but under 1 in 1000) and
    where SQNR would choose the other format; the labelled tensors' stated outcomes."""
    ex = get_exercise("ex06.fp8_choice")
    for seed in SEEDS:
        cases = random_cases("fp8_choice", seed)
        seen = Counter()
        for c, (choice, counts) in zip(cases, expected_outputs(ex, cases)):
            x, amax = c.args
            seen[choice] += 1
            v4, v5 = np.abs(x / fp8_scale(amax, "e4m3fn")), np.abs(x / fp8_scale(amax, "e5m2"))
            seen["tie 464"] += bool((v4 == 464).any())
            seen["tie 61440"] += bool((v5 == 61440).any())
            seen["tie half subnormal"] += bool((v4 == 2.0**-10).any() or (v5 == 2.0**-17).any())
            lost4, lost5 = sum(counts["e4m3fn"]), sum(counts["e5m2"])
            seen["tolerance decides"] += 0 < lost4 - lost5 and choice == "e4m3fn"
            seen["SQNR disagrees"] += sqnr_choice(x, amax) != choice
            seen["overflow"] += counts["e4m3fn"][1] > 0
            seen["zeros"] += bool((x == 0).any())
            # a value a few float64 steps from a tie that float32 puts on it: a cast through
            # float32 (ml_dtypes', torch's) rounds it the wrong way
            with np.errstate(over="ignore"):
                for v, ties in ((v4, (464.0, 2.0**-10)), (v5, (61440.0, 2.0**-17))):
                    for tie in ties:
                        near = (v != tie) & (v.astype(np.float32) == tie)
                        seen["one step from a tie"] += bool(near.any())
        assert seen["e4m3fn"] >= 15 and seen["e5m2"] >= 15, (seed, seen)
        assert seen["one step from a tie"] >= 8, (seed, seen)
        assert all(seen[k] >= 3 for k in ("tie 464", "tie 61440", "tie half subnormal", "tolerance decides")), seen
        assert all(seen[k] >= 5 for k in ("SQNR disagrees", "overflow", "zeros")), (seed, seen)
    cases = labelled("fp8_choice")
    out = {label: ex.reference(*c.args) for label, c in cases.items()}
    by_start = {label.split(":")[0]: o for label, o in out.items()}
    assert by_start["weights, fresh amax"] == ("e4m3fn", {"e4m3fn": (0, 0), "e5m2": (0, 0)})
    choice, counts = by_start["gradients over 4 binades (sd)"]
    assert choice == "e5m2" and counts["e4m3fn"][0] > 100 * max(counts["e5m2"][0], 1)
    choice, counts = by_start["a stale amax 1.5x too small"]
    assert choice == "e5m2" and counts["e4m3fn"][1] > counts["e5m2"][1] > 0
    choice, counts = by_start["a stale amax 4096x too large"]
    assert choice == "e5m2" and counts["e4m3fn"][0] > 0 == counts["e5m2"][0]


def _floored_counts(x, amax) -> dict:
    """Each format's counts with its scale flushed to float32's smallest normal 2**-126 (a wrong rule)."""
    out = {}
    for fmt in FP8_FORMATS:
        r = round_to(x / max(fp8_scale(amax, fmt), 2.0**-126), fmt)
        out[fmt] = (int(np.sum((x != 0) & (r == 0))), int(np.sum(~np.isfinite(r))))
    return out


def test_fp8_tiny_amaxes_have_subnormal_scales_that_a_floor_at_the_smallest_normal_miscounts():
    """Every seed's random cases hold tensors whose both scales are float32 subnormals within the
    statement's range (amax at least 57344 * 2**-149); a scale floored at 2**-126 miscounts each of
    them, and the labelled one: its scales are multiples of 2**-149 (e5m2's 2**-148)."""
    ex = get_exercise("ex06.fp8_choice")
    for seed in SEEDS:
        tiny = [c for c in random_cases("fp8_choice", seed) if c.args[1] < 448 * 2.0**-126]
        assert len(tiny) >= 6, seed
        for c, (_, counts) in zip(tiny, expected_outputs(ex, tiny)):
            x, amax = c.args
            assert amax >= 57344 * 2.0**-149 and fp8_scale(amax, "e4m3fn") < 2.0**-126
            assert _floored_counts(x, amax) != counts
    c = next(c for label, c in labelled("fp8_choice").items() if label.startswith("amax near 2**-132"))
    x, amax = c.args
    assert round(math.log2(amax)) == -132 and fp8_scale(amax, "e5m2") == 2.0**-148
    assert _floored_counts(x, amax) != ex.reference(x, amax)[1]


# ---- ex06.best_margin


def test_delayed_scales_are_the_engines_and_transformer_engines_reciprocal():
    """delayed_scales from the step amaxes equals DelayedScaler's scales on tensors with those amaxes,
    bit for bit (a step of zeros included: the floor 2**-149), and Transformer Engine's DelayedScaling
    scale_TE = (fp8_max / amax_h) / 2**margin (q = x * scale_TE) is its reciprocal to fp32 rounding."""
    rng = np.random.default_rng(7)
    for H in (1, 3, 5):
        for margin in (0, 2, 16):
            xs = [rng.standard_normal((3, 5)) * np.exp2(rng.uniform(-4, 4)) for _ in range(12)]
            xs[int(rng.integers(12))][...] = 0.0
            amaxes = [float(np.abs(x).max()) for x in xs]
            scales = delayed_scales(amaxes, H, margin)
            ds = DelayedScaler(Recipe("e4m3fn", PER_TENSOR, amax="delayed", history=H), margin=margin)
            assert scales == [float(ds.quantize(x)[1][0, 0]) for x in xs]
            for t, s in enumerate(scales):
                amax_h = max(amaxes[max(t - H, 0) : t]) if t else amaxes[0]
                if amax_h > 0:
                    scale_te = (E4M3_MAX / amax_h) / 2.0**margin
                    assert s * scale_te == pytest.approx(1.0, rel=2.0**-23)


def test_expected_losses_are_what_the_engine_loses_on_tensors_drawn_from_the_law():
    """Tensors drawn from each step's law (log2|x| uniform on [log2 lo, log2 amax], the amax itself
    among them, and the zeros), quantized by DelayedScaler: its clamped values (beyond 448 scale) and
    flushed ones (nonzero codes 0) agree with the expected counts within five standard deviations; and
    e4m3fn's rounding to 0 is at 2**-10 (a tie, to 0), by round_to and by an ml_dtypes cast."""
    rng = np.random.default_rng(8)
    ex = get_exercise("ex06.best_margin")
    for c in cases_for(ex, 0)[7:19]:
        steps, H = c.args
        steps = [(min(n, 20000), min(z, 2000), lo, amax) for n, z, lo, amax in steps]
        for m in (0, 3, 9):
            want = expected_losses(steps, H, m)
            ds = DelayedScaler(Recipe("e4m3fn", PER_TENSOR, amax="delayed", history=H), margin=m)
            got = [0, 0]
            for n, zeros, lo, amax in steps:
                mags = np.exp2(rng.uniform(math.log2(lo), math.log2(amax), n)) if n else np.zeros(0)
                if n:
                    mags[0] = amax
                x = np.concatenate([rng.choice([-1.0, 1.0], n) * mags, np.zeros(zeros)])
                q, s = ds.quantize(x.reshape(1, -1))
                got[0] += int(np.sum(np.abs(x / s) > E4M3_MAX))
                got[1] += int(np.sum((q == 0) & (x != 0)))
            for g, w in zip(got, want):
                assert abs(g - w) <= 5 * math.sqrt(w + 1) + 1, (c.label, m, got, want)
    v = np.array([2.0**-10, np.nextafter(2.0**-10, 1.0), 2.0**-11])
    assert list(round_to(v, "e4m3fn")) == [0.0, 2.0**-9, 0.0] and E4M3_FLUSH == 2.0**-10
    f32 = np.array([2.0**-10, 2.0**-10 * (1 + 2.0**-23)], dtype=np.float32)
    assert list(f32.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)) == [0.0, 2.0**-9]


def test_margin_cases_weigh_both_ends_with_every_seed():
    """At the answer no margin loses fewer and no smaller one as few; the random cases' answers range over
    at least four margins, 0 and 16 among them; many are not the first margin that clamps nothing, many
    clamp and flush at once, some tie exactly (at no loss), some flush a step whole, some have exact zeros
    and some float32-subnormal scales."""
    ex = get_exercise("ex06.best_margin")
    for seed in SEEDS:
        cases = random_cases("best_margin", seed)
        seen, margins = Counter(), Counter()
        for c, (m, n_clamped, n_flushed) in zip(cases, expected_outputs(ex, cases)):
            steps, H = c.args
            losses = [expected_losses(steps, H, k) for k in MARGINS]
            assert losses[m] == (n_clamped, n_flushed)
            totals = [sum(x) for x in losses]
            assert totals[m] == min(totals) and all(t > totals[m] for t in totals[:m])
            clamped = [x[0] for x in losses]
            flushed = [x[1] for x in losses]
            assert clamped == sorted(clamped, reverse=True) and flushed == sorted(flushed)
            margins[m] += 1
            no_clamp = next((k for k in MARGINS if clamped[k] == 0), None)
            seen["not the first that clamps nothing"] += m != no_clamp
            seen["clamps and flushes"] += n_clamped > 0 and n_flushed > 0
            seen["a tie"] += totals.count(totals[m]) > 1
            seen["zeros"] += any(z > 0 for _, z, _, _ in steps)
            scales = delayed_scales([a for *_, a in steps], H, m)
            seen["subnormal scale"] += any(0 < s < 2.0**-126 for s in scales)
            seen["a step flushed whole"] += any(
                n and lo > 0 and amax <= E4M3_FLUSH * s for (n, _, lo, amax), s in zip(steps, scales)
            )
        assert len(margins) >= 4 and margins[0] >= 2 and margins[16] >= 2, (seed, margins)
        assert len(seen) == 6 and all(v >= 3 for v in seen.values()), (seed, seen)
        assert seen["not the first that clamps nothing"] >= 10, (seed, seen)


def test_margin_labelled_cases_say_what_they_claim():
    ref = get_exercise("ex06.best_margin").reference
    by_start = {label.split(":")[0]: c.args for label, c in labelled("best_margin").items()}
    assert ref(*by_start["the chapter's spike (12x at step 4, H = 4) on 6 binades"]) == (4, 0.0, 0.0)
    spread = by_start["the same spike on 20 binades"]
    m, n_clamped, n_flushed = ref(*spread)
    assert m == 0 and n_clamped > 0 and expected_losses(*spread, 4)[0] == 0
    assert ref(*by_start["a steady growth of 1.3x per step on 3 binades"]) == (1, 0.0, 0.0)
    steps, H = by_start["a first step of zeros only"]
    assert all(expected_losses(steps, H, m)[0] == steps[1][0] for m in MARGINS)
    steps, H = by_start["80% exact zeros on 24 binades"]
    assert sum(z for _, z, _, _ in steps) == 4 * sum(n for n, *_ in steps)
    assert ref(*by_start["a spike of 2**15.2 at the last step on a narrow band"]) == (16, 0.0, 0.0)
    steps, H = by_start["amaxes near 2**-130"]
    assert all(s < 2.0**-126 for s in delayed_scales([a for *_, a in steps], H, 1)) and ref(steps, H)[0] == 1
    steps, H = by_start["margin 3 clamps a step of 1000 whole, margins 4 to 16 flush one of 1000 whole"]
    losses = [expected_losses(steps, H, m) for m in MARGINS]
    assert losses[3] == (1000.0, 0.0) and all(losses[m] == (0.0, 1000.0) for m in MARGINS[4:])
    assert all(sum(losses[m]) > 1000 for m in range(3)) and ref(steps, H) == (3, 1000.0, 0.0)
    steps, H = by_start["a step of 500 flushed whole from margin 2, a spike of 2000 clamped whole up to margin 5"]
    totals = [sum(expected_losses(steps, H, m)) for m in MARGINS]
    assert totals == [2000.0] * 2 + [2500.0] * 4 + [500.0] * 11 and ref(steps, H) == (6, 0.0, 500.0)


def _first_rise(totals):
    """A search that stops at the first margin whose loss rises (a wrong rule)."""
    best = 0
    for m in MARGINS[1:]:
        if totals[m] > totals[best]:
            break
        best = m if totals[m] < totals[best] else best
    return best


def test_margin_random_cases_hold_ties_split_differently_and_losses_that_rise_then_fall_lower():
    """With every seed, at least four random cases where two margins lose exactly as much, one by
    clamping and one by flushing, and the tie-break by fewer clamped values names another margin than
    the smallest; and at least four where the loss rises with the margin and then falls lower, so
    that a search that stops at the first rise misses."""
    for seed in SEEDS:
        split = bumpy = 0
        for c in random_cases("best_margin", seed):
            steps, H = c.args
            losses = [expected_losses(steps, H, m) for m in MARGINS]
            totals = [sum(x) for x in losses]
            best = min(MARGINS, key=lambda m: (totals[m], m))
            split += min(MARGINS, key=lambda m: (totals[m], losses[m][0], m)) != best
            bumpy += _first_rise(totals) != best
        assert split >= 4 and bumpy >= 4, (seed, split, bumpy)


def test_margin_compare_refuses_odd_returns_with_a_reason_and_never_raises():
    """A bool or float margin, counts as strings or bools, a hostile tuple: each a reason naming what
    was returned and what is accepted; numpy integers and floats, and a list, pass."""
    ex = get_exercise("ex06.best_margin")
    c = next(c for c in cases_for(ex, 0) if ex.reference(*c.args)[0] == 1)
    m, cl, fl = want = ex.reference(*c.args)

    class Hostile(tuple):
        def __len__(self):
            raise RuntimeError("no")

    assert ex.compare((np.int64(m), np.float64(cl), fl), want) is None
    assert ex.compare([m, cl, fl], want) is None
    for got, words in (
        ((True, cl, fl), ("bool", "an int")),
        ((1.0, cl, fl), ("float", "an int")),
        ((m, repr(cl), fl), ("str", "a float")),
        ((m, cl, True), ("bool", "a float")),
        (Hostile((m, cl, fl)), ("Hostile",)),
        ((m, cl), ("length 2",)),
    ):
        reason = ex.compare(got, want)
        assert isinstance(reason, str) and all(w in reason for w in words), (got, reason)


# ---- the models of the granularity exercise, against a block-by-block loop ----------------------


def _loop_blocks(x, block):
    M, K = x.shape
    br, bc = M if block[0] is None else block[0], K if block[1] is None else block[1]
    for i in range(0, M, br):
        for j in range(0, K, bc):
            yield x[i : i + br, j : j + bc]


def _loop_noise_model(x, block):
    noise = 0.0
    for b in _loop_blocks(x, block):
        step = np.max(np.abs(b)) / 127
        noise += float(np.sum(np.where(np.abs(b) < step / 2, b**2, step**2 / 12)))
    return 10 * math.log10(float(np.sum(x**2)) / noise)


def _loop_naive_model(x, block):
    noise = sum(b.size * (np.max(np.abs(b)) / 127) ** 2 / 12 for b in _loop_blocks(x, block))
    return 10 * math.log10(float(np.sum(x**2)) / noise)


def _loop_crest_factor(x, block):
    dbs = []
    for b in _loop_blocks(x, block):
        rms = math.sqrt(float(np.mean(b**2)))
        if rms > 0:
            dbs.append(6.02 * 8 + 4.77 - 20 * math.log10(float(np.max(np.abs(b))) / rms))
    return float(np.mean(dbs))


def test_the_models_computed_on_all_blocks_at_once_agree_with_a_loop_over_the_blocks():
    """The three models work on every block at once (a reshape; blocks cut short at an edge padded
    with NaN); a loop over the blocks, one numpy call each, agrees to rounding (their sums run in
    another order), with zeros, blocks of zeros and shapes no block divides."""
    rng = np.random.default_rng(6)
    blocks = [b for _, b in GRANULARITIES] + [(3, 7), (128, 128), (5, None), (None, 9)]
    for _ in range(60):
        M, K = int(rng.integers(1, 70)), int(rng.integers(1, 300))
        x = rng.standard_normal((M, K)) * (rng.random((M, K)) < 0.7)
        x[0, 0] = 1.0
        for block in blocks:
            for ours, loop in (
                (noise_model_sqnr_db, _loop_noise_model),
                (naive_model_sqnr_db, _loop_naive_model),
                (crest_factor_sqnr_db, _loop_crest_factor),
            ):
                assert ours(x, block) == pytest.approx(loop(x, block), rel=0, abs=1e-9), (ours.__name__, M, K, block)


#: fp8_choice's answers that round with a library rather than find the boundaries: each names a
#: module outside the exercise's tools and scores nothing, however right its counts.
FP8_CHOICE_BY_LIBRARY = {
    # ml_dtypes' fp8 scalar types round a float64 once (its array astype goes through float32): right
    # counts at every seed, without a boundary found
    "ml_dtypes": """
def fp8_choice(x, amax):
    import ml_dtypes

    x = np.asarray(x, dtype=np.float64)
    counts = {}
    for fmt, top, T in (
        ("e4m3fn", 448.0, ml_dtypes.float8_e4m3fn),
        ("e5m2", 57344.0, ml_dtypes.float8_e5m2),
    ):
        scale = float(np.float32(amax / top))
        under = over = 0
        for xi, v in zip(x.ravel().tolist(), (x / scale).ravel().tolist()):
            r = float(T(v))
            if xi != 0 and r == 0:
                under += 1
            elif not abs(r) <= top:
                over += 1
        counts[fmt] = (under, over)
    lost = {f: u + o for f, (u, o) in counts.items()}
    n = int(np.count_nonzero(x))
    return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts
""",
    # the same types imported by name
    "float8_e4m3fn": """
def fp8_choice(x, amax):
    from ml_dtypes import float8_e4m3fn, float8_e5m2

    x = np.asarray(x, dtype=np.float64)
    counts = {}
    for fmt, top, T in (("e4m3fn", 448.0, float8_e4m3fn), ("e5m2", 57344.0, float8_e5m2)):
        scale = float(np.float32(amax / top))
        r = np.array([float(T(v)) for v in (x / scale).ravel().tolist()])
        counts[fmt] = (int(np.sum((x.ravel() != 0) & (r == 0))), int(np.sum(~(np.abs(r) <= top))))
    lost = {f: u + o for f, (u, o) in counts.items()}
    n = int(np.count_nonzero(x))
    return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts
""",
    # the underflow by torch's cast to fp8 (through float32), the overflow worked out
    "torch": """
def fp8_choice(x, amax):
    import torch

    x = np.asarray(x, dtype=np.float64)
    counts = {}
    for fmt, top, T in (("e4m3fn", 448.0, torch.float8_e4m3fn), ("e5m2", 57344.0, torch.float8_e5m2)):
        scale = float(np.float32(amax / top))
        v = np.abs(x / scale)
        r = torch.from_numpy(v).to(T).double().numpy()
        mid = {"e4m3fn": 464.0, "e5m2": 61440.0}[fmt]
        over = int(np.sum(v > mid)) if fmt == "e4m3fn" else int(np.sum(v >= mid))
        counts[fmt] = (int(np.sum((x != 0) & (r == 0))), over)
    lost = {f: u + o for f, (u, o) in counts.items()}
    n = int(np.count_nonzero(x))
    return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts
""",
}

#: An honest answer of numpy alone, unlike the solution's: it rounds v itself (np.rint ties to even
#: on v over the spacing of its binade, the subnormals' below the smallest normal).
FP8_CHOICE_BY_RINT = """
def fp8_choice(x, amax):
    x = np.asarray(x, dtype=np.float64)
    counts = {}
    for fmt, top, emin, man in (("e4m3fn", 448.0, -6, 3), ("e5m2", 57344.0, -14, 2)):
        scale = float(np.float32(amax / top))
        v = x / scale
        e = np.frexp(np.abs(v))[1] - 1
        q = np.ldexp(1.0, np.maximum(e, emin) - man)
        r = np.rint(v / q) * q
        counts[fmt] = (int(np.sum((x != 0) & (r == 0))), int(np.sum(np.abs(r) > top)))
    lost = {f: u + o for f, (u, o) in counts.items()}
    n = int(np.count_nonzero(x))
    return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts
"""


def _notebook_function(source: str):
    """fp8_choice defined from ``source`` as a notebook cell defines it, in the notebook's namespace."""
    ns = SPEC.namespace()
    exec(compile(source, "<cell>", "exec"), ns)
    return ns["fp8_choice"]


@pytest.mark.parametrize("library", sorted(FP8_CHOICE_BY_LIBRARY))
def test_fp8_choice_refuses_the_libraries_that_round(library):
    """ml_dtypes' fp8 scalar types round once, so an answer built on them has the right counts (the
    check's values would pass it); it scores nothing because ml_dtypes is not among the exercise's
    tools, and the report names what it used. torch, whose cast rounds twice, neither."""
    from nbhelpers.checks import run_check

    fn = _notebook_function(FP8_CHOICE_BY_LIBRARY[library])
    result = run_check("ex06.fp8_choice", fn, seed=0)
    assert not result.passed and result.points == 0, str(result)
    assert "tools do not include" in result.error and library in result.error, result.error


def test_fp8_choice_scalar_casts_are_right_and_array_casts_round_twice():
    """Why the scalar types are refused rather than caught by the values: a value one float64 step
    above the tie between 1 and 1.125 rounds up, once, in ml_dtypes' scalar constructor, and down
    through float32 in its array cast and torch's; the answer on ml_dtypes' scalars agrees with the
    reference on every case of a seed."""
    v = 1 + 2**-4 + 2**-52
    assert float(ml_dtypes.float8_e4m3fn(v)) == 1.125 == float(round_to(v, "e4m3fn"))
    assert np.array([v]).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)[0] == 1.0
    assert torch.tensor([v], dtype=torch.float64).to(torch.float8_e4m3fn).double().item() == 1.0
    ex = get_exercise("ex06.fp8_choice")
    cheat = _notebook_function(FP8_CHOICE_BY_LIBRARY["ml_dtypes"])
    cases = cases_for(ex, 0)
    for c, expected in zip(cases, expected_outputs(ex, cases)):
        assert cheat(*c.args) == expected


def test_fp8_choice_passes_honest_numpy_answers():
    """The tools leave what an honest answer needs: the solution and an answer that rounds with
    np.rint pass with the public and the hidden seed."""
    from nbhelpers.checks import run_check

    for fn in (solution_functions()["fp8_choice"], _notebook_function(FP8_CHOICE_BY_RINT)):
        for seed in (0, SPEC.hidden_seed):
            result = run_check("ex06.fp8_choice", fn, seed=seed)
            assert result.passed, str(result)


def test_fp8_choice_takes_the_counts_as_lists_or_tuples_and_names_the_key_that_differs():
    """A right answer whose counts are lists (or numpy integers) passes; a wrong count is named by
    its format and position, a missing format by its key."""
    from nbhelpers.checks import run_check

    sol = solution_functions()["fp8_choice"]

    def as_lists(x, amax):
        fmt, counts = sol(x, amax)
        return fmt, {k: [np.int64(v) for v in c] for k, c in counts.items()}

    for seed in (0, SPEC.hidden_seed):
        assert run_check("ex06.fp8_choice", as_lists, seed=seed).passed

    def one_off(x, amax):
        fmt, counts = sol(x, amax)
        u, o = counts["e5m2"]
        return fmt, {**counts, "e5m2": (u + 1, o)}

    result = run_check("ex06.fp8_choice", one_off, seed=0)
    assert not result.passed and "key 'e5m2': element 0" in str(result), str(result)

    def one_key(x, amax):
        fmt, counts = sol(x, amax)
        return fmt, {"e4m3fn": counts["e4m3fn"]}

    result = run_check("ex06.fp8_choice", one_key, seed=0)
    assert not result.passed and "missing 'e5m2'" in str(result), str(result)


#: fp8_choice's answer on ml_dtypes' scalar types without naming ml_dtypes in the function: the
#: types come from fp8 values held in globals (a scalar, an array's dtype), made in another cell.
FP8_CHOICE_BY_HELD_TYPES = """
import ml_dtypes

E4_ZERO = ml_dtypes.float8_e4m3fn(0.0)
E5_ARRAY = np.zeros(1, dtype=ml_dtypes.float8_e5m2)

def fp8_choice(x, amax):
    x = np.asarray(x, dtype=np.float64)
    counts = {}
    for fmt, top, T in (("e4m3fn", 448.0, type(E4_ZERO)), ("e5m2", 57344.0, E5_ARRAY.dtype.type)):
        scale = float(np.float32(amax / top))
        r = np.array([float(T(v)) for v in (x / scale).ravel().tolist()])
        counts[fmt] = (int(np.sum((x.ravel() != 0) & (r == 0))), int(np.sum(~(np.abs(r) <= top))))
    lost = {f: u + o for f, (u, o) in counts.items()}
    n = int(np.count_nonzero(x))
    return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts
"""


def test_fp8_choice_refuses_fp8_types_held_in_globals():
    """The types an fp8 scalar or an fp8 array in a global hands over (``type(x)(v)``,
    ``a.dtype.type(v)``) are ml_dtypes' as much as the module's name is: the answer scores nothing."""
    from nbhelpers.checks import run_check

    result = run_check("ex06.fp8_choice", _notebook_function(FP8_CHOICE_BY_HELD_TYPES), seed=0)
    assert not result.passed and result.points == 0, str(result)
    assert "tools do not include" in result.error, result.error


#: fp8_choice's answer on ml_dtypes' scalar types reached through numpy by a dtype's name: numpy's
#: table of type names holds every type a package registers, and a string names no module.
FP8_CHOICE_BY_DTYPE_NAME = """
def fp8_choice(x, amax):
    x = np.asarray(x, dtype=np.float64)
    counts = {}
    for fmt, top in (("e4m3fn", 448.0), ("e5m2", 57344.0)):
        T = np.dtype("float8_" + fmt).type
        scale = float(np.float32(amax / top))
        r = np.array([float(T(v)) for v in (x / scale).ravel().tolist()])
        counts[fmt] = (int(np.sum((x.ravel() != 0) & (r == 0))), int(np.sum(~(np.abs(r) <= top))))
    lost = {f: u + o for f, (u, o) in counts.items()}
    n = int(np.count_nonzero(x))
    return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts
"""


@pytest.mark.parametrize(
    "spelling",
    [
        'np.dtype("float8_" + fmt).type',
        'np.zeros(1, "float8_" + fmt).dtype.type',
        'np.dtype([("v", "float8_" + fmt)])["v"].type',
    ],
)
def test_fp8_choice_refuses_fp8_types_reached_by_their_names(spelling):
    """While the watch is on, numpy's table of type names leaves out the types of packages the
    exercise's tools do not include, so a dtype's name does not reach ml_dtypes: the answer scores
    nothing, the report names the type, and the table is whole again after the check."""
    from nbhelpers.checks import run_check

    source = FP8_CHOICE_BY_DTYPE_NAME.replace('np.dtype("float8_" + fmt).type', spelling)
    fn = _notebook_function(source)
    ex = get_exercise("ex06.fp8_choice")
    cases = cases_for(ex, 0)
    for c, expected in zip(cases, expected_outputs(ex, cases)):  # unwatched, it is right
        assert fn(*c.args) == expected
    result = run_check("ex06.fp8_choice", fn, seed=0)
    assert not result.passed and result.points == 0, str(result)
    assert "tools do not include" in result.error and "ml_dtypes.float8_e" in result.error, result.error
    assert np.dtype("float8_e4m3fn").type is ml_dtypes.float8_e4m3fn  # put back
    assert np.dtype("bfloat16").type is ml_dtypes.bfloat16


def test_fp8_choice_refuses_an_array_cast_to_fp8_by_its_name():
    """Both counts from an ml_dtypes array cast of x / scale, its dtype named by a string (through
    float32, rounded twice: it miscounted where the cases sit one float64 step from a tie): the name
    finds no type while the watch is on, and the answer scores nothing, naming the type."""
    from nbhelpers.checks import run_check

    sol = solution_functions()["fp8_choice"]
    source = inspect.getsource(sol).replace(
        "        under = int(np.sum(nonzero & (v <= tiny / 2)))\n",
        "        r = (x / scale).astype(np.dtype('float8_' + fmt)).astype(np.float64)\n"
        "        under = int(np.sum(nonzero & (r == 0)))\n",
    )
    assert "astype(np.dtype('float8_' + fmt))" in source
    result = run_check("ex06.fp8_choice", _notebook_function(source), seed=0)
    assert not result.passed and result.points == 0, str(result)
    assert "ml_dtypes.float8_e4m3fn, named 'float8_e4m3fn'" in result.error, result.error


def test_fp8_choice_refuses_fp8_types_unpickled(tmp_path):
    """A pickled object array of ml_dtypes' types, written in another cell and loaded by np.load
    inside the function, names ml_dtypes to pickle: the audit refuses ``load`` by its name, the
    watch notes the unpickling, and the answer scores nothing."""
    from nbhelpers.checks import run_check

    path = tmp_path / "types.npy"
    held = np.empty(2, dtype=object)
    held[:] = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
    np.save(path, held, allow_pickle=True)
    source = FP8_CHOICE_BY_DTYPE_NAME.replace(
        'np.dtype("float8_" + fmt).type', f'np.load({str(path)!r}, allow_pickle=True)[fmt != "e4m3fn"]'
    )
    result = run_check("ex06.fp8_choice", _notebook_function(source), seed=0)
    assert not result.passed and result.points == 0, str(result)
    assert "unpickled" in result.error and "ml_dtypes" in result.error, result.error
