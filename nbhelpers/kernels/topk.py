"""Top-k of each row of a (rows, V) tensor in Triton (chapter 11): three shapes of kernel.

* ``"row"``: one program per row holds a running top-k of ``K_PAD = next_pow2(k)`` candidates
  while it reads its row in blocks of ``BLOCK_V`` (:func:`topk_chunk_kernel` with one chunk per
  row). One read of the row; the row's only parallelism is one program.
* ``"two_stage"``: ``n_chunks`` programs per row, each the same running top-k over its chunk of
  ``chunk`` columns, written to a scratch buffer; then :func:`topk_merge_kernel`, one program per
  row, merges the chunks' candidate lists, ``MERGE_BLOCK`` candidates (several lists) a step. One
  read of the row plus the candidates (a chunk as long as the row is "row": no merge). Without
  ``chunk``, :func:`default_chunk` sizes the chunks for the batch by the performance model
  (:mod:`nbhelpers.perf_model`: Little's law and instruction issue among its limits): small
  chunks, many programs, for a few rows; larger ones, fewer candidates, fewer insertions and fewer
  waves of programs, as the batch grows.
* ``"radix"``: :func:`radix_select_kernel`, one program per row: ``ceil(key_bits / 8)``
  histogram passes over the row's order-preserving keys find the k-th largest key (a digit of 8
  bits per pass, most significant first), then a filtering pass writes the top-k set in index
  order; ``torch.sort`` of the k winners (stable) orders them.

The loops over a row (the running top-k's and radix select's) are software-pipelined by Triton
(``tl.range(..., num_stages=STAGES)``): the loads of the next ``STAGES - 1`` blocks are in flight
(``cp.async`` into shared memory) while one block is merged or counted. The running top-k filters
each block in 32 bits (:func:`_signed_keys`; the block's largest key against the list's smallest)
and builds 64-bit packed keys only for a block that beats the list: the compile table counts each
loop's instructions and their issue cycles (:data:`ISSUE_CYCLES`), which on a GPU bound these
kernels more than their bytes do (:func:`predicted`).

Every kernel works on the values' **bits** (the launcher passes an int16 or int32 view of the
tensor; no copy), so bf16 and fp16 behave the same in Triton's interpreter, which holds bf16 as
raw integers, and on a GPU. The key is :func:`nbhelpers.topk.topk_keys`: every NaN the largest,
-0 equal to +0. The running top-k compares 64-bit **packed** keys, ``(key - 2**(w-1)) * 2**32 +
(2**32 - 1 - index)``: distinct for distinct indices, larger for a larger key and, among equal
keys, for a lower index. So every kernel returns exactly :func:`nbhelpers.topk.topk_ref`'s
answer: values largest first, ties to the lowest index. ``torch.topk`` returns the same values
but may return other indices among equal values.

Launch with :func:`topk` (values and indices, like ``torch.topk(x, k)``).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..occupancy import occupancy
from ..perf_model import GPU, H200, Launch, Prediction, predict
from ..topk import key_format
from ..validation import int_in_range, positive_int
from .launch_checks import require_kernel_device

__all__ = [
    "METHODS",
    "DEFAULT_BLOCK_V",
    "MERGE_BLOCK",
    "default_chunk",
    "in_flight_blocks",
    "predicted",
    "RADIX_DIGIT_BITS",
    "REGISTERS",
    "ISSUE_CYCLES",
    "expected_insertions",
    "issue_counts",
    "STAGES",
    "topk_chunk_kernel",
    "topk_merge_kernel",
    "radix_select_kernel",
    "topk",
    "plan",
]

METHODS = ("row", "two_stage", "radix")
DEFAULT_BLOCK_V = 1024  # columns read per step of a running top-k (at least K_PAD)
#: candidates the two-stage merge reads per step (at least two lists: 2 K_PAD). The merge takes the
#: step's K_PAD largest with ``tl.topk`` and merges them into its sorted list (a list of 8 or fewer
#: takes the few that beat it with ``_absorb``). 1,024 int64 candidates of lists of 64 compile
#: without a spill for sm_80 and sm_90 in Triton 3.6 and 3.7 (72 registers); 2,048 spill 4 B in
#: Triton 3.6 for sm_90, 4,096 spill 12 B in both for sm_80
MERGE_BLOCK = 1024
RADIX_DIGIT_BITS = 8  # bits of key per histogram pass: 256 bins
RADIX_BLOCK_V = 2048  # columns per step of the radix kernel's passes
#: the running top-k's and radix select's ``num_stages`` (``tl.range``): two blocks' loads in flight
#: ahead of the one being merged or counted. Compiled for sm_90 (the compile tables of Triton 3.6
#: and 3.7) every default launch stays without spills: the running top-k at 47-72 registers, radix
#: select at 191-255, where 4 stages would cost the running top-k a spill
STAGES = 3
#: registers per thread the model (:func:`predicted`) assumes for each kernel: the most any default
#: launch of it takes in the compile table (sm_90, benchmarks/results/compile_check.json; the
#: tests check these against it)
REGISTERS = {"topk_chunk_kernel": 72, "topk_merge_kernel": 128, "radix_select_kernel": 225}
#: issue cycles each warp needs, from the loops of the compiled kernels (sm_90, the compile
#: table's ``loops``: :func:`nbhelpers.compile_check.sass_loops`; one instruction a cycle, an
#: integer instruction two, a shuffle four), the most over bf16 and fp32 logits and over "row" and
#: the first stage, by K_PAD (8, 64, 1,024: k = 8, 50, 1,024; another K_PAD takes the next one up).
#: For the running top-k and the merge: (a step: the shortest trip through the loop over the row,
#: the block filtered and skipped; entering: what a block that beats the list adds before its first
#: insertion (the merge's steps always enter: 0); one insertion: a turn of ``_absorb``'s loop; a
#: merge of lists longer than 8 takes its steps' top-k whole: no insertions). For
#: radix select: (a step of a histogram pass, a step of the filtering pass, 0). Work outside these
#: loops (a program's start, the final sort of its list) is left out.
ISSUE_CYCLES = {
    "topk_chunk_kernel": {8: (246, 196, 212), 64: (250, 224, 240), 1024: (244, 228, 356)},
    "topk_merge_kernel": {8: (332, 0, 212), 64: (4076, 0, 0), 1024: (17162, 0, 0)},
    "radix_select_kernel": {8: (1902, 3124, 0), 64: (1902, 3124, 0), 1024: (1902, 3124, 0)},
}

_FORMAT_OF = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_BITS_VIEW = {16: torch.int16, 32: torch.int32}


@triton.jit
def _signed_keys(bits, KEY_BITS: tl.constexpr, EXP_MASK: tl.constexpr):
    """Top-k keys of raw codes as int32, less 2**(KEY_BITS - 1) (so that they order as signed
    integers): a non-negative code is its own key, a negative one has its magnitude bits flipped;
    every NaN -> 2**(KEY_BITS - 1) - 1, -0 -> +0's key, 0. Four 32-bit operations a value."""
    LOW: tl.constexpr = (1 << (KEY_BITS - 1)) - 1  # every bit but the sign
    code = bits.to(tl.int32)  # a 16-bit code arrives sign-extended
    mag = code & LOW
    key = tl.where(code < 0, code ^ LOW, code)
    key = tl.where(mag > EXP_MASK, LOW, key)  # NaN: above the exponent of infinity
    return tl.where(mag == 0, 0, key)


