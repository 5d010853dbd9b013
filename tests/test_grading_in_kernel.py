"""The code that runs inside the student's kernel (nbhelpers.grading.in_kernel), run here, and
the grading cell that ships it into the kernel (nbhelpers.grading.worker.grading_cell)."""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import env, solution

from nbhelpers.checks import get_exercise
from nbhelpers.grading import in_kernel
from nbhelpers.grading.in_kernel import kernel_main
from nbhelpers.grading.judging import judge, plan_chapter, read_outputs
from nbhelpers.grading.options import MAX_OUTPUT_LINE_BYTES
from nbhelpers.grading.worker import grading_cell, kernel_source

NONCE = "0123456789abcdef" * 2


def test_expected_results_never_reach_the_kernel():
    plan = plan_chapter(1, seed=99)
    sent = json.loads(plan.inputs_json)
    assert set(sent) == {"exercises"}
    for ex in sent["exercises"]:
        # returned_args: positions of arguments sent back after the call (round_stochastic's rng)
        # tools: the modules the exercise's functions may use (names of modules, no answers)
        assert set(ex) - {"returned_args"} == {"id", "name", "cases", "forbidden", "allowed", "tools"}
        assert list(ex["tools"]) == list(get_exercise(ex["id"]).tools)
        assert ex["tools"] and all(isinstance(n, str) and n.replace(".", "").isidentifier() for n in ex["tools"])
        assert ex.get("returned_args", [3]) == [3] and ("returned_args" in ex) == (ex["name"] == "round_stochastic")
        assert all(set(c) == {"a", "k"} for c in ex["cases"])
        # what the watch looks for: names of the course's modules and functions, no answers
        assert ex["forbidden"] and all(isinstance(n, str) and n.startswith("nbhelpers") for n in ex["forbidden"])
    job = {"inputs": "/x/inputs.json", "outputs": "/x/out.jsonl", "budget": 5.0, "only": None}
    compile(grading_cell(job), "<cell>", "exec")


def _job(tmp_path: Path, plan, budget: float, tools: bool = True) -> tuple[dict, list]:
    """A grading cell's job for ``plan``'s inputs (written to tmp_path), and the events that name
    its results file, as the worker makes them. ``tools=False``: the exercises' lists of tools
    left out (a test of the time limit waits with ``time.sleep``, which no exercise's tools hold)."""
    inputs = json.loads(plan.inputs_json)
    if not tools:
        for ex in inputs["exercises"]:
            ex.pop("tools", None)
    (tmp_path / "in.json").write_text(json.dumps(inputs))
    job = {
        "inputs": str(tmp_path / "in.json"),
        "outputs": str(tmp_path / "out.jsonl"),
        "budget": budget,
        "only": None,
        "max_line": MAX_OUTPUT_LINE_BYTES,
    }
    return job, [{"event": "grading_cell", "outputs": job["outputs"], "nonce": NONCE}]


def _judged(events: list, plan) -> dict:
    """Each exercise's verdict on the results the cell wrote, as the grader judges them."""
    out = read_outputs(events, plan).records
    return {p.exercise.id: judge(p, out.get(p.exercise.id), ("NOT RUN", "x")) for p in plan.exercises}


