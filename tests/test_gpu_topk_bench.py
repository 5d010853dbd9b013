"""Tests of benchmarks/gpu_topk.py that need no GPU: its refusal without one, the arguments, the
rows it plans and in which order, the bytes each row is charged, the rows it refuses to run and
why, and gpu_report.py's step for it.

The script is imported as a module (it imports no torch at the top level). Its loop, run_cases,
also runs here on short rows (V of a few hundred): on the CPU, the Triton kernels in Triton's
interpreter, with a stand-in timer, so the checks against topk_ref and torch, the rows that are
not timed (a wrong answer, a kernel that does not build, a call too slow, the time limit) and the
results file read back through nbhelpers.results are tested without a GPU.
"""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before any kernel import: TRITON_INTERPRET=1 on a CPU

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import load_benchmark

from nbhelpers.results import TOPK, ResultsFile, recorded_topk
from nbhelpers.topk import pass_cost, topk_ref

ROOT = Path(__file__).resolve().parents[1]
PATH = ROOT / "benchmarks" / "gpu_topk.py"
bench = load_benchmark("gpu_topk")
CPU_ONLY = pytest.mark.skipif(INFO.is_gpu, reason="the CPU stand-in run; on a GPU the script itself runs")
V = 300  # short rows: the interpreter runs every program of a launch one after another
META = {
    "gpu": "Test GPU",
    "date": "2026-12-01T00:00:00+00:00",
    "script": bench.SCRIPT,
    "command": "test",
    "torch": torch.__version__,
    "triton": "3.7.1",
    "vocab": V,
    "bytes": bench.BYTES_FORMULA,
    "peak": 4.8e12,
}


def results_file(tmp_path, name="topk_test-gpu.json"):
    return ResultsFile(tmp_path / name, META, TOPK)


def run(tmp_path, cases, methods=bench.METHODS, timer=lambda fn: 0.5, **kw):
    kw.setdefault("probe_fn", lambda fn: 1.0)
    results = results_file(tmp_path)
    rows = bench.run_cases(cases, list(methods), results, INFO.device, timer, 1e9, V=V, peak=4.8e12, **kw)
    return rows, results


# ------------------------------------------------------------------ without a GPU


