"""Tests of chapter 02's additions to nbhelpers.accumulation (running sums, exact sums, the lost
part of an addend, where sums stall, error statistics) and of chapter 02's plot helpers. Exact
references: Python Fractions, ml_dtypes loops, and the tested emulated_sum."""
import math
from fractions import Fraction

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from nbhelpers import plots  # noqa: E402
from nbhelpers.accumulation import (  # noqa: E402
    Order,
    SumErrors,
    SumMethod,
    addend_loss,
    emulated_sum,
    errors_vs_length,
    exact_sum,
    running_sum,
    stall_length,
    sum_errors,
)
from nbhelpers.formats import FORMATS  # noqa: E402
from nbhelpers.rounding import Rounding, round_to  # noqa: E402


def wide(shape, seed, spread=20):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape))


# ------------------------------------------------------------------ running_sum


@pytest.mark.parametrize("acc,rounding", [("bf16", "nearest_even"), ("fp16", "toward_zero"),
                                          ("fp32", "nearest_even"), ("e4m3fn", "nearest_away")])
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
    assert np.array_equal(running_sum(x, "bf16"), np.array(ref))


def test_running_sum_axis_and_stochastic_matches_emulated_sum():
    x = wide((5, 40, 3), 3, spread=6)
    S = running_sum(x, "bf16", axis=1)
    assert S.shape == x.shape
    assert np.array_equal(S[:, -1, :], emulated_sum(x, "bf16", axis=1))
    a = running_sum(x[0, :, 0], "bf16", "stochastic", rng=np.random.default_rng(4))
    b = emulated_sum(x[0, :, 0], "bf16", rounding="stochastic", rng=np.random.default_rng(4))
    assert a[-1] == b


def test_running_sum_ones_stall_and_in_fmt():
    S = running_sum(np.ones(300), "bf16")
    assert S[255] == 256 and np.all(S[255:] == 256) and np.array_equal(S[:255], np.arange(1, 256))
    assert np.array_equal(running_sum([0.1, 0.1], "fp32", in_fmt="bf16"),
                          np.cumsum(round_to([0.1, 0.1], "bf16")))
    with pytest.raises(ValueError, match="stochastic rounding needs an explicit generator"):
        running_sum([1.0], "bf16", "stochastic")
    with pytest.raises(ValueError, match="scalar"):
        running_sum(1.0, "bf16")


# ------------------------------------------------------------------ exact_sum


def test_exact_sum_is_the_exact_sum_rounded_once():
    X = wide((6, 400), 5, spread=60)
    X[0, :3] = [1e300, 1.0, -1e300]  # a case where every naive order loses the 1.0
    for row, s in zip(X, exact_sum(X)):
        assert s == float(sum((Fraction(v) for v in row.tolist()), Fraction(0)))
    assert exact_sum(np.zeros(0)) == 0.0
    assert exact_sum(X.T, axis=0).shape == (6,)
    assert np.array_equal(exact_sum(X.T, axis=0), exact_sum(X))
    assert exact_sum(np.ones(3, dtype=ml_dtypes.bfloat16)) == 3.0


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
    assert np.all(S[1: K + 1] != S[:K]), "a term before K was already lost"
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


# ------------------------------------------------------------------ SumMethod, sum_errors, errors_vs_length


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


def test_sum_errors_against_direct_computation():
    X = np.abs(wide((8, 300), 8, spread=4))
    X[0] = np.ones(300)
    methods = [SumMethod("bf16"), SumMethod("bf16", "kahan"), SumMethod("bf16", rounding="stochastic")]
    res = sum_errors(X, methods, rng=np.random.default_rng(1))
    assert [r.method for r in res] == methods
    exact = np.array([math.fsum(r) for r in X])
    seq = emulated_sum(X, "bf16")
    np.testing.assert_array_equal(res[0].relative, np.abs(seq - exact) / exact)
    np.testing.assert_array_equal(res[0].normwise, res[0].relative)  # positive data: sum|x| == |sum|
    assert res[0].relative[0] == (300 - 256) / 300
    assert res[1].relative[0] == 0.0  # Kahan counts all 300 ones
    row = res[0].row()
    assert row[0] == "bf16 sequential" and row[2] == res[0].relative.max() and len(row) == len(SumErrors.HEADERS)
    with pytest.raises(ValueError, match="shape"):
        sum_errors(np.ones(5), methods)
    with pytest.raises(TypeError, match="SumMethod"):
        sum_errors(X, ["bf16"])
    with pytest.raises(ValueError, match="stochastic rounding needs an explicit generator"):
        sum_errors(X, methods)


def test_sum_errors_zero_exact_sum():
    X = np.array([[1.0, -1.0, 0.0, 0.0], [1.0, 2.0**-9, -1.0, 0.0], [1.0, 2.0**-9, -1.0, -2.0**-9]])
    res = sum_errors(X, [SumMethod("bf16")])[0]
    assert res.relative[0] == 0.0  # both zero
    assert res.relative[1] == 1.0  # bf16 loses 2**-9 and gives 0
    assert res.relative[2] == np.inf  # exact 0, bf16 -2**-9


def test_errors_vs_length_are_medians_of_prefix_sums():
    X = np.abs(wide((6, 64), 9, spread=3))
    methods = [SumMethod("bf16"), SumMethod("fp16", "pairwise")]
    out = errors_vs_length(X, [4, 16, 64], methods)
    for i, n in enumerate([4, 16, 64]):
        for res in sum_errors(X[:, :n], methods):
            assert out[res.method][i] == np.median(res.relative)
    with pytest.raises(ValueError, match="at most N"):
        errors_vs_length(X, [128], methods)


# ------------------------------------------------------------------ plots (smoke tests)


def test_chapter02_plots_return_axes():
    ax = plots.plot_running_sums(1 / np.arange(1, 200), ["bf16", "fp16"])
    assert ax.get_xlabel() and len(ax.lines) == 3
    ax = plots.plot_addend_loss(["bf16", "fp32"], np.random.default_rng(0), n=200)
    assert len(ax.lines) >= 4
    P = np.abs(wide((4, 128), 1, spread=2))
    ax = plots.plot_sum_to_term_ratio({"positive": P, "signed": wide((4, 128), 2, spread=2)}, ["bf16"])
    assert len(ax.lines) == 3
    fig, ax0 = plt.subplots()
    errs = errors_vs_length(P, [8, 32, 128], [SumMethod("bf16"), SumMethod("bf16", rounding="stochastic")],
                            rng=np.random.default_rng(0))
    assert plots.plot_errors_vs_length([8, 32, 128], errs, ax=ax0) is ax0
    with pytest.raises(ValueError, match="1-D"):
        plots.plot_running_sums(np.ones((2, 2)), ["bf16"])
    plt.close("all")
