"""Remedies for outlier channels in an int8 GEMM ``C = X W`` (chapter 06): X (M, K) activations,
W (K, N) weights, K the channels, the dimension the sum runs over.

A scale per channel of X would fix outlier channels, but it varies along K and so cannot be
applied in the epilogue. Three remedies that keep the epilogue, each computed here:

* :func:`int8_epilogue_matmul`: the plain int8 GEMM the remedies are measured against: x quantized
  by a block constant along K (per tensor or per row), w per column, scales in the epilogue.
* :func:`smooth` (SmoothQuant, Xiao et al. 2023): per channel j,
  ``s_j = max|X[:, j]|**alpha / max|W[j, :]|**(1 - alpha)``, ``X' = X / s``, ``W' = diag(s) W``.
  ``X' W' = X W`` in exact arithmetic; the channel's range moves from X into W, which is quantized
  per output channel (column) and does not mind. alpha = 1 moves X's whole range into W (X' has
  amax 1 in every channel); alpha = 0 moves none of it, but still divides by W's row amax (W' has
  amax 1 in every row), so it is not "no smoothing".
* :func:`mixed_int8_matmul` (LLM.int8(), Dettmers et al. 2022): the channels where some
  ``|x| > threshold`` (6.0 in the paper) go through a high-precision (fp16) GEMM, the rest through
  an int8 GEMM with per-row scales of X and per-column scales of W; the two outputs are added.
* :func:`quantize_asymmetric` and :func:`asymmetric_matmul`: 8-bit codes with a zero point,
  ``x ~ (q - z) * scale``, codes and zero point uint8 (0..255, as chapter 06's exercise takes
  them; integer MMA units multiply u8 by s8 into int32), ``scale = (max - min) / 255`` over a
  range that includes 0. The GEMM with a symmetric int8 W needs one correction per output:
  ``sum_k (qx - zx) qw = sum_k qx qw - zx * sum_k qw``, from the column sums of W's codes
  (:func:`weight_code_column_sums`, computed once, offline).

One scale convention: ``x ~ q * scale`` (asymmetric: ``x ~ (q - z) * scale``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .recipes import PER_COLUMN, PER_ROW, PER_TENSOR, Recipe
from .rounding import round_to
from .scaled_gemm import INT32_MAX, scaled_mm
from .scaling import quantize
from .validation import positive_number, real_float64

__all__ = [
    "int8_epilogue_matmul",
    "smoothing_scales",
    "migrate",
    "smooth",
    "LLM_INT8_THRESHOLD",
    "outlier_channels",
    "MixedInt8Product",
    "mixed_int8_matmul",
    "ASYM_QMIN",
    "ASYM_QMAX",
    "quantize_asymmetric",
    "dequantize_asymmetric",
    "weight_code_column_sums",
    "asymmetric_matmul",
    "asymmetric_matmul_ref",
]

#: LLM.int8()'s outlier threshold on |x| (Dettmers et al. 2022).
LLM_INT8_THRESHOLD = 6.0
#: Codes of the asymmetric quantizer: all 256 of an unsigned byte.
ASYM_QMIN, ASYM_QMAX = 0, 255
_HIGH = ("fp16", "bf16", "fp32")


def _matrix(a, name: str) -> np.ndarray:
    a = real_float64(a)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} holds inf or NaN")
    return a


def _pair(x, w) -> tuple[np.ndarray, np.ndarray]:
    x, w = _matrix(x, "x (M, K)"), _matrix(w, "w (K, N)")
    if x.shape[1] != w.shape[0]:
        raise ValueError(f"x (M, K) and w (K, N) must agree in K; got x {x.shape} and w {w.shape}")
    return x, w


def int8_epilogue_matmul(x, w, x_block: tuple = PER_ROW) -> np.ndarray:
    """``x w`` (x (M, K), w (K, N)) -> (M, N) in int8: x quantized by ``x_block`` (PER_TENSOR or PER_ROW:
    constant along K), w per column, exact int32 accumulation, fp32 epilogue
    (:func:`~nbhelpers.scaled_gemm.scaled_mm`)."""
    x, w = _pair(x, w)
    if tuple(x_block) not in (PER_TENSOR, PER_ROW):
        raise ValueError(
            f"x_block must be PER_TENSOR {PER_TENSOR} or PER_ROW {PER_ROW} (a scale constant along K, "
            f"which the epilogue can apply), got {x_block!r}"
        )
    qx, sx = quantize(x, Recipe("int8", tuple(x_block)))
    qw, sw = quantize(w, Recipe("int8", PER_COLUMN))
    return scaled_mm(qx, qw, sx, sw, in_fmt="int8")


# ====================================================================== SmoothQuant


def _alpha(alpha) -> float:
    ok = isinstance(alpha, (int, float, np.integer, np.floating)) and not isinstance(alpha, (bool, np.bool_))
    if not ok or not (0.0 <= float(alpha) <= 1.0):
        raise ValueError(
            "alpha (SmoothQuant's migration strength) must be a real number in [0, 1] (0 moves none of "
            f"x's range into w, 1 all of it); got {alpha!r}"
        )
    return float(alpha)


def smoothing_scales(x, w, alpha: float = 0.5) -> np.ndarray:
    """SmoothQuant's per-channel factors, shape (K,): ``s_j = max|x[:, j]|**alpha / max|w[j, :]|**(1 - alpha)``.

    x (M, K), w (K, N). A channel whose x or w is all zero gets s_j = 1 (there is nothing to move).
    """
    x, w = _pair(x, w)
    a = _alpha(alpha)
    ax, aw = np.abs(x).max(axis=0), np.abs(w).max(axis=1)
    live = (ax > 0) & (aw > 0)
    s = np.ones(x.shape[1])
    s[live] = ax[live] ** a / aw[live] ** (1.0 - a)
    return s


def migrate(x, w, s) -> tuple[np.ndarray, np.ndarray]:
    """The migration of a per-channel factor from x into w: (x', w') with ``x' = x / s`` (column j of
    x (M, K) divided by s_j) and ``w' = diag(s) w`` (row j of w (K, N) times s_j), shapes (M, K),
    (K, N). ``x' w' = x w`` up to float64 rounding. SmoothQuant (:func:`smooth`) and AWQ
    (:func:`~nbhelpers.weight_quant.awq_scales`) differ only in how they choose s (K,), which must
    be positive and finite."""
    x, w = _pair(x, w)
    s = real_float64(s)
    if s.shape != (x.shape[1],):
        raise ValueError(f"s must have shape (K,) = ({x.shape[1]},), one factor per channel; got {s.shape}")
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError(f"s must be positive and finite (x is divided by it); got values in [{s.min()}, {s.max()}]")
    return x / s, s[:, None] * w


def smooth(x, w, alpha: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x', w', s) with ``x' = x / s`` (each column j divided by s_j), ``w' = diag(s) w``: shapes
    (M, K), (K, N), (K,). ``x' w' = x w`` up to float64 rounding."""
    s = smoothing_scales(x, w, alpha)
    return (*migrate(x, w, s), s)


