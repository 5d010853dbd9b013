"""The one prepared GPU run: kernels compiled in parallel, every GPU benchmark, the kernel tests, nbval; one summary.

    make gpu-report                                   # uses .venv's Python if there is one, else python3
    make --dry-run gpu-report                         # the plan with each step's expected time, nothing run
    python benchmarks/gpu_report.py [--python PY] [--steps compile,benchmarks,kernels,nbval]
                                    [--budget 470] [--nbval-paths notebooks solutions exercises]
                                    [--out DIR] [--results-dir DIR] [--dry-run] [--rehearse]

Runs with whatever PyTorch and Triton the interpreter ``--python`` (default: the one running this
script) already has; it installs nothing and needs no virtual environment: the repository root is
put on ``PYTHONPATH`` so that ``nbhelpers`` imports from this checkout. Every step runs with
``NBHELPERS_DEVICE=cuda`` and ``NBHELPERS_REQUIRE_GPU=1`` and without ``TRITON_INTERPRET``, so a
kernel that silently fell back to the interpreter, or a notebook that fell back to the CPU, fails.

The run is sized for a short GPU session: from a cold Triton cache its plan fits one call of 8
minutes (480 s, the probe included) on an H200 host with 16 cores. The steps, in this order by
default:

1. ``compile``: ``python -m nbhelpers.tooling.compile_cases --warm`` compiles every kernel config of the
   course for this GPU's compute capability, one process per core. It fills Triton's cache
   (the same kernels under the same keys a launch looks up), so the autotuners of the next steps
   find their configs compiled instead of compiling them one after another, and it writes
   ``benchmarks/results/compile_check_<gpu>.json`` (registers, spills, shared memory, as
   ``make gpu-compile`` records them on a CPU, now with this machine's Triton);
2. ``benchmarks``: each ``benchmarks/gpu_*.py`` script (found by name, this one excepted), one after
   the other, each with its own limit (and ``--time-limit`` where the script takes one: no case
   starts after it; both from the kernel family's manifest in ``nbhelpers/families/``), each
   writing its results file ``benchmarks/results/<name>_<gpu>.json`` after every row;
3. ``kernels``: pytest over ``tests/test_kernels_*.py`` (the Triton kernels, compiled), over
   pytest-xdist workers when pytest-xdist is installed;
4. ``nbval``: pytest with nbval, as ``make test`` runs it, over the chapters with a GPU path (those
   a kernel family's manifest names) and their solutions (``--nbval-paths`` gives others). The
   other chapters and the exercise notebooks print the same on any machine.

Steps 3 and 4, when they follow each other, run side by side: nbval gets a quarter of the cores
(at most :data:`NBVAL_WORKERS` pytest-xdist workers), the kernel tests the rest; their lines in the
log start with the step's name.

Before a step runs, the modules it needs are checked: pytest, and every plugin the pytest
configuration in pyproject.toml names an option of (pytest-timeout's ``timeout``: without the
plugin pytest stops at start-up), and for nbval the Jupyter kernel stack. A step that lacks one is
``missing``, with the ``pip install`` that adds it, and the report goes on. The benchmarks come
before the tests and nbval because their results files are what a GPU run is for; nbval is the
longest and least predictable step, so it is the one the budget cuts. ``--steps`` gives another
order or a subset. ``--dry-run`` prints each step's expected time and what it rests on: the
compile step's from the cold compile times `make gpu-compile --cold` measured on a CPU, the
benchmarks' from their time limits and the H100 run, the kernel tests' from the recorded mean
compile time, nbval's from the notebooks' recorded CPU times: estimates until a GPU run has timed
them. Their sum, the probe included, is at most :data:`PLAN_MAX_S` (480 s).

Each step has a time limit, and all of them together at most ``--budget`` seconds (default 470);
a step that runs past its own limit is stopped and marked ``timeout`` (a failure), one the budget
stops before its own limit is ``cut`` (the run is then incomplete, not failed), and a step with no
time left is marked ``skipped``. After each step the summary
``benchmarks/results/gpu_report_<gpu>.json`` is written again (so a run that is cut short still
leaves one): GPU name, driver, CUDA, compute capability, SM count and L2 size, Python/torch/Triton/numpy versions, the
UTC date, the command, and per step its command, status, exit code, duration, the results files
it wrote and the end of its output. Everything each step printed goes to
``benchmarks/results/gpu_report_<gpu>.log``. When the environment variable ``OUT`` is set (or
``--out DIR`` is given), the summary and the log are also copied there, and one archive,
``gpu_report_<gpu>.tar.gz``, holds them with every results file written, by their paths under the
repository (``tar -xzf`` at its root puts them in place): three files, however many steps wrote
results, for collectors that bring back only a few.

Without a GPU (PyTorch sees none through ``--python``) it prints the plan (the steps, the test
files, the scripts, the notebook folders) as the H200 host would run it and stops with exit code 2
before running anything.
``--dry-run`` prints the plan and the environment and stops there on any machine (exit code 0).
``--rehearse`` runs the report on a CPU with no GPU: :func:`rehearsal_plan` keeps the plan's steps,
order, groups and limits and gives each a small real task; the summary, log and archive go to a
folder of its own (``--results-dir``), and :func:`check_rehearsal` then checks what ``$OUT`` holds
(at most 8 files, one readable archive with the summary). ``make test`` runs it.
Exit code otherwise: 0 when every step that ran passed (a step missing, cut or skipped does not
count as a failure, but it is printed and recorded), 1 when any step failed or timed out.

Standard library only at the top level: this file runs under any Python 3.10+; torch is imported
only in a probe run with ``--python``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/gpu_report.py"
RESULTS_REL = Path("benchmarks") / "results"
STEP_NAMES = ("compile", "benchmarks", "kernels", "nbval")
NBVAL_FOLDERS = ("notebooks", "solutions", "exercises")
# what `make test` gives nbval (Makefile, NBVAL_ARGS)
NBVAL_ARGS = [
    "--nbval-lax",
    "--nbval-current-env",
    "--nbval-cell-timeout=600",
    "--nbval-sanitize-with",
    "tests/nbval_sanitize.cfg",
]
NBVAL_MODULES = ("nbval", "ipykernel", "jupyter_client", "nbformat", "nbclient")
#: seconds for all steps together; with the probe the plan must fit one call of 8 minutes
DEFAULT_BUDGET_S = 470.0
PLAN_MAX_S = 480.0
#: compiles the kernel tests make that the compile step does not: an estimate from reading the
#: tests (their shapes, alignments, ``== 1`` specializations, fixed blocks, BLOCK_E values and the
#: autotuned odd shapes), until a GPU run has counted them
KERNEL_TEST_COMPILES = 500
#: the GPU machine this run is sized for: an H200 host with 16 cores (the plan's defaults when
#: no GPU is visible, as in --dry-run on a CPU)
DEFAULT_JOBS = 16
DEFAULT_CAPABILITY = "9.0"
#: before the first step: the probe (Python imports torch, CUDA starts) and writing the summary
PROBE_S = 10.0
STEP_LIMIT_S = {"compile": 45.0, "kernels": 150.0, "benchmark": 60.0, "nbval": 240.0}
#: pytest-xdist workers nbval gets when it runs beside the kernel tests (they get the other cores)
NBVAL_WORKERS = 4
#: Seconds each notebook with a GPU path took under nbval on a CPU (Triton's interpreter), one
#: process, measured by ``pytest --durations=0`` (the cells' times summed) on a 2-core x86-64
#: machine shared with other work, 2026-12-06: the basis of the nbval step's estimate (on a GPU the
#: interpreted kernels compile and run instead; nothing has timed them there yet).
NBVAL_CPU_S: dict[str, float] = {
    "notebooks/03_fp32_accumulated_gemm.ipynb": 45,
    "solutions/ex03_gemm.ipynb": 3,
    "notebooks/08_gpu_memory_coalescing.ipynb": 15,
    "solutions/ex08_gpu_memory.ipynb": 4,
    "notebooks/09_gemm_kernels_triton.ipynb": 39,
    "solutions/ex09_gemm_kernels.ipynb": 32,
    "notebooks/10_grouped_gemm_moe.ipynb": 47,
    "solutions/ex10_grouped_gemm.ipynb": 94,
    "notebooks/11_topk_vocabulary.ipynb": 132,
    "solutions/ex11_topk.ipynb": 14,
    "notebooks/12_quantized_inference.ipynb": 22,
    # nbval of this notebook alone, wall time on the same machine, 2026-12-07
    "solutions/ex12_quantized_inference.ipynb": 17,
}


def _families() -> list:
    """Every kernel family's manifest (nbhelpers/families/), read from this checkout: what the
    families say about their benchmarks and kernel tests (standard library only, no torch)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from nbhelpers.families import families

    return families()


