"""The tools kernel: in the sandbox, a function whose exercise lists its tools is graded in a
kernel whose file system holds only those tools (with the standard library, numpy and what the
Jupyter kernel runs on), so that what the call watch misses finds nothing there to call."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pytest
from helpers import CELL_TIMEOUT, ROOT, read_csv, read_json

import nbhelpers.grading.judging as judging
from nbhelpers.answer_keys import ch06, ch07
from nbhelpers.answer_keys import exercises_of as real_exercises_of
from nbhelpers.grading import run
from nbhelpers.grading.absent import Absent, AbsentModule
from nbhelpers.grading.definitions import program_cell
from nbhelpers.grading.options import GradeOptions
from nbhelpers.grading.sandbox import Limits, course_package_dir, kernel_command
from nbhelpers.grading.tools_view import tools_view
from nbhelpers.grading.worker import absent_cell

PKG = str(course_package_dir())
SITE = Path(np.__file__).resolve().parents[1]


# ---- what a tools kernel sees ---------------------------------------------------------------------


def test_fp8_choice_sees_no_ml_dtypes_torch_or_course_module():
    view = tools_view(ch06.FP8_CHOICE_TOOLS, PKG)
    hidden = {Path(p).name for p in view.hide}
    assert {"ml_dtypes", "torch", "triton", "torchao", "sympy", "mpmath"} & {p.name for p in SITE.iterdir()} <= hidden
    assert not {"numpy", "ipykernel", "IPython", "zmq", "tornado", "jupyter_client", "traitlets"} & hidden
    assert view.course_files == (str(course_package_dir() / "__init__.py"),)
    assert {"ml_dtypes", "torch", "nbhelpers.rounding", "nbhelpers.answer_keys", "nbhelpers.checks"} <= set(view.stub)


def test_chapter_07_sees_its_course_tools_and_what_they_import():
    view = tools_view(ch07.TOOLS, PKG)
    names = sorted(Path(f).name for f in view.course_files)
    assert names == ["__init__.py", "formats.py", "recipes.py", "rounding.py", "validation.py"]
    assert "ml_dtypes" not in {Path(p).name for p in view.hide}  # one of its tools
    assert {"nbhelpers.scaling", "nbhelpers.scaled_gemm", "nbhelpers.tensor_cores", "torch"} <= set(view.stub)
    assert "nbhelpers.formats" not in view.stub


PROBE = r"""
import json, os, sys
import numpy as np
facts = {}
site = os.path.dirname(os.path.dirname(np.__file__))
facts["ml_dtypes_files"] = sorted(os.listdir(os.path.join(site, "ml_dtypes")))
facts["torch_files"] = sorted(os.listdir(os.path.join(site, "torch")))
pkg = sys.argv[1]
facts["other_site"] = sorted(os.listdir(sys.argv[2])) if len(sys.argv) > 2 else []
facts["course_files"] = sorted(f for f in os.listdir(pkg) if f != "__pycache__")
try:
    np.dtype("float8_e4m3fn")
    facts["fp8_by_name"] = True
except TypeError:
    facts["fp8_by_name"] = False
try:
    open(os.path.join(site, "ml_dtypes", "__init__.py"), "w").write("x = 1")
    facts["wrote"] = True
except OSError:
    facts["wrote"] = False
import ml_dtypes
facts["ml_dtypes_has_fp8"] = hasattr(ml_dtypes, "float8_e4m3fn")
print(json.dumps(facts))
"""


@pytest.mark.sandbox
def test_a_tools_kernel_holds_nothing_but_its_tools(tmp_path):
    """The process itself, with no stand-ins and no watch: what any route to ml_dtypes, torch or
    the course's functions finds there."""
    view = tools_view(ch06.FP8_CHOICE_TOOLS, PKG).as_dict()
    # the base interpreter's packages, under a virtual environment (numpy, scipy, ... may be there)
    base = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"])
    other = [str(base)] if base.is_dir() and base.resolve() != SITE and any(base.iterdir()) else []
    cmd = kernel_command([sys.executable, "-c", PROBE, PKG, *other], tmp_path, Limits(), True, view=view)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads(done.stdout)
    assert facts == {
        "other_site": [],
        "ml_dtypes_files": [],
        "torch_files": [],
        "course_files": ["__init__.py"],
        "fp8_by_name": False,
        "wrote": False,
        "ml_dtypes_has_fp8": False,  # an empty folder: a namespace package with nothing in it
    }
    # the control: the grader's other kernels, and this machine, do hold them
    cmd = kernel_command([sys.executable, "-c", PROBE, PKG, *other], tmp_path, Limits(), True)
    facts = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout)
    assert facts["ml_dtypes_files"] and facts["ml_dtypes_has_fp8"] and "scaling.py" in facts["course_files"]
    assert bool(facts["other_site"]) == bool(other)


