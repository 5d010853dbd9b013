"""A pytest plugin that records each kernel Triton compiles during a test run on a GPU: what the
kernel tests compile that the GPU run's compile step did not, and how long each compile took.

    NBHELPERS_COMPILE_RECORD=benchmarks/results/kernel_test_compiles_<gpu>.jsonl \
        python -m pytest -p nbhelpers.tooling.compile_record tests/test_kernels_*.py

``benchmarks/gpu_report.py`` runs its kernel tests so. Without the environment variable the plugin
does nothing. Each compile is one JSON line (every pytest-xdist worker appends its own): the
kernel (``module:name``), Triton's description of the launch (its signature, warps and stages),
the seconds from Triton's call of ``knobs.runtime.jit_cache_hook`` to its call of
``jit_post_compile_hook`` (a compile, or a load from Triton's on-disk cache when the compile step
had made that kernel), the worker, and Triton's ``specialization_data`` (what
``JITFunction.preload`` takes). The next run's plan reads the file (:func:`summarize`).

Repository tooling: nothing the notebooks import imports it; it imports Triton only when the
variable is set.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

__all__ = ["ENV", "make_hooks", "summarize", "pytest_configure"]

ENV = "NBHELPERS_COMPILE_RECORD"


def make_hooks(path: str | Path):
    """The two hooks, (before, after), that append one line to ``path`` per compile."""
    started: dict[str, float] = {}
    lock = threading.Lock()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")

    def before(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        started[str(key)] = time.perf_counter()
        return False  # go on and compile

    def after(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        t0 = started.pop(str(key), None)
        row = {
            "kernel": f"{fn.module}:{fn.name}",
            "launch": repr,
            "seconds": None if t0 is None else round(time.perf_counter() - t0, 3),
            "worker": worker,
            "specialization": compile.get("specialization_data"),
        }
        with lock, open(path, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")

    return before, after


def pytest_configure(config) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    from triton import knobs

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = make_hooks(path)


def summarize(path: str | Path) -> dict:
    """The compiles a record holds: their count, the seconds they took in all, the count per
    kernel. Lines that are not JSON (a worker killed mid-line) are left out and counted."""
    rows, bad = [], 0
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            bad += 1
    per_kernel: dict[str, int] = {}
    for r in rows:
        per_kernel[r["kernel"]] = per_kernel.get(r["kernel"], 0) + 1
    seconds = sum(r["seconds"] or 0.0 for r in rows)
    return {"compiles": len(rows), "seconds": round(seconds, 1), "per_kernel": per_kernel, "unreadable": bad}
