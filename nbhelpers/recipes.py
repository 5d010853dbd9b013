"""Quantization recipes as objects: what gets one scale, what the elements are, what the scale is.

A :class:`Recipe` is a frozen spec, like a :class:`~nbhelpers.formats.FloatFormat`: four choices
and properties derived from them, no numerics. The arithmetic (quantize, dequantize, delayed
scaling, storage) lives in :mod:`nbhelpers.scaling`.

One convention everywhere: ``x ~ q * scale`` (q the element values, scale the block's scale).

- ``block`` is the granularity on a 2-D tensor of shape (M, K): a pair (rows, cols) of block
  sizes, None meaning the whole extent. Per tensor ``(None, None)``, per row / token
  ``(1, None)``, per column / output channel ``(None, 1)``, 1x128 tiles, 128x128 blocks, MX
  ``(1, 32)``, NVFP4 ``(1, 16)``, int4 groups of G along K ``(1, G)``.
- ``element`` is an :class:`IntElement`, ``"int8"`` (symmetric, codes -127..127) or ``"int4"``
  (symmetric, -7..7), or the name of a signed float format of :mod:`nbhelpers.formats`
  (``"e4m3fn"``, ``"e5m2"``, ``"e2m1fn"``, ...).
- ``scale`` is a :class:`ScaleKind` (its string works too): ``"fp32"`` (amax / max_element,
  rounded to fp32), ``"e8m0"`` (a power of two by the OCP MX v1.0 rule, rounded down),
  ``"e8m0_rceil"`` (a power of two rounded up from amax / max_element, the rule of cuBLAS's UE8M0
  conversion and torchao's RCEIL mode) or ``"e4m3_over_fp32"`` (NVFP4: an e4m3 scale per block
  under one fp32 scale per tensor). Each kind carries its numbers (bits, smallest scale).
- ``amax`` is an :class:`AmaxKind`: ``"current"`` (the scale comes from this tensor's amax) or
  ``"delayed"`` (from the largest amax of the previous ``history`` steps; per-tensor fp32 scales
  only).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .formats import Specials, UnknownFormatError, get_format
from .validation import enum_member, positive_int

__all__ = [
    "Recipe",
    "RECIPES",
    "get_recipe",
    "IntElement",
    "ScaleKind",
    "AmaxKind",
    "E8M0Rule",
    "PER_TENSOR",
    "PER_ROW",
    "PER_COLUMN",
    "TILE_1X128",
    "BLOCK_128X128",
    "MX_BLOCK",
    "NVFP4_BLOCK",
    "group_along_k",
]

#: Granularities: (rows, cols) of one scale's block on an (M, K) tensor; None = the whole extent.
PER_TENSOR = (None, None)
PER_ROW = (1, None)  # per token (activations), or per output channel of a weight stored (N, K)
PER_COLUMN = (None, 1)  # per column: per output channel of a weight stored (K, N)
TILE_1X128 = (1, 128)  # DeepSeek-V3's activation tiles
BLOCK_128X128 = (128, 128)  # DeepSeek-V3's weight blocks
MX_BLOCK = (1, 32)  # OCP MX v1.0: 32 elements share a scale
NVFP4_BLOCK = (1, 16)


def group_along_k(g: int) -> tuple[int, int]:
    """The block of an int4-style group quantizer: ``g`` consecutive elements along K of one row."""
    return (1, positive_int("group size g", g))


class IntElement(enum.StrEnum):
    """Integer elements, symmetric: codes run from -qmax to qmax."""

    INT8 = "int8"
    INT4 = "int4"

    @property
    def bits(self) -> int:
        """Bits of one stored code."""
        return {"int8": 8, "int4": 4}[self.value]

    @property
    def qmax(self) -> int:
        """The largest code, 2**(bits - 1) - 1 (127, 7)."""
        return 2 ** (self.bits - 1) - 1


class E8M0Rule(enum.StrEnum):
    """How a block's amax becomes an e8m0 (power-of-two) scale exponent."""

    FLOOR = "floor"  # OCP MX v1.0: floor(log2(amax)) - emax of the element format
    RCEIL = "rceil"  # cuBLAS's UE8M0 conversion, torchao's RCEIL: ceil(log2(amax / max_element))


