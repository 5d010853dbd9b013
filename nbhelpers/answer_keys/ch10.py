"""Chapter 10 exercises: grouped GEMM for mixture-of-experts. Listed in ``EXERCISES`` for
:mod:`nbhelpers.answer_keys`.

- ``offsets_and_schedule``: from the router's choices to the per-expert offsets and the tile
  schedule of a grouped kernel. Reference: :func:`nbhelpers.moe.expert_offsets` and
  :func:`nbhelpers.moe.tile_schedule`; compared exactly, as integer arrays (a float array of the
  right values fails: a kernel offsets pointers by them).
- ``tile_lookup``: the same lookup done by each program of a Triton kernel from the offsets alone,
  in a grid sized without reading the counts (``cdiv(rows, BLOCK_M) + E`` programs, an upper
  bound on the tiles), idle programs marked -1. Run through the launcher the notebook gives
  (:data:`LAUNCHER`, ``Exercise.given``: a changed launcher scores nothing, so the schedule cannot
  be computed on the host in its place), whose output starts filled with :data:`UNWRITTEN`. The
  launcher refuses a kernel that reaches host code
  (:func:`nbhelpers.load_audit.host_code_problems`: numpy, a notebook function, ``int(x)``,
  ``.handle``, lists) and one whose programs load anything but the ``E + 1`` offsets (the
  interpreter's trace, :func:`nbhelpers.memory_access.loaded_addresses`), and stops a load or
  store aimed outside ``offsets`` and its output before it happens
  (:func:`nbhelpers.load_audit.watched_loads`: :class:`~nbhelpers.load_audit.StrayPointerError`
  instead of a read of whatever memory lies there, or a crash); on a GPU it also runs the
  compiled kernel. Reference: :func:`tile_lookup_ref`, built on
  :func:`nbhelpers.moe.tile_schedule`; compared exactly.
- ``dropless_cost``: predict, then measure: the smallest capacity factor of a grid at which a padded
  batch drops no row (the capacity must reach the busiest expert's load, which the statement
  leaves to the student), the rows that batch computes, and the rows the grouped kernel computes
  in its tiles of ``BLOCK_M`` rows. Reference: built on :func:`nbhelpers.moe.capacity` and
  :func:`nbhelpers.moe.tile_schedule`, confirmed against :func:`nbhelpers.moe.padded_matmul` in
  tests/test_exercises_ch10.py; compared exactly (the grids' factors have few binary digits, so
  the capacity does not depend on the order of the product).

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import math

import numpy as np

from ..comparators import compare, same_value
from ..exercise_types import Case, Exercise, ExerciseKind
from ..moe import capacity, expert_counts, expert_offsets, route, tile_schedule

UNWRITTEN = -7  # what the tile_lookup launcher's output holds before the kernel runs


def _ids(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(len(rows), -1 if rows else 1)


def _from_counts(counts: list[int], seed: int = 0) -> np.ndarray:
    """A top-1 expert_ids array (T, 1) whose experts have the given row counts, in shuffled token
    order (so the rows of an expert are not adjacent before the permutation)."""
    ids = np.repeat(np.arange(len(counts)), counts)
    np.random.default_rng(seed).shuffle(ids)
    return ids.reshape(-1, 1)


# ------------------------------------------------------------------ 1. offsets and tile schedule


def offsets_and_schedule_ref(expert_ids: np.ndarray, num_experts: int, block_m: int):
    """(offsets (E + 1,), tile_expert (tiles,), tile_row_start (tiles,)), all int64."""
    off = expert_offsets(expert_ids, num_experts)
    s = tile_schedule(off, block_m)
    return off, s.expert.astype(np.int64), s.row_start.astype(np.int64)


_SCHEDULE_NAMES = ("offsets", "tile_expert", "tile_row_start")


def _same_schedule(got, expected) -> str | None:
    """Integer arrays (a kernel adds them to pointers and compares them with row indices: float
    offsets are a bug there, whatever their values), equal to the reference's exactly."""
    if isinstance(got, (tuple, list)) and len(got) == len(_SCHEDULE_NAMES):
        for name, g in zip(_SCHEDULE_NAMES, got):
            if isinstance(g, np.ndarray) and g.dtype.kind not in "iu":
                return f"{name}: returned an array of {g.dtype}, expected integers (a kernel offsets pointers by them)"
            if isinstance(g, (list, tuple)) and any(isinstance(v, (float, np.floating)) for v in g):
                return f"{name}: returned a list holding floats, expected integers (a kernel offsets pointers by them)"
    return same_value(got, expected)


