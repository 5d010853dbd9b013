"""Tests of nbhelpers.experiments: seeded GEMM inputs, sweeps of GEMM variants over K and their
errors against either reference, and error statistics of summation methods (per sum, and
against the length of the sum), each against a direct computation."""

import math

import numpy as np
import pytest
from helpers import wide

from nbhelpers.accumulation import SumMethod, emulated_matmul, emulated_sum
from nbhelpers.experiments import (
    GemmSweep,
    KCrossing,
    SumErrors,
    errors_vs_length,
    first_K_reaching,
    gemm_inputs,
    gemm_sweep,
    sum_errors,
    ulp_ladder,
)
from nbhelpers.formats import FORMATS
from nbhelpers.metrics import relative_error
from nbhelpers.rounding import round_to
from nbhelpers.tensor_cores import TENSOR_CORES, tensor_core_matmul

# ------------------------------------------------------------------ GEMM inputs and sweeps


def test_gemm_inputs_are_reproducible_and_independent_of_other_draws():
    A1, B1 = gemm_inputs(4, 128, 3, seed=7)
    gemm_inputs(4, 256, 3, seed=7)
    A2, B2 = gemm_inputs(4, 128, 3, seed=7)
    assert np.array_equal(A1, A2) and np.array_equal(B1, B2)
    assert A1.shape == (4, 128) and B1.shape == (128, 3)
    assert not np.array_equal(A1, gemm_inputs(4, 128, 3, seed=8)[0])
    U, V = gemm_inputs(4, 128, 3, dist="uniform")
    assert U.min() >= 0 and U.max() < 1 and V.min() >= 0
    for bad in [dict(M=0), dict(K=1.5), dict(seed=-1), dict(dist="cauchy"), dict(N=True)]:
        kw = dict(M=2, K=2, N=2) | bad
        with pytest.raises(ValueError):
            gemm_inputs(**kw)


def test_gemm_sweep_errors_against_both_references():
    Ks = [16, 64]
    sweep = gemm_sweep(
        {
            "bf16/fp32": lambda A, B: emulated_matmul(A, B, "bf16", "fp32"),
            "bf16/bf16": lambda A, B: emulated_matmul(A, B, "bf16", "bf16"),
        },
        Ks,
        M=4,
        N=3,
        seed=1,
    )
    assert isinstance(sweep, GemmSweep) and sweep.Ks == (16, 64)
    sweep = sweep.with_rounded_output("bf16/fp32", "bf16", "bf16 out")
    A, B = sweep.inputs(64)
    C = emulated_matmul(A, B, "bf16", "fp32")
    assert np.array_equal(sweep.outputs["bf16 out"][1], round_to(C, "bf16"))
    data_err = sweep.errors()
    acc_err = sweep.errors("bf16", labels=["bf16/fp32"])
    assert list(acc_err) == ["bf16/fp32"]
    assert data_err["bf16/fp32"][1] == relative_error(C, A @ B)
    assert acc_err["bf16/fp32"][1] == relative_error(C, round_to(A, "bf16") @ round_to(B, "bf16"))
    # against the rounded inputs only the fp32 accumulation is left: far below input rounding
    assert np.all(acc_err["bf16/fp32"] < 1e-3 * data_err["bf16/fp32"])
    assert np.all(data_err["bf16/bf16"] > data_err["bf16/fp32"])


def test_gemm_sweep_bad_input():
    with pytest.raises(ValueError, match="non-empty dict"):
        gemm_sweep({}, [8])
    with pytest.raises(TypeError, match="not callable"):
        gemm_sweep({"x": 3}, [8])
    with pytest.raises(ValueError, match="shape"):
        gemm_sweep({"x": lambda A, B: A}, [8], M=2, N=3)
    with pytest.raises(ValueError, match="Ks is empty"):
        gemm_sweep({"x": lambda A, B: A @ B}, [])
    sweep = gemm_sweep({"x": lambda A, B: A @ B}, [8], M=2, N=2)
    with pytest.raises(KeyError, match="no variant"):
        sweep.errors(labels=["y"])
    with pytest.raises(ValueError, match="exists already"):
        sweep.with_rounded_output("x", "bf16", "x")


