"""Weight-only quantization of a linear layer (chapter 12): round-to-nearest, GPTQ and AWQ.

Shapes and conventions, the same in every function:

- ``W`` (N, K) is a linear layer's weight as ``torch.nn.Linear`` stores it: N output channels
  (rows), K input channels (columns); the layer computes ``Y = X W^T`` for activations ``X`` (M, K),
  M tokens.
- A weight is quantized per output channel (``group=None``: one scale per row) or in groups of
  ``group`` consecutive input channels of a row (``group`` must divide K): ``scales`` and ``zeros``
  have shape (N, K // group), (N, 1) per channel.
- ``x ~ (q - zero) * scale``. Symmetric (``symmetric=True``): codes q in [-(2**(b-1) - 1),
  2**(b-1) - 1] (int4: -7..7, int8: -127..127; the most negative code is left unused so that
  the grid is symmetric about 0), zero = 0, ``scale = amax / (2**(b-1) - 1)``. With a zero point
  (``symmetric=False``): codes in [0, 2**b - 1], ``scale = (hi - lo) / (2**b - 1)`` over the
  group's range [lo, hi] widened to include 0, ``zero = clip(-round(lo / scale), 0, 2**b - 1)``,
  so 0 is exact (q = zero). Codes are int8 (symmetric) or uint8 (zero point), zeros the same dtype,
  scales float32 values in a float64 array.

The round-to-nearest quantizer works in float32 in the order of torchao 0.18's
``choose_qparams_affine`` and ``quantize_affine`` (``MappingType.SYMMETRIC`` with
``quant_min=-(2**(b-1) - 1)``, or ``ASYMMETRIC`` with ``quant_min=0``): W rounded to float32, the
scale computed in float32 and floored at float32's smallest normal (2**-126, so its reciprocal
is finite), ``q = clip(round(fp32(w * fp32(1 / scale))) + zero)``, ties to even. Its codes and
scales are torchao's bit for bit (tests/test_weight_quant.py); :func:`dequantize` is exact in
float64 (a code of at most 8 bits times a float32 scale).

- :func:`rtn_quantize` and :func:`dequantize`: round-to-nearest, the baseline.
- :func:`gptq_quantize` (Frantar et al. 2022, arXiv:2210.17323): columns quantized left to right,
  each one's error spread over the columns not yet quantized through the upper Cholesky factor of
  H^-1, H = 2 X^T X; :func:`gptq_quantize_ref` is the same sequence computed the slow, obvious way.
- :func:`awq_scales` (Lin et al. 2023, arXiv:2306.00978): a per-input-channel factor
  ``s = mean|x|**alpha`` migrated from X into W (:func:`~nbhelpers.outlier_remedies.migrate`, the
  step SmoothQuant takes), alpha searched on a grid for the smallest output error.
- :func:`layer_output_error`: ``||X W^T - X Wq^T||_F^2``, the sum of squares over all M x N
  outputs (not a mean), the quantity all three are compared by.

GPTQ and AWQ keep their bookkeeping (Hessian, updates, errors) in float64; only the quantizer's
decisions are float32, as above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .outlier_remedies import migrate
from .validation import int_in_range, positive_int, real_float64

__all__ = [
    "QuantizedWeight",
    "rtn_quantize",
    "dequantize",
    "code_range",
    "layer_output_error",
    "hessian",
    "gptq_quantize",
    "gptq_quantize_ref",
    "AWQResult",
    "AWQ_MIN_FACTOR",
    "awq_factors",
    "awq_scales",
    "MIN_SCALE",
]

#: The smallest scale: float32's smallest normal, torchao's default ``eps`` for float32 weights.
MIN_SCALE = float(np.finfo(np.float32).smallest_normal)
_F32_MAX = float(np.finfo(np.float32).max)


class QuantizedWeight(NamedTuple):
    """A quantized (N, K) weight: ``codes`` (N, K) int8 or uint8, ``scales`` (N, G) float64 holding
    float32 values, ``zeros`` (N, G) of the codes' dtype, G = K // group (1 per channel).
    ``W ~ (codes - zero) * scale`` of each element's group."""

    codes: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray


