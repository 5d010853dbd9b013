"""What chapter 08 prints: the launch timings and the race of section 2, the CPU's strided copies
of section 4, the copy kernels' bandwidths of section 5 (measured now or recorded), and the
recorded H100 run against the performance model of section 6.

Each function takes what it prints as plain values or as a run of a results file
(:mod:`nbhelpers.results`) and returns text or an Axes; measuring is left to the notebook and
to :mod:`nbhelpers.launch_timing`, :mod:`nbhelpers.memory_access` and the benchmark scripts.
Importing this module imports no torch and no Triton (the two functions that need the kernels
import them at their call), so it works before :func:`nbhelpers.device.setup_device`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .memory_access import CACHE_LINE_BYTES, cache_line_efficiency
from .perf_model import model_gpu
from .tables import text_table

__all__ = [
    "copy_inflight",
    "copy_widths_text",
    "doubling_text",
    "launch_predictions_text",
    "l2_fetch_text",
    "sector_text",
    "prediction_text",
    "inflight_answer_text",
    "programs_answer_text",
    "grid_text",
    "masked_lanes_text",
    "anon_huge_pages",
    "cpu_identity",
    "transpose_answer_text",
    "copy_fraction",
    "copy_figure",
    "copy_run_text",
    "cpu_copy_models",
    "cpu_runs_text",
    "cpu_variants",
    "cpu_variants_text",
    "fetch_size_text",
    "first_stride_below",
    "floor_verdicts",
    "launch_timing_text",
    "measure_copy_run",
    "not_recorded_text",
    "race_text",
    "recorded_layout_text",
    "run_new_sectors",
    "recorded_copy_model_text",
    "run_header",
    "strided_layout_text",
    "strided_read_layouts",
]

ROOT = Path(__file__).resolve().parents[1]
GPU_LINE_BYTES = 128  # an NVIDIA L1/L2 cache line: four 32-byte sectors
FETCHES = (32, 64)  # bytes DRAM may move per L2 miss: a sector, a pair of sectors


def copy_fraction(e):
    """A copy whose reads have efficiency ``e`` (a number or an array) and whose writes are
    contiguous, as a fraction of the contiguous copy's bandwidth: ``2 / (1 + 1/e)``."""
    return 2 / (1 + 1 / np.asarray(e, dtype=float)) if np.ndim(e) else 2 / (1 + 1 / e)


# ---------------------------------------------------------------- recorded runs


def run_header(run: dict, live: bool = False) -> str:
    """Two lines naming a run: the GPU, date, driver and versions; the command and its file."""
    meta = run["meta"]
    where = "measured now" if live else "recorded GPU run"
    name = Path(run.get("path", "")).name
    return (
        f"{where}: {meta['gpu']}, {meta['date']}, driver {meta.get('driver')}, "
        f"torch {meta.get('torch')}, triton {meta.get('triton')}\n"
        f"command: {meta['command']}" + (f"   (file: benchmarks/results/{name})" if name and not live else "")
    )


def not_recorded_text(script: str, stem: str, shows: str) -> str:
    """What a cell prints on a CPU when no run of ``script`` is recorded: how to make one."""
    return "\n".join(
        [
            f"No GPU run of {script} is recorded yet: benchmarks/results/ holds no {stem}_*.json.",
            "On a machine with an NVIDIA GPU, from the repository root:",
            "    make gpu-report          # every GPU check and benchmark, results files included",
            f"    python {script}",
            f"Either writes benchmarks/results/{stem}_<gpu>.json (GPU, driver, versions, date, command);",
            f"this cell then shows it: {shows}.",
        ]
    )


# ---------------------------------------------------------------- section 2


def launch_timing_text(rows: Sequence[dict], gpu: str) -> str:
    """The timing rows of :func:`nbhelpers.launch_timing.time_launch` (live or recorded) on
    ``gpu``: per way of timing, the median and the extremes in microseconds, the bandwidth the
    median gives the copy, and that against the HBM peak of ``gpu``'s datasheet (where the model
    has one); the events' time on an idle stream less theirs after queued work (where both are
    there); then the floor the peak puts on the copy's time."""
    timings = [r for r in rows if r["kind"] == "timing"]
    if not timings:
        raise ValueError("no timing rows")
    spec = model_gpu(gpu)
    head = ["timing", "times", "us (median)", "us (min-max)", "TB/s"]
    if spec is not None:
        head.append(f"x {spec.name} peak")
    table = []
    for r in timings:
        line = [
            r["name"],
            r["repeats"],
            f"{r['seconds'] * 1e6:.1f}",
            f"{r['seconds_min'] * 1e6:.1f}-{r['seconds_max'] * 1e6:.1f}",
            f"{r['bandwidth'] / 1e12:.2f}",
        ]
        if spec is not None:
            line.append(f"{r['bandwidth'] / spec.hbm_bytes_per_s:.2f}")
        table.append(line)
    nbytes = timings[0]["useful_bytes"]
    out = [f"{gpu}: copy_kernel, {nbytes:,} bytes moved", text_table(table, head)]
    by = {r["method"]: r["seconds"] for r in timings}
    if {"CUDA events, idle stream", "CUDA events, busy stream"} <= by.keys():
        gap = by["CUDA events, idle stream"] - by["CUDA events, busy stream"]
        out.append(
            f"CUDA events on an idle stream minus after queued work: {gap * 1e6:.1f} us "
            "(the host's launch, which the idle stream's start event times too)"
        )
    if spec is not None:
        floor = nbytes / spec.hbm_bytes_per_s
        out.append(
            f"at the {spec.name}'s {spec.hbm_bytes_per_s / 1e12:.2f} TB/s the copy cannot take less than "
            f"{floor * 1e6:.0f} us; timings below that: "
            + (", ".join(r["name"] for r in timings if r["seconds"] < floor) or "none")
        )
    return "\n".join(out)


