"""How long the grader takes per submission: a class of 30 ordinary chapter 01 submissions graded
with ``--jobs 2`` and a secret seed, sandbox included (as an instructor runs it).

The target: under 1.5 s per submission on the course's 2-core machine. The class is a
mix, like a real one: full solutions, untouched exercise notebooks, and solutions with one or two
functions wrong. The script prints the wall time, the seconds per submission, the ratio to the
target, and the spread of the per-submission times the grader recorded; it exits 1 when the
target is missed (or a submission got a status other than "graded").

Then a classmate beside a CPU hog: four honest submissions graded with ``--jobs 2``, alone and
then beside a submission that keeps 40 processes busy for 30 s (each in a session of its own).
Each kernel's processes together get the machine's cores shared among ``--jobs`` (a cpu cgroup,
where the grader can make one), so the target is that the honest submissions' median time beside
the hog is within 1.5 times their median time alone; the script prints that ratio too.

Run: ``python benchmarks/bench_grading.py [--jobs 2] [--no-sandbox] [--n 30] [--no-hog]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.5  # seconds per submission, --jobs 2, on 2 cores
HOG_TARGET = 1.5  # an honest submission's time beside a CPU hog, over its time alone
HOG_SECONDS = 30
HOG = f"""
import subprocess, sys
_spin = "import time\\nt = time.time()\\nwhile time.time() - t < {HOG_SECONDS}:\\n    pass\\n"
_ps = [subprocess.Popen([sys.executable, "-c", _spin], start_new_session=True) for _ in range(40)]
for _p in _ps:
    _p.wait()
"""

# (function, text in its solution, replacement): wrong answers of the kind students hand in
MISTAKES = [
    ("rounding_interval", "if round(a / q) % 2 == 1:", "if False:"),
    ("count_values", "math.ceil(y / q) if up else math.floor(y / q)", "round(y / q)"),
    ("smallest_absorbing", "2.0 ** (man_bits + 1)", "2.0 ** man_bits"),
    ("decode_bits", "if E == 0:", "if False:"),
]


def make_class(folder: Path, n: int) -> None:
    solution = ROOT / "solutions" / "ex01_float_formats.ipynb"
    exercise = ROOT / "exercises" / "ex01_float_formats.ipynb"
    for i in range(n):
        kind = i % 3
        if kind == 1:
            (folder / f"student{i:02d}_ex01.ipynb").write_bytes(exercise.read_bytes())
            continue
        nb = nbformat.read(solution, as_version=4)
        if kind == 2:
            for name, old, new in (MISTAKES[i % 4], MISTAKES[(i + 1) % 4])[: 1 + i % 2]:
                cell = next(c for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source)
                assert old in cell.source, (name, old)
                cell.source = cell.source.replace(old, new)
        nbformat.write(nb, str(folder / f"student{i:02d}_ex01.ipynb"))


def grade(folder: Path, tmp: Path, jobs: int, no_sandbox: bool) -> tuple[list[dict], float]:
    """Every submission's record, and the wall time of the run: the grader as an instructor runs
    it, with a secret seed."""
    (tmp / "seed").write_text("8142093377\n")
    cmd = [sys.executable, "-m", "nbhelpers.grade", str(folder), "--csv", str(tmp / "g.csv")]
    cmd += ["--json", str(tmp / "g.json"), "--seed-file", str(tmp / "seed"), "--jobs", str(jobs), "--no-progress"]
    cmd += ["--no-sandbox"] if no_sandbox else []
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for f in (tmp / "g.csv", tmp / "g.json"):
        f.unlink(missing_ok=True)
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    return json.loads((tmp / "g.json").read_text())["submissions"], wall


def beside_a_hog(tmp: Path, jobs: int, no_sandbox: bool) -> int:
    """Four honest submissions' median time alone and beside the hog, and the ratio."""
    folder = tmp / "hog-class"
    folder.mkdir()
    solution = ROOT / "solutions" / "ex01_float_formats.ipynb"
    for i in range(4):
        (folder / f"student{i}_ex01.ipynb").write_bytes(solution.read_bytes())
    alone, _ = grade(folder, tmp, jobs, no_sandbox)
    nb = nbformat.read(solution, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(HOG))
    nbformat.write(nb, str(folder / "a_hog_ex01.ipynb"))  # first: busy while the others are graded
    beside, _ = grade(folder, tmp, jobs, no_sandbox)
    honest = [r for r in beside if "hog" not in Path(r["file"]).name]
    hog = next(r for r in beside if "hog" in Path(r["file"]).name)
    t_alone = statistics.median(r["seconds"] for r in alone)
    t_beside = statistics.median(r["seconds"] for r in honest)
    ratio = t_beside / t_alone
    print(
        f"a classmate beside a CPU hog (40 busy processes for {HOG_SECONDS} s), --jobs {jobs}: "
        f"{t_alone:.1f} s alone, {t_beside:.1f} s beside it (medians of 4); ratio {ratio:.2f}, "
        f"target {HOG_TARGET} ({'met' if ratio <= HOG_TARGET else 'MISSED'})"
    )
    print(f"  the hog's kernels used {hog.get('kernel_cpu_s')} CPU s in {hog['seconds']:.1f} s")
    full = all(r["total"] == r["max"] for r in alone + honest)
    return 0 if ratio <= HOG_TARGET and full else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-sandbox", action="store_true")
    ap.add_argument("--no-hog", action="store_true", help="skip the classmate beside a CPU hog")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        (tmp / "class").mkdir()
        make_class(tmp / "class", args.n)
        try:
            records, wall = grade(tmp / "class", tmp, args.jobs, args.no_sandbox)
        except RuntimeError as e:
            print(e)
            return 1
        report(records, wall, args.jobs, args.no_sandbox)
        hog = 0 if args.no_hog else beside_a_hog(tmp, args.jobs, args.no_sandbox)
    per_sub = wall / len(records)
    return 0 if per_sub <= TARGET_S and {r["status"] for r in records} == {"graded"} and hog == 0 else 1


def report(records: list[dict], wall: float, jobs: int, no_sandbox: bool) -> None:
    per = sorted(r["seconds"] for r in records)
    statuses = {r["status"] for r in records}
    per_sub = wall / len(records)
    print(
        f"grading {len(records)} submissions, --jobs {jobs}, "
        f"{'no sandbox' if no_sandbox else 'sandbox'}, {os.cpu_count()} CPUs: {wall:.1f} s wall"
    )
    print(
        f"  {per_sub:.2f} s per submission; target {TARGET_S} s: ratio {per_sub / TARGET_S:.2f} "
        f"({'met' if per_sub <= TARGET_S else 'MISSED'})"
    )
    print(
        f"  each submission took {per[0]:.1f} to {per[-1]:.1f} s (median {per[len(per) // 2]:.1f} s); "
        f"statuses: {', '.join(sorted(statuses))}"
    )


if __name__ == "__main__":
    sys.exit(main())
