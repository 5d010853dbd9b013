"""nbhelpers.gemm_report: the recorded GEMM run against the model, kind by kind (chapter 09,
section 5): speeds by hand on a synthetic run, the recorded H100 run's ranges, rows left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbhelpers.device import setup_device

setup_device(verbose=False)

from nbhelpers import calibration_report, gemm_report

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


@pytest.fixture(scope="module")
def h100():
    (c, runs), *_ = [f for f in calibration_report.fitted_runs(RESULTS) if f[0].spec.name == "H100 SXM"]
    table = json.loads((RESULTS / "compile_check_nvidia-h100-80gb-hbm3.json").read_text())
    return c, runs["gemm"], table


def _row(kind, shape, ms):
    M, N, K = shape
    return {"kind": kind, "M": M, "N": N, "K": K, "ms_ours": ms}


def test_relative_speeds_by_hand():
    s = (4096, 4096, 4096)
    run = {
        "rows": [
            _row("fp8_rowwise_fast_accum", s, 1.0),
            _row("fp8_rowwise", s, 1.25),
            _row("block_scaled", s, 2.0),
            _row("bf16", s, 1.5),  # another peak: not compared
            _row("fp8_rowwise", (16, 16, 16), 1.0),  # no fast row at that shape
        ]
    }
    assert gemm_report.relative_speeds(run) == {"fp8_rowwise": {s: 0.8}, "block_scaled": {s: 0.5}}
    with pytest.raises(ValueError, match="no timed 'fp8_rowwise_fast_accum' row"):
        gemm_report.relative_speeds({"rows": [_row("bf16", s, 1.0)]})


def test_the_recorded_h100_run_kind_by_kind(h100):
    c, run, table = h100
    sustained = gemm_report.sustained_gpu(c)
    assert sustained.launch_s == 0.0
    assert sustained.peak_flops["fp8"] == pytest.approx(c.spec.peak_flops["fp8"] * c.flops_fraction["fp8"])
    fits = gemm_report.kind_fits(c, run, table["rows"])
    big = {
        kind: [p for s, p in by.items() if s[1] % 16 == 0 and s[0] * s[1] * s[2] >= 2048**3]
        for kind, by in fits.items()
    }
    assert all(len(v) == 6 for v in big.values())
    # the datasheet's peaks are always too fast; torch's sustained ones bring fast accumulation
    # near bf16, and leave promotion and block scales well above them
    for kind, pairs in big.items():
        assert all(a["ratio"] > b["ratio"] > 1.0 for a, b in pairs), kind
    worst = {kind: max(b["ratio"] for _, b in pairs) for kind, pairs in big.items()}
    assert worst["fp8_rowwise_fast_accum"] < 1.6 and worst["bf16"] < 1.5
    assert worst["fp8_rowwise"] > 2.0 and worst["block_scaled"] > 2.5
    speeds = gemm_report.relative_speeds(run)
    assert 0.65 < min(speeds["fp8_rowwise"].values()) and max(speeds["fp8_rowwise"].values()) < 0.9
    left = gemm_report.kind_fits(c, run, table["rows"], left_out={("block_scaled", 1024, 1024, 1024)})
    assert (1024, 1024, 1024) in fits["block_scaled"] and (1024, 1024, 1024) not in left["block_scaled"]


def test_kinds_text_prints_the_peaks_a_row_per_shape_and_the_ranges(h100):
    c, run, table = h100
    text = gemm_report.kinds_text(c, run, table, left_out={("block_scaled", 1024, 1024, 1024)})
    assert "Triton 3.6.0" in text and "1360 sustained" in text and "758 sustained" in text
    line = next(t for t in text.splitlines() if t.strip().startswith("1024 x 1024 x 1024"))
    # block-scaled left out; promoted / fast kept; torch's promoted / fast
    assert line.split()[-6:-2] == ["-", "0.881", "-", "1.01"]
    assert "  fp8 fast accum  1.52-2.22; 1.04-1.52" in text
    assert "block-scaled / fp8 fast accum, speed: 0.46-0.60" in text


def test_torch_promotion_speeds_by_hand_and_on_the_recorded_run(h100):
    s, t = (4096, 4096, 4096), (16, 16, 16)
    run = {
        "rows": [
            {"kind": "fp8_rowwise", "M": 4096, "N": 4096, "K": 4096, "ms_theirs": 1.25},
            {"kind": "fp8_rowwise_fast_accum", "M": 4096, "N": 4096, "K": 4096, "ms_theirs": 1.0},
            {"kind": "fp8_rowwise", "M": 16, "N": 16, "K": 16, "ms_theirs": 1.0},  # no fast row
            {"kind": "bf16", "M": 4096, "N": 4096, "K": 4096, "ms_theirs": 9.0},
        ]
    }
    assert gemm_report.torch_promotion_speeds(run) == {s: 0.8}
    assert t not in gemm_report.torch_promotion_speeds(run)
    _, gemm_run, table = h100
    speeds = gemm_report.torch_promotion_speeds(gemm_run)
    big = [v for k, v in speeds.items() if k[1] % 16 == 0 and k[0] * k[1] * k[2] >= 2048**3]
    assert len(big) == 6 and 0.88 < min(big) and max(big) < 0.96
    text = gemm_report.kinds_text(*h100, left_out={("block_scaled", 1024, 1024, 1024)})
    assert "torch._scaled_mm promoted / fast accum, speed: 0.89-0.95" in text


def test_fill_text_counts_the_busy_sms_at_1024_cubed(h100):
    c, run, table = h100
    text = gemm_report.fill_text(c, run, table)
    assert "128x128x64 w4 s4 -> 64 output tiles on 132 SMs (48% busy, 1 wave)" in text
    # 2 * 128 * 128 * 1024 FLOPs at 1/132 of 989 TFLOP/s
    expected = 2 * 128 * 128 * 1024 / (c.spec.peak_flops["bf16"] / 132)
    assert f"{expected * 1e6:.2f} us on the busy SMs" in text
    assert "the chain: 16 steps / 3 in flight x 1.00 us x 1 wave = 5.33 us" in text
    assert "torch at this shape: bf16 230 TFLOP/s (9.3 us)" in text


def test_promotion_wait_compiles_both_kernels_here():
    out = gemm_report.promotion_wait()
    assert out["promoted"]["adds_before_wait"] and not out["fast"]["adds_before_wait"]
    assert "C7517" in out["promoted"]["note"] and out["fast"]["note"] == ""
    assert out["promoted"]["registers"] > out["fast"]["registers"] + 32
    assert out["promoted"]["wgmma"] == out["fast"]["wgmma"] == 4
    assert out["fast"]["wait_groups"] == [1]


def test_promotion_configs_pairs_promoted_and_fast_on_the_recorded_table(h100):
    _, _, table = h100
    rows = {r["config"]: r for r in gemm_report.promotion_configs(table)}
    # the fast kernel alone tunes over 128x256 (the promoted one spills there)
    assert rows["128x256x128 w8 s3"]["fp8_rowwise"] is None
    assert rows["128x256x128 w8 s3"]["fp8_rowwise_fast_accum"]["programs"] == 1
    # only 128x128x128 w8 s3 loses a program to promotion
    lost = [
        c
        for c, r in rows.items()
        if r["fp8_rowwise"] and r["fp8_rowwise"]["programs"] < r["fp8_rowwise_fast_accum"]["programs"]
    ]
    assert lost == ["128x128x128 w8 s3"]


def test_promotion_text_with_stand_in_compiles(h100):
    _, run, table = h100
    entry = {"registers": 1, "wgmma": 4, "adds_before_wait": True, "wait_groups": [1], "note": "(C7517) x"}
    fast = {**entry, "adds_before_wait": False, "note": ""}
    waits = {"triton": "t", "ptxas": "p", "configs": {"256x128x128 w8 s3": {"promoted": entry, "fast": fast}}}
    block = {**entry, "registers": 3, "adds_before_wait": False, "wait_groups": [0], "note": ""}
    block["fp32_ops"] = {"add": 0, "mul": 64, "fma": 64}
    waits["configs"]["128x128x128 w8 s3"] = {"promoted": entry, "fast": fast, "block": block}
    text = gemm_report.promotion_text(table, waits, run)
    assert "256x128x128 w8 s3   255 / 1  192 / 1             -" in text
    # the block-scaled kernel: the run's 226 registers, one program; here its own wait and 128 ops
    row = next(line for line in text.splitlines() if line.startswith("128x128x128 w8 s3"))
    assert "226 / 1" in row and "1/1/3" in row and "1/1/0" in row and "0/0/128" in row
    assert "fp8 fast accum: the model predicts 128x256x128 w8 s3 (6 shapes)" in text
    assert "tuned config recorded: none (run predates it)" in text
    assert gemm_report.predicted_configs(
        {"rows": [{"kind": "bf16", "M": 1, "N": 1, "K": 1, "tuned_config": "c"}]}, "bf16"
    ) == {
        "predicted": {},
        "tuned": {"c": [(1, 1, 1)]},
    }


def test_fp32_ops_and_loop_body_on_hand_written_ptx():
    ptx = (
        "entry:\n\tadd.f32 %f1, %f2, %f3;\n"
        "$L__BB0_2:\n\twgmma.mma_async.sync.aligned x;\n\twgmma.wait_group.sync.aligned 0;\n"
        "\tmul.f32 %f4, %f5, %f6;\n\tfma.rn.f32 %f7, %f4, %f8, %f7;\n\tadd.rn.ftz.f32 %f9, %f9, %f1;\n"
        "\tadd.s32 %r1, %r1, 1;\n"
        "$L__BB0_3:\n\tadd.f32 %f1, %f2, %f3;\n"
    )
    body = gemm_report._loop_body(ptx)
    assert "wgmma.mma_async" in body and "entry" not in body
    # integer adds are not fp32 work; the epilogue's add is outside the loop
    assert gemm_report._fp32_ops(body) == {"add": 1, "mul": 1, "fma": 1}
