"""Argument checks shared by the whole package: strings into enum members, positive sizes,
random generators. Each raises a ValueError or TypeError that names the argument, says what was
wrong and what is accepted. A leaf module: it imports nothing from nbhelpers."""

from __future__ import annotations

import enum
import math
from typing import TypeVar

import numpy as np

__all__ = [
    "enum_member",
    "positive_int",
    "nonnegative_int",
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


def _is_int(v) -> bool:
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, np.integer))


def positive_int(name: str, v, meaning: str = "") -> int:
    """``v`` as an int if it is an integer >= 1 (bools refused), else a ValueError naming ``name``
    (and ``meaning``, what the number is, when given)."""
    if not _is_int(v) or v < 1:
        raise ValueError(f"{name} must be a positive int{f' ({meaning})' if meaning else ''}, got {v!r}")
    return int(v)


def nonnegative_int(name: str, v, meaning: str = "") -> int:
    """``v`` as an int if it is an integer >= 0 (bools refused), else a ValueError naming ``name``
    (and ``meaning``, what the number is, when given)."""
    if not _is_int(v) or v < 0:
        raise ValueError(f"{name} must be a non-negative int{f' ({meaning})' if meaning else ''}, got {v!r}")
    return int(v)


def power_of_two(name: str, v, lo: int, hi: int, why: str = "") -> int:
    """``v`` as an int if it is a power of two from ``lo`` to ``hi`` (bools refused), else a
    ValueError naming ``name``, the range, and ``why`` when given."""
    if not _is_int(v) or not lo <= v <= hi or v & (v - 1):
        raise ValueError(f"{name}={v!r}: must be a power of two from {lo} to {hi}{f' ({why})' if why else ''}")
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
