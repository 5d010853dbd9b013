"""Grouped GEMM for mixture-of-experts on an NVIDIA GPU: four ways to compute every expert's matmul, timed.

    python benchmarks/gpu_grouped_gemm.py [--quick] [--sizes deepseek small] [--experts 8 64 256]
                                          [--tokens 1024 4096 16384 32768] [--time-limit 110]
                                          [--out benchmarks/results/grouped_gemm_<gpu>.json]

Needs an NVIDIA GPU: without one (or with TRITON_INTERPRET=1) it prints one line and exits with
code 2. For each case (a size (K, N), E experts, T tokens routed top-8 with the skewed routing of
:func:`nbhelpers.moe.route`, seed 0), bf16 operands x_perm (T*8, K) and w (E, K, N), four
implementations of y_perm = the expert GEMMs, each timed with ``triton.testing.do_bench``
(median ms, CUDA events) as a caller would call it:

* ``loop``: :func:`nbhelpers.moe.loop_matmul`, one ``torch.matmul`` per non-empty expert (offsets
  as a numpy array: the loop needs them on the host to slice);
* ``padded``: :func:`nbhelpers.moe.padded_matmul` at capacity factor 1.25 (one ``torch.bmm`` over
  E x capacity rows; rows past an expert's capacity are dropped, so it is checked on kept rows only;
  numpy offsets: it builds its gather indices on the host);
* ``grouped_mm``: ``torch.nn.functional.grouped_mm`` with its ``offs`` (the E cumulative row ends,
  int32) already on the GPU, as :func:`nbhelpers.moe.torch_grouped_mm` computes them (that
  function itself copies numpy offsets to the GPU on every call);
* ``ours``: :func:`nbhelpers.kernels.grouped_gemm.grouped_matmul`, ``block=None`` (tuned on the
  first call of each shape; that call is outside the timing), bf16 out, with the offsets already
  on the GPU (an int64 tensor): the call reads no value back and copies nothing from the host, so
  the timed region holds the kernel launch and the eight small torch operations of its tile
  offsets (:data:`nbhelpers.kernels.grouped_gemm.TILE_LOOKUP_LAUNCHES`), nothing that waits.

The routing's offsets are built on the host and copied to the GPU once per case, before timing.

Before timing, every output is compared with grouped_mm's (relative Frobenius difference, at most
:data:`CHECK_TOL`), so a broken implementation is not timed as a fast one. Useful FLOPs are
2 * T * k * K * N (the padded batch computes E * capacity rows, more or fewer). The ratios are
speedups of ours: ``ours_vs_loop`` = ms_loop / ms_ours (goal >= 2 at E = 256),
``ours_vs_padded`` = ms_padded / ms_ours (goal > 1 when the load is uneven: busiest expert more
than :data:`UNEVEN` x the mean), ``ours_vs_grouped_mm`` = ms_grouped_mm / ms_ours (goal >= 0.8).
Each timed row also records what :mod:`nbhelpers.perf_model` predicts for ours on the run's
``meta.model_gpu`` (the GPU it runs on where the model has its specification, else an H200; the
fastest of the tuner's configs at the compile table's registers and shared memory; its FLOPs the
rows each expert's tiles compute, padding included), as called and replayed from a CUDA graph, so
that a run measures the model too; and what the tuner kept for ours (``tuned_config``) with every
config's tuning time (``tuning_ms``, :func:`nbhelpers.kernels.grouped_gemm.tuned_config`), so that
a slow row can be traced to its config (rows recorded before these fields existed lack them).

The results file ``benchmarks/results/grouped_gemm_<gpu-slug>.json`` holds ``meta`` (GPU name,
driver, CUDA, compute capability, torch and Triton versions, UTC date, this script, the command)
and ``rows``, one per case (see :func:`build_row`). Cases that would start after ``--time-limit``
seconds are recorded as skipped (gpu_report.py stops a benchmark after 120 s). The file is
rewritten after every case (``meta.complete`` is false until the last), so a run that fails or
is stopped halfway keeps the cases it finished.

Run time: the full run of 24 cases took 40 s on an H100 SXM (``--time-limit 50``, Triton 3.6.0,
2026-12-06; benchmarks/results/gpu_report_nvidia-h100-80gb-hbm3.log); the largest cases (K = 7168,
N = 2048, T = 32k: 7.7 TFLOP per GEMM, about 12 ms each) dominate, and the tuner compiles the 8
configurations of GPU_CONFIGS per (K, N) and times them once per power-of-two bucket of T*k.
Rows recorded before ``meta.model_gpu`` existed (that run's) hold predictions for an H200;
chapter 10 predicts that run again for the H100 it ran on (:func:`nbhelpers.calibration.grouped_gemm_rows`).
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
from nbhelpers.families.grouped_gemm import GroupedGemmRow  # noqa: E402 (imports no torch)
from nbhelpers.perf_model import GPU, H200, prediction_gpu  # noqa: E402 (imports no torch)
from nbhelpers.results import GROUPED_GEMM, ResultsFile, sweep  # noqa: E402 (imports no torch)

SCRIPT = "benchmarks/gpu_grouped_gemm.py"
#: name -> (K, N): DeepSeek-V3's hidden size and expert width, and a smaller layer
SIZES = {"deepseek": (7168, 2048), "small": (2048, 1024)}
EXPERTS = (256, 64, 8)
TOKENS = (1024, 4096, 16384, 32768)
TOP_K = 8
SKEW = 1.0
CAPACITY_FACTOR = 1.25
QUICK = {"sizes": ("deepseek",), "experts": (256, 8), "tokens": (4096,)}
IMPLS = ("loop", "padded", "grouped_mm", "ours")
GOALS = {"ours_vs_loop": 2.0, "ours_vs_padded": 1.0, "ours_vs_grouped_mm": 0.8}
UNEVEN = 1.1  # busiest expert / mean load above which the load counts as uneven
CHECK_TOL = 2e-2  # bf16 outputs (2**-9 relative rounding each) of fp32-accumulated sums
DEFAULT_TIME_LIMIT_S = 110.0
META_KEYS = ("gpu", "driver", "cuda", "capability", "torch", "triton", "date", "script", "command")
#: the keys of every row, and of every row that was timed: the grouped_gemm family's results row
#: (nbhelpers/families/grouped_gemm.py, GroupedGemmRow), which build_row fills
ROW_KEYS = GROUPED_GEMM.row_keys
TIMED_KEYS = GROUPED_GEMM.timed_keys


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes",
        nargs="+",
        choices=sorted(SIZES),
        default=list(SIZES),
        help="deepseek: K=7168, N=2048; small: K=2048, N=1024",
    )
    ap.add_argument("--experts", type=_positive, nargs="+", default=list(EXPERTS), help="numbers of experts E")
    ap.add_argument("--tokens", type=_positive, nargs="+", default=list(TOKENS), help="numbers of tokens T")
    ap.add_argument(
        "--quick", action="store_true", help=f"only {QUICK['sizes']}, E in {QUICK['experts']}, T in {QUICK['tokens']}"
    )
    ap.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        help="start no case after this many seconds (the rest are recorded as skipped)",
    )
    ap.add_argument("--out", help="results file (default: benchmarks/results/grouped_gemm_<gpu>.json)")
    args = ap.parse_args(argv)
    for e in args.experts:
        if e < TOP_K:
            ap.error(
                f"--experts: each token picks top-{TOP_K} distinct experts, so E must be at least {TOP_K}, got {e}"
            )
    return args


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def plan_cases(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(size, E, T) in the order they run: the DeepSeek-like size first, most experts first."""
    sizes, experts, tokens = (
        (QUICK["sizes"], QUICK["experts"], QUICK["tokens"]) if args.quick else (args.sizes, args.experts, args.tokens)
    )
    return [(s, E, T) for s in sizes for E in experts for T in tokens]


