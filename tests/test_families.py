"""Kernel families (nbhelpers.families): one manifest per family, found by every tool that needs it.

A family that exists only here (a manifest written to a temporary folder that is added to the
package's search path, nothing else changed) shows up in the compile check's list of cases, the
table of which GPU runs which chapter, the prepared GPU run's plan and the readers of recorded
results; and the manifests of the course's families agree with what they describe.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

import nbhelpers.families as fam
from nbhelpers import results
from nbhelpers.families import Family, ResultsSpec, families, results_specs
from nbhelpers.tooling import compile_cases, gpu_targets

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("gpu_report_for_families", ROOT / "benchmarks" / "gpu_report.py")
gr = importlib.util.module_from_spec(_spec)
sys.modules["gpu_report_for_families"] = gr  # dataclasses look their module up by name
_spec.loader.exec_module(gr)

FAKE_MANIFEST = """
import dataclasses

from nbhelpers.families import Benchmark, Case, Family, Launch, ResultsSpec, timed


def cases():
    return [Case("nbhelpers.kernels.fakefam:fake_kernel", "fp32, n = 4096", ("*fp32", "*fp32", 4096), {"BLOCK": 256})]


def exercise_cases():
    return [Case("tests/test_families.py:fake_kernel", "fp32", ("*fp32", 16), {"BLOCK": 16}, source="test")]


def launches():
    return [Launch("fake(x)", "fp32", ("12",), "notebook 12, benchmarks/gpu_fakefam.py", cases()[0])]


@dataclasses.dataclass(frozen=True)
class FakeRow:
    n: int
    method: str
    ms: float = timed()
    error: str | None = None


FAMILY = Family(
    name="fakefam",
    module="nbhelpers.kernels.fakefam",
    reference="nbhelpers.kernels.fakefam:fake_ref",
    dtypes=("fp32",),
    chapters={"12": "`kernels.fakefam.fake` on fp32; `benchmarks/gpu_fakefam.py`"},
    tests=("tests/test_kernels_fakefam_only.py",),
    cases=cases,
    exercise_cases=exercise_cases,
    launches=launches,
    benchmarks=(Benchmark("gpu_fakefam", 33.0, 11.0, 22.0, "a fake family's estimate"),),
    results=(ResultsSpec("fakefam", "benchmarks/gpu_fakefam.py", ("gpu", "date", "script"), FakeRow),),
)
"""


def fake_kernel():  # the test kernel the fake manifest names: its name is in this file's source
    pass


@pytest.fixture
def fake_family(tmp_path, monkeypatch):
    """A family with one manifest in a folder of its own, put on nbhelpers.families' search path."""
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "fakefam.py").write_text(FAKE_MANIFEST)
    monkeypatch.setattr(fam, "__path__", [*fam.__path__, str(folder)])
    yield "fakefam"
    sys.modules.pop("nbhelpers.families.fakefam", None)


def test_the_course_families_are_found_in_their_order():
    """The families whose launches docs/gpu.md lists come in the order it lists them (a family
    added later goes after them)."""
    names = [f.name for f in families()]
    assert names[:6] == ["gemm", "scaled_gemm", "pressure", "copy", "grouped_gemm", "topk"]
    assert all(isinstance(f, Family) for f in families())


def test_a_new_family_is_found(fake_family):
    names = [f.name for f in families()]
    assert names[-1] == fake_family and names.count(fake_family) == 1


def test_a_new_family_is_in_the_compile_check(fake_family, capsys):
    cases = compile_cases.course_cases()
    assert [c.label for c in cases if c.kernel == "nbhelpers.kernels.fakefam:fake_kernel"] == ["fp32, n = 4096"]
    (test_case,) = [c for c in cases if c.kernel.endswith(":fake_kernel") and c.source == "test"]
    assert test_case.kernel == "tests/test_families.py:fake_kernel"
    assert compile_cases.main(["--kernels", "fake_kernel", "--list"]) == 0
    out = capsys.readouterr().out
    assert "nbhelpers.kernels.fakefam:fake_kernel  [fp32, n = 4096]  256 w4 s3" in out and "2 cases" in out


def test_a_family_without_it_is_not_in_the_compile_check():
    assert not [c for c in compile_cases.course_cases() if "fake_kernel" in c.kernel]


def test_a_new_family_is_in_the_gpu_table(fake_family):
    (launch,) = [x for x in gpu_targets.launches() if x.launch == "fake(x)"]
    assert launch.chapters == ("12",) and launch.case.config == "256 w4 s3"
    assert gpu_targets.chapters()["12"] == "`kernels.fakefam.fake` on fp32; `benchmarks/gpu_fakefam.py`"
    assert gpu_targets.chapters()["06"].startswith("none: everything runs on the CPU")