def benchmark_plan() -> dict[str, dict]:
    """Per benchmark script (by name), as its kernel family's manifest declares it: the step's
    limit, the --time-limit passed to the script (no case starts after it; None: the script takes
    none), and the expected seconds with what they rest on."""
    return {b.script: b.plan() for f in _families() for b in f.benchmarks}


#: the benchmark plan when this module was loaded (:func:`benchmark_plan` reads it again)
BENCHMARK_PLAN = benchmark_plan()
#: pytest ini options of pyproject.toml that need a plugin: without it pytest stops at start-up
#: (an unknown option is a warning, and the config makes warnings errors)
INI_PLUGINS = {"timeout": "pytest_timeout", "timeout_method": "pytest_timeout", "xdist": "xdist"}
#: what the plan assumes when no GPU is visible (--dry-run on a CPU): the course's first GPU machine
REFERENCE_MACHINE = {
    "description": "an H200 host with 16 cores, Python 3.12, torch 2.11, Triton 3.6, pytest with "
    "pytest-timeout and pytest-xdist, and the Jupyter stack and nbval installed from wheels carried "
    "with the checkout (docs/gpu.md gives the command)",
    "cpu_count": DEFAULT_JOBS,
    "capability": DEFAULT_CAPABILITY,
    "gpu": None,
    "modules": {
        "torch": True,
        "triton": True,
        "numpy": True,
        "pytest": True,
        "pytest_timeout": True,
        "xdist": True,
        **{m: True for m in NBVAL_MODULES},
    },
}
TAIL_LINES = 30
#: How the report's steps run pytest: quiet, no cache written into the repository, and without
#: pytest-benchmark, which (where a machine has it) warns that xdist disables it, a warning the
#: course's pytest settings make an error.
PYTEST = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark")
OUT_MAX_FILES = 8  # what some GPU machines' collectors bring back from $OUT
#: the kernel tests record each kernel they compile, and its seconds (nbhelpers.tooling.compile_record)
RECORD_PLUGIN = ("-p", "nbhelpers.tooling.compile_record")
COMPILE_RECORD_ENV = "NBHELPERS_COMPILE_RECORD"

# Run under --python: versions (without importing where metadata suffices), which modules are
# importable, and what PyTorch sees. Prints one JSON object.
PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, platform, sys
import os
out = {"python": platform.python_version(), "executable": sys.executable, "versions": {}, "modules": {},
       "cpu_count": os.cpu_count()}
for dist in ("torch", "triton", "pytorch-triton", "numpy", "ml_dtypes", "pytest", "nbval", "ipykernel"):
    try:
        out["versions"][dist] = md.version(dist)
    except Exception:
        pass
for mod in ("torch", "triton", "numpy", "ml_dtypes", "matplotlib", "pytest", "pytest_timeout", "xdist",
            "nbval", "ipykernel", "jupyter_client", "nbformat", "nbclient"):
    out["modules"][mod] = iu.find_spec(mod) is not None
