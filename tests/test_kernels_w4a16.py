"""Tests of nbhelpers.kernels.w4a16 (chapter 12): int4 packing and the W4A16 GEMM kernel against its
float64 reference, bit for bit where every sum is exact and within a derived bound otherwise.

The bound (:func:`~nbhelpers.kernels.w4a16.w4a16_error_bound`; u = 2**-24, gamma_n = n u / (1 - n u)):
A is bf16 or fp16 (upcast exactly to fp32 in the interpreter) and the kernel's weights are the
integers q - z (at most 9 bits), so every product a (q - z) is exact in fp32. Each term
t = a (q - z) s of C's sum then meets the fp32 sums inside one step's tl.dot (BLOCK_K products:
gamma_BK with round to nearest, the interpreter's numpy; gamma_3BK on tensor cores, which truncate:
the model of nbhelpers.gemm_bounds), the product with its group's scale (one rounding) and at most
ceil(K / BLOCK_K) additions into the accumulator. So |C32 - C| <= gamma_n T with
n = 3 BLOCK_K + 1 + ceil(K / BLOCK_K) and T = |A| @ |W_dq| (plus gamma_K(2**-53) T for the float64
reference). A 16-bit output adds its rounding: u_out (|C| + e) + half its smallest subnormal,
u_out = 2**-8 (bf16), 2**-11 (fp16). For K = 4096 and BLOCK_K = 128 that is about 2.5e-5 of T.

Bit-exact: with A integers in [-4, 4] and power-of-two scales from 2**-3 to 2**3, every partial
sum is a multiple of 2**-3 below 2**18 (K <= 320), exact in fp32 whatever the order or the
truncation: kernel and reference must then agree exactly, and a misplaced nibble, group or zero
point shows. Wrong layouts (nibbles swapped, scales of the next group) must fail the bound.
The outside oracle is torch's CPU int4 matmul (aten._weight_int4pack_mm_for_cpu), bit for bit on
the same integer data.
"""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import pytest
import torch

from nbhelpers.families import w4a16 as family
from nbhelpers.kernels.w4a16 import (
    GROUPS,
    W4A16_CONFIGS,
    pack_int4,
    pick_config,
    unpack_int4,
    w4a16_error_bound,
    w4a16_matmul,
    w4a16_ref,
)

DEV = INFO.device


