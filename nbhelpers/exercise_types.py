"""What an exercise is: :class:`Exercise` (an id, a title, points, what it asks of the student, a
reference function, a case generator and a comparator) and :class:`Case` (one call of it), with
:class:`ExerciseKind` (predict, construct or implement) and :class:`CheckerError`, the error for a
bug on the course's side.

Types only: the chapter modules (``nbhelpers.answer_keys.chNN``) build their ``EXERCISES`` lists
from these, the registry (:mod:`nbhelpers.answer_keys`) reads those lists, and
:mod:`nbhelpers.checks` runs them.
"""

from __future__ import annotations

import ast
import enum
import re
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .call_watch import parse_names
from .comparators import same_value
from .validation import nonnegative_int

__all__ = ["EXERCISE_ID_RE", "Case", "Exercise", "ExerciseKind", "CheckerError", "code_shape"]

# "exNN.function_name": group 1 the chapter (two digits), group 2 the function's name
EXERCISE_ID_RE = re.compile(r"^ex(\d{2})\.([A-Za-z_][A-Za-z0-9_]*)$")


def code_shape(source: str) -> str | None:
    """What a ``def``'s source says as code: its syntax tree without comments, layout, type
    annotations or docstrings (``ast.dump``), or None when ``source`` is not one ``def``."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
        if isinstance(node, ast.arg):
            node.annotation = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
    return ast.dump(tree)


class ExerciseKind(enum.Enum):
    """What an exercise asks of the student (the website's index of the exercises lists it)."""

    #: work out what a process gives (a count, a threshold, a time, a cost) from the formats and
    #: the rules, and return it; the check compares it with what the process gives
    PREDICT = "predict"
    #: return inputs with stated properties; the check judges the properties, any such inputs pass
    CONSTRUCT = "construct"
    #: write a routine (a decoder, an epilogue, a kernel) from its specification; the check
    #: compares what it returns with the course's reference
    IMPLEMENT = "implement"


class CheckerError(RuntimeError):
    """The course's side of a check failed (case generator or reference), not the student's."""


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


class AfterCall:
    """What a function returned, with the arguments that its exercise's ``returned_args`` names as
    the call left them (a generator, advanced by the numbers the function drew): what ``compare``
    and ``compare_all`` get in place of the bare value for such an exercise."""

    __slots__ = ("args", "value")

    def __init__(self, value: Any, args: tuple) -> None:
        self.value, self.args = value, tuple(args)

    def __repr__(self) -> str:  # a report shows what the function returned
        return repr(self.value)


#: The modules a numerical exercise's function may use (:attr:`Exercise.tools`): the standard
#: library's arithmetic, containers and iteration, numpy (its random generators and linear
#: algebra too) and ml_dtypes' narrow types. An exercise adds the course's modules it lets
#: students call.
COMPUTING_TOOLS = (
    "math",
    "cmath",
    "fractions",
    "decimal",
    "numbers",
    "functools",
    "itertools",
    "bisect",
    "heapq",
    "statistics",
    "struct",
    "collections",
    "collections.abc",
    "dataclasses",
    "typing",
    "numpy",
    "numpy.random",
    "numpy.linalg",
    "ml_dtypes",
)


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
    compare_all: (expected, got), both lists over every case, -> None or a short reason: a
    property of the answers together that no one case shows (a random answer that ignores its
    generator, or is not random at all); asked only when every case passed ``compare``.
    forbidden: the course's modules (``"nbhelpers.scaling"``, with its submodules) and functions
    (``"nbhelpers.formats:decode"``) the statement says not to call, because they compute the
    answer; a function that calls one, however it reaches it, scores nothing
    (:class:`~nbhelpers.call_watch.CallWatch`, in the check cell and in the grader).
    allowed: functions (``"nbhelpers.rounding:round_to"``) or modules of those the statement lets
    the student call, or that the course's own machinery runs (the interpreter's cache); what
    they call in turn is not watched.
    given: the source of the graded function when the statement gives it whole (a launcher around
    the student's kernel, which is the answer): a function whose code differs from it (comments,
    layout, annotations and docstrings aside) scores nothing, in the check cell and in the grader
    (:func:`nbhelpers.checks.given_verdict`). Empty: the function is the student's.
    tools: where not None, the modules (each exactly, not its submodules) whose names a graded
    function may use, besides its notebook's own functions, classes and data and the builtins of
    computation: an allow-list read before the function runs
    (:func:`nbhelpers.call_watch.tools_audit`); a function that uses anything else (``sys``, a
    builtin that makes names from strings, an attribute no tool has) scores nothing, as a
    forbidden call does. None: only the names that reach past the watch are refused.
    returned_args: positions of arguments that the comparison reads as the call left them (a
    generator, to count the numbers drawn): ``compare`` and ``compare_all`` then get an
    :class:`AfterCall` for each result, in the check cell and in the grader.
    kind: what the exercise asks, an :class:`ExerciseKind` (or its value, ``"predict"``); every
    exercise a chapter module lists states one (tests/test_exercise_index.py). The website's
    index of the exercises reads it from the chapter module's source, so it is written there as
    ``kind=ExerciseKind.PREDICT``.
    """

    id: str
    title: str
    points: int
    reference: Callable
    cases: Callable[[np.random.Generator], list[Case]]
    compare: Callable[[Any, Any], str | None] = same_value
    compare_all: Callable[[list, list], str | None] | None = None
    forbidden: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()
    given: str = ""
    returned_args: tuple[int, ...] = ()
    kind: ExerciseKind | None = None
    tools: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not EXERCISE_ID_RE.match(self.id):
            raise ValueError(
                f"exercise id {self.id!r} is not of the form 'exNN.function_name' (e.g. 'ex01.decode_bits')"
            )
        nonnegative_int("points", self.points)
        for name in ("reference", "cases", "compare"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{self.id}: {name} must be callable")
        if self.compare_all is not None and not callable(self.compare_all):
            raise TypeError(f"{self.id}: compare_all must be callable or None")
        for name in ("forbidden", "allowed"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (tuple, list)):
                raise TypeError(f"{self.id}: {name} must be a tuple of names, got {type(value).__name__}")
            try:
                parse_names(value)
            except ValueError as e:
                raise ValueError(f"{self.id}: {name}: {e}") from None
            object.__setattr__(self, name, tuple(value))
        if self.tools is not None:
            if isinstance(self.tools, str) or not isinstance(self.tools, (tuple, list)):
                raise TypeError(f"{self.id}: tools must be a tuple of module names or None")
            try:
                if any(q for _, q in parse_names(self.tools)):
                    raise ValueError("a tool is a module ('numpy.linalg'), not one function")
            except ValueError as e:
                raise ValueError(f"{self.id}: tools: {e}") from None
            object.__setattr__(self, "tools", tuple(self.tools))
        if not isinstance(self.given, str):
            raise TypeError(f"{self.id}: given must be a function's source or empty")
        if self.given and code_shape(self.given) is None:
            raise ValueError(f"{self.id}: given is not the source of one def")
        if not isinstance(self.returned_args, tuple) or not all(
            type(i) is int and 0 <= i < 100 for i in self.returned_args
        ):
            raise TypeError(f"{self.id}: returned_args must be a tuple of argument positions")
        if self.kind is not None:
            try:
                object.__setattr__(self, "kind", ExerciseKind(self.kind))
            except ValueError:
                names = ", ".join(repr(k.value) for k in ExerciseKind)
                raise ValueError(
                    f"{self.id}: kind must be an ExerciseKind or one of {names}, got {self.kind!r}"
                ) from None

    @property
    def chapter(self) -> int:
        """The chapter number: 1 for "ex01.decode_bits"."""
        return int(EXERCISE_ID_RE.match(self.id).group(1))

    @property
    def name(self) -> str:
        """The function's name: "decode_bits" for "ex01.decode_bits"."""
        return EXERCISE_ID_RE.match(self.id).group(2)
