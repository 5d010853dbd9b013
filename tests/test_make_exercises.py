import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from nbhelpers.tooling.make_exercises import (
    SolutionMarkerError,
    check_folders,
    exercise_text,
    main,
    strip_solutions,
    write_exercises,
)

REPO = Path(__file__).resolve().parents[1]

FUNC = '''\
import numpy as np

def decode(bits):
    """Decode.

    bits: uint8 array
    """
    ### BEGIN SOLUTION
    sign = bits >> 7

    # a comment does not count
    return sign
    ### END SOLUTION
'''

TWO_REGIONS = """\
def f(x):
    ### BEGIN SOLUTION
    return x + 1
    ### END SOLUTION

def g(x):
    if x:
        ### BEGIN SOLUTION
        y = 2 * x
        z = y + 1
        return z
        ### END SOLUTION
    return 0"""

MARKDOWN = """\
**Question.** Why is the max of e4m3fn 448?

<!-- BEGIN SOLUTION -->
Because only the all-ones code is NaN,
so the top binade keeps 1.75 * 2**8.
<!-- END SOLUTION -->

Inline: <!-- BEGIN SOLUTION -->42<!-- END SOLUTION -->."""


def solution_notebook() -> nbformat.NotebookNode:
    code = new_code_cell(FUNC, execution_count=3, outputs=[new_output("stream", name="stdout", text="hi\n")])
    only = new_code_cell("check('ex01.decode', decode)  # the reference run", metadata={"tags": ["solution-only"]})
    return new_notebook(
        cells=[
            new_markdown_cell("# Exercises"),
            code,
            new_code_cell(TWO_REGIONS),
            new_markdown_cell(MARKDOWN),
            only,
        ]
    )


def write_nb(path: Path, nb) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def cleared(nb):
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    return nb


def test_code_region_becomes_indented_stub():
    ex = strip_solutions(solution_notebook(), "ex01_x.ipynb")
    assert (
        ex.cells[1].source
        == '''\
import numpy as np

def decode(bits):
    """Decode.

    bits: uint8 array
    """
    # YOUR CODE HERE (about 2 lines)
    raise NotImplementedError("about 2 lines")
'''
    )
    compile(ex.cells[1].source, "cell", "exec")


def test_two_regions_in_one_cell():
    ex = strip_solutions(solution_notebook())
    assert (
        ex.cells[2].source
        == """\
def f(x):
    # YOUR CODE HERE (about 1 line)
    raise NotImplementedError("about 1 line")

def g(x):
    if x:
        # YOUR CODE HERE (about 3 lines)
        raise NotImplementedError("about 3 lines")
    return 0"""
    )
    compile(ex.cells[2].source, "cell", "exec")


def test_markdown_regions_and_solution_only_cells_and_outputs():
    sol = solution_notebook()
    ex = strip_solutions(sol)
    assert (
        ex.cells[3].source
        == """\
**Question.** Why is the max of e4m3fn 448?

*Your answer here.*

Inline: *Your answer here.*."""
    )
    assert len(ex.cells) == 4 and not any("solution-only" in c.metadata.get("tags", []) for c in ex.cells)
    assert all(c.outputs == [] and c.execution_count is None for c in ex.cells if c.cell_type == "code")
    assert [c.id for c in ex.cells] == [c.id for c in sol.cells[:4]]  # ids kept: stable output
    assert sol.cells[1].outputs and "BEGIN SOLUTION" in sol.cells[1].source  # input untouched


