"""The launch-overhead law of chapter 10, measured on the CPU that runs the notebook.

On a GPU, every ``torch.matmul`` costs a few microseconds of host time before any arithmetic
starts, so a loop over E experts pays E of those
however little work each expert has. A CPU has the same law one level down: every call into
torch pays for Python, the dispatcher, shape checks and the allocation of its output, a fixed
cost per call that does not depend on the FLOPs.

* :func:`call_overhead` measures that fixed cost: the time per call of a tiny ``torch.matmul``
  (1 x 16 @ 16 x 16 by default: 512 FLOPs, nothing to compute).
* :func:`time_expert_gemms` splits the same rows (the same FLOPs) over E experts and times, for
  each E, the loop of per-expert matmuls (:func:`nbhelpers.moe.loop_matmul`), one batched
  ``torch.bmm`` over equal groups, the padded batch (:func:`nbhelpers.moe.padded_matmul`, which
  also gathers and scatters the rows) and torch's grouped GEMM
  (:func:`nbhelpers.moe.torch_grouped_mm`). :meth:`ExpertGemmTimes.fitted_overhead` is the slope
  of a method's time against E at fixed work: the cost of one more expert.
* :func:`napkin_loop_time` is the prediction those are compared with: one call over all rows plus
  one overhead per further expert.

How the timing is made honest on a small, shared machine: each call is timed alone with
``time.perf_counter``; rounds are interleaved (every E and method once, then again), so that a
slow moment of the machine hits all of them alike; the reported time is the median over rounds,
after one warm-up round. torch runs on ``threads`` threads during the measurement (1 by default:
with two cores and another process busy, a multi-threaded tiny matmul waits for a core at every
parallel region, which measures the neighbour, not the call) and is set back afterwards.

Nothing here needs a GPU.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from .moe import loop_matmul, padded_matmul, route, torch_grouped_mm
from .timing import interleaved_medians
from .validation import positive_int, positive_number

__all__ = [
    "METHODS",
    "CallOverhead",
    "call_overhead",
    "ExpertGemmTimes",
    "time_expert_gemms",
    "napkin_loop_time",
]

METHODS = ("loop", "bmm", "padded", "grouped_mm")
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@contextmanager
def _torch_threads(threads: int | None):
    """torch on ``threads`` threads inside the block (None: leave it alone)."""
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_dtype(dtype) -> torch.dtype:
    if dtype not in _DTYPES:
        raise TypeError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    return dtype


def _check_threads(threads) -> int | None:
    return None if threads is None else positive_int("threads", threads)


@dataclass(frozen=True)
class CallOverhead:
    """The time per call of a tiny matmul: ``seconds`` (median over ``repeats`` batches of
    ``calls`` calls, divided by ``calls``), the ``flops`` of one call (2 M K N) and its shape
    (M, K, N)."""

    seconds: float
    flops: int
    shape: tuple[int, int, int]
    calls: int
    repeats: int
    threads: int | None

    @property
    def flops_per_second(self) -> float:
        """The rate the tiny call reaches: its FLOPs over its time (tiny: the time is overhead)."""
        return self.flops / self.seconds


def call_overhead(
    M: int = 1,
    K: int = 16,
    N: int = 16,
    calls: int = 200,
    repeats: int = 9,
    dtype: torch.dtype = torch.float32,
    threads: int | None = 1,
    seed: int = 0,
) -> CallOverhead:
    """Time ``torch.matmul(a, b)`` for a (M, K) by a (K, N), so small that the time is the fixed
    cost of a call. Each of ``repeats`` batches times ``calls`` calls in a row (after one warm-up
    batch); the median batch time over ``calls`` is the time per call."""
    M, K, N = (positive_int(n, v) for n, v in (("M", M), ("K", K), ("N", N)))
    calls, repeats = positive_int("calls", calls), positive_int("repeats", repeats)
    dtype, threads = _check_dtype(dtype), _check_threads(threads)
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn((M, K), generator=gen).to(dtype)
    b = torch.randn((K, N), generator=gen).to(dtype)
    with _torch_threads(threads):  # batch 0 warms up
        (seconds,) = interleaved_medians({"matmul": lambda: torch.matmul(a, b)}, repeats, 1, calls).values()
    return CallOverhead(float(seconds), 2 * M * K * N, (M, K, N), calls, repeats, threads)


@dataclass(frozen=True)
class ExpertGemmTimes:
    """What :func:`time_expert_gemms` measured. ``E_values`` (n,) ints; ``seconds``: method ->
    (n,) median seconds of one call, one per E; ``counts``: E -> the rows of each expert (E,);
    ``rows, K, N, dtype`` the problem (the same ``2 rows K N`` FLOPs at every E), ``repeats`` the
    rounds, ``capacity_factor`` the padded batch's, ``threads`` torch's threads."""

    E_values: np.ndarray
    seconds: dict
    counts: dict
    rows: int
    K: int
    N: int
    dtype: torch.dtype
    repeats: int
    capacity_factor: float
    threads: int | None

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.seconds)

    @property
    def flops(self) -> float:
        """2 rows K N: the useful FLOPs of every call measured (padding not counted)."""
        return 2.0 * self.rows * self.K * self.N

    def fitted_overhead(self, method: str = "loop") -> float:
        """The least-squares slope of ``method``'s time against E, in seconds per expert: at fixed
        work, what one more expert costs."""
        if method not in self.seconds:
            raise ValueError(f"no times for method {method!r}; measured: {self.methods}")
        if len(self.E_values) < 2:
            raise ValueError("a slope needs at least two values of E")
        slope, _ = np.polyfit(self.E_values.astype(float), self.seconds[method], 1)
        return float(slope)

    def table(self) -> list[dict]:
        """One row per (E, method): ``{"E", "method", "seconds", "rows_per_expert_max",
        "empty_experts", "ratio_to_loop"}`` (ratio = loop time / this method's time, None when the
        loop was not measured)."""
        out = []
        for i, E in enumerate(self.E_values):
            c = self.counts[int(E)]
            for m, s in self.seconds.items():
                loop = self.seconds.get("loop")
                out.append(
                    {
                        "E": int(E),
                        "method": m,
                        "seconds": float(s[i]),
                        "rows_per_expert_max": int(c.max()),
                        "empty_experts": int((c == 0).sum()),
                        "ratio_to_loop": None if loop is None else float(loop[i] / s[i]),
                    }
                )
        return out


def _counts(rows: int, E: int, skew: float | None, seed: int) -> np.ndarray:
    """Rows per expert: an even split (the first rows % E experts get one more), or the loads of
    a top-1 :func:`nbhelpers.moe.route` of ``rows`` tokens with this skew."""
    if skew is None:
        return np.full(E, rows // E, dtype=np.int64) + (np.arange(E) < rows % E)
    r = route(rows, E, 1, skew=skew, seed=seed)
    return np.bincount(r.expert_ids.ravel(), minlength=E).astype(np.int64)


def time_expert_gemms(
    E_values,
    rows: int,
    K: int,
    N: int,
    dtype: torch.dtype = torch.float32,
    repeats: int = 7,
    methods=("loop", "bmm", "grouped_mm"),
    skew: float | None = None,
    capacity_factor: float = 1.25,
    threads: int | None = 1,
    seed: int = 0,
) -> ExpertGemmTimes:
    """Time the expert GEMMs of ``rows`` rows of width K against E weight matrices (E, K, N), for
    each E of ``E_values``: the same FLOPs at every E, cut into E groups.

    methods: any of :data:`METHODS`. ``"loop"``: :func:`~nbhelpers.moe.loop_matmul`, one matmul
    per non-empty expert; ``"bmm"``: one ``torch.bmm`` of (E, rows / E, K) by (E, K, N), which
    needs equal groups (an even split with E dividing rows); ``"padded"``:
    :func:`~nbhelpers.moe.padded_matmul` at ``capacity_factor`` (gather, one bmm, scatter);
    ``"grouped_mm"``: :func:`~nbhelpers.moe.torch_grouped_mm` (K and N must fill 16-byte rows).
    skew: None for an even split; a number for the uneven loads of a seeded top-1 routing
    (:func:`~nbhelpers.moe.route`). Inputs are drawn once per E (seeded), outside the timing.
    Rounds are interleaved and the median of ``repeats`` rounds is kept (module docstring)."""
    Es = [positive_int("E", e) for e in E_values]
    if not Es:
        raise ValueError("E_values must not be empty")
    if len(set(Es)) != len(Es):
        raise ValueError(f"E_values must be distinct, got {list(E_values)}")
    rows, K, N = positive_int("rows", rows), positive_int("K", K), positive_int("N", N)
    repeats = positive_int("repeats", repeats)
    dtype, threads = _check_dtype(dtype), _check_threads(threads)
    cf = positive_number("capacity_factor", capacity_factor)
    methods = tuple(methods)
    if not methods:
        raise ValueError(f"methods must name at least one of {METHODS}")
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; choose from {METHODS}")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods must be distinct, got {methods}")
    if skew is not None:
        skew = float(positive_number("skew", skew)) if skew != 0 else 0.0
    if "bmm" in methods:
        bad = [E for E in Es if rows % E] if skew is None else Es
        if bad:
            raise ValueError(
                f"'bmm' needs equal groups: an even split (skew=None) with E dividing rows={rows}; "
                f"not the case for E = {bad[:3]} (use 'padded' for uneven loads)"
            )
    size = torch.empty((), dtype=dtype).element_size()
    if "grouped_mm" in methods and ((K * size) % 16 or (N * size) % 16):
        raise ValueError(f"'grouped_mm' needs K and N to fill 16-byte rows: for {dtype}, multiples of {16 // size}")

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, K), generator=gen).to(dtype)
    inputs, counts = {}, {}
    for E in Es:
        c = _counts(rows, E, skew, seed)
        counts[E] = c
        off = np.concatenate([[0], np.cumsum(c)]).astype(np.int64)
        inputs[E] = (torch.randn((E, K, N), generator=gen).to(dtype) / K**0.5, off)

    def call(method, E):
        w, off = inputs[E]
        if method == "loop":
            return loop_matmul(x, w, off)
        if method == "bmm":
            return torch.bmm(x.view(E, rows // E, K), w)
        if method == "padded":
            return padded_matmul(x, w, off, cf)
        return torch_grouped_mm(x, w, off)

    fns = {(m, E): (lambda m=m, E=E: call(m, E)) for E in Es for m in methods}  # every E, every method, per round
    with _torch_threads(threads):  # round 0 warms up (allocator, code paths)
        med = interleaved_medians(fns, repeats, warmup_rounds=1)
    seconds = {m: np.array([med[m, E] for E in Es]) for m in methods}
    return ExpertGemmTimes(np.array(Es, dtype=np.int64), seconds, counts, rows, K, N, dtype, repeats, cf, threads)


def napkin_loop_time(E_values, one_call_seconds: float, overhead_seconds: float) -> np.ndarray:
    """The loop's napkin time at fixed total work: one call over all rows (``one_call_seconds``,
    the compute and one call's overhead) plus ``overhead_seconds`` for every further expert:
    ``one_call + (E - 1) * overhead``."""
    Es = np.asarray(E_values, dtype=float)
    if Es.ndim != 1 or Es.size == 0 or (Es < 1).any():
        raise ValueError(f"E_values must be a non-empty list of values >= 1, got {E_values!r}")
    for name, v in (("one_call_seconds", one_call_seconds), ("overhead_seconds", overhead_seconds)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    return one_call_seconds + (Es - 1) * overhead_seconds
