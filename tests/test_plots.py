"""Smoke and content tests of nbhelpers.plots, one section per figure family: each helper returns
its Axes, draws the lines it should, in the course's colour per format."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import legend_under_axes, measured_gpu_run, wide

from nbhelpers import plots
from nbhelpers.accumulation import SumMethod
from nbhelpers.experiments import errors_vs_length
from nbhelpers.formats import FORMATS

# ------------------------------------------------------------------ style and grids (chapter 01)


def test_plot_helpers_return_axes_and_draw():
    for fn, args in [
        (plots.plot_bit_layouts, (FORMATS.values(),)),
        (plots.plot_relative_spacing, (["bf16", "e4m3fn"],)),
        (plots.plot_value_line, (["e2m1fn"],)),
    ]:
        ax = fn(*args)
        assert ax.figure is not None
        plt.close(ax.figure)
    fig, ax = plt.subplots()
    assert plots.plot_rounding_modes("e2m1fn", 0, 6, rng=np.random.default_rng(0), ax=ax, draws=5) is ax
    assert len(ax.lines) >= 5
    plt.close(fig)


def test_every_format_has_its_own_colour():
    colours = [plots.format_color(n) for n in FORMATS]
    assert len(set(colours)) == len(colours)


def test_distinct_colors_keeps_the_first_of_each_colour_and_never_takes_a_format_colour():
    from nbhelpers.plots.style import EXTRA_COLORS, FORMAT_COLORS, distinct_colors

    bf16, fp32 = plots.format_color("bf16"), plots.format_color("fp32")
    got = distinct_colors([fp32, bf16, bf16, bf16, fp32])
    assert got[:2] == [fp32, bf16] and got[2:] == list(EXTRA_COLORS[:3])
    assert not set(EXTRA_COLORS) & set(FORMAT_COLORS.values())
    assert len(set(distinct_colors([bf16] * len(EXTRA_COLORS)))) == len(EXTRA_COLORS)


# ------------------------------------------------------------------ absorption, steps, errors vs length (chapter 02)


def test_chapter02_plots_return_axes():
    ax = plots.plot_running_sums(1 / np.arange(1, 200), ["bf16", "fp16"])
    assert ax.get_xlabel() and len(ax.lines) == 3
    ax = plots.plot_addend_loss(["bf16", "fp32"], np.random.default_rng(0), n=200)
    assert len(ax.lines) >= 4
    P = np.abs(wide((4, 128), 1, spread=2))
    ax = plots.plot_sum_to_term_ratio({"positive": P, "signed": wide((4, 128), 2, spread=2)}, ["bf16"])
    assert len(ax.lines) == 3
    fig, ax0 = plt.subplots()
    errs = errors_vs_length(
        P, [8, 32, 128], [SumMethod("bf16"), SumMethod("bf16", rounding="stochastic")], rng=np.random.default_rng(0)
    )
    assert plots.plot_errors_vs_length([8, 32, 128], errs, ax=ax0) is ax0
    with pytest.raises(ValueError, match="1-D"):
        plots.plot_running_sums(np.ones((2, 2)), ["bf16"])
    plt.close("all")


# ------------------------------------------------------------------ errors vs K, recorded GPU points (chapter 03)


def test_plot_error_vs_K_draws_one_line_per_entry_with_format_colours():
    Ks = [128, 256, 512]
    errs = {
        "fp32 acc": [1e-7, 2e-7, 3e-7],
        "bf16 acc": [1e-2, 2e-2, 3e-2],
        "bf16 out": [3e-3] * 3,
        "model": [2e-7, 3e-7, 4e-7],
    }
    fmts = {"fp32 acc": "fp32", "bf16 acc": "bf16", "bf16 out": "bf16", "model": "black"}
    ax = plots.plot_error_vs_K(Ks, errs, fmts, guides={"sqrt(K) u": np.sqrt(Ks) * 2.0**-8})
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert set(lines) == set(errs) | {"sqrt(K) u"}
    assert lines["fp32 acc"].get_color() == plots.format_color("fp32")
    assert lines["bf16 acc"].get_color() == lines["bf16 out"].get_color() == plots.format_color("bf16")
    assert lines["bf16 acc"].get_linestyle() != lines["bf16 out"].get_linestyle()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(ax.figure)
    fig, ax = plt.subplots()
    assert plots.plot_error_vs_K(Ks, {"x": [1, 2, 3]}, {"x": "fp16"}, ax=ax) is ax
    with pytest.raises(KeyError, match="no format"):
        plots.plot_error_vs_K(Ks, {"x": [1, 2, 3]}, {}, ax=ax)
    with pytest.raises(ValueError, match="neither a format"):
        plots.plot_error_vs_K(Ks, {"x": [1, 2, 3]}, {"x": "not-a-colour"}, ax=ax)
    plt.close(fig)


def test_plot_error_vs_K_fixed_dashes_and_legend_outside():
    Ks = [128, 256, 512]
    errs = {"bf16 acc": [1e-2] * 3, "bf16 out": [3e-3] * 3, "bf16 other": [2e-3] * 3, "fp32": [1e-7] * 3}
    fmts = {"bf16 acc": "bf16", "bf16 out": "bf16", "bf16 other": "bf16", "fp32": "fp32"}
    ax = plots.plot_error_vs_K(Ks, errs, fmts, dashes={"bf16 out": "-"}, legend_outside=True)
    styles = {ln.get_label(): ln.get_linestyle() for ln in ax.lines}
    assert styles["bf16 out"] == "-"  # the fixed style, although it comes second in its colour
    assert len({styles["bf16 acc"], styles["bf16 out"], styles["bf16 other"]}) == 3  # still distinct
    assert styles["fp32"] == "-"  # other colours keep the automatic styles
    assert ax.get_legend() is not None and legend_under_axes(ax)  # off the data
    plt.close(ax.figure)
    # without dashes the automatic styles are unchanged
    ax = plots.plot_error_vs_K(Ks, errs, fmts)
    assert [ln.get_linestyle() for ln in ax.lines] == ["-", "--", ":", "-"]
    with pytest.raises(KeyError, match="not plotted"):
        plots.plot_error_vs_K(Ks, errs, fmts, dashes={"nope": ":"})
    plt.close("all")


def test_plot_recorded_gpu_errors_labels_gpu_date_and_script():
    fig, ax = plt.subplots()
    assert plots.plot_recorded_gpu_errors([], ax=ax) is ax and not ax.lines
    run = measured_gpu_run("2026-05-06T07:08:09+00:00", gpu="NVIDIA Test GPU")
    plots.plot_recorded_gpu_errors([run], ax=ax, methods=["Triton bf16", "Triton fp32 tf32"])
    assert [ln.get_label() for ln in ax.lines] == ["GPU: Triton bf16", "GPU: Triton fp32 tf32"]
    assert ax.lines[1].get_color() == plots.format_color("tf32")
    note = " ".join(t.get_text() for t in ax.texts)
    assert "NVIDIA Test GPU" in note and "2026-05-06" in note and "benchmarks/gpu_gemm_numerics.py" in note
    plt.close(fig)
    fig, ax = plt.subplots()
    plots.plot_recorded_gpu_errors([run], ax=ax, legend_outside=True)
    assert legend_under_axes(ax)  # off the data, and the note under the legend
    (note,) = ax.texts
    assert note.get_window_extent().y1 <= ax.get_legend().get_window_extent().y0
    plt.close(fig)
