"""Error bounds of fp32-accumulated GEMMs (chapters 03, 09, 10): what any order of fp32 additions,
TF32 inputs, tensor-core truncation or a narrow output can do to ``C = a @ b``, elementwise.
Every Triton GEMM of the course (:mod:`nbhelpers.kernels`) is checked against it."""

from __future__ import annotations

import math

import torch

__all__ = ["INPUT_PRECISIONS", "error_bound"]

#: what ``tl.dot`` does to float32 operands: "ieee" (fp32 products) or "tf32" (inputs rounded to TF32)
INPUT_PRECISIONS = ("ieee", "tf32")
_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _gamma(n: int, u: float) -> float:
    if n * u >= 1:
        return math.inf
    return n * u / (1 - n * u)


def error_bound(
    a: torch.Tensor,
    b: torch.Tensor,
    input_precision: str = "ieee",
    tensor_core: bool = False,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """An elementwise bound on |C - a @ b| for an fp32-accumulated C, (M, N) float64.

    ``(gamma_K(2**-24) + gamma_K(2**-53)) * (|a| @ |b|)``: any order of K fp32 additions, each
    rounded to nearest, stays within gamma_K u of the sum of |products| (Higham, *Accuracy and
    Stability of Numerical Algorithms*, ch. 3), plus the float64 reference's own error. With
    fp32 inputs rounded to TF32 (``input_precision="tf32"``) each product may also be off by
    (2 u_tf32 + u_tf32**2) of itself, u_tf32 = 2**-11. ``tensor_core=True`` is for bf16/fp16
    inputs on tensor cores, which truncate: in the model of Fasi et al. (2021) one step (the
    accumulator c and a group of g products, aligned, truncated, summed, truncated to fp32) loses
    less than (g + 2) * 2**-23 * (|c| + sum of the group's |products|), so over K/g groups
    (g >= 4) the loss stays within about K * (1 + 2/g) * 2**-23 <= 3K * 2**-24 of the sum of all
    |products|: the bound is taken as gamma_{3K}(2**-24).

    ``out_dtype`` bfloat16 / float16 (the epilogue's cast of the fp32 tile, nearest-even) adds one
    rounding of at most u_out = 2**-8 / 2**-11 of the fp32 value, whose size is at most
    (1 + g) * (|a| @ |b|): the bound becomes (g + u_out * (1 + g)) * (|a| @ |b|).
    """
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    K = a.shape[1]
    u32 = 2.0**-24
    g = _gamma(3 * K if tensor_core else K, u32) + _gamma(K, 2.0**-53)
    if input_precision == "tf32" and a.dtype == torch.float32:
        u_tf = 2.0**-11
        g += 2 * u_tf + u_tf**2
    u_out = {torch.float32: 0.0, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}.get(out_dtype)
    if u_out is None:
        raise TypeError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    g += u_out * (1 + g)
    return g * (a.double().abs() @ b.double().abs())
