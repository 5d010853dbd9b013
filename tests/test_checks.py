"""Tests of nbhelpers.checks: the comparators (same_value, same_value_up_to_zero_sign, close_to),
Case and Exercise, how a chapter module's EXERCISES list is read, run_check / check / summary,
and CheckStatus. The exercises checked here belong to fake chapter modules (ch99, ch97, ...)
installed for one test; the real chapters' exercises are tested in test_exercises*.py."""

from nbhelpers.device import setup_device

# first: the registry's lookups here load real chapter modules, and chapters 08-10 import the
# kernels, which must be imported in the interpreter's mode on a CPU (whatever runs after this file)
setup_device(verbose=False)

import csv
import importlib
import io
import json
import math
import sys
import traceback
import types
from pathlib import Path

import numpy as np
import pytest

import nbhelpers.answer_keys
from nbhelpers import checks
from nbhelpers.checks import (
    Case,
    CheckResult,
    CheckStatus,
    Exercise,
    check,
    close_to,
    prepare_check,
    run_check,
    same_value,
    same_value_up_to_zero_sign,
)


@pytest.fixture(autouse=True)
def fresh_scoreboard(monkeypatch):
    """Each test gets an empty scoreboard (chapter modules are not touched)."""
    monkeypatch.setattr(checks, "_SCOREBOARD", {})


def install_chapter(monkeypatch, chapter: int, exercises) -> types.ModuleType:
    """A fake chapter module ``nbhelpers.answer_keys.chNN`` with this EXERCISES list, in
    sys.modules for one test (where get_exercise's import finds it)."""
    module = types.ModuleType(f"nbhelpers.answer_keys.ch{chapter:02d}")
    if exercises is not None:
        module.EXERCISES = exercises
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


# ---- a fake chapter 99 -----------------------------------------------------------------------


def scale_ref(x, factor=2.0):
    """x * factor, elementwise (x: float array)."""
    return np.asarray(x, dtype=np.float64) * factor


def scale_cases(rng):
    edge = [
        Case((np.array([0.0, -0.0]),), label="signed zeros"),
        Case((np.array([np.inf, -np.inf, np.nan]),), label="specials"),
        Case((np.array([1.5]),), {"factor": -1.0}, label="negative factor"),
    ]
    rand = [Case((rng.standard_normal(rng.integers(1, 20)),)) for _ in range(30)]
    return edge + rand


def inv_ref(x):
    """1 / x for a nonzero float."""
    return 1.0 / x


def inv_cases(rng):
    return [Case((1.0,), label="one")] + [Case((float(v),)) for v in rng.uniform(1, 2, 20)]


def make_scale(**kw):
    return Exercise("ex99.scale", "Scale an array", 4, scale_ref, scale_cases, **kw)


@pytest.fixture
def ch99(monkeypatch):
    scale = make_scale()
    inv = Exercise("ex99.inv", "Reciprocal", 3, inv_ref, inv_cases)
    install_chapter(monkeypatch, 99, [scale, inv])
    return scale, inv


# ---- same_value --------------------------------------------------------------------------------


def test_same_value_numbers():
    assert same_value(float("nan"), float("nan")) is None
    assert same_value(np.float32("nan"), np.nan) is None
    assert same_value(-0.0, 0.0) == "sign of zero differs"
    assert same_value(0.0, -0.0) is not None
    assert same_value(3, 3.0) is None
    assert same_value(3.0, 3) is None
    assert same_value(np.int64(3), 3) is None
    assert same_value(np.float32(1.5), 1.5) is None
    assert same_value(np.array(2.5), 2.5) is None  # a 0-d array is a number
    assert same_value(True, 1) is None
    assert same_value(1.0, 1.0 + 2**-52) == "wrong value"
    assert same_value(2**60 + 1, 2**60) == "wrong value"  # ints compare exactly
    assert same_value(1.0, np.nan) == "expected NaN"
    assert same_value(np.nan, 1.0) == "returned NaN"
    assert same_value(np.inf, np.inf) is None and same_value(-np.inf, np.inf) is not None
    assert same_value(0, -0.0) is None  # an int zero has no sign


