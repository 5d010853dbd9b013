"""Tests of nbhelpers.outlier_remedies (chapter 06): SmoothQuant's smoothing, LLM.int8()'s
mixed-precision decomposition and asymmetric int8 with a zero point, each against a hand
computation or a slow reference, with the identities that must hold exactly held exactly."""

import math

import numpy as np
import pytest

from nbhelpers.outlier_remedies import (
    ASYM_QMAX,
    ASYM_QMIN,
    LLM_INT8_THRESHOLD,
    asymmetric_matmul,
    asymmetric_matmul_ref,
    dequantize_asymmetric,
    int8_epilogue_matmul,
    migrate,
    mixed_int8_matmul,
    outlier_channels,
    quantize_asymmetric,
    smooth,
    smoothing_scales,
    weight_code_column_sums,
)
from nbhelpers.recipes import PER_COLUMN, PER_ROW, PER_TENSOR, TILE_1X128, Recipe
from nbhelpers.rounding import round_to
from nbhelpers.scaled_gemm import scaled_mm
from nbhelpers.scaling import quantize

EPS64 = 2.0**-53


def _outlier_x(rng, M=32, K=64, cols=(3, 17), factor=20.0):
    x = rng.standard_normal((M, K))
    x[:, list(cols)] *= factor
    return x


# ---------------------------------------------------------------- the plain int8 GEMM


@pytest.mark.parametrize("block", [PER_TENSOR, PER_ROW])
def test_int8_epilogue_matmul_is_scaled_mm_of_the_quantized_operands(block):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 40)), rng.standard_normal((40, 6))
    qx, sx = quantize(x, Recipe("int8", block))
    qw, sw = quantize(w, Recipe("int8", PER_COLUMN))
    np.testing.assert_array_equal(int8_epilogue_matmul(x, w, block), scaled_mm(qx, qw, sx, sw, in_fmt="int8"))


def test_int8_epilogue_matmul_refuses_a_scale_along_k():
    with pytest.raises(ValueError, match="constant along K"):
        int8_epilogue_matmul(np.ones((2, 128)), np.ones((128, 2)), TILE_1X128)


# ---------------------------------------------------------------- SmoothQuant


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_smooth_keeps_the_product_to_float64_rounding(alpha):
    rng = np.random.default_rng(1)
    x, w = _outlier_x(rng), rng.standard_normal((64, 24))
    xs, ws, s = smooth(x, w, alpha)
    ref = x @ w
    # each term x_ij w_jk becomes (x_ij / s_j)(s_j w_jk): two more roundings per term, and both sums
    # of K = 64 terms round: |error| <= (K + 4) * 2**-53 * sum |x_ij w_jk| (first order)
    bound = (64 + 4) * EPS64 * (np.abs(x) @ np.abs(w))
    assert np.all(np.abs(xs @ ws - ref) <= bound)
    np.testing.assert_allclose(xs * s, x, rtol=4 * EPS64)
    np.testing.assert_allclose(ws / s[:, None], w, rtol=4 * EPS64)


def test_smoothing_scales_alpha_half_by_hand():
    x = np.array([[1.0, -8.0, 0.5], [-2.0, 4.0, 0.25]])
    w = np.array([[0.5, -1.0], [2.0, 0.5], [-4.0, 1.0]])
    # s_j = sqrt(max|x_j|) / sqrt(max|w_j|): sqrt(2/1), sqrt(8/2), sqrt(0.5/4)
    np.testing.assert_allclose(smoothing_scales(x, w, 0.5), [math.sqrt(2), 2.0, math.sqrt(0.125)], rtol=1e-15)
    # alpha = 1: x' has amax 1 in every channel; alpha = 0: w' has amax 1 in every row
    xs, _, _ = smooth(x, w, 1.0)
    np.testing.assert_allclose(np.abs(xs).max(axis=0), 1.0, rtol=1e-15)
    _, ws, _ = smooth(x, w, 0.0)
    np.testing.assert_allclose(np.abs(ws).max(axis=1), 1.0, rtol=1e-15)
    # alpha = 0.5 balances the two: max|x'_j| == max|w'_j|
    xs, ws, _ = smooth(x, w, 0.5)
    np.testing.assert_allclose(np.abs(xs).max(axis=0), np.abs(ws).max(axis=1), rtol=1e-15)


def test_smoothing_scales_zero_channel_gets_one():
    x = np.array([[0.0, 2.0], [0.0, -1.0]])
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    s = smoothing_scales(x, w, 0.5)
    assert s[0] == 1.0 and np.isfinite(s).all()


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan"), True, "0.5", None])
def test_smoothing_bad_alpha_raises_saying_what_is_accepted(alpha):
    x, w = np.ones((2, 3)), np.ones((3, 2))
    with pytest.raises(ValueError, match=r"alpha .* must be a real number in \[0, 1\]"):
        smoothing_scales(x, w, alpha)


