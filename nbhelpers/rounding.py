"""Rounding real numbers onto the grid of a floating-point format.

:func:`round_to` is the workhorse of the course: it takes any real array and returns float64
values that lie exactly on the grid of a format (``FORMATS["bf16"]``, a custom ``e3m4``, ...).

How it works (all exact in float64, vectorised, processed in cache-sized chunks):

1. the exponent of each |x| is read from the float64 bit pattern and clamped below at the
   format's ``emin``: values below the normal range share the subnormal spacing;
2. the spacing (quantum) of the grid there is ``q = 2**(e - man_bits)``; ``|x| / q`` is exact
   because q is a power of two;
3. that ratio is rounded to an integer (ties to even, toward zero, or stochastically), and
   multiplied back by q;
4. results above ``max`` take the format's overflow value (inf, NaN, or max) unless
   ``saturate`` says otherwise.

bf16 with nearest-even (the rounding of every emulated sum and GEMM) takes a shortcut for
float32 and float64 input; both round once, like the steps above (see the bf16 fast paths below).

:func:`round_to_ref` is a slow, obviously-correct reference that searches the enumerated grid of
a small format; the tests hold the fast path against it and against ml_dtypes casts.
"""

from __future__ import annotations

import enum
import math
from numbers import Real

import numpy as np

from .formats import FloatFormat, Specials, finite_values, get_format, ulp, values_to_bits
from .validation import enum_member, stochastic_rng

__all__ = [
    "Rounding",
    "as_rounding",
    "round_to",
    "round_to_ref",
    "encode",
    "absorption_threshold",
    "update_threshold",
    "vanishing_ratio_band",
]

_CHUNK = 1 << 15  # elements per chunk: a few float64 buffers of this size fit in L2


class Rounding(enum.Enum):
    """Rounding modes.

    NEAREST_EVEN  to the nearest value; a tie goes to the one with an even last mantissa bit
                  (IEEE 754's default, what casts do)
    NEAREST_AWAY  to the nearest value; a tie goes away from zero (what the fp32 -> tf32
                  conversion on NVIDIA GPUs does, cvt.rna)
    TOWARD_ZERO   drop the bits that do not fit (truncation)
    STOCHASTIC    up with probability equal to the distance from the lower neighbour in units
                  of the spacing, so that the expected result equals x
    """

    NEAREST_EVEN = "nearest_even"
    NEAREST_AWAY = "nearest_away"
    TOWARD_ZERO = "toward_zero"
    STOCHASTIC = "stochastic"


def as_rounding(rounding: Rounding | str) -> Rounding:
    """The :class:`Rounding` a mode or its name (``"nearest_even"``) stands for; an unknown name
    raises ValueError listing the modes."""
    return enum_member(Rounding, rounding, "rounding")


def _as_float64(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        arr = x
    else:
        if isinstance(x, (str, bytes)):
            raise TypeError(f"round_to expects numbers, got the string {x!r}")
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"round_to expects a number or an array of numbers: {exc}") from None
    if arr.dtype == np.float64 or arr.dtype == np.float32 or arr.dtype == np.float16:
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.float64)
    if (
        arr.dtype.kind == "V"
        or arr.dtype.name
        in (
            "bfloat16",
            "float8_e4m3fn",
            "float8_e5m2",
            "float8_e4m3",
            "float8_e3m4",
            "float6_e2m3fn",
            "float6_e3m2fn",
            "float4_e2m1fn",
            "float8_e8m0fnu",
        )
        or arr.dtype.kind == "f"
    ):
        try:
            return arr.astype(np.float64)
        except (TypeError, ValueError):
            pass
    if arr.dtype.kind == "c":
        raise TypeError("round_to expects real numbers, got a complex array")
    raise TypeError(f"round_to expects real numbers (int or float, scalar or array), got dtype {arr.dtype}")


