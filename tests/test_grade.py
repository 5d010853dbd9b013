"""The instructor's grader (nbhelpers.grade): bad submissions of every kind, hidden cases, the
trust boundary, parity with the students' check cells, resumable outputs, and a class-sized run.

Submissions are generated here from solutions/ex01_float_formats.ipynb. Notebook runs use short
time limits (5 s a cell, 25 s a submission) so that the infinite loops cost little.
"""
from __future__ import annotations

import csv
import hashlib
import importlib
import json
import math
import os
import pkgutil
import re
import secrets
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import ml_dtypes
import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import nbhelpers.exercises
from nbhelpers import checks, grade
from nbhelpers.checks import Raised, cases_for, exercises_of, run_check, same_value

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "ex01_float_formats.ipynb"
EXERCISE = ROOT / "exercises" / "ex01_float_formats.ipynb"
CELL_TIMEOUT, TOTAL_TIMEOUT = 5, 25
FAST = ["--cell-timeout", str(CELL_TIMEOUT), "--timeout", str(TOTAL_TIMEOUT)]
POINTS = {ex.id: ex.points for ex in exercises_of(1)}
FULL = sum(POINTS.values())


# ---- building submissions ----------------------------------------------------------------------

def solution() -> nbformat.NotebookNode:
    return nbformat.read(SOLUTION, as_version=4)


def code_index(nb, needle: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and needle in c.source)


def set_body(nb, name: str, body: str) -> None:
    """Replace the body of the function ``name`` (its cell keeps only the def line)."""
    i = code_index(nb, f"def {name}(")
    head = nb.cells[i].source.splitlines()[0]
    nb.cells[i].source = head + "\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


def mutate(nb, name: str, old: str, new: str) -> None:
    i = code_index(nb, f"def {name}(")
    assert old in nb.cells[i].source, (name, old)
    nb.cells[i].source = nb.cells[i].source.replace(old, new)


def insert_code(nb, after_needle: str, source: str) -> None:
    nb.cells.insert(code_index(nb, after_needle) + 1, nbformat.v4.new_code_cell(source))


def write(nb, path: Path) -> Path:
    nbformat.write(nb, str(path))
    return path


def literal(v) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({repr(v)!r})"
    return repr(v)


def hard_coded_source(seed: int = 0) -> str:
    """Functions that only know the answers of the cases of ``seed`` (what a student who copied
    the public check's answers would hand in)."""
    lines = []
    for ex in exercises_of(1):
        table = {repr(c.args): ex.reference(*c.args, **c.kwargs) for c in cases_for(ex, seed)}
        lines.append(f"_T_{ex.name} = {{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in table.items()) + "}")
        lines.append(f"def {ex.name}(*args):\n    return _T_{ex.name}.get(repr(args), 0.0)")
    return "\n".join(lines)


def hard_coded_notebook() -> nbformat.NotebookNode:
    nb = solution()
    for ex in exercises_of(1):  # drop the real functions
        del nb.cells[code_index(nb, f"def {ex.name}(")]
    insert_code(nb, "import math", hard_coded_source())
    return nb


SEED_HUNTER = r'''
import os, sys, time
_t0, _dump, _mem = time.time(), [], {}
def _add(where, data):
    if isinstance(data, bytes):
        data = data.replace(b"\0", b" ").decode("utf-8", "replace")
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
# files next to every path named on a command line
_n = 0
for _root in sorted(_paths):
    for _dir, _subdirs, _files in os.walk(_root):
        _subdirs[:] = [d for d in _subdirs if not d.startswith(".")]
        if time.time() - _t0 > 3 or _n > 3000:
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
with open(DUMP, "w") as f:
    f.write(json.dumps({"memory_readable": _mem, "files": _n}) + "\n" + "\n".join(_dump))
'''


FAKE_CHECK = '''
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
'''


