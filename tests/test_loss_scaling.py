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


def test_adam_first_step_shrink_follows_a_real_gradscaler_clip_and_adam():
    """The formula (normal gradient elements) against a real GradScaler + clip_grad_norm_ + Adam
    step in the wrong and the right order, on linear layers of 10,100 and 100,172 weights, at
    scales where eps does not matter yet, where it is starting to and where it rules."""
    from nbhelpers.loss_scaling import adam_first_step_shrink, clip_order_run

    for width in (100, 316):
        n = width * width + width
        for scale in (2.0**10, 2.0**16, 2.0**24):
            right = clip_order_run(width, width, "adam", True, init_scale=scale)
            wrong = clip_order_run(width, width, "adam", False, init_scale=scale)
            measured = right.update_norms[0] / wrong.update_norms[0]
            assert adam_first_step_shrink(n, scale, 0.5, right.grad_norms[0]) == pytest.approx(measured, rel=0.01)


def test_adam_first_step_norms_bounds_for_any_distribution():
    """The wrong order's step is at most max_norm / (S eps) and reaches it once every element is far
    below eps, whatever the distribution; the right order's is at most sqrt(n). A normal sample
    reproduces the quadrature; a heavy-tailed one (normal x lognormal) moves the shrink only where
    some elements come near eps."""
    from nbhelpers.loss_scaling import adam_first_step_norms, adam_first_step_shrink

    g = np.random.default_rng(5)
    normal = g.standard_normal(400_000)
    heavy = g.standard_normal(400_000) * np.exp(1.5 * g.standard_normal(400_000))
    for n in (1e6, 1e8, 7e9, 7e10):
        for S in (2.0**10, 2.0**16, 2.0**24):
            bound = 0.5 / (S * 1e-8)
            for x in (None, normal, heavy):
                right, wrong = adam_first_step_norms(n, S, 0.5, elements=x)
                assert wrong <= bound * (1 + 1e-9) and right <= math.sqrt(n) * (1 + 1e-9)
            assert adam_first_step_shrink(n, S, 0.5, elements=normal) == pytest.approx(
                adam_first_step_shrink(n, S, 0.5), rel=0.01
            )
    # far below eps, the wrong step is the bound for both, and heavy tails do not change it
    for x in (normal, heavy):
        assert adam_first_step_norms(1e8, 2.0**24, 0.5, elements=x)[1] == pytest.approx(
            0.5 / (2.0**24 * 1e-8), rel=0.01
        )
    # at 7e9 weights and 2^16 the heavy tail's largest elements near eps shrink the wrong step
    assert adam_first_step_shrink(7e9, 2.0**16, 0.5, elements=heavy) > 1.05 * adam_first_step_shrink(7e9, 2.0**16, 0.5)
    with pytest.raises(ValueError, match="elements"):
        adam_first_step_norms(1e6, 2.0**16, 0.5, elements=np.zeros(10))


def test_adam_first_step_shrink_limits():
    """No shrink without a clip or with a tiny n; far below eps the ratio is eps S sqrt(n) / max_norm
    (Adam's step is lr x / eps there); a larger scale or n always shrinks the step more."""
    from nbhelpers.loss_scaling import adam_first_step_shrink

    assert adam_first_step_shrink(10.0, 2.0**10, 0.5) == pytest.approx(1.0, abs=0.002)
    assert adam_first_step_shrink(1e6, 1.0, 0.5, true_norm=0.1) == 1.0  # neither order clips
    for n, scale in ((7e9, 2.0**16), (7e10, 2.0**24), (1e8, 2.0**24)):
        limit = 1e-8 * scale * math.sqrt(n) / 0.5
        # within the 2% that eps still takes from the right order's elements nearest zero
        assert adam_first_step_shrink(n, scale, 0.5) == pytest.approx(limit, rel=0.03)
    for n in (1e4, 1e6, 1e8):
        row = [adam_first_step_shrink(n, 2.0**e, 0.5) for e in (10, 16, 24, 37)]
        assert row == sorted(row)
    for e in (10, 16, 24):
        col = [adam_first_step_shrink(n, 2.0**e, 0.5) for n in (1e4, 1e6, 1e8, 1e10)]
        assert col == sorted(col)
    with pytest.raises(ValueError, match="n must be"):
        adam_first_step_shrink(0, 2.0**16, 0.5)
    with pytest.raises(ValueError, match="true_norm"):
        adam_first_step_shrink(1e6, 2.0**16, 0.5, true_norm=-1.0)


def test_clip_order_run_sgd_step_follows_the_scale_and_the_right_order_ignores_it():
    """In the wrong order every SGD step is max_norm / S (the clip always fires on S times the
    norm), halving at each doubling of the dynamic scale; in the right order the scale is divided
    out exactly (a power of two, float64), so the run does not depend on it at all."""
    from nbhelpers.loss_scaling import clip_order_run

    wrong = clip_order_run(16, 1, "sgd", False, 40, growth_interval=10)
    assert wrong.scales.tolist() == [2.0**e for e in (16, 17, 18, 19) for _ in range(10)]
    np.testing.assert_allclose(wrong.update_norms * wrong.scales, 0.5, rtol=1e-9)
    a = clip_order_run(16, 1, "sgd", True, 40, growth_interval=10)
    b = clip_order_run(16, 1, "sgd", True, 40, init_scale=2.0**4, growth_interval=10)
    np.testing.assert_array_equal(a.update_norms, b.update_norms)
    np.testing.assert_array_equal(a.grad_norms, b.grad_norms)
    assert a.grad_norms[0] == wrong.grad_norms[0]  # the same layer and batch at step 1
    assert np.all(a.update_norms <= 0.5 + 1e-12) and np.any(a.grad_norms > 0.5)


def test_clip_order_run_adam_in_the_wrong_order_shrinks_after_each_doubling():
    """Adam's second moment remembers the larger gradients from before a doubling: on 17 weights
    (elements far above eps) the two orders agree while the scale stays, and part ways once it
    doubles."""
    from nbhelpers.loss_scaling import clip_order_run

    right = clip_order_run(16, 1, "adam", True, 60, growth_interval=20)
    wrong = clip_order_run(16, 1, "adam", False, 60, growth_interval=20)
    ratio = right.update_norms / wrong.update_norms
    assert ratio[:20].max() < 1.05 and ratio[25:40].mean() > 1.1 and ratio[45:].mean() > ratio[25:40].mean()


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"optimizer": "lamb"}, "optimizer"),
        ({"n_in": 0}, "n_in"),
        ({"steps": 1.5}, "steps"),
        ({"max_norm": 0.0}, "max_norm"),
        ({"init_scale": -1.0}, "init_scale"),
        ({"growth_interval": 0}, "growth_interval"),
    ],
)
def test_clip_order_run_rejects_bad_arguments(bad, match):
    from nbhelpers.loss_scaling import clip_order_run

    args = {"n_in": 4, "n_out": 1, "optimizer": "sgd", "unscale_first": True} | bad
    with pytest.raises(ValueError, match=match):
        clip_order_run(**args)
