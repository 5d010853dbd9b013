"""Copy bandwidth on a real GPU: chapter 08's Triton copy kernels against torch's own copy.

    python benchmarks/gpu_copy_bandwidth.py [--n 268435456] [--n-strided 16777216]
                                            [--strides 2 4 8 16 32] [--transpose 8192 8192]
                                            [--out benchmarks/results/copy_bandwidth_<gpu>.json]

Needs an NVIDIA GPU (without one it exits with code 2 and a one-line message). On float32 data it
times, with ``triton.testing.do_bench`` (median of repeated runs; CUDA events, after warm-up):

* ``torch copy``: ``out.copy_(x)`` of --n elements, the reference every other row is divided by;
* ``copy``: :func:`nbhelpers.kernels.copy.copy_kernel` on the same data, for several BLOCK sizes
  (the goal: the best at least 0.85x torch's copy on an H100/H200);
* ``strided s``: ``strided_read_kernel`` (out[i] = x[i * s], --n-strided outputs) for each stride,
  beside torch's ``out.copy_(x[::s])``;
* ``transpose``: ``transpose_kernel`` of an (M, N) matrix for two tile sizes, beside torch's
  ``out.copy_(x.t())``.

Bandwidth counts useful bytes only: each element read once and written once, 2 * 4 bytes per
output element. The sector model (:mod:`nbhelpers.memory_access`) predicts what the reads move:
for stride s a warp's 32 loads touch ``sectors_touched(stride=s)`` 32-byte sectors, so a read of
n useful bytes moves n / efficiency, and the write n more. Predicted bandwidth of useful bytes:
``B * 2 / (1 + 1 / efficiency)`` with B the measured torch copy (the achievable bandwidth in this
run) and, for an H200, B the 4.8 TB/s peak of ``shared/FACTS.md`` (NVIDIA's H200 specification).
The tiled transpose reads whole tile rows (efficiency 1 by the model); a naive transpose that reads
one element per row is the ``strided`` case with s >= 8 (1/8). Each Triton row also records
``predicted_ms``, the time :mod:`nbhelpers.perf_model` predicts for its launch on the GPU the
run's ``meta.model_gpu`` names (:func:`nbhelpers.perf_model.prediction_gpu`: the GPU it runs on
where the model has its specification, else an H200; the bytes at the HBM rate against the bytes
its resident programs keep in flight; the registers from the compile table), so that a run
measures the model too (:mod:`nbhelpers.calibration` fits it to the run).

Every kernel's output is checked against torch's once, before it is timed. The results file
``benchmarks/results/copy_bandwidth_<gpu-slug>.json`` holds ``meta`` (GPU name, driver, CUDA,
torch and Triton versions, UTC date, script, command, sizes, and ``l2_fetch_granularity``: the
``cudaLimitMaxL2FetchGranularity`` the CUDA runtime reports, None where it could not be read)
and ``rows``, each the family's ``CopyBandwidthRow`` (see :func:`build_row`). Run time: under a
minute on an H200 (about 4 GiB of GPU memory).
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/gpu_copy_bandwidth.py"
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed package
    sys.path.insert(0, str(ROOT))

from nbhelpers.device import nvidia_driver_version, start_gpu_script  # noqa: E402 (imports no torch)
from nbhelpers.families.copy import CopyBandwidthRow  # noqa: E402 (imports no torch)
from nbhelpers.results import COPY_BANDWIDTH, ResultsFile  # noqa: E402 (imports no torch)

COPY_BLOCKS = (1024, 2048, 4096, 8192)
TRANSPOSE_BLOCKS = ((32, 32), (64, 64))
# peak HBM bandwidth, bytes/s, by a GPU-name fragment; source: shared/FACTS.md ("GPU memory")
PEAKS = {"h200": (4.8e12, "FACTS.md: H200 about 4.8 TB/s HBM3e peak (NVIDIA H200 specification)")}
ELEM_BYTES = 4  # float32
#: cudaLimitMaxL2FetchGranularity, value 5 of the CUDA runtime API's enum cudaLimit (CUDA 13.0)
CUDA_LIMIT_MAX_L2_FETCH_GRANULARITY = 5


def _cudart(maps: str = "/proc/self/maps"):
    """The CUDA runtime library this process already loaded (torch's, found in ``maps``), else one
    the loader finds by name; None when there is none."""
    import ctypes
    import ctypes.util

    loaded = []
    try:
        with open(maps) as fh:
            loaded = sorted({line.split()[-1] for line in fh if "libcudart.so" in line})
    except OSError:
        pass
    for name in (*loaded, ctypes.util.find_library("cudart"), "libcudart.so"):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def l2_fetch_granularity(lib=None) -> int | None:
    """``cudaDeviceGetLimit(cudaLimitMaxL2FetchGranularity)`` on the current device, in bytes: the
    largest unit the L2 fetches from DRAM, a hint the driver may clamp or ignore. ``lib``: the CUDA
    runtime (default: :func:`_cudart`'s). None when the runtime cannot be found or asked (the call
    failed, or returned an error code)."""
    import ctypes

    lib = _cudart() if lib is None else lib
    if lib is None:
        return None
    value = ctypes.c_size_t(0)
    try:
        err = lib.cudaDeviceGetLimit(ctypes.pointer(value), CUDA_LIMIT_MAX_L2_FETCH_GRANULARITY)
    except (AttributeError, OSError, TypeError, ctypes.ArgumentError):
        return None
    return int(value.value) if err == 0 else None


def build_row(
    name: str,
    kernel: str,
    pattern: str,
    stride: int | None,
    block: list | None,
    outputs: int,
    ms: float,
    efficiency: float | None,
    torch_bandwidth: float | None,
    peak: float | None,
    predicted_ms: float | None = None,
) -> dict:
    """One results row, filled as the family's row (nbhelpers/families/copy.py, CopyBandwidthRow):
    the kernel, its launch block (None for torch), its outputs and median ``ms``; its bandwidth of
    useful bytes (each output read once and written once); the sector model's ``efficiency`` of its
    reads (None: no model) and the bandwidth that predicts at ``torch_bandwidth`` (torch's
    contiguous copy in this run; None: this row is that copy) and at the HBM ``peak`` (None:
    unknown); ``predicted_ms``: the performance model's time on the run's model GPU (Triton rows; None
    for torch's), from :func:`predicted_ms_of`."""
    useful = 2 * outputs * ELEM_BYTES
    bw = useful / (ms * 1e-3)
    torch_bw = bw if torch_bandwidth is None else torch_bandwidth
    e = efficiency
    predicted = None if e is None else torch_bw * 2 / (1 + 1 / e)
    row = CopyBandwidthRow(
        name=name,
        kernel=kernel,
        pattern=pattern,
        stride=stride,
        block=block,
        outputs=outputs,
        useful_bytes=useful,
        ms=ms,
        bandwidth=bw,
        sector_efficiency=e,
        ratio_to_torch_copy=bw / torch_bw,
        predicted_bandwidth=predicted,
        predicted_at_peak=None if e is None or peak is None else peak * 2 / (1 + 1 / e),
        ratio_to_prediction=None if predicted is None else bw / predicted,
        predicted_ms=predicted_ms,
    )
    return COPY_BANDWIDTH.as_dict(row)


def compiled_registers(kernel: str, block: list) -> int:
    """The registers per thread of ``kernel`` at ``block`` for sm_90 in the compile table
    (benchmarks/results/compile_check.json, compiled without a GPU); 32 when it has no such row."""
    from nbhelpers.results import recorded_compile_check

    config = "x".join(map(str, block)) + " "
    rows = (recorded_compile_check() or {}).get("rows", [])
    found = [r for r in rows if r["kernel"] == kernel and r["target"] == "sm_90" and r["config"].startswith(config)]
    return int(found[0]["registers"]) if found and found[0].get("registers") else 32


def predicted_ms_of(pattern: str, block: list, outputs: int, efficiency: float | None, gpu=None) -> float:
    """The model's milliseconds for a Triton row (:func:`nbhelpers.kernels.copy.predicted`) on
    ``gpu`` (a :class:`nbhelpers.perf_model.GPU`; None: the H200)."""
    from nbhelpers.kernels.copy import predicted
    from nbhelpers.perf_model import H200

    kernel = {"contiguous": "copy_kernel", "strided": "strided_read_kernel", "transposed": "transpose_kernel"}[pattern]
    shape = tuple(block) if len(block) == 2 else block[0]
    p = predicted(
        pattern, outputs, shape, efficiency or 1.0, compiled_registers(kernel, block), ELEM_BYTES, gpu or H200
    )
    return p.seconds * 1e3


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2**28, help="elements of the contiguous copy (float32)")
    ap.add_argument("--n-strided", type=int, default=2**24, help="output elements of each strided read")
    ap.add_argument("--strides", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    ap.add_argument("--transpose", type=int, nargs=2, default=[8192, 8192], metavar=("M", "N"))
    ap.add_argument("--out", help="results file (default: benchmarks/results/copy_bandwidth_<gpu>.json)")
    args = ap.parse_args(argv)
    if args.n < 1 or args.n_strided < 1 or min(args.transpose) < 1 or min(args.strides) < 1:
        ap.error("sizes and strides must be positive")

    if not start_gpu_script("gpu_copy_bandwidth.py"):
        return 2

    import numpy as np
    import torch
    import triton

    from nbhelpers.kernels.copy import copy_kernel, strided_read_kernel, transpose_kernel
    from nbhelpers.memory_access import sectors_touched
    from nbhelpers.perf_model import prediction_gpu
    from nbhelpers.timing import GPU_TIMER, gpu_median_ms

    dev = "cuda"
    gpu = torch.cuda.get_device_name(0)
    model = prediction_gpu(gpu)
    peak, peak_source = next(((p, s) for k, (p, s) in PEAKS.items() if k in gpu.lower()), (None, None))
    elem = ELEM_BYTES
    n, n_s = args.n, args.n_strided
    M, N = args.transpose
    # one buffer for every read: the longest strided read needs n_s * max stride elements
    src = torch.rand(max(n, n_s * max(args.strides), M * N), device=dev)
    out = torch.empty(max(n, n_s, M * N), device=dev)

    def bench(fn) -> float:
        """median milliseconds of fn() (do_bench: CUDA events, L2 flushed between runs)."""
        return gpu_median_ms(fn)

    meta = {
        "gpu": gpu,
        "driver": nvidia_driver_version(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "script": SCRIPT,
        "command": " ".join(["python", SCRIPT, *map(shlex.quote, argv)]),
        "dtype": "float32",
        "n": n,
        "n_strided": n_s,
        "strides": args.strides,
        "transpose": [M, N],
        "timing": GPU_TIMER,
        "bandwidth": "useful bytes (each output element read once and written once) per second",
        "peak": peak,
        "peak_source": peak_source,
        "model_gpu": model.name,
        # after torch's first allocation, so that the runtime's context exists
        "l2_fetch_granularity": l2_fetch_granularity(),
        "l2_fetch_granularity_source": "cudaDeviceGetLimit(cudaLimitMaxL2FetchGranularity), bytes; None: not read",
    }
    path = Path(args.out) if args.out else COPY_BANDWIDTH.path(gpu, ROOT / "benchmarks" / "results")
    # rewritten after every measurement (meta.complete is false until the end): a run that fails
    # or is stopped halfway keeps what it measured, each row complete with its ratio and prediction
    results = ResultsFile(path, meta, COPY_BANDWIDTH)
    rows = results.rows
    ref = {}  # torch's contiguous copy, the first measurement: what the others are compared with

    def record(name, kernel, pattern, stride, block, outputs, ms, efficiency):
        forecast = predicted_ms_of(pattern, block, outputs, efficiency, model) if kernel == "triton" else None
        row = build_row(
            name, kernel, pattern, stride, block, outputs, ms, efficiency, ref.get("bandwidth"), peak, forecast
        )
        ref.setdefault("bandwidth", row["bandwidth"])
        results.add(row)
        return row["bandwidth"]

    # ---- contiguous: torch's copy is the reference
    x, y = src[:n], out[:n]
    torch_bw = record("torch copy", "torch", "contiguous", 1, None, n, bench(lambda: y.copy_(x)), 1.0)
    eff1 = sectors_touched(elem_bytes=elem, stride=1).efficiency
    for B in COPY_BLOCKS:
        grid = (triton.cdiv(n, B),)
        y.zero_()
        copy_kernel[grid](x, y, n, BLOCK=B)
        assert torch.equal(y, x), f"copy kernel, BLOCK={B}: wrong output"
        record(
            f"copy BLOCK={B}",
            "triton",
            "contiguous",
            1,
            [B],
            n,
            bench(lambda: copy_kernel[grid](x, y, n, BLOCK=B)),
            eff1,
        )

    # ---- strided reads
    B = 1024
    for s in args.strides:
        xs, ys = src[: n_s * s], out[:n_s]
        eff = sectors_touched(elem_bytes=elem, stride=s).efficiency
        grid = (triton.cdiv(n_s, B),)
        ys.zero_()
        strided_read_kernel[grid](xs, ys, n_s, s, BLOCK=B)
        assert torch.equal(ys, xs[::s]), f"strided read, stride {s}: wrong output"
        record(
            f"strided {s}",
            "triton",
            "strided",
            s,
            [B],
            n_s,
            bench(lambda: strided_read_kernel[grid](xs, ys, n_s, s, BLOCK=B)),
            eff,
        )
        record(f"torch strided {s}", "torch", "strided", s, None, n_s, bench(lambda: ys.copy_(xs[::s])), eff)

    # ---- transposed copy of an (M, N) matrix
    xt, yt = src[: M * N].view(M, N), out[: M * N].view(N, M)
    for bm, bn in TRANSPOSE_BLOCKS:
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))

        def run_t():
            transpose_kernel[grid](
                xt, yt, M, N, xt.stride(0), xt.stride(1), yt.stride(0), yt.stride(1), BLOCK_M=bm, BLOCK_N=bn
            )

        yt.zero_()
        run_t()
        assert torch.equal(yt, xt.t()), f"transpose, block {bm}x{bn}: wrong output"
        # reads: each tile row is bn contiguous elements; the model for one warp reading them
        eff = sectors_touched(elem_bytes=elem, stride=1, threads=min(32, bn)).efficiency
        record(f"transpose {bm}x{bn}", "triton", "transposed", None, [bm, bn], M * N, bench(run_t), eff)
    record("torch transpose", "torch", "transposed", None, None, M * N, bench(lambda: yt.copy_(xt.t())), None)

    best = max(
        (r for r in rows if r["kernel"] == "triton" and r["pattern"] == "contiguous"), key=lambda r: r["bandwidth"]
    )

    print(f"{gpu}: float32, contiguous n={n}, strided outputs={n_s}, transpose {M}x{N}")
    print(f"{'':22s} {'GB/s':>8s} {'x torch copy':>12s} {'predicted GB/s':>15s} {'x predicted':>11s} {'ms':>8s}")
    for r in rows:
        pred = "" if r["predicted_bandwidth"] is None else f"{r['predicted_bandwidth'] / 1e9:15.0f}"
        rp = "" if r["ratio_to_prediction"] is None else f"{r['ratio_to_prediction']:11.2f}"
        model = "" if r.get("predicted_ms") is None else f" ({meta['model_gpu']} model {r['predicted_ms']:.3f} ms)"
        print(
            f"  {r['name']:20s} {r['bandwidth'] / 1e9:8.0f} {r['ratio_to_torch_copy']:12.3f} {pred:>15s} {rp:>11s} "
            f"{r['ms']:8.3f}{model}"
        )
    goal = best["ratio_to_torch_copy"] >= 0.85
    print(
        f"best Triton copy ({best['name']}): {best['ratio_to_torch_copy']:.3f}x torch's copy "
        f"(goal 0.85x: {'met' if goal else 'NOT met'})"
    )
    if peak is not None:
        print(f"torch copy: {torch_bw / peak:.2f} of the {peak / 1e12:.1f} TB/s peak ({peak_source})")

    results.finish(rows, best_copy=best["name"], best_copy_ratio=best["ratio_to_torch_copy"], goal_ratio=0.85)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
