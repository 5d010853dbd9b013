"""Napkin math of LLM inference (chapter 12): the bytes and FLOPs of a decode step and of a prefill,
their time on a GPU, which term sets it, and how many tokens of KV cache fit beside the weights;
for each way of storing the weights, the activations and the KV cache.

The model is a decoder-only transformer described by its shape (:class:`ModelShape`; the named
one is :data:`LLAMA3_8B`, Meta's published configuration). What it stores, and in what, is a
:class:`Scheme`: the format of the decoder layers' linear weights, of the activations the tensor
cores take with them (which sets the FLOP rate), of the KV cache, of the LM head and of the
embedding table. Each format is a :class:`StorageFormat`: an element (a float format of
:mod:`~nbhelpers.formats`, or a 4- or 8-bit integer) and the scales beside it (none, one per
tensor, one per row, or one per group of a row) with their bits and those of a zero point.
Strings only at the boundary: :data:`STORAGE_FORMATS` and :data:`SCHEMES` map names to them.

A decode step at batch B and context L (every sequence at L; L counts the keys each new query
attends to, its own included) moves, from and to HBM:

- **weights**: every linear weight of the decoder layers and the LM head, read once per step
  whatever B (the B tokens of the step share each read), the norms' gains, and B rows of the
  embedding table (a gather: the table is never read whole);
- **KV cache**: the keys and values of L tokens of each of the B sequences read, and those of the
  step's B new tokens written;
- **activations**: each matmul reads its input and writes its output, attention reads its queries
  and writes its output, in bf16 (:data:`ACTIVATION_BYTES`) in every scheme, the fp8 copy a W8A8
  GEMM takes included in that one read; what is elementwise between them (norms, residual adds,
  rotary, SwiGLU's product) is taken as fused into a neighbour and moves nothing of its own.
  Small at decode (6.2 MB a token for Llama 3 8B), not at prefill.

It does ``2 x (matmul weights) x B`` FLOPs in the matmuls (the LM head's included, the
embedding's gather none) and ``4 x layers x heads x head_dim x L x B`` in attention (Q K^T and
P V, two FLOPs a multiply-add each). A prefill of B prompts of P tokens reads the weights once,
writes the KV cache of its B x P tokens and reads it back once in attention (a kernel that
re-reads K and V for each block of queries moves more: not counted), computes the logits of the
last token of each prompt only (what generation needs), and does ``4 x layers x heads x head_dim
x B x P (P + 1) / 2`` attention FLOPs: causal, query i attends to keys 1..i, about half the square.

Each step's time is the roofline's: the larger of ``bytes / HBM bandwidth`` and ``FLOPs / peak``,
the matmuls at the peak of the scheme's tensor-core type (``gpu.peak_flops["bf16"]`` or
``["fp8"]``, :mod:`~nbhelpers.perf_model`'s :class:`~nbhelpers.perf_model.GPU`), attention at the
bf16 peak in every scheme (an fp8 KV cache is read as fp8 and computed on in bf16: it saves bytes,
not FLOPs). :attr:`StepCost.bound` names the term that sets it: ``compute``, or the largest of the
byte terms. No kernel reaches either peak (a measured bf16 GEMM on an H200 reaches about 80 %, a
copy about 90 % of the bandwidth, chapter 08), and a matmul with a handful of rows does not keep
the tensor cores busy at all: these times are lower bounds, and which term binds is the claim.

Capacity (:func:`kv_capacity`): the GPU's memory less the stored weights (the embedding table
whole) and what a caller reserves is what the KV cache can hold: tokens, and sequences at a given
context. The memory sizes are :data:`H200_MEMORY_BYTES` and :data:`H100_SXM_MEMORY_BYTES`, kept
here rather than in :class:`~nbhelpers.perf_model.GPU`; :func:`memory_bytes` finds them by the
GPU's name.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .formats import get_format
from .perf_model import GPU, H100_SXM, H200
from .validation import enum_member, is_int, positive_int

__all__ = [
    "ACTIVATION_BYTES",
    "GPU_MEMORY_BYTES",
    "H100_SXM_MEMORY_BYTES",
    "H200_MEMORY_BYTES",
    "INT_ELEMENT_BITS",
    "LLAMA3_8B",
    "SCHEMES",
    "STORAGE_FORMATS",
    "TENSOR_CORE_TYPES",
    "Capacity",
    "Granularity",
    "ModelShape",
    "Scheme",
    "StepCost",
    "StorageFormat",
    "Term",
    "capacity_rows",
    "decode_crossover_batch",
    "decode_step",
    "format_rows",
    "get_scheme",
    "get_storage_format",
    "kv_bytes_per_token",
    "kv_capacity",
    "memory_bytes",
    "napkin_rows",
    "prefill",
    "stored_weight_bytes",
]


# ====================================================================== the model's shape


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape: ``n_layers`` blocks of grouped-query attention
    (``n_heads`` query heads and ``n_kv_heads`` key/value heads of ``head_dim``; q, k, v and o
    projections) and a SwiGLU MLP of width ``d_ff`` (three matrices: gate, up, down), no biases;
    an embedding table and an LM head of ``vocab`` x ``d_model``, one matrix when
    ``tied_embeddings``; RMSNorm gains (two a block, one final). ``source`` says where the numbers
    come from. The names are :class:`~nbhelpers.tiny_lm.TinyLMConfig`'s, with ``head_dim`` stated
    (it need not be ``d_model / n_heads``)."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    tied_embeddings: bool
    source: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(f"source must say where the numbers come from (a non-empty str), got {self.source!r}")
        for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab"):
            object.__setattr__(self, field, positive_int(field, getattr(self, field)))
        _flag("tied_embeddings", self.tied_embeddings)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads}): "
                "each KV head serves a whole group of query heads"
            )

    @property
    def q_dim(self) -> int:
        """Width of the queries (and of attention's output): ``n_heads x head_dim``."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values): ``n_kv_heads x head_dim``."""
        return self.n_kv_heads * self.head_dim

    def linear_shapes(self) -> tuple[tuple[str, int, int], ...]:
        """One block's linear layers as ``(name, N, K)``: N outputs, K inputs (a weight (N, K), as
        ``torch.nn.Linear`` stores it)."""
        d, q, kv, ff = self.d_model, self.q_dim, self.kv_dim, self.d_ff
        return (
            ("q_proj", q, d),
            ("k_proj", kv, d),
            ("v_proj", kv, d),
            ("o_proj", d, q),
            ("gate_proj", ff, d),
            ("up_proj", ff, d),
            ("down_proj", d, ff),
        )

    @property
    def layer_matmul_params(self) -> int:
        """Weights of one block's linear layers."""
        return sum(n * k for _, n, k in self.linear_shapes())

    @property
    def embedding_params(self) -> int:
        """Weights of the embedding table (``vocab x d_model``); the LM head has as many."""
        return self.vocab * self.d_model

    @property
    def norm_params(self) -> int:
        """RMSNorm gains: two a block and the final one."""
        return (2 * self.n_layers + 1) * self.d_model

    @property
    def matmul_params(self) -> int:
        """Weights a token multiplies with: every block's linear layers and the LM head (the
        embedding is a lookup, not a matmul). Each costs 2 FLOPs a token."""
        return self.n_layers * self.layer_matmul_params + self.embedding_params

    @property
    def n_params(self) -> int:
        """All parameters: the blocks' linear layers, the norms, the embedding table and, unless
        tied to it, the LM head."""
        head = 0 if self.tied_embeddings else self.embedding_params
        return self.n_layers * self.layer_matmul_params + self.norm_params + self.embedding_params + head

    def kv_numbers_per_token(self) -> int:
        """Numbers the KV cache holds per token: keys and values, every layer, every KV head:
        ``2 x n_layers x n_kv_heads x head_dim``."""
        return 2 * self.n_layers * self.kv_dim

    def activation_numbers_per_token(self) -> int:
        """Activation numbers a token moves through HBM (module docstring): per block, the fused
        q/k/v projection's input and output, attention's queries in and output out, the o
        projection's input and output, the fused gate/up projection's input and output, the down
        projection's input (gate and up, SwiGLU's product fused into it) and output; then the LM
        head's input and its logits. Without the LM head's part: :meth:`block_activation_numbers`."""
        return self.block_activation_numbers() + self.d_model + self.vocab

    def block_activation_numbers(self) -> int:
        """The blocks' part of :meth:`activation_numbers_per_token` (all ``n_layers`` of them)."""
        d, q, kv, ff = self.d_model, self.q_dim, self.kv_dim, self.d_ff
        per_block = (d + q + 2 * kv) + (q + q) + (q + d) + (d + 2 * ff) + (2 * ff + d)
        return self.n_layers * per_block


#: Llama 3 8B (Meta, April 2024): 32 layers, hidden 4096, 32 heads and 8 KV heads of 128,
#: intermediate (SwiGLU) 14,336, vocabulary 128,256, untied embeddings: the model's config.json on
#: Hugging Face (``meta-llama/Meta-Llama-3-8B``: hidden_size, num_hidden_layers,
#: num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings
#: false) and Meta's params.json of the release (dim 4096, n_layers 32, n_heads 32, n_kv_heads 8,
#: vocab_size 128256; the FFN width 14,336 from its multiple_of 1024 and ffn_dim_multiplier 1.3).
#: The Llama 3 paper (Grattafiori et al. 2024, "The Llama 3 Herd of Models") rounds the
#: vocabulary to 128K. 8.03e9 parameters by :attr:`ModelShape.n_params`.
LLAMA3_8B = ModelShape(
    name="Llama 3 8B",
    n_layers=32,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    d_ff=14336,
    vocab=128256,
    tied_embeddings=False,
    source="config.json of meta-llama/Meta-Llama-3-8B (Hugging Face) and Meta's params.json: 32 layers, "
    "hidden 4096, 32 heads, 8 KV heads, head_dim 128, FFN 14,336, vocabulary 128,256, untied embeddings",
)


# ====================================================================== storage formats


class Granularity(enum.StrEnum):
    """Which elements share a scale. A row of a weight (N, K) is an output channel, its K inputs; a
    row of the KV cache is one KV head's keys (or values) of one token, ``head_dim`` numbers."""

    NONE = "none"  # no scale (bf16)
    TENSOR = "tensor"  # one scale for the whole tensor
    ROW = "row"  # one a row: per output channel of a weight, per token (and head) of activations
    GROUP = "group"  # one for each group of ``group`` consecutive elements of a row


#: bits of an integer element
INT_ELEMENT_BITS: Mapping[str, int] = MappingProxyType({"int4": 4, "int8": 8})
#: the key of :attr:`~nbhelpers.perf_model.GPU.peak_flops` an element feeds the tensor cores as,
#: for the elements a GEMM can take both its inputs in here
TENSOR_CORE_TYPES: Mapping[str, str] = MappingProxyType(
    {"bf16": "bf16", "fp16": "fp16", "e4m3fn": "fp8", "e5m2": "fp8", "fp32": "fp32"}
)


@dataclass(frozen=True)
class StorageFormat:
    """How a tensor is stored: ``element`` (a float format name of :mod:`~nbhelpers.formats`,
    ``"bf16"``, ``"e4m3fn"``, or ``"int4"`` / ``"int8"``), and its scales: ``granularity``,
    ``group`` (elements of a row that share a scale, only for :attr:`Granularity.GROUP`),
    ``scale_bits`` of each scale and ``zero_bits`` of each zero point (0: symmetric). ``source``
    says whose layout it is."""

    name: str
    element: str
    granularity: Granularity = Granularity.NONE
    group: int | None = None
    scale_bits: int = 0
    zero_bits: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.element, str):
            raise TypeError(f"element must be a str such as 'bf16', 'e4m3fn' or 'int4', got {self.element!r}")
        if self.element not in INT_ELEMENT_BITS:
            try:
                get_format(self.element)
            except ValueError as e:
                raise ValueError(f"element {self.element!r} is neither int4 / int8 nor a float format: {e}") from None
        g = enum_member(Granularity, self.granularity, "granularity")
        object.__setattr__(self, "granularity", g)
        if g is Granularity.GROUP:
            object.__setattr__(self, "group", positive_int("group", self.group, "elements of a row per scale"))
        elif self.group is not None:
            raise ValueError(f"group is only for granularity 'group', got group={self.group!r} with {g.value!r}")
        for field in ("scale_bits", "zero_bits"):
            v = getattr(self, field)
            if not is_int(v) or v < 0:
                raise ValueError(f"{field} must be a non-negative int, got {v!r}")
        if g is Granularity.NONE and (self.scale_bits or self.zero_bits):
            raise ValueError("a format without scales (granularity 'none') has scale_bits = zero_bits = 0")
        if g is not Granularity.NONE and not self.scale_bits:
            raise ValueError(f"granularity {g.value!r} needs scale_bits > 0 (the bits of each scale)")

    @property
    def element_bits(self) -> int:
        """Bits of one element."""
        if self.element in INT_ELEMENT_BITS:
            return INT_ELEMENT_BITS[self.element]
        return get_format(self.element).bits

    def scales(self, rows: int, cols: int) -> int:
        """Scales (and zero points) a (rows, cols) tensor stored this way holds."""
        positive_int("rows", rows)
        positive_int("cols", cols)
        return {
            Granularity.NONE: 0,
            Granularity.TENSOR: 1,
            Granularity.ROW: rows,
            Granularity.GROUP: rows * -(-cols // (self.group or 1)),
        }[self.granularity]

    def nbytes(self, rows: int, cols: int) -> float:
        """Bytes of a (rows, cols) tensor: its elements and its scales and zero points."""
        return (rows * cols * self.element_bits + self.scales(rows, cols) * (self.scale_bits + self.zero_bits)) / 8

    def bits_per_element(self, cols: int = 4096) -> float:
        """Bits an element costs with its share of the scales, in a row of ``cols`` (a per-row
        scale's share depends on it; a per-tensor scale is counted as nothing)."""
        positive_int("cols", cols)
        per_row = 0 if self.granularity is Granularity.TENSOR else self.scales(1, cols)
        return self.element_bits + per_row * (self.scale_bits + self.zero_bits) / cols


def _registry_formats() -> Mapping[str, StorageFormat]:
    gptq = "GPTQ / AWQ checkpoints: 16-bit scales, zero points packed eight to an int32 (qzeros)"
    fmts = [
        StorageFormat("bf16", "bf16", source="no scale"),
        StorageFormat(
            "fp8 per-tensor",
            "e4m3fn",
            Granularity.TENSOR,
            scale_bits=32,
            source="one fp32 scale a tensor (vLLM's fp8 KV cache; chapter 06's per-tensor recipe)",
        ),
        StorageFormat(
            "fp8 per-channel",
            "e4m3fn",
            Granularity.ROW,
            scale_bits=32,
            source="one scale an output channel, as llm-compressor's FP8_DYNAMIC scheme stores weights; counted "
            "as fp32, the type torch._scaled_mm takes its scales in",
        ),
        StorageFormat(
            "fp8 per-token",
            "e4m3fn",
            Granularity.ROW,
            scale_bits=32,
            source="one fp32 scale a token (a row of activations), computed as it is quantized",
        ),
        StorageFormat(
            "int8 per-channel", "int8", Granularity.ROW, scale_bits=16, source="one 16-bit scale an output channel"
        ),
        StorageFormat(
            "int8 per-token-head",
            "int8",
            Granularity.ROW,
            scale_bits=16,
            source="KV cache: one 16-bit scale for each token's head_dim keys (or values) of one head",
        ),
        StorageFormat(
            "int4 g128", "int4", Granularity.GROUP, 128, scale_bits=16, source="symmetric, 16-bit scales; " + gptq
        ),
        StorageFormat(
            "int4 g128 zp",
            "int4",
            Granularity.GROUP,
            128,
            scale_bits=16,
            zero_bits=4,
            source="with zero point; " + gptq,
        ),
        StorageFormat(
            "int4 g32", "int4", Granularity.GROUP, 32, scale_bits=16, source="symmetric, 16-bit scales, groups of 32"
        ),
    ]
    return MappingProxyType({f.name: f for f in fmts})


#: the storage formats by name, in the order :func:`format_rows` lists them
STORAGE_FORMATS: Mapping[str, StorageFormat] = _registry_formats()


def get_storage_format(fmt: StorageFormat | str) -> StorageFormat:
    """A :class:`StorageFormat`, or the one :data:`STORAGE_FORMATS` names."""
    if isinstance(fmt, StorageFormat):
        return fmt
    if isinstance(fmt, str) and fmt.strip() in STORAGE_FORMATS:
        return STORAGE_FORMATS[fmt.strip()]
    raise ValueError(f"unknown storage format {fmt!r}; expected one of: {', '.join(STORAGE_FORMATS)}")


def format_rows(cols: int = 4096) -> list[dict]:
    """One dict per format of :data:`STORAGE_FORMATS`: name, element, its bits, granularity,
    group, bits of a scale and of a zero point, bits and bytes an element costs with its scales in
    a row of ``cols`` (4096: Llama 3 8B's hidden size, the K of most of its matrices), source."""
    rows = []
    for f in STORAGE_FORMATS.values():
        bits = f.bits_per_element(cols)
        rows.append(
            {
                "name": f.name,
                "element": f.element,
                "element_bits": f.element_bits,
                "granularity": f.granularity.value,
                "group": f.group,
                "scale_bits": f.scale_bits,
                "zero_bits": f.zero_bits,
                "bits_per_element": bits,
                "bytes_per_element": bits / 8,
                "source": f.source,
            }
        )
    return rows


# ====================================================================== schemes

#: bytes of an activation number between layers: bf16 in every scheme (module docstring)
ACTIVATION_BYTES = 2


@dataclass(frozen=True)
class Scheme:
    """What an inference engine stores in what: ``weights`` (the decoder blocks' linear layers),
    ``activations`` (the matmuls' other input: its element sets the tensor cores' type and rate;
    a weight-only format is dequantized to it inside the GEMM), ``kv_cache``, ``lm_head`` and
    ``embedding`` (a tied model's LM head is its embedding table, in ``embedding``'s format). A
    GEMM's two inputs share a tensor-core type: fp8 activations need fp8 weights (W8A8)."""

    name: str
    weights: StorageFormat
    activations: StorageFormat
    kv_cache: StorageFormat
    lm_head: StorageFormat = STORAGE_FORMATS["bf16"]
    embedding: StorageFormat = STORAGE_FORMATS["bf16"]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty str, got {self.name!r}")
        for field in ("weights", "activations", "kv_cache", "lm_head", "embedding"):
            object.__setattr__(self, field, get_storage_format(getattr(self, field)))
        a = self.activations.element
        if a not in TENSOR_CORE_TYPES:
            raise ValueError(
                f"activations in {a!r} feed no tensor core here; the element must be one of: "
                f"{', '.join(TENSOR_CORE_TYPES)}"
            )
        w = self.weights.element
        if TENSOR_CORE_TYPES[a] == "fp8" and TENSOR_CORE_TYPES.get(w) != "fp8":
            raise ValueError(
                f"fp8 activations need fp8 weights (a GEMM's inputs share a tensor-core type), got weights in "
                f"{w!r}; keep the activations bf16 for a weight-only format"
            )

    @property
    def compute(self) -> str:
        """The key of ``GPU.peak_flops`` the blocks' matmuls run at: the activations' tensor-core
        type."""
        return TENSOR_CORE_TYPES[self.activations.element]

    @property
    def lm_head_compute(self) -> str:
        """The key of ``GPU.peak_flops`` the LM head runs at: :attr:`compute`, except bf16 for an
        LM head kept out of fp8 in a W8A8 scheme (its input is then taken in bf16)."""
        if self.compute == "fp8" and TENSOR_CORE_TYPES.get(self.lm_head.element) != "fp8":
            return "bf16"
        return self.compute


def _registry_schemes() -> Mapping[str, Scheme]:
    f = STORAGE_FORMATS
    bf16, fp8_kv = f["bf16"], f["fp8 per-tensor"]
    int4, fp8_w, fp8_a = f["int4 g128"], f["fp8 per-channel"], f["fp8 per-token"]
    schemes = [
        Scheme("bf16", bf16, bf16, bf16),
        Scheme("int4 weights", int4, bf16, bf16),
        Scheme("fp8 W8A8", fp8_w, fp8_a, bf16),
        Scheme("fp8 KV cache", bf16, bf16, fp8_kv),
        Scheme("int4 weights + fp8 KV", int4, bf16, fp8_kv),
        Scheme("fp8 W8A8 + fp8 KV", fp8_w, fp8_a, fp8_kv),
    ]
    return MappingProxyType({s.name: s for s in schemes})


#: the schemes chapter 12 compares; the LM head and the embedding stay bf16 in each, as common
#: recipes leave them (llm-compressor's FP8 and W8A8 examples quantize ``Linear`` layers with
#: ``ignore=["lm_head"]``)
SCHEMES: Mapping[str, Scheme] = _registry_schemes()


def get_scheme(scheme: Scheme | str) -> Scheme:
    """A :class:`Scheme`, or the one :data:`SCHEMES` names."""
    if isinstance(scheme, Scheme):
        return scheme
    if isinstance(scheme, str) and scheme.strip() in SCHEMES:
        return SCHEMES[scheme.strip()]
    raise ValueError(f"unknown scheme {scheme!r}; expected one of: {', '.join(SCHEMES)} (or a Scheme)")


def _shape(shape) -> ModelShape:
    if not isinstance(shape, ModelShape):
        raise TypeError(f"shape must be a ModelShape (such as LLAMA3_8B), got {type(shape).__name__}")
    return shape


def _gpu(gpu) -> GPU:
    if not isinstance(gpu, GPU):
        raise TypeError(f"gpu must be a perf_model.GPU (such as H200), got {type(gpu).__name__}")
    return gpu


def _peak(gpu: GPU, key: str) -> float:
    if key not in gpu.peak_flops:
        raise ValueError(f"{gpu.name} has no peak for {key!r}; it has: {', '.join(sorted(gpu.peak_flops))}")
    return gpu.peak_flops[key]


# ====================================================================== bytes


def kv_bytes_per_token(shape: ModelShape, kv_cache: StorageFormat | str) -> float:
    """Bytes of KV cache one token takes: ``2 x n_layers x n_kv_heads`` rows of ``head_dim``
    numbers, and their scales (a per-tensor scale is one a layer for the whole cache, not per
    token: counted as nothing)."""
    shape, fmt = _shape(shape), get_storage_format(kv_cache)
    rows = 2 * shape.n_layers * shape.n_kv_heads
    scales = 0 if fmt.granularity is Granularity.TENSOR else fmt.scales(rows, shape.head_dim)
    return (rows * shape.head_dim * fmt.element_bits + scales * (fmt.scale_bits + fmt.zero_bits)) / 8


def _block_weight_bytes(shape: ModelShape, scheme: Scheme) -> float:
    """Bytes of the blocks' linear weights and all norm gains (bf16)."""
    per_block = sum(scheme.weights.nbytes(n, k) for _, n, k in shape.linear_shapes())
    return shape.n_layers * per_block + shape.norm_params * 2


def _lm_head_bytes(shape: ModelShape, scheme: Scheme) -> float:
    """Bytes of the LM head: the embedding table, in its format, when the two are tied."""
    fmt = scheme.embedding if shape.tied_embeddings else scheme.lm_head
    return fmt.nbytes(shape.vocab, shape.d_model)


def _embedding_row_bytes(shape: ModelShape, scheme: Scheme) -> float:
    return scheme.embedding.nbytes(1, shape.d_model)


def stored_weight_bytes(shape: ModelShape, scheme: Scheme | str) -> float:
    """Bytes the weights take in memory: the blocks, the norms, the embedding table whole and the
    LM head (once when tied, in the embedding's format)."""
    shape, scheme = _shape(shape), get_scheme(scheme)
    table = scheme.embedding.nbytes(shape.vocab, shape.d_model)
    head = 0.0 if shape.tied_embeddings else _lm_head_bytes(shape, scheme)
    return _block_weight_bytes(shape, scheme) + table + head


# ====================================================================== a step's cost


class Term(enum.StrEnum):
    """What sets a step's time: the FLOPs, or the largest of its byte terms."""

    WEIGHTS = "weights"
    KV_CACHE = "KV cache"
    ACTIVATIONS = "activations"
    COMPUTE = "compute"


@dataclass(frozen=True)
class StepCost:
    """A decode step or a prefill of ``batch`` sequences at ``tokens`` (decode: the context L;
    prefill: the prompt length P), in a scheme on a GPU: bytes by term, FLOPs, and the time each
    takes. ``resident_bytes``: what must sit in memory meanwhile (the stored weights and the KV
    cache of the batch at ``tokens``)."""

    kind: str
    batch: int
    tokens: int
    scheme: str
    gpu: str
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    activation_bytes: float
    matmul_flops: float
    attention_flops: float
    bytes_s: float
    compute_s: float
    resident_bytes: float

    @property
    def kv_bytes(self) -> float:
        """KV cache read and written."""
        return self.kv_read_bytes + self.kv_write_bytes

    @property
    def bytes(self) -> float:
        """All bytes moved from and to HBM."""
        return self.weight_bytes + self.kv_bytes + self.activation_bytes

    @property
    def flops(self) -> float:
        return self.matmul_flops + self.attention_flops

    @property
    def bytes_by_term(self) -> dict[Term, float]:
        return {Term.WEIGHTS: self.weight_bytes, Term.KV_CACHE: self.kv_bytes, Term.ACTIVATIONS: self.activation_bytes}

    @property
    def seconds(self) -> float:
        """The roofline's time: the slower of moving the bytes and doing the FLOPs."""
        return max(self.bytes_s, self.compute_s)

    @property
    def bound(self) -> Term:
        """:attr:`Term.COMPUTE` when the FLOPs take longer than the bytes, else the byte term
        that moves the most."""
        if self.compute_s > self.bytes_s:
            return Term.COMPUTE
        terms = self.bytes_by_term
        return max(terms, key=terms.__getitem__)


def _tokens(name: str, v) -> int:
    return positive_int(name, v)


def _cost(
    kind,
    shape,
    scheme,
    gpu,
    batch,
    tokens,
    weights,
    kv_read,
    kv_write,
    act,
    mm_flops,
    head_flops,
    attn_flops,
    kv_tokens,
):
    """The StepCost of bytes and FLOPs already counted: the blocks' matmuls (``mm_flops``) at the
    scheme's tensor-core peak, the LM head's at its own, attention's at bf16's."""
    bytes_ = weights + kv_read + kv_write + act
    compute_s = (
        mm_flops / _peak(gpu, scheme.compute)
        + head_flops / _peak(gpu, scheme.lm_head_compute)
        + attn_flops / _peak(gpu, "bf16")
    )
    resident = stored_weight_bytes(shape, scheme) + kv_tokens * kv_bytes_per_token(shape, scheme.kv_cache)
    return StepCost(
        kind,
        batch,
        tokens,
        scheme.name,
        gpu.name,
        weights,
        kv_read,
        kv_write,
        act,
        mm_flops + head_flops,
        attn_flops,
        bytes_ / gpu.hbm_bytes_per_s,
        compute_s,
        resident,
    )


def decode_step(shape: ModelShape, scheme: Scheme | str, gpu: GPU, batch: int, context: int) -> StepCost:
    """One decode step of ``batch`` sequences, each at ``context`` tokens (the keys its new token
    attends to, its own included). Bytes: the weights once (blocks, norms, LM head whole) plus
    ``batch`` gathered embedding rows; ``batch x context`` tokens of KV cache read and ``batch``
    written; ``batch`` tokens' activations. FLOPs: ``2 x matmul_params x batch`` and
    ``4 x n_layers x n_heads x head_dim x context x batch`` (module docstring)."""
    shape, scheme, gpu = _shape(shape), get_scheme(scheme), _gpu(gpu)
    B, L = _tokens("batch", batch), _tokens("context", context)
    kv_token = kv_bytes_per_token(shape, scheme.kv_cache)
    weights = (
        _block_weight_bytes(shape, scheme) + _lm_head_bytes(shape, scheme) + B * _embedding_row_bytes(shape, scheme)
    )
    act = B * shape.activation_numbers_per_token() * ACTIVATION_BYTES
    mm = 2.0 * shape.n_layers * shape.layer_matmul_params * B
    head = 2.0 * shape.embedding_params * B
    attn = 4.0 * shape.n_layers * shape.n_heads * shape.head_dim * L * B
    return _cost(
        "decode", shape, scheme, gpu, B, L, weights, B * L * kv_token, B * kv_token, act, mm, head, attn, B * L
    )


def prefill(shape: ModelShape, scheme: Scheme | str, gpu: GPU, batch: int, prompt: int) -> StepCost:
    """A prefill of ``batch`` prompts of ``prompt`` tokens: the weights once (the LM head whole)
    plus ``batch x prompt`` gathered embedding rows; the KV cache of every prompt token written
    and read back once by attention; every token's activations through the blocks, the LM head's
    input and logits for the last token of each prompt only. FLOPs: ``2 x`` the blocks' weights
    ``x batch x prompt``, ``2 x`` the LM head's ``x batch``, and causal attention's
    ``4 x n_layers x n_heads x head_dim x batch x prompt (prompt + 1) / 2``."""
    shape, scheme, gpu = _shape(shape), get_scheme(scheme), _gpu(gpu)
    B, P = _tokens("batch", batch), _tokens("prompt", prompt)
    T = B * P
    kv_token = kv_bytes_per_token(shape, scheme.kv_cache)
    weights = (
        _block_weight_bytes(shape, scheme) + _lm_head_bytes(shape, scheme) + T * _embedding_row_bytes(shape, scheme)
    )
    act = (T * shape.block_activation_numbers() + B * (shape.d_model + shape.vocab)) * ACTIVATION_BYTES
    mm = 2.0 * shape.n_layers * shape.layer_matmul_params * T
    head = 2.0 * shape.embedding_params * B
    attn = 4.0 * shape.n_layers * shape.n_heads * shape.head_dim * B * P * (P + 1) / 2
    return _cost("prefill", shape, scheme, gpu, B, P, weights, T * kv_token, T * kv_token, act, mm, head, attn, T)


def decode_crossover_batch(shape: ModelShape, scheme: Scheme | str, gpu: GPU, context: int) -> float:
    """The batch above which a decode step at ``context`` is compute-bound: the step's bytes are
    ``fixed + batch x per_sequence`` and its FLOPs ``batch x per_sequence``, so the two times meet
    at ``batch* = (fixed / BW) / (flops_seq / peak - bytes_seq / BW)``. ``math.inf`` when a
    sequence's FLOPs take no longer than its bytes (a long context: attention does ``n_heads /
    n_kv_heads`` FLOPs per byte of bf16 KV cache), so that no batch is compute-bound. A real
    number: the step is compute-bound from the next integer above it."""
    one = decode_step(shape, scheme, gpu, 1, context)
    two = decode_step(shape, scheme, gpu, 2, context)
    seq_bytes_s = two.bytes_s - one.bytes_s
    fixed_s = one.bytes_s - seq_bytes_s
    seq_compute_s = one.compute_s  # no FLOPs without a sequence
    if seq_compute_s <= seq_bytes_s:
        return math.inf
    return fixed_s / (seq_compute_s - seq_bytes_s)


# ====================================================================== capacity

#: NVIDIA H200 specification: 141 GB of HBM3e. The sheet leaves GB undefined; taken as 10^9 B,
#: the lower of the two readings chapter 07 weighs (two of its MIG instances 3g.71gb, 69.50 GiB
#: each, already hold 1.059 x 141e9 B), so the capacities here are lower bounds
H200_MEMORY_BYTES = 141e9
#: NVIDIA H100 Tensor Core GPU datasheet, SXM column: 80 GB of HBM3, taken as 80e9 B (as above)
H100_SXM_MEMORY_BYTES = 80e9
#: the memory of each GPU of :mod:`~nbhelpers.perf_model` by its name
GPU_MEMORY_BYTES: Mapping[str, float] = MappingProxyType(
    {H200.name: H200_MEMORY_BYTES, H100_SXM.name: H100_SXM_MEMORY_BYTES}
)


def memory_bytes(gpu: GPU) -> float:
    """The memory of ``gpu`` (:data:`GPU_MEMORY_BYTES`, by its name)."""
    gpu = _gpu(gpu)
    if gpu.name not in GPU_MEMORY_BYTES:
        raise ValueError(f"no memory size for GPU {gpu.name!r}; known: {', '.join(GPU_MEMORY_BYTES)}")
    return GPU_MEMORY_BYTES[gpu.name]


@dataclass(frozen=True)
class Capacity:
    """What the KV cache can hold on one GPU: ``kv_bytes`` = memory - weights - reserved;
    ``tokens`` of KV cache in it, ``sequences`` of ``context`` tokens."""

    scheme: str
    gpu: str
    memory_bytes: float
    weight_bytes: float
    reserved_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float
    context: int
    tokens: int
    sequences: int


def kv_capacity(
    shape: ModelShape, scheme: Scheme | str, gpu: GPU, context: int, reserved_bytes: float = 0.0
) -> Capacity:
    """The KV cache one GPU holds beside the weights of ``scheme``: tokens, and sequences at
    ``context``. ``reserved_bytes``: memory set aside for what is not counted (the CUDA context,
    activations, the framework's buffers); 0 by default, so the numbers are upper bounds of what
    an engine gets. Raises when the weights and the reserve do not fit."""
    shape, scheme, gpu = _shape(shape), get_scheme(scheme), _gpu(gpu)
    L = _tokens("context", context)
    ok = isinstance(reserved_bytes, (int, float)) and not isinstance(reserved_bytes, bool)
    if not ok or not math.isfinite(reserved_bytes) or reserved_bytes < 0:
        raise ValueError(f"reserved_bytes must be a non-negative finite number, got {reserved_bytes!r}")
    memory = memory_bytes(gpu)
    weights = stored_weight_bytes(shape, scheme)
    free = memory - weights - reserved_bytes
    if free < 0:
        raise ValueError(
            f"{shape.name} in {scheme.name!r} ({weights / 1e9:.1f} GB of weights) and {reserved_bytes / 1e9:.1f} GB "
            f"reserved do not fit in the {gpu.name}'s {memory / 1e9:.0f} GB"
        )
    per_token = kv_bytes_per_token(shape, scheme.kv_cache)
    tokens = int(free // per_token)
    return Capacity(
        scheme.name, gpu.name, memory, weights, float(reserved_bytes), free, per_token, L, tokens, tokens // L
    )


# ====================================================================== the tables the notebook prints


def _names(schemes: Iterable[Scheme | str], what: str) -> list[Scheme]:
    if isinstance(schemes, (str, Scheme)):
        raise TypeError(f"{what} must be a sequence of schemes or names, got a single {schemes!r}")
    return [get_scheme(s) for s in schemes]


def _sizes(name: str, values: Sequence[int]) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"{name} must be a non-empty sequence of positive ints, got {values!r}")
    return [positive_int(name, v) for v in values]


def napkin_rows(
    shape: ModelShape = LLAMA3_8B,
    gpu: GPU = H200,
    batches: Sequence[int] = (1, 16, 256),
    contexts: Sequence[int] = (8192, 32768, 131072),
    prompts: Sequence[tuple[int, int]] = ((1, 2048), (16, 2048)),
    baseline: Scheme | str = "bf16",
    alternatives: Sequence[Scheme | str] = ("int4 weights", "fp8 W8A8", "fp8 KV cache"),
) -> list[dict]:
    """Rows of the chapter's napkin table, one per decode step (each batch at each context) and
    per prefill (each ``(batch, prompt)``), the baseline scheme's numbers: ``step``, ``batch``,
    ``tokens`` (context or prompt), ``bytes``, ``weight_bytes``, ``kv_bytes``,
    ``activation_bytes``, ``flops``, ``seconds``, ``bound`` (a :class:`Term`'s value),
    ``resident_bytes`` and ``fits`` (whether the weights and the batch's KV cache fit in the GPU's
    memory), then ``speedup <name>`` for each alternative: the baseline's time over its time."""
    shape, gpu = _shape(shape), _gpu(gpu)
    base = get_scheme(baseline)
    alts = _names(alternatives, "alternatives")
    steps = []
    for B in _sizes("batches", batches):
        for L in _sizes("contexts", contexts):
            steps.append(lambda s, B=B, L=L: decode_step(shape, s, gpu, B, L))
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise ValueError(f"prompts must be a sequence of (batch, prompt) pairs, got {prompts!r}")
    for pair in prompts:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"each prompt must be a (batch, prompt) pair, got {pair!r}")
        B, P = pair
        steps.append(lambda s, B=B, P=P: prefill(shape, s, gpu, B, P))
    memory = memory_bytes(gpu)
    rows = []
    for step in steps:
        c = step(base)
        row = {
            "step": c.kind,
            "batch": c.batch,
            "tokens": c.tokens,
            "bytes": c.bytes,
            "weight_bytes": c.weight_bytes,
            "kv_bytes": c.kv_bytes,
            "activation_bytes": c.activation_bytes,
            "flops": c.flops,
            "seconds": c.seconds,
            "bound": c.bound.value,
            "resident_bytes": c.resident_bytes,
            "fits": c.resident_bytes <= memory,
        }
        for alt in alts:
            row[f"speedup {alt.name}"] = c.seconds / step(alt).seconds
        rows.append(row)
    return rows


def capacity_rows(
    shape: ModelShape = LLAMA3_8B,
    gpu: GPU = H200,
    schemes: Sequence[Scheme | str] = tuple(SCHEMES),
    contexts: Sequence[int] = (8192, 32768, 131072),
    reserved_bytes: float = 0.0,
) -> list[dict]:
    """One row per scheme: ``scheme``, ``weight_bytes``, ``kv_bytes`` (free for the KV cache),
    ``kv_bytes_per_token``, ``tokens``, and ``sequences <context>`` for each context."""
    shape, gpu = _shape(shape), _gpu(gpu)
    Ls = _sizes("contexts", contexts)
    rows = []
    for s in _names(schemes, "schemes"):
        caps = [kv_capacity(shape, s, gpu, L, reserved_bytes) for L in Ls]
        row = {
            "scheme": s.name,
            "weight_bytes": caps[0].weight_bytes,
            "kv_bytes": caps[0].kv_bytes,
            "kv_bytes_per_token": caps[0].kv_bytes_per_token,
            "tokens": caps[0].tokens,
        }
        row.update({f"sequences {c.context}": c.sequences for c in caps})
        rows.append(row)
    return rows
