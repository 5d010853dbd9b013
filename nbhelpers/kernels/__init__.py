"""Triton kernels of the course, one module per kernel family (:mod:`nbhelpers.kernels.gemm`).

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

What the interpreter does differently from a GPU (Triton 3.x), which the kernels' launchers
guard against or document:

* bfloat16 (and fp8) values are held as raw unsigned integers, so ``tl.dot`` and arithmetic on
  bf16 operands compute on bit patterns (wrong results, no error). Feed float32 tensors holding
  bf16 values instead (an exact upcast); the launchers refuse bf16 in the interpreter.
* ``tl.dot`` is a numpy float32 matmul: no TF32, no tensor-core alignment or truncation, so
  ``input_precision`` has no effect.
* Autotuning and ``triton.testing.do_bench`` need a GPU.
"""
from __future__ import annotations

import os

__all__ = ["INTERPRETED"]

INTERPRETED: bool = os.environ.get("TRITON_INTERPRET") == "1"