def round_to(
    x,
    fmt: FloatFormat | str,
    rounding: Rounding | str = "nearest_even",
    rng: np.random.Generator | None = None,
    saturate: bool | None = None,
    dtype=None,
) -> np.ndarray:
    """Round ``x`` onto the grid of ``fmt``; returns float64 (or ``dtype``) of the same shape.

    Parameters
    ----------
    x: real scalar or array (float16/32/64, ints, or an ml_dtypes array).
    fmt: a :class:`FloatFormat` or a name (``"bf16"``, ``"e4m3fn"``, ``"e3m4"``...).
    rounding: ``"nearest_even"`` (default), ``"nearest_away"``, ``"toward_zero"`` or
        ``"stochastic"`` (which needs ``rng``, a ``numpy.random.Generator``).
    saturate: what happens to a value beyond the largest finite one.
        None (default): what the format defines: IEEE formats go to inf; FN formats (e4m3fn)
        to NaN; formats with neither (e2m1fn) saturate to max; e8m0fnu to NaN.
        True: finite overflow and +-inf clamp to +-max (NaN stays NaN).
        False: like None, except that formats without inf/NaN cannot do anything but saturate.
        Toward-zero rounding never rounds a finite value up, so it lands on +-max (IEEE 754).
    dtype: the result's dtype: None or float64 (default), or float32: the same values (every
        format here is at most fp32 wide, so its values are float32 values), half the bytes.
        float32 input to bf16 with nearest-even and a float32 result is then one library cast
        there and back (ml_dtypes rounds float32 to bf16 once, ties to even: tested).

    NaN stays NaN (also for formats without a NaN code, where there is no right answer: ml_dtypes
    0.5 to 0.7 turns NaN into -0 and -NaN into +0, this function keeps it visible). For e8m0fnu
    (positive powers of two only) zero and negative inputs give NaN and values below 2**-127 round
    up to 2**-127, as ml_dtypes 0.7.0 does (up to 0.6 it rounds float32 subnormals in
    (2**-127, 2**-126) up to 2**-126, and float64 input goes through float32 first); with no
    mantissa bits a tie has no even neighbour and goes up in magnitude (as in ml_dtypes 0.5.1 to
    0.7; 0.5.0 takes the even exponent code).
    """
    f = get_format(fmt)
    mode = _ROUNDING_BY_NAME.get(rounding) if type(rounding) is str else None
    if mode is None:
        mode = as_rounding(rounding)
    if mode is Rounding.STOCHASTIC:
        stochastic_rng(rng)
    if saturate is not None and not isinstance(saturate, (bool, np.bool_)):
        raise TypeError(f"saturate must be None, True or False, got {saturate!r}")
    out_dtype = _FLOAT64 if dtype is None else _result_dtype(dtype)
    if type(x) in _PLAIN_SCALARS and mode is not Rounding.STOCHASTIC and f.specials is not Specials.POWER_OF_TWO:
        if type(x) is not int or -_INT_EXACT <= x <= _INT_EXACT:
            return out_dtype.type(_round_scalar(float(x), _grid_bounds(f), mode, saturate, f))
    scalar = isinstance(x, Real) and not isinstance(x, np.ndarray)
    arr = _as_float64(x)
    fast = _fast_kernel(f, mode, saturate, arr.dtype)
    if out_dtype == np.float32 and fast is _round_bf16_from_f32_chunk:
        out = _bf16_from_f32_whole(arr)
    else:
        out = np.empty(arr.shape, dtype=np.float64)
        flat_in = arr.reshape(-1)
        flat_out = out.reshape(-1)
        if fast is not None:
            _run_chunks(fast, flat_in, flat_out, f, mode, rng, saturate)
        else:
            _round_generic(flat_in, flat_out, f, mode, rng, saturate)
        if out_dtype == np.float32:
            out = out.astype(np.float32)  # exact: every value of the format is a float32 value
    if scalar:
        return out.reshape(())[()]  # numpy scalar
    return out


