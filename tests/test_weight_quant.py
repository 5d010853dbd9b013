"""Tests of nbhelpers.weight_quant (chapter 12): round-to-nearest against torchao's affine quantizer
bit for bit and against hand arithmetic; GPTQ against the optimal-brain-quantization update written
out here from the paper's formulas (H_F^-1 inverted directly at every step) and against the module's
slow closed-form reference, with the properties the algorithm promises (no worse than RTN on the
calibration data, lazy batches equal to eager updates, H's scale irrelevant); AWQ's grid search
recomputed point by point; bad arguments refused with a message that says what is accepted."""

from __future__ import annotations

import numpy as np
import pytest

from nbhelpers.recipes import Recipe
from nbhelpers.scaling import quantize
from nbhelpers.weight_quant import (
    MIN_SCALE,
    QuantizedWeight,
    awq_factors,
    awq_scales,
    code_range,
    dequantize,
    gptq_quantize,
    gptq_quantize_ref,
    hessian,
    layer_output_error,
    rtn_quantize,
)

MODES = [(b, g, sym) for b in (4, 8) for g in (None, 32, 128) for sym in (True, False)]


def weights(N=24, K=256, seed=0) -> np.ndarray:
    """Normal float32 weights, rows scaled by powers of two from 2**-8 to 2**8, with the groups
    the quantizer treats specially: an all-zero group, an all-positive and an all-negative group
    (zero point at an end of the range), and a row of exact ties (amax 7: scale 1 in int4)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((N, K)) * np.ldexp(1.0, rng.integers(-8, 9, size=(N, 1)))
    w[1, :32] = 0.0
    w[2, 32:64] = np.abs(w[2, 32:64])
    w[3, 64:96] = -np.abs(w[3, 64:96])
    w[4] = np.resize([7.0, -7.0, 2.5, -3.5, 0.5, -0.5, 1.5, 6.5], K)
    return w.astype(np.float32).astype(np.float64)


def correlated_x(M, K, seed, outliers=()) -> np.ndarray:
    """Calibration activations whose channels are correlated (a random mixing matrix plus noise),
    as a layer's inputs are; ``outliers`` channels multiplied by 20."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K)) @ (rng.standard_normal((K, K)) / np.sqrt(K)) + 0.3 * rng.standard_normal((M, K))
    x[:, list(outliers)] *= 20.0
    return x


def dq(qw: QuantizedWeight, group) -> np.ndarray:
    return dequantize(*qw, group)


def assert_same(a: QuantizedWeight, b: QuantizedWeight):
    for name, x, y in zip(QuantizedWeight._fields, a, b):
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)


# ====================================================================== RTN


@pytest.mark.parametrize("bits,group,sym", MODES)
def test_rtn_is_bit_exact_against_torchao(bits, group, sym):
    """torchao 0.18's choose_qparams_affine + quantize_affine (SYMMETRIC with quant_min = -qmax,
    or ASYMMETRIC into uint8 with quant_min 0), block (1, group), float32 weights, eps float32's
    smallest normal: the same codes, scales and zero points bit for bit; torchao's float32
    dequantize_affine is the float32 rounding of this module's exact one."""
    torch = pytest.importorskip("torch")
    qp = pytest.importorskip("torchao.quantization.quant_primitives")
    w = weights()
    qmin, qmax = code_range(bits, sym)
    block = (1, group or w.shape[1])
    mapping = qp.MappingType.SYMMETRIC if sym else qp.MappingType.ASYMMETRIC
    dtype = torch.int8 if sym else torch.uint8
    wt = torch.from_numpy(w.astype(np.float32))
    s, z = qp.choose_qparams_affine(
        wt, mapping, block, dtype, qmin, qmax, eps=MIN_SCALE, scale_dtype=torch.float32, zero_point_dtype=torch.int32
    )
    q = qp.quantize_affine(wt, block, s, z, dtype, qmin, qmax)
    d = qp.dequantize_affine(q, block, s, z, dtype, qmin, qmax, output_dtype=torch.float32)
    ours = rtn_quantize(w, bits, group, sym)
    G = w.shape[1] // block[1]
    np.testing.assert_array_equal(ours.codes, q.numpy())
    np.testing.assert_array_equal(ours.scales, s.numpy().astype(np.float64).reshape(-1, G))
    np.testing.assert_array_equal(ours.zeros, z.numpy().reshape(-1, G))
    np.testing.assert_array_equal(dq(ours, group).astype(np.float32), d.numpy())
    assert ours.codes.dtype == (np.int8 if sym else np.uint8) and ours.zeros.dtype == ours.codes.dtype


