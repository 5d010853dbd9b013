"""Chapter 09 exercises: GEMM kernels in Triton. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

Both are Triton kernels the student completes, run through the launcher the notebook gives
(Triton's interpreter on a CPU); the launchers read their operands from buffers padded with NaN
and watch every load (:func:`nbhelpers.load_audit.run_watching_loads`): a load past an edge that
the mask should have stopped reads a NaN, and the launcher raises, so the case fails even when
the NaN would feed only elements the masked store drops (a missing row mask on ``A`` spoils only
accumulator rows past ``M``). The cases therefore need sizes that are not multiples of the block.
A load or store aimed outside every tensor of the launch is stopped before it happens
(:class:`nbhelpers.load_audit.StrayPointerError`): a wild pointer fails the case instead of
reading or writing memory that is not the kernel's, or crashing the notebook.

- ``split_k_matmul``: the K ranges and loop of one program of a split-K GEMM on float32 operands:
  the ``cdiv(K, BLOCK_K)`` steps dealt out to the ``SPLITS`` programs of a tile in consecutive
  runs whose lengths differ by at most one, the longer first (:func:`k_ranges`); the statement
  says so in words and the program works out its own run. The given launcher
  (:data:`SPLIT_K_LAUNCHER`, ``Exercise.given``) returns the partial tiles, each compared with the
  product over its own range (so a program that does another's work fails too). Reference:
  :func:`nbhelpers.kernels.gemm.matmul_ref` (float64) of each range; accepted when every element
  is within :func:`nbhelpers.gemm_bounds.error_bound` of it (any order of fp32 additions stays
  inside; an empty range must give exactly 0). That bound is IEEE float32's: on an NVIDIA GPU
  ``tl.dot`` rounds float32 operands to TF32 unless ``input_precision="ieee"``, and TF32 inputs
  fall far outside it (a failing answer within the TF32 bound gets a message that says so). A
  run one step off, the longer runs put last, or ranges of ``cdiv(K, SPLITS)`` elements are far
  outside. The launcher runs the kernel on operands laid out by rows and by columns, refuses
  host code (:func:`nbhelpers.load_audit.host_code_problems`) and reads the source with
  :func:`nbhelpers.load_audit.dot_operand_problems` (a ``tl.dot`` without
  ``input_precision="ieee"``, an operand loaded under a mask without ``other=``).
- ``swap_ab_epilogue``: the second kernel of a split-K scaled fp8 GEMM computed transposed ("swap
  AB", ``C^T = qB^T qA^T``): the float32 partial tiles ``parts_t (S, N, M)`` added in the order
  of ``s``, then per-row (or per-tensor) scales of A along the tile's columns, and B's scales
  along its rows, one per group of ``group_n`` consecutive columns of B, ``sB (cdiv(N, group_n),
  1)`` (``group_n = 1``: per column; ``group_n >= N``: per tensor; 128: weights quantized in
  blocks of 128 output features), which the kernel must find for each feature (``n // group_n``,
  times the stride between groups); ``C (M, N)`` stored transposed. Reference:
  :func:`split_sum_ref`, then :func:`nbhelpers.answer_keys.ch06.epilogue_ref` on the sum's
  transpose with B's scales spread over their groups (:func:`group_scales`), the fp32 epilogue of
  :func:`nbhelpers.scaled_gemm.scaled_mm` (held bit for bit against it in
  tests/test_exercises_ch06.py and here); compared bit for bit, so the order of the sum and of the
  scales counts (the partial tiles have like magnitudes and random signs). The given launcher
  (:data:`EPILOGUE_LAUNCHER`) pads the partial tiles with a slice of NaN and NaN past each slice's
  edges, lays B's group scales out 2 apart by rows and 1 apart by columns, runs both layouts, and
  puts C in a buffer of NaN: a store past C's edge is reported. Most cases are decode-like (a few
  tokens, ``M`` up to 16) and not square; the groups straddle the launcher's 32-feature tiles in
  many of them (a scale per tile fails), and a few have ``N`` past 128 in groups of 128.
- ``register_budget``: the inverse of an occupancy: the most registers per thread at which an
  H100/H200 SM still holds a given number of warps of a kernel (its ``num_warps`` and shared
  memory per block given), 0 if none. Reference: a search over
  :func:`nbhelpers.occupancy.occupancy` (tested against a slow block-by-block placement and
  NVIDIA's worked example in tests/test_occupancy.py). Its values are the tops of the register
  steps the compiler lands on (the notebook's last cell compares them with ``ptxas``). The cases
  make each shortcut wrong on several of them: no rounding down to 8, one pool of 65,536
  registers, warps per sub-partition rounded down, warps not in whole blocks, shared memory, its
  reserve and 128-byte unit, or the 32-block cap ignored, no cap at 255. (The 227 KB a block may
  ask for adds nothing on an H100: with the 1 KB reserve, more does not fit the SM's 228 KB.)

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import numpy as np

from ..exercise_types import Case, Exercise, ExerciseKind
from ..occupancy import H100, occupancy
from ..report_text import describe
from .ch06 import epilogue_ref

BLOCK = 16  # every tile dimension of the launchers (the interpreter's tl.dot wants at least 16)


# ------------------------------------------------------------------ 1. the K loop of split-K


def split_k_matmul_ref(a: np.ndarray, b: np.ndarray, splits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each range of K (:func:`k_ranges`), the partial product over it: (the exact partial
    products in float64, their elementwise error bound for fp32 accumulation of float32 inputs,
    the same bound for inputs rounded to TF32), all (splits, M, N). An empty range's product and
    bound are 0. The third only words the message: an answer inside it but outside the second
    looks like TF32 inputs."""
    import torch

    from ..gemm_bounds import error_bound
    from ..kernels.gemm import matmul_ref

    ta, tb = torch.from_numpy(np.asarray(a, np.float32)), torch.from_numpy(np.asarray(b, np.float32))
    parts = [(ta[:, start:end], tb[start:end]) for start, end in k_ranges(ta.shape[1], splits)]
    return (
        np.stack([matmul_ref(pa, pb).numpy() for pa, pb in parts]),
        np.stack([error_bound(pa, pb).numpy() for pa, pb in parts]),
        np.stack([error_bound(pa, pb, input_precision="tf32").numpy() for pa, pb in parts]),
    )


