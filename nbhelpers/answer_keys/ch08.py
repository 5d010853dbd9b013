"""Chapter 08 exercises: the GPU programming model and memory coalescing. Listed in ``EXERCISES``
for :mod:`nbhelpers.answer_keys`.

- ``stream_times``: predict what a host's clock and a stream's events read when the host queues
  kernels on one stream (section 2 of the chapter: a launch returns before the kernel runs; a
  synchronize waits; an event is timestamped by the device). The rules are the statement's: each
  launch costs the host ``launch_us``; a kernel starts once it is queued and the one before it
  has finished; a launch waits while ``depth`` kernels are unfinished (a full queue); an event's
  time is when the stream reaches it. Reference: :func:`stream_times_ref`; compared exactly, as
  lists of ints (the durations are whole microseconds).
- ``transpose_tiles``: a Triton kernel that writes ``x.T`` with its loads along the rows of ``x``
  and its stores along the rows of ``out`` (so a tile changes layout between them), run through
  the launcher the notebook gives (:data:`LAUNCHER`, ``Exercise.given``). The launcher refuses a
  kernel that reaches host code (:func:`nbhelpers.load_audit.host_code_problems`), places ``x``
  and ``out`` in buffers whose rows are ``pad`` elements longer, with guard rows above and below
  (:data:`GUARD_IN`, :data:`GUARD_OUT`), and runs the kernel in Triton's interpreter with every
  load and store recorded (:func:`nbhelpers.memory_access.memory_requests`) and watched
  (:func:`nbhelpers.load_audit.watched_loads`: an access outside the launch's buffers raises
  :class:`~nbhelpers.load_audit.StrayPointerError` before it happens, so a wild pointer fails the
  case instead of writing into the process). It returns the output buffer, the loads outside
  ``x``, the repeated loads, and the 32-byte sectors its load warps and its store warps touch
  (:func:`nbhelpers.memory_access.warp_sectors`: a warp is 32 consecutive entries of a request's
  pointer tensor, row-major, masked-off lanes left out; a helper, so that the launcher does not
  show how ``trace_sectors`` counts, and one ``trace_sectors`` may not call). Reference:
  :func:`transpose_tiles_ref`: ``x.T`` in the same buffer, 0, 0, and the sectors of warps along
  the tiles' rows of ``x`` (loads) and of ``out`` (stores), the counts of
  :func:`nbhelpers.kernels.copy.transpose_kernel` (tests/test_exercises_ch08.py runs it through
  the launcher). The buffer is compared bit for bit (a difference named as ``out[j, i]``, a guard
  row or a row's padding, not by its place in the buffer), the first two counts exactly, the
  sector counts as "at most" the reference's. The statement names ``tl.trans``: loads along
  ``x``'s rows and stores along ``out``'s need the tile turned between them.
- ``trace_sectors``: a raw address trace (one warp's byte addresses, any order, duplicates,
  misaligned, accesses straddling a sector boundary or covering several sectors, half-warps a
  multiple of 4 GiB apart, whose low 32 bits coincide) and the access size (1 to 128 bytes): the
  32-byte sectors touched and the efficiency (distinct bytes asked for / bytes moved); the
  reference is :func:`nbhelpers.memory_access.sectors_touched` on the addresses. The count is
  compared exactly, as an int, the efficiency to a relative 1e-12 (a student may divide in
  another order).

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import numpy as np

from ..comparators import close_to, same_value
from ..exercise_types import Case, Exercise, ExerciseKind
from ..memory_access import sectors_touched

GUARD_IN = 77  # the input buffer's guard value (a kernel that reads outside x reads these)
GUARD_OUT = 99  # the output buffer's guard value (must survive the kernel outside out)


def _int_or_reason(got, what: str) -> str | None:
    """None when got is an int (a numpy integer too, not a bool), else why not."""
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
        return f"{what}: {got!r} is a {type(got).__name__}, not an int"
    return None


# ------------------------------------------------------------------ 1. a host and a stream


def stream_times_ref(ops: list, launch_us: int, depth: int) -> tuple[list[int], list[int]]:
    """(the host's clock readings, the events' device times), in µs from 0, in the order made.

    ops: ("launch", d) queues a kernel of d µs, costing the host launch_us after it has waited
    for a free slot (fewer than depth kernels unfinished); ("host", d) is d µs of host work;
    ("sync",) waits for every kernel queued; ("clock",) reads the host's clock; ("event",)
    records an event, timestamped when the stream reaches it."""
    host = 0
    ends: list[int] = []  # each kernel's end, in launch order (one stream: in order)
    clocks: list[int] = []
    events: list[int] = []
    for op in ops:
        kind = op[0]
        last = ends[-1] if ends else 0
        if kind == "launch":
            if len(ends) >= depth:  # a full queue: wait for kernel k - depth
                host = max(host, ends[len(ends) - depth])
            host += launch_us
            ends.append(max(host, last) + op[1])
        elif kind == "host":
            host += op[1]
        elif kind == "sync":
            host = max(host, last)
        elif kind == "clock":
            clocks.append(host)
        elif kind == "event":
            events.append(max(host, last))
        else:
            raise ValueError(f"unknown operation {op!r}")
    return clocks, events


def _int_lists(got, expected) -> str | None:
    """Two lists of ints, each equal to the reference's; never raises."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return same_value(got, expected)  # its reason names what came back
    for name, g, e in zip(("the clock readings", "the event times"), got, expected):
        if not isinstance(g, (list, tuple)):
            return f"{name}: a {type(g).__name__}, not a list"
        for i, v in enumerate(g):
            reason = _int_or_reason(v, f"{name}[{i}]")
            if reason is not None:
                return reason
        if len(g) != len(e):
            return f"{name}: {len(g)} of them, expected {len(e)}"
        wrong = [i for i, (a, b) in enumerate(zip(g, e)) if int(a) != b]
        if wrong:
            i = wrong[0]
            return f"{name}[{i}] = {int(g[i])}, expected {e[i]} ({len(wrong)} of {len(e)} wrong)"
    return None