def bad_submissions(folder: Path, dump: Path) -> dict[str, dict]:
    """Write every kind of bad submission; return what each should get:
    {file name: {"status": ..., "points": {exercise id: points}}} (points omitted: all zero)."""
    folder.mkdir(parents=True, exist_ok=True)
    full = dict(POINTS)
    zero = {k: 0 for k in POINTS}
    expect: dict[str, dict] = {}

    write(solution(), folder / "ex01_correct.ipynb")
    expect["ex01_correct.ipynb"] = {"status": "graded", "points": full}
    (folder / "ex01_untouched.ipynb").write_bytes(EXERCISE.read_bytes())
    expect["ex01_untouched.ipynb"] = {"status": "graded", "points": zero, "check_status": "TODO"}

    (folder / "ex01_invalid_json.ipynb").write_text('{"cells": [{"cell_type": "code", "source": "x = 1"')
    expect["ex01_invalid_json.ipynb"] = {"status": "invalid notebook", "points": zero}
    (folder / "ex01_not_a_notebook.ipynb").write_text("[1, 2, 3]")
    expect["ex01_not_a_notebook.ipynb"] = {"status": "invalid notebook", "points": zero}
    (folder / "ex01_binary.ipynb").write_bytes(bytes(range(256)) * 4)
    expect["ex01_binary.ipynb"] = {"status": "invalid notebook", "points": zero}
    (folder / "ex01_empty.ipynb").write_text(
        json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
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
    set_body(nb, "round_nearest_even", "while True:\n    pass")
    write(nb, folder / "ex01_loop_in_function.ipynb")
    expect["ex01_loop_in_function.ipynb"] = {"status": "timeout", "points": {**full, "ex01.round_nearest_even": 0},
                                             "check_status": {"ex01.round_nearest_even": "TIMEOUT"}}
    nb = solution()
    insert_code(nb, "def decode_bits(", "while True:\n    pass")
    write(nb, folder / "ex01_loop_top_level.ipynb")
    expect["ex01_loop_top_level.ipynb"] = {"status": "timeout", "points": full}
    nb = solution()
    insert_code(nb, "import math", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass")
    write(nb, folder / "ex01_loop_ignores_interrupts.ipynb")
    expect["ex01_loop_ignores_interrupts.ipynb"] = {"status": "timeout", "points": zero}

    nb = solution()
    insert_code(nb, "def ulp_at(", "import os\nos._exit(1)")
    write(nb, folder / "ex01_os_exit.ipynb")
    expect["ex01_os_exit.ipynb"] = {"status": "kernel died", "points": full}
    nb = solution()
    insert_code(nb, "import math", "import ctypes\nctypes.string_at(0)")
    write(nb, folder / "ex01_segfault.ipynb")
    expect["ex01_segfault.ipynb"] = {"status": "kernel died", "points": full}
    nb = solution()
    mutate(nb, "ulp_at", "    bias = 2", "    import os; os._exit(3)\n    bias = 2")
    write(nb, folder / "ex01_dies_in_function.ipynb")
    expect["ex01_dies_in_function.ipynb"] = {"status": "kernel died", "points": {**full, "ex01.ulp_at": 0},
                                             "check_status": {"ex01.ulp_at": "DIED"}}

    nb = solution()
    nb.cells[code_index(nb, "import math")].source = "import maths\n\nfrom nbhelpers.checks import check, summary"
    write(nb, folder / "ex01_exception_first_cell.ipynb")
    expect["ex01_exception_first_cell.ipynb"] = {"status": "cell error", "points": zero}

    nb = solution()
    mutate(nb, "decode_bits", "def decode_bits(", "def _decode_bits(")
    insert_code(nb, "def _decode_bits(", "import numpy as np\n"
                "def decode_bits(*a):\n    v = _decode_bits(*a)\n    return np.array([v, v])  # wrong shape")
    mutate(nb, "round_nearest_even", "return math.copysign(r, x)", "return np.float16(math.copysign(r, x))  # wrong dtype")
    set_body(nb, "ulp_at", "return math.nan")
    mutate(nb, "smallest_absorbing", "return x if x <= largest else math.inf", "return str(x)  # wrong type")
    write(nb, folder / "ex01_wrong_types.ipynb")
    expect["ex01_wrong_types.ipynb"] = {"status": "graded", "points": zero, "check_status": "FAIL",
                                        "reasons": {"ex01.decode_bits": "expected a number",
                                                    "ex01.ulp_at": "returned NaN",
                                                    "ex01.smallest_absorbing": "returned str"}}

    nb = nbformat.read(EXERCISE, as_version=4)
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
    expect["ex01_seed_hunter.ipynb"] = {"status": "graded", "points": zero}
    return expect


def tree_state(folder: Path) -> dict:
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_mode)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def read_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    files = [r["file"] for r in rows]
    assert len(files) == len(set(files)), "one row per submission"
    return {Path(r["file"]).name: r for r in rows}


def read_json(path: Path) -> dict[str, dict]:
    return {Path(r["file"]).name: r for r in json.loads(path.read_text())["submissions"]}


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


# ---- the codec and the pieces, without a kernel --------------------------------------------------

def roundtrip(v, strict=True):
    return grade._decode(json.loads(json.dumps(grade._encode(v, strict=strict), allow_nan=False)), grade._stand_in)


@pytest.mark.parametrize("value", [
    None, True, 0, -3, 2**63, -(2**90) + 1, 1.5, -0.0, 0.0, math.nan, math.inf, -math.inf, 5e-324, 1 + 2j,
    complex(-0.0, math.nan), "text", "", b"\x00\xff", (1, 2.5), [1, [2, (3,)]], {"a": 1, (1, 2): [3]},
    {1, 2}, frozenset({3}), np.float32(-0.0), np.int8(-5), np.bool_(True), np.uint64(2**64 - 1),
    np.array([1.0, -0.0, np.nan, np.inf]), np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2],
    np.zeros((0, 3)), np.array(2.5), np.array([1 + 2j]), np.array([True, False]),
    np.array([1.5, -0.0], dtype=ml_dtypes.bfloat16), ml_dtypes.float8_e4m3fn(448),
    np.array([0x7F], np.uint8).view(ml_dtypes.float8_e5m2), np.array(["a", "bc"]),
    np.array([1, "x", None], dtype=object),
], ids=repr)
def test_codec_round_trips_exactly(value):
    back = roundtrip(value)
    assert type(back) is type(value) or isinstance(value, tuple)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape
    if isinstance(value, np.generic):
        assert back.dtype == value.dtype
    if isinstance(value, (dict, set, frozenset, bytes, str)) or (isinstance(value, np.ndarray) and value.dtype.kind in "OU"):
        assert back == value if not isinstance(value, np.ndarray) else list(back) == list(value)
    else:
        assert same_value(back, value) is None, (back, value)


