"""Tests of nbhelpers.results.recorded_compile_check, the reader of the compile check's results
file (benchmarks/results/compile_check.json) that chapter 09 reads: None when there is no file,
the rows with num_warps read from their config, malformed files named in the error. The files
are built by hand here."""

from __future__ import annotations

import json

import pytest

from nbhelpers.results import recorded_compile_check

META = {
    "triton": "3.7.1",
    "ptxas": "12.8",
    "date": "2026-01-02T03:04:05+00:00",
    "command": "python -m nbhelpers.compile_check",
    "machine": "a CPU, 2 cores",
}
OK = {
    "kernel": "matmul_kernel",
    "label": "bf16",
    "config": "128x128x64 w4 s4 (GROUP_M=8)",
    "target": "sm_90",
    "status": "ok",
    "registers": 226,
    "spill_stores": 0,
    "spill_loads": 0,
    "shared": 131072,
    "mma": "wgmma m64n128k16 f32.bf16.bf16",
    "cp_async": 64,
}
ERR = {
    "kernel": "scaled_matmul_kernel",
    "label": "e4m3 on sm_80",
    "config": "128x128x128 w8 s3",
    "target": "sm_80",
    "status": "error",
    "error": "fp8e4nv not supported",
}


def write(folder, doc):
    (folder / "compile_check.json").write_text(json.dumps(doc))


def test_missing_file_is_none(tmp_path):
    assert recorded_compile_check(tmp_path) is None


def test_rows_get_num_warps_from_their_config(tmp_path):
    write(tmp_path, {"meta": META, "rows": [OK, ERR, {**OK, "config": "64x64 w2 s1", "num_warps": 2}], "findings": []})
    run = recorded_compile_check(tmp_path)
    assert [r["num_warps"] for r in run["rows"]] == [4, 8, 2]
    assert run["meta"]["triton"] == "3.7.1" and run["path"].endswith("compile_check.json")
    assert run["rows"][1]["status"] == "error"  # an error row needs no registers


@pytest.mark.parametrize(
    "doc,match",
    [
        ({"meta": {k: v for k, v in META.items() if k != "ptxas"}, "rows": [OK]}, "missing ptxas"),
        ({"meta": META, "rows": [{k: v for k, v in OK.items() if k != "registers"}]}, r"missing rows\[0\]\.registers"),
        ({"meta": META, "rows": [{**OK, "config": "128x128x64"}]}, r"rows\[0\]\.num_warps"),
        ({"rows": [OK]}, "not a results file of nbhelpers.compile_check"),
        ({"meta": META, "rows": "x"}, "not a results file"),
    ],
)
def test_malformed_files_are_named(tmp_path, doc, match):
    write(tmp_path, doc)
    with pytest.raises(ValueError, match=match) as e:
        recorded_compile_check(tmp_path)
    assert "compile_check.json" in str(e.value)


def test_not_json(tmp_path):
    (tmp_path / "compile_check.json").write_text("{")
    with pytest.raises(ValueError, match="not a results file"):
        recorded_compile_check(tmp_path)
