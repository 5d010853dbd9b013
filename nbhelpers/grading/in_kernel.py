"""The code that runs inside the student's kernel, and the value codec both sides share.

This module is sent whole, as source text, into the student's kernel (see
:func:`nbhelpers.grading.worker.grading_cell`) and executed there in a fresh namespace, where
:func:`kernel_main` calls the notebook's functions on the case inputs. The grader imports the
same module to encode those inputs (:func:`encode`) and to decode what the kernel returned
(:func:`decode`). Hence its rules: it imports only the standard library and numpy (and
ml_dtypes, a dependency of numpy's low-precision dtypes, when it is there), and from the
course's package only :mod:`nbhelpers.call_watch` (standard library only itself), whose source
replaces the one line that imports it; and it never calls anything it is handed except the student's
own function and the methods a value's conversion needs (``__float__``, ``__index__``,
``__array__``).

The wire format: plain data both ways, no pickles, no code. An encoded value is JSON: null,
true/false, ints below 2**63, finite floats (not -0.0), strings and lists stand for themselves;
everything else is a one-key object::

    {"$float": "nan" | "inf" | "-inf" | "-0.0"}   {"$int": "0x..."}   {"$complex": [re, im]}
    {"$tuple": [...]}   {"$dict": [[k, v], ...]}   {"$set": [...]}   {"$frozenset": [...]}
    {"$bytes": base64}   {"$np": [dtype, base64]}   {"$nd": [dtype, shape, base64]}
    {"$nd_str": [dtype, shape, [...]]}   {"$nd_obj": [shape, [...]]}
    {"$rng": [bit generator name, state]}   {"$enum": [module, class, member]}
    {"$dc": [module, class, {field: value}]}   {"$opaque": [type name, repr]}

dtype is numpy's dtype.str ("<f8", "|b1") or an ml_dtypes name ("bfloat16"). "$opaque" stands
for a value that cannot be sent as data (a student's own class); the grader decodes it to a
stand-in object that equals nothing.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import enum
import functools
import importlib
import json
import math
import operator
import os
import re
import signal
import threading
import time
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    import ml_dtypes
except Exception:  # pragma: no cover - ml_dtypes is a dependency
    ml_dtypes = None
if not isinstance(getattr(ml_dtypes, "bfloat16", None), type):  # a tools kernel's stand-in
    ml_dtypes = None

# Sent into the kernel, this line becomes nbhelpers.call_watch's source (worker.kernel_source).
from ..call_watch import READ_FINDINGS, CallWatch, in_profile_hook

LIMITS = {
    "max_depth": 40,  # nesting of tuples, lists, dicts
    "max_items": 2_000_000,  # numbers, strings, ... in one value
    "max_array_bytes": 64 * 2**20,  # one array's raw bytes
    "max_str": 100_000,  # characters of one string
    "max_repr": 200,  # characters of the repr sent for a value that cannot be sent as data
    "max_message": 2_000,  # characters of an exception's message
    # decoding: what one exercise's results may cost the grader, whatever the kernel sends
    "max_hashed": 1_000,  # items of one decoded set or dict (ints can be made to share a hash)
    "max_hashed_total": 100_000,  # items of all the sets and dicts of one exercise's results
    "max_decoded_bytes": 256 * 2**20,  # bytes of one exercise's decoded values (64 a small value)
}


# =============================================================================================
# Encoding: a value as JSON-ready data
# =============================================================================================


class _Encoding:
    """The state of one :func:`encode` call: strict or not, how many values it may still send,
    and about how many bytes of JSON it has made so far."""

    __slots__ = ("strict", "budget", "size")

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.budget = LIMITS["max_items"]
        self.size = 0


def encode(value: Any, strict: bool = False) -> Any:
    """``value`` as JSON-ready data (see the module's table); never raises unless ``strict``.

    With ``strict`` (the grader encoding case inputs) a value that would become "$opaque"
    raises ValueError instead.
    """
    return encode_sized(value, strict)[0]


def encode_sized(value: Any, strict: bool = False) -> tuple[Any, int]:
    """:func:`encode`, and about how many bytes the value's JSON takes (without making it)."""
    st = _Encoding(strict)
    if strict:
        return _enc(value, st, 0), st.size
    try:
        return _enc(value, st, 0), st.size
    except _INTERRUPT[0]:
        raise
    except BaseException:  # a student's __float__, __array__, ... failed
        return _opaque(value, st, "could not be converted"), st.size + LIMITS["max_repr"]


def _enc(v: Any, st: _Encoding, depth: int) -> Any:
    st.budget -= 1
    st.size += 8
    if st.budget < 0:
        return _opaque(v, st, "too many values")
    if depth > LIMITS["max_depth"]:
        return _opaque(v, st, "nested too deeply")
    t = type(v)
    for exact, encoder in _BY_EXACT_TYPE:  # identity only: a type is never asked to compare itself
        if t is exact:
            return encoder(v, st, depth)
    for kinds, encoder in _BY_KIND:
        if isinstance(v, kinds):
            return encoder(v, st, depth)
    return _enc_other(v, st, depth)


def _short_repr(v: Any) -> str:
    try:
        s = repr(v)
    except _INTERRUPT[0]:
        raise
    except BaseException:
        s = "<unprintable>"
    if not isinstance(s, str):
        s = "<unprintable>"
    s = " ".join(s.split())
    n = LIMITS["max_repr"]
    return s if len(s) <= n else s[: n - 4] + " ..."


def _type_name(v: Any) -> str:
    try:
        name = type(v).__name__
    except BaseException:  # a hostile metaclass
        name = "object"
    return name if isinstance(name, str) else "object"


def _opaque(v: Any, st: _Encoding, why: str = "") -> dict:
    if st.strict:
        raise ValueError(f"cannot send a {_type_name(v)} as data{': ' + why if why else ''}")
    text = _short_repr(v) if not why else f"<{_type_name(v)}: {why}>"
    return {"$opaque": [_type_name(v)[:60], text]}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _dtype_spec(dt: Any) -> str | None:
    """How a dtype is sent: numpy's dtype.str, an ml_dtypes name, or None (it cannot be)."""
    if str(getattr(dt.type, "__module__", "")).startswith("ml_dtypes"):  # kind "V" or "f"
        name = dt.name
        if (
            ml_dtypes is not None
            and isinstance(getattr(ml_dtypes, name, None), type)
            and np.dtype(getattr(ml_dtypes, name)) == dt
        ):
            return name
        return None
    if dt.kind in "biufc" and dt.fields is None and dt.subdtype is None:
        return dt.str
    return None


def _float_code(x: float) -> Any:
    if math.isfinite(x) and not (x == 0 and math.copysign(1.0, x) < 0):
        return x
    return {"$float": "nan" if math.isnan(x) else repr(x)}


def _int_code(n: int) -> Any:
    return n if -(2**63) < n < 2**63 else {"$int": hex(n)}


# ---- by exact type: the built-in types ------------------------------------------------------


def _enc_as_is(v: Any, st: _Encoding, depth: int) -> Any:
    return v


def _enc_int(v: int, st: _Encoding, depth: int) -> Any:
    return _int_code(v)


def _enc_float(v: float, st: _Encoding, depth: int) -> Any:
    return _float_code(v)


def _enc_str(v: str, st: _Encoding, depth: int) -> Any:
    st.size += len(v)
    return v if len(v) <= LIMITS["max_str"] else _opaque(v, st, f"a string of length {len(v)}")


def _enc_complex(v: complex, st: _Encoding, depth: int) -> Any:
    return {"$complex": [_float_code(v.real), _float_code(v.imag)]}


# ---- by kind (isinstance): numpy values, subclasses, containers -------------------------------


def _enc_array(a: Any, st: _Encoding, depth: int) -> Any:
    shape = [int(n) for n in a.shape]
    spec = _dtype_spec(a.dtype)
    if spec is not None:
        if a.nbytes > LIMITS["max_array_bytes"]:
            return _opaque(a, st, f"an array of shape {tuple(shape)}, too large to send")
        st.size += a.nbytes * 4 // 3
        return {"$nd": [spec, shape, _b64(np.ascontiguousarray(a).tobytes())]}
    if a.dtype.kind in "US" and a.nbytes <= LIMITS["max_array_bytes"]:
        return {"$nd_str": [a.dtype.str, shape, [_enc(x, st, depth + 1) for x in a.ravel().tolist()]]}
    if a.dtype.kind == "O" and a.size <= st.budget:
        return {"$nd_obj": [shape, [_enc(x, st, depth + 1) for x in a.ravel().tolist()]]}
    return _opaque(a, st, f"an array of dtype {a.dtype} and shape {tuple(shape)}")


def _enc_np_scalar(v: Any, st: _Encoding, depth: int) -> Any:
    spec = _dtype_spec(v.dtype)
    if spec is not None:
        return {"$np": [spec, _b64(np.asarray(v).tobytes())]}
    if isinstance(v, (np.str_, np.bytes_)):
        return _enc(v.item(), st, depth)
    return _opaque(v, st)


def _enc_bool_like(v: Any, st: _Encoding, depth: int) -> Any:
    return bool(v)  # bool cannot be subclassed: only an object whose __class__ claims bool


def _enc_int_like(v: Any, st: _Encoding, depth: int) -> Any:
    return _int_code(int(v))


def _enc_float_like(v: Any, st: _Encoding, depth: int) -> Any:
    return _float_code(float(v))


def _enc_complex_like(v: Any, st: _Encoding, depth: int) -> Any:
    return _enc(complex(v), st, depth)


def _enc_str_like(v: Any, st: _Encoding, depth: int) -> Any:
    return _enc(str(v), st, depth)


def _enc_bytes(v: Any, st: _Encoding, depth: int) -> Any:
    if len(v) > LIMITS["max_array_bytes"]:
        return _opaque(v, st, f"{len(v)} bytes")
    st.size += len(v) * 4 // 3
    return {"$bytes": _b64(bytes(v))}


def _enc_tuple(v: tuple, st: _Encoding, depth: int) -> Any:  # a NamedTuple goes as a plain tuple
    return {"$tuple": [_enc(x, st, depth + 1) for x in v]}


def _enc_list(v: list, st: _Encoding, depth: int) -> Any:
    if len(v) > st.budget:
        return _opaque(v, st, f"a list of length {len(v)}")
    return [_enc(x, st, depth + 1) for x in v]


def _enc_dict(v: dict, st: _Encoding, depth: int) -> Any:
    if len(v) > st.budget:
        return _opaque(v, st, f"a dict of length {len(v)}")
    return {"$dict": [[_enc(k, st, depth + 1), _enc(x, st, depth + 1)] for k, x in v.items()]}


def _enc_set(v: Any, st: _Encoding, depth: int) -> Any:
    if len(v) > st.budget:
        return _opaque(v, st, f"a set of length {len(v)}")
    tag = "$frozenset" if isinstance(v, frozenset) else "$set"
    return {tag: [_enc(x, st, depth + 1) for x in v]}


def _enc_rng(v: Any, st: _Encoding, depth: int) -> Any:
    bg = v.bit_generator
    return {"$rng": [type(bg).__name__, _enc(bg.state, st, depth + 1)]}


# ---- anything else: nbhelpers' enums and dataclasses, then what a student made ----------------


def _enc_other(v: Any, st: _Encoding, depth: int) -> Any:
    t = type(v)
    module = getattr(t, "__module__", "") or ""
    if isinstance(module, str) and (module == "nbhelpers" or module.startswith("nbhelpers.")):
        if isinstance(v, enum.Enum):
            return {"$enum": [module, t.__qualname__, v.name]}
        if dataclasses.is_dataclass(v):
            fields = {f.name: _enc(getattr(v, f.name), st, depth + 1) for f in dataclasses.fields(v) if f.init}
            return {"$dc": [module, t.__qualname__, fields]}
    if st.strict:
        return _opaque(v, st)
    return _enc_student_value(v, st, depth)


def _enc_student_value(v: Any, st: _Encoding, depth: int) -> Any:
    """Something the student made: converted the way checks.same_value would look at it."""
    if any(hasattr(v, a) for a in ("__array__", "__array_interface__", "__array_struct__")):
        a = np.asarray(v)
        if isinstance(a, np.ndarray) and a.dtype.kind != "O":
            return _enc_array(a, st, depth)
        return _opaque(v, st)
    try:
        return _int_code(operator.index(v))
    except (TypeError, ValueError):
        pass
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return _opaque(v, st)
    return _float_code(x) if type(x) is float else _opaque(v, st)


_BY_EXACT_TYPE = (
    (type(None), _enc_as_is),
    (bool, _enc_as_is),
    (int, _enc_int),
    (float, _enc_float),
    (str, _enc_str),
    (complex, _enc_complex),
)

_BY_KIND = (  # in this order: numpy's scalars are also floats, ints, ...
    (np.ndarray, _enc_array),
    (np.generic, _enc_np_scalar),
    (bool, _enc_bool_like),
    (int, _enc_int_like),
    (float, _enc_float_like),
    (complex, _enc_complex_like),
    (str, _enc_str_like),
    ((bytes, bytearray), _enc_bytes),
    (tuple, _enc_tuple),
    (list, _enc_list),
    (dict, _enc_dict),
    ((set, frozenset), _enc_set),
    (np.random.Generator, _enc_rng),
)


# =============================================================================================
# Decoding: the value encode() encoded
# =============================================================================================

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ML_DTYPE_NAME_RE = re.compile(r"^[a-z0-9_]+$")
_HEX_INT_RE = re.compile(r"^-?0x[0-9a-f]+$")
_DTYPE_STR_RE = re.compile(r"^[<>|=][biufcUS][0-9]{1,4}$")
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")

MakeOpaque = Callable[[str, str], Any]
FindClass = Callable[[str, str], type]


class DecodeBudget:
    """What decoding may still cost: bytes of decoded values (64 for each small one, an array's
    size before it is made) and items of sets and dicts. One budget serves all the results of
    an exercise, so that what the grader spends is bounded by it, not by what the kernel sends."""

    __slots__ = ("bytes", "hashed")

    def __init__(self) -> None:
        self.bytes = LIMITS["max_decoded_bytes"]
        self.hashed = LIMITS["max_hashed_total"]

    def spend(self, n_bytes: int) -> None:
        self.bytes -= n_bytes
        if self.bytes < 0:
            raise ValueError("the decoded results are too large")

    def spend_hashed(self, n: int) -> None:
        self.hashed -= n
        if n > LIMITS["max_hashed"] or self.hashed < 0:
            raise ValueError("too many items in sets and dicts")


class _Decoding:
    """What one :func:`decode` call is given: how to make a stand-in, how to find a class, and
    the budget it spends."""

    __slots__ = ("make_opaque", "find_class", "budget")

    def __init__(self, make_opaque: MakeOpaque, find_class: FindClass, budget: DecodeBudget) -> None:
        self.make_opaque, self.find_class, self.budget = make_opaque, find_class, budget


def decode(data: Any, make_opaque: MakeOpaque, find_class: FindClass, budget: DecodeBudget | None = None) -> Any:
    """The value :func:`encode` encoded; ``make_opaque(type_name, text)`` makes "$opaque" values
    and ``find_class(module, qualname)`` gives the class of an "$enum" or "$dc" value (or raises
    ValueError). The grader passes a lookup in a fixed table (it never imports what a kernel
    names); the kernel passes :func:`import_class`. ``budget`` (a fresh :class:`DecodeBudget`
    when None) is spent before anything is made, and may be shared by several calls.

    Raises ValueError (or another Exception) on data that is not a valid encoding, or that would
    cost more than the budget left.
    """
    return _dec(data, 0, _Decoding(make_opaque, find_class, budget or DecodeBudget()))


def _dec(d: Any, depth: int, st: _Decoding) -> Any:
    if depth > LIMITS["max_depth"] + 2:
        raise ValueError("nested too deeply")
    st.budget.spend(64)
    if d is None or type(d) in (bool, int, float, str):
        return d
    if type(d) is list:
        return [_dec(x, depth + 1, st) for x in d]
    if type(d) is not dict or len(d) != 1:
        raise ValueError("not an encoded value")
    ((tag, v),) = d.items()
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise ValueError(f"unknown tag {str(tag)[:20]!r}")
    return decoder(v, depth, st)


def _list(v: Any, what: str) -> list:
    if type(v) is not list:
        raise ValueError(f"bad {what}")
    return v


def _items(v: Any, depth: int, st: _Decoding, what: str) -> list:
    return [_dec(x, depth + 1, st) for x in _list(v, what)]


def _dtype_of(spec: Any) -> Any:
    if not isinstance(spec, str) or len(spec) > 40:
        raise ValueError("bad dtype")
    if ml_dtypes is not None and _ML_DTYPE_NAME_RE.match(spec) and isinstance(getattr(ml_dtypes, spec, None), type):
        return np.dtype(getattr(ml_dtypes, spec))
    if not _DTYPE_STR_RE.match(spec):  # only the plain forms dtype.str gives: "<f8", "|b1", "<U5"
        raise ValueError("bad dtype")
    dt = np.dtype(spec)
    if dt.kind not in "biufcUS" or dt.fields is not None or dt.subdtype is not None:
        raise ValueError(f"dtype {spec!r} not allowed")
    return dt


def _shape_of(s: Any) -> tuple:
    if not isinstance(s, list) or len(s) > 32 or not all(type(n) is int and 0 <= n < 2**40 for n in s):
        raise ValueError("bad shape")
    return tuple(s)


def _raw(text: Any) -> bytes:
    if not isinstance(text, str) or len(text) > 2 * LIMITS["max_array_bytes"]:
        raise ValueError("bad data")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ValueError("bad base64") from e


def import_class(module: Any, qualname: Any) -> type:
    """The class ``qualname`` of the nbhelpers module ``module``, imported: the kernel's way to
    find the class of a case input. (Never the grader's: it looks classes up in a fixed table.)"""
    if not (
        isinstance(module, str)
        and isinstance(qualname, str)
        and _NAME_RE.match(module)
        and _NAME_RE.match(qualname)
        and (module == "nbhelpers" or module.startswith("nbhelpers."))
    ):
        raise ValueError("bad class name")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise ValueError("not a class")
    return obj


def _class(module: Any, qualname: Any, st: _Decoding) -> type:
    if not (isinstance(module, str) and isinstance(qualname, str)):
        raise ValueError("bad class name")
    cls = st.find_class(module, qualname)
    if not isinstance(cls, type):
        raise ValueError("not a class")
    return cls


def _dec_float(v: Any, depth: int, st: _Decoding) -> float:
    if v not in ("nan", "inf", "-inf", "-0.0"):
        raise ValueError("bad float")
    return float(v)


def _dec_int(v: Any, depth: int, st: _Decoding) -> int:
    if not isinstance(v, str) or len(v) > 100_000 or not _HEX_INT_RE.match(v):
        raise ValueError("bad int")
    return int(v, 16)


def _dec_complex(v: Any, depth: int, st: _Decoding) -> complex:
    re_, im_ = (_dec(x, depth + 1, st) for x in v)
    if type(re_) not in (int, float) or type(im_) not in (int, float):
        raise ValueError("bad complex")
    return complex(re_, im_)


def _dec_tuple(v: Any, depth: int, st: _Decoding) -> tuple:
    return tuple(_items(v, depth, st, "tuple"))


def _dec_dict(v: Any, depth: int, st: _Decoding) -> dict:
    out = {}
    st.budget.spend_hashed(len(_list(v, "dict")))
    for pair in v:
        if type(pair) is not list or len(pair) != 2:
            raise ValueError("bad dict item")
        out[_dec(pair[0], depth + 1, st)] = _dec(pair[1], depth + 1, st)
    return out


def _dec_set(v: Any, depth: int, st: _Decoding) -> set:
    st.budget.spend_hashed(len(_list(v, "set")))
    return set(_items(v, depth, st, "set"))


def _dec_frozenset(v: Any, depth: int, st: _Decoding) -> frozenset:
    st.budget.spend_hashed(len(_list(v, "set")))
    return frozenset(_items(v, depth, st, "set"))


def _dec_bytes(v: Any, depth: int, st: _Decoding) -> bytes:
    st.budget.spend(len(v) if isinstance(v, str) else 0)
    return _raw(v)


def _dec_np_scalar(v: Any, depth: int, st: _Decoding) -> Any:
    spec, data = v
    dt = _dtype_of(spec)
    buf = _raw(data)
    if len(buf) != dt.itemsize or dt.kind in "US":
        raise ValueError("bad scalar")
    return np.frombuffer(buf, dtype=dt)[0]


def _array_bytes(shape: tuple, dt: Any, st: _Decoding) -> None:
    """Spend an array's size (at most one array's worth) before it is made."""
    n_bytes = math.prod(shape) * dt.itemsize
    if n_bytes > LIMITS["max_array_bytes"]:
        raise ValueError("array too large")
    st.budget.spend(n_bytes)


def _dec_array(v: Any, depth: int, st: _Decoding) -> np.ndarray:
    spec, shape, data = v
    dt, shape = _dtype_of(spec), _shape_of(shape)
    if dt.kind in "US":
        raise ValueError("bad array")
    _array_bytes(shape, dt, st)
    buf = _raw(data)
    if math.prod(shape) * dt.itemsize != len(buf):
        raise ValueError("array size does not match its shape")
    return np.frombuffer(buf, dtype=dt).reshape(shape).copy()


def _dec_str_array(v: Any, depth: int, st: _Decoding) -> np.ndarray:
    spec, shape, items = v
    dt, shape = _dtype_of(spec), _shape_of(shape)
    if dt.kind not in "US" or type(items) is not list or len(items) != math.prod(shape):
        raise ValueError("bad string array")
    _array_bytes(shape, dt, st)  # an item of "<U9999" takes 40 kB, an empty string or not
    items = [_dec(x, depth + 1, st) for x in items]
    return np.array(items, dtype=dt).reshape(shape)


def _dec_object_array(v: Any, depth: int, st: _Decoding) -> np.ndarray:
    shape, items = v
    shape = _shape_of(shape)
    items = _list(items, "object array")
    if len(items) != math.prod(shape):
        raise ValueError("object array size does not match its shape")
    a = np.empty(len(items), dtype=object)
    for i, x in enumerate(items):
        a[i] = _dec(x, depth + 1, st)
    return a.reshape(shape)


def _dec_rng(v: Any, depth: int, st: _Decoding) -> np.random.Generator:
    name, state = v
    if name not in _BIT_GENERATORS:
        raise ValueError("unknown bit generator")
    bg = getattr(np.random, name)()
    bg.state = _dec(state, depth + 1, st)
    return np.random.Generator(bg)


def _dec_enum(v: Any, depth: int, st: _Decoding) -> enum.Enum:
    module, qualname, member = v
    cls = _class(module, qualname, st)
    if not issubclass(cls, enum.Enum) or not isinstance(member, str):
        raise ValueError("not an enum")
    return cls[member]


def _dec_dataclass(v: Any, depth: int, st: _Decoding) -> Any:
    module, qualname, fields = v
    cls = _class(module, qualname, st)
    if not dataclasses.is_dataclass(cls) or type(fields) is not dict:
        raise ValueError("not a dataclass")
    return cls(**{str(k): _dec(x, depth + 1, st) for k, x in fields.items()})


def _dec_opaque(v: Any, depth: int, st: _Decoding) -> Any:
    name, text = v
    if not isinstance(name, str) or not isinstance(text, str):
        raise ValueError("bad opaque value")
    return st.make_opaque(name, text)


_DECODERS = {
    "$float": _dec_float,
    "$int": _dec_int,
    "$complex": _dec_complex,
    "$tuple": _dec_tuple,
    "$dict": _dec_dict,
    "$set": _dec_set,
    "$frozenset": _dec_frozenset,
    "$bytes": _dec_bytes,
    "$np": _dec_np_scalar,
    "$nd": _dec_array,
    "$nd_str": _dec_str_array,
    "$nd_obj": _dec_object_array,
    "$rng": _dec_rng,
    "$enum": _dec_enum,
    "$dc": _dec_dataclass,
    "$opaque": _dec_opaque,
}


# =============================================================================================
# The runner: the grading cell's work, in the student's kernel
# =============================================================================================


class _TimeLimit(BaseException):
    """Raised by SIGALRM inside the student's function when its exercise's time is up."""


class _Interrupted(BaseException):
    """A real interrupt (SIGINT: the worker stopping a grading cell past its time) while
    :func:`kernel_main` runs, raised by the handler it installs. A ``KeyboardInterrupt`` that a
    student's code raises itself is then that code's failure, like any other exception, and its
    message goes where messages go (the JSON), never through the cell's error."""


#: What the ``except`` clauses of this module let through: a real interrupt. KeyboardInterrupt,
#: except while :func:`kernel_main` runs in a kernel's main thread, where it is ``_Interrupted``.
_INTERRUPT: list[type[BaseException]] = [KeyboardInterrupt]


def _on_sigint(signum: int, frame: Any) -> None:
    raise _Interrupted()


class _Null:
    """Where the student's function prints to while it is checked."""

    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass


#: A graded function's calls together get the grader's budget in seconds of the kernel's CPU time
#: (however loaded the machine, an honest function is not cut short), and at most this many times
#: the budget in wall time (a function that sleeps or waits uses no CPU).
WALL_FACTOR = 3.0

#: How many times in a row a time limit that falls inside the call watch's profile hook waits for
#: the hook to return (1 ms each) before it is raised there all the same.
_MAX_DEFERRALS = 1000


class _Alarm:
    """The time limit of the student's function, where signals can be used (the main thread of a
    POSIX kernel): SIGPROF once its CPU time is up (ITIMER_PROF counts the whole process's CPU
    time, as :func:`time.process_time` does), SIGALRM once its wall time is. Someone else's timers
    and handlers (pytest-timeout's SIGALRM, say) are put back by :meth:`restore`."""

    _TIMERS = (
        {signal.SIGALRM: signal.ITIMER_REAL, signal.SIGPROF: signal.ITIMER_PROF} if hasattr(signal, "SIGPROF") else {}
    )

    def __init__(self) -> None:
        self.armed = False
        self.deferred = 0
        main = threading.current_thread() is threading.main_thread()
        self.usable = hasattr(signal, "setitimer") and bool(self._TIMERS) and main
        if self.usable:
            self.t_start, self.cpu_start = time.monotonic(), time.process_time()
            self.old_timers = {sig: signal.getitimer(which) for sig, which in self._TIMERS.items()}
            self.old_handlers = {sig: signal.signal(sig, self._on_alarm) for sig in self._TIMERS}

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if not self.armed:
            return
        if in_profile_hook(frame) and self.deferred < _MAX_DEFERRALS:
            # CPython drops a profile function that raises, and the watch would read a hook gone
            # as the student's hiding: the limit is raised once the hook has returned
            self.deferred += 1
            signal.setitimer(self._TIMERS[signum], 0.001, 0.25)
            return
        raise _TimeLimit()

    def arm(self, cpu_seconds: float, wall_seconds: float) -> None:
        self.armed, self.deferred = True, 0
        if self.usable:  # both repeat if swallowed
            signal.setitimer(signal.ITIMER_PROF, max(cpu_seconds, 0.001), 0.25)
            signal.setitimer(signal.ITIMER_REAL, max(wall_seconds, 0.001), 0.25)

    def disarm(self) -> None:
        self.armed = False
        if self.usable:
            for which in self._TIMERS.values():
                signal.setitimer(which, 0)

    def restore(self) -> None:
        self.disarm()
        if not self.usable:
            return
        spent = {
            signal.SIGALRM: time.monotonic() - self.t_start,
            signal.SIGPROF: time.process_time() - self.cpu_start,
        }
        for sig, which in self._TIMERS.items():
            old = self.old_handlers[sig]
            signal.signal(sig, signal.SIG_DFL if old is None else old)
            value, interval = self.old_timers[sig]
            if value > 0:
                signal.setitimer(which, max(value - spent[sig], 0.001), interval)


def kernel_main(ns: dict, job: dict) -> None:
    """Call each exercise's function from the notebook's namespace ``ns`` on every case input.

    Writes one JSON line per exercise to ``job["outputs"]``: ``{"start": id}`` before it and
    ``{"id": id, "results": [...]}`` after it (or ``"missing"`` / ``"not_callable"``, or
    ``"too_large"`` when the line would pass ``job["max_line"]`` bytes), where a result is
    ``{"v": value}``, ``{"r": {"type", "message", "ni"}}`` for an exception (``ni``: a
    NotImplementedError) or ``{"t": seconds}`` when the function's time ran out. Every line
    carries ``job["nonce"]`` as ``"n"``: a secret of this grading cell, which the grader requires,
    so lines written into the file before the cell ran are told apart and ignored. Each
    exercise's calls together get ``job["budget"]`` seconds of CPU time and :data:`WALL_FACTOR`
    times that in wall time (see :class:`_Alarm`), so one stuck function does not cost the
    others. ``job["only"]``: the exercise ids to run (None: all). ``job["outside"]``: for each
    exercise id, the notebook's top-level names made outside its tools (for its watch).
    """
    nonce = job.pop("nonce")
    with open(job["inputs"], encoding="utf-8") as f:
        spec = json.load(f)
    budget = float(job["budget"])
    only = job.get("only")
    max_line = int(job["max_line"])
    alarm = _Alarm()
    old_sigint = None
    if alarm.usable:  # the main thread: a real interrupt becomes _Interrupted (see there)
        old_sigint = signal.signal(signal.SIGINT, _on_sigint)
        _INTERRUPT[0] = _Interrupted
    out = open(job["outputs"], "a", encoding="utf-8")
    try:
        exercises = [ex for ex in spec["exercises"] if only is None or ex["id"] in only]
        # every function graded, and what made it, before any of them is called: a call cannot
        # swap the next one, or change what its code object says
        graded = {ex["id"]: _graded(ns, ex["name"]) for ex in exercises}
        outside = job.get("outside") or {}
        for ex in exercises:
            _emit(out, {"start": ex["id"]}, nonce, max_line)
            made = outside.get(ex["id"])
            _emit(out, _run_exercise(graded[ex["id"]], ex, budget, alarm, max_line - 4096, made), nonce, max_line)
    finally:
        alarm.restore()
        if old_sigint is not None:
            signal.signal(signal.SIGINT, old_sigint)
            _INTERRUPT[0] = KeyboardInterrupt
        out.close()


def _emit(out: Any, record: dict, nonce: str, max_line: int) -> None:
    line = json.dumps({**record, "n": nonce}, allow_nan=False, separators=(",", ":"))
    if len(line) >= max_line:
        line = json.dumps({"id": record.get("id"), "too_large": len(line), "n": nonce}, separators=(",", ":"))
    out.write(line + "\n")
    out.flush()
    os.fsync(out.fileno())


def _graded(ns: dict, name: str) -> tuple[Any, dict]:
    """The function named ``name`` in the notebook's namespace (or a record that says it is not
    there, or not callable), with :func:`_code_of` it."""
    if name not in ns:
        return None, {"missing": True}
    fn = ns[name]
    if not callable(fn):
        return None, {"not_callable": type(fn).__name__[:100]}
    return fn, {"code": _code_of(fn)}


#: The file names the grader compiles the program's cells under (definitions.code_file).
_PROGRAM_FILE = re.compile(r"<notebook cell ([0-9]{1,9})>")


def _code_of(fn: Any) -> dict:
    """Where the function's code object was compiled: ``{"cell", "line", "name"}`` for a
    function of the grader's program (a ``functools.cache`` wrapper is looked through), or
    ``{"not": what it is}``. Read before any of the student's code runs, so it is what the
    program made."""
    f = fn
    if type(f) is functools._lru_cache_wrapper:
        f = vars(f).get("__wrapped__")
    if type(f) is not types.FunctionType:
        return {"not": f"a {type(fn).__name__[:100]}, not a function"}
    code = f.__code__
    m = _PROGRAM_FILE.fullmatch(code.co_filename)
    if m is None:
        return {"not": "a function compiled elsewhere (a module's, or one made by exec)"}
    return {"cell": int(m.group(1)) - 1, "line": code.co_firstlineno, "name": code.co_name[:100]}


def _run_exercise(
    graded: tuple[Any, dict], ex: dict, budget: float, alarm: _Alarm, max_bytes: int, outside: Any = None
) -> dict:
    """The record of one exercise: its function's results on every case, and its code.
    ``outside``: the notebook's top-level names made with modules outside the exercise's tools
    (:func:`nbhelpers.top_level.outside_names`, read by the grader from the notebook)."""
    fn, about = graded
    outside = outside if isinstance(outside, dict) else None
    if fn is None:
        name = ex.get("name")
        if about.get("missing") and outside and name in outside:  # its def read a value it may not
            said = f"{READ_FINDINGS[1]} ({name} (its statement reads {outside[name]}))"
            return {"id": ex["id"], "missing": True, "watch": [said]}
        return {"id": ex["id"], **about}
    watch = CallWatch(ex.get("forbidden", ()), ex.get("allowed", ()), ex.get("tools"), outside)
    watch.audit(fn)
    results, size = _call_cases(fn, ex["cases"], budget, alarm, max_bytes, watch, ex.get("returned_args", ()))
    if size > max_bytes:  # not sent at all (the grader would not read it): said so instead
        return {"id": ex["id"], "too_large": size}
    seen = {"watch": sorted(watch.seen)} if watch else {}
    return {"id": ex["id"], "results": results, **about, **seen}


def _call_cases(
    fn: Callable, cases: list, budget: float, alarm: _Alarm, max_bytes: int, watch: CallWatch, returned: Any = ()
) -> tuple[list, int]:
    """The results of the calls on every case, and about how many bytes of JSON they take (the
    calls stop once that passes ``max_bytes``); ``watch`` is on during each call and the encoding
    of what it returned (a value's ``__array__`` is the student's code too). ``returned``: the
    positions of the arguments sent back as the call left them (``"a"``), with each value."""
    results: list = []
    size = 0
    cpu_end, wall_end = time.process_time() + budget, time.monotonic() + WALL_FACTOR * budget
    for i, case in enumerate(cases):
        args = [decode(a, _no_opaque, import_class) for a in case["a"]]
        kwargs = {k: decode(v, _no_opaque, import_class) for k, v in case["k"].items()}
        cpu_left, wall_left = cpu_end - time.process_time(), wall_end - time.monotonic()
        if cpu_left <= 0 or wall_left <= 0:
            results.append({"t": budget})
            break
        try:
            alarm.arm(cpu_left, wall_left)
            try:
                with watch:
                    r, n = _call(fn, args, kwargs, returned)
            finally:
                alarm.disarm()
        except _TimeLimit:
            results.append({"t": budget})
            break
        results.append(r)
        size += n
        if size > max_bytes:
            break
        if i == 0 and "r" in r and r["r"]["ni"]:
            break  # not written yet: one call is enough (as in checks.run_check)
    return results, size


def _no_opaque(name: str, text: str) -> Any:
    raise ValueError("opaque input")


def _call(fn: Callable, args: list, kwargs: dict, returned: Any = ()) -> tuple[dict, int]:
    """``{"v": encoded value}`` or ``{"r": the exception}``, with output and warnings silenced,
    and about how many bytes of JSON that takes; with ``"a"``, the arguments at the positions
    ``returned`` as the call left them."""
    null = _Null()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"), contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                value = fn(*args, **kwargs)
    except (_TimeLimit, _INTERRUPT[0]):
        raise
    except BaseException as e:  # SystemExit and a KeyboardInterrupt it raised itself too: a student's bug
        return {"r": _describe(e)}, LIMITS["max_message"] + 200
    data, size = encode_sized(value)
    if not returned:
        return {"v": data}, size
    after = [encode_sized(args[int(i)] if 0 <= int(i) < len(args) else None) for i in returned]
    return {"v": data, "a": [a for a, _ in after]}, size + sum(n for _, n in after)


def _describe(e: BaseException) -> dict:
    try:
        name = type(e).__name__
        name = name if isinstance(name, str) else "Exception"
    except BaseException:
        name = "Exception"
    try:
        msg = str(e)
        msg = msg if isinstance(msg, str) else ""
    except (_TimeLimit, _INTERRUPT[0]):
        raise
    except BaseException:
        msg = ""
    return {"type": name[:100], "message": msg[: LIMITS["max_message"]], "ni": isinstance(e, NotImplementedError)}
