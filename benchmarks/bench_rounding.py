"""Throughput of nbhelpers.rounding.round_to against the ml_dtypes cast, measured in one run.

    python benchmarks/bench_rounding.py [--n 10000000] [--repeats 5] [--json out.json]

For each format: round 10 million float32 values (normal random numbers spread over many
binades) with ``round_to`` (float64 values on the grid) and with ``x.astype(ml_dtype)``; prints
the best-of-repeats time, the throughput in million values per second and the ratio
ml_dtypes_time / round_to_time (> 1 means round_to is faster). The two results are checked to be
bit-identical before anything is timed. The course's goal: ratio >= 1.0 for the 8-bit formats.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import datetime, timezone

import ml_dtypes
import numpy as np

from nbhelpers.benchmarks import best_time
from nbhelpers.formats import FORMATS
from nbhelpers.rounding import round_to

FORMATS_TO_TIME = ["e4m3fn", "e5m2", "bf16"]



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    x = (rng.standard_normal(args.n) * np.exp2(rng.integers(-12, 12, args.n))).astype(np.float32)
    print(f"round_to vs ml_dtypes cast, {args.n:,} float32 values, best of {args.repeats}")
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, {platform.processor() or platform.machine()}")
    print(f"{'format':8s} {'round_to ms':>12s} {'ml_dtypes ms':>13s} {'round_to Mval/s':>16s} {'ratio':>7s}")
    rows = []
    for name in FORMATS_TO_TIME:
        f = FORMATS[name]
        dt = getattr(ml_dtypes, f.ml_dtype)
        with np.errstate(over="ignore"):
            ours = round_to(x, f)
            theirs = x.astype(dt).astype(np.float64)
        same = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
        if not same.all():
            print(f"{name}: results differ in {(~same).sum()} places; not timing", file=sys.stderr)
            return 1
        t_ours = best_time(lambda: round_to(x, f), args.repeats)
        with np.errstate(over="ignore"):
            t_theirs = best_time(lambda: x.astype(dt), args.repeats)
        ratio = t_theirs / t_ours
        rows.append({"format": name, "round_to_s": t_ours, "ml_dtypes_s": t_theirs, "ratio": ratio})
        print(f"{name:8s} {t_ours * 1e3:12.1f} {t_theirs * 1e3:13.1f} {args.n / t_ours / 1e6:16.1f} {ratio:7.2f}x")
    goal = all(r["ratio"] >= 1.0 for r in rows if FORMATS[r["format"]].bits == 8)
    print(f"goal (8-bit formats at least 1.0x ml_dtypes): {'met' if goal else 'NOT met'}")
    if args.json:
        meta = {"script": "benchmarks/bench_rounding.py", "n": args.n, "repeats": args.repeats,
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": platform.machine(), "cpus": os.cpu_count(),
                "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
