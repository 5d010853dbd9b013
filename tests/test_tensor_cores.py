"""Tests of nbhelpers.tensor_cores, the model of how tensor cores accumulate (fused groups,
alignment, truncation, promotion): against exact grouped summation, its Fraction reference,
hand-worked cases; the probes, each verdict reached by an emulated accumulator that behaves that
way."""

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import assert_bits, bit_mismatches, wide

from nbhelpers.accumulation import emulated_dot, emulated_matmul, emulated_sum
from nbhelpers.rounding import round_to
from nbhelpers.tensor_cores import (
    TENSOR_CORES,
    accumulator_probe,
    align_group,
    check_tensor_core_settings,
    max_align_bits,
    probe_accumulator,
    probe_verdict,
    rounding_probe,
    tensor_core_group_sum,
    tensor_core_matmul,
    tensor_core_matmul_ref,
    width_probe,
)

# ------------------------------------------------------------------ the matmul model


@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero"])
@pytest.mark.parametrize("group", [1, 4, 8, 16])
def test_tensor_core_with_wide_alignment_is_exact_grouped_summation(group, rounding):
    """With align_bits at its maximum and positive terms of narrow range, nothing is truncated:
    the model is 'add the group and the accumulator exactly, round once into fp32'."""
    rng = np.random.default_rng(group)
    A = round_to(rng.uniform(0.5, 4, (4, 70)), "bf16")
    B = round_to(rng.uniform(0.5, 4, (70, 3)), "bf16")
    C = tensor_core_matmul(A, B, "bf16", group, max_align_bits(group), "fp32", rounding)
    ref = np.zeros((4, 3))
    for i in range(4):
        for j in range(3):
            c = 0.0
            for k0 in range(0, 70, group):
                total = math.fsum([c] + [A[i, k] * B[k, j] for k in range(k0, min(k0 + group, 70))])
                c = float(round_to(total, "fp32", rounding))  # fsum is exact here (< 53 bits)
            ref[i, j] = c
    assert_bits(C, ref)
    if group == 1 and rounding == "nearest_even":  # one product per group: plain fp32 accumulation
        assert_bits(C, emulated_matmul(A, B, "bf16", "fp32"))


@pytest.mark.parametrize(
    "group,align_bits,acc,rounding,promote",
    [
        (4, 23, "fp32", "toward_zero", None),
        (8, 23, "fp32", "nearest_even", None),
        (16, 26, "fp32", "toward_zero", None),
        (8, 12, "e8m13", "toward_zero", 16),
        (4, 5, "bf16", "nearest_even", 8),
    ],
)
def test_tensor_core_matches_fraction_reference(group, align_bits, acc, rounding, promote):
    A, B = wide((3, 45), 30, 8), wide((45, 4), 31, 8)
    ours = tensor_core_matmul(A, B, "bf16", group, align_bits, acc, rounding, promote)
    ref = tensor_core_matmul_ref(A, B, "bf16", group, align_bits, acc, rounding, promote)
    assert_bits(ours, ref)