def _routing_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((_ids([[1, 0], [0, 2], [2, 0]]), 4, 2), label="3 tokens, top-2, 4 experts: expert 3 empty (last)"),
        Case((_from_counts([0, 3, 0, 5]), 4, 4), label="experts 0 and 2 empty (first, middle)"),
        Case((_from_counts([1, 1, 0, 1]), 4, 8), label="one-token experts"),
        Case((_from_counts([4, 8, 5]), 3, 4), label="exactly BLOCK_M, 2 BLOCK_M, BLOCK_M + 1 rows"),
        Case((_from_counts([0, 0, 9, 0, 0]), 5, 4), label="every row on one expert, in the middle"),
        Case((_ids([[0, 1], [1, 0], [0, 1], [1, 0]]), 2, 16), label="top-2 over 2 experts: every token uses both"),
        Case((np.zeros((0, 2), dtype=np.int64), 3, 4), label="no tokens"),
        Case((_from_counts([7]), 1, 1), label="one expert, BLOCK_M = 1"),
    ]
    # a prefill batch: more rows than 16 bits hold, so offsets and row starts need a wide integer
    big = route(17000, 64, 4, skew=1.0, seed=int(rng.integers(2**31)))
    cases.append(Case((big.expert_ids, 64, 128), label="17,000 tokens, top-4 of 64: 68,000 rows"))
    for _ in range(20):
        E = int(rng.choice([2, 3, 5, 8, 16, 33]))
        k = int(rng.integers(1, min(E, 4) + 1))
        T = int(rng.choice([int(rng.integers(1, 8)), int(rng.integers(8, 60))]))
        r = route(T, E, k, skew=float(rng.choice([0.0, 1.0, 2.0])), seed=int(rng.integers(2**31)))
        cases.append(Case((r.expert_ids, E, int(rng.choice([1, 2, 4, 8, 16])))))
    # more experts than 8 bits number (DeepSeek-V3 routes over 256, Kimi K2 over 384): expert ids
    # past 255 in the tile list, which an 8-bit array wraps
    E = int(rng.choice([257, 300, 384, 512]))
    r = route(int(rng.integers(40, 100)), E, 8, skew=float(rng.choice([0.0, 1.0])), seed=int(rng.integers(2**31)))
    cases.append(Case((r.expert_ids, E, int(rng.choice([1, 4, 16])))))
    return cases


# ------------------------------------------------------------------ 2. the lookup in the kernel