def test_smooth_shape_mismatch_and_non_finite():
    with pytest.raises(ValueError, match="agree in K"):
        smooth(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="inf or NaN"):
        smooth(np.array([[np.inf, 1.0]]), np.ones((2, 2)))


def test_migrate_is_the_step_smooth_takes_and_checks_its_factors():
    """smooth is smoothing_scales then migrate (AWQ reuses migrate with its own s); s must be one
    positive finite factor per channel."""
    rng = np.random.default_rng(4)
    x, w = _outlier_x(rng), rng.standard_normal((64, 24))
    xs, ws, s = smooth(x, w, 0.5)
    xm, wm = migrate(x, w, smoothing_scales(x, w, 0.5))
    np.testing.assert_array_equal(xs, xm)
    np.testing.assert_array_equal(ws, wm)
    x, w = np.ones((2, 3)), np.ones((3, 2))
    with pytest.raises(ValueError, match=r"s must have shape \(K,\) = \(3,\)"):
        migrate(x, w, np.ones(2))
    for bad in ([1.0, 0.0, 1.0], [1.0, np.inf, 1.0], [1.0, -2.0, 1.0]):
        with pytest.raises(ValueError, match="s must be positive and finite"):
            migrate(x, w, bad)


# ---------------------------------------------------------------- LLM.int8()


def test_outlier_channels_are_the_columns_past_the_threshold():
    x = np.zeros((3, 5))
    x[1, 2], x[0, 4], x[2, 0] = -6.5, 7.0, 6.0  # 6.0 itself is not past the threshold
    np.testing.assert_array_equal(outlier_channels(x), [2, 4])
    assert LLM_INT8_THRESHOLD == 6.0
    assert outlier_channels(x, math.inf).size == 0
    with pytest.raises(ValueError, match="threshold"):
        outlier_channels(x, -1.0)


def test_mixed_int8_matmul_is_the_sum_of_its_two_parts():
    rng = np.random.default_rng(2)
    x, w = _outlier_x(rng), rng.standard_normal((64, 24))
    r = mixed_int8_matmul(x, w)
    np.testing.assert_array_equal(r.outliers, [3, 17])
    assert r.k_high_fraction == 2 / 64 and r.high == "fp16" and r.K == 64
    f32 = np.float32
    np.testing.assert_array_equal(r.out, (r.out_int8.astype(f32) + r.out_high.astype(f32)).astype(np.float64))
    # the int8 part is exactly scaled_mm on the other channels, x per row, w per column
    rest = np.setdiff1d(np.arange(64), [3, 17])
    qx, sx = quantize(x[:, rest], Recipe("int8", PER_ROW))
    qw, sw = quantize(w[rest], Recipe("int8", PER_COLUMN))
    np.testing.assert_array_equal(r.out_int8, scaled_mm(qx, qw, sx, sw, in_fmt="int8"))
    # the high part: fp16 operands, exact products, one fp32 rounding
    hi = round_to(x[:, [3, 17]], "fp16") @ round_to(w[[3, 17]], "fp16")
    np.testing.assert_array_equal(r.out_high, hi.astype(f32).astype(np.float64))


