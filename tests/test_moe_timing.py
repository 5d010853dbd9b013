"""Tests of nbhelpers.moe_timing: what the measurements return (keys, shapes, the same work at every
E, the loads of a skewed routing), the errors on bad arguments, torch's thread count restored, the
napkin formula, and one property of the launch-overhead law that holds on any machine: 256 tiny
experts in a Python loop of matmuls take longer than one batched call over the same rows, and
longer than torch's grouped GEMM. Timings are medians of interleaved rounds; the margins below are
several times smaller than the ratios measured on a busy 2-core machine (about 70x and 8x)."""

import numpy as np
import pytest
import torch

from nbhelpers.moe_timing import (
    METHODS,
    CallOverhead,
    ExpertGemmTimes,
    call_overhead,
    napkin_loop_time,
    time_expert_gemms,
)


def test_call_overhead_fields():
    before = torch.get_num_threads()
    co = call_overhead(calls=20, repeats=3)
    assert isinstance(co, CallOverhead)
    assert co.shape == (1, 16, 16) and co.flops == 2 * 16 * 16
    assert (co.calls, co.repeats, co.threads) == (20, 3, 1)
    assert co.seconds > 0 and np.isfinite(co.seconds)
    assert co.flops_per_second == pytest.approx(co.flops / co.seconds)
    assert call_overhead(M=2, K=8, N=4, calls=5, repeats=1).flops == 2 * 2 * 8 * 4
    assert torch.get_num_threads() == before  # set back after the measurement


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"M": 0}, "M must be a positive int"),
        ({"K": 1.5}, "K must be a positive int"),
        ({"calls": 0}, "calls"),
        ({"repeats": -1}, "repeats"),
        ({"threads": 0}, "threads"),
    ],
)
def test_call_overhead_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        call_overhead(**kwargs)


def test_call_overhead_bad_dtype():
    with pytest.raises(TypeError, match="dtype"):
        call_overhead(dtype=torch.int32)


def test_time_expert_gemms_results():
    before = torch.get_num_threads()
    r = time_expert_gemms([1, 4, 16], rows=64, K=16, N=8, repeats=2, methods=METHODS)
    assert isinstance(r, ExpertGemmTimes)
    assert r.methods == METHODS
    np.testing.assert_array_equal(r.E_values, [1, 4, 16])
    for m in METHODS:
        assert r.seconds[m].shape == (3,) and (r.seconds[m] > 0).all()
    for E in (1, 4, 16):  # the same rows at every E, split evenly
        assert r.counts[E].sum() == 64 and r.counts[E].shape == (E,) and (r.counts[E] == 64 // E).all()
    assert r.flops == 2 * 64 * 16 * 8
    table = r.table()
    assert len(table) == 3 * len(METHODS)
    assert set(table[0]) == {"E", "method", "seconds", "rows_per_expert_max", "empty_experts", "ratio_to_loop"}
    loop_rows = [t for t in table if t["method"] == "loop"]
    assert [t["ratio_to_loop"] for t in loop_rows] == [1.0, 1.0, 1.0]
    assert [t["rows_per_expert_max"] for t in loop_rows] == [64, 16, 4]
    slope = r.fitted_overhead("loop")
    assert slope == pytest.approx(np.polyfit([1, 4, 16], r.seconds["loop"], 1)[0])
    assert torch.get_num_threads() == before


def test_time_expert_gemms_uneven_splits():
    # rows not divisible by E: the first rows % E experts get one more row
    r = time_expert_gemms([3], rows=10, K=8, N=8, repeats=1, methods=("loop",))
    np.testing.assert_array_equal(r.counts[3], [4, 3, 3])
    # a skewed routing: the loads of a top-1 route, same total, some experts empty for few rows
    r = time_expert_gemms([64], rows=128, K=8, N=8, repeats=1, methods=("loop", "padded", "grouped_mm"), skew=1.5)
    c = r.counts[64]
    assert c.sum() == 128 and c.max() > 128 // 64 and (c == 0).any()
    assert r.table()[0]["empty_experts"] == int((c == 0).sum())


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"E_values": []}, "must not be empty"),
        ({"E_values": [2, 2]}, "distinct"),
        ({"E_values": [0]}, "E must be a positive int"),
        ({"rows": 0}, "rows"),
        ({"methods": ("loop", "cublas")}, "unknown method"),
        ({"methods": ()}, "at least one"),
        ({"methods": ("loop", "loop")}, "distinct"),
        ({"methods": ("bmm",), "E_values": [3]}, "equal groups"),
        ({"methods": ("bmm",), "skew": 1.0}, "equal groups"),
        ({"methods": ("grouped_mm",), "K": 6}, "16-byte"),
        ({"capacity_factor": 0}, "capacity_factor"),
        ({"skew": -1.0}, "skew"),
        ({"repeats": 0}, "repeats"),
    ],
)
def test_time_expert_gemms_bad_arguments(kwargs, match):
    args = {"E_values": [1, 2], "rows": 8, "K": 8, "N": 8, "repeats": 1}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        time_expert_gemms(**args)


def test_fitted_overhead_needs_two_points_and_a_measured_method():
    r = time_expert_gemms([2], rows=8, K=8, N=8, repeats=1, methods=("loop",))
    with pytest.raises(ValueError, match="two values"):
        r.fitted_overhead("loop")
    with pytest.raises(ValueError, match="no times"):
        r.fitted_overhead("bmm")


def test_napkin_loop_time():
    np.testing.assert_allclose(napkin_loop_time([1, 2, 11], 1e-3, 1e-5), [1e-3, 1.01e-3, 1.1e-3])
    with pytest.raises(ValueError, match="E_values"):
        napkin_loop_time([0, 1], 1e-3, 1e-5)
    with pytest.raises(ValueError, match="overhead_seconds"):
        napkin_loop_time([1], 1e-3, -1.0)


def test_a_loop_of_tiny_experts_is_slower_than_one_call():
    # 256 experts of 4 rows each, 16 x 16 weights: each matmul does 2 * 4 * 16 * 16 = 2,048 FLOPs,
    # nothing next to the fixed cost of a call, so the loop pays 256 call overheads where bmm
    # pays one (measured: about 70x); grouped_mm loops over the groups in C++ rather than Python
    # (measured: about 8x faster than the loop)
    r = time_expert_gemms([256], rows=1024, K=16, N=16, repeats=5, methods=("loop", "bmm", "grouped_mm"))
    loop, bmm, gmm = (r.seconds[m][0] for m in ("loop", "bmm", "grouped_mm"))
    assert loop > 3 * bmm, (loop, bmm)
    assert loop > gmm, (loop, gmm)
