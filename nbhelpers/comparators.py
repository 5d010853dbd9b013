"""Comparators: does what a student's function returned equal what the reference returned?

A comparator is ``(got, expected) -> None`` when they are equal, else a short reason a student
can read ("returned str 'abc', expected a number", "3 of 8 elements differ; first at index [2]:
got 1.0, expected 1.5"). :func:`same_value` is the default of every
:class:`~nbhelpers.exercise_types.Exercise` (bit-exact: NaN equals NaN, +0.0 and -0.0 differ);
:func:`same_value_up_to_zero_sign` and :func:`close_to` relax it for the exercises that need it.
None of them raises on a student's value (:func:`compare`, the comparison itself, may).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .report_text import describe, describe_exception

__all__ = ["same_value", "same_value_up_to_zero_sign", "close_to", "float_array", "compare"]


# ---------------------------------------------------------------------------------------------
# same_value: bit-exact comparison of numbers, tuples and arrays
# ---------------------------------------------------------------------------------------------


def _is_numeric_dtype(dt: np.dtype) -> bool:
    if dt.kind in "biufc":
        return True
    if dt.kind == "V" and dt.fields is None:  # ml_dtypes' bfloat16, float8_*, ... have kind 'V'
        try:
            np.zeros(1, dt).astype(np.float64)
            return True
        except (TypeError, ValueError):
            return False
    return False


def _is_number(x: Any) -> bool:
    if isinstance(x, (bool, int, float, complex)):
        return True
    if isinstance(x, (np.generic, np.ndarray)):
        return (not isinstance(x, np.ndarray) or x.ndim == 0) and _is_numeric_dtype(x.dtype)
    return False


def _as_scalar(x: Any) -> int | float | complex | None:
    """A Python int, float or complex with the value of x, or None if x is not one number."""
    if isinstance(x, (str, bytes, list, tuple, dict, set)) or x is None:
        return None
    if isinstance(x, np.ndarray):
        if x.ndim != 0 or not _is_numeric_dtype(x.dtype):
            return None
        x = x[()]
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x)
    if isinstance(x, (complex, np.complexfloating)):
        return complex(x)
    if isinstance(x, np.generic):  # ml_dtypes scalars
        return float(x) if _is_numeric_dtype(x.dtype) else None
    try:  # int-like objects (a 0-d integer tensor, a custom integer type)
        return operator.index(x)
    except Exception:
        pass
    try:  # float-like objects (a 0-d tensor, Fraction, Decimal)
        return float(x)
    except Exception:
        return None


def _compare_floats(g: float, e: float, signed_zero: bool) -> str | None:
    if math.isnan(e) or math.isnan(g):
        if math.isnan(e) and math.isnan(g):
            return None
        return "expected NaN" if math.isnan(e) else "returned NaN"
    if g != e:
        return "wrong value"
    if signed_zero and g == 0 and math.copysign(1.0, g) != math.copysign(1.0, e):
        return "sign of zero differs"
    return None


def _compare_scalars(got: Any, expected: Any) -> str | None:
    e = _as_scalar(expected)
    g = _as_scalar(got)
    if g is None:
        return f"returned {describe(got)}, expected a number"
    if isinstance(e, complex) or isinstance(g, complex):
        e, g = complex(e), complex(g)
        for part, gp, ep in (("real part", g.real, e.real), ("imaginary part", g.imag, e.imag)):
            reason = _compare_floats(gp, ep, signed_zero=True)
            if reason:
                return f"{part}: {reason}"
        return None
    if isinstance(e, int) and isinstance(g, int):
        return None if g == e else "wrong value"
    if isinstance(e, int) or isinstance(g, int):
        # an int against a float: compare values exactly (Python's int/float comparison is
        # exact); an int has no signed zero
        if isinstance(g, float) and math.isnan(g):
            return "returned NaN"
        if isinstance(e, float) and math.isnan(e):
            return "expected NaN"
        return None if g == e else "wrong value"
    return _compare_floats(g, e, signed_zero=True)


def _numeric_array(x: Any) -> np.ndarray | None:
    """x as a numeric ndarray (ml_dtypes arrays become float64), or None."""
    try:
        a = np.asarray(x)
    except KeyboardInterrupt:
        raise
    except BaseException:  # ragged lists, objects whose __array__ raises
        return None
    if a.dtype.kind in "biufc":
        return a
    if a.dtype.kind == "V" and _is_numeric_dtype(a.dtype):
        return a.astype(np.float64)
    if a.dtype.kind == "O" and all(_is_number(v) for v in a.flat):
        # e.g. Python ints too large for int64; compare them as float64
        try:
            return a.astype(np.float64)
        except (TypeError, ValueError, OverflowError):
            return None
    return None


def _int_equal(g: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Elementwise exact equality of two integer arrays of any signedness."""
    g = g.astype(np.int64) if g.dtype.kind == "b" else g
    e = e.astype(np.int64) if e.dtype.kind == "b" else e
    if g.dtype.kind == e.dtype.kind:
        return g == e  # same signedness: numpy compares exactly
    # int64 against uint64 would go through float64; compare signs, then magnitudes as uint64
    s, u = (g, e) if g.dtype.kind == "i" else (e, g)
    nonneg = s >= 0
    return nonneg & (s.astype(np.uint64) == u.astype(np.uint64))


