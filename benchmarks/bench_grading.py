"""How long the grader takes per submission: a class of 30 ordinary chapter 01 submissions graded
with ``--jobs 2`` and a secret seed, sandbox included (as an instructor runs it).

The target: under 1.5 s per submission on the course's 2-core machine. The class is a
mix, like a real one: full solutions, untouched exercise notebooks, and solutions with one or two
functions wrong. The script prints the wall time, the seconds per submission, the ratio to the
target, and the spread of the per-submission times the grader recorded; it exits 1 when the
target is missed (or a submission got a status other than "graded").

Run: ``python benchmarks/bench_grading.py [--jobs 2] [--no-sandbox] [--n 30]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.5  # seconds per submission, --jobs 2, on 2 cores

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-sandbox", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        (tmp / "class").mkdir()
        make_class(tmp / "class", args.n)
        (tmp / "seed").write_text("8142093377\n")
        cmd = [
            sys.executable,
            "-m",
            "nbhelpers.grade",
            str(tmp / "class"),
            "--csv",
            str(tmp / "g.csv"),
            "--json",
            str(tmp / "g.json"),
            "--seed-file",
            str(tmp / "seed"),
            "--jobs",
            str(args.jobs),
            "--no-progress",
        ] + (["--no-sandbox"] if args.no_sandbox else [])
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.monotonic()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if done.returncode != 0:
            print(done.stdout + done.stderr)
            return 1
        records = json.loads((tmp / "g.json").read_text())["submissions"]
    per = sorted(r["seconds"] for r in records)
    statuses = {r["status"] for r in records}
    per_sub = wall / len(records)
    print(
        f"grading {len(records)} submissions, --jobs {args.jobs}, "
        f"{'no sandbox' if args.no_sandbox else 'sandbox'}, {os.cpu_count()} CPUs: {wall:.1f} s wall"
    )
    print(
        f"  {per_sub:.2f} s per submission; target {TARGET_S} s: ratio {per_sub / TARGET_S:.2f} "
        f"({'met' if per_sub <= TARGET_S else 'MISSED'})"
    )
    print(
        f"  each submission took {per[0]:.1f} to {per[-1]:.1f} s (median {per[len(per) // 2]:.1f} s); "
        f"statuses: {', '.join(sorted(statuses))}"
    )
    return 0 if per_sub <= TARGET_S and statuses == {"graded"} else 1


if __name__ == "__main__":
    sys.exit(main())
