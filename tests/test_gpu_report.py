"""Tests of benchmarks/gpu_report.py, the one prepared GPU run, and of its `make gpu-report` target.

Nothing here needs a GPU: the script's no-GPU stop is run for real (with CUDA hidden, so it stops
on a GPU runner too), and the orchestration (steps run one after the other under a time budget,
results files noticed, the summary and its copies) is run with small fake steps and a fake probe.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_report.py"

_spec = importlib.util.spec_from_file_location("gpu_report", SCRIPT)
gr = importlib.util.module_from_spec(_spec)
sys.modules["gpu_report"] = gr  # dataclasses look their module up by name
_spec.loader.exec_module(gr)

NO_GPU = {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}


def run_script(*args, env_extra=NO_GPU):
    env = {**os.environ, **env_extra}
    env.pop("OUT", None)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


def fake_info(**over):
    info = {
        "python": "3.12.3",
        "executable": "/usr/bin/python3",
        "cuda_available": True,
        "gpu": "NVIDIA Test GPU 80GB",
        "gpu_count": 1,
        "capability": "9.0",
        "sm_count": 132,
        "cuda": "13.0",
        "driver": "580.1",
        "versions": {"torch": "2.11.0+cu130", "triton": "3.6.0", "numpy": "2.1.0"},
        "modules": {m: True for m in ("torch", "triton", "numpy", "pytest", "pytest_timeout", *gr.NBVAL_MODULES)},
    }
    info.update(over)
    return info


# ------------------------------------------------------------------ the stop without a GPU


def test_without_a_gpu_it_lists_the_plan_and_stops_with_exit_code_2():
    r = run_script()
    assert r.returncode == 2, r.stdout + r.stderr
    assert "needs an NVIDIA GPU" in r.stderr and "Nothing was run" in r.stderr
    for step in ("[compile]", "[kernels]", "[benchmark]", "[nbval]"):
        assert step in r.stdout
    scripts = sorted((ROOT / "benchmarks").glob("gpu_*.py"))
    assert len(scripts) >= 2  # gpu_gemm_numerics.py and this report
    for script in scripts:
        listed = f"benchmarks/{script.name}" in r.stdout
        assert listed == (script.name != "gpu_report.py"), script.name  # every benchmark, not itself
    for test_file in ROOT.glob("tests/test_kernels_*.py"):
        assert f"tests/{test_file.name}" in r.stdout
    assert "NBHELPERS_REQUIRE_GPU=1" in r.stdout


def test_without_a_gpu_it_writes_nothing(tmp_path):
    before = sorted((ROOT / "benchmarks" / "results").iterdir())
    r = run_script("--out", str(tmp_path / "out"))
    assert r.returncode == 2
    assert sorted((ROOT / "benchmarks" / "results").iterdir()) == before
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_the_plan_and_runs_nothing():
    r = run_script("--dry-run", "--steps", "benchmarks,kernels")
    assert r.returncode == 0, r.stderr
    assert "dry run: nothing was run." in r.stdout
    assert r.stdout.index("[benchmark]") < r.stdout.index("[kernels]")  # --steps sets the order
    assert "[nbval]" not in r.stdout


def test_an_unknown_step_is_refused():
    r = run_script("--dry-run", "--steps", "kernels,lint")
    assert r.returncode == 2 and "unknown step 'lint'" in r.stderr


def test_a_python_that_cannot_run_is_reported():
    r = run_script("--python", "/nonexistent/python3")
    assert r.returncode == 2 and "cannot use --python" in r.stderr


# ------------------------------------------------------------------ the plan


def fake_repo(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    for name in ("gpu_b_copy.py", "gpu_a_gemm.py", "gpu_report.py", "bench_cpu.py"):
        (tmp_path / "benchmarks" / name).write_text("")
    (tmp_path / "tests" / "test_kernels_x.py").write_text("")
    (tmp_path / "tests" / "test_other.py").write_text("")
    for folder, names in (("notebooks", ("03_gemm.ipynb", "04_train.ipynb")), ("solutions", ("ex03_gemm.ipynb",))):
        (tmp_path / folder).mkdir()
        for name in names:
            (tmp_path / folder / name).write_text("{}")
    return tmp_path


def test_plan_finds_the_benchmarks_and_kernel_tests(tmp_path):
    root = fake_repo(tmp_path)
    assert [p.name for p in gr.discover_benchmarks(root)] == ["gpu_a_gemm.py", "gpu_b_copy.py"]
    plan = gr.plan_steps("py", root=root)
    assert [(s.kind, s.name) for s in plan] == [
        ("compile", "compile"),
        ("benchmark", "gpu_a_gemm"),
        ("benchmark", "gpu_b_copy"),
        ("kernels", "kernels"),
        ("nbval", "nbval"),
    ]
    kernels = plan[3].argv
    assert kernels[-1] == "tests/test_kernels_x.py" and "tests/test_other.py" not in kernels
    assert "-n" not in kernels  # no pytest-xdist known to be there
    assert plan[1].argv == ["py", "benchmarks/gpu_a_gemm.py"]
    nbval = plan[-1].argv
    # the chapters with a GPU path (03 is one, 04 is not) and their solutions
    assert nbval[-2:] == ["notebooks/03_gemm.ipynb", "solutions/ex03_gemm.ipynb"]
    assert "--nbval-current-env" in nbval and "--nbval-lax" in nbval
    assert plan[3].group == plan[4].group == "tests" and not plan[0].group  # the tests side by side
    assert [len(b) for b in gr.batches(plan)] == [1, 1, 1, 2]
    folders = gr.plan_steps("py", root=root, folders=["notebooks", "solutions", "exercises"])[-1].argv
    assert folders[-2:] == ["notebooks", "solutions"]  # as make test runs them, the folders that exist
    assert plan[0].argv[:3] == ["py", "-m", "nbhelpers.tooling.compile_cases"] and "--warm" in plan[0].argv


def test_plan_uses_the_hosts_cores_and_the_gpus_capability(tmp_path):
    plan = gr.plan_steps(
        "py", root=fake_repo(tmp_path), jobs=12, capability="8.0", gpu="NVIDIA A100-SXM4-80GB", modules={"xdist": True}
    )
    compile_argv, kernels_argv, nbval_argv = plan[0].argv, plan[3].argv, plan[4].argv
    assert compile_argv[compile_argv.index("--target") + 1] == "sm_80"
    assert compile_argv[compile_argv.index("--jobs") + 1] == "12"
    assert compile_argv[-1] == "benchmarks/results/compile_check_nvidia-a100-sxm4-80gb.json"
    # side by side: nbval gets a quarter of the cores (at most 4 workers), the kernel tests the rest
    assert kernels_argv[kernels_argv.index("-n") + 1] == "9" and nbval_argv[nbval_argv.index("-n") + 1] == "3"
    alone = gr.plan_steps("py", steps=("kernels",), root=fake_repo(tmp_path / "b"), jobs=12, modules={"xdist": True})
    assert alone[0].argv[alone[0].argv.index("-n") + 1] == "12" and not alone[0].group


def test_the_benchmarks_get_their_time_limits():
    plan = {s.name: s for s in gr.plan_steps("py", steps=("benchmarks",))}
    for name, bp in gr.BENCHMARK_PLAN.items():
        step = plan[name]  # every planned script exists
        assert step.limit_s == bp["limit"] and step.expected_s <= step.limit_s
        if bp["time_limit"] is not None:
            assert step.argv[-2:] == ["--time-limit", f"{bp['time_limit']:g}"]
            assert bp["time_limit"] < bp["limit"]  # the script stops starting cases before it is killed


def test_dry_run_expects_every_step_within_eight_minutes_on_the_h200():
    """The plan for the reference machine (no GPU here): every step has an expected time (nbval's
    from the notebooks' recorded CPU times, the compile step's from the recorded compile times),
    and with the probe, the kernel tests and nbval side by side, they add up to at most 480 s."""
    r = run_script("--dry-run")
    assert r.returncode == 0, r.stderr
    m = re.search(r"expected in all: (\d+) s = [\d.]+ min( \+ [\w, ]+)? \(", r.stdout)
    assert m and m.group(2) is None, r.stdout  # no step without an expected time
    total = float(m.group(1))
    assert total <= gr.PLAN_MAX_S == 480, r.stdout
    assert "H200 host with 16 cores" in r.stdout
    assert re.search(r"\[compile\] compile \(expected \d+ s", r.stdout)
    assert "cold cache, measured with Triton" in r.stdout
    assert "-n 12" in r.stdout and "-n 4 --dist loadfile" in r.stdout  # kernels and nbval share 16 cores
    assert "side by side, sharing the cores (kernels and nbval)" in r.stdout
    plan = gr.plan_steps("py", jobs=16, modules=gr.REFERENCE_MACHINE["modules"])
    assert round(gr.expected_total_s(plan)) == total
    assert all(s.expected_s is not None and s.expected_s <= s.limit_s for s in plan)
    assert gr.PROBE_S + gr.DEFAULT_BUDGET_S <= gr.PLAN_MAX_S  # the budget itself fits the call


def test_every_gpu_notebook_has_a_recorded_cpu_time():
    """The nbval step's estimate rests on a time for each notebook it runs: a new chapter with a GPU
    path needs its time recorded (NBVAL_CPU_S)."""
    paths = gr.gpu_notebooks()
    assert paths and set(paths) == set(gr.NBVAL_CPU_S)
    assert {p.split("/")[1][:2] for p in paths if p.startswith("notebooks/")} == set(gr.gpu_chapters())


def test_expected_compile_time_comes_from_the_recorded_compile_times(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    rows = [{"target": "sm_90", "compile_s": 4.0}] * 8 + [{"target": "sm_80", "compile_s": 100.0}]
    (tmp_path / "benchmarks" / "results" / "compile_check.json").write_text(
        json.dumps({"meta": {"triton": "3.7.1", "machine": "test", "date": "2026-12-01"}, "rows": rows})
    )
    s, basis = gr.expected_compile_s(16, tmp_path)
    assert s == 32 / 16 + 10 and "8 sm_90 compiles of 32 s" in basis
    assert gr.expected_compile_s(16, tmp_path / "nowhere")[0] is None


def test_the_kernel_tests_record_their_compiles_and_the_next_plan_reads_them(tmp_path):
    """The kernels step loads the compile recorder with its file named for the GPU; with no record
    its estimate is the stated guess at the recorded mean compile time, with one, the record's."""
    root = fake_repo(tmp_path)
    (root / "benchmarks" / "results" / "compile_check.json").write_text(
        json.dumps({"meta": {}, "rows": [{"target": "sm_90", "compile_s": 2.0}] * 4})
    )
    step = gr.plan_steps("py", steps=("kernels",), root=root, jobs=10, gpu="NVIDIA H200", modules={"xdist": True})[0]
    assert "nbhelpers.tooling.compile_record" in step.argv
    assert step.env == {"NBHELPERS_COMPILE_RECORD": "benchmarks/results/kernel_test_compiles_nvidia-h200.jsonl"}
    assert step.expected_s == min(round(gr.KERNEL_TEST_COMPILES * 2.0 / 10 + 30, 1), step.limit_s)
    assert "mean of 2.00 s" in step.basis and "estimate" in step.basis
    rows = [{"kernel": "m:k", "seconds": 4.0}] * 50
    (root / "benchmarks" / "results" / "kernel_test_compiles_nvidia-h200.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    step = gr.plan_steps("py", steps=("kernels",), root=root, jobs=10, gpu="NVIDIA H200", modules={"xdist": True})[0]
    assert step.expected_s == 200 / 10 + 30 and "measured: 50 compiles of 200 s" in step.basis


def test_the_pytest_plugins_the_config_needs():
    assert gr.pytest_plugins_needed(ROOT) == ["pytest_timeout"]  # pyproject.toml sets `timeout`


def test_a_missing_plugin_is_a_missing_step_not_a_pytest_crash(tmp_path):
    """Without pytest-timeout the kernels step is not started (pytest would stop at start-up on
    the unknown `timeout` option): it is recorded as missing, with the pip install that adds it."""
    results = tmp_path / "results"
    results.mkdir()
    py = sys.executable
    plan = [gr.Step("kernels", "kernels", [py, "-c", "raise SystemExit(3)"], 60, needs=("pytest", "pytest_timeout"))]
    info = fake_info()
    info["modules"]["pytest_timeout"] = False
    rc = gr.run_report(plan, info, dict(os.environ), "cmd", budget=30.0, python=py, results_dir=results, cwd=tmp_path)
    s = json.loads((results / "gpu_report_nvidia-test-gpu-80gb.json").read_text())
    (step,) = s["steps"]
    assert step["status"] == "missing" and step["exit_code"] is None
    assert "pytest_timeout" in step["note"] and "pip install pytest-timeout" in step["note"]
    assert rc == 0 and s["status"] == "incomplete"


def test_nbval_arguments_are_those_of_make_test():
    makefile = (ROOT / "Makefile").read_text()
    args = re.search(r"^NBVAL_ARGS\s*:=\s*((?:.*\\\n)*.*)$", makefile, re.MULTILINE).group(1)
    assert args.replace("\\\n", " ").split() == gr.NBVAL_ARGS


def test_step_environment_demands_the_gpu_and_drops_the_interpreter():
    env = gr.step_env(Path("/repo"), {"TRITON_INTERPRET": "1", "PYTHONPATH": "/site", "NBHELPERS_DEVICE": "cpu"})
    assert "TRITON_INTERPRET" not in env
    assert env["NBHELPERS_DEVICE"] == "cuda" and env["NBHELPERS_REQUIRE_GPU"] == "1"
    assert env["PYTHONPATH"] == os.pathsep.join(["/repo", "/site"])


def test_nbval_missing_message_names_what_is_missing_and_the_command():
    info = fake_info()
    info["modules"].update(nbval=False, ipykernel=False)
    missing = gr.missing_for_nbval(info["modules"])
    assert missing == ["nbval", "ipykernel"]
    msg = gr.nbval_missing_message("python3", missing)
    assert "cannot import nbval, ipykernel" in msg
    assert "python3 -m pip install 'nbval>=0.11' ipykernel" in msg
    assert gr.missing_for_nbval(fake_info()["modules"]) == []


def test_probe_reports_this_python():
    info = gr.probe(sys.executable, {**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    assert info["modules"]["pytest"] is True and info["cuda_available"] is False
    assert info["versions"]["pytest"] == pytest.__version__


# ------------------------------------------------------------------ running steps


def test_run_step_records_status_exit_code_output_and_results_files(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "old.json").write_text("{}")
    code = f"import pathlib; pathlib.Path({str(results / 'x_gpu.json')!r}).write_text('{{}}'); print('measured')"
    step = gr.Step("gpu_x", "benchmark", [sys.executable, "-c", code], 60)
    r = gr.run_step(step, dict(os.environ), 60, results_dir=results, echo=False)
    assert (r.status, r.exit_code) == ("passed", 0)
    assert r.output_tail == ["measured"]
    assert r.results_files == [str(results / "x_gpu.json")]  # not the file that was there before

    r = gr.run_step(
        gr.Step("bad", "benchmark", [sys.executable, "-c", "raise SystemExit(3)"], 60),
        dict(os.environ),
        60,
        results_dir=results,
        echo=False,
    )
    assert (r.status, r.exit_code, r.results_files) == ("failed", 3, [])


def test_run_step_stops_a_step_at_its_limit(tmp_path):
    step = gr.Step(
        "slow", "benchmark", [sys.executable, "-c", "import time; print('start', flush=True); time.sleep(60)"], 60
    )
    r = gr.run_step(step, dict(os.environ), 1.0, results_dir=tmp_path, echo=False)
    assert r.status == "timeout" and r.duration_s < 30 and r.output_tail == ["start"]


# ------------------------------------------------------------------ the summary


SUMMARY_FIELDS = {
    "gpu",
    "driver",
    "cuda",
    "capability",
    "python",
    "torch",
    "triton",
    "versions",
    "date",
    "command",
    "status",
    "steps",
    "results_files",
    "total_duration_s",
}
STEP_FIELDS = {"name", "kind", "command", "status", "exit_code", "duration_s", "results_files", "output_tail"}


def test_build_summary_has_the_documented_fields():
    steps = [
        gr.StepResult("kernels", "kernels", "py -m pytest", "passed", 0, duration_s=40.0),
        gr.StepResult(
            "gpu_x",
            "benchmark",
            "py benchmarks/gpu_x.py",
            "passed",
            0,
            duration_s=20.5,
            results_files=["benchmarks/results/x_nvidia-test-gpu-80gb.json"],
        ),
        gr.StepResult("nbval", "nbval", "py -m pytest --nbval-lax", "missing", note="no nbval"),
    ]
    s = gr.build_summary(fake_info(), steps, "python benchmarks/gpu_report.py", "2026-12-01T06:00:00+00:00")
    assert SUMMARY_FIELDS <= set(s)
    assert (s["gpu"], s["driver"], s["torch"], s["triton"], s["python"]) == (
        "NVIDIA Test GPU 80GB",
        "580.1",
        "2.11.0+cu130",
        "3.6.0",
        "3.12.3",
    )
    assert s["date"] == "2026-12-01T06:00:00+00:00" and s["command"] == "python benchmarks/gpu_report.py"
    assert s["results_files"] == ["benchmarks/results/x_nvidia-test-gpu-80gb.json"]
    assert s["total_duration_s"] == 60.5
    assert all(STEP_FIELDS <= set(step) for step in s["steps"])
    assert s["status"] == "incomplete"  # nbval missing: said, not hidden as "passed"
    steps[1].status = "timeout"
    assert gr.build_summary(fake_info(), steps, "c", "d")["status"] == "failed"
    assert gr.build_summary(fake_info(), steps[:1], "c", "d")["status"] == "passed"
    assert gr.build_summary(fake_info(), steps[:1], "c", "d", finished=False)["status"] == "running"


def test_summary_file_name_uses_the_results_slug():
    sys.path.insert(0, str(ROOT))
    from nbhelpers.results import gpu_slug

    for name in ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB"):
        assert gr.gpu_slug(name) == gpu_slug(name)
    path, log = gr.summary_paths("NVIDIA H200", Path("r"))
    assert (path, log) == (Path("r/gpu_report_nvidia-h200.json"), Path("r/gpu_report_nvidia-h200.log"))


def test_write_summary_copies_it_and_archives_the_results_files_in_out(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    res = tmp_path / "benchmarks" / "results" / "x_gpu.json"
    res.write_text("{}")
    log = tmp_path / "benchmarks" / "results" / "gpu_report_gpu.log"
    log.write_text("log")
    summary = {"results_files": ["benchmarks/results/x_gpu.json"], "gpu": "g"}
    path = tmp_path / "benchmarks" / "results" / "gpu_report_gpu.json"
    copies = gr.write_summary(summary, path, tmp_path / "out", extra_files=[log], root=tmp_path)
    assert json.loads(path.read_text()) == summary
    assert sorted(p.name for p in copies) == ["gpu_report_gpu.json", "gpu_report_gpu.log", "gpu_report_gpu.tar.gz"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in copies)
    import tarfile

    # by their paths in the repository: extracted at its root, each lands where the run wrote it
    with tarfile.open(tmp_path / "out" / "gpu_report_gpu.tar.gz") as tar:
        assert sorted(tar.getnames()) == [
            "benchmarks/results/gpu_report_gpu.json",
            "benchmarks/results/gpu_report_gpu.log",
            "benchmarks/results/x_gpu.json",
        ]
    assert gr.write_summary(summary, path) == []  # no out folder, no copies


def test_run_report_runs_the_steps_in_order_within_the_budget(tmp_path, capsys):
    """The whole loop with a fake GPU: two passing steps, one failing, nbval missing, one left
    without time; the summary (written after every step) and its copies in the out folder."""
    results, out = tmp_path / "results", tmp_path / "out"
    results.mkdir()
    py = sys.executable
    write = f"import pathlib; pathlib.Path({str(results / 'a_gpu.json')!r}).write_text('1')"
    plan = [
        gr.Step("kernels", "kernels", [py, "-c", "print('3 passed')"], 60),
        gr.Step("gpu_a", "benchmark", [py, "-c", write], 60),
        gr.Step("gpu_b", "benchmark", [py, "-c", "import time; time.sleep(4); raise SystemExit(1)"], 60),
        gr.Step("gpu_c", "benchmark", [py, "-c", "print('never')"], 60),
        gr.Step("nbval", "nbval", [py, "-m", "pytest"], 60, needs=("pytest", *gr.NBVAL_MODULES)),
    ]
    info = fake_info()
    info["modules"]["nbval"] = False
    rc = gr.run_report(
        plan,
        info,
        dict(os.environ),
        "python benchmarks/gpu_report.py",
        budget=8.0,
        python=py,
        results_dir=results,
        out_dir=out,
        cwd=tmp_path,
    )
    assert rc == 1  # gpu_b failed
    s = json.loads((results / "gpu_report_nvidia-test-gpu-80gb.json").read_text())
    assert [(st["name"], st["status"]) for st in s["steps"]] == [
        ("kernels", "passed"),
        ("gpu_a", "passed"),
        ("gpu_b", "failed"),
        ("gpu_c", "skipped"),
        ("nbval", "missing"),
    ]
    assert s["steps"][2]["exit_code"] == 1 and s["steps"][0]["output_tail"] == ["3 passed"]
    assert s["results_files"] == [str(results / "a_gpu.json")] and s["finished"] is True
    assert "cannot import nbval" in s["steps"][4]["note"]
    # the summary and the log, and one archive of everything: three files, whatever ran
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_report_nvidia-test-gpu-80gb.json",
        "gpu_report_nvidia-test-gpu-80gb.log",
        "gpu_report_nvidia-test-gpu-80gb.tar.gz",
    ]
    import tarfile

    with tarfile.open(out / "gpu_report_nvidia-test-gpu-80gb.tar.gz") as tar:
        # outside the repository, by name; a results file under it keeps its path there
        assert sorted(tar.getnames()) == [
            "a_gpu.json",
            "gpu_report_nvidia-test-gpu-80gb.json",
            "gpu_report_nvidia-test-gpu-80gb.log",
        ]
        assert tar.extractfile("a_gpu.json").read() == b"1"
    log = (results / "gpu_report_nvidia-test-gpu-80gb.log").read_text()
    assert "3 passed" in log and "time budget of 8 s used up" in log
    printed = capsys.readouterr().out
    assert "gpu-report on NVIDIA Test GPU 80GB: failed" in printed


def test_steps_of_one_group_run_side_by_side_and_the_budget_cuts_them(tmp_path, capsys):
    """The kernel tests and nbval run at the same time: the run takes the longer of the two, not
    their sum; a step the budget stops before its own limit is cut (the run incomplete, not
    failed), one that runs past its own limit timed out (failed)."""
    results = tmp_path / "results"
    results.mkdir()
    py = sys.executable
    sleep = "import time; print('start', flush=True); time.sleep({})"
    plan = [
        gr.Step("kernels", "kernels", [py, "-c", sleep.format(2)], 60, group="tests"),
        gr.Step("nbval", "nbval", [py, "-c", sleep.format(60)], 60, group="tests"),
    ]
    rc = gr.run_report(
        plan, fake_info(), dict(os.environ), "cmd", budget=8.0, python=py, results_dir=results, cwd=tmp_path
    )
    s = json.loads((results / "gpu_report_nvidia-test-gpu-80gb.json").read_text())
    assert [(st["name"], st["status"]) for st in s["steps"]] == [("kernels", "passed"), ("nbval", "cut")]
    assert rc == 0 and s["status"] == "incomplete" and "time budget ran out" in s["steps"][1]["note"]
    assert 7 < s["total_duration_s"] < 15  # side by side: about the budget, not 2 s + 8 s in turn
    log = (results / "gpu_report_nvidia-test-gpu-80gb.log").read_text()
    assert "[kernels] start" in log and "[nbval] start" in log  # each line says whose it is

    own_limit = [gr.Step("nbval", "nbval", [py, "-c", sleep.format(60)], 1.0)]
    rc = gr.run_report(
        own_limit, fake_info(), dict(os.environ), "cmd", budget=30.0, python=py, results_dir=results, cwd=tmp_path
    )
    s = json.loads((results / "gpu_report_nvidia-test-gpu-80gb.json").read_text())
    assert rc == 1 and s["steps"][0]["status"] == "timeout" and s["status"] == "failed"


def test_check_rehearsal_counts_the_files_a_collector_brings_back(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    summary = tmp_path / "gpu_report_x.json"
    assert gr.check_rehearsal(out, summary) == ["expected one archive in " + str(out) + ", found 0"]
    # what the report once copied: the summary, the log, a compile table and six results files
    for i in range(9):
        (out / f"file{i}.json").write_text("{}")
    problems = gr.check_rehearsal(out, summary)
    assert any("9 files" in p and "8 a collector brings back" in p for p in problems)
    (out / "bad.tar.gz").write_bytes(b"not an archive")
    assert any("bad.tar.gz unreadable" in p for p in gr.check_rehearsal(out, summary))


def test_the_rehearsal_runs_the_whole_report_on_a_cpu(tmp_path):
    """`gpu_report.py --rehearse`: the report's own loop over the plan's steps, each a small real
    thing on this CPU (a compile for sm_90, stand-ins that write results files, one kernel test
    in the interpreter, a notebook under nbval that outlasts the budget), and what $OUT then holds.
    Nothing is written to the repository's results folder."""
    before = sorted((ROOT / "benchmarks" / "results").iterdir())
    results, out = tmp_path / "results", tmp_path / "out"
    r = run_script("--rehearse", "--results-dir", str(results), "--out", str(out), "--budget", "60")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    s = json.loads((results / "gpu_report_cpu-rehearsal.json").read_text())
    status = {st["name"]: st["status"] for st in s["steps"]}
    benchmarks = [p.stem for p in gr.discover_benchmarks()]
    assert list(status) == ["compile", *benchmarks, "kernels", "nbval"]  # the real plan's steps, in order
    assert status["compile"] == "passed" and status["kernels"] == "passed" and status["nbval"] == "cut"
    assert status[benchmarks[0]] == "missing" and {status[b] for b in benchmarks[1:]} == {"passed"}
    assert s["status"] == "incomplete" and s["gpu"] == "CPU rehearsal"
    compiled = json.loads((results / "compile_check_cpu-rehearsal.json").read_text())
    assert len(compiled["rows"]) == 4 and all(row["status"] == "ok" for row in compiled["rows"])
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= gr.OUT_MAX_FILES and "rehearsal: 3 files" in r.stdout and ": ok" in r.stdout
    import tarfile

    with tarfile.open(out / "gpu_report_cpu-rehearsal.tar.gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"gpu_report_cpu-rehearsal.json", "compile_check_cpu-rehearsal.json"} <= names
    assert {f"{b.removeprefix('gpu_')}_cpu-rehearsal.json" for b in benchmarks[1:]} <= names
    assert sorted((ROOT / "benchmarks" / "results").iterdir()) == before


# ------------------------------------------------------------------ Makefile and README


def test_makefile_has_a_gpu_report_target_that_runs_the_script_without_installing():
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^gpu-report:(.*)\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert target, "no 'gpu-report' target"
    prerequisites, recipe = target.group(1).split(), target.group(2)
    assert "install" not in prerequisites  # it must not reinstall torch on the GPU machine
    assert "benchmarks/gpu_report.py" in recipe and "--python $(GPU_PYTHON)" in recipe
    assert re.search(r"^#\s+make gpu-report\s", makefile, re.MULTILINE)  # the help line at the top
    assert re.search(r"^\.PHONY:.*\bgpu-report\b", makefile, re.MULTILINE)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_gpu_report_stops_without_a_gpu():
    env = {**os.environ, **NO_GPU}
    env.pop("OUT", None)
    r = subprocess.run(
        ["make", "--no-print-directory", "gpu-report"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert r.returncode != 0
    assert "needs an NVIDIA GPU" in r.stderr and "[kernels]" in r.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_dry_run_prints_the_reports_plan_with_its_expected_times():
    """`make --dry-run gpu-report` runs the report's own --dry-run (the recipe is marked to run under
    -n): the plan and its expected times, on any machine, with nothing measured."""
    env = {**os.environ, **NO_GPU}
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
    assert "expected in all:" in r.stdout and "dry run: nothing was run." in r.stdout


def test_readme_documents_the_gpu_report():
    readme = (ROOT / "README.md").read_text()
    benchmarks = readme.split("\n## Benchmarks", 1)[1].split("\n## ", 1)[0]
    assert "make gpu-report" in benchmarks
    assert "python3 benchmarks/gpu_report.py --python" in benchmarks
    assert "benchmarks/results/gpu_report_" in benchmarks