def test_same_value_wrong_types_give_reasons():
    assert same_value("abc", 1.0) == "returned str 'abc', expected a number"
    assert same_value(None, 1.0) == "returned None, expected a number"
    assert "expected a number" in same_value([1.0], 1.0)
    assert "expected a number" in same_value(np.array([1.0, 2.0]), 1.0)
    assert "expected a number" in same_value(object(), 1.0)
    assert "length 2" in same_value([1, 2], (1, 2, 3))
    assert "expected a tuple" in same_value(5, (1, 2))
    assert "expected an array" in same_value("abc", np.zeros(3))
    assert "expected an array" in same_value(None, np.zeros(3))
    assert "expected an array" in same_value(1.0, np.zeros(3))
    assert same_value(1, None) == "returned int 1, expected None"

    class Hostile:
        def __float__(self):
            raise RuntimeError("no")

        def __eq__(self, other):
            raise RuntimeError("no")

        def __array__(self, *a, **k):
            raise RuntimeError("no")

    for expected in (1.0, np.zeros(2), (1, 2), "x"):
        assert isinstance(same_value(Hostile(), expected), str)


def test_same_value_arrays():
    a = np.array([1.0, -0.0, np.nan, np.inf])
    assert same_value(a.copy(), a) is None
    assert same_value(a.astype(np.float32), a) is None  # dtype may differ, values may not
    assert same_value(list(a), a) is None
    assert "shape (3,)" in same_value(a[:3], a)
    assert "shape (1, 4)" in same_value(a[None], a)
    r = same_value(np.array([1.0, 0.0, np.nan, np.inf]), a)
    assert r.startswith("1 of 4 elements differ; first at index [1]") and "sign of zero" in r
    r = same_value(np.array([[1, 2], [3, 5]]), np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert "index [1, 1]" in r and "got 5, expected 4.0" in r
    assert same_value(np.array([1, 2], np.uint8), np.array([1, 2], np.int64)) is None  # ints as numbers
    big = np.array([2**63 + 1], np.uint64)
    assert same_value(big, np.array([2**63], np.uint64)) is not None
    assert same_value(np.array([-1], np.int64), np.array([2**64 - 1], np.uint64)) is not None
    assert same_value(np.array(["a", "b"]), np.zeros(2)) is not None
    assert same_value(np.zeros((0, 3)), np.zeros((0, 3))) is None


def test_same_value_ml_dtypes_and_tuples():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, -0.0], dtype=ml_dtypes.bfloat16)
    assert same_value(x, np.array([1.5, -0.0])) is None
    assert same_value(ml_dtypes.bfloat16(1.5), 1.5) is None
    from nbhelpers.formats import fields

    expected = fields(np.array([0x3FC0], np.uint16), "bf16")
    got = (np.array([0]), np.array([127]), np.array([0x40]))
    assert same_value(got, expected) is None
    r = same_value((np.array([0]), np.array([126]), np.array([0x40])), expected)
    assert r.startswith(f"element 1 ({expected._fields[1]}):")


# ---- Case and Exercise -------------------------------------------------------------------------


def test_case_and_exercise_fields():
    c = Case([1, 2], {"k": 3}, "lbl")
    assert c.args == (1, 2) and dict(c.kwargs) == {"k": 3} and c.label == "lbl"
    with pytest.raises(TypeError):
        c.kwargs["k"] = 4
    hash(Case((1.0,), {"rounding": "nearest_even"}))
    ex = make_scale()
    assert ex.chapter == 99 and ex.name == "scale"
    with pytest.raises(ValueError):
        Exercise("ex1.scale", "t", 1, scale_ref, scale_cases)
    with pytest.raises(ValueError):
        Exercise("decode_bits", "t", 1, scale_ref, scale_cases)


def test_exercises_come_in_the_order_of_the_list(ch99):
    scale, inv = ch99
    assert checks.exercises_of(99) == [scale, inv]
    assert [e.id for e in checks.exercises_of(99)] == ["ex99.scale", "ex99.inv"]
    assert checks.get_exercise("ex99.inv") is inv
    assert checks.exercises_of(95) == []  # no module: no exercises


