"""The GEMM kernel and torch's GEMM on float64 data rounded to a format (chapter 03's sweeps and
the GPU measurements of :mod:`nbhelpers.gpu_measurements`): numpy in, float64 numpy out, on the
device the kernels run on (:func:`nbhelpers.kernels.default_device`). It imports the kernels:
import it after :func:`nbhelpers.device.setup_device`, as :mod:`nbhelpers.kernels` says."""

from __future__ import annotations

import numpy as np
import torch

from .formats import get_format
from .kernels import INTERPRETED, default_device
from .kernels.gemm import matmul
from .rounding import round_to

__all__ = ["run_matmul", "torch_matmul"]

# the input formats the kernel takes, with their torch dtypes (FloatFormat.torch_dtype)
_TORCH_DTYPES = {name: get_format(name).torch_dtype for name in ("fp32", "bf16", "fp16")}


def _as_kernel_input(x: np.ndarray, fmt: str, device) -> torch.Tensor:
    """float64 data -> the tensor the kernel gets: rounded to ``fmt``; bf16 in the interpreter as
    float32 holding the bf16 values (exact)."""
    xq = round_to(x, fmt)
    dtype = _TORCH_DTYPES[fmt]
    if INTERPRETED and dtype == torch.bfloat16:
        dtype = torch.float32
    return torch.from_numpy(xq).to(device=device, dtype=dtype)


def run_matmul(
    A,
    B,
    in_fmt: str = "bf16",
    input_precision: str = "ieee",
    block: tuple[int, int, int] = (32, 32, 32),
    device: str | None = None,
) -> np.ndarray:
    """The kernel on float64 data: A (M, K), B (K, N) rounded to ``in_fmt`` ("fp32", "bf16" or
    "fp16"), then :func:`nbhelpers.kernels.gemm.matmul`; returns C (M, N) as float64 numpy.

    In the interpreter, bf16 data travels as float32 tensors holding the bf16 values (the
    interpreter cannot compute on bf16; see :func:`nbhelpers.kernels.gemm.matmul`), so the result is the same sum of the
    same exact products, accumulated by numpy in fp32.
    """
    fmt = get_format(in_fmt).name
    if fmt not in _TORCH_DTYPES:
        raise ValueError(f"in_fmt must be one of {tuple(_TORCH_DTYPES)}, got {in_fmt!r}")
    dev = device or default_device()
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
    dev = device or default_device()
    a = torch.from_numpy(round_to(np.asarray(A, dtype=np.float64), fmt)).to(dev, _TORCH_DTYPES[fmt])
    b = torch.from_numpy(round_to(np.asarray(B, dtype=np.float64), fmt)).to(dev, _TORCH_DTYPES[fmt])
    return torch.matmul(a, b).double().cpu().numpy()
