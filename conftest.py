"""Repo-wide pytest settings for the notebook runs (nbval).

`make test` runs every notebook with ``--nbval-lax``: all cells are executed, and the
outputs of cells marked ``# NBVAL_CHECK_OUTPUT`` are compared with the committed ones.
nbval compares a cell's stderr stream like any other output, so a warning printed by a
library (a deprecation notice, a Triton-interpreter message, a tqdm bar) would fail an
otherwise correct cell. nbval (0.11) has no command-line switch for this; its documented way
(see "Skipping certain output types" in nbval's docs) is to add the key to the
collector's ``skip_compare``. Errors still fail a cell: they are not stderr streams.
"""

import os
import re
import sys

# nbformat (which nbval imports) imports jsonschema, which imports the optional rfc3987_syntax when
# it is installed (JupyterLab's dependencies bring it); that builds a parser, about 2.5 CPU-s per
# process, for IRI formats that no notebook schema uses. This helps where this file is loaded
# before the plugins (`pytest -p conftest`, as tests/test_repo_setup.py runs pytest).
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import pytest  # noqa: E402

# --- one math thread in every process of the run -------------------------------------------------
# `make test` runs a worker per core, and each starts kernels and processes that import numpy and
# torch. numpy's OpenBLAS would start a thread per core in every one of them, and so would torch's
# OpenMP pool (and MKL, which torch's CPU build uses); their idle threads spin, and an operation
# split over two threads waits for the one whose core another worker holds. Four chapters'
# notebooks on two workers took 238 CPU-s and 152 s with OpenBLAS's threads, 210 CPU-s and 135 s
# without; 500 steps of chapter 04's training beside two busy processes took 8.5 CPU-s with
# torch's two threads and 2.2 with one. Set here, before the workers start, these reach them and
# everything they start (torch reads them when it is first imported); a value already set is
# kept. The chapters that time torch print how many threads it had.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

try:
    from nbval.plugin import IPyNbCell, IPyNbFile
except ImportError:  # nbval not installed: plain unit-test runs still work
    IPyNbCell = IPyNbFile = None


def pytest_collectstart(collector):
    if IPyNbFile is not None and isinstance(collector, IPyNbFile):
        collector.skip_compare += ("stderr",)


# --- the exercise notebooks' scores ----------------------------------------------------------
# nbval runs every notebook of solutions/ and exercises/; besides running without an error, each
# must score what it should by its own check cells: a solution notebook full marks with no check
# failing or left to do, an untouched exercise notebook zero. The cell that prints the chapter's
# summary (``summary(N)``) is where that is read, from the outputs nbval has just collected.
EXERCISE_NOTEBOOK = re.compile(r"^ex(\d\d)_\w+\.ipynb$")
SUMMARY_CALL = re.compile(r"^\s*summary\(", re.MULTILINE)


def exercise_notebook_kind(path) -> tuple[str, int] | None:
    """("solutions" or "exercises", chapter) for an exercise notebook of those folders, else None."""
    parts = str(path).replace("\\", "/").rsplit("/", 2)
    if len(parts) < 2 or parts[-2] not in ("solutions", "exercises"):
        return None
    m = EXERCISE_NOTEBOOK.match(parts[-1])
    return (parts[-2], int(m[1])) if m else None


