"""Chapter 04's exercises beyond the table (test_exercises.py): the labelled edge cases hold what
their labels say, the lost-update threshold's reference is confirmed by measurement (applying the
update), and its compare accepts float64 rounding differences and rejects odd values; the step at
which the bf16 copy of an fp32 master first moves is confirmed by running the loop."""

import ml_dtypes
import numpy as np
import pytest

from nbhelpers.answer_keys.ch04 import (
    BF16_MAX_STEPS,
    FP16_MAX_STEPS,
    LONG_ARRAYS,
    LONG_SIZE,
    THRESHOLD_RTOL,
    _copy_gap_toward,
    _master_grid,
    threshold_compare,
)
from nbhelpers.checks import cases_for, get_exercise
from nbhelpers.rounding import round_to


def test_edge_cases_hold_what_their_labels_say():
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


# ---- ex04.first_copy_change: the count predicted from the formats against the loop itself


def _to_copy(x: np.ndarray, fp16: bool) -> np.ndarray:
    return x.astype(np.float16) if fp16 else x.astype(ml_dtypes.bfloat16).astype(np.float32)


def run_master_loop(w: np.ndarray, g: np.ndarray, lr: np.ndarray, max_steps: int, chunk: int = 1024) -> np.ndarray:
    """The loop of the exercise, run for every element at once (lr per element, the copy's format from
    w's dtype: fp16 for float16, bf16 for float32): master = w in float32, master = master -
    float32(lr) * g in float32 each step, the copy rounded by numpy or ml_dtypes. The first step at
    which the copy differs from w; 0 where the master does not move at its first step (it never
    will: the same step from the same place). It steps ``chunk`` steps at a time with the masters in
    place, looks at the copies after each chunk, and replays the chunk one step at a time for the
    weights whose copy moved in it; it stops after ``max_steps``."""
    fp16 = w.dtype == np.float16
    w32 = w.astype(np.float32)
    step = lr.astype(np.float32) * g
    first = np.zeros(w.size, dtype=np.int64)
    live = np.flatnonzero((w32 - step) != w32)
    master, st, done = w32[live].copy(), step[live], 0
    while live.size and done < max_steps:
        start = master.copy()
        for _ in range(chunk):
            np.subtract(master, st, out=master)
        moved = np.flatnonzero(_to_copy(master, fp16) != w[live])
        if moved.size:
            m, s, k = start[moved], st[moved], np.zeros(moved.size, dtype=np.int64)
            for j in range(1, chunk + 1):
                m = m - s
                k[(k == 0) & (_to_copy(m, fp16) != w[live[moved]])] = done + j
            first[live[moved]] = k
            keep = np.ones(live.size, dtype=bool)
            keep[moved] = False
            live, master, st = live[keep], master[keep], st[keep]
        done += chunk
    return first


def _flat_cases(seed: int, fp16: bool, sample: int = 300):
    """The elements of one seed's cases whose copy is fp16 (or bf16), flattened, with lr and the
    reference's count each; ``sample`` elements of each long array."""
    ex = get_exercise("ex04.first_copy_change")
    rng = np.random.default_rng(seed)
    ws, gs, lrs, ks = [], [], [], []
    for c in cases_for(ex, seed):
        w, g, lr = c.args
        if (w.dtype == np.float16) != fp16:
            continue
        k = ex.reference(*c.args)
        assert k.shape == w.shape and k.dtype == np.int64, c.label
        w, g, k = w.ravel(), g.ravel(), k.ravel()
        if w.size > 1000:
            i = rng.choice(w.size, sample, replace=False)
            w, g, k = w[i], g[i], k[i]
        ws.append(w)
        gs.append(g)
        lrs.append(np.full(w.size, lr))
        ks.append(k)
    return tuple(np.concatenate(x) for x in (ws, gs, lrs, ks))