def test_codec_special_objects():
    from nbhelpers.formats import FORMATS, fields
    from nbhelpers.rounding import Rounding

    rng = np.random.default_rng(7)
    rng.random(3)
    back = roundtrip(rng)
    assert back.random() == rng.random()  # same state: the student draws the same numbers
    assert roundtrip(FORMATS["e4m3fn"]) == FORMATS["e4m3fn"]
    assert roundtrip(Rounding.STOCHASTIC) is Rounding.STOCHASTIC
    f = fields(np.array([0x3FC0], np.uint16), "bf16")
    assert same_value(roundtrip(f), f) is None  # a NamedTuple arrives as a tuple, compares equal


def test_codec_student_objects_never_equal_anything():
    class Sneaky:
        def __eq__(self, other):
            return True

        def __repr__(self):
            return "<always equal>"

    class Broken:
        def __float__(self):
            raise RuntimeError("no")

        def __repr__(self):
            raise RuntimeError("no repr either")

    with pytest.raises(ValueError):
        grade._encode(Sneaky(), strict=True)  # inputs must be data
    for obj in (Sneaky(), Broken(), object(), lambda x: x, iter([1])):
        back = roundtrip(obj, strict=False)
        assert isinstance(back, grade._Opaque)
        for expected in (1.0, "x", (1, 2), np.zeros(2), None):
            assert same_value(back, expected) is not None
    assert type(roundtrip(Sneaky(), strict=False)).__name__ == "Sneaky"

    class Half:  # a float-like (e.g. a 0-d tensor): compared by its value, as checks.same_value does
        def __float__(self):
            return 0.5

    assert roundtrip(Half(), strict=False) == 0.5
    torch = pytest.importorskip("torch")
    t = roundtrip(torch.tensor([1.5, -0.0]), strict=False)
    assert isinstance(t, np.ndarray) and same_value(t, np.array([1.5, -0.0])) is None


@pytest.mark.parametrize("garbage", [
    {"$nd": ["<f8", [3], "AAAA"]}, {"$nd": ["|O", [1], ""]}, {"$nd": ["[('a','<f8')]", [1], ""]},
    {"$nd": ["<f8", [-1], ""]}, {"$np": ["<f8", "!!"]}, {"$float": "1e5"}, {"$int": "12"},
    {"$enum": ["os", "path", "sep"]}, {"$dc": ["nbhelpers.formats", "FloatFormat", {"exp_bits": "x"}]},
    {"$enum": ["nbhelpers.formats", "__builtins__", "x"]}, {"$rng": ["Evil", {}]}, {"$what": 1},
    {"a": 1, "b": 2}, {"$tuple": 5}, {"$complex": ["a", 1]}, {"$opaque": [1, 2]}, [[[[[]]]]] * 3,
    json.loads("[" * 900 + "]" * 900),
])
def test_decoding_garbage_gives_a_stand_in_never_raises(garbage):
    v = grade._decode_result(garbage)
    if isinstance(v, grade._Opaque):
        assert same_value(v, 1.0) is not None
    else:  # nested empty lists are a valid (wrong) answer
        assert isinstance(v, list)


