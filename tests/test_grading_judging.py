"""Judging on the trusted side (nbhelpers.grading.judging): every chapter's plan, what a hostile
kernel wrote judged safely, the same scoring as a check cell, and a submission's status."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re

import numpy as np
import pytest

import nbhelpers.answer_keys
from nbhelpers import checks
from nbhelpers.checks import Raised, cases_for, same_value
from nbhelpers.grading.in_kernel import decode, encode, import_class
from nbhelpers.grading.jobs import Event, WorkerAnswer
from nbhelpers.grading.judging import decode_result, event_text, judge, plan_chapter, read_outputs, stand_in, status_of
from nbhelpers.grading.options import SeedKind, Status


@pytest.mark.parametrize(
    "module",
    sorted(m.name for m in pkgutil.iter_modules(nbhelpers.answer_keys.__path__) if re.fullmatch(r"ch\d\d", m.name)),
)
def test_every_chapters_inputs_can_be_sent_to_a_kernel(module):
    """A new chapter needs no change to the grader, as long as its case inputs are data
    (numbers, strings, tuples, arrays, generators, nbhelpers enums and dataclasses)."""
    chapter = int(module[2:])
    importlib.import_module(f"nbhelpers.answer_keys.{module}")
    plan = plan_chapter(chapter, seed=12345)
    assert plan is not None and plan.exercises
    for p in plan.exercises:
        assert p.error is None, p.error
    sent = json.loads(plan.inputs_json)["exercises"]
    for p, s in zip(plan.exercises, sent):
        assert s["id"] == p.exercise.id and len(s["cases"]) == len(p.cases)
        for case, enc in zip(p.cases, s["cases"]):
            args = [decode(a, stand_in, import_class) for a in enc["a"]]
            assert len(args) == len(case.args)
            for got, want in zip(args, case.args):
                assert type(got) is type(want) or isinstance(want, tuple)
                if isinstance(want, np.random.Generator):
                    continue
                assert same_value(got, want) is None


def test_outputs_written_by_a_hostile_kernel_are_judged_safely(tmp_path):
    plan = plan_chapter(1, seed=0)
    p = plan.exercises[3]  # smallest_absorbing, 60 cases
    good = [{"v": v} for v in (encode(e) for e in p.expected)]
    nonce = "5" * 32
    lines = [
        b"not json at all\n",
        b'{"id": "ex01.smallest_absorbing", "results": [' + b"[" * 5000 + b"\n",  # truncated, deep
        json.dumps([1, 2]).encode() + b"\n",
        json.dumps({"id": "ex01.decode_bits", "results": []}).encode() + b"\n",  # no nonce: not the grading cell's
        json.dumps({"id": "ex99.other", "results": good, "n": nonce}).encode() + b"\n",
        json.dumps({"id": "ex01.count_values", "results": "lots", "n": nonce}).encode() + b"\n",
        json.dumps(
            {"id": "ex01.rounding_interval", "results": [{"x": 1}, 5, {"v": {"$nd": 1}}] * 400, "n": nonce}
        ).encode()
        + b"\n",
        json.dumps({"id": "ex01.smallest_absorbing", "results": good + good, "n": nonce}).encode() + b"\n",
        b"\xff\xfe garbage",
    ]
    (tmp_path / "out.jsonl").write_bytes(b"".join(lines))
    out = read_outputs([{"event": "grading_cell", "outputs": str(tmp_path / "out.jsonl"), "nonce": nonce}], plan)
    assert out.foreign_lines == 5
    res = {q.exercise.id: judge(q, out.records.get(q.exercise.id), ("NOT RUN", "not checked")) for q in plan.exercises}
    assert res["ex01.smallest_absorbing"].passed  # extra results in a record are ignored
    assert res["ex01.count_values"].status == "ERROR" and res["ex01.count_values"].points == 0
    assert res["ex01.rounding_interval"].points == 0 and res["ex01.rounding_interval"].n_failed == len(
        plan.exercises[1].cases
    )
    assert res["ex01.decode_bits"].status == "NOT RUN"
    missing = read_outputs(
        [{"event": "grading_cell", "outputs": str(tmp_path / "nothing.jsonl"), "nonce": nonce}], plan
    )
    assert missing.records == {} and missing.foreign_lines == 0


def test_a_second_record_with_the_nonce_voids_the_exercise(tmp_path):
    """A grading cell writes one record per exercise. A second one carrying the nonce was forged
    in the kernel (by code that read the nonce there, written before or after the real one):
    neither is judged, the exercise gets no points, and the detail says so."""
    from nbhelpers.grading.judging import FORGED, judge_submission

    plan = plan_chapter(1, seed=0)
    p = plan.exercises[3]
    good = [{"v": encode(e)} for e in p.expected]
    nonce = "6" * 32
    code = {"cell": 0, "line": 1, "name": p.exercise.name}  # a def of the program (below)
    functions = [[0, 1, p.exercise.name, f"def {p.exercise.name}(*args):\n    pass\n"]]
    for order in ([good, [{"v": 0.0}] * len(good)], [[{"v": 0.0}] * len(good), good]):
        lines = [json.dumps({"id": p.exercise.id, "results": r, "n": nonce, "code": code}) + "\n" for r in order]
        (tmp_path / "out.jsonl").write_text("".join(lines))
        events = [{"event": "grading_cell", "outputs": str(tmp_path / "out.jsonl"), "nonce": nonce}]
        results, _, foreign = judge_submission(plan, events, functions, ("NOT RUN", "not checked"))
        r = results[p.exercise.id]
        assert r.points == 0 and r.status == "FAIL" and r.error == FORGED and foreign == 0
    (tmp_path / "out.jsonl").write_text(
        json.dumps({"id": p.exercise.id, "results": good, "n": nonce, "code": code}) + "\n"
    )
    results, _, _ = judge_submission(plan, events, functions, ("NOT RUN", "not checked"))
    assert results[p.exercise.id].passed  # one record: judged as it is


def test_a_given_launcher_changed_scores_nothing_whatever_it_returned(tmp_path):
    """ex10.tile_lookup's launcher is given (Exercise.given): the grader reads the graded def's
    source and, where its code is not the one given (a schedule computed on the host instead of
    the kernel's), gives no points even for the right results; the one given, written with other
    comments and layout, is judged as usual."""
    from nbhelpers.answer_keys import ch10
    from nbhelpers.grading.judging import judge_submission

    plan = plan_chapter(10, seed=0)
    p = next(q for q in plan.exercises if q.exercise.id == "ex10.tile_lookup")
    good = [{"v": encode(e)} for e in p.expected]
    nonce = "7" * 32
    code = {"cell": 0, "line": 1, "name": "tile_lookup"}
    (tmp_path / "out.jsonl").write_text(
        json.dumps({"id": p.exercise.id, "results": good, "n": nonce, "code": code}) + "\n"
    )
    events = [{"event": "grading_cell", "outputs": str(tmp_path / "out.jsonl"), "nonce": nonce}]
    host = "def tile_lookup(offsets, block_m):\n    return tile_lookup_ref(offsets, block_m)\n"
    relaid = ch10.LAUNCHER.replace("    # the host knows rows = T * top_k\n", "")
    for source, passes in ((host, False), (ch10.LAUNCHER, True), (relaid, True)):
        results, _, _ = judge_submission(plan, events, [[0, 1, "tile_lookup", source]], ("NOT RUN", "not checked"))
        r = results[p.exercise.id]
        assert r.passed is passes, r
        if not passes:
            assert r.points == 0 and "must stay as given" in r.error


@pytest.mark.parametrize("t", [10**4000, float("inf"), float("nan"), -5, "soon", None, 3.5])
def test_a_forged_time_out_is_a_time_out_whatever_its_number(tmp_path, t):
    """A result line is the kernel's: its time-out seconds (an int too large for a float, inf, NaN)
    never raise in the grader; the exercise is scored as timed out, with a number from 0 to 1e6."""
    plan = plan_chapter(1, seed=0)
    p = plan.exercises[3]
    nonce = "7" * 32
    line = json.dumps({"id": p.exercise.id, "results": [{"t": t}], "n": nonce}).encode() + b"\n"
    (tmp_path / "out.jsonl").write_bytes(line)
    out = read_outputs([{"event": "grading_cell", "outputs": str(tmp_path / "out.jsonl"), "nonce": nonce}], plan)
    res = judge(p, out.records.get(p.exercise.id), ("NOT RUN", "not checked"))
    assert res.points == 0 and res.status == "TIMEOUT", res
    seconds = float(re.search(r"no result within (\S+) s", res.error).group(1))
    assert 0 <= seconds <= 1e6 and (seconds == 3.5 if t == 3.5 else True)


def test_score_is_what_run_check_uses():
    ex = checks.get_exercise("ex01.count_values")
    cases = cases_for(ex, 5)
    expected = checks.expected_outputs(ex, cases)
    got = [Raised("ValueError: no")] + list(expected[1:])
    r = checks.score(ex, cases, expected, got)
    assert r.points == 0 and r.n_failed == 1 and r.error == "ValueError: no"
    assert checks.score(ex, cases, expected, expected).passed
    assert checks.score(ex, cases, expected, [Raised("NotImplementedError", True)]).status == "TODO"
    short = checks.score(ex, cases, expected, expected[:3])
    assert short.n_failed == len(cases) - 3 and "were not run" in short.error
    with pytest.raises(ValueError):
        checks.score(ex, cases, expected, expected + expected)


def _result(status: str) -> checks.CheckResult:
    r = checks.CheckResult("ex01.f", "f", 0, 1, 1, 1, [], "x")
    r.status = status
    return r


def test_status_is_the_worst_thing_that_happened():
    ok, timeout, error = {"a": _result("PASS")}, {"a": _result("TIMEOUT")}, {"a": _result("ERROR")}
    died, cell_error = [{"event": "kernel_died"}], [{"event": "cell_error"}]
    assert status_of([], False, False, ok) is Status.GRADED
    assert status_of(cell_error, False, False, ok) == "cell error"
    assert status_of([{"event": "grading_error"}], False, False, ok) == "cell error"
    assert status_of(cell_error, False, False, timeout) == "timeout"
    assert status_of([{"event": "cell_timeout"}] + cell_error, False, False, ok) == "timeout"
    assert status_of(died + cell_error, False, False, timeout) == "kernel died"
    assert status_of(died, False, True, ok) == "grader error"
    assert status_of(died, True, True, ok) == "timeout"  # the total time ran out
    assert status_of([], False, False, error) == "grader error"  # the course's side failed
    assert status_of(cell_error, False, False, error) == "cell error"


def test_event_text():
    assert (
        event_text(
            {
                "event": "cell_error",
                "cell": 3,
                "line": "import maths",
                "ename": "ModuleNotFoundError",
                "evalue": "No module named 'maths'",
            }
        )
        == "cell 3 (import maths) raised ModuleNotFoundError: No module named 'maths'"
    )
    assert (
        event_text({"event": "cell_timeout", "cell": 2, "line": "while True:", "seconds": 5.0})
        == "cell 2 (while True:) ran past the 5 s limit and was interrupted"
    )
    assert (
        event_text({"event": "kernel_died", "exercise": "ex01.f", "retry": True})
        == "the kernel died while checking ex01.f; retried in a new kernel"
    )
    assert event_text({"event": "kernel_died", "exercise": "ex01.f"}) == "the kernel died again while checking ex01.f"
    assert event_text({"event": "kernel_died", "grading": True}) == "the kernel died while the functions were checked"
    assert event_text({"event": "done", "kernel_starts": 1}) == ""
    assert event_text({"event": "limit_reached", "limits": ["processes"], "processes": 64, "memory_mb": 2048}) == (
        "the submission reached its limit of 64 processes and threads (a new one was refused)"
    )
    assert event_text(
        {"event": "limit_reached", "limits": ["memory", "processes"], "processes": 8, "memory_mb": 512}
    ) == (
        "the submission reached its limit of 8 processes and threads (a new one was refused) and its 512 MB of "
        "memory, all its processes together (one was killed)"
    )
    assert event_text({"event": "limit_reached", "limits": "memory"}) == ""  # not what the worker writes


def test_what_the_graded_kernel_raised_reaches_the_csv_as_a_type_only():
    """Hidden inputs are in the kernel the functions are graded in: of what its code raises, the
    detail column says only the type, and only a type of Python's own (a class the notebook makes
    can be named with anything); the JSON's events keep the whole text. The notebook's own run,
    which sees no hidden input, and the grader's own words are shown as they are."""
    hidden = "decode_bits(0x7f80, 8, 7)"
    grading = {"event": "grading_error", "ename": "KeyboardInterrupt", "evalue": hidden}
    assert event_text(grading) == (
        "the functions could not be checked: KeyboardInterrupt (its message is in the JSON file)"
    )
    assert hidden in event_text(grading, full=True)
    named = {"event": "grading_error", "ename": "LEAK_" + hidden, "evalue": ""}
    assert "LEAK" not in event_text(named) and "own class" in event_text(named)
    assert "LEAK" in event_text(named, full=True)
    clean = {
        "event": "cell_error",
        "cell": 4,
        "line": "T = f()",
        "ename": "SystemExit",
        "evalue": hidden,
        "definitions": True,
    }
    assert event_text(clean) == (
        "in the program of its definitions (where the functions are graded), "
        "cell 4 (T = f()) raised SystemExit (its message is in the JSON file)"
    )
    assert hidden in event_text(clean, full=True)
    assert hidden in event_text({**clean, "definitions": False})  # the notebook's own run
    by_grader = {"event": "grading_error", "by_grader": True, "ename": "tampering", "evalue": "the folder was replaced"}
    assert event_text(by_grader) == "the functions could not be checked: tampering: the folder was replaced"
    forged = {**by_grader, "by_grader": "yes"}  # only the worker writes True
    assert "replaced" not in event_text(forged)


