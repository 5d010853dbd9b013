"""Chapter 11 exercises: top-k over a 128k vocabulary. Listed in ``EXERCISES`` for
:mod:`nbhelpers.answer_keys`.

- ``topk_key``: the rank key of a float code, from its bits: the number of the format's codes
  whose value is smaller in torch's order (NaN above every number, all NaNs equal, -0 equal to
  +0), of the codes' unsigned dtype, for any format given as (exp_bits, man_bits, kind) of 4 to 32
  bits, kind "ieee" (inf and NaNs in the all-ones exponent), "fn" (no inf, one NaN per sign) or
  "fnuz" (no inf, no -0, -0's code the one NaN). Not the chapter's key (which keeps totalOrder's
  places and moves NaN and -0 by hand): the student works out how many codes of each kind lie
  below; most random cases are formats of 17 to 32 bits that no library decodes and no table
  holds. Reference: :func:`rank_keys_formula` on the bits, held in tests/test_exercises_ch11.py
  against a second derivation, :func:`rank_table` (every code decoded from its fields by
  :func:`decode_codes`, the numbers sorted, the ones below counted) on every format up to 17
  bits, against torch's sort (every bf16 and fp16 code, random fp32 codes), against numpy's and
  ml_dtypes' decoding (fp16, bf16, fp32, five fp8 formats) and, on wide formats, against the
  order of the decoded values. Compared exactly, on every code of six narrow formats, the special
  codes of fp32 and of 24- and 32-bit fn and fnuz formats, and random codes of 18 random formats,
  six of each kind. Keys of another dtype than the codes' fail with a message that names both.
- ``topk_two_stage``: the two kernels of a two-stage selection of the k **smallest** of each row
  in Triton (each program the candidates of a chunk of its row, then one program per row merges
  the chunks' lists), run through the launcher the notebook gives (:data:`LAUNCHER`,
  ``Exercise.given``). The chapter's kernels take the k largest: its packed key (key high, reversed
  column low, under ``tl.max``) orders the other end of the row, so the student works out an
  order for this one. The launcher hands the kernels the logits as int32 bits, as the chapter's
  kernels take them (a float comparison, whose NaN rule differs between the interpreter and a GPU,
  needs a deliberate bitcast), from a buffer whose columns past the row's end hold
  :data:`nbhelpers.load_audit.PAD_BITS`, a NaN's bits that no case holds: a load that reads them
  under a true mask fails the case even when the kernel drops the lanes (the statement allows
  only the columns below ``V``). It refuses a kernel that reaches host code
  (:func:`nbhelpers.load_audit.host_code_problems`; ``@triton.jit`` helpers pass), runs both
  kernels through :func:`nbhelpers.load_audit.run_watching_loads` (in the interpreter, every load
  and store checked against the launch's tensors: a wild pointer fails the case with a
  :class:`~nbhelpers.load_audit.StrayPointerError` instead of touching other memory; on a GPU the
  compiled kernel then runs too), and fails the answer when the merge writes outside the
  (rows, k) outputs. Reference: :func:`smallest_ref` (the course's top-k key sorted ascending,
  ties to the lowest column; NaN last), held against ``torch.topk(largest=False)``'s values and
  ``torch.sort(stable=True)``'s indices in the tests; values bit for bit (-0.0 is not +0.0),
  indices exactly.
- ``radix_cost``: predict what a radix select split over several programs costs on one row:
  passes over the row, and bytes read and written, the per-program histograms and their merge
  included. Reference: :func:`radix_cost_ref` (the row's passes and result from
  :func:`nbhelpers.topk.radix_select_cost`, the histograms counted digit by digit); compared
  exactly.
- ``flip_top3``: construct a row of float32 logits whose top-3 index *set* changes when the row
  is rounded to bf16. Many answers are right: the check judges the property
  (:func:`flip_top3_reason`); :func:`flip_top3_example` shows that every case has an answer.

Edge cases come first, then random ones from the seed. The cases of ``topk_two_stage`` are small
(rows of at most 90 columns, chunks of 8 to 32): in Triton's interpreter every step of a kernel
is a numpy call on the CPU.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..exercise_types import Case, Exercise, ExerciseKind
from ..report_text import describe, short_repr
from ..topk import radix_select_cost, topk_keys, topk_ref

UNWRITTEN = -7  # what the topk_two_stage launcher's outputs hold before the merge runs


KINDS = ("ieee", "fn", "fnuz")


class KeyFormat(NamedTuple):
    """A format of exercise 1, ``(exp_bits, man_bits, kind)``: one sign bit, ``exp_bits`` of
    exponent and ``man_bits`` of mantissa, and what its special codes mean ("ieee": the all-ones
    exponent holds +-inf (mantissa 0) and NaNs of both signs; "fn": no inf, only the all-ones
    magnitude is NaN, of both signs; "fnuz": no inf, no -0, the code of -0 the only NaN). Its codes
    sit in the low ``bits`` bits of the narrowest of uint8, uint16 and uint32 that holds them."""

    exp_bits: int
    man_bits: int
    kind: str

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def codes(self) -> np.dtype:
        return np.dtype(np.uint8 if self.bits <= 8 else np.uint16 if self.bits <= 16 else np.uint32)


#: Formats a library decodes, by the names the course uses (the oracles of the tests; the
#: exercise takes the tuples).
NAMED_FORMATS = {
    "fp32": KeyFormat(8, 23, "ieee"),
    "bf16": KeyFormat(8, 7, "ieee"),
    "fp16": KeyFormat(5, 10, "ieee"),
    "e5m2": KeyFormat(5, 2, "ieee"),
    "e4m3fn": KeyFormat(4, 3, "fn"),
    "e4m3fnuz": KeyFormat(4, 3, "fnuz"),
    "e5m2fnuz": KeyFormat(5, 2, "fnuz"),
}


def key_format(fmt) -> KeyFormat:
    """``fmt`` as a :class:`KeyFormat`, or a ValueError that says what is accepted: a tuple
    (exp_bits, man_bits, kind), 2 <= exp_bits <= 10, man_bits >= 1, at most 32 bits in all."""
    try:
        e, m, kind = fmt
        ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (e, m))
        ok = ok and kind in KINDS and 2 <= e <= 10 and m >= 1 and 1 + e + m <= 32
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"unknown format {fmt!r}: expected (exp_bits, man_bits, kind), 2 <= exp_bits <= 10, "
            f"man_bits >= 1, 1 + exp_bits + man_bits <= 32, kind one of {', '.join(KINDS)}"
        )
    return KeyFormat(int(e), int(m), str(kind))


def format_name(fmt) -> str:
    """How a message names a format: its tuple, and the course's name where it has one."""
    f = key_format(fmt)
    text = f"({f.exp_bits}, {f.man_bits}, {f.kind!r})"
    name = next((n for n, g in NAMED_FORMATS.items() if g == f), None)
    return f"{text} ({name})" if name else text


