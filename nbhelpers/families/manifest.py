"""What a kernel family declares: its compile cases, its GPU launches, its benchmark, its results.

A *family* is one module of :mod:`nbhelpers.kernels` (its kernels, launchers and references) seen
from outside: every tool that needs to know about the kernels (the compile check, the table of
which GPU runs which chapter, the prepared GPU run, the readers of recorded results) reads the
family's :class:`Family` and nothing else. This module holds the types; each family's manifest is
a module of :mod:`nbhelpers.families` that defines ``FAMILY``.

Standard library only: the readers of recorded results import this on any machine, before
:func:`nbhelpers.device.setup_device`, and ``benchmarks/gpu_report.py`` imports it with no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = [
    "Case",
    "Launch",
    "Benchmark",
    "ResultsSpec",
    "Family",
    "gemm_args",
    "timed",
    "extremes",
    "operand_buffers",
    "pick",
]


@dataclasses.dataclass(frozen=True)
class Case:
    """One kernel, one launch, one config.

    kernel: where the ``@triton.jit`` function lives: ``"module:function"`` for the package, or
    ``"path/to/file.ipynb:function"`` / ``"path/to/file.py:function"`` (relative to the
    repository) for a notebook's or a test's kernel, read from its source. args: the positional
    arguments as a launch passes them: ``"*bf16"``-style strings for tensors (a pointer of that
    element type), ints for ints. constexprs: the config's compile-time arguments. default: True
    for a config the course launches by default (an autotune list's, a launcher's default): a
    spill there is a finding. expect_error: a substring of the error a case is expected to stop
    with (a dtype the target lacks); the case then passes only if it does stop with it.
    """

    kernel: str
    label: str
    args: tuple
    constexprs: dict
    num_warps: int = 4
    num_stages: int = 3
    target: str = "sm_90"
    source: str = "package"
    default: bool = True
    expect_error: str | None = None

    @property
    def config(self) -> str:
        """The config in one short string: tile sizes first, then warps and stages."""
        keys = [k for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK") if k in self.constexprs]
        tile = "x".join(str(self.constexprs[k]) for k in keys)
        rest = ", ".join(f"{k}={v}" for k, v in self.constexprs.items() if k not in keys)
        return f"{tile} w{self.num_warps} s{self.num_stages}" + (f" ({rest})" if rest else "")


def gemm_args(a: str, b: str, c: str, M: int, N: int, K: int, b_col_major: bool = False) -> tuple:
    """Pointers and the ints a 2-D GEMM launcher passes for contiguous A (M, K), C (M, N) and B
    (K, N), row-major or (fp8, as torch._scaled_mm wants it) column-major."""
    sbk, sbn = (1, K) if b_col_major else (N, 1)
    return (f"*{a}", f"*{b}", f"*{c}", M, N, K, K, 1, sbk, sbn, N, 1)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch a chapter makes on a GPU, as one :class:`Case` (its target is replaced by each
    target the GPU table compiles for).

    launch: the launcher call in words (``"matmul(block=(32, 32, 32))"``); dtype: the operands'
    type as the reader names it ("fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2"); chapters: the
    chapters that make it (empty: a launch the launcher accepts but no chapter makes); made_by:
    the notebooks and scripts that make it; tuned: "" for a fixed config, else which config of the
    tuned list this is ("largest of 9"); fp8: the torch dtype name of fp8 operands, for the
    launcher's own check of the GPU.
    """

    launch: str
    dtype: str
    chapters: tuple
    made_by: str
    case: Case
    tuned: str = ""
    fp8: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """(launch, dtype): the rows of one tuned launch share it."""
        return (self.launch, self.dtype)


def operand_buffers(c: Case) -> int:
    """(BLOCK_M + BLOCK_N) x BLOCK_K x num_stages: what a config's pipelined operand tiles grow with."""
    k = c.constexprs
    return (k["BLOCK_M"] + k["BLOCK_N"]) * k["BLOCK_K"] * c.num_stages


def extremes(cases: list[Case]) -> list[tuple[str, Case]]:
    """The configs of a tuned list with the largest and the smallest operand buffers, labelled:
    what a table of launches shows of a launch tuned on the GPU."""
    n = len(cases)
    big, small = max(cases, key=operand_buffers), min(cases, key=operand_buffers)
    return [(f"largest of {n}", big), (f"smallest of {n}", small)]


