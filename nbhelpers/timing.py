"""CPU wall-clock timing: :func:`interleaved_medians`, the one timer of the course's CPU
measurements (the benchmark scripts in ``benchmarks/`` and the timing cells of chapters 08 and
10). GPU timings need CUDA events: ``triton.testing.do_bench``.
"""

from __future__ import annotations

import statistics
import time

__all__ = ["interleaved_medians"]


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
    for name, v in (("rounds", rounds), ("warmup_rounds", warmup_rounds), ("calls", calls)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "warmup_rounds" else 1):
            raise ValueError(f"{name} must be an int >= {0 if name == 'warmup_rounds' else 1}, got {v!r}")
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