def test_duplicate_id_in_exercises_is_a_checker_error_naming_it(monkeypatch, capsys):
    install_chapter(
        monkeypatch, 99, [make_scale(), Exercise("ex99.inv", "Reciprocal", 3, inv_ref, inv_cases), make_scale()]
    )
    with pytest.raises(checks.CheckerError, match=r"nbhelpers\.answer_keys\.ch99\.EXERCISES lists 'ex99\.scale' twice"):
        checks.get_exercise("ex99.inv")  # any id of the chapter: the list itself is wrong
    with pytest.raises(checks.CheckerError, match="'ex99.scale' twice"):
        checks.exercises_of(99)
    r = check("ex99.scale", scale_ref)  # check() never raises: the course's bug, reported
    assert r.status is CheckStatus.ERROR and "'ex99.scale' twice" in r.error
    assert "'ex99.scale' twice" in capsys.readouterr().out


@pytest.mark.parametrize(
    "listed,match",
    [
        (None, "must define EXERCISES, a list of Exercise objects"),
        ("ex99.scale", "must define EXERCISES, a list of Exercise objects"),
        ([scale_ref], "holds .*scale_ref.*not an Exercise of chapter 99"),
        ([Exercise("ex98.scale", "Scale", 1, scale_ref, scale_cases)], "holds .*not an Exercise of chapter 99"),
    ],
    ids=["no list", "a string", "a function", "another chapter's exercise"],
)
def test_malformed_exercises_list_is_a_checker_error(monkeypatch, listed, match):
    install_chapter(monkeypatch, 99, listed)
    with pytest.raises(checks.CheckerError, match=match):
        checks.get_exercise("ex99.scale")


def test_the_list_is_read_afresh_on_every_call(ch99, monkeypatch):
    module = sys.modules["nbhelpers.answer_keys.ch99"]
    new_scale = make_scale()
    monkeypatch.setattr(module, "EXERCISES", [new_scale])  # as an autoreload would leave it
    assert checks.get_exercise("ex99.scale") is new_scale
    with pytest.raises(KeyError, match="known: ex99.scale$"):
        checks.get_exercise("ex99.inv")


@pytest.mark.parametrize("chapter,exercise_id", [(1, "ex01.decode_bits"), (2, "ex02.sum_of_copies")])
def test_reloading_a_real_chapter_module_then_get_exercise_works(chapter, exercise_id):
    module = importlib.import_module(f"nbhelpers.answer_keys.ch{chapter:02d}")
    before = checks.get_exercise(exercise_id)
    importlib.reload(module)  # what a notebook's autoreload or a second import does
    importlib.reload(module)
    after = checks.get_exercise(exercise_id)
    assert after in module.EXERCISES and after is not before  # the reloaded module's exercise
    assert after.id == before.id and after.points == before.points
    assert [e.id for e in checks.exercises_of(chapter)] == [e.id for e in module.EXERCISES]
    assert run_check(exercise_id, after.reference, watch=False).passed  # the reference against itself


def test_get_exercise_imports_chapter_module_lazily(tmp_path, monkeypatch):
    (tmp_path / "ch97.py").write_text(
        "from nbhelpers.checks import Case, Exercise\n"
        "def double(x):\n    return 2 * x\n"
        "EXERCISES = [Exercise('ex97.double', 'Double', 2, double, lambda rng: [Case((1,)), Case((2.5,))])]\n"
    )
    monkeypatch.setattr(nbhelpers.answer_keys, "__path__", [*nbhelpers.answer_keys.__path__, str(tmp_path)])
    importlib.invalidate_caches()
    try:
        ex = checks.get_exercise("ex97.double")
        assert ex.title == "Double" and "nbhelpers.answer_keys.ch97" in sys.modules
        assert run_check("ex97.double", lambda x: x + x).passed
        with pytest.raises(KeyError, match="known: ex97.double"):
            checks.get_exercise("ex97.triple")
    finally:
        sys.modules.pop("nbhelpers.answer_keys.ch97", None)
    with pytest.raises(KeyError, match="chapter 96 has no exercises"):
        checks.get_exercise("ex96.anything")
    with pytest.raises(KeyError, match="ids look like"):
        checks.get_exercise("decode_bits")


