"""The rounding adder: sums, dot products and GEMMs with every addition rounded into a format.

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
format, each added into an outer accumulator), ``kahan`` (compensated summation with the sum and
the compensation both held in the accumulator format, every operation rounded) and ``lanes`` (the
order of a SIMD kernel: ``block`` lanes, each sequential, joined by a halving tree).

A :class:`SumMethod` bundles the accumulator format, the order, the rounding and the block size,
validated once; every entry point here builds one first.

Shared with the modules built on the adder (:mod:`nbhelpers.tensor_cores`, :mod:`nbhelpers.metrics`,
:mod:`nbhelpers.experiments`), and not part of the course's API (so not in ``__all__``):
:class:`RoundingAdder` (one correctly rounded addition or rounding, vectorised),
:func:`accumulator_format`, :func:`check_rounding_rng`, :func:`rounded_operands`,
:func:`fraction_to_float_odd` and :func:`reduction_columns`.

Shapes: :func:`emulated_sum` and :func:`running_sum` reduce one axis of any array;
:func:`emulated_dot` the last axis of two broadcastable arrays; :func:`emulated_matmul` takes
(M, K) and (K, N) and returns (M, N) float64. All loop over the reduction index only; each step is
vectorised over everything else. :func:`addend_loss` and :func:`stall_length` look at a single
addition and at the point where a sum stops growing.

:func:`emulated_matmul_ref` is the slow reference (one output at a time, with
:func:`nbhelpers.rounding.round_to` and exact rational arithmetic) for the tests. The tensor-core
model (fused groups, alignment, truncation, promotion) builds on the adder in
:mod:`nbhelpers.tensor_cores`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .formats import FloatFormat, Specials, get_format
from .rounding import Rounding, as_rounding, round_to
from .validation import enum_member, positive_int, real_float64, stochastic_rng

__all__ = [
    "Order",
    "SumMethod",
    "emulated_sum",
    "emulated_dot",
    "emulated_matmul",
    "emulated_matmul_ref",
    "running_sum",
    "addend_loss",
    "stall_length",
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
    LANES       the order of a CPU kernel that spreads a sum over ``block`` SIMD lanes (a power of
                two): term k goes into lane k % block, each lane a sequential sum, then the lanes
                are joined by a halving tree, as a horizontal reduction does (lane i += lane
                i + block/2 for every i < block/2, then the same on the first half, down to one).
                ``block=1`` is SEQUENTIAL. Terms that SEQUENTIAL adds together first can land in
                different lanes and meet only in the tree.
    """

    SEQUENTIAL = "sequential"
    PAIRWISE = "pairwise"
    BLOCKED = "blocked"
    KAHAN = "kahan"
    LANES = "lanes"


def _as_order(order: Order | str) -> Order:
    return enum_member(Order, order, "order")


def _check_block(order: Order, block) -> int | None:
    if order is Order.BLOCKED:
        if block is None:
            raise ValueError("order='blocked' needs block=k, the number of terms per partial sum")
        return positive_int("block", block)
    if order is Order.LANES:
        if block is None:
            raise ValueError("order='lanes' needs block=L, the number of SIMD lanes (a power of two)")
        lanes = positive_int("block", block)
        if lanes & (lanes - 1):
            raise ValueError(
                f"order='lanes' needs a power of two for block (the halving tree joins lane i "
                f"and i + block/2), got {lanes}"
            )
        return lanes
    if block is not None:
        raise ValueError(f"block={block!r} is only used with order='blocked' or 'lanes' (order is {order.value!r})")
    return None


def _join_lanes(lanes: list, add: Callable) -> object:
    """The halving tree of Order.LANES: lane i += lane i + L/2, down to one lane."""
    while len(lanes) > 1:
        h = len(lanes) // 2
        lanes = [add(lanes[i], lanes[i + h]) for i in range(h)]
    return lanes[0]


def check_rounding_rng(mode: Rounding, rng) -> None:
    """Raise unless ``rng`` suits ``mode``: stochastic rounding needs a numpy Generator."""
    if mode is Rounding.STOCHASTIC:
        stochastic_rng(rng)


def accumulator_format(fmt, what: str) -> FloatFormat:
    """The format ``fmt`` (a name or a FloatFormat) if it can hold a running sum; the argument is
    called ``what`` in the error (e8m0fnu, a scale format with no zero and no sign, cannot)."""
    f = get_format(fmt)
    if f.specials is Specials.POWER_OF_TWO:
        raise ValueError(f"{what}={f.name!r} is a scale format (no zero, no sign); it cannot accumulate")
    return f


# ====================================================================== one rounded addition

_ABS = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_LOW29 = np.int64((1 << 29) - 1)  # the float64 significand bits an fp32 number leaves zero


