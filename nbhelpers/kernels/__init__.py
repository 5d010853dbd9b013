"""Triton kernels of the course, one module per kernel family: :mod:`~nbhelpers.kernels.gemm` (the
tiled GEMM, chapters 03 and 09), :mod:`~nbhelpers.kernels.scaled_gemm` (fp8 GEMMs with epilogue and
block scales, chapter 09), :mod:`~nbhelpers.kernels.copy` (copies, strided reads, transposes, chapter 08),
:mod:`~nbhelpers.kernels.grouped_gemm` (one launch for every expert of a mixture-of-experts layer, chapter 10).

Run :func:`nbhelpers.device.setup_device` **before** importing anything from this package.
Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, that is when a
kernel module is imported: on a machine without a GPU, ``setup_device()`` sets
``TRITON_INTERPRET=1`` so that the kernels run in Triton's interpreter (numpy on the CPU); on a
GPU it leaves the variable unset and the kernels compile. A notebook's setup cell therefore reads::

    info = setup_device()
    from nbhelpers.kernels.gemm import matmul

``INTERPRETED`` records the mode this package was imported in; ``setup_device()`` checks it and
refuses to continue on a CPU if the kernels were imported in compiled mode (restart and run the
setup cell first). Tests set ``os.environ["TRITON_INTERPRET"] = "1"`` (or call
``setup_device()``) at the top of the module, before the import.

What the interpreter does differently from a GPU, measured with Triton 3.7.1 (the version the
course pins), which the kernels' launchers guard against or document:

* bfloat16 (and fp8) values are held as raw unsigned integers, so ``tl.dot`` and arithmetic on
  bf16 operands compute on bit patterns (wrong results, no error). The launchers upcast bf16 and
  fp16 inputs exactly to float32 before an interpreted launch (every such value is a float32
  value, so the products are the same). Triton 3.7.1's interpreted ``tl.dot`` does decode fp8
  codes correctly (tests/test_kernels_scaled_gemm.py records it); the fp8 launchers upcast anyway,
  so results do not hang on that.
* The interpreter's float32 -> bfloat16 cast truncates instead of rounding to nearest-even
  (1 + 3 * 2**-9 becomes 1.0): a bf16 output is stored as float32 and rounded by torch.
* ``tl.dot`` is a numpy float32 matmul: no TF32, no tensor-core alignment or truncation, so
  ``input_precision`` has no effect.
* Autotuning and ``triton.testing.do_bench`` need a GPU.
"""
from __future__ import annotations

import os

__all__ = ["INTERPRETED"]

INTERPRETED: bool = os.environ.get("TRITON_INTERPRET") == "1"
