"""Tests of nbhelpers.accumulation, the rounding adder: bit-exact against numpy / ml_dtypes loops
and exact rational references, the FACTS.md numbers, Higham's error bounds, stochastic rounding;
running sums, the lost part of an addend, where sums stall, and SumMethod. (The tensor-core model
built on the adder: test_tensor_cores.py.)"""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_bits, fraction_sum, gamma, loop_sum, wide

from nbhelpers.accumulation import (
    Order,
    SumMethod,
    addend_loss,
    emulated_dot,
    emulated_matmul,
    emulated_matmul_ref,
    emulated_sum,
    running_sum,
    stall_length,
)
from nbhelpers.formats import FORMATS
from nbhelpers.rounding import Rounding, round_to

ORDERS = ["sequential", "pairwise", "blocked", "kahan", "lanes"]


def block_for(order: str, blocked: int, lanes: int = 8) -> int | None:
    """The block argument an order takes: terms per partial sum (blocked), lanes (lanes), or None."""
    return {"blocked": blocked, "lanes": lanes}.get(order)


# ------------------------------------------------------------------ sequential vs outside oracles


@pytest.mark.parametrize("seed", range(3))
def test_fp32_sequential_equals_numpy_float32_loop(seed):
    x = wide(3000, seed, spread=20).astype(np.float32)
    assert emulated_sum(x, "fp32") == loop_sum(x, np.float32)


@pytest.mark.parametrize("seed", range(3))
def test_fp16_sequential_equals_numpy_float16_loop(seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(3000) * np.exp2(rng.integers(-6, 6, 3000))).astype(np.float16)
    assert emulated_sum(x, "fp16") == loop_sum(x, np.float16)


@pytest.mark.parametrize("seed", range(3))
def test_bf16_sequential_equals_ml_dtypes_bfloat16_loop(seed):
    x = wide(3000, seed, spread=12).astype(ml_dtypes.bfloat16)
    assert emulated_sum(x, "bf16") == loop_sum(x, ml_dtypes.bfloat16)


def test_numpy_float32_sum_over_a_strided_axis_is_the_sequential_sum():
    """Chapter 02, section 6: numpy reduces a C-ordered (n, m) float32 array over axis 0 row by row
    (its docstring: pairwise summation only along the fast axis), i.e. one sequential float32 sum
    per column, which the fp32 emulation must reproduce bit for bit. Along the contiguous axis
    numpy's pairwise blocks give other bits on at least one of these sums (the check has teeth).
    Measured with numpy 2.4.6; the reduction order is numpy's choice, not a promise."""
    X = np.random.default_rng(5).uniform(size=(4096, 16)).astype(np.float32)
    seq = emulated_sum(X, "fp32", axis=0)
    try:
        assert_bits(X.sum(axis=0).astype(np.float64), seq)
    except AssertionError as e:
        raise AssertionError(
            f"numpy {np.__version__}: the strided float32 sum is no longer sequential (it was with numpy 2.4.6): {e}"
        ) from None
    assert not np.array_equal(X.T.copy().sum(axis=1).astype(np.float64), seq), (
        f"numpy {np.__version__}: the contiguous sum now equals the sequential one (not with numpy 2.4.6)"
    )


def test_ml_dtypes_bf16_addition_is_correctly_rounded():
    """ml_dtypes adds two bfloat16 in float32 and rounds to bf16. Double rounding through float32
    (24 >= 2*8 + 2 bits) is innocuous for addition; checked here on 200k pairs, half of them
    constructed to fall on or next to a bf16 midpoint, against one rounding of the exact sum."""
    rng = np.random.default_rng(0)
    n = 100_000
    a = round_to(wide(n, 1, spread=10), "bf16")
    b = round_to(wide(n, 2, spread=10), "bf16")
    # pairs whose sum is a bf16 midpoint: b = a-sized value plus half an ulp of a
    a2 = round_to(rng.uniform(1, 2, n), "bf16")
    b2 = np.ldexp(rng.integers(1, 8, n), -8).astype(np.float64)  # multiples of 2**-8
    A, B = np.concatenate([a, a2]), np.concatenate([b, b2])
    s = A + B  # exact in float64: exponents differ by at most ~40
    assert np.array_equal((s - A) - B, np.zeros_like(s))
    theirs = (A.astype(ml_dtypes.bfloat16) + B.astype(ml_dtypes.bfloat16)).astype(np.float64)
    assert_bits(theirs, round_to(s, "bf16"))


