"""The argument checks the kernels' launchers share, each failing with a sentence that says what
was wrong and what is accepted: the device a compiled kernel needs, the tile sizes, the fp8
operand types and the float32 scales of the scaled GEMMs."""

from __future__ import annotations

import torch

from ..validation import tile_sizes
from . import INTERPRETED

__all__ = ["FP8_DTYPES", "require_kernel_device", "check_block", "check_scale"]

#: the fp8 operand types the kernels take (the two OCP fp8 formats torch has)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def require_kernel_device(device: torch.device, what: str = "tensors") -> None:
    """Compiled Triton kernels read CUDA memory only; in the interpreter any device will do."""
    if not INTERPRETED and torch.device(device).type != "cuda":
        raise ValueError(
            f"compiled Triton kernels need CUDA tensors, got {what} on {device}. Without a GPU, "
            "call nbhelpers.device.setup_device() before importing nbhelpers.kernels (it sets "
            "TRITON_INTERPRET=1)."
        )


def check_block(block) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K), each a power of two from 16 to 256 (``tl.dot`` needs at least
    16 along each dimension): :func:`nbhelpers.validation.tile_sizes`."""
    return tile_sizes(block)


def check_scale(s, shapes: list[tuple], name: str, meaning: str, device) -> torch.Tensor:
    """A float32 scale tensor of one of ``shapes`` (``meaning`` says what they are) on ``device``."""
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(s).__name__}")
    if s.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {s.dtype}")
    if tuple(s.shape) not in shapes:
        raise ValueError(
            f"{name} must have shape {' or '.join(map(str, dict.fromkeys(shapes)))} ({meaning}), got {tuple(s.shape)}"
        )
    if s.device != device:
        raise ValueError(f"{name} is on {s.device}, the operands on {device}")
    return s
