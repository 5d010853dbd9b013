"""Tests of benchmarks/gpu_launch_timing.py and nbhelpers.launch_timing that need no GPU: the
script's refusal without one, its arguments and meta, the rows of nbhelpers.launch_timing run
against a stand-in for torch's CUDA calls, the results file they make read back through
nbhelpers.results, and gpu_report.py's step for the script. The L2 fetch granularity that
benchmarks/gpu_copy_bandwidth.py records is read here from a stand-in for the CUDA runtime.
"""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before any kernel import: TRITON_INTERPRET=1 on a CPU

import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from helpers import load_benchmark

import nbhelpers.timing
from nbhelpers import launch_timing
from nbhelpers.results import LAUNCH_TIMING, ResultsFile, recorded_launch_timing

ROOT = Path(__file__).resolve().parents[1]
PATH = ROOT / "benchmarks" / "gpu_launch_timing.py"
bench = load_benchmark("gpu_launch_timing")
copy_bench = load_benchmark("gpu_copy_bandwidth")
META = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "date": "2026-12-01T00:00:00+00:00",
    "script": "benchmarks/gpu_launch_timing.py",
    "command": "python benchmarks/gpu_launch_timing.py",
}


# ------------------------------------------------------------------ the command line


@pytest.mark.skipif(INFO.is_gpu, reason="on a GPU the script runs")
def test_without_a_gpu_it_exits_with_code_2_and_writes_nothing(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "t.json"
    r = subprocess.run(
        [sys.executable, str(PATH), "--out", str(out)], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "gpu_launch_timing.py needs an NVIDIA GPU" in r.stderr
    assert not out.exists()


def test_arguments_default_and_refuse_what_cannot_run():
    args = bench.parse_args([])
    assert (args.n, args.block, args.repeats, args.race_n, args.tries) == (2**26, 1024, 20, 2**26, 5)
    assert args.lead_cycles == launch_timing.LEAD_CYCLES
    args = bench.parse_args(["--n", "4096", "--block", "256", "--repeats", "3", "--tries", "2"])
    assert (args.n, args.block, args.repeats, args.tries) == (4096, 256, 3, 2)
    for bad in (
        ["--n", "0"],
        ["--repeats", "-1"],
        ["--block", "1000"],
        ["--race-n", "3"],
        ["--tries", "0"],
        ["--lead-cycles", "0"],
    ):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_meta_holds_what_the_reader_asks_for():
    args = bench.parse_args(["--n", "4096"])
    meta = bench.meta_for(args, ["--n", "4096"], META)
    assert LAUNCH_TIMING.missing_in_meta(meta) == []
    assert meta["useful_bytes"] == 2 * 4 * 4096 and meta["block"] == 1024
    assert meta["lead_cycles"] == launch_timing.LEAD_CYCLES
    assert "do_bench" in meta["timing"]
    # every key the reader demands is one the script writes (or gpu_run_meta does)
    source = PATH.read_text() + (ROOT / "nbhelpers" / "device.py").read_text()
    for key in LAUNCH_TIMING.meta_keys:
        assert f'"{key}"' in source, key


def test_gpu_report_plans_the_script_with_its_limit():
    spec = importlib.util.spec_from_file_location("gpu_report_for_launch", ROOT / "benchmarks" / "gpu_report.py")
    gr = importlib.util.module_from_spec(spec)
    sys.modules["gpu_report_for_launch"] = gr
    spec.loader.exec_module(gr)
    plan = {s.name: s for s in gr.plan_steps("py", steps=("benchmarks",))}
    step = plan["gpu_launch_timing"]
    assert step.argv == ["py", "benchmarks/gpu_launch_timing.py"]
    assert step.limit_s == 30.0 and step.expected_s <= step.limit_s


# ------------------------------------------------------------------ the measurements, on a stand-in


LOG = []  # what the stand-in for torch.cuda was asked, in order


class FakeEvent:
    """A CUDA event on the host's clock: recorded at once, always passed."""

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        LOG.append("record")
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def fake_torch():
    cuda = types.SimpleNamespace(
        synchronize=lambda: LOG.append("synchronize"),
        Event=FakeEvent,
        _sleep=lambda cycles: LOG.append(("sleep", cycles)),
    )
    return types.SimpleNamespace(
        cuda=cuda,
        ones=lambda n, device=None: torch.ones(n),
        zeros=lambda n, pin_memory=False: torch.zeros(n),
    )


@pytest.fixture
def stand_in(monkeypatch):
    LOG.clear()
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    monkeypatch.setattr(nbhelpers.timing, "gpu_median_ms", lambda fn: (fn(), 0.25)[1])


def test_time_launch_returns_one_row_per_way_in_order(stand_in):
    calls = []
    rows = launch_timing.time_launch(lambda: calls.append("k"), 800, repeats=3, torch_op=lambda: calls.append("t"))
    assert [r["method"] for r in rows] == list(launch_timing.METHODS)
    assert len(rows) == 6
    assert calls.count("t") == 3 and calls.count("k") == 4 * 3 + 1  # 4 ways x 3 repeats, do_bench's call
    for r in rows:
        assert LAUNCH_TIMING.missing_in_row(r) == [] and LAUNCH_TIMING.spec.check(r) == []
        assert r["seconds_min"] <= r["seconds"] <= r["seconds_max"]
        assert r["bandwidth"] == pytest.approx(800 / r["seconds"])
    assert rows[-1]["seconds"] == 0.25e-3 and rows[-1]["repeats"] == 1
    without = launch_timing.time_launch(lambda: None, 800, repeats=2)
    assert "wall, no synchronize, torch op" not in [r["method"] for r in without]
    with pytest.raises(ValueError, match="repeats"):
        launch_timing.time_launch(lambda: None, 800, repeats=0)
    with pytest.raises(ValueError, match="lead_cycles"):
        launch_timing.time_launch(lambda: None, 800, lead_cycles=0)


def test_busy_stream_events_queue_work_before_the_start_event(stand_in):
    """The idle-stream events start on an idle device (they time the host's launch too); the
    busy-stream ones queue the sleep first, so the launch is queued before the start is passed."""
    launch_timing.time_launch(lambda: LOG.append("launch"), 800, repeats=2, lead_cycles=123)
    pattern = ["synchronize", "record", "launch", "record"]
    busy = ["synchronize", ("sleep", 123), "record", "launch", "record"]
    text = [str(x) for x in LOG]

    def count(seq):
        seq = [str(x) for x in seq]
        return sum(text[i : i + len(seq)] == seq for i in range(len(text)))

    assert count(pattern) == 2 and count(busy) == 2
    assert LOG.count(("sleep", 123)) == 2


def test_race_tries_rows_read_back_through_the_reader(stand_in, tmp_path):
    races = launch_timing.race_tries(n=64, tries=3)
    assert [r["name"] for r in races] == ["race, try 1", "race, try 2", "race, try 3"]
    for r in races:
        # on the CPU the copy is done before the early read: the stand-in cannot lose the race
        assert r["before"] == r["after"] == r["expected"] == [2.0] * 4
        assert LAUNCH_TIMING.spec.check(r) == []
    with pytest.raises(ValueError, match="tail"):
        launch_timing.race_tries(n=2, tries=1)
    timings = launch_timing.time_launch(lambda: None, 800, repeats=2)
    results = ResultsFile(tmp_path / "launch_timing_test.json", {**META, "n": 100, "block": 1024}, LAUNCH_TIMING)
    for row in timings + races:
        results.add(row)
    results.finish()
    (run,) = recorded_launch_timing(tmp_path)
    assert run["meta"]["complete"] and len(run["rows"]) == len(timings) + 3
    assert [LAUNCH_TIMING.row(r).kind for r in run["rows"]][-1] == "race"


def test_the_reader_refuses_a_row_that_lacks_what_its_kind_needs(tmp_path):
    good = launch_timing.summarise("t", "CUDA events", [1e-4, 2e-4], 800)
    assert good["seconds"] == pytest.approx(1.5e-4) and good["repeats"] == 2
    bad = {k: v for k, v in good.items() if k != "bandwidth"}
    data = {"meta": {**META, "n": 100, "block": 1024}, "rows": [bad]}
    (tmp_path / "launch_timing_x.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="bandwidth"):
        recorded_launch_timing(tmp_path)
    data["rows"] = [{"name": "r", "kind": "race", "repeats": 1, "before": [0.0]}]
    (tmp_path / "launch_timing_x.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="after"):
        recorded_launch_timing(tmp_path)
    with pytest.raises(ValueError, match="no times"):
        launch_timing.summarise("t", "CUDA events", [], 800)


# ------------------------------------------------------------------ the copy benchmark's L2 reading


class FakeCudart:
    def __init__(self, value, err=0):
        self.value, self.err, self.asked = value, err, []

    def cudaDeviceGetLimit(self, p, limit):  # the runtime's name
        self.asked.append(limit)
        p.contents.value = self.value
        return self.err


def test_the_copy_benchmark_reads_the_l2_fetch_granularity_or_records_none():
    lib = FakeCudart(64)
    assert copy_bench.l2_fetch_granularity(lib) == 64
    assert lib.asked == [copy_bench.CUDA_LIMIT_MAX_L2_FETCH_GRANULARITY] == [5]
    assert copy_bench.l2_fetch_granularity(FakeCudart(32, err=1)) is None  # an error code
    assert copy_bench.l2_fetch_granularity(types.SimpleNamespace()) is None  # no such function
    # no runtime found: None, not an exception
    assert copy_bench._cudart(maps="/nonexistent/maps") is None or isinstance(
        copy_bench._cudart(maps="/nonexistent/maps"), ctypes.CDLL
    )
    source = (ROOT / "benchmarks" / "gpu_copy_bandwidth.py").read_text()
    assert '"l2_fetch_granularity": l2_fetch_granularity()' in source