def test_tensor_core_truncation_loses_small_products():
    """Hand-worked. Group [1*1, 2**-12 * 2**-12, 2**-12 * 2**-12]: E = 0, align_bits = 23 keeps
    multiples of 2**-23, so each 2**-24 truncates to 0 and the result is 1.0; adding the group
    exactly gives 1 + 2**-23, an fp32 number. (Sequential fp32 also gives 1.0: each 2**-24 is a
    tie, resolved to even.)"""
    a = np.array([[1.0, 2.0**-12, 2.0**-12]])
    b = np.array([[1.0], [2.0**-12], [2.0**-12]])
    assert tensor_core_matmul(a, b, group=4, align_bits=23)[0, 0] == 1.0
    assert tensor_core_matmul(a, b, group=4, align_bits=max_align_bits(4))[0, 0] == 1 + 2.0**-23
    assert emulated_matmul(a, b)[0, 0] == 1.0
    # the accumulator joins the alignment: after a first group summing to 2**10, each next group
    # of two 2**-14 products is aligned to 2**10 (multiples of 2**-13) and vanishes, although
    # 2**10 + 2**-13 is an fp32 number; exact grouped summation keeps all four groups
    a = np.concatenate([[2.0**5, 2.0**5], np.full(8, 2.0**-7)])[None, :]
    b = np.concatenate([[2.0**4, 2.0**4], np.full(8, 2.0**-7)])[:, None]
    assert tensor_core_matmul(a, b, group=2, align_bits=23)[0, 0] == 2.0**10
    assert tensor_core_matmul(a, b, group=2, align_bits=max_align_bits(2))[0, 0] == 2.0**10 + 2.0**-11
    # with promotion after every group the small products form their own partial sums and count
    assert tensor_core_matmul(a, b, group=2, align_bits=23, promote_every=2)[0, 0] == 2.0**10 + 2.0**-11


def test_promotion_reduces_error_of_a_narrow_accumulator():
    """A 14-bit accumulator (e8m13, truncating) over K = 4096: promoting to fp32 every 128
    products (DeepSeek-V3's N_C) cuts the error; the error is measured, not asserted to be 2%."""
    rng = np.random.default_rng(0)
    A = rng.uniform(0, 1, (4, 4096))
    B = rng.uniform(0, 1, (4096, 4))
    exact = round_to(A, "bf16") @ round_to(B, "bf16")
    plain = tensor_core_matmul(A, B, group=16, align_bits=13, acc="e8m13")
    promoted = tensor_core_matmul(A, B, group=16, align_bits=13, acc="e8m13", promote_every=128)
    err_plain = np.abs(plain - exact).max() / exact.max()
    err_prom = np.abs(promoted - exact).max() / exact.max()
    assert err_prom < err_plain / 4
    assert err_plain > 1e-3


# ------------------------------------------------------------------ one fused group, the probe


def fp32_values(rng, n, spread=8):
    return round_to(rng.standard_normal(n) * np.exp2(rng.integers(-spread, spread, n)), "fp32")


@pytest.mark.parametrize("align_bits", [3, 8, 23, 30])
@pytest.mark.parametrize("rounding", ["toward_zero", "nearest_even"])
def test_one_group_equals_the_fraction_reference(align_bits, rounding):
    # a group with an incoming accumulator c is a one-group tensor_core_matmul of [c, products]
    # against ones (its own accumulator starts at 0, which does not move the alignment)
    rng = np.random.default_rng(align_bits)
    for g in [1, 3, 8, 16]:
        for _ in range(10):
            vals = fp32_values(rng, g + 1)
            if rng.random() < 0.5:
                vals = np.abs(vals)
            ours = tensor_core_group_sum(vals[0], vals[1:], align_bits, rounding=rounding)
            ref = tensor_core_matmul_ref(
                vals[None, :], np.ones((g + 1, 1)), "fp32", group=g + 1, align_bits=align_bits, rounding=rounding
            )[0, 0]
            assert not bit_mismatches(ours, ref), (vals, ours, ref)


def test_groups_chained_equal_tensor_core_matmul():
    rng = np.random.default_rng(1)
    a, b = round_to(rng.standard_normal(37), "bf16"), round_to(rng.standard_normal(37), "bf16")
    c = 0.0
    for k0 in range(0, 37, 8):
        c = tensor_core_group_sum(c, a[k0 : k0 + 8] * b[k0 : k0 + 8])
    assert_bits(c, tensor_core_matmul(a[None, :], b[:, None], "bf16", group=8)[0, 0])


