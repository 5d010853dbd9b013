"""Chapter 07's exercises beyond the table (test_exercises.py): the MX exponent ranges against both
rules' definitions in exact arithmetic and the course's forward rule; the largest element values
the statement lists against the formats; the block-scaled GEMM's check accepting every evaluation
in fp32 or better and its bound derived from the fp32 roundings, with the scales applied in the
epilogue missing by orders of magnitude; the narrow sum of copies against the model run a group at
a time and against the course's accumulator engine, the promotion bounds keeping their margin and
the notebook's numbers; the two-level scales' reference against torchao's nvfp4_quantize (NVFP4's
parameters) and against what the statement says each scale is for; the labelled cases say what
they claim."""

import math
import re
from collections import Counter
from fractions import Fraction

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
from nbhelpers.scaled_gemm import blockwise_scaled_mm
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


# ---- ex07.mx_exponent_range


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


def test_mx_ranges_are_the_rules_inverse_in_exact_arithmetic():
    """For every element, rule and exponent: lo and hi get E by the rules' definitions in exact
    arithmetic, the float64 step below lo gets E - 1 (lo is the smallest positive float64 for
    E = -127), the step above hi gets E + 1; and the course's forward rule agrees."""
    for element in MX_ELEMENTS:
        for rule in ch07.MX_RULES:
            los, his = ch07.mx_exponent_range_ref(element, rule, np.arange(-127, 128))
            for E, lo, hi in zip(range(-127, 128), los.tolist(), his.tolist(), strict=True):
                assert exact_exponent([lo], element, rule) == exact_exponent([hi], element, rule) == E
                assert ch07.mx_exponent(lo, element, rule) == ch07.mx_exponent(hi, element, rule) == E
                assert exact_exponent([math.nextafter(hi, math.inf)], element, rule) == E + 1
                if E == -127:
                    assert lo == math.ulp(0.0)
                else:
                    assert exact_exponent([math.nextafter(lo, 0.0)], element, rule) == E - 1


def test_mx_solution_equals_the_reference_everywhere():
    sol = solution_functions()["mx_exponent_range"]
    for element in MX_ELEMENTS:
        for rule in ch07.MX_RULES:
            E = np.arange(-127, 128).reshape(5, 51)
            got, expected = sol(element, rule, E), ch07.mx_exponent_range_ref(element, rule, E)
            assert all(np.array_equal(g, x) and g.dtype == np.float64 for g, x in zip(got, expected, strict=True))


def test_statement_lists_the_formats_largest_values():
    """The statement types the largest value of each element format; they must be the formats'."""
    text = statement("The largest values:")
    listed = dict(re.findall(r"(e\dm\dfn|e5m2) (\d+(?:\.\d+)?)", text.split("The largest values:")[1]))
    assert set(listed) == set(MX_ELEMENTS)
    for name, value in listed.items():
        assert float(value) == get_format(name).max


def test_mx_cases_reach_the_hard_regions():
    """Every seed's random cases hold both rules, every element, the bottom of e8m0 (E = -127 and
    -126, where RCEIL's quotients are float32 subnormals) and its top."""
    for seed in SEEDS:
        cases = [c.args for c in cases_for("ex07.mx_exponent_range", seed) if not c.label]
        assert {rule for _, rule, _ in cases} == set(ch07.MX_RULES)
        assert {el for el, _, _ in cases} == set(MX_ELEMENTS)
        for _, rule, E in cases:  # every array reaches the bottom: a mistake there fails everywhere
            assert np.isin(E, (-127, -126, -125)).sum() >= 3 and E.min() >= -127 and E.max() <= 127
        assert sum((E >= 120).sum() for *_, E in cases) >= 20
        assert len({E.tobytes() for *_, E in cases}) == len(cases)  # no two calls alike


