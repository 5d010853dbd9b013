"""Experiments: the inputs and sweeps behind the chapters' error studies.

Seeded GEMM inputs (:func:`gemm_inputs`, shared with the GPU measurements) and sweeps of GEMM
variants over K (:func:`gemm_sweep`); how far K goes before a GEMM's error reaches a threshold
(:func:`first_K_reaching`, one long accumulation carried on in chunks); error statistics of
summation methods over many sums (:func:`sum_errors`) and against the length of the sum
(:func:`errors_vs_length`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .accumulation import SumMethod, accumulator_format
from .formats import FloatFormat, get_format, ulp
from .metrics import exact_sum, relative_error
from .rounding import Rounding, round_to, update_threshold
from .validation import nonnegative_int, positive_int, real_float64

__all__ = [
    "gemm_inputs",
    "GemmSweep",
    "gemm_sweep",
    "KCrossing",
    "first_K_reaching",
    "SumErrors",
    "sum_errors",
    "errors_vs_length",
    "ulp_ladder",
]


_DISTS = ("normal", "uniform")


def gemm_inputs(M: int, K: int, N: int, seed: int = 0, dist: str = "normal") -> tuple[np.ndarray, np.ndarray]:
    """Random float64 test matrices A (M, K) and B (K, N) for the error-vs-K studies.

    Drawn from ``np.random.default_rng([seed, M, K, N])``: the same (seed, M, K, N) give the same
    matrices on every machine and in every script (the GPU benchmark uses this too), whatever
    other sizes are drawn. dist: ``"normal"`` (standard normal, products of both signs) or
    ``"uniform"`` (uniform on [0, 1): every product is positive and the sums grow like K).
    """
    M, K, N = (positive_int(n, v) for n, v in (("M", M), ("K", K), ("N", N)))
    seed = nonnegative_int("seed", seed)
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
        fref = None if reference is None else accumulator_format(reference, "reference")
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
        f = accumulator_format(out_fmt, "out_fmt")
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
    Ks = tuple(positive_int("each K", k) for k in Ks)
    if not Ks:
        raise ValueError("Ks is empty: give at least one K")
    M, N = positive_int("M", M), positive_int("N", N)
    outputs: dict[str, list[np.ndarray]] = {label: [] for label in variants}
    for K in Ks:
        A, B = gemm_inputs(M, K, N, seed, dist)
        for label, fn in variants.items():
            C = np.asarray(fn(A.copy(), B.copy()), dtype=np.float64)
            if C.shape != (M, N):
                raise ValueError(f"variant {label!r} returned shape {C.shape} for K={K}, expected {(M, N)}")
            outputs[label].append(C)
    return GemmSweep(Ks, M, N, int(seed), dist, outputs)


@dataclass(frozen=True)
class KCrossing:
    """What :func:`first_K_reaching` found: ``K``, the first K of the doubling whose error reached
    the threshold (None: none up to the largest K tried), and ``errors``, K -> relative error for
    every K computed, in order."""

    K: int | None
    errors: dict


def first_K_reaching(
    matmul: Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray],
    threshold: float,
    in_fmt: FloatFormat | str = "bf16",
    K_start: int = 2**14,
    K_max: int = 2**22,
    M: int = 8,
    N: int = 8,
    seed: int = 0,
    dist: str = "normal",
) -> KCrossing:
    """The first K (K_start, 2 K_start, ... up to K_max) at which a GEMM's relative error against
    the exact product of its ``in_fmt`` inputs reaches ``threshold``.

    One long product, computed once and read at every K: ``matmul(A, B, C)`` takes the next
    columns of A (M, k) and rows of B (k, N) and carries the accumulation on from C (M, N), the
    result so far (None at the start), as ``TensorCoreSpec.matmul(A, B, fmt, C=C)`` does. The
    chunks are K_start long, then each as long as all before it, so each K ends a chunk; a model
    whose group divides K_start sees the same groups as in one call over K. The data: chunk i
    drawn from ``np.random.default_rng([seed, M, N, i])`` (standard normal, or uniform on [0, 1)
    for ``dist="uniform"``), other matrices than :func:`gemm_inputs` gives. The reference is the
    float64 sum of the chunks' products of the rounded inputs.
    """
    if dist not in _DISTS:
        raise ValueError(f"dist must be one of {_DISTS}, got {dist!r}")
    threshold = real_float64(threshold)
    if threshold.ndim != 0 or not threshold > 0:
        raise ValueError(f"threshold must be positive, got {threshold}")
    K_start, K_max = positive_int("K_start", K_start), positive_int("K_max", K_max)
    if K_max < K_start:
        raise ValueError(f"K_max ({K_max}) is below K_start ({K_start})")
    M, N = positive_int("M", M), positive_int("N", N)
    seed = nonnegative_int("seed", seed)
    f = accumulator_format(in_fmt, "in_fmt")
    C, C_ref, K, errors = None, np.zeros((M, N)), 0, {}
    while K < K_max:
        k = K_start if K == 0 else min(K, K_max - K)
        rng = np.random.default_rng([seed, M, N, len(errors)])
        A, B = (
            (rng.standard_normal((M, k)), rng.standard_normal((k, N)))
            if dist == "normal"
            else (rng.random((M, k)), rng.random((k, N)))
        )
        C = np.asarray(matmul(A, B, C), dtype=np.float64)
        C_ref = C_ref + round_to(A, f) @ round_to(B, f)
        K += k
        errors[K] = relative_error(C, C_ref)
        if errors[K] >= threshold:
            return KCrossing(K, errors)
    return KCrossing(None, errors)


@dataclass(frozen=True)
class SumErrors:
    """The errors of one :class:`SumMethod` over many sums (one per row of the data).

    relative: |s_hat - s| / |s| per row (s the exact sum; 0 where both are 0, inf where only s is).
    normwise: |s_hat - s| / sum_i |x_i| per row: the quantity the a-priori bounds control.
    """

    method: SumMethod
    relative: np.ndarray
    normwise: np.ndarray

    HEADERS: ClassVar[tuple[str, ...]] = (
        "method",
        "median rel. error",
        "worst rel. error",
        "median err / sum|x|",
        "worst err / sum|x|",
    )

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
    X = real_float64(X)
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


def errors_vs_length(
    x, lengths, methods: Iterable[SumMethod], rng: np.random.Generator | None = None
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
        ns.append(positive_int("every length", n))
    if any(n > X.shape[1] for n in ns):
        raise ValueError(f"every length must be at most N = {X.shape[1]} (the terms available); got {ns}")
    out = {m: np.empty(len(ns)) for m in ms}
    for i, n in enumerate(ns):
        for res in sum_errors(X[:, :n], ms, rng):
            out[res.method][i] = float(np.median(res.relative))
    return out


def ulp_ladder(
    weights: Sequence[float], formats: Sequence[FloatFormat | str] = ("fp16", "bf16")
) -> tuple[list[tuple], list[str]]:
    """Rows and headers for a table: per weight, in each format, the spacing and the smallest update.

    For each weight w (rounded into each format first): the spacing (ulp) at w, the threshold
    :func:`~nbhelpers.rounding.update_threshold` below which an update is lost, and w divided by
    that threshold. Returns (rows, headers) for :func:`nbhelpers.tables.text_table` (chapter 04).
    """
    fmts = [get_format(f) for f in formats]
    headers = ["w"]
    for f in fmts:
        headers += [f"{f.name} ulp(w)", f"{f.name} lost below", f"{f.name} w/threshold"]
    rows = []
    for w in weights:
        row: list = [float(w)]
        for f in fmts:
            wf = float(round_to(w, f))
            thr = float(update_threshold(wf, f))
            row += [float(ulp(wf, f)), thr, round(abs(wf) / thr, 1)]
        rows.append(tuple(row))
    return rows, headers
