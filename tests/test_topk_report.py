"""Chapter 11's top-k tables (:mod:`nbhelpers.topk_report`): each number they print is the one the
kernel module, the performance model, the occupancy model and the recorded files give, computed
again here the plain way."""

from __future__ import annotations

import copy
import re
from dataclasses import replace

import pytest

from nbhelpers.device import setup_device

setup_device(verbose=False)  # before the kernel module is imported

from nbhelpers import topk_report as tr
from nbhelpers.kernels import topk as ktk
from nbhelpers.occupancy import occupancy
from nbhelpers.perf_model import H100_SXM, H200, little_bytes
from nbhelpers.results import recorded_compile_check, recorded_topk

V = 128_256


@pytest.fixture(scope="module")
def tables():
    return [recorded_compile_check(name=n) for n in ("compile_check.json", "compile_check_triton-3.6.0.json")]


def _row(text: str, label: str) -> list[str]:
    """The cells of the table line whose first cell is ``label`` (split on 2+ spaces)."""
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] == label:
            return cells
    raise AssertionError(f"no row {label!r} in\n{text}")


def test_plans_text_prints_the_model_s_prediction_of_each_plan():
    cases = (("row", None), ("two_stage", 8192), ("two_stage", None))
    text = tr.plans_text(V, 50, cases)
    for method, chunk in cases:
        label = method if chunk is None else f"{method}, CHUNK={chunk}"
        us = 1e6 * sum(q.seconds for q in ktk.predicted(V, 50, method, chunk=chunk))
        cells = _row(text, label)
        assert cells[-2] == f"{us:.1f}"
        assert cells[2] == str(ktk.plan(V, 50, method, chunk=chunk)["n_chunks"])
    row = _row(text, "row")
    inserted, _ = ktk.expected_insertions([ktk.DEFAULT_BLOCK_V] * 125 + [V - 125 * ktk.DEFAULT_BLOCK_V], 64)
    assert row[3] == "126" and row[5] == f"{inserted:.0f}" and row[6] == "-"
    default = _row(text, "two_stage")
    assert default[6] == f"{ktk.plan(V, 50, 'two_stage')['n_chunks'] * 64:,}"
    # the latency binds none of them at batch 1 (instruction issue does): one prediction at both ends
    assert "predicted the same at a latency of 0.5 and 1 us" in text


def test_plans_text_says_so_when_the_latency_changes_a_prediction():
    slow = replace(H200, latency_s=20e-6)
    text = tr.plans_text(V, 50, (("row", None),), gpu=slow, latencies=(1e-6, 20e-6))
    assert "us apart" in text and "the same" not in text


def test_issue_text_names_the_model_s_cycles():
    text = tr.issue_text(H200)
    step, enter, insertion = ktk.ISSUE_CYCLES["topk_chunk_kernel"][64]
    assert f"a step {step}, entering _absorb {enter}, an insertion {insertion}" in text
    assert f"{ktk.ISSUE_CYCLES['topk_merge_kernel'][64][0]:,} a step of {ktk.MERGE_BLOCK:,}" in text
    assert f"{H200.issue_per_sm} schedulers per SM" in text


def test_compile_rows_keeps_the_course_s_sm_90_launches_at_k(tables):
    rows = tr.compile_rows(tables[0])
    assert rows and all(r["target"] == "sm_90" and ", k = 50," in r["label"] + "," for r in rows)
    assert {r["kernel"] for r in rows} == set(tr.TOPK_KERNELS)
    assert all(r["source"] != "solution" for r in rows)


def test_compile_text_derives_its_lines_from_the_tables(tables):
    text = tr.compile_text(tables, H200)
    for t in tables:
        assert f"Triton {t['meta']['triton']}, sm_90, k = 50:" in text
    # bf16 first stage, Triton 3.7.1: programs per SM x 2 blocks x 2 KiB against Little's law per SM
    first = next(r for r in tr.compile_rows(tables[0]) if r["label"].startswith("bf16") and "first stage" in r["label"])
    n = occupancy(first["registers"], first["num_warps"], first["shared"]).blocks
    kb = n * 2 * ktk.DEFAULT_BLOCK_V * 2 / 1e3
    assert f"{n} programs x 2 blocks = {kb:.1f} kB in flight per SM" in text
    assert f"Little's law asks {little_bytes(H200) / H200.sms / 1e3:.1f} kB" in text
    # the insertion's instructions (the inner loop) are a column of the table
    row = next(r for r in tr.compile_rows(tables[0]) if r["label"] == "bf16 logits, V = 128,256, k = 50, row")
    cells = _row(text.split("Triton 3.6.0")[0], "topk_chunk_kernel")
    assert cells[-2:] == [str(row["loops"][1]["instructions"]), str(row["loops"][1]["cycles"])]
    assert "the unguarded loop takes" in text


def test_chunk_text_marks_the_launcher_s_default(tables):
    text = tr.chunk_text(V, 50, (1, 256), (2048,), H200)
    assert "two_stage, default: 2048" in text
    assert f"two_stage, default: {ktk.plan(V, 50, 'two_stage', rows=256)['CHUNK']}" in text
    assert f"{little_bytes(H200) / 1e6:.1f} MB in flight" in text


def test_recorded_run_text_predicts_with_the_run_s_own_gpu():
    runs = recorded_topk()
    assert runs, "the recorded H100 run is part of the repository"
    run = runs[0]
    text = tr.recorded_run_text(run)
    assert "predicted us (H100 SXM model)" in text
    assert "the H200 model predicts the same for every Triton row (to 0.1%): True" in text
    # a made-up GPU the model has no datasheet for: no predictions, said so
    other = copy.deepcopy(run)
    other["meta"]["gpu"] = "NVIDIA A100-SXM4-80GB"
    text = tr.recorded_run_text(other)
    assert "predicted us (no model of this GPU)" in text and "H200 model predicts" not in text
    assert H100_SXM.name == "H100 SXM"
