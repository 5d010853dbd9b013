"""The performance model fitted to the recorded GPU runs (:mod:`nbhelpers.calibration`), as the
text chapter 11 prints: what was fitted and to which rows, every top-k row predicted again with the
datasheet's numbers and with the fitted ones, grouped by what the fit could have shaped, the copy
and GEMM rows, and the two-stage chunk each model would choose."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .calibration import Calibration, calibrate, copy_rows, gemm_rows, topk_groups, topk_rows
from .kernels import topk as ktk
from .perf_model import model_gpu
from .results import recorded_copy_bandwidth, recorded_gemm_tflops, recorded_topk
from .tables import text_table

__all__ = ["chunk_text", "fit_text", "fitted_runs", "others_text", "topk_text"]


def fitted_runs(results_dir: str | Path | None = None) -> list[tuple[Calibration, dict]]:
    """For every GPU with a recorded top-k, copy and GEMM run that the model has a datasheet for:
    its :class:`Calibration` and the runs (``{"topk": ..., "copy": ..., "gemm": ...}``)."""
    by_gpu: dict[str, dict] = {}
    for kind, found in (
        ("topk", recorded_topk(results_dir)),
        ("copy", recorded_copy_bandwidth(results_dir)),
        ("gemm", recorded_gemm_tflops(results_dir)),
    ):
        for run in found:
            by_gpu.setdefault(run["meta"]["gpu"], {})[kind] = run
    return [
        (calibrate(runs["topk"], runs["copy"], runs["gemm"]), runs)
        for name, runs in by_gpu.items()
        if len(runs) == 3 and model_gpu(name) is not None
    ]


def fit_text(c: Calibration) -> str:
    """What was fitted, to which rows, and the latency caps per batch."""
    spec = c.spec
    lines = [f"fitted to {c.run}"]
    lines.append(
        f"  HBM: {c.hbm_fraction:.2f} x {spec.hbm_bytes_per_s / 1e12:.2f} TB/s ({c.fitted_on['hbm_fraction']})"
    )
    for d in ("bf16", "fp8"):
        if f"flops_fraction[{d}]" in c.fitted_on:
            lines.append(
                f"  {d}: {c.flops_fraction[d]:.2f} x {spec.peak_flops[d] / 1e12:.0f} TFLOP/s "
                f"({c.fitted_on[f'flops_fraction[{d}]']})"
            )
    lines.append(f"  issue_factor: {c.issue_factor:.2f} x the counted issue cycles ({c.fitted_on['issue_factor']})")
    if c.short_row is not None:
        label, measured, work, launches = c.short_row
        lines.append(
            f"  launch: {spec.launch_s * 1e6:g} us assumed; {label}: {measured * 1e6:.1f} us measured, "
            f"{work * 1e6:.1f} us of work by the fitted model, {(measured - work) / launches * 1e6:.1f} us "
            f"left per launch ({launches})"
        )
    caps = ", ".join(f"batch {b}: {s * 1e6:.2f} us" for b, s in c.latency_caps_s.items())
    lines.append(f"  latency, not fitted ({spec.latency_s * 1e6:g} us assumed); at most {caps}")
    return "\n".join(lines)


def _span(values: list[float]) -> str:
    if not values:
        return "-"
    lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
    return lo if lo == hi else f"{lo}-{hi}"


def topk_text(c: Calibration, run: dict) -> str:
    """Every timed Triton top-k row: measured, the datasheet's prediction and the fitted one, each
    with measured / predicted; then the ratios of each group of :func:`calibration.topk_groups`."""
    before = topk_rows(run, c.spec)
    after = topk_rows(run, c.gpu)
    key = lambda r: (r["method"], r["batch"], r["k"], r["dtype"])  # noqa: E731
    spec_ratio = {key(b): b for b in before}
    groups = topk_groups(after)
    group_of = {key(r): name for name, rows in groups.items() for r in rows}
    table = [
        (
            a["batch"],
            a["k"],
            a["method"],
            group_of.get(key(a), "fitted"),
            a["ms"] * 1e3,
            spec_ratio[key(a)]["predicted_ms"] * 1e3,
            spec_ratio[key(a)]["ratio"],
            a["predicted_ms"] * 1e3,
            a["ratio"],
            a["bound"],
        )
        for a in after
    ]
    text = text_table(
        table,
        [
            "batch",
            "k",
            "method",
            "group",
            "measured us",
            "datasheet us",
            "ratio",
            "fitted us",
            "ratio",
            "what binds, fitted",
        ],
        digits=3,
    )
    lines = [text, "measured / predicted, datasheet -> fitted:"]
    for name, rows in groups.items():
        lines.append(
            f"  {name} ({len(rows)} rows): {_span([spec_ratio[key(r)]['ratio'] for r in rows])}"
            f" -> {_span([r['ratio'] for r in rows])}"
        )
    return "\n".join(lines)


def others_text(c: Calibration, runs: dict, compile_rows: list[dict]) -> str:
    """The copy and bf16 GEMM rows with the fitted model: ratios of Triton's rate to the torch
    rates the fit took, not an independent test."""
    copies = copy_rows(runs["copy"], c.gpu, compile_rows)
    near = [x["ratio"] for x in copies if (x["stride"] or 1) < 16]
    far = [x["ratio"] for x in copies if (x["stride"] or 1) >= 16]
    gemms = gemm_rows(runs["gemm"], compile_rows, c.gpu)
    aligned = [x["ratio"] for x in gemms if x["M"] % 16 == 0]
    odd = [x["ratio"] for x in gemms if x["M"] % 16]
    return (
        f"fitted model, other runs: {len(near)} copies below stride 16 {_span(near)}, "
        f"strides 16 and 32 {_span(far)}; {len(aligned)} bf16 GEMMs {_span(aligned)}, unaligned {_span(odd)}"
    )


def chunk_text(c: Calibration, V: int, cases: Iterable[tuple[int, int]], value_bytes: int = 2) -> str:
    """For each (k, batch): the two-stage chunk the datasheet's model and the fitted one choose
    (:func:`nbhelpers.kernels.topk.default_chunk`), and the fitted model's time at each."""
    rows = []
    for k, batch in cases:
        picks = [ktk.default_chunk(V, k, batch, value_bytes, None, g) for g in (c.spec, c.gpu)]
        fitted = [
            sum(q.seconds for q in ktk.predicted(V, k, "two_stage", batch, value_bytes, ch, gpu=c.gpu)) * 1e6
            for ch in picks
        ]
        rows.append((k, batch, *picks, *fitted))
    return text_table(
        rows,
        ["k", "batch", "chunk, datasheet", "chunk, fitted", "fitted us, datasheet's chunk", "fitted us, fitted chunk"],
        digits=4,
    )
