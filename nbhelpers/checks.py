"""Exercise checks: run a student's function against the reference in nbhelpers.

An :class:`Exercise` names a reference function and a generator of :class:`Case` objects (fixed
edge cases first, then random ones drawn from a seeded generator). :func:`run_check` calls the
student's function and the reference on deep copies of every case's arguments and compares the
results with the exercise's ``compare`` (bit-exact :func:`same_value` by default). It is a plain
library call, data in and a :class:`CheckResult` out. The judging itself is :func:`score`
(expected results and what the function gave in, a :class:`CheckResult` out), which an
instructor's grader (:mod:`nbhelpers.grade`) calls on results it collected from a student's
kernel, so a notebook and the grader award the same points for the same answers.

:func:`check` is the thin layer a notebook's check cell uses: it runs the check, prints the
report, keeps the latest result per exercise for :func:`summary`, and never raises.

Exercises live in one module per chapter, ``nbhelpers.exercises.chNN``, as its ``EXERCISES``
list; :func:`get_exercise` imports that module and reads the list (afresh on every call, so a
re-imported or autoreloaded chapter module never raises).

A student's bug never escapes: any exception (``SystemExit`` included; only
``KeyboardInterrupt`` goes through, so a stuck function can be interrupted) counts as a failed
case. A bug on the course's side (the case generator or the reference raising) raises
:class:`CheckerError` from :func:`run_check`; :func:`check` prints it instead.
"""
from __future__ import annotations

import copy
import enum
import importlib
import math
import operator
import re
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

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
    "run_check",
    "check",
    "summary",
    "reset_scoreboard",
]

MAX_MISMATCHES = 5  # failing cases listed in a result
REPR_LIMIT = 200  # characters kept of any repr or exception message shown to a student
_VALUE_LIMIT = 80  # characters kept of one argument or result in a mismatch line

_ID_RE = re.compile(r"^ex(\d{2})\.([A-Za-z_][A-Za-z0-9_]*)$")
_EXERCISES_PACKAGE = f"{__package__ or 'nbhelpers'}.exercises"

_SCOREBOARD: dict[str, CheckResult] = {}  # id -> latest result of check()


class CheckerError(RuntimeError):
    """The course's side of a check failed (case generator or reference), not the student's."""


class UnknownExerciseError(KeyError):
    """Raised by :func:`get_exercise` for an id that no chapter module lists."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0]) if self.args else ""


# ---------------------------------------------------------------------------------------------
# Short, safe text for reports
# ---------------------------------------------------------------------------------------------

def _truncate(s: str, limit: int = REPR_LIMIT) -> str:
    """``s`` on one line (each line break, with the white space around it, becomes one space), at
    most ``limit`` characters. Linear in ``len(s)``: it may be a student's text."""
    if "\n" in s:
        lines = s.split("\n")
        kept = [lines[0].rstrip()] + [ln.strip() for ln in lines[1:-1]] + [lines[-1].lstrip()]
        s = kept[0] + "".join(" " + ln for ln in kept[1:] if ln) if len(kept) > 1 else kept[0]
        if lines[-1].strip() == "" and len(lines) > 1:
            s = s + " "
    return s if len(s) <= limit else s[: limit - 4] + " ..."


def _short_repr(obj: Any, limit: int = REPR_LIMIT) -> str:
    """repr(obj) on one line, at most ``limit`` characters; never raises."""
    try:
        with np.printoptions(threshold=8, edgeitems=3, linewidth=100_000):
            s = repr(obj)
    except KeyboardInterrupt:
        raise
    except BaseException:  # a student's object with a broken __repr__
        s = f"<{type(obj).__name__} object>"
    return _truncate(s, limit)


def _describe_exception(e: BaseException) -> str:
    """'ZeroDivisionError: division by zero', truncated; never raises."""
    try:
        msg = str(e)
    except KeyboardInterrupt:
        raise
    except BaseException:
        msg = ""
    return _describe_parts(type(e).__name__, msg)


def _describe_parts(name: str, msg: str) -> str:
    """The text of :func:`_describe_exception` from an exception's class name and message."""
    return _truncate(f"{name}: {msg}" if msg else name)