def tile_lookup_ref(offsets: np.ndarray, block_m: int) -> np.ndarray:
    """(3, P) int32, P = cdiv(rows, block_m) + E programs: for program p < tiles, its expert, its
    first row and its expert's end row (columns of :func:`nbhelpers.moe.tile_schedule`); -1 in
    all three for the idle programs p >= tiles."""
    off = np.asarray(offsets, dtype=np.int64)
    E, rows = off.size - 1, int(off[-1])
    P = -(-rows // block_m) + E
    s = tile_schedule(off, block_m)
    out = np.full((3, P), -1, dtype=np.int32)
    out[0, : s.num_tiles], out[1, : s.num_tiles], out[2, : s.num_tiles] = s.expert, s.row_start, s.row_end
    return out


def _offsets(counts) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _lookup_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((_offsets([0, 3, 0, 5]), 4), label="counts 0, 3, 0, 5: two empty experts"),
        Case((_offsets([4, 8, 5]), 4), label="counts BLOCK_M, 2 BLOCK_M, BLOCK_M + 1"),
        Case((_offsets([1, 1, 1, 1]), 8), label="one row per expert: every tile almost empty"),
        Case((_offsets([0, 0, 0, 9]), 4), label="every row on the last expert"),
        Case((_offsets([9, 0, 0, 0]), 4), label="every row on the first expert"),
        Case((_offsets([16, 16]), 16), label="full tiles only: no idle program but E"),
        Case((_offsets([5]), 1), label="one expert, BLOCK_M = 1"),
        Case((_offsets([0, 0]), 4), label="no rows at all: every program idle"),
    ]
    # small: each case runs cdiv(rows, BLOCK_M) + E programs of an E-step loop, in the interpreter
    for _ in range(12):
        E = int(rng.choice([2, 3, 5, 8, 12]))
        k = int(rng.integers(1, min(E, 3) + 1))
        T = int(rng.integers(1, 16))
        r = route(T, E, k, skew=float(rng.choice([0.5, 1.5, 3.0])), seed=int(rng.integers(2**31)))
        cases.append(Case((expert_offsets(r.expert_ids, E), int(rng.choice([2, 4, 8, 16])))))
    # more experts than a lookup vectorised over a fixed 16, 32 or 64 of them covers, rows on one
    # past the 64th among them; few rows and tiles, as the interpreter runs an E-step loop in each
    # of the P = cdiv(rows, BLOCK_M) + E programs (about E**2 steps: 4 s at E = 67 on a 2020s
    # laptop core, and five to six times that under the call watch's profile hook)
    E = int(rng.integers(65, 69))
    counts = np.zeros(E, dtype=np.int64)
    busy = np.append(rng.choice(64, size=3, replace=False), rng.integers(64, E))
    counts[busy] = rng.integers(1, 12, size=busy.size)
    cases.append(Case((_offsets(counts), int(rng.choice([4, 8])))))
    return cases


def _same_lookup(got, expected: np.ndarray) -> str | None:
    try:
        g = np.asarray(got)
    except Exception:  # a student's odd object
        return f"returned {type(got).__name__}, expected a (3, {expected.shape[1]}) int32 array"
    if g.shape != expected.shape:
        return f"returned shape {g.shape}, expected {expected.shape}"
    if g.dtype.kind not in "iu":
        return f"returned an array of {g.dtype}, expected integers"
    bad = np.nonzero((g != expected).any(axis=0))[0]
    if not bad.size:
        return None
    p = int(bad[0])
    if (g[:, p] == UNWRITTEN).all():
        what = "wrote nothing"
    else:
        what = f"wrote (expert, row_start, row_end) = {tuple(int(v) for v in g[:, p])}"
    want = tuple(int(v) for v in expected[:, p])
    return f"{bad.size} of {g.shape[1]} programs wrong; program {p} {what}, expected {want}"


# ------------------------------------------------------------------ 3. what dropping nothing costs


def dropless_cost_ref(expert_ids: np.ndarray, num_experts: int, block_m: int, factors: tuple[float, ...]):
    """(the smallest of ``factors`` at which the padded batch drops no row, or None; the rows that
    padded batch computes, E * C, or None; the rows the grouped kernel computes, its tiles of
    ``block_m`` rows)."""
    ids = np.asarray(expert_ids)
    rows = int(ids.size)
    counts = expert_counts(ids, num_experts)
    grouped = tile_schedule(_offsets(counts), block_m).num_tiles * block_m
    dropless = [f for f in factors if capacity(rows, num_experts, f) >= counts.max()]
    if not dropless:
        return None, None, grouped
    f = min(dropless)
    return f, num_experts * capacity(rows, num_experts, f), grouped


_COST_NAMES = ("factor", "padded_rows", "grouped_rows")


