"""Device selection in one place: the GPU when PyTorch sees one, else the CPU with Triton's interpreter.

Every notebook's setup cell calls :func:`setup_device` before it imports anything that defines a
Triton kernel: Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, so the
variable must be set first.

Environment variables:

``NBHELPERS_DEVICE``       ``cpu`` forces the CPU (and the interpreter) even where a GPU exists;
                           ``cuda`` (or ``gpu``) demands the GPU and fails if there is none.
``NBHELPERS_REQUIRE_GPU``  set to 1 by the GPU CI: fail (not fall back) if no GPU is visible.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

__all__ = [
    "DeviceInfo",
    "setup_device",
    "NoGPUError",
    "gpu_unavailable_reason",
    "start_gpu_script",
    "nvidia_driver_version",
    "gpu_run_meta",
    "cpu_model",
    "cpu_has",
]


class NoGPUError(RuntimeError):
    """A GPU was required (NBHELPERS_DEVICE=cuda or NBHELPERS_REQUIRE_GPU=1) but none is visible."""


@dataclass(frozen=True)
class DeviceInfo:
    """What :func:`setup_device` chose. ``device`` is "cuda" or "cpu"."""

    device: str
    name: str
    triton_interpreter: bool
    torch_version: str | None
    triton_version: str | None
    reason: str
    # the other libraries whose behaviour the chapters show (casts, sums): printed so that every
    # notebook's first output says which versions produced the rest
    numpy_version: str | None = None
    ml_dtypes_version: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.device == "cuda"

    def __str__(self) -> str:
        mode = "Triton interpreter (TRITON_INTERPRET=1)" if self.triton_interpreter else "compiled Triton kernels"
        return (
            f"device: {self.device} ({self.name}); {mode}; torch {self.torch_version or 'not installed'}, "
            f"triton {self.triton_version or 'not installed'}, numpy {self.numpy_version or 'not installed'}, "
            f"ml_dtypes {self.ml_dtypes_version or 'not installed'} -- {self.reason}"
        )


def _version(module_name: str) -> str | None:
    try:
        mod = __import__(module_name)
    except Exception:  # not installed, or broken: report rather than fail the notebook
        return None
    return getattr(mod, "__version__", "unknown")


def setup_device(force: str | None = None, verbose: bool = True) -> DeviceInfo:
    """Pick the device for this session and prepare Triton accordingly; prints the choice.

    ``force`` ("cpu" or "cuda") overrides the environment variable ``NBHELPERS_DEVICE``.
    On the CPU path ``TRITON_INTERPRET=1`` is set; if a module that defines kernels was imported
    before this call, a RuntimeError says to restart the kernel and run the setup cell first.
    """
    want = (force or os.environ.get("NBHELPERS_DEVICE", "auto")).strip().lower()
    if want == "gpu":
        want = "cuda"
    if want not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device {want!r} not understood: use 'auto', 'cpu' or 'cuda' (NBHELPERS_DEVICE)")
    require_gpu = os.environ.get("NBHELPERS_REQUIRE_GPU", "") not in ("", "0")

    gpu_name = None
    if want != "cpu":
        try:
            import torch

            if torch.cuda.is_available():
                gpu_name = torch.cuda.get_device_name(0)
        except Exception:  # torch missing or broken: no GPU to offer
            gpu_name = None

    if (want == "cuda" or require_gpu) and gpu_name is None:
        who = "NBHELPERS_DEVICE=cuda" if want == "cuda" else "NBHELPERS_REQUIRE_GPU=1"
        raise NoGPUError(f"{who} asks for a GPU, but PyTorch sees none (torch.cuda.is_available() is False)")
    if require_gpu and want == "cpu":
        raise NoGPUError("NBHELPERS_REQUIRE_GPU=1 contradicts NBHELPERS_DEVICE=cpu")

    if gpu_name is not None:
        if os.environ.get("TRITON_INTERPRET") == "1":
            # a leftover from a CPU session in the same process would silently interpret kernels
            os.environ.pop("TRITON_INTERPRET")
        info = DeviceInfo(
            "cuda",
            gpu_name,
            False,
            _version("torch"),
            _version("triton"),
            "PyTorch sees a GPU",
            _version("numpy"),
            _version("ml_dtypes"),
        )
    else:
        kernels = sys.modules.get("nbhelpers.kernels")
        if kernels is not None and not getattr(kernels, "INTERPRETED", True):
            raise RuntimeError(
                "nbhelpers.kernels was imported before setup_device(), without TRITON_INTERPRET=1: "
                "its kernels would need a GPU. Restart the kernel and run the setup cell first."
            )
        os.environ["TRITON_INTERPRET"] = "1"
        reason = "forced by NBHELPERS_DEVICE=cpu" if want == "cpu" else "no GPU visible to PyTorch"
        import platform

        info = DeviceInfo(
            "cpu",
            platform.processor() or platform.machine(),
            True,
            _version("torch"),
            _version("triton"),
            reason,
            _version("numpy"),
            _version("ml_dtypes"),
        )
    if verbose:
        print(info)
    return info


def gpu_unavailable_reason() -> str | None:
    """Why a GPU benchmark script cannot run here (no PyTorch, no CUDA GPU, or the interpreter
    forced), or None when it can. The scripts in benchmarks/ print it and exit with code 2."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU (torch.cuda.is_available() is False)"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 is set (the kernels would run in the interpreter)"
    return None