def _describe(x: Any) -> str:
    """What a value is, for a wrong-type reason: "str 'abc'", "None", "list of length 3"."""
    if x is None:
        return "None"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of length {len(x)}"
    if isinstance(x, np.ndarray):
        return f"an array of shape {x.shape}"
    return f"{type(x).__name__} {_short_repr(x, 60)}"


# ---------------------------------------------------------------------------------------------
# same_value: bit-exact comparison of numbers, tuples and arrays
# ---------------------------------------------------------------------------------------------

def _is_numeric_dtype(dt: np.dtype) -> bool:
    if dt.kind in "biufc":
        return True
    if dt.kind == "V" and dt.fields is None:  # ml_dtypes' bfloat16, float8_*, ... have kind 'V'
        try:
            np.zeros(1, dt).astype(np.float64)
            return True
        except (TypeError, ValueError):
            return False
    return False


def _is_number(x: Any) -> bool:
    if isinstance(x, (bool, int, float, complex)):
        return True
    if isinstance(x, (np.generic, np.ndarray)):
        return (not isinstance(x, np.ndarray) or x.ndim == 0) and _is_numeric_dtype(x.dtype)
    return False


def _as_scalar(x: Any) -> int | float | complex | None:
    """A Python int, float or complex with the value of x, or None if x is not one number."""
    if isinstance(x, (str, bytes, list, tuple, dict, set)) or x is None:
        return None
    if isinstance(x, np.ndarray):
        if x.ndim != 0 or not _is_numeric_dtype(x.dtype):
            return None
        x = x[()]
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x)
    if isinstance(x, (complex, np.complexfloating)):
        return complex(x)
    if isinstance(x, np.generic):  # ml_dtypes scalars
        return float(x) if _is_numeric_dtype(x.dtype) else None
    try:  # int-like objects (a 0-d integer tensor, a custom integer type)
        return operator.index(x)
    except Exception:
        pass
    try:  # float-like objects (a 0-d tensor, Fraction, Decimal)
        return float(x)
    except Exception:
        return None


def _compare_floats(g: float, e: float, signed_zero: bool) -> str | None:
    if math.isnan(e) or math.isnan(g):
        if math.isnan(e) and math.isnan(g):
            return None
        return "expected NaN" if math.isnan(e) else "returned NaN"
    if g != e:
        return "wrong value"
    if signed_zero and g == 0 and math.copysign(1.0, g) != math.copysign(1.0, e):
        return "sign of zero differs"
    return None


def _compare_scalars(got: Any, expected: Any) -> str | None:
    e = _as_scalar(expected)
    g = _as_scalar(got)
    if g is None:
        return f"returned {_describe(got)}, expected a number"
    if isinstance(e, complex) or isinstance(g, complex):
        e, g = complex(e), complex(g)
        for part, gp, ep in (("real part", g.real, e.real), ("imaginary part", g.imag, e.imag)):
            reason = _compare_floats(gp, ep, signed_zero=True)
            if reason:
                return f"{part}: {reason}"
        return None
    if isinstance(e, int) and isinstance(g, int):
        return None if g == e else "wrong value"
    if isinstance(e, int) or isinstance(g, int):
        # an int against a float: compare values exactly (Python's int/float comparison is
        # exact); an int has no signed zero
        if isinstance(g, float) and math.isnan(g):
            return "returned NaN"
        if isinstance(e, float) and math.isnan(e):
            return "expected NaN"
        return None if g == e else "wrong value"
    return _compare_floats(g, e, signed_zero=True)


def _numeric_array(x: Any) -> np.ndarray | None:
    """x as a numeric ndarray (ml_dtypes arrays become float64), or None."""
    try:
        a = np.asarray(x)
    except KeyboardInterrupt:
        raise
    except BaseException:  # ragged lists, objects whose __array__ raises
        return None
    if a.dtype.kind in "biufc":
        return a
    if a.dtype.kind == "V" and _is_numeric_dtype(a.dtype):
        return a.astype(np.float64)
    if a.dtype.kind == "O" and all(_is_number(v) for v in a.flat):
        # e.g. Python ints too large for int64; compare them as float64
        try:
            return a.astype(np.float64)
        except (TypeError, ValueError, OverflowError):
            return None
    return None


