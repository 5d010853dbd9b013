"""Quantized inference on the course's small language model (chapter 12): fake-quantized copies of
a :class:`~nbhelpers.tiny_lm.TinyLM`, quantized activations and KV cache through its forward hooks,
and what each costs on held-out text.

Everything here is fake quantization in float32 on the CPU: a weight is replaced by its
dequantized quantized value, an activation or a cached key by ``dequantize(quantize(x))``, and the
products stay float32. That measures the accuracy a quantized engine would have (whose integer or
fp8 products are exact and whose fp32 accumulation differs from this one's by rounding only), not
its speed.

The methods are objects, not strings:

- :class:`WeightOnly`: int8 / int4 weights by round-to-nearest, GPTQ or AWQ (an
  :class:`Algorithm`), per output channel (``group=None``) or in groups along K, symmetric or
  with a zero point; the arithmetic is :mod:`~nbhelpers.weight_quant`'s.
- :class:`BlockWeights`: a weight format of chapters 06-07 given by a
  :class:`~nbhelpers.recipes.Recipe` (MXFP4, NVFP4, ...), quantized by
  :func:`nbhelpers.scaling.quantize` on the weight as stored, (N, K): blocks run along K.
- :class:`W8A8`: weights and every linear layer's input quantized, fp8 e4m3 or int8, each with its
  granularity (:class:`ActScale`: per tensor, or per token; the weights per tensor or per output
  channel), optionally SmoothQuant's migration first (``smooth_alpha``).
- :class:`KVCache`: keys and values quantized as they enter the cache (:class:`KVScale`: one scale
  per tensor or per KV head, per layer, for keys and values apart).

:func:`quantized_copy` makes the model a method runs (weights replaced, SmoothQuant's factors
folded into the RMSNorm weights); :func:`activation_transform` and :func:`kv_cache_transform` give
the forward hooks; :func:`evaluate` measures bits per byte, the top-1 agreement with the
reference model and, given the reference's :func:`reference_log_probs`, the mean KL divergence
from the reference's next-byte distribution; :func:`inject_outliers` gives the model the massive
activation channels it lacks.

Choices, each stated where it is made:

- Groups that do not divide K. The model's linear layers read K = 192 (d_model) or 512 (d_ff)
  inputs. 32 divides both; 128 divides 512 but not 192. A layer whose K the group does not divide
  gets :func:`effective_group`: the largest divisor of K not above the group (96 for 128 on
  192): the same two scales per row that the GPTQ reference's ragged groups (128, then 64) would
  store, on equal halves. :func:`layer_groups` lists what each layer got.
- Calibration (:func:`calibration_windows`): ``n_windows`` windows of ``seq_len`` bytes of the
  *training* text at offsets drawn by ``numpy.random.default_rng(seed)`` (default 8 x 256 = 2,048
  tokens, seed 0), never the held-out text. The inputs of every linear layer come from one forward
  of the float model with ``keep_inputs``; GPTQ and AWQ calibrate every layer on those (the
  reference GPTQ re-collects each block's inputs from the already quantized blocks before it; this
  does not).
- The fp32 weight is ``fp32(dequantize(...))``: weight_quant's float64 dequantized value rounded
  once to float32 (a float32 scale times a code of up to 8 bits can need 32 significant bits); the
  rounding is 2**-24 relative, far below any quantization step here.
- Activation scales are dynamic, from the amax of the tensor the layer is handed (per tensor: the
  whole (B, T, K) batch; per token: each row), ``scale = fp32(amax / max_element)``, the cast
  ``torch.clamp(x / scale, -max, max).to(float8_e4m3fn)`` (or round-half-even to int8),
  then ``* scale``. So a per-tensor scale depends on the batch it sees: :func:`evaluate` runs
  fixed batches.
- Layers left as stored: ``ignore`` on :class:`WeightOnly` and :class:`W8A8` names linear layers
  (e.g. ``("lm_head",)``) whose weights, and for W8A8 whose inputs, are not quantized, as
  deployed recipes often keep the LM head in 16 bits.
- KL divergence (:meth:`Evaluation.kl`): at each position, ``sum_v p_ref(v) (log p_ref(v) -
  log p(v))`` in bits, the reference's next-byte distribution against the method's, averaged per
  window; never negative, it resolves differences that a paired bits-per-byte difference (which can
  come out negative by chance) does not.
- KV-cache scales are static, calibrated: a cached entry cannot be rescaled after it is written,
  so the scale comes from the calibration set's amax (per layer, keys and values apart, per tensor
  or per KV head), as serving engines' ``k_scale`` / ``v_scale`` do; a later value beyond it clips
  to the format's max.
"""

