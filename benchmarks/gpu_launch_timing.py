"""What a host clock sees of a GPU launch (chapter 08, section 2), on a real GPU.

    python benchmarks/gpu_launch_timing.py [--n 67108864] [--block 1024] [--repeats 20]
                                           [--lead-cycles 2000000] [--race-n 67108864] [--tries 5]
                                           [--out benchmarks/results/launch_timing_<gpu>.json]

Needs an NVIDIA GPU (without one it exits with code 2 and a one-line message). It times one launch
of :func:`nbhelpers.kernels.copy.copy_kernel` copying --n float32 (each element read once and
written once) the ways :func:`nbhelpers.launch_timing.time_launch` does, each --repeats times
from an idle device: the host's clock stopped when the launch returns (the wrong way), the same
around torch's ``y.copy_(x)`` (what a launch from PyTorch costs the host, against a Triton
launch from Python), the host's clock stopped after ``torch.cuda.synchronize()``, CUDA events
around the launch on an idle stream (they time the host's launch too), the same events behind
--lead-cycles of ``torch.cuda._sleep`` queued first (the kernel alone), and
``triton.testing.do_bench`` (:func:`nbhelpers.timing.gpu_median_ms`). Then it runs the race
of :func:`nbhelpers.launch_timing.race_tries` --tries times: a kernel and a non-blocking copy into
pinned memory, the host buffer read at once and after a synchronisation, with ``event.query()``
of an event recorded after the copy at both moments.

The results file ``benchmarks/results/launch_timing_<gpu-slug>.json`` holds ``meta`` (GPU,
driver, CUDA, capability, torch and Triton versions, UTC date, script, command, sizes: see
:func:`nbhelpers.device.gpu_run_meta`) and ``rows``, each a
:class:`~nbhelpers.families.copy.LaunchTimingRow`: six timing rows, then one race row per try.
Chapter 08 prints it on a machine without a GPU. Run time: about 10 s (1 GiB of GPU memory).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/gpu_launch_timing.py"
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed package
    sys.path.insert(0, str(ROOT))

from nbhelpers.device import start_gpu_script  # noqa: E402 (imports no torch)
from nbhelpers.launch_timing import LEAD_CYCLES  # noqa: E402 (imports no torch)
from nbhelpers.results import LAUNCH_TIMING, ResultsFile  # noqa: E402 (imports no torch)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; sizes and counts must be positive, and the race's tail fit its buffer."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2**26, help="float32 elements of the timed copy")
    ap.add_argument("--block", type=int, default=1024, help="BLOCK of the copy kernel's launch")
    ap.add_argument("--repeats", type=int, default=20, help="times each way of timing is repeated")
    ap.add_argument(
        "--lead-cycles", type=int, default=LEAD_CYCLES, help="GPU cycles queued before the busy-stream events"
    )
    ap.add_argument("--race-n", type=int, default=2**26, help="float32 elements of the race's copy")
    ap.add_argument("--tries", type=int, default=5, help="tries of the race")
    ap.add_argument("--out", help="results file (default: benchmarks/results/launch_timing_<gpu>.json)")
    args = ap.parse_args(argv)
    if min(args.n, args.block, args.repeats, args.lead_cycles, args.race_n, args.tries) < 1:
        ap.error("--n, --block, --repeats, --lead-cycles, --race-n and --tries must be positive")
    if args.block & (args.block - 1):
        ap.error(f"--block must be a power of two (Triton's tl.arange), got {args.block}")
    if args.race_n < 4:
        ap.error("--race-n must be at least 4 (the race reads the last 4 values)")
    return args


def meta_for(args: argparse.Namespace, argv: list[str], run_meta: dict) -> dict:
    """The results file's meta: :func:`nbhelpers.device.gpu_run_meta`'s, the sizes, the timers."""
    from nbhelpers.timing import GPU_TIMER

    return {
        **run_meta,
        "n": args.n,
        "block": args.block,
        "repeats": args.repeats,
        "lead_cycles": args.lead_cycles,
        "race_n": args.race_n,
        "tries": args.tries,
        "dtype": "float32",
        "useful_bytes": 2 * 4 * args.n,
        "timing": f"host: time.perf_counter(); do_bench row: {GPU_TIMER}",
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if not start_gpu_script("gpu_launch_timing.py"):
        return 2

    from nbhelpers.device import gpu_run_meta
    from nbhelpers.launch_timing import copy_launcher, race_tries, time_launch

    meta = meta_for(args, argv, gpu_run_meta(SCRIPT, argv))
    path = Path(args.out) if args.out else LAUNCH_TIMING.path(meta["gpu"], ROOT / "benchmarks" / "results")
    results = ResultsFile(path, meta, LAUNCH_TIMING)
    launch, torch_op, useful = copy_launcher(args.n, args.block)
    for row in time_launch(launch, useful, args.repeats, torch_op, args.lead_cycles):
        results.add(row)
        print(
            f"  {row['name']:48s} {row['seconds'] * 1e6:10.1f} us median "
            f"({row['seconds_min'] * 1e6:.1f}-{row['seconds_max'] * 1e6:.1f}), {row['bandwidth'] / 1e12:8.2f} TB/s"
        )
    for row in race_tries(args.race_n, args.tries):
        results.add(row)
        print(
            f"  {row['name']}: before {row['before']} (event {row['event_before']}), "
            f"after {row['after']} (event {row['event_after']})"
        )
    results.finish()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