# ====================================================================== LLM.int8()


def outlier_channels(x, threshold: float = LLM_INT8_THRESHOLD) -> np.ndarray:
    """The channels (columns of x (M, K)) that hold some ``|x| > threshold``: sorted int indices."""
    x = _matrix(x, "x (M, K)")
    t = positive_number("threshold", threshold) if not math.isinf(threshold) else math.inf
    return np.flatnonzero((np.abs(x) > t).any(axis=0))


@dataclass(frozen=True)
class MixedInt8Product:
    """The two parts of LLM.int8()'s decomposition of ``x w``; ``out = fl32(out_int8 + out_high)``.

    outliers: the channels (indices into K) of the high-precision GEMM. out_int8 (M, N): the int8
    GEMM of the other channels (per-row scales of x, per-column scales of w, fp32 epilogue).
    out_high (M, N): the outlier channels' GEMM, operands rounded to ``high``, fp32 accumulation.
    K: the channels in all.
    """

    out: np.ndarray
    outliers: np.ndarray
    out_int8: np.ndarray
    out_high: np.ndarray
    high: str
    K: int

    @property
    def k_high_fraction(self) -> float:
        """Share of the K dimension, and so of the multiply-adds, in the high-precision GEMM."""
        return len(self.outliers) / self.K


def _high_gemm(x: np.ndarray, w: np.ndarray, high: str) -> np.ndarray:
    """Operands rounded to ``high``, exact products summed in float64, rounded once to fp32."""
    xh, wh = round_to(x, high), round_to(w, high)
    return (xh @ wh).astype(np.float32).astype(np.float64)


