"""nbhelpers.loss_scaling: the dynamic scaler against the outside oracle torch.amp.GradScaler("cpu"),
bit for bit, its edges and defaults, the static scaler, and the argument checks."""

import math

import numpy as np
import pytest
from helpers import one_torch_thread  # noqa: F401  (autouse: the tests run torch on one thread)

from nbhelpers.loss_scaling import (
    DynamicLossScaler,
    DynamicScale,
    StaticLossScaler,
    StaticScale,
    gradscaler_trajectory,
    scale_trajectory,
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dynamic_scaler_follows_gradscaler_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for _ in range(6):
        n = int(rng.integers(20, 120))
        seq = [bool(v) for v in rng.random(n) < rng.uniform(0.02, 0.4)]
        args = (
            float(rng.choice([2.0**16, 1000.0, 3.0, 0.1])),
            float(rng.choice([2.0, 1.5, 1.1, 3.0])),
            float(rng.choice([0.5, 0.3, 0.25, 0.9])),
            int(rng.integers(1, 7)),
        )
        expected_scales, taken = gradscaler_trajectory(seq, *args)
        s = DynamicLossScaler(*args)
        got, got_taken = [], []
        for flag in seq:
            got_taken.append(s.update(flag))
            got.append(s.scale)
        assert got == expected_scales, (args, seq)
        assert got_taken == taken == [not f for f in seq]
        assert s.skipped == sum(seq)
        assert scale_trajectory(seq, *args) == expected_scales


def test_scaler_edges_match_gradscaler():
    # growth that would overflow float32 is skipped; the scale stays at its value
    assert gradscaler_trajectory([False] * 4, 3.0e38, 2.0, 0.5, 1)[0] == scale_trajectory(
        [False] * 4, 3.0e38, 2.0, 0.5, 1
    )
    assert scale_trajectory([False] * 3, 3.0e38, 2.0, 0.5, 1) == [float(np.float32(3.0e38))] * 3
    # backoff all the way through the float32 subnormals to zero
    seq = [True] * 6
    assert gradscaler_trajectory(seq, 2.0**-146, 2.0, 0.5, 5)[0] == scale_trajectory(seq, 2.0**-146, 2.0, 0.5, 5)
    assert scale_trajectory(seq, 2.0**-146, 2.0, 0.5, 5)[-1] == 0.0
    # the scale is a float32 number from the start
    assert scale_trajectory([False], 0.1, 2.0, 0.5, 2) == [float(np.float32(0.1))]


def test_gradscaler_defaults_by_hand():
    """PyTorch's defaults (FACTS.md): 2**16, x0.5 on inf/NaN, x2 after 2000 good steps."""
    d = DynamicScale()
    assert (d.init_scale, d.growth_factor, d.backoff_factor, d.growth_interval) == (2.0**16, 2.0, 0.5, 2000)
    scales, taken = gradscaler_trajectory([True, False, False])
    assert scales == [2.0**15] * 3 and taken == [False, True, True]
    seq = [False] * 2000
    assert scale_trajectory(seq)[-1] == 2.0**17 and scale_trajectory(seq)[-2] == 2.0**16


def test_static_scaler_counts_skips():
    s = StaticLossScaler(1024.0)
    assert [s.update(f) for f in (False, True, False, True)] == [True, False, True, False]
    assert s.skipped == 2 and s.scale == 1024.0


@pytest.mark.parametrize(
    "bad",
    [
        {"init_scale": 0.0},
        {"init_scale": math.inf},
        {"growth_factor": 1.0},
        {"backoff_factor": 1.5},
        {"growth_interval": 0},
        {"growth_interval": 2.5},
        {"init_scale": "big"},
    ],
)
def test_scaler_rejects_bad_arguments(bad):
    with pytest.raises(ValueError):
        DynamicLossScaler(**bad)
    with pytest.raises(ValueError):
        DynamicScale(**bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, "big", True])
def test_static_scale_rejects_bad_scales(bad):
    with pytest.raises(ValueError, match="StaticScale.scale must be a positive finite number"):
        StaticScale(bad)
    with pytest.raises(ValueError, match="StaticScale.scale"):
        StaticLossScaler(bad)


