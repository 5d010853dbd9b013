"""Tests of chapter 03's code: the Triton GEMM (nbhelpers.kernels.gemm) against float64 and the
emulations, its launcher's errors, the GPU-results plumbing, the chapter's additions to
nbhelpers.accumulation, and the chapter's plot helpers.

Triton reads TRITON_INTERPRET when @triton.jit decorates the kernel, i.e. when the kernel module is
imported, so ``setup_device()`` runs first: without a GPU it sets TRITON_INTERPRET=1 and the kernel
runs in the interpreter on the CPU (nothing here is skipped on a CPU); with a GPU the kernel is
compiled. The interpreter is slow, so the shapes are small.
"""
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from nbhelpers import kernels, plots  # noqa: E402
from nbhelpers.accumulation import (  # noqa: E402
    GemmSweep,
    accumulator_probe,
    align_group,
    emulated_dot,
    emulated_matmul,
    gemm_inputs,
    gemm_sweep,
    probe_verdict,
    relative_error,
    tensor_core_group_sum,
    tensor_core_matmul,
    tensor_core_matmul_ref,
)
from nbhelpers.kernels.gemm import (  # noqa: E402
    GPU_METHODS,
    error_bound,
    gpu_run,
    gpu_slug,
    matmul,
    matmul_kernel,
    matmul_ref,
    measure_gemm_errors,
    recorded_gpu_runs,
    run_matmul,
    torch_matmul,
)
from nbhelpers.rounding import round_to  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEV = INFO.device
INTERPRETED = kernels.INTERPRETED
BF16_TC = not INTERPRETED  # bf16 on a GPU goes through the tensor cores: the truncating bound


def data(M, K, N, seed=0, dtype=torch.float32):
    A, B = gemm_inputs(M, K, N, seed)
    return (torch.from_numpy(A).to(DEV, dtype), torch.from_numpy(B).to(DEV, dtype))


def within_bound(C, a, b, **kw):
    err = (C.double() - matmul_ref(a, b)).abs()
    return bool((err <= error_bound(a, b, **kw)).all())


# ------------------------------------------------------------------ mode


def test_interpreted_flag_follows_the_device():
    assert INTERPRETED == (not INFO.is_gpu)
    assert INTERPRETED == (os.environ.get("TRITON_INTERPRET") == "1")


# ------------------------------------------------------------------ the kernel against float64


SHAPES = [(64, 48, 80), (1, 1, 1), (33, 17, 65), (50, 30, 70), (16, 16, 16), (40, 8, 100)]  # M, N, K


@pytest.mark.parametrize("M,N,K", SHAPES)
def test_fp32_matmul_within_the_fp32_bound(M, N, K):
    a, b = data(M, K, N, seed=M + N + K)
    C = matmul(a, b, "ieee")
    assert C.shape == (M, N) and C.dtype == torch.float32 and C.device == a.device
    assert within_bound(C, a, b)


@pytest.mark.parametrize("block", [(16, 16, 16), (32, 16, 64), (64, 32, 16)])
def test_block_sizes_give_bounded_results_on_ragged_shapes(block):
    a, b = data(45, 37, 29, seed=1)  # M, K, N: no block divides any of them
    assert within_bound(matmul(a, b, block=block), a, b)


def test_small_integers_are_exact_bit_for_bit():
    # every partial sum of these products is an integer below 2**24: any order of fp32 additions
    # is exact, so the kernel must equal the exact product (a wrong mask, stride or pointer step
    # would not)
    rng = np.random.default_rng(3)
    A = rng.integers(-8, 9, size=(37, 53)).astype(np.float64)
    B = rng.integers(-8, 9, size=(53, 21)).astype(np.float64)
    a, b = (torch.from_numpy(X).to(DEV, torch.float32) for X in (A, B))
    for block in [(16, 16, 16), (32, 32, 32)]:
        assert np.array_equal(matmul(a, b, block=block).cpu().numpy(), A @ B)


def test_strided_inputs_equal_contiguous_ones():
    a, b = data(24, 40, 20, seed=5)
    at = a.t().contiguous().t()  # same values, column-major strides
    bt = b.t().contiguous().t()
    assert at.stride() != a.stride()
    assert torch.equal(matmul(at, bt), matmul(a, b))