def _same_cost(got, expected) -> str | None:
    """The factor as the same number (None where none drops nothing), the row counts as the same
    integers (a float count of rows is a bug: the rows are whole)."""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return compare(got, expected)
    for name, g, e in zip(_COST_NAMES, got, expected):
        if e is None or g is None:
            if g is not e:
                return f"{name}: returned {g!r}, expected {e!r}"
            continue
        if name != "factor" and not isinstance(g, (int, np.integer)):
            return f"{name}: returned a {type(g).__name__}, expected an int (a count of rows)"
        if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, float, np.integer, np.floating)):
            return f"{name}: returned a {type(g).__name__}, expected a number"
        if g != e:
            return f"{name}: returned {g!r}, expected {e!r}"
    return None


# capacity factors with few binary digits: capacity_factor * rows / E is then computed the same
# in any order (tests/test_exercises_ch10.py checks the orders agree on every case)
FACTORS = (0.5, 0.75, 1.0, 1.125, 1.25, 1.5, 2.0, 3.0, 4.0)


def _cost_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((_from_counts([4, 4, 4, 4]), 4, 4, (1.0,)), label="even load at factor 1: no padding, no drop"),
        Case(
            (_from_counts([0, 5, 1, 0, 10]), 5, 4, (1.25, 2.0, 3.0, 4.0)),
            label="16 rows, 5 experts: 1.25 and 2 drop, 3 drops nothing",
        ),
        Case((_ids([[0, 1], [0, 2], [0, 3], [1, 0]]), 4, 2, (1.0, 2.0)), label="top-2: 4 tokens are 8 rows"),
        Case(
            (_from_counts([3, 2, 2]), 3, 2, (3.0, 1.5, 1.0, 2.0)),
            label="factors in no order; at 1 the capacity is exactly the busiest load",
        ),
        Case((_from_counts([9, 0, 0, 0]), 4, 4, (0.5, 1.0, 2.0)), label="every factor drops rows: None"),
        Case((_from_counts([1, 0, 0, 0, 0, 0, 0, 0]), 8, 16, (2.0, 8.0)), label="one row, 8 experts"),
        Case((_from_counts([5, 0, 3, 0]), 4, 1, (2.0, 2.5)), label="BLOCK_M = 1: no tile padding"),
    ]
    for _ in range(24):
        E = int(rng.choice([4, 8, 16, 64]))  # a power of two: factor * rows / E is exact in any order
        k = int(rng.choice([1, 2, 4, 8][: 1 + int(np.log2(min(E, 8)))]))
        T = int(rng.choice([int(rng.integers(1, 20)), int(rng.integers(20, 400))]))
        r = route(T, E, k, skew=float(rng.choice([0.0, 0.5, 1.0, 2.0])), seed=int(rng.integers(2**31)))
        rows, busiest = T * k, int(expert_counts(r.expert_ids, E).max())
        # a grid of step 2**-j, fine enough that the capacity takes every whole value: its first
        # dropless factor gives a capacity of exactly the busiest load
        j = max(3, int(np.ceil(np.log2(max(rows / E, 1)))))
        m = next(m for m in range(1, 2**j * E + 1) if capacity(rows, E, m / 2**j) >= busiest)
        exact = m / 2**j
        kind = rng.choice(["exact", "coarse", "none"], p=[0.4, 0.4, 0.2])
        if kind == "exact":  # the boundary factor, with factors below and above it
            below = [exact - d / 2**j for d in rng.integers(1, 2 * m, size=3) if d < m]
            above = [exact + d / 2**j for d in rng.integers(1, 4 * m + 2, size=3)]
            grid = [exact, *below, *above]
        elif kind == "coarse":  # a common grid: the capacity usually lands past the busiest load
            grid = [float(f) for f in rng.choice(FACTORS, size=int(rng.integers(2, 6)), replace=False)]
            grid.append(float(FACTORS[-1] * max(1, 2 ** int(np.ceil(np.log2(exact / FACTORS[-1]))))))
        else:  # none of them drops nothing
            grid = [exact - d / 2**j for d in rng.integers(1, m, size=3)] if m > 1 else []
            grid = grid or [exact / 2]
        factors = tuple(float(f) for f in dict.fromkeys(grid))
        factors = tuple(factors[i] for i in rng.permutation(len(factors)))
        block_m = int(rng.choice([1, 2, 4, 8, 16, 32, 64, 128]))
        cases.append(Case((r.expert_ids, E, block_m, factors)))
    return cases


