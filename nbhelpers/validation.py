"""Argument checks shared by the whole package: strings into enum members, positive sizes,
random generators. Each raises a ValueError or TypeError that names the argument, says what was
wrong and what is accepted. An integer argument is an int or a numpy integer, never a bool: a value
of another type raises :class:`NotAnIntError`, which is both. A leaf module: it imports nothing from
nbhelpers."""

from __future__ import annotations

import enum
import math
from typing import TypeVar

import numpy as np

__all__ = [
    "NotAnIntError",
    "enum_member",
    "is_int",
    "positive_int",
    "nonnegative_int",
    "int_in_range",
    "power_of_two",
    "tile_sizes",
    "group_m",
    "positive_number",
    "real_float64",
    "stochastic_rng",
]

E = TypeVar("E", bound=enum.Enum)


def enum_member(cls: type[E], value: E | str, what: str) -> E:
    """``value`` if it is a member of ``cls``, else the member whose value is the string
    ``value`` (case and surrounding spaces ignored); otherwise a ValueError naming ``what`` and
    listing the accepted strings."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value.strip().lower())
        except ValueError:
            pass
    known = ", ".join(repr(m.value) for m in cls)
    raise ValueError(f"unknown {what} {value!r}; expected one of: {known} (or a {cls.__name__} member)")


class NotAnIntError(TypeError, ValueError):
    """An integer argument of another type (a float, a bool, a string, None). A TypeError, as
    Python raises for a value of the wrong type, and a ValueError, as the range checks raise, so
    that code catching either keeps working."""


def is_int(v) -> bool:
    """Whether ``v`` counts as an integer argument: an int or a numpy integer, not a bool (True
    is an int to Python, never a size or a count here)."""
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, np.integer))


def _int(name: str, v, ok: bool, accepted: str, meaning: str) -> int:
    """``v`` as an int when it is an integer and ``ok``; else the error that names ``name``, says
    what is ``accepted`` (and ``meaning``, what the number is) and shows ``v``."""
    if is_int(v) and ok:
        return int(v)
    msg = f"{name} must be {accepted}{f' ({meaning})' if meaning else ''}, got {v!r}"
    raise (ValueError if is_int(v) else NotAnIntError)(msg)


def positive_int(name: str, v, meaning: str = "") -> int:
    """``v`` as an int if it is an integer >= 1 (bools refused), else an error naming ``name``
    (and ``meaning``, what the number is, when given): a ValueError, a :class:`NotAnIntError`
    for a value that is not an integer."""
    return _int(name, v, is_int(v) and v >= 1, "a positive int", meaning)


def nonnegative_int(name: str, v, meaning: str = "") -> int:
    """``v`` as an int if it is an integer >= 0 (bools refused), else an error naming ``name``
    (and ``meaning``, what the number is, when given): a ValueError, a :class:`NotAnIntError`
    for a value that is not an integer."""
    return _int(name, v, is_int(v) and v >= 0, "a non-negative int", meaning)


def int_in_range(name: str, v, lo: int, hi: int | None = None, meaning: str = "") -> int:
    """``v`` as an int if it is an integer from ``lo`` to ``hi`` (both included; no upper bound
    when ``hi`` is None; bools refused), else an error naming ``name``, the range (and
    ``meaning``, what the number is, when given): a ValueError, a :class:`NotAnIntError` for a
    value that is not an integer."""
    ok = is_int(v) and lo <= v and (hi is None or v <= hi)
    return _int(name, v, ok, f"an int from {lo} to {hi}" if hi is not None else f"an int >= {lo}", meaning)


def power_of_two(name: str, v, lo: int, hi: int, why: str = "") -> int:
    """``v`` as an int if it is a power of two from ``lo`` to ``hi`` (bools refused), else a
    ValueError (a :class:`NotAnIntError` for a value that is not an integer) naming ``name``, the
    range, and ``why`` when given."""
    if not is_int(v) or not lo <= v <= hi or v & (v - 1):
        msg = f"{name}={v!r}: must be a power of two from {lo} to {hi}{f' ({why})' if why else ''}"
        raise (ValueError if is_int(v) else NotAnIntError)(msg)
    return int(v)


def tile_sizes(block, names: tuple[str, ...] = ("BLOCK_M", "BLOCK_N", "BLOCK_K")) -> tuple[int, ...]:
    """A tile of a ``tl.dot`` kernel: a tuple or list of one size per name in ``names``, each a
    power of two from 16 to 256 (``tl.dot`` needs at least 16 along each dimension)."""
    if not isinstance(block, (tuple, list)) or len(block) != len(names):
        raise ValueError(f"block must be a tuple ({', '.join(names)}), got {block!r}")
    why = "every block size: tl.dot needs at least 16 along each dimension"
    return tuple(power_of_two(n, v, 16, 256, why) for n, v in zip(names, block))


def group_m(v) -> int:
    """GROUP_M of the grouped program order of the tiled GEMMs: a positive int."""
    return positive_int("group_m", v, "tile rows per group of the grouped program order")


def positive_number(name: str, v) -> float:
    """``v`` as a float if it is a real number, finite and > 0, else a ValueError naming ``name``."""
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    if not ok or not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return float(v)


def stochastic_rng(rng) -> np.random.Generator:
    """The generator that stochastic rounding draws from: ``rng`` must be a numpy Generator."""
    if rng is None:
        raise ValueError("stochastic rounding needs an explicit generator: pass rng=np.random.default_rng(seed)")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def real_float64(arr) -> np.ndarray:
    """``arr`` as a float64 array if its dtype holds real numbers (floats, ints, bools, ml_dtypes);
    a TypeError otherwise (complex, strings, objects)."""
    arr = np.asarray(arr)
    if arr.dtype.kind not in "fiub" and arr.dtype.kind != "V":
        raise TypeError(f"expected real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)
