"""Figures of a mixture-of-experts layer's expert GEMMs (chapter 10): the routing and the permuted
buffer of a small example, drawn so that a reader can follow every row; the time of the expert
GEMMs against the number of experts, per implementation, beside the napkin line; the padding
waste and the dropped tokens of a padded batch against the capacity factor.

The routing figure takes the router's choices and lays them out with :mod:`nbhelpers.moe`'s own
permutation, offsets and tile schedule (the same functions the kernels use), so the picture is
the data path, not a drawing of it. The other two take what they draw as plain numbers (the
notebook measures or computes them: :mod:`nbhelpers.moe_timing`, :func:`nbhelpers.moe.capacity`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..moe import Routing, expert_offsets, permutation, tile_schedule
from .style import COLUMN_IN, SMALLEST_FONT_PT, axes_or_new, legend_below, subplots

__all__ = ["EXPERT_COLORS", "plot_routing", "plot_expert_gemm_times", "plot_capacity_tradeoff"]

# one colour per expert in the small examples (qualitative, not the formats' colours)
EXPERT_COLORS = ("#66c2a5", "#fc8d62", "#8da0cb", "#e78ac3", "#a6d854", "#ffd92f", "#e5c494", "#b3b3b3")

# one style per implementation: colour, line style, marker, filled
METHOD_STYLES = {
    "loop": ("#d62728", "-", "o", "full"),
    "bmm": ("#1f77b4", "-", "s", "full"),
    "padded": ("#9467bd", "-.", "D", "none"),
    "grouped_mm": ("#2ca02c", "--", "^", "full"),
    "triton": ("#222222", ":", "v", "none"),
}
METHOD_LABELS = {
    "loop": "loop of torch.matmul (one call per expert)",
    "bmm": "one torch.bmm (equal groups)",
    "padded": "padded batch (gather, bmm, scatter)",
    "grouped_mm": "torch grouped_mm (one call)",
    "triton": "Triton grouped kernel (one launch)",
}


def _legend(ax, outside: bool, **kw) -> None:
    if outside:
        legend_below(ax, **kw)
    else:
        ax.legend(fontsize=SMALLEST_FONT_PT, loc="best", **kw)


def _expert_color(e: int) -> str:
    return EXPERT_COLORS[e % len(EXPERT_COLORS)]


def plot_routing(routing: Routing, block_m: int, axes=None):
    """The routing of a small example and the buffer it becomes, side by side.

    Left: tokens (rows) against experts (columns); a cell is coloured in its expert's colour when
    the token picks that expert, and says which of the token's k slots it is and its router
    weight. Right: ``x_perm``, the T k rows sorted by expert (:func:`nbhelpers.moe.permutation`),
    each row coloured by its expert and labelled with its token and slot; thick lines at the
    offsets, written as ``offsets[e]``; an empty expert is a named line with no rows. Beside the
    buffer, the tiles of :func:`nbhelpers.moe.tile_schedule` at ``block_m`` rows, one bracket per
    tile, the rows a tile covers past its expert's end hatched (the kernel masks them).

    axes: two Axes, or None for a new figure. Returns the two Axes. Meant for a few tokens (up
    to about 16) and experts (up to 8 colours, then they repeat).
    """
    from matplotlib.patches import Rectangle

    if not isinstance(routing, Routing):
        raise TypeError(f"routing must be a nbhelpers.moe.Routing, got {type(routing).__name__}")
    T, k, E = routing.num_tokens, routing.top_k, routing.num_experts
    if T == 0:
        raise ValueError("nothing to draw: the routing has no tokens")
    if axes is None:
        height = 0.42 * max(T * k, 6) + 1.4
        _, axes = subplots(1, 2, height_ratio=height / COLUMN_IN, gridspec_kw={"width_ratios": [max(E, 2), 7]})
    axes = list(np.atleast_1d(axes))
    if len(axes) != 2:
        raise ValueError(f"plot_routing draws two panels: give two Axes, got {len(axes)}")
    ax_r, ax_b = axes
    perm = permutation(routing.expert_ids)
    off = expert_offsets(routing.expert_ids, E)
    sched = tile_schedule(off, block_m)

    # left: who picks whom
    for t in range(T):
        for s in range(k):
            e = int(routing.expert_ids[t, s])
            ax_r.add_patch(Rectangle((e, t), 1, 1, facecolor=_expert_color(e), edgecolor="white", lw=2))
            ax_r.text(
                e + 0.5,
                t + 0.5,
                f"slot {s}\nw={routing.weights[t, s]:.2f}",
                ha="center",
                va="center",
                fontsize=SMALLEST_FONT_PT,
            )
    ax_r.set_xlim(0, E)
    ax_r.set_ylim(T, 0)
    ax_r.set_xticks(np.arange(E) + 0.5)
    ax_r.set_xticklabels([f"e{e}" for e in range(E)])
    ax_r.set_yticks(np.arange(T) + 0.5)
    ax_r.set_yticklabels([f"token {t}" for t in range(T)])
    ax_r.set_xticks(np.arange(E + 1), minor=True)
    ax_r.set_yticks(np.arange(T + 1), minor=True)
    ax_r.grid(True, which="minor", color="0.85", lw=0.8)
    ax_r.tick_params(which="minor", length=0)
    ax_r.set_xlabel("expert")
    ax_r.set_title(f"routing: {T} tokens, top-{k} of {E} experts", fontsize=10)

    # right: the permuted buffer, its offsets and its tiles
    rows = T * k
    for r in range(rows):
        t, s = divmod(int(perm[r]), k)
        e = int(routing.expert_ids[t, s])
        ax_b.add_patch(Rectangle((0, r), 3, 1, facecolor=_expert_color(e), edgecolor="white", lw=1))
        ax_b.text(1.5, r + 0.5, f"token {t} (slot {s}) -> e{e}", ha="center", va="center", fontsize=SMALLEST_FONT_PT)
    ax_b.text(-0.15, -0.25, "offsets", ha="right", va="bottom", fontsize=SMALLEST_FONT_PT, color="0.3")
    for e in range(E + 1):
        y = off[e]
        ax_b.plot([-0.1, 3.0], [y, y], color="black", lw=1.8)
        same = [j for j in range(E + 1) if off[j] == y]  # several offsets on one line: one label
        if e == same[0]:
            empty = [f"e{j}" for j in same[:-1]]  # offsets[j] == offsets[j + 1]: expert j has no rows
            note = f"\n({', '.join(empty)}: no rows)" if empty else ""
            ax_b.text(
                -0.15,
                y,
                ", ".join(f"[{j}]" for j in same) + f" = {y}" + note,
                ha="right",
                va="center",
                fontsize=SMALLEST_FONT_PT,
            )
    for i in range(sched.num_tiles):
        start, end, e = int(sched.row_start[i]), int(sched.row_end[i]), int(sched.expert[i])
        x0 = 3.6 + 0.35 * (i % 2)  # alternate columns so that adjacent tiles stay apart
        ax_b.add_patch(Rectangle((x0, start), 0.3, block_m, facecolor="none", edgecolor=_expert_color(e), lw=2))
        live = min(block_m, end - start)
        if live < block_m:
            ax_b.add_patch(
                Rectangle((x0, start + live), 0.3, block_m - live, facecolor="none", edgecolor="0.5", hatch="///", lw=0)
            )
        ax_b.text(x0 + 0.32, start + 0.35, f"tile {i}", fontsize=SMALLEST_FONT_PT, ha="left", va="center")
    ax_b.set_xlim(-1.6, 5.2)
    ax_b.set_ylim(max(rows, int(sched.row_start.max(initial=0)) + block_m) + 0.2, -0.6)
    ax_b.set_xticks([1.5, 3.95])
    ax_b.set_xticklabels(["x_perm (rows by expert)", f"tiles of\nBLOCK_M = {block_m}"], fontsize=SMALLEST_FONT_PT)
    ax_b.set_yticks([])
    for side in ("top", "right", "left"):
        ax_b.spines[side].set_visible(False)
    ax_b.set_title(f"permuted buffer: {rows} rows, {sched.num_tiles} tiles (hatched: masked rows)", fontsize=10)
    return axes


def plot_expert_gemm_times(
    E_values: Sequence[int],
    seconds: dict,
    napkin: dict | None = None,
    ax=None,
    title: str | None = None,
    legend_outside: bool = True,
):
    """Time of one call of the expert GEMMs against the number of experts E (same total work at
    every E), log-log, in milliseconds.

    seconds: method -> one time per E; a method named like :data:`METHOD_STYLES`' keys ("loop",
    "bmm", "padded", "grouped_mm", "triton") gets its course style and label, any other name a
    grey style of its own. napkin: label -> one predicted time per E, drawn as thin dotted grey
    lines without markers (at most 3). The legend sits under the axes by default.
    """
    ax = axes_or_new(ax, height_ratio=0.85)
    x = np.asarray(E_values, dtype=float)
    if x.ndim != 1 or x.size == 0 or np.any(x < 1):
        raise ValueError(f"E_values must be a non-empty list of values >= 1, got {E_values!r}")
    if not seconds:
        raise ValueError("nothing to draw: seconds is empty")
    if len(napkin or {}) > 3:
        raise ValueError("at most 3 napkin lines")
    extra = iter(("#8c564b", "#17becf", "#bcbd22", "#7f7f7f"))
    for i, (method, vals) in enumerate(seconds.items()):
        y = np.asarray(vals, dtype=float)
        if y.shape != x.shape:
            raise ValueError(f"{method!r} has {y.size} times for {x.size} values of E")
        if np.any(~np.isfinite(y)) or np.any(y <= 0):
            raise ValueError(f"{method!r}: times must be positive and finite")
        if method in METHOD_STYLES:
            color, ls, marker, fill = METHOD_STYLES[method]
            label = METHOD_LABELS[method]
        else:
            color, ls, marker, fill, label = next(extra, "0.3"), "-", "P", "full", method
        ax.plot(x, y * 1e3, ls, color=color, marker=marker, fillstyle=fill, ms=7, lw=1.8, label=label, zorder=3)
    for j, (label, vals) in enumerate((napkin or {}).items()):
        y = np.asarray(vals, dtype=float)
        if y.shape != x.shape:
            raise ValueError(f"napkin {label!r} has {y.size} values for {x.size} values of E")
        if np.any(~np.isfinite(y)) or np.any(y <= 0):
            raise ValueError(f"napkin {label!r}: times must be positive and finite")
        ax.plot(x, y * 1e3, ls=(0, (1, 1 + 2 * j)), color=("0.35", "0.55", "0.7")[j], lw=1.6, label=label, zorder=2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{int(v)}" for v in x])
    ax.minorticks_off()
    from matplotlib.ticker import FuncFormatter, LogLocator

    # within about a decade, ticks at 1, 1.5, 2, 3, 4, 5 and 7 of each power of ten, so that a
    # narrow range (0.3 to 1.7 ms) still shows several labels; wider, 1, 2 and 5. The axis starts at
    # the last tick at or below the lowest point, so that every curve has a labelled tick under it.
    drawn = [line.get_ydata() for line in ax.get_lines()]
    low, high = min(map(np.min, drawn)), max(map(np.max, drawn))
    subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0) if high / low < 12 else (1.0, 2.0, 5.0)
    locator = LogLocator(base=10, subs=subs)
    ax.yaxis.set_major_locator(locator)
    below = [t for t in locator.tick_values(low / 10, high) if t <= low * (1 + 1e-9)]
    if below:
        ax.set_ylim(bottom=max(below) * 0.97)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("experts E (same rows, same FLOPs, split E ways)")
    ax.set_ylabel("ms per call (median)")
    ax.grid(True, which="major", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    _legend(ax, legend_outside)
    return ax


def plot_capacity_tradeoff(
    capacity_factors: Sequence[float],
    padding_fraction: Sequence[float],
    dropped_fraction: Sequence[float],
    ax=None,
    title: str | None = None,
    legend_outside: bool = True,
):
    """What a padded batch costs at each capacity factor: the fraction of its computed rows that
    are zero padding (wasted FLOPs) and the fraction of the routed rows it drops, both in percent
    against the capacity factor. Two series, each with its own colour, line style and marker; a
    thin vertical line at factor 1 (capacity = the mean load). The legend sits under the axes.
    """
    ax = axes_or_new(ax, height_ratio=0.7)
    x = np.asarray(capacity_factors, dtype=float)
    if x.ndim != 1 or x.size == 0 or np.any(~np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"capacity_factors must be a non-empty list of positive numbers, got {capacity_factors!r}")
    series = {
        "padding: share of computed rows that are zeros": (padding_fraction, "#9467bd", "-", "o"),
        "dropped: share of routed rows not computed": (dropped_fraction, "#d62728", "--", "s"),
    }
    for label, (vals, color, ls, marker) in series.items():
        y = np.asarray(vals, dtype=float)
        if y.shape != x.shape:
            raise ValueError(f"{len(y)} values for {x.size} capacity factors")
        if np.any(~np.isfinite(y)) or np.any(y < 0) or np.any(y > 1):
            raise ValueError("fractions must lie in [0, 1]")
        ax.plot(x, 100 * y, ls, color=color, marker=marker, ms=6, lw=1.8, label=label)
    if x.min() <= 1 <= x.max():
        ax.axvline(1.0, color="0.6", lw=0.8, ls=":", label="factor 1: capacity = mean load")
    ax.set_xlabel("capacity factor (rows per expert / mean rows per expert)")
    ax.set_ylabel("percent")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    _legend(ax, legend_outside)
    return ax
