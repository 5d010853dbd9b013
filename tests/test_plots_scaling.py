"""Smoke and content tests of nbhelpers.plots.scaling (chapter 06): the SQNR-by-granularity figure
draws one series of markers (no joining lines: the granularities are categories) per element format
per panel, in distinct styles, shades the granularities an epilogue cannot apply, and keeps its
legend off the data."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from nbhelpers import plots
from nbhelpers.plots.scaling import element_style

GRANS = ["per-tensor", "per-row", "1x128"]
SQNR = {
    "no outliers": {"int8": [39.0, 42.0, 44.0], "e4m3fn": [31.5, 31.6, 31.8], "e5m2": [25.6, 25.6, 25.8]},
    "outliers": {"int8": [21.0, 27.0, 34.0], "e4m3fn": [31.6, 33.8, 35.6], "e5m2": [25.7, 27.7, 29.6]},
}


def test_plot_sqnr_by_granularity_draws_each_format_in_its_own_style():
    axes = plots.plot_sqnr_by_granularity(SQNR, GRANS)
    assert len(axes) == 2 and axes[0].figure is axes[1].figure
    for ax, panel in zip(axes, SQNR):
        lines = {ln.get_label(): ln for ln in ax.lines}
        assert set(lines) == set(SQNR[panel])
        for element, ln in lines.items():
            np.testing.assert_array_equal(ln.get_ydata(), SQNR[panel][element])
            np.testing.assert_array_equal(ln.get_xdata(), np.arange(len(GRANS)))
        styles = {(ln.get_color(), ln.get_marker()) for ln in ax.lines}
        assert len(styles) == len(lines)  # one distinct marker and colour per format
        assert len({ln.get_marker() for ln in ax.lines}) == len(lines)
        assert all(ln.get_linestyle() == "None" for ln in ax.lines)  # markers, no lines
        assert ax.get_title() == panel
    # the panels are stacked and share their x axis: the granularities are named under the last
    assert [t.get_text() for t in axes[-1].get_xticklabels()] == GRANS
    assert axes[-1].get_xlabel() and not axes[0].get_xlabel()
    assert lines["e4m3fn"].get_color() == plots.format_color("e4m3fn")
    assert lines["e5m2"].get_color() == plots.format_color("e5m2")
    plt.close("all")


def test_plot_sqnr_by_granularity_legend_is_outside_the_axes():
    axes = plots.plot_sqnr_by_granularity(SQNR, GRANS)
    fig = axes[0].figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    leg = axes[-1].get_legend()
    assert leg is not None and axes[0].get_legend() is None
    legend_box = leg.get_window_extent(renderer)
    for ax in axes:
        assert not legend_box.overlaps(ax.get_window_extent(renderer))
    plt.close(fig)


def test_plot_sqnr_by_granularity_on_given_axes_and_bad_input():
    fig, ax = plt.subplots()
    out = plots.plot_sqnr_by_granularity({"only": SQNR["outliers"]}, GRANS, axes=ax)
    assert out == [ax] and len(ax.lines) == 3
    with pytest.raises(ValueError, match="3 granularities"):
        plots.plot_sqnr_by_granularity({"p": {"int8": [1.0, 2.0]}}, GRANS, axes=ax)
    with pytest.raises(ValueError, match="2 panels need 2 Axes"):
        plots.plot_sqnr_by_granularity(SQNR, GRANS, axes=ax)
    with pytest.raises(ValueError, match="at least one panel"):
        plots.plot_sqnr_by_granularity({}, GRANS)
    plt.close("all")


def test_element_style_int8_black_floats_in_course_colour():
    assert element_style("int8")["color"] == "black"
    assert element_style("e4m3fn")["color"] == plots.format_color("e4m3fn")
    assert element_style("e5m2", 1)["linestyle"] != element_style("e4m3fn", 0)["linestyle"]


def test_plot_sqnr_by_granularity_shades_what_the_epilogue_cannot_do():
    grans = ["per-tensor", "per-row", "per-column"]
    data = {"p": {"int8": [1.0, 2.0, 3.0], "e4m3fn": [1.5, 1.6, 1.7]}}
    (ax,) = plots.plot_sqnr_by_granularity(data, grans, shade=["per-column"])
    spans = [p for p in ax.patches if p.get_hatch()]
    assert len(spans) == 1
    x0, x1 = spans[0].get_path().get_extents(spans[0].get_patch_transform()).intervalx
    assert x0 < 2 < x1 and x1 - x0 < 1  # around the per-column category only
    leg = ax.get_legend()
    texts = [t.get_text() for t in leg.get_texts()]
    assert texts[-1] == plots.scaling.NOT_IN_EPILOGUE and texts[:2] == ["int8", "e4m3fn"]
    (ax2,) = plots.plot_sqnr_by_granularity(data, grans)
    assert not [p for p in ax2.patches if p.get_hatch()]
    with pytest.raises(ValueError, match="not among the granularities"):
        plots.plot_sqnr_by_granularity(data, grans, shade=["per-block"])
    plt.close("all")
