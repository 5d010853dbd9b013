"""Quantizing by a recipe: ``x ~ q * scale``, one scale per block of a 2-D tensor (M, K).

:func:`quantize` returns ``(q, scales)``: q has the shape of x and holds the element values (int8
and int4 as integers in an int8 array; float elements as float64 values on the format's grid);
``scales`` has shape ``(ceil(M / br), ceil(K / bc))`` (1 along an axis whose block is None) and
holds each block's effective scale as float64. :func:`dequantize` multiplies them back.

How amax becomes a scale (``recipe.scale``):

- ``"fp32"``: ``scale = fp32(amax / max_element)``; max_element is 127 (int8), 7 (int4) or the
  float format's max (448 for e4m3fn).
- ``"e8m0"`` (OCP MX v1.0): ``scale = 2**(floor(log2(amax)) - emax_elem)``, emax_elem the exponent
  of the element format's largest normal (e4m3fn 8, e5m2 15, e2m1fn 2). The floor means a block's
  amax / scale lies in [2**emax_elem, 2**(emax_elem+1)), which can exceed the element's max: such
  values are clamped (an MXFP4 block whose amax is 7.9 stores 6, 24% low; under "e8m0_rceil" it
  comes back as 8). Exponents below -127 are raised
  to -127 (the smallest e8m0 value); above 127 is an error.
- ``"e8m0_rceil"`` (cuBLAS's UE8M0 scale conversion; torchao's ``ScaleCalculationMode.RCEIL``):
  ``scale = 2**ceil(log2(fp32(amax / max_element)))``, the power of two at or above the fp32
  quotient, taken exactly (``cvt.rp`` to ue8m0). amax / scale is then at most max_element (up to the
  fp32 rounding of the quotient, which the clamp below absorbs), so no block clips, and it lies
  above max_element / 2, so the element format's top binade stays in use. torchao 0.18's eager
  fallback takes the ceil of a float32 ``log2``, which rounds to an integer when the quotient is a
  few float32 steps above a power of two: there it gives the exponent below this one.
- ``"e4m3_over_fp32"`` (NVFP4): one fp32 tensor scale ``s_t = fp32(amax_tensor / (448 * 6))``,
  a block scale ``s_b = e4m3(amax_block / 6 / s_t)``, and ``q = fp4(x / (s_b * s_t))``. The
  scale returned for the block is the product ``s_b * s_t`` (exact in float64);
  :func:`nvfp4_scales` gives the two factors.

Choices, each tested:

- Shapes that do not divide the block are padded with zeros internally (zeros do not change an
  amax); q comes back with x's shape, scales with the ceil shape above.
- A scale is never below its format's smallest positive value (fp32 2**-149, e8m0 2**-127,
  e4m3 2**-9): an all-zero block gets that smallest scale and q = 0, never 0/0.
- A non-finite amax (inf or NaN in a block) is a ValueError naming the tensor and the block.
- Values are clamped to +-max_element before the cast: e4m3fn has no inf, so an overflowing
  value would become NaN in the cast used here (``round_to``, as in ml_dtypes 0.5 to 0.7; torch
  2.13's eager cast saturates to 448 instead), and a rounded-down scale can push amax / scale
  just past the max.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .formats import get_format
from .recipes import AmaxKind, E8M0Rule, Recipe, ScaleKind, get_recipe
from .rounding import round_to
from .validation import enum_member, nonnegative_int, real_float64

__all__ = [
    "quantize",
    "dequantize",
    "block_amax",
    "nvfp4_scales",
    "e8m0_exponents",
    "DelayedScaler",
    "bytes_per_element",
    "storage_bits",
]


# ====================================================================== blocks


def _as_matrix(x, name: str) -> np.ndarray:
    arr = real_float64(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (M, K), got shape {arr.shape}")
    return arr


def _block_dims(shape: tuple[int, int], recipe: Recipe) -> tuple[int, int]:
    """The block (br, bc) in elements, None replaced by the whole extent (at least 1)."""
    M, K = shape
    br, bc = recipe.block
    return (max(M, 1) if br is None else br, max(K, 1) if bc is None else bc)


def _grid(shape: tuple[int, int], recipe: Recipe) -> tuple[int, int]:
    br, bc = _block_dims(shape, recipe)
    return (-(-shape[0] // br), -(-shape[1] // bc))


def _blocked(x: np.ndarray, recipe: Recipe) -> np.ndarray:
    """x zero-padded to whole blocks and viewed as (gm, br, gk, bc)."""
    br, bc = _block_dims(x.shape, recipe)
    gm, gk = _grid(x.shape, recipe)
    xp = np.zeros((gm * br, gk * bc))
    xp[: x.shape[0], : x.shape[1]] = x
    return xp.reshape(gm, br, gk, bc)


def _expand(scales: np.ndarray, shape: tuple[int, int], recipe: Recipe) -> np.ndarray:
    """Each block's scale repeated over its elements, cropped to ``shape``."""
    br, bc = _block_dims(shape, recipe)
    return np.repeat(np.repeat(scales, br, axis=0), bc, axis=1)[: shape[0], : shape[1]]


