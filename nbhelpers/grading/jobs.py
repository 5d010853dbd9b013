"""The grader's side of a worker process: one submission's job folder, starting the worker
(:mod:`nbhelpers.grading.worker`), its total time limit, stopping it and its kernels, and reading
the events it wrote.

Nothing here imports the worker module: the worker is started as
``python -c "from nbhelpers.grading.worker import worker_main ..."`` (:data:`WORKER_COMMAND`).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from .options import GradeOptions

__all__ = ["WORKER_COMMAND", "Job", "Running", "kill_group", "json_lines", "read_events"]

WORKER_COMMAND = ("import sys; from nbhelpers.grading.worker import worker_main; "
                  "sys.exit(worker_main(sys.argv[1]))")


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a kernel and whatever it started)."""
    if not hasattr(os, "killpg"):  # pragma: no cover - not POSIX
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # gone already
        pass


def json_lines(path: str | Path) -> Iterator[Any]:
    """The JSON value of every line of a file that holds one, skipping the others; nothing
    (or what was read so far) when the file cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                yield value
    except OSError:
        return


def read_events(path: Path) -> list[dict]:
    """The events a worker wrote (see :func:`nbhelpers.grading.worker.worker_main`)."""
    return [e for e in json_lines(path) if isinstance(e, dict) and isinstance(e.get("event"), str)]


def worker_env() -> dict:
    """The environment of a worker and its kernel: ours, with this nbhelpers importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds nbhelpers/
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("JPY_PARENT_PID", None)
    return env


class Running:
    """The worker processes alive right now, so that Ctrl-C can stop them all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: dict[int, tuple[subprocess.Popen, Path]] = {}
        self.stopping = False

    def add(self, proc: subprocess.Popen, jobdir: Path) -> None:
        with self.lock:
            self.procs[proc.pid] = (proc, jobdir)

    def remove(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.procs.pop(proc.pid, None)

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            procs = list(self.procs.values())
        for proc, jobdir in procs:
            stop_worker(proc, jobdir)


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


def stop_worker(proc: subprocess.Popen, jobdir: Path) -> None:
    """Stop a worker and its kernels: SIGTERM (the worker kills its kernel), then SIGKILL."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            pass
    kernels = []
    try:
        kernels = [int(x) for x in (jobdir / "kernels.txt").read_text().split() if x.isdigit()]
    except OSError:
        pass
    for pid in kernels:
        if _is_our_kernel(pid, proc.pid):
            kill_group(pid)
    if proc.poll() is None:
        kill_group(proc.pid)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class Job:
    """One submission's run in a worker, in a temporary folder deleted on :meth:`close`:
    ``job.json`` (what the worker is to do), ``inputs.json`` (the case inputs), what the worker
    and the kernel write (``events.jsonl``, ``outputs.jsonl``, ``kernels.txt``, ``worker.log``)
    and ``kernel/``, the kernel's working folder, empty.

    cells: ``[index, source, is a check cell]`` of the notebook's code cells;
    exercise_ids: the exercises the kernel is to check.
    """

    def __init__(self, cells: list, inputs_json: str, exercise_ids: list[str], opts: GradeOptions) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nbgrade-"))
        try:
            self._write(cells, inputs_json, exercise_ids, opts)
        except BaseException:
            self.close()
            raise

    def _write(self, cells: list, inputs_json: str, exercise_ids: list[str], opts: GradeOptions) -> None:
        self.kernel_dir = self.dir / "kernel"
        self.kernel_dir.mkdir()
        inputs = self.dir / "inputs.json"
        inputs.write_text(inputs_json, encoding="utf-8")
        job = {
            "cells": cells,
            "cwd": str(self.kernel_dir),
            "inputs": str(inputs),
            "outputs": str(self.outputs),
            "events": str(self.dir / "events.jsonl"),
            "kernels": str(self.dir / "kernels.txt"),
            "cell_timeout": opts.cell_timeout,
            "budget": opts.cell_timeout,
            "kernel_name": opts.kernel_name,
            "exercise_ids": exercise_ids,
        }
        (self.dir / "job.json").write_text(json.dumps(job), encoding="utf-8")

    @property
    def outputs(self) -> Path:
        """The kernel's results, one JSON line per exercise (see in_kernel.kernel_main)."""
        return self.dir / "outputs.jsonl"

    def run(self, running: Running, timeout: float) -> bool:
        """Run the worker to its end, or until ``timeout`` seconds have passed; then make sure it
        and its kernels are gone. True when the time ran out."""
        with open(self.dir / "worker.log", "wb") as log:
            if running.stopping:
                raise KeyboardInterrupt
            proc = subprocess.Popen(
                [sys.executable, "-c", WORKER_COMMAND, str(self.dir / "job.json")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=str(self.kernel_dir),
                env=worker_env(), start_new_session=True)
            running.add(proc, self.dir)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return True
            finally:
                stop_worker(proc, self.dir)
                running.remove(proc)
        return False

    def events(self) -> list[dict]:
        return read_events(self.dir / "events.jsonl")

    def log_tail(self, lines: int = 3) -> list[str]:
        """The last lines of what the worker printed (it prints only when it fails)."""
        try:
            return (self.dir / "worker.log").read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return []

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
