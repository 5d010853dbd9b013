"""Top-k over a vocabulary (chapter 11): order-preserving integer keys for floats, the top-k
reference with its tie rule, radix select over the keys' digits, what one pass over the logits
costs against a sort, and the top-p threshold found by search instead of a sort.

**Keys.** A float's bits, read as an unsigned integer, are in the floats' order for
non-negative values and in reverse order for negative ones. :func:`order_keys` flips every bit
of a negative value and only the sign bit of a non-negative one; the result is an unsigned
integer of the same width whose order is the floats' order (IEEE 754's totalOrder: -NaN below
-inf, -0 just below +0, +NaN above +inf). :func:`topk_keys` then makes the keys agree with the
comparison torch uses for ``torch.topk`` and ``torch.sort``: -0 gets +0's key (they compare
equal) and every NaN gets the largest key (NaN counts as larger than every number, and all NaNs
as equal). :func:`topk_keys_ref` is the same, one element at a time in Python. The fp8 formats
without -0 and infinities (ml_dtypes' ``float8_e4m3fnuz``, ``float8_e5m2fnuz``: 0x80 is their one
NaN) have no totalOrder; :func:`fnuz_keys_ref` ranks their values as ml_dtypes decodes them, NaN
the largest.

**The tie rule.** :func:`topk_ref` returns the k largest values in descending order; among equal
values the **lowest index comes first**, which is what a stable descending sort gives
(``torch.sort(x, descending=True, stable=True)``, the outside oracle in tests/test_topk.py).
``torch.topk`` itself returns the same values but does not promise which of several equal
values' indices it returns.

**Radix select.** :func:`radix_select` finds the k-th largest key one digit at a time, most
significant first: a histogram of the current digit over the keys that still match the prefix
found so far, then the bin where the count from the top reaches k. ``ceil(key_bits / digit_bits)``
passes fix the k-th largest key; one more pass (:func:`radix_filter`) collects every key above it
and, in index order, as many keys equal to it as are still needed. The sort-based
:func:`kth_largest_key_ref` is its reference.

Costs (:func:`pass_cost`, :func:`radix_select_cost`, :func:`radix_sort_cost`) count bytes to and
from memory, the napkin quantity for a memory-bound kernel.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .validation import int_in_range, positive_int, stochastic_rng

__all__ = [
    "KEY_FORMATS",
    "KeyFormat",
    "key_format",
    "float_bits",
    "order_keys",
    "order_keys_ref",
    "keys_to_bits",
    "topk_keys",
    "topk_keys_ref",
    "FNUZ_FORMATS",
    "fnuz_keys_ref",
    "topk_ref",
    "RadixPass",
    "RadixSelect",
    "radix_passes",
    "radix_select",
    "kth_largest_key_ref",
    "radix_filter",
    "radix_topk",
    "Cost",
    "pass_cost",
    "radix_select_cost",
    "radix_sort_cost",
    "running_insertions",
    "model_like_logits",
    "ties_at_kth",
    "topk_set_changed",
    "torch_sort_indices",
    "top_p_threshold_ref",
    "top_p_threshold_search",
    "top_p_rejection_sample",
]


# ------------------------------------------------------------------ the formats keys are made of


@dataclass(frozen=True)
class KeyFormat:
    """A float format as top-k keys see it: its width and the masks of its fields."""

    name: str
    bits: int  # total width, also the key's width
    exp_mask: int  # the exponent field, in place
    man_mask: int  # the mantissa field, in place

    @property
    def sign_bit(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def all_ones(self) -> int:
        return (1 << self.bits) - 1

    @property
    def uint_dtype(self) -> np.dtype:
        return np.dtype(f"uint{self.bits}")

    @property
    def int_dtype(self) -> np.dtype:
        return np.dtype(f"int{self.bits}")


KEY_FORMATS: dict[str, KeyFormat] = {
    "fp32": KeyFormat("fp32", 32, 0x7F800000, 0x007FFFFF),
    "bf16": KeyFormat("bf16", 16, 0x7F80, 0x007F),
    "fp16": KeyFormat("fp16", 16, 0x7C00, 0x03FF),
}

_NUMPY_FORMATS = {np.dtype(np.float32): "fp32", np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.float16): "fp16"}
_TORCH_FORMATS = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


def key_format(fmt: KeyFormat | str) -> KeyFormat:
    """``KEY_FORMATS[fmt]`` with an error that lists the accepted names."""
    if isinstance(fmt, KeyFormat):
        return fmt
    try:
        return KEY_FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown key format {fmt!r}: accepted are {', '.join(KEY_FORMATS)}") from None


def float_bits(x) -> tuple[np.ndarray, KeyFormat]:
    """The raw bits of a float array, as unsigned integers, and its format.

    Accepts a numpy array of float32, ``ml_dtypes.bfloat16`` or float16, or a torch tensor of
    float32, bfloat16 or float16 (on any device; copied to the CPU). Same shape as ``x``.
    """
    if type(x).__module__.startswith("torch"):
        name = _TORCH_FORMATS.get(str(x.dtype))
        if name is None:
            raise TypeError(f"float_bits takes float32, bfloat16 or float16 tensors, got {x.dtype}")
        import torch

        f = KEY_FORMATS[name]
        as_int = {16: torch.int16, 32: torch.int32}[f.bits]
        return x.detach().cpu().contiguous().view(as_int).numpy().view(f.uint_dtype), f
    a = np.asarray(x)
    name = _NUMPY_FORMATS.get(a.dtype)
    if name is None:
        raise TypeError(
            f"float_bits takes float32, ml_dtypes.bfloat16 or float16 arrays, got {a.dtype}; "
            "cast first (a float64 array has no 16- or 32-bit code)"
        )
    f = KEY_FORMATS[name]
    return np.ascontiguousarray(a).view(f.uint_dtype), f


def _as_bits(bits, fmt: KeyFormat | str) -> tuple[np.ndarray, KeyFormat]:
    f = key_format(fmt)
    b = np.asarray(bits)
    if b.dtype.kind not in "iu":
        raise TypeError(f"bits must be an integer array, got {b.dtype}")
    b = b.astype(np.int64) & f.all_ones  # int16 codes of negative numbers read as unsigned
    return b, f


# ------------------------------------------------------------------ order-preserving keys


def order_keys(bits, fmt: KeyFormat | str) -> np.ndarray:
    """IEEE totalOrder keys: flip every bit of a code with the sign bit set, and only the sign bit
    of one without. Unsigned, the format's width; ``a < b`` in totalOrder iff ``key(a) < key(b)``."""
    b, f = _as_bits(bits, fmt)
    neg = (b & f.sign_bit) != 0
    return np.where(neg, b ^ f.all_ones, b ^ f.sign_bit).astype(f.uint_dtype)


