"""The worker: a process of its own that runs submissions' notebooks in Jupyter kernels, one
submission after another.

The grader starts it (:class:`nbhelpers.grading.jobs.WorkerProcess`) as
``python -c "from nbhelpers.grading.worker import worker_loop; ..." CMD_FD REPLY_FD``, hands it
one job file at a time, and kills it, with its kernel, when a submission's total time runs out.
For each job the worker runs the notebook's code cells (check cells skipped) in a fresh kernel,
started in its sandbox (:mod:`nbhelpers.grading.sandbox`), with a time limit per cell, then the
grading cell (:func:`grading_cell`), which runs :mod:`nbhelpers.grading.in_kernel` in the kernel.
A kernel that dies is retried once, then started again without the cell, or the function, that
killed it. The worker reports through files, never through stdout: events as JSON lines
(:meth:`_Worker.event`), and the grading cells' results files.

Only the worker process imports this module (it imports nbclient and nbformat).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

# nbformat imports jsonschema, which imports the optional rfc3987_syntax when it is installed;
# that builds a parser and costs about a second per submission. Nothing here validates IRIs.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import nbformat  # noqa: E402
import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402
from jupyter_client import AsyncKernelManager  # noqa: E402
from nbclient import NotebookClient  # noqa: E402
from nbclient.exceptions import DeadKernelError  # noqa: E402

from ..call_watch import CallWatch  # noqa: E402
from .absent import install as install_absent  # noqa: E402
from .cgroups import Cgroups, SubmissionCgroup  # noqa: E402
from .in_kernel import WALL_FACTOR, kernel_main  # noqa: E402
from .jobs import Event, WorkerAnswer, json_lines, kill_group  # noqa: E402
from .options import (  # noqa: E402
    MAX_KERNEL_MESSAGE_BYTES,
    MAX_KERNEL_MESSAGES_QUEUED,
    MAX_KERNEL_STARTS,
    WORKER_MEMORY_MB,
)
from .sandbox import Limits, kernel_command  # noqa: E402

__all__ = [
    "worker_loop",
    "worker_main",
    "grading_cell",
    "absent_cell",
    "kernel_source",
    "without_debugger",
    "KERNEL_LAUNCHER",
]

_current_kernel_pid: list[int] = []  # the kernel to kill when the grader stops this worker
_on_exit: list = []  # what to do before this worker is stopped (record the nonces it used)
_current_job_dir: list[str] = []  # the job folder to delete when the grader is gone
_current_cgroup: list[SubmissionCgroup] = []  # the kernel's cgroups, to empty and delete on the way out
_channels_root: list[str] = []  # the run's folder of channel folders on /dev/shm, once a job named it
#: how often a worker checks that the grader that started it is still there (seconds)
PARENT_CHECK_S = 0.5


#: The one line of in_kernel that imports from the course's package; the kernel gets the module's
#: source in its place.
WATCH_IMPORT = "from ..call_watch import READ_FINDINGS, CallWatch, in_profile_hook\n"


def kernel_source() -> str:
    """The source of :mod:`nbhelpers.grading.in_kernel`, which the kernel runs in a fresh
    namespace, with :mod:`nbhelpers.call_watch`'s source (less its ``__future__`` import, which
    in_kernel's first lines make) in place of its import of it."""
    source = inspect.getsource(sys.modules[kernel_main.__module__])
    watch = inspect.getsource(sys.modules[CallWatch.__module__])
    watch = watch.replace("from __future__ import annotations\n", "", 1)
    if source.count(WATCH_IMPORT) != 1 or "from __future__" in watch:
        raise RuntimeError(
            "in_kernel must import CallWatch in one line, and call_watch import nothing from __future__ but annotations"
        )
    return source.replace(WATCH_IMPORT, watch)


