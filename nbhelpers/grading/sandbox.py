"""Where a submission's kernel runs: the command line that starts it in a sandbox of its own
(bubblewrap, ``bwrap``), under resource limits.

The sandbox (on by default, Linux only) gives the kernel

- its own PID, network, IPC, UTS, cgroup and user namespaces: it sees no other process (not the
  grader, not a classmate's kernel, not the instructor's shell), has no network, and everything
  it starts dies with it (``--die-with-parent``; the namespace ends when its first process ends);
- no capabilities, a new session (no terminal to inject keystrokes into), and no further user
  namespaces;
- a read-only view of the system (``/usr`` and the libraries), of a few files of ``/etc``, of the
  Python installation and virtual environment, and of the course's package *without* its
  exercise modules (``nbhelpers/answer_keys`` holds only its ``__init__.py`` there, the registry,
  which then finds no chapter: the reference answers cannot be imported, and
  ``nbhelpers.checks``, which imports the registry, still can);
- two private writable places, ``/tmp`` (also HOME and the working folder) and ``/dev/shm``
  (tmpfs file systems of ``disk_mb`` together: :func:`disk_split`; the rest of ``/dev`` is
  read-only), plus the job's channel folder (the kernel's sockets and the results file);
- nothing else: no home folder, no submissions, no output files, no grader files.

The limits (``prlimit``, with or without the sandbox) cap each process's address space, the size
of any file it writes, its CPU time, and the processes the grading user may run meanwhile; where
the grader can make cgroups, the kernel's cgroups (:mod:`nbhelpers.grading.cgroups`) cap the
processes and the memory of the whole submission.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Limits",
    "SandboxUnavailable",
    "sandbox_problem",
    "kernel_command",
    "course_package_dir",
    "ONE_THREAD_ENV",
]

#: Set in every kernel's environment, with the sandbox or without: numpy's BLAS and torch compute
#: with one thread. ``--jobs`` kernels run side by side, one per core; a kernel whose BLAS started a
#: thread per core would compete with its classmates' kernels for theirs (and OpenBLAS's threads
#: spin while they wait). It also makes a kernel's start cheaper: importing numpy with a thread per
#: core costs about 0.15 CPU-s more on a 2-core machine. (The references run in the grader's own
#: process, with its threads.)
ONE_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

INSTALL_HINT = "Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap"

# Files of /etc a Python kernel may read: the dynamic linker's cache, time zone, user and group
# names, name service, fonts, certificates, the alternatives links of Debian's /usr/bin.
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "fonts",
    "ssl",
    "ca-certificates",
    "alternatives",
    "matplotlibrc",
)


class SandboxUnavailable(RuntimeError):
    """The sandbox was asked for and cannot be used here (the message says why and what to do)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of a submission's kernel (0: no limit)."""

    memory_mb: int = 4096  # address space of each process
    processes: int = 256  # processes and threads the grading user may start while the kernel runs
    file_size_mb: int = 64  # the largest file a process may write
    disk_mb: int = 256  # the sandbox's private /tmp
    cpu_seconds: int = 0  # CPU time of each process
    cpus: float = 0  # CPUs' worth of time all of a kernel's processes may use together (a cpu cgroup)


def course_package_dir() -> Path:
    """The folder of the ``nbhelpers`` package that this grader is part of."""
    return Path(__file__).resolve().parents[1]


# The namespaces and restrictions of every sandbox (and of the probe that tries them once).
_ISOLATION = (
    "--unshare-all",
    "--unshare-user",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
    "--disable-userns",
)


@functools.cache
def _probe(bwrap: str) -> str | None:
    """Why bubblewrap cannot make our sandbox on this machine (None: it can)."""
    cmd = [bwrap, *_ISOLATION, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip()[:300] or f"exit status {done.returncode}"
    return None


def sandbox_problem() -> str | None:
    """Why the sandbox cannot be used here, in words for the instructor (None: it can)."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux (bubblewrap); this is {sys.platform}"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap (bwrap) is not installed ({INSTALL_HINT})"
    why = _probe(bwrap)
    if why is not None:
        return (
            f"bubblewrap cannot create a sandbox here: {why} (unprivileged user namespaces may be "
            "disabled: see docs/grading.md)"
        )
    return None


def _prefix_of(executable: str) -> Path | None:
    """The installation an interpreter belongs to (``/x/bin/python`` -> ``/x``)."""
    p = Path(executable)
    if not p.is_absolute():
        found = shutil.which(executable)
        if found is None:
            return None
        p = Path(found)
    return p.resolve().parent.parent


def _read_only_system() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in _ETC:
        p = f"/etc/{name}"
        if os.path.exists(p):
            args += ["--ro-bind", p, p]
    return args


def _python_mounts(argv0: str) -> list[str]:
    """The Python installations the kernel needs: ours (prefix, base prefix) and the kernel's."""
    prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.exec_prefix).resolve()}
    for exe in (sys.executable, argv0):
        p = _prefix_of(exe)
        if p is not None:
            prefixes.add(p)
    top = [p for p in sorted(prefixes) if str(p) != "/" and not any(q != p and p.is_relative_to(q) for q in prefixes)]
    args = []
    for p in top:
        if p != Path("/usr") and not p.is_relative_to("/usr"):
            args += ["--ro-bind", str(p), str(p)]
    return args


