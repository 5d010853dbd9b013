"""Chapter 05's exercises beyond the table (test_exercises.py): the student's scaler meets
torch.amp.GradScaler itself; the settled scale predicted from the formats is measured by running
the chapter's scaler."""

import math
from fractions import Fraction

import numpy as np

from exercise_table import CHAPTERS
from helpers import SolutionNotebook
from nbhelpers.checks import cases_for, get_exercise
from nbhelpers.loss_scaling import DynamicLossScaler, gradscaler_trajectory
from nbhelpers.rounding import round_to

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 5)


def solution_functions() -> dict:
    return SolutionNotebook(SPEC.solution, SPEC.namespace).functions()


def test_solution_scaler_equals_gradscaler_on_hidden_sequences():
    """The exercise's reference is nbhelpers' scaler; here the student's solution meets GradScaler
    itself on some of the hidden random sequences (torch.amp.GradScaler("cpu"))."""
    ns = solution_functions()
    cases = [c for c in cases_for("ex05.scale_trajectory", 7) if not c.label][:15]
    for c in cases:
        seq, init, growth, backoff, interval = c.args
        if not 2.0**-60 < init < 2.0**60:
            continue  # GradScaler's unscale (grad * 1/scale) needs a moderate scale
        expected, _ = gradscaler_trajectory(seq, init, growth, backoff, interval)
        assert ns["scale_trajectory"](seq, init, growth, backoff, interval) == expected


# ---- ex05.settled_scale: the closed form (predicted from the formats) against a measurement


def measure_settled(max_abs_grad: float, init_scale: float, growth_interval: int) -> tuple[float, float, int]:
    """Run the chapter's DynamicLossScaler (GradScaler's rule, x2 / x0.5) on a gradient of largest
    magnitude max_abs_grad at every step, found_inf from really rounding max_abs_grad * scale to fp16
    (numpy's float16, round to nearest even), until the (scale used, skipped) sequence repeats.
    Returns the largest scale used on a taken step over the repeating cycle, the skipped fraction
    over one period (a float of the exact fraction), and the period measured."""
    scaler = DynamicLossScaler(init_scale, 2.0, 0.5, growth_interval)
    history = []
    window = 4 * (growth_interval + 1) + 8  # the last steps that must repeat: 4 of the longest period looked for

    def period_of_tail() -> int | None:
        """The smallest p <= growth_interval + 1 with which the last ``window`` steps repeat, or None."""
        tail = history[-window:]
        return next(
            (p for p in range(1, growth_interval + 2) if all(tail[i] == tail[i + p] for i in range(len(tail) - p))),
            None,
        )

    period, exact = None, set()
    with np.errstate(over="ignore"):
        while period is None:  # climbing or backing off never repeats: the scale moves every cycle
            assert len(history) < 400 * (growth_interval + 1), "no steady state"
            for _ in range(window):
                scale = scaler.scale
                # the product is exact in float64 for the cases (max_abs_grad has <= 29 significant
                # bits, the scale 24), so this is one rounding to fp16
                if scale not in exact:
                    assert Fraction(max_abs_grad) * Fraction(scale) == Fraction(max_abs_grad * scale)
                    exact.add(scale)
                found_inf = bool(np.isinf(np.float16(max_abs_grad * scale)))
                taken = scaler.update(found_inf)
                assert taken != found_inf
                history.append((scale, found_inf))
            period = period_of_tail()
    cycle = history[-period:]
    S = max(scale for scale, inf in cycle if not inf)
    skipped = Fraction(sum(inf for _, inf in cycle), period)
    return S, float(skipped), period


def test_settled_scale_closed_form_matches_a_measured_run():
    """Every public case, and the hidden seed's edge-free cases: the reference's (S, skipped), from the
    fp16 overflow threshold 65520 and float32's range, equals what a run of the scaler measures: S bit
    for bit, the skipped fraction exactly. The measured period is growth_interval + 1 (one growth
    attempt that overflows, then growth_interval good steps) or 1 (at float32's cap: no overflow)."""
    ex = get_exercise("ex05.settled_scale")
    cases = cases_for(ex, 0) + [c for c in cases_for(ex, SPEC.hidden_seed) if not c.label]
    periods = set()
    for c in cases:
        g, init, interval = c.args
        S, skipped = ex.reference(*c.args)
        mS, mskipped, period = measure_settled(g, init, interval)
        assert (mS, mskipped) == (S, skipped), c
        assert math.copysign(1.0, mS) == 1.0 and S > 0
        assert period == (1 if skipped == 0 else interval + 1), c
        periods.add(period == 1)
    assert periods == {True, False}  # both kinds of steady state are measured


def test_settled_scale_edge_cases_say_what_they_claim():
    """The labelled cases sit where the label says: the tie at 65520 rounds to inf in fp16, the value just
    below it to 65504, the cap case is refused by float32 (the course's round_to as a second oracle)."""
    by_label = {c.label: c.args for c in cases_for("ex05.settled_scale", 0) if c.label}
    with np.errstate(over="ignore"):
        assert float(np.float16(65520.0)) == math.inf and float(np.finfo(np.float16).max) == 65504.0
    g, init, n = by_label["scaled gradient exactly 65520 at 2**17: the tie rounds to inf"]
    with np.errstate(over="ignore"):
        assert g * 2.0**17 == 65520.0 and np.isinf(np.float16(g * 2.0**17))
    assert float(round_to(g * 2.0**17, "fp16")) == math.inf
    g, init, n = by_label["scaled gradient just below 65520 at 2**17: rounds to 65504"]
    assert float(np.float16(g * 2.0**17)) == 65504.0 == float(round_to(g * 2.0**17, "fp16"))
    g, init, n = by_label["scaled gradient 65510 at 2**16: above 65504, still finite"]
    assert 65504.0 < g * 2.0**16 < 65520.0 and float(np.float16(g * 2.0**16)) == 65504.0
    S, skipped = get_exercise("ex05.settled_scale").reference(
        *by_label["a tiny gradient: growth stops at float32's largest power-of-two multiple"]
    )
    with np.errstate(over="ignore"):
        assert S == 2.0**127 and skipped == 0.0 and not math.isfinite(float(np.float32(2 * S)))
    S, _ = get_exercise("ex05.settled_scale").reference(*by_label["even a scale of 1 overflows: the answer is below 1"])
    assert S < 1
