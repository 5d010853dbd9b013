"""GPU measurements of GEMM numerics: what chapter 03's emulations are compared with.

:func:`measure_gemm_errors` runs torch's GEMM and the Triton kernel of :mod:`nbhelpers.kernels.gemm`
on :func:`nbhelpers.experiments.gemm_inputs` data for each K and measures their errors (and, for
the kernel's bf16 path, how often its outputs are bit-identical to each model of
:data:`BF16_MODELS`, the A100's and the H100's tensor-core settings among them).
:func:`gpu_run` wraps that as a results file holds it, labelled with the GPU, the date, the
script and the versions; ``benchmarks/gpu_gemm_numerics.py`` writes it to
``benchmarks/results/`` and :func:`nbhelpers.results.recorded_gpu_runs` reads it back.

Like :mod:`nbhelpers.kernels`, import this after :func:`nbhelpers.device.setup_device`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import torch
import triton

from .accumulation import emulated_matmul
from .experiments import gemm_inputs
from .families.gemm import GemmNumericsSeries
from .gemm_runs import run_matmul, torch_matmul
from .kernels import INTERPRETED, default_device
from .metrics import relative_error
from .results import GEMM_NUMERICS
from .rounding import round_to
from .tensor_cores import TENSOR_CORES, tensor_core_matmul

__all__ = ["GPU_METHODS", "BF16_MODELS", "measure_gemm_errors", "gpu_run"]


GPU_METHODS = {
    # label: (input format, input_precision or None for torch.matmul, output format)
    "torch.matmul bf16": ("bf16", None, "bf16"),
    "Triton bf16": ("bf16", "ieee", "fp32"),
    "Triton fp32 tf32": ("fp32", "tf32", "fp32"),
    "Triton fp32 ieee": ("fp32", "ieee", "fp32"),
}


def _gpu_model(gpu: str) -> tuple[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """(label, A, B -> C) of one GPU's tensor-core model on bf16 inputs, its settings from
    :data:`~nbhelpers.tensor_cores.TENSOR_CORES`."""
    spec = TENSOR_CORES[gpu]
    label = f"{gpu} tensor-core model (group {spec.group('bf16')}, {spec.align_bits} bits)"
    return label, lambda A, B: spec.matmul(A, B, "bf16")


BF16_MODELS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    # what a Triton bf16 result is compared with, bit for bit (fraction of identical outputs):
    # the model with 23 bits kept (chapter 03's running example) at three group sizes, the
    # A100's and the H100's published settings, and fp32 accumulation one product at a time
    "tensor-core model, group 4": lambda A, B: tensor_core_matmul(A, B, "bf16", group=4),
    "tensor-core model, group 8": lambda A, B: tensor_core_matmul(A, B, "bf16", group=8),
    "tensor-core model, group 16": lambda A, B: tensor_core_matmul(A, B, "bf16", group=16),
    **dict(_gpu_model(gpu) for gpu in ("A100", "H100")),
    "fp32 sequential, nearest-even": lambda A, B: emulated_matmul(A, B, "bf16", "fp32"),
}


def measure_gemm_errors(
    Ks,
    M: int = 16,
    N: int = 16,
    seed: int = 0,
    device: str | None = None,
    block: tuple[int, int, int] = (32, 32, 32),
    models: bool = True,
    after_K: Callable[[list[dict]], None] | None = None,
) -> list[dict]:
    """Errors of torch's and the Triton kernel's GEMMs for each K, on :func:`gemm_inputs` data.

    For every method of :data:`GPU_METHODS` a dict: ``method``, ``in_fmt``, ``input_precision``,
    ``out_fmt``, ``K`` (list), ``rel_error`` (against float64 A @ B of the float64 data, as in
    the notebook's first figure) and ``rel_error_acc`` (against the float64 product of the inputs
    as the method received them, so input rounding does not count; for TF32 the fp32 inputs). For
    "Triton bf16" with ``models``, also ``model_agreement``: for each emulation of
    :data:`BF16_MODELS`, the fraction of outputs bit-identical to it, per K.

    Meant for a GPU (``benchmarks/gpu_gemm_numerics.py``). In the interpreter it runs too, with
    bf16 inputs as float32 holding bf16 values, and TF32 is not applied: the numbers then say
    nothing about GPUs. ``after_K(series)``, if given, is called after each K with the series so
    far (the script writes its results file there, so a run stopped halfway keeps the Ks done).

    Each series is the family's row (:class:`nbhelpers.families.gemm.GemmNumericsSeries`, its
    lists growing one K at a time), handed out as the dict a results file holds.
    """
    dev = device or default_device()
    series = [
        GemmNumericsSeries(
            method=method,
            in_fmt=fmt,
            input_precision=prec,
            out_fmt=out_fmt,
            K=[],
            rel_error=[],
            rel_error_acc=[],
            model_agreement={name: [] for name in BF16_MODELS} if method == "Triton bf16" and models else None,
        )
        for method, (fmt, prec, out_fmt) in GPU_METHODS.items()
    ]
    for K in Ks:
        A, B = gemm_inputs(M, int(K), N, seed)
        C_data = A @ B
        for s in series:
            Aq, Bq = round_to(A, s.in_fmt), round_to(B, s.in_fmt)
            if s.input_precision is None:  # torch's own matmul, output in the input dtype
                C = torch_matmul(A, B, s.in_fmt, dev)
            else:
                C = run_matmul(A, B, s.in_fmt, s.input_precision, block, dev)
            s.K.append(int(K))
            s.rel_error.append(relative_error(C, C_data))
            s.rel_error_acc.append(relative_error(C, Aq @ Bq))
            for name, fractions in (s.model_agreement or {}).items():
                fractions.append(float(np.mean(C == BF16_MODELS[name](Aq, Bq))))
        if after_K is not None:
            after_K([GEMM_NUMERICS.as_dict(s) for s in series])
    return [GEMM_NUMERICS.as_dict(s) for s in series]


def gpu_run(
    Ks,
    M: int = 16,
    N: int = 16,
    seed: int = 0,
    script: str = "benchmarks/gpu_gemm_numerics.py",
    block: tuple[int, int, int] = (32, 32, 32),
    after_K: Callable[[dict], None] | None = None,
) -> dict:
    """:func:`measure_gemm_errors` on the GPU, wrapped as a results file holds it:
    ``{"meta": {gpu, date, script, M, N, seed, block, versions}, "series": [...]}``.
    ``after_K(run)``, if given, gets the run so far after each K."""
    if INTERPRETED or not torch.cuda.is_available():
        raise RuntimeError("gpu_run measures a real GPU: PyTorch sees none, or TRITON_INTERPRET=1 is set")
    meta = {
        "gpu": torch.cuda.get_device_name(0),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "script": script,
        "M": M,
        "N": N,
        "seed": seed,
        "block": list(block),
        "data": "nbhelpers.experiments.gemm_inputs (standard normal)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "numpy": np.__version__,
        "cuda": torch.version.cuda,
    }
    keep = None if after_K is None else (lambda series: after_K({"meta": meta, "series": series}))
    series = measure_gemm_errors(Ks, M, N, seed, "cuda", block, after_K=keep)
    return {"meta": meta, "series": series}
