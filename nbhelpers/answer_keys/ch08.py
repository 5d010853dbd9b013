"""Chapter 08 exercises: the GPU programming model and memory coalescing. Listed in ``EXERCISES``
for :mod:`nbhelpers.answer_keys`.

- ``sector_count``: the 32-byte sectors one warp's 32 loads touch; its reference is
  :func:`nbhelpers.memory_access.sectors_touched` (the pattern form), compared exactly.
- ``masked_copy``: a coalesced Triton copy kernel for any length, run through the launcher the
  notebook gives (Triton's interpreter on a CPU). The launcher places the output between two
  guard regions of ``block`` elements filled with :data:`GUARD_OUT`, and the input between guards
  of :data:`GUARD_IN`, so a store past the end (a missing or wrong mask) shows up in the returned
  buffer; and it runs the kernel once more in the interpreter with
  :func:`nbhelpers.memory_access.memory_requests`, x and the output at sector boundaries, and
  counts the elements loaded outside the input (a load past the end, which no output shows), the
  loads of an element beyond its first, and the 32-byte sectors that the warps (32 consecutive
  lanes of a load or store) of its loads, and of its stores, touch in all beyond what a copy
  whose warps take 32 contiguous elements of each block touches (``ceil(k * size / 32)`` a warp
  of k): a scattered warp (a lane permutation across warps, a strided split of the block, a
  transposed view, programs interleaved element by element) or requests narrower than a warp (a
  loop over single elements) touch more. The reference is torch's own copy
  (:func:`nbhelpers.kernels.copy.copy_ref`) between the same guards, and 0, 0, 0; compared bit
  for bit. Most random blocks are 64 or more elements: a block of at most 32 is one warp, where
  any order of the block's elements is coalesced.
- ``trace_sectors``: a raw address trace (one warp's byte addresses, any order, duplicates,
  misaligned, accesses straddling a sector boundary or covering several sectors) and the access
  size (1 to 128 bytes): the 32-byte sectors
  touched and the efficiency (distinct bytes asked for / bytes moved); the reference is
  :func:`nbhelpers.memory_access.sectors_touched` on the addresses. The count is compared
  exactly, the efficiency to a relative 1e-12 (a student may divide in another order).

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import numpy as np

from ..comparators import close_to, same_value
from ..exercise_types import Case, Exercise
from ..memory_access import sectors_touched

GUARD_IN = 77  # the input's guard value (a kernel that reads past the end reads these)
GUARD_OUT = 99  # the output's guard value (must survive the kernel)

# ------------------------------------------------------------------ 1. sectors of one warp's request


def sector_count_ref(elem_bytes: int, stride: int, base: int) -> int:
    """Distinct 32-byte sectors touched when thread t (0..31) reads elem_bytes bytes at byte
    base + t * stride * elem_bytes."""
    return sectors_touched(elem_bytes=elem_bytes, stride=stride, base=base).sectors


def _sector_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((4, 1, 0), label="fp32, contiguous, aligned"),
        Case((4, 1, 4), label="fp32, contiguous, base 4 bytes past a sector boundary"),
        Case((4, 2, 0), label="fp32, stride 2"),
        Case((4, 8, 0), label="fp32, stride 8: one sector per thread"),
        Case((4, 33, 0), label="fp32, stride 33"),
        Case((2, 1, 30), label="fp16 at base 30: the first element is the last of its sector"),
        Case((4, 1, 30), label="fp32 at base 30: every element straddles two sectors"),
        Case((8, 4, 28), label="8-byte elements, stride 4, each straddling"),
        Case((16, 1, 8), label="16-byte elements, contiguous, misaligned"),
        Case((1, 1, 31), label="bytes from 31 to 62"),
        Case((1, 3, 0), label="bytes, stride 3"),
        Case((32, 1, 0), label="32-byte elements, aligned"),
        Case((48, 1, 16), label="48-byte elements"),
        Case((48, 2, 24), label="48-byte elements, stride 2: each covers three sectors, none shared"),
        Case((40, 3, 28), label="40-byte elements, stride 3: a middle sector only the element itself covers"),
        Case((16, 3, 0), label="16-byte elements, stride 3: 32 bytes between elements, an empty sector each"),
        Case((8, 5, 4), label="8-byte elements, stride 5: 32 bytes between them, misaligned"),
        Case((4, 9, 0), label="fp32, stride 9: 32 bytes between elements"),
        Case((4, 7, 2**40 + 12), label="a large address"),
    ]
    sizes = [1, 2, 4, 8, 16, 3, 6, 12, 24, 40]
    for i in range(70):
        eb = int(rng.choice(sizes, p=[0.12, 0.16, 0.22, 0.16, 0.1, 0.05, 0.05, 0.05, 0.05, 0.04]))
        r = rng.random()
        stride = (
            int(rng.integers(1, 5))
            if r < 0.4
            else int(rng.integers(1, 40))
            if r < 0.85
            else int(rng.integers(40, 5000))
        )
        r = rng.random()
        if r < 0.25:  # aligned to a sector
            base = 32 * int(rng.integers(0, 1000))
        elif r < 0.5:  # aligned to the element, not to the sector
            base = eb * int(rng.integers(0, 1000))
        elif r < 0.75:  # just before a sector boundary: the first element straddles
            base = 32 * int(rng.integers(1, 1000)) - int(rng.integers(1, max(2, min(eb, 32))))
        else:
            base = int(rng.integers(0, 2**20))
        cases.append(Case((eb, stride, max(base, 0))))
    for _ in range(3):  # elements over three sectors, apart: a middle sector no neighbour covers
        eb = int(rng.choice([40, 48]))
        offset = int(rng.integers(64 - eb + 1, 32))  # the element's first byte in its sector
        cases.append(Case((eb, int(rng.integers(2, 6)), 32 * int(rng.integers(0, 1000)) + offset)))
    for _ in range(3):  # exactly 32 bytes between elements: a whole sector skipped each time
        eb, stride = [(2, 17), (4, 9), (8, 5), (16, 3), (32, 2)][int(rng.integers(0, 5))]
        cases.append(Case((eb, stride, eb * int(rng.integers(0, 2**16)))))  # aligned: no element straddles
    return cases


# ------------------------------------------------------------------ 2. a masked copy kernel


def masked_copy_ref(x: np.ndarray, block: int) -> tuple[np.ndarray, int, int, int]:
    """torch's copy of x (n,) between two guards of block elements of GUARD_OUT, (n + 2 block,),
    the number of elements loaded outside x: 0, the loads of elements of x beyond one each: 0 (a
    copy reads each element once), and the sectors its loads and its stores touch beyond those
    of warps of contiguous elements from a sector boundary: 0 (it is such a copy)."""
    import torch

    from ..kernels.copy import copy_ref

    x = np.ascontiguousarray(x)
    inner = copy_ref(torch.from_numpy(x)).numpy()
    guard = np.full(block, GUARD_OUT, dtype=x.dtype)
    return np.concatenate([guard, inner, guard]), 0, 0, 0


#: What the launcher's counts are, in its order, for a failing check's message.
_COUNTS = (
    "elements loaded outside x",
    "loads of an element beyond its first",
    "sectors beyond the least (warps' loads or stores not contiguous, or narrower than a warp)",
)


def _copy_and_counts(got, expected) -> str | None:
    """The buffer bit for bit, then each count exactly, named; never raises."""
    if not isinstance(got, (tuple, list)) or len(got) != len(expected):
        return same_value(got, expected)  # its reason names what came back
    reason = same_value(got[0], expected[0])
    if reason is not None:
        return f"the output buffer: {reason}"
    for name, g, e in zip(_COUNTS, got[1:], expected[1:]):
        reason = same_value(g, e)
        if reason is not None:  # a count by its value, anything else by what came back
            return f"{name}: {int(g)}, expected {e}" if isinstance(g, (int, np.integer)) else f"{name}: {reason}"
    return None


_DTYPES = (np.float32, np.float16, np.int32, np.int16, np.int8, np.uint8, np.float64, np.int64)
_PRIMES = (
    2,
    3,
    5,
    7,
    11,
    13,
    17,
    19,
    23,
    29,
    31,
    37,
    41,
    43,
    47,
    53,
    61,
    67,
    71,
    73,
    79,
    83,
    89,
    97,
    101,
    127,
    131,
    149,
    163,
    191,
    211,
    251,
    257,
)


def _values(rng: np.random.Generator, n: int, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        x = (rng.standard_normal(n) * 100).astype(dt)
        if n >= 3:  # a NaN, an infinity and a negative zero are copied like any other bits
            x[rng.integers(n)] = np.nan
            x[rng.integers(n)] = -np.inf
            x[rng.integers(n)] = -0.0
        return x
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dt)


def _copy_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(808)  # the labelled cases are the same for every seed
    cases = [
        Case((np.zeros(0, np.float32), 16), label="n = 0: nothing to copy, no program"),
        Case((_values(fixed, 1, np.float32), 16), label="n = 1"),
        Case((_values(fixed, 16, np.float32), 16), label="n = BLOCK"),
        Case((_values(fixed, 15, np.float32), 16), label="n = BLOCK - 1"),
        Case((_values(fixed, 17, np.float32), 16), label="n = BLOCK + 1"),
        Case((_values(fixed, 97, np.int32), 32), label="n = 97 (prime), BLOCK 32"),
        Case((_values(fixed, 64, np.float16), 32), label="n = 2 BLOCK, fp16"),
        Case((_values(fixed, 65, np.int8), 64), label="n = BLOCK + 1, int8"),
        Case((_values(fixed, 31, np.float64), 16), label="n = 2 BLOCK - 1, float64"),
        Case((_values(fixed, 21, np.int8), 16), label="int8, BLOCK 16: a block is half a sector"),
        Case((_values(fixed, 200, np.float32), 128), label="BLOCK 128, fp32: 4 warps, the last block ragged"),
        Case((_values(fixed, 300, np.int16), 256), label="BLOCK 256, int16: 1 warp full, 1 ragged, 6 idle"),
    ]
    # every dtype five times, in random order: 1-byte elements are where some scattered warps
    # (two runs of 16 elements) waste sectors
    dtypes = rng.permutation(np.repeat(np.arange(len(_DTYPES)), 5))
    for i in range(40):
        # a block of at most 32 elements is one warp (any order of it is coalesced): mostly more
        block = int(rng.choice([16, 32, 64, 128, 256], p=[0.1, 0.1, 0.3, 0.3, 0.2]))
        r = rng.random()
        if r < 0.35:
            n = int(rng.choice(_PRIMES))
        elif r < 0.7:
            n = block * int(rng.integers(1, 5)) + int(rng.choice([-1, 1]))
        else:
            n = int(rng.integers(1, 4 * block + 2))
        dtype = _DTYPES[int(dtypes[i])]
        cases.append(Case((_values(rng, n, dtype), block)))
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
    reason = same_value(got[0], expected[0])
    if reason is not None:
        return f"the sector count: {reason}"
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
    return cases


#: What an answer may not call (Exercise.forbidden): no memory_access or kernels (the given
#: launcher's memory_requests aside).
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.memory_access", "nbhelpers.kernels")
#: The course's machinery under every interpreted launch (a cache of the interpreter's work), and
#: the load and store watch the given launcher calls.
MACHINERY = (
    "nbhelpers.kernels.interpreter_cache",
    "nbhelpers.memory_access:loaded_addresses",
    "nbhelpers.memory_access:memory_requests",
)

#: The launcher of ex08.masked_copy, given whole by the statement (Exercise.given): an answer that
#: changes it (the copy done on the host, the counts set to 0) scores nothing. It imports what it
#: uses inside its body, so that no module-level name of the notebook stands in for them.
LAUNCHER = '''\
def masked_copy(
    x: np.ndarray, block: int
) -> tuple[np.ndarray, int, int, int]:
    """Copy x (n,) with masked_copy_kernel; return the
    output buffer with its guards, (n + 2 block,), the
    number of elements the kernel loaded outside x, its
    loads of elements of x beyond one each, and the
    sectors its loads, and its stores, touched beyond
    the least a copy of x needs. Given: do not change it."""
    import numpy as np
    import torch
    import triton

    from nbhelpers.memory_access import memory_requests

    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

    def at_sector(t: torch.Tensor, lead: int) -> torch.Tensor:
        # a CPU copy of the 1-D tensor t whose element lead
        # starts at a 32-byte boundary (the start of a sector)
        size = t.element_size()
        raw = torch.empty(t.numel() + 32 // size, dtype=t.dtype)
        skip = (-(raw.data_ptr() + lead * size) % 32) // size
        return raw[skip : skip + t.numel()].copy_(t)

    x = torch.from_numpy(np.ascontiguousarray(x))
    n = x.numel()
    src = torch.full((n + 2 * block,), 77, dtype=x.dtype)
    dst = torch.full((n + 2 * block,), 99, dtype=x.dtype, device=DEVICE)
    src[block : block + n] = x
    if n == 0:
        return dst.cpu().numpy(), 0, 0, 0
    grid = (triton.cdiv(n, block),)
    masked_copy_kernel[grid](
        src.to(DEVICE)[block:], dst[block:], n, BLOCK=block
    )
    # once more in the interpreter, on the CPU, with x and the
    # output at sector boundaries: every load and store, lane by lane
    xs = at_sector(src, block)[block:]
    requests = memory_requests(
        masked_copy_kernel,
        grid,
        xs,
        at_sector(src, block)[block:],
        n,
        BLOCK=block,
    )
    loads = [r.addresses[r.active] for r in requests if r.op == "load"]
    index = (
        np.concatenate([np.zeros(0, np.uint64), *loads]).astype(np.int64)
        - xs.data_ptr()
    ) // x.element_size()
    inside = index[(index >= 0) & (index < n)]
    outside = int(index.size - inside.size)
    repeated = int(inside.size - np.unique(inside).size)
    # the least: warps of 32 contiguous elements of each block,
    # from a sector boundary, ceil(k * s / 32) sectors for k
    first = np.arange(0, grid[0] * block, block)[:, None]
    k = np.clip(n - first - np.arange(0, block, 32), 0, min(block, 32))
    least = int((-(-k * x.element_size() // 32)).sum())
    # a warp: 32 consecutive lanes of one request; it moves
    # every sector its active lanes touch
    touched = {"load": 0, "store": 0}
    for r in requests:
        for w in range(0, r.addresses.size, 32):
            lanes = r.addresses[w : w + 32][r.active[w : w + 32]]
            touched[r.op] += np.unique(lanes // 32).size
    extra = sum(max(0, t - least) for t in touched.values())
    return dst.cpu().numpy(), outside, repeated, extra
'''

EXERCISES = [
    Exercise(
        "ex08.sector_count",
        "Sectors of one warp's request",
        3,
        sector_count_ref,
        _sector_cases,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
    ),
    Exercise(
        "ex08.masked_copy",
        "A copy kernel for any length",
        4,
        masked_copy_ref,
        _copy_cases,
        compare=_copy_and_counts,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        given=LAUNCHER,
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
    ),
]