def test_batched_sum_equals_row_by_row_and_axis():
    x = wide((5, 7, 40), 3).astype(np.float32)
    full = emulated_sum(x, "bf16", axis=1, order="pairwise")
    assert full.shape == (5, 40)
    for i in range(5):
        for j in range(40):
            assert full[i, j] == emulated_sum(x[i, :, j], "bf16", order="pairwise")


# ------------------------------------------------------------------ every order vs the exact reference


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "acc,rounding",
    [
        ("fp32", "nearest_even"),
        ("bf16", "nearest_even"),
        ("bf16", "toward_zero"),
        ("e4m3fn", "nearest_even"),
        ("fp16", "nearest_away"),
    ],
)
def test_matmul_equals_fraction_reference(order, acc, rounding):
    """Every addition checked against an exact rational sum rounded once, on data whose float64
    sums are often inexact (wide exponent spread), for each order."""
    spread = 3 if acc == "e4m3fn" else (6 if acc == "fp16" else 25)
    A, B = wide((3, 37), 10, spread), wide((37, 4), 11, spread)
    in_fmt = "e4m3fn" if acc == "e4m3fn" else ("fp16" if acc == "fp16" else "bf16")
    block = block_for(order, 5)
    ours = emulated_matmul(A, B, in_fmt, acc, order, rounding, block)
    ref = emulated_matmul_ref(A, B, in_fmt, acc, order, rounding, block)
    assert_bits(ours, ref)


@pytest.mark.parametrize("order", ORDERS)
def test_matmul_dot_and_sum_of_products_agree(order):
    A, B = wide((6, 50), 20), wide((50, 5), 21)
    block = block_for(order, 8)
    C = emulated_matmul(A, B, "bf16", "bf16", order, block=block)
    Aq, Bq = round_to(A, "bf16"), round_to(B, "bf16")
    prods = Aq[:, :, None] * Bq[None, :, :]  # (M, K, N)
    assert_bits(C, emulated_sum(prods, "bf16", order, block=block, axis=1))
    assert_bits(C[2, 3], emulated_dot(A[2], B[:, 3], "bf16", "bf16", order, block=block))


def test_products_of_fp32_inputs_are_exact_in_float64():
    """24 + 24 significant bits fit in float64's 53, so fp32 inputs need no special case."""
    x = wide(2000, 5, spread=120).astype(np.float32).astype(np.float64)
    y = wide(2000, 6, spread=120).astype(np.float32).astype(np.float64)
    for a, b in zip(x[:300], y[:300]):
        assert Fraction(a * b) == Fraction(a) * Fraction(b)
    extremes = np.float64([FORMATS["fp32"].max, FORMATS["fp32"].smallest_subnormal, 1 + 2.0**-23])
    for a in extremes:
        for b in extremes:
            assert Fraction(a * b) == Fraction(a) * Fraction(b)


def test_double_rounding_cases_are_rounded_once():
    """Hand-worked cases where rounding the float64 sum again would be wrong."""
    # bf16: 2**-60 + (1 + 2**-4)**2 = 1 + 2**-3 + 2**-8 + 2**-60; float64 drops 2**-60 and lands on
    # the midpoint 1 + 33 * 2**-8, which ties to even 1.125; the exact sum is above it: 1.1328125
    x = [2.0**-60, (1 + 2.0**-4) ** 2]
    assert emulated_sum(x, "bf16") == 1.1328125
    assert emulated_dot([2.0**-30, 1 + 2.0**-4], [2.0**-30, 1 + 2.0**-4], "bf16", "bf16") == 1.1328125
    # toward zero: 1 - 2**-60 truncates to the bf16 value below 1, not to 1
    assert emulated_sum([1.0, -(2.0**-60)], "bf16", rounding="toward_zero") == 1 - 2.0**-8
    assert emulated_sum([1.0, -(2.0**-60)], "fp32", rounding="toward_zero") == 1 - 2.0**-24