def score_problem(kind: str, chapter: int, source: str, text: str) -> str | None:
    """What is wrong with the printed output ``text`` of one code cell (``source``) of an exercise
    notebook of the folder ``kind`` and chapter ``chapter``; None when nothing is."""
    from nbhelpers.checks import CheckStatus, exercises_of

    if kind == "solutions":
        # a check cell's line, or a summary's row, of an exercise that did not pass
        not_passed = "|".join(re.escape(s.value) for s in CheckStatus if s is not CheckStatus.PASS)
        if re.search(rf"^\s*({not_passed}|not checked)\s+ex\d\d\.", text, re.MULTILINE):
            return f"a check in this solution notebook did not pass:\n{text}"
    if not SUMMARY_CALL.search(source):
        return None

    total = sum(ex.points for ex in exercises_of(chapter))
    if total <= 0:
        return f"chapter {chapter} lists no exercises with points"
    want = f"TOTAL: {total}/{total} points" if kind == "solutions" else f"TOTAL: 0/{total} points"
    if want not in text:
        return f"this {kind[:-1]} notebook's summary should print {want!r}; it printed:\n{text}"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if IPyNbCell is not None and isinstance(item, IPyNbCell) and item.test_outputs is not None:
        found = exercise_notebook_kind(item.path)
        if found is not None:
            text = "".join(o.get("text", "") for o in item.test_outputs if isinstance(o, dict))
            problem = score_problem(*found, item.cell.source, text)
            if problem is not None:
                pytest.fail(f"conftest.py's score check: {problem}", pytrace=False)
    return result


# --- tests that need a system package -------------------------------------------------------
# `@pytest.mark.sandbox` marks a test that grades in the grader's sandbox (bubblewrap). Where
# the sandbox cannot run (bubblewrap missing, or user namespaces disabled), such a test is
# skipped with the reason; `make test` has already printed the command that installs it
# (scripts/system-packages.sh). With NBHELPERS_REQUIRE_SYSTEM_PACKAGES=1 (CI sets it) the skip
# becomes a failure, so a CI machine that lost bubblewrap cannot pass by skipping.
# tests/test_site.py treats Chromium the same way.


def system_package_missing(why: str) -> None:
    """Skip the running test because a system package is missing, or fail it under
    NBHELPERS_REQUIRE_SYSTEM_PACKAGES=1."""
    if os.environ.get("NBHELPERS_REQUIRE_SYSTEM_PACKAGES") == "1":
        pytest.fail(f"{why} (NBHELPERS_REQUIRE_SYSTEM_PACKAGES=1: required here)", pytrace=False)
    pytest.skip(why)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up
def pytest_runtest_setup(item):
    if item.get_closest_marker("sandbox") is None:
        return
    from nbhelpers.grading.sandbox import sandbox_problem

    problem = sandbox_problem()
    if problem is not None:
        system_package_missing(f"needs the grader's sandbox, which cannot run here: {problem}")


# --- running on every core (pytest-xdist) ---------------------------------------------------
# `make test` runs pytest with `-n logical --dist loadfile`: one worker per core, and the tests
# handed out to the workers a file at a time, all of a file to one worker, in order: a notebook's
# cells run in one kernel, in order, and a test module's module-scoped fixtures (a graded class)
# are made once. Files that share a session-scoped fixture costly enough to make once go to one
# worker together (SHARED_FILES), and a file with no module-scoped fixture whose tests are each a
# chapter's (SPLIT_BY_CHAPTER) is handed out a chapter at a time, so that its hundreds of checks
# of wrong answers do not all wait for one worker; both by the scheduler below.

SHARED_FILES = {
    # the website, built once per worker (tests/test_site.py's `site` fixture)
    "test_site.py": "the website",
    "test_site_explorer.py": "the website",
    "test_site_references.py": "the website",
    "test_site_repository.py": "the website",
}


SPLIT_BY_CHAPTER = {"test_exercises.py"}
CHAPTER_IN_ID = re.compile(r"\[(ex\d\d)\b")


def xdist_scope(path: str, nodeid: str) -> str:
    """What `--dist loadfile` hands out as one, for a test of the file ``path``."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    if name in SPLIT_BY_CHAPTER and (m := CHAPTER_IN_ID.search(nodeid)):
        return f"{path}::{m[1]}"
    return SHARED_FILES.get(name, path)


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the files of SHARED_FILES handed out as one and those of
    SPLIT_BY_CHAPTER a chapter at a time."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(super()._split_scope(nodeid), nodeid)

    return SharedFileScheduling(config, log)