def test_the_vocabularies_are_the_words_in_the_files():
    """Each vocabulary is one enum, shared by the writer and the reader; its values are the words
    the events file, the worker's pipe and the JSON file carry (plain strings read back)."""
    assert [e.value for e in Event] == [
        "cell_error",
        "cell_timeout",
        "kernel_died",
        "grading_error",
        "grading_cell",
        "limit_reached",
        "done",
    ]
    assert [a.value for a in WorkerAnswer] == ["done", "failed", "timeout"]
    assert [k.value for k in SeedKind] == ["secret", "public"]
    assert (
        json.dumps({"event": Event.KERNEL_DIED, "seed": SeedKind.PUBLIC})
        == '{"event": "kernel_died", "seed": "public"}'
    )
    assert {"cell_error", "done"} & {Event.CELL_ERROR, WorkerAnswer.DONE} == {"cell_error", "done"}


# ---- what decoding a hostile kernel's results may cost ---------------------------------------------


def _unreadable(v) -> bool:
    return type(v).__name__ == "unreadable"


def test_a_set_of_ints_that_share_a_hash_is_not_built():
    """20,000 ints with one hash (multiples of 2**61 - 1) would take a quadratic time to put in a
    set: more than a set or dict may hold, it is a stand-in at once."""
    colliding = [k * (2**61 - 1) for k in range(1, 20_001)]
    assert len({hash(n) for n in colliding[:100]}) == 1
    assert _unreadable(decode_result({"$set": colliding}))
    assert _unreadable(decode_result({"$dict": [[n, 0] for n in colliding]}))
    assert decode_result({"$set": [1, 2, 3]}) == {1, 2, 3}  # a small one is what it was


