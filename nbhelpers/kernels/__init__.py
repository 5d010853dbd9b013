"""Triton kernels of the course, one module per kernel family: :mod:`~nbhelpers.kernels.gemm` (the
tiled GEMM, chapters 03 and 09), :mod:`~nbhelpers.kernels.scaled_gemm` (fp8 GEMMs with epilogue and
block scales, chapter 09), :mod:`~nbhelpers.kernels.copy` (copies, strided reads, transposes, chapter 08),
:mod:`~nbhelpers.kernels.grouped_gemm` (one launch for every expert of a mixture-of-experts layer, chapter 10),
:mod:`~nbhelpers.kernels.pressure` (a kernel with a constexpr number of live values: register pressure, chapter 09),
:mod:`~nbhelpers.kernels.topk` (top-k of each row: a running top-k, two stages, radix select, chapter 11),
:mod:`~nbhelpers.kernels.w4a16` (16-bit activations times int4 weights with group scales, chapter 12).
Beside them, :mod:`~nbhelpers.kernels.operands` turns what :func:`nbhelpers.scaling.quantize`
returns into the scaled launchers' operands (:func:`~nbhelpers.kernels.operands.kernel_operand`)
and holds how a launcher declares the recipes it runs.

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
* The interpreter scans ``triton.language`` again on every call of a ``@triton.jit`` function
  (``tl.max`` is one) inside a kernel; importing this package in the interpreter installs
  :mod:`~nbhelpers.kernels.interpreter_cache`, which skips the repeated scans and changes nothing
  else (Triton 3.7.1; another version runs unchanged).
* Autotuning and ``triton.testing.do_bench`` need a GPU. Every tuner times its configurations
  with :func:`nbhelpers.timing.tuning_ms` (the benchmarks' timer, :func:`~nbhelpers.timing.gpu_median_ms`,
  in the form ``triton.autotune`` takes).
"""

from __future__ import annotations

import os

__all__ = ["INTERPRETED", "default_device", "fp8_unsupported_reason", "require_fp8_support"]

INTERPRETED: bool = os.environ.get("TRITON_INTERPRET") == "1"

if INTERPRETED:  # the same interpreter without its repeated scans (interpreter_cache's docstring)
    from .interpreter_cache import install as _install_interpreter_cache

    _install_interpreter_cache()


def default_device() -> str:
    """Where the kernels' tensors live by default: "cpu" in the interpreter, "cuda" compiled."""
    return "cpu" if INTERPRETED else "cuda"


def fp8_unsupported_reason(dtype_name: str, capability: tuple[int, int], gpu: str = "this GPU") -> str | None:
    """Why a compiled fp8 kernel with operands of ``dtype_name`` ("float8_e4m3fn" or
    "float8_e5m2") cannot run on a GPU of compute ``capability`` (major, minor), in a sentence for
    the launcher's error; None when it can. Triton compiles e4m3 dots (``float8e4nv``) for compute
    capability 8.9 and later only (Ada, Hopper, Blackwell); for an A100 (8.0) the compiler stops
    with "type fp8e4nv not supported in this architecture" (checked with Triton 3.7.1, compiling
    the scaled GEMM kernel for sm_80 without a GPU). e5m2 (``fp8e5``) compiles there."""
    if dtype_name == "float8_e4m3fn" and tuple(capability) < (8, 9):
        major, minor = capability
        return (
            f"fp8 e4m3 kernels need compute capability 8.9 or newer (Ada, Hopper), and {gpu} is "
            f"{major}.{minor}: Triton cannot compile an e4m3 tl.dot for it. Use bf16 operands on this GPU, "
            "or run the fp8 kernels on a CPU in Triton's interpreter (NBHELPERS_DEVICE=cpu)."
        )
    return None


def require_fp8_support(dtype, device) -> None:
    """Raise RuntimeError with :func:`fp8_unsupported_reason`'s sentence when compiled kernels with
    fp8 operands of ``dtype`` (a torch dtype) cannot run on ``device``; nothing in the interpreter."""
    if INTERPRETED:
        return
    import torch

    why = fp8_unsupported_reason(
        str(dtype).removeprefix("torch."), torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device)
    )
    if why is not None:
        raise RuntimeError(why)
