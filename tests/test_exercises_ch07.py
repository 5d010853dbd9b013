"""Chapter 07's exercises beyond the table (test_exercises.py): the MX exponent's reference against
both rules' definitions in exact arithmetic, and the solution against torchao's MX quantization
(FLOOR and RCEIL); the largest element values the statement lists against the formats; the
block-scaled GEMM's check accepting every evaluation in fp32 or better and its bound derived from
the fp32 roundings, with the scales applied in the epilogue missing by orders of magnitude; the
promotion cases keeping their margin and the notebook's napkin numbers; the two-level scales'
reference against torchao's nvfp4_quantize (NVFP4's parameters) and against what the statement
says each scale is for; the labelled cases say what they claim."""

import math
import re
from collections import Counter
from fractions import Fraction

import ml_dtypes
import nbformat
import numpy as np
import pytest
from exercise_table import CHAPTERS
from helpers import ROOT, SolutionNotebook

from nbhelpers.answer_keys import ch07
from nbhelpers.answer_keys.ch07 import MX_ELEMENTS
from nbhelpers.checks import cases_for, expected_outputs, get_exercise, run_check
from nbhelpers.formats import get_format
from nbhelpers.recipes import Recipe
from nbhelpers.rounding import round_to
from nbhelpers.scaled_gemm import DEEPSEEK_V3_PROMOTE_EVERY, blockwise_scaled_mm
from nbhelpers.scaling import bytes_per_element

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 7)
SEEDS = (0, SPEC.hidden_seed, 12345)


def solution() -> SolutionNotebook:
    return SolutionNotebook(SPEC.solution, SPEC.namespace)


def solution_functions() -> dict:
    return solution().functions()


def statement(marker: str) -> str:
    nb = nbformat.read(ROOT / "solutions" / SPEC.solution, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "markdown" and marker in c.source)


# ---- ex07.mx_shared_exponent


def floor_log2(v: Fraction) -> int:
    """The largest k with 2**k <= v (v > 0), exactly."""
    k = v.numerator.bit_length() - v.denominator.bit_length()
    while Fraction(2) ** k > v:
        k -= 1
    while Fraction(2) ** (k + 1) <= v:
        k += 1
    return k


def fp32_nearest(v: Fraction) -> Fraction:
    """v >= 0 rounded to float32, to nearest, ties to even (subnormals included), exactly."""
    if v == 0:
        return v
    quantum = Fraction(2) ** (max(floor_log2(v), -126) - 23)
    n, rest = divmod(v, quantum)
    if rest * 2 > quantum or (rest * 2 == quantum and n % 2):
        n += 1
    return n * quantum


def exact_exponent(block, element, rule) -> int:
    """Both rules from their definitions in exact arithmetic. floor (OCP MX v1.0): the largest k
    with 2**k <= amax, minus emax_elem (found the same way from the element's max). rceil: d = the
    exact quotient amax / max rounded once to float32, E the smallest integer with 2**E >= d. At
    least -127; -127 for a zero block or a quotient that rounds to 0."""
    amax = max((abs(Fraction(float(v))) for v in block), default=Fraction(0))
    elem_max = Fraction(get_format(element).max)
    if amax == 0:
        return -127
    if rule == "floor":
        return max(floor_log2(amax) - floor_log2(elem_max), -127)
    d = fp32_nearest(amax / elem_max)
    if d == 0:
        return -127
    k = floor_log2(d)
    return max(k if Fraction(2) ** k == d else k + 1, -127)


def test_mx_reference_is_the_definition_of_both_rules():
    ex = get_exercise("ex07.mx_shared_exponent")
    for seed in SEEDS:
        for c in cases_for(ex, seed):
            e = ex.reference(*c.args)
            assert e == exact_exponent(*c.args), c
            assert -127 <= e <= 127
            assert float(ml_dtypes.float8_e8m0fnu(2.0**e)) == 2.0**e  # an e8m0 value


def test_statement_lists_the_formats_largest_values():
    """The statement types the largest value of each element format; they must be the formats'."""
    text = statement("The largest values:")
    listed = dict(re.findall(r"(e\dm\dfn|e5m2) (\d+(?:\.\d+)?)", text.split("The largest values:")[1]))
    assert set(listed) == set(MX_ELEMENTS)
    for name, value in listed.items():
        assert float(value) == get_format(name).max


def _torchao_mx_exponents(x: np.ndarray, element: str, rule: str) -> np.ndarray:
    torch = pytest.importorskip("torch")
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    config = pytest.importorskip("torchao.prototype.mx_formats.config")
    elem = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e2m1fn": torch.float4_e2m1fn_x2}[element]
    mode = {"floor": config.ScaleCalculationMode.FLOOR, "rceil": config.ScaleCalculationMode.RCEIL}[rule]
    codes, _ = mx.to_mx(torch.from_numpy(x), elem, 32, scaling_mode=mode)
    return codes.view(torch.uint8).numpy().astype(np.int64).ravel() - 127


