"""The notebook's definitions: what runs in the clean kernel the functions are graded in.

The notebook runs whole in one kernel (its errors and time-outs are reported from there), but its
functions are called in a second, fresh kernel that has run only the notebook's top-level
imports, function and class definitions, and assignments, and ``try`` statements made of these,
in order, with their original lines (so that ``inspect.getsource`` there gives the notebook's
text). Nothing else runs there: no expression statement (``get_ipython().events.register(...)``,
``threading.Thread(...).start()``), no loop, no ``if``, no ``with``, no magic. A hook or a thread
that swaps the functions or forges results must then live in a definition or an assignment, in
plain sight.

A statement kept shares none of its lines with one left out (``X = 1; hook()`` leaves out both).
The cells are parsed with a budget (:data:`MAX_DEFINITIONS_PARSE_CHARS`): cells past it, and cells
that do not parse, contribute nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .submissions import PARSE_LOCK

__all__ = ["MAX_DEFINITIONS_PARSE_CHARS", "Definitions", "definitions_of", "names_used", "parse"]

MAX_DEFINITIONS_PARSE_CHARS = 1_000_000  # of one notebook's code cells, in all
_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


@dataclass
class Definitions:
    """The definitions program of a notebook: ``cells``, ``[index, source]`` of each code cell with
    something kept (the other lines blank); ``left_out``, for each statement left out, ``(cell
    index, first line, the names it mentions)``; ``unparsed``, the indexes of cells that
    contribute nothing because they did not parse or came past the budget."""

    cells: list[list] = field(default_factory=list)
    left_out: list[tuple[int, str, frozenset[str]]] = field(default_factory=list)
    unparsed: list[int] = field(default_factory=list)


def _python_of(src: str) -> str:
    """The cell as Python: IPython's syntax (``%magic``, ``!shell``, ``x?``) turned into calls,
    line for line, as the kernel does before running it."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython comes with the kernel
        return src
    try:
        return TransformerManager().transform_cell(src)
    except Exception:  # what does not transform does not parse either
        return src


def parse(src: str) -> ast.Module | None:
    """``ast.parse`` of ``src``, one thread at a time (see ``submissions.PARSE_LOCK``); None when
    it does not parse (a syntax error, or too deep to)."""
    try:
        with PARSE_LOCK:
            return ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _is_definition(st: ast.stmt) -> bool:
    if isinstance(st, _KEPT):
        return True
    if isinstance(st, ast.Try):  # try: import x / except ImportError: x = None
        parts = st.body + st.orelse + st.finalbody + [s for h in st.handlers for s in h.body]
        return all(isinstance(s, ast.Pass) or _is_definition(s) for s in parts)
    return False


def _first_line(st: ast.stmt) -> int:
    decorators = getattr(st, "decorator_list", [])
    return min([st.lineno, *(d.lineno for d in decorators)])


def names_used(tree: ast.AST) -> frozenset[str]:
    """Every name a piece of code mentions: variables, and attributes' and keywords' names too."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
    return frozenset(out)


def definitions_of(cells: list[tuple[int, str]], check_flags: list[bool]) -> Definitions:
    """The definitions program of a notebook whose code cells are ``cells`` (``(index, source)``),
    check cells (``check_flags``) left out."""
    out, budget = Definitions(), MAX_DEFINITIONS_PARSE_CHARS
    for (index, src), is_check in zip(cells, check_flags):
        if is_check or not src.strip():
            continue
        if len(src) > budget:
            budget = 0
            out.unparsed.append(index)
            continue
        budget -= len(src)
        python = _python_of(src)
        tree = parse(python)
        if tree is None:
            out.unparsed.append(index)
            continue
        lines = python.splitlines()
        keep, drop = [], []
        for st in tree.body:
            span = set(range(_first_line(st), (st.end_lineno or st.lineno) + 1))
            (keep if _is_definition(st) else drop).append((st, span))
        dropped_lines = set().union(*(span for _, span in drop))
        kept_lines = set()
        for st, span in keep:
            if span & dropped_lines:  # on a line with a statement left out: left out too
                drop.append((st, span))
            else:
                kept_lines |= span
        for st, _ in sorted(drop, key=lambda d: d[0].lineno):
            first = lines[st.lineno - 1].strip() if st.lineno <= len(lines) else ""
            out.left_out.append((index, first[:60], names_used(st)))
        if kept_lines:
            text = "\n".join(line if n in kept_lines else "" for n, line in enumerate(lines, start=1))
            out.cells.append([index, text + "\n"])
    return out