#: What a kernel runs instead of ``-m ipykernel_launcher``: the same kernel, without the debugger a
#: frontend may attach (debugpy, imported when the kernel starts: about 0.15 CPU-s of each start,
#: twice per submission). Nobody debugs a graded kernel. Where debugpy is already imported, it is
#: left alone.
KERNEL_LAUNCHER = (
    "import ipykernel.kernelapp as ipykernel_app, sys; "
    "sys.modules.setdefault('debugpy', None); "
    "ipykernel_app.launch_new_instance()"
)


def without_debugger(argv: list[str]) -> list[str]:
    """ipykernel's own command (``PYTHON [-Xfrozen_modules=off] -m ipykernel_launcher ARGS``, as
    its kernel spec says) as ``PYTHON -c KERNEL_LAUNCHER ARGS``; any other command unchanged.
    (``-Xfrozen_modules=off`` is there only for the debugger.)"""
    rest = argv[1:]
    if rest[:1] == ["-Xfrozen_modules=off"]:
        rest = rest[1:]
    if rest[:2] != ["-m", "ipykernel_launcher"]:
        return list(argv)
    return [argv[0], "-c", KERNEL_LAUNCHER, *rest[2:]]


def grading_cell(job: dict) -> str:
    """The cell appended to a submission: runs ``in_kernel.kernel_main`` on the notebook's namespace.

    Only builtins reached through the ``builtins`` module are used, so a notebook that reuses
    names such as ``exec`` or ``compile`` does not break it.
    """
    return (
        "def __nbhelpers_grade_cell():\n"
        "    import builtins as b\n"
        "    ns = {'__name__': 'nbhelpers_grade_runner'}\n"
        f"    b.exec(b.compile({kernel_source()!r}, '<nbhelpers.grading.in_kernel>', 'exec'), ns)\n"
        f"    ns['kernel_main'](b.globals(), {job!r})\n"
        "__nbhelpers_grade_cell()\n"
    )


def absent_cell(names: list[str]) -> str:
    """The first cell of a tools kernel (:mod:`nbhelpers.grading.tools_view`): imports of
    ``names`` give stand-ins there (:mod:`nbhelpers.grading.absent`, sent as source, since the
    kernel does not hold the course's package)."""
    source = inspect.getsource(sys.modules[install_absent.__module__])
    return (
        "def __nbhelpers_absent():\n"
        "    import builtins as b\n"
        "    ns = {'__name__': 'not_installed_here'}\n"
        f"    b.exec(b.compile({source!r}, '<nbhelpers.grading.absent>', 'exec'), ns)\n"
        f"    ns['install']({list(names)!r})\n"
        "__nbhelpers_absent()\n"
    )


def worker_loop(commands_fd: int, replies_fd: int) -> int:
    """A worker's life: read a job file's path per line from ``commands_fd``, run it
    (:func:`worker_main`), answer DONE or FAILED (:class:`~nbhelpers.grading.jobs.WorkerAnswer`)
    on ``replies_fd``; exit at the end of input."""
    signal.signal(signal.SIGTERM, _on_term)
    limit_own_memory(WORKER_MEMORY_MB)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True, name="parent-watch").start()
    with os.fdopen(commands_fd, "r") as commands, os.fdopen(replies_fd, "w") as replies:
        for line in commands:
            try:
                worker_main(line.strip())
                answer = WorkerAnswer.DONE
            except Exception:  # reported in the log; the grader records "grader error"
                traceback.print_exc()
                answer = WorkerAnswer.FAILED
            finally:
                _current_kernel_pid.clear()
                _on_exit.clear()
                _current_job_dir.clear()
                _current_cgroup.clear()
            sys.stdout.flush()
            replies.write(answer.value + "\n")
            replies.flush()
    return 0


def limit_own_memory(mb: int) -> None:
    """Cap this worker's address space at ``mb`` MB (the soft limit: a kernel's own limit replaces
    it), so that whatever a kernel makes it hold fails this job (``MemoryError``: "grader error",
    retried on a rerun) instead of taking the machine's memory from the classmates."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = mb * 2**20
    if hard == resource.RLIM_INFINITY or want <= hard:
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))


def _peak_mb() -> int | None:
    """The most memory this worker has held at once so far (resident, MB; None: not known)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
    return round(kb / 1024 / (1024 if sys.platform == "darwin" else 1))