@triton.jit
def _keys(bits, KEY_BITS: tl.constexpr, EXP_MASK: tl.constexpr):
    """Unsigned top-k keys (int64) of raw codes: flip every bit of a negative code, the sign bit of
    a non-negative one; every NaN -> 2**KEY_BITS - 1, -0 -> +0's key."""
    SIGN: tl.constexpr = 1 << (KEY_BITS - 1)
    return _signed_keys(bits, KEY_BITS, EXP_MASK).to(tl.int64) + SIGN


@triton.jit
def _packed(skey, cols, valid, KEY_BITS: tl.constexpr):
    """64-bit keys that order (value, lower index first) from :func:`_signed_keys`; masked lanes
    get the smallest value, -2**(KEY_BITS - 1) * 2**32, which no real element has (key 0 is a
    negative NaN's raw key, and NaN keys are moved to the top)."""
    SIGN: tl.constexpr = 1 << (KEY_BITS - 1)
    low = 0xFFFFFFFF - cols.to(tl.int64)
    packed = (skey.to(tl.int64) << 32) | low
    empty = (tl.zeros_like(packed) - SIGN) << 32
    return tl.where(valid, packed, empty)


@triton.jit
def _empty_list(K_PAD: tl.constexpr, KEY_BITS: tl.constexpr):
    """A top-k list holding no element: K_PAD distinct values below every real packed key."""
    empty = (tl.zeros((K_PAD,), tl.int64) - (1 << (KEY_BITS - 1))) << 32
    return empty + tl.arange(0, K_PAD).to(tl.int64)


