"""nbhelpers.grouped_report: chapter 10's section 5 on the recorded H100 run (the numbers the
chapter's prose quotes), the same text with no run recorded, and a run on a GPU the model does not
know."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from nbhelpers.device import setup_device

setup_device(verbose=False)

from nbhelpers import grouped_report
from nbhelpers.results import recorded_grouped_gemm

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def runs():
    found = recorded_grouped_gemm(RESULTS)
    assert [r["meta"]["gpu"] for r in found] == [H100]
    return found


@pytest.fixture(scope="module")
def h100(runs):
    models = grouped_report.run_models(runs, RESULTS)
    assert list(models) == [H100]
    return models[H100]


def _line(text: str, start: str) -> str:
    (line,) = [t for t in text.splitlines() if t.strip().startswith(start)]
    return line


# ---------------------------------------------------------------- nothing recorded


def test_no_run_recorded_says_how_to_make_one():
    assert grouped_report.runs_text([]) == grouped_report.NOT_RECORDED
    assert "python benchmarks/gpu_grouped_gemm.py" in grouped_report.NOT_RECORDED
    assert grouped_report.padded_even_rows([]) == []
    assert grouped_report.padded_text([]).startswith("no recorded run")
    assert grouped_report.run_models([], RESULTS) == {}
    assert grouped_report.models_text([], {}) == ""


def test_a_gpu_without_a_datasheet_is_named_and_skipped(runs):
    other = copy.deepcopy(runs[0])
    other["meta"]["gpu"] = "NVIDIA A100-SXM4-80GB"
    assert grouped_report.padded_even_rows([other]) == []
    assert grouped_report.run_models([other], RESULTS) == {}
    assert (
        grouped_report.models_text([other], {}) == "NVIDIA A100-SXM4-80GB: no datasheet, fit or compile table: skipped"
    )
    # and the run's own table still prints
    assert grouped_report.runs_text([other]).startswith("recorded: NVIDIA A100-SXM4-80GB")


# ---------------------------------------------------------------- the recorded H100 run


def test_the_runs_table(runs):
    text = grouped_report.runs_text(runs)
    assert text.splitlines()[2] == "timer: triton.testing.do_bench (median ms)"
    assert text.splitlines()[3] == "layers: deepseek K=7168 N=2048, small K=2048 N=1024"
    assert len(text.splitlines()) == 4 + 2 + 24
    # loop / ours 2.23 on DeepSeek-V3's layer at E = 256, 1k tokens; the flagged row's 0.22
    assert _line(text, "deepseek  256   1024").split()[-3:] == ["2.23", "1.2", "1.11"]
    assert _line(text, "small    8   1024").split()[-1] == "0.22"


def test_the_padded_batch_on_the_even_load(runs):
    rows = grouped_report.padded_even_rows(runs)
    assert [(r["size"], r["E"]) for r in rows] == [("deepseek", 8)] * 4 + [("small", 8)] * 4
    assert all(r["rows_ratio"] == pytest.approx(1.25) for r in rows)
    lost = grouped_report.padded_over_loop(rows)
    assert f"{min(lost):.2f}-{max(lost):.2f}" == "1.94-4.76"
    text = grouped_report.padded_text(rows)
    assert "the padded batch took 1.94-4.76x the loop's time; the napkin accounts for 0.36-0.80 of it" in text
    assert "  deepseek: copies 0.784-25.1 GB a call, napkin / padded 0.63-0.80" in text
    assert "  small: copies 0.26-8.32 GB a call, napkin / padded 0.36-0.66" in text


def test_the_model_of_the_run_s_gpu(runs, h100):
    assert h100.flagged == {("small", 8, 1024)}
    assert sorted(h100.fitted) == [0.5e-6, 1e-6]
    assert len(h100.sheet) == len(h100.short) == len(h100.long) == len(h100.misses) == 24
    text = grouped_report.models_text(runs, {H100: h100})
    assert text.splitlines()[0] == "fitted: torch copy: 3.02 TB/s; torch.matmul bf16 8192x1024x8192: 758 TFLOP/s"
    assert _line(text, "small    8   1024").endswith("6.4  compute  slower than at next T")
    assert "ours' host, datasheet: 9 launches x 5 us = 45 us; the GPU time longer on 23 of 24 rows" in text
    assert "ours' host, fitted: 9 launches x 5 us = 45 us; the GPU time longer on 24 of 24 rows" in text
    # the table is at the long latency; ours' model does not move with it
    assert text.splitlines()[-1] == "ours fitted at 0.5 us: the same time and bound as at 1 us on 24 of 24 rows"


def test_ours_measured_over_fitted_by_bound(h100):
    text = grouped_report.ours_miss_text(h100)
    assert "best 758 TFLOP/s at 8192x1024x8192 (the fitted rate); 680 at 8192^3" in text
    assert "HBM-bound, 6 rows: measured / fitted 0.96-1.44" in text
    assert "compute-bound, 17 rows: measured / fitted 1.18-1.70; without the highest 1.18-1.55" in text
    # the compute-bound row missed most, beside the same routed rows at the other E
    assert "deepseek E=64 T=4096: 32768 rows, ours 420 TFLOP/s, measured / fitted 1.70 (compute), 0.757" in text
    assert "deepseek E=8 T=4096: 32768 rows, ours 568 TFLOP/s, measured / fitted 1.33 (compute)" in text


def test_the_loop_s_host_cost_per_expert(h100):
    # the least time per active expert: the smaller layer's 253 experts at 1k tokens, 4.44 ms
    assert h100.host_row == ("small", 256, 1024)
    assert f"{h100.host_us:.1f}" == "17.6"
    row = next(r for r in h100.short if (r["size"], r["E"], r["T"]) == h100.host_row)
    assert h100.host_us == pytest.approx(row["loop_ms"] * 1e3 / row["active"])
    text = grouped_report.loop_text(h100)
    assert text.splitlines()[0].endswith(
        "17.6 us (small, E=256, T=1024), 3.5 times the model's 5 us a launch; the model at latency 0.5 us"
    )
    assert _line(text, "deepseek  256   1024").split()[5:] == "21.2 4.44 4.72 GPU".split()
    assert _line(text, "deepseek    8   1024").split()[5:] == "41.2 0.14 0.317 GPU".split()
    # the host sets the model's loop on the row the least is read from
    assert _line(text, "small  256   1024").split()[-3:] == "4.44 1.35 host".split()
    # at 1 us the model's loop alone outlasts the measured loop on six rows: that latency is ruled out
    assert text.splitlines()[-1] == (
        "the model's loop GPU time alone longer than the measured loop: 0 of 24 rows at 0.5 us; 6 of 24 rows "
        "at 1 us (deepseek E=256 T=1024, 4096, 16384, 32768; deepseek E=64 T=1024, 4096)"
    )


def test_a_split_k_loop_and_section_1_s_ratio(h100):
    text = grouped_report.split_k_text(h100)
    assert "host 4.44 ms (253 experts at 17.6 us), floor 7.58 GB at 3.02 TB/s = 2.51 ms" in text
    assert "ours measured 2.41 ms, the same bytes at 3.15 TB/s: split-K loop / ours about 1.84" in text
    assert text.endswith("by the bytes alone 1.04 at the fitted rate, 0.94 at the datasheet's")
    assert grouped_report.split_k_text(h100, E=3) == ""
    assert grouped_report.loop_over_ours_text(h100).splitlines() == [
        "deepseek E=256 T=1024: loop / ours measured 2.23, model 1.88 at 0.5 us",
        "deepseek E=256 T=4096: loop / ours measured 1.88, model 1.81 at 0.5 us",
    ]
    assert grouped_report.ours_host_text(h100) == (
        "ours' host at 17.6 us a launch: 9 launches = 158 us, above the model's GPU time on 2 of 24 rows: "
        "small E=64 T=1024 (0.152 ms measured), small E=8 T=1024 (0.290 ms measured)"
    )


def test_the_measured_verdict_split_by_what_bounds_ours(h100):
    v = grouped_report.verdict(h100)
    assert {b: len(xs) for b, xs in v["grouped_mm"].items()} == {"HBM": 6, "compute": 17}
    assert v["flagged"] == {("small", 8, 1024): pytest.approx(0.22, abs=0.005)}
    assert list(v["loop"])[:2] == [(256, "deepseek"), (256, "small")]
    assert v["targets"] == {"ours_vs_loop": (5, 8), "ours_vs_padded": (16, 16), "ours_vs_grouped_mm": (21, 24)}
    text = grouped_report.verdict_text(h100)
    assert "  ours HBM-bound, 6 rows: 1.03-1.44, ours faster on 6" in text
    assert "  ours compute-bound, 17 rows: 0.76-1.02, ours faster on 1" in text
    assert "  flagged, small E=8 T=1024: 0.22" in text
    assert "  E=256: deepseek 1.07-2.23, small 2.39-11.2" in text
    assert "  E=8: deepseek 0.78-0.95, small 0.81-1.00" in text
    assert "padded / ours: 1.20-4.03, ours faster on 24 of 24 rows" in text
    assert text.splitlines()[-1] == (
        "targets met: loop / ours >= 2 at E=256 on 5 of 8 rows; padded / ours > 1 on 16 of 16 uneven rows; "
        "grouped_mm / ours >= 0.8 on 21 of 24 rows"
    )


def test_grouped_mm_against_ours_by_the_mean_rows_per_expert(h100):
    v = grouped_report.rows_per_expert(h100)
    assert v["split"] == grouped_report.GROUPED_MM_SMALL_M == 128
    assert list(v["by_mean"]) == [32, 128, 512, 1024, 2048, 4096, 16384, 32768]
    # T k / E for every row: top-8 routing
    assert all(r["mean"] == r["T"] * 8 / r["E"] for rs in v["by_mean"].values() for r in rs)
    # ours ahead on every row at <= 128 rows per expert, and those are the rows where ours is HBM-bound
    assert [(r["size"], r["E"], r["T"]) for r in v["at_most"]] == [
        ("deepseek", 256, 1024),
        ("deepseek", 256, 4096),
        ("deepseek", 64, 1024),
        ("small", 256, 1024),
        ("small", 256, 4096),
        ("small", 64, 1024),
    ]
    assert all(r["ratio"] > 1 and r["bound"] == "HBM" for r in v["at_most"])
    assert len(v["above"]) == 17 and all(r["bound"] == "compute" for r in v["above"])
    text = grouped_report.rows_per_expert_text(h100)
    assert _line(text, "32768").split() == ["32768", "2", "0.97-1.02", "1", "compute"]
    assert "at most 128 (32-128), 6 rows: 1.03-1.44, ours faster on 6; ours HBM-bound on 6" in text
    assert (
        "above 128 (512-32768), 17 rows: 0.76-1.02, ours faster on 1 (deepseek E=8 T=32768); ours HBM-bound on 0"
        in text
    )
    # the split-K line's 3.15 TB/s is the top of ours' range here
    assert text.splitlines()[-1].endswith(
        "ours 2.10-3.15 TB/s, grouped_mm 1.85-2.85 TB/s; torch's copy 3.02 TB/s (the fitted HBM rate)"
    )


def test_ours_against_cublas_where_the_loop_is_compute_bound_gemms(h100):
    rows = grouped_report.cublas_rows(h100)
    # the loop's GEMMs all compute-bound at both latencies: the eight-expert rows, the flagged one out
    assert [(v["size"], v["E"], v["T"]) for v in rows] == [("deepseek", 8, T) for T in (1024, 4096, 16384, 32768)] + [
        ("small", 8, T) for T in (4096, 16384, 32768)
    ]
    # there the model's loop and its ours are the same work at the same rates: nothing to divide out
    assert all(x == pytest.approx(1, abs=0.005) for v in rows for x in v["model"])
    measured = [v["loop_over_ours"] for v in rows]
    assert f"{min(measured):.2f}-{max(measured):.2f}" == "0.78-1.00"
    text = grouped_report.cublas_text(h100)
    assert "  the model's loop / its ours there: 1.00 at 0.5 us, 1.00 at 1 us" in text
    assert text.splitlines()[-1] == "  measured loop / ours there, ours against cuBLAS: 0.78-1.00"
    assert grouped_report.headline_text(h100).splitlines() == [
        f"{H100}: grouped_mm / ours 1.03-1.44 where ours is HBM-bound (6 rows), 0.76-1.02 where ours is "
        "compute-bound (17 rows)",
        f"{H100}: loop / ours at E=256: deepseek 1.07-2.23, small 2.39-11.2; padded / ours 1.20-4.03; ours "
        "against cuBLAS (loop / ours, 7 rows) 0.78-1.00",
    ]