def test_rtn_by_hand():
    """Symmetric int4, amax 7: scale 1, codes = round(w) with ties to even (2.5 -> 2, -3.5 -> -4,
    0.5 -> 0). With a zero point, range [-1, 14]: scale 15 / 15 = 1, zero = -round(-1) = 1, codes
    round(w) + 1. int8 symmetric: scale = amax / 127."""
    w = np.array([[7.0, 2.5, -3.5, 0.5], [-1.0, 0.0, 2.0, 14.0]])
    q = rtn_quantize(w, 4)
    np.testing.assert_array_equal(q.codes[0], [7, 2, -4, 0])
    np.testing.assert_array_equal(q.scales, [[1.0], [2.0]])  # row 2: amax 14 / 7
    np.testing.assert_array_equal(q.zeros, [[0], [0]])
    a = rtn_quantize(w, 4, symmetric=False)
    np.testing.assert_array_equal(a.scales[1], [1.0])
    np.testing.assert_array_equal(a.zeros[1], [1])
    np.testing.assert_array_equal(a.codes[1], [0, 1, 3, 15])
    np.testing.assert_array_equal(dq(a, None)[1], w[1])  # every value on this grid
    np.testing.assert_array_equal(rtn_quantize([[127.0, -63.5]], 8).codes, [[127, -64]])
    # groups of 2: each pair its own scale
    g = rtn_quantize([[7.0, 1.0, 0.7, -0.35]], 4, group=2)
    np.testing.assert_array_equal(g.scales, [[1.0, np.float32(0.7) / np.float32(7)]])
    np.testing.assert_array_equal(g.codes, [[7, 1, 7, -4]])  # -0.35 / 0.1 = -3.5 in float32: ties to even
    # an all-zero group: the smallest scale, codes at the zero point
    z = rtn_quantize(np.zeros((1, 4)), 4, symmetric=False)
    assert z.scales[0, 0] == MIN_SCALE and (z.codes == z.zeros[0, 0]).all()


@pytest.mark.parametrize("bits,group,sym", MODES)
def test_rtn_codes_are_the_nearest_grid_point(bits, group, sym):
    """Codes in the stated range; each dequantized value is the nearest point of its group's grid
    (no neighbouring code is closer: a float32 rounding of w / scale aside, 1e-6 of a step), so the
    error is at most half a step; symmetric groups keep their amax exactly at the top code."""
    w = weights(seed=1)
    qmin, qmax = code_range(bits, sym)
    q = rtn_quantize(w, bits, group, sym)
    assert q.codes.min() >= qmin and q.codes.max() <= qmax
    x_dq = dq(q, group)
    step = dequantize(np.ones_like(q.codes), q.scales, np.zeros_like(q.zeros), group)
    for nb in (-1, 1):
        c = np.clip(q.codes.astype(np.int64) + nb, qmin, qmax)
        other = dequantize(c, q.scales, q.zeros, group)
        assert (np.abs(w - x_dq) <= np.abs(w - other) + 1e-6 * step).all()
    assert (np.abs(w - x_dq) <= 0.5 * step * (1 + 1e-6)).all()
    if sym:
        g = group or w.shape[1]
        top = np.abs(q.codes.astype(np.int64)).reshape(w.shape[0], -1, g).max(axis=-1)
        live = np.abs(w).reshape(w.shape[0], -1, g).max(axis=-1) > 0
        assert (top[live] == qmax).all()