from __future__ import annotations

import copy
import enum
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from .outlier_remedies import smoothing_scales
from .recipes import PER_ROW, PER_TENSOR, Recipe, get_recipe
from .scaling import dequantize as dequantize_recipe
from .scaling import quantize as quantize_recipe
from .tiny_lm import InputTransform, KVTransform, TinyLM
from .validation import int_in_range, positive_int, positive_number
from .weight_quant import awq_scales, dequantize, gptq_quantize, hessian, rtn_quantize

__all__ = [
    "Algorithm",
    "WeightOnly",
    "BlockWeights",
    "ActScale",
    "W8A8",
    "KVScale",
    "KVCache",
    "Method",
    "effective_group",
    "layer_groups",
    "calibration_windows",
    "heldout_windows",
    "calibration_inputs",
    "quantized_copy",
    "with_layers_from",
    "fake_quant",
    "activation_transform",
    "kv_cache_scales",
    "kv_cache_transform",
    "top1_predictions",
    "reference_log_probs",
    "Evaluation",
    "evaluate",
    "inject_outliers",
]

_ELEMENTS = ("e4m3fn", "int8")
_MIN_SCALE = 2.0**-149  # fp32's smallest positive: an all-zero tensor gets it, never 0/0


# ====================================================================== the methods


def _ignore(value) -> tuple[str, ...]:
    """``ignore`` as a tuple of layer names (a str alone is one name)."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) and n for n in names):
        raise TypeError(
            f"ignore must be a tuple of linear-layer names (TinyLM.linears(), e.g. ('lm_head',)), got {value!r}"
        )
    return tuple(names)


def _ignore_suffix(ignore: tuple[str, ...]) -> str:
    return f" ({', '.join(ignore)} kept)" if ignore else ""


class Algorithm(enum.StrEnum):
    """How integer weight codes are chosen."""

    RTN = "rtn"  # round to nearest, each group's scale from its own range
    GPTQ = "gptq"  # Frantar et al. 2022: column by column with error feedback through H^-1
    AWQ = "awq"  # Lin et al. 2023: a per-input-channel factor searched on activation statistics, then RTN


@dataclass(frozen=True)
class WeightOnly:
    """Integer weights, activations untouched: ``bits`` (2..8), ``group`` input channels per scale
    (None: one scale per output channel; see :func:`effective_group`), symmetric or with a zero
    point, codes chosen by ``algorithm`` (GPTQ and AWQ need calibration inputs); the linear layers
    named in ``ignore`` keep their weights as stored.

    AWQ here is per layer: each linear layer searches its own factor vector on its own input and
    folds 1 / s back into its own weight (the quantization error is what the search sees), with no
    weight clipping search. The deployable form shares one factor vector among the layers that read
    one RMSNorm (folded into the norm), folds o_proj's into v_proj and down_proj's into up_proj,
    searches on a whole block's output and also searches a clipping range."""

    bits: int = 4
    group: int | None = None
    symmetric: bool = True
    algorithm: Algorithm = Algorithm.RTN
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        int_in_range("bits", self.bits, 2, 8, "the width of a weight code")
        if self.group is not None:
            positive_int("group", self.group, "input channels per scale; None for one per output channel")
        if not isinstance(self.symmetric, bool):
            raise TypeError(f"symmetric must be True or False, got {self.symmetric!r}")
        object.__setattr__(self, "algorithm", Algorithm(self.algorithm))
        object.__setattr__(self, "ignore", _ignore(self.ignore))

    @property
    def name(self) -> str:
        gran = "per-channel" if self.group is None else f"g{self.group}"
        zp = "" if self.symmetric else " zero-point"
        return f"{self.algorithm.value.upper()} int{self.bits} {gran}{zp}{_ignore_suffix(self.ignore)}"

    @property
    def needs_calibration(self) -> bool:
        return self.algorithm is not Algorithm.RTN


@dataclass(frozen=True)
class BlockWeights:
    """Weights in a block format of chapters 06-07 (a :class:`~nbhelpers.recipes.Recipe` or its name
    in ``RECIPES``: "MXFP4", "NVFP4", ...), applied to each weight as stored, (N, K)."""

    recipe: Recipe | str

    def __post_init__(self) -> None:
        object.__setattr__(self, "recipe", get_recipe(self.recipe))

    @property
    def name(self) -> str:
        return f"{self.recipe} weights"

    needs_calibration = False


