"""The chapters in notebooks/ are stored as one run from top to bottom: every code cell executed,
in order, in one kernel (execution counts 1, 2, 3, ... with none missing), no error output, and
every figure at the sharp size (nbhelpers.plots stores PNGs at ``PIXEL_RATIO`` times their page
size, with that size in the output's metadata). A reader who opens a chapter sees the outputs of the
code above them, and the website shows the same run."""

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def run_order_problems(nb) -> list[str]:
    """What keeps a notebook from reading as one run, top to bottom: a code cell not executed, one
    executed out of order or in another kernel (a count that is not the previous one plus one),
    an error output. Empty code cells count as not executed too."""
    problems = []
    expected = 1
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        count = cell.get("execution_count")
        if count != expected:
            problems.append(f"cell {i}: execution count {count}, expected {expected}")
            expected = (count or expected) + 1
        else:
            expected += 1
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                problems.append(f"cell {i}: an error output ({output.get('ename')})")
    return problems


def test_chapters_are_found():
    assert len(CHAPTERS) >= 12


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_stored_as_one_run_top_to_bottom(path):
    problems = run_order_problems(nbformat.read(path, as_version=4))
    assert not problems, f"{path.name} is not stored as one run from the top: " + "; ".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_figures_are_stored_sharp(path):
    plain = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if "image/png" in output.get("data", {}):
                shown = output.get("metadata", {}).get("image/png", {})
                if "width" not in shown:
                    plain.append(i)
    assert not plain, f"{path.name}: figures stored at 1x (no page size in their metadata) in cells {plain}"


def test_the_run_order_check_finds_each_fault():
    """The check above, on notebooks made to fail it one way each."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    good = new_notebook(
        cells=[new_markdown_cell("x"), new_code_cell("1", execution_count=1), new_code_cell("2", execution_count=2)]
    )
    assert run_order_problems(good) == []
    unexecuted_first = new_notebook(cells=[new_code_cell("0"), new_code_cell("1", execution_count=1)])
    assert run_order_problems(unexecuted_first)
    out_of_order = new_notebook(cells=[new_code_cell("1", execution_count=1), new_code_cell("2", execution_count=5)])
    assert run_order_problems(out_of_order)
    restarted = new_notebook(cells=[new_code_cell("1", execution_count=1), new_code_cell("2", execution_count=1)])
    assert run_order_problems(restarted)
    errored = new_notebook(
        cells=[
            new_code_cell(
                "1", execution_count=1, outputs=[new_output("error", ename="ValueError", evalue="x", traceback=[])]
            )
        ]
    )
    assert run_order_problems(errored) == ["cell 0: an error output (ValueError)"]
