"""Figures of how fast memory moves (chapter 08): the efficiency of a strided read against its
stride, measured and as a model predicts it; the bandwidth of copy kernels against the sector
model's prediction and the peak.

Both take what they draw as plain numbers (the notebook computes or reads them: see
:mod:`nbhelpers.memory_access` and :func:`nbhelpers.results.recorded_copy_bandwidth`); they
compute nothing of their own beyond picking, per access pattern, the fastest of several tile
sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .style import DASHES, SMALLEST_FONT_PT, axes_or_new, legend_below

__all__ = ["plot_efficiency_vs_stride", "plot_copy_bandwidth", "copy_bandwidth_points"]

# measured series: solid lines with filled markers; predictions: dashed/dotted lines, hollow markers
_MEASURED_COLORS = ("#222222", "#1b9e77", "#7570b3")
_PREDICTED_COLORS = ("#d95f02", "#e7298a", "#66a61e", "#a6761d")
_MARKERS = ("o", "s", "D", "^", "v", "P")


def _fraction(v: float) -> str:
    """1 -> "1", 0.125 -> "1/8" for powers of two; otherwise a short decimal."""
    if v > 0 and float(np.log2(v)).is_integer():
        return f"{int(v)}" if v >= 1 else f"1/{int(round(1 / v))}"
    return f"{v:.2g}"


def _ratio(v: float) -> str:
    """A value as the fraction of small integers nearest it: 2/9 -> "2/9", 1 -> "1"."""
    f = Fraction(v).limit_denominator(128)
    return f"{f.numerator}" if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def _legend(ax, outside: bool) -> None:
    if outside:
        legend_below(ax)
    else:
        ax.legend(fontsize=SMALLEST_FONT_PT, loc="best")


def plot_efficiency_vs_stride(
    strides: Sequence[int],
    measured: dict,
    predicted: dict | None = None,
    ax=None,
    legend_outside: bool = True,
    ylabel: str = "useful bandwidth relative to the contiguous copy",
    yticks: str = "powers",
):
    """Efficiency (useful bytes / bytes moved, or a bandwidth relative to the contiguous one)
    against the stride, both axes log base 2.

    strides: the x values (elements between two reads). measured: label -> one value per stride,
    drawn as solid lines with filled markers; predicted: label -> one value per stride, drawn as
    dashed or dotted lines with hollow markers. Every series has its own colour, line style and
    marker. The y ticks read as fractions (1, 1/2, ..., 1/64). legend_outside: the legend under
    the axes (default), off the data. ylabel: what the values are (the default: the chapter's
    copy fractions, ``2 / (1 + 1/e)``; pass "efficiency (useful / moved bytes)" for ``e`` itself).
    yticks: "powers" (1, 1/2, ..., the default) or "predicted": a tick at each distinct value of
    the predicted series, labelled as a fraction (``2/9``, ``2/17``), so a plateau reads as its
    model value.
    """
    ax = axes_or_new(ax, height_ratio=0.8)
    x = np.asarray(strides, dtype=float)
    if x.ndim != 1 or x.size == 0 or np.any(x < 1):
        raise ValueError(f"strides must be a non-empty list of values >= 1, got {strides!r}")
    if not measured and not predicted:
        raise ValueError("nothing to draw: give measured or predicted series")
    if len(measured) > len(_MEASURED_COLORS) or len(predicted or {}) > len(_PREDICTED_COLORS):
        raise ValueError(f"at most {len(_MEASURED_COLORS)} measured and {len(_PREDICTED_COLORS)} predicted series")
    series = [(label, v, True, i) for i, (label, v) in enumerate(measured.items())]
    series += [(label, v, False, i) for i, (label, v) in enumerate((predicted or {}).items())]
    lows = []
    for k, (label, vals, is_measured, i) in enumerate(series):
        y = np.asarray(vals, dtype=float)
        if y.shape != x.shape:
            raise ValueError(f"{label!r} has {y.size} values for {x.size} strides")
        if np.any(~np.isfinite(y)) or np.any(y <= 0):
            raise ValueError(f"{label!r}: efficiencies must be positive and finite")
        lows.append(y.min())
        if is_measured:
            ax.plot(
                x,
                y,
                "-",
                color=_MEASURED_COLORS[i],
                marker=_MARKERS[k % len(_MARKERS)],
                ms=6,
                lw=1.8,
                label=label,
                zorder=3,
            )
        else:
            ax.plot(
                x,
                y,
                DASHES[1 + i % (len(DASHES) - 1)],
                color=_PREDICTED_COLORS[i],
                marker=_MARKERS[k % len(_MARKERS)],
                ms=6,
                mfc="none",
                lw=1.4,
                label=label,
                zorder=2,
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{int(s)}" if float(s).is_integer() else f"{s:g}" for s in x])
    top, bottom = 0, int(np.floor(np.log2(min(lows))))
    if yticks == "powers":
        ticks = [2.0**e for e in range(bottom, top + 1)]
        labels = [_fraction(t) for t in ticks]
    elif yticks == "predicted" and predicted:
        ticks = sorted({round(float(v), 12) for vals in predicted.values() for v in vals})
        labels = [_ratio(t) for t in ticks]
    else:
        raise ValueError(f"yticks must be 'powers' or 'predicted' (with predicted series), got {yticks!r}")
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels)
    ax.set_ylim(2.0 ** (bottom - 0.3), 2.0**0.4)
    ax.minorticks_off()
    ax.set_xlabel("stride (elements between two reads)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    _legend(ax, legend_outside)
    return ax


def copy_bandwidth_points(rows: Sequence[dict]) -> dict:
    """What :func:`plot_copy_bandwidth` draws, from the rows of a copy-bandwidth run (the rows of
    ``benchmarks/gpu_copy_bandwidth.py``'s results file, or rows of the same form measured live).

    Returns ``{"patterns": [...], "triton": [...], "torch": [...], "predicted": [...],
    "predicted_at_peak": [...]}``, one entry per access pattern in the order contiguous, each
    stride ascending, transposed; bandwidths in bytes/s, None where a run has no such row. Per
    pattern the fastest Triton row is taken (a run times several BLOCK sizes); its
    ``predicted_bandwidth`` and ``predicted_at_peak`` are the prediction's. The contiguous torch
    row is ``torch copy``; the strided one ``torch strided s``; the transposed one ``torch
    transpose``.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("no rows to draw")
    keys = []
    for r in rows:
        for k in ("kernel", "pattern", "stride", "bandwidth"):
            if k not in r:
                raise ValueError(f"row {r.get('name', r)!r} has no {k!r}")
        key = (r["pattern"], r["stride"] if r["pattern"] == "strided" else None)
        if r["pattern"] not in ("contiguous", "strided", "transposed"):
            raise ValueError(f"unknown pattern {r['pattern']!r} in row {r.get('name')!r}")
        if key not in keys:
            keys.append(key)
    order = {"contiguous": 0, "strided": 1, "transposed": 2}
    keys.sort(key=lambda k: (order[k[0]], k[1] or 0))
    out = {"patterns": [], "triton": [], "torch": [], "predicted": [], "predicted_at_peak": []}
    for pattern, stride in keys:
        mine = [r for r in rows if r["pattern"] == pattern and (stride is None or r["stride"] == stride)]
        tri = [r for r in mine if r["kernel"] == "triton"]
        tor = [r for r in mine if r["kernel"] == "torch"]
        best = max(tri, key=lambda r: r["bandwidth"]) if tri else None
        out["patterns"].append(
            "contiguous" if pattern == "contiguous" else (f"stride {stride}" if pattern == "strided" else "transposed")
        )
        out["triton"].append(best["bandwidth"] if best else None)
        out["torch"].append(max(r["bandwidth"] for r in tor) if tor else None)
        out["predicted"].append(best.get("predicted_bandwidth") if best else None)
        out["predicted_at_peak"].append(best.get("predicted_at_peak") if best else None)
    return out


#: markers of the bounds :func:`plot_copy_bandwidth` draws at single patterns
_BOUND_STYLES = (("#a6761d", "v"), ("#e7298a", "<"), ("#66a61e", ">"))
_NICE = (1.0, 2.0, 5.0)  # the labelled ticks of a decade on a log axis of more than one decade


def _nice_floor(v: float) -> float:
    """The largest 1, 2 or 5 times a power of ten at or below ``v`` (> 0): where a log axis whose
    ticks read 1, 2, 5 should start so that its lowest point sits above a labelled tick."""
    e = np.floor(np.log10(v))
    return max(m * 10.0**e for m in _NICE if m * 10.0**e <= v * (1 + 1e-12))


#: colours of :func:`plot_copy_bandwidth`'s extra model lines
_MODEL_COLOURS = ("#1f78b4", "#e6ab02")


def plot_copy_bandwidth(
    rows: Sequence[dict],
    peak: float | None = None,
    peak_label: str = "peak",
    ax=None,
    legend_outside: bool = True,
    bounds: dict | None = None,
    models: dict | None = None,
):
    """Bandwidth of useful bytes (GB/s, log axis) per access pattern: the Triton kernel (the
    fastest tile size per pattern), torch's own copy, the sector model's prediction for the
    Triton kernels from the measured torch copy and from the peak, and the peak as a horizontal
    line.

    rows: see :func:`copy_bandwidth_points`. peak: bytes/s (None: no line). bounds: label ->
    {pattern label ("transposed", "stride 8", ...): bytes/s}, each drawn as hollow markers with
    no line at its patterns (a bound that holds for one kernel of a pattern only, such as torch's
    naive transpose). models: label -> {pattern label: bytes/s}, each drawn as a dashed line with
    hollow markers over its patterns (another model's prediction at some patterns only). Each
    series has its own colour, line style and marker; the legend sits
    under the axes by default. The y axis starts at a labelled tick below the lowest point.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax = axes_or_new(ax, height_ratio=0.8)
    pts = copy_bandwidth_points(rows)
    x = np.arange(len(pts["patterns"]))
    styles = {
        "triton": ("Triton kernel (measured)", "#222222", "-", "o", "full"),
        "torch": ("torch (measured)", "#1b9e77", "-", "s", "full"),
        "predicted": ("sector model x measured torch copy (Triton kernels)", "#d95f02", "--", "D", "none"),
        "predicted_at_peak": ("sector model x peak (Triton kernels)", "#7570b3", ":", "^", "none"),
    }
    lows = []
    for key, (label, color, ls, marker, fill) in styles.items():
        y = np.array([np.nan if v is None else v / 1e9 for v in pts[key]], dtype=float)
        if np.all(np.isnan(y)):
            continue
        lows.append(np.nanmin(y))
        ax.plot(x, y, ls, color=color, marker=marker, fillstyle=fill, ms=7, lw=1.5, label=label)
    if len(models or {}) > len(_MODEL_COLOURS):
        raise ValueError(f"at most {len(_MODEL_COLOURS)} models")
    if len(bounds or {}) > len(_BOUND_STYLES):
        raise ValueError(f"at most {len(_BOUND_STYLES)} bounds")
    for (label, at), (color, marker) in zip((bounds or {}).items(), _BOUND_STYLES, strict=False):
        unknown = [p for p in at if p not in pts["patterns"]]
        if unknown:
            raise ValueError(f"bound {label!r}: no pattern {unknown[0]!r} in the rows ({pts['patterns']})")
        xs = [pts["patterns"].index(p) for p in at]
        ys = [v / 1e9 for v in at.values()]
        lows.append(min(ys))
        ax.plot(xs, ys, ls="none", color=color, marker=marker, fillstyle="none", ms=8, mew=1.5, label=label)
    for (label, at), color in zip((models or {}).items(), _MODEL_COLOURS, strict=False):
        unknown = [p for p in at if p not in pts["patterns"]]
        if unknown:
            raise ValueError(f"model {label!r}: no pattern {unknown[0]!r} in the rows ({pts['patterns']})")
        ys = [v / 1e9 for v in at.values()]
        lows.append(min(ys))
        ax.plot([pts["patterns"].index(p) for p in at], ys, "--", color=color, marker="h", fillstyle="none",
                ms=7, lw=1.5, label=label)  # fmt: skip
    if peak is not None:
        ax.axhline(peak / 1e9, color="0.4", lw=1.0, ls="-.", label=f"{peak_label} ({peak / 1e12:.3g} TB/s)")
    ax.set_yscale("log")
    gbps = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")  # plain GB/s, not 4 x 10^3
    ax.yaxis.set_major_formatter(gbps)
    lo, hi = ax.get_ylim()
    lo = min(lo, _nice_floor(min(lows) * 0.97)) if lows else lo
    ax.set_ylim(lo, hi)
    if hi / lo < 12:  # about one decade: label the minor ticks too, else they crowd
        ax.yaxis.set_minor_formatter(gbps)
        ax.tick_params(axis="y", which="minor", labelsize=SMALLEST_FONT_PT)
    else:  # more than a decade: label 1, 2 and 5 of each decade
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(x)
    ax.set_xticklabels(pts["patterns"], rotation=30, ha="right")
    ax.set_xlabel("access pattern of the reads (float32)")
    ax.set_ylabel("GB/s of useful bytes (read + write)")
    ax.grid(True, which="major", alpha=0.3)
    _legend(ax, legend_outside)
    return ax
