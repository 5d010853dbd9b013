"""Tests of nbhelpers.results: where the recorded results live (find_results_dir's search order,
also from a copy of the package outside the repository), GPU names as file names, and reading
the results files back (sorted, malformed files named).

nbhelpers.results imports no torch and no Triton; the files here are built by hand (a measured
run read back through recorded_gpu_runs: test_gpu_measurements.py).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, gpu_measurements, results_file_run

from nbhelpers import results
from nbhelpers.results import ENV_VAR, find_results_dir, gpu_slug, recorded_gpu_runs

REL = Path("benchmarks") / "results"


def series(method="Triton bf16", Ks=(32,)) -> list[dict]:
    """One series as measure_gemm_errors writes it (the keys a results file must have)."""
    n = len(Ks)
    return [
        {
            "method": method,
            "in_fmt": "bf16",
            "input_precision": "ieee",
            "out_fmt": "fp32",
            "K": list(Ks),
            "rel_error": [1e-3] * n,
            "rel_error_acc": [1e-6] * n,
        }
    ]


def fake_run(date: str, gpu: str = "Test GPU") -> dict:
    return results_file_run(date, series(), gpu)


# ------------------------------------------------------------------ gpu_slug


def test_gpu_slug():
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gpu_slug("  NVIDIA A100-SXM4-40GB ") == "nvidia-a100-sxm4-40gb"
    with pytest.raises(ValueError, match="file name"):
        gpu_slug("!!!")


# ------------------------------------------------------------------ reading results files


def test_recorded_gpu_runs_reads_sorts_and_rejects(tmp_path):
    assert recorded_gpu_runs(tmp_path) == []
    (tmp_path / "gemm_numerics_b.json").write_text(json.dumps(fake_run("2026-02-01T00:00:00+00:00")))
    (tmp_path / "gemm_numerics_a.json").write_text(json.dumps(fake_run("2026-03-01T00:00:00+00:00")))
    (tmp_path / "other.json").write_text("{}")  # not a gemm_numerics file: ignored
    runs = recorded_gpu_runs(tmp_path)
    assert [r["meta"]["date"][:7] for r in runs] == ["2026-02", "2026-03"]
    assert runs[0]["path"].endswith("gemm_numerics_b.json")
    broken = fake_run("2026-04-01")
    del broken["meta"]["gpu"]
    (tmp_path / "gemm_numerics_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"gemm_numerics_c\.json: missing gpu"):
        recorded_gpu_runs(tmp_path)
    (tmp_path / "gemm_numerics_c.json").write_text("not json")
    with pytest.raises(ValueError, match="not a results file"):
        recorded_gpu_runs(tmp_path)


def test_recorded_gpu_runs_names_missing_series_keys_and_unequal_lengths(tmp_path):
    run = fake_run("2026-02-01")
    del run["series"][0]["rel_error_acc"]
    (tmp_path / "gemm_numerics_x.json").write_text(json.dumps(run))
    with pytest.raises(ValueError, match=r"gemm_numerics_x\.json: not a results file"):
        recorded_gpu_runs(tmp_path)  # the length check needs the key: reported as not a results file
    run = fake_run("2026-02-01")
    run["series"][0]["rel_error"].append(0.5)
    (tmp_path / "gemm_numerics_x.json").write_text(json.dumps(run))
    with pytest.raises(ValueError, match="equal lengths of K and errors in 'Triton bf16'"):
        recorded_gpu_runs(tmp_path)
    run = fake_run("2026-02-01")
    del run["series"][0]["in_fmt"]
    (tmp_path / "gemm_numerics_x.json").write_text(json.dumps(run))
    with pytest.raises(ValueError, match=r"missing series\[0\]\.in_fmt"):
        recorded_gpu_runs(tmp_path)


def test_committed_results_files_parse():
    runs = recorded_gpu_runs(ROOT / REL)
    if runs:  # [] until a GPU run is recorded
        methods = set(gpu_measurements().GPU_METHODS)
    for run in runs:
        assert run["meta"]["script"] == "benchmarks/gpu_gemm_numerics.py"
        assert {s["method"] for s in run["series"]} == methods


def test_importing_results_imports_no_torch_or_triton():
    code = "import sys, nbhelpers.results; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ find_results_dir: the search order


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    return monkeypatch


def make_repo(root: Path) -> Path:
    """A folder that looks like a course repository: it has benchmarks/results/."""
    (root / REL).mkdir(parents=True)
    return root / REL


def test_explicit_argument_comes_first(tmp_path, no_env):
    make_repo(tmp_path / "repo")
    no_env.setenv(ENV_VAR, str(tmp_path / "from_env"))
    no_env.chdir(tmp_path / "repo")
    assert find_results_dir(tmp_path / "given") == tmp_path / "given"
    assert find_results_dir(str(tmp_path / "given")) == tmp_path / "given"  # a str is taken too
    assert find_results_dir(tmp_path / "does_not_exist_yet") == tmp_path / "does_not_exist_yet"


def test_env_var_comes_before_the_current_folder(tmp_path, no_env):
    make_repo(tmp_path / "repo")
    no_env.chdir(tmp_path / "repo")
    no_env.setenv(ENV_VAR, str(tmp_path / "from_env"))
    assert find_results_dir() == tmp_path / "from_env"
    no_env.setenv(ENV_VAR, "")  # set but empty: as if unset
    assert find_results_dir() == (tmp_path / "repo" / REL).resolve()


def test_current_folder_or_nearest_parent(tmp_path, no_env):
    outer = make_repo(tmp_path / "outer")
    inner = make_repo(tmp_path / "outer" / "inner")
    (tmp_path / "outer" / "inner" / "notebooks" / "deep").mkdir(parents=True)
    no_env.chdir(tmp_path / "outer" / "inner" / "notebooks" / "deep")  # a notebook's folder
    assert find_results_dir() == inner.resolve()  # the nearest parent that has one
    no_env.chdir(tmp_path / "outer" / "inner")  # a script at the repository root
    assert find_results_dir() == inner.resolve()
    no_env.chdir(tmp_path / "outer")
    assert find_results_dir() == outer.resolve()
    (tmp_path / "outer" / "inner" / REL).rmdir()
    no_env.chdir(tmp_path / "outer" / "inner" / "notebooks")
    assert find_results_dir() == outer.resolve()  # an empty benchmarks/ does not count


def test_source_repository_is_the_last_resort(tmp_path, no_env):
    no_env.chdir(tmp_path)  # no benchmarks/results here or above
    if any((p / REL).is_dir() for p in (tmp_path.resolve(), *tmp_path.resolve().parents)):
        pytest.skip("the temporary folder lies inside a folder with benchmarks/results")
    source = Path(results.__file__).resolve().parents[1] / REL
    assert find_results_dir() == (source if source.is_dir() else None)
    assert recorded_gpu_runs() == recorded_gpu_runs(source if source.is_dir() else tmp_path)


def _copy_of_the_package(tmp_path: Path) -> Path:
    """nbhelpers copied into site/ under tmp_path, outside any repository, as a non-editable
    install would put it; returns the site folder for PYTHONPATH."""
    site = tmp_path / "site"
    shutil.copytree(
        Path(results.__file__).resolve().parent, site / "nbhelpers", ignore=shutil.ignore_patterns("__pycache__")
    )
    return site


_PROBE = """
import json, sys
import nbhelpers.results as r
found = r.find_results_dir()
runs = r.recorded_gpu_runs()
print(json.dumps({"module": r.__file__, "found": None if found is None else str(found.resolve()),
                  "gpus": [run["meta"]["gpu"] for run in runs]}))
