"""Register pressure on an NVIDIA GPU: the time of chapter 09's ema_kernel against its live values k.

    python benchmarks/gpu_register_pressure.py [--extras 0 2 4 ... 66] [--rows 256] [--cols 4194304]
                                               [--time-limit 25]
                                               [--out benchmarks/results/register_pressure_<gpu>.json]

Needs an NVIDIA GPU: without one (or with TRITON_INTERPRET=1) it prints one line and exits with
code 2. :func:`nbhelpers.kernels.pressure.ema_kernel` keeps ``k`` moving averages of a float32
``x (rows, cols)`` alive across its loop over the rows, 4 registers per thread each (BLOCK = 512
columns over 4 warps). For each ``k`` the script launches it once, checks the output against
:func:`nbhelpers.kernels.pressure.ema_ref` on the first block of columns, reads the compiled
kernel's registers and spills (``n_regs``; ``n_spills``, local memory per thread in 4-byte words)
and shared memory, derives the occupancy from them (:func:`nbhelpers.occupancy.occupancy`,
compute capability 9.0 rules), and times it with ``triton.testing.do_bench`` (median ms, CUDA
events). The default ``x`` is 256 x 2^22 float32 (4 GiB, read once per launch): 8,192
programs, several waves even at the highest occupancy, so the occupancy of each ``k`` is what the SMs really hold.

Each row records the measured slowdown against ``k = 0`` beside the bound occupancy predicts for
a latency-bound kernel (resident warps at ``k = 0`` over resident warps at ``k``). They need not
agree: the kernel also does 3 k + 1 flops per element read, so at large ``k`` it is bound by the
arithmetic, not by latency; chapter 09 reads both.

The results file ``benchmarks/results/register_pressure_<gpu-slug>.json`` holds ``meta`` (GPU,
driver, CUDA, compute capability, torch and Triton versions, UTC date, this script, the command)
and ``rows`` (one per k, each the family's ``RegisterPressureRow``: :func:`measure_case`),
rewritten after every row (``meta.complete`` is false until the end), so a run that fails or is
stopped halfway keeps what it measured. No ``k`` starts after ``--time-limit`` seconds (default
25): the rest are rows saying they were skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed package
    sys.path.insert(0, str(ROOT))

from nbhelpers.device import gpu_run_meta, start_gpu_script  # noqa: E402 (imports no torch)
from nbhelpers.families.pressure import RegisterPressureRow  # noqa: E402 (imports no torch)
from nbhelpers.occupancy import latency_bound_slowdown  # noqa: E402 (imports no torch)
from nbhelpers.results import REGISTER_PRESSURE, ResultsFile, sweep  # noqa: E402 (imports no torch)

SCRIPT = "benchmarks/gpu_register_pressure.py"
EXTRAS = tuple(range(0, 67, 2))
ROWS, COLS = 256, 1 << 22
DEFAULT_TIME_LIMIT_S = 25.0
CHECK_TOL = 1e-5  # relative, float32 sums of 256 rows against float64


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extras", type=int, nargs="+", default=list(EXTRAS), help="values of k (default 0, 2, ..., 66)")
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--cols", type=int, default=COLS)
    ap.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        help="start no k after this many seconds (the rest are recorded as skipped; default %(default)s)",
    )
    ap.add_argument("--out", help="results file (default: benchmarks/results/register_pressure_<gpu>.json)")
    args = ap.parse_args(argv)
    if min(args.extras) < 0 or args.rows < 1 or args.cols < 1 or not args.time_limit > 0:
        ap.error("--extras must be >= 0, --rows, --cols and --time-limit positive")
    if 0 not in args.extras:
        ap.error("--extras must include 0: the slowdowns are measured against k = 0")

    if not start_gpu_script("gpu_register_pressure.py"):
        return 2

    import torch

    from nbhelpers.timing import gpu_median_ms

    meta = {
        **gpu_run_meta(SCRIPT, argv),
        "rows": args.rows,
        "cols": args.cols,
        "timer": "triton.testing.do_bench (median ms)",
        "occupancy": "nbhelpers.occupancy, compute capability 9.0",
    }
    gpu = meta["gpu"]
    out = Path(args.out) if args.out else REGISTER_PRESSURE.path(gpu, ROOT / "benchmarks" / "results")
    results = ResultsFile(out, meta, REGISTER_PRESSURE)
    x = torch.randn((args.rows, args.cols), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    print(f"{gpu}: ema_kernel on x {args.rows} x {args.cols} float32")
    run_cases(
        sorted(set(args.extras)),
        x,
        results,
        gpu_median_ms,
        time_limit=args.time_limit,
        sms=torch.cuda.get_device_properties(0).multi_processor_count,
    )
    results.finish()
    print(f"wrote {out}")
    return 0


def launch(x, k: int):
    """One launch of ema_kernel as :func:`nbhelpers.kernels.pressure.ema` launches it; returns
    (output, what the launch returned: the compiled kernel on a GPU)."""
    import torch
    import triton

    from nbhelpers.kernels import pressure

    n_rows, n_cols = x.shape
    out = torch.empty((k + 1, n_cols), dtype=torch.float32, device=x.device)
    kernel = pressure.ema_kernel[(triton.cdiv(n_cols, pressure.BLOCK),)](
        x, out, n_rows, n_cols, x.stride(0), out.stride(0), BLOCK=pressure.BLOCK, EXTRA=k, num_warps=pressure.NUM_WARPS
    )
    return out, kernel


def compiled_info(kernel) -> dict:
    """Registers, spills and shared memory of a compiled kernel (None each in the interpreter)."""
    if kernel is None or not hasattr(kernel, "n_regs"):
        return {"registers": None, "spills": None, "shared": None}
    return {"registers": int(kernel.n_regs), "spills": int(kernel.n_spills), "shared": int(kernel.metadata.shared)}


def measure_case(k: int, x, time_fn, info_fn=compiled_info) -> RegisterPressureRow:
    """The row of one k, as the family's row (nbhelpers/families/pressure.py): checked, compiled
    facts, occupancy, median ms (``time_fn(fn)``); or, when the output is wrong, an ``error``
    instead of the time. The slowdowns are :func:`run_cases`'s."""
    from nbhelpers.kernels import pressure
    from nbhelpers.occupancy import occupancy

    out, kernel = launch(x, k)
    block = min(pressure.BLOCK, x.shape[1])
    ref = pressure.ema_ref(x[:, :block], k)
    got = out[:, :block].double().cpu()
    rel = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    info = info_fn(kernel)
    if not rel <= CHECK_TOL:
        why = f"output differs from ema_ref by {rel:.3g} (relative), more than {CHECK_TOL}: not timed"
        return RegisterPressureRow(k=k, rel_diff=rel, **info, error=why)
    occ = {}
    if info["registers"] is not None:
        o = occupancy(info["registers"], pressure.NUM_WARPS, info["shared"])
        occ = {"warps_per_sm": o.warps, "blocks_per_sm": o.blocks, "limit": str(o.limit)}
    ms = float(time_fn(lambda: launch(x, k)))
    gb_per_s = x.numel() * x.element_size() / (ms * 1e-3) / 1e9
    return RegisterPressureRow(k=k, rel_diff=rel, **info, **occ, ms=ms, gb_per_s=gb_per_s)


