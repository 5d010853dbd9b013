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

- ``split_k_matmul``: the K loop of one program of a split-K GEMM on float32 operands: program
  ``(i, j, s)`` sums its tile over ``s * K_SPLIT <= k < min((s + 1) * K_SPLIT, K)``, ``K_SPLIT =
  cdiv(K, splits)`` (not a multiple of the block in most cases, the last ranges short or empty);
  the given launcher returns the partial tiles, each compared with the product over its own range
  (so a program that does another's work fails too). Reference:
  :func:`nbhelpers.kernels.gemm.matmul_ref` (float64) of each range; accepted when every element
  is within :func:`nbhelpers.gemm_bounds.error_bound` of it (any order of fp32 additions stays
  inside; an empty range must give exactly 0). That bound is IEEE float32's: on an NVIDIA GPU ``tl.dot``
  rounds float32 operands to TF32 unless ``input_precision="ieee"``, and TF32 inputs fall far
  outside it (the spec asks for IEEE; a failing answer within the TF32 bound gets a message that
  says so). An element of the next range summed too (a mask against ``K`` rather than the range's
  end), a range started at 0, or one cut short is far outside. In Triton's interpreter the
  launcher the notebook gives sees what the results cannot show: it runs the kernel on operands
  laid out by rows and by columns (a stride left out is right in one layout only), and reads the
  kernel's source with :func:`nbhelpers.load_audit.dot_operand_problems` (a ``tl.dot`` without
  ``input_precision="ieee"``, an operand loaded under a mask without ``other=``).
- ``swap_ab_epilogue``: the epilogue of a scaled fp8 GEMM computed transposed ("swap AB",
  ``C^T = qB^T qA^T``): the fp32 accumulator ``acc_t (N, M)``, per-row (or per-tensor) scales of
  A along its columns, per-column (or per-tensor) scales of B along its rows, ``C (M, N)`` stored
  transposed. Reference: :func:`nbhelpers.answer_keys.ch06.epilogue_ref` on ``acc_t.T``, the fp32
  epilogue of :func:`nbhelpers.scaled_gemm.scaled_mm` (held bit for bit against it in
  tests/test_exercises_ch06.py and here); compared bit for bit, so the scales' order counts. The
  launcher runs it in both layouts too, and puts C in a buffer of NaN: a store past C's edge is
  reported. Most cases are decode-like (a few tokens, ``M`` up to 16) and not square, so a scale
  or an offset on the wrong axis reads past an edge or fails the comparison.
