"""The glossary links of the chapters (nbhelpers/tooling/glossary_links.py): every term is an entry
of site/glossary.md and every entry a term; a term's first use in prose is linked, once per
chapter, never inside code, math, headings, tables or links; a second run changes nothing; and
the committed notebooks are up to date with the table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nbhelpers.tooling import glossary_links as gl

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LINK = re.compile(r"\]\(\.\./site/glossary\.md#([^)]*)\)")


def markdown_sources(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def test_every_term_is_an_entry_and_every_entry_a_term():
    anchors = gl.glossary_anchors()
    assert len(anchors) == len(set(anchors)), "an anchor of the glossary page is used twice"
    gl.check_terms(anchors)  # raises for a term without an entry
    assert sorted(anchors) == sorted(t.anchor for t in gl.TERMS)
    assert len(anchors) >= 40


def test_check_terms_names_a_missing_entry():
    with pytest.raises(ValueError, match="kv-cache"):
        gl.check_terms([a for a in gl.glossary_anchors() if a != "kv-cache"])


def test_the_first_use_in_prose_is_linked_once_and_nothing_else():
    cells = [
        "# The epilogue, a heading\n\nA `epilogue` in code, $epilogue$ in math, and\n"
        "[the epilogue](https://example.org) already a link.\n\n| epilogue | table |\n|---|---|\n",
        "```python\nepilogue = 1\n```\nHere the epilogue is prose, and a second epilogue is not linked.",
        "A later cell's epilogue stays plain too.",
    ]
    out, placed = gl.link_cells(cells, "09")
    assert out[0] == cells[0]
    assert out[1] == (
        "```python\nepilogue = 1\n```\nHere the [epilogue](../site/glossary.md#epilogue) is prose, and a "
        "second epilogue is not linked."
    )
    assert out[2] == cells[2]
    assert placed == {"epilogue": 1}


def test_a_term_broken_over_two_lines_is_found_and_a_long_line_is_broken_outside_the_link():
    text = "Intro words. " + "x" * 70 + " and then a loss\n  scaling step, and `code span here` ends."
    (out,), _ = gl.link_cells([text], "05")
    assert "[loss\n  scaling](../site/glossary.md#loss-scaling)" in out
    assert all(len(line) <= gl.MAX_COLUMNS for line in out.splitlines())
    assert gl.unlink(out).replace("\n", " ").split() == text.replace("\n", " ").split()


def test_a_hand_written_link_to_the_glossary_is_kept_and_counts():
    text = "See [the last step](../site/glossary.md#epilogue); the epilogue casts."
    (out,), placed = gl.link_cells([text], "06")
    assert out == text and "epilogue" not in placed


def test_skipped_chapters_and_citations_are_left_alone():
    (out,), _ = gl.link_cells(["Multiply the loss by a scale `S`."], "05")
    assert "glossary" not in out  # chapter 05's scale is the loss scale
    citations = gl._load_citations()
    text = "the OCP Microscaling Formats (MX) v1.0 specification says so; MX blocks are 32 long"
    (out,), _ = gl.link_cells([text], "07", citations)
    assert out.startswith("the OCP Microscaling Formats (MX) v1.0 specification says so; [MX](")


def test_linking_twice_changes_nothing():
    citations = gl._load_citations()
    for path in NOTEBOOKS:
        once, _ = gl.link_cells(markdown_sources(path), gl.chapter_number(path), citations)
        twice, _ = gl.link_cells(once, gl.chapter_number(path), citations)
        assert twice == once, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_committed_notebooks_are_linked(path):
    """The chapters as committed are what the script makes of them: run
    `python -m nbhelpers.tooling.glossary_links` after editing a chapter's prose."""
    changed, placed = gl.link_notebook(path, write=False, citations=gl._load_citations())
    assert not changed, f"{path.name}: run python -m nbhelpers.tooling.glossary_links"
    assert placed, f"{path.name} links no glossary term"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_glossary_link_names_an_entry_at_most_once(path):
    anchors = set(gl.glossary_anchors())
    found = [a for source in markdown_sources(path) for a in LINK.findall(source)]
    assert not [a for a in found if a not in anchors], f"{path.name}: links to no entry"
    assert len(found) == len(set(found)), f"{path.name}: a term linked twice"
