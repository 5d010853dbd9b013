"""Chapter 11 exercises: the references agree with torch (its sort of every bf16 and fp16 value,
torch.topk, the bf16 cast), with ml_dtypes' and the course's decoding of the fp8 codes and with
nbhelpers.topk's radix select; the cases hold the hard regions for every seed; the compares never
crash on a student's odd return value, and the construction check never changes the array it
judges."""

import ml_dtypes
import numpy as np
import pytest
import torch

from nbhelpers import topk as tk
from nbhelpers.answer_keys import ch11
from nbhelpers.checks import cases_for

SEEDS = (0, 1, 1111)
FLOAT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
INT = {"bf16": torch.int16, "fp16": torch.int16, "fp32": torch.int32}


def values_of(codes: np.ndarray, fmt: str) -> torch.Tensor:
    """The floats of raw codes, as a torch tensor of the format."""
    signed = np.asarray(codes).view(tk.key_format(fmt).int_dtype)
    return torch.from_numpy(np.ascontiguousarray(signed)).view(FLOAT[fmt])


# ---- exercise 1: the rank key of a float code


def torch_ranks(values: torch.Tensor) -> np.ndarray:
    """The outside oracle: for each value, how many of the values torch's stable ascending sort puts
    strictly before it (NaN last and all NaNs equal, -0 equal to +0): the position where its run of
    equal values starts."""
    s, order = torch.sort(values, stable=True)
    v = s.float().numpy()
    with np.errstate(invalid="ignore"):
        same = (v[1:] == v[:-1]) | (np.isnan(v[1:]) & np.isnan(v[:-1]))
    starts = np.concatenate([[0], np.flatnonzero(~same) + 1])
    run_start = starts[np.searchsorted(starts, np.arange(v.size), side="right") - 1]
    ranks = np.empty(v.size, np.int64)
    ranks[order.numpy()] = run_start
    return ranks


NAMED = ch11.NAMED_FORMATS


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_keys_of_every_code_are_their_ranks_in_torchs_sort(fmt):
    codes = np.arange(1 << 16, dtype=np.int64).astype(np.uint16)
    keys, _, _ = ch11.topk_key_ref(codes, NAMED[fmt])
    assert keys.dtype == np.uint16
    assert np.array_equal(keys.astype(np.int64), torch_ranks(values_of(codes, fmt)))


def test_fp32_keys_order_as_torch_sorts_and_count_the_codes_below():
    """fp32's keys (no table of 2**32 codes): along torch's sort of random codes and the specials
    they never decrease, and they are equal exactly where torch sees equal values; at the landmarks
    they are the counts: -inf 0, the zeros above the 2**31 - 2**23 negative numbers, the smallest
    positive two above them, every NaN above all 2**32 - 2**24 + 2 numbers."""
    rng = np.random.default_rng(5)
    codes = np.concatenate([rng.integers(0, 2**32, 200_000, dtype=np.int64), ch11._FP32_SPECIALS]).astype(np.uint32)
    keys, _, _ = ch11.topk_key_ref(codes, (8, 23, "ieee"))
    assert keys.dtype == np.uint32
    s, order = torch.sort(values_of(codes, "fp32"), stable=True)
    k = keys.astype(np.int64)[order.numpy()]
    v = s.numpy()
    with np.errstate(invalid="ignore"):
        same = (v[1:] == v[:-1]) | (np.isnan(v[1:]) & np.isnan(v[:-1]))
    assert (np.diff(k) >= 0).all() and np.array_equal(np.diff(k) == 0, same)
    # -inf, -0, +0, the smallest subnormal, +inf, NaNs of both signs
    landmarks = np.array([0xFF800000, 0x80000000, 0, 1, 0x7F800000, 0x7FC00000, 0xFFFFFFFF], np.uint32)
    negatives = 2**31 - 1 - (2**23 - 1)
    expected = [0, negatives, negatives, negatives + 2, 2**32 - 2 * (2**23 - 1) - 1, 2**32 - 2 * (2**23 - 1)]
    assert ch11.topk_key_ref(landmarks, NAMED["fp32"])[0].tolist() == expected + [expected[-1]]


