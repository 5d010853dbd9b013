"""The exercise chapters as data: one entry per chapter, read by tests/test_exercises.py.

Each entry names the solution notebook, what its function cells need in their namespace, the
exercises and points the chapter must list, a second seed for hidden cases, and the deliberately
wrong implementations: mutations of the solution's source (old -> new) that the plausible
mistakes make, each of which the check must fail, and must fail on its random cases alone (a
cheat that memorised the public cases' answers and falls back to the mistake elsewhere must
fail with another seed: tests/test_exercises.py). A new chapter adds an entry here; a chapter
with a solution notebook and no entry fails ``test_every_chapter_has_an_entry``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from nbhelpers.formats import get_format
from nbhelpers.rounding import round_to


@dataclass(frozen=True)
class ChapterSpec:
    chapter: int
    solution: str  # file name in solutions/
    namespace: Callable[[], dict]  # a fresh dict of the names the solution cells use
    names: tuple[str, ...]  # the exercises' function names, in order
    points: int  # total points of the chapter
    hidden_seed: int  # a seed other than 0
    wrong: tuple[tuple[str, str, str], ...]  # (function, old source, new source)


#: Chapter 09's split_k_kernel from its accumulator to the end of its cell: the wrong answers that
#: change two places of it at once, or add a @triton.jit helper after it, replace this whole span.
_SPLIT_K_LOOP = (
    "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
    "    for step in range(first, last):\n"
    "        k = step * BLOCK_K + offs_k\n"
    "        # past K (the last step only) reads zeros\n"
    "        a = tl.load(\n"
    "            a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,\n"
    "            mask=(offs_m[:, None] < M) & (k[None, :] < K),\n"
    "            other=0.0,\n"
    "        )\n"
    "        b = tl.load(\n"
    "            b_ptr + k[:, None] * stride_bk + offs_n[None, :] * stride_bn,\n"
    "            mask=(k[:, None] < K) & (offs_n[None, :] < N),\n"
    "            other=0.0,\n"
    "        )\n"
    "        # float32 products, not TF32\n"
    '        acc += tl.dot(a, b, input_precision="ieee")\n'
    "    ### END SOLUTION\n"
    "    # the epilogue (given): the partial tile into slice s of the workspace\n"
    "    w_ptrs = (\n"
    "        w_ptr\n"
    "        + s * stride_ws\n"
    "        + offs_m[:, None] * stride_wm\n"
    "        + offs_n[None, :] * stride_wn\n"
    "    )\n"
    "    tl.store(\n"
    "        w_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N)\n"
    "    )"
)


def _split_k(*changes: tuple[str, str], after: str = "") -> tuple[str, str, str]:
    """A wrong answer of ex09.split_k_matmul as one mutation of :data:`_SPLIT_K_LOOP`: each
    (old, new) of ``changes`` made in it, and ``after`` (a helper's def) added at the cell's end."""
    new = _SPLIT_K_LOOP
    for old, to in changes:
        assert old in new, old
        new = new.replace(old, to)
    return ("split_k_matmul", _SPLIT_K_LOOP, new + after)


_A_FILLED = "mask=(offs_m[:, None] < M) & (k[None, :] < K),\n            other=0.0,"
_B_FILLED = "mask=(k[:, None] < K) & (offs_n[None, :] < N),\n            other=0.0,"


#: Chapter 11's two kernels of ex11.topk_two_stage from the chunk kernel's filler to the merge's last
#: line: the wrong answers that change both kernels at once replace this whole span.
_TOPK_KERNELS = (
    "    # above every packed key of an element\n"
    "    EMPTY: tl.constexpr = (1 << 63) - 1\n"
    "    cols = c * CHUNK + tl.arange(0, CHUNK)\n"
    "    valid = cols < V\n"
    "    code = tl.load(bits_ptr + row * stride_row + cols, mask=valid, other=0)\n"
    "    # an unsigned key in value order: NaN the largest, -0 on +0's key\n"
    "    bits = code.to(tl.int64) & 0xFFFFFFFF\n"
    "    mag = bits & 0x7FFFFFFF\n"
    "    key = tl.where(\n"
    "        bits >= 0x80000000, bits ^ 0xFFFFFFFF, bits ^ 0x80000000\n"
    "    )\n"
    "    key = tl.where(mag > 0x7F800000, 0xFFFFFFFF, key)\n"
    "    key = tl.where(mag == 0, 0x80000000, key)\n"
    "    # the key, signed, above the column: the smallest packed value is\n"
    "    # the smallest element, the lower column first among equal keys\n"
    "    packed = ((key - 0x80000000) << 32) | cols.to(tl.int64)\n"
    "    packed = tl.where(valid, packed, EMPTY)\n"
    "    out = part_ptr + (row * n_chunks + c) * K_PAD\n"
    "    # the chunk's k smallest, smallest first (EMPTY once it runs out)\n"
    "    for j in range(k):\n"
    "        best = tl.min(packed, axis=0)\n"
    "        tl.store(out + j, best)\n"
    "        packed = tl.where(packed == best, EMPTY, packed)\n"
    "    ### END SOLUTION\n"
    "\n"
    "\n"
    "@triton.jit\n"
    "def topk_merge_kernel(\n"
    "    bits_ptr,\n"
    "    part_ptr,\n"
    "    vals_ptr,\n"
    "    idx_ptr,\n"
    "    V,\n"
    "    k,\n"
    "    stride_row,\n"
    "    n_chunks,\n"
    "    K_PAD: tl.constexpr,\n"
    "    NC_PAD: tl.constexpr,\n"
    "):\n"
    "    row = tl.program_id(axis=0)\n"
    "    ### BEGIN SOLUTION\n"
    "    EMPTY: tl.constexpr = (1 << 63) - 1\n"
    "    slot = tl.arange(0, NC_PAD * K_PAD)\n"
    "    # the first k slots of each of the row's chunks\n"
    "    mine = (slot // K_PAD < n_chunks) & (slot % K_PAD < k)\n"
    "    cand = tl.load(\n"
    "        part_ptr + row * n_chunks * K_PAD + slot, mask=mine, other=0\n"
    "    )\n"
    "    cand = tl.where(mine, cand, EMPTY)\n"
    "    for i in range(0, k):\n"
    "        best = tl.min(cand, axis=0)\n"
    "        col = best & 0xFFFFFFFF\n"
    "        tl.store(idx_ptr + row * k + i, col)\n"
    "        # the value's own bits, from the row (a filler is never picked\n"
    "        # when k <= V; the mask keeps a wrong pick inside the row)\n"
    "        v = tl.load(\n"
    "            bits_ptr + row * stride_row + col, mask=col < V, other=0\n"
    "        )\n"
    "        tl.store(vals_ptr + row * k + i, v)\n"
    "        cand = tl.where(cand == best, EMPTY, cand)"
)


def _two_stage(*changes: tuple[str, str]) -> tuple[str, str, str]:
    """A wrong answer of ex11.topk_two_stage as one mutation of :data:`_TOPK_KERNELS`: each
    (old, new) of ``changes`` made in it, every occurrence."""
    new = _TOPK_KERNELS
    for old, to in changes:
        assert old in new, old
        new = new.replace(old, to)
    return ("topk_two_stage", _TOPK_KERNELS, new)


_A_UNFILLED = (_A_FILLED, "mask=(offs_m[:, None] < M) & (k[None, :] < K),")
_B_UNFILLED = (_B_FILLED, "mask=(k[:, None] < K) & (offs_n[None, :] < N),")
_DOT = 'acc += tl.dot(a, b, input_precision="ieee")'
_ACC = "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
#: ex09.swap_ab_epilogue: where the scale of feature n's group of B is
_SB = "sb_ptr + (offs_n // group_n) * stride_sb"


CHAPTERS = [
    ChapterSpec(
        1,
        "ex01_float_formats.ipynb",
        lambda: {"math": math, "np": np},
        ("decode_bits", "rounding_interval", "count_values", "smallest_absorbing", "round_stochastic"),
        19,
        12345,
        tuple(
            [
                # forgets that subnormals have no implicit leading 1
                ("decode_bits", "if E == 0:  # zero", "if False:  # zero"),
                # subnormals with the exponent -bias instead of 1 - bias (that of the smallest normal)
                ("decode_bits", "math.ldexp(M, 1 - bias - man_bits)", "math.ldexp(M, -bias - man_bits)"),
                # the default bias, whatever the largest value says
                ("decode_bits", "bias = E_big - (math.frexp(largest)[1] - 1)", "bias = 2 ** (exp_bits - 1) - 1"),
                # the power of two of largest rounded to nearest rather than down (448 -> 2**9)
                ("decode_bits", "(math.frexp(largest)[1] - 1)", "round(math.log2(largest))"),
                # the chapter's rule of thumb instead of the data sheet: fnuz's bias one above the default
                (
                    "decode_bits",
                    "bias = E_big - (math.frexp(largest)[1] - 1)",
                    'bias = 2 ** (exp_bits - 1) - (specials != "fnuz")',
                ),
                # the bias off by one: frexp's exponent taken for the power of two
                ("decode_bits", "[1] - 1)", "[1])"),
                # the power of two of largest from its integer part: 0 below 1 (bias above the default)
                (
                    "decode_bits",
                    "bias = E_big - (math.frexp(largest)[1] - 1)",
                    "bias = E_big - (int(largest).bit_length() - 1)",
                ),
                # the largest value below the top binade whatever the convention (e5m2fnuz's bias taken as e5m2's)
                ("decode_bits", 'E_big = top - 1 if specials == "ieee" else top', "E_big = top - 1"),
                # ... or in the top binade whatever the convention (IEEE's too)
                ("decode_bits", 'E_big = top - 1 if specials == "ieee" else top', "E_big = top"),
                # fn's top binade thought special, as it holds NaN
                ("decode_bits", 'if specials == "ieee" else top', 'if specials in ("ieee", "fn") else top'),
                # fnuz's too (every convention with a NaN)
                ("decode_bits", 'if specials == "ieee" else top', 'if specials != "finite" else top'),
                # fnuz's negative-zero code read as -0.0
                ("decode_bits", 'if specials == "fnuz" and s == 1 and E == 0 and M == 0:', "if False:"),
                # fnuz: both zero codes NaN
                ("decode_bits", '"fnuz" and s == 1 and E == 0', '"fnuz" and E == 0'),
                # fnuz's NaN at fn's all-ones code (besides the negative zero's)
                ("decode_bits", 'if specials == "fn" and E == top', 'if specials in ("fn", "fnuz") and E == top'),
                # the finite formats given fn's NaN codes (MX's fp4 read as e2m1fn-with-NaN)
                ("decode_bits", 'if specials == "fn" and E == top', 'if specials in ("fn", "finite") and E == top'),
                # fn: no NaN at all
                ("decode_bits", 'if specials == "fn" and E == top and M == full:', "if False:"),
                # fn: only the positive NaN code
                (
                    "decode_bits",
                    'if specials == "fn" and E == top and M == full:',
                    "if bits == (1 << (exp_bits + man_bits)) - 1:",
                ),
                # IEEE: the whole top binade NaN
                ("decode_bits", "return math.nan if M else (-math.inf if s else math.inf)", "return math.nan"),
                # IEEE: inf without its sign
                ("decode_bits", "(-math.inf if s else math.inf)", "math.inf"),
                # IEEE: the top binade read as numbers (fn's rule without its NaN)
                ("decode_bits", 'if specials == "ieee" and E == top:', "if False:"),
                # the sign dropped from zero: -0.0 comes back as +0.0
                ("decode_bits", "return -x if s else x", "return -x if s and x else x"),
                # a bias taken to be at least 0 (or 1): formats whose values all lie at 2 and above
                (
                    "decode_bits",
                    "bias = E_big - (math.frexp(largest)[1] - 1)\n",
                    "bias = E_big - (math.frexp(largest)[1] - 1)\n    bias = max(bias, 0)\n",
                ),
                (
                    "decode_bits",
                    "bias = E_big - (math.frexp(largest)[1] - 1)\n",
                    "bias = E_big - (math.frexp(largest)[1] - 1)\n    bias = max(bias, 1)\n",
                ),
                # a negative bias read as its magnitude
                (
                    "decode_bits",
                    "bias = E_big - (math.frexp(largest)[1] - 1)\n",
                    "bias = abs(E_big - (math.frexp(largest)[1] - 1))\n",
                ),
                # ties the wrong way: both midpoints always in the interval
                ("rounding_interval", "if round(a / q) % 2 == 1:", "if False:"),
                # ... or never
                ("rounding_interval", "if round(a / q) % 2 == 1:", "if True:"),
                # ... or the even value loses its ties
                ("rounding_interval", "if round(a / q) % 2 == 1:", "if round(a / q) % 2 == 0:"),
                # the binade asymmetry ignored: the gap below a power of two taken as the gap above
                ("rounding_interval", "below = q / 2 if a == 2.0**k and k > emin else q", "below = q"),
                # the gap below halved at the smallest normal too (the subnormals have its spacing)
                ("rounding_interval", "if a == 2.0**k and k > emin else q", "if a == 2.0**k and a != 0 else q"),
                # the largest value's interval thought to run on to inf (saturation)
                (
                    "rounding_interval",
                    "    if v < 0:",
                    "    if a == (2 - 2.0**-man_bits) * 2.0 ** (1 - emin):\n        hi = math.inf\n    if v < 0:",
                ),
                # zero's interval only on the positive side
                ("rounding_interval", "    if v < 0:", "    if a == 0:\n        lo = 0.0\n    if v < 0:"),
                # negative v mirrored without swapping the ends
                ("rounding_interval", "return (-hi, -lo)", "return (-lo, -hi)"),
                # no subnormal clamp: the spacing keeps shrinking below the smallest normal
                (
                    "rounding_interval",
                    "max(math.frexp(a)[1] - 1, emin) if a else emin",
                    "math.frexp(a)[1] - 1 if a else emin",
                ),
                # +0 and -0 counted as two values
                ("count_values", "code(b, False) + code(-a, False) + 1", "code(b, False) + code(-a, False) + 2"),
                # half-open interval: a value at b not counted
                ("count_values", "return code(b, False) - code(a, True) + 1", "return code(b, False) - code(a, True)"),
                # the ends rounded to nearest instead of inward
                ("count_values", "math.ceil(y / q) if up else math.floor(y / q)", "round(y / q)"),
                # the ends rounded the wrong way (outward)
                (
                    "count_values",
                    "math.ceil(y / q) if up else math.floor(y / q)",
                    "math.floor(y / q) if up else math.ceil(y / q)",
                ),
                # no subnormal clamp: codes below the smallest normal come out wrong
                (
                    "count_values",
                    "max(math.frexp(y)[1] - 1, emin) if y else emin",
                    "math.frexp(y)[1] - 1 if y else emin",
                ),
                # the codes counted in floats: past 2**53 a float does not hold every count
                ("count_values", "n + (k - emin) * 2**man_bits", "n + (k - emin) * 2.0**man_bits"),
                # the binade from a rounded log2: wrong just below a power of two when man_bits is large
                (
                    "count_values",
                    "max(math.frexp(y)[1] - 1, emin) if y else emin",
                    "max(math.floor(math.log2(y)), emin) if y else emin",
                ),
                # listing every value (numpy's bit patterns for fp16 and fp32): no list holds e8m40
                (
                    "count_values",
                    "    ### BEGIN SOLUTION\n",
                    "    ### BEGIN SOLUTION\n"
                    "    if exp_bits + man_bits > 26 and (exp_bits, man_bits) not in ((8, 23), (5, 10)):\n"
                    "        raise MemoryError('no list of more than 2**27 values fits')\n"
                    "    if (exp_bits, man_bits) in ((8, 23), (5, 10)):\n"
                    "        dt, it = {23: (np.float32, np.int32), 10: (np.float16, np.int16)}[man_bits]\n"
                    "        big = float(np.finfo(dt).max)\n"
                    "        a, b = max(a, -big), min(b, big)\n"
                    "        if a > b:\n"
                    "            return 0\n"
                    "        lo, hi = dt(a), dt(b)\n"
                    "        if float(lo) < a:\n"
                    "            lo = np.nextafter(lo, dt(np.inf))\n"
                    "        if float(hi) > b:\n"
                    "            hi = np.nextafter(hi, dt(-np.inf))\n"
                    "        if float(lo) > float(hi):\n"
                    "            return 0\n"
                    "        key = lambda x: (-1 if x < 0 else 1) * int(dt(abs(x)).view(it))\n"
                    "        return key(hi) - key(lo) + 1\n"
                    "    bias = 2 ** (exp_bits - 1) - 1\n"
                    "    E = np.arange(2**exp_bits - 1)[:, None]\n"
                    "    M = np.arange(2**man_bits)[None, :]\n"
                    "    v = np.where(E == 0, np.ldexp(M * 1.0, 1 - bias - man_bits),\n"
                    "                 np.ldexp((2**man_bits + M) * 1.0, E - bias - man_bits)).ravel()\n"
                    "    v = np.unique(np.concatenate([-v, v]))\n"
                    "    return int(max(0, np.searchsorted(v, b, 'right') - np.searchsorted(v, a, 'left')))\n",
                ),
                # nothing past the largest value is clamped: counts codes of inf and NaN as values
                (
                    "count_values",
                    "a, b = max(a, -largest), min(b, largest)",
                    "a, b = max(a, -2 * largest), min(b, 2 * largest)",
                ),
                # off by one binade
                ("smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** man_bits"),
                # the tie x + c thought to go up: the half gap must exceed c
                ("smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** (man_bits + 1) * (2 if p == c else 1)"),
                # forgets the formats too small to have such a value
                ("smallest_absorbing", "return x if x <= largest else math.inf", "return x"),
                # c's own mantissa ignored: c times 2**(man_bits + 1)
                ("smallest_absorbing", "x = p * 2.0 ** (man_bits + 1)", "x = c * 2.0 ** (man_bits + 1)"),
                # c rounded down to a power of two, not up
                ("smallest_absorbing", "        p *= 2", "        pass"),
                # c rounded up to a power of two by log2: wrong just above a power of two when man_bits is large
                (
                    "smallest_absorbing",
                    "    p = 2.0 ** (math.frexp(c)[1] - 1)  # the largest power of two <= c\n"
                    "    if p < c:\n"
                    "        p *= 2  # c rounded up to a power of two\n",
                    "    p = 2.0 ** math.ceil(math.log2(c))\n",
                ),
                # a search over every value of the format: no list holds e8m40
                (
                    "smallest_absorbing",
                    "    ### BEGIN SOLUTION\n",
                    "    ### BEGIN SOLUTION\n"
                    "    if exp_bits + man_bits > 26:\n"
                    "        raise MemoryError('no list of more than 2**26 values fits')\n"
                    "    bias = 2 ** (exp_bits - 1) - 1\n"
                    "    E = np.arange(1, 2**exp_bits - 1)[:, None]\n"
                    "    M = np.arange(2**man_bits)[None, :]\n"
                    "    v = np.ldexp((2**man_bits + M) * 1.0, E - bias - man_bits).ravel()\n"
                    "    gap = np.ldexp(1.0, E - bias - man_bits)\n"
                    "    gap = np.broadcast_to(gap, (gap.size, M.size)).ravel()\n"
                    "    ok = (c < gap / 2) | ((c == gap / 2) & (np.tile(M.ravel(), gap.size // M.size) % 2 == 0))\n"
                    "    return float(v[np.argmax(ok)]) if ok.any() else math.inf\n",
                ),
                # deterministic: round to nearest even
                ("round_stochastic", "r = (lower + (u < frac)) * q", "r = np.rint(y) * q"),
                # the probability the wrong way round: up with probability 1 - frac
                ("round_stochastic", "(u < frac)", "(u < 1 - frac)"),
                # one random number for every element
                ("round_stochastic", "u = rng.random(x.shape)", "u = rng.random()"),
                # a uniform number of only 6 random bits (or 5), compared as u < frac
                ("round_stochastic", "u = rng.random(x.shape)", "u = np.floor(rng.random(x.shape) * 64) / 64"),
                ("round_stochastic", "u = rng.random(x.shape)", "u = np.floor(rng.random(x.shape) * 32) / 32"),
                # the same, rounding y + u down (away from zero when u >= 1 - frac)
                (
                    "round_stochastic",
                    "r = (lower + (u < frac)) * q",
                    "r = np.floor(y + np.floor(u * 64) / 64) * q",
                ),
                # always toward zero (truncation)
                ("round_stochastic", "(lower + (u < frac))", "lower"),
                # no subnormal clamp: the spacing keeps shrinking below the smallest normal
                ("round_stochastic", "np.maximum(np.frexp(a)[1] - 1, emin)", "np.frexp(a)[1] - 1"),
                # a == b taken for one value, even between two values of the format
                (
                    "count_values",
                    "    a, b = max(a, -largest), min(b, largest)\n",
                    "    if a == b:\n        return 1\n    a, b = max(a, -largest), min(b, largest)\n",
                ),
                # uniform numbers of 7, 8 or 9 random bits: too coarse for the two large cases
                ("round_stochastic", "u = rng.random(x.shape)", "u = np.floor(rng.random(x.shape) * 128) / 128"),
                ("round_stochastic", "u = rng.random(x.shape)", "u = np.floor(rng.random(x.shape) * 256) / 256"),
                ("round_stochastic", "u = rng.random(x.shape)", "u = np.floor(rng.random(x.shape) * 512) / 512"),
                # ... or compared the other way: away from zero when u >= 1 - frac
                (
                    "round_stochastic",
                    "r = (lower + (u < frac)) * q",
                    "r = (lower + (np.floor(u * 512) / 512 >= 1 - frac)) * q",
                ),
                # rng ignored: a generator of its own, the same numbers every call
                ("round_stochastic", "u = rng.random(x.shape)", "u = np.random.default_rng(0).random(x.shape)"),
                # rng ignored: numpy's global generator
                ("round_stochastic", "u = rng.random(x.shape)", "u = np.random.random(x.shape)"),
                # no randomness: evenly spread numbers, shuffled (every count exact)
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "u = rng.permutation((np.arange(x.size) + 0.5) / x.size).reshape(x.shape)",
                ),
                # ... or not even shuffled
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "u = ((np.arange(x.size) + 0.5) / x.size).reshape(x.shape)",
                ),
                # one number per row of a 2-D x (shape (len(x),) broadcast along the rows)
                ("round_stochastic", "u = rng.random(x.shape)", "u = rng.random(x.shape[-1])"),
                # the result flattened
                ("round_stochastic", "return np.copysign(r, x)", "return np.copysign(r, x).ravel()"),
                # antithetic numbers (u and 1 - u) for the two halves: each element's chance is right, but
                # the pairs always choose opposite ways, and a tie's count is exactly half
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "h = rng.random((x.size + 1) // 2)\n    u = np.concatenate([h, 1 - h])[: x.size].reshape(x.shape)",
                ),
                # ... for neighbours, or shuffled
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "h = rng.random((x.size + 1) // 2)\n"
                    "    u = np.stack([h, 1 - h], axis=-1).ravel()[: x.size].reshape(x.shape)",
                ),
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "h = rng.random((x.size + 1) // 2)\n"
                    "    u = rng.permutation(np.concatenate([h, 1 - h])[: x.size]).reshape(x.shape)",
                ),
                # half the numbers drawn, each used twice
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "h = rng.random((x.size + 1) // 2)\n    u = np.concatenate([h, h])[: x.size].reshape(x.shape)",
                ),
                # stratified numbers: one in each of n equal slices of [0, 1), shuffled (counts nearly exact)
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "u = ((rng.permutation(x.size) + rng.random(x.size)) / x.size).reshape(x.shape)",
                ),
                # numbers reused three places on, in blocks of six: each element's chance is right, the
                # counts spread too widely for the chi-square to see, the pairs at lag 3 always agree
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "h = rng.random((x.size + 5) // 6 * 3).reshape(-1, 3)\n"
                    "    u = np.concatenate([h, h], axis=1).ravel()[: x.size].reshape(x.shape)",
                ),
                # ... a quarter on in alternate quarters (the second quarter repeats the first, the fourth the third)
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "s = max(x.size // 4, 1)\n"
                    "    f = rng.random(x.size)\n"
                    "    i = np.arange(x.size)\n"
                    "    rep = (i // s) % 2 == 1\n"
                    "    f[rep] = f[i[rep] - s]\n"
                    "    u = f.reshape(x.shape)",
                ),
                # ... or every fourth element copying the one three places before
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "f = rng.random(x.size)\n"
                    "    i = np.arange(3, x.size, 4)\n"
                    "    f[i] = f[i - 3]\n"
                    "    u = f.reshape(x.shape)",
                ),
                # each number used twice at random places (half of them overwritten through a permutation)
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "f = rng.random(x.size)\n"
                    "    p = rng.permutation(x.size)\n"
                    "    h = x.size // 2\n"
                    "    f[p[h : 2 * h]] = f[p[:h]]\n"
                    "    u = f.reshape(x.shape)",
                ),
                # blocks of three (u1, u2, frac(u1 + u2)): any two independent, the three together not
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "h = rng.random(((x.size + 2) // 3, 2))\n"
                    "    u = np.concatenate([h, (h.sum(1) % 1.0)[:, None]], 1).ravel()[: x.size].reshape(x.shape)",
                ),
                # a lagged Fibonacci generator seeded by two draws: u_i = frac(u_(i-1) + u_(i-2))
                (
                    "round_stochastic",
                    "u = rng.random(x.shape)",
                    "f = np.empty(x.size + 2)\n"
                    "    f[:2] = rng.random(2)\n"
                    "    for i in range(2, f.size):\n"
                    "        f[i] = (f[i - 1] + f[i - 2]) % 1.0\n"
                    "    u = f[2:].reshape(x.shape)",
                ),
            ]
        ),
    ),
    ChapterSpec(
        2,
        "ex02_accumulation.ipynb",
        lambda: {"math": math, "np": np, "round_to": round_to, "get_format": get_format},
        ("kahan_beats_plain", "roundings_per_term", "best_splits", "sum_of_copies", "order_matters"),
        19,
        12345,
        tuple(
            [
                # all ones after 2**p: the exact sum is not always a value of acc, and what is left
                # in Kahan's c at the end is never paid back
                ("kahan_beats_plain", "[1.0] * (units - halved) + [0.5] * (2 * halved)", "[1.0] * (n - 1)"),
                # starts below the stall: the plain sum counts the ones up to 2**p
                ("kahan_beats_plain", "terms = [2.0**p]", "terms = [2.0 ** (p - 1)]"),
                # a start with an odd last bit: the first tie goes up, and the exact sum is no value of acc
                ("kahan_beats_plain", "terms = [2.0**p]", "terms = [2.0**p + 2]"),
                # padded with zeros instead of halves: not positive
                ("kahan_beats_plain", "[0.5] * (2 * halved)", "[1.0] * halved + [0.0] * halved"),
                # the big term last: the plain sum counts every one
                ("kahan_beats_plain", "return np.array(terms)", "return np.array(terms[::-1])"),
                # ---- roundings_per_term
                # the first addition of a leaf, 0.0 + x, counted as a rounding
                ("roundings_per_term", "in_leaf = length - 1 if i == 0 else length - i", "in_leaf = length - i"),
                # every term of a leaf given the first term's count
                ("roundings_per_term", "in_leaf = length - 1 if i == 0 else length - i", "in_leaf = length - 1"),
                # the leaves added sequentially, not by a tree
                ("roundings_per_term", "h = 1 << ((leaves - 1).bit_length() - 1)", "h = leaves - 1"),
                # the tree split in the middle instead of at the largest power of two below L
                ("roundings_per_term", "h = 1 << ((leaves - 1).bit_length() - 1)", "h = leaves // 2"),
                # every leaf at the depth of the deepest: ceil(log2 L)
                (
                    "roundings_per_term",
                    "out[start + i] = in_leaf + depth",
                    "out[start + i] = in_leaf + (len(starts) - 1).bit_length()",
                ),
                # every leaf taken as full: the last one's length not cut to what is left
                ("roundings_per_term", "length = min(b, n - start)", "length = b"),
                # ---- best_splits
                # the largest s on a tie
                ("best_splits", "T, s = min((total(s), s) for", "T, s = min((total(s), -s) for"),
                # the old question: the shortest longest chain instead of the smallest total
                (
                    "best_splits",
                    "return (p - 1) * within(c) + within(last) + c * full + last",
                    "return (c - 1) + (p - 1)",
                ),
                # the square root, as if the total were K c / 2 + K p / 2 with nothing else
                (
                    "best_splits",
                    "T, s = min((total(s), s) for s in range(1, max_splits + 1))",
                    "s = max(1, min(max_splits, round(math.sqrt(K))))\n    T = total(s)",
                ),
                # 0.0 + x counted as a rounding inside the chunks
                ("best_splits", "return (L - 1) + L * (L - 1) // 2", "return L * (L + 1) // 2"),
                # ... and across them
                ("best_splits", "full = (p - 1) + p * (p - 1) // 2 - 1", "full = p * (p + 1) // 2 - 1"),
                # every product of a chunk through all its L - 1 roundings
                ("best_splits", "return (L - 1) + L * (L - 1) // 2", "return L * (L - 1)"),
                # every chunk taken as full: the last one's length not cut to what is left
                ("best_splits", "last = K - (p - 1) * c", "last = c"),
                # the last chunk's products left out of the sum across
                ("best_splits", "+ c * full + last", "+ c * full"),
                # the cap ignored: any number of splits
                ("best_splits", "range(1, max_splits + 1)", "range(1, K + 1)"),
                # the cap taken as exclusive
                ("best_splits", "range(1, max_splits + 1)", "range(1, max(2, max_splits))"),
                # rounding once at the end: fl(n * value)
                ("sum_of_copies", "    s, k = 0.0, 0\n", "    return float(round_to(n * value, acc))\n"),
                # the sum taken to stall at 2**p copies, and exact until then
                ("sum_of_copies", "    s, k = 0.0, 0\n", "    return float(min(n, 2 ** (f.man_bits + 1)) * value)\n"),
                # off by one term: n - 1 copies
                ("sum_of_copies", "while k < n:", "while k < n - 1:"),
                # ties going up (away from zero) instead of to even
                (
                    "sum_of_copies",
                    "up = 2 * r > g or (2 * r == g and ((value - r) / g) % 2 == 1)",
                    "up = 2 * r >= g",
                ),
                # a tie's parity settled by value alone: no single step where the sum enters a
                # binade at an odd multiple of the spacing (3.0 in bf16, 100 terms: 314, not 312)
                (
                    "sum_of_copies",
                    "if inc == 0 or (2 * r == g and (s / g) % 2 == 1):",
                    "if inc == 0:",
                ),
                # the binade's end reached by s instead of by s + value: one step too many
                ("sum_of_copies", "room = 2.0 ** (e + 1) - s - value", "room = 2.0 ** (e + 1) - s"),
                # the spacing taken as 2**(e - p) (half a spacing) instead of 2**(e - man_bits)
                ("sum_of_copies", "g = 2.0 ** (e - f.man_bits)", "g = 2.0 ** (e - f.man_bits - 1)"),
                # terms that are float64 values but not values of acc: the format rounds them
                ("order_matters", "q = 2.0**-p\n", "q = 1 / (2**p + 1)\n"),
                # the orders swapped: exact in reverse, lossy as returned
                ("order_matters", "return np.array(terms)", "return np.array(terms[::-1])"),
                # one term too few: 2**p terms of the unit counted with the total instead of before it
                ("order_matters", "terms = [q] * 2**p", "terms = [q] * (2**p - 1)"),
                # all terms equal: the sum stalls in both orders
                ("order_matters", "return np.array(terms)", "return np.full(n, q)"),
                # no growing levels: past 2**p equal terms the forward sum stalls too
                ("order_matters", "terms += [2.0**level * q]", "terms += [q]"),
                # a negative term
                ("order_matters", "terms = [q] * 2**p", "terms = [-q] + [q] * (2**p - 1)"),
            ]
        ),
    ),
    ChapterSpec(
        3,
        "ex03_gemm.ipynb",
        lambda: {
            "math": math,
            "np": np,
            "round_to": round_to,
            "TENSOR_CORES": __import__("nbhelpers.tensor_cores", fromlist=["TENSOR_CORES"]).TENSOR_CORES,
        },
        (
            "first_inexact_K",
            "once_and_every_step",
            "split_k_rescue",
            "moved_accumulators",
            "fool_the_tensor_core",
        ),
        18,
        4242,
        tuple(
            [
                # ---- first_inexact_K
                # the odd part read from x * 2**40 ("the product is at least 2**-40"): a bf16 product's
                # bits reach 2**-54, and int() drops those below 2**-40
                ("first_inexact_K", "m = int(math.ldexp(math.frexp(x)[0], 53))", "m = int(x * 2.0**40)"),
                # a negative product taken as it is: its "odd part" is negative
                ("first_inexact_K", "x = abs(float(a) * float(b))", "x = float(a) * float(b)"),
                # the first k with k*m > 2**24, even or odd: an even k keeps k*m's odd part below 2**24
                ("first_inexact_K", "    if K % 2 == 0:\n        K += 1\n", ""),
                # the last exact K instead of the first inexact one
                ("first_inexact_K", "    return K\n", "    return K - 1\n"),
                # K passed through float32 on the way out: wrong only for a power-of-two product (2**24 + 1)
                ("first_inexact_K", "    return K\n", "    return int(np.float32(K))\n"),
                # the sum of ones' answer for every product
                ("first_inexact_K", "K = 2 ** (man_bits + 1) // m + 1", "K = 2 ** (man_bits + 1) + 1"),
                # the 23 (or man_bits) stored mantissa bits instead of the 24 (man_bits + 1) significant ones
                ("first_inexact_K", "K = 2 ** (man_bits + 1) // m + 1", "K = 2**man_bits // m + 1"),
                # "headroom": a product of b significant bits leaves p - b bits for the count
                (
                    "first_inexact_K",
                    "K = 2 ** (man_bits + 1) // m + 1",
                    "K = 2 ** (man_bits + 1 - m.bit_length()) + 1",
                ),
                # fp32's answer whatever the accumulator
                ("first_inexact_K", "K = 2 ** (man_bits + 1) // m + 1", "K = 2**24 // m + 1"),
                # 2**p / m in float64: past 2**53 the quotient is rounded before it is cut to an int
                ("first_inexact_K", "K = 2 ** (man_bits + 1) // m + 1", "K = int(2.0 ** (man_bits + 1) / m) + 1"),
                # running the sum in float32 (numpy's cumsum, a chunk at a time): fp32's answer only
                (
                    "first_inexact_K",
                    "    ### BEGIN SOLUTION\n",
                    "    ### BEGIN SOLUTION\n"
                    "    x = float(a) * float(b)\n"
                    "    s, done = np.float32(0.0), 0\n"
                    "    while True:\n"
                    "        chunk = np.full(1 << 20, np.float32(x), dtype=np.float32)\n"
                    "        chunk[0] = s + np.float32(x)\n"
                    "        sums = np.cumsum(chunk, dtype=np.float32)\n"
                    "        exact = np.arange(done + 1, done + (1 << 20) + 1, dtype=np.float64) * x\n"
                    "        bad = np.flatnonzero(sums.astype(np.float64) != exact)\n"
                    "        if bad.size:\n"
                    "            return done + int(bad[0]) + 1\n"
                    "        s, done = sums[-1], done + (1 << 20)\n",
                ),
                # the product's 16-bit significand (trailing zeros kept) instead of its odd part
                (
                    "first_inexact_K",
                    "m = int(math.ldexp(math.frexp(x)[0], 53))\n"
                    "    while m % 2 == 0:\n"
                    "        m //= 2  # the odd part: x = m * 2**e, m odd\n",
                    "m = int(math.ldexp(math.frexp(x)[0], 16))\n",
                ),
                # ---- once_and_every_step
                # the tie at the stopping point rounded up: the sum stops one binade later
                ("once_and_every_step", "max(1.0, 2.0 ** (p - j))", "max(1.0, 2.0 ** (p + 1 - j))"),
                # bf16's 7 stored mantissa bits instead of its 8 significant ones
                ("once_and_every_step", "every = min(exact, stop(8))", "every = min(exact, stop(7))"),
                # the accumulator's stored bits, not its significant ones
                ("once_and_every_step", "min(exact, stop(man_bits + 1))", "min(exact, stop(man_bits))"),
                # fp32's stopping point whatever the accumulator
                ("once_and_every_step", "min(exact, stop(man_bits + 1))", "min(exact, stop(24))"),
                # the wide sum passed through float32 on its way to bf16 (as ml_dtypes' cast of a float64
                # to bfloat16 does): rounded twice, a sum just off a bf16 tie lands on the tie
                (
                    "once_and_every_step",
                    'once = float(round_to(min(exact, stop(man_bits + 1)), "bf16"))',
                    'once = float(round_to(float(np.float32(min(exact, stop(man_bits + 1)))), "bf16"))',
                ),
                # running the sums in float32 and ml_dtypes' bfloat16 (a chunk at a time, until they
                # stall): fp32's answer only
                (
                    "once_and_every_step",
                    "    ### BEGIN SOLUTION\n",
                    "    ### BEGIN SOLUTION\n"
                    "    import ml_dtypes\n"
                    "\n"
                    "    def run(dt):\n"
                    "        s, left = dt(1.0), n\n"
                    "        while left:\n"
                    "            chunk = np.full(min(left, 1 << 20), 2.0**-j, dtype=dt)\n"
                    "            chunk[0] = dt(s + chunk[0])\n"
                    "            sums = np.cumsum(chunk, dtype=dt)\n"
                    "            if sums[-1] == s or (sums.size > 1 and sums[-1] == sums[-2]):\n"
                    "                return float(sums[-1])\n"
                    "            s, left = sums[-1], left - sums.size\n"
                    "        return float(s)\n"
                    "\n"
                    "    once = float(np.float32(run(np.float32)).astype(ml_dtypes.bfloat16))\n"
                    "    return once, run(ml_dtypes.bfloat16)\n",
                ),
                # the stopping point below 1 when 2**-j is below half a spacing: the sum cannot fall below 1
                ("once_and_every_step", "max(1.0, 2.0 ** (p - j))", "2.0 ** (p - j)"),
                # once: the wide sum returned without the final rounding to bf16
                (
                    "once_and_every_step",
                    'once = float(round_to(min(exact, stop(man_bits + 1)), "bf16"))',
                    "once = min(exact, stop(man_bits + 1))",
                ),
                # once: the exact sum rounded to bf16, as if the wide accumulator never stalled
                (
                    "once_and_every_step",
                    'once = float(round_to(min(exact, stop(man_bits + 1)), "bf16"))',
                    'once = float(round_to(exact, "bf16"))',
                ),
                # the 1 counted among the n terms
                ("once_and_every_step", "exact = 1 + n * t", "exact = 1 + (n - 1) * t"),
                # the final rounding's ties away from zero
                ("once_and_every_step", '"bf16"))', '"bf16", "nearest_away"))'),
                # the final rounding truncates
                ("once_and_every_step", '"bf16"))', '"bf16", "toward_zero"))'),
                # ---- split_k_rescue
                # the large product placed at 2**23, where fp32's spacing is 1: every one is kept in both orders
                ("split_k_rescue", "a[0] = b[0] = 2.0**12", "a[0], b[0] = 2.0**12, 2.0**11"),
                # ones in every slice, the first too, after the large product: split-K loses those
                ("split_k_rescue", "for s in range(1, S):", "for s in range(S):"),
                # every slice filled with ones, odd lengths too: a tie in the tree rounds a join
                ("split_k_rescue", "even = (hi - lo) // 2 * 2", "even = hi - lo"),
                # the large product last: the ones add up exactly first, in both orders
                ("split_k_rescue", "    return a, b", "    return a[::-1].copy(), b[::-1].copy()"),
                # twos instead of ones: each is exactly one spacing at 2**24, never a tie
                (
                    "split_k_rescue",
                    "a[lo : lo + even] = b[lo : lo + even] = 1.0",
                    "a[lo : lo + even] = 2.0\n        b[lo : lo + even] = 1.0",
                ),
                # ones only in slice 1: too few lost
                ("split_k_rescue", "for s in range(1, S):", "for s in range(1, 2):"),
                # ---- moved_accumulators
                # a negative c treated like a positive one: as if the sum had to reach the next fp32 value
                (
                    "moved_accumulators",
                    "neg = 2.0 ** (k + spec.align_bits + 1)",
                    "neg = 2.0 ** (k + min(spec.align_bits, m + 23) + 1)",
                ),
                # ... or reach the value below, half a spacing away at a power of two
                (
                    "moved_accumulators",
                    "neg = 2.0 ** (k + spec.align_bits + 1)",
                    "neg = 2.0 ** (k + min(spec.align_bits, m + 24) + 1)",
                ),
                # the final truncation forgotten: whatever survives the alignment moves a positive c
                (
                    "moved_accumulators",
                    "pos = 2.0 ** (k + min(spec.align_bits, m + 23) + 1)",
                    "pos = 2.0 ** (k + spec.align_bits + 1)",
                ),
                # aligned to the products, not to c: nothing of p is cut
                ("moved_accumulators", "neg = 2.0 ** (k + spec.align_bits + 1)", "neg = math.inf"),
                ("moved_accumulators", "min(spec.align_bits, m + 23)", "m + 23"),
                # fp32's 23 bits kept below 2**E on every GPU
                ("moved_accumulators", "spec.align_bits", "23"),
                # the kept bits off by one, either way
                (
                    "moved_accumulators",
                    "neg = 2.0 ** (k + spec.align_bits + 1)",
                    "neg = 2.0 ** (k + spec.align_bits + 2)",
                ),
                ("moved_accumulators", "neg = 2.0 ** (k + spec.align_bits + 1)", "neg = 2.0 ** (k + spec.align_bits)"),
                # aligned after adding up: n*p as one term must survive
                (
                    "moved_accumulators",
                    "neg = 2.0 ** (k + spec.align_bits + 1)",
                    "neg = 2.0 ** (k + m + spec.align_bits + 1)",
                ),
                ("moved_accumulators", "min(spec.align_bits, m + 23)", "m + min(spec.align_bits, 23)"),
                # rounding to nearest in mind: half a spacing above c would do
                ("moved_accumulators", "m + 23) + 1)", "m + 24) + 1)"),
                # p's exponent taken as math.frexp gives it (one too high): every edge one binade too far
                ("moved_accumulators", "k = math.frexp(p)[1] - 1", "k = math.frexp(p)[1]"),
                # n products counted as ceil(log2 n) powers of two
                ("moved_accumulators", "m = int(n).bit_length() - 1", "m = (int(n) - 1).bit_length()"),
                # the n products not added up: one must reach the spacing on its own
                ("moved_accumulators", "m = int(n).bit_length() - 1", "m = 0"),
                # the group size for n
                (
                    "moved_accumulators",
                    "m = int(n).bit_length() - 1",
                    'm = spec.group("fp16" if gpu == "V100" else "bf16").bit_length() - 1',
                ),
                # n * p against the spacing as a real number, not a power of two: 2**(k + 24) * n
                (
                    "moved_accumulators",
                    "pos = 2.0 ** (k + min(spec.align_bits, m + 23) + 1)",
                    "pos = min(2.0 ** (k + spec.align_bits + 1), n * 2.0 ** (k + 24))",
                ),
                # fp32's bottom forgotten: n*p below the smallest subnormal thought to move zero and the subnormals
                ("moved_accumulators", "if k + m >= -149:", "if True:"),
                # ... or zero never moved (the positive side counted from the smallest subnormal)
                ("moved_accumulators", "count(max(a, 0.0) + 0.0,", "count(max(a, 2.0**-149),"),
                # -0.0 as a: its fp32 code is not zero's
                ("moved_accumulators", "max(a, 0.0) + 0.0", "max(a, 0.0)"),
                # the ends taken as exclusive: b (or a) not counted when it is an fp32 value
                ("moved_accumulators", "min(pos, math.nextafter(b, math.inf))", "min(pos, b)"),
                ("moved_accumulators", "min(neg, math.nextafter(-a, math.inf))", "min(neg, -a)"),
                # n ignored at fp32's bottom: zero and the subnormals moved once p alone reaches 2**-149
                ("moved_accumulators", "if k + m >= -149:", "if k >= -149:"),
                # the smallest normal's spacing taken for zero and the subnormals too
                ("moved_accumulators", "if k + m >= -149:", "if k + m >= -126:"),
                # fp32's bottom one binade too low: n * p in [2**-150, 2**-149) thought to move zero
                ("moved_accumulators", "if k + m >= -149:", "if k + m >= -150:"),
                # the edge counted as moved
                (
                    "moved_accumulators",
                    "min(pos, math.nextafter(b, math.inf))",
                    "min(math.nextafter(pos, math.inf), math.nextafter(b, math.inf))",
                ),
                # zero counted on the negative side too
                ("moved_accumulators", "max(-b, 2.0**-149)", "max(-b, 0.0)"),
                # the ends' fp32 codes from rounding to nearest, not up
                (
                    "moved_accumulators",
                    "        if float(v) < y:\n            v = np.nextafter(v, np.float32(np.inf))\n",
                    "",
                ),
                # the signs swapped: truncation toward zero read as toward -inf
                (
                    "moved_accumulators",
                    "    moved = count(max(a, 0.0) + 0.0, min(pos,",
                    "    pos, neg = neg, pos\n    moved = count(max(a, 0.0) + 0.0, min(pos,",
                ),
                # running the model on every fp32 value of [a, b] (numpy, 2**24 values at a time):
                # the ranges hold up to four billion
                (
                    "moved_accumulators",
                    "    ### BEGIN SOLUTION\n",
                    "    ### BEGIN SOLUTION\n"
                    "    big = float(np.finfo(np.float32).max)\n"
                    "    lo, hi = np.float32(max(a, -big)), np.float32(min(b, big))\n"
                    "    if float(lo) < a:\n"
                    "        lo = np.nextafter(lo, np.float32(np.inf))\n"
                    "    if float(hi) > b:\n"
                    "        hi = np.nextafter(hi, np.float32(-np.inf))\n"
                    "    if not float(lo) <= float(hi):\n"
                    "        return 0\n"
                    "    key = lambda v: (lambda i: i if i >= 0 else -(i & 0x7FFFFFFF))(int(v.view(np.int32)))\n"
                    "    keys = np.arange(key(lo), key(hi) + 1)\n"
                    "    if keys.size > 2**24:\n"
                    "        raise MemoryError('more than 2**24 accumulators at once')\n"
                    "    bits = np.where(keys >= 0, keys, -keys | 0x80000000).astype(np.uint32)\n"
                    "    c = bits.view(np.float32).astype(np.float64)\n"
                    "    amax = np.maximum(np.abs(c), p)\n"
                    "    q = np.ldexp(1.0, np.frexp(amax)[1] - 1 - spec.align_bits)\n"
                    "    total = np.trunc(c / q) * q + n * (np.trunc(p / q) * q)\n"
                    "    r = round_to(total, 'fp32', 'toward_zero')\n"
                    "    return int(np.count_nonzero(r != c))\n",
                ),
                # ---- fool_the_tensor_core
                # built for the V100's alignment and handed in for every GPU: the A100 and H100 keep exact's top bits
                ("fool_the_tensor_core", "e + spec.align_bits + 1", "e + 23 + 1"),
                # one bit short: the last bit kept is 2**e, so exact keeps its leading bit (at least half of it)
                ("fool_the_tensor_core", "e + spec.align_bits + 1", "e + spec.align_bits"),
                # "fp32 would lose it, so the tensor core does": below half of fp32's spacing at P, which the
                # V100 and A100 cut away but the H100's 25 bits keep
                ("fool_the_tensor_core", "e + spec.align_bits + 1", "e + 25"),
                # the V100's group of 4 for every GPU: the wrong length elsewhere
                (
                    "fool_the_tensor_core",
                    'np.zeros(spec.group("fp16")), np.zeros(spec.group("fp16"))',
                    "np.zeros(4), np.zeros(4)",
                ),
                # the large product not cancelled: the exact dot product is P + exact
                ("fool_the_tensor_core", "a[:3] = [P, -P, exact]", "a[:3] = [P, 0.0, exact]"),
                # all zeros: the model returns 0, but the exact dot product is 0 too, not exact
                ("fool_the_tensor_core", "a[:3] = [P, -P, exact]", "a[:3] = 0.0"),
                # "as large as fp16 goes", misremembered as 2**16: not an fp16 value (it rounds to inf)
                ("fool_the_tensor_core", "P = 2.0 ** (e + spec.align_bits + 1)", "P = 2.0**16"),
                # fp16 inputs whose products overflow fp16's range: 256 * 256 = 65536 > 65504
                ("fool_the_tensor_core", "a[:3] = [P, -P, exact]", "a[:3] = [256.0, -256.0, exact]; b[:2] = 256.0"),
                # exact split into factors that are not fp16 values: exact * 3 times 1/3
                ("fool_the_tensor_core", "a[:3] = [P, -P, exact]", "a[:3], b[2] = [P, -P, exact * 3], 1 / 3"),
            ]
        ),
    ),
    ChapterSpec(
        4,
        "ex04_master_weights.ipynb",
        lambda: {"math": math, "np": np, "ml_dtypes": ml_dtypes},
        ("lost_update_threshold", "first_copy_change", "expected_mth_move", "stalled_kahan_update"),
        17,
        4321,
        tuple(
            [
                # the results flattened (the random cases have 2-d tensors too)
                (
                    "lost_update_threshold",
                    "        return (gap / 2) / np.abs(g)  # inf where g == 0",
                    "        return ((gap / 2) / np.abs(g)).ravel()",
                ),
                (
                    "first_copy_change",
                    "    return np.where(n == 0, 0, k).astype(np.int64)",
                    "    return np.where(n == 0, 0, k).astype(np.int64).ravel()",
                ),
                (
                    "expected_mth_move",
                    "        return np.where(g == 0, np.inf, dist / d + (m - j))",
                    "        return np.where(g == 0, np.inf, dist / d + (m - j)).ravel()",
                ),
                (
                    "stalled_kahan_update",
                    "    return lo, (sign * hi).astype(np.float32)",
                    "    return lo.ravel(), (sign * hi).astype(np.float32).ravel()",
                ),
                # ---- stalled_kahan_update
                # hi taken as the power of two h / 2**9 whose running sum stalls: float32 rounds
                # 2**(j + 8) + delta to 24 bits first, so up to 2**-16 of it more stalls as well
                ("stalled_kahan_update", "hi = h / 2.0**9 * (1 + 2.0**-16)", "hi = h / 2.0**9"),
                # hi one whole float32 spacing of the sum above 2**j: that is no tie, it climbs
                ("stalled_kahan_update", "(1 + 2.0**-16)", "(1 + 2.0**-15)"),
                # hi the next float32 value above 2**j (its own spacing, not the sum's)
                ("stalled_kahan_update", "(1 + 2.0**-16)", "(1 + 2.0**-23)"),
                # the buffer thought to stall at 256 updates with nothing on top: it climbs to h
                ("stalled_kahan_update", "hi = h / 2.0**9", "hi = h / 2.0**8"),
                # safety first: half the largest update the buffer loses
                ("stalled_kahan_update", "hi = h / 2.0**9", "hi = h / 2.0**10"),
                # a whole gap taken for the distance w must cover (both ends twice too large)
                ("stalled_kahan_update", "h = np.exp2(e - down - 8.0)", "h = np.exp2(e - down - 7.0)"),
                # the direction taken as toward zero when w and sign agree
                (
                    "stalled_kahan_update",
                    "toward_zero = np.signbit(w) != np.signbit(sign)",
                    "toward_zero = np.signbit(w) == np.signbit(sign)",
                ),
                # the gap above |w| always, whatever the direction: no finer binade below 2**e
                ("stalled_kahan_update", "down = toward_zero & (a == np.exp2(e))", "down = 0 * toward_zero"),
                # the master's float32 spacing taken from w's binade even when it moves down
                # into the finer one below a power of two
                ("stalled_kahan_update", "* h / 2.0**15).astype", "* h * (1 + down) / 2.0**15).astype"),
                # lo off by one spacing a step, below and above
                ("stalled_kahan_update", "n = 2**15 // K + 1", "n = 2**15 // K"),
                ("stalled_kahan_update", "n = 2**15 // K + 1", "n = 2**15 // K + 2"),
                # K off by one: a count below K asked, not at most K
                ("stalled_kahan_update", "n = 2**15 // K + 1", "n = 2**15 // (K - 1) + 1"),
                # n >= 2**15 / K, rounded up: a landing on the midpoint taken as a move for every w
                ("stalled_kahan_update", "n = 2**15 // K + 1", "n = -(-(2**15) // K)"),
                # the same mistake stated as a rule: every w moves on the midpoint
                ("stalled_kahan_update", "odd & (2**15 % K == 0)", "(2**15 % K == 0)"),
                # no w moves on the midpoint: the odd last bit ignored
                ("stalled_kahan_update", "odd & (2**15 % K == 0)", "~odd & (2**15 % K == 0)"),
                # the tie of float32's rounding of delta taken to the odd multiple of v
                ("stalled_kahan_update", "np.where(n % 2 == 0, b,", "np.where(n % 2 == 1, b,"),
                # the tie ignored: (n - 1/2) v always
                (
                    "stalled_kahan_update",
                    "lo = np.where(n % 2 == 0, b, np.nextafter(b, np.float32(np.inf)))",
                    "lo = b",
                ),
                # lo = n spacings: float32's rounding of delta to a multiple of v forgotten
                ("stalled_kahan_update", "b = ((n - 0.5) * h", "b = ((n - 0.0) * h"),
                # lo pushed the other way
                ("stalled_kahan_update", "lo = (sign * lo)", "lo = (-sign * lo)"),
                # float64 arrays returned
                (
                    "stalled_kahan_update",
                    "    return lo, (sign * hi).astype(np.float32)",
                    "    return lo.astype(np.float64), sign * hi",
                ),
                # (hi, lo) in the wrong order
                (
                    "stalled_kahan_update",
                    "    return lo, (sign * hi).astype(np.float32)",
                    "    return (sign * hi).astype(np.float32), lo",
                ),
                # ---- first_copy_change
                # the master's steps added exactly: no float32 rounding of master - step
                ("first_copy_change", "n = np.rint(d / v)", "n = d / v"),
                # the product in float64: lr not rounded to float32, the product not rounded
                (
                    "first_copy_change",
                    "d = np.abs((np.float32(lr) * g).astype(np.float64))",
                    "d = np.abs(lr * g.astype(np.float64))",
                ),
                # the product rounded to float32, but formed with lr at float64 precision
                (
                    "first_copy_change",
                    "d = np.abs((np.float32(lr) * g).astype(np.float64))",
                    "d = np.abs((lr * g.astype(np.float64)).astype(np.float32).astype(np.float64))",
                ),
                # lr rounded to float32, but the product float32(lr) * g not rounded to float32
                (
                    "first_copy_change",
                    "d = np.abs((np.float32(lr) * g).astype(np.float64))",
                    "d = np.abs(np.float64(np.float32(lr)) * g.astype(np.float64))",
                ),
                # a step of half a float32 spacing rounded up (half away from zero), not to even
                ("first_copy_change", "n = np.rint(d / v)", "n = np.floor(d / v + 0.5)"),
                # a step below half a float32 spacing still moves the master (rounded up)
                ("first_copy_change", "n = np.rint(d / v)", "n = np.ceil(d / v)"),
                # the tie on the midpoint forgotten: the copy always moves one step later
                ("first_copy_change", "k = np.where((q == np.floor(q)) & odd, q, k)", "k = k"),
                # the tie on the midpoint the wrong way round: it moves from an even last bit
                ("first_copy_change", "(q == np.floor(q)) & odd", "(q == np.floor(q)) & ~odd"),
                # every tie moves the copy (round half away from w)
                ("first_copy_change", "k = np.floor(q) + 1", "k = np.ceil(q)"),
                # off by one: the steps that do not move the copy counted instead
                ("first_copy_change", "k = np.floor(q) + 1", "k = np.floor(q)"),
                # the distance to the neighbour itself, not to the midpoint
                ("first_copy_change", "h = gap / 2  # from w to the midpoint toward -g", "h = gap"),
                # always the gap above |w|: the finer binade below a power of two forgotten
                ("first_copy_change", "gap = np.where(down & (e > e_min), gap / 2, gap)", "gap = gap"),
                # the finer binade below the smallest normal too (the subnormals below it are not finer)
                ("first_copy_change", "np.where(down & (e > e_min), gap / 2, gap)", "np.where(down, gap / 2, gap)"),
                # the master's float32 grid taken at w, also when it moves down into the finer binade
                (
                    "first_copy_change",
                    "v = np.exp2(np.maximum(e - down, -126) - 23.0)",
                    "v = np.exp2(np.maximum(e, -126) - 23.0)",
                ),
                # the master's grid a fixed fraction of the copy's gap (2**-16 in bf16, 2**-13 in fp16):
                # wrong in fp16's subnormal range and below its smallest normal
                ("first_copy_change", "v = np.exp2(np.maximum(e - down, -126) - 23.0)", "v = gap * 2.0 ** (p - 24)"),
                # the master's grid halved only where the copy's gap is (not below fp16's smallest normal)
                ("first_copy_change", "np.maximum(e - down, -126)", "np.maximum(e - (down & (e > e_min)), -126)"),
                # the master's grid no finer than at the copy's smallest normal (fp16: 2**-37)
                ("first_copy_change", "np.maximum(e - down, -126)", "np.maximum(e - down, e_min)"),
                # the direction of +g instead of -g
                ("first_copy_change", "np.signbit(w) == np.signbit(g)", "np.signbit(w) != np.signbit(g)"),
                # no subnormal range in the copy: the gap of a subnormal taken from its own exponent
                ("first_copy_change", "np.exp2(np.maximum(e, e_min) - (p - 1.0))", "np.exp2(e - (p - 1.0))"),
                # the copy taken to be bf16 whatever w's dtype
                ("first_copy_change", "p, e_min = (11, -14) if fp16 else (8, -126)", "p, e_min = 8, -126"),
                # fp16's significant bits counted without the implicit one (10)
                ("first_copy_change", "(11, -14) if fp16", "(10, -14) if fp16"),
                # fp16's smallest normal exponent taken as -15 (its bias), one binade too low
                ("first_copy_change", "(11, -14) if fp16", "(11, -15) if fp16"),
                # ---- lost_update_threshold
                # the neighbour above w in value, whatever the sign of g
                ("lost_update_threshold", "(np.signbit(w) == np.signbit(g))", "np.signbit(w)"),
                # the direction of +g instead of -g (w + lr*g)
                ("lost_update_threshold", "np.signbit(w) == np.signbit(g)", "np.signbit(w) != np.signbit(g)"),
                # the direction from the sign of g alone, as if every weight were positive
                ("lost_update_threshold", "(np.signbit(w) == np.signbit(g))", "~np.signbit(g)"),
                # always the spacing above |w|: the finer binade below a power of two forgotten
                ("lost_update_threshold", "gap / 2, gap)", "gap, gap)"),
                # the gap halved at a power of two in both directions
                ("lost_update_threshold", "toward_zero & power_of_two & (e > -126)", "power_of_two & (e > -126)"),
                # the gap halved below the smallest normal too (the subnormals below it are not finer)
                ("lost_update_threshold", "power_of_two & (e > -126)", "power_of_two"),
                # no subnormal range: the binade of a subnormal taken from its own exponent
                ("lost_update_threshold", "np.maximum(e - 1, -126)", "e - 1"),
                # w == 0 not special: frexp's exponent of 0 used as a binade
                (
                    "lost_update_threshold",
                    "e = np.where(a > 0, np.maximum(e - 1, -126), -126)",
                    "e = np.maximum(e - 1, -126)",
                ),
                # the full gap instead of half: the update is lost until it reaches the neighbour
                ("lost_update_threshold", "(gap / 2) / np.abs(g)", "gap / np.abs(g)"),
                # float32's spacing (24 significant bits) instead of bf16's
                ("lost_update_threshold", "np.exp2(e - 7.0)", "np.exp2(e - 23.0)"),
                # a tiny epsilon against division by zero: finite where g == 0
                ("lost_update_threshold", "/ np.abs(g)", "/ (np.abs(g) + 1e-30)"),
                # the result returned in float32
                (
                    "lost_update_threshold",
                    "return (gap / 2) / np.abs(g)",
                    "return ((gap / 2) / np.abs(g)).astype(np.float32)",
                ),
                # ---- expected_mth_move
                # no floor at one step: a certain step taken as a wait of gap / d (below 1)
                (
                    "expected_mth_move",
                    "    j = np.where(toward, np.clip(wide, 0, m), np.where(gap0 >= d, m, 0))",
                    "    j = m",
                ),
                # ... only away from zero: a step past the gap ahead there taken as a wait of gap / d
                ("expected_mth_move", "np.where(gap0 >= d, m, 0)", "m"),
                # a step equal to the gap ahead taken as certain for good: away from zero the gaps
                # after it are wider, and each of those moves is a wait again
                ("expected_mth_move", "np.where(gap0 >= d, m, 0)", "np.where(gap0 > d, m, 0)"),
                # failures before each move counted, not the steps: gap / d - 1 a wait, 0 a certain step
                ("expected_mth_move", "dist / d + (m - j))", "dist / d - j)"),
                # round to nearest's half gap taken for the distance to cover
                ("expected_mth_move", "dist / d + (m - j))", "dist / 2 / d + (m - j))"),
                # the walk in the direction of g, not of -g (the gap on the wrong side)
                ("expected_mth_move", "s = np.where(g < 0, 1, -1)", "s = np.where(g < 0, -1, 1)"),
                # the binade change ignored: every gap taken to be the first one
                ("expected_mth_move", "dist = np.abs(value(o + s * j) - w)", "dist = j * gap0"),
                # the m-th move counted from 0: the moves after the first
                (
                    "expected_mth_move",
                    "    s = np.where(g < 0, 1, -1)  # the direction of -g\n",
                    "    s = np.where(g < 0, 1, -1)  # the direction of -g\n    m = m - 1\n",
                ),
                # the step in float32, as the loop of exercise 2 computes it, not the exact product
                (
                    "expected_mth_move",
                    "d = lr * np.abs(g.astype(np.float64))",
                    "d = np.abs((np.float32(lr) * g).astype(np.float64))",
                ),
                # the step rounded to nearest first: never moves when it is under half a gap
                (
                    "expected_mth_move",
                    "return np.where(g == 0, np.inf, dist / d + (m - j))",
                    "return np.where((g == 0) | (d < gap0 / 2), np.inf, dist / d + (m - j))",
                ),
                # +0 and -0 taken for two values: crossing zero costs a move more
                (
                    "expected_mth_move",
                    "o = np.where(code >= 0x8000, 0x8000 - code, code)",
                    "o = np.where(code >= 0x8000, 0x7FFF - code, code)",
                ),
                # the distance in float32: rounded where it spans more than 24 bits
                (
                    "expected_mth_move",
                    "return (c << 16).view(np.float32).astype(np.float64)",
                    "return (c << 16).view(np.float32)",
                ),
                # a power of two's gap ahead taken from its own binade, not the finer one below
                ("expected_mth_move", "(k + 134) * 128)", "(k + 134) * 128 - 1)"),
                # the subnormals forgotten: gaps taken to keep halving below 2**-126
                (
                    "expected_mth_move",
                    "wide = np.where(k <= -133, m, np.abs(o) - (k + 134) * 128)",
                    "wide = np.abs(o) - (k + 134) * 128",
                ),
                # the largest power of two <= d taken for the smallest >= d: gaps below d counted as waits
                ("expected_mth_move", "k = np.where(f == 0.5, e - 1, e)", "k = e - 1"),
            ]
        ),
    ),
    ChapterSpec(
        5,
        "ex05_loss_scaling.ipynb",
        lambda: {"math": math, "np": np},
        ("scale_window", "window_gradients", "settled_scale", "misordered_clip_ratio"),
        16,
        2718,
        tuple(
            [
                # ---- scale_window
                # the allowed count as int(max_underflow * n): 1 / 49 * 49 is 0.999...
                (
                    "scale_window",
                    "    k = 0\n    while k < n and (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = min(int(max_underflow * n), n - 1)\n",
                ),
                # ... or rescued by an epsilon, which takes one too many just below c / n
                (
                    "scale_window",
                    "    k = 0\n    while k < n and (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = min(math.floor(max_underflow * n + 1e-9), n - 1)\n",
                ),
                # the floor of the float product, raised by one where it fell below a count: one too
                # many where the product rounds up to c although max_underflow is below c / n
                (
                    "scale_window",
                    "    k = 0\n    while k < n and (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = min(math.floor(max_underflow * n), n - 1)\n"
                    "    if k + 1 < n and (k + 1) / n <= max_underflow:\n        k += 1\n",
                ),
                # ... or lowered by one where it rounded up: one too few where it falls below c
                (
                    "scale_window",
                    "    k = 0\n    while k < n and (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = min(math.floor(max_underflow * n), n - 1)\n"
                    "    if k / n > max_underflow:\n        k -= 1\n",
                ),
                # overflow taken to start above the largest finite value (65504 in fp16), not at the midpoint 65520
                ("scale_window", "limit = top + 2.0 ** (bias - man_bits) / 2", "limit = math.nextafter(top, math.inf)"),
                # the tie at the midpoint thought to round down to the largest finite value
                ("scale_window", "return v >= limit", "return v > limit"),
                # the tie at half the smallest subnormal thought to survive
                ("scale_window", "return v <= tiny / 2", "return v < tiny / 2"),
                # everything below the smallest subnormal counted as lost
                ("scale_window", "return v <= tiny / 2", "return v < tiny"),
                # subnormals forgotten (flush to zero): everything below the smallest normal lost
                ("scale_window", "return v <= tiny / 2", "return v < 2.0 ** (1 - bias)"),
                # the all-ones exponent taken for finite values: no inf, a largest value twice as large
                (
                    "scale_window",
                    "top = (2 - 2.0**-man_bits) * 2.0**bias",
                    "top = (2 - 2.0**-man_bits) * 2.0 ** (bias + 1)",
                ),
                # zeros counted, as elements that underflow
                ("scale_window", "a = np.sort(a[a != 0])", "a = np.sort(a)"),
                # the fraction must stay strictly below max_underflow
                ("scale_window", "(k + 1) / n <= max_underflow", "(k + 1) / n < max_underflow"),
                # the k-th smallest element must survive instead of the (k + 1)-th
                ("scale_window", "a[k]", "a[k - 1]"),
                # an empty window not noticed: lo above hi returned
                ("scale_window", "if e_lo > e_hi:", "if False:"),
                # no absolute value: the largest and smallest gradients taken by sign
                (
                    "scale_window",
                    "a = np.abs(np.asarray(x, dtype=np.float64)).ravel()",
                    "a = np.asarray(x, dtype=np.float64).ravel()",
                ),
                # ---- window_gradients
                # the allowed count as int(max_underflow * n): 1 / 49 * 49 is 0.999..., one value too
                # few at the bottom, so lo / 2 is usable
                (
                    "window_gradients",
                    "    k = 0\n    while (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = int(max_underflow * n)\n",
                ),
                # the count never worked out: all values but one at the bottom (the window is right,
                # but lo / 2 fails by far more values than it needs)
                (
                    "window_gradients",
                    "    k = 0\n    while (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = n - 2\n",
                ),
                # the allowed count rounded to nearest: one too many wherever max_underflow * n has a
                # fraction of one half or more
                (
                    "window_gradients",
                    "    k = 0\n    while (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = round(max_underflow * n)\n",
                ),
                # the float product rescued by an epsilon: one too many just below c / n
                (
                    "window_gradients",
                    "    k = 0\n    while (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = math.floor(max_underflow * n + 1e-9)\n",
                ),
                # the floor of the float product, raised by one where it fell below a count: one too
                # many where the product rounds up to c although max_underflow is below c / n
                (
                    "window_gradients",
                    "    k = 0\n    while (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = math.floor(max_underflow * n)\n    if (k + 1) / n <= max_underflow:\n        k += 1\n",
                ),
                # ... or lowered by one where it rounded up: one too few where it falls below c
                (
                    "window_gradients",
                    "    k = 0\n    while (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = math.floor(max_underflow * n)\n    if k / n > max_underflow:\n        k -= 1\n",
                ),
                # the allowed count rounded up
                (
                    "window_gradients",
                    "    k = 0\n    while (k + 1) / n <= max_underflow:\n        k += 1\n",
                    "    k = math.ceil(max_underflow * n)\n",
                ),
                # one value too many at the bottom, to be safe: lo / 2 fails by two values
                ("window_gradients", "x[k + 1 :] = ", "x[k + 2 :] = "),
                # values that underflow below the smallest subnormal: they survive at lo / 2 too
                ("window_gradients", "x = np.full(n, 2.0**-24 / lo)", "x = np.full(n, 1.5 * 2.0**-24 / lo)"),
                # half the smallest subnormal thought to survive: those values underflow at lo already
                ("window_gradients", "x = np.full(n, 2.0**-24 / lo)", "x = np.full(n, 2.0**-25 / lo)"),
                # subnormals forgotten: values at the smallest normal, which survive at lo / 2
                ("window_gradients", "x = np.full(n, 2.0**-24 / lo)", "x = np.full(n, 2.0**-14 / lo)"),
                # one value too few at the bottom: at lo / 2 the allowed fraction still holds
                ("window_gradients", "x[k + 1 :] = ", "x[k:] = "),
                # overflow thought to start above 65504: 65505 at 2 hi rounds to 65504
                ("window_gradients", "65520.0 / (2 * hi)", "65505.0 / (2 * hi)"),
                # the tie 65520 thought finite: placed at hi, where it overflows
                ("window_gradients", "65520.0 / (2 * hi)", "65520.0 / hi"),
                # the allowed fraction strictly below max_underflow: one value too few when it is exact
                ("window_gradients", "(k + 1) / n <= max_underflow", "(k + 1) / n < max_underflow"),
                # ---- settled_scale
                # overflow taken to start above fp16's largest value 65504, not at the rounding midpoint 65520
                ("settled_scale", "return scaled >= limit", "return scaled > 65504.0"),
                # the tie at 65520 thought to round down to 65504 (it goes to the even neighbour, 2**16: inf)
                ("settled_scale", "return scaled >= limit", "return scaled > limit"),
                # S one factor of 2 too high: the peak of the cycle, the scale of the overflowing step
                ("settled_scale", "return s, skipped", "return 2 * s, skipped"),
                # S one factor of 2 too low: one back-off too many
                ("settled_scale", "return s, skipped", "return s / 2, skipped"),
                # one skip per growth_interval steps: the overflowing step not counted in the cycle
                ("settled_scale", "1 / (growth_interval + 1)", "1 / growth_interval"),
                # the cycle thought to last one step longer (growth counted on the step after the last good one)
                ("settled_scale", "1 / (growth_interval + 1)", "1 / (growth_interval + 2)"),
                # init_scale's mantissa ignored: S taken as a power of two
                ("settled_scale", "s = float(np.float32(init_scale))", "s = 2.0 ** math.floor(math.log2(init_scale))"),
                # init_scale not rounded to float32
                ("settled_scale", "s = float(np.float32(init_scale))", "s = float(init_scale)"),
                # no float32 cap: the scale grows past float32's largest value
                ("settled_scale", " and s * 2 <= top:", ":"),
                # the cap reached but a growth attempt still counted as a skipped step
                ("settled_scale", "capped = s * 2 > top", "capped = False"),
                # no back-off: a start above S is kept
                ("settled_scale", "while overflows(max_abs_grad * s):", "while False:"),
                # capped when even float32's largest value keeps g finite in fp16: the cap is the largest
                # float32(init_scale) * 2**k, one binade below float32's largest value for a power of two
                ("settled_scale", "capped = s * 2 > top", "capped = not overflows(max_abs_grad * top)"),
                # the cap placed one binade early: S one doubling below it, whose growth fits float32
                ("settled_scale", "capped = s * 2 > top", "capped = s * 4 > top"),
                # the cap taken as float32's top binade, whatever init_scale's mantissa
                ("settled_scale", "capped = s * 2 > top", "capped = s >= 2.0**126"),
                # ---- misordered_clip_ratio
                # torch's guard 1e-6 left out of the clip factor
                ("misordered_clip_ratio", "max_norm / (norm + 1e-6)", "max_norm / norm"),
                # the textbook condition "clip when the norm exceeds max_norm" in the wrong order: torch
                # clips a scaled norm less than 1e-6 below max_norm too
                (
                    "misordered_clip_ratio",
                    "wrong = g * clip_factor(scale * norm)",
                    "wrong = g * (clip_factor(scale * norm) if scale * norm > max_norm else 1.0)",
                ),
                # ... and in both orders
                (
                    "misordered_clip_ratio",
                    "return min(1.0, max_norm / (norm + 1e-6))",
                    "return max_norm / (norm + 1e-6) if norm > max_norm else 1.0",
                ),
                # the guard added to the true norm and the sum scaled: the clip sees scale * (norm + 1e-6)
                (
                    "misordered_clip_ratio",
                    "wrong = g * clip_factor(scale * norm)",
                    "wrong = g * min(1.0, max_norm / (scale * (norm + 1e-6)))",
                ),
                # no cap at 1: a small norm is scaled up to max_norm
                ("misordered_clip_ratio", "min(1.0, max_norm / (norm + 1e-6))", "max_norm / (norm + 1e-6)"),
                # the ratio upside down: right over wrong
                (
                    "misordered_clip_ratio",
                    "np.linalg.norm(update(wrong)) / np.linalg.norm(update(right))",
                    "np.linalg.norm(update(right)) / np.linalg.norm(update(wrong))",
                ),
                # always 1 / scale, as if both orders always clipped and the optimizer did not matter
                ("misordered_clip_ratio", "    return float(\n", "    return 1 / scale\n    return float(\n"),
                # the right order's own clip forgotten
                ("misordered_clip_ratio", "right = g * clip_factor(norm)", "right = g"),
                # the scaler's division by scale after the wrong clip forgotten
                (
                    "misordered_clip_ratio",
                    "wrong = g * clip_factor(scale * norm)",
                    "wrong = scale * g * clip_factor(scale * norm)",
                ),
                # the ratio returned as text
                ("misordered_clip_ratio", "    return float(\n", "    return str(\n"),
                # the threshold thought scaled with the gradients: no difference except through the guard
                (
                    "misordered_clip_ratio",
                    "wrong = g * clip_factor(scale * norm)",
                    "wrong = g * min(1.0, scale * max_norm / (scale * norm + 1e-6))",
                ),
                # Adam's eps forgotten: its first step lr * sign(g), so a common factor always cancels
                ("misordered_clip_ratio", "return 1e-3 * x / (np.abs(x) + 1e-8)", "return 1e-3 * np.sign(x)"),
                # Adam taken as SGD: only the norms matter
                ("misordered_clip_ratio", 'if optimizer == "sgd":', "if True:"),
                # Adam's bias corrections forgotten: m = 0.1 g over sqrt(0.001) |g| + eps
                (
                    "misordered_clip_ratio",
                    "return 1e-3 * x / (np.abs(x) + 1e-8)",
                    "return 1e-3 * 0.1 * x / (math.sqrt(0.001) * np.abs(x) + 1e-8)",
                ),
                # eps inside the square root
                (
                    "misordered_clip_ratio",
                    "return 1e-3 * x / (np.abs(x) + 1e-8)",
                    "return 1e-3 * x / np.sqrt(x * x + 1e-8)",
                ),
                # eps added before the bias correction of the root (the "epsilon hat" form)
                (
                    "misordered_clip_ratio",
                    "return 1e-3 * x / (np.abs(x) + 1e-8)",
                    "return 1e-3 * x / (np.abs(x) + 1e-8 * math.sqrt(0.001))",
                ),
                # Adam fed the scaled gradients in the wrong order (the scaler's division after its step)
                (
                    "misordered_clip_ratio",
                    "np.linalg.norm(update(wrong)) / np.linalg.norm(update(right))",
                    "np.linalg.norm(update(scale * wrong)) / scale / np.linalg.norm(update(right))",
                ),
                # Adam's ratio from the norms alone: the update of a gradient the size of the norm
                (
                    "misordered_clip_ratio",
                    "np.linalg.norm(update(wrong)) / np.linalg.norm(update(right))",
                    "np.linalg.norm(update(np.array([np.linalg.norm(wrong)])))"
                    " / np.linalg.norm(update(np.array([np.linalg.norm(right)])))",
                ),
            ]
        ),
    ),
    ChapterSpec(
        6,
        "ex06_scaled_gemm.ipynb",
        lambda: {"math": math, "np": np, "round_to": round_to},
        ("flushed_per_tensor", "asym_int8_gemm", "coarsest_granularity", "fp8_choice", "best_margin"),
        17,
        6066,
        tuple(
            [
                # the tie left out: the flushed values one float32 step below half a step, under lo
                ("flushed_per_tensor", "tie = t * S\n", "tie = float(np.nextafter(f32(t * S), f32(0)))\n"),
                # the amax at hi itself: hi / qmax rounded to float32 is no exact scale of it
                ("flushed_per_tensor", "A = exact_amax(hi, lo)", "A = hi"),
                # the tensor's scale fp32(hi / qmax), its amax qmax * S rounded to float32: past hi, or inexact
                (
                    "flushed_per_tensor",
                    "A = exact_amax(hi, lo)",
                    "A = float(f32(qmax * float(f32(hi / qmax))))",
                ),
                # a power-of-two scale: exact, but its tie falls below a lo at the largest scale's tie
                (
                    "flushed_per_tensor",
                    "A = exact_amax(hi, lo)",
                    "A = qmax * 2.0 ** math.floor(math.log2(hi / qmax))",
                ),
                # the amax in the first block: an edge block smaller than it cannot flush as much
                ("flushed_per_tensor", "for i, j in blocks[:-1]:", "for i, j in blocks[1:]:"),
                # one element too few flushed (the amax counted among the k)
                ("flushed_per_tensor", "left = k\n", "left = k - 1\n"),
                # one element too many flushed
                ("flushed_per_tensor", "left = k\n", "left = k + 1\n"),
                # never a block flushed whole: every block keeps a value, short of the largest k
                ("flushed_per_tensor", "if left >= n and full is not None:", "if False:"),
                # every block flushed whole at the tie, whether or not the tie is an exact block amax
                ("flushed_per_tensor", "full = exact_amax(tie, lo) if tie >= lo else None", "full = tie"),
                # a block flushed whole at the largest exact amax below the tie, however far below lo
                (
                    "flushed_per_tensor",
                    "full = exact_amax(tie, lo) if tie >= lo else None",
                    "full = exact_amax(tie, 0.0)",
                ),
                # the kept value's block scale S * 2**-8: its amax falls below the tie and flushes too
                ("flushed_per_tensor", "2.0**-7 if", "2.0**-8 if"),
                # e4m3fn flushes below its smallest subnormal 2**-9 (the tie is half of it)
                (
                    "flushed_per_tensor",
                    't = 0.5 if element == "int8" else 2.0**-10',
                    't = 0.5 if element == "int8" else 2.0**-9',
                ),
                # int8's half a step taken for e4m3fn as well
                ("flushed_per_tensor", 't = 0.5 if element == "int8" else 2.0**-10', "t = 0.5"),
                # e4m3 (IEEE-style, max 240) taken for e4m3fn (max 448)
                (
                    "flushed_per_tensor",
                    'qmax = 127.0 if element == "int8" else 448.0',
                    'qmax = 127.0 if element == "int8" else 240.0',
                ),
                # int8's 127 taken for the fp8 element
                ("flushed_per_tensor", 'qmax = 127.0 if element == "int8" else 448.0', "qmax = 127.0"),
                # the flushed elements written as zeros
                ("flushed_per_tensor", "flat[:m] = tie", "flat[:m] = 0.0"),
                # returned in float64
                ("flushed_per_tensor", "return x.astype(np.float32)", "return x"),
                # the scale's floor in float64: exact_amax's candidates not float32 scales (any a <= top)
                (
                    "flushed_per_tensor",
                    "if float(f32(float(s) * qmax)) == float(s) * qmax:",
                    "if True:",
                ),
                # the chapter's terms only: K * zx * zw, the product of the two zero points, left out
                ("asym_int8_gemm", "- col_term + const", "- col_term"),
                # the zero points' product subtracted instead of added
                ("asym_int8_gemm", "- col_term + const", "- col_term - const"),
                # the weights' zero-point term added instead of subtracted
                ("asym_int8_gemm", "- row_term - col_term", "- row_term + col_term"),
                # the zero points multiplied as uint8: zx * zw wraps around
                (
                    "asym_int8_gemm",
                    "const = K * zx64 * zw64",
                    "const = K * (np.asarray(zx) * np.asarray(zw)).astype(np.int64)",
                ),
                # K times the uint8 zero points: wraps around, or an OverflowError once K passes 255
                (
                    "asym_int8_gemm",
                    "const = K * zx64 * zw64",
                    "const = (K * np.asarray(zx) * np.asarray(zw)).astype(np.int64)",
                ),
                # each zero point with the other operand's sum swapped: zx with sum_k qx, zw with sum_k qw
                (
                    "asym_int8_gemm",
                    "row_term = zx64 * np.asarray(w_colsum).astype(np.int64)\n"
                    "    col_term = np.asarray(x_rowsum).astype(np.int64) * zw64",
                    "row_term = zx64 * np.asarray(x_rowsum).astype(np.int64)\n"
                    "    col_term = np.asarray(w_colsum).astype(np.int64) * zw64",
                ),
                # the two zero points swapped: zw with the weights' column sums, zx with the rows' sums
                (
                    "asym_int8_gemm",
                    "row_term = zx64 * np.asarray(w_colsum).astype(np.int64)\n"
                    "    col_term = np.asarray(x_rowsum).astype(np.int64) * zw64",
                    "row_term = zw64 * np.asarray(w_colsum).astype(np.int64)\n"
                    "    col_term = np.asarray(x_rowsum).astype(np.int64) * zx64",
                ),
                # the length of the sums read from acc's shape: N, not K
                ("asym_int8_gemm", "const = K * zx64 * zw64", "const = np.shape(acc)[1] * zx64 * zw64"),
                # the activations' zero point applied along the columns (zx transposed)
                ("asym_int8_gemm", "row_term = zx64 * ", "row_term = zx64.T * "),
                # the weights' zero point applied along the rows (zw transposed)
                ("asym_int8_gemm", ".astype(np.int64) * zw64", ".astype(np.int64) * zw64.T"),
                # the raw accumulator converted to float32 before the correction: sums past 2**24 round
                (
                    "asym_int8_gemm",
                    "c32 = corrected.astype(np.float32)",
                    "c32 = (np.asarray(acc).astype(np.float32).astype(np.float64) - row_term - col_term"
                    " + const).astype(np.float32)",
                ),
                # each term converted to float32, then added in float32
                (
                    "asym_int8_gemm",
                    "c32 = corrected.astype(np.float32)",
                    "c32 = np.asarray(acc).astype(np.float32) - row_term.astype(np.float32)"
                    " - col_term.astype(np.float32) + const.astype(np.float32)",
                ),
                # the corrections subtracted after scaling: sx * acc - sx * (corrections), in float32
                (
                    "asym_int8_gemm",
                    "return ((c32 * sx32) * sw32).astype(np.float64)",
                    "return ((np.asarray(acc).astype(np.float32) * sx32 - (row_term + col_term - const)"
                    ".astype(np.float32) * sx32) * sw32).astype(np.float64)",
                ),
                # the corrected sum not converted to float32: numpy computes int64 * float32 in float64
                ("asym_int8_gemm", "c32 = corrected.astype(np.float32)", "c32 = corrected"),
                # the epilogue in the other order: the weight's scale first
                ("asym_int8_gemm", "(c32 * sx32) * sw32", "(c32 * sw32) * sx32"),
                # the two scales multiplied together first
                ("asym_int8_gemm", "(c32 * sx32) * sw32", "c32 * (sx32 * sw32)"),
                # the epilogue in float64, rounded to float32 once at the end
                (
                    "asym_int8_gemm",
                    "((c32 * sx32) * sw32).astype(np.float64)",
                    "(c32.astype(np.float64) * sx32 * sw32).astype(np.float32).astype(np.float64)",
                ),
                # the finest granularity that reaches the threshold instead of the coarsest
                ("coarsest_granularity", "reached[0] if reached", "reached[-1] if reached"),
                # whole blocks only: the blocks that overhang an edge dropped
                (
                    "coarsest_granularity",
                    "        for i in range(0, M, br):\n            for j in range(0, K, bc):",
                    "        for i in range(0, M - br + 1, br):\n            for j in range(0, K - bc + 1, bc):",
                ),
                # the naive model: every element errs by step**2 / 12, zeros and tiny values included
                (
                    "coarsest_granularity",
                    "np.where(np.abs(b) < step / 2, b**2, step**2 / 12)",
                    "np.full(b.shape, step**2 / 12)",
                ),
                # the crest-factor rule 6.02 b + 4.77 - 20 log10(amax / rms) per block, averaged over the blocks
                (
                    "coarsest_granularity",
                    "predicted.append(10 * math.log10(signal / noise))",
                    "predicted.append(np.mean([6.02 * 8 + 4.77 - 20 * math.log10("
                    "np.max(np.abs(x[i : i + br, j : j + bc]))"
                    " / math.sqrt(np.mean(x[i : i + br, j : j + bc] ** 2))) for i in range(0, M, br)"
                    " for j in range(0, K, bc) if np.any(x[i : i + br, j : j + bc])]))",
                ),
                # half the model: exact zeros cost nothing, but a nonzero element below half a step is
                # charged step**2 / 12 instead of its own square
                (
                    "coarsest_granularity",
                    "np.where(np.abs(b) < step / 2, b**2, step**2 / 12)",
                    "np.where(b == 0, 0.0, step**2 / 12)",
                ),
                # the cost of an element capped at step**2 / 12: one between step / sqrt(12) and half a
                # step loses its whole square, more than that
                (
                    "coarsest_granularity",
                    "np.where(np.abs(b) < step / 2, b**2, step**2 / 12)",
                    "np.minimum(b**2, step**2 / 12)",
                ),
                # an element below half a step charged b**2 / 3, as if its error were uniform in [0, b]
                (
                    "coarsest_granularity",
                    "np.where(np.abs(b) < step / 2, b**2, step**2 / 12)",
                    "np.where(np.abs(b) < step / 2, b**2 / 3, step**2 / 12)",
                ),
                # an element rounded to 0 thought to cost nothing
                (
                    "coarsest_granularity",
                    "np.where(np.abs(b) < step / 2, b**2, step**2 / 12)",
                    "np.where(np.abs(b) < step / 2, 0.0, step**2 / 12)",
                ),
                # an element thought to round to 0 below a whole step instead of half of one
                ("coarsest_granularity", "np.abs(b) < step / 2", "np.abs(b) < step"),
                # the amax charged nothing (it lands exactly on 127 steps): the model charges every
                # element that does not round to 0 alike
                (
                    "coarsest_granularity",
                    "np.where(np.abs(b) < step / 2, b**2, step**2 / 12)",
                    "np.where(np.abs(b) < step / 2, b**2, np.where(np.abs(b) == np.max(np.abs(b)), 0.0, step**2 / 12))",
                ),
                # measured instead of predicted: the fp32 scale, rounded, the actual squared errors
                (
                    "coarsest_granularity",
                    "np.where(np.abs(b) < step / 2, b**2, step**2 / 12)",
                    "(b - np.rint(b / max(float(np.float32(step)), 2.0**-149))"
                    " * max(float(np.float32(step)), 2.0**-149)) ** 2",
                ),
                # a rounding error up to a whole step: mean square step**2 / 3
                ("coarsest_granularity", "step**2 / 12", "step**2 / 3"),
                # decibels of a power ratio taken as 20 log10
                ("coarsest_granularity", "10 * math.log10(signal / noise)", "20 * math.log10(signal / noise)"),
                # rows and columns swapped: per-row read as per-column, 1x128 as 128x1
                (
                    "coarsest_granularity",
                    "(block_rows, block_cols) in granularities",
                    "(block_cols, block_rows) in granularities",
                ),
                # the tensor's amax for every block: the granularity changes nothing
                ("coarsest_granularity", "step = np.max(np.abs(b)) / 127", "step = np.max(np.abs(x)) / 127"),
                # noise counted once per block instead of once per element
                (
                    "coarsest_granularity",
                    "noise += float(\n"
                    "                    np.sum(\n"
                    "                        np.where(np.abs(b) < step / 2, b**2, step**2 / 12)\n"
                    "                    )\n"
                    "                )",
                    "noise += step**2 / 12",
                ),
                # e4m3 (IEEE-style, max 240) taken for e4m3fn (max 448)
                ("fp8_choice", '("e4m3fn", -6, 3, 448.0, False)', '("e4m3fn", -6, 3, 240.0, True)'),
                # underflow below the smallest normal instead of half the smallest subnormal
                ("fp8_choice", "v <= tiny / 2", "v < 2.0**emin"),
                # underflow below the smallest subnormal instead of half of it
                ("fp8_choice", "v <= tiny / 2", "v < tiny"),
                # the tie at half the smallest subnormal thought to round up to it
                ("fp8_choice", "v <= tiny / 2", "v < tiny / 2"),
                # exact zeros counted as lost
                ("fp8_choice", "nonzero & (v <= tiny / 2)", "(v <= tiny / 2)"),
                # the nonzero values of v, not of x: an x that x / scale flushes to 0 in float64 not counted
                ("fp8_choice", "nonzero & (v <= tiny / 2)", "(v != 0) & (v <= tiny / 2)"),
                # the tolerance as a difference of float fractions: above 1/1000 by a rounding
                (
                    "fp8_choice",
                    '1000 * (lost["e4m3fn"] - lost["e5m2"]) > n',
                    'lost["e4m3fn"] / n - lost["e5m2"] / n > 0.001',
                ),
                (
                    "fp8_choice",
                    '1000 * (lost["e4m3fn"] - lost["e5m2"]) > n',
                    'lost["e4m3fn"] / n > lost["e5m2"] / n + 0.001',
                ),
                (
                    "fp8_choice",
                    '1000 * (lost["e4m3fn"] - lost["e5m2"]) > n',
                    '1000 * lost["e4m3fn"] / n - 1000 * lost["e5m2"] / n > 1',
                ),
                # the tolerance's n counted over v (e5m2's, the loop's last), not x: an x that x / scale
                # flushes to 0 in float64 left out of the nonzero elements
                ("fp8_choice", "n = int(np.sum(nonzero))", "n = int(np.sum(v != 0))"),
                # overflow decided before rounding: past the max, not past the midpoint above it
                ("fp8_choice", "mid = top + 2.0 ** (math.floor(math.log2(top)) - man_bits) / 2", "mid = top"),
                # e5m2's tie at 61440 thought to round down to 57344
                ("fp8_choice", '("e5m2", -14, 2, 57344.0, True)', '("e5m2", -14, 2, 57344.0, False)'),
                # e4m3fn's tie at 464 thought to overflow
                ("fp8_choice", '("e4m3fn", -6, 3, 448.0, False)', '("e4m3fn", -6, 3, 448.0, True)'),
                # the scale's direction inverted: x * scale (Transformer Engine's convention for our scale)
                ("fp8_choice", "v = np.abs(x / scale)", "v = np.abs(x * scale)"),
                # multiplied by a rounded 1 / scale instead of divided by the scale
                ("fp8_choice", "v = np.abs(x / scale)", "v = np.abs(x * (1.0 / scale))"),
                # one scale for both formats: e4m3fn's amax / 448, so e5m2's top binades go unused
                ("fp8_choice", "scale = float(np.float32(amax / top))", "scale = float(np.float32(amax / 448.0))"),
                # the scale flushed to float32's smallest normal, as a kernel with FTZ would: no subnormal scales
                (
                    "fp8_choice",
                    "scale = float(np.float32(amax / top))",
                    "scale = max(float(np.float32(amax / top)), 2.0**-126)",
                ),
                # the scale left in float64, not rounded to float32
                ("fp8_choice", "scale = float(np.float32(amax / top))", "scale = amax / top"),
                # the tolerance forgotten: e5m2 whenever it loses fewer
                ("fp8_choice", '1000 * (lost["e4m3fn"] - lost["e5m2"]) > n', 'lost["e4m3fn"] > lost["e5m2"]'),
                # "over one in a thousand" read as "at least": e5m2 where e4m3fn loses exactly 1/1000
                (
                    "fp8_choice",
                    '1000 * (lost["e4m3fn"] - lost["e5m2"]) > n',
                    '1000 * (lost["e4m3fn"] - lost["e5m2"]) >= n',
                ),
                # chosen by SQNR (a clamping quantizer, rounded to each format's grid) instead of by
                # the values lost
                (
                    "fp8_choice",
                    'choice = (\n        "e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"\n    )',
                    "err = {}\n"
                    '    for f, t, lo, m in (("e4m3fn", 448.0, -6, 3), ("e5m2", 57344.0, -14, 2)):\n'
                    "        s = float(np.float32(amax / t))\n"
                    "        q = np.clip(x / s, -t, t)\n"
                    "        e = np.maximum(np.floor(np.log2(np.maximum(np.abs(q), 2.0**-1074))), lo)\n"
                    "        err[f] = float(np.sum((np.round(q / 2.0 ** (e - m)) * 2.0 ** (e - m) * s - x) ** 2))\n"
                    "    choice = min(err, key=err.get)",
                ),
                # Transformer Engine's order: the base scale rounded to float32 first, the margin
                # applied after (bits lost where amax_h / 448 is a float32 subnormal)
                (
                    "best_margin",
                    "float(np.float32(2.0**margin * amax_h / 448))",
                    "2.0**margin * float(np.float32(amax_h / 448))",
                ),
                # the scale left in float64
                ("best_margin", "float(np.float32(2.0**margin * amax_h / 448))", "2.0**margin * amax_h / 448"),
                # flushed below e4m3fn's smallest subnormal 2**-9 instead of below half of it
                ("best_margin", "math.log2(2.0**-10 * scale)", "math.log2(2.0**-9 * scale)"),
                # the subnormals counted as lost: flushed below the smallest normal 2**-6
                ("best_margin", "math.log2(2.0**-10 * scale)", "math.log2(2.0**-6 * scale)"),
                # e4m3 (IEEE-style, max 240) taken for e4m3fn (max 448): clamped past 240
                ("best_margin", "math.log2(448 * scale)", "math.log2(240 * scale)"),
                # exact zeros counted as flushed
                ("best_margin", "flushed += n * min(", "flushed += zeros + n * min("),
                # the zeros taken among the spread elements: shares of n + zeros
                ("best_margin", "clamped += n * min(", "clamped += (n + zeros) * min("),
                # the shares of a linear spread, not of a spread over binades
                (
                    "best_margin",
                    "            width = math.log2(amax) - math.log2(lo)\n"
                    "            top = (math.log2(amax) - math.log2(448 * scale)) / width",
                    "            width = math.log2(amax) - math.log2(lo)\n"
                    "            top = (amax - 448 * scale) / (amax - lo)",
                ),
                (
                    "best_margin",
                    "bottom = (math.log2(2.0**-10 * scale) - math.log2(lo)) / width",
                    "bottom = (2.0**-10 * scale - lo) / (amax - lo)",
                ),
                # the shares not clipped to [0, 1]: a bound outside [lo, amax] gives negative counts
                ("best_margin", "n * min(max(top, 0.0), 1.0)", "n * top"),
                ("best_margin", "n * min(max(bottom, 0.0), 1.0)", "n * max(bottom, 0.0)"),
                # shares instead of counts: every step weighs the same whatever its size
                ("best_margin", "clamped += n * min(", "clamped += min("),
                # chapter 06's rule: the first margin that clamps nothing, the flushed values ignored
                (
                    "best_margin",
                    "if best is None or clamped + flushed < best[1] + best[2]:",
                    "if best is None or best[1] > 0:",
                ),
                # the clamped values ignored: only the flushed ones counted
                (
                    "best_margin",
                    "if best is None or clamped + flushed < best[1] + best[2]:",
                    "if best is None or flushed < best[2]:",
                ),
                # of equal losses, the largest margin instead of the smallest
                (
                    "best_margin",
                    "if best is None or clamped + flushed < best[1] + best[2]:",
                    "if best is None or clamped + flushed <= best[1] + best[2]:",
                ),
                # of equal losses, the one that clamps fewer (a flushed value thought the lesser harm)
                (
                    "best_margin",
                    "if best is None or clamped + flushed < best[1] + best[2]:",
                    "if best is None or (clamped + flushed, clamped) < (best[1] + best[2], best[1]):",
                ),
                # the loss thought unimodal in the margin: the search stops at the first margin whose loss rises
                (
                    "best_margin",
                    "        if best is None or clamped + flushed < best[1] + best[2]:",
                    "        if best is not None and clamped + flushed > best[1] + best[2]:\n"
                    "            break\n"
                    "        if best is None or clamped + flushed < best[1] + best[2]:",
                ),
                # ... or at the first margin whose loss no longer falls
                (
                    "best_margin",
                    "        if best is None or clamped + flushed < best[1] + best[2]:",
                    "        if best is not None and clamped + flushed >= best[1] + best[2]:\n"
                    "            break\n"
                    "        if best is None or clamped + flushed < best[1] + best[2]:",
                ),
                # the scale's floor of 2**-149 left out: a step whose history is all zeros gets scale 0
                (
                    "best_margin",
                    "scale = max(\n"
                    "                float(np.float32(2.0**margin * amax_h / 448)), 2.0**-149\n"
                    "            )",
                    "scale = float(np.float32(2.0**margin * amax_h / 448)) or 1e-300",
                ),
                # margins up to 15 only
                ("best_margin", "for margin in range(17):", "for margin in range(16):"),
                # the current step's amax in the history: nothing is ever clamped
                (
                    "best_margin",
                    "past = amaxes[max(t - history, 0) : t] or [amaxes[0]]",
                    "past = amaxes[max(t - history + 1, 0) : t + 1]",
                ),
                # the margin as a divisor: 2**-margin of headroom
                ("best_margin", "2.0**margin * amax_h / 448", "amax_h / 2.0**margin / 448"),
                # a history one step too long, or one step too short
                ("best_margin", "amaxes[max(t - history, 0) : t]", "amaxes[max(t - history - 1, 0) : t]"),
                ("best_margin", "amaxes[max(t - history, 0) : t]", "amaxes[max(t - history + 1, 0) : t]"),
                # "most_recent" instead of the history's max
                ("best_margin", "amax_h = max(past)", "amax_h = past[-1]"),
                # Transformer Engine's scale (its q = x * scale) taken for the course's
                (
                    "best_margin",
                    "scale = max(\n"
                    "                float(np.float32(2.0**margin * amax_h / 448)), 2.0**-149\n"
                    "            )",
                    "scale = float(np.float32(448 / max(amax_h, 1e-300) / 2.0**margin))",
                ),
                # no margin at step 0
                ("best_margin", "or [amaxes[0]]", "or [amaxes[0] / 2.0**margin]"),
            ]
        ),
    ),
    ChapterSpec(
        7,
        "ex07_fp8_blocks.ipynb",
        lambda: {
            "math": math,
            "np": np,
            "round_to": round_to,
            "fp8_tensor_core_mm": __import__("nbhelpers.scaled_gemm", fromlist=["x"]).fp8_tensor_core_mm,
            "Recipe": __import__("nbhelpers.recipes", fromlist=["Recipe"]).Recipe,
            "PER_ROW": __import__("nbhelpers.recipes", fromlist=["PER_ROW"]).PER_ROW,
            "PER_COLUMN": __import__("nbhelpers.recipes", fromlist=["PER_COLUMN"]).PER_COLUMN,
        },
        ("mx_exponent_range", "blockwise_scaled_gemm", "largest_promotion_interval", "two_level_scales"),
        17,
        7077,
        tuple(
            [
                # ---- the floor rule (OCP MX v1.0)
                # the top of the range at the next power of two itself, not one float64 step below it
                (
                    "mx_exponent_range",
                    "np.nextafter(np.ldexp(1.0, E + emax_elem + 1), 0.0)",
                    "np.ldexp(1.0, E + emax_elem + 1)",
                ),
                # emax_elem as log2 of the largest value rounded to nearest (448 -> 9, 6 -> 3)
                (
                    "mx_exponent_range",
                    "emax_elem = math.frexp(largest)[1] - 1",
                    "emax_elem = round(math.log2(largest))",
                ),
                # emax_elem as the ceiling of log2 of the largest value (one too large)
                (
                    "mx_exponent_range",
                    "emax_elem = math.frexp(largest)[1] - 1",
                    "emax_elem = math.frexp(largest)[1]",
                ),
                # e4m3 (IEEE-style, max 240, emax 7) taken for e4m3fn (max 448, emax 8)
                ("mx_exponent_range", '"e4m3fn": 448.0', '"e4m3fn": 240.0'),
                # E = -127 reaching down to 0 instead of the smallest positive float64
                ("mx_exponent_range", "smallest = math.ulp(0.0)", "smallest = 0.0"),
                # floor, E = -127 given the same lower end as every other exponent (no clamp)
                (
                    "mx_exponent_range",
                    "lo = np.where(E == -127, smallest, np.ldexp(1.0, E + emax_elem))",
                    "lo = np.ldexp(1.0, E + emax_elem)",
                ),
                # the results flattened (some arrays of exponents are 2-d)
                ("mx_exponent_range", "    return lo, top(E)\n", "    return lo.ravel(), top(E).ravel()\n"),
                # ---- RCEIL
                # no rounding of d: the range ends at elem_max * 2**E
                (
                    "mx_exponent_range",
                    "return largest * (np.ldexp(1.0, k) + half)",
                    "return largest * np.ldexp(1.0, k)",
                ),
                # a whole float32 step of slack instead of half of one
                (
                    "mx_exponent_range",
                    "half = np.ldexp(1.0, np.maximum(k, -126) - 24)",
                    "half = np.ldexp(1.0, np.maximum(k, -126) - 23)",
                ),
                # the halfway quotient taken to round up (ties away): the top one float64 step short
                (
                    "mx_exponent_range",
                    "return largest * (np.ldexp(1.0, k) + half)",
                    "return np.nextafter(largest * (np.ldexp(1.0, k) + half), 0.0)",
                ),
                # float32's relative spacing used among its subnormals too (2**(k - 24) below 2**-126)
                (
                    "mx_exponent_range",
                    "half = np.ldexp(1.0, np.maximum(k, -126) - 24)",
                    "half = np.ldexp(1.0, k - 24)",
                ),
                # float32 subnormals flushed to zero (a GPU's FTZ): every d below 2**-126 gives -127
                (
                    "mx_exponent_range",
                    "    return lo, top(E)\n",
                    "    lo = np.where(E == -126, largest * 2.0**-126, lo)\n"
                    "    hi = np.where(E == -127, np.nextafter(largest * 2.0**-126, 0.0), top(E))\n"
                    "    return lo, hi\n",
                ),
                # the lower end on the top of E - 1's range, not one step above it
                (
                    "mx_exponent_range",
                    "np.nextafter(top(E - 1), np.inf))",
                    "top(E - 1))",
                ),
                # RCEIL, E = -127 given the same lower end as every other exponent (no clamp)
                (
                    "mx_exponent_range",
                    "lo = np.where(E == -127, smallest, np.nextafter(top(E - 1), np.inf))",
                    "lo = np.nextafter(top(E - 1), np.inf)",
                ),
                # the floor rule's range for RCEIL shifted by one: ceil(log2 amax) - emax_elem
                (
                    "mx_exponent_range",
                    "    # E takes the quotients d in (2**(E - 1), 2**E]\n",
                    "    e_max = math.frexp(largest)[1] - 1\n"
                    "    lo = np.nextafter(np.ldexp(1.0, E + e_max - 1), np.inf)\n"
                    "    return np.where(E == -127, smallest, lo), np.ldexp(1.0, E + e_max)\n",
                ),
                # round(log2 d) instead of its ceiling: the range of d is [2**(E - 1/2), 2**(E + 1/2))
                (
                    "mx_exponent_range",
                    "    # E takes the quotients d in (2**(E - 1), 2**E]\n",
                    "    lo, hi = largest * np.exp2(E - 0.5), largest * np.exp2(E + 0.5)\n"
                    "    return np.where(E == -127, smallest, lo), hi\n",
                ),
                # ---- the block-scaled GEMM's promotion (float64 accumulation and either multiply
                # order pass: tests/test_exercises_ch07.py)
                # K-varying scales applied once in the epilogue: the mean of each row's and column's block scales
                (
                    "blockwise_scaled_gemm",
                    "acc = acc + P[b].astype(np.float32) * scale\n    return acc.astype(np.float64)",
                    "acc = acc + P[b].astype(np.float32)\n    return (acc * sA32.mean(axis=1, keepdims=True)"
                    " * sB_cols.mean(axis=0, keepdims=True)).astype(np.float64)",
                ),
                # ... or the first K-block's scales
                (
                    "blockwise_scaled_gemm",
                    "acc = acc + P[b].astype(np.float32) * scale\n    return acc.astype(np.float64)",
                    "acc = acc + P[b].astype(np.float32)\n"
                    "    return (acc * (sA32[:, :1] * sB_cols[:1, :])).astype(np.float64)",
                ),
                # ... or the sum of each row's and column's block scales, over nk
                (
                    "blockwise_scaled_gemm",
                    "acc = acc + P[b].astype(np.float32) * scale\n    return acc.astype(np.float64)",
                    "acc = acc + P[b].astype(np.float32)\n    return (acc * sA32.sum(axis=1, keepdims=True)"
                    " * sB_cols.sum(axis=0, keepdims=True) / nk).astype(np.float64)",
                ),
                # the first column block's scale for every column
                (
                    "blockwise_scaled_gemm",
                    "np.repeat(np.asarray(sB), block_n, axis=1)[:, :N]",
                    "np.repeat(np.asarray(sB)[:, :1], N, axis=1)",
                ),
                # column blocks interleaved (np.tile) instead of contiguous
                (
                    "blockwise_scaled_gemm",
                    "np.repeat(np.asarray(sB), block_n, axis=1)[:, :N]",
                    "np.tile(np.asarray(sB), (1, block_n))[:, :N]",
                ),
                # column blocks taken as even shares of N (N / nn wide), not block_n wide
                (
                    "blockwise_scaled_gemm",
                    "np.repeat(np.asarray(sB), block_n, axis=1)[:, :N]",
                    "np.asarray(sB)[:, np.arange(N) * np.asarray(sB).shape[1] // N]",
                ),
                # A's scale taken along the columns (sA[n, b] for output (m, n)): square outputs broadcast
                (
                    "blockwise_scaled_gemm",
                    "scale = sA32[:, b : b + 1] * sB_cols[b : b + 1, :]",
                    "scale = sA32[:, b][None, :] * sB_cols[b : b + 1, :]",
                ),
                # the scales of K-block b applied to K-block b + 1 (the first block takes its own)
                (
                    "blockwise_scaled_gemm",
                    "scale = sA32[:, b : b + 1] * sB_cols[b : b + 1, :]",
                    "b0 = max(b - 1, 0)\n        scale = sA32[:, b0 : b0 + 1] * sB_cols[b0 : b0 + 1, :]",
                ),
                # the last K-block dropped
                ("blockwise_scaled_gemm", "for b in range(nk):", "for b in range(nk - 1):"),
                # A's scale applied twice
                (
                    "blockwise_scaled_gemm",
                    "scale = sA32[:, b : b + 1] * sB_cols",
                    "scale = sA32[:, b : b + 1] ** 2 * sB_cols",
                ),
                # divided by the scales (the inv_scale convention)
                (
                    "blockwise_scaled_gemm",
                    "acc = acc + P[b].astype(np.float32) * scale",
                    "acc = acc + P[b].astype(np.float32) / scale",
                ),
                # an fp16 accumulator
                (
                    "blockwise_scaled_gemm",
                    "acc = acc + P[b].astype(np.float32) * scale",
                    "acc = (acc + P[b].astype(np.float32) * scale).astype(np.float16)",
                ),
                # the scales rounded to bf16 before they multiply
                (
                    "blockwise_scaled_gemm",
                    "scale = sA32[:, b : b + 1] * sB_cols[b : b + 1, :]",
                    "scale = round_to(sA32[:, b : b + 1] * sB_cols[b : b + 1, :], 'bf16')",
                ),
                # ---- the promotion interval
                # the smallest interval within the bound instead of the largest (the first is always exact)
                ("largest_promotion_interval", "            best = N\n", "            best = min(best, N)\n"),
                # off by a factor of 2: the first interval past the bound
                ("largest_promotion_interval", "            best = N\n", "            best = 2 * N\n"),
                # K itself never tried
                ("largest_promotion_interval", "while N <= K:", "while N < K:"),
                # the alignment taken from the sum once the group's first product is in (S + p), not
                # from the sum carried in: a sum one product below a binade is cut one bit more
                (
                    "largest_promotion_interval",
                    "E = max(P, S).bit_length() - 1",
                    "E = max(P, S + P).bit_length() - 1",
                ),
                # the alignment taken from the group's exact sum instead of its largest magnitude:
                # the first groups of a narrow accumulator lose bits they keep
                (
                    "largest_promotion_interval",
                    "E = max(P, S).bit_length() - 1",
                    "E = max(group * P, S).bit_length() - 1",
                ),
                # the running sum not cut to the group's quantum: only the products lose their low bits
                (
                    "largest_promotion_interval",
                    "S, c = (S >> j) << j, (P >> j) << j",
                    "c = (P >> j) << j",
                ),
                # the product cut to its own leading bit, not the sum's: p never loses a bit
                (
                    "largest_promotion_interval",
                    "S, c = (S >> j) << j, (P >> j) << j",
                    "S, c = (S >> j) << j, P",
                ),
                # each product rounded to nearest instead of cut toward zero
                (
                    "largest_promotion_interval",
                    "S, c = (S >> j) << j, (P >> j) << j",
                    "S, c = (S >> j) << j, ((P + (1 << (j - 1))) >> j) << j",
                ),
                # acc_bits kept below the leading bit (acc_bits + 1 with it)
                ("largest_promotion_interval", "j = E - (acc_bits - 1)", "j = E - acc_bits"),
                # one bit too few: the leading bit counted twice
                ("largest_promotion_interval", "j = E - (acc_bits - 1)", "j = E - (acc_bits - 2)"),
                # chapter 07's 14 bits whatever acc_bits says
                ("largest_promotion_interval", "j = E - (acc_bits - 1)", "j = E - 13"),
                # promotion every N groups instead of every N products
                ("largest_promotion_interval", "narrow_sum(N // group)", "narrow_sum(N)"),
                # chapter 07's fused group of 32 whatever group says
                ("largest_promotion_interval", "step = group * c", "step = 32 * c"),
                # the groups of a binade counted with floor, and the next binade's cut applied to
                # the sum although it has not reached it: the last group of each binade aligned too high
                (
                    "largest_promotion_interval",
                    "k = min(n - done, -(-((1 << (E + 1)) - S) // step))",
                    "k = min(n - done, ((1 << (E + 1)) - S) // step + 1)",
                ),
                # the error relative to the narrow sum instead of the exact N p
                (
                    "largest_promotion_interval",
                    "* b <= a * N * P",
                    "* b <= a * max(narrow_sum(N // group), 1)",
                ),
                # ---- NVFP4
                # ---- two-level scales
                # NVFP4's 6 for every element (the chapter's formula as printed)
                (
                    "two_level_scales",
                    '"e2m3fn": (7.5, 6),\n        "e3m2fn": (28.0, 6),',
                    '"e2m3fn": (6.0, 6),\n        "e3m2fn": (6.0, 6),',
                ),
                # the tensor scale without the element's largest value (amax / 448)
                ("two_level_scales", "np.abs(x).max() / (448 * elem_max)", "np.abs(x).max() / 448"),
                # the tensor scale without e4m3's 448 (amax / elem_max): the block scales squeezed below 1
                ("two_level_scales", "np.abs(x).max() / (448 * elem_max)", "np.abs(x).max() / elem_max"),
                # the block scale without the element's largest value: amax_b / s_t
                ("two_level_scales", "round_to(amax_b / elem_max / s_t,", "round_to(amax_b / s_t,"),
                # a block's largest value instead of its largest magnitude
                ("two_level_scales", "padded[:M, :K] = np.abs(x)", "padded[:M, :K] = x"),
                # the tensor scale left in float64
                (
                    "two_level_scales",
                    "float(np.float32(np.abs(x).max() / (448 * elem_max)))",
                    "np.abs(x).max() / (448 * elem_max)",
                ),
                # the block scale rounded down instead of to nearest
                ("two_level_scales", "saturate=True)", 'saturate=True, rounding="toward_zero")'),
                # the block scales rounded through float32 (a float32 cast; ml_dtypes 0.6.0's cast of
                # a float64 does the same): a quotient a hair from a tie lands on it, goes to even
                (
                    "two_level_scales",
                    'round_to(amax_b / elem_max / s_t, "e4m3fn", saturate=True)',
                    "np.minimum(amax_b / elem_max / s_t, 448.0).astype(np.float32)"
                    '.astype(np.dtype("float8_e4m3fn")).astype(float)',
                ),
                # no saturation: a quotient past 448 becomes NaN
                ("two_level_scales", "saturate=True", "saturate=False"),
                # no floor at 2**-9: zero blocks get a zero scale
                (
                    "two_level_scales",
                    'np.maximum(\n        round_to(amax_b / elem_max / s_t, "e4m3fn", saturate=True), 2.0**-9\n    )',
                    'round_to(amax_b / elem_max / s_t, "e4m3fn", saturate=True)',
                ),
                # the floor at e4m3's smallest normal 2**-6 (torchao's) instead of its smallest value
                ("two_level_scales", "saturate=True), 2.0**-9", "saturate=True), 2.0**-6"),
                # NVFP4's 1 x 16 along a row whatever the block: block_rows ignored
                ("two_level_scales", "br, bc = block_rows, block_cols", "br, bc = 1, block_cols"),
                # the block's rows and columns swapped
                ("two_level_scales", "br, bc = block_rows, block_cols", "br, bc = block_cols, block_rows"),
                # NVFP4's 4 bits per element whatever the element
                ("two_level_scales", "bits = elem_bits * M * K", "bits = 4 * M * K"),
                # the elements an overhanging block lacks counted as stored
                ("two_level_scales", "bits = elem_bits * M * K", "bits = elem_bits * (gm * br) * (gk * bc)"),
                # the bytes without the tensor scale
                ("two_level_scales", "8 * gm * gk + 32", "8 * gm * gk"),
                # the bytes with the overhanging blocks dropped
                ("two_level_scales", "8 * gm * gk + 32", "8 * (M // br) * (K // bc) + 32"),
                # a scale for every row of a block (the layout a GEMM reads 16 x 16 blocks in) counted as stored
                ("two_level_scales", "8 * gm * gk + 32", "8 * M * gk + 32"),
            ]
        ),
    ),
    ChapterSpec(
        8,
        "ex08_gpu_memory.ipynb",
        lambda: {
            "np": np,
            "DEVICE": __import__("nbhelpers.device", fromlist=["setup_device"]).setup_device(verbose=False).device,
            "torch": __import__("torch"),
            "triton": __import__("triton"),
            "tl": __import__("triton.language", fromlist=["dot"]),
        },
        ("stream_times", "transpose_tiles", "trace_sectors"),
        10,
        8088,
        tuple(
            [
                # a launch that returns when its kernel is done (what the interpreter does)
                (
                    "stream_times",
                    "ends.append(max(host, last) + op[1])",
                    "ends.append(max(host, last) + op[1])\n            host = ends[-1]",
                ),
                # an event recorded before any launch stamped 0, not the host's time
                ("stream_times", "events.append(max(host, last))", "events.append(max(host, last) if ends else 0)"),
                # kernels of one stream overlapping: each starts once queued, whatever runs
                ("stream_times", "ends.append(max(host, last) + op[1])", "ends.append(host + op[1])"),
                # the kernel starts as its launch begins, the launch's cost not waited for
                (
                    "stream_times",
                    "ends.append(max(host, last) + op[1])",
                    "ends.append(max(host - launch_us, last) + op[1])",
                ),
                # the launch costs the host nothing
                ("stream_times", "            host += launch_us\n", ""),
                # an event stamped when the host records it
                ("stream_times", "events.append(max(host, last))", "events.append(host)"),
                # an event stamped when the last kernel ends, even if recorded later
                ("stream_times", "events.append(max(host, last))", "events.append(last)"),
                # a queue without end: a launch never waits
                ("stream_times", "if len(ends) >= depth:", "if False:"),
                # a full queue waits for every kernel, not the oldest
                ("stream_times", "host = max(host, ends[len(ends) - depth])", "host = max(host, last)"),
                # the queue one kernel longer than depth
                (
                    "stream_times",
                    "if len(ends) >= depth:\n"
                    "                # the queue is full until kernel k - depth is done\n"
                    "                host = max(host, ends[len(ends) - depth])",
                    "if len(ends) > depth:\n                host = max(host, ends[len(ends) - depth - 1])",
                ),
                # the full queue waits for the newest kernel, not the oldest
                ("stream_times", "ends[len(ends) - depth]", "ends[-1]"),
                # a synchronize that sets the clock to the stream's end, even if the host is later
                (
                    "stream_times",
                    'elif op[0] == "sync":\n            host = max(host, last)',
                    'elif op[0] == "sync":\n            host = last',
                ),
                # the clock read after the last kernel (as if every reading synchronized)
                ("stream_times", "clocks.append(host)", "clocks.append(max(host, last))"),
                # read down the columns of x, written along the rows of out: loads uncoalesced
                (
                    "transpose_tiles",
                    "    tile = tl.load(x_ptrs, mask=mask)\n",
                    "    tile = tl.trans(tl.load(tl.trans(x_ptrs), mask=tl.trans(mask)))\n",
                ),
                # read along the rows of x, written down the columns of out: stores uncoalesced
                (
                    "transpose_tiles",
                    "tl.store(out_ptrs, tl.trans(tile), mask=tl.trans(mask))",
                    "tl.store(tl.trans(out_ptrs), tile, mask=mask)",
                ),
                # the store unmasked
                (
                    "transpose_tiles",
                    "tl.store(out_ptrs, tl.trans(tile), mask=tl.trans(mask))",
                    "tl.store(out_ptrs, tl.trans(tile))",
                ),
                # the load unmasked (the store masked)
                ("transpose_tiles", "tl.load(x_ptrs, mask=mask)", "tl.load(x_ptrs)"),
                # the rows masked, the columns not
                (
                    "transpose_tiles",
                    "mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
                    "mask = (offs_m[:, None] < M) & (offs_n[None, :] >= 0)",
                ),
                # the columns masked, the rows not
                (
                    "transpose_tiles",
                    "mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
                    "mask = (offs_m[:, None] >= 0) & (offs_n[None, :] < N)",
                ),
                # off by one: row M and column N copied too
                (
                    "transpose_tiles",
                    "mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
                    "mask = (offs_m[:, None] <= M) & (offs_n[None, :] <= N)",
                ),
                # x's rows taken as N elements apart: the padding ignored
                ("transpose_tiles", "offs_m[:, None] * stride_xm", "offs_m[:, None] * N"),
                # out's rows taken as M elements apart
                ("transpose_tiles", "offs_n[:, None] * stride_om", "offs_n[:, None] * M"),
                # out addressed with x's strides
                (
                    "transpose_tiles",
                    "offs_n[:, None] * stride_om + offs_m[None, :] * stride_on",
                    "offs_n[:, None] * stride_xm + offs_m[None, :] * stride_xn",
                ),
                # out's two strides swapped: a pointer far outside out, stopped by the watch
                (
                    "transpose_tiles",
                    "offs_n[:, None] * stride_om + offs_m[None, :] * stride_on",
                    "offs_n[:, None] * stride_on + offs_m[None, :] * stride_om",
                ),
                # out's row stride taken as bytes (times the element size): a pointer far outside
                # out, stopped by the watch before it lands
                ("transpose_tiles", "offs_n[:, None] * stride_om", "offs_n[:, None] * stride_om * 4096"),
                # the row tiles BLOCK_N apart
                ("transpose_tiles", "tl.program_id(0) * BLOCK_M", "tl.program_id(0) * BLOCK_N"),
                # the program ids swapped: program (p, q) on rows q and columns p
                (
                    "transpose_tiles",
                    "offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)\n"
                    "    offs_n = tl.program_id(1) * BLOCK_N",
                    "offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)\n"
                    "    offs_n = tl.program_id(0) * BLOCK_N",
                ),
                # the tile loaded twice (a second load left in)
                (
                    "transpose_tiles",
                    "    tile = tl.load(x_ptrs, mask=mask)\n",
                    "    tile = tl.load(x_ptrs, mask=mask)\n    tile = tl.load(x_ptrs, mask=mask)\n",
                ),
                # a loop over the tile's rows: each row read along x, written down a column of out
                (
                    "transpose_tiles",
                    "    tile = tl.load(x_ptrs, mask=mask)\n"
                    "    # written along the rows of out: (BLOCK_N, BLOCK_M), the tile turned\n"
                    "    out_ptrs = (\n"
                    "        out_ptr + offs_n[:, None] * stride_om + offs_m[None, :] * stride_on\n"
                    "    )\n"
                    "    tl.store(out_ptrs, tl.trans(tile), mask=tl.trans(mask))\n",
                    "    for r in tl.static_range(BLOCK_M):\n"
                    "        i = tl.program_id(0) * BLOCK_M + r\n"
                    "        m = (i < M) & (offs_n < N)\n"
                    "        v = tl.load(x_ptr + i * stride_xm + offs_n * stride_xn, mask=m)\n"
                    "        tl.store(out_ptr + offs_n * stride_om + i * stride_on, v, mask=m)\n",
                ),
                # one sector per access: straddling ignored
                (
                    "trace_sectors",
                    "range(first // sector, last // sector + 1)",
                    "range(first // sector, first // sector + 1)",
                ),
                # 128-byte lines counted instead of 32-byte sectors
                ("trace_sectors", "sector = 32", "sector = 128"),
                # only the sectors of an access's first and last bytes: those between left out
                (
                    "trace_sectors",
                    "sectors.update(range(first // sector, last // sector + 1))",
                    "sectors.update({first // sector, last // sector})",
                ),
                # the bytes asked for counted per thread, repeated and overlapping bytes again
                (
                    "trace_sectors",
                    "len(useful) / (sector * len(sectors))",
                    "len(addresses) * access_bytes / (sector * len(sectors))",
                ),
                # distinct addresses counted instead of distinct sectors
                ("trace_sectors", "return len(sectors),", "return len(set(map(int, addresses))),"),
                # the addresses cut to 32 bits: accesses 4 GiB apart taken for the same sectors
                ("trace_sectors", "for a in addresses:", "for a in addresses.astype(np.uint32):"),
                ("trace_sectors", "first = int(a)", "first = int(a) & 0xFFFFFFFF"),
                # misalignment forgotten: the lowest address taken as a sector boundary (base 0)
                ("trace_sectors", "first = int(a)", "first = int(a) - int(min(addresses))"),
            ]
        ),
    ),
    ChapterSpec(
        9,
        "ex09_gemm_kernels.ipynb",
        lambda: {
            "np": np,
            "DEVICE": __import__("nbhelpers.device", fromlist=["setup_device"]).setup_device(verbose=False).device,
            "torch": __import__("torch"),
            "triton": __import__("triton"),
            "tl": __import__("triton.language", fromlist=["dot"]),
        },
        ("split_k_matmul", "swap_ab_epilogue", "register_budget"),
        12,
        9099,
        tuple(
            [
                # --- split_k_matmul: the runs of K steps
                # every program given at least one step (wrong with 2 or more steps for more programs)
                ("split_k_matmul", "per = steps // SPLITS", "per = tl.maximum(steps // SPLITS, 1)"),
                # the longer runs last, not first
                (
                    "split_k_matmul",
                    "first = s * per + tl.minimum(s, extra)",
                    "first = s * per + tl.maximum(s - (SPLITS - extra), 0)",
                ),
                # ... with the same lengths as the right answer: the longer runs last
                (
                    "split_k_matmul",
                    "last = first + per + tl.where(s < extra, 1, 0)",
                    "last = first + per + tl.where(s >= SPLITS - extra, 1, 0)",
                ),
                # the remainder all to the last program
                (
                    "split_k_matmul",
                    "first = s * per + tl.minimum(s, extra)\n    last = first + per + tl.where(s < extra, 1, 0)",
                    "first = s * per\n    last = tl.where(s == SPLITS - 1, steps, first + per)",
                ),
                # runs of cdiv(steps, SPLITS): the last ones short or empty
                (
                    "split_k_matmul",
                    "first = s * per + tl.minimum(s, extra)\n    last = first + per + tl.where(s < extra, 1, 0)",
                    "first = s * tl.cdiv(steps, SPLITS)\n    last = tl.minimum(first + tl.cdiv(steps, SPLITS), steps)",
                ),
                # runs of floor(steps / SPLITS): the remainder dropped
                ("split_k_matmul", "last = first + per + tl.where(s < extra, 1, 0)", "last = first + per"),
                # the remainder forgotten in the start: runs overlap
                ("split_k_matmul", "first = s * per + tl.minimum(s, extra)", "first = s * per"),
                # the remainder counted once for all earlier programs (s instead of min(s, extra))
                ("split_k_matmul", "first = s * per + tl.minimum(s, extra)", "first = s * per + s"),
                # the last run one step short (the step that holds K's ragged end left out)
                ("split_k_matmul", "steps = tl.cdiv(K, BLOCK_K)", "steps = K // BLOCK_K"),
                # the elements of K shared out, not the steps: cdiv(K, SPLITS)-long ranges from k = 0
                (
                    "split_k_matmul",
                    "for step in range(first, last):\n        k = step * BLOCK_K + offs_k",
                    "for step in range(first, last):\n"
                    "        k = s * tl.cdiv(K, SPLITS) + (step - first) * BLOCK_K + offs_k",
                ),
                # every program sums from the start of K
                ("split_k_matmul", "k = step * BLOCK_K + offs_k", "k = (step - first) * BLOCK_K + offs_k"),
                # the end exclusive twice: the run one step short
                ("split_k_matmul", "for step in range(first, last):", "for step in range(first, last - 1):"),
                # no mask along K: the ragged last step reads past K
                ("split_k_matmul", "mask=(offs_m[:, None] < M) & (k[None, :] < K),", "mask=offs_m[:, None] < M,"),
                ("split_k_matmul", "mask=(k[:, None] < K) & (offs_n[None, :] < N),", "mask=offs_n[None, :] < N,"),
                # the K masks only: rows past M of A and columns past N of B are read (they feed
                # only accumulator elements the masked store drops: the launcher's load watch sees it)
                ("split_k_matmul", "mask=(offs_m[:, None] < M) & (k[None, :] < K),", "mask=k[None, :] < K,"),
                ("split_k_matmul", "mask=(k[:, None] < K) & (offs_n[None, :] < N),", "mask=k[:, None] < K,"),
                # the accumulator in another type: the interpreter promotes it at the first
                # addition, a GPU's compiler refuses the loop (the source audit names it)
                (
                    "split_k_matmul",
                    "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                    "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)",
                ),
                ("split_k_matmul", "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", "acc = 0.0"),
                # the masked loads without other=: the interpreter gives zeros, a GPU undefined lanes
                (
                    "split_k_matmul",
                    "mask=(offs_m[:, None] < M) & (k[None, :] < K),\n            other=0.0,",
                    "mask=(offs_m[:, None] < M) & (k[None, :] < K),",
                ),
                (
                    "split_k_matmul",
                    "mask=(k[:, None] < K) & (offs_n[None, :] < N),\n            other=0.0,",
                    "mask=(k[:, None] < K) & (offs_n[None, :] < N),\n            other=None,",
                ),
                # the same, hidden behind arithmetic on the unfilled load
                (
                    "split_k_matmul",
                    "mask=(offs_m[:, None] < M) & (k[None, :] < K),\n            other=0.0,\n        )\n",
                    "mask=(offs_m[:, None] < M) & (k[None, :] < K),\n        )\n        a = a * 1.0\n",
                ),
                # the unfilled loads converted, scaled or turned inside the dot call itself
                _split_k(
                    _A_UNFILLED,
                    _B_UNFILLED,
                    (_DOT, 'acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")'),
                ),
                _split_k(_A_UNFILLED, (_DOT, 'acc += tl.dot(a * 1.0, b, input_precision="ieee")')),
                _split_k(_B_UNFILLED, (_DOT, 'acc += tl.dot(a, tl.trans(tl.trans(b)), input_precision="ieee")')),
                # ... in an annotated assignment
                _split_k(("        a = tl.load(", "        a: tl.tensor = tl.load("), _A_UNFILLED),
                # ... in a @triton.jit helper the kernel calls
                _split_k(
                    ("        b = tl.load(", "        b = load_tile("),
                    (_B_FILLED, "(k[:, None] < K) & (offs_n[None, :] < N),"),
                    after="\n\n\n@triton.jit\ndef load_tile(ptrs, mask):\n    return tl.load(ptrs, mask=mask)\n",
                ),
                # the dot at TF32 in a @triton.jit helper the kernel calls
                _split_k(
                    (_DOT, "acc = mma(acc, a, b)"),
                    after="\n\n\n@triton.jit\ndef mma(acc, a, b):\n    return acc + tl.dot(a, b)\n",
                ),
                # the accumulator a Python float or float16, added to by assignment
                _split_k((_ACC, "acc = 0.0"), (_DOT, 'acc = acc + tl.dot(a, b, input_precision="ieee")')),
                _split_k(
                    (_ACC, _ACC.replace("float32", "float16")),
                    (_DOT, 'acc = acc + tl.dot(a, b, input_precision="ieee")'),
                ),
                # A's strides swapped (A read transposed)
                (
                    "split_k_matmul",
                    "offs_m[:, None] * stride_am + k[None, :] * stride_ak",
                    "offs_m[:, None] * stride_ak + k[None, :] * stride_am",
                ),
                # A's stride along K left out (A taken as contiguous along K): right by rows only
                ("split_k_matmul", "k[None, :] * stride_ak", "k[None, :]"),
                # B's column stride left out: right by rows only
                ("split_k_matmul", "offs_n[None, :] * stride_bn,", "offs_n[None, :],"),
                # the accumulator overwritten, not accumulated
                (
                    "split_k_matmul",
                    'acc += tl.dot(a, b, input_precision="ieee")',
                    'acc = tl.dot(a, b, input_precision="ieee")',
                ),
                # tl.dot left at its default precision, or TF32 asked for: TF32 operands on a GPU
                ("split_k_matmul", 'acc += tl.dot(a, b, input_precision="ieee")', "acc += tl.dot(a, b)"),
                ("split_k_matmul", 'input_precision="ieee"', 'input_precision="tf32"'),
                ("split_k_matmul", 'input_precision="ieee"', "allow_tf32=True"),
                # the product computed on the host through the loaded values' numpy data
                (
                    "split_k_matmul",
                    'acc += tl.dot(a, b, input_precision="ieee")',
                    'acc += tl.dot(a, b, input_precision="ieee") * (a.handle.data.size > 0)',
                ),
                # --- swap_ab_epilogue: the split-K sum, then the swapped epilogue
                # the last partial tile left out
                ("swap_ab_epilogue", "for s in range(1, S):", "for s in range(1, S - 1):"),
                # one partial tile too many (the NaN slice after them read)
                ("swap_ab_epilogue", "for s in range(1, S):", "for s in range(1, S + 1):"),
                # the first partial tile added twice
                ("swap_ab_epilogue", "for s in range(1, S):", "for s in range(0, S):"),
                # the partial tiles added in reverse order
                (
                    "swap_ab_epilogue",
                    "acc = tl.load(p_ptrs, mask=tile_mask, other=0.0)\n"
                    "    for s in range(1, S):  # in order of s: the sum's rounding is fixed\n"
                    "        acc += tl.load(p_ptrs + s * stride_ps, mask=tile_mask, other=0.0)",
                    "acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)\n"
                    "    for s in range(S - 1, -1, -1):\n"
                    "        acc += tl.load(p_ptrs + s * stride_ps, mask=tile_mask, other=0.0)",
                ),
                # pairwise: the odd partial tiles summed apart, then added
                (
                    "swap_ab_epilogue",
                    "acc = tl.load(p_ptrs, mask=tile_mask, other=0.0)\n"
                    "    for s in range(1, S):  # in order of s: the sum's rounding is fixed\n"
                    "        acc += tl.load(p_ptrs + s * stride_ps, mask=tile_mask, other=0.0)",
                    "acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)\n"
                    "    odd = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)\n"
                    "    for s in range(0, S, 2):\n"
                    "        acc += tl.load(p_ptrs + s * stride_ps, mask=tile_mask, other=0.0)\n"
                    "    for s in range(1, S, 2):\n"
                    "        odd += tl.load(p_ptrs + s * stride_ps, mask=tile_mask, other=0.0)\n"
                    "    acc += odd",
                ),
                # summed in float64, rounded once in the store
                (
                    "swap_ab_epilogue",
                    "acc = tl.load(p_ptrs, mask=tile_mask, other=0.0)\n",
                    "acc = tl.load(p_ptrs, mask=tile_mask, other=0.0).to(tl.float64)\n",
                ),
                # the partial tiles taken as packed one after another (stride N * M between them)
                ("swap_ab_epilogue", "p_ptrs + s * stride_ps", "p_ptrs + s * N * M"),
                # the stride between partial tiles taken as a row's
                ("swap_ab_epilogue", "p_ptrs + s * stride_ps", "p_ptrs + s * stride_pn"),
                # each partial tile scaled, then added
                (
                    "swap_ab_epilogue",
                    "    c = (acc * sa[None, :]) * sb[:, None]\n",
                    "    c = (tl.load(p_ptrs, mask=tile_mask, other=0.0) * sa[None, :]) * sb[:, None]\n"
                    "    for s in range(1, S):\n"
                    "        p = tl.load(p_ptrs + s * stride_ps, mask=tile_mask, other=0.0)\n"
                    "        c += (p * sa[None, :]) * sb[:, None]\n",
                ),
                # the store unmasked: the tiles' lanes past C's edge written too (the launcher
                # returns only C's view; the NaN padding around it shows the stray stores)
                ("swap_ab_epilogue", "        c,\n        mask=tile_mask,\n    )", "        c,\n    )"),
                # the tile stored as it is, not transposed: C[n, m] written where C[m, n] belongs
                (
                    "swap_ab_epilogue",
                    "c_ptr + offs_m[None, :] * stride_cm + offs_n[:, None] * stride_cn",
                    "c_ptr + offs_n[:, None] * stride_cm + offs_m[None, :] * stride_cn",
                ),
                # C stored with the partial tiles' strides (as if C were laid out like C^T)
                (
                    "swap_ab_epilogue",
                    "offs_m[None, :] * stride_cm + offs_n[:, None] * stride_cn",
                    "offs_m[None, :] * stride_pm + offs_n[:, None] * stride_pn",
                ),
                # C's column stride taken as 1 in the store: right by rows only
                ("swap_ab_epilogue", "offs_n[:, None] * stride_cn,\n        c,", "offs_n[:, None],\n        c,"),
                # the scales on the axes of the unswapped GEMM (A's along rows, B's along columns)
                (
                    "swap_ab_epilogue",
                    "c = (acc * sa[None, :]) * sb[:, None]",
                    "c = (acc * sa[:, None]) * sb[None, :]",
                ),
                # the two scales multiplied together first
                (
                    "swap_ab_epilogue",
                    "c = (acc * sa[None, :]) * sb[:, None]",
                    "c = acc * (sa[None, :] * sb[:, None])",
                ),
                # the scale of B applied first
                (
                    "swap_ab_epilogue",
                    "c = (acc * sa[None, :]) * sb[:, None]",
                    "c = (acc * sb[:, None]) * sa[None, :]",
                ),
                # the stride ignored: a per-tensor scale read as if there were one per row
                ("swap_ab_epilogue", "sa = tl.load(sa_ptr + offs_m * stride_sa,", "sa = tl.load(sa_ptr + offs_m,"),
                # divided by the scales (inv_scale taken for scale)
                (
                    "swap_ab_epilogue",
                    "c = (acc * sa[None, :]) * sb[:, None]",
                    "c = (acc / sa[None, :]) / sb[:, None]",
                ),
                # only the scales of A applied
                ("swap_ab_epilogue", "c = (acc * sa[None, :]) * sb[:, None]", "c = acc * sa[None, :]"),
                # the scales loaded unmasked: past the last token (they scale only lanes the store drops)
                (
                    "swap_ab_epilogue",
                    "sa = tl.load(sa_ptr + offs_m * stride_sa, mask=offs_m < M, other=0.0)",
                    "sa = tl.load(sa_ptr + offs_m * stride_sa)",
                ),
                # the partial tiles loaded unmasked
                ("swap_ab_epilogue", "acc = tl.load(p_ptrs, mask=tile_mask, other=0.0)", "acc = tl.load(p_ptrs)"),
                # B's scales read one per column, the groups ignored (as in the unswapped kernel)
                ("swap_ab_epilogue", _SB, "sb_ptr + offs_n * stride_sb"),
                # the stride between group scales left out: right by columns only
                ("swap_ab_epilogue", _SB, "sb_ptr + offs_n // group_n"),
                # the stride multiplied in before the division
                ("swap_ab_epilogue", _SB, "sb_ptr + offs_n * stride_sb // group_n"),
                # the group rounded up: feature n in group cdiv(n, group_n)
                ("swap_ab_epilogue", _SB, "sb_ptr + tl.cdiv(offs_n, group_n) * stride_sb"),
                # the group counted from 1: (n + 1) // group_n
                ("swap_ab_epilogue", _SB, "sb_ptr + ((offs_n + 1) // group_n) * stride_sb"),
                # the position inside the group taken for the group
                ("swap_ab_epilogue", _SB, "sb_ptr + (offs_n % group_n) * stride_sb"),
                # group_n taken as the number of groups: features cut into group_n groups
                ("swap_ab_epilogue", _SB, "sb_ptr + (offs_n // tl.cdiv(N, group_n)) * stride_sb"),
                # one scale per tile, its first feature's group: a group that starts inside it missed
                (
                    "swap_ab_epilogue",
                    _SB,
                    "sb_ptr + (tl.program_id(axis=0) * BLOCK_N // group_n + 0 * offs_n) * stride_sb",
                ),
                # the tile's number taken for the group (groups assumed BLOCK_N wide)
                ("swap_ab_epilogue", _SB, "sb_ptr + (tl.program_id(axis=0) + 0 * offs_n) * stride_sb"),
                # B's first scale for every feature (per tensor)
                ("swap_ab_epilogue", _SB, "sb_ptr + 0 * offs_n"),
                # the group scales loaded unmasked: past the last group for the lanes past N
                (
                    "swap_ab_epilogue",
                    "        sb_ptr + (offs_n // group_n) * stride_sb,\n        mask=offs_n < N,\n        other=0.0,\n",
                    "        sb_ptr + (offs_n // group_n) * stride_sb,\n",
                ),
                # --- register_budget: the inverse of the occupancy
                # not rounded down to a multiple of 8
                ("register_budget", "16384 // per_sub // 32 // 8 * 8", "16384 // per_sub // 32"),
                # one pool of 65,536 registers, not 4 sub-partitions
                ("register_budget", "16384 // per_sub // 32 // 8 * 8", "65536 // (blocks * num_warps) // 32 // 8 * 8"),
                # the warps per sub-partition rounded down
                (
                    "register_budget",
                    "per_sub = -(-(blocks * num_warps) // 4)",
                    "per_sub = max(1, blocks * num_warps // 4)",
                ),
                # the warps asked for, not whole blocks of them
                ("register_budget", "per_sub = -(-(blocks * num_warps) // 4)", "per_sub = -(-warps // 4)"),
                # no cap at the 255 registers a thread may have
                (
                    "register_budget",
                    "return min(255, 16384 // per_sub // 32 // 8 * 8)",
                    "return 16384 // per_sub // 32 // 8 * 8",
                ),
                # shared memory ignored
                ("register_budget", "        or blocks * smem > 228 * 1024\n", ""),
                # the driver's 1 KB reserve per block ignored
                ("register_budget", "smem = -(-(shared + 1024) // 128) * 128", "smem = -(-shared // 128) * 128"),
                # shared memory not rounded up to 128-byte units
                ("register_budget", "smem = -(-(shared + 1024) // 128) * 128", "smem = shared + 1024"),
                # ... or rounded to 256-byte units
                (
                    "register_budget",
                    "smem = -(-(shared + 1024) // 128) * 128",
                    "smem = -(-(shared + 1024) // 256) * 256",
                ),
                # the reserve counted inside the 227 KB a block may ask for
                ("register_budget", "or shared > 227 * 1024", "or shared + 1024 > 227 * 1024"),
                # no cap of 32 blocks
                ("register_budget", "        or blocks > 32\n", ""),
                # the SM's shared memory taken as the 227 KB a block may have
                ("register_budget", "blocks * smem > 228 * 1024", "blocks * smem > 227 * 1024"),
                # the napkin: 65536 / (32 warps), capped at 255
                (
                    "register_budget",
                    "return min(255, 16384 // per_sub // 32 // 8 * 8)",
                    "return min(255, 65536 // (32 * warps))",
                ),
                # 0 never returned: the smallest step (8) when nothing fits
                ("register_budget", "        return 0\n", "        return 8\n"),
            ]
        ),
    ),
    ChapterSpec(
        10,
        "ex10_grouped_gemm.ipynb",
        lambda: {
            "np": np,
            "math": math,
            "DEVICE": __import__("nbhelpers.device", fromlist=["setup_device"]).setup_device(verbose=False).device,
            "torch": __import__("torch"),
            "triton": __import__("triton"),
            "tl": __import__("triton.language", fromlist=["dot"]),
        },
        ("offsets_and_schedule", "tile_lookup", "dropless_cost"),
        11,
        1010,
        tuple(
            [
                # the right values as floats: the tile lists built without an integer dtype
                (
                    "offsets_and_schedule",
                    "np.array(tile_expert, dtype=np.int64),\n        np.array(tile_row_start, dtype=np.int64),",
                    "np.array(tile_expert, dtype=np.float64),\n        np.array(tile_row_start, dtype=np.float64),",
                ),
                # 16-bit arrays: right for a decode batch, wrapped past 65,535 rows
                (
                    "offsets_and_schedule",
                    "np.array(tile_row_start, dtype=np.int64),",
                    "np.array(tile_row_start, dtype=np.uint16),",
                ),
                (
                    "offsets_and_schedule",
                    "    return (\n        offsets,",
                    "    return (\n        offsets.astype(np.uint16),",
                ),
                # 8-bit expert ids: right for the usual 8 to 128 experts, wrapped past 255 (or 127)
                (
                    "offsets_and_schedule",
                    "np.array(tile_expert, dtype=np.int64),",
                    "np.array(tile_expert, dtype=np.uint8),",
                ),
                (
                    "offsets_and_schedule",
                    "np.array(tile_expert, dtype=np.int64),",
                    "np.array(tile_expert, dtype=np.int8),",
                ),
                # no leading 0: E offsets, the ends only
                (
                    "offsets_and_schedule",
                    "offsets = np.concatenate([[0], np.cumsum(counts)])",
                    "offsets = np.cumsum(counts)",
                ),
                # off by one: the starts only, the last end missing
                (
                    "offsets_and_schedule",
                    "offsets = np.concatenate([[0], np.cumsum(counts)])",
                    "offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])",
                ),
                # counts from each token's first expert only (top-k ignored)
                (
                    "offsets_and_schedule",
                    "np.asarray(expert_ids).ravel(), minlength=num_experts",
                    "np.asarray(expert_ids)[:, 0], minlength=num_experts",
                ),
                # trailing empty experts forgotten (bincount stops at the largest expert used)
                (
                    "offsets_and_schedule",
                    "np.asarray(expert_ids).ravel(), minlength=num_experts",
                    "np.asarray(expert_ids).ravel()",
                ),
                # an empty expert still gets one tile
                (
                    "offsets_and_schedule",
                    "range(offsets[e], offsets[e + 1], block_m)",
                    "range(offsets[e], max(offsets[e + 1], offsets[e] + 1), block_m)",
                ),
                # whole tiles only: an expert's partial last tile (and a one-token expert) dropped
                (
                    "offsets_and_schedule",
                    "range(offsets[e], offsets[e + 1], block_m)",
                    "range(offsets[e], offsets[e + 1] - block_m + 1, block_m)",
                ),
                # the tile's row counted from its expert's first row, not in the buffer
                ("offsets_and_schedule", "tile_row_start.append(r)", "tile_row_start.append(r - offsets[e])"),
                # tiles laid on a global grid of block_m rows: a tile straddles two experts
                (
                    "offsets_and_schedule",
                    "range(offsets[e], offsets[e + 1], block_m)",
                    "range(offsets[e] - offsets[e] % block_m, offsets[e + 1], block_m)",
                ),
                # a lookup vectorised over a fixed 16 experts: the tiles of the experts past them missed
                (
                    "tile_lookup",
                    "    for e in range(0, E):\n"
                    "        start = tl.load(off_ptr + e)\n"
                    "        end = tl.load(off_ptr + e + 1)\n"
                    "        tiles = tl.cdiv(end - start, BLOCK_M)\n"
                    "        mine = (pid >= first_tile) & (pid < first_tile + tiles)\n"
                    "        expert = tl.where(mine, e, expert)\n"
                    "        row_start = tl.where(\n"
                    "            mine, start + (pid - first_tile) * BLOCK_M, row_start\n"
                    "        )\n"
                    "        row_end = tl.where(mine, end, row_end)\n"
                    "        first_tile += tiles\n",
                    "    offs = tl.arange(0, 16)\n"
                    "    start = tl.load(off_ptr + offs, mask=offs < E, other=0)\n"
                    "    end = tl.load(off_ptr + offs + 1, mask=offs < E, other=0)\n"
                    "    tiles = tl.cdiv(end - start, BLOCK_M)\n"
                    "    last = tl.cumsum(tiles, axis=0)\n"
                    "    mine = (pid >= last - tiles) & (pid < last) & (offs < E)\n"
                    "    expert = tl.max(tl.where(mine, offs, -1), axis=0)\n"
                    "    row_start = tl.max(tl.where(mine, start + (pid - last + tiles) * BLOCK_M, -1), axis=0)\n"
                    "    row_end = tl.max(tl.where(mine, end, -1), axis=0)\n",
                ),
                # the same over a fixed 64 experts: the tiles of experts past the 64th missed
                (
                    "tile_lookup",
                    "    for e in range(0, E):\n"
                    "        start = tl.load(off_ptr + e)\n"
                    "        end = tl.load(off_ptr + e + 1)\n"
                    "        tiles = tl.cdiv(end - start, BLOCK_M)\n"
                    "        mine = (pid >= first_tile) & (pid < first_tile + tiles)\n"
                    "        expert = tl.where(mine, e, expert)\n"
                    "        row_start = tl.where(\n"
                    "            mine, start + (pid - first_tile) * BLOCK_M, row_start\n"
                    "        )\n"
                    "        row_end = tl.where(mine, end, row_end)\n"
                    "        first_tile += tiles\n",
                    "    offs = tl.arange(0, 64)\n"
                    "    start = tl.load(off_ptr + offs, mask=offs < E, other=0)\n"
                    "    end = tl.load(off_ptr + offs + 1, mask=offs < E, other=0)\n"
                    "    tiles = tl.cdiv(end - start, BLOCK_M)\n"
                    "    last = tl.cumsum(tiles, axis=0)\n"
                    "    mine = (pid >= last - tiles) & (pid < last) & (offs < E)\n"
                    "    expert = tl.max(tl.where(mine, offs, -1), axis=0)\n"
                    "    row_start = tl.max(tl.where(mine, start + (pid - last + tiles) * BLOCK_M, -1), axis=0)\n"
                    "    row_end = tl.max(tl.where(mine, end, -1), axis=0)\n",
                ),
                # the loop over at most 16 experts
                ("tile_lookup", "for e in range(0, E):", "for e in range(0, tl.minimum(E, 16)):"),
                # the tile test closed at the end: a program also claims the next expert's first tile
                ("tile_lookup", "(pid < first_tile + tiles)", "(pid <= first_tile + tiles)"),
                # a pointer far past offsets (stopped by the launcher's watch before it lands: in
                # the bare interpreter this read crashes the process)
                ("tile_lookup", "start = tl.load(off_ptr + e)", "start = tl.load(off_ptr + e * 50000000)"),
                # the offsets taken as 4 bytes apart in elements: loads past offsets' end
                ("tile_lookup", "end = tl.load(off_ptr + e + 1)", "end = tl.load(off_ptr + (e + 1) * 4)"),
                # floor instead of ceiling: partial tiles lost
                ("tile_lookup", "tiles = tl.cdiv(end - start, BLOCK_M)", "tiles = (end - start) // BLOCK_M"),
                # one tile too many per expert (an empty expert gets one)
                ("tile_lookup", "tiles = tl.cdiv(end - start, BLOCK_M)", "tiles = (end - start) // BLOCK_M + 1"),
                # the row counted from the expert's start only: every tile of an expert starts at its first row
                ("tile_lookup", "start + (pid - first_tile) * BLOCK_M", "start + 0 * (pid - first_tile) * BLOCK_M"),
                # the program number used as the tile number inside the expert
                ("tile_lookup", "start + (pid - first_tile) * BLOCK_M", "start + pid * BLOCK_M"),
                # the end of the tile instead of the end of the expert: a tile past the expert's end
                (
                    "tile_lookup",
                    "row_end = tl.where(mine, end, row_end)",
                    "row_end = tl.where(mine, start + (pid - first_tile + 1) * BLOCK_M, row_end)",
                ),
                # idle programs claim expert 0
                ("tile_lookup", "expert = -1", "expert = 0"),
                # the tile count not carried to the next expert
                ("tile_lookup", "first_tile += tiles", "first_tile = tiles"),
                # the lookup done in Python by the interpreted kernel: the offsets read through a loaded
                # value's handle (numpy), the tile found by a host loop (no GPU kernel has .handle)
                (
                    "tile_lookup",
                    "    expert = -1\n    row_start = -1\n    row_end = -1\n    first_tile = 0",
                    "    o = tl.load(off_ptr + tl.arange(0, 64), mask=tl.arange(0, 64) <= E, other=0).handle.data\n"
                    "    p = int(pid.handle.data.ravel()[0])\n"
                    "    t = 0\n"
                    "    expert = -1\n    row_start = -1\n    row_end = -1\n"
                    "    for e in range(int(E)):\n"
                    "        for r in range(int(o[e]), int(o[e + 1]), BLOCK_M):\n"
                    "            if t == p:\n"
                    "                expert = e\n"
                    "                row_start = r\n"
                    "                row_end = int(o[e + 1])\n"
                    "            t += 1\n"
                    "    first_tile = 0",
                ),
                # the same in a helper of the host that the kernel calls with its loaded values
                (
                    "tile_lookup",
                    "@triton.jit\ndef tile_lookup_kernel(off_ptr, out_ptr, E, P, BLOCK_M: tl.constexpr):\n"
                    "    pid = tl.program_id(axis=0)\n",
                    "def host_tile(o, p, E, BLOCK_M):\n"
                    "    o, p, t = o.handle.data, int(p.handle.data.ravel()[0]), 0\n"
                    "    for e in range(int(E)):\n"
                    "        for r in range(int(o[e]), int(o[e + 1]), BLOCK_M):\n"
                    "            if t == p:\n"
                    "                return e, int(r), int(o[e + 1])\n"
                    "            t += 1\n"
                    "    return -1, -1, -1\n\n\n"
                    "@triton.jit\ndef tile_lookup_kernel(off_ptr, out_ptr, E, P, BLOCK_M: tl.constexpr):\n"
                    "    pid = tl.program_id(axis=0)\n"
                    "    offs = tl.arange(0, 64)\n"
                    "    o = tl.load(off_ptr + offs, mask=offs <= E, other=0)\n"
                    "    expert, row_start, row_end = host_tile(o, pid, E, BLOCK_M)\n"
                    "    tl.store(out_ptr + pid, expert)\n"
                    "    tl.store(out_ptr + P + pid, row_start)\n"
                    "    tl.store(out_ptr + 2 * P + pid, row_end)\n"
                    "    return\n",
                ),
                # the kernel without @triton.jit: a plain function the interpreter runs as well, where
                # any host code would run too (no GPU compiles it)
                ("tile_lookup", "@triton.jit\ndef tile_lookup_kernel(", "def tile_lookup_kernel("),
                # the offsets read as one unmasked block of 64: right values, loads past the E + 1 offsets
                (
                    "tile_lookup",
                    "start = tl.load(off_ptr + e)\n",
                    "start = tl.sum(tl.where(tl.arange(0, 64) == e, tl.load(off_ptr + tl.arange(0, 64)), 0))\n",
                ),
                # floor instead of ceiling for the capacity
                ("dropless_cost", "C = math.ceil(f * rows / num_experts)", "C = math.floor(f * rows / num_experts)"),
                # capacity from tokens, not from (token, slot) rows
                ("dropless_cost", "rows = ids.size", "rows = ids.shape[0]"),
                # the capacity rounded to nearest
                ("dropless_cost", "C = math.ceil(f * rows / num_experts)", "C = round(f * rows / num_experts)"),
                # ceiling as truncation plus one: one row too many where the product is whole
                ("dropless_cost", "C = math.ceil(f * rows / num_experts)", "C = int(f * rows / num_experts) + 1"),
                # the mean load as a whole number of rows before the factor
                ("dropless_cost", "C = math.ceil(f * rows / num_experts)", "C = math.ceil(f * (rows // num_experts))"),
                # capacity pooled over the experts: nothing dropped once E * C holds every row
                ("dropless_cost", "C >= counts.max()", "num_experts * C >= rows"),
                # "drops nothing" read as a capacity past the busiest load: the boundary factor missed
                ("dropless_cost", "C >= counts.max()", "C > counts.max()"),
                # the mean load taken for the busiest: a capacity factor of 1 thought to drop nothing
                ("dropless_cost", "C >= counts.max()", "C >= counts.mean()"),
                # the first factor of the tuple that drops nothing, not the smallest
                ("dropless_cost", "and (best is None or f < best[0])", "and best is None"),
                # the largest factor that drops nothing
                ("dropless_cost", "(best is None or f < best[0])", "(best is None or f > best[0])"),
                # with no factor dropless, the largest one returned anyway
                (
                    "dropless_cost",
                    "return None, None, grouped_rows",
                    "f = max(factors)\n        return f, num_experts * math.ceil(f * rows / num_experts), grouped_rows",
                ),
                # the padded batch computes the busiest load for every expert, not the capacity
                ("dropless_cost", "best = (f, num_experts * C)", "best = (f, num_experts * int(counts.max()))"),
                # empty experts not computed in the padded batch
                ("dropless_cost", "best = (f, num_experts * C)", "best = (f, np.count_nonzero(counts) * C)"),
                # the padding alone, not the rows computed
                ("dropless_cost", "best = (f, num_experts * C)", "best = (f, num_experts * C - rows)"),
                # the grouped kernel credited with the routed rows only: its last tiles' padding ignored
                ("dropless_cost", "int(sum(-(-c // block_m) * block_m for c in counts))", "int(rows)"),
                # the grouped rows tiled as one buffer (a tile straddling experts)
                (
                    "dropless_cost",
                    "int(sum(-(-c // block_m) * block_m for c in counts))",
                    "-(-rows // block_m) * block_m",
                ),
                # whole tiles only: the partial last tile of each expert not computed
                ("dropless_cost", "-(-c // block_m) * block_m for c", "(c // block_m) * block_m for c"),
                # tiles counted as c // BLOCK_M + 1: one too many where a load is a multiple of BLOCK_M
                ("dropless_cost", "-(-c // block_m) * block_m for c", "(c + block_m) // block_m * block_m for c"),
                # an empty expert still runs a tile
                ("dropless_cost", "-(-c // block_m) * block_m for c", "max(1, -(-c // block_m)) * block_m for c"),
            ]
        ),
    ),
    ChapterSpec(
        11,
        "ex11_topk.ipynb",
        lambda: {
            "np": np,
            "DEVICE": __import__("nbhelpers.device", fromlist=["setup_device"]).setup_device(verbose=False).device,
            "torch": __import__("torch"),
            "triton": __import__("triton"),
            "tl": __import__("triton.language", fromlist=["dot"]),
        },
        ("topk_key", "topk_two_stage", "radix_cost", "flip_top3"),
        17,
        1111,
        tuple(
            [
                # the totalOrder rank (the chapter's flip): the negative NaNs counted below the numbers
                ("topk_key", "below_zero = sign - 1 - nans", "below_zero = sign - 1"),
                # the chapter's key as it is: flip, every NaN on all ones, -0 on +0's key
                (
                    "topk_key",
                    "        key = np.where(neg, below_zero - mag, below_zero + 1 + mag)\n"
                    "        key = np.where(mag == 0, below_zero, key)\n"
                    "        key = np.where(nan, 2 * (sign - nans), key)\n",
                    "        key = np.where(neg, b ^ (2 * sign - 1), b ^ sign)\n"
                    "        key = np.where(mag == 0, sign, key)\n"
                    "        key = np.where(nan, 2 * sign - 1, key)\n",
                ),
                # every NaN on the largest key, all ones, not on the count of the numbers
                ("topk_key", "key = np.where(nan, 2 * (sign - nans), key)", "key = np.where(nan, 2 * sign - 1, key)"),
                # the NaNs on the largest number's key (the count less one)
                ("topk_key", "2 * (sign - nans), key)", "2 * (sign - nans) - 1, key)"),
                # -0 and +0 not merged: +0 one above -0
                ("topk_key", "        key = np.where(mag == 0, below_zero, key)\n", ""),
                # the positives not lifted over the second zero: the smallest one on the zeros' key
                ("topk_key", "below_zero + 1 + mag", "below_zero + mag"),
                # the negatives the wrong way round: the larger the magnitude, the larger the key
                ("topk_key", "np.where(neg, below_zero - mag,", "np.where(neg, mag - 1,"),
                # the infinities taken for NaN (>= instead of >)
                ("topk_key", "nan = mag > top if", "nan = mag >= top if"),
                # only the positive NaNs found: a negative NaN keyed as a number (and wrapped)
                ("topk_key", "nan = mag > top if", "nan = (mag > top) & ~neg if"),
                # fn read as IEEE: its top binade taken for inf and NaNs
                ("topk_key", 'ieee = kind == "ieee"', "ieee = True"),
                # IEEE read as fn: one NaN per sign, inf taken for a number
                ("topk_key", 'ieee = kind == "ieee"', "ieee = False"),
                # fnuz read as fn: -0's code taken for -0, the all-ones magnitudes for NaNs
                ("topk_key", 'if kind == "fnuz":', "if False:"),
                # fn: a NaN per sign counted twice (two NaNs of each sign assumed)
                ("topk_key", "nans = (1 << m) - 1 if ieee else 1", "nans = (1 << m) - 1 if ieee else 2"),
                # IEEE: inf counted among the NaNs of its sign
                ("topk_key", "nans = (1 << m) - 1 if ieee else 1", "nans = (1 << m) if ieee else 1"),
                # fnuz: two zeros assumed, so the largest number lands on the NaN's key
                ("topk_key", "sign - 1 + mag)", "sign + mag)"),
                # fnuz: the NaN at the bottom, as if it were the most negative
                ("topk_key", "key = np.where(b == sign, 2 * sign - 1, key)", "key = np.where(b == sign, 0, key)"),
                # fnuz: -0's code taken for -0 and put on +0's key
                ("topk_key", "np.where(b == sign, 2 * sign - 1, key)", "np.where(b == sign, sign - 1, key)"),
                # fnuz: the NaN one below the top (the count of the numbers taken as 2 * sign - 2)
                ("topk_key", "np.where(b == sign, 2 * sign - 1, key)", "np.where(b == sign, 2 * sign - 2, key)"),
                # the width without the sign bit
                ("topk_key", "width = 1 + e + m", "width = e + m"),
                # the fields swapped: mantissa bits read as exponent bits
                ("topk_key", "e, m, kind = fmt", "m, e, kind = fmt"),
                # the width taken from the codes' dtype: right for 8, 16 and 32 bits only
                ("topk_key", "sign = 1 << (width - 1)", "sign = 1 << (8 * np.asarray(bits).dtype.itemsize - 1)"),
                # the right keys as signed 64-bit integers, not the codes' unsigned width
                (
                    "topk_key",
                    "return key.astype(np.uint16 if width <= 16 else np.uint32)",
                    "return key.astype(np.int64)",
                ),
                # uint32 for every width: the right values, the wrong dtype below 17 bits
                (
                    "topk_key",
                    "    if width <= 8:\n        return key.astype(np.uint8)\n"
                    "    return key.astype(np.uint16 if width <= 16 else np.uint32)",
                    "    return key.astype(np.uint32)",
                ),
                # signed keys of the right width: the upper half wraps negative
                ("topk_key", "np.uint16 if width <= 16 else np.uint32", "np.int16 if width <= 16 else np.int32"),
                # the dtype of 8, 16 and 32 bits only: a 16-bit format in uint32, a 6-bit one in uint16
                ("topk_key", "width <= 16 else", "width < 16 else"),
                ("topk_key", "if width <= 8:", "if width == 8:"),
                # the chapter's kernels as printed: the k largest, not the k smallest
                _two_stage(
                    ("tl.min(", "tl.max("),
                    ("(1 << 63) - 1", "-(1 << 63)"),
                    ("| cols.to(tl.int64)", "| (0xFFFFFFFF - cols.to(tl.int64))"),
                    ("col = best & 0xFFFFFFFF", "col = 0xFFFFFFFF - (best & 0xFFFFFFFF)"),
                ),
                # the chapter's packing kept under tl.min: ties to the highest column
                _two_stage(
                    ("| cols.to(tl.int64)", "| (0xFFFFFFFF - cols.to(tl.int64))"),
                    ("col = best & 0xFFFFFFFF", "col = 0xFFFFFFFF - (best & 0xFFFFFFFF)"),
                ),
                # the chapter's filler kept under tl.min: a slot that ran out, or a lane past V, comes first
                _two_stage(("(1 << 63) - 1", "-(1 << 63)")),
                (
                    "topk_two_stage",
                    "    # above every packed key of an element\n    EMPTY: tl.constexpr = (1 << 63) - 1",
                    "    # above every packed key of an element\n    EMPTY: tl.constexpr = -(1 << 63)",
                ),
                # the chunk leaves the slots it has no element for at -1, taken for empty: the merge picks them
                ("topk_two_stage", "tl.store(out + j, best)", "tl.store(out + j, best, mask=best != EMPTY)"),
                # the column counted from the start of the chunk
                ("topk_two_stage", "| cols.to(tl.int64)", "| (cols - c * CHUNK).to(tl.int64)"),
                # no mask on the ragged last chunk: the NaN past the row's end is read as an element
                ("topk_two_stage", "valid = cols < V", "valid = cols < n_chunks * CHUNK"),
                # the loads masked, but the masked lanes kept as elements (0.0 at columns past V)
                ("topk_two_stage", "packed = tl.where(valid, packed, EMPTY)", "pass"),
                # NaN ordered as the smallest value
                (
                    "topk_two_stage",
                    "key = tl.where(mag > 0x7F800000, 0xFFFFFFFF, key)",
                    "key = tl.where(mag > 0x7F800000, 0, key)",
                ),
                # NaN compared as its bits: a negative NaN below -inf
                ("topk_two_stage", "key = tl.where(mag > 0x7F800000, 0xFFFFFFFF, key)", "pass"),
                # -0 below +0 instead of equal to it
                ("topk_two_stage", "key = tl.where(mag == 0, 0x80000000, key)", "pass"),
                # the key shifted unsigned: the positive values wrap below the negative ones
                ("topk_two_stage", "((key - 0x80000000) << 32)", "(key << 32)"),
                # each chunk keeps k - 1 candidates
                ("topk_two_stage", "for j in range(k):", "for j in range(k - 1):"),
                # each chunk keeps at most CHUNK candidates, and the merge reads the slots never written
                ("topk_two_stage", "for j in range(k):", "for j in range(tl.minimum(k, CHUNK)):"),
                # the merge keeps only each chunk's first candidate
                ("topk_two_stage", "(slot % K_PAD < k)", "(slot % K_PAD < 1)"),
                # the merge reads only the first chunk of the row
                ("topk_two_stage", "(slot // K_PAD < n_chunks)", "(slot // K_PAD < 1)"),
                # the merge writes k - 1 outputs
                ("topk_two_stage", "for i in range(0, k):", "for i in range(0, k - 1):"),
                # the merge writes k + 1 outputs
                ("topk_two_stage", "for i in range(0, k):", "for i in range(0, k + 1):"),
                # the value rebuilt from its key, not reloaded: -0.0 comes back as +0.0
                (
                    "topk_two_stage",
                    "tl.store(vals_ptr + row * k + i, v)",
                    "kb = (best >> 32) + 0x80000000\n"
                    "        v = tl.where(kb >= 0x80000000, kb ^ 0x80000000, kb ^ 0xFFFFFFFF)\n"
                    "        tl.store(vals_ptr + row * k + i, v)",
                ),
                # the int32 bits widened with their sign: a negative value's key is never the flipped one
                ("topk_two_stage", "bits = code.to(tl.int64) & 0xFFFFFFFF", "bits = code.to(tl.int64)"),
                # the bits compared as signed integers: the negative values in reverse order
                (
                    "topk_two_stage",
                    "tl.where(\n        bits >= 0x80000000, bits ^ 0xFFFFFFFF, bits ^ 0x80000000\n    )",
                    "bits ^ 0x80000000",
                ),
                # the row's stride taken in bytes: rows past the first read far outside the logits
                ("topk_two_stage", "bits_ptr + row * stride_row + cols", "bits_ptr + row * stride_row * 4 + cols"),
                # the merge reads the column as the chapter's packing stores it, reversed
                ("topk_two_stage", "col = best & 0xFFFFFFFF", "col = 0xFFFFFFFF - (best & 0xFFFFFFFF)"),
                # each chunk writes one slot too many: where k = K_PAD into the next chunk's first
                # slot (a race on a GPU), and past the scratch from the last program
                ("topk_two_stage", "for j in range(k):", "for j in range(k + 1):"),
                ("topk_two_stage", "for j in range(k):", "for j in range(K_PAD + 1):"),
                # the chunk's load unmasked, the lanes past V dropped after it: it reads past the row
                (
                    "topk_two_stage",
                    "code = tl.load(bits_ptr + row * stride_row + cols, mask=valid, other=0)",
                    "code = tl.load(bits_ptr + row * stride_row + cols)",
                ),
                # ... or masked to whole chunks
                (
                    "topk_two_stage",
                    "code = tl.load(bits_ptr + row * stride_row + cols, mask=valid, other=0)",
                    "code = tl.load(bits_ptr + row * stride_row + cols, mask=cols < n_chunks * CHUNK, other=0)",
                ),
                # the merge loads every slot of NC_PAD chunks unmasked: the last row's run past the scratch
                (
                    "topk_two_stage",
                    "cand = tl.load(\n        part_ptr + row * n_chunks * K_PAD + slot, mask=mine, other=0\n    )",
                    "cand = tl.load(part_ptr + row * n_chunks * K_PAD + slot)",
                ),
                # host code in a kernel: a Python list of the chunk's candidates, an import
                (
                    "topk_two_stage",
                    "    for j in range(k):\n"
                    "        best = tl.min(packed, axis=0)\n"
                    "        tl.store(out + j, best)\n"
                    "        packed = tl.where(packed == best, EMPTY, packed)\n",
                    "    found = []\n"
                    "    for j in range(k):\n"
                    "        best = tl.min(packed, axis=0)\n"
                    "        found.append(best)\n"
                    "        packed = tl.where(packed == best, EMPTY, packed)\n"
                    "    for j in range(k):\n"
                    "        tl.store(out + j, found[j])\n",
                ),
                (
                    "topk_two_stage",
                    "    for i in range(0, k):\n        best = tl.min(cand, axis=0)\n",
                    "    import numpy\n\n    for i in range(0, k):\n        best = tl.min(cand, axis=0)\n",
                ),
                # the narrower last digit dropped: floor instead of ceil, and its histogram
                ("radix_cost", "    if key_bits % digit_bits:\n        widths.append(key_bits % digit_bits)\n", ""),
                # every histogram 2**digit_bits counters, the narrower last one too
                ("radix_cost", "sum(2**w for w in widths)", "len(widths) * 2**digit_bits"),
                # the merge's reads of the histograms forgotten
                ("radix_cost", "passes * n * value_bytes + histograms,", "passes * n * value_bytes,"),
                # the histograms written but never read back, nor counted as written: on chip always
                ("radix_cost", "    if blocks > 1:\n        histograms =", "    if False:\n        histograms ="),
                # one block's histogram counted as if it went through memory too
                ("radix_cost", "    if blocks > 1:\n        histograms =", "    if blocks > 0:\n        histograms ="),
                # counters counted, not bytes
                ("radix_cost", "blocks * counter_bytes * sum(", "blocks * sum("),
                # one histogram per pass in all, not one per block
                ("radix_cost", "blocks * counter_bytes * sum(", "counter_bytes * sum("),
                # the filtering pass forgotten
                ("radix_cost", "passes = len(widths) + 1", "passes = len(widths)"),
                # the bytes read from the key width instead of the values'
                ("radix_cost", "passes * n * value_bytes", "passes * n * key_bits // 8"),
                # the indices not counted
                ("radix_cost", "k * (value_bytes + index_bytes)", "k * value_bytes"),
                # the filtering pass counted as a pass, but its bytes not read
                ("radix_cost", "passes * n * value_bytes", "(passes - 1) * n * value_bytes"),
                # the competing pair in the order that keeps the set: only ties, resolved the same way
                ("flip_top3", "x[a] = 1.0\n    x[b] = 1.0 + 2.0**-10", "x[b] = 1.0\n    x[a] = 1.0 + 2.0**-10"),
                # already tied in float32
                ("flip_top3", "x[b] = 1.0 + 2.0**-10", "x[b] = 1.0"),
                # a gap of one bf16 spacing: it survives the rounding
                ("flip_top3", "x[b] = 1.0 + 2.0**-10", "x[b] = 1.0 + 2.0**-7"),
                # a gap bf16 would lose if it truncated; it rounds to nearest, up here
                ("flip_top3", "x[b] = 1.0 + 2.0**-10", "x[b] = 1.0 + 0.75 * 2.0**-7"),
                # the 3rd just below the 4th: it rounds to it, and the tie keeps the same set
                ("flip_top3", "x[b] = 1.0 + 2.0**-10", "x[b] = 1.0 - 2.0**-10"),
                # two of the top 3 tie in bf16: the order changes, the set does not
                (
                    "flip_top3",
                    "x[a] = 1.0\n    x[b] = 1.0 + 2.0**-10\n    x[c], x[d] = 2.0, 3.0",
                    "x[a] = -0.5\n    x[b] = 1.0 + 2.0**-10\n    x[c], x[d] = 1.0 + 2.0**-9, 3.0",
                ),
                # the rest of the row -inf, to keep it out of the top
                ("flip_top3", "x = rng.uniform(-8.0, -1.0, size=n)", "x = np.full(n, -np.inf)"),
                # NaN as the largest logit
                ("flip_top3", "x[c], x[d] = 2.0, 3.0", "x[c], x[d] = 2.0, np.nan"),
                # the top value beyond bf16's range: it rounds to inf
                ("flip_top3", "x[c], x[d] = 2.0, 3.0", "x[c], x[d] = 2.0, 3.4e38"),
                # float64, not float32
                ("flip_top3", "return x.astype(np.float32)", "return x"),
                # one value too many
                ("flip_top3", "return x.astype(np.float32)", "return np.append(x, -8.0).astype(np.float32)"),
            ]
        ),
    ),
    ChapterSpec(
        12,
        "ex12_quantized_inference.ipynb",
        lambda: {"np": np, "math": math, "ml_dtypes": ml_dtypes},
        ("decode_step_time", "gptq_column", "channel_vs_group", "kv_scale_granularity"),
        19,
        1212,
        (
            # int4 as a byte an element
            ("decode_step_time", '"int4": 4}', '"int4": 8}'),
            # bf16 as 4 bytes (fp32's size)
            ("decode_step_time", '{"bf16": 16, "fp16": 16,', '{"bf16": 32, "fp16": 16,'),
            # the scales and zero points forgotten
            ("decode_step_time", 'per_scale = fmt["scale_bits"] + fmt["zero_bits"]', "per_scale = 0"),
            # the zero points forgotten
            ("decode_step_time", 'per_scale = fmt["scale_bits"] + fmt["zero_bits"]', 'per_scale = fmt["scale_bits"]'),
            # groups counted with floor: a shorter last group gets no scale
            ("decode_step_time", 'scales = rows * -(-cols // fmt["group"])', 'scales = rows * (cols // fmt["group"])'),
            # groups counted along the rows (N) instead of the inputs (K)
            (
                "decode_step_time",
                'scales = rows * -(-cols // fmt["group"])',
                'scales = cols * -(-rows // fmt["group"])',
            ),
            # the norms' gains forgotten
            ("decode_step_time", "weight_bytes = blocks + norms + head + rows", "weight_bytes = blocks + head + rows"),
            # head_dim taken as d_model / n_heads
            (
                "decode_step_time",
                'd, dh, ff, n = s["d_model"], s["head_dim"],',
                'd, dh, ff, n = s["d_model"], s["d_model"] // s["n_heads"],',
            ),
            # the LM head forgotten
            ("decode_step_time", "weight_bytes = blocks + norms + head + rows", "weight_bytes = blocks + norms + rows"),
            # the whole embedding table read, not batch rows
            (
                "decode_step_time",
                'rows = B * nbytes(scheme["embedding"], 1, d)',
                'rows = nbytes(scheme["embedding"], s["vocab"], d)',
            ),
            # a tied LM head taken as read already with the embedding's rows: not counted
            (
                "decode_step_time",
                'head = nbytes(head_fmt, s["vocab"], d)',
                'head = 0 if s["tied_embeddings"] else nbytes(head_fmt, s["vocab"], d)',
            ),
            # the KV cache forgotten: a weights-only step
            ("decode_step_time", "kv_bytes = B * L * kv_token + B * kv_token", "kv_bytes = 0"),
            # the KV cache's writes forgotten
            ("decode_step_time", "kv_bytes = B * L * kv_token + B * kv_token", "kv_bytes = B * L * kv_token"),
            # only the keys (not the values) counted
            ("decode_step_time", 'kv_rows = 2 * n * s["n_kv_heads"]', 'kv_rows = n * s["n_kv_heads"]'),
            # the query heads taken for the KV heads
            ("decode_step_time", 'kv_rows = 2 * n * s["n_kv_heads"]', 'kv_rows = 2 * n * s["n_heads"]'),
            # a per-tensor KV scale counted per token
            ("decode_step_time", 'if c["granularity"] == "tensor":', "if False:"),
            # activations forgotten
            ("decode_step_time", 'act_bytes = B * (n * block + d + s["vocab"]) * 2', "act_bytes = 0"),
            # the logits forgotten
            ("decode_step_time", 'act_bytes = B * (n * block + d + s["vocab"]) * 2', "act_bytes = B * n * block * 2"),
            # activations in the weights' format, not bf16
            (
                "decode_step_time",
                'act_bytes = B * (n * block + d + s["vocab"]) * 2',
                'act_bytes = B * (n * block + d + s["vocab"]) * bits[scheme["weights"]["element"]] / 8',
            ),
            # 1 FLOP per weight (a multiply-add counted once)
            ("decode_step_time", "mm = 2 * n * sum(", "mm = n * sum("),
            # the LM head's FLOPs forgotten
            ("decode_step_time", 'head_flops = 2 * s["vocab"] * d * B', "head_flops = 0"),
            # attention FLOPs with the KV heads
            (
                "decode_step_time",
                'attn = 4 * n * s["n_heads"] * dh * L * B',
                'attn = 4 * n * s["n_kv_heads"] * dh * L * B',
            ),
            # attention FLOPs forgotten
            ("decode_step_time", 'attn = 4 * n * s["n_heads"] * dh * L * B', "attn = 0"),
            # attention at the matmuls' (fp8) peak
            ("decode_step_time", '+ attn / peak["bf16"]', "+ attn / peak[compute]"),
            # the LM head at fp8 in W8A8 although it is bf16
            ("decode_step_time", '    head_compute = "bf16"', "    head_compute = compute"),
            # every matmul at the bf16 peak
            ("decode_step_time", '"e4m3fn": "fp8"}', '"e4m3fn": "bf16"}'),
            # the LM head at the fp8 peak whenever it is e4m3fn, the activations bf16 too
            (
                "decode_step_time",
                "    head_compute = compute\n",
                '    head_compute = "fp8" if head_fmt["element"] == "e4m3fn" else compute\n',
            ),
            # the LM head at its own element's peak (bf16 under fp16 activations, fp8 for an int8 head in W8A8)
            (
                "decode_step_time",
                "    head_compute = compute\n",
                '    head_compute = types.get(head_fmt["element"], compute)\n',
            ),
            # the LM head always at bf16 under W8A8, an e4m3fn head too
            ("decode_step_time", 'if compute == "fp8" and head_fmt["element"] != "e4m3fn":', 'if compute == "fp8":'),
            # fp16 activations at the bf16 peak
            ("decode_step_time", '{"bf16": "bf16", "fp16": "fp16",', '{"bf16": "bf16", "fp16": "bf16",'),
            # attention at the activations' 16-bit peak (fp16's for fp16 activations)
            ("decode_step_time", '+ attn / peak["bf16"]', '+ attn / peak[compute if compute != "fp8" else "bf16"]'),
            # the blocks at the fp8 peak whenever the weights are e4m3fn, the activations bf16 too
            (
                "decode_step_time",
                'compute = types[scheme["activations"]["element"]]',
                'compute = "fp8" if scheme["weights"]["element"] == "e4m3fn" '
                'else types[scheme["activations"]["element"]]',
            ),
            # the blocks at a 16-bit or e4m3fn weights' own peak (fp16 weights under bf16 activations)
            (
                "decode_step_time",
                'compute = types[scheme["activations"]["element"]]',
                'compute = types.get(scheme["weights"]["element"], types[scheme["activations"]["element"]])',
            ),
            # the blocks at the weights' element's peak, int weights dequantized to bf16 (under fp16
            # activations)
            (
                "decode_step_time",
                'compute = types[scheme["activations"]["element"]]',
                'compute = {**types, "int8": "bf16", "int4": "bf16"}[scheme["weights"]["element"]]',
            ),
            # the blocks at bf16 unless the weights' element is the activations'
            (
                "decode_step_time",
                'compute = types[scheme["activations"]["element"]]',
                'compute = types[scheme["activations"]["element"]]\n'
                '    if scheme["weights"]["element"] != scheme["activations"]["element"]:\n'
                '        compute = "bf16"',
            ),
            # an int8 LM head at the fp8 peak in W8A8 (int8 tensor cores run at fp8's rate)
            (
                "decode_step_time",
                'if compute == "fp8" and head_fmt["element"] != "e4m3fn":',
                'if compute == "fp8" and head_fmt["element"] not in ("e4m3fn", "int8"):',
            ),
            # ... an int4 one
            (
                "decode_step_time",
                'if compute == "fp8" and head_fmt["element"] != "e4m3fn":',
                'if compute == "fp8" and head_fmt["element"] not in ("e4m3fn", "int4"):',
            ),
            # only a 16-bit LM head at bf16 in W8A8, int ones at fp8
            (
                "decode_step_time",
                'if compute == "fp8" and head_fmt["element"] != "e4m3fn":',
                'if compute == "fp8" and head_fmt["element"] in ("bf16", "fp16"):',
            ),
            # an e4m3fn LM head at the bf16 peak under 16-bit activations (fp16's too)
            (
                "decode_step_time",
                "    head_compute = compute\n",
                '    head_compute = "bf16" if head_fmt["element"] == "e4m3fn" else compute\n',
            ),
            # an int LM head at the bf16 peak whatever the activations (fp16's too)
            (
                "decode_step_time",
                "    head_compute = compute\n",
                '    head_compute = "bf16" if head_fmt["element"] in ("int8", "int4") else compute\n',
            ),
            # an int8 LM head at the fp8 peak under 16-bit activations too
            (
                "decode_step_time",
                "    head_compute = compute\n",
                '    head_compute = "fp8" if head_fmt["element"] in ("e4m3fn", "int8") else compute\n',
            ),
            # the LM head at bf16 unless its element is the activations'
            (
                "decode_step_time",
                "    head_compute = compute\n",
                "    head_compute = compute\n"
                '    if head_fmt["element"] != scheme["activations"]["element"]:\n'
                '        head_compute = "bf16"\n',
            ),
            # a per-tensor KV scale counted as 4 bytes a step
            (
                "decode_step_time",
                "kv_bytes = B * L * kv_token + B * kv_token",
                'kv_bytes = B * L * kv_token + B * kv_token + 4 * (c["granularity"] == "tensor")',
            ),
            # ... as one scale (and zero point) per layer for the keys and one for the values
            (
                "decode_step_time",
                "kv_bytes = B * L * kv_token + B * kv_token",
                "kv_bytes = B * L * kv_token + B * kv_token\n"
                '    if c["granularity"] == "tensor":\n'
                '        kv_bytes += 2 * n * (c["scale_bits"] + c["zero_bits"]) / 8',
            ),
            # a per-tensor embedding scale counted once for the gather, not once a gathered row
            (
                "decode_step_time",
                'rows = B * nbytes(scheme["embedding"], 1, d)',
                'rows = B * nbytes(scheme["embedding"], 1, d)\n'
                '    if scheme["embedding"]["granularity"] == "tensor":\n'
                '        e = scheme["embedding"]\n'
                '        rows -= (B - 1) * (e["scale_bits"] + e["zero_bits"]) / 8',
            ),
            # ... or counted as nothing
            (
                "decode_step_time",
                'rows = B * nbytes(scheme["embedding"], 1, d)',
                'rows = B * nbytes(scheme["embedding"], 1, d)\n'
                '    if scheme["embedding"]["granularity"] == "tensor":\n'
                '        e = scheme["embedding"]\n'
                '        rows -= B * (e["scale_bits"] + e["zero_bits"]) / 8',
            ),
            # ... or a row's share of the whole table's one scale
            (
                "decode_step_time",
                'rows = B * nbytes(scheme["embedding"], 1, d)',
                'rows = B * nbytes(scheme["embedding"], s["vocab"], d) / s["vocab"]',
            ),
            # the LM head's per-tensor scale counted as nothing
            (
                "decode_step_time",
                'head = nbytes(head_fmt, s["vocab"], d)',
                'head = nbytes(head_fmt, s["vocab"], d)\n'
                '    if head_fmt["granularity"] == "tensor":\n'
                '        head -= (head_fmt["scale_bits"] + head_fmt["zero_bits"]) / 8',
            ),
            # a per-tensor weight scale counted once for the whole model, not once a matrix
            (
                "decode_step_time",
                'blocks = n * sum(nbytes(scheme["weights"], r, c) for r, c in linears)',
                'blocks = n * sum(nbytes(scheme["weights"], r, c) for r, c in linears)\n'
                '    if scheme["weights"]["granularity"] == "tensor":\n'
                '        w = scheme["weights"]\n'
                '        blocks -= (7 * n - 1) * (w["scale_bits"] + w["zero_bits"]) / 8',
            ),
            # ... or once a block
            (
                "decode_step_time",
                'blocks = n * sum(nbytes(scheme["weights"], r, c) for r, c in linears)',
                'blocks = n * sum(nbytes(scheme["weights"], r, c) for r, c in linears)\n'
                '    if scheme["weights"]["granularity"] == "tensor":\n'
                '        w = scheme["weights"]\n'
                '        blocks -= 6 * n * (w["scale_bits"] + w["zero_bits"]) / 8',
            ),
            # a gathered embedding row's groups counted with floor (its shorter last group gets no
            # scale), every other tensor's groups counted right
            (
                "decode_step_time",
                'rows = B * nbytes(scheme["embedding"], 1, d)',
                'rows = B * nbytes(scheme["embedding"], 1, d)\n'
                '    e = scheme["embedding"]\n'
                '    if e["granularity"] == "group" and d % e["group"]:\n'
                '        rows -= B * (e["scale_bits"] + e["zero_bits"]) / 8',
            ),
            # ... the LM head's alone
            (
                "decode_step_time",
                'head = nbytes(head_fmt, s["vocab"], d)',
                'head = nbytes(head_fmt, s["vocab"], d)\n'
                '    if head_fmt["granularity"] == "group" and d % head_fmt["group"]:\n'
                '        head -= s["vocab"] * (head_fmt["scale_bits"] + head_fmt["zero_bits"]) / 8',
            ),
            # a gathered row of a group-format embedding given one scale, as if stored by row
            (
                "decode_step_time",
                'rows = B * nbytes(scheme["embedding"], 1, d)',
                'e = scheme["embedding"]\n'
                '    if e["granularity"] == "group":\n'
                '        e = dict(e, granularity="row")\n'
                "    rows = B * nbytes(e, 1, d)",
            ),
            # whole bytes per tensor, rounded up
            (
                "decode_step_time",
                "return (elements + scales * per_scale) / 8",
                "return -(-(elements + scales * per_scale) // 8)",
            ),
            # ... or down
            (
                "decode_step_time",
                "return (elements + scales * per_scale) / 8",
                "return (elements + scales * per_scale) // 8",
            ),
            # 4-bit zero points padded to a byte
            (
                "decode_step_time",
                'per_scale = fmt["scale_bits"] + fmt["zero_bits"]',
                'per_scale = fmt["scale_bits"] + 8 * (fmt["zero_bits"] > 0)',
            ),
            # the two times added, not the larger
            (
                "decode_step_time",
                '    if compute_s > bytes_s:\n        return "compute", compute_s\n'
                "    return max(terms, key=terms.get), bytes_s",
                '    if compute_s > bytes_s:\n        return "compute", compute_s + bytes_s\n'
                "    return max(terms, key=terms.get), compute_s + bytes_s",
            ),
            # the weights always named when memory-bound
            ("decode_step_time", "return max(terms, key=terms.get), bytes_s", 'return "weights", bytes_s'),
            # the batch's weights read once per sequence
            (
                "decode_step_time",
                "weight_bytes = blocks + norms + head + rows",
                "weight_bytes = B * (blocks + norms + head) + rows",
            ),
            # the symmetric range taken with a zero point too
            ("gptq_column", "    if symmetric:\n        qmin, qmax =", "    if True:\n        qmin, qmax ="),
            # the most negative code used (-8..7 for int4)
            (
                "gptq_column",
                "qmin, qmax = -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1",
                "qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1",
            ),
            # rounding half up (floor(x + 0.5)), not to even
            ("gptq_column", "np.rint(w32 * (np.float32(1) / s32))", "np.floor(w32 * (np.float32(1) / s32) + 0.5)"),
            # rounding half away from zero
            (
                "gptq_column",
                "np.rint(w32 * (np.float32(1) / s32))",
                "np.sign(w32) * np.floor(np.abs(w32 * (np.float32(1) / s32)) + 0.5)",
            ),
            # truncation
            ("gptq_column", "np.rint(w32 * (np.float32(1) / s32))", "np.trunc(w32 * (np.float32(1) / s32))"),
            # float64 division: the halfway cases round the other way
            ("gptq_column", "np.rint(w32 * (np.float32(1) / s32))", "np.rint(W[:, j] / s32.astype(np.float64))"),
            # float64 division of fp32(w): right only where the scale is a power of two
            (
                "gptq_column",
                "np.rint(w32 * (np.float32(1) / s32))",
                "np.rint(w32.astype(np.float64) / s32.astype(np.float64))",
            ),
            # float32 division, not the product by fp32(1 / scale)
            ("gptq_column", "np.rint(w32 * (np.float32(1) / s32))", "np.rint(w32 / s32)"),
            # the float64 quotient rounded to float32
            (
                "gptq_column",
                "np.rint(w32 * (np.float32(1) / s32))",
                "np.rint((w32.astype(np.float64) / s32.astype(np.float64)).astype(np.float32))",
            ),
            # the product by the float64 reciprocal, rounded to float32
            (
                "gptq_column",
                "np.rint(w32 * (np.float32(1) / s32))",
                "np.rint((w32.astype(np.float64) * (1 / s32.astype(np.float64))).astype(np.float32))",
            ),
            # the product by fp32(1 / scale) left in float64
            (
                "gptq_column",
                "np.rint(w32 * (np.float32(1) / s32))",
                "np.rint(w32.astype(np.float64) * (np.float32(1) / s32).astype(np.float64))",
            ),
            # ... and of w itself, not fp32(w)
            ("gptq_column", "np.rint(w32 * (np.float32(1) / s32))", "np.rint(W[:, j] * (np.float32(1) / s32))"),
            # no clamp
            (
                "gptq_column",
                "q = np.clip(np.rint(w32 * (np.float32(1) / s32)) + z, qmin, qmax)",
                "q = np.rint(w32 * (np.float32(1) / s32)) + z",
            ),
            # the zero point added after the clamp
            (
                "gptq_column",
                "q = np.clip(np.rint(w32 * (np.float32(1) / s32)) + z, qmin, qmax)",
                "q = np.clip(np.rint(w32 * (np.float32(1) / s32)), qmin, qmax) + z",
            ),
            # the zero point not subtracted when dequantizing
            ("gptq_column", "dq = (q.astype(np.float64) - z) * s32", "dq = q.astype(np.float64) * s32"),
            # the scale taken as its reciprocal
            ("gptq_column", "np.rint(w32 * (np.float32(1) / s32))", "np.rint(w32 * s32)"),
            # the row of the inverse of the whole H, not of H_FF
            ("gptq_column", "hinv = np.linalg.inv(H[j:, j:])", "hinv = np.linalg.inv(H)[j:, j:]"),
            # H itself, not its inverse
            ("gptq_column", "hinv = np.linalg.inv(H[j:, j:])", "hinv = H[j:, j:]"),
            # the error not divided by Hinv[0, 0]
            ("gptq_column", "delta = (W[:, j] - dq) / hinv[0, 0]", "delta = W[:, j] - dq"),
            # divided by H_jj instead
            ("gptq_column", "delta = (W[:, j] - dq) / hinv[0, 0]", "delta = (W[:, j] - dq) / H[j, j]"),
            # the error fed back with the wrong sign
            ("gptq_column", "W_new[:, j:] -= np.outer(delta, hinv[0])", "W_new[:, j:] += np.outer(delta, hinv[0])"),
            # the error the other way round (dq - w)
            ("gptq_column", "delta = (W[:, j] - dq) / hinv[0, 0]", "delta = (dq - W[:, j]) / hinv[0, 0]"),
            # every column updated through the whole inverse, the fixed ones too
            (
                "gptq_column",
                "    W_new[:, j:] -= np.outer(delta, hinv[0])\n",
                "    full = np.linalg.inv(H)\n    W_new -= np.outer((W[:, j] - dq) / full[j, j], full[j])\n",
            ),
            # the codes returned relative to the zero point
            ("gptq_column", "codes = q.astype(np.int8 if symmetric else np.uint8)", "codes = (q - z).astype(np.int8)"),
            # the column left at its old value, not its dequantized one, and not updated
            ("gptq_column", "W_new[:, j:] -= np.outer(delta, hinv[0])\n    W_new[:, j] = dq", "pass"),
            # int8 codes with a zero point: 8-bit codes above 127 wrap
            ("gptq_column", "codes = q.astype(np.int8 if symmetric else np.uint8)", "codes = q.astype(np.int8)"),
            # codes as int64, not the int8 or uint8 the statement asks for
            ("gptq_column", "codes = q.astype(np.int8 if symmetric else np.uint8)", "codes = q.astype(np.int64)"),
            # int8 codes with a zero point too... as int16, which holds them all
            ("gptq_column", "codes = q.astype(np.int8 if symmetric else np.uint8)", "codes = q.astype(np.int16)"),
            # W updated in place and returned as W_new
            ("gptq_column", "W_new = np.array(W, dtype=np.float64)", "W_new = np.asarray(W, dtype=np.float64)"),
            # W_new in float32
            ("gptq_column", "W_new = np.array(W, dtype=np.float64)", "W_new = np.array(W, dtype=np.float32)"),
            # the outlier's group holds small weights too
            ("channel_vs_group", "    W[:, :group] = 0.0\n", ""),
            # an outlier in every group: groups lose as much as channels
            ("channel_vs_group", "    W[:, 0] = 1.0\n", "    W[:, 0] = 1.0\n    W[:, ::group] = 1.0\n"),
            # small weights on the grid of the outlier (a whole step): nothing lost per channel
            ("channel_vs_group", "W = np.full((N, K), 0.49 * step)", "W = np.full((N, K), 1.0 * step)"),
            # small weights far below half a step: they carry no norm
            ("channel_vs_group", "W = np.full((N, K), 0.49 * step)", "W = np.full((N, K), 0.001 * step)"),
            # the symmetric step with a zero point: just above half a step, they round to it
            ("channel_vs_group", "    if symmetric:\n        step =", "    if True:\n        step ="),
            # the zero-point step when symmetric: a quarter of a step, the error smaller
            ("channel_vs_group", "    if symmetric:\n        step =", "    if False:\n        step ="),
            # the 4-bit step for every width
            ("channel_vs_group", "step = 1.0 / (2 ** (bits - 1) - 1)", "step = 1.0 / 7"),
            # alternating signs: a zero point's grid cannot hold -a and a exactly
            (
                "channel_vs_group",
                "    W[:, :group] = 0.0\n",
                "    W[:, 1::2] *= -1.0\n    W[:, :group] = 0.0\n",
            ),
            # the outlier's group misplaced by one column: a small weight shares the outlier's group
            ("channel_vs_group", "    W[:, :group] = 0.0\n", "    W[:, : group - 1] = 0.0\n"),
            # random weights: both grids lose about as much
            (
                "channel_vs_group",
                "    W = np.full((N, K), 0.49 * step)\n    W[:, :group] = 0.0\n    W[:, 0] = 1.0\n",
                "    W = np.random.default_rng(0).normal(size=(N, K))\n",
            ),
            # all zeros
            ("channel_vs_group", "return W.astype(np.float32)", "return np.zeros((N, K), np.float32)"),
            # transposed
            ("channel_vs_group", "return W.astype(np.float32)", "return W.T.astype(np.float32)"),
            # float16
            ("channel_vs_group", "return W.astype(np.float32)", "return W.astype(np.float16)"),
            # the finest granularity that meets the budget, not the one with the fewest scales
            (
                "kv_scale_granularity",
                "for g in sorted(axes, key=count.get):",
                "for g in reversed(sorted(axes, key=count.get)):",
            ),
            # the table's order, whatever the counts (per-head before per-token with fewer tokens)
            ("kv_scale_granularity", "for g in sorted(axes, key=count.get):", "for g in axes:"),
            # a tie of counts to per-token
            (
                "kv_scale_granularity",
                "for g in sorted(axes, key=count.get):",
                "for g in sorted(axes, key=lambda g: (count[g], g != 'per-token')):",
            ),
            # the finest granularity when none meets the budget, not None
            (
                "kv_scale_granularity",
                "        if np.sqrt(np.sum((x64 - x_dq) ** 2)) / norm <= budget:\n"
                "            return g\n    return None",
                "        if np.sqrt(np.sum((x64 - x_dq) ** 2)) / norm <= budget:\n            return g\n"
                '    return "per-token-head"',
            ),
            # amax without the magnitude: the largest value, not the largest |x|
            ("kv_scale_granularity", "amax = np.abs(x32).max(", "amax = x32.max("),
            # per-head taken over the head_dim channels
            ("kv_scale_granularity", '"per-head": (1, 2),', '"per-head": (0, 1),'),
            # per-token over one head's row only
            ("kv_scale_granularity", '"per-token": (0, 2),', '"per-token": (2,),'),
            # int8 scaled to 128
            ("kv_scale_granularity", "m = np.float32(127.0 if", "m = np.float32(128.0 if"),
            # e5m2 in place of e4m3fn
            (
                "kv_scale_granularity",
                "q = v.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)",
                "q = v.astype(ml_dtypes.float8_e5m2).astype(np.float32)",
            ),
            # e4m3fn scaled to its largest power of two, 256
            ("kv_scale_granularity", '127.0 if element == "int8" else 448.0', '127.0 if element == "int8" else 256.0'),
            # int8 truncated
            ("kv_scale_granularity", "q = np.rint(v)", "q = np.trunc(v)"),
            # the scale not floored: an all-zero head gives 0 / 0
            ("kv_scale_granularity", "scale = np.maximum(amax / m, np.float32(2.0**-149))", "scale = amax / m"),
            # the error as a mean squared error relative to the mean square (not its root)
            (
                "kv_scale_granularity",
                "if np.sqrt(np.sum((x64 - x_dq) ** 2)) / norm <= budget:",
                "if np.sum((x64 - x_dq) ** 2) / norm**2 <= budget:",
            ),
            # the largest relative error of one element
            (
                "kv_scale_granularity",
                "if np.sqrt(np.sum((x64 - x_dq) ** 2)) / norm <= budget:",
                "if np.max(np.abs(x64 - x_dq)) / np.max(np.abs(x64)) <= budget:",
            ),
            # the quantizer in float64: x / scale and q * scale
            (
                "kv_scale_granularity",
                "        v = np.clip(x32 / scale, -m, m)",
                "        scale = scale.astype(np.float64)\n        v = np.clip(x64 / scale, -m, m)",
            ),
            # the dequantization q * scale in float64
            (
                "kv_scale_granularity",
                "x_dq = (q * scale).astype(np.float64)",
                "x_dq = q.astype(np.float64) * scale.astype(np.float64)",
            ),
            # the scale amax / m in float64
            (
                "kv_scale_granularity",
                "scale = np.maximum(amax / m, np.float32(2.0**-149))",
                "scale = np.maximum(amax.astype(np.float64) / float(m), 2.0**-149)",
            ),
            # the scale as amax * fp32(1 / m)
            (
                "kv_scale_granularity",
                "scale = np.maximum(amax / m, np.float32(2.0**-149))",
                "scale = np.maximum(amax * (np.float32(1) / m), np.float32(2.0**-149))",
            ),
            # the scale as amax * (1 / m) in float64
            (
                "kv_scale_granularity",
                "scale = np.maximum(amax / m, np.float32(2.0**-149))",
                "scale = np.maximum(amax * (1 / float(m)), 2.0**-149)",
            ),
            # the dequantized values off by a relative 2**-20: the data the recipe gives back exactly catch it
            (
                "kv_scale_granularity",
                "x_dq = (q * scale).astype(np.float64)",
                "x_dq = q.astype(np.float64) * scale.astype(np.float64) * (1 + 2.0**-20)",
            ),
        ),
    ),
]