def start_gpu_script(script: str, hint: str = "") -> bool:
    """The start of every GPU script in benchmarks/: True once :func:`setup_device` has switched
    to compiled mode (so the kernels the script imports next are compiled, never interpreted);
    False after printing to stderr why ``script`` cannot run on this machine
    (:func:`gpu_unavailable_reason`) and ``hint``, when given. The script then exits with code 2."""
    why = gpu_unavailable_reason()
    if why is not None:
        print(f"{script} needs an NVIDIA GPU: {why}." + (f"\n{hint}" if hint else ""), file=sys.stderr)
        return False
    setup_device(force="cuda", verbose=False)
    return True


def nvidia_driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, else the CUDA driver API version torch reports
    (said so), else None: what a results file records as its driver."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch
    except ImportError:
        return None
    get = getattr(torch._C, "_cuda_getDriverVersion", None)
    if get is not None and torch.cuda.is_available():
        v = get()
        return f"CUDA driver API {v // 1000}.{(v % 1000) // 10} (nvidia-smi unavailable)"
    return None


def gpu_run_meta(script: str, argv: list[str]) -> dict:
    """What every GPU results file records about its run: the GPU name, driver, CUDA version and
    compute capability of device 0, the torch and Triton versions, the UTC date, the script,
    the command line (this interpreter, the script, ``argv``) and ``model_gpu``, the GPU whose
    numbers the run's predictions use (:func:`nbhelpers.perf_model.prediction_gpu`). Imports
    torch and triton; call it only after :func:`gpu_unavailable_reason` returned None."""
    import datetime
    import shlex

    import torch
    import triton

    from .perf_model import prediction_gpu

    name = torch.cuda.get_device_name(0)
    return {
        "gpu": name,
        "model_gpu": prediction_gpu(name).name,
        "driver": nvidia_driver_version(),
        "cuda": torch.version.cuda,
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "script": script,
        "command": shlex.join([sys.executable, script, *argv]),
    }


# ------------------------------------------------------------------ the CPU


def _cpuinfo(path: str = "/proc/cpuinfo") -> dict[str, str] | None:
    """The first processor's fields of Linux's /proc/cpuinfo, or None where there is none."""
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return None
    first = text.split("\n\n", 1)[0]
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first.splitlines() if ":" in line)}


def cpu_fields() -> dict[str, str] | None:
    """The first processor's fields of Linux's /proc/cpuinfo ("model name", "cpu family",
    "model", "flags", ...), or None where there is none."""
    return _cpuinfo()


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else whatever :mod:`platform` knows."""
    import platform

    info = _cpuinfo()
    return (info or {}).get("model name") or platform.processor() or platform.machine()


def cpu_has(flag: str) -> bool | None:
    """Whether the CPU lists the feature ``flag`` (``"avx512_bf16"``, ``"amx_bf16"``, ...) in
    /proc/cpuinfo; None where the features cannot be read (not Linux, or not an x86 CPU)."""
    info = _cpuinfo()
    if info is None or "flags" not in info:
        return None
    return flag in info["flags"].split()


def _parse_size(text: str) -> int | None:
    """'32768K' / '32M' / '1024' (Linux sysfs cache sizes) in bytes; None if unreadable."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" else text
    return int(digits) * scale if digits.isdigit() else None


def cpu_cache_bytes(level: int, root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """The size in bytes of the first CPU's data or unified cache at ``level`` (1, 2, 3), from
    Linux's sysfs (one instance: what one core's cache of that level holds, shared or not); None
    where sysfs does not say (not Linux, or no such level)."""
    import os

    try:
        entries = sorted(e for e in os.listdir(root) if e.startswith("index"))
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "level")) as fh:
                found = int(fh.read().strip())
            with open(os.path.join(root, entry, "type")) as fh:
                kind = fh.read().strip()
            with open(os.path.join(root, entry, "size")) as fh:
                size = _parse_size(fh.read())
        except (OSError, ValueError):
            continue
        if found == level and kind in ("Data", "Unified"):
            return size
    return None


def transparent_huge_pages(path: str = "/sys/kernel/mm/transparent_hugepage/enabled") -> str | None:
    """Linux's transparent huge page mode, the bracketed word of ``path`` ("always", "madvise",
    "never"); None where there is no such file (not Linux)."""
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def numpy_madvise_hugepage() -> bool | None:
    """Whether numpy asks Linux for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on its large
    allocations: numpy 2.x's private switch ``np._core.multiarray._get_madvise_hugepage``, read
    here so that no notebook reaches into numpy's private names; None where this numpy has no
    such switch."""
    import numpy as np

    core = getattr(np, "_core", None)
    get = getattr(getattr(core, "multiarray", None), "_get_madvise_hugepage", None)
    return None if get is None else bool(get())
