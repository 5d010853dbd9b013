"""Plot helpers. Each takes ``ax=None`` (a new figure when None), returns the Axes, never shows.

One colour per format across the whole course: :data:`FORMAT_COLORS`. Chapters add their
plot functions at the end of this file, under a comment naming the chapter.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .formats import FloatFormat, finite_values, get_format, ulp
from .rounding import round_to

FORMAT_COLORS = {
    "fp32": "#1f77b4",
    "tf32": "#17becf",
    "bf16": "#d62728",
    "fp16": "#ff7f0e",
    "e4m3fn": "#2ca02c",
    "e5m2": "#9467bd",
    "e2m3fn": "#8c564b",
    "e3m2fn": "#e377c2",
    "e2m1fn": "#7f7f7f",
    "e8m0fnu": "#bcbd22",
}
_FIELD_COLORS = {"sign": "#c7c7c7", "exponent": "#6baed6", "mantissa": "#fdae6b"}


def _axes(ax, figsize=(8, 4)):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


def format_color(fmt: FloatFormat | str) -> str:
    """The course colour of a format (grey-blue for custom ones)."""
    return FORMAT_COLORS.get(get_format(fmt).name, "#4a6d8c")


def plot_bit_layouts(formats: Iterable[FloatFormat | str], ax=None):
    """One row per format: its sign, exponent and mantissa fields as boxes, one per bit."""
    fmts = [get_format(f) for f in formats]
    ax = _axes(ax, figsize=(10, 0.55 * len(fmts) + 1))
    for row, f in enumerate(fmts):
        y = len(fmts) - 1 - row
        pos = 0
        for field, width in (("sign", int(f.signed)), ("exponent", f.exp_bits), ("mantissa", f.man_bits)):
            for _ in range(width):
                ax.add_patch(_rect(pos, y, _FIELD_COLORS[field]))
                pos += 1
            if width:
                ax.text(pos - width / 2, y + 0.4, f"{field[0]}{width}" if field != "sign" else "s",
                        ha="center", va="center", fontsize=8)
        ax.text(-0.6, y + 0.4, f.name, ha="right", va="center", fontsize=10, color=format_color(f),
                fontweight="bold")
        ax.text(pos + 0.6, y + 0.4, f"{f.bits} bits", ha="left", va="center", fontsize=9)
    ax.set_xlim(-6, 37)
    ax.set_ylim(-0.3, len(fmts) + 0.1)
    ax.axis("off")
    handles = [_rect(0, 0, c) for c in _FIELD_COLORS.values()]
    ax.legend(handles, list(_FIELD_COLORS), loc="lower right", ncol=1, frameon=False, fontsize=8)
    return ax


def _rect(x, y, color):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 0.92, 0.8, facecolor=color, edgecolor="black", linewidth=0.4)


def plot_relative_spacing(formats: Sequence[FloatFormat | str], ax=None, lo: float = 2.0**-30,
                          hi: float = 2.0**20, points_per_binade: int = 64):
    """Spacing of each format's grid divided by |x|, over |x| from ``lo`` to ``hi`` (log-log).

    In the normal range the curve saw-tooths between eps/2 and eps; below the smallest normal
    it climbs (subnormals keep a fixed spacing); past max the format has no values.
    """
    ax = _axes(ax)
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
    ax.legend(fontsize=8, ncol=2)
    return ax


def plot_value_line(formats: Sequence[FloatFormat | str], ax=None):
    """Every nonnegative finite value of small formats on a number line (linear scale)."""
    fmts = [get_format(f) for f in formats]
    ax = _axes(ax, figsize=(9, 0.6 * len(fmts) + 1))
    for row, f in enumerate(fmts):
        v = finite_values(f, nonnegative=True)
        y = len(fmts) - 1 - row
        ax.plot(v, np.full_like(v, y), "|", ms=14, color=format_color(f))
        ax.text(-0.02 * v.max(), y, f"{f.name} ({v.size} values >= 0)", ha="right", va="center",
                fontsize=9)
    ax.set_yticks([])
    ax.set_xlabel("value")
    ax.set_ylim(-0.7, len(fmts) - 0.3)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    return ax


def plot_rounding_modes(fmt: FloatFormat | str, lo: float, hi: float, rng: np.random.Generator,
                        ax=None, n: int = 801, draws: int = 200):
    """round(x) against x on [lo, hi] for each rounding mode, with the grid of ``fmt``.

    Stochastic rounding is shown as the mean of ``draws`` independent roundings (it tracks x)
    plus one single draw (scattered dots).
    """
    f = get_format(fmt)
    ax = _axes(ax, figsize=(8, 5))
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
    ax.legend(fontsize=8, loc="upper left")
    return ax


# ---- chapter 03

_DASHES = ("-", "--", ":", "-.")


def plot_error_vs_K(Ks: Sequence[int], errors: dict, formats: dict, ax=None, guides: dict | None = None):
    """Relative error against K on log-log axes, one line per entry of ``errors``.

    Ks: the K values (x axis). errors: label -> one error per K. formats: label -> the format
    whose course colour the line takes (say, its accumulator or input format), or a plain
    matplotlib colour ("black") for a line that stands for an algorithm rather than a format;
    lines sharing a colour get different dash styles. guides: label -> one value per K, drawn as
    thin grey reference lines (napkin-math estimates such as sqrt(K) * u).
    """
    ax = _axes(ax)
    Ks = np.asarray(Ks, dtype=float)
    used: dict[str, int] = {}
    for label, errs in errors.items():
        if label not in formats:
            raise KeyError(f"no format given for the line {label!r}: add it to formats")
        color = _line_color(formats[label])
        style = _DASHES[used.get(color, 0) % len(_DASHES)]
        used[color] = used.get(color, 0) + 1
        ax.plot(Ks, np.asarray(errs, dtype=float), style, color=color, marker="o", ms=3.5, lw=1.5,
                label=label)
    for i, (label, vals) in enumerate((guides or {}).items()):
        ax.plot(Ks, np.asarray(vals, dtype=float), _DASHES[(i + 1) % len(_DASHES)], color="0.55",
                lw=0.9, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("K (length of each dot product)")
    ax.set_ylabel("relative error  ||C - C_ref||_F / ||C_ref||_F")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return ax


def _line_color(spec) -> str:
    """The course colour of a format name, or ``spec`` itself if it is a matplotlib colour."""
    from matplotlib.colors import is_color_like

    try:
        return format_color(spec)
    except (KeyError, ValueError, TypeError):
        if is_color_like(spec):
            return spec
        raise ValueError(f"{spec!r} is neither a format name nor a matplotlib colour") from None


_GPU_MARKERS = ("X", "o", "s", "D", "^", "v", "P", "*")


def _gpu_series_color(series: dict) -> str:
    if series.get("in_fmt") == "fp32" and series.get("input_precision") == "tf32":
        return format_color("tf32")
    return format_color(series.get("in_fmt", "fp32"))


def plot_recorded_gpu_errors(runs: Sequence[dict], ax=None, metric: str = "rel_error",
                             methods: Sequence[str] | None = None):
    """GPU measurements as large markers (black edges), to lay over a CPU figure.

    runs: results as returned by ``nbhelpers.kernels.gemm.recorded_gpu_runs`` (or one live run in
    the same layout: ``{"meta": {"gpu", "date", "script"}, "series": [...]}``). metric: the key of
    each series to plot (``"rel_error"`` or ``"rel_error_acc"``). methods: which series (all when
    None). A note under the axes names each run's GPU, date and script.
    """
    ax = _axes(ax)
    notes = []
    for r, run in enumerate(runs):
        meta = run["meta"]
        for i, s in enumerate(run["series"]):
            if methods is not None and s["method"] not in methods:
                continue
            label = f"GPU: {s['method']}" + (f" ({meta['gpu']})" if len(runs) > 1 else "")
            ax.plot(s["K"], s[metric], ls="none", marker=_GPU_MARKERS[i % len(_GPU_MARKERS)],
                    ms=8 - 2 * (r % 2), mec="black", mew=0.8, color=_gpu_series_color(s), label=label)
        notes.append(f"GPU points: {meta['gpu']}, {str(meta['date'])[:10]}, {meta['script']}")
    if notes:
        ax.annotate("\n".join(notes), xy=(0, 0), xycoords="axes fraction", xytext=(0, -40),
                    textcoords="offset points", va="top", fontsize=8)
        ax.legend(fontsize=8, loc="best")
    return ax


# ---- chapter 02


_ORDER_MARKERS = {"sequential": "o", "pairwise": "s", "blocked": "^", "kahan": "D"}


def plot_running_sums(x, formats: Sequence[FloatFormat | str], ax=None, logx: bool = True):
    """The running sum of the terms ``x`` (1-D) in each format, against the exact running sum.

    Each format's curve is its sequential sum with the terms first rounded to that format
    (``running_sum(x, fmt, in_fmt=fmt)``); the black line is the exact sum of the unrounded
    terms (float64 cumulative sum). A flat stretch is stagnation: every term lost.
    """
    from .accumulation import running_sum

    terms = np.asarray(x, dtype=np.float64)
    if terms.ndim != 1:
        raise ValueError(f"x must be a 1-D array of terms, got shape {terms.shape}")
    ax = _axes(ax)
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


def plot_addend_loss(formats: Sequence[FloatFormat | str], rng: np.random.Generator, ax=None,
                     n: int = 3000, max_log2_ratio: float = 30.0):
    """The part of an addend that one rounded addition loses, against the ratio |s| / |a|.

    For each format: n random pairs (s, a) of values of that format, s of either sign in
    [1, 2) times a random power of two, |s| / |a| log-uniform in [1, 2**max_log2_ratio]; dots
    are :func:`nbhelpers.accumulation.addend_loss` (1: a lost; additions that happen to be exact,
    loss 0, fall off the bottom of the log scale). The solid
    line is the napkin estimate u * |s| / |a| (an addition's error is at most u |s + a|),
    capped at 1; the dotted vertical line is 2**p, p = man_bits + 1 significant bits.
    """
    from .accumulation import addend_loss

    ax = _axes(ax)
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
    ax.legend(fontsize=8, loc="lower right")
    return ax


def plot_sum_to_term_ratio(series: dict, formats: Sequence[FloatFormat | str], ax=None):
    """How large the running sum grows against a typical term, for several data sets.

    series: label -> terms of shape (T, n) (T independent sums). For each, the curve is the
    median over the T rows of |S_k| (exact partial sums, float64 cumsum) divided by the median
    |term|, against k. Horizontal dotted lines at 2**p for each format: above its line a
    typical term is smaller than half a spacing of the running sum and is lost.
    """
    ax = _axes(ax)
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
        ax.axhline(2.0 ** (f.man_bits + 1), color=format_color(f), ls=":", lw=1.5,
                   label=f"2^p, {f.name} (p = {f.man_bits + 1})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("k (terms added)")
    ax.set_ylabel("|running sum| / typical |term|")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return ax


def plot_errors_vs_length(lengths, errors: dict, ax=None, bounds: Sequence[FloatFormat | str] = ("bf16", "fp32")):
    """Median relative error of summation methods against the number of terms n.

    errors: {SumMethod: array of len(lengths)} (:func:`nbhelpers.accumulation.errors_vs_length`).
    Colour: the method's accumulator format; marker: its order; dashed: stochastic rounding.
    Thin grey-coloured lines per format in ``bounds``: the a-priori bound (n - 1) u (dotted)
    and the typical random-error size sqrt(n) u (dash-dot). Zero errors are not drawn.
    """
    ax = _axes(ax, figsize=(8, 5))
    n = np.asarray(lengths, dtype=np.float64)
    for m, e in errors.items():
        e = np.asarray(e, dtype=np.float64)
        y = np.where(e > 0, e, np.nan)
        ls = "--" if m.rounding.value == "stochastic" else "-"
        ax.plot(n, y, ls=ls, marker=_ORDER_MARKERS.get(m.order.value, "o"), ms=4, lw=1.4,
                color=format_color(m.acc), label=m.label)
    for spec in bounds:
        f = get_format(spec)
        u = f.unit_roundoff
        ax.plot(n, (n - 1) * u, color=format_color(f), ls=":", lw=1.0, alpha=0.7, label=f"(n-1)u, {f.name}")
        ax.plot(n, np.sqrt(n) * u, color=format_color(f), ls="-.", lw=1.0, alpha=0.7, label=f"sqrt(n)u, {f.name}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=10)
    ax.set_xlabel("n (terms)")
    ax.set_ylabel("median relative error")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    return ax


# ---- chapter 04


def _result_list(results) -> list:
    """TrainResults from a list or a {label: TrainResult} mapping, with their labels."""
    if isinstance(results, dict):
        return list(results.items())
    return [(r.regime.name, r) for r in results]


def _styles_by_color(items) -> list:
    """(color, dash) per item: the course colour of each regime's compute format; lines that share
    a colour get successive dash styles."""
    dashes = ("-", "--", ":", "-.")
    used: dict[str, int] = {}
    out = []
    for _, r in items:
        color = format_color(r.regime.compute)
        out.append((color, dashes[used.get(color, 0) % len(dashes)]))
        used[color] = used.get(color, 0) + 1
    return out


def plot_training_curves(results, ax=None, log: bool = True, mark_skipped: bool = True):
    """Loss per step of several training runs (``nbhelpers.mixed_precision.TrainResult``).

    results: a list of results (labelled by regime name) or a {label: result} mapping. Colour:
    the regime's compute format; runs sharing a format get different dash styles. Steps that a
    loss scaler skipped are marked with a cross.
    """
    ax = _axes(ax, figsize=(9, 4.5))
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
    ax = _axes(ax, figsize=(9, 3.5))
    items = _result_list(results)
    for (label, r), (color, dash) in zip(items, _styles_by_color(items)):
        ax.plot(np.arange(1, r.unchanged.size + 1), r.unchanged, dash, color=color, lw=1.3, label=label)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("updates that left\nthe weight unchanged")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_update_survival(weights, updates, fmt: FloatFormat | str = "bf16", ax=None, max_points: int = 3000):
    """|update| against |weight| (log-log), with the line below which ``fmt`` loses the update.

    weights, updates: arrays of the same size (one training step's weights and Adam's updates).
    The staircase is half the spacing of ``fmt`` above |w| (an update below it rounds away);
    grey guides mark |w| / 2**(m+1) and |w| / 2**(m+2). Points whose update would be lost are
    drawn in the format's colour. At most ``max_points`` evenly strided points are drawn.
    """
    f = get_format(fmt)
    ax = _axes(ax, figsize=(7, 5))
    w = np.abs(np.asarray(weights, dtype=np.float64)).ravel()
    u = np.abs(np.asarray(updates, dtype=np.float64)).ravel()
    if w.shape != u.shape:
        raise ValueError(f"weights ({w.size}) and updates ({u.size}) must have the same size")
    keep = (w > 0) & (u > 0)
    w, u = w[keep], u[keep]
    w_f = np.abs(round_to(w, f))
    lost = u < ulp(w_f, f) / 2
    stride = max(1, w.size // max_points)
    ax.scatter(w[::stride][~lost[::stride]], u[::stride][~lost[::stride]], s=4, color="0.55",
               label=f"update survives in {f.name} ({np.mean(~lost):.0%})")
    ax.scatter(w[::stride][lost[::stride]], u[::stride][lost[::stride]], s=4, color=format_color(f),
               label=f"update lost in {f.name} ({np.mean(lost):.0%})")
    lo, hi = np.log2(w.min()), np.log2(w.max())
    grid = np.exp2(np.linspace(np.floor(lo), np.ceil(hi), 2000))
    ax.step(grid, ulp(grid, f) / 2, where="post", color=format_color(f), lw=1.2,
            label=f"half the {f.name} spacing at |w|")
    for k, dash in ((f.man_bits + 1, "--"), (f.man_bits + 2, ":")):
        ax.plot(grid, grid / 2.0**k, dash, color="0.35", lw=0.9, label=f"|w| / 2^{k}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("|weight|")
    ax.set_ylabel("|update|")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax


# ---- chapter 05


def plot_gradient_histogram(grads, fmt: FloatFormat | str = "fp16", scale: float = 1.0, ax=None,
                            bins: int = 90):
    """Histogram of log2|g * scale| for one or more gradient arrays, with the limits of ``fmt``.

    grads: an array, or a {label: array} mapping (each drawn as its own histogram). Zeros are
    left out. Vertical lines: the smallest subnormal, the smallest normal and the largest value
    of ``fmt``; the band below half the smallest subnormal (where values flush to zero) and the
    subnormal band are shaded in the format's colour.
    """
    f = get_format(fmt)
    ax = _axes(ax, figsize=(9, 4))
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


def plot_loss_scale(result, ax=None, ceiling=None, fmt: FloatFormat | str = "fp16"):
    """The loss scale of each step of a run (log2), skipped steps marked with crosses.

    ceiling: optional per-step array, e.g. fmt.max / the largest |gradient| of a reference run:
    a scale above it overflows ``fmt`` (drawn as a grey line).
    """
    f = get_format(fmt)
    ax = _axes(ax, figsize=(9, 3.5))
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
