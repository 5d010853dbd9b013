"""Timing helpers for the scripts in benchmarks/ (CPU wall clock; GPU timings need events)."""
from __future__ import annotations

import time
from typing import Callable

__all__ = ["best_time"]


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Smallest wall-clock time of ``repeats`` calls of ``fn()``, in seconds."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
