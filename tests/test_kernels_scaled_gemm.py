"""Tests of nbhelpers.kernels.scaled_gemm (chapter 09): the row/column-scaled fp8 GEMM kernel and
the block-scaled one against chapters 06-07's references (nbhelpers.scaled_gemm.scaled_mm and
blockwise_scaled_mm) and torch._scaled_mm, over odd shapes.

The tolerance, derived (u = 2**-24, gamma_n = n u / (1 - n u), outside fp32's subnormal range):
every fp8 x fp8 product is exact, so the kernel and the reference differ only in how they round
the sums and the scalings. With T = sum over K of |sA| |qA| |qB| |sB| (elementwise, per output):

* row/column scales: the kernel sums K products in some order (tl.dot's tiles, then the
  accumulator): each product is perturbed by at most gamma_K relative to itself; the epilogue's two
  multiplications add two roundings: |C_kernel - C_exact| <= gamma_(K+2) T. The reference rounds
  the exact sum once and scales twice: gamma_3 T. So |C_kernel - C_ref| <= gamma_(K+5) T.
* block scales, K-blocks of kb = min(K, 128), nk = ceil(K / 128) of them: a K-block's partial
  (gamma_kb), its two scalings, then nk additions into the accumulator (gamma_nk): the kernel is
  within gamma_(kb+2+nk) T of the exact value, the reference within gamma_(3+nk) T, so
  |C_kernel - C_ref| <= gamma_(kb+2nk+5) T.
* a bfloat16 output rounds both fp32 values x (kernel) and y (reference) once more, u_b = 2**-8:
  |bf(x) - bf(y)| <= |x - y| + u_b (|x| + |y|) <= tol (1 + u_b) + 2 u_b |bf(y)| / (1 - u_b).
* on a GPU, fp8 tl.dot adds inside the tensor core with a narrow accumulator (about 14 bits,
  DeepSeek-V3) for up to 128 products before the fp32 promotion: an allowance of 2**-10 T is added
  there (4 truncating steps of 32 products, each within about 2**-13 of the block's magnitude,
  doubled; an assumption for the GPU run, not exercised on a CPU).

Wrong-axis scales (a row scale used as a column scale, a block-scale grid transposed) must fail
this comparison: tested below, so the check can fail.
"""

import math

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import numpy as np
import pytest
import torch
import triton

from nbhelpers import kernels
from nbhelpers.experiments import gemm_inputs
from nbhelpers.kernels.scaled_gemm import (
    FP8_GPU_CONFIGS,
    FP8_INTERPRETER_CONFIG,
    SCALE_BLOCK,
    block_scaled_matmul,
    scaled_matmul,
    scaled_matmul_kernel,
)
from nbhelpers.scaled_gemm import blockwise_scaled_mm, scaled_mm
from nbhelpers.scaling import quantize

DEV = INFO.device
INTERPRETED = kernels.INTERPRETED
U = 2.0**-24
U_BF16 = 2.0**-8
GPU_ALLOWANCE = 0.0 if INTERPRETED else 2.0**-10
E4M3 = torch.float8_e4m3fn


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def rowwise_inputs(M, K, N, seed):
    """qA (M, K) e4m3fn per row, sA (M, 1); qB (K, N) per column, sB (1, N): float64 numpy."""
    A, B = gemm_inputs(M, K, N, seed)
    A[:, :1] *= 40.0  # an outlier column: the row scales differ a lot
    qA, sA = quantize(A, "fp8 e4m3 per-row")
    qBt, sBt = quantize(B.T, "fp8 e4m3 per-row")
    return qA, qBt.T, sA, sBt.T


