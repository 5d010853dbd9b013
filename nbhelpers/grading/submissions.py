"""Submissions: finding the notebooks, reading each once (read-only), its code cells, the chapter
it belongs to, and which of its cells are check cells (skipped when grading)."""
from __future__ import annotations

import ast
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..checks import _truncate
from .options import MAX_NOTEBOOK_BYTES, Status

__all__ = ["Submission", "find_notebooks", "read_submission", "detect_chapter", "is_check_cell"]

_FILE_CHAPTER_RE = re.compile(r"(?<![A-Za-z0-9])ex(\d{2})(?!\d)", re.IGNORECASE)
_CHECK_CALL_RE = re.compile(r"\bcheck\(\s*(?:exercise_id\s*=\s*)?[\"']ex(\d{2})\.")
_SUMMARY_CALL_RE = re.compile(r"\bsummary\(\s*(?:chapter\s*=\s*)?(\d{1,3})\s*\)")
# ast.parse is not thread-safe in CPython 3.11 (its AST state is shared by threads: "SystemError:
# AST constructor recursion depth mismatch", cpython gh-106905), and --jobs grades in threads.
_PARSE_LOCK = threading.Lock()


def find_notebooks(paths: Iterable[str | Path]) -> list[tuple[str, Path]]:
    """(shown name, path) of every notebook: files as given, folders searched for *.ipynb
    (skipping hidden folders such as .ipynb_checkpoints). Missing paths raise FileNotFoundError."""
    found: dict[Path, str] = {}
    for p in paths:
        p = Path(p)
        if p.is_dir():
            for q in sorted(p.rglob("*.ipynb")):
                if any(part.startswith(".") for part in q.relative_to(p).parts) or not q.is_file():
                    continue
                found.setdefault(q.resolve(), str(q))
        elif p.exists():
            found.setdefault(p.resolve(), str(p))
        else:
            raise FileNotFoundError(f"no such file or folder: {p}")
    return sorted(((name, path) for path, name in found.items()), key=lambda t: t[0])


@dataclass
class Submission:
    """One submitted notebook, read once.

    file: the path as shown in the outputs; path: where it is; sha256: of its bytes.
    cells: ``(index in the notebook, source)`` of every code cell, when the file is a notebook.
    problem: why the file is not a gradable notebook (``Status.INVALID_NOTEBOOK`` or
    ``Status.EMPTY``), else None; detail: the words for it.
    """

    file: str
    path: Path
    sha256: str = ""
    cells: list[tuple[int, str]] = field(default_factory=list)
    problem: Status | None = None
    detail: str = ""

    def reject(self, problem: Status, detail: str) -> Submission:
        self.problem, self.detail = problem, detail
        return self


def read_submission(path: Path, file: str | None = None) -> Submission:
    """Read a submission read-only and decide whether it is a notebook with code in it."""
    sub = Submission(file=file or str(path), path=path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as e:
        return sub.reject(Status.INVALID_NOTEBOOK, f"cannot read the file: {e.strerror or e}")
    sub.sha256 = hashlib.sha256(data).hexdigest()
    if len(data) > MAX_NOTEBOOK_BYTES:
        return sub.reject(Status.INVALID_NOTEBOOK, f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MB")
    try:
        nb = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        return sub.reject(Status.INVALID_NOTEBOOK, "not a notebook: the file is not UTF-8 text")
    except (ValueError, RecursionError) as e:
        return sub.reject(Status.INVALID_NOTEBOOK, f"not a notebook: invalid JSON ({_truncate(str(e), 120)})")
    try:
        sub.cells = _cells_of(nb)
    except ValueError as e:
        return sub.reject(Status.INVALID_NOTEBOOK, str(e))
    if not any(src.strip() for _, src in sub.cells):
        return sub.reject(Status.EMPTY, "the notebook has no code")
    return sub


def _cells_of(nb: Any) -> list[tuple[int, str]]:
    """Code cells of a parsed notebook (nbformat 4, or 3's worksheets), as (index, source)."""
    if not isinstance(nb, dict):
        raise ValueError(f"not a notebook: the file holds a JSON {type(nb).__name__}, not an object")
    if isinstance(nb.get("cells"), list):
        raw, key = nb["cells"], "source"
    elif isinstance(nb.get("worksheets"), list):  # nbformat 3
        raw = [c for ws in nb["worksheets"] if isinstance(ws, dict) for c in (ws.get("cells") or [])]
        key = "input"
    else:
        raise ValueError("not a notebook: it has no list of cells")
    cells = []
    for i, cell in enumerate(raw):
        if not isinstance(cell, dict):
            raise ValueError(f"not a notebook: cell {i + 1} is a {type(cell).__name__}, not an object")
        if cell.get("cell_type") != "code":
            continue
        src = cell.get(key, cell.get("source", ""))
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise ValueError(f"not a notebook: code cell {i + 1} has no text")
        cells.append((i, src))
    return cells


def detect_chapter(file_name: str, cells: Iterable[tuple[int, str]], expected: int | None = None
                   ) -> tuple[int | None, str]:
    """The chapter a notebook belongs to, and a note when the signs disagree.

    The notebook's own ``check("exNN.…")`` and ``summary(NN)`` calls decide; the file name
    (``exNN_…``) only when there are none, or to choose between several. ``expected`` (the
    ``--chapter`` option) also chooses between several. None when nothing says.
    """
    m = _FILE_CHAPTER_RE.search(Path(file_name).name)
    from_name = int(m.group(1)) if m else None
    text = "\n".join(src for _, src in cells)
    from_calls = {int(c) for c in _CHECK_CALL_RE.findall(text)} | {int(c) for c in _SUMMARY_CALL_RE.findall(text)}
    if len(from_calls) == 1:
        (ch,) = from_calls
        note = (f"its file name says chapter {from_name:02d}, its check cells chapter {ch:02d}"
                if from_name is not None and from_name != ch else "")
        return ch, note
    if len(from_calls) > 1:
        listed = ", ".join(f"{c:02d}" for c in sorted(from_calls))
        for pick in (from_name, expected):
            if pick in from_calls:
                return pick, f"its check cells name chapters {listed}"
        return None, f"its check cells name several chapters ({listed})"
    return from_name, ""


def is_check_cell(source: str) -> bool:
    """True for a cell whose every statement is a call of ``check(...)`` or ``summary(...)``
    (possibly assigned, possibly ``checks.check``); such cells are skipped when grading."""
    try:
        with _PARSE_LOCK:
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return bool(tree.body) and all(_is_check_call(stmt) for stmt in tree.body)


def _is_check_call(stmt: ast.stmt) -> bool:
    if not (isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Call)):
        return False
    f = stmt.value.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return name in ("check", "summary")
