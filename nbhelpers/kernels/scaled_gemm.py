"""Scaled fp8 GEMMs in Triton (chapter 09): the kernels of chapters 06 and 07's references.

One scale convention: ``x ~ q * scale``. Both kernels reuse :mod:`nbhelpers.kernels.gemm`'s tile
loop and grouped program order (:func:`~nbhelpers.kernels.gemm.tile_of`); what is new is where
the scales go.

* :func:`scaled_matmul` (:func:`scaled_matmul_kernel`): C ~ diag(sA) (qA qB) diag(sB) with sA
  per row of A (M, 1) or per tensor (1, 1), sB per column of B (1, N) or per tensor. The scales
  are constant along K, so the K loop sums the raw fp8 products into an fp32 accumulator tile and
  the scales are applied once, in the epilogue, in the reference's order fl32(fl32(acc * sA) * sB),
  then cast to the output type. Reference: :func:`nbhelpers.scaled_gemm.scaled_mm`.
* :func:`block_scaled_matmul` (:func:`block_scaled_matmul_kernel`): sA per 1 x block_k tile of A
  (M, ceil(K / block_k)), sB per block_k x block_n block of B (ceil(K / block_k), ceil(N / block_n))
  or per block_k x 1 column slice (ceil(K / block_k), N), the blocks the operands' recipes say:
  DeepSeek-V3's 128 by default, MX's 32 (MXFP8, and MXFP4 by emulation: e2m1 values carried in
  e4m3, e8m0 scales as float32 powers of two). The scales vary along K, so they cannot wait for
  the epilogue: BLOCK_K is the K-block, one K-block is one loop step, and each step's partial product (a fresh
  ``tl.dot``) is scaled, fl32(fl32(p * sA) * sB), and added into the fp32 accumulator (chapter 07's
  promotion, in a kernel). Reference: :func:`nbhelpers.scaled_gemm.blockwise_scaled_mm`. That is
  the interpreter's order. Compiled for a GPU, the last multiply and the add are contracted into
  one fused multiply-add: the sm_90 PTX that Triton 3.7.1 generates for the update holds one
  ``mul.rn.f32`` and one ``fma.rn.f32`` per element (compiled here with ``triton.compile`` for
  ``GPUTarget("cuda", 90, 32)``), so a GPU computes fl32(acc + fl32(p * sA) * sB), one rounding
  fewer per K-block than the reference. The tests' tolerance counts both roundings, so both
  orders pass it; bit for bit, the GPU and the reference may differ in the last place.

Operands are ``torch.float8_e4m3fn`` (or both ``float8_e5m2``), scales float32, output float32 or
bfloat16: :func:`nbhelpers.kernels.operands.kernel_operand` turns what
:func:`nbhelpers.scaling.quantize` returns into them. Each launcher declares the recipes it runs
(:data:`SCALED_MATMUL_RECIPES`, :data:`BLOCK_SCALED_RECIPES`) and refuses others by name.

On a GPU the fp8 tiles go to ``tl.dot`` as fp8 (tensor cores). On Hopper, Triton lets an fp8
``tl.dot`` accumulate in the tensor core's narrow accumulator for up to ``max_num_imprecise_acc``
products before adding into fp32 (Triton's default there is unlimited); :func:`scaled_matmul`
sets it to BLOCK_K (one promotion per K step, like ``torch._scaled_mm``'s default
``use_fast_accum=False``) unless ``fast_accum=True``. The block-scaled kernel promotes every
K-block by construction.

In Triton's interpreter (no GPU) fp8 values are held as raw uint8 codes, as bf16 values are held
as uint16 codes. Measured with Triton 3.7.1 (tests/test_kernels_scaled_gemm.py): its ``tl.dot``
decodes fp8 codes to fp16 before the numpy matmul, so unlike bf16 the raw fp8 kernel is right
there; other arithmetic on fp8 codes, and other interpreter versions, need not be. The launchers
therefore do not depend on it: they upcast the fp8 operands to float32 before the launch. The
upcast is exact (every e4m3fn / e5m2 value is an fp32 value) and so is every product of two of
them (4 x 4 significant bits), so the kernel sums the same exact products in fp32. A bfloat16
output is stored as fp32 and rounded by torch (nearest-even), because the interpreter's own
fp32 -> bf16 cast truncates.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..recipes import Recipe, ScaleKind
from ..scaled_gemm import BLOCKWISE_RECIPES
from ..timing import tuning_ms
from ..validation import group_m as check_group_m
from ..validation import power_of_two, tile_sizes
from . import INTERPRETED, require_fp8_support
from .gemm import is_aligned, tile_of
from .launch_checks import FP8_DTYPES, check_scale, require_kernel_device
from .operands import RecipeSupport

__all__ = [
    "scaled_matmul_kernel",
    "scaled_matmul",
    "block_scaled_matmul_kernel",
    "block_scaled_matmul",
    "SCALE_BLOCK",
    "SCALED_MATMUL_RECIPES",
    "BLOCK_SCALED_RECIPES",
    "FP8_GPU_CONFIGS",
    "FP8_FAST_GPU_CONFIGS",
    "BLOCK_SCALED_GPU_CONFIGS",
    "FP8_INTERPRETER_CONFIG",
]

#: the K-block (and the N-block of B's scales) of the block-scaled recipe: DeepSeek-V3's 128
SCALE_BLOCK = 128

_OUT = (torch.float32, torch.bfloat16)


def _rowwise_problem(rA: Recipe, rB: Recipe) -> str | None:
    if rA.block not in ((None, None), (1, None)):
        return f"A's block {rA.block} is not per tensor (None, None) or per row (1, None)"
    if rB.block not in ((None, None), (None, 1)):
        return f"B's block {rB.block} is not per tensor (None, None) or per column (None, 1)"
    return None


def _block_scaled_problem(rA: Recipe, rB: Recipe) -> str | None:
    rows_a, bk = rA.block
    bk_b, bn = rB.block
    if rows_a != 1 or bk is None:
        return f"A's block {rA.block} is not 1 x block_k"
    try:
        power_of_two("block_k", bk, 16, 256, "one loop step per K-block, and tl.dot needs at least 16")
    except ValueError as e:
        return f"A's block {rA.block}: {e}"
    if bk_b != bk or bn is None:
        return f"B's block {rB.block} is not block_k x block_n with A's block_k, ({bk}, block_n)"
    return None


#: what :func:`scaled_matmul` runs: fp8 elements, fp32 scales constant along K
SCALED_MATMUL_RECIPES = RecipeSupport(
    "scaled_matmul",
    elements=("e4m3fn", "e5m2"),
    scales=(ScaleKind.FP32,),
    blocks="A per tensor or per row, B (K, N) per tensor or per column (scales constant along K)",
    block_problem=_rowwise_problem,
    example="nbhelpers.scaled_gemm.ROWWISE_RECIPES, e4m3 per row of A and per column of B",
)
#: what :func:`block_scaled_matmul` runs: fp8 elements, and the MX elements carried in e4m3
#: (MXFP4, MXFP6) by emulation; fp32 scales or e8m0 scales (powers of two, fp32 values); A in
#: 1 x block_k tiles, B (K, N) in block_k x block_n blocks (MX: block_k 32, block_n 1)
BLOCK_SCALED_RECIPES = RecipeSupport(
    "block_scaled_matmul",
    elements=("e4m3fn", "e5m2", "e2m1fn", "e2m3fn", "e3m2fn"),
    scales=(ScaleKind.FP32, ScaleKind.E8M0, ScaleKind.E8M0_RCEIL),
    blocks=(
        "A in 1 x block_k tiles, B (K, N) in block_k x block_n blocks, block_k a power of two from 16 to 256 "
        "(one loop step per K-block)"
    ),
    block_problem=_block_scaled_problem,
    example="recipes=('fp8 e4m3 1x128', 'fp8 e4m3 128x128'), or MXFP8 / MXFP4 of A with blocks (32, 1) of B",
)


@triton.jit
def scaled_matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    sa_ptr,
    sb_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_sa,
    stride_sb,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PRECISE_ACC: tl.constexpr,
):
    """One tile of C = diag(sA) (qA qB) diag(sB): fp32 accumulation of the fp8 products over K,
    the row scales of A and the column scales of B applied once in the epilogue. stride_sa /
    stride_sb: 0 for a per-tensor scale."""
    pid_m, pid_n = tile_of(tl.program_id(axis=0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < K - k0)
        b_mask = (offs_k[:, None] < K - k0) & (offs_n[None, :] < N)
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)
        b = tl.load(b_ptrs, mask=b_mask, other=0.0)
        if PRECISE_ACC:  # Hopper: add the tensor core's partial into fp32 after every BLOCK_K products
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # the epilogue: the scales are constant along K, so they multiply the finished sum, once
    sa = tl.load(sa_ptr + offs_m * stride_sa, mask=offs_m < M, other=0.0)
    sb = tl.load(sb_ptr + offs_n * stride_sb, mask=offs_n < N, other=0.0)
    c = (acc * sa[:, None]) * sb[None, :]
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, c.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def block_scaled_matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    sa_ptr,
    sb_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_sam,
    stride_sak,
    stride_sbk,
    stride_sbn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SCALE_BLOCK_N: tl.constexpr,
):
    """One tile of C = sum over K-blocks b of diag(sA[:, b]) (qA_b qB_b) diag(sB[b, :]).
    BLOCK_K is the scales' K-block, so step b of the loop is K-block b: its partial product is a
    fresh fp32 ``tl.dot``, scaled by its row and column scales and added into the fp32
    accumulator (promotion). Column n of C uses B's scale column n // SCALE_BLOCK_N."""
    pid_m, pid_n = tile_of(tl.program_id(axis=0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    sa_ptrs = sa_ptr + offs_m * stride_sam
    sb_ptrs = sb_ptr + (offs_n // SCALE_BLOCK_N) * stride_sbn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - kb * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        partial = tl.dot(a, b)  # this K-block alone, fp32
        sa = tl.load(sa_ptrs + kb * stride_sak, mask=offs_m < M, other=0.0)
        sb = tl.load(sb_ptrs + kb * stride_sbk, mask=offs_n < N, other=0.0)
        # the reference's fl32(fl32(partial * sa) * sb) then + acc; compiled, the second multiply
        # and the add become one FMA (see the module docstring)
        acc += (partial * sa[:, None]) * sb[None, :]
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


def _fp8_configs(rows, block_k: int = SCALE_BLOCK) -> list:
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": block_k, "GROUP_M": 8}, num_stages=st, num_warps=w)
        for bm, bn, st, w in rows
    ]


# On a GPU: BLOCK_K = 128 (one 128-byte row of an fp8 tile; the block-scaled kernel needs exactly
# the scales' K-block), large tiles with 3-4 pipeline stages for big shapes, smaller for skinny
# ones. Each list holds the configs that compile for sm_90 within 232,448 B of shared memory and
# without spilling, on aligned shapes (benchmarks/results/compile_check.json, `make gpu-compile`).
# Promotion (PRECISE_ACC) keeps a second fp32 accumulator tile live beside the tensor core's, so
# 128 x 256 over 8 warps spills there (240 B per thread) but not with fast accumulation; the
# block-scaled kernel also holds each K-block's partial product and its scales, and spills at
# 128 x 256 and 256 x 128 over 8 warps and 128 x 128 over 4.
#
# Shapes whose K or N is not a multiple of 16 would get no 16-byte loads of the fp8 operands at all
# (no asynchronous copies; every byte loaded and masked on its own) and spill in every config here
# (the compile table's 1000^3 rows); torch._scaled_mm refuses such shapes on CUDA. The launchers
# instead copy such operands into buffers padded with zeros to multiples of 16 (_aligned), so the
# kernels only ever see aligned rows, at the cost of that copy.
#: configs of the row/column-scaled fp8 GEMM with promotion (the default)
FP8_GPU_CONFIGS = _fp8_configs(
    [
        (256, 128, 3, 8),
        (128, 128, 4, 8),
        (128, 128, 3, 8),
        (64, 128, 4, 4),
        (128, 64, 4, 4),
        (64, 64, 4, 4),
    ]
)
#: with fast accumulation (no promotion), 128 x 256 over 8 warps fits too
FP8_FAST_GPU_CONFIGS = _fp8_configs([(128, 256, 3, 8)]) + FP8_GPU_CONFIGS
_BLOCK_SCALED_ROWS = [
    (128, 128, 4, 8),
    (128, 128, 3, 8),
    (64, 128, 4, 4),
    (128, 64, 4, 4),
    (64, 64, 4, 4),
]
#: the block-scaled fp8 GEMM (K-blocks of 128; other K-blocks, as MX's 32, tune over the same
#: tiles with BLOCK_K the K-block, configs not in the compile check)
BLOCK_SCALED_GPU_CONFIGS = _fp8_configs(_BLOCK_SCALED_ROWS)
#: the one configuration of the interpreter: BLOCK_K must be the scales' 128; small M, N tiles
FP8_INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": SCALE_BLOCK, "GROUP_M": 4}

# Every constexpr the launcher passes is in the key (tests/test_kernels_autotune_keys.py): with
# PRECISE_ACC, promotion and fast accumulation are different kernels, each tuned on its own
# (without it, the second would reuse the first's configuration); the same for SCALE_BLOCK_N.
# Promotion and fast accumulation also tune over different lists (one autotuner each).
_scaled_tuned = (
    {}
    if INTERPRETED
    else {
        precise: triton.autotune(configs=configs, key=["M", "N", "K", "PRECISE_ACC"], do_bench=tuning_ms)(
            scaled_matmul_kernel
        )
        for precise, configs in ((True, FP8_GPU_CONFIGS), (False, FP8_FAST_GPU_CONFIGS))
    }
)


@functools.cache
def _block_scaled_tuned(block_k: int):
    """The block-scaled kernel's autotuner for K-blocks of ``block_k`` (made when first needed)."""
    configs = BLOCK_SCALED_GPU_CONFIGS if block_k == SCALE_BLOCK else _fp8_configs(_BLOCK_SCALED_ROWS, block_k)
    return triton.autotune(configs=configs, key=["M", "N", "K", "SCALE_BLOCK_N"], do_bench=tuning_ms)(
        block_scaled_matmul_kernel
    )


def _check_operands(qa, qb, out_dtype):
    for name, t in (("qa", qa), ("qb", qb)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in FP8_DTYPES:
            raise TypeError(
                f"{name} has dtype {t.dtype}; accepted: torch.float8_e4m3fn, torch.float8_e5m2 (quantize first)"
            )
    if qa.dtype != qb.dtype:
        raise TypeError(f"qa and qb must have the same fp8 dtype, got {qa.dtype} and {qb.dtype}")
    if qa.shape[1] != qb.shape[0]:
        raise ValueError(
            f"inner dimensions differ: qa is {tuple(qa.shape)}, qb is {tuple(qb.shape)} (need qa (M, K), qb (K, N))"
        )
    if qa.device != qb.device:
        raise ValueError(f"qa and qb are on different devices: {qa.device} and {qb.device}")
    require_kernel_device(qa.device)
    if out_dtype not in _OUT:
        raise TypeError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype!r}")
    require_fp8_support(qa.dtype, qa.device)  # an A100 cannot compile e4m3: a sentence, not a traceback


#: the fp8 operands' contiguous dimensions are padded to a multiple of this many elements
ALIGN = 16


def _padded_columns(t: torch.Tensor, cols: int, fill: float) -> torch.Tensor:
    out = torch.full((t.shape[0], cols), fill, dtype=t.dtype, device=t.device)
    out[:, : t.shape[1]] = t
    return out


def _aligned(qa: torch.Tensor, qb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The operands as the kernel gets them: as they are when K and N are multiples of
    :data:`ALIGN` and the strides and base addresses allow 16-byte loads; otherwise copied into
    zero-padded (M, K') and (K', N') buffers, K' and N' the next multiples of 16. The zeros add
    exact zeros to every sum (and columns the launcher cuts off): the result is the same. Without
    it the compiler cannot vectorize the fp8 loads, and every config spills (chapter 09, the
    compile table's 1000^3 rows; torch._scaled_mm refuses such shapes on CUDA instead)."""
    M, K = qa.shape
    N = qb.shape[1]
    k16, n16 = -(-K // ALIGN) * ALIGN, -(-N // ALIGN) * ALIGN
    if (k16, n16) == (K, N) and is_aligned((qa, qb), (*qa.stride(), *qb.stride())):
        return qa, qb
    a = torch.zeros((M, k16), dtype=qa.dtype, device=qa.device)
    b = torch.zeros((k16, n16), dtype=qb.dtype, device=qb.device)
    a[:, :K] = qa
    b[:K, :N] = qb
    return a, b


def _prepare(qa, qb, out_dtype):
    """The operands the kernel gets (fp32 upcast in the interpreter, exact) and the output tensor
    (fp32 storage for a bf16 output in the interpreter, rounded by torch afterwards)."""
    M, K = qa.shape
    N = qb.shape[1]
    if INTERPRETED:
        qa, qb = qa.float(), qb.float()
    store = torch.float32 if INTERPRETED else out_dtype
    return qa, qb, torch.empty((M, N), dtype=store, device=qa.device)


def _block(block):
    return None if block is None else tile_sizes(block, ("BLOCK_M", "BLOCK_N"))


def _launch(kernel, tuned, args, M, N, block, group_m, block_k=SCALE_BLOCK, **constexprs):
    if block is None and not INTERPRETED:
        tuned[lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)](*args, **constexprs)
        return
    cfg = (
        dict(FP8_INTERPRETER_CONFIG, BLOCK_K=block_k)
        if block is None
        else {"BLOCK_M": block[0], "BLOCK_N": block[1], "BLOCK_K": block_k, "GROUP_M": group_m}
    )
    kernel[(triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)](*args, **cfg, **constexprs)


def scaled_matmul(
    qa: torch.Tensor,
    qb: torch.Tensor,
    sa: torch.Tensor,
    sb: torch.Tensor,
    out_dtype: torch.dtype = torch.float32,
    block: tuple[int, int] | None = None,
    group_m: int = 8,
    fast_accum: bool = False,
    recipes: tuple[Recipe | str, Recipe | str] | None = None,
) -> torch.Tensor:
    """C ~ diag(sa) (qa @ qb) diag(sb) by :func:`scaled_matmul_kernel`: (M, N) of ``out_dtype``.

    qa (M, K), qb (K, N): fp8 tensors (both e4m3fn or both e5m2), any strides. sa: float32
    (M, 1) per row of A or (1, 1); sb: float32 (1, N) per column of B or (1, 1). out_dtype:
    float32 or bfloat16. block: (BLOCK_M, BLOCK_N) with BLOCK_K = 128, or None: autotuned over
    :data:`FP8_GPU_CONFIGS` (with ``fast_accum``: :data:`FP8_FAST_GPU_CONFIGS`) on a GPU,
    :data:`FP8_INTERPRETER_CONFIG` in the interpreter.
    fast_accum: on Hopper, let the tensor core accumulate the whole K loop in its narrow
    accumulator (faster, less accurate; chapter 07); the default promotes to fp32 every BLOCK_K.
    recipes: the recipes (A, B) the operands were quantized by, checked against
    :data:`SCALED_MATMUL_RECIPES` and the operands' dtypes (:func:`~nbhelpers.kernels.operands.kernel_operand`
    makes the operands); None: only the dtypes and the scales' shapes are checked.
    The reference is :func:`nbhelpers.scaled_gemm.scaled_mm`.
    """
    rAB = None if recipes is None else SCALED_MATMUL_RECIPES.check(recipes)
    _check_operands(qa, qb, out_dtype)
    if rAB is not None:
        SCALED_MATMUL_RECIPES.check_dtypes(*rAB, qa, qb)
    M, K = qa.shape
    N = qb.shape[1]
    sa = check_scale(sa, [(M, 1), (1, 1)], "sa", "per row of A or per tensor", qa.device)
    sb = check_scale(sb, [(1, N), (1, 1)], "sb", "per column of B or per tensor", qa.device)
    block, group_m = _block(block), check_group_m(group_m)
    n_out = N
    qa, qb = _aligned(qa, qb)
    K, N = qa.shape[1], qb.shape[1]
    if N != n_out and sb.shape[1] != 1:
        sb = _padded_columns(sb, N, 1.0)
    a, b, c = _prepare(qa, qb, out_dtype)
    if M and N:
        sa_e, sb_e = sa.expand(M, 1), sb.expand(1, N)  # stride 0 along a per-tensor scale
        args = (
            a,
            b,
            c,
            sa_e,
            sb_e,
            M,
            N,
            K,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
            sa_e.stride(0),
            sb_e.stride(1),
        )
        _launch(
            scaled_matmul_kernel,
            _scaled_tuned.get(not fast_accum),
            args,
            M,
            N,
            block,
            group_m,
            PRECISE_ACC=not fast_accum,
        )
    return (c if N == n_out else c[:, :n_out].contiguous()).to(out_dtype)


def block_scaled_matmul(
    qa: torch.Tensor,
    qb: torch.Tensor,
    sa: torch.Tensor,
    sb: torch.Tensor,
    out_dtype: torch.dtype = torch.float32,
    block: tuple[int, int] | None = None,
    group_m: int = 8,
    recipes: tuple[Recipe | str, Recipe | str] = BLOCKWISE_RECIPES,
) -> torch.Tensor:
    """C ~ sum over K-blocks b of diag(sa[:, b]) (qa_b @ qb_b) diag(sb[b, :]) by
    :func:`block_scaled_matmul_kernel`: (M, N) of ``out_dtype``.

    recipes: the recipes (A, B) the operands were quantized by (names of
    :data:`~nbhelpers.recipes.RECIPES` or Recipes), A in 1 x block_k tiles, B (K, N) in block_k x
    block_n blocks; the default :data:`~nbhelpers.scaled_gemm.BLOCKWISE_RECIPES` is DeepSeek-V3's
    1 x 128 and 128 x 128 in e4m3. What runs is :data:`BLOCK_SCALED_RECIPES`: fp8 elements, MX
    elements (MXFP4's e2m1fn, MXFP6's) carried in float8_e4m3fn, fp32 or e8m0 scales (powers of
    two, as float32); NVFP4's two-level scales do not (a ValueError says so).
    qa (M, K), qb (K, N): tensors of the recipes' carrier dtype
    (:func:`~nbhelpers.kernels.operands.kernel_operand` makes them), any strides; the K-blocks are
    block_k long (the last may be shorter). sa: float32 (M, ceil(K / block_k)), one scale per tile
    of A. sb: float32 (ceil(K / block_k), ceil(N / block_n)), one per block of B, or
    (ceil(K / block_k), N). out_dtype, block, group_m: as in :func:`scaled_matmul` (block None
    tunes over :data:`BLOCK_SCALED_GPU_CONFIGS` on a GPU). The reference is
    :func:`nbhelpers.scaled_gemm.blockwise_scaled_mm` with the same recipes.
    """
    rA, rB = BLOCK_SCALED_RECIPES.check(recipes)
    block_k, block_n = rA.block[1], rB.block[1]
    _check_operands(qa, qb, out_dtype)
    BLOCK_SCALED_RECIPES.check_dtypes(rA, rB, qa, qb)
    M, K = qa.shape
    N = qb.shape[1]
    nk, nn = triton.cdiv(K, block_k), triton.cdiv(N, block_n)
    sa = check_scale(sa, [(M, nk)], "sa", f"one scale per row and per K-block of {block_k}", qa.device)
    sb = check_scale(
        sb,
        [(nk, nn), (nk, N)],
        "sb",
        f"one scale per {block_k} x {block_n} block of B, or per K-block and column",
        qa.device,
    )
    block, group_m = _block(block), check_group_m(group_m)
    per_block_n = tuple(sb.shape) == (nk, nn) and nn != N  # else one scale per column
    n_out = N
    qa, qb = _aligned(qa, qb)  # K-blocks stay the same: block_k is a multiple of 16
    K, N = qa.shape[1], qb.shape[1]
    if N != n_out:  # the padded columns' scales (their products are zeros; cut off below)
        sb = _padded_columns(sb, -(-N // block_n) if per_block_n else N, 1.0)
    a, b, c = _prepare(qa, qb, out_dtype)
    if M and N:
        scale_block_n = block_n if per_block_n else 1
        args = (
            a,
            b,
            c,
            sa,
            sb,
            M,
            N,
            K,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
            sa.stride(0),
            sa.stride(1),
            sb.stride(0),
            sb.stride(1),
        )
        tuned = None if INTERPRETED else _block_scaled_tuned(block_k)
        _launch(
            block_scaled_matmul_kernel, tuned, args, M, N, block, group_m, block_k=block_k, SCALE_BLOCK_N=scale_block_n
        )
    return (c if N == n_out else c[:, :n_out].contiguous()).to(out_dtype)
