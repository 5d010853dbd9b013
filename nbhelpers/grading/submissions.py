"""Submissions: finding the notebooks, reading each once (read-only), its code cells, the chapter
it belongs to, and which of its cells are check cells (skipped when grading)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..report_text import truncate
from .options import MAX_NOTEBOOK_BYTES, Status
from .untrusted import safe_name, safe_source

__all__ = [
    "Found",
    "Submission",
    "find_notebooks",
    "read_submission",
    "detect_chapter",
    "is_check_cell",
    "check_cells",
    "PARSE_LOCK",
]

_FILE_CHAPTER_RE = re.compile(r"(?<![A-Za-z0-9])ex(\d{2})(?!\d)", re.IGNORECASE)
_CHECK_CALL_RE = re.compile(r"\bcheck\(\s*(?:exercise_id\s*=\s*)?[\"']ex(\d{2})\.")
_SUMMARY_CALL_RE = re.compile(r"\bsummary\(\s*(?:chapter\s*=\s*)?(\d{1,3})\s*\)")
# ast.parse is not thread-safe in CPython 3.11 (its AST state is shared by threads: "SystemError:
# AST constructor recursion depth mismatch", cpython gh-106905), and --jobs grades in threads.
PARSE_LOCK = threading.Lock()
# A check cell is a few calls; a longer cell is not parsed at all (and so runs, as any other).
MAX_CHECK_CELL_CHARS = 4000
# The most characters of one submission that are parsed to find its check cells (50 cells of the
# longest kind): the cells after that are not parsed, so they run as any other cell, and a
# notebook of thousands of long cells costs the grader no more than this to look at.
MAX_CHECK_PARSE_CHARS = 200_000


class Found(NamedTuple):
    """A notebook found under the paths given: the name it is shown and recorded under, where it
    is (resolved: no links), and why it is refused (None: it is to be read and graded)."""

    name: str
    path: Path
    refused: str | None = None


def find_notebooks(paths: Iterable[str | Path]) -> list[Found]:
    """Every notebook under ``paths``, once, sorted by name. Missing paths raise FileNotFoundError.

    Files given by name are taken as they are. Folders are searched for ``*.ipynb`` without
    entering hidden folders (``.ipynb_checkpoints``) or following links to folders. A submission
    is identified by its resolved path: a link found in a folder is shown under the name of the
    file it points to (so a link named like a classmate's notebook cannot take their row), and a
    link to a file outside the folders given, or to nothing, is refused and never read. Names
    are made safe to show (:func:`~nbhelpers.grading.untrusted.safe_name`).
    """
    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.exists() and not p.is_symlink():
            raise FileNotFoundError(f"no such file or folder: {safe_name(p)}")
    roots = [(p, p.resolve()) for p in paths if p.is_dir()]
    found: dict[Path, Found] = {}
    for p in paths:
        if not p.is_dir():
            real = p.resolve()
            found.setdefault(real, Found(str(p), real) if real.is_file() else Found(str(p), real, "not a regular file"))
            continue
        for q in _notebooks_in(p):
            real = q.resolve()
            if not q.is_symlink():
                found.setdefault(real, Found(str(q), real, None if q.is_file() else "not a regular file"))
                continue
            inside = next(((given, root) for given, root in roots if real.is_relative_to(root)), None)
            if inside is None or not real.is_file():
                found.setdefault(
                    Path(q.absolute()),
                    Found(
                        str(q),
                        real,
                        "a link to a file outside the folders being graded" if real.exists() else "a link to nothing",
                    ),
                )
                continue
            given, root = inside
            found.setdefault(real, Found(str(given / real.relative_to(root)), real))
    return _unique_names(found.values())


def _notebooks_in(folder: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".ipynb") and not f.startswith(".")]
    return out


def _unique_names(found: Iterable[Found]) -> list[Found]:
    """Names made safe to show, and made unique should two escape to the same text."""
    out, seen = [], set()
    for f in sorted(found, key=lambda f: f.name):
        name = base = safe_name(f.name)
        k = 1
        while name in seen:
            k += 1
            name = f"{base} #{k}"
        seen.add(name)
        out.append(f._replace(name=name))
    return out


@dataclass
class Submission:
    """One submitted notebook, read once.

    file: the path as shown in the outputs; path: where it is; sha256: of its bytes.
    cells: ``(index in the notebook, source)`` of every code cell, when the file is a notebook.
    problem: why the file is not a gradable notebook (``Status.REFUSED``,
    ``Status.INVALID_NOTEBOOK`` or ``Status.EMPTY``), else None; detail: the words for it.
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
    """Read a submission read-only and decide whether it is a notebook with code in it.

    Only a regular file is read, without following a link (a file swapped for a link after it
    was found is not read), and a pipe or a device never blocks the run."""
    sub = Submission(file=safe_name(file or str(path)), path=path)
    try:
        data = _read_regular_file(path, MAX_NOTEBOOK_BYTES + 1)
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
        return sub.reject(Status.INVALID_NOTEBOOK, f"not a notebook: invalid JSON ({truncate(str(e), 120)})")
    try:
        sub.cells = _cells_of(nb)
    except ValueError as e:
        return sub.reject(Status.INVALID_NOTEBOOK, str(e))
    if not any(src.strip() for _, src in sub.cells):
        return sub.reject(Status.EMPTY, "the notebook has no code")
    return sub


def _read_regular_file(path: Path, limit: int) -> bytes:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        return f.read(limit)


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
        cells.append((i, safe_source(src)))
    return cells


def detect_chapter(
    file_name: str, cells: Iterable[tuple[int, str]], expected: int | None = None
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
        note = (
            f"its file name says chapter {from_name:02d}, its check cells chapter {ch:02d}"
            if from_name is not None and from_name != ch
            else ""
        )
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
    (possibly assigned, possibly ``checks.check``); such cells are skipped when grading. A cell
    longer than :data:`MAX_CHECK_CELL_CHARS` is not one (it is not even parsed)."""
    if len(source) > MAX_CHECK_CELL_CHARS:  # not parsed: a deep expression costs gigabytes
        return False
    try:
        with PARSE_LOCK:
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return bool(tree.body) and all(_is_check_call(stmt) for stmt in tree.body)


def check_cells(cells: list[tuple[int, str]]) -> list[bool]:
    """:func:`is_check_cell` of each of a submission's code cells, parsing at most
    :data:`MAX_CHECK_PARSE_CHARS` characters in all; a cell that names neither ``check`` nor
    ``summary`` is not parsed (it cannot be one), and nor is any cell once the budget is spent."""
    budget, flags = MAX_CHECK_PARSE_CHARS, []
    for _, src in cells:
        parse = len(src) <= min(budget, MAX_CHECK_CELL_CHARS) and ("check" in src or "summary" in src)
        if parse:
            budget -= len(src)
        flags.append(parse and is_check_cell(src))
    return flags


def _is_check_call(stmt: ast.stmt) -> bool:
    if not (isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Call)):
        return False
    f = stmt.value.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return name in ("check", "summary")
