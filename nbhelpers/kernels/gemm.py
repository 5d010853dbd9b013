"""A tiled GEMM in Triton with an fp32 accumulator tile (chapter 03; chapter 09 builds on it).

``C = A @ B`` with A (M, K) and B (K, N) in float32, bfloat16 or float16; C (M, N) is float32.
One program computes one BLOCK_M x BLOCK_N tile of C: it walks along K in steps of BLOCK_K,
loads a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B (masked at the edges, the
missing entries read as zero), and adds their product into an fp32 accumulator tile with
``tl.dot``. The tile is stored once at the end. Work: 2 M N K flops; ideal traffic (each input
read once) (M K + K N) * itemsize + 4 M N bytes.

What ``tl.dot`` does to the numbers depends on where it runs:

* on an NVIDIA GPU, bf16/fp16 inputs go to the tensor cores (exact products, fused groups,
  alignment and truncation: :func:`nbhelpers.tensor_cores.tensor_core_matmul` models them);
  fp32 inputs are rounded to TF32 unless ``input_precision="ieee"`` (Triton's documentation);
* in Triton's interpreter (no GPU: ``TRITON_INTERPRET=1``, see :mod:`nbhelpers.kernels`) it is a
  numpy float32 matmul of each tile pair, added to the fp32 tile; ``input_precision`` is ignored;
  bf16 operands would be multiplied as raw bit patterns, so :func:`matmul` refuses them there.

Also here: :func:`run_matmul` (float64 data in, float64 C out, used by the notebook's sweeps) and
:func:`torch_matmul` (torch's own GEMM on the same data). The GPU measurements built on them are
in :mod:`nbhelpers.gpu_measurements`; the results files they write are read by
:mod:`nbhelpers.results`.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..formats import get_format
from ..rounding import round_to
from . import INTERPRETED

__all__ = [
    "matmul_kernel",
    "matmul",
    "matmul_ref",
    "error_bound",
    "run_matmul",
    "torch_matmul",
    "INPUT_PRECISIONS",
]

INPUT_PRECISIONS = ("ieee", "tf32")
# the input formats the kernel takes, with their torch dtypes (FloatFormat.torch_dtype)
_TORCH_DTYPES = {name: get_format(name).torch_dtype for name in ("fp32", "bf16", "fp16")}
_DTYPES = {dt: name for name, dt in _TORCH_DTYPES.items()}


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One BLOCK_M x BLOCK_N tile of C = A @ B, accumulated in fp32 over K in BLOCK_K steps."""
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    # the accumulator tile: fp32 whatever the input type
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # rows past M, columns past N and the ragged end of K read as zeros: a zero product
        # adds nothing, so the edge tiles need no special case
        a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < K - k0)
        b_mask = (offs_k[:, None] < K - k0) & (offs_n[None, :] < N)
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)
        b = tl.load(b_ptrs, mask=b_mask, other=0.0)
        acc += tl.dot(a, b, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc, mask=c_mask)


def _check_block(block) -> tuple[int, int, int]:
    if not isinstance(block, (tuple, list)) or len(block) != 3:
        raise ValueError(f"block must be a tuple (BLOCK_M, BLOCK_N, BLOCK_K), got {block!r}")
    for name, v in zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), block):
        if isinstance(v, bool) or not isinstance(v, int) or v < 16 or v > 256 or v & (v - 1):
            raise ValueError(
                f"{name}={v!r}: block sizes must be powers of two from 16 to 256 "
                "(tl.dot needs at least 16 along each dimension)"
            )
    return tuple(block)


def matmul(a: torch.Tensor, b: torch.Tensor, input_precision: str = "ieee",
           block: tuple[int, int, int] = (32, 32, 32)) -> torch.Tensor:
    """C = a @ b by :func:`matmul_kernel`: a (M, K), b (K, N) -> C (M, N) float32.

    a, b: 2-D tensors of the same dtype (float32, bfloat16 or float16) on the same device (CUDA
    for compiled kernels; any device in the interpreter). Any strides. In the interpreter bf16 is
    refused (it would be computed on raw bit patterns): pass ``a.float()``, which holds the same
    values exactly. input_precision: ``"ieee"`` or ``"tf32"`` (only matters for float32 inputs on
    a GPU). block: (BLOCK_M, BLOCK_N, BLOCK_K), powers of two from 16 to 256.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; accepted: torch.float32, torch.bfloat16, torch.float16")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} (need a (M, K), b (K, N))"
        )
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"a and b are on different devices: {a.device} and {b.device}")
    if not INTERPRETED and a.device.type != "cuda":
        raise ValueError(
            f"compiled Triton kernels need CUDA tensors, got tensors on {a.device}. Without a GPU, "
            "call nbhelpers.device.setup_device() before importing nbhelpers.kernels (it sets "
            "TRITON_INTERPRET=1)."
        )
    if INTERPRETED and a.dtype == torch.bfloat16:
        raise TypeError(
            "Triton's interpreter stores bfloat16 as raw uint16 bits, so tl.dot would multiply bit "
            "patterns (wrong results, no error). Pass a.float() and b.float(): float32 holds every "
            "bf16 value exactly."
        )
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    BLOCK_M, BLOCK_N, BLOCK_K = _check_block(block)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    if M == 0 or N == 0:
        return c
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, INPUT_PRECISION=input_precision,
    )
    return c


def matmul_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The slow, obviously right reference: float64 a @ b on the same device, (M, N) float64.

    Products of float32/bf16/fp16 values are exact in float64; the sums carry float64's own
    rounding, at most gamma_K * 2**-53 * (|a| @ |b|), far below any fp32 accumulation error.
    """
    return a.double() @ b.double()


