"""Measurements of error and range: normwise relative errors, exact sums, range fractions.

What the chapters measure their results with. Functions take arrays (any real dtype, ml_dtypes
included) and return float64 numbers or arrays: :func:`relative_error` and :func:`exact_sum`
compare results with exact references, :func:`scale_bias` says how much of an error is a common
shrink or growth; :func:`range_fractions` and :func:`underflow_fraction`
say which part of a tensor a format would flush to zero, keep as subnormals, or overflow (they
round a copy to the format to find out).
"""

from __future__ import annotations

import math

import numpy as np

from .accumulation import reduction_columns
from .formats import FloatFormat, get_format
from .rounding import round_to
from .validation import real_float64

__all__ = ["relative_error", "scale_bias", "sqnr_db", "exact_sum", "range_fractions", "underflow_fraction"]


def relative_error(C, C_ref) -> float:
    """Normwise relative error ``||C - C_ref||_F / ||C_ref||_F`` (Frobenius norms, in float64).

    C, C_ref: arrays of the same shape (any real dtype, ml_dtypes included). Returns 0.0 when
    both are all zeros and inf when C_ref is all zeros but C is not.
    """
    c, r = np.asarray(C), np.asarray(C_ref)
    if c.shape != r.shape:
        raise ValueError(f"relative_error needs two arrays of the same shape; got {c.shape} and {r.shape}")
    c, r = real_float64(c), real_float64(r)
    den = float(np.linalg.norm(r))
    num = float(np.linalg.norm(c - r))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def scale_bias(C, C_ref) -> float:
    """The part of C's error that is a change of scale common to all elements: the least-squares
    factor c of ``C ~ c * C_ref``, minus one, ``sum(C * C_ref) / sum(C_ref**2) - 1`` (float64).

    Negative: C comes out too small as a whole (a truncating accumulator summing same-sign
    terms); near zero against :func:`relative_error`: the error has no common direction. C, C_ref:
    arrays of the same shape; a ValueError when C_ref is all zeros (no scale to compare with).
    """
    c, r = np.asarray(C), np.asarray(C_ref)
    if c.shape != r.shape:
        raise ValueError(f"scale_bias needs two arrays of the same shape; got {c.shape} and {r.shape}")
    c, r = real_float64(c).ravel(), real_float64(r).ravel()
    den = float(r @ r)
    if den == 0.0:
        raise ValueError("scale_bias is undefined when C_ref is all zeros")
    return float((c - r) @ r) / den


def sqnr_db(x_hat, x) -> float:
    """Signal-to-quantization-noise ratio of ``x_hat`` against ``x``, in decibels:
    ``10 log10(sum x**2 / sum (x - x_hat)**2)`` = ``-20 log10(relative_error(x_hat, x))``.

    inf when x_hat equals x (no noise); -inf when x is all zeros but x_hat is not; a ValueError
    when both are all zeros (no signal, no noise: undefined). Each bit of a uniform quantizer is
    worth about 6.02 dB.
    """
    e = relative_error(x_hat, x)
    if e == 0.0:
        if not np.any(real_float64(np.asarray(x))):
            raise ValueError("sqnr_db is undefined when x and x_hat are both all zeros")
        return math.inf
    return -20.0 * math.log10(e)


def exact_sum(x, axis: int = -1) -> np.ndarray:
    """The exact sum of ``x`` along ``axis``, rounded once to float64 (``math.fsum`` per lane).

    ``math.fsum`` (Shewchuk's algorithm) keeps the running sum as a list of non-overlapping
    float64 partials, so nothing is lost on the way, and rounds the total once to nearest
    (CPython, Modules/mathmodule.c). x: real array; returns float64 with ``axis`` removed. This
    is the reference every error in chapter 02 is measured against.
    """
    cols, batch, n = reduction_columns(x, axis)
    rows = cols.T  # (batch, n)
    return np.array([math.fsum(r) for r in rows.tolist()], dtype=np.float64).reshape(batch)


# ---------------------------------------------------------------------------------------------
# Where values fall in a format (chapter 05: gradients against fp16's range)
# ---------------------------------------------------------------------------------------------


def range_fractions(x, fmt: FloatFormat | str = "fp16") -> dict[str, float]:
    """Where the nonzero values of x land when rounded (to nearest) into ``fmt``.

    Returns fractions of the nonzero finite elements: ``flushed`` (round to zero),
    ``subnormal`` (nonzero but below the smallest normal), ``normal``, ``overflow`` (beyond the
    largest finite value), plus ``count`` (how many nonzero finite elements there were).
    """
    f = get_format(fmt)
    a = np.abs(np.asarray(x, dtype=np.float64)).ravel()
    a = a[np.isfinite(a) & (a != 0)]
    n = a.size
    if n == 0:
        return {"flushed": 0.0, "subnormal": 0.0, "normal": 0.0, "overflow": 0.0, "count": 0}
    r = np.abs(round_to(a, f))
    flushed = int(np.count_nonzero(r == 0))
    overflow = int(np.count_nonzero(~np.isfinite(r) | (r > f.max)))
    subnormal = int(np.count_nonzero((r > 0) & (r < f.smallest_normal)))
    return {
        "flushed": flushed / n,
        "subnormal": subnormal / n,
        "normal": (n - flushed - overflow - subnormal) / n,
        "overflow": overflow / n,
        "count": n,
    }


def underflow_fraction(x, fmt: FloatFormat | str) -> float:
    """Fraction of the nonzero elements of x that round (to nearest even) to zero in ``fmt``.

    0.0 when x has no nonzero element. x: any real array (finite values).
    """
    a = np.asarray(x, dtype=np.float64).ravel()
    nz = a != 0
    n = int(np.count_nonzero(nz))
    if n == 0:
        return 0.0
    return int(np.count_nonzero(round_to(a[nz], fmt) == 0)) / n
