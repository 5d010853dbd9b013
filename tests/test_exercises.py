"""Every chapter's exercises, from the table in exercise_table.py: the chapter lists what the
table says; the solutions pass with the public seed and a hidden one; every deliberately wrong
implementation fails and its report points at the function; a cheat that memorised the public
answers and falls back to a plausible mistake elsewhere fails with hidden seeds (so the random
cases alone reach every hard region); the solution notebook scores full marks and the untouched
exercise notebook runs to its end and scores zero. Chapter-specific tests live in
test_exercises_chNN.py."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest
from exercise_table import CHAPTERS, ChapterSpec
from helpers import SolutionNotebook

from nbhelpers.checks import cases_for, exercises_of, get_exercise, prepare_check, run_check

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("ex[0-9][0-9]_*.ipynb"))
BY_NAME = {spec.solution: spec for spec in CHAPTERS}


def chapter_id(spec: ChapterSpec) -> str:
    return f"ex{spec.chapter:02d}"


@functools.cache
def prepared(exercise_id: str, seed: int = 0) -> tuple[list, list]:
    """The cases and the reference's results of one exercise and seed, computed once for the many
    wrong answers checked against them."""
    return prepare_check(exercise_id, seed)


def solution(spec: ChapterSpec) -> SolutionNotebook:
    return SolutionNotebook(spec.solution, spec.namespace)


def test_every_chapter_has_an_entry():
    assert sorted(p.name for p in SOLUTIONS) == sorted(BY_NAME), (
        "every solutions/exNN_*.ipynb needs a ChapterSpec in tests/exercise_table.py (and only those)"
    )


@pytest.mark.parametrize("spec", CHAPTERS, ids=chapter_id)
def test_chapter_lists_its_exercises_and_points(spec):
    exercises = exercises_of(spec.chapter)
    assert [e.name for e in exercises] == list(spec.names)
    assert sum(e.points for e in exercises) == spec.points


@pytest.mark.parametrize("spec", CHAPTERS, ids=chapter_id)
def test_solutions_pass_in_process_with_a_hidden_seed(spec):
    """With seed 0 every solution passes in its notebook's check cells (nbval runs solutions/, and
    conftest.py fails a solution notebook that does not score full marks) and in
    test_the_harness_of_the_wrong_answers_passes_the_unchanged_solution; here, with another seed."""
    ns = solution(spec).functions()
    for ex in exercises_of(spec.chapter):
        result = run_check(ex, ns[ex.name], seed=spec.hidden_seed)
        assert result.passed, str(result)


WRONG = [(spec, name, old, new) for spec in CHAPTERS for name, old, new in spec.wrong]


@pytest.mark.parametrize(
    "spec,name,old,new", WRONG, ids=[f"{chapter_id(w[0])}-{w[1]}-{i}" for i, w in enumerate(WRONG)]
)
def test_wrong_implementations_fail(spec, name, old, new):
    # the verdict is all this asks, so the check stops at the first wrong case (see run_check)
    ex_id = f"{chapter_id(spec)}.{name}"
    result = run_check(
        ex_id, solution(spec).mutated(name, old, new), stop_at_first_failure=True, prepared=prepared(ex_id)
    )
    assert not result.passed and result.points == 0
    assert result.mismatches, "a failing check lists the first mismatching inputs"
    assert re.search(rf"{name}\(", result.mismatches[0])
    # failed on the check's verdict, not on the harness: a name the mutated cell cannot see
    assert "NameError" not in result.mismatches[0], result.mismatches[0]


# One control per exercise with wrong answers: the first wrong answer's target left as it is.
CONTROLS = list({(spec.chapter, name): (spec, name, old) for spec, name, old, _ in WRONG}.values())


@pytest.mark.parametrize("spec,name,old", CONTROLS, ids=[f"{chapter_id(c[0])}-{c[1]}" for c in CONTROLS])
def test_the_harness_of_the_wrong_answers_passes_the_unchanged_solution(spec, name, old):
    """The control of the wrong answers above: the solution, defined by the same harness that
    defines them (``mutated`` with the target left as it is) and checked the same way, passes.
    A wrong answer then fails because of its mistake, not because the harness cannot run the
    function (a helper defined in another cell of the notebook, say)."""
    ex_id = f"{chapter_id(spec)}.{name}"
    result = run_check(ex_id, solution(spec).mutated(name, old, old), prepared=prepared(ex_id))
    assert result.passed, str(result)


def case_key(value) -> tuple:
    """An exact, hashable key for a case's arguments: arrays by dtype, shape and bytes (an
    array's repr rounds and elides), generators by their state, floats by repr (which tells -0.0
    from 0.0)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.random.Generator):  # by its state: its repr names its address
        return ("Generator", repr(value.bit_generator.state))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(case_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, case_key(v)) for k, v in value.items())))
    return (type(value).__name__, repr(value))


CHEAT_SEEDS = (12345, 8142093377, 2**40 + 7)
PUBLIC_ANSWERS: dict[str, dict] = {}  # exercise id -> the solution's answer to each public case


@pytest.mark.parametrize(
    "spec,name,old,new", WRONG, ids=[f"{chapter_id(w[0])}-{w[1]}-{i}" for i, w in enumerate(WRONG)]
)
def test_memorised_public_cases_with_a_wrong_rule_fail_with_other_seeds(spec, name, old, new):
    """A cheat that answers the public (seed-0) cases from a table of the right answers and
    falls back to a plausible mistake everywhere else passes the public check, and must fail
    with every hidden seed: each mistake is caught by the random cases alone, not only by the
    fixed edge cases that every seed shares. (A cheat with a constant fallback is a weaker one.)"""
    ex = get_exercise(f"{chapter_id(spec)}.{name}")
    if ex.id not in PUBLIC_ANSWERS:  # the table, made once for every cheat of this exercise
        reference = solution(spec).functions()[name]
        table = {case_key((c.args, dict(c.kwargs))): reference(*c.args, **c.kwargs) for c in cases_for(ex, 0)}
        PUBLIC_ANSWERS[ex.id] = table
    answers = PUBLIC_ANSWERS[ex.id]
    wrong = solution(spec).mutated(name, old, new)
    right = solution(spec).functions()[name]

    def memorised(*args, **kwargs):
        key = case_key((args, kwargs))
        if key not in answers:
            return wrong(*args, **kwargs)
        if ex.returned_args:  # the check reads these arguments after the call: left as the solution leaves them
            right(*args, **kwargs)
        return answers[key]

    # its source is the wrong answer's, as the check reads it (an exercise whose statement gives the
    # function whole, a launcher, checks that it is the one given: Exercise.given)
    functools.update_wrapper(memorised, wrong)

    assert run_check(ex, memorised, seed=0, prepared=prepared(ex.id, 0)).passed
    for seed in CHEAT_SEEDS:
        verdict = run_check(ex, memorised, seed=seed, stop_at_first_failure=True, prepared=prepared(ex.id, seed))
        assert not verdict.passed, f"passes with seed {seed}"


# Whole notebooks, as a student runs them: nbval runs every notebook of solutions/ and exercises/
# in `make test`, and conftest.py fails the summary cell of a solution notebook that does not
# score full marks (or a check cell of one that does not pass) and of an exercise notebook that
# does not score zero (tests/test_repo_setup.py shows that it can).
