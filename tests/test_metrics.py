"""Tests of nbhelpers.metrics: the normwise relative error and the exact sum every error is
measured against (Python Fractions as the outside reference)."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from helpers import wide

from nbhelpers.metrics import (
    exact_sum,
    range_fractions,
    relative_error,
    scale_bias,
    underflow_fraction,
)


def test_relative_error_definition_and_edges():
    rng = np.random.default_rng(0)
    C_ref = rng.standard_normal((5, 7))
    C = C_ref + 1e-3 * rng.standard_normal((5, 7))
    expected = np.sqrt(np.sum((C - C_ref) ** 2)) / np.sqrt(np.sum(C_ref**2))
    assert relative_error(C, C_ref) == pytest.approx(expected, rel=1e-14)
    assert relative_error(C_ref, C_ref) == 0.0
    assert relative_error(np.zeros(3), np.zeros(3)) == 0.0
    assert relative_error(np.ones(3), np.zeros(3)) == np.inf
    bf = C.astype(ml_dtypes.bfloat16)
    assert relative_error(bf, C_ref) == pytest.approx(relative_error(bf.astype(np.float64), C_ref), rel=0)
    with pytest.raises(ValueError, match="same shape"):
        relative_error(np.ones(3), np.ones(4))


def test_exact_sum_is_the_exact_sum_rounded_once():
    X = wide((6, 400), 5, spread=60)
    X[0, :3] = [1e300, 1.0, -1e300]  # a case where every naive order loses the 1.0
    for row, s in zip(X, exact_sum(X)):
        assert s == float(sum((Fraction(v) for v in row.tolist()), Fraction(0)))
    assert exact_sum(np.zeros(0)) == 0.0
    assert exact_sum(X.T, axis=0).shape == (6,)
    assert np.array_equal(exact_sum(X.T, axis=0), exact_sum(X))
    assert exact_sum(np.ones(3, dtype=ml_dtypes.bfloat16)) == 3.0


def test_range_fractions_and_underflow_vs_numpy_float16():
    rng = np.random.default_rng(4)
    x = rng.choice([-1, 1], 20000) * np.exp2(rng.uniform(-30, 18, 20000))
    x[:500] = 0.0
    x[500:600] = 2.0**-25  # ties: to zero
    with np.errstate(over="ignore"):
        cast = x.astype(np.float16).astype(np.float64)  # numpy's float16 cast: the oracle
    nz = x != 0
    fr = range_fractions(x, "fp16")
    with np.errstate(over="ignore"):
        assert fr["flushed"] == np.mean(cast[nz] == 0) == underflow_fraction(x, "fp16")
        assert fr["overflow"] == np.mean(np.isinf(cast[nz]))
    assert fr["subnormal"] == np.mean((cast[nz] != 0) & (np.abs(cast[nz]) < 2.0**-14))
    assert math.isclose(fr["flushed"] + fr["subnormal"] + fr["normal"] + fr["overflow"], 1.0)
    assert fr["count"] == nz.sum()
    assert underflow_fraction(x, "bf16") == 0.0  # bf16 reaches down to 2**-133
    assert underflow_fraction(np.zeros(4), "fp16") == 0.0


def test_sqnr_db_definition_and_edges():
    import math

    from nbhelpers.metrics import sqnr_db

    x = np.array([3.0, -4.0])  # signal power 25
    assert sqnr_db(x + [0.0, 0.05], x) == pytest.approx(10 * math.log10(25 / 0.0025), rel=1e-14)  # 40 dB
    assert sqnr_db(x, x) == math.inf
    assert sqnr_db([1.0, 0.0], [0.0, 0.0]) == -math.inf
    with pytest.raises(ValueError, match="both all zeros"):
        sqnr_db([0.0], [0.0])
    # step 1/127 on a uniform signal in [-1, 1]: noise step**2/12, signal 1/3, so SQNR = 4 * 127**2
    u = np.random.default_rng(0).uniform(-1, 1, 200_000)
    assert sqnr_db(np.round(u * 127) / 127, u) == pytest.approx(10 * math.log10(4 * 127**2), abs=0.1)


def test_scale_bias_is_the_least_squares_scale_minus_one():
    rng = np.random.default_rng(3)
    R = rng.standard_normal((6, 5))
    assert scale_bias(0.9 * R, R) == pytest.approx(-0.1, abs=1e-15)
    assert scale_bias(R, R) == 0.0
    # an error orthogonal to C_ref has no common direction, however large
    E = rng.standard_normal(R.shape)
    E -= (E.ravel() @ R.ravel()) / (R.ravel() @ R.ravel()) * R
    assert abs(scale_bias(R + E, R)) < 1e-14
    assert relative_error(R + E, R) > 0.5
    # the definition, against a float64 sum written out
    C = R * (1 + 0.01 * rng.standard_normal(R.shape))
    assert scale_bias(C, R) == pytest.approx(sum((C - R).ravel() * R.ravel()) / sum(R.ravel() ** 2), rel=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        scale_bias(R, R.T)
    with pytest.raises(ValueError, match="all zeros"):
        scale_bias(R, np.zeros_like(R))
