"""Tests of nbhelpers.plots.roofline (chapter 09's figures): the roofline draws the memory roof
and each compute roof where the formula puts them, one distinct style per series and per roof,
the legend off the data; the occupancy figure draws one step line per series; bad input is
refused."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import legend_under_axes

from nbhelpers import plots


def _by_label(ax) -> dict:
    return {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}


def test_plot_roofline_roofs_sit_where_the_formula_puts_them():
    bw = 4.0e12  # bytes/s
    pts = {"bf16": ([1.0, 10.0, 1000.0], [0.004, 0.04, 400.0]), "fp8": ([2.0, 20.0], [0.008, 0.08])}
    ax = plots.plot_roofline(
        pts, {"bf16 dense": 400.0, "fp8 dense": 800.0}, bw, colors={"bf16": "bf16", "fp8": "e4m3fn"}
    )
    lines = _by_label(ax)
    mem = next(ln for label, ln in lines.items() if label.startswith("memory roof"))
    x, y = mem.get_xdata(), mem.get_ydata()
    np.testing.assert_allclose(y, bw * x / 1e12)  # TFLOP/s = bandwidth * intensity
    roof = next(ln for label, ln in lines.items() if label.startswith("bf16 dense"))
    assert roof.get_xdata()[0] == pytest.approx(100.0)  # ridge: 400e12 / 4e12 FLOP/B
    assert set(roof.get_ydata()) == {400.0}
    assert "ridge at 100 FLOP/B" in roof.get_label()
    roof8 = next(ln for label, ln in lines.items() if label.startswith("fp8 dense"))
    assert roof8.get_xdata()[0] == pytest.approx(200.0) and roof8.get_linestyle() != roof.get_linestyle()
    assert lines["bf16"].get_color() == plots.format_color("bf16")
    assert lines["fp8"].get_color() == plots.format_color("e4m3fn")
    assert lines["bf16"].get_marker() != lines["fp8"].get_marker()
    np.testing.assert_array_equal(lines["fp8"].get_ydata(), [0.008, 0.08])
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    lo, hi = ax.get_xlim()
    assert lo <= 1.0 and hi >= 1000.0  # every point and ridge inside the axes
    assert legend_under_axes(ax)
    plt.close(ax.figure)


def test_plot_roofline_takes_an_axes_and_refuses_bad_input():
    fig, ax = plt.subplots()
    assert plots.plot_roofline({"a": ([1.0], [1.0])}, {"peak": 10.0}, 1e12, ax=ax, legend_outside=False) is ax
    with pytest.raises(ValueError, match="peaks is empty"):
        plots.plot_roofline({"a": ([1.0], [1.0])}, {}, 1e12, ax=ax)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="bandwidth"):
            plots.plot_roofline({"a": ([1.0], [1.0])}, {"p": 1.0}, bad, ax=ax)
    with pytest.raises(ValueError, match="2 intensities for 1"):
        plots.plot_roofline({"a": ([1.0, 2.0], [1.0])}, {"p": 1.0}, 1e12, ax=ax)
    with pytest.raises(ValueError, match="positive"):
        plots.plot_roofline({"a": ([0.0], [1.0])}, {"p": 1.0}, 1e12, ax=ax)
    plt.close(fig)


def test_plot_occupancy_one_step_line_per_series():
    regs = [32, 64, 128, 255]
    warps = {"any": [64, 32, 16, 8], "programs of 8 warps": [64, 32, 16, 8]}
    ax = plots.plot_occupancy(regs, warps, max_warps=64)
    lines = _by_label(ax)
    assert set(lines) == {"any", "programs of 8 warps", "at most 64 warps per SM"}
    a, b = lines["any"], lines["programs of 8 warps"]
    assert (a.get_color(), a.get_linestyle()) != (b.get_color(), b.get_linestyle())
    assert a.get_drawstyle() == "steps-post"
    np.testing.assert_array_equal(b.get_ydata(), [64, 32, 16, 8])
    assert legend_under_axes(ax)
    plt.close(ax.figure)
    fig, ax = plt.subplots()
    assert plots.plot_occupancy([1, 2], {"a": [2, 1]}, ax=ax) is ax
    with pytest.raises(ValueError, match="3 values for 2"):
        plots.plot_occupancy([1, 2], {"a": [1, 2, 3]}, ax=ax)
    with pytest.raises(ValueError, match="empty"):
        plots.plot_occupancy([1, 2], {}, ax=ax)
    plt.close(fig)


def test_plot_roofline_memory_roof_stops_at_the_top_roof_and_labels_points():
    ax = plots.plot_roofline(
        {"a": ([1.0, 1000.0], [1.0, 100.0]), "b": ([2.0], [2.0])},
        {"p": 100.0, "q": 200.0},
        1e12,
        labels={"a": ["M=1", "M=99"]},
    )
    mem = next(ln for ln in ax.lines if ln.get_label().startswith("memory roof"))
    assert mem.get_xdata().max() == pytest.approx(200.0) and mem.get_ydata().max() == pytest.approx(200.0)
    assert [t.get_text() for t in ax.texts] == ["M=1", "M=99"]
    lines = _by_label(ax)
    assert lines["a"].get_markerfacecolor() != "none" and lines["b"].get_markerfacecolor() == "none"
    with pytest.raises(ValueError, match="1 texts for 2 points"):
        plots.plot_roofline({"a": ([1.0, 2.0], [1.0, 2.0])}, {"p": 1.0}, 1e12, labels={"a": ["x"]})
    plt.close("all")


def test_plot_roofline_markers_and_unjoined_series():
    pts = {"layer": ([1.0, 10.0], [1.0, 10.0]), "experts": ([2.0, 20.0, 200.0], [2.0, 20.0, 100.0])}
    ax = plots.plot_roofline(
        pts,
        {"p": 100.0},
        1e12,
        markers={"experts": "*"},
        joined={"experts": False},
        labels={"layer": ["a", "b"], "experts": ["c", "d", "e"]},
    )
    lines = _by_label(ax)
    first, other = ax.texts[0], ax.texts[2]
    assert first.xyann[1] < 0 < other.xyann[1]  # below the first series' points, above the others'
    assert (first.get_ha(), other.get_ha()) == ("left", "right")
    assert lines["experts"].get_marker() == "*" and lines["experts"].get_linestyle() in ("None", "none", "")
    assert lines["layer"].get_linestyle() == "-" and lines["layer"].get_marker() == "o"  # defaults kept
    np.testing.assert_array_equal(lines["experts"].get_xdata(), [2.0, 20.0, 200.0])
    with pytest.raises(ValueError, match="not in points"):
        plots.plot_roofline(pts, {"p": 100.0}, 1e12, joined={"nope": False})
    with pytest.raises(ValueError, match="not in points"):
        plots.plot_roofline(pts, {"p": 100.0}, 1e12, markers={"nope": "x"})
    plt.close("all")
