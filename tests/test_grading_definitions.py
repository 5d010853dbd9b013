"""What runs in the clean kernel the functions are graded in (nbhelpers.grading.definitions): a
notebook's imports, definitions and assignments, on their own lines, and nothing else."""

from __future__ import annotations

import glob

import nbformat
import pytest

from nbhelpers.grading.definitions import MAX_DEFINITIONS_PARSE_CHARS, definitions_of
from nbhelpers.grading.submissions import check_cells

CELL = '''import math
from functools import lru_cache
%matplotlib inline
BIAS = 127
TABLE: list = []
for i in range(4):
    TABLE.append(i)
get_ipython().events.register("pre_run_cell", print)
print(BIAS)

@lru_cache(None)
def f(x, y=2):
    """A docstring."""
    return x + y + BIAS

class C:
    z = 1
try:
    import torch
except ImportError:
    torch = None
try:
    risky()
except Exception:
    pass
X = 1; hook()
if True:
    Y = 2
'''


def test_only_imports_definitions_and_assignments_are_kept_on_their_own_lines():
    defs = definitions_of([(0, CELL)], [False])
    [[index, kept]] = defs.cells
    assert index == 0
    lines = kept.split("\n")
    assert len(lines) == len(CELL.split("\n"))  # line for line: tracebacks and getsource match
    kept_lines = {0, 1, 3, 4, 10, 11, 12, 13, 15, 16, 17, 18, 19, 20}  # imports, f and its decorator, C, try-import
    for n, (got, want) in enumerate(zip(lines, CELL.split("\n"))):
        assert got == (want if n in kept_lines else ""), (n, want, got)
    left = [first for _, first, _ in defs.left_out]
    assert left == [
        "get_ipython().run_line_magic('matplotlib', 'inline')",
        "for i in range(4):",
        'get_ipython().events.register("pre_run_cell", print)',
        "print(BIAS)",
        "try:",
        "X = 1; hook()",
        "X = 1; hook()",
        "if True:",
    ]
    names = dict((first, n) for _, first, n in defs.left_out)
    assert {"TABLE", "append", "i"} <= names["for i in range(4):"]
    assert defs.unparsed == []


def test_check_cells_cells_that_do_not_parse_and_cells_past_the_budget_give_nothing():
    cells = [(0, "check('ex01.f', f)"), (1, "def f(:\n    pass"), (2, "x = 1"), (3, "y = 2")]
    defs = definitions_of(cells, [True, False, False, False])
    assert [i for i, _ in defs.cells] == [2, 3] and defs.unparsed == [1]
    deep = (4, "z = " + "-" * 200_000 + "1")  # too deep to parse: the grader is not stopped by it
    huge = (5, "w = 1\n" + "#" * MAX_DEFINITIONS_PARSE_CHARS)
    defs = definitions_of([deep, huge, (6, "v = 3")], [False, False, False])
    assert defs.unparsed == [4, 5, 6] and defs.cells == []  # the budget is spent at the huge cell


@pytest.mark.parametrize("path", sorted(glob.glob("solutions/ex*.ipynb")))
def test_every_solutions_functions_are_all_defined_by_its_definitions(path):
    """The course's own solutions need nothing but their definitions: every function of the
    notebook is defined in the clean kernel's program, on the notebook's own lines."""
    nb = nbformat.read(path, as_version=4)
    cells = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    defs = definitions_of(cells, check_cells(cells))
    program = "\n".join(src for _, src in defs.cells)
    for _, src in cells:
        for line in src.splitlines():
            if line.startswith("def "):
                assert line in program, (path, line)
    assert defs.unparsed == []