def block_inputs(M, K, N, seed):
    """qA with 1 x 128 tile scales sA (M, nk); qB with 128 x 128 block scales sB (nk, nn)."""
    A, B = gemm_inputs(M, K, N, seed)
    A[:, ::97] *= 30.0  # outliers in some K-blocks only: the scales vary along K
    B[: K // 2] *= 8.0
    qA, sA = quantize(A, "fp8 e4m3 1x128")
    qBt, sBt = quantize(B.T, "fp8 e4m3 128x128")
    return qA, qBt.T, sA, sBt.T


def t(x, dtype=torch.float32):
    return torch.from_numpy(np.ascontiguousarray(x)).to(DEV, dtype)


def rowwise_tol(qA, qB, sA, sB):
    K = qA.shape[1]
    T = np.abs(sA) * (np.abs(qA) @ np.abs(qB)) * np.abs(sB)
    return (gamma(K + 5) + GPU_ALLOWANCE) * T


def block_magnitude(qA, qB, sA, sB):
    """T: the sum over K-blocks of |sA| (|qA_b| @ |qB_b|) |sB|, (M, N)."""
    M, K = qA.shape
    N = qB.shape[1]
    sb_full = np.repeat(sB, SCALE_BLOCK, axis=1)[:, :N] if sB.shape[1] != N else sB
    T = np.zeros((M, N))
    for b in range(math.ceil(K / SCALE_BLOCK)):
        k0, k1 = b * SCALE_BLOCK, min((b + 1) * SCALE_BLOCK, K)
        T += np.abs(sA[:, b : b + 1]) * (np.abs(qA[:, k0:k1]) @ np.abs(qB[k0:k1])) * np.abs(sb_full[b : b + 1])
    return T


def block_tol(qA, qB, sA, sB):
    K = qA.shape[1]
    nk = math.ceil(K / SCALE_BLOCK)
    return (gamma(min(K, SCALE_BLOCK) + 2 * nk + 5) + GPU_ALLOWANCE) * block_magnitude(qA, qB, sA, sB)


def agrees(C, C_ref, tol, out="fp32"):
    """|C - C_ref| <= tol elementwise (tol for fp32 values; widened for a bf16 output)."""
    C = C.double().cpu().numpy()
    if out == "bf16":
        tol = tol * (1 + U_BF16) + 2 * U_BF16 * np.abs(C_ref) / (1 - U_BF16)
    return bool(np.all(np.abs(C - C_ref) <= tol))


ODD_SHAPES = [
    (1, 1, 1),
    (7, 33, 1),
    (33, 7, 100),
    (100, 1, 33),
    (1, 257, 7),
    (33, 257, 100),
    (100, 33, 257),
    (7, 100, 300),
]  # M, K, N


# ------------------------------------------------------------------ row/column-scaled fp8 GEMM


@pytest.mark.parametrize("M,K,N", ODD_SHAPES)
@pytest.mark.parametrize("out", ["fp32", "bf16"])
def test_scaled_matmul_against_scaled_mm(M, K, N, out):
    qA, qB, sA, sB = rowwise_inputs(M, K, N, seed=M + K + N)
    out_dtype = torch.float32 if out == "fp32" else torch.bfloat16
    C = scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB), out_dtype=out_dtype)
    assert C.shape == (M, N) and C.dtype == out_dtype
    C_ref = scaled_mm(qA, qB, sA, sB, out_fmt=out)
    assert agrees(C, C_ref, rowwise_tol(qA, qB, sA, sB), out)


def test_scaled_matmul_per_tensor_scales_and_strides():
    qA, qB, _, _ = rowwise_inputs(33, 100, 20, seed=1)
    sA, sB = np.array([[0.75]]), np.array([[3.0]])
    a = t(qA, E4M3)
    b = t(qB.T, E4M3).t()  # column-major B, the layout torch._scaled_mm wants
    assert b.stride() != (20, 1)
    C = scaled_matmul(a, b, t(sA), t(sB))
    assert agrees(C, scaled_mm(qA, qB, sA, sB), rowwise_tol(qA, qB, sA, sB))


def test_scaled_matmul_exact_when_nothing_rounds():
    # small-integer fp8 values and power-of-two scales: every partial sum is an integer below 2**24
    # and every scaling is exact, so any order gives the reference bit for bit
    rng = np.random.default_rng(2)
    qA = rng.integers(-8, 9, size=(37, 150)).astype(np.float64)
    qB = rng.integers(-8, 9, size=(150, 19)).astype(np.float64)
    sA = 2.0 ** rng.integers(-6, 6, size=(37, 1)).astype(np.float64)
    sB = 2.0 ** rng.integers(-6, 6, size=(1, 19)).astype(np.float64)
    C = scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB)).double().cpu().numpy()
    assert np.array_equal(C, scaled_mm(qA, qB, sA, sB))


