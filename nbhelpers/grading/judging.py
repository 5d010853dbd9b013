"""Judging, on the trusted side: each chapter's plan (cases, expected results, encoded inputs),
one submission's run through a worker, reading what its kernel wrote, scoring it with
:func:`nbhelpers.checks.score` (the very code a notebook's check cell uses), and the
submission's status and record.

The seed and the expected results never leave this process: the kernel gets the case inputs
only, and what it sends back is decoded as plain data (:func:`decode_result`), never unpickled
or executed.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import hashlib
import json
import re
import textwrap
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..answer_keys import exercises_of
from ..checks import (
    FORBIDDEN_CALL,
    GIVEN_CHANGED,
    CheckResult,
    CheckStatus,
    Raised,
    cases_for,
    expected_outputs,
    forbidden_verdict,
    given_verdict,
    score,
)
from ..exercise_types import AfterCall, Exercise
from ..report_text import describe_exception, truncate
from ..top_level import outside_names, outside_of
from .definitions import (
    MAX_DEFINITIONS_PARSE_CHARS,
    Definitions,
    definitions_of,
    names_bound_locally,
    names_read,
    parse,
    program_cell,
)
from .in_kernel import LIMITS, WALL_FACTOR, DecodeBudget, decode, encode
from .jobs import Event, Job, Running, raw_lines
from .options import MAX_OUTPUT_LINE_BYTES, GradeOptions, Status
from .sandbox import course_package_dir
from .submissions import PARSE_LOCK, Submission, check_cells, detect_chapter
from .tools_view import tools_view
from .untrusted import safe_data, safe_name

__all__ = [
    "ExercisePlan",
    "ChapterPlan",
    "plan_chapter",
    "Opaque",
    "stand_in",
    "decode_result",
    "read_outputs",
    "judge",
    "event_text",
    "status_of",
    "grade_one",
    "judge_submission",
]

# =============================================================================================
# Plans: what each exercise of a chapter is checked on, and what it should give
# =============================================================================================


@dataclass
class ExercisePlan:
    exercise: Exercise
    cases: list = field(default_factory=list)
    expected: list = field(default_factory=list)
    error: str | None = None  # the course's side failed for this exercise


@dataclass
class ChapterPlan:
    chapter: int
    exercises: list[ExercisePlan]
    inputs_json: str = ""  # the case inputs of every exercise without an error, as sent to the kernel
    # The course's enums and dataclasses a result may be, by (module, qualname): the classes of
    # the expected results. The only classes decoding a kernel's results can give.
    classes: dict[tuple[str, str], type] = field(default_factory=dict)

    @property
    def max_points(self) -> int:
        return sum(p.exercise.points for p in self.exercises)


def plan_chapter(chapter: int, seed: int) -> ChapterPlan | None:
    """Cases, expected results and encoded inputs for every exercise of a chapter (None if it
    has none). Runs in the trusted process only: the seed and the expected results stay here."""
    try:
        exercises = exercises_of(chapter)
    except Exception:  # a chapter module that fails to import: its exercises cannot be graded
        return None
    if not exercises:
        return None
    plans, payload = [], []
    for ex in exercises:
        p, encoded = _plan_exercise(ex, seed)
        plans.append(p)
        if encoded is not None:
            watch = {"forbidden": list(ex.forbidden), "allowed": list(ex.allowed)} if ex.forbidden else {}
            if ex.forbidden and ex.tools is not None:
                watch["tools"] = list(ex.tools)
            returned = {"returned_args": list(ex.returned_args)} if ex.returned_args else {}
            payload.append({"id": ex.id, "name": ex.name, "cases": encoded, **watch, **returned})
    inputs_json = json.dumps({"exercises": payload}, allow_nan=False, separators=(",", ":"))
    classes = {}
    for p in plans:
        for value in p.expected:
            classes.update(_course_classes(value))
    return ChapterPlan(chapter, plans, inputs_json, classes)


def _course_classes(value: Any, depth: int = 0) -> dict[tuple[str, str], type]:
    """The nbhelpers enums and dataclasses in an expected result, by (module, qualname)."""
    out: dict[tuple[str, str], type] = {}
    t = type(value)
    if isinstance(value, (enum.Enum,)) or dataclasses.is_dataclass(value):
        if str(t.__module__).startswith("nbhelpers"):
            out[(t.__module__, t.__qualname__)] = t
        if dataclasses.is_dataclass(value) and depth < 10:
            for f in dataclasses.fields(value):
                out.update(_course_classes(getattr(value, f.name), depth + 1))
    elif isinstance(value, (list, tuple, set, frozenset)) and depth < 10:
        for x in list(value)[:1000]:
            out.update(_course_classes(x, depth + 1))
    elif isinstance(value, dict) and depth < 10:
        for k, x in list(value.items())[:1000]:
            out.update(_course_classes(k, depth + 1))
            out.update(_course_classes(x, depth + 1))
    return out


def _plan_exercise(ex: Exercise, seed: int) -> tuple[ExercisePlan, list | None]:
    """An exercise's plan, and its encoded case inputs (None when the course's side failed)."""
    p = ExercisePlan(ex)
    try:
        p.cases = cases_for(ex, seed)
        p.expected = expected_outputs(ex, p.cases)
        encoded = [
            {
                "a": [encode(a, strict=True) for a in c.args],
                "k": {str(k): encode(v, strict=True) for k, v in c.kwargs.items()},
            }
            for c in p.cases
        ]
    except Exception as e:  # a bug on the course's side, reported per exercise
        p.error = f"the grader cannot check this exercise (not the student's fault): {describe_exception(e)}"
        return p, None
    return p, encoded


def _plan_for(plans: dict[int, ChapterPlan | None], chapter: int | None) -> ChapterPlan | None:
    return plans.get(chapter) if chapter is not None else None


# =============================================================================================
# Reading what the kernel wrote
# =============================================================================================


class Opaque:
    """Stands for a value a kernel returned that could not be sent as data; equals nothing."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


