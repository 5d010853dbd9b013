"""Tests of nbhelpers.plots.throughput (chapter 08's figures): each helper returns its Axes, draws
one distinctly styled line per series with the values it was given, keeps the legend off the data,
and refuses malformed input; copy_bandwidth_points picks the right row per access pattern."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import legend_under_axes

from nbhelpers import plots
from nbhelpers.memory_access import cache_line_efficiency, sectors_touched
from nbhelpers.plots.throughput import copy_bandwidth_points


def _style(line):
    return (
        str(line.get_color()),
        line.get_linestyle(),
        line.get_marker(),
        line.get_fillstyle(),
        str(line.get_markerfacecolor()),
    )


def test_plot_efficiency_vs_stride_one_distinct_style_per_series():
    strides = [1, 2, 4, 8, 16, 32]
    gpu = [sectors_touched(stride=s).efficiency for s in strides]
    cpu = [cache_line_efficiency(s) for s in strides]
    measured = [1.0, 0.55, 0.3, 0.16, 0.09, 0.07]
    ax = plots.plot_efficiency_vs_stride(
        strides, {"measured": measured}, {"64-byte lines": cpu, "32-byte sectors": gpu}
    )
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert set(lines) == {"measured", "64-byte lines", "32-byte sectors"}
    assert len({_style(ln) for ln in lines.values()}) == 3
    assert lines["measured"].get_linestyle() == "-"  # measured solid, predictions not
    assert lines["64-byte lines"].get_linestyle() != "-" and lines["32-byte sectors"].get_linestyle() != "-"
    np.testing.assert_array_equal(lines["32-byte sectors"].get_ydata(), gpu)
    np.testing.assert_array_equal(lines["measured"].get_xdata(), strides)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "1/16" and labels[-1] == "1"  # fractions, down to the smallest value
    assert legend_under_axes(ax)
    plt.close(ax.figure)


def test_plot_efficiency_vs_stride_ticks_at_the_predicted_plateaus():
    strides = [1, 2, 4, 8, 16, 32, 64]
    copy = {
        "lines": [2 / (1 + 1 / cache_line_efficiency(s)) for s in strides],
        "pairs": [2 / (1 + 1 / cache_line_efficiency(s, line_bytes=128)) for s in strides],
    }
    ax = plots.plot_efficiency_vs_stride(
        strides, {"m": [1, 0.6, 0.37, 0.22, 0.14, 0.11, 0.096]}, copy, yticks="predicted"
    )
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["2/33", "2/17", "2/9", "2/5", "2/3", "1"]  # 2/17 no longer reads as 1/8
    np.testing.assert_allclose(ax.get_yticks(), [2 / 33, 2 / 17, 2 / 9, 2 / 5, 2 / 3, 1])
    with pytest.raises(ValueError, match="yticks"):
        plots.plot_efficiency_vs_stride(strides, {"m": copy["lines"]}, yticks="predicted", ax=ax)
    with pytest.raises(ValueError, match="yticks"):
        plots.plot_efficiency_vs_stride(strides, {}, copy, yticks="fractions", ax=ax)
    plt.close(ax.figure)


def test_plot_efficiency_vs_stride_takes_an_axes_and_refuses_bad_input():
    fig, ax = plt.subplots()
    assert plots.plot_efficiency_vs_stride([1, 2], {"m": [1, 0.5]}, ax=ax, legend_outside=False) is ax
    with pytest.raises(ValueError, match="3 values for 2 strides"):
        plots.plot_efficiency_vs_stride([1, 2], {"m": [1, 0.5, 0.25]}, ax=ax)
    with pytest.raises(ValueError, match="positive"):
        plots.plot_efficiency_vs_stride([1, 2], {"m": [1, 0.0]}, ax=ax)
    with pytest.raises(ValueError, match="nothing to draw"):
        plots.plot_efficiency_vs_stride([1, 2], {}, ax=ax)
    with pytest.raises(ValueError, match="strides"):
        plots.plot_efficiency_vs_stride([0, 2], {"m": [1, 0.5]}, ax=ax)
    plt.close(fig)


def _rows():
    """Rows as benchmarks/gpu_copy_bandwidth.py writes them (the keys the helper reads)."""

    def row(name, kernel, pattern, stride, bw, pred=None, peak=None):
        return {
            "name": name,
            "kernel": kernel,
            "pattern": pattern,
            "stride": stride,
            "bandwidth": bw,
            "predicted_bandwidth": pred,
            "predicted_at_peak": peak,
        }

    return [
        row("torch copy", "torch", "contiguous", 1, 4.0e12, 4.0e12, 4.8e12),
        row("copy BLOCK=1024", "triton", "contiguous", 1, 3.5e12, 4.0e12, 4.8e12),
        row("copy BLOCK=4096", "triton", "contiguous", 1, 3.8e12, 4.0e12, 4.8e12),
        row("strided 8", "triton", "strided", 8, 0.7e12, 0.89e12, 1.07e12),
        row("torch strided 8", "torch", "strided", 8, 0.6e12, 0.89e12, 1.07e12),
        row("strided 2", "triton", "strided", 2, 2.5e12, 2.67e12, 3.2e12),
        row("torch strided 2", "torch", "strided", 2, 2.4e12, 2.67e12, 3.2e12),
        row("transpose 32x32", "triton", "transposed", None, 2.9e12, 4.0e12, 4.8e12),
        row("transpose 64x64", "triton", "transposed", None, 3.1e12, 4.0e12, 4.8e12),
        row("torch transpose", "torch", "transposed", None, 2.0e12),
    ]


def test_copy_bandwidth_points_best_triton_row_per_pattern_in_order():
    pts = copy_bandwidth_points(_rows()[::-1])  # the order of the rows does not matter
    assert pts["patterns"] == ["contiguous", "stride 2", "stride 8", "transposed"]
    assert pts["triton"] == [3.8e12, 2.5e12, 0.7e12, 3.1e12]  # BLOCK=4096 and 64x64 are the fastest
    assert pts["torch"] == [4.0e12, 2.4e12, 0.6e12, 2.0e12]
    assert pts["predicted"] == [4.0e12, 2.67e12, 0.89e12, 4.0e12]
    assert pts["predicted_at_peak"] == [4.8e12, 3.2e12, 1.07e12, 4.8e12]
    no_triton = copy_bandwidth_points([r for r in _rows() if r["name"] == "torch transpose"])
    assert no_triton["triton"] == [None] and no_triton["predicted"] == [None] and no_triton["torch"] == [2.0e12]
    with pytest.raises(ValueError, match="no rows"):
        copy_bandwidth_points([])
    with pytest.raises(ValueError, match="'bandwidth'"):
        copy_bandwidth_points([{"kernel": "torch", "pattern": "contiguous", "stride": 1}])
    with pytest.raises(ValueError, match="unknown pattern"):
        copy_bandwidth_points([{"kernel": "torch", "pattern": "diagonal", "stride": 1, "bandwidth": 1.0}])


def test_plot_copy_bandwidth_draws_each_series_in_its_own_style():
    ax = plots.plot_copy_bandwidth(_rows(), peak=4.8e12, peak_label="H200 peak")
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert set(lines) == {
        "Triton kernel (measured)",
        "torch (measured)",
        "sector model x measured torch copy (Triton kernels)",
        "sector model x peak (Triton kernels)",
        "H200 peak (4.8 TB/s)",
    }
    assert len({_style(ln) for ln in lines.values()}) == 5
    np.testing.assert_allclose(lines["Triton kernel (measured)"].get_ydata(), [3800, 2500, 700, 3100])
    np.testing.assert_allclose(lines["H200 peak (4.8 TB/s)"].get_ydata(), [4800, 4800])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["contiguous", "stride 2", "stride 8", "transposed"]
    assert legend_under_axes(ax)
    plt.close(ax.figure)
    # without the peak (a GPU not in the table): no peak line, no prediction at the peak
    rows = [{**r, "predicted_at_peak": None} for r in _rows()]
    ax = plots.plot_copy_bandwidth(rows)
    assert {ln.get_label() for ln in ax.lines} == {
        "Triton kernel (measured)",
        "torch (measured)",
        "sector model x measured torch copy (Triton kernels)",
    }
    plt.close(ax.figure)


def test_plot_copy_bandwidth_draws_bounds_at_their_patterns_and_labels_a_tick_below_the_data():
    bounds = {
        "no reuse, 32-byte fetch": {"transposed": 0.672e12},
        "no reuse, 64-byte fetch": {"transposed": 0.356e12},
    }
    ax = plots.plot_copy_bandwidth(_rows(), peak=4.8e12, bounds=bounds)
    lines = {ln.get_label(): ln for ln in ax.lines}
    for label, at in bounds.items():
        ln = lines[label]
        assert ln.get_linestyle() == "None"  # markers only, at the transposed column
        np.testing.assert_allclose(ln.get_xdata(), [3])
        np.testing.assert_allclose(ln.get_ydata(), [at["transposed"] / 1e9])
    assert len({_style(lines[k]) for k in bounds}) == 2
    lo, _ = ax.get_ylim()
    assert lo == 200  # the lowest point (356 GB/s) sits above a labelled tick of 1, 2, 5
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="no pattern 'stride 64'"):
        plots.plot_copy_bandwidth(_rows(), bounds={"x": {"stride 64": 1e11}})
    # a model's line: dashed, over its patterns only
    ax = plots.plot_copy_bandwidth(_rows(), models={"64-byte": {"stride 2": 2e12, "stride 8": 0.4e12}})
    ln = next(ln for ln in ax.lines if ln.get_label() == "64-byte")
    assert ln.get_linestyle() == "--"
    np.testing.assert_allclose(ln.get_xdata(), [1, 2])
    np.testing.assert_allclose(ln.get_ydata(), [2000, 400])
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="model 'y': no pattern 'stride 64'"):
        plots.plot_copy_bandwidth(_rows(), models={"y": {"stride 64": 1e11}})
    from nbhelpers.plots.throughput import _nice_floor

    assert [_nice_floor(v) for v in (262.0, 200.0, 199.0, 0.9, 5000.0, 7000.0)] == [200, 200, 100, 0.5, 5000, 5000]