@pytest.mark.parametrize("group", [None, 32])
def test_symmetric_rtn_has_chapter_06s_scales(group):
    """The symmetric int4 scales are chapter 06's Recipe("int4", (1, group)) scales bit for bit
    (fp32(amax / 7)) but for an all-zero group, whose scale is floored at float32's smallest normal
    here (torchao's eps) and at its smallest subnormal there; the codes agree except where x / scale
    lies within float32's rounding of a half-integer (here: nowhere), since that module divides in
    float64 and this one multiplies by fp32(1 / scale) in float32, as torchao does."""
    w = weights(seed=2)
    q = rtn_quantize(w, 4, group)
    q6, s6 = quantize(w, Recipe("int4", (1, group)))
    zero = s6 == 2.0**-149
    assert zero.sum() == (group is not None) and (q.scales[zero] == MIN_SCALE).all()
    np.testing.assert_array_equal(q.scales[~zero], s6[~zero])
    np.testing.assert_array_equal(q.codes, q6)


# ====================================================================== layer output error


def test_layer_output_error_convention():
    """||X W^T - X Wq^T||_F^2: summed over all outputs, not averaged."""
    X = np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 1.0]])
    W = np.array([[1.0, 1.0]])
    Wq = np.array([[1.0, 0.5]])
    # outputs differ by 2 * 0.5, 1 * 0.5, 1 * 0.5: 1 + 0.25 + 0.25
    assert layer_output_error(W, Wq, X) == 1.5
    rng = np.random.default_rng(0)
    W, Wq, X = rng.standard_normal((5, 7)), rng.standard_normal((5, 7)), rng.standard_normal((9, 7))
    np.testing.assert_allclose(layer_output_error(W, Wq, X), np.linalg.norm(X @ W.T - X @ Wq.T) ** 2, rtol=1e-12)


# ====================================================================== GPTQ


def obq_sequence(w, H, bits, group, sym, percdamp=0.01):
    """Optimal brain quantization in GPTQ's fixed order, from the paper's formulas (eq. 2 and 3 of
    Frantar et al. 2022) with H_F^-1 computed by inverting H[F, F] anew at every step: quantize
    column j, then ``w_F -= (w_j - quant(w_j)) / [H_F^-1]_jj * H_F^-1[:, j]`` over the columns F
    not yet quantized. The quantizer is the module's RTN applied to one column with the group's
    (scale, zero), taken from the group's weights when its first column comes up. One row."""
    w = np.array(w, dtype=np.float64)
    H = np.array(H, dtype=np.float64)
    H[np.diag_indices_from(H)] += percdamp * np.mean(np.diag(H))
    K = w.size
    g = group or K
    qmin, qmax = code_range(bits, sym)
    codes, scales, zeros = np.zeros(K, np.int64), [], []
    for j in range(K):
        if j % g == 0:
            r = rtn_quantize(w[None, j : j + g], bits, None, sym)  # the group's (scale, zero) from its weights now
            scales.append(r.scales[0, 0])
            zeros.append(int(r.zeros[0, 0]))
        s, z = scales[-1], zeros[-1]
        c = int(np.clip(np.rint(np.float32(w[j]) * (np.float32(1) / np.float32(s))) + z, qmin, qmax))
        codes[j] = c
        F = np.arange(j, K)
        Hinv_F = np.linalg.inv(H[np.ix_(F, F)])
        w[F] -= (w[j] - (c - z) * s) / Hinv_F[0, 0] * Hinv_F[:, 0]
    return codes, np.array(scales), np.array(zeros)


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("bits,group", [(2, None), (3, None), (4, None), (3, 2), (4, 2)])
def test_gptq_on_one_row_is_the_obq_sequence(bits, group, sym):
    """1 row, 4 columns, 40 random layers: GPTQ's codes, scales and zeros are the OBQ sequence's;
    and on some of them they differ from RTN's (so the update does something)."""
    differs = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        w = rng.standard_normal((1, 4))
        X = rng.standard_normal((6, 4)) @ rng.standard_normal((4, 4))
        H = hessian(X)
        codes, scales, zeros = obq_sequence(w[0], H, bits, group, sym)
        q = gptq_quantize(w, bits=bits, H=H, group=group, symmetric=sym)
        np.testing.assert_array_equal(q.codes[0], codes, err_msg=f"seed {seed}")
        np.testing.assert_array_equal(q.scales[0], scales)
        np.testing.assert_array_equal(q.zeros[0], zeros)
        differs += (q.codes != rtn_quantize(w, bits, group, sym).codes).any()
    assert differs >= 5