@triton.jit
def _absorb(best, kth, packed, K_PAD: tl.constexpr):
    """Insert the entries of ``packed`` that beat the list's smallest, ``kth``, into ``best`` (an
    unsorted list of K_PAD distinct packed keys): the largest first, each replacing the list's
    current smallest, while one does. A block that holds none (for a small k, most blocks once the
    list has filled) costs one maximum. Returns (best, its new smallest)."""
    m = tl.max(packed)
    while m > kth:
        best = tl.where(best == kth, m, best)
        packed = tl.where(packed == m, kth, packed)
        kth = tl.min(best)
        m = tl.max(packed)
    return best, kth


@triton.jit
def _store_final(best, row, bits_ptr, vals_ptr, idx_ptr, stride_row, k, K_PAD: tl.constexpr):
    """Sort the list once, then unpack its first k: index from the low 32 bits, value (its bits)
    re-read from the row."""
    best = tl.sort(best, descending=True)
    j = tl.arange(0, K_PAD)
    keep = j < k
    col = 0xFFFFFFFF - (best & 0xFFFFFFFF)
    v = tl.load(bits_ptr + row * stride_row + col, mask=keep)
    tl.store(vals_ptr + row * k + j, v, mask=keep)
    tl.store(idx_ptr + row * k + j, col, mask=keep)


@triton.jit
def topk_chunk_kernel(
    bits_ptr,  # (rows, V) int16/int32 codes, row stride stride_row
    part_ptr,  # (rows, n_chunks, K_PAD) int64 candidates (unused when FINAL)
    vals_ptr,  # (rows, k) codes (FINAL)
    idx_ptr,  # (rows, k) int64 (FINAL)
    V,
    k,
    stride_row,
    CHUNK,  # columns per program; n_chunks = cdiv(V, CHUNK)
    n_chunks,
    KEY_BITS: tl.constexpr,
    EXP_MASK: tl.constexpr,
    K_PAD: tl.constexpr,
    BLOCK_V: tl.constexpr,
    FINAL: tl.constexpr,  # one chunk per row: write the top k itself
    STAGES: tl.constexpr = 1,  # blocks whose loads are in flight ahead of the one merged: STAGES - 1
):
    NO_KEY: tl.constexpr = -(1 << (KEY_BITS - 1))  # below every real key: a lane past the end
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    start = c * CHUNK
    stop = tl.minimum(start + CHUNK, V)
    best = _empty_list(K_PAD, KEY_BITS)
    kth = tl.min(best)
    # tl.range's num_stages: Triton's pipeliner issues the loads of the next STAGES - 1 blocks (cp.async
    # into shared memory) before this one is merged; it pipelines this loop only while the loop's
    # body holds no loop of its own outside an `if` (the compile table: cp_async 0 without the guard)
    for off in tl.range(start, stop, BLOCK_V, num_stages=STAGES):
        cols = off + tl.arange(0, BLOCK_V)
        valid = cols < stop  # the chunk's end and the row's (V need not be a multiple of anything)
        bits = tl.load(bits_ptr + row * stride_row + cols, mask=valid, other=0)
        skey = tl.where(valid, _signed_keys(bits, KEY_BITS, EXP_MASK), NO_KEY)
        # the filter, in 32 bits: the block's largest key against the list's smallest. An equal
        # key never beats it: it comes later in the row, and ties go to the lower index
        if tl.max(skey) > (kth >> 32).to(tl.int32):  # a block that beats nothing skips the loop
            best, kth = _absorb(best, kth, _packed(skey, cols, valid, KEY_BITS), K_PAD)
    if FINAL:
        _store_final(best, row, bits_ptr, vals_ptr, idx_ptr, stride_row, k, K_PAD)
    else:
        tl.store(part_ptr + (row * n_chunks + c) * K_PAD + tl.arange(0, K_PAD), best)