@pytest.mark.parametrize("module", sorted(
    m.name for m in pkgutil.iter_modules(nbhelpers.exercises.__path__) if re.fullmatch(r"ch\d\d", m.name)))
def test_every_chapters_inputs_can_be_sent_to_a_kernel(module):
    """A new chapter needs no change to the grader, as long as its case inputs are data
    (numbers, strings, tuples, arrays, generators, nbhelpers enums and dataclasses)."""
    chapter = int(module[2:])
    importlib.import_module(f"nbhelpers.exercises.{module}")
    plan = grade._plan_chapter(chapter, seed=12345)
    assert plan is not None and plan.exercises
    for p in plan.exercises:
        assert p.error is None, p.error
    sent = json.loads(plan.inputs_json)["exercises"]
    for p, s in zip(plan.exercises, sent):
        assert s["id"] == p.exercise.id and len(s["cases"]) == len(p.cases)
        for case, enc in zip(p.cases, s["cases"]):
            args = [grade._decode(a, grade._stand_in) for a in enc["a"]]
            assert len(args) == len(case.args)
            for got, want in zip(args, case.args):
                assert type(got) is type(want) or isinstance(want, tuple)
                if isinstance(want, np.random.Generator):
                    continue
                assert same_value(got, want) is None


def test_every_chapters_solutions_and_exercises_through_the_grader(tmp_path):
    """Every chapter, present and future: with a secret seed the grader gives each solution
    notebook full marks and each untouched exercise notebook zero."""
    solutions = sorted((ROOT / "solutions").glob("ex[0-9][0-9]_*.ipynb"))
    exercises = [ROOT / "exercises" / s.name for s in solutions]
    assert grade.main([*map(str, solutions + exercises), "--csv", str(tmp_path / "g.csv"),
                       "--json", str(tmp_path / "g.json"), "--seed", "271828182845", "--jobs", "2"]) == 0
    with open(tmp_path / "g.csv", newline="") as f:
        rows = {Path(r["file"]).parent.name + "/" + Path(r["file"]).name: r for r in csv.DictReader(f)}
    assert len(rows) == 2 * len(solutions)
    for s in solutions:
        sol, ex = rows[f"solutions/{s.name}"], rows[f"exercises/{s.name}"]
        assert sol["status"] == "graded" and int(sol["total"]) == int(sol["max"]) > 0, sol
        assert ex["status"] == "graded" and int(ex["total"]) == 0 and ex["max"] == sol["max"], ex


def test_expected_results_never_reach_the_kernel():
    plan = grade._plan_chapter(1, seed=99)
    sent = json.loads(plan.inputs_json)
    assert set(sent) == {"exercises"}
    for ex in sent["exercises"]:
        assert set(ex) == {"id", "name", "cases"} and all(set(c) == {"a", "k"} for c in ex["cases"])
    job = {"inputs": "/x/inputs.json", "outputs": "/x/out.jsonl", "budget": 5.0, "only": None}
    compile(grade._grading_cell(job), "<cell>", "exec")


def test_detect_chapter():
    cells = [(0, "import math"), (3, 'check("ex02.decode", f);')]
    assert grade.detect_chapter("ex02_accumulation.ipynb", cells) == (2, "")
    assert grade.detect_chapter("alice.ipynb", cells) == (2, "")
    assert grade.detect_chapter("ex01_x.ipynb", cells)[0] == 2  # the notebook's own calls decide
    assert "file name says chapter 01" in grade.detect_chapter("ex01_x.ipynb", cells)[1]
    assert grade.detect_chapter("ex01 (3).ipynb", [(0, "x = 1")]) == (1, "")
    assert grade.detect_chapter("bob-EX07-final.ipynb", []) == (7, "")
    assert grade.detect_chapter("alex01.ipynb", []) == (None, "")
    assert grade.detect_chapter("notes.ipynb", [(0, "summary(3);")]) == (3, "")
    both = [(0, 'check("ex01.a", a)'), (1, 'check("ex02.b", b)')]
    assert grade.detect_chapter("n.ipynb", both)[0] is None
    assert grade.detect_chapter("n.ipynb", both, expected=2)[0] == 2
    assert grade.detect_chapter("ex01_n.ipynb", both)[0] == 1


def test_is_check_cell():
    assert grade.is_check_cell('check("ex01.decode_bits", decode_bits);')
    assert grade.is_check_cell('r = check("ex01.a", a)\nchecks.check("ex01.b", b)\nsummary(1);')
    assert not grade.is_check_cell('def f(x):\n    return x\ncheck("ex01.f", f)')  # defines f: must run
    assert not grade.is_check_cell("%timeit check()")
    assert not grade.is_check_cell("")
    assert not grade.is_check_cell("print(check)")


