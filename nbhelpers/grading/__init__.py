"""The instructor's grader: grade a folder of students' exercise notebooks with one command.

::

    python -m nbhelpers.grade PATH... --csv grades.csv --json grades.json [--seed N] [--jobs N]

(installed as the console script ``nbhelpers-grade``; :mod:`nbhelpers.grade` is the entry
point). Every ``PATH`` is a notebook or a folder searched for ``*.ipynb``. For each submission
the grader

1. reads the file once, read-only (it is never modified), and takes its code cells; its name and
   every other text from it are made safe where they enter (:mod:`.untrusted`);
2. runs them in a fresh Jupyter kernel in a sandbox of its own (bubblewrap: its own PID, network
   and user namespaces, a read-only view of the course without its exercise modules, a private
   /tmp and /dev/shm, resource limits; :mod:`.sandbox`; cgroups for the whole submission where
   the machine allows, :mod:`.cgroups`), driven by a worker process (reused from one
   submission to the next), with a time limit per cell and a total one (the worker and the
   kernel's sandbox are killed when the total runs out). Check cells (cells that only call
   ``check(...)`` or ``summary(...)``) are skipped: they are for the student's eyes;
3. starts a second, clean kernel that runs only a program the grader builds from the
   notebook's imports, definitions and assignments of values by an allowlist
   (:mod:`.definitions`: nothing of the student's runs there, so no hook, thread or loop), and
   adds one last cell there that reads each graded function's code object (it must be a ``def``
   of that program) and calls each of the chapter's functions on the case *inputs* (sent as
   data, never the expected results) and writes what they return to a file in a plain data
   encoding (JSON with tagged NaN, infinities, -0.0, arrays as dtype, shape and bytes), every
   line with a nonce made for that cell (lines without it are ignored as tampering); nothing
   from the kernel is ever unpickled, executed or imported;
4. judges those results with :func:`nbhelpers.checks.score`, the very code a notebook's
   ``check`` cell uses, against expected results computed here from the course's references,
   in a judge process of this grader's with limits of its own (:mod:`.judge_process`). The
   cases come from ``cases_for(exercise, seed)``: seed 0 is what students see, any other seed
   (``--seed``) gives hidden cases. The seed never leaves this process (the judges get the
   plans, not the seed).

Results are written as each submission finishes: its record appended (and synced) to the JSON
file's journal, and its CSV row; the JSON file is rewritten atomically at the start and the end
of a run. An interrupted run keeps everything it finished, and a rerun skips submissions already
graded (same file, same content) unless ``--regrade``.

A new chapter needs nothing here: the chapter is read from the notebook (``check("exNN.…")``
calls, or an ``exNN`` file name) and its exercises come from ``nbhelpers.answer_keys.chNN``.

The modules, one role each (an arrow: what a module imports from the package):

- :mod:`~nbhelpers.grading.untrusted`    making a submission's text safe where it enters the grader
- :mod:`~nbhelpers.grading.sandbox`      the command that starts a kernel in its sandbox, under resource limits
- :mod:`~nbhelpers.grading.cgroups`      finding where cgroups can be made; one kernel's pids and memory cgroups
- :mod:`~nbhelpers.grading.options`      the options, the submission statuses, the seed kinds, the size and time limits
  (-> cgroups, sandbox)
- :mod:`~nbhelpers.grading.tools_view`   what a tools kernel sees of the installed packages: only an exercise's tools
- :mod:`~nbhelpers.grading.absent`       the stand-ins a tools kernel's imports of what it lacks give (sent there as
  source)
- :mod:`~nbhelpers.grading.in_kernel`    the value codec and the code run inside the student's kernel (sent there as
  source)
- :mod:`~nbhelpers.grading.submissions`  finding notebooks, reading one, its cells, its chapter, its check cells
  (-> options, untrusted)
- :mod:`~nbhelpers.grading.definitions`  what of a notebook runs in the clean kernel its functions are graded in
  (-> submissions)
- :mod:`~nbhelpers.grading.jobs`         a submission's job folder; the worker processes, timing out and stopping them;
  the worker's answers and its events' kinds  (-> cgroups, options, untrusted)
- :mod:`~nbhelpers.grading.worker`       the worker process: runs the notebook, then the grading cell, in a kernel
  (-> absent, cgroups, in_kernel, jobs, options, sandbox)
- :mod:`~nbhelpers.grading.judging`      plans per chapter, judging what the kernel returned, a submission's status and
  record (-> definitions, in_kernel, jobs, options, sandbox, submissions, tools_view, untrusted)
- :mod:`~nbhelpers.grading.judge_process` judging a submission in a process of its own, under time and memory limits
  (-> jobs, judging)
- :mod:`~nbhelpers.grading.outputs`      the CSV and JSON files: atomic writes, resuming, setting damaged files aside
  (-> options, submissions, untrusted)
- :mod:`~nbhelpers.grading.run`          :func:`grade`, the run loop, the progress bar and the summary
  (-> cgroups, judge_process, judging, jobs, options, outputs, sandbox, submissions)
- :mod:`~nbhelpers.grading.cli`          the command line: its options, the seed (concealed, or from a file),
  :func:`main` (-> jobs, options, run, sandbox)

docs/grading.md is the instructor's guide: options, outputs, statuses, the trust model (what the
sandbox stops and what it does not) and its known limits.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each public name, and the module it comes from: imported when first asked for (PEP 562), so that
# a process that needs one module of the package (a worker, a judge process, each started once
# per grading thread) does not import all of them (0.3 s of a judge process's 0.5 s).
_WHERE = {
    "STATUSES": "options",
    "Status": "options",
    "GradeOptions": "options",
    "RunSummary": "run",
    "Submission": "submissions",
    "detect_chapter": "submissions",
    "is_check_cell": "submissions",
    "read_submission": "submissions",
    "grade": "run",
    "main": "cli",
}

__all__ = [
    "STATUSES",
    "Status",
    "GradeOptions",
    "RunSummary",
    "Submission",
    "detect_chapter",
    "is_check_cell",
    "read_submission",
    "grade",
    "main",
]

if TYPE_CHECKING:
    from .cli import main
    from .options import STATUSES, GradeOptions, Status
    from .run import RunSummary, grade
    from .submissions import Submission, detect_chapter, is_check_cell, read_submission


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