@pytest.mark.parametrize("seed", [0, 4321])
def test_first_copy_change_reference_is_the_loop(seed):
    """Every element of the cases of two seeds (300 of each long array) through the real loop: the
    same first step. bf16 copies move within 2**15 + 1 steps; fp16 subnormal ones take millions."""
    for fp16, most in ((False, BF16_MAX_STEPS), (True, FP16_MAX_STEPS)):
        w, g, lr, expected = _flat_cases(seed, fp16)
        if not fp16:
            assert np.array_equal(_to_copy(w, False), w) and np.array_equal(_to_copy(g, False), g)
        measured = run_master_loop(w, g, lr, int(expected.max()) + 1024)
        bad = np.flatnonzero(measured != expected)
        assert bad.size == 0, (w[bad[:5]], g[bad[:5]], lr[bad[:5]], expected[bad[:5]], measured[bad[:5]])
        assert expected.max() == most and (expected == 0).sum() > 10 and (expected == 1).sum() > 10


def test_first_copy_change_edge_cases_say_what_they_claim():
    ex = get_exercise("ex04.first_copy_change")
    by_label = {c.label: ex.reference(*c.args).tolist() for c in cases_for(ex, 0) if c.label}
    assert by_label["w = 1, up and down: the grid below 1 is finer"] == [2**13 + 1, 2**12 + 1]
    # 1 and 1.5 have an even last bit and stay on the tie; 1 + 2**-7 and 1.5 + 2**-7 move on it
    assert by_label["the master lands on the bf16 midpoint: the copy moves only from an odd last bit"] == [
        2**15 + 1,
        2**15,
        2**15 + 1,
        2**15,
    ]
    assert by_label["a step of half (and a whole) float32 spacing"] == [0, 2**15 + 1]
    # 1.5 and 2.5 spacings round to 2 (to even), 3.5 to 4
    assert by_label["1.5, 2.5, 3.5 float32 spacings per step"] == [2**14 + 1, 2**14 + 1, 2**13 + 1]
    assert by_label["no step: zero gradient, or lost"] == [0, 0, 0]
    a, b = by_label["2**-126 down: no finer binade below it; 2**-125 down: there is"]
    assert a == b
    # the float32 product lands on 0.5, 2.5, 4.5 spacings (to even: 0, 2, 4), or 1.5, 3.5 (2, 4); the
    # exact product lies a hair past each, and would round to 1, 3, 5 (then 1, 3)
    for label, units in (
        ("lr = 2**-10 / 3: float32(lr) * g rounds onto 0.5, 2.5 and 4.5 spacings, from a hair above", (0, 2, 4)),
        ("lr = 2**-10 / 25: float32(lr) * g rounds onto 1.5 and 3.5 spacings, from a hair below", (2, 4)),
    ):
        case = next(c for c in cases_for(ex, 0) if c.label == label)
        w, g, lr = case.args
        d32 = np.abs((np.float32(lr) * g).astype(np.float64)) / 2.0**-23
        exact = np.abs(g.astype(np.float64)) * float(np.float32(lr)) / 2.0**-23
        assert np.all(d32 - np.floor(d32) == 0.5) and np.all(exact != d32)
        assert np.array_equal(np.rint(d32), units) and np.all(np.rint(exact) != units)
        assert by_label[label] == [0 if u == 0 else 2**15 // u + 1 for u in units]
    assert by_label["an fp16 copy of 1, up and down: 11 significant bits"] == [2**12 + 1, 2**11 + 1]
    # 2**-14 down: fp16's gap below stays 2**-24 (subnormals), float32's spacing halves
    assert by_label[
        "fp16's smallest normal 2**-14, down and up: its gap stays 2**-24 below, the master's grid halves"
    ] == [
        2**13 + 1,
        2**12 + 1,
    ]
    # one float32 spacing a step over 2**23, 2**22, 2**21, 2**22 spacings; odd codes move on the tie
    assert by_label["fp16 subnormals 2**-24 (down, up), 3 * 2**-24, -2**-23 (down): millions of steps"] == [
        2**23,
        2**22,
        2**21,
        2**22 + 1,
    ]


def test_first_copy_change_random_cases_reach_the_hard_regions():
    """The random cases alone hold, for every seed the memorised-cases attack uses: ties on the
    midpoint from odd and from even weights, steps of exactly a half-integer number of float32
    spacings (even and odd below), steps lost in float32, powers of two moving down, subnormals; the
    three ways of forming the step (exact, lr unrounded, the float32 product unrounded) each rounding
    differently from the loop's; fp16 copies, normal and subnormal, and fp16's smallest normal."""
    ex = get_exercise("ex04.first_copy_change")
    for seed in (0, 12345, 8142093377, 2**40 + 7):
        cases = [c for c in cases_for(ex, seed) if not c.label]
        for fp16 in (False, True):
            picked = [c for c in cases if (c.args[0].dtype == np.float16) == fp16 and c.args[0].size < 1000]
            w = np.concatenate([c.args[0].ravel() for c in picked])
            g = np.concatenate([c.args[1].ravel() for c in picked])
            lr = np.concatenate([np.full(c.args[0].size, c.args[2]) for c in picked])
            k = np.concatenate([ex.reference(*c.args).ravel() for c in picked])
            v = _master_grid(w, g)
            code = w.view(np.uint16) if fp16 else w.view(np.uint32) >> 16
            odd = (code & 1) == 1
            units = np.abs(lr.astype(np.float32) * g).astype(np.float64) / v  # the step in float32 spacings
            n = np.rint(units)
            q = _copy_gap_toward(w, g) / 2 / np.maximum(n, 1) / v  # steps to the midpoint
            tie = (n >= 1) & (q == np.floor(q))  # the master lands on it
            assert (tie & odd & (n > 1)).sum() > 5 and (tie & ~odd & (n > 1)).sum() > 5, (seed, fp16)
            half = units - np.floor(units) == 0.5
            below = np.floor(units) % 2  # the integer below a half-integer: even or odd
            assert (half & (below == 0)).sum() > 5 and (half & (below == 1)).sum() > 5, (seed, fp16)
            # the step formed three other ways crosses a half-integer that the loop's sits on
            exact = np.abs(lr * g.astype(np.float64)) / v
            lr_unrounded = np.abs((lr * g.astype(np.float64)).astype(np.float32)).astype(np.float64) / v
            unrounded = np.abs(lr.astype(np.float32).astype(np.float64) * g.astype(np.float64)) / v
            for other in (exact, lr_unrounded, unrounded):
                assert ((np.rint(other) != n) & (k > 0)).sum() > 3, (seed, fp16)
            a = np.abs(w.astype(np.float64))
            down = (a > 0) & (np.sign(w) == np.sign(g))
            pow2 = np.frexp(a)[0] == 0.5
            assert (down & pow2 & (k > 1)).sum() > 20 and (k == 1).sum() > 3 and ((k == 0) & (g != 0)).sum() > 2
            assert (odd & (k > 1)).sum() > 20 and (~odd & (k > 1)).sum() > 20
            if fp16:
                assert ((a < 2.0**-14) & (k > BF16_MAX_STEPS)).sum() > 10  # longer than any bf16 copy takes
                assert (down & (a == 2.0**-14) & (k > 1)).sum() >= 1
            else:
                assert ((a > 0) & (a < 2.0**-126) & (k > 1)).sum() > 10 and (w == 0).sum() > 5
                assert (down & pow2 & (a > 2.0**-126) & (k > 1)).sum() > 10
                assert (down & (a == 2.0**-126) & (k > 1)).sum() >= 1 and (k > 1000).sum() > 50


@pytest.mark.parametrize("seed", [0, 1, 7, 12345, 2026, 4321])
def test_first_copy_change_is_out_of_a_loops_reach(seed):
    """The long arrays: a loop that steps each master until its copy moves (and no further) takes
    more than 10**12 element-steps over the cases of any seed; numpy's fastest, a float32 subtraction
    in place, does about 10**10 a second, so stepping needs minutes where the grader allows 60 s. The
    reference counts them in well under a second."""
    ex = get_exercise("ex04.first_copy_change")
    cases = cases_for(ex, seed)
    long = [c for c in cases if c.args[0].size > 1000]
    assert len(long) == LONG_ARRAYS and all(c.args[0].size >= 0.9 * LONG_SIZE for c in long)
    steps = sum(int(ex.reference(*c.args).sum()) for c in cases)
    assert steps > 10**12


def _sampled_mth_moves(w0, g0, lr, m, copies, rng, max_steps=40_000):
    """The step at which each of ``copies`` copies of each weight makes its m-th move, each step
    rounding w - lr * g (in float64) stochastically to bf16 with round_to."""
    w = np.repeat(w0[None, :].astype(np.float64), copies, axis=0)
    step = lr * g0.astype(np.float64)
    moves = np.zeros(w.shape, dtype=np.int64)
    done = np.zeros(w.shape, dtype=np.int64)
    for k in range(1, max_steps + 1):
        new = round_to(w - step, "bf16", "stochastic", rng)
        moves += (new != w) & (done == 0)
        w = new
        done[(moves == m) & (done == 0)] = k
        if (done > 0).all():
            return done
    raise AssertionError("some copies did not make their m-th move")


def test_expected_mth_move_is_the_mean_of_sampled_moves():
    """The reference against sampling: 1,000 copies of each weight whose expected step is within
    reach (the labelled cases and random elements of seed 0, certain steps and crossings of
    binades and of zero among them), the step of each copy's m-th move; the mean lies within 4
    standard errors of the reference (and equals it where every step is certain). The step is
    applied in float64, so only elements whose step is far above float64's rounding of w are kept."""
    ex = get_exercise("ex04.expected_mth_move")
    rng = np.random.default_rng(11)
    n_sampled = 0
    for seed in (0,):
        for case in cases_for(ex, seed):
            w0, g0, lr, m = (a.reshape(-1) if isinstance(a, np.ndarray) else a for a in case.args)
            expected = ex.reference(*case.args).reshape(-1)
            d = lr * np.abs(g0.astype(np.float64))
            keep = np.isfinite(expected) & (expected < 2100) & (d > np.abs(w0) * 2.0**-40)
            if not case.label:
                keep &= expected < 400  # the random cases: a sample of the reachable ones
            if not keep.any():
                continue
            done = _sampled_mth_moves(w0[keep], g0[keep], lr, m[keep], 1000, rng)
            mean = done.mean(axis=0)
            sem = done.std(axis=0) / np.sqrt(done.shape[0])
            ok = np.abs(mean - expected[keep]) <= 4 * sem + 1e-3  # a floor: a wait of 1 + 1e-5 steps
            assert ok.all(), (seed, case.label, w0[keep][~ok], g0[keep][~ok], lr, m[keep][~ok], mean[~ok])
            n_sampled += int(keep.sum())
    assert n_sampled > 60


def test_expected_mth_move_cases_keep_their_promise():
    """Every case keeps what the statement promises: once a step is larger than the gap ahead, every
    later step up to the m-th move is too; so the single-gap walk's gaps ahead are at least d on a
    prefix of its first m values (the weights of a certain phase move 2d a step at most, which the
    cases leave no room to reach zero or, away from zero, a gap above d), and no walk leaves bf16's
    finite range. A step equal to the gap ahead promises nothing: the cases have walks where the
    gap ahead equals d and a later one is wider, so an answer that counts every step certain from
    such a value fails."""
    from nbhelpers.answer_keys.ch04 import _bf16_at, _bf16_ordinal

    ex = get_exercise("ex04.expected_mth_move")
    for seed in (0, 1, 4321):
        equal_then_wider = 0
        for case in cases_for(ex, seed):
            w, g, lr, m = (a.reshape(-1) if isinstance(a, np.ndarray) else a for a in case.args)
            o, s = _bf16_ordinal(w), np.where(g < 0, 1, -1)
            d = lr * np.abs(g.astype(np.float64))
            for i in np.flatnonzero(g != 0):
                walk = o[i] + s[i] * np.arange(m[i] + 1)
                assert np.abs(walk).max() < 0x7F80  # finite
                v = _bf16_at(walk)
                gaps = np.abs(np.diff(v))
                wide = gaps >= d[i]
                # a step equal to a gap ahead, then a wider gap: the promise must not cover it
                eq, wider = np.flatnonzero(gaps == d[i]), np.flatnonzero(gaps > d[i])
                equal_then_wider += bool(eq.size and wider.size and eq[0] < wider[-1])
                j = int(np.argmin(wide)) if not wide.all() else int(m[i])
                assert wide[:j].all() and not wide[j:].any(), (case.label, w[i], g[i], lr, m[i])
                if j < m[i]:  # a certain phase: it stays where every gap ahead is at most d
                    u = v[j]
                    reach = 2 * d[i] * (m[i] - j)
                    toward = np.sign(u) != s[i] and u != 0
                    if toward:
                        assert reach <= abs(u) or m[i] - j == 1 or case.label, (w[i], g[i], lr, m[i])
                    else:
                        top = 2.0 ** (np.frexp(d[i])[1] + 7)
                        assert abs(u) + reach < top or m[i] - j == 1, (w[i], g[i], lr, m[i])
        assert equal_then_wider > 0, seed


# ---- ex04.stalled_kahan_update: (lo, hi), each confirmed by running its loop


def _torch_kahan_moves(w: np.ndarray, delta: np.ndarray, steps: int = 1500) -> np.ndarray:
    """Whether the chapter's own kahan_update (torch, bf16 weights and buffer) moves w within
    ``steps`` steps of the constant update delta (the buffer stalls within about 2**9 of them)."""
    import torch

    from nbhelpers.training import kahan_update

    w0 = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).to(torch.bfloat16)
    d = torch.from_numpy(np.ascontiguousarray(delta, dtype=np.float32))
    wt, c = w0.clone(), torch.zeros_like(w0)
    moved = torch.zeros(w0.shape, dtype=torch.bool)
    for _ in range(steps):
        wt, c = kahan_update(wt, c, d)
        moved |= wt != w0
    return moved.numpy()


