"""A model of how NVIDIA tensor cores accumulate: fused groups, alignment, truncation, promotion.

Chapter 03 builds the model, chapter 07 uses its promotion into fp32 (DeepSeek-V3's N_C = 128).
The model (Fasi, Higham, Mikaitis & Pranesh 2021, "Numerical behavior of NVIDIA tensor cores";
per-GPU settings from Khattak & Mikaitis 2025) is spelt out in :func:`tensor_core_matmul`; the
per-GPU settings are the table :data:`TENSOR_CORES` of :class:`TensorCoreSpec`; one fused
step is :func:`tensor_core_group_sum`, its alignment :func:`align_group`.
:func:`tensor_core_matmul_ref` is its slow reference (exact Fractions, integer shifts) for the
tests. :func:`accumulator_probe`, :func:`width_probe` and :func:`rounding_probe` build inputs
that tell accumulators apart through a bf16 output, :func:`probe_verdict` reads their outputs and
:func:`probe_accumulator` runs all of them on one matmul. The probes' outputs for a CPU are read
against, among others, :mod:`nbhelpers.accumulation`'s ``order="lanes"``: the order a CPU kernel
may add in instead of K order, the products spread over SIMD lanes and the lanes joined in a
halving tree.

Shapes: the matmuls take A (M, K) and B (K, N) and return (M, N) float64, looping over K in
steps of ``group`` and vectorised over M x N. Roundings use
the adder of :mod:`nbhelpers.accumulation`, correctly rounded from the exact sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .accumulation import RoundingAdder, accumulator_format, check_rounding_rng, fraction_to_float_odd, rounded_operands
from .formats import FloatFormat, get_format
from .rounding import Rounding, as_rounding, round_to
from .validation import is_int, positive_int, real_float64

__all__ = [
    "TensorCoreSpec",
    "TENSOR_CORES",
    "max_align_bits",
    "check_tensor_core_settings",
    "tensor_core_matmul",
    "tensor_core_matmul_ref",
    "align_group",
    "tensor_core_group_sum",
    "accumulator_probe",
    "width_probe",
    "rounding_probe",
    "probe_verdict",
    "ProbeResult",
    "probe_accumulator",
]


def max_align_bits(group: int) -> int:
    """Largest ``align_bits`` for which the aligned group sum (g products and the accumulator,
    each an integer multiple of 2**(E - align_bits) below 2**(align_bits + 1) in units of that)
    is exact in float64: align_bits + 1 + ceil(log2(group + 1)) <= 53."""
    return 52 - math.ceil(math.log2(group + 1))


_KM_REPO = "north-numerical-computing/MATLAB-tensor-core"
_FASI_REPO = "north-numerical-computing/tensor-cores-numerical-behavior"


@dataclass(frozen=True)
class TensorCoreSpec:
    """The measured settings of one GPU's tensor cores, for :func:`tensor_core_matmul`.

    ``align_bits``: bits kept below the leading bit after alignment (23 + the "extra alignment
    bits" of Khattak & Mikaitis' models); ``groups``: (input format, products per fused group);
    ``rounding``: (accumulator format, final rounding of each group's sum). ``None`` / empty where
    no source establishes the value: such a spec cannot run (:attr:`established` is False).
    ``source`` names where each number comes from; ``note`` says what the model leaves out.
    """

    gpu: str
    align_bits: int | None
    groups: tuple[tuple[str, int], ...]
    rounding: tuple[tuple[str, str], ...]
    source: str
    note: str = ""

    @property
    def established(self) -> bool:
        return self.align_bits is not None and bool(self.groups) and bool(self.rounding)

    @property
    def in_formats(self) -> tuple[str, ...]:
        return tuple(f for f, _ in self.groups)

    def group(self, in_fmt: str) -> int:
        """Products per fused group for inputs in ``in_fmt`` (``"fp16"``, ``"bf16"``, ``"tf32"``)."""
        self._check()
        table = dict(self.groups)
        if in_fmt not in table:
            raise ValueError(f"{self.gpu}: no tensor-core setting for {in_fmt!r} inputs (known: {', '.join(table)})")
        return table[in_fmt]

    def final_rounding(self, acc: str) -> str:
        """How each group's sum is rounded into an ``acc`` (``"fp32"`` or ``"fp16"``) accumulator."""
        self._check()
        table = dict(self.rounding)
        if acc not in table:
            raise ValueError(f"{self.gpu}: no setting for an {acc!r} accumulator (known: {', '.join(table)})")
        return table[acc]

    def matmul(self, A, B, in_fmt: str, acc: str = "fp32", C=None, out_fmt=None) -> np.ndarray:
        """:func:`tensor_core_matmul` with this GPU's group size, alignment and final rounding.
        A: (M, K), B: (K, N), C: (M, N) or None -> (M, N) float64."""
        return tensor_core_matmul(
            A,
            B,
            in_fmt,
            group=self.group(in_fmt),
            align_bits=self.align_bits,
            acc=acc,
            rounding=self.final_rounding(acc),
            out_fmt=out_fmt,
            C=C,
        )

    def _check(self) -> None:
        if not self.established:
            raise ValueError(f"{self.gpu}: tensor-core settings not established ({self.note})")


# The per-GPU settings. Each number is read from a file of a published repository (paths below,
# as stored at the commits named); tests/test_tensor_core_probes.py runs the model with these
# settings on the probe inputs of Fasi et al.'s suite and checks the outputs that suite expects.
TENSOR_CORES: dict[str, TensorCoreSpec] = {
    "V100": TensorCoreSpec(
        gpu="V100",
        align_bits=23,
        groups=(("fp16", 4),),  # Volta tensor cores take fp16 only: no bf16, no tf32
        rounding=(("fp32", "toward_zero"), ("fp16", "nearest_even")),
        source=(
            f"{_KM_REPO} models/V100TC.m (commit 109e412d): fma = 4, neab = 0, frmode = 'rz', "
            "'rne' for an fp16 output; probe outputs: "
            f"{_FASI_REPO} tc_test_numerics-V100.cu (commit 1a5c7447)"
        ),
    ),
    "T4": TensorCoreSpec(
        gpu="T4",
        align_bits=None,
        groups=(),
        rounding=(),
        source=(
            f"{_FASI_REPO} (Fasi et al. 2021) tested a T4, but its suite builds the T4 test from "
            "the file it shares with the A100 (tc_test_numerics-T4-A100-binary16.cu); "
            f"{_KM_REPO} has no T4 model"
        ),
        note="not established: no source read here gives the T4's alignment bits or group size on its own",
    ),
    "A100": TensorCoreSpec(
        gpu="A100",
        align_bits=24,
        groups=(("fp16", 8), ("bf16", 8), ("tf32", 4)),
        rounding=(("fp32", "toward_zero"), ("fp16", "nearest_even")),
        source=(
            f"{_KM_REPO} models/A100TC.m (commit 109e412d): fma = 8 (4 for tf32), neab = 1, "
            "frmode = 'rz', 'rne' for fp16 in and out; probe outputs: "
            f"{_FASI_REPO} tc_test_numerics-T4-A100-binary16.cu (commit 5a0b0018)"
        ),
    ),
    "H100": TensorCoreSpec(
        gpu="H100",
        align_bits=25,
        groups=(("fp16", 16), ("bf16", 16), ("tf32", 8)),
        rounding=(("fp32", "toward_zero"), ("fp16", "nearest_even")),
        source=(
            f"{_KM_REPO} models/H100TC.m (commit 07113e74): fma = 16 (8 for tf32), neab = 2, "
            "frmode = 'rz', 'rne' for fp16 in and out"
        ),
        note=(
            "fp8 inputs left out: the H100 model there joins two 16-product vectors (fma = 32) and "
            "keeps 10 bits fewer (neab = -10), which this model does not express; Fasi et al.'s "
            "suite gives no H100 outputs, so the H100 row is not checked against probes here"
        ),
    ),
}


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
    C=None,
) -> np.ndarray:
    """A model of how NVIDIA tensor cores accumulate: fused groups, alignment, truncation.

    A: (M, K), B: (K, N) -> (M, N) float64. ``C`` (M, N), optional: the accumulator's starting
    value (zeros by default), as in the hardware's D = C + A B.

    The model (Fasi, Higham, Mikaitis & Pranesh 2021, "Numerical behavior of NVIDIA tensor
    cores"; Khattak & Mikaitis 2025, bit-accurate models):

    1. inputs are rounded to ``in_fmt``; products are exact;
    2. the K products are taken ``group`` at a time (the last group may be shorter). For one
       group, the ``group`` products *and the incoming accumulator c* are aligned to the largest
       exponent E among them (E = floor(log2 |v|) of the largest magnitude) and each is truncated
       toward zero to a multiple of 2**(E - align_bits): exactly ``align_bits`` bits are kept
       below the leading bit position 2**E, and every bit below them is dropped, so a term smaller
       than 2**(E - align_bits) vanishes entirely. An IEEE adder would keep three more bits past
       the result's last bit and round with them: a *guard* bit (the first bit dropped), a *round*
       bit (the next) and a *sticky* bit (the OR of all the rest). The model keeps no such bits: it
       truncates. With ``align_bits = 23`` the kept width is fp32's (the V100); each extra
       alignment bit (A100: 24, H100: 25) is one more bit kept, still truncated below it;
    3. the truncated terms are added exactly (fixed point, so no carry is lost) and the result is
       rounded once into ``acc`` with ``rounding``: toward zero by default (truncation, what the
       GPUs measured do for an fp32 output);
    4. ``promote_every=N`` (a multiple of ``group``): after every N products the accumulator c is
       added into a separate fp32 accumulator (nearest-even) and reset to zero, as DeepSeek-V3 does
       for Hopper fp8 GEMMs (N_C = 128); the fp32 accumulator is the result.

    The defaults (``group=8``, ``align_bits=23``) are not any one GPU's settings: they are the
    course's running example. :data:`TENSOR_CORES` holds the measured per-GPU settings (group
    size per input format, alignment bits, final rounding, each with its source) and
    :meth:`TensorCoreSpec.matmul` runs this model with them. ``align_bits`` may be at most
    :func:`max_align_bits` (47 for group 16) so that step 3 is exact in float64. With a large
    ``align_bits`` and terms whose bits all lie within it, nothing is truncated and the model is
    exact grouped summation rounded once per group (tested).
    """
    f = accumulator_format(acc, "acc")
    mode = as_rounding(rounding)
    check_rounding_rng(mode, rng)
    g, align_bits, promote_every = check_tensor_core_settings(group, align_bits, promote_every)
    Aq, Bq = rounded_operands(A, B, in_fmt)
    M, K = Aq.shape
    N = Bq.shape[1]
    add = RoundingAdder(f, mode, rng)
    fp32 = RoundingAdder(get_format("fp32"), Rounding.NEAREST_EVEN, None)
    c = _initial_accumulator(C, M, N)
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


def _initial_accumulator(C, M: int, N: int) -> np.ndarray:
    if C is None:
        return np.zeros((M, N))
    c = real_float64(np.asarray(C))
    if c.shape != (M, N):
        raise ValueError(f"C must have shape (M, N) = {(M, N)}, got {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError("the tensor-core model covers finite values only (C has inf or NaN)")
    return c.copy()


def check_tensor_core_settings(group, align_bits, promote_every) -> tuple[int, int, int | None]:
    """(group, align_bits, promote_every) of :func:`tensor_core_matmul`, checked: a ValueError
    saying which is wrong and what is accepted."""
    positive_int("group", group)
    positive_int("align_bits", align_bits)
    hi = max_align_bits(group)
    if align_bits > hi:
        raise ValueError(
            f"align_bits={align_bits} is too large for group={group}: at most {hi}, so that the "
            "aligned group sum is exact in float64"
        )
    if promote_every is not None:
        if not is_int(promote_every) or promote_every < 1 or promote_every % group:
            raise ValueError(
                f"promote_every must be None or a positive multiple of group={group}, got {promote_every!r}"
            )
        promote_every = int(promote_every)
    return int(group), int(align_bits), promote_every


def _aligned_sum(terms: np.ndarray, align_bits: int) -> np.ndarray:
    """terms (G, ...) -> exact sum over axis 0 after truncating each to 2**(E - align_bits)."""
    amax = np.abs(terms).max(axis=0)
    _, ex = np.frexp(amax)  # amax = m * 2**ex, m in [0.5, 1): E = ex - 1 (zero gives ex = 0)
    inv_q = np.ldexp(1.0, align_bits - (ex - 1))  # 1/q = 2**(align_bits - E), a power of two
    kept = np.trunc(terms * inv_q)  # exact: scaling by a power of two, then truncation
    return kept.sum(axis=0) / inv_q  # exact: integers below 2**53, then a power-of-two scaling


def tensor_core_matmul_ref(
    A, B, in_fmt="bf16", group=8, align_bits=23, acc="fp32", rounding="toward_zero", promote_every=None, C=None
) -> np.ndarray:
    """Slow reference for :func:`tensor_core_matmul` (deterministic roundings): one output at a
    time, exact Fractions, the alignment written out with integer shifts. (M, N) float64."""
    f = get_format(acc)
    mode = as_rounding(rounding)
    g, align_bits, promote_every = check_tensor_core_settings(group, align_bits, promote_every)
    Aq, Bq = rounded_operands(A, B, in_fmt)
    M, K = Aq.shape
    N = Bq.shape[1]
    C0 = _initial_accumulator(C, M, N)
    C = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            c = Fraction(float(C0[i, j]))
            outer = Fraction(0)
            for k0 in range(0, K, g):
                vals = [c] + [Fraction(float(Aq[i, k])) * Fraction(float(Bq[k, j])) for k in range(k0, min(k0 + g, K))]
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
                c = Fraction(float(round_to(fraction_to_float_odd(total), f, mode)))
                if promote_every and ((min(k0 + g, K)) % promote_every == 0 or k0 + g >= K):
                    outer = Fraction(float(round_to(fraction_to_float_odd(outer + c), "fp32")))
                    c = Fraction(0)
            C[i, j] = float(outer if promote_every else c)
    return C


def align_group(values, align_bits: int = 23) -> tuple[int | None, np.ndarray]:
    """The alignment step of one tensor-core group (see :func:`tensor_core_matmul`).

    values: 1-D array of finite numbers (the incoming accumulator and the group's products).
    Returns (E, kept): E = floor(log2(max |v|)), the exponent everything is aligned to (None if
    all values are zero), and each value truncated toward zero to a multiple of
    2**(E - align_bits), as float64 of the same length (exact).
    """
    v = _group_values(values)
    positive_int("align_bits", align_bits)
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
    v = real_float64(v)
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
    terms = _group_values(np.concatenate([real_float64(c_).reshape(1), real_float64(p)]))
    f = accumulator_format(acc, "acc")
    mode = as_rounding(rounding)
    if mode is Rounding.STOCHASTIC:
        raise ValueError(
            "tensor_core_group_sum has no stochastic rounding; use nearest_even, nearest_away or toward_zero"
        )
    _, kept = align_group(terms, align_bits)
    total = float(kept.sum())  # exact: multiples of one power of two, below 2**53 units (max_align_bits)
    return float(round_to(total, f, mode))


# ------------------------------------------------------------------ probes through a bf16 output

_HI, _LO = 1.0 + 2.0**-7, 1.0  # the bf16 neighbours of the tie 1 + 2**-8 that every probe sums to


def accumulator_probe(
    K: int, tiny_first: bool, M: int = 1, N: int = 1, n_tiny: int = 4
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
    n_tiny >= 3). A bf16 accumulator loses them either way: 1.0. So does an fp32 accumulator
    in an order that puts the tiny terms into different partial sums (SIMD lanes,
    ``emulated_matmul(..., order="lanes")``), each lost when joined to the one holding the 1: the order decides
    this probe, which is why :func:`width_probe` and :func:`rounding_probe` exist.
    """
    K, M, N, n_tiny = (positive_int(n, v) for n, v in (("K", K), ("M", M), ("N", N), ("n_tiny", n_tiny)))
    if K < n_tiny + 2:
        raise ValueError(f"K={K} is too short for the probe: it needs K >= n_tiny + 2 = {n_tiny + 2}")
    if not isinstance(tiny_first, (bool, np.bool_)):
        raise TypeError(f"tiny_first must be True or False, got {tiny_first!r}")
    b = np.zeros(K)
    big, tiny = [1.0, 2.0**-8], [2.0**-25] * n_tiny
    b[: n_tiny + 2] = tiny + big if tiny_first else big + tiny
    return _probe_matrices(b, n_tiny + 2, M, N)


def width_probe(K: int, M: int = 1, N: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Matrices A (M, K), B (K, N) whose every output is 1 + 2**-8 + 2**-23 exactly: three
    products, 1, 2**-8 and 2**-23 (zeros after; all values bf16 values).

    Whether the accumulator holds fp32's 24 bits at 1, whatever its order and its rounding:
    every partial sum of the three, in any order or grouping (1 + 2**-8, 1 + 2**-23,
    2**-8 + 2**-23 and all three), is an fp32 number, so an accumulator that holds 24 bits at 1
    gets the exact sum, truncating or not (nothing is cut from an exact sum), and the bf16
    output rounds it up from the tie: 1 + 2**-7. One narrower than fp32 (bf16, or even one bit
    short) cannot hold 2**-23 beside the 1 and is left with the tie, which goes to even: 1.0.
    """
    return _three_product_probe(K, M, N, 2.0**-23)


def rounding_probe(K: int, M: int = 1, N: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Matrices A (M, K), B (K, N) whose every output is 1 + 2**-8 + 3 * 2**-25 exactly: three
    products, 1, 2**-8 and 3 * 2**-25 (zeros after; all values bf16 values).

    Whether the accumulator rounds to nearest at fp32's width or wider, whatever its order:
    3 * 2**-25 is three quarters of fp32's spacing 2**-23 at 1. Rounded to nearest, every order
    ends at 1 + 2**-8 + 2**-23 (1 + 3 * 2**-25 rounds up to 1 + 2**-23; 2**-8 + 3 * 2**-25 is
    exact and rounds up when the 1 joins it; 1 + 2**-8 is exact and rounds up when the small
    one joins it), and so does an exact or wider sum rounded once: the bf16 output gives
    1 + 2**-7. Truncation toward zero at fp32's width cuts the 3 * 2**-25, and so does a
    tensor-core alignment to the 1 with 23 or 24 bits kept (or a final truncation into fp32
    after more): the tie is left, 1.0. So is it for any accumulator narrower than fp32.
    """
    return _three_product_probe(K, M, N, 3 * 2.0**-25)


def _three_product_probe(K, M, N, small: float) -> tuple[np.ndarray, np.ndarray]:
    K, M, N = (positive_int(n, v) for n, v in (("K", K), ("M", M), ("N", N)))
    if K < 3:
        raise ValueError(f"K={K} is too short for the probe: it needs K >= 3 (three products)")
    b = np.zeros(K)
    b[:3] = [1.0, 2.0**-8, small]
    return _probe_matrices(b, 3, M, N)


def _probe_matrices(b: np.ndarray, n: int, M: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.zeros(b.size)
    a[:n] = 1.0
    return np.tile(a, (M, 1)), np.tile(b[:, None], (1, N))


# what the tiny terms of accumulator_probe say, (tiny first kept, tiny last kept) -> sentence:
# alone, and once width_probe and rounding_probe have shown an accumulator at least fp32 wide
_ORDER_ALONE = {
    (True, True): (
        "kept in either order: more than fp32's 24 bits carried along (wider than fp32, "
        "exact, or compensated summation), or an order that adds the tiny terms together first"
    ),
    (True, False): (
        "kept only when first: at least fp32's 24 bits at 1, in an order that adds the tiny "
        "terms together before the 1 when they come first (K order, or a tree or blocks over "
        "neighbouring products), and each one to the 1 when they come last"
    ),
    (False, True): "kept only when last: at least fp32's 24 bits at 1, in an order that adds the later products first",
    (False, False): (
        "lost in either order: narrower than fp32, a truncating step, or fp32 accumulation in "
        "another order (SIMD lanes or a tree) that adds each tiny term to a partial sum holding 1"
    ),
}
_ORDER_WIDE = {
    (True, True): (
        "the tiny terms kept in either order: more than 24 bits carried along (a wider or exact "
        "sum, or compensated summation), or an order that adds the tiny terms together first"
    ),
    (True, False): (
        "the tiny terms kept only when first: they add up before they meet the 1 (K order, or a "
        "tree or blocks over neighbouring products), and are lost one by one after it"
    ),
    (False, True): "the tiny terms kept only when last: an order that adds the later products first",
    (False, False): (
        "the tiny terms lost in either order: another order (SIMD lanes or a tree), where they "
        "land in different partial sums and each is lost when joined to the one holding 1"
    ),
}
_TRUNCATED_LOST = (
    "the tiny terms lost in either order: each cut when aligned to the 1 (as in a tensor core), "
    "or an order that adds each one to a partial sum holding 1"
)
_TRUNCATED_KEPT = (
    "the tiny terms kept in either order: more than 24 bits kept before a final truncation "
    "into fp32 (as the H100 model's 25), or an order that adds the tiny terms together first"
)


def probe_verdict(
    tiny_first: float, tiny_last: float, width: float | None = None, rounding: float | None = None
) -> str:
    """What the bf16 outputs of the probes say about the accumulator that produced them; a sentence.

    ``tiny_first``, ``tiny_last``: the outputs of :func:`accumulator_probe` with the tiny terms
    first and last; ``width``, ``rounding``: those of :func:`width_probe` and
    :func:`rounding_probe` (both or neither). Each is 1.0 or 1 + 2**-7; anything else is
    reported as unexpected. Read against accumulators of any width and any order that round each
    addition to nearest or toward zero (tensor-core alignment included), with an output rounded
    to bf16 by nearest-even; the verdict names every such explanation the outputs leave open.
    The order probe alone cannot tell fp32 in another order from a narrower or truncating
    accumulator (all lose the tiny terms in either order); the other two can.
    """
    if (width is None) != (rounding is None):
        raise ValueError("give both width and rounding (the outputs of width_probe and rounding_probe), or neither")
    outs = {"tiny first": tiny_first, "tiny last": tiny_last}
    if width is not None:
        outs |= {"width": width, "rounding": rounding}
    outs = {k: float(v) for k, v in outs.items()}
    odd = {k: v for k, v in outs.items() if v not in (_HI, _LO)}
    if odd:
        return f"unexpected outputs {odd}: each probe gives 1 or 1 + 2**-7 after a bf16 rounding"
    key = (outs["tiny first"] == _HI, outs["tiny last"] == _HI)
    if width is None:
        return _ORDER_ALONE[key]
    wide, nearest = outs["width"] == _HI, outs["rounding"] == _HI
    if not wide:
        if nearest or any(key):
            return (
                f"inconsistent outputs {outs}: 2**-23 lost beside the 1, yet smaller terms kept; "
                "no accumulator that rounds to nearest or toward zero does that"
            )
        return (
            "narrower than fp32: fewer than 24 bits at 1 lose the 2**-23 that fp32 holds exactly "
            "(a bf16 accumulator, say), or the conversion to bf16 does not round to nearest"
        )
    if nearest:
        return f"fp32 or wider, rounding to nearest; {_ORDER_WIDE[key]}"
    order = {(True, True): _TRUNCATED_KEPT, (False, False): _TRUNCATED_LOST}.get(key, _ORDER_WIDE[key])
    return (
        "fp32 or wider, but a step truncates: bits below fp32's spacing at 1 are cut, not rounded "
        f"(toward-zero rounding, or a tensor-core-style alignment); {order}"
    )


@dataclass(frozen=True)
class ProbeResult:
    """The bf16 outputs of the four probes for one matmul (see :func:`probe_accumulator`).

    ``tiny_first``, ``tiny_last``: :func:`accumulator_probe` with the tiny terms first and last;
    ``width``: :func:`width_probe`; ``rounding``: :func:`rounding_probe`; each C[0, 0].
    ``uniform``: whether every output of each probe's (M, N) matrix equals its C[0, 0] (the
    inputs make all of them equal; a kernel may still treat some tiles differently).
    """

    tiny_first: float
    tiny_last: float
    width: float
    rounding: float
    uniform: bool = True

    @property
    def verdict(self) -> str:
        v = probe_verdict(self.tiny_first, self.tiny_last, self.width, self.rounding)
        return v if self.uniform else f"outputs differ across C; C[0, 0] says: {v}"


def probe_accumulator(
    matmul: Callable[[np.ndarray, np.ndarray], np.ndarray], K: int, M: int = 1, N: int = 1
) -> ProbeResult:
    """Run the four probes through ``matmul`` (A (M, K), B (K, N) -> C (M, N), numbers or an
    array) and read each C through a bf16 rounding (nearest-even: a no-op on bf16 outputs).
    K >= 6 (the order probe's six products); returns a :class:`ProbeResult`."""
    K, M, N = (positive_int(n, v) for n, v in (("K", K), ("M", M), ("N", N)))
    inputs = {
        "tiny_first": accumulator_probe(K, True, M, N),
        "tiny_last": accumulator_probe(K, False, M, N),
        "width": width_probe(K, M, N),
        "rounding": rounding_probe(K, M, N),
    }
    out, uniform = {}, True
    for name, (A, B) in inputs.items():
        C = np.asarray(matmul(A, B), dtype=np.float64)
        if C.shape != (M, N):
            raise ValueError(f"matmul returned shape {C.shape} for A {A.shape} @ B {B.shape}; expected {(M, N)}")
        C = round_to(C, "bf16")
        out[name] = float(C[0, 0])
        uniform &= bool(np.all(C == C[0, 0]))
    return ProbeResult(**out, uniform=uniform)
