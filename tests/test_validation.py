"""Tests of nbhelpers.validation, the argument checks every module shares: what each accepts,
what it refuses, and that the message names the argument and what is accepted."""

import enum
import re

import ml_dtypes
import numpy as np
import pytest

from nbhelpers.validation import (
    NotAnIntError,
    enum_member,
    group_m,
    int_in_range,
    is_int,
    nonnegative_int,
    positive_int,
    positive_number,
    power_of_two,
    real_float64,
    stochastic_rng,
    tile_sizes,
)


class Colour(enum.Enum):
    RED = "red"
    DARK_BLUE = "dark_blue"


class Other(enum.Enum):
    RED = "red"


def test_enum_member_accepts_members_and_their_strings():
    assert enum_member(Colour, Colour.RED, "colour") is Colour.RED
    assert enum_member(Colour, "red", "colour") is Colour.RED
    assert enum_member(Colour, "  Dark_Blue ", "colour") is Colour.DARK_BLUE  # case and spaces ignored


@pytest.mark.parametrize("bad", ["green", "RED!", "", 3, None, Other.RED, ["red"]])
def test_enum_member_refusals_name_the_argument_and_list_the_choices(bad):
    with pytest.raises(ValueError) as err:
        enum_member(Colour, bad, "colour")
    msg = str(err.value)
    assert msg.startswith(f"unknown colour {bad!r}")
    assert "'red', 'dark_blue'" in msg and "Colour member" in msg


@pytest.mark.parametrize(
    "fn,ok,refused",
    [
        (positive_int, [1, 7, np.int64(3), np.uint8(200)], [0, -1, 1.0, 2.5, True, np.bool_(True), "3", None]),
        (nonnegative_int, [0, 1, np.int32(0), np.int64(9)], [-1, 0.0, False, np.bool_(False), "0", None]),
    ],
)
def test_integer_checks(fn, ok, refused):
    for v in ok:
        got = fn("n", v)
        assert got == v and type(got) is int
    for v in refused:
        with pytest.raises(ValueError, match=r"^n must be a "):
            fn("n", v)


def test_integer_messages_say_what_is_accepted():
    with pytest.raises(ValueError, match=r"block must be a positive int, got 0"):
        positive_int("block", 0)
    with pytest.raises(ValueError, match=r"seed must be a non-negative int, got -2"):
        nonnegative_int("seed", -2)


def test_integer_messages_carry_what_the_number_means():
    with pytest.raises(ValueError, match=r"^stride must be a positive int \(elements between two reads\), got 0$"):
        positive_int("stride", 0, "elements between two reads")
    with pytest.raises(ValueError, match=r"^margin must be a non-negative int \(a binade count\), got -1$"):
        nonnegative_int("margin", -1, "a binade count")


def test_is_int_takes_ints_and_numpy_integers_never_bools():
    for v in [0, -3, 2**70, np.int8(-1), np.uint64(7)]:
        assert is_int(v)
    for v in [True, False, np.bool_(True), 1.0, np.float32(2), "1", None, np.array([1]), [1]]:
        assert not is_int(v)


def test_int_in_range_against_the_range_rule():
    """Every int from -3 to 12 against 2 <= v <= 9, and against 2 <= v with no upper bound."""
    for v in range(-3, 13):
        if 2 <= v <= 9:
            got = int_in_range("num_warps", np.int64(v), 2, 9)
            assert got == v and type(got) is int
        else:
            with pytest.raises(ValueError, match=rf"^num_warps must be an int from 2 to 9, got {v}$") as err:
                int_in_range("num_warps", v, 2, 9)
            assert not isinstance(err.value, TypeError)  # the right type, the wrong value
        if v >= 2:
            assert int_in_range("n", v, 2) == v
        else:
            with pytest.raises(ValueError, match=rf"^n must be an int >= 2 \(a count\), got {v}$"):
                int_in_range("n", v, 2, meaning="a count")


