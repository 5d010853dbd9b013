"""Judging in a process of its own (nbhelpers.grading.judge_process): the same results as judging
in the grader's process; results that take more memory or time than a judge has cost that
submission its points (and the judge), never the grader or a classmate judged alongside."""

from __future__ import annotations

import json
import os
import resource
import signal
import threading
import time

import pytest

from nbhelpers.checks import CheckStatus
from nbhelpers.grading.in_kernel import encode
from nbhelpers.grading.judge_process import Judges
from nbhelpers.grading.judging import judge_submission, plan_chapter

NONCE = "9" * 32
MISSING = (CheckStatus.NOT_RUN, "not checked")
# the functions the program's definitions made (Definitions.functions): each exercise's def, on
# its own line of cell 0
FUNCTIONS = [
    [0, line, name, f"def {name}(*args):\n    return 0.0\n"]
    for line, name in enumerate(["decode_bits", "rounding_interval", "count_values", "smallest_absorbing"], 1)
]


@pytest.fixture(scope="module")
def plan():
    return plan_chapter(1, seed=0)


def deterministic(plan) -> list:
    """The exercises whose expected results are the answers themselves (not stochastic rounding's
    targets, which are judged by their distribution)."""
    return [p for p in plan.exercises if p.exercise.name != "round_stochastic"]


def honest_outputs(plan, path) -> list[dict]:
    """A results file with the deterministic exercises' expected results, as a kernel encodes them."""
    lines = [
        {
            "id": p.exercise.id,
            "n": NONCE,
            "results": [{"v": encode(e)} for e in p.expected],
            "code": {"cell": 0, "line": line, "name": p.exercise.name},
        }
        for line, p in enumerate(deterministic(plan), 1)
    ]
    path.write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    return [{"event": "grading_cell", "outputs": str(path), "nonce": NONCE}]


def heavy_outputs(plan, path, exercises: int) -> list[dict]:
    """Results lines each just within what the grader parses (3.2 million strings of two characters,
    16 MB, about 190 MB once parsed), for ``exercises`` exercises: all of them are held at once."""
    line = b'{"id": "ID", "n": "' + NONCE.encode() + b'", "results": [' + b'"ab",' * 3_200_000 + b'"ab"]}\n'
    with open(path, "wb") as f:
        for p in plan.exercises[:exercises]:
            f.write(line.replace(b'"ID"', json.dumps(p.exercise.id).encode()))
    return [{"event": "grading_cell", "outputs": str(path), "nonce": NONCE}]


def test_a_judge_process_gives_what_judging_here_gives(plan, tmp_path):
    events = honest_outputs(plan, tmp_path / "out.jsonl")
    here = judge_submission(plan, events, FUNCTIONS, MISSING)
    judges = Judges({1: plan})
    try:
        there = judges.judge(1, events, FUNCTIONS, MISSING)
    finally:
        judges.close()
    results, sources, foreign, why, cpu_s = there
    assert 0.0 < cpu_s < 5  # the judge's CPU seconds for it
    assert why == "" and (sources, foreign) == (here[1], here[2]) == (here[1], 0)
    assert {k: r.to_dict() for k, r in results.items()} == {k: r.to_dict() for k, r in here[0].items()}
    assert [k for k, r in results.items() if r.passed] == [p.exercise.id for p in deterministic(plan)]
    assert results["ex01.round_stochastic"].status == "NOT RUN"
    assert not any(j.alive() for j in judges.all)


def test_results_past_the_judges_memory_cost_only_that_submission(plan, tmp_path):
    """Five results lines of 190 MB each once parsed: 950 MB, in a judge of 1,024 MB. That
    submission's results are not judged (FAIL: its doing, so a rerun does not retry it); the
    judge is replaced, the next submission is judged as usual, and the grader's own memory never
    held them."""
    heavy = heavy_outputs(plan, tmp_path / "heavy.jsonl", exercises=5)
    honest = honest_outputs(plan, tmp_path / "honest.jsonl")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    judges = Judges({1: plan}, memory_mb=1024)
    try:
        failed = judges.judge(1, heavy, FUNCTIONS, MISSING)
        after = judges.judge(1, honest, FUNCTIONS, MISSING)
    finally:
        judges.close()
    assert "judging its results took more than 1024 MB" in failed[3], failed[3]
    assert {r.status for r in failed[0].values()} == {"FAIL"} and sum(r.points for r in failed[0].values()) == 0
    assert all(r.error == failed[3] for r in failed[0].values())
    assert after[3] == "" and sum(r.passed for r in after[0].values()) == 4
    assert len(judges.all) == 2  # the first judge went with its failure
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grew_mb < 200, grew_mb