def race_text(rows: Sequence[dict]) -> str:
    """The race rows of :func:`nbhelpers.launch_timing.race_tries` (live or recorded): per try,
    the host buffer's last values and the event's answer before and after the synchronisation;
    then how many early reads missed the copy."""
    races = [r for r in rows if r["kind"] == "race"]
    if not races:
        raise ValueError("no race rows")
    table = [(r["name"], str(r["before"]), r["event_before"], str(r["after"]), r["event_after"]) for r in races]
    stale = sum(r["before"] != r["expected"] for r in races)
    right = all(r["after"] == r["expected"] for r in races)
    return "\n".join(
        [
            text_table(table, ["try", "read at once", "event passed", "read after synchronize()", "event passed"]),
            f"early reads that missed the copy: {stale} of {len(races)}; "
            f"every read after synchronize() holds the copy: {right}",
        ]
    )


# ---------------------------------------------------------------- section 4 (this CPU)


def cpu_copy_models(strides: Sequence[int]) -> dict[str, np.ndarray]:
    """The CPU copy's fraction of the contiguous one per stride, when the memory moves 64-byte
    lines, and 128-byte pairs of them (reads only)."""
    return {
        f"{CACHE_LINE_BYTES} B line model": np.array([copy_fraction(cache_line_efficiency(s)) for s in strides]),
        f"{2 * CACHE_LINE_BYTES} B pair model": np.array(
            [copy_fraction(cache_line_efficiency(s, line_bytes=2 * CACHE_LINE_BYTES)) for s in strides]
        ),
    }


def floor_verdicts(eff: np.ndarray, floor: float, tol: float = 0.0) -> list[str]:
    """Per stride (``eff``: runs x strides), where the runs sit against ``floor`` with a relative
    noise ``tol``: "below" when every run is below ``floor * (1 - tol)``, "above" when every run is
    above ``floor * (1 + tol)``, otherwise "at" (at the floor within the noise)."""
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    eff = np.asarray(eff, dtype=float)
    below = np.all(eff < floor * (1 - tol), axis=0)
    above = np.all(eff > floor * (1 + tol), axis=0)
    return ["below" if b else "above" if a else "at" for b, a in zip(below, above, strict=True)]


def first_stride_below(strides: Sequence[int], eff: np.ndarray, floor: float, tol: float = 0.0) -> int | None:
    """The first stride from which every run's efficiency (``eff``: runs x strides) stays below
    ``floor * (1 - tol)`` (below by more than the relative noise ``tol``), at that stride and every
    larger one; None when the last stride is not below."""
    below = [v == "below" for v in floor_verdicts(eff, floor, tol)]
    if not below[-1]:
        return None
    k = len(strides) - 1
    while k > 0 and below[k - 1]:
        k -= 1
    return int(strides[k])


def cpu_runs_text(strides: Sequence[int], runs: Sequence[tuple], cpu: str, llc_bytes: int | None) -> str:
    """Section 4's table: each run's copy efficiency per stride beside the line and pair models,
    each run's contiguous bandwidths from DRAM and from cache, what varied between the runs, and
    the checks the prose rests on: where the runs sit against the one-line floor, with the largest
    spread between runs as the noise (:func:`floor_verdicts`). ``runs``: (DRAM run, cached run) pairs of
    :func:`nbhelpers.memory_access.measure_strided_read`."""
    eff = np.array([d.measured_efficiency for d, _ in runs])
    (line_name, line), (pair_name, pair) = cpu_copy_models(strides).items()
    head = [f"{cpu}, last-level cache " + ("unknown" if llc_bytes is None else f"{llc_bytes / 2**20:.0f} MiB")]
    head.append(f"np.copyto(out, x[::s]), x float32 of {runs[0][0].array_bytes / 2**20:.0f} MiB; {len(runs)} runs")
    rows = [(s, *[f"{v:.3f}" for v in eff[:, i]], f"{line[i]:.4f}", f"{pair[i]:.4f}") for i, s in enumerate(strides)]
    out = [*head, text_table(rows, ["stride", *[f"run {k + 1}" for k in range(len(runs))], line_name, pair_name])]
    for k, (d, ch) in enumerate(runs, 1):
        out.append(
            f"run {k}: contiguous copy {d.bandwidth[0] / 1e9:.1f} GB/s useful from DRAM, "
            f"{ch.bandwidth[0] / 1e9:.1f} GB/s from cache ({ch.bandwidth[0] / d.bandwidth[0]:.1f}x)"
        )
    spread = (eff.max(0) - eff.min(0)) / eff.mean(0)
    worst = int(np.argmax(spread[1:])) + 1
    base = [d.bandwidth[0] for d, _ in runs]
    out.append(
        f"\nbetween the runs: efficiency varied most at stride {strides[worst]} ({spread[worst]:.0%} of its "
        f"mean); the DRAM baseline {min(base) / 1e9:.1f} to {max(base) / 1e9:.1f} GB/s"
    )
    tail = eff[:, list(strides).index(32) :] if 32 in strides else eff[:, -1:]
    out.append(
        f"strides {', '.join(map(str, strides[len(strides) - tail.shape[1] :]))}, all runs: "
        f"{tail.min():.3f} to {tail.max():.3f}; floors from the run's own sizes: one line "
        f"2/(1+{CACHE_LINE_BYTES // 4}) = {line[-1]:.4f}, a line pair 2/(1+{2 * CACHE_LINE_BYTES // 4}) = "
        f"{pair[-1]:.4f}"
    )
    tol = float(spread[worst])  # the largest spread between runs, as the noise
    flat = [i for i, v in enumerate(line) if np.isclose(v, line[-1])]  # where the line model is its floor
    verdicts = floor_verdicts(eff, line[-1], tol)
    words = {"above": "above it", "at": "at it within the noise", "below": "below it"}
    per_page = ", ".join(f"{s}: {4096 // (4 * s)}" for s in strides if 16 <= s <= 1024)
    out.append(f"reads per 4 KiB page at stride {per_page}")
    out.append(doubling_text(strides, eff.mean(0), line))
    out.append(
        f"every run: from cache faster than from DRAM: {all(ch.bandwidth[0] > d.bandwidth[0] for d, ch in runs)}"
    )
    out.append(
        f"the one-line floor {line[-1]:.4f}, the largest spread between runs ({tol:.0%}) as the noise: "
        + ", ".join(f"stride {strides[i]} {words[verdicts[i]]}" for i in flat)
    )
    out.append(
        f"below the one-line floor by more than the noise in every run from stride: "
        f"{first_stride_below(strides, eff, line[-1], tol)}"
    )
    return "\n".join(out)


