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
from fractions import Fraction
from typing import Callable

import numpy as np

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
    if isinstance(order, Order):
        return order
    if isinstance(order, str):
        try:
            return Order(order.strip().lower())
        except ValueError:
            pass
    known = ", ".join(repr(o.value) for o in Order)
    raise ValueError(f"unknown order {order!r}; expected one of: {known} (or an Order member)")


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
