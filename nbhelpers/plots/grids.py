"""Figures of what a format holds: its bit fields, its values, its spacing, its rounding.

Chapter 01's family: each figure draws one or more formats' grids, coloured by format.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..formats import FloatFormat, finite_values, get_format, ulp
from ..rounding import round_to
from .style import COLUMN_IN, SMALLEST_FONT_PT, axes_or_new, format_color

__all__ = ["plot_bit_layouts", "plot_value_line", "plot_relative_spacing", "plot_rounding_modes"]

_FIELD_COLORS = {"sign": "#c7c7c7", "exponent": "#6baed6", "mantissa": "#fdae6b"}


def plot_bit_layouts(formats: Iterable[FloatFormat | str], ax=None):
    """One row per format: its sign, exponent and mantissa fields as boxes, one per bit."""
    fmts = [get_format(f) for f in formats]
    ax = axes_or_new(ax, height_ratio=(0.45 * len(fmts) + 0.8) / COLUMN_IN)
    for row, f in enumerate(fmts):
        y = len(fmts) - 1 - row
        pos = 0
        for field, width in (("sign", int(f.signed)), ("exponent", f.exp_bits), ("mantissa", f.man_bits)):
            for _ in range(width):
                ax.add_patch(_rect(pos, y, _FIELD_COLORS[field]))
                pos += 1
            if width:
                ax.text(
                    pos - width / 2,
                    y + 0.4,
                    f"{field[0]}{width}" if field != "sign" else "s",
                    ha="center",
                    va="center",
                    fontsize=SMALLEST_FONT_PT,
                )
        ax.text(-0.6, y + 0.4, f.name, ha="right", va="center", fontsize=10, color=format_color(f), fontweight="bold")
        ax.text(pos + 0.6, y + 0.4, f"{f.bits} bits", ha="left", va="center", fontsize=9)
    ax.set_xlim(-6, 37)
    ax.set_ylim(-0.3, len(fmts) + 0.1)
    ax.axis("off")
    handles = [_rect(0, 0, c) for c in _FIELD_COLORS.values()]
    ax.legend(handles, list(_FIELD_COLORS), loc="lower right", ncol=1, frameon=False, fontsize=SMALLEST_FONT_PT)
    return ax


def _rect(x, y, color):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 0.92, 0.8, facecolor=color, edgecolor="black", linewidth=0.4)


def plot_value_line(formats: Sequence[FloatFormat | str], ax=None):
    """Every nonnegative finite value of small formats on a number line (linear scale)."""
    fmts = [get_format(f) for f in formats]
    ax = axes_or_new(ax, height_ratio=(0.55 * len(fmts) + 0.9) / COLUMN_IN)
    for row, f in enumerate(fmts):
        v = finite_values(f, nonnegative=True)
        y = len(fmts) - 1 - row
        ax.plot(v, np.full_like(v, y), "|", ms=14, color=format_color(f))
        ax.text(-0.02 * v.max(), y, f"{f.name} ({v.size} values >= 0)", ha="right", va="center", fontsize=9)
    ax.set_yticks([])
    ax.set_xlabel("value")
    ax.set_ylim(-0.7, len(fmts) - 0.3)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    return ax


def plot_relative_spacing(
    formats: Sequence[FloatFormat | str],
    ax=None,
    lo: float = 2.0**-30,
    hi: float = 2.0**20,
    points_per_binade: int = 64,
):
    """Spacing of each format's grid divided by |x|, over |x| from ``lo`` to ``hi`` (log-log).

    In the normal range the curve saw-tooths between eps/2 and eps; below the smallest normal
    it climbs (subnormals keep a fixed spacing); past max the format has no values.
    """
    ax = axes_or_new(ax)
    x = np.exp2(np.linspace(np.log2(lo), np.log2(hi), int(np.log2(hi / lo) * points_per_binade)))
    for spec in formats:
        f = get_format(spec)
        inside = (x >= f.smallest_positive) & (x <= f.max)
        rel = np.where(inside, ulp(x, f) / x, np.nan)
        ax.plot(x, rel, color=format_color(f), label=f.name, lw=1.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("|x|")
    ax.set_ylabel("spacing at x / |x|")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=SMALLEST_FONT_PT, ncol=2)
    return ax


def plot_rounding_modes(
    fmt: FloatFormat | str, lo: float, hi: float, rng: np.random.Generator, ax=None, n: int = 801, draws: int = 200
):
    """round(x) against x on [lo, hi] for each rounding mode, with the grid of ``fmt``.

    Stochastic rounding is shown as the mean of ``draws`` independent roundings (it tracks x)
    plus one single draw (scattered dots).
    """
    f = get_format(fmt)
    ax = axes_or_new(ax, height_ratio=0.7)
    x = np.linspace(lo, hi, n)
    grid = finite_values(f)
    for g in grid[(grid >= lo) & (grid <= hi)]:
        ax.axhline(g, color="0.85", lw=0.8, zorder=0)
    styles = {"nearest_even": ("C0", "-"), "nearest_away": ("C2", ":"), "toward_zero": ("C3", "--")}
    for mode, (c, ls) in styles.items():
        ax.plot(x, round_to(x, f, mode), color=c, ls=ls, lw=1.6, label=mode)
    one = round_to(x, f, "stochastic", rng=rng)
    mean = np.mean([round_to(x, f, "stochastic", rng=rng) for _ in range(draws)], axis=0)
    ax.plot(x[::4], one[::4], ".", color="C1", ms=3, alpha=0.6, label="stochastic (one draw)")
    ax.plot(x, mean, color="C1", lw=1.2, label=f"stochastic (mean of {draws})")
    ax.plot(x, x, color="black", lw=0.6, ls="-.", label="x")
    ax.set_xlabel("x")
    ax.set_ylabel(f"x rounded to {f.name}")
    ax.legend(fontsize=SMALLEST_FONT_PT, loc="upper left")
    return ax
