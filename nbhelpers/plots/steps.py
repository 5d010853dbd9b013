"""Figures of a quantity against the step of a loop: a running sum against the terms added, a
training run's loss, the updates that changed nothing, the loss scale. One line per run or
format, coloured by the format that computes it; runs sharing a format get different dashes.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..accumulation import running_sum
from ..formats import FloatFormat, get_format
from .style import axes_or_new, dashes_by_color, format_color

__all__ = ["plot_running_sums", "plot_training_curves", "plot_unchanged_updates", "plot_loss_scale"]


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
    ax.legend(fontsize=8)
    return ax


def _result_list(results) -> list:
    """TrainResults from a list or a {label: TrainResult} mapping, with their labels."""
    if isinstance(results, dict):
        return list(results.items())
    return [(r.regime.name, r) for r in results]


def _styles_by_color(items) -> list:
    """(color, dash) per item: the course colour of each regime's compute format; lines that share
    a colour get successive dash styles."""
    colors = [format_color(r.regime.compute) for _, r in items]
    return list(zip(colors, dashes_by_color(colors)))


def plot_training_curves(results, ax=None, log: bool = True, mark_skipped: bool = True):
    """Loss per step of several training runs (``nbhelpers.training.TrainResult``).

    results: a list of results (labelled by regime name) or a {label: result} mapping. Colour:
    the regime's compute format; runs sharing a format get different dash styles. Steps that a
    loss scaler skipped are marked with a cross.
    """
    ax = axes_or_new(ax, figsize=(9, 4.5))
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
    ax.legend(fontsize=8, title="regime (final loss)", title_fontsize=8)
    return ax


def plot_unchanged_updates(results, ax=None):
    """Fraction of nonzero updates that left the stored weight unchanged, per step."""
    ax = axes_or_new(ax, figsize=(9, 3.5))
    items = _result_list(results)
    for (label, r), (color, dash) in zip(items, _styles_by_color(items)):
        ax.plot(np.arange(1, r.unchanged.size + 1), r.unchanged, dash, color=color, lw=1.3, label=label)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("updates that left\nthe weight unchanged")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_loss_scale(result, ax=None, ceiling=None, fmt: FloatFormat | str = "fp16"):
    """The loss scale of each step of a run (log2), skipped steps marked with crosses.

    ceiling: optional per-step array, e.g. fmt.max / the largest |gradient| of a reference run:
    a scale above it overflows ``fmt`` (drawn as a grey line).
    """
    f = get_format(fmt)
    ax = axes_or_new(ax, figsize=(9, 3.5))
    steps = np.arange(1, result.scales.size + 1)
    ax.step(steps, np.log2(result.scales), where="post", color=format_color(f), lw=1.5,
            label=f"loss scale ({result.n_skipped} steps skipped)")
    if result.skipped.any():
        ax.plot(steps[result.skipped], np.log2(result.scales[result.skipped]), "x", color="black", ms=7,
                label="skipped step (inf/NaN gradient)")
    if ceiling is not None:
        ax.plot(steps, np.log2(np.asarray(ceiling, dtype=np.float64)), color="0.5", lw=1.0,
                label=f"{f.name} overflow above this")
    ax.set_xlabel("step")
    ax.set_ylabel("log2 loss scale")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax
