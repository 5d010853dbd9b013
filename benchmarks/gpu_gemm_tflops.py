"""GEMM speed on an NVIDIA GPU: TFLOP/s of the course's Triton GEMMs against torch's, as ratios.

    python benchmarks/gpu_gemm_tflops.py [--shapes 4096x4096x4096 8192x8192x8192 ...] [--quick]
                                         [--time-limit 100] [--out benchmarks/results/gemm_tflops_<gpu>.json]

Needs an NVIDIA GPU: without one (or with TRITON_INTERPRET=1) it prints one line and exits with
code 2. Three comparisons, each a ratio of two timings taken in the same run with
``triton.testing.do_bench(..., return_mode="median")`` (median of repeated launches after
warm-up, CUDA events; without return_mode Triton 3.7.1 returns the mean), FLOPs
counted as 2 M N K:

* ``bf16``: :func:`nbhelpers.kernels.gemm.matmul` (autotuned, bf16 in, fp32 accumulator, bf16
  out) against ``torch.matmul`` on the same bf16 tensors, at 4096^3 and a sweep of shapes (two of
  them decode shapes, M = 16 and M = 1 against an 8192 x 8192 weight: memory-bound).
  Goal: at least 0.8x.
* ``fp8_rowwise``: :func:`nbhelpers.kernels.scaled_gemm.scaled_matmul` (e4m3fn, per-row scales
  of A, per-column scales of B, bf16 out, promotion to fp32 every BLOCK_K) against
  ``torch._scaled_mm`` with the same operands and scales (``use_fast_accum=False``, its default).
  Goal: at least 0.8x. Also recorded: both with fast accumulation (no promotion).
* ``block_scaled``: :func:`nbhelpers.kernels.scaled_gemm.block_scaled_matmul` (1 x 128 and
  128 x 128 scales, one fp32 promotion per K-block) against the row-scaled kernel with fast
  accumulation (no promotion, scales in the epilogue): the ratio is the cost of promotion.

Before timing, each output is compared with torch's (relative Frobenius difference), so a broken
kernel is not timed as a fast one. Each timed row also records ``predicted_ms``, what
:mod:`nbhelpers.perf_model` predicts for ours on the run's ``meta.model_gpu`` (the GPU it runs on
where the model has its specification, else an H200): the fastest over the configs the
autotuner times, each at the registers and shared memory the compile table records for sm_90
(``predicted_config`` names it), so that a run measures the model too; and the config the
autotuner chose for ours (``tuned_config``, Triton's ``Autotuner.best_config`` after the call:
:func:`tuned_config`), to set beside the model's. The results file
``benchmarks/results/gemm_tflops_<gpu-slug>.json`` holds ``meta`` (GPU name, driver, CUDA, compute
capability, torch and Triton versions, UTC date, this script, the command) and ``rows`` (one per
comparison and shape: milliseconds and TFLOP/s of both, the ratio, the goal; or an ``error`` saying
why it was not timed), each the family's ``GemmTflopsRow`` (see :func:`build_row`). The file is
rewritten after every row (``meta.complete`` is false until the end), so a run that fails or is
stopped halfway keeps what it measured. ``torch._scaled_mm`` on CUDA takes only K and N divisible
by 16: at other shapes (the sweep's 1000^3) the two fp8 comparisons are rows saying so, and the
other two are timed.

Run time: not yet measured on a GPU (written without one). Autotuning compiles each
configuration once per config set (nbhelpers.kernels.gemm.GPU_CONFIG_SETS and the fp8 lists of
nbhelpers.kernels.scaled_gemm; `make gpu-compile` measures those compiles on a CPU, and
benchmarks/gpu_report.py compiles them in parallel before this script runs) and times each once
per shape, so the first shape costs the most. No shape starts after ``--time-limit`` seconds
(default 100): the shapes left are rows saying they were skipped. ``--quick`` times 4096^3 only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed package
    sys.path.insert(0, str(ROOT))

from nbhelpers.device import gpu_run_meta, start_gpu_script  # noqa: E402 (imports no torch)
from nbhelpers.families.gemm import GemmTflopsRow  # noqa: E402 (imports no torch)
from nbhelpers.perf_model import GPU, H200, prediction_gpu  # noqa: E402 (imports no torch)
from nbhelpers.results import GEMM_TFLOPS, ResultsFile, sweep  # noqa: E402 (imports no torch)

SCRIPT = "benchmarks/gpu_gemm_tflops.py"
SWEEP = [
    "4096x4096x4096",
    "8192x8192x8192",
    "16x8192x8192",  # decode: 16 tokens against an 8192 x 8192 weight (chapter 09, section 2)
    "1x8192x8192",  # decode, one token: the weight's bytes are the whole cost
    "2048x2048x2048",
    "1024x1024x1024",
    "8192x1024x8192",
    "16384x4096x1024",
    "4096x14336x4096",
    "1000x1000x1000",
]  # M x N x K
GOAL = {"bf16": 0.8, "fp8_rowwise": 0.8, "fp8_rowwise_fast_accum": 0.8, "block_scaled": None}
DEFAULT_TIME_LIMIT_S = 100.0
#: the two sides of each comparison
NAMES = {
    "bf16": ("triton matmul", "torch.matmul"),
    "fp8_rowwise": ("triton scaled_matmul", "torch._scaled_mm"),
    "fp8_rowwise_fast_accum": ("triton scaled_matmul", "torch._scaled_mm"),
    "block_scaled": ("triton block_scaled_matmul", "triton scaled_matmul, fast_accum (no promotion)"),
}


def build_row(
    kind: str,
    M: int,
    N: int,
    K: int,
    rel_diff: float | None = None,
    ms_ours: float | None = None,
    ms_theirs: float | None = None,
    error: str | None = None,
    predicted: tuple[float | None, str | None] = (None, None),
    tuned_config: str | None = None,
) -> dict:
    """One results row, filled as the family's row (nbhelpers/families/gemm.py, GemmTflopsRow): the
    comparison ``kind`` at M x N x K, its two sides and goal, the outputs' relative difference
    (None: not compared); then either both median times with their TFLOP/s (2 M N K flops) and the
    ratio ``ms_theirs / ms_ours``, or ``error`` saying why they were not timed; ``predicted``: the
    performance model's (milliseconds, config) for ours (:func:`model_best`); ``tuned_config``: the
    config the autotuner chose for ours (:func:`tuned_config`)."""
    names = NAMES[kind]
    fields = dict(kind=kind, M=M, N=N, K=K, ours=names[0], theirs=names[1], rel_diff=rel_diff, goal=GOAL[kind])
    fields.update(predicted_ms=predicted[0], predicted_config=predicted[1])
    if error is not None:
        return GEMM_TFLOPS.as_dict(GemmTflopsRow(**fields, error=error))
    if ms_ours is None or ms_theirs is None:
        raise ValueError("a row without an error needs both times, ms_ours and ms_theirs")

    def tf(ms: float) -> float:
        return 2 * M * N * K / (ms * 1e-3) / 1e12

    row = GemmTflopsRow(
        **fields,
        ms_ours=ms_ours,
        ms_theirs=ms_theirs,
        tflops_ours=tf(ms_ours),
        tflops_theirs=tf(ms_theirs),
        ratio=ms_theirs / ms_ours,
        tuned_config=tuned_config,
    )
    return GEMM_TFLOPS.as_dict(row)


def config_name(cfg) -> str:
    """A ``triton.Config`` by the compile table's short name: ``"128x256x64 w8 s3"``."""
    kw = cfg.kwargs
    return f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} w{cfg.num_warps} s{cfg.num_stages}"


def course_autotuners() -> list:
    """The autotuners the course's launchers go through (none in Triton's interpreter)."""
    from nbhelpers.kernels import gemm, scaled_gemm

    tuners = [*gemm._matmul_tuned.values(), *scaled_gemm._scaled_tuned.values()]
    if not scaled_gemm.INTERPRETED:
        tuners.append(scaled_gemm._block_scaled_tuned(scaled_gemm.SCALE_BLOCK))
    return tuners


def tuned_config(call, tuners) -> str | None:
    """Call ``call()`` once and name the config the autotuner it went through ran it with
    (``best_config``, which Triton's ``Autotuner`` sets on every run: after tuning, the fastest
    config for the call's key): :func:`config_name` of it, or None where no autotuner of
    ``tuners`` ran, or more than one did."""
    for t in tuners:
        t.best_config = None
    call()
    chosen = [t.best_config for t in tuners if getattr(t, "best_config", None) is not None]
    return config_name(chosen[0]) if len(chosen) == 1 else None


#: ours, as the compile table names it: (kernel, label at an aligned or unaligned shape, the
#: dtype of its peak, bytes per operand element)
COMPILED = {
    "bf16": ("matmul_kernel", "bf16 ieee -> bf16, {}", "bf16", 2),
    "fp8_rowwise": ("scaled_matmul_kernel", "e4m3 row/col scales -> bf16, promoted, {}", "fp8", 1),
    "fp8_rowwise_fast_accum": ("scaled_matmul_kernel", "e4m3 row/col scales -> bf16, fast, {}", "fp8", 1),
    "block_scaled": ("block_scaled_matmul_kernel", "e4m3 128x128 block scales -> bf16, {}", "fp8", 1),
}


def model_best(kind: str, M: int, N: int, K: int, gpu=None) -> tuple[float | None, str | None]:
    """What the performance model predicts for ours on ``gpu`` (a :class:`nbhelpers.perf_model.GPU`;
    None: the H200): the fastest, in milliseconds,
    over the configs the compile table holds for its kernel at this shape's alignment (the
    autotuner's list: 4096^3's rows for aligned shapes, 1000^3's otherwise; none that spills),
    each with its registers and shared memory for sm_90 (:func:`nbhelpers.kernels.gemm.fastest_predicted`);
    and that config. (None, None) where the table has none."""
    from nbhelpers.kernels.gemm import fastest_predicted
    from nbhelpers.results import recorded_compile_check

    kernel, label, dtype, in_bytes = COMPILED[kind]
    label = label.format("4096^3" if M % 16 == 0 and N % 16 == 0 and K % 16 == 0 else "1000^3")
    rows = (recorded_compile_check(ROOT / "benchmarks" / "results") or {}).get("rows", [])
    p, config = fastest_predicted(
        rows, kernel, label, M, N, K, dtype, in_bytes, **({} if gpu is None else {"gpu": gpu})
    )
    return (None, None) if p is None else (p.seconds * 1e3, config)


def _shape(s: str) -> tuple[int, int, int]:
    try:
        M, N, K = (int(v) for v in s.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be MxNxK, got {s!r}") from None
    if min(M, N, K) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {s!r}")
    return M, N, K


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--shapes",
        type=_shape,
        nargs="+",
        default=[_shape(s) for s in SWEEP],
        help="M x N x K shapes (default: 4096^3 and a sweep)",
    )
    ap.add_argument("--quick", action="store_true", help="4096^3 only")
    ap.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        help="start no shape after this many seconds (the rest are recorded as skipped; default %(default)s)",
    )
    ap.add_argument("--out", help="results file (default: benchmarks/results/gemm_tflops_<gpu>.json)")
    args = ap.parse_args(argv)
    if not args.time_limit > 0:
        ap.error(f"--time-limit must be positive, got {args.time_limit}")

    if not start_gpu_script("gpu_gemm_tflops.py"):
        return 2

    import torch
    import triton

    from nbhelpers.timing import gpu_median_ms

    shapes = [(4096, 4096, 4096)] if args.quick else args.shapes
    meta = {
        **gpu_run_meta(SCRIPT, argv),
        "timer": "triton.testing.do_bench (median ms)",
        "flops": "2 M N K",
    }
    gpu = meta["gpu"]
    print(f"{gpu}, torch {torch.__version__}, triton {triton.__version__}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = Path(args.out) if args.out else GEMM_TFLOPS.path(gpu, ROOT / "benchmarks" / "results")
    results = ResultsFile(out, meta, GEMM_TFLOPS)  # rewritten after every row: a run stopped halfway keeps its rows

    run_shapes(
        shapes,
        results,
        "cuda",
        gen,
        gpu_median_ms,
        after_shape=torch.cuda.empty_cache,
        time_limit=args.time_limit,
        model=prediction_gpu(gpu),
    )
    results.finish()
    print(f"wrote {out}")
    return 0


def run_shapes(
    shapes,
    results: ResultsFile,
    device: str,
    gen,
    time_fn,
    after_shape=None,
    time_limit: float | None = None,
    clock=time.monotonic,
    model: GPU = H200,
) -> list[dict]:
    """Measure each (M, N, K) into ``results``, each row written as soon as it is done
    (:func:`nbhelpers.results.sweep`); an error stops the run and propagates, with the rows
    before it kept. A shape that would start more than ``time_limit`` seconds (by ``clock``) after
    the first is not measured: one row per comparison says it was skipped. ``time_fn`` and
    ``model`` (the GPU the predictions are for) as in :func:`measure_shape`."""
    t_start = clock()

    def measure(shape):
        if time_limit is not None and clock() - t_start > time_limit:
            M, N, K = shape
            why = f"skipped: past the time limit of {time_limit:.0f} s"
            print(f"  {M}x{N}x{K}: {why}")
            for kind in GOAL:
                yield build_row(kind, M, N, K, error=why)
            return
        yield from measure_shape(*shape, device, gen, time_fn, model)
        if after_shape is not None:
            after_shape()

    return sweep(shapes, measure, results)


def scaled_mm_rejects(M: int, N: int, K: int, device: str) -> str | None:
    """Why ``torch._scaled_mm`` will not take an (M, K) x (K, N) product on ``device``, or None.
    On CUDA (cuBLASLt) both dimensions of the second operand must be multiples of 16 (torch's
    check: mat1's trailing dimension and mat2's two, i.e. K and N); the CPU build takes any shape."""
    if device == "cuda" and (K % 16 or N % 16):
        return (
            f"not timed: torch._scaled_mm on CUDA needs K and N divisible by 16 (here K={K}, N={N}); "
            "torch has nothing to compare with at this shape"
        )
    return None


def measure_shape(M: int, N: int, K: int, device: str, gen, time_fn, model: GPU = H200):
    """The rows of one shape, one per comparison (bf16, fp8_rowwise, fp8_rowwise_fast_accum,
    block_scaled), yielded as each is done. ``time_fn(fn)`` gives milliseconds of one call of
    ``fn`` (``do_bench`` with ``return_mode="median"`` on a GPU; a stand-in in the tests, which run
    this on a CPU with Triton's interpreter). A comparison whose outputs differ by more than its
    tolerance, or whose peer does not take the shape, is a row with an ``error``, not timed.
    ``model``: the GPU the rows' predictions are for (:func:`model_best`)."""
    import torch
    import triton

    from nbhelpers.kernels.gemm import matmul
    from nbhelpers.kernels.scaled_gemm import SCALE_BLOCK, block_scaled_matmul, scaled_matmul

    tuners = course_autotuners()

    def pair(kind, ours, theirs, check_tol, diff=None, reject=None):
        """Check ours against theirs (or take the diff given), then time both."""
        if reject is not None:
            print(f"  {kind:<24s} {M}x{N}x{K}: {reject}")
            return build_row(kind, M, N, K, error=reject)
        if diff is None:
            c_ours, c_theirs = ours().float(), theirs().float()
            diff = ((c_ours - c_theirs).norm() / c_theirs.norm().clamp_min(1e-30)).item()
            del c_ours, c_theirs
        if not diff <= check_tol:
            why = f"outputs differ by {diff:.3g} (relative), more than {check_tol}: not timed"
            print(f"  {kind:<24s} {M}x{N}x{K}: {why}")
            return build_row(kind, M, N, K, rel_diff=diff, error=why)
        ms_o, ms_t = float(time_fn(ours)), float(time_fn(theirs))
        forecast = model_best(kind, M, N, K, model)
        tuned = tuned_config(ours, tuners)
        row = build_row(
            kind, M, N, K, rel_diff=diff, ms_ours=ms_o, ms_theirs=ms_t, predicted=forecast, tuned_config=tuned
        )
        note = "" if forecast[0] is None else f"; {model.name} model {forecast[0]:.3f} ms ({forecast[1]})"
        note += "" if tuned is None else f"; tuned {tuned}"
        print(
            f"  {kind:<24s} {M}x{N}x{K}: {row['tflops_ours']:7.1f} vs {row['tflops_theirs']:7.1f} "
            f"TFLOP/s = {row['ratio']:.3f}x (rel diff {diff:.1e}; {ms_o:.3f} ms{note})"
        )
        return row

    a = torch.randn((M, K), device=device, generator=gen).to(torch.bfloat16)
    b = torch.randn((K, N), device=device, generator=gen).to(torch.bfloat16)
    yield pair("bf16", lambda: matmul(a, b, block=None, out_dtype=torch.bfloat16), lambda: torch.matmul(a, b), 1e-2)

    # fp8: A row-major, B column-major (K-major, what fp8 tensor cores and torch._scaled_mm want)
    qa = (a.float() / 4).clamp(-448, 448).to(torch.float8_e4m3fn)
    qb = (b.float().t().contiguous() / 4).clamp(-448, 448).to(torch.float8_e4m3fn).t()
    sa = torch.rand((M, 1), device=device, generator=gen) + 0.5
    sb = torch.rand((1, N), device=device, generator=gen) + 0.5
    for fast, kind in ((False, "fp8_rowwise"), (True, "fp8_rowwise_fast_accum")):
        yield pair(
            kind,
            lambda fast=fast: scaled_matmul(qa, qb, sa, sb, out_dtype=torch.bfloat16, block=None, fast_accum=fast),
            lambda fast=fast: torch._scaled_mm(
                qa, qb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast
            ),
            2e-2,
            reject=scaled_mm_rejects(M, N, K, device),
        )

    nk, nn = triton.cdiv(K, SCALE_BLOCK), triton.cdiv(N, SCALE_BLOCK)
    sa_blk = torch.rand((M, nk), device=device, generator=gen) + 0.5
    sb_blk = torch.rand((nk, nn), device=device, generator=gen) + 0.5
    # the comparison for the output check: the same scales, summed per K-block with torch
    sb_cols = sb_blk.repeat_interleave(SCALE_BLOCK, dim=1)[:, :N]

    def blocks_by_torch():
        c = torch.zeros((M, N), device=device)
        for kb in range(nk):
            k0, k1 = kb * SCALE_BLOCK, min(K, (kb + 1) * SCALE_BLOCK)
            c += (qa[:, k0:k1].float() * sa_blk[:, kb : kb + 1]) @ (qb[k0:k1].float() * sb_cols[kb : kb + 1])
        return c

    # the timed pair computes different things (other scales), so the block-scaled output is
    # checked against torch's per-K-block sum instead; rel_diff records that check
    c_blk, c_chk = block_scaled_matmul(qa, qb, sa_blk, sb_blk, block=None), blocks_by_torch()
    diff = ((c_blk - c_chk).norm() / c_chk.norm().clamp_min(1e-30)).item()
    del c_blk, c_chk
    yield pair(
        "block_scaled",
        lambda: block_scaled_matmul(qa, qb, sa_blk, sb_blk, out_dtype=torch.bfloat16, block=None),
        lambda: scaled_matmul(qa, qb, sa, sb, out_dtype=torch.bfloat16, block=None, fast_accum=True),
        1e-2,
        diff=diff,
    )


if __name__ == "__main__":
    raise SystemExit(main())
