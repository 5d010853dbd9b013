"""Chapter 06 exercises: scaled int8 / fp8 GEMM. Listed in ``EXERCISES`` for :mod:`nbhelpers.answer_keys`.

- ``quantize_blocks``: its reference is :func:`nbhelpers.scaling.quantize` with the matching
  :class:`~nbhelpers.recipes.Recipe` (fp32 scales, current amax); compared bit for bit (q and
  scales).
- ``epilogue``: the fp32 epilogue of :func:`nbhelpers.scaled_gemm.scaled_mm`, step 3 of its
  docstring, applied to a given accumulator. scaled_mm takes operands, not an accumulator, so the
  reference is written out here in the same fp32 operations, and tests/test_exercises_ch06.py
  holds it bit for bit against scaled_mm on real int8 and fp8 GEMMs (and against
  ``torch._scaled_mm`` where no step rounds).
- ``coarsest_granularity``: a predict-then-measure problem; the reference measures each
  granularity's int8 SQNR with the engine (quantize, dequantize, :func:`nbhelpers.metrics.sqnr_db`)
  and returns the first in the list that reaches the threshold. The cases keep every SQNR at least
  :data:`MARGIN_DB` away from the threshold, so a prediction from a noise model decides them.

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import numpy as np

from ..exercise_types import Case, Exercise
from ..metrics import sqnr_db
from ..recipes import Recipe
from ..scaling import dequantize, quantize

_F32_TINY = 2.0**-149  # fp32's smallest subnormal: the floor of every fp32 scale


# ------------------------------------------------------------------ 1. per-block quantization


def quantize_blocks_ref(x: np.ndarray, block_rows, block_cols, element: str) -> tuple[np.ndarray, np.ndarray]:
    """(q, scales) of x (M, K) by the engine: one fp32 scale per block_rows x block_cols block."""
    return quantize(x, Recipe(element, (block_rows, block_cols)))


def _ties_block(rng: np.random.Generator, shape, qmax: float) -> np.ndarray:
    """A block whose amax is qmax * 2**e (so its scale is exactly 2**e) and whose other values are
    half-integers times 2**e: exact ties of the int8 rounding."""
    e = int(rng.integers(-20, 10))
    v = (rng.integers(-126, 126, size=shape) + 0.5) * 2.0**e
    v.flat[int(rng.integers(v.size))] = rng.choice([-1.0, 1.0]) * qmax * 2.0**e
    return v


def _fill_blocks(x: np.ndarray, br: int, bc: int, rng: np.random.Generator, element: str) -> None:
    """Give some blocks of x a hard content: all zeros, tiny values (scales in fp32's subnormal
    range, rounded far down, so x / scale passes the element's max), exact ties, huge values."""
    M, K = x.shape
    qmax = 127.0 if element == "int8" else 448.0
    for i in range(0, M, br):
        for j in range(0, K, bc):
            blk = x[i : i + br, j : j + bc]
            r = rng.random()
            if r < 0.12:
                blk[...] = 0.0
            elif r < 0.27:  # amax / qmax in fp32's subnormal range: the scale rounds by up to half of itself
                blk[...] = rng.standard_normal(blk.shape) * 2.0 ** float(rng.uniform(-146, -135))
            elif r < 0.45 and element == "int8":
                blk[...] = _ties_block(rng, blk.shape, qmax)
            elif r < 0.55:
                blk[...] = blk * 2.0 ** float(rng.uniform(-30, 60))


def _quantize_cases(rng: np.random.Generator) -> list[Case]:
    tiny = 1.4 * 127 * _F32_TINY
    cases = [
        Case(
            (np.array([[1.0, -2.0, 0.5], [127.0, 0.25, -127.0]]), None, None, "int8"),
            label="per tensor: amax 127, scale 1",
        ),
        Case((np.array([[0.0, 0.0], [3.0, -1.5]]), 1, None, "int8"), label="per row: an all-zero row"),
        Case((np.array([[2.5, 0.5, -1.5, 127.0 * 1.0]]), 1, None, "int8"), label="int8 ties go to even"),
        Case((np.arange(1.0, 21.0).reshape(4, 5), 3, 2, "int8"), label="blocks 3 x 2 on a 4 x 5 tensor: edge blocks"),
        Case(
            (np.array([[tiny, -tiny / 3, 0.0, 1e-45]]), None, None, "int8"),
            label="a scale in fp32's subnormals: x / scale past 127 (clamped)",
        ),
        Case(
            (np.array([[1.4 * 448 * _F32_TINY, 1e-44], [0.0, 0.0]]), None, 1, "e4m3fn"),
            label="e4m3fn per column: a subnormal scale, clamped to 448, and a zero column",
        ),
        Case((np.array([[448.0, 1.0, -0.1], [1e3, 3.0, 2.0**-20]]), 1, None, "e4m3fn"), label="e4m3fn per row"),
        Case((np.linspace(-3.0, 3.0, 40).reshape(5, 8), 2, 3, "e4m3fn"), label="e4m3fn, 2 x 3 blocks with edges"),
        Case((np.array([[0.1, 0.2, 0.3]]), None, 2, "int8"), label="amax / 127 not an fp32 value"),
    ]
    blocks = [
        (None, None),
        (1, None),
        (None, 1),
        (1, 4),
        (2, 3),
        (3, 3),
        (4, 2),
        (1, 5),
        (5, 1),
        (2, None),
        (None, 3),
        (4, 4),
    ]
    for i in range(90):
        element = "int8" if i % 2 == 0 else "e4m3fn"
        M, K = int(rng.integers(1, 10)), int(rng.integers(1, 14))
        br, bc = blocks[int(rng.integers(len(blocks)))]
        x = rng.standard_normal((M, K)) * np.exp2(rng.uniform(-4, 4, size=(M, K)))
        _fill_blocks(x, M if br is None else br, K if bc is None else bc, rng, element)
        cases.append(Case((x, br, bc, element)))
    return cases


# ------------------------------------------------------------------ 2. the epilogue


def epilogue_ref(acc: np.ndarray, sA: np.ndarray, sB: np.ndarray) -> np.ndarray:
    """scaled_mm's epilogue on a given accumulator: fl32(fl32(fl32(acc) * sA) * sB), as float64.

    acc: (M, N) int32 (an int8 GEMM's accumulator) or float32 (an fp8 GEMM's); sA (M, 1) or (1, 1),
    sB (1, N) or (1, 1), float32. The same numpy float32 operations as scaled_mm (tested there)."""
    acc32 = np.asarray(acc).astype(np.float32)  # int32 -> fp32 rounds to nearest even beyond 2**24
    sa = np.asarray(sA, dtype=np.float32)
    sb = np.asarray(sB, dtype=np.float32)
    return ((acc32 * sa) * sb).astype(np.float64)


def _f32_scales(rng: np.random.Generator, shape) -> np.ndarray:
    """fp32 scales with full 24-bit mantissas, like amax / 127 or amax / 448 of real data."""
    return np.exp2(rng.uniform(-14, 2, size=shape)).astype(np.float32)


def _epilogue_cases(rng: np.random.Generator) -> list[Case]:
    f32 = np.float32
    big = np.array([[2**24 + 1, -(2**24 + 3), 2**31 - 1], [-(2**31 - 1), 16_777_217 * 3, 5]], dtype=np.int32)
    cases = [
        Case(
            (np.array([[1, 2], [3, 4]], dtype=np.int32), np.array([[2.0]], f32), np.array([[0.5]], f32)),
            label="per-tensor scales",
        ),
        Case(
            (big, np.array([[1.0], [1.0]], f32), np.array([[1.0, 1.0, 1.0]], f32)),
            label="int32 values beyond 2**24: the fp32 conversion rounds",
        ),
        Case(
            (big, np.array([[0.1], [3.0]], f32), np.array([[0.7, 1.0, 0.01]], f32)),
            label="int32 beyond 2**24, rows and columns scaled",
        ),
        Case(
            (np.array([[1.0, -3.0, 0.0]], f32), np.array([[0.1]], f32), np.array([[0.3, 0.3, 7.0]], f32)),
            label="fp32 accumulator, scales that are not powers of two",
        ),
        Case(
            (
                np.arange(12, dtype=np.int32).reshape(3, 4) - 6,
                np.array([[1.0], [2.0], [4.0]], f32),
                np.array([[1.0]], f32),
            ),
            label="per-row scales of A only",
        ),
        Case(
            (
                np.arange(9, dtype=np.float32).reshape(3, 3) * f32(1.1),
                np.array([[3.0], [0.2], [1.5]], f32),
                np.array([[0.25, 3.3, 1.7]], f32),
            ),
            label="a square accumulator (rows and columns could be swapped)",
        ),
    ]
    for i in range(80):
        M, N = int(rng.integers(1, 7)), int(rng.integers(1, 7))
        if rng.random() < 0.25:
            N = M  # square: a transposed scale broadcasts and must fail on its values
        if i % 2 == 0:  # an int8 GEMM's accumulator: magnitudes up to int32's range, often past 2**24
            acc = rng.choice([-1, 1], size=(M, N)) * np.floor(np.exp2(rng.uniform(0, 31, size=(M, N))) - 1)
            acc = acc.astype(np.int32)
        else:  # an fp8 GEMM's fp32 accumulator
            acc = (rng.standard_normal((M, N)) * np.exp2(rng.uniform(-10, 20, size=(M, N)))).astype(np.float32)
        sA = _f32_scales(rng, (M, 1) if rng.random() < 0.8 else (1, 1))
        sB = _f32_scales(rng, (1, N) if rng.random() < 0.8 else (1, 1))
        cases.append(Case((acc, sA, sB)))
    return cases


# ------------------------------------------------------------------ 3. predict, then measure

#: Every case's measured SQNRs lie at least this far from its threshold (dB): a noise-model prediction
#: decides each case.
MARGIN_DB = 2.0

GRANULARITIES = (
    ("per-tensor", (None, None)),
    ("per-row", (1, None)),
    ("1x128", (1, 128)),
    ("per-column", (None, 1)),
    ("1x32", (1, 32)),
    ("1x8", (1, 8)),
)


def int8_sqnr_db(x: np.ndarray, block) -> float:
    """The SQNR (dB) of x after the engine's int8 quantization with fp32 scales per ``block``."""
    recipe = Recipe("int8", tuple(block))
    q, scales = quantize(x, recipe)
    return sqnr_db(dequantize(q, scales, recipe), x)


def coarsest_granularity_ref(x: np.ndarray, granularities: list, threshold_db: float):
    """The name of the first (coarsest) granularity in the list whose int8 SQNR on x is at least
    threshold_db, or None."""
    for name, block in granularities:
        if int8_sqnr_db(x, block) >= threshold_db:
            return name
    return None


def activations(rng: np.random.Generator, M: int, K: int, n_outliers: int, gain: float) -> np.ndarray:
    """Activation-like data (M tokens, K channels): standard normal, with ``n_outliers`` channels
    (columns) ``gain`` times larger (LLM.int8()'s outlier features)."""
    x = rng.standard_normal((M, K))
    cols = rng.choice(K, size=n_outliers, replace=False)
    x[:, cols] *= gain
    return x


def by_scale_count(x: np.ndarray, granularities: list) -> list:
    """The granularities sorted by how many scales they store for x, fewest first (a stable sort:
    equal counts keep their order)."""
    M, K = x.shape

    def count(g):
        br, bc = g[1]
        return -(-M // (M if br is None else br)) * -(-K // (K if bc is None else bc))

    return sorted(granularities, key=count)


def _granularity_list(rng: np.random.Generator, K: int) -> list:
    """A list of granularities, coarsest (fewest scales) first; sometimes a subset."""
    gs = [g for g in GRANULARITIES if g[1][1] is None or g[1][1] <= K]
    if rng.random() < 0.5:
        keep = np.sort(rng.choice(len(gs), size=int(rng.integers(2, len(gs) + 1)), replace=False))
        gs = [gs[i] for i in keep]
    return [(name, tuple(block)) for name, block in gs]


def _clear_of_threshold(x, gs, threshold) -> bool:
    return all(abs(int8_sqnr_db(x, b) - threshold) >= MARGIN_DB for _, b in gs)


def _granularity_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(2026)  # the labelled cases are the same for every seed
    plain = fixed.standard_normal((32, 256))
    out1 = activations(fixed, 32, 256, 2, 20.0)
    out2 = activations(fixed, 48, 256, 3, 60.0)
    full = list(GRANULARITIES)
    cases = [
        Case((plain, by_scale_count(plain, full), 30.0), label="no outliers: per tensor is enough for 30 dB"),
        Case((out1, by_scale_count(out1, full), 28.0), label="two channels 20x larger, 28 dB"),
        Case((out1, by_scale_count(out1, full), 36.0), label="two channels 20x larger, 36 dB"),
        Case((out2, by_scale_count(out2, full), 35.0), label="three channels 60x larger, 35 dB"),
        Case((out2, by_scale_count(out2, full), 50.0), label="no int8 granularity here reaches 50 dB: None"),
        Case(
            (out1, [("per-tensor", (None, None)), ("per-row", (1, None))], 35.0),
            label="neither in a short list reaches 35 dB: None",
        ),
    ]
    for c in cases:
        assert _clear_of_threshold(c.args[0], c.args[1], c.args[2]), c.label
    n = 0
    while n < 40:
        M = int(rng.choice([16, 32, 64]))
        K = int(rng.choice([64, 128, 256]))
        gain = float(rng.choice([1.0, 10.0, 20.0, 50.0, 100.0], p=[0.1, 0.2, 0.3, 0.2, 0.2]))
        x = activations(rng, M, K, int(rng.integers(1, 5)), gain)
        if rng.random() < 0.2:  # outlier tokens (rows) instead of channels
            x = x.T.copy()
        gs = by_scale_count(x, _granularity_list(rng, x.shape[1]))
        threshold = float(np.round(rng.uniform(22.0, 48.0), 1))
        if not _clear_of_threshold(x, gs, threshold):
            continue
        cases.append(Case((x, gs, threshold)))
        n += 1
    return cases


EXERCISES = [
    Exercise("ex06.quantize_blocks", "Per-block quantization", 4, quantize_blocks_ref, _quantize_cases),
    Exercise("ex06.epilogue", "The epilogue", 3, epilogue_ref, _epilogue_cases),
    Exercise(
        "ex06.coarsest_granularity",
        "Predict the granularity that reaches an SQNR",
        4,
        coarsest_granularity_ref,
        _granularity_cases,
    ),
]