def test_an_array_is_measured_before_it_is_made():
    # 2,000 empty strings of "<U9999" are 80 MB once made: more than one array may hold
    assert _unreadable(decode_result({"$nd_str": ["<U9999", [2000], [""] * 2000]}))
    assert _unreadable(decode_result({"$nd_str": ["<U5", [10**6], [""]]}))  # items and shape disagree
    assert _unreadable(decode_result({"$nd": ["<f8", [2**30], ""]}))  # 8 GB claimed, nothing sent
    ok = decode_result({"$nd_str": ["<U3", [2], ["ab", "c"]]})
    assert ok.tolist() == ["ab", "c"]


def test_one_budget_bounds_all_of_an_exercises_results(monkeypatch):
    from nbhelpers.grading import in_kernel, judging

    monkeypatch.setitem(in_kernel.LIMITS, "max_decoded_bytes", 2**20)
    value = encode(np.zeros(50_000))  # 400 kB once decoded
    got, timed_out = judging._returned([{"v": value}] * 4, None)
    assert not timed_out
    assert [_unreadable(g) for g in got] == [False, False, True, True]  # 1 MB: two arrays, then no more
    assert np.array_equal(got[0], np.zeros(50_000))


def test_a_results_line_that_would_cost_too_much_to_parse_is_not_parsed():
    from nbhelpers.grading import judging

    # 15 MB of "{}": 5 million dicts, 320 MB and more once parsed
    assert judging._parse_line(b"[" + b"{}," * 5_000_000 + b"{}]") is None
    # a wrong answer's 450,000 strings (45 cases of 10,000) are parsed, to be judged wrong
    line = b'{"id": "ex01.a", "results": [' + b'"-1.25",' * 450_000 + b'"0"]}'
    assert len(judging._parse_line(line)["results"]) == 450_001
    assert judging._parse_line(b'{"id": "ex01.a", "results": [{"v": 1}]}') == {"id": "ex01.a", "results": [{"v": 1}]}