def test_first_K_reaching_is_one_long_product_read_at_every_K():
    """The chunks carried on through C give, at every K, what one call over the first K columns
    gives (the H100 model's groups of 16 divide K_start), and each error is against the float64
    product of the rounded inputs, drawn chunk by chunk from the documented seeds."""

    def step(A, B, C):
        return TENSOR_CORES["H100"].matmul(A, B, "bf16", C=C)

    found = first_K_reaching(step, 1.0, K_start=32, K_max=256, M=3, N=2, seed=5, dist="uniform")
    assert isinstance(found, KCrossing) and found.K is None  # an error of 100%: never reached
    assert list(found.errors) == [32, 64, 128, 256]
    chunks = []
    for i, k in enumerate([32, 32, 64, 128]):
        rng = np.random.default_rng([5, 3, 2, i])
        chunks.append((rng.random((3, k)), rng.random((k, 2))))
    A = np.concatenate([a for a, _ in chunks], axis=1)
    B = np.concatenate([b for _, b in chunks], axis=0)
    for K, err in found.errors.items():
        C = TENSOR_CORES["H100"].matmul(A[:, :K], B[:K], "bf16")
        ref = round_to(A[:, :K], "bf16") @ round_to(B[:K], "bf16")
        assert err == pytest.approx(relative_error(C, ref), rel=1e-12, abs=0)
    # a K_max that is not K_start times a power of two: the last chunk stops at it
    assert list(first_K_reaching(step, 1.0, K_start=32, K_max=96, M=2, N=2).errors) == [32, 64, 96]


def test_first_K_reaching_stops_at_the_first_K_that_reaches():
    # 8 bits kept: same-sign products lose much of themselves to the alignment, and more as K grows
    def step(A, B, C):
        return tensor_core_matmul(A, B, "bf16", group=4, align_bits=8, C=C)

    found = first_K_reaching(step, 0.02, K_start=16, K_max=4096, M=2, N=2, dist="uniform")
    errs = list(found.errors.values())
    assert found.K == list(found.errors)[-1] < 4096
    assert errs[-1] >= 0.02 and all(e < 0.02 for e in errs[:-1])
    # the same threshold on normal data, a different draw: the errors differ
    other = first_K_reaching(step, 0.02, K_start=16, K_max=4096, M=2, N=2)
    assert other.errors != found.errors


def test_first_K_reaching_bad_input():
    def step(A, B, C):
        return A @ B + (0 if C is None else C)

    for bad in [
        dict(threshold=0.0),
        dict(threshold=-1.0),
        dict(K_start=0),
        dict(K_start=64, K_max=32),
        dict(dist="cauchy"),
        dict(M=0),
        dict(seed=-1),
    ]:
        kw = dict(threshold=0.1, K_start=8, K_max=16) | bad
        with pytest.raises(ValueError):
            first_K_reaching(step, **kw)


# ------------------------------------------------------------------ summation methods: sum_errors, errors_vs_length


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
    X = np.array([[1.0, -1.0, 0.0, 0.0], [1.0, 2.0**-9, -1.0, 0.0], [1.0, 2.0**-9, -1.0, -(2.0**-9)]])
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


def test_ulp_ladder_rows_and_headers():
    rows, headers = ulp_ladder([1.0, 0.01])
    assert headers[0] == "w" and len(rows[0]) == 7
    assert rows[0][1] == FORMATS["fp16"].eps and rows[0][4] == FORMATS["bf16"].eps and rows[0][6] == 256


def test_errors_vs_length_figure_gives_every_method_its_own_style():
    """Chapter 02's figure of errors_vs_length (style="method"): each method a distinct
    (colour, marker) pair, the first of each format in the course colour, legend outside the axes;
    zero medians are not drawn, so a line starts at its first nonzero median."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nbhelpers import plots
    from nbhelpers.plots.style import format_color

    X = round_to(np.random.default_rng(3).uniform(size=(8, 256)), "bf16")
    methods = [
        SumMethod("bf16"),
        SumMethod("bf16", "pairwise"),
        SumMethod("bf16", "blocked", block=8),
        SumMethod("bf16", "kahan"),
        SumMethod("bf16", rounding="stochastic"),
        SumMethod("fp32"),
    ]
    lengths = [4, 16, 64, 256]
    errs = errors_vs_length(X, lengths, methods, rng=np.random.default_rng(0))
    ax = plots.plot_errors_vs_length(lengths, errs, style="method")
    lines = {ln.get_label(): ln for ln in ax.lines}
    styles = [(lines[m.label].get_color(), lines[m.label].get_marker()) for m in methods]
    assert len(set(styles)) == len(methods)
    assert len({c for c, _ in styles}) == len(methods) and len({mk for _, mk in styles}) == len(methods)
    assert styles[0][0] == format_color("bf16") and styles[-1][0] == format_color("fp32")
    assert lines["bf16 sequential, stochastic"].get_linestyle() == "--"
    y = lines["fp32 sequential"].get_ydata()
    zero = errs[methods[-1]] == 0
    assert np.all(np.isnan(y[zero])) and np.all(y[~zero] == errs[methods[-1]][~zero])
    ax.figure.canvas.draw()
    legend = ax.get_legend()
    assert legend is not None and legend.get_window_extent().y1 <= ax.xaxis.get_tightbbox().y0  # under the axes
    with pytest.raises(ValueError, match="style"):
        plots.plot_errors_vs_length(lengths, errs, style="colour")
    plt.close("all")