def routing_offsets(T: int, E: int, top_k: int = TOP_K, skew: float = SKEW, seed: int = 0):
    """The case's routing (:func:`nbhelpers.moe.route`, skewed, seeded) as per-expert offsets (E + 1,)."""
    from nbhelpers.moe import expert_offsets, route

    return expert_offsets(route(T, E, top_k, skew=skew, seed=seed).expert_ids, E)


def load_stats(offsets, capacity_factor: float = CAPACITY_FACTOR) -> dict:
    """What the routing does to the padded batch: loads, empty experts, padding and dropped rows."""
    import numpy as np

    from nbhelpers.moe import capacity

    counts = np.diff(np.asarray(offsets))
    rows, E = int(counts.sum()), counts.size
    C = capacity(rows, E, capacity_factor)
    kept = int(np.minimum(counts, C).sum())
    mean = rows / E
    return {
        "rows": rows,
        "max_load": int(counts.max()),
        "mean_load": mean,
        "empty_experts": int((counts == 0).sum()),
        "uneven": bool(rows and counts.max() > UNEVEN * mean),
        "capacity_factor": capacity_factor,
        "capacity": C,
        "padding_fraction": 1.0 - kept / (E * C) if E * C else 0.0,
        "dropped_rows": rows - kept,
    }


