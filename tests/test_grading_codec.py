"""The value codec (nbhelpers.grading.in_kernel: encode/decode) and the grader's stand-ins for
values it cannot read (nbhelpers.grading.judging): exact round trips, nbhelpers' own objects,
students' objects that never equal anything, and garbage that never raises."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest

from nbhelpers.checks import same_value
from nbhelpers.grading.in_kernel import _BY_EXACT_TYPE, _BY_KIND, _DECODERS, decode, encode, import_class
from nbhelpers.grading.judging import Opaque, decode_result, stand_in


def roundtrip(v, strict=True):
    return decode(json.loads(json.dumps(encode(v, strict=strict), allow_nan=False)), stand_in, import_class)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -3,
        2**63,
        -(2**90) + 1,
        1.5,
        -0.0,
        0.0,
        math.nan,
        math.inf,
        -math.inf,
        5e-324,
        1 + 2j,
        complex(-0.0, math.nan),
        "text",
        "",
        b"\x00\xff",
        (1, 2.5),
        [1, [2, (3,)]],
        {"a": 1, (1, 2): [3]},
        {1, 2},
        frozenset({3}),
        np.float32(-0.0),
        np.int8(-5),
        np.bool_(True),
        np.uint64(2**64 - 1),
        np.array([1.0, -0.0, np.nan, np.inf]),
        np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2],
        np.zeros((0, 3)),
        np.array(2.5),
        np.array([1 + 2j]),
        np.array([True, False]),
        np.array([1.5, -0.0], dtype=ml_dtypes.bfloat16),
        ml_dtypes.float8_e4m3fn(448),
        np.array([0x7F], np.uint8).view(ml_dtypes.float8_e5m2),
        np.array(["a", "bc"]),
        np.array([1, "x", None], dtype=object),
    ],
    ids=repr,
)
def test_codec_round_trips_exactly(value):
    back = roundtrip(value)
    assert type(back) is type(value) or isinstance(value, tuple)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape
    if isinstance(value, np.generic):
        assert back.dtype == value.dtype
    if isinstance(value, (dict, set, frozenset, bytes, str)) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "OU"
    ):
        assert back == value if not isinstance(value, np.ndarray) else list(back) == list(value)
    else:
        assert same_value(back, value) is None, (back, value)


def test_codec_special_objects():
    from nbhelpers.formats import FORMATS, fields
    from nbhelpers.rounding import Rounding

    rng = np.random.default_rng(7)
    rng.random(3)
    back = roundtrip(rng)
    assert back.random() == rng.random()  # same state: the student draws the same numbers
    assert roundtrip(FORMATS["e4m3fn"]) == FORMATS["e4m3fn"]
    assert roundtrip(Rounding.STOCHASTIC) is Rounding.STOCHASTIC
    f = fields(np.array([0x3FC0], np.uint16), "bf16")
    assert same_value(roundtrip(f), f) is None  # a NamedTuple arrives as a tuple, compares equal


def test_codec_student_objects_never_equal_anything():
    class Sneaky:
        def __eq__(self, other):
            return True

        def __repr__(self):
            return "<always equal>"

    class Broken:
        def __float__(self):
            raise RuntimeError("no")

        def __repr__(self):
            raise RuntimeError("no repr either")

    with pytest.raises(ValueError):
        encode(Sneaky(), strict=True)  # inputs must be data
    for obj in (Sneaky(), Broken(), object(), lambda x: x, iter([1])):
        back = roundtrip(obj, strict=False)
        assert isinstance(back, Opaque)
        for expected in (1.0, "x", (1, 2), np.zeros(2), None):
            assert same_value(back, expected) is not None
    assert type(roundtrip(Sneaky(), strict=False)).__name__ == "Sneaky"

    class Half:  # a float-like (e.g. a 0-d tensor): compared by its value, as checks.same_value does
        def __float__(self):
            return 0.5

    assert roundtrip(Half(), strict=False) == 0.5
    torch = pytest.importorskip("torch")
    t = roundtrip(torch.tensor([1.5, -0.0]), strict=False)
    assert isinstance(t, np.ndarray) and same_value(t, np.array([1.5, -0.0])) is None


@pytest.mark.parametrize(
    "garbage",
    [
        {"$nd": ["<f8", [3], "AAAA"]},
        {"$nd": ["|O", [1], ""]},
        {"$nd": ["[('a','<f8')]", [1], ""]},
        {"$nd": ["<f8", [-1], ""]},
        {"$np": ["<f8", "!!"]},
        {"$float": "1e5"},
        {"$int": "12"},
        {"$enum": ["os", "path", "sep"]},
        {"$dc": ["nbhelpers.formats", "FloatFormat", {"exp_bits": "x"}]},
        {"$enum": ["nbhelpers.formats", "__builtins__", "x"]},
        {"$rng": ["Evil", {}]},
        {"$what": 1},
        {"a": 1, "b": 2},
        {"$tuple": 5},
        {"$complex": ["a", 1]},
        {"$opaque": [1, 2]},
        [[[[[]]]]] * 3,
        json.loads("[" * 900 + "]" * 900),
    ],
)
def test_decoding_garbage_gives_a_stand_in_never_raises(garbage):
    v = decode_result(garbage)
    if isinstance(v, Opaque):
        assert same_value(v, 1.0) is not None
    else:  # nested empty lists are a valid (wrong) answer
        assert isinstance(v, list)


@pytest.mark.parametrize(
    "value, wire",
    [
        (-0.0, {"$float": "-0.0"}),
        (math.nan, {"$float": "nan"}),
        (-math.inf, {"$float": "-inf"}),
        (2**63, {"$int": "0x8000000000000000"}),
        (-(2**64), {"$int": "-0x10000000000000000"}),
        ((1, [2.5]), {"$tuple": [1, [2.5]]}),
        ({"a": {1}}, {"$dict": [["a", {"$set": [1]}]]}),
        (frozenset(), {"$frozenset": []}),
        (b"\x00\xff", {"$bytes": "AP8="}),
        (1 + 2j, {"$complex": [1.0, 2.0]}),
        (np.float32(1.0), {"$np": ["<f4", "AACAPw=="]}),
        (np.array([1, 2], np.int8), {"$nd": ["|i1", [2], "AQI="]}),
        (np.array([1.0, -2.0], ml_dtypes.bfloat16), {"$nd": ["bfloat16", [2], "gD8AwA=="]}),
        (ml_dtypes.float8_e4m3fn(448), {"$np": ["float8_e4m3fn", "fg=="]}),
        (np.array(["ab"]), {"$nd_str": ["<U2", [1], ["ab"]]}),
        (np.array([None, 1.5], object), {"$nd_obj": [[2], [None, 1.5]]}),
        ("x" * 100_001, {"$opaque": ["str", "<str: a string of length 100001>"]}),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_wire_format_is_fixed(value, wire):
    """The tags and their layout, as the grader and kernels of any version exchange them."""
    assert json.loads(json.dumps(encode(value), allow_nan=False)) == wire


def test_codec_tables():
    """Encoding and decoding are tables of small functions: every tag the encoder writes has a
    decoder, and the exact built-in types come before the isinstance kinds."""
    assert set(_DECODERS) == {
        "$float",
        "$int",
        "$complex",
        "$tuple",
        "$dict",
        "$set",
        "$frozenset",
        "$bytes",
        "$np",
        "$nd",
        "$nd_str",
        "$nd_obj",
        "$rng",
        "$enum",
        "$dc",
        "$opaque",
    }
    assert [t for t, _ in _BY_EXACT_TYPE] == [type(None), bool, int, float, str, complex]
    kinds = [k for k, _ in _BY_KIND]
    assert kinds.index(np.ndarray) < kinds.index(np.generic) < kinds.index(float)  # np.float64 is a float
    from nbhelpers.rounding import Rounding

    enc = encode(Rounding.STOCHASTIC, strict=True)
    assert enc == {"$enum": [Rounding.__module__, "Rounding", "STOCHASTIC"]}
    with pytest.raises(ValueError, match="cannot send a str as data"):
        encode("x" * 100_001, strict=True)
