"""Tests of the tests' own helpers (tests/helpers.py): a comparison that backs a "bit for bit"
claim must itself fail on every difference of bits that matters, +0.0 against -0.0 included."""

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_bits, bit_mismatches, cast_values, fraction_sum, loop_sum, np_dtype

from nbhelpers.formats import FORMATS


def test_assert_bits_fails_on_the_sign_of_zero():
    with pytest.raises(AssertionError, match="1 of 1 differ"):
        assert_bits(0.0, -0.0)
    with pytest.raises(AssertionError, match="1 of 1 differ"):
        assert_bits(np.float32(-0.0), 0.0)
    with pytest.raises(AssertionError, match=r"1 of 3 differ.*flat index \[1\]"):
        assert_bits([1.0, -0.0, 2.0], np.array([1.0, 0.0, 2.0]))
    with pytest.raises(AssertionError):
        assert_bits(np.array([-0.0], ml_dtypes.bfloat16), [0.0])
    assert bit_mismatches(np.array([[0.0, -0.0]]), np.array([[-0.0, -0.0]])).tolist() == [[True, False]]


def test_assert_bits_nan_exactly_where_the_reference_has_nan_any_payload():
    quiet, other = np.float64(np.nan), np.array([0x7FF0000000000001], np.uint64).view(np.float64)[0]
    assert np.isnan(other) and quiet.tobytes() != other.tobytes()
    assert_bits([quiet, -quiet, 1.0], [other, quiet, 1.0])  # payload and sign of a NaN do not matter
    with pytest.raises(AssertionError, match="1 of 2 differ"):
        assert_bits([np.nan, 1.0], [np.nan, np.nan])  # a number where the reference has NaN
    with pytest.raises(AssertionError, match="1 of 2 differ"):
        assert_bits([np.nan, 1.0], [0.0, 1.0])  # NaN where the reference has a number
    with pytest.raises(AssertionError):
        assert_bits([np.nan, 1.0], [1.0, np.nan])  # as many NaNs, in other places


def test_assert_bits_values_infinities_shapes_and_message():
    assert_bits(np.float64([1.5, -np.inf, np.inf, 2.0**-1074]), [1.5, -np.inf, np.inf, 2.0**-1074])
    assert_bits(np.float32([1.5, -0.0]), np.float64([1.5, -0.0]))  # dtypes may differ, values may not
    assert_bits(np.array([1.5, 448.0], ml_dtypes.float8_e4m3fn), [1.5, 448.0])  # compared as float64
    with pytest.raises(AssertionError):
        assert_bits(1.0, 1.0 + 2.0**-52)
    with pytest.raises(AssertionError):
        assert_bits(np.inf, -np.inf)
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_bits(np.zeros(3), np.zeros((1, 3)))  # no broadcasting
    with pytest.raises(AssertionError, match=r"at x=\[7\.\] \(flat index \[1\]\): ours \[-0\.\] vs ref \[0\.\]"):
        assert_bits([1.0, -0.0], [1.0, 0.0], x=[3.0, 7.0])


def test_oracles_and_references():
    assert np_dtype(FORMATS["bf16"]) == np.dtype(ml_dtypes.bfloat16)
    assert np_dtype(FORMATS["fp16"]) == np.dtype(np.float16) and np_dtype(FORMATS["tf32"]) is None
    assert cast_values(np.float32([1 + 2**-11, 1e6]), np.float16).tolist() == [1.0, np.inf]  # a tie; overflow
    assert loop_sum(np.ones(300), ml_dtypes.bfloat16) == 256.0
    assert fraction_sum([1e300, 1.0, -1e300]) == 1
