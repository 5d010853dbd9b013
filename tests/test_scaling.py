"""Tests of nbhelpers.recipes (the specs) and nbhelpers.scaling (quantize, dequantize, delayed
scaling, storage): against hand arithmetic, ml_dtypes casts, the OCP MX v1.0 rule written out here
independently, and torchao's MX quantization (torchao is in the test extra, not a dependency of
the package)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from nbhelpers.formats import get_format, ulp
from nbhelpers.recipes import (
    BLOCK_128X128,
    MX_BLOCK,
    NVFP4_BLOCK,
    PER_COLUMN,
    PER_ROW,
    PER_TENSOR,
    RECIPES,
    TILE_1X128,
    AmaxKind,
    E8M0Rule,
    IntElement,
    Recipe,
    ScaleKind,
    get_recipe,
    group_along_k,
)
from nbhelpers.rounding import round_to
from nbhelpers.scaling import (
    DelayedScaler,
    block_amax,
    bytes_per_element,
    dequantize,
    e8m0_exponents,
    nvfp4_scales,
    quantize,
    storage_bits,
)

CURRENT = [n for n, r in RECIPES.items() if r.amax == "current"]
ML = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e2m1fn": ml_dtypes.float4_e2m1fn}
# OCP MX v1.0, table of element formats: exponent of the largest normal of each element type
OCP_EMAX = {"e4m3fn": 8, "e5m2": 15, "e2m1fn": 2}


def data(shape=(48, 320), seed=0, spread=True):
    """Normal data, rows scaled by powers of two from 2**-6 to 2**6 (so blocks differ), as float32 values."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if spread:
        x *= np.ldexp(1.0, rng.integers(-6, 7, size=(shape[0], 1)))
    return x.astype(np.float32).astype(np.float64)


# ====================================================================== recipes


def test_named_recipes_and_granularities():
    assert (PER_TENSOR, PER_ROW, PER_COLUMN) == ((None, None), (1, None), (None, 1))
    assert (TILE_1X128, BLOCK_128X128, MX_BLOCK, NVFP4_BLOCK) == ((1, 128), (128, 128), (1, 32), (1, 16))
    assert group_along_k(64) == (1, 64)
    assert RECIPES["MXFP4"] == Recipe("e2m1fn", (1, 32), "e8m0")
    assert RECIPES["MXFP8"] == Recipe("e4m3fn", (1, 32), "e8m0")
    assert RECIPES["NVFP4"] == Recipe("e2m1fn", (1, 16), "e4m3_over_fp32")
    assert RECIPES["int4 g128"] == Recipe("int4", (1, 128))
    assert RECIPES["fp8 e4m3 128x128"].block == (128, 128)
    assert get_recipe("int8 per-row") is RECIPES["int8 per-row"]
    assert Recipe(" E4M3FN ").element == "e4m3fn"  # normalised to the format's name


def test_vocabulary_enums_carry_their_numbers():
    """The scale kinds' bits and smallest scales are the formats' own: fp32's smallest subnormal,
    e8m0's smallest code (ml_dtypes' float8_e8m0fnu), e4m3fn's smallest subnormal."""
    assert ScaleKind.FP32.smallest == float(np.finfo(np.float32).smallest_subnormal) == 2.0**-149
    e8m0 = ml_dtypes.finfo(ml_dtypes.float8_e8m0fnu)
    assert ScaleKind.E8M0.smallest == ScaleKind.E8M0_RCEIL.smallest == float(e8m0.smallest_normal) == 2.0**-127
    assert ScaleKind.E4M3_OVER_FP32.smallest == float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).smallest_subnormal)
    assert [k.bits for k in ScaleKind] == [32, 8, 8, 8]
    assert [k.tensor_scale_bits for k in ScaleKind] == [0, 0, 0, 32]
    assert [k.e8m0_rule for k in ScaleKind] == [None, E8M0Rule.FLOOR, E8M0Rule.RCEIL, None]
    assert [(e.bits, e.qmax) for e in IntElement] == [(8, int(np.iinfo(np.int8).max)), (4, 7)]
    # strings and members are interchangeable: a recipe stores the member and equals the string
    r = Recipe("e4m3fn", MX_BLOCK, "E8M0", "current")
    assert r.scale is ScaleKind.E8M0 and r.scale == "e8m0" and r.amax is AmaxKind.CURRENT
    assert r == Recipe("e4m3fn", MX_BLOCK, ScaleKind.E8M0, AmaxKind.CURRENT)
    assert Recipe("int8").element is IntElement.INT8 and str(RECIPES["MXFP8 RCEIL"].scale) == "e8m0_rceil"
    amax = [3.0, 500.0]
    assert np.array_equal(e8m0_exponents(amax, "e4m3fn", E8M0Rule.RCEIL), e8m0_exponents(amax, "e4m3fn", "rceil"))


