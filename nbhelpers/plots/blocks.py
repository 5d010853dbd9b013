"""Figures of chapter 07's block-scaled fp8/fp4 numerics: a GEMM's error against K for a narrow
fp8 accumulator with and without promotion into fp32, and quantization error (SQNR) against the
bytes each block format stores per parameter.

Both take what they draw as plain numbers (the notebook computes them with the engines); they
compute nothing of their own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..validation import positive_int
from .errors import finish_error_vs_K
from .style import DASHES, SMALLEST_FONT_PT, axes_or_new, format_color, legend_below, line_color

__all__ = ["plot_promotion_vs_K", "plot_sqnr_vs_bytes", "promotion_label"]

_PROMOTION_MARKERS = ("o", "^", "D", "v", "P", "*", "<")  # "s" and "X" are fp32 and never promoted
_FORMAT_MARKERS = ("o", "s", "D", "^", "v", "P", "*", "X", "h")


def promotion_label(setting, accumulator_bits: int = 14) -> str:
    """The legend text of one accumulator setting: "fp32" (full fp32 accumulation), None (the
    narrow accumulator, never promoted) or N (promoted into fp32 every N products)."""
    if isinstance(setting, str):
        if setting != "fp32":
            raise ValueError(f"a setting is 'fp32', None or a positive int N (promote every N); got {setting!r}")
        return "fp32 accumulation"
    if setting is None:
        return f"{accumulator_bits}-bit acc, never promoted"
    n = positive_int("a promotion setting", setting, "promote every N; 'fp32' and None are the others")
    return f"{accumulator_bits}-bit acc, promoted every {n}"


#: Colours of the promotion intervals, shortest first: far apart in hue and in lightness, and none
#: of them a format's course colour (fp32 and e4m3 are the two other lines of the figure).
_PROMOTION_COLORS = ("#7570b3", "#e6ab02", "#a6761d", "#e7298a", "#17becf", "#666666")


def _promotion_styles(settings: list) -> dict:
    """(colour, line style, marker) per setting: fp32 in the fp32 colour, the never-promoted
    accumulator in the e4m3 colour, each promotion interval in its own colour, line style and
    marker (shortest interval first)."""
    ns = sorted(int(s) for s in settings if s is not None and not isinstance(s, str))
    shade = {n: _PROMOTION_COLORS[i % len(_PROMOTION_COLORS)] for i, n in enumerate(ns)}
    out = {}
    for s in settings:
        if isinstance(s, str):
            out[s] = (format_color("fp32"), "-", "s")
        elif s is None:
            out[s] = (format_color("e4m3fn"), "-", "X")
        else:
            i = ns.index(int(s))
            out[s] = (shade[int(s)], DASHES[1 + i % (len(DASHES) - 1)], _PROMOTION_MARKERS[i % len(_PROMOTION_MARKERS)])
    return out


def plot_promotion_vs_K(
    Ks: Sequence[int],
    errors: dict,
    ax=None,
    guides: dict | None = None,
    accumulator_bits: int = 14,
    legend_outside: bool = True,
    slopes: Sequence[float] = (),
):
    """Relative error against K on log-log axes, one line per accumulator setting.

    Ks: the K values (x axis). errors: setting -> one error per K, a setting being "fp32" (full
    fp32 accumulation), None (the narrow accumulator, never promoted) or an int N (promoted into
    fp32 every N products). Each setting has its own colour, line style and marker (see
    :func:`promotion_label` for the legend text). guides: label -> one value per K, reference
    levels drawn as wide pale bands. slopes: powers p of thin black guide lines ``c K**p`` drawn
    through the never-promoted setting's first point (0.5 for sqrt(K), 1 for K); needs the None
    setting. No two lines without markers share both a line style and a width.
    legend_outside: the legend under the axes (default), off the data.
    """
    ax = axes_or_new(ax, height_ratio=0.8)
    Ks = np.asarray(Ks, dtype=float)
    settings = list(errors)
    labels = {s: promotion_label(s, accumulator_bits) for s in settings}
    styles = _promotion_styles(settings)
    for s in settings:
        vals = np.asarray(errors[s], dtype=float)
        if vals.shape != Ks.shape:
            raise ValueError(f"errors[{s!r}] has {vals.size} values for {Ks.size} K values")
        color, ls, marker = styles[s]
        ax.plot(Ks, vals, ls, color=color, marker=marker, ms=5, lw=1.5, label=labels[s])
    # reference levels: wide, pale, solid bands behind the data (no line of the data is drawn so),
    # a shade each; the slope guides below are thin and black
    for i, (label, vals) in enumerate((guides or {}).items()):
        shade = str(0.72 - 0.12 * (i % 3))
        ax.plot(Ks, np.asarray(vals, dtype=float), "-", color=shade, lw=3.5, alpha=0.7, zorder=1, label=label)
    if slopes:
        if None not in errors:
            raise ValueError("slope guides are drawn through the never-promoted setting (None): add it to errors")
        y0 = float(np.asarray(errors[None], dtype=float)[0])
        for i, p in enumerate(slopes):
            name = {0.5: "sqrt(K)", 1.0: "K", 2.0: "K^2"}.get(float(p), f"K^{p:g}")
            ax.plot(
                Ks,
                y0 * (Ks / Ks[0]) ** float(p),
                (":", "-.", "--")[i % 3],
                color="black",
                lw=0.8,
                label=f"slope guide: grows like {name}",
            )
    return finish_error_vs_K(ax, legend_outside)


def plot_sqnr_vs_bytes(
    points: dict, ax=None, formats: dict | None = None, legend_outside: bool = True, dodge: float = 1.06
):
    """SQNR (dB) against bytes per parameter, one marker shape per format, one fill per series.

    points: format label -> (bytes per parameter, {series name: SQNR in dB}); every format has
    the same series (e.g. "no outliers", "with outliers"). The first series is drawn filled, the
    second hollow, further ones half-filled; a thin grey line joins one format's series. formats:
    label -> an element format name (its course colour) or a matplotlib colour; black when not
    given. The x axis is log base 2 (0.5, 1, 2 bytes are equally spaced). Formats with exactly the
    same bytes are drawn side by side, ``dodge`` (a factor) apart, so that neither hides the other,
    and a note under the axes says so: read their bytes from a table, not from the x position.
    Legend entries: one per format (marker), one per series (fill).
    """
    from matplotlib.lines import Line2D

    ax = axes_or_new(ax, height_ratio=1.0 if legend_outside else 0.65)
    if not points:
        raise ValueError("points is empty: give at least one format")
    series = list(next(iter(points.values()))[1])
    fills = ["full", "none", "left", "bottom", "right", "top"]
    if len(series) > len(fills):
        raise ValueError(f"at most {len(fills)} series, got {len(series)}")
    handles = []
    same = {}  # formats with equal bytes are drawn side by side, `dodge` apart (a factor on the log axis)
    for label, (nbytes, _) in points.items():
        same.setdefault(float(nbytes), []).append(label)
    for i, (label, (nbytes, sq)) in enumerate(points.items()):
        if list(sq) != series:
            raise ValueError(f"{label!r} has series {list(sq)}, the first format has {series}")
        color = line_color((formats or {}).get(label, "black"))
        marker = _FORMAT_MARKERS[i % len(_FORMAT_MARKERS)]
        ys = [float(sq[s]) for s in series]
        group = same[float(nbytes)]
        x = float(nbytes) * dodge ** (group.index(label) - (len(group) - 1) / 2)
        ax.plot([x] * len(ys), ys, "-", color="0.75", lw=1.0, zorder=1)
        for s, y, fill in zip(series, ys, fills):
            ax.plot(
                [x],
                [y],
                ls="none",
                marker=marker,
                ms=9,
                color=color,
                mec=color,
                mew=1.5,
                fillstyle=fill,
                markerfacecoloralt="white",
                zorder=3,
                label=f"{label}: {s}",
            )
        handles.append(Line2D([], [], ls="none", marker=marker, ms=8, color=color, label=label))
    for s, fill in zip(series, fills):
        handles.append(
            Line2D(
                [],
                [],
                ls="none",
                marker="o",
                ms=8,
                color="0.3",
                mec="0.3",
                fillstyle=fill,
                markerfacecoloralt="white",
                label=s,
            )
        )
    ax.set_xscale("log", base=2)
    xs = [float(v[0]) for v in points.values()]
    ticks = [t for t in (0.25, 0.375, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0) if min(xs) / 1.3 <= t <= max(xs) * 1.3]
    ax.set_xlim(min(xs) / 1.25, max(xs) * 1.25)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    dodged = [g for g in same.values() if len(g) > 1]
    note = ""
    if dodged:
        note = "\n(drawn side by side, same bytes: " + "; ".join(" = ".join(g) for g in dodged) + ")"
    ax.set_xlabel("bytes per parameter (scales included)" + note)
    ax.set_ylabel("SQNR (dB, higher is better)")
    ax.grid(True, which="major", alpha=0.3)
    if legend_outside:
        legend_below(ax, handles)
    else:
        ax.legend(handles=handles, fontsize=SMALLEST_FONT_PT, loc="best")
    return ax