# ---- run_check ---------------------------------------------------------------------------------


def test_correct_function_scores_full_points(ch99):
    def scale(x, factor=2.0):
        return np.array([v * factor for v in x])

    r = run_check("ex99.scale", scale)
    assert r.passed and r.points == 4 == r.max_points and r.n_failed == 0 and r.error is None
    assert r.n_cases == 33
    assert str(r) == "PASS  ex99.scale  4/4 points  (33 cases)"
    json.dumps(r.to_dict())
    assert r.to_dict()["passed"] is True


@pytest.mark.parametrize("wrong_at", [None, 0, 5, 32])
def test_stopping_at_the_first_failure_gives_the_same_verdict_and_calls_no_further(ch99, wrong_at):
    """run_check(stop_at_first_failure=True) stops calling the function at the first case it gets
    wrong (raised or a wrong value), and its verdict is the full check's; a right function is
    called on every case and passes."""
    for raises in (False, True):
        calls: list[int] = []

        def scale(x, factor=2.0):
            calls.append(1)
            if len(calls) - 1 == wrong_at:
                if raises:
                    raise ValueError("odd case")
                return np.asarray(x) * factor + 1.0
            return np.asarray(x, dtype=np.float64) * factor

        fast = run_check("ex99.scale", scale, stop_at_first_failure=True)
        assert len(calls) == (33 if wrong_at is None else wrong_at + 1)
        calls.clear()
        full = run_check("ex99.scale", scale)
        assert len(calls) == 33
        assert (fast.passed, fast.points, fast.status) == (full.passed, full.points, full.status)
        if wrong_at is not None:
            assert fast.mismatches == full.mismatches[:1] and fast.n_failed == 33 - wrong_at
            if not raises and wrong_at < 32:
                assert fast.error == f"{33 - wrong_at - 1} of 33 cases were not run"


def test_wrong_function_lists_mismatching_inputs(ch99):
    r = run_check("ex99.scale", lambda x, factor=2.0: np.abs(x) * factor)
    assert not r.passed and r.points == 0 and r.error is None
    assert 0 < r.n_failed < r.n_cases and 1 <= len(r.mismatches) <= checks.MAX_MISMATCHES
    first = r.mismatches[0]
    assert first.startswith("scale(array([ 0., -0.]))") and "[signed zeros]" in first
    assert "sign of zero differs" in first
    text = str(r)
    assert text.startswith(f"FAIL  ex99.scale  0/4 points  ({r.n_failed} of {r.n_cases} cases failed)")
    assert "  first mismatches:" in text

    r = run_check("ex99.inv", lambda x: 2.0 / x)  # every case fails: only the first few are listed
    assert r.n_failed == r.n_cases == 21 and len(r.mismatches) == checks.MAX_MISMATCHES
    assert r.mismatches[0] == "inv(1.0) returned 2.0, expected 1.0 (wrong value)  [one]"


def test_not_implemented_is_todo(ch99):
    calls = []

    def scale(x, factor=2.0):
        calls.append(1)
        raise NotImplementedError("about 3 lines")

    r = run_check("ex99.scale", scale)
    assert r.status == "TODO" and r.points == 0 and not r.passed and len(calls) == 1
    assert r.error == "NotImplementedError: about 3 lines"
    assert str(r) == "TODO  ex99.scale  0/4 points  (not implemented yet)"


class Custom(BaseException):
    pass


@pytest.mark.parametrize(
    "exc",
    [
        ZeroDivisionError("division by zero"),
        SystemExit(3),
        Custom("boom"),
        GeneratorExit(),
        NotImplementedError("later"),
    ],
)
def test_exceptions_do_not_escape(ch99, exc):
    def inv(x):
        if x != 1.0:  # the first case passes, so NotImplementedError here is a plain failure
            raise exc
        return 1.0

    r = run_check("ex99.inv", inv)
    assert r.status == "FAIL" and r.points == 0 and r.n_failed == 20
    assert r.error.startswith(type(exc).__name__)
    assert "raised " + type(exc).__name__ in r.mismatches[0]
    assert "first exception:" in str(r)