class ActScale(enum.StrEnum):
    """Granularity of an activation's scale: one for the tensor, or one per token (row)."""

    PER_TENSOR = "per-tensor"
    PER_TOKEN = "per-token"


@dataclass(frozen=True)
class W8A8:
    """Weights and activations quantized to ``element`` ("e4m3fn" or "int8"). ``activations``: an
    :class:`ActScale`; ``weight_per_channel``: one weight scale per output channel (True) or per
    tensor (False). ``smooth_alpha``: SmoothQuant's migration strength, or None for none.

    SmoothQuant (Xiao et al. 2023) is applied where its factors can be folded into the op before:
    the layers that read an RMSNorm (q, k, v of each block share one factor per channel, computed
    with the three weights together; gate and up share one; lm_head), the factor divided into the
    norm's weight. o_proj and down_proj read no norm and are not smoothed. The linear layers named
    in ``ignore`` keep their weights as stored and take their inputs unquantized."""

    element: str = "e4m3fn"
    activations: ActScale = ActScale.PER_TENSOR
    weight_per_channel: bool = False
    smooth_alpha: float | None = None
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.element not in _ELEMENTS:
            raise ValueError(f"element must be one of {_ELEMENTS} (fp8 e4m3 or int8), got {self.element!r}")
        object.__setattr__(self, "activations", ActScale(self.activations))
        if not isinstance(self.weight_per_channel, bool):
            raise TypeError(f"weight_per_channel must be True or False, got {self.weight_per_channel!r}")
        a = self.smooth_alpha
        if a is not None and (isinstance(a, bool) or not (isinstance(a, (int, float)) and 0.0 <= a <= 1.0)):
            raise ValueError(f"smooth_alpha must be None or a number in [0, 1], got {self.smooth_alpha!r}")
        object.__setattr__(self, "ignore", _ignore(self.ignore))

    @property
    def name(self) -> str:
        el = "fp8" if self.element == "e4m3fn" else "int8"
        w = "per-channel" if self.weight_per_channel else "per-tensor"
        sq = f" SmoothQuant a={self.smooth_alpha:g}" if self.smooth_alpha is not None else ""
        return f"W8A8 {el} act {self.activations.value} w {w}{sq}{_ignore_suffix(self.ignore)}"

    @property
    def needs_calibration(self) -> bool:
        return self.smooth_alpha is not None

    @property
    def weight_recipe(self) -> Recipe:
        return Recipe(self.element, PER_ROW if self.weight_per_channel else PER_TENSOR)


class KVScale(enum.StrEnum):
    """Granularity of a KV-cache scale, per layer and for keys and values apart."""

    PER_TENSOR = "per-tensor"
    PER_HEAD = "per-head"


@dataclass(frozen=True)
class KVCache:
    """Keys and values quantized as they enter the cache: ``element`` "e4m3fn", "int8", or "fp32"
    (the identity: the cache unchanged, a control for the plumbing), static ``granularity`` scales."""

    element: str = "e4m3fn"
    granularity: KVScale = KVScale.PER_TENSOR

    def __post_init__(self) -> None:
        if self.element not in (*_ELEMENTS, "fp32"):
            raise ValueError(f"element must be 'e4m3fn', 'int8' or 'fp32' (identity), got {self.element!r}")
        object.__setattr__(self, "granularity", KVScale(self.granularity))

    @property
    def name(self) -> str:
        el = {"e4m3fn": "fp8", "int8": "int8", "fp32": "fp32"}[self.element]
        return f"KV {el} {self.granularity.value}"


Method = WeightOnly | BlockWeights | W8A8


# ====================================================================== groups, text and calibration


def effective_group(K: int, group: int | None) -> int | None:
    """The group a layer with K inputs gets: None stays None (per output channel); a group that
    divides K is kept; otherwise the largest divisor of K not above it (128 on K = 192 gives 96)."""
    K = positive_int("K", K)
    if group is None:
        return None
    g = positive_int("group", group)
    return max(d for d in range(1, min(g, K) + 1) if K % d == 0)


def layer_groups(model: TinyLM, method: WeightOnly) -> dict[str, int | None]:
    """The group each linear layer of ``model`` gets under ``method`` (:func:`effective_group`)."""
    return {name: effective_group(lin.in_features, method.group) for name, lin in model.linears().items()}


def _ids(data: bytes) -> torch.Tensor:
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"text must be bytes, got {type(data).__name__}")
    return torch.from_numpy(np.frombuffer(bytes(data), dtype=np.uint8).astype(np.int64))