def test_mx_labelled_cases_say_what_they_claim():
    by_label = {c.label: c.args for c in cases_for("ex07.mx_exponent_range", 0) if c.label}

    def ref(*args):  # the range of the first exponent of the array, as floats
        lo, hi = ch07.mx_exponent_range_ref(*args)
        return float(lo.flat[0]), float(hi.flat[0])

    lo, hi = ref(*by_label["MXFP4 floor, E = 0: amax in [4, 8), the 7 of chapter 07 among them"])
    assert lo == 4.0 and hi == math.nextafter(8.0, 0) and lo <= 7.0 <= hi
    lo, hi = ref(*by_label["MXFP4 RCEIL, E = 1: the 7 of chapter 07, 7 / 6 rounds up to 2"])
    assert lo <= 7.0 <= hi
    lo, hi = ref(*by_label["MXFP8 RCEIL, E = 0: up to 448 and the float32 rounding's slack"])
    assert hi > 448.0 and float(np.float32(hi / 448)) == 1.0
    lo, hi = ref(*by_label["RCEIL, E = -126: quotients in (2**-127, 2**-126], subnormal spacing"])
    assert 2.0**-127 < lo / 448 < 2.0**-126 < hi / 448 and hi / 448 - 2.0**-126 == 2.0**-150
    assert ref(*by_label["floor, E = -127: every amax below 2**-118, raised"]) == (
        math.ulp(0.0),
        math.nextafter(2.0**-118, 0),
    )


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


def _brute_narrow_sum(p: float, n: int, acc_bits: int, group: int) -> float:
    """The statement's model one group at a time, in float64 (exact: few bits)."""
    S = 0.0
    for _ in range(n):
        q = 2.0 ** (math.frexp(max(p, S))[1] - 1 - (acc_bits - 1))
        S = math.trunc(S / q) * q + group * (math.trunc(p / q) * q)
    return S