def run_cases(
    extras,
    x,
    results: ResultsFile,
    time_fn,
    time_limit: float | None = None,
    clock=time.monotonic,
    info_fn=compiled_info,
    sms: int = 132,
) -> list[dict]:
    """Measure each k into ``results`` (:func:`nbhelpers.results.sweep`), each row written as
    soon as it is done, with the slowdown against the first k's row and occupancy's two
    latency-bound estimates of it (:func:`nbhelpers.occupancy.latency_bound_slowdown` on ``sms``
    SMs: the warp ratio and the wave ratio); a k that would start after ``time_limit`` seconds is
    a row saying it was skipped. An error stops the run and propagates, with the rows before it
    kept."""
    t_start = clock()
    first: dict = {}

    def one(k):
        if time_limit is not None and clock() - t_start > time_limit:
            print(f"  k = {k:2d}: skipped (time limit)")
            why = f"skipped: past the time limit of {time_limit:.0f} s"
            yield REGISTER_PRESSURE.as_dict(RegisterPressureRow(k=k, error=why))
            return
        row = measure_case(k, x, time_fn, info_fn)
        if row.error is None:
            base = first.setdefault("row", row)
            warps = waves = None
            if row.blocks_per_sm and base.blocks_per_sm:  # occupancy's two latency-bound estimates
                from nbhelpers.kernels import pressure

                programs = -(-x.shape[1] // pressure.BLOCK)
                warps, waves = latency_bound_slowdown(programs, base.blocks_per_sm, row.blocks_per_sm, sms)
            row = dataclasses.replace(
                row, slowdown=row.ms / base.ms, predicted_slowdown_warps=warps, predicted_slowdown_waves=waves
            )
            print(
                f"  k = {k:2d}: {row.registers} registers, {4 * row.spills} B of local memory, "
                f"{row.warps_per_sm} warps/SM: {row.ms:.3f} ms ({row.slowdown:.2f}x k=0)"
            )
        else:
            print(f"  k = {k:2d}: {row.error}")
        yield REGISTER_PRESSURE.as_dict(row)

    return sweep(extras, one, results)


if __name__ == "__main__":
    raise SystemExit(main())
