"""Chapter 05's exercises beyond the table (test_exercises.py): the window of usable scales against
casts by numpy and ml_dtypes, scale by scale; the constructions of exercise 2 judged right and
wrong; the settled scale predicted from the formats is measured by running the chapter's scaler."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from exercise_table import CHAPTERS

from nbhelpers.answer_keys.ch05 import (
    FP16_RANGE_BITS,
    LONG_INTERVALS,
    scale_window_ref,
    window_compare,
    window_gradients_compare,
    window_gradients_example,
)
from nbhelpers.checks import cases_for, get_exercise
from nbhelpers.loss_scaling import DynamicLossScaler
from nbhelpers.rounding import round_to

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 5)

# the formats of the window cases that numpy or ml_dtypes can cast to (IEEE-style, with inf)
_DTYPES = {
    (5, 10): np.float16,
    (5, 2): ml_dtypes.float8_e5m2,
    (4, 3): ml_dtypes.float8_e4m3,
    (8, 7): ml_dtypes.bfloat16,
}


def usable_by_casting(x: np.ndarray, e: int, max_underflow: float, dtype) -> bool | None:
    """Is 2**e usable for x, by casting x * 2**e with numpy or ml_dtypes? numpy's float16 rounds
    float64 once (to nearest even); ml_dtypes converts float64 through float32, so for its types
    every scaled value must be a float32 value (or far outside float32's range): None if not."""
    a = np.abs(np.asarray(x, dtype=np.float64)).ravel()
    a = a[a != 0]
    with np.errstate(over="ignore", under="ignore"):
        y = np.ldexp(a, e)
        if dtype is not np.float16:
            exact = (y.astype(np.float32) == y) | (np.abs(y) < 2.0**-150) | (np.abs(y) > 2.0**128)
            if not exact.all():
                return None
        y = y.astype(dtype).astype(np.float64)
    return bool(not np.isinf(y).any() and np.count_nonzero(y == 0) / a.size <= max_underflow)


def window_by_casting(x: np.ndarray, max_underflow: float) -> tuple[float, float] | None:
    """The fp16 window by a linear scan over the exponents with numpy's float16 casts."""
    usable = [e for e in range(-700, 700) if usable_by_casting(x, e, max_underflow, np.float16)]
    if not usable:
        return None
    assert usable == list(range(usable[0], usable[-1] + 1))  # an interval, as the exercise says
    return math.ldexp(1.0, usable[0]), math.ldexp(1.0, usable[-1])


@pytest.mark.parametrize("seed", [0, SPEC.hidden_seed])
def test_scale_window_reference_against_casts(seed):
    """Every fp16 case: the reference (bisection with round_to) gives the window that a scan of
    numpy's float16 casts gives. The cases in formats ml_dtypes has, with x rounded to float32 first
    (ml_dtypes rounds float64 through float32, twice next to a tie): the casts agree that lo and hi
    are usable and lo / 2 and 2 hi are not (where every scaled value is a float32 value)."""
    n_fp16 = n_other = 0
    for c in cases_for("ex05.scale_window", seed):
        x, f, eb, mb = c.args
        if (eb, mb) == (5, 10):
            assert scale_window_ref(*c.args) == window_by_casting(x, f), c
            n_fp16 += 1
        elif (eb, mb) in _DTYPES:
            x32 = np.asarray(x, dtype=np.float32).astype(np.float64)
            window = scale_window_ref(x32, f, eb, mb) if np.any(x32) else None
            if window is None:
                continue
            lo_e, hi_e = (int(math.log2(v)) for v in window)
            got = [usable_by_casting(x32, e, f, _DTYPES[(eb, mb)]) for e in (lo_e - 1, lo_e, hi_e, hi_e + 1)]
            if None not in got:
                assert got == [False, True, True, False], c
                n_other += 1
    assert n_fp16 > 25 and n_other > 5


def test_scale_window_edge_cases_say_what_they_claim():
    by_label = {c.label: scale_window_ref(*c.args) for c in cases_for("ex05.scale_window", 0) if c.label}
    assert by_label["one gradient of 1 in fp16"] == (2.0**-24, 2.0**15)
    assert by_label["65520 at 2**20: the tie rounds to inf"][1] == 2.0**19
    assert by_label["65519 at 2**20: above 65504, still finite"][1] == 2.0**20
    assert by_label["2**-25 at 2**30: the tie rounds to 0"][0] == 2.0**31
    assert by_label["2**-24 at 2**30: the smallest subnormal"][0] == 2.0**30
    assert by_label["one of four may underflow: exactly a quarter"] == (2.0**-15, 2.0**14)
    assert by_label["none may: 1e-12 needs a scale 3.0 overflows at"] is None
    assert by_label["zeros are not counted"] == (2.0**15, 2.0**15)
    assert by_label["e3m2: no power of two holds both"] is None


def test_scale_window_random_cases_reach_the_hard_places():
    """The random cases alone, for every seed the memorised-cases attack uses: elements on the underflow
    tie and on the overflow midpoint at an end of the window, fractions exactly max_underflow there,
    empty windows, several formats."""
    ex = get_exercise("ex05.scale_window")
    for seed in (0, 12345, 8142093377, 2**40 + 7):
        cases = [c for c in cases_for(ex, seed) if not c.label]
        windows = [ex.reference(*c.args) for c in cases]
        assert sum(w is None for w in windows) >= 3 and len({c.args[2:] for c in cases}) >= 5
        tie_lo = tie_hi = exact_f = 0
        for c, w in zip(cases, windows):
            if w is None:
                continue
            x, f, eb, mb = c.args
            a = np.abs(x[x != 0])
            lo, hi = w
            tiny = 2.0 ** (2 - 2 ** (eb - 1) - mb)
            top = (2 - 2.0**-mb) * 2.0 ** (2 ** (eb - 1) - 1)
            mid = top + 2.0 ** (2 ** (eb - 1) - 1 - mb) / 2
            tie_lo += bool(np.any(a * (lo / 2) == tiny / 2) or np.any(a * lo == tiny / 2))
            tie_hi += bool(np.any(a * (2 * hi) == mid))
            exact_f += f > 0 and np.count_nonzero(round_to(a * lo, f"e{eb}m{mb}") == 0) / a.size == f
        assert tie_lo >= 5 and tie_hi >= 5 and exact_f >= 3, (seed, tie_lo, tie_hi, exact_f)


def test_window_compare_names_the_scales_and_never_raises():
    assert window_compare((1.0, 2.0), (1.0, 2.0)) is None
    assert window_compare([1.0, 2.0], (1.0, 2.0)) is None
    assert window_compare(None, None) is None
    assert "2**-3" in window_compare((0.125, 2.0), (0.25, 2.0))
    assert "expected None" in window_compare((1.0, 2.0), None)
    for odd in ("abc", 3, (1.0,), (np.nan, 2.0), object(), [[1.0, 2.0]]):
        assert isinstance(window_compare(odd, (1.0, 2.0)), str)


def test_window_gradients_example_solves_every_case():
    """The course's construction has the property on every case of two seeds (so each case is
    solvable), and the cases stay within the range the statement promises."""
    ex = get_exercise("ex05.window_gradients")
    for seed in (0, SPEC.hidden_seed):
        for c in cases_for(ex, seed):
            n, lo, hi, f = c.args
            assert n >= 2 and lo <= hi <= lo * 2.0**FP16_RANGE_BITS and 0 <= f <= 0.5
            target = ex.reference(*c.args)
            assert window_gradients_compare(target.example, target) is None, c
            assert scale_window_ref(target.example, f, 5, 10) == (lo, hi)


def test_window_gradients_compare_judges_the_property():
    target = get_exercise("ex05.window_gradients").reference(10, 2.0**-3, 2.0**4, 0.1)
    x = window_gradients_example(10, 2.0**-3, 2.0**4, 0.1)
    assert window_gradients_compare(x, target) is None
    # another right answer: the values shuffled, zeros added (7 nonzero values: none may
    # underflow, so one at the bottom), the filler anywhere in between
    y = np.r_[x[:1], np.zeros(3), x[-1], np.full(5, 1.0)]
    assert window_gradients_compare(np.random.default_rng(0).permutation(y), target) is None
    # the right window, but lo / 2 fails by more values than it needs: three of 10, two of 7
    too_many = x.copy()
    too_many[2] = x[0]
    for z in (too_many, np.r_[x[:2], np.zeros(3), x[-1], np.full(4, 1.0)]):
        assert scale_window_ref(z, 0.1, 5, 10) == (2.0**-3, 2.0**4)
        assert "as few values as possible" in window_gradients_compare(z, target)
    assert "starts at" in window_gradients_compare(x * 1.5, target)
    assert "ends at" in window_gradients_compare(np.r_[x[:2], np.full(8, 65505.0 / 2**5)], target)
    for odd in (None, "abc", x[:9], np.r_[x[:9], np.nan], np.zeros(10), [[1.0] * 10], object(), x + 0j, {"a": 1}):
        reason = window_gradients_compare(odd, target)
        assert isinstance(reason, str) and reason


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
    attempt that overflows, then growth_interval good steps) or 1 (at float32's cap: no overflow).
    A case whose interval is too long to run (LONG_INTERVALS) is run with intervals 1, 2 and 3 from the
    same start: the same S each time, and the fraction 1 / (interval + 1) measured for each, or 0."""
    ex = get_exercise("ex05.settled_scale")
    cases = cases_for(ex, 0) + [c for c in cases_for(ex, SPEC.hidden_seed) if not c.label]
    periods, n_long = set(), 0
    for c in cases:
        g, init, interval = c.args
        S, skipped = ex.reference(*c.args)
        assert math.copysign(1.0, S) == 1.0 and S > 0
        if interval >= min(LONG_INTERVALS):
            n_long += 1
            for short in (1, 2, 3):
                mS, mskipped, period = measure_settled(g, init, short)
                assert mS == S and (mskipped == 0) == (skipped == 0), c
                assert mskipped in (0.0, 1 / (short + 1)), c
            assert skipped in (0.0, 1 / (interval + 1)), c
            continue
        mS, mskipped, period = measure_settled(g, init, interval)
        assert (mS, mskipped) == (S, skipped), c
        assert period == (1 if skipped == 0 else interval + 1), c
        periods.add(period == 1)
    assert periods == {True, False}  # both kinds of steady state are measured
    assert n_long > 30


@pytest.mark.parametrize("seed", [0, 1, 7, 12345, 2026, SPEC.hidden_seed])
def test_settled_scale_cases_are_too_long_to_step_through(seed):
    """Stepping the scaler until it settles and then through one cycle takes, over the cases of any
    seed, more than 10**11 steps (Python does about 10**7 a second): a loop that steps the rule
    cannot pass within the grader's 60 s; the closed form takes microseconds a case."""
    ex = get_exercise("ex05.settled_scale")
    total = 0
    for c in cases_for(ex, seed):
        g, init, interval = c.args
        S, _ = ex.reference(*c.args)
        doublings = max(0, round(math.log2(S / float(np.float32(init)))))  # the climb from below
        total += doublings * interval + interval + 1
    assert total > 1e11


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
    # around the cap: (S, skipped) as the labels say, and the measured scaler agrees
    top = float(np.finfo(np.float32).max)
    for label, S, skipped in [
        ("S = 2**126, one doubling below the cap: growth to 2**127 fits float32 and overflows fp16", 2.0**126, 0.2),
        ("capped at 2**127 although float32's largest value times the gradient overflows fp16", 2.0**127, 0.0),
        (
            "the same gradient with a scale of the form 3 * 2**k: 3 * 2**126 fits float32, growth overflows",
            3 * 2.0**125,
            0.2,
        ),
    ]:
        g, init, n = by_label[label]
        assert get_exercise("ex05.settled_scale").reference(g, init, n) == (S, skipped)
        assert measure_settled(g, init, n)[:2] == (S, skipped)
        assert 2 * S <= top or skipped == 0.0
    g, _, _ = by_label["capped at 2**127 although float32's largest value times the gradient overflows fp16"]
    assert g * top >= 65520.0


def test_every_window_case_can_be_met():
    """Every case of ex05.window_gradients, for 200 seeds, asks for a window that n values can
    have: the reference's own example has it (n = 2 with max_underflow 0.5 cannot: the value that
    may not underflow would set both ends alone, 2**40 apart, and the spec excludes it)."""
    from nbhelpers.answer_keys.ch05 import window_gradients_compare

    for seed in range(200):
        for case in cases_for("ex05.window_gradients", seed):
            target = get_exercise("ex05.window_gradients").reference(*case.args)
            assert window_gradients_compare(target.example, target) is None, (seed, case.args)


def test_misordered_clip_ratio_matches_torchs_clip_grad_norm_and_optimizers():
    """The reference against torch's own clip_grad_norm_ and a fresh SGD (lr 1) or Adam (its
    defaults) taking one step, in float64, on the exercise's gradients: the gradients are set on
    one parameter as S times the true ones, clipped and unscaled in both orders; the ratio of the
    two steps' norms, on the labelled cases and the last random ones of two seeds."""
    import torch

    ref = get_exercise("ex05.misordered_clip_ratio").reference

    def measured(grads, scale, max_norm, optimizer):
        steps = []
        for unscale_first in (False, True):
            p = torch.nn.Parameter(torch.zeros(len(grads), dtype=torch.float64))  # the step exactly
            opt = torch.optim.SGD([p], lr=1.0) if optimizer == "sgd" else torch.optim.Adam([p])
            p.grad = scale * torch.tensor(grads, dtype=torch.float64)  # what backward() leaves
            if unscale_first:
                p.grad.div_(scale)
                torch.nn.utils.clip_grad_norm_([p], max_norm)
            else:
                torch.nn.utils.clip_grad_norm_([p], max_norm)
                p.grad.div_(scale)
            opt.step()
            steps.append(float(torch.linalg.vector_norm(p.detach())))
        return steps[0] / steps[1]

    for seed in (0, 1):
        cases = cases_for("ex05.misordered_clip_ratio", seed)
        for case in [c for c in cases if c.label] + cases[-12:]:
            assert measured(*case.args) == pytest.approx(ref(*case.args), rel=1e-9), case


def test_misordered_clip_ratio_under_adam_depends_on_more_than_the_norm():
    """Two gradients of the same norm give the same SGD ratio and different Adam ratios once the
    wrong order's elements come near eps: the answer needs the elements, not just the norm."""
    ref = get_exercise("ex05.misordered_clip_ratio").reference
    flat_g = np.full(4096, 0.5 / 64)
    spiky = np.zeros(4096)
    spiky[:4] = 0.25
    for g in (flat_g, spiky):
        assert np.linalg.norm(g) == pytest.approx(0.5)
    assert ref(flat_g, 65536.0, 0.5, "sgd") == pytest.approx(ref(spiky, 65536.0, 0.5, "sgd"), rel=1e-12)
    a, b = ref(flat_g, 2.0**24, 0.5, "adam"), ref(spiky, 2.0**24, 0.5, "adam")
    assert a < 0.1 and b > 0.5  # the flat one's elements far below eps, the spiky one's near it


def test_settled_scale_cap_reached_exactly_by_an_all_ones_significand():
    # the cap tested with "<": wrong only when the scale can reach float32's largest value exactly,
    # from a start whose float32 significand is all ones (odds of 2**-23 in a random draw): a fixed case
    from helpers import SolutionNotebook

    from nbhelpers.answer_keys.ch05 import settled_scale_ref

    spec = next(c for c in CHAPTERS if c.chapter == 5)
    wrong = SolutionNotebook(spec.solution, spec.namespace).mutated(
        "settled_scale", "and s * 2 <= top", "and s * 2 < top"
    )
    case = next(c for c in cases_for("ex05.settled_scale", 0) if "all-ones" in (c.label or ""))
    assert settled_scale_ref(*case.args) == (float(np.finfo(np.float32).max), 0.0)
    assert wrong(*case.args) != settled_scale_ref(*case.args)


def _rounds_up_to(f: float, n: int) -> int | None:
    """c when f is below c / n although f * n rounds up to the count c in floats, else None."""
    c = f * n
    return int(c) if c == int(c) and f < Fraction(int(c), n) else None


def _falls_below(f: float, n: int) -> int | None:
    """c when f is the float c / n although f * n falls below the count c in floats, else None."""
    c = math.ceil(f * n)
    return c if 0 < c < n and f == c / n and f * n < c else None


@pytest.mark.parametrize("seed", [0, 12345, 8142093377, 2**40 + 7])
def test_window_cases_take_the_float_product_both_ways(seed):
    """The max_underflow of both window exercises sits where the float product with n rounds down
    across a count (c / n * n < c) and where it rounds up onto one (the float below c / n, times n,
    is c), on purpose, in the labelled cases and in the random cases of every seed the
    memorised-cases attack uses: a count fixed in one direction only fails either way."""
    for ex_id in ("ex05.scale_window", "ex05.window_gradients"):
        ex = get_exercise(ex_id)
        down = up = labelled = 0
        for c in cases_for(ex, seed):
            if ex_id == "ex05.scale_window":
                x, f = c.args[:2]
                n = int(np.count_nonzero(x))
            else:
                n, f = c.args[0], c.args[3]
            count = _rounds_up_to(f, n)
            if c.label and "it rounds to" in c.label:
                labelled += 1
                assert count is not None and f"it rounds to {count}" in c.label, c
                if ex_id == "ex05.scale_window":  # the count tells: one value more may underflow at c / n
                    assert scale_window_ref(x, f, 5, 10) != scale_window_ref(x, count / n, 5, 10)
                else:  # the reference puts count values at the bottom: count - 1 may underflow
                    example = ex.reference(*c.args).example
                    assert np.count_nonzero(example == example[0]) == count
            if c.label:
                continue
            up += count is not None
            down += _falls_below(f, n) is not None
        assert labelled >= 1 and up >= 3 and down >= 3, (ex_id, seed, labelled, up, down)


def test_clip_cases_put_the_scaled_norm_just_below_max_norm():
    """torch clips by max_norm / (norm + 1e-6) whenever that is below 1, so a scaled norm less
    than 1e-6 below max_norm is clipped, which "clip when norm > max_norm" misses: the labelled
    cases and a quarter of the random ones of any seed sit there, and the clip changes the answer
    by far more than the check's tolerance."""
    ex = get_exercise("ex05.misordered_clip_ratio")
    for seed in (0, 12345, 8142093377):
        near = 0
        for c in cases_for(ex, seed):
            g, scale, max_norm, opt = c.args
            scaled = scale * float(np.linalg.norm(g))
            if max_norm - 1e-6 < scaled <= max_norm:
                near += 1
                if opt == "sgd":
                    assert ex.reference(*c.args) < 1 - 1e-8, c
            if c.label and "5e-7 below" in c.label:
                assert max_norm - 1e-6 < scaled <= max_norm and ex.reference(*c.args) < 1 - 1e-6, c
        assert near >= 2 + 64 // 4, (seed, near)