def block_amax(x, recipe: Recipe | str, name: str = "x") -> np.ndarray:
    """max |x| of each block, shape (ceil(M/br), ceil(K/bc)); a ValueError naming ``name`` and the
    first block (row, col) whose amax is not finite."""
    return _block_amax(_as_matrix(x, name), get_recipe(recipe), name)


def _block_amax(x: np.ndarray, recipe: Recipe, name: str) -> np.ndarray:
    amax = np.abs(_blocked(x, recipe)).max(axis=(1, 3)) if x.size else np.zeros(_grid(x.shape, recipe))
    bad = np.argwhere(~np.isfinite(amax))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(
            f"{name}: block ({i}, {j}) has a non-finite amax ({amax[i, j]}); "
            f"{len(bad)} of {amax.size} blocks hold inf or NaN"
        )
    return amax


# ====================================================================== scales


def _fp32(v) -> np.ndarray:
    return np.asarray(v, dtype=np.float64).astype(np.float32).astype(np.float64)


def e8m0_exponents(amax, element: str, rule: E8M0Rule | str = E8M0Rule.FLOOR) -> np.ndarray:
    """The e8m0 scale exponent of each amax, raised to -127 (the smallest e8m0 exponent) where
    smaller or where amax is 0. int64 array.

    rule "floor" (OCP MX v1.0): floor(log2(amax)) - emax_elem. rule "rceil" (cuBLAS, torchao's
    RCEIL): ceil(log2(d)) with d = fp32(amax / max_element), exactly."""
    rule = enum_member(E8M0Rule, rule, "e8m0 rule")
    amax = np.asarray(amax, dtype=np.float64)
    f = get_format(element)
    if rule == E8M0Rule.FLOOR:
        _, e = np.frexp(amax)  # amax = m * 2**e with m in [0.5, 1): floor(log2(amax)) = e - 1, exactly
        exp = e.astype(np.int64) - 1 - f.emax
        exp = np.where(amax > 0, exp, -127)
    else:
        d = _fp32(amax / f.max)
        m, e = np.frexp(d)  # d = m * 2**e: a power of two when m == 0.5, then log2(d) = e - 1 exactly
        exp = e.astype(np.int64) - (m == 0.5)
        exp = np.where(d > 0, exp, -127)  # amax 0, or a quotient below fp32's range: log2 is -inf
    exp = np.maximum(exp, -127)
    if np.any(exp > 127):
        raise ValueError(f"an MX scale exponent {int(exp.max())} exceeds e8m0's largest (127): amax too large")
    return exp


def nvfp4_scales(amax_blocks: np.ndarray, element: str = "e2m1fn") -> tuple[np.ndarray, float]:
    """NVFP4's two scale factors from the block amaxes: (block scales on the e4m3fn grid,
    the fp32 tensor scale s_t = fp32(amax_tensor / (448 * max_element)))."""
    e4m3 = get_format("e4m3fn")
    emax = get_format(element).max
    amax_t = float(amax_blocks.max()) if amax_blocks.size else 0.0
    s_t = max(float(_fp32(amax_t / (e4m3.max * emax))), ScaleKind.FP32.smallest)
    s_b = round_to(amax_blocks / emax / s_t, e4m3, saturate=True)
    return np.maximum(s_b, ScaleKind.E4M3_OVER_FP32.smallest), s_t


def _scales_from_amax(amax: np.ndarray, recipe: Recipe) -> np.ndarray:
    if recipe.scale == ScaleKind.FP32:
        return np.maximum(_fp32(amax / recipe.element_max), ScaleKind.FP32.smallest)
    if recipe.scale.e8m0_rule is not None:
        return np.ldexp(1.0, e8m0_exponents(amax, recipe.element, recipe.scale.e8m0_rule))
    s_b, s_t = nvfp4_scales(amax, recipe.element)
    return s_b * s_t  # exact: 4 significant bits times 24


# ====================================================================== quantize / dequantize


def _cast(x: np.ndarray, scale_full: np.ndarray, recipe: Recipe) -> np.ndarray:
    """q = cast(clamp(x / scale, +-max_element)). The clamp comes first because e4m3fn has no inf:
    a value past its max would become NaN in ``round_to``'s cast (and ml_dtypes 0.5 to 0.7's),
    not the max; torch 2.13's eager cast would saturate. The clamp makes both agree."""
    m = recipe.element_max
    v = np.clip(x / scale_full, -m, m)
    if recipe.is_int:
        return np.rint(v).astype(np.int8)  # ties to even, like round_to
    return round_to(v, recipe.element)


def _quantize_with(x: np.ndarray, scales: np.ndarray, recipe: Recipe) -> tuple[np.ndarray, np.ndarray]:
    return _cast(x, _expand(scales, x.shape, recipe), recipe), scales


