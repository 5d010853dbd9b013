"""The one shared helper module of the tests (imported as ``helpers``: pytest puts tests/ on the path).

- outside oracles: the ml_dtypes / numpy dtype holding each format's values, casts through them;
- :func:`assert_bits`, the bit-exact comparison every "bit for bit" claim of the tests goes
  through: equal values, equal signs (so +0.0 and -0.0 differ), NaN exactly where the reference
  has NaN (any NaN: payload and sign of a NaN are not compared);
- shared data and references: :func:`wide` (values spread over many binades), :func:`loop_sum`
  (a sum in a numpy / ml_dtypes type), :func:`fraction_sum` (the exact sum), :func:`gamma`;
- :func:`results_file_run` (a run as a results file of benchmarks/gpu_gemm_numerics.py holds it)
  and :func:`measured_gpu_run` (the same around a real, tiny :func:`measure_gemm_errors`);
- figures: :func:`inline_png_size` (a figure's size as a notebook saves it),
  :func:`legend_under_axes` and :func:`legend_covers_no_line`;
- :class:`SolutionNotebook`, which the exercise tests (test_exercises*.py) use to run and
  mutate the functions of a solution notebook;
- for the grader's tests (test_grading_*.py): submissions built from
  solutions/ex01_float_formats.ipynb (``EX01_SOLUTION``), short time limits (``FAST``: a cell
  limit calibrated at the start of the run, at least 6 s, and five times that for a submission,
  so that infinite loops cost little and honest cells never hit them), and readers of the grader's
  CSV and JSON files.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import linecache
import math
import os
import textwrap
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import nbformat
import numpy as np
import pytest
import torch
from packaging.version import Version

from nbhelpers.checks import cases_for, exercises_of
from nbhelpers.formats import FORMATS, FloatFormat

ROOT = Path(__file__).resolve().parents[1]


# ====================================================================== outside oracles


def np_dtype(f: FloatFormat):
    """numpy dtype with the same values as ``f`` (ml_dtypes or numpy), or None."""
    if f.ml_dtype is None:
        return None
    if hasattr(np, f.ml_dtype) and f.ml_dtype in ("float16", "float32"):
        return np.dtype(getattr(np, f.ml_dtype))
    return np.dtype(getattr(ml_dtypes, f.ml_dtype))


ORACLE_FORMATS = [name for name, f in FORMATS.items() if f.ml_dtype is not None]
SMALL_FORMATS = [name for name, f in FORMATS.items() if f.bits <= 8]

# custom IEEE-style formats that ml_dtypes also implements: a second oracle for the generic path
CUSTOM_ORACLES = {"e4m3": "float8_e4m3", "e3m4": "float8_e3m4"}

# The installed ml_dtypes. Two of its conversions changed in 0.7.0 (checked with 0.5.0, 0.6.0 and
# 0.7.0): up to 0.6 it converted float64 through float32, rounding twice, and rounded float32
# subnormals up to 2**-126 when converting to e8m0; 0.7.0 rounds both once, to nearest. The
# tests that compare with those conversions say which versions they hold for.
ML_DTYPES_VERSION = Version(ml_dtypes.__version__)
ML_DTYPES_ROUNDS_ONCE = ML_DTYPES_VERSION >= Version("0.7")


def cast_values(x32: np.ndarray, dtype) -> np.ndarray:
    """Round float32 values by casting through ``dtype``; returned as float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        return x32.astype(dtype).astype(np.float64)


# ====================================================================== bit-exact comparison


def bit_mismatches(ours, ref) -> np.ndarray:
    """Boolean mask (ref's shape) of the positions where ``ours`` and ``ref`` are not the same
    float: a different value, a different sign (+0.0 vs -0.0 included), or NaN on one side
    only. Two NaNs are the same whatever their payloads and signs. Values of any real dtype
    (ml_dtypes included) are compared as float64, which holds each of them exactly."""
    o, r = np.asarray(ours), np.asarray(ref)
    if o.shape != r.shape:
        raise AssertionError(f"shapes differ: ours {o.shape} vs ref {r.shape}")
    o, r = o.astype(np.float64), r.astype(np.float64)
    nan_o, nan_r = np.isnan(o), np.isnan(r)
    with np.errstate(invalid="ignore"):
        same_number = (o == r) & (np.signbit(o) == np.signbit(r))
    return ~np.where(nan_o | nan_r, nan_o & nan_r, same_number)


