"""The performance model (nbhelpers.perf_model) against the points it must reproduce: an H200's
measured device copy and bf16 GEMM (../shared/FACTS.md: ~4.3 TB/s, 769-798 TFLOP/s at 8192^3,
measured with torch 2.11 and Triton 3.6), within the factor the module states, and chapter 11's
latency-bound top-k; and its arithmetic on made-up launches."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from nbhelpers import occupancy
from nbhelpers.perf_model import GPU, H200, LATENCY_RANGE_S, Launch, little_bytes, predict, stages_in_flight

ROOT = Path(__file__).resolve().parents[1]
MEASURED_COPY_BYTES_PER_S = 4.3e12  # reads plus writes, a device-to-device copy on an H200
MEASURED_BF16_FLOPS = (769e12, 798e12)  # torch.matmul, bf16 8192^3, random data, on an H200


def compiled(kernel: str, label: str, config_start: str) -> dict:
    """The sm_90 row of benchmarks/results/compile_check.json (the compile check's record)."""
    rows = json.loads((ROOT / "benchmarks" / "results" / "compile_check.json").read_text())["rows"]
    rows = [r for r in rows if r["label"] == label]
    (row,) = [
        r
        for r in rows
        if r["kernel"] == kernel and r["target"] == "sm_90" and r["config"].strip().startswith(config_start)
    ]
    return row


def resident(row: dict) -> int:
    return occupancy.occupancy(row["registers"], row["num_warps"], row["shared"]).blocks


def test_a_device_copy_is_hbm_bound_within_the_measured_rate():
    """Chapter 08's copy_kernel (BLOCK = 1024 fp32, 4 warps) on 512 MiB: its programs keep far more
    in flight than Little's law asks, so the model says HBM-bound, at 4.8 TB/s against a measured
    4.3: the datasheet's peak is 12 % above what a copy reaches."""
    row = compiled("copy_kernel", "fp32", "1024 ")
    n = 2**27  # float32 elements: 512 MiB
    launch = Launch(programs=n // 1024, resident_per_sm=resident(row), bytes_per_step=1024 * 4)
    p = predict(H200, launch, bytes_moved=2 * 4 * n)
    assert p.bound == "HBM"
    rate = 2 * 4 * n / p.seconds
    assert 1.0 < H200.hbm_bytes_per_s / MEASURED_COPY_BYTES_PER_S < 1.25
    assert 1 / 1.25 < rate / MEASURED_COPY_BYTES_PER_S < 1.25
    # what a copy keeps in flight per SM, against what the law asks per SM
    assert resident(row) * 1024 * 4 > little_bytes(H200) / H200.sms


def test_a_large_bf16_gemm_is_compute_bound_within_the_measured_rate():
    """8192^3 in bf16 with chapter 09's 128 x 128 x 64 tiles over 8 warps, 3 stages: compute-bound
    (the pipeline's two steps in flight hide the latency of the 128 steps along K; unpipelined,
    the chain of steps would bind); the peak, 990 TFLOP/s, sits 24-29 % above the 769-798 measured (clocks and
    power: no GEMM reaches it)."""
    row = compiled("matmul_kernel", "bf16 ieee -> bf16, 4096^3", "128x128x64 w8 s3")
    M = N = K = 8192
    tiles = (M // 128) * (N // 128)
    # bytes from HBM if each tile's A and B panels are read once per tile row and column
    bytes_hbm = 2 * (M * K * (N // 128) + K * N * (M // 128)) / 8 + 2 * M * N  # GROUP_M = 8 reuse in L2
    ahead = stages_in_flight(row["num_stages"])
    assert ahead == 2
    launch = Launch(tiles, resident(row), bytes_per_step=2 * (128 * 64 + 64 * 128), steps=K // 64, stages=ahead)
    p = predict(H200, launch, bytes_moved=bytes_hbm, flops=2.0 * M * N * K, dtype="bf16")
    assert p.bound == "compute"
    flops_rate = 2.0 * M * N * K / p.seconds
    for measured in MEASURED_BF16_FLOPS:
        assert 1.0 < flops_rate / measured < 1.3
    assert predict(H200, replace(launch, stages=1), bytes_hbm, 2.0 * M * N * K, "bf16").bound == "dependent steps"


def test_chapter_11s_row_kernel_is_a_chain_of_dependent_steps():
    """One program per row reading 1024 bf16 logits per step, 126 steps for Llama 3's 128,256: at
    batch 1 the chain of steps binds, 63-126 us at the assumed 0.5-1 us, over a thousand times the
    row's 0.05 us of HBM time; at batch 256 the programs still keep too little in flight."""
    V, block = 128_256, 1024
    steps = math.ceil(V / block)
    row = compiled("topk_chunk_kernel", "bf16 logits, V = 128,256, k = 50, row", "w4 s3")
    for latency in LATENCY_RANGE_S:
        gpu = replace(H200, latency_s=latency)
        p = predict(gpu, Launch(1, resident(row), block * 2, steps), bytes_moved=V * 2)
        assert p.bound == "dependent steps"
        assert p.terms["dependent steps"] == pytest.approx(steps * latency)
        assert p.terms["dependent steps"] > 1000 * p.terms["HBM"]
    p256 = predict(H200, Launch(256, resident(row), block * 2, steps), bytes_moved=256 * V * 2)
    assert p256.bound in ("bytes in flight", "dependent steps")
    assert 256 * V * 2 / p256.seconds < H200.hbm_bytes_per_s / 2


def test_the_terms_follow_the_formulas_and_the_slowest_binds():
    gpu = GPU("toy", 2, 1e9, {"bf16": 1e12}, 1e-6, 1e-5, "made up")
    launch = Launch(programs=10, resident_per_sm=3, bytes_per_step=100.0, steps=4)
    p = predict(gpu, launch, bytes_moved=1e6, flops=2e9, dtype="bf16")
    assert p.terms["compute"] == pytest.approx(2e-3)
    assert p.terms["HBM"] == pytest.approx(1e-3)
    assert p.terms["bytes in flight"] == pytest.approx(1e6 * 1e-6 / (6 * 100.0))  # 6 programs resident
    assert p.terms["dependent steps"] == pytest.approx(2 * 4 * 1e-6)  # 10 programs in 2 waves of 6
    piped = predict(gpu, replace(launch, stages=2), 1e6)  # two steps' loads in flight at once
    assert piped.terms["bytes in flight"] == pytest.approx(p.terms["bytes in flight"] / 2)
    assert piped.terms["dependent steps"] == pytest.approx(2 * 2 * 1e-6)
    assert predict(gpu, replace(launch, stages=9), 1e6).terms["dependent steps"] == pytest.approx(2 * 1e-6)
    assert p.bound == "compute" and p.seconds == pytest.approx(2e-3 + 1e-5)
    assert little_bytes(gpu) == pytest.approx(1e3)
    assert little_bytes(gpu, read_share=0.5) == pytest.approx(5e2)  # a copy: only its reads wait
    # stores are not waited on: only the loaded bytes need to be in flight
    half = predict(gpu, launch, 1e6, bytes_loaded=5e5)
    assert half.terms["bytes in flight"] == pytest.approx(p.terms["bytes in flight"] / 2)
    assert half.terms["HBM"] == pytest.approx(p.terms["HBM"])
    with pytest.raises(ValueError, match="cannot exceed bytes_moved"):
        predict(gpu, launch, 1e6, bytes_loaded=2e6)
    # more resident programs never make it slower; a longer latency never makes it faster
    more = predict(gpu, replace(launch, resident_per_sm=5), 1e6, 2e9, "bf16")
    slower = predict(replace(gpu, latency_s=2e-6), launch, 1e6, 2e9, "bf16")
    assert more.seconds <= p.seconds <= slower.seconds


def test_bad_input_says_what_is_accepted():
    with pytest.raises(ValueError, match="programs"):
        Launch(0, 1, 1.0)
    with pytest.raises(ValueError, match="stages"):
        Launch(1, 1, 1.0, stages=0)
    with pytest.raises(ValueError, match="bytes_per_step must be a positive finite number"):
        Launch(1, 1, float("nan"))
    with pytest.raises(ValueError, match=r"dtype must be one of \['bf16', 'fp16', 'fp32', 'fp8'\]"):
        predict(H200, Launch(1, 1, 1.0), 1.0, flops=1.0, dtype="int4")
    with pytest.raises(ValueError, match="flops must be a non-negative finite number"):
        predict(H200, Launch(1, 1, 1.0), 1.0, flops=-1.0)
    with pytest.raises(ValueError, match="latency_s"):
        replace(H200, latency_s=0)
    assert "specification" in H200.source and "assumed" in H200.source


def test_a_pipelined_loop_keeps_num_stages_minus_one_steps_in_flight():
    assert [stages_in_flight(s) for s in (1, 2, 3, 4, 5)] == [1, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="num_stages"):
        stages_in_flight(0)


def test_instruction_issue_follows_the_schedulers_and_the_clock():
    """The busiest SM runs ceil(programs / SMs) programs of `warps` warps, `issue_cycles` each, on
    `issue_per_sm` schedulers; a wave of programs takes at least one warp's cycles. The H200's
    clock is the one its fp32 peak implies (67 TFLOP/s over 132 SMs of 256 FLOPs a cycle, 1.98 GHz);
    its bf16 peak implies 1.83 GHz, the tensor-core boost clock."""
    gpu = GPU("toy", 2, 1e9, {"bf16": 1e12}, 1e-6, 1e-5, "made up", clock_hz=1e9, issue_per_sm=4)
    launch = Launch(programs=5, resident_per_sm=3, bytes_per_step=100.0, steps=1, issue_cycles=1e6)
    p = predict(gpu, launch, bytes_moved=1e3)
    assert p.terms["instruction issue"] == pytest.approx(
        3 * 4 * 1e6 / 4 / 1e9
    )  # 3 programs of 4 warps on the busiest SM
    assert p.bound == "instruction issue"
    one_warp = predict(gpu, replace(launch, programs=1, warps=1), 1e3)
    assert one_warp.terms["instruction issue"] == pytest.approx(1e6 / 1e9)  # one warp, one a cycle
    two_waves = predict(gpu, replace(launch, programs=12, warps=1), 1e3)  # 6 slots: two waves
    assert two_waves.terms["instruction issue"] == pytest.approx(2 * 1e6 / 1e9)
    assert "instruction issue" not in predict(gpu, replace(launch, issue_cycles=0.0), 1e3).terms
    with pytest.raises(ValueError, match="no clock_hz"):
        predict(replace(gpu, clock_hz=None), launch, 1e3)
    with pytest.raises(ValueError, match="issue_cycles must be a positive"):
        Launch(programs=1, resident_per_sm=1, bytes_per_step=1.0, issue_cycles=-5.0)
    assert H200.clock_hz == pytest.approx(67e12 / (132 * 256)) and 1.97e9 < H200.clock_hz < 1.99e9
    assert 990e12 / (132 * 4096) == pytest.approx(1.83e9, rel=1e-3)
    assert H200.issue_per_sm == 4