def test_a_generator_the_function_drew_from_comes_back_and_is_judged(tmp_path):
    """ex01.round_stochastic reads its generator as the call left it (Exercise.returned_args): the
    grading cell sends it back with each result, and the grader judges it. One number per element
    passes; half as many, each used twice, fails on the generator's state; a record without the
    arguments is unreadable."""
    from nbhelpers.grading.in_kernel import _call

    plan = plan_chapter(1, seed=0)
    p = next(q for q in plan.exercises if q.exercise.id == "ex01.round_stochastic")
    spec = next(e for e in json.loads(plan.inputs_json)["exercises"] if e["id"] == p.exercise.id)
    assert spec["returned_args"] == [3]

    def right(x, e, m, rng):
        t = p.exercise.reference(x, e, m, rng)
        return np.where(rng.random(x.shape) < t.p, t.upper, t.lower)

    def halves(x, e, m, rng):
        t = p.exercise.reference(x, e, m, rng)
        h = rng.random((x.size + 1) // 2)
        return np.where(np.concatenate([h, h])[: x.size].reshape(x.shape) < t.p, t.upper, t.lower)

    nonce = "7" * 32
    for fn, passes in ((right, True), (halves, False), (None, False)):
        results = []
        for case in spec["cases"][:6]:
            args = [decode(a, None, import_class) for a in case["a"]]
            r = _call(fn or right, args, {}, [3] if fn else [])[0]
            results.append(r)
        (tmp_path / "out.jsonl").write_text(json.dumps({"id": p.exercise.id, "results": results, "n": nonce}) + "\n")
        out = read_outputs([{"event": "grading_cell", "outputs": str(tmp_path / "out.jsonl"), "nonce": nonce}], plan)
        res = judge(p, out.records.get(p.exercise.id), ("NOT RUN", "not checked"))
        # six cases of many: the rest were not run, so even the right answer scores nothing; the
        # first six are judged
        assert res.points == 0
        first = res.mismatches[0] if res.mismatches else ""
        if passes:
            assert res.n_failed == len(p.cases) - 6, res
        elif fn is halves:
            assert "did not advance" in first, res
        else:
            assert "unreadable" in first or "could not read" in first, res
