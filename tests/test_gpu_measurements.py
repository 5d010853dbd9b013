"""Tests of nbhelpers.gpu_measurements: the GEMM error measurements of torch's GEMM and the Triton
kernel (layout and sense), that a measured run makes a valid results file, and that gpu_run and
the benchmark script that records it refuse to run without a real GPU.

Like the kernel tests, ``setup_device()`` runs before the import: on a CPU the kernel runs in
Triton's interpreter (the numbers then say nothing about GPUs, but the plumbing is the same).
"""

import json
import os
import subprocess
import sys

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import numpy as np
import pytest
from helpers import ROOT, measured_gpu_run

from nbhelpers.gpu_measurements import BF16_MODELS, GPU_METHODS, gpu_run, measure_gemm_errors
from nbhelpers.kernels import INTERPRETED
from nbhelpers.results import recorded_gpu_runs
from nbhelpers.tensor_cores import TENSOR_CORES

DEV = INFO.device


def test_measure_gemm_errors_layout_and_sense():
    series = measure_gemm_errors([32, 64], M=16, N=16, seed=0, device=DEV)
    assert [s["method"] for s in series] == list(GPU_METHODS)
    by = {s["method"]: s for s in series}
    for s in series:
        assert s["K"] == [32, 64] and len(s["rel_error"]) == len(s["rel_error_acc"]) == 2
        json.dumps(s)  # a results file must be able to hold it
    # bf16 inputs lose more than fp32 ones; a bf16 output more than an fp32 one
    assert min(by["Triton bf16"]["rel_error"]) > 10 * max(by["Triton fp32 ieee"]["rel_error"])
    assert min(by["torch.matmul bf16"]["rel_error_acc"]) > 10 * max(by["Triton bf16"]["rel_error_acc"])
    fractions = by["Triton bf16"]["model_agreement"]
    assert list(fractions) == list(BF16_MODELS)
    assert all(0 <= f <= 1 for fr in fractions.values() for f in fr)


def test_the_models_compared_include_each_gpus_published_settings():
    """Beside the running example (23 bits kept), the Triton bf16 outputs are compared with the
    A100's and the H100's tensor-core settings, each labelled with its settings and computed by
    its spec in TENSOR_CORES."""
    assert {"tensor-core model, group 8", "fp32 sequential, nearest-even"} <= set(BF16_MODELS)
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((4, 256)), rng.standard_normal((256, 3))
    labels = {
        "A100": "A100 tensor-core model (group 8, 24 bits)",
        "H100": "H100 tensor-core model (group 16, 25 bits)",
    }
    C = {gpu: BF16_MODELS[label](A, B) for gpu, label in labels.items()}
    for gpu in labels:
        assert np.array_equal(C[gpu], TENSOR_CORES[gpu].matmul(A, B, "bf16"))
    assert not np.array_equal(C["A100"], C["H100"])  # the settings differ, and so do the outputs


def test_a_measured_run_is_a_valid_results_file(tmp_path):
    """What measure_gemm_errors returns, with the meta a results file needs, is what
    recorded_gpu_runs accepts and gives back unchanged: the two ends of a results file agree."""
    run = measured_gpu_run("2026-02-01T00:00:00+00:00")
    (tmp_path / "gemm_numerics_test-gpu.json").write_text(json.dumps(run))
    (back,) = recorded_gpu_runs(tmp_path)
    assert back["path"].endswith("gemm_numerics_test-gpu.json")
    assert {k: v for k, v in back.items() if k != "path"} == run
    assert [s["method"] for s in back["series"]] == list(GPU_METHODS)


def test_gpu_run_needs_a_gpu():
    if INTERPRETED:
        with pytest.raises(RuntimeError, match="real GPU"):
            gpu_run([128])
    else:
        run = gpu_run([128])
        assert {"gpu", "date", "script", "M", "N", "seed"} <= set(run["meta"])


def run_script(env_extra):
    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_gemm_numerics.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_benchmark_refuses_the_interpreter():
    r = run_script({"TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "needs an NVIDIA GPU" in r.stderr


@pytest.mark.skipif(INFO.is_gpu, reason="checks the no-GPU refusal")
def test_benchmark_refuses_without_a_gpu():
    r = run_script({"TRITON_INTERPRET": "", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr


def test_after_each_K_the_series_so_far_is_handed_on():
    """gpu_gemm_numerics.py writes its results file from this callback, so that a run stopped at
    the third K keeps the first two: the callback sees the series grow one K at a time, and an
    error in the third K leaves what it was last handed with two."""
    seen = []

    def after_K(series):
        seen.append(json.loads(json.dumps(series)))  # a copy, as the file would hold it

    real = measure_gemm_errors([16, 32], M=4, N=4, seed=0, device=DEV, models=False, after_K=after_K)
    assert [len(s[0]["K"]) for s in seen] == [1, 2] and seen[-1] == json.loads(json.dumps(real))

    calls = []

    def failing(series):
        calls.append(len(series[0]["K"]))
        if len(calls) == 2:
            raise RuntimeError("CUDA error: unspecified launch failure")

    with pytest.raises(RuntimeError, match="launch failure"):
        measure_gemm_errors([16, 32, 64], M=4, N=4, seed=0, device=DEV, models=False, after_K=failing)
    assert calls == [1, 2]