def quantize(x, recipe: Recipe | str, name: str = "x") -> tuple[np.ndarray, np.ndarray]:
    """Quantize a 2-D ``x`` (M, K) by ``recipe``: returns (q (M, K), scales (ceil(M/br), ceil(K/bc)))
    with ``x ~ q * scale``. q: int8 array for int8/int4 elements, float64 on the element grid
    otherwise. Current amax only (a delayed recipe needs :class:`DelayedScaler`)."""
    recipe = get_recipe(recipe)
    if recipe.amax == AmaxKind.DELAYED:
        raise ValueError(f"recipe {recipe} scales from an amax history: use DelayedScaler(recipe).quantize(x)")
    x = _as_matrix(x, name)
    return _quantize_with(x, _scales_from_amax(_block_amax(x, recipe, name), recipe), recipe)


def dequantize(q, scales, recipe: Recipe | str) -> np.ndarray:
    """x_dq = q * scale of each element's block, float64 of q's shape (M, K)."""
    recipe = get_recipe(recipe)
    q = _as_matrix(q, "q")
    scales = np.asarray(scales, dtype=np.float64)
    want = _grid(q.shape, recipe)
    if scales.shape != want:
        raise ValueError(
            f"scales has shape {scales.shape}, but q of shape {q.shape} with block "
            f"{recipe.block} needs {want} (ceil(M/br), ceil(K/bc))"
        )
    return q * _expand(scales, q.shape, recipe)


# ====================================================================== delayed scaling


class DelayedScaler:
    """Per-tensor delayed scaling (Transformer Engine's idea), for a recipe with amax="delayed".

    The scale used at step t is ``fp32(2**margin * amax_h / max_element)``, where amax_h comes from
    the previous H steps' amaxes, not this one: their largest (``amax_compute="max"``) or the last
    (``"most_recent"``); at t = 0, with no history yet, this step's amax. After quantizing, step t's
    amax joins the history and the oldest leaves. A value whose magnitude jumps above
    ``amax_h * 2**margin`` is clamped to +-max_element on that step.

    Transformer Engine's ``DelayedScaling`` recipe has the same parts (``amax_history_len``, default
    1024; ``margin``, default 0; ``amax_compute_algo``, "max" or "most_recent"), with the opposite
    scale convention: TE's ``scale`` multiplies x (``q = x * scale``), so TE's ``scale`` is this
    class's ``1 / scale`` (an ``inv_scale``), and TE's ``scale_inv`` is this scale.
    """

    def __init__(self, recipe: Recipe | str, margin: int = 0, amax_compute: str = "max"):
        recipe = get_recipe(recipe)
        if recipe.amax != AmaxKind.DELAYED:
            raise ValueError(f"DelayedScaler needs a recipe with amax='delayed', got {recipe}")
        margin = nonnegative_int("margin", margin, "the scale is multiplied by 2**margin")
        if amax_compute not in ("max", "most_recent"):
            raise ValueError(f"amax_compute must be 'max' or 'most_recent', got {amax_compute!r}")
        self.recipe = recipe
        self.margin = int(margin)
        self.amax_compute = amax_compute
        self.history: deque[float] = deque(maxlen=recipe.history)

    def next_scale(self) -> float | None:
        """The scale the next step will use, or None before the first step."""
        if not self.history:
            return None
        amax = max(self.history) if self.amax_compute == "max" else self.history[-1]
        s = float(_fp32(amax * 2.0**self.margin / self.recipe.element_max))
        return float(max(s, ScaleKind.FP32.smallest))

    def quantize(self, x, name: str = "x") -> tuple[np.ndarray, np.ndarray]:
        """One step: quantize ``x`` with the history's scale, then record its amax. (q, scales (1, 1))."""
        x = _as_matrix(x, name)
        amax = _block_amax(x, self.recipe, name)
        s = self.next_scale()
        if s is None:
            s = float(
                max(
                    float(_fp32(float(amax[0, 0]) * 2.0**self.margin / self.recipe.element_max)),
                    ScaleKind.FP32.smallest,
                )
            )
        self.history.append(float(amax[0, 0]))
        return _quantize_with(x, np.full((1, 1), s), self.recipe)


# ====================================================================== storage


def storage_bits(recipe: Recipe | str, shape: tuple[int, int]) -> dict[str, int]:
    """Bits to store an (M, K) tensor: {"elements", "block_scales", "tensor_scale", "total"}.
    Blocks that overhang the edge are counted whole (their scale is stored)."""
    recipe = get_recipe(recipe)
    M, K = (int(v) for v in shape)
    if M < 1 or K < 1:
        raise ValueError(f"shape must be (M, K) with M, K >= 1, got {shape!r}")
    gm, gk = _grid((M, K), recipe)
    out = {
        "elements": M * K * recipe.element_bits,
        "block_scales": gm * gk * recipe.scale_bits,
        "tensor_scale": recipe.tensor_scale_bits,
    }
    out["total"] = sum(out.values())
    return out


def bytes_per_element(recipe: Recipe | str, shape: tuple[int, int]) -> float:
    """Bytes per element of an (M, K) tensor stored by ``recipe``, scales included:
    (element bits * M * K + scale bits * blocks + tensor scale bits) / 8 / (M * K)."""
    M, K = shape
    return storage_bits(recipe, shape)["total"] / 8 / (int(M) * int(K))
