"""Exercise checks: run a student's function against the reference in nbhelpers.

An :class:`~nbhelpers.exercise_types.Exercise` names a reference function and a generator of
:class:`~nbhelpers.exercise_types.Case` objects (fixed edge cases first, then random ones drawn
from a seeded generator). :func:`run_check` calls the student's function and the reference on
deep copies of every case's arguments and compares the results with the exercise's ``compare``
(bit-exact :func:`~nbhelpers.comparators.same_value` by default). It is a plain library call,
data in and a :class:`CheckResult` out. The judging itself is :func:`score` (expected results and
what the function gave in, a :class:`CheckResult` out), which an instructor's grader
(:mod:`nbhelpers.grade`) calls on results it collected from a student's kernel, so a notebook
and the grader award the same points for the same answers.

:func:`check` is the thin layer a notebook's check cell uses: it runs the check, prints the
report, keeps the latest result per exercise for :func:`summary`, and never raises.

This module is also the one import a notebook or an exercise needs: it re-exports the types
(:mod:`nbhelpers.exercise_types`), the comparators (:mod:`nbhelpers.comparators`) and the
registry (:func:`~nbhelpers.answer_keys.get_exercise`, :func:`~nbhelpers.answer_keys.exercises_of`,
which read a chapter module's ``EXERCISES`` list afresh on every call).

A student's bug never escapes: any exception (``SystemExit`` included; only
``KeyboardInterrupt`` goes through, so a stuck function can be interrupted) counts as a failed
case. A bug on the course's side (the case generator or the reference raising) raises
:class:`CheckerError` from :func:`run_check`; :func:`check` prints it instead.
"""

from __future__ import annotations

import copy
import enum
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .answer_keys import UnknownExerciseError, exercises_of, get_exercise
from .call_watch import READ_FINDINGS, CallWatch, parse_names
from .comparators import close_to, float_array, same_value, same_value_up_to_zero_sign
from .exercise_types import AfterCall, Case, CheckerError, Exercise, code_shape
from .report_text import REPR_LIMIT, describe_exception, describe_parts, short_repr, truncate
from .top_level import outside_names, outside_of

__all__ = [
    "Case",
    "Exercise",
    "CheckResult",
    "CheckerError",
    "UnknownExerciseError",
    "same_value",
    "CheckStatus",
    "same_value_up_to_zero_sign",
    "close_to",
    "float_array",
    "get_exercise",
    "exercises_of",
    "cases_for",
    "expected_outputs",
    "Raised",
    "score",
    "prepare_check",
    "forbidden_verdict",
    "given_verdict",
    "GIVEN_CHANGED",
    "source_of",
    "FORBIDDEN_CALL",
    "run_check",
    "check",
    "summary",
    "reset_scoreboard",
    "MAX_MISMATCHES",
    "REPR_LIMIT",
]

MAX_MISMATCHES = 5  # failing cases listed in a result
_VALUE_LIMIT = 80  # characters kept of one argument or result in a mismatch line

_SCOREBOARD: dict[str, CheckResult] = {}  # id -> latest result of check()


# ---------------------------------------------------------------------------------------------
# What a check concludes
# ---------------------------------------------------------------------------------------------


class CheckStatus(enum.StrEnum):
    """What a check concluded. A ``str`` subclass whose value is the word a report prints, so
    results compare equal to "PASS" etc. and go into JSON and CSV files as that word."""

    # what a check cell (and the grader) concludes
    PASS = "PASS"  # every case gave the expected result
    FAIL = "FAIL"  # some case gave another result, raised, or was not run
    TODO = "TODO"  # the first case raised NotImplementedError: not written yet
    ERROR = "ERROR"  # unknown exercise, or a bug on the course's side
    # what only the grader (nbhelpers.grading) concludes, running a submission in its own kernel
    TIMEOUT = "TIMEOUT"  # the function's calls ran past the grader's time limit
    DIED = "DIED"  # the kernel died while the function was checked
    MISSING = "MISSING"  # the notebook does not define the function
    NOT_RUN = "NOT RUN"  # not checked at all (the submission ran out of time, ...)