def test_keyboard_interrupt_goes_through(ch99):
    def inv(x):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_check("ex99.inv", inv)


def test_huge_messages_are_truncated(ch99):
    def inv(x):
        raise ValueError("x" * 100_000)

    r = run_check("ex99.inv", inv)
    assert len(r.error) <= checks.REPR_LIMIT and all(len(m) < 3 * checks.REPR_LIMIT for m in r.mismatches)
    r = run_check("ex99.scale", lambda x, factor=2.0: "y" * 100_000)
    assert all(len(m) < 3 * checks.REPR_LIMIT for m in r.mismatches)


@pytest.mark.parametrize(
    "bad",
    [
        lambda x, factor=2.0: "abc",
        lambda x, factor=2.0: None,
        lambda x, factor=2.0: np.zeros((2, 2)),
        lambda x, factor=2.0: np.nan,
        lambda x, factor=2.0: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21],
        lambda x, factor=2.0: object(),
    ],
)
def test_wrong_return_types_fail_with_a_reason(ch99, bad):
    r = run_check("ex99.scale", bad)
    assert r.status == "FAIL" and r.n_failed == r.n_cases and r.error is None
    assert "expected" in r.mismatches[0] and r.mismatches[0].count("(") >= 2

    r = run_check("ex99.inv", bad)
    assert r.status == "FAIL" and r.n_failed == r.n_cases


def test_wrong_type_reason_in_mismatch(ch99):
    r = run_check("ex99.inv", lambda x: "abc")
    assert r.mismatches[0] == "inv(1.0) returned 'abc', expected 1.0 (returned str 'abc', expected a number)  [one]"
    r = run_check("ex99.inv", lambda x: float("nan"))
    assert "(returned NaN)" in r.mismatches[0]


def test_mutating_inputs_does_not_corrupt_the_reference(ch99):
    def scale(x, factor=2.0):
        y = x * factor
        x[...] = 12345.0  # vandalise the input after computing the answer
        return y

    assert run_check("ex99.scale", scale).passed

    seen = []

    def scale_then_check(x, factor=2.0):
        seen.append(x.copy())
        x[...] = -1.0
        return seen[-1] * factor

    assert run_check("ex99.scale", scale_then_check).passed
    cases = checks.cases_for("ex99.scale")
    assert all(np.array_equal(s, c.args[0], equal_nan=True) for s, c in zip(seen, cases))


def test_not_callable(ch99):
    r = run_check("ex99.inv", 42)
    assert r.error == "expected a function, got int" and r.points == 0 and not r.passed
    assert "expected a function, got int" in str(r)


def test_warnings_are_silenced(ch99, recwarn):
    import warnings

    def inv(x):
        warnings.warn("student warning")
        np.float64(1.0) / np.float64(0.0)
        return 1.0 / x

    with np.errstate(all="raise"):  # even a strict caller's setting does not leak in
        assert run_check("ex99.inv", inv).passed
    assert len(recwarn) == 0


def test_seed_changes_random_cases_not_edge_cases(ch99):
    a, b, a2 = (checks.cases_for("ex99.scale", seed) for seed in (0, 1, 0))
    edge = [c for c in a if c.label]
    assert [c.label for c in edge] == ["signed zeros", "specials", "negative factor"]
    for x, y in zip(a[:3], b[:3]):
        assert np.array_equal(x.args[0], y.args[0], equal_nan=True)
    rand_a, rand_b, rand_a2 = ([c.args[0] for c in cs if not c.label] for cs in (a, b, a2))
    assert all(np.array_equal(x, y) for x, y in zip(rand_a, rand_a2))  # deterministic
    assert not all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(rand_a, rand_b))

    # answers memorised for the seed-0 cases pass with seed 0 and fail with another seed
    table = {(c.args[0].tobytes(), c.kwargs.get("factor", 2.0)): scale_ref(*c.args, **c.kwargs) for c in a}

    def cheat(x, factor=2.0):
        return table.get((x.tobytes(), factor), np.zeros_like(x))

    assert run_check("ex99.scale", cheat, seed=0).passed
    assert not run_check("ex99.scale", cheat, seed=1).passed