def calibration_windows(train: bytes, n_windows: int = 8, seq_len: int = 256, seed: int = 0) -> torch.Tensor:
    """(n_windows, seq_len) int64 byte ids: windows of the training text at offsets drawn uniformly
    by ``numpy.random.default_rng(seed)``, sorted."""
    n, T = positive_int("n_windows", n_windows), positive_int("seq_len", seq_len)
    int_in_range("seed", seed, 0)
    ids = _ids(train)
    if ids.numel() < T:
        raise ValueError(f"the text has {ids.numel()} bytes, fewer than one window of seq_len={T}")
    starts = np.sort(np.random.default_rng(seed).integers(0, ids.numel() - T + 1, size=n))
    return ids[torch.from_numpy(starts)[:, None] + torch.arange(T)[None, :]]


def heldout_windows(heldout: bytes, n_windows: int = 16, seq_len: int = 256) -> torch.Tensor:
    """(n_windows, seq_len + 1) int64: windows spread evenly over the held-out text (window i
    starts at ``i * (len - seq_len - 1) // (n_windows - 1)``), so that a small sample visits every
    part of it, not one file. Each predicts its last seq_len bytes, as in :func:`evaluate`."""
    n, T = positive_int("n_windows", n_windows), positive_int("seq_len", seq_len)
    ids = _ids(heldout)
    last = ids.numel() - (T + 1)
    if last < 0:
        raise ValueError(f"the text has {ids.numel()} bytes, fewer than one window of seq_len + 1 = {T + 1}")
    starts = torch.tensor([i * last // max(n - 1, 1) for i in range(n)])
    return ids[starts[:, None] + torch.arange(T + 1)[None, :]]


def _windows_arg(windows, name: str = "calib") -> torch.Tensor:
    if not (isinstance(windows, torch.Tensor) and windows.dtype == torch.int64 and windows.ndim == 2):
        raise ValueError(
            f"{name} must be an int64 (B, T) tensor of byte ids (calibration_windows(corpus.train) gives one), "
            f"got {type(windows).__name__}"
            + (f" {windows.dtype} {tuple(windows.shape)}" if isinstance(windows, torch.Tensor) else "")
        )
    return windows


@torch.no_grad()
def calibration_inputs(model: TinyLM, calib: torch.Tensor) -> dict[str, np.ndarray]:
    """Each linear layer's input on the calibration windows, as float64 (M, K), M = B * T tokens."""
    out = model(_windows_arg(calib), keep_inputs=True)
    return {name: x.reshape(-1, x.shape[-1]).double().numpy() for name, x in out.inputs.items()}


# ====================================================================== weights


def _set_weight(layer: torch.nn.Linear, w: np.ndarray) -> None:
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(w)).to(torch.float32))


def _weight_only(model: TinyLM, method: WeightOnly, inputs: Mapping[str, np.ndarray] | None) -> None:
    hessians: dict[int, np.ndarray] = {}  # q, k, v (and gate, up) read the same input: one H
    for name, layer in model.linears().items():
        if name in method.ignore:
            continue
        W = layer.weight.detach().double().numpy()
        g = effective_group(W.shape[1], method.group)
        if method.algorithm is Algorithm.RTN:
            w_dq = dequantize(*rtn_quantize(W, method.bits, g, method.symmetric), g)
        elif method.algorithm is Algorithm.GPTQ:
            X = inputs[name]
            H = hessians.setdefault(id(X), hessian(X))
            w_dq = dequantize(*gptq_quantize(W, bits=method.bits, H=H, group=g, symmetric=method.symmetric), g)
        else:
            w_dq = awq_scales(W, inputs[name], method.bits, g, method.symmetric).w_dq
        _set_weight(layer, w_dq)


def _recipe_weights(model: TinyLM, recipe: Recipe, ignore: tuple[str, ...] = ()) -> None:
    for name, layer in model.linears().items():
        if name in ignore:
            continue
        W = layer.weight.detach().double().numpy()
        q, scales = quantize_recipe(W, recipe, name="weight")
        _set_weight(layer, dequantize_recipe(q, scales, recipe))


def _norm_groups(model: TinyLM) -> list[tuple[torch.nn.Parameter, list[str]]]:
    """Each RMSNorm weight and the linear layers that read its output."""
    groups = []
    for i, block in enumerate(model.layers):
        a, m = f"layers.{i}.attn.", f"layers.{i}.mlp."
        groups.append((block.attn_norm.weight, [a + "q_proj", a + "k_proj", a + "v_proj"]))
        groups.append((block.mlp_norm.weight, [m + "gate_proj", m + "up_proj"]))
    groups.append((model.norm.weight, ["lm_head"]))
    return groups


