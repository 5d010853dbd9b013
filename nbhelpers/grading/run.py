"""A grading run: :func:`grade` (the library function behind the command), its loop over the
submissions (``--jobs`` at a time), the progress bar and the summary printed at the end."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cgroups import find_cgroups
from .jobs import Running, remove_stale
from .judge_process import Judges
from .judging import ChapterPlan, grade_one, plan_chapter
from .options import STATUSES, GradeOptions, Status
from .outputs import Outputs
from .sandbox import SandboxUnavailable, sandbox_problem
from .submissions import Submission, detect_chapter, find_notebooks, read_submission

__all__ = ["RunSummary", "grade", "print_summary"]


@dataclass
class RunSummary:
    """What a run did: submissions graded and skipped (already graded), its time, each status's
    count, and the records of the submissions it graded."""

    graded: int = 0
    skipped: int = 0
    seconds: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    records: list[dict] = field(default_factory=list)
    whole_limits: str = ""  # what limits a submission as a whole (GradeOptions.whole_submission_limits)

    @property
    def seconds_per_submission(self) -> float:
        return self.seconds / self.graded if self.graded else 0.0

    def add(self, rec: dict) -> None:
        self.graded += 1
        self.statuses[rec["status"]] += 1
        self.records.append(rec)


def grade(
    paths: Iterable[str | Path], csv_path: str | Path, json_path: str | Path, opts: GradeOptions | None = None
) -> RunSummary:
    """Grade every notebook under ``paths``; write/extend ``csv_path`` and ``json_path``.

    Returns what was done. Raises FileNotFoundError for a path that does not exist,
    :class:`~nbhelpers.grading.outputs.OutputsBusy` when another grader is writing ``csv_path`` or
    ``json_path``, and
    :class:`~nbhelpers.grading.sandbox.SandboxUnavailable` when ``opts.sandbox`` (the default)
    and bubblewrap cannot be used here; everything that can go wrong with a submission becomes
    its status instead. (The command line also makes
    its process non-dumpable when the seed is secret; a program calling this with a secret seed
    should keep its own memory out of the students' reach.)
    """
    opts = opts or GradeOptions()
    if opts.sandbox:
        problem = sandbox_problem()
        if problem is not None:
            raise SandboxUnavailable(problem)
    if opts.cgroups is None and not opts.cgroups_missing:
        where = find_cgroups()
        if isinstance(where, str):
            opts = dataclasses.replace(opts, cgroups_missing=where)
        else:
            opts = dataclasses.replace(opts, cgroups=where)
    remove_stale(
        [Path(tempfile.gettempdir()), Path(SHM)],
        [Path(d) for d in dict.fromkeys(opts.cgroups.parents.values())] if opts.cgroups is not None else [],
    )
    made_root = None
    if not opts.channels_root and channels_on_shm(opts):
        made_root = tempfile.mkdtemp(prefix=f"{CHANNELS_PREFIX}{os.getpid()}-", dir=SHM)
        opts = dataclasses.replace(opts, channels_root=made_root)
    try:
        return _grade(paths, csv_path, json_path, opts)
    finally:
        if made_root is not None:
            shutil.rmtree(made_root, ignore_errors=True)


#: the tmpfs the kernels' channel folders go on, where :func:`channels_on_shm` allows
SHM = "/dev/shm"
CHANNELS_PREFIX = "nbgrade-channels-"  # then the grader's pid: a run's folder of channel folders


def channels_on_shm(opts: GradeOptions) -> bool:
    """Whether the kernels' channel folders go on /dev/shm: in the sandbox, with memory cgroups
    (a page a kernel writes on a tmpfs counts in its memory, so a channel is limited by
    ``--max-memory``), and with room there for ``--jobs`` kernels at their memory limit, so that
    one submission filling its channel cannot fill a classmate's."""
    if not (opts.sandbox and opts.cgroups is not None and opts.limits.memory_mb and os.path.isdir(SHM)):
        return False
    try:
        st = os.statvfs(SHM)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= max(1, opts.jobs) * opts.limits.memory_mb * 2**20


def _grade(paths: Iterable[str | Path], csv_path: str | Path, json_path: str | Path, opts: GradeOptions) -> RunSummary:
    paths = list(paths)
    found = find_notebooks(paths)
    if not found:
        raise FileNotFoundError(f"no notebooks (*.ipynb) in {', '.join(map(str, paths))}")
    subs = [
        read_submission(f.path, f.name)
        if f.refused is None
        else Submission(f.name, f.path).reject(Status.REFUSED, f"{f.refused}: not read")
        for f in found
    ]
    outputs = Outputs(Path(csv_path), Path(json_path), opts)
    try:
        todo = [s for s in subs if not outputs.is_done(s)]
        plans = _plans(todo, opts)
        outputs.start([p.exercise.id for ch in sorted(plans) if plans[ch] for p in plans[ch].exercises])
        summary = RunSummary(skipped=len(subs) - len(todo), whole_limits=opts.whole_submission_limits())
        t0 = time.monotonic()
        _grade_all(todo, plans, opts, outputs, summary, _same_content(subs))
        outputs.finish()
    finally:
        outputs.close()
    summary.seconds = time.monotonic() - t0
    return summary


def _plans(todo: list[Submission], opts: GradeOptions) -> dict[int, ChapterPlan | None]:
    """The plan of every chapter the submissions to grade belong to (and of --chapter)."""
    chapters = {opts.chapter} if opts.chapter is not None else set()
    for s in todo:
        ch, _ = detect_chapter(s.file, s.cells, opts.chapter)
        if ch is not None and (opts.chapter is None or ch == opts.chapter):
            chapters.add(ch)
    return {ch: plan_chapter(ch, opts.seed) for ch in sorted(chapters)}


def _same_content(subs: list[Submission]) -> dict[str, list[str]]:
    """file -> the other files of this run with the same bytes (sha256: a copy or a hard link of a
    classmate's notebook), for each file that has any."""
    by_hash: dict[str, list[str]] = {}
    for s in subs:
        if s.sha256:
            by_hash.setdefault(s.sha256, []).append(s.file)
    return {f: sorted(g for g in files if g != f) for files in by_hash.values() if len(files) > 1 for f in files}


def _flag_same_content(rec: dict, twins: dict[str, list[str]]) -> dict:
    """The record with a note in its detail (and events) naming the files with the same bytes."""
    others = twins.get(rec["file"])
    if others:
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        note = f"same content (sha256) as {', '.join(others[:3])}{more}"
        rec["events"] = [*rec.get("events", []), note]
        rec["detail"] = "; ".join(d for d in (rec.get("detail", ""), note) if d)
    return rec


def _grade_all(
    todo: list[Submission],
    plans: dict[int, ChapterPlan | None],
    opts: GradeOptions,
    outputs: Outputs,
    summary: RunSummary,
    twins: dict[str, list[str]],
) -> None:
    """Grade ``opts.jobs`` submissions at a time, recording each as it finishes (flagged when
    another file of the run has the same bytes, ``twins``). On Ctrl-C (or any other exception)
    every worker still running is stopped."""
    running = Running()
    judges = Judges(plans)  # each submission's results are judged in a process of their own
    bar = _progress(len(todo), opts.progress)
    pool = ThreadPoolExecutor(max_workers=max(1, opts.jobs))
    try:
        futures = [pool.submit(grade_one, s, plans, opts, running, judges) for s in todo]
        for fut in as_completed(futures):
            rec = _flag_same_content(fut.result(), twins)
            outputs.add(rec)
            summary.add(rec)
            bar.set_postfix_str(f"{Path(rec['file']).name}: {rec['status']}", refresh=False)
            bar.update(1)
    except BaseException:
        running.stop_all()
        judges.close(stopping=True)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        bar.close()
        running.close()
        judges.close()
    pool.shutdown(wait=True)


class _BareProgress:
    """A line per submission on stderr, should tqdm be missing."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.n, self.total, self.enabled = 0, total, enabled

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.enabled:
            print(f"grading: {self.n}/{self.total}", file=sys.stderr)

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency; a bare line per submission otherwise
        return _BareProgress(total, enabled)
    return tqdm(
        total=total,
        file=sys.stderr,
        unit="notebook",
        desc="grading",
        disable=not enabled,
        dynamic_ncols=True,
        mininterval=0.5,
    )


def print_summary(s: RunSummary, opts: GradeOptions, csv_path: str, json_path: str) -> None:
    """What the run did, in a few lines on stdout."""
    parts = [f"graded {s.graded} submission{'s' if s.graded != 1 else ''} in {s.seconds:.1f} s"]
    if s.graded:
        parts.append(f"{s.seconds_per_submission:.1f} s per submission with {opts.jobs} at a time")
    if s.skipped:
        parts.append(f"{s.skipped} already graded, skipped (--regrade grades them again)")
    print("; ".join(parts))
    if s.statuses:
        print("  " + "   ".join(f"{k}: {s.statuses[k]}" for k in STATUSES[::-1] if s.statuses[k]))
    totals = [r["total"] for r in s.records if r.get("max")]
    if totals:
        maxes = {r["max"] for r in s.records if r.get("max")}
        of = f" of {maxes.pop()}" if len(maxes) == 1 else ""
        print(f"  points: mean {sum(totals) / len(totals):.1f}{of}, lowest {min(totals)}, highest {max(totals)}")
    print(f"  seed: {'secret (hidden cases)' if opts.secret else 'public (the cases students see)'}")
    print(f"  limits of a whole submission: {s.whole_limits}")
    print(f"  wrote {csv_path} and {json_path}")