def test_checker_bugs_raise_checker_error(ch99, monkeypatch):
    ex = Exercise("ex99.broken", "Broken", 1, lambda x: 1 / 0, lambda rng: [Case((1,))])
    install_chapter(monkeypatch, 99, [*ch99, ex])
    with pytest.raises(checks.CheckerError, match="reference raised ZeroDivisionError"):
        run_check(ex, lambda x: x)
    r = check("ex99.broken", lambda x: x)
    assert r.status == "ERROR" and "not your fault" in r.error and r.points == 0


# ---- check, summary ------------------------------------------------------------------------


def test_check_prints_and_records(ch99, capsys):
    r = check("ex99.inv", lambda x: 1 / x)
    out = capsys.readouterr().out
    assert out.strip() == str(r) == "PASS  ex99.inv  3/3 points  (21 cases)"
    assert repr(r) == "<CheckResult PASS ex99.inv 3/3 points>"


def test_check_unknown_id_does_not_raise(ch99, capsys):
    r = check("ex99.foo", lambda x: x)
    out = capsys.readouterr().out
    assert "unknown exercise 'ex99.foo'; known: ex99.scale, ex99.inv" in out
    assert isinstance(r, CheckResult) and r.error and r.points == 0 and r.status == "ERROR"
    r = check("ex98.foo", lambda x: x)
    assert "unknown exercise 'ex98.foo'" in capsys.readouterr().out and r.points == 0
    r = check(None, None)
    assert r.status == "ERROR"


def test_summary(ch99, capsys):
    check("ex99.inv", lambda x: 1 / x)
    capsys.readouterr()
    s = checks.summary(99)
    out = capsys.readouterr().out
    assert s == {"earned": 3, "max": 7, "exercises": {"ex99.scale": 0, "ex99.inv": 3}}
    assert out.rstrip().splitlines()[-1] == "TOTAL: 3/7 points"
    assert "not checked" in out and "ex99.scale" in out

    check("ex99.scale", lambda x, factor=2.0: x)
    check("ex99.inv", lambda x: 0.0)  # the latest result counts, not the best
    assert checks.summary(99) == {"earned": 0, "max": 7, "exercises": {"ex99.scale": 0, "ex99.inv": 0}}
    checks.reset_scoreboard()
    capsys.readouterr()
    assert checks.summary(99)["earned"] == 0
    out = capsys.readouterr().out
    assert out.count("not checked") == 2 and out.rstrip().endswith("TOTAL: 0/7 points")
    assert checks.summary(95) == {"earned": 0, "max": 0, "exercises": {}}


def test_nan_handling_in_run_check(ch99):
    assert run_check("ex99.scale", lambda x, factor=2.0: np.multiply(x, factor)).passed
    assert math.isnan(scale_ref(np.array([np.nan]))[0])


# ---- CheckStatus -------------------------------------------------------------------------------


def test_check_status_is_the_word_it_prints():
    # a check cell concludes one of the first four; the grader has words of its own after them
    assert [s.value for s in CheckStatus][:4] == ["PASS", "FAIL", "TODO", "ERROR"]
    for s in CheckStatus:
        assert isinstance(s, str) and s == s.value and CheckStatus(s.value) is s
        assert str(s) == s.value and f"{s}" == s.value and format(s) == s.value
        assert f"{s:<5}|" == f"{s.value:<5}|" and f"{s:>6}" == f"{s.value:>6}"
        assert json.dumps(s) == f'"{s.value}"' and json.loads(json.dumps({"status": s}))["status"] == s.value
        buf = io.StringIO()
        csv.writer(buf).writerow([s, 1])
        assert buf.getvalue().strip() == f"{s.value},1"
    assert CheckStatus.PASS != "FAIL" and CheckStatus.TODO != "todo"
    with pytest.raises(ValueError):
        CheckStatus("MAYBE")