def test_overflow_and_subnormals_follow_the_format():
    assert emulated_sum([60000.0, 60000.0], "fp16") == np.inf
    assert np.isnan(emulated_sum([400.0, 400.0], "e4m3fn"))
    tiny = FORMATS["fp16"].smallest_subnormal
    assert emulated_sum([tiny, tiny, tiny], "fp16") == 3 * tiny
    assert emulated_sum([tiny, 0.4 * tiny], "fp16") == tiny


# ------------------------------------------------------------------ FACTS.md numbers


def test_sum_of_ones_stalls():
    assert emulated_sum(np.ones(1000), "bf16") == 256
    assert emulated_sum(np.ones(5000), "fp16") == 2048
    # the same ones in other orders do not stall: every partial sum is a small integer
    assert emulated_sum(np.ones(1024), "bf16", "pairwise") == 1024
    assert emulated_sum(np.ones(1024), "bf16", "blocked", block=256) == 1024
    assert emulated_sum(np.ones(1024), "bf16", "kahan") == 1024


@pytest.mark.parametrize("fmt,n_last,value", [("bf16", 64, 5.0625), ("fp16", 512, 7.0859375)])
def test_harmonic_series_stalls(fmt, n_last, value):
    """FACTS: 'stalls at 5.0625 after 65 terms in bf16, 7.0859375 after 513 in fp16'. Computed:
    the sum of the first n_last terms is the value, and term n_last + 1 is the first one absorbed
    (and every later one)."""
    n = n_last + 200
    terms = 1 / np.arange(1, n + 1)
    # row i holds the first i+1 terms and zeros after (adding zero changes nothing): all prefixes
    X = np.where(np.arange(n)[None, :] <= np.arange(n)[:, None], terms[None, :], 0.0)
    S = emulated_sum(X, fmt, in_fmt=fmt)  # S[i]: sum of i+1 terms
    assert S[n_last - 1] == value
    assert S[n_last - 2] != value  # term n_last still counted
    assert np.all(S[n_last - 1 :] == value)  # terms n_last+1, ... all absorbed


def test_ml_dtypes_readme_uniform_example():
    """ml_dtypes README: bf16 values of default_rng(0).uniform(size=10000) sum to 256 in bf16;
    `vals.sum(dtype='float32').astype(bfloat16)` gives 4992. Our fp32 accumulator gives about
    4994.17 (4992 once rounded to bf16), within the recursive-summation bound of the exact sum."""
    x = np.random.default_rng(0).uniform(size=10000)
    assert emulated_sum(x, "bf16", in_fmt="bf16") == 256
    s32 = emulated_sum(x, "fp32", in_fmt="bf16")
    assert round_to(s32, "bf16") == 4992
    xb = round_to(x, "bf16")
    exact = float(fraction_sum(xb))
    bound = gamma(len(x) - 1, FORMATS["fp32"].unit_roundoff) * np.abs(xb).sum()
    assert abs(s32 - exact) <= bound
    assert abs(s32 - 4994.17) < 0.01


# ------------------------------------------------------------------ Higham's error bounds


