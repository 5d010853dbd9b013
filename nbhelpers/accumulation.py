"""Emulated low-precision accumulation: sums, dot products and GEMMs (chapters 02, 03, 07).

Every function here computes in float64 but keeps each intermediate result on the grid of a
chosen accumulator format, so a "bf16 sum" behaves exactly like a loop in bf16 arithmetic:

* **Inputs** are rounded to ``in_fmt`` (nearest-even) first.
* **Products** of two inputs are exact: every format of :data:`nbhelpers.formats.FORMATS` has at
  most 24 significant bits (fp32), so a product has at most 48 bits, and its exponent stays far
  inside float64's range; float64 holds it exactly. (This includes fp32 inputs.)
* **Additions** are rounded once from the exact sum into the accumulator format ``acc`` with the
  chosen rounding. The float64 sum ``t = fl64(s + x)`` is not always exact (the exponents may be
  far apart), and rounding it again could differ from rounding the exact sum (double rounding).
  Where that can happen (t exactly on a midpoint of the target grid for the nearest modes, on a
  grid point for toward-zero, or t outside the target's normal range) t is first rounded *to odd*
  in float64: the TwoSum error term says which way the exact sum lies, and a t with an even last
  bit moves one float64 ulp toward it. Rounding to odd with at least p + 2 bits, then rounding to
  p bits, equals rounding the exact value directly (Boldo & Melquiond 2008); float64 has
  53 >= 24 + 2 bits. So nearest-even, nearest-away and toward-zero additions are correctly
  rounded, bit for bit (tested against exact rational arithmetic). Stochastic rounding draws its
  probability from the rounded-to-odd float64 value, so it is exact up to 2**-(53 - p) in
  probability (about 2**-29 for an fp32 accumulator): immaterial, but not bit-exact for addends
  below about 2**-29 of the running sum.

Orders (:class:`Order`): ``sequential`` (s = fl(s + x_k), k = 0, 1, ...), ``pairwise`` (a binary
tree of depth ceil(log2 n)), ``blocked`` (sequential partial sums of ``block`` terms in the same
format, each added into an outer accumulator) and ``kahan`` (compensated summation with the sum and
the compensation both held in the accumulator format, every operation rounded).

Shapes: :func:`emulated_sum` reduces one axis of any array; :func:`emulated_dot` the last axis of
two broadcastable arrays; :func:`emulated_matmul` and :func:`tensor_core_matmul` take (M, K) and
(K, N) and return (M, N) float64. All loop over the reduction index only; each step is vectorised
over everything else.

:func:`emulated_matmul_ref` and :func:`tensor_core_matmul_ref` are slow references (one output at
a time, with :func:`nbhelpers.rounding.round_to` and exact rational arithmetic) for the tests.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, ClassVar, Iterable

import numpy as np

from ._enums import enum_member
from .formats import FloatFormat, Specials, get_format
from .rounding import Rounding, _as_rounding, round_to

__all__ = [
    "Order",
    "emulated_sum",
    "emulated_dot",
    "emulated_matmul",
    "emulated_matmul_ref",
    "tensor_core_matmul",
    "tensor_core_matmul_ref",
    "max_align_bits",
]


class Order(enum.Enum):
    """Order in which the terms of a sum are added.

    SEQUENTIAL  s = fl(s + x_k) for k = 0, 1, ..., n-1, starting from s = 0 (recursive summation)
    PAIRWISE    a binary tree: two partial sums of the same size are added as soon as both exist
                (sizes are powers of two); at the end the leftover partial sums are added from the
                smallest up. For n a power of two this is the balanced tree; its depth is
                ceil(log2 n) for every n, which is what the error bound gamma_ceil(log2 n) needs.
    BLOCKED     sequential partial sums of ``block`` consecutive terms, each started from zero and
                kept in the accumulator format, then added sequentially into an outer accumulator
                of the same format
    KAHAN       compensated summation: y = fl(x - c); t = fl(s + y); c = fl(fl(t - s) - y); s = t,
                with s and c both in the accumulator format
    """

    SEQUENTIAL = "sequential"
    PAIRWISE = "pairwise"
    BLOCKED = "blocked"
    KAHAN = "kahan"


def _as_order(order: Order | str) -> Order:
    return enum_member(Order, order, "order")


def _check_block(order: Order, block) -> int | None:
    if order is Order.BLOCKED:
        if block is None:
            raise ValueError("order='blocked' needs block=k, the number of terms per partial sum")
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"block must be a positive int, got {block!r}")
        return int(block)
    if block is not None:
        raise ValueError(f"block={block!r} is only used with order='blocked' (order is {order.value!r})")
    return None


def _check_rng(mode: Rounding, rng) -> None:
    if mode is Rounding.STOCHASTIC:
        if rng is None:
            raise ValueError(
                "stochastic rounding needs an explicit generator: pass rng=np.random.default_rng(seed)"
            )
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _check_fmt(fmt, what: str) -> FloatFormat:
    f = get_format(fmt)
    if f.specials is Specials.POWER_OF_TWO:
        raise ValueError(f"{what}={f.name!r} is a scale format (no zero, no sign); it cannot accumulate")
    return f


# ====================================================================== one rounded addition

_ABS = np.int64(0x7FFF_FFFF_FFFF_FFFF)


class _Adder:
    """fl(s + x) in a format, correctly rounded from the exact sum (see the module docstring).

    Fast path: round the float64 sum t = fl64(s + x) in the integer domain of its bit pattern
    (valid in the target's normal range). Lanes where that could be wrong go through a slow path
    (TwoSum, round to odd, ``round_to``): t outside the target's normal range (subnormal,
    overflow, inf, NaN), and t exactly on a *critical point* where the float64 rounding of the
    exact sum may have decided the outcome: a target midpoint for the nearest modes, a target
    grid point for toward-zero. Elsewhere no target grid point or midpoint lies between v and t
    (both are float64 numbers, and t is the nearest float64 to v), so t rounds like v.
    Stochastic rounding always takes the slow path.
    """

    def __init__(self, f: FloatFormat, mode: Rounding, rng):
        self.f, self.mode, self.rng = f, mode, rng
        shift = 52 - f.man_bits
        self.shift = shift
        self.low = np.int64((1 << shift) - 1)
        self.keep = np.int64(~((1 << shift) - 1))
        self.half_m1 = np.int64((1 << (shift - 1)) - 1)
        self.half = np.int64(1 << (shift - 1))
        # critical low bits: a midpoint for the nearest modes, a grid point for toward-zero
        self.crit = np.int64(0) if mode is Rounding.TOWARD_ZERO else self.half
        self.sn_m1 = np.uint64(np.float64(f.smallest_normal).view(np.int64) - 1)
        self.max_bits = np.int64(np.float64(f.max).view(np.int64))
        self._bufs: dict = {}

    def _buffers(self, shape):
        if shape not in self._bufs:
            self._bufs[shape] = (np.empty(shape, np.int64), np.empty(shape, np.int64),
                                 np.empty(shape, np.bool_), np.empty(shape, np.bool_))
        return self._bufs[shape]

    def add(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        """A new array fl(s + x); s and x broadcast."""
        t = np.add(s, x)
        if self.mode is Rounding.STOCHASTIC:
            _to_odd(t, s, x)
            return round_to(t, self.f, self.mode, self.rng)
        r, bad, crit = self._round_fast(t)
        if crit is not None:
            if np.count_nonzero(crit) > t.size // 8:
                # many sums land on critical points (an fp32 accumulator with 16-bit products
                # often gives an exact 25-bit sum, a midpoint): drop the exact ones wholesale
                with np.errstate(invalid="ignore"):
                    crit &= _two_sum_err(t, s, x) != 0
            bad = crit if bad is None else (bad | crit)
        if bad is not None and bad.any():
            idx = np.flatnonzero(bad)
            ts = t.reshape(-1)[idx]
            ss = np.broadcast_to(s, t.shape).reshape(-1)[idx]
            xs = np.broadcast_to(x, t.shape).reshape(-1)[idx]
            _to_odd(ts, ss, xs)
            r.reshape(-1)[idx] = round_to(ts, self.f, self.mode)
        return r

    def round(self, t: np.ndarray) -> np.ndarray:
        """t (a float64 array, taken as exact) rounded onto the grid."""
        t = np.ascontiguousarray(t, dtype=np.float64)
        if self.mode is Rounding.STOCHASTIC:
            return round_to(t, self.f, self.mode, self.rng)
        r, bad, _ = self._round_fast(t, exact=True)
        if bad is not None:
            r[bad] = round_to(t[bad], self.f, self.mode)
        return r

    def _round_fast(self, t: np.ndarray, exact: bool = False):
        """(rounded t, mask of out-of-range lanes or None, mask of critical lanes or None).

        t must be contiguous float64; the critical mask is only computed when not ``exact``.
        """
        b = t.view(np.int64)
        i1, i2, m1, m2 = self._buffers(t.shape)
        r = np.empty(t.shape, np.float64)
        ri = r.view(np.int64)
        if self.mode is Rounding.NEAREST_EVEN:
            np.right_shift(b, self.shift, out=ri)
            np.bitwise_and(ri, 1, out=ri)
            np.add(ri, self.half_m1, out=ri)
            np.add(ri, b, out=ri)
            np.bitwise_and(ri, self.keep, out=ri)
        elif self.mode is Rounding.NEAREST_AWAY:
            np.add(b, self.half, out=ri)
            np.bitwise_and(ri, self.keep, out=ri)
        else:  # toward zero
            np.bitwise_and(b, self.keep, out=ri)
        # out of the normal range: 0 < |t| < smallest normal, or |r| > max (also inf, NaN)
        np.bitwise_and(b, _ABS, out=i1)
        np.subtract(i1, 1, out=i1)
        np.less(i1.view(np.uint64), self.sn_m1, out=m1)
        np.bitwise_and(ri, _ABS, out=i2)
        np.greater(i2, self.max_bits, out=m2)
        np.logical_or(m1, m2, out=m1)
        bad = m1.copy() if m1.any() else None
        crit = None
        if not exact:  # on a critical point (see the class docstring)
            np.bitwise_and(b, self.low, out=i1)
            np.equal(i1, self.crit, out=m2)
            crit = m2.copy() if m2.any() else None
        return r, bad, crit


def _two_sum_err(t: np.ndarray, s, x) -> np.ndarray:
    """The exact error (s + x) - t of the float64 sum t = fl64(s + x) (Knuth's TwoSum)."""
    bb = t - s
    err = np.subtract(t, bb)
    np.subtract(s, err, out=err)
    np.subtract(x, bb, out=bb)
    np.add(err, bb, out=err)
    return err


def _to_odd(t: np.ndarray, s, x) -> None:
    """Replace the float64 sum t = fl64(s + x) by the exact sum rounded to odd, in place."""
    with np.errstate(invalid="ignore"):
        err = _two_sum_err(t, s, x)
        fix = (err != 0) & np.isfinite(err) & np.isfinite(t)
    if not fix.any():
        return
    bits = t.view(np.int64)
    fix &= (bits & 1) == 0
    # move one float64 step toward the exact value: the magnitude grows iff err has t's sign
    step = np.where(np.signbit(err) == np.signbit(t), 1, -1).astype(np.int64)
    bits[fix] += step[fix]


# ====================================================================== the accumulation engine


def _accumulate(
    term: Callable[[int], np.ndarray],
    n: int,
    shape: tuple,
    f: FloatFormat,
    order: Order,
    mode: Rounding,
    block: int | None,
    rng,
) -> np.ndarray:
    """Sum term(0) + ... + term(n-1) (arrays of ``shape``) in format f, in the given order."""
    add = _Adder(f, mode, rng)
    zero = np.zeros(shape)
    if n == 0:
        return zero
    if order is Order.SEQUENTIAL:
        s = zero
        for k in range(n):
            s = add.add(s, term(k))
        return s
    if order is Order.BLOCKED:
        outer = zero
        for start in range(0, n, block):
            p = zero
            for k in range(start, min(start + block, n)):
                p = add.add(p, term(k))
            outer = add.add(outer, p)
        return outer
    if order is Order.KAHAN:
        s, c = zero, zero
        for k in range(n):
            y = add.add(term(k), -c)
            t = add.add(s, y)
            c = add.add(add.add(t, -s), -y)
            s = t
        return s
    # pairwise: a stack of (size, partial sum); leaves are the unrounded terms
    stack: list[tuple[int, np.ndarray]] = []
    for k in range(n):
        size, node = 1, term(k)
        while stack and stack[-1][0] == size:
            _, left = stack.pop()
            node = add.add(left, node)
            size *= 2
        stack.append((size, node))
    size, node = stack.pop()
    if size == 1 and not stack:  # n == 1: the single term still goes through the format
        return add.add(zero, node)
    while stack:
        _, left = stack.pop()
        node = add.add(left, node)
    return node


def emulated_sum(
    x,
    acc: FloatFormat | str = "fp32",
    order: Order | str = "sequential",
    rounding: Rounding | str = "nearest_even",
    block: int | None = None,
    rng: np.random.Generator | None = None,
    axis: int = -1,
    in_fmt: FloatFormat | str | None = None,
) -> np.ndarray:
    """Sum ``x`` along ``axis`` with every addition rounded into the format ``acc``.

    x: real array, reduced along ``axis`` (the result has that axis removed; float64).
    in_fmt: if given, x is first rounded to it (nearest-even); otherwise the values are taken as
        they are and the first addition that touches each one rounds it (s = fl(0 + x_0), ...).
    order: ``"sequential"``, ``"pairwise"``, ``"blocked"`` (with ``block=k``) or ``"kahan"``;
        see :class:`Order`.
    rounding: ``"nearest_even"``, ``"nearest_away"``, ``"toward_zero"`` or ``"stochastic"``
        (with ``rng``, a numpy Generator; the same generator state gives the same result).

    The loop runs over the reduced axis only; each step rounds the whole batch at once.
    """
    f = _check_fmt(acc, "acc")
    order_ = _as_order(order)
    mode = _as_rounding(rounding)
    block_ = _check_block(order_, block)
    _check_rng(mode, rng)
    arr = np.asarray(x)
    if arr.ndim == 0:
        raise ValueError("emulated_sum needs an array with at least one axis to reduce")
    arr = round_to(arr, in_fmt) if in_fmt is not None else _as_f64(arr)
    arr = np.moveaxis(arr, axis, -1)
    batch, n = arr.shape[:-1], arr.shape[-1]
    cols = np.ascontiguousarray(arr.reshape(math.prod(batch), n).T)  # (n, batch): row k holds term k of every sum
    out = _accumulate(lambda k: cols[k], n, (cols.shape[1],), f, order_, mode, block_, rng)
    return out.reshape(batch)


def _as_f64(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind not in "fiub" and arr.dtype.kind != "V":
        raise TypeError(f"expected real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)


def emulated_dot(
    a,
    b,
    in_fmt: FloatFormat | str = "bf16",
    acc: FloatFormat | str = "fp32",
    order: Order | str = "sequential",
    rounding: Rounding | str = "nearest_even",
    block: int | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Dot product along the last axis: inputs rounded to ``in_fmt``, exact products, sum in ``acc``.

    a, b: arrays with the same last dimension K (other axes broadcast); returns float64 of the
    broadcast shape without the last axis (a scalar array for two vectors).
    """
    a_, b_ = np.asarray(a), np.asarray(b)
    if a_.ndim == 0 or b_.ndim == 0 or a_.shape[-1] != b_.shape[-1]:
        raise ValueError(
            f"emulated_dot needs two arrays with the same last dimension K; got shapes {a_.shape} and {b_.shape}"
        )
    fi = _check_fmt(in_fmt, "in_fmt")
    prods = round_to(a_, fi) * round_to(b_, fi)  # exact in float64
    return emulated_sum(prods, acc, order, rounding, block, rng)


def _check_matmul(A, B, in_fmt) -> tuple[np.ndarray, np.ndarray]:
    A_, B_ = np.asarray(A), np.asarray(B)
    if A_.ndim != 2 or B_.ndim != 2 or A_.shape[1] != B_.shape[0]:
        raise ValueError(
            f"matmul needs A of shape (M, K) and B of shape (K, N); got A {A_.shape} and B {B_.shape}"
        )
    fi = _check_fmt(in_fmt, "in_fmt")
    return round_to(A_, fi), round_to(B_, fi)


def emulated_matmul(
    A,
    B,
    in_fmt: FloatFormat | str = "bf16",
    acc: FloatFormat | str = "fp32",
    order: Order | str = "sequential",
    rounding: Rounding | str = "nearest_even",
    block: int | None = None,
    out_fmt: FloatFormat | str | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """C = A @ B with inputs rounded to ``in_fmt``, exact products and accumulation in ``acc``.

    A: (M, K), B: (K, N) -> C: (M, N) float64 on the grid of ``acc`` (of ``out_fmt`` if given,
    a final nearest-even rounding). Each output element is the :func:`emulated_sum` of its K
    products in the given order; the loop runs over K, each step updating all M x N
    accumulators at once: C = fl(C + A[:, k, None] * B[None, k, :]).
    """
    f = _check_fmt(acc, "acc")
    order_ = _as_order(order)
    mode = _as_rounding(rounding)
    block_ = _check_block(order_, block)
    _check_rng(mode, rng)
    Aq, Bq = _check_matmul(A, B, in_fmt)
    At = np.ascontiguousarray(Aq.T)  # row k of At is column k of A
    M, K = Aq.shape
    N = Bq.shape[1]
    C = _accumulate(lambda k: np.multiply.outer(At[k], Bq[k]), K, (M, N), f, order_, mode, block_, rng)
    return C if out_fmt is None else round_to(C, out_fmt)


def emulated_matmul_ref(A, B, in_fmt="bf16", acc="fp32", order="sequential", rounding="nearest_even",
                        block=None) -> np.ndarray:
    """Slow reference for :func:`emulated_matmul` (deterministic roundings): one output at a time,
    every addition done exactly with Fractions and rounded once with ``round_to``. (M, N) float64."""
    f = get_format(acc)
    order_ = _as_order(order)
    mode = _as_rounding(rounding)
    if mode is Rounding.STOCHASTIC:
        raise ValueError("the reference has no stochastic rounding")
    Aq, Bq = _check_matmul(A, B, in_fmt)
    M, K = Aq.shape
    N = Bq.shape[1]

    def fl(v: Fraction) -> Fraction:
        return Fraction(float(round_to(_fraction_to_float_odd(v), f, mode)))

    def add(s: Fraction, t: Fraction) -> Fraction:
        return fl(s + t)

    C = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            terms = [Fraction(float(Aq[i, k])) * Fraction(float(Bq[k, j])) for k in range(K)]
            C[i, j] = float(_sum_ref(terms, add, order_, block))
    return C


def _fraction_to_float_odd(v: Fraction) -> float:
    """The exact rational v rounded to odd in float64 (exact when v is a float64)."""
    x = float(v)  # nearest-even
    if Fraction(x) == v or not math.isfinite(x):
        return x
    if (np.float64(x).view(np.int64) & 1) == 0:
        x = math.nextafter(x, math.inf if v > Fraction(x) else -math.inf)
    return x


def _sum_ref(terms: list, add, order: Order, block) -> Fraction:
    zero = Fraction(0)
    if not terms:
        return zero
    if order is Order.SEQUENTIAL:
        s = zero
        for t in terms:
            s = add(s, t)
        return s
    if order is Order.BLOCKED:
        outer = zero
        for i in range(0, len(terms), block):
            p = zero
            for t in terms[i:i + block]:
                p = add(p, t)
            outer = add(outer, p)
        return outer
    if order is Order.KAHAN:
        s = c = zero
        for t in terms:
            y = add(t, -c)
            tt = add(s, y)
            c = add(add(tt, -s), -y)
            s = tt
        return s
    # pairwise, written recursively: split off the largest power of two that is < n... the
    # binary-counter tree: the first 2**floor(log2 n) terms form a balanced tree, the rest recurse
    n = len(terms)
    if n == 1:
        return add(zero, terms[0])

    def balanced(ts):
        if len(ts) == 1:
            return ts[0]
        h = len(ts) // 2
        return add(balanced(ts[:h]), balanced(ts[h:]))

    big = 1 << (n.bit_length() - 1)
    if big == n:
        return balanced(terms)
    rest = terms[big:]
    if len(rest) == 1:
        right = rest[0]
    else:
        right = _sum_ref(rest, add, order, block)
    return add(balanced(terms[:big]), right)


# ====================================================================== tensor-core model


def max_align_bits(group: int) -> int:
    """Largest ``align_bits`` for which the aligned group sum (g products and the accumulator,
    each an integer multiple of 2**(E - align_bits) below 2**(align_bits + 1) in units of that)
    is exact in float64: align_bits + 1 + ceil(log2(group + 1)) <= 53."""
    return 52 - math.ceil(math.log2(group + 1))


def tensor_core_matmul(
    A,
    B,
    in_fmt: FloatFormat | str = "bf16",
    group: int = 8,
    align_bits: int = 23,
    acc: FloatFormat | str = "fp32",
    rounding: Rounding | str = "toward_zero",
    promote_every: int | None = None,
    out_fmt: FloatFormat | str | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """A model of how NVIDIA tensor cores accumulate: fused groups, alignment, truncation.

    A: (M, K), B: (K, N) -> (M, N) float64.

    The model (Fasi, Higham, Mikaitis & Pranesh 2021, "Numerical behavior of NVIDIA tensor
    cores"; group sizes from Khattak & Mikaitis 2025: 4 on V100, 8 on A100, 16 on H100 for
    fp16/bf16 inputs):

    1. inputs are rounded to ``in_fmt``; products are exact;
    2. the K products are taken ``group`` at a time (the last group may be shorter). For one
       group, the ``group`` products *and the incoming accumulator c* are aligned to the largest
       exponent E among them (E = floor(log2 |v|) of the largest magnitude) and each is truncated
       toward zero to a multiple of 2**(E - align_bits): ``align_bits`` bits are kept below the
       leading bit, with no guard, round or sticky bits, so a term smaller than 2**(E - align_bits)
       vanishes entirely;
    3. the truncated terms are added exactly (fixed point) and the result is rounded once into
       ``acc`` with ``rounding``: toward zero by default (truncation, as in Fasi et al.'s model of
       the final normalisation), a parameter so that nearest-even can be compared;
    4. ``promote_every=N`` (a multiple of ``group``): after every N products the accumulator c is
       added into a separate fp32 accumulator (nearest-even) and reset to zero, as DeepSeek-V3 does
       for Hopper fp8 GEMMs (N_C = 128); the fp32 accumulator is the result.

    ``align_bits`` defaults to 23 (an fp32-wide aligned significand, as in the paper's model);
    it may be at most :func:`max_align_bits` (47 for group 16) so that step 3 is exact in float64.
    With a large ``align_bits`` and terms whose bits all lie within it, nothing is truncated and the
    model is exact grouped summation rounded once per group (tested).
    """
    f = _check_fmt(acc, "acc")
    mode = _as_rounding(rounding)
    _check_rng(mode, rng)
    g, align_bits, promote_every = _check_tc(group, align_bits, promote_every)
    Aq, Bq = _check_matmul(A, B, in_fmt)
    M, K = Aq.shape
    N = Bq.shape[1]
    add = _Adder(f, mode, rng)
    fp32 = _Adder(get_format("fp32"), Rounding.NEAREST_EVEN, None)
    c = np.zeros((M, N))
    outer = np.zeros((M, N)) if promote_every else None
    done = 0
    for k0 in range(0, K, g):
        k1 = min(k0 + g, K)
        terms = np.empty((k1 - k0 + 1, M, N))
        terms[0] = c
        np.multiply(Aq[:, k0:k1].T[:, :, None], Bq[k0:k1, None, :], out=terms[1:])
        c = add.round(_aligned_sum(terms, align_bits))
        done = k1
        if promote_every and (done % promote_every == 0 or done == K):
            outer = fp32.add(outer, c)
            c = np.zeros((M, N))
    out = outer if promote_every else c
    return out if out_fmt is None else round_to(out, out_fmt)


def _check_tc(group, align_bits, promote_every):
    for name, v in (("group", group), ("align_bits", align_bits)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    hi = max_align_bits(group)
    if align_bits > hi:
        raise ValueError(
            f"align_bits={align_bits} is too large for group={group}: at most {hi}, so that the "
            "aligned group sum is exact in float64"
        )
    if promote_every is not None:
        if isinstance(promote_every, bool) or not isinstance(promote_every, (int, np.integer)) \
                or promote_every < 1 or promote_every % group:
            raise ValueError(
                f"promote_every must be None or a positive multiple of group={group}, got {promote_every!r}"
            )
    return int(group), int(align_bits), promote_every


def _aligned_sum(terms: np.ndarray, align_bits: int) -> np.ndarray:
    """terms (G, ...) -> exact sum over axis 0 after truncating each to 2**(E - align_bits)."""
    amax = np.abs(terms).max(axis=0)
    _, ex = np.frexp(amax)  # amax = m * 2**ex, m in [0.5, 1): E = ex - 1 (zero gives ex = 0)
    inv_q = np.ldexp(1.0, align_bits - (ex - 1))  # 1/q = 2**(align_bits - E), a power of two
    kept = np.trunc(terms * inv_q)  # exact: scaling by a power of two, then truncation
    return kept.sum(axis=0) / inv_q  # exact: integers below 2**53, then a power-of-two scaling


def tensor_core_matmul_ref(A, B, in_fmt="bf16", group=8, align_bits=23, acc="fp32",
                           rounding="toward_zero", promote_every=None) -> np.ndarray:
    """Slow reference for :func:`tensor_core_matmul` (deterministic roundings): one output at a
    time, exact Fractions, the alignment written out with integer shifts. (M, N) float64."""
    f = get_format(acc)
    mode = _as_rounding(rounding)
    g, align_bits, promote_every = _check_tc(group, align_bits, promote_every)
    Aq, Bq = _check_matmul(A, B, in_fmt)
    M, K = Aq.shape
    N = Bq.shape[1]
    C = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            c = Fraction(0)
            outer = Fraction(0)
            for k0 in range(0, K, g):
                vals = [c] + [Fraction(float(Aq[i, k])) * Fraction(float(Bq[k, j]))
                              for k in range(k0, min(k0 + g, K))]
                nz = [abs(v) for v in vals if v != 0]
                if nz:
                    top = max(nz)
                    E = top.numerator.bit_length() - top.denominator.bit_length()
                    if Fraction(2) ** E > top:  # bit_length difference can be one too high
                        E -= 1
                    q = Fraction(2) ** (E - align_bits)
                    total = sum((math.trunc(v / q) * q for v in vals), Fraction(0))
                else:
                    total = Fraction(0)
                c = Fraction(float(round_to(_fraction_to_float_odd(total), f, mode)))
                if promote_every and ((min(k0 + g, K)) % promote_every == 0 or k0 + g >= K):
                    outer = Fraction(float(round_to(_fraction_to_float_odd(outer + c), "fp32")))
                    c = Fraction(0)
            C[i, j] = float(outer if promote_every else c)
    return C


# ---- chapter 03: error studies of a GEMM, one tensor-core group, an accumulator probe


__all__ += [
    "relative_error",
    "gemm_inputs",
    "GemmSweep",
    "gemm_sweep",
    "align_group",
    "tensor_core_group_sum",
    "accumulator_probe",
    "probe_verdict",
]


def relative_error(C, C_ref) -> float:
    """Normwise relative error ``||C - C_ref||_F / ||C_ref||_F`` (Frobenius norms, in float64).

    C, C_ref: arrays of the same shape (any real dtype, ml_dtypes included). Returns 0.0 when
    both are all zeros and inf when C_ref is all zeros but C is not.
    """
    c, r = np.asarray(C), np.asarray(C_ref)
    if c.shape != r.shape:
        raise ValueError(f"relative_error needs two arrays of the same shape; got {c.shape} and {r.shape}")
    c, r = _as_f64(c), _as_f64(r)
    den = float(np.linalg.norm(r))
    num = float(np.linalg.norm(c - r))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


_DISTS = ("normal", "uniform")


def _positive_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return int(v)


def gemm_inputs(M: int, K: int, N: int, seed: int = 0, dist: str = "normal") -> tuple[np.ndarray, np.ndarray]:
    """Random float64 test matrices A (M, K) and B (K, N) for the error-vs-K studies.

    Drawn from ``np.random.default_rng([seed, M, K, N])``: the same (seed, M, K, N) give the same
    matrices on every machine and in every script (the GPU benchmark uses this too), whatever
    other sizes are drawn. dist: ``"normal"`` (standard normal, products of both signs) or
    ``"uniform"`` (uniform on [0, 1): every product is positive and the sums grow like K).
    """
    M, K, N = (_positive_int(n, v) for n, v in (("M", M), ("K", K), ("N", N)))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if dist not in _DISTS:
        raise ValueError(f"dist must be one of {_DISTS}, got {dist!r}")
    rng = np.random.default_rng([int(seed), M, K, N])
    if dist == "normal":
        return rng.standard_normal((M, K)), rng.standard_normal((K, N))
    return rng.random((M, K)), rng.random((K, N))


@dataclass(frozen=True)
class GemmSweep:
    """The outputs of several GEMM variants on the matrices of :func:`gemm_inputs`, for each K.

    outputs: label -> one C (M, N) float64 per K. Made by :func:`gemm_sweep`; the errors against
    either reference come from :meth:`errors` without recomputing any GEMM.
    """

    Ks: tuple
    M: int
    N: int
    seed: int
    dist: str
    outputs: dict = field(repr=False)

    def inputs(self, K: int) -> tuple[np.ndarray, np.ndarray]:
        """The float64 data A (M, K), B (K, N) the variants were given for this K."""
        return gemm_inputs(self.M, K, self.N, self.seed, self.dist)

    def errors(self, reference: FloatFormat | str | None = None, labels=None) -> dict[str, np.ndarray]:
        """label -> float64 array of :func:`relative_error`, one per K (for ``labels``, default all).

        reference None: against the float64 product of the data (what one meant to compute, so
        input rounding counts as error). A format name: against the product of the data rounded
        to that format, so only the accumulation and any output rounding are measured. The
        reference is float64 ``A @ B``, whose own error (about K * 2**-53) is far below anything
        measured here.
        """
        fref = None if reference is None else _check_fmt(reference, "reference")
        labels = list(self.outputs) if labels is None else list(labels)
        for label in labels:
            if label not in self.outputs:
                raise KeyError(f"no variant {label!r}; have {list(self.outputs)}")
        out = {label: np.empty(len(self.Ks)) for label in labels}
        for i, K in enumerate(self.Ks):
            A, B = self.inputs(K)
            C_ref = A @ B if fref is None else round_to(A, fref) @ round_to(B, fref)
            for label in labels:
                out[label][i] = relative_error(self.outputs[label][i], C_ref)
        return out

    def with_rounded_output(self, label: str, out_fmt: FloatFormat | str, new_label: str) -> GemmSweep:
        """A new sweep with one more variant: ``label``'s outputs rounded (nearest-even) to
        ``out_fmt`` once at the end, under ``new_label``."""
        if label not in self.outputs:
            raise KeyError(f"no variant {label!r}; have {list(self.outputs)}")
        if new_label in self.outputs:
            raise ValueError(f"a variant called {new_label!r} exists already")
        f = _check_fmt(out_fmt, "out_fmt")
        outputs = dict(self.outputs)
        outputs[new_label] = [round_to(C, f) for C in self.outputs[label]]
        return GemmSweep(self.Ks, self.M, self.N, self.seed, self.dist, outputs)


def gemm_sweep(
    variants: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]],
    Ks,
    M: int = 16,
    N: int = 16,
    seed: int = 0,
    dist: str = "normal",
) -> GemmSweep:
    """Run every GEMM variant on ``gemm_inputs(M, K, N, seed, dist)`` for each K.

    variants: label -> function (A, B) -> C, called with the float64 data A (M, K), B (K, N); it
    rounds the inputs itself (e.g. ``lambda A, B: emulated_matmul(A, B, "bf16", "fp32")``) and
    returns C (M, N) as anything ``np.asarray`` takes. Returns a :class:`GemmSweep`.
    """
    if not isinstance(variants, dict) or not variants:
        raise ValueError("variants must be a non-empty dict: label -> function (A, B) -> C")
    for label, fn in variants.items():
        if not callable(fn):
            raise TypeError(f"variant {label!r} is not callable")
    Ks = tuple(_positive_int("each K", k) for k in Ks)
    if not Ks:
        raise ValueError("Ks is empty: give at least one K")
    M, N = _positive_int("M", M), _positive_int("N", N)
    outputs: dict[str, list[np.ndarray]] = {label: [] for label in variants}
    for K in Ks:
        A, B = gemm_inputs(M, K, N, seed, dist)
        for label, fn in variants.items():
            C = np.asarray(fn(A.copy(), B.copy()), dtype=np.float64)
            if C.shape != (M, N):
                raise ValueError(f"variant {label!r} returned shape {C.shape} for K={K}, expected {(M, N)}")
            outputs[label].append(C)
    return GemmSweep(Ks, M, N, int(seed), dist, outputs)


def align_group(values, align_bits: int = 23) -> tuple[int | None, np.ndarray]:
    """The alignment step of one tensor-core group (see :func:`tensor_core_matmul`).

    values: 1-D array of finite numbers (the incoming accumulator and the group's products).
    Returns (E, kept): E = floor(log2(max |v|)), the exponent everything is aligned to (None if
    all values are zero), and each value truncated toward zero to a multiple of
    2**(E - align_bits), as float64 of the same length (exact).
    """
    v = _group_values(values)
    if isinstance(align_bits, bool) or not isinstance(align_bits, (int, np.integer)) or align_bits < 1:
        raise ValueError(f"align_bits must be a positive int, got {align_bits!r}")
    hi = max_align_bits(max(v.size - 1, 1))
    if align_bits > hi:
        raise ValueError(f"align_bits={align_bits} is too large for {v.size} values: at most {hi}")
    amax = float(np.abs(v).max()) if v.size else 0.0
    if amax == 0.0:
        return None, np.zeros(v.size)
    E = math.frexp(amax)[1] - 1
    inv_q = math.ldexp(1.0, int(align_bits) - E)
    return E, np.trunc(v * inv_q) / inv_q


def _group_values(values) -> np.ndarray:
    v = np.asarray(values)
    if v.ndim != 1:
        raise ValueError(f"expected a 1-D array of values, got shape {v.shape}")
    v = _as_f64(v)
    if not np.isfinite(v).all():
        raise ValueError("the tensor-core model covers finite values only (got inf or NaN)")
    return v


def tensor_core_group_sum(
    c: float,
    products,
    align_bits: int = 23,
    acc: FloatFormat | str = "fp32",
    rounding: Rounding | str = "toward_zero",
) -> float:
    """One fused tensor-core step: the new accumulator after adding a group of products to c.

    c: the incoming accumulator (a finite number); products: 1-D array of the group's (exact)
    products. c and the products are aligned together (:func:`align_group`), the kept parts are
    added exactly, and the sum is rounded once into ``acc`` (toward zero by default). This is
    one iteration of :func:`tensor_core_matmul`'s loop, for a single output element.
    """
    p = np.asarray(products)
    if p.ndim != 1:
        raise ValueError(f"products must be a 1-D array (one group), got shape {p.shape}")
    c_ = np.asarray(c)
    if c_.ndim != 0:
        raise ValueError(f"c must be one number (the accumulator of one output), got shape {c_.shape}")
    terms = _group_values(np.concatenate([_as_f64(c_).reshape(1), _as_f64(p)]))
    f = _check_fmt(acc, "acc")
    mode = _as_rounding(rounding)
    if mode is Rounding.STOCHASTIC:
        raise ValueError("tensor_core_group_sum has no stochastic rounding; use nearest_even, "
                         "nearest_away or toward_zero")
    _, kept = align_group(terms, align_bits)
    total = float(kept.sum())  # exact: multiples of one power of two, below 2**53 units (max_align_bits)
    return float(round_to(total, f, mode))


def accumulator_probe(K: int, tiny_first: bool, M: int = 1, N: int = 1, n_tiny: int = 4
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Matrices A (M, K), B (K, N) whose every output is 1 + 2**-8 + n_tiny * 2**-25 exactly.

    Every row of A is ones on the first n_tiny + 2 positions (zeros after); every column of B
    holds the products' second factors: 1 and 2**-8, and n_tiny times 2**-25, with the tiny
    ones placed first (``tiny_first``) or after the two large ones. All values are bf16 values.

    What it tells apart, read through a bf16 output: 1 + 2**-8 is exactly halfway between the
    bf16 neighbours 1 and 1 + 2**-7, so the tiny terms decide the rounding. Exact (or wider than
    fp32) accumulation keeps them: 1 + 2**-7. An fp32 accumulator that adds them after the 1
    loses each (2**-25 is a quarter of fp32's spacing at 1), leaving the tie: 1.0 (ties to
    even). Added first, they sum exactly to n_tiny * 2**-25 and survive: 1 + 2**-7 (for
    n_tiny >= 3). A bf16 accumulator loses them either way: 1.0.
    """
    K, M, N, n_tiny = (_positive_int(n, v) for n, v in (("K", K), ("M", M), ("N", N), ("n_tiny", n_tiny)))
    if K < n_tiny + 2:
        raise ValueError(f"K={K} is too short for the probe: it needs K >= n_tiny + 2 = {n_tiny + 2}")
    if not isinstance(tiny_first, (bool, np.bool_)):
        raise TypeError(f"tiny_first must be True or False, got {tiny_first!r}")
    b = np.zeros(K)
    big, tiny = [1.0, 2.0**-8], [2.0**-25] * n_tiny
    b[: n_tiny + 2] = tiny + big if tiny_first else big + tiny
    a = np.zeros(K)
    a[: n_tiny + 2] = 1.0
    return np.tile(a, (M, 1)), np.tile(b[:, None], (1, N))


def probe_verdict(tiny_first: float, tiny_last: float) -> str:
    """What the two bf16 outputs of :func:`accumulator_probe` (tiny terms first, tiny terms
    last) say about the accumulator that produced them; a sentence."""
    hi, lo = 1.0 + 2.0**-7, 1.0
    verdicts = {
        (hi, hi): "kept in either order: wider than fp32 (or exact)",
        (hi, lo): "kept only when first: an fp32 accumulator, in K order",
        (lo, hi): "kept only when last: an fp32 accumulator, in another order",
        (lo, lo): "lost in either order: narrower than fp32, or truncation",
    }
    key = (float(tiny_first), float(tiny_last))
    if key not in verdicts:
        return f"unexpected outputs {key}: the probe gives 1 or 1 + 2**-7 after a bf16 rounding"
    return verdicts[key]


# ---- chapter 02: partial sums, stagnation, the lost part of an addend, error statistics


__all__ += [
    "running_sum",
    "exact_sum",
    "addend_loss",
    "stall_length",
    "SumMethod",
    "SumErrors",
    "sum_errors",
    "errors_vs_length",
]


def _reduce_layout(x, axis: int, in_fmt=None) -> tuple[np.ndarray, tuple, int]:
    """x as float64 columns (n, batch) for a reduction along ``axis``: (cols, batch shape, n)."""
    arr = np.asarray(x)
    if arr.ndim == 0:
        raise ValueError("expected an array with at least one axis to sum along, got a scalar")
    arr = round_to(arr, in_fmt) if in_fmt is not None else _as_f64(arr)
    arr = np.moveaxis(arr, axis, -1)
    batch, n = arr.shape[:-1], arr.shape[-1]
    return np.ascontiguousarray(arr.reshape(math.prod(batch), n).T), batch, n


def running_sum(
    x,
    acc: FloatFormat | str = "fp32",
    rounding: Rounding | str = "nearest_even",
    rng: np.random.Generator | None = None,
    axis: int = -1,
    in_fmt: FloatFormat | str | None = None,
) -> np.ndarray:
    """Every partial sum of the sequential sum of ``x`` along ``axis``, in the format ``acc``.

    x: real array with n terms along ``axis``. Returns float64 of x's shape: entry k along
    ``axis`` is s_k = fl(s_(k-1) + x_k) with s_(-1) = 0, the sum of the first k + 1 terms, equal
    to ``emulated_sum(x[..., :k+1], acc, "sequential", rounding)``. in_fmt, rounding and rng as in
    :func:`emulated_sum`; stochastic rounding draws in the same order, so for the same generator
    state the last entry equals emulated_sum's result.
    """
    f = _check_fmt(acc, "acc")
    mode = _as_rounding(rounding)
    _check_rng(mode, rng)
    cols, batch, n = _reduce_layout(x, axis, in_fmt)
    add = _Adder(f, mode, rng)
    out = np.empty_like(cols)
    s = np.zeros(cols.shape[1])
    for k in range(n):
        s = add.add(s, cols[k])
        out[k] = s
    return np.moveaxis(out.T.reshape(*batch, n), -1, axis)


def exact_sum(x, axis: int = -1) -> np.ndarray:
    """The exact sum of ``x`` along ``axis``, rounded once to float64 (``math.fsum`` per lane).

    ``math.fsum`` (Shewchuk's algorithm) keeps the running sum as a list of non-overlapping
    float64 partials, so nothing is lost on the way, and rounds the total once to nearest
    (CPython, Modules/mathmodule.c). x: real array; returns float64 with ``axis`` removed. This
    is the reference every error in chapter 02 is measured against.
    """
    cols, batch, n = _reduce_layout(x, axis)
    rows = cols.T  # (batch, n)
    return np.array([math.fsum(r) for r in rows.tolist()], dtype=np.float64).reshape(batch)


def addend_loss(s, a, acc: FloatFormat | str = "bf16", rounding: Rounding | str = "nearest_even") -> np.ndarray:
    """How much of the addend ``a`` one rounded addition fl(s + a) in ``acc`` loses, relative to |a|.

    Returns |fl(s + a) - (s + a)| / |a| (float64; s and a broadcast together): 0 when a is counted
    exactly, 1 when fl(s + a) == s, a lost entirely. With round to nearest and s a value of
    ``acc`` it never exceeds 1 (s itself is one of the candidates). The rounding error of the
    sum is computed exactly (the float64 sum's own error from TwoSum), so the result is exact up
    to the final float64 division.

    s, a: real arrays (or numbers), taken as they are: round them to ``acc`` first to model an
    accumulator adding a term of its own format. Every a must be nonzero and finite, every s
    finite. rounding: a deterministic mode (``nearest_even``, ``nearest_away``, ``toward_zero``).
    """
    f = _check_fmt(acc, "acc")
    mode = _as_rounding(rounding)
    if mode is Rounding.STOCHASTIC:
        raise ValueError("addend_loss measures one deterministic rounding; use nearest_even, "
                         "nearest_away or toward_zero")
    s_, a_ = np.broadcast_arrays(_as_f64(np.asarray(s)), _as_f64(np.asarray(a)))
    shape = s_.shape
    s_, a_ = s_.reshape(-1).copy(), a_.reshape(-1).copy()
    if not (np.isfinite(s_).all() and np.isfinite(a_).all()):
        raise ValueError("addend_loss needs finite s and a (got inf or NaN)")
    if (a_ == 0).any():
        raise ValueError("addend_loss divides by |a|: every addend a must be nonzero")
    r = _Adder(f, mode, None).add(s_, a_)
    t = s_ + a_
    e = _two_sum_err(t, s_, a_)  # s + a == t + e exactly
    with np.errstate(invalid="ignore", over="ignore"):
        lost = np.abs((r - t) - e) / np.abs(a_)  # r - t is exact: r is t moved to a coarser grid
    return lost.reshape(shape)


def stall_length(value: float, acc: FloatFormat | str = "bf16", rounding: Rounding | str = "nearest_even") -> int:
    """How many copies of ``value`` a sequential sum in ``acc`` counts before it stops growing.

    The sum is s_0 = 0, s_k = fl(s_(k-1) + value), every addition rounded once into ``acc``.
    Returns K, the smallest k with fl(s_k + value) == s_k: each of the first K terms changed the
    sum, and term K + 1 and every later one are lost; s_K is where the sum stalls. For value 1
    in bf16, K = 256 (s_K = 256); in fp16 2048; in fp32 2**24.

    value: a positive finite number, taken as it is (round it to ``acc`` first to add a term of
    that format). rounding: a deterministic mode (stochastic rounding does not stall).

    Found by running the sum, a search rather than a formula; it skips ahead where that is safe:
    while s_k + value stays inside one binade of ``acc`` the increment fl(s + value) - s is the
    same at every step (after at most one step that settles the parity of a tie), so once two
    consecutive steps inside a binade add the same amount, the steps up to the binade's end are
    taken at once (counted exactly with Fractions). Raises ValueError if the sum overflows (inf
    or NaN) before it stalls.
    """
    f = _check_fmt(acc, "acc")
    mode = _as_rounding(rounding)
    if mode is Rounding.STOCHASTIC:
        raise ValueError("stochastic rounding does not stall; stall_length takes nearest_even, "
                         "nearest_away or toward_zero")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"value must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"value must be positive and finite, got {value!r}")
    add = _Adder(f, mode, None)
    vv = np.array([v])
    top_value = f.max

    def step(s: float) -> float:
        return float(add.add(np.array([s]), vv)[0])

    s, k = 0.0, 0
    prev_inc, prev_e = None, None
    for _ in range(100_000):  # single steps; the skips keep this far below the limit
        t = step(s)
        if not math.isfinite(t):
            raise ValueError(
                f"the sum of {v!r} in {f.name} overflows to {t} after {k} terms, before it stalls"
            )
        if t == s:
            return k
        inc = t - s  # exact: both on the grid, t within a binade or two of s
        e = max(math.frexp(t)[1] - 1, f.emin)  # binade of the new partial sum
        s, k = t, k + 1
        if inc == prev_inc and e == prev_e:
            # the next steps add inc as long as s + value stays below the binade's end (and max)
            top = min(math.ldexp(1.0, e + 1), top_value)
            room = Fraction(top) - Fraction(s) - Fraction(v)
            if room > 0:
                j = math.ceil(room / Fraction(inc))
                s, k = float(Fraction(s) + j * Fraction(inc)), k + j
        prev_inc, prev_e = inc, e
    raise RuntimeError(f"stall_length({v!r}, {f.name!r}) did not settle: a bug in the skip-ahead")


@dataclass(frozen=True)
class SumMethod:
    """One way to add up terms: accumulator format, order, rounding and block size.

    ``SumMethod("bf16")`` is a sequential round-to-nearest sum in bf16;
    ``SumMethod("bf16", "blocked", block=64)``, ``SumMethod("bf16", "kahan")``,
    ``SumMethod("bf16", rounding="stochastic")`` the others of chapter 02. Names are converted
    to the format spec and the enums; ``label`` names the method in tables and plots.
    """

    acc: FloatFormat | str = "fp32"
    order: Order | str = Order.SEQUENTIAL
    rounding: Rounding | str = Rounding.NEAREST_EVEN
    block: int | None = None

    def __post_init__(self) -> None:
        f = _check_fmt(self.acc, "acc")
        order = _as_order(self.order)
        block = _check_block(order, self.block)
        object.__setattr__(self, "acc", f)
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "rounding", _as_rounding(self.rounding))
        object.__setattr__(self, "block", block)

    @property
    def label(self) -> str:
        """'bf16 sequential', 'bf16 blocked(64)', 'bf16 sequential, stochastic', ..."""
        how = f"blocked({self.block})" if self.order is Order.BLOCKED else self.order.value
        text = f"{self.acc.name} {how}"
        return text if self.rounding is Rounding.NEAREST_EVEN else f"{text}, {self.rounding.value}"

    def sum(self, x, rng: np.random.Generator | None = None, axis: int = -1) -> np.ndarray:
        """:func:`emulated_sum` of x along ``axis`` with this method (rng for stochastic rounding)."""
        return emulated_sum(x, self.acc, self.order, self.rounding, self.block, rng, axis)


@dataclass(frozen=True)
class SumErrors:
    """The errors of one :class:`SumMethod` over many sums (one per row of the data).

    relative: |s_hat - s| / |s| per row (s the exact sum; 0 where both are 0, inf where only s is).
    normwise: |s_hat - s| / sum_i |x_i| per row: the quantity the a-priori bounds control.
    """

    method: SumMethod
    relative: np.ndarray
    normwise: np.ndarray

    HEADERS: ClassVar[tuple[str, ...]] = ("method", "median rel. error", "worst rel. error",
                                          "median err / sum|x|", "worst err / sum|x|")

    def row(self) -> tuple:
        """(label, median and worst relative error, median and worst normwise error)."""
        r, w = self.relative, self.normwise
        return (self.method.label, float(np.median(r)), float(r.max()), float(np.median(w)), float(w.max()))


def _check_methods(methods) -> list[SumMethod]:
    ms = list(methods) if not isinstance(methods, SumMethod) else [methods]
    if not ms or not all(isinstance(m, SumMethod) for m in ms):
        raise TypeError("methods must be a non-empty list of SumMethod objects, e.g. [SumMethod('bf16')]")
    return ms


def sum_errors(x, methods: Iterable[SumMethod], rng: np.random.Generator | None = None) -> list[SumErrors]:
    """Sum every row of ``x`` (shape (T, n)) with each method and compare with the exact sums.

    The exact sums and sum_i |x_i| come from :func:`exact_sum`. rng: a Generator, needed when a
    method rounds stochastically (such methods draw from it one after the other). Returns one
    :class:`SumErrors` per method, in order. The errors are float64 differences of two float64
    numbers (relative accuracy 2**-53, far below anything measured).
    """
    ms = _check_methods(methods)
    X = np.asarray(x)
    if X.ndim != 2:
        raise ValueError(f"x must have shape (T, n): T sums of n terms each; got shape {X.shape}")
    X = _as_f64(X)
    exact = exact_sum(X)
    abs_sum = exact_sum(np.abs(X))
    out = []
    for m in ms:
        err = np.abs(m.sum(X, rng if m.rounding is Rounding.STOCHASTIC else None) - exact)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(err == 0, 0.0, err / np.abs(exact))
            nw = np.where(err == 0, 0.0, err / abs_sum)
        out.append(SumErrors(m, rel, nw))
    return out


def errors_vs_length(x, lengths, methods: Iterable[SumMethod], rng: np.random.Generator | None = None
                     ) -> dict[SumMethod, np.ndarray]:
    """Median relative error of each method's sums of the first n terms of every row, for each n.

    x: (T, N) terms; lengths: increasing ints, each at most N. Returns {method: float64 array of
    len(lengths)}, the median over the T rows of |s_hat - s| / |s| (:func:`sum_errors` on
    ``x[:, :n]``).
    """
    ms = _check_methods(methods)
    X = np.asarray(x)
    if X.ndim != 2:
        raise ValueError(f"x must have shape (T, N); got shape {X.shape}")
    ns = []
    for n in lengths:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"every length must be a positive int, got {n!r}")
        ns.append(int(n))
    if any(n > X.shape[1] for n in ns):
        raise ValueError(f"every length must be at most N = {X.shape[1]} (the terms available); got {ns}")
    out = {m: np.empty(len(ns)) for m in ms}
    for i, n in enumerate(ns):
        for res in sum_errors(X[:, :n], ms, rng):
            out[res.method][i] = float(np.median(res.relative))
    return out