class ScaleKind(enum.StrEnum):
    """What one block's scale is, and the numbers that come with it."""

    FP32 = "fp32"  # fp32(amax / max_element)
    E8M0 = "e8m0"  # a power of two, OCP MX v1.0's floor rule
    E8M0_RCEIL = "e8m0_rceil"  # a power of two rounded up (cuBLAS, torchao RCEIL)
    E4M3_OVER_FP32 = "e4m3_over_fp32"  # NVFP4: an e4m3 block scale under one fp32 tensor scale

    @property
    def bits(self) -> int:
        """Bits of one block scale (NVFP4's per-tensor fp32 scale not included)."""
        return 32 if self is ScaleKind.FP32 else 8

    @property
    def tensor_scale_bits(self) -> int:
        """Bits of a scale stored once per tensor on top of the block scales (32 for NVFP4, else 0)."""
        return 32 if self is ScaleKind.E4M3_OVER_FP32 else 0

    @property
    def smallest(self) -> float:
        """The smallest positive block scale: fp32 2**-149, e8m0 2**-127, e4m3 2**-9 (NVFP4's block
        factor). An all-zero block gets it, never 0."""
        return {"fp32": 2.0**-149, "e8m0": 2.0**-127, "e8m0_rceil": 2.0**-127, "e4m3_over_fp32": 2.0**-9}[self.value]

    @property
    def e8m0_rule(self) -> E8M0Rule | None:
        """The rule of a power-of-two scale; None for the others."""
        return {"e8m0": E8M0Rule.FLOOR, "e8m0_rceil": E8M0Rule.RCEIL}.get(self.value)


class AmaxKind(enum.StrEnum):
    """Whose amax a scale comes from."""

    CURRENT = "current"  # this tensor's
    DELAYED = "delayed"  # the largest of the previous ``history`` steps'


@dataclass(frozen=True)
class Recipe:
    """How a 2-D tensor (M, K) is quantized: ``x ~ q * scale`` with one scale per ``block``.

    Attributes
    ----------
    element: "int8", "int4", or a signed float format name ("e4m3fn", "e5m2", "e2m1fn", ...).
    block: (rows, cols) of the block one scale covers; None = the whole extent of that axis.
    scale: a :class:`ScaleKind` (or its string): "fp32", "e8m0" (MX v1.0's floor rule, float
        elements only), "e8m0_rceil" (a power of two rounded up from amax / max_element:
        cuBLAS's UE8M0 conversion, torchao's RCEIL) or
        "e4m3_over_fp32" (NVFP4, float elements).
    amax: an :class:`AmaxKind` (or its string): "current" or "delayed".
    history: H, the length of the amax history of a delayed recipe (None for "current").
    name: a label for tables and plots; not part of equality.
    """

    element: str = "int8"
    block: tuple[int | None, int | None] = PER_TENSOR
    scale: ScaleKind | str = ScaleKind.FP32
    amax: AmaxKind | str = AmaxKind.CURRENT
    history: int | None = None
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "block", _check_block(self.block))
        object.__setattr__(self, "element", _check_element(self.element))
        object.__setattr__(self, "scale", enum_member(ScaleKind, self.scale, "scale"))
        object.__setattr__(self, "amax", enum_member(AmaxKind, self.amax, "amax"))
        if self.scale != ScaleKind.FP32 and self.is_int:
            raise ValueError(
                f"scale '{self.scale}' needs a float element format (its rule uses the element format's "
                f"largest exponent or value); the integer element {self.element!r} takes an 'fp32' scale"
            )
        if self.amax == AmaxKind.CURRENT:
            if self.history is not None:
                raise ValueError(f"history={self.history!r} is only for amax='delayed'; leave it None for 'current'")
        else:
            positive_int("history (the amax history length H of a delayed recipe)", self.history)
            if self.block != PER_TENSOR or self.scale != "fp32":
                raise ValueError(
                    "delayed scaling is per tensor with an fp32 scale (block (None, None), scale 'fp32'); "
                    f"got block {self.block}, scale '{self.scale}'"
                )

    # ------------------------------------------------------------------ derived
    @property
    def is_int(self) -> bool:
        """Whether the elements are integers (int8 / int4) rather than a float format."""
        return self.element in (IntElement.INT8, IntElement.INT4)

    @property
    def element_bits(self) -> int:
        """Bits of one stored element."""
        return IntElement(self.element).bits if self.is_int else get_format(self.element).bits

    @property
    def element_max(self) -> float:
        """The largest element magnitude: 127 (int8), 7 (int4), or the float format's max."""
        return float(IntElement(self.element).qmax) if self.is_int else get_format(self.element).max

    @property
    def scale_bits(self) -> int:
        """Bits of one block scale (the per-tensor fp32 scale of NVFP4 is not included)."""
        return self.scale.bits

    @property
    def tensor_scale_bits(self) -> int:
        """Bits of a scale stored once per tensor on top of the block scales (32 for NVFP4, else 0)."""
        return self.scale.tensor_scale_bits

    def __str__(self) -> str:
        return self.name or f"{self.element} block={self.block} scale={self.scale} amax={self.amax}"