@pytest.mark.parametrize("seed", range(2))
def test_fp32_error_bounds_sequential_pairwise_kahan(seed):
    n = 4096
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) + 0.3).astype(np.float32).astype(np.float64)  # mixed signs
    exact_f = fraction_sum(x)
    abs_sum = np.abs(x).sum()
    u = FORMATS["fp32"].unit_roundoff
    err = {
        o: abs(Fraction(float(emulated_sum(x, "fp32", o, block=block_for(o, 64, lanes=16)))) - exact_f) for o in ORDERS
    }
    assert err["sequential"] <= gamma(n - 1, u) * abs_sum
    assert err["pairwise"] <= gamma(math.ceil(math.log2(n)), u) * abs_sum
    # blocked: block-1 additions inside a block, then n/block - 1 outer ones (Higham 4.2)
    assert err["blocked"] <= gamma(64 - 1 + n // 64 - 1, u) * abs_sum
    # Kahan: (2u + O(n u^2)) sum|x|; the O term is taken as 4 n u^2 (negligible here: 1e-9 of 2u)
    assert err["kahan"] <= (2 * u + 4 * n * u * u) * abs_sum
    # 16 lanes: n/16 - 1 additions in each lane, then 4 levels of the tree
    assert err["lanes"] <= gamma(n // 16 - 1 + 4, u) * abs_sum


def test_error_bounds_in_bf16_show_why_order_matters():
    """In bf16 (u = 2**-8) 4096 uniform terms: sequential stagnates far beyond its typical error;
    pairwise and Kahan stay within their bounds."""
    x = round_to(np.random.default_rng(3).uniform(size=4096), "bf16")
    exact = float(fraction_sum(x))
    u = FORMATS["bf16"].unit_roundoff
    seq = emulated_sum(x, "bf16")
    pw = emulated_sum(x, "bf16", "pairwise")
    assert abs(seq - exact) / exact > 0.5  # stagnation
    assert abs(pw - exact) <= gamma(12, u) * x.sum()


# ------------------------------------------------------------------ stochastic rounding


def test_stochastic_rounding_is_unbiased_and_does_not_stagnate():
    R, n = 400, 2000
    x = round_to(np.random.default_rng(0).uniform(size=n), "bf16")
    exact = float(fraction_sum(x))
    X = np.broadcast_to(x, (R, n))  # R independent runs of the same sum, in one vectorised loop
    S = emulated_sum(X, "bf16", rounding="stochastic", rng=np.random.default_rng(1))
    se = S.std(ddof=1) / math.sqrt(R)
    assert abs(S.mean() - exact) < 4 * se
    assert emulated_sum(x, "bf16") == 256  # round-to-nearest stalls; stochastic does not
    assert S.min() > 0.5 * exact


def test_stochastic_rounding_is_reproducible_with_the_same_generator():
    x = wide((4, 300), 7, spread=5)
    a = emulated_sum(x, "bf16", "kahan", "stochastic", rng=np.random.default_rng(5))
    b = emulated_sum(x, "bf16", "kahan", "stochastic", rng=np.random.default_rng(5))
    c = emulated_sum(x, "bf16", "kahan", "stochastic", rng=np.random.default_rng(6))
    assert_bits(a, b)
    assert not np.array_equal(a, c)
    A, B = wide((5, 64), 1, 4), wide((64, 3), 2, 4)
    m1 = emulated_matmul(A, B, acc="bf16", rounding="stochastic", rng=np.random.default_rng(9))
    m2 = emulated_matmul(A, B, acc="bf16", rounding="stochastic", rng=np.random.default_rng(9))
    assert_bits(m1, m2)
    # every result lies on the bf16 grid, within one bf16 step of the nearest-even result
    assert_bits(round_to(m1, "bf16"), m1)


# ------------------------------------------------------------------ errors that say what is accepted


def test_errors():
    x = np.ones(8)
    with pytest.raises(ValueError, match="unknown order 'zigzag'.*'pairwise'"):
        emulated_sum(x, order="zigzag")
    with pytest.raises(ValueError, match="needs block"):
        emulated_sum(x, order="blocked")
    with pytest.raises(ValueError, match="only used with order='blocked'"):
        emulated_sum(x, block=4)
    with pytest.raises(ValueError, match="positive int"):
        emulated_sum(x, order=Order.BLOCKED, block=0)
    with pytest.raises(ValueError, match="explicit generator"):
        emulated_sum(x, rounding="stochastic")
    with pytest.raises(ValueError, match="unknown rounding"):
        emulated_sum(x, rounding="up")
    with pytest.raises(ValueError, match=r"A \(2, 3\) and B \(4, 5\)"):
        emulated_matmul(np.ones((2, 3)), np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"\(3,\) and \(4,\)"):
        emulated_dot(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="scale format"):
        emulated_sum(x, acc="e8m0fnu")
    assert emulated_sum(np.ones((3, 0)), "bf16").shape == (3,)


# ------------------------------------------------------------------ the fast rounding path


@pytest.mark.parametrize("name", ["fp32", "bf16", "fp16", "e4m3fn", "e5m2", "e2m1fn", "e3m4"])
@pytest.mark.parametrize("rounding", ["nearest_even", "nearest_away", "toward_zero"])
def test_fast_rounding_equals_round_to(name, rounding):
    """The bit-pattern rounding in accumulation.RoundingAdder against round_to, over every binade of the
    format and beyond (subnormals, overflow, inf, NaN), and on the format's midpoints."""
    from nbhelpers.accumulation import RoundingAdder
    from nbhelpers.formats import finite_values, get_format
    from nbhelpers.rounding import Rounding

    f = get_format(name)
    rng = np.random.default_rng(0)
    lo, hi = f.emin - f.man_bits - 3, f.emax + 3
    x = rng.uniform(1, 2, 20000) * np.exp2(rng.integers(lo, hi, 20000)) * rng.choice([-1, 1], 20000)
    if f.bits <= 16:
        v = finite_values(f)
        x = np.concatenate([x, v, (v[1:] + v[:-1]) / 2])
    x = np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, np.nan]])
    ours = RoundingAdder(f, Rounding(rounding), None).round(x)
    ref = round_to(x, f, rounding)
    assert_bits(ours, ref)
    assert np.array_equal(np.signbit(ours[~np.isnan(ours)]), np.signbit(ref[~np.isnan(ref)]))


