"""Speed of the emulated GEMM (nbhelpers.accumulation.emulated_matmul) against np.matmul.

    python benchmarks/bench_gemm_emulation.py [--M 256] [--N 256] [--K 4096] [--repeats 3] [--json out.json]

Times, in one run, emulated_matmul(A, B, in_fmt="bf16", acc="bf16") (sequential, nearest-even:
a loop over K, each step rounding an M x N accumulator) and float64 np.matmul of the same
bf16-rounded inputs; prints the medians of interleaved runs and their ratio. Napkin math: the emulation
does K steps of about 15 passes over M*N float64 values (outer product, add, bit-pattern rounding,
range and midpoint checks): 4096 * 15 * 65536 * 8 bytes = 32 GB of cache traffic, so about 1 s
on one core; np.matmul does 2*M*N*K = 0.5 GFLOP in BLAS, tens of milliseconds. The course's goal:
the emulation under 2 s on one core for M=N=256, K=4096.

The emulation is single-threaded numpy. BLAS threads are limited to one with threadpoolctl when
it is installed; otherwise np.matmul may use every core (the output says which).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
from datetime import UTC, datetime

import numpy as np

from nbhelpers.accumulation import emulated_matmul
from nbhelpers.rounding import round_to
from nbhelpers.timing import interleaved_medians


def one_blas_thread():
    """(context manager, description of the BLAS threading)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext(), "BLAS threads not limited (threadpoolctl not installed)"
    return threadpool_limits(limits=1, user_api="blas"), "BLAS limited to 1 thread (threadpoolctl)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--M", type=int, default=256)
    ap.add_argument("--N", type=int, default=256)
    ap.add_argument("--K", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    M, N, K = args.M, args.N, args.K

    rng = np.random.default_rng(0)
    A = round_to(rng.standard_normal((M, K)), "bf16")
    B = round_to(rng.standard_normal((K, N)), "bf16")
    limiter, threading = one_blas_thread()
    with limiter:
        C = emulated_matmul(A, B, "bf16", "bf16")  # warm-up, and a sanity check of the result
        C_ref = A @ B
        rel = np.abs(C - C_ref).max() / np.abs(C_ref).max()
        # interleaved: emulation, numpy, emulation, numpy, ... (the warm-up ran just above)
        t_emu, t_np = interleaved_medians(
            {"emulated": lambda: emulated_matmul(A, B, "bf16", "bf16"), "numpy": lambda: A @ B},
            args.repeats,
            warmup_rounds=0,
        ).values()
    ratio = t_emu / t_np
    print(f"emulated GEMM, bf16 inputs, bf16 accumulator (sequential, nearest-even), M={M} N={N} K={K}")
    print(f"numpy {np.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {threading}")
    print(f"emulated_matmul   median of {args.repeats} interleaved runs: {t_emu:8.3f} s")
    print(f"np.matmul float64 median of {args.repeats} interleaved runs: {t_np * 1e3:8.2f} ms")
    print(f"ratio emulated / np.matmul: {ratio:,.0f}x")
    print(f"max |C_emulated - C_float64| / max |C_float64| = {rel:.3g} (the bf16 accumulator's error)")
    goal = M == 256 and N == 256 and K == 4096
    if goal:
        print(f"goal (under 2 s at 256 x 256 x 4096): {'met' if t_emu < 2.0 else 'NOT met'}")
    if args.json:
        meta = {
            "script": "benchmarks/bench_gemm_emulation.py",
            "M": M,
            "N": N,
            "K": K,
            "repeats": args.repeats,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "numpy": np.__version__,
            "blas_threads": threading,
        }
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "meta": meta,
                    "results": {"emulated_s": t_emu, "np_matmul_s": t_np, "ratio": ratio, "max_rel_error": rel},
                },
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