# every split of 4 to 18 bits (2 to 10 exponent bits), of every kind
SMALL = [(e, m, kind) for e in range(2, 11) for m in range(1, 18 - e) for kind in ch11.KINDS]


def test_the_bit_formula_is_the_table_of_decoded_values_for_every_small_format():
    """The reference, the formula on the bits, against the second derivation: decode every code of
    the format from its fields, sort the numbers, count the ones below (rank_table); equal on
    every code of every format up to 18 bits."""
    for fmt in SMALL:
        codes = np.arange(1 << (1 + fmt[0] + fmt[1]))
        assert np.array_equal(ch11.rank_keys_formula(codes, fmt), ch11.rank_table(fmt)), fmt


ORACLES = {  # the formats a library decodes, as the exercise's tuples
    "fp16": ((5, 10, "ieee"), np.float16),
    "bf16": ((8, 7, "ieee"), ml_dtypes.bfloat16),
    "e5m2": ((5, 2, "ieee"), ml_dtypes.float8_e5m2),
    "e4m3": ((4, 3, "ieee"), ml_dtypes.float8_e4m3),
    "e3m4": ((3, 4, "ieee"), ml_dtypes.float8_e3m4),
    "e4m3fn": ((4, 3, "fn"), ml_dtypes.float8_e4m3fn),
    "e4m3fnuz": ((4, 3, "fnuz"), ml_dtypes.float8_e4m3fnuz),
    "e5m2fnuz": ((5, 2, "fnuz"), ml_dtypes.float8_e5m2fnuz),
}


@pytest.mark.parametrize("name", list(ORACLES))
def test_the_decoder_is_numpys_and_ml_dtypes_and_the_keys_rank_their_values(name):
    """The decoder behind rank_table against the outside decoders, every code; and the keys of the
    exercise against the ranks of the library's values."""
    fmt, dtype = ORACLES[name]
    f = ch11.key_format(fmt)
    codes = np.arange(1 << f.bits, dtype=np.int64).astype(f.codes)
    with np.errstate(invalid="ignore"):
        theirs = codes.view(dtype).astype(np.float64)
    assert np.array_equal(ch11.decode_codes(codes, fmt), theirs, equal_nan=True)
    nan = np.isnan(theirs)
    numbers = np.sort(theirs[~nan])
    ranks = np.where(nan, numbers.size, np.searchsorted(numbers, theirs, side="left"))
    assert np.array_equal(ch11.topk_key_ref(codes, fmt)[0].astype(np.int64), ranks)


def test_the_decoder_is_numpys_on_random_fp32_codes():
    rng = np.random.default_rng(3)
    codes = np.concatenate([rng.integers(0, 2**32, 100_000, dtype=np.int64), ch11._FP32_SPECIALS]).astype(np.uint32)
    with np.errstate(invalid="ignore"):
        theirs = codes.view(np.float32).astype(np.float64)
    assert np.array_equal(ch11.decode_codes(codes, NAMED["fp32"]), theirs, equal_nan=True)