def _float32_blocks(rule: str) -> np.ndarray:
    """The cases' blocks of this rule as float32 rows of 32 (zero-padded; those that overflow
    float32 left out)."""
    rows = []
    for c in cases_for("ex07.mx_shared_exponent", 0) + cases_for("ex07.mx_shared_exponent", SPEC.hidden_seed):
        if c.args[2] != rule:
            continue
        with np.errstate(over="ignore"):
            b = c.args[0].astype(np.float32)
        if np.isfinite(b).all():
            rows.append(np.concatenate([b, np.zeros(32 - b.size, np.float32)]))
    return np.stack(rows)


@pytest.mark.parametrize("element", ["e4m3fn", "e5m2", "e2m1fn"])
def test_mx_floor_solution_matches_torchao(element):
    """torchao.prototype.mx_formats.to_mx (ScaleCalculationMode.FLOOR) on the cases' blocks as
    float32 (torchao takes float32; the test extra installs it, and the test skips only where it
    is not installed)."""
    sol = solution_functions()["mx_shared_exponent"]
    x = _float32_blocks("floor")
    theirs = _torchao_mx_exponents(x, element, "floor")
    ours = np.array([sol(r.astype(np.float64), element, "floor") for r in x])
    np.testing.assert_array_equal(ours, theirs)
    assert len(x) > 100


@pytest.mark.parametrize("element", ["e4m3fn", "e5m2", "e2m1fn"])
def test_mx_rceil_reference_and_solution_match_torchao(element):
    """torchao's to_mx with ScaleCalculationMode.RCEIL on the cases' blocks as float32, compared
    with the reference and the solution. torchao 0.18's eager RCEIL (the path on a CPU) takes
    ceil(torch.log2(d)) in float32: a few float32 steps above a power of two, log2(d) rounds to the
    integer and its exponent is one below the exact rule's (the cvt.rp instruction of its GPU path,
    and cuBLAS, round up exactly). Exactly those blocks, d = fp32(amax / max) above 2**k by at most
    2**-16 relative, are left out of the comparison; there torchao's exponent must be the exact one
    or one below it."""
    ref = get_exercise("ex07.mx_shared_exponent").reference
    sol = solution_functions()["mx_shared_exponent"]
    x = _float32_blocks("rceil")
    theirs = _torchao_mx_exponents(x, element, "rceil")
    ours = np.array([ref(r.astype(np.float64), element, "rceil") for r in x])
    assert np.array_equal(ours, [sol(r.astype(np.float64), element, "rceil") for r in x])
    d = np.array([np.float32(np.abs(r).max().astype(np.float64) / get_format(element).max) for r in x], np.float64)
    mant = np.frexp(d)[0]  # d = mant * 2**e, mant in [0.5, 1)
    above = (d > 0) & (mant > 0.5) & (mant <= 0.5 * (1 + 2.0**-16))  # just above a power of two
    np.testing.assert_array_equal(ours[~above], theirs[~above])
    assert np.isin(theirs[above] - ours[above], [0, -1]).all()
    assert len(x) > 150 and (~above).sum() > 120


def test_mx_labelled_cases_say_what_they_claim():
    by_label = {c.label: c.args for c in cases_for("ex07.mx_shared_exponent", 0) if c.label}
    ref = get_exercise("ex07.mx_shared_exponent").reference
    block, element, rule = by_label["MXFP4, amax 7: floor(log2 7) - 2 = 0"]
    assert ref(block, element, rule) == 0
    assert float(ml_dtypes.float4_e2m1fn(min(7.0 / 2.0**0, 6.0))) == 6.0  # the 7 is stored as 6
    block, *_ = by_label["amax just below 8: floor(log2) is 2, not 3"]
    assert math.log2(block.max()) == 3.0 and math.frexp(block.max())[1] - 1 == 2  # math.log2 rounds up here
    assert ref(*by_label["all zeros: the smallest exponent, -127"]) == -127
    assert ref(*by_label["below e8m0's range: raised to -127"]) == -127
    args = by_label["RCEIL, MXFP4 amax 7: ceil(log2(7 / 6)) = 1"]
    assert ref(*args) == 1 and 7.0 / 2 <= 6 and float(ml_dtypes.float4_e2m1fn(7.0 / 2)) == 4.0  # no clip
    args = by_label["RCEIL, MXFP4 amax 5: 0, where ceil(log2 5) - 2 = 1 leaves e2m1's top binade unused"]
    assert ref(*args) == 0 and math.ceil(math.log2(5)) - 2 == 1
    args = by_label["RCEIL at a power of two: amax 6 in e2m1fn, E = 0"]
    assert ref(*args) == 0 and math.frexp(6.0 / 6.0)[1] == 1  # floor(log2 d) + 1 would be 1
    block, element, rule = by_label["one float64 step above 56 in e4m3fn: fp32(amax / 448) is 2**-3, E = -3"]
    assert block.max() / 448 > 2.0**-3 and float(np.float32(block.max() / 448)) == 2.0**-3
    assert ref(block, element, rule) == -3
    block, element, rule = by_label["the quotient one float32 step above 2**5: E = 6 (a float32 log2 rounds to 5)"]
    d = np.float32(block.max() / 6)
    assert d == np.nextafter(np.float32(32), np.float32(64)) and np.ceil(np.log2(d)) == 5
    assert ref(block, element, rule) == 6
    block, element, rule = by_label["RCEIL, fp32(amax / 448) underflows to 0: -127"]
    assert block.max() > 0 and np.float32(block.max() / 448) == 0 and ref(block, element, rule) == -127
    block, element, rule = by_label["RCEIL, the quotient an fp32 subnormal: -127"]
    assert 0 < np.float32(block.max() / 448) < 2.0**-126 and ref(block, element, rule) == -127
    assert ref(*by_label["RCEIL, the largest exponent: 127"]) == 127