def test_kernel_runner_in_process(tmp_path):
    """The code that runs in the kernel, run here: per-function time limit, exceptions, missing and
    non-callable functions, huge and hostile return values; then judged like the grader does."""
    plan = plan_chapter(1, seed=3)
    sol = {}
    for c in solution().cells:
        if c.cell_type == "code" and c.source.lstrip().startswith("def "):
            exec(c.source, {"math": math}, sol)

    def loop(x, e, m):
        while True:
            pass

    calls = []

    def todo(bits, e, m, specials, largest):
        calls.append(1)
        raise NotImplementedError("about 9 lines")

    ns = {"decode_bits": todo, "rounding_interval": loop, "count_values": 42}
    # 2 s per function: the looping one is stopped there, and the right ones finish well inside it
    # under the profile hook on a loaded machine (0.5 s did not always)
    job, events = _job(tmp_path, plan, 2.0)
    t0 = time.monotonic()
    kernel_main(ns, {**job, "nonce": NONCE})
    assert time.monotonic() - t0 < 8 and len(calls) == 1
    res = _judged(events, plan)
    assert res["ex01.decode_bits"].status == "TODO"
    assert res["ex01.rounding_interval"].status == "TIMEOUT" and "TimeoutError" in res["ex01.rounding_interval"].error
    assert res["ex01.count_values"].error == "expected a function, got int"
    assert res["ex01.smallest_absorbing"].status == "MISSING"
    assert all(r.points == 0 for r in res.values())

    (tmp_path / "out.jsonl").unlink()
    ns = {k: sol[k] for k in ("decode_bits", "rounding_interval", "count_values", "smallest_absorbing")}
    ns["count_values"] = lambda a, b, e, m: np.zeros(9 * 2**20)  # 72 MB: too large to send
    ns["decode_bits"] = lambda b, e, m, s, x: np.zeros(2**18)  # 2 MB each: too large together
    kernel_main(ns, {**job, "nonce": NONCE})
    res = _judged(events, plan)
    assert [r.points for r in res.values()] == [0, 6, 0, 2, 0]  # round_stochastic: not defined
    assert "too large" in res["ex01.count_values"].mismatches[0]
    assert "too large to send back" in res["ex01.decode_bits"].error


def test_the_time_limit_is_cpu_time_with_a_wall_clock_backstop(tmp_path):
    """A function's budget is CPU time: one that waits 1.8 s in all and computes next to nothing
    runs through its cases (60) on a budget of 1.5 s (judged on its answers, not timed out; the
    harness's own work on each case counts too), as a loaded machine slows an honest function
    without its using more CPU; one that sleeps for good is stopped at WALL_FACTOR times the
    budget in wall time."""
    plan = plan_chapter(1, seed=3)
    n_cases = len(next(p for p in plan.exercises if p.exercise.id == "ex01.smallest_absorbing").cases)
    calls = []

    def waits(*a):
        if len(calls) < 3:
            time.sleep(0.6)
        calls.append(1)
        return None  # a wrong answer: judged FAIL, unless the time ran out first

    def sleeps(*a):
        time.sleep(60)

    job, events = _job(tmp_path, plan, 1.5, tools=False)
    t0 = time.monotonic()
    kernel_main({"smallest_absorbing": waits, "round_stochastic": sleeps}, {**job, "nonce": NONCE})
    assert time.monotonic() - t0 < in_kernel.WALL_FACTOR * 1.5 + 4
    assert len(calls) == n_cases
    res = _judged(events, plan)
    r = res["ex01.smallest_absorbing"]
    assert r.status == "FAIL" and "TimeoutError" not in (r.error or ""), r
    r = res["ex01.round_stochastic"]
    assert r.status == "TIMEOUT" and "TimeoutError" in r.error, r


def test_a_limit_that_falls_inside_the_watchs_hook_is_a_timeout_not_hiding(tmp_path):
    """A function that only makes small calls spends most of its time in the call watch's profile
    hook, so its time limit mostly falls there; raised there, it would make CPython drop the hook,
    which the watch reads as hiding. It waits for the hook to return: the verdict is TIMEOUT."""
    plan = plan_chapter(1, seed=3)

    def tiny(x):
        return x

    def many_calls(*a):
        while True:
            tiny(len(a))

    job, events = _job(tmp_path, plan, 0.3)
    ns = {"decode_bits": many_calls, "rounding_interval": many_calls, "count_values": many_calls}
    kernel_main(ns, {**job, "nonce": NONCE})
    res = _judged(events, plan)
    for name in ns:
        r = res[f"ex01.{name}"]
        assert r.status == "TIMEOUT" and "profile hook" not in r.error, r