def operands(M, K, N, group, zeros, seed, a_dtype=torch.bfloat16, s_dtype=torch.bfloat16, integer=False):
    """A (M, K), packed codes, scales and zero points (or None) for a random layer, on DEV.
    integer: A integers in [-4, 4] and scales powers of two (every sum exact)."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = (0, 15) if zeros else (-8, 7)
    codes = torch.randint(lo, hi + 1, (K, N), generator=g)
    n_groups = -(-K // group)
    if integer:
        a = torch.randint(-4, 5, (M, K), generator=g).to(a_dtype)
        s = (2.0 ** torch.randint(-3, 4, (n_groups, N), generator=g)).to(s_dtype)
    else:
        a = torch.randn(M, K, generator=g).to(a_dtype)
        s = (torch.rand(n_groups, N, generator=g) * 0.02 + 1e-3).to(s_dtype)
    z = torch.randint(0, 16, (n_groups, N), generator=g).to(torch.uint8) if zeros else None
    to = lambda t: None if t is None else t.to(DEV)  # noqa: E731
    return to(a), to(pack_int4(codes, signed=not zeros)), to(s), to(z)


# ------------------------------------------------------------------ packing


@pytest.mark.parametrize("signed", [True, False])
def test_every_pair_of_codes_packs_and_unpacks(signed):
    lo, hi = (-8, 7) if signed else (0, 15)
    values = torch.arange(lo, hi + 1)
    codes = torch.stack([values.repeat_interleave(16), values.repeat(16)])  # (2, 256): every pair
    packed = pack_int4(codes, signed)
    assert packed.dtype == torch.uint8 and packed.shape == (1, 256)
    assert len(set(packed.tolist()[0])) == 256  # 256 pairs, 256 bytes
    assert torch.equal(unpack_int4(packed, signed).long(), codes)


def test_the_layout_is_low_nibble_first_along_k():
    assert pack_int4(torch.tensor([[1, 3], [2, 4]]), signed=False).tolist() == [[0x21, 0x43]]
    assert pack_int4(torch.tensor([[-1], [-8]])).tolist() == [[0x8F]]  # two's complement nibbles
    odd = pack_int4(torch.tensor([[5], [6], [7]]), signed=False)  # odd K: a zero high nibble
    assert odd.tolist() == [[0x65], [0x07]]
    assert unpack_int4(odd, signed=False, k=3).flatten().tolist() == [5, 6, 7]
    assert unpack_int4(odd, signed=False).flatten().tolist() == [5, 6, 7, 0]


def test_packing_refuses_what_it_cannot_store():
    with pytest.raises(ValueError, match=r"signed int4 codes must lie in \[-8, 7\].*signed=False"):
        pack_int4(torch.tensor([[15], [0]]))
    with pytest.raises(ValueError, match=r"unsigned int4 codes must lie in \[0, 15\]"):
        pack_int4(torch.tensor([[-1], [0]]), signed=False)
    with pytest.raises(TypeError, match="integer dtype"):
        pack_int4(torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"2-D \(K, N\)"):
        pack_int4(torch.zeros(4, dtype=torch.int8))
    with pytest.raises(TypeError, match="must be uint8"):
        unpack_int4(torch.zeros(2, 2, dtype=torch.int8))
    with pytest.raises(ValueError, match="k must be 3 or 4"):
        unpack_int4(torch.zeros(2, 2, dtype=torch.uint8), k=5)


# ------------------------------------------------------------------ the kernel


def test_the_config_follows_m_and_every_pick_is_compiled():
    assert [pick_config(m).name for m in (1, 16, 17, 64, 65, 4096)] == [
        "decode",
        "decode",
        "batch",
        "batch",
        "prefill",
        "prefill",
    ]
    compiled = {(tuple(sorted(c.constexprs.items())), c.num_warps, c.num_stages) for c in family.cases()}
    for cfg in W4A16_CONFIGS:
        for group in GROUPS:
            for zp in (True, False):
                meta = {**cfg.constexprs(group), "HAS_ZEROS": zp}
                assert (tuple(sorted(meta.items())), cfg.num_warps, cfg.num_stages) in compiled, (cfg.name, group, zp)


# M = 1, 5 (decode), 17, 64 (batch), 65, 130 (prefill); K and N not multiples of any block, K odd
SHAPES = [(1, 256, 64), (5, 201, 70), (17, 130, 33), (64, 96, 40), (65, 320, 17), (130, 161, 48)]


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("zeros", [False, True])
def test_bit_exact_where_every_sum_is_exact(group, zeros):
    for i, (M, K, N) in enumerate(SHAPES):
        a_dtype = (torch.bfloat16, torch.float16)[i % 2]
        a, p, s, z = operands(M, K, N, group, zeros, seed=100 * group + i, a_dtype=a_dtype, integer=True)
        ref = w4a16_ref(a, p, s, z, group)
        c = w4a16_matmul(a, p, s, z, group, out_dtype=torch.float32)
        assert c.shape == (M, N) and c.dtype == torch.float32
        assert torch.equal(c.cpu().double(), ref), (M, K, N)
        c16 = w4a16_matmul(a, p, s, z, group)  # a's dtype out: the exact sum rounded once
        assert c16.dtype == a_dtype and torch.equal(c16.cpu(), ref.to(a_dtype)), (M, K, N)


CASES = [  # M, K, N, group, zeros, A, scales, out
    (1, 512, 96, 128, False, torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (3, 300, 50, 32, True, torch.float16, torch.float16, torch.float16),
    (16, 257, 64, 64, True, torch.bfloat16, torch.float32, torch.float32),
    (40, 128, 72, 128, True, torch.bfloat16, torch.bfloat16, torch.float32),
    (100, 192, 130, 64, False, torch.float16, torch.float32, torch.bfloat16),
]


@pytest.mark.parametrize("M,K,N,group,zeros,a_dtype,s_dtype,out", CASES)
def test_within_the_derived_bound(M, K, N, group, zeros, a_dtype, s_dtype, out):
    a, p, s, z = operands(M, K, N, group, zeros, seed=M + K + N, a_dtype=a_dtype, s_dtype=s_dtype)
    ref = w4a16_ref(a, p, s, z, group)
    c = w4a16_matmul(a, p, s, z, group, out_dtype=out)
    assert c.dtype == out
    bound = w4a16_error_bound(a, p, s, z, group, out_dtype=out)
    err = (c.cpu().double() - ref).abs()
    assert (err <= bound).all(), float((err / bound).max())


def test_the_bound_rejects_the_wrong_layouts():
    """Nibbles in the other order, or each group read with the next group's scales: outside."""
    M, K, N, group = 8, 256, 64, 64
    a, p, s, z = operands(M, K, N, group, True, seed=7)
    bound = w4a16_error_bound(a, p, s, z, group)
    ref = w4a16_ref(a, p, s, z, group)
    swapped = (p >> 4) | (p << 4)
    for wrong in (
        w4a16_matmul(a, swapped, s, z, group),
        w4a16_matmul(a, p, torch.roll(s, 1, dims=0), z, group),
        w4a16_matmul(a, p, s, torch.roll(z, 1, dims=0), group),
    ):
        assert ((wrong.cpu().double() - ref).abs() > bound).any()