@CPU_ONLY
def test_without_a_gpu_it_prints_one_line_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "topk.json"
    r = subprocess.run(
        [sys.executable, str(PATH), "--quick", "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.returncode == 2
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_topk.py needs an NVIDIA GPU: "), lines
    assert not out.exists()


# ------------------------------------------------------------------ arguments and the plan


def test_default_arguments_are_the_chapters_sizes():
    args = bench.parse_args([])
    assert args.vocab == 128_256 and args.dtypes == ["bf16", "fp32"]
    assert args.batches == [1, 8, 64, 256] and args.ks == [1, 8, 50, 256, 1024]
    assert args.methods == ["torch.topk", "torch.sort", "row", "two_stage", "radix"]
    assert args.time_limit == bench.DEFAULT_TIME_LIMIT_S and args.out is None


def test_quick_and_explicit_arguments():
    q = bench.parse_args(["--quick", "--ks", "8"])  # --quick wins, as in the other scripts
    assert (q.dtypes, q.batches, q.ks) == (["bf16"], [1, 64, 256], [1, 50, 1024])
    args = bench.parse_args(
        ["--dtypes", "fp32", "--batches", "4", "--ks", "3", "--vocab", "100", "--methods", "radix", "torch.topk"]
    )
    assert (args.dtypes, args.batches, args.ks, args.vocab) == (["fp32"], [4], [3], 100)
    assert args.methods == ["torch.topk", "radix"]  # torch.topk first: the others' ratios need its time
    assert bench.parse_args(["--time-limit", "12"]).time_limit == 12.0


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--dtypes", "fp16"], "invalid choice"),
        (["--batches", "0"], "positive integer"),
        (["--ks", "x"], "positive integer"),
        (["--methods", "heap"], "invalid choice"),
        (["--vocab", "100", "--ks", "50", "101"], "at most the row length V = 100, got [101]"),
        (["--time-limit", "0"], "--time-limit must be a positive"),
    ],
)
def test_bad_arguments_exit_with_a_message(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        bench.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and says in err


def test_the_plan_runs_the_quick_set_first_then_bf16_then_fp32():
    cases = bench.plan_cases(bench.parse_args([]))
    assert len(cases) == len(set(cases)) == 2 * 5 * 4
    quick = bench.plan_cases(bench.parse_args(["--quick"]))
    assert quick == [("bf16", k, b) for k in (1, 50, 1024) for b in (1, 64, 256)]
    assert cases[: len(quick)] == quick  # a run cut short by its time limit measured these
    rest = cases[len(quick) :]
    assert all(d == "bf16" for d, _, _ in rest[:11]) and all(d == "fp32" for d, _, _ in rest[11:])
    assert rest[:3] == [("bf16", 1, 8), ("bf16", 8, 1), ("bf16", 8, 8)]  # k by k, batch by batch


# ------------------------------------------------------------------ bytes, skips, checked rows


def test_the_bytes_are_one_read_of_the_logits_plus_the_outputs():
    # FACTS.md: one row of Llama 3's logits is 256.5 KB in bf16, 513 KB in fp32
    assert bench.topk_bytes(1, 128_256, 1, "bf16") == 256_512 + (2 + 8)
    assert bench.topk_bytes(1, 128_256, 1, "fp32") == 513_024 + (4 + 8)
    assert bench.topk_bytes(256, 128_256, 50, "bf16") == 256 * (128_256 * 2 + 50 * (2 + 8))
    assert bench.topk_bytes(64, 128_256, 1024, "fp32") == 64 * pass_cost(128_256, 1024, 4).bytes
    assert "batch * (V * s + k * (s + 8))" in bench.BYTES_FORMULA and bench.__doc__.count("V * s + k * (s + 8)") == 1


def test_a_timed_row_has_its_rate_its_share_of_the_peak_and_its_ratio_to_torch_topk():
    row = bench.build_row("bf16", 256, 128_256, 50, "radix", ms=0.02, topk_ms=0.03, peak=4.8e12, launch={"K_PAD": 64})
    b = 256 * (128_256 * 2 + 50 * 10)
    assert row["bytes"] == b and row["gb_per_s"] == pytest.approx(b / 0.02e-3 / 1e9)
    assert row["fraction_of_peak"] == pytest.approx(b / 0.02e-3 / 4.8e12) and row["vs_torch_topk"] == pytest.approx(1.5)
    assert all(key in row for key in bench.ROW_KEYS + bench.TIMED_KEYS) and "error" not in row
    other = bench.build_row("fp32", 1, 100, 1, "torch.sort", ms=1.0)  # no peak known, torch.topk not timed
    assert other["fraction_of_peak"] is None and other["vs_torch_topk"] is None
    skipped = bench.build_row("bf16", 1, 100, 1, "row", error="skipped: past the time limit of 12 s")
    assert "ms" not in skipped and skipped["bytes"] == 100 * 2 + 10
    with pytest.raises(ValueError, match="needs its time"):
        bench.build_row("bf16", 1, 100, 1, "row")


def simulated_insertions(V, k_pad, block_v, rng):
    """What the row kernel does, counted: per block, how many of its entries are among the k_pad
    largest of the list and the block together (a random permutation as the row)."""
    x, best, count = rng.permutation(V), np.empty(0, dtype=np.int64), 0
    for s in range(0, V, block_v):
        block = x[s : s + block_v]
        best = np.sort(np.concatenate([best, block]))[::-1][:k_pad]
        count += int(np.isin(best, block).sum())
    return count


def test_the_expected_insertions_of_a_running_top_k():
    rng = np.random.default_rng(0)
    for V, k_pad, block_v in ((5000, 64, 256), (20_000, 256, 1024), (3000, 1, 100), (3000, 512, 512)):
        counts = [simulated_insertions(V, k_pad, block_v, rng) for _ in range(40)]
        standard_error = np.std(counts) / np.sqrt(len(counts))
        assert abs(bench.expected_insertions(V, k_pad, block_v) - np.mean(counts)) <= 4 * standard_error + 1e-9
    # the numbers of the docstring, for the launches topk plans at V = 128,256
    assert round(bench.expected_insertions(128_256, 256, 1024)) == 1385
    assert round(bench.expected_insertions(128_256, 1024, 1024)) == 5541
    harmonic = sum(1 / j for j in range(1, 126))  # 125 whole blocks, and 256 columns more
    assert bench.expected_insertions(128_256, 1024, 1024) == pytest.approx(1024 * harmonic, rel=1e-3)


def test_only_the_slow_row_kernel_configurations_are_skipped():
    from nbhelpers.kernels.topk import plan

    why = bench.skip_reason("row", 256, 1024, 128_256, plan(128_256, 1024, "row"))
    assert why.startswith("skipped: the 'row' kernel inserts") and "about 5,541 per row" in why
    assert bench.skip_reason("row", 256, 256, 128_256) is not None  # without a launch: no count, same rule
    for method, batch, k in [("row", 64, 1024), ("row", 256, 50), ("two_stage", 256, 1024), ("radix", 256, 1024)]:
        assert bench.skip_reason(method, batch, k, 128_256) is None


def test_checked_rows():
    assert bench.checked_rows(1) == [0] and bench.checked_rows(8) == list(range(8))
    assert bench.checked_rows(64) == [0, 1, 2, 3, 4, 5, 6, 7, 21, 35, 49, 63]
    assert bench.checked_rows(256) == [0, 1, 2, 3, 4, 5, 6, 7, 69, 131, 193, 255]
    for batch in range(1, 300):
        rows = bench.checked_rows(batch)
        assert rows[-1] == batch - 1 and len(rows) == len(set(rows)) <= 12 and min(rows) == 0


def test_the_peak_is_known_for_the_h200_only():
    assert bench.peak_of("NVIDIA H200")[0] == 4.8e12 and "FACTS.md" in bench.peak_of("NVIDIA H200")[1]
    assert bench.peak_of("NVIDIA A100-SXM4-80GB") == (None, None)


def test_the_meta_holds_the_run_and_the_formulas():
    base = {key: "x" for key in bench.META_KEYS} | {"gpu": "NVIDIA H200"}
    meta = bench.run_meta(base, bench.parse_args(["--quick"]))
    assert not TOPK.missing_in_meta(meta)
    assert meta["vocab"] == 128_256 and meta["peak"] == 4.8e12 and meta["bytes"] == bench.BYTES_FORMULA
    assert "median" in meta["timer"] and "topk_ref" in meta["checks"]
    assert bench.run_meta(base | {"gpu": "Other GPU"}, bench.parse_args([]))["peak"] is None


# ------------------------------------------------------------------ the loop, on this machine


@CPU_ONLY
def test_every_method_is_checked_then_timed_and_the_file_reads_back(tmp_path):
    timed = []
    cases = [("bf16", 8, 1), ("bf16", 8, 10), ("fp32", 50, 3)]
    rows, results = run(tmp_path, cases, timer=lambda fn: timed.append(fn) or 0.5)
    results.finish()
    assert [(r["dtype"], r["k"], r["batch"], r["method"]) for r in rows] == [
        (*c, m) for c in cases for m in bench.METHODS
    ]
    assert all("error" not in r for r in rows), [r.get("error") for r in rows]
    assert len(timed) == len(rows) and all(r["ms"] == 0.5 and r["vs_torch_topk"] == 1.0 for r in rows)
    assert [r["checked_rows"] for r in rows[5:10]] == [len(bench.checked_rows(10))] * 5
    assert rows[2]["launch"]["K_PAD"] == 8 and rows[0]["launch"] is None  # the Triton launch, none for torch
    # the model's prediction beside each Triton row's time (none for torch's): what topk.predicted
    # gives for the row's batch and dtype
    from nbhelpers.kernels.topk import predicted

    for r in rows:
        if r["method"] in bench.TRITON_METHODS:
            vb = bench.VALUE_BYTES[r["dtype"]]
            want = sum(q.seconds for q in predicted(V, r["k"], r["method"], rows=r["batch"], value_bytes=vb))
            assert r["predicted_ms"] == pytest.approx(want * 1e3) and r["predicted_ms"] > 0, r
        else:
            assert r.get("predicted_ms") is None, r  # an optional field left at None is not written
    (run_back,) = recorded_topk(tmp_path)
    assert run_back["meta"]["complete"] is True and len(run_back["rows"]) == 15
    assert run_back["rows"][-1]["bytes"] == 3 * (V * 4 + 50 * 12)


@CPU_ONLY
def test_the_timed_calls_return_what_topk_ref_returns(tmp_path):
    answers = []
    run(tmp_path, [("bf16", 20, 4)], timer=lambda fn: answers.append(fn()) or 0.5)
    ref_vals, ref_idx = topk_ref(bench.Logits("bf16", 4, V, 20, [0], INFO.device).x, 20)
    for method, (vals, idx) in zip(bench.METHODS, answers):
        assert torch.equal(vals.view(torch.int16), ref_vals.view(torch.int16)), method
        if method in bench.TRITON_METHODS:
            assert torch.equal(idx, ref_idx), method


@CPU_ONLY
def test_ties_to_the_highest_index_fail_the_check_and_are_not_timed(tmp_path, monkeypatch):
    """The plausible mistake: a top-k whose values are right but which, among equal values, takes the
    highest index first. bf16 logits of V = 300 have ties near the top, so it is caught."""
    import nbhelpers.kernels.topk as kt

    def ties_high(x, k, method="row", **kw):
        s = torch.sort(x.flip(-1), dim=-1, descending=True, stable=True)
        return s.values[:, :k], x.shape[-1] - 1 - s.indices[:, :k]

    monkeypatch.setattr(kt, "topk", ties_high)
    timed = []
    rows, _ = run(tmp_path, [("bf16", 50, 4)], timer=lambda fn: timed.append(fn) or 0.5)
    d = bench.Logits("bf16", 4, V, 50, [0], INFO.device)
    top = d.x[0].float().sort(descending=True).values[:50]
    assert (top[1:] == top[:-1]).any()  # the premise: ties among the top 50 of row 0
    for r in rows:
        if r["method"] in bench.TRITON_METHODS:
            assert r["error"] == "check failed: indices differ from topk_ref in row 0; not timed", r
        else:
            assert "ms" in r
    assert len(timed) == 2


@CPU_ONLY
def test_a_wrong_row_that_topk_ref_does_not_see_is_caught_on_the_gpu_side(tmp_path, monkeypatch):
    # batch 20: topk_ref checks rows 0-7, 10, 13, 16, 19; row 9 is checked against torch only
    import nbhelpers.kernels.topk as kt

    assert 9 not in bench.checked_rows(20)
    real = kt.topk

    def wrong_in_row_9(x, k, method="row", **kw):
        vals, idx = real(x, k, method)
        vals[9, 0] = vals[9, -1]
        return vals, idx

    monkeypatch.setattr(kt, "topk", wrong_in_row_9)
    rows, _ = run(tmp_path, [("fp32", 5, 20)], methods=("torch.topk", "radix"))
    assert "ms" in rows[0]
    assert rows[1]["error"] == "check failed: values differ from torch.topk's in row 9; not timed"

    def indices_wrong_in_row_9(x, k, method="row", **kw):
        vals, idx = real(x, k, method)
        idx[9, 0] = (idx[9, 0] + 1) % x.shape[-1]
        return vals, idx

    monkeypatch.setattr(kt, "topk", indices_wrong_in_row_9)
    rows, _ = run(tmp_path, [("fp32", 5, 20)], methods=("two_stage",))
    assert rows[0]["error"] == "check failed: indices differ from a stable descending torch.sort's in row 9; not timed"


@CPU_ONLY
def test_a_kernel_that_does_not_build_is_a_row_that_says_so(tmp_path, monkeypatch):
    from triton.runtime.errors import OutOfResources

    import nbhelpers.kernels.topk as kt

    real = kt.topk

    def radix_too_big(x, k, method="row", **kw):
        if method == "radix":
            raise OutOfResources(300_000, 232_448, "shared memory")
        return real(x, k, method, **kw)

    monkeypatch.setattr(kt, "topk", radix_too_big)
    rows, _ = run(tmp_path, [("bf16", 8, 2)])
    assert [("error" in r) for r in rows] == [False, False, False, False, True]
    assert rows[-1]["error"].startswith("did not compile: OutOfResources: out of resource: shared memory")
    assert rows[-1]["checked_rows"] == 2 and "ms" not in rows[-1]


@CPU_ONLY
def test_a_call_too_slow_for_do_bench_keeps_its_one_call_time(tmp_path):
    timed = []
    rows, _ = run(
        tmp_path,
        [("bf16", 8, 2)],
        methods=("torch.topk", "row"),
        timer=lambda fn: timed.append(fn) or 0.5,
        probe_fn=lambda fn: 250.0 if len(timed) == 1 else 1.0,  # the row kernel's call takes 250 ms
    )
    assert "ms" in rows[0] and len(timed) == 1
    assert rows[1]["error"] == "not timed: one call took 250 ms, more than 100 ms" and rows[1]["call_ms"] == 250.0


@CPU_ONLY
def test_the_skipped_configurations_are_rows_the_reader_sees(tmp_path):
    rows, results = run(tmp_path, [("bf16", 256, 256)], methods=("torch.topk", "row"))
    assert "ms" in rows[0] and rows[1]["error"].startswith("skipped: the 'row' kernel inserts")
    results.finish()
    (back,) = recorded_topk(tmp_path)
    assert back["rows"][1]["method"] == "row" and back["rows"][1]["k"] == 256


@CPU_ONLY
def test_rows_past_the_time_limit_are_skipped_and_the_file_stays_valid(tmp_path):
    now = [0.0]

    def timer(fn):
        now[0] += 1.0  # each timing: 1 s of the fake clock
        return 0.5

    results = results_file(tmp_path)
    rows = bench.run_cases(
        [("bf16", 1, 1), ("bf16", 8, 1)],
        list(bench.METHODS),
        results,
        INFO.device,
        timer,
        time_limit=3,
        V=V,
        clock=lambda: now[0],
        probe_fn=lambda fn: 1.0,
    )
    assert ["ms" in r for r in rows] == [True] * 4 + [False] * 6
    assert all(r["error"] == "skipped: past the time limit of 3 s" for r in rows[4:])
    data = json.loads((tmp_path / "topk_test-gpu.json").read_text())
    assert data["meta"]["complete"] is False and len(data["rows"]) == 10
    assert len(recorded_topk(tmp_path)[0]["rows"]) == 10


@CPU_ONLY
def test_a_run_that_fails_halfway_keeps_its_rows(tmp_path):
    calls = []

    def timer(fn):
        calls.append(fn)
        if len(calls) == 7:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return 0.5

    with pytest.raises(RuntimeError, match="illegal memory access"):
        run(tmp_path, [("bf16", 1, 1), ("bf16", 1, 2)], timer=timer)
    data = json.loads((tmp_path / "topk_test-gpu.json").read_text())
    assert len(data["rows"]) == 6 and data["meta"]["complete"] is False
    (back,) = recorded_topk(tmp_path)
    assert [r["batch"] for r in back["rows"]] == [1] * 5 + [2]


# ------------------------------------------------------------------ gpu_report runs it


def load_report():
    spec = importlib.util.spec_from_file_location("gpu_report_for_topk", ROOT / "benchmarks" / "gpu_report.py")
    gr = importlib.util.module_from_spec(spec)
    sys.modules["gpu_report_for_topk"] = gr  # dataclasses look their module up by name
    spec.loader.exec_module(gr)
    return gr


def test_gpu_report_plans_the_script_within_its_budget():
    gr = load_report()
    try:
        assert PATH in gr.discover_benchmarks(ROOT)
        plan = gr.plan_steps("py", ("benchmarks",))
        (step,) = [s for s in plan if s.name == "gpu_topk"]
        assert step.argv == ["py", "benchmarks/gpu_topk.py", "--time-limit", "30"] and step.kind == "benchmark"
        args = bench.parse_args(step.argv[2:])  # whatever the report passes, the script takes
        assert args.time_limit < step.limit_s and step.expected_s <= step.limit_s
        # the bound the basis states: start-up, the time limit, the row in flight
        assert step.expected_s >= 10 + args.time_limit + 5 - 1e-9
        full = gr.plan_steps("py", jobs=16, modules=gr.REFERENCE_MACHINE["modules"])
        # every step expected within the budget (steps side by side count once)
        assert gr.expected_total_s(full) - gr.PROBE_S <= gr.DEFAULT_BUDGET_S
    finally:
        del sys.modules["gpu_report_for_topk"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_dry_run_lists_the_step():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    env.pop("OUT", None)
    r = subprocess.run(
        ["make", "--no-print-directory", "--dry-run", "gpu-report"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    step = r"\[benchmark\] gpu_topk \(expected 45 s, limit 50 s\): .*benchmarks/gpu_topk\.py --time-limit 30"
    assert re.search(step, r.stdout), r.stdout
    total = float(re.search(r"expected in all: (\d+) s", r.stdout).group(1))
    assert total <= 480  # one call of 8 minutes, the probe included