- ``resident_warps``: predict the occupancy of a kernel on an H100/H200 from its ptxas line
  (registers per thread, shared memory per block) and its ``num_warps``: the resident warps per SM
  and the limit that binds. Reference: :func:`nbhelpers.occupancy.occupancy` (tested against a
  slow block-by-block placement and NVIDIA's worked example in tests/test_occupancy.py); the
  warps compared exactly, the limit accepted if it is any of those that bind. The cases are
  chosen so that each shortcut gives a wrong count on many of them: the napkin ``65536 / (32 r)``,
  registers not rounded up to 8 per thread, the register file not split into 4 sub-partitions,
  shared memory ignored, its 1 KB reserve or 128-byte unit ignored (or taken as 256 bytes), the
  32-block cap ignored.

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import numpy as np

from ..exercise_types import Case, Exercise
from ..occupancy import H100, occupancy
from ..report_text import describe, short_repr
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


def k_ranges(K: int, splits: int) -> list[tuple[int, int]]:
    """The range [start, end) of K that each of ``splits`` programs sums, K_SPLIT = cdiv(K, splits)."""
    k_split = -(-K // splits)
    return [(min(s * k_split, K), min((s + 1) * k_split, K)) for s in range(splits)]


def _split_k_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(909)
    shapes = [
        ((1, 1, 1), 1, "1 x 1 x 1, one range: one partial tile"),
        ((16, 16, 16), 1, "one full tile, one range, one K step"),
        ((16, 48, 16), 3, "K = 48 in 3 ranges of one full K step each"),
        ((5, 40, 7), 3, "K = 40 in ranges of 14: the second and third start inside a K slice"),
        ((9, 5, 20), 4, "K = 5 in ranges of 2: the last range empty"),
        ((33, 15, 18), 2, "K = 15 in ranges of 8 and 7, M = 2 BLOCK_M + 1"),
        ((3, 41, 29), 2, "K = 41 in ranges of 21 and 20: two K steps each, the second short"),
        ((17, 70, 5), 2, "K = 70 in ranges of 35: three K steps each"),
    ]
    cases = [Case((*_operands(fixed, *s), splits), label=lab) for s, splits, lab in shapes]
    for _ in range(22):  # decode-like: one tile of rows of A, where split-K pays
        M, N = int(rng.integers(1, BLOCK + 1)), int(rng.integers(1, 40))
        K = int(rng.choice([int(rng.integers(2, 70)), BLOCK * int(rng.integers(1, 4)) + int(rng.choice([-1, 1]))]))
        splits = int(rng.integers(2, 5))
        if rng.random() < 0.2:  # few K per range: the last ranges empty where cdiv rounds up
            N, K, splits = int(rng.integers(1, BLOCK + 1)), int(rng.integers(3, 12)), int(rng.integers(3, 7))
        cases.append(Case((*_operands(rng, M, K, N), splits)))
    return cases


# ------------------------------------------------------------------ 2. the swapped scaled epilogue


def swap_ab_epilogue_ref(acc_t: np.ndarray, sA: np.ndarray, sB: np.ndarray) -> np.ndarray:
    """fl32(fl32(acc_t.T * sA) * sB) as float64, (M, N): scaled_mm's epilogue (chapter 06's
    reference) on the transposed accumulator acc_t (N, M)."""
    return epilogue_ref(np.asarray(acc_t).T, sA, sB)


def _scales(rng: np.random.Generator, n: int, per: bool, row: bool) -> np.ndarray:
    """fp32 scales with full 24-bit mantissas, like amax / 448 of real data."""
    k = n if per else 1
    s = np.exp2(rng.uniform(-12, 4, size=k)).astype(np.float32)
    return s.reshape((k, 1) if row else (1, k))


def _acc(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    return (rng.standard_normal((rows, cols)) * np.exp2(rng.uniform(-6, 12, (rows, cols)))).astype(np.float32)


def _epilogue_case(rng: np.random.Generator, M: int, N: int, per_a: bool = True, per_b: bool = True, label: str = ""):
    """acc_t (N, M), sA (M, 1) or (1, 1), sB (1, N) or (1, 1)."""
    return Case((_acc(rng, N, M), _scales(rng, M, per_a, True), _scales(rng, N, per_b, False)), label=label)


def _epilogue_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(919)
    f32 = np.float32
    cases = [
        Case(
            (np.array([[1.0, -2.0], [3.0, 0.0]], f32), np.array([[2.0]], f32), np.array([[0.5]], f32)),
            label="per-tensor scales: one value each",
        ),
        Case(
            (np.array([[1.0], [1.0], [1.0]], f32), np.array([[3.0]], f32), np.array([[1.0, 2.0, 4.0]], f32)),
            label="one token (M = 1), N = 3: per-tensor sA, per-column sB",
        ),
        _epilogue_case(fixed, 5, 3, label="M = 5, N = 3, per row and per column"),
        _epilogue_case(fixed, 4, 40, label="M = 4 tokens, N = 40 features: two tiles along N"),
        _epilogue_case(fixed, 20, 20, label="20 x 20 (square: a scale on the wrong axis still broadcasts)"),
        _epilogue_case(fixed, 17, 33, per_b=False, label="M = 17, N = 33, per-row sA, per-tensor sB"),
        _epilogue_case(fixed, 33, 17, per_a=False, label="M = 33, N = 17, per-tensor sA, per-column sB"),
    ]
    for _ in range(22):
        if rng.random() < 0.6:  # decode: a few tokens, many features
            M, N = int(rng.integers(1, 17)), int(rng.integers(1, 72))
        else:
            M, N = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        if rng.random() < 0.25:
            N = M
        cases.append(_epilogue_case(rng, M, N, rng.random() < 0.8, rng.random() < 0.8))
    return cases


# ------------------------------------------------------------------ 3. occupancy from the ptxas line

LIMIT_NAMES = ("registers", "shared memory", "warps", "blocks")
KB = 1024


def _shortcuts(registers: int, num_warps: int, shared: int) -> dict[int, str]:
    """Warp counts that plausible shortcuts give, each with what they forgot (for the message)."""
    spec = H100
    w = num_warps

    def warps(regs_alloc, split=True, smem=None, blocks_cap=spec.max_blocks_per_sm):
        per_warp = 32 * regs_alloc
        by_regs = (16384 // per_warp) * 4 // w if split else 65536 // per_warp // w
        by = [by_regs, 64 // w, blocks_cap]
        if smem is not None:
            by.append(spec.shared_per_sm // smem if smem else blocks_cap)
        return min(by) * w

    r8 = -(-registers // 8) * 8
    full = -(-(shared + 1024) // 128) * 128
    shortcuts = [
        (warps(registers, smem=full), "registers per thread are allocated in multiples of 8"),
        (
            warps(r8, split=False, smem=full),
            "the register file is 4 sub-partitions of 16,384 and a warp's registers sit in one",
        ),
        (warps(r8), "shared memory limits the blocks too"),
        (warps(r8, smem=shared), "the driver reserves 1 KB of shared memory per block"),
        (warps(r8, smem=shared + 1024), "shared memory is allocated in units of 128 bytes"),
        (warps(r8, smem=full, blocks_cap=10**9), "an SM holds at most 32 blocks"),
        (
            min(64, 65536 // (32 * registers)),
            "the napkin 65536 / (32 r), capped at 64: no rounding, no whole blocks, no shared memory",
        ),
    ]
    out: dict[int, str] = {}
    for count, text in shortcuts:
        out[count] = f"{out[count]}; or {text}" if count in out else text
    return out


class ExpectedOccupancy(tuple):
    """(warps, limits, hints): the answer, every limit that binds, and the warp counts of
    shortcuts with what each forgot (to word the message); shown as the answer alone."""

    def __repr__(self) -> str:
        warps, limits, _ = self
        return f"({warps}, {' or '.join(repr(x) for x in limits)})"


def resident_warps_ref(registers: int, num_warps: int, shared: int) -> ExpectedOccupancy:
    """(resident warps per SM, the limits that bind, shortcut answers) on an H100/H200. Only the
    first two are the answer; the third words the message of a wrong count."""
    occ = occupancy(registers, num_warps, shared, H100)
    hints = {k: v for k, v in _shortcuts(registers, num_warps, shared).items() if k != occ.warps}
    return ExpectedOccupancy((occ.warps, tuple(str(lim) for lim in occ.limits), hints))


def _same_occupancy(got, expected) -> str | None:
    warps, limits, hints = expected
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"returned {describe(got)}, expected a tuple (warps, limit)"
    g_warps, g_limit = got
    if isinstance(g_warps, bool) or not isinstance(g_warps, (int, np.integer)):
        return f"warps: returned {describe(g_warps)}, expected an int"
    if int(g_warps) != warps:
        hint = hints.get(int(g_warps))
        return f"warps: returned {int(g_warps)}, expected {warps}" + (f" (did you forget: {hint}?)" if hint else "")
    if not isinstance(g_limit, str):
        return f"limit: returned {describe(g_limit)}, expected one of {', '.join(map(repr, LIMIT_NAMES))}"
    if g_limit.strip().lower() not in limits:
        which = " or ".join(repr(x) for x in limits)
        return f"limit: returned {short_repr(g_limit, 40)}, expected {which}"
    return None


def _occupancy_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((32, 4, 0), label="32 registers, 4 warps, no shared memory: registers and warps both bind"),
        Case((131, 8, 0), label="131 registers: allocated as 136"),
        Case((128, 8, 0), label="128 registers, 8 warps"),
        Case((80, 1, 0), label="80 registers, 1 warp: the sub-partitions"),
        Case((16, 1, 0), label="16 registers, 1 warp: the block cap"),
        Case((16, 4, 0), label="16 registers, 4 warps: the 64-warp cap alone"),
        Case((24, 8, 0), label="24 registers, 8 warps: registers allow 10 blocks, the warp cap 8"),
        Case((64, 4, 64 * KB), label="64 KB of shared memory per block"),
        Case((64, 4, 113 * KB), label="113 KB: two blocks with their reserves fill the 228 KB exactly"),
        Case((64, 4, 76 * KB), label="76 KB: three fit 228 KB, but not with the reserve"),
        Case((40, 4, 45_600), label="45,600 B: 5 blocks fit unrounded, 4 in 128-byte units"),
        Case((32, 2, 20_096), label="20,096 B: 11 blocks fit in 128-byte units, 10 in 256-byte ones"),
        Case((226, 4, 128 * KB), label="a GEMM config: 226 registers, 128 KB of pipelining buffers"),
        Case((255, 16, 0), label="16 warps of 255 registers: more than a block may have"),
        Case((64, 4, 227 * KB + 1), label="1 byte over the 227 KB a block may use"),
        Case((64, 4, 227 * KB), label="exactly the 227 KB a block may use, not counting the reserve"),
        Case((64, 4, 226 * KB + 512), label="226.5 KB: fits a block, though not with the reserve inside 227 KB"),
        Case((64, 4, 227 * 1000 + 128), label="227,128 B: more than 227,000, less than 227 KB"),
    ]
    spec = H100
    for _ in range(10):  # register-bound, just past a multiple of 8 that would keep one more block
        w = int(rng.choice([1, 2, 4, 8]))
        while True:
            b = int(rng.integers(1, 64 // w + 1))
            r_max = 16384 // -(-(b * w) // 4) // 32  # unrounded, b blocks fit up to r_max
            if r_max % 8 and 8 < r_max <= 255:
                break
        r = int(rng.integers(r_max // 8 * 8 + 1, r_max + 1))  # rounded up past r_max: fewer blocks
        cases.append(Case((r, w, int(rng.choice([0, int(rng.integers(1, 4 * KB))])))))
    for _ in range(3):  # few registers, 4 to 16 warps: the 64-warp cap binds before registers or blocks
        cases.append(Case((int(rng.integers(1, 25)), int(rng.choice([4, 8, 16])), int(rng.integers(0, 4 * KB)))))
    for _ in range(4):  # registers well inside a step, any block size
        cases.append(Case((int(rng.integers(33, 256)), int(rng.choice([1, 2, 4, 8])), 0)))
    for _ in range(8):  # shared-memory bound, with sizes where the reserve decides one block
        b = int(rng.integers(2, 12))
        room = spec.shared_per_sm // b  # b blocks of at most `room` bytes, reserve included
        shared = room - int(rng.integers(1, 1024))  # fits b times without the reserve, b - 1 with it
        cases.append(Case((int(rng.integers(16, 72)), int(rng.choice([1, 2, 4])), shared)))
    # at the 227 KB a block may ask for (the reserve not counted): exactly it, and just under it
    cases.append(Case((int(rng.integers(16, 72)), int(rng.choice([1, 2, 4])), 227 * KB)))
    cases.append(
        Case((int(rng.integers(16, 72)), int(rng.choice([1, 2, 4])), int(rng.integers(226 * KB + 1, 227 * KB))))
    )
    for _ in range(4):  # b blocks fill all 228 KB of the SM: more than the 227 KB one block may have
        b = int(rng.integers(2, 9))
        alloc = spec.shared_per_sm // b // 128 * 128
        cases.append(
            Case((int(rng.integers(16, 64)), int(rng.choice([1, 2, 4])), alloc - 1024 - int(rng.integers(0, 128))))
        )
    for _ in range(4):  # shared-memory bound where the 128-byte unit decides one block
        b = int(rng.choice([5, 7, 9, 11, 13]))
        top = spec.shared_per_sm // b  # not a multiple of 128 for these b
        shared = top - 1024 - int(rng.integers(0, top % 128))
        cases.append(Case((int(rng.integers(16, 64)), int(rng.choice([1, 2, 4])), shared)))
    # b blocks whose shared memory fits in 128-byte units and not in 256-byte ones: the largest
    # multiple of 128 under the SM's share is an odd one (small blocks, so that shared memory binds)
    odd = [b for b in range(2, 33) if spec.shared_per_sm // b // 128 % 2]
    for _ in range(4):
        b = int(rng.choice(odd))
        alloc = spec.shared_per_sm // b // 128 * 128
        w = int(rng.choice([1, 2]))  # at most 64 warps in b <= 32 blocks
        cases.append(Case((int(rng.integers(16, 33)), w, alloc - 1024 - int(rng.integers(0, 128)))))
    for _ in range(4):  # tiny blocks: the 32-block cap
        cases.append(Case((int(rng.integers(8, 33)), 1, int(rng.choice([0, int(rng.integers(1, 6 * KB))])))))
    for _ in range(6):  # anything a Triton kernel may have
        cases.append(
            Case(
                (
                    int(rng.integers(1, 256)),
                    int(rng.choice([1, 2, 4, 8, 16])),
                    int(rng.choice([0, int(rng.integers(0, 232 * KB))])),
                )
            )
        )
    return cases


#: What an answer may not call (Exercise.forbidden): the statement: no kernels, scaled_gemm or occupancy.
FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.kernels", "nbhelpers.scaled_gemm", "nbhelpers.occupancy")
#: The course's machinery under every interpreted launch (a cache of the interpreter's work).
MACHINERY = ("nbhelpers.kernels.interpreter_cache",)

EXERCISES = [
    Exercise(
        "ex09.split_k_matmul",
        "The K loop of a split-K GEMM",
        5,
        split_k_matmul_ref,
        _split_k_cases,
        compare=_within_bound,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
    ),
    Exercise(
        "ex09.swap_ab_epilogue",
        "The epilogue of a swapped scaled GEMM",
        4,
        swap_ab_epilogue_ref,
        _epilogue_cases,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
    ),
    Exercise(
        "ex09.resident_warps",
        "Predict the occupancy from the ptxas line",
        3,
        resident_warps_ref,
        _occupancy_cases,
        compare=_same_occupancy,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
    ),
]
