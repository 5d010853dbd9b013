"""Figures of a quantity against the step of a loop: a running sum against the terms added, a
training run's loss, the updates that changed nothing, the loss scale. One line per run or
format, each in a colour of its own: the first run of a format in the colour of the format that
computes it, the runs that share it in other colours and other dashes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..accumulation import running_sum
from ..formats import FloatFormat, get_format
from .style import SMALLEST_FONT_PT, axes_or_new, dashes_by_color, distinct_colors, format_color, legend_below, subplots

__all__ = [
    "plot_running_sums",
    "plot_training_curves",
    "plot_seed_spread",
    "plot_unchanged_updates",
    "plot_loss_scale",
    "plot_training_curves_vs_ref",
]


def plot_running_sums(x, formats: Sequence[FloatFormat | str], ax=None, logx: bool = True):
    """The running sum of the terms ``x`` (1-D) in each format, against the exact running sum.

    Each format's curve is its sequential sum with the terms first rounded to that format
    (``running_sum(x, fmt, in_fmt=fmt)``); the black line is the exact sum of the unrounded
    terms (float64 cumulative sum). A flat stretch is stagnation: every term lost.
    """
    terms = np.asarray(x, dtype=np.float64)
    if terms.ndim != 1:
        raise ValueError(f"x must be a 1-D array of terms, got shape {terms.shape}")
    ax = axes_or_new(ax)
    k = np.arange(1, terms.size + 1)
    for spec in formats:
        f = get_format(spec)
        ax.plot(k, running_sum(terms, f, in_fmt=f), color=format_color(f), lw=1.6, label=f.name)
    ax.plot(k, np.cumsum(terms), color="black", lw=1.0, ls="--", label="exact", zorder=3)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("number of terms added")
    ax.set_ylabel("running sum")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=SMALLEST_FONT_PT)
    return ax


def _result_list(results) -> list:
    """TrainResults from a list or a {label: TrainResult} mapping, with their labels."""
    if isinstance(results, dict):
        return list(results.items())
    return [(r.regime.name, r) for r in results]


def _regime_styles(formats) -> list[tuple[str, str]]:
    """(colour, dash) per regime, given each one's compute format: a colour of its own (the first
    regime of a format in the course colour of that format, the others in
    :data:`~nbhelpers.plots.style.EXTRA_COLORS`), and successive dashes for regimes of one format."""
    colors = [format_color(f) for f in formats]
    return list(zip(distinct_colors(colors), dashes_by_color(colors)))


def _styles_by_color(items) -> list:
    """(colour, dash) per (label, result) item: :func:`_regime_styles` of their compute formats."""
    return _regime_styles([r.regime.compute for _, r in items])


def plot_training_curves(results, ax=None, log: bool = True, mark_skipped: bool = True):
    """Loss per step of several training runs (``nbhelpers.training.TrainResult``).

    results: a list of results (labelled by regime name) or a {label: result} mapping. Colour:
    the regime's own (:func:`_regime_styles`); runs sharing a format get different dash styles. Steps that a
    loss scaler skipped are marked with a cross.
    """
    ax = axes_or_new(ax, height_ratio=0.6)
    items = _result_list(results)
    for (label, r), (color, dash) in zip(items, _styles_by_color(items)):
        steps = np.arange(1, r.losses.size + 1)
        ax.plot(steps, r.losses, dash, color=color, lw=1.5, label=f"{label} ({r.final_loss():.3g})")
        if mark_skipped and r.skipped.any():
            ax.plot(steps[r.skipped], r.losses[r.skipped], "x", color=color, ms=6, mew=1.5)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (MSE)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=SMALLEST_FONT_PT, title="regime (final loss)", title_fontsize=SMALLEST_FONT_PT)
    return ax


_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def plot_seed_spread(runs, ax=None, relative_to: str | None = None, log: bool = True, n_markers: int = 8):
    """Loss per step of several regimes, each trained on several seeds: median line, min-max band.

    runs: {label: [TrainResult, one per seed]} (``nbhelpers.training.train_seeds``). relative_to:
    a label of ``runs``; when given, each run's loss is divided step by step by that regime's loss
    on the same seed (the reference itself is drawn as a grey line at 1). Each regime gets its
    own line style: its own colour (the first regime of a compute format in that format's course
    colour), a dash per regime sharing a format, and its own marker; its band is in its colour.
    The legend sits outside the axes, under them.
    """
    ax = axes_or_new(ax, height_ratio=0.8)
    items = list(runs.items())
    if relative_to is not None and relative_to not in runs:
        raise KeyError(f"relative_to={relative_to!r} is not one of the runs: {', '.join(runs)}")
    ref = np.stack([r.losses for r in runs[relative_to]]) if relative_to is not None else None
    # styles are fixed over all of ``runs`` (reference included), so a regime keeps its style
    # whether or not it is the reference of this panel
    styles = _regime_styles([rs[0].regime.compute for _, rs in items])
    for i, ((label, rs), (color, dash)) in enumerate(zip(items, styles)):
        if label == relative_to:
            continue
        L = np.stack([r.losses for r in rs])
        if ref is not None:
            if L.shape != ref.shape:
                raise ValueError(f"{label!r} and {relative_to!r} must have the same seeds and steps")
            L = L / ref
        steps = np.arange(1, L.shape[1] + 1)
        every = max(1, L.shape[1] // n_markers)
        ax.fill_between(steps, L.min(axis=0), L.max(axis=0), color=color, alpha=0.12, lw=0)
        ax.plot(
            steps,
            np.median(L, axis=0),
            dash,
            color=color,
            lw=1.4,
            marker=_MARKERS[i % len(_MARKERS)],
            ms=5,
            markevery=(i * every // len(items), every),
            mfc="white",
            label=f"{label}",
        )
    if ref is not None:
        ax.axhline(1.0, color="0.45", lw=1.2, label=f"{relative_to} (reference)")
        ax.set_ylabel(f"loss / {relative_to} loss, same seed")
    else:
        ax.set_ylabel("training loss (MSE)")
    if log:
        ax.set_yscale("log")
    n = len(items[0][1]) if items else 0
    ax.set_xlabel("step")
    ax.grid(True, which="major", alpha=0.3)
    legend_below(ax, title=f"median of {n} seeds, band: min to max", title_fontsize=SMALLEST_FONT_PT)
    return ax


def plot_training_curves_vs_ref(
    results, ref: str, axes=None, mark_skipped: bool = True, ratio_ylim: tuple[float, float] | None = None
):
    """Two stacked panels: the loss per step (log scale) and the loss divided by the loss of the run
    labelled ``ref``, step by step, so that runs that overlap on the first panel come apart.

    results: a {label: TrainResult} mapping that holds ``ref``. One style per run: a colour of its
    own (:func:`_regime_styles`), runs sharing a format get successive dash styles; steps skipped by a
    loss scaler are marked with crosses. The legend sits under the bottom panel, off the data.
    axes: two Axes (top, bottom), or None for a new figure. ratio_ylim: optional (low, high)
    of the ratio panel (linear), to see the runs near 1; a run that ends outside it is named at the
    panel's edge with its final loss over the reference's (``TrainResult.final_loss``). Without
    it the ratio axis is logarithmic. Returns the two Axes.
    """
    if ref not in results:
        raise KeyError(f"reference run {ref!r} is not among the results: {', '.join(results)}")
    if axes is None:
        _, axes = subplots(2, 1, height_ratio=1.15, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    top, bottom = axes
    plot_training_curves(results, ax=top, mark_skipped=mark_skipped)
    top.get_legend().remove()
    top.set_xlabel("")
    ref_losses = results[ref].losses
    items = _result_list(results)
    for (label, r), (color, dash) in zip(items, _styles_by_color(items)):
        steps = np.arange(1, r.losses.size + 1)
        ratio = r.losses / ref_losses
        bottom.plot(steps, ratio, dash, color=color, lw=1.5)
        if mark_skipped and r.skipped.any():
            bottom.plot(steps[r.skipped], ratio[r.skipped], "x", color=color, ms=6, mew=1.5)
    if ratio_ylim is None:
        bottom.set_yscale("log")
    else:
        bottom.set_ylim(*ratio_ylim)
        for (label, r), (color, _) in zip(items, _styles_by_color(items)):
            last = r.losses[-1] / ref_losses[-1]
            if not ratio_ylim[0] <= last <= ratio_ylim[1]:
                y = ratio_ylim[1] if last > ratio_ylim[1] else ratio_ylim[0]
                final = r.final_loss() / results[ref].final_loss()
                bottom.annotate(
                    f"{label}: off scale (final loss {final:.2f}x)",
                    xy=(r.losses.size, y),
                    xytext=(-6, -12 if y == ratio_ylim[1] else 4),
                    textcoords="offset points",
                    ha="right",
                    fontsize=SMALLEST_FONT_PT,
                    color=color,
                )
    bottom.set_xlabel("step")
    bottom.set_ylabel(f"loss / loss of {ref}")
    bottom.grid(True, which="both", alpha=0.3)
    legend_below(bottom, *top.get_legend_handles_labels(), title="run (final loss)", title_fontsize=SMALLEST_FONT_PT)
    return top, bottom


def plot_unchanged_updates(results, ax=None):
    """Fraction of nonzero updates that left the stored weight unchanged, per step."""
    ax = axes_or_new(ax, height_ratio=0.5)
    items = _result_list(results)
    for (label, r), (color, dash) in zip(items, _styles_by_color(items)):
        ax.plot(np.arange(1, r.unchanged.size + 1), r.unchanged, dash, color=color, lw=1.3, label=label)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("updates that left\nthe weight unchanged")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=SMALLEST_FONT_PT)
    return ax


def plot_loss_scale(result, ax=None, ceiling=None, fmt: FloatFormat | str = "fp16"):
    """The loss scale of each step of a run (log2), skipped steps marked with crosses.

    ceiling: optional per-step array, e.g. fmt.max / the largest |gradient| of a reference run:
    a scale above it overflows ``fmt`` (drawn as a grey line).
    """
    f = get_format(fmt)
    ax = axes_or_new(ax, height_ratio=0.5)
    steps = np.arange(1, result.scales.size + 1)
    ax.step(
        steps,
        np.log2(result.scales),
        where="post",
        color=format_color(f),
        lw=1.5,
        label=f"loss scale ({result.n_skipped} steps skipped)",
    )
    if result.skipped.any():
        ax.plot(
            steps[result.skipped],
            np.log2(result.scales[result.skipped]),
            "x",
            color="black",
            ms=7,
            label="skipped step (inf/NaN gradient)",
        )
    if ceiling is not None:
        ax.plot(
            steps,
            np.log2(np.asarray(ceiling, dtype=np.float64)),
            color="0.5",
            lw=1.0,
            label=f"{f.name} overflow above this",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("log2 loss scale")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=SMALLEST_FONT_PT, loc="lower right")
    return ax