def _timing_cases(rng: np.random.Generator) -> list[Case]:
    S, C, E = ("sync",), ("clock",), ("event",)

    def launch(d: int) -> tuple:
        return ("launch", d)

    def host(d: int) -> tuple:
        return ("host", d)

    cases = [
        Case(([C, launch(100), C], 5, 1024), label="a wall clock around one launch"),
        Case(([C, launch(100), S, C], 5, 1024), label="the same, synchronized"),
        Case(([E, launch(100), E, S], 5, 1024), label="events around one kernel"),
        Case(([C, E, launch(50), launch(50), E, C, S, C], 5, 1024), label="two kernels back to back"),
        Case(([launch(10), host(100), E, C, S, C], 5, 1024), label="an event recorded after the stream drained"),
        Case(([launch(100), host(20), launch(10), E, S, C], 5, 1024), label="the second kernel waits for the first"),
        Case(([C] + [launch(100)] * 5 + [C, S, C], 5, 2), label="a loop of launches against a queue of 2"),
        Case(([C] + [launch(100)] * 4 + [C, S, C], 5, 1), label="a queue of 1: every launch waits for the last"),
        Case(([launch(0), launch(0), E, C], 3, 1024), label="empty kernels: only the launches cost"),
        Case(([C, launch(30), host(50), launch(30), E, C], 0, 1024), label="free launches, a host gap"),
        Case(([C, C, S, E], 5, 4), label="nothing launched"),
        Case(([host(30), E, launch(10), S, C], 5, 4), label="an event before any launch, after host work"),
    ]
    for _ in range(40):
        depth = int(rng.choice([1, 2, 3, 4, 8, 1024], p=[0.15, 0.2, 0.2, 0.15, 0.15, 0.15]))
        launch_us = int(rng.choice([0, 1, 3, 5, 5, 5, 8, 20]))
        ops: list = []
        if rng.random() < 0.25:  # host work, then an event before anything is launched
            ops += [host(int(rng.integers(1, 120))), E]
        for _ in range(int(rng.integers(4, 30))):
            r = rng.random()
            if r < 0.45:
                ops.append(launch(int(rng.choice([0, int(rng.integers(1, 20)), int(rng.integers(20, 300))]))))
            elif r < 0.6:
                ops.append(host(int(rng.integers(0, 120))))
            elif r < 0.7:
                ops.append(S)
            elif r < 0.85:
                ops.append(C)
            else:
                ops.append(E)
        ops.append(C)
        cases.append(Case((ops, launch_us, depth)))
    return cases


# ------------------------------------------------------------------ 2. a coalesced transpose


def _buffer(data: np.ndarray, guard_rows: int, pad: int, fill) -> np.ndarray:
    """data (R, C) in a buffer (R + 2 guard_rows, C + pad) filled with fill: the layout the
    launcher gives x and out (their rows pad elements longer, guard rows above and below)."""
    R, C = data.shape
    buf = np.full((R + 2 * guard_rows, C + pad), fill, dtype=data.dtype)
    buf[guard_rows : guard_rows + R, :C] = data
    return buf