def test_align_group_by_hand():
    E, kept = align_group([1.0, 1.5 * 2.0**-24, -3 * 2.0**-24, 2.0**-23], align_bits=23)
    assert E == 0 and kept.tolist() == [1.0, 0.0, -(2.0**-23), 2.0**-23]
    E, kept = align_group([0.0, 0.0])
    assert E is None and kept.tolist() == [0.0, 0.0]
    E, kept = align_group([-6.0, 0.75], align_bits=2)  # E = 2, multiples of 2**0
    assert E == 2 and kept.tolist() == [-6.0, 0.0]
    with pytest.raises(ValueError, match="finite"):
        align_group([1.0, np.inf])
    with pytest.raises(ValueError, match="too large"):
        align_group([1.0, 2.0], align_bits=52)
    with pytest.raises(ValueError, match="1-D"):
        tensor_core_group_sum(1.0, np.ones((2, 2)))
    with pytest.raises(ValueError, match="stochastic"):
        tensor_core_group_sum(1.0, [1.0], rounding="stochastic")


# ------------------------------------------------------------------ the probes and their verdicts

HI, LO = 1 + 2.0**-7, 1.0
NEAREST, TRUNCATES = "fp32 or wider, rounding to nearest; ", "fp32 or wider, but a step truncates"


def test_probes_are_bf16_inputs_with_the_sums_they_promise():
    third = Fraction(1, 2**8)
    for (A, B), exact in [
        (accumulator_probe(64, True, M=3, N=2), 1 + third + 4 * Fraction(1, 2**25)),
        (accumulator_probe(64, False, M=3, N=2), 1 + third + 4 * Fraction(1, 2**25)),
        (width_probe(64, M=3, N=2), 1 + third + Fraction(1, 2**23)),
        (rounding_probe(64, M=3, N=2), 1 + third + 3 * Fraction(1, 2**25)),
    ]:
        assert A.shape == (3, 64) and B.shape == (64, 2)
        assert np.array_equal(round_to(A, "bf16"), A) and np.array_equal(round_to(B, "bf16"), B)
        for i in range(3):
            for j in range(2):
                assert sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(A[i], B[:, j])) == exact


def test_width_and_rounding_probes_do_not_depend_on_the_order():
    """The claims the two probes rest on, over every order of their three products: each
    partial sum of width_probe's is an fp32 number (so any order and any rounding gives the
    exact sum); rounding_probe's ends at 1 + 2**-8 + 2**-23 in fp32 rounded to nearest, in every
    order and every tree, and at 1 + 2**-8 truncated."""
    from itertools import combinations, permutations

    w = width_probe(3)[1][:, 0]
    for n in (1, 2, 3):
        for part in combinations(w, n):
            total = math.fsum(part)
            assert round_to(total, "fp32") == total, part
    r = rounding_probe(3)[1][:, 0]
    for perm in permutations(r):
        x = np.array(perm)
        for order in ["sequential", "pairwise"]:
            assert float(emulated_sum(x, "fp32", order)) == 1 + 2.0**-8 + 2.0**-23
            assert float(emulated_sum(x, "fp32", order, "toward_zero")) == 1 + 2.0**-8
            assert float(round_to(emulated_sum(x, "e8m22", order), "bf16")) == 1.0  # one bit short: the tie


def _reversed(A, B):
    return emulated_matmul(A[:, ::-1], B[::-1, :], "bf16", "fp32")  # K order backwards