def test_unaligned_operands_reach_the_kernel_padded_to_16_and_the_result_is_unchanged(monkeypatch):
    """K and N not multiples of 16 (or strides that are not): the launchers copy the operands into
    zero-padded buffers, so the kernel always gets 16-byte-aligned rows (at 1000^3 every fp8
    config spills otherwise, the compile table's rows); the zeros add exact zeros, and the padded
    columns are cut off. Bit for bit where nothing rounds, for both launchers."""
    import nbhelpers.kernels.scaled_gemm as sg

    seen = []
    launch = sg._launch

    def watched(kernel, tuned, args, M, N, *rest, **kw):
        a, b = args[0], args[1]
        seen.append((tuple(a.shape), tuple(b.shape), a.stride(), b.stride(), N))
        return launch(kernel, tuned, args, M, N, *rest, **kw)

    monkeypatch.setattr(sg, "_launch", watched)
    rng = np.random.default_rng(3)
    M, K, N = 37, 150, 19
    qA = rng.integers(-8, 9, size=(M, K)).astype(np.float64)
    qB = rng.integers(-8, 9, size=(K, N)).astype(np.float64)
    sA = 2.0 ** rng.integers(-6, 6, size=(M, 1)).astype(np.float64)
    sB = 2.0 ** rng.integers(-6, 6, size=(1, N)).astype(np.float64)
    C = scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB))
    assert C.shape == (M, N) and C.is_contiguous()
    assert np.array_equal(C.double().cpu().numpy(), scaled_mm(qA, qB, sA, sB))
    sA_blocks = 2.0 ** rng.integers(-6, 6, size=(M, 2)).astype(np.float64)
    sB_blocks = 2.0 ** rng.integers(-6, 6, size=(2, 1)).astype(np.float64)
    C = block_scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA_blocks), t(sB_blocks))
    assert np.array_equal(C.double().cpu().numpy(), blockwise_scaled_mm(qA, qB, sA_blocks, sB_blocks))
    for a_shape, b_shape, a_stride, b_stride, n in seen:  # each launcher's launch
        assert (a_shape, b_shape, n) == ((M, 160), (160, 32), 32)
        assert a_stride[0] % 16 == 0 and b_stride[0] % 16 == 0  # every row starts 16-byte aligned
    # aligned operands go as they are, strides and all
    seen.clear()
    qa, qb = t(qA[:, :144], E4M3), t(qB[:144, :16], E4M3)
    scaled_matmul(qa, qb, t(sA), t(sB[:, :16]))
    assert seen[0][:2] == ((M, 144), (144, 16))


def test_wrong_axis_row_scales_fail_the_check():
    # the mutation: the per-row scales of A applied along the columns (and B's along the rows),
    # on a square problem where the shapes would let it through
    qA, qB, sA, sB = rowwise_inputs(40, 130, 40, seed=3)
    tol = rowwise_tol(qA, qB, sA, sB)
    C_ref = scaled_mm(qA, qB, sA, sB)
    good = scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB))
    swapped = scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sB.T), t(sA.T))
    assert agrees(good, C_ref, tol)
    assert not agrees(swapped, C_ref, tol)


@pytest.mark.parametrize("M,K,N", [(16, 32, 16), (48, 160, 32), (64, 256, 48)])
def test_scaled_matmul_against_torch_scaled_mm(M, K, N):
    # torch._scaled_mm: operands of dims divisible by 16, B column-major, scales (M, 1) and (1, N);
    # on this CPU build it dequantizes and runs an fp32 GEMM (see nbhelpers.scaled_gemm), which is
    # also within gamma_(K+5) T of the reference; both are checked against the reference
    qA, qB, sA, sB = rowwise_inputs(M, K, N, seed=4)
    a, b = t(qA, E4M3), t(qB.T, E4M3).t()
    out_dtype = torch.bfloat16  # rowwise scaling in torch's CUDA path wants a bf16 output
    C_torch = torch._scaled_mm(a, b, scale_a=t(sA), scale_b=t(sB), out_dtype=out_dtype)
    C = scaled_matmul(a, b, t(sA), t(sB), out_dtype=out_dtype)
    C_ref = scaled_mm(qA, qB, sA, sB, out_fmt="bf16")
    tol = rowwise_tol(qA, qB, sA, sB)
    assert agrees(C, C_ref, tol, "bf16") and agrees(C_torch, C_ref, tol, "bf16")


# ------------------------------------------------------------------ block-scaled fp8 GEMM


BLOCK_SHAPES = [(1, 1, 1), (7, 129, 33), (33, 257, 7), (100, 300, 129), (1, 128, 257), (17, 385, 100)]


