"""Chapter 09 exercises: GEMM kernels in Triton. Listed in ``EXERCISES`` for :mod:`nbhelpers.checks`.

Both are Triton kernels the student completes, run through the launcher the notebook gives
(Triton's interpreter on a CPU); the launchers read their operands from buffers padded with NaN,
so a load past an edge that the mask should have stopped poisons the result instead of reading
another row's values (or memory outside the tensor).

- ``tile_matmul``: the K loop of a tiled fp32-accumulated GEMM on float32 operands. Reference:
  :func:`nbhelpers.kernels.gemm.matmul_ref` (float64); accepted when every element is within
  :func:`nbhelpers.kernels.gemm.error_bound` of it (any order of fp32 additions stays inside).
  That bound is IEEE float32's: on an NVIDIA GPU ``tl.dot`` rounds float32 operands to TF32
  unless ``input_precision="ieee"``, and TF32 inputs fall far outside it (the spec asks for IEEE;
  a failing answer within the TF32 bound gets a message that says so).
- ``scaled_epilogue``: the epilogue of the scaled fp8 GEMM as a kernel: fp32 accumulator tile,
  per-row (or per-tensor) scales of A, per-column (or per-tensor) scales of B. Reference:
  :func:`nbhelpers.exercises.ch06.epilogue_ref`, the fp32 epilogue of
  :func:`nbhelpers.scaled_gemm.scaled_mm` (held bit for bit against it in
  tests/test_exercises_ch06.py); compared bit for bit.

Edge cases come first, then random ones from the seed.
"""
from __future__ import annotations

import numpy as np

from ..checks import Case, Exercise, _describe
from .ch06 import epilogue_ref

BLOCK = 16  # every tile dimension of the launchers (the interpreter's tl.dot wants at least 16)


# ------------------------------------------------------------------ 1. the K loop


def tile_matmul_ref(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a @ b in float64, the elementwise error bound of an fp32-accumulated product of float32
    inputs, the same bound for inputs rounded to TF32), all (M, N). The third only words the
    message: an answer inside it but outside the second looks like TF32 inputs."""
    import torch

    from ..kernels.gemm import error_bound, matmul_ref

    ta, tb = torch.from_numpy(np.asarray(a, np.float32)), torch.from_numpy(np.asarray(b, np.float32))
    return (matmul_ref(ta, tb).numpy(), error_bound(ta, tb).numpy(),
            error_bound(ta, tb, input_precision="tf32").numpy())


TF32_HINT = ("; every error is within what TF32 inputs give: on an NVIDIA GPU tl.dot rounds float32 "
             "operands to TF32 unless it is called with input_precision=\"ieee\"")


def _within_bound(got, expected) -> str | None:
    ref, bound, *tf32 = expected
    try:
        g = np.asarray(got, dtype=np.float64)
    except Exception:
        return f"returned {_describe(got)}, expected an array of shape {ref.shape}"
    if g.shape != ref.shape:
        return f"returned an array of shape {g.shape}, expected shape {ref.shape}"
    bad = ~(np.abs(g - ref) <= bound)  # NaN fails too
    if not bad.any():
        return None
    i, j = np.argwhere(bad)[0]
    hint = TF32_HINT if tf32 and bool(np.all(np.abs(g - ref) <= tf32[0])) else ""
    return (f"{int(bad.sum())} of {bad.size} elements off; C[{i}, {j}] = {g[i, j]!r}, "
            f"exact {ref[i, j]!r}, allowed error {bound[i, j]:.3g}{hint}")


def _operands(rng: np.random.Generator, M: int, K: int, N: int):
    a = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-3, 4, (M, 1)))).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    return a, b


def _matmul_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(909)
    shapes = [((1, 1, 1), "1 x 1 x 1: one partial tile"),
              ((16, 16, 16), "one full tile, one K step"),
              ((16, 48, 16), "K = 3 BLOCK_K: three full K steps"),
              ((5, 17, 7), "K = BLOCK_K + 1: a one-column K tail"),
              ((33, 15, 18), "K = BLOCK_K - 1, M = 2 BLOCK_M + 1"),
              ((3, 41, 29), "K = 41: two full K steps and a tail")]
    cases = [Case(_operands(fixed, *s), label=lab) for s, lab in shapes]
    for _ in range(24):
        M, N = int(rng.integers(1, 50)), int(rng.integers(1, 50))
        K = int(rng.choice([int(rng.integers(1, 70)), BLOCK * int(rng.integers(1, 4)) + int(rng.choice([-1, 1]))]))
        cases.append(Case(_operands(rng, M, K, N)))
    return cases


# ------------------------------------------------------------------ 2. the scaled epilogue


def scaled_epilogue_ref(acc: np.ndarray, sA: np.ndarray, sB: np.ndarray) -> np.ndarray:
    """fl32(fl32(acc * sA) * sB) as float64, (M, N): scaled_mm's epilogue (chapter 06's reference)."""
    return epilogue_ref(acc, sA, sB)


def _scales(rng: np.random.Generator, n: int, per: bool, row: bool) -> np.ndarray:
    """fp32 scales with full 24-bit mantissas, like amax / 448 of real data."""
    k = n if per else 1
    s = np.exp2(rng.uniform(-12, 4, size=k)).astype(np.float32)
    return s.reshape((k, 1) if row else (1, k))


def _acc(rng: np.random.Generator, M: int, N: int) -> np.ndarray:
    return (rng.standard_normal((M, N)) * np.exp2(rng.uniform(-6, 12, (M, N)))).astype(np.float32)


def _epilogue_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(919)
    f32 = np.float32
    cases = [
        Case((np.array([[1.0, -2.0], [3.0, 0.0]], f32), np.array([[2.0]], f32), np.array([[0.5]], f32)),
             label="per-tensor scales: one value each"),
        Case((np.array([[1.0, 1.0, 1.0]], f32), np.array([[3.0]], f32), np.array([[1.0, 2.0, 4.0]], f32)),
             label="1 x 3: per-tensor sA, per-column sB"),
        Case((_acc(fixed, 5, 3), _scales(fixed, 5, True, True), _scales(fixed, 3, True, False)),
             label="5 x 3, per row and per column"),
        Case((_acc(fixed, 20, 20), _scales(fixed, 20, True, True), _scales(fixed, 20, True, False)),
             label="20 x 20 (square: a scale on the wrong axis still broadcasts)"),
        Case((_acc(fixed, 17, 33), _scales(fixed, 17, True, True), _scales(fixed, 1, False, False)),
             label="17 x 33, per-row sA, per-tensor sB"),
    ]
    for _ in range(24):
        M, N = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        if rng.random() < 0.3:
            N = M
        cases.append(Case((_acc(rng, M, N), _scales(rng, M, rng.random() < 0.8, True),
                           _scales(rng, N, rng.random() < 0.8, False))))
    return cases


EXERCISES = [
    Exercise("ex09.tile_matmul", "The K loop of a tiled GEMM", 5, tile_matmul_ref, _matmul_cases,
             compare=_within_bound),
    Exercise("ex09.scaled_epilogue", "The scaled epilogue in a kernel", 4, scaled_epilogue_ref,
             _epilogue_cases),
]
