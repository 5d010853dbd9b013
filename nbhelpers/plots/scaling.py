"""Figures of quantization error against how a tensor is scaled (chapter 06): SQNR by the
granularity of the scales, one marker and colour per element format (categories, so no lines
join them), one panel per input tensor, and the granularities a GEMM epilogue cannot apply shaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .style import DASHES, format_color, legend_below, subplots

__all__ = ["ELEMENT_MARKERS", "NOT_IN_EPILOGUE", "element_style", "plot_sqnr_by_granularity"]

#: A marker per element format (int8 is not a float format: black, with its own marker).
ELEMENT_MARKERS = {"int8": "o", "int4": "D", "e4m3fn": "s", "e5m2": "^", "e2m1fn": "v"}


def element_style(element: str, index: int = 0) -> dict:
    """Colour, marker and dash of an element format's line: the course colour of a float format
    (black for the integer ones), a marker per format, a dash per position ``index``."""
    color = "black" if element in ("int8", "int4") else format_color(element)
    return {"color": color, "marker": ELEMENT_MARKERS.get(element, "x"), "linestyle": DASHES[index % len(DASHES)]}


#: The default label of the shaded granularities.
NOT_IN_EPILOGUE = "scale along K:\nnot in the epilogue"


def plot_sqnr_by_granularity(
    sqnr: Mapping[str, Mapping[str, Sequence[float]]],
    granularities: Sequence[str],
    axes=None,
    ylabel: str = "SQNR (dB)",
    shade: Sequence[str] = (),
    shade_label: str = NOT_IN_EPILOGUE,
):
    """SQNR against the granularity of the scales, one panel per tensor, one marker per element format.

    sqnr: {panel title: {element format: one SQNR per granularity}}, e.g.
    {"no outliers": {"int8": [...], "e4m3fn": [...]}, "4 outlier channels": {...}}.
    granularities: the x tick labels, in the order of the values; categories, so the points are
    markers without lines. shade: granularities to hatch in every panel (e.g. ["per-column"], a
    scale that varies along K and cannot go in the epilogue), labelled ``shade_label`` in the
    legend. axes: one Axes per panel, or None for a new figure (panels one above the other, sharing
    both axes). Returns the Axes (a list). The legend sits under the last panel, off the data.
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
    stacked = axes is None
    if stacked:
        _, axes = subplots(
            len(panels), 1, height_ratio=0.42 * len(panels) + 0.25, sharex=True, sharey=True, squeeze=False
        )
        axes = list(axes[:, 0])
    axes = list(np.atleast_1d(axes))
    if len(axes) != len(panels):
        raise ValueError(f"{len(panels)} panels need {len(panels)} Axes, got {len(axes)}")
    unknown = [g for g in shade if g not in granularities]
    if unknown:
        raise ValueError(f"shade names {unknown}, not among the granularities {list(granularities)}")
    x = np.arange(len(granularities))
    for ax, title in zip(axes, panels):
        for g in shade:
            i = list(granularities).index(g)
            ax.axvspan(
                i - 0.42,
                i + 0.42,
                facecolor="0.93",
                edgecolor="0.55",
                hatch="//",
                lw=0.0,
                zorder=0,
                label=shade_label if g == shade[0] else None,
            )
        for i, (element, values) in enumerate(sqnr[title].items()):
            style = element_style(element, i)
            ax.plot(
                x,
                np.asarray(values, dtype=float),
                linestyle="none",
                marker=style["marker"],
                color=style["color"],
                ms=8,
                mec="white",
                mew=0.6,
                label=element,
                zorder=3,
            )
        ax.set_xlim(-0.6, len(granularities) - 0.4)
        ax.set_xticks(x)
        ax.set_xticklabels(granularities, rotation=20)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        if stacked or ax is axes[0]:
            ax.set_ylabel(ylabel)
        if not stacked or ax is axes[-1]:
            ax.set_xlabel("granularity of the scales")
    handles, labels = axes[-1].get_legend_handles_labels()
    order = [i for i, lab in enumerate(labels) if lab != shade_label] + [
        i for i, lab in enumerate(labels) if lab == shade_label
    ]
    legend_below(axes[-1], [handles[i] for i in order], [labels[i] for i in order], title="element format")
    return axes