"""


def _probe(site: Path, cwd: Path, env_dir: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_VAR, "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    if env_dir is not None:
        env[ENV_VAR] = str(env_dir)
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_copy_of_the_package_outside_the_repository_reads_where_it_is_run(tmp_path):
    """Installed non-editable, the package's own path says nothing about any repository: the
    current folder and the environment variable must be enough, and with neither there is no
    folder (not the repository the copy came from)."""
    site = _copy_of_the_package(tmp_path)
    project = make_repo(tmp_path / "project")
    (project / "gemm_numerics_p.json").write_text(json.dumps(fake_run("2026-01-01", gpu="Project GPU")))
    (tmp_path / "project" / "notebooks").mkdir()
    elsewhere = make_repo(tmp_path / "elsewhere")
    (elsewhere / "gemm_numerics_e.json").write_text(json.dumps(fake_run("2026-01-01", gpu="Env GPU")))
    (tmp_path / "empty").mkdir()

    got = _probe(site, tmp_path / "project" / "notebooks", None)
    assert Path(got["module"]).resolve().is_relative_to(site.resolve())  # the copy, not the repository
    assert got["found"] == str(project.resolve()) and got["gpus"] == ["Project GPU"]

    got = _probe(site, tmp_path / "project", elsewhere)
    assert got["found"] == str(elsewhere.resolve()) and got["gpus"] == ["Env GPU"]

    got = _probe(site, tmp_path / "empty", elsewhere)
    assert got["found"] == str(elsewhere.resolve())

    if not any((p / REL).is_dir() for p in (tmp_path.resolve(), *tmp_path.resolve().parents)):
        got = _probe(site, tmp_path / "empty", None)
        assert got["found"] is None and got["gpus"] == []


# ------------------------------------------------------------------ copy bandwidth files


def copy_run(date: str, gpu: str = "Test GPU") -> dict:
    """A results file of benchmarks/gpu_copy_bandwidth.py, by hand: meta and two rows."""
    meta = {
        "gpu": gpu,
        "date": date,
        "script": "benchmarks/gpu_copy_bandwidth.py",
        "command": "python benchmarks/gpu_copy_bandwidth.py",
        "peak": None,
    }
    rows = [
        {
            "name": "torch copy",
            "kernel": "torch",
            "pattern": "contiguous",
            "stride": 1,
            "block": None,
            "outputs": 1 << 28,
            "useful_bytes": 1 << 31,
            "ms": 0.5,
            "bandwidth": 4.0e12,
            "sector_efficiency": 1.0,
            "ratio_to_torch_copy": 1.0,
            "predicted_bandwidth": 4.0e12,
            "predicted_at_peak": None,
            "ratio_to_prediction": 1.0,
        },
        {
            "name": "strided 8",
            "kernel": "triton",
            "pattern": "strided",
            "stride": 8,
            "block": [1024],
            "outputs": 1 << 24,
            "useful_bytes": 1 << 27,
            "ms": 0.17,
            "bandwidth": 8.0e11,
            "sector_efficiency": 0.125,
            "ratio_to_torch_copy": 0.2,
            "predicted_bandwidth": 8.9e11,
            "predicted_at_peak": None,
            "ratio_to_prediction": 0.9,
        },
    ]
    return {"meta": meta, "best_copy": "torch copy", "rows": rows}


def test_recorded_copy_bandwidth_reads_sorts_and_rejects(tmp_path):
    from nbhelpers.results import recorded_copy_bandwidth

    assert recorded_copy_bandwidth(tmp_path) == []
    (tmp_path / "copy_bandwidth_b.json").write_text(json.dumps(copy_run("2026-05-01T00:00:00+00:00", "B")))
    (tmp_path / "copy_bandwidth_a.json").write_text(json.dumps(copy_run("2026-06-01T00:00:00+00:00", "A")))
    (tmp_path / "gemm_numerics_x.json").write_text("{}")  # another benchmark's file: not read here
    runs = recorded_copy_bandwidth(tmp_path)
    assert [r["meta"]["gpu"] for r in runs] == ["B", "A"]  # by date, not by file name
    assert runs[0]["path"].endswith("copy_bandwidth_b.json")
    assert runs[1]["rows"][1]["sector_efficiency"] == 0.125
    broken = copy_run("2026-07-01")
    del broken["meta"]["command"]
    del broken["rows"][1]["bandwidth"]
    (tmp_path / "copy_bandwidth_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"copy_bandwidth_c\.json: missing command, rows\[1\]\.bandwidth"):
        recorded_copy_bandwidth(tmp_path)
    (tmp_path / "copy_bandwidth_c.json").write_text(json.dumps({**copy_run("2026-07-01"), "rows": []}))
    with pytest.raises(ValueError, match="rows"):
        recorded_copy_bandwidth(tmp_path)
    (tmp_path / "copy_bandwidth_c.json").write_text("not json")
    with pytest.raises(ValueError, match="not a results file of gpu_copy_bandwidth.py"):
        recorded_copy_bandwidth(tmp_path)


def test_recorded_copy_bandwidth_asks_only_for_keys_the_benchmark_writes():
    # the reader must not demand a key the script never writes: every required key is a string
    # literal of benchmarks/gpu_copy_bandwidth.py or a keyword its row is built with
    source = (ROOT / "benchmarks" / "gpu_copy_bandwidth.py").read_text()
    for key in results.COPY_BANDWIDTH.meta_keys + results.COPY_BANDWIDTH.row_keys:
        assert f'"{key}"' in source or f"{key}=" in source, key


def test_committed_copy_bandwidth_files_parse():
    for run in results.recorded_copy_bandwidth(ROOT / "benchmarks" / "results"):
        assert run["meta"]["gpu"] and run["rows"]


# ------------------------------------------------------------------ gemm_tflops files (chapter 09)


def tflops_run(date: str, gpu: str = "Test GPU") -> dict:
    """A run as benchmarks/gpu_gemm_tflops.py writes it: one timed row, one row it refused to time."""
    meta = {
        "gpu": gpu,
        "driver": "1.0",
        "cuda": "12.8",
        "capability": "9.0",
        "torch": "2.13.0",
        "triton": "3.7.1",
        "date": date,
        "script": "benchmarks/gpu_gemm_tflops.py",
        "command": "python3 benchmarks/gpu_gemm_tflops.py",
        "timer": "do_bench",
        "flops": "2 M N K",
    }
    timed = {
        "kind": "bf16",
        "M": 4096,
        "N": 4096,
        "K": 4096,
        "ours": "triton matmul",
        "theirs": "torch.matmul",
        "rel_diff": 1e-3,
        "goal": 0.8,
        "ms_ours": 0.2,
        "ms_theirs": 0.18,
        "tflops_ours": 687.2,
        "tflops_theirs": 763.6,
        "ratio": 0.9,
    }
    refused = {
        "kind": "fp8_rowwise",
        "M": 4096,
        "N": 4096,
        "K": 4096,
        "ours": "triton scaled_matmul",
        "theirs": "torch._scaled_mm",
        "rel_diff": 0.5,
        "goal": 0.8,
        "error": "outputs differ: not timed",
    }
    return {"meta": meta, "rows": [timed, refused]}


def test_recorded_gemm_tflops_reads_sorts_and_rejects(tmp_path):
    from nbhelpers.results import recorded_gemm_tflops

    assert recorded_gemm_tflops(tmp_path) == []
    (tmp_path / "gemm_tflops_b.json").write_text(json.dumps(tflops_run("2026-05-01T00:00:00+00:00", "B")))
    (tmp_path / "gemm_tflops_a.json").write_text(json.dumps(tflops_run("2026-06-01T00:00:00+00:00", "A")))
    (tmp_path / "gemm_numerics_x.json").write_text("{}")  # another benchmark's file: not read here
    runs = recorded_gemm_tflops(tmp_path)
    assert [r["meta"]["gpu"] for r in runs] == ["B", "A"]  # by date, not by file name
    assert runs[0]["path"].endswith("gemm_tflops_b.json")
    assert runs[1]["rows"][0]["ratio"] == 0.9 and "error" in runs[1]["rows"][1]
    broken = tflops_run("2026-07-01")
    del broken["meta"]["triton"]
    del broken["rows"][0]["tflops_ours"]  # a timed row needs its timings
    (tmp_path / "gemm_tflops_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"gemm_tflops_c\.json: missing triton, rows\[0\]\.tflops_ours$"):
        recorded_gemm_tflops(tmp_path)
    broken = tflops_run("2026-07-01")
    del broken["rows"][1]["K"]  # an untimed row still names its shape
    (tmp_path / "gemm_tflops_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"missing rows\[1\]\.K$"):
        recorded_gemm_tflops(tmp_path)
    (tmp_path / "gemm_tflops_c.json").write_text(json.dumps({**tflops_run("2026-07-01"), "rows": []}))
    with pytest.raises(ValueError, match="rows"):
        recorded_gemm_tflops(tmp_path)
    (tmp_path / "gemm_tflops_c.json").write_text("not json")
    with pytest.raises(ValueError, match="not a results file of gpu_gemm_tflops.py"):
        recorded_gemm_tflops(tmp_path)


def test_recorded_gemm_tflops_asks_only_for_keys_the_benchmark_writes():
    # every key the reader demands is a key the script writes (a string literal or keyword there,
    # or in nbhelpers.device.gpu_run_meta, which writes the meta every GPU results file shares)
    source = (ROOT / "benchmarks" / "gpu_gemm_tflops.py").read_text()
    assert "gpu_run_meta(SCRIPT, argv)" in source
    source += (ROOT / "nbhelpers" / "device.py").read_text()
    for key in results.GEMM_TFLOPS.meta_keys + results.GEMM_TFLOPS.row_keys + results.GEMM_TFLOPS.timed_keys:
        assert f'"{key}"' in source or f"{key}=" in source, key


def test_committed_gemm_tflops_files_parse():
    for run in results.recorded_gemm_tflops(ROOT / "benchmarks" / "results"):
        assert run["meta"]["gpu"] and run["rows"]


def grouped_run(date: str, gpu: str = "Test GPU") -> dict:
    """A run as benchmarks/gpu_grouped_gemm.py writes it: one timed row, one row it refused to time."""
    meta = {
        "gpu": gpu,
        "driver": "1.0",
        "cuda": "12.8",
        "capability": "9.0",
        "torch": "2.13.0",
        "triton": "3.7.1",
        "date": date,
        "script": "benchmarks/gpu_grouped_gemm.py",
        "command": "python3 benchmarks/gpu_grouped_gemm.py",
    }
    case = {
        "size": "deepseek",
        "K": 7168,
        "N": 2048,
        "E": 256,
        "T": 4096,
        "top_k": 8,
        "rows": 32768,
        "max_load": 512,
        "mean_load": 128.0,
        "empty_experts": 0,
        "uneven": True,
        "capacity_factor": 1.25,
        "capacity": 160,
        "padding_fraction": 0.1,
        "dropped_rows": 0,
        "rel_diff": {"ours": 1e-3},
        "goals": {"ours_vs_loop": 2.0},
    }
    timed = {
        **case,
        "ms": {"ours": 1.0, "loop": 3.0},
        "tflops": {"ours": 962.0},
        "ours_vs_loop": 3.0,
        "ours_vs_padded": 1.2,
        "ours_vs_grouped_mm": 0.9,
    }
    refused = {**case, "E": 64, "error": "outputs differ: not timed"}
    return {"meta": meta, "rows": [timed, refused]}


def test_recorded_grouped_gemm_reads_sorts_and_rejects(tmp_path):
    from nbhelpers.results import recorded_grouped_gemm

    assert recorded_grouped_gemm(tmp_path) == []
    (tmp_path / "grouped_gemm_b.json").write_text(json.dumps(grouped_run("2026-05-01T00:00:00+00:00", "B")))
    (tmp_path / "grouped_gemm_a.json").write_text(json.dumps(grouped_run("2026-06-01T00:00:00+00:00", "A")))
    (tmp_path / "gemm_tflops_x.json").write_text("{}")  # another benchmark's file: not read here
    runs = recorded_grouped_gemm(tmp_path)
    assert [r["meta"]["gpu"] for r in runs] == ["B", "A"]  # by date, not by file name
    assert runs[0]["path"].endswith("grouped_gemm_b.json")
    assert runs[1]["rows"][0]["ours_vs_loop"] == 3.0 and "error" in runs[1]["rows"][1]
    broken = grouped_run("2026-07-01")
    del broken["meta"]["command"]
    del broken["rows"][0]["ours_vs_grouped_mm"]  # a timed row needs its speedups
    (tmp_path / "grouped_gemm_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"grouped_gemm_c\.json: missing command, rows\[0\]\.ours_vs_grouped_mm$"):
        recorded_grouped_gemm(tmp_path)
    broken = grouped_run("2026-07-01")
    del broken["rows"][1]["T"]  # an untimed row still names its case
    (tmp_path / "grouped_gemm_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"missing rows\[1\]\.T$"):
        recorded_grouped_gemm(tmp_path)
    (tmp_path / "grouped_gemm_c.json").write_text(json.dumps({**grouped_run("2026-07-01"), "rows": []}))
    with pytest.raises(ValueError, match="rows"):
        recorded_grouped_gemm(tmp_path)
    (tmp_path / "grouped_gemm_c.json").write_text("not json")
    with pytest.raises(ValueError, match="not a results file of gpu_grouped_gemm.py"):
        recorded_grouped_gemm(tmp_path)


def test_recorded_grouped_gemm_asks_only_for_keys_the_benchmark_writes():
    # the meta keys are written by device.gpu_run_meta, the row keys by the script itself
    source = (ROOT / "benchmarks" / "gpu_grouped_gemm.py").read_text()
    assert "gpu_run_meta(SCRIPT, argv)" in source
    meta_source = (ROOT / "nbhelpers" / "device.py").read_text()
    for key in results.GROUPED_GEMM.meta_keys:
        assert f'"{key}"' in meta_source, key
    for key in results.GROUPED_GEMM.row_keys + results.GROUPED_GEMM.timed_keys:
        assert f'"{key}"' in source or f"{key}=" in source, key


def test_committed_grouped_gemm_files_parse():
    for run in results.recorded_grouped_gemm(ROOT / "benchmarks" / "results"):
        assert run["meta"]["gpu"] and run["rows"]


def topk_run(date: str, gpu: str = "Test GPU") -> dict:
    """A run as benchmarks/gpu_topk.py writes it: one timed row, one row it skipped."""
    meta = {
        "gpu": gpu,
        "driver": "1.0",
        "cuda": "12.8",
        "capability": "9.0",
        "torch": "2.13.0",
        "triton": "3.7.1",
        "date": date,
        "script": "benchmarks/gpu_topk.py",
        "command": "python3 benchmarks/gpu_topk.py",
        "vocab": 128256,
        "bytes": "batch * (V * s + k * (s + 8))",
        "peak": 4.8e12,
    }
    case = {"dtype": "bf16", "batch": 64, "V": 128256, "k": 50, "bytes": 64 * (128256 * 2 + 50 * 10)}
    timed = {
        **case,
        "method": "radix",
        "launch": {"K_PAD": 64, "BLOCK_V": 2048},
        "checked_rows": 12,
        "ms": 0.01,
        "gb_per_s": 1642.0,
        "fraction_of_peak": 0.34,
        "vs_torch_topk": 1.5,
    }
    skipped = {**case, "method": "row", "launch": None, "checked_rows": None, "error": "skipped: too slow"}
    return {"meta": meta, "rows": [timed, skipped]}


def test_recorded_topk_reads_sorts_and_rejects(tmp_path):
    from nbhelpers.results import recorded_topk

    assert recorded_topk(tmp_path) == []
    (tmp_path / "topk_b.json").write_text(json.dumps(topk_run("2026-05-01T00:00:00+00:00", "B")))
    (tmp_path / "topk_a.json").write_text(json.dumps(topk_run("2026-06-01T00:00:00+00:00", "A")))
    (tmp_path / "grouped_gemm_x.json").write_text("{}")  # another benchmark's file: not read here
    runs = recorded_topk(tmp_path)
    assert [r["meta"]["gpu"] for r in runs] == ["B", "A"]  # by date, not by file name
    assert runs[0]["path"].endswith("topk_b.json")
    assert runs[1]["rows"][0]["vs_torch_topk"] == 1.5 and "error" in runs[1]["rows"][1]
    broken = topk_run("2026-07-01")
    del broken["meta"]["peak"]  # None where the GPU has no known peak, but always there
    del broken["rows"][0]["gb_per_s"]  # a timed row needs its rate
    (tmp_path / "topk_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"topk_c\.json: missing peak, rows\[0\]\.gb_per_s$"):
        recorded_topk(tmp_path)
    broken = topk_run("2026-07-01")
    del broken["rows"][1]["method"]  # a skipped row still names what it skipped
    (tmp_path / "topk_c.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"missing rows\[1\]\.method$"):
        recorded_topk(tmp_path)
    (tmp_path / "topk_c.json").write_text(json.dumps({**topk_run("2026-07-01"), "rows": []}))
    with pytest.raises(ValueError, match="rows"):
        recorded_topk(tmp_path)
    (tmp_path / "topk_c.json").write_text("not json")
    with pytest.raises(ValueError, match="not a results file of gpu_topk.py"):
        recorded_topk(tmp_path)


def test_recorded_topk_asks_only_for_keys_the_benchmark_writes():
    # the shared meta keys are written by device.gpu_run_meta, the rest by the script itself
    source = (ROOT / "benchmarks" / "gpu_topk.py").read_text()
    assert "gpu_run_meta(SCRIPT, argv)" in source
    meta_source = (ROOT / "nbhelpers" / "device.py").read_text()
    for key in results.TOPK.meta_keys:
        assert f'"{key}"' in meta_source or f'"{key}"' in source, key
    for key in results.TOPK.row_keys + results.TOPK.timed_keys:
        assert f'"{key}"' in source or f"{key}=" in source, key


def test_committed_topk_files_parse():
    for run in results.recorded_topk(ROOT / "benchmarks" / "results"):
        assert run["meta"]["gpu"] and run["rows"]


# ------------------------------------------------------------------ one schema for writer and reader


def test_a_kind_names_its_files_and_reads_what_its_writer_wrote(tmp_path):
    from nbhelpers.results import ResultsFile

    kind = results.REGISTER_PRESSURE
    path = kind.path("NVIDIA H200", tmp_path)
    assert path == tmp_path / "register_pressure_nvidia-h200.json"
    meta = {k: "x" for k in kind.meta_keys} | {"date": "2026-12-01T00:00:00+00:00"}
    rf = ResultsFile(path, meta, kind)
    rf.add({"k": 0, **{key: 1.0 for key in kind.timed_keys}})
    rf.add({"k": 2, "error": "skipped: past the time limit of 25 s"})  # not measured: says why
    rf.finish()
    (run,) = results.recorded_register_pressure(tmp_path)
    assert [r["k"] for r in run["rows"]] == [0, 2]


def test_the_writer_refuses_what_the_reader_would_refuse(tmp_path):
    from nbhelpers.results import ResultsFile

    kind = results.GEMM_TFLOPS
    with pytest.raises(ValueError, match="meta of a gemm_tflops results file lacks .*triton"):
        ResultsFile(tmp_path / "t.json", {"gpu": "g", "date": "d", "script": "s", "command": "c", "torch": "t"}, kind)
    rf = ResultsFile(tmp_path / "t.json", {k: "x" for k in kind.meta_keys}, kind)
    row = {k: 1 for k in kind.row_keys}  # timed keys missing, and no error saying why
    with pytest.raises(ValueError, match="lacks ms_ours"):
        rf.add(row)
    assert not (tmp_path / "t.json").exists()  # nothing written
    with pytest.raises(ValueError, match="lacks"):
        rf.finish(rows=[row])
