"""Figures of magnitudes against a format's range: where a tensor's values fall relative to the
smallest subnormal, the smallest normal and the largest value (what underflows, what overflows).
"""
from __future__ import annotations

import numpy as np

from ..formats import FloatFormat, get_format
from .style import axes_or_new, format_color

__all__ = ["plot_gradient_histogram"]


def plot_gradient_histogram(grads, fmt: FloatFormat | str = "fp16", scale: float = 1.0, ax=None,
                            bins: int = 90):
    """Histogram of log2|g * scale| for one or more gradient arrays, with the limits of ``fmt``.

    grads: an array, or a {label: array} mapping (each drawn as its own histogram). Zeros are
    left out. Vertical lines: the smallest subnormal, the smallest normal and the largest value
    of ``fmt``; the band below half the smallest subnormal (where values flush to zero) and the
    subnormal band are shaded in the format's colour.
    """
    f = get_format(fmt)
    ax = axes_or_new(ax, figsize=(9, 4))
    series = grads if isinstance(grads, dict) else {"gradients": grads}
    logs = {}
    for label, g in series.items():
        a = np.abs(np.asarray(g, dtype=np.float64)).ravel() * scale
        logs[label] = np.log2(a[(a > 0) & np.isfinite(a)])
    allv = np.concatenate(list(logs.values()))
    lo = min(allv.min(), np.log2(f.smallest_positive) - 4)
    hi = max(allv.max(), np.log2(f.max) + 1)
    edges = np.linspace(np.floor(lo), np.ceil(hi), bins + 1)
    greys = ("0.2", "0.55", "0.75", "0.4")
    for i, (label, v) in enumerate(logs.items()):
        ax.hist(v, bins=edges, histtype="step", lw=1.4, color=greys[i % len(greys)], label=label)
    c = format_color(f)
    sub = np.log2(f.smallest_positive)
    ax.axvspan(edges[0], sub - 1, color=c, alpha=0.22, lw=0, label=f"flushes to 0 in {f.name}")
    ax.axvspan(sub - 1, np.log2(f.smallest_normal), color=c, alpha=0.10, lw=0, label=f"{f.name} subnormal")
    ax.axvspan(np.log2(f.max), edges[-1], color="black", alpha=0.12, lw=0, label=f"overflows {f.name}")
    for x, text in ((sub, "smallest subnormal"), (np.log2(f.smallest_normal), "smallest normal"),
                    (np.log2(f.max), "max")):
        ax.axvline(x, color=c, lw=1.0)
        ax.text(x, 1.0, f" {text}", rotation=90, va="top", ha="right", fontsize=7, color=c,
                transform=ax.get_xaxis_transform())
    ax.set_xlabel("log2 |gradient" + (" x loss scale|" if scale != 1 else "|"))
    ax.set_ylabel("count")
    ax.legend(fontsize=8, loc="center right")
    return ax
