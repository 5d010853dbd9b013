"""Copy kernels in Triton: contiguous, strided and transposed access (chapter 08).

Three ways to move memory, the same number of useful bytes in each, and very different numbers of
bytes the hardware has to move (see :mod:`nbhelpers.memory_access` for the 32-byte sector model
that predicts them):

* :func:`copy`: ``out[i] = x[i]`` for a 1-D tensor. One program copies BLOCK consecutive
  elements; the last program's tail is masked, so any length works. Neighbouring threads read
  neighbouring addresses: a warp's request is coalesced.
* :func:`strided_read`: ``out[i] = x[i * stride]``, the same as ``x[::stride]``. Reads are
  ``stride`` elements apart (a warp touches up to 32 sectors for 32 elements), writes are
  contiguous.
* :func:`transpose`: ``out[j, i] = x[i, j]`` for a 2-D tensor of any shape and strides, the same
  as ``x.t().contiguous()``. One program moves a BLOCK_M x BLOCK_N tile, masked at the edges; it
  reads the tile along x's rows and writes it along out's rows (on a GPU the compiler reshuffles
  the tile between registers, through shared memory, so both sides stay coalesced).

Each launcher checks its inputs and has a reference (``*_ref``: torch's own indexing). Bytes moved
(useful): 2 n itemsize for :func:`copy` and :func:`strided_read` (n elements out), 2 M N itemsize
for :func:`transpose`.

The kernels only load and store, never compute, so they copy bit patterns: in Triton's
interpreter (see :mod:`nbhelpers.kernels`), which holds bfloat16 as raw 16-bit integers (Triton
3.7.1), a copy of bf16 is still exact, and so is one of a NaN's payload or of -0.0. Offsets are
computed in int64, so tensors beyond 2**31 elements are addressed correctly.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..occupancy import occupancy
from ..perf_model import GPU, H200, Launch, Prediction, predict
from ..validation import positive_int, power_of_two
from .launch_checks import require_kernel_device

__all__ = [
    "copy_kernel",
    "strided_read_kernel",
    "transpose_kernel",
    "copy",
    "strided_read",
    "transpose",
    "copy_ref",
    "strided_read_ref",
    "transpose_ref",
    "predicted",
    "DTYPES",
]

# what the launchers accept: floating and integer types of 1, 2, 4 and 8 bytes (a copy moves bits)
DTYPES = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] for the BLOCK elements of this program; the tail past n is masked."""
    pid = tl.program_id(axis=0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)


