"""Every markdown table of the course (notebooks, solutions, exercises, README, docs) has as many
cells in each row as in its header. A table row is cut at every ``|`` that is not escaped, inside
code spans too (GitHub-flavoured markdown, which JupyterLab and the website's MyST parser both
follow): ``sum|x|`` in a cell splits it, the renderer drops the cells beyond the header's count
and the last column shows the wrong text. Write ``sum\\|x\\|`` instead."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "exercises") for p in (ROOT / d).glob("*.ipynb"))
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "site").glob("*.md"))]

_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def row_cells(row: str) -> list[str]:
    """The cells of a table row, cut at every unescaped ``|`` (code spans included)."""
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return re.split(r"(?<!\\)\|", row)


def bad_rows(text: str) -> list[str]:
    """Each row of a table in ``text`` whose number of cells differs from its header's, described."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines) - 1:
        if "|" in lines[i] and _DELIMITER.match(lines[i + 1]):
            n = len(row_cells(lines[i]))
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                got = len(row_cells(lines[j]))
                if got != n:
                    out.append(f"line {j + 1}: {got} cells, the header has {n}: {lines[j][:90]!r}")
                j += 1
            i = j
        else:
            i += 1
    return out


def test_the_checker_finds_a_pipe_in_a_code_span_and_accepts_it_escaped():
    broken = "| method | bound | cost |\n|---|---|---|\n| pairwise | `gamma_k sum|x|` | one |\n"
    assert len(bad_rows(broken)) == 1 and "5 cells, the header has 3" in bad_rows(broken)[0]
    assert bad_rows(broken.replace("sum|x|", "sum\\|x\\|")) == []
    assert bad_rows("a | b\n--- | ---\n1 | 2\n") == []  # no outer pipes
    assert bad_rows("text with a | pipe\nand no table\n") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_tables_have_whole_rows(path):
    nb = nbformat.read(path, as_version=4)
    problems = [
        f"cell {k}, {what}"
        for k, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        for what in bad_rows(cell.source)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_page_tables_have_whole_rows(path):
    assert not bad_rows(path.read_text(encoding="utf-8"))