@pytest.mark.parametrize(
    "source, message",
    [
        ("x = 1\n### END SOLUTION\n", "END SOLUTION at line 2 without"),
        ("def f():\n    ### BEGIN SOLUTION\n    return 1\n", "BEGIN SOLUTION at line 2 has no"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION\n", "nested"),
    ],
)
def test_bad_code_markers_name_notebook_and_cell(tmp_path, source, message):
    nb = new_notebook(cells=[new_markdown_cell("intro"), new_code_cell(source)])
    with pytest.raises(SolutionMarkerError, match=message) as info:
        strip_solutions(nb, "ex07_bad.ipynb")
    assert "ex07_bad.ipynb: cell 1" in str(info.value)

    write_nb(tmp_path / "solutions" / "ex07_bad.ipynb", nb)
    assert main(["--solutions", str(tmp_path / "solutions"), "--exercises", str(tmp_path / "exercises")]) == 1
    assert not (tmp_path / "exercises" / "ex07_bad.ipynb").exists()


@pytest.mark.parametrize(
    "source",
    [
        "<!-- END SOLUTION -->",
        "a <!-- BEGIN SOLUTION --> b",
        "<!-- BEGIN SOLUTION --><!-- BEGIN SOLUTION --><!-- END SOLUTION --><!-- END SOLUTION -->",
    ],
)
def test_bad_markdown_markers(source):
    nb = new_notebook(cells=[new_markdown_cell(source)])
    with pytest.raises(SolutionMarkerError, match="ex02_md.ipynb: cell 0"):
        strip_solutions(nb, "ex02_md.ipynb")


def test_generate_then_check(tmp_path, capsys):
    sols, exs = tmp_path / "solutions", tmp_path / "exercises"
    write_nb(sols / "ex01_formats.ipynb", cleared(solution_notebook()))
    write_nb(
        sols / "ex02_sums.ipynb", new_notebook(cells=[new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")])
    )
    (sols / "notes.ipynb").write_text((sols / "ex02_sums.ipynb").read_text())  # not exNN_*: ignored
    args = ["--solutions", str(sols), "--exercises", str(exs)]

    assert main(args + ["--check"]) == 1  # nothing generated yet
    assert "ex01_formats.ipynb: missing" in capsys.readouterr().err
    assert main(args) == 0
    assert sorted(p.name for p in exs.iterdir()) == ["ex01_formats.ipynb", "ex02_sums.ipynb"]
    first = (exs / "ex01_formats.ipynb").read_bytes()
    assert b"BEGIN SOLUTION" not in first and b"YOUR CODE HERE (about 2 lines)" in first
    assert main(args + ["--check"]) == 0
    assert "up to date" in capsys.readouterr().out

    # regenerating is byte-identical and rewrites nothing
    mtime = (exs / "ex01_formats.ipynb").stat().st_mtime_ns
    assert write_exercises(sols, exs) == []
    assert (exs / "ex01_formats.ipynb").read_bytes() == first == exercise_text(sols / "ex01_formats.ipynb").encode()
    assert (exs / "ex01_formats.ipynb").stat().st_mtime_ns == mtime

    # editing a solution makes --check fail, naming the notebook
    nb = nbformat.read(sols / "ex02_sums.ipynb", as_version=4)
    nb.cells.append(new_markdown_cell("one more"))
    write_nb(sols / "ex02_sums.ipynb", nb)
    assert main(args + ["--check"]) == 1
    err = capsys.readouterr().err
    assert "ex02_sums.ipynb: differs" in err and "ex01_formats" not in err and "make exercises" in err
    assert main(args) == 0 and main(args + ["--check"]) == 0

    # an exercise with no solution is reported
    write_nb(exs / "ex03_stale.ipynb", new_notebook())
    assert check_folders(sols, exs) == [
        f"{exs / 'ex03_stale.ipynb'}: no solution {sols / 'ex03_stale.ipynb'} (delete it or add the solution)"
    ]


def test_check_reports_solutions_with_outputs(tmp_path):
    sols, exs = tmp_path / "solutions", tmp_path / "exercises"
    write_nb(sols / "ex01_formats.ipynb", solution_notebook())  # has an output and a count
    write_exercises(sols, exs)
    problems = check_folders(sols, exs)
    assert len(problems) == 1 and "has outputs or execution counts" in problems[0]
    assert main(["--solutions", str(sols), "--exercises", str(exs), "--check"]) == 1


def test_cells_without_ids_get_stable_ids(tmp_path):
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_markdown_cell("y")])
    path = write_nb(tmp_path / "ex01_a.ipynb", nb)
    raw = path.read_text().replace(f'"id": "{nb.cells[0].id}",', "").replace(f'"id": "{nb.cells[1].id}",', "")
    path.write_text(raw)
    assert '"id"' not in raw
    assert exercise_text(path) == exercise_text(path)


def test_module_entry_point(tmp_path):
    sols = tmp_path / "solutions"
    write_nb(sols / "ex01_a.ipynb", new_notebook(cells=[new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")]))
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "nbhelpers.tooling.make_exercises", *a],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )

    assert run("--check").returncode == 1
    assert run().returncode == 0  # defaults: solutions/ and exercises/ in the current folder
    assert run("--check").returncode == 0


def test_repo_exercises_match_solutions():
    """The drift test: exercises/ must be what solutions/ generates."""
    sols, exs = REPO / "solutions", REPO / "exercises"
    if not any(sols.glob("*.ipynb")) and not any(exs.glob("*.ipynb")):
        pytest.skip("no notebooks in solutions/ or exercises/ yet")
    problems = check_folders(sols, exs)
    assert not problems, (
        "exercises/ is out of date with solutions/; run `make exercises` "
        "(python -m nbhelpers.tooling.make_exercises) and commit the result:\n  " + "\n  ".join(problems)
    )
