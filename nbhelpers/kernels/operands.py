"""From a recipe to a kernel: what :func:`nbhelpers.scaling.quantize` returns, as a launcher takes it.

``quantize(x, recipe)`` returns numpy arrays: q (the element values, float64 on the element's grid
or int8 codes) and one float64 scale per block. A launcher takes torch tensors: the elements in a
torch dtype that holds them exactly, the scales in float32, on the kernels' device, and the recipe
they were quantized by. :func:`kernel_operand` does that conversion, once, for every chapter:

* elements: e4m3fn -> ``torch.float8_e4m3fn``, e5m2 -> ``torch.float8_e5m2``; the narrower MX
  elements e2m1fn (MXFP4), e2m3fn and e3m2fn (MXFP6) are *carried* in ``torch.float8_e4m3fn``,
  which holds each of their values exactly (torch has no unpacked fp4 or fp6 type, and a kernel
  multiplies the values, not the codes); int8 and int4 codes -> ``torch.int8``; bf16 / fp16 / fp32
  elements -> their torch dtypes. Every cast is checked to be exact.
* scales: float32. fp32 scales are fp32 values by construction, e8m0 scales are powers of two
  from 2**-127 to 2**127 (fp32 values too, the smallest a subnormal). NVFP4's scale is the
  product of an e4m3 block factor and an fp32 tensor factor, up to 28 significant bits: not an
  fp32 value, so no kernel here takes it and :func:`kernel_operand` refuses it.
* orientation: q and the scales keep quantize's layout, (M, K) and (ceil(M / br), ceil(K / bc)).
  ``transpose=True`` is for an operand quantized as its transpose, e.g. a weight stored (N, K) and
  quantized per row: the kernel gets the (K, N) view of the contiguous (N, K) tensor (K-major, the
  layout Hopper's fp8 tensor cores read), the scales transposed, and the recipe with its block
  transposed, so that the recipe says what the scales are *in the kernel's orientation*.
* stacks: q (..., M, K) and scales (..., gm, gk), operands quantized one by one and stacked with
  ``np.stack`` (one weight per expert of a mixture of experts), convert in one call.

A launcher declares the recipes it implements with a :class:`RecipeSupport` and checks the
recipes it is given against it: a recipe it cannot run is a ValueError naming that recipe and
what the launcher accepts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from ..recipes import Recipe, ScaleKind, get_recipe
from . import default_device

__all__ = ["KernelOperand", "kernel_operand", "carrier_dtype", "RecipeSupport"]

#: the torch dtype that carries each element format exactly
_CARRIERS: dict[str, torch.dtype] = {
    "e4m3fn": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
    "e2m1fn": torch.float8_e4m3fn,
    "e2m3fn": torch.float8_e4m3fn,
    "e3m2fn": torch.float8_e4m3fn,
    "int8": torch.int8,
    "int4": torch.int8,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}


class KernelOperand(NamedTuple):
    """One operand as a launcher takes it: ``q`` (torch, the element dtype's carrier), ``scales``
    (float32) and ``recipe`` (the recipe in the kernel's orientation)."""

    q: torch.Tensor
    scales: torch.Tensor
    recipe: Recipe


def carrier_dtype(recipe: Recipe | str) -> torch.dtype:
    """The torch dtype a kernel gets a recipe's elements in (see the module docstring)."""
    recipe = get_recipe(recipe)
    try:
        return _CARRIERS[str(recipe.element)]
    except KeyError:
        raise ValueError(
            f"no torch dtype carries the elements of recipe {recipe} ({recipe.element}) exactly; "
            f"kernel operands take: {', '.join(_CARRIERS)}"
        ) from None


def _grid(shape: tuple[int, int], block: tuple[int | None, int | None]) -> tuple[int, int]:
    return tuple(1 if b is None else -(-max(n, 1) // b) for n, b in zip(shape, block))


def kernel_operand(
    q, scales, recipe: Recipe | str, *, transpose: bool = False, device: torch.device | str | None = None
) -> KernelOperand:
    """``(q, scales)`` of ``quantize(x, recipe)`` as a kernel launcher takes them:
    ``KernelOperand(q, scales, recipe)`` of torch tensors on ``device`` (default: the kernels'
    device, :func:`nbhelpers.kernels.default_device`).

    q (M, K) -> the carrier dtype of the recipe's elements (:func:`carrier_dtype`), exactly;
    scales (ceil(M / br), ceil(K / bc)) -> float32, exactly; a stack (..., M, K) with its scales
    (..., gm, gk) likewise. ``transpose=True``: q as the (..., K, M) view of the contiguous
    (..., M, K) tensor, scales transposed, the recipe's block transposed.
    A ValueError when q is not on the element grid, the scales do not match q and the recipe, or
    the recipe's scales are not fp32 values (NVFP4's two-level scales)."""
    recipe = get_recipe(recipe)
    if recipe.scale == ScaleKind.E4M3_OVER_FP32:
        raise ValueError(
            f"recipe {recipe}: its scale ('{recipe.scale}') is an e4m3 block factor times an fp32 tensor "
            "factor, which is not an fp32 value; the kernels take one float32 scale per block (recipes "
            f"with scale {', '.join(repr(str(k)) for k in ScaleKind if k != ScaleKind.E4M3_OVER_FP32)})"
        )
    dtype = carrier_dtype(recipe)
    q = np.asarray(q)
    if q.ndim < 2:
        raise ValueError(f"q must be (M, K) as quantize returns it, or a stack (..., M, K); got shape {q.shape}")
    s = np.asarray(scales, dtype=np.float64)
    want = q.shape[:-2] + _grid(q.shape[-2:], recipe.block)
    if s.shape != want:
        raise ValueError(
            f"scales has shape {s.shape}, but q of shape {q.shape} quantized by {recipe} (block {recipe.block}) "
            f"has {want} blocks (ceil(M / br), ceil(K / bc))"
        )
    q64 = q.astype(np.float64)
    qt = torch.from_numpy(q64).to(dtype)  # exact when q is on the element grid, checked next
    if not np.array_equal(qt.to(torch.float64).numpy(), q64):
        raise ValueError(
            f"q is not on the grid of the recipe's elements ({recipe.element}): quantize it by {recipe} first"
        )
    s32 = s.astype(np.float32)
    if not np.array_equal(s32.astype(np.float64), s):
        raise ValueError(f"the scales are not fp32 values, so float32 cannot carry them exactly (recipe {recipe})")
    st = torch.from_numpy(s32)
    if transpose:
        qt, st = qt.transpose(-2, -1), st.transpose(-2, -1).contiguous()
        recipe = dataclasses.replace(recipe, block=recipe.block[::-1], name=f"{recipe}, transposed")
    device = default_device() if device is None else device
    return KernelOperand(qt.to(device), st.to(device), recipe)


@dataclasses.dataclass(frozen=True)
class RecipeSupport:
    """The recipes a launcher implements, as a pair (recipe of A, recipe of B): ``elements`` and
    ``scales`` each operand may have, and ``blocks``, a sentence on the pair's blocks with
    ``block_problem``, which returns why a pair's blocks do not fit (None when they do)."""

    launcher: str
    elements: tuple[str, ...]
    scales: tuple[ScaleKind, ...]
    blocks: str
    block_problem: Callable[[Recipe, Recipe], str | None]
    example: str

    def accepted(self) -> str:
        """What the launcher runs, in a sentence."""
        return (
            f"{self.launcher} runs elements {', '.join(self.elements)} with scales "
            f"{', '.join(str(k) for k in self.scales)}; {self.blocks} (e.g. {self.example})"
        )

    def check(self, recipes) -> tuple[Recipe, Recipe]:
        """The pair as Recipes; a ValueError naming the recipe it cannot run and :meth:`accepted`."""
        if not isinstance(recipes, (tuple, list)) or len(recipes) != 2:
            raise ValueError(f"recipes must be a pair (recipe of A, recipe of B), got {recipes!r}")
        rA, rB = (get_recipe(r) for r in recipes)
        for what, r in (("A", rA), ("B", rB)):
            if str(r.element) not in self.elements or r.scale not in self.scales:
                raise ValueError(
                    f"{self.launcher} cannot run recipe {r} for {what} (elements {r.element}, scale "
                    f"'{r.scale}'): {self.accepted()}"
                )
        why = self.block_problem(rA, rB)
        if why is not None:
            raise ValueError(f"{self.launcher} cannot run recipes ({rA}, {rB}): {why}; {self.accepted()}")
        return rA, rB

    def check_dtypes(
        self, rA: Recipe, rB: Recipe, qa: torch.Tensor, qb: torch.Tensor, names: tuple[str, str] = ("qa", "qb")
    ) -> None:
        """The operands' dtypes must be the carriers of the recipes' elements."""
        for name, r, t in zip(names, (rA, rB), (qa, qb)):
            want = carrier_dtype(r)
            if t.dtype != want:
                raise TypeError(
                    f"{name} has dtype {t.dtype}, but its recipe {r} has {r.element} elements, carried in {want} "
                    "(nbhelpers.kernels.operands.kernel_operand makes it)"
                )