@dataclass
class CheckResult:
    """The outcome of checking one function against one exercise.

    status: a :class:`CheckStatus`; a check cell gives PASS, FAIL, TODO (raised
    NotImplementedError on the first case) or ERROR (unknown exercise, or a bug on the course's
    side); the grader also TIMEOUT, DIED, MISSING or NOT RUN. Points are all or nothing.
    """

    exercise_id: str
    title: str
    points: int
    max_points: int
    n_cases: int
    n_failed: int
    mismatches: list[str] = field(default_factory=list)
    error: str | None = None
    status: CheckStatus | str = ""

    def __post_init__(self) -> None:
        if not self.status:
            self.status = CheckStatus.PASS if self.passed else CheckStatus.FAIL
        self.status = CheckStatus(self.status)

    @property
    def passed(self) -> bool:
        return self.error is None and self.n_failed == 0 and self.n_cases > 0

    def to_dict(self) -> dict:
        """A JSON-serialisable dict of the fields, plus ``passed``."""
        d = asdict(self)
        d["status"] = self.status.value
        d["passed"] = self.passed
        return d

    def __str__(self) -> str:
        head = f"{self.status:<5} {self.exercise_id}  {self.points}/{self.max_points} points"
        if self.status is CheckStatus.PASS:
            return f"{head}  ({self.n_cases} cases)"
        if self.status is CheckStatus.TODO:
            return f"{head}  (not implemented yet)"
        if self.status is CheckStatus.ERROR or (self.error and not self.mismatches):
            return f"{head}  ({self.error})"
        lines = [f"{head}  ({self.n_failed} of {self.n_cases} cases failed)"]
        if self.error:
            lines.append(f"  first exception: {self.error}")
        if self.mismatches:
            lines.append("  first mismatches:")
            lines += [f"    {m}" for m in self.mismatches]
        return "\n".join(lines)

    def __repr__(self) -> str:  # short, so a check cell's Out[] does not repeat the report
        return f"<CheckResult {self.status} {self.exercise_id} {self.points}/{self.max_points} points>"


# ---------------------------------------------------------------------------------------------
# Running a check
# ---------------------------------------------------------------------------------------------


def cases_for(exercise: Exercise | str, seed: int = 0) -> list[Case]:
    """The cases :func:`run_check` uses for this seed (same seed, same cases)."""
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    try:
        cases = list(ex.cases(np.random.default_rng(seed)))
    except Exception as e:
        raise CheckerError(f"{ex.id}: the case generator raised {describe_exception(e)}") from e
    out = []
    for c in cases:
        if isinstance(c, tuple):
            c = Case(c)
        if not isinstance(c, Case):
            raise CheckerError(f"{ex.id}: the case generator returned a {type(c).__name__}, not a Case")
        out.append(c)
    if not out:
        raise CheckerError(f"{ex.id}: the case generator returned no cases")
    return out


def _copy_args(ex: Exercise, case: Case) -> tuple[tuple, dict]:
    try:
        return copy.deepcopy(case.args), copy.deepcopy(dict(case.kwargs))
    except Exception as e:
        raise CheckerError(f"{ex.id}: cannot copy the arguments of a case ({describe_exception(e)})") from e


