"""Whole runs of the grader (nbhelpers.grading.run, through the command line): every kind of bad
submission with a secret seed and the trust boundary, every chapter's solutions and exercises,
parity with the students' check cells, and a class-sized run."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from helpers import (
    CELL_TIMEOUT,
    EX01_EXERCISE,
    FAST,
    FULL,
    POINTS,
    ROOT,
    TOTAL_TIMEOUT,
    code_index,
    env,
    hard_coded_notebook,
    insert_code,
    mutate,
    read_csv,
    read_json,
    set_body,
    solution,
    tree_state,
    write,
)
from nbclient import NotebookClient

from nbhelpers.checks import exercises_of, run_check
from nbhelpers.grading.cgroups import find_cgroups
from nbhelpers.grading.cli import main
from nbhelpers.grading.sandbox import Limits, kernel_command

# ---- a run with every bad submission, through the command line, with a secret seed ---------------

SEED_HUNTER = r"""
import os, sys, time
_t0, _dump, _mem, _size = time.time(), [], {}, [0]
def _add(where, data):
    # the grader lets a kernel write files of 64 MB at most: the dump stays below that (at most
    # three bytes a character once written), keeping whole what was read first (environments,
    # command lines, open files); only the walk over files below is cut short
    if isinstance(data, bytes):
        data = data.replace(b"\0", b" ").decode("utf-8", "replace")
    if _size[0] + len(data) > 16 * 2**20:
        return
    _size[0] += len(data) + len(where) + 4
    _dump.append(f"== {where}\n{data}")
_add("environ", repr(dict(os.environ)))
_add("argv", repr(sys.argv))
_paths = {os.getcwd()}
for _p in [p for p in os.listdir("/proc") if p.isdigit()]:
    for _what in ("cmdline", "environ"):
        try:
            with open(f"/proc/{_p}/{_what}", "rb") as f:
                _data = f.read()
        except OSError:
            continue
        _add(f"/proc/{_p}/{_what}", _data)
        if _what == "cmdline":
            try:
                _cwd = os.readlink(f"/proc/{_p}/cwd")
            except OSError:
                _cwd = "/"
            for _a in _data.split(b"\0"):
                _a = _a.decode("utf-8", "replace")
                if _a.startswith("--") and "=" in _a:
                    _a = _a.split("=", 1)[1]
                _q = os.path.normpath(os.path.join(_cwd, _a)) if _a else ""
                if _q and os.path.exists(_q):
                    _q = _q if os.path.isdir(_q) else os.path.dirname(_q)
                    if _q.count("/") >= 2 and not _q.startswith(("/proc", "/sys", "/dev", "/usr")):
                        _paths.add(_q)
    try:
        _fds = os.listdir(f"/proc/{_p}/fd")
    except OSError:
        _fds = []
    for _fd in _fds:
        try:
            _t = os.readlink(f"/proc/{_p}/fd/{_fd}")
            if os.path.isfile(_t) and os.path.getsize(_t) < 2**20:
                with open(_t, "rb") as f:
                    _add(f"fd {_p}/{_fd} {_t}", f.read())
        except OSError:
            pass
# the memory of every ancestor (the grader among them)
_pid = os.getpid()
while _pid > 1:
    try:
        with open(f"/proc/{_pid}/stat") as f:
            _ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{_ppid}/cmdline", "rb") as f:
            _cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except (OSError, ValueError, IndexError):
        break
    try:
        with open(f"/proc/{_ppid}/maps") as f:
            _maps = f.read()
        with open(f"/proc/{_ppid}/mem", "rb") as f:
            _lo = int(_maps.split("-", 1)[0], 16)
            f.seek(_lo)
            f.read(16)
        _mem[_cmd] = True
    except (OSError, ValueError, OverflowError):
        _mem[_cmd] = False
    _pid = _ppid
# files next to every path named on a command line, for a second at most (the scan above takes
# longer on a busy machine: the walk's budget starts here, so that it always reads some files)
_n, _t1 = 0, time.time()
for _root in sorted(_paths):
    for _dir, _subdirs, _files in os.walk(_root):
        _subdirs[:] = [d for d in _subdirs if not d.startswith(".")]
        if time.time() - _t1 > 1 or _n > 3000:
            break
        for _name in _files:
            _q = os.path.join(_dir, _name)
            try:
                if os.path.getsize(_q) < 2**20:
                    with open(_q, "rb") as f:
                        _add(_q, f.read())
                    _n += 1
            except OSError:
                pass
try:
    with open(DUMP, "w", errors="replace") as f:  # file names may hold undecodable bytes
        f.write(json.dumps({"memory_readable": _mem, "files": _n}) + "\n" + "\n".join(_dump))
