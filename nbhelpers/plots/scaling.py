"""Figures of quantization error against how a tensor is scaled (chapter 06): SQNR by the
granularity of the scales, one line style per element format, one panel per input tensor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .style import DASHES, format_color

__all__ = ["ELEMENT_MARKERS", "element_style", "plot_sqnr_by_granularity"]

#: A marker per element format (int8 is not a float format: black, with its own marker).
ELEMENT_MARKERS = {"int8": "o", "int4": "D", "e4m3fn": "s", "e5m2": "^", "e2m1fn": "v"}


def element_style(element: str, index: int = 0) -> dict:
    """Colour, marker and dash of an element format's line: the course colour of a float format
    (black for the integer ones), a marker per format, a dash per position ``index``."""
    color = "black" if element in ("int8", "int4") else format_color(element)
    return {"color": color, "marker": ELEMENT_MARKERS.get(element, "x"), "linestyle": DASHES[index % len(DASHES)]}


def plot_sqnr_by_granularity(
    sqnr: Mapping[str, Mapping[str, Sequence[float]]],
    granularities: Sequence[str],
    axes=None,
    ylabel: str = "SQNR (dB)",
):
    """SQNR against the granularity of the scales, one panel per tensor, one line per element format.

    sqnr: {panel title: {element format: one SQNR per granularity}}, e.g.
    {"no outliers": {"int8": [...], "e4m3fn": [...]}, "4 outlier channels": {...}}.
    granularities: the x tick labels, in the order of the values. axes: one Axes per panel, or None
    for a new figure (panels side by side, sharing the y axis). Returns the Axes (a list). The
    legend sits to the right of the last panel, off the data.
    """
    panels = list(sqnr)
    if not panels:
        raise ValueError("sqnr needs at least one panel: {panel title: {element: values}}")
    for title, series in sqnr.items():
        for element, values in series.items():
            if len(values) != len(granularities):
                raise ValueError(
                    f"panel {title!r}, {element!r}: {len(values)} values for {len(granularities)} granularities"
                )
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels) + 1.6, 4), sharey=True, squeeze=False)
        axes = list(axes[0])
    axes = list(np.atleast_1d(axes))
    if len(axes) != len(panels):
        raise ValueError(f"{len(panels)} panels need {len(panels)} Axes, got {len(axes)}")
    x = np.arange(len(granularities))
    for ax, title in zip(axes, panels):
        for i, (element, values) in enumerate(sqnr[title].items()):
            ax.plot(x, np.asarray(values, dtype=float), lw=1.5, ms=7, label=element, **element_style(element, i))
        ax.set_xticks(x)
        ax.set_xticklabels(granularities, rotation=20)
        ax.set_xlabel("granularity of the scales")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel(ylabel)
    axes[-1].legend(title="element format", fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return axes