def test_what_a_function_raises_is_its_failure_and_a_real_interrupt_stops_the_cell(tmp_path):
    """KeyboardInterrupt, SystemExit and any BaseException a graded function raises are that
    function's failure, with their type and message in its results (the grader keeps them out of
    the CSV); a real interrupt (SIGINT) still stops the grading cell, and the kernel's own SIGINT
    handler is back afterwards."""
    import signal

    plan = plan_chapter(1, seed=3)
    job, events = _job(tmp_path, plan, 5.0)

    class Named(BaseException):
        pass

    def interrupts(*a):
        raise KeyboardInterrupt(f"inputs {a}")

    def exits(*a):
        raise SystemExit(f"inputs {a}")

    def own(*a):
        raise Named(f"inputs {a}")

    ns = {"decode_bits": interrupts, "rounding_interval": exits, "count_values": own}
    handler = signal.getsignal(signal.SIGINT)
    kernel_main(ns, {**job, "nonce": NONCE})
    assert signal.getsignal(signal.SIGINT) is handler and in_kernel._INTERRUPT == [KeyboardInterrupt]
    res = _judged(events, plan)
    for ex_id, kind in (
        ("decode_bits", "KeyboardInterrupt"),
        ("rounding_interval", "SystemExit"),
        ("count_values", "Named"),
    ):
        r = res[f"ex01.{ex_id}"]
        assert r.status == "FAIL" and r.points == 0, r
        assert kind in r.error and "inputs (" in r.error, r.error

    after = []

    def waits_for_an_interrupt(*a):
        os.kill(os.getpid(), signal.SIGINT)  # as the worker interrupts a cell past its time
        time.sleep(2)
        after.append(a)  # not reached: the interrupt ends the sleep, and the cell

    (tmp_path / "out.jsonl").unlink()
    with pytest.raises(in_kernel._Interrupted):
        kernel_main({"decode_bits": waits_for_an_interrupt}, {**job, "nonce": NONCE})
    assert after == []
    assert signal.getsignal(signal.SIGINT) is handler and in_kernel._INTERRUPT == [KeyboardInterrupt]


def test_in_kernel_imports_only_the_standard_library_and_numpy():
    """The module is sent whole into the kernel, with nbhelpers.call_watch's source in place of
    its one import of it: no nbhelpers, no relative imports, and only top-level helpers (nothing
    nested inside a function, but the watch's profile hook, a closure since it runs on every
    call the student's function makes, and its audit hook, a closure whose state no module
    attribute reaches)."""
    tree = ast.parse(kernel_source())
    allowed = set(sys.stdlib_module_names) | {"numpy", "ml_dtypes"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] in allowed for a in node.names), ast.dump(node)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module.split(".")[0] in allowed, ast.dump(node)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and getattr(node, "name", "") not in (
            "_make_hook",
            "_audit_state",
        ):
            nested = [n for n in ast.walk(node) if n is not node and isinstance(n, (ast.FunctionDef, ast.ClassDef))]
            assert not nested, node.name
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    too_long = [f"{f.name}: {f.end_lineno - f.lineno + 1} lines" for f in functions if f.end_lineno - f.lineno >= 60]
    assert not too_long


def test_in_kernel_runs_without_nbhelpers(tmp_path):
    """Executed from its source in a fresh namespace, with nbhelpers unimportable, as in a kernel
    where the student broke it: the codec and the runner still work."""
    (tmp_path / "in.json").write_text(
        json.dumps(
            {
                "exercises": [
                    {
                        "id": "ex01.f",
                        "name": "f",
                        "cases": [{"a": [in_kernel.encode(2.5), in_kernel.encode(np.arange(3))], "k": {}}],
                    },
                    {"id": "ex01.g", "name": "g", "cases": [{"a": [], "k": {}}]},
                ]
            }
        )
    )
    job = {
        "inputs": str(tmp_path / "in.json"),
        "outputs": str(tmp_path / "out.jsonl"),
        "budget": 5.0,
        "only": None,
        "nonce": NONCE,
        "max_line": 2**20,
    }
    code = (
        "import sys, json\n"
        "sys.modules['nbhelpers'] = None\n"
        f"source = {kernel_source()!r}\n"
        "ns = {'__name__': 'nbhelpers_grade_runner'}\n"
        "exec(compile(source, '<in_kernel>', 'exec'), ns)\n"
        "def f(x, a):\n"
        "    return (x * a, {'-0': -0.0})\n"
        f"ns['kernel_main'](globals(), {job!r})\n"
    )
    script = tmp_path / "kernel.py"  # a file: the source is past what one argument may hold (128 KiB)
    script.write_text(code)
    subprocess.run([sys.executable, str(script)], env=env(), check=True, cwd=tmp_path, timeout=60)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines[0] == {"start": "ex01.f", "n": NONCE} and lines[2] == {"start": "ex01.g", "n": NONCE}
    assert lines[3] == {"id": "ex01.g", "missing": True, "n": NONCE}
    (r,) = lines[1]["results"]
    value = in_kernel.decode(r["v"], lambda name, text: None, in_kernel.import_class)
    assert np.array_equal(value[0], [0.0, 2.5, 5.0]) and math.copysign(1, value[1]["-0"]) < 0


