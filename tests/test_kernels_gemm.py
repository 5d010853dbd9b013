"""Tests of nbhelpers.kernels.gemm, chapter 03's Triton GEMM: the kernel against float64 and the
emulations, its launchers (run_matmul, torch_matmul), their errors, and the error bound.
(What is measured with it: test_gpu_measurements.py; the results files: test_results.py.)

Triton reads TRITON_INTERPRET when @triton.jit decorates the kernel, i.e. when the kernel module is
imported, so ``setup_device()`` runs first: without a GPU it sets TRITON_INTERPRET=1 and the kernel
runs in the interpreter on the CPU (nothing here is skipped on a CPU); with a GPU the kernel is
compiled. The interpreter is slow, so the shapes are small.
"""

import os

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from nbhelpers import kernels
from nbhelpers.accumulation import emulated_matmul
from nbhelpers.experiments import gemm_inputs
from nbhelpers.gemm_bounds import error_bound
from nbhelpers.gemm_runs import run_matmul, torch_matmul
from nbhelpers.kernels.gemm import (
    GPU_CONFIGS,
    INTERPRETER_CONFIG,
    matmul,
    matmul_kernel,
    matmul_ref,
    program_tiles,
    tile_of,
)
from nbhelpers.metrics import relative_error
from nbhelpers.rounding import round_to

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
    # measured with Triton 3.7.1. K = 48 in blocks of 16: block 0 holds the product 1, block 1
    # sixteen products 2**-25 (their sum 2**-21 is exact in any order), block 2 one product 2**-26.
    # blocked fp32: 1 + 2**-21, then + 2**-26 is lost (below half a spacing) -> 1 + 2**-21
    # sequential fp32 would lose every tiny product -> 1; float64 would keep all -> 1 + 2**-21 + 2**-26
    b = np.zeros(48)
    b[0], b[16:32], b[32] = 1.0, 2.0**-25, 2.0**-26
    a = torch.ones((16, 48))
    bb = torch.from_numpy(np.tile(b[:, None], (1, 16))).float()
    C = matmul(a, bb, block=(16, 16, 16)).double().numpy()
    assert np.all(C == 1 + 2.0**-21), (
        f"Triton {triton.__version__}: the interpreter no longer adds fp32 partial sums per BLOCK_K block (3.7.1 does)"
    )
    assert np.array_equal(
        C, emulated_matmul(a.double().numpy(), bb.double().numpy(), "fp32", "fp32", order="blocked", block=16)
    )


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter's bf16 gap; compiled kernels handle bf16")
def test_interpreter_bf16_gap_is_real_and_handled():
    """Measured with Triton 3.7.1: the interpreter holds bf16 as raw uint16 bits, so the raw
    kernel on bf16 tensors computes on bit patterns, silently; the launcher's exact upcast fixes it."""
    a, b = data(16, 16, 16, seed=2, dtype=torch.bfloat16)
    # the gap: the raw kernel on bf16 tensors computes on bit patterns, silently
    c = torch.empty((16, 16))
    matmul_kernel[(1, 1)](
        a,
        b,
        c,
        16,
        16,
        16,
        *a.stride(),
        *b.stride(),
        *c.stride(),
        BLOCK_M=16,
        BLOCK_N=16,
        BLOCK_K=16,
        INPUT_PRECISION="ieee",
    )
    assert not within_bound(c, a, b), (
        f"Triton {triton.__version__}: the interpreter's tl.dot on bf16 is now "
        "right (with 3.7.1 it computed on bit patterns); update the docstrings"
    )
    # the launcher upcasts exactly: the same result as the float32 tensors holding the bf16 values
    assert within_bound(matmul(a, b), a, b)
    assert torch.equal(matmul(a, b), matmul(a.float(), b.float()))


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter's bf16 cast; a GPU rounds to nearest")
def test_interpreter_bf16_output_cast_gap_is_real_and_handled():
    """Measured with Triton 3.7.1: the interpreter's fp32 -> bf16 cast truncates; the launcher
    stores fp32 and rounds with torch (nearest-even)."""
    # 1 + 3 * 2**-9 lies 3/4 of the way from bf16 1 to bf16 1 + 2**-7: nearest gives 1 + 2**-7
    a = torch.full((16, 16), 0.0)
    a[:, 0] = 1 + 3 * 2.0**-9
    b = torch.eye(16)
    c = torch.empty((16, 16), dtype=torch.bfloat16)
    matmul_kernel[(1,)](
        a,
        b,
        c,
        16,
        16,
        16,
        *a.stride(),
        *b.stride(),
        *c.stride(),
        BLOCK_M=16,
        BLOCK_N=16,
        BLOCK_K=16,
        INPUT_PRECISION="ieee",
    )
    assert c[0, 0].item() == 1.0, (
        f"Triton {triton.__version__}: the interpreter's fp32 -> bf16 cast gave "
        f"{c[0, 0].item()}, not 1.0 (3.7.1 truncates)"
    )
    assert matmul(a, b, out_dtype=torch.bfloat16)[0, 0].item() == 1 + 2.0**-7  # the launcher rounds


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


