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
    assert text.splitlines()[2] == "layers: deepseek K=7168 N=2048, small K=2048 N=1024"
    assert len(text.splitlines()) == 3 + 2 + 24
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
    assert text.splitlines()[0].endswith("17.6 us (small, E=256, T=1024); pairs at latency 0.5 / 1 us")
    # pairs (short / long latency) where the latency moves a value, one value where it does not
    deepseek = _line(text, "deepseek  256   1024").split()
    assert deepseek[5:] == "21.2 4.44 4.72 / 9.45 GPU 0% 1.14 / 0.57 0.96 1.18 / 0.59 HBM".split()
    # the host sets the model's loop on the row the least is read from, so its loop's miss is 1
    assert _line(text, "small  256   1024").split()[-6:] == "host 0% 1.00 1.08 0.93 HBM".split()


def test_a_split_k_loop_and_section_1_s_ratio(h100):
    text = grouped_report.split_k_text(h100)
    assert "host 4.44 ms (253 experts at 17.6 us), floor 7.58 GB at 3.02 TB/s = 2.51 ms" in text
    assert "ours measured 2.41 ms, the same bytes at 3.15 TB/s: split-K loop / ours about 1.84" in text
    assert text.endswith("by the bytes alone 1.04 at the fitted rate, 0.94 at the datasheet's")
    assert grouped_report.split_k_text(h100, E=3) == ""
    assert grouped_report.loop_over_ours_text(h100).splitlines() == [
        "deepseek E=256 T=1024: loop / ours measured 2.23, model 1.88 / 3.77",
        "deepseek E=256 T=4096: loop / ours measured 1.88, model 1.81 / 3.56",
    ]
    assert grouped_report.ours_host_text(h100) == (
        "ours' host at 17.6 us a launch: 9 launches = 158 us, above the model's GPU time on 2 of 24 rows: "
        "small E=64 T=1024 (0.152 ms measured), small E=8 T=1024 (0.290 ms measured)"
    )


def test_the_quotient_where_both_sides_are_compute_bound_gemms(h100):
    rows = grouped_report.cublas_rows(h100)
    assert len(rows) == 11
    assert ("small", 8, 1024) not in {(v["size"], v["E"], v["T"]) for v in rows}
    for i, span in ((0, "0.78-1.00"), (1, "0.74-1.00")):
        q = [v["quotient"][i] for v in rows]
        assert f"{min(q):.2f}-{max(q):.2f}" == span
    # the quotient is the loop's miss over ours'
    assert all(v["quotient"][0] == pytest.approx(v["loop_miss"][0] / v["ours_miss"][0]) for v in rows)
    text = grouped_report.misses_text(h100)
    assert text.splitlines()[0] == (
        "ours' miss moved by the latency on 0 rows; the model's loop is faster than measured on every row at "
        "0.5 us, slower on 6 at 1 us"
    )
    assert "ours HBM-bound, 6 rows, at 0.5 us: loop measured / model 1.00-1.84, ours measured / model 0.96-1.44" in text
    assert "  the model's loop set by the GPU: 13 rows, quotient 0.75-1.00 (at 1 us: 0.48-1.00)" in text
    assert text.splitlines()[-1] == (
        "  and its GPU time at least 80% compute-bound: 11 rows, quotient 0.78-1.00 (at 1 us: 0.74-1.00)"
    )
