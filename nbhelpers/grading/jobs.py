"""The grader's side of a worker process: one submission's job folder, starting the worker
(:mod:`nbhelpers.grading.worker`), its total time limit, stopping it and its kernels, and reading
the events it wrote; the two vocabularies the worker shares with the grader, its answers
(:class:`WorkerAnswer`) and the kinds of its events (:class:`Event`).

Nothing here imports the worker module: the worker is started as
``python -c "from nbhelpers.grading.worker import worker_main ..."`` (:data:`WORKER_COMMAND`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

from .cgroups import CGROUP_ROOT, PREFIX, empty_and_remove
from .options import MAX_EVENTS, MAX_OUTPUT_LINE_BYTES, GradeOptions
from .sandbox import ONE_THREAD_ENV
from .untrusted import safe_data, safe_text

__all__ = [
    "WORKER_COMMAND",
    "WorkerAnswer",
    "Event",
    "Job",
    "Running",
    "WorkerProcess",
    "kill_group",
    "remove_stale",
    "not_dumpable",
    "raw_lines",
    "json_lines",
    "read_events",
]

WORKER_COMMAND = (
    "import sys; from nbhelpers.grading.worker import worker_loop; "
    "sys.exit(worker_loop(int(sys.argv[1]), int(sys.argv[2])))"
)
JOBS_PER_WORKER = 40  # a worker is replaced after this many jobs (bounds any slow leak)


class WorkerAnswer(StrEnum):
    """How a job ended, as :meth:`WorkerProcess.run` tells it. The worker writes DONE or FAILED,
    the value and a newline, on its replies pipe (:func:`nbhelpers.grading.worker.worker_loop`);
    TIMEOUT is the grader's own, when no answer came in time."""

    DONE = "done"  # the worker ran the job to its end
    FAILED = "failed"  # the worker raised, or died
    TIMEOUT = "timeout"  # no answer within the time limit: the worker is to be stopped


class Event(StrEnum):
    """The kind of a worker's event: its ``"event"`` field, as the worker writes it to the job's
    events file (:mod:`nbhelpers.grading.worker`) and judging reads back (:func:`read_events`,
    :mod:`nbhelpers.grading.judging`)."""

    CELL_ERROR = "cell_error"  # a cell raised (ename, evalue)
    CELL_TIMEOUT = "cell_timeout"  # a cell ran past the time limit and was interrupted (seconds)
    KERNEL_DIED = "kernel_died"  # in a cell, or while an exercise (or the grading cell) was checked
    GRADING_ERROR = "grading_error"  # the grading cell itself raised
    GRADING_CELL = "grading_cell"  # a grading cell's results file and nonce
    LIMIT_REACHED = "limit_reached"  # a kernel ran into a limit of its cgroups (limits: "memory", "processes")
    DONE = "done"  # the worker got to the end of the job


def not_dumpable() -> None:
    """Linux: make this process's memory, environment and open files unreadable to other processes
    of the same user (prctl PR_SET_DUMPABLE 0), so a student's kernel cannot read the seed or the
    expected results there. Children start dumpable again after exec, so workers and kernels are
    unaffected; a judge process makes itself non-dumpable too."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # pragma: no cover
        pass


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a kernel and whatever it started)."""
    if not hasattr(os, "killpg"):  # pragma: no cover - not POSIX
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # gone already
        pass


