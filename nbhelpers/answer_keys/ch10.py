"""Chapter 10 exercises: grouped GEMM for mixture-of-experts. Listed in ``EXERCISES`` for
:mod:`nbhelpers.answer_keys`.

- ``offsets_and_schedule``: from the router's choices to the per-expert offsets and the tile
  schedule of a grouped kernel. Reference: :func:`nbhelpers.moe.expert_offsets` and
  :func:`nbhelpers.moe.tile_schedule`; compared exactly, as integer arrays (a float array of the
  right values fails: a kernel offsets pointers by them).
- ``tile_lookup``: the same lookup done by each program of a Triton kernel from the offsets alone,
  in a grid sized without reading the counts (``cdiv(rows, BLOCK_M) + E`` programs, an upper
  bound on the tiles), idle programs marked -1. Run through the launcher the notebook gives
  (Triton's interpreter on a CPU), whose output starts filled with :data:`UNWRITTEN`. Reference:
  :func:`tile_lookup_ref`, built on :func:`nbhelpers.moe.tile_schedule`; compared exactly.
- ``padding_waste``: predict, then measure: the capacity of a padded batch, the fraction of its
  computed rows that are padding and the fraction of routed rows it drops. Reference: built on
  :func:`nbhelpers.moe.capacity` and confirmed against :func:`nbhelpers.moe.padded_matmul` in
  tests/test_exercises_ch10.py; the capacity exactly, the fractions within 1e-12 relative (they
  may be computed in another order).

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import math

import numpy as np

from ..comparators import close_to, compare, same_value
from ..exercise_types import Case, Exercise
from ..moe import capacity, expert_counts, expert_offsets, route, tile_schedule

UNWRITTEN = -7  # what the tile_lookup launcher's output holds before the kernel runs
_close = close_to(1e-12)


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
    for _ in range(20):
        E = int(rng.choice([2, 3, 5, 8, 16, 33]))
        k = int(rng.integers(1, min(E, 4) + 1))
        T = int(rng.choice([int(rng.integers(1, 8)), int(rng.integers(8, 60))]))
        r = route(T, E, k, skew=float(rng.choice([0.0, 1.0, 2.0])), seed=int(rng.integers(2**31)))
        cases.append(Case((r.expert_ids, E, int(rng.choice([1, 2, 4, 8, 16])))))
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


# ------------------------------------------------------------------ 3. padding waste


def padding_waste_ref(expert_ids: np.ndarray, num_experts: int, capacity_factor: float):
    """(capacity, padding fraction of the computed rows, dropped fraction of the routed rows)."""
    ids = np.asarray(expert_ids)
    rows = int(ids.size)
    C = capacity(rows, num_experts, capacity_factor)
    kept = int(np.minimum(expert_counts(ids, num_experts), C).sum())
    return C, (num_experts * C - kept) / (num_experts * C), (rows - kept) / rows


def _same_waste(got, expected) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return compare(got, expected)
    reason = compare(got[0], expected[0])
    if reason is not None:
        return f"capacity: {reason}"
    for i, name in ((1, "padding fraction"), (2, "dropped fraction")):
        reason = _close(got[i], expected[i])
        if reason is not None:
            return f"{name}: {reason}"
    return None


# capacity factors with few binary digits: capacity_factor * rows / E is then computed the same
# in any order (tests/test_exercises_ch10.py checks the orders agree on every case)
FACTORS = (0.5, 0.75, 1.0, 1.125, 1.25, 1.5, 2.0, 3.0)


def _waste_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((_from_counts([4, 4, 4, 4]), 4, 1.0), label="even load at factor 1: no padding, nothing dropped"),
        Case((_from_counts([0, 5, 1, 0, 10]), 5, 1.25), label="16 rows, 5 experts, factor 1.25: capacity exactly 4"),
        Case((_ids([[0, 1], [0, 2], [0, 3], [1, 0]]), 4, 1.0), label="top-2: 4 tokens are 8 rows, capacity 2"),
        Case(
            (_ids([[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1]]), 6, 1.0),
            label="top-3, 4 tokens, all on experts 0-2 of 6",
        ),
        Case((_from_counts([3, 2, 2]), 3, 1.0), label="7 rows over 3 experts: capacity rounds up to 3"),
        Case((_from_counts([9, 0, 0, 0]), 4, 0.5), label="factor 0.5: capacity 2 of 9"),
        Case((_from_counts([1, 0, 0, 0, 0, 0, 0, 0]), 8, 2.0), label="one row, 8 experts"),
    ]
    for _ in range(20):
        E = int(rng.choice([4, 8, 16, 64]))
        k = int(rng.choice([1, 2, 4, 8][: 1 + int(np.log2(min(E, 8)))]))
        T = int(rng.choice([int(rng.integers(1, 20)), int(rng.integers(20, 400))]))
        r = route(T, E, k, skew=float(rng.choice([0.0, 0.5, 1.0, 2.0])), seed=int(rng.integers(2**31)))
        cases.append(Case((r.expert_ids, E, float(rng.choice(FACTORS)))))
    return cases


def capacity_orders(rows: int, num_experts: int, capacity_factor: float) -> set[int]:
    """The capacity by the three natural evaluation orders (used by the tests to show that the
    cases do not depend on the order a student writes)."""
    return {
        math.ceil(capacity_factor * rows / num_experts),
        math.ceil(rows * capacity_factor / num_experts),
        math.ceil(capacity_factor * (rows / num_experts)),
    }


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
    ),
    Exercise(
        "ex10.padding_waste",
        "Predict the padding waste",
        3,
        padding_waste_ref,
        _waste_cases,
        compare=_same_waste,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
    ),
]