def _format_index(idx: tuple) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def _compare_arrays(got: Any, expected: np.ndarray) -> str | None:
    e = _numeric_array(expected)
    if e is None:  # not an array of numbers: plain equality
        try:
            ok = bool(np.array_equal(np.asarray(got), expected))
        except Exception:
            ok = False
        return None if ok else "wrong value"
    if got is None or isinstance(got, (str, bytes)) or _is_number(got):
        return f"returned {describe(got)}, expected an array of shape {expected.shape}"
    g = _numeric_array(got)
    if g is None:
        return f"returned {describe(got)}, expected an array of numbers of shape {expected.shape}"
    if g.shape != e.shape:
        return f"returned an array of shape {g.shape}, expected shape {e.shape}"
    if g.size == 0:
        return None
    gk, ek = g.dtype.kind, e.dtype.kind
    if gk in "biu" and ek in "biu":
        equal = _int_equal(g, e)
    elif gk == "c" or ek == "c":
        gc, ec = g.astype(np.complex128), e.astype(np.complex128)
        equal = np.ones(g.shape, bool)
        for gp, ep in ((gc.real, ec.real), (gc.imag, ec.imag)):
            equal &= (gp == ep) & (np.signbit(gp) == np.signbit(ep)) | (np.isnan(gp) & np.isnan(ep))
    else:
        gf, ef = g.astype(np.float64), e.astype(np.float64)
        with np.errstate(invalid="ignore"):
            equal = (gf == ef) | (np.isnan(gf) & np.isnan(ef))
        if gk == "f" and ek == "f":  # +0.0 and -0.0 differ; an int 0 matches either
            equal &= ~((gf == 0) & (np.signbit(gf) != np.signbit(ef)))
    bad = ~equal
    n_bad = int(bad.sum())
    if n_bad == 0:
        return None
    idx = tuple(np.argwhere(bad)[0])
    gv, ev = g[idx].item(), e[idx].item()
    what = "sign of zero differs: " if gv == 0 and ev == 0 else ""
    return (
        f"{n_bad} of {e.size} elements differ; first at index {_format_index(idx)}: {what}got {gv!r}, expected {ev!r}"
    )


def compare(got: Any, expected: Any) -> str | None:
    """The comparison behind :func:`same_value`, which may raise on a hostile object (a custom
    ``__eq__``, ``__float__`` or ``__array__``): for a comparator that compares parts of a result
    and lets :func:`nbhelpers.checks.score` report whatever raises."""
    if isinstance(expected, (tuple, list)):
        kind = "tuple" if isinstance(expected, tuple) else "list"
        if not isinstance(got, (tuple, list)):
            return f"returned {describe(got)}, expected a {kind} of {len(expected)} values"
        if len(got) != len(expected):
            return f"returned a {type(got).__name__} of length {len(got)}, expected length {len(expected)}"
        names = getattr(expected, "_fields", None)  # a NamedTuple such as formats.Fields
        for i, (g, e) in enumerate(zip(got, expected)):
            reason = compare(g, e)
            if reason is not None:
                where = f"element {i} ({names[i]})" if names else f"element {i}"
                return f"{where}: {reason}"
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"returned {describe(got)}, expected a dict with keys {', '.join(sorted(map(repr, expected)))}"
        if set(got) != set(expected):
            missing = sorted(map(repr, set(expected) - set(got)))
            extra = sorted(map(repr, set(got) - set(expected)))
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unexpected {', '.join(extra)}"] if extra else []
            )
            return f"returned a dict whose keys are wrong: {'; '.join(parts)}"
        for key, e in expected.items():
            reason = compare(got[key], e)
            if reason is not None:
                return f"key {key!r}: {reason}"
        return None
    if isinstance(expected, np.ndarray) and expected.ndim > 0:
        return _compare_arrays(got, expected)
    if _is_number(expected):
        return _compare_scalars(got, expected)
    if expected is None:
        return None if got is None else f"returned {describe(got)}, expected None"
    # anything else (a string, an enum member, a format object): plain equality, same type
    if not isinstance(got, type(expected)) and not isinstance(expected, type(got)):
        return f"returned {describe(got)}, expected {type(expected).__name__}"
    return None if bool(got == expected) else "wrong value"


