"""The course's figure style: one colour per format everywhere, axes handling, dash styles.

Every plot function of :mod:`nbhelpers.plots` takes its colours from here, so bf16 is the same
red in chapter 01's bit layouts and in chapter 05's loss-scale curve.
"""

from __future__ import annotations


from ..formats import FloatFormat, get_format

__all__ = [
    "FORMAT_COLORS",
    "format_color",
    "line_color",
    "axes_or_new",
    "DASHES",
    "dashes_by_color",
    "EXTRA_COLORS",
    "distinct_colors",
]

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


DASHES = ("-", "--", ":", "-.")

# colours for the second, third, ... line of one format in a figure that compares methods on it:
# none of them is a format's colour
EXTRA_COLORS = ("#000000", "#6a3d9a", "#1b9e77", "#a6761d", "#e7298a", "#66a61e")


def axes_or_new(ax, figsize=(8, 4)):
    """``ax`` itself, or the Axes of a new figure of ``figsize`` when ``ax`` is None."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


def format_color(fmt: FloatFormat | str) -> str:
    """The course colour of a format (grey-blue for custom ones)."""
    return FORMAT_COLORS.get(get_format(fmt).name, "#4a6d8c")


def line_color(spec) -> str:
    """The course colour of a format name, or ``spec`` itself if it is a matplotlib colour."""
    from matplotlib.colors import is_color_like

    try:
        return format_color(spec)
    except (KeyError, ValueError, TypeError):
        if is_color_like(spec):
            return spec
        raise ValueError(f"{spec!r} is neither a format name nor a matplotlib colour") from None


def dashes_by_color(colors) -> list[str]:
    """A dash style per line: lines that share a colour get successive styles from :data:`DASHES`."""
    used: dict[str, int] = {}
    out = []
    for color in colors:
        out.append(DASHES[used.get(color, 0) % len(DASHES)])
        used[color] = used.get(color, 0) + 1
    return out


def distinct_colors(colors) -> list[str]:
    """One colour per line, all different: the first line of each colour keeps it (the course
    colour of its format), each later line that repeats a colour takes the next of
    :data:`EXTRA_COLORS`."""
    seen: set[str] = set()
    extra = 0
    out = []
    for color in colors:
        if color in seen:
            color = EXTRA_COLORS[extra % len(EXTRA_COLORS)]
            extra += 1
        seen.add(color)
        out.append(color)
    return out