@pytest.mark.parametrize("group,sym", [(None, True), (4, False), (6, True)])
def test_gptq_equals_its_closed_form_reference(group, sym):
    """Against gptq_quantize_ref (the remaining weights re-solved as a least-squares problem before
    every column, no Cholesky factor), 10 rows, 12 columns, blocks of 5 (groups start inside blocks
    and reach past them)."""
    rng = np.random.default_rng(5)
    W, X = rng.standard_normal((10, 12)), correlated_x(48, 12, 5)
    assert_same(
        gptq_quantize(W, bits=3, X=X, group=group, symmetric=sym, blocksize=5),
        gptq_quantize_ref(W, bits=3, X=X, group=group, symmetric=sym),
    )


@pytest.mark.parametrize("bits,group,sym", [(4, None, True), (4, 16, False), (3, 32, True), (8, None, True)])
def test_gptq_output_error_is_at_most_rtns(bits, group, sym):
    """A 32 x 128 layer, 512 correlated calibration tokens, 5 seeds: GPTQ's output error on the
    calibration tokens is at most RTN's, on every seed (about half of it at 4 bits: the mean ratio
    is checked below 0.75), and on 512 held-out tokens from the same distribution at most RTN's too."""
    ratios = []
    for seed in range(5):
        rng = np.random.default_rng(100 + seed)
        W = rng.standard_normal((32, 128))
        X = correlated_x(1024, 128, seed)
        Xc, Xh = X[:512], X[512:]
        e_rtn = layer_output_error(W, dq(rtn_quantize(W, bits, group, sym), group), Xc)
        q = gptq_quantize(W, bits=bits, X=Xc, group=group, symmetric=sym)
        e_gptq = layer_output_error(W, dq(q, group), Xc)
        assert e_gptq <= e_rtn, (seed, e_gptq, e_rtn)
        assert layer_output_error(W, dq(q, group), Xh) <= layer_output_error(
            W, dq(rtn_quantize(W, bits, group, sym), group), Xh
        )
        ratios.append(e_gptq / e_rtn)
    assert np.mean(ratios) < 0.75, ratios


def test_gptq_lazy_batches_equal_eager_updates():
    """blocksize 1 (every update applied at once), 3, 7, 16 and 64 (one block): the same codes,
    scales and zeros, with groups of 8 that start inside blocks of 3 and 7 and reach past them.
    (Reading a new group's weights from W without the block's pending updates, as the reference
    code does, fails here: its scales then depend on blocksize.)"""
    rng = np.random.default_rng(7)
    W, X = rng.standard_normal((16, 64)), correlated_x(256, 64, 7)
    for group, sym in ((None, True), (8, True), (8, False), (16, False)):
        results = [gptq_quantize(W, bits=4, X=X, group=group, symmetric=sym, blocksize=b) for b in (1, 3, 7, 16, 64)]
        for r in results[1:]:
            assert_same(results[0], r)