def decode_codes(codes, fmt) -> np.ndarray:
    """The values of codes of ``fmt`` as float64, from the fields (exact: 10 exponent bits and 30
    mantissa bits fit a float64). The bias is 2**(e - 1) - 1, and one more for fnuz, as ml_dtypes
    has it; a rank does not depend on it. Held against numpy and ml_dtypes in the tests."""
    f = key_format(fmt)
    b = np.asarray(codes).astype(np.int64) & ((1 << f.bits) - 1)
    e_all, m_all = (1 << f.exp_bits) - 1, (1 << f.man_bits) - 1
    exp, man, neg = (b >> f.man_bits) & e_all, b & m_all, (b >> (f.bits - 1)) == 1
    bias = (1 << (f.exp_bits - 1)) - 1 + (f.kind == "fnuz")
    sub = man * np.exp2(1 - bias - f.man_bits)
    normal = (man + (1 << f.man_bits)) * np.exp2(exp - bias - f.man_bits)
    value = np.where(exp == 0, sub, normal)
    if f.kind == "ieee":
        value = np.where(exp == e_all, np.where(man == 0, np.inf, np.nan), value)
    elif f.kind == "fn":
        value = np.where((exp == e_all) & (man == m_all), np.nan, value)
    value = np.where(neg, -value, value)
    if f.kind == "fnuz":
        value = np.where(b == 1 << (f.bits - 1), np.nan, value)
    return value


def rank_table(fmt) -> np.ndarray:
    """For a format of at most 20 bits: every code's key from the decoded values of all its codes,
    the number of codes whose value is smaller (NaN above every number, all NaNs equal, -0 equal
    to +0): the second derivation of the keys, which the tests hold :func:`rank_keys_formula`
    against."""
    f = key_format(fmt)
    if f.bits > 20:
        raise ValueError(f"{format_name(fmt)} has 2**{f.bits} codes: too many to tabulate")
    values = decode_codes(np.arange(1 << f.bits), fmt)
    nan = np.isnan(values)
    numbers = np.sort(values[~nan])
    keys = np.searchsorted(numbers, values, side="left")  # the numbers strictly below
    keys[nan] = numbers.size  # every number is below a NaN
    return keys.astype(f.codes)


def rank_keys_formula(codes, fmt) -> np.ndarray:
    """The keys from the bits alone, for any width (2**32 codes are no table): the negative
    numbers below the zeros, fewest first by magnitude; the zeros on one key; each positive number
    above both zeros; every NaN on the count of the numbers."""
    f = key_format(fmt)
    sign = 1 << (f.bits - 1)
    b = np.asarray(codes).astype(np.int64) & ((1 << f.bits) - 1)
    mag, neg = b & (sign - 1), b >= sign
    if f.kind == "fnuz":  # no -0: one zero, and the NaN at -0's code
        key = np.where(neg, sign - 1 - mag, sign - 1 + mag)
        key = np.where(b == sign, 2 * sign - 1, key)
    else:
        nan_per_sign = (1 << f.man_bits) - 1 if f.kind == "ieee" else 1
        exp_mask = (sign - 1) ^ ((1 << f.man_bits) - 1)
        nan = mag > exp_mask if f.kind == "ieee" else mag == sign - 1
        below_zero = sign - 1 - nan_per_sign  # the negative numbers
        key = np.where(neg, below_zero - mag, below_zero + 1 + mag)
        key = np.where(mag == 0, below_zero, key)
        key = np.where(nan, 2 * (sign - nan_per_sign), key)
    return key.astype(f.codes)


# ------------------------------------------------------------------ 1. the key of a float


class ExpectedKeys(tuple):
    """(keys, codes, fmt): the answer, with the codes and format it came from (to word the message);
    shown as the keys alone."""

    def __repr__(self) -> str:
        return short_repr(self[0])


def topk_key_ref(bits: np.ndarray, fmt) -> ExpectedKeys:
    """The rank key of each code (the number of the format's codes whose value is smaller, in
    torch's order), of the codes' unsigned dtype, same shape: :func:`rank_keys_formula`, held
    against :func:`rank_table` (the decoded values of every code, ranked) on formats up to 20 bits,
    and against torch's sort and ml_dtypes in tests/test_exercises_ch11.py."""
    f = key_format(fmt)
    codes = np.asarray(bits)
    return ExpectedKeys((rank_keys_formula(codes, f), codes, f))