def test_narrow_sum_is_the_model_group_by_group_and_the_engines():
    """The reference's skip-ahead sum equals the model simulated a group at a time, and the
    course's accumulator engine (fp8_tensor_core_mm) on a row of a's times a column of b's."""
    from nbhelpers.recipes import PER_COLUMN, PER_ROW
    from nbhelpers.scaled_gemm import fp8_tensor_core_mm

    rng = np.random.default_rng(77)
    for i in range(300):
        p = ch07._random_product(rng, ch07.PROMOTION_FORMATS[i % 2])
        acc_bits, group = int(rng.choice(ch07.PROMOTION_BITS)), int(rng.choice(ch07.PROMOTION_GROUPS))
        n = int(rng.integers(1, 2000))
        assert ch07.narrow_sum_of_copies(p, n, acc_bits, group) == Fraction(_brute_narrow_sum(p, n, acc_bits, group))
    recipes = (Recipe("e4m3fn", PER_ROW), Recipe("e4m3fn", PER_COLUMN))
    for a, b, bits, group in [(1.875, 1.75, 12, 16), (1.0, 1.0, 10, 32), (0.875, 3.5, 10, 64), (1.25, 1.125, 14, 4)]:
        K = 4096
        for N in ch07.promotion_intervals(K, group):
            C = fp8_tensor_core_mm(
                np.full((1, K), a),
                np.full((K, 1), b),
                np.ones((1, 1)),
                np.ones((1, 1)),
                accumulator_bits=bits,
                promote_every=N,
                group=group,
                recipes=recipes,
            )
            assert float(C[0, 0]) == float(ch07.narrow_sum_of_copies(a * b, N // group, bits, group) * (K // N))


def test_promotion_bounds_keep_their_margin_and_the_cases_vary():
    """Every random bound is clear of every error; each seed's cases reach K past 2**30, 24-bit
    accumulators, groups of 1 and 64, and answers below K."""
    ex = get_exercise("ex07.largest_promotion_interval")
    for seed in SEEDS:
        cases = [c.args for c in cases_for(ex, seed) if not c.label]
        for p, K, bound, acc_bits, group in cases:
            assert ch07._clear(bound, [e for _, e in ch07.copies_errors(p, K, acc_bits, group)])
        assert sum(K >= 2**30 for _, K, *_ in cases) >= 10
        assert {1, 64} <= {c[4] for c in cases} and sum(c[3] >= 20 for c in cases) >= 5
        assert sum(ex.reference(*c) < c[1] for c in cases) >= 30


def test_alignment_traps_are_every_product_where_aligning_to_s_plus_p_shows():
    """ALIGNMENT_TRAPS holds every (P, group, acc_bits), P a product of two odd e4m3fn
    significands, for which the sum aligned to S + p (not max(p, S)) answers a bound a relative
    2**-20 from some error differently; and every seed's random cases hold some of them."""
    traps = set()
    for P in sorted({a * b for a in range(1, 16, 2) for b in range(1, 16, 2)}):
        for group in ch07.PROMOTION_GROUPS:
            for acc_bits in ch07.PROMOTION_BITS:
                errors = ch07.copies_errors(float(P), 2**40, acc_bits, group)
                for N, err in errors:
                    if err <= ch07.TIGHT_FLOOR:
                        continue
                    slipped = ch07.narrow_sum_of_copies(float(P), N // group, acc_bits, group, align_with_p=True)
                    if slipped == (1 - err) * N * P:
                        continue
                    for side in (-1, 1):
                        b = Fraction(float(err * Fraction(ch07.TIGHT_PROMOTION) ** side))
                        if not ch07._clear(float(b), [e for _, e in errors]):
                            continue
                        right = max((M for M, e in errors if e <= b), default=None)
                        wrong = max(
                            (
                                M
                                for M, _ in errors
                                if 1
                                - ch07.narrow_sum_of_copies(float(P), M // group, acc_bits, group, align_with_p=True)
                                / (M * P)
                                <= b
                            ),
                            default=None,
                        )
                        if right != wrong:
                            traps.add((P, group, acc_bits))
    assert traps == set(ch07.ALIGNMENT_TRAPS)
    for seed in SEEDS:
        cases = [c.args for c in cases_for("ex07.largest_promotion_interval", seed) if not c.label]
        tops = [Fraction(p).numerator for p, *_ in cases]
        odd = {(n // (n & -n), c[4], c[3]) for n, c in zip(tops, cases)}
        assert len(odd & traps) >= 1, seed


def test_promotion_labelled_cases_and_the_notebooks_numbers():
    by_label = {c.label: c.args for c in cases_for("ex07.largest_promotion_interval", 0) if c.label}
    ref = get_exercise("ex07.largest_promotion_interval").reference
    for label, args in by_label.items():
        tail = label.rsplit(": ", 1)[-1].replace(" ('at most' counts it)", "")
        if tail.replace("2**", "").isdigit():
            assert ref(*args) == eval(tail), label
    assert dict(ch07.copies_errors(2.0**-18, 2**20, 10, 64))[2048] == Fraction(1, 2)
    ones = dict(ch07.copies_errors(1.0, 2**20, 14, 32))
    assert all(ones[N] == 0 for N in ones if N <= 2**14) and ones[2**20] == 1 - Fraction(2**14, 2**20)
    wide = dict(ch07.copies_errors(1.875**2, 4096, 14, 32))
    assert wide[64] == 0 < wide[128] and 1e-3 < wide[128] < 1.2e-3 and 3.5e-3 < wide[1024] < 4.5e-3
    assert 4e-3 < wide[2048] < 4.5e-3 and ref(1.875**2, 2**40, 1e-3, 14, 32) == 64
    text = statement("Predict before you run.** Chapter 07's accumulator")
    assert "0.984" in text and "`N = 128` on" in text and "16384" in text
    closing = statement("What does\nthe promotion at each K-block cost")
    assert "about 0.4% there, against about 0.1% every 128" in closing


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
    assert ch07.TIGHT_PROMOTION == 1 + 2.0**-20 and ch07.PROMOTION_MARGIN == 1 + 2.0**-21
    text = statement("Most bounds lie a relative")
    assert "`2**-20`" in text and "2**-21" in text and "`2**-40`" in text


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
    ("name", "old", "new", "label"),
    [
        # a strict bound: an error equal to it does not count (only a bound placed on an exact error)
        ("largest_promotion_interval", "* b <= a * N * P", "* b < a * N * P", "'at most' counts it"),
        # the group's products aligned to the sum after they are added, not the sum carried in
        (
            "largest_promotion_interval",
            "E = max(P, S).bit_length() - 1",
            "E = max(P, S + group * P).bit_length() - 1",
            "",
        ),
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
    """Mistakes the random cases do not catch at every seed (an exact e4m3 tie, a bound equal to an
    error): a labelled fixed case, or every seed's cases, fail them."""
    from nbhelpers.checks import run_check

    spec = next(s for s in CHAPTERS if s.chapter == 7)
    wrong = SolutionNotebook(spec.solution, spec.namespace).mutated(name, old, new)
    for seed in (0, 12345):
        result = run_check(f"ex07.{name}", wrong, seed=seed, stop_at_first_failure=True)
        assert not result.passed and label in result.mismatches[0], result.mismatches[:1]
