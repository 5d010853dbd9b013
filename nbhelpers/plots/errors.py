"""Figures of error against a size: a GEMM's error against K (emulated, and recorded GPU points
laid over it), a sum's error against its length n. Log-log axes, one line per method, coloured by
the format that sets the error, with napkin-math guides in grey.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..formats import FloatFormat, get_format
from .style import (
    DASHES,
    SMALLEST_FONT_PT,
    axes_or_new,
    dashes_by_color,
    distinct_colors,
    format_color,
    legend_below,
    line_color,
    under_axes,
)

__all__ = ["plot_error_vs_K", "plot_recorded_gpu_errors", "plot_errors_vs_length"]


def plot_error_vs_K(
    Ks: Sequence[int],
    errors: dict,
    formats: dict,
    ax=None,
    guides: dict | None = None,
    dashes: dict | None = None,
    legend_outside: bool = False,
):
    """Relative error against K on log-log axes, one line per entry of ``errors``.

    Ks: the K values (x axis). errors: label -> one error per K. formats: label -> the format
    whose course colour the line takes (say, its accumulator or input format), or a plain
    matplotlib colour ("black") for a line that stands for an algorithm rather than a format;
    lines sharing a colour get different dash styles. guides: label -> one value per K, drawn as
    thin grey reference lines (napkin-math estimates such as sqrt(K) * u). dashes: label -> a
    matplotlib line style for that line, to keep one method's style the same across figures; the
    other lines of its colour get the remaining styles. legend_outside: put the legend under the
    axes, off the data (default: matplotlib's "best" spot inside).
    """
    ax = axes_or_new(ax, height_ratio=0.8 if legend_outside else 0.6)
    Ks = np.asarray(Ks, dtype=float)
    for label in errors:
        if label not in formats:
            raise KeyError(f"no format given for the line {label!r}: add it to formats")
    colors = [line_color(formats[label]) for label in errors]
    styles = _dashes_with_fixed(list(errors), colors, dashes or {})
    for (label, errs), color, style in zip(errors.items(), colors, styles):
        ax.plot(Ks, np.asarray(errs, dtype=float), style, color=color, marker="o", ms=3.5, lw=1.5, label=label)
    for i, (label, vals) in enumerate((guides or {}).items()):
        ax.plot(Ks, np.asarray(vals, dtype=float), DASHES[(i + 1) % len(DASHES)], color="0.55", lw=0.9, label=label)
    return finish_error_vs_K(ax, legend_outside)


def finish_error_vs_K(ax, legend_outside: bool):
    """The axes of an error-against-K figure: log2 K, log error, labels, grid, legend (outside the
    data when ``legend_outside``). Shared by the GEMM-error figures of chapters 03 and 07."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("K (length of each dot product)")
    ax.set_ylabel("relative error\n||C - C_ref||_F / ||C_ref||_F")
    ax.grid(True, which="major", alpha=0.3)
    if legend_outside:
        legend_below(ax)
    else:
        ax.legend(fontsize=SMALLEST_FONT_PT, loc="best")
    return ax


def _dashes_with_fixed(labels: list, colors: list, fixed: dict) -> list[str]:
    """A dash style per line: ``fixed[label]`` where given, else the next style of
    :data:`DASHES` that no other line of the same colour has taken."""
    unknown = set(fixed) - set(labels)
    if unknown:
        raise KeyError(f"dashes names lines that are not plotted: {sorted(unknown)}")
    if not fixed:
        return dashes_by_color(colors)
    taken: dict[str, set] = {}
    for label, color in zip(labels, colors):
        if label in fixed:
            taken.setdefault(color, set()).add(fixed[label])
    free = {c: [d for d in DASHES if d not in t] or list(DASHES) for c, t in taken.items()}
    used: dict[str, int] = {}
    out = []
    for label, color in zip(labels, colors):
        if label in fixed:
            out.append(fixed[label])
            continue
        pool = free.get(color, list(DASHES))
        out.append(pool[used.get(color, 0) % len(pool)])
        used[color] = used.get(color, 0) + 1
    return out


_GPU_MARKERS = ("X", "o", "s", "D", "^", "v", "P", "*")


def _gpu_series_color(series: dict) -> str:
    if series.get("in_fmt") == "fp32" and series.get("input_precision") == "tf32":
        return format_color("tf32")
    return format_color(series.get("in_fmt", "fp32"))


def plot_recorded_gpu_errors(
    runs: Sequence[dict],
    ax=None,
    metric: str = "rel_error",
    methods: Sequence[str] | None = None,
    legend_outside: bool = False,
):
    """GPU measurements as large markers (black edges), to lay over a CPU figure.

    runs: results as returned by ``nbhelpers.results.recorded_gpu_runs`` (or one live run in
    the same layout: ``{"meta": {"gpu", "date", "script"}, "series": [...]}``). metric: the key of
    each series to plot (``"rel_error"`` or ``"rel_error_acc"``). methods: which series (all when
    None). A note under the axes (under the legend, when that is there) names each run's GPU, date
    and script. legend_outside: redraw the legend under the axes (as :func:`plot_error_vs_K` does
    with the same flag).
    """
    ax = axes_or_new(ax, height_ratio=0.85 if legend_outside else 0.65)
    notes = []
    for r, run in enumerate(runs):
        meta = run["meta"]
        for i, s in enumerate(run["series"]):
            if methods is not None and s["method"] not in methods:
                continue
            label = f"GPU: {s['method']}" + (f" ({meta['gpu']})" if len(runs) > 1 else "")
            ax.plot(
                s["K"],
                s[metric],
                ls="none",
                marker=_GPU_MARKERS[i % len(_GPU_MARKERS)],
                ms=8 - 2 * (r % 2),
                mec="black",
                mew=0.8,
                color=_gpu_series_color(s),
                label=label,
            )
        notes.append(f"GPU points: {meta['gpu']}, {str(meta['date'])[:10]}, {meta['script']}")
    if notes:
        if legend_outside:
            legend_below(ax)
        else:
            ax.legend(fontsize=SMALLEST_FONT_PT, loc="best")
        ax.annotate(
            "\n".join(notes),
            xy=(0, 0),
            xycoords=under_axes(ax),
            xytext=(0, -4),
            textcoords="offset points",
            va="top",
            fontsize=SMALLEST_FONT_PT,
        )
    return ax


_ORDER_MARKERS = {"sequential": "o", "pairwise": "s", "blocked": "^", "kahan": "D"}

# style="method": a marker per method in order, and colours for the second, third, ... method of
# one accumulator format (the first keeps the course colour of its format)
_METHOD_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_BOUND_GREYS = ("0.35", "0.65", "0.5", "0.8")


def _method_styles(methods) -> list[tuple[str, str]]:
    """(colour, marker) per method, all distinct: first method of a format in the format's colour."""
    colors = distinct_colors([format_color(m.acc) for m in methods])
    return [(color, _METHOD_MARKERS[i % len(_METHOD_MARKERS)]) for i, color in enumerate(colors)]


def plot_errors_vs_length(
    lengths, errors: dict, ax=None, bounds: Sequence[FloatFormat | str] = ("bf16", "fp32"), style: str = "format"
):
    """Median relative error of summation methods against the number of terms n.

    errors: {SumMethod: array of len(lengths)} (:func:`nbhelpers.experiments.errors_vs_length`).
    style="format" (default): colour = the method's accumulator format, marker = its order,
    dashed = stochastic rounding; thin lines in each format's colour for ``bounds``: the a-priori
    bound (n - 1) u (dotted) and the typical random-error size sqrt(n) u (dash-dot); legend in
    the upper left. style="method": every method its own colour and marker (the first method of
    each format keeps the format's colour; dashed = stochastic rounding), the bound lines in
    shades of grey, and the legend outside the axes, under them. Zero errors are not drawn
    (a log axis cannot show them), so a line starts at the first n with a nonzero median.
    """
    if style not in ("format", "method"):
        raise ValueError(f"style must be 'format' or 'method', got {style!r}")
    ax = axes_or_new(ax, height_ratio=0.72 if style == "format" else 0.9)
    n = np.asarray(lengths, dtype=np.float64)
    methods = list(errors)
    styles = _method_styles(methods) if style == "method" else None
    for i, (m, e) in enumerate(errors.items()):
        e = np.asarray(e, dtype=np.float64)
        y = np.where(e > 0, e, np.nan)
        ls = "--" if m.rounding.value == "stochastic" else "-"
        if styles is None:
            color, marker = format_color(m.acc), _ORDER_MARKERS.get(m.order.value, "o")
        else:
            color, marker = styles[i]
        ax.plot(n, y, ls=ls, marker=marker, ms=4 if styles is None else 5, lw=1.4, color=color, label=m.label)
    for j, spec in enumerate(bounds):
        f = get_format(spec)
        u = f.unit_roundoff
        color = format_color(f) if styles is None else _BOUND_GREYS[j % len(_BOUND_GREYS)]
        alpha = 0.7 if styles is None else 1.0
        ax.plot(n, (n - 1) * u, color=color, ls=":", lw=1.0, alpha=alpha, label=f"(n-1)u, {f.name}")
        ax.plot(n, np.sqrt(n) * u, color=color, ls="-.", lw=1.0, alpha=alpha, label=f"sqrt(n)u, {f.name}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=10)
    ax.set_xlabel("n (terms)")
    ax.set_ylabel("median relative error")
    ax.grid(True, which="major", alpha=0.3)
    if styles is None:
        ax.legend(fontsize=SMALLEST_FONT_PT, ncol=2, loc="upper left")
    else:
        legend_below(ax)
    return ax