def test_k_zero_and_empty_outputs():
    a = torch.zeros((5, 0), device=DEV)
    b = torch.zeros((0, 7), device=DEV)
    assert torch.equal(matmul(a, b), torch.zeros((5, 7), device=DEV))
    assert matmul(torch.zeros((0, 4), device=DEV), torch.zeros((4, 3), device=DEV)).shape == (0, 3)


def test_fp16_inputs():
    a, b = data(20, 48, 24, seed=7, dtype=torch.float16)
    assert within_bound(matmul(a, b), a, b, tensor_core=BF16_TC)


def test_bf16_values_through_run_matmul():
    A, B = gemm_inputs(30, 70, 20, seed=9)
    C = run_matmul(A, B, "bf16")
    a, b = (torch.from_numpy(round_to(X, "bf16")) for X in (A, B))
    assert within_bound(torch.from_numpy(C), a, b, tensor_core=BF16_TC)
    assert np.array_equal(run_matmul(A, B, "fp32"), matmul(*data(30, 70, 20, seed=9)).double().cpu().numpy())


def test_tf32_bound_on_fp32_inputs():
    a, b = data(32, 64, 32, seed=11)
    C = matmul(a, b, "tf32")
    assert within_bound(C, a, b, input_precision="tf32")
    if INTERPRETED:  # the interpreter ignores input_precision: tl.dot is a numpy float32 matmul
        assert torch.equal(C, matmul(a, b, "ieee"))


@pytest.mark.skipif(not INTERPRETED, reason="what the interpreter's tl.dot does; a GPU adds differently")
def test_interpreter_accumulates_fp32_partial_sums_per_block():
    # K = 48 in blocks of 16: block 0 holds the product 1, block 1 sixteen products 2**-25 (their
    # sum 2**-21 is exact in any order), block 2 one product 2**-26.
    # blocked fp32: 1 + 2**-21, then + 2**-26 is lost (below half a spacing) -> 1 + 2**-21
    # sequential fp32 would lose every tiny product -> 1; float64 would keep all -> 1 + 2**-21 + 2**-26
    b = np.zeros(48)
    b[0], b[16:32], b[32] = 1.0, 2.0**-25, 2.0**-26
    a = torch.ones((16, 48))
    bb = torch.from_numpy(np.tile(b[:, None], (1, 16))).float()
    C = matmul(a, bb, block=(16, 16, 16)).double().numpy()
    assert np.all(C == 1 + 2.0**-21)
    assert np.array_equal(C, emulated_matmul(a.double().numpy(), bb.double().numpy(), "fp32", "fp32",
                                             order="blocked", block=16))


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter's bf16 gap; compiled kernels handle bf16")
def test_interpreter_bf16_gap_is_real_and_guarded():
    a, b = data(16, 16, 16, seed=2, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="raw uint16"):
        matmul(a, b)
    # what the guard prevents: the raw kernel computes on bit patterns, silently
    c = torch.empty((16, 16))
    matmul_kernel[(1, 1)](a, b, c, 16, 16, 16, *a.stride(), *b.stride(), *c.stride(),
                          BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, INPUT_PRECISION="ieee")
    assert not within_bound(c, a, b)
    assert within_bound(matmul(a.float(), b.float()), a, b)  # the upcast the guard asks for


# ------------------------------------------------------------------ bad input