def build_row(
    size: str,
    K: int,
    N: int,
    E: int,
    T: int,
    stats: dict,
    rel_diff: dict,
    ms: dict | None = None,
    error: str | None = None,
    predicted: dict | None = None,
    tuned: tuple[str, dict] | None = None,
) -> dict:
    """One results row: the case, the load statistics, each implementation's relative difference
    from grouped_mm; then either ``ms`` and ``tflops`` per implementation and the three speedups of
    ours (``ours_vs_X`` = ms_X / ms_ours), or ``error`` saying why it was not timed. ``goals``: the
    goal of each speedup for this case, None where none is set (loop below E = 256,
    padded on an even load). ``predicted``: the performance model's time for ours
    (:func:`model_best`), in the row as ``predicted_ms``, ``predicted_graph_ms`` and
    ``predicted_config``. ``tuned``: what the tuner kept for ours and every config's tuning time
    (:func:`tuner_choice`), in the row as ``tuned_config`` and ``tuning_ms``."""
    goals = {
        "ours_vs_loop": GOALS["ours_vs_loop"] if E >= 256 else None,
        "ours_vs_padded": GOALS["ours_vs_padded"] if stats["uneven"] else None,
        "ours_vs_grouped_mm": GOALS["ours_vs_grouped_mm"],
    }
    fields = dict(size=size, K=K, N=N, E=E, T=T, top_k=TOP_K, **stats, rel_diff=dict(rel_diff), goals=goals)
    model = predicted or {}
    fields.update(
        predicted_ms=model.get("ms"), predicted_graph_ms=model.get("graph_ms"), predicted_config=model.get("config")
    )
    if tuned is not None:
        fields.update(tuned_config=tuned[0], tuning_ms=dict(tuned[1]))
    if error is not None:
        return GROUPED_GEMM.as_dict(GroupedGemmRow(**fields, error=error))
    missing = [name for name in IMPLS if name not in (ms or {})]
    if missing:
        raise ValueError(f"ms must have a time for each of {IMPLS}; missing {missing}")
    flops = 2.0 * stats["rows"] * K * N
    row = GroupedGemmRow(
        **fields,
        ms={name: ms[name] for name in IMPLS},
        tflops={name: flops / (ms[name] * 1e-3) / 1e12 for name in IMPLS},
        **{f"ours_vs_{other}": ms[other] / ms["ours"] for other in ("loop", "padded", "grouped_mm")},
    )
    return GROUPED_GEMM.as_dict(row)


#: ours, as the compile table names it (every config of the tuner, compiled for sm_90)
COMPILED = ("grouped_matmul_kernel", "bf16 -> bf16, DeepSeek-V3 up projection")


