"""Tests of benchmarks/gpu_register_pressure.py that need no GPU: its refusal without one, one k
measured on the CPU (the kernel in Triton's interpreter, a stand-in timer and stand-in compiled
facts), the loop keeping its rows when a k fails or the time runs out, and the rows read back."""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before any kernel import: TRITON_INTERPRET=1 on a CPU

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import load_benchmark

from nbhelpers.results import (
    REGISTER_PRESSURE,
    ResultsFile,
    recorded_register_pressure,
)

ROOT = Path(__file__).resolve().parents[1]
PATH = ROOT / "benchmarks" / "gpu_register_pressure.py"
bench = load_benchmark("gpu_register_pressure")
META = {
    "gpu": "Test GPU",
    "date": "2026-12-01T00:00:00+00:00",
    "script": bench.SCRIPT,
    "command": "test",
    "torch": torch.__version__,
    "triton": "3.7.1",
    "rows": 8,
    "cols": 1024,
}
CPU_ONLY = pytest.mark.skipif(INFO.is_gpu, reason="the CPU stand-in run; on a GPU the script itself runs")


def x_small():
    return torch.randn((8, 1024), generator=torch.Generator().manual_seed(0))


@CPU_ONLY
def test_without_a_gpu_it_prints_one_line_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "rp.json"
    r = subprocess.run(
        [sys.executable, str(PATH), "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.returncode == 2
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_register_pressure.py needs an NVIDIA GPU: "), lines
    assert not out.exists()


@CPU_ONLY
def test_one_k_is_checked_then_timed_with_its_occupancy():
    row = bench.measure_case(
        4, x_small(), lambda fn: 2.0, info_fn=lambda kernel: {"registers": 39, "spills": 0, "shared": 0}
    )
    assert row.rel_diff <= bench.CHECK_TOL and row.ms == 2.0 and row.error is None
    assert (row.warps_per_sm, row.blocks_per_sm, row.limit) == (48, 12, "registers")
    assert row.gb_per_s == pytest.approx(8 * 1024 * 4 / 2e-3 / 1e9)


@CPU_ONLY
def test_a_wrong_output_is_not_timed(monkeypatch):
    real = bench.launch

    def broken(x, k):
        out, kernel = real(x, k)
        return out * 1.001, kernel

    monkeypatch.setattr(bench, "launch", broken)
    timed = []
    row = bench.measure_case(
        2,
        x_small(),
        lambda fn: timed.append(fn) or 1.0,
        info_fn=lambda kernel: {"registers": 32, "spills": 0, "shared": 0},
    )
    assert row.error is not None and row.ms is None and not timed
    assert "ms" not in REGISTER_PRESSURE.as_dict(row)  # the file's row has no time either


@CPU_ONLY
def test_slowdowns_against_k0_and_the_bound_occupancy_predicts(tmp_path):
    regs = iter([32, 39, 128])
    times = iter([1.0, 1.2, 2.5])
    out = tmp_path / "register_pressure_test-gpu.json"
    rows = bench.run_cases(
        [0, 4, 20],
        x_small(),
        ResultsFile(out, META, REGISTER_PRESSURE),
        lambda fn: next(times),
        info_fn=lambda kernel: {"registers": next(regs), "spills": 0, "shared": 0},
    )
    assert [r["k"] for r in rows] == [0, 4, 20]
    assert [r["slowdown"] for r in rows] == pytest.approx([1.0, 1.2, 2.5])
    assert [r["predicted_slowdown_warps"] for r in rows] == pytest.approx([1.0, 64 / 48, 64 / 16])
    # x_small()'s programs on 132 SMs: one wave each, so the wave ratio stays 1
    programs = -(-x_small().shape[1] // 512)
    assert programs <= 132 * 4
    assert [r["predicted_slowdown_waves"] for r in rows] == pytest.approx([1.0, 1.0, 1.0])
    (run,) = recorded_register_pressure(tmp_path)
    assert len(run["rows"]) == 3


@CPU_ONLY
def test_a_run_that_fails_on_the_third_k_keeps_the_first_two(tmp_path):
    calls = []

    def timer(fn):
        calls.append(fn)
        if len(calls) == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return 1.0

    out = tmp_path / "register_pressure_test-gpu.json"
    with pytest.raises(RuntimeError, match="illegal memory access"):
        bench.run_cases(
            [0, 2, 4, 6],
            x_small(),
            ResultsFile(out, META, REGISTER_PRESSURE),
            timer,
            info_fn=lambda kernel: {"registers": 32, "spills": 0, "shared": 0},
        )
    data = json.loads(out.read_text())
    assert [r["k"] for r in data["rows"]] == [0, 2] and data["meta"]["complete"] is False
    (run,) = recorded_register_pressure(tmp_path)
    assert len(run["rows"]) == 2


@CPU_ONLY
def test_ks_past_the_time_limit_are_rows_that_say_so(tmp_path):
    ticks = iter([0.0, 1.0, 30.0, 31.0])
    rows = bench.run_cases(
        [0, 2, 4],
        x_small(),
        ResultsFile(tmp_path / "r.json", META, REGISTER_PRESSURE),
        lambda fn: 1.0,
        time_limit=10.0,
        clock=lambda: next(ticks),
        info_fn=lambda kernel: {"registers": 32, "spills": 0, "shared": 0},
    )
    assert "ms" in rows[0]
    assert [r.get("error") for r in rows[1:]] == ["skipped: past the time limit of 10 s"] * 2


def test_the_compile_check_warms_every_k_the_benchmark_times():
    from nbhelpers.tooling.compile_cases import course_cases

    ks = {c.constexprs["EXTRA"] for c in course_cases(kernels="ema_kernel", sources=("package",))}
    assert set(bench.EXTRAS) <= ks
