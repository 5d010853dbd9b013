"""nbhelpers.loss_scaling: the dynamic scaler against the outside oracle torch.amp.GradScaler("cpu"),
bit for bit, its edges and defaults, the static scaler, and the argument checks."""
import math

import numpy as np
import pytest

from nbhelpers.loss_scaling import (
    DynamicLossScaler,
    DynamicScale,
    StaticLossScaler,
    StaticScale,
    gradscaler_trajectory,
    scale_trajectory,
)
from helpers import one_torch_thread  # noqa: F401  (autouse: the tests run torch on one thread)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dynamic_scaler_follows_gradscaler_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for _ in range(6):
        n = int(rng.integers(20, 120))
        seq = [bool(v) for v in rng.random(n) < rng.uniform(0.02, 0.4)]
        args = (float(rng.choice([2.0**16, 1000.0, 3.0, 0.1])), float(rng.choice([2.0, 1.5, 1.1, 3.0])),
                float(rng.choice([0.5, 0.3, 0.25, 0.9])), int(rng.integers(1, 7)))
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
    assert gradscaler_trajectory([False] * 4, 3.0e38, 2.0, 0.5, 1)[0] == scale_trajectory([False] * 4, 3.0e38, 2.0, 0.5, 1)
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


@pytest.mark.parametrize("bad", [
    {"init_scale": 0.0}, {"init_scale": math.inf}, {"growth_factor": 1.0}, {"backoff_factor": 1.5},
    {"growth_interval": 0}, {"growth_interval": 2.5}, {"init_scale": "big"},
])
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