def test_a_new_family_is_in_the_gpu_report_plan(fake_family, tmp_path):
    root = tmp_path / "repo"
    (root / "benchmarks").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "benchmarks" / "gpu_fakefam.py").write_text("")
    (root / "tests" / "test_kernels_fakefam_only.py").write_text("")
    assert gr.benchmark_plan()["gpu_fakefam"]["limit"] == 33.0
    plan = {s.name: s for s in gr.plan_steps("py", steps=("benchmarks", "kernels"), root=root)}
    step = plan["gpu_fakefam"]
    assert step.argv == ["py", "benchmarks/gpu_fakefam.py", "--time-limit", "11"]
    assert (step.limit_s, step.expected_s, step.basis) == (33.0, 22.0, "a fake family's estimate")
    assert plan["kernels"].argv[-1] == "tests/test_kernels_fakefam_only.py"


def test_a_benchmark_no_family_declares_runs_up_to_the_default_limit(tmp_path):
    root = tmp_path / "repo"
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "gpu_fakefam.py").write_text("")
    (step,) = gr.plan_steps("py", steps=("benchmarks",), root=root)
    assert step.argv == ["py", "benchmarks/gpu_fakefam.py"] and step.basis == "no estimate: up to its limit"


def test_a_new_family_has_a_results_kind_and_a_reader(fake_family, tmp_path):
    kind = results.kinds()["fakefam"]
    assert results.FAKEFAM == kind
    assert (kind.row_keys, kind.timed_keys) == (("n", "method"), ("ms",))
    from nbhelpers.results import recorded_fakefam  # the reader the family's spec names by default

    meta = {"gpu": "NVIDIA H200", "date": "2026-12-01T00:00:00+00:00", "script": "benchmarks/gpu_fakefam.py"}
    out = results.ResultsFile(kind.path(meta["gpu"], tmp_path), meta, kind)
    row_type = kind.spec.row
    out.add(row_type(n=4096, method="fake", ms=0.5))  # the script fills the family's row
    assert out.add(row_type(n=8192, method="fake", error="skipped: past the time limit")) == {
        "n": 8192,
        "method": "fake",
        "error": "skipped: past the time limit",
    }
    with pytest.raises(ValueError, match="lacks ms"):
        out.add({"n": 1, "method": "fake"})
    out.finish()
    (run,) = recorded_fakefam(tmp_path)
    assert run["path"].endswith("fakefam_nvidia-h200.json") and [r["n"] for r in run["rows"]] == [4096, 8192]
    assert results.recorded("fakefam", tmp_path)[0]["rows"] == run["rows"]
    rows = kind.rows(run)
    assert rows[0] == row_type(n=4096, method="fake", ms=0.5)
    with pytest.raises(TypeError, match="must be a FakeRow"):
        out.add(results.kinds()["topk"].spec.row("bf16", 1, 8, 1, "row", 16, 1.0, 1.0, None, 1.0))
    assert rows[1].ms is None and rows[1].error.startswith("skipped")
    bad = json.loads(Path(run["path"]).read_text())
    del bad["rows"][0]["method"]
    Path(run["path"]).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"missing rows\[0\]\.method"):
        recorded_fakefam(tmp_path)


def test_without_it_there_is_no_such_reader():
    assert "fakefam" not in results.kinds()
    with pytest.raises(AttributeError):
        getattr(results, "recorded_fakefam")
    with pytest.raises(KeyError, match="no kernel family records 'fakefam'"):
        results.recorded("fakefam")


def test_a_manifest_must_define_a_family_with_a_name_of_its_own(tmp_path, monkeypatch):
    folder = tmp_path / "manifests"
    folder.mkdir()
    monkeypatch.setattr(fam, "__path__", [*fam.__path__, str(folder)])
    (folder / "fakebad.py").write_text("FAMILY = 'gemm'\n")
    try:
        with pytest.raises(TypeError, match="fakebad.FAMILY is a str, not a Family"):
            families()
        (folder / "fakebad.py").write_text("from nbhelpers.families.gemm import FAMILY\n")
        sys.modules.pop("nbhelpers.families.fakebad", None)
        with pytest.raises(ValueError, match="two families are named 'gemm'"):
            families()
    finally:
        sys.modules.pop("nbhelpers.families.fakebad", None)