def test_check_result_status_is_a_check_status(ch99):
    r = run_check("ex99.inv", lambda x: 1 / x)
    assert r.status is CheckStatus.PASS and r.status == "PASS"
    assert str(r) == "PASS  ex99.inv  3/3 points  (21 cases)"  # the report reads as before
    d = r.to_dict()
    assert type(d["status"]) is str and d["status"] == "PASS"
    assert json.loads(json.dumps(d))["status"] == "PASS"
    r = run_check("ex99.inv", lambda x: 2 / x)
    assert r.status is CheckStatus.FAIL and str(r).startswith("FAIL  ex99.inv  0/3 points  (21 of 21 cases failed)")
    # a status given as the word is turned into the member; derived from points when left out
    assert CheckResult("ex99.inv", "t", 0, 3, 1, 0, [], "x", "ERROR").status is CheckStatus.ERROR
    assert CheckResult("ex99.inv", "t", 3, 3, 1, 0).status is CheckStatus.PASS
    assert CheckResult("ex99.inv", "t", 0, 3, 1, 1).status is CheckStatus.FAIL
    with pytest.raises(ValueError):
        CheckResult("ex99.inv", "t", 0, 3, 1, 1, status="MAYBE")
    todo = CheckResult("ex99.inv", "Reciprocal", 0, 3, 21, 21, [], "NotImplementedError: later", "TODO")
    assert str(todo) == "TODO  ex99.inv  0/3 points  (not implemented yet)"
    assert repr(todo) == "<CheckResult TODO ex99.inv 0/3 points>"


# ---- same_value_up_to_zero_sign, close_to ------------------------------------------------------


def test_same_value_up_to_zero_sign_ignores_only_the_sign_of_zeros():
    cmp = same_value_up_to_zero_sign
    assert same_value(-0.0, 0.0) is not None and cmp(-0.0, 0.0) is None and cmp(0.0, -0.0) is None
    assert cmp(np.float32(-0.0), 0.0) is None
    got = np.array([1.5, -0.0, 0.0, np.nan, -np.inf])
    assert cmp(got, np.array([1.5, 0.0, -0.0, np.nan, -np.inf])) is None
    assert np.signbit(got[1]) and not np.signbit(got[2])  # the student's array is not modified
    assert cmp((np.array([-0.0, 2.0]), -0.0), (np.array([0.0, 2.0]), 0.0)) is None  # tuples of results
    assert cmp([np.array([-0.0]), 0.0], (np.array([0.0]), -0.0)) is None  # a list for a tuple
    # everything else is still compared bit for bit
    assert cmp(1.0, 1.0 + 2**-52) == "wrong value"
    assert cmp(np.inf, -np.inf) is not None and cmp(np.nan, 0.0) == "returned NaN"
    assert cmp(0.0, np.nan) == "expected NaN"
    r = cmp(np.array([-0.0, 1.0 + 2**-7]), np.array([0.0, 1.0]))  # a plausible wrong answer: one bf16 ulp
    assert r.startswith("1 of 2 elements differ; first at index [1]") and "sign of zero" not in r
    assert "expected a tuple" in cmp(-0.0, (0.0, 1.0))
    assert cmp("abc", 0.0) == "returned str 'abc', expected a number"


def test_close_to_accepts_reordered_results_and_rejects_wrong_ones():
    close = close_to(1e-12)
    assert close.__name__ == "close_to(1e-12)"
    rng = np.random.default_rng(0)
    C = rng.standard_normal((6, 5))
    ref = float(np.linalg.norm(C))
    other_order = math.sqrt(math.fsum((C**2).ravel()[::-1]))  # the same norm computed another way
    assert close(other_order, ref) is None and close(ref * (1 + 4e-16), ref) is None
    assert close(ref, ref) is None and close(np.float64(ref), ref) is None
    # plausible wrong answers: the largest element instead of the norm, a missing square root,
    # an error far below a percent but far above reordering
    for wrong in [float(np.abs(C).max()), ref**2, ref * (1 + 1e-9)]:
        r = close(wrong, ref)
        assert r.startswith("wrong value") and r.endswith("(tolerance: relative 1e-12)")
    # 0, inf and NaN must match exactly
    assert close(1e-300, 0.0) == "wrong value" and close(0.0, 0.0) is None
    assert close(1e308, np.inf) is not None and close(np.inf, np.inf) is None
    assert close(np.nan, np.nan) is None and close(1.0, np.nan) == "expected NaN"
    assert close(np.inf, 1.0) is not None and close(np.nan, 1.0).startswith("returned NaN")
    assert close("abc", 1.0) == "returned str 'abc', expected a number"  # no tolerance for a non-number
    assert "expected a number" in close(np.array([1.0, 2.0]), 1.0)
    for bad in [0.0, 1.0, -1e-12, 1, "1e-12", None]:
        with pytest.raises(ValueError, match="rtol must be a float between 0 and 1"):
            close_to(bad)