def test_mx_cases_reach_the_hard_regions():
    """The random cases alone (every seed) hold amaxes one float64 step below a power of two and
    exponents clamped at -127 for the floor rule; for RCEIL quotients exactly at a power of two,
    quotients above one that fp32 rounds down onto it, quotients a few float32 steps above one
    (where a float32 log2 fails), and quotients that underflow fp32."""
    for seed in SEEDS:
        cases = [c for c in cases_for("ex07.mx_shared_exponent", seed) if not c.label]
        floor = [(np.abs(c.args[0]).max(), c.args[1]) for c in cases if c.args[2] == "floor"]
        rceil = [(np.abs(c.args[0]).max(), c.args[1]) for c in cases if c.args[2] == "rceil"]
        below_pow2 = sum(a > 0 and math.log2(a) == math.ceil(math.log2(a)) != math.frexp(a)[1] - 1 for a, _ in floor)
        clamped = sum(a > 0 and math.frexp(a)[1] - 1 - get_format(el).emax < -127 for a, el in floor)
        zeros = sum(not a for a, _ in floor + rceil)
        q64 = [(a / get_format(el).max, float(np.float32(a / get_format(el).max))) for a, el in rceil if a > 0]
        at_pow2 = sum(d == 2.0 ** math.floor(math.log2(d)) for _, d in q64 if d > 0)
        rounded_onto = sum(q != d and d > 0 and math.frexp(d)[0] == 0.5 and q > d for q, d in q64)
        f32_log2 = sum(
            d > 0 and np.ceil(np.log2(np.float32(d))) != exact
            for (q, d), exact in zip(q64, [math.frexp(d)[1] - (math.frexp(d)[0] == 0.5) for _, d in q64])
        )
        underflow = sum(d == 0 for _, d in q64)
        counts = (below_pow2, clamped, zeros, at_pow2, rounded_onto, f32_log2, underflow)
        assert below_pow2 >= 1 and min(counts[1:]) >= 2, (seed, counts)


# ---- ex07.blockwise_scaled_gemm


SOL_LINE = "acc = acc + P[b].astype(np.float32) * scale"


def scaled_f64(P, sA, sB, bn):
    """(nk, M, N): each K-block's partial times its two scales, in float64."""
    sb = np.repeat(sB, bn, axis=1)[:, : P.shape[2]]
    return sA.T[:, :, None] * sb[:, None, :] * P


def also_right() -> dict:
    """Evaluations in fp32 or better that the check must accept."""
    sol = solution()
    name = "blockwise_scaled_gemm"
    return {
        "the solution: acc += P_b * (sA * sB)": solution_functions()[name],
        "the engine: fl32(fl32(P_b * sA) * sB)": ch07.blockwise_scaled_gemm_engine,
        "two multiplies, B's scale first": sol.mutated(
            name, SOL_LINE, "acc = acc + (P[b].astype(np.float32) * sB_cols[b : b + 1, :]) * sA32[:, b : b + 1]"
        ),
        "a float64 accumulator": sol.mutated(
            name, "acc = np.zeros((M, N), dtype=np.float32)", "acc = np.zeros((M, N), dtype=np.float64)"
        ),
        "float64 throughout, summed pairwise by numpy": lambda *a: scaled_f64(*a).sum(axis=0),
        "fp32 throughout, summed by numpy": lambda *a: scaled_f64(*a).astype(np.float32).sum(axis=0),
    }


@pytest.mark.parametrize("variant", list(also_right()))
def test_blockwise_check_accepts_every_evaluation_in_fp32_or_better(variant):
    fn = also_right()[variant]
    for seed in (0, SPEC.hidden_seed):
        result = run_check("ex07.blockwise_scaled_gemm", fn, seed=seed, watch=False)  # variants of the reference
        assert result.passed, str(result)