def test_mixed_int8_matmul_limits_and_accuracy():
    rng = np.random.default_rng(3)
    x, w = _outlier_x(rng), rng.standard_normal((64, 24))
    ref = x @ w
    plain = mixed_int8_matmul(x, w, threshold=math.inf)
    assert plain.outliers.size == 0 and not plain.out_high.any()
    all_high = mixed_int8_matmul(x, w, threshold=1e-9, high="fp32")
    assert all_high.k_high_fraction == 1.0
    np.testing.assert_allclose(all_high.out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    err = lambda c: np.linalg.norm(c - ref) / np.linalg.norm(ref)  # noqa: E731
    assert err(mixed_int8_matmul(x, w).out) < err(plain.out) / 3  # the outliers leave the int8 GEMM
    with pytest.raises(ValueError, match="high must be one of"):
        mixed_int8_matmul(x, w, high="e4m3fn")


# ---------------------------------------------------------------- asymmetric int8


@pytest.mark.parametrize("per", ["tensor", "row"])
@pytest.mark.parametrize("seed", range(5))
def test_asymmetric_codes_in_range_and_error_at_most_half_a_step(per, seed):
    rng = np.random.default_rng(seed)
    x = np.maximum(rng.standard_normal((16, 40)) * rng.uniform(0.1, 10), 0) - rng.uniform(0, 0.3)
    q, z, s = quantize_asymmetric(x, per)
    assert q.dtype == np.uint8 and z.dtype == np.uint8
    assert q.min() >= ASYM_QMIN and q.max() <= ASYM_QMAX
    assert s.shape == ((1, 1) if per == "tensor" else (16, 1))
    err = np.abs(dequantize_asymmetric(q, z, s) - x)
    assert np.all(err <= s / 2 * (1 + 1e-9))
    assert np.all(dequantize_asymmetric(z, z, s) == 0)  # zero is exact
    # all 256 codes in use: the bottom and top of the range land on the end codes
    assert q.min() == ASYM_QMIN and q.max() >= ASYM_QMAX - 1


def test_asymmetric_beats_symmetric_on_one_sided_data():
    x = np.maximum(np.random.default_rng(4).standard_normal((64, 64)), 0)
    q, z, s = quantize_asymmetric(x)
    qs, ss = quantize(x, Recipe("int8"))
    e_asym = np.linalg.norm(dequantize_asymmetric(q, z, s) - x)
    e_sym = np.linalg.norm(qs * ss - x)
    assert 1.8 < e_sym / e_asym < 2.2  # twice the codes on [0, amax]: half the step


def test_zero_point_correction_is_exact_in_integers():
    rng = np.random.default_rng(5)
    qx = rng.integers(0, 256, (8, 300)).astype(np.uint8)
    qw = rng.integers(-128, 128, (300, 6)).astype(np.int8)
    for zx in (np.array([[255]]), rng.integers(0, 256, (8, 1))):
        _, acc = asymmetric_matmul(qx, zx, np.ones((1, 1)), qw, np.ones((1, 1)))
        direct = (qx.astype(np.int64) - zx) @ qw.astype(np.int64)
        np.testing.assert_array_equal(acc, direct)
        raw = sum(qx[:, [k]].astype(np.int64) * qw[[k]].astype(np.int64) for k in range(300))  # slow, by k
        np.testing.assert_array_equal(acc, raw - zx * weight_code_column_sums(qw))


def test_asymmetric_matmul_agrees_with_the_exercise_reference():
    from nbhelpers.answer_keys.ch06 import asym_int8_gemm_ref, asym_pieces

    rng = np.random.default_rng(7)
    x = torch_like_gelu(rng.standard_normal((12, 96)))
    q, z, s = quantize_asymmetric(x, "row")
    qw, sw = quantize(rng.standard_normal((96, 10)), Recipe("int8", PER_COLUMN))
    # the exercise's weights are uint8 codes with a zero point: int8 codes are uint8 ones 128 above zw = 128
    pieces = asym_pieces(q, z, s, qw.astype(np.int64) + 128, np.full((1, 1), 128), sw)
    np.testing.assert_array_equal(asymmetric_matmul(q, z, s, qw, sw)[0], asym_int8_gemm_ref(*pieces))


def torch_like_gelu(z):
    """GELU(z) = z * Phi(z), by math.erf (a one-sided tensor with a small negative tail)."""
    return z * 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))


def test_asymmetric_matmul_matches_the_dequantize_first_reference():
    rng = np.random.default_rng(6)
    x = np.maximum(rng.standard_normal((16, 128)), 0)
    w = rng.standard_normal((128, 12))
    q, z, s = quantize_asymmetric(x, "row")
    qw, sw = quantize(w, Recipe("int8", PER_COLUMN))
    c, _ = asymmetric_matmul(q, z, s, qw, sw, colsum_w=weight_code_column_sums(qw))
    ref = asymmetric_matmul_ref(q, z, s, qw, sw)
    # integer accumulator exact; fp32 conversion and two fp32 multiplies: 3 roundings of 2**-24
    assert np.all(np.abs(c - ref) <= 4 * 2.0**-24 * np.abs(ref) + 1e-30)


def test_asymmetric_bad_arguments():
    with pytest.raises(ValueError, match="per must be"):
        quantize_asymmetric(np.ones((2, 2)), "column")
    with pytest.raises(ValueError, match=r"qx \(M, K\) must hold integer codes in \[0, 255\]"):
        asymmetric_matmul(-np.ones((2, 3)), np.zeros((1, 1)), np.ones((1, 1)), np.zeros((3, 2)), np.ones((1, 1)))
    with pytest.raises(OverflowError, match="int32"):
        big = np.full((1, 70000), 255)
        asymmetric_matmul(big, np.zeros((1, 1)), np.ones((1, 1)), np.full((70000, 1), 127), np.ones((1, 1)))
    q = np.zeros((2, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="zx must have shape"):
        asymmetric_matmul(q, np.zeros((3, 1)), np.ones((1, 1)), np.zeros((3, 2)), np.ones((1, 1)))
    with pytest.raises(ValueError, match="colsum_w must have shape"):
        asymmetric_matmul(q, np.zeros((1, 1)), np.ones((1, 1)), np.zeros((3, 2)), np.ones((1, 1)), colsum_w=[1])