def doubling_text(strides: Sequence[int], mean: np.ndarray, model: np.ndarray) -> str:
    """At each doubling of the stride (consecutive ``strides`` a factor 2 apart), the ratio of the
    measured ``mean`` efficiency after the doubling to the one before it, beside the same ratio of
    ``model`` (1.00 where the model is flat)."""
    mean, model = np.asarray(mean, dtype=float), np.asarray(model, dtype=float)
    pairs = [i for i in range(1, len(strides)) if strides[i] == 2 * strides[i - 1]]
    if not pairs:
        raise ValueError(f"no two consecutive strides a factor 2 apart in {tuple(strides)}")
    parts = [
        f"{strides[i - 1]}->{strides[i]} {mean[i] / mean[i - 1]:.2f} ({model[i] / model[i - 1]:.2f})" for i in pairs
    ]
    return "each doubling of the stride, mean of the runs (line model): " + ", ".join(parts)


def cpu_variants(strides: Sequence[int]) -> dict[str, np.ndarray]:
    """Single-effect models of the CPU copy's fraction per stride: reads only (64-byte lines,
    128-byte pairs), write-allocate in both copies (``3 / (2 + 1/e)``), and a streaming-store
    baseline beside a strided copy that allocates (``2 / (2 + 1/e)``, 1 at stride 1)."""
    e = [cache_line_efficiency(s) for s in strides]
    models = cpu_copy_models(strides)
    return {
        "reads only (64 B lines)": models[f"{CACHE_LINE_BYTES} B line model"],
        "reads only (128 B pairs)": models[f"{2 * CACHE_LINE_BYTES} B pair model"],
        "write-allocate, both copies": np.array([3 / (2 + 1 / x) for x in e]),
        "streaming baseline, strided allocates": np.array(
            [1.0 if s == 1 else 2 / (2 + 1 / x) for s, x in zip(strides, e, strict=True)]
        ),
    }


def cpu_variants_text(strides: Sequence[int], eff: np.ndarray) -> str:
    """The variants of :func:`cpu_variants` beside the measured mean (``eff``: runs x strides, or
    the mean alone), how far each sits from it at the strides past 1, and which has the smallest
    worst-case deviation; then, at stride 2 (where every line is read anyway), the runs' range
    against the reads-only model and the streaming-store baseline."""
    eff = np.atleast_2d(np.asarray(eff, dtype=float))
    mean = eff.mean(0)
    variants = cpu_variants(strides)
    rows = [(s, f"{mean[i]:.3f}", *[f"{v[i]:.3f}" for v in variants.values()]) for i, s in enumerate(strides)]
    out = [text_table(rows, ["stride", "measured (mean)", *variants])]
    worst = {}
    for name, v in variants.items():
        dev = np.abs(mean[1:] / v[1:] - 1)
        worst[name] = dev.max()
        out.append(f"{name}: off by {dev.min():.0%} to {dev.max():.0%} at strides {strides[1]}-{strides[-1]}")
    out.append(f"smallest worst-case deviation, this run: {min(worst, key=worst.get)}")
    if 2 in strides:
        i = list(strides).index(2)
        reads, stream = variants["reads only (64 B lines)"][i], variants["streaming baseline, strided allocates"][i]
        at = eff[:, i]
        out.append(
            f"stride 2, {len(at)} run{'s' * (len(at) > 1)}: {at.min():.3f} to {at.max():.3f}; every run below "
            f"reads only ({reads:.3f}): {bool(np.all(at < reads))}; above the streaming baseline "
            f"({stream:.3f}): {bool(np.all(at > stream))}"
        )
    return "\n".join(out)


# ---------------------------------------------------------------- section 5 (the GPU copies)


def measure_copy_run(out_dir: str | Path) -> dict:
    """Run ``benchmarks/gpu_copy_bandwidth.py`` on this machine's GPU (a subprocess, from the
    repository root) into ``out_dir`` and return its run, read back as the recorded ones are. Needs
    a GPU and the repository's checkout."""
    from .results import COPY_BANDWIDTH

    path = Path(out_dir) / "copy_bandwidth_now.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_copy_bandwidth.py"), "--out", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"benchmarks/gpu_copy_bandwidth.py exited with {done.returncode}:\n{tail}")
    run = json.loads(path.read_text())
    missing = COPY_BANDWIDTH.missing_in_run(run)
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    return run


def _torch_copy(run: dict) -> float:
    return next(r["bandwidth"] for r in run["rows"] if r["name"] == "torch copy")


def copy_run_text(run: dict, live: bool = False) -> str:
    """A copy-bandwidth run: its header, each kernel's GB/s against torch's copy and the sector
    model's prediction, torch's copy against the datasheet's HBM rate (where the model knows the
    GPU), and the L2 fetch granularity the run read (where it did)."""
    table = [
        (
            r["name"],
            f"{r['bandwidth'] / 1e9:.0f}",
            f"{r['ratio_to_torch_copy']:.3f}",
            "" if r["predicted_bandwidth"] is None else f"{r['predicted_bandwidth'] / 1e9:.0f}",
            "" if r["ratio_to_prediction"] is None else f"{r['ratio_to_prediction']:.2f}",
        )
        for r in run["rows"]
    ]
    out = [
        run_header(run, live),
        text_table(table, ["kernel", "GB/s", "x torch copy", "predicted GB/s", "x predicted"]),
    ]
    spec = model_gpu(run["meta"]["gpu"])
    if spec is not None:
        out.append(
            f"{spec.name} datasheet: {spec.hbm_bytes_per_s / 1e12:.2f} TB/s of HBM; torch's copy reached "
            f"{_torch_copy(run) / spec.hbm_bytes_per_s:.2f} of it"
        )
    g = run["meta"].get("l2_fetch_granularity")
    out.append(
        "L2 fetch granularity, cudaDeviceGetLimit(cudaLimitMaxL2FetchGranularity): "
        + (f"{g} bytes" if g is not None else "not in this run's file")
    )
    return "\n".join(out)


