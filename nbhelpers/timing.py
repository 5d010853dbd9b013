"""The course's two timers, one for the CPU and one for the GPU.

* :func:`interleaved_medians`: wall-clock time on the CPU, the timer of the course's CPU
  measurements (the benchmark scripts in ``benchmarks/`` and the timing cells of chapters 08 and
  10).
* :func:`gpu_median_ms`: a kernel's time on the GPU, the timer of the ``benchmarks/gpu_*.py``
  scripts. A GPU runs launches asynchronously, so the host's clock times the queue, not the
  kernel: it takes CUDA events around each launch, through ``triton.testing.do_bench``, with the
  settings chosen here once (:data:`GPU_TIMER` says them in words for a results file).
  :func:`tuning_ms` is the same timer in the form ``triton.autotune``'s ``do_bench=`` takes: the
  kernels' tuners pick their tile sizes with it. No other module calls ``do_bench``.

This module imports nothing from the package but :mod:`nbhelpers.validation`, and sits in the
package's lowest layer beside it, so that the kernels' tuners can import it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from .validation import nonnegative_int, positive_int

__all__ = ["interleaved_medians", "gpu_median_ms", "tuning_ms", "GPU_WARMUP_MS", "GPU_REP_MS", "GPU_TIMER"]

# do_bench's settings, in milliseconds of launches, for the benchmarks and the tuners alike. It
# first times 5 calls to estimate one, then makes max(1, warmup / estimate) untimed calls and
# max(1, rep / estimate) timed ones, each after clearing the L2 cache. 50 ms is thousands of
# launches of a microsecond kernel and still 10 of a 5 ms GEMM, enough for a median; Triton's
# defaults (25 and 100) only double the run time.
GPU_WARMUP_MS = 10
GPU_REP_MS = 50
GPU_TIMER = f"triton.testing.do_bench(fn, warmup={GPU_WARMUP_MS}, rep={GPU_REP_MS}, return_mode='median'), ms"


def interleaved_medians(fns: dict, rounds: int, warmup_rounds: int = 1, calls: int = 1) -> dict:
    """Median wall-clock seconds per call of each function of ``fns`` (key -> function of no
    arguments), timed in interleaved rounds: every function once per round, in the dict's order,
    so that a slow spell of a small, shared machine hits all of them alike instead of one. The
    first ``warmup_rounds`` rounds are not kept (allocators, page faults, code paths warming up);
    each timing covers ``calls`` calls in a row and is divided by ``calls`` (for calls too short
    to time alone). Returns key -> median over ``rounds`` rounds.

    Why not :func:`timeit.repeat`: it times one statement at a time, all its repeats in a row, so
    a slow spell of the machine lands on one of the things compared; and why not
    ``torch.utils.benchmark.Timer``: the course times numpy code too, and a median of interleaved
    rounds is what the notebooks print and explain."""
    rounds = positive_int("rounds", rounds)
    warmup_rounds = nonnegative_int("warmup_rounds", warmup_rounds)
    calls = positive_int("calls", calls)
    if not fns:
        raise ValueError("fns must hold at least one function to time")
    times: dict = {k: [] for k in fns}
    for r in range(warmup_rounds + rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            dt = time.perf_counter() - t0
            if r >= warmup_rounds:
                times[key].append(dt / calls)
    return {k: statistics.median(v) for k, v in times.items()}


def gpu_median_ms(fn: Callable[[], object]) -> float:
    """Median milliseconds of one call of ``fn`` (a function of no arguments that launches GPU
    work) over repeated launches timed with CUDA events, the L2 cache cleared before each:
    ``triton.testing.do_bench`` with :data:`GPU_WARMUP_MS` and :data:`GPU_REP_MS`.

    The median, not do_bench's default: ``return_mode`` defaults to ``"mean"`` (Triton 3.7),
    which one launch delayed by the host or a clock ramp can pull up; the median is what a
    repeated launch typically takes, as :func:`interleaved_medians` reports on the CPU. Needs a
    GPU: triton is imported here, at the call."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=GPU_WARMUP_MS, rep=GPU_REP_MS, return_mode="median"))


def tuning_ms(kernel_call: Callable[[], object], quantiles=None):
    """The timer of the kernels' tuners: the ``do_bench=`` of their ``triton.autotune`` and the
    grouped GEMM's own tuner. :func:`gpu_median_ms`'s settings (:data:`GPU_WARMUP_MS`,
    :data:`GPU_REP_MS`, the median), so that a tuner ranks its configurations by the number the
    benchmark then reports. Returns the median in ms; with ``quantiles`` (``triton.autotune``
    asks for ``(0.5, 0.2, 0.8)`` and ranks by the first) the list of those quantiles.

    Why not shorter repetitions for a tuner, which times every configuration: the course's
    tuners hold 3 to 9 configurations, so one tuning takes at most 9 x 60 ms, about half a
    second, once per shape (on its first shape each configuration also compiles, about a second
    each). Triton's defaults (25 and 100 ms) would double that; 5 and 20 ms would save a quarter
    of a second per shape and rank the configurations of a 5 ms GEMM by 4 launches each. Needs a
    GPU: triton is imported here, at the call."""
    from triton.testing import do_bench

    return do_bench(kernel_call, warmup=GPU_WARMUP_MS, rep=GPU_REP_MS, quantiles=quantiles, return_mode="median")