def _kahan_targets(seed: int):
    """(w, sign, K, lo, hi), flat, over all the cases of a seed, and the cases."""
    ex = get_exercise("ex04.stalled_kahan_update")
    cases = cases_for(ex, seed)
    targets = [ex.reference(*c.args) for c in cases]
    flat = [np.concatenate([getattr(t, k).ravel() for t in targets]) for k in ("w", "sign", "K", "lo", "hi")]
    return cases, flat


def test_kahan_cases_stay_in_the_promised_range_and_are_too_many_to_search():
    from nbhelpers.answer_keys.ch04 import KAHAN_K_RANGE, KAHAN_W_RANGE, LONG_KAHAN_ARRAYS, LONG_KAHAN_SIZE

    for seed in (0, 4321):
        cases, (w, sign, K, lo, hi) = _kahan_targets(seed)
        for c in cases:
            cw, csign, cK = c.args
            assert cw.dtype == csign.dtype == np.float32 and cK.dtype == np.int64, c.label
            assert cw.shape == csign.shape == cK.shape, c.label
        assert np.all((np.abs(w) >= KAHAN_W_RANGE[0]) & (np.abs(w) <= KAHAN_W_RANGE[1]))
        assert np.all(w.astype(ml_dtypes.bfloat16).astype(np.float32) == w)
        assert np.all((K >= KAHAN_K_RANGE[0]) & (K <= KAHAN_K_RANGE[1]))
        assert set(np.unique(sign)) == {-1.0, 1.0}
        assert np.all(np.sign(lo) == sign) and np.all(np.sign(hi) == sign)
        assert sum(c.args[0].size >= LONG_KAHAN_SIZE for c in cases) == LONG_KAHAN_ARRAYS
        assert (lo > hi).any() and (lo < hi).any()  # the interval is empty for some, not for all
        # the budgets reach the edges where the fewest spacings a step change, both ways
        n = 2**15 // K + 1
        assert len(np.unique(n)) > 50 and np.isin(K, 2 ** np.arange(9, 16)).any()