def _check_block(block) -> tuple[int | None, int | None]:
    msg = (
        "block must be a pair (rows, cols) of positive ints or None (None = the whole extent of "
        "that axis), e.g. (None, None) per tensor, (1, None) per row, (1, 32) MX"
    )
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise ValueError(f"{msg}; got {block!r}")
    out = []
    for b in block:
        if b is None:
            out.append(None)
            continue
        try:
            out.append(positive_int("block size", b))
        except ValueError:
            raise ValueError(f"{msg}; got {tuple(block)!r} (a block size must be positive)") from None
    return tuple(out)


def _check_element(element) -> str:
    accepted = "'int8', 'int4' or a signed float format name ('e4m3fn', 'e5m2', 'e2m1fn', 'bf16', ...)"
    if not isinstance(element, str):
        raise ValueError(f"unknown element format {element!r}; expected {accepted}")
    key = element.strip().lower()
    if key in ("int8", "int4"):
        return IntElement(key)
    try:
        f = get_format(key)
    except UnknownFormatError:
        raise ValueError(f"unknown element format {element!r}; expected {accepted}") from None
    if not f.signed or f.specials is Specials.POWER_OF_TWO:
        raise ValueError(f"element format {element!r} has no sign or no zero (a scale format); expected {accepted}")
    return f.name


def _named() -> Mapping[str, Recipe]:
    rs = [
        Recipe("int8", PER_TENSOR, name="int8 per-tensor"),
        Recipe("int8", PER_ROW, name="int8 per-row"),
        Recipe("int8", PER_COLUMN, name="int8 per-column"),
        Recipe("e4m3fn", PER_TENSOR, name="fp8 e4m3 per-tensor"),
        Recipe("e4m3fn", PER_ROW, name="fp8 e4m3 per-row"),
        Recipe("e4m3fn", TILE_1X128, name="fp8 e4m3 1x128"),
        Recipe("e4m3fn", BLOCK_128X128, name="fp8 e4m3 128x128"),
        Recipe("e5m2", PER_TENSOR, name="fp8 e5m2 per-tensor"),
        Recipe("e4m3fn", PER_TENSOR, amax="delayed", history=16, name="fp8 e4m3 delayed H=16"),
        Recipe("e4m3fn", MX_BLOCK, "e8m0", name="MXFP8"),
        Recipe("e5m2", MX_BLOCK, "e8m0", name="MXFP8 e5m2"),
        Recipe("e2m1fn", MX_BLOCK, "e8m0", name="MXFP4"),
        Recipe("e4m3fn", MX_BLOCK, "e8m0_rceil", name="MXFP8 RCEIL"),
        Recipe("e2m1fn", MX_BLOCK, "e8m0_rceil", name="MXFP4 RCEIL"),
        Recipe("e2m1fn", NVFP4_BLOCK, "e4m3_over_fp32", name="NVFP4"),
        Recipe("int4", group_along_k(128), name="int4 g128"),
    ]
    return MappingProxyType({r.name: r for r in rs})


#: The named recipes of chapters 06-07.
RECIPES: Mapping[str, Recipe] = _named()


def get_recipe(recipe: Recipe | str) -> Recipe:
    """A :class:`Recipe`, or the one named in :data:`RECIPES`."""
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, str) and recipe in RECIPES:
        return RECIPES[recipe]
    raise ValueError(f"unknown recipe {recipe!r}; a Recipe or one of: {', '.join(map(repr, RECIPES))}")
