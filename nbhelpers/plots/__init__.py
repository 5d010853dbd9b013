"""Plot helpers, one module per figure family (not per chapter).

Each function takes ``ax=None`` (a new figure when None), returns the Axes and never shows it;
colours come from :mod:`~nbhelpers.plots.style` (one colour per format across the course), and
so does the size of a new figure: as wide as the website's text column (``COLUMN_PX`` pixels as
the notebook saves it), laid out so that nothing it draws sticks out. A notebook that builds a
figure of its own sizes it with ``plots.column_figsize`` and lays it out with
``plots.ColumnLayout`` (or takes it from ``plots.subplots``), its panels stacked in rows rather
than side by side.

- :mod:`~nbhelpers.plots.style`       colours per format, dash styles, the column's width, figures
                                      and legends that fit it, axes handling
- :mod:`~nbhelpers.plots.grids`       what a format holds: bit layouts, values, spacing, rounding modes
- :mod:`~nbhelpers.plots.absorption`  what one rounded addition loses: addend loss, sum-to-term ratio, update survival
- :mod:`~nbhelpers.plots.errors`      error against a size: GEMM error vs K (with GPU points), sum error vs n
- :mod:`~nbhelpers.plots.steps`       a quantity per step: running sums, training loss, unchanged updates, loss scale
- :mod:`~nbhelpers.plots.ranges`      magnitudes against a format's range: gradient histograms
- :mod:`~nbhelpers.plots.scaling`     quantization error by the granularity of the scales (chapter 06)
- :mod:`~nbhelpers.plots.blocks`      fp8 accumulation with promotion against K; block formats' SQNR
                                      per byte (chapter 07)
- :mod:`~nbhelpers.plots.throughput`  how fast memory moves: efficiency and bandwidth against stride (chapter 08)
- :mod:`~nbhelpers.plots.roofline`    what bounds a kernel: the roofline; resident warps against
                                      registers; register pressure (chapter 09)
- :mod:`~nbhelpers.plots.moe`         expert GEMMs: routing and the permuted buffer, time against E,
                                      capacity factor (chapter 10)
- :mod:`~nbhelpers.plots.topk`        top-k over a vocabulary: rows whose top-k set changes when the
                                      logits are rounded, against k (chapter 11)

A new figure goes into the module of its family (an amax histogram of chapter 06 into
``ranges``, a bandwidth-against-stride curve of chapter 08 into a new ``throughput`` family)
and is re-exported here, so a notebook reads ``from nbhelpers import plots; plots.plot_...``.
"""

from __future__ import annotations

from .absorption import plot_addend_loss, plot_sum_to_term_ratio, plot_update_survival
from .blocks import plot_promotion_vs_K, plot_sqnr_vs_bytes
from .errors import plot_error_vs_K, plot_errors_vs_length, plot_recorded_gpu_errors
from .grids import plot_bit_layouts, plot_relative_spacing, plot_rounding_modes, plot_value_line
from .moe import plot_capacity_tradeoff, plot_expert_gemm_times, plot_routing
from .ranges import plot_gradient_histogram, plot_gradient_histograms_scaled
from .roofline import plot_occupancy, plot_register_pressure, plot_roofline
from .scaling import plot_sqnr_by_granularity
from .steps import (
    plot_loss_scale,
    plot_running_sums,
    plot_seed_spread,
    plot_training_curves,
    plot_training_curves_vs_ref,
    plot_unchanged_updates,
)
from .style import (
    COLUMN_IN,
    COLUMN_PX,
    FORMAT_COLORS,
    ColumnLayout,
    column_figsize,
    format_color,
    legend_below,
    subplots,
)
from .throughput import plot_copy_bandwidth, plot_efficiency_vs_stride
from .topk import plot_topk_set_changes

__all__ = [
    "plot_topk_set_changes",
    "COLUMN_PX",
    "COLUMN_IN",
    "column_figsize",
    "ColumnLayout",
    "subplots",
    "legend_below",
    "FORMAT_COLORS",
    "format_color",
    "plot_bit_layouts",
    "plot_value_line",
    "plot_relative_spacing",
    "plot_rounding_modes",
    "plot_addend_loss",
    "plot_sum_to_term_ratio",
    "plot_update_survival",
    "plot_error_vs_K",
    "plot_recorded_gpu_errors",
    "plot_errors_vs_length",
    "plot_running_sums",
    "plot_training_curves",
    "plot_seed_spread",
    "plot_unchanged_updates",
    "plot_loss_scale",
    "plot_gradient_histogram",
    "plot_gradient_histograms_scaled",
    "plot_training_curves_vs_ref",
    "plot_sqnr_by_granularity",
    "plot_promotion_vs_K",
    "plot_sqnr_vs_bytes",
    "plot_efficiency_vs_stride",
    "plot_copy_bandwidth",
    "plot_roofline",
    "plot_occupancy",
    "plot_register_pressure",
    "plot_routing",
    "plot_expert_gemm_times",
    "plot_capacity_tradeoff",
]