def test_gptq_from_h_or_x_and_at_any_scale_of_h():
    """X and H = 2 X^T X give the same result; so does the reference code's 2 X^T X / M (GPTQ does
    not depend on H's scale: the dampening is a fraction of its mean diagonal)."""
    rng = np.random.default_rng(8)
    W, X = rng.standard_normal((8, 32)), correlated_x(128, 32, 8)
    a = gptq_quantize(W, bits=4, X=X, group=8)
    assert_same(a, gptq_quantize(W, bits=4, H=2 * X.T @ X, group=8))
    assert_same(a, gptq_quantize(W, bits=4, H=2 * X.T @ X / 128, group=8))


def test_gptq_dead_input_channel_and_codes_on_the_grid():
    """A channel that never fires (a zero column of X) gets weight 0 (code = zero point), as in the
    reference; every code is in range and every dequantized value is (code - zero) * scale."""
    rng = np.random.default_rng(9)
    W, X = rng.standard_normal((8, 32)), correlated_x(128, 32, 9)
    X[:, 5] = 0.0
    for sym in (True, False):
        q = gptq_quantize(W, bits=4, X=X, group=8, symmetric=sym)
        qmin, qmax = code_range(4, sym)
        assert q.codes.min() >= qmin and q.codes.max() <= qmax
        np.testing.assert_array_equal(q.codes[:, 5], q.zeros[:, 0])
        x_dq = dq(q, 8)
        np.testing.assert_array_equal(x_dq[:, 5], 0.0)
        s = np.repeat(q.scales, 8, axis=1)
        z = np.repeat(q.zeros.astype(np.int64), 8, axis=1)
        np.testing.assert_array_equal(x_dq, (q.codes.astype(np.int64) - z) * s)


# ====================================================================== AWQ


def test_awq_alpha_zero_is_rtn():
    """alpha = 0: s = 1 exactly, so the quantized layer is RTN's bit for bit (grid=1 tries only it)."""
    rng = np.random.default_rng(10)
    W, X = rng.standard_normal((16, 64)), correlated_x(128, 64, 10, outliers=(3, 40))
    for group, sym in ((None, True), (32, False)):
        r = awq_scales(W, X, 4, group, sym, grid=1)
        assert r.alpha == 0.0 and (r.s == 1.0).all()
        rtn = rtn_quantize(W, 4, group, sym)
        assert_same(r.quantized, rtn)
        np.testing.assert_array_equal(r.w_dq, dq(rtn, group))
        np.testing.assert_allclose(r.errors[0], layer_output_error(W, dq(rtn, group), X), rtol=1e-9)


def test_awq_picks_the_smallest_error_of_its_grid_and_beats_rtn_on_outlier_channels():
    """Activations with 4 of 128 channels 20 times larger: each grid point's error, recomputed here
    from the definition (s = mean|x|**alpha, floored at 1e-4, divided by sqrt(max s * min s); RTN of
    W diag(s); the layer W's error of Q(W s) / s), matches the recorded one; the chosen alpha's
    error is the smallest of the grid; and it is well below RTN's (alpha = 0)."""
    rng = np.random.default_rng(11)
    W, X = rng.standard_normal((32, 128)), correlated_x(256, 128, 11, outliers=(5, 17, 64, 99))
    r = awq_scales(W, X, 4, 32, False, grid=20)
    np.testing.assert_array_equal(r.alphas, np.arange(20) / 20)
    m = np.abs(X).mean(axis=0)
    for a, err in zip(r.alphas, r.errors):
        s = np.maximum(m**a, 1e-4)
        s = s / np.sqrt(s.max() * s.min())
        np.testing.assert_array_equal(awq_factors(m, a), s)
        w_dq = dq(rtn_quantize(W * s, 4, 32, False), 32) / s
        np.testing.assert_allclose(err, layer_output_error(W, w_dq, X), rtol=1e-9)
    assert (r.errors[list(r.alphas).index(r.alpha)] <= r.errors).all()
    np.testing.assert_allclose(layer_output_error(W, r.w_dq, X), r.errors.min(), rtol=1e-9)
    assert r.alpha > 0 and r.errors.min() < 0.7 * r.errors[0], (r.alpha, r.errors.min() / r.errors[0])
    np.testing.assert_array_equal(r.s, awq_factors(m, r.alpha))


