"""Plain-text tables for notebook output: deterministic, readable on GitHub and in a terminal."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["fmt_num", "text_table"]


def fmt_num(v: Any, digits: int = 5) -> str:
    """A number as short text: ints as ints, powers of two also as 2^k, floats in %g; None as '-'."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) or hasattr(v, "dtype"):
        v = float(v)
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v != 0 and abs(v) < 1e-3 or abs(v) >= 1e6:
            m, e = math.frexp(abs(v))
            if m == 0.5 and v > 0:
                return f"2^{e - 1} ({v:.{digits - 1}g})"
        return f"{v:.{digits}g}"
    return str(v)


def text_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], digits: int = 5) -> str:
    """Columns aligned, numbers formatted with :func:`fmt_num`; returns the text (print it)."""
    cells = [[fmt_num(c, digits) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)
