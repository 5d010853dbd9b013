"""A routed mixture-of-experts layer, host side (chapter 10): routing, the permutation into one
buffer grouped by expert, the per-expert offsets, the tile schedule a grouped kernel runs on, and
three ways to compute the expert GEMMs with torch (a loop, a padded batch, torch's grouped GEMM)
next to a float64 reference. The Triton grouped kernel is :mod:`nbhelpers.kernels.grouped_gemm`.

Names used throughout: T tokens, each routed to ``top_k`` = k of E experts; K the input width
(the model's hidden size), N the expert's output width. The expert weights are one tensor ``w``
of shape (E, K, N): expert e computes ``x_e @ w[e]``.

The data path of one expert GEMM of the layer:

1. :func:`route` (or :meth:`Routing.from_ids`) says, for every token, which k experts it goes to
   and with which router weight.
2. :func:`permute` copies the token rows into ``x_perm``: T * k rows, one per (token, slot) pair,
   sorted by expert (stably, so inside an expert the tokens keep their order). The rows of expert
   e are ``x_perm[offsets[e]:offsets[e + 1]]`` (:func:`expert_offsets`: E + 1 numbers, 0 first,
   T * k last). An expert nobody chose has ``offsets[e] == offsets[e + 1]``.
3. One of the GEMMs turns ``x_perm`` (T k, K) into ``y_perm`` (T k, N).
4. :func:`unpermute` brings each row back to its token and sums the k rows of a token, weighted
   by the router: y (T, N).

A grouped kernel launches once for all experts. Its programs are not numbered by (row tile,
column tile) of one big matrix but by the tiles of each expert: :func:`tile_schedule` lists, for
every BLOCK_M-row tile of every non-empty expert, the expert, the tile's first row and the
expert's end row (the kernel masks rows from there on, so a tile never reads the next expert's
rows). An expert with n rows has ceil(n / BLOCK_M) tiles; an empty expert has none. This is the
host's picture of the schedule: the Triton kernel works out the same tiles on the GPU from the
offsets (:mod:`nbhelpers.kernels.grouped_gemm`), so that a call never waits for the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from .validation import nonnegative_int, positive_int, positive_number

__all__ = [
    "Routing",
    "route",
    "expert_counts",
    "expert_offsets",
    "check_offsets",
    "permutation",
    "permute",
    "unpermute",
    "TileSchedule",
    "tile_schedule",
    "tile_utilisation",
    "capacity",
    "PaddedResult",
    "padded_matmul",
    "PaddedTraffic",
    "padded_traffic",
    "grouped_matmul_ref",
    "loop_matmul",
    "torch_grouped_mm",
    "check_expert_gemm_operands",
    "check_expert_gemm_args",
    "moe_layer",
    "LayerCost",
    "layer_cost",
    "AlignedBlocks",
    "align_block_size_ref",
    "LayoutRows",
    "layout_rows",
]


def _as_int_array(x, name: str) -> np.ndarray:
    """A numpy int64 copy of a list, numpy array or torch tensor of integers (any device)."""
    if isinstance(x, torch.Tensor):
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got a tensor of {x.dtype}")
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.dtype == object or arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":  # np.asarray([]) is float64
            return arr.astype(np.int64)
        raise TypeError(f"{name} must hold integers, got an array of {arr.dtype}")
    return arr.astype(np.int64)


@dataclass(frozen=True)
class Routing:
    """The router's decision for T tokens: ``expert_ids`` (T, k) int64, the k distinct experts of
    each token; ``weights`` (T, k) float32, the weight of each (token, slot) in the token's output;
    ``num_experts`` E. Build one with :func:`route` or :meth:`from_ids` (both check it)."""

    expert_ids: np.ndarray
    weights: np.ndarray
    num_experts: int

    @property
    def num_tokens(self) -> int:
        return self.expert_ids.shape[0]

    @property
    def top_k(self) -> int:
        return self.expert_ids.shape[1]

    @classmethod
    def from_ids(cls, expert_ids, num_experts: int, weights=None) -> Routing:
        """A routing from explicit choices: ``expert_ids`` (T, k) integers in [0, E), distinct in
        each row; ``weights`` (T, k) real, or None for 1 / k each."""
        E = positive_int("num_experts", num_experts)
        ids = _as_int_array(expert_ids, "expert_ids")
        if ids.ndim != 2:
            raise ValueError(f"expert_ids must be 2-D (tokens, top_k), got shape {ids.shape}")
        T, k = ids.shape
        if k < 1:
            raise ValueError("expert_ids has no columns: top_k must be at least 1")
        if k > E:
            raise ValueError(f"top_k={k} is larger than num_experts={E}: a token picks k distinct experts")
        if ids.size and (ids.min() < 0 or ids.max() >= E):
            bad = ids[(ids < 0) | (ids >= E)][0]
            raise ValueError(f"expert_ids must lie in [0, {E}), found {bad}")
        if T and k > 1:
            srt = np.sort(ids, axis=1)
            dup = np.nonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))[0]
            if dup.size:
                raise ValueError(f"token {dup[0]} is routed to the same expert twice: {ids[dup[0]].tolist()}")
        if weights is None:
            wts = np.full((T, k), 1.0 / k, dtype=np.float32)
        else:
            if isinstance(weights, torch.Tensor):
                weights = weights.detach().cpu().numpy()
            wts = np.asarray(weights, dtype=np.float32)
            if wts.shape != (T, k):
                raise ValueError(f"weights must have the shape of expert_ids {(T, k)}, got {wts.shape}")
            if not np.isfinite(wts).all():
                raise ValueError("weights must be finite")
        return cls(ids, wts, E)


def route(num_tokens: int, num_experts: int, top_k: int, skew: float = 1.0, seed: int = 0) -> Routing:
    """A seeded routing with uneven expert loads, like a trained router's.

    Each expert gets a popularity ``skew * z_e`` (z standard normal, drawn once); each token
    perturbs the popularities with its own Gumbel noise and keeps its k largest, which draws k
    distinct experts with probabilities proportional to exp(skew * z_e). ``skew=0`` gives uniform
    expected loads; 1 makes the busiest experts several times busier than the mean (and, for few
    tokens, leaves some experts empty). The weights are the softmax of the token's k perturbed
    scores (they sum to 1 per token)."""
    T = nonnegative_int("num_tokens", num_tokens)
    E = positive_int("num_experts", num_experts)
    k = positive_int("top_k", top_k)
    if k > E:
        raise ValueError(f"top_k={k} is larger than num_experts={E}: a token picks k distinct experts")
    if (
        isinstance(skew, bool)
        or not isinstance(skew, (int, float, np.integer, np.floating))
        or not math.isfinite(skew)
        or skew < 0
    ):
        raise ValueError(f"skew must be a finite number >= 0, got {skew!r}")
    rng = np.random.default_rng(seed)
    popularity = float(skew) * rng.standard_normal(E)
    scores = popularity[None, :] + rng.gumbel(size=(T, E))
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(scores, ids, axis=1)
    w = np.exp(top - top.max(axis=1, keepdims=True)) if T else top
    w = (w / w.sum(axis=1, keepdims=True)) if T else w
    return Routing(ids.astype(np.int64), w.astype(np.float32), E)


def expert_counts(expert_ids, num_experts: int) -> np.ndarray:
    """Rows routed to each expert, (E,) int64 (every (token, slot) pair counts once)."""
    E = positive_int("num_experts", num_experts)
    ids = _as_int_array(expert_ids, "expert_ids").ravel()
    if ids.size and (ids.min() < 0 or ids.max() >= E):
        raise ValueError(f"expert_ids must lie in [0, {E})")
    return np.bincount(ids, minlength=E).astype(np.int64)


def expert_offsets(expert_ids, num_experts: int) -> np.ndarray:
    """(E + 1,) int64: offsets[0] = 0, offsets[e + 1] - offsets[e] = rows of expert e, offsets[E] =
    T k. The rows of expert e in the permuted buffer are offsets[e]:offsets[e + 1]."""
    return np.concatenate([[0], np.cumsum(expert_counts(expert_ids, num_experts))]).astype(np.int64)


def check_offsets(offsets, num_rows: int, num_experts: int | None = None) -> np.ndarray:
    """``offsets`` as (E + 1,) int64 after checking that they can delimit ``num_rows`` rows into
    experts: 1-D integers, at least two entries, first 0, non-decreasing, last ``num_rows`` (and
    E + 1 entries when ``num_experts`` is given). Lists, numpy arrays and integer torch tensors on
    any device are accepted. A ValueError says which rule failed and where."""
    rows = nonnegative_int("num_rows", num_rows)
    off = _as_int_array(offsets, "offsets")
    if off.ndim != 1 or off.size < 2:
        raise ValueError(
            f"offsets must be 1-D with E + 1 >= 2 entries (0, the end of expert 0, ..., the row count), "
            f"got shape {off.shape}"
        )
    if num_experts is not None and off.size != positive_int("num_experts", num_experts) + 1:
        raise ValueError(f"offsets must have num_experts + 1 = {num_experts + 1} entries, got {off.size}")
    if off[0] != 0:
        raise ValueError(f"offsets must start at 0 (the first expert's first row), got {off[0]}")
    steps = np.diff(off)
    if (steps < 0).any():
        i = int(np.nonzero(steps < 0)[0][0])
        raise ValueError(
            f"offsets must be non-decreasing: offsets[{i}] = {off[i]} > offsets[{i + 1}] = {off[i + 1]} "
            f"(expert {i} would have a negative row count)"
        )
    if off[-1] != rows:
        raise ValueError(f"offsets must end at the number of rows, {rows}, got {off[-1]}")
    return off


def permutation(expert_ids) -> np.ndarray:
    """(T k,) int64: row r of the permuted buffer holds (token, slot) pair ``perm[r]`` (as the flat
    index token * k + slot). Sorted by expert, stable: inside an expert, token order is kept."""
    ids = _as_int_array(expert_ids, "expert_ids")
    return np.argsort(ids.ravel(), kind="stable").astype(np.int64)


def _check_routing(routing) -> Routing:
    if not isinstance(routing, Routing):
        raise TypeError(f"routing must be a Routing (from route() or Routing.from_ids), got {type(routing).__name__}")
    return routing


def permute(x: torch.Tensor, routing: Routing) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """(x_perm, perm, offsets): the T k rows of the expert GEMMs, grouped by expert. ``x`` is the
    layer's input (T, K); ``x_perm[r] = x[perm[r] // k]``."""
    routing = _check_routing(routing)
    if not isinstance(x, torch.Tensor) or x.ndim != 2:
        raise ValueError(f"x must be a 2-D torch.Tensor (tokens, K), got {getattr(x, 'shape', type(x).__name__)}")
    if x.shape[0] != routing.num_tokens:
        raise ValueError(f"x has {x.shape[0]} rows but the routing has {routing.num_tokens} tokens")
    perm = permutation(routing.expert_ids)
    token = torch.as_tensor(perm // routing.top_k, device=x.device)
    return x[token], perm, expert_offsets(routing.expert_ids, routing.num_experts)


def unpermute(y_perm: torch.Tensor, perm: np.ndarray, routing: Routing) -> torch.Tensor:
    """y (T, N): each token's k rows of ``y_perm`` brought back and summed with the router's
    weights, in float32 (float64 if y_perm is float64)."""
    routing = _check_routing(routing)
    T, k = routing.expert_ids.shape
    perm = _as_int_array(perm, "perm")
    if y_perm.ndim != 2 or y_perm.shape[0] != T * k:
        raise ValueError(f"y_perm must be (T * k, N) = ({T * k}, N), got {tuple(y_perm.shape)}")
    if perm.shape != (T * k,) or not np.array_equal(np.sort(perm), np.arange(T * k)):
        raise ValueError(f"perm must be a permutation of 0 .. {T * k - 1}")
    dtype = torch.float64 if y_perm.dtype == torch.float64 else torch.float32
    flat = torch.empty((T * k, y_perm.shape[1]), dtype=dtype, device=y_perm.device)
    flat[torch.as_tensor(perm, device=y_perm.device)] = y_perm.to(dtype)
    w = torch.as_tensor(routing.weights, device=y_perm.device).to(dtype)
    return (flat.view(T, k, -1) * w[:, :, None]).sum(dim=1)


class TileSchedule(NamedTuple):
    """One entry per BLOCK_M-row tile of the grouped GEMM, expert by expert: ``expert`` (int32),
    the tile's first row ``row_start`` (int32) and its expert's end ``row_end`` = offsets[expert + 1]
    (int32; rows from there on belong to the next expert and are masked)."""

    expert: np.ndarray
    row_start: np.ndarray
    row_end: np.ndarray
    block_m: int

    @property
    def num_tiles(self) -> int:
        return int(self.expert.size)


def tile_schedule(offsets, block_m: int) -> TileSchedule:
    """The tiles of every non-empty expert, in expert order: ceil(n_e / block_m) tiles for an
    expert of n_e rows, starting at offsets[e] and stepping by block_m."""
    bm = positive_int("block_m", block_m)
    off = _as_int_array(offsets, "offsets")
    off = check_offsets(off, int(off[-1]) if off.ndim == 1 and off.size else 0)
    counts = np.diff(off)
    tiles = -(-counts // bm)
    expert = np.repeat(np.arange(counts.size), tiles)
    first_tile = np.concatenate([[0], np.cumsum(tiles)])[:-1]
    within = np.arange(expert.size) - np.repeat(first_tile, tiles)
    row_start = off[expert] + within * bm
    if off[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{off[-1]} rows do not fit the schedule's int32 row numbers")
    return TileSchedule(expert.astype(np.int32), row_start.astype(np.int32), off[expert + 1].astype(np.int32), bm)


def tile_utilisation(counts, block_m: int) -> float:
    """Useful rows over computed rows when each expert's rows are cut into block_m-row tiles:
    sum n_e / (block_m * sum ceil(n_e / block_m)). 1.0 when every count is a multiple of block_m;
    an expert with one token uses 1 / block_m of its tile. nan when there are no rows."""
    bm = positive_int("block_m", block_m)
    n = _as_int_array(counts, "counts")
    if (n < 0).any():
        raise ValueError("counts must be non-negative")
    tiles = int((-(-n // bm)).sum())
    return float(n.sum()) / (tiles * bm) if tiles else float("nan")


def capacity(num_rows: int, num_experts: int, capacity_factor: float) -> int:
    """Rows each expert gets in a padded batch: ceil(capacity_factor * num_rows / num_experts)
    (num_rows = T k). At factor 1 that is the mean load; rows past it are dropped."""
    rows = nonnegative_int("num_rows", num_rows)
    E = positive_int("num_experts", num_experts)
    cf = positive_number("capacity_factor", capacity_factor)
    return math.ceil(cf * rows / E)


def check_expert_gemm_operands(x_perm, w) -> tuple[int, int, int]:
    """The operand checks of every expert GEMM, without the offsets: x_perm a 2-D tensor (rows, K),
    w a 3-D tensor (E, K, N) of the same dtype and device. Returns (E, K, N). Reads no tensor's
    values (a launcher that must not wait for the GPU can call it)."""
    for name, t, nd, shape in (("x_perm", x_perm, 2, "(rows, K)"), ("w", w, 3, "(E, K, N)")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor {shape}, got {type(t).__name__}")
        if t.ndim != nd:
            raise ValueError(f"{name} must be {nd}-D {shape}, got shape {tuple(t.shape)}")
    E, K, N = w.shape
    if x_perm.shape[1] != K:
        raise ValueError(
            f"x_perm has K = {x_perm.shape[1]} columns but w is {tuple(w.shape)}: w must be "
            f"(E, K, N) with the same K (a weight stored as (E, N, K) needs .transpose(1, 2))"
        )
    if x_perm.dtype != w.dtype:
        raise TypeError(f"x_perm and w must have the same dtype, got {x_perm.dtype} and {w.dtype}")
    if x_perm.device != w.device:
        raise ValueError(f"x_perm and w are on different devices: {x_perm.device} and {w.device}")
    return E, K, N


def check_expert_gemm_args(x_perm, w, offsets) -> tuple[np.ndarray, int, int, int]:
    """Checks shared by every expert GEMM: :func:`check_expert_gemm_operands`, and offsets valid
    for rows and E (:func:`check_offsets`, which reads their values on the host). Returns
    (offsets, E, K, N)."""
    E, K, N = check_expert_gemm_operands(x_perm, w)
    off = check_offsets(offsets, x_perm.shape[0], num_experts=E)
    return off, E, K, N


def grouped_matmul_ref(x_perm: torch.Tensor, w: torch.Tensor, offsets) -> torch.Tensor:
    """The float64 reference: row block e of x_perm times w[e], exactly rounded once to float64
    per dot product (float64's error is far below any format the course compares with)."""
    off, E, K, N = check_expert_gemm_args(x_perm, w, offsets)
    out = torch.zeros((x_perm.shape[0], N), dtype=torch.float64, device=x_perm.device)
    for e in range(E):
        s, t = int(off[e]), int(off[e + 1])
        if t > s:
            out[s:t] = x_perm[s:t].double() @ w[e].double()
    return out


def loop_matmul(x_perm: torch.Tensor, w: torch.Tensor, offsets) -> torch.Tensor:
    """One ``torch.matmul`` per non-empty expert (E launches on a GPU): the simple way, and what
    a grouped GEMM replaces. Output dtype = input dtype. How torch's CPU bf16 matmul accumulates
    depends on the kernel it picks (build, CPU, shapes); chapter 03, section 5 probes it: with
    torch 2.13.0 nearly every output there is bit-identical to fp32 accumulation rounded once."""
    off, E, K, N = check_expert_gemm_args(x_perm, w, offsets)
    out = torch.empty((x_perm.shape[0], N), dtype=x_perm.dtype, device=x_perm.device)
    for e in range(E):
        s, t = int(off[e]), int(off[e + 1])
        if t > s:
            torch.matmul(x_perm[s:t], w[e], out=out[s:t])
    return out


class PaddedResult(NamedTuple):
    """What :func:`padded_matmul` computed: ``out`` (rows, N) with dropped rows set to zero,
    ``kept`` (rows,) bool, the ``capacity`` per expert, and the rows it computed in all
    (``computed_rows`` = E * capacity) against the rows that were useful (``kept_rows``)."""

    out: torch.Tensor
    kept: np.ndarray
    capacity: int
    computed_rows: int
    kept_rows: int

    @property
    def dropped_rows(self) -> int:
        return int(self.kept.size - self.kept_rows)

    @property
    def padding_fraction(self) -> float:
        """Fraction of the computed rows (and so of the FLOPs) spent on zero padding."""
        return 1.0 - self.kept_rows / self.computed_rows if self.computed_rows else 0.0


def padded_matmul(x_perm: torch.Tensor, w: torch.Tensor, offsets, capacity_factor: float = 1.25) -> PaddedResult:
    """Every expert padded (or cut) to the same ``capacity`` rows, then one batched matmul
    (E, C, K) @ (E, K, N). An expert with fewer rows computes zeros; rows past the capacity are
    dropped (the first C rows of each expert, in token order, are kept, as Switch-style routers
    do), and their output is zero."""
    off, E, K, N = check_expert_gemm_args(x_perm, w, offsets)
    C = capacity(x_perm.shape[0], E, capacity_factor)
    counts = np.diff(off)
    kept_counts = np.minimum(counts, C)
    expert_of_row = np.repeat(np.arange(E), counts)
    position = np.arange(off[-1]) - off[expert_of_row]  # the row's place inside its expert
    rows = np.nonzero(position < C)[0].astype(np.int64)
    slots = expert_of_row[rows] * C + position[rows]
    dev = x_perm.device
    rows_t, slots_t = torch.as_tensor(rows, device=dev), torch.as_tensor(slots, device=dev)
    buf = torch.zeros((E * C, K), dtype=x_perm.dtype, device=dev)
    buf[slots_t] = x_perm[rows_t]
    y = torch.bmm(buf.view(E, C, K), w).view(E * C, N)
    out = torch.zeros((x_perm.shape[0], N), dtype=x_perm.dtype, device=dev)
    out[rows_t] = y[slots_t]
    kept = np.zeros(x_perm.shape[0], dtype=bool)
    kept[rows] = True
    return PaddedResult(out, kept, C, E * C, int(kept_counts.sum()))


class PaddedTraffic(NamedTuple):
    """What one call of :func:`padded_matmul` moves besides its batched GEMM, on the device:
    ``copy_bytes`` (the zero-filled (E C, K) buffer and (rows, N) output, and the gather and the
    scatter, each an indexed read into a temporary and an indexed write: four passes over the kept
    rows of x and four over those of y), ``index_bytes`` (its two int64 index arrays, built in
    numpy on the host and copied to the device on every call), and the GEMM's ``computed_rows``
    (E C) against the ``kept_rows``."""

    copy_bytes: int
    index_bytes: int
    computed_rows: int
    kept_rows: int


def padded_traffic(counts, K: int, N: int, capacity_factor: float = 1.25, itemsize: int = 2) -> PaddedTraffic:
    """:class:`PaddedTraffic` of :func:`padded_matmul` for experts with ``counts`` rows (E,), K in,
    N out, ``itemsize`` bytes an element (2: bf16), counted from its code: ``torch.zeros`` of the
    buffer and of the output, ``buf[slots] = x_perm[rows]`` and ``out[rows] = y[slots]``."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.ndim != 1 or counts.size == 0 or (counts < 0).any():
        raise ValueError(f"counts must be a non-empty 1-D array of rows >= 0, got {counts!r}")
    K, N, itemsize = (positive_int(n, v) for n, v in (("K", K), ("N", N), ("itemsize", itemsize)))
    rows, E = int(counts.sum()), counts.size
    C = capacity(rows, E, capacity_factor)
    kept = int(np.minimum(counts, C).sum())
    copy = (E * C * K + rows * N + 4 * kept * (K + N)) * itemsize
    return PaddedTraffic(copy, 2 * kept * 8, E * C, kept)


def torch_grouped_mm(x_perm: torch.Tensor, w: torch.Tensor, offsets) -> torch.Tensor:
    """PyTorch's grouped GEMM, ``torch.nn.functional.grouped_mm(x_perm, w, offs=offsets[1:])``:
    one call for all experts (its ``offs`` are the E cumulative ends, int32). Output dtype =
    input dtype. It needs K and N to fill whole 16-byte units (multiples of 8 for bf16): a clear
    ValueError otherwise, before torch's own message."""
    off, E, K, N = check_expert_gemm_args(x_perm, w, offsets)
    size = x_perm.element_size()
    if (K * size) % 16 or (N * size) % 16:
        raise ValueError(
            f"torch's grouped_mm needs rows of whole 16-byte units: K * itemsize = {K * size} and "
            f"N * itemsize = {N * size} bytes must both be multiples of 16 (for {x_perm.dtype}: K and "
            f"N multiples of {16 // size})"
        )
    if x_perm.shape[0] == 0:
        return torch.zeros((0, N), dtype=x_perm.dtype, device=x_perm.device)
    offs = torch.as_tensor(off[1:], dtype=torch.int32, device=x_perm.device)
    return torch.nn.functional.grouped_mm(x_perm, w, offs=offs)


def moe_layer(
    x: torch.Tensor,
    routing: Routing,
    w: torch.Tensor,
    expert_gemm: Callable[[torch.Tensor, torch.Tensor, np.ndarray], torch.Tensor] = torch_grouped_mm,
) -> torch.Tensor:
    """One expert GEMM of a routed layer, end to end: permute, ``expert_gemm(x_perm, w, offsets)``
    (any of the functions above, or the Triton kernel's launcher), un-permute with the router's
    weights. (T, K) in, (T, N) out in float32 (float64 for float64 inputs)."""
    x_perm, perm, off = permute(x, routing)
    y_perm = expert_gemm(x_perm, w, off)
    if isinstance(y_perm, PaddedResult):
        y_perm = y_perm.out
    return unpermute(y_perm, perm, routing)


class LayerCost(NamedTuple):
    """Napkin numbers of one expert GEMM of a layer: FLOPs, the bytes each operand moves at
    least once, and FLOPs per byte."""

    flops: float
    weight_bytes: float
    activation_bytes: float
    output_bytes: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes + self.output_bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def layer_cost(
    num_tokens: int, top_k: int, num_experts: int, K: int, N: int, itemsize: int = 2, active_experts: int | None = None
) -> LayerCost:
    """2 T k K N FLOPs; the weights of every active expert read once (``active_experts`` defaults
    to all E), x_perm read once and y_perm written once, at ``itemsize`` bytes per element."""
    T = nonnegative_int("num_tokens", num_tokens)
    k, E = positive_int("top_k", top_k), positive_int("num_experts", num_experts)
    K, N, b = positive_int("K", K), positive_int("N", N), positive_int("itemsize", itemsize)
    active = E if active_experts is None else nonnegative_int("active_experts", active_experts)
    rows = T * k
    return LayerCost(2.0 * rows * K * N, float(active) * K * N * b, float(rows) * K * b, float(rows) * N * b)


class AlignedBlocks(NamedTuple):
    """The block-aligned layout of vLLM's fused_moe kernel (built there by ``moe_align_block_size``):
    ``sorted_token_ids``, the flat (token, slot) indices ``t * k + s`` grouped by expert, each
    expert's run padded with the sentinel ``T * k`` up to a multiple of ``block_m``;
    ``expert_ids``, one expert per ``block_m`` block; ``num_tokens_post_padded``, the padded total.
    The GEMM reads token ``sorted_token_ids[i] // k`` directly: no permuted copy of ``x``."""

    sorted_token_ids: np.ndarray
    expert_ids: np.ndarray
    num_tokens_post_padded: int
    block_m: int
    sentinel: int


def align_block_size_ref(expert_ids, num_experts: int, block_m: int) -> AlignedBlocks:
    """A host reference of the block-aligned layout (see :class:`AlignedBlocks`). expert_ids:
    (T, k) ints in [0, num_experts). Inside an expert the (token, slot) pairs keep their order
    (this reference's choice). An empty expert gets no block; the result has
    sum_e ceil(n_e / block_m) * block_m entries, at most T k + E (block_m - 1)."""
    bm = positive_int("block_m", block_m)
    E = positive_int("num_experts", num_experts)
    ids = _as_int_array(expert_ids, "expert_ids")
    if ids.ndim != 2:
        raise ValueError(f"expert_ids must be (T, k), got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= E):
        raise ValueError(f"expert ids must lie in [0, {E})")
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=E)
    padded = -(-counts // bm) * bm
    sentinel = flat.size
    out = np.full(int(padded.sum()), sentinel, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(padded)])[:-1]
    src = np.concatenate([[0], np.cumsum(counts)])
    for e in np.flatnonzero(counts):
        out[starts[e] : starts[e] + counts[e]] = order[src[e] : src[e + 1]]
    block_expert = np.repeat(np.arange(E), padded // bm)
    return AlignedBlocks(out, block_expert.astype(np.int64), int(padded.sum()), bm, sentinel)


class LayoutRows(NamedTuple):
    """Rows of one grouped-GEMM layout for given expert counts: ``routed`` (T k), ``buffer`` (the
    rows, or index entries, the layout stores) and ``computed`` (the rows its ``block_m`` tiles
    compute)."""

    layout: str
    routed: int
    buffer: int
    computed: int

    @property
    def padded(self) -> int:
        """Rows the layout stores beyond the routed ones."""
        return self.buffer - self.routed

    @property
    def computed_padding(self) -> int:
        """Rows the tiles compute beyond the routed ones."""
        return self.computed - self.routed


LAYOUTS = ("offsets", "aligned", "masked")  # the layouts layout_rows knows


def layout_rows(counts, block_m: int, layout: str, max_m: int | None = None) -> LayoutRows:
    """Buffer and computed rows of a grouped layout, counts: the (E,) rows per expert.

    - ``"offsets"`` (this course): the routed rows back to back, E + 1 offsets; tiles start at
      each expert's first row and are masked at its end, so the buffer holds no padding.
    - ``"aligned"`` (vLLM's ``moe_align_block_size``, DeepGEMM's contiguous layout): each expert's
      run padded to a multiple of ``block_m``, so a block never spans two experts.
    - ``"masked"`` (DeepGEMM's masked layout): ``max_m`` rows reserved per expert (at least the
      busiest count) and a count of the valid ones; the buffer is E * max_m whatever the routing.

    In all three the tiles compute sum_e ceil(n_e / block_m) * block_m rows: the layouts differ in
    what they store, not in how many tile rows they compute."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    bm = positive_int("block_m", block_m)
    n = _as_int_array(counts, "counts")
    if n.ndim != 1 or (n < 0).any():
        raise ValueError("counts must be a 1-D array of non-negative ints")
    routed = int(n.sum())
    computed = int((-(-n // bm) * bm).sum())
    if layout == "offsets":
        buffer = routed
    elif layout == "aligned":
        buffer = computed
    else:
        if max_m is None:
            raise ValueError("the masked layout needs max_m, the rows reserved per expert")
        m = positive_int("max_m", max_m)
        if n.size and m < n.max():
            raise ValueError(f"max_m = {m} is below the busiest expert's {int(n.max())} rows")
        buffer = m * int(n.size)
    return LayoutRows(layout, routed, buffer, computed)
