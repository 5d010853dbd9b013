"""The boundary: every piece of text a submission hands the grader is made safe here, once, where
it enters (a file name, a cell's source, an event a worker recorded, a line the kernel wrote).

Safe means: valid Unicode that encodes to UTF-8 (no lone surrogates, which is what a notebook's
``"\\ud800"`` or a file name that is not UTF-8 decodes to), and no control characters that a
terminal or a spreadsheet would act on (escape sequences, carriage returns, bidirectional
overrides). Each such character is written out as a visible escape (``\\x1b``, ``\\udcff``), so
nothing is lost from sight and nothing acts. Everything here is linear in the size of its input.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["safe_text", "safe_name", "safe_source", "safe_data", "UNSAFE_IN_TEXT", "UNSAFE_IN_NAMES"]

# Lone surrogates, C0 controls other than tab and newline, DEL and C1 controls, and the
# invisible characters that reorder or hide text (bidirectional overrides, zero-width marks).
_INVISIBLE = "\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
UNSAFE_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}\ud800-\udfff]")
# In a file name a tab or a newline is unsafe too: a name is shown on one line.
UNSAFE_IN_NAMES = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    n = ord(m.group())
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def safe_text(s: Any) -> str:
    """``s`` (a str; anything else is made one with ``str``) with every unsafe character escaped;
    tabs and newlines are kept."""
    if not isinstance(s, str):
        s = str(s)
    if s.isascii() and s.isprintable():  # the common case, and a quick one
        return s
    return UNSAFE_IN_TEXT.sub(_escape, s)


def safe_name(s: Any) -> str:
    """A file name or path to show on one line: :func:`safe_text` that also escapes tabs and newlines."""
    if not isinstance(s, str):
        s = str(s)
    if s.isascii() and s.isprintable():
        return s
    return UNSAFE_IN_NAMES.sub(_escape, s)


_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_source(s: str) -> str:
    """A cell's source that can be sent to a kernel: lone surrogates written as ``\\udxxx``; all
    else, control characters included, is kept (it is code)."""
    return s if s.isascii() else _SURROGATE.sub(_escape, s)


def safe_data(value: Any) -> Any:
    """Parsed JSON (dicts, lists, strings, numbers) with every string, keys included, made safe.

    Iterative, so a deeply nested value costs no recursion; shares the structure it was given
    (the lists and dicts are changed in place).
    """
    if isinstance(value, str):
        return safe_text(value)
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            for i, x in enumerate(v):
                if isinstance(x, str):
                    v[i] = safe_text(x)
                elif isinstance(x, (list, dict)):
                    stack.append(x)
        elif isinstance(v, dict):
            if any(isinstance(k, str) and safe_text(k) != k for k in v):
                items = [(safe_text(k) if isinstance(k, str) else k, x) for k, x in v.items()]
                v.clear()
                v.update(items)
            for k, x in v.items():
                if isinstance(x, str):
                    v[k] = safe_text(x)
                elif isinstance(x, (list, dict)):
                    stack.append(x)
    return value
