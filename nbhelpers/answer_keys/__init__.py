"""The answer keys of the exercises, one module per chapter, and the registry that finds them.

The student's notebooks are in the repository's ``exercises/`` folder; what a check compares them
with is here. ``chNN.py`` holds the exercises of chapter NN (``ch01.py`` for the ``ex01.*`` exercises of
``solutions/ex01_*.ipynb``): its references (functions built on the tested engines of
nbhelpers), its case generators, and an ``EXERCISES`` list of
:class:`~nbhelpers.exercise_types.Exercise` objects in the order the notebook presents them.
A new chapter adds a module; nothing here changes.

Nothing imports the chapter modules up front: :func:`get_exercise` imports
``nbhelpers.answer_keys.chNN`` when an ``exNN.*`` id is asked for and reads its ``EXERCISES``
list, afresh on every call (so a re-imported or autoreloaded chapter module never raises).
The chapter modules import the types of :mod:`nbhelpers.exercise_types`, never this registry.
In the grader's sandbox only this file is visible here: the chapter modules (the reference
answers) are not, and every id is unknown there.
"""

from __future__ import annotations

import importlib

from ..exercise_types import EXERCISE_ID_RE, CheckerError, Exercise
from ..report_text import short_repr

__all__ = ["UnknownExerciseError", "chapter_module", "get_exercise", "exercises_of"]


class UnknownExerciseError(KeyError):
    """Raised by :func:`get_exercise` for an id that no chapter module lists."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0]) if self.args else ""


def chapter_module(chapter: int) -> str:
    """The name of a chapter's module: "nbhelpers.answer_keys.ch01" for chapter 1."""
    return f"{__name__}.ch{chapter:02d}"


def _chapter_exercises(chapter: int) -> dict[str, Exercise] | None:
    """id -> Exercise of a chapter, read from its module's ``EXERCISES`` list on every call (so a
    re-imported or autoreloaded module is read afresh, and reading twice never raises); None if
    the chapter has no module. A malformed list is a bug on the course's side: CheckerError."""
    name = chapter_module(chapter)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == name:  # only the chapter module itself missing; a missing import inside it is a bug
            return None
        raise
    listed = getattr(module, "EXERCISES", None)
    if not isinstance(listed, (list, tuple)):
        raise CheckerError(f"{name} must define EXERCISES, a list of Exercise objects")
    out: dict[str, Exercise] = {}
    for ex in listed:
        if not isinstance(ex, Exercise) or ex.chapter != chapter:
            raise CheckerError(f"{name}.EXERCISES holds {short_repr(ex)}, not an Exercise of chapter {chapter}")
        if ex.id in out:
            raise CheckerError(f"{name}.EXERCISES lists {ex.id!r} twice")
        out[ex.id] = ex
    return out


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id, from its chapter module's ``EXERCISES`` list."""
    m = EXERCISE_ID_RE.match(exercise_id) if isinstance(exercise_id, str) else None
    if m is None:
        raise UnknownExerciseError(
            f"unknown exercise {exercise_id!r}: ids look like 'ex01.decode_bits' (chapter, dot, function name)"
        )
    chapter = int(m.group(1))
    exercises = _chapter_exercises(chapter)
    if exercises is None:
        raise UnknownExerciseError(
            f"unknown exercise {exercise_id!r}: chapter {chapter} has no exercises "
            f"(no module {chapter_module(chapter)})"
        )
    if exercise_id in exercises:
        return exercises[exercise_id]
    raise UnknownExerciseError(f"unknown exercise {exercise_id!r}; known: {', '.join(exercises) or 'none'}")


def exercises_of(chapter: int) -> list[Exercise]:
    """The exercises of a chapter, in the order of its module's ``EXERCISES`` list."""
    return list((_chapter_exercises(chapter) or {}).values())
