"""Figures of what bounds a kernel's speed (chapter 09): the roofline (attainable FLOP/s against
arithmetic intensity, under a memory roof and compute roofs), occupancy (resident warps per SM
against registers per thread) and register pressure (registers, spills and resident warps against
the live values a kernel keeps).

Both take what they draw as plain numbers: the notebook computes intensities, attainable or
measured TFLOP/s and warp counts; the helpers draw the roofs from the peaks they are given and
compute nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .style import DASHES, SMALLEST_FONT_PT, axes_or_new, legend_below, line_color, subplots

__all__ = ["plot_roofline", "plot_occupancy", "plot_register_pressure"]

_MARKERS = ("o", "s", "D", "^", "v", "P", "*", "X", "h")
_ROOF_COLORS = ("0.25", "0.45", "0.6", "0.7")


def _legend(ax, outside: bool, **kw):
    if outside:
        legend_below(ax, **kw)
    else:
        ax.legend(fontsize=SMALLEST_FONT_PT, loc="best", **kw)


def plot_roofline(
    points: dict,
    peaks: dict,
    bandwidth: float,
    ax=None,
    colors: dict | None = None,
    labels: dict | None = None,
    legend_outside: bool = True,
    markers: dict | None = None,
    joined: dict | None = None,
):
    """Attainable TFLOP/s against arithmetic intensity (FLOPs per byte of DRAM traffic), log-log.

    points: label -> (intensities, TFLOP/s), two equal-length sequences (one marker per point, one
    marker shape and colour per label, joined by a thin line). peaks: label -> peak TFLOP/s, each
    drawn as a flat compute roof in its own dash style, from its ridge point (peak / bandwidth) on,
    with the ridge marked by a thin vertical line. bandwidth: the memory roof, in bytes per second
    (TFLOP/s = bandwidth * intensity / 1e12, drawn once, solid). colors: label -> a format name
    (its course colour) or a matplotlib colour; black when not given. The first series' markers are
    filled, the others' hollow, so that points at the same place stay visible. labels: label -> one
    short text per point (e.g. "M=16"), written beside the points of that series (below right for
    the first series, above left for the others). The memory roof
    stops at the highest compute roof. The legend sits under the axes (``legend_outside``), off
    the data. markers: label -> a matplotlib marker, replacing that series' default shape (e.g. one
    marker family for one chapter's points). joined: label -> False to draw that series' markers
    without the line between them (points that are not a sweep); every series is joined by default.
    """
    ax = axes_or_new(ax, height_ratio=0.85)
    for name, opt in (("markers", markers), ("joined", joined)):
        unknown = set(opt or {}) - set(points)
        if unknown:
            raise ValueError(f"{name} names series that are not in points: {sorted(unknown)}")
    if not peaks:
        raise ValueError("peaks is empty: give at least one compute roof (label -> TFLOP/s)")
    if not (np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be a positive number of bytes per second, got {bandwidth!r}")
    xs_all = []
    series = {}
    for label, (xs, ys) in points.items():
        xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
        if xs.shape != ys.shape or xs.ndim != 1:
            raise ValueError(f"{label!r}: {xs.size} intensities for {ys.size} TFLOP/s values")
        if (xs <= 0).any() or (ys <= 0).any():
            raise ValueError(f"{label!r}: intensities and TFLOP/s must be positive (log axes)")
        series[label] = (xs, ys)
        xs_all.extend(xs)
    ridges = {label: float(p) * 1e12 / bandwidth for label, p in peaks.items()}
    lo = min(xs_all + list(ridges.values())) / 2
    hi = max(xs_all + list(ridges.values())) * 2
    x = np.geomspace(lo, hi, 200)
    x_mem = np.r_[x[x < max(ridges.values())], max(ridges.values())]  # up to the highest compute roof
    ax.plot(
        x_mem,
        bandwidth * x_mem / 1e12,
        "-",
        color="0.15",
        lw=1.2,
        label=f"memory roof: {bandwidth / 1e12:g} TB/s x intensity",
    )
    for i, (label, peak) in enumerate(peaks.items()):
        color = _ROOF_COLORS[i % len(_ROOF_COLORS)]
        xr = x[x >= ridges[label]]
        ax.plot(
            np.r_[ridges[label], xr],
            np.full(xr.size + 1, float(peak)),
            DASHES[(i + 1) % len(DASHES)],
            color=color,
            lw=1.5,
            label=f"{label}: {float(peak):g} TFLOP/s (ridge at {ridges[label]:.0f} FLOP/B)",
        )
        ax.axvline(ridges[label], color=color, lw=0.6, ls=":")
    for i, (label, (xs, ys)) in enumerate(series.items()):
        color = line_color((colors or {}).get(label, "black"))
        ax.plot(
            xs,
            ys,
            ls="-" if (joined or {}).get(label, True) else "none",
            color=color,
            lw=0.8,
            marker=(markers or {}).get(label, _MARKERS[i % len(_MARKERS)]),
            ms=7 + 2 * (i > 0),
            mfc=color if i == 0 else "none",
            mew=1.5,
            label=label,
        )
        texts = (labels or {}).get(label)
        if texts is not None:
            if len(texts) != xs.size:
                raise ValueError(f"labels[{label!r}] has {len(texts)} texts for {xs.size} points")
            # the first series' texts below right of its points, the others' above left, so that
            # two labelled series at nearby points do not write over each other
            offset, ha = ((4, -12), "left") if i == 0 else ((-4, 6), "right")
            for xv, yv, t in zip(xs, ys, texts):
                ax.annotate(
                    str(t),
                    (xv, yv),
                    xytext=offset,
                    textcoords="offset points",
                    fontsize=SMALLEST_FONT_PT,
                    color=color,
                    ha=ha,
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    _legend(ax, legend_outside)
    return ax


def plot_occupancy(
    registers: Sequence[int], warps: dict, ax=None, max_warps: int | None = None, legend_outside: bool = True
):
    """Resident warps per SM against registers per thread, one step line per series.

    registers: the registers per thread (x axis). warps: label -> resident warps per SM, one per
    register count (e.g. "any warp count" and "programs of 8 warps"), each in its own colour, dash
    and marker-free step style. max_warps: the hardware's cap, a thin horizontal line when given.
    """
    ax = axes_or_new(ax, height_ratio=0.75)
    regs = np.asarray(registers, dtype=float)
    if regs.ndim != 1 or regs.size == 0:
        raise ValueError("registers must be a non-empty 1-D sequence")
    if not warps:
        raise ValueError("warps is empty: give at least one series")
    cmap_colors = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b")
    for i, (label, w) in enumerate(warps.items()):
        w = np.asarray(w, dtype=float)
        if w.shape != regs.shape:
            raise ValueError(f"warps[{label!r}] has {w.size} values for {regs.size} register counts")
        ax.step(
            regs,
            w,
            where="post",
            ls=DASHES[i % len(DASHES)],
            color=cmap_colors[i % len(cmap_colors)],
            lw=1.8,
            label=label,
        )
    if max_warps is not None:
        ax.axhline(max_warps, color="0.6", lw=0.8, ls=":", label=f"at most {max_warps} warps per SM")
    ax.set_xlabel("registers per thread")
    ax.set_ylabel("resident warps per SM")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    _legend(ax, legend_outside)
    return ax


def plot_register_pressure(
    extra: Sequence[int],
    registers: Sequence[int],
    spill_stores: Sequence[int],
    spill_loads: Sequence[int],
    warps: Sequence[int],
    axes=None,
    max_registers: int | None = 255,
    max_warps: int | None = 64,
    xlabel: str | None = None,
):
    """What the compiler made of a kernel with more and more live values, in three panels over one
    x axis (``extra``, e.g. the live values added): registers per thread (markers on a line, with
    the per-thread cap ``max_registers`` as a thin line), spill stores and loads in bytes per thread
    (two styles) and the resident warps per SM the registers and shared memory leave (a step line,
    with ``max_warps``). axes: three Axes, or None for a new figure. Returns the three Axes; each
    panel's legend sits in the corner its data leave empty (registers rise, spills start late,
    warps fall: lower right, upper left, centre right)."""
    x = np.asarray(extra, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("extra must be a non-empty 1-D sequence")
    ys = {}
    for name, v in (
        ("registers", registers),
        ("spill_stores", spill_stores),
        ("spill_loads", spill_loads),
        ("warps", warps),
    ):
        v = np.asarray(v, dtype=float)
        if v.shape != x.shape:
            raise ValueError(f"{name} has {v.size} values for {x.size} points")
        ys[name] = v
    if axes is None:
        _, axes = subplots(3, 1, height_ratio=1.1, sharex=True, gridspec_kw={"height_ratios": [3, 2, 3]})
    if len(axes) != 3:
        raise ValueError(f"axes must be three Axes, got {len(axes)}")
    ax_r, ax_s, ax_w = axes
    ax_r.plot(x, ys["registers"], "-", color="#1f77b4", lw=1.0, marker="o", ms=5, label="registers per thread (ptxas)")
    if max_registers is not None:
        ax_r.axhline(max_registers, color="0.5", lw=0.8, ls=":", label=f"at most {max_registers} per thread")
    ax_r.set_ylabel("registers / thread")
    ax_r.set_ylim(bottom=0)
    ax_s.plot(x, ys["spill_stores"], "-", color="#d62728", lw=1.4, marker="s", ms=4, label="spill stores")
    ax_s.plot(x, ys["spill_loads"], "--", color="#9467bd", lw=1.4, marker="^", ms=4, mfc="none", label="spill loads")
    ax_s.set_ylabel("spill bytes (ptxas)")
    ax_s.set_ylim(bottom=0)
    ax_w.step(x, ys["warps"], where="mid", color="#2ca02c", lw=1.8, label="resident warps per SM")
    ax_w.plot(x, ys["warps"], "o", color="#2ca02c", ms=3)
    if max_warps is not None:
        ax_w.axhline(max_warps, color="0.5", lw=0.8, ls=":", label=f"at most {max_warps} warps per SM")
    ax_w.set_ylabel("warps / SM")
    ax_w.set_ylim(bottom=0)
    ax_w.set_xlabel(xlabel or "extra live values")
    # each legend where its panel has no data: registers rise toward their cap at the top, spills
    # start late, the resident warps fall from theirs
    for ax, where in zip(axes, ("lower right", "upper left", "center right")):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=SMALLEST_FONT_PT, loc=where)
    return axes