PROBED = {  # name: (matmul, (tiny first, tiny last, width, rounding), what the verdict must say)
    "exact": (lambda A, B: A @ B, (HI, HI, HI, HI), NEAREST + "the tiny terms kept in either order"),
    "fp32 kahan": (
        lambda A, B: emulated_matmul(A, B, "bf16", "fp32", order="kahan"),
        (HI, HI, HI, HI),
        NEAREST + "the tiny terms kept in either order",
    ),
    "fp32 sequential": (
        lambda A, B: emulated_matmul(A, B, "bf16", "fp32"),
        (HI, LO, HI, HI),
        NEAREST + "the tiny terms kept only when first",
    ),
    "fp32 pairwise": (
        lambda A, B: emulated_matmul(A, B, "bf16", "fp32", order="pairwise"),
        (HI, LO, HI, HI),
        NEAREST + "the tiny terms kept only when first",
    ),
    "fp32 blocked(2)": (
        lambda A, B: emulated_matmul(A, B, "bf16", "fp32", order="blocked", block=2),
        (HI, LO, HI, HI),
        NEAREST + "the tiny terms kept only when first",
    ),
    "fp32 reversed": (_reversed, (LO, HI, HI, HI), NEAREST + "the tiny terms kept only when last"),
    "fp32, 16 lanes": (
        lambda A, B: emulated_matmul(A, B, order="lanes", block=16),
        (LO, LO, HI, HI),
        NEAREST + "the tiny terms lost in either order: another order (SIMD lanes",
    ),
    "fp32, 2 lanes": (
        lambda A, B: emulated_matmul(A, B, order="lanes", block=2),
        (LO, LO, HI, HI),
        NEAREST + "the tiny terms lost in either order: another order (SIMD lanes",
    ),
    "bf16 acc": (lambda A, B: emulated_matmul(A, B, "bf16", "bf16"), (LO, LO, LO, LO), "narrower than fp32"),
    "e8m22 acc": (lambda A, B: emulated_matmul(A, B, "bf16", "e8m22"), (LO, LO, LO, LO), "narrower than fp32"),
    "fp32 acc, truncated to bf16": (
        lambda A, B: round_to(emulated_matmul(A, B), "bf16", "toward_zero"),
        (LO, LO, LO, LO),
        "narrower than fp32",
    ),
    "fp32 toward zero": (
        lambda A, B: emulated_matmul(A, B, "bf16", "fp32", rounding="toward_zero"),
        (HI, LO, HI, LO),
        TRUNCATES,
    ),
    "fp32 toward zero, 16 lanes": (
        lambda A, B: emulated_matmul(A, B, order="lanes", block=16, rounding="toward_zero"),
        (LO, LO, HI, LO),
        TRUNCATES,
    ),
    "tensor-core model, group 8": (lambda A, B: tensor_core_matmul(A, B, "bf16", group=8), (LO, LO, HI, LO), TRUNCATES),
    "A100 model": (lambda A, B: TENSOR_CORES["A100"].matmul(A, B, "bf16"), (LO, LO, HI, LO), TRUNCATES),
    "H100 model": (lambda A, B: TENSOR_CORES["H100"].matmul(A, B, "bf16"), (HI, HI, HI, LO), TRUNCATES),
}


@pytest.mark.parametrize("name", PROBED)
def test_each_verdict_is_reached_by_an_accumulator_that_behaves_so(name):
    matmul, outputs, verdict = PROBED[name]
    r = probe_accumulator(matmul, 64, M=3, N=2)
    assert (r.tiny_first, r.tiny_last, r.width, r.rounding) == outputs and r.uniform
    assert r.verdict.startswith(verdict), r.verdict
    assert r.verdict == probe_verdict(*outputs)
    if outputs[2:] == (HI, LO):  # truncation: the order clause says how the tiny terms went
        assert {(LO, LO): "lost in either order", (HI, HI): "kept in either order", (HI, LO): "kept only when first"}[
            outputs[:2]
        ] in r.verdict


def test_the_order_probe_alone_claims_no_more_than_it_shows():
    """fp32 in 16 lanes and a bf16 accumulator both lose the tiny terms in either order: the
    two-output verdict names both, and only the width and rounding probes tell them apart."""
    lanes, bf16 = (probe_accumulator(PROBED[n][0], 64) for n in ("fp32, 16 lanes", "bf16 acc"))
    assert (lanes.tiny_first, lanes.tiny_last) == (bf16.tiny_first, bf16.tiny_last) == (LO, LO)
    alone = probe_verdict(LO, LO)
    assert alone.startswith("lost in either order") and "narrower than fp32" in alone and "SIMD lanes" in alone
    assert lanes.verdict != bf16.verdict
    assert "narrower" not in lanes.verdict and "narrower" in bf16.verdict
    seq = probe_verdict(HI, LO)
    assert seq.startswith("kept only when first") and "a tree" in seq  # not "K order" alone
    assert probe_verdict(LO, HI).startswith("kept only when last")
    assert probe_verdict(HI, HI).startswith("kept in either order")