def test_read_submission(tmp_path):
    p = tmp_path / "a.ipynb"
    p.write_text(json.dumps({"nbformat": 3, "worksheets": [{"cells": [{"cell_type": "code", "input": "x = 1"}]}]}))
    s = grade.read_submission(p)
    assert s.problem is None and s.cells == [(0, "x = 1")] and len(s.sha256) == 64
    p.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["a = 1\n", "b = 2"]}]}))  # no metadata
    assert grade.read_submission(p).cells == [(0, "a = 1\nb = 2")]
    p.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "# hi"}, {"cell_type": "code", "source": "  \n"}]}))
    assert grade.read_submission(p).problem == "empty"
    for text in ("", "{", "null", '{"cells": 3}', '{"cells": [1]}', '{"cells": [{"cell_type": "code", "source": 5}]}'):
        p.write_text(text)
        s = grade.read_submission(p)
        assert s.problem == "invalid notebook" and s.detail, text
    assert grade.read_submission(tmp_path / "missing.ipynb").problem == "invalid notebook"


def test_csv_cells_cannot_be_formulas():
    assert grade._csv_safe("=HYPERLINK(\"x\")") == "'=HYPERLINK(\"x\")"
    assert grade._csv_safe("-1+2") == "'-1+2" and grade._csv_safe("fine") == "fine" and grade._csv_safe(3) == "3"


def test_seed_is_taken_off_the_command_line():
    assert grade._seed_from_argv(["a", "--seed", "42", "--csv", "x"]) == ("42", ["a", "--csv", "x"])
    assert grade._seed_from_argv(["--seed=7", "b"]) == ("7", ["b"])
    assert grade._seed_from_argv(["b"]) == (None, ["b"])


def test_grader_is_not_dumpable():
    """With a secret seed the grader makes itself non-dumpable (Linux): other processes of the
    same (non-root) user cannot read its memory, environment or open files in /proc."""
    if not sys.platform.startswith("linux"):
        pytest.skip("prctl is Linux only")
    code = ("import ctypes; from nbhelpers.grade import _not_dumpable; libc = ctypes.CDLL(None); "
            "print(libc.prctl(3, 0, 0, 0, 0)); _not_dumpable(); print(libc.prctl(3, 0, 0, 0, 0))")
    out = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "0"]


def test_kernel_runner_in_process(tmp_path):
    """The code that runs in the kernel, run here: per-function time limit, exceptions, missing and
    non-callable functions, huge and hostile return values; then judged like the grader does."""
    plan = grade._plan_chapter(1, seed=3)
    (tmp_path / "in.json").write_text(plan.inputs_json)
    sol = {}
    for c in solution().cells:
        if c.cell_type == "code" and c.source.lstrip().startswith("def "):
            exec(c.source, {"math": math}, sol)

    def loop(x, e, m):
        while True:
            pass

    calls = []

    def todo(bits, e, m):
        calls.append(1)
        raise NotImplementedError("about 9 lines")

    ns = {"decode_bits": todo, "round_nearest_even": loop, "ulp_at": 42}
    job = {"inputs": str(tmp_path / "in.json"), "outputs": str(tmp_path / "out.jsonl"), "budget": 0.5, "only": None}
    t0 = time.monotonic()
    grade._kernel_main(ns, job)
    assert time.monotonic() - t0 < 5 and len(calls) == 1
    out = grade._read_outputs(tmp_path / "out.jsonl", plan)
    res = {p.exercise.id: grade._judge(p, out.get(p.exercise.id), ("NOT RUN", "x")) for p in plan.exercises}
    assert res["ex01.decode_bits"].status == "TODO"
    assert res["ex01.round_nearest_even"].status == "TIMEOUT" and "TimeoutError" in res["ex01.round_nearest_even"].error
    assert res["ex01.ulp_at"].error == "expected a function, got int"
    assert res["ex01.smallest_absorbing"].status == "MISSING"
    assert all(r.points == 0 for r in res.values())

    (tmp_path / "out.jsonl").unlink()
    ns = {k: sol[k] for k in ("decode_bits", "round_nearest_even", "ulp_at", "smallest_absorbing")}
    ns["ulp_at"] = lambda x, e, m: np.zeros(9 * 2**20)  # 72 MB: too large to send
    grade._kernel_main(ns, job)
    out = grade._read_outputs(tmp_path / "out.jsonl", plan)
    res = {p.exercise.id: grade._judge(p, out.get(p.exercise.id), ("NOT RUN", "x")) for p in plan.exercises}
    assert [r.points for r in res.values()] == [4, 6, 0, 2]
    assert "too large" in res["ex01.ulp_at"].mismatches[0]


