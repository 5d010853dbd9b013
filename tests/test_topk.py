"""Tests of nbhelpers.topk, chapter 11's engine: the order-preserving keys bit for bit against
their one-code-at-a-time references on every bf16 and fp16 code and on a large sample of fp32
codes with every special value; torch's sort as the outside oracle of the order and of the ties
(NaN the largest, -0 equal to +0); the top-k reference against a stable descending torch.sort
and against torch.topk (same values, indices valid up to ties); radix select against a full sort
for every digit size the chapter mentions; the byte costs against numbers derived by hand; the
top-p threshold by search against the one by sorting and against a brute force written here.

All random data comes from seeded ``np.random.default_rng`` or ``torch.Generator`` objects."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from nbhelpers import topk as T

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NUMPY_DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}
INT_VIEW = {16: torch.int16, 32: torch.int32}


def every_code(fmt: str) -> np.ndarray:
    """All 2**16 codes of a 16-bit format, unsigned."""
    assert T.KEY_FORMATS[fmt].bits == 16
    return np.arange(1 << 16, dtype=np.uint16)


def specials(fmt: str) -> np.ndarray:
    """Every kind of special code of a format, unsigned, derived from its masks and numpy's finfo:
    +-0, +-inf, NaNs of both signs with several payloads (quiet, signalling, all ones), the
    smallest and largest subnormals, the smallest normal and the largest finite value."""
    f = T.KEY_FORMATS[fmt]
    fi = ml_dtypes.finfo(NUMPY_DTYPES[fmt])
    quiet = (f.man_mask + 1) >> 1  # the mantissa's top bit
    mags = [
        0,
        f.exp_mask,  # inf
        f.exp_mask | quiet,
        f.exp_mask | 1,
        f.exp_mask | f.man_mask,
        f.exp_mask | (quiet >> 1) | 3,
        1,  # smallest subnormal
        f.man_mask,  # largest subnormal
        f.man_mask + 1,  # smallest normal
        f.exp_mask - 1,  # largest finite
    ]
    codes = np.array([m | s for m in mags for s in (0, f.sign_bit)], dtype=np.int64).astype(f.uint_dtype)
    # the same codes, as numpy reads them: the finite ones are what finfo says they are
    values = as_float64(codes, fmt)
    assert values[12] == fi.smallest_subnormal and values[16] == fi.smallest_normal and values[18] == fi.max
    assert np.isnan(values[4:12]).all() and values[2] == np.inf and values[3] == -np.inf
    return codes


def fp32_codes(seed: int = 0, n: int = 200_000) -> np.ndarray:
    """A uniform sample of fp32 codes (about 0.4 % NaN) with the special codes appended."""
    rng = np.random.default_rng(seed)
    sample = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([sample, specials("fp32")])


def as_float64(codes: np.ndarray, fmt: str) -> np.ndarray:
    """The values of unsigned codes, exactly, as float64 (NaN codes to NaN: ml_dtypes warns when
    it casts a bfloat16 NaN, which these helpers do on purpose)."""
    with np.errstate(invalid="ignore"):
        return codes.view(NUMPY_DTYPES[fmt]).astype(np.float64)


def as_tensor(codes: np.ndarray, fmt: str) -> torch.Tensor:
    """Unsigned codes as a torch float tensor of the format (through a signed view: no copy)."""
    f = T.KEY_FORMATS[fmt]
    return torch.from_numpy(codes.astype(f.uint_dtype).view(f.int_dtype)).view(TORCH_DTYPES[fmt])


def bits_of(x: torch.Tensor) -> torch.Tensor:
    """The codes of a float tensor as signed integers (NaN payloads included)."""
    return x.view(INT_VIEW[x.element_size() * 8])


def torch_ties(v: torch.Tensor) -> np.ndarray:
    """For a sorted 1-D tensor, whether each neighbour pair compares equal in torch's order
    (==, or both NaN)."""
    return ((v[1:] == v[:-1]) | (v[1:].isnan() & v[:-1].isnan())).numpy()


# ====================================================================== the formats


@pytest.mark.parametrize("fmt", list(T.KEY_FORMATS))
def test_key_formats_agree_with_numpy(fmt):
    f = T.KEY_FORMATS[fmt]
    fi = ml_dtypes.finfo(NUMPY_DTYPES[fmt])
    assert f.bits == 8 * NUMPY_DTYPES[fmt].itemsize and f.name == fmt
    assert f.man_mask == (1 << fi.nmant) - 1
    assert f.exp_mask == ((1 << fi.nexp) - 1) << fi.nmant
    assert f.sign_bit | f.exp_mask | f.man_mask == f.all_ones and f.sign_bit & (f.exp_mask | f.man_mask) == 0
    assert f.uint_dtype == np.dtype(f"uint{f.bits}") and f.int_dtype == np.dtype(f"int{f.bits}")
    assert T.key_format(fmt) is f and T.key_format(f) is f


@pytest.mark.parametrize("bad", ["fp8", "e4m3fn", None, 16])
def test_key_format_names_the_accepted_formats(bad):
    with pytest.raises(ValueError, match=rf"unknown key format {bad!r}: accepted are fp32, bf16, fp16"):
        T.key_format(bad)


@pytest.mark.parametrize("fmt", list(T.KEY_FORMATS))
def test_float_bits_of_numpy_and_torch(fmt):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5)).astype(NUMPY_DTYPES[fmt])
    f = T.KEY_FORMATS[fmt]
    bits, got = T.float_bits(x)
    assert got is f and bits.dtype == f.uint_dtype and bits.shape == (3, 5)
    np.testing.assert_array_equal(bits, x.view(f.uint_dtype))
    t = torch.from_numpy(x.view(f.int_dtype)).view(TORCH_DTYPES[fmt])
    tbits, tgot = T.float_bits(t.t())  # a non-contiguous view: the codes in its own element order
    assert tgot is f
    np.testing.assert_array_equal(tbits, x.T.view(f.uint_dtype))


@pytest.mark.parametrize(
    "x",
    [
        np.zeros(3, dtype=np.float64),
        np.zeros(3, dtype=np.int32),
        np.zeros(3, dtype=np.uint16),
        torch.zeros(3, dtype=torch.float64),
        torch.zeros(3, dtype=torch.int16),
    ],
    ids=["np.float64", "np.int32", "np.uint16", "torch.float64", "torch.int16"],
)
def test_float_bits_refuses_other_dtypes(x):
    with pytest.raises(TypeError, match="float_bits takes float32, (ml_dtypes.)?bfloat16 or float16"):
        T.float_bits(x)


def test_keys_refuse_float_input():
    with pytest.raises(TypeError, match="bits must be an integer array, got float32"):
        T.order_keys(np.ones(3, dtype=np.float32), "fp32")
    with pytest.raises(ValueError, match="unknown key format 'fp8'"):
        T.topk_keys(np.ones(3, dtype=np.uint8), "fp8")


# ====================================================================== keys, every 16-bit code


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_keys_equal_their_references_on_every_code(fmt):
    codes = every_code(fmt)
    order_ref = np.array([T.order_keys_ref(c, fmt) for c in codes.tolist()])
    topk_ref = np.array([T.topk_keys_ref(c, fmt) for c in codes.tolist()])
    f = T.KEY_FORMATS[fmt]
    for bits in (codes, codes.view(np.int16)):  # unsigned, and as torch's int16 view holds them
        ok, tk = T.order_keys(bits, fmt), T.topk_keys(bits, fmt)
        assert ok.dtype == tk.dtype == f.uint_dtype
        np.testing.assert_array_equal(ok, order_ref)
        np.testing.assert_array_equal(tk, topk_ref)


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_order_keys_are_a_bijection_that_keys_to_bits_inverts(fmt):
    codes = every_code(fmt)
    keys = T.order_keys(codes, fmt)
    assert np.unique(keys).size == codes.size
    np.testing.assert_array_equal(T.keys_to_bits(keys, fmt), codes)
    every_key = np.arange(1 << 16, dtype=np.uint16)
    np.testing.assert_array_equal(T.order_keys(T.keys_to_bits(every_key, fmt), fmt), every_key)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32"])
def test_order_keys_are_ieee_total_order(fmt):
    """By order key: -NaNs, then every number ascending with -0 just below +0 (the only equal
    neighbours), then +NaNs; the float64 value is the outside oracle of the numbers' order."""
    f = T.KEY_FORMATS[fmt]
    codes = every_code(fmt) if f.bits == 16 else np.unique(fp32_codes(seed=2))  # distinct codes
    codes = codes[np.argsort(T.order_keys(codes, fmt), kind="stable")]
    v = as_float64(codes, fmt)
    nan = np.isnan(v)
    neg = (codes & f.sign_bit) != 0
    first_num, last_num = np.flatnonzero(~nan)[[0, -1]]
    assert (nan[:first_num] & neg[:first_num]).all() and (nan[last_num + 1 :] & ~neg[last_num + 1 :]).all()
    assert not nan[first_num : last_num + 1].any()
    nums, num_codes = v[~nan], codes[~nan]
    assert nums[0] == -np.inf and nums[-1] == np.inf
    steps = np.diff(nums)
    assert (steps >= 0).all()
    (equal,) = np.nonzero(steps == 0)
    assert len(equal) == 1 and nums[equal[0]] == 0
    assert num_codes[equal[0]] == f.sign_bit and num_codes[equal[0] + 1] == 0  # -0 below +0