def model_best(offsets, K: int, N: int, gpu=None) -> dict:
    """What the performance model predicts for ours on ``gpu`` (None: the H200) at these offsets
    (:func:`nbhelpers.kernels.grouped_gemm.predicted`): the fastest over the tuner's configs, each
    at the registers and shared memory the compile table records for sm_90 (none that spills), as
    called (the tile lookup's small kernels launched one by one) and replayed from a CUDA graph;
    and that config. Empty where the table has none."""
    import numpy as np

    from nbhelpers.kernels.grouped_gemm import predicted
    from nbhelpers.results import recorded_compile_check

    loads = np.diff(np.asarray(offsets))
    model = {} if gpu is None else {"gpu": gpu}
    best: dict = {}
    for r in (recorded_compile_check(ROOT / "benchmarks" / "results") or {}).get("rows", []):
        if (r["kernel"], r["label"], r["target"], r.get("status")) != (*COMPILED, "sm_90", "ok"):
            continue
        if not r.get("default") or r.get("spill_stores"):
            continue
        block = tuple(int(v) for v in r["config"].split()[0].split("x"))
        facts = (block, r["num_warps"], r["num_stages"], r["registers"], r["shared"])
        p = predicted(loads, K, N, *facts, **model)
        if not best or p.seconds * 1e3 < best["ms"]:
            graph = predicted(loads, K, N, *facts, cuda_graph=True, **model)
            best = {"ms": p.seconds * 1e3, "graph_ms": graph.seconds * 1e3, "config": r["config"].split(" (")[0]}
    return best


def tuner_choice(K: int, N: int, E: int, rows: int) -> tuple[str, dict] | None:
    """What the tuner kept for ours on this case's shapes (bf16 in and out, as measure_case calls
    it) and every config's tuning time: :func:`nbhelpers.kernels.grouped_gemm.tuned_config`;
    None when ours was not tuned (a fixed block, or the interpreter)."""
    import torch

    from nbhelpers.kernels.grouped_gemm import tuned_config

    x = torch.empty((rows, K), dtype=torch.bfloat16, device="meta")  # only shapes and dtypes matter
    w = torch.empty((E, K, N), dtype=torch.bfloat16, device="meta")
    return tuned_config(x, w, out_dtype=torch.bfloat16)


def goals_met(row: dict) -> dict:
    """Speedup name -> True / False for each goal that applies to a timed row."""
    return {k: row[k] >= g for k, g in row["goals"].items() if g is not None and k in row}


def rel_diff(a, b) -> float:
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def measure_case(K: int, N: int, E: int, offsets, device, gen, time_fn, block=None):
    """Build one case's bf16 operands on ``device`` (x_perm (rows, K) standard normal, w (E, K, N)
    scaled by K**-0.5 so outputs are O(1)) and the offsets on the device (once, here), run the four
    implementations once, compare each with grouped_mm (the padded batch on its kept rows only,
    grouped_mm itself with :func:`nbhelpers.moe.torch_grouped_mm`, which checks the offsets), and
    time them with ``time_fn`` (a ``do_bench``) when every difference is at most CHECK_TOL. Returns
    (rel_diff per implementation, ms per implementation or None when not timed). ``block``: our
    kernel's block (None: tuned)."""
    import numpy as np
    import torch

    from nbhelpers.kernels.grouped_gemm import grouped_matmul
    from nbhelpers.moe import loop_matmul, padded_matmul, torch_grouped_mm

    rows = int(offsets[-1])
    x = torch.randn((rows, K), device=device, generator=gen).to(torch.bfloat16)
    w = (torch.randn((E, K, N), device=device, generator=gen) * K**-0.5).to(torch.bfloat16)
    off_dev = torch.as_tensor(np.asarray(offsets, dtype=np.int64), device=device)  # the one host copy
    ends_dev = off_dev[1:].to(torch.int32)
    impls = {
        "loop": lambda: loop_matmul(x, w, offsets),
        "padded": lambda: padded_matmul(x, w, offsets, CAPACITY_FACTOR).out,
        "grouped_mm": lambda: torch.nn.functional.grouped_mm(x, w, offs=ends_dev),
        "ours": lambda: grouped_matmul(x, w, off_dev, block=block, out_dtype=torch.bfloat16),
    }
    ref = torch_grouped_mm(x, w, offsets)
    kept = torch.as_tensor(padded_matmul(x, w, offsets, CAPACITY_FACTOR).kept, device=device)
    diffs = {}
    for name, fn in impls.items():
        out = fn()
        diffs[name] = rel_diff(out[kept], ref[kept]) if name == "padded" else rel_diff(out, ref)
    if not all(d <= CHECK_TOL for d in diffs.values()):
        return diffs, None
    return diffs, {name: float(time_fn(fn)) for name, fn in impls.items()}


