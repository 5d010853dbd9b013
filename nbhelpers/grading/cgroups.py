"""Limits for a whole submission, not only for each of its processes: a pids cgroup and a memory
cgroup per kernel, where this machine lets the grader make them, and a cpu cgroup where it also
lets it make that one.

``prlimit`` caps each process (address space, file size, CPU time), and the count of processes
of the grading *user* (which Linux does not apply to root). A submission that starts three
children, each under the address-space limit, holds three times the memory; one run as root
starts as many processes as it likes. A cgroup caps what all the processes in it hold together:
``pids.max`` the processes and threads (root included), the memory limit the memory they use
(the pages of the sandbox's ``/tmp`` included, since a tmpfs is memory). Everything a kernel
starts stays in its cgroup: the sandbox has its own cgroup namespace and no ``/sys``, so it cannot
move out. The cpu cgroup gives all of a kernel's processes together a quota of CPU time per
period (``cpu.cfs_quota_us`` in v1, ``cpu.max`` in v2): a submission that starts 40 busy
processes gets no more of the machine than one that starts one, and the classmate graded beside
it keeps its share. Where the machine has cpu accounting (``cpuacct`` in v1, ``cpu.stat`` in v2)
the CPU seconds a kernel used are read from there.

Where it works: cgroup v1 with writable ``pids`` and ``memory`` hierarchies (a grader run as root
on a machine whose pids and memory controllers are on v1, as the course's machines are), and
cgroup v2 where the
grader's own cgroup can give children the ``memory`` and ``pids`` controllers: in practice the
root of a cgroup namespace (v2 refuses controllers to the children of a cgroup that holds
processes, which the grader's own cgroup does anywhere else). Elsewhere :func:`find_cgroups` says
why, and the per-process limits stand alone.

The kernel's first process joins its cgroups itself, before it becomes the sandbox
(:func:`nbhelpers.grading.sandbox.kernel_command`), so that nothing it starts escapes them.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Cgroups",
    "SubmissionCgroup",
    "find_cgroups",
    "cgroup_pids",
    "empty_and_remove",
    "remove_cgroup",
    "CGROUP_ROOT",
    "PREFIX",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "nbgrade-"  # every cgroup the grader makes: findable, and removable when left behind
_CONTROLLERS = ("pids", "memory")
CPU_PERIOD_US = 100_000  # the period of the cpu quota


@dataclass(frozen=True)
class Cgroups:
    """Where the grader can make cgroups: the cgroup version and, for each controller (``pids``,
    ``memory``, and ``cpu`` and ``cpuacct`` where they can be had), the folder new cgroups go in
    (one folder for all in v2)."""

    version: int
    parents: dict[str, str]

    def describe(self) -> str:
        what = "memory, processes and CPU" if "cpu" in self.parents else "memory and processes"
        return f"cgroup v{self.version} ({what} of the whole submission)"


def _own_paths(proc_self_cgroup: Path) -> dict[str, str]:
    """This process's cgroup per hierarchy: controller name (``""`` for v2) -> path."""
    paths = {}
    for line in proc_self_cgroup.read_text().splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            paths[name] = parts[2].lstrip("/")
    return paths


def _can_make_children(parent: Path, files: tuple[str, ...]) -> str | None:
    """Why a cgroup with ``files`` cannot be made in ``parent`` (None: it can; tried and removed)."""
    probe = parent / f"{PREFIX}probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
    except OSError as e:
        return f"cannot make a cgroup in {parent} ({e.strerror})"
    try:
        missing = [f for f in files if not (probe / f).exists()]
        return f"a cgroup made in {parent} has no {', '.join(missing)}" if missing else None
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass


def find_cgroups(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = Path("/proc/self/cgroup")) -> Cgroups | str:
    """Where this process can make pids and memory cgroups, or why it cannot (a sentence)."""
    try:
        own = _own_paths(proc_self_cgroup)
    except OSError as e:
        return f"this system has no cgroups ({proc_self_cgroup}: {e.strerror})"
    if all(c in own for c in _CONTROLLERS) and all((root / c).is_dir() for c in _CONTROLLERS):
        parents = {c: str(root / c / own[c]) for c in _CONTROLLERS}
        why = _can_make_children(Path(parents["pids"]), ("pids.max",)) or _can_make_children(
            Path(parents["memory"]), ("memory.limit_in_bytes",)
        )
        if why:
            return why
        # cpu and cpuacct: optional, each in its own hierarchy or mounted together
        for c, probe in (("cpu", "cpu.cfs_quota_us"), ("cpuacct", "cpuacct.usage")):
            mount = next((m for m in (c, "cpu,cpuacct", "cpuacct,cpu") if (root / m).is_dir()), None)
            if c in own and mount and _can_make_children(root / mount / own[c], (probe,)) is None:
                parents[c] = str(root / mount / own[c])
        return Cgroups(1, parents)
    if "" in own and (root / "cgroup.controllers").is_file():
        parent = root / own[""]
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError as e:
            return f"cgroup v2: {parent} cannot be read ({e.strerror})"
        if not all(c in enabled for c in _CONTROLLERS):
            try:
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _CONTROLLERS))
            except OSError as e:
                return f"cgroup v2: the memory and pids controllers cannot be enabled in {parent} ({e.strerror})"
        why = _can_make_children(parent, ("pids.max", "memory.max"))
        if why:
            return why
        parents = {c: str(parent) for c in _CONTROLLERS}
        if "cpu" not in enabled:  # optional: the quota where the cpu controller can be had
            try:
                (parent / "cgroup.subtree_control").write_text("+cpu")
            except OSError:
                pass
        if _can_make_children(parent, ("cpu.max",)) is None:
            parents["cpu"] = parents["cpuacct"] = str(parent)
        return Cgroups(2, parents)
    return "no writable pids and memory cgroups (cgroup v1 hierarchies or a cgroup v2 subtree) were found"


