"""Tests of nbhelpers.scaled_gemm: the reference scaled GEMMs and the fp8 accumulator.

Oracles: exact rational arithmetic (a slow reference below), a float64 GEMM of the dequantized
operands (with bounds derived from the number of fp32 roundings), ``torch._int_mm`` (bit-exact)
and ``torch._scaled_mm`` (bit-exact where no step rounds, else a derived bound).

u32 = 2**-24 is fp32's unit roundoff; gamma(n) = n u / (1 - n u) (Higham, ch. 3) bounds n
successive relative roundings.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from nbhelpers.accumulation import fraction_to_float_odd
from nbhelpers.recipes import PER_COLUMN, PER_ROW, PER_TENSOR, Recipe
from nbhelpers.rounding import round_to
from nbhelpers.scaled_gemm import (
    BLOCKWISE_RECIPES,
    DEEPSEEK_V3_ACCUMULATOR_BITS,
    DEEPSEEK_V3_PROMOTE_EVERY,
    FP8_TENSOR_CORES,
    INT32_MAX,
    accumulator_align_bits,
    blockwise_scaled_mm,
    fp8_tensor_core_mm,
    int8_matmul,
    scaled_mm,
)
from nbhelpers.scaling import quantize

U32 = 2.0**-24
U_BF16 = 2.0**-8


def kblocks(block_k: int, block_n: int = 128, fmt: str = "e4m3fn") -> tuple[Recipe, Recipe]:
    """The recipes of A in 1 x block_k tiles and B in block_k x block_n blocks, elements ``fmt``."""
    return Recipe(fmt, (1, block_k)), Recipe(fmt, (block_k, block_n))


def gamma(n: int, u: float = U32) -> float:
    return n * u / (1 - n * u)


def fp8(rng, shape, fmt="e4m3fn", scale=1.0):
    """Random values on the fp8 grid, spread over a few binades, with both signs."""
    return round_to(rng.standard_normal(shape) * scale, fmt, saturate=True)


def fp32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def f32(x) -> float:
    return float(np.float32(x))


def dot_to_fp32_ref(a, b) -> float:
    """The exact dot product of two 1-D arrays, rounded once to fp32 (exact Fractions, then
    round-to-odd in float64, then one rounding: correct, Boldo & Melquiond 2008)."""
    exact = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a, b)), Fraction(0))
    return f32(fraction_to_float_odd(exact))


def scaled_mm_ref(qA, qB, sA, sB):
    """One output at a time: exact sum rounded once to fp32, then fl32(fl32(acc * sA) * sB)."""
    M, N = qA.shape[0], qB.shape[1]
    sA = np.broadcast_to(sA, (M, 1))
    sB = np.broadcast_to(sB, (1, N))
    C = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            acc = np.float32(dot_to_fp32_ref(qA[i], qB[:, j]))
            C[i, j] = float((acc * np.float32(sA[i, 0])) * np.float32(sB[0, j]))
    return C


def blockwise_ref(qA, qB, sA, sB, block_k):
    """One output at a time, sB given per column (nk, N)."""
    M, K = qA.shape
    N = qB.shape[1]
    C = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            acc = np.float32(0)
            for b, k0 in enumerate(range(0, K, block_k)):
                k1 = min(k0 + block_k, K)
                p = np.float32(dot_to_fp32_ref(qA[i, k0:k1], qB[k0:k1, j]))
                acc = np.float32(acc + (p * np.float32(sA[i, b])) * np.float32(sB[b, j]))
            C[i, j] = float(acc)
    return C


def dequant_ref(qA, qB, sA, sB):
    """float64 GEMM of the dequantized operands (every product and scale exact in float64; the
    float64 sum's own error is far below the fp32 bounds it is compared with)."""
    return (qA * sA) @ (qB * sB)


def torch_fp8(q, fmt="e4m3fn"):
    dt = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
    t = torch.tensor(q, dtype=torch.float32).to(dt)
    assert (t.double().numpy() == q).all()  # values on the grid: the cast is exact
    return t


def torch_scaled(qA, qB, sA, sB, out="fp32", fa="e4m3fn", fb="e4m3fn"):
    """torch._scaled_mm with B passed as the transpose of an (N, K) tensor (column-major (K, N)),
    the layout its CUDA path requires; per-tensor scales as 0-d fp32 tensors."""
    A = torch_fp8(qA, fa)
    B = torch_fp8(qB.T.copy(), fb).t()
    ts = [
        torch.tensor(float(s[0, 0]), dtype=torch.float32) if s.shape == (1, 1) else torch.tensor(s, dtype=torch.float32)
        for s in (sA, sB)
    ]
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[out]
    return torch._scaled_mm(A, B, ts[0], ts[1], out_dtype=dt).double().numpy()


def pow2_scales(rng, shape):
    return np.ldexp(1.0, rng.integers(-6, 7, shape))


def rand_scales(rng, shape):
    return fp32(np.exp(rng.uniform(-4, 4, shape)))


# ====================================================================== int8


@pytest.mark.parametrize("M,K,N", [(16, 32, 8), (5, 37, 3), (1, 1, 1), (33, 200, 17)])
def test_int8_matmul_matches_torch_int_mm_bit_exactly(M, K, N):
    rng = np.random.default_rng(M * 1000 + K)
    qA = rng.integers(-128, 128, (M, K))
    qB = rng.integers(-128, 128, (K, N))
    qA[0, 0] = -128  # the asymmetric end of int8
    ours = int8_matmul(qA, qB)
    theirs = torch._int_mm(torch.tensor(qA, dtype=torch.int8), torch.tensor(qB, dtype=torch.int8))
    assert ours.dtype == np.int32 and theirs.dtype == torch.int32
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_int8_overflow_boundary_127():
    # 127**2 * K fits int32 up to K = floor((2**31 - 1) / 127**2) = 133,144
    k_max = INT32_MAX // 127**2
    assert k_max == 133_144
    ok = int8_matmul(np.full((1, k_max), 127), np.full((k_max, 1), 127))
    assert int(ok[0, 0]) == 127**2 * k_max
    with pytest.raises(OverflowError, match=r"int32 accumulator overflow.*K = 133145"):
        int8_matmul(np.full((1, k_max + 1), 127), np.full((k_max + 1, 1), 127))


def test_int8_overflow_boundary_128():
    k = 2**31 // 128**2  # 131,072 products of (-128)*(-128) give exactly 2**31: one past INT32_MAX
    assert int(int8_matmul(np.full((1, k - 1), -128), np.full((k - 1, 1), -128))[0, 0]) == 2**31 - 2**14
    with pytest.raises(OverflowError, match="beyond 2\\*\\*31 - 1"):
        int8_matmul(np.full((1, k), -128), np.full((k, 1), -128))


def test_int8_partial_overflow_that_returns_is_fine():
    # int32 wraps around: partial sums beyond INT32_MAX that come back give the exact result
    k = 140_000
    a = np.full((1, 2 * k), 127)
    b = np.concatenate([np.full(k, 127), np.full(k, -127)])[:, None]
    assert int(int8_matmul(a, b)[0, 0]) == 0


@pytest.mark.parametrize("rowwise", [False, True])
def test_scaled_mm_int8_against_dequantized_float64(rowwise):
    rng = np.random.default_rng(11)
    M, K, N = 24, 300, 20
    qA = rng.integers(-128, 128, (M, K))
    qB = rng.integers(-128, 128, (K, N))
    sA = rand_scales(rng, (M, 1) if rowwise else (1, 1))
    sB = rand_scales(rng, (1, N) if rowwise else (1, 1))
    C = scaled_mm(qA, qB, sA, sB, in_fmt="int8")
    ref = dequant_ref(qA.astype(float), qB.astype(float), sA, sB)
    # three fp32 roundings (int32 -> fp32, * sA, * sB), each relative: gamma(3) |ref|
    assert (np.abs(C - ref) <= gamma(3) * np.abs(ref)).all()
    assert (C == fp32(C)).all()
    np.testing.assert_array_equal(C, scaled_mm_ref(qA, qB, sA, sB))


def test_scaled_mm_int8_exact_with_power_of_two_scales():
    rng = np.random.default_rng(12)
    qA, qB = rng.integers(-128, 128, (8, 64)), rng.integers(-128, 128, (64, 8))
    sA, sB = pow2_scales(rng, (8, 1)), pow2_scales(rng, (1, 8))
    C = scaled_mm(qA, qB, sA, sB, in_fmt="int8")
    # |acc| <= 128**2 * 64 = 2**20 < 2**24: every step exact
    np.testing.assert_array_equal(C, dequant_ref(qA.astype(float), qB.astype(float), sA, sB))


# ====================================================================== fp8, constant scales


@pytest.mark.parametrize("in_fmt", ["e4m3fn", "e5m2", ("e4m3fn", "e5m2")])
def test_scaled_mm_fp8_bit_exact_against_slow_reference(in_fmt):
    fa, fb = in_fmt if isinstance(in_fmt, tuple) else (in_fmt, in_fmt)
    rng = np.random.default_rng(3)
    M, K, N = 5, 40, 4
    qA = fp8(rng, (M, K), fa, 30.0)
    qB = fp8(rng, (K, N), fb, 30.0)
    sA, sB = rand_scales(rng, (M, 1)), rand_scales(rng, (1, N))
    np.testing.assert_array_equal(scaled_mm(qA, qB, sA, sB, in_fmt=in_fmt), scaled_mm_ref(qA, qB, sA, sB))


@pytest.mark.parametrize("out", ["fp32", "bf16"])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
@pytest.mark.parametrize("rowwise", [False, True])
def test_scaled_mm_fp8_against_dequantized_float64(out, fmt, rowwise):
    rng = np.random.default_rng(5)
    M, K, N = 32, 512, 24
    qA, qB = fp8(rng, (M, K), fmt, 20.0), fp8(rng, (K, N), fmt, 20.0)
    sA = rand_scales(rng, (M, 1) if rowwise else (1, 1))
    sB = rand_scales(rng, (1, N) if rowwise else (1, 1))
    C = scaled_mm(qA, qB, sA, sB, out_fmt=out, in_fmt=fmt)
    ref = dequant_ref(qA, qB, sA, sB)
    # fp32: the exact sum rounded once, then two scalings: gamma(3) relative. bf16: one more
    # rounding from the fp32 value, at most U_BF16 of it.
    tol = gamma(3) if out == "fp32" else gamma(3) + U_BF16 * (1 + gamma(3))
    assert (np.abs(C - ref) <= tol * np.abs(ref)).all()
    assert (C == round_to(C, out)).all()


@pytest.mark.parametrize("out", ["fp32", "bf16"])
@pytest.mark.parametrize("rowwise", [False, True])
def test_scaled_mm_matches_torch_scaled_mm_bit_exactly_where_nothing_rounds(out, rowwise):
    # integer fp8 values in [-16, 16]: every partial sum is an integer below 16**2 * K = 2**14 <
    # 2**24, exact in fp32 in any order; power-of-two scales make every scaling exact. Then the
    # order of the operations cannot matter, and the two must agree bit for bit.
    rng = np.random.default_rng(21)
    M, K, N = 16, 64, 24
    qA = rng.integers(-16, 17, (M, K)).astype(float)
    qB = rng.integers(-16, 17, (K, N)).astype(float)
    sA = pow2_scales(rng, (M, 1) if rowwise else (1, 1))
    sB = pow2_scales(rng, (1, N) if rowwise else (1, 1))
    ours = scaled_mm(qA, qB, sA, sB, out_fmt=out)
    np.testing.assert_array_equal(ours, torch_scaled(qA, qB, sA, sB, out))


def test_torch_scaled_mm_on_cpu_scales_the_operands_not_the_accumulator():
    """What torch's CPU build does (measured with torch 2.13.0; documented in scaled_gemm's
    docstring): fl32(qA * sA) and fl32(qB * sB), then an fp32 GEMM. Bit-exact against
    torch.matmul of the scaled operands, and different from the exact-accumulator epilogue in
    most outputs with these scales. A failure after a torch upgrade means its CPU path changed."""
    rng = np.random.default_rng(22)
    M, K, N = 16, 64, 24
    qA = rng.integers(-16, 17, (M, K)).astype(float)
    qB = rng.integers(-16, 17, (K, N)).astype(float)
    sA, sB = fp32([[0.3]]), fp32([[0.7]])
    theirs = torch_scaled(qA, qB, sA, sB)
    operand_scaled = (
        torch.matmul(
            torch.tensor(qA, dtype=torch.float32) * float(sA[0, 0]),
            torch.tensor(qB, dtype=torch.float32) * float(sB[0, 0]),
        )
        .double()
        .numpy()
    )
    np.testing.assert_array_equal(
        theirs,
        operand_scaled,
        err_msg=f"torch {torch.__version__}: torch._scaled_mm "
        "on the CPU no longer scales the operands (torch 2.13.0 does)",
    )
    differ = (scaled_mm(qA, qB, sA, sB) != theirs).mean()
    assert differ > 0.5, f"torch {torch.__version__}: only {differ:.0%} differ from the epilogue (torch 2.13.0: most)"


@pytest.mark.parametrize("out", ["fp32", "bf16"])
@pytest.mark.parametrize("fmts", [("e4m3fn", "e4m3fn"), ("e5m2", "e4m3fn")])
@pytest.mark.parametrize("rowwise", [False, True])
def test_scaled_mm_agrees_with_torch_scaled_mm_within_derived_bound(out, fmts, rowwise):
    # torch (CPU): each term fl32(fl32(a sA) * fl32(b sB)) has 3 roundings, the K-term fp32 sum
    # K - 1 more, in any order: within gamma(K + 2) * sum_k |a_k b_k| sA sB of the exact value.
    # Ours: within gamma(3) |exact| <= gamma(3) * the same sum. bf16 out: each side rounds its
    # fp32 value once more, by at most U_BF16 of it.
    rng = np.random.default_rng(31)
    M, K, N = 32, 256, 16
    qA, qB = fp8(rng, (M, K), fmts[0], 40.0), fp8(rng, (K, N), fmts[1], 40.0)
    sA = rand_scales(rng, (M, 1) if rowwise else (1, 1))
    sB = rand_scales(rng, (1, N) if rowwise else (1, 1))
    ours32 = scaled_mm(qA, qB, sA, sB, in_fmt=fmts)
    theirs32 = torch_scaled(qA, qB, sA, sB, "fp32", *fmts)
    mass = (np.abs(qA) @ np.abs(qB)) * sA * sB
    bound32 = (gamma(K + 2) + gamma(3)) * mass
    assert (np.abs(ours32 - theirs32) <= bound32).all()
    if out == "bf16":
        ours = scaled_mm(qA, qB, sA, sB, out_fmt="bf16", in_fmt=fmts)
        theirs = torch_scaled(qA, qB, sA, sB, "bf16", *fmts)
        np.testing.assert_array_equal(theirs, round_to(theirs32, "bf16"))  # torch: fp32 then one rounding
        bound = bound32 + U_BF16 * (np.abs(ours32) + np.abs(theirs32))
        assert (np.abs(ours - theirs) <= bound).all()


# ====================================================================== scales varying along K


def _block_data(rng, M, K, N, block_k, fmt="e4m3fn"):
    nk = -(-K // block_k)
    qA, qB = fp8(rng, (M, K), fmt, 30.0), fp8(rng, (K, N), fmt, 30.0)
    sA = fp32(np.ldexp(rng.uniform(0.5, 1.0, (M, nk)), rng.integers(-5, 6, (M, nk))))
    return qA, qB, sA, nk


def _dequant_blockwise(qA, qB, sA, sB_cols, block_k):
    K = qA.shape[1]
    col = np.arange(K) // block_k
    return (qA * sA[:, col]) @ (qB * sB_cols[col, :])


def test_blockwise_bit_exact_against_slow_reference():
    rng = np.random.default_rng(41)
    M, K, N, bk = 3, 70, 5, 16  # K not a multiple of block_k: the last block is shorter
    qA, qB, sA, nk = _block_data(rng, M, K, N, bk)
    sB = rand_scales(rng, (nk, N))
    np.testing.assert_array_equal(
        blockwise_scaled_mm(qA, qB, sA, sB, recipes=kblocks(bk)), blockwise_ref(qA, qB, sA, sB, bk)
    )


@pytest.mark.parametrize("out", ["fp32", "bf16"])
def test_blockwise_against_dequantized_float64(out):
    rng = np.random.default_rng(42)
    M, K, N, bk, bn = 16, 1000, 200, 128, 128  # N not a multiple of block_n either
    qA, qB, sA, nk = _block_data(rng, M, K, N, bk)
    sB = rand_scales(rng, (nk, -(-N // bn)))
    C = blockwise_scaled_mm(qA, qB, sA, sB, recipes=kblocks(bk, bn), out_fmt=out)
    sB_cols = np.repeat(sB, bn, axis=1)[:, :N]
    ref = _dequant_blockwise(qA, qB, sA, sB_cols, bk)
    # each block's term has 3 roundings (partial to fp32, * sA, * sB), the nk-term fp32
    # accumulation nk - 1 more: within gamma(nk + 2) * sum_b |T_b|, T_b the exact block terms
    col = np.arange(K) // bk
    T = np.stack([(qA[:, col == b] * sA[:, b : b + 1]) @ (qB[col == b] * sB_cols[b]) for b in range(nk)])
    bound = gamma(nk + 2) * np.abs(T).sum(axis=0)
    if out == "bf16":
        bound = bound + U_BF16 * (np.abs(ref) + bound)
    assert (np.abs(C - ref) <= bound).all()
    # per-column sB gives the same result as the expanded per-block sB
    np.testing.assert_array_equal(C, blockwise_scaled_mm(qA, qB, sA, sB_cols, recipes=kblocks(bk), out_fmt=out))


def test_k_varying_scale_in_the_epilogue_is_wrong():
    rng = np.random.default_rng(43)
    M, K, N, bk = 16, 1024, 16, 128
    qA, qB, sA, nk = _block_data(rng, M, K, N, bk)
    sB = fp32(np.ones((nk, N)))
    ref = _dequant_blockwise(qA, qB, sA, sB, bk)
    right = blockwise_scaled_mm(qA, qB, sA, sB, recipes=kblocks(bk))
    col = np.arange(K) // bk
    T = np.stack([(qA[:, col == b] * sA[:, b : b + 1]) @ qB[col == b] for b in range(nk)])
    tol = gamma(nk + 2) * np.abs(T).sum(axis=0)
    assert (np.abs(right - ref) <= tol).all()
    ones = fp32(np.ones((1, N)))
    for wrong_sA in (fp32(sA.mean(axis=1, keepdims=True)), sA[:, :1]):
        wrong = scaled_mm(qA, qB, wrong_sA, ones)
        # off by far more than the tolerance: in the median output, by more than 1e4 tolerances
        assert np.median(np.abs(wrong - ref) / tol) > 1e4
        assert np.median(np.abs(wrong - ref) / np.abs(ref)) > 0.05


def test_blockwise_with_one_block_equals_scaled_mm():
    rng = np.random.default_rng(44)
    qA, qB = fp8(rng, (6, 100)), fp8(rng, (100, 7))
    sA, sB = rand_scales(rng, (6, 1)), rand_scales(rng, (1, 7))
    np.testing.assert_array_equal(
        blockwise_scaled_mm(qA, qB, sA, sB, recipes=kblocks(128, 1)), scaled_mm(qA, qB, sA, sB)
    )


def test_blockwise_int8():
    rng = np.random.default_rng(45)
    M, K, N, bk = 4, 300, 6, 128
    qA, qB = rng.integers(-128, 128, (M, K)), rng.integers(-128, 128, (K, N))
    sA, sB = rand_scales(rng, (M, 3)), rand_scales(rng, (3, N))
    np.testing.assert_array_equal(
        blockwise_scaled_mm(qA, qB, sA, sB, recipes=kblocks(bk, fmt="int8")),
        blockwise_ref(qA.astype(float), qB.astype(float), sA, sB, bk),
    )


# ====================================================================== fp8 tensor-core accumulator


def test_fourteen_bits_is_align_bits_13():
    # the mapping: 14 significant bits kept (leading bit included) = 13 bits below the leading bit
    assert DEEPSEEK_V3_ACCUMULATOR_BITS == 14 and DEEPSEEK_V3_PROMOTE_EVERY == 128
    assert accumulator_align_bits(14) == 13
    one = np.ones((1, 1))
    # 1 + 2**-13 (1 * 1 + 2**-6 * 2**-7) keeps its last bit; 1 + 2**-14 loses it
    kept = fp8_tensor_core_mm(np.array([[1.0, 2.0**-6]]), np.array([[1.0], [2.0**-7]]), one, one)
    lost = fp8_tensor_core_mm(np.array([[1.0, 2.0**-7]]), np.array([[1.0], [2.0**-7]]), one, one)
    assert kept[0, 0] == 1 + 2.0**-13 and lost[0, 0] == 1.0
    assert (
        fp8_tensor_core_mm(np.array([[1.0, 2.0**-7]]), np.array([[1.0], [2.0**-7]]), one, one, accumulator_bits=15)[
            0, 0
        ]
        == 1 + 2.0**-14
    )


def _positive_leaning(seed=7, M=4, K=16384, N=4):
    rng = np.random.default_rng(seed)
    qA = round_to(rng.uniform(0, 2, (M, K)), "e4m3fn")
    qB = round_to(rng.normal(0.5, 1.0, (K, N)), "e4m3fn")
    return qA, qB


def test_promotion_every_128_fixes_the_14_bit_accumulator():
    # seed 7, K = 16384, positive-leaning data (A uniform on [0, 2], B normal with mean 0.5).
    # Measured: max relative error 0.107 without promotion, 1.1e-4 with promotion every 128.
    qA, qB = _positive_leaning()
    one = np.ones((1, 1))
    exact = qA @ qB  # exact in float64 (e4m3fn products, K < 2**17)
    rel = {}
    for pe in (None, 128):
        C = fp8_tensor_core_mm(qA, qB, one, one, promote_every=pe)
        rel[pe] = np.abs(C - exact).max() / np.abs(exact).max()
    assert rel[None] > 0.02
    assert rel[128] < 1e-3
    assert rel[None] / rel[128] > 100


def test_huge_accumulator_matches_exact_within_fp32_rounding():
    qA, qB = _positive_leaning(K=4096)
    one = np.ones((1, 1))
    exact = qA @ qB
    mass = np.abs(qA) @ np.abs(qB)
    K, group = qA.shape[1], 32
    for pe in (None, 128):
        C = fp8_tensor_core_mm(qA, qB, one, one, accumulator_bits=47, group=group, promote_every=pe)
        # nothing is truncated at alignment (47 bits hold every e4m3fn product of a group); the only
        # errors are the fp32 roundings: one per group (toward zero, < 2**-23 of the running sum), one per
        # promotion and the final one (nearest-even): at most (K/group + K/128 + 1) * 2**-23 * sum|p|
        bound = (K // group + K // 128 + 1) * 2.0**-23 * mass
        assert (np.abs(C - exact) <= bound).all()
    assert np.abs(C - exact).max() / np.abs(exact).max() < 1e-5


def test_fp8_tensor_core_scales():
    rng = np.random.default_rng(51)
    M, K, N, bk = 4, 512, 5, 128
    qA, qB, sA, nk = _block_data(rng, M, K, N, bk)
    sB = rand_scales(rng, (nk, 1))
    # huge accumulator and promotion every group: every group's sum is exact, the rest are fp32
    # roundings; per-K-block scales applied at promotion agree with blockwise_scaled_mm closely
    C = fp8_tensor_core_mm(qA, qB, sA, sB, accumulator_bits=47, promote_every=128, recipes=kblocks(bk))
    ref = blockwise_scaled_mm(qA, qB, sA, sB, recipes=kblocks(bk))
    sB_cols = np.repeat(sB, 128, axis=1)[:, :N]
    col = np.arange(K) // bk
    mass = np.stack(
        [(np.abs(qA[:, col == b]) * sA[:, b : b + 1]) @ (np.abs(qB[col == b]) * sB_cols[b]) for b in range(nk)]
    ).sum(axis=0)
    assert (np.abs(C - ref) <= (bk // 32 + nk + 4) * 2.0**-23 * mass).all()
    # constant scales in the epilogue: the same fp32 scaling as scaled_mm of the unscaled result
    sA1, sB1 = rand_scales(rng, (M, 1)), rand_scales(rng, (1, N))
    one = np.ones((1, 1))
    raw = fp8_tensor_core_mm(qA, qB, one, one)
    np.testing.assert_array_equal(
        fp8_tensor_core_mm(qA, qB, sA1, sB1),
        fp32((raw.astype(np.float32) * sA1.astype(np.float32)) * sB1.astype(np.float32)),
    )


def test_fp8_tensor_core_bad_arguments():
    qA, qB = np.ones((2, 64)), np.ones((64, 3))
    one = np.ones((1, 1))
    for bits in (0, 1, 2.0, True):
        with pytest.raises(
            ValueError, match=rf"^accumulator_bits must be an int >= 2 \(the leading bit and one more\), got {bits!r}$"
        ):
            fp8_tensor_core_mm(qA, qB, one, one, accumulator_bits=bits)
    with pytest.raises(ValueError, match="too large for group=32: at most 47"):
        fp8_tensor_core_mm(qA, qB, one, one, accumulator_bits=48)
    with pytest.raises(ValueError, match="positive multiple of group=32"):
        fp8_tensor_core_mm(qA, qB, one, one, promote_every=48)
    with pytest.raises(ValueError, match="promote_every must divide block_k"):
        fp8_tensor_core_mm(qA, qB, np.ones((2, 1)), np.ones((1, 1)), recipes=kblocks(64), promote_every=None)
    with pytest.raises(ValueError, match="promote_every must divide block_k"):
        fp8_tensor_core_mm(qA, qB, np.ones((2, 1)), np.ones((1, 1)), recipes=kblocks(64), promote_every=128)
    with pytest.raises(ValueError, match="fp8 operands"):
        fp8_tensor_core_mm(qA, qB, one, one, recipes=(Recipe("int8", PER_ROW), Recipe("int8", PER_COLUMN)))
    with pytest.raises(ValueError, match="group must be a positive int"):
        fp8_tensor_core_mm(qA, qB, one, one, group=0)


def test_group_acc_rounds_each_group_sum_toward_zero():
    one = np.ones((1, 1))
    # 1.5 + 1.5 + 2**-13: every term survives 13 bits of alignment (E = 0), but the sum 3 + 2**-13
    # needs 15 significant bits: fp32 keeps it, a 14-bit group sum (e8m13, toward zero) drops it
    qA, qB = np.array([[1.5, 1.5, 2.0**-6]]), np.array([[1.0], [1.0], [2.0**-7]])
    assert fp8_tensor_core_mm(qA, qB, one, one)[0, 0] == 3 + 2.0**-13
    assert fp8_tensor_core_mm(qA, qB, one, one, group_acc="e8m13")[0, 0] == 3.0
    assert fp8_tensor_core_mm(-qA, qB, one, one, group_acc="e8m13")[0, 0] == -3.0
    with pytest.raises(ValueError, match="cannot accumulate"):
        fp8_tensor_core_mm(qA, qB, one, one, group_acc="e8m0fnu")


def test_fp8_tensor_cores_are_the_published_models():
    h100, b200 = FP8_TENSOR_CORES["H100"], FP8_TENSOR_CORES["B200"]
    # neab = -10 (H100) and +2 (B200): 23 + neab bits below the leading one, one more with it
    assert (h100.group, accumulator_align_bits(h100.accumulator_bits), h100.group_acc) == (32, 13, "e8m13")
    assert (b200.group, accumulator_align_bits(b200.accumulator_bits), b200.group_acc) == (32, 25, "fp32")
    assert h100.accumulator_bits == DEEPSEEK_V3_ACCUMULATOR_BITS  # the report's "around 14 bits"
    for spec, neab in ((h100, "neab = -10"), (b200, "neab = 2")):
        assert "commit b12b5a70" in spec.source and neab in spec.source
    one = np.ones((1, 1))
    # 128 + 4 * 2**-18: the B200's 25 bits below 2**7 keep every 2**-18 (128 + 2**-16 is an fp32
    # number); 24 bits would lose them, and so do the H100's 13
    qA = np.array([[128.0] + [2.0**-9] * 4])
    qB = np.array([[1.0]] + [[2.0**-9]] * 4)
    assert b200.matmul(qA, qB, one, one)[0, 0] == 128 + 2.0**-16
    assert fp8_tensor_core_mm(qA, qB, one, one, accumulator_bits=25, promote_every=None)[0, 0] == 128.0
    assert h100.matmul(qA, qB, one, one)[0, 0] == 128.0
    # matmul is fp8_tensor_core_mm with the settings, promoted when asked
    rng = np.random.default_rng(5)
    qA = round_to(rng.standard_normal((3, 256)), "e4m3fn")
    qB = round_to(rng.standard_normal((256, 2)), "e4m3fn")
    for spec in (h100, b200):
        for pe in (None, 128):
            np.testing.assert_array_equal(
                spec.matmul(qA, qB, one, one, promote_every=pe),
                fp8_tensor_core_mm(
                    qA,
                    qB,
                    one,
                    one,
                    accumulator_bits=spec.accumulator_bits,
                    promote_every=pe,
                    group=spec.group,
                    group_acc=spec.group_acc,
                ),
            )


# ====================================================================== bad inputs


def test_scale_shape_errors_name_the_expected_shape():
    qA, qB = np.ones((4, 8)), np.ones((8, 3))
    with pytest.raises(ValueError, match=r"sA must have shape \(1, 1\) or \(4, 1\)"):
        scaled_mm(qA, qB, np.ones((1, 4)), np.ones((1, 1)))
    with pytest.raises(ValueError, match=r"sB must have shape \(1, 1\) or \(1, 3\)"):
        scaled_mm(qA, qB, np.ones((1, 1)), np.ones((3, 1)))
    with pytest.raises(ValueError, match=r"sA must have shape \(4, 2\)"):
        blockwise_scaled_mm(qA, qB, np.ones((4, 1)), np.ones((2, 3)), recipes=kblocks(4))
    with pytest.raises(ValueError, match=r"sB must have shape \(2, 1\) or \(2, 3\)"):
        blockwise_scaled_mm(qA, qB, np.ones((4, 2)), np.ones((1, 3)), recipes=kblocks(4))
    with pytest.raises(ValueError, match=r"sA must have shape \(4, 2\)"):
        fp8_tensor_core_mm(qA, qB, np.ones((4, 1)), np.ones((2, 3)), recipes=kblocks(4), promote_every=4, group=4)


def test_data_shape_errors():
    with pytest.raises(ValueError, match=r"must agree in K; got qA \(4, 8\) and qB \(7, 3\)"):
        scaled_mm(np.ones((4, 8)), np.ones((7, 3)), np.ones((1, 1)), np.ones((1, 1)))
    with pytest.raises(ValueError, match="qA must be a 2-D array"):
        scaled_mm(np.ones(8), np.ones((8, 3)), np.ones((1, 1)), np.ones((1, 1)))


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_scales(bad):
    qA, qB = np.ones((2, 4)), np.ones((4, 2))
    with pytest.raises(ValueError, match="sA holds inf or NaN"):
        scaled_mm(qA, qB, np.array([[bad]]), np.ones((1, 1)))
    with pytest.raises(ValueError, match="sB holds inf or NaN"):
        blockwise_scaled_mm(qA, qB, np.ones((2, 1)), np.array([[1.0, bad]]), recipes=kblocks(4, 1))


def test_scales_must_be_fp32_values():
    with pytest.raises(ValueError, match="sA must hold fp32 values"):
        scaled_mm(np.ones((2, 4)), np.ones((4, 2)), np.array([[0.1]]), np.ones((1, 1)))


@pytest.mark.parametrize(
    "recipes,match",
    [
        ((Recipe("e4m3fn", PER_ROW), Recipe("e4m3fn", (128, 128))), r"recipe of A must have 1 x block_k tiles"),
        ((Recipe("e4m3fn", (128, 128)), Recipe("e4m3fn", (128, 128))), r"recipe of A must have 1 x block_k tiles"),
        ((Recipe("e4m3fn", (1, 128)), Recipe("e4m3fn", (64, 128))), r"block \(128, block_n\); got \(64, 128\)"),
        ((Recipe("e4m3fn", (1, 128)), Recipe("e4m3fn", PER_COLUMN)), r"block \(128, block_n\); got \(None, 1\)"),
        ((Recipe("e4m3fn", (1, 128)),), "recipes must be a pair"),
        (("fp8 e4m3 1x128", "no such recipe"), "unknown recipe 'no such recipe'"),
        (kblocks(128, fmt="bf16"), r"multiplies int8, e4m3fn, e5m2 or MX elements \(e2m1fn, .*'bf16'"),
        ((Recipe("int8", (1, 128)), Recipe("e4m3fn", (128, 128))), "int8 operands multiply int8 operands only"),
    ],
)
def test_recipes_that_are_not_k_blocked(recipes, match):
    """A blockwise GEMM's recipes must tile A in 1 x block_k and B in block_k x block_n, one block_k."""
    args = (np.ones((2, 256)), np.ones((256, 2)), np.ones((2, 2)), np.ones((2, 1)))
    with pytest.raises(ValueError, match=match):
        blockwise_scaled_mm(*args, recipes=recipes)
    if len(recipes) == 2 and not isinstance(recipes[1], str) and recipes[0].block != PER_ROW and "int8" not in match:
        with pytest.raises(ValueError, match=match):
            fp8_tensor_core_mm(*args, recipes=recipes)


def test_the_default_recipes_are_deepseek_v3s_blocks():
    assert [r.block for r in BLOCKWISE_RECIPES] == [(1, 128), (128, 128)]
    assert {r.element for r in BLOCKWISE_RECIPES} == {"e4m3fn"}


@pytest.mark.parametrize("value", [128, -129, 0.5, np.nan])
def test_int8_data_out_of_range(value):
    qA = np.zeros((2, 4))
    qA[1, 2] = value
    match = "qA holds inf or NaN" if np.isnan(value) else r"qA must hold int8 values \(integers in \[-128, 127\]\)"
    with pytest.raises(ValueError, match=match):
        scaled_mm(qA, np.ones((4, 2)), np.ones((1, 1)), np.ones((1, 1)), in_fmt="int8")
    with pytest.raises(ValueError, match=match):
        int8_matmul(qA, np.ones((4, 2)))


@pytest.mark.parametrize("fmt,value", [("e4m3fn", 1.0625), ("e4m3fn", 480.0), ("e5m2", 1.125), ("e5m2", 2.0**-17)])
def test_fp8_data_off_grid(fmt, value):
    qB = np.ones((4, 2))
    qB[3, 1] = value
    with pytest.raises(ValueError, match=f"qB is not on the {fmt} grid"):
        scaled_mm(np.ones((2, 4)), qB, np.ones((1, 1)), np.ones((1, 1)), in_fmt=fmt)
    with pytest.raises(ValueError, match=f"qB is not on the {fmt} grid"):
        blockwise_scaled_mm(np.ones((2, 4)), qB, np.ones((2, 1)), np.ones((1, 2)), recipes=kblocks(4, fmt=fmt))
    with pytest.raises(ValueError, match=f"qB is not on the {fmt} grid"):
        fp8_tensor_core_mm(
            np.ones((2, 4)),
            qB,
            np.ones((1, 1)),
            np.ones((1, 1)),
            recipes=(Recipe(fmt, PER_TENSOR),) * 2,
            group=4,
            promote_every=None,
        )


def test_bad_formats():
    one = np.ones((1, 1))
    with pytest.raises(ValueError, match="in_fmt must be one of 'int8', 'e4m3fn', 'e5m2' .* got 'bf16'"):
        scaled_mm(np.ones((1, 2)), np.ones((2, 1)), one, one, in_fmt="bf16")
    with pytest.raises(ValueError, match="int8 operands multiply int8 operands only"):
        scaled_mm(np.ones((1, 2)), np.ones((2, 1)), one, one, in_fmt=("int8", "e4m3fn"))
    with pytest.raises(ValueError, match="out_fmt must be 'fp32' or 'bf16'"):
        scaled_mm(np.ones((1, 2)), np.ones((2, 1)), one, one, out_fmt="fp16")


def test_scaled_mm_takes_the_recipes_like_its_siblings():
    """recipes= says the element formats once: the same result as in_fmt, bit for bit; recipes whose
    scales vary along K, or recipes and in_fmt together, are refused."""
    rng = np.random.default_rng(11)
    A, B = rng.standard_normal((5, 40)), rng.standard_normal((40, 6))
    for rA, rB, fmt in [
        (Recipe("e5m2", PER_ROW), Recipe("e4m3fn", PER_COLUMN), ("e5m2", "e4m3fn")),
        (Recipe("int8", PER_TENSOR), Recipe("int8", PER_COLUMN), "int8"),
    ]:
        (qA, sA), (qB, sB) = quantize(A, rA), quantize(B, rB)
        np.testing.assert_array_equal(
            scaled_mm(qA, qB, sA, sB, recipes=(rA, rB)), scaled_mm(qA, qB, sA, sB, in_fmt=fmt)
        )
    with pytest.raises(
        ValueError, match=r"constant along K .* blocks \(1, 128\) and \(128, 128\): use blockwise_scaled_mm"
    ):
        scaled_mm(qA, qB, sA, sB, recipes=BLOCKWISE_RECIPES)
    with pytest.raises(ValueError, match="give recipes or in_fmt, not both"):
        scaled_mm(qA, qB, sA, sB, in_fmt="int8", recipes=(rA, rB))
    with pytest.raises(ValueError, match="recipes must be a pair"):
        scaled_mm(qA, qB, sA, sB, recipes=rA)