def worker_main(job_path: str) -> int:
    """Run the notebook described by the job file (see :class:`nbhelpers.grading.jobs.Job`).

    Appends events (JSON lines, kinds :class:`~nbhelpers.grading.jobs.Event`) to
    ``job["events"]``: ``cell_error``, ``cell_timeout`` (a cell interrupted at the time limit),
    ``kernel_died`` (after which the kernel is restarted without the cell or function that
    killed it), ``grading_error``, ``grading_cell``, and ``done`` at the end.
    """
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    _current_job_dir[:] = list(dict.fromkeys([str(job["dir"]), str(job.get("channels", job["dir"]))]))
    root = Path(job.get("channels", job["dir"])).parent
    if root.name.startswith("nbgrade-channels-"):
        _channels_root[:] = [str(root)]
    _Worker(job).run()
    return 0


def _watch_parent(grader: int) -> None:
    """Stop this worker once the grader that started it is gone (killed with kill -9, it cannot
    stop its workers; the worker is then the child of another process): the kernel is killed
    as on SIGTERM, and the job's folder (inputs, outputs, channels) and the run's folder of
    worker logs are deleted, since no grader will. Runs in a daemon thread."""
    while os.getppid() == grader:
        time.sleep(PARENT_CHECK_S)
    for pid in _current_kernel_pid:
        kill_group(pid)
    for cg in _current_cgroup:
        cg.remove()
    for folder in (*_current_job_dir, os.getcwd()):
        if Path(folder).name.startswith("nbgrade-"):  # only the grader's own temporary folders
            shutil.rmtree(folder, ignore_errors=True)
    for root in _channels_root:
        try:  # the run's folder of channel folders, once the last worker has emptied it
            os.rmdir(root)
        except OSError:
            pass
    os._exit(143)


def _on_term(signum: int, frame: Any) -> None:
    for pid in _current_kernel_pid:
        kill_group(pid)
    for cg in _current_cgroup:
        cg.remove()
    for fn in _on_exit:
        try:
            fn()
        except Exception:  # stopping regardless
            pass
    os._exit(143)


_capped_context: list[zmq.asyncio.Context] = []


def capped_context() -> zmq.asyncio.Context:
    """The ZeroMQ context of every connection to a kernel: its sockets refuse a message larger
    than MAX_KERNEL_MESSAGE_BYTES before it is received (the kernel is disconnected, the message
    dropped), so that nothing a kernel sends (a 400 MB print) is ever held whole in this worker;
    and they queue at most MAX_KERNEL_MESSAGES_QUEUED messages not yet read, so that a stream of
    messages (widgets opened in a loop) sent faster than this worker reads them, as it does when
    other jobs share its cores, waits in the kernel's memory rather than in this worker's."""
    if not _capped_context:
        ctx = zmq.asyncio.Context()
        ctx.setsockopt(zmq.MAXMSGSIZE, MAX_KERNEL_MESSAGE_BYTES)
        ctx.setsockopt(zmq.RCVHWM, MAX_KERNEL_MESSAGES_QUEUED)
        _capped_context.append(ctx)
    return _capped_context[0]


class _KernelManager(AsyncKernelManager):
    """A kernel manager whose clients talk through :func:`capped_context`."""

    def client(self, **kwargs: Any) -> Any:
        kwargs.setdefault("context", capped_context())
        return super().client(**kwargs)