# ------------------------------------------------------------------ torch's matmul on the same data


def test_torch_matmul_returns_values_of_the_input_format():
    A, B = gemm_inputs(6, 40, 5)
    C = torch_matmul(A, B, "bf16")
    assert C.dtype == np.float64 and np.array_equal(round_to(C, "bf16"), C)
    assert relative_error(C, A @ B) < 2.0**-6


# ------------------------------------------------------------------ chapter 09: the grown kernel


ODD_SHAPES = [
    (1, 1, 1),
    (7, 33, 1),
    (33, 7, 100),
    (100, 1, 33),
    (1, 257, 7),
    (257, 33, 7),
    (33, 100, 257),
    (7, 257, 100),
    (100, 100, 33),
]  # M, N, K


@pytest.mark.parametrize("M,N,K", ODD_SHAPES)
def test_fixed_config_over_odd_shapes_within_the_fp32_bound(M, N, K):
    a, b = data(M, K, N, seed=3 * M + N + K)
    C = matmul(a, b, block=None)
    assert C.shape == (M, N) and C.dtype == torch.float32
    assert within_bound(C, a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,N,K", [(7, 33, 100), (100, 7, 257), (1, 100, 33)])
def test_half_inputs_equal_the_float64_reference_within_the_fp32_bound(dtype, M, N, K):
    a, b = data(M, K, N, seed=M * N + K, dtype=dtype)
    C = matmul(a, b, block=None)
    assert C.dtype == torch.float32
    # interpreter: exact upcast, so the fp32 bound; GPU: tensor cores, the truncating bound
    assert within_bound(C, a, b, tensor_core=not INTERPRETED)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_epilogue_cast_to_the_output_dtype(out_dtype):
    a, b = data(33, 100, 7, seed=4, dtype=torch.bfloat16)
    C = matmul(a, b, block=None, out_dtype=out_dtype)
    assert C.dtype == out_dtype and C.shape == (33, 7)
    assert within_bound(C, a, b, tensor_core=not INTERPRETED, out_dtype=out_dtype)
    if INTERPRETED:  # one rounding of the fp32 tile, nearest-even (torch's cast is the oracle)
        assert torch.equal(C, matmul(a, b, block=None).to(out_dtype))


def test_group_m_changes_the_order_not_the_numbers():
    a, b = data(100, 33, 257, seed=6)  # 4 x 9 tiles of 32 x 32
    ref = matmul(a, b, block=(32, 32, 32), group_m=1)
    for g in (2, 3, 8):
        assert torch.equal(matmul(a, b, block=(32, 32, 32), group_m=g), ref)


@pytest.mark.parametrize(
    "M,N,bm,bn,g", [(100, 257, 32, 32, 4), (64, 64, 16, 16, 3), (33, 7, 16, 16, 1), (1, 100, 16, 16, 8)]
)
def test_program_tiles_is_a_permutation_in_grouped_order(M, N, bm, bn, g):
    tiles = program_tiles(M, N, bm, bn, g)
    npm, npn = -(-M // bm), -(-N // bn)
    assert sorted(tiles) == [(i, j) for i in range(npm) for j in range(npn)]
    if g == 1:
        assert tiles == [(i, j) for i in range(npm) for j in range(npn)]  # row-major
    # inside a full group the programs walk down GROUP_M rows, then move one column right
    if npm >= g > 1:
        assert tiles[: g + 1] == [(i, 0) for i in range(g)] + [(0, 1)]


@triton.jit
def _tile_probe_kernel(out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    tl.store(out_ptr + 2 * pid, pid_m)
    tl.store(out_ptr + 2 * pid + 1, pid_n)


def test_the_kernels_tile_order_is_program_tiles():
    M, N, bm, bn, g = 100, 257, 32, 32, 3
    n = len(program_tiles(M, N, bm, bn, g))
    out = torch.full((2 * n,), -1, dtype=torch.int32, device=DEV)
    _tile_probe_kernel[(n,)](out, M, N, BLOCK_M=bm, BLOCK_N=bn, GROUP_M=g)
    assert [tuple(p) for p in out.view(n, 2).tolist()] == [tuple(t) for t in program_tiles(M, N, bm, bn, g)]


def test_grouped_order_reads_fewer_panels_per_wave():
    # 4096^2 output in 128 x 128 tiles (32 x 32 tiles), a wave of 128 programs: row-major reads
    # 4 row-panels of A and all 32 column-panels of B; GROUP_M = 8 reads 8 and 16
    def panels(order, wave):
        return [
            len({m for m, _ in order[i : i + wave]}) + len({n for _, n in order[i : i + wave]})
            for i in range(0, len(order), wave)
        ]

    flat = panels(program_tiles(4096, 4096, 128, 128, 1), 128)
    grouped = panels(program_tiles(4096, 4096, 128, 128, 8), 128)
    assert flat[0] == 4 + 32 and grouped[0] == 8 + 16
    assert sum(grouped) < sum(flat)


def test_configs_and_bad_group_m():
    assert INTERPRETER_CONFIG["BLOCK_K"] >= 16 and len(GPU_CONFIGS) >= 4
    a, b = data(8, 8, 8)
    for g in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="group_m"):
            matmul(a, b, group_m=g)
    with pytest.raises(TypeError, match="out_dtype"):
        matmul(a, b, out_dtype=torch.float64)
    with pytest.raises(TypeError, match="out_dtype"):
        error_bound(a, b, out_dtype=torch.int8)


@pytest.mark.skipif(INTERPRETED, reason="needs compiled kernels (a GPU): autotuning times launches")
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (257, 100, 33), (512, 512, 512), (1000, 257, 4096)])
def test_autotuned_bf16_against_torch_matmul(M, N, K):
    a, b = data(M, K, N, seed=8, dtype=torch.bfloat16)
    C = matmul(a, b, block=None, out_dtype=torch.bfloat16)
    assert within_bound(C, a, b, tensor_core=True, out_dtype=torch.bfloat16)
    # torch.matmul (cuBLAS) obeys the same bound; both are compared to float64, not to each other
    assert within_bound(torch.matmul(a, b), a, b, tensor_core=True, out_dtype=torch.bfloat16)


# ------------------------------------------------------------------ the GPU benchmark's refusal


@pytest.mark.skipif(not INTERPRETED, reason="checks the behaviour without a GPU")
def test_tflops_benchmark_without_a_gpu_exits_2_with_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "gemm_tflops.json"
    r = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "gpu_gemm_tflops.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert r.returncode == 2
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1 and "needs an NVIDIA GPU" in lines[0], lines
    assert not out.exists()  # nothing written