# ====================================================================== keys, fp32


def test_fp32_keys_equal_their_references_on_a_sample_and_every_special():
    codes = fp32_codes(seed=0)
    ok, tk = T.order_keys(codes, "fp32"), T.topk_keys(codes, "fp32")
    assert ok.dtype == tk.dtype == np.uint32
    np.testing.assert_array_equal(ok, [T.order_keys_ref(c, "fp32") for c in codes.tolist()])
    np.testing.assert_array_equal(tk, [T.topk_keys_ref(c, "fp32") for c in codes.tolist()])
    np.testing.assert_array_equal(T.topk_keys(codes.view(np.int32), "fp32"), tk)  # torch's int32 view
    np.testing.assert_array_equal(T.keys_to_bits(ok, "fp32"), codes)
    # every NaN on the top key, -0 and +0 on one key, and nothing else on either
    f = T.KEY_FORMATS["fp32"]
    v = codes.view(np.float32)
    assert (tk[np.isnan(v)] == f.all_ones).all() and (tk[~np.isnan(v)] < f.all_ones).all()
    assert (tk[v == 0] == f.sign_bit).all() and (tk[v != 0] != f.sign_bit).all()


_SPECIAL_NAMES = [
    f"{s}{m}"
    for m in ("0", "inf", "nan quiet", "nan 1", "nan all ones", "nan mid", "min sub", "max sub", "min normal", "max")
    for s in "+-"
]