@triton.jit
def topk_merge_kernel(
    part_ptr,  # (rows, n_chunks, K_PAD) int64 candidates of topk_chunk_kernel
    bits_ptr,
    vals_ptr,
    idx_ptr,
    k,
    stride_row,
    n_chunks,
    KEY_BITS: tl.constexpr,
    K_PAD: tl.constexpr,
    MERGE_BLOCK: tl.constexpr,  # candidates read per step: MERGE_BLOCK / K_PAD chunks' lists
):
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, MERGE_BLOCK)
    best = tl.sort(_empty_list(K_PAD, KEY_BITS), descending=True)  # kept sorted, largest first
    empty = tl.min(best)  # below every real key; a chunk's unfilled slots become it, never taken
    total = n_chunks * K_PAD
    for off in range(0, total, MERGE_BLOCK):
        ok = off + j < total
        cand = tl.load(part_ptr + row * total + off + j, mask=ok, other=0)
        # past the last list, and a chunk shorter than K_PAD's fillers: below every real key
        cand = tl.where(ok & (cand >= empty + K_PAD), cand, empty)
        # the step's K_PAD largest (tl.topk: a bitonic network, no loop), then the K_PAD largest of
        # those and the list: one sorted largest first, the other smallest first, and their
        # elementwise maximum holds the K_PAD largest of both
        if K_PAD <= 8:  # a short list: insert the few that beat it, one at a time (_absorb)
            best, kth = _absorb(best, tl.min(best), cand, K_PAD)
            best = tl.sort(best, descending=True)
        else:
            top = tl.topk(cand, K_PAD)
            best = tl.sort(tl.maximum(best, tl.flip(top, 0)), descending=True)
    _store_final(best, row, bits_ptr, vals_ptr, idx_ptr, stride_row, k, K_PAD)