def naive_transpose_bounds(run: dict) -> dict[int, float]:
    """Per DRAM fetch size of :data:`FETCHES`, the bandwidth torch's naive transpose would reach
    in ``run`` if no sector it fetched were reused from L2: a column read (a stride past every
    fetch) and a contiguous write, at the run's torch copy."""
    base = _torch_copy(run)
    return {g: base * copy_fraction(cache_line_efficiency(4096, 4, g)) for g in FETCHES}


def copy_figure(run: dict, live: bool = False, ax=None):
    """The run's bandwidths per access pattern (:func:`nbhelpers.plots.plot_copy_bandwidth`), with
    the datasheet's peak where the model knows the GPU, the 64-byte DRAM fetch model (at the run's
    torch copy) from stride 8 on and, at the transposed column, torch's naive transpose's no-reuse
    bounds (:func:`naive_transpose_bounds`)."""
    from .plots import plot_copy_bandwidth

    meta = run["meta"]
    spec = model_gpu(meta["gpu"])
    has_naive = any(r["name"] == "torch transpose" for r in run["rows"])
    bounds = (
        {
            f"torch's naive transpose, no L2 reuse, {g}-byte fetch": {"transposed": v}
            for g, v in naive_transpose_bounds(run).items()
        }
        if has_naive
        else None
    )
    base = _torch_copy(run)
    wide = {
        f"stride {r['stride']}": base * copy_fraction(cache_line_efficiency(r["stride"], 4, 64))
        for r in run["rows"]
        if r["pattern"] == "strided" and r["stride"] >= 8
    }
    ax = plot_copy_bandwidth(
        run["rows"],
        peak=None if spec is None else spec.hbm_bytes_per_s,
        peak_label=f"{meta['gpu']} datasheet peak",
        ax=ax,
        bounds=bounds,
        models={"64-byte DRAM fetch model x measured torch copy": wide} if wide else None,
    )
    when = "measured now" if live else f"recorded {meta['date'][:10]}"
    ax.set_title(f"copy kernels on {meta['gpu']} ({when})", fontsize=10)
    return ax


def fetch_size_text(run: dict) -> str:
    """The run's strided reads against the sector model at the DRAM fetch sizes of
    :data:`FETCHES`, each at the run's torch copy; then torch's naive transpose against its
    no-reuse bounds (:func:`naive_transpose_bounds`)."""
    base = _torch_copy(run)
    rows = []
    for r in run["rows"]:
        if r["pattern"] != "strided":
            continue
        model = {g: base * copy_fraction(cache_line_efficiency(r["stride"], 4, g)) for g in FETCHES}
        rows.append(
            (
                r["name"],
                f"{r['bandwidth'] / 1e9:.0f}",
                *[x for g in FETCHES for x in (f"{model[g] / 1e9:.0f}", f"{r['bandwidth'] / model[g]:.2f}")],
            )
        )
    out = [
        f"{run['meta']['gpu']}: strided reads against torch's copy ({base / 1e9:.0f} GB/s) x 2 / (1 + 1/e)",
        text_table(rows, ["kernel", "GB/s", *[x for g in FETCHES for x in (f"{g}-byte", "x")]]),
    ]
    ours = {r["stride"]: r["bandwidth"] for r in run["rows"] if r["pattern"] == "strided" and "torch" not in r["name"]}
    theirs = {r["stride"]: r["bandwidth"] for r in run["rows"] if r["pattern"] == "strided" and "torch" in r["name"]}
    both = sorted(ours.keys() & theirs.keys())
    if both:
        out.append(
            "the course's strided read / torch's strided copy, per stride: "
            + ", ".join(f"{s} {ours[s] / theirs[s]:.2f}" for s in both)
        )
    naive = next((r for r in run["rows"] if r["name"] == "torch transpose"), None)
    if naive is not None:
        share = naive["bandwidth"] / base
        out.append(
            f"torch transpose: {naive['bandwidth'] / 1e9:.0f} GB/s, {share:.3f} of the copy; no reuse: "
            + ", ".join(
                f"{v / base:.3f} = {v / 1e9:.0f} GB/s ({g}-byte, measured {naive['bandwidth'] / v:.2f}x)"
                for g, v in naive_transpose_bounds(run).items()
            )
        )
    return "\n".join(out)


# ---------------------------------------------------------------- section 6