@pytest.mark.parametrize("fmt", [(8, 23, "fn"), (8, 23, "fnuz"), (6, 17, "fn"), (10, 21, "fnuz"), (2, 29, "ieee")])
def test_wide_keys_order_as_the_decoded_values_and_count_the_codes_below(fmt):
    """Formats no library decodes, too wide for a table: along the decoded values of random codes
    and the specials, sorted, the keys never decrease and are equal exactly where the values are
    (NaNs all equal, -0 equal to +0); the most negative number has key 0, the zeros the count of
    the negative numbers, a NaN the count of all the numbers."""
    f = ch11.key_format(fmt)
    rng = np.random.default_rng(7)
    codes = np.concatenate([rng.integers(0, 1 << f.bits, 100_000), ch11.specials(f)]).astype(f.codes)
    values = ch11.decode_codes(codes, fmt)
    keys = ch11.topk_key_ref(codes, fmt)[0].astype(np.int64)
    order = np.lexsort((keys, np.nan_to_num(values, nan=np.inf, posinf=np.inf), np.isnan(values)))
    k, v = keys[order], values[order]
    with np.errstate(invalid="ignore"):
        same = (v[1:] == v[:-1]) | (np.isnan(v[1:]) & np.isnan(v[:-1]))
    assert (np.diff(k) >= 0).all() and np.array_equal(np.diff(k) == 0, same)
    s, m = 1 << (f.bits - 1), (1 << f.man_bits) - 1
    nans = {"ieee": 2 * m, "fn": 2, "fnuz": 1}[f.kind]
    numbers = 2 * s - nans  # every code that is not a NaN
    zeros = 1 if f.kind == "fnuz" else 2
    negatives = (numbers - zeros) // 2
    top = (s - 1) ^ m  # the all-ones exponent
    most_negative = {"ieee": s | top, "fn": 2 * s - 2, "fnuz": 2 * s - 1}[f.kind]
    nan = {"ieee": top | 1, "fn": s - 1, "fnuz": s}[f.kind]
    got = ch11.topk_key_ref(np.array([most_negative, 0, nan], f.codes), fmt)[0].tolist()
    assert got == [0, negatives, numbers]
    assert np.isnan(ch11.decode_codes(np.array([nan]), fmt)[0])


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3fn", "e4m3fnuz", "e5m2fnuz"])
def test_fp8_keys_merge_only_zeros_and_nans(fmt):
    """The conventions, against the course's own decoder where it has the format (e5m2, e4m3fn):
    fnuz has 255 numbers and one NaN (keys 0 to 255, once each), the others share a key only
    between +0 and -0 and among their NaNs."""
    from nbhelpers.formats import FORMATS, decode

    codes = np.arange(256)
    keys = ch11.rank_table(NAMED[fmt]).astype(np.int64)
    values = ch11.decode_codes(codes, NAMED[fmt])
    nan = np.isnan(values)
    if fmt in FORMATS:
        assert np.array_equal(decode(codes, fmt), values, equal_nan=True)
    if fmt.endswith("fnuz"):
        assert sorted(keys.tolist()) == list(range(256)) and nan.sum() == 1 and nan[0x80]
        assert keys[0x00] == 127 and keys[0x80] == 255
    else:
        assert keys[0x00] == keys[0x80] and np.unique(keys).size == 256 - 1 - (int(nan.sum()) - 1)


@pytest.mark.parametrize("seed", SEEDS)
def test_key_cases_hold_every_kind_of_code_and_mostly_wide_formats(seed):
    """Every kind among the random cases, most of them wider than 16 bits (no table, no library),
    each with zeros, a positive number and a NaN (of both signs where the kind has them)."""
    cases = cases_for("ex11.topk_key", seed)
    labels = {c.label for c in cases}
    assert {"every bf16 code", "every fp16 code", "every e5m2 code", "every e4m3fnuz code"} <= labels
    random = [c for c in cases if not c.label]
    assert {c.args[1].kind for c in random} == set(ch11.KINDS)
    wide = [c for c in random if c.args[1].bits > 16]
    assert len(wide) > len(random) / 2 and {c.args[1].kind for c in wide} == set(ch11.KINDS)
    for c in random:
        codes, fmt = c.args
        f = ch11.key_format(fmt)
        assert codes.dtype == f.codes and (codes.astype(np.int64) >> f.bits == 0).all()
        v = ch11.decode_codes(codes.ravel(), fmt)
        sign = (codes.ravel().astype(np.int64) >> (f.bits - 1)) == 1
        assert (v == 0).any() and ((v > 0) & ~np.isinf(v)).any() and np.isnan(v).any()
        if f.kind != "fnuz":
            assert (np.isnan(v) & sign).any() and (np.isnan(v) & ~sign).any() and ((v == 0) & sign).any()
        if f.kind == "ieee":
            assert np.isinf(v).any()