# ------------------------------------------------------------------ the course's manifests


def test_the_results_kinds_are_the_files_the_notebooks_read():
    assert set(results_specs()) >= {
        "gemm_numerics",
        "gemm_tflops",
        "copy_bandwidth",
        "grouped_gemm",
        "register_pressure",
        "topk",
    }
    for name in (
        "recorded_gpu_runs",
        "recorded_gemm_tflops",
        "recorded_copy_bandwidth",
        "recorded_grouped_gemm",
        "recorded_register_pressure",
        "recorded_topk",
    ):
        assert callable(getattr(results, name)) and name in dir(results)
    # each recorded file of the repository reads back through its family's reader
    for kind in results.kinds().values():
        for run in kind.read(ROOT / "benchmarks" / "results"):
            for row in run[kind.rows_field]:
                assert dataclasses.is_dataclass(kind.row(row))


def test_each_manifest_names_what_is_there():
    """The kernel module, the reference, the test files and the benchmark scripts a manifest names
    exist; each family's launches are among the chapters it gives a GPU path or none at all."""
    for f in families():
        assert (ROOT / (f.module.replace(".", "/") + ".py")).is_file(), f.module
        module, _, name = f.reference.rpartition(":")
        assert f"def {name}(" in (ROOT / (module.replace(".", "/") + ".py")).read_text(), f.reference
        for t in f.tests:
            assert (ROOT / t).is_file(), t
        for b in f.benchmarks:
            assert (ROOT / "benchmarks" / f"{b.script}.py").is_file(), b.script
            assert b.expected <= b.limit and (b.time_limit is None or b.time_limit < b.limit)
        for spec in f.results:
            assert isinstance(spec, ResultsSpec) and (ROOT / spec.script).is_file()
    chapters = {c for f in families() for c in f.chapters}
    launched = {c for x in gpu_targets.launches() for c in x.chapters}
    notebooks = {p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert launched == chapters and {"03", "08", "09", "10", "11"} <= chapters <= notebooks


def test_no_module_outside_the_tooling_wing_imports_it():
    """Repository tooling (it writes docs/, reads solutions/) is imported by nothing the notebooks
    import; import-linter's layers put it at the top, beside the course tooling, and this checks
    that no sibling leans on it either."""
    import grimp

    graph = grimp.build_graph("nbhelpers")
    wing = {"nbhelpers.tooling", *graph.find_descendants("nbhelpers.tooling")}
    assert {"nbhelpers.tooling.compile_cases", "nbhelpers.tooling.gpu_targets"} <= wing
    importers = {m for w in wing for m in graph.find_modules_that_directly_import(w)}
    assert importers <= wing, sorted(importers - wing)


def test_the_recipes_a_manifest_names_are_the_launchers_own_declarations():
    """A family's ``recipes`` name the RecipeSupport objects its launchers check recipes with (no
    second list to keep in step), and every such object of its kernel module is named. (Importing
    the kernel modules, as the compile cases do, runs no kernel.)"""
    from nbhelpers.kernels.operands import RecipeSupport

    scaled = 0
    for f in families():
        kernels = importlib.import_module(f.module)
        declared = {name for name, v in vars(kernels).items() if isinstance(v, RecipeSupport)}
        named = set()
        for where in f.recipes:
            module, _, name = where.partition(":")
            assert module == f.module and isinstance(getattr(kernels, name, None), RecipeSupport), where
            named.add(name)
        assert named == declared, (f.name, sorted(declared - named))
        scaled += bool(named)
    assert scaled >= 2  # the scaled GEMMs and the grouped GEMM


def test_the_fp8_layout_cases_differ_only_in_the_weights_strides():
    from nbhelpers.families import grouped_gemm as fam

    k_major, n_major = fam.fp8_layout_cases()
    assert (k_major.kernel, k_major.constexprs, k_major.target) == (n_major.kernel, n_major.constexprs, n_major.target)
    assert "K-major" in k_major.label and "N-major" in n_major.label
    diff = [i for i, (a, b) in enumerate(zip(k_major.args, n_major.args)) if a != b]
    # the w strides (stride_we, stride_wk, stride_wn): K contiguous, then N contiguous
    assert [k_major.args[i] for i in diff] == [1, fam.K] and [n_major.args[i] for i in diff] == [fam.N, 1]
    (in_table,) = [c for c in fam.cases() if c.kernel.endswith("scaled_grouped_matmul_kernel")]
    assert in_table.args == k_major.args and in_table.constexprs == k_major.constexprs
