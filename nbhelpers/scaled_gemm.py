"""Reference scaled GEMMs (chapters 06, 07): C ~ (qA * sA) @ (qB * sB) with int8 or fp8 operands.

One scale convention: ``x ~ q * scale``. The functions take the quantized operands and their
scales directly (quantizing is the ``scaling`` engine's job, not this module's).

* :func:`int8_matmul`: the exact int8 x int8 -> int32 product (the oracle is ``torch._int_mm``).
* :func:`scaled_mm`: scales constant along K (per tensor, per row of A, per column of B), applied
  once to the accumulator in the epilogue: C = diag(sA) (qA qB) diag(sB).
* :func:`blockwise_scaled_mm`: scales that vary along K (1 x block_k tiles of A, block_k x
  block_n blocks of B, DeepSeek-V3's recipe); each K-block's partial product is scaled, then
  added into an fp32 accumulator. The blocks and the element formats are the operands'
  recipes (:class:`~nbhelpers.recipes.Recipe`), the ones :func:`nbhelpers.scaling.quantize`
  quantized them by: they are said once, not again as numbers.
* :func:`fp8_tensor_core_mm`: the same products through the tensor-core model of
  :mod:`nbhelpers.tensor_cores` with a narrow (about 14-bit) accumulator, promoted into fp32
  every ``promote_every`` products. :data:`FP8_TENSOR_CORES` holds the fp8 settings of the H100
  and B200 in Khattak & Mikaitis' published models, each runnable through it.

The arithmetic, step by step (every fp32 operation is an IEEE fp32 operation, nearest-even,
done in numpy float32):

1. **Products** of two fp8 values (or two int8 values) are exact: at most 8 significant bits
   (int8) or 4 x 4 (e4m3fn) bits, held exactly in float64 / int64.
2. **Accumulation over K.** int8: exactly, in integers; the result must fit int32 (else
   ``OverflowError``: int32 wraps around, so what matters is the final value, not the partial
   sums). fp8: the exact sum of the products rounded *once* to fp32 (what an accumulator with
   no rounding error would give). The sum is taken in float64, which is exact whenever all
   products are multiples of one quantum q and K * max|p| / q < 2**53: always for
   e4m3fn x e4m3fn with K < 2**17 (products are multiples of 2**-18 below 2**18); for e5m2
   operands (a wider exponent range) the float64 sum may round, by at most about
   K * 2**-53 * sum|p|, far below the fp32 rounding that follows.
   :func:`blockwise_scaled_mm` does the same per K-block.
3. **Epilogue** (constant scales): C = fl32(fl32(fl32(acc) * sA) * sB), left to right, then
   rounded to ``out_fmt`` (a second rounding for bf16, from the fp32 value, as torch's
   ``out_dtype=bfloat16`` does). Relative to the exact C, the fp32 result is within
   (1 + u)**3 - 1 (u = 2**-24) outside the subnormal range.

What torch does on this CPU build (torch 2.13.0+cpu, checked in tests/test_scaled_gemm.py):
``torch._scaled_mm`` accepts e4m3fn and e5m2 operands, fp32 scales that are singletons (per
tensor) or (M, 1) and (1, N) (rowwise), B given as (K, N) (the transpose of an (N, K) tensor
or contiguous), out_dtype fp32 or bf16. It does *not* scale in an epilogue: it multiplies each
operand by its scale in fp32 and runs an fp32 GEMM (bit-exact to ``torch.matmul(qA.float() *
sA, qB.float() * sB)``), so the order of its epilogue cannot be checked here. Our epilogue
agrees with it bit-exactly when no step rounds (power-of-two scales, sums exact in fp32) and
otherwise within the bound derived in the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .formats import FloatFormat
from .recipes import PER_COLUMN, PER_ROW, RECIPES, Recipe, get_recipe
from .rounding import round_to
from .tensor_cores import check_tensor_core_settings, max_align_bits, tensor_core_matmul
from .validation import int_in_range, positive_int, real_float64

__all__ = [
    "INT32_MAX",
    "int8_matmul",
    "scaled_mm",
    "blockwise_scaled_mm",
    "fp8_tensor_core_mm",
    "BLOCKWISE_RECIPES",
    "ROWWISE_RECIPES",
    "accumulator_align_bits",
    "DEEPSEEK_V3_ACCUMULATOR_BITS",
    "DEEPSEEK_V3_PROMOTE_EVERY",
    "Fp8TensorCore",
    "FP8_TENSOR_CORES",
]

INT32_MAX = 2**31 - 1

# DeepSeek-V3 Technical Report (2024), section 3.3.2: on H800 GPUs, fp8 GEMM accumulation keeps
# "around 14 bits"; the fix promotes partial sums to fp32 CUDA-core registers every N_C = 128
# elements (4 WGMMAs). These two numbers are the report's measurements; everything else in
# fp8_tensor_core_mm (truncating alignment, group size, toward-zero rounding) is this course's model.
DEEPSEEK_V3_ACCUMULATOR_BITS = 14
DEEPSEEK_V3_PROMOTE_EVERY = 128

#: the recipes of A and B in DeepSeek-V3's fp8 GEMM: A in 1 x 128 tiles, B in 128 x 128 blocks,
#: e4m3 elements, fp32 scales (the default of :func:`blockwise_scaled_mm`)
BLOCKWISE_RECIPES = (RECIPES["fp8 e4m3 1x128"], RECIPES["fp8 e4m3 128x128"])
#: a scale per row of A and per column of B, e4m3 elements (the default of :func:`fp8_tensor_core_mm`)
ROWWISE_RECIPES = (
    Recipe("e4m3fn", PER_ROW, name="fp8 e4m3 per-row"),
    Recipe("e4m3fn", PER_COLUMN, name="fp8 e4m3 per-column"),
)

_FP8 = ("e4m3fn", "e5m2")
#: the MX elements narrower than fp8 (MXFP4, MXFP6): their products are exact as well
_MX_NARROW = ("e2m1fn", "e2m3fn", "e3m2fn")
_OUT = ("fp32", "bf16")
_f32 = np.float32


# ====================================================================== operands and scales


def _operand_formats(in_fmt, floats: tuple[str, ...] = _FP8) -> tuple[str, str]:
    pair = tuple(in_fmt) if isinstance(in_fmt, (tuple, list)) else (in_fmt, in_fmt)
    if len(pair) != 2:
        raise ValueError(f"in_fmt must be one format or a pair (format of qA, format of qB), got {in_fmt!r}")
    names = []
    for f in pair:
        name = f.name if isinstance(f, FloatFormat) else f
        if name not in ("int8",) + floats:
            accepted = ", ".join(repr(n) for n in ("int8",) + floats)
            raise ValueError(f"in_fmt must be one of {accepted} (or a pair of the float ones), got {f!r}")
        names.append(str(name))
    if ("int8" in names) and names[0] != names[1]:
        raise ValueError(f"int8 operands multiply int8 operands only, got in_fmt={in_fmt!r}")
    return names[0], names[1]


def _check_operand(q, fmt: str, what: str) -> np.ndarray:
    q = real_float64(q)
    if q.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array, got shape {q.shape}")
    if not np.isfinite(q).all():
        raise ValueError(f"{what} holds inf or NaN: quantized operands must be finite")
    if fmt == "int8":
        if (q != np.round(q)).any() or (q < -128).any() or (q > 127).any():
            raise ValueError(
                f"{what} must hold int8 values (integers in [-128, 127]); "
                f"got values in [{q.min()}, {q.max()}]"
                f"{'' if (q == np.round(q)).all() else ', not all integers'}"
            )
    else:
        off = round_to(q, fmt) != q
        if off.any():
            bad = q[off].flat[0]
            raise ValueError(f"{what} is not on the {fmt} grid (e.g. {bad!r}): quantize it first")
    return q


def _check_pair(qA, qB, in_fmt, floats: tuple[str, ...] = _FP8):
    fa, fb = _operand_formats(in_fmt, floats)
    A = _check_operand(qA, fa, "qA")
    B = _check_operand(qB, fb, "qB")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"qA (M, K) and qB (K, N) must agree in K; got qA {A.shape} and qB {B.shape}")
    return A, B, fa


def _check_scale(s, allowed: list[tuple[int, int]], what: str, meaning: str) -> np.ndarray:
    s = real_float64(s)
    if s.ndim != 2 or s.shape not in allowed:
        want = " or ".join(str(a) for a in allowed)
        raise ValueError(f"{what} must have shape {want} ({meaning}), got {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError(f"{what} holds inf or NaN: scales must be finite")
    s32 = s.astype(_f32)
    if (s32.astype(np.float64) != s).any():
        raise ValueError(f"{what} must hold fp32 values (round it with round_to(s, 'fp32') first)")
    return s32


def _out_fmt(out_fmt) -> str:
    name = out_fmt.name if isinstance(out_fmt, FloatFormat) else out_fmt
    if name not in _OUT:
        raise ValueError(f"out_fmt must be 'fp32' or 'bf16', got {out_fmt!r}")
    return name


def _finish(c32: np.ndarray, out: str) -> np.ndarray:
    c = c32.astype(np.float64)
    return c if out == "fp32" else round_to(c, "bf16")


def _exact_sum_to_fp32(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """(M, K) @ (K, N) of exact products, summed in float64 (exact for the formats above, see the
    module docstring), rounded once to fp32 (nearest-even)."""
    return (A @ B).astype(_f32)


# ====================================================================== int8


def int8_matmul(qA, qB) -> np.ndarray:
    """The exact int8 x int8 product accumulated in int32: (M, K) @ (K, N) -> (M, N) int32.

    Raises OverflowError when an exact result does not fit int32 (|acc| > 2**31 - 1). int32
    arithmetic wraps around, so partial sums that overflow and come back give the right answer;
    only the final value matters. The worst case 127**2 * K (or 128**2 * K) overflows beyond
    K = 133,144 (131,071).
    """
    A, B, _ = _check_pair(qA, qB, "int8")
    acc = A.astype(np.int64) @ B.astype(np.int64)
    big = np.abs(acc) > INT32_MAX
    if big.any():
        i, j = np.argwhere(big)[0]
        K = A.shape[1]
        raise OverflowError(
            f"int32 accumulator overflow: output ({i}, {j}) is {int(acc[i, j])}, beyond 2**31 - 1; "
            f"with K = {K} the worst case is 128**2 * K = {128**2 * K}"
        )
    return acc.astype(np.int32)


# ====================================================================== scales constant along K


def scaled_mm(
    qA,
    qB,
    sA,
    sB,
    out_fmt: FloatFormat | str = "fp32",
    in_fmt: FloatFormat | str | tuple | None = None,
    recipes: tuple | None = None,
) -> np.ndarray:
    """C ~ diag(sA) (qA qB) diag(sB) with the scales applied in the epilogue; (M, N) float64.

    qA (M, K), qB (K, N): int8 integers or fp8 values. What they hold is said once, either by
    ``recipes``, the pair of recipes (or names in :data:`~nbhelpers.recipes.RECIPES`) that A and B
    were quantized by, as in :func:`blockwise_scaled_mm` (per tensor or per row of A, per tensor or
    per column of B: scales constant along K), or by ``in_fmt``: "int8", "e4m3fn", "e5m2", or a
    pair for qA and qB (default "e4m3fn"). sA: (1, 1) or (M, 1); sB: (1, 1) or (1, N); fp32
    values. int8: exact int32 accumulation (:func:`int8_matmul`, OverflowError past int32). fp8:
    exact products, their exact sum rounded once to fp32. Epilogue in fp32:
    fl32(fl32(acc * sA) * sB), then rounded to ``out_fmt`` ("fp32" or "bf16").
    """
    if recipes is not None:
        if in_fmt is not None:
            raise ValueError("give recipes or in_fmt, not both: the recipes say the element formats")
        rA, rB = _recipe_pair(recipes)
        if not _constant_along_k(rA, rB):
            raise ValueError(
                f"scaled_mm applies the scales in the epilogue, so they must be constant along K (A per tensor "
                f"or per row, B per tensor or per column); recipes ({rA}, {rB}) have blocks {rA.block} and "
                f"{rB.block}: use blockwise_scaled_mm"
            )
        in_fmt = (rA.element, rB.element)
    elif in_fmt is None:
        in_fmt = "e4m3fn"
    A, B, fa = _check_pair(qA, qB, in_fmt)
    M, K = A.shape
    N = B.shape[1]
    out = _out_fmt(out_fmt)
    sa = _check_scale(sA, [(1, 1), (M, 1)], "sA", "per tensor or per row of A")
    sb = _check_scale(sB, [(1, 1), (1, N)], "sB", "per tensor or per column of B")
    if fa == "int8":
        acc32 = int8_matmul(A, B).astype(_f32)  # int32 -> fp32 rounds beyond 2**24
    else:
        acc32 = _exact_sum_to_fp32(A, B)
    return _finish((acc32 * sa) * sb, out)


# ====================================================================== scales varying along K


def _k_blocks(K: int, block_k: int) -> list[tuple[int, int]]:
    return [(k0, min(k0 + block_k, K)) for k0 in range(0, K, block_k)]


def _recipe_pair(recipes) -> tuple[Recipe, Recipe]:
    if not isinstance(recipes, (tuple, list)) or len(recipes) != 2:
        raise ValueError(f"recipes must be a pair (recipe of A, recipe of B), got {recipes!r}")
    return get_recipe(recipes[0]), get_recipe(recipes[1])


def _constant_along_k(rA: Recipe, rB: Recipe) -> bool:
    """Whether the scales of A and B are constant along K (per tensor, per row of A, per column of B)."""
    return rA.block[1] is None and rB.block[0] is None


def _k_blocks_of(rA: Recipe, rB: Recipe) -> tuple[int, int]:
    """(block_k, block_n) of a GEMM whose scales vary along K: A quantized in 1 x block_k tiles,
    B (K, N) in block_k x block_n blocks (block_n 1: a scale per K-block and column)."""
    rows_a, bk = rA.block
    bk_b, bn = rB.block
    if rows_a != 1 or bk is None:
        raise ValueError(f"the recipe of A must have 1 x block_k tiles, block (1, block_k); got {rA.block} ({rA})")
    if bk_b != bk or bn is None:
        raise ValueError(
            f"the recipe of B must have block_k x block_n blocks with A's block_k, block ({bk}, block_n); "
            f"got {rB.block} ({rB})"
        )
    return bk, bn


def _block_scales(sA, sB, M: int, N: int, K: int, block_k: int, block_n: int):
    """sA (M, nk) and sB as (nk, N) (expanded from (nk, ceil(N / block_n)) if given so)."""
    nk = math.ceil(K / block_k)
    nn = math.ceil(N / block_n)
    sa = _check_scale(sA, [(M, nk)], "sA", f"one scale per row and per K-block of {block_k}")
    sb = _check_scale(
        sB,
        list(dict.fromkeys([(nk, nn), (nk, N)])),
        "sB",
        f"one scale per K-block of {block_k} and per block of {block_n} columns, or per column",
    )
    if sb.shape != (nk, N):
        sb = np.repeat(sb, block_n, axis=1)[:, :N]
    return sa, sb


def blockwise_scaled_mm(
    qA, qB, sA, sB, recipes: tuple = BLOCKWISE_RECIPES, out_fmt: FloatFormat | str = "fp32"
) -> np.ndarray:
    """C ~ sum over K-blocks b of diag(sA[:, b]) (qA_b qB_b) diag(sB[b, :]); (M, N) float64.

    ``recipes``: the recipes (or their names in :data:`~nbhelpers.recipes.RECIPES`) that A and B
    were quantized by, A's with 1 x block_k tiles, B's with block_k x block_n blocks (default
    :data:`BLOCKWISE_RECIPES`, 1 x 128 and 128 x 128 in e4m3). qA (M, K) and qB (K, N) hold values
    of the recipes' elements (int8, e4m3fn or e5m2, as ``in_fmt`` of :func:`scaled_mm`); the last
    K-block may be shorter. sA (M, ceil(K / block_k)): one scale per tile of A; sB
    (ceil(K / block_k), ceil(N / block_n)) per block of B, or (ceil(K / block_k), N). For each
    K-block: the exact partial product rounded once to fp32 (int8: exact, then to fp32), scaled
    in fp32 as fl32(fl32(p * sA) * sB), and added into an fp32 accumulator (nearest-even),
    K-blocks in order. Then rounded to ``out_fmt``.
    """
    rA, rB = _recipe_pair(recipes)
    block_k, block_n = _k_blocks_of(rA, rB)
    if not {rA.element, rB.element} <= {"int8", *_FP8, *_MX_NARROW}:
        raise ValueError(
            f"blockwise_scaled_mm multiplies int8, e4m3fn, e5m2 or MX elements (e2m1fn, e2m3fn, e3m2fn); "
            f"the recipes hold '{rA.element}' and '{rB.element}'"
        )
    A, B, fa = _check_pair(qA, qB, (rA.element, rB.element), _FP8 + _MX_NARROW)
    M, K = A.shape
    N = B.shape[1]
    out = _out_fmt(out_fmt)
    sa, sb = _block_scales(sA, sB, M, N, K, block_k, block_n)
    acc = np.zeros((M, N), dtype=_f32)
    for b, (k0, k1) in enumerate(_k_blocks(K, block_k)):
        if fa == "int8":  # exact in int32 (OverflowError past it), then to fp32
            partial = int8_matmul(A[:, k0:k1], B[k0:k1]).astype(_f32)
        else:
            partial = _exact_sum_to_fp32(A[:, k0:k1], B[k0:k1])
        acc = acc + (partial * sa[:, b : b + 1]) * sb[b : b + 1, :]
    return _finish(acc, out)


# ====================================================================== fp8 tensor-core accumulator


def accumulator_align_bits(accumulator_bits: int) -> int:
    """The tensor-core model's ``align_bits`` for an accumulator that keeps ``accumulator_bits``
    significant bits, counting the leading bit: accumulator_bits - 1. The model keeps
    ``align_bits`` bits below the leading bit (23 is fp32's 24-bit significand), so DeepSeek-V3's
    "around 14 bits" becomes align_bits = 13: a product 2**14 times smaller than the largest
    term of its group (the running sum included) vanishes."""
    return int_in_range("accumulator_bits", accumulator_bits, 2, meaning="the leading bit and one more") - 1


def fp8_tensor_core_mm(
    qA,
    qB,
    sA,
    sB,
    accumulator_bits: int = DEEPSEEK_V3_ACCUMULATOR_BITS,
    promote_every: int | None = DEEPSEEK_V3_PROMOTE_EVERY,
    group: int = 32,
    recipes: tuple = ROWWISE_RECIPES,
    out_fmt: FloatFormat | str = "fp32",
    group_acc: FloatFormat | str = "fp32",
) -> np.ndarray:
    """An fp8 GEMM through the tensor-core model with a narrow accumulator; (M, N) float64.

    qA (M, K), qB (K, N): fp8 values. The products go through
    :func:`nbhelpers.tensor_cores.tensor_core_matmul` in fused groups of ``group`` (32: the H100
    model of Khattak & Mikaitis joins two 16-product vectors for fp8), each group aligned to its
    largest term and truncated to ``accumulator_bits`` significant bits
    (:func:`accumulator_align_bits`), the group sum rounded toward zero into ``group_acc`` (fp32
    by default; ``"e8m13"``, 14 significant bits, is what Khattak & Mikaitis' H100 fp8 model
    rounds each group's sum to: :data:`FP8_TENSOR_CORES`). Every
    ``promote_every`` products (a multiple of ``group``; None: never) the partial sum is added into
    an fp32 accumulator (nearest-even) and restarted from zero.

    Scales, as the operands' ``recipes`` say (a pair, as in :func:`blockwise_scaled_mm`; their
    elements, fp8 formats, are those of qA and qB): constant along K (the default
    :data:`ROWWISE_RECIPES`, or per tensor; sA (1, 1) or (M, 1), sB (1, 1) or (1, N)) they are
    applied in the epilogue as in :func:`scaled_mm`. Per K-block (1 x block_k tiles of A,
    block_k x block_n blocks of B; shapes as in :func:`blockwise_scaled_mm`) they are applied at
    promotion: ``promote_every`` must divide block_k; each K-block's promoted fp32 partial is
    scaled fl32(fl32(p * sA) * sB) and added into the fp32 result.

    Measured facts: about 14 retained bits on H800 and N_C = 128 (DeepSeek-V3 technical report,
    2024). The course's model: truncating alignment of each fused group, the group size,
    toward-zero rounding, and the mapping of "14 bits" to align_bits = 13.
    """
    align_bits = accumulator_align_bits(accumulator_bits)
    group = positive_int("group", group)
    if align_bits > max_align_bits(group):
        raise ValueError(
            f"accumulator_bits={accumulator_bits} is too large for group={group}: at most {max_align_bits(group) + 1}"
        )
    check_tensor_core_settings(group, align_bits, promote_every)
    rA, rB = _recipe_pair(recipes)
    in_fmt = (rA.element, rB.element)
    if not set(in_fmt) <= set(_FP8):
        raise ValueError(
            f"fp8_tensor_core_mm takes fp8 operands ('e4m3fn' or 'e5m2'), got recipes of {rA.element!r} and "
            f"{rB.element!r}; for int8 use scaled_mm"
        )
    block_k, block_n = (None, None) if _constant_along_k(rA, rB) else _k_blocks_of(rA, rB)
    A, B, _ = _check_pair(qA, qB, in_fmt)
    M, K = A.shape
    N = B.shape[1]
    out = _out_fmt(out_fmt)

    def tc(a, b):
        return tensor_core_matmul(
            a,
            b,
            in_fmt="fp32",
            group=group,
            align_bits=align_bits,
            acc=group_acc,
            rounding="toward_zero",
            promote_every=promote_every,
        ).astype(_f32)

    if block_k is None:
        sa = _check_scale(sA, [(1, 1), (M, 1)], "sA", "per tensor or per row of A")
        sb = _check_scale(sB, [(1, 1), (1, N)], "sB", "per tensor or per column of B")
        return _finish((tc(A, B) * sa) * sb, out)
    if promote_every is None or block_k % promote_every:
        raise ValueError(
            f"scales per K-block of {block_k} are applied at promotion: promote_every must "
            f"divide block_k, got promote_every={promote_every!r}"
        )
    sa, sb = _block_scales(sA, sB, M, N, K, block_k, block_n)
    acc = np.zeros((M, N), dtype=_f32)
    for b, (k0, k1) in enumerate(_k_blocks(K, block_k)):
        acc = acc + (tc(A[:, k0:k1], B[k0:k1]) * sa[:, b : b + 1]) * sb[b : b + 1, :]
    return _finish(acc, out)


_KM_MODELS = "north-numerical-computing/MATLAB-tensor-core, commit b12b5a70 (2026-08-19)"


@dataclass(frozen=True)
class Fp8TensorCore:
    """One GPU's fp8 tensor-core settings in Khattak & Mikaitis' published models, in the terms of
    :func:`fp8_tensor_core_mm`: ``group`` products per fused group, ``accumulator_bits``
    significant bits kept in the alignment (the leading bit and ``23 + neab`` below it, neab
    being the models' "extra alignment bits"), and ``group_acc``, the format each group's sum is
    rounded into, toward zero. ``source`` names the files and lines; ``note`` what is left out."""

    gpu: str
    group: int
    accumulator_bits: int
    group_acc: str
    source: str
    note: str = ""

    def matmul(self, qA, qB, sA, sB, promote_every: int | None = None, recipes: tuple = ROWWISE_RECIPES):
        """:func:`fp8_tensor_core_mm` with these settings; never promoted unless asked. (M, N)."""
        return fp8_tensor_core_mm(
            qA,
            qB,
            sA,
            sB,
            accumulator_bits=self.accumulator_bits,
            promote_every=promote_every,
            group=self.group,
            recipes=recipes,
            group_acc=self.group_acc,
        )


#: The fp8 (e4m3 / e5m2) settings of Khattak & Mikaitis' bit-accurate tensor-core models (the
#: paper: arXiv:2512.07004; the numbers: its published MATLAB models, read at the commit named).
FP8_TENSOR_CORES: dict[str, Fp8TensorCore] = {
    "H100": Fp8TensorCore(
        gpu="H100",
        group=32,
        accumulator_bits=14,
        group_acc="e8m13",
        source=(
            f"{_KM_MODELS}: models/H100TC.m sets fma = 32, neab = -10 for fp8 inputs (23 - 10 = 13 "
            "bits below the leading one); models/tools/GEMM.m cuts the output's fraction bits by "
            "the same 10 when neab < 0 (13 left), rounded 'rz'"
        ),
    ),
    "B200": Fp8TensorCore(
        gpu="B200",
        group=32,
        accumulator_bits=26,
        group_acc="fp32",
        source=(
            f"{_KM_MODELS}: models/B200TC.m sets fma = 32 for fp8 inputs and keeps its default "
            "neab = 2 (23 + 2 = 25 bits below the leading one, as in the H100's fp16 / bf16 path), "
            "output fp32, rounded 'rz'"
        ),
    ),
}
