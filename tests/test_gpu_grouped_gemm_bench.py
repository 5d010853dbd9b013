"""Tests of benchmarks/gpu_grouped_gemm.py that need no GPU: its refusal without one, the arguments,
the cases it plans, the routing and load statistics of a case, the rows it writes and that
nbhelpers.results reads them back; and that gpu_report.py runs it.

The script is imported as a module (it imports no torch at the top level). Its per-case work,
measure_case, also runs here on tiny sizes: on the CPU (our kernel in Triton's interpreter) with a
stand-in timer, so the comparison against grouped_mm and the refusal to time a wrong output are
tested without a GPU.
"""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before any kernel import: TRITON_INTERPRET=1 on a CPU

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import load_benchmark

from nbhelpers.moe import check_offsets
from nbhelpers.results import GROUPED_GEMM, recorded_grouped_gemm

ROOT = Path(__file__).resolve().parents[1]
PATH = ROOT / "benchmarks" / "gpu_grouped_gemm.py"


bench = load_benchmark("gpu_grouped_gemm")


def gpu_here() -> bool:
    from nbhelpers.device import gpu_unavailable_reason

    return gpu_unavailable_reason() is None


# ------------------------------------------------------------------ without a GPU


@pytest.mark.skipif(gpu_here(), reason="on a GPU the script runs (gpu_report.py runs it)")
def test_without_a_gpu_it_prints_one_line_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "grouped.json"
    r = subprocess.run(
        [sys.executable, str(PATH), "--quick", "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.returncode == 2
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_grouped_gemm.py needs an NVIDIA GPU: "), lines
    assert not out.exists()


# ------------------------------------------------------------------ arguments and cases


def test_default_cases_cover_the_issue_sizes():
    cases = bench.plan_cases(bench.parse_args([]))
    assert len(cases) == 2 * 3 * 4
    assert {(bench.SIZES[s], E, T) for s, E, T in cases} >= {((7168, 2048), 256, 32768), ((2048, 1024), 8, 1024)}
    assert cases[0] == ("deepseek", 256, 1024)  # the DeepSeek-like size first, most experts first
    assert bench.SIZES["deepseek"] == (7168, 2048) and bench.TOP_K == 8


def test_quick_and_explicit_cases():
    assert bench.plan_cases(bench.parse_args(["--quick"])) == [("deepseek", 256, 4096), ("deepseek", 8, 4096)]
    args = bench.parse_args(["--sizes", "small", "--experts", "16", "--tokens", "100", "200", "--time-limit", "5"])
    assert bench.plan_cases(args) == [("small", 16, 100), ("small", 16, 200)] and args.time_limit == 5.0


@pytest.mark.parametrize("argv", [["--sizes", "huge"], ["--experts", "0"], ["--tokens", "x"], ["--experts", "4"]])
def test_bad_arguments_exit_with_a_message(argv, capsys):
    with pytest.raises(SystemExit) as e:
        bench.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err
    if argv == ["--experts", "4"]:
        assert "at least 8" in err


# ------------------------------------------------------------------ routing and load statistics


@pytest.mark.parametrize("T,E", [(1024, 256), (4096, 8), (100, 64)])
def test_routing_offsets_are_valid_seeded_and_skewed(T, E):
    off = bench.routing_offsets(T, E)
    assert np.array_equal(check_offsets(off, T * bench.TOP_K, E), off)
    assert np.array_equal(bench.routing_offsets(T, E), off)  # seeded: the same case every run
    counts = np.diff(off)
    if E == bench.TOP_K:  # top-8 of 8 experts: every token visits every expert, the load is even
        assert (counts == T).all() and not bench.load_stats(off)["uneven"]
    else:
        assert counts.max() > 1.1 * counts.mean()  # skewed: the padded batch has something to lose
        assert bench.load_stats(off)["uneven"]


def test_skewed_routing_leaves_some_of_256_experts_almost_idle():
    counts = np.diff(bench.routing_offsets(1024, 256))
    assert counts.min() <= counts.mean() / 4 and counts.max() >= 2 * counts.mean()


def test_load_stats_by_hand():
    # 4 experts, 40 rows, loads 20, 0, 15, 5: capacity ceil(1.25 * 40 / 4) = 13
    s = bench.load_stats(np.array([0, 20, 20, 35, 40]))
    assert s["rows"] == 40 and s["max_load"] == 20 and s["mean_load"] == 10.0 and s["empty_experts"] == 1
    assert s["capacity"] == 13 and s["uneven"] is True
    kept = 13 + 0 + 13 + 5
    assert s["dropped_rows"] == 40 - kept and s["padding_fraction"] == pytest.approx(1 - kept / 52)
    even = bench.load_stats(np.array([0, 10, 20, 30, 40]))
    assert even["uneven"] is False and even["dropped_rows"] == 0
    assert even["padding_fraction"] == pytest.approx(1 - 40 / 52)


# ------------------------------------------------------------------ one case, tiny, on this machine


def test_measure_case_checks_every_output_against_grouped_mm_then_times():
    import torch

    timed = []
    gen = torch.Generator(device=INFO.device).manual_seed(0)
    offsets = bench.routing_offsets(6, 16)  # 48 rows over 16 experts, some empty
    diffs, ms = bench.measure_case(40, 24, 16, offsets, INFO.device, gen, lambda fn: timed.append(fn) or 1.5)
    assert set(diffs) == set(bench.IMPLS) and diffs["grouped_mm"] == 0.0
    assert all(0 <= d <= bench.CHECK_TOL for d in diffs.values()), diffs
    assert ms == {name: 1.5 for name in bench.IMPLS} and len(timed) == 4


def test_measure_case_does_not_time_a_wrong_output(monkeypatch):
    import torch

    import nbhelpers.kernels.grouped_gemm as gg

    monkeypatch.setattr(
        gg,
        "grouped_matmul",
        lambda x, w, offsets, **kw: torch.zeros((x.shape[0], w.shape[2]), dtype=torch.bfloat16, device=x.device),
    )
    gen = torch.Generator(device=INFO.device).manual_seed(0)
    diffs, ms = bench.measure_case(
        16, 16, 8, bench.routing_offsets(3, 8), INFO.device, gen, lambda fn: pytest.fail("a wrong output was timed")
    )
    assert ms is None and diffs["ours"] == pytest.approx(1.0) and diffs["loop"] <= bench.CHECK_TOL


def test_ours_and_grouped_mm_are_timed_with_offsets_already_on_the_device(monkeypatch):
    # the timed calls copy nothing from the host: our launcher gets a device tensor (it then reads
    # no value back: tests/test_kernels_grouped_gemm.py), grouped_mm its int32 ends on the device
    import torch
    import torch.nn.functional as F

    import nbhelpers.kernels.grouped_gemm as gg

    seen = {}
    real_ours, real_mm = gg.grouped_matmul, F.grouped_mm

    def ours(x, w, offsets, **kw):
        seen["ours"] = offsets
        return real_ours(x, w, offsets, **kw)

    def mm(x, w, offs=None, **kw):
        seen["grouped_mm"] = offs
        return real_mm(x, w, offs=offs, **kw)

    monkeypatch.setattr(gg, "grouped_matmul", ours)
    monkeypatch.setattr(F, "grouped_mm", mm)
    gen = torch.Generator(device=INFO.device).manual_seed(0)
    offsets = bench.routing_offsets(4, 8)
    timed = []
    diffs, ms = bench.measure_case(16, 16, 8, offsets, INFO.device, gen, lambda fn: timed.append(fn) or 1.0)
    assert ms is not None and diffs["ours"] <= bench.CHECK_TOL
    seen.clear()
    for fn in timed:
        fn()
    for name, off in seen.items():
        assert isinstance(off, torch.Tensor) and off.device == torch.device(INFO.device), name
    assert seen["ours"].tolist() == offsets.tolist() and seen["grouped_mm"].tolist() == offsets[1:].tolist()


# ------------------------------------------------------------------ the rows and the results file


STATS = bench.load_stats(np.array([0, 20, 20, 35, 40]))
DIFFS = {"loop": 1e-3, "padded": 2e-3, "grouped_mm": 0.0, "ours": 1e-3}


def test_a_timed_row_has_speedups_of_ours_and_its_goals():
    ms = {"loop": 6.0, "padded": 3.0, "grouped_mm": 2.0, "ours": 2.5}
    row = bench.build_row("small", 2048, 1024, 256, 5, STATS, DIFFS, ms=ms)
    assert row["ours_vs_loop"] == 6.0 / 2.5 and row["ours_vs_padded"] == 3.0 / 2.5
    assert row["ours_vs_grouped_mm"] == 2.0 / 2.5
    assert row["tflops"]["ours"] == pytest.approx(2 * 40 * 2048 * 1024 / 2.5e-3 / 1e12)
    assert row["goals"] == {"ours_vs_loop": 2.0, "ours_vs_padded": 1.0, "ours_vs_grouped_mm": 0.8}
    assert bench.goals_met(row) == {"ours_vs_loop": True, "ours_vs_padded": True, "ours_vs_grouped_mm": True}
    assert all(k in row for k in bench.ROW_KEYS + bench.TIMED_KEYS)
    # below E = 256 the loop has no goal; on an even load the padded batch has none
    even = bench.load_stats(np.array([0, 10, 20, 30, 40]))
    small = bench.build_row("small", 2048, 1024, 64, 5, even, DIFFS, ms={**ms, "ours": 4.0})
    assert small["goals"]["ours_vs_loop"] is None and small["goals"]["ours_vs_padded"] is None
    assert bench.goals_met(small) == {"ours_vs_grouped_mm": False}


def test_an_untimed_row_says_why_and_a_timed_one_needs_every_time():
    row = bench.build_row("small", 2048, 1024, 8, 5, STATS, DIFFS, error="outputs differ")
    assert row["error"] == "outputs differ" and "ms" not in row and bench.goals_met(row) == {}
    with pytest.raises(ValueError, match="missing \\['padded'\\]"):
        bench.build_row("small", 2048, 1024, 8, 5, STATS, DIFFS, ms={"loop": 1, "grouped_mm": 1, "ours": 1})


def test_rows_as_the_script_writes_them_read_back(tmp_path):
    meta = {k: "x" for k in bench.META_KEYS}
    meta["date"] = "2026-12-01T00:00:00+00:00"
    rows = [
        bench.build_row(
            "deepseek",
            7168,
            2048,
            256,
            5,
            STATS,
            DIFFS,
            ms={"loop": 6.0, "padded": 3.0, "grouped_mm": 2.0, "ours": 2.5},
        ),
        bench.build_row("deepseek", 7168, 2048, 8, 5, STATS, {}, error="skipped: past the time limit"),
    ]
    (tmp_path / "grouped_gemm_test-gpu.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    (run,) = recorded_grouped_gemm(tmp_path)
    assert run["rows"][0]["ours_vs_loop"] == 2.4 and run["rows"][1]["error"].startswith("skipped")


# ------------------------------------------------------------------ gpu_report runs it


def test_gpu_report_discovers_and_plans_the_script():
    spec = importlib.util.spec_from_file_location("gpu_report_for_grouped", ROOT / "benchmarks" / "gpu_report.py")
    gr = importlib.util.module_from_spec(spec)
    sys.modules["gpu_report_for_grouped"] = gr  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(gr)
        assert PATH in gr.discover_benchmarks(ROOT)
        plan = gr.plan_steps("py", ("benchmarks",))
        (step,) = [s for s in plan if s.name == "gpu_grouped_gemm"]
        assert step.argv[:2] == ["py", "benchmarks/gpu_grouped_gemm.py"] and step.kind == "benchmark"
        args = bench.parse_args(step.argv[2:])  # whatever else the report passes, the script takes
        assert args.time_limit < step.limit_s  # the script stops starting cases before the report kills it
    finally:
        del sys.modules["gpu_report_for_grouped"]


# ------------------------------------------------------------------ a run that fails halfway


def test_a_run_that_fails_on_the_third_case_keeps_the_first_two(tmp_path, monkeypatch):
    """The script's own loop (run_cases), on tiny cases on this machine, with a stand-in timer that
    raises on the third case, as a CUDA error or a killed step would: the results file, written
    after every case, holds the first two rows, says it is incomplete, and still reads back."""
    import torch

    from nbhelpers.results import ResultsFile

    monkeypatch.setitem(bench.SIZES, "tiny", (40, 24))
    cases = [("tiny", 16, T) for T in (5, 6, 7, 8)]
    calls = []

    def timer(fn):
        calls.append(fn)
        if len(calls) > 2 * len(bench.IMPLS):  # the first call of the third case
            raise RuntimeError("CUDA error: unspecified launch failure")
        return 1.0

    out = tmp_path / "grouped_gemm_test-gpu.json"
    results = ResultsFile(out, {k: "x" for k in bench.META_KEYS} | {"date": "2026-12-01T00:00:00+00:00"}, GROUPED_GEMM)
    gen = torch.Generator(device=INFO.device).manual_seed(0)
    with pytest.raises(RuntimeError, match="unspecified launch failure"):
        bench.run_cases(cases, results, INFO.device, gen, timer, time_limit=1e9)
    data = json.loads(out.read_text())
    assert [r["T"] for r in data["rows"]] == [5, 6] and data["meta"]["complete"] is False
    assert all("ms" in r for r in data["rows"])
    (run,) = recorded_grouped_gemm(tmp_path)
    assert len(run["rows"]) == 2


def test_cases_past_the_time_limit_are_rows_that_say_so(tmp_path, monkeypatch):
    import torch

    from nbhelpers.results import ResultsFile

    monkeypatch.setitem(bench.SIZES, "tiny", (40, 24))
    now = [0.0]

    def timer(fn):
        now[0] += 1.0  # four timings: 4 s of the fake clock per case
        return 1.0

    results = ResultsFile(tmp_path / "g.json", {})
    gen = torch.Generator(device=INFO.device).manual_seed(0)
    rows = bench.run_cases(
        [("tiny", 8, 4), ("tiny", 8, 5), ("tiny", 8, 6)],
        results,
        INFO.device,
        gen,
        timer,
        time_limit=5,
        clock=lambda: now[0],
    )
    assert ["error" in r for r in rows] == [False, False, True]
    assert rows[2]["error"] == "skipped: past the time limit of 5 s" and rows[2]["T"] == 6


def test_a_timed_row_carries_the_models_prediction_for_ours():
    """The performance model beside the measurement: the fastest of the tuner's configs for these
    loads (kernels.grouped_gemm.predicted at the compile table's registers and shared memory), as
    called and from a CUDA graph, which saves the tile lookup's eight launches."""
    from nbhelpers.kernels.grouped_gemm import TILE_LOOKUP_LAUNCHES
    from nbhelpers.perf_model import H200

    offsets = bench.routing_offsets(128, 256)  # decode: 1,024 rows over 256 experts
    model = bench.model_best(offsets, 7168, 2048)
    ms = {"loop": 6.0, "padded": 3.0, "grouped_mm": 2.0, "ours": 2.5}
    row = bench.build_row("deepseek", 7168, 2048, 256, 128, bench.load_stats(offsets), DIFFS, ms=ms, predicted=model)
    assert (row["predicted_ms"], row["predicted_graph_ms"], row["predicted_config"]) == (
        model["ms"],
        model["graph_ms"],
        model["config"],
    )
    assert row["predicted_ms"] - row["predicted_graph_ms"] == pytest.approx(TILE_LOOKUP_LAUNCHES * H200.launch_s * 1e3)
    # every routed expert's weights read once at least: 7168 x 2048 bf16 each, at the HBM rate
    routed = int((np.diff(offsets) > 0).sum())
    assert 100 < routed < 256 and row["predicted_graph_ms"] > routed * 7168 * 2048 * 2 / H200.hbm_bytes_per_s * 1e3
    untimed = bench.build_row("deepseek", 7168, 2048, 8, 5, STATS, {}, error="skipped")
    assert untimed.get("predicted_ms") is None


def test_the_tile_lookup_launches_as_many_kernels_as_the_model_counts():
    """Every operation of tile_offsets on int64 offsets that is not a view (a kernel on a GPU),
    recorded as torch dispatches it; int32 offsets skip the cast. The scan reads int32 and writes
    int32, so no cast hides inside it (a dispatch mode sees only the outer call: a cumsum from
    int64 into an int32 output casts inside, a kernel this count would miss)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from nbhelpers.kernels.grouped_gemm import TILE_LOOKUP_LAUNCHES, tile_offsets

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append((func, args, kwargs or {}))
            return func(*args, **(kwargs or {}))

    for dtype, launches in ((torch.int64, TILE_LOOKUP_LAUNCHES), (torch.int32, TILE_LOOKUP_LAUNCHES - 1)):
        with Record() as rec:
            out = tile_offsets(torch.tensor([0, 3, 3, 10, 17], dtype=dtype), 17, 16)
        assert out.tolist() == [0, 1, 1, 2, 3]
        kernels = [str(f) for f, _, _ in rec.ops if not f.is_view]
        assert len(kernels) == launches, kernels
        (scan,) = [(a, kw) for f, a, kw in rec.ops if "cumsum" in str(f)]
        assert scan[0][0].dtype == torch.int32 and scan[1]["out"].dtype == torch.int32


def test_a_timed_row_records_the_config_the_tuner_kept(tmp_path, monkeypatch):
    """What the tuner kept for ours, and every config's tuning time, go into the row, read back by
    shape (tuner_choice asks the kernel module for the key of the case's bf16 call); on this
    machine the interpreter does not tune, so a stand-in answers, and without one the row has no
    such fields, as rows recorded before they existed."""
    import torch

    import nbhelpers.kernels.grouped_gemm as gg
    from nbhelpers.results import ResultsFile

    monkeypatch.setitem(bench.SIZES, "tiny", (40, 24))
    asked = []

    def stand_in(x, w, out_dtype=torch.float32, **kw):
        asked.append((tuple(x.shape), tuple(w.shape), x.dtype, out_dtype))
        return "64x64x64 w4 s3", {"64x64x64 w4 s3": 0.5, "128x128x64 w8 s4": 0.7}

    gen = torch.Generator(device=INFO.device).manual_seed(0)
    assert bench.tuner_choice(40, 24, 8, 48) is None  # nothing tuned here
    monkeypatch.setattr(gg, "tuned_config", stand_in)
    (row,) = bench.run_cases(
        [("tiny", 8, 6)], ResultsFile(tmp_path / "g.json", {}), INFO.device, gen, lambda fn: 1.0, 1e9
    )
    assert asked == [((48, 40), (8, 40, 24), torch.bfloat16, torch.bfloat16)]
    assert row["tuned_config"] == "64x64x64 w4 s3" and row["tuning_ms"]["128x128x64 w8 s4"] == 0.7
    plain = bench.build_row("small", 2048, 1024, 8, 5, STATS, DIFFS, ms={k: 1.0 for k in bench.IMPLS})
    assert "tuned_config" not in plain and "tuning_ms" not in plain