def _bench(fn):
    from nbhelpers.timing import gpu_median_ms

    return gpu_median_ms(fn)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)

    if not start_gpu_script("gpu_grouped_gemm.py"):
        return 2

    import torch
    import triton

    t_start = time.monotonic()
    meta = {
        **gpu_run_meta(SCRIPT, argv),
        "timer": "triton.testing.do_bench (median ms)",
        "flops": "2 T top_k K N (useful rows only)",
        "routing": f"nbhelpers.moe.route(T, E, {TOP_K}, skew={SKEW}, seed=0)",
    }
    gpu = meta["gpu"]
    print(f"{gpu}, torch {torch.__version__}, triton {triton.__version__}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = Path(args.out) if args.out else GROUPED_GEMM.path(gpu, ROOT / "benchmarks" / "results")
    results = ResultsFile(out, meta, GROUPED_GEMM)  # rewritten after every case: a run stopped halfway keeps its rows
    run_cases(
        plan_cases(args),
        results,
        "cuda",
        gen,
        _bench,
        args.time_limit,
        after_case=torch.cuda.empty_cache,
        model=prediction_gpu(gpu),
    )
    results.finish()
    print(f"wrote {out} ({time.monotonic() - t_start:.0f} s)")
    return 0


def run_cases(
    cases,
    results: ResultsFile,
    device,
    gen,
    time_fn,
    time_limit: float,
    clock=time.monotonic,
    after_case=None,
    model: GPU = H200,
) -> list[dict]:
    """Measure each (size, E, T) case in turn into ``results``, one row per case, written as soon
    as the case is done (:func:`nbhelpers.results.sweep`); a case that would start after
    ``time_limit`` seconds gets a row saying it was skipped. An error in a case stops the run and
    propagates, with the rows before it kept. ``time_fn(fn)`` times one call (``_bench`` on a GPU;
    the tests pass a stand-in, on the CPU). ``model``: the GPU the rows' predictions are for."""
    t_start = clock()

    def one(case):
        size, E, T = case
        K, N = SIZES[size]
        offsets = routing_offsets(T, E)
        stats = load_stats(offsets)
        label = f"{size} K={K} N={N} E={E} T={T}"
        if clock() - t_start > time_limit:
            print(f"  {label}: skipped (time limit)")
            yield build_row(size, K, N, E, T, stats, {}, error=f"skipped: past the time limit of {time_limit:.0f} s")
            return
        diffs, ms = measure_case(K, N, E, offsets, device, gen, time_fn)
        if ms is None:
            err = (
                f"outputs differ from grouped_mm by more than {CHECK_TOL} (relative): "
                f"{ {n: d for n, d in diffs.items() if not d <= CHECK_TOL} }; not timed"
            )
            print(f"  {label}: {err}")
            yield build_row(size, K, N, E, T, stats, diffs, error=err)
        else:
            predicted = model_best(offsets, K, N, model)
            tuned = tuner_choice(K, N, E, stats["rows"])
            row = build_row(size, K, N, E, T, stats, diffs, ms=ms, predicted=predicted, tuned=tuned)
            note = "" if row.get("predicted_ms") is None else f", {model.name} model {row['predicted_ms']:.3f} ms"
            note += "" if tuned is None else f", tuned {tuned[0]}"
            print(
                f"  {label}: ours {ms['ours']:.3f} ms ({row['tflops']['ours']:.0f} TFLOP/s{note}); "
                f"x{row['ours_vs_loop']:.2f} vs loop, x{row['ours_vs_padded']:.2f} vs padded, "
                f"x{row['ours_vs_grouped_mm']:.2f} vs grouped_mm"
            )
            yield row
        if after_case is not None:
            after_case()

    return sweep(cases, one, results)


if __name__ == "__main__":
    raise SystemExit(main())
