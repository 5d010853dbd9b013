"""Chapter 04's exercises beyond the table (test_exercises.py): the labelled edge cases hold what
their labels say, the lost-update threshold's reference is confirmed by measurement (applying the
update), and its compare accepts float64 rounding differences and rejects odd values."""

import numpy as np
import pytest

from nbhelpers.checks import cases_for, get_exercise
from nbhelpers.answer_keys.ch04 import THRESHOLD_RTOL, threshold_compare
from nbhelpers.rounding import round_to


def test_edge_cases_hold_what_their_labels_say():
    ex = get_exercise("ex04.master_weight_step")
    case = next(c for c in cases_for(ex, 0) if "copy stays at 1" in c.label)
    new_master, weights = ex.reference(*case.args)
    assert new_master[0] != 1.0 and weights[0] == 1.0
    ex = get_exercise("ex04.lost_update_threshold")
    case = next(c for c in cases_for(ex, 0) if "the gap below 1 is half" in c.label)
    up, down = ex.reference(*case.args)
    assert up == 2 * down
    case = next(c for c in cases_for(ex, 0) if "no halving" in c.label)
    t = ex.reference(*case.args)
    assert t[0] == t[1] == t[2]  # 2**-126 down, 2**-125 down, -2**-126 toward zero: all a gap of 2**-133
    case = next(c for c in cases_for(ex, 0) if "zero gradient" in c.label)
    assert np.all(np.isinf(ex.reference(*case.args)))


def _applied(w: np.ndarray, g: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """round_bf16(w - lr * g), rounded once. w - lr * g is computed in float64: its rounding
    errors are a few 2**-53 of |w| (or of the gap, near zero), while lr = t * (1 -+ 2**-20) puts
    the exact value 2**-20 half-gaps (at least 2**-29 |w|, or 2**-154 near zero, which float64
    holds far above its own rounding there) from the midpoint: float64 cannot move it across."""
    return round_to(w.astype(np.float64) - lr * g.astype(np.float64), "bf16")


@pytest.mark.parametrize("seed", [0, 1, 4321])
def test_threshold_reference_is_confirmed_by_measurement(seed):
    ex = get_exercise("ex04.lost_update_threshold")
    n_checked = 0
    for case in cases_for(ex, seed):
        w, g = case.args
        t = ex.reference(w, g)
        assert t.shape == w.shape and t.dtype == np.float64
        assert np.array_equal(np.isinf(t), g == 0), case.label
        moves = g != 0
        w_, g_, t_ = w[moves], g[moves], t[moves]
        below = _applied(w_, g_, t_ * (1 - 2.0**-20))
        above = _applied(w_, g_, t_ * (1 + 2.0**-20))
        assert np.all(below == w_), (case.label, w_[below != w_], g_[below != w_])
        assert np.all(above != w_), (case.label, w_[above == w_], g_[above == w_])
        # and the update that survives just lands on the neighbour toward -g
        assert np.all(np.sign(above - w_) == -np.sign(g_))
        n_checked += int(moves.sum())
    assert n_checked > 1000


def test_threshold_cases_reach_the_hard_regions():
    """The random cases alone (no labelled ones) hold weights at every hard place, in both
    directions, for every seed the memorised-cases attack uses."""
    ex = get_exercise("ex04.lost_update_threshold")
    for seed in (0, 12345, 8142093377, 2**40 + 7):
        cases = [c for c in cases_for(ex, seed) if not c.label]
        w = np.concatenate([c.args[0].ravel() for c in cases]).astype(np.float64)
        g = np.concatenate([c.args[1].ravel() for c in cases]).astype(np.float64)
        down = (w != 0) & (np.sign(w) == np.sign(g))
        frac, _ = np.frexp(np.abs(w))
        pow2 = (frac == 0.5) & (np.abs(w) > 2.0**-126)
        assert (down & pow2).sum() > 20 and (~down & pow2 & (g != 0)).sum() > 20
        assert (down & (np.abs(w) == 2.0**-126)).sum() >= 2
        assert ((w != 0) & (np.abs(w) < 2.0**-126)).sum() > 50 and (w == 0).sum() > 10
        assert (g == 0).sum() > 10 and ((g != 0) & (np.abs(g) < 2.0**-126)).sum() > 10


def test_threshold_compare_tolerance_and_odd_values():
    e = np.array([1.0, np.inf, 3e-40, 5.0])
    assert threshold_compare(e.copy(), e) is None
    assert threshold_compare(e * (1 + 2 * 2.0**-52), e) is None  # a couple of ulps: accepted
    assert threshold_compare(e * (1 + 2.0**-40), e) is not None
    assert threshold_compare(e.astype(np.float32), e) is not None  # float32 rounding is far too coarse
    got = e.copy()
    got[1] = 1e300
    assert threshold_compare(got, e) is not None  # inf must be inf
    got = e.copy()
    got[0] = np.nan
    assert threshold_compare(got, e) is not None
    assert threshold_compare(e[:3], e) is not None
    assert THRESHOLD_RTOL == 4 * 2.0**-52

    class Hostile:
        def __array__(self, *a, **k):
            raise RuntimeError("no")

    for odd in (None, "abc", [1, 2], Hostile(), object(), np.array(["a", "b", "c", "d"]), 1.0):
        reason = threshold_compare(odd, e)
        assert isinstance(reason, str) and reason
    before = e.copy()
    threshold_compare(e, before)
    assert np.array_equal(e, before)