def mixed_int8_matmul(x, w, threshold: float = LLM_INT8_THRESHOLD, high: str = "fp16") -> MixedInt8Product:
    """LLM.int8()'s mixed-precision ``x w`` (x (M, K), w (K, N)) -> :class:`MixedInt8Product` (out (M, N)).

    The channels of :func:`outlier_channels` (``|x| > threshold`` somewhere in the column) multiply
    in ``high`` ("fp16" as in the paper, "bf16" or "fp32"); the rest in int8, x per row, w per
    column, scales in the epilogue (:func:`~nbhelpers.scaled_gemm.scaled_mm`). The two fp32 outputs
    are added in fp32. threshold=inf gives the plain int8 GEMM, a threshold below every |x| the
    plain high-precision one.
    """
    x, w = _pair(x, w)
    if high not in _HIGH:
        raise ValueError(f"high must be one of {', '.join(map(repr, _HIGH))}, got {high!r}")
    M, K = x.shape
    N = w.shape[1]
    out_cols = outlier_channels(x, threshold)
    rest = np.setdiff1d(np.arange(K), out_cols)
    out_int8 = np.zeros((M, N))
    if rest.size:
        out_int8 = int8_epilogue_matmul(x[:, rest], w[rest], PER_ROW)
    out_high = _high_gemm(x[:, out_cols], w[out_cols], high) if out_cols.size else np.zeros((M, N))
    out = (out_int8.astype(np.float32) + out_high.astype(np.float32)).astype(np.float64)
    return MixedInt8Product(out, out_cols, out_int8, out_high, high, K)


# ====================================================================== asymmetric int8


def quantize_asymmetric(x, per: str = "tensor") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric 8-bit codes with a zero point: ``x ~ (q - z) * scale``; returns (q, z, scale).

    per "tensor": one (z, scale) for all of x, shapes (1, 1); per "row": one per row, (M, 1).
    The range [lo, hi] is widened to include 0 (so 0 is exact: q = z); scale = fp32((hi - lo) / 255),
    z = clip(round(-lo / scale), 0, 255), q = clip(round(x / scale) + z, 0, 255), ties to even.
    q and z are uint8 arrays (codes 0..255); |x - (q - z) scale| <= scale / 2 (up to the rounding
    of x / scale) wherever x lies in [lo, hi].
    """
    x = _matrix(x, "x")
    if per not in ("tensor", "row"):
        raise ValueError(f"per must be 'tensor' or 'row', got {per!r}")
    axis = None if per == "tensor" else 1
    lo = np.minimum(x.min(axis=axis, keepdims=True), 0.0) if x.size else np.zeros((1, 1))
    hi = np.maximum(x.max(axis=axis, keepdims=True), 0.0) if x.size else np.zeros((1, 1))
    if per == "tensor":
        lo, hi = lo.reshape(1, 1), hi.reshape(1, 1)
    span = (hi - lo) / (ASYM_QMAX - ASYM_QMIN)
    scale = np.maximum(span.astype(np.float32).astype(np.float64), 2.0**-149)
    z = np.clip(np.rint(-lo / scale), ASYM_QMIN, ASYM_QMAX)
    q = np.clip(np.rint(x / scale) + z, ASYM_QMIN, ASYM_QMAX)
    return q.astype(np.uint8), z.astype(np.uint8), scale


def dequantize_asymmetric(q, z, scale) -> np.ndarray:
    """``(q - z) * scale``, float64 of q's shape (z and scale broadcast: (1, 1) or (M, 1))."""
    q = real_float64(q)
    return (q - real_float64(z)) * real_float64(scale)


