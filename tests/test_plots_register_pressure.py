"""plots.plot_register_pressure: three panels over one x axis (registers with the 255 cap, spill
stores and loads in two styles, resident warps with the 64 cap), each legend where its panel's
lines are not; bad input raises."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import legend_covers_no_line

from nbhelpers import plots


def _labels(ax):
    return {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}


def test_three_panels_with_caps_and_distinct_spill_styles():
    k = [0, 2, 4]
    axes = plots.plot_register_pressure(k, [32, 128, 255], [0, 0, 8], [0, 0, 4], [64, 16, 8])
    assert len(axes) == 3 and axes[0].get_shared_x_axes().joined(axes[0], axes[2])
    r, s, w = (_labels(ax) for ax in axes)
    np.testing.assert_array_equal(r["registers per thread (ptxas)"].get_ydata(), [32, 128, 255])
    assert "at most 255 per thread" in r and "at most 64 warps per SM" in w
    a, b = s["spill stores"], s["spill loads"]
    assert (a.get_color(), a.get_linestyle(), a.get_marker()) != (b.get_color(), b.get_linestyle(), b.get_marker())
    np.testing.assert_array_equal(w["resident warps per SM"].get_ydata(), [64, 16, 8])
    for ax in axes:  # legends off the data
        assert legend_covers_no_line(ax)
    plt.close(axes[0].figure)


def test_given_axes_are_used_and_bad_input_raises():
    fig, axes = plt.subplots(3, 1)
    assert list(plots.plot_register_pressure([1], [40], [0], [0], [48], axes=axes)) == list(axes)
    with pytest.raises(ValueError, match="registers has 1 values for 2 points"):
        plots.plot_register_pressure([1, 2], [40], [0, 0], [0, 0], [48, 40], axes=axes)
    with pytest.raises(ValueError, match="non-empty"):
        plots.plot_register_pressure([], [], [], [], [], axes=axes)
    with pytest.raises(ValueError, match="three Axes"):
        plots.plot_register_pressure([1], [40], [0], [0], [48], axes=axes[:2])
    plt.close(fig)