out["cuda_available"] = False
try:
    import torch
    out["versions"]["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["cuda_available"] = bool(torch.cuda.is_available())
    if out["cuda_available"]:
        out["gpu"] = torch.cuda.get_device_name(0)
        out["gpu_count"] = torch.cuda.device_count()
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        out["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
        out["l2_cache_bytes"] = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None)
except Exception as e:
    out["torch_error"] = repr(e)
if "triton" not in out["versions"]:
    try:
        import triton
        out["versions"]["triton"] = triton.__version__
    except Exception:
        pass
print(json.dumps(out))
"""


# ====================================================================== the plan


@dataclass
class Step:
    """One thing the report runs: ``kind`` is "compile", "benchmark", "kernels" or "nbval".
    ``expected_s``: how long it should take on the GPU machine, with ``basis`` saying what that
    rests on; ``needs``: the modules it cannot start without (checked before it runs); ``group``:
    steps next to each other with the same group run side by side (the kernel tests and nbval)."""

    name: str
    kind: str
    argv: list[str]
    limit_s: float
    expected_s: float | None = None
    basis: str = ""
    needs: tuple = ()
    group: str = ""
    env: dict = field(default_factory=dict)


class Status(StrEnum):
    """What a step did, and the run as a whole (the summary's ``status``): the one vocabulary of
    this script. A StrEnum: the summary's JSON holds the plain word, and a reader may compare with it."""

    PASSED = "passed"
    FAILED = "failed"
    TIMEOUT = "timeout"  # stopped at its own time limit: a failure
    CUT = "cut"  # stopped when the run's budget ran out, before its own limit: not a failure
    SKIPPED = "skipped"  # no time left in the budget
    MISSING = "missing"  # a module it needs is not installed
    INCOMPLETE = "incomplete"  # the run: nothing failed, but a step was skipped or missing
    RUNNING = "running"  # the run: the summary written after a step, before the last


@dataclass
class StepResult:
    """What one step did. ``status``: a :class:`Status` (passed, failed, timeout, skipped, missing)."""

    name: str
    kind: str
    command: str
    status: str
    exit_code: int | None = None
    started: str | None = None
    duration_s: float = 0.0
    results_files: list[str] = field(default_factory=list)
    note: str = ""
    output_tail: list[str] = field(default_factory=list)


def discover_benchmarks(root: Path = ROOT) -> list[Path]:
    """Every ``benchmarks/gpu_*.py`` script but this one, sorted by name."""
    return [p for p in sorted((root / "benchmarks").glob("gpu_*.py")) if p.name != Path(SCRIPT).name]


def kernel_test_files(root: Path = ROOT) -> list[Path]:
    """``tests/test_kernels_*.py`` and every test file a kernel family's manifest names, those that exist."""
    named = {root / t for f in _families() for t in f.tests}
    return sorted(set((root / "tests").glob("test_kernels_*.py")) | {p for p in named if p.is_file()})


def nbval_paths(root: Path = ROOT, folders=NBVAL_FOLDERS) -> list[str]:
    """The notebook folders (or files) that exist, relative to the root."""
    return [f for f in folders if (root / f).exists()]


def gpu_chapters() -> list[str]:
    """The chapters with a GPU path ("03", "08", ...): those a kernel family's manifest names."""
    return sorted({c for f in _families() for c in f.chapters})


def gpu_notebooks(root: Path = ROOT) -> list[str]:
    """The notebooks whose GPU path the nbval step runs: each chapter with a GPU path and its
    solution notebook, relative to the root. The other chapters and the exercise notebooks print
    the same on any machine, and ``make test`` runs them all on a CPU."""
    out = []
    for c in gpu_chapters():
        out += sorted(str(p.relative_to(root)) for p in (root / "notebooks").glob(f"{c}_*.ipynb"))
        out += sorted(str(p.relative_to(root)) for p in (root / "solutions").glob(f"ex{c}_*.ipynb"))
    return out


def expected_nbval_s(paths: list[str], workers: int) -> tuple[float | None, str]:
    """The nbval step's estimate: the notebooks' CPU times (:data:`NBVAL_CPU_S`) spread over
    ``workers`` processes (the longest notebook at least), plus start-up; None when a notebook
    has no recorded time."""
    known = [NBVAL_CPU_S.get(p) for p in paths]
    if not paths or any(t is None for t in known):
        return None, "no CPU time recorded for " + ", ".join(p for p, t in zip(paths, known) if t is None)
    total, longest, start = sum(known), max(known), 15.0
    est = round(max(total / max(workers, 1), longest) + start, 1)
    return est, (
        f"estimate (not yet timed on a GPU): {len(paths)} notebooks that took {total:.0f} s under nbval on "
        f"a 2-core CPU (the longest {longest:.0f} s), over {workers} workers, + {start:.0f} s start-up"
    )


def pytest_plugins_needed(root: Path = ROOT) -> list[str]:
    """The plugin modules the pytest configuration in pyproject.toml needs (ini options that only
    a plugin knows), read without tomllib (this file runs under Python 3.10 too)."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return []
    text = path.read_text()
    m = re.search(r"^\[tool\.pytest\.ini_options\]\s*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    keys = re.findall(r"^([A-Za-z_][\w-]*)\s*=", m.group(1), re.MULTILINE) if m else []
    return sorted({INI_PLUGINS[k] for k in keys if k in INI_PLUGINS})


def expected_compile_s(jobs: int, root: Path = ROOT) -> tuple[float | None, str]:
    """Seconds the compile step should take with ``jobs`` processes, from the cold compile times
    `make gpu-compile --cold` recorded on a CPU (benchmarks/results/compile_check.json), with
    what the estimate rests on."""
    path = root / RESULTS_REL / "compile_check.json"
    try:
        data = json.loads(path.read_text())
        rows = [r for r in data["rows"] if r.get("target") == "sm_90"]
        total = sum(float(r["compile_s"]) for r in rows)
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"no compile times recorded ({path.relative_to(root)} missing or unreadable)"
    start = 10.0  # each worker imports torch and Triton
    meta = data.get("meta", {})
    return (
        round(total / max(jobs, 1) + start, 1),
        f"{len(rows)} sm_90 compiles of {total:.0f} s in all (cold cache, measured with Triton "
        f"{meta.get('triton')} on {meta.get('machine')}, {meta.get('date', '')[:10]}) / {jobs} processes "
        f"+ {start:.0f} s start-up",
    )


def expected_kernel_tests_s(workers: int, root: Path = ROOT) -> tuple[float, str]:
    """The kernel tests' estimate: the compiles they make that the compile step did not (their
    own shapes, alignments, ``== 1`` specializations, fixed blocks and autotuned odd shapes), over
    ``workers`` processes, plus the tests' run. The compiles and their seconds come from the
    record a GPU run wrote (``kernel_test_compiles_<gpu>.jsonl``, the latest) when there is one;
    else about :data:`KERNEL_TEST_COMPILES`, an estimate from reading the tests, at the mean cold
    compile time the compile check recorded."""
    run = 30.0
    records = sorted((root / RESULTS_REL).glob("kernel_test_compiles_*.jsonl"), key=lambda p: p.stat().st_mtime)
    if records:
        from nbhelpers.tooling.compile_record import summarize

        got = summarize(records[-1])
        if got["compiles"]:
            return round(got["seconds"] / max(workers, 1) + run, 1), (
                f"measured: {got['compiles']} compiles of {got['seconds']:.0f} s in all in the run that wrote "
                f"{records[-1].name}, over {workers} pytest-xdist workers, + {run:.0f} s of tests"
            )
    path = root / RESULTS_REL / "compile_check.json"
    try:
        rows = [r for r in json.loads(path.read_text())["rows"] if r.get("target") == "sm_90"]
        mean = sum(float(r["compile_s"]) for r in rows) / len(rows)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        mean = 1.5
    est = round(KERNEL_TEST_COMPILES * mean / max(workers, 1) + run, 1)
    return est, (
        f"estimate (not yet timed on a GPU): about {KERNEL_TEST_COMPILES} compiles the compile step "
        f"does not make, at the recorded mean of {mean:.2f} s each, over {workers} pytest-xdist "
        f"workers, + {run:.0f} s of tests"
    )


def plan_steps(
    python: str,
    steps=STEP_NAMES,
    root: Path = ROOT,
    folders=None,
    jobs: int = DEFAULT_JOBS,
    capability: str = DEFAULT_CAPABILITY,
    gpu: str | None = None,
    modules: dict | None = None,
) -> list[Step]:
    """The steps to run, in the order of ``steps``; argv relative to the repository root.
    ``jobs``: the host's cores (parallel compiles, pytest-xdist workers); ``capability`` and
    ``gpu``: the GPU's (what the compile step compiles for, and its results file's name);
    ``modules``: which modules the interpreter has (``-n`` for xdist only when it is there);
    ``folders``: the nbval step's notebooks or folders (None: :func:`gpu_notebooks`). The kernel
    tests and nbval, when they follow each other, run side by side and share the cores."""
    modules = modules if modules is not None else {}
    plugins = tuple(pytest_plugins_needed(root))
    steps = list(steps)
    xdist = bool(modules.get("xdist"))
    side_by_side = any(
        a == "kernels" and b == "nbval" or a == "nbval" and b == "kernels" for a, b in zip(steps, steps[1:])
    )
    nb_workers = min(NBVAL_WORKERS, max(jobs // 4, 1)) if side_by_side and xdist else 1
    kernel_workers = max(jobs - nb_workers, 1) if side_by_side else jobs
    group = "tests" if side_by_side else ""
    plan = []
    for name in steps:
        if name == "compile":
            target = "sm_" + str(capability).replace(".", "")
            out = str(RESULTS_REL / f"compile_check_{gpu_slug(gpu) if gpu else '<gpu>'}.json")
            expected, basis = expected_compile_s(jobs, root)
            plan.append(
                Step(
                    "compile",
                    "compile",
                    [
                        python,
                        "-m",
                        "nbhelpers.tooling.compile_cases",
                        "--target",
                        target,
                        "--jobs",
                        str(jobs),
                        "--warm",
                        *(["--gpu", gpu] if gpu else []),
                        "--out",
                        out,
                    ],
                    STEP_LIMIT_S["compile"],
                    expected,
                    basis,
                    ("triton",),
                )
            )
        elif name == "kernels":
            tests = [str(p.relative_to(root)) for p in kernel_test_files(root)]
            expected, basis = expected_kernel_tests_s(kernel_workers if xdist else 1, root)
            record = str(RESULTS_REL / f"kernel_test_compiles_{gpu_slug(gpu) if gpu else '<gpu>'}.jsonl")
            plan.append(
                Step(
                    "kernels",
                    "kernels",
                    [python, *PYTEST, *RECORD_PLUGIN, *(["-n", str(kernel_workers)] if xdist else []), *tests],
                    STEP_LIMIT_S["kernels"],
                    min(expected, STEP_LIMIT_S["kernels"]),
                    f"{len(tests)} test files; " + basis
                    if xdist
                    else "no pytest-xdist: one process compiles every kernel in turn, up to the limit",
                    ("pytest", *plugins),
                    group,
                    {COMPILE_RECORD_ENV: record},
                )
            )
        elif name == "benchmarks":
            plans = benchmark_plan()
            for script in discover_benchmarks(root):
                rel = str(script.relative_to(root))
                bp = plans.get(script.stem)
                if bp is None:
                    plan.append(
                        Step(
                            script.stem,
                            "benchmark",
                            [python, rel],
                            STEP_LIMIT_S["benchmark"],
                            STEP_LIMIT_S["benchmark"],
                            "no estimate: up to its limit",
                            ("torch",),
                        )
                    )
                    continue
                extra = [] if bp["time_limit"] is None else ["--time-limit", f"{bp['time_limit']:g}"]
                plan.append(
                    Step(
                        script.stem,
                        "benchmark",
                        [python, rel, *extra],
                        bp["limit"],
                        bp["expected"],
                        bp["basis"],
                        ("torch",),
                    )
                )
        elif name == "nbval":
            have = all(modules.get(m) for m in NBVAL_MODULES) if modules else True
            paths = gpu_notebooks(root) if folders is None else nbval_paths(root, folders)
            workers = ["-n", str(nb_workers), "--dist", "loadfile"] if xdist and nb_workers > 1 else []
            expected, basis = expected_nbval_s(paths, nb_workers) if have else (0.0, "")
            plan.append(
                Step(
                    "nbval",
                    "nbval",
                    [python, *PYTEST, *workers, *NBVAL_ARGS, *paths],
                    STEP_LIMIT_S["nbval"],
                    None if expected is None else min(expected, STEP_LIMIT_S["nbval"]),
                    basis + "; the budget cuts it, not the other steps"
                    if have
                    else "skipped at once: nbval or the Jupyter kernel is not installed",
                    ("pytest", *plugins, *NBVAL_MODULES),
                    group,
                )
            )
        else:
            raise ValueError(f"unknown step {name!r}: choose from {', '.join(STEP_NAMES)}")
    return plan


def step_env(root: Path = ROOT, base: dict | None = None) -> dict:
    """The environment every step runs in: GPU demanded, no interpreter, this checkout importable."""
    env = dict(os.environ if base is None else base)
    env.pop("TRITON_INTERPRET", None)
    env["NBHELPERS_DEVICE"] = "cuda"
    env["NBHELPERS_REQUIRE_GPU"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    return env


def batches(plan: list[Step]) -> list[list[Step]]:
    """The plan in the order it runs: steps next to each other with the same non-empty group
    together (run side by side), every other step alone."""
    out: list[list[Step]] = []
    for step in plan:
        if out and step.group and out[-1][-1].group == step.group:
            out[-1].append(step)
        else:
            out.append([step])
    return out


def expected_total_s(plan: list[Step]) -> float:
    """The probe plus each batch's expected seconds (side by side: the longest of them)."""
    return PROBE_S + sum(max(s.expected_s or 0.0 for s in b) for b in batches(plan))