def weight_code_column_sums(qw) -> np.ndarray:
    """``sum_k qw[k, j]`` for int8 codes qw (K, N): shape (1, N), int64. Computed once per weight."""
    q = _matrix(qw, "qw (K, N)")
    return q.astype(np.int64).sum(axis=0, keepdims=True)


def _codes(q, name: str, lo: int, hi: int) -> np.ndarray:
    q = _matrix(q, name)
    if (q != np.round(q)).any() or (q < lo).any() or (q > hi).any():
        raise ValueError(f"{name} must hold integer codes in [{lo}, {hi}], got values in [{q.min()}, {q.max()}]")
    return q.astype(np.int64)


def asymmetric_matmul(qx, zx, sx, qw, sw, colsum_w=None) -> tuple[np.ndarray, np.ndarray]:
    """``x w`` from asymmetric x (uint8 codes qx (M, K), zx and sx (1, 1) or (M, 1)) and symmetric
    int8 w (qw (K, N), sw (1, 1) or (1, N)). Returns (C (M, N) float64, the integer accumulator
    (M, N) int64).

    The K loop is the plain u8 x s8 GEMM ``qx qw`` (int32); the zero point adds one integer term per
    output, ``acc = qx qw - zx * colsum_w`` with ``colsum_w = sum_k qw`` (precomputed, (1, N)), then
    the epilogue ``C = fl32(fl32(fl32(acc) * sx) * sw)``. OverflowError if acc leaves int32 (int32
    arithmetic wraps around, so only the final value matters).
    """
    qx_ = _codes(qx, "qx (M, K)", ASYM_QMIN, ASYM_QMAX)
    qw_ = _codes(qw, "qw (K, N)", -128, 127)
    if qx_.shape[1] != qw_.shape[0]:
        raise ValueError(f"qx (M, K) and qw (K, N) must agree in K; got {qx_.shape} and {qw_.shape}")
    M, N = qx_.shape[0], qw_.shape[1]
    zx_ = _codes(np.reshape(zx, (-1, 1)), "zx", ASYM_QMIN, ASYM_QMAX)
    if zx_.shape[0] not in (1, M):
        raise ValueError(f"zx must have shape (1, 1) or ({M}, 1), got {np.shape(zx)}")
    cs = weight_code_column_sums(qw_) if colsum_w is None else np.asarray(colsum_w, dtype=np.int64).reshape(1, -1)
    if cs.shape != (1, N):
        raise ValueError(f"colsum_w must have shape (1, {N}), got {np.shape(colsum_w)}")
    acc = qx_ @ qw_ - zx_ * cs
    if (np.abs(acc) > INT32_MAX).any():
        raise OverflowError("int32 accumulator overflow: qx qw - zx * colsum_w is beyond 2**31 - 1")
    f32 = np.float32
    c = (acc.astype(f32) * real_float64(sx).astype(f32)) * real_float64(sw).astype(f32)
    return c.astype(np.float64), acc


def asymmetric_matmul_ref(qx, zx, sx, qw, sw) -> np.ndarray:
    """The slow, obvious reference: dequantize both operands first, multiply in float64."""
    return dequantize_asymmetric(qx, zx, sx) @ (real_float64(qw) * real_float64(sw))
