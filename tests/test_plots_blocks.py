"""Smoke and content tests of nbhelpers.plots.blocks (chapter 07's figures): each helper returns its
Axes, draws one line or marker set per entry with a distinct style, and refuses malformed input."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import legend_under_axes

from nbhelpers import plots
from nbhelpers.plots.blocks import promotion_label


def test_plot_promotion_vs_K_one_distinct_style_per_setting():
    Ks = [128, 1024, 16384]
    errs = {"fp32": [4e-8] * 3, None: [2e-4, 1e-3, 3e-3], 32: [3e-5] * 3, 128: [1e-4] * 3, 1024: [5e-4] * 3}
    ax = plots.plot_promotion_vs_K(Ks, errs, guides={"e4m3 inputs": [3e-2] * 3})
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert set(lines) == {promotion_label(s) for s in errs} | {"e4m3 inputs"}
    assert lines["fp32 accumulation"].get_color() == plots.format_color("fp32")
    assert lines["14-bit acc, never promoted"].get_color() == plots.format_color("e4m3fn")
    data = [lines[promotion_label(s)] for s in errs]
    styles = {(str(ln.get_color()), ln.get_linestyle(), ln.get_marker()) for ln in data}
    assert len(styles) == len(errs)  # no two settings look alike
    assert len({ln.get_marker() for ln in data}) == len(errs)
    np.testing.assert_array_equal(lines[promotion_label(128)].get_ydata(), [1e-4] * 3)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert legend_under_axes(ax)
    plt.close(ax.figure)
    # slope guides through the never-promoted line's first point, one per power
    ax = plots.plot_promotion_vs_K(Ks, errs, slopes=(0.5, 1.0))
    guides = {ln.get_label(): ln for ln in ax.lines if ln.get_label().startswith("slope guide")}
    assert set(guides) == {"slope guide: grows like sqrt(K)", "slope guide: grows like K"}
    np.testing.assert_allclose(guides["slope guide: grows like K"].get_ydata(), 2e-4 * np.array(Ks) / 128)
    np.testing.assert_allclose(
        guides["slope guide: grows like sqrt(K)"].get_ydata(), 2e-4 * np.sqrt(np.array(Ks) / 128)
    )
    with pytest.raises(ValueError, match="never-promoted"):
        plots.plot_promotion_vs_K(Ks, {32: [1, 2, 3]}, slopes=(1.0,))
    plt.close(ax.figure)
    # guides and slope guides together, as chapter 07 draws them: the lines without markers are
    # told apart by their style and width, not by a shade of grey (two thin dotted lines look alike)
    ax = plots.plot_promotion_vs_K(Ks, errs, guides={"e4m3 inputs": [3e-2] * 3}, slopes=(0.5, 1.0))
    plain = [ln for ln in ax.lines if ln.get_marker() in ("None", None, "")]
    assert len(plain) == 3
    looks = {(ln.get_linestyle(), ln.get_linewidth() >= 2) for ln in plain}
    assert len(looks) == len(plain), [(ln.get_label(), ln.get_linestyle(), ln.get_linewidth()) for ln in plain]
    plt.close(ax.figure)


def test_plot_promotion_vs_K_takes_an_axes_and_refuses_bad_input():
    fig, ax = plt.subplots()
    assert plots.plot_promotion_vs_K([1, 2], {None: [1, 2]}, ax=ax, accumulator_bits=10) is ax
    assert ax.lines[0].get_label() == "10-bit acc, never promoted"
    with pytest.raises(ValueError, match="2 K values"):
        plots.plot_promotion_vs_K([1, 2], {128: [1, 2, 3]}, ax=ax)
    for bad in ("fp16", 0, True, 1.5):
        with pytest.raises(ValueError, match="setting"):
            plots.plot_promotion_vs_K([1, 2], {bad: [1, 2]}, ax=ax)
    plt.close(fig)


def test_plot_sqnr_vs_bytes_one_marker_per_format_one_fill_per_series():
    pts = {
        "MXFP8": (1.03, {"plain": 30.6, "outliers": 29.0}),
        "MXFP4": (0.53, {"plain": 18.8, "outliers": 16.2}),
        "NVFP4": (0.5625, {"plain": 20.4, "outliers": 20.6}),
    }
    fmts = {"MXFP8": "e4m3fn", "MXFP4": "e2m1fn", "NVFP4": "e2m1fn"}
    ax = plots.plot_sqnr_vs_bytes(pts, formats=fmts)
    marks = {ln.get_label(): ln for ln in ax.lines if ln.get_marker() not in ("None", None, "")}
    assert set(marks) == {f"{f}: {s}" for f in pts for s in ("plain", "outliers")}
    assert marks["MXFP8: plain"].get_color() == plots.format_color("e4m3fn")
    assert marks["MXFP4: plain"].get_marker() != marks["NVFP4: plain"].get_marker()  # same colour, own marker
    assert marks["MXFP4: plain"].get_fillstyle() != marks["MXFP4: outliers"].get_fillstyle()
    assert marks["NVFP4: outliers"].get_xdata()[0] == 0.5625 and marks["NVFP4: outliers"].get_ydata()[0] == 20.6
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["MXFP8", "MXFP4", "NVFP4", "plain", "outliers"]
    assert ax.get_xscale() == "log" and legend_under_axes(ax)
    plt.close(ax.figure)
    # two formats with the same bytes are drawn apart, symmetrically about the true value
    ax = plots.plot_sqnr_vs_bytes({"a": (0.5, {"s": 18.0}), "b": (0.5, {"s": 18.1})}, dodge=1.1)
    xa, xb = (ln.get_xdata()[0] for ln in ax.lines if ln.get_marker() not in ("None", None, ""))
    assert xa != xb and xa * xb == pytest.approx(0.25)
    assert "drawn side by side, same bytes: a = b" in ax.get_xlabel()  # the shift is said, not hidden
    plt.close(ax.figure)


def test_plot_sqnr_vs_bytes_refuses_bad_input():
    fig, ax = plt.subplots()
    assert plots.plot_sqnr_vs_bytes({"a": (1.0, {"s": 10.0})}, ax=ax) is ax
    with pytest.raises(ValueError, match="empty"):
        plots.plot_sqnr_vs_bytes({}, ax=ax)
    with pytest.raises(ValueError, match="series"):
        plots.plot_sqnr_vs_bytes({"a": (1.0, {"s": 1.0}), "b": (2.0, {"t": 1.0})}, ax=ax)
    plt.close(fig)