# ---- the stand-ins ------------------------------------------------------------------------------


def test_a_stand_in_lets_definitions_run_and_refuses_to_compute():
    e4 = AbsentModule("ml_dtypes").float8_e4m3fn
    assert isinstance(e4, Absent) and isinstance(e4(3.0), Absent) and isinstance(e4.max[0], Absent)
    for use in (float, int, bool, np.asarray, lambda v: v + 1, lambda v: 2 * v, list):
        with pytest.raises(ModuleNotFoundError, match=r"ml_dtypes\.float8_e4m3fn is not installed"):
            use(e4)
    with pytest.raises(AttributeError):
        e4.__file__
    with pytest.raises(ModuleNotFoundError):
        exec("class K(e4):\n    pass", {"e4": e4})


def test_imports_of_hidden_modules_give_stand_ins_in_a_fresh_process():
    code = absent_cell(["ml_dtypes", "nbhelpers.scaling"]) + textwrap.dedent(
        """
        import ml_dtypes, ml_dtypes._finfo as fi
        from nbhelpers.scaling import quantize
        import nbhelpers.formats, numpy
        print(type(ml_dtypes).__name__, type(fi).__name__, repr(quantize))
        print(nbhelpers.formats.__file__.endswith("formats.py"), numpy.__name__)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split("\n")[:2] == [
        "AbsentModule AbsentModule <nbhelpers.scaling.quantize: not installed here>",
        "True numpy",
    ]


def test_a_tools_kernel_runs_each_statement_alone_and_names_a_failed_def():
    src = "E4 = float(undefined)\ndef f(x):\n    return x + 1\nG = 2\ndef g(x=undefined):\n    return x\n"
    ns: dict = {}
    with pytest.raises(NameError, match="undefined"):
        exec(program_cell(0, src, each=True), ns)
    assert ns["f"](1) == 2 and ns["G"] == 2 and "E4" not in ns and "g" not in ns
    assert ns["f"].__code__.co_filename == "<notebook cell 1>" and ns["f"].__code__.co_firstlineno == 2
    ns = {}
    with pytest.raises(NameError):  # the kernel with every module stops at the first error, as a cell does
        exec(program_cell(0, src), ns)
    assert "f" not in ns


# ---- the grader, end to end ----------------------------------------------------------------------

#: fp8_choice counted with ml_dtypes' scalar types, which round a float64 once: the answer without
#: a boundary found. ml_dtypes is not among fp8_choice's tools.
BY_ML_DTYPES = """
def fp8_choice(x, amax):
    x = np.asarray(x, dtype=np.float64).ravel()
    counts = {}
    for fmt, top, kind in (
        ("e4m3fn", 448.0, ml_dtypes.float8_e4m3fn),
        ("e5m2", 57344.0, ml_dtypes.float8_e5m2),
    ):
        scale = float(np.float32(amax / top))
        under = over = 0
        for xi in x:
            r = float(kind(xi / scale))
            under += bool(xi != 0 and r == 0)
            over += bool(not math.isfinite(r))
        counts[fmt] = (under, over)
    lost = {f: u + o for f, (u, o) in counts.items()}
    n = int(np.count_nonzero(x))
    return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts
"""

#: fp8_choice as the solution computes it, reading the formats' limits from top-level names
#: computed with its tools (numpy, math): allowed.
WITH_TOOLS = """
E4_TOP = float(np.float32(1.75) * 2.0**8)
E5_TOP = math.ldexp(1.75, 15)
SUBNORMALS = {"e4m3fn": 2.0**-9, "e5m2": 2.0**-16}
"""

#: The same limits computed with ml_dtypes and the course's formats, which are not its tools:
#: refused, in the check cell and by the grader, which names the value and where it came from.
FROM_OUTSIDE = """
import ml_dtypes
from nbhelpers.formats import get_format
E4_TOP = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)
E5_TOP = get_format("e5m2").max
SUBNORMALS = {"e4m3fn": 2.0**-9, "e5m2": 2.0**-16}
"""


def _ex06_notebook(folder: Path, name: str, cell: str, replace_fp8_choice: bool) -> Path:
    nb = nbformat.read(ROOT / "solutions" / "ex06_scaled_gemm.ipynb", as_version=4)
    i = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code" and "def fp8_choice" in c.source)
    if replace_fp8_choice:
        nb.cells[i].source = cell
    else:
        src = nb.cells[i].source
        src = src.replace("448.0, False", "E4_TOP, False").replace("57344.0, True", "E5_TOP, True")
        src = src.replace("tiny = 2.0 ** (emin - man_bits)", "tiny = SUBNORMALS[fmt]")
        assert src.count("E4_TOP") == 1 and src.count("SUBNORMALS") == 1
        nb.cells[i].source = src
        nb.cells.insert(i, nbformat.v4.new_code_cell(cell))
    nb.cells.insert(1, nbformat.v4.new_code_cell("import ml_dtypes"))
    path = folder / name
    nbformat.write(nb, path)
    return path


def _grade(folder: Path, tag: str) -> dict[str, dict]:
    opts = GradeOptions(cell_timeout=CELL_TIMEOUT, timeout=10 * CELL_TIMEOUT, progress=False)
    run.grade([folder], folder / f"{tag}.csv", folder / f"{tag}.json", opts)
    return read_csv(folder / f"{tag}.csv")


@pytest.mark.sandbox
def test_the_tools_kernel_stops_what_the_watch_lets_through(tmp_path, monkeypatch):
    """The watch is told that fp8_choice has no tools list, so it lets ml_dtypes' rounding
    through, as a route it missed would; the tools kernel, made for fp8_choice's real tools,
    still lacks ml_dtypes, and the answer scores 0 there. Graded in one kernel, as before the
    tools kernel, it gets full points: the test can fail. An answer that reads limits computed
    at the top level with its tools gets full points; one that reads them computed with
    ml_dtypes and the course's formats gets 0 (with its real tools), the detail says why."""
    subs = tmp_path / "subs"
    subs.mkdir()
    _ex06_notebook(subs, "cheat.ipynb", BY_ML_DTYPES, replace_fp8_choice=True)
    _ex06_notebook(subs, "honest.ipynb", WITH_TOOLS, replace_fp8_choice=False)
    real = {e.id: e for e in real_exercises_of(6)}
    assert real["ex06.fp8_choice"].tools == ch06.FP8_CHOICE_TOOLS

    def unwatched(chapter):
        exs = real_exercises_of(chapter)
        return [dataclasses.replace(e, tools=None) for e in exs] if chapter == 6 else exs

    real_groups = judging.kernel_groups

    def groups(plan, ids):  # the kernels made for the exercises' real tools
        exercises = [dataclasses.replace(p, exercise=real.get(p.exercise.id, p.exercise)) for p in plan.exercises]
        return real_groups(dataclasses.replace(plan, exercises=exercises), ids)

    monkeypatch.setattr(judging, "exercises_of", unwatched)
    monkeypatch.setattr(judging, "kernel_groups", groups)
    rows = _grade(subs, "tools")
    assert rows["honest.ipynb"]["total"] == "17", rows["honest.ipynb"]["detail"]
    assert rows["cheat.ipynb"]["ex06.fp8_choice"] == "0" and rows["cheat.ipynb"]["ex06.flushed_per_tensor"] == "4"
    why = read_json(subs / "tools.json")["cheat.ipynb"]["checks"]["ex06.fp8_choice"]["mismatches"][0]
    assert "raised ModuleNotFoundError: ml_dtypes.float8_e4m3fn(...) is not installed" in why

    monkeypatch.setattr(judging, "kernel_groups", lambda plan, ids: None)
    rows = _grade(subs, "one")
    assert rows["cheat.ipynb"]["ex06.fp8_choice"] == "3" and rows["honest.ipynb"]["total"] == "17"