def _smooth(model: TinyLM, alpha: float, inputs: Mapping[str, np.ndarray], ignore: tuple[str, ...] = ()) -> None:
    """SmoothQuant's factors s (K,) per norm, from the calibration amax of its output and the
    weights that read it together: norm weight / s, each reader's column j * s_j. A norm whose
    readers are all in ``ignore`` (not quantized) is left alone."""
    lin = model.linears()
    for norm_w, readers in _norm_groups(model):
        if all(r in ignore for r in readers):
            continue
        x = inputs[readers[0]]
        w_t = np.concatenate([lin[r].weight.detach().double().numpy() for r in readers], axis=0).T  # (K, sum N)
        s = smoothing_scales(x, w_t, alpha)
        with torch.no_grad():
            norm_w.copy_((norm_w.double() / torch.from_numpy(s)).float())
            for r in readers:
                lin[r].weight.copy_((lin[r].weight.double() * torch.from_numpy(s)[None, :]).float())


def quantized_copy(model: TinyLM, method: Method, calib: torch.Tensor | None = None) -> TinyLM:
    """A deep copy of ``model`` whose every linear layer's weight is its dequantized quantized
    version (float32), in eval mode; ``model`` is not changed.

    ``calib``: (B, T) byte ids (:func:`calibration_windows`), needed by GPTQ, AWQ and SmoothQuant;
    their inputs are collected from ``model`` itself. For :class:`W8A8` the copy holds the quantized
    weights (after SmoothQuant's migration, folded into the norms, when asked for); its activations
    are quantized by :func:`activation_transform` in the forward pass."""
    if not isinstance(model, TinyLM):
        raise TypeError(f"model must be a TinyLM, got {type(model).__name__}")
    if not isinstance(method, (WeightOnly, BlockWeights, W8A8)):
        raise TypeError(
            f"method must be a WeightOnly, BlockWeights or W8A8 (KVCache goes to kv_cache_transform), got {method!r}"
        )
    unknown = sorted(set(getattr(method, "ignore", ())) - set(model.linears()))
    if unknown:
        raise ValueError(
            f"ignore names no linear layer of the model: {unknown}; the layers are {list(model.linears())}"
        )
    inputs = None
    if method.needs_calibration:
        if calib is None:
            raise ValueError(f"{method.name} needs calibration windows: pass calib=calibration_windows(corpus.train)")
        inputs = calibration_inputs(model, calib)
    out = copy.deepcopy(model).eval()
    if isinstance(method, WeightOnly):
        _weight_only(out, method, inputs)
    elif isinstance(method, BlockWeights):
        _recipe_weights(out, method.recipe)
    else:
        if method.smooth_alpha is not None:
            _smooth(out, float(method.smooth_alpha), inputs, method.ignore)
        _recipe_weights(out, method.weight_recipe, method.ignore)
    return out


def with_layers_from(qmodel: TinyLM, model: TinyLM, names) -> TinyLM:
    """A copy of ``qmodel`` whose linear layers ``names`` (e.g. ``("lm_head",)``) hold ``model``'s
    weights: for a weight-only method, whose layers are quantized each on its own,
    ``quantized_copy(model, method)`` with those layers put back equals the copy with
    ``ignore=names``, without quantizing the others again."""
    if not isinstance(qmodel, TinyLM) or not isinstance(model, TinyLM):
        raise TypeError(f"qmodel and model must be TinyLMs, got {type(qmodel).__name__} and {type(model).__name__}")
    keep = _ignore(names)
    unknown = sorted(set(keep) - set(model.linears()))
    if unknown:
        raise ValueError(f"names name no linear layer of the model: {unknown}; the layers are {list(model.linears())}")
    out = copy.deepcopy(qmodel).eval()
    src, dst = model.linears(), out.linears()
    with torch.no_grad():
        for name in keep:
            dst[name].weight.copy_(src[name].weight)
    return out


# ====================================================================== activations and the KV cache


def _element_max(element: str) -> float:
    return 127.0 if element == "int8" else float(torch.finfo(torch.float8_e4m3fn).max)