def test_kahan_hi_is_measured_by_the_loop():
    """On every weight of two seeds' cases (the long arrays too) the Kahan loop never applies hi and
    applies the next float32 update above it, and larger ones up to 2**10 times hi; the chapter's
    kahan_update (torch) agrees on a sample. Below 2**-116 the rule fails, hence the promised range."""
    from nbhelpers.answer_keys.ch04 import _kahan_moves, kahan_stall_limit

    rng = np.random.default_rng(5)
    for seed in (0, 4321):
        _, (w, sign, K, lo, hi) = _kahan_targets(seed)
        assert not _kahan_moves(w, hi).any()
        above = np.nextafter(hi, hi * 2)
        assert _kahan_moves(w, above).all()
        larger = (hi.astype(np.float64) * (1 + np.exp2(rng.uniform(-16, 10, size=w.size)))).astype(np.float32)
        assert _kahan_moves(w, larger).all()
        pick = rng.choice(w.size, size=3000, replace=False)
        assert not _torch_kahan_moves(w[pick], hi[pick]).any()
        assert _torch_kahan_moves(w[pick], above[pick]).all()
    w = np.float32([2.0**-120, 1.5 * 2.0**-120])
    sign = np.float32([1.0, 1.0])
    hi = kahan_stall_limit(w, sign)
    assert not _kahan_moves(w, np.nextafter(hi, hi * 2)).any()