def assert_bits(ours, ref, x=None) -> None:
    """Assert that ``ours`` and ``ref`` hold the same floats, bit for bit up to NaN payloads:
    same shape, same value and sign at every position (+0.0 is not -0.0), NaN exactly where
    ``ref`` has NaN. ``x``: the inputs, named in the message at the first mismatches."""
    bad = bit_mismatches(ours, ref)
    if bad.any():
        i = np.flatnonzero(bad.ravel())[:5]
        o = np.asarray(ours, dtype=np.float64).ravel()[i]
        r = np.asarray(ref, dtype=np.float64).ravel()[i]
        where = f" at x={np.asarray(x).ravel()[i]}" if x is not None else ""
        raise AssertionError(f"{bad.sum()} of {bad.size} differ{where} (flat index {i}): ours {o} vs ref {r}")


# ====================================================================== data and exact references


def wide(shape, seed, spread=30) -> np.ndarray:
    """Random values of both signs spread over 2*spread binades, so that float64 sums of two of
    them are often inexact (the round-to-odd path of the adder is exercised)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape))


def loop_sum(x, dtype) -> float:
    """The outside oracle of a sequential sum: s = dtype(0); s = dtype(s + v) for v in x."""
    s = dtype(0)
    for v in x:
        s = dtype(s + v)
    return float(s)


def fraction_sum(x) -> Fraction:
    """The exact sum of the float values of ``x``, as a Fraction."""
    return sum((Fraction(float(v)) for v in x), Fraction(0))


def gamma(k, u):
    """Higham's gamma_k = k u / (1 - k u)."""
    return k * u / (1 - k * u)


# ====================================================================== results files


def results_file_run(date: str, series: list[dict], gpu: str = "Test GPU") -> dict:
    """A run as a results file of benchmarks/gpu_gemm_numerics.py holds it: meta and series."""
    meta = {"gpu": gpu, "date": date, "script": "benchmarks/gpu_gemm_numerics.py", "M": 16, "N": 16, "seed": 0}
    return {"meta": meta, "series": series}


def gpu_measurements():
    """The module :mod:`nbhelpers.gpu_measurements`, imported after ``setup_device()`` as a
    notebook's setup cell does (so that the kernels run in Triton's interpreter on a CPU)."""
    from nbhelpers.device import setup_device

    setup_device(verbose=False)
    import nbhelpers.gpu_measurements

    return nbhelpers.gpu_measurements


def measured_gpu_run(date: str, gpu: str = "Test GPU") -> dict:
    """:func:`results_file_run` around a real, tiny (K = 32, 16 x 16) ``measure_gemm_errors`` run
    on this machine's device (the GPU, or the interpreter on a CPU)."""
    series = gpu_measurements().measure_gemm_errors([32], M=16, N=16, models=False)  # the kernels' device
    return results_file_run(date, series, gpu)


# ====================================================================== solution notebooks


class SolutionNotebook:
    """The code cells of ``solutions/<filename>`` that define functions.

    A test takes the function definitions from a solution notebook, runs them in a fresh
    namespace, and mutates their source to make deliberately wrong implementations.
    """

    def __init__(self, filename: str, namespace: Callable[[], dict]):
        self.path = ROOT / "solutions" / filename
        self.namespace = namespace  # a fresh dict of the names the solutions use (math, np, ...)

    def _cells(self) -> list[str]:
        nb = nbformat.read(self.path, as_version=4)
        return [c.source for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith("def ")]

    def _run(self, src: str, ns: dict, label: str) -> None:
        """Run one cell's source in ``ns`` under a file name of its own that ``linecache`` knows,
        as IPython does, so that ``inspect.getsource`` finds what it defines (Triton's kernels,
        and the checks that read a kernel's source)."""
        filename = f"<{self.path.name}:{label}:{hashlib.sha256(src.encode()).hexdigest()[:12]}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
        exec(compile(src, filename, "exec"), ns)

    def functions(self) -> dict:
        """Every function the solution defines, executed in a fresh namespace."""
        ns = self.namespace()
        for i, src in enumerate(self._cells()):
            self._run(src, ns, f"cell{i}")
        return ns

    def mutated(self, name: str, old: str, new: str) -> Callable:
        """The solution's ``name`` with ``old`` replaced by ``new`` in its source, defined as the
        notebook defines it: every function cell runs first (the helpers a function calls, such as
        a launcher's ``padded``, live in other cells), then the mutated cell on top of them. With
        ``old == new`` it is the unchanged solution through the same harness: the control every
        wrong answer is measured against."""
        src = next(s for s in self._cells() if f"def {name}(" in s)
        assert old in src, f"mutation target {old!r} not found in {name}"
        ns = self.functions()
        self._run(src.replace(old, new), ns, f"{name}-mutated")
        return ns[name]


# ====================================================================== benchmark scripts