def recorded_copy_model_text(blocks_per_sm: int, block_bytes: int) -> str:
    """For each GPU with the recorded runs the performance model is fitted to (chapter 11): the
    latency's upper bound per batch from its top-k run, and its recorded ``copy BLOCK=1024``
    against the model with its datasheet's numbers and no launch (``do_bench``'s events time the
    device alone), with ``blocks_per_sm`` programs of ``block_bytes`` loads resident per SM. Empty
    when no GPU has them. Imports the kernels: call it after
    :func:`nbhelpers.device.setup_device`."""
    from dataclasses import replace

    from . import perf_model
    from .calibration_report import fitted_runs

    out = []
    for fit, found in fitted_runs():
        caps = ", ".join(f"batch {b}: {s * 1e6:.2f} us" for b, s in fit.latency_caps_s.items())
        out.append(f"{fit.run}: load latency at most (top-k time / dependent steps) {caps}")
        gpu = replace(model_gpu(found["copy"]["meta"]["gpu"]), launch_s=0.0)
        n = found["copy"]["meta"]["n"]
        p = perf_model.predict(
            gpu, perf_model.Launch(n // 1024, blocks_per_sm, block_bytes), 2 * 4 * n, bytes_loaded=4 * n
        )
        ms = next(r["ms"] for r in found["copy"]["rows"] if r["name"] == "copy BLOCK=1024")
        out.append(
            f"copy BLOCK=1024, {2 * 4 * n / 2**30:.0f} GiB moved: {gpu.name} model, no launch, "
            f"{p.seconds * 1e3:.3f} ms ({p.bound}), measured {ms:.3f} ms: {ms / (p.seconds * 1e3):.2f}x"
        )
    return "\n".join(out)


def launch_predictions_text(gpu, n: int, blocks_per_sm: int, block_bytes: int, latency_s: Sequence[float]) -> str:
    """Section 6's model of a copy of ``n`` float32 (``2 * 4 * n`` bytes moved, the reads waited
    on) on ``gpu`` (a :class:`nbhelpers.perf_model.GPU`) at each latency of ``latency_s``: by
    ``copy_kernel``, ``blocks_per_sm`` programs of ``block_bytes`` loads resident per SM, and by
    one program per SM looping over the same blocks. Per launch the rate in TB/s (one number where
    the latencies agree) and the bound; where one number, the bound's time and the model's launch
    that make it."""
    from dataclasses import replace

    from .perf_model import Launch, predict

    block = block_bytes // 4  # float32 elements per program's block
    moved = 2 * 4 * n
    launches = {
        "copy_kernel": Launch(n // block, blocks_per_sm, block_bytes),
        "one program per SM": Launch(gpu.sms, 1, block_bytes, steps=-(-n // block // gpu.sms)),
    }
    out = []
    for name, launch in launches.items():
        preds = [predict(replace(gpu, latency_s=t), launch, moved, bytes_loaded=4 * n) for t in sorted(latency_s)[::-1]]
        rates = list(dict.fromkeys(f"{moved / q.seconds / 1e12:.2f}" for q in preds))  # equal rates once
        bounds = " / ".join(dict.fromkeys(q.bound for q in preds))
        line = f"perf_model, {name}: {'-'.join(rates)} TB/s predicted, bound by {bounds}"
        if len(rates) == 1:
            q = preds[0]
            line += (
                f" ({moved / 2**30:g} GiB: {q.terms[q.bound] * 1e6:.1f} us by {q.bound}"
                + (f" + {q.launch_s * 1e6:g} us launch = {q.seconds * 1e6:.1f} us" if q.launch_s else "")
                + ")"
            )
        out.append(line)
    return "\n".join(out)


def copy_widths_text(lengths: Sequence[int] = (2**20, 1000), block: int = 1024, jobs: int = 2) -> str:
    """``copy_kernel`` compiled for sm_90 at ``BLOCK = block`` with 4 warps for each length of
    ``lengths`` (fp32 pointers, ``n`` an int argument Triton specialises when it is divisible by
    16), without a GPU (:func:`nbhelpers.compile_check.check`, ``jobs`` worker processes): its
    global loads and stores by vector width in the PTX, one line per length."""
    import triton

    from .compile_check import check
    from .families.manifest import Case

    cases = [
        Case("nbhelpers.kernels.copy:copy_kernel", f"n = {m:,}", ("*fp32", "*fp32", m), {"BLOCK": block})
        for m in lengths
    ]
    rows = check(cases, jobs=jobs)
    out = [f"copy_kernel, BLOCK = {block}, {cases[0].num_warps} warps, sm_90, Triton {triton.__version__}:"]
    width = max(len(r["label"]) for r in rows)
    for r in rows:
        acc = r["global_access"]
        out.append(f"  {r['label']:>{width}}: loads {acc['ld']}, stores {acc['st']}")
    return "\n".join(out)


# ---------------------------------------------------------------- section 5 (the strided read's layout)

_LAYOUT_SCRIPT = r"""
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from nbhelpers.compile_check import capability_of, global_access, launch_spec
from nbhelpers.families.manifest import Case
from nbhelpers.kernels.copy import strided_read_kernel

configs, stride, target = json.loads(sys.argv[1])
out = []
for block, warps in configs:
    case = Case("nbhelpers.kernels.copy:strided_read_kernel", "", ("*fp32", "*fp32", 2**20, stride),
                {"BLOCK": block}, num_warps=warps, target=target)
    gpu = GPUTarget("cuda", capability_of(target), 32)
    opts, sig, consts, attrs = launch_spec(strided_read_kernel, case, gpu)
    k = triton.compile(ASTSource(strided_read_kernel, sig, consts, attrs), target=gpu, options=opts.__dict__)
    ir = k.asm["ttgir"]
    spt = re.search(r"sizePerThread = \[(\d+)\]", ir)
    one = len(re.findall(r"^#blocked\d* = ", ir, re.M)) == 1 and "convert_layout" not in ir
    acc = global_access(k.asm["ptx"])
    out.append({"block": block, "num_warps": warps, "target": target, "stride": stride,
                "size_per_thread": int(spt.group(1)), "loads": acc["ld"], "stores": acc["st"],
                "one_layout": one, "triton": triton.__version__})
print(json.dumps(out))
"""


def strided_read_layouts(
    configs: Sequence[tuple[int, int]] = ((1024, 4), (128, 4), (1024, 32)),
    stride: int = 8,
    target: str = "sm_90",
) -> list[dict]:
    """Compile ``strided_read_kernel`` for ``target`` at each ``(BLOCK, num_warps)`` of ``configs``
    (fp32, a runtime ``stride``) and return, per config, the layout Triton gave its load
    (``size_per_thread``, the consecutive elements each thread holds, from the TritonGPU IR), whether
    the load and the store share that one layout (``one_layout``: one ``#blocked`` layout and no
    conversion), and its global loads and stores by vector width in the PTX
    (:func:`nbhelpers.compile_check.global_access`). Runs in
    a subprocess without ``TRITON_INTERPRET``, so it works on a CPU after
    :func:`nbhelpers.device.setup_device`; needs Triton's NVIDIA backend, no GPU."""
    import os

    configs = [[int(b), int(w)] for b, w in configs]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", _LAYOUT_SCRIPT, json.dumps([configs, stride, target])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-10:])
        raise RuntimeError(f"compiling strided_read_kernel failed:\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def recorded_layout_text(kernel: str = "strided_read_kernel", results_dir: str | Path | None = None) -> str:
    """The rows for ``kernel`` in each GPU run's compile record (``compile_check_<gpu>.json``, written
    by ``python -m nbhelpers.compile_check --gpu ...`` on that GPU's machine): the Triton version and
    date it was compiled with, its config, global loads and stores by vector width and registers.
    Says so when no GPU run holds a compile record."""
    from .results import find_results_dir, recorded_compile_check

    folder = find_results_dir(results_dir)
    out = []
    for path in sorted(folder.glob("compile_check_*.json")) if folder else []:
        run = recorded_compile_check(folder, path.name)
        meta = run["meta"]
        if not meta.get("gpu"):
            continue
        for r in run["rows"]:
            if r["kernel"] != kernel or r["status"] != "ok":
                continue
            acc = r.get("global_access", {})
            out.append(
                f"{kernel}, BLOCK = {r['config'].split()[0]}, {r.get('num_warps')} warps, "
                f"{r.get('num_stages')} stages, "
                f"{r['label']}, {r['target']}, compiled for the "
                f"{meta['gpu']} run ({meta['date'][:10]}, Triton {meta['triton']}, file "
                f"benchmarks/results/{path.name}): loads {acc.get('ld', {})}, stores "
                f"{acc.get('st', {})}, {r['registers']} registers"
            )
    return "\n".join(out) or f"{kernel}: no GPU run's compile record holds it"


def run_new_sectors(size_per_thread: int, stride: int, elem_bytes: int = 4) -> list[int]:
    """A warp whose lanes each hold ``size_per_thread`` consecutive outputs of a strided read (output
    i reads input element ``i * stride``) loads them with one instruction per element: instruction
    j of lane t reads byte ``(size_per_thread * t + j) * stride * elem_bytes``. The 32-byte sectors
    each instruction touches that the earlier ones of the run did not, per instruction."""
    from .memory_access import SECTOR_BYTES, WARP_SIZE

    seen: set[int] = set()
    new = []
    for j in range(size_per_thread):
        addr = (size_per_thread * np.arange(WARP_SIZE) + j) * stride * elem_bytes
        sec = {int(a) // SECTOR_BYTES for a in addr}
        new.append(len(sec - seen))
        seen |= sec
    return new


def strided_layout_text(layouts: Sequence[dict], strides: Sequence[int] = (2, 4, 8, 16, 32)) -> str:
    """Per compiled layout of :func:`strided_read_layouts`: its scalar loads per thread; then, per
    stride and per distinct ``size_per_thread`` among them (1 is also torch's elementwise copy, whose
    lanes hold one element each), one fp32 load instruction of a warp: how far apart its 32 lanes
    read (``size_per_thread`` x the stride x 4 bytes), the 32-byte sectors and 128-byte lines it
    touches, the address range it spans, and the new sectors each instruction of a thread's run of
    consecutive outputs fetches (:func:`run_new_sectors`)."""
    from .memory_access import sectors_touched

    out = []
    for lay in layouts:
        spt = lay["size_per_thread"]
        scalar = lay["loads"].get("1", 0)
        shared = {True: " (the load's and the store's)", False: " (the load's)"}.get(lay.get("one_layout"), "")
        stores = f", stores {lay['stores']}" if "stores" in lay else ""
        out.append(
            f"strided_read_kernel, BLOCK = {lay['block']}, {lay['num_warps']} warps, stride "
            f"{lay.get('stride', '?')}, {lay['target']}, Triton {lay['triton']}: sizePerThread = [{spt}]{shared}, "
            f"loads {lay['loads']} ({scalar} scalar ld.global per thread){stores}"
        )
    spts = sorted({lay["size_per_thread"] for lay in layouts} | {1}, reverse=True)
    # (a lane's aligned 4-byte element never straddles a line)
    rows = []
    for s in strides:
        for spt in spts:
            apart = spt * s * 4
            addr = np.arange(32) * apart
            rows.append(
                (
                    s,
                    f"[{spt}]",
                    apart,
                    sectors_touched(addr, elem_bytes=4).sectors,
                    len(set((addr // GPU_LINE_BYTES).tolist())),
                    f"{32 * apart / 1024:g}",
                    " ".join(map(str, run_new_sectors(spt, s))),
                )
            )
    out.append("one fp32 load instruction of a warp, at a stride of s elements ([1]: also torch's copy):")
    heads = ["s", "sizePerThread", "lanes apart, B", "sectors", "128-B lines", "span, KiB", "new sectors per instr."]
    out.append(text_table(rows, heads))
    return "\n".join(out)


# ---------------------------------------------------------------- section 4 (this CPU), problems


def cpu_identity() -> str:
    """The CPU's model name with its family and model numbers as Linux's /proc/cpuinfo gives them
    (decimal, as ``lscpu`` prints them: an AMD family 26 is Zen 5), else the model name alone."""
    from .device import cpu_fields, cpu_model

    info = cpu_fields() or {}
    fam, mod = info.get("cpu family"), info.get("model")
    return cpu_model() + (f" (family {fam}, model {mod})" if fam and mod else "")


def anon_huge_pages(arr: np.ndarray, smaps: str = "/proc/self/smaps") -> int | None:
    """Bytes of transparent huge pages backing ``arr``'s data, at most: the ``AnonHugePages``
    lines of every mapping in Linux's /proc/self/smaps that overlaps ``[data, data + nbytes)``,
    summed (a ``madvise`` that starts at the first page boundary inside an allocation splits it
    into several mappings, the first small one holding the first byte), each capped at the
    array's share of its mapping rounded up to whole 2 MiB pages (the kernel merges neighbouring
    allocations into one mapping, whose huge pages may back other data); None where that file
    cannot be read or no mapping overlaps the data (not Linux)."""
    huge = 2 * 2**20
    lo_a = arr.__array_interface__["data"][0]
    hi_a = lo_a + max(int(arr.nbytes), 1)
    try:
        text = Path(smaps).read_text()
    except OSError:
        return None
    share, found, total = 0, False, 0
    for line in text.splitlines():
        head = line.split()[0] if line.strip() else ""
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            overlap = min(hi, hi_a) - max(lo, lo_a)
            share = -(-overlap // huge) * huge if overlap > 0 else 0
            found |= overlap > 0
        elif share and head == "AnonHugePages:":
            total += min(int(line.split()[1]) * 1024, share)
    return total if found else None


def transpose_answer_text(peak: float, run: dict | None, n: int = 4096) -> str:
    """Problem 2's numbers: a ``n x n`` float32 transpose (each element read and written once) at
    ``peak`` bytes/s: the tiled one at the full copy, the naive one with no L2 reuse at
    ``2 / (1 + 1/e)`` of it for 32- and 64-byte DRAM fetches, and at the share of the copy torch's
    naive transpose reached in ``run`` (a recorded copy-bandwidth run; skipped when None)."""
    nbytes = 2 * n * n * 4
    tiled = nbytes / peak
    out = [f"{nbytes} bytes; tiled {tiled * 1e6:.1f} us"]
    for g in FETCHES:
        e = cache_line_efficiency(n, 4, g)
        f = copy_fraction(e)
        out.append(f"naive, no reuse, {g}-byte fetch: e = {e:g}, {f:.4f} of the copy, {tiled / f * 1e6:.1f} us")
    naive = None if run is None else next((r for r in run["rows"] if r["name"] == "torch transpose"), None)
    if naive is not None:
        share = naive["bandwidth"] / _torch_copy(run)
        out.append(
            f"at torch's measured share ({run['meta']['gpu']}, {run['meta']['date'][:10]}): "
            f"{share:.3f} of the copy, {tiled / share * 1e6:.1f} us"
        )
    return "; ".join(out)


# ---------------------------------------------------------------- section 3 (sectors and L2 fetches)


def sector_text(strides: Sequence[int] = (1, 2, 3, 4, 8, 16, 32), row_elems: int = 1024) -> str:
    """Section 3's sector table: one warp's float32 read, contiguous, at each of ``strides`` and
    transposed (down a column of a row-major matrix of ``row_elems`` columns), with its sectors,
    useful and moved bytes and efficiency (:func:`nbhelpers.memory_access.sector_table`); then a
    contiguous read starting 16 bytes into a sector and a bf16 read at stride 16."""
    from .memory_access import sector_table, sectors_touched

    table = sector_table(strides=tuple(strides), elem_bytes=4, row_elems=row_elems)
    rows = [
        (
            r["pattern"],
            r["sectors"],
            r["useful_bytes"],
            r["moved_bytes"],
            f"{r['efficiency']:.4f}",
            f"1/{r['moved_bytes'] / r['useful_bytes']:g}",
        )
        for r in table
    ]
    head = ["fp32, one warp", "sectors", "useful bytes", "bytes moved", "efficiency", "= useful / moved"]
    off = sectors_touched(elem_bytes=4, stride=1, base=16)
    bf16 = sectors_touched(elem_bytes=2, stride=16)
    return "\n".join(
        [
            text_table(rows, head),
            f"\ncontiguous but starting 16 bytes into a sector: {off.sectors} sectors, efficiency {off.efficiency:.2f}",
            f"bf16 (2 bytes) at stride 16: {bf16.sectors} sectors for {bf16.useful_bytes} useful bytes, "
            f"efficiency 1/{bf16.moved_bytes // bf16.useful_bytes}",
        ]
    )


def l2_fetch_text(strides: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), fetches: Sequence[int] = (32, 64, 128)) -> str:
    """Section 3's DRAM view: for a long float32 read at each of ``strides``, the efficiency of the
    traffic when L2 fetches ``g`` bytes from DRAM per miss, for each ``g`` of ``fetches``
    (:func:`nbhelpers.memory_access.cache_line_efficiency`), the copy's fraction
    ``2 / (1 + 1/e)`` of its bandwidth, and the stride from which each fetch size is flat."""
    rows = []
    for s in strides:
        e = [cache_line_efficiency(s, elem_bytes=4, line_bytes=g) for g in fetches]
        rows.append([s] + [f"1/{1 / x:g}" for x in e] + [f"{copy_fraction(x):.3f}" for x in e])
    head = ["stride"] + [f"e, {g} B fetch" for g in fetches] + [f"copy, {g} B fetch" for g in fetches]
    title = "long strided fp32 read: efficiency of DRAM traffic, and the copy's fraction 2/(1+1/e)"
    out = [title, text_table(rows, head)]
    for g in fetches:
        flat = next((s for s in strides if cache_line_efficiency(s, 4, g) == 4 / g), None)
        where = f"flat from stride {flat}" if flat is not None else "not flat at these strides"
        out.append(f"{g:>3} B fetch: {where}, floor 1/{g // 4} of the bytes moved")
    return "\n".join(out)


def copy_inflight(
    compiled: dict, need_per_sm: Sequence[float], peak: float, latency_s: Sequence[float], sms: int
) -> dict:
    """Section 6's count for ``copy_kernel`` at ``BLOCK = 1024`` on sm_90, from ``compiled`` (a
    compile table, :func:`nbhelpers.results.recorded_compile_check`): its registers and warps, the
    programs resident per SM (:func:`nbhelpers.occupancy.occupancy`), the bytes of loads they keep
    in flight against ``need_per_sm`` (bytes per SM at the short and the long latency), and what
    one program per SM would read and copy at ``latency_s`` (short, long) on ``sms`` SMs, as a
    share of ``peak`` bytes/s.

    Returns a dict with ``row`` (the compile table's row), ``blocks`` (resident programs per SM),
    ``block_bytes`` (one program's load) and ``text`` (what the chapter prints)."""
    from .occupancy import occupancy

    row = next(
        (
            r
            for r in compiled["rows"]
            if r["kernel"] == "copy_kernel" and r["target"] == "sm_90" and r["config"].startswith("1024 ")
        ),
        None,
    )
    if row is None:
        raise ValueError(
            "the compile table has no copy_kernel row for sm_90 at BLOCK = 1024; "
            "rebuild it with `python -m nbhelpers.compile_check --kernels copy_kernel --update`"
        )
    occ = occupancy(row["registers"], row["num_warps"], row["shared"])
    block_bytes = 1024 * 4  # one program's load, float32
    held = occ.blocks * block_bytes
    one = [block_bytes * sms / t / 1e12 for t in tuple(latency_s)[::-1]]  # read rate, TB/s
    two = [2 * r for r in one]  # the copy's whole traffic, reads and writes
    share = [t / (peak / 1e12) for t in two]
    meta = compiled["meta"]
    text = "\n".join(
        [
            f"copy_kernel, BLOCK = 1024, {row['num_warps']} warps, sm_90: {row['registers']} registers "
            f"(Triton {meta['triton']}, {meta['date'][:10]}, compiled without a GPU)",
            f"{occ.blocks} programs resident per SM (bound by {' and '.join(map(str, occ.limits))}), "
            f"{block_bytes:,} bytes each: {held / 1e3:.1f} KB in flight per SM, "
            f"{held / need_per_sm[1]:.1f}x to {held / need_per_sm[0]:.1f}x the need",
            f"one program per SM would read {one[0]:.2f}-{one[1]:.2f} TB/s, a copy of {two[0]:.2f}-{two[1]:.2f} TB/s: "
            f"{share[0]:.0%}-{share[1]:.0%} of the peak",
        ]
    )
    return {"row": row, "blocks": occ.blocks, "block_bytes": block_bytes, "text": text}


# ---------------------------------------------------------------- section 1 (grid and mask)


def grid_text(n: int, block: int) -> str:
    """A launch of ``cdiv(n, block)`` programs of ``block`` lanes over ``n`` elements: the count of
    programs, lanes and masked lanes, then per program its offsets, the lanes with ``offs < n``
    and the masked ones."""
    programs = -(-n // block)
    lanes = programs * block
    live = [min(block, n - pid * block) for pid in range(programs)]
    rows = [(pid, f"{pid * block}..{pid * block + block - 1}", k, block - k) for pid, k in enumerate(live)]
    return "\n".join(
        [
            f"n = {n}, BLOCK = {block}: cdiv(n, BLOCK) = {programs} programs, {lanes} lanes, {lanes - n} masked off",
            text_table(rows, ["pid", "offs", "lanes with offs < n", "masked"]),
        ]
    )


def masked_lanes_text(x, out, fill: float = -1.0, granule: int = 512) -> str:
    """After a masked copy of ``x`` (n elements) into ``out`` (one slot per lane, each set to
    ``fill`` before the launch): whether ``out[:n]`` equals ``x`` bit for bit, how many of the
    masked lanes' slots still hold ``fill``, and the padding past ``n`` in the block torch's CUDA
    caching allocator gives ``x`` (a multiple of ``granule`` = 512 bytes)."""
    import torch

    n = x.numel()
    nbytes = n * x.element_size()
    out_cpu = out.cpu()
    block_bytes = -(-nbytes // granule) * granule
    return "\n".join(
        [
            f"\nout[:n] equals x bit for bit: {torch.equal(out_cpu[:n], x.cpu())}",
            f"out[n:], the masked lanes' slots: {(out_cpu[n:] == fill).sum().item()} of "
            f"{out_cpu.numel() - n} still {fill:g} (nothing written)",
            f"x: {nbytes} bytes; its block on a GPU: {block_bytes} bytes, "
            f"{(block_bytes - nbytes) // x.element_size()} {str(x.dtype).removeprefix('torch.')} of padding past n",
        ]
    )


def programs_answer_text(n: int, block: int) -> str:
    """Problem 3's numbers: programs, lanes, masked lanes, the last program's id and its first
    offset for ``n`` elements at ``block`` lanes per program."""
    programs = -(-n // block)
    return f"{programs} {programs * block} {programs * block - n} {programs - 1} {(programs - 1) * block}"


def inflight_answer_text(gpu, latency_s: Sequence[float], registers: int, block: int = 256, num_warps: int = 4) -> str:
    """Problem 4's numbers: the loads in flight a copy needs at ``gpu``'s HBM rate (half its bytes
    are reads) for each latency of ``latency_s`` (a low and a high one), per SM in KiB, against
    what a copy of ``block`` float32 per program with ``num_warps`` warps and ``registers`` per
    thread keeps in flight (its resident programs, :func:`nbhelpers.occupancy.occupancy`, times
    one block's loads), all in decimal units (MB, KB)."""
    from .occupancy import occupancy

    reads = gpu.hbm_bytes_per_s / 2
    mb = [reads * t / 1e6 for t in latency_s]
    kb = [m * 1e3 / gpu.sms for m in mb]  # decimal throughout: MB / SMs = KB
    occ = occupancy(registers, num_warps)
    held = occ.blocks * block * 4 / 1e3
    return (
        f"{gpu.name}: {gpu.hbm_bytes_per_s / 1e12} TB/s, {gpu.sms} SMs; reads {reads / 1e12:.2f} TB/s, "
        f"{mb[0]:.2f}-{mb[1]:.2f} MB in flight, need {kb[0]:.1f}-{kb[1]:.1f} KB per SM; "
        f"BLOCK = {block}, {num_warps} warps, {registers} registers: {occ.blocks} programs (bound by "
        f"{' and '.join(map(str, occ.limits))}) of {block * 4:,} bytes, {held:.1f} KB, "
        f"{held / kb[1]:.1f}x-{held / kb[0]:.1f}x the need"
    )


def prediction_text(peak: float, strides: Sequence[int] = (2, 4, 8, 16, 32), n: int = 4096) -> str:
    """Section 5's prediction: per float32 access pattern (the contiguous copy, strided reads at
    ``strides``, a tiled transpose reading along rows and a naive ``n x n`` one reading columns
    with no reuse from L2), the warp's read efficiency ``e`` by the 32-byte sector model
    (:func:`nbhelpers.memory_access.sectors_touched`), the copy's fraction ``2 / (1 + 1/e)`` and
    that fraction of ``peak`` bytes/s in GB/s."""
    from .memory_access import sectors_touched

    patterns = [("copy (contiguous)", 1)] + [(f"strided read, stride {s}", s) for s in strides]
    patterns += [("tiled transpose (reads along rows)", 1), ("naive transpose, no reuse from L2", n)]
    rows = []
    for name, s in patterns:
        e = sectors_touched(elem_bytes=4, stride=s).efficiency
        f = copy_fraction(e)
        rows.append((name, f"{e:.4f}", f"{f:.3f}", f"{peak * f / 1e9:.0f}"))
    return text_table(rows, ["float32", "read efficiency e", "x copy bandwidth", "GB/s at the H200 peak"])
