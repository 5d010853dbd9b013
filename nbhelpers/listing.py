"""Source code shown in a notebook as highlighted code, not as printed text.

``show_source(matmul_kernel)`` is the kernel's source as a code listing: JupyterLab and the
course website render it with Python highlighting (a markdown code block), and a plain-text
view (a terminal, nbval) sees the source itself.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

__all__ = ["Listing", "show_source"]


class Listing:
    """A piece of Python source to display: ``_repr_markdown_`` is a fenced ``python`` block,
    ``str`` and the plain-text repr are the source."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __str__(self) -> str:
        return self.source

    def __repr__(self) -> str:
        return self.source

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's text/plain
        p.text(self.source)

    def _repr_markdown_(self) -> str:
        # a fence longer than any run of backticks in the code, so that none can close it
        runs = [len(r) for r in re.findall(r"`+", self.source)]
        fence = "`" * max(3, max(runs, default=0) + 1)
        return f"{fence}python\n{self.source.rstrip()}\n{fence}\n"


def _source_of(obj: Any) -> str:
    # a @triton.jit function keeps the Python function it wraps in .fn
    target = getattr(obj, "fn", obj)
    try:
        return inspect.getsource(target)
    except (OSError, TypeError) as e:
        raise TypeError(f"show_source: no source for {obj!r} (a function, class or module is accepted): {e}") from None


def show_source(*objs: Any, start: str | None = None, stop: str | None = None) -> Listing:
    """The source of each of ``objs`` (functions, ``@triton.jit`` kernels, classes or modules),
    one after the other, as one :class:`Listing`. With a single object, ``start``: show from the
    first line that contains this text; ``stop``: up to, not including, the first line after it
    that contains this text. Either must occur in the source, or ValueError says which did not."""
    if not objs:
        raise TypeError("show_source: give at least one function, kernel, class or module")
    if len(objs) > 1:
        if start is not None or stop is not None:
            raise ValueError("show_source: start and stop cut the source of one object; give one object")
        return Listing("\n\n".join(_source_of(o).rstrip("\n") for o in objs) + "\n")
    obj = objs[0]
    source = _source_of(obj)
    lines = source.splitlines(keepends=True)
    first, last = 0, len(lines)
    name = getattr(getattr(obj, "fn", obj), "__name__", repr(obj))
    if start is not None:
        found = [i for i, line in enumerate(lines) if start in line]
        if not found:
            raise ValueError(f"show_source: no line of {name} contains start={start!r}")
        first = found[0]
    if stop is not None:
        found = [i for i, line in enumerate(lines) if stop in line and i > first]
        if not found:
            raise ValueError(f"show_source: no line of {name} after the start contains stop={stop!r}")
        last = found[0]
    return Listing("".join(lines[first:last]))
