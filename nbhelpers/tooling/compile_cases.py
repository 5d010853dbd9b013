"""The course's compile cases, all of them, and the command that compiles them: ``make gpu-compile``.

Every kernel family declares its cases in its manifest (:mod:`nbhelpers.families`): the
package's kernels with every config their launchers or autotune lists can pick, and the kernels
of the solutions (read from the solution notebooks) and of the tests that stand for it.
:func:`course_cases` gathers them; :func:`main` (``python -m nbhelpers.compile_check``, or this
module with ``-m``) compiles them with :func:`nbhelpers.compile_check.check` and writes
``benchmarks/results/compile_check.json``, which chapter 09 reads. ``--update`` compiles only the
cases selected (new kernels: ``--kernels topk --update``) and keeps the file's other rows as they
were recorded, so that their compile times still come from one machine. A subset runs in ``make
test`` (tests/test_compile_check.py).

Repository tooling: it reads ``solutions/`` and ``tests/``; nothing the notebooks import imports it.
Needs Triton with its NVIDIA backend (the Linux wheels); no GPU, no CUDA driver.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from ..compile_check import ROOT, SHARED_LIMIT, capability_of, check, findings, kernel_exists
from ..families import Case, families, gemm_args

__all__ = [
    "TARGETS",
    "DEFAULT_RESULTS",
    "course_cases",
    "cases_for",
    "compile_meta",
    "gemm_args",
    "main",
]

DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "compile_check.json"

#: target name -> compute capability: the targets the cases are written for
TARGETS = {"sm_90": 90, "sm_80": 80}


def course_cases(kernels: str | None = None, sources=("package", "solution", "test")) -> list[Case]:
    """Every case of every family (:func:`nbhelpers.families.families`), or those whose kernel
    name contains ``kernels``: first the package's, then the solutions' and the tests' (those
    whose kernel is not in its file are left out: an exercise not yet written)."""
    cases: list[Case] = []
    every = families()
    if "package" in sources:
        for family in every:
            cases += family.cases()
    for source in ("solution", "test"):
        if source in sources:
            cases += [c for f in every for c in f.exercise_cases() if c.source == source and kernel_exists(c.kernel)]
    if kernels:
        cases = [c for c in cases if kernels in c.kernel]
    return cases


def cases_for(target: str, cases: list[Case]) -> list[Case]:
    """The cases to compile for ``target``: its own where the course lists some (sm_90, sm_80),
    else the sm_90 cases compiled for it (what a GPU of that capability would compile). Below
    sm_80 there are none: the sm_90 configs are sized for GPUs with ``cp.async`` and bf16 tensor
    cores, and a T4 (sm_75) compiles their bf16 dots as FMA loops (``python -m
    nbhelpers.tooling.gpu_targets`` compiles the chapters' own launches for sm_75)."""
    cap = capability_of(target)
    own = [c for c in cases if c.target == target]
    if own or target in TARGETS.keys():
        return own
    if cap < 80:
        raise ValueError(
            f"the full check compiles for sm_80 and newer, not {target}; "
            "python -m nbhelpers.tooling.gpu_targets compiles the chapters' launches for sm_75"
        )
    return [dataclasses.replace(c, target=target) for c in cases if c.target == "sm_90" and not c.expect_error]


def compile_meta(jobs: int, cold: bool, command: str) -> dict:
    """A results file's meta: the command, the UTC date, the Triton, ptxas and Python versions, the
    machine, the jobs, whether the cache was cold, and the shared-memory limits by target."""
    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    try:
        ptxas = get_ptxas(90).version
    except Exception:
        ptxas = None
    from ..device import cpu_model

    return {
        "script": "python -m nbhelpers.compile_check",
        "command": command,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "triton": triton.__version__,
        "ptxas": ptxas,
        "python": platform.python_version(),
        "machine": f"{cpu_model() or platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "jobs": jobs,
        "cold_cache": cold,
        "shared_limit": {f"sm_{k}": v for k, v in SHARED_LIMIT.items()},
    }


def _row_key(c) -> tuple:
    """(kernel, label, config, target) of a Case or of a results row: what names one row."""
    if isinstance(c, Case):
        return (c.kernel.rpartition(":")[2], c.label, c.config, c.target)
    return (c["kernel"], c["label"], c["config"], c["target"])


def _kept_rows(path: Path, cases: list[Case], meta: dict) -> tuple[list[dict], dict, float | None]:
    """For ``--update``: the rows of the results file at ``path`` that no case of this run
    replaces (in their order), the file's own meta with this run appended to its ``updates``
    (what ran, when, where, how many cases), and the file's wall time."""
    try:
        old = json.loads(path.read_text())
        old_meta, old_rows = dict(old["meta"]), list(old["rows"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--update needs a results file of this check at {path}: {e}") from None
    for tool in ("triton", "ptxas"):  # rows of one table must come from one compiler
        if old_meta.get(tool) != meta[tool]:
            raise SystemExit(
                f"--update: {path} was compiled with {tool} {old_meta.get(tool)}, this run has "
                f"{meta[tool]}; recompile every case (without --update)"
            )
    now = {_row_key(c) for c in cases}
    kept = [r for r in old_rows if _row_key(r) not in now]
    update = {k: meta[k] for k in ("command", "date", "triton", "ptxas", "machine", "jobs", "cold_cache")}
    old_meta.pop("complete", None)
    old_meta["updates"] = [*old_meta.get("updates", []), {**update, "cases": len(cases)}]
    return kept, old_meta, old.get("wall_s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m nbhelpers.compile_check",
        description="Compile every kernel of the course for sm_90 / sm_80 without a GPU "
        "and check registers, spills and shared memory.",
    )
    ap.add_argument("--kernels", help="only kernels whose name contains this string")
    ap.add_argument("--sources", default="package,solution,test", help="package,solution,test (default: all)")
    ap.add_argument(
        "--target", help="only this target (sm_90, sm_80; another sm_NN from sm_80 up compiles the sm_90 cases for it)"
    )
    ap.add_argument("--defaults-only", action="store_true", help="only the configs the course uses by default")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiles at a time (default: all cores)")
    ap.add_argument("--cold", action="store_true", help="compile into an empty Triton cache (to measure compile times)")
    ap.add_argument("--out", default=str(DEFAULT_RESULTS), help="results file (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="list the cases and stop")
    ap.add_argument(
        "--warm",
        action="store_true",
        help="exit 0 whatever the findings (on a GPU machine: fill Triton's cache before the benchmarks)",
    )
    ap.add_argument("--gpu", help="the GPU this run prepares, recorded in the results file's meta")
    ap.add_argument(
        "--update",
        action="store_true",
        help="replace only the rows of the cases compiled now and keep the results file's others "
        "(with --kernels: add a new kernel's cases without recompiling the course)",
    )
    args = ap.parse_args(argv)
    cases = course_cases(args.kernels, tuple(s.strip() for s in args.sources.split(",")))
    if args.target:
        try:
            cases = cases_for(args.target, cases)
        except ValueError as e:
            if args.warm:  # a GPU the check has no limits for: nothing to prepare, not a failure
                print(f"compile check: nothing to compile for {args.target} ({e})")
                return 0
            ap.error(str(e))
    if args.defaults_only:
        cases = [c for c in cases if c.default]
    if args.list:
        for c in cases:
            print(f"{c.target}  {c.kernel}  [{c.label}]  {c.config}{'' if c.default else '  (not default)'}")
        print(f"{len(cases)} cases")
        return 0
    if args.cold:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")
    from ..results import ResultsFile

    command = "python -m nbhelpers.compile_check " + " ".join(sys.argv[1:] if argv is None else argv)
    meta = compile_meta(args.jobs, args.cold, command.strip())
    if args.gpu:
        meta["gpu"] = args.gpu
    kept: list[dict] = []
    if args.update:
        kept, meta, old_wall_s = _kept_rows(Path(args.out), cases, meta)
    results = ResultsFile(args.out, meta)
    results.rows = list(kept)  # on disk with the first new row: a stopped run loses none of them
    t0 = time.perf_counter()

    def on_row(r):
        results.add(r)
        state = (
            r["status"]
            if r["status"] != "ok"
            else (f"{r['registers']:3d} regs, spill {r['spill_stores']:4d} B, smem {r['shared']:7,d} B, {r['mma']}")
        )
        print(f"{r['compile_s']:6.1f} s  {r['target']}  {r['kernel']:<28s} {r['config']:<34s} {state}", flush=True)

    new = check(cases, args.jobs, on_row)
    wall_s = round(time.perf_counter() - t0, 1)
    rows = kept + new  # with --update: the whole table is judged and written, the new rows last
    bad = findings(rows)
    if args.update:
        results.meta["updates"][-1]["wall_s"] = wall_s
        wall_s = old_wall_s
    results.finish(rows=rows, wall_s=wall_s, findings=bad)
    print(
        f"{len(new)} cases in {time.perf_counter() - t0:.0f} s with {args.jobs} jobs; wrote {args.out}"
        + (f" ({len(kept)} rows kept)" if args.update else "")
    )
    for b in bad:
        print("FINDING:", b)
    return 1 if bad and not args.warm else 0


if __name__ == "__main__":
    raise SystemExit(main())
