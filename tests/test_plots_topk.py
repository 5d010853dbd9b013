"""Tests of nbhelpers.plots.topk (chapter 11's figure): one line per format in the course's colour
with a style of its own, the values drawn in percent at the k given, the legend off the data, bad
input refused."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import legend_under_axes
from matplotlib.colors import to_hex

from nbhelpers import plots
from nbhelpers.plots.style import format_color

KS = [1, 8, 50, 256]
CHANGED = {"bf16": [0.0, 0.125, 0.5, 0.75], "e4m3fn": [0.05, 0.7, 1.0, 1.0], "fp16": [0.0, 0.0, 0.02, 0.1]}


def test_one_distinct_line_per_format_with_the_values_in_percent():
    ax = plots.plot_topk_set_changes(KS, CHANGED, rows=128)
    lines = ax.get_lines()
    assert len(lines) == 3
    styles = {(ln.get_linestyle(), ln.get_marker()) for ln in lines}
    assert len(styles) == 3
    for ln, (fmt, frac) in zip(lines, CHANGED.items()):
        assert to_hex(ln.get_color()) == to_hex(format_color(fmt))
        np.testing.assert_array_equal(ln.get_xdata(), KS)
        np.testing.assert_allclose(ln.get_ydata(), 100 * np.array(frac))
    assert "128" in ax.get_ylabel()
    plt.close(ax.figure)


def test_legend_sits_under_the_axes():
    ax = plots.plot_topk_set_changes(KS, CHANGED, rows=16)
    assert legend_under_axes(ax)
    plt.close(ax.figure)


@pytest.mark.parametrize(
    "ks, changed, match",
    [
        ([], {"bf16": []}, "non-empty"),
        ([0, 1], {"bf16": [0, 0]}, "k >= 1"),
        (KS, {}, "at least one"),
        (KS, {"bf16": [0, 0]}, "2 fractions for 4"),
        (KS, {"bf16": [0, 0, 0, 1.5]}, r"\[0, 1\]"),
    ],
)
def test_bad_input_is_refused(ks, changed, match):
    with pytest.raises(ValueError, match=match):
        plots.plot_topk_set_changes(ks, changed, rows=4)
    plt.close("all")