@pytest.mark.parametrize("M,K,N", BLOCK_SHAPES)
@pytest.mark.parametrize("out", ["fp32", "bf16"])
def test_block_scaled_matmul_against_blockwise_scaled_mm(M, K, N, out):
    qA, qB, sA, sB = block_inputs(M, K, N, seed=M * K + N)
    out_dtype = torch.float32 if out == "fp32" else torch.bfloat16
    C = block_scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB), out_dtype=out_dtype)
    assert C.shape == (M, N) and C.dtype == out_dtype
    C_ref = blockwise_scaled_mm(qA, qB, sA, sB, out_fmt=out)
    assert agrees(C, C_ref, block_tol(qA, qB, sA, sB), out)


def test_block_scaled_per_column_scales_of_b():
    qA, qB, sA, sB = block_inputs(20, 300, 150, seed=5)
    sB_cols = np.repeat(sB, 128, axis=1)[:, :150] * np.linspace(0.5, 2, 150)  # vary inside a block
    sB_cols = sB_cols.astype(np.float32).astype(np.float64)
    C = block_scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB_cols))
    C_ref = blockwise_scaled_mm(qA, qB, sA, sB_cols)
    assert agrees(C, C_ref, block_tol(qA, qB, sA, sB_cols))


def test_block_scales_are_applied_per_k_block_not_in_the_epilogue():
    # the mistake chapter 07 warns about: one scale per row (the mean over K-blocks) pulled out
    # of the sum. It must not pass the block check.
    qA, qB, sA, sB = block_inputs(30, 384, 30, seed=6)
    C_ref = blockwise_scaled_mm(qA, qB, sA, sB)
    tol = block_tol(qA, qB, sA, sB)
    assert agrees(block_scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB)), C_ref, tol)
    flat_a = np.repeat(sA.mean(axis=1, keepdims=True), sA.shape[1], axis=1).astype(np.float32).astype(np.float64)
    assert not agrees(block_scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(flat_a), t(sB)), C_ref, tol)


def test_wrong_axis_block_scales_fail_the_check():
    # the block-scale grid of B transposed (K-blocks read as N-blocks): same shape when nk == nn
    qA, qB, sA, sB = block_inputs(24, 300, 300, seed=7)
    assert sB.shape == (3, 3) and not np.allclose(sB, sB.T)
    C_ref = blockwise_scaled_mm(qA, qB, sA, sB)
    tol = block_tol(qA, qB, sA, sB)
    assert agrees(block_scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB)), C_ref, tol)
    assert not agrees(block_scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB.T.copy())), C_ref, tol)


