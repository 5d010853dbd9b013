"""A W4A16 GEMM in Triton (chapter 12): 16-bit activations times int4 weights with group scales.

``C = A @ dequant(Wq)`` with A (M, K) bfloat16 or float16 and the weights W (K, N) stored as 4-bit
codes, two per byte, with one scale per group of ``group`` consecutive rows along K and per column
(and, optionally, one zero point per group and column). One scale convention, the course's:
``w ~ q * scale`` for signed codes (no zero points), ``w ~ (q - zero) * scale`` for unsigned codes
with zero points. :func:`w4a16_ref` is the float64 reference; :func:`w4a16_matmul` launches
:func:`w4a16_kernel`.

**Packing** (:func:`pack_int4`, :func:`unpack_int4`): codes (K, N) become a uint8 tensor
(ceil(K / 2), N); byte [i, n] holds code [2i, n] in its low nibble (bits 0-3) and code [2i + 1, n]
in its high nibble (bits 4-7). Two consecutive K rows share a byte, so a column's codes stay
contiguous in K pairs and a row of bytes is contiguous along N (the loads of a tile are coalesced
along N). Signed codes (-8 to 7) are stored as two's complement nibbles, unsigned ones (0 to 15) as
they are; an odd K gets a zero high nibble in its last row of bytes. A linear layer's weight
``W_lin`` (N, K), ``y = x @ W_lin.T``, is packed as ``pack_int4(codes_lin.T)``.

**The kernel**: one program computes a BLOCK_M x BLOCK_N tile of C and walks K in steps of BLOCK_K,
BLOCK_K dividing ``group``, so each step lies in one group. Per step it loads the A tile and the
(BLOCK_K / 2) x BLOCK_N bytes of the weights (each byte read for both its rows), shifts out the
nibble of each row, sign-extends it or subtracts the group's zero point, and casts the integers
(-15 to 15 with zero points from 0 to 15) to A's type: that much of the dequantization happens
per weight, in the main loop, and is exact (a 16-bit float holds every integer up to 256). The
group scale is constant along the step, so it multiplies the step's partial product rather than
every weight: ``acc += dot(a, q - z) * s[None, :]``, chapter 09's block-scaled GEMM with B's blocks
``group x 1``. Every product a * (q - z) is exact in fp32 (8 or 11 significant bits of A times at
most 8 of the integer), so the only roundings are the fp32 sums inside each ``tl.dot``, the
multiplication by the scale, the additions into the fp32 accumulator and the output cast:
:func:`w4a16_error_bound` counts them. On a GPU the compiler may fuse the multiplication and the
addition into one FMA (one rounding fewer, inside the bound).

The other order, each weight dequantized to (q - z) * s in 16 bits before the ``tl.dot``, rounds
once more per weight (12 significant bits into bf16's 8); this one keeps every product exact, so
the kernel can be checked bit for bit where the sums are exact. The codes keep the plain (K, N)
layout, not one arranged for the tensor core's register fragments, so that the reference is a few
lines of torch.

**Configs**: :func:`pick_config` chooses by M, no autotuning: decode (M <= 16) gets a GEMV-like
tile of 16 rows (``tl.dot`` needs 16) and narrow columns, so that a 4096-wide layer still has 128
programs; batched decode (M <= 64) and prefill (M > 64) get wider tiles that reuse each dequantized
weight tile over more rows of A. BLOCK_K is the config's, capped at ``group``.
:data:`W4A16_CONFIGS` lists them; each compiles for sm_90 without spilling
(benchmarks/results/compile_check.json, ``make gpu-compile``).

In Triton's interpreter (no GPU) bf16 values are held as raw integers, so the launcher upcasts A
and 16-bit scales to float32 there (exact) and the kernel's integer codes are cast to float32: the
same exact products, summed in fp32. A bf16 or fp16 output is stored as fp32 and rounded by torch
(the interpreter's fp32 -> bf16 cast truncates).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import triton
import triton.language as tl

from ..validation import tile_sizes
from . import INTERPRETED
from .gemm import tile_of
from .launch_checks import require_kernel_device

__all__ = [
    "GROUPS",
    "W4A16Config",
    "W4A16_CONFIGS",
    "pick_config",
    "pack_int4",
    "unpack_int4",
    "w4a16_kernel",
    "w4a16_matmul",
    "w4a16_ref",
    "w4a16_error_bound",
]

#: the group sizes along K the launcher takes (GPTQ's and AWQ's 128, and the finer 64 and 32)
GROUPS = (32, 64, 128)
_A_DTYPES = (torch.bfloat16, torch.float16)
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: unit roundoff of the output's cast (round to nearest), and half its smallest subnormal
_U_OUT = {torch.float32: (0.0, 0.0), torch.bfloat16: (2.0**-8, 2.0**-134), torch.float16: (2.0**-11, 2.0**-25)}


@dataclasses.dataclass(frozen=True)
class W4A16Config:
    """One launch config: tile sizes (BLOCK_K before the cap at the group), warps and stages, and
    the largest M it serves (None: any)."""

    name: str
    max_m: int | None
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int
    num_stages: int
    GROUP_M: int = 8

    def block_k(self, group: int) -> int:
        """BLOCK_K for ``group``: the config's, capped at the group (one scale per loop step)."""
        return min(self.BLOCK_K, group)

    def constexprs(self, group: int) -> dict:
        return {
            "BLOCK_M": self.BLOCK_M,
            "BLOCK_N": self.BLOCK_N,
            "BLOCK_K": self.block_k(group),
            "GROUP_M": self.GROUP_M,
        }


