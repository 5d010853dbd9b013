"""Short, safe text for what a student is shown: one line, bounded length, never raising.

Check reports (:mod:`nbhelpers.checks`), comparators (:mod:`nbhelpers.comparators`), the
exercise registry and the grader (:mod:`nbhelpers.grading`) describe a student's values and
exceptions with these. Every function here is linear in the size of its input (the input may be
a student's text) and never raises on a student's object (a broken ``__repr__`` or ``__str__``);
``KeyboardInterrupt`` goes through, so a stuck call can still be interrupted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["REPR_LIMIT", "truncate", "short_repr", "describe_exception", "describe_parts", "describe"]

REPR_LIMIT = 200  # characters kept of any repr or exception message shown to a student


def truncate(s: str, limit: int = REPR_LIMIT) -> str:
    """``s`` on one line (each line break, with the white space around it, becomes one space), at
    most ``limit`` characters. Linear in ``len(s)``: it may be a student's text."""
    if "\n" in s:
        lines = s.split("\n")
        kept = [lines[0].rstrip()] + [ln.strip() for ln in lines[1:-1]] + [lines[-1].lstrip()]
        s = kept[0] + "".join(" " + ln for ln in kept[1:] if ln) if len(kept) > 1 else kept[0]
        if lines[-1].strip() == "" and len(lines) > 1:
            s = s + " "
    return s if len(s) <= limit else s[: limit - 4] + " ..."


def short_repr(obj: Any, limit: int = REPR_LIMIT) -> str:
    """repr(obj) on one line, at most ``limit`` characters; never raises."""
    try:
        with np.printoptions(threshold=8, edgeitems=3, linewidth=100_000):
            s = repr(obj)
    except KeyboardInterrupt:
        raise
    except BaseException:  # a student's object with a broken __repr__
        s = f"<{type(obj).__name__} object>"
    return truncate(s, limit)


def describe_exception(e: BaseException) -> str:
    """'ZeroDivisionError: division by zero', truncated; never raises."""
    try:
        msg = str(e)
    except KeyboardInterrupt:
        raise
    except BaseException:
        msg = ""
    return describe_parts(type(e).__name__, msg)


def describe_parts(name: str, msg: str) -> str:
    """The text of :func:`describe_exception` from an exception's class name and message."""
    return truncate(f"{name}: {msg}" if msg else name)


def describe(x: Any) -> str:
    """What a value is, for a wrong-type reason: "str 'abc'", "None", "list of length 3"."""
    if x is None:
        return "None"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of length {len(x)}"
    if isinstance(x, np.ndarray):
        return f"an array of shape {x.shape}"
    return f"{type(x).__name__} {short_repr(x, 60)}"