def _int_equal(g: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Elementwise exact equality of two integer arrays of any signedness."""
    g = g.astype(np.int64) if g.dtype.kind == "b" else g
    e = e.astype(np.int64) if e.dtype.kind == "b" else e
    if g.dtype.kind == e.dtype.kind:
        return g == e  # same signedness: numpy compares exactly
    # int64 against uint64 would go through float64; compare signs, then magnitudes as uint64
    s, u = (g, e) if g.dtype.kind == "i" else (e, g)
    nonneg = s >= 0
    return nonneg & (s.astype(np.uint64) == u.astype(np.uint64))


def _format_index(idx: tuple) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def _compare_arrays(got: Any, expected: np.ndarray) -> str | None:
    e = _numeric_array(expected)
    if e is None:  # not an array of numbers: plain equality
        try:
            ok = bool(np.array_equal(np.asarray(got), expected))
        except Exception:
            ok = False
        return None if ok else "wrong value"
    if got is None or isinstance(got, (str, bytes)) or _is_number(got):
        return f"returned {_describe(got)}, expected an array of shape {expected.shape}"
    g = _numeric_array(got)
    if g is None:
        return f"returned {_describe(got)}, expected an array of numbers of shape {expected.shape}"
    if g.shape != e.shape:
        return f"returned an array of shape {g.shape}, expected shape {e.shape}"
    if g.size == 0:
        return None
    gk, ek = g.dtype.kind, e.dtype.kind
    if gk in "biu" and ek in "biu":
        equal = _int_equal(g, e)
    elif gk == "c" or ek == "c":
        gc, ec = g.astype(np.complex128), e.astype(np.complex128)
        equal = np.ones(g.shape, bool)
        for gp, ep in ((gc.real, ec.real), (gc.imag, ec.imag)):
            equal &= (gp == ep) & (np.signbit(gp) == np.signbit(ep)) | (np.isnan(gp) & np.isnan(ep))
    else:
        gf, ef = g.astype(np.float64), e.astype(np.float64)
        with np.errstate(invalid="ignore"):
            equal = (gf == ef) | (np.isnan(gf) & np.isnan(ef))
        if gk == "f" and ek == "f":  # +0.0 and -0.0 differ; an int 0 matches either
            equal &= ~((gf == 0) & (np.signbit(gf) != np.signbit(ef)))
    bad = ~equal
    n_bad = int(bad.sum())
    if n_bad == 0:
        return None
    idx = tuple(np.argwhere(bad)[0])
    gv, ev = g[idx].item(), e[idx].item()
    what = "sign of zero differs: " if gv == 0 and ev == 0 else ""
    return (
        f"{n_bad} of {e.size} elements differ; first at index {_format_index(idx)}: "
        f"{what}got {gv!r}, expected {ev!r}"
    )


def _compare(got: Any, expected: Any) -> str | None:
    if isinstance(expected, (tuple, list)):
        kind = "tuple" if isinstance(expected, tuple) else "list"
        if not isinstance(got, (tuple, list)):
            return f"returned {_describe(got)}, expected a {kind} of {len(expected)} values"
        if len(got) != len(expected):
            return f"returned a {type(got).__name__} of length {len(got)}, expected length {len(expected)}"
        names = getattr(expected, "_fields", None)  # a NamedTuple such as formats.Fields
        for i, (g, e) in enumerate(zip(got, expected)):
            reason = _compare(g, e)
            if reason is not None:
                where = f"element {i} ({names[i]})" if names else f"element {i}"
                return f"{where}: {reason}"
        return None
    if isinstance(expected, np.ndarray) and expected.ndim > 0:
        return _compare_arrays(got, expected)
    if _is_number(expected):
        return _compare_scalars(got, expected)
    if expected is None:
        return None if got is None else f"returned {_describe(got)}, expected None"
    # anything else (a string, an enum member, a format object): plain equality, same type
    if not isinstance(got, type(expected)) and not isinstance(expected, type(got)):
        return f"returned {_describe(got)}, expected {type(expected).__name__}"
    return None if bool(got == expected) else "wrong value"


def float_array(got: Any) -> np.ndarray | str:
    """A student's returned value as a new float64 array, or the reason it is not an array of
    numbers (a string, an object array, something numpy cannot read); never raises."""
    try:
        a = np.asarray(got)
        if a.dtype.kind not in "fiu" and a.dtype.kind != "V":
            return f"returned {type(got).__name__} of dtype {a.dtype}, expected an array of floats"
        return a.astype(np.float64)
    except Exception:  # noqa: BLE001 - a student's odd object
        return f"returned {type(got).__name__}, expected an array of floats"


def same_value(got: Any, expected: Any) -> str | None:
    """None if ``got`` equals ``expected`` bit for bit, else a short reason; never raises.

    Numbers compare by value (3 == 3.0, numpy and ml_dtypes scalars are fine), NaN equals NaN,
    +0.0 and -0.0 differ. Arrays must have the same shape and the same values by the same
    rules (the dtype may differ). Tuples and lists compare element by element. A value of the
    wrong kind (a string, None, a list of the wrong length) gives a reason such as
    "returned str 'abc', expected a number".
    """
    try:
        return _compare(got, expected)
    except Exception as e:  # a hostile __eq__, __float__ or __array__
        return f"could not compare {_describe(got)} with the expected value ({_describe_exception(e)})"


def _unsign_zeros(x):
    """x with every -0.0 turned into +0.0 (arrays, tuples, numbers); x itself if it is none of these."""
    if isinstance(x, tuple):
        return tuple(_unsign_zeros(v) for v in x)
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return x + 0.0
    if isinstance(x, (float, np.floating)):
        return float(x) + 0.0
    return x


def same_value_up_to_zero_sign(got: Any, expected: Any) -> str | None:
    """:func:`same_value`, except that +0.0 and -0.0 are equal; never raises.

    For exercises whose answer is a definite set of bits except for the sign of an exactly
    cancelling sum (an accumulator that starts from its first term instead of from zero may
    give either zero). ``got`` is never modified: zeros are unsigned in copies.
    """
    try:
        got_ = got
        if isinstance(got, (list, tuple)):
            got_ = tuple(_unsign_zeros(np.asarray(v, dtype=np.float64)) if isinstance(v, np.ndarray)
                         else _unsign_zeros(v) for v in got)
        elif isinstance(got, np.ndarray):
            got_ = _unsign_zeros(np.asarray(got, dtype=np.float64)) if got.dtype.kind in "fV" else got
        else:
            got_ = _unsign_zeros(got)
    except Exception:  # a student's odd object: let same_value describe it
        got_ = got
    return same_value(got_, _unsign_zeros(expected))


def close_to(rtol: float) -> Callable[[Any, Any], str | None]:
    """A comparator for one number: equal by :func:`same_value`, or finite and within a relative
    ``rtol`` of a finite, nonzero expected value (0, inf and NaN must match exactly).

    For results that an honest implementation may compute in another order (a norm, a mean), so
    that they differ from the reference in the last few float64 bits; choose ``rtol`` far below
    the error of any plausible wrong answer.
    """
    if not (isinstance(rtol, float) and 0.0 < rtol < 1.0):
        raise ValueError(f"rtol must be a float between 0 and 1, got {rtol!r}")

    def close(got: Any, expected: Any) -> str | None:
        reason = same_value(got, expected)
        if reason is None:
            return None
        try:
            g = float(got)
        except Exception:
            return reason
        e = float(expected)
        if not (math.isfinite(e) and e != 0.0):
            return reason
        if math.isfinite(g) and abs(g - e) <= rtol * abs(e):
            return None
        return f"{reason} (tolerance: relative {rtol:g})"

    close.__name__ = f"close_to({rtol:g})"
    return close


# ---------------------------------------------------------------------------------------------
# Cases and exercises
# ---------------------------------------------------------------------------------------------

class _FrozenKwargs(Mapping):
    """A read-only mapping for :attr:`Case.kwargs`; hashable when its values are."""

    __slots__ = ("_d",)

    def __init__(self, d: Mapping[str, Any] | None = None) -> None:
        self._d = dict(d or {})

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(tuple(self._d.items()))

    def __repr__(self) -> str:
        return repr(self._d)


@dataclass(frozen=True)
class Case:
    """One call of an exercise: ``f(*args, **kwargs)``.

    ``label`` names an edge case ("tie at 1 + 2**-8"); random cases leave it empty.
    """

    args: tuple
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        args = tuple(self.args) if isinstance(self.args, list) else self.args
        if not isinstance(args, tuple):
            raise TypeError(f"Case.args must be a tuple, got {type(self.args).__name__}")
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "kwargs", _FrozenKwargs(self.kwargs))


@dataclass(frozen=True)
class Exercise:
    """An exercise: the student writes a function with the same signature as ``reference``.

    id: "exNN.function_name", e.g. "ex01.decode_bits".
    cases: rng -> list of :class:`Case`, fixed edge cases first, then random ones from rng.
    compare: (got, expected) -> None if equal, else a short reason.
    """

    id: str
    title: str
    points: int
    reference: Callable
    cases: Callable[[np.random.Generator], list[Case]]
    compare: Callable[[Any, Any], str | None] = same_value

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID_RE.match(self.id):
            raise ValueError(
                f"exercise id {self.id!r} is not of the form 'exNN.function_name' (e.g. 'ex01.decode_bits')"
            )
        if isinstance(self.points, bool) or not isinstance(self.points, int) or self.points < 0:
            raise ValueError(f"points must be a non-negative int, got {self.points!r}")
        for name in ("reference", "cases", "compare"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{self.id}: {name} must be callable")

    @property
    def chapter(self) -> int:
        """The chapter number: 1 for "ex01.decode_bits"."""
        return int(_ID_RE.match(self.id).group(1))

    @property
    def name(self) -> str:
        """The function's name: "decode_bits" for "ex01.decode_bits"."""
        return _ID_RE.match(self.id).group(2)


def _chapter_module(chapter: int) -> str:
    return f"{_EXERCISES_PACKAGE}.ch{chapter:02d}"


def _chapter_exercises(chapter: int) -> dict[str, Exercise] | None:
    """id -> Exercise of a chapter, read from its module's ``EXERCISES`` list on every call (so a
    re-imported or autoreloaded module is read afresh, and reading twice never raises); None if
    the chapter has no module. A malformed list is a bug on the course's side: CheckerError."""
    name = _chapter_module(chapter)
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
            raise CheckerError(f"{name}.EXERCISES holds {_short_repr(ex)}, not an Exercise of chapter {chapter}")
        if ex.id in out:
            raise CheckerError(f"{name}.EXERCISES lists {ex.id!r} twice")
        out[ex.id] = ex
    return out


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id, from its chapter module's ``EXERCISES`` list."""
    m = _ID_RE.match(exercise_id) if isinstance(exercise_id, str) else None
    if m is None:
        raise UnknownExerciseError(
            f"unknown exercise {exercise_id!r}: ids look like 'ex01.decode_bits' (chapter, dot, function name)"
        )
    chapter = int(m.group(1))
    exercises = _chapter_exercises(chapter)
    if exercises is None:
        raise UnknownExerciseError(
            f"unknown exercise {exercise_id!r}: chapter {chapter} has no exercises "
            f"(no module {_chapter_module(chapter)})"
        )
    if exercise_id in exercises:
        return exercises[exercise_id]
    raise UnknownExerciseError(f"unknown exercise {exercise_id!r}; known: {', '.join(exercises) or 'none'}")


def exercises_of(chapter: int) -> list[Exercise]:
    """The exercises of a chapter, in the order of its module's ``EXERCISES`` list."""
    return list((_chapter_exercises(chapter) or {}).values())


def cases_for(exercise: Exercise | str, seed: int = 0) -> list[Case]:
    """The cases :func:`run_check` uses for this seed (same seed, same cases)."""
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    try:
        cases = list(ex.cases(np.random.default_rng(seed)))
    except Exception as e:
        raise CheckerError(f"{ex.id}: the case generator raised {_describe_exception(e)}") from e
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


# ---------------------------------------------------------------------------------------------
# Running a check
# ---------------------------------------------------------------------------------------------

class CheckStatus(str, enum.Enum):
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

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


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


def _copy_args(ex: Exercise, case: Case) -> tuple[tuple, dict]:
    try:
        return copy.deepcopy(case.args), copy.deepcopy(dict(case.kwargs))
    except Exception as e:
        raise CheckerError(f"{ex.id}: cannot copy the arguments of a case ({_describe_exception(e)})") from e


def _call_quietly(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """fn(*args, **kwargs) with numpy's floating-point warnings and all warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)


def _call_text(ex: Exercise, case: Case) -> str:
    parts = [_short_repr(a, _VALUE_LIMIT) for a in case.args]
    parts += [f"{k}={_short_repr(v, _VALUE_LIMIT)}" for k, v in case.kwargs.items()]
    return _truncate(f"{ex.name}({', '.join(parts)})", 2 * _VALUE_LIMIT)


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
        return cls(_describe_exception(e), isinstance(e, NotImplementedError))

    @classmethod
    def from_parts(cls, type_name: str, message: str, not_implemented: bool = False) -> Raised:
        """The same as :meth:`from_exception` for an exception known only by name and message
        (one raised in another process)."""
        return cls(_describe_parts(str(type_name), str(message)), bool(not_implemented))


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
                f"{ex.id}: the reference raised {_describe_exception(e)} on {_call_text(ex, case)}"
            ) from e
    return expected


def score(exercise: Exercise | str, cases: list[Case], expected: list, got: list) -> CheckResult:
    """Compare what a function gave with the expected results and award the points.

    ``got[i]`` is what the function returned for ``cases[i]``, or a :class:`Raised` when it
    raised. ``got`` may be shorter than ``cases``: the cases without an entry were not run and
    count as failed. A :class:`Raised` with ``not_implemented`` on the first case makes the
    result "TODO". This is the one place where results are judged, for :func:`run_check` in a
    notebook and for an instructor's grader that ran the function elsewhere.
    """
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    if len(expected) != len(cases) or len(got) > len(cases):
        raise ValueError(f"{ex.id}: {len(cases)} cases, {len(expected)} expected results, {len(got)} results")

    def result(n_failed: int, mismatches: list[str], error: str | None, status: CheckStatus | str = "") -> CheckResult:
        points = ex.points if n_failed == 0 and error is None and status == "" else 0
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
            reason = f"could not compare: {_describe_exception(e)}"
        if reason is not None:
            n_failed += 1
            if len(mismatches) < MAX_MISMATCHES:
                text = (f"{_call_text(ex, case)} returned {_short_repr(g, _VALUE_LIMIT)}, "
                        f"expected {_short_repr(exp, _VALUE_LIMIT)} ({_truncate(str(reason))})")
                mismatches.append(_with_label(text, case))
    if first_error is None and n_failed and len(got) < len(cases):
        first_error = f"{len(cases) - len(got)} of {len(cases)} cases were not run"
    return result(n_failed, mismatches, first_error)


def run_check(exercise: Exercise | str, fn: Callable, seed: int = 0) -> CheckResult:
    """Run every case of the exercise through ``fn`` and the reference; never raises on a bug of fn.

    Each call gets its own deep copy of the case's arguments, so fn cannot change what the
    reference sees (a ``np.random.Generator`` argument is copied with its state, so both draw
    the same numbers). Raises :class:`UnknownExerciseError` for an unknown id and
    :class:`CheckerError` when the course's case generator or reference fails.
    """
    ex = exercise if isinstance(exercise, Exercise) else get_exercise(exercise)
    if not callable(fn):
        return CheckResult(ex.id, ex.title, 0, ex.points, 0, 0, [], f"expected a function, got {type(fn).__name__}")
    cases = cases_for(ex, seed)
    expected = expected_outputs(ex, cases)  # all before the first call of fn, which cannot touch them
    got: list = []
    for i, case in enumerate(cases):
        args, kwargs = _copy_args(ex, case)
        try:
            got.append(_call_quietly(fn, args, kwargs))
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # SystemExit and custom BaseExceptions are a student's bug too
            got.append(Raised.from_exception(e))
            if i == 0 and isinstance(e, NotImplementedError):
                break  # not written yet: one call is enough
    return score(ex, cases, expected, got)


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
        msg = str(e) if isinstance(e, UnknownExerciseError) else f"cannot load exercise: {_describe_exception(e)}"
        res = CheckResult(ex_id, "", 0, 0, 0, 0, [], msg, CheckStatus.ERROR)
        print(str(res))
        return res
    try:
        res = run_check(ex, fn, seed)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        detail = str(e) if isinstance(e, CheckerError) else _describe_exception(e)
        res = CheckResult(ex.id, ex.title, 0, ex.points, 0, 0, [],
                          f"the checker itself failed (not your fault; tell the instructor): {detail}",
                          CheckStatus.ERROR)
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