@triton.jit
def strided_read_kernel(x_ptr, out_ptr, n_out, stride, BLOCK: tl.constexpr):
    """out[i] = x[i * stride] for the BLOCK outputs of this program; outputs past n_out masked."""
    pid = tl.program_id(axis=0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    x = tl.load(x_ptr + offs * stride, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)


@triton.jit
def transpose_kernel(
    x_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    stride_xn,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """out[j, i] = x[i, j] for one BLOCK_M x BLOCK_N tile of x (M, N); out is (N, M)."""
    pid_m = tl.program_id(axis=0).to(tl.int64)
    pid_n = tl.program_id(axis=1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tile = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :] * stride_xn, mask=mask)
    # the transposed tile, so that the store walks along out's rows (its contiguous dimension)
    tl.store(out_ptr + offs_n[:, None] * stride_om + offs_m[None, :] * stride_on, tl.trans(tile), mask=tl.trans(mask))


# ------------------------------------------------------------------ checks


def _check_tensor(x, ndim: int, name: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPES:
        accepted = ", ".join(str(d) for d in DTYPES)
        raise TypeError(f"{name} has dtype {x.dtype}; accepted: {accepted}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    require_kernel_device(x.device, "a tensor")


def _check_contiguous(x: torch.Tensor, name: str = "x") -> None:
    if x.numel() > 1 and x.stride(0) != 1:
        raise ValueError(
            f"{name} must be contiguous (stride 1), got stride {x.stride(0)}: the kernel walks "
            f"memory itself; pass {name}.contiguous()"
        )


# ------------------------------------------------------------------ launchers


def copy(x: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """A copy of the 1-D contiguous tensor x (n,) by :func:`copy_kernel`: (n,), same dtype and device.

    block: elements per program, a power of two from 16 to 65536; cdiv(n, block) programs.
    """
    _check_tensor(x, 1)
    _check_contiguous(x)
    BLOCK = power_of_two("block", block, 16, 65536)
    n = x.numel()
    out = torch.empty_like(x)
    if n == 0:
        return out
    copy_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out


def strided_read(x: torch.Tensor, stride: int, block: int = 1024) -> torch.Tensor:
    """``x[::stride]`` of the 1-D contiguous tensor x (n,) by :func:`strided_read_kernel`:
    (ceil(n / stride),), same dtype and device, contiguous.

    stride: a positive int (elements between two reads). block: outputs per program, a power of
    two from 16 to 65536.
    """
    _check_tensor(x, 1)
    _check_contiguous(x)
    stride = positive_int("stride", stride, "elements between two reads")
    BLOCK = power_of_two("block", block, 16, 65536)
    n_out = triton.cdiv(x.numel(), stride)
    out = torch.empty(n_out, dtype=x.dtype, device=x.device)
    if n_out == 0:
        return out
    strided_read_kernel[(triton.cdiv(n_out, BLOCK),)](x, out, n_out, stride, BLOCK=BLOCK)
    return out


def transpose(x: torch.Tensor, block: tuple[int, int] = (32, 32)) -> torch.Tensor:
    """``x.t().contiguous()`` of the 2-D tensor x (M, N), any strides, by
    :func:`transpose_kernel`: (N, M), same dtype and device, row-major.

    block: (BLOCK_M, BLOCK_N), powers of two from 16 to 256; a grid of cdiv(M, BLOCK_M) x
    cdiv(N, BLOCK_N) programs.
    """
    _check_tensor(x, 2)
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise ValueError(f"block must be a tuple (BLOCK_M, BLOCK_N), got {block!r}")
    BLOCK_M = power_of_two("BLOCK_M", block[0], 16, 256)
    BLOCK_N = power_of_two("BLOCK_N", block[1], 16, 256)
    M, N = x.shape
    out = torch.empty((N, M), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return out
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    transpose_kernel[grid](
        x, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N
    )
    return out


# ------------------------------------------------------------------ references


def copy_ref(x: torch.Tensor) -> torch.Tensor:
    """torch's own copy of x: ``x.clone()``."""
    return x.clone()


def strided_read_ref(x: torch.Tensor, stride: int) -> torch.Tensor:
    """torch's own strided read: ``x[::stride].contiguous()``."""
    return x[::stride].contiguous()


def transpose_ref(x: torch.Tensor) -> torch.Tensor:
    """torch's own transposed copy: ``x.t().contiguous()``."""
    return x.t().contiguous()


def predicted(
    pattern: str,
    outputs: int,
    block: int | tuple[int, int] = 1024,
    efficiency: float = 1.0,
    registers: int = 32,
    itemsize: int = 4,
    gpu: GPU = H200,
) -> Prediction:
    """What :mod:`nbhelpers.perf_model` predicts for one launch of these kernels: ``pattern``
    "contiguous" (:func:`copy`), "strided" (:func:`strided_read`, whose reads move
    ``1 / efficiency`` times their useful bytes: the sector model's efficiency at its stride) or
    "transposed" (:func:`transpose`, ``block`` = (BLOCK_M, BLOCK_N)), for ``outputs`` elements of
    ``itemsize`` bytes. Each program loads its block once and stores it (one step; a store does
    not wait); a program of 4 warps with ``registers`` per thread (the compile table's) sets how
    many an SM holds. Bytes from HBM: the reads (useful / efficiency) and the writes; only the
    reads need to be in flight (a program waits for its loads, not its stores)."""
    if pattern not in ("contiguous", "strided", "transposed"):
        raise ValueError(f"pattern must be 'contiguous', 'strided' or 'transposed', got {pattern!r}")
    positive_int("outputs", outputs)
    if not (isinstance(efficiency, (int, float)) and 0 < efficiency <= 1):
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    per_block = block[0] * block[1] if isinstance(block, tuple) else block
    positive_int("block", per_block)
    per_sm = occupancy(registers, 4, 0).blocks
    launch = Launch(-(-outputs // per_block), per_sm, per_block * itemsize / efficiency)
    reads = outputs * itemsize / efficiency
    return predict(gpu, launch, reads + outputs * itemsize, bytes_loaded=reads)
