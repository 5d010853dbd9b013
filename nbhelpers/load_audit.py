"""Watch the loads of a Triton kernel: how many elements it read as NaN where its mask was true.

An exercise launcher fills the memory around each operand with NaN. A load past an edge that a
mask should have stopped then reads NaN, but the NaN reaches the result only if the element it
feeds is stored: a GEMM that forgets the row mask of ``A`` pollutes only accumulator rows past
``M``, which the epilogue's masked store drops. So the launcher does not rely on the result: it
runs the kernel in Triton's interpreter with every ``tl.load`` watched, and counts the elements
that came back NaN under a true mask (the operands the checks pass are finite, so each such
element was read from the padding).

In the interpreter (no GPU) the watched run is the kernel's own run. On a GPU the compiled kernel
cannot be watched, so :func:`run_watching_loads` runs an interpreted copy of it first (on the same
arguments: it writes what the compiled run then writes again), then the compiled kernel, whose
results the caller reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class LoadCount:
    """Elements read by the watched ``tl.load`` calls: all of them, and those NaN under a true mask."""

    elements: int = 0
    nan_reads: int = 0


@contextmanager
def watched_loads() -> Iterator[LoadCount]:
    """While the block runs, count what every ``tl.load`` of an interpreted kernel reads (Triton's
    ``InterpreterBuilder.create_masked_load``, which unmasked loads go through too)."""
    from triton.runtime.interpreter import InterpreterBuilder

    count = LoadCount()
    original = InterpreterBuilder.create_masked_load

    def create_masked_load(self, ptrs, mask, other, *rest):
        loaded = original(self, ptrs, mask, other, *rest)
        values = np.asarray(loaded.data)
        count.elements += values.size
        if values.dtype.kind == "f":
            count.nan_reads += int(np.count_nonzero(np.isnan(values) & np.broadcast_to(mask.data, values.shape)))
        return loaded

    InterpreterBuilder.create_masked_load = create_masked_load
    try:
        yield count
    finally:
        InterpreterBuilder.create_masked_load = original


def run_watching_loads(kernel: Any, grid: tuple, *args: Any, **meta: Any) -> LoadCount:
    """Launch ``kernel[grid](*args, **meta)`` and return what its loads read (:class:`LoadCount`),
    watched in Triton's interpreter (on a GPU: an interpreted copy run first, then the kernel)."""
    from triton.runtime.interpreter import InterpretedFunction

    interpreted = isinstance(kernel, InterpretedFunction)
    watched = kernel if interpreted else InterpretedFunction(kernel.fn)
    with watched_loads() as count:
        watched[grid](*args, **meta)
    if not interpreted:
        kernel[grid](*args, **meta)
    return count