def load_benchmark(name: str):
    """benchmarks/<name>.py imported as a module (the GPU scripts import no torch at the top level,
    so their CPU-side parts can be tested here); import it after setup_device()."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ====================================================================== figures


def inline_png_size(fig) -> tuple[int, int]:
    """(width, height) in pixels of ``fig`` saved as a notebook's inline backend saves it: a PNG at
    the figure's dpi, ``bbox_inches="tight"``."""
    import struct

    from IPython.core.pylabtools import print_figure

    png = print_figure(fig, "png", bbox_inches="tight")
    return struct.unpack(">II", png[16:24])


def legend_covers_no_line(ax) -> bool:
    """Whether the legend of ``ax`` (inside the Axes) leaves every line of the Axes uncovered, as
    the figure is drawn: no line passes through the legend's box."""
    ax.figure.canvas.draw()
    box = ax.get_legend().get_window_extent()
    return not any(
        line.get_transform().transform_path(line.get_path()).intersects_bbox(box, filled=False)
        for line in ax.get_lines()
    )


def legend_under_axes(ax) -> bool:
    """Whether the legend of ``ax`` lies under the Axes, its tick labels and its x label (off the
    data), as the figure is drawn."""
    ax.figure.canvas.draw()
    return ax.get_legend().get_window_extent().y1 <= ax.xaxis.get_tightbbox().y0 + 0.5


# ====================================================================== torch


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Import into a test module to run its torch code on one thread (the models are tiny: one
    thread is faster, and CI machines are shared); the thread count is restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ====================================================================== the grader's tests

EX01_SOLUTION = ROOT / "solutions" / "ex01_float_formats.ipynb"
EX01_EXERCISE = ROOT / "exercises" / "ex01_float_formats.ipynb"


def calibrated_cell_timeout(factor: float = 6.0, floor: int = 6) -> int:
    """A cell time limit for the grader's tests, from this machine's speed at the start of the run.

    The limits are short so that a submission that loops forever costs little; but an honest cell
    must never hit them, and on a machine shared with another job every cell takes longer. So
    the limit is measured, not fixed: the wall time a fresh Python takes to import what a chapter
    01 submission imports (numpy, nbformat, the checks and the chapter's references), times
    ``factor``, at least ``floor`` seconds. Idle, that import takes about 0.5 s here, and the
    slowest honest cell of a test submission about as long; under load both grow together.

    The import leaves out jsonschema's optional IRI checker, as the grader's worker does
    (``nbhelpers.grading.worker``): with rfc3987-syntax installed, nbformat's import builds its
    parsers (2.5 s here, five times the rest), which no kernel of a submission does, and the
    limits came out three times as long as this calibration means them to be."""
    import subprocess
    import sys
    import time

    t0 = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['rfc3987_syntax'] = None; "
            "import numpy, nbformat, nbhelpers.checks, nbhelpers.answer_keys.ch01",
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return max(floor, math.ceil(factor * (time.monotonic() - t0)))


CELL_TIMEOUT = calibrated_cell_timeout()
TOTAL_TIMEOUT = 5 * CELL_TIMEOUT
FAST = ["--cell-timeout", str(CELL_TIMEOUT), "--timeout", str(TOTAL_TIMEOUT)]
POINTS = {ex.id: ex.points for ex in exercises_of(1)}
FULL = sum(POINTS.values())


# ---- building submissions ----------------------------------------------------------------------


def solution() -> nbformat.NotebookNode:
    return nbformat.read(EX01_SOLUTION, as_version=4)


def code_index(nb, needle: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and needle in c.source)


def set_body(nb, name: str, body: str) -> None:
    """Replace the body of the function ``name`` (its cell keeps only the def, whose signature may
    run over several lines)."""
    i = code_index(nb, f"def {name}(")
    lines = nb.cells[i].source.splitlines()
    fn = next(n for n in ast.parse(nb.cells[i].source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    head = lines[fn.lineno - 1 : fn.body[0].lineno - 1]
    while head[-1].strip().startswith("#") or not head[-1].strip():  # the solution's markers, blank lines
        head.pop()
    nb.cells[i].source = "\n".join(head) + "\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


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
        if ex.name == "round_stochastic":  # the check shows two neighbours, not a value to copy
            lines.append(f"def {ex.name}(x, *args):\n    return x")
            continue
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


# ---- looking at the results ---------------------------------------------------------------------


def tree_state(folder: Path) -> dict:
    return {
        str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def read_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    files = [r["file"] for r in rows]
    assert len(files) == len(set(files)), "one row per submission"
    return {Path(r["file"]).name: r for r in rows}


def read_json(path: Path) -> dict[str, dict]:
    return {Path(r["file"]).name: r for r in json.loads(path.read_text())["submissions"]}


def env() -> dict:
    """Our environment, with this repository's nbhelpers first on the path (for subprocesses)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e