def _master_moves_within(w: np.ndarray, delta: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Exercise 2's loop run for max(K) steps: whether each bf16 copy changes at a step k <= K."""
    master = w.astype(np.float32)
    first = np.zeros(w.shape, dtype=np.int64)
    for k in range(1, int(K.max()) + 1):
        master = master + delta
        moved = (master.astype(ml_dtypes.bfloat16).astype(np.float32) != w) & (first == 0)
        first[moved] = k
    return (first > 0) & (first <= K)


def test_kahan_lo_is_measured_by_the_masters_loop():
    """On a sample of two seeds' weights (half of them at the budgets' edges), the master moves its
    copy within K steps with lo, and not with the float32 update just below it."""
    rng = np.random.default_rng(6)
    for seed in (0, 4321):
        _, (w, sign, K, lo, hi) = _kahan_targets(seed)
        pick = rng.choice(w.size, size=1500, replace=False)
        w, K, lo = w[pick], K[pick], lo[pick]
        assert _master_moves_within(w, lo, K).all()
        below = np.nextafter(lo, np.float32(0))
        assert not _master_moves_within(w, below, K).any()


def test_kahan_compare_judges_exactly_and_never_raises():
    ex = get_exercise("ex04.stalled_kahan_update")
    w = np.float32([1.0, 1.0, 1.0 + 2.0**-7, -3.0])
    sign = np.float32([1.0, -1.0, 1.0, 1.0])
    K = np.array([513, 1024, 1024, 32769])
    t = ex.reference(w, sign, K)
    assert t.hi[0] == np.float32(2.0**-17 * (1 + 2.0**-16)) and t.hi[1] == -t.hi[0] / 2
    assert ex.compare((t.lo, t.hi), t) is None
    assert ex.compare([t.lo.copy(), t.hi.copy()], t) is None
    assert "hi: 4 of 4 values differ" in ex.compare((t.lo, (t.hi / (1 + 2.0**-16)).astype(np.float32)), t)
    assert "lo: 1 of 4" in ex.compare((np.where(K == 513, np.nextafter(t.lo, 1), t.lo), t.hi), t)
    assert "expected 7.6295" in ex.compare((t.lo, t.hi * np.float32(2)), t)
    assert "dtype float64" in ex.compare((t.lo.astype(np.float64), t.hi), t)
    assert "shape" in ex.compare((t.lo[:3], t.hi), t)
    hi_nan = t.hi.copy()
    hi_nan[2] = np.nan
    odds = (None, "abc", t.hi, (t.lo,), (t.lo, t.hi, t.hi), (t.lo, hi_nan), (t.lo, -t.hi), (object(), t.hi), {"a": 1})
    for odd in odds:
        reason = ex.compare(odd, t)
        assert isinstance(reason, str) and reason, odd