def _gamma(n: int, u: float) -> float:
    if n * u >= 1:
        return math.inf
    return n * u / (1 - n * u)


def error_bound(a: torch.Tensor, b: torch.Tensor, input_precision: str = "ieee",
                tensor_core: bool = False) -> torch.Tensor:
    """An elementwise bound on |C - a @ b| for an fp32-accumulated C, (M, N) float64.

    ``(gamma_K(2**-24) + gamma_K(2**-53)) * (|a| @ |b|)``: any order of K fp32 additions, each
    rounded to nearest, stays within gamma_K u of the sum of |products| (Higham, *Accuracy and
    Stability of Numerical Algorithms*, ch. 3), plus the float64 reference's own error. With
    fp32 inputs rounded to TF32 (``input_precision="tf32"``) each product may also be off by
    (2 u_tf32 + u_tf32**2) of itself, u_tf32 = 2**-11. ``tensor_core=True`` is for bf16/fp16
    inputs on tensor cores, which truncate: in the model of Fasi et al. (2021) one step (the
    accumulator c and a group of g products, aligned, truncated, summed, truncated to fp32) loses
    less than (g + 2) * 2**-23 * (|c| + sum of the group's |products|), so over K/g groups
    (g >= 4) the loss stays within about K * (1 + 2/g) * 2**-23 <= 3K * 2**-24 of the sum of all
    |products|: the bound is taken as gamma_{3K}(2**-24).
    """
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    K = a.shape[1]
    u32 = 2.0**-24
    g = _gamma(3 * K if tensor_core else K, u32) + _gamma(K, 2.0**-53)
    if input_precision == "tf32" and a.dtype == torch.float32:
        u_tf = 2.0**-11
        g += 2 * u_tf + u_tf**2
    return g * (a.double().abs() @ b.double().abs())


def _as_kernel_input(x: np.ndarray, fmt: str, device) -> torch.Tensor:
    """float64 data -> the tensor the kernel gets: rounded to ``fmt``; bf16 in the interpreter as
    float32 holding the bf16 values (exact)."""
    xq = round_to(x, fmt)
    dtype = _TORCH_DTYPES[fmt]
    if INTERPRETED and dtype == torch.bfloat16:
        dtype = torch.float32
    return torch.from_numpy(xq).to(device=device, dtype=dtype)


def _default_device() -> str:
    return "cpu" if INTERPRETED else "cuda"


def run_matmul(A, B, in_fmt: str = "bf16", input_precision: str = "ieee",
               block: tuple[int, int, int] = (32, 32, 32), device: str | None = None) -> np.ndarray:
    """The kernel on float64 data: A (M, K), B (K, N) rounded to ``in_fmt`` ("fp32", "bf16" or
    "fp16"), then :func:`matmul`; returns C (M, N) as float64 numpy.

    In the interpreter, bf16 data travels as float32 tensors holding the bf16 values (the
    interpreter cannot compute on bf16; see :func:`matmul`), so the result is the same sum of the
    same exact products, accumulated by numpy in fp32.
    """
    fmt = get_format(in_fmt).name
    if fmt not in _TORCH_DTYPES:
        raise ValueError(f"in_fmt must be one of {tuple(_TORCH_DTYPES)}, got {in_fmt!r}")
    dev = device or _default_device()
    a = _as_kernel_input(np.asarray(A, dtype=np.float64), fmt, dev)
    b = _as_kernel_input(np.asarray(B, dtype=np.float64), fmt, dev)
    return matmul(a, b, input_precision, block).double().cpu().numpy()


def torch_matmul(A, B, in_fmt: str = "bf16", device: str | None = None) -> np.ndarray:
    """torch.matmul on float64 data rounded to ``in_fmt`` ("fp32", "bf16" or "fp16"), in that
    dtype (so the output is rounded to it too); returns C (M, N) as float64 numpy.

    The data are rounded with :func:`nbhelpers.rounding.round_to` before they become torch
    tensors: torch converts float64 to bf16 through float32, which can round twice.
    """
    fmt = get_format(in_fmt).name
    if fmt not in _TORCH_DTYPES:
        raise ValueError(f"in_fmt must be one of {tuple(_TORCH_DTYPES)}, got {in_fmt!r}")
    dev = device or ("cpu" if INTERPRETED or not torch.cuda.is_available() else "cuda")
    a = torch.from_numpy(round_to(np.asarray(A, dtype=np.float64), fmt)).to(dev, _TORCH_DTYPES[fmt])
    b = torch.from_numpy(round_to(np.asarray(B, dtype=np.float64), fmt)).to(dev, _TORCH_DTYPES[fmt])
    return torch.matmul(a, b).double().cpu().numpy()
