"""Which GPU runs which chapter (nbhelpers.tooling.gpu_targets, docs/gpu.md): the chapters' GPU launches
compiled for sm_75, sm_80, sm_89 and sm_90 without a GPU.

Here: the verdict of a row and its table cell on canned compile results; one real compile for
sm_75 (a copy kernel, and the e4m3 dot Triton refuses there); the committed results file
against today's launches; the rule that no launch stops with a compiler traceback where the
launcher could have said why; and docs/gpu.md's generated tables against the results file.
``make gpu-targets`` compiles every launch.
"""

from __future__ import annotations

from nbhelpers.device import setup_device

setup_device(verbose=False)  # before the launch lists import the kernel modules: the interpreter on a CPU

import dataclasses
import json
from pathlib import Path

import pytest

from nbhelpers.compile_check import SHARED_LIMIT, check
from nbhelpers.tooling import gpu_targets as gt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(gt.RESULTS.read_text())


def _compiled(target="sm_75", **kw) -> dict:
    row = {
        "kernel": "matmul_kernel",
        "label": "l",
        "config": "32x32x32 w4 s3",
        "target": target,
        "status": "ok",
        "registers": 64,
        "spill_stores": 0,
        "spill_loads": 0,
        "shared": 4096,
        "shared_limit": SHARED_LIMIT[int(target[3:])],
        "mma": "none",
        "cp_async": 0,
        "tma": 0,
    }
    return {**row, **kw}


def _launch(dtype="bf16", fp8=None):
    case = next(x for x in gt.launches() if x.dtype == dtype and not x.tuned).case
    return gt.Launch("matmul(block=(32, 32, 32))", dtype, ("03",), "a cell", case, fp8=fp8)


def test_a_row_says_whether_the_launch_runs_and_why_not():
    launch = _launch()
    runs = gt.matrix_row(launch, _compiled())
    assert runs["verdict"] == "runs" and runs["compiles"] and runs["fits"] and runs["capability"] == "7.5"
    assert runs["shared_limit"] == 65_536 and runs["dot"] is True and runs["made_by"] == "a cell"
    assert gt.cell(runs) == "FMA, 4 KiB"
    spills = gt.matrix_row(launch, _compiled(spill_stores=31_952, shared=65_536))
    assert spills["verdict"] == "runs" and gt.cell(spills) == "FMA, 64 KiB, spills 31,952 B"
    over = gt.matrix_row(launch, _compiled("sm_89", shared=122_880, mma="mma.sync.aligned x"))
    assert over["verdict"] == "over shared memory" and over["fits"] is False
    assert gt.cell(over) == "over shared memory (120 KiB > 99 KiB)"
    error = 'CompilationError: ValueError("type fp8e4nv not supported in this architecture.")'
    refused = gt.matrix_row(launch, _compiled(status="error", error=error))
    assert refused["verdict"] == "Triton refuses" and refused["fits"] is None
    wg = gt.matrix_row(launch, _compiled("sm_90", mma="wgmma m64n256k16 f32.bf16.bf16", shared=163_840))
    assert gt.cell(wg) == "wgmma bf16, 160 KiB"


def test_the_launcher_refuses_e4m3_below_8_9_and_says_so():
    e4m3 = _launch("e4m3", fp8="float8_e4m3fn")
    for target, verdict in (("sm_75", "launcher refuses"), ("sm_80", "launcher refuses"), ("sm_89", "runs")):
        row = gt.matrix_row(e4m3, _compiled(target))
        assert row["verdict"] == verdict, target
    row = gt.matrix_row(e4m3, _compiled("sm_75", status="error", error="fp8e4nv not supported"))
    assert row["verdict"] == "launcher refuses" and "8.9 or newer" in row["launcher_error"]
    assert "this GPU is 7.5" in row["launcher_error"]
    assert gt.matrix_row(_launch("e5m2", fp8="float8_e5m2"), _compiled("sm_75"))["launcher_error"] is None