#: Scalars :func:`round_to` rounds in plain Python (:func:`_round_scalar`): a float64 copy of each
#: is exact (ints only within +-2**53). The references call it one number at a time, where the
#: array path's set-up costs a hundred times the arithmetic.
_PLAIN_SCALARS = frozenset({float, int, np.float64, np.float32, np.float16})
_INT_EXACT = 2**53
_FLOAT64 = np.dtype(np.float64)
_ROUNDING_BY_NAME = {m.value: m for m in Rounding}
_GRID_BOUNDS: dict[FloatFormat, tuple[int, int, int, float]] = {}


def _grid_bounds(f: FloatFormat) -> tuple[int, int, int, float]:
    """(emin, emax, man_bits, max) of ``f``, worked out once per format."""
    b = _GRID_BOUNDS.get(f)
    if b is None:
        b = _GRID_BOUNDS[f] = (f.emin, f.emax, f.man_bits, f.max)
    return b


def _round_scalar(v: float, bounds: tuple[int, int, int, float], mode: Rounding, saturate, f: FloatFormat) -> float:
    """One float64 value rounded as :func:`_round_chunk` rounds it (nearest-even, nearest-away or
    toward zero; formats other than e8m0fnu): the same steps, in Python floats. ``bounds``:
    :func:`_grid_bounds` of ``f``."""
    if v != v:
        return v  # NaN stays NaN, with its sign
    emin, emax, man_bits, top = bounds
    a = abs(v)
    if a == math.inf:
        r = a
    else:
        # the exponent of a's binade, clamped to [emin, emax + 1] as the array path clamps it
        e = min(max(math.frexp(a)[1] - 1, emin), emax + 1) if a else emin
        q = math.ldexp(1.0, e - man_bits)
        y = a / q  # exact: a power-of-two scaling into [0, 2**(man_bits + 1)] (or beyond, past max)
        if y == math.inf:  # far beyond max: |x| / q overflows float64, as it does in the array path
            pass
        elif mode is Rounding.NEAREST_EVEN:
            y = float(round(y))  # Python's round: ties to even
        elif mode is Rounding.TOWARD_ZERO:
            y = float(math.trunc(y))
        else:
            fl = math.floor(y)
            y = float(fl + (y - fl >= 0.5))
        r = y * q
    if r > top:
        if mode is Rounding.TOWARD_ZERO and (saturate or a != math.inf):
            r = top  # never rounds up: a finite value lands on max
        else:
            r = _overflow_value(f, saturate)
    return math.copysign(r, v)


def _result_dtype(dtype) -> np.dtype:
    if dtype is None:
        return np.dtype(np.float64)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt == np.float64:
        return dt
    if dt == np.float32:  # exact: formats are at most fp32 wide (get_format caps both widths)
        return dt
    raise ValueError(f"dtype must be None, float64 or float32, got {dtype!r}")