@triton.jit
def radix_select_kernel(
    bits_ptr,  # (rows, V) int16/int32 codes
    vals_ptr,  # (rows, k) codes of the top-k set, in index order
    idx_ptr,  # (rows, k) int64
    V,
    k,
    stride_row,
    KEY_BITS: tl.constexpr,
    EXP_MASK: tl.constexpr,
    DIGIT_BITS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    STAGES: tl.constexpr = 1,  # blocks whose loads are in flight ahead of the one counted: STAGES - 1
):
    row = tl.program_id(0).to(tl.int64)
    base = bits_ptr + row * stride_row
    NBINS: tl.constexpr = 1 << DIGIT_BITS
    N_PASS: tl.constexpr = (KEY_BITS + DIGIT_BITS - 1) // DIGIT_BITS
    bins = tl.arange(0, NBINS)
    prefix = tl.zeros((), tl.int64)  # the digits of the k-th largest key found so far
    needed = k  # how many of the top k are still among the keys that match the prefix
    for p in tl.static_range(N_PASS):
        # this pass's digit: bits [shift, shift + width) of the key (the last may be narrower)
        shift = max(KEY_BITS - (p + 1) * DIGIT_BITS, 0)
        width = KEY_BITS - p * DIGIT_BITS - shift
        hist = tl.zeros((NBINS,), tl.int32)
        for off in tl.range(0, V, BLOCK_V, num_stages=STAGES):
            cols = off + tl.arange(0, BLOCK_V)
            valid = cols < V
            key = _keys(tl.load(base + cols, mask=valid, other=0), KEY_BITS, EXP_MASK)
            match = valid & ((key >> (shift + width)) == prefix)
            digit = ((key >> shift) & ((1 << width) - 1)).to(tl.int32)
            hist += tl.histogram(digit, NBINS, mask=match)
        # the bin where the count from the top reaches `needed`
        at_or_above = tl.sum(hist) - tl.cumsum(hist, 0) + hist
        b = tl.sum((at_or_above >= needed).to(tl.int32)) - 1
        needed -= tl.sum(tl.where(bins > b, hist, 0))
        prefix = (prefix << width) | b.to(tl.int64)
    # the filtering pass: every key above the k-th, and the first `needed` keys equal to it
    written = 0
    equal_seen = 0
    for off in tl.range(0, V, BLOCK_V, num_stages=STAGES):
        cols = off + tl.arange(0, BLOCK_V)
        valid = cols < V
        bits = tl.load(base + cols, mask=valid, other=0)
        key = _keys(bits, KEY_BITS, EXP_MASK)
        eq = valid & (key == prefix)
        eq_rank = equal_seen + tl.cumsum(eq.to(tl.int32), 0) - 1
        take = (valid & (key > prefix)) | (eq & (eq_rank < needed))
        pos = written + tl.cumsum(take.to(tl.int32), 0) - 1
        tl.store(vals_ptr + row * k + pos, bits, mask=take)
        tl.store(idx_ptr + row * k + pos, cols.to(tl.int64), mask=take)
        written += tl.sum(take.to(tl.int32))
        equal_seen += tl.sum(eq.to(tl.int32))


def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def in_flight_blocks(chunk: int, block_v: int, stages: int, row_stride: int | None = None) -> int:
    """How many ``block_v``-wide loads one program of the running top-k keeps in flight over a
    chunk of ``chunk`` columns with ``stages`` (``num_stages``): ``stages - 1`` ahead of the block
    it merges (one when unpipelined), no more than the chunk has blocks. Rows whose stride (in
    values, ``row_stride``) is not a multiple of 16 get one: Triton cannot prove their loads
    16-byte aligned, and leaves the loop unpipelined (the compile table's row for V = 50,257)."""
    if row_stride is not None and row_stride % 16:
        return 1
    return max(min(stages - 1, triton.cdiv(chunk, block_v)), 1)


def issue_counts(kernel: str, k_pad: int) -> tuple[int, int, int]:
    """:data:`ISSUE_CYCLES` of ``kernel`` for a list of ``k_pad``: the compiled K_PAD at or above
    it (the largest for a longer list)."""
    table = ISSUE_CYCLES[kernel]
    return table[min((p for p in table if p >= k_pad), default=max(table))]


def expected_insertions(blocks: list[int], k_pad: int) -> tuple[float, float]:
    """(insertions, blocks that enter ``_absorb``) a running top-k of ``k_pad`` makes, on average
    over the orders of its values, reading blocks of the sizes ``blocks`` one after another (values
    in no particular order: distinct, every order as likely). ``_absorb`` takes a block's values
    that beat the list largest first, each replacing the list's smallest, so a value is inserted
    exactly when it is among the k_pad largest of its block and every block before it: a block of
    ``size`` after ``n`` values inserts ``k * size / (n + size)`` on average, ``k = min(k_pad, n +
    size)`` (its share of the top k so far), and enters when it holds one of them, with
    probability ``1 - C(n, k) / C(n + size, k)``. A row sorted ascending is the worst case: every
    block inserts ``min(k_pad, size)``."""
    ins = enter = 0.0
    seen = 0
    for size in blocks:
        k = min(k_pad, seen + size)
        ins += k * size / (seen + size)
        # the probability that none of the top k of the first seen + size values is in this block
        if seen >= k:
            lg = math.lgamma
            none = math.exp(lg(seen + 1) - lg(seen - k + 1) - lg(seen + size + 1) + lg(seen + size - k + 1))
        else:
            none = 0.0
        enter += 1.0 - none
        seen += size
    return ins, enter