#: The limits as a default argument computed with ml_dtypes: the def fails in the tools kernel,
#: and the grader says why in the check cell's words (the notebook itself ran: status graded).
AS_DEFAULT = """
import ml_dtypes
TOPS = (float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max), 57344.0)
"""


@pytest.mark.sandbox
def test_a_value_made_outside_the_tools_is_refused_by_the_grader(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _ex06_notebook(subs, "outside.ipynb", FROM_OUTSIDE, replace_fp8_choice=False)
    nb = nbformat.read(subs / "outside.ipynb", as_version=4)
    i = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code" and "def fp8_choice" in c.source)
    src = nb.cells[i].source.replace("def fp8_choice(x: np.ndarray, amax: float)", "def fp8_choice(x, amax, tops=TOPS)")
    nb.cells[i].source = src.replace("E4_TOP, False", "tops[0], False").replace("E5_TOP, True", "tops[1], True")
    nb.cells[i - 1].source = AS_DEFAULT
    assert "tops=TOPS" in nb.cells[i].source
    nbformat.write(nb, subs / "default.ipynb")
    rows = _grade(subs, "g")
    row = rows["default.ipynb"]
    assert row["ex06.fp8_choice"] == "0" and row["total"] == "14" and row["status"] == "graded", row
    assert "fp8_choice (its statement reads ml_dtypes, in cell" in row["detail"]
    row = rows["outside.ipynb"]
    assert row["ex06.fp8_choice"] == "0" and row["total"] == "14", row["detail"]
    assert (
        "E4_TOP (from ml_dtypes, in cell" in row["detail"]
        and "E5_TOP (from nbhelpers.formats, in cell" in row["detail"]
    )