@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero"])
def test_matmul_in_the_subnormal_range_equals_fraction_reference(rounding):
    """fp16 products around 2**-16 .. 2**-24: sums in fp16's subnormal range (the slow lanes)."""
    A, B = wide((3, 30), 40, 3) * 2.0**-7, wide((30, 4), 41, 3) * 2.0**-7
    for order in ORDERS:
        block = block_for(order, 4, lanes=4)
        assert_bits(
            emulated_matmul(A, B, "fp16", "fp16", order, rounding, block),
            emulated_matmul_ref(A, B, "fp16", "fp16", order, rounding, block),
        )


def test_batched_fp32_sum_of_bf16_values_equals_float32_loops():
    """bf16 values summed in fp32 often give exact sums on an fp32 midpoint (25 bits): many
    lanes are critical at once, the path that checks exactness over the whole batch."""
    x = round_to(wide((64, 400), 8, spread=6), "bf16").astype(np.float32)
    ours = emulated_sum(x, "fp32")
    for i in range(64):
        assert ours[i] == loop_sum(x[i], np.float32)
    assert_bits(emulated_sum(x, "fp32", "kahan")[:4], [emulated_sum(x[i], "fp32", "kahan") for i in range(4)])


# ------------------------------------------------------------------ running_sum


@pytest.mark.parametrize(
    "acc,rounding",
    [("bf16", "nearest_even"), ("fp16", "toward_zero"), ("fp32", "nearest_even"), ("e4m3fn", "nearest_away")],
)
def test_running_sum_prefixes_equal_emulated_sum(acc, rounding):
    x = wide(60, 1, spread=3 if acc == "e4m3fn" else 10)
    S = running_sum(x, acc, rounding)
    assert S.shape == x.shape
    for k in [0, 1, 7, 30, 59]:
        assert S[k] == emulated_sum(x[: k + 1], acc, rounding=rounding)


def test_running_sum_equals_ml_dtypes_bfloat16_loop():
    x = wide(500, 2, spread=8).astype(ml_dtypes.bfloat16)
    s, ref = ml_dtypes.bfloat16(0), []
    for v in x:
        s = ml_dtypes.bfloat16(s + v)
        ref.append(float(s))
    assert_bits(running_sum(x, "bf16"), np.array(ref))


def test_running_sum_axis_and_stochastic_matches_emulated_sum():
    x = wide((5, 40, 3), 3, spread=6)
    S = running_sum(x, "bf16", axis=1)
    assert S.shape == x.shape
    assert_bits(S[:, -1, :], emulated_sum(x, "bf16", axis=1))
    a = running_sum(x[0, :, 0], "bf16", "stochastic", rng=np.random.default_rng(4))
    b = emulated_sum(x[0, :, 0], "bf16", rounding="stochastic", rng=np.random.default_rng(4))
    assert a[-1] == b