# ====================================================================== arguments


def _weight(W, name: str = "W") -> np.ndarray:
    w = real_float64(W)
    if w.ndim != 2 or 0 in w.shape:
        raise ValueError(
            f"{name} must be a non-empty 2-D array (N, K) = (out_features, in_features), got shape {w.shape}"
        )
    if not np.isfinite(w).all():
        raise ValueError(f"{name} holds inf or NaN at {tuple(int(v) for v in np.argwhere(~np.isfinite(w))[0])}")
    if np.abs(w).max() > _F32_MAX:
        raise ValueError(
            f"{name} holds values beyond float32's range (|w| up to {np.abs(w).max():.3g}); "
            "weights are rounded to float32"
        )
    return w


def _activations(X, K: int, name: str = "X") -> np.ndarray:
    x = real_float64(X)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] != K:
        raise ValueError(
            f"{name} must be a 2-D array (M, K) of calibration activations with K = {K} (W's columns) "
            f"and M >= 1, got shape {x.shape}"
        )
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds inf or NaN")
    return x


def _bits(bits) -> int:
    return int_in_range("bits", bits, 2, 8, "the width of a weight code: 4 for int4, 8 for int8")


def _symmetric(symmetric) -> bool:
    if not isinstance(symmetric, (bool, np.bool_)):
        raise TypeError(
            "symmetric must be True (codes about 0, no zero point) or False (codes 0..2**bits - 1 with a "
            f"zero point), got {symmetric!r}"
        )
    return bool(symmetric)


def _group(group, K: int) -> int:
    """The group size in columns: K for ``None`` (per output channel), else a divisor of K."""
    if group is None:
        return K
    g = positive_int("group", group, "input channels per scale; None for one scale per output channel")
    if K % g:
        raise ValueError(
            f"group={g} must divide K={K} (the input channels of W); use a divisor of K or None for one "
            "scale per output channel"
        )
    return g


def code_range(bits: int, symmetric: bool = True) -> tuple[int, int]:
    """(qmin, qmax): (-(2**(bits-1) - 1), 2**(bits-1) - 1) symmetric, (0, 2**bits - 1) with a zero point."""
    b = _bits(bits)
    return (-(2 ** (b - 1) - 1), 2 ** (b - 1) - 1) if _symmetric(symmetric) else (0, 2**b - 1)


# ====================================================================== the quantizer (float32)