def test_probe_verdict_flags_odd_outputs():
    assert probe_verdict(HI, 2.0).startswith("unexpected")
    assert probe_verdict(HI, LO, HI, 1.5).startswith("unexpected")
    # the exact 2**-23 lost while smaller terms survive: no accumulator considered does that
    assert probe_verdict(HI, LO, LO, LO).startswith("inconsistent")
    assert probe_verdict(LO, LO, LO, HI).startswith("inconsistent")
    with pytest.raises(ValueError, match="both"):
        probe_verdict(HI, LO, HI)


def test_probe_accumulator_notices_uneven_outputs_and_bad_input():
    def uneven(A, B):
        C = emulated_matmul(A, B)
        C[-1, -1] = 1.0  # one output on its own path
        return C

    r = probe_accumulator(uneven, 64, M=2, N=2)
    assert not r.uniform and r.verdict.startswith("outputs differ")
    with pytest.raises(ValueError, match="shape"):
        probe_accumulator(lambda A, B: (A @ B)[:1], 64, M=2, N=2)
    with pytest.raises(ValueError, match="too short"):
        probe_accumulator(lambda A, B: A @ B, 5)
    with pytest.raises(ValueError, match="too short"):
        width_probe(2)
    with pytest.raises(ValueError, match="M must be"):
        rounding_probe(8, M=0)


def test_accumulator_probe_edge_cases():
    # two tiny terms make exactly half a spacing: a tie, lost even when they come first
    A, B = accumulator_probe(8, True, n_tiny=2)
    assert float(emulated_dot(A[0], B[:, 0], "bf16", "fp32")) == 1 + 2.0**-8
    with pytest.raises(ValueError, match="too short"):
        accumulator_probe(5, True)
    with pytest.raises(TypeError, match="tiny_first"):
        accumulator_probe(8, "yes")


def test_errors():
    with pytest.raises(ValueError, match="multiple of group=8"):
        tensor_core_matmul(np.ones((2, 16)), np.ones((16, 2)), promote_every=12)
    for bad in (0, -8, 16.0, True):
        msg = rf"^promote_every must be None or a positive multiple of group=1, got {bad!r}$"
        with pytest.raises(ValueError, match=msg):
            check_tensor_core_settings(1, 23, bad)
    assert check_tensor_core_settings(np.int64(4), np.int32(13), np.int64(8)) == (4, 13, 8)
    with pytest.raises(ValueError, match="at most 48"):
        tensor_core_matmul(np.ones((2, 16)), np.ones((16, 2)), align_bits=60)


@pytest.mark.parametrize("align_bits", [23, 24, 25])
def test_starting_accumulator_C_matches_reference(align_bits):
    """C (M, N) starts the accumulator, as in the hardware's D = C + A B; fast vs Fraction ref."""
    rng = np.random.default_rng(align_bits)
    A = round_to(rng.normal(size=(3, 13)), "fp16")
    B = round_to(rng.normal(size=(13, 2)), "fp16")
    C = round_to(rng.normal(size=(3, 2)), "fp32")
    got = tensor_core_matmul(A, B, "fp16", 4, align_bits, C=C)
    assert_bits(got, tensor_core_matmul_ref(A, B, "fp16", 4, align_bits, C=C), "fp32")
    assert not np.array_equal(got, tensor_core_matmul(A, B, "fp16", 4, align_bits))
    with pytest.raises(ValueError, match="shape"):
        tensor_core_matmul(A, B, "fp16", 4, align_bits, C=np.zeros((2, 2)))