@pytest.mark.parametrize(
    "element, bits, emax_val",
    [("int8", 8, 127), ("int4", 4, 7), ("e4m3fn", 8, 448), ("e5m2", 8, 57344), ("e2m1fn", 4, 6)],
)
def test_derived_element_properties(element, bits, emax_val):
    r = Recipe(element)
    assert (r.element_bits, r.element_max) == (bits, emax_val)
    assert r.is_int == element.startswith("int")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(block=(0, 32)), r"block must be a pair .* \(a block size must be positive\)"),
        (dict(block=(1, -4)), r"a block size must be positive"),
        (dict(block=32), r"block must be a pair \(rows, cols\) of positive ints or None"),
        (dict(block=(1, 2.5)), r"block must be a pair"),
        (dict(element="int3"), r"unknown element format 'int3'; expected 'int8', 'int4' or a signed float"),
        (dict(element="e8m0fnu"), r"element format 'e8m0fnu' has no sign or no zero"),
        (dict(element=8), r"unknown element format 8"),
        (dict(element="int8", scale="e8m0"), r"scale 'e8m0' needs a float element format .* takes an 'fp32' scale"),
        (dict(element="int4", scale="e4m3_over_fp32"), r"scale 'e4m3_over_fp32' needs a float element format"),
        (dict(scale="fp16"), r"unknown scale 'fp16'; expected one of: 'fp32', 'e8m0', 'e8m0_rceil', 'e4m3_over_fp32'"),
        (dict(amax="later"), r"unknown amax 'later'; expected one of: 'current', 'delayed'"),
        (dict(amax="delayed"), r"history \(the amax history length H"),
        (dict(amax="delayed", history=0), r"history .* must be a positive int"),
        (dict(history=4), r"history=4 is only for amax='delayed'"),
        (dict(element="e4m3fn", block=(1, 32), amax="delayed", history=4), r"delayed scaling is per tensor"),
    ],
)
def test_bad_recipes_name_what_is_accepted(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Recipe(**kwargs)


def test_unknown_recipe_name():
    with pytest.raises(ValueError, match=r"unknown recipe 'MXFP5'; a Recipe or one of: 'int8 per-tensor'"):
        get_recipe("MXFP5")
    with pytest.raises(ValueError, match=r"group size g must be a positive int"):
        group_along_k(0)


# ====================================================================== shapes, padding


@pytest.mark.parametrize(
    "name, want",
    [
        ("int8 per-tensor", (1, 1)),
        ("int8 per-row", (5, 1)),
        ("int8 per-column", (1, 300)),
        ("fp8 e4m3 1x128", (5, 3)),
        ("fp8 e4m3 128x128", (1, 3)),
        ("MXFP4", (5, 10)),
        ("NVFP4", (5, 19)),
        ("int4 g128", (5, 3)),
    ],
)
def test_scales_shape_is_the_ceil_grid(name, want):
    x = data((5, 300))
    q, scales = quantize(x, name)
    assert q.shape == x.shape and scales.shape == want


@pytest.mark.parametrize("name", ["fp8 e4m3 1x128", "fp8 e4m3 128x128", "MXFP4", "NVFP4", "int4 g128"])
def test_shapes_that_do_not_divide_the_block_are_zero_padded(name):
    x = data((130, 300), seed=1)
    r = RECIPES[name]
    br, bc = (130 if r.block[0] is None else r.block[0]), r.block[1]
    M, K = -(-130 // br) * br, -(-300 // bc) * bc
    xp = np.zeros((M, K))
    xp[:130, :300] = x
    q, s = quantize(x, r)
    qp, sp = quantize(xp, r)
    np.testing.assert_array_equal(q, qp[:130, :300])
    np.testing.assert_array_equal(s, sp)


# ====================================================================== scales and casts


def test_fp32_scales_are_amax_over_max_in_fp32():
    x = data()
    q, s = quantize(x, "fp8 e4m3 per-row")
    want = np.float32(np.abs(x).max(axis=1, keepdims=True) / 448.0).astype(np.float64)
    np.testing.assert_array_equal(s, want)
    q, s = quantize(x, "int8 per-column")
    np.testing.assert_array_equal(s, np.float32(np.abs(x).max(axis=0, keepdims=True) / 127.0).astype(np.float64))
    assert q.dtype == np.int8 and np.abs(q).max() == 127


def test_int4_groups_are_integers_within_7():
    x = data()
    q, s = quantize(x, "int4 g128")
    assert q.dtype == np.int8 and np.abs(q).max() == 7 and np.abs(q).min() == 0
    x_dq = dequantize(q, s, "int4 g128")
    # within half a step of the group's scale
    assert np.all(np.abs(x_dq - x) <= 0.5 * np.repeat(s, 128, axis=1)[:, :320] * (1 + 2**-20))


@pytest.mark.parametrize("name", CURRENT)
def test_round_trip_within_half_an_ulp_of_the_element_format_times_the_scale(name):
    r = RECIPES[name]
    x = data((40, 256), seed=2)
    q, s = quantize(x, r)
    x_dq = dequantize(q, s, r)
    s_full = np.repeat(
        np.repeat(s, 40 if r.block[0] is None else r.block[0], 0), 256 if r.block[1] is None else r.block[1], 1
    )[:40, :256]
    v = x / s_full
    inside = np.abs(v) <= r.element_max
    half_step = 0.5 if r.is_int else 0.5 * ulp(v, r.element)
    err = np.abs(x_dq - x)
    assert np.all(err[inside] <= (half_step * s_full)[inside])
    # and it is not trivially loose: the largest error uses at least a third of the bound
    assert (err[inside] / (half_step * s_full)[inside]).max() > 1 / 3
    # outside the range (only MX's floor rule puts values there) the value is clamped to the max
    np.testing.assert_array_equal(np.abs(q[~inside]), r.element_max)


@pytest.mark.parametrize(
    "name", ["fp8 e4m3 per-tensor", "fp8 e4m3 1x128", "fp8 e5m2 per-tensor", "MXFP8", "MXFP8 e5m2", "MXFP4", "NVFP4"]
)
def test_element_casts_are_bit_exact_against_ml_dtypes(name):
    r = RECIPES[name]
    x = data((32, 256), seed=3)
    q, s = quantize(x, r)
    s_full = np.repeat(np.repeat(s, 32 if r.block[0] is None else r.block[0], 0), r.block[1] or 256, 1)
    v = np.clip(x / s_full, -r.element_max, r.element_max)
    v32 = v.astype(np.float32)
    # ml_dtypes casts float64 through float32 (FACTS.md): the oracle is exact only where that first
    # rounding does not move the value to another element; check that precondition, then compare
    assert np.array_equal(round_to(v32, r.element), round_to(v, r.element))
    ref = v32.astype(ML[r.element]).astype(np.float64)
    np.testing.assert_array_equal(q, ref)
    assert np.isfinite(q).all()


def test_clamp_before_the_cast_no_nan_in_e4m3fn():
    # an MXFP8 block whose amax is 3.95: scale 2**(1 - 8), amax / scale = 505.6 > 448. Without the
    # clamp e4m3fn's cast would give NaN (it has no inf).
    x = np.full((1, 32), 0.25)
    x[0, 5] = 3.95
    q, s = quantize(x, "MXFP8")
    assert s[0, 0] == 2.0**-7 and q[0, 5] == 448.0
    assert np.isnan(round_to(3.95 / 2.0**-7, "e4m3fn"))  # what the cast alone does


def test_mxfp4_block_with_amax_7_stores_6():
    x = np.zeros((1, 32))
    x[0, :4] = [7.0, -7.0, 3.0, 0.5]
    q, s = quantize(x, "MXFP4")
    assert s[0, 0] == 1.0  # 2**(floor(log2 7) - 2)
    assert list(q[0, :4]) == [6.0, -6.0, 3.0, 0.5]
    assert dequantize(q, s, "MXFP4")[0, 0] == 6.0


def ocp_mx_scale(amax: float, element: str) -> float:
    """OCP MX v1.0 (section 6.3): X = 2**(floor(log2(amax)) - emax_elem), in integer exponent
    arithmetic; an all-zero block takes e8m0's smallest value 2**-127, as do smaller results."""
    if amax == 0.0:
        return 2.0**-127
    m, e = math.frexp(amax)  # amax = m * 2**e, 0.5 <= m < 1, so floor(log2(amax)) = e - 1
    return 2.0 ** max(e - 1 - OCP_EMAX[element], -127)


@pytest.mark.parametrize("name", ["MXFP8", "MXFP8 e5m2", "MXFP4"])
def test_mx_scales_follow_the_ocp_definition(name):
    r = RECIPES[name]
    x = data((16, 256), seed=4)
    x[3, 32:64] = 0.0  # an all-zero block
    x[4, :32] *= 2.0**-140  # a block whose exponent would fall below -127
    x[5, :32] = 2.0 ** np.arange(32) / 2**20  # exact powers of two: floor(log2) on the boundary
    amax = block_amax(x, r)
    _, s = quantize(x, r)
    want = np.array([[ocp_mx_scale(float(a), r.element) for a in row] for row in amax])
    np.testing.assert_array_equal(s, want)
    assert s[3, 1] == 2.0**-127 and s[4, 0] == 2.0**-127


def test_mx_exponent_beyond_e8m0_is_an_error():
    with pytest.raises(ValueError, match=r"exceeds e8m0's largest \(127\)"):
        e8m0_exponents(np.array([2.0**200]), "e4m3fn")


def test_nvfp4_two_level_scales():
    x = data((8, 64), seed=5)
    amax_b = block_amax(x, "NVFP4")
    s_b, s_t = nvfp4_scales(amax_b)
    assert s_t == float(np.float32(np.abs(x).max() / (448 * 6)))
    np.testing.assert_array_equal(s_b, round_to(amax_b / 6 / s_t, "e4m3fn"))
    q, s = quantize(x, "NVFP4")
    np.testing.assert_array_equal(s, s_b * s_t)
    s_full = np.repeat(s, 16, axis=1)
    np.testing.assert_array_equal(q, round_to(np.clip(x / s_full, -6, 6), "e2m1fn"))
    assert s_b.max() == 448.0  # the block holding the tensor's amax gets the top of e4m3's range


# ====================================================================== zero and non-finite blocks


@pytest.mark.parametrize(
    "name, smallest",
    [("int8 per-row", 2.0**-149), ("fp8 e4m3 1x128", 2.0**-149), ("MXFP4", 2.0**-127), ("NVFP4", None)],
)
def test_all_zero_blocks_get_the_smallest_scale_and_q_zero(name, smallest):
    x = data((4, 256), seed=6)
    x[1] = 0.0
    with np.errstate(all="raise"):
        q, s = quantize(x, name)
        zq, zs = quantize(np.zeros((4, 256)), name)
    assert np.all(q[1] == 0) and np.all(zq == 0)
    if smallest is None:  # NVFP4: e4m3's smallest 2**-9 under the smallest fp32 tensor scale 2**-149
        smallest = 2.0**-9 * 2.0**-149
        assert np.all(s[1] == 2.0**-9 * nvfp4_scales(block_amax(x, name))[1])
    else:
        assert np.all(s[1] == smallest)
    assert np.all(zs == smallest)
    assert np.all(dequantize(zq, zs, name) == 0)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_amax_names_the_tensor_and_the_block(bad):
    x = data((64, 256), seed=7)
    x[33, 200] = bad
    with pytest.raises(ValueError, match=r"^w: block \(33, 6\) has a non-finite amax \((inf|nan)\); 1 of 512 blocks"):
        quantize(x, "MXFP4", name="w")
    with pytest.raises(ValueError, match=r"^act: block \(0, 0\) has a non-finite amax"):
        quantize(x, "int8 per-tensor", name="act")


def test_bad_arrays():
    with pytest.raises(ValueError, match=r"x must be a 2-D array \(M, K\), got shape \(8,\)"):
        quantize(np.ones(8), "MXFP4")
    q, s = quantize(data((4, 64)), "MXFP4")
    with pytest.raises(
        ValueError,
        match=r"scales has shape \(2, 4\), but q of shape \(4, 64\) with block "
        r"\(1, 32\) needs \(4, 2\)",
    ):
        dequantize(q, s.T, "MXFP4")
    with pytest.raises(ValueError, match=r"scales from an amax history: use DelayedScaler\(recipe\)\.quantize\(x\)"):
        quantize(data((4, 64)), "fp8 e4m3 delayed H=16")
    with pytest.raises(ValueError, match=r"DelayedScaler needs a recipe with amax='delayed'"):
        DelayedScaler("MXFP8")


# ====================================================================== delayed scaling


def test_delayed_scale_is_the_max_of_the_earlier_history():
    r = Recipe("e4m3fn", amax="delayed", history=3)
    ds = DelayedScaler(r)
    amaxes = [1.0, 4.0, 2.0, 0.5, 0.25, 0.125]
    used = []
    for a in amaxes:
        x = np.full((2, 8), a / 2)
        x[0, 0] = a
        _, s = ds.quantize(x)
        used.append(s[0, 0])
    want = [np.float32(m / 448.0) for m in [1.0, 1.0, 4.0, 4.0, 4.0, 2.0]]  # step 0: its own amax
    assert used == [float(w) for w in want]
    assert ds.next_scale() == float(np.float32(0.5 / 448.0))


def test_an_amax_spike_clamps_under_delayed_scaling_but_not_current():
    rng = np.random.default_rng(8)
    steps = [rng.standard_normal((16, 64)) for _ in range(6)]
    steps[4][3, 7] = 100.0  # the spike, about 25x the usual amax
    ds = DelayedScaler(Recipe("e4m3fn", amax="delayed", history=4))
    clamped_delayed, clamped_current = [], []
    for x in steps:
        q, s = ds.quantize(x)
        qc, sc = quantize(x, "fp8 e4m3 per-tensor")
        # clipped: |x| / scale at or past 464, the first value that would not round to 448
        clamped_delayed.append(int(np.sum(np.abs(x) / s[0, 0] >= 464.0)))
        clamped_current.append(int(np.sum(np.abs(x) / sc[0, 0] >= 464.0)))
        assert np.isfinite(q).all()
        if x is steps[4]:
            spike_delayed, spike_current = q[3, 7] * s[0, 0], qc[3, 7] * sc[0, 0]
    assert clamped_delayed[4] >= 1 and clamped_current == [0] * 6
    assert spike_delayed < 10 and spike_current == pytest.approx(100.0, rel=2**-23)  # delayed: 448 * old scale


def test_after_the_spike_the_history_keeps_the_large_scale_for_h_steps():
    ds = DelayedScaler(Recipe("e4m3fn", amax="delayed", history=2))
    for a in [1.0, 100.0, 1.0, 1.0, 1.0]:
        ds.quantize(np.full((1, 4), a))
    # steps after the spike used 100/448 while it was in the last 2 amaxes, then 1/448
    assert ds.next_scale() == float(np.float32(1.0 / 448.0))


# ====================================================================== storage


def test_bytes_per_parameter_against_hand_arithmetic():
    shape = (4096, 4096)
    n = 4096 * 4096
    assert bytes_per_element("MXFP4", shape) == (4 + 8 / 32) / 8 == 0.53125
    assert bytes_per_element("MXFP8", shape) == (8 + 8 / 32) / 8
    assert bytes_per_element("NVFP4", shape) == (4 + 8 / 16) / 8 + 4 / n
    assert bytes_per_element("int4 g128", shape) == (4 + 32 / 128) / 8  # fp32 group scales
    assert bytes_per_element("int8 per-tensor", shape) == 1 + 4 / n
    assert bytes_per_element("int8 per-row", shape) == 1 + 4 / 4096
    assert bytes_per_element("fp8 e4m3 128x128", shape) == 1 + 4 / (128 * 128)
    # a row of 33 elements needs two MX blocks: both scales are stored
    assert storage_bits("MXFP4", (1, 33)) == {"elements": 132, "block_scales": 16, "tensor_scale": 0, "total": 148}
    with pytest.raises(ValueError, match=r"shape must be \(M, K\) with M, K >= 1"):
        storage_bits("MXFP4", (0, 32))


# ====================================================================== torchao (test-only oracle)


@pytest.mark.parametrize("name", ["MXFP8", "MXFP8 e5m2", "MXFP4", "MXFP8 RCEIL", "MXFP4 RCEIL"])
def test_mx_quantization_is_bit_exact_against_torchao(name):
    """torchao.prototype.mx_formats.to_mx with its FLOOR rule (OCP MX v1.0, the "e8m0" scale) and its
    RCEIL rule ("e8m0_rceil"). torchao is in the test extra (`pip install -e '.[test]'`); the test
    skips only where it is not installed."""
    torch = pytest.importorskip("torch")
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    kernels = pytest.importorskip("torchao.prototype.mx_formats.kernels")
    mode = pytest.importorskip("torchao.prototype.mx_formats.config").ScaleCalculationMode
    r = RECIPES[name]
    rule = "floor" if r.scale == "e8m0" else "rceil"
    x = data((64, 256), seed=9)
    x[:, :32] *= np.ldexp(1.0, np.arange(-40, 24)).reshape(-1, 1)  # scales from 2**-41 to 2**26
    x[7, 64:96] = 0.0  # a zero block: code 0 (2**-127) in both, q = 0
    x[9, 96:128] = [7.0, -7.0] + [0.5] * 30  # MXFP4's amax-7 block
    x[10, 96:128] = [7.9] + [0.5] * 31  # clips under FLOOR in MXFP4, not under RCEIL
    x[11, 96:128] = [448.0 * 1.5] + [1.0] * 31  # the same for MXFP8
    elem = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e2m1fn": torch.float4_e2m1fn_x2}[r.element]
    scaling_mode = mode.FLOOR if rule == "floor" else mode.RCEIL
    codes, data_lp = mx.to_mx(torch.from_numpy(x.astype(np.float32)), elem, 32, scaling_mode=scaling_mode)
    q, s = quantize(x, r)
    np.testing.assert_array_equal(
        codes.view(torch.uint8).numpy().astype(np.int64), e8m0_exponents(block_amax(x, r), r.element, rule) + 127
    )
    np.testing.assert_array_equal(np.log2(s), codes.view(torch.uint8).numpy().astype(np.float64) - 127)
    if r.element == "e2m1fn":
        q_ao = kernels.f4_unpacked_to_f32(kernels.unpack_uint4(data_lp.view(torch.uint8))).numpy()
    else:
        q_ao = data_lp.to(torch.float32).numpy()
    np.testing.assert_array_equal(q, q_ao.astype(np.float64).reshape(x.shape))


def test_rceil_never_clips_and_keeps_the_top_binade():
    """RCEIL: amax / scale in (max / 2, max] for every block (the fp32 quotient's rounding aside),
    FLOOR: in [2**emax, 2**(emax + 1)), past max for the top of each binade."""
    rng = np.random.default_rng(3)
    amax = np.exp2(rng.uniform(-30, 30, 20000))
    for element in ("e4m3fn", "e5m2", "e2m1fn", "e3m2fn", "e2m3fn"):
        f = get_format(element)
        r = amax / np.ldexp(1.0, e8m0_exponents(amax, element, "rceil"))
        assert (r <= f.max * (1 + 2.0**-23)).all() and (r > f.max / 2 * (1 - 2.0**-23)).all(), element
        fl = amax / np.ldexp(1.0, e8m0_exponents(amax, element, "floor"))
        assert (fl >= 2.0**f.emax).all() and (fl < 2.0 ** (f.emax + 1)).all()
    # a quotient amax / max below fp32's smallest subnormal rounds to 0: ceil(log2 0) is -inf, raised to -127
    assert e8m0_exponents(2.0**-149, "e4m3fn", "rceil") == -127 and e8m0_exponents(0.0, "e2m1fn", "rceil") == -127
    assert e8m0_exponents(2.0**-149, "e4m3fn", "floor") == -127
    with pytest.raises(ValueError, match=r"unknown e8m0 rule 'round'; expected one of: 'floor', 'rceil'"):
        e8m0_exponents(1.0, "e4m3fn", "round")


def test_rceil_where_torchao_eager_log2_rounds():
    """torchao 0.18's eager RCEIL takes ceil(float32 log2(amax / max)): a quotient one float32 step
    above 2**-9 has log2 -9 + 2.8e-7, which float32 rounds to -9, so torchao gives 2**-9, which
    clips the amax by one step; the exact rule (cuBLAS's cvt.rp) gives 2**-8. This pins what the
    docstring says, for that torchao version."""
    torch = pytest.importorskip("torch")
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    mode = pytest.importorskip("torchao.prototype.mx_formats.config").ScaleCalculationMode
    import torchao

    d = np.float32(2.0**-9) * np.nextafter(np.float32(1), np.float32(2))
    amax = float(np.float32(d * np.float32(448.0)))
    assert e8m0_exponents(amax, "e4m3fn", "rceil") == -8
    x = torch.zeros(1, 32)
    x[0, 0] = amax
    codes, _ = mx.to_mx(x, torch.float8_e4m3fn, 32, scaling_mode=mode.RCEIL)
    if torchao.__version__.startswith("0.18"):
        assert int(codes.view(torch.uint8)[0]) - 127 == -9


def test_delayed_scaler_margin_and_most_recent_amax():
    """Transformer Engine's margin (the scale times 2**margin) and amax_compute_algo ("max" over the
    history, or the most recent amax), in this course's convention x ~ q * scale."""
    r = Recipe("e4m3fn", amax="delayed", history=3)
    steps = [np.array([[4.0]]), np.array([[2.0]]), np.array([[1.0]])]
    for margin, algo, want in [(0, "max", 4.0 / 448), (2, "max", 16.0 / 448), (0, "most_recent", 1.0 / 448)]:
        ds = DelayedScaler(r, margin=margin, amax_compute=algo)
        for x in steps:
            ds.quantize(x)
        assert ds.next_scale() == float(np.float32(want)), (margin, algo)
    first = DelayedScaler(r, margin=1).quantize(np.array([[448.0, 1.0]]))
    assert first[1][0, 0] == 2.0 and first[0][0, 0] == 224.0  # the first step: its own amax, with the margin
    with pytest.raises(ValueError, match=r"margin must be a non-negative int"):
        DelayedScaler(r, margin=-1)
    with pytest.raises(ValueError, match=r"amax_compute must be 'max' or 'most_recent'"):
        DelayedScaler(r, amax_compute="mean")