def test_the_launches_cover_the_chapters_with_a_gpu_path():
    from nbhelpers.families import families

    launches = gt.launches()
    chapters = {c for x in launches for c in x.chapters}
    assert chapters == {c for f in families() for c in f.chapters} >= {"03", "08", "09", "10", "11"}
    assert set(gt.CHAPTERS) == {p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert all(x.case.target == "sm_90" for x in launches)
    # a tuned launch: the largest and the smallest operand buffers of its list, in that order
    tuned = [x for x in launches if x.tuned]
    assert tuned and len(tuned) % 2 == 0
    for big, small in zip(tuned[::2], tuned[1::2]):
        assert big.key == small.key and big.tuned.startswith("largest") and small.tuned.startswith("smallest")
        assert gt._buffers(big.case) > gt._buffers(small.case)
    # every fp8 launch is checked by its launcher the way the launcher checks it
    assert {x.fp8 for x in launches if x.dtype in ("e4m3", "e5m2")} == {"float8_e4m3fn", "float8_e5m2"}


def test_a_real_compile_for_sm_75():
    """Triton 3.7.1 compiles the copy kernel for a T4 and refuses an e4m3 dot there."""
    launches = gt.launches()
    copy = next(x for x in launches if x.launch == "copy(x)")
    e4m3 = next(x for x in launches if x.launch == "scaled_matmul(block=(32, 32))" and x.dtype == "e4m3")
    compiled = check([dataclasses.replace(x.case, target="sm_75") for x in (copy, e4m3)], jobs=1)
    rows = [gt.matrix_row(x, c) for x, c in zip((copy, e4m3), compiled)]
    assert rows[0]["verdict"] == "runs" and rows[0]["dot"] is False and rows[0]["shared_limit"] == 65_536
    assert gt.cell(rows[0]).startswith("no dot, ")
    assert rows[1]["verdict"] == "launcher refuses" and not rows[1]["compiles"]
    assert "fp8e4nv not supported in this architecture" in rows[1]["error"]


# ------------------------------------------------------------------ the committed file and page


def test_the_committed_results_file_is_todays(recorded):
    """benchmarks/results/compile_targets.json holds one complete row per launch and target of
    today's code: changing a launch or a config means running `make gpu-targets`."""
    assert recorded["meta"]["complete"] is True and recorded["chapters"] == gt.CHAPTERS
    assert set(recorded["meta"]["targets"]) == set(gt.TARGETS)
    have = [(r["launch"], r["dtype"], r["tuned"], r["config"], r["target"]) for r in recorded["rows"]]
    want = [(x.launch, x.dtype, x.tuned, x.case.config, t) for x in gt.launches() for t in gt.TARGETS]
    assert have == want, "run make gpu-targets"


def test_no_launch_stops_with_a_compiler_traceback(recorded):
    """Where Triton refuses a launch, its launcher refuses it first with a sentence; a launch over a
    target's shared memory is a tuned config whose list has another that runs there."""
    groups = gt._groups(recorded["rows"])
    for r in recorded["rows"]:
        if r["verdict"] == "runs":
            continue
        where = f"{r['launch']} on {r['dtype']} for {r['target']}"
        if not r["compiles"]:
            assert r["launcher_error"], f"{where}: Triton refuses it, and the launcher does not say why first"
        if r["verdict"] == "over shared memory":
            assert r["tuned"] and gt._runs(groups[(r["launch"], r["dtype"])][r["target"]]), where


def test_the_page_shows_the_results_file(recorded):
    """docs/gpu.md's generated tables are what the results file says (`python -m
    nbhelpers.tooling.gpu_targets --page` rewrites them)."""
    page = gt.PAGE.read_text()
    assert gt.update_page(page, recorded) == page, "run python -m nbhelpers.tooling.gpu_targets --page"
    assert "## Which GPU you have" in page and "sm_75 (T4)" in page


def test_the_page_says_which_chapters_run_where(recorded):
    summary = {s["chapter"]: s for s in gt.chapter_summary(recorded)}
    cpu_only = [c for c, s in summary.items() if not s["launches"]]
    assert [c for c in cpu_only if c <= "11"] == ["01", "02", "04", "05", "06", "07"]
    assert {c: summary[c]["lowest"] for c in ("03", "08", "09", "10", "11")} == {
        "03": "sm_75",
        "08": "sm_75",
        "09": "sm_89",
        "10": "sm_89",
        "11": "sm_75",
    }
    assert summary["03"]["no_tensor_cores"]["sm_75"] == ["bf16", "tf32"]
    assert summary["09"]["stops"]["sm_80"] == {("e4m3", "launcher refuses"): [
        "scaled_matmul(block=(32, 32))",
        "block_scaled_matmul(block=(32, 32))",
        "scaled_matmul(block=None)",
        "scaled_matmul(block=None, fast_accum=True)",
        "block_scaled_matmul(block=None)",
    ]}  # fmt: skip
    short = gt.render_short(recorded)
    assert gt._chapters(["03", "08", "11"]) == "chapters 03, 08 and 11"
    for target, words in (("sm_75", "run on sm_75 (T4)"), ("sm_89", "need sm_89 (L4, RTX 40) or newer")):
        chapters = [c for c, s in summary.items() if s["lowest"] == target]
        assert f"{words}: {gt._chapters(chapters)}" in short


def test_the_page_command(tmp_path, recorded):
    """--page rewrites only the generated block of the page it is given, from the results file."""
    results = tmp_path / "r.json"
    results.write_text(json.dumps(recorded))
    page = tmp_path / "p.md"
    page.write_text("# title\n\nbefore\n\n<!-- begin generated -->\nSTALE\n<!-- end generated -->\n\nafter\n")
    assert gt.main(["--page", "--out", str(results), "--page-file", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# title\n\nbefore\n\n<!-- begin generated from") and text.endswith("-->\n\nafter\n")
    assert "STALE" not in text and gt.render(recorded) in text
    page.write_text("no markers")
    with pytest.raises(ValueError, match="no '<!-- begin generated"):
        gt.main(["--page", "--out", str(results), "--page-file", str(page)])