def test_blockwise_partials_are_the_codes_products_rounded_to_fp32():
    """The cases' partials: the exact float64 partial product of e4m3fn codes over each K-block
    (checked against exact rationals on small blocks), rounded to fp32 once."""
    qA = round_to(np.random.default_rng(3).standard_normal((3, 70)) * 40, "e4m3fn")
    qB = round_to(np.random.default_rng(4).standard_normal((70, 2)) * 40, "e4m3fn")
    P = ch07.partial_products(qA, qB, 32)
    assert P.shape == (3, 3, 2)
    for b, k0 in enumerate((0, 32, 64)):
        for i in range(3):
            for j in range(2):
                exact = sum(
                    Fraction(float(a)) * Fraction(float(c)) for a, c in zip(qA[i, k0 : k0 + 32], qB[k0 : k0 + 32, j])
                )
                assert P[b, i, j] == float(np.float32(float(exact)))
    for c in cases_for("ex07.blockwise_scaled_gemm", 0):
        assert (c.args[0].astype(np.float32).astype(np.float64) == c.args[0]).all()


def test_blockwise_engine_is_the_promotion_of_the_library_gemm():
    """The engine on the partials is :func:`nbhelpers.scaled_gemm.blockwise_scaled_mm` on the codes,
    bit for bit: the check's accepted answer is the library's evaluation."""
    rng = np.random.default_rng(11)
    for M, K, N, bk, bn in ((3, 256, 4, 128, 128), (2, 100, 5, 32, 2), (4, 96, 7, 32, 3)):
        qA, qB = ch07._e4m3(rng, (M, K)), ch07._e4m3(rng, (K, N))
        nk, nn = -(-K // bk), -(-N // bn)
        sA, sB = ch07._block_scales(rng, (M, nk), 6.0), ch07._block_scales(rng, (nk, nn), 6.0)
        recipes = (Recipe("e4m3fn", (1, bk)), Recipe("e4m3fn", (bk, bn)))
        lib = blockwise_scaled_mm(qA, qB, sA, sB, recipes=recipes)
        eng = ch07.blockwise_scaled_gemm_engine(ch07.partial_products(qA, qB, bk), sA, sB, bn)
        np.testing.assert_array_equal(lib, eng)


def test_blockwise_allowed_error_is_derived_from_fp32():
    """The reference's C against the exact rational sum, and its allowed error against
    gamma_(nk + 2) * sum_b |sA sB P_b| with u = 2**-24, plus float64's own error on C
    (gamma_(nk + 2), u = 2**-53). The solution's error is a real share of the allowance somewhere
    (it is not vacuous)."""
    ex = get_exercise("ex07.blockwise_scaled_gemm")
    sol = solution_functions()["blockwise_scaled_gemm"]
    cases = cases_for(ex, SPEC.hidden_seed)
    used = []

    def gamma(n, u):
        return n * u / (1 - n * u)

    for c, (C, allowed) in zip(cases, expected_outputs(ex, cases)):
        P, sA, sB, bn = c.args
        nk = P.shape[0]
        sizes = np.abs(scaled_f64(*c.args)).sum(axis=0)
        np.testing.assert_allclose(
            allowed, (gamma(nk + 2, 2.0**-24) + gamma(nk + 2, 2.0**-53)) * sizes, rtol=1e-12, atol=0
        )
        for i in range(min(2, C.shape[0])):
            for j in range(min(2, C.shape[1])):
                exact = sum(
                    Fraction(float(sA[i, b])) * Fraction(float(sB[b, j // bn])) * Fraction(float(P[b, i, j]))
                    for b in range(nk)
                )
                assert abs(Fraction(float(C[i, j])) - exact) <= Fraction(float(allowed[i, j])) / 2**20
        err = np.abs(sol(*c.args) - C)
        used.append(float(np.max(np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1), 0))))
    assert max(used) > 0.01, max(used)


@pytest.mark.parametrize("which", ["mean", "first"])
def test_blockwise_scales_in_the_epilogue_miss_by_orders_of_magnitude(which):
    """Scales that vary along K applied once to the accumulator (the mean of each row's and
    column's block scales, or the first K-block's) miss the exact product by at least 1000 times
    the allowed error on most cases whose scales vary (more than one K-block, spread >= 2**6)."""
    wrong = next(
        solution().mutated(name, old, new)
        for name, old, new in SPEC.wrong
        if name == "blockwise_scaled_gemm"
        and "return (acc * " in new
        and ("mean" in new) == (which == "mean")
        and "sum(" not in new
    )
    ex = get_exercise("ex07.blockwise_scaled_gemm")
    ratios = []
    for seed in (0, SPEC.hidden_seed):
        cases = [c for c in cases_for(ex, seed) if not c.label]
        for c, (C, allowed) in zip(cases, expected_outputs(ex, cases)):
            sA, sB = c.args[1], c.args[2]
            if sA.shape[1] < 2 or max(sA.max() / sA.min(), sB.max() / sB.min()) < 2.0**6:
                continue
            ratios.append(float(np.max(np.abs(wrong(*c.args) - C) / allowed)))
    assert len(ratios) > 20
    assert np.median(ratios) > 1e3 and np.mean(np.array(ratios) > 1e3) > 0.8, sorted(ratios)[:5]


def test_blockwise_labelled_cases_say_what_they_claim():
    by_label = {c.label: c.args for c in cases_for("ex07.blockwise_scaled_gemm", 0) if c.label}
    ref = get_exercise("ex07.blockwise_scaled_gemm").reference
    C, allowed = ref(*by_label["two K-blocks that cancel exactly: 0"])
    assert C[0, 0] == 0.0 and allowed[0, 0] > 0
    assert by_label["K = 100 with blocks of 32: four K-blocks"][0].shape[0] == 4
    P, sA, sB, bn = by_label["one K-block; N = 7 in column blocks of 3"]
    assert P.shape[0] == 1 and P.shape[2] == 7 and bn == 3 and sB.shape[1] == 3
    P, sA, sB, bn = by_label["a square output: a row's scale is not a column's"]
    assert P.shape[1] == P.shape[2] and bn == 1 and not np.allclose(sA, sB.T)
    P, sA, sB, bn = by_label["K-block scales drawn from 24 binades"]
    assert sA.max() / sA.min() > 2.0**12 or sB.max() / sB.min() > 2.0**12
    P, sA, sB, bn = by_label["two K-blocks whose scales differ: not one scale at the end"]
    C, _ = ref(P, sA, sB, bn)
    assert not np.allclose(C, P.sum(axis=0) * sA[:, :1] * sB[0, 0])
    assert not np.allclose(C, P.sum(axis=0) * sA.mean(axis=1, keepdims=True) * sB.mean())
    assert C[0, 0] != C[1, 0]


# ---- ex07.largest_promotion_interval


def test_promotion_bounds_keep_their_margin_from_every_measured_error():
    """Every bound is clear of every error of its accumulator; each seed's cases have both answers K and
    not K, accumulators other than chapter 07's (other widths, groups of 16 and 64, e5m2 operands)."""
    ex = get_exercise("ex07.largest_promotion_interval")
    for seed in SEEDS:
        answers, seen = set(), Counter()
        for c in cases_for(ex, seed):
            K, bound, signs, acc_bits, group, fmt = c.args
            errors = [e for _, e in ch07.promotion_errors(K, signs, acc_bits, group, fmt)]
            assert all(e <= bound / ch07.PROMOTION_MARGIN or e >= bound * ch07.PROMOTION_MARGIN for e in errors), c
            answers.add(ex.reference(*c.args) == K)
            if not c.label:
                seen[f"group {group}"] += 1
                seen[fmt] += 1
                seen["not 14 bits"] += acc_bits != 14
        assert answers == {True, False}
        assert len(seen) == 6 and min(seen.values()) >= 3, (seed, seen)


def test_promotion_errors_are_the_statements_measurement():
    """The reference's table is the statement's data family measured as the statement says, for
    chapter 07's accumulator and others; the promoted error barely depends on K (chapter 07: it is
    the never-promoted error at K = N)."""
    sol = solution_functions()["largest_promotion_interval"]
    for K, signs, acc in [
        (256, "same", (14, 32, "e4m3fn")),
        (1024, "random", (11, 16, "e5m2")),
        (512, "same", (16, 64, "e4m3fn")),
    ]:
        for N, e in ch07.promotion_errors(K, signs, *acc):
            assert sol(K, e, signs, *acc) >= N and (sol(K, e * 0.999999, signs, *acc) or 0) < N or N == K
    for signs in ("same", "random"):
        by_K = {K: dict(ch07.promotion_errors(K, signs)) for K in (1024, 4096)}
        for N in (32, 128, 1024):
            assert 0.7 < by_K[1024][N] / by_K[4096][N] < 1.4


def test_promotion_labelled_cases_and_the_notebooks_napkin_numbers():
    """The labelled cases' answers; the napkin answers the notebook gives (N * 2**-12 / (2 sqrt 2) for
    same signs, sqrt(N) for random signs, budget 1e-3, a 12-bit accumulator in groups of 16 at
    K = 4096), the measured ones, and e5m2 against e4m3; the measured errors the closing answers
    quote."""
    by_label = {c.label: c.args for c in cases_for("ex07.largest_promotion_interval", 0) if c.label}
    ref = get_exercise("ex07.largest_promotion_interval").reference

    def answer(start: str):
        return ref(*next(args for label, args in by_label.items() if label.startswith(start)))

    assert answer("chapter 07's accumulator, K = 4096, same signs, 1e-3") == DEEPSEEK_V3_PROMOTE_EVERY == 128
    assert answer("12 bits, groups of 16, same signs") == 32
    assert answer("12 bits, groups of 16, random signs") == 128
    assert answer("e5m2 operands, chapter 07's accumulator") == 256
    assert answer("a bound below the error of promoting every group") is None
    assert answer("a bound above the never-promoted error") == 512
    assert answer("K = 128 in groups of 64") == 128
    assert answer("13 bits, K = 2048, same signs") == 32
    assert answer("15 bits, groups of 16, e5m2") == 128

    def napkin(law, bits=12, group=16):
        ok = [N for N in ch07.promotion_intervals(4096, group) if law(N) * 2.0**-bits / (2 * 2**0.5) <= 1e-3]
        return max(ok) if ok else None

    assert napkin(lambda n: n) is None and napkin(math.sqrt) == 128
    assert 11.5 < 1e-3 * 2**12 * 2 * 2**0.5 < 11.6 and 134 < (1e-3 * 2**12 * 2 * 2**0.5) ** 2 < 135
    assert napkin(lambda n: n, 14, 32) == 32
    text = statement("Predict before you run.** Chapter 07's napkin math")
    assert "not even 16" in text and "so 128" in text and "N <= 11.6" in text and "N <= 134" in text
    e4 = dict(ch07.promotion_errors(4096, "same", 14, 32, "e4m3fn"))
    e5 = dict(ch07.promotion_errors(4096, "same", 14, 32, "e5m2"))
    assert all(e5[N] < e4[N] for N in e4) and all(e5[N] < e4[N] / 2 for N in (32, 64, 128, 256))
    closing = statement("Where does the napkin go wrong")
    assert "under half of it up to 256" in closing and "allow 256 where e4m3 allows 128" in closing
    assert "where the measurement allows 32" in closing and "picks 32" in closing
    e = dict(ch07.promotion_errors(4096, "same"))
    closing = statement("What does\nthe promotion at each K-block cost")
    assert "about 1e-2" in closing and "about 6e-4" in closing
    assert 0.5e-2 < e[1024] < 2e-2 and 5e-4 < e[128] < 7e-4


# ---- ex07.two_level_scales


def test_two_level_reference_is_nvfp4_and_matches_torchao():
    """torchao.prototype.mx_formats.nvfp4_tensor: per_tensor_amax_to_scale of the tensor's amax and
    nvfp4_quantize's e4m3 block scales, against the reference with NVFP4's parameters (e2m1fn, 1 x 16)
    on every case's tensor as float32 (rows zero-padded to whole blocks of 16, which torchao requires;
    zeros change no amax). Two regions differ by design and are left out: torchao clamps a block
    scale below at torch.finfo(float8_e4m3fn).tiny = 2**-6 (the smallest normal), where the course
    rounds to e4m3's subnormals and stops at 2**-9 (there torchao's scale must be 2**-6); and a
    tensor scale below fp32's normal range (amax < 2688 * 2**-126), where torchao's fp32 intermediate
    amax_block / 6 is itself subnormal and loses bits that the course's float64 quotient keeps. A
    third, by the cases' design: a block whose quotient lies within float32's rounding of an e4m3
    rounding boundary (some are planted a relative 2**-30 from a tie), which torchao's float32
    quotient may put on the other side."""
    torch = pytest.importorskip("torch")
    nv = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    ref = get_exercise("ex07.two_level_scales").reference
    compared = tiny = near_tie = 0
    for seed in SEEDS:
        for c in cases_for("ex07.two_level_scales", seed):
            x32 = c.args[0].astype(np.float32)
            if not np.abs(x32).max() > 2688 * 2.0**-126:
                continue
            M, K = x32.shape
            xp = np.zeros((M, -(-K // 16) * 16), np.float32)
            xp[:, :K] = x32
            t = torch.from_numpy(xp)
            s_t_theirs = nv.per_tensor_amax_to_scale(torch.max(torch.abs(t)))
            s_b_theirs, _ = nv.nvfp4_quantize(t, 16, s_t_theirs)
            s_t, s_b, _ = ref(x32.astype(np.float64), "e2m1fn", 1, 16)
            assert s_t == float(s_t_theirs)
            theirs = s_b_theirs.float().numpy().astype(np.float64)
            # quotients within float32's rounding of an e4m3 rounding boundary (the cases plant
            # some a relative 2**-30 from a tie): torchao's float32 quotient may fall on either side
            amax_b = np.abs(xp.astype(np.float64)).reshape(M, -1, 16).max(axis=2)
            q = amax_b / 6 / s_t
            decided = round_to(q * (1 - 2.0**-21), "e4m3fn", saturate=True) == round_to(
                q * (1 + 2.0**-21), "e4m3fn", saturate=True
            )
            near_tie += int((~decided).sum())
            normal = (s_b >= 2.0**-6) & decided
            np.testing.assert_array_equal(s_b[normal], theirs[normal])
            assert (theirs[(s_b < 2.0**-6) & decided] == 2.0**-6).all()
            compared += int(normal.sum())
            tiny += int(((s_b < 2.0**-6) & decided).sum())
    assert compared > 500 and tiny > 50 and near_tie > 5


def test_two_level_scales_do_what_the_statement_says_each_is_for():
    """On every case of three seeds, from the statement's words with exact rationals where it
    matters: the block holding the tensor's amax gets 448 whenever s_t is an fp32 normal (its
    rounding moves the quotient by under half an e4m3 step); every block's s_b * s_t maps its amax
    onto the element's largest value within e4m3's rounding (half a step, relative 2**-4) where
    s_b is normal and neither saturated nor raised to 2**-9; the quotient's float64 order does not
    change s_b; the elements, parameters and blocks reach every combination."""
    ref = get_exercise("ex07.two_level_scales").reference
    seen = Counter()
    for seed in SEEDS:
        for c in cases_for("ex07.two_level_scales", seed):
            x, element, br, bc = c.args
            s_t, s_b, _ = ref(*c.args)
            emax = get_format(element).max
            M, K = x.shape
            assert s_b.shape == (-(-M // br), -(-K // bc))
            amax = np.abs(x).max()
            padded = np.zeros((s_b.shape[0] * br, s_b.shape[1] * bc))
            padded[:M, :K] = np.abs(x)
            amax_b = padded.reshape(s_b.shape[0], br, s_b.shape[1], bc).max(axis=(1, 3))
            if s_t >= 2.0**-126:
                assert s_b[amax_b == amax].min() == 448.0, c.label
            inside = (s_b >= 2.0**-6) & (s_b < 448) & (amax_b > 0)
            ratio = amax_b[inside] / (s_b[inside] * s_t) / emax
            assert np.all(np.abs(ratio - 1) <= 2.0**-4 * (1 + 1e-12)), c.label
            for other in (amax_b / (emax * s_t), (amax_b / s_t) / emax):
                assert np.array_equal(round_to(other, "e4m3fn", saturate=True).clip(2.0**-9), s_b), c.label
            if not c.label:
                seen[(element, br, bc)] += 1
    assert len(seen) == len(ch07.TWO_LEVEL_ELEMENTS) * len(ch07.TWO_LEVEL_BLOCKS), seen


def test_two_level_bytes_are_the_recipes_and_the_chapters():
    ref = get_exercise("ex07.two_level_scales").reference
    for c in cases_for("ex07.two_level_scales", SPEC.hidden_seed):
        x, element, br, bc = c.args
        assert ref(*c.args)[2] == bytes_per_element(ch07.two_level_recipe(element, br, bc), x.shape)
    # chapter 07's problem 2: 4096 x 4096 weights, 4.5 bits and an fp32 tensor scale
    _, _, b = ref(np.ones((4096, 16)), "e2m1fn", 1, 16)
    assert b == pytest.approx((16 * 4 + 8) / 16 / 8 + 4 / (4096 * 16), rel=1e-15)
    # 16 x 16 blocks store one scale for 256 elements
    _, _, b = ref(np.ones((4096, 4096)), "e2m1fn", 16, 16)
    assert b == pytest.approx(0.5 + 1 / 256 + 4 / 4096**2, rel=1e-15)


def test_two_level_labelled_cases_say_what_they_claim():
    by_label = {c.label: c.args for c in cases_for("ex07.two_level_scales", 0) if c.label}
    ref = get_exercise("ex07.two_level_scales").reference
    args = by_label["NVFP4, one row of 1..32: two blocks, amax 16 and 32, s_t = fp32(32 / (448 * 6))"]
    s_t, s_b, _ = ref(*args)
    assert s_t == float(np.float32(32 / 2688)) and s_b.shape == (1, 2) and s_b[0, 1] == 448
    assert s_b[0, 0] == float(round_to(16 / 6 / s_t, "e4m3fn"))
    assert ref(*by_label["NVFP4, K = 40: the last block of each row holds 8 values"])[1].shape == (4, 3)
    s_t, s_b, _ = ref(*by_label["all zeros: the smallest scales, 2**-149 and 2**-9"])
    assert s_t == 2.0**-149 and (s_b == 2.0**-9).all()
    s_t, s_b, _ = ref(*by_label["a block 1e9 times smaller: its scale is raised to 2**-9"])
    assert s_b[0, 0] == 2.0**-9 and round_to(1e-6 / 6 / s_t, "e4m3fn") == 0
    args = by_label["amax / 2688 near fp32's smallest subnormal: 448, saturated"]
    s_t, s_b, _ = ref(*args)
    x = args[0]
    assert s_t == 2.0**-149 and np.abs(x).max() / 6 / s_t > 464 and s_b.max() == 448
    assert np.isnan(round_to(np.abs(x).max() / 6 / s_t, "e4m3fn", saturate=False))
    s_t, s_b, b = ref(*by_label["a 1 x 1 tensor: one block of 16 for one value"])
    assert s_b.shape == (1, 1) and b == (4 + 8 + 32) / 8
    args = by_label["s_t = 1: 6.6 / 6 = 1.1 rounds to the nearest e4m3, 1.125, not down to 1"]
    s_t, s_b, _ = ref(*args)
    assert s_t == 1.0 and s_b[0, 1] == 1.125 and round_to(1.1, "e4m3fn", "toward_zero") == 1.0
    args = by_label["e3m2fn elements (largest 28): amax 12544 = 448 * 28 gives s_t = 1, the block 448"]
    assert get_format("e3m2fn").max == 28 and ref(*args)[:2] == (1.0, np.array([[448.0]]))
    args = by_label["e2m3fn elements: 6 bits each, largest 7.5"]
    fmt = get_format("e2m3fn")
    assert (fmt.bits, fmt.max) == (6, 7.5) and ref(*args)[2] == (6 * 60 + 8 * 6 + 32) / 8 / 60
    args = by_label["16 x 16 blocks on a 20 x 40 tensor: 2 x 3 block scales, the edge blocks stored whole"]
    s_t, s_b, b = ref(*args)
    assert s_b.shape == (2, 3) and b == (4 * 800 + 8 * 6 + 32) / 8 / 800
    args = by_label["16 x 1 blocks (down a column) on a 40 x 3 tensor whose columns differ in size"]
    s_t, s_b, _ = ref(*args)
    assert s_b.shape == (3, 3) and len(np.unique(s_b)) > 3
    args = by_label["blocks of 32 along a row: K = 70 holds three, the last of 6 values"]
    assert ref(*args)[1].shape == (2, 3) and 70 - 2 * 32 == 6


def test_two_level_statement_gives_what_each_scale_is_for_not_its_formula():
    """The statement describes the scheme in words: neither NVFP4's constants (2688, 448 * 6) nor the
    block scale's quotient appear in it; the element formats' widths and largest values it lists are
    the formats'."""
    text = " ".join(statement("## Exercise 4 · Two-level block scales").split())
    for formula in ("2688", "448 * 6", "448 · 6", "/ 6", "amax_b / ", "amax / ("):
        assert formula not in text, formula
    for element in ch07.TWO_LEVEL_ELEMENTS:
        f = get_format(element)
        assert f'`"{element}"` ({f.bits} bits, largest {f.max:g})' in text


def test_statement_states_the_promotion_margin():
    assert f"at least a factor {ch07.PROMOTION_MARGIN:g} away" in statement("Every case's bound lies")


class _Hostile:
    def __array__(self, *a, **k):
        raise RuntimeError("no")

    def __float__(self):
        raise RuntimeError("no")


@pytest.mark.parametrize("name", ["blockwise_scaled_gemm", "two_level_scales"])
def test_chapter_comparators_pickle_and_never_raise(name):
    import pickle

    ex = get_exercise(f"ex07.{name}")
    assert pickle.loads(pickle.dumps(ex.compare)) is ex.compare
    case = cases_for(ex, 0)[1]
    expected = expected_outputs(ex, [case])[0]
    right = ex.reference(*case.args) if name == "two_level_scales" else expected[0]
    assert ex.compare(right, expected) is None
    odd = ["abc", None, 3.0, np.zeros((1, 1)), (1.0,), (1.0, np.zeros(2), 1.0), (_Hostile(),) * 3, _Hostile()]
    odd.append(np.full_like(expected[0], np.nan) if name == "blockwise_scaled_gemm" else (np.nan, right[1], right[2]))
    for got in odd:
        reason = ex.compare(got, expected)
        assert isinstance(reason, str) and reason, got


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the fp32 accumulator turned float64 by numpy: the promotion never rounds
        ("acc = acc + S.astype(np.float32)", "acc = acc + S"),
        # the epilogue in float64 instead of two float32 multiplies
        ("(acc * sA.astype(np.float32)) * sB.astype(np.float32)", "acc * sA * sB"),
    ],
)
def test_precision_slips_fail_on_the_fixed_cases_near_fp32_rounding(old, new):
    """Mistakes that move an error by 2-30% only where it is near float32's own rounding: the two
    fixed cases at 16 bits, groups of 16, e5m2, K = 4096 (bounds 1.2% either side of the error of
    promoting every 16) fail each of them, at every seed."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check

    spec = next(s for s in CHAPTERS if s.chapter == 7)
    wrong = SolutionNotebook(spec.solution, spec.namespace).mutated("largest_promotion_interval", old, new)
    assert not run_check("ex07.largest_promotion_interval", wrong, seed=0).passed


@pytest.mark.parametrize(
    ("name", "old", "new", "label"),
    [
        # RCEIL on a GPU that flushes float32 subnormals: d below 2**-126 taken as 0
        ("mx_shared_exponent", "    if d == 0.0:\n", "    if d < 2.0**-126:\n", "1.5 * 2**-127"),
        # the block scale's ties rounded away from zero
        (
            "two_level_scales",
            '"e4m3fn", saturate=True)',
            '"e4m3fn", rounding="nearest_away", saturate=True)',
            "exact e4m3 ties",
        ),
    ],
)
def test_fixed_cases_reject_what_the_random_cases_miss(name, old, new, label):
    """Mistakes no random case catches (a quotient among float32's subnormals above 2**-127, an
    exact e4m3 tie): a labelled fixed case fails them at every seed."""
    from nbhelpers.checks import run_check

    spec = next(s for s in CHAPTERS if s.chapter == 7)
    wrong = SolutionNotebook(spec.solution, spec.namespace).mutated(name, old, new)
    for seed in (0, 12345):
        result = run_check(f"ex07.{name}", wrong, seed=seed, stop_at_first_failure=True)
        assert not result.passed and label in result.mismatches[0], result.mismatches[:1]