def order_keys_ref(code: int, fmt: KeyFormat | str) -> int:
    """One code's totalOrder key, by the rule in words (the reference of :func:`order_keys`)."""
    f = key_format(fmt)
    code = int(code) & f.all_ones
    if code >= f.sign_bit:  # negative: the larger the magnitude bits, the smaller the value
        return f.all_ones - code
    return code + f.sign_bit  # non-negative: above every negative, in the bits' own order


def keys_to_bits(keys, fmt: KeyFormat | str) -> np.ndarray:
    """The inverse of :func:`order_keys`: the codes (unsigned) whose totalOrder keys these are."""
    k, f = _as_bits(keys, fmt)
    from_neg = (k & f.sign_bit) == 0  # a key below the sign bit came from a negative code
    return np.where(from_neg, k ^ f.all_ones, k ^ f.sign_bit).astype(f.uint_dtype)


def topk_keys(bits, fmt: KeyFormat | str) -> np.ndarray:
    """Keys in the order torch compares floats for top-k and sort: totalOrder keys with every NaN
    on the largest key and -0 on +0's key. Unsigned, the format's width."""
    b, f = _as_bits(bits, fmt)
    mag = b & (f.all_ones ^ f.sign_bit)
    keys = order_keys(b, f).astype(np.int64)
    keys = np.where(mag > f.exp_mask, f.all_ones, keys)  # NaN: exponent all ones, mantissa not zero
    keys = np.where(mag == 0, f.sign_bit, keys)  # -0 and +0
    return keys.astype(f.uint_dtype)