def pick(cases: list[Case], kernel: str, label: str | None = None, config: str | None = None) -> list[Case]:
    """The sm_90 cases of ``kernel`` (a function name) with this label and a config that starts
    with ``config`` (None: any); LookupError when there is none."""
    found = [
        c
        for c in cases
        if c.target == "sm_90"
        and c.kernel.endswith(":" + kernel)
        and (label is None or c.label == label)
        and (config is None or c.config.startswith(config))
    ]
    if not found:
        raise LookupError(f"no compile case {kernel} [{label}] {config}")
    return found


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """A ``benchmarks/<script>.py`` GPU script of the family, as the prepared GPU run plans it:
    ``limit`` seconds at most; ``time_limit``: the ``--time-limit`` passed to the script (no case
    starts after it; None: the script takes none); ``expected`` seconds, with what they rest on."""

    script: str
    limit: float
    time_limit: float | None
    expected: float
    basis: str

    def plan(self) -> dict:
        return {"limit": self.limit, "time_limit": self.time_limit, "expected": self.expected, "basis": self.basis}


def timed(default: Any = None) -> Any:
    """A field of a results row that a row which was not measured (one with an ``error``) lacks."""
    return dataclasses.field(default=default, metadata={"timed": True})


@dataclasses.dataclass(frozen=True)
class ResultsSpec:
    """One kind of results file of a family: ``benchmarks/results/<stem>_<gpu>.json`` written by
    ``script``, with every ``meta_keys`` in its meta and a list ``rows_field`` of rows shaped by
    ``row``, a frozen dataclass: its fields without a default are in every row, those made with
    :func:`timed` in every row measured (not in one with an ``error``), the others may be there.
    ``check(row)``: what else a row breaks, in words. ``reader``: the name of the reader the
    notebooks call (:mod:`nbhelpers.results` makes one for every spec)."""

    stem: str
    script: str
    meta_keys: tuple
    row: type
    rows_field: str = "rows"
    allow_empty: bool = False
    check: Callable[[dict], list[str]] | None = None
    reader: str | None = None

    @property
    def row_keys(self) -> tuple:
        fields = dataclasses.fields(self.row)
        return tuple(f.name for f in fields if f.default is dataclasses.MISSING and not f.metadata.get("timed"))

    @property
    def timed_keys(self) -> tuple:
        return tuple(f.name for f in dataclasses.fields(self.row) if f.metadata.get("timed"))


def _none() -> list:
    return []


@dataclasses.dataclass(frozen=True)
class Family:
    """One kernel family, declared once.

    name: the family (its manifest's module name); module: the kernel module
    (``"nbhelpers.kernels.gemm"``); reference: the slow reference its kernels are checked against
    (``"module:function"``); dtypes: the operand types its launchers accept; recipes: where the
    launchers declare the scaling recipes they implement, each a ``"module:name"`` of a
    :class:`~nbhelpers.kernels.operands.RecipeSupport` (the launcher's own check; empty: no scaled
    operands); chapters: per chapter whose GPU path this
    family is, that path in words; tests: the test files that launch its kernels (on a GPU, compiled);
    cases: the compile cases of its kernels (every config its launchers or tune lists can pick);
    exercise_cases: the cases of the solutions' and tests' own kernels that stand for it;
    launches: the launches its chapters make on a GPU; dot_kernels: its kernels with a ``tl.dot``;
    benchmarks and results: its GPU scripts and the results files they write; order: where its
    launches go among the others' in the GPU table (new families go last).
    """

    name: str
    module: str
    reference: str
    dtypes: tuple = ()
    recipes: tuple = ()
    chapters: dict = dataclasses.field(default_factory=dict)
    tests: tuple = ()
    cases: Callable[[], list[Case]] = _none
    exercise_cases: Callable[[], list[Case]] = _none
    launches: Callable[[], list[Launch]] = _none
    dot_kernels: tuple = ()
    benchmarks: tuple = ()
    results: tuple = ()
    order: int = 1000