def test_outputs_written_by_a_hostile_kernel_are_judged_safely(tmp_path):
    plan = grade._plan_chapter(1, seed=0)
    p = plan.exercises[3]  # smallest_absorbing, 15 cases
    good = [{"v": v} for v in (grade._encode(e) for e in p.expected)]
    lines = [
        b"not json at all\n",
        b'{"id": "ex01.smallest_absorbing", "results": [' + b"[" * 5000 + b"\n",  # truncated, deep
        json.dumps([1, 2]).encode() + b"\n",
        json.dumps({"id": "ex99.other", "results": good}).encode() + b"\n",
        json.dumps({"id": "ex01.ulp_at", "results": "lots"}).encode() + b"\n",
        json.dumps({"id": "ex01.round_nearest_even", "results": [{"x": 1}, 5, {"v": {"$nd": 1}}] * 400}).encode() + b"\n",
        json.dumps({"id": "ex01.smallest_absorbing", "results": good + good}).encode() + b"\n",
        json.dumps({"id": "ex01.smallest_absorbing", "results": []}).encode() + b"\n",  # a second line does not count
        b"\xff\xfe garbage",
    ]
    (tmp_path / "out.jsonl").write_bytes(b"".join(lines))
    out = grade._read_outputs(tmp_path / "out.jsonl", plan)
    res = {q.exercise.id: grade._judge(q, out.get(q.exercise.id), ("NOT RUN", "not checked")) for q in plan.exercises}
    assert res["ex01.smallest_absorbing"].passed  # extra results are ignored
    assert res["ex01.ulp_at"].status == "ERROR" and res["ex01.ulp_at"].points == 0
    assert res["ex01.round_nearest_even"].points == 0 and res["ex01.round_nearest_even"].n_failed == len(plan.exercises[1].cases)
    assert res["ex01.decode_bits"].status == "NOT RUN"
    assert grade._read_outputs(tmp_path / "nothing.jsonl", plan) == {}


def test_score_is_what_run_check_uses():
    ex = checks.get_exercise("ex01.ulp_at")
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


def test_usage_errors(tmp_path):
    assert grade.main([str(tmp_path / "nope"), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json")]) == 2
    (tmp_path / "folder").mkdir()
    assert grade.main([str(tmp_path / "folder"), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json")]) == 2
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path), "--csv", "g.csv", "--json", "g.json", "--seed", "-1"])
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path), "--csv", "g.csv", "--json", "g.json", "--se", "5"])  # no abbreviations


# ---- a run with every bad submission, through the command line, with a secret seed ---------------

@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad")
    subs = base / "submissions"
    dump = base / "hunter_dump.txt"
    expect = bad_submissions(subs, dump)
    before = tree_state(subs)
    seed = secrets.randbelow(9 * 10**11) + 10**11  # twelve digits found in no file
    t0 = time.monotonic()
    proc = subprocess.run(
        [*unprivileged(), sys.executable, "-m", "nbhelpers.grade", str(subs), "--csv", str(base / "grades.csv"),
         "--json", str(base / "grades.json"), "--seed", str(seed), "--chapter", "1", "--jobs", "2", *FAST],
        cwd=base, env=env(), capture_output=True, text=True, timeout=600)
    return {"base": base, "subs": subs, "expect": expect, "before": before, "seed": seed, "proc": proc,
            "dump": dump, "seconds": time.monotonic() - t0, "privileged": os.geteuid() == 0 and not unprivileged()}


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
            problems.append(f"{name}: {row['status']} {got_points} ({row['detail']}), want {want['status']} {want['points']}")
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
    assert "ran past the 5 s limit and was interrupted" in d["ex01_loop_top_level.ipynb"]["detail"]
    assert f"stopped after {TOTAL_TIMEOUT} s" in d["ex01_loop_ignores_interrupts.ipynb"]["detail"]
    assert "kernel died in cell" in d["ex01_os_exit.ipynb"]["detail"] and "(import os)" in d["ex01_os_exit.ipynb"]["detail"]
    assert "kernel died in cell" in d["ex01_segfault.ipynb"]["detail"]
    assert "the kernel died while checking ex01.ulp_at" in d["ex01_dies_in_function.ipynb"]["detail"]
    assert "ModuleNotFoundError: No module named 'maths'" in d["ex01_exception_first_cell.ipynb"]["detail"]
    assert "chapter 02 notebook, not chapter 01" in d["ex02_other_chapter.ipynb"]["detail"]
    assert "invalid JSON" in d["ex01_invalid_json.ipynb"]["detail"]
    r = d["ex01_loop_in_function.ipynb"]["checks"]["ex01.round_nearest_even"]
    assert r["points"] == 0 and "TimeoutError: no result within 5 s" in r["error"]
    # per check: passed, first mismatches, error message
    for rec in d.values():
        for c in rec["checks"].values():
            assert {"passed", "mismatches", "error", "points", "max_points", "status"} <= set(c)
    hidden = d["ex01_hard_coded.ipynb"]["checks"]["ex01.round_nearest_even"]
    assert hidden["n_failed"] > 0 and hidden["mismatches"]  # the hidden random cases


