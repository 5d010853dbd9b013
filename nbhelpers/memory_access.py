"""How many bytes an access pattern makes the memory move (chapter 08).

Memory is not read byte by byte. A warp's 32 threads issue one request, which the GPU serves in
32-byte *sectors* (CUDA C++ Best Practices Guide, coalesced access); a CPU moves whole 64-byte
*cache lines*. Either way, a read moves every byte of every sector (or line) it touches, useful
or not, so its efficiency is

    efficiency = useful bytes / (sectors touched * sector bytes).

* :func:`sectors_touched` counts the sectors a warp's request touches, from its byte addresses
  or from a pattern (element size, stride in elements, base offset): fp32 contiguous touches 4
  sectors for 128 useful bytes (1.0); stride 2, 8 sectors (1/2); stride 4, 16 (1/4); stride 8 or
  more, 32 (1/8); a transposed read (one element per row of a row-major matrix) is a long stride.
* :func:`sector_table` is that prediction for a list of strides, the chapter's table.
* :func:`cache_line_efficiency` is the same law one level up, for a long strided read on a CPU:
  a float32 read with stride s uses ``max(1/s, 4/64)`` of the bytes it moves.
* :func:`measure_strided_read` measures it on the machine running the notebook: the bandwidth of
  useful bytes of a strided numpy read against the contiguous one, beside that prediction.
* :func:`memory_requests` is the raw trace of a Triton kernel: it runs the kernel in Triton's
  interpreter on CPU tensors and returns each load and store it makes, lane by lane (the byte
  address of every element, the mask, the element size); :func:`loaded_addresses` is the
  addresses it loads. The exercises use them to see a load past the end of a buffer, which no
  output shows, and a warp whose lanes touch more sectors than contiguous lanes would.

Nothing here needs a GPU; only the two traces import Triton, when they are called.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .timing import interleaved_medians
from .validation import nonnegative_int, positive_int

__all__ = [
    "WARP_SIZE",
    "SECTOR_BYTES",
    "CACHE_LINE_BYTES",
    "SectorCount",
    "sectors_touched",
    "sector_table",
    "cache_line_efficiency",
    "StridedReads",
    "measure_strided_read",
    "MemoryRequest",
    "memory_requests",
    "loaded_addresses",
    "warp_sectors",
]

WARP_SIZE = 32  # threads of an NVIDIA warp
SECTOR_BYTES = 32  # the unit a GPU's memory request is served in
CACHE_LINE_BYTES = 64  # the unit a (x86 or Arm) CPU's caches move


@dataclass(frozen=True)
class SectorCount:
    """What one request moves: ``sectors`` distinct sectors of ``sector_bytes`` each, for
    ``useful_bytes`` distinct bytes asked for."""

    sectors: int
    useful_bytes: int
    sector_bytes: int = SECTOR_BYTES

    @property
    def moved_bytes(self) -> int:
        """Bytes the memory moves: every byte of every sector touched."""
        return self.sectors * self.sector_bytes

    @property
    def efficiency(self) -> float:
        """useful bytes / moved bytes, in (0, 1]; 1.0 for an empty request (nothing moved)."""
        return self.useful_bytes / self.moved_bytes if self.sectors else 1.0


def sectors_touched(
    addresses=None,
    *,
    elem_bytes: int = 4,
    stride: int = 1,
    base: int = 0,
    threads: int = WARP_SIZE,
    sector_bytes: int = SECTOR_BYTES,
) -> SectorCount:
    """The sectors one request touches, and the efficiency of the bytes it moves.

    Either ``addresses``, the byte address each thread reads (any length, non-negative ints), or
    a pattern: thread t reads the element at byte ``base + t * stride * elem_bytes`` for
    t = 0 .. threads-1 (stride in elements, at least 1). Each thread reads ``elem_bytes`` bytes
    from its address, which may straddle two sectors when it is misaligned. Useful bytes are the
    distinct bytes asked for (two threads reading the same element count it once).
    ``sector_bytes=64`` counts cache lines instead.
    """
    elem_bytes = positive_int("elem_bytes", elem_bytes)
    sector_bytes = positive_int("sector_bytes", sector_bytes)
    if addresses is None:
        stride = positive_int("stride", stride, "in elements")
        threads = nonnegative_int("threads", threads)
        base = nonnegative_int("base", base, "a byte address")
        addr = base + np.arange(threads, dtype=np.int64) * (stride * elem_bytes)
    else:
        addr = np.asarray(addresses)
        if addr.ndim != 1:
            raise ValueError(f"addresses must be 1-D (one per thread), got shape {addr.shape}")
        if addr.size and not np.issubdtype(addr.dtype, np.integer):
            raise TypeError(f"addresses must be integers (byte addresses), got dtype {addr.dtype}")
        addr = addr.astype(np.int64)
        if addr.size and addr.min() < 0:
            raise ValueError("addresses must be non-negative byte addresses")
    if addr.size == 0:
        return SectorCount(0, 0, sector_bytes)
    # distinct bytes: the union of [a, a + elem_bytes - 1]; distinct sectors: the union of
    # [a // S, (a + elem_bytes - 1) // S] (a misaligned element may straddle two sectors)
    starts = np.unique(addr)
    ends = starts + elem_bytes - 1
    useful = _count_union(starts, ends)
    sectors = _count_union(starts // sector_bytes, ends // sector_bytes)
    return SectorCount(sectors, useful, sector_bytes)


def _count_union(first: np.ndarray, last: np.ndarray) -> int:
    """Size of the union of the integer ranges [first_i, last_i], first sorted ascending."""
    reach = np.maximum.accumulate(last)
    # a range adds the sectors past everything before it
    prev = np.concatenate(([-1], reach[:-1]))
    return int(np.sum(np.maximum(0, last - np.maximum(first, prev + 1) + 1)))


def sector_table(
    strides=(1, 2, 4, 8, 16, 32), elem_bytes: int = 4, row_elems: int | None = 1024, sector_bytes: int = SECTOR_BYTES
) -> list[dict]:
    """The prediction of the sector model for one warp (32 threads), aligned base: one row per
    stride, ``{"pattern", "stride", "sectors", "useful_bytes", "moved_bytes", "efficiency"}``,
    plus a last row "transposed" (each thread reads one element of its own row of a row-major
    matrix with ``row_elems`` columns: a stride of a whole row) unless ``row_elems`` is None."""
    rows = []
    cases = [("contiguous" if s == 1 else f"stride {s}", s) for s in strides]
    if row_elems is not None:
        cases.append((f"transposed (rows of {row_elems})", row_elems))
    for name, s in cases:
        c = sectors_touched(elem_bytes=elem_bytes, stride=s, sector_bytes=sector_bytes)
        rows.append(
            {
                "pattern": name,
                "stride": s,
                "sectors": c.sectors,
                "useful_bytes": c.useful_bytes,
                "moved_bytes": c.moved_bytes,
                "efficiency": c.efficiency,
            }
        )
    return rows


def cache_line_efficiency(stride: int, elem_bytes: int = 4, line_bytes: int = CACHE_LINE_BYTES) -> float:
    """Useful bytes per byte moved by a long read of every ``stride``-th element (aligned
    elements, ``elem_bytes`` dividing ``line_bytes``), when memory moves whole lines.

    Per element read, the memory moves the bytes up to the next element read, ``stride *
    elem_bytes``, while that is less than a line (every line in between is touched); from one
    element per line on it moves a whole line per element. So moved / useful =
    ``min(stride * elem_bytes, line_bytes) / elem_bytes`` and the efficiency is its inverse,
    ``max(1 / stride, elem_bytes / line_bytes)``: for float32 and 64-byte lines 1, 1/2, 1/4,
    1/8, then 1/16 from stride 16 on.
    """
    stride = positive_int("stride", stride, "in elements")
    elem_bytes = positive_int("elem_bytes", elem_bytes)
    line_bytes = positive_int("line_bytes", line_bytes)
    if line_bytes % elem_bytes:
        raise ValueError(f"elem_bytes={elem_bytes} must divide line_bytes={line_bytes} (aligned elements)")
    return elem_bytes / min(stride * elem_bytes, line_bytes)


@dataclass(frozen=True)
class StridedReads:
    """A measurement of strided float32 reads on this CPU (see :func:`measure_strided_read`).

    Arrays, one entry per stride: ``strides``; ``seconds`` (median time of one read);
    ``useful_bytes`` (bytes of the elements read); ``bandwidth`` (useful bytes per second);
    ``measured_efficiency`` (bandwidth / the contiguous read's, stride 1 first);
    ``predicted_efficiency`` (what the 64-byte line model predicts for ``measured_efficiency``:
    :func:`cache_line_efficiency` e for ``op="sum"``; for ``op="copy"``, whose contiguous write of
    the useful bytes is the same at every stride, ``2 / (1 + 1 / e)``). ``array_bytes`` is the
    size of the array read, ``repeats`` the number of interleaved rounds, ``op`` what was timed.
    """

    strides: np.ndarray
    seconds: np.ndarray
    useful_bytes: np.ndarray
    bandwidth: np.ndarray
    measured_efficiency: np.ndarray
    predicted_efficiency: np.ndarray
    array_bytes: int
    repeats: int
    op: str


_OPS = ("sum", "copy")


def _predicted(e: float, op: str) -> float:
    """Useful bandwidth relative to stride 1 when the read has line efficiency e."""
    return e if op == "sum" else 2 / (1 + 1 / e)


def measure_strided_read(
    strides=(1, 2, 4, 8, 16, 32), n: int = 2**25, repeats: int = 7, op: str = "sum", seed: int = 0
) -> StridedReads:
    """Time a read of ``x[::s]`` for each stride s, x a float32 array of ``n`` elements (the
    default, 128 MiB, is far larger than a CPU's caches, so every read comes from main memory).

    op: ``"sum"`` (``np.sum(x[::s])``, reads only) or ``"copy"`` (``np.copyto(out, x[::s])``, reads
    and writes the useful bytes once more; the bandwidth still counts the useful bytes read, and
    the prediction counts the write: the read moves useful / e bytes, the write the useful bytes,
    so relative to the contiguous copy (2 useful) the useful bandwidth is ``2 / (1 / e + 1)``).
    Rounds are interleaved (stride 1, 2, ..., then again) so that a slow moment of the machine
    hits every stride alike; the time per stride is the median over ``repeats`` rounds, after
    one warm-up round. The first stride is the reference of ``measured_efficiency``: pass 1 first.
    """
    strides = [positive_int("stride", s, "in elements") for s in strides]
    if not strides:
        raise ValueError("strides must not be empty")
    n = positive_int("n", n)
    repeats = positive_int("repeats", repeats)
    if op not in _OPS:
        raise ValueError(f"op must be one of {_OPS}, got {op!r}")
    x = np.random.default_rng(seed).random(n, dtype=np.float32)
    outs = {s: np.empty(math.ceil(n / s), dtype=np.float32) for s in strides} if op == "copy" else {}

    def read(s):
        if op == "sum":
            return np.sum(x[::s])
        np.copyto(outs[s], x[::s])

    # round 0 warms up (page faults of the output arrays, code paths)
    med = interleaved_medians({s: (lambda s=s: read(s)) for s in strides}, repeats, warmup_rounds=1)
    seconds = np.array([med[s] for s in strides])
    useful = np.array([math.ceil(n / s) * 4 for s in strides], dtype=np.int64)
    bandwidth = useful / seconds
    return StridedReads(
        strides=np.array(strides),
        seconds=seconds,
        useful_bytes=useful,
        bandwidth=bandwidth,
        measured_efficiency=bandwidth / bandwidth[0],
        predicted_efficiency=np.array([_predicted(cache_line_efficiency(s), op) for s in strides]),
        array_bytes=int(x.nbytes),
        repeats=repeats,
        op=op,
    )


@dataclass(frozen=True)
class MemoryRequest:
    """One ``tl.load`` or ``tl.store`` of one program, as Triton's interpreter makes it.

    ``addresses`` holds the byte address of every lane (uint64, 1-D: the pointer tensor in its
    row-major order, masked-off lanes included), ``active`` which lanes the mask lets through
    (bool, same shape), ``elem_bytes`` the size of one element."""

    op: str  # "load" or "store"
    addresses: np.ndarray
    active: np.ndarray
    elem_bytes: int


def memory_requests(kernel, grid, *args, **kwargs) -> list[MemoryRequest]:
    """Run the Triton kernel ``kernel`` (a ``@triton.jit`` function, or its Python function) on
    ``grid`` in Triton's interpreter and return its loads and stores, in the order made, one
    :class:`MemoryRequest` per ``tl.load`` or ``tl.store`` of a program (block pointers and
    tensor descriptors included: the interpreter turns them into masked pointer accesses).

    Pass CPU tensors: the interpreter then works on their own memory, so the addresses can be
    compared with ``t.data_ptr()``. The kernel really runs (its stores land in the tensors
    passed). Works with or without ``TRITON_INTERPRET=1`` and on a machine with a GPU, where it
    records what the compiled kernel's accesses would be, lane by lane. Atomics are not traced.
    """
    import torch
    from triton.runtime import interpreter

    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and a.device.type != "cpu":
            raise ValueError(f"pass CPU tensors (the interpreter's addresses are theirs), got one on {a.device}")
    traced = interpreter.InterpretedFunction(getattr(kernel, "fn", kernel))
    seen: list[MemoryRequest] = []
    builder = interpreter.InterpreterBuilder
    load, store = builder.create_masked_load, builder.create_masked_store

    def note(op, ptrs, mask):
        p = np.asarray(ptrs.data)
        m = np.broadcast_to(np.asarray(mask.data, dtype=bool), p.shape)
        elem_bytes = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)  # a bool is a byte
        seen.append(MemoryRequest(op, p.astype(np.uint64).ravel(), m.ravel().copy(), elem_bytes))

    def create_masked_load(self, ptrs, mask, *rest, **kw):
        note("load", ptrs, mask)
        return load(self, ptrs, mask, *rest, **kw)

    def create_masked_store(self, ptrs, value, mask, *rest, **kw):
        note("store", ptrs, mask)
        return store(self, ptrs, value, mask, *rest, **kw)

    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
    try:
        traced[grid](*args, **kwargs)
    finally:
        builder.create_masked_load, builder.create_masked_store = load, store
    return seen


def loaded_addresses(kernel, grid, *args, **kwargs) -> np.ndarray:
    """Run the Triton kernel ``kernel`` (a ``@triton.jit`` function, or its Python function) on
    ``grid`` in Triton's interpreter and return the byte address of every element it loads, in
    the order loaded (uint64, 1-D; masked-off lanes are not loads and are left out): the loads
    of :func:`memory_requests`, which says what to pass.
    """
    loads = [r.addresses[r.active] for r in memory_requests(kernel, grid, *args, **kwargs) if r.op == "load"]
    return np.concatenate(loads) if loads else np.zeros(0, dtype=np.uint64)


def warp_sectors(
    requests: list[MemoryRequest], warp: int = WARP_SIZE, sector_bytes: int = SECTOR_BYTES
) -> dict[str, int]:
    """The sectors the warps of ``requests`` move, summed per op: ``{"load": n, "store": m}``. A
    warp is ``warp`` consecutive lanes of one request (its pointer tensor in row-major order), its
    masked-off lanes left out; it moves every sector that holds the first byte of an active lane
    (a kernel's elements are aligned to their size, so none straddles a sector)."""
    counts = {"load": 0, "store": 0}
    for r in requests:
        for w in range(0, r.addresses.size, warp):
            lanes = r.addresses[w : w + warp][r.active[w : w + warp]]
            counts[r.op] += int(np.unique(lanes // sector_bytes).size)
    return counts