def _bf16_from_f32_whole(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 (nearest-even, once) -> float32, in two library casts."""
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def _round_generic(flat_in, flat_out, f: FloatFormat, mode: Rounding, rng, saturate) -> None:
    """The general path, any format and mode: 1-D ``flat_in`` rounded into float64 ``flat_out``."""
    if f.specials is Specials.POWER_OF_TWO:
        kernel = _round_power_of_two_chunk
    else:
        kernel = _round_chunk
    _run_chunks(kernel, flat_in, flat_out, f, mode, rng, saturate)


def _run_chunks(kernel, flat_in, flat_out, f, mode, rng, saturate) -> None:
    n = flat_in.size
    ws = _Workspace(min(n, _CHUNK))
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf on inf input; handled below
        for start in range(0, n, _CHUNK):
            stop = min(start + _CHUNK, n)
            kernel(flat_in[start:stop], flat_out[start:stop], f, mode, rng, saturate, ws)


# ------------------------------------------------------------------ fast paths for bf16
#
# Every emulated sum and GEMM of the course rounds to bf16 at each step, so bf16 with
# nearest-even (and the format's own overflow to inf) gets two shortcuts. Both round ONCE:
# - float32 input: ml_dtypes' float32 -> bfloat16 cast (a single rounding, ties to even);
# - float64 input: ties-to-even on the float64 bit pattern. ml_dtypes is not used here: up to
#   0.6 its float64 -> bfloat16 cast goes through float32 and rounds twice (1 + 2**-8 + 2**-40
#   becomes 1.0 instead of 1 + 2**-7); 0.7.0 rounds once. The result must not hang on the version.
# Values the bit trick does not cover (bf16 subnormals, overflow, inf, NaN) go through the
# general kernel; tests hold both shortcuts bit-exactly against round_to_ref and _round_generic.

_F64_DROP = 52 - 7  # float64 mantissa bits below bf16's 7
_F64_KEEP = np.uint64(((1 << 64) - 1) ^ ((1 << _F64_DROP) - 1))  # sign, exponent, top 7 mantissa bits
_F64_HALF = np.uint64((1 << (_F64_DROP - 1)) - 1)  # half a bf16 quantum, minus one: + last kept bit = ties to even
_BF16_MIN_NORMAL = 2.0**-126
_BF16_OVERFLOW = 2.0**128 - 2.0**119  # max + half a quantum: from here on the result is inf


def _is_bf16(f: FloatFormat) -> bool:
    return f.exp_bits == 8 and f.man_bits == 7 and f.specials is Specials.IEEE and f.signed


def _fast_kernel(f: FloatFormat, mode: Rounding, saturate, dtype):
    """The bf16 shortcut for this call, or None (then the general kernel runs). saturate=False
    means the same as None for bf16 (it has an infinity); saturate=True is left to the kernel."""
    if mode is not Rounding.NEAREST_EVEN or saturate or not _is_bf16(f):
        return None
    if dtype == np.float32:
        return _round_bf16_from_f32_chunk
    if dtype == np.float64:
        return _round_bf16_from_f64_chunk
    return None


def _round_bf16_from_f32_chunk(x, out, f, mode, rng, saturate, ws: _Workspace) -> None:
    np.copyto(ws.bf16[: x.size], x, casting="unsafe")  # one rounding, ties to even (tested)
    np.copyto(out, ws.bf16[: x.size])  # bf16 -> float64 is exact


def _round_bf16_from_f64_chunk(x, out, f, mode, rng, saturate, ws: _Workspace) -> None:
    n = x.size
    a, _, _, _, flag = ws.take(n)
    u = x.view(np.uint64)
    r = out.view(np.uint64)
    t = ws.u[:n]
    np.right_shift(u, _F64_DROP, out=t)
    np.bitwise_and(t, np.uint64(1), out=t)  # the last kept bit: a tie rounds up only when it is 1
    np.add(t, _F64_HALF, out=t)
    np.add(t, u, out=t)  # a carry out of the mantissa moves to the next binade, as it should
    np.bitwise_and(t, _F64_KEEP, out=r)
    # right for zeros and for |x| in [2**-126, overflow threshold); the rest is rare: redo it
    np.abs(x, out=a)
    if not (a.max() < _BF16_OVERFLOW and a.min() >= _BF16_MIN_NORMAL):  # NaN fails both
        np.less(a, _BF16_MIN_NORMAL, out=flag)
        np.logical_and(flag, a != 0, out=flag)
        np.logical_or(flag, ~(a < _BF16_OVERFLOW), out=flag)
        idx = np.flatnonzero(flag)
        if idx.size:
            fixed = np.empty(idx.size, np.float64)
            _round_chunk(x[idx], fixed, f, mode, rng, saturate, _Workspace(idx.size))
            out[idx] = fixed


class _Workspace:
    """Reusable chunk buffers, so the hot loop allocates nothing."""

    def __init__(self, n: int):
        self.a = np.empty(n, np.float64)
        self.q = np.empty(n, np.float64)
        self.y = np.empty(n, np.float64)
        self.i = np.empty(n, np.int64)
        self.b = np.empty(n, np.bool_)
        self.u = self.i.view(np.uint64)
        self._bf16 = None

    @property
    def bf16(self) -> np.ndarray:
        if self._bf16 is None:
            import ml_dtypes

            self._bf16 = np.empty(self.a.size, ml_dtypes.bfloat16)
        return self._bf16

    def take(self, n: int):
        return self.a[:n], self.q[:n], self.y[:n], self.i[:n], self.b[:n]


def _round_chunk(x, out, f: FloatFormat, mode: Rounding, rng, saturate, ws: _Workspace) -> None:
    n = x.size
    a, q, y, ie, flag = ws.take(n)
    m = f.man_bits
    np.abs(x, out=a)  # (casts float32 input to float64 here, exactly)
    # biased float64 exponent of |x|; 0 for zeros and float64 subnormals, 2047 for inf/NaN
    np.right_shift(a.view(np.int64), 52, out=ie)
    # unbiased exponent clamped to [emin, emax + 1]: below emin the spacing is the subnormal
    # one; the upper clamp only keeps the bit tricks in range (anything that high overflows)
    np.clip(ie, f.emin + 1023, f.emax + 1 + 1023, out=ie)
    # 1/q = 2**(m - e) and q = 2**(e - m), built directly as float64 bit patterns
    np.subtract(2046 + m, ie, out=ie)  # biased exponent of 1/q: (m - (ie - 1023)) + 1023
    np.left_shift(ie, 52, out=ie)
    np.multiply(a, ie.view(np.float64), out=y)  # y = |x| / q, exact
    np.right_shift(ie, 52, out=ie)
    np.subtract(2046, ie, out=ie)  # biased exponent of q: (e - m) + 1023
    np.left_shift(ie, 52, out=ie)
    if mode is Rounding.NEAREST_EVEN:
        np.rint(y, out=y)
    elif mode is Rounding.TOWARD_ZERO:
        np.trunc(y, out=y)
    elif mode is Rounding.NEAREST_AWAY:
        np.floor(y, out=a)
        np.subtract(y, a, out=y)  # fractional part, exact
        np.greater_equal(y, 0.5, out=flag)
        np.add(a, flag, out=y)
    else:  # stochastic: up with probability frac(y), compared exactly
        u = rng.random(n)
        np.floor(y, out=a)
        np.subtract(y, a, out=y)  # frac, exact
        np.less(u, y, out=flag)
        np.add(a, flag, out=y)
    np.multiply(y, ie.view(np.float64), out=a)  # magnitude on the grid (or beyond max)
    # overflow: the magnitude rounded past max (or x was inf)
    np.greater(a, f.max, out=flag)
    if flag.any():
        if mode is Rounding.TOWARD_ZERO:
            # never rounds up: a finite x lands on max; inf becomes what the format makes of inf
            inf_in = np.isinf(x)  # not y: |x| / q overflows to inf for a finite x far past max
            np.putmask(a, flag, f.max)
            if not saturate:
                np.putmask(a, inf_in, _overflow_value(f, saturate))
        else:
            np.putmask(a, flag, _overflow_value(f, saturate))
    np.copysign(a, x, out=out)


def _overflow_value(f: FloatFormat, saturate) -> float:
    if saturate:
        return f.max
    if f.specials is Specials.IEEE:
        return np.inf
    if f.specials in (Specials.FN, Specials.POWER_OF_TWO):
        return np.nan
    return f.max  # FINITE formats have nothing else


def _round_power_of_two_chunk(x, out, f, mode, rng, saturate, ws) -> None:
    """Unsigned powers of two 2**emin .. 2**emax (e8m0fnu)."""
    xx = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        bad = ~(xx > 0)  # zero, negative, NaN
        a = np.where(bad, 1.0, xx)
        frac, ex = np.frexp(a)  # a = frac * 2**ex, frac in [0.5, 1)
        lo = np.ldexp(1.0, ex - 1)  # power of two at or below a
        if mode is Rounding.TOWARD_ZERO:
            r = lo
        elif mode is Rounding.STOCHASTIC:
            u = rng.random(xx.size)
            r = np.where(u < (a - lo) / lo, 2 * lo, lo)  # hi - lo == lo
        else:  # both nearest modes: the tie at 1.5 * 2**k goes up (no even neighbour)
            r = np.where(frac >= 0.75, 2 * lo, lo)
        r = np.where(np.isinf(xx), np.inf, r)
        r = np.maximum(r, f.smallest_normal)  # no zero: tiny values land on 2**emin
        over = r > f.max
        if mode is Rounding.TOWARD_ZERO:
            r = np.where(over & np.isfinite(xx), f.max, r)
            over = r > f.max
        r = np.where(over, f.max if saturate else np.nan, r)
        r = np.where(bad, np.nan, r)
    out[...] = r


def round_to_ref(
    x,
    fmt: FloatFormat | str,
    rounding: Rounding | str = "nearest_even",
    u=None,
    saturate: bool | None = None,
) -> np.ndarray:
    """Slow reference for :func:`round_to` by search over the enumerated grid (formats <= 16 bits).

    Finds the two grid neighbours of each x with ``searchsorted`` and picks one by the rule.
    ``u`` (uniform [0, 1) numbers, one per element) replaces the generator for stochastic
    rounding so that the two implementations can be fed the same randomness. Special values follow
    the same conventions as :func:`round_to` (documented there).
    """
    f = get_format(fmt)
    mode = as_rounding(rounding)
    xs = np.asarray(x, dtype=np.float64)
    grid = finite_values(f, nonnegative=True)  # ascending, includes 0 unless e8m0fnu
    top = grid[-1]
    # the next grid value after max, as if the exponent range went on (for ties at the top): max
    # plus the spacing of max's binade, 2**(floor(log2 max) - man_bits). Not max plus the last
    # gap of the grid: in an fn format with one mantissa bit the top binade holds max alone (its
    # other code is NaN), and the last gap is the binade below's, half as wide.
    beyond = top + math.ldexp(1.0, math.frexp(top)[1] - 1 - f.man_bits)
    g = np.append(grid, beyond)
    out = np.empty(xs.shape, np.float64)
    flat_u = None if u is None else np.asarray(u, dtype=np.float64).reshape(-1)
    for idx, v in enumerate(xs.reshape(-1)):
        if np.isnan(v):
            out.flat[idx] = np.nan
            continue
        if f.specials is Specials.POWER_OF_TWO and not v > 0:
            out.flat[idx] = np.nan
            continue
        a = abs(v)
        if np.isinf(a):
            r = np.inf  # resolved by the overflow rule below
        else:
            k = np.searchsorted(g, a, side="right") - 1  # g[k] <= a < g[k+1]
            if k < 0:  # below the smallest value of a format without zero
                lo, hi = 0.0, g[0]
            elif k >= len(g) - 1:
                lo, hi = g[-1], 2 * g[-1]
            else:
                lo, hi = g[k], g[k + 1]
            if a == lo:
                r = lo
            elif mode is Rounding.TOWARD_ZERO:
                r = lo
            elif mode is Rounding.STOCHASTIC:
                if flat_u is None:
                    raise ValueError("stochastic rounding in the reference needs u")
                r = hi if flat_u[idx] < (a - lo) / (hi - lo) else lo
            else:
                d_lo, d_hi = a - lo, hi - a
                if d_lo < d_hi:
                    r = lo
                elif d_hi < d_lo:
                    r = hi
                elif mode is Rounding.NEAREST_AWAY or f.specials is Specials.POWER_OF_TWO:
                    r = hi
                else:
                    r = lo if _even_code(lo, f, g) else hi
            if f.specials is Specials.POWER_OF_TWO and r == 0.0:
                r = g[0]
            if mode is Rounding.TOWARD_ZERO and r > top:
                r = top
        if r > top:
            if saturate or f.specials is Specials.FINITE:
                r = top
            elif f.specials is Specials.IEEE:
                r = np.inf
            else:
                r = np.nan
        out.flat[idx] = np.copysign(r, v) if f.signed else r
    return out


def _even_code(value: float, f: FloatFormat, grid: np.ndarray) -> bool:
    """Whether ``value`` (a grid point, or the one just past max) has an even last mantissa bit."""
    # position in the nonnegative grid equals the code for IEEE-ordered formats; the point past
    # max continues the sequence, so its parity follows the same count
    k = int(np.searchsorted(grid, value))
    return k % 2 == 0


def encode(x, fmt: FloatFormat | str, rounding="nearest_even", rng=None, saturate=None) -> np.ndarray:
    """Round ``x`` to ``fmt`` (see :func:`round_to`) and return the codes (``fmt.bits_dtype``).

    NaN becomes the format's canonical quiet NaN code with the input's sign (as ml_dtypes 0.5 to
    0.7 does); a format without NaN (e2m1fn, ...) raises ValueError on NaN input instead of
    inventing a code.
    """
    f = get_format(fmt)
    x_arr = np.asarray(x, dtype=np.float64) if not isinstance(x, np.ndarray) else x
    r = np.asarray(round_to(x_arr, f, rounding=rounding, rng=rng, saturate=saturate))
    return values_to_bits(r, f, np.signbit(np.asarray(x_arr, dtype=np.float64)))


def absorption_threshold(fmt: FloatFormat | str, addend: float = 1.0) -> float:
    """Smallest positive value x of ``fmt`` with round_to(x + addend) == x (nearest-even).

    From there on, adding ``addend`` changes nothing: the sum of ones stalls there (chapter 02).
    Found by trying every positive value of the format (formats of at most 16 bits), so it is a
    search, not a formula; returns inf if no value of the format absorbs ``addend``.
    """
    f = get_format(fmt)
    v = finite_values(f, nonnegative=True)
    v = v[v > 0]
    absorbed = round_to(v + addend, f) == v  # v + addend is exact in float64 for these formats
    return float(v[np.argmax(absorbed)]) if absorbed.any() else float("inf")


def update_threshold(w, fmt: FloatFormat | str) -> np.ndarray:
    """Half the spacing above |w| in ``fmt``: a smaller update of |w| (away from zero) is lost.

    w is taken as a value of the format (round it first). An update of exactly this size is a
    tie: it survives only if it lands on the neighbour with the even last bit. The weight-update
    side of :func:`absorption_threshold`'s question (chapter 04).
    """
    return ulp(w, fmt) / 2


def vanishing_ratio_band(fmt: FloatFormat | str) -> tuple[float, float]:
    """(lowest, highest) ratio |w| / |u| beyond which an update u of a normal weight w is lost.

    For every value w of the binade [1, 2) (every normal binade behaves the same) and both
    directions, the update is lost once it is smaller than half the gap to the neighbour it
    moves toward; the ratio is w over that half gap. The lowest ratio, 2**(m+1), is w = 1 moving
    up; the highest, 2**(m+2), is w = 1 moving down (the gap below a power of two is half as
    wide). Formats of at most 16 bits (the grid is enumerated).
    """
    v = finite_values(fmt, nonnegative=True)
    i = np.nonzero((v >= 1.0) & (v < 2.0))[0]
    up = v[i] / ((v[i + 1] - v[i]) / 2)
    down = v[i] / ((v[i] - v[i - 1]) / 2)
    r = np.concatenate([up, down])
    return float(r.min()), float(r.max())