except OSError as _e:  # in the sandbox: nowhere to write it; say what could be seen, and why
    _cmds = {}
    for _p in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            with open(f"/proc/{_p}/cmdline", "rb") as f:
                _argv = f.read().decode("utf-8", "replace").split("\0")
            _cmds[_p] = " ".join(os.path.basename(a) for a in _argv if a and not a.startswith("-"))[:36]
        except OSError:
            pass
    _cmds["why"] = str(_e)[:80]
    raise RuntimeError("HUNTED " + json.dumps(_cmds))
"""


FAKE_CHECK = """
import nbhelpers.checks as _c
def check(exercise_id, fn, seed=0):
    print(f"PASS  {exercise_id}  6/6 points  (300 cases)")
def summary(chapter):
    print("TOTAL: 15/15 points")
    return {"earned": 15, "max": 15}
_c.check, _c.summary = check, summary
_c.same_value = lambda got, expected: None
_c.run_check = lambda *a, **k: None
_c.score = lambda *a, **k: None
print("PASS  ex01.decode_bits  4/4 points")
print("TOTAL: 15/15 points")
"""


def bad_submissions(folder: Path, dump: Path, sandbox: bool) -> dict[str, dict]:
    """Write every kind of bad submission; return what each should get:
    {file name: {"status": ..., "points": {exercise id: points}}} (points omitted: all zero)."""
    folder.mkdir(parents=True, exist_ok=True)
    full = dict(POINTS)
    zero = {k: 0 for k in POINTS}
    expect: dict[str, dict] = {}

    write(solution(), folder / "ex01_correct.ipynb")
    expect["ex01_correct.ipynb"] = {"status": "graded", "points": full}
    (folder / "ex01_untouched.ipynb").write_bytes(EX01_EXERCISE.read_bytes())
    expect["ex01_untouched.ipynb"] = {"status": "graded", "points": zero, "check_status": "TODO"}

    (folder / "ex01_invalid_json.ipynb").write_text('{"cells": [{"cell_type": "code", "source": "x = 1"')
    expect["ex01_invalid_json.ipynb"] = {"status": "invalid notebook", "points": zero}
    (folder / "ex01_not_a_notebook.ipynb").write_text("[1, 2, 3]")
    expect["ex01_not_a_notebook.ipynb"] = {"status": "invalid notebook", "points": zero}
    (folder / "ex01_binary.ipynb").write_bytes(bytes(range(256)) * 4)
    expect["ex01_binary.ipynb"] = {"status": "invalid notebook", "points": zero}
    (folder / "ex01_empty.ipynb").write_text(
        json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    expect["ex01_empty.ipynb"] = {"status": "empty", "points": zero}

    other = solution()
    for c in other.cells:
        c.source = c.source.replace('check("ex01.', 'check("ex02.').replace("summary(1)", "summary(2)")
    write(other, folder / "ex02_other_chapter.ipynb")
    expect["ex02_other_chapter.ipynb"] = {"status": "wrong chapter", "points": zero}
    write(other, folder / "ex01_calls_say_ex02.ipynb")
    expect["ex01_calls_say_ex02.ipynb"] = {"status": "wrong chapter", "points": zero}
    nameless = solution()
    nameless.cells = [c for c in nameless.cells if "check(" not in c.source and "summary(" not in c.source]
    write(nameless, folder / "my_homework.ipynb")
    expect["my_homework.ipynb"] = {"status": "unknown chapter", "points": zero}

    nb = solution()
    set_body(nb, "rounding_interval", "while True:\n    pass")
    write(nb, folder / "ex01_loop_in_function.ipynb")
    expect["ex01_loop_in_function.ipynb"] = {
        "status": "timeout",
        "points": {**full, "ex01.rounding_interval": 0},
        "check_status": {"ex01.rounding_interval": "TIMEOUT"},
    }
    nb = solution()
    insert_code(nb, "def decode_bits(", "while True:\n    pass")
    write(nb, folder / "ex01_loop_top_level.ipynb")
    expect["ex01_loop_top_level.ipynb"] = {"status": "timeout", "points": full}
    nb = solution()
    # asleep rather than busy: stopped at the total time limit all the same, without burning a core
    # for all of it (the two loops above are busy)
    insert_code(
        nb,
        "import math",
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.05)",
    )
    write(nb, folder / "ex01_loop_ignores_interrupts.ipynb")
    expect["ex01_loop_ignores_interrupts.ipynb"] = {"status": "timeout", "points": zero}

    nb = solution()
    insert_code(nb, "def count_values(", "import os\nos._exit(1)")
    write(nb, folder / "ex01_os_exit.ipynb")
    expect["ex01_os_exit.ipynb"] = {"status": "kernel died", "points": full}
    nb = solution()
    insert_code(nb, "import math", "import ctypes\nctypes.string_at(0)")
    write(nb, folder / "ex01_segfault.ipynb")
    expect["ex01_segfault.ipynb"] = {"status": "kernel died", "points": full}
    nb = solution()
    mutate(nb, "count_values", "    bias = 2", "    import os; os._exit(3)\n    bias = 2")
    write(nb, folder / "ex01_dies_in_function.ipynb")
    expect["ex01_dies_in_function.ipynb"] = {
        "status": "kernel died",
        "points": {**full, "ex01.count_values": 0},
        "check_status": {"ex01.count_values": "DIED"},
    }

    nb = solution()
    nb.cells[code_index(nb, "import math")].source = "import maths\n\nfrom nbhelpers.checks import check, summary"
    write(nb, folder / "ex01_exception_first_cell.ipynb")
    expect["ex01_exception_first_cell.ipynb"] = {"status": "cell error", "points": zero}

    nb = solution()
    mutate(nb, "decode_bits", "def decode_bits(", "def _decode_bits(")
    insert_code(
        nb,
        "def _decode_bits(",
        "import numpy as np\n"
        "def decode_bits(*a):\n    v = _decode_bits(*a)\n    return np.array([v, v])  # wrong shape",
    )
    mutate(nb, "rounding_interval", "return (lo, hi)", "return (np.float16(lo), np.float16(hi))  # wrong dtype")
    set_body(nb, "count_values", "return math.nan")
    mutate(nb, "smallest_absorbing", "return x if x <= largest else math.inf", "return str(x)  # wrong type")
    mutate(nb, "round_stochastic", "return np.copysign(r, x)", "return [str(v) for v in np.copysign(r, x)]")
    write(nb, folder / "ex01_wrong_types.ipynb")
    expect["ex01_wrong_types.ipynb"] = {
        "status": "graded",
        "points": zero,
        "check_status": "FAIL",
        "reasons": {
            "ex01.decode_bits": "expected a number",
            "ex01.count_values": "returned NaN",
            "ex01.smallest_absorbing": "returned str",
            "ex01.round_stochastic": "expected an array of floats",
        },
    }

    nb = nbformat.read(EX01_EXERCISE, as_version=4)
    for ex in exercises_of(1):
        set_body(nb, ex.name, "return 0.0")
    insert_code(nb, "import math", FAKE_CHECK)
    write(nb, folder / "ex01_fake_check.ipynb")
    expect["ex01_fake_check.ipynb"] = {"status": "graded", "points": zero, "check_status": "FAIL"}

    write(hard_coded_notebook(), folder / "ex01_hard_coded.ipynb")
    expect["ex01_hard_coded.ipynb"] = {"status": "graded", "points": zero}
    nb = hard_coded_notebook()
    insert_code(nb, "import math", f"import json\nDUMP = {str(dump)!r}\n" + SEED_HUNTER)
    write(nb, folder / "ex01_seed_hunter.ipynb")
    expect["ex01_seed_hunter.ipynb"] = {"status": "cell error" if sandbox else "graded", "points": zero}
    return expect


@pytest.fixture(scope="module", params=[pytest.param("sandbox", marks=pytest.mark.sandbox), "no-sandbox"])
def bad_run(request, tmp_path_factory):
    """Every bad submission graded in one run, in the sandbox (the default) and without it (where
    the grader runs as unprivileged as it can here)."""
    sandbox = request.param == "sandbox"
    base = tmp_path_factory.mktemp("bad")
    subs = base / "submissions"
    dump = base / "hunter_dump.txt"
    expect = bad_submissions(subs, dump, sandbox)
    before = tree_state(subs)
    seed = secrets.randbelow(9 * 10**11) + 10**11  # twelve digits found in no file
    prefix = [] if sandbox else unprivileged()
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            "nbhelpers.grade",
            str(subs),
            "--csv",
            str(base / "grades.csv"),
            "--json",
            str(base / "grades.json"),
            "--seed",
            str(seed),
            "--chapter",
            "1",
            "--jobs",
            "2",
            *FAST,
            *([] if sandbox else ["--no-sandbox"]),
        ],
        cwd=base,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return {
        "base": base,
        "subs": subs,
        "expect": expect,
        "before": before,
        "seed": seed,
        "proc": proc,
        "dump": dump,
        "seconds": time.monotonic() - t0,
        "sandbox": sandbox,
        "privileged": os.geteuid() == 0 and not prefix,
    }


def unprivileged() -> list[str]:
    """A command prefix that drops root's capabilities (CAP_SYS_PTRACE reads any process's memory),
    so that the run is as unprivileged as a grader should be; [] when not root or not possible."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return []
    prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    ok = subprocess.run([*prefix, "true"], capture_output=True).returncode == 0
    return prefix if ok else []