def format_plan(plan: list[Step], python: str, budget: float = DEFAULT_BUDGET_S) -> str:
    lines = [
        f"gpu-report plan ({len(plan)} steps, run with {python}, from {ROOT}):",
        f"  0. probe: versions, modules, the GPU (expected {PROBE_S:.0f} s: Python imports torch, CUDA starts)",
    ]
    i = 0
    for batch in batches(plan):
        if len(batch) > 1:
            lines.append(f"  side by side, sharing the cores ({' and '.join(s.name for s in batch)}):")
        for step in batch:
            i += 1
            exp = "?" if step.expected_s is None else f"{step.expected_s:.0f} s"
            lines.append(
                f"  {i}. [{step.kind}] {step.name} (expected {exp}, limit {step.limit_s:.0f} s): "
                f"{shlex.join(step.argv)}"
            )
            if step.basis:
                lines.append(f"       expected: {step.basis}")
    total = expected_total_s(plan)
    unknown = [s.name for s in plan if s.expected_s is None]
    also = " + " + ", ".join(unknown) if unknown else ""
    lines.append(
        f"  expected in all: {total:.0f} s = {total / 60:.1f} min{also} "
        f"(budget for the steps {budget:.0f} s: a step past its own limit is stopped and failed, one the "
        "budget stops is cut, one with no time left is skipped)"
    )
    lines.append(
        "  environment: NBHELPERS_DEVICE=cuda NBHELPERS_REQUIRE_GPU=1, TRITON_INTERPRET unset, "
        "PYTHONPATH starts with the repository root"
    )
    return "\n".join(lines)