def test_compare_all_judges_the_answers_together_only_when_every_case_passed():
    """An exercise's compare_all sees every expected result and answer once each case passed; its
    reason fails the check with a line naming the function; one that raises fails it too, never
    the check itself; together=False (one case scored alone) skips it."""
    from nbhelpers.exercise_types import Case, Exercise

    seen = []

    def together(expected, got):
        seen.append((list(expected), list(got)))
        return None if len(set(got)) > 1 else "every answer is the same"

    ex = Exercise(
        "ex99.double", "Double", 1, lambda v: 2 * v, lambda rng: [Case((1,)), Case((2,))], compare_all=together
    )
    cases = ex.cases(None)
    assert checks.score(ex, cases, [2, 4], [2, 4]).passed and seen[-1] == ([2, 4], [2, 4])
    bad = checks.score(ex, cases, [2, 2], [2, 2])
    assert not bad.passed and bad.points == 0 and "double(...) across the cases: every answer is the same" in str(bad)
    assert checks.score(ex, cases[:1], [2], [2], together=False).passed
    n = len(seen)
    assert not checks.score(ex, cases, [2, 4], [2, 5]).passed and len(seen) == n  # a case failed: not asked

    def hostile(expected, got):
        raise RuntimeError("boom")

    ex2 = Exercise("ex99.double", "Double", 1, lambda v: 2 * v, lambda rng: [Case((1,))], compare_all=hostile)
    res = checks.score(ex2, ex2.cases(None), [2], [2])
    assert not res.passed and "could not compare the answers together" in str(res)
    with pytest.raises(TypeError, match="compare_all must be callable"):
        Exercise("ex99.double", "Double", 1, lambda v: v, lambda rng: [], compare_all=3)


# ---- what the function can read of the check while it runs -------------------------------------


def locals_on_the_stack() -> str:
    """Every local of every frame of the course's package on the stack, by repr, as a traceback
    that captures locals shows them: a function reads them so without naming a frame's insides.
    (pytest's frames, below them, are the test's and are left out: their reprs are large.)"""
    package = str(Path(checks.__file__).parent)
    ours = ((f, n) for f, n in traceback.walk_stack(None) if f.f_code.co_filename.startswith(package))
    frames = traceback.StackSummary.extract(ours, capture_locals=True, lookup_lines=False)
    return "\n".join(f"{f.name}: {k} = {v}" for f in frames for k, v in (f.locals or {}).items())


@pytest.mark.parametrize("prepared", [False, True])
def test_no_frame_on_the_stack_shows_the_expected_answers_while_the_function_runs(ch99, prepared):
    """run_check holds the expected results where a frame's locals by repr do not show them,
    whether it prepared them or its caller did (the caller's own frame is the caller's)."""
    _, inv = ch99
    seen = []

    def spy(x):
        seen.append(locals_on_the_stack())
        return 0.0

    cases, expected = prepare_check(inv, 3)
    result = run_check(inv, spy, seed=3, watch=False, prepared=(cases, expected) if prepared else None)
    assert result.passed is False and len(seen) == len(cases)
    for text in seen:
        assert "run_check: " in text  # the check's frame is read
        for e in expected[1:]:  # the first, 1 / 1.0, is its own argument
            assert repr(e) not in text
