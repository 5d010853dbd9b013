"""A kernel whose registers grow with one constexpr: register pressure made to order (chapter 09).

:func:`ema_kernel` walks down the rows of ``x (n_rows, n_cols)`` and keeps, for every column of
its block, the running sum and ``EXTRA`` exponential moving averages, average ``j`` with its own
decay ``d_j = 1 - 1 / (j + 2)``: ``e_j <- d_j e_j + (1 - d_j) x``. Every average is carried from
one row to the next, so all ``EXTRA`` of them are alive across the loop at once: each is a
``BLOCK``-wide vector spread over the program's threads, ``BLOCK / (32 num_warps)`` registers per
thread (4 with the defaults, ``BLOCK = 512`` and 4 warps). One kernel source covers every count:
``EXTRA`` is a constexpr, the averages a tuple built with ``tl.static_range``, so each value of
``EXTRA`` compiles to its own kernel with that many more live values. Chapter 09 compiles it for
``EXTRA = 0, 1, ...`` with :mod:`nbhelpers.compile_check` (:data:`KERNEL`, :func:`launch_args`)
and reads ptxas's register and spill counts.

:func:`ema` is the launcher (any float dtype in, float32 out, ``(EXTRA + 1, n_cols)``: row 0 the
column sums, row ``j + 1`` average ``j``); :func:`ema_ref` the float64 reference. The kernel
streams: bytes read ``n_rows n_cols itemsize``, ``(EXTRA + 1) n_cols 4`` written, ``3 EXTRA + 1``
flops per element read.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..validation import nonnegative_int

__all__ = ["ema_kernel", "ema", "ema_ref", "decays", "BLOCK", "NUM_WARPS", "KERNEL", "launch_args"]

BLOCK = 512  # columns per program: 4 per thread with 4 warps
NUM_WARPS = 4
KERNEL = "nbhelpers.kernels.pressure:ema_kernel"  # as nbhelpers.compile_check.Case names it


@triton.jit
def ema_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_xr, stride_or, BLOCK: tl.constexpr, EXTRA: tl.constexpr):
    """Column sums and EXTRA moving averages of x's BLOCK columns of this program (see the module)."""
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_cols
    total = tl.zeros([BLOCK], dtype=tl.float32)
    avgs = ()
    for j in tl.static_range(EXTRA):
        avgs = avgs + (tl.zeros([BLOCK], dtype=tl.float32),)
    for r in range(n_rows):
        x = tl.load(x_ptr + r * stride_xr + offs, mask=mask, other=0.0).to(tl.float32)
        total += x
        new = ()
        for j in tl.static_range(EXTRA):  # EXTRA values carried to the next row: all live at once
            d = 1.0 - 1.0 / (j + 2)
            new = new + (avgs[j] * d + x * (1.0 - d),)
        avgs = new
    tl.store(out_ptr + offs, total, mask=mask)
    for j in tl.static_range(EXTRA):
        tl.store(out_ptr + (j + 1) * stride_or + offs, avgs[j], mask=mask)


def decays(extra: int) -> list[float]:
    """The decay of each average, as the kernel writes them (Python floats; the kernel rounds
    them to float32)."""
    return [1.0 - 1.0 / (j + 2) for j in range(extra)]


def _check(x: torch.Tensor, extra: int) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a 2-D floating-point tensor, got {type(x).__name__} {getattr(x, 'shape', '')}")
    nonnegative_int("extra", extra, "moving averages besides the column sums")


def ema(x: torch.Tensor, extra: int, block: int = BLOCK, num_warps: int = NUM_WARPS) -> torch.Tensor:
    """(extra + 1, n_cols) float32 for x (n_rows, n_cols): row 0 the column sums of x, row j + 1
    the moving average with decay :func:`decays` ``[j]`` after the last row, by :func:`ema_kernel`."""
    _check(x, extra)
    from . import INTERPRETED

    if INTERPRETED and x.dtype in (torch.bfloat16, torch.float16):
        x = x.float()  # the interpreter holds bf16 as raw bits (see nbhelpers.kernels): exact upcast
    x = x.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty((extra + 1, n_cols), dtype=torch.float32, device=x.device)
    ema_kernel[(triton.cdiv(n_cols, block),)](
        x, out, n_rows, n_cols, x.stride(0), out.stride(0), BLOCK=block, EXTRA=extra, num_warps=num_warps
    )
    return out


def ema_ref(x: torch.Tensor, extra: int) -> torch.Tensor:
    """:func:`ema` in float64, step by step, with the decays rounded to float32 as the kernel's
    constants are."""
    _check(x, extra)
    xs = x.detach().cpu().double()
    d = torch.tensor(decays(extra), dtype=torch.float32).double()
    c = torch.tensor([1.0 - dj for dj in decays(extra)], dtype=torch.float32).double()
    avgs = torch.zeros((extra, xs.shape[1]), dtype=torch.float64)
    for row in xs:
        avgs = avgs * d[:, None] + row[None, :] * c[:, None]
    return torch.cat([xs.sum(0, keepdim=True), avgs])


def launch_args(n_rows: int = 4096, n_cols: int = 1 << 20) -> tuple:
    """The positional arguments of :func:`ema`'s launch on a contiguous float32 ``x (n_rows,
    n_cols)``, as :class:`nbhelpers.compile_check.Case` takes them (``"*fp32"`` for a pointer):
    what a compile check of the kernel without a GPU needs."""
    return ("*fp32", "*fp32", n_rows, n_cols, n_cols, n_cols)