#: the configs :func:`pick_config` chooses from, by M (each compiles for sm_90 without spilling)
W4A16_CONFIGS = (
    # decode: one row of tiles, 16 rows (most of them masked off), 32 columns: N / 32 programs
    W4A16Config("decode", 16, 16, 32, 128, 4, 4),
    # a decode batch: each weight tile serves 64 rows
    W4A16Config("batch", 64, 64, 64, 64, 4, 4),
    # prefill: 128 x 128 tiles over 8 warps, the bf16 GEMM's shape
    W4A16Config("prefill", None, 128, 128, 64, 8, 3),
)


def pick_config(M: int) -> W4A16Config:
    """The config of :data:`W4A16_CONFIGS` for M rows of A: the first whose ``max_m`` covers M."""
    for cfg in W4A16_CONFIGS:
        if cfg.max_m is None or M <= cfg.max_m:
            return cfg
    raise AssertionError("the last config serves any M")


# ------------------------------------------------------------------ packing


def _code_range(signed: bool) -> tuple[int, int]:
    return (-8, 7) if signed else (0, 15)


def pack_int4(codes: torch.Tensor, signed: bool = True) -> torch.Tensor:
    """Codes (K, N) of 4 bits, two per byte along K: uint8 (ceil(K / 2), N).

    Byte [i, n] = code [2i, n] in bits 0-3 | code [2i + 1, n] in bits 4-7 (an odd K's last high
    nibble is 0). ``signed``: codes from -8 to 7, stored as two's complement nibbles; else 0 to 15.
    """
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"codes must be a torch.Tensor, got {type(codes).__name__}")
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D (K, N), got shape {tuple(codes.shape)}")
    if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
        raise TypeError(f"codes must have an integer dtype, got {codes.dtype}")
    lo, hi = _code_range(signed)
    if codes.numel() and (int(codes.min()) < lo or int(codes.max()) > hi):
        kind = "signed" if signed else "unsigned"
        raise ValueError(
            f"{kind} int4 codes must lie in [{lo}, {hi}], got values from {int(codes.min())} to {int(codes.max())}"
            + ("; codes with a zero point are unsigned: pass signed=False" if signed and int(codes.min()) >= 0 else "")
        )
    K, N = codes.shape
    nib = (codes.to(torch.int32) & 0xF).to(torch.uint8)
    if K % 2:
        nib = torch.cat([nib, torch.zeros((1, N), dtype=torch.uint8, device=nib.device)])
    return (nib[0::2] | (nib[1::2] << 4)).contiguous()


def unpack_int4(packed: torch.Tensor, signed: bool = True, k: int | None = None) -> torch.Tensor:
    """The codes of :func:`pack_int4`: int8 (k, N), k = 2 * packed rows unless given (an odd K:
    pass it to drop the padding row)."""
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"packed must be a torch.Tensor, got {type(packed).__name__}")
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8 (two 4-bit codes a byte, pack_int4), got {packed.dtype}")
    if packed.ndim != 2:
        raise ValueError(f"packed must be 2-D (ceil(K / 2), N), got shape {tuple(packed.shape)}")
    rows = packed.shape[0]
    if k is None:
        k = 2 * rows
    elif isinstance(k, bool) or not isinstance(k, int) or not 2 * rows - 1 <= k <= 2 * rows or k < 0:
        raise ValueError(f"k must be {2 * rows - 1} or {2 * rows} for {rows} rows of packed bytes, got {k!r}")
    p = packed.to(torch.int16)
    nib = torch.stack([p & 0xF, p >> 4], dim=1).reshape(2 * rows, packed.shape[1])[:k]
    if signed:
        nib = (nib ^ 8) - 8  # two's complement: 8..15 are -8..-1
    return nib.to(torch.int8)


# ------------------------------------------------------------------ the kernel