@pytest.mark.parametrize(
    "check",
    [
        lambda v: positive_int("n", v),
        lambda v: nonnegative_int("n", v),
        lambda v: int_in_range("n", v, 0, 9),
        lambda v: power_of_two("n", v, 1, 8),
    ],
)
@pytest.mark.parametrize("bad", [True, np.bool_(False), 2.0, np.float64(4.0), "2", None])
def test_a_value_that_is_not_an_int_is_a_type_error_and_a_value_error(check, bad):
    """Code that catches the TypeError of a wrong type and code that catches the ValueError of the
    range checks both see it; the message still names the argument and shows the value."""
    with pytest.raises(NotAnIntError, match=rf"^n(=| must be ).*{re.escape(repr(bad))}") as err:
        check(bad)
    assert isinstance(err.value, TypeError) and isinstance(err.value, ValueError)


def test_power_of_two_against_the_bit_rule():
    """Every int from -2 to 600 against the powers of two listed by hand (and bools, floats refused)."""
    powers = {16, 32, 64, 128, 256}
    for v in range(-2, 600):
        if v in powers:
            assert power_of_two("BLOCK_K", v, 16, 256) == v
        else:
            with pytest.raises(ValueError, match=rf"^BLOCK_K={v}: must be a power of two from 16 to 256$"):
                power_of_two("BLOCK_K", v, 16, 256)
    assert power_of_two("block", np.int64(65536), 16, 65536) == 65536
    for bad in (True, 32.0, "32", None):
        with pytest.raises(ValueError, match="must be a power of two from 1 to 64 \\(why\\)"):
            power_of_two("n", bad, 1, 64, "why")


def test_tile_sizes_and_group_m():
    assert tile_sizes((16, 256, 32)) == (16, 256, 32) and tile_sizes([64, 64], ("BLOCK_M", "BLOCK_N")) == (64, 64)
    with pytest.raises(
        ValueError,
        match=r"BLOCK_N=24: must be a power of two from 16 to 256 \(every block size: tl.dot needs at least 16",
    ):
        tile_sizes((16, 24, 32))
    with pytest.raises(ValueError, match=r"block must be a tuple \(BLOCK_M, BLOCK_N\), got \(16, 16, 16\)"):
        tile_sizes((16, 16, 16), ("BLOCK_M", "BLOCK_N"))
    with pytest.raises(ValueError, match=r"block must be a tuple \(BLOCK_M, BLOCK_N, BLOCK_K\), got 32"):
        tile_sizes(32)
    assert group_m(8) == 8 and group_m(np.int32(1)) == 1
    for bad in (0, -3, 2.0, True, None):
        with pytest.raises(ValueError, match=r"^group_m must be a positive int \(tile rows per group of the grouped"):
            group_m(bad)


def test_positive_number():
    for v in [1, 0.5, 2.0**-1074, np.float32(3.5), np.int64(2), 1e308]:
        got = positive_number("scale", v)
        assert got == float(v) and type(got) is float
    for v in [0, 0.0, -1.0, np.inf, np.nan, -np.inf, True, "1", None, 1j, [1.0]]:
        with pytest.raises(ValueError, match=r"scale must be a positive finite number"):
            positive_number("scale", v)


def test_stochastic_rng():
    rng = np.random.default_rng(0)
    assert stochastic_rng(rng) is rng
    with pytest.raises(ValueError, match="stochastic rounding needs an explicit generator"):
        stochastic_rng(None)
    for bad in [42, np.random.RandomState(0), "rng"]:
        with pytest.raises(TypeError, match="rng must be a numpy.random.Generator, got"):
            stochastic_rng(bad)


def test_real_float64_accepts_real_dtypes_exactly():
    for x, want in [
        ([1, 2], [1.0, 2.0]),
        (np.array([True, False]), [1.0, 0.0]),
        (np.array([3], np.uint64), [3.0]),
        (np.array([1.5, -0.0], np.float32), [1.5, -0.0]),
        (np.array([1.5, -0.0], ml_dtypes.bfloat16), [1.5, -0.0]),
        (np.array([448.0], ml_dtypes.float8_e4m3fn), [448.0]),
        (2.5, 2.5),
    ]:
        got = real_float64(x)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(np.asarray(want, dtype=np.float64)))


@pytest.mark.parametrize("bad", [np.array([1 + 2j]), np.array(["a"]), np.array([object()]), "1.5"])
def test_real_float64_refuses_other_dtypes(bad):
    with pytest.raises(TypeError, match="expected real numbers, got dtype"):
        real_float64(bad)