def test_keys_of_the_specials_in_words():
    """The rule, one special at a time, for every format: NaN above +inf, -inf at the bottom,
    -0 and +0 on one key between the largest negative and the smallest positive subnormal."""
    for fmt, f in T.KEY_FORMATS.items():
        k = {name: T.topk_keys_ref(c, fmt) for name, c in zip(_SPECIAL_NAMES, specials(fmt).tolist())}
        assert k["+0"] == k["-0"] == f.sign_bit
        assert all(k[n] == f.all_ones for n in _SPECIAL_NAMES if "nan" in n)
        assert k["-inf"] < k["-max"] < k["-min normal"] < k["-max sub"] < k["-min sub"] < k["+0"]
        assert k["+0"] < k["+min sub"] < k["+max sub"] < k["+min normal"] < k["+max"] < k["+inf"] < f.all_ones


# ====================================================================== torch.sort as the oracle


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32"])
def test_sorting_by_topk_keys_is_torch_sort(fmt):
    """Every bf16 and fp16 code (and the fp32 sample), sorted by topk_keys descending with the
    lower index first among equal keys: the same permutation as torch's stable descending sort,
    and equal keys exactly where torch compares neighbours equal (== or both NaN)."""
    codes = every_code(fmt) if fmt != "fp32" else fp32_codes(seed=3, n=50_000)
    x = as_tensor(codes, fmt)
    keys = T.topk_keys(codes, fmt).astype(np.int64)
    order = np.lexsort((np.arange(codes.size), -keys))
    s = torch.sort(x, descending=True, stable=True)
    np.testing.assert_array_equal(order, s.indices.numpy())
    np.testing.assert_array_equal(keys[order][1:] == keys[order][:-1], torch_ties(x[s.indices]))


# ====================================================================== the top-k reference