def test_bad_run_left_submissions_untouched(bad_run):
    assert tree_state(bad_run["subs"]) == bad_run["before"]


def test_bad_run_fakes_earn_nothing(bad_run):
    d = read_json(bad_run["base"] / "grades.json")
    assert d["ex01_fake_check.ipynb"]["total"] == 0
    assert d["ex01_hard_coded.ipynb"]["total"] == 0  # public answers, hidden cases


def test_secret_seed_cannot_be_found(bad_run):
    seed = str(bad_run["seed"])
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
        workers = {cmd: ok for cmd, ok in info["memory_readable"].items() if "_worker_main" in cmd}
        assert workers and all(workers.values())  # the probe works: the worker (no seed) is readable
    assert seed not in (bad_run["base"] / "grades.json").read_text()
    assert seed not in (bad_run["base"] / "grades.csv").read_text()
    assert json.loads((bad_run["base"] / "grades.json").read_text())["grader"]["seed"] == "secret"


# ---- the students' check cells award the same points as the grader with the public seed ----------

def partial_notebook() -> nbformat.NotebookNode:
    nb = solution()  # decode_bits and ulp_at right; round_nearest_even and smallest_absorbing wrong
    mutate(nb, "round_nearest_even", "round(abs(x) / q)", "math.floor(abs(x) / q + 0.5)")
    mutate(nb, "smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** man_bits")
    return nb