_STAND_INS: dict[str, type] = {}
_STAND_INS_LOCK = threading.Lock()


def stand_in(type_name: str, text: str) -> Opaque:
    """An :class:`Opaque` whose class has the student's type name (so reports read "returned
    MyThing <...>"), with the kernel's repr as its repr."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(type_name))[:60] or "object"
    if not name[0].isalpha() and name[0] != "_":
        name = "_" + name
    with _STAND_INS_LOCK:
        cls = _STAND_INS.get(name)
        if cls is None:
            cls = type(name, (Opaque,), {"__slots__": ()}) if len(_STAND_INS) < 1000 else Opaque
            _STAND_INS[name] = cls
    return cls(truncate(str(text), LIMITS["max_repr"]))


def decode_result(
    data: Any, classes: dict[tuple[str, str], type] | None = None, budget: DecodeBudget | None = None
) -> Any:
    """A kernel's encoded return value, or a stand-in when the data is not a valid encoding or
    would cost more than ``budget`` (one :class:`~nbhelpers.grading.in_kernel.DecodeBudget` for
    all of an exercise's results). Enums and dataclasses are looked up in ``classes`` (the
    plan's); nothing is imported."""
    table = classes or {}

    def find_class(module: str, qualname: str) -> type:
        cls = table.get((module, qualname))
        if cls is None:
            raise ValueError("not a class this exercise returns")
        return cls

    try:
        return decode(data, stand_in, find_class, budget)
    except Exception:  # RecursionError too: data nested too deeply for the decoder
        return stand_in("unreadable", "<a value the grader could not read>")


@dataclass
class KernelOutputs:
    """What the grading cells wrote: each exercise's record (the first complete one), how many
    lines of the results files did not carry their grading cell's nonce (written by something
    else than the grading cell: ignored, and reported), and the exercises with more than one
    record that carries it (a grading cell writes one: the others were forged in the kernel, by
    code that read the nonce there; none of them is judged)."""

    records: dict[str, dict] = field(default_factory=dict)
    foreign_lines: int = 0
    duplicated: set[str] = field(default_factory=set)


def read_outputs(events: list[dict], plan: ChapterPlan) -> KernelOutputs:
    """The results the grading cells wrote, from the files the worker's events name, keeping only
    the lines that carry that cell's nonce. Robust to anything in the files (the student's
    kernel could write there): read as :func:`~nbhelpers.grading.jobs.raw_lines` reads, strings
    made safe."""
    ids = {p.exercise.id for p in plan.exercises}
    out = KernelOutputs()
    cells = [(e.get("outputs"), e.get("nonce")) for e in events if e.get("event") == Event.GRADING_CELL]
    for path, nonce in dict.fromkeys(cells):
        if not (isinstance(path, str) and isinstance(nonce, str) and len(nonce) >= 32):
            continue
        for line in raw_lines(path):
            rec = _parse_line(line)
            if not isinstance(rec, dict) or rec.get("n") != nonce:
                out.foreign_lines += line is not None and bool(line.strip())
                continue
            if rec.get("id") in ids:
                if rec["id"] in out.records:
                    out.duplicated.add(rec["id"])
                else:
                    out.records[rec["id"]] = safe_data(rec)
    return out


#: the most memory parsing one results line may take, as :func:`_parse_cost` counts it before
#: parsing: 16 MB of "{}" had taken 430 MB
MAX_LINE_PARSE_BYTES = 256 * 2**20


def _parse_cost(line: bytes) -> int:
    """About the most bytes json.loads makes of ``line``: 64 for each value (a container, a
    string, a number; each but the last follows a comma, or opens a container), and the text."""
    return 64 * (line.count(b",") + line.count(b"{") + line.count(b"[") + 1) + len(line)


def _parse_line(line: bytes | None) -> Any:
    if line is None:
        return None
    if _parse_cost(line) > MAX_LINE_PARSE_BYTES:
        return None  # counted before parsing: a grading cell's results are never near it
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


# =============================================================================================
# Judging one exercise
# =============================================================================================


def judge(
    p: ExercisePlan,
    rec: dict | None,
    missing_reason: tuple[CheckStatus, str],
    classes: dict[tuple[str, str], type] | None = None,
) -> CheckResult:
    """The CheckResult of one exercise from its kernel record (None: the kernel never wrote one;
    ``missing_reason`` is then its (status, error)). ``classes``: the plan's (see
    :func:`decode_result`)."""
    ex = p.exercise
    if p.error is not None:
        return _unscored(p, CheckStatus.ERROR, p.error, n_failed=0)
    if rec is None:
        return _unscored(p, *missing_reason)
    if rec.get("missing") is True:
        seen = rec.get("watch")  # its def read a value its tools leave out: the check's words
        if ex.forbidden and isinstance(seen, list) and seen and all(isinstance(s, str) for s in seen):
            verdict = forbidden_verdict(ex, len(p.cases), [safe_name(s)[:200] for s in seen[:10]])
            if verdict is not None:
                return verdict
        return _unscored(p, CheckStatus.MISSING, f"the notebook does not define {ex.name}")
    if "not_callable" in rec:
        # the same words as checks.run_check
        return CheckResult(
            ex.id, ex.title, 0, ex.points, 0, 0, [], f"expected a function, got {str(rec['not_callable'])[:100]}"
        )
    if "too_large" in rec:
        size = rec["too_large"] if isinstance(rec["too_large"], int) else 0
        return CheckResult(
            ex.id,
            ex.title,
            0,
            ex.points,
            len(p.cases),
            len(p.cases),
            [],
            f"the results were too large to send back ({size / 2**20:.0f} MB; the limit is "
            f"{MAX_OUTPUT_LINE_BYTES / 2**20:.0f} MB)",
        )
    results = rec.get("results")
    if not isinstance(results, list):
        return _unscored(p, CheckStatus.ERROR, "the grader could not read this function's results")
    if ex.forbidden:
        # the grading cell sends what its watch saw (nbhelpers.call_watch); a record without it
        # was not written by the grading cell's watch, and is judged as it stands
        seen = rec.get("watch", [])
        if not (isinstance(seen, list) and all(isinstance(s, str) for s in seen)):
            return _unscored(p, CheckStatus.FAIL, "the grader could not read what this function called")
        verdict = forbidden_verdict(ex, len(p.cases), [safe_name(s)[:200] for s in seen[:10]])
        if verdict is not None:
            return verdict
    got, timed_out = _returned(results[: len(p.cases)], classes, len(ex.returned_args))
    result = score(ex, p.cases, p.expected, got)
    if timed_out:
        result.status, result.points = CheckStatus.TIMEOUT, 0
    return result


#: the error of an exercise whose results were written more than once with the nonce
FORGED = "tampering: more than one result for this function carried the grading cell's nonce; none was judged"


def _unscored(p: ExercisePlan, status: CheckStatus, error: str, n_failed: int | None = None) -> CheckResult:
    """No points: every case failed (or ``n_failed``), for the reason ``error``. ``status`` is
    ERROR or one of the grader's own (TIMEOUT, DIED, MISSING, NOT RUN): a :class:`CheckStatus`."""
    n = len(p.cases)
    return CheckResult(
        p.exercise.id, p.exercise.title, 0, p.exercise.points, n, n if n_failed is None else n_failed, [], error, status
    )


def _returned(results: list, classes: dict[tuple[str, str], type] | None, n_args: int = 0) -> tuple[list, bool]:
    """What the function returned (or raised) on each case, and whether its time ran out.
    ``n_args``: how many arguments each value comes with (``Exercise.returned_args``): each
    value is then an :class:`AfterCall`."""
    got: list = []
    budget = DecodeBudget()  # one for the exercise: what decoding its results may cost
    for r in results:
        if isinstance(r, dict) and "v" in r and len(r) == 1 and not n_args:
            got.append(decode_result(r["v"], classes, budget))
        elif (
            n_args
            and isinstance(r, dict)
            and set(r) == {"v", "a"}
            and isinstance(r["a"], list)
            and len(r["a"]) == n_args
        ):
            args = tuple(decode_result(a, classes, budget) for a in r["a"])
            got.append(AfterCall(decode_result(r["v"], classes, budget), args))
        elif isinstance(r, dict) and isinstance(r.get("r"), dict):
            e = r["r"]
            got.append(
                Raised.from_parts(
                    str(e.get("type", "Exception"))[:100], str(e.get("message", ""))[:4000], e.get("ni") is True
                )
            )
        elif isinstance(r, dict) and "t" in r:
            got.append(_timeout_raised(r["t"]))
            return got, True
        else:
            got.append(stand_in("unreadable", "<a result the grader could not read>"))
    return got, False


#: the most seconds a time-out reported by the kernel is taken to say (its number is the kernel's)
_MAX_REPORTED_SECONDS = 1e6


def _timeout_raised(seconds: Any) -> Raised:
    """The time-out a result line reports, as the exception the function is scored as raising. The
    number comes from the kernel: anything but a number from 0 to 1e6 is clamped (an int too large
    for a float, inf, NaN, a negative number, not a number at all), never trusted."""
    s = 0.0
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        try:
            s = float(seconds)
        except OverflowError:  # an int beyond any float
            s = _MAX_REPORTED_SECONDS
    s = min(max(s, 0.0), _MAX_REPORTED_SECONDS) if s == s else 0.0  # NaN: 0
    return Raised.from_parts(
        "TimeoutError",
        f"no result within {s:g} s of CPU time ({WALL_FACTOR * s:g} s of wall time), "
        "the grader's time limit for this function",
    )


# =============================================================================================
# One submission: its run, its status, its record
# =============================================================================================


#: The exception names the detail column shows as they are: Python's own. Any other name is text
#: a submission chose (a class it makes can be named with anything).
_BUILTIN_EXCEPTIONS = frozenset(
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
)


def _exception_words(e: dict, full: bool) -> str:
    """An error event's exception: its type and message where ``full`` (the JSON) or where the
    error came from the notebook's own run; only a type of Python's own (or "an exception of the
    notebook's own class") where it came from the kernel the functions are graded in. Hidden
    inputs are in that kernel: nothing its code raises reaches the CSV as text."""
    ename, evalue = str(e.get("ename", "")), str(e.get("evalue", ""))
    if full or not (e.get("definitions") is True or e.get("event") == Event.GRADING_ERROR):
        return f"{ename}: {evalue}" if evalue else ename
    if ename in _BUILTIN_EXCEPTIONS:
        return f"{ename} (its message is in the JSON file)"
    return "an exception of the notebook's own class (its name and message are in the JSON file)"


def event_text(e: dict, full: bool = False) -> str:
    """A worker's event in words: for the detail column, or with ``full`` for the JSON file's
    ``events`` (which hold what the graded kernel's exceptions said; see :func:`_exception_words`)."""
    where = f"cell {e.get('cell')} ({e.get('line', '')})" if e.get("cell") else ""
    kind = e.get("event")
    text = _event_words(e, where, kind, full)
    if text and e.get("tools") is True:
        return "in the kernel that holds only its functions' tools (where they are graded), " + text
    if text and e.get("definitions") is True:
        return "in the program of its definitions (where the functions are graded), " + text
    return text


def _event_words(e: dict, where: str, kind: Any, full: bool = False) -> str:
    if kind == Event.CELL_ERROR:
        return f"{where} raised {truncate(_exception_words(e, full), 160)}"
    if kind == Event.CELL_TIMEOUT:
        return f"{where} ran past the {e.get('seconds', 0):g} s limit and was interrupted"
    if kind == Event.KERNEL_DIED:
        if e.get("exercise"):
            if e.get("retry"):
                return f"the kernel died while checking {e['exercise']}; retried in a new kernel"
            return f"the kernel died again while checking {e['exercise']}"
        if e.get("grading"):
            return "the kernel died while the functions were checked"
        if e.get("retry"):
            return f"the kernel died in {where}; retried in a new kernel"
        return f"the kernel died again in {where}; the notebook was rerun without that cell"
    if kind == Event.GRADING_ERROR:
        if e.get("by_grader") is True:  # the worker's own words (tampering it found)
            what = str(e.get("ename", "")) + ": " + str(e.get("evalue", ""))
        else:
            what = _exception_words(e, full)
        return f"the functions could not be checked: {truncate(what, 160)}"
    if kind == Event.LIMIT_REACHED:
        hit = e.get("limits") if isinstance(e.get("limits"), list) else []
        said = []
        if "processes" in hit:
            said.append(f"its limit of {e.get('processes')} processes and threads (a new one was refused)")
        if "memory" in hit:
            said.append(f"its {e.get('memory_mb')} MB of memory, all its processes together (one was killed)")
        return "the submission reached " + " and ".join(said) if said else ""
    return ""


def status_of(events: list[dict], total_timeout: bool, worker_failed: bool, results: dict) -> Status:
    """The worst thing that happened to a submission that ran."""
    kinds = {e.get("event") for e in events}
    if total_timeout:
        return Status.TIMEOUT
    if worker_failed:
        return Status.GRADER_ERROR
    if any(e.get("event") == Event.KERNEL_DIED and not e.get("retry") for e in events):
        return Status.KERNEL_DIED  # a kernel that died once and not on its retry is not the student's doing
    if Event.CELL_TIMEOUT in kinds or any(r.status == CheckStatus.TIMEOUT for r in results.values()):
        return Status.TIMEOUT
    # a statement that fails only where a module is missing (a tools kernel's) is the graded
    # function's to answer for, in its detail: the notebook itself ran
    errors = [e for e in events if e.get("event") == Event.CELL_ERROR and e.get("tools") is not True]
    if errors or Event.GRADING_ERROR in kinds:
        return Status.CELL_ERROR
    if any(r.status == CheckStatus.ERROR for r in results.values()):
        return Status.GRADER_ERROR
    return Status.GRADED


def _record(
    sub: Submission,
    chapter: int | None,
    status: Status,
    details: list[str],
    results: dict,
    plan: ChapterPlan | None,
    opts: GradeOptions,
    t0: float,
    worker_peak_mb: int | None = None,
    judge_cpu_s: float | None = None,
) -> dict:
    """A submission's entry in the JSON file (its CSV row is made from it); ``worker_peak_mb``: the
    most memory the worker that ran it had held at once, by the end of it (MB); ``judge_cpu_s``: the
    CPU seconds that reading, decoding and scoring its results took (None: not known), what its
    results cost the grader however loaded the machine is (``seconds`` is wall time, which grows
    with whatever else the machine runs)."""
    return {
        "file": sub.file,
        "sha256": sub.sha256,
        "chapter": chapter,
        "status": status,
        "detail": "; ".join(d for d in details if d),
        "events": [d for d in details if d],
        "total": sum(r.points for r in results.values()),
        "max": plan.max_points if plan is not None else None,
        "checks": {k: r.to_dict() for k, r in results.items()},
        "seed": opts.seed_kind,
        "chapter_option": opts.chapter,
        "seconds": round(time.monotonic() - t0, 2),
        "graded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "worker_peak_mb": worker_peak_mb,
        "judge_cpu_s": judge_cpu_s,
    }


def _not_checked(plan: ChapterPlan | None, why: str) -> dict:
    """Every exercise of the plan with no points, NOT RUN for the reason ``why``."""
    if plan is None:
        return {}
    return {p.exercise.id: _unscored(p, CheckStatus.NOT_RUN, why) for p in plan.exercises}


def grade_one(
    sub: Submission,
    plans: dict[int, ChapterPlan | None],
    opts: GradeOptions,
    running: Running,
    judges: Any = None,
) -> dict:
    """Grade one submission; never raises (an unexpected failure is a "grader error" record).
    Its results are judged by ``judges`` (a :class:`nbhelpers.grading.judge_process.Judges`, whose
    ``judge`` gives what :func:`judge_submission` gives and why judging failed), or in this process
    when None."""
    t0 = time.monotonic()
    try:
        return _grade_one(sub, plans, opts, running, t0, judges)
    except Exception as e:  # one submission's failure must not stop the run
        plan = _plan_for(plans, opts.chapter)
        return _record(
            sub,
            opts.chapter,
            Status.GRADER_ERROR,
            [f"the grader failed: {describe_exception(e)}"],
            _not_checked(plan, "not checked"),
            plan,
            opts,
            t0,
        )


def _grade_one(
    sub: Submission,
    plans: dict[int, ChapterPlan | None],
    opts: GradeOptions,
    running: Running,
    t0: float,
    judges: Any,
) -> dict:
    chapter, note = detect_chapter(sub.file, sub.cells, opts.chapter)
    skip = _why_not_run(sub, chapter, note, opts)
    if skip is not None:
        ch, status, why, zero_for = skip
        plan = _plan_for(plans, zero_for)
        return _record(sub, ch, status, [why], _not_checked(plan, f"not checked: {status}"), plan, opts, t0)
    plan = plans.get(chapter)
    if plan is None:
        return _record(
            sub,
            chapter,
            Status.UNKNOWN_CHAPTER,
            [f"chapter {chapter:02d} has no exercises to grade"],
            {},
            None,
            opts,
            t0,
        )
    flags = check_cells(sub.cells)
    cells = [[i, src, flag] for (i, src), flag in zip(sub.cells, flags)]
    defs = definitions_of(sub.cells, flags)
    exercise_ids = [p.exercise.id for p in plan.exercises if p.error is None]
    program = [[i, program_cell(i, src)] for i, src in defs.cells]
    groups = kernel_groups(plan, exercise_ids) if opts.sandbox else None
    each = [[i, program_cell(i, src, each=True)] for i, src in defs.cells] if groups else None
    made = names_made_outside(plan, [(i, src) for (i, src), flag in zip(sub.cells, flags) if not flag])
    with Job(cells, plan.inputs_json, exercise_ids, opts, program, groups, each, made) as job:
        total_timeout = job.run(running, opts.timeout)
        events = job.events()
        worker_failed = not total_timeout and not any(e.get("event") == Event.DONE for e in events)
        if worker_failed and running.stopping:
            raise KeyboardInterrupt
        log_tail = job.log_tail() if worker_failed else []
        missing = _missing_reason(total_timeout, worker_failed, opts)
        if judges is None:
            t_judge = time.process_time()
            results, sources, foreign = judge_submission(plan, events, defs.functions, missing)
            unjudged, judge_cpu = "", round(time.process_time() - t_judge, 3)
        else:  # while the job's files exist
            results, sources, foreign, unjudged, judge_cpu = judges.judge(chapter, events, defs.functions, missing)
    said = [event_text(e, full=True) for e in events]  # for the JSON file only
    details = [note] + [event_text(e) for e in events]
    details += _definitions_notes(defs, results, sources, sub.cells)
    if unjudged:
        details.append(f"its results could not be judged: {unjudged}")
    details += [f"{ex_id}: {FORGED}" for ex_id, r in results.items() if r.error == FORGED]
    details += [
        f"{ex_id}: {r.error}"
        for ex_id, r in results.items()
        if (r.error or "").startswith((FORBIDDEN_CALL, GIVEN_CHANGED))
    ]
    if foreign:
        details.append(
            f"tampering: {foreign} line{'s' if foreign != 1 else ''} in the "
            "results files did not come from the grading cell (ignored)"
        )
    if total_timeout:
        details.append(f"stopped after {opts.timeout:g} s, the total time limit")
    if worker_failed:
        details.append("the grader's worker failed" + (": " + " | ".join(log_tail) if log_tail else ""))
    details += [
        f"{r.exercise_id}: {r.status.lower()}"
        for r in results.values()
        if r.status in (CheckStatus.TIMEOUT, CheckStatus.MISSING, CheckStatus.DIED, CheckStatus.ERROR)
    ]
    details += [f"{ex_id}: {g['why']}" for ex_id, g in sources.items() if not g["in_notebook"]]
    status = status_of(events, total_timeout, worker_failed, results)
    done = [e for e in events if e.get("event") == Event.DONE][-1:]
    peak = done[0].get("worker_peak_mb") if done else None
    peak = peak if isinstance(peak, int) and not isinstance(peak, bool) else None
    rec = _record(sub, chapter, status, details, results, plan, opts, t0, peak, judge_cpu)
    kernel_cpu = done[0].get("kernel_cpu_s") if done else None
    rec["kernel_cpu_s"] = kernel_cpu if isinstance(kernel_cpu, float) and kernel_cpu >= 0 else None
    rec["events"] = [d for d in [note, *said, *details[1 + len(said) :]] if d]
    rec["graded_sources"] = sources
    return rec


def _definitions_notes(
    defs: Definitions, results: dict[str, CheckResult], sources: dict[str, dict], cells: list[tuple[int, str]]
) -> list[str]:
    """What the detail says of the clean kernel: cells none of which ran there, and, for each
    function that did not pass, the names it uses that statements left out of the clean kernel
    set or change (a table filled by a loop): the likely reason it passed its check cell and not
    the grader."""
    notes = []
    lines = dict(cells)
    for index in defs.unparsed[:3]:
        notes.append(
            f"cell {index + 1} ({_first(lines.get(index, ''))}) could not be read for its definitions: "
            "none of it ran where the functions were graded"
        )
    for ex_id, r in results.items():
        if r.passed or (r.error or "").startswith(GIVEN_CHANGED):  # its detail says why
            continue
        name = ex_id.rsplit(".", 1)[-1]
        defined = [(i, first, why) for i, first, names, why in defs.left_out if _defines(first, name)]
        if defined and r.status == CheckStatus.MISSING:
            i, first, why = defined[0]
            notes.append(
                f"{ex_id}: its definition in cell {i + 1} ({first}) does not run where the functions are graded: {why}"
            )
            continue
        src = (sources.get(ex_id) or {}).get("source")
        tree = parse(textwrap.dedent(src)) if isinstance(src, str) else None
        if tree is None:
            continue
        # the names it reads as variables: a parameter or local is not the notebook's, and an
        # attribute (fmt.name) is no variable of the notebook's that a left-out cell sets
        used = names_read(tree) - names_bound_locally(tree)
        hits = [(i, first, sorted(names & used), why) for i, first, names, why in defs.left_out if names & used]
        if hits:
            i, first, names, why = hits[0]
            notes.append(
                f"{ex_id}: uses {', '.join(names[:3])}, which cell {i + 1} ({first}) sets or changes in a statement "
                f"that does not run where the functions are graded: {why} (docs/grading.md, what runs there)"
            )
    return notes


def _defines(first_line: str, name: str) -> bool:
    """Whether a statement whose first line is ``first_line`` defines ``name`` (a def, a class or
    an assignment to it)."""
    n = re.escape(name)
    return bool(re.match(rf"((async\s+)?def\s+{n}\b|class\s+{n}\b|{n}\s*(:|=[^=]))", first_line))


def _first(src: str) -> str:
    line = next((ln.strip() for ln in src.splitlines() if ln.strip()), "")
    return line if len(line) <= 40 else line[:37] + "..."


def judge_submission(
    plan: ChapterPlan, events: list[dict], functions: list[list], missing: tuple[CheckStatus, str]
) -> tuple[dict[str, CheckResult], dict[str, dict], int]:
    """Read, decode and judge what a submission's grading cells wrote (the files its ``events``
    name): each exercise's result, the graded functions' sources (:func:`graded_sources`, from
    ``functions``, :attr:`Definitions.functions`), and the count of foreign lines in the results
    files. A function that is not one the program's definitions made scores nothing, with the
    reason. ``missing``: (status, error) of an exercise with no results. Run in a judge process
    (:mod:`nbhelpers.grading.judge_process`), or here."""
    outputs = read_outputs(events, plan)
    results = _judge_all(plan, outputs.records, events, missing)
    sources = graded_sources(outputs.records, functions)
    for p in plan.exercises:
        ex_id = p.exercise.id
        if ex_id in outputs.duplicated:
            results[ex_id] = _unscored(p, CheckStatus.FAIL, FORGED)
        elif ex_id in sources and not sources[ex_id]["in_notebook"]:
            results[ex_id] = _unscored(p, CheckStatus.FAIL, sources[ex_id]["why"])
        elif ex_id in sources and p.exercise.given:  # a function the statement gives, changed
            verdict = given_verdict(p.exercise, len(p.cases), sources[ex_id]["source"])
            if verdict is not None:
                results[ex_id] = verdict
    return results, sources, outputs.foreign_lines


#: Why a graded function scores nothing, by what the grading cell found (see in_kernel._code_of).
NOT_A_DEFINITION = "the function graded is not one the notebook's definitions made"


def graded_sources(records: dict[str, dict], functions: list[list]) -> dict[str, dict]:
    """For each exercise whose results arrived: which function was graded. The grading cell
    reports, before it calls any of the student's functions, each graded function's code object
    (``code``: the cell of the program it was compiled from, its first line and its name; an
    ``functools.cache`` wrapper is looked through) or what the object is instead. It is matched
    to ``functions`` (:attr:`~nbhelpers.grading.definitions.Definitions.functions`, the
    functions the program's kept statements make): ``in_notebook`` is True when one matches, and
    ``source`` (with its ``sha256``) is then that ``def``'s text from the notebook, as the grader
    parsed it; otherwise ``source`` is None and ``why`` says what was graded instead (a wrapper,
    a function from a module, an object)."""
    table = {(int(i), int(line), str(name)): str(text) for i, line, name, text in functions}
    out = {}
    for ex_id, rec in records.items():
        if "results" not in rec:
            continue
        code = rec.get("code")
        src, why = None, NOT_A_DEFINITION + ": the grading cell saw no code object"
        if isinstance(code, dict) and {"cell", "line", "name"} <= code.keys():
            key = (code["cell"], code["line"], code["name"])
            if all(isinstance(k, t) and not isinstance(k, bool) for k, t in zip(key, (int, int, str))):
                src = table.get(key)
                where = f"line {key[1]} of cell {key[0] + 1}"
                why = f"{NOT_A_DEFINITION}: its code starts at {where}, where no def kept starts"
        elif isinstance(code, dict) and isinstance(code.get("not"), str):
            why = f"{NOT_A_DEFINITION}: it is {safe_name(code['not'])[:100]}"
        out[ex_id] = {
            "source": src,
            "sha256": hashlib.sha256(src.encode("utf-8", "backslashreplace")).hexdigest() if src else None,
            "in_notebook": src is not None,
            "why": None if src is not None else why,
        }
    return out


def kernel_groups(plan: ChapterPlan, exercise_ids: list[str]) -> list[dict] | None:
    """The clean kernels a sandboxed submission's functions are graded in: one with every module
    installed for the functions whose exercises list no tools (none where there are none), and
    one tools kernel per set of tools, which holds only those (:mod:`nbhelpers.grading.tools_view`).
    None when no exercise lists tools: one kernel."""
    plain: list[str] = []
    by_tools: dict[tuple, list[str]] = {}
    for p in plan.exercises:
        if p.exercise.id not in exercise_ids:
            continue
        if p.exercise.tools is None:
            plain.append(p.exercise.id)
        else:
            by_tools.setdefault(tuple(p.exercise.tools), []).append(p.exercise.id)
    if not by_tools:
        return None
    pkg = str(course_package_dir())
    views = [{"ids": ids, "view": tools_view(tools, pkg).as_dict()} for tools, ids in by_tools.items()]
    return [{"ids": plain, "view": None}, *views]


def names_made_outside(plan: ChapterPlan, cells: list[tuple[int, str]]) -> dict[str, dict[str, str]]:
    """For each exercise that lists its tools, the notebook's top-level names whose values came
    from modules outside them (:func:`nbhelpers.top_level.outside_names` over its code cells,
    check cells left out): its watch refuses a function that reads one, as the check cell does."""
    out: dict[str, dict[str, str]] = {}
    by_tools: dict[tuple, dict[str, str]] = {}
    read, budget = [], MAX_DEFINITIONS_PARSE_CHARS  # as much as the program is read from
    for index, src in cells:
        if len(src) > budget:
            break
        budget -= len(src)
        read.append((index, src))
    for p in plan.exercises:
        tools = p.exercise.tools
        if tools is None:
            continue
        if tuple(tools) not in by_tools:
            with PARSE_LOCK:  # ast.parse is not thread-safe (see submissions.PARSE_LOCK)
                by_tools[tuple(tools)] = outside_names(read, outside_of(tools))
        if by_tools[tuple(tools)]:
            out[p.exercise.id] = by_tools[tuple(tools)]
    return out


def _why_not_run(
    sub: Submission, chapter: int | None, note: str, opts: GradeOptions
) -> tuple[int | None, Status, str, int | None] | None:
    """For a submission that is not run: (its chapter, its status, the detail, the chapter whose
    exercises it gets 0 for). None when it is to be run."""
    if sub.problem is not None:
        ch = opts.chapter if opts.chapter is not None else chapter
        return ch, sub.problem, sub.detail, ch
    if chapter is None:
        return (
            None,
            Status.UNKNOWN_CHAPTER,
            note or 'no check("exNN.…") call and no exNN in the file name',
            opts.chapter,
        )
    if opts.chapter is not None and chapter != opts.chapter:
        why = f"this is a chapter {chapter:02d} notebook, not chapter {opts.chapter:02d}" + (
            f" ({note})" if note else ""
        )
        return chapter, Status.WRONG_CHAPTER, why, opts.chapter
    return None


def _missing_reason(total_timeout: bool, worker_failed: bool, opts: GradeOptions) -> tuple[CheckStatus, str]:
    """(status, error) of an exercise the kernel wrote no results for."""
    if total_timeout:
        return CheckStatus.NOT_RUN, f"not checked: the notebook ran out of time ({opts.timeout:g} s in all)"
    if worker_failed:
        return CheckStatus.NOT_RUN, "not checked: the grader failed"
    return CheckStatus.NOT_RUN, "not checked: the grading cell did not finish"


def _judge_all(
    plan: ChapterPlan, outputs: dict[str, dict], events: list[dict], missing: tuple[CheckStatus, str]
) -> dict[str, CheckResult]:
    died = {
        e.get("exercise")
        for e in events
        if e.get("event") == Event.KERNEL_DIED and e.get("exercise") and not e.get("retry")
    }
    results = {}
    for p in plan.exercises:
        reason = (
            (CheckStatus.DIED, "the kernel died while this function was checked, twice")
            if p.exercise.id in died
            else missing
        )
        results[p.exercise.id] = judge(p, outputs.get(p.exercise.id), reason, plan.classes)
    return results