def test_bad_inputs_get_clear_errors():
    a, b = data(8, 8, 8)
    with pytest.raises(TypeError, match="torch.Tensor"):
        matmul(a.cpu().numpy(), b)
    with pytest.raises(ValueError, match="2-D"):
        matmul(a[0], b)
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul(a, b[:5])
    with pytest.raises(TypeError, match="same dtype"):
        matmul(a, b.half())
    with pytest.raises(TypeError, match="float32, torch.bfloat16, torch.float16"):
        matmul(a.double(), b.double())
    with pytest.raises(TypeError, match="accepted"):
        matmul(a.int(), b.int())
    with pytest.raises(ValueError, match="input_precision"):
        matmul(a, b, "tf64")
    for block in [(16, 16), (16, 16, 24), (8, 16, 16), (16, 512, 16), (16.0, 16, 16)]:
        with pytest.raises(ValueError, match="block"):
            matmul(a, b, block=block)
    with pytest.raises(ValueError, match="input_precision"):
        error_bound(a, b, "half")
    with pytest.raises(ValueError, match="in_fmt"):
        run_matmul(np.ones((2, 2)), np.ones((2, 2)), "e4m3fn")
    with pytest.raises(ValueError, match="in_fmt"):
        torch_matmul(np.ones((2, 2)), np.ones((2, 2)), "e5m2")


@pytest.mark.skipif(not INTERPRETED, reason="compiled kernels refuse CPU tensors instead")
def test_interpreter_takes_cpu_tensors():
    a, b = data(8, 8, 8)
    assert a.device.type == "cpu" and matmul(a, b).device.type == "cpu"


@pytest.mark.skipif(INTERPRETED, reason="needs compiled kernels (a GPU)")
def test_compiled_kernel_refuses_cpu_tensors():
    with pytest.raises(ValueError, match="CUDA tensors"):
        matmul(torch.ones((16, 16)), torch.ones((16, 16)))


def test_error_bound_grows_with_tf32_and_tensor_cores():
    a, b = data(8, 64, 8)
    base = error_bound(a, b)
    assert torch.all(error_bound(a, b, "tf32") > base)
    assert torch.all(error_bound(a, b, tensor_core=True) > base)
    # gamma_K * u_fp32 * (|A| @ |B|), K = 64: a first-order check of the formula
    ratio = (base / (a.double().abs() @ b.double().abs())).unique()
    assert ratio.numel() == 1 and abs(ratio.item() / (64 * 2.0**-24) - 1) < 1e-5


# ------------------------------------------------------------------ torch's matmul, GPU plumbing


def test_torch_matmul_returns_values_of_the_input_format():
    A, B = gemm_inputs(6, 40, 5)
    C = torch_matmul(A, B, "bf16")
    assert C.dtype == np.float64 and np.array_equal(round_to(C, "bf16"), C)
    assert relative_error(C, A @ B) < 2.0**-6


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
    assert set(fractions) >= {"tensor-core model, group 8", "fp32 sequential, nearest-even"}
    assert all(0 <= f <= 1 for fr in fractions.values() for f in fr)


def test_gpu_run_needs_a_gpu():
    if INTERPRETED:
        with pytest.raises(RuntimeError, match="real GPU"):
            gpu_run([128])
    else:
        run = gpu_run([128])
        assert {"gpu", "date", "script", "M", "N", "seed"} <= set(run["meta"])


def test_gpu_slug():
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gpu_slug("  NVIDIA A100-SXM4-40GB ") == "nvidia-a100-sxm4-40gb"
    with pytest.raises(ValueError, match="file name"):
        gpu_slug("!!!")


def fake_run(date: str, gpu: str = "Test GPU") -> dict:
    series = measure_gemm_errors([32], M=16, N=16, device=DEV, models=False)
    meta = {"gpu": gpu, "date": date, "script": "benchmarks/gpu_gemm_numerics.py", "M": 16, "N": 16, "seed": 0}
    return {"meta": meta, "series": series}


def test_recorded_gpu_runs_reads_sorts_and_rejects(tmp_path):
    assert recorded_gpu_runs(tmp_path) == []
    (tmp_path / "gemm_numerics_b.json").write_text(json.dumps(fake_run("2026-02-01T00:00:00+00:00")))
    (tmp_path / "gemm_numerics_a.json").write_text(json.dumps(fake_run("2026-03-01T00:00:00+00:00")))
    (tmp_path / "other.json").write_text("{}")  # not a gemm_numerics file: ignored
    runs = recorded_gpu_runs(tmp_path)
    assert [r["meta"]["date"][:7] for r in runs] == ["2026-02", "2026-03"]
    assert runs[0]["path"].endswith("gemm_numerics_b.json")
    broken = fake_run("2026-04-01")
    del broken["meta"]["gpu"]
    (tmp_path / "gemm_numerics_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"gemm_numerics_c\.json: missing gpu"):
        recorded_gpu_runs(tmp_path)
    (tmp_path / "gemm_numerics_c.json").write_text("not json")
    with pytest.raises(ValueError, match="not a results file"):
        recorded_gpu_runs(tmp_path)


def test_committed_results_files_parse():
    for run in recorded_gpu_runs():  # [] until a GPU run is recorded
        assert run["meta"]["script"] == "benchmarks/gpu_gemm_numerics.py"
        assert {s["method"] for s in run["series"]} == set(GPU_METHODS)


def run_script(env_extra):
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_gemm_numerics.py")],
                          capture_output=True, text=True, env=env, timeout=120)