def _qparams(w32: np.ndarray, qmin: int, qmax: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero of each row of ``w32`` (..., n) float32 (reduced over the last axis), in
    torchao's float32 order. Returns (scale float32, zero float32 holding integers)."""
    f = np.float32
    lo = np.minimum(w32.min(axis=-1), f(0))
    hi = np.maximum(w32.max(axis=-1), f(0))
    if symmetric:
        scale = np.maximum(-lo, hi) / f((qmax - qmin) / 2)
        return np.maximum(scale, f(MIN_SCALE)), np.zeros_like(scale)
    with np.errstate(over="ignore"):
        scale = np.maximum((hi - lo) / f(qmax - qmin), f(MIN_SCALE))
    if not np.isfinite(scale).all():
        raise ValueError(
            "a group's range hi - lo overflows float32: weights this large have no float32 zero-point scale"
        )
    zero = np.clip(f(qmin) - np.rint(lo / scale), qmin, qmax).astype(f)
    return scale, zero


def _encode(w32: np.ndarray, scale: np.ndarray, zero: np.ndarray, qmin: int, qmax: int) -> np.ndarray:
    """clip(round(fp32(w * fp32(1 / scale))) + zero, qmin, qmax), float32 holding integers."""
    inv_scale = np.float32(1) / scale
    return np.clip(np.rint(w32 * inv_scale) + zero, qmin, qmax)


def _code_dtype(symmetric: bool):
    return np.int8 if symmetric else np.uint8


def rtn_quantize(W, bits: int, group: int | None = None, symmetric: bool = True) -> QuantizedWeight:
    """Round-to-nearest: W (N, K) -> :class:`QuantizedWeight` (codes (N, K), scales and zeros
    (N, K // group), (N, 1) for ``group=None``), each group's scale from its own range."""
    w = _weight(W)
    b, sym = _bits(bits), _symmetric(symmetric)
    N, K = w.shape
    g = _group(group, K)
    qmin, qmax = code_range(b, sym)
    wg = w.astype(np.float32).reshape(N, K // g, g)
    scale, zero = _qparams(wg, qmin, qmax, sym)
    codes = _encode(wg, scale[..., None], zero[..., None], qmin, qmax).reshape(N, K)
    dt = _code_dtype(sym)
    return QuantizedWeight(codes.astype(dt), scale.astype(np.float64), zero.astype(dt))


def dequantize(codes, scales, zeros, group: int | None = None) -> np.ndarray:
    """``(codes - zero) * scale`` of each element's group: float64 (N, K), exact. scales and zeros
    (N, K // group); ``group=None`` means one per row, scales (N, 1)."""
    q = np.asarray(codes)
    if q.ndim != 2 or q.dtype.kind not in "iu":
        raise ValueError(f"codes must be a 2-D array of integers (N, K), got dtype {q.dtype} and shape {q.shape}")
    N, K = q.shape
    g = _group(group, K)
    want = (N, K // g)
    s, z = real_float64(scales), np.asarray(zeros)
    for name, a in (("scales", s), ("zeros", z)):
        if a.shape != want:
            raise ValueError(
                f"{name} has shape {a.shape}, but codes {q.shape} in groups of {g} need (N, K // group) = {want}"
            )
    if z.dtype.kind not in "iu":
        raise ValueError(f"zeros must hold integers (the code that stands for 0), got dtype {z.dtype}")
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError("scales must be positive and finite")
    d = q.astype(np.int64).reshape(N, K // g, g) - z.astype(np.int64)[..., None]
    return (d * s[..., None]).reshape(N, K)


def layer_output_error(W, Wq, X) -> float:
    """``||X W^T - X Wq^T||_F^2``: the squared error summed over all M x N outputs of the layer
    (not a mean; divide by M * N for one), W and Wq (N, K), X (M, K). Computed as
    ``||X (W - Wq)^T||_F^2`` in float64 (the difference first, so that no cancellation of two
    large outputs enters)."""
    w, wq = _weight(W), _weight(Wq, "Wq")
    if w.shape != wq.shape:
        raise ValueError(f"W and Wq must have the same shape (N, K), got {w.shape} and {wq.shape}")
    x = _activations(X, w.shape[1])
    return float(np.sum((x @ (w - wq).T) ** 2))


# ====================================================================== GPTQ


def hessian(X) -> np.ndarray:
    """GPTQ's Hessian of the layer's squared output error in W's rows: ``H = 2 X^T X`` (K, K), X (M, K).
    (GPTQ's reference code averages, 2 X^T X / M; the result of GPTQ does not depend on H's scale.)"""
    x = real_float64(X)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"X must be a 2-D array (M, K) of calibration activations, M >= 1, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("X holds inf or NaN")
    return 2.0 * x.T @ x


def _gptq_hessian(H, X, K: int) -> np.ndarray:
    if (H is None) == (X is None):
        raise ValueError("give exactly one of H (K, K), the Hessian 2 X^T X, or X (M, K), the calibration activations")
    if X is not None:
        return hessian(_activations(X, K))
    h = real_float64(H)
    if h.shape != (K, K):
        raise ValueError(f"H must be (K, K) = ({K}, {K}) for W with K = {K} columns, got shape {h.shape}")
    if not np.isfinite(h).all():
        raise ValueError("H holds inf or NaN")
    if np.abs(h - h.T).max() > 1e-10 * np.abs(h).max():
        raise ValueError("H must be symmetric (a Hessian 2 X^T X), up to rounding")
    if (np.diag(h) < 0).any():
        raise ValueError("H has a negative diagonal entry: it is not a Hessian 2 X^T X")
    return h.copy()


def _percdamp(v) -> float:
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    if not ok or not np.isfinite(v) or v < 0:
        raise ValueError(
            f"percdamp must be a finite number >= 0 (the dampening, as a fraction of H's mean diagonal), got {v!r}"
        )
    return float(v)


def _prepare(W, H, X, percdamp) -> tuple[np.ndarray, np.ndarray]:
    """(W, H) as GPTQ uses them: an input channel that never fires (H_jj = 0) gets H_jj = 1 and its
    weights set to 0, as the reference does (its weight never reaches the output on the calibration
    data); then ``percdamp * mean(diag H)`` added to the diagonal."""
    w = _weight(W).copy()
    h = _gptq_hessian(H, X, w.shape[1])
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h[np.diag_indices_from(h)] += _percdamp(percdamp) * np.mean(np.diag(h))
    return w, h


def _hinv_upper(h: np.ndarray) -> np.ndarray:
    """U, upper triangular with ``U^T U = H^-1``. Row j of U is ``H_F^-1[j, j:] / sqrt(H_F^-1[j, j])``
    for F = {j, ..., K-1}: what OBQ's update needs at step j, for every j at once."""
    try:
        L_inv = np.linalg.inv(np.linalg.cholesky(h))  # H = L L^T, so H^-1 = L^-T L^-1
        hinv = L_inv.T @ L_inv
        hinv = (hinv + hinv.T) / 2
        return np.linalg.cholesky(hinv).T
    except np.linalg.LinAlgError:
        raise ValueError(
            "H (after dampening) is not positive definite: raise percdamp (0.01 of the mean diagonal is "
            "the paper's default) or calibrate on more tokens than input channels"
        ) from None


def _quantize_column(w: np.ndarray, scale, zero, qmin, qmax) -> tuple[np.ndarray, np.ndarray]:
    """(codes, dequantized) of a float64 column with float32 (scale, zero) per row."""
    c = _encode(w.astype(np.float32), scale, zero, qmin, qmax)
    return c, (c.astype(np.float64) - zero) * scale.astype(np.float64)


def gptq_quantize(
    W,
    *,
    bits: int,
    X=None,
    H=None,
    group: int | None = None,
    symmetric: bool = True,
    blocksize: int = 128,
    percdamp: float = 0.01,
) -> QuantizedWeight:
    """GPTQ (Frantar et al. 2022, Algorithm 1): W (N, K) -> :class:`QuantizedWeight`, the same
    layout as :func:`rtn_quantize`. Give the calibration activations ``X`` (M, K) or their
    Hessian ``H = 2 X^T X`` (K, K).

    1. H gets ``percdamp * mean(diag H)`` on its diagonal; U is the upper Cholesky factor of H^-1.
    2. Columns j = 0 .. K-1 in order: q_j = quant(w_j), ``e = (w_j - q_j) / U_jj``, and the columns
       not yet quantized take ``w_k -= e * U_jk`` (k > j): OBQ's optimal update of the remaining
       weights for the error just made (eq. 3 of the paper, via U).
    3. Lazy batches: inside a block of ``blocksize`` columns the updates are applied as above; the
       columns after the block receive the block's updates at once, ``W[:, i2:] -= E U[i1:i2, i2:]``.
       In exact arithmetic the result does not depend on ``blocksize``.
    4. A group's scale and zero are computed when its first column is reached, from the group's
       weights as they stand then (all earlier updates applied), as the reference computes them when
       ``i % groupsize == 0``. (The reference reads those weights from W, which lacks the updates of
       the current block's earlier columns when a group starts inside a block, so its result
       depends on blocksize when ``group < blocksize``; here the pending updates are applied first,
       and lazy equals eager.) ``group=None``: one scale per row, from W before any update.

    An input channel with H_jj = 0 (it never fires) has its weights set to 0, as in the reference
    (which computes a per-channel scale before that zeroing, this one after it).
    Act-order (columns sorted by H_jj, the reference's ``--act-order``) is not done.
    """
    b, sym = _bits(bits), _symmetric(symmetric)
    bs = positive_int("blocksize", blocksize, "columns per lazy batch")
    w, h = _prepare(W, H, X, percdamp)
    N, K = w.shape
    g = _group(group, K)
    qmin, qmax = code_range(b, sym)
    U = _hinv_upper(h)
    codes = np.zeros((N, K), dtype=np.float32)
    scales = np.zeros((N, K // g), dtype=np.float32)
    zeros = np.zeros((N, K // g), dtype=np.float32)
    for i1 in range(0, K, bs):
        i2 = min(i1 + bs, K)
        W1 = w[:, i1:i2].copy()
        E = np.zeros((N, i2 - i1))
        for i in range(i2 - i1):
            j = i1 + i
            if j % g == 0:
                # the group's weights now: in-block columns from W1, later ones with this block's pending updates
                later = np.arange(i2, min(j + g, K))
                cur = np.concatenate([W1[:, i : i + g], w[:, later] - E[:, :i] @ U[i1:j, later]], axis=1)
                scales[:, j // g], zeros[:, j // g] = _qparams(cur.astype(np.float32), qmin, qmax, sym)
            s, z = scales[:, j // g], zeros[:, j // g]
            codes[:, j], dq = _quantize_column(W1[:, i], s, z, qmin, qmax)
            e = (W1[:, i] - dq) / U[j, j]
            W1[:, i:] -= np.outer(e, U[j, j:i2])
            E[:, i] = e
        w[:, i2:] -= E @ U[i1:i2, i2:]
    dt = _code_dtype(sym)
    return QuantizedWeight(codes.astype(dt), scales.astype(np.float64), zeros.astype(dt))


def gptq_quantize_ref(
    W, *, bits: int, X=None, H=None, group: int | None = None, symmetric: bool = True, percdamp: float = 0.01
) -> QuantizedWeight:
    """The slow, obvious reference of :func:`gptq_quantize`: the same column order and quantizer,
    with no Cholesky factor and no update formula. Before column j is quantized, the columns
    not yet quantized (F = {j, ..., K-1}) hold the weights that minimise the layer's output error
    ``(w - w0) H (w - w0)^T`` row by row, given the codes already chosen for columns 0 .. j-1:
    ``w_F = w0_F - (w_P - w0_P) H_PF H_FF^-1`` (P = {0, ..., j-1}), a linear solve per step,
    O(K^4) in all. Same dampening, dead-channel and group rules."""
    b, sym = _bits(bits), _symmetric(symmetric)
    w0, h = _prepare(W, H, X, percdamp)
    _hinv_upper(h)  # the same refusal of an H that is not positive definite
    N, K = w0.shape
    g = _group(group, K)
    qmin, qmax = code_range(b, sym)
    codes = np.zeros((N, K), dtype=np.float32)
    scales = np.zeros((N, K // g), dtype=np.float32)
    zeros = np.zeros((N, K // g), dtype=np.float32)
    fixed = np.zeros((N, 0))  # dequantized values of columns 0 .. j-1
    for j in range(K):
        P, F = slice(0, j), slice(j, K)
        w_F = w0[:, F] - np.linalg.solve(h[F, F], h[F, P] @ (fixed - w0[:, P]).T).T
        if j % g == 0:
            scales[:, j // g], zeros[:, j // g] = _qparams(w_F[:, :g].astype(np.float32), qmin, qmax, sym)
        codes[:, j], dq = _quantize_column(w_F[:, 0], scales[:, j // g], zeros[:, j // g], qmin, qmax)
        fixed = np.concatenate([fixed, dq[:, None]], axis=1)
    dt = _code_dtype(sym)
    return QuantizedWeight(codes.astype(dt), scales.astype(np.float64), zeros.astype(dt))


# ====================================================================== AWQ


@dataclass(frozen=True)
class AWQResult:
    """What :func:`awq_scales` chose and measured.

    alpha: the chosen exponent. s (K,): the factors, ``mean|x|**alpha`` normalised (see
    :func:`awq_scales`). quantized: the RTN quantization of ``W diag(s)`` (what is stored; the
    layer runs it on ``X / s``, the 1/s folded into the op before). w_dq (N, K): the same layer in
    W's coordinates, ``dequantize(quantized) / s``. alphas (grid,), errors (grid,): every grid
    point and its output error ``||X W^T - (X / s) Q(W s)^T||_F^2``.
    """

    alpha: float
    s: np.ndarray
    quantized: QuantizedWeight
    w_dq: np.ndarray
    alphas: np.ndarray
    errors: np.ndarray


#: AWQ's floor on a factor before normalising (``clamp(min=1e-4)`` in the reference's search).
AWQ_MIN_FACTOR = 1e-4


def awq_factors(x_mean: np.ndarray, alpha: float) -> np.ndarray:
    """``s = max(x_mean**alpha, 1e-4)``, divided by ``sqrt(max(s) * min(s))`` (the reference's
    normalisation, which centres log s about 0 and changes nothing but the scale of the codes'
    range). alpha = 0 gives s = 1 exactly."""
    s = np.maximum(np.asarray(x_mean, dtype=np.float64) ** float(alpha), AWQ_MIN_FACTOR)
    return s / np.sqrt(s.max() * s.min())


def awq_scales(W, X, bits: int, group: int | None = None, symmetric: bool = True, grid: int = 20) -> AWQResult:
    """AWQ's scale search (Lin et al. 2023): W (N, K), calibration activations X (M, K) -> :class:`AWQResult`.

    ``x_mean = mean over tokens of |X|`` (K,); for alpha in ``0, 1/grid, ..., (grid-1)/grid`` (the
    reference's grid: 1 itself is not tried) the factors ``s = awq_factors(x_mean, alpha)`` are
    migrated (:func:`~nbhelpers.outlier_remedies.migrate`): W diag(s) is quantized by
    :func:`rtn_quantize` and run on X / s, and the output error ``||X W^T - (X / s) Q(W s)^T||_F^2``
    recorded. The alpha of the smallest error wins (the first one on a tie). alpha = 0 is plain RTN.
    """
    w = _weight(W)
    b, sym = _bits(bits), _symmetric(symmetric)
    N, K = w.shape
    x = _activations(X, K)
    _group(group, K)  # a group that does not divide K is refused before the search
    n = positive_int("grid", grid, "alphas tried: 0, 1/grid, ..., (grid-1)/grid")
    x_mean = np.abs(x).mean(axis=0)
    y = x @ w.T
    alphas = np.arange(n) / n
    errors = np.empty(n)
    best = None
    for i, a in enumerate(alphas):
        s = awq_factors(x_mean, a)
        xs, ws_t = migrate(x, w.T, s)
        qw = rtn_quantize(ws_t.T, b, group, sym)
        ws_dq = dequantize(*qw, group)
        errors[i] = float(np.sum((y - xs @ ws_dq.T) ** 2))
        if best is None or errors[i] < errors[best[0]]:
            best = (i, s, qw, ws_dq / s)
    i, s, qw, w_dq = best
    return AWQResult(float(alphas[i]), s, qw, w_dq, alphas, errors)
