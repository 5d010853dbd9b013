"""The command line, ``python -m nbhelpers.grade`` (and the console script ``nbhelpers-grade``):
its options, keeping the secret seed out of sight, and :func:`main`.

The seed must not be readable by a student's code, which runs as the same user: a ``--seed`` on
the command line is handed over to a fresh copy of the process through a pipe
(:func:`_conceal_seed`), and on Linux the process makes itself non-dumpable
(:func:`~nbhelpers.grading.jobs.not_dumpable`) before it grades anything.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from .jobs import not_dumpable
from .options import DEFAULT_CELL_TIMEOUT, DEFAULT_TIMEOUT, GradeOptions, Status
from .outputs import OutputsBusy, OutputsUnsafe
from .run import grade, print_summary
from .sandbox import Limits, SandboxUnavailable

__all__ = ["main"]


# ---- keeping the seed out of sight ----------------------------------------------------------


def _seed_from_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """The --seed value and the arguments without it."""
    rest, value, i = [], None, 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest += argv[i:]
            break
        if a == "--seed" and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
            continue
        if a.startswith("--seed="):
            value, i = a[len("--seed=") :], i + 1
            continue
        rest.append(a)
        i += 1
    return value, rest


def _conceal_seed(argv: list[str]) -> None:
    """If the secret seed is on our command line, start again without it (exec, same process id),
    handing the seed over through a pipe: a student's code can read every process's command line
    (/proc/*/cmdline, ps) but not this pipe. Returns only when there is nothing to do or exec is
    impossible."""
    if os.name != "posix" or "--seed-fd" in argv:
        return
    value, rest = _seed_from_argv(argv)
    if value is None:
        return
    try:
        r, w = os.pipe()
        os.write(w, value.encode()[:4096])
        os.close(w)
        os.set_inheritable(r, True)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "nbhelpers.grade", *rest, "--seed-fd", str(r)])
    except OSError as e:  # pragma: no cover - exec failed: carry on, the seed stays visible
        print(f"nbhelpers.grade: could not hide the seed from the process list ({e})", file=sys.stderr)


def _read_seed(args: argparse.Namespace) -> int:
    """The seed: from --seed-file (a file, or - for stdin), from the pipe _conceal_seed made
    (--seed-fd), or from --seed (default 0)."""
    if args.seed_file is not None:
        if args.seed is not None or args.seed_fd is not None:
            raise argparse.ArgumentTypeError("give the seed once: --seed or --seed-file, not both")
        if args.seed_file == "-":
            return _parse_seed(sys.stdin.read(4096))
        with open(args.seed_file, "rb") as f:
            return _parse_seed(f.read(4096).decode())
    if args.seed_fd is None:
        return args.seed or 0
    with os.fdopen(args.seed_fd, "rb") as f:
        return _parse_seed(f.read(4096).decode())


# ---- the options ------------------------------------------------------------------------------


def _argument(
    convert: Callable[[str], Any], valid: Callable[[Any], bool], bad: str, invalid: str | None = None
) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert(text)``, rejected with the message ``bad`` when it raises
    ValueError and with ``invalid`` (default ``bad``) when ``valid`` says no. ``{text!r}`` in a
    message stands for the text given."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(bad.format(text=text)) from None
        if not valid(value):
            raise argparse.ArgumentTypeError((invalid or bad).format(text=text))
        return value

    return parse


def _chapter_number(text: str) -> int:
    m = re.fullmatch(r"(?:ex|ch)?(\d{1,2})", text.strip(), re.IGNORECASE)
    if not m:
        raise ValueError(text)
    return int(m.group(1))


_parse_seed = _argument(
    lambda text: int(text.strip(), 0),
    lambda n: n >= 0,
    "the seed must be a non-negative integer, got {text!r}",
    "the seed must be a non-negative integer",
)
_chapter_arg = _argument(_chapter_number, lambda n: True, "a chapter is a number such as 1 or 01, got {text!r}")


_limit = _argument(int, lambda n: n >= 0, "expected a whole number, 0 or more, got {text!r}")


def _positive(kind: type) -> Callable[[str], Any]:
    return _argument(kind, lambda v: v > 0, "expected a positive number, got {text!r}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m nbhelpers.grade",
        description="Grade students' exercise notebooks: run each in a fresh kernel, check its "
        "functions from outside, write a CSV (one row per submission) and a JSON file "
        "(every check's details). See docs/grading.md.",
        allow_abbrev=False,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="notebooks, or folders searched for *.ipynb")
    p.add_argument("--csv", required=True, metavar="FILE", help="grades, one row per submission")
    p.add_argument("--json", required=True, metavar="FILE", help="details of every check")
    p.add_argument(
        "--seed",
        type=_parse_seed,
        default=None,
        metavar="N",
        help="secret seed for hidden random cases (default 0: the cases students see)",
    )
    p.add_argument(
        "--seed-file",
        default=None,
        metavar="FILE",
        help="read the secret seed from FILE (- for stdin), so that it is on no command line",
    )
    p.add_argument("--seed-fd", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--chapter",
        type=_chapter_arg,
        default=None,
        metavar="NN",
        help="grade only this chapter; other notebooks get 'wrong chapter'",
    )
    p.add_argument("--jobs", type=_positive(int), default=1, metavar="N", help="submissions graded at once (default 1)")
    p.add_argument(
        "--cell-timeout",
        type=_positive(float),
        default=DEFAULT_CELL_TIMEOUT,
        metavar="S",
        help=f"seconds for each cell, and for all calls of one function (default {DEFAULT_CELL_TIMEOUT:g})",
    )
    p.add_argument(
        "--timeout",
        type=_positive(float),
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds for a whole submission, kernel start included (default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument("--regrade", action="store_true", help="grade everything again, even submissions already graded")
    p.add_argument("--kernel", default="python3", metavar="NAME", help="Jupyter kernel (default python3)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    box = p.add_argument_group("the sandbox and the limits of each submission's kernel (0: no limit)")
    box.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run kernels without the sandbox (bubblewrap): results are then only as trustworthy as the students",
    )
    d = Limits()
    box.add_argument(
        "--max-memory",
        type=_limit,
        default=d.memory_mb,
        metavar="MB",
        help=f"address space of each process, and the memory of all of a submission's processes together where "
        f"cgroups can be made (default {d.memory_mb})",
    )
    box.add_argument(
        "--max-processes",
        type=_limit,
        default=d.processes,
        metavar="N",
        help=f"processes and threads of a submission (default {d.processes}): all together where cgroups can be "
        "made, root included; elsewhere the grading user's, not enforced for root",
    )
    box.add_argument(
        "--max-cpus",
        type=_cpus,
        default=None,
        metavar="N",
        help="CPUs' worth of time all of a kernel's processes may use together, where a cpu cgroup can be made "
        "(default: the machine's cores shared among --jobs, at least 1; 0: no limit)",
    )
    box.add_argument(
        "--max-file-size",
        type=_limit,
        default=d.file_size_mb,
        metavar="MB",
        help=f"the largest file a kernel may write (default {d.file_size_mb})",
    )
    box.add_argument(
        "--max-disk",
        type=_limit,
        default=d.disk_mb,
        metavar="MB",
        help=f"the sandbox's private /tmp and /dev/shm together, its only writable folders (default {d.disk_mb})",
    )
    return p


def default_cpus(jobs: int) -> float:
    """Each kernel's share of the machine when ``jobs`` are graded at once: the cores this process
    may run on, shared equally, at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1.0, cores / jobs)


def _cpus(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value == 0 or 0.01 <= value <= 4096):
        raise argparse.ArgumentTypeError(f"expected 0 (no limit) or a number of CPUs from 0.01, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """The command line. Exit status 0 when every submission got a row, 1 when some got
    "grader error" (rerun to retry them), 2 for a usage error, 130 when interrupted."""
    if argv is None:
        argv = sys.argv[1:]
        _conceal_seed(argv)  # returns only when the seed is not on the command line
    args = _parser().parse_args(argv)
    try:
        seed = _read_seed(args)
    except (OSError, argparse.ArgumentTypeError, UnicodeDecodeError) as e:
        print(f"nbhelpers.grade: cannot read the seed: {e}", file=sys.stderr)
        return 2
    limits = Limits(
        memory_mb=args.max_memory,
        processes=args.max_processes,
        file_size_mb=args.max_file_size,
        disk_mb=args.max_disk,
        cpu_seconds=2 * math.ceil(args.timeout),
        cpus=default_cpus(args.jobs) if args.max_cpus is None else args.max_cpus,
    )
    opts = GradeOptions(
        seed=seed,
        chapter=args.chapter,
        jobs=args.jobs,
        cell_timeout=args.cell_timeout,
        timeout=args.timeout,
        regrade=args.regrade,
        kernel_name=args.kernel,
        progress=not args.no_progress,
        sandbox=not args.no_sandbox,
        limits=limits,
    )
    if opts.secret:
        not_dumpable()
    if not opts.sandbox:
        print(
            "nbhelpers.grade: warning: grading without a sandbox (--no-sandbox): each submission's code runs as "
            "you, with your files and processes in reach; the results are only as trustworthy as the students",
            file=sys.stderr,
        )
    try:
        summary = grade(args.paths, args.csv, args.json, opts)
    except SandboxUnavailable as e:
        print(
            f"nbhelpers.grade: cannot grade in a sandbox: {e}. Install it, or pass --no-sandbox to grade "
            "without one (see docs/grading.md)",
            file=sys.stderr,
        )
        return 2
    except (FileNotFoundError, OutputsBusy, OutputsUnsafe) as e:
        print(f"nbhelpers.grade: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nbhelpers.grade: interrupted; finished submissions are saved, rerun to continue", file=sys.stderr)
        return 130
    print_summary(summary, opts, args.csv, args.json)
    return 1 if summary.statuses.get(Status.GRADER_ERROR) else 0