BAD = [None, "x", 3, 2.5, [1, "a"], np.zeros(3), np.zeros((2, 2), np.uint16), object(), {"a": 1}]


@pytest.mark.parametrize("got", BAD)
def test_same_keys_rejects_without_raising(got):
    expected = ch11.topk_key_ref(np.array([0, 0x8000, 0x7FC0], np.uint16), NAMED["bf16"])
    assert isinstance(ch11._same_keys(got, expected), str)


def test_same_keys_takes_the_codes_width_unsigned_and_names_the_code():
    """The statement asks keys of the codes' unsigned dtype: the width the radix passes take
    digits from. The right values in another integer type fail, and say so; a wrong key names its
    code, the code's value, and both keys."""
    codes = np.array([0x3F80, 0x8000, 0xFFC0, 0xBF80], np.uint16)
    expected = ch11.topk_key_ref(codes, NAMED["bf16"])
    assert ch11._same_keys(expected[0], expected) is None
    for other in (np.int64, np.uint32, np.int32):
        msg = ch11._same_keys(expected[0].astype(other), expected)
        assert msg is not None and np.dtype(other).name in msg and "uint16" in msg, msg
    assert "uint16" in ch11._same_keys(expected[0].view(np.int16), expected)
    assert "uint16" in ch11._same_keys(expected[0].tolist(), expected)  # a list of ints is int64
    wrong = expected[0].copy()
    wrong[1] += 1  # -0 one above +0
    msg = ch11._same_keys(wrong, expected)
    assert "0x8000" in msg and "-0.0" in msg and f"got key {int(wrong[1])}" in msg, msg
    fnuz = ch11.topk_key_ref(np.arange(256, dtype=np.uint8), NAMED["e4m3fnuz"])
    assert "uint8" in ch11._same_keys(fnuz[0].astype(np.uint16), fnuz)
    nan_low = fnuz[0].copy()
    nan_low[0x80] = 0
    assert "0x80 (the NaN" in ch11._same_keys(nan_low, fnuz)
    wide = ch11.topk_key_ref(np.array([0x800000, 0x7FFFFF], np.uint32), (6, 17, "fnuz"))
    assert "uint32" in ch11._same_keys(wide[0].astype(np.uint64), wide)
    msg = ch11._same_keys(np.zeros(2, np.uint32), wide)
    assert "(6, 17, 'fnuz') code 0x800000 (the NaN" in msg, msg
    for bad in ("e4m3", (4, 3), (1, 3, "fn"), (4, 0, "ieee"), (11, 3, "fn"), (8, 24, "ieee"), (4, 3, "fnu")):
        with pytest.raises(ValueError, match="kind one of"):
            ch11.topk_key_ref(np.arange(4, dtype=np.uint8), bad)


# ---- exercise 2: the two-stage kernel


def two_stage_cases(seed):
    return cases_for("ex11.topk_two_stage", seed)


def test_torch_topk_smallest_on_this_cpu():
    """What the statement says of torch (the version its cell prints): largest=False puts every NaN
    after every number and -0.0 with +0.0, and its indices among equal values are not the lowest
    first, which the stable ascending sort's are."""
    row = torch.tensor([float("nan"), 2.0, -0.0, float("inf"), 0.0, -1.0, -float("nan")])
    v, i = torch.topk(row, 7, largest=False)
    assert v[:5].tolist() == [-1.0, 0.0, 0.0, 2.0, float("inf")] and torch.isnan(v[5:]).all()
    assert set(i[1:3].tolist()) == {2, 4} and set(i[5:].tolist()) == {0, 6}
    assert torch.sort(row, stable=True).indices.tolist() == [5, 2, 4, 1, 3, 0, 6]
    if torch.__version__.startswith("2.13"):  # as printed by the statement's cell, this version
        assert torch.topk(torch.zeros(20), 5, largest=False).indices.tolist() != [0, 1, 2, 3, 4]


