"""Floating-point format specifications: bit layouts, derived limits, decode (encode rounds: it lives in rounding).

A format is a frozen :class:`FloatFormat`: exponent bits, mantissa bits, whether it has a sign
bit and how it spends its special codes (:class:`Specials`). Everything else (bias, max,
smallest normal and subnormal, eps, binades) is derived from those fields, so a custom format
such as ``FloatFormat.custom(3, 4)`` gets the same treatment as the named ones in
:data:`FORMATS`.

Values are float64 numpy arrays; raw codes (``bits``) are unsigned integer arrays.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from .validation import enum_member, int_in_range

__all__ = [
    "Specials",
    "FloatFormat",
    "FORMATS",
    "UnknownFormatError",
    "get_format",
    "decode",
    "values_to_bits",
    "fields",
    "describe",
    "all_codes",
    "finite_values",
    "ulp",
    "oracle_dtype",
    "limits_vs_oracles",
]

# Widths this package can emulate exactly with float64 arithmetic. Every value of such a format
# (and every product of two of them) is exactly representable in float64.
MAX_EXP_BITS = 8
MAX_MAN_BITS = 23


class Specials(enum.Enum):
    """How a format spends its special codes.

    IEEE        the all-ones exponent holds +-inf (mantissa 0) and NaNs (fp32, bf16, fp16, e5m2)
    FN          "finite, NaN": no infinities; only the all-ones exponent *and* mantissa code is
                NaN, the rest of that binade holds ordinary values (e4m3fn: max 448, not 240)
    FINITE      no infinities and no NaN: every code is a number (e2m3fn, e3m2fn, e2m1fn)
    POWER_OF_TWO  "fnu": unsigned, no mantissa, no zero; code E means 2**(E - bias) and the
                all-ones code is NaN (the e8m0fnu scale format of OCP microscaling)
    """

    IEEE = "ieee"
    FN = "fn"
    FINITE = "finite"
    POWER_OF_TWO = "power_of_two"


class UnknownFormatError(KeyError, ValueError):
    """Raised for a format name that is not in :data:`FORMATS` and not of the form ``eXmY``."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format.

    Attributes
    ----------
    name: short name used in tables and plots ("bf16", "e4m3fn", ...).
    exp_bits, man_bits: widths of the exponent and (stored) mantissa fields.
    specials: how inf and NaN are encoded, see :class:`Specials`.
    signed: whether there is a sign bit (only e8m0fnu has none).
    ml_dtype: name of the ml_dtypes type with the same values, if there is one (the oracle).
    torch_name: name of the torch dtype, if there is one; :attr:`torch_dtype` is the dtype itself.
    """

    name: str
    exp_bits: int
    man_bits: int
    specials: Specials = Specials.IEEE
    signed: bool = True
    ml_dtype: str | None = None
    torch_name: str | None = None

    def __post_init__(self) -> None:
        exp_bits, man_bits = _validate(self.exp_bits, self.man_bits, self.specials, self.signed)
        object.__setattr__(self, "exp_bits", exp_bits)  # a numpy integer becomes an int
        object.__setattr__(self, "man_bits", man_bits)

    @property
    def torch_dtype(self):
        """The ``torch.dtype`` with this format's values (``torch.bfloat16``, ``torch.float8_e4m3fn``,
        ...), or None when torch has none (or the installed torch lacks it). The course's one map
        from formats to torch dtypes; torch is imported on first use, not with this module."""
        if self.torch_name is None:
            return None
        import torch

        return getattr(torch, self.torch_name, None)

    # ----------------------------------------------------------------- construction
    @classmethod
    def custom(
        cls,
        exp_bits: int,
        man_bits: int,
        specials: Specials | str = Specials.IEEE,
        name: str | None = None,
    ) -> FloatFormat:
        """A signed format with ``exp_bits`` exponent and ``man_bits`` mantissa bits.

        ``specials`` defaults to IEEE (inf and NaN at the all-ones exponent), the convention of
        fp16/bf16 and of ml_dtypes' ``float8_e4m3`` / ``float8_e3m4``.
        """
        specials = _as_specials(specials)
        if name is None:
            suffix = {Specials.IEEE: "", Specials.FN: "fn", Specials.FINITE: "fn"}.get(specials, "")
            name = f"e{exp_bits}m{man_bits}{suffix}"
        return cls(name, exp_bits, man_bits, specials)

    # ----------------------------------------------------------------- layout
    @property
    def bits(self) -> int:
        """Total width in bits."""
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exp_bits - 1) - 1

    @property
    def has_inf(self) -> bool:
        return self.specials is Specials.IEEE

    @property
    def has_nan(self) -> bool:
        return self.specials is not Specials.FINITE

    @property
    def has_subnormals(self) -> bool:
        return self.specials is not Specials.POWER_OF_TWO and self.man_bits > 0

    @property
    def has_zero(self) -> bool:
        return self.specials is not Specials.POWER_OF_TWO

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal number."""
        if self.specials is Specials.POWER_OF_TWO:
            return -self.bias
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite number."""
        top = 2**self.exp_bits - 1 - self.bias  # exponent of the all-ones field
        if self.specials is Specials.IEEE:
            return top - 1
        if self.specials is Specials.POWER_OF_TWO:
            return top - 1  # the all-ones code is NaN
        if self.specials is Specials.FN and self.man_bits == 0:
            return top - 1
        return top

    # ----------------------------------------------------------------- derived limits
    @property
    def max(self) -> float:
        """Largest finite value."""
        m = self.man_bits
        if self.specials is Specials.FN:
            # the all-ones mantissa in the top binade is NaN: the largest mantissa is one less
            frac = (2 ** (m + 1) - 2) / 2**m
        else:
            frac = (2 ** (m + 1) - 1) / 2**m
        return math.ldexp(frac, self.emax)

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @property
    def smallest_subnormal(self) -> float | None:
        """Smallest positive value below the normal range; None if the format has none."""
        if not self.has_subnormals:
            return None
        return math.ldexp(1.0, self.emin - self.man_bits)

    @property
    def smallest_positive(self) -> float:
        s = self.smallest_subnormal
        return self.smallest_normal if s is None else s

    @property
    def eps(self) -> float:
        """Distance from 1.0 to the next larger value, 2**-man_bits."""
        return math.ldexp(1.0, -self.man_bits)

    @property
    def unit_roundoff(self) -> float:
        """u = eps/2: the largest relative error of round-to-nearest in the normal range."""
        return self.eps / 2

    @property
    def precision(self) -> int:
        """Significant bits p, counting the implicit leading bit."""
        return self.man_bits + 1

    @property
    def decimal_digits(self) -> float:
        """Significant decimal digits, p * log10(2)."""
        return self.precision * math.log10(2)

    @property
    def binades(self) -> float:
        """log2(max / smallest positive): how many powers of two the format spans."""
        return math.log2(self.max / self.smallest_positive)

    @property
    def bits_dtype(self) -> np.dtype:
        """Smallest unsigned integer dtype that holds one code."""
        for dt in (np.uint8, np.uint16, np.uint32):
            if self.bits <= np.dtype(dt).itemsize * 8:
                return np.dtype(dt)
        raise AssertionError("formats are at most 32 bits wide")

    def describe_specials(self) -> str:
        """One line saying how inf and NaN are encoded."""
        return {
            Specials.IEEE: "inf: exponent all ones, mantissa 0; NaN: exponent all ones, mantissa != 0",
            Specials.FN: "no inf; NaN: exponent and mantissa all ones; overflow -> NaN",
            Specials.FINITE: "no inf, no NaN; every code is a number; overflow saturates to max",
            Specials.POWER_OF_TWO: "unsigned, no zero, no inf; NaN: all ones (0xFF)",
        }[self.specials]

    def __str__(self) -> str:
        return self.name


def _as_specials(specials: Specials | str) -> Specials:
    return enum_member(Specials, specials, "specials")


def _validate(exp_bits: int, man_bits: int, specials: Specials, signed: bool) -> tuple[int, int]:
    """(exp_bits, man_bits) as ints if they and ``specials`` and ``signed`` make a format this
    package can represent; else an error saying which rule they break."""
    exp_bits = int_in_range("exp_bits", exp_bits, 1, MAX_EXP_BITS, "exponent bits, up to fp32's")
    man_bits = int_in_range("man_bits", man_bits, 0, MAX_MAN_BITS, "mantissa bits, up to fp32's")
    if not isinstance(specials, Specials):
        raise TypeError(f"specials must be a Specials member, got {specials!r}")
    if specials is Specials.POWER_OF_TWO:
        if man_bits != 0 or signed:
            raise ValueError("a POWER_OF_TWO (e8m0fnu-style) format is unsigned with man_bits=0")
        return exp_bits, man_bits
    if not signed:
        raise ValueError("only POWER_OF_TWO formats are unsigned")
    if man_bits == 0:
        raise ValueError(
            "man_bits=0 is only accepted for the unsigned POWER_OF_TWO kind (e8m0fnu); "
            "signed formats need at least one mantissa bit"
        )
    if specials is Specials.IEEE and exp_bits < 2:
        raise ValueError(
            "an IEEE-style format needs exp_bits >= 2: with one exponent bit the all-ones "
            "exponent (reserved for inf/NaN) leaves no normal numbers"
        )
    return exp_bits, man_bits


def _registry() -> Mapping[str, FloatFormat]:
    fmts = [
        FloatFormat("fp32", 8, 23, Specials.IEEE, ml_dtype="float32", torch_name="float32"),
        FloatFormat("tf32", 8, 10, Specials.IEEE),
        FloatFormat("bf16", 8, 7, Specials.IEEE, ml_dtype="bfloat16", torch_name="bfloat16"),
        FloatFormat("fp16", 5, 10, Specials.IEEE, ml_dtype="float16", torch_name="float16"),
        FloatFormat("e4m3fn", 4, 3, Specials.FN, ml_dtype="float8_e4m3fn", torch_name="float8_e4m3fn"),
        FloatFormat("e5m2", 5, 2, Specials.IEEE, ml_dtype="float8_e5m2", torch_name="float8_e5m2"),
        FloatFormat("e2m3fn", 2, 3, Specials.FINITE, ml_dtype="float6_e2m3fn"),
        FloatFormat("e3m2fn", 3, 2, Specials.FINITE, ml_dtype="float6_e3m2fn"),
        FloatFormat("e2m1fn", 2, 1, Specials.FINITE, ml_dtype="float4_e2m1fn"),  # torch: packed pairs only
        FloatFormat(
            "e8m0fnu", 8, 0, Specials.POWER_OF_TWO, signed=False, ml_dtype="float8_e8m0fnu", torch_name="float8_e8m0fnu"
        ),
    ]
    return MappingProxyType({f.name: f for f in fmts})


#: The named formats of the course, in the order the chapters introduce them.
FORMATS: Mapping[str, FloatFormat] = _registry()

_CUSTOM_RE = re.compile(r"^e(\d+)m(\d+)(fn)?$")


def get_format(fmt: FloatFormat | str) -> FloatFormat:
    """Return the spec for a name in :data:`FORMATS`, an ``eXmY`` / ``eXmYfn`` string, or a spec.

    ``"e3m4"`` is a custom IEEE-style format (inf/NaN at the all-ones exponent, like ml_dtypes'
    ``float8_e3m4``); ``"e3m4fn"`` a custom FN one (no inf, NaN at the all-ones code).
    """
    if isinstance(fmt, FloatFormat):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"a format is a FloatFormat or a name such as 'bf16', got {type(fmt).__name__} {fmt!r}")
    key = fmt.strip().lower()
    if key in FORMATS:
        return FORMATS[key]
    m = _CUSTOM_RE.match(key)
    if m:
        specials = Specials.FN if m.group(3) else Specials.IEEE
        return FloatFormat.custom(int(m.group(1)), int(m.group(2)), specials)
    raise UnknownFormatError(
        f"unknown format {fmt!r}; known names: {', '.join(FORMATS)}; "
        "or a custom 'eXmY' (IEEE-style) / 'eXmYfn' (no inf) with X in 1..8 and Y in 0..23"
    )


# ====================================================================== encode / decode


def _as_bits(bits, f: FloatFormat) -> np.ndarray:
    arr = np.asarray(bits)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise TypeError(f"bits must be integer codes (an int or an integer array), got dtype {arr.dtype}")
    a = arr.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= 2**f.bits):
        bad = a[(a < 0) | (a >= 2**f.bits)].ravel()[0]
        raise ValueError(f"code {int(bad)} does not fit in {f.name}: codes are 0 .. {2**f.bits - 1} ({f.bits} bits)")
    return a


class Fields(NamedTuple):
    """The three fields of a code: sign (0/1), biased exponent field, mantissa field."""

    sign: np.ndarray
    exponent: np.ndarray
    mantissa: np.ndarray


def fields(bits, fmt: FloatFormat | str) -> Fields:
    """Split codes into (sign, biased exponent, mantissa) integer fields. Same shape as bits."""
    f = get_format(fmt)
    a = _as_bits(bits, f)
    mant = a & ((1 << f.man_bits) - 1)
    expo = (a >> f.man_bits) & ((1 << f.exp_bits) - 1)
    sign = (a >> (f.exp_bits + f.man_bits)) & 1 if f.signed else np.zeros_like(a)
    return Fields(sign, expo, mant)


def decode(bits, fmt: FloatFormat | str) -> np.ndarray:
    """Value of each code, as float64 (NaN codes give NaN). Same shape as ``bits``."""
    f = get_format(fmt)
    sign, expo, mant = fields(bits, f)
    all_ones = (1 << f.exp_bits) - 1
    if f.specials is Specials.POWER_OF_TWO:
        val = np.ldexp(1.0, expo - f.bias)
        return np.where(expo == all_ones, np.nan, val)
    normal = expo > 0
    # normal: (2**m + M) * 2**(E - bias - m); subnormal (E == 0): M * 2**(emin - m)
    sig = np.where(normal, mant + (1 << f.man_bits), mant).astype(np.float64)
    e = np.where(normal, expo - f.bias, f.emin) - f.man_bits
    val = np.ldexp(sig, e)
    if f.specials is Specials.IEEE:
        top = expo == all_ones
        val = np.where(top & (mant == 0), np.inf, val)
        val = np.where(top & (mant != 0), np.nan, val)
    elif f.specials is Specials.FN:
        val = np.where((expo == all_ones) & (mant == (1 << f.man_bits) - 1), np.nan, val)
    val = np.where(sign == 1, -val, val)
    return val.astype(np.float64)


def values_to_bits(r: np.ndarray, f: FloatFormat, neg_in: np.ndarray) -> np.ndarray:
    """Codes (in ``f.bits_dtype``, shape of ``r``) of values ``r`` already on the grid of ``f``
    (the encoder behind ``rounding.encode``); ``neg_in`` is the sign a NaN keeps, that of the
    input it came from."""
    nan = np.isnan(r)
    if nan.any() and not f.has_nan:
        raise ValueError(f"{f.name} has no NaN encoding; the input holds NaN")
    mag = np.abs(np.where(nan, 0.0, r))
    out = np.zeros(r.shape, dtype=np.int64)
    if f.specials is Specials.POWER_OF_TWO:
        # every finite value is 2**k exactly: frexp gives mantissa 0.5 and exponent k + 1
        _, ex = np.frexp(np.where(mag > 0, mag, 1.0))
        out = (ex - 1 + f.bias).astype(np.int64)
        out[nan] = (1 << f.exp_bits) - 1
        return out.astype(f.bits_dtype)
    inf = np.isinf(mag)
    finite = ~inf
    m = f.man_bits
    mfin = np.where(finite, mag, 0.0)
    _, ex = np.frexp(mfin)  # mfin = frac * 2**ex with frac in [0.5, 1)
    e_unb = ex - 1  # floor(log2(mfin)) for mfin > 0
    normal = (mfin >= f.smallest_normal) & finite
    expo = np.where(normal, e_unb + f.bias, 0)
    scale_e = np.where(normal, e_unb, f.emin) - m
    sig = np.ldexp(mfin, -scale_e)  # exact integer-valued
    mant = np.where(normal, sig - (1 << m), sig).astype(np.int64)
    out = (expo.astype(np.int64) << m) | mant
    all_ones = (1 << f.exp_bits) - 1
    if f.has_inf:
        out = np.where(inf, all_ones << m, out)
    if nan.any():
        if f.specials is Specials.IEEE:
            qnan = (all_ones << m) | (1 << (m - 1))
        else:  # FN: the single all-ones code
            qnan = (all_ones << m) | ((1 << m) - 1)
        out = np.where(nan, qnan, out)
    neg = np.where(nan, neg_in, np.signbit(r))
    out = np.where(neg, out | (1 << (f.exp_bits + m)), out)
    return out.astype(f.bits_dtype)


def all_codes(fmt: FloatFormat | str) -> np.ndarray:
    """Every code of a format of at most 16 bits, in increasing code order."""
    f = get_format(fmt)
    if f.bits > 16:
        raise ValueError(f"{f.name} has {f.bits} bits; all_codes enumerates formats of at most 16 bits")
    return np.arange(2**f.bits, dtype=np.int64).astype(f.bits_dtype)


def finite_values(fmt: FloatFormat | str, nonnegative: bool = False) -> np.ndarray:
    """Sorted distinct finite values of a format of at most 16 bits (float64)."""
    v = decode(all_codes(fmt), fmt)
    v = np.unique(v[np.isfinite(v)]) + 0.0  # unique merges +0 and -0; + 0.0 makes it +0
    return v[v >= 0] if nonnegative else v


def ulp(x, fmt: FloatFormat | str) -> np.ndarray:
    """Spacing of ``fmt``'s grid at |x|: the gap from |x|'s binade start to the next value.

    For |x| below the smallest normal this is the subnormal spacing. x is taken as it is (not
    rounded first); NaN/inf give NaN.
    """
    f = get_format(fmt)
    a = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        pos = np.isfinite(a) & (a > 0)
        _, ex = np.frexp(np.where(pos, a, 1.0))
        e = np.maximum(np.where(pos, ex - 1, f.emin), f.emin)  # zero: the subnormal spacing
        out = np.ldexp(1.0, e - f.man_bits)
    return np.where(np.isfinite(a), out, np.nan)


def describe(bits: int, fmt: FloatFormat | str) -> str:
    """Explain one code field by field, e.g. for bf16 0x4049:

    ``0 10000000 1001001 -> +1 x 2^(128-127) x (1 + 73/128) = 3.140625``
    """
    f = get_format(fmt)
    code = int(_as_bits(int(bits), f))
    s, e, m = (int(v) for v in fields(code, f))
    val = float(decode(code, f))
    parts = []
    if f.signed:
        parts.append(str(s))
    parts.append(format(e, f"0{f.exp_bits}b"))
    if f.man_bits:
        parts.append(format(m, f"0{f.man_bits}b"))
    layout = " ".join(parts)
    sign = "-" if s else "+"
    if math.isnan(val):
        why = "NaN"
    elif math.isinf(val):
        why = f"{sign}inf"
    elif f.specials is Specials.POWER_OF_TWO:
        why = f"2^({e}-{f.bias}) = {val!r}"
    elif e == 0:
        why = f"{sign}1 x 2^({f.emin}) x ({m}/{2**f.man_bits}) = {val!r}  (subnormal)"
    else:
        why = f"{sign}1 x 2^({e}-{f.bias}) x (1 + {m}/{2**f.man_bits}) = {val!r}"
    return f"{f.name} {layout} -> {why}"


# ====================================================================== outside oracles


def oracle_dtype(fmt: FloatFormat | str):
    """The numpy/ml_dtypes dtype holding the same values as ``fmt``, or None (tf32, custom)."""
    f = get_format(fmt)
    if f.ml_dtype is None:
        return None
    if f.ml_dtype in ("float16", "float32"):
        return np.dtype(getattr(np, f.ml_dtype))
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, f.ml_dtype))


def limits_vs_oracles(fmt: FloatFormat | str) -> dict:
    """Our derived limits next to ml_dtypes.finfo and torch.finfo (where each exists).

    Returns {"format", "ours": {...}, "ml_dtypes": {...} or None, "torch": {...} or None,
    "match": bool}: match is True when every oracle that exists agrees on max, smallest_normal,
    smallest_subnormal (where defined) and eps (where defined).
    """
    f = get_format(fmt)
    keys = ("max", "smallest_normal", "smallest_subnormal", "eps")
    ours = {
        "max": f.max,
        "smallest_normal": f.smallest_normal,
        "smallest_subnormal": f.smallest_subnormal,
        "eps": f.eps if f.man_bits else None,
    }
    found: dict = {"format": f.name, "ours": ours, "ml_dtypes": None, "torch": None}
    dt = oracle_dtype(f)
    if dt is not None:
        import ml_dtypes

        fi = ml_dtypes.finfo(dt) if dt.kind == "V" or dt.name not in ("float16", "float32") else np.finfo(dt)
        found["ml_dtypes"] = {k: float(getattr(fi, k)) for k in keys}
    if f.torch_name is not None:
        try:
            tdt = f.torch_dtype
            import torch

            ti = torch.finfo(tdt) if tdt is not None else None
            if ti is not None:
                found["torch"] = {
                    "max": float(ti.max),
                    "smallest_normal": float(ti.smallest_normal),
                    "smallest_subnormal": None,
                    "eps": float(ti.eps),
                }
        except Exception:  # torch missing, or a dtype its finfo does not describe
            found["torch"] = None
    match = True
    for src in ("ml_dtypes", "torch"):
        other = found[src]
        if other is None:
            continue
        for k in keys:
            if ours[k] is not None and other[k] is not None and ours[k] != other[k]:
                match = False
    found["match"] = match
    return found