def fake_quant(x: torch.Tensor, scale: torch.Tensor, element: str) -> torch.Tensor:
    """``cast(clamp(x / scale, -max, max)) * scale`` in float32, ``scale`` broadcast against x.
    e4m3fn: torch's ``float8_e4m3fn`` cast (max 448; the clamp first, so that no torch version's
    overflow rule matters); int8: round half to even to -127..127. Returns x's shape, float32."""
    if element not in _ELEMENTS:
        raise ValueError(f"element must be one of {_ELEMENTS}, got {element!r}")
    m = _element_max(element)
    v = torch.clamp(x / scale, -m, m)
    q = torch.round(v) if element == "int8" else v.to(torch.float8_e4m3fn).to(torch.float32)
    return q * scale


def _scale(amax: torch.Tensor, element: str) -> torch.Tensor:
    """fp32(amax / max_element), floored at fp32's smallest positive."""
    return torch.clamp(amax.to(torch.float32) / _element_max(element), min=_MIN_SCALE)


def activation_transform(method: W8A8) -> InputTransform:
    """The ``input_transform`` that quantizes every linear layer's input by ``method``: dynamic
    scales from the amax of the tensor handed in, per tensor or per token (last dimension K); the
    inputs of the layers in ``method.ignore`` pass unchanged."""
    if not isinstance(method, W8A8):
        raise TypeError(f"method must be a W8A8, got {method!r}")
    el, per_token = method.element, method.activations is ActScale.PER_TOKEN
    ignore = frozenset(method.ignore)

    def transform(name: str, x: torch.Tensor) -> torch.Tensor:
        if name in ignore:
            return x
        amax = x.abs().amax(dim=-1, keepdim=True) if per_token else x.abs().amax()
        return fake_quant(x, _scale(amax, el), el)

    return transform