def test_benchmark_refuses_the_interpreter():
    r = run_script({"TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "needs an NVIDIA GPU" in r.stderr


@pytest.mark.skipif(INFO.is_gpu, reason="checks the no-GPU refusal")
def test_benchmark_refuses_without_a_gpu():
    r = run_script({"TRITON_INTERPRET": "", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr


# ------------------------------------------------------------------ accumulation: chapter 03 additions


def test_relative_error_definition_and_edges():
    rng = np.random.default_rng(0)
    C_ref = rng.standard_normal((5, 7))
    C = C_ref + 1e-3 * rng.standard_normal((5, 7))
    expected = np.sqrt(np.sum((C - C_ref) ** 2)) / np.sqrt(np.sum(C_ref**2))
    assert relative_error(C, C_ref) == pytest.approx(expected, rel=1e-14)
    assert relative_error(C_ref, C_ref) == 0.0
    assert relative_error(np.zeros(3), np.zeros(3)) == 0.0
    assert relative_error(np.ones(3), np.zeros(3)) == np.inf
    bf = C.astype(ml_dtypes.bfloat16)
    assert relative_error(bf, C_ref) == pytest.approx(relative_error(bf.astype(np.float64), C_ref), rel=0)
    with pytest.raises(ValueError, match="same shape"):
        relative_error(np.ones(3), np.ones(4))


def test_gemm_inputs_are_reproducible_and_independent_of_other_draws():
    A1, B1 = gemm_inputs(4, 128, 3, seed=7)
    gemm_inputs(4, 256, 3, seed=7)
    A2, B2 = gemm_inputs(4, 128, 3, seed=7)
    assert np.array_equal(A1, A2) and np.array_equal(B1, B2)
    assert A1.shape == (4, 128) and B1.shape == (128, 3)
    assert not np.array_equal(A1, gemm_inputs(4, 128, 3, seed=8)[0])
    U, V = gemm_inputs(4, 128, 3, dist="uniform")
    assert U.min() >= 0 and U.max() < 1 and V.min() >= 0
    for bad in [dict(M=0), dict(K=1.5), dict(seed=-1), dict(dist="cauchy"), dict(N=True)]:
        kw = dict(M=2, K=2, N=2) | bad
        with pytest.raises(ValueError):
            gemm_inputs(**kw)


def test_gemm_sweep_errors_against_both_references():
    Ks = [16, 64]
    sweep = gemm_sweep({
        "bf16/fp32": lambda A, B: emulated_matmul(A, B, "bf16", "fp32"),
        "bf16/bf16": lambda A, B: emulated_matmul(A, B, "bf16", "bf16"),
    }, Ks, M=4, N=3, seed=1)
    assert isinstance(sweep, GemmSweep) and sweep.Ks == (16, 64)
    sweep = sweep.with_rounded_output("bf16/fp32", "bf16", "bf16 out")
    A, B = sweep.inputs(64)
    C = emulated_matmul(A, B, "bf16", "fp32")
    assert np.array_equal(sweep.outputs["bf16 out"][1], round_to(C, "bf16"))
    data_err = sweep.errors()
    acc_err = sweep.errors("bf16", labels=["bf16/fp32"])
    assert list(acc_err) == ["bf16/fp32"]
    assert data_err["bf16/fp32"][1] == relative_error(C, A @ B)
    assert acc_err["bf16/fp32"][1] == relative_error(C, round_to(A, "bf16") @ round_to(B, "bf16"))
    # against the rounded inputs only the fp32 accumulation is left: far below input rounding
    assert np.all(acc_err["bf16/fp32"] < 1e-3 * data_err["bf16/fp32"])
    assert np.all(data_err["bf16/bf16"] > data_err["bf16/fp32"])


def test_gemm_sweep_bad_input():
    with pytest.raises(ValueError, match="non-empty dict"):
        gemm_sweep({}, [8])
    with pytest.raises(TypeError, match="not callable"):
        gemm_sweep({"x": 3}, [8])
    with pytest.raises(ValueError, match="shape"):
        gemm_sweep({"x": lambda A, B: A}, [8], M=2, N=3)
    with pytest.raises(ValueError, match="Ks is empty"):
        gemm_sweep({"x": lambda A, B: A @ B}, [])
    sweep = gemm_sweep({"x": lambda A, B: A @ B}, [8], M=2, N=2)
    with pytest.raises(KeyError, match="no variant"):
        sweep.errors(labels=["y"])
    with pytest.raises(ValueError, match="exists already"):
        sweep.with_rounded_output("x", "bf16", "x")


def fp32_values(rng, n, spread=8):
    return round_to(rng.standard_normal(n) * np.exp2(rng.integers(-spread, spread, n)), "fp32")


@pytest.mark.parametrize("align_bits", [3, 8, 23, 30])
@pytest.mark.parametrize("rounding", ["toward_zero", "nearest_even"])
def test_one_group_equals_the_fraction_reference(align_bits, rounding):
    # a group with an incoming accumulator c is a one-group tensor_core_matmul of [c, products]
    # against ones (its own accumulator starts at 0, which does not move the alignment)
    rng = np.random.default_rng(align_bits)
    for g in [1, 3, 8, 16]:
        for _ in range(10):
            vals = fp32_values(rng, g + 1)
            if rng.random() < 0.5:
                vals = np.abs(vals)
            ours = tensor_core_group_sum(vals[0], vals[1:], align_bits, rounding=rounding)
            ref = tensor_core_matmul_ref(vals[None, :], np.ones((g + 1, 1)), "fp32", group=g + 1,
                                         align_bits=align_bits, rounding=rounding)[0, 0]
            assert ours == ref, (vals, ours, ref)


def test_groups_chained_equal_tensor_core_matmul():
    rng = np.random.default_rng(1)
    a, b = round_to(rng.standard_normal(37), "bf16"), round_to(rng.standard_normal(37), "bf16")
    c = 0.0
    for k0 in range(0, 37, 8):
        c = tensor_core_group_sum(c, a[k0:k0 + 8] * b[k0:k0 + 8])
    assert c == tensor_core_matmul(a[None, :], b[:, None], "bf16", group=8)[0, 0]


def test_align_group_by_hand():
    E, kept = align_group([1.0, 1.5 * 2.0**-24, -3 * 2.0**-24, 2.0**-23], align_bits=23)
    assert E == 0 and kept.tolist() == [1.0, 0.0, -(2.0**-23), 2.0**-23]
    E, kept = align_group([0.0, 0.0])
    assert E is None and kept.tolist() == [0.0, 0.0]
    E, kept = align_group([-6.0, 0.75], align_bits=2)  # E = 2, multiples of 2**0
    assert E == 2 and kept.tolist() == [-6.0, 0.0]
    with pytest.raises(ValueError, match="finite"):
        align_group([1.0, np.inf])
    with pytest.raises(ValueError, match="too large"):
        align_group([1.0, 2.0], align_bits=52)
    with pytest.raises(ValueError, match="1-D"):
        tensor_core_group_sum(1.0, np.ones((2, 2)))
    with pytest.raises(ValueError, match="stochastic"):
        tensor_core_group_sum(1.0, [1.0], rounding="stochastic")


def test_accumulator_probe_and_verdicts():
    hi = 1 + 2.0**-7
    for first in (True, False):
        A, B = accumulator_probe(64, first, M=3, N=2)
        assert A.shape == (3, 64) and B.shape == (64, 2)
        assert np.array_equal(round_to(A, "bf16"), A) and np.array_equal(round_to(B, "bf16"), B)
        exact = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(A[0], B[:, 0]))
        assert exact == 1 + Fraction(1, 2**8) + 4 * Fraction(1, 2**25)
    results = {}
    for name, f in {
        "exact": lambda A, B: round_to(A @ B, "bf16"),
        "fp32": lambda A, B: emulated_matmul(A, B, "bf16", "fp32", out_fmt="bf16"),
        "bf16": lambda A, B: emulated_matmul(A, B, "bf16", "bf16"),
    }.items():
        results[name] = tuple(float(f(*accumulator_probe(16, t))[0, 0]) for t in (True, False))
    assert results == {"exact": (hi, hi), "fp32": (hi, 1.0), "bf16": (1.0, 1.0)}
    assert probe_verdict(*results["fp32"]).startswith("kept only when first")
    assert probe_verdict(*results["exact"]).startswith("kept in either order")
    assert probe_verdict(*results["bf16"]).startswith("lost in either order")
    assert probe_verdict(hi, 2.0).startswith("unexpected")
    # two tiny terms make exactly half a spacing: a tie, lost even when they come first
    A, B = accumulator_probe(8, True, n_tiny=2)
    assert float(emulated_dot(A[0], B[:, 0], "bf16", "fp32")) == 1 + 2.0**-8
    with pytest.raises(ValueError, match="too short"):
        accumulator_probe(5, True)
    with pytest.raises(TypeError, match="tiny_first"):
        accumulator_probe(8, "yes")


# ------------------------------------------------------------------ plot helpers (chapter 03)


def test_plot_error_vs_K_draws_one_line_per_entry_with_format_colours():
    Ks = [128, 256, 512]
    errs = {"fp32 acc": [1e-7, 2e-7, 3e-7], "bf16 acc": [1e-2, 2e-2, 3e-2], "bf16 out": [3e-3] * 3,
            "model": [2e-7, 3e-7, 4e-7]}
    fmts = {"fp32 acc": "fp32", "bf16 acc": "bf16", "bf16 out": "bf16", "model": "black"}
    ax = plots.plot_error_vs_K(Ks, errs, fmts, guides={"sqrt(K) u": np.sqrt(Ks) * 2.0**-8})
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert set(lines) == set(errs) | {"sqrt(K) u"}
    assert lines["fp32 acc"].get_color() == plots.format_color("fp32")
    assert lines["bf16 acc"].get_color() == lines["bf16 out"].get_color() == plots.format_color("bf16")
    assert lines["bf16 acc"].get_linestyle() != lines["bf16 out"].get_linestyle()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(ax.figure)
    fig, ax = plt.subplots()
    assert plots.plot_error_vs_K(Ks, {"x": [1, 2, 3]}, {"x": "fp16"}, ax=ax) is ax
    with pytest.raises(KeyError, match="no format"):
        plots.plot_error_vs_K(Ks, {"x": [1, 2, 3]}, {}, ax=ax)
    with pytest.raises(ValueError, match="neither a format"):
        plots.plot_error_vs_K(Ks, {"x": [1, 2, 3]}, {"x": "not-a-colour"}, ax=ax)
    plt.close(fig)


def test_plot_recorded_gpu_errors_labels_gpu_date_and_script():
    fig, ax = plt.subplots()
    assert plots.plot_recorded_gpu_errors([], ax=ax) is ax and not ax.lines
    run = fake_run("2026-05-06T07:08:09+00:00", gpu="NVIDIA Test GPU")
    plots.plot_recorded_gpu_errors([run], ax=ax, methods=["Triton bf16", "Triton fp32 tf32"])
    assert [ln.get_label() for ln in ax.lines] == ["GPU: Triton bf16", "GPU: Triton fp32 tf32"]
    assert ax.lines[1].get_color() == plots.format_color("tf32")
    note = " ".join(t.get_text() for t in ax.texts)
    assert "NVIDIA Test GPU" in note and "2026-05-06" in note and "benchmarks/gpu_gemm_numerics.py" in note
    plt.close(fig)
