"""Every chapter's exercise notebooks: the solution scores full marks, the untouched exercise
notebook runs to the end and scores zero. New chapters are picked up automatically."""
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from nbhelpers.checks import exercises_of

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("ex[0-9][0-9]_*.ipynb"))


def run_notebook(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def chapter_of(path: Path) -> int:
    return int(re.match(r"ex(\d\d)_", path.name).group(1))


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_solution_scores_full_marks(solution):
    total = sum(e.points for e in exercises_of(chapter_of(solution)))
    assert total > 0, f"no exercises registered for {solution.name}"
    out = run_notebook(solution)
    assert f"TOTAL: {total}/{total} points" in out, out
    assert "FAIL" not in out and "TODO" not in out


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_untouched_exercise_runs_and_scores_zero(solution):
    exercise = ROOT / "exercises" / solution.name
    assert exercise.exists(), f"{exercise} missing: run `make exercises`"
    total = sum(e.points for e in exercises_of(chapter_of(solution)))
    out = run_notebook(exercise)
    assert f"TOTAL: 0/{total} points" in out, out