def _least_sectors(rows: int, cols: int, pitch: int, size: int, block_r: int, block_c: int) -> int:
    """The sectors touched by the warps of requests that each cover a block_r x block_c tile of a
    (rows, cols) matrix along its rows (element (i, j) at byte (i pitch + j) size from a sector
    boundary), tiles over the whole matrix, lanes outside it masked off; a warp is 32
    consecutive entries of the tile, row by row."""
    i = np.arange(block_r)[:, None]
    j = np.arange(block_c)[None, :]
    total = 0
    for r0 in range(0, rows, block_r):
        for c0 in range(0, cols, block_c):
            active = ((r0 + i < rows) & (c0 + j < cols)).ravel()
            sector = (((r0 + i) * pitch + c0 + j) * size // 32).ravel()
            total += _warp_sectors(sector, active)
    return total


def _warp_sectors(sector: np.ndarray, active: np.ndarray) -> int:
    """Distinct sectors of each 32 consecutive lanes (the active ones), summed."""
    lanes = -(-sector.size // 32) * 32
    s = np.full(lanes, -1, dtype=np.int64)
    s[: sector.size] = np.where(active, sector, -1)
    s = np.sort(s.reshape(-1, 32), axis=1)
    return int(((s[:, 1:] != s[:, :-1]) & (s[:, 1:] >= 0)).sum() + (s[:, 0] >= 0).sum())


def transpose_tiles_ref(x: np.ndarray, block_m: int, block_n: int, pad: int) -> tuple[np.ndarray, int, int, int, int]:
    """x.T (N, M) in its buffer (N + 2 block_n, M + pad) of GUARD_OUT; 0 loads outside x; 0
    repeated loads; the sectors of loads along x's rows and of stores along out's rows."""
    x = np.ascontiguousarray(x)
    M, N = x.shape
    size = x.itemsize
    out = _buffer(x.T, block_n, pad, GUARD_OUT)
    loads = _least_sectors(M, N, N + pad, size, block_m, block_n)
    stores = _least_sectors(N, M, M + pad, size, block_n, block_m)
    return TransposeExpected((out, 0, 0, loads, stores), guard=block_n, shape=(N, M))


class TransposeExpected(tuple):
    """The reference's (buffer, counts...), shown and compared as the tuple, carrying where ``out``
    (``shape``) lies in the buffer (``guard`` rows down), so that a message names ``out[j, i]``
    rather than a position in the buffer."""

    guard: int
    shape: tuple[int, int]

    def __new__(cls, values, guard: int, shape: tuple[int, int]):
        obj = super().__new__(cls, values)
        obj.guard, obj.shape = guard, shape
        return obj

    def __getnewargs__(self):  # pickled between the grader's processes
        return tuple(self), self.guard, self.shape


def _where_in_buffer(r: int, c: int, guard: int, shape: tuple[int, int]) -> str:
    """Buffer element (r, c) as the reader knows it: out[j, i], a guard row, or a row's padding."""
    rows, cols = shape
    if not guard <= r < guard + rows:
        return f"a guard row {'above' if r < guard else 'below'} out (buffer row {r}, column {c})"
    if c >= cols:
        return f"the padding past the end of out's row {r - guard} (buffer column {c})"
    return f"out[{r - guard}, {c}]"


def _buffer_reason(got, expected: np.ndarray, guard: int, shape: tuple[int, int]) -> str | None:
    """same_value's verdict on the buffer, its first difference named in out's coordinates."""
    reason = same_value(got, expected)
    if reason is None:
        return None
    g = got if isinstance(got, np.ndarray) else None
    if g is None or g.shape != expected.shape or g.dtype != expected.dtype:
        return reason
    bits = np.dtype(f"u{expected.itemsize}")
    bad = g.view(bits) != expected.view(bits)
    if not bad.any():
        return reason
    r, c = (int(v) for v in np.argwhere(bad)[0])
    return (
        f"{int(bad.sum())} of {bad.size} elements differ; first at {_where_in_buffer(r, c, guard, shape)}: "
        f"got {g[r, c]!r}, expected {expected[r, c]!r}"
    )


#: What the launcher's counts are, in its order, for a failing check's message.
_COUNTS = ("loads outside x", "loads of an element of x beyond its first")
_SECTORS = ("sectors the loads touch", "sectors the stores touch")


def _transpose_and_counts(got, expected) -> str | None:
    """The buffer bit for bit, the first two counts exactly, the sectors at most the reference's;
    never raises."""
    if not isinstance(got, (tuple, list)) or len(got) != len(expected):
        return same_value(got, expected)  # its reason names what came back
    guard, shape = getattr(expected, "guard", 0), getattr(expected, "shape", np.shape(expected[0]))
    reason = _buffer_reason(got[0], expected[0], guard, shape)
    if reason is not None:
        return f"the output buffer: {reason}"
    for name, g, e in zip(_COUNTS + _SECTORS, got[1:], expected[1:]):
        reason = _int_or_reason(g, name)
        if reason is not None:
            return reason
        if name in _COUNTS and g != e:
            return f"{name}: {int(g)}, expected {e}"
        if name in _SECTORS and g > e:
            return f"{name}: {int(g)}, the least is {e} (a warp that reads or writes across rows)"
    return None


_DTYPES = (np.float32, np.float16, np.int32, np.int16, np.int8, np.uint8, np.float64, np.int64)


def _values(rng: np.random.Generator, shape: tuple[int, int], dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    n = shape[0] * shape[1]
    if dt.kind == "f":
        x = (rng.standard_normal(n) * 100).astype(dt)
        if n >= 3:  # a NaN, an infinity and a negative zero are moved like any other bits
            x[rng.integers(n)] = np.nan
            x[rng.integers(n)] = -np.inf
            x[rng.integers(n)] = -0.0
        return x.reshape(shape)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)


def _transpose_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(808)  # the labelled cases are the same for every seed
    v = _values
    cases = [
        Case((v(fixed, (1, 1), np.float32), 16, 16, 0), label="1 x 1"),
        Case((v(fixed, (16, 16), np.float32), 16, 16, 0), label="one full tile"),
        Case((v(fixed, (17, 15), np.float32), 16, 16, 0), label="17 x 15: ragged on both edges"),
        Case((v(fixed, (40, 70), np.int32), 32, 64, 0), label="BLOCK_M != BLOCK_N"),
        Case((v(fixed, (70, 40), np.int32), 64, 16, 3), label="BLOCK_M != BLOCK_N, rows padded by 3"),
        Case((v(fixed, (1, 100), np.float16), 16, 32, 0), label="one row"),
        Case((v(fixed, (100, 1), np.float16), 32, 16, 0), label="one column"),
        Case((v(fixed, (33, 65), np.int8), 32, 64, 5), label="int8, padded"),
        Case((v(fixed, (64, 64), np.float64), 32, 32, 0), label="float64, whole tiles"),
        Case((v(fixed, (48, 80), np.float32), 16, 64, 16), label="rows padded by a whole tile"),
    ]
    dtypes = rng.permutation(np.repeat(np.arange(len(_DTYPES)), 4))
    for i in range(30):
        block_m = int(rng.choice([16, 32, 64]))
        block_n = int(rng.choice([16, 32, 64]))
        sizes = []
        for block in (block_m, block_n):  # any size, or a whole number of blocks plus or minus one
            ragged = block * int(rng.integers(1, 3)) + int(rng.choice([-1, 1]))
            sizes.append(int(rng.integers(1, 100)) if rng.random() < 0.7 else ragged)
        M, N = sizes
        pad = int(rng.choice([0, 0, 1, 3, 8, int(rng.integers(0, 40))]))
        cases.append(Case((v(rng, (M, N), _DTYPES[int(dtypes[i])]), block_m, block_n, pad)))
    return cases


# ------------------------------------------------------------------ 3. sectors of a raw address trace


def trace_sectors_ref(addresses: np.ndarray, access_bytes: int) -> tuple[int, float]:
    """(distinct 32-byte sectors touched, distinct bytes asked for / bytes moved) when each
    address reads access_bytes bytes."""
    c = sectors_touched(np.asarray(addresses, dtype=np.int64), elem_bytes=access_bytes)
    return c.sectors, c.efficiency


def _sectors_and_efficiency(got, expected) -> str | None:
    """The count exactly, the efficiency within a relative 1e-12; never raises."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return same_value(got, expected)  # its reason names what came back
    reason = _int_or_reason(got[0], "the sector count")
    if reason is not None:
        return reason
    if got[0] != expected[0]:
        return f"the sector count: {int(got[0])}, expected {expected[0]}"
    reason = _close(got[1], expected[1])
    return None if reason is None else f"the efficiency: {reason}"


_close = close_to(1e-12)


def _warp(base: int, stride_bytes: int) -> np.ndarray:
    return base + np.arange(32, dtype=np.int64) * stride_bytes


def _trace_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(8088)  # the labelled cases are the same for every seed
    cases = [
        Case((_warp(0, 4), 4), label="fp32, contiguous, aligned"),
        Case((_warp(4096 + 4, 4), 4), label="fp32, contiguous, 4 bytes past a sector boundary"),
        Case((_warp(30, 4), 4), label="fp32 at base 30: every access straddles two sectors"),
        Case((_warp(28, 32), 8), label="8-byte accesses 32 bytes apart, each straddling"),
        Case((_warp(0, 128), 4), label="fp32, stride 32 elements: one sector per thread"),
        Case((fixed.permutation(_warp(256, 4)), 4), label="contiguous, threads in shuffled order"),
        Case((np.full(32, 1000, dtype=np.int64), 4), label="every thread the same address (a broadcast)"),
        Case((np.repeat(_warp(64, 8)[:16], 2), 8), label="pairs of threads reading the same 8 bytes"),
        Case((_warp(1, 2), 4), label="4-byte accesses 2 bytes apart: they overlap"),
        Case((_warp(8, 16), 16), label="16-byte accesses, misaligned by 8"),
        Case((_warp(31, 1), 1), label="bytes 31 to 62"),
        Case((_warp(2**40 + 30, 4096), 4), label="a large address, a long stride, straddling"),
        Case((np.sort(fixed.integers(0, 512, 32)), 4), label="scattered in 512 bytes, unaligned"),
        Case((_warp(0, 512), 128), label="128-byte accesses 512 apart: four whole sectors each"),
        Case((_warp(8, 256), 64), label="64-byte accesses misaligned by 8: three sectors each"),
        Case(
            (np.concatenate([_warp(64, 4)[:16], _warp(2**32 + 64, 4)[:16]]), 4),
            label="two half-warps 4 GiB apart: the same low 32 bits, other sectors",
        ),
    ]
    # accesses of up to 16 bytes (a thread's vector load) and wider ones, as a trace of cache
    # lines or of a whole warp's vector loads gives them: an access may cover several sectors
    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    for _ in range(60):
        size = int(rng.choice(sizes, p=[0.08, 0.15, 0.3, 0.15, 0.12, 0.07, 0.07, 0.06]))
        r = rng.random()
        base = int(rng.integers(0, 2**20))
        if r < 0.35:  # strided, often misaligned
            addr = _warp(base, size * int(rng.integers(1, 12)))
        elif r < 0.55:  # a byte stride that is not a multiple of the size: overlaps or gaps
            addr = _warp(base, int(rng.integers(1, 3 * size + 2)))
        elif r < 0.8:  # scattered in a window, duplicates likely
            addr = base + rng.integers(0, int(rng.choice([64, 256, 2048])), 32)
        else:  # a contiguous warp with a few threads on the same element
            addr = _warp(base, size)
            k = int(rng.integers(1, 9))
            addr[rng.integers(0, 32, k)] = addr[int(rng.integers(32))]
        if rng.random() < 0.5:
            addr = rng.permutation(addr)
        cases.append(Case((addr.astype(np.int64), size)))
    # half-warps a multiple of 4 GiB apart, anywhere in a 48-bit address space (tensors of several
    # GiB, or far apart): their low 32 bits coincide, and only the whole address tells their
    # sectors apart
    for _ in range(2):
        size = int(rng.choice([1, 2, 4, 8, 16]))
        half = _warp(int(rng.integers(0, 2**20)), size * int(rng.integers(1, 4)))[:16]
        addr = np.concatenate([half, half + int(rng.integers(1, 5)) * 2**32]) + int(rng.integers(0, 2**16)) * 2**32
        cases.append(Case((rng.permutation(addr), size)))
    return cases


#: What an answer may not call (Exercise.forbidden): no memory_access or kernels (the given
#: launcher's memory_requests and warp_sectors aside).
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.memory_access", "nbhelpers.kernels")
#: The course's machinery under every interpreted launch (a cache of the interpreter's work), and
#: the load and store trace the given launcher calls.
MACHINERY = (
    "nbhelpers.kernels.interpreter_cache",
    "nbhelpers.memory_access:loaded_addresses",
    "nbhelpers.memory_access:memory_requests",
)
#: ex08.transpose_tiles's launcher also counts its warps' sectors with warp_sectors, which
#: ex08.trace_sectors may not call (its own question, for one warp).
TRANSPOSE_MACHINERY = (*MACHINERY, "nbhelpers.memory_access:warp_sectors")

#: The launcher of ex08.transpose_tiles, given whole by the statement (Exercise.given): an answer
#: that changes it (the transpose done on the host, the counts typed in) scores nothing. It imports
#: what it uses inside its body, so that no module-level name of the notebook stands in for them.
LAUNCHER = '''\
def transpose_tiles(
    x: np.ndarray, block_m: int, block_n: int, pad: int
) -> tuple[np.ndarray, int, int, int, int]:
    """Write x.T with transpose_kernel; return out's buffer,
    the loads outside x, the repeated loads, and the sectors
    the loads and the stores touch. Given: do not change it."""
    import numpy as np
    import torch
    import triton

    from nbhelpers.load_audit import (
        StrayPointerError,
        host_code_problems,
        watched_loads,
    )
    from nbhelpers.memory_access import memory_requests, warp_sectors

    problems = host_code_problems(transpose_kernel)
    if problems:
        raise TypeError("; ".join(problems))
    x = torch.from_numpy(np.ascontiguousarray(x))
    (M, N), size = x.shape, x.element_size()

    def buffer(rows, cols, guard, fill):
        # rows x cols in rows of cols + pad elements, guard
        # rows above and below; element (0, 0) at a sector start
        total = (rows + 2 * guard) * (cols + pad)
        raw = torch.full((total + 32,), fill, dtype=x.dtype)
        lead = guard * (cols + pad) * size
        skip = (-(raw.data_ptr() + lead) % 32) // size
        buf = raw[skip : skip + total].view(-1, cols + pad)
        return buf, buf[guard : guard + rows, :cols]

    xbuf, xv = buffer(M, N, block_m, 77)
    xv.copy_(x)
    obuf, ov = buffer(N, M, block_n, 99)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    args = (xv, ov, M, N, *xv.stride(), *ov.stride())
    # in Triton's interpreter, every load and store recorded,
    # and stopped before it lands outside the buffers
    try:
        with watched_loads():
            requests = memory_requests(
                transpose_kernel,
                grid,
                *args,
                BLOCK_M=block_m,
                BLOCK_N=block_n,
            )
    except Exception as e:
        if isinstance(e.__cause__, StrayPointerError):
            raise e.__cause__ from None
        raise
    if torch.cuda.is_available():  # and compiled, on the GPU
        gx = xbuf.cuda()[block_m : block_m + M, :N]
        gbuf = torch.full_like(obuf, 99, device="cuda")
        transpose_kernel[grid](
            gx,
            gbuf[block_n : block_n + N, :M],
            *args[2:],
            BLOCK_M=block_m,
            BLOCK_N=block_n,
        )
        if not torch.equal(gbuf.cpu(), obuf):
            raise ValueError("compiled, the kernel stores other values")
    loads = [r.addresses[r.active] for r in requests if r.op == "load"]
    index = (
        np.concatenate([np.zeros(0, np.uint64), *loads]).astype(np.int64)
        - xv.data_ptr()
    ) // size
    row, col = np.divmod(index, N + pad)
    inside = index[(row >= 0) & (row < M) & (col < N)]
    outside = int(index.size - inside.size)
    repeated = int(inside.size - np.unique(inside).size)
    # the sectors that the warps of the loads and of the stores
    # move (32 consecutive lanes of a request each)
    sectors = warp_sectors(requests)
    return (
        obuf.numpy(),
        outside,
        repeated,
        sectors["load"],
        sectors["store"],
    )
'''

EXERCISES = [
    Exercise(
        "ex08.stream_times",
        "What the host's clock and the events read",
        3,
        stream_times_ref,
        _timing_cases,
        compare=_int_lists,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex08.transpose_tiles",
        "A transpose coalesced on both sides",
        4,
        transpose_tiles_ref,
        _transpose_cases,
        compare=_transpose_and_counts,
        forbidden=FORBIDDEN,
        allowed=TRANSPOSE_MACHINERY,
        given=LAUNCHER,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex08.trace_sectors",
        "Sectors of a raw address trace",
        3,
        trace_sectors_ref,
        _trace_cases,
        compare=_sectors_and_efficiency,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        kind=ExerciseKind.IMPLEMENT,
    ),
]