def raw_lines(
    path: str | Path, max_line: int = MAX_OUTPUT_LINE_BYTES, max_total: int = 4 * MAX_OUTPUT_LINE_BYTES
) -> Iterator[bytes | None]:
    """The lines of a file a kernel may have written, read with care: only a regular file (never
    through a link), lines longer than ``max_line`` given as None (and skipped over, not kept),
    and no more than ``max_total`` bytes in all. Nothing when the file cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        total = 0
        while total < max_total:
            line = f.readline(max_line + 1)
            if not line:
                return
            total += len(line)
            if len(line) <= max_line:
                yield line
                continue
            while line and not line.endswith(b"\n") and total < max_total:  # skip the rest of it
                line = f.readline(max_line)
                total += len(line)
            yield None


def json_lines(path: str | Path, max_line: int = MAX_OUTPUT_LINE_BYTES) -> Iterator[Any]:
    """The JSON value of every line of a file that holds one (strings made safe), skipping the
    others; read as :func:`raw_lines` reads."""
    for line in raw_lines(path, max_line):
        if line is None:
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue
        yield safe_data(value)


def read_events(path: Path) -> list[dict]:
    """The events a worker wrote (see :func:`nbhelpers.grading.worker.worker_main`), strings made
    safe, at most :data:`MAX_EVENTS`."""
    events = []
    for e in json_lines(path, max_line=64 * 2**10):
        if isinstance(e, dict) and isinstance(e.get("event"), str):
            events.append(e)
            if len(events) >= MAX_EVENTS:
                break
    return events


def worker_env() -> dict:
    """The environment of a worker and its kernel: ours, with this nbhelpers importable and BLAS
    on one thread (:data:`~nbhelpers.grading.sandbox.ONE_THREAD_ENV`)."""
    env = {**os.environ, **ONE_THREAD_ENV}
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds nbhelpers/
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("JPY_PARENT_PID", None)
    return env


class WorkerProcess:
    """A worker process that runs one job after another: it reads a job file's path from one
    pipe and answers on another when it is done (its stdout and stderr go to a log file, where
    the kernels' own output goes too). Reusing it saves a Python start and the imports of
    nbclient per submission."""

    def __init__(self, log: Path) -> None:
        self.log = log
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            with open(log, "ab") as out:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", WORKER_COMMAND, str(cmd_r), str(rep_w)],
                    pass_fds=(cmd_r, rep_w),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=str(log.parent),
                    env=worker_env(),
                    start_new_session=True,
                )
        finally:
            os.close(cmd_r)
            os.close(rep_w)
        self.cmd, self.replies, self.jobs = cmd_w, rep_r, 0
        self.jobdir: Path | None = None

    def run(self, jobdir: Path, timeout: float) -> WorkerAnswer:
        """Run the job in ``jobdir``: DONE, FAILED (the worker raised, or died), or TIMEOUT (it
        did not answer within ``timeout`` seconds; stop it then)."""
        self.jobdir, self.jobs = jobdir, self.jobs + 1
        try:
            os.write(self.cmd, (str(jobdir / "job.json") + "\n").encode())
        except OSError:
            return WorkerAnswer.FAILED
        deadline, answer = time.monotonic() + timeout, b""
        while not answer.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                return WorkerAnswer.TIMEOUT
            ready, _, _ = select.select([self.replies], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.replies, 64)
            if not chunk:
                return WorkerAnswer.FAILED  # the worker died
            answer += chunk
        return WorkerAnswer.DONE if answer.strip() == WorkerAnswer.DONE.encode() else WorkerAnswer.FAILED

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 3) -> list[str]:
        """The last lines of what the worker (and its kernels) printed."""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
                text = f.read().decode(errors="replace")
        except OSError:
            return []
        return [safe_text(ln) for ln in text.strip().splitlines()[-lines:]]

    def stop(self) -> None:
        """Stop the worker and the kernels of its current job."""
        stop_worker(self.proc, self.jobdir)
        self.close_pipes()

    def close_pipes(self) -> None:
        for fd in (self.cmd, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass


class Running:
    """The worker processes of a run: idle ones to reuse, busy ones to stop on Ctrl-C."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.dir = Path(tempfile.mkdtemp(prefix=f"nbgrade-workers-{os.getpid()}-"))
        self.idle: list[WorkerProcess] = []
        self.busy: set[WorkerProcess] = set()
        self.started = 0
        self.stopping = False

    def acquire(self) -> WorkerProcess:
        with self.lock:
            if self.stopping:
                raise KeyboardInterrupt
            while self.idle:
                w = self.idle.pop()
                if w.alive():
                    self.busy.add(w)
                    return w
                w.close_pipes()
            self.started += 1
            log = self.dir / f"worker{self.started}.log"
        w = WorkerProcess(log)
        with self.lock:
            self.busy.add(w)
        return w

    def release(self, w: WorkerProcess, reusable: bool) -> None:
        with self.lock:
            self.busy.discard(w)
            if reusable and w.alive() and w.jobs < JOBS_PER_WORKER and not self.stopping:
                self.idle.append(w)
                return
        w.stop()

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            workers = list(self.busy) + self.idle
            self.idle = []
        for w in workers:
            w.stop()

    def close(self) -> None:
        """Stop the idle workers (the end of the run) and delete their logs."""
        with self.lock:
            workers, self.idle = self.idle, []
        for w in workers:
            w.close_pipes()  # end of its input: it exits
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                w.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _is_our_kernel(pid: int, worker_pid: int) -> bool:
    """Whether process ``pid`` is still the kernel our worker ``worker_pid`` started (and not a
    stranger that reused the number): a process group leader whose environment names the worker."""
    try:
        if os.getpgid(pid) != pid:
            return False
    except OSError:
        return False
    environ = Path(f"/proc/{pid}/environ")
    if not environ.parent.exists():
        return True  # no /proc (macOS): the group check is all there is
    try:
        return f"JPY_PARENT_PID={worker_pid}".encode() in environ.read_bytes().split(b"\0")
    except OSError:
        return False


def stop_worker(proc: subprocess.Popen, jobdir: Path | None) -> None:
    """Stop a worker and its kernels: SIGTERM (the worker kills its kernel), then SIGKILL."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            pass
    kernels = []
    try:
        if jobdir is not None:
            kernels = [int(x) for x in (jobdir / "kernels.txt").read_text().split() if x.isdigit()]
    except OSError:
        pass
    for pid in kernels:
        if _is_our_kernel(pid, proc.pid):
            kill_group(pid)
    _remove_cgroups(jobdir)
    if proc.poll() is None:
        kill_group(proc.pid)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _owner_gone(name: str) -> bool:
    """Whether the grader (or worker) whose pid a temporary folder's or cgroup's name holds
    (``nbgrade-[KIND-]PID-...``) is no longer running. False when the name holds no pid."""
    parts = name.split("-")
    pid = next((parts[k] for k in (1, 2) if k < len(parts) - 1 and parts[k].isdigit()), None)
    if pid is None:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:  # a zombie (killed, not yet reaped: its parent was killed too) is gone as well
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def remove_stale(folders: list[Path], cgroup_parents: list[Path] = ()) -> list[Path]:
    """Delete what graders no longer running left behind (a grader and its workers killed
    together, by an out-of-memory kill or a reboot, cannot clean up): folders named
    ``nbgrade-...-PID-...`` in each of ``folders`` (the temporary folder, /dev/shm) owned by this
    user, and empty cgroups of the same kind of name in ``cgroup_parents`` (what is still in them
    is killed first). Returns what was removed."""
    gone = []
    for parent in folders:
        for d in parent.glob("nbgrade-*"):
            try:
                if d.is_symlink() or not d.is_dir() or d.stat().st_uid != os.getuid() or not _owner_gone(d.name):
                    continue
            except OSError:
                continue
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d)
    for parent in cgroup_parents:
        for d in parent.glob(f"{PREFIX}*"):
            if not d.is_dir() or not _owner_gone(d.name):
                continue
            empty_and_remove(d)
            gone.append(d)
    return gone


def _remove_cgroups(jobdir: Path | None) -> None:
    """Empty and delete the cgroups the worker made for the job's kernels (``cgroups.txt``) and
    did not delete itself: it was killed. Only the grader's own cgroups (named ``nbgrade-...``, in
    the cgroup file system) are touched, whatever the file says."""
    try:
        listed = (jobdir / "cgroups.txt").read_text().split() if jobdir is not None else []
    except OSError:
        return
    for line in listed:
        d = Path(line)
        if d.name.startswith(PREFIX) and d.is_relative_to(CGROUP_ROOT) and ".." not in d.parts:
            empty_and_remove(d)


class Job:
    """One submission's run in a worker, in a temporary folder deleted on :meth:`close`:
    ``job.json`` (what the worker is to do), ``inputs.json`` (the case inputs), what the worker
    writes (``events.jsonl``, ``kernels.txt``), ``kernel/`` (the working folder of
    a kernel run without the sandbox, empty) and one channel folder per kernel, made by the
    worker (``k1-…``: the kernel's sockets, a copy of the inputs, its grading cell's results).
    Only the channel folders are visible in a kernel's sandbox.

    cells: ``[index, source, is a check cell]`` of the notebook's code cells;
    exercise_ids: the exercises the kernel is to check;
    definitions: ``[index, source]`` of what runs in the clean kernel the functions are graded in
    (:mod:`nbhelpers.grading.definitions`; None: every cell but the check cells);
    groups: the clean kernels, ``{"ids": exercises, "view": None or a tools kernel's view}``
    (:mod:`nbhelpers.grading.tools_view`; None: one kernel for every exercise), and
    definitions_each: the program as a tools kernel runs it (each statement alone); outside: for
    each exercise with tools, the notebook's top-level names made outside them (for its watch)."""

    def __init__(
        self,
        cells: list,
        inputs_json: str,
        exercise_ids: list[str],
        opts: GradeOptions,
        definitions: list | None = None,
        groups: list | None = None,
        definitions_each: list | None = None,
        outside: dict | None = None,
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"nbgrade-{os.getpid()}-"))
        self.failure_log: list[str] = []
        if definitions is None:  # the whole notebook, check cells left out
            definitions = [[i, src] for i, src, check_only in cells if not check_only]
        try:
            self._write(cells, inputs_json, exercise_ids, opts, definitions)
            if groups or outside:
                job = json.loads((self.dir / "job.json").read_text(encoding="utf-8"))
                if groups:
                    job["groups"], job["definitions_each"] = groups, definitions_each or definitions
                job["outside"] = outside or {}
                (self.dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
        except BaseException:
            self.close()
            raise

    def _write(
        self, cells: list, inputs_json: str, exercise_ids: list[str], opts: GradeOptions, definitions: list
    ) -> None:
        # the kernels' channel folders: on the run's tmpfs where there is one (what a kernel writes
        # there counts in its memory cgroup), else here
        self.channels = self.dir
        if opts.channels_root:
            self.channels = Path(tempfile.mkdtemp(prefix="nbgrade-", dir=opts.channels_root))
        self.kernel_dir = self.dir / "kernel"
        self.kernel_dir.mkdir()
        inputs = self.dir / "inputs.json"
        inputs.write_text(inputs_json, encoding="utf-8")
        job = {
            "cells": cells,
            "definitions": definitions,
            "dir": str(self.dir),
            "channels": str(self.channels),
            "cwd": str(self.kernel_dir),
            "inputs": str(inputs),
            "events": str(self.dir / "events.jsonl"),
            "kernels": str(self.dir / "kernels.txt"),
            "cell_timeout": opts.cell_timeout,
            "budget": opts.cell_timeout,
            "kernel_name": opts.kernel_name,
            "exercise_ids": exercise_ids,
            "sandbox": opts.sandbox,
            "limits": dataclasses.asdict(opts.limits),
            "cgroups": dataclasses.asdict(opts.cgroups) if opts.cgroups is not None else None,
            "max_line": MAX_OUTPUT_LINE_BYTES,
        }
        (self.dir / "job.json").write_text(json.dumps(job), encoding="utf-8")

    def run(self, running: Running, timeout: float) -> bool:
        """Run the job in a worker to its end, or until ``timeout`` seconds have passed (the worker
        and its kernels are then stopped). True when the time ran out."""
        worker = running.acquire()
        try:
            answer = worker.run(self.dir, timeout)
        except BaseException:
            running.release(worker, reusable=False)
            raise
        self.failure_log = worker.log_tail() if answer is WorkerAnswer.FAILED else []
        running.release(worker, reusable=answer is WorkerAnswer.DONE)
        return answer is WorkerAnswer.TIMEOUT

    def events(self) -> list[dict]:
        return read_events(self.dir / "events.jsonl")

    def log_tail(self) -> list[str]:
        """The last lines the worker printed, when it failed on this job."""
        return self.failure_log

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        if getattr(self, "channels", self.dir) != self.dir:
            shutil.rmtree(self.channels, ignore_errors=True)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
