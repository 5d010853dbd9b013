"""Judging in a process of its own: reading a submission's results files, decoding what its kernel
sent and scoring it, under a time limit and a memory limit, away from the grader's process.

What a kernel sends back is decoded with bounded costs (:mod:`nbhelpers.grading.judging`), but
bounded is not free: hundreds of megabytes of results take seconds and memory to decode. In the
grader's process that time holds the lock every thread of the run shares (a classmate graded
alongside waits; Ctrl-C waits), and that memory is the grader's. Here each grading thread has a
judge process of its own, started once per run with the run's plans (the expected results never
leave the grader's side: the judge is the grader's own child, not a sandbox, gets them through
its pipe and keeps its memory unreadable to other processes); it judges one submission at a time,
with at most :data:`JUDGE_MEMORY_MB` of address space and :data:`JUDGE_TIMEOUT_S` seconds per
submission. A submission whose results run past either limit gets no points for what could not
be judged, says so in its detail, and keeps its row (a rerun does not stall on it again); the
judge is replaced.

The two sides talk through pipes: a request and its answer are each a length (8 bytes, big
endian) and a pickle. Both sides are the grader's own code (a pickle from the judge holds
:class:`~nbhelpers.checks.CheckResult` objects and plain data); nothing a kernel wrote is
unpickled: the judge reads the kernel's files as JSON, as the grader did.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ..checks import CheckResult, CheckStatus
from .jobs import not_dumpable, worker_env

__all__ = ["JUDGE_TIMEOUT_S", "JUDGE_MEMORY_MB", "Judged", "JudgeFailed", "Judges", "judge_serve"]

JUDGE_TIMEOUT_S = 120.0  # seconds to judge one submission (an honest one takes well under one)
JUDGE_MEMORY_MB = 4096  # address space of a judge process (its plans included)

JUDGE_COMMAND = "import sys; from nbhelpers.grading.judge_process import judge_serve; sys.exit(judge_serve())"
_LEN = struct.Struct(">Q")


@dataclass
class Judged:
    """What judging a submission gave: each exercise's result, the graded functions' sources (see
    :func:`nbhelpers.grading.judging.graded_sources`), and the count of lines in its results files
    that did not come from the grading cell; ``cpu_s``: the CPU seconds the judge spent on it."""

    results: dict[str, CheckResult]
    sources: dict[str, dict]
    foreign_lines: int
    cpu_s: float = 0.0


@dataclass
class JudgeFailed:
    """Judging a submission did not finish: ``why`` in words, and whether it was the submission's
    doing (``limit``: its results took more time or memory than a judge has) or the grader's."""

    why: str
    limit: bool


# ---- the judge's side --------------------------------------------------------------------------


def _read_frame(f: Any) -> bytes | None:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    data = f.read(n)
    return data if len(data) == n else None


def _write_frame(f: Any, data: bytes) -> None:
    f.write(_LEN.pack(len(data)) + data)
    f.flush()