def capacity_orders(rows: int, num_experts: int, capacity_factor: float) -> set[int]:
    """The capacity by the three natural evaluation orders (used by the tests to show that the
    cases do not depend on the order a student writes)."""
    return {
        math.ceil(capacity_factor * rows / num_experts),
        math.ceil(rows * capacity_factor / num_experts),
        math.ceil(capacity_factor * (rows / num_experts)),
    }


#: The launcher of ex10.tile_lookup, given whole by the statement (Exercise.given): an answer that
#: changes it (a schedule computed on the host, the kernel left out) scores nothing. It imports
#: what it uses inside its body, so that no module-level name of the notebook stands in for them.
LAUNCHER = '''\
def tile_lookup(offsets: np.ndarray, block_m: int) -> np.ndarray:
    """Run tile_lookup_kernel over P = cdiv(rows, block_m) + E
    programs; (3, P) int32. Given: do not change it."""
    import numpy as np
    import torch
    import triton

    from nbhelpers.load_audit import (
        StrayPointerError,
        host_code_problems,
        watched_loads,
    )
    from nbhelpers.memory_access import loaded_addresses

    problems = host_code_problems(tile_lookup_kernel)
    if problems:
        raise TypeError("; ".join(problems))
    off = torch.tensor(np.asarray(offsets), dtype=torch.int32)
    # the host knows rows = T * top_k
    E, rows = off.numel() - 1, int(off[-1])
    P = triton.cdiv(rows, block_m) + E
    out = torch.full((3, P), -7, dtype=torch.int32)
    # in Triton's interpreter: every address a program loads; a load
    # or store outside off and out stopped before it lands
    try:
        with watched_loads():
            loads = loaded_addresses(
                tile_lookup_kernel, (P,), off, out, E, P, BLOCK_M=block_m
            )
    except Exception as e:
        if isinstance(e.__cause__, StrayPointerError):
            raise e.__cause__ from None
        raise
    index = (loads.astype(np.int64) - off.data_ptr()) // 4
    if ((index < 0) | (index > E)).any():
        raise IndexError("a program loaded memory other than offsets")
    if torch.cuda.is_available():  # and compiled, on the GPU
        gpu = torch.full((3, P), -7, dtype=torch.int32, device="cuda")
        tile_lookup_kernel[(P,)](off.cuda(), gpu, E, P, BLOCK_M=block_m)
        if not torch.equal(gpu.cpu(), out):
            raise ValueError("compiled, the kernel stores other values")
    return out.numpy()
'''

#: What an answer may not call (Exercise.forbidden): the statement: no moe or kernels.
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.moe", "nbhelpers.kernels")
#: The course's machinery under every interpreted launch (a cache of the interpreter's work).
MACHINERY = ("nbhelpers.kernels.interpreter_cache",)

EXERCISES = [
    Exercise(
        "ex10.offsets_and_schedule",
        "Offsets and the tile schedule",
        4,
        offsets_and_schedule_ref,
        _routing_cases,
        compare=_same_schedule,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex10.tile_lookup",
        "The program-to-tile lookup in the kernel",
        4,
        tile_lookup_ref,
        _lookup_cases,
        compare=_same_lookup,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        given=LAUNCHER,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex10.dropless_cost",
        "What dropping nothing costs",
        3,
        dropless_cost_ref,
        _cost_cases,
        compare=_same_cost,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        kind=ExerciseKind.PREDICT,
    ),
]