@triton.jit
def w4a16_kernel(
    a_ptr,
    p_ptr,
    s_ptr,
    z_ptr,
    c_ptr,
    M,
    N,
    K,
    group,
    stride_am,
    stride_ak,
    stride_pk,
    stride_pn,
    stride_sg,
    stride_sn,
    stride_zg,
    stride_zn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    HAS_ZEROS: tl.constexpr,
):
    """One tile of C = sum over K-steps of dot(A_step, Q_step - Z_g) * S_g, g the step's group
    (BLOCK_K divides ``group``). p_ptr: the packed codes, byte [k // 2, n] holding row k's nibble at
    bit 4 * (k % 2). HAS_ZEROS: unsigned codes minus uint8 zero points; else signed codes (z_ptr
    unused)."""
    pid_m, pid_n = tile_of(tl.program_id(axis=0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    # BLOCK_K is even and every step starts at an even k: row k of the step is byte row k0/2 + k//2
    p_ptrs = p_ptr + (offs_k // 2)[:, None] * stride_pk + offs_n[None, :] * stride_pn
    shift = ((offs_k % 2) * 4)[:, None]
    n_mask = offs_n < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k0
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        byte = tl.load(p_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0).to(tl.int32)
        nib = (byte >> shift) & 0xF
        g = k0 // group
        if HAS_ZEROS:
            z = tl.load(z_ptr + g * stride_zg + offs_n * stride_zn, mask=n_mask, other=0).to(tl.int32)
            q = nib - z[None, :]
        else:
            q = (nib ^ 8) - 8  # the nibble's two's complement
        w = q.to(a.dtype)  # integers of at most 9 bits: exact in bf16, fp16 and fp32
        s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn, mask=n_mask, other=0.0).to(tl.float32)
        acc += tl.dot(a, w) * s[None, :]
        a_ptrs += BLOCK_K * stride_ak
        p_ptrs += (BLOCK_K // 2) * stride_pk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & n_mask[None, :])


# ------------------------------------------------------------------ checks, launcher, reference


def _check(a, packed, scales, zeros, group):
    """K, N and the group after checking every operand, each failure a sentence."""
    group = _check_group(group)
    for name, t in (("a", a), ("packed", packed), ("scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if a.dtype not in _A_DTYPES:
        raise TypeError(
            f"a has dtype {a.dtype}; a W4A16 GEMM takes 16-bit activations: torch.bfloat16 or torch.float16"
        )
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8, two 4-bit codes a byte (pack_int4), got {packed.dtype}")
    M, K = a.shape
    N = packed.shape[1]
    if packed.shape[0] != (K + 1) // 2:
        raise ValueError(
            f"packed has {packed.shape[0]} rows of bytes; a's K = {K} needs ceil(K / 2) = {(K + 1) // 2} "
            f"(packed is (ceil(K / 2), N), two K rows a byte)"
        )
    n_groups = -(-K // group)
    if scales.dtype not in _SCALE_DTYPES:
        raise TypeError(f"scales must be float32, bfloat16 or float16, got {scales.dtype}")
    if tuple(scales.shape) != (n_groups, N):
        raise ValueError(
            f"scales must have shape (ceil(K / group), N) = ({n_groups}, {N}) for K = {K}, group = {group}, "
            f"got {tuple(scales.shape)}"
        )
    if zeros is not None:
        if not isinstance(zeros, torch.Tensor):
            raise TypeError(f"zeros must be a torch.Tensor or None, got {type(zeros).__name__}")
        if zeros.dtype != torch.uint8:
            raise TypeError(f"zeros must be uint8 (one zero point per group and column), got {zeros.dtype}")
        if tuple(zeros.shape) != (n_groups, N):
            raise ValueError(f"zeros must have the shape of scales, ({n_groups}, {N}), got {tuple(zeros.shape)}")
    for name, t in (("packed", packed), ("scales", scales), ("zeros", zeros)):
        if t is not None and t.device != a.device:
            raise ValueError(f"{name} is on {t.device}, a on {a.device}")
    require_kernel_device(a.device)
    return K, N, group


def _check_group(group) -> int:
    if group not in GROUPS or isinstance(group, bool):
        raise ValueError(f"group must be one of {GROUPS} (rows of K per scale), got {group!r}")
    return int(group)


def w4a16_matmul(
    a: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    group: int = 128,
    block: tuple[int, int, int] | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """C = a @ dequant(packed, scales, zeros) by :func:`w4a16_kernel`: (M, N) of ``out_dtype``.

    a: (M, K) bfloat16 or float16. packed: uint8 (ceil(K / 2), N) from :func:`pack_int4`, signed
    codes without ``zeros``, unsigned with them. scales: (ceil(K / group), N) float32, bfloat16 or
    float16; zeros: None or uint8 of the same shape (w = (q - zero) * scale). group: 32, 64 or 128.
    block: (BLOCK_M, BLOCK_N, BLOCK_K), powers of two from 16 to 256 with BLOCK_K dividing the
    group, or None: :func:`pick_config` by M. out_dtype: bfloat16, float16 or float32 (None: a's).
    Any strides. The reference is :func:`w4a16_ref`; the error bound :func:`w4a16_error_bound`.
    """
    K, N, group = _check(a, packed, scales, zeros, group)
    out_dtype = a.dtype if out_dtype is None else out_dtype
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be torch.bfloat16, torch.float16 or torch.float32, got {out_dtype!r}")
    M = a.shape[0]
    cfg = pick_config(M)
    if block is None:
        meta, warps, stages = cfg.constexprs(group), cfg.num_warps, cfg.num_stages
    else:
        bm, bn, bk = tile_sizes(block)
        if group % bk:
            raise ValueError(f"BLOCK_K={bk} must divide group={group} (one scale per loop step)")
        meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": cfg.GROUP_M}
        warps, stages = 4, 3
    if INTERPRETED:  # bf16 is raw integers there; the upcast is exact
        a, scales = a.float(), scales.float()
    c = torch.empty((M, N), dtype=torch.float32 if INTERPRETED else out_dtype, device=a.device)
    if M and N:
        z = packed if zeros is None else zeros  # an unused uint8 pointer without zero points
        grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        w4a16_kernel[grid](
            a,
            packed,
            scales,
            z,
            c,
            M,
            N,
            K,
            group,
            a.stride(0),
            a.stride(1),
            packed.stride(0),
            packed.stride(1),
            scales.stride(0),
            scales.stride(1),
            z.stride(0),
            z.stride(1),
            c.stride(0),
            c.stride(1),
            **meta,
            HAS_ZEROS=zeros is not None,
            num_warps=warps,
            num_stages=stages,
        )
    return c.to(out_dtype)


def _dequant_ref(packed, scales, zeros, group, K) -> torch.Tensor:
    """W (K, N) float64: (q - zero) * scale of each code's group."""
    q = unpack_int4(packed, signed=zeros is None, k=K).double()
    if zeros is not None:
        q = q - zeros.double().repeat_interleave(group, dim=0)[:K]
    return q * scales.double().repeat_interleave(group, dim=0)[:K]


def w4a16_ref(
    a: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    group: int = 128,
) -> torch.Tensor:
    """a @ dequant(packed, scales, zeros) in float64: (M, N) on the CPU. The arguments as
    :func:`w4a16_matmul`'s; every value (a, codes, zero points, scales) is exact in float64."""
    K, _, group = _check(a.cpu(), packed.cpu(), scales.cpu(), None if zeros is None else zeros.cpu(), group)
    w = _dequant_ref(packed.cpu(), scales.cpu(), None if zeros is None else zeros.cpu(), group, K)
    return a.cpu().double() @ w


def _gamma(n: int, u: float) -> float:
    return math.inf if n * u >= 1 else n * u / (1 - n * u)


def w4a16_error_bound(
    a: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    group: int = 128,
    block_k: int | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """An elementwise bound on |w4a16_matmul(...) - w4a16_ref(...)|: (M, N) float64.

    Every product a * (q - z) is exact in fp32, so each term t = a (q - z) s of the sum meets
    only: the fp32 sums of one step's BLOCK_K products inside ``tl.dot`` (on tensor cores, which
    truncate, within gamma_{3 BLOCK_K}(2**-24) of the sum of |products|: the model of
    :func:`nbhelpers.gemm_bounds.error_bound`; round-to-nearest in the interpreter, within
    gamma_{BLOCK_K}), one product with the scale, and at most ceil(K / BLOCK_K) additions into the
    accumulator. So |C32 - C| <= gamma_n(2**-24) * sum |t| with n = 3 BLOCK_K + 1 + ceil(K / BLOCK_K),
    plus the float64 reference's own gamma_K(2**-53). A 16-bit output adds its rounding,
    u_out (|C| + e) + half its smallest subnormal. ``block_k``: the launch's (None: the
    config :func:`pick_config` picks for a's M)."""
    K, _, group = _check(a.cpu(), packed.cpu(), scales.cpu(), None if zeros is None else zeros.cpu(), group)
    out_dtype = a.dtype if out_dtype is None else out_dtype
    if out_dtype not in _U_OUT:
        raise TypeError(f"out_dtype must be torch.bfloat16, torch.float16 or torch.float32, got {out_dtype!r}")
    bk = pick_config(a.shape[0]).block_k(group) if block_k is None else block_k
    n = 3 * bk + 1 + -(-K // bk)
    w = _dequant_ref(packed.cpu(), scales.cpu(), None if zeros is None else zeros.cpu(), group, K)
    a64 = a.cpu().double()
    e = (_gamma(n, 2.0**-24) + _gamma(K, 2.0**-53)) * (a64.abs() @ w.abs())
    u_out, tiny = _U_OUT[out_dtype]
    return e + u_out * ((a64 @ w).abs() + e) + tiny
