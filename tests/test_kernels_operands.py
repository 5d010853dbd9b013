"""Tests of nbhelpers.kernels.operands: kernel_operand's tensors against ml_dtypes' and torch's own
casts, bit for bit; the launchers' recipe checks; MX recipes run on the block-scaled kernel by
emulation (e2m1 values carried in e4m3, e8m0 scales as float32 powers of two) against the
reference blockwise_scaled_mm; NVFP4 refused with a sentence."""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from nbhelpers import kernels
from nbhelpers.experiments import gemm_inputs
from nbhelpers.kernels.grouped_gemm import scaled_grouped_matmul
from nbhelpers.kernels.operands import carrier_dtype, kernel_operand
from nbhelpers.kernels.scaled_gemm import block_scaled_matmul, scaled_matmul
from nbhelpers.recipes import PER_COLUMN, PER_ROW, RECIPES, Recipe
from nbhelpers.scaled_gemm import ROWWISE_RECIPES, blockwise_scaled_mm, scaled_mm
from nbhelpers.scaling import quantize

DEV = INFO.device
GPU_ALLOWANCE = 0.0 if kernels.INTERPRETED else 2.0**-10
_ML = {torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn, torch.float8_e5m2: ml_dtypes.float8_e5m2}


def gamma(n: int) -> float:
    u = 2.0**-24
    return n * u / (1 - n * u)


