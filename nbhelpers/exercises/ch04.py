"""Chapter 04 exercises: master weights. Listed in ``EXERCISES`` for :mod:`nbhelpers.checks`.

Arrays are numpy float32; bf16 values travel as float32 arrays that hold bf16 values (every bf16
value is a float32 value). The references are the training loop's own update functions in
:mod:`nbhelpers.training` (tested against numpy/ml_dtypes in tests/test_training.py);
results must match bit for bit, because the specs fix every rounding.
"""
from __future__ import annotations

import numpy as np
import torch

from ..checks import Case, Exercise
from ..rounding import round_to
from ..training import kahan_update, sgd_master_step

_LRS = [1e-3, 3e-4, 1e-2, 0.1, 1e-4, 0.5]


def _bf16(x) -> np.ndarray:
    """float32 array of the bf16 values nearest to x."""
    return round_to(np.asarray(x, dtype=np.float64), "bf16").astype(np.float32)


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return rng.choice([-1.0, 1.0], size=n) * np.exp2(rng.uniform(lo, hi, size=n))


def _bf16_ties(w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """float32 midpoints between each bf16 value of w (finite, nonzero) and its neighbour one
    step up or down in magnitude: exact ties, which random data almost never gives."""
    bits = w.astype(np.float32).view(np.uint32).astype(np.int64)
    step = np.where((rng.random(w.size) < 0.5) & ((bits & 0x7FFFFFFF) > 0x10000), -0x10000, 0x10000)
    neighbour = (bits + step).astype(np.uint32).view(np.float32)
    return ((w.astype(np.float64) + neighbour) / 2).astype(np.float32)  # exact: 9 bits


# ------------------------------------------------------------------ 1. the master-weight step


def master_weight_step_ref(master: np.ndarray, grad: np.ndarray, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """(new fp32 master, its bf16 copy as float32): SGD with lr, all arithmetic in float32."""
    return sgd_master_step(master, grad, lr)


def _master_cases(rng: np.random.Generator) -> list[Case]:
    t = 2.0**-12
    cases = [
        Case((_f32([1.0]), _bf16([1.0]), 1e-3), label="update below half a bf16 spacing: the copy stays at 1"),
        Case((_f32([1.0, -1.0, 0.25]), _bf16([-1.0, 1.0, 2.0]), 1e-3), label="master moves, copy does not"),
        Case((_f32([1 + 2.0**-8 + t]), _f32([t]), 1.0), label="new master is a bf16 tie: to even (1.0)"),
        Case((_f32([1 + 3 * 2.0**-8 + t]), _f32([t]), 1.0), label="new master is a bf16 tie: to even (up)"),
        Case((_f32([0.3, -0.7, 5.0]), _bf16([0.1, 0.2, 0.3]), 0.1), label="lr 0.1 is not a float32 value"),
        Case((_f32([0.0, -0.0, 2.5]), _f32([0.0, 0.0, 0.0]), 1e-3), label="zero gradient, signed zeros"),
        Case((_f32([1e-30, 3.0]), _bf16([1e-10, 1e-30]), 1e-30), label="the product underflows float32"),
        Case((_f32(np.zeros((2, 3))), _bf16(np.arange(6).reshape(2, 3)), 0.25), label="a 2-d tensor"),
    ]
    for _ in range(60):
        n = int(rng.integers(1, 65))
        master = _f32(_log_uniform(rng, -10, 3, n))
        grad = _bf16(_log_uniform(rng, -14, 2, n))
        lr = float(rng.choice(_LRS)) if rng.random() < 0.6 else float(np.exp(rng.uniform(np.log(1e-5), np.log(1e-1))))
        if rng.random() < 0.4:
            # some new masters exactly on a bf16 tie (to even, not away), some products that
            # underflow float32, some signed zeros
            tie = _bf16_ties(_bf16(master), rng)
            step = np.float32(lr) * grad
            moved = tie + step  # a master that the step brings back to the tie, where that is exact
            exact = (moved - step) == tie
            pick = rng.random(n)
            master = np.where(pick < 0.4, np.where(exact, moved, tie), master)
            grad = np.where((pick < 0.4) & ~exact, 0, grad)
            grad = np.where((pick >= 0.4) & (pick < 0.55), _bf16(_log_uniform(rng, -140, -125, n)), grad)
            master = _f32(np.where(pick >= 0.9, rng.choice([0.0, -0.0]), master))
            grad = _f32(np.where(pick >= 0.95, 0, grad))
        cases.append(Case((master, grad, lr)))
    return cases


# ------------------------------------------------------------------ 2. a Kahan-compensated bf16 update


def kahan_step_ref(w: np.ndarray, c: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(new weights, new compensation), both bf16 values as float32 arrays."""
    wt = torch.from_numpy(np.array(w, dtype=np.float32)).to(torch.bfloat16)
    ct = torch.from_numpy(np.array(c, dtype=np.float32)).to(torch.bfloat16)
    s, c_new = kahan_update(wt, ct, torch.from_numpy(np.array(delta, dtype=np.float32)))
    return s.float().numpy(), c_new.float().numpy()


def _kahan_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((_bf16([1.0]), _bf16([0.0]), _f32([1e-3])), label="too small to move w: kept in c"),
        Case((_bf16([1.0]), _bf16([-0.003]), _f32([1e-3])), label="c adds earlier losses back: w moves"),
        Case((_bf16([1.0, -2.0]), _bf16([-0.001, 0.002]), _f32([0.0, 0.0])), label="zero update, pending c"),
        Case((_bf16([0.5, 0.5]), _bf16([0.0, 0.0]), _f32([-1e-3, -3e-3])), label="negative updates"),
        Case((_bf16([0.0, 1e-3]), _bf16([0.0, 0.0]), _f32([1e-5, 0.25])), label="zero weight; large update"),
        Case((_bf16([1.0]), _bf16([0.0]), _f32([2.0**-8])), label="update of exactly half a spacing (tie)"),
    ]
    for _ in range(60):
        n = int(rng.integers(1, 65))
        w = _bf16(_log_uniform(rng, -8, 2, n))
        delta = _f32(np.abs(w) * _log_uniform(rng, -13, -3, n))
        c = _bf16(np.abs(w) * _log_uniform(rng, -12, -9, n) * (rng.random(n) < 0.8))
        if rng.random() < 0.4:  # some elements with w + y exactly on a bf16 tie (to even, not away)
            y = _bf16_ties(w, rng) - w  # exact: half a spacing
            d = y + c  # float32
            exact = (d - c) == y
            tie = rng.random(n) < 0.4
            delta = _f32(np.where(tie, np.where(exact, d, y), delta))
            c = _f32(np.where(tie & ~exact, 0, c))
        cases.append(Case((w, c, delta)))
    return cases


EXERCISES = [
    Exercise("ex04.master_weight_step", "The master-weight update step", 3, master_weight_step_ref,
             _master_cases),
    Exercise("ex04.kahan_step", "A Kahan-compensated bf16 update", 4, kahan_step_ref, _kahan_cases),
]