def default_chunk(
    V: int, k: int, rows: int = 1, value_bytes: int = 2, block_v: int | None = None, gpu: GPU = H200
) -> int:
    """Columns per first-stage program of "two_stage" when none is given: the power of two, from
    one block (``block_v``: :data:`DEFAULT_BLOCK_V`, or K_PAD when larger) to the whole row, whose plan the model
    predicts fastest on ``gpu`` (:func:`predicted`, both launches together), the larger chunk on a
    tie (fewer candidates). Small chunks make many programs, each with few dependent steps, but
    more candidates to merge and, past what the GPU holds at once, waves of programs one after
    another; large chunks make few programs that keep too little in flight (Little's law) and a
    long chain of steps each."""
    positive_int("V", V, "a row length")
    positive_int("rows", rows, "a number of rows")
    key = (V, k, rows, value_bytes, block_v, gpu.name, gpu.sms, gpu.hbm_bytes_per_s, gpu.latency_s, gpu.launch_s)
    key += (gpu.clock_hz, gpu.issue_per_sm, gpu.issue_factor)
    if key not in _CHUNKS:  # every launch asks: the model runs once per shape
        if len(_CHUNKS) >= 4096:
            _CHUNKS.clear()
        _CHUNKS[key] = _fastest_chunk(V, k, rows, value_bytes, block_v, gpu)
    return _CHUNKS[key]


_CHUNKS: dict[tuple, int] = {}


def _fastest_chunk(V: int, k: int, rows: int, value_bytes: int, block_v: int | None, gpu: GPU) -> int:
    bv = max(_next_pow2(k), DEFAULT_BLOCK_V if block_v is None else _next_pow2(block_v))
    best, best_s = bv, math.inf
    chunk = bv
    while True:
        forecast = predicted(V, k, "two_stage", rows, value_bytes, chunk, block_v=block_v, gpu=gpu)
        seconds = sum(q.seconds for q in forecast)
        if seconds <= best_s * (1 + 1e-9):
            best, best_s = chunk, min(seconds, best_s)
        if chunk >= V:
            return best
        chunk *= 2