def missing_modules(step: Step, modules: dict) -> list[str]:
    """The modules a step needs that the interpreter lacks."""
    return [m for m in step.needs if not modules.get(m, False)]


def missing_message(step: Step, python: str, missing: list[str]) -> str:
    if step.kind == "nbval":
        return nbval_missing_message(python, [m for m in missing if m in NBVAL_MODULES] or missing)
    pkgs = " ".join({"pytest_timeout": "pytest-timeout", "xdist": "pytest-xdist"}.get(m, m) for m in missing)
    why = (
        " (pyproject.toml's pytest options need it: without it pytest stops at start-up)"
        if any(m in INI_PLUGINS.values() for m in missing)
        else ""
    )
    return (
        f"{step.name} step skipped: {python} cannot import {', '.join(missing)}{why}.\n"
        f"  To add it:  {python} -m pip install {pkgs}"
    )


# ====================================================================== the environment


def probe(python: str, env: dict | None = None, timeout: float = 120.0) -> dict:
    """What ``python`` has: versions, importable modules, the GPU PyTorch sees; plus the driver.
    Raises RuntimeError when the interpreter cannot be run."""
    try:
        r = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"cannot run {python!r}: {e}") from e
    if r.returncode != 0:
        raise RuntimeError(f"{python!r} failed to report its packages:\n{r.stderr.strip()}")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info["driver"] = nvidia_driver()
    return info


def nvidia_driver() -> str | None:
    """The driver version nvidia-smi reports, or None without nvidia-smi."""
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = r.stdout.strip().splitlines()
    return lines[0].strip() if r.returncode == 0 and lines else None


def missing_for_nbval(modules: dict) -> list[str]:
    return [m for m in NBVAL_MODULES if not modules.get(m, False)]


def nbval_missing_message(python: str, missing: list[str]) -> str:
    """What to say when the nbval step cannot run: what is missing and the commands that add it."""
    pkgs = " ".join("'nbval>=0.11'" if m == "nbval" else m.replace("_", "-") for m in missing)
    return (
        f"nbval step skipped: {python} cannot import {', '.join(missing)} (nbval runs each notebook "
        f"in a Jupyter kernel of this Python).\n"
        f"  To add them:  {python} -m pip install {pkgs}\n"
        f"  Offline GPU machine: on a machine with PyPI run `pip download --only-binary=:all: "
        f"-d wheels/ {pkgs}` for that machine's Python and platform, copy wheels/ over, then "
        f"`{python} -m pip install --no-index --find-links wheels/ {pkgs}`; then run "
        f"`{shlex.join([python, SCRIPT, '--steps', 'nbval'])}`."
    )


def no_gpu_message(info: dict, python: str) -> str:
    torch_v = info.get("versions", {}).get("torch")
    why = (
        f"PyTorch {torch_v} under {python} sees no CUDA GPU (torch.cuda.is_available() is False)"
        if torch_v
        else f"{python} has no PyTorch ({info.get('torch_error', 'torch not importable')})"
    )
    return (
        f"gpu_report.py needs an NVIDIA GPU: {why}.\n"
        "Nothing was run: the plan above is what a machine with a GPU runs. Run `make gpu-report` there "
        f"(or `python3 {SCRIPT} --python python3`), with the PyTorch and Triton that machine has; "
        "another interpreter: `make gpu-report GPU_PYTHON=/path/to/python`."
    )


# ====================================================================== running a step

_OUTPUT_LOCK = threading.Lock()  # steps side by side write one line at a time


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """File name -> (mtime_ns, size) of the files in a folder (to see what a step wrote)."""
    if not folder.is_dir():
        return {}
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir() if p.is_file()}


def written_since(folder: Path, before: dict, ignore=()) -> list[str]:
    after = snapshot(folder)
    return sorted(str(folder / n) for n, sig in after.items() if before.get(n) != sig and n not in ignore)