def test_running_sum_ones_stall_and_in_fmt():
    S = running_sum(np.ones(300), "bf16")
    assert S[255] == 256 and np.all(S[255:] == 256) and np.array_equal(S[:255], np.arange(1, 256))
    assert np.array_equal(running_sum([0.1, 0.1], "fp32", in_fmt="bf16"), np.cumsum(round_to([0.1, 0.1], "bf16")))
    with pytest.raises(ValueError, match="stochastic rounding needs an explicit generator"):
        running_sum([1.0], "bf16", "stochastic")
    with pytest.raises(ValueError, match="scalar"):
        running_sum(1.0, "bf16")


# ------------------------------------------------------------------ addend_loss


def test_addend_loss_against_fractions():
    """|fl(s + a) - (s + a)| / |a| computed with Fractions, fl from emulated_sum (tested correct);
    fp32 pairs with ratios up to 2**40, whose float64 sums are often inexact."""
    rng = np.random.default_rng(6)
    n = 400
    s = round_to(rng.uniform(1, 2, n) * np.exp2(rng.integers(-10, 10, n)) * rng.choice([-1, 1], n), "fp32")
    a = round_to(s / np.exp2(rng.uniform(0, 40, n)) * rng.choice([-1, 1], n), "fp32")
    got = addend_loss(s, a, "fp32")
    fl = emulated_sum(np.stack([s, a], axis=1), "fp32")
    for g, si, ai, fi in zip(got, s, a, fl):
        ref = abs(Fraction(fi) - Fraction(si) - Fraction(ai)) / abs(Fraction(ai))
        assert abs(Fraction(g) - ref) <= ref * Fraction(2) ** -52  # one float64 division
        assert g <= 1.0  # s is a candidate, so round to nearest never loses more than a


def test_addend_loss_edges_and_errors():
    assert addend_loss(256.0, 1.0, "bf16") == 1.0  # tie to the even 256: lost
    assert addend_loss(510.0, 1.0, "bf16") == 1.0  # tie to 512: counted twice, also an error of |a|
    assert addend_loss(256.0, 2.0, "bf16") == 0.0
    assert addend_loss(1.0, 2.0**-9, "bf16") == 1.0
    np.testing.assert_array_equal(addend_loss([1.0, 1.0], [2.0**-9, 2.0**-7], "bf16"), [1.0, 0.0])
    with pytest.raises(ValueError, match="nonzero"):
        addend_loss(1.0, 0.0)
    with pytest.raises(ValueError, match="finite"):
        addend_loss(np.inf, 1.0)
    with pytest.raises(ValueError, match="deterministic"):
        addend_loss(1.0, 1.0, "bf16", "stochastic")


# ------------------------------------------------------------------ stall_length


def assert_stalls_after(K, value, acc, rounding="nearest_even"):
    """The definition, checked with running_sum: each of the first K terms changes the sum, the
    (K+1)-th does not."""
    S = np.concatenate([[0.0], running_sum(np.full(K + 1, value), acc, rounding)])
    assert np.all(S[1 : K + 1] != S[:K]), "a term before K was already lost"
    assert S[K + 1] == S[K], "term K + 1 still changed the sum"


def test_stall_length_facts():
    assert stall_length(1.0, "bf16") == 256
    assert stall_length(1.0, "fp16") == 2048
    assert stall_length(1.0, "fp32") == 2**24
    # fp32: the sum of 2**24 ones is exact (integers), and 2**24 + 1 rounds back to 2**24
    assert round_to(2.0**24 + 1, "fp32") == 2.0**24 and round_to(2.0**24 - 1, "fp32") == 2.0**24 - 1


@pytest.mark.parametrize("rounding", ["nearest_even", "nearest_away", "toward_zero"])
def test_stall_length_against_the_definition(rounding):
    rng = np.random.default_rng({"nearest_even": 0, "nearest_away": 1, "toward_zero": 2}[rounding])
    checked = 0
    for acc in ["bf16", "fp16", "e5m2", "e4m3", "e6m5", "e3m4", "e4m3fn", "e5m7"]:
        for _ in range(4):
            v = float(rng.uniform(1, 2) * 2.0 ** int(rng.integers(-6, 3)))
            if rng.random() < 0.5:  # a value of the format: ties happen on the way
                v = float(round_to(v, acc))
            try:
                K = stall_length(v, acc, rounding)
            except ValueError:
                continue
            assert_stalls_after(K, v, acc, rounding)
            checked += 1
    assert checked >= 20