def _kind_of(code: int, fmt) -> str:
    f = key_format(fmt)
    v = float(decode_codes(np.array([code]), f)[0])
    if np.isnan(v):
        if f.kind == "fnuz":
            return "the NaN, where the other kinds have -0"
        return "a NaN with the sign bit set" if code >> (f.bits - 1) else "a NaN"
    if v == 0:
        return "-0.0" if code else "+0.0"
    return repr(v)


def _same_keys(got, expected: ExpectedKeys) -> str | None:
    keys, codes, fmt = expected
    if got is None or isinstance(got, (str, bytes, dict)):
        return f"returned {describe(got)}, expected an array of unsigned integer keys"
    try:
        g = np.asarray(got)
    except Exception:  # a student's odd object
        return f"returned {describe(got)}, expected an array of unsigned integer keys"
    if g.shape != keys.shape:
        return f"returned an array of shape {g.shape}, expected shape {keys.shape} (one key per code)"
    if g.dtype != keys.dtype:  # the width the radix passes take their digits from, unsigned
        return (
            f"returned an array of {g.dtype}, expected {keys.dtype} (the codes' dtype, unsigned: "
            f"{format_name(fmt)} has {fmt.bits} bits)"
        )
    if g.size == 0:
        return None
    bad = g != keys
    if not bad.any():
        return None
    i = np.argwhere(bad)[0]
    where = tuple(int(j) for j in i)
    code = int(np.asarray(codes)[where]) & ((1 << fmt.bits) - 1)
    digits = -(-fmt.bits // 4)
    return (
        f"{int(bad.sum())} of {bad.size} keys wrong; first: {format_name(fmt)} code 0x{code:0{digits}X} "
        f"({_kind_of(code, fmt)}): got key {int(g[where])}, expected {int(keys[where])}"
    )


def _all_codes(fmt) -> np.ndarray:
    f = key_format(fmt)
    return np.arange(1 << f.bits, dtype=np.int64).astype(f.codes)


_FP32_SPECIALS = [
    0x00000000, 0x80000000,  # +0, -0
    0x7F800000, 0xFF800000,  # +inf, -inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000,  # NaNs
    0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,  # subnormals
    0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF,  # smallest normals, largest finite
    0x3F800000, 0xBF800000, 0x3F800001, 0xBF800001, 0x3F7FFFFF, 0xBF7FFFFF,  # around +-1
]  # fmt: skip


def specials(fmt) -> list[int]:
    """Codes worth a look, of both signs: zero, the all-ones exponent with mantissa 0, with its top
    mantissa bit, with 1 and with all ones (inf and NaNs in IEEE formats; numbers and a NaN in fn
    and fnuz ones), the smallest subnormal, the largest subnormal, the smallest normal and the
    code just below the all-ones exponent."""
    f = key_format(fmt)
    s = 1 << (f.bits - 1)
    m = (1 << f.man_bits) - 1
    e = (s - 1) ^ m
    pos = [0, e, e | (m + 1) >> 1, e | 1, e | m, 1, m, m + 1, e - 1]
    return sorted(set(pos + [c | s for c in pos]))


def _random_codes(rng: np.random.Generator, fmt) -> np.ndarray:
    """Uniform codes of the format with specials mixed in at random places (both zeros, the all-ones
    exponent with mantissa 0, 1 and all ones, of both signs, and the smallest and largest positive
    numbers always; more at random), as a 1-D or 2-D array."""
    f = key_format(fmt)
    n = int(rng.integers(500, 3000)) if f.bits > 8 else int(rng.integers(120, 400))
    codes = rng.integers(0, 1 << f.bits, size=n, dtype=np.int64)
    sp = np.array(specials(f), dtype=np.int64)
    s = 1 << (f.bits - 1)
    m = (1 << f.man_bits) - 1
    e = (s - 1) ^ m
    always = np.array([0, s, e, e | s, e | 1, e | 1 | s, e | m, e | m | s, 1, e - 1], dtype=np.int64)
    return _mixed_in(rng, codes, always, sp, 3 * sp.size, f.codes)


def _mixed_in(
    rng: np.random.Generator, codes: np.ndarray, always: np.ndarray, specials, most: int, dtype
) -> np.ndarray:
    """``codes`` (int64) with ``always`` and up to ``most`` more of ``specials`` at random places,
    as ``dtype``, 1-D or (four times in ten) 2-D."""
    extra = rng.choice(specials, size=int(rng.integers(0, most)))
    mixed = np.concatenate([always, extra])
    codes[rng.choice(codes.size, size=mixed.size, replace=False)] = mixed
    codes = codes.astype(dtype)
    if rng.random() < 0.4:
        codes = codes[: codes.size // 4 * 4].reshape(4, -1)
    return codes


def random_format(rng: np.random.Generator, kind: str, size: int) -> KeyFormat:
    """A format of ``kind`` of 17 to 32 bits (``size`` 2: no library decodes them), 16 (1) or 4 to
    8 (0); 2 to 10 exponent bits, the rest mantissa."""
    width = int(rng.integers(*[(4, 9), (16, 17), (17, 33)][size]))
    e = int(rng.integers(2, min(10, width - 2) + 1))
    return KeyFormat(e, width - 1 - e, kind)


def _key_cases(rng: np.random.Generator) -> list[Case]:
    N = NAMED_FORMATS
    fn32, fnuz32, fn24 = KeyFormat(8, 23, "fn"), KeyFormat(8, 23, "fnuz"), KeyFormat(6, 17, "fn")
    cases = [
        Case((_all_codes(N["bf16"]), N["bf16"]), label="every bf16 code"),
        Case((np.array(_FP32_SPECIALS, dtype=np.uint32), N["fp32"]), label="fp32 specials"),
        Case((np.array(specials(fn32), dtype=np.uint32), fn32), label="the specials of fp32's fields, fn"),
        Case((np.array(specials(fnuz32), dtype=np.uint32), fnuz32), label="the specials of fp32's fields, fnuz"),
        Case((np.array(specials(fn24), dtype=np.uint32).reshape(2, -1), fn24), label="a 24-bit fn format, 2-D"),
        Case((np.zeros(0, dtype=np.uint32), N["fp32"]), label="no codes"),
        Case((_all_codes(N["e5m2"]), N["e5m2"]), label="every e5m2 code"),
        Case((_all_codes(N["e4m3fn"])[::-1].copy(), N["e4m3fn"]), label="every e4m3fn code, from 0xFF down"),
        Case((_all_codes(N["e4m3fnuz"]), N["e4m3fnuz"]), label="every e4m3fnuz code"),
        Case((_all_codes((3, 2, "fn")), KeyFormat(3, 2, "fn")), label="every code of a 6-bit fn format"),
        Case((_all_codes((5, 6, "fnuz")), KeyFormat(5, 6, "fnuz")), label="every code of a 12-bit fnuz format"),
        Case((_all_codes(N["fp16"]), N["fp16"]), label="every fp16 code"),
    ]
    for i in range(18):  # six of each kind: four of 17 to 32 bits, one of 16, one of 4 to 8
        f = random_format(rng, KINDS[i % 3], [2, 2, 2, 2, 1, 0][i // 3])
        cases.append(Case((_random_codes(rng, f), f)))
    return cases


# ------------------------------------------------------------------ 2. the two-stage kernel


def smallest_ref(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(values (rows, k) float32, indices (rows, k) int64): the k smallest of each row of x
    (rows, V) float32, smallest first, in torch's order (NaN above every number, all NaNs equal,
    -0.0 equal to +0.0), equal values lowest column first; each value the element itself, bit for
    bit. From the course's top-k key (:func:`nbhelpers.topk.topk_keys`) sorted ascending; held
    against ``torch.sort(stable=True)`` and ``torch.topk(largest=False)`` in the tests."""
    x = np.ascontiguousarray(np.array(x, dtype=np.float32))
    rows, V = x.shape
    keys = topk_keys(x.view(np.uint32), "fp32").astype(np.int64).reshape(rows, V)
    pos = np.arange(V)
    idx = np.stack([np.lexsort((pos, keys[r]))[:k] for r in range(rows)]).astype(np.int64)
    return np.take_along_axis(x, idx, axis=1), idx


def topk_two_stage_ref(x: np.ndarray, k: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """What the launcher must return: :func:`smallest_ref`. ``chunk`` is the kernel's business: it
    does not change the answer."""
    return smallest_ref(x, int(k))


def _same_topk(got, expected) -> str | None:
    ev, ei = expected
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"returned {describe(got)}, expected a tuple (values, indices)"
    try:
        gv, gi = np.asarray(got[0]), np.asarray(got[1])
    except Exception:  # a student's odd object
        return "returned something that is not two arrays (values, indices)"
    if gv.shape != ev.shape or gi.shape != ei.shape:
        return f"returned values of shape {gv.shape} and indices of shape {gi.shape}, expected {ev.shape} each"
    if gv.dtype.kind != "f" or gi.dtype.kind not in "iu":
        return f"returned values of {gv.dtype} and indices of {gi.dtype}, expected floats and integers"
    with np.errstate(invalid="ignore"):  # a signalling NaN cast to float64
        g64, e64 = gv.astype(np.float64), ev.astype(np.float64)
        same_v = ((g64 == e64) & (np.signbit(g64) == np.signbit(e64))) | (np.isnan(g64) & np.isnan(e64))
    same_i = gi.astype(np.int64) == ei  # a uint64 index past 2**63 turns negative: wrong either way
    bad = ~(same_v & same_i)
    rows = np.nonzero(bad.any(axis=1))[0]
    if not rows.size:
        return None
    r = int(rows[0])
    i = int(np.argmax(bad[r]))
    g_col, e_col = int(gi[r, i]), int(ei[r, i])
    got_text = "never written" if g_col == UNWRITTEN else f"column {g_col} ({float(g64[r, i])!r})"
    text = (
        f"{rows.size} of {ev.shape[0]} rows wrong; row {r}, place {i}: got {got_text}, "
        f"expected column {e_col} ({float(e64[r, i])!r})"
    )
    if g_col == e_col:
        text += ": the value must be the element itself, bit for bit"
    elif g64[r, i] == e64[r, i] or (np.isnan(g64[r, i]) and np.isnan(e64[r, i])):
        text += ": equal values go lowest column first (all NaNs are equal, and -0.0 equals +0.0)"
    return text


# NaNs of both signs and two payloads: torch counts every one of them as the largest value. Quiet
# ones only: casting a signalling NaN (0x7F800001) to float64 raises numpy's "invalid" warning
_NANS = np.array([0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFC00001], np.uint32).view(np.float32)


def _signed_zeros(rng: np.random.Generator, x: np.ndarray) -> None:
    """Give every zero of x a random sign, in place."""
    zero = x == 0
    x[zero] = rng.choice(np.array([-0.0, 0.0], np.float32), size=int(zero.sum()))


def _logits(rng: np.random.Generator, rows: int, V: int) -> np.ndarray:
    """A (rows, V) float32 array of one of five kinds, most with ties: small integers, normal values
    on a grid of 1/4, plain normal values, negative log-probabilities (all positive, on a grid of
    1/8), and those over a few zeros; zeros of both signs; NaNs of both signs, +-inf and -0.0 at a
    few places in most."""
    kind = rng.integers(5)
    if kind == 0:
        x = rng.integers(-2, 3, size=(rows, V)).astype(np.float32)
    elif kind == 1:
        x = (np.round(rng.standard_normal((rows, V)) * 4) / 4).astype(np.float32)
    elif kind == 2:
        x = rng.standard_normal((rows, V)).astype(np.float32)
    else:
        z = 3 * rng.standard_normal((rows, V))
        logp = z - z.max(axis=1, keepdims=True) - np.log(np.exp(z - z.max(axis=1, keepdims=True)).sum(1, keepdims=True))
        x = np.maximum(np.round(-logp * 8) / 8, 0.125).astype(np.float32)
        if kind == 4:  # a few zeros under the row
            for r in range(rows):
                x[r, rng.choice(V, size=min(V, int(rng.integers(1, 5))), replace=False)] = 0.0
    _signed_zeros(rng, x)
    if rng.random() < 0.6:
        n = int(rng.integers(1, max(2, V // 6) + 1))
        specials = np.concatenate([_NANS, np.array([np.inf, -np.inf, -0.0, 0.0], np.float32)])
        flat = x.reshape(-1)
        at = rng.choice(flat.size, size=min(n * rows, flat.size), replace=False)
        flat[at] = rng.choice(specials, size=at.size)
    return x


def _topk_cases(rng: np.random.Generator) -> list[Case]:
    fixed = np.random.default_rng(1111)
    f32 = np.float32
    ties = np.array([[3, 1, 2, 2, 0, 2, 5, 2, 2, 1, 2, 2, 4, 2, 2, 2, 2, 2, 2, 2, 7, 2, 2, 2, 2, 2, 2]], f32)
    nan, neg_nan = _NANS[0], _NANS[1]
    specials = np.array(
        [[1.0, neg_nan, -np.inf, 2.0, np.inf, -0.0, 0.0, nan, -1.0, 0.0, -0.0, np.inf, 3.0, neg_nan, -np.inf]], f32
    )
    one_chunk = fixed.standard_normal((2, 45)).astype(f32)
    one_chunk[0, 40:45] -= 10  # the whole bottom 5 of row 0 in its last, ragged chunk (columns 32 to 44)
    one_chunk[1, 16:21] -= 10  # and of row 1 in its second chunk
    zeros = np.array([[-1.0, -0.0, 0.0, -0.0, -2.0, 0.0, -0.0, -1.0, 0.0, -3.0, -0.0]], f32)
    cases = [
        Case((fixed.standard_normal((1, 37)).astype(f32), 5, 16), label="V = 37, chunks of 16: a ragged last chunk"),
        Case((fixed.standard_normal((2, 40)).astype(f32), 20, 8), label="k = 20 > a chunk of 8"),
        Case((fixed.standard_normal((3, 29)).astype(f32), 1, 8), label="k = 1, three rows"),
        Case((fixed.integers(-3, 4, (2, 21)).astype(f32), 21, 8), label="k = V = 21, with ties"),
        Case((ties, 6, 8), label="a tie of 19 equal values at the k-th, across all four chunks"),
        Case((specials, 14, 8), label="NaNs of both signs, +-inf, +-0, k past the 12 numbers: NaNs last, by index"),
        Case((zeros, 6, 8), label="-0.0 and +0.0 tie: lowest index first, each value as it is"),
        Case((one_chunk, 5, 16), label="the whole bottom 5 in one chunk"),
        Case((np.full((1, 19), -np.inf, f32), 19, 8), label="a row of -inf, k = V"),
        Case((np.full((2, 12), np.nan, f32), 5, 8), label="rows of NaN only: the lowest columns"),
        Case((fixed.standard_normal((1, 5)).astype(f32), 3, 32), label="V = 5 < one chunk of 32"),
        Case((fixed.standard_normal((2, 64)).astype(f32), 7, 16), label="V = 64: whole chunks only"),
    ]
    for i in range(20):
        rows = int(rng.choice([1, 1, 2, 2, 3]))
        chunk = int(rng.choice([8, 16, 32]))
        V = int(rng.integers(1, 91)) if rng.random() < 0.8 else int(rng.integers(1, 4)) * chunk
        mode = i % 5
        if mode == 0:
            k = 1
        elif mode == 1:  # k = V, on a short row
            V = int(rng.integers(1, 25))
            k = V
        elif mode == 2:  # more than a chunk holds
            chunk = int(rng.choice([8, 16]))
            V = int(rng.integers(chunk + 1, 3 * chunk))
            k = int(rng.integers(chunk + 1, V + 1))
        else:
            k = int(rng.integers(1, min(V, 12) + 1))
        x = _logits(rng, rows, V)
        if mode == 4 and V >= 2:  # +0.0 before -0.0 at the bottom of row 0: equal, so in column order
            with np.errstate(invalid="ignore"):
                x[0] = np.abs(x[0])
            a, b = np.sort(rng.choice(V, size=2, replace=False))
            x[0, a], x[0, b] = 0.0, -0.0
            k = max(k, 2)
        elif rng.random() < 0.3 and V > k:  # the bottom k of a row in one chunk
            c = int(rng.integers(0, -(-V // chunk)))
            cols = np.arange(c * chunk, min(V, (c + 1) * chunk))
            take = rng.choice(cols, size=min(k, cols.size), replace=False)
            with np.errstate(invalid="ignore"):  # a signalling NaN stays NaN
                x[0, take] = -np.abs(x[0, take]) - 100
        if mode >= 3 and rng.random() < 0.7:  # a tie straddling the k-th place of row 0
            keys = np.sort(topk_keys(x[0].view(np.uint32), "fp32").astype(np.int64))
            straddle = np.flatnonzero(keys[:-1] == keys[1:]) + 1  # k with the k-th equal to the next
            if straddle.size:
                k = int(rng.choice(straddle))
        # about 300 steps of a k-step loop in all of the case's programs: a fraction of a second
        # in the interpreter
        k = max(1, min(k, 300 // (rows * (-(-V // chunk) + 1))))
        cases.append(Case((x, k, chunk)))
    return cases


# ------------------------------------------------------------------ 3. radix select, predicted


class RadixCost(NamedTuple):
    passes: int
    bytes_read: int
    bytes_written: int


class ExpectedCost(tuple):
    """(cost, hints): the answer, and the answers of the plausible mistakes with what each forgot
    (to word the message); shown as the answer alone."""

    def __repr__(self) -> str:
        return repr(tuple(self[0]))


def _digit_widths(key_bits: int, digit_bits: int) -> list[int]:
    """The widths of a key's digits, most significant first: the last may be narrower, and a digit
    wider than the key takes it whole."""
    widths = [digit_bits] * (key_bits // digit_bits)
    if key_bits % digit_bits:
        widths.append(key_bits % digit_bits)
    return widths


def _histograms(widths: list[int], blocks: int, counter_bytes: int, digit_bits: int | None = None) -> int:
    """Bytes of the histograms the blocks write (and the merges read) over the histogram passes;
    ``digit_bits`` given: every histogram that wide (a mistake)."""
    bins = sum(2 ** (digit_bits if digit_bits is not None else w) for w in widths)
    return blocks * counter_bytes * bins


def _cost_shortcuts(n, k, key_bits, digit_bits, value_bytes, index_bytes, blocks, counter_bytes) -> dict[tuple, str]:
    """Answers that plausible mistakes give, each with what it forgot (two mistakes may give the
    same numbers)."""
    widths = _digit_widths(key_bits, digit_bits)
    p = len(widths) + 1
    row = p * n * value_bytes
    result = k * (value_bytes + index_bytes)
    hist = _histograms(widths, blocks, counter_bytes) if blocks > 1 else 0
    on_chip = _histograms(widths, blocks, counter_bytes)  # even for one block
    full = _histograms(widths, blocks, counter_bytes, digit_bits) if blocks > 1 else 0
    counters = _histograms(widths, blocks, 1) if blocks > 1 else 0
    floor_w = [digit_bits] * (key_bits // digit_bits)
    floor_h = _histograms(floor_w, blocks, counter_bytes) if blocks > 1 else 0
    fp = len(floor_w) + 1
    shortcuts = [
        ((p, row + full, full + result), "a narrower last digit has 2**width counters, not 2**digit_bits"),
        ((p, row, hist + result), "the merge reads the histograms the blocks wrote"),
        ((p, row + on_chip, on_chip + result), "one block keeps its histogram on chip: nothing to merge"),
        ((p, row + counters, counters + result), "a counter is counter_bytes bytes"),
        ((fp, fp * n * value_bytes + floor_h, floor_h + result), "a narrower last digit takes a pass too"),
        ((p - 1, (p - 1) * n * value_bytes + hist, hist + result), "the filtering pass reads the row too"),
        ((p, p * n * key_bits // 8 + hist, hist + result), "each pass reads the values, not the keys"),
        ((p, row + hist, hist + k * value_bytes), "the k indices are written too"),
    ]
    out: dict[tuple, str] = {}
    for t, why in shortcuts:
        out[t] = f"{out[t]}; or {why}" if t in out else why
    return out


def radix_cost_ref(
    n: int,
    k: int,
    key_bits: int,
    digit_bits: int,
    value_bytes: int,
    index_bytes: int,
    blocks: int,
    counter_bytes: int,
):
    """(passes over the row, bytes read, bytes written) of a radix select of the top k of a row of n
    values split over ``blocks`` programs: the row's passes and the result as
    :func:`nbhelpers.topk.radix_select_cost` counts them, and for each histogram pass every
    block's histogram (2**width counters of ``counter_bytes``) written and read back by the merge,
    unless one block keeps it on chip; with the plausible mistakes' answers."""
    c = radix_select_cost(n, k, key_bits, digit_bits, value_bytes, index_bytes)
    widths = _digit_widths(key_bits, digit_bits)
    assert len(widths) + 1 == c.passes  # the two counts of the passes agree
    hist = _histograms(widths, blocks, counter_bytes) if blocks > 1 else 0
    answer = RadixCost(c.passes, c.bytes_read + hist, c.bytes_written + hist)
    hints = _cost_shortcuts(n, k, key_bits, digit_bits, value_bytes, index_bytes, blocks, counter_bytes)
    hints.pop(tuple(answer), None)
    return ExpectedCost((answer, hints))


def _same_cost(got, expected: ExpectedCost) -> str | None:
    answer, hints = expected
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"returned {describe(got)}, expected a tuple (passes, bytes_read, bytes_written)"
    for name, g, e in zip(RadixCost._fields, got, answer):
        if isinstance(g, bool) or not isinstance(g, (int, np.integer, float, np.floating)):
            return f"{name}: returned {describe(g)}, expected an int"
        if g != e:
            try:
                key = tuple(int(v) for v in got)
            except (TypeError, ValueError, OverflowError):
                key = None
            hint = hints.get(key)
            return f"{name}: returned {g!r}, expected {e}" + (f" ({hint})" if hint else "")
    return None


def _cost_cases(rng: np.random.Generator) -> list[Case]:
    V = 128 * 1024
    cases = [
        Case((V, 50, 16, 8, 2, 8, 1, 4), label="bf16 logits, 8-bit digits, one block"),
        Case((V, 50, 16, 8, 2, 8, 132, 4), label="bf16 logits, 8-bit digits, one block per SM of an H200"),
        Case((V, 50, 32, 11, 4, 8, 64, 4), label="fp32 logits, 11-bit digits: 11 + 11 + 10, 64 blocks"),
        Case((V, 50, 32, 11, 4, 8, 1, 4), label="fp32 logits, 11-bit digits, one block"),
        Case((V, 1, 64, 8, 4, 8, 16, 8), label="64-bit packed keys (key, index) of fp32 logits, 8-byte counters"),
        Case((V, 256, 32, 8, 2, 4, 2, 2), label="bf16 logits widened to 32-bit keys, int32 indices, 2-byte counters"),
        Case((1, 1, 16, 16, 2, 4, 1, 4), label="one value, one digit"),
        Case((1000, 1000, 16, 32, 2, 8, 8, 4), label="a digit wider than the key: one histogram of 2**16"),
        Case((50257, 40, 16, 5, 2, 8, 24, 4), label="GPT-2's vocabulary, 5-bit digits: 5 + 5 + 5 + 1"),
    ]
    for _ in range(24):
        key_bits = int(rng.choice([16, 32, 64, int(rng.integers(8, 65))]))
        digit_bits = int(rng.integers(1, 17))
        n = int(rng.choice([int(rng.integers(1, 1000)), int(rng.integers(1000, 300_000))]))
        k = int(rng.integers(1, min(n, 2048) + 1))
        blocks = 1 if rng.random() < 0.3 else int(rng.integers(2, min(n, 1024) + 2))
        n = max(n, blocks)  # every block owns a part of the row
        value_bytes, index_bytes = int(rng.choice([1, 2, 4, 8])), int(rng.choice([4, 8]))
        counter_bytes = int(rng.choice([2, 4, 8]))
        cases.append(Case((n, k, key_bits, digit_bits, value_bytes, index_bytes, blocks, counter_bytes)))
    return cases


# ------------------------------------------------------------------ 4. a top-3 set that bf16 changes


def flip_top3_example(n: int, seed: int) -> np.ndarray:
    """n float32 logits whose top-3 set changes in bf16: a bulk far below, then 2, 3 and 1 + 2**-10
    on top, and 1.0 at a lower index than 1 + 2**-10, which rounds to it in bf16 and loses the tie."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-8.0, -1.0, size=n)
    a, b, c, d = np.sort(rng.choice(n, size=4, replace=False))
    x[a], x[b] = 1.0, 1.0 + 2.0**-10
    x[c], x[d] = 2.0, 3.0
    return x.astype(np.float32)


class FlipTarget:
    """What :func:`flip_top3_ref` expects: n float32 logits with the property, and one example
    that has it. The check reads n from it and judges the property; the example is not compared
    with anything (many answers are right): it shows that the case is solvable."""

    __slots__ = ("n", "example")

    def __init__(self, n: int, example: np.ndarray) -> None:
        self.n, self.example = n, example

    def __repr__(self) -> str:
        return f"{self.n} finite float32 logits whose top-3 index set changes in bf16"


def flip_top3_ref(n: int, seed: int) -> FlipTarget:
    return FlipTarget(int(n), flip_top3_example(n, seed))


def _top3(x) -> list[int]:
    return [int(i) for i in topk_ref(x, 3)[1]]


def flip_top3_reason(got, n: int) -> str | None:
    """None if ``got`` is n finite float32 logits whose top 3 are strictly above the 4th and
    whose top-3 index set (ties to the lowest index) changes when the row is rounded to bf16;
    else why not. ``got`` is never modified (the judging works on a copy)."""
    import torch

    if not isinstance(got, np.ndarray):
        return f"returned {describe(got)}, expected a numpy array of float32"
    if got.dtype != np.float32:
        return f"returned an array of {got.dtype}, expected float32 (logits as the model gives them)"
    if got.shape != (n,):
        return f"returned an array of shape {got.shape}, expected ({n},)"
    x = np.array(got, dtype=np.float32, copy=True)
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        return f"x[{bad[0]}] = {float(x[bad[0]])!r} is not finite"
    x32 = torch.from_numpy(x)
    xb = x32.to(torch.bfloat16)
    over = np.flatnonzero(~torch.isfinite(xb).numpy())
    if over.size:
        i = int(over[0])
        return f"x[{i}] = {float(x[i])!r} overflows to {float(xb[i])} in bf16: the change must come from rounding"
    order = np.argsort(-x, kind="stable")
    third, fourth = x[order[2]], x[order[3]]
    if third == fourth:
        tied = np.flatnonzero(x == third)[:4].tolist()
        return (
            f"the 3rd and 4th largest are equal in float32 ({float(third)!r} at {tied}): the float32 top 3 "
            "must be strictly above the rest"
        )
    hi, lo = _top3(x32), _top3(xb)
    if set(hi) == set(lo):
        how = f" (only its order changes: {hi} -> {lo})" if hi != lo else ""
        return f"the top-3 set {sorted(hi)} is the same in bf16{how}"
    return None


def _flip_compare(got, expected: FlipTarget) -> str | None:
    try:
        return flip_top3_reason(got, expected.n)
    except Exception as e:  # a hostile object: a failed case, never a crash
        return f"could not judge the row ({type(e).__name__})"


def _flip_cases(rng: np.random.Generator) -> list[Case]:
    cases = [
        Case((4, 0), label="n = 4: the fewest that can work"),
        Case((5, 1), label="n = 5"),
        Case((7, 2)),
        Case((128, 3), label="n = 128"),
        Case((256, 4), label="n = 256"),
    ]
    for _ in range(8):
        n = int(rng.choice([int(rng.integers(4, 12)), int(rng.integers(12, 4096))]))
        cases.append(Case((n, int(rng.integers(2**31)))))
    return cases


#: What an answer may not call (Exercise.forbidden): the statement: no topk or kernels.
#: The launcher of ex11.topk_two_stage, given whole by the statement (Exercise.given): an answer that
#: changes it (a top-k taken on the host, the kernels left out) scores nothing. It imports what it
#: uses inside its body, so that no module-level name of the notebook stands in for them.
LAUNCHER = '''\
def topk_two_stage(x: np.ndarray, k: int, chunk: int):
    """(values (rows, k) float32, indices (rows, k) int64): the k smallest
    of each row of x (rows, V) float32 by topk_chunk_kernel over chunks
    of `chunk` columns, then topk_merge_kernel. Given: do not change it."""
    import numpy as np
    import torch
    import triton

    from nbhelpers.load_audit import (
        PAD_BITS,
        host_code_problems,
        run_watching_loads,
    )

    for kernel in (topk_chunk_kernel, topk_merge_kernel):
        problems = host_code_problems(kernel)
        if problems:
            raise TypeError("; ".join(problems))
    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    rows, V = x.shape
    n_chunks = triton.cdiv(V, chunk)
    K_PAD = triton.next_power_of_2(k)
    # the rows' float32 bits, as int32; past the end of every row
    # the bits of a NaN (PAD_BITS) that no row holds: the watch
    # counts every load of them under a true mask
    xt = torch.full((rows + 1, V + chunk), float("nan"), device=DEVICE)
    x_bits = xt.view(torch.int32)
    x_bits.fill_(PAD_BITS)
    xt[:rows, :V] = torch.from_numpy(np.asarray(x, dtype=np.float32)).to(
        DEVICE
    )
    part = torch.full(
        (rows, n_chunks, K_PAD), -1, dtype=torch.int64, device=DEVICE
    )
    # one row of room on each side of the outputs:
    # a write outside (rows, k) lands there
    vals = torch.full((rows + 2, k), -7, dtype=torch.int32, device=DEVICE)
    idx = torch.full((rows + 2, k), -7, dtype=torch.int64, device=DEVICE)
    # run in Triton's interpreter with every load and store checked
    # against the tensors above (on a GPU, then compiled)
    chunk_reads = run_watching_loads(
        topk_chunk_kernel,
        (rows, n_chunks),
        x_bits,
        part,
        V,
        k,
        x_bits.stride(0),
        n_chunks,
        CHUNK=chunk,
        K_PAD=K_PAD,
    )
    merge_reads = run_watching_loads(
        topk_merge_kernel,
        (rows,),
        x_bits,
        part,
        vals[1:],
        idx[1:],
        V,
        k,
        x_bits.stride(0),
        n_chunks,
        K_PAD=K_PAD,
        NC_PAD=triton.next_power_of_2(n_chunks),
    )
    past = chunk_reads.pad_reads + merge_reads.pad_reads
    if past:
        raise IndexError(
            f"{past} elements loaded past the end of a row (where a mask "
            "was true): read only the columns below V"
        )
    outside = torch.cat([idx[0], idx[-1]]) != -7
    if outside.any() or (torch.cat([vals[0], vals[-1]]) != -7).any():
        raise IndexError("the merge wrote outside the (rows, k) outputs")
    out = vals[1:-1].cpu().view(torch.float32)
    return out.numpy(), idx[1:-1].cpu().numpy()
'''

FORBIDDEN = ("nbhelpers.answer_keys", "nbhelpers.topk", "nbhelpers.kernels")
#: The course's machinery under every interpreted launch (a cache of the interpreter's work).
MACHINERY = ("nbhelpers.kernels.interpreter_cache",)

EXERCISES = [
    Exercise(
        "ex11.topk_key",
        "The rank of a float code",
        4,
        topk_key_ref,
        _key_cases,
        compare=_same_keys,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex11.topk_two_stage",
        "Top-k in two stages, in Triton",
        6,
        topk_two_stage_ref,
        _topk_cases,
        compare=_same_topk,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        given=LAUNCHER,
        kind=ExerciseKind.IMPLEMENT,
    ),
    Exercise(
        "ex11.radix_cost",
        "Predict the traffic of a radix select over blocks",
        3,
        radix_cost_ref,
        _cost_cases,
        compare=_same_cost,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex11.flip_top3",
        "A top-3 set that bf16 changes",
        4,
        flip_top3_ref,
        _flip_cases,
        compare=_flip_compare,
        forbidden=FORBIDDEN,
        allowed=MACHINERY,
        kind=ExerciseKind.CONSTRUCT,
    ),
]
