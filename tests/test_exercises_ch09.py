"""Chapter 09 exercises: the references agree with the course's engines; the compare never crashes."""
import numpy as np
import pytest

from nbhelpers.exercises import ch09
from nbhelpers.rounding import round_to
from nbhelpers.scaled_gemm import scaled_mm


def test_scaled_epilogue_ref_is_scaled_mm_epilogue():
    rng = np.random.default_rng(3)
    qA = round_to(rng.standard_normal((7, 40)) * 30, "e4m3fn")
    qB = round_to(rng.standard_normal((40, 5)) * 30, "e4m3fn")
    sA = np.exp2(rng.uniform(-8, 2, (7, 1))).astype(np.float32)
    sB = np.exp2(rng.uniform(-8, 2, (1, 5))).astype(np.float32)
    acc = (qA @ qB).astype(np.float32)  # exact products; float64 sum rounded once, as scaled_mm
    assert np.array_equal(ch09.scaled_epilogue_ref(acc, sA, sB), scaled_mm(qA, qB, sA, sB))


@pytest.mark.parametrize("got", [None, "x", np.zeros((2, 2)), np.full((3, 2), np.nan), object()])
def test_within_bound_rejects_without_raising(got):
    ref, bound = np.ones((3, 2)), np.full((3, 2), 1e-6)
    assert isinstance(ch09._within_bound(got, (ref, bound)), str)


def test_within_bound_accepts_inside_the_bound():
    a = np.random.default_rng(1).standard_normal((9, 33)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((33, 4)).astype(np.float32)
    expected = ch09.tile_matmul_ref(a, b)
    assert ch09._within_bound(a @ b, expected) is None
    missing = ch09._within_bound(a[:, :32] @ b[:32], expected)  # a K column missing
    assert missing is not None and "TF32" not in missing


def test_tf32_inputs_fail_the_check_and_the_message_says_why():
    """What tl.dot(a, b) without input_precision="ieee" computes on an NVIDIA GPU: the operands
    rounded to TF32 (nearest, 10 mantissa bits), exact products, fp32 accumulation. Emulated here
    (the interpreter computes in IEEE float32 either way): far outside the float32 bound, and the
    message names the cause; the IEEE answer passes."""
    from nbhelpers.accumulation import emulated_matmul

    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 48)).astype(np.float32)
    b = rng.standard_normal((48, 16)).astype(np.float32)
    expected = ch09.tile_matmul_ref(a, b)
    tf32 = emulated_matmul(a.astype(np.float64), b.astype(np.float64), "tf32", "fp32")
    msg = ch09._within_bound(tf32, expected)
    assert msg is not None and 'input_precision="ieee"' in msg, msg
    ieee = emulated_matmul(a.astype(np.float64), b.astype(np.float64), "fp32", "fp32")
    assert ch09._within_bound(ieee, expected) is None