def test_adam_eps_follows_the_loss_multiplier_only_when_asked():
    """Step 1's update is Adam's delta of the recorded gradient from zero moments, with eps times the
    loss multiplier under scale_eps (the default) and real Adam's eps with scale_eps=False."""
    import torch

    from nbhelpers.training import AdamState, TrainConfig, adam_delta, train

    K = 2.0**-12
    for scale_eps, eps_used in ((True, 1e-8 * K), (False, 1e-8)):
        cfg = TrainConfig(steps=1, loss_multiplier=K, record_steps=(1,), scale_eps=scale_eps)
        snap = train("fp32", config=cfg).snapshots[1]
        g = torch.tensor(snap.weight_grads, dtype=torch.float32)
        expected = adam_delta(g, AdamState(torch.zeros_like(g), torch.zeros_like(g)), 1, cfg.lr, eps=eps_used)
        np.testing.assert_array_equal(snap.updates, expected.double().numpy())
    # the shifted gradients (median about 2**-19 here) are not small against a fixed eps of 1e-8:
    # the two settings give different updates
    a, b = (
        train("fp32", config=TrainConfig(steps=1, loss_multiplier=K, record_steps=(1,), scale_eps=s))
        .snapshots[1]
        .updates
        for s in (True, False)
    )
    assert not np.array_equal(a, b)
    assert "scale_eps" not in repr(TrainConfig())  # chapter 04 prints a TrainConfig
    with pytest.raises(ValueError, match="scale_eps"):
        TrainConfig(scale_eps="no")


def test_chapter_05_figures_before_after_scaling_and_ratio_panel():
    """The two-panel histogram names the share that underflows with and without the scale; the ratio
    panel draws each run's loss over the reference (the reference itself is the line y = 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nbhelpers import plots
    from nbhelpers.metrics import underflow_fraction
    from nbhelpers.training import TrainConfig, train

    rng = np.random.default_rng(0)
    g = {"a": 2.0 ** rng.uniform(-40, -20, 500), "w": 2.0 ** rng.uniform(-30, -10, 300)}
    left, right = plots.plot_gradient_histograms_scaled(g, "fp16", scale=2.0**16)
    allv = np.concatenate(list(g.values()))
    assert left.get_title().startswith(f"no loss scale: {underflow_fraction(allv, 'fp16'):.1%} underflow")
    assert right.get_title().startswith(f"loss scale 2^16: {underflow_fraction(allv * 2.0**16, 'fp16'):.1%} underflow")
    assert underflow_fraction(allv, "fp16") > 0.5 > underflow_fraction(allv * 2.0**16, "fp16")
    assert left.get_xlim() == right.get_xlim() and left.get_legend() is None and right.get_legend() is not None

    cfg = TrainConfig(steps=15, loss_multiplier=2.0**-12)
    runs = {"fp32": train("fp32", config=cfg), "fp16": train("fp16 + master, no scaling", config=cfg)}
    top, bottom = plots.plot_training_curves_vs_ref(runs, "fp32")
    ratios = [line.get_ydata() for line in bottom.get_lines()]
    np.testing.assert_array_equal(ratios[0], np.ones(15))
    np.testing.assert_array_equal(ratios[1], runs["fp16"].losses / runs["fp32"].losses)
    legend = bottom.get_legend()
    assert top.get_legend() is None and [t.get_text().split(" (")[0] for t in legend.get_texts()] == ["fp32", "fp16"]
    bottom.figure.canvas.draw()
    assert legend.get_window_extent().y1 <= bottom.xaxis.get_tightbbox().y0  # under the panels, off the data
    _, bottom = plots.plot_training_curves_vs_ref(runs, "fp32", ratio_ylim=(2.0, 3.0))
    assert bottom.get_ylim() == (2.0, 3.0) and len(bottom.texts) == 2  # both runs end off scale: named
    with pytest.raises(KeyError, match="bf16"):
        plots.plot_training_curves_vs_ref(runs, "bf16")
    plt.close("all")
