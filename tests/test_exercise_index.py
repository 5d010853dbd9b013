"""What each exercise asks, and the website's index of the exercises and problems.

Every exercise that a chapter module of nbhelpers.answer_keys lists states its kind (predict,
construct or implement: nbhelpers.exercise_types.ExerciseKind). The index page (exercises.md,
written by site/build.py with site/exercise_index.py) reads the answer keys' source without
importing them: what it reads is what importing them gives, and what it cannot read stops it
with the line. It reads each chapter's problems from its notebook: as many as the cell that
checks their answers prints and as the folded answers hold. tests/test_site.py reads the page.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from nbhelpers.exercise_types import Case, Exercise, ExerciseKind

ROOT = Path(__file__).resolve().parents[1]
ANSWER_KEYS = sorted((ROOT / "nbhelpers" / "answer_keys").glob("ch[0-9][0-9].py"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def load_index():
    """site/exercise_index.py (site/ is not a package)."""
    spec = importlib.util.spec_from_file_location("exercise_index", ROOT / "site" / "exercise_index.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


index = load_index()


def imported(path: Path) -> list[Exercise]:
    return list(importlib.import_module(f"nbhelpers.answer_keys.{path.stem}").EXERCISES)


def test_there_are_answer_keys_and_chapters():
    assert len(ANSWER_KEYS) >= 11 and len(NOTEBOOKS) >= len(ANSWER_KEYS)


@pytest.mark.parametrize("path", ANSWER_KEYS, ids=lambda p: p.stem)
def test_every_exercise_states_what_it_asks(path):
    exercises = imported(path)
    assert exercises
    missing = [e.id for e in exercises if e.kind is None]
    assert not missing, (
        f"{path.name}: give these exercises kind=ExerciseKind.PREDICT, CONSTRUCT or IMPLEMENT "
        f"(what the statement asks the student to do): {missing}"
    )
    assert all(isinstance(e.kind, ExerciseKind) for e in exercises)


def _exercise(**kwargs) -> Exercise:
    return Exercise("ex01.twice", "Twice", 1, lambda x: 2 * x, lambda rng: [Case((1,))], **kwargs)


def test_a_kind_is_one_of_three_given_as_the_enum_or_its_value():
    assert _exercise().kind is None
    assert _exercise(kind=ExerciseKind.PREDICT).kind is ExerciseKind.PREDICT
    assert _exercise(kind="construct").kind is ExerciseKind.CONSTRUCT
    with pytest.raises(ValueError, match=r"ex01\.twice: kind must be .*'predict', 'construct', 'implement'.*'guess'"):
        _exercise(kind="guess")


@pytest.mark.parametrize("path", ANSWER_KEYS, ids=lambda p: p.stem)
def test_the_index_reads_an_answer_key_as_importing_it_gives(path):
    read = index.read_exercises(path.read_text(encoding="utf-8"), path.name)
    assert [(e.id, e.title, e.points, e.kind) for e in read] == [
        (e.id, e.title, e.points, e.kind.value if e.kind else None) for e in imported(path)
    ]
    assert read and all(e.chapter == path.stem[2:] for e in read)


CALL = 'Exercise("ex01.f", "Title", 3, f_ref, cases, kind=ExerciseKind.PREDICT)'


@pytest.mark.parametrize(
    "source,message",
    [
        ("X = 1\n", "no EXERCISES list"),
        ("EXERCISES = make()\n", "not a list written out"),
        (f"EXERCISES = [\n    {CALL},\n    helper(),\n]\n", r":3: an element .* not an Exercise"),
        ('EXERCISES = [Exercise("ex01.f", TITLE, 3, f_ref, cases)]\n', r":1: title=TITLE is not a literal str"),
        ('EXERCISES = [Exercise("ex01.f", "T", 3.0, f_ref, cases)]\n', r"points=3\.0 is not a literal int"),
        ('EXERCISES = [Exercise(id="ex01.f", title="T")]\n', "without points"),
        (
            f"EXERCISES = [{CALL.replace('ExerciseKind.PREDICT', 'KIND')}]\n",
            r"kind=KIND is none of ExerciseKind\.PREDICT",
        ),
        (f"EXERCISES = [{CALL.replace('PREDICT', 'GUESS')}]\n", "kind=ExerciseKind.GUESS is none of"),
    ],
)
def test_the_index_stops_at_what_it_cannot_read_and_names_the_line(source, message):
    with pytest.raises(index.NotReadable, match=message):
        index.read_exercises(source, "chXX.py")


def test_the_index_reads_keywords_and_a_kind_given_as_its_value():
    source = 'EXERCISES = [Exercise(points=2, title="T", id="ex07.g", reference=g, cases=c, kind="implement")]\n'
    [read] = index.read_exercises(source)
    assert (read.id, read.title, read.points, read.kind, read.name) == ("ex07.g", "T", 2, "implement", "g")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_index_finds_every_problem_of_a_chapter(path):
    """As many problems, numbered 1, 2, ..., as the cell that checks the answers prints
    ("1.", "2.", ...) and as the folded answers hold; none in a chapter without that cell."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    problems = index.read_problems(notebook, path.name)
    cells = ["".join(c["source"]) for c in notebook["cells"]]
    checks = [c for c in cells if index.ANSWER_CHECK in c]
    if not checks:
        assert problems == []
        return
    [check] = checks
    printed = sorted({int(n) for n in re.findall(r'"(\d+)\.', check)})
    assert [p.number for p in problems] == printed
    markdown = next(c for c in reversed(cells[: cells.index(check)]) if index.PROBLEMS_HEADING.search(c))
    answers = markdown.split("<details", 1)[1]
    assert [int(n) for n in index.PROBLEM_ITEM.findall(answers)] == printed
    for problem in problems:  # each problem's text, whole, as the notebook words it
        assert problem.text and "<details" not in problem.text
        assert " ".join(markdown.split()).count(problem.text) == 1