def test_strided_operands_and_explicit_blocks():
    M, K, N, group = 20, 200, 40, 32
    a, p, s, z = operands(M, K, N, group, True, seed=3, integer=True)
    ref = w4a16_ref(a, p, s, z, group)
    a_t = a.t().contiguous().t()  # column-major A
    p_wide = torch.zeros((p.shape[0], N + 24), dtype=torch.uint8, device=DEV)
    p_wide[:, 5 : 5 + N] = p  # a column slice of a wider buffer
    s_t = s.t().contiguous().t()
    c = w4a16_matmul(a_t, p_wide[:, 5 : 5 + N], s_t, z, group, out_dtype=torch.float32)
    assert torch.equal(c.cpu().double(), ref)
    for block in ((16, 16, 16), (32, 64, 32)):
        c = w4a16_matmul(a, p, s, z, group, block=block, out_dtype=torch.float32)
        assert torch.equal(c.cpu().double(), ref), block


def test_empty_shapes():
    a, p, s, z = operands(1, 64, 16, 32, False, seed=0)
    assert w4a16_matmul(a[:0], p, s, z, 32).shape == (0, 16)


def test_bad_inputs_are_refused_with_a_sentence():
    a, p, s, z = operands(4, 64, 32, 32, True, seed=1)
    with pytest.raises(TypeError, match="16-bit activations"):
        w4a16_matmul(a.float(), p, s, z, 32)
    with pytest.raises(TypeError, match="packed must be uint8"):
        w4a16_matmul(a, p.to(torch.int8), s, z, 32)
    with pytest.raises(ValueError, match=r"needs ceil\(K / 2\) = 32"):
        w4a16_matmul(a, p[:-1], s, z, 32)
    with pytest.raises(
        ValueError,
        match=r"scales must have shape \(ceil\(K / group\), N\) = \(1, 32\) for K = 64, group = 64, got \(2, 32\)",
    ):
        w4a16_matmul(a, p, s, z, 64)  # scales of groups of 32 given with group 64
    with pytest.raises(TypeError, match="scales must be float32, bfloat16 or float16"):
        w4a16_matmul(a, p, s.to(torch.int32), z, 32)
    with pytest.raises(TypeError, match="zeros must be uint8"):
        w4a16_matmul(a, p, s, z.to(torch.int32), 32)
    with pytest.raises(ValueError, match="zeros must have the shape of scales"):
        w4a16_matmul(a, p, s, z[:1], 32)
    for group in (48, 256, True, "128"):
        with pytest.raises(ValueError, match=r"group must be one of \(32, 64, 128\)"):
            w4a16_matmul(a, p, s, z, group)
    with pytest.raises(ValueError, match="BLOCK_K=64 must divide group=32"):
        w4a16_matmul(a, p, s, z, 32, block=(16, 16, 64))
    with pytest.raises(ValueError, match="power of two from 16 to 256"):
        w4a16_matmul(a, p, s, z, 32, block=(16, 8, 16))
    with pytest.raises(TypeError, match="out_dtype must be"):
        w4a16_matmul(a, p, s, z, 32, out_dtype=torch.int8)
    with pytest.raises(ValueError, match="a must be 2-D"):
        w4a16_matmul(a[0], p, s, z, 32)
    with pytest.raises(ValueError, match="scales is on meta"):
        w4a16_matmul(a, p, s.to("meta"), z, 32)


@pytest.mark.skipif(
    not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"), reason="this torch has no CPU int4 matmul"
)
@pytest.mark.parametrize("group", GROUPS)
def test_torch_s_own_int4_matmul_agrees(group):
    """An outside oracle: torch's CPU int4 weight-only matmul (``aten._weight_int4pack_mm_for_cpu``,
    tinygemm's convention w = (u - 8) s + zero_f with unsigned u and one float zero_f per group and
    column). Our w = (u - z) s is theirs with zero_f = (8 - z) s, exact here; on integer data every
    sum is exact, so both bf16 outputs are the exact sum rounded once and must agree bit for bit."""
    M, K, N = 5, 384, 96
    for zeros in (False, True):
        a, p, s, z = operands(M, K, N, group, zeros, seed=group + zeros, integer=True)
        u = unpack_int4(p.cpu(), signed=not zeros).to(torch.int32) + (0 if zeros else 8)  # (K, N) in [0, 15]
        zero_f = (8 - z.cpu().double()) * s.cpu().double() if zeros else torch.zeros(s.shape, dtype=torch.float64)
        sz = torch.stack([s.cpu(), zero_f.to(torch.bfloat16)], dim=-1).contiguous()  # (K / group, N, 2)
        w = torch.ops.aten._convert_weight_to_int4pack_for_cpu(u.t().contiguous(), 1)
        theirs = torch.ops.aten._weight_int4pack_mm_for_cpu(a.cpu(), w, group, sz)
        assert torch.equal(w4a16_matmul(a, p, s, z, group).cpu(), theirs), zeros