def plan(
    V: int,
    k: int,
    method: str = "row",
    block_v: int | None = None,
    chunk: int | None = None,
    rows: int = 1,
    value_bytes: int = 2,
) -> dict:
    """The launch parameters :func:`topk` uses for ``rows`` rows of V values of ``value_bytes``
    bytes and this k: the grid of each kernel and its constexprs (used by the notebook, the compile
    check and the benchmark). "two_stage" without ``chunk`` takes :func:`default_chunk`."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    for name, v in (("block_v", block_v), ("chunk", chunk)):
        if v is not None:
            positive_int(name, v, "a number of columns")
    positive_int("rows", rows, "a number of rows")
    if value_bytes not in (2, 4):
        raise ValueError(f"value_bytes must be 2 (bf16, fp16) or 4 (fp32), got {value_bytes!r}")
    k_pad = _next_pow2(k)
    if method == "radix":  # tl.arange takes a power of two
        bv = RADIX_BLOCK_V if block_v is None else _next_pow2(block_v)
        return {"K_PAD": k_pad, "BLOCK_V": bv, "DIGIT_BITS": RADIX_DIGIT_BITS, "STAGES": STAGES, "n_chunks": 1}
    bv = max(k_pad, DEFAULT_BLOCK_V if block_v is None else _next_pow2(block_v))
    if method == "row":
        return {"K_PAD": k_pad, "BLOCK_V": bv, "STAGES": STAGES, "CHUNK": V, "n_chunks": 1}
    ch = default_chunk(V, k, rows, value_bytes, block_v) if chunk is None else chunk
    return {
        "K_PAD": k_pad,
        "BLOCK_V": bv,
        "STAGES": STAGES,
        "CHUNK": ch,
        "n_chunks": triton.cdiv(V, ch),
        "MERGE_BLOCK": max(MERGE_BLOCK, 2 * k_pad),
    }


def predicted(
    V: int,
    k: int,
    method: str,
    rows: int = 1,
    value_bytes: int = 2,
    chunk: int | None = None,
    registers: int | None = None,
    gpu: GPU = H200,
    block_v: int | None = None,
) -> list[Prediction]:
    """What :mod:`nbhelpers.perf_model` predicts for each launch :func:`topk` makes with this plan
    (one for "row" and "radix", two for "two_stage": the chunks, then the merge; one when a
    chunk covers the row, which :func:`topk` launches as "row"). Every step of a
    program loads one block (``BLOCK_V`` values; the merge ``MERGE_BLOCK`` candidates of 8 bytes);
    the running top-k and radix select keep ``STAGES - 1`` blocks in flight
    (:func:`in_flight_blocks`), the merge waits for each of its one or two steps. A program of 4
    warps with ``registers`` per thread (default :data:`REGISTERS`, the compile table's) sets how
    many an SM holds. Bytes: the logits read (radix select: once per pass), the candidate lists
    written and read; the k outputs are left out (a few hundred bytes). Issue cycles per warp
    (:data:`ISSUE_CYCLES`): the steps, and for the running top-k and the merge the blocks that
    enter ``_absorb`` and the insertions, as many as :func:`expected_insertions` expects of
    values in no particular order (a chunk's first block fills its list; the merge's lists arrive
    ``MERGE_BLOCK / K_PAD`` at a time)."""
    p = plan(V, k, method, block_v, chunk, rows=rows, value_bytes=value_bytes)

    def per_sm(kernel: str) -> int:
        return occupancy(REGISTERS[kernel] if registers is None else registers, 4, 0).blocks

    if method == "radix":
        digit_passes = -(-8 * value_bytes // p["DIGIT_BITS"])
        blocks = -(-V // p["BLOCK_V"])
        stages = in_flight_blocks(V, p["BLOCK_V"], p["STAGES"], row_stride=V)
        hist, collect, _ = issue_counts("radix_select_kernel", p["K_PAD"])
        launch = Launch(
            rows,
            per_sm("radix_select_kernel"),
            p["BLOCK_V"] * value_bytes,
            (digit_passes + 1) * blocks,
            stages,
            issue_cycles=blocks * (digit_passes * hist + collect),
        )
        return [predict(gpu, launch, (digit_passes + 1) * rows * V * value_bytes)]
    span = min(p["CHUNK"], V)
    steps = -(-span // p["BLOCK_V"])
    logits = rows * V * value_bytes
    stages = in_flight_blocks(span, p["BLOCK_V"], p["STAGES"], row_stride=V)
    step, enter, insertion = issue_counts("topk_chunk_kernel", p["K_PAD"])
    inserted, entered = expected_insertions(
        [p["BLOCK_V"]] * (steps - 1) + [span - (steps - 1) * p["BLOCK_V"]], p["K_PAD"]
    )
    first = Launch(
        rows * p["n_chunks"],
        per_sm("topk_chunk_kernel"),
        p["BLOCK_V"] * value_bytes,
        steps,
        stages,
        issue_cycles=steps * step + entered * enter + inserted * insertion,
    )
    if method == "row" or p["n_chunks"] == 1:  # a chunk as long as the row: no merge (see topk)
        return [predict(gpu, first, logits)]
    lists = rows * p["n_chunks"] * p["K_PAD"] * 8
    per_step = p["MERGE_BLOCK"] // p["K_PAD"]  # lists a merge step reads
    merge_steps = -(-p["n_chunks"] // per_step)
    sizes = [per_step] * (merge_steps - 1) + [p["n_chunks"] - (merge_steps - 1) * per_step]
    m_step, _, m_insertion = issue_counts("topk_merge_kernel", p["K_PAD"])
    # a step of m lists after n holds m / (n + m) of the best K_PAD so far
    merged, _ = expected_insertions([m * p["K_PAD"] for m in sizes], p["K_PAD"])
    merge = Launch(
        rows,
        per_sm("topk_merge_kernel"),
        p["MERGE_BLOCK"] * 8,
        merge_steps,
        issue_cycles=merge_steps * m_step + merged * m_insertion,
    )
    return [predict(gpu, first, logits + lists, bytes_loaded=logits), predict(gpu, merge, lists)]


def topk(x: torch.Tensor, k: int, method: str = "row", block_v: int | None = None, chunk: int | None = None):
    """The k largest entries of each row of x (rows, V) or (V,), largest first, ties to the lowest
    index: ``(values, indices)`` shaped (rows, k) or (k,), like ``torch.topk(x, k)``.

    x: float32, bfloat16 or float16, its last dimension contiguous. ``method``: "row", "two_stage"
    or "radix" (the module's docstring). ``block_v``: columns per step of the running top-k
    (rounded up to a power of two, and to at least next_pow2(k)) or of the radix passes (rounded up
    to a power of two); ``chunk``: columns per first-stage program of "two_stage"."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"topk takes a torch tensor, got {type(x).__name__}")
    if x.dtype not in _FORMAT_OF:
        raise TypeError(f"topk takes float32, bfloat16 or float16 values, got {x.dtype}")
    if x.dim() not in (1, 2):
        raise ValueError(f"topk takes a (V,) or (rows, V) tensor, got shape {tuple(x.shape)}")
    k = int_in_range("k", k, 1, x.shape[-1], "at most the row length")
    require_kernel_device(x.device)
    squeeze = x.dim() == 1
    x2 = x.unsqueeze(0) if squeeze else x
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    rows, V = x2.shape
    f = key_format(_FORMAT_OF[x.dtype])
    bits = x2.view(_BITS_VIEW[f.bits])
    p = plan(V, k, method, block_v, chunk, rows=max(rows, 1), value_bytes=f.bits // 8)
    vals = torch.empty((rows, k), dtype=bits.dtype, device=x.device)
    idx = torch.empty((rows, k), dtype=torch.int64, device=x.device)
    if rows:
        if method == "radix":
            radix_select_kernel[(rows,)](
                bits, vals, idx, V, k, bits.stride(0),
                KEY_BITS=f.bits, EXP_MASK=f.exp_mask, DIGIT_BITS=p["DIGIT_BITS"], BLOCK_V=p["BLOCK_V"],
                STAGES=p["STAGES"],
            )  # fmt: skip
        elif method == "row" or p["n_chunks"] == 1:  # one chunk: the row's own list is the answer
            topk_chunk_kernel[(rows, 1)](
                bits, idx, vals, idx, V, k, bits.stride(0), V, 1,
                KEY_BITS=f.bits, EXP_MASK=f.exp_mask, K_PAD=p["K_PAD"], BLOCK_V=p["BLOCK_V"], FINAL=True,
                STAGES=p["STAGES"],
            )  # fmt: skip
        else:
            n = p["n_chunks"]
            part = torch.empty((rows, n, p["K_PAD"]), dtype=torch.int64, device=x.device)
            topk_chunk_kernel[(rows, n)](
                bits, part, vals, idx, V, k, bits.stride(0), p["CHUNK"], n,
                KEY_BITS=f.bits, EXP_MASK=f.exp_mask, K_PAD=p["K_PAD"], BLOCK_V=p["BLOCK_V"], FINAL=False,
                STAGES=p["STAGES"],
            )  # fmt: skip
            topk_merge_kernel[(rows,)](
                part, bits, vals, idx, k, bits.stride(0), n,
                KEY_BITS=f.bits, K_PAD=p["K_PAD"], MERGE_BLOCK=p["MERGE_BLOCK"],
            )  # fmt: skip
    values = vals.view(x.dtype)
    if method == "radix":  # the set comes in index order; a stable sort keeps ties that way
        # (the order only: the values themselves are gathered as bits, so a NaN keeps its payload)
        order = torch.sort(values, dim=-1, descending=True, stable=True).indices
        values = torch.gather(vals, -1, order).view(x.dtype)
        idx = torch.gather(idx, -1, order)
    if squeeze:
        return values[0], idx[0]
    return values, idx
