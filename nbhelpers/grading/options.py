"""What a grading run is told (:class:`GradeOptions`), what a submission can end up as
(:class:`Status`), what the output files say of the seed (:class:`SeedKind`), and the grader's
size and time limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from .cgroups import Cgroups
from .sandbox import Limits

__all__ = [
    "Status",
    "STATUSES",
    "SeedKind",
    "GradeOptions",
    "DEFAULT_CELL_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "MAX_NOTEBOOK_BYTES",
    "MAX_OUTPUT_LINE_BYTES",
    "MAX_KERNEL_STARTS",
    "DETAIL_LIMIT",
    "MAX_EVENTS",
    "MAX_KERNEL_MESSAGE_BYTES",
    "MAX_KERNEL_MESSAGES_QUEUED",
    "WORKER_MEMORY_MB",
    "Limits",
]


class Status(StrEnum):
    """A submission's status, as the CSV's ``status`` column shows it (the value).

    The first five are given without running anything; otherwise a submission's status says the
    worst thing that happened while it ran (see :func:`nbhelpers.grading.judging.status_of`),
    and its points are whatever its functions earned regardless. A member is a ``str`` equal to
    its value, so it compares, hashes and is written to JSON as that string.
    """

    REFUSED = "refused"  # a link to a file outside the folders graded (or to nothing): never read
    INVALID_NOTEBOOK = "invalid notebook"  # not JSON, not a notebook, unreadable, too large
    EMPTY = "empty"  # no code at all
    UNKNOWN_CHAPTER = "unknown chapter"  # no exNN file name, no check("exNN.…") call, or a chapter without exercises
    WRONG_CHAPTER = "wrong chapter"  # a chapter other than --chapter
    GRADER_ERROR = "grader error"  # the grader itself failed (kernel would not start, ...); a rerun retries it
    TIMEOUT = "timeout"  # the total time limit ran out, a cell was interrupted, or a function ran out of time
    KERNEL_DIED = "kernel died"  # the kernel crashed (os._exit, segfault, out of memory)
    CELL_ERROR = "cell error"  # a cell of the notebook raised an exception
    GRADED = "graded"  # everything ran

    def __str__(self) -> str:
        return self.value


# The statuses as plain strings, in the order above (the run's summary lists them in reverse).
STATUSES = tuple(s.value for s in Status)


class SeedKind(StrEnum):
    """What the output files record about the seed (the value), never the seed itself."""

    SECRET = "secret"  # any seed but 0: hidden cases
    PUBLIC = "public"  # seed 0: the cases students see


DEFAULT_CELL_TIMEOUT = 60.0  # seconds for each cell, and for all the calls of one function
DEFAULT_TIMEOUT = 300.0  # seconds for a whole submission, kernel start included

MAX_NOTEBOOK_BYTES = 50 * 2**20  # a submission larger than this is not read
MAX_OUTPUT_LINE_BYTES = 16 * 2**20  # one exercise's results, as written by the kernel (parsing costs ~25x)
MAX_EVENTS = 1000  # events of one worker read back
MAX_KERNEL_MESSAGE_BYTES = 16 * 2**20  # a larger message from a kernel (a flood of print) is dropped unread
# Messages from a kernel received but not yet read, on one socket of the worker: those a kernel
# sends faster than a busy worker reads wait in the kernel's own memory (which drops what its queue
# cannot hold), so the worker holds at most this many times MAX_KERNEL_MESSAGE_BYTES of them.
MAX_KERNEL_MESSAGES_QUEUED = 8
WORKER_MEMORY_MB = 4096  # the address space of a worker (about 0.9 GB of it in use while it runs a kernel)
MAX_KERNEL_STARTS = 6  # a kernel that dies is retried once, then restarted without what killed it
DETAIL_LIMIT = 400  # characters of the CSV's detail column
# The limits of the value codec (sizes, depth, lengths of reprs and messages) are
# nbhelpers.grading.in_kernel.LIMITS: that module is sent into the kernel, so they live there.


@dataclass
class GradeOptions:
    """The options of a run (the command line's, less the paths and output files)."""

    seed: int = 0  # 0: the cases students see; anything else: hidden cases
    chapter: int | None = None  # grade only this chapter; other notebooks get "wrong chapter"
    jobs: int = 1  # submissions graded at once
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    timeout: float = DEFAULT_TIMEOUT
    regrade: bool = False  # grade submissions already graded again
    kernel_name: str = "python3"
    progress: bool = True  # a progress bar on stderr
    sandbox: bool = True  # each kernel in a sandbox of its own (bubblewrap); False only by choice
    limits: Limits = field(default_factory=Limits)  # the kernel's resource limits
    # where each kernel's pids and memory cgroups are made (limits for the whole submission);
    # None: per-process limits only (why: ``cgroups_missing``). Set by ``run.grade``.
    cgroups: Cgroups | None = None
    cgroups_missing: str = ""
    # the folder the kernels' channel folders are made in, on a tmpfs whose pages count in the
    # kernel's memory cgroup ("": in each job's folder, in the system's temporary folder)
    channels_root: str = ""

    def whole_submission_limits(self) -> str:
        """What limits a submission as a whole, in words (for the summary and the JSON file)."""
        if self.cgroups is None:
            return f"none: per-process limits only ({self.cgroups_missing or 'not looked for'})"
        where = (
            "its channel folder in /dev/shm, counted in that memory"
            if self.channels_root
            else "its channel folder in the temporary folder, limited per file only"
        )
        return f"{self.cgroups.describe()}; {where}"

    @property
    def secret(self) -> bool:
        return self.seed != 0

    @property
    def seed_kind(self) -> SeedKind:
        """What the output files record about the seed: SECRET or PUBLIC, never the seed."""
        return SeedKind.SECRET if self.secret else SeedKind.PUBLIC
