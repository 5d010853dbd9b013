"""Figures of top-k over a vocabulary (chapter 11): how often rounding the logits to a narrower
format changes which tokens are in the top k, against k.

The function draws numbers it is given (the notebook computes them with
:func:`nbhelpers.topk.topk_set_changed`); one colour per format (the course's), and a line style
and marker of its own for each format, so the lines stay apart in grey print too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .style import axes_or_new, format_color, legend_below

__all__ = ["plot_topk_set_changes"]

_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def plot_topk_set_changes(ks: Sequence[int], changed: Mapping[str, Sequence[float]], rows: int, ax=None, title=None):
    """Share of rows (percent) whose top-k index set differs from the float32 logits' set, against
    k (log axis), one line per format. ``changed[fmt][i]`` is the fraction (0 to 1) at ``ks[i]``;
    ``rows`` is how many rows each fraction is measured on (in the axis label). The legend sits
    under the axes, off the data. Returns the Axes."""
    ks = np.asarray(ks, dtype=float)
    if ks.ndim != 1 or ks.size == 0 or (ks < 1).any():
        raise ValueError(f"ks must be a non-empty list of k >= 1, got {list(ks)}")
    if not changed:
        raise ValueError("changed must hold at least one format's fractions")
    ax = axes_or_new(ax, height_ratio=0.6)
    for i, (fmt, frac) in enumerate(changed.items()):
        frac = np.asarray(frac, dtype=float)
        if frac.shape != ks.shape:
            raise ValueError(f"{fmt}: {frac.size} fractions for {ks.size} values of k")
        if ((frac < 0) | (frac > 1)).any():
            raise ValueError(f"{fmt}: fractions must lie in [0, 1]")
        ls, marker = _STYLES[i % len(_STYLES)]
        ax.plot(ks, 100 * frac, color=format_color(fmt), linestyle=ls, marker=marker, label=f"rounded to {fmt}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [f"{int(k)}" for k in ks])
    ax.set_ylim(-3, 103)
    ax.set_xlabel("k")
    ax.set_ylabel(f"rows whose top-k set changes (% of {rows})")
    ax.grid(True, alpha=0.3)
    legend_below(ax)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
