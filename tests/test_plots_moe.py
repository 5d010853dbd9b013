"""Tests of nbhelpers.plots.moe (chapter 10's figures): the routing figure lays the rows out as
nbhelpers.moe permutes them (row colours, offset lines, one bracket per tile, hatched masked rows,
the empty expert named); the timing figure draws one distinct style per method with the values
given and the napkin lines apart; the capacity figure draws both fractions in percent; legends sit
off the data; bad input is refused."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import legend_under_axes
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from nbhelpers import moe, plots
from nbhelpers.plots.moe import EXPERT_COLORS

# 6 tokens, top-2 of 4 experts; expert 2 chosen by nobody
IDS = [[0, 1], [1, 3], [0, 1], [3, 1], [1, 0], [3, 0]]


def _style(line):
    return (str(line.get_color()), str(line.get_linestyle()), line.get_marker(), line.get_fillstyle())


def test_plot_routing_draws_the_permuted_buffer():
    routing = moe.Routing.from_ids(IDS, 4)
    ax_r, ax_b = plots.plot_routing(routing, block_m=4)
    # left: one coloured cell per (token, slot), at (expert, token)
    cells = [p for p in ax_r.patches if isinstance(p, Rectangle)]
    assert len(cells) == 12
    assert {(int(p.get_x()), int(p.get_y())) for p in cells} == {(e, t) for t, row in enumerate(IDS) for e in row}
    # right: 12 buffer rows coloured by their expert in moe.permutation's order
    perm = moe.permutation(np.array(IDS))
    expected = [EXPERT_COLORS[IDS[p // 2][p % 2]] for p in perm]
    rows = sorted((p for p in ax_b.patches if isinstance(p, Rectangle) and p.get_width() == 3), key=lambda p: p.get_y())
    assert [int(p.get_y()) for p in rows] == list(range(12))
    assert [to_hex(p.get_facecolor()) for p in rows] == expected
    # offsets 0, 4, 9, 9, 12: one horizontal line each, and the empty expert is named
    offset_lines = sorted(ln.get_ydata()[0] for ln in ax_b.lines)
    assert offset_lines == [0, 4, 9, 9, 12]
    texts = [t.get_text() for t in ax_b.texts]
    assert any("e2: no rows" in t for t in texts)
    # tiles of 4 rows: e0 has 4 rows (1 tile), e1 5 (2 tiles), e3 3 (1 tile): 4 brackets, 2 hatched
    brackets = [p for p in ax_b.patches if isinstance(p, Rectangle) and p.get_width() == 0.3 and not p.get_hatch()]
    hatched = [p for p in ax_b.patches if p.get_hatch()]
    assert len(brackets) == moe.tile_schedule(moe.expert_offsets(np.array(IDS), 4), 4).num_tiles == 4
    assert sorted((p.get_y(), p.get_height()) for p in hatched) == [(9, 3), (12, 1)]
    assert sum("tile " in t for t in texts) == 4
    plt.close(ax_r.figure)


def test_plot_routing_refuses_bad_input():
    with pytest.raises(TypeError, match="Routing"):
        plots.plot_routing(np.array(IDS), block_m=4)
    with pytest.raises(ValueError, match="no tokens"):
        plots.plot_routing(moe.Routing.from_ids(np.zeros((0, 2), dtype=int), 4), block_m=4)
    with pytest.raises(ValueError, match="block_m"):
        plots.plot_routing(moe.Routing.from_ids(IDS, 4), block_m=0)
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="two Axes"):
        plots.plot_routing(moe.Routing.from_ids(IDS, 4), block_m=4, axes=[ax])
    plt.close("all")


def test_plot_expert_gemm_times_one_style_per_method():
    E = [1, 4, 16, 64]
    seconds = {
        "loop": [1e-3, 1.2e-3, 2e-3, 5e-3],
        "bmm": [1e-3, 0.9e-3, 0.9e-3, 1e-3],
        "padded": [2e-3, 2e-3, 2.1e-3, 2.4e-3],
        "grouped_mm": [1e-3, 1e-3, 1.1e-3, 1.6e-3],
    }
    napkin = {"napkin: one call + (E - 1) x overhead": [1e-3, 1.01e-3, 1.05e-3, 1.2e-3]}
    ax = plots.plot_expert_gemm_times(E, seconds, napkin)
    lines = [ln for ln in ax.lines if not ln.get_label().startswith("_")]
    assert len(lines) == 5
    assert len({_style(ln) for ln in lines}) == 5
    by_label = {ln.get_label(): ln for ln in lines}
    loop = next(ln for lab, ln in by_label.items() if lab.startswith("loop"))
    np.testing.assert_allclose(loop.get_ydata(), np.array(seconds["loop"]) * 1e3)  # milliseconds
    np.testing.assert_array_equal(loop.get_xdata(), E)
    nap = by_label["napkin: one call + (E - 1) x overhead"]
    assert nap.get_marker() in ("None", None, "") and nap.get_linestyle() != "-"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert legend_under_axes(ax)
    plt.close(ax.figure)


def test_plot_expert_gemm_times_labels_a_narrow_range():
    """Times within a decade (here 0.3 to 1.7 ms) get ticks between the powers of ten, 0.3, 0.4,
    0.7 and 1.5 among them; a range of several decades keeps 1, 2 and 5."""
    E = [1, 4, 16]
    ax = plots.plot_expert_gemm_times(E, {"loop": [0.3e-3, 0.9e-3, 1.7e-3]})
    ax.figure.canvas.draw()
    ticks = [t for t in ax.get_yticks() if 0.3 - 1e-9 <= t <= 1.7]
    for v in (0.3, 0.4, 0.5, 0.7, 1.0, 1.5):
        assert any(abs(t - v) < 1e-9 for t in ticks), (v, ticks)
    plt.close(ax.figure)
    # the axis reaches down to a labelled tick under the lowest curve (0.3 and 0.4 under 0.37)
    ax = plots.plot_expert_gemm_times(E, {"loop": [0.37e-3, 0.9e-3, 1.7e-3]})
    ax.figure.canvas.draw()
    bottom, top = ax.get_ylim()
    shown = [t for t in ax.get_yticks() if bottom <= t <= top]
    for v in (0.3, 0.4):
        assert any(abs(t - v) < 1e-9 for t in shown), (v, shown)
    plt.close(ax.figure)
    ax = plots.plot_expert_gemm_times(E, {"loop": [1e-5, 1e-4, 1e-2]})
    ticks = ax.yaxis.get_major_locator().tick_values(0.01, 10)
    assert not any(abs(t - 0.7) < 1e-9 for t in ticks)
    plt.close(ax.figure)


def test_plot_expert_gemm_times_refuses_bad_input():
    fig, ax = plt.subplots()
    assert plots.plot_expert_gemm_times([1, 2], {"loop": [1e-3, 2e-3]}, ax=ax, legend_outside=False) is ax
    with pytest.raises(ValueError, match="nothing to draw"):
        plots.plot_expert_gemm_times([1, 2], {}, ax=ax)
    with pytest.raises(ValueError, match="3 times for 2"):
        plots.plot_expert_gemm_times([1, 2], {"loop": [1, 2, 3]}, ax=ax)
    with pytest.raises(ValueError, match="positive"):
        plots.plot_expert_gemm_times([1, 2], {"loop": [1, 0]}, ax=ax)
    with pytest.raises(ValueError, match="E_values"):
        plots.plot_expert_gemm_times([0, 2], {"loop": [1, 2]}, ax=ax)
    with pytest.raises(ValueError, match="napkin"):
        plots.plot_expert_gemm_times([1, 2], {"loop": [1, 2]}, {"n": [1]}, ax=ax)
    plt.close(fig)


def test_plot_capacity_tradeoff():
    cf = [0.5, 1.0, 2.0]
    ax = plots.plot_capacity_tradeoff(cf, [0.1, 0.3, 0.55], [0.55, 0.3, 0.1])
    lines = [ln for ln in ax.lines if not ln.get_label().startswith("_")]
    data = [ln for ln in lines if len(ln.get_xdata()) == 3]
    assert len(data) == 2 and len({_style(ln) for ln in data}) == 2
    np.testing.assert_allclose(data[0].get_ydata(), [10, 30, 55])  # percent
    assert any("factor 1" in ln.get_label() for ln in lines)
    assert legend_under_axes(ax)
    plt.close(ax.figure)
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="capacity_factors"):
        plots.plot_capacity_tradeoff([0, 1], [0, 0], [0, 0], ax=ax)
    with pytest.raises(ValueError, match="2 values for 3"):
        plots.plot_capacity_tradeoff(cf, [0, 0], [0, 0, 0], ax=ax)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        plots.plot_capacity_tradeoff(cf, [0, 0, 1.5], [0, 0, 0], ax=ax)
    plt.close(fig)