@torch.no_grad()
def kv_cache_scales(model: TinyLM, method: KVCache, calib: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Static scales per layer (k_scale, v_scale) from the calibration windows' keys (after rotary)
    and values: shape (1, 1, 1, 1) per tensor or (1, n_kv_heads, 1, 1) per head, amax / max_element."""
    if not isinstance(method, KVCache):
        raise TypeError(f"method must be a KVCache, got {method!r}")
    kv = model(_windows_arg(calib)).kv
    dims = (0, 2, 3) if method.granularity is KVScale.PER_HEAD else (0, 1, 2, 3)
    el = "e4m3fn" if method.element == "fp32" else method.element
    return [tuple(_scale(t.abs().amax(dim=dims, keepdim=True), el) for t in pair) for pair in kv]


def kv_cache_transform(model: TinyLM, method: KVCache, calib: torch.Tensor) -> KVTransform:
    """The ``kv_transform`` that stores keys and values quantized by ``method``, with static scales
    from :func:`kv_cache_scales` on ``calib``. Keys and values (B, n_kv_heads, T, head_dim) keep
    their shape; element "fp32" returns them unchanged."""
    scales = kv_cache_scales(model, method, calib)
    el = method.element

    def transform(layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if el == "fp32":
            return k, v
        sk, sv = scales[layer]
        return fake_quant(k, sk, el), fake_quant(v, sv, el)

    return transform


# ====================================================================== evaluation


def _eval_windows(text, seq_len: int) -> torch.Tensor:
    """(B, seq_len + 1) windows: a tensor as given, or consecutive windows of bytes overlapping by
    one (the windows of :func:`~nbhelpers.tiny_lm.bits_per_byte`)."""
    if isinstance(text, torch.Tensor):
        if text.dtype != torch.int64 or text.ndim != 2 or text.shape[1] < 2:
            raise ValueError(
                f"text as a tensor must be int64 (B, seq_len + 1) windows, got {text.dtype} {tuple(text.shape)}"
            )
        return text
    ids = _ids(text)
    T = positive_int("seq_len", seq_len)
    n = (ids.numel() - 1) // T
    if n < 1:
        raise ValueError(f"the text has {ids.numel()} bytes: need at least seq_len + 1 = {T + 1}")
    return ids[(torch.arange(n) * T)[:, None] + torch.arange(T + 1)[None, :]]


@torch.no_grad()
def _logits(model: TinyLM, windows: torch.Tensor, batch: int, **forward_kwargs) -> torch.Tensor:
    return torch.cat(
        [model(windows[i : i + batch, :-1], **forward_kwargs).logits for i in range(0, len(windows), batch)]
    )


def top1_predictions(reference: TinyLM, text, seq_len: int = 256, batch: int = 16) -> torch.Tensor:
    """The reference model's next-byte argmax on the windows of ``text``, (B, seq_len): compute it
    once and hand it to :func:`evaluate` in place of the model."""
    return _logits(reference, _eval_windows(text, seq_len), batch).argmax(-1)


@torch.no_grad()
def reference_log_probs(reference: TinyLM, text, seq_len: int = 256, batch: int = 16) -> torch.Tensor:
    """The reference model's next-byte log-probabilities (natural log, float64) on the windows of
    ``text``, (B, seq_len, vocab): compute them once and hand them to :func:`evaluate` in place of
    the model, which then also measures the KL divergence from them (and takes their argmax as the
    reference's top-1 predictions)."""
    if not isinstance(reference, TinyLM):
        raise TypeError(f"reference must be a TinyLM, got {type(reference).__name__}")
    logits = _logits(reference, _eval_windows(text, seq_len), positive_int("batch", batch))
    return torch.log_softmax(logits.double(), dim=-1)


def _window_kl(ref_logp: torch.Tensor, logits: torch.Tensor) -> np.ndarray:
    """Mean over each window's positions of KL(p_ref || p) in bits, (B,)."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    kl = (ref_logp.exp() * (ref_logp - logp)).sum(dim=-1)  # (B, T) nats
    return (kl.clamp(min=0.0).mean(dim=1) / math.log(2)).numpy()


def _mean_se(d: np.ndarray) -> tuple[float, float]:
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size))


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate` measured. bpb: mean cross-entropy in bits per predicted byte;
    late_bpb: the same over the positions with at least seq_len / 2 bytes of context (where a
    long-context effect shows first); top1_agreement: the share of positions whose argmax equals
    the reference's; n_predictions: positions scored; seconds: wall time of the model's passes;
    window_bpb (B,): bpb of each window (their mean is bpb); window_kl (B,): each window's mean
    KL divergence from the reference's next-byte distribution in bits, or None when the reference
    was given without its log-probabilities (:func:`reference_log_probs`)."""

    bpb: float
    late_bpb: float
    top1_agreement: float
    n_predictions: int
    seconds: float
    window_bpb: np.ndarray
    window_kl: np.ndarray | None = None

    def kl(self) -> tuple[float, float]:
        """(mean, standard error over the windows) of the KL divergence from the reference, in bits
        per predicted byte. Never negative: it is 0 only where the two distributions are equal, so
        any change the method makes shows, where a bpb difference can come out either way."""
        if self.window_kl is None:
            raise ValueError(
                "this evaluation has no KL divergence: pass the reference as reference_log_probs(reference, text)"
            )
        if self.window_kl.size < 2:
            raise ValueError(f"a standard error needs >= 2 windows, got {self.window_kl.size}")
        return _mean_se(self.window_kl)

    def difference(self, baseline: Evaluation) -> tuple[float, float]:
        """(mean, standard error) of ``self.bpb - baseline.bpb`` paired window by window: the same
        windows scored by two models, so the text's own variation cancels and what is left is the
        method's. A difference within two standard errors of 0 is not resolved by these windows."""
        a, b = self.window_bpb, baseline.window_bpb
        if a.shape != b.shape or a.size < 2:
            raise ValueError(f"need two evaluations of the same >= 2 windows, got {a.shape} and {b.shape}")
        return _mean_se(a - b)

    def kl_difference(self, other: Evaluation) -> tuple[float, float]:
        """(mean, standard error) of ``self``'s KL divergence less ``other``'s, paired window by
        window: both measured against one reference on the same windows, so what the two methods
        share (the text, and every error they make alike) cancels. Two methods whose KL standard
        errors overlap can still differ by many paired standard errors; a difference within two
        of them is not resolved by these windows."""
        if not isinstance(other, Evaluation):
            raise TypeError(f"other must be an Evaluation, got {type(other).__name__}")
        if self.window_kl is None or other.window_kl is None:
            raise ValueError(
                "both evaluations need a KL divergence: pass the reference as reference_log_probs(reference, text)"
            )
        a, b = self.window_kl, other.window_kl
        if a.shape != b.shape or a.size < 2:
            raise ValueError(f"need two evaluations of the same >= 2 windows, got {a.shape} and {b.shape}")
        return _mean_se(a - b)


def evaluate(
    model: TinyLM,
    reference: TinyLM | torch.Tensor,
    text,
    *,
    seq_len: int = 256,
    batch: int = 16,
    input_transform: InputTransform | None = None,
    kv_transform: KVTransform | None = None,
) -> Evaluation:
    """Bits per byte of ``model`` on ``text`` and the top-1 agreement of its next-byte predictions
    with ``reference`` (a model, its :func:`top1_predictions`, or its :func:`reference_log_probs`,
    which also gives the KL divergence from the reference: :meth:`Evaluation.kl`).

    text: bytes (consecutive windows of seq_len + 1 overlapping by one, as
    :func:`~nbhelpers.tiny_lm.bits_per_byte`, which gives the same bpb) or (B, seq_len + 1) windows
    (:func:`heldout_windows`). Each window is one forward pass over seq_len positions: position t
    is predicted from t + 1 bytes of context, up to the model's full window (256, its training
    length). With a ``kv_transform`` every key and value is quantized before attention reads it,
    which is what decoding with a quantized cache reads: with static scales an entry's quantized
    value does not depend on when it was written, so the one pass equals decoding step by step
    with ``past`` up to float32 rounding (tests/test_quantized_lm.py checks it)."""
    if not isinstance(model, TinyLM):
        raise TypeError(f"model must be a TinyLM, got {type(model).__name__}")
    windows = _eval_windows(text, seq_len)
    batch = positive_int("batch", batch)
    t0 = time.perf_counter()
    logits = _logits(model, windows, batch, input_transform=input_transform, kv_transform=kv_transform)
    seconds = time.perf_counter() - t0
    window_kl = None
    if isinstance(reference, TinyLM):
        ref_top1 = _logits(reference, windows, batch).argmax(-1)
    elif isinstance(reference, torch.Tensor) and reference.shape == logits.shape[:2]:
        ref_top1 = reference
    elif isinstance(reference, torch.Tensor) and reference.shape == logits.shape and reference.is_floating_point():
        ref_top1 = reference.argmax(-1)
        window_kl = _window_kl(reference, logits)
    else:
        raise ValueError(
            "reference must be a TinyLM, its top1_predictions (shape "
            f"{tuple(logits.shape[:2])}) or its reference_log_probs (shape {tuple(logits.shape)}) on the same windows, "
            f"got {type(reference).__name__} {tuple(getattr(reference, 'shape', ()))}"
        )
    targets = windows[:, 1:]
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").double()  # (B, T) nats
    half = targets.shape[1] // 2
    ln2 = math.log(2)
    return Evaluation(
        bpb=float(nll.sum()) / (nll.numel() * ln2),
        late_bpb=float(nll[:, half:].sum()) / (nll[:, half:].numel() * ln2),
        top1_agreement=float((logits.argmax(-1) == ref_top1).double().mean()),
        n_predictions=nll.numel(),
        seconds=seconds,
        window_bpb=(nll.mean(dim=1) / ln2).numpy(),
        window_kl=window_kl,
    )


# ====================================================================== outliers


def inject_outliers(model: TinyLM, channels, factor: float) -> TinyLM:
    """A copy of ``model`` whose RMSNorm outputs carry massive activations in ``channels``, the
    function unchanged.

    For every RMSNorm (each block's attn_norm and mlp_norm, and the final norm) the weight of each
    chosen channel c is multiplied by ``factor``, and column c of every linear layer that reads
    that norm (q, k, v; gate, up; lm_head) is divided by it: the layer's input channel c is
    ``factor`` times larger, its product with the column the same. In exact arithmetic the logits
    do not change; in float32 a power-of-two factor changes nothing at all (both scalings are exact
    and every product is the same), another factor adds two roundings of 2**-24 relative to each
    changed weight. The residual stream is not touched, so the outliers live in the norms' outputs,
    where LLM.int8() measured them and where per-tensor activation scales see them.

    Why inject them: LLM.int8() (Dettmers et al. 2022, arXiv:2208.07339) found that transformers
    grow outlier features, up to 20x larger than the rest, in a few hidden dimensions (about 0.1%),
    systematically from about 6.7B parameters, and that they ruin per-tensor int8 activations. A
    1.7M-parameter model has none; this gives them to it, in a form SmoothQuant's per-channel
    migration can undo (a pure per-channel scale), which the real ones only approximately are.
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model must be a TinyLM, got {type(model).__name__}")
    f = positive_number("factor", factor)
    d = model.cfg.d_model
    listed = [channels] if isinstance(channels, (int, np.integer)) else list(channels)
    if not listed:
        raise ValueError(f"channels must be a non-empty set of indices in 0..{d - 1} (d_model), got {channels!r}")
    ch = sorted({int_in_range("channel", c, 0, d - 1, "an index of the hidden dimension (d_model)") for c in listed})
    out = copy.deepcopy(model).eval()
    lin = out.linears()
    idx = torch.tensor(ch)
    with torch.no_grad():
        for norm_w, readers in _norm_groups(out):
            norm_w[idx] = norm_w[idx] * f
            for r in readers:
                lin[r].weight[:, idx] = lin[r].weight[:, idx] / f
    return out