class _Client(NotebookClient):
    """nbclient's client, keeping only error outputs, and each cell's execute reply status;
    nothing of widgets (comm messages) or display ids, which nbclient would otherwise keep for
    as long as the kernel sends them."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, on_cell_executed=self._note_reply, **kw)
        self.reply_errors: dict[int, dict] = {}  # cell index -> ename, evalue of a reply with status "error"

    def _note_reply(self, cell: Any, cell_index: int, execute_reply: dict) -> None:
        content = (execute_reply or {}).get("content", {})
        if content.get("status") == "error":
            self.reply_errors[cell_index] = {
                "ename": str(content.get("ename", ""))[:200],
                "evalue": str(content.get("evalue", ""))[:2000],
            }
        else:
            self.reply_errors.pop(cell_index, None)

    def handle_comm_msg(self, outs, msg, cell_index):  # no widget state, no comm objects, no log line
        return None

    def _update_display_id(self, display_id, msg):  # display ids are not kept either
        return None

    def output(self, outs, msg, display_id, cell_index):  # keep errors only: bounded memory
        if msg.get("msg_type") == "error":
            content = msg.get("content", {})
            outs.append(
                nbformat.v4.new_output(
                    "error",
                    ename=str(content.get("ename", ""))[:200],
                    evalue=str(content.get("evalue", ""))[:2000],
                    traceback=[],
                )
            )
        return None


def _first_line(src: str) -> str:
    line = next((ln.strip() for ln in src.splitlines() if ln.strip()), "")
    return line if len(line) <= 40 else line[:37] + "..."


def _errors(cell: Any, client: _Client | None = None, pos: int | None = None) -> list:
    """The cell's error outputs; when there are none but the kernel's reply said the cell failed
    (an error whose message the kernel could not send, such as one holding a lone surrogate),
    that failure, so that it is reported rather than lost."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    reply = client.reply_errors.get(pos) if client is not None and pos is not None else None
    if not errors and reply is not None:
        why = f"its message could not be sent ({reply['ename']}: {reply['evalue']})"
        errors = [{"output_type": "error", "ename": "an exception", "evalue": why[:2000]}]
    return errors


def _progress_in_outputs(path: str, nonce: str) -> tuple[set[str], list[str]]:
    """The exercises the kernel finished, and those it started, as its grading cell wrote."""
    finished, started = set(), []
    for rec in json_lines(path):
        if not (isinstance(rec, dict) and rec.get("n") == nonce):
            continue
        if isinstance(rec.get("start"), str):
            started.append(rec["start"])
        elif isinstance(rec.get("id"), str):
            finished.add(rec["id"])
    return finished, started