def test_stall_length_ties_on_the_way():
    # 3 in bf16: from 256 on the spacing is 2 and s + 3 is a tie every step; from 512, lost
    for v in [3.0, 1.5, 0.75, 5.0, 7.0]:
        assert_stalls_after(stall_length(v, "bf16"), v, "bf16")
    assert_stalls_after(stall_length(float(round_to(0.1, "fp16")), "fp16"), float(round_to(0.1, "fp16")), "fp16")


def test_stall_length_below_the_smallest_subnormal_is_zero():
    tiny = FORMATS["bf16"].smallest_subnormal
    assert stall_length(tiny / 4, "bf16") == 0
    assert stall_length(tiny, "bf16") > 0


def test_stall_length_errors():
    with pytest.raises(ValueError, match="overflows"):
        stall_length(1000.0, "fp16")  # would stall near 2**21 > 65504
    with pytest.raises(ValueError, match="overflows"):
        stall_length(100.0, "e4m3fn")  # NaN on overflow
    with pytest.raises(ValueError, match="positive and finite"):
        stall_length(-1.0, "bf16")
    with pytest.raises(ValueError, match="positive and finite"):
        stall_length(math.inf, "bf16")
    with pytest.raises(TypeError, match="real number"):
        stall_length("1", "bf16")
    with pytest.raises(ValueError, match="does not stall"):
        stall_length(1.0, "bf16", "stochastic")


# ------------------------------------------------------------------ SumMethod


def test_sum_method_spec():
    m = SumMethod("bf16", "blocked", block=64)
    assert m.acc is FORMATS["bf16"] and m.order is Order.BLOCKED and m.rounding is Rounding.NEAREST_EVEN
    assert m.label == "bf16 blocked(64)"
    assert SumMethod("bf16", rounding="stochastic").label == "bf16 sequential, stochastic"
    assert SumMethod("fp32").label == "fp32 sequential"
    assert SumMethod("bf16", "kahan") == SumMethod(FORMATS["bf16"], Order.KAHAN)
    x = wide(100, 7, spread=5)
    assert m.sum(x) == emulated_sum(x, "bf16", "blocked", block=64)
    with pytest.raises(ValueError, match="needs block"):
        SumMethod("bf16", "blocked")
    with pytest.raises(ValueError, match="unknown order"):
        SumMethod("bf16", "random")


def test_sum_method_check_rng_and_sum_with_a_generator():
    """check_rng: what every entry point asks of rng, from the method alone (before any data)."""
    stochastic = SumMethod("bf16", "kahan", "stochastic")
    stochastic.check_rng(np.random.default_rng(0))
    with pytest.raises(ValueError, match="stochastic rounding needs an explicit generator"):
        stochastic.check_rng(None)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        stochastic.check_rng(42)
    SumMethod("bf16").check_rng(None)  # deterministic: no generator needed, none looked at
    x = wide((3, 50), 11, spread=5)
    assert_bits(
        stochastic.sum(x, np.random.default_rng(2)),
        emulated_sum(x, "bf16", "kahan", "stochastic", rng=np.random.default_rng(2)),
    )
    assert_bits(SumMethod("fp16", "pairwise").sum(x.T, axis=0), emulated_sum(x, "fp16", "pairwise"))


# ------------------------------------------------------------------ the order of a SIMD kernel