def test_a_problems_cell_that_the_index_cannot_read_stops_it():
    def notebook(markdown: str) -> dict:
        check = {"cell_type": "code", "source": ["# NBVAL_CHECK_OUTPUT\n", "# checking the answers\n", "print(1)"]}
        return {"cells": [{"cell_type": "markdown", "source": [markdown]}, check]}

    assert [p.number for p in index.read_problems(notebook("## Problems\n1. a\n2. b\n<details>1. x</details>"))] == [
        1,
        2,
    ]
    with pytest.raises(index.NotReadable, match="no 'Problems' heading"):
        index.read_problems(notebook("## Summary\n1. a\n"))
    with pytest.raises(index.NotReadable, match="not numbered 1, 2, 3"):
        index.read_problems(notebook("## Problems\n1. a\n3. b\n"))
    with pytest.raises(index.NotReadable, match="not numbered 1, 2, 3"):
        index.read_problems(notebook("## Problems\nNo questions.\n"))


def test_the_page_lists_every_chapter_with_exercises_or_problems():
    page = index.index_page(ROOT)
    exercises = {path.stem[2:]: imported(path) for path in ANSWER_KEYS}
    sections = re.split(r"^## ", page, flags=re.MULTILINE)[1:]
    for section in sections:
        chapter = section[:2]
        listed = exercises.get(chapter, [])
        rows = re.findall(r"^\| (\d+) \| (.+) \(`(\w+)`\) \| (\w*) \| (\d+) \|$", section, re.MULTILINE)
        assert rows == [
            (str(i), e.title, e.name, e.kind.value if e.kind else "", str(e.points)) for i, e in enumerate(listed, 1)
        ]
    assert sorted(s[:2] for s in sections) == sorted(
        set(exercises) | {p.name[:2] for p in NOTEBOOKS if index.read_problems(json.loads(p.read_text("utf-8")))}
    )


def test_a_problems_links_are_rewritten_for_the_index_at_the_sites_root():
    text = (
        "an [e4m3fn](../site/glossary.md#fn-fnu-fnuz) value, [chapter 02](02_accumulation_error.ipynb#x), "
        "[section 3](#3-scales) and [a paper](https://example.org/a(b)"
    )
    assert index.from_root(text, "notebooks/06_scaled_int8_fp8_gemm.ipynb") == (
        "an [e4m3fn](site/glossary.md#fn-fnu-fnuz) value, [chapter 02](notebooks/02_accumulation_error.ipynb#x), "
        "[section 3](notebooks/06_scaled_int8_fp8_gemm.ipynb#3-scales) and [a paper](https://example.org/a(b)"
    )


def test_no_link_on_the_index_page_climbs_out_of_the_sites_root():
    page = index.index_page(ROOT)
    climbing = re.findall(r"\]\((\.\./[^)]*)\)", page)
    assert not climbing, climbing
