"""Every figure of nbhelpers.plots fits the website's text column: saved as a notebook saves it (the
inline backend: a PNG at the figure's dpi, ``bbox_inches="tight"``), a new figure of each helper is
at most ``COLUMN_PX`` pixels wide and not much narrower, with titles as long as the notebooks' (the
layout wraps them), and no text under the smallest font of the course. Then the layout itself:
titles and labels wrapped to their Axes, legends hung under the x labels, one x label under a
column of panels that share it."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import inline_png_size, legend_under_axes, measured_gpu_run, wide
from matplotlib.text import Text

from nbhelpers import moe, plots
from nbhelpers.accumulation import SumMethod
from nbhelpers.experiments import errors_vs_length
from nbhelpers.formats import FORMATS
from nbhelpers.plots.style import COLUMN_IN, FIGURE_DPI, SMALLEST_FONT_PT, TIGHT_PAD_IN
from nbhelpers.training import TrainConfig, train

# as long as the longest titles the notebooks give their figures
LONG_TITLE = (
    "at most: the layer's and single experts' intensity against the H200's roofs (peak figures, not "
    "measurements), and a few more words so that the title needs three lines"
)


@pytest.fixture(scope="module")
def runs():
    cfg = TrainConfig(steps=12, record_steps=(6,), loss_multiplier=2.0**-12)
    return {name: train(name, config=cfg) for name in ("fp32", "bf16, round to nearest", "bf16 + fp32 master")}


def _errors_vs_length(style):
    X = np.abs(wide((4, 64), 1, spread=2))
    methods = [SumMethod("bf16"), SumMethod("bf16", "pairwise"), SumMethod("bf16", rounding="stochastic")]
    methods.append(SumMethod("fp32"))
    errs = errors_vs_length(X, [8, 16, 32, 64], methods, rng=np.random.default_rng(0))
    return plots.plot_errors_vs_length([8, 16, 32, 64], errs, style=style)


def _rows():
    def row(kernel, pattern, stride, bw):
        return {"kernel": kernel, "pattern": pattern, "stride": stride, "bandwidth": bw}

    return [
        row("torch", "contiguous", 1, 4.0e12) | {"predicted_bandwidth": 4.0e12, "predicted_at_peak": 4.8e12},
        row("triton", "contiguous", 1, 3.8e12) | {"predicted_bandwidth": 4.0e12, "predicted_at_peak": 4.8e12},
        row("triton", "strided", 8, 0.7e12) | {"predicted_bandwidth": 0.9e12, "predicted_at_peak": 1.1e12},
        row("torch", "strided", 8, 0.6e12),
        row("triton", "transposed", None, 3.1e12) | {"predicted_bandwidth": 4.0e12, "predicted_at_peak": 4.8e12},
        row("torch", "transposed", None, 2.0e12),
    ]


KS = [128, 256, 512, 1024]
# each helper with data like a notebook's: long labels, a title set afterwards as the notebooks do
CASES = {
    "plot_bit_layouts": lambda r: plots.plot_bit_layouts(FORMATS.values()),
    "plot_value_line": lambda r: plots.plot_value_line(["e2m1fn", "e3m2fn"]),
    "plot_relative_spacing": lambda r: plots.plot_relative_spacing(["fp32", "bf16", "fp16", "e4m3fn", "e5m2"]),
    "plot_rounding_modes": lambda r: plots.plot_rounding_modes("e2m1fn", 0, 6.4, np.random.default_rng(1), draws=5),
    "plot_addend_loss": lambda r: plots.plot_addend_loss(["bf16", "fp16", "fp32"], np.random.default_rng(0), n=300),
    "plot_sum_to_term_ratio": lambda r: plots.plot_sum_to_term_ratio(
        {"positive": np.abs(wide((4, 128), 1, spread=2)), "random signs": wide((4, 128), 2, spread=2)},
        ["bf16", "fp16", "fp32"],
    ),
    "plot_update_survival": lambda r: plots.plot_update_survival(
        r["fp32"].snapshots[6].weights, r["fp32"].snapshots[6].updates, "bf16"
    ),
    "plot_error_vs_K": lambda r: plots.plot_error_vs_K(
        KS,
        {"fp32 in, fp32 acc": [1e-7] * 4, "bf16 in, fp32 acc": [3e-3] * 4, "bf16 in, fp32 acc, bf16 out": [4e-3] * 4},
        {"fp32 in, fp32 acc": "fp32", "bf16 in, fp32 acc": "bf16", "bf16 in, fp32 acc, bf16 out": "bf16"},
        guides={"sqrt(K) u_bf16": np.sqrt(KS) * 2.0**-8},
        legend_outside=True,
    ),
    "plot_recorded_gpu_errors": lambda r: plots.plot_recorded_gpu_errors(
        [measured_gpu_run("2026-05-06T07:08:09+00:00", gpu="NVIDIA H200")], legend_outside=True
    ),
    "plot_errors_vs_length": lambda r: _errors_vs_length("method"),
    "plot_running_sums": lambda r: plots.plot_running_sums(1 / np.arange(1, 257), ["bf16", "fp16", "fp32"]),
    "plot_training_curves": lambda r: plots.plot_training_curves(r),
    "plot_seed_spread": lambda r: plots.plot_seed_spread({k: [v, v] for k, v in r.items()}),
    "plot_unchanged_updates": lambda r: plots.plot_unchanged_updates(r),
    "plot_loss_scale": lambda r: plots.plot_loss_scale(r["fp32"], fmt="fp16"),
    "plot_gradient_histogram": lambda r: plots.plot_gradient_histogram(
        {
            "activation gradients": r["fp32"].snapshots[6].act_grads,
            "weight gradients": r["fp32"].snapshots[6].weight_grads,
        }
    ),
    "plot_gradient_histograms_scaled": lambda r: plots.plot_gradient_histograms_scaled(
        {"activation gradients": r["fp32"].snapshots[6].act_grads}, scale=2.0**16
    )[0],
    "plot_training_curves_vs_ref": lambda r: plots.plot_training_curves_vs_ref(r, "fp32", ratio_ylim=(0.95, 1.35))[0],
    "plot_sqnr_by_granularity": lambda r: plots.plot_sqnr_by_granularity(
        {
            "no outliers": {"int8": [39.0, 42.0, 44.0, 45.0], "e4m3fn": [31.5, 31.6, 31.8, 31.9]},
            "4 outlier channels (x20): SQNR of the ordinary channels": {"int8": [15.0, 23.0, 43.0, 30.0]}
            | {"e4m3fn": [31.5, 31.5, 31.6, 31.6]},
        },
        ["per-tensor", "per-row", "per-column", "1x128 tiles"],
        shade=["per-column"],
    )[0],
    "plot_promotion_vs_K": lambda r: plots.plot_promotion_vs_K(
        KS,
        {"fp32": [4e-8] * 4, None: [2e-4, 4e-4, 1e-3, 3e-3], 32: [3e-5] * 4, 128: [1e-4] * 4},
        guides={"e4m3 input rounding (for scale)": [3e-2] * 4},
        slopes=(0.5, 1.0),
    ),
    "plot_sqnr_vs_bytes": lambda r: plots.plot_sqnr_vs_bytes(
        {
            name: (b, {"no outliers": 20.0 + 10 * b, "outliers present: ordinary weights": 18.0 + 10 * b})
            for name, b in (("bf16", 2.0), ("fp8 e4m3, 128x128 blocks", 1.0), ("MXFP8 (FLOOR)", 1.03))
            + (("MXFP8 (RCEIL)", 1.03), ("MXFP4", 0.53), ("NVFP4", 0.5625), ("int4, groups of 128", 0.53))
        },
        formats={"bf16": "bf16", "MXFP4": "e2m1fn"},
        dodge=1.03,
    ),
    "plot_efficiency_vs_stride": lambda r: plots.plot_efficiency_vs_stride(
        [1, 2, 4, 8, 16, 32],
        {f"measured on this CPU, run {k + 1}": [1.0, 0.6, 0.35, 0.2, 0.1, 0.06] for k in range(3)},
        {
            "CPU model: 64-byte lines": [1.0, 0.5, 0.25, 0.125, 0.0625, 0.0625],
            "CPU model: 128-byte line pairs": [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125],
            "GPU model: 32-byte sectors": [1.0, 0.67, 0.4, 0.22, 0.12, 0.06],
        },
    ),
    "plot_copy_bandwidth": lambda r: plots.plot_copy_bandwidth(_rows(), peak=4.8e12, peak_label="H200 peak"),
    "plot_roofline": lambda r: plots.plot_roofline(
        {
            "bf16 GEMMs, M = 1 ... 16384 (attainable)": ([1.0, 10.0, 100.0, 1000.0], [4.8, 48.0, 480.0, 989.0]),
            "measured, Triton bf16, its own shapes (NVIDIA H200, 2026-05-06)": ([500.0, 1500.0], [600.0, 700.0]),
        },
        {"bf16 peak": 989.0, "fp8 peak": 1979.0},
        4.8e12,
        colors={"bf16 GEMMs, M = 1 ... 16384 (attainable)": "bf16"},
        labels={"bf16 GEMMs, M = 1 ... 16384 (attainable)": ["M=1", "M=16", "M=256", "M=16384"]},
    ),
    "plot_occupancy": lambda r: plots.plot_occupancy(
        [32, 64, 128, 255],
        {
            "napkin: 65536 / (32 r), capped at 64": [64, 32, 16, 8],
            "programs of 4 warps, 64 KB shared memory each": [12] * 4,
        },
        max_warps=64,
    ),
    "plot_register_pressure": lambda r: plots.plot_register_pressure(
        [0, 8, 16, 24], [40, 96, 168, 255], [0, 0, 0, 64], [0, 0, 0, 48], [48, 20, 12, 8], max_registers=255
    )[0],
    "plot_routing": lambda r: plots.plot_routing(
        moe.Routing.from_ids([[0, 1], [1, 3], [0, 1], [3, 1], [1, 0], [3, 0]], num_experts=4), block_m=4
    )[0],
    "plot_expert_gemm_times": lambda r: plots.plot_expert_gemm_times(
        [1, 4, 16, 64],
        {m: [1e-3, 1.2e-3, 2e-3, 5e-3] for m in ("loop", "bmm", "padded", "grouped_mm", "triton")},
        {"napkin: one call + (E - 1) x tiny-call overhead": [1e-3, 1.1e-3, 1.5e-3, 3e-3]},
    ),
    "plot_capacity_tradeoff": lambda r: plots.plot_capacity_tradeoff(
        [0.5, 1.0, 2.0], [0.1, 0.3, 0.55], [0.5, 0.2, 0.0]
    ),
    "plot_topk_set_changes": lambda r: plots.plot_topk_set_changes(
        [1, 8, 50, 256], {"bf16": [0.0, 0.1, 0.5, 0.7], "e4m3fn": [0.1, 0.7, 1.0, 1.0]}, rows=128
    ),
}


def test_every_plot_helper_is_sized_here():
    assert {name for name in plots.__all__ if name.startswith("plot_")} == set(CASES)


def test_the_column_width_in_inches_gives_the_column_in_pixels():
    assert plots.COLUMN_IN == pytest.approx(plots.COLUMN_PX / FIGURE_DPI - 2 * TIGHT_PAD_IN)
    assert plots.column_figsize(0.5) == (COLUMN_IN, COLUMN_IN / 2)
    assert matplotlib.rcParams["figure.dpi"] == FIGURE_DPI  # the dpi the notebooks save at
    with pytest.raises(TypeError, match="height_ratio"):
        plots.subplots(figsize=(10, 4))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_new_figure_fits_the_column_with_legible_text(name, runs):
    ax = CASES[name](runs)
    fig = ax.figure
    ax.set_title(LONG_TITLE)
    width, height = inline_png_size(fig)
    assert 0.85 * plots.COLUMN_PX <= width <= plots.COLUMN_PX, (width, height)
    assert 150 <= height <= 2.5 * plots.COLUMN_PX
    small = {
        (t.get_text(), t.get_fontsize())
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < SMALLEST_FONT_PT
    }
    assert not small, small
    assert ax.title.get_window_extent().width <= ax.get_window_extent().width + 1  # wrapped to its Axes
    assert ax.title.get_text().replace("\n", " ") == LONG_TITLE  # every word kept
    plt.close(fig)


def test_a_figure_title_is_wrapped_to_the_figure_and_rewrapped_from_its_words():
    fig, (top, bottom) = plots.subplots(2, 1, height_ratio=1.0, sharex=True)
    for ax in (top, bottom):
        ax.plot([1, 2], [1, 2], label="a line")
    top.set_xlabel("hidden: the panel under it shares its x axis")
    bottom.set_xlabel("x")
    fig.suptitle(LONG_TITLE + " " + LONG_TITLE)
    width, _ = inline_png_size(fig)
    assert width <= plots.COLUMN_PX
    suptitle = fig.get_suptitle()
    assert suptitle.count("\n") >= 2 and suptitle.replace("\n", " ") == LONG_TITLE + " " + LONG_TITLE
    assert not top.xaxis.label.get_visible() and bottom.xaxis.label.get_visible()
    # a title changed after a draw is wrapped again from the new words
    bottom.set_title("short")
    fig.canvas.draw()
    assert bottom.get_title() == "short"
    plt.close(fig)


def test_legend_below_sits_under_rotated_tick_labels_in_and_out_of_the_column_layout():
    for fig, ax in (plots.subplots(), plt.subplots(figsize=(6, 4))):
        ax.plot([0, 1, 2], [1, 2, 3], label="a line with a long label")
        ax.plot([0, 1, 2], [3, 2, 1], label="another")
        ax.set_xticks([0, 1, 2], ["contiguous", "stride 8", "transposed"], rotation=30, ha="right")
        ax.set_xlabel("access pattern")
        legend = plots.legend_below(ax)
        assert legend is ax.get_legend()
        if fig.get_layout_engine() is not None:  # the layout measures the rotated labels
            assert legend_under_axes(ax)
        else:  # without it, the legend hangs under where flat labels would end
            fig.canvas.draw()
            assert legend.get_window_extent().y1 < ax.get_window_extent().y0
        plt.close(fig)