def _call_quietly(fn: Callable, args: tuple, kwargs: dict, watch: CallWatch | None = None) -> Any:
    """fn(*args, **kwargs) with numpy's floating-point warnings and all warnings silenced, and
    ``watch`` (if any) on during the call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            if watch is None:
                return fn(*args, **kwargs)
            with watch:
                return fn(*args, **kwargs)


def _call_text(ex: Exercise, case: Case) -> str:
    parts = [short_repr(a, _VALUE_LIMIT) for a in case.args]
    parts += [f"{k}={short_repr(v, _VALUE_LIMIT)}" for k, v in case.kwargs.items()]
    return truncate(f"{ex.name}({', '.join(parts)})", 2 * _VALUE_LIMIT)


def _with_label(text: str, case: Case) -> str:
    return f"{text}  [{case.label}]" if case.label else text


@dataclass(frozen=True)
class Raised:
    """What a call raised instead of returning, as a report shows it.

    description: "ZeroDivisionError: division by zero" (truncated like every message).
    not_implemented: the exception was a NotImplementedError (an exercise still to do).
    """

    description: str
    not_implemented: bool = False

    @classmethod
    def from_exception(cls, e: BaseException) -> Raised:
        return cls(describe_exception(e), isinstance(e, NotImplementedError))

    @classmethod
    def from_parts(cls, type_name: str, message: str, not_implemented: bool = False) -> Raised:
        """The same as :meth:`from_exception` for an exception known only by name and message
        (one raised in another process)."""
        return cls(describe_parts(str(type_name), str(message)), bool(not_implemented))


def expected_outputs(exercise: Exercise | str, cases: list[Case]) -> list:
    """The reference's result for every case, each computed on its own deep copy of the arguments.

    Raises :class:`CheckerError` when the reference fails (a bug on the course's side).
    """
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    expected = []
    for case in cases:
        args, kwargs = _copy_args(ex, case)
        try:
            expected.append(_call_quietly(ex.reference, args, kwargs))
        except Exception as e:
            raise CheckerError(
                f"{ex.id}: the reference raised {describe_exception(e)} on {_call_text(ex, case)}"
            ) from e
    return expected


def score(
    exercise: Exercise | str, cases: list[Case], expected: list, got: list, *, together: bool = True
) -> CheckResult:
    """Compare what a function gave with the expected results and award the points.

    ``got[i]`` is what the function returned for ``cases[i]``, or a :class:`Raised` when it
    raised. ``got`` may be shorter than ``cases``: the cases without an entry were not run and
    count as failed. A :class:`Raised` with ``not_implemented`` on the first case makes the
    result "TODO". This is the one place where results are judged, for :func:`run_check` in a
    notebook and for an instructor's grader that ran the function elsewhere. When every case
    passes, the exercise's ``compare_all`` (if any) judges the answers together; ``together=False``
    skips it (a caller that scores one case of many).
    """
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    if len(expected) != len(cases) or len(got) > len(cases):
        raise ValueError(f"{ex.id}: {len(cases)} cases, {len(expected)} expected results, {len(got)} results")

    def result(
        n_failed: int, mismatches: list[str], error: str | None, status: CheckStatus | None = None
    ) -> CheckResult:  # None: PASS or FAIL, from the cases
        points = ex.points if n_failed == 0 and error is None and status is None else 0
        return CheckResult(ex.id, ex.title, points, ex.points, len(cases), n_failed, mismatches, error, status)

    if got and isinstance(got[0], Raised) and got[0].not_implemented:
        return result(len(cases), [], got[0].description, CheckStatus.TODO)
    n_failed = len(cases) - len(got)  # not run
    mismatches: list[str] = []
    first_error: str | None = None
    for case, exp, g in zip(cases, expected, got):
        if isinstance(g, Raised):
            n_failed += 1
            first_error = first_error or g.description
            if len(mismatches) < MAX_MISMATCHES:
                mismatches.append(_with_label(f"{_call_text(ex, case)} raised {g.description}", case))
            continue
        try:
            reason = ex.compare(g, exp)
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            reason = f"could not compare: {describe_exception(e)}"
        if reason is not None:
            n_failed += 1
            if len(mismatches) < MAX_MISMATCHES:
                text = (
                    f"{_call_text(ex, case)} returned {short_repr(g, _VALUE_LIMIT)}, "
                    f"expected {short_repr(exp, _VALUE_LIMIT)} ({truncate(str(reason))})"
                )
                mismatches.append(_with_label(text, case))
    if first_error is None and n_failed and len(got) < len(cases):
        first_error = f"{len(cases) - len(got)} of {len(cases)} cases were not run"
    if together and n_failed == 0 and first_error is None and ex.compare_all is not None:
        try:
            reason = ex.compare_all(list(expected), list(got))
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            reason = f"could not compare the answers together: {describe_exception(e)}"
        if reason is not None:
            text = f"every case alone passed; {ex.name}(...) across the cases: {truncate(str(reason))}"
            return result(1, [text], None)
    return result(n_failed, mismatches, first_error)


#: How the error of a function that called what its exercise forbids begins (see forbidden_verdict).
FORBIDDEN_CALL = "forbidden call: "


def forbidden_verdict(exercise: Exercise | str, n_cases: int, seen: list[str] | set[str]) -> CheckResult | None:
    """The result of a function that called what its exercise forbids (``seen``: what a
    :class:`~nbhelpers.call_watch.CallWatch` noted while it ran), or None when it noted nothing.
    No points, whatever the answers were: one place for the check cell and the grader."""
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    if not seen:
        return None
    calls = sorted(s for s in seen if ":" in s and " " not in s)
    # what the reading of the code found (its names, what it uses past its tools) before what the
    # watch saw it do, which a route the reading names often shows too
    hidden = sorted((s for s in seen if s not in calls), key=lambda s: (not s.startswith(READ_FINDINGS), s))
    parts = []
    if calls:
        names = ", ".join(calls[:3]) + (f" and {len(calls) - 3} more" if len(calls) > 3 else "")
        parts.append(
            f"called {names}, which this exercise does not allow (they compute its answer; the statement names them)"
        )
    parts += hidden[:3]
    error = f"{FORBIDDEN_CALL}{ex.name} " + "; ".join(parts) + ": no points"
    return CheckResult(ex.id, ex.title, 0, ex.points, n_cases, n_cases, [], truncate(error, 600), CheckStatus.FAIL)


#: How the error of a function whose given code was changed begins (see given_verdict).
GIVEN_CHANGED = "given code changed: "


def given_verdict(exercise: Exercise | str, n_cases: int, source: str | None) -> CheckResult | None:
    """The result of a function whose statement gives it whole (:attr:`Exercise.given`, a launcher
    around the student's kernel) when its code (``source``) is not the one given, or cannot be
    read; None when it is, or when nothing is given. No points, whatever the answers were: one
    place for the check cell and the grader."""
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    if not ex.given:
        return None
    if isinstance(source, str) and code_shape(source) == code_shape(ex.given):
        return None
    why = "its source could not be read" if not isinstance(source, str) else "its code is not the one given"
    error = (
        f"{GIVEN_CHANGED}{ex.name} is given by the statement and must stay as given ({why}); write only "
        "what the statement asks for: no points"
    )
    return CheckResult(ex.id, ex.title, 0, ex.points, n_cases, n_cases, [], error, CheckStatus.FAIL)


def source_of(fn: Callable) -> str | None:
    """The source of a function as ``inspect`` reads it (a notebook cell's included), or None."""
    import inspect

    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def prepare_check(exercise: Exercise | str, seed: int = 0) -> tuple[list[Case], list]:
    """The cases of a check with ``seed`` and the reference's result for each: what
    :func:`run_check` computes before it calls the function, for a caller that checks many
    functions against one exercise and seed (``run_check(..., prepared=...)``)."""
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    cases = cases_for(ex, seed)
    return cases, expected_outputs(ex, cases)


def _clear_caches(forbidden) -> None:
    """Empty the caches (``functools.cache``, ``lru_cache``) of the course's forbidden modules:
    the reference may have filled them for these very cases, and a cache hit runs no Python
    frame, so a student's call of a cached forbidden function would pass unseen by the watch."""
    import sys

    modules = {m for m, _ in parse_names(forbidden) if m == "nbhelpers" or m.startswith("nbhelpers.")}
    for name, module in list(sys.modules.items()):
        if module is None or not any(name == m or name.startswith(m + ".") for m in modules):
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == name:
                clear()


class _Sealed:
    """What :func:`run_check` holds while the student's function runs: the cases and the
    expected results, behind a repr and str that show nothing. A function can read the locals
    of the frames below it by repr without naming a frame's insides
    (``traceback.StackSummary.extract(..., capture_locals=True)``); it finds this there, not the
    answers."""

    __slots__ = ("_held",)

    def __init__(self, held: tuple[list[Case], list]):
        self._held = held

    def __repr__(self) -> str:
        return "<the check's cases and answers>"

    __str__ = __repr__

    def unseal(self) -> tuple[list[Case], list]:
        return self._held


def run_check(
    exercise: Exercise | str,
    fn: Callable,
    seed: int = 0,
    *,
    stop_at_first_failure: bool = False,
    prepared: tuple[list[Case], list] | None = None,
    watch: bool = True,
    outside: dict[str, str] | None = None,
) -> CheckResult:
    """Run every case of the exercise through ``fn`` and the reference; never raises on a bug of fn.

    Each call gets its own deep copy of the case's arguments, so fn cannot change what the
    reference sees (a ``np.random.Generator`` argument is copied with its state, so both draw
    the same numbers). Raises :class:`UnknownExerciseError` for an unknown id and
    :class:`CheckerError` when the course's case generator or reference fails.

    ``stop_at_first_failure``: stop calling ``fn`` at the first case it gets wrong (the cases
    after it count as not run). The verdict is the same, since one wrong case fails the check;
    the report lists only that case. For a caller that needs only the verdict (the course's own
    tests of wrong answers), not for a student's report. ``prepared``: what
    :func:`prepare_check` returned for this exercise and seed (the reference is not run again;
    the function never sees these objects, only copies of the arguments). ``watch``: watch the
    function's calls for what the exercise forbids (:attr:`Exercise.forbidden`: a function that
    calls it scores nothing, :func:`forbidden_verdict`); False only for the course's own tests of
    a reference against itself. The grader always watches. ``outside``: for an exercise that
    lists its tools, the notebook's top-level names whose values came from modules outside them
    (:func:`nbhelpers.top_level.outside_names`; :func:`check` reads them from the cells the
    kernel ran): a function that reads one scores nothing, as one that uses such a module does.
    """
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    if not callable(fn):
        return CheckResult(ex.id, ex.title, 0, ex.points, 0, 0, [], f"expected a function, got {type(fn).__name__}")
    # all before the first call of fn, which cannot touch them; no local of this frame holds the
    # expected results while fn runs (only the sealed copy, whose repr shows nothing)
    sealed = _Sealed(prepare_check(ex, seed) if prepared is None else prepared)
    prepared = None
    cases = sealed.unseal()[0]
    verdict = given_verdict(ex, len(cases), source_of(fn) if ex.given else None)
    if verdict is not None:
        return verdict
    watcher = CallWatch(ex.forbidden if watch else (), ex.allowed, ex.tools if watch else None, outside)
    if watcher:
        _clear_caches(ex.forbidden)
        watcher.audit(fn)
    got: list = []
    for i, case in enumerate(cases):
        args, kwargs = _copy_args(ex, case)
        try:
            value = _call_quietly(fn, args, kwargs, watcher)
            got.append(AfterCall(value, tuple(args[j] for j in ex.returned_args)) if ex.returned_args else value)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # SystemExit and custom BaseExceptions are a student's bug too
            got.append(Raised.from_exception(e))
            if (i == 0 and isinstance(e, NotImplementedError)) or stop_at_first_failure:
                break  # not written yet: one call is enough
            continue
        if (
            stop_at_first_failure
            and score(ex, cases[i : i + 1], sealed.unseal()[1][i : i + 1], got[-1:], together=False).points == 0
        ):
            break
    verdict = forbidden_verdict(ex, len(cases), watcher.seen)
    return verdict if verdict is not None else score(ex, cases, sealed.unseal()[1], got)


def names_made_outside(ex: Exercise) -> dict[str, str] | None:
    """For an exercise that lists its tools, the top-level names of the notebook this kernel runs
    (IPython's record of the cells it ran, ``In``) whose values came from modules outside them
    (:func:`nbhelpers.top_level.outside_names`); None elsewhere (no tools, or not in IPython)."""
    if ex.tools is None:
        return None
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        return None
    ran = getattr(shell, "user_ns", {}).get("In") if shell is not None else None
    if not isinstance(ran, list):
        return None
    cells = [(i, src) for i, src in enumerate(ran) if isinstance(src, str) and src.strip()]
    return outside_names(cells, outside_of(ex.tools), label=lambda i: f"In [{i}]")


def check(exercise_id: str, fn: Callable, seed: int = 0) -> CheckResult:
    """Check ``fn`` against an exercise, print the report, record it for :func:`summary`.

    Never raises (except on KeyboardInterrupt): an unknown id or a failure on the course's
    side is printed and returned as a result with ``status == "ERROR"`` and 0 points.
    """
    ex_id = exercise_id.id if isinstance(exercise_id, Exercise) else str(exercise_id)
    try:
        ex = exercise_id if isinstance(exercise_id, Exercise) else get_exercise(exercise_id)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        msg = str(e) if isinstance(e, UnknownExerciseError) else f"cannot load exercise: {describe_exception(e)}"
        res = CheckResult(ex_id, "", 0, 0, 0, 0, [], msg, CheckStatus.ERROR)
        print(str(res))
        return res
    try:
        res = run_check(ex, fn, seed, outside=names_made_outside(ex))
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        detail = str(e) if isinstance(e, CheckerError) else describe_exception(e)
        res = CheckResult(
            ex.id,
            ex.title,
            0,
            ex.points,
            0,
            0,
            [],
            f"the checker itself failed (not your fault; tell the instructor): {detail}",
            CheckStatus.ERROR,
        )
    _SCOREBOARD[ex.id] = res
    print(str(res))
    return res


def summary(chapter: int) -> dict:
    """Print one line per exercise of the chapter and the total; return the points.

    Exercises not checked yet count as 0. Returns ``{"earned", "max", "exercises": {id: points}}``.
    """
    exercises = exercises_of(chapter)
    rows = []
    for ex in exercises:
        res = _SCOREBOARD.get(ex.id)
        status = res.status if res is not None else "not checked"
        earned = res.points if res is not None else 0
        rows.append((status, ex.id, ex.title, f"{earned}/{ex.points}", earned))
    print(f"Chapter {chapter} exercises")
    if not rows:
        print("  (no exercises)")
    w = [max((len(r[k]) for r in rows), default=0) for k in range(4)]
    for r in rows:
        print(f"  {r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]:>{w[3]}}")
    earned = sum(r[4] for r in rows)
    total = sum(ex.points for ex in exercises)
    print(f"TOTAL: {earned}/{total} points")
    return {"earned": earned, "max": total, "exercises": {r[1]: r[4] for r in rows}}


def reset_scoreboard() -> None:
    """Forget every result recorded by :func:`check`."""
    _SCOREBOARD.clear()
