"""Bytes per parameter: what each kind of training state costs, recipe by recipe.

A spec with derived numbers, like a format: a :class:`MemoryRecipe` names the storage of each
kind of state training keeps per parameter (weights, gradients, fp32 master copy, Adam's two
moments, a Kahan compensation buffer), and :func:`bytes_per_parameter` adds them up.
:data:`MEMORY_RECIPES` holds the recipes chapter 04 (master weights) tabulates; the measured
counterpart is :attr:`nbhelpers.training.TrainResult.state_bytes`.

Bytes are not the whole story: Adam's moments decay by ``beta`` every step, and in a narrow format
with round to nearest that decay can round away. A recipe records how its states are rounded
(``state_rounding``); :func:`nbhelpers.training.recipe_caveats` computes what that costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .formats import get_format
from .validation import positive_int

__all__ = ["MEMORY_RECIPES", "MemoryRecipe", "bytes_per_parameter"]


def _storage_bytes(kind: str | None, block: int | None) -> float:
    """Bytes per element of a state stored as ``kind``: a format name, "int8", or None (absent)."""
    if kind is None:
        return 0.0
    if kind == "int8":
        # 8-bit codes plus one fp32 scale per block of ``block`` values
        return 1.0 + (4.0 / block if block else 0.0)
    return get_format(kind).bits / 8


@dataclass(frozen=True)
class MemoryRecipe:
    """What training keeps per parameter: the storage of each kind of state.

    Each field is a format name ("fp32", "bf16", "e4m3fn"), "int8" (a quantized code with one
    fp32 scale per ``block`` values) or None (not kept). ``state_rounding`` is how updates of the
    optimizer's moments are rounded into their storage: "nearest" or "stochastic". Activations
    are not counted: they depend on batch and sequence length, not on the parameter count.
    """

    name: str
    weights: str | None = "bf16"
    gradients: str | None = "bf16"
    master: str | None = "fp32"
    adam_m: str | None = "fp32"
    adam_v: str | None = "fp32"
    compensation: str | None = None
    block: int | None = None
    state_rounding: str = "nearest"

    def __post_init__(self) -> None:
        for kind in (self.weights, self.gradients, self.master, self.adam_m, self.adam_v, self.compensation):
            if kind is not None and kind != "int8":
                get_format(kind)  # raises for an unknown name
        if self.block is not None:
            positive_int("block", self.block, "elements per scaled block of the int8 states, or None")
        if self.state_rounding not in ("nearest", "stochastic"):
            raise ValueError(f"state_rounding must be 'nearest' or 'stochastic', got {self.state_rounding!r}")

    def breakdown(self) -> dict[str, float]:
        """Bytes per parameter of each kind of state."""
        return {
            "weights": _storage_bytes(self.weights, self.block),
            "gradients": _storage_bytes(self.gradients, self.block),
            "master": _storage_bytes(self.master, self.block),
            "adam m": _storage_bytes(self.adam_m, self.block),
            "adam v": _storage_bytes(self.adam_v, self.block),
            "compensation": _storage_bytes(self.compensation, self.block),
        }


def bytes_per_parameter(recipe: MemoryRecipe) -> float:
    """Total bytes per parameter of a recipe."""
    return float(sum(recipe.breakdown().values()))


MEMORY_RECIPES: Mapping[str, MemoryRecipe] = {
    r.name: r
    for r in [
        MemoryRecipe("fp32 weights, fp32 Adam", "fp32", "fp32", None),
        MemoryRecipe("bf16 + fp32 master, fp32 Adam"),
        MemoryRecipe("bf16 + Kahan (bf16 buffer), fp32 Adam", master=None, compensation="bf16"),
        MemoryRecipe("bf16, stochastic rounding, fp32 Adam", master=None),
        MemoryRecipe(
            "bf16, stochastic rounding, bf16 Adam",
            master=None,
            adam_m="bf16",
            adam_v="bf16",
            state_rounding="stochastic",
        ),
        MemoryRecipe("fp8 weights + fp32 master, fp32 Adam", weights="e4m3fn"),
        MemoryRecipe("bf16 + fp32 master, 8-bit Adam", adam_m="int8", adam_v="int8", block=2048),
    ]
}