def test_check_cells_and_grader_agree(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    write(partial_notebook(), subs / "ex01_partial.ipynb")
    write(hard_coded_notebook(), subs / "ex01_hard_coded.ipynb")

    nb = partial_notebook()  # what the student sees: run the notebook, check cells included
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    seen = {m[1]: int(m[2]) for m in re.finditer(r"^(?:PASS|FAIL|TODO|ERROR)\s+(ex\d\d\.\w+)\s+(\d+)/\d+ points", text, re.M)}
    total_seen = int(re.search(r"TOTAL: (\d+)/%d points" % FULL, text)[1])

    assert grade.main([str(subs), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"),
                       "--jobs", "2", *FAST]) == 0
    rows = read_csv(tmp_path / "g.csv")
    row = rows["ex01_partial.ipynb"]
    assert seen == {ex: int(row[ex]) for ex in POINTS} == {**POINTS, "ex01.round_nearest_even": 0, "ex01.smallest_absorbing": 0}
    assert total_seen == int(row["total"]) == 7 and row["status"] == "graded"
    d = read_json(tmp_path / "g.json")["ex01_partial.ipynb"]
    in_process = run_check("ex01.round_nearest_even", _mutated("round_nearest_even", "round(abs(x) / q)",
                                                               "math.floor(abs(x) / q + 0.5)"))
    assert d["checks"]["ex01.round_nearest_even"]["mismatches"] == in_process.mismatches  # same words too
    assert d["checks"]["ex01.round_nearest_even"]["n_failed"] == in_process.n_failed
    # with the public seed the copied answers pass: only the secret seed catches them
    assert int(rows["ex01_hard_coded.ipynb"]["total"]) == FULL


def _mutated(name, old, new):
    src = solution().cells[code_index(solution(), f"def {name}(")].source.replace(old, new)
    ns = {"math": math}
    exec(src, ns)
    return ns[name]


# ---- resuming ------------------------------------------------------------------------------------

def test_rerun_skips_interrupted_run_continues_regrade_redoes(tmp_path, capsys):
    subs = tmp_path / "subs"
    subs.mkdir()
    write(solution(), subs / "ex01_a.ipynb")
    (subs / "ex01_b.ipynb").write_bytes(EXERCISE.read_bytes())
    (subs / "ex01_c.ipynb").write_text("{oops")
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    args = [str(subs), "--csv", str(csv_path), "--json", str(json_path), "--jobs", "2", *FAST]

    assert grade.main(args) == 0
    first = read_json(json_path)
    assert set(read_csv(csv_path)) == {"ex01_a.ipynb", "ex01_b.ipynb", "ex01_c.ipynb"}
    capsys.readouterr()

    assert grade.main(args) == 0  # nothing new: nothing graded
    assert "graded 0 submissions" in capsys.readouterr().out
    assert {k: r["graded_at"] for k, r in read_json(json_path).items()} == {k: r["graded_at"] for k, r in first.items()}

    # an interrupted run: the CSV holds one row (and a torn line), the JSON one record
    lines = csv_path.read_text().splitlines(keepends=True)
    header, row_a = lines[0], next(ln for ln in lines if "ex01_a.ipynb" in ln)
    csv_path.write_text(header + row_a + "subs/ex01_b.ipynb,3f2a")
    data = json.loads(json_path.read_text())
    data["submissions"] = [r for r in data["submissions"] if r["file"].endswith("ex01_a.ipynb")]
    json_path.write_text(json.dumps(data))
    time.sleep(1.1)  # graded_at has one-second resolution
    assert grade.main(args) == 0
    out = capsys.readouterr().out
    assert "graded 2 submissions" in out and "1 already graded" in out
    again = read_json(json_path)
    assert set(again) == set(first) and set(read_csv(csv_path)) == set(first)
    assert again["ex01_a.ipynb"]["graded_at"] == first["ex01_a.ipynb"]["graded_at"]
    assert read_csv(csv_path)["ex01_a.ipynb"]["total"] == str(FULL)

    # a changed submission is graded again, the others are not
    nb = solution()
    set_body(nb, "ulp_at", "return 0.0")
    write(nb, subs / "ex01_a.ipynb")
    assert grade.main(args) == 0
    assert "graded 1 submission " in capsys.readouterr().out
    assert read_csv(csv_path)["ex01_a.ipynb"]["total"] == str(FULL - POINTS["ex01.ulp_at"])

    assert grade.main(args + ["--regrade"]) == 0
    assert "graded 3 submissions" in capsys.readouterr().out
    assert len(read_csv(csv_path)) == 3 and len(read_json(json_path)) == 3

    assert grade.main(args + ["--seed", "77"]) == 0  # graded with the public seed: a secret one redoes all
    assert "graded 3 submissions" in capsys.readouterr().out
    assert json.loads(json_path.read_text())["grader"]["seed"] == "secret"


def test_unreadable_output_files_are_kept_aside(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ex01_c.ipynb").write_text("{oops")
    (tmp_path / "g.csv").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "g.json").write_text("{not json")
    assert grade.main([str(subs), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"), *FAST]) == 0
    assert len(list(tmp_path.glob("g.csv.unreadable-*"))) == 1 and len(list(tmp_path.glob("g.json.unreadable-*"))) == 1
    assert read_csv(tmp_path / "g.csv")["ex01_c.ipynb"]["status"] == "invalid notebook"


# ---- a class of 30 -------------------------------------------------------------------------------

MUTATIONS = {
    "decode_bits": ("if E == 0:", "if False:"),
    "round_nearest_even": ("r = math.inf", "r = largest"),
    "ulp_at": ("math.frexp(abs(x))[1] - 1 if", "math.frexp(abs(x) * 0.999)[1] - 1 if"),
    "smallest_absorbing": ("2.0 ** (man_bits + 1)", "2.0 ** man_bits"),
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


def test_a_class_of_30(tmp_path, capsys):
    subs = tmp_path / "class"
    subs.mkdir()
    expect = faulty_class(subs, 30, seed=2024)
    t0 = time.monotonic()
    assert grade.main([str(subs), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"),
                       "--seed", "31337", "--jobs", "2", *FAST]) == 0
    seconds = time.monotonic() - t0
    rows = read_csv(tmp_path / "g.csv")
    assert set(rows) == set(expect)
    wrong = [f"{name}: {r['status']} {r['total']} ({r['detail']})" for name, r in rows.items()
             if ({ex: int(r[ex]) for ex in POINTS}, r["status"]) != expect[name]]
    assert not wrong, "\n".join(wrong)
    per = [r["seconds"] for r in read_json(tmp_path / "g.json").values()]
    report = (f"\n[test_grade] 30 submissions, --jobs 2: {seconds:.1f} s wall, {seconds / 30:.2f} s per submission; "
              f"each submission took {min(per):.1f}-{max(per):.1f} s (mean {sum(per) / len(per):.1f} s)")
    with capsys.disabled():
        print(report)