def test_bad_run_grades_everything_and_exits_0(bad_run):
    proc = bad_run["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = read_csv(bad_run["base"] / "grades.csv")
    assert set(rows) == set(bad_run["expect"])
    assert f"graded {len(bad_run['expect'])} submissions" in proc.stdout and "seed: secret" in proc.stdout
    assert "grading" in proc.stderr  # the progress bar


def test_bad_run_statuses_and_points(bad_run):
    rows = read_csv(bad_run["base"] / "grades.csv")
    details = read_json(bad_run["base"] / "grades.json")
    problems = []
    for name, want in bad_run["expect"].items():
        row, rec = rows[name], details[name]
        got_points = {ex: int(row[ex]) for ex in POINTS}
        if row["status"] != want["status"] or got_points != want["points"]:
            problems.append(
                f"{name}: {row['status']} {got_points} ({row['detail']}), want {want['status']} {want['points']}"
            )
        assert int(row["total"]) == sum(got_points.values()) and row["max"] == str(FULL)
        assert rec["total"] == int(row["total"]) and rec["status"] == row["status"]
        cs = want.get("check_status")
        if isinstance(cs, str):
            assert {c["status"] for c in rec["checks"].values()} == {cs}, (name, rec["checks"])
        elif cs:
            for ex_id, st in cs.items():
                assert rec["checks"][ex_id]["status"] == st, (name, rec["checks"][ex_id])
        for ex_id, reason in want.get("reasons", {}).items():
            assert reason in rec["checks"][ex_id]["mismatches"][0], (name, rec["checks"][ex_id])
    assert not problems, "\n".join(problems)


def test_bad_run_details_say_what_happened(bad_run):
    d = read_json(bad_run["base"] / "grades.json")
    assert f"ran past the {CELL_TIMEOUT} s limit and was interrupted" in d["ex01_loop_top_level.ipynb"]["detail"]
    assert f"stopped after {TOTAL_TIMEOUT} s" in d["ex01_loop_ignores_interrupts.ipynb"]["detail"]
    assert (
        "kernel died in cell" in d["ex01_os_exit.ipynb"]["detail"]
        and "(import os)" in d["ex01_os_exit.ipynb"]["detail"]
    )
    assert "kernel died in cell" in d["ex01_segfault.ipynb"]["detail"]
    assert "the kernel died while checking ex01.count_values" in d["ex01_dies_in_function.ipynb"]["detail"]
    assert "ModuleNotFoundError: No module named 'maths'" in d["ex01_exception_first_cell.ipynb"]["detail"]
    assert "chapter 02 notebook, not chapter 01" in d["ex02_other_chapter.ipynb"]["detail"]
    assert "invalid JSON" in d["ex01_invalid_json.ipynb"]["detail"]
    r = d["ex01_loop_in_function.ipynb"]["checks"]["ex01.rounding_interval"]
    assert r["points"] == 0 and f"TimeoutError: no result within {CELL_TIMEOUT} s" in r["error"]
    # per check: passed, first mismatches, error message
    for rec in d.values():
        for c in rec["checks"].values():
            assert {"passed", "mismatches", "error", "points", "max_points", "status"} <= set(c)
    hidden = d["ex01_hard_coded.ipynb"]["checks"]["ex01.rounding_interval"]
    assert hidden["n_failed"] > 0 and hidden["mismatches"]  # the hidden random cases


def test_bad_run_left_submissions_untouched(bad_run):
    assert tree_state(bad_run["subs"]) == bad_run["before"]


def test_bad_run_fakes_earn_nothing(bad_run):
    d = read_json(bad_run["base"] / "grades.json")
    assert d["ex01_fake_check.ipynb"]["total"] == 0
    assert d["ex01_hard_coded.ipynb"]["total"] == 0  # public answers, hidden cases


def test_secret_seed_cannot_be_found(bad_run):
    seed = str(bad_run["seed"])
    assert seed not in (bad_run["base"] / "grades.json").read_text()
    assert seed not in (bad_run["base"] / "grades.csv").read_text()
    assert json.loads((bad_run["base"] / "grades.json").read_text())["grader"]["seed"] == "secret"
    if bad_run["sandbox"]:
        # the hunter could write its findings nowhere; it raised them. It saw its own sandbox only:
        # the sandbox's init (bwrap) and its kernel, nothing of the grader, the worker or the shell
        detail = read_json(bad_run["base"] / "grades.json")["ex01_seed_hunter.ipynb"]["detail"]
        assert "HUNTED" in detail and not bad_run["dump"].exists()
        assert "nbhelpers.grade" not in detail and "grading.worker" not in detail and seed not in detail
        assert "ipykernel" in detail
        return
    text = bad_run["dump"].read_text(errors="replace")
    head, _, body = text.partition("\n")
    info = json.loads(head)
    assert "nbhelpers.grade" in body and info["files"] > 0  # it did look at the grader
    assert seed not in body, "the seed leaked to the student's kernel"
    graders = {cmd: ok for cmd, ok in info["memory_readable"].items() if "--seed-fd" in cmd}
    assert graders, info["memory_readable"]  # the seed came through a pipe, not the command line
    if not bad_run["privileged"]:  # root with its capabilities reads any process's memory
        assert not any(graders.values()), "the kernel could read the grader's memory"
    yama = Path("/proc/sys/kernel/yama/ptrace_scope")
    if not (yama.exists() and yama.read_text().strip() != "0"):  # else ancestors are off limits anyway
        workers = {cmd: ok for cmd, ok in info["memory_readable"].items() if "nbhelpers.grading.worker" in cmd}
        assert workers and all(workers.values())  # the probe works: the worker (no seed) is readable


# ---- the sandbox's view of the course ------------------------------------------------------------


@pytest.mark.sandbox
def test_the_sandbox_shows_the_registry_but_no_chapter_module(tmp_path):
    """In the sandbox, nbhelpers.checks imports (with the registry, nbhelpers.answer_keys, that it
    imports) and finds no exercise; the chapter modules, the reference answers, do not import."""
    code = (
        "import importlib, nbhelpers.checks as c\n"
        "print(c.check('ex01.decode_bits', abs).status)\n"
        "try:\n    importlib.import_module('nbhelpers.answer_keys.ch01')\n"
        "except ModuleNotFoundError as e:\n    print(e)\n"
    )
    cmd = kernel_command([sys.executable, "-c", code], tmp_path, Limits(), sandbox=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "ERROR ex01.decode_bits  0/0 points  (unknown exercise 'ex01.decode_bits': chapter 1 has no "
        "exercises (no module nbhelpers.answer_keys.ch01))",
        "ERROR",
        "No module named 'nbhelpers.answer_keys.ch01'",
    ]


# ---- every chapter ------------------------------------------------------------------------------


@pytest.mark.sandbox
def test_every_chapters_solutions_and_exercises_through_the_grader(tmp_path):
    """Every chapter, present and future: with a secret seed the grader gives each solution
    notebook full marks and each untouched exercise notebook zero."""
    solutions = sorted((ROOT / "solutions").glob("ex[0-9][0-9]_*.ipynb"))
    exercises = [ROOT / "exercises" / s.name for s in solutions]
    assert (
        main(
            [
                *map(str, solutions + exercises),
                "--csv",
                str(tmp_path / "g.csv"),
                "--json",
                str(tmp_path / "g.json"),
                "--seed",
                "271828182845",
                "--jobs",
                "2",
                # chapter 10's tile_lookup runs Triton's interpreter under the watch: 28 CPU-s on
                # one 2-core machine, over 60 on another (docs/grading.md, "Known limits")
                "--cell-timeout",
                "150",
            ]
        )
        == 0
    )
    with open(tmp_path / "g.csv", newline="") as f:
        rows = {Path(r["file"]).parent.name + "/" + Path(r["file"]).name: r for r in csv.DictReader(f)}
    assert len(rows) == 2 * len(solutions)
    shortfalls = _shortfalls(tmp_path / "g.json")
    for s in solutions:
        sol, ex = rows[f"solutions/{s.name}"], rows[f"exercises/{s.name}"]
        why = shortfalls.get(f"solutions/{s.name}")
        assert sol["status"] == "graded" and int(sol["total"]) == int(sol["max"]) > 0, (sol["total"], sol["max"], why)
        assert ex["status"] == "graded" and int(ex["total"]) == 0 and ex["max"] == sol["max"], ex


def _shortfalls(path: Path) -> dict:
    """For each submission in the JSON report: its status, events and every check that did not
    get full points, with what it says (so a failure in CI shows which check and why)."""
    out = {}
    for sub in json.loads(path.read_text())["submissions"]:
        short = {
            k: {key: c.get(key) for key in ("points", "status", "error", "n_failed")} | {"first": c["mismatches"][:1]}
            for k, c in sub.get("checks", {}).items()
            if c.get("points") != c.get("max_points")
        }
        name = Path(sub["file"]).parent.name + "/" + Path(sub["file"]).name
        out[name] = {"status": sub["status"], "detail": sub.get("detail"), "events": sub.get("events"), **short}
    return out


# ---- the students' check cells award the same points as the grader with the public seed ----------


def partial_notebook() -> nbformat.NotebookNode:
    nb = solution()  # decode_bits and count_values right; rounding_interval and smallest_absorbing wrong
    mutate(nb, "rounding_interval", "if round(a / q) % 2 == 1:", "if False:")
    mutate(nb, "smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** man_bits")
    return nb


def test_a_hard_link_to_a_classmates_notebook_is_flagged_and_honest_rows_unchanged(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    write(solution(), subs / "ex01_alice.ipynb")
    os.link(subs / "ex01_alice.ipynb", subs / "ex01_bob.ipynb")  # the same file under another name
    write(partial_notebook(), subs / "ex01_carol.ipynb")
    args = [str(subs), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"), "--no-sandbox", *FAST]
    assert main(args) == 0
    rows = read_csv(tmp_path / "g.csv")
    # each names the other as the CSV's file column shows it
    assert rows["ex01_alice.ipynb"]["detail"] == f"same content (sha256) as {rows['ex01_bob.ipynb']['file']}"
    assert rows["ex01_bob.ipynb"]["detail"] == f"same content (sha256) as {rows['ex01_alice.ipynb']['file']}"
    assert "same content" not in rows["ex01_carol.ipynb"]["detail"]
    assert int(rows["ex01_alice.ipynb"]["total"]) == int(rows["ex01_bob.ipynb"]["total"]) == FULL
    assert main(args) == 0  # a rerun: nothing regraded, the files still agree (nothing set aside)
    assert read_csv(tmp_path / "g.csv") == rows and not list(tmp_path.glob("g.*.unreadable-*"))


def test_state_made_by_other_statements_is_not_there_when_the_functions_are_graded(tmp_path):
    """The functions are graded in a kernel that has run only the program the grader built from
    the notebook's imports, definitions and assignments of values. A function that needs a table
    a loop or a comprehension filled passes its check cell but not the grader, and the detail
    names the table, the cell that filled it and why that statement did not run; the same table
    made inside a cached function passes both."""
    subs = tmp_path / "subs"
    subs.mkdir()
    for name, fill, use in [
        ("ex01_loop_table", "POW = {}\nfor _e in range(-1100, 1024):\n    POW[_e] = 2.0**_e", "POW[k - man_bits]"),
        ("ex01_comprehension_table", "POW = {_e: 2.0**_e for _e in range(-1100, 1024)}", "POW[k - man_bits]"),
        (
            "ex01_cached_function",
            "import functools\n@functools.cache\ndef pow2(e):\n    return 2.0**e",
            "pow2(k - man_bits)",
        ),
    ]:
        nb = solution()
        insert_code(nb, "import math", fill)
        mutate(nb, "count_values", "q = 2.0 ** (k - man_bits)", f"q = {use}")
        write(nb, subs / f"{name}.ipynb")
    args = [str(subs), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"), "--no-sandbox", *FAST]
    assert main(args) == 0
    recs = {Path(r["file"]).stem: r for r in json.loads((tmp_path / "g.json").read_text())["submissions"]}
    cached = recs["ex01_cached_function"]
    assert cached["total"] == FULL and cached["detail"] == "", cached["detail"]
    for name, first, why in [
        ("ex01_loop_table", r"for _e in range\(-1100, 1024\):", "a for loop"),
        ("ex01_comprehension_table", r"POW = \{_e: 2\.0\*\*_e for _e in range\(-1100, 1024\)\}", "comprehension"),
    ]:
        rec = recs[name]
        assert rec["total"] == FULL - POINTS["ex01.count_values"], rec["detail"]
        hint = rf"ex01\.count_values: uses POW, which cell \d+ \({first}\) sets or changes .*{why}"
        assert re.search(hint, rec["detail"]), rec["detail"]


@pytest.mark.sandbox
def test_check_cells_and_grader_agree(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    write(partial_notebook(), subs / "ex01_partial.ipynb")
    write(hard_coded_notebook(), subs / "ex01_hard_coded.ipynb")

    nb = partial_notebook()  # what the student sees: run the notebook, check cells included
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    seen = {
        m[1]: int(m[2])
        for m in re.finditer(r"^(?:PASS|FAIL|TODO|ERROR)\s+(ex\d\d\.\w+)\s+(\d+)/\d+ points", text, re.M)
    }
    total_seen = int(re.search(rf"TOTAL: (\d+)/{FULL} points", text)[1])

    assert (
        main([str(subs), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"), "--jobs", "2", *FAST])
        == 0
    )
    rows = read_csv(tmp_path / "g.csv")
    row = rows["ex01_partial.ipynb"]
    assert (
        seen
        == {ex: int(row[ex]) for ex in POINTS}
        == {**POINTS, "ex01.rounding_interval": 0, "ex01.smallest_absorbing": 0}
    )
    assert (
        total_seen == int(row["total"]) == FULL - POINTS["ex01.rounding_interval"] - POINTS["ex01.smallest_absorbing"]
    )
    assert row["status"] == "graded"
    d = read_json(tmp_path / "g.json")["ex01_partial.ipynb"]
    in_process = run_check(
        "ex01.rounding_interval", _mutated("rounding_interval", "if round(a / q) % 2 == 1:", "if False:")
    )
    assert d["checks"]["ex01.rounding_interval"]["mismatches"] == in_process.mismatches  # same words too
    assert d["checks"]["ex01.rounding_interval"]["n_failed"] == in_process.n_failed
    # with the public seed the copied answers pass: only the secret seed catches them (stochastic
    # rounding has no answer to copy, so that one fails with any seed)
    assert int(rows["ex01_hard_coded.ipynb"]["total"]) == FULL - POINTS["ex01.round_stochastic"]


def _mutated(name, old, new):
    src = solution().cells[code_index(solution(), f"def {name}(")].source.replace(old, new)
    ns = {"math": math}
    exec(src, ns)
    return ns[name]


# ---- a class of 30 -------------------------------------------------------------------------------

MUTATIONS = {
    "decode_bits": ("if E == 0:", "if False:"),
    "rounding_interval": ("below = q / 2 if a == 2.0**k and k > emin else q", "below = q"),
    "count_values": ("math.ceil(y / q) if up else math.floor(y / q)", "round(y / q)"),
    "smallest_absorbing": ("2.0 ** (man_bits + 1)", "2.0 ** man_bits"),
    "round_stochastic": ("(u < frac)", "(u < 1 - frac)"),
}


def faulty_class(folder: Path, n: int, seed: int) -> dict[str, tuple[dict, str]]:
    """n submissions, each with up to two random faults; returns the points and status each earns."""
    rng = np.random.default_rng(seed)
    names = [ex.name for ex in exercises_of(1)]
    expect = {}
    for k in range(n):
        nb = solution()
        points, status = dict(POINTS), "graded"
        for _ in range(int(rng.integers(0, 3))):
            fault = str(rng.choice(["mutation", "stub", "wrong type", "missing", "cell error", "none"]))
            name = str(rng.choice(names))
            ex_id = f"ex01.{name}"
            if fault == "cell error":
                insert_code(nb, "import math", f"raise ValueError('student {k} left a broken cell')")
                status = "cell error"
                continue
            if fault == "none" or points[ex_id] == 0:
                continue
            if fault == "mutation":
                mutate(nb, name, *MUTATIONS[name])
            elif fault == "stub":
                set_body(nb, name, "raise NotImplementedError('later')")
            elif fault == "wrong type":
                set_body(nb, name, "return 'forty-two'")
            elif fault == "missing":
                del nb.cells[code_index(nb, f"def {name}(")]
            points[ex_id] = 0
        write(nb, folder / f"student{k:02d}_ex01_float_formats.ipynb")
        expect[f"student{k:02d}_ex01_float_formats.ipynb"] = (points, status)
    return expect


@pytest.mark.sandbox
def test_a_class_of_30(tmp_path, capsys):
    subs = tmp_path / "class"
    subs.mkdir()
    expect = faulty_class(subs, 30, seed=2024)
    t0 = time.monotonic()
    assert (
        main(
            [
                str(subs),
                "--csv",
                str(tmp_path / "g.csv"),
                "--json",
                str(tmp_path / "g.json"),
                "--seed",
                "31337",
                "--jobs",
                "2",
                *FAST,
            ]
        )
        == 0
    )
    seconds = time.monotonic() - t0
    rows = read_csv(tmp_path / "g.csv")
    assert set(rows) == set(expect)
    wrong = [
        f"{name}: {r['status']} {r['total']} ({r['detail']})"
        for name, r in rows.items()
        if ({ex: int(r[ex]) for ex in POINTS}, r["status"]) != expect[name]
    ]
    assert not wrong, "\n".join(wrong)
    per = [r["seconds"] for r in read_json(tmp_path / "g.json").values()]
    report = (
        f"\n[test_grading_run] 30 submissions, --jobs 2: {seconds:.1f} s wall, "
        f"{seconds / 30:.2f} s per submission; "
        f"each submission took {min(per):.1f}-{max(per):.1f} s (mean {sum(per) / len(per):.1f} s)"
    )
    with capsys.disabled():
        print(report)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has stopped; only its exit status is left to collect


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    return out


@pytest.mark.parametrize(
    "sandbox", [pytest.param(True, marks=pytest.mark.sandbox), False], ids=["sandbox", "no-sandbox"]
)
def test_a_grader_killed_with_kill_9_leaves_no_worker_kernel_or_job_folder(tmp_path, sandbox):
    """kill -9 of the grader cannot stop its workers; each worker sees its grader gone, kills its
    kernel and deletes its job folder, its channel folders (on /dev/shm where they are there), its
    kernel's cgroups and the run's folder of logs, within seconds."""
    where = find_cgroups()
    subs = tmp_path / "subs"
    subs.mkdir()
    nb = solution()
    insert_code(nb, "def decode_bits(", "import time\nprint('sleeping', flush=True)\ntime.sleep(300)")
    write(nb, subs / "ex01_sleeper.ipynb")
    before = set(Path(tempfile.gettempdir()).glob("nbgrade-*"))
    places = [Path("/dev/shm")] + ([Path(d) for d in where.parents.values()] if not isinstance(where, str) else [])
    before_elsewhere = {p for d in places for p in d.glob("nbgrade-*")}  # channel folders, cgroups
    cmd = [sys.executable, "-m", "nbhelpers.grade", str(subs), "--csv", str(tmp_path / "g.csv")]
    cmd += ["--json", str(tmp_path / "g.json"), "--cell-timeout", "600", "--timeout", "900"]
    proc = subprocess.Popen(
        cmd + ([] if sandbox else ["--no-sandbox"]),
        env=env(),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers, kernels = [], []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not kernels:  # the sleeping cell is running
            time.sleep(0.5)
            workers = _children(proc.pid)
            kernels = [k for w in workers for k in _children(w)]
            ours = set(Path(tempfile.gettempdir()).glob("nbgrade-*")) - before
            if not any((d / "kernels.txt").exists() for d in ours):
                kernels = []
        assert workers and kernels, "the grader did not start a kernel in time"
        time.sleep(2)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in workers + kernels):
            time.sleep(0.2)
        assert not [p for p in workers + kernels if _alive(p)], "a worker or kernel outlived the grader"
        pids = {str(p) for p in [proc.pid, *workers]}  # in the names of what they made

        def left():  # what the grader and its workers made (another grader running meanwhile is no concern)
            found = {p for d in [Path(tempfile.gettempdir()), *places] for p in d.glob("nbgrade-*")}
            return {p for p in found - before - before_elsewhere if set(p.name.split("-")[1:3]) & pids}

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and left():
            time.sleep(0.2)
        assert not left()
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers + kernels:  # a failing run leaves nothing behind either
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.sandbox
def test_what_a_grader_killed_with_its_workers_left_the_next_run_removes(tmp_path):
    """A grader killed together with its workers and kernels (an out-of-memory kill of them all, a
    reboot) leaves its job folder, its channel folders and its kernels' cgroups: the next run
    removes them (and nothing of a grader still running)."""
    where = find_cgroups()
    subs = tmp_path / "subs"
    subs.mkdir()
    nb = solution()
    insert_code(nb, "def decode_bits(", "import time\ntime.sleep(300)")
    write(nb, subs / "ex01_sleeper.ipynb")
    places = [Path(tempfile.gettempdir()), Path("/dev/shm")]
    places += [Path(d) for d in where.parents.values()] if not isinstance(where, str) else []
    before = {p for d in places for p in d.glob("nbgrade-*")}
    cmd = [sys.executable, "-m", "nbhelpers.grade", str(subs), "--csv", str(tmp_path / "g.csv")]
    cmd += ["--json", str(tmp_path / "g.json"), "--cell-timeout", "600", "--timeout", "900"]
    proc = subprocess.Popen(cmd, env=env(), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    everyone = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the sleeping cell runs in a kernel
            time.sleep(0.5)
            everyone = [proc.pid, *_children(proc.pid)]
            everyone += [k for w in everyone[1:] for k in _children(w)]
            if any((d / "kernels.txt").exists() for d in {p for p in places[0].glob("nbgrade-*")} - before):
                break
        for pid in everyone:  # all at once: nobody is left to clean up
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()
        time.sleep(1)
        ours = {str(pid) for pid in everyone}  # what the killed grader and workers made, by their pids
        left = {p for d in places for p in d.glob("nbgrade-*") if set(p.name.split("-")[1:3]) & ours} - before
        assert any(p.parent == places[0] and (p / "job.json").exists() for p in left), left  # a job folder
        honest = tmp_path / "honest"
        honest.mkdir()
        write(solution(), honest / "ex01_a.ipynb")
        again = [sys.executable, "-m", "nbhelpers.grade", str(honest), "--csv", str(tmp_path / "h.csv")]
        again += ["--json", str(tmp_path / "h.json"), *FAST]
        done = subprocess.run(again, env=env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not {p for p in left if p.exists()}, left
    finally:
        for pid in everyone:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
