"""Figures of what one rounded addition loses: the part of an addend lost against |s| / |a|, the
running sum's growth against a typical term, and which weight updates a format keeps. Each draws
the threshold 2**p (or half a spacing) of the formats it compares.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..accumulation import addend_loss
from ..formats import FloatFormat, get_format, ulp
from ..rounding import round_to
from .style import SMALLEST_FONT_PT, axes_or_new, format_color, legend_below

__all__ = ["plot_addend_loss", "plot_sum_to_term_ratio", "plot_update_survival"]


def plot_addend_loss(
    formats: Sequence[FloatFormat | str], rng: np.random.Generator, ax=None, n: int = 3000, max_log2_ratio: float = 30.0
):
    """The part of an addend that one rounded addition loses, against the ratio |s| / |a|.

    For each format: n random pairs (s, a) of values of that format, s of either sign in
    [1, 2) times a random power of two, |s| / |a| log-uniform in [1, 2**max_log2_ratio]; dots
    are :func:`nbhelpers.accumulation.addend_loss` (1: a lost; additions that happen to be exact,
    loss 0, fall off the bottom of the log scale). The solid
    line is the napkin estimate u * |s| / |a| (an addition's error is at most u |s + a|),
    capped at 1; the dotted vertical line is 2**p, p = man_bits + 1 significant bits.
    """
    ax = axes_or_new(ax)
    r_line = np.exp2(np.linspace(0, max_log2_ratio, 400))
    for spec in formats:
        f = get_format(spec)
        e = rng.integers(-8, 9, n)
        s = round_to(rng.uniform(1, 2, n) * np.exp2(e) * rng.choice([-1.0, 1.0], n), f)
        ratio = np.exp2(rng.uniform(0, max_log2_ratio, n))
        a = round_to(np.abs(s) / ratio * rng.choice([-1.0, 1.0], n), f)
        ok = a != 0
        loss = addend_loss(s[ok], a[ok], f)
        c = format_color(f)
        ax.plot(np.abs(s[ok] / a[ok]), loss, ".", ms=2.5, alpha=0.35, color=c)
        ax.plot(r_line, np.minimum(f.unit_roundoff * r_line, 1.0), color=c, lw=1.5, label=f"{f.name}: u |s|/|a|")
        ax.axvline(2.0 ** (f.man_bits + 1), color=c, ls=":", lw=1.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=10)
    ax.set_ylim(1e-9, 2)
    ax.set_xlabel("|s| / |a|  (running sum over addend)")
    ax.set_ylabel("part of a lost: |fl(s+a) - (s+a)| / |a|")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=SMALLEST_FONT_PT, loc="lower right")
    return ax


def plot_sum_to_term_ratio(series: dict, formats: Sequence[FloatFormat | str], ax=None):
    """How large the running sum grows against a typical term, for several data sets.

    series: label -> terms of shape (T, n) (T independent sums). For each, the curve is the
    median over the T rows of |S_k| (exact partial sums, float64 cumsum) divided by the median
    |term|, against k. Horizontal dotted lines at 2**p for each format: above its line a
    typical term is smaller than half a spacing of the running sum and is lost.
    """
    ax = axes_or_new(ax)
    styles = ["-", "--", "-.", ":"]
    for i, (label, terms) in enumerate(series.items()):
        X = np.asarray(terms, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"series {label!r} must have shape (T, n), got {X.shape}")
        k = np.arange(1, X.shape[1] + 1)
        ratio = np.median(np.abs(np.cumsum(X, axis=1)), axis=0) / np.median(np.abs(X))
        ax.plot(k, ratio, color="black", ls=styles[i % len(styles)], lw=1.5, label=label)
    for spec in formats:
        f = get_format(spec)
        ax.axhline(
            2.0 ** (f.man_bits + 1),
            color=format_color(f),
            ls=":",
            lw=1.5,
            label=f"2^p, {f.name} (p = {f.man_bits + 1})",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("k (terms added)")
    ax.set_ylabel("|running sum| / typical |term|")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=SMALLEST_FONT_PT, loc="upper left")
    return ax


def plot_update_survival(
    weights, updates, fmt: FloatFormat | str = "bf16", ax=None, max_points: int = 3000, threshold_color=None
):
    """|update| against |weight| (log-log), with the line below which ``fmt`` loses the update.

    weights, updates: arrays of the same size (one training step's weights and Adam's updates).
    The staircase is half the spacing of ``fmt`` above |w| (an update below it rounds away);
    grey guides mark |w| / 2**(m+1) and |w| / 2**(m+2). Points whose update would be lost are
    drawn in the format's colour. At most ``max_points`` evenly strided points are drawn. The
    legend sits under the axes, off the points.
    threshold_color: colour of the staircase (default: the format's colour; "black" sets it apart
    from the lost points, which share that colour).
    """
    f = get_format(fmt)
    ax = axes_or_new(ax, height_ratio=0.85)
    w = np.abs(np.asarray(weights, dtype=np.float64)).ravel()
    u = np.abs(np.asarray(updates, dtype=np.float64)).ravel()
    if w.shape != u.shape:
        raise ValueError(f"weights ({w.size}) and updates ({u.size}) must have the same size")
    keep = (w > 0) & (u > 0)
    w, u = w[keep], u[keep]
    w_f = np.abs(round_to(w, f))
    lost = u < ulp(w_f, f) / 2
    stride = max(1, w.size // max_points)
    ax.scatter(
        w[::stride][~lost[::stride]],
        u[::stride][~lost[::stride]],
        s=4,
        color="0.55",
        label=f"update survives in {f.name} ({np.mean(~lost):.0%})",
    )
    ax.scatter(
        w[::stride][lost[::stride]],
        u[::stride][lost[::stride]],
        s=4,
        color=format_color(f),
        label=f"update lost in {f.name} ({np.mean(lost):.0%})",
    )
    lo, hi = np.log2(w.min()), np.log2(w.max())
    grid = np.exp2(np.linspace(np.floor(lo), np.ceil(hi), 2000))
    ax.step(
        grid,
        ulp(grid, f) / 2,
        where="post",
        color=threshold_color or format_color(f),
        lw=1.2,
        label=f"half the {f.name} spacing at |w|",
    )
    for k, dash in ((f.man_bits + 1, "--"), (f.man_bits + 2, ":")):
        ax.plot(grid, grid / 2.0**k, dash, color="0.35", lw=0.9, label=f"|w| / 2^{k}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("|weight|")
    ax.set_ylabel("|update|")
    ax.grid(True, alpha=0.3)
    legend_below(ax)
    return ax