def topk_keys_ref(code: int, fmt: KeyFormat | str) -> int:
    """One code's top-k key, from the float's value (the reference of :func:`topk_keys`)."""
    f = key_format(fmt)
    code = int(code) & f.all_ones
    mag = code & ~f.sign_bit
    if (mag & f.exp_mask) == f.exp_mask and (mag & f.man_mask):
        return f.all_ones  # NaN, whatever its sign and payload
    if mag == 0:
        return f.sign_bit  # -0 == +0
    return order_keys_ref(code, f)


#: The fp8 formats with no -0 and no infinities ("finite, NaN, unsigned zero"), by the course's
#: short name: the ml_dtypes type of their values. The code 0x80 (-0 elsewhere) is their one NaN.
FNUZ_FORMATS = {"e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "e5m2fnuz": ml_dtypes.float8_e5m2fnuz}


def fnuz_keys_ref(bits, fmt: str) -> np.ndarray:
    """Top-k keys of fnuz fp8 codes (uint8, same shape as ``bits``): the rank of each code's
    value among the format's 256 codes as ml_dtypes decodes them, the NaN (0x80) the largest,
    0xFF. No two codes share a value (no -0), so the 256 keys are 0 to 255, once each."""
    if fmt not in FNUZ_FORMATS:
        raise ValueError(f"unknown fnuz format {fmt!r}: accepted are {', '.join(FNUZ_FORMATS)}")
    b = np.asarray(bits)
    if b.dtype.kind not in "iu":
        raise TypeError(f"bits must be an integer array, got {b.dtype}")
    values = np.arange(256, dtype=np.uint8).view(FNUZ_FORMATS[fmt]).astype(np.float64)
    order = np.argsort(values, kind="stable")  # numpy sorts NaN last
    if np.unique(values[order[:-1]]).size != 255 or not np.isnan(values[order[-1]]):
        raise RuntimeError(f"ml_dtypes {ml_dtypes.__version__} does not decode {fmt} as 255 numbers and one NaN")
    rank = np.empty(256, dtype=np.uint8)
    rank[order] = np.arange(256)
    return rank[b.astype(np.int64) & 0xFF]


# ------------------------------------------------------------------ the reference top-k


def topk_ref(x, k: int):
    """The k largest entries of each row of ``x``, largest first, ties to the lowest index.

    x: a torch tensor (V,) or (rows, V) of float32, bfloat16 or float16. Returns ``(values,
    indices)`` like ``torch.topk(x, k)``: values of x's dtype, indices int64, shape (..., k).
    NaN counts as the largest value (all NaNs equal) and -0 as equal to +0, as in torch.
    """
    import torch

    if not isinstance(x, torch.Tensor) or x.dim() not in (1, 2):
        raise ValueError(f"topk_ref takes a 1-D or 2-D torch tensor, got {type(x).__name__} {getattr(x, 'shape', '')}")
    V = x.shape[-1]
    k = int_in_range("k", k, 1, V, "at most the row length")
    bits, f = float_bits(x)
    keys = topk_keys(bits, f).astype(np.int64).reshape(-1, V)
    idx = np.empty((keys.shape[0], k), dtype=np.int64)
    pos = np.arange(V)
    for r in range(keys.shape[0]):
        order = np.lexsort((pos, -keys[r]))  # by key descending, then index ascending
        idx[r] = order[:k]
    indices = torch.from_numpy(idx.reshape(*x.shape[:-1], k)).to(x.device)
    # gathered as bits: torch 2.13's CPU gather of bfloat16 turns the NaN 0x7FC0 into 0xFFFF
    as_int = {16: torch.int16, 32: torch.int32}[f.bits]
    return torch.gather(x.view(as_int), -1, indices).view(x.dtype), indices


# ------------------------------------------------------------------ radix select


@dataclass(frozen=True)
class RadixPass:
    """One histogram pass: the digit's bin chosen, how many keys lie above it, and in it."""

    shift: int  # the digit is (key >> shift) & (2**digit_bits - 1)
    candidates: int  # keys that matched the prefix before this pass
    bin: int
    above: int  # keys in higher bins of this pass (all in the top k)
    in_bin: int  # keys in the chosen bin (the k-th largest is among them)


@dataclass(frozen=True)
class RadixSelect:
    """The result of :func:`radix_select` on one row of keys."""

    kth_key: int  # the k-th largest key
    greater: int  # how many keys are strictly larger (all of them are in the top k)
    k: int
    passes: tuple[RadixPass, ...]

    @property
    def equal_needed(self) -> int:
        """How many keys equal to ``kth_key`` the top k takes (those with the lowest indices)."""
        return self.k - self.greater

    @property
    def decided_after(self) -> int:
        """The pass after which the top-k *set* was already fixed: the first whose chosen bin holds
        exactly the keys still needed (a kernel that tests for it could stop there)."""
        needed = self.k
        for i, p in enumerate(self.passes, 1):
            needed -= p.above
            if p.in_bin == needed:
                return i
        return len(self.passes)


def radix_passes(key_bits: int, digit_bits: int) -> int:
    """Histogram passes to fix a key of ``key_bits`` bits, ``digit_bits`` at a time:
    ``ceil(key_bits / digit_bits)``."""
    key_bits, digit_bits = positive_int("key_bits", key_bits), positive_int("digit_bits", digit_bits)
    return -(-key_bits // digit_bits)


def radix_select(keys, k: int, key_bits: int, digit_bits: int = 8) -> RadixSelect:
    """The k-th largest of a 1-D array of unsigned keys, most significant digit first.

    Each pass histograms the current digit of the keys whose higher digits equal the prefix found
    so far, then walks the bins from the top until the count reaches the number still needed.
    The last digit may be narrower than ``digit_bits`` (32 bits in 11-bit digits: 11, 11, 10).
    """
    keys = np.asarray(keys).astype(np.int64).ravel()
    k = positive_int("k", k)
    if k > keys.size:
        raise ValueError(f"k = {k} is more than the {keys.size} keys")
    n_pass = radix_passes(key_bits, digit_bits)
    cand = keys
    needed, prefix, greater, passes = k, 0, 0, []
    for p in range(n_pass):
        shift = max(key_bits - (p + 1) * digit_bits, 0)
        width = key_bits - p * digit_bits - shift
        digit = (cand >> shift) & ((1 << width) - 1)
        hist = np.bincount(digit, minlength=1 << width)
        above = 0
        for b in range((1 << width) - 1, -1, -1):  # from the top bin down
            if above + hist[b] >= needed:
                break
            above += int(hist[b])
        passes.append(RadixPass(shift, int(cand.size), b, above, int(hist[b])))
        needed -= above
        greater += above
        prefix = (prefix << width) | b
        cand = cand[digit == b]
    return RadixSelect(prefix, greater, k, tuple(passes))


def kth_largest_key_ref(keys, k: int) -> tuple[int, int]:
    """(the k-th largest key, how many keys are larger) by a full sort: the reference of
    :func:`radix_select`."""
    keys = np.sort(np.asarray(keys).astype(np.int64).ravel())[::-1]
    kth = int(keys[k - 1])
    return kth, int((keys > kth).sum())


def radix_filter(keys, sel: RadixSelect) -> np.ndarray:
    """The filtering pass: indices of the top-k set in index order; every key above the k-th,
    and the first ``k - greater`` keys equal to it."""
    keys = np.asarray(keys).astype(np.int64).ravel()
    eq = np.nonzero(keys == sel.kth_key)[0][: sel.equal_needed]
    take = keys > sel.kth_key
    take[eq] = True
    return np.nonzero(take)[0]


def radix_topk(x, k: int, digit_bits: int = 8):
    """Top-k of a 1-D torch tensor by radix select and one filtering pass, then a sort of the k
    winners (stable, so ties stay in index order): equal to :func:`topk_ref`."""
    import torch

    bits, f = float_bits(x)
    keys = topk_keys(bits, f)
    sel = radix_select(keys, k, f.bits, digit_bits)
    idx = radix_filter(keys, sel)
    order = np.argsort(-keys[idx].astype(np.int64), kind="stable")
    indices = torch.from_numpy(idx[order].astype(np.int64)).to(x.device)
    as_int = {16: torch.int16, 32: torch.int32}[f.bits]
    return x.view(as_int)[indices].view(x.dtype), indices


# ------------------------------------------------------------------ costs


@dataclass(frozen=True)
class Cost:
    """Bytes one top-k of a row moves to and from memory, and the passes over its data."""

    passes: int  # reads of the whole row (or of the whole array being sorted)
    bytes_read: int
    bytes_written: int

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


def pass_cost(n: int, k: int, value_bytes: int, index_bytes: int = 8) -> Cost:
    """A kernel that reads each of the n values once and writes k values and k indices."""
    return Cost(1, n * value_bytes, k * (value_bytes + index_bytes))


def radix_select_cost(n: int, k: int, key_bits: int, digit_bits: int, value_bytes: int, index_bytes: int = 8) -> Cost:
    """Radix select that rereads the row for each histogram pass, then once more to filter."""
    p = radix_passes(key_bits, digit_bits) + 1
    return Cost(p, p * n * value_bytes, k * (value_bytes + index_bytes))


def radix_sort_cost(n: int, key_bytes: int, index_bytes: int = 8, digit_bits: int = 8) -> Cost:
    """A least-significant-digit radix sort of (key, index) pairs, the way a GPU sorts a long
    array (CUB's onesweep): one read of the input to build every digit's histogram, then per digit
    one read and one write of all keys and indices. A top-k by sorting then reads k of them."""
    d = radix_passes(8 * key_bytes, digit_bits)
    pair = key_bytes + index_bytes
    return Cost(d + 1, n * key_bytes + d * n * pair, d * n * pair)


# ------------------------------------------------------------------ data and measurements


def running_insertions(x, k: int, block_v: int) -> np.ndarray:
    """How many entries of each block of ``block_v`` columns a running top-k inserts into its
    list, for one row read from left to right: the entries of the block that are among the
    ``K_PAD = next_pow2(k)`` largest of the list and the block together (the kernel of
    :mod:`nbhelpers.kernels.topk` keeps K_PAD candidates and inserts one per loop step). x: a 1-D
    torch tensor or numpy array of float32, bfloat16 or float16. Returns one count per block."""
    bits, f = float_bits(x)
    keys = topk_keys(bits, f).astype(np.int64).ravel()
    k, block_v = positive_int("k", k), positive_int("block_v", block_v)
    k_pad = 1 << (k - 1).bit_length()
    packed = keys * (1 << 24) - np.arange(keys.size)  # distinct: larger key, then lower index
    best = np.empty(0, dtype=np.int64)
    counts = []
    for start in range(0, keys.size, block_v):
        block = packed[start : start + block_v]
        both = np.concatenate([best, block])
        top = both[np.argsort(both)[::-1][:k_pad]]
        counts.append(int(np.isin(top, block).sum()))
        best = top
    return np.array(counts, dtype=np.int64)


def model_like_logits(rows: int, vocab: int, seed: int, sigma: float = 2.0, head: int = 32, head_scale: float = 3.0):
    """Synthetic next-token logits, float32 (rows, vocab): a Gaussian bulk (standard deviation
    ``sigma``) and a head of ``head`` tokens per row lifted by ``head_scale`` times an
    exponential draw each, so the top of a row stands out of the bulk by a few units, with a long
    tail of close competitors below it. A stand-in for a language model's logits, not a
    measurement of one."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, sigma, size=(rows, vocab))
    for r in range(rows):
        lifted = rng.choice(vocab, size=head, replace=False)
        x[r, lifted] += head_scale * rng.exponential(1.0, size=head) + sigma
    return x.astype(np.float32)


def ties_at_kth(values: np.ndarray, k: int) -> tuple[int, int]:
    """For one row: (how many entries equal its k-th largest value, how many of those the top k
    takes). ``values`` is any numpy float array without NaN."""
    v = np.asarray(values).astype(np.float64).ravel()
    kth = np.sort(v)[::-1][k - 1]
    return int((v == kth).sum()), int(k - (v > kth).sum())


def topk_set_changed(x_hi, x_lo, k):
    """Per row, whether the top-k index *set* of ``x_lo`` (rounded logits) differs from that of
    ``x_hi``, both with ties to the lowest index. Both torch tensors (rows, V); ``k`` an int
    (returns a (rows,) bool array) or a list of ints (returns (len(k), rows)). Uses torch's
    stable descending sort, which orders exactly as :func:`topk_ref` (tests/test_topk.py)."""
    ks = [k] if isinstance(k, (int, np.integer)) else list(k)
    order_hi, order_lo = torch_sort_indices(x_hi), torch_sort_indices(x_lo)
    out = np.stack(
        [
            ~(order_hi[:, :kk].sort(-1).values == order_lo[:, :kk].sort(-1).values).all(-1).numpy()
            for kk in (positive_int("k", kk) for kk in ks)
        ]
    )
    return out[0] if isinstance(k, (int, np.integer)) else out


def torch_sort_indices(x):
    """``torch.sort(x, dim=-1, descending=True, stable=True).indices``: every row's columns from
    the largest value to the smallest, ties in index order, NaN first (torch's order)."""
    import torch

    return torch.sort(x, dim=-1, descending=True, stable=True).indices


def _probabilities(probs) -> np.ndarray:
    """A 1-D float64 copy of a row of probabilities: non-empty, finite, non-negative."""
    q = np.asarray(probs, dtype=np.float64).ravel()
    if q.size == 0 or not np.isfinite(q).all() or (q < 0).any():
        raise ValueError("probs must be a non-empty row of finite, non-negative probabilities")
    return q


def _mass(q: np.ndarray) -> float:
    """The sum of some probabilities, rounded once (math.fsum): the same set gives the same mass
    in any order, so the sort and the search compare the same numbers with p."""
    return math.fsum(q)


def top_p_threshold_ref(probs: np.ndarray, p: float) -> float:
    """The nucleus threshold by sorting: the probability of the last token of the smallest set
    of largest probabilities whose mass (:func:`_mass`, exact and rounded once) reaches ``p``.
    If even the whole row falls short of ``p`` (probabilities that sum to 1 - 2**-53, p = 1), the
    nucleus is every token and the threshold is the smallest probability."""
    q = _probabilities(probs)
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    s = np.sort(q)[::-1]
    # the prefix masses never decrease, so the first prefix that reaches p is found by bisection
    i = bisect.bisect_left(range(s.size), True, key=lambda i: _mass(s[: i + 1]) >= p)
    return float(s[min(i, s.size - 1)])


def top_p_threshold_search(probs: np.ndarray, p: float, max_passes: int = 200) -> tuple[float, int]:
    """The same threshold without a sort: bisection on a threshold t. Each pass reads the row
    once and computes the mass of the probabilities >= t and the smallest and largest
    probability on each side of t inside the current interval [lo, hi); the side that must hold
    the answer is kept, and the search stops when every probability in it is equal.
    Returns (threshold, passes); the first pass finds the largest probability and the row's mass.

    t halves the interval of the float64 **codes**, not of the values: a non-negative double's
    bits, read as an integer, are in the values' order (the keys of :func:`order_keys`), so at most
    63 halvings separate any two probabilities, however small (a probability of 1e-300 next to
    one of 1e-200 would take about 660 halvings of the values)."""
    q = _probabilities(probs)
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    top = float(q.max())
    passes = 1
    if _mass(q[q >= top]) >= p:
        return top, passes
    if _mass(q) < p:  # the whole row falls short of p: every token
        return float(q.min()), passes
    code = lambda v: int(np.float64(v).view(np.int64))  # noqa: E731
    lo, hi = 0.0, top  # mass(>= lo) >= p > mass(>= hi): the answer is a probability in [lo, hi)
    while passes < max_passes:
        mid = float(np.int64((code(lo) + code(hi)) // 2).view(np.float64))
        passes += 1
        if _mass(q[q >= mid]) >= p:
            lo, side = mid, q[(q >= mid) & (q < hi)]
        else:
            hi, side = mid, q[(q >= lo) & (q < mid)]
        if side.min() == side.max():
            return float(side.min()), passes
    raise RuntimeError(f"top_p_threshold_search did not converge in {max_passes} passes")


def top_p_rejection_sample(probs: np.ndarray, p: float, rng: np.random.Generator, draws: int = 1, pivots: int = 2):
    """Tokens drawn from the nucleus of ``probs`` without sorting it or finding its threshold
    first: **rejection sampling with a pivot**, the scheme of FlashInfer's sampling kernels (its
    blog post "Sorting-Free GPU Kernels for LLM Sampling", 2025). Returns ``(tokens, rounds)``,
    two int arrays of length ``draws``.

    A token of probability x is in the nucleus exactly when the probabilities *above* x have a
    mass below p (``f(x)``). Each round draws a token j by inverse-transform sampling over the
    tokens whose probability is above ``low`` (a prefix sum of the row up to a uniform draw times
    their mass), then tests ``f(q[j])``: accept j, or raise ``low`` and draw again. Every rejected
    value is below the threshold, so the nucleus always stays inside the tokens drawn from, and an
    accepted token has exactly the nucleus's renormalized probability.

    ``pivots=1`` raises ``low`` to the rejected value. ``pivots=2`` (FlashInfer from v0.2.3) also
    tests ``(q[j] + high) / 2``, where ``high`` starts at the largest probability and always
    satisfies f: if that midpoint fails too, ``low`` jumps to it, else it becomes ``high``, so the
    interval halves at least every round. A GPU round reads the row twice: once to draw, once for
    the masses above the pivots (which are also the next round's normalizer).

    Each round accepts with probability (nucleus mass) / (mass above ``low``), at least p, so a
    draw takes at most 1/p rounds on average.

    This emulation evaluates f through the threshold (``f(x)`` is ``x >= top_p_threshold_ref``,
    the same for every x at or above the smallest probability, all it is asked at) so that
    drawing is cheap; the tests hold f to its definition."""
    q = _probabilities(probs)
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    rng = stochastic_rng(rng)
    draws = positive_int("draws", draws)
    pivots = int_in_range("pivots", pivots, 1, 2, "pivots tested per round")
    threshold = top_p_threshold_ref(q, p)
    top = float(q.max())
    tokens = np.empty(draws, dtype=np.int64)
    rounds = np.empty(draws, dtype=np.int64)
    for d in range(draws):
        low, high, n = 0.0, top, 0
        while True:
            n += 1
            w = np.where(q > low, q, 0.0)
            prefix = np.cumsum(w)  # sequential sums of non-negative terms never decrease
            u = rng.random() * prefix[-1]
            j = int(np.searchsorted(prefix, u, side="right"))
            # u rounds to the total at most: fall back to the last token drawn from
            j = min(j, int(np.flatnonzero(w)[-1]))
            if q[j] >= threshold:
                break
            if pivots == 1:
                low = float(q[j])
            else:
                mid = (float(q[j]) + high) / 2
                if mid >= threshold:
                    low, high = float(q[j]), mid
                else:
                    low = mid
        tokens[d], rounds[d] = j, n
    return tokens, rounds