class SubmissionCgroup:
    """The cgroups of one kernel, made with its limits: at most ``processes`` processes and
    threads, ``memory_mb`` of memory and, where a cpu cgroup can be made, ``cpus`` CPUs' worth of
    time, in all (0: that one is not limited). The kernel's first process writes its own pid into
    each of :attr:`procs_files` before it does anything else."""

    def __init__(self, where: Cgroups, processes: int, memory_mb: int, cpus: float = 0) -> None:
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        self.version = where.version
        by_controller = {c: Path(p) / name for c, p in where.parents.items()}
        self.dirs = list(dict.fromkeys(by_controller.values()))
        for d in self.dirs:
            d.mkdir()
        try:
            self._pids_dir = by_controller["pids"]
            self._memory_dir = by_controller["memory"]
            self._cpu_dir = by_controller.get("cpu")
            self._cpuacct_dir = by_controller.get("cpuacct")
            if cpus and self._cpu_dir is not None:
                quota = max(1000, int(cpus * CPU_PERIOD_US))
                if self.version == 1:
                    (self._cpu_dir / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                    (self._cpu_dir / "cpu.cfs_quota_us").write_text(str(quota))
                else:
                    (self._cpu_dir / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
            if processes:
                (self._pids_dir / "pids.max").write_text(str(processes))
            if memory_mb:
                limit = str(memory_mb * 2**20)
                if self.version == 1:
                    (self._memory_dir / "memory.limit_in_bytes").write_text(limit)
                    swap = self._memory_dir / "memory.memsw.limit_in_bytes"
                    if swap.exists():  # memory and swap together: the same limit, no swap
                        try:
                            swap.write_text(limit)
                        except OSError:
                            pass
                else:
                    (self._memory_dir / "memory.max").write_text(limit)
                    try:
                        (self._memory_dir / "memory.swap.max").write_text("0")
                    except OSError:
                        pass
        except BaseException:
            self.remove()
            raise

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        return set().union(*(cgroup_pids(d) for d in self.dirs))

    def kill(self) -> None:
        """SIGKILL every process in the cgroups, until none is left (or 5 s have passed)."""
        deadline = time.monotonic() + 5
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def cpu_seconds(self) -> float | None:
        """The CPU time the kernel's processes have used, in all (None where it is not counted)."""
        if self._cpuacct_dir is None:
            return None
        try:
            if self.version == 1:
                return int((self._cpuacct_dir / "cpuacct.usage").read_text()) / 1e9
            return _count(self._cpuacct_dir / "cpu.stat", "usage_usec") / 1e6
        except (OSError, ValueError):
            return None

    def reached(self) -> list[str]:
        """The limits the submission ran into: ``"processes"`` (a fork or a thread refused),
        ``"memory"`` (a process killed for it)."""
        hit = []
        if _count(self._pids_dir / "pids.events", "max"):
            hit.append("processes")
        memory = ("memory.oom_control", "oom_kill") if self.version == 1 else ("memory.events", "oom_kill")
        if _count(self._memory_dir / memory[0], memory[1]):
            hit.append("memory")
        return hit

    def remove(self) -> None:
        """Kill what is left in the cgroups and delete them."""
        self.kill()
        for d in self.dirs:
            remove_cgroup(d)


def cgroup_pids(d: Path) -> set[int]:
    """The processes in the cgroup ``d`` (none when it cannot be read)."""
    try:
        return {int(x) for x in (d / "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return set()


def empty_and_remove(d: Path) -> None:
    """SIGKILL whatever is in the cgroup ``d``, then delete it."""
    for pid in cgroup_pids(d):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    remove_cgroup(d)


def remove_cgroup(d: Path) -> None:
    """Delete an empty cgroup (a few tries: the last processes may still be exiting)."""
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _count(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0
