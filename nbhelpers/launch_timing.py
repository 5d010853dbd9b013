"""What a host clock sees of a GPU launch, and what the host reads before the device has written
(chapter 08, section 2): the copy kernel timed five ways, and the race of a non-blocking copy.

:func:`time_launch` times one launch of a kernel with the host's clock, with and without waiting
for the device, with CUDA events (on an idle stream, and behind work queued first) and with
:func:`nbhelpers.timing.gpu_median_ms`;
:func:`race_tries` queues a kernel and a non-blocking copy into pinned memory and reads the host
buffer at once and after a synchronisation. Both return rows of the family's
:class:`~nbhelpers.families.copy.LaunchTimingRow` form (dicts), the rows that
``benchmarks/gpu_launch_timing.py`` records and chapter 08 prints live on a GPU.

Importing this module imports no torch and no Triton (each function imports them at its call),
so a notebook may import it before :func:`nbhelpers.device.setup_device`. The functions need a
CUDA GPU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from .validation import positive_int

__all__ = ["LEAD_CYCLES", "METHODS", "copy_launcher", "race_tries", "summarise", "time_launch"]

#: the timings of :func:`time_launch`, in the order it returns them
METHODS = (
    "wall, no synchronize",
    "wall, no synchronize, torch op",
    "wall + synchronize",
    "CUDA events, idle stream",
    "CUDA events, busy stream",
    "do_bench",
)

#: GPU clock cycles of the work queued before the start event of the busy-stream timing
#: (``torch.cuda._sleep``): about 1 ms at 1-2 GHz, far longer than a launch costs the host
LEAD_CYCLES = 2_000_000


def summarise(name: str, method: str, seconds: list[float], useful_bytes: int) -> dict:
    """A timing row from the times of one method (seconds, at least one): median, extremes, and
    the bandwidth the median gives ``useful_bytes``."""
    if not seconds:
        raise ValueError(f"{name}: no times to summarise")
    med = statistics.median(seconds)
    return {
        "name": name,
        "kind": "timing",
        "method": method,
        "repeats": len(seconds),
        "seconds": med,
        "seconds_min": min(seconds),
        "seconds_max": max(seconds),
        "useful_bytes": int(useful_bytes),
        "bandwidth": useful_bytes / med if med > 0 else float("inf"),
    }


def copy_launcher(n: int, block: int = 1024) -> tuple[Callable[[], None], Callable[[], None], int]:
    """``(launch, torch_op, useful_bytes)`` for a float32 copy of ``n`` elements on the GPU:
    ``launch`` launches :func:`~nbhelpers.kernels.copy.copy_kernel` with ``BLOCK = block`` (once
    already, compiled and checked against its input), ``torch_op`` queues torch's ``y.copy_(x)``
    on the same buffers; each element is read once and written once."""
    n, block = positive_int("n", n), positive_int("block", block)
    import torch
    import triton

    from .kernels.copy import copy_kernel

    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    grid = (triton.cdiv(n, block),)

    def launch() -> None:
        copy_kernel[grid](x, y, n, BLOCK=block)

    def torch_op() -> None:
        y.copy_(x)

    launch()
    torch.cuda.synchronize()  # compiled and warmed up outside the timings
    if not torch.equal(x, y):
        raise AssertionError(f"copy_kernel, BLOCK={block}: wrong output")
    return launch, torch_op, 2 * 4 * n


def time_launch(
    launch: Callable[[], object],
    useful_bytes: int,
    repeats: int = 20,
    torch_op: Callable[[], object] | None = None,
    lead_cycles: int = LEAD_CYCLES,
) -> list[dict]:
    """Time ``launch`` (a function that queues GPU work) the ways of :data:`METHODS`, each
    ``repeats`` times from an idle device (``do_bench`` once, its own median): the host's clock
    stopped when the launch returns; the same around ``torch_op`` (skipped when None); the host's
    clock stopped after ``torch.cuda.synchronize()``; CUDA events recorded around the launch on an
    idle stream, where the device timestamps the start at once and then waits while the host is
    still launching, so the gap is timed too; the same events behind ``lead_cycles`` of
    ``torch.cuda._sleep`` queued first, so that the launch is queued before the device reaches
    the start event and the events time the kernel alone (as ``do_bench``'s do: it queues an L2
    clear before each start). Returns one timing row per method (see :func:`summarise`)."""
    repeats = positive_int("repeats", repeats)
    lead_cycles = positive_int("lead_cycles", lead_cycles)
    import torch

    from .timing import gpu_median_ms

    def wall(fn, sync: bool) -> list[float]:
        out = []
        for _ in range(repeats):
            torch.cuda.synchronize()  # start from an idle device
            t0 = time.perf_counter()
            fn()
            if sync:
                torch.cuda.synchronize()  # stop when the device is done
            out.append(time.perf_counter() - t0)  # without: when the launch returns
        torch.cuda.synchronize()
        return out

    def events(busy: bool) -> list[float]:
        out = []
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            if busy:  # the device sleeps while the host records the start and launches
                torch.cuda._sleep(lead_cycles)
            start.record()
            launch()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e-3)  # ms -> s, timestamped by the device
        return out

    rows = [summarise("triton launch, wall clock, no synchronize", METHODS[0], wall(launch, False), useful_bytes)]
    if torch_op is not None:
        rows.append(
            summarise("torch y.copy_(x), wall clock, no synchronize", METHODS[1], wall(torch_op, False), useful_bytes)
        )
    rows.append(summarise("triton launch, wall clock + synchronize", METHODS[2], wall(launch, True), useful_bytes))
    rows.append(summarise("triton launch, CUDA events, idle stream", METHODS[3], events(False), useful_bytes))
    rows.append(summarise("triton launch, CUDA events after queued work", METHODS[4], events(True), useful_bytes))
    rows.append(summarise("triton launch, do_bench (median)", METHODS[5], [gpu_median_ms(launch) * 1e-3], useful_bytes))
    return rows


def race_tries(n: int = 2**26, tries: int = 5, tail: int = 4) -> list[dict]:
    """The silent zero, ``tries`` times: queue ``x * 2`` on ``n`` ones and a non-blocking copy of
    the result into a pinned host buffer of zeros, record an event after the copy, read the last
    ``tail`` values of the buffer and ask the event at once, then again after
    ``torch.cuda.synchronize()``. One race row per try (the family's ``LaunchTimingRow``)."""
    n, tries, tail = positive_int("n", n), positive_int("tries", tries), positive_int("tail", tail)
    if tail > n:
        raise ValueError(f"tail ({tail}) must not exceed n ({n})")
    import torch

    x = torch.ones(n, device="cuda")
    host = torch.zeros(n, pin_memory=True)  # pinned: the copy engine writes it by itself
    rows = []
    for k in range(tries):
        host.zero_()
        torch.cuda.synchronize()  # start from an idle device
        host.copy_(x * 2, non_blocking=True)  # a kernel and a copy, both queued
        copied = torch.cuda.Event()
        copied.record()  # passed once the copy is done
        before = host[-tail:].tolist()  # read at once: the race
        passed_before = copied.query()
        torch.cuda.synchronize()
        rows.append(
            {
                "name": f"race, try {k + 1}",
                "kind": "race",
                "repeats": 1,
                "before": before,
                "after": host[-tail:].tolist(),
                "expected": [2.0] * tail,
                "event_before": bool(passed_before),
                "event_after": bool(copied.query()),
            }
        )
    return rows
