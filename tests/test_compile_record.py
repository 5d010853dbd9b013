"""Tests of nbhelpers.tooling.compile_record, the pytest plugin with which the GPU run's kernel
tests record each kernel Triton compiles: the hooks are called here as Triton calls them (keyword
arguments only), since nothing compiles through a launch without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nbhelpers.tooling import compile_record

ROOT = Path(__file__).resolve().parents[1]


class FnInfo:
    module, name = "nbhelpers.kernels.copy", "copy_kernel"


def call(hook, key):
    return hook(
        key=key,
        repr="copy_kernel[num_warps=4](x_ptr: *fp32, n: i32)",
        fn=FnInfo(),
        compile={"key": key, "specialization_data": '{"name": "copy_kernel"}'},
        is_manual_warmup=False,
        already_compiled=False,
    )


def test_each_compile_is_one_line_with_its_seconds(tmp_path):
    path = tmp_path / "rec.jsonl"
    before, after = compile_record.make_hooks(path)
    assert call(before, ("a", 1)) is False  # Triton goes on and compiles
    call(after, ("a", 1))
    call(after, ("b", 2))  # a post-compile call without its first: seconds unknown, still a line
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kernel"] for r in rows] == ["nbhelpers.kernels.copy:copy_kernel"] * 2
    assert rows[0]["seconds"] >= 0 and rows[1]["seconds"] is None
    assert rows[0]["specialization"] == '{"name": "copy_kernel"}' and rows[0]["worker"]
    path.write_text(path.read_text() + '{"kernel": "x:y", "seconds": 2.5}\n{"trunc')
    s = compile_record.summarize(path)
    assert s["compiles"] == 3 and s["unreadable"] == 1 and s["per_kernel"]["x:y"] == 1
    assert s["seconds"] == round(rows[0]["seconds"] + 2.5, 1)


def test_the_plugin_does_nothing_without_its_variable(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_ok():\n    assert True\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "nbhelpers.tooling.compile_record", str(tmp_path / "test_x.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(tmp_path.glob("*.jsonl")) == []