@pytest.mark.parametrize("seed", SEEDS)
def test_two_stage_ref_is_torchs_smallest_with_its_ties_in_index_order(seed):
    """The values are torch.topk(largest=False)'s (up to which of +0/-0 and which NaN); the
    indices are torch's stable ascending sort's, the outside oracle of the tie rule."""
    for case in two_stage_cases(seed):
        x, k, _ = case.args
        v, i = ch11.topk_two_stage_ref(x, k, 8)
        t = torch.from_numpy(x)
        tv = torch.topk(t, k, largest=False).values.numpy()
        assert np.array_equal(v, tv, equal_nan=True), case.label
        assert np.array_equal(i, torch.sort(t, dim=-1, stable=True).indices[:, :k].numpy()), case.label
        assert np.array_equal(v.view(np.int32), np.take_along_axis(x, i, axis=1).view(np.int32))


def ties_at_kth_smallest(row: np.ndarray, k: int) -> tuple[int, int]:
    """(how many entries equal the k-th smallest, how many of them the k smallest take), NaN the
    largest."""
    return tk.ties_at_kth(-np.nan_to_num(row, nan=1e30), k)


@pytest.mark.parametrize("seed", SEEDS)
def test_two_stage_cases_hold_the_hard_regions_and_stay_small(seed):
    cases = two_stage_cases(seed)
    random = [c for c in cases if not c.label]
    for group in (cases, random):  # the edge cases, and the random cases alone
        shapes = [(c.args[0].shape, c.args[1], c.args[2]) for c in group]
        assert any(V % chunk for (_, V), _, chunk in shapes), "a ragged last chunk"
        assert any(k > chunk for _, k, chunk in shapes), "k larger than a chunk"
        assert any(k == 1 for _, k, _ in shapes) and any(k == V for (_, V), k, _ in shapes)
        assert any(rows > 1 for (rows, _), _, _ in shapes)
        kth_ties = [ties_at_kth_smallest(c.args[0][0], c.args[1]) for c in group]
        assert sum(total > needed for total, needed in kth_ties) >= 3, "ties straddling the k-th place"
        xs = [c.args[0] for c in group]
        assert any((np.isnan(x) & np.signbit(x)).any() for x in xs), "a NaN with the sign bit set"
        assert any(((x == 0) & np.signbit(x)).any() for x in xs) and any(np.isinf(x).any() for x in xs)
        # NaNs among the k smallest: rows with fewer than k numbers
        assert any((np.isnan(np.sort(c.args[0], axis=1)[:, : c.args[1]])).any() for c in group)
    # about a second of the interpreter at most per case: rows x chunks x k steps of the solution
    assert max(c.args[0].shape[0] * (-(-c.args[0].shape[1] // c.args[2]) + 1) * c.args[1] for c in cases) <= 300


def test_same_topk_names_the_row_the_ties_and_unwritten_slots():
    x = np.array([[1.0, 2.0, 2.0, -0.0, 0.0, 3.0]], np.float32)
    expected = ch11.topk_two_stage_ref(x, 5, 8)  # -0.0 (3), +0.0 (4), 1.0 (0), 2.0 (1), 2.0 (2)
    v, i = expected
    assert i.tolist() == [[3, 4, 0, 1, 2]]
    assert ch11._same_topk((v.copy(), i.astype(np.int32)), expected) is None
    swapped = i.copy()
    swapped[0, [3, 4]] = swapped[0, [4, 3]]  # the two 2.0s in the wrong order
    assert "lowest column first" in ch11._same_topk((v, swapped), expected)
    unwritten = i.copy()
    unwritten[0, -1] = ch11.UNWRITTEN
    assert "never written" in ch11._same_topk((v, unwritten), expected)
    swapped_v, swapped_i = v.copy(), i.copy()
    swapped_v[0, [0, 1]], swapped_i[0, [0, 1]] = v[0, [1, 0]], i[0, [1, 0]]  # +0.0 before -0.0
    assert "lowest column first" in ch11._same_topk((swapped_v, swapped_i), expected)
    plus = v + np.float32(0.0)  # -0.0 stored as +0.0
    assert "bit for bit" in ch11._same_topk((plus, i), expected)


@pytest.mark.parametrize(
    "got", BAD + [(np.zeros((1, 3)), "x"), (None, None), (np.zeros((1, 3)), np.zeros((1, 3))), ([1, 2], [3])]
)
def test_same_topk_rejects_without_raising(got):
    expected = ch11.topk_two_stage_ref(np.array([[3.0, 1.0, 2.0]], np.float32), 3, 8)
    assert isinstance(ch11._same_topk(got, expected), str)


# ---- exercise 3: the cost of a radix select


@pytest.mark.parametrize("seed", SEEDS)
def test_radix_cost_ref_counts_the_passes_radix_select_makes(seed):
    """The passes of the cost model are the histogram passes nbhelpers.topk.radix_select makes,
    plus the filtering pass, on a real row of keys; the histograms are one per histogram pass
    and block, with one counter per digit value, written and read back (none for one block)."""
    rng = np.random.default_rng(seed)
    for case in cases_for("ex11.radix_cost", seed)[:12]:
        n, k, key_bits, digit_bits, value_bytes, index_bytes, blocks, counter_bytes = case.args
        m = min(n, 3000)
        keys = rng.integers(0, 2 ** min(key_bits, 62), size=m, dtype=np.int64)
        sel = tk.radix_select(keys, min(k, m), key_bits, digit_bits)
        (passes, read, written), _ = ch11.radix_cost_ref(*case.args)
        assert passes == len(sel.passes) + 1
        # the digit widths of the select's own passes: the bits between one shift and the next
        tops = [key_bits] + [p.shift for p in sel.passes]
        widths = [hi - lo for hi, lo in zip(tops, tops[1:])]
        assert sum(widths) == key_bits
        hist = blocks * counter_bytes * sum(2**w for w in widths) if blocks > 1 else 0
        assert read == passes * n * value_bytes + hist
        assert written == k * (value_bytes + index_bytes) + hist


@pytest.mark.parametrize("seed", SEEDS)
def test_every_cost_shortcut_is_wrong_on_the_random_cases(seed):
    random = [c for c in cases_for("ex11.radix_cost", seed) if not c.label]
    hints = (
        "pass too",
        "filtering",
        "values, not the keys",
        "indices",
        "2**width counters",
        "merge reads",
        "on chip",
        "counter_bytes bytes",
    )
    for hint in hints:
        assert any(hint in " ".join(ch11.radix_cost_ref(*c.args)[1].values()) for c in random), hint


def test_same_cost_accepts_equal_numbers_and_hints_at_the_mistake():
    one = ch11.radix_cost_ref(131072, 50, 32, 8, 4, 8, 1, 4)  # one block: no histogram traffic
    assert ch11._same_cost((5, 5 * 131072 * 4, 600), one) is None
    assert ch11._same_cost([5.0, 5 * 131072 * 4.0, 600.0], one) is None
    assert "filtering pass" in ch11._same_cost((4, 4 * 131072 * 4, 600), one)
    assert "indices" in ch11._same_cost((5, 5 * 131072 * 4, 200), one)
    hist_one = 4 * 4 * 256
    assert "on chip" in ch11._same_cost((5, 5 * 131072 * 4 + hist_one, hist_one + 600), one)
    # 132 blocks, 11-bit digits on 32-bit keys: 2**11 + 2**11 + 2**10 counters of 4 bytes each
    many = ch11.radix_cost_ref(131072, 50, 32, 11, 4, 8, 132, 4)
    hist = 132 * 4 * (2**11 + 2**11 + 2**10)
    row = 4 * 131072 * 4
    assert ch11._same_cost((4, row + hist, hist + 600), many) is None
    full = 132 * 4 * 3 * 2**11
    assert "2**width counters" in ch11._same_cost((4, row + full, full + 600), many)
    assert "merge reads" in ch11._same_cost((4, row, hist + 600), many)
    floor = 132 * 4 * 2 * 2**11
    assert "pass too" in ch11._same_cost((3, 3 * 131072 * 4 + floor, floor + 600), many)


@pytest.mark.parametrize("got", BAD + [(1, 2), (1, 2, "3"), (True, 2, 3), (1, None, 3), (1, 2, 3, 4)])
def test_same_cost_rejects_without_raising(got):
    assert isinstance(ch11._same_cost(got, ch11.radix_cost_ref(100, 5, 16, 8, 2, 8, 4, 4)), str)


# ---- exercise 4: a top-3 set that bf16 changes


@pytest.mark.parametrize("seed", SEEDS)
def test_every_case_has_an_answer(seed):
    for case in cases_for("ex11.flip_top3", seed):
        n, s = case.args
        assert n >= 4
        x = ch11.flip_top3_example(n, s)
        assert ch11.flip_top3_reason(x, n) is None
        # the property, once more with torch's own top-k on the sets (no ties among the top 3)
        hi = set(torch.topk(torch.from_numpy(x), 3).indices.tolist())
        lo = set(tk.topk_ref(torch.from_numpy(x).to(torch.bfloat16), 3)[1].tolist())
        assert hi != lo


def row(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


WRONG_ROWS = [  # (what the function returned, n, a phrase of the reason)
    (row(3.0, 1.0 + 2**-10, 1.0 + 2**-9, -1.0, -2.0), 5, "only its order changes"),  # two of the top 3 tie
    (row(3.0, 2.0, 1.0, 1.0, -1.0), 5, "equal in float32"),
    (row(3.0, 2.0, 1.0 + 2**-10, 1.0), 4, "the same in bf16"),  # the outsider comes later
    (row(3.0, 2.0, 1.0, 1.0 + 2**-7), 4, "the same in bf16"),  # one bf16 spacing apart
    (row(1.0, 1.0 + 2**-10, np.nan, 2.0), 4, "not finite"),
    (row(1.0, 1.0 + 2**-10, 2.0, np.inf), 4, "not finite"),
    (row(1.0, 1.0 + 2**-10, 2.0, 3.4e38), 4, "overflows"),
    (np.array([1.0, 1.0 + 2**-10, 2.0, 3.0]), 4, "float64"),
    (row(1.0, 1.0 + 2**-10, 2.0, 3.0, -1.0), 4, "shape"),
    (row(1.0, 1.0 + 2**-10, 2.0, 3.0).reshape(2, 2), 4, "shape"),
    ([1.0, 1.0 + 2**-10, 2.0, 3.0], 4, "numpy array"),
    (torch.tensor([1.0, 1.0 + 2**-10, 2.0, 3.0]), 4, "numpy array"),
    (None, 4, "numpy array"),
]


@pytest.mark.parametrize("got,n,why", WRONG_ROWS, ids=[f"{i}-{w}" for i, (_, _, w) in enumerate(WRONG_ROWS)])
def test_flip_check_rejects_the_plausible_wrong_rows(got, n, why):
    reason = ch11._flip_compare(got, ch11.flip_top3_ref(n, 0))
    assert reason is not None and why in reason, reason


def test_flip_check_accepts_the_smallest_row_and_never_changes_it():
    x = row(1.0, 1.0 + 2**-10, 2.0, 3.0)
    before = x.copy()
    x.flags.writeable = False  # any write to it would raise
    assert ch11._flip_compare(x, ch11.flip_top3_ref(4, 0)) is None
    assert np.array_equal(x.view(np.int32), before.view(np.int32))
    y = ch11.flip_top3_example(300, 7)
    saved = y.copy()
    assert ch11._flip_compare(y, ch11.flip_top3_ref(300, 7)) is None
    assert np.array_equal(y.view(np.int32), saved.view(np.int32)) and y.flags.writeable


@pytest.mark.parametrize("got", BAD + [np.zeros(4, ml_dtypes.bfloat16), np.zeros(4, np.float32), np.zeros(4, object)])
def test_flip_check_rejects_without_raising(got):
    assert isinstance(ch11._flip_compare(got, ch11.flip_top3_ref(4, 0)), str)


def test_the_given_launcher_must_stay_as_given():
    """ex11.topk_two_stage's launcher is given (Exercise.given): a top-k taken on the host in its
    place (torch.sort, the kernels never run) scores nothing, however right its answers; the
    launcher with other comments is still the one given."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check
    from nbhelpers.exercise_types import code_shape

    spec = next(s for s in CHAPTERS if s.chapter == 11)
    nb = SolutionNotebook(spec.solution, spec.namespace)
    on_the_host = (
        "    rows, V = x.shape\n"
        "    s = torch.sort(torch.from_numpy(np.asarray(x, dtype=np.float32)), dim=1,"
        " descending=True, stable=True)\n"
        "    return s.values[:, :k].numpy(), s.indices[:, :k].numpy()\n"
        "    n_chunks"
    )
    result = run_check(
        "ex11.topk_two_stage", nb.mutated("topk_two_stage", "    rows, V = x.shape\n    n_chunks", on_the_host)
    )
    assert not result.passed and result.points == 0 and "must stay as given" in result.error
    assert code_shape(ch11.LAUNCHER) == code_shape(
        ch11.LAUNCHER.replace("    # the rows' float32 bits", "    # the float32 bits of the rows")
    )
    assert code_shape(ch11.LAUNCHER) != code_shape(ch11.LAUNCHER.replace("V + chunk", "V"))


def test_the_launcher_refuses_host_code_and_stops_a_stray_pointer():
    """The kernels get the logits as int32 bits, in the interpreter with every load and store
    watched: a kernel that reaches numpy is refused before it runs, and one that loads far past the
    logits fails its case with a StrayPointerError instead of reading (or crashing) the process."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check

    spec = next(s for s in CHAPTERS if s.chapter == 11)
    nb = SolutionNotebook(spec.solution, spec.namespace)
    assert "xt.view(torch.int32)" in ch11.LAUNCHER and "run_watching_loads(" in ch11.LAUNCHER
    host = nb.mutated(
        "topk_two_stage",
        "    bits = code.to(tl.int64) & 0xFFFFFFFF",
        "    bits = code.to(tl.int64) & 0xFFFFFFFF\n    bits = np.asarray(bits)",
    )
    result = run_check("ex11.topk_two_stage", host)
    assert not result.passed and "topk_chunk_kernel uses np" in result.error, result.error
    far = nb.mutated(
        "topk_two_stage", "bits_ptr + row * stride_row + cols", "bits_ptr + row * stride_row * 4096 + cols"
    )
    result = run_check("ex11.topk_two_stage", far)
    assert not result.passed and "StrayPointerError" in result.error, result.error


def test_no_case_holds_the_padding_bits_and_a_load_past_v_fails():
    """Past every row the launcher puts PAD_BITS, a NaN's bits that no case holds: a load that
    reads them under a true mask read past the row, even where the kernel then drops the lanes."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check
    from nbhelpers.load_audit import PAD_BITS

    ex = ch11.EXERCISES[1]
    for seed in (0, 1111, 2**40 + 7):
        for case in cases_for(ex, seed):
            assert not (np.asarray(case.args[0], np.float32).view(np.uint32) == PAD_BITS).any()
    spec = next(s for s in CHAPTERS if s.chapter == 11)
    unmasked = SolutionNotebook(spec.solution, spec.namespace).mutated(
        "topk_two_stage",
        "code = tl.load(bits_ptr + row * stride_row + cols, mask=valid, other=0)",
        "code = tl.load(bits_ptr + row * stride_row + cols)",
    )
    result = run_check(ex, unmasked, stop_at_first_failure=True)
    assert not result.passed and "loaded past the end of a row" in result.mismatches[0], result.mismatches