def run_step(
    step: Step,
    env: dict,
    limit_s: float,
    log=None,
    results_dir: Path | None = None,
    ignore=(),
    echo=True,
    cwd: Path = ROOT,
    cut_by_budget: bool = False,
    prefix: str = "",
) -> StepResult:
    """Run one step, its output echoed and logged (each line after ``prefix``, for steps that run
    side by side), stopped (its whole process group) after ``limit_s`` seconds: ``timeout`` when
    that was its own limit, ``cut`` when ``cut_by_budget`` (the run's budget set the limit).
    Results files are those new or changed in ``results_dir``."""
    results_dir = results_dir if results_dir is not None else ROOT / RESULTS_REL
    res = StepResult(
        step.name,
        step.kind,
        shlex.join(step.argv),
        Status.FAILED,
        started=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    before = snapshot(results_dir)
    lines: list[str] = []

    def emit(text: str) -> None:
        if prefix:
            text = "".join(prefix + ln for ln in text.splitlines(keepends=True))
        with _OUTPUT_LOCK:
            if echo:
                print(text, end="", flush=True)
            if log is not None:
                log.write(text)
                log.flush()

    emit(f"\n>>> [{step.kind}] {step.name}: {res.command}\n")
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            step.argv,
            cwd=cwd,
            env={**env, **step.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as e:
        res.note = f"could not start: {e}"
        emit(res.note + "\n")
        return res

    def pump():
        for line in proc.stdout:
            lines.append(line)
            emit(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        res.exit_code = proc.wait(timeout=max(limit_s, 0.1))
        res.status = Status.PASSED if res.exit_code == 0 else Status.FAILED
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the step's own process group (start_new_session)
        except ProcessLookupError:
            pass
        res.exit_code = proc.wait()
        if cut_by_budget:
            res.status = Status.CUT
            res.note = (
                f"cut after {limit_s:.0f} s: the run's time budget ran out (its own limit is {step.limit_s:.0f} s)"
            )
        else:
            res.status = Status.TIMEOUT
            res.note = f"stopped at its limit of {limit_s:.0f} s"
    reader.join(timeout=10)
    proc.stdout.close()
    res.duration_s = round(time.monotonic() - t0, 1)
    res.output_tail = [ln.rstrip("\n") for ln in lines[-TAIL_LINES:]]
    res.results_files = [
        str(Path(p).relative_to(ROOT)) if Path(p).is_relative_to(ROOT) else p
        for p in written_since(results_dir, before, ignore)
    ]
    emit(f"<<< {step.name}: {res.status} (exit code {res.exit_code}, {res.duration_s:.1f} s)\n")
    return res


# ====================================================================== the summary


def gpu_slug(name: str) -> str:
    """The same slug as nbhelpers.results.gpu_slug (kept here so this file needs only the stdlib)."""
    import re

    slug = re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-")
    if not slug:
        raise ValueError(f"cannot make a file name from the GPU name {name!r}")
    return slug


def overall_status(results: list[StepResult]) -> Status:
    """failed when a step failed or ran past its own limit; incomplete when one was cut by the
    budget, skipped or missing (the summary says which); else passed."""
    if any(r.status in (Status.FAILED, Status.TIMEOUT) for r in results):
        return Status.FAILED
    if any(r.status in (Status.CUT, Status.SKIPPED, Status.MISSING) for r in results):
        return Status.INCOMPLETE
    return Status.PASSED


def build_summary(
    info: dict, results: list[StepResult], command: str, date: str, finished: bool = True, wall_s: float | None = None
) -> dict:
    """The summary's fields, from the probe's ``info`` and the steps' results (see the module
    docstring). ``wall_s``: the run's seconds so far (steps side by side overlap); without it, the
    steps' durations summed."""
    versions = info.get("versions", {})
    files = [f for r in results for f in r.results_files]
    return {
        "report": SCRIPT,
        "gpu": info.get("gpu"),
        "gpu_count": info.get("gpu_count"),
        "capability": info.get("capability"),
        "sm_count": info.get("sm_count"),
        "l2_cache_bytes": info.get("l2_cache_bytes"),
        "driver": info.get("driver"),
        "cuda": info.get("cuda"),
        "python": info.get("python"),
        "python_executable": info.get("executable"),
        "torch": versions.get("torch"),
        "triton": versions.get("triton") or versions.get("pytorch-triton"),
        "numpy": versions.get("numpy"),
        "versions": versions,
        "date": date,
        "command": command,
        "finished": finished,
        "status": overall_status(results) if finished else Status.RUNNING,
        "total_duration_s": round(sum(r.duration_s for r in results) if wall_s is None else wall_s, 1),
        "steps": [asdict(r) for r in results],
        "results_files": files,
    }


def summary_paths(gpu: str, results_dir: Path) -> tuple[Path, Path]:
    slug = gpu_slug(gpu)
    return results_dir / f"gpu_report_{slug}.json", results_dir / f"gpu_report_{slug}.log"


def write_summary(
    summary: dict, path: Path, out_dir: Path | None = None, extra_files=(), root: Path = ROOT
) -> list[Path]:
    """Write the summary; with ``out_dir``, copy it and ``extra_files`` there, flat, and write
    ``<summary's stem>.tar.gz`` there: the summary, ``extra_files`` and every results file it
    names, each by its path relative to ``root`` (by its name where it lies outside). Returns the
    files written to ``out_dir``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    copies = []
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        every = [
            Path(f) if Path(f).is_absolute() else root / f for f in [path, *extra_files, *summary["results_files"]]
        ]
        every = [f for f in every if f.is_file()]
        for src in every[: 1 + len(extra_files)]:
            dst = out_dir / src.name
            if src.resolve() != dst.resolve():
                shutil.copyfile(src, dst)
            copies.append(dst)
        archive = out_dir / f"{path.stem}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            for src in dict.fromkeys(every):  # each once
                try:
                    name = src.resolve().relative_to(Path(root).resolve())
                except ValueError:
                    name = Path(src.name)
                tar.add(src, arcname=str(name))
        copies.append(archive)
    return copies


# ====================================================================== the rehearsal on a CPU

REHEARSAL_GPU = "CPU rehearsal"
REHEARSAL_BUDGET_S = 60.0
#: a module no machine has: one benchmark's stand-in needs it, so the rehearsal records a step as missing
REHEARSAL_ABSENT = "nbhelpers_rehearsal_absent_module"
#: the kernel test the rehearsal runs (under the interpreter, as make test runs it)
REHEARSAL_KERNEL_TEST = "tests/test_kernels_copy.py::test_copy_mask_writes_nothing_past_the_end"
# a benchmark's stand-in: what the script would write, a results file named for the rehearsal
REHEARSAL_BENCHMARK = r"""
import json, pathlib, sys
name, folder = sys.argv[1], pathlib.Path(sys.argv[2])
out = folder / (name.removeprefix("gpu_") + "_cpu-rehearsal.json")
out.write_text(json.dumps({"meta": {"script": "benchmarks/" + name + ".py", "rehearsal": True}, "rows": []}))
print("rehearsal: benchmarks/" + name + ".py would run here; wrote " + out.name, flush=True)
"""


def rehearsal_notebook(folder: Path) -> Path:
    """A notebook for the rehearsal's nbval step: one cell that prints, one that outlasts any
    rehearsal budget, so that the budget cuts the step."""
    cells = [
        {
            "cell_type": "code",
            "id": "prints",
            "metadata": {},
            "source": ["print('rehearsal')"],
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "id": "sleeps",
            "metadata": {},
            "source": ["import time\n", "time.sleep(300)"],
            "outputs": [],
            "execution_count": None,
        },
    ]
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = folder / "rehearsal.ipynb"
    path.write_text(json.dumps(nb))
    return path


def rehearsal_plan(plan: list[Step], python: str, results_dir: Path) -> list[Step]:
    """The plan's steps, in its order and groups, with the same names, kinds, limits and needs, each
    doing a small real thing on a CPU: the compile step compiles the copy kernel's four configs for
    sm_90 (Triton and ptxas, no GPU) into ``results_dir``; each benchmark is a stand-in that writes a
    results file there (the first also needs a module no machine has: recorded as missing); the
    kernel tests run one kernel test in Triton's interpreter; nbval runs a notebook that sleeps past
    the budget (cut)."""
    out: list[Step] = []
    first_benchmark = True
    for step in plan:
        if step.kind == "compile":
            argv = [
                python,
                "-m",
                "nbhelpers.tooling.compile_cases",
                "--target",
                "sm_90",
                "--jobs",
                "1",
                "--warm",
                "--kernels",
                "copy_kernel",
                "--sources",
                "package",
                "--gpu",
                REHEARSAL_GPU,
                "--out",
                str(results_dir / f"compile_check_{gpu_slug(REHEARSAL_GPU)}.json"),
            ]
            needs = step.needs
        elif step.kind == "benchmark":
            argv = [python, "-c", REHEARSAL_BENCHMARK, step.name, str(results_dir)]
            needs = (*step.needs, REHEARSAL_ABSENT) if first_benchmark else step.needs
            first_benchmark = False
        elif step.kind == "kernels":
            argv = [python, *PYTEST, *RECORD_PLUGIN, REHEARSAL_KERNEL_TEST]
            needs = step.needs
        else:  # nbval
            nb = rehearsal_notebook(results_dir)
            argv = [python, *PYTEST, *NBVAL_ARGS, str(nb)]
            needs = step.needs
        env = {k: str(results_dir / Path(v).name) for k, v in step.env.items()}  # its records in results_dir
        out.append(dataclasses.replace(step, argv=argv, needs=needs, env=env, basis="rehearsal: " + step.basis))
    return out


def check_rehearsal(out_dir: Path, summary_path: Path) -> list[str]:
    """What a collector would find wrong in ``out_dir`` after a run: more files than it brings back,
    an archive it cannot read, a summary missing from the archive. Empty when all is well."""
    problems = []
    files = sorted(p for p in out_dir.iterdir()) if out_dir.is_dir() else []
    if len(files) > OUT_MAX_FILES:
        problems.append(f"{len(files)} files in {out_dir}, more than the {OUT_MAX_FILES} a collector brings back")
    archives = [p for p in files if p.name.endswith(".tar.gz")]
    if len(archives) != 1:
        problems.append(f"expected one archive in {out_dir}, found {len(archives)}")
    for a in archives:
        try:
            with tarfile.open(a) as tar:
                names = tar.getnames()
                member = next(n for n in names if n.endswith(summary_path.name))
                json.loads(tar.extractfile(member).read())
        except (tarfile.TarError, OSError, StopIteration, ValueError) as e:
            problems.append(f"{a.name} unreadable or without the summary: {e!r}")
    return problems


# ====================================================================== main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--python",
        default=sys.executable,
        help="the Python whose torch/Triton/pytest the steps use (default: this one)",
    )
    ap.add_argument(
        "--steps",
        default=",".join(STEP_NAMES),
        help=f"comma-separated steps in the order to run them (default: {','.join(STEP_NAMES)})",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds for all steps together (default {DEFAULT_BUDGET_S:.0f}; "
        f"{REHEARSAL_BUDGET_S:.0f} with --rehearse)",
    )
    ap.add_argument(
        "--nbval-paths",
        nargs="+",
        default=None,
        help="notebook folders or files for the nbval step (default: the chapters with a GPU path "
        "and their solutions; `notebooks solutions exercises` runs all, as `make test` does)",
    )
    ap.add_argument("--out", help="also copy the summary, log and results files here (default: $OUT)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the environment, run nothing")
    ap.add_argument(
        "--rehearse",
        action="store_true",
        help="on a CPU: run the report's plan end to end with small real steps (see rehearsal_plan), "
        "then check what $OUT holds",
    )
    ap.add_argument(
        "--results-dir",
        help="where the summary, the log and the results files go (default: benchmarks/results/; "
        "with --rehearse a new temporary folder)",
    )
    args = ap.parse_args(argv)
    if args.budget is None:
        args.budget = REHEARSAL_BUDGET_S if args.rehearse else DEFAULT_BUDGET_S
    command = shlex.join(["python", SCRIPT, *(sys.argv[1:] if argv is None else argv)])
    if os.sep in args.python:  # a path: make it absolute (not resolved: a venv's python is a link)
        args.python = os.path.abspath(args.python)

    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEP_NAMES]
    if unknown:
        ap.error(f"unknown step {unknown[0]!r}: choose from {', '.join(STEP_NAMES)}")

    if args.rehearse:
        return rehearse(args, steps, command)
    env = step_env()
    try:
        info = probe(args.python, env)
    except RuntimeError as e:
        print(format_plan(plan_steps(args.python, steps, folders=args.nbval_paths), args.python, args.budget))
        print(f"gpu_report.py cannot use --python: {e}", file=sys.stderr)
        return 2
    gpu_here = bool(info.get("cuda_available"))
    machine = info if gpu_here else REFERENCE_MACHINE
    plan = plan_steps(
        args.python,
        steps,
        folders=args.nbval_paths,
        jobs=int(machine.get("cpu_count") or 1),
        capability=machine.get("capability") or DEFAULT_CAPABILITY,
        gpu=machine.get("gpu"),
        modules=machine["modules"],
    )
    if not gpu_here:
        print(f"No GPU visible here: the plan and its expected times are for {REFERENCE_MACHINE['description']}.")
    print(format_plan(plan, args.python, args.budget))
    if "benchmarks" in steps:
        found = [p.name for p in discover_benchmarks()]
        print(f"  GPU benchmarks found (benchmarks/gpu_*.py): {', '.join(found) if found else 'none'}")
    v = info["versions"]
    print(
        f"environment: Python {info['python']} ({info['executable']}), torch {v.get('torch', 'missing')}, "
        f"triton {v.get('triton') or v.get('pytorch-triton') or 'missing'}, CUDA {info.get('cuda')}, "
        f"driver {info.get('driver')}, GPU {info.get('gpu', 'none')}, {info.get('cpu_count')} cores"
    )
    for step in plan:
        missing = missing_modules(step, info["modules"])
        if missing:
            print("  note: " + missing_message(step, args.python, missing).replace("\n", "\n  "))
    if args.dry_run:
        print("dry run: nothing was run.")
        return 0
    if not gpu_here:
        print(no_gpu_message(info, args.python), file=sys.stderr)
        return 2

    out_env = args.out or os.environ.get("OUT")
    return run_report(
        plan,
        info,
        env,
        command,
        args.budget,
        args.python,
        results_dir=Path(args.results_dir) if args.results_dir else None,
        out_dir=Path(out_env) if out_env else None,
    )


def rehearse(args, steps: list[str], command: str) -> int:
    """--rehearse: the report's own loop, summary, log, archive and $OUT copies, over
    :func:`rehearsal_plan`'s small steps on this machine's CPU, in a results folder of its own; then
    :func:`check_rehearsal` on what $OUT holds. Exit code 0 when no step failed or ran past its own
    limit and $OUT is what a collector can bring back."""
    env = step_env()
    env.pop("NBHELPERS_REQUIRE_GPU", None)
    env["NBHELPERS_DEVICE"] = "cpu"
    env["TRITON_INTERPRET"] = "1"
    try:
        info = probe(args.python, env)
    except RuntimeError as e:
        print(f"gpu_report.py cannot use --python: {e}", file=sys.stderr)
        return 2
    info.update(gpu=REHEARSAL_GPU, capability="9.0", rehearsal=True)
    results_dir = Path(args.results_dir or tempfile.mkdtemp(prefix="gpu-report-rehearsal-"))
    results_dir.mkdir(parents=True, exist_ok=True)
    out_dir = Path(args.out or os.environ.get("OUT") or results_dir / "out")
    real = plan_steps(
        args.python,
        steps,
        folders=args.nbval_paths,
        jobs=int(info.get("cpu_count") or 1),
        capability="9.0",
        gpu=REHEARSAL_GPU,
        modules=info["modules"],
    )
    plan = rehearsal_plan(real, args.python, results_dir)
    print(f"Rehearsal on this CPU (no GPU used), results in {results_dir}, copies in {out_dir}:")
    print(format_plan(plan, args.python, args.budget))
    rc = run_report(plan, info, env, command, args.budget, args.python, results_dir=results_dir, out_dir=out_dir)
    problems = check_rehearsal(out_dir, summary_paths(REHEARSAL_GPU, results_dir)[0])
    for p in problems:
        print("REHEARSAL PROBLEM:", p)
    print(f"rehearsal: {len(list(out_dir.iterdir()))} files in {out_dir}" + (": ok" if not problems else ""))
    return 1 if problems or rc else 0


def run_report(
    plan: list[Step],
    info: dict,
    env: dict,
    command: str,
    budget: float,
    python: str,
    results_dir: Path | None = None,
    out_dir: Path | None = None,
    cwd: Path = ROOT,
) -> int:
    """Run the plan's steps in order within ``budget`` seconds, writing the summary and the log
    to ``results_dir`` (default benchmarks/results/) after each, copies to ``out_dir``.
    Returns the exit code: 1 when a step failed or timed out, else 0."""
    results_dir = results_dir if results_dir is not None else ROOT / RESULTS_REL
    summary_path, log_path = summary_paths(info["gpu"], results_dir)
    date = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    start = time.monotonic()
    deadline = start + budget
    results: list[StepResult] = []
    results_dir.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write(f"{command}\n{date}\n{json.dumps(info)}\n")
        for batch in batches(plan):
            left = deadline - time.monotonic()
            done: dict[int, StepResult] = {}
            runnable = []
            for i, step in enumerate(batch):
                note = ""
                missing = missing_modules(step, info["modules"])
                if missing:  # checked before pytest is called: a missing plugin is a sentence, not INTERNALERROR
                    status, note = Status.MISSING, missing_message(step, python, missing)
                elif left < 5:
                    status, note = Status.SKIPPED, f"time budget of {budget:.0f} s used up"
                if note:
                    done[i] = StepResult(step.name, step.kind, shlex.join(step.argv), status, note=note)
                    with _OUTPUT_LOCK:
                        print(f"\n>>> [{step.kind}] {step.name}: {status}: {note}", flush=True)
                        log.write(f"\n>>> [{step.kind}] {step.name}: {status}: {note}\n")
                else:
                    runnable.append(i)

            def run(i, side_by_side, left=left):
                step = batch[i]
                done[i] = run_step(
                    step,
                    env,
                    min(step.limit_s, left),
                    log,
                    results_dir,
                    ignore=(summary_path.name, log_path.name),
                    cwd=cwd,
                    cut_by_budget=left < step.limit_s,
                    prefix=f"[{step.name}] " if side_by_side else "",
                )

            threads = [threading.Thread(target=run, args=(i, len(runnable) > 1)) for i in runnable]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results.extend(done[i] for i in range(len(batch)))
            # after every batch, so that a run cut short still leaves a summary (and its copies)
            write_summary(
                build_summary(info, results, command, date, finished=False, wall_s=time.monotonic() - start),
                summary_path,
                out_dir,
                extra_files=[log_path],
            )
    summary = build_summary(info, results, command, date, wall_s=time.monotonic() - start)
    copies = write_summary(summary, summary_path, out_dir, extra_files=[log_path])

    print(f"\ngpu-report on {info['gpu']}: {summary['status']} in {summary['total_duration_s']:.0f} s")
    for r in results:
        print(
            f"  {r.name:<28s} {r.status:<8s} exit {r.exit_code!s:<5s} {r.duration_s:6.1f} s"
            + (f"  {', '.join(r.results_files)}" if r.results_files else "")
            + (f"  ({r.note.splitlines()[0]})" if r.note else "")
        )
    print(f"wrote {summary_path} and {log_path}")
    if out_dir is not None:
        print(f"copied {len(copies)} files to {out_dir}")
        if len(copies) > OUT_MAX_FILES:
            print(
                f"  warning: more than {OUT_MAX_FILES} files; a collector that takes {OUT_MAX_FILES} "
                "may leave some behind (they are all in benchmarks/results/)"
            )
    return 1 if summary["status"] == Status.FAILED else 0


if __name__ == "__main__":
    raise SystemExit(main())