def float_array(got: Any) -> np.ndarray | str:
    """A student's returned value as a new float64 array, or the reason it is not an array of
    numbers (a string, an object array, something numpy cannot read); never raises."""
    try:
        a = np.asarray(got)
        if a.dtype.kind not in "fiu" and a.dtype.kind != "V":
            return f"returned {type(got).__name__} of dtype {a.dtype}, expected an array of floats"
        return a.astype(np.float64)
    except Exception:  # a student's odd object
        return f"returned {type(got).__name__}, expected an array of floats"


def same_value(got: Any, expected: Any) -> str | None:
    """None if ``got`` equals ``expected`` bit for bit, else a short reason; never raises.

    Numbers compare by value (3 == 3.0, numpy and ml_dtypes scalars are fine), NaN equals NaN,
    +0.0 and -0.0 differ. Arrays must have the same shape and the same values by the same
    rules (the dtype may differ). Tuples and lists compare element by element, dicts key by key
    (the same keys, each value by these rules). A value of the
    wrong kind (a string, None, a list of the wrong length) gives a reason such as
    "returned str 'abc', expected a number".
    """
    try:
        return compare(got, expected)
    except Exception as e:  # a hostile __eq__, __float__ or __array__
        return f"could not compare {describe(got)} with the expected value ({describe_exception(e)})"


def _unsign_zeros(x):
    """x with every -0.0 turned into +0.0 (arrays, tuples, numbers); x itself if it is none of these."""
    if isinstance(x, tuple):
        return tuple(_unsign_zeros(v) for v in x)
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return x + 0.0
    if isinstance(x, (float, np.floating)):
        return float(x) + 0.0
    return x


def same_value_up_to_zero_sign(got: Any, expected: Any) -> str | None:
    """:func:`same_value`, except that +0.0 and -0.0 are equal; never raises.

    For exercises whose answer is a definite set of bits except for the sign of an exactly
    cancelling sum (an accumulator that starts from its first term instead of from zero may
    give either zero). ``got`` is never modified: zeros are unsigned in copies.
    """
    try:
        got_ = got
        if isinstance(got, (list, tuple)):
            got_ = tuple(
                _unsign_zeros(np.asarray(v, dtype=np.float64)) if isinstance(v, np.ndarray) else _unsign_zeros(v)
                for v in got
            )
        elif isinstance(got, np.ndarray):
            got_ = _unsign_zeros(np.asarray(got, dtype=np.float64)) if got.dtype.kind in "fV" else got
        else:
            got_ = _unsign_zeros(got)
    except Exception:  # a student's odd object: let same_value describe it
        got_ = got
    return same_value(got_, _unsign_zeros(expected))


def close_to(rtol: float) -> Callable[[Any, Any], str | None]:
    """A comparator for one number: equal by :func:`same_value`, or finite and within a relative
    ``rtol`` of a finite, nonzero expected value (0, inf and NaN must match exactly).

    For results that an honest implementation may compute in another order (a norm, a mean), so
    that they differ from the reference in the last few float64 bits; choose ``rtol`` far below
    the error of any plausible wrong answer.
    """
    if not (isinstance(rtol, float) and 0.0 < rtol < 1.0):
        raise ValueError(f"rtol must be a float between 0 and 1, got {rtol!r}")
    close = functools.partial(_close_to, rtol=rtol)  # a partial, not a closure: it pickles
    close.__name__ = f"close_to({rtol:g})"  # type: ignore[attr-defined]
    return close


def _close_to(got: Any, expected: Any, rtol: float) -> str | None:
    reason = same_value(got, expected)
    if reason is None:
        return None
    if _as_scalar(got) is None:  # only a number may be close: float("1.5") would parse a string
        return reason
    try:
        g = float(got)
    except Exception:
        return reason
    e = float(expected)
    if not (math.isfinite(e) and e != 0.0):
        return reason
    if math.isfinite(g) and abs(g - e) <= rtol * abs(e):
        return None
    return f"{reason} (tolerance: relative {rtol:g})"