TF32_HINT = (
    "; every error is within what TF32 inputs give: on an NVIDIA GPU tl.dot rounds float32 "
    'operands to TF32 unless it is called with input_precision="ieee"'
)


def _within_bound(got, expected) -> str | None:
    ref, bound, *tf32 = expected
    try:
        g = np.asarray(got, dtype=np.float64)
    except Exception:
        return f"returned {describe(got)}, expected an array of shape {ref.shape}"
    if g.shape != ref.shape:
        return f"returned an array of shape {g.shape}, expected shape {ref.shape}"
    bad = ~(np.abs(g - ref) <= bound)  # NaN fails too
    if not bad.any():
        return None
    at = tuple(int(x) for x in np.argwhere(bad)[0])
    hint = TF32_HINT if tf32 and bool(np.all(np.abs(g - ref) <= tf32[0])) else ""
    # (M, N): C[i, j]; (splits, M, N): the partial tile of range s, P[s, i, j]
    name = "C" if g.ndim == 2 else "P"
    where = "" if g.ndim == 2 else f" (the partial tile of range s = {at[0]})"
    return (
        f"{int(bad.sum())} of {bad.size} elements off; {name}{list(at)} = {g[at]!r}, "
        f"exact {ref[at]!r}, allowed error {bound[at]:.3g}{where}{hint}"
    )


def _operands(rng: np.random.Generator, M: int, K: int, N: int):
    a = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-3, 4, (M, 1)))).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    return a, b