def test_results_past_the_judges_time_cost_only_that_submission(plan, tmp_path):
    heavy = heavy_outputs(plan, tmp_path / "heavy.jsonl", exercises=2)
    honest = honest_outputs(plan, tmp_path / "honest.jsonl")
    judges = Judges({1: plan}, timeout=0.3)
    try:
        judges.timeout = 60
        assert judges.judge(1, honest, FUNCTIONS, MISSING)[3] == ""  # started, plans loaded
        judges.timeout = 0.3
        t0 = time.monotonic()
        failed = judges.judge(1, heavy, FUNCTIONS, MISSING)
        waited = time.monotonic() - t0
        judges.timeout = 60
        after = judges.judge(1, honest, FUNCTIONS, MISSING)
    finally:
        judges.close()
    assert "judging its results took more than 0.3 s" in failed[3], failed[3]
    assert {r.status for r in failed[0].values()} == {"FAIL"}
    assert waited < 15, waited  # the judge is killed at its limit, not waited for
    assert after[3] == "" and sum(r.passed for r in after[0].values()) == 4


def test_a_classmate_is_judged_while_a_heavy_submission_is(plan, tmp_path):
    """Two grading threads, two judges: the honest submission's results are judged while the
    heavy one's are still being parsed (in the grader's process, both had shared one lock)."""
    heavy = heavy_outputs(plan, tmp_path / "heavy.jsonl", exercises=4)
    honest = honest_outputs(plan, tmp_path / "honest.jsonl")
    judges = Judges({1: plan})
    done: dict[str, float] = {}
    try:
        warm = [threading.Thread(target=judges.judge, args=(1, honest, FUNCTIONS, MISSING)) for _ in range(2)]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        assert len(judges.idle) == 2

        def run(name, events):
            judges.judge(1, events, FUNCTIONS, MISSING)
            done[name] = time.monotonic()

        slow = threading.Thread(target=run, args=("heavy", heavy))
        slow.start()
        time.sleep(0.2)
        run("honest", honest)
        slow.join()
    finally:
        judges.close()
    assert done["honest"] < done["heavy"], done


def test_a_judge_that_dies_is_the_graders_failure(plan, tmp_path):
    """A judge that dies for a reason of its own (killed here; a bug, an out-of-memory kill)
    gives ERROR: the course's side failed, the submission gets "grader error" and a rerun tries
    it again; the next submission gets a new judge."""
    heavy = heavy_outputs(plan, tmp_path / "heavy.jsonl", exercises=3)
    honest = honest_outputs(plan, tmp_path / "honest.jsonl")
    judges = Judges({1: plan})
    got = {}
    try:
        assert judges.judge(1, honest, FUNCTIONS, MISSING)[3] == ""
        t = threading.Thread(target=lambda: got.update(answer=judges.judge(1, heavy, FUNCTIONS, MISSING)))
        t.start()
        time.sleep(0.3)
        os.kill(judges.all[0].proc.pid, signal.SIGKILL)
        t.join()
        after = judges.judge(1, honest, FUNCTIONS, MISSING)
    finally:
        judges.close()
    results, _, _, why, _ = got["answer"]
    assert "the judge process died" in why and {r.status for r in results.values()} == {"ERROR"}, why
    assert after[3] == "" and len(judges.all) == 2


@pytest.mark.parametrize(
    "code,why",
    [
        (None, "saw no code object"),
        ({"not": "a partial, not a function"}, "it is a partial"),
        ({"not": "a function compiled elsewhere (a module's, or one made by exec)"}, "compiled elsewhere"),
        ({"cell": 0, "line": 9, "name": "decode_bits"}, "line 9 of cell 1, where no def kept starts"),
        ({"cell": 0, "line": 2, "name": "decode_bits"}, "where no def kept starts"),  # rounding_interval's line
        ({"cell": "0", "line": 1, "name": "decode_bits"}, "saw no code object"),
    ],
)
def test_a_function_the_definitions_did_not_make_scores_nothing(plan, tmp_path, code, why):
    """Right answers from a function that is not one of the program's defs (a wrapper, a library
    function, one made by exec, a def at another place) earn nothing, and the detail says why."""
    events = honest_outputs(plan, tmp_path / "out.jsonl")
    path = tmp_path / "out.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    if code is None:
        del lines[0]["code"]
    else:
        lines[0]["code"] = code
    path.write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    results, sources, _ = judge_submission(plan, events, FUNCTIONS, MISSING)
    assert results["ex01.decode_bits"].points == 0 and why in results["ex01.decode_bits"].error
    assert sources["ex01.decode_bits"] == {**sources["ex01.decode_bits"], "source": None, "in_notebook": False}
    assert results["ex01.rounding_interval"].passed and sources["ex01.rounding_interval"]["in_notebook"]
    assert sources["ex01.rounding_interval"]["source"] == FUNCTIONS[1][3]
