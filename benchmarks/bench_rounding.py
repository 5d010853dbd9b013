"""Throughput of nbhelpers.rounding.round_to against the library cast there and back, in one run.

    python benchmarks/bench_rounding.py [--n 10000000] [--runs 7] [--json out.json]

round_to returns values (on the format's grid), so the fair peer is the library cast there and
back: ``x.astype(dtype).astype(x.dtype)`` (ml_dtypes for bf16 and the fp8 formats, numpy for
fp16). For float32 and float64 inputs (10 million normal random numbers spread over many
binades; the float64 ones use all 53 bits) and each format, the two are timed interleaved
(A, B, A, B, ...) ``--runs`` times each and the medians compared. Printed: both medians, our
throughput in million values per second and the ratio peer_time / round_to_time (> 1 means
round_to is faster). float32 input is timed twice: with round_to's default float64 result, and
with ``dtype=np.float32`` (the same values in the peer's own result type).

Before timing, the results are compared value by value. For float32 input they must be
bit-identical (both round once), or nothing is timed. For float64 input the peers may differ:
ml_dtypes up to 0.6 converts float64 through float32 and so rounds twice; 0.7.0 rounds once.
The script counts the values that differ and, where some do, checks whether the peer's results
are round_to of the float32 cast (a double rounding) and prints which (round_to rounds once;
tests/test_rounding.py holds it against a reference, and ml_dtypes' casts version by version).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import UTC, datetime

import ml_dtypes
import numpy as np

from nbhelpers.device import cpu_model
from nbhelpers.formats import FORMATS
from nbhelpers.rounding import round_to
from nbhelpers.timing import interleaved_medians

FORMATS_TO_TIME = ["bf16", "fp16", "e4m3fn", "e5m2"]


def peer_dtype(name: str) -> tuple[str, np.dtype]:
    """The library whose cast is the peer, and its dtype holding the format's values."""
    ml = FORMATS[name].ml_dtype
    if ml in ("float16", "float32"):
        return "numpy", np.dtype(getattr(np, ml))
    return "ml_dtypes", np.dtype(getattr(ml_dtypes, ml))


def differing(ours: np.ndarray, theirs: np.ndarray) -> int:
    """How many values differ (NaN equals NaN; +0 and -0 differ)."""
    theirs = theirs.astype(np.float64)
    same = ((ours == theirs) & (np.signbit(ours) == np.signbit(theirs))) | (np.isnan(ours) & np.isnan(theirs))
    return int((~same).sum())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=7, help="timed runs of each side (median)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    spread = np.exp2(rng.integers(-12, 12, args.n))
    inputs = {
        "float32": (rng.standard_normal(args.n) * spread).astype(np.float32),
        "float64": rng.standard_normal(args.n) * spread,
    }
    print(f"round_to vs the library cast there and back, {args.n:,} values, median of {args.runs} interleaved runs")
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    print(
        f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, "
        f"{cpu_model()}, {os.cpu_count()} CPUs, load average {load}"
    )
    print(
        f"{'input':8s} {'result':8s} {'format':7s} {'peer':>8s} {'round_to ms':>12s} {'peer ms':>9s} "
        f"{'round_to Mval/s':>16s} {'ratio':>7s}  differing values"
    )
    rows = []
    # round_to returns float64 by default; with float32 input, dtype=np.float32 returns the same
    # values as float32, the like-for-like result of the peer's round trip
    runs = [(i, r) for i in inputs for r in (("float64", "float32") if i == "float32" else ("float64",))]
    for in_name, out_name in runs:
        x = inputs[in_name]
        out_dtype = np.dtype(out_name)
        for name in FORMATS_TO_TIME:
            f = FORMATS[name]
            peer, dt = peer_dtype(name)
            with np.errstate(over="ignore", invalid="ignore"):
                ours = round_to(x, f, dtype=out_dtype)
                theirs = x.astype(dt).astype(x.dtype)
            n_diff = differing(ours, theirs)
            if n_diff and x.dtype == np.float32:
                print(f"{in_name} -> {out_name} {name}: results differ in {n_diff} places; not timing", file=sys.stderr)
                return 1
            rounds_twice = None  # decided from this run, not from the peer's version
            if n_diff:
                with np.errstate(over="ignore", invalid="ignore"):
                    via_float32 = round_to(x.astype(np.float32), f, dtype=out_dtype)
                rounds_twice = differing(via_float32, theirs) == 0
                del via_float32
            del ours, theirs

            def ours_fn():
                round_to(x, f, dtype=out_dtype)

            def peer_fn():
                with np.errstate(over="ignore", invalid="ignore"):
                    x.astype(dt).astype(x.dtype)

            medians = interleaved_medians({"ours": ours_fn, "peer": peer_fn}, args.runs, warmup_rounds=0)
            t_ours, t_peer = medians["ours"], medians["peer"]
            ratio = t_peer / t_ours
            rows.append(
                {
                    "input": in_name,
                    "result": out_name,
                    "format": name,
                    "peer": f"{peer} x.astype({dt.name}).astype({in_name})",
                    "round_to_s": t_ours,
                    "peer_s": t_peer,
                    "ratio": ratio,
                    "values_differing_from_peer": n_diff,
                    "peer_equals_round_to_of_float32_cast": rounds_twice,
                }
            )
            note = (
                "0"
                if not n_diff
                else f"{n_diff} (peer rounds twice, through float32)"
                if rounds_twice
                else f"{n_diff} (peer is not round_to of the float32 cast either)"
            )
            print(
                f"{in_name:8s} {out_name:8s} {name:7s} {peer:>9s} {t_ours * 1e3:11.1f} {t_peer * 1e3:9.1f} "
                f"{args.n / t_ours / 1e6:16.1f} {ratio:7.2f}x  {note}"
            )
    if args.json:
        meta = {
            "script": "benchmarks/bench_rounding.py",
            "command": " ".join(
                ["python", "benchmarks/bench_rounding.py", *(argv if argv is not None else sys.argv[1:])]
            ),
            "n": args.n,
            "runs": args.runs,
            "statistic": "median of interleaved runs",
            "ratio": "peer_s / round_to_s (> 1: round_to faster)",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": platform.machine(),
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "load_average_1min_at_start": load,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "ml_dtypes": ml_dtypes.__version__,
        }
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": rows}, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