def k_ranges(K: int, splits: int, block: int = BLOCK) -> list[tuple[int, int]]:
    """The range [start, end) of K that each of ``splits`` programs sums: the cdiv(K, block) steps
    of ``block`` dealt out in consecutive runs whose lengths differ by at most one, the longer runs
    first (the last step ends at K; a run may be empty)."""
    steps = -(-K // block)
    per, extra = divmod(steps, splits)
    out = []
    for s in range(splits):
        first = s * per + min(s, extra)
        last = first + per + (s < extra)
        out.append((min(first * block, K), min(last * block, K)))
    return out


def _split_k_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(909)
    shapes = [
        ((1, 1, 1), 1, "1 x 1 x 1, one program: one partial tile"),
        ((16, 16, 16), 1, "one full tile, one program, one K step"),
        ((16, 48, 16), 3, "K = 48: 3 steps, one each"),
        ((5, 100, 7), 3, "K = 100: 7 steps (the last 4 long) as 3, 2 and 2"),
        ((9, 5, 20), 4, "K = 5: one short step, the last three programs empty"),
        ((33, 60, 18), 3, "K = 60: 4 steps as 2, 1 and 1, M = 2 BLOCK_M + 1"),
        ((3, 70, 29), 2, "K = 70: 5 steps as 3 and 2, the last one 6 long"),
        ((17, 130, 5), 4, "K = 130: 9 steps as 3, 2, 2 and 2"),
        ((4, 90, 3), 4, "K = 90: 6 steps as 2, 2, 1 and 1"),
        ((6, 40, 9), 5, "K = 40: 3 steps for 5 programs: one each, the last two empty"),
    ]
    cases = [Case((*_operands(fixed, *s), splits), label=lab) for s, splits, lab in shapes]
    for _ in range(22):  # decode-like: one tile of rows of A, where split-K pays
        M, N = int(rng.integers(1, BLOCK + 1)), int(rng.integers(1, 2 * BLOCK + 1))
        splits = int(rng.integers(2, 6))
        steps = int(rng.integers(splits + 1, 2 * splits + 1))
        if steps % splits == 0:  # uneven runs: which programs get the longer ones counts
            steps += 1
        if rng.random() < 0.3:  # fewer steps than programs: the last ones empty
            splits = max(splits, 3)
            steps = int(rng.integers(2, splits)) if rng.random() < 0.75 else 1
        K = (steps - 1) * BLOCK + int(rng.choice([BLOCK, int(rng.integers(1, BLOCK))]))
        cases.append(Case((*_operands(rng, M, K, N), splits)))
    return cases


#: The launcher of ex09.split_k_matmul, given whole by the statement (Exercise.given): an answer
#: that changes it (the partial tiles computed on the host, the watch left out) scores nothing. It
#: imports what it uses inside its body, so that no name the notebook binds stands in for them.
SPLIT_K_LAUNCHER = '''\
def split_k_matmul(
    a: np.ndarray, b: np.ndarray, splits: int
) -> np.ndarray:
    """The partial tiles of a @ b (float32 (M, K) and (K, N)) that
    split_k_kernel computes with `splits` programs per tile, as
    float64 (splits, M, N): their sum is a @ b. Given: do not
    change it."""
    import numpy as np
    import torch
    import triton

    from nbhelpers.load_audit import (
        in_both_layouts,
        launch_watched,
        nan_padded,
    )

    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    (M, K), N, B = np.shape(a), np.shape(b)[1], 16

    def run(column_major: bool) -> np.ndarray:
        # NaN past every edge (rows too: a misplaced pointer reads NaN)
        ta = nan_padded(a, (B + K, B), column_major, DEVICE)
        tb = nan_padded(b, (B + K + N, B), column_major, DEVICE)
        # one partial tile per program along K, NaN until it is stored
        ws = torch.full(
            (splits, M, N),
            float("nan"),
            dtype=torch.float32,
            device=DEVICE,
        )
        grid = (triton.cdiv(M, B), triton.cdiv(N, B), splits)
        launch_watched(
            split_k_kernel,
            grid,
            ta,
            tb,
            ws,
            M,
            N,
            K,
            splits,
            ta.stride(0),
            ta.stride(1),
            tb.stride(0),
            tb.stride(1),
            ws.stride(0),
            ws.stride(1),
            ws.stride(2),
            BLOCK_M=B,
            BLOCK_N=B,
            BLOCK_K=B,
        )
        return ws.double().cpu().numpy()

    return in_both_layouts(run)
'''


# ------------------------------------------------------------------ 2. the swapped scaled epilogue


def split_sum_ref(parts_t: np.ndarray) -> np.ndarray:
    """The split-K partial tiles (S, N, M) added in float32 in the order s = 0, 1, ..., S - 1."""
    parts = np.asarray(parts_t, dtype=np.float32)
    acc = parts[0].copy()
    for p in parts[1:]:
        acc = (acc + p).astype(np.float32)
    return acc


def group_scales(sB: np.ndarray, N: int, group_n: int) -> np.ndarray:
    """B's scales, one per group of ``group_n`` consecutive columns (``sB``, cdiv(N, group_n)
    values), spread to one per column: (1, N) float32."""
    groups = np.asarray(sB, dtype=np.float32).reshape(-1)
    if group_n < 1 or groups.size != -(-N // group_n):
        raise ValueError(
            f"sB has {groups.size} scales; N = {N} in groups of {group_n} needs {-(-N // max(group_n, 1))}"
        )
    return np.repeat(groups, group_n)[:N].reshape(1, N)


def swap_ab_epilogue_ref(parts_t: np.ndarray, sA: np.ndarray, sB: np.ndarray, group_n: int) -> np.ndarray:
    """fl32(fl32(acc_t.T * sA) * sB[n // group_n]) as float64, (M, N), where acc_t (N, M) is the
    float32 sum of the split-K partial tiles parts_t (S, N, M) in order of s and sB holds one
    scale per group of ``group_n`` columns, (cdiv(N, group_n), 1): scaled_mm's epilogue (chapter
    06's reference) on the transposed accumulator."""
    acc = split_sum_ref(parts_t).T
    return epilogue_ref(acc, sA, group_scales(sB, acc.shape[1], int(group_n)))


def _scales(rng: np.random.Generator, k: int, shape: tuple[int, int]) -> np.ndarray:
    """k fp32 scales with full 24-bit mantissas, like amax / 448 of real data, in ``shape``."""
    return np.exp2(rng.uniform(-12, 4, size=k)).astype(np.float32).reshape(shape)


def _parts(rng: np.random.Generator, splits: int, rows: int, cols: int, empty: int = 0) -> np.ndarray:
    """(splits, rows, cols) float32 partial tiles of like magnitude per element and random signs
    (so that the order of their float32 sum shows in the bits), the last ``empty`` all zero (the
    programs of exercise 1 whose run of K is empty)."""
    size = np.exp2(rng.uniform(-6, 12, (rows, cols)))
    parts = rng.standard_normal((splits, rows, cols)) * size * np.exp2(rng.uniform(-2, 2, (splits, 1, 1)))
    parts[splits - empty :] = 0.0
    return parts.astype(np.float32)


def _epilogue_case(
    rng: np.random.Generator,
    M: int,
    N: int,
    splits: int,
    group_n: int,
    per_a: bool = True,
    empty: int = 0,
    label: str = "",
):
    """parts_t (S, N, M), sA (M, 1) or (1, 1), sB (cdiv(N, group_n), 1), group_n."""
    k = M if per_a else 1
    sA, sB = _scales(rng, k, (k, 1)), _scales(rng, -(-N // group_n), (-(-N // group_n), 1))
    return Case((_parts(rng, splits, N, M, empty), sA, sB, group_n), label=label)


def _group(rng: np.random.Generator, N: int) -> int:
    """A group size for N features: per column, per tensor, 128, or one that straddles tiles."""
    kind = rng.random()
    if kind < 0.15:
        return 1
    if kind < 0.3:
        return N + int(rng.integers(0, 40))  # one group: per tensor
    if kind < 0.4:
        return 128
    return int(rng.choice([2, 3, 5, 7, 12, 16, 20, 24, 40, 48, 64]))


def _epilogue_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(919)
    f32 = np.float32
    cases = [
        Case(
            (np.array([[[1.0, -2.0], [3.0, 0.0]]], f32), np.array([[2.0]], f32), np.array([[0.5]], f32), 2),
            label="one partial tile, per-tensor scales (one group of 2 features): one value each",
        ),
        Case(
            (
                np.array([[[1.0], [1.0], [1.0]], [[2.0], [-4.0], [0.5]]], f32),
                np.array([[3.0]], f32),
                np.array([[1.0], [2.0], [4.0]], f32),
                1,
            ),
            label="two partial tiles, one token (M = 1), N = 3 in groups of 1: a scale per feature",
        ),
        Case(
            (np.array([[[2.0**24]], [[1.0]], [[1.0]]], f32), np.array([[1.0]], f32), np.array([[1.0]], f32), 128),
            label="2**24 + 1 + 1 in order: each 1 lost (in another order, 2**24 + 2)",
        ),
        Case(
            (np.ones((1, 5, 1), f32), np.array([[1.0]], f32), np.array([[2.0], [3.0]], f32), 3),
            label="N = 5 in groups of 3: features 0-2 scaled by 2, 3-4 by 3",
        ),
        _epilogue_case(fixed, 5, 3, 3, 1, label="M = 5, N = 3, 3 partial tiles, per row and per column"),
        _epilogue_case(
            fixed, 4, 40, 4, 16, empty=1, label="M = 4 tokens, N = 40 in groups of 16: 3 groups over two tiles of 32"
        ),
        _epilogue_case(fixed, 20, 20, 2, 1, label="20 x 20 (square: a scale on the wrong axis still broadcasts)"),
        _epilogue_case(fixed, 17, 33, 3, 33, label="M = 17, N = 33, per-row sA, one group: per-tensor sB"),
        _epilogue_case(fixed, 33, 17, 4, 1, per_a=False, label="M = 33, N = 17, per-tensor sA, per-column sB"),
        _epilogue_case(fixed, 3, 70, 2, 24, label="N = 70 in groups of 24: the second group straddles two tiles"),
        _epilogue_case(fixed, 6, 300, 3, 128, label="N = 300 in groups of 128: 3 groups, the last 44 long"),
    ]
    for _ in range(20):
        if rng.random() < 0.6:  # decode: a few tokens, many features
            M, N = int(rng.integers(1, 17)), int(rng.integers(1, 72))
        else:
            M, N = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        if rng.random() < 0.25:
            N = M
        splits = int(rng.integers(2, 6))
        empty = int(rng.integers(0, splits)) if rng.random() < 0.2 else 0
        cases.append(_epilogue_case(rng, M, N, splits, _group(rng, N), rng.random() < 0.8, empty))
    for _ in range(3):  # groups of 128 past the first
        M, N = int(rng.integers(1, 9)), int(rng.integers(129, 300))
        cases.append(_epilogue_case(rng, M, N, int(rng.integers(2, 4)), 128))
    for _ in range(3):  # groups that straddle the 32-feature tiles
        M, N = int(rng.integers(1, 9)), int(rng.integers(40, 100))
        cases.append(_epilogue_case(rng, M, N, int(rng.integers(2, 4)), int(rng.choice([12, 20, 24, 40, 48]))))
    return cases


#: The launcher of ex09.swap_ab_epilogue, given whole by the statement (Exercise.given), imports
#: inside its body, as :data:`SPLIT_K_LAUNCHER`.
EPILOGUE_LAUNCHER = '''\
def swap_ab_epilogue(
    parts_t: np.ndarray, sA: np.ndarray, sB: np.ndarray, group_n: int
) -> np.ndarray:
    """C (M, N) as float64 from the swapped GEMM's split-K partial
    tiles parts_t (S, N, M) float32, with sA (M, 1) or (1, 1) and sB
    (cdiv(N, group_n), 1): one scale per group of group_n consecutive
    columns of B. Given: do not change it."""
    import numpy as np
    import torch
    import triton

    from nbhelpers.load_audit import (
        in_both_layouts,
        launch_watched,
        nan_padded,
    )

    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    (S, N, M), BN, BM = np.shape(parts_t), 32, 16

    def run(column_major: bool) -> np.ndarray:
        # one slice more, and NaN past each slice's edges
        tp = nan_padded(parts_t, (1, BN, BM), column_major, DEVICE)
        # A's scales 1 apart; B's group scales 2 apart by rows, 1 by
        # columns; NaN well past their ends
        sa = nan_padded(np.reshape(sA, (-1, 1)), (M + N + BN, 0))
        sb = nan_padded(
            np.reshape(sB, (-1, 1)), (M + N + BN, 1), column_major
        )
        sa, sb = sa.to(DEVICE), sb.to(DEVICE)
        # C in a buffer of NaN that any tile fits in: a store past C's
        # edge lands in the padding
        cbuf = nan_padded(
            np.full((M + N + BM, N + M + BN), np.nan),
            (0, 0),
            column_major,
            DEVICE,
        )
        c = cbuf[:M, :N]
        grid = (triton.cdiv(N, BN), triton.cdiv(M, BM))
        launch_watched(
            swap_ab_epilogue_kernel,
            grid,
            tp,
            sa,
            sb,
            c,
            M,
            N,
            S,
            int(group_n),
            tp.stride(0),
            tp.stride(1),
            tp.stride(2),
            c.stride(0),
            c.stride(1),
            0 if sa.numel() == 1 else sa.stride(0),
            sb.stride(0),
            BLOCK_N=BN,
            BLOCK_M=BM,
        )
        if not (cbuf[M:].isnan().all() and cbuf[:, N:].isnan().all()):
            raise IndexError(
                "a store wrote past C's edge (into the NaN padding "
                "around it): a mask is missing or wrong"
            )
        return c.double().cpu().numpy()

    return in_both_layouts(run)
'''


# ------------------------------------------------------------------ 3. the register budget of an occupancy

KB = 1024


def register_budget_ref(num_warps: int, shared: int, warps: int) -> int:
    """The most registers per thread (1 to 255) at which an H100/H200 SM still holds at least
    ``warps`` resident warps of blocks of ``num_warps`` warps with ``shared`` bytes each; 0 if no
    register count does. By search over :func:`nbhelpers.occupancy.occupancy` (its rules tested
    against a slow placement and NVIDIA's worked example in tests/test_occupancy.py)."""
    fits = [
        r for r in range(1, H100.max_registers_per_thread + 1) if occupancy(r, num_warps, shared, H100).warps >= warps
    ]
    return max(fits, default=0)


def _budget_shortcuts(num_warps: int, shared: int, warps: int) -> dict[int, str]:
    """Budgets that plausible shortcuts give, each with what it forgot (to word the message)."""
    w, spec = num_warps, H100
    blocks = -(-warps // w)
    smem = -(-(shared + 1024) // 128) * 128
    fits = blocks * w <= 64 and blocks <= 32 and shared <= spec.max_shared_per_block
    fits = fits and blocks * smem <= spec.shared_per_sm

    def top(per_sub: int, round8: bool = True, cap: bool = True) -> int:
        r = 16384 // per_sub // 32
        r = r // 8 * 8 if round8 else r
        return min(255, r) if cap else r

    exact = -(-(blocks * w) // 4)
    shortcuts = [
        (top(exact, round8=False) if fits else 0, "registers are allocated in steps of 8 per thread"),
        (
            (min(255, 65536 // (32 * blocks * w)) // 8 * 8) if fits else 0,
            "the register file is 4 sub-partitions of 16,384 and a warp's registers sit in one",
        ),
        (top(max(1, blocks * w // 4)) if fits else 0, "a sub-partition that holds part of a warp holds all of it"),
        (top(-(-warps // 4)) if fits else 0, "the SM holds whole blocks of num_warps warps"),
        (top(exact), "shared memory and the 32-block cap limit it too"),
        (top(exact, cap=False) if fits else 0, "a thread has at most 255 registers"),
    ]
    out: dict[int, str] = {}
    for value, text in shortcuts:
        out[value] = f"{out[value]}; or {text}" if value in out else text
    return out


class ExpectedBudget(int):
    """The budget, carrying the shortcuts' budgets and what each forgot (to word the message);
    shown and compared as the int."""

    hints: dict[int, str]

    def __new__(cls, value: int, hints: dict[int, str] | None = None):
        obj = super().__new__(cls, value)
        obj.hints = dict(hints or {})
        return obj

    def __repr__(self) -> str:
        return repr(int(self))


def register_budget_answer(num_warps: int, shared: int, warps: int) -> ExpectedBudget:
    """The reference, with the shortcut answers that word a wrong one's message."""
    value = register_budget_ref(num_warps, shared, warps)
    hints = {k: v for k, v in _budget_shortcuts(num_warps, shared, warps).items() if k != value}
    return ExpectedBudget(value, hints)


def _same_budget(got, expected) -> str | None:
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        return f"returned {describe(got)}, expected an int"
    if int(got) == int(expected):
        return None
    hint = getattr(expected, "hints", {}).get(int(got))
    return f"returned {int(got)}, expected {int(expected)}" + (f" (did you forget: {hint}?)" if hint else "")


def _budget_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((4, 0, 16), label="4 blocks of 4 warps: 4 warps a sub-partition: 128"),
        Case((4, 0, 12), label="3 blocks of 4 warps: 168 (170 rounded down to 8)"),
        Case((4, 0, 8), label="2 blocks of 4: 256 registers allowed, 255 a thread may have"),
        Case((8, 0, 9), label="9 warps in blocks of 8: 2 blocks, 16 warps"),
        Case((1, 0, 10), label="10 warps of 1: 3 in some sub-partition: 168"),
        Case((1, 0, 33), label="33 blocks of 1 warp: more than the 32 an SM holds"),
        Case((2, 0, 64), label="32 blocks of 2 warps: 64 warps, 32 registers"),
        Case((1, 0, 20), label="20 warps of 1: 5 per sub-partition: 102 -> 96"),
        Case((4, 64 * KB, 12), label="3 blocks with 64 KB each fit 228 KB"),
        Case((4, 64 * KB, 16), label="4 blocks with 64 KB each do not"),
        Case((4, 76 * KB, 12), label="76 KB: 3 fit 228 KB, but not with the 1 KB reserve each"),
        Case((4, 113 * KB, 8), label="113 KB: two blocks with their reserves fill 228 KB exactly"),
        Case((4, 227 * KB, 4), label="227 KB: one block may ask for it"),
        Case((4, 227 * KB + 1, 1), label="1 byte over the 227 KB one block may ask for"),
        Case((1, 45_600, 5), label="45,600 B: 5 blocks fit unrounded, 4 in 128-byte units"),
        Case((16, 0, 16), label="one block of 16 warps"),
        Case((16, 0, 48), label="three blocks of 16 warps: 12 a sub-partition: 40"),
    ]
    spec = H100
    for _ in range(12):  # register-bound, no shared memory worth naming: the steps
        w = int(rng.choice([1, 2, 4, 8, 16]))
        warps = int(rng.integers(1, 64 // w + 1)) * w - int(rng.integers(0, w))
        cases.append(Case((w, int(rng.choice([0, int(rng.integers(1, 2 * KB))])), max(1, warps))))
    for _ in range(6):  # warps not a multiple of 4 per block count: the sub-partitions and whole blocks
        w = int(rng.choice([1, 2]))
        b = int(rng.integers(5, 32 // w + 1))
        while (b * w) % 4 == 0:
            b -= 1
        cases.append(Case((w, 0, b * w - int(rng.integers(0, w)))))
    for _ in range(8):  # shared-memory bound: the reserve or the 128-byte unit decides one block
        w = int(rng.choice([1, 2, 4]))
        b = int(rng.integers(2, min(12, 64 // w) + 1))
        room = spec.shared_per_sm // b // 128 * 128  # b blocks of at most room bytes, reserve included
        shared = room - 1024 - int(rng.integers(-127, 128))
        cases.append(Case((w, shared, b * w - int(rng.integers(0, w)))))
    for _ in range(3):  # more blocks than 32
        cases.append(Case((1, int(rng.integers(0, 2 * KB)), int(rng.integers(33, 65)))))
    # at the 227 KB a block may ask for: just under or at it (one block fits), just over it
    cases.append(Case((int(rng.choice([1, 2, 4])), 227 * KB - int(rng.integers(0, 1024)), 1)))
    cases.append(Case((int(rng.choice([1, 2, 4])), 227 * KB + int(rng.integers(1, 1024)), 1)))
    for _ in range(4):  # b blocks fit unrounded, not in 128-byte units (SM // b not a multiple of 128)
        b = int(rng.choice([5, 7, 9, 11, 13]))
        top = spec.shared_per_sm // b
        shared = top - 1024 - int(rng.integers(0, top % 128))
        w = int(rng.choice([1, 2, 4]))
        cases.append(Case((w, shared, b * w - int(rng.integers(0, w)))))
    # b blocks that fit in 128-byte units and not in 256-byte ones: the largest multiple of 128
    # under the SM's share is an odd one
    odd = [b for b in range(2, 33) if spec.shared_per_sm // b // 128 % 2]
    for _ in range(4):
        b = int(rng.choice(odd))
        alloc = spec.shared_per_sm // b // 128 * 128
        w = int(rng.choice([1, 2]))
        cases.append(Case((w, alloc - 1024 - int(rng.integers(0, 128)), b * w - int(rng.integers(0, w)))))
    for _ in range(6):  # anything
        w = int(rng.choice([1, 2, 4, 8, 16]))
        cases.append(Case((w, int(rng.choice([0, int(rng.integers(0, 232 * KB))])), int(rng.integers(1, 65)))))
    return cases


#: What an answer may not call (Exercise.forbidden): the statement: no kernels, scaled_gemm or occupancy.
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.kernels", "nbhelpers.scaled_gemm", "nbhelpers.occupancy")
#: The course's machinery under every interpreted launch (a cache of the interpreter's work).
MACHINERY = ("nbhelpers.kernels.interpreter_cache",)

EXERCISES = [
    Exercise(
        "ex09.split_k_matmul",
        "The K ranges and loop of a split-K GEMM",
        5,
        split_k_matmul_ref,
        _split_k_cases,
        compare=_within_bound,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        given=SPLIT_K_LAUNCHER,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex09.swap_ab_epilogue",
        "The split-K reduction and epilogue of a swapped scaled GEMM",
        4,
        swap_ab_epilogue_ref,
        _epilogue_cases,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        given=EPILOGUE_LAUNCHER,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex09.register_budget",
        "The register budget of an occupancy",
        3,
        register_budget_answer,
        _budget_cases,
        compare=_same_budget,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        kind=ExerciseKind.PREDICT,
    ),
]