@pytest.mark.parametrize("M,K,N", [(16, 256, 32), (48, 384, 128)])
def test_block_scaled_against_torch_scaled_mm_per_k_block(M, K, N):
    # torch has no block-scaled GEMM that this test can count on across versions; its rowwise
    # _scaled_mm, called once per K-block with that block's scales and summed in fp32, is the
    # same computation (the K-block partials scaled, then added). Rowwise scaling in torch's CUDA
    # path gives a bf16 output, so each partial is rounded to bf16 there: torch's side gets one
    # more u_bf16 of each partial's magnitude, u_bf16 * T
    qA, qB, sA, sB = block_inputs(M, K, N, seed=8)
    sb_full = np.repeat(sB, 128, axis=1)[:, :N]
    out_dtype = torch.float32 if INTERPRETED else torch.bfloat16
    C_torch = torch.zeros((M, N), device=DEV)
    for b in range(K // 128):
        k0, k1 = 128 * b, 128 * (b + 1)
        C_torch += torch._scaled_mm(
            t(qA[:, k0:k1], E4M3),
            t(qB[k0:k1].T, E4M3).t(),
            scale_a=t(sA[:, b : b + 1]),
            scale_b=t(sb_full[b : b + 1]),
            out_dtype=out_dtype,
        ).float()
    C = block_scaled_matmul(t(qA, E4M3), t(qB, E4M3), t(sA), t(sB))
    C_ref = blockwise_scaled_mm(qA, qB, sA, sB)
    tol = block_tol(qA, qB, sA, sB)
    extra = 0.0 if INTERPRETED else U_BF16 * block_magnitude(qA, qB, sA, sB)
    assert agrees(C, C_ref, tol) and agrees(C_torch, C_ref, tol + extra)


# ------------------------------------------------------------------ the interpreter's fp8 gap


@pytest.mark.skipif(not INTERPRETED, reason="what the interpreter does with fp8; compiled kernels take fp8")
def test_interpreter_fp8_codes_and_the_exact_upcast():
    # measured with Triton 3.7.1: the interpreter holds fp8 as raw uint8 codes, but its tl.dot
    # decodes them (to fp16, exact) before the numpy matmul, so the raw kernel on fp8 tensors is
    # right here; the launcher's upcast to fp32 (also exact) gives the same numbers without
    # depending on that. If an interpreter version stops decoding, the first assert says so.
    qA, qB, sA, sB = rowwise_inputs(16, 128, 16, seed=9)
    a, b, sa, sb = t(qA, E4M3), t(qB, E4M3), t(sA), t(sB)
    raw = torch.empty((16, 16))
    scaled_matmul_kernel[(1,)](
        a,
        b,
        raw,
        sa,
        sb,
        16,
        16,
        128,
        *a.stride(),
        *b.stride(),
        *raw.stride(),
        1,
        1,
        BLOCK_M=16,
        BLOCK_N=16,
        BLOCK_K=128,
        GROUP_M=1,
        PRECISE_ACC=True,
    )
    C_ref = scaled_mm(qA, qB, sA, sB)
    tol = rowwise_tol(qA, qB, sA, sB)
    assert agrees(raw, C_ref, tol), (
        f"Triton {triton.__version__}: the interpreter's tl.dot no longer decodes "
        "fp8 codes (3.7.1 does); update nbhelpers/kernels/scaled_gemm.py's docstring"
    )
    C = scaled_matmul(a, b, sa, sb, block=(16, 16), group_m=1)
    assert agrees(C, C_ref, tol) and torch.equal(C, raw)


# ------------------------------------------------------------------ interface


def test_configs():
    assert FP8_INTERPRETER_CONFIG["BLOCK_K"] == SCALE_BLOCK == 128
    assert all(c.kwargs["BLOCK_K"] == SCALE_BLOCK for c in FP8_GPU_CONFIGS)


def test_group_m_changes_the_order_not_the_numbers_and_other_blocks_stay_bounded():
    qA, qB, sA, sB = block_inputs(70, 300, 50, seed=10)
    a, b, sa, sb = t(qA, E4M3), t(qB, E4M3), t(sA), t(sB)
    ref = block_scaled_matmul(a, b, sa, sb, block=(16, 16), group_m=1)
    assert torch.equal(block_scaled_matmul(a, b, sa, sb, block=(16, 16), group_m=3), ref)
    # another tile shape may sum a K-block's products in another order: bounded, not bit-equal
    C_ref = blockwise_scaled_mm(qA, qB, sA, sB)
    assert agrees(block_scaled_matmul(a, b, sa, sb, block=(64, 16)), C_ref, block_tol(qA, qB, sA, sB))


def test_bad_inputs_get_clear_errors():
    qA, qB, sA, sB = rowwise_inputs(8, 16, 8, seed=0)
    a, b, sa, sb = t(qA, E4M3), t(qB, E4M3), t(sA), t(sB)
    with pytest.raises(TypeError, match="float8"):
        scaled_matmul(a.float(), b, sa, sb)
    with pytest.raises(TypeError, match="same fp8"):
        scaled_matmul(a, b.to(torch.float8_e5m2), sa, sb)
    with pytest.raises(ValueError, match="inner dimensions"):
        scaled_matmul(a, b[:8], sa, sb)
    with pytest.raises(ValueError, match="per row of A"):
        scaled_matmul(a, b, sb, sb)
    with pytest.raises(ValueError, match="per column of B"):
        scaled_matmul(a, b, sa, sa)
    with pytest.raises(TypeError, match="float32"):
        scaled_matmul(a, b, sa.double(), sb)
    with pytest.raises(TypeError, match="out_dtype"):
        scaled_matmul(a, b, sa, sb, out_dtype=torch.float16)
    with pytest.raises(ValueError, match="block"):
        scaled_matmul(a, b, sa, sb, block=(16, 24))
    with pytest.raises(ValueError, match="group_m"):
        scaled_matmul(a, b, sa, sb, group_m=0)
    with pytest.raises(ValueError, match="K-block"):
        block_scaled_matmul(a, b, sa, sb.T)
    with pytest.raises(ValueError, match="2-D"):
        scaled_matmul(a[0], b, sa, sb)


# ------------------------------------------------------------------ fp8 on a GPU that cannot compile it


def test_fp8_e4m3_on_an_a100_is_a_sentence_not_a_compiler_traceback():
    """Triton compiles e4m3 dots for compute capability 8.9 and later: the launchers refuse an
    e4m3 operand on an older GPU with a sentence that says what to do (checked here by the reason
    itself; the launchers call it before compiling)."""
    why = kernels.fp8_unsupported_reason("float8_e4m3fn", (8, 0), "NVIDIA A100-SXM4-80GB")
    assert "compute capability 8.9 or newer" in why and "NVIDIA A100-SXM4-80GB is 8.0" in why
    assert "bf16" in why and "NBHELPERS_DEVICE=cpu" in why
    for ok in [
        ("float8_e4m3fn", (8, 9)),
        ("float8_e4m3fn", (9, 0)),
        ("float8_e4m3fn", (10, 0)),
        ("float8_e5m2", (8, 0)),
    ]:
        assert kernels.fp8_unsupported_reason(*ok) is None, ok


def test_on_a_t4_the_e4m3_launchers_say_what_is_needed_and_e5m2_goes_through(monkeypatch):
    """A T4 (compute capability 7.5, faked: the check reads torch.cuda.get_device_capability and
    get_device_name) gets from each e4m3 launcher, before anything is compiled, the sentence that
    names the capability needed (8.9), the GPU's own and what to do instead; Triton 3.7.1 would
    stop there with "type fp8e4nv not supported in this architecture" (recorded in
    benchmarks/results/compile_targets.json, `make gpu-targets`). e5m2 operands pass the check:
    Triton compiles their dots for sm_75 (as FMA loops)."""
    import nbhelpers.kernels.grouped_gemm as gg

    monkeypatch.setattr(kernels, "INTERPRETED", False)  # the check runs as on a GPU
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    qa, qb = torch.zeros((4, 8), dtype=E4M3, device=DEV), torch.zeros((8, 4), dtype=E4M3, device=DEV)
    s1, s2 = torch.ones((4, 1), device=DEV), torch.ones((1, 4), device=DEV)
    calls = [
        lambda: scaled_matmul(qa, qb, s1, s2),
        lambda: block_scaled_matmul(qa, qb, torch.ones((4, 1), device=DEV), torch.ones((1, 1), device=DEV)),
        lambda: gg.scaled_grouped_matmul(
            torch.zeros((4, 8), dtype=E4M3, device=DEV),
            torch.zeros((2, 8, 4), dtype=E4M3, device=DEV),
            torch.ones((4, 1), device=DEV),
            torch.ones((2, 4), device=DEV),
            np.array([0, 2, 4]),
        ),
    ]
    for call in calls:
        with pytest.raises(RuntimeError) as e:
            call()
        why = str(e.value)
        assert "compute capability 8.9 or newer" in why and "Tesla T4 is 7.5" in why
        assert "NBHELPERS_DEVICE=cpu" in why
    e5m2 = torch.float8_e5m2
    out = scaled_matmul(qa.to(e5m2), qb.to(e5m2), s1, s2, block=(32, 32))  # no tuning on a GPU
    assert out.shape == (4, 4) and not out.any()


def test_the_launchers_ask_before_compiling(monkeypatch):
    """Where kernels are compiled, scaled_matmul, block_scaled_matmul and the fp8 grouped GEMM call
    require_fp8_support with their operands' dtype and device, before anything is compiled."""
    import nbhelpers.kernels.grouped_gemm as gg
    import nbhelpers.kernels.scaled_gemm as sg

    seen = []

    def refuse(dtype, device):
        seen.append(dtype)
        raise RuntimeError("refused")

    monkeypatch.setattr(sg, "require_fp8_support", refuse)
    monkeypatch.setattr(gg, "require_fp8_support", refuse)
    qa = torch.zeros((4, 8), dtype=E4M3)
    qb = torch.zeros((8, 4), dtype=E4M3)
    s1, s2 = torch.ones((4, 1)), torch.ones((1, 4))
    with pytest.raises(RuntimeError, match="refused"):
        sg.scaled_matmul(qa, qb, s1, s2)
    with pytest.raises(RuntimeError, match="refused"):
        sg.block_scaled_matmul(qa, qb, torch.ones((4, 1)), torch.ones((1, 1)))
    with pytest.raises(RuntimeError, match="refused"):
        gg.scaled_grouped_matmul(
            torch.zeros((4, 8), dtype=E4M3),
            torch.zeros((2, 8, 4), dtype=E4M3),
            torch.ones((4, 1)),
            torch.ones((2, 4)),
            np.array([0, 2, 4]),
        )
    assert seen == [E4M3] * 3