def test_lanes_halving_tree_by_hand():
    """Products 2**-24, 1, 2**-24, 0 in 4 lanes, one each: the tree adds lane 0 to lane 2 and
    lane 1 to lane 3 first, 2**-24 + 2**-24 = 2**-23 exactly, then 1 + 2**-23, an fp32 number.
    Sequentially, 2**-24 + 1 is a tie that goes to even (1), and so is the next 1 + 2**-24:
    1.0. The pairwise tree joins neighbours, (2**-24 + 1) + (2**-24 + 0): 1.0 as well."""
    a, b = np.ones((1, 4)), np.array([[2.0**-24], [1.0], [2.0**-24], [0.0]])
    assert emulated_matmul(a, b, order="lanes", block=4)[0, 0] == 1 + 2.0**-23
    assert emulated_matmul(a, b)[0, 0] == 1.0
    assert emulated_matmul(a, b, order="pairwise")[0, 0] == 1.0
    # 8 products in 4 lanes: lane k % 4 gets products k and k + 4, in that order
    a = np.ones((1, 8))
    b = np.array([[1.0], [2.0**-24], [0.0], [2.0**-24], [2.0**-24], [0.0], [0.0], [0.0]])
    # lane 0: 1 + 2**-24 -> 1 (tie to even); lane 1: 2**-24; lane 3: 2**-24; tree: (1 + 0) + (2**-24 + 2**-24)
    assert emulated_matmul(a, b, order="lanes", block=4)[0, 0] == 1 + 2.0**-23
    assert emulated_matmul_ref(a, b, order="lanes", block=4)[0, 0] == 1 + 2.0**-23


def test_lanes_one_lane_is_sequential_and_more_lanes_than_terms_is_fine():
    A, B = wide((4, 70), 42, 8), wide((70, 3), 43, 8)
    assert_bits(emulated_matmul(A, B, order="lanes", block=1), emulated_matmul(A, B))
    assert_bits(emulated_matmul(A, B, order="lanes", block=128), emulated_matmul_ref(A, B, order="lanes", block=128))


def test_lanes_needs_a_power_of_two():
    a, b = np.ones((1, 8)), np.ones((8, 1))
    with pytest.raises(ValueError, match="power of two"):
        emulated_matmul(a, b, order="lanes", block=3)
    with pytest.raises(ValueError, match="needs block=L"):
        emulated_sum(np.ones(8), order="lanes")
    with pytest.raises(ValueError, match="block"):
        emulated_matmul(a, b, order="lanes", block=0)


def test_the_native_fp32_addition_gives_the_bits_of_the_general_path():
    """fp32 with nearest-even adds with numpy's float32 addition where both operands are fp32
    numbers; bit for bit what the general path (float64 sum, critical points, round to odd) gives,
    on normal, subnormal, overflowing and special operands, and operands that are not fp32 numbers
    (those take the general path)."""
    from nbhelpers.accumulation import RoundingAdder

    native = RoundingAdder(FORMATS["fp32"], Rounding.NEAREST_EVEN, None)
    general = RoundingAdder(FORMATS["fp32"], Rounding.NEAREST_EVEN, None)
    general.native32 = False
    assert native.native32 and not RoundingAdder(FORMATS["bf16"], Rounding.NEAREST_EVEN, None).native32
    assert not RoundingAdder(FORMATS["fp32"], Rounding.TOWARD_ZERO, None).native32
    rng = np.random.default_rng(32)
    specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0**-149,
        -(2.0**-149),
        2.0**-126,
        np.inf,
        -np.inf,
        np.nan,
        3.4028234663852886e38,
    ]

    def draw(n: int) -> np.ndarray:
        scale = [1.0, 2.0 ** rng.integers(-160, -120, n), 2.0**127, 2.0 ** rng.integers(-40, 40, n)][rng.integers(4)]
        v = rng.choice(specials, n) if rng.random() < 0.2 else rng.standard_normal(n) * scale
        if rng.random() < 0.8:
            with np.errstate(over="ignore"):
                v = v.astype(np.float32).astype(np.float64)
        return v

    took_native = 0
    for _ in range(3000):
        n = int(rng.integers(1, 40))
        s, x = draw(n), draw(n)
        with np.errstate(all="ignore"):
            ours, want = native.add(s, x), general.add(s, x)
            took_native += native._add_native32(s, x) is not None
        np.testing.assert_array_equal(ours.view(np.int64), want.view(np.int64), err_msg=f"{s!r} + {x!r}")
    assert 800 < took_native < 2900  # both paths were taken