def tie_rows(fmt: str, V: int, seed: int) -> dict[str, torch.Tensor]:
    """Rows of length V that stress the tie rule: random; few distinct values; all equal; signed
    zeros among a few numbers; NaNs of both signs and several payloads with +-inf and ties."""
    f = T.KEY_FORMATS[fmt]
    dt = TORCH_DTYPES[fmt]
    g = torch.Generator().manual_seed(seed)
    rows = {
        "random": torch.randn(V, generator=g).to(dt),
        "few values": torch.randint(-3, 4, (V,), generator=g).to(dt),
        "all equal": torch.full((V,), 1.5, dtype=dt),
        "signed zeros": torch.where(torch.rand(V, generator=g) < 0.5, -0.0, 0.0).to(dt),
    }
    z = rows["signed zeros"].clone()
    z[torch.randperm(V, generator=g)[: V // 8]] = torch.tensor([-1.0, 2.0], dtype=dt).repeat(V)[: V // 8]
    rows["zeros and numbers"] = z
    x = torch.randint(-2, 3, (V,), generator=g).to(dt)
    b = bits_of(x)
    nans = torch.tensor(
        [(s | f.exp_mask | p) for s in (0, f.sign_bit) for p in (1, (f.man_mask + 1) >> 1, f.man_mask)],
        dtype=torch.int64,
    )
    nans = torch.where(nans >= 1 << (f.bits - 1), nans - (1 << f.bits), nans).to(b.dtype)  # signed view
    pos = torch.randperm(V, generator=g)
    b[pos[: V // 6]] = nans[torch.randint(0, len(nans), (V // 6,), generator=g)]
    x[pos[V // 6 : V // 6 + 3]] = float("inf")
    x[pos[V // 6 + 3 : V // 6 + 6]] = float("-inf")
    rows["nan, inf, ties"] = x
    return rows


def assert_same_codes(a: torch.Tensor, b: torch.Tensor):
    """Bit for bit, NaN payloads and the sign of zero included."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(bits_of(a), bits_of(b)), (bits_of(a), bits_of(b))


def assert_agrees_with_torch_topk(x: torch.Tensor, k: int, values: torch.Tensor, indices: torch.Tensor):
    """torch.topk returns the same values as ``values`` and valid indices, up to ties: its
    indices are distinct, in range, and point at entries whose top-k keys equal those of
    ``values`` position by position (so NaNs at NaNs, zeros at zeros). The codes are equal
    wherever the value has one code only: not at zeros (-0 and +0 tie, and torch may take
    either) and not at NaNs (they tie, and torch's CPU topk of bfloat16 returns every NaN as
    0x7FC0)."""
    tv, ti = torch.topk(x, k)
    f = T.KEY_FORMATS[{torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[x.dtype]]
    key = lambda t: torch.from_numpy(T.topk_keys(T.float_bits(t)[0], f).astype(np.int64))  # noqa: E731
    ours = key(values)
    assert ti.shape == indices.shape and ((ti >= 0) & (ti < x.shape[-1])).all()
    assert all(len(set(r)) == k for r in ti.reshape(-1, k).tolist())
    assert torch.equal(key(torch.gather(x.view(INT_VIEW[f.bits]), -1, ti).view(x.dtype)), ours)
    assert torch.equal(key(tv), ours)
    single = (ours != f.sign_bit) & (ours != f.all_ones)
    assert torch.equal(bits_of(tv)[single], bits_of(values)[single])


@pytest.mark.parametrize("fmt", list(T.KEY_FORMATS))
def test_topk_ref_is_a_stable_descending_sort(fmt):
    V = 97
    for name, x in tie_rows(fmt, V, seed=5).items():
        s = torch.sort(x, descending=True, stable=True)
        for k in (1, 2, 13, 50, V - 1, V):
            values, indices = T.topk_ref(x, k)
            assert indices.dtype == torch.int64 and indices.shape == (k,), name
            assert torch.equal(indices, s.indices[:k]), (name, k)
            # the values are the row's own codes at those indices (NaN payloads kept)
            assert_same_codes(values, torch.gather(bits_of(x), 0, s.indices[:k]).view(x.dtype))
            assert_agrees_with_torch_topk(x, k, values, indices)


@pytest.mark.parametrize("fmt", list(T.KEY_FORMATS))
def test_topk_ref_on_a_batch_equals_row_by_row(fmt):
    rows = tie_rows(fmt, 64, seed=6)
    x = torch.stack(list(rows.values()))
    values, indices = T.topk_ref(x, 10)
    assert values.shape == indices.shape == (len(rows), 10) and values.dtype == x.dtype
    for r in range(len(rows)):
        v, i = T.topk_ref(x[r], 10)
        assert torch.equal(indices[r], i)
        assert_same_codes(values[r], v)
    # a column slice (row stride 80, not 64) gives what its contiguous copy gives
    wide = torch.zeros((len(rows), 80), dtype=x.dtype)
    wide[:, 7:71] = x
    vs, is_ = T.topk_ref(wide[:, 7:71], 10)
    assert torch.equal(is_, indices)
    assert_same_codes(vs, values)


def test_topk_ref_ties_go_to_the_lowest_index_unlike_torch_topk():
    """The rule the kernels follow; torch.topk on a CPU does not (here it returns other zeros)."""
    x = torch.zeros(20)
    assert T.topk_ref(x, 5)[1].tolist() == [0, 1, 2, 3, 4]
    x = torch.tensor([-0.0, 0.0, 1.0, float("nan"), -float("nan"), 1.0])
    values, indices = T.topk_ref(x, 5)
    assert indices.tolist() == [3, 4, 2, 5, 0]
    assert bits_of(values)[4].item() == bits_of(torch.tensor(-0.0)).item()


@pytest.mark.parametrize(
    "x, k, match",
    [
        (torch.zeros(5), 0, r"^k must be an int from 1 to 5 \(at most the row length\), got 0$"),
        (torch.zeros(5), 6, r"^k must be an int from 1 to 5 \(at most the row length\), got 6$"),
        (torch.zeros(5), 2.0, r"^k must be an int from 1 to 5 \(at most the row length\), got 2.0$"),
        (torch.zeros(5), True, r"^k must be an int from 1 to 5 \(at most the row length\), got True$"),
        (torch.zeros((2, 3)), 4, r"^k must be an int from 1 to 3 \(at most the row length\), got 4$"),
        (torch.zeros((2, 3, 4)), 1, r"1-D or 2-D torch tensor, got Tensor torch.Size\(\[2, 3, 4\]\)"),
        (np.zeros(5, dtype=np.float32), 1, "1-D or 2-D torch tensor, got ndarray"),
    ],
)
def test_topk_ref_refuses_bad_input(x, k, match):
    with pytest.raises(ValueError, match=match):
        T.topk_ref(x, k)


def test_topk_ref_refuses_other_dtypes():
    with pytest.raises(TypeError, match="got torch.float64"):
        T.topk_ref(torch.zeros(4, dtype=torch.float64), 2)


# ====================================================================== radix select


def random_keys(rng, n: int, key_bits: int) -> np.ndarray:
    """n keys of key_bits bits with heavy duplicates, of one of four kinds: drawn from a small
    pool; sharing their high bits (so every pass has work); all equal; or the extremes 0 and
    2**key_bits - 1 among a few others."""
    top = 1 << key_bits
    kind = int(rng.integers(4))
    if kind == 0:
        pool = rng.integers(0, top, size=int(rng.integers(1, n + 1)), dtype=np.int64)
        return rng.choice(pool, size=n)
    if kind == 1:
        high = int(rng.integers(0, top)) & ~0xFF
        return high | rng.integers(0, 1 << int(rng.integers(1, 9)), size=n, dtype=np.int64)
    if kind == 2:
        return np.full(n, int(rng.integers(0, top)), dtype=np.int64)
    return rng.choice(np.array([0, top - 1, top >> 1, 1], dtype=np.int64), size=n)


def check_selection(keys: np.ndarray, k: int, key_bits: int, digit_bits: int) -> T.RadixSelect:
    sel = T.radix_select(keys, k, key_bits, digit_bits)
    assert (sel.kth_key, sel.greater) == T.kth_largest_key_ref(keys, k)
    assert sel.k == k and 1 <= sel.equal_needed <= int((keys == sel.kth_key).sum())
    # the digits: most significant first, each digit_bits wide but the last, which is narrower
    ps = sel.passes
    assert len(ps) == T.radix_passes(key_bits, digit_bits)
    widths = np.diff([key_bits] + [p.shift for p in ps]) * -1
    assert widths.sum() == key_bits and ps[-1].shift == 0
    assert (widths[:-1] == digit_bits).all() and 1 <= widths[-1] <= digit_bits
    # each pass's candidates are the previous pass's bin; the counts add up
    assert ps[0].candidates == keys.size
    assert all(b.candidates == a.in_bin for a, b in zip(ps, ps[1:]))
    assert sum(p.above for p in ps) == sel.greater and ps[-1].in_bin == (keys == sel.kth_key).sum()
    # decided_after: the first pass after which the top-k set is fixed by the digits seen so far
    d = sel.decided_after
    assert 1 <= d <= len(ps)
    at_or_above = [int(((keys >> p.shift) >= (sel.kth_key >> p.shift)).sum()) for p in ps]
    assert all(c > k for c in at_or_above[: d - 1])
    assert at_or_above[d - 1] == k or d == len(ps)
    return sel


RADIX_CASES = [(kb, db) for kb in (16, 32) for db in (1, 4, 5, 8, 11, 16)]


@pytest.mark.parametrize("key_bits, digit_bits", RADIX_CASES)
def test_radix_select_equals_a_full_sort(key_bits, digit_bits):
    rng = np.random.default_rng(key_bits * 100 + digit_bits)
    decided_early = 0
    for _ in range(8 if digit_bits < 16 else 3):  # a 16-bit digit walks 65,536 bins in Python
        n = int(rng.integers(1, 48))
        keys = random_keys(rng, n, key_bits)
        ks = range(1, n + 1) if digit_bits < 16 else sorted({1, n, int(rng.integers(1, n + 1))})
        for k in ks:
            sel = check_selection(keys, k, key_bits, digit_bits)
            decided_early += sel.decided_after < len(sel.passes)
            idx = T.radix_filter(keys, sel)
            expect = np.sort(np.lexsort((np.arange(n), -keys))[:k])  # ties to the lowest index
            np.testing.assert_array_equal(idx, expect)
    if digit_bits < key_bits:
        assert decided_early > 0  # the early exit happens


def test_radix_select_on_a_vocabulary_row():
    """A Llama-3-sized row of bf16 logits (128,256 entries): two passes of 8 bits for every k of a
    sweep from 1 to the whole row."""
    x = torch.from_numpy(T.model_like_logits(1, 128_256, seed=0)[0]).to(torch.bfloat16)
    keys = T.topk_keys(*T.float_bits(x))
    for k in (1, 8, 50, 1024, 128_256):
        check_selection(keys, k, 16, 8)


@pytest.mark.parametrize("fmt", list(T.KEY_FORMATS))
@pytest.mark.parametrize("digit_bits", [1, 4, 5, 8, 11, 16])
def test_radix_topk_equals_topk_ref(fmt, digit_bits):
    for name, x in tie_rows(fmt, 61, seed=digit_bits).items():
        for k in (1, 7, 30, 61):
            values, indices = T.radix_topk(x, k, digit_bits)
            ref_values, ref_indices = T.topk_ref(x, k)
            assert torch.equal(indices, ref_indices), (name, k)
            assert_same_codes(values, ref_values)


def test_radix_passes():
    assert T.radix_passes(32, 8) == 4
    assert T.radix_passes(16, 8) == 2
    assert T.radix_passes(32, 11) == 3
    for key_bits in (16, 32):
        for digit_bits in range(1, 40):
            p = T.radix_passes(key_bits, digit_bits)
            assert p * digit_bits >= key_bits > (p - 1) * digit_bits
    with pytest.raises(ValueError, match="digit_bits must be a positive int, got 0"):
        T.radix_passes(32, 0)
    with pytest.raises(ValueError, match="key_bits must be a positive int, got True"):
        T.radix_passes(True, 8)


def test_radix_select_refuses_bad_k():
    with pytest.raises(ValueError, match="k = 4 is more than the 3 keys"):
        T.radix_select([1, 2, 3], 4, 16)
    with pytest.raises(ValueError, match="k must be a positive int, got 0"):
        T.radix_select([1, 2, 3], 0, 16)


# ====================================================================== costs


def test_costs_of_a_llama_row():
    """Llama 3's vocabulary, 128,256 entries, top 50, int64 indices. One pass: read 128,256 * 2
    bytes of bf16, write 50 * (2 + 8). Radix select with 8-bit digits: 2 histogram passes on
    16-bit keys, one filtering pass, each a read of the row. A radix sort: one read of the keys
    for the histograms, then per digit one read and one write of every (key, index) pair."""
    n, k = 128_256, 50
    c = T.pass_cost(n, k, 2)
    assert (c.passes, c.bytes_read, c.bytes_written, c.bytes) == (1, 256_512, 500, 257_012)
    c = T.pass_cost(n, k, 4, index_bytes=4)
    assert (c.bytes_read, c.bytes_written) == (513_024, 400)
    r = T.radix_select_cost(n, k, 16, 8, 2)
    assert (r.passes, r.bytes_read, r.bytes_written) == (3, 769_536, 500)
    r = T.radix_select_cost(n, k, 32, 8, 4)
    assert (r.passes, r.bytes_read, r.bytes_written) == (5, 2_565_120, 600)
    r = T.radix_select_cost(n, k, 32, 11, 4)
    assert (r.passes, r.bytes_read) == (4, 2_052_096)
    s = T.radix_sort_cost(n, 2)
    assert (s.passes, s.bytes_read, s.bytes_written, s.bytes) == (3, 2_821_632, 2_565_120, 5_386_752)
    s = T.radix_sort_cost(n, 4, index_bytes=4)
    assert (s.passes, s.bytes_read, s.bytes_written) == (5, 4_617_216, 4_104_192)
    # the napkin ratio: a sort moves about 21 times the bytes of a single pass
    assert 20 < T.radix_sort_cost(n, 2).bytes / T.pass_cost(n, k, 2).bytes < 22


# ====================================================================== data and measurements


def test_model_like_logits_is_seeded_and_shaped():
    a = T.model_like_logits(3, 1000, seed=4)
    assert a.shape == (3, 1000) and a.dtype == np.float32
    np.testing.assert_array_equal(a, T.model_like_logits(3, 1000, seed=4))
    assert not np.array_equal(a, T.model_like_logits(3, 1000, seed=5))
    # the head stands out: the largest entry of each row is well above the bulk
    assert (a.max(axis=1) > np.median(a, axis=1) + 3 * 2.0).all()


def test_ties_at_kth_against_counting():
    rng = np.random.default_rng(7)
    for _ in range(50):
        v = rng.integers(-4, 5, size=int(rng.integers(1, 40))).astype(np.float32)
        k = int(rng.integers(1, v.size + 1))
        kth = sorted(v.tolist(), reverse=True)[k - 1]
        equal = sum(x == kth for x in v.tolist())
        taken = k - sum(x > kth for x in v.tolist())
        assert T.ties_at_kth(v, k) == (equal, taken)


def test_topk_set_changed_against_sets():
    g = torch.Generator().manual_seed(8)
    x_hi = torch.randn((40, 300), generator=g)
    x_lo = x_hi.to(torch.bfloat16)
    for k in (1, 8, 50):
        changed = T.topk_set_changed(x_hi, x_lo, k)
        expect = [set(T.topk_ref(x_hi[r], k)[1].tolist()) != set(T.topk_ref(x_lo[r], k)[1].tolist()) for r in range(40)]
        assert changed.tolist() == expect
    assert not T.topk_set_changed(x_hi, x_hi.clone(), 8).any()
    assert T.topk_set_changed(x_hi, x_lo, 50).any()  # bf16 rounding does move the 50th entry

    # a list of k gives the (len(k), rows) array, one row per k
    many = T.topk_set_changed(x_hi, x_lo, [1, 8, 50])
    assert many.shape == (3, 40) and many[2].tolist() == T.topk_set_changed(x_hi, x_lo, 50).tolist()


def test_torch_sort_indices_is_topk_refs_order():
    g = torch.Generator().manual_seed(9)
    x = (torch.randn((6, 500), generator=g) * 3).round().to(torch.bfloat16)  # many ties
    x[0, 7], x[1, 3], x[2, 11] = float("nan"), -0.0, float("inf")
    assert torch.equal(T.torch_sort_indices(x), T.topk_ref(x, 500)[1])


def _insertions_by_steps(values: np.ndarray, k: int, block_v: int) -> list[int]:
    """The kernel's loop, step by step (kernels.topk._absorb): per block, while the block's largest
    (key, then lower column) beats the list's smallest, it replaces it; one count per step."""
    k_pad = 1 << (k - 1).bit_length()
    bits, f = T.float_bits(values)
    keys = T.topk_keys(bits, f).astype(np.int64)
    rank = [(int(key), -col) for col, key in enumerate(keys)]  # larger is better
    best = [(-1, -(10**9) - j) for j in range(k_pad)]  # k_pad distinct fillers below every element
    counts = []
    for start in range(0, len(rank), block_v):
        block, n = sorted(rank[start : start + block_v], reverse=True), 0
        for m in block:
            low = min(best)
            if m <= low:
                break
            best[best.index(low)] = m
            n += 1
        counts.append(n)
    return counts


@pytest.mark.parametrize("k, block_v", [(1, 64), (8, 64), (50, 128), (64, 64), (300, 256)])
def test_running_insertions_is_the_kernels_loop(k, block_v):
    rng = np.random.default_rng(k)
    x = np.round(rng.normal(size=3001) * 4).astype(np.float32)  # ties between blocks and within
    x[[5, 900]] = np.nan
    got = T.running_insertions(x, k, block_v)
    assert got.tolist() == _insertions_by_steps(x, k, block_v)
    assert got[0] == min(block_v, 1 << (k - 1).bit_length())  # the first block fills the list
    # distinct values in ascending order: every block beats the list, and inserts its K_PAD best
    ascending = np.arange(3001, dtype=np.float32)
    k_pad = 1 << (k - 1).bit_length()
    assert (
        T.running_insertions(ascending, k, block_v)
        == np.minimum(k_pad, [len(ascending[s : s + block_v]) for s in range(0, 3001, block_v)])
    ).all()


# ====================================================================== top-p


def top_p_brute(probs: np.ndarray, p: float) -> float:
    """The nucleus threshold from its definition, without a sort of the row or a bisection: the
    largest probability v such that the mass of every probability >= v (an exact sum, rounded
    once) reaches p; the smallest probability if none does."""
    q = np.asarray(probs, dtype=np.float64)
    reach = [v for v in set(q.tolist()) if math.fsum(q[q >= v].tolist()) >= p]
    return max(reach) if reach else float(q.min())


def distributions(seed: int):
    """Probability rows: Dirichlet with small (spiky, many tiny entries) and large (flat)
    concentration, rows with exact ties (multiples of 1/64, then of 1/1000), and zeros."""
    rng = np.random.default_rng(seed)
    for i in range(160):
        n = int(rng.integers(1, 400))
        alpha = (0.01, 0.1, 1.0, 10.0)[i % 4]
        q = rng.dirichlet(np.full(n, alpha))
        if i % 5 == 1:  # exact ties: every probability a multiple of 1/64, zeros among them
            q = np.round(q * 64)
            if q.sum() == 0:
                q[0] = 1.0
            q = q / q.sum()
        elif i % 5 == 2:
            q = np.round(q, 3)
            if q.sum() == 0:
                q[0] = 1.0
        yield q


@pytest.mark.parametrize("p", [0.5, 0.9, 0.95, 1.0])
def test_top_p_search_equals_sorting_and_the_definition(p):
    passes = []
    for q in distributions(seed=int(p * 100)):
        ref = T.top_p_threshold_ref(q, p)
        got, n = T.top_p_threshold_search(q, p)
        assert got == ref, (q.size, p)
        if q.size <= 150:
            assert ref == top_p_brute(q, p)
        passes.append(n)
    # a pass is a read of the row; halving the float64 codes can take at most 64 of them
    # (measured: from 1 to the low 30s on these rows)
    assert 1 <= min(passes) and max(passes) <= 40


def test_top_p_when_the_whole_row_falls_short_of_p():
    """Probabilities whose exact sum is below 1 (rounding) and p = 1: every token is in the
    nucleus, the threshold is the smallest probability, and the search does not run off."""
    q = np.array([0.25 - 2.0**-53, 0.5, 0.25])  # exactly 1 - 2**-53
    assert math.fsum(q.tolist()) < 1
    assert T.top_p_threshold_ref(q, 1.0) == q.min()
    assert T.top_p_threshold_search(q, 1.0) == (q.min(), 1)
    rng = np.random.default_rng(11)
    short = 0
    for _ in range(200):
        q = rng.dirichlet(np.full(50, 0.05))
        if math.fsum(q.tolist()) < 1:
            short += 1
            assert T.top_p_threshold_search(q, 1.0) == (q.min(), 1)
            assert T.top_p_threshold_ref(q, 1.0) == q.min()
    assert short > 0


def test_top_p_separates_tiny_probabilities_in_few_passes():
    """A row whose nucleus at p = 1 ends on a probability of 1e-200 (the entries above it add up
    to 1 - 2**-54 - 2**-690 exactly, 1e-200 more rounds the mass to 1), with 1e-192 above it and
    1e-300 below: halving the values from [0, 0.5) would take more than 600 passes to separate
    them; halving the float64 codes takes fewer than 64."""
    chain = [0.5, 0.5 - 2.0**-53] + [2.0**-a - 2.0 ** -(a + 53) for a in range(54, 690, 53)]
    assert math.fsum(chain) < 1 and math.fsum([*chain, 1e-200]) == 1.0 and min(chain) > 1e-192
    q = np.array([1e-300, *chain, 1e-200])
    got, n = T.top_p_threshold_search(q, 1.0)
    assert got == T.top_p_threshold_ref(q, 1.0) == top_p_brute(q, 1.0) == 1e-200
    assert n < 64
    assert T.top_p_threshold_search(q, 0.5) == (0.5, 1)  # the largest alone reaches p: one pass


@pytest.mark.parametrize(
    "probs, p, match",
    [
        ([0.5, 0.5], 0.0, r"p must be in \(0, 1\], got 0.0"),
        ([0.5, 0.5], 1.5, r"p must be in \(0, 1\], got 1.5"),
        ([0.5, -0.1, 0.6], 0.5, "finite, non-negative"),
        ([0.5, float("nan")], 0.5, "finite, non-negative"),
        ([], 0.5, "non-empty"),
    ],
)
def test_top_p_refuses_bad_input(probs, p, match):
    for fn in (T.top_p_threshold_ref, T.top_p_threshold_search):
        with pytest.raises(ValueError, match=match):
            fn(np.array(probs), p)


# ---------------------------------------------------------------- top-p by rejection sampling


@pytest.mark.parametrize("p", [0.5, 0.9, 1.0])
def test_rejection_sampling_tests_membership_as_its_definition_says(p):
    """The sampler tests a value x with the threshold (x >= top_p_threshold_ref); the kernel tests
    whether the probabilities above x have a mass below p. They agree for every x: the row's own
    values, the midpoints between them, and values above the row's largest; not below its
    smallest, where a row whose whole mass falls short of p = 1 makes f true and the threshold
    (the smallest value) says no: the sampler never asks there."""
    for q in distributions(seed=int(p * 1000)):
        if q.size > 150:
            continue
        t = T.top_p_threshold_ref(q, p)
        vals = np.unique(q)
        xs = np.r_[vals, (vals[1:] + vals[:-1]) / 2, vals.max() * 2, np.nextafter(vals[1:], 0)]
        for x in xs:
            assert (math.fsum(q[q > x].tolist()) < p) == (x >= t), (q.size, p, x)


@pytest.mark.parametrize("pivots", [1, 2])
def test_rejection_sampling_draws_only_from_the_nucleus(pivots):
    rng = np.random.default_rng(5)
    rounds = []
    for i, q in enumerate(distributions(seed=3)):
        p = (0.5, 0.9, 0.95, 1.0)[i % 4]
        tokens, r = T.top_p_rejection_sample(q, p, rng, draws=20, pivots=pivots)
        assert (q[tokens] >= T.top_p_threshold_ref(q, p)).all()
        assert (q[tokens] > 0).all() and (r >= 1).all()
        rounds.append(r.mean())
    assert max(rounds) > 1  # rejections happened on these rows


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of ``counts`` against ``probs`` (renormalized) and its degrees of
    freedom; no count may fall where the probability is zero."""
    keep = probs > 0
    assert counts[~keep].sum() == 0
    expected = probs[keep] / probs[keep].sum() * counts.sum()
    return float(((counts[keep] - expected) ** 2 / expected).sum()), int(keep.sum()) - 1


def wrong_sampler(q, p, rng, draws):
    """A plausible wrong answer: draw from the whole row once and move a rejected token to the
    nucleus's last member (the mass of the tail piles up on one token)."""
    t = T.top_p_threshold_ref(q, p)
    last = int(np.flatnonzero(q == q[q >= t].min())[0])
    j = rng.choice(q.size, size=draws, p=q / q.sum())
    return np.where(q[j] >= t, j, last)


@pytest.mark.parametrize("pivots", [1, 2])
def test_rejection_sampling_has_the_nucleus_distribution(pivots):
    """20,000 draws from small rows (with ties and a zero): the counts pass a chi-square test
    against the nucleus's renormalized probabilities (seeded: the same numbers every run), and a
    sampler that piles the tail's mass on one token fails it by far."""
    rng = np.random.default_rng(2024)
    rows = [
        (np.array([0.3, 0.2, 0.2, 0.1, 0.1, 0.05, 0.05]), 0.7),
        (np.array([0.4, 0.0, 0.25, 0.15, 0.1, 0.06, 0.04]), 0.9),
        (rng.dirichlet(np.full(12, 0.5)), 0.8),
    ]
    for q, p in rows:
        t = T.top_p_threshold_ref(q, p)
        nucleus = np.where(q >= t, q, 0.0)
        tokens, rounds = T.top_p_rejection_sample(q, p, rng, draws=20_000, pivots=pivots)
        # a chi-square of df degrees of freedom has mean df and standard deviation sqrt(2 df):
        # 8 of them above the mean is a tail below 1e-5 for these df (2 to 11)
        stat, df = chi_square(np.bincount(tokens, minlength=q.size), nucleus)
        assert stat < df + 8 * math.sqrt(2 * df), (stat, df)
        bad, df = chi_square(np.bincount(wrong_sampler(q, p, rng, 20_000), minlength=q.size), nucleus)
        assert bad > 100 * df, (bad, df)
        assert rounds.max() > 1


def test_rounds_stay_under_one_over_p_and_two_pivots_bound_them():
    """Each round accepts with probability (nucleus mass) / (mass above low) >= p, so a draw takes
    at most 1/p rounds on average. On a row of one token of 0.5 and a tail of 1,000 with p = 0.5,
    one pivot sometimes climbs the tail in several rounds; with two, the first rejection's
    midpoint (about 0.25) fails the test and lifts low past the whole tail: never a third round."""
    tail = np.linspace(1, 2, 1000)
    q = np.r_[0.5, tail / tail.sum() * 0.5]
    one = T.top_p_rejection_sample(q, 0.5, np.random.default_rng(1), draws=400, pivots=1)[1]
    two = T.top_p_rejection_sample(q, 0.5, np.random.default_rng(1), draws=400, pivots=2)[1]
    assert one.max() >= 4 and two.max() == 2
    for rounds in (one, two):
        # the mean of 400 draws: within 4 standard errors (the rounds' sd is under 1.5) of <= 2
        assert rounds.mean() <= 2 + 4 * 1.5 / math.sqrt(400)
    x = T.model_like_logits(1, 128_256, seed=7)[0]
    q = np.exp(x - x.max())
    q /= q.sum()
    for p in (0.5, 0.9):
        r = T.top_p_rejection_sample(q, p, np.random.default_rng(2), draws=100, pivots=2)[1]
        assert r.mean() <= 1 / p + 4 * 1.5 / math.sqrt(100)


@pytest.mark.parametrize(
    "kw, err, match",
    [
        ({"pivots": 3}, ValueError, r"^pivots must be an int from 1 to 2 \(pivots tested per round\), got 3$"),
        ({"pivots": True}, ValueError, r"^pivots must be an int from 1 to 2 \(pivots tested per round\), got True$"),
        ({"draws": 0}, ValueError, "draws must be a positive int, got 0"),
        ({"rng": None}, ValueError, "explicit generator"),
        ({"rng": 7}, TypeError, "numpy.random.Generator"),
        ({"p": 0.0}, ValueError, r"p must be in \(0, 1\]"),
    ],
)
def test_rejection_sampling_refuses_bad_input(kw, err, match):
    args = {"probs": np.array([0.5, 0.5]), "p": 0.5, "rng": np.random.default_rng(0)} | kw
    with pytest.raises(err, match=match):
        T.top_p_rejection_sample(**args)