@pytest.mark.parametrize(
    "name, dtype",
    [
        ("fp8 e4m3 per-row", torch.float8_e4m3fn),
        ("fp8 e5m2 per-tensor", torch.float8_e5m2),
        ("fp8 e4m3 1x128", torch.float8_e4m3fn),
        ("MXFP8", torch.float8_e4m3fn),
        ("MXFP8 e5m2", torch.float8_e5m2),
        ("MXFP4", torch.float8_e4m3fn),
        ("MXFP4 RCEIL", torch.float8_e4m3fn),
        ("int8 per-row", torch.int8),
        ("int4 g128", torch.int8),
    ],
)
def test_kernel_operand_bits_match_ml_dtypes_and_torch(name, dtype):
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal((9, 200)) * np.exp2(rng.integers(-6, 6, (9, 1)))
    q, s = quantize(x, name)
    op = kernel_operand(q, s, name, device="cpu")
    assert op.q.dtype == dtype == carrier_dtype(name) and op.q.shape == q.shape and op.recipe == RECIPES[name]
    if dtype in _ML:  # the bytes are ml_dtypes' encoding of the same values
        np.testing.assert_array_equal(op.q.view(torch.uint8).numpy(), q.astype(_ML[dtype]).view(np.uint8))
    else:
        np.testing.assert_array_equal(op.q.numpy(), q.astype(np.int8))
    assert op.scales.dtype == torch.float32 and op.scales.shape == s.shape
    np.testing.assert_array_equal(op.scales.numpy().view(np.uint32), s.astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(op.q.double().numpy(), q)  # and back, exactly
    np.testing.assert_array_equal(op.scales.double().numpy(), s)


def test_kernel_operand_transposed_and_stacked():
    """A weight stored (N, K), quantized per row, becomes the K-major (K, N) view with per-column
    scales; a stack of them (one per expert) in one call."""
    rng = np.random.default_rng(1)
    per_expert = [quantize(rng.standard_normal((6, 40)), "fp8 e4m3 per-row") for _ in range(3)]
    q = np.stack([q for q, _ in per_expert])
    s = np.stack([s for _, s in per_expert])
    op = kernel_operand(q, s, "fp8 e4m3 per-row", transpose=True, device="cpu")
    assert op.q.shape == (3, 40, 6) and op.q.stride(1) == 1  # K-major
    assert op.scales.shape == (3, 1, 6) and op.recipe.block == PER_COLUMN
    np.testing.assert_array_equal(op.q.double().numpy(), q.transpose(0, 2, 1))
    np.testing.assert_array_equal(op.scales.double().numpy(), s.transpose(0, 2, 1))


def test_kernel_operand_refusals():
    x = np.random.default_rng(2).standard_normal((4, 64))
    with pytest.raises(ValueError, match=r"recipe NVFP4: its scale \('e4m3_over_fp32'\).* not an fp32 value"):
        kernel_operand(*quantize(x, "NVFP4"), "NVFP4")
    q, s = quantize(x, "fp8 e4m3 per-row")
    with pytest.raises(ValueError, match=r"q is not on the grid of the recipe's elements \(e4m3fn\)"):
        kernel_operand(q + 1e-3, s, "fp8 e4m3 per-row")
    with pytest.raises(ValueError, match=r"scales has shape \(1, 4\), but q of shape \(4, 64\) .* has \(4, 1\) blocks"):
        kernel_operand(q, s.T, "fp8 e4m3 per-row")
    with pytest.raises(ValueError, match="the scales are not fp32 values"):
        kernel_operand(q, s * (1 + 2.0**-40), "fp8 e4m3 per-row")
    with pytest.raises(ValueError, match=r"q must be \(M, K\)"):
        kernel_operand(q[0], s[0], "fp8 e4m3 per-row")
    with pytest.raises(ValueError, match="no torch dtype carries the elements of recipe .*tf32"):
        carrier_dtype(Recipe("tf32", PER_ROW))


def _block_tol(qA, qB, sA, sB, block_k):
    """gamma_(kb + 2 nk + 5) times T = sum over K-blocks of |sA| (|qA_b| @ |qB_b|) |sB|, as in
    tests/test_kernels_scaled_gemm.py, for K-blocks of block_k and scales of B per column."""
    M, K = qA.shape
    nk = math.ceil(K / block_k)
    T = np.zeros((M, qB.shape[1]))
    for b in range(nk):
        k0, k1 = b * block_k, min((b + 1) * block_k, K)
        T += np.abs(sA[:, b : b + 1]) * (np.abs(qA[:, k0:k1]) @ np.abs(qB[k0:k1])) * np.abs(sB[b : b + 1])
    return (gamma(min(K, block_k) + 2 * nk + 5) + GPU_ALLOWANCE) * T


MX_PAIRS = {
    "MXFP8": ("MXFP8", Recipe("e4m3fn", (32, 1), "e8m0", name="MXFP8 of B (K, N)")),
    "MXFP4": ("MXFP4", Recipe("e2m1fn", (32, 1), "e8m0", name="MXFP4 of B (K, N)")),
    "MXFP4 RCEIL": ("MXFP4 RCEIL", Recipe("e2m1fn", (32, 1), "e8m0_rceil", name="MXFP4 RCEIL of B (K, N)")),
}


@pytest.mark.parametrize("pair", list(MX_PAIRS))
@pytest.mark.parametrize("M, K, N", [(7, 100, 33), (20, 64, 5)])
def test_mx_recipes_run_on_the_block_scaled_kernel(pair, M, K, N):
    rA, rB = MX_PAIRS[pair]
    A, B = gemm_inputs(M, K, N, seed=M + K + N)
    A[:, ::29] *= 50.0  # outliers in some K-blocks: the e8m0 scales vary along K
    (qA, sA), (qB, sB) = quantize(A, rA, "A"), quantize(B, rB, "B")
    assert sB.shape == (math.ceil(K / 32), N)
    (qa, sa, ra), (qb, sb, rb) = kernel_operand(qA, sA, rA, device=DEV), kernel_operand(qB, sB, rB, device=DEV)
    C = block_scaled_matmul(qa, qb, sa, sb, block=(16, 16), recipes=(ra, rb)).double().cpu().numpy()
    C_ref = blockwise_scaled_mm(qA, qB, sA, sB, recipes=(rA, rB))
    if RECIPES[rA].element == "e2m1fn":
        # e2m1 products are multiples of 1/4 below 36: a K-block's sum is exact in fp32, the
        # power-of-two scalings are exact, and the K-blocks are added in the same order
        np.testing.assert_array_equal(C, C_ref)
    assert np.all(np.abs(C - C_ref) <= _block_tol(qA, qB, sA, sB, 32))
    # the check can fail: the same scales read as 128-long K-blocks do not fit
    with pytest.raises(ValueError, match=r"sa must have shape"):
        block_scaled_matmul(qa, qb, sa, sb, recipes=("fp8 e4m3 1x128", "fp8 e4m3 128x128"))


def test_launchers_refuse_recipes_they_cannot_run():
    z = torch.zeros((4, 32), dtype=torch.float8_e4m3fn, device=DEV)
    zb = torch.zeros((32, 4), dtype=torch.float8_e4m3fn, device=DEV)
    one = torch.ones((1, 1), device=DEV)
    COL = ROWWISE_RECIPES[1]  # e4m3 per column of B
    with pytest.raises(ValueError, match=r"block_scaled_matmul cannot run recipe NVFP4 for A .*scale 'e4m3_over_fp32'"):
        block_scaled_matmul(z, zb, one, one, recipes=("NVFP4", Recipe("e2m1fn", (16, 1), "e4m3_over_fp32")))
    with pytest.raises(ValueError, match=r"runs elements e4m3fn, e5m2, e2m1fn.* with scales fp32, e8m0, e8m0_rceil"):
        block_scaled_matmul(z, zb, one, one, recipes=("int8 per-row", "int8 per-column"))
    with pytest.raises(ValueError, match=r"cannot run recipes \(fp8 e4m3 per-row, .*A's block \(1, None\) is not 1 x"):
        block_scaled_matmul(z, zb, one, one, recipes=("fp8 e4m3 per-row", COL))
    with pytest.raises(ValueError, match=r"block_k a power of two from 16 to 256"):
        block_scaled_matmul(z, zb, one, one, recipes=(Recipe("e4m3fn", (1, 24)), Recipe("e4m3fn", (24, 1))))
    with pytest.raises(ValueError, match=r"scaled_matmul cannot run recipe MXFP8 for A .*scale 'e8m0'.*per column"):
        scaled_matmul(z, zb, one, one, recipes=("MXFP8", "MXFP8"))
    with pytest.raises(ValueError, match=r"scaled_matmul cannot run recipes .*A's block \(1, 128\)"):
        scaled_matmul(z, zb, one, one, recipes=("fp8 e4m3 1x128", COL))
    with pytest.raises(TypeError, match=r"qa has dtype torch.float8_e4m3fn, but its recipe fp8 e5m2 per-tensor"):
        scaled_matmul(z, zb, one, one, recipes=("fp8 e5m2 per-tensor", "fp8 e5m2 per-tensor"))
    w = torch.zeros((2, 32, 4), dtype=torch.float8_e4m3fn, device=DEV).transpose(1, 2).contiguous().transpose(1, 2)
    sx, sw = torch.ones((4, 1), device=DEV), torch.ones((2, 4), device=DEV)
    off = torch.tensor([0, 2, 4])
    with pytest.raises(ValueError, match=r"scaled_grouped_matmul cannot run recipe MXFP8 for A"):
        scaled_grouped_matmul(z, w, sx, sw, off, recipes=("MXFP8", COL))
    with pytest.raises(ValueError, match=r"the weights' block \(1, None\) .* is not per column"):
        scaled_grouped_matmul(z, w, sx, sw, off, recipes=("fp8 e4m3 per-row", "fp8 e4m3 per-row"))
    with pytest.raises(TypeError, match=r"qw has dtype torch.float8_e4m3fn, but its recipe"):
        scaled_grouped_matmul(z, w, sx, sw, off, recipes=("fp8 e4m3 per-row", Recipe("e5m2", PER_COLUMN)))


def test_rowwise_recipes_through_kernel_operand_match_scaled_mm():
    """The chapter-09 path with one bridge: quantize, kernel_operand, the launcher told the recipes,
    against scaled_mm told the same recipes."""
    A, B = gemm_inputs(9, 70, 11, seed=3)
    rA, rB = RECIPES["fp8 e4m3 per-row"], ROWWISE_RECIPES[1]
    (qA, sA), (qB, sB) = quantize(A, rA), quantize(B, rB)
    (qa, sa, ra), (qb, sb, rb) = kernel_operand(qA, sA, rA, device=DEV), kernel_operand(qB, sB, rB, device=DEV)
    C = scaled_matmul(qa, qb, sa, sb, block=(16, 16), recipes=(ra, rb)).double().cpu().numpy()
    C_ref = scaled_mm(qA, qB, sA, sB, recipes=(rA, rB))
    T = np.abs(sA) * (np.abs(qA) @ np.abs(qB)) * np.abs(sB)
    assert np.all(np.abs(C - C_ref) <= (gamma(70 + 5) + GPU_ALLOWANCE) * T)
