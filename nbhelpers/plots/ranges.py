"""Figures of magnitudes against a format's range: where a tensor's values fall relative to the
smallest subnormal, the smallest normal and the largest value (what underflows, what overflows).
"""

from __future__ import annotations

import numpy as np

from ..formats import FloatFormat, get_format
from ..metrics import underflow_fraction
from .style import SMALLEST_FONT_PT, axes_or_new, format_color, legend_below, subplots

__all__ = ["plot_gradient_histogram", "plot_gradient_histograms_scaled"]


def plot_gradient_histogram(
    grads, fmt: FloatFormat | str = "fp16", scale: float = 1.0, ax=None, bins: int = 90, lo: float | None = None
):
    """Histogram of log2|g * scale| for one or more gradient arrays, with the limits of ``fmt``.

    grads: an array, or a {label: array} mapping (each drawn as its own histogram). Zeros are
    left out. Vertical lines: the smallest subnormal, the smallest normal and the largest value
    of ``fmt``; the band below half the smallest subnormal (where values round to zero: underflow,
    not the hardware's flush-to-zero mode) and the subnormal band are shaded in the format's colour.
    lo: optional log2 of the left edge of the bins (lowered to the data if needed), so that several
    panels can share one range.
    """
    f = get_format(fmt)
    ax = axes_or_new(ax, height_ratio=0.6)
    series = grads if isinstance(grads, dict) else {"gradients": grads}
    logs = {}
    for label, g in series.items():
        a = np.abs(np.asarray(g, dtype=np.float64)).ravel() * scale
        logs[label] = np.log2(a[(a > 0) & np.isfinite(a)])
    allv = np.concatenate(list(logs.values()))
    lo = min(allv.min(), np.log2(f.smallest_positive) - 4, np.inf if lo is None else lo)
    hi = max(allv.max(), np.log2(f.max) + 1)
    edges = np.linspace(np.floor(lo), np.ceil(hi), bins + 1)
    greys = ("0.2", "0.55", "0.75", "0.4")
    for i, (label, v) in enumerate(logs.items()):
        ax.hist(v, bins=edges, histtype="step", lw=1.4, color=greys[i % len(greys)], label=label)
    c = format_color(f)
    sub = np.log2(f.smallest_positive)
    ax.axvspan(edges[0], sub - 1, color=c, alpha=0.22, lw=0, label=f"underflows to 0 in {f.name}")
    ax.axvspan(sub - 1, np.log2(f.smallest_normal), color=c, alpha=0.10, lw=0, label=f"{f.name} subnormal")
    ax.axvspan(np.log2(f.max), edges[-1], color="black", alpha=0.12, lw=0, label=f"overflows {f.name}")
    for x, text in (
        (sub, "smallest subnormal"),
        (np.log2(f.smallest_normal), "smallest normal"),
        (np.log2(f.max), "max"),
    ):
        ax.axvline(x, color=c, lw=1.0)
        ax.text(
            x,
            1.0,
            f" {text}",
            rotation=90,
            va="top",
            ha="right",
            fontsize=SMALLEST_FONT_PT,
            color=c,
            transform=ax.get_xaxis_transform(),
        )
    ax.set_xlabel("log2 |gradient" + (" x loss scale|" if scale != 1 else "|"))
    ax.set_ylabel("count")
    ax.legend(fontsize=SMALLEST_FONT_PT, loc="center right")
    return ax


def plot_gradient_histograms_scaled(
    grads, fmt: FloatFormat | str = "fp16", scale: float = 1.0, axes=None, bins: int = 90
):
    """Two panels, one above the other, on the same axes: the gradients as they are (top) and times
    the loss scale ``scale`` (bottom), each against the limits of ``fmt`` (see
    :func:`plot_gradient_histogram`).

    axes: two Axes, or None for a new figure. Returns the two Axes. Each panel's title gives the
    fraction of the nonzero values that would round to zero in ``fmt``; one legend, under the
    second panel.
    """
    if axes is None:
        _, axes = subplots(2, 1, height_ratio=1.2, sharex=True, sharey=True)
        axes[0].tick_params(labelbottom=True)  # the panels' x axes mean different things: label both
    series = grads if isinstance(grads, dict) else {"gradients": grads}
    f = get_format(fmt)
    allv = np.concatenate([np.abs(np.asarray(g, dtype=np.float64)).ravel() for g in series.values()])
    lo = float(np.log2(allv[allv > 0].min() * min(scale, 1.0)))  # one range for both panels
    for ax, s, what in ((axes[0], 1.0, "no loss scale"), (axes[1], scale, f"loss scale 2^{np.log2(scale):g}")):
        plot_gradient_histogram(series, f, scale=s, ax=ax, bins=bins, lo=lo)
        zero = underflow_fraction(allv * s, f)
        ax.set_title(f"{what}: {zero:.1%} underflow to 0 in {f.name}", fontsize=10)
    axes[0].get_legend().remove()
    legend_below(axes[1])
    return axes