def make_cell_files(cell_dir: Path, files: dict[str, bytes]) -> None:
    """Make the folder ``cell_dir`` and the ``files`` in it (name -> bytes; none may exist yet),
    created through a descriptor of the folder just made, never through a link: the kernel can
    rename the entries of its channel while this runs, and a folder swapped for a link (to a
    folder of the attacker's choosing, outside the sandbox) makes this fail instead of writing
    there. The files are readable by this user only."""
    cell_dir.mkdir(mode=0o700)
    dfd = os.open(cell_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name, data in files.items():
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
    finally:
        os.close(dfd)


class _Worker:
    """One submission's notebook, run in one kernel after another until one gets to the end.

    Each kernel gets a channel folder of its own, made here with an unguessable name: its
    connection file and sockets, the case inputs, and the results its grading cell writes. A
    kernel that dies is retried once as it was; if it dies again at the same place, the cell
    (or the function) that killed it is left out.
    """

    def __init__(self, job: dict) -> None:
        self.job = job
        self.events = open(job["events"], "a", encoding="utf-8")
        self.cell_timeout = float(job["cell_timeout"])
        self.cells = [(i, src) for i, src, check_only in job["cells"] if src.strip() and not check_only]
        # the program of the notebook's definitions, as cells (nbhelpers.grading.definitions): all
        # that runs in the clean kernel the functions are graded in
        self.definitions = [(int(i), str(src)) for i, src in job.get("definitions", [])]
        self.clean = False  # False: the notebook runs whole; True: its definitions, then the grading cell
        self.remaining = list(job["exercise_ids"])  # the exercises still to check
        # the clean kernels, each with the exercises it checks: the one with every module
        # installed, and a tools kernel for each set of tools (nbhelpers.grading.tools_view)
        self.groups = job.get("groups") or [{"ids": list(job["exercise_ids"]), "view": None}]
        self.definitions_each = [(int(i), str(src)) for i, src in job.get("definitions_each", [])]
        self.view: dict | None = None  # the tools kernel's view, while one runs
        self.dead_cells: set[int] = set()  # cells that killed a kernel twice: not run again
        self.deaths: dict[Any, int] = {}  # cell index or exercise id -> kernels it killed
        self.reported: set[tuple] = set()  # (clean, kind, cell) already reported by an earlier kernel
        self.limits = Limits(**job["limits"])
        where = job.get("cgroups")
        self.cgroups = Cgroups(int(where["version"]), dict(where["parents"])) if where else None
        self.kernel_cpu_s: float | None = None  # CPU seconds of the kernels' cgroups, where counted

    def event(self, event: Event, **kw: Any) -> None:
        self.events.write(json.dumps({"event": event.value, **kw}) + "\n")
        self.events.flush()

    def run(self) -> None:
        """The notebook, whole, in one kernel after another until one gets to its end (its errors
        and time-outs are what the notebook does); then, in a fresh kernel, only its definitions
        and the grading cell: the functions graded are those the notebook's visible definitions
        make, with no hook, thread or state that its other statements could have left."""
        starts = 0
        phases = [(False, None)] + [(True, group) for group in self.groups]
        for clean, group in phases:
            self.clean, self.dead_cells = clean, set()
            self.deaths = {k: v for k, v in self.deaths.items() if not isinstance(k, int)}
            if group is not None:
                self.remaining = list(group["ids"])
                self.view = group.get("view")
                if not self.remaining and len(self.groups) > 1:  # every function in a tools kernel
                    continue
            for _ in range(MAX_KERNEL_STARTS):
                starts += 1
                if not self._in_a_kernel(starts):
                    break
        cpu = None if self.kernel_cpu_s is None else round(self.kernel_cpu_s, 3)
        self.event(Event.DONE, kernel_starts=starts, worker_peak_mb=_peak_mb(), kernel_cpu_s=cpu)
        self.events.close()

    def _phase(self) -> dict:
        """What an event of the clean kernel carries, to tell it from the notebook's."""
        if not self.clean:
            return {}
        return {"definitions": True, "tools": True} if self.view is not None else {"definitions": True}

    def _kernel_manager(self, channel: Path, cgroup: SubmissionCgroup | None) -> AsyncKernelManager:
        """A kernel manager whose kernel starts under the limits (in the sandbox, unless the job
        says no, and in ``cgroup`` when there is one) and talks through Unix sockets in
        ``channel`` (no network is needed)."""
        km = _KernelManager(kernel_name=self.job["kernel_name"])
        spec = km.kernel_spec
        argv = list(spec.argv)
        if argv and argv[0] in ("python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
            argv[0] = sys.executable
        argv = without_debugger(argv)
        join = cgroup.procs_files if cgroup is not None else ()
        spec.argv = kernel_command(argv, channel, self.limits, bool(self.job["sandbox"]), join, self.view)
        spec.interrupt_mode = "message"  # a signal cannot reach into the sandbox; a message can
        km.transport = "ipc"
        km.ip = str(channel / "k")
        km.connection_file = str(channel / "connection.json")
        return km

    def _in_a_kernel(self, start: int) -> bool:
        """Run the notebook in a fresh kernel (in the clean kernel: its definitions, then the
        grading cell); True when the kernel died and this is to run again in another."""
        cells = self.definitions if self.clean else self.cells
        if self.clean and self.view is not None:  # a tools kernel: stand-ins, then each statement alone
            cells = [(-1, absent_cell(self.view["stub"])), *self.definitions_each]
        channel = Path(self.job.get("channels", self.job["dir"])) / f"k{start}-{secrets.token_hex(8)}"
        channel.mkdir(mode=0o700)
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src) for _, src in cells]
        cwd = str(channel) if self.job["sandbox"] else self.job["cwd"]
        cgroup = self._new_cgroup()
        client = _Client(
            nb,
            km=self._kernel_manager(channel, cgroup),
            timeout=int(math.ceil(self.cell_timeout)),
            allow_errors=True,
            interrupt_on_timeout=True,
            shutdown_kernel="immediate",
            resources={"metadata": {"path": cwd}},
            startup_timeout=120,
        )
        # the kernel's own stdout and stderr: a file of this job, not the worker's log (which holds
        # what earlier submissions printed, and which a flood would grow for the next one); its
        # size is capped by the kernel's file-size limit, and it goes with the job's folder
        output = open(Path(self.job["dir"]) / f"kernel{start}.out", "wb")
        try:
            with output, client.setup_kernel(stdout=output, stderr=output):
                self._note_kernel(client)
                died_at = self._run_cells(client, nb, cells)
                if died_at is None:
                    return self._run_grading_cell(client, nb, channel) if self.clean else False
                deaths = self.deaths[died_at] = self.deaths.get(died_at, 0) + 1
                if deaths > 1:
                    self.dead_cells.add(died_at)
                self.event(
                    Event.KERNEL_DIED,
                    cell=died_at + 1,
                    line=_first_line(dict(self.cells).get(died_at, dict(cells)[died_at])),
                    retry=deaths == 1,
                    **self._phase(),
                )
                return True
        finally:
            for pid in _current_kernel_pid:
                kill_group(pid)  # the kernel's own process group: whatever it started goes too
            _current_kernel_pid.clear()
            if cgroup is not None:
                self._end_cgroup(cgroup)

    def _new_cgroup(self) -> SubmissionCgroup | None:
        """The cgroups of the next kernel (None where the grader cannot make them), named in the
        job's cgroups file, so that the grader can empty and delete them if this worker is killed."""
        if self.cgroups is None:
            return None
        cgroup = SubmissionCgroup(self.cgroups, self.limits.processes, self.limits.memory_mb, self.limits.cpus)
        _current_cgroup[:] = [cgroup]
        with open(Path(self.job["dir"]) / "cgroups.txt", "a") as f:
            f.write("".join(f"{d}\n" for d in cgroup.dirs))
        return cgroup

    def _end_cgroup(self, cgroup: SubmissionCgroup) -> None:
        """Report the whole-submission limits the kernel ran into, then kill what is left of it."""
        used = cgroup.cpu_seconds()
        if used is not None:
            self.kernel_cpu_s = (self.kernel_cpu_s or 0.0) + used
        reached = cgroup.reached()
        if reached:
            self.event(
                Event.LIMIT_REACHED,
                limits=reached,
                processes=self.limits.processes,
                memory_mb=self.limits.memory_mb,
            )
        cgroup.remove()
        _current_cgroup.clear()

    def _note_kernel(self, client: _Client) -> None:
        """Remember the kernel's process id, here (for SIGTERM) and in the job's kernels file."""
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        if pid:
            _current_kernel_pid[:] = [pid]
            with open(self.job["kernels"], "a") as f:
                f.write(f"{pid}\n")

    def _run_cells(self, client: _Client, nb: Any, cells: list[tuple[int, str]]) -> int | None:
        """Run ``cells``; the index of the cell that killed the kernel, if one did."""
        for pos, (index, src) in enumerate(cells):
            if index in self.dead_cells:
                continue
            t0 = time.monotonic()
            try:
                cell = client.execute_cell(nb.cells[pos], pos)
            except DeadKernelError:
                return index
            shown = dict(self.cells).get(index, src)  # the cell as the notebook has it, for its first line
            self._report_cell(index, shown, time.monotonic() - t0, _errors(cell, client, pos))
        return None

    def _report_cell(self, index: int, src: str, elapsed: float, errors: list) -> None:
        if elapsed >= self.cell_timeout and (self.clean, Event.CELL_TIMEOUT, index) not in self.reported:
            self.reported.add((self.clean, Event.CELL_TIMEOUT, index))
            self.event(
                Event.CELL_TIMEOUT, cell=index + 1, line=_first_line(src), seconds=self.cell_timeout, **self._phase()
            )
        elif errors and (self.clean, Event.CELL_ERROR, index) not in self.reported:
            self.reported.add((self.clean, Event.CELL_ERROR, index))
            self.event(
                Event.CELL_ERROR,
                cell=index + 1,
                line=_first_line(src),
                ename=errors[0].get("ename", ""),
                evalue=errors[0].get("evalue", ""),
                **self._phase(),
            )

    def _run_grading_cell(self, client: _Client, nb: Any, channel: Path) -> bool:
        """Check the remaining exercises in this kernel; True when one killed it and others remain.

        The cell's inputs and results files are made in a new folder of the channel; its results
        carry a nonce made now, which exists nowhere before the cell runs; it is recorded (with
        the results file) in the events once the cell is over, or when this worker is stopped."""
        budget = float(self.job["budget"])
        # a fresh folder with an unguessable name: nothing the notebook's cells did in the
        # channel (links, files, a thread re-creating them) can be in the way
        cell_dir = channel / f"g-{secrets.token_hex(8)}"
        inputs, outputs = cell_dir / "inputs.json", cell_dir / "outputs.jsonl"
        with open(self.job["inputs"], "rb") as f:
            data = f.read()
        try:
            make_cell_files(cell_dir, {inputs.name: data, outputs.name: b""})
        except OSError as e:  # the folder was swapped for a link: this submission's doing
            self.event(
                Event.GRADING_ERROR,
                by_grader=True,
                ename="tampering",
                evalue=f"the grading cell's folder was replaced before its files were made ({e.strerror})",
            )
            return False
        nonce = secrets.token_hex(16)
        cell_job = {
            "inputs": str(inputs),
            "outputs": str(outputs),
            "budget": budget,
            "only": self.remaining,
            "nonce": nonce,
            "max_line": int(self.job["max_line"]),
        }
        if self.job.get("outside"):
            cell_job["outside"] = self.job["outside"]
        record = {"outputs": str(outputs), "nonce": nonce}  # of the GRADING_CELL event
        _on_exit.append(lambda: self.event(Event.GRADING_CELL, **record))
        gcell = nbformat.v4.new_code_cell(grading_cell(cell_job))
        nb.cells.append(gcell)
        client.timeout = int(math.ceil(WALL_FACTOR * budget * max(len(self.remaining), 1) + 30))
        try:
            cell = client.execute_cell(gcell, len(nb.cells) - 1)
        except DeadKernelError:
            return self._kernel_died_in_grading(record)
        finally:
            _on_exit.clear()
            self.event(Event.GRADING_CELL, **record)
        errors = _errors(cell, client, len(nb.cells) - 1)
        if errors:
            self.event(Event.GRADING_ERROR, ename=errors[0].get("ename", ""), evalue=errors[0].get("evalue", ""))
        return False

    def _kernel_died_in_grading(self, record: dict) -> bool:
        """Blame the exercise the kernel was checking when it died (after one retry); True when
        exercises remain to be checked in another kernel."""
        finished, started = _progress_in_outputs(record["outputs"], record["nonce"])
        running = [s for s in started if s not in finished and s in self.remaining]
        if not running:
            self.event(Event.KERNEL_DIED, grading=True)
            return False
        culprit = running[-1]
        deaths = self.deaths[culprit] = self.deaths.get(culprit, 0) + 1
        self.event(Event.KERNEL_DIED, exercise=culprit, retry=deaths == 1)
        self.remaining = [e for e in self.remaining if e not in finished and (deaths == 1 or e != culprit)]
        return bool(self.remaining)