class RoundingAdder:
    """fl(s + x) in a format, correctly rounded from the exact sum (see the module docstring).

    Fast path: round the float64 sum t = fl64(s + x) in the integer domain of its bit pattern
    (valid in the target's normal range). Lanes where that could be wrong go through a slow path
    (TwoSum, round to odd, ``round_to``): t outside the target's normal range (subnormal,
    overflow, inf, NaN), and t exactly on a *critical point* where the float64 rounding of the
    exact sum may have decided the outcome: a target midpoint for the nearest modes, a target
    grid point for toward-zero. Elsewhere no target grid point or midpoint lies between v and t
    (both are float64 numbers, and t is the nearest float64 to v), so t rounds like v.
    Stochastic rounding always takes the slow path.

    Before both, for an fp32 target with nearest-even rounding: where s and x are both fp32 numbers,
    numpy's float32 addition is that correctly rounded sum (IEEE 754 binary32, subnormals included),
    four times cheaper on a GEMM of bf16 inputs; a sum that overflows, or an operand that is not an
    fp32 number (a product of two fp32 numbers, say), goes the way above.
    """

    def __init__(self, f: FloatFormat, mode: Rounding, rng):
        self.f, self.mode, self.rng = f, mode, rng
        self.native32 = f.name == "fp32" and mode is Rounding.NEAREST_EVEN
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
            self._bufs[shape] = (
                np.empty(shape, np.int64),
                np.empty(shape, np.int64),
                np.empty(shape, np.bool_),
                np.empty(shape, np.bool_),
            )
        return self._bufs[shape]

    def add(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        """A new array fl(s + x); s and x broadcast."""
        if self.native32:
            r = self._add_native32(s, x)
            if r is not None:
                return r
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

    @staticmethod
    def _add_native32(s, x) -> np.ndarray | None:
        """fl32(s + x) by numpy's float32 addition, as float64; None unless s and x are both
        fp32 numbers (NaN is not) and no sum overflows."""
        if isinstance(x, np.ndarray) and x.dtype == np.float64 and np.bitwise_and(x.view(np.int64), _LOW29).any():
            return None  # a float64 with any of its 29 low significand bits set is no fp32 number
        with np.errstate(over="ignore", invalid="ignore"):  # past fp32: inf, not equal; inf - inf: NaN
            x32 = np.asarray(x, np.float32)
            if not np.array_equal(x32, x):  # the term first: a product of fp32 numbers fails here
                return None
            s32 = np.asarray(s, np.float32)
            if not np.array_equal(s32, s):
                return None
            r = np.add(s32, x32)
        if not np.isfinite(r).all():
            return None
        return r.astype(np.float64)

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
    method: SumMethod,
    rng,
) -> np.ndarray:
    """Sum term(0) + ... + term(n-1) (arrays of ``shape``) with ``method`` (format, order, rounding)."""
    add = RoundingAdder(method.acc, method.rounding, rng)
    order, block = method.order, method.block
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
    if order is Order.LANES:
        lanes = [zero] * block
        for k in range(n):
            lanes[k % block] = add.add(lanes[k % block], term(k))
        return _join_lanes(lanes, add.add)
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
    order: ``"sequential"``, ``"pairwise"``, ``"blocked"`` (with ``block=k``), ``"kahan"`` or
        ``"lanes"`` (with ``block=L``, a power of two); see :class:`Order`.
    rounding: ``"nearest_even"``, ``"nearest_away"``, ``"toward_zero"`` or ``"stochastic"``
        (with ``rng``, a numpy Generator; the same generator state gives the same result).

    The loop runs over the reduced axis only; each step rounds the whole batch at once.
    """
    method = SumMethod(acc, order, rounding, block)
    method.check_rng(rng)
    if np.ndim(x) == 0:
        raise ValueError("emulated_sum needs an array with at least one axis to reduce")
    cols, batch, n = reduction_columns(x, axis, in_fmt)  # (n, batch): row k holds term k of every sum
    out = _accumulate(lambda k: cols[k], n, (cols.shape[1],), method, rng)
    return out.reshape(batch)


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
    fi = accumulator_format(in_fmt, "in_fmt")
    prods = round_to(a_, fi) * round_to(b_, fi)  # exact in float64
    return emulated_sum(prods, acc, order, rounding, block, rng)


def rounded_operands(A, B, in_fmt) -> tuple[np.ndarray, np.ndarray]:
    """A (M, K) and B (K, N) checked for shape and rounded to ``in_fmt``, as float64."""
    A_, B_ = np.asarray(A), np.asarray(B)
    if A_.ndim != 2 or B_.ndim != 2 or A_.shape[1] != B_.shape[0]:
        raise ValueError(f"matmul needs A of shape (M, K) and B of shape (K, N); got A {A_.shape} and B {B_.shape}")
    fi = accumulator_format(in_fmt, "in_fmt")
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
    method = SumMethod(acc, order, rounding, block)
    method.check_rng(rng)
    Aq, Bq = rounded_operands(A, B, in_fmt)
    At = np.ascontiguousarray(Aq.T)  # row k of At is column k of A
    M, K = Aq.shape
    N = Bq.shape[1]
    C = _accumulate(lambda k: np.multiply.outer(At[k], Bq[k]), K, (M, N), method, rng)
    return C if out_fmt is None else round_to(C, out_fmt)


def emulated_matmul_ref(
    A, B, in_fmt="bf16", acc="fp32", order="sequential", rounding="nearest_even", block=None
) -> np.ndarray:
    """Slow reference for :func:`emulated_matmul` (deterministic roundings): one output at a time,
    every addition done exactly with Fractions and rounded once with ``round_to``. (M, N) float64."""
    method = SumMethod(acc, order, rounding, block)
    f, mode = method.acc, method.rounding
    if mode is Rounding.STOCHASTIC:
        raise ValueError("the reference has no stochastic rounding")
    Aq, Bq = rounded_operands(A, B, in_fmt)
    M, K = Aq.shape
    N = Bq.shape[1]

    def fl(v: Fraction) -> Fraction:
        return Fraction(float(round_to(fraction_to_float_odd(v), f, mode)))

    def add(s: Fraction, t: Fraction) -> Fraction:
        return fl(s + t)

    C = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            terms = [Fraction(float(Aq[i, k])) * Fraction(float(Bq[k, j])) for k in range(K)]
            C[i, j] = float(_sum_ref(terms, add, method.order, method.block))
    return C


def fraction_to_float_odd(v: Fraction) -> float:
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
            for t in terms[i : i + block]:
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
    if order is Order.LANES:
        lanes = [zero] * block
        for k, t in enumerate(terms):
            lanes[k % block] = add(lanes[k % block], t)
        return _join_lanes(lanes, add)
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


def reduction_columns(x, axis: int, in_fmt=None) -> tuple[np.ndarray, tuple, int]:
    """x as float64 columns (n, batch) for a reduction along ``axis``: (cols, batch shape, n)."""
    arr = np.asarray(x)
    if arr.ndim == 0:
        raise ValueError("expected an array with at least one axis to sum along, got a scalar")
    arr = round_to(arr, in_fmt) if in_fmt is not None else real_float64(arr)
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
    method = SumMethod(acc, Order.SEQUENTIAL, rounding)
    method.check_rng(rng)
    cols, batch, n = reduction_columns(x, axis, in_fmt)
    add = RoundingAdder(method.acc, method.rounding, rng)
    out = np.empty_like(cols)
    s = np.zeros(cols.shape[1])
    for k in range(n):
        s = add.add(s, cols[k])
        out[k] = s
    return np.moveaxis(out.T.reshape(*batch, n), -1, axis)


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
    f = accumulator_format(acc, "acc")
    mode = as_rounding(rounding)
    if mode is Rounding.STOCHASTIC:
        raise ValueError(
            "addend_loss measures one deterministic rounding; use nearest_even, nearest_away or toward_zero"
        )
    s_, a_ = np.broadcast_arrays(real_float64(np.asarray(s)), real_float64(np.asarray(a)))
    shape = s_.shape
    s_, a_ = s_.reshape(-1).copy(), a_.reshape(-1).copy()
    if not (np.isfinite(s_).all() and np.isfinite(a_).all()):
        raise ValueError("addend_loss needs finite s and a (got inf or NaN)")
    if (a_ == 0).any():
        raise ValueError("addend_loss divides by |a|: every addend a must be nonzero")
    r = RoundingAdder(f, mode, None).add(s_, a_)
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
    f = accumulator_format(acc, "acc")
    mode = as_rounding(rounding)
    if mode is Rounding.STOCHASTIC:
        raise ValueError(
            "stochastic rounding does not stall; stall_length takes nearest_even, nearest_away or toward_zero"
        )
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"value must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"value must be positive and finite, got {value!r}")
    add = RoundingAdder(f, mode, None)
    vv = np.array([v])
    top_value = f.max

    def step(s: float) -> float:
        return float(add.add(np.array([s]), vv)[0])

    s, k = 0.0, 0
    prev_inc, prev_e = None, None
    for _ in range(100_000):  # single steps; the skips keep this far below the limit
        t = step(s)
        if not math.isfinite(t):
            raise ValueError(f"the sum of {v!r} in {f.name} overflows to {t} after {k} terms, before it stalls")
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
    """One way to add up terms: accumulator format, order, rounding and block size, validated.

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
        f = accumulator_format(self.acc, "acc")
        order = _as_order(self.order)
        block = _check_block(order, self.block)
        object.__setattr__(self, "acc", f)
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "rounding", as_rounding(self.rounding))
        object.__setattr__(self, "block", block)

    @property
    def label(self) -> str:
        """'bf16 sequential', 'bf16 blocked(64)', 'bf16 sequential, stochastic', ..."""
        how = f"{self.order.value}({self.block})" if self.block is not None else self.order.value
        text = f"{self.acc.name} {how}"
        return text if self.rounding is Rounding.NEAREST_EVEN else f"{text}, {self.rounding.value}"

    def check_rng(self, rng) -> None:
        """Raise unless ``rng`` suits this method: a numpy Generator when it rounds stochastically."""
        check_rounding_rng(self.rounding, rng)

    def sum(self, x, rng: np.random.Generator | None = None, axis: int = -1) -> np.ndarray:
        """:func:`emulated_sum` of x along ``axis`` with this method (rng for stochastic rounding)."""
        return emulated_sum(x, self.acc, self.order, self.rounding, self.block, rng, axis)