# ====================================================================== bad arguments


def test_bad_arguments_say_what_is_accepted():
    W, X = np.ones((4, 8)), np.ones((16, 8))
    cases = [
        (lambda: rtn_quantize(np.ones(8), 4), ValueError, r"W must be a non-empty 2-D array \(N, K\)"),
        (lambda: rtn_quantize(np.full((2, 2), np.nan), 4), ValueError, "W holds inf or NaN at"),
        (lambda: rtn_quantize(np.full((2, 2), 1e39), 4), ValueError, "beyond float32's range"),
        (lambda: rtn_quantize([[3e38, -3e38]], 4, symmetric=False), ValueError, "hi - lo overflows float32"),
        (lambda: rtn_quantize(W, 9), ValueError, "bits must be an int from 2 to 8"),
        (lambda: rtn_quantize(W, 4.0), TypeError, "bits must be an int from 2 to 8"),
        (lambda: rtn_quantize(W, 4, group=3), ValueError, "group=3 must divide K=8"),
        (lambda: rtn_quantize(W, 4, group=0), ValueError, "group must be a positive int"),
        (lambda: rtn_quantize(W, 4, symmetric="yes"), TypeError, "symmetric must be True"),
        (lambda: rtn_quantize(W.astype(complex), 4), TypeError, "expected real numbers"),
        (
            lambda: dequantize(W, np.ones((4, 1)), np.zeros((4, 1), int)),
            ValueError,
            "codes must be a 2-D array of integers",
        ),
        (
            lambda: dequantize(np.ones((4, 8), int), np.ones((4, 2)), np.zeros((4, 2), int), 8),
            ValueError,
            r"scales has shape \(4, 2\).*need .* \(4, 1\)",
        ),
        (
            lambda: dequantize(np.ones((4, 8), int), np.zeros((4, 1)), np.zeros((4, 1), int)),
            ValueError,
            "scales must be positive",
        ),
        (
            lambda: dequantize(np.ones((4, 8), int), np.ones((4, 1)), np.zeros((4, 1))),
            ValueError,
            "zeros must hold integers",
        ),
        (lambda: gptq_quantize(W, bits=4), ValueError, "exactly one of H"),
        (lambda: gptq_quantize(W, bits=4, X=X, H=np.eye(8)), ValueError, "exactly one of H"),
        (lambda: gptq_quantize(W, bits=4, X=np.ones((16, 7))), ValueError, r"X must be a 2-D array \(M, K\) .* K = 8"),
        (lambda: gptq_quantize(W, bits=4, H=np.eye(7)), ValueError, r"H must be \(K, K\) = \(8, 8\)"),
        (lambda: gptq_quantize(W, bits=4, H=np.triu(np.ones((8, 8)))), ValueError, "H must be symmetric"),
        (lambda: gptq_quantize(W, bits=4, H=-np.eye(8)), ValueError, "negative diagonal"),
        (
            lambda: gptq_quantize(W, bits=4, H=np.ones((8, 8)), percdamp=0),
            ValueError,
            "not positive definite: raise percdamp",
        ),
        (lambda: gptq_quantize(W, bits=4, X=X, percdamp=-0.1), ValueError, "percdamp must be a finite number >= 0"),
        (lambda: gptq_quantize(W, bits=4, X=X, blocksize=0), ValueError, "blocksize must be a positive int"),
        (lambda: awq_scales(W, np.ones((16, 4)), 4), ValueError, r"X must be a 2-D array \(M, K\)"),
        (lambda: awq_scales(W, X, 4, grid=0), ValueError, "grid must be a positive int"),
        (lambda: layer_output_error(W, np.ones((4, 4)), X), ValueError, "W and Wq must have the same shape"),
    ]
    for i, (call, exc, msg) in enumerate(cases):
        with pytest.raises(exc, match=msg):
            call()