def disk_split(disk_mb: int) -> tuple[int, int]:
    """The sizes in MB of the sandbox's two writable file systems, ``/dev/shm`` (a quarter) and
    ``/tmp`` (the rest), for ``--max-disk`` MB in all; (0, 0): no limit."""
    if not disk_mb:
        return 0, 0
    shm = max(1, disk_mb // 4)
    return shm, max(1, disk_mb - shm)


def _view_args(pkg: Path, view: dict) -> list[str]:
    """What a tools kernel does not see (:mod:`nbhelpers.grading.tools_view`): of the course's
    package only ``view["course_files"]``, and each folder of ``view["hide"]`` empty; all of them
    read-only."""
    args = ["--tmpfs", str(pkg)]
    for f in view["course_files"]:
        args += ["--ro-bind", str(f), str(f)]
    args += ["--remount-ro", str(pkg)]
    for d in view["hide"]:
        args += ["--tmpfs", str(d), "--remount-ro", str(d)]
    return args


def _sandbox_args(argv0: str, channel: Path, limits: Limits, view: dict | None = None) -> list[str]:
    pkg = course_package_dir()
    # /dev: the device nodes, read-only, and a /dev/shm of its own (POSIX shared memory and
    # semaphores: multiprocessing's locks); --max-disk covers /dev/shm and /tmp together
    args = [*_ISOLATION, *_read_only_system(), "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    shm_mb, tmp_mb = disk_split(limits.disk_mb)
    if shm_mb:
        args += ["--size", str(shm_mb * 2**20)]
    args += ["--tmpfs", "/dev/shm"]
    if tmp_mb:
        args += ["--size", str(tmp_mb * 2**20)]
    args += ["--tmpfs", "/tmp", "--dir", "/tmp/home", "--dir", "/tmp/work"]
    args += _python_mounts(argv0)
    registry = pkg / "answer_keys" / "__init__.py"  # no references in it; nbhelpers.checks imports it
    if view is None:
        args += [
            "--ro-bind",
            str(pkg),
            str(pkg),
            "--tmpfs",
            str(pkg / "answer_keys"),
            "--ro-bind",
            str(registry),
            str(registry),
        ]
    else:
        args += _view_args(pkg, view)
    args += [
        "--bind",
        str(channel),
        str(channel),
        "--chdir",
        "/tmp/work",
    ]
    env = {
        "HOME": "/tmp/home",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": str(pkg.parent),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/home/.matplotlib",
        **ONE_THREAD_ENV,
    }
    args.append("--clearenv")
    for k, v in env.items():
        args += ["--setenv", k, v]
    return args


def _user_processes() -> int:
    """How many processes and threads the current user runs (Linux's count for RLIMIT_NPROC)."""
    uid, n = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                pass
    return n


# Joins the cgroups whose cgroup.procs files are given as "JOIN=path" arguments, sets the limits
# given as "NAME=soft:hard" arguments, then becomes the command after "--" (used where cgroups are
# to be joined, and where util-linux's prlimit is missing, as on macOS).
_SET_LIMITS = (
    "import os, resource, sys\n"
    "i = sys.argv.index('--')\n"
    "for a in sys.argv[1:i]:\n"
    "    name, value = a.split('=', 1)\n"
    "    if name == 'JOIN':\n"
    "        with open(value, 'w') as f:\n"
    "            f.write(str(os.getpid()))\n"
    "        continue\n"
    "    soft, hard = (resource.RLIM_INFINITY if v == 'unlimited' else int(v) for v in value.split(':'))\n"
    "    resource.setrlimit(getattr(resource, 'RLIMIT_' + name), (soft, hard))\n"
    "os.execvp(sys.argv[i + 1], sys.argv[i + 1:])\n"
)


def _limit_args(limits: Limits, join: list[str] | tuple[str, ...] = ()) -> list[str]:
    """A command prefix that runs what follows it under ``limits``, in the cgroups whose
    ``cgroup.procs`` files are ``join``."""
    values: dict[str, tuple[int | str, int | str]] = {"CORE": (0, 0)}
    # "unlimited" for no limit, rather than none: the worker that starts the kernel has a soft
    # limit of its own (WORKER_MEMORY_MB), which the kernel is not to inherit
    values["AS"] = (limits.memory_mb * 2**20,) * 2 if limits.memory_mb else ("unlimited", "unlimited")
    if limits.file_size_mb:
        values["FSIZE"] = (limits.file_size_mb * 2**20,) * 2
    if limits.cpu_seconds:
        values["CPU"] = (int(limits.cpu_seconds), int(limits.cpu_seconds) + 5)
    if limits.processes and os.getuid() != 0:  # Linux does not apply this limit to root
        values["NPROC"] = (_user_processes() + limits.processes,) * 2
    prlimit = shutil.which("prlimit")
    if prlimit is not None and not join:
        return [prlimit, *(f"--{k.lower()}={soft}:{hard}" for k, (soft, hard) in values.items()), "--"]
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _SET_LIMITS,
        *(f"JOIN={path}" for path in join),
        *(f"{k}={soft}:{hard}" for k, (soft, hard) in values.items()),
        "--",
    ]


def kernel_command(
    argv: list[str],
    channel: Path,
    limits: Limits,
    sandbox: bool,
    join: list[str] | tuple[str, ...] = (),
    view: dict | None = None,
) -> list[str]:
    """The command line that starts a kernel whose own command is ``argv`` (a kernel spec's, with
    ``{connection_file}`` in it): under the limits, in the cgroups whose ``cgroup.procs`` files
    are ``join`` (:mod:`nbhelpers.grading.cgroups`), and in the sandbox when ``sandbox``, which
    ``view`` (:meth:`nbhelpers.grading.tools_view.ToolsView.as_dict`) narrows to a tools kernel's
    packages. The kernel can write in ``channel`` (its sockets, its results)."""
    if not sandbox:
        return _limit_args(limits, join) + list(argv)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed ({INSTALL_HINT})")
    return _limit_args(limits, join) + [bwrap, *_sandbox_args(argv[0], channel, limits, view), "--", *argv]