def test_grading_cell_runs_in_the_notebooks_namespace(tmp_path):
    """The grading cell, run as a kernel runs it: the notebook's own names (even exec and compile)
    do not get in its way, and it leaves nothing behind but its own function's name."""
    plan = plan_chapter(1, seed=0)
    (tmp_path / "in.json").write_text(plan.inputs_json)
    job = {
        "inputs": str(tmp_path / "in.json"),
        "outputs": str(tmp_path / "out.jsonl"),
        "budget": 5.0,
        "only": ["ex01.count_values"],
        "nonce": NONCE,
        "max_line": 2**20,
    }
    ns = {"exec": None, "compile": None, "count_values": lambda a, b, e, m: -1.0}  # never a count
    exec(compile(grading_cell(job), "<cell>", "exec"), ns)
    assert set(ns) == {"exec", "compile", "count_values", "__builtins__", "__nbhelpers_grade_cell"}
    out = read_outputs([{"event": "grading_cell", "outputs": job["outputs"], "nonce": NONCE}], plan).records
    assert set(out) == {"ex01.count_values"}
    p = next(p for p in plan.exercises if p.exercise.id == "ex01.count_values")
    r = judge(p, out["ex01.count_values"], ("NOT RUN", "x"))
    assert r.status == "FAIL" and r.points == 0 and r.n_failed == r.n_cases


def test_the_grading_cells_files_are_never_made_through_a_link(tmp_path, monkeypatch):
    """The kernel can rename the entries of its channel while the worker makes the grading cell's
    folder: one swapped for a link to a folder of its choosing (outside the sandbox) makes the
    worker refuse, and nothing is written there; otherwise the files are made, for this user only."""
    from nbhelpers.grading import worker

    make_cell_files = worker.make_cell_files
    make_cell_files(tmp_path / "g-ok", {"inputs.json": b"{}", "outputs.jsonl": b""})
    assert (tmp_path / "g-ok" / "inputs.json").read_bytes() == b"{}"
    assert (tmp_path / "g-ok" / "inputs.json").stat().st_mode & 0o777 == 0o600

    elsewhere = tmp_path / "attackers_folder"
    elsewhere.mkdir()
    real_mkdir = Path.mkdir

    def mkdir_then_swapped(self, *a, **k):  # the race won at the worst moment
        real_mkdir(self, *a, **k)
        self.rename(self.with_name(self.name + "-moved"))
        os.symlink(elsewhere, self)

    monkeypatch.setattr(Path, "mkdir", mkdir_then_swapped)
    with pytest.raises(OSError):
        make_cell_files(tmp_path / "g-raced", {"inputs.json": b"secret inputs", "outputs.jsonl": b""})
    assert list(elsewhere.iterdir()) == []


def test_the_code_of_a_graded_function_is_read_from_its_code_object():
    """What the grading cell reports of each function it grades: the program's cell and line its
    code was compiled from (through a functools.cache wrapper), or what it is instead."""
    import functools

    ns: dict = {}
    exec(compile("\n\ndef f(x):\n    return x\n", "<notebook cell 4>", "exec"), ns)
    exec(compile("def g(x):\n    return x\n", "<string>", "exec"), ns)
    assert in_kernel._code_of(ns["f"]) == {"cell": 3, "line": 3, "name": "f"}
    assert in_kernel._code_of(functools.cache(ns["f"])) == {"cell": 3, "line": 3, "name": "f"}
    assert "compiled elsewhere" in in_kernel._code_of(ns["g"])["not"]
    assert "compiled elsewhere" in in_kernel._code_of(json.dumps)["not"]  # a module's
    wrapper = functools.wraps(ns["f"])(lambda x: x)  # says it wraps f: its own code is graded
    assert "compiled elsewhere" in in_kernel._code_of(wrapper)["not"]
    assert in_kernel._code_of(functools.partial(ns["f"], 1)) == {"not": "a partial, not a function"}
    assert in_kernel._code_of(print) == {"not": "a builtin_function_or_method, not a function"}
