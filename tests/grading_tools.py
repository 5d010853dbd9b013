"""Shared by the grader's tests (tests/test_grading_*.py): submissions generated from
solutions/ex01_float_formats.ipynb, and readers for the grader's output files.

Notebook runs use short time limits (5 s a cell, 25 s a submission: ``FAST``) so that the
infinite loops cost little.
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import textwrap
from pathlib import Path

import nbformat

from nbhelpers.checks import cases_for, exercises_of

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "ex01_float_formats.ipynb"
EXERCISE = ROOT / "exercises" / "ex01_float_formats.ipynb"
CELL_TIMEOUT, TOTAL_TIMEOUT = 5, 25
FAST = ["--cell-timeout", str(CELL_TIMEOUT), "--timeout", str(TOTAL_TIMEOUT)]
POINTS = {ex.id: ex.points for ex in exercises_of(1)}
FULL = sum(POINTS.values())


# ---- building submissions ----------------------------------------------------------------------

def solution() -> nbformat.NotebookNode:
    return nbformat.read(SOLUTION, as_version=4)


def code_index(nb, needle: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and needle in c.source)


def set_body(nb, name: str, body: str) -> None:
    """Replace the body of the function ``name`` (its cell keeps only the def line)."""
    i = code_index(nb, f"def {name}(")
    head = nb.cells[i].source.splitlines()[0]
    nb.cells[i].source = head + "\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


def mutate(nb, name: str, old: str, new: str) -> None:
    i = code_index(nb, f"def {name}(")
    assert old in nb.cells[i].source, (name, old)
    nb.cells[i].source = nb.cells[i].source.replace(old, new)


def insert_code(nb, after_needle: str, source: str) -> None:
    nb.cells.insert(code_index(nb, after_needle) + 1, nbformat.v4.new_code_cell(source))


def write(nb, path: Path) -> Path:
    nbformat.write(nb, str(path))
    return path


def literal(v) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({repr(v)!r})"
    return repr(v)


def hard_coded_source(seed: int = 0) -> str:
    """Functions that only know the answers of the cases of ``seed`` (what a student who copied
    the public check's answers would hand in)."""
    lines = []
    for ex in exercises_of(1):
        table = {repr(c.args): ex.reference(*c.args, **c.kwargs) for c in cases_for(ex, seed)}
        lines.append(f"_T_{ex.name} = {{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in table.items()) + "}")
        lines.append(f"def {ex.name}(*args):\n    return _T_{ex.name}.get(repr(args), 0.0)")
    return "\n".join(lines)


def hard_coded_notebook() -> nbformat.NotebookNode:
    nb = solution()
    for ex in exercises_of(1):  # drop the real functions
        del nb.cells[code_index(nb, f"def {ex.name}(")]
    insert_code(nb, "import math", hard_coded_source())
    return nb


# ---- looking at the results ---------------------------------------------------------------------

def tree_state(folder: Path) -> dict:
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_mode)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def read_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    files = [r["file"] for r in rows]
    assert len(files) == len(set(files)), "one row per submission"
    return {Path(r["file"]).name: r for r in rows}


def read_json(path: Path) -> dict[str, dict]:
    return {Path(r["file"]).name: r for r in json.loads(path.read_text())["submissions"]}


def env() -> dict:
    """Our environment, with this repository's nbhelpers first on the path (for subprocesses)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e