def judge_serve() -> int:
    """The judge process: its first request is ``(memory_mb, plans)``, its memory limit and the
    run's plans (through its pipe, never a file: they hold the expected results); then each
    request is ``(chapter, events, cells, missing)`` and each answer a :class:`Judged` or a
    :class:`JudgeFailed`. It exits at the end of its input, or after running out of memory (its
    answer says so). Its memory is unreadable to other processes of the same user (on Linux)
    before the plans arrive."""
    import resource

    not_dumpable()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    first = _read_frame(stdin)
    if first is None:
        return 0
    memory_mb = int.from_bytes(first[:8], "big")
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, resource.RLIM_INFINITY))
    from .judging import judge_submission

    plans = pickle.loads(first[8:])
    del first
    while (frame := _read_frame(stdin)) is not None:
        chapter, events, cells, missing = pickle.loads(frame)
        t0 = time.process_time()
        try:
            answer: Judged | JudgeFailed = Judged(*judge_submission(plans[chapter], events, cells, missing))
            answer.cpu_s = round(time.process_time() - t0, 3)
        except MemoryError:
            answer = JudgeFailed(f"judging its results took more than {memory_mb} MB", limit=True)
        except Exception:  # the grader's own failure, reported as such
            answer = JudgeFailed("the judge failed: " + traceback.format_exc(limit=-3)[-600:], limit=False)
        try:
            _write_frame(stdout, pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        except MemoryError:
            return 1
        if isinstance(answer, JudgeFailed) and answer.limit:
            return 0  # after a MemoryError, a fresh judge
    return 0


# ---- the grader's side -------------------------------------------------------------------------


class JudgeProcess:
    """One judge process, started with the run's plans (pickled)."""

    def __init__(self, plans: bytes, memory_mb: int) -> None:
        self.log = tempfile.TemporaryFile()  # its stderr: a file with no name, gone with it
        self.proc = subprocess.Popen(
            [sys.executable, "-c", JUDGE_COMMAND],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=worker_env(),
            start_new_session=True,
        )
        try:
            _write_frame(self.proc.stdin, memory_mb.to_bytes(8, "big") + plans)
        except OSError:  # it died at once: its first answer says so
            pass

    def judge(self, request: tuple, timeout: float) -> Judged | JudgeFailed:
        try:
            _write_frame(self.proc.stdin, pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            return JudgeFailed("the judge process had died", limit=False)
        deadline = time.monotonic() + timeout
        fd, buf, need = self.proc.stdout.fileno(), b"", None
        while need is None or len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return JudgeFailed(f"judging its results took more than {timeout:g} s", limit=True)
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return JudgeFailed(f"the judge process died ({self._log_tail()})", limit=False)
            buf += chunk
            if need is None and len(buf) >= _LEN.size:
                need = _LEN.size + _LEN.unpack(buf[: _LEN.size])[0]
        return pickle.loads(buf[_LEN.size : need])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _log_tail(self) -> str:
        try:
            self.log.seek(max(0, os.fstat(self.log.fileno()).st_size - 4096))
            return self.log.read().decode(errors="replace").strip().splitlines()[-1][-300:]
        except (OSError, IndexError, ValueError):
            return "no message"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout, self.log):
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # end of its input: it exits
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class Judges:
    """The judge processes of a run: one per grading thread at most, started when first needed,
    reused from one submission to the next, replaced after a failure."""

    def __init__(self, plans: dict, memory_mb: int = JUDGE_MEMORY_MB, timeout: float = JUDGE_TIMEOUT_S) -> None:
        self.memory_mb, self.timeout = memory_mb, timeout
        self.plans_by_chapter = plans
        self.plans = pickle.dumps(plans, protocol=pickle.HIGHEST_PROTOCOL)
        self.lock = threading.Lock()
        self.idle: list[JudgeProcess] = []
        self.all: list[JudgeProcess] = []

    def judge(
        self, chapter: int, events: list, cells: list, missing: tuple
    ) -> tuple[dict, dict, int, str, float | None]:
        """Judge one submission in a judge process: each exercise's result, the graded functions'
        sources, the count of foreign lines, why it could not be judged ("" when it was; the
        results then give no points, see :func:`failed_results`), and the judge's CPU seconds
        (None when it did not finish)."""
        answer = self._judge(chapter, events, cells, missing)
        if isinstance(answer, JudgeFailed):
            return failed_results(self.plans_by_chapter[chapter], answer), {}, 0, answer.why, None
        return answer.results, answer.sources, answer.foreign_lines, "", answer.cpu_s

    def _judge(self, chapter: int, events: list, cells: list, missing: tuple) -> Judged | JudgeFailed:
        with self.lock:
            judge = self.idle.pop() if self.idle else None
            if judge is None:
                judge = JudgeProcess(self.plans, self.memory_mb)
                self.all.append(judge)
        answer = judge.judge((chapter, events, cells, missing), self.timeout)
        with self.lock:
            if isinstance(answer, Judged) and judge.alive():
                self.idle.append(judge)
            else:
                judge.kill()
        return answer

    def close(self, stopping: bool = False) -> None:
        """End the judges: each idle one at the end of its input; every one at once when
        ``stopping`` (Ctrl-C: a judge still judging is not waited for)."""
        with self.lock:
            judges, self.idle = list(self.all), []
        for j in judges:
            if stopping:
                j.kill()
            else:
                j.close()


def failed_results(plan: Any, failure: JudgeFailed) -> dict[str, CheckResult]:
    """Each exercise's result when judging failed: no points; FAIL when the submission's results
    ran past a limit (its doing: the row stands), ERROR when the grader failed (retried on a rerun)."""
    status = CheckStatus.FAIL if failure.limit else CheckStatus.ERROR
    out = {}
    for p in plan.exercises:
        ex = p.exercise
        n = len(p.cases)
        out[ex.id] = CheckResult(ex.id, ex.title, 0, ex.points, n, n, [], failure.why, status=status)
    return out
