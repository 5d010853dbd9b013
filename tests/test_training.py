"""nbhelpers.training: the update rules against outside oracles (ml_dtypes and numpy casts,
torch.optim.Adam), the update-rule table, the model, the training loop's invariants and the
chapter's claims, and smoke tests of the chapter 04/05 plot helpers on training results."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import ml_dtypes
import numpy as np
import pytest
import torch
from helpers import one_torch_thread  # noqa: F401  (autouse: the tests run torch on one thread)

from nbhelpers import plots
from nbhelpers.formats import FORMATS, ulp
from nbhelpers.loss_scaling import DynamicScale, StaticScale
from nbhelpers.rounding import round_to
from nbhelpers.training import (
    COMPUTE_FORMATS,
    REGIMES,
    UPDATE_STEPS,
    AdamState,
    Regime,
    TeacherStudentTask,
    TrainConfig,
    UpdateRule,
    adam_delta,
    adam_noisy_steps,
    adam_second_moment,
    adam_step_anatomy,
    kahan_update,
    master_update,
    mlp_forward,
    nearest_update,
    relative_final_loss,
    sgd_master_step,
    stochastic_update,
    torch_adam_moments,
    train,
    train_seeds,
)

BF16 = ml_dtypes.bfloat16


def bf16_values(rng, n, lo=-12, hi=4):
    x = rng.choice([-1.0, 1.0], size=n) * np.exp2(rng.uniform(lo, hi, size=n))
    return x.astype(np.float32).astype(BF16).astype(np.float32)


# ------------------------------------------------------------------ update rules vs casts


def test_nearest_update_is_the_ml_dtypes_cast_of_the_fp32_sum():
    rng = np.random.default_rng(0)
    w = bf16_values(rng, 5000)
    d = (np.abs(w) * np.exp2(rng.uniform(-12, -2, w.size)) * rng.choice([-1, 1], w.size)).astype(np.float32)
    got = nearest_update(torch.from_numpy(w).to(torch.bfloat16), torch.from_numpy(d)).float().numpy()
    want = (w + d).astype(BF16).astype(np.float32)
    assert np.array_equal(got, want)
    # the chapter's opening example: 1 + 3e-5 is 1 in bf16, 0.01 + 3e-5 too; fp16 keeps the second
    one = torch.tensor([1.0, 0.01], dtype=torch.bfloat16)
    assert torch.equal(nearest_update(one, torch.full((2,), 3e-5)), one)
    half = torch.tensor([1.0, 0.01], dtype=torch.float16)
    assert nearest_update(half, torch.full((2,), 3e-5)).tolist() == [1.0, (half[1:].float() + 3e-5).half().item()]
    assert nearest_update(half, torch.full((2,), 3e-5))[1] != half[1]


def test_stochastic_update_lands_on_a_neighbour_and_is_unbiased():
    rng = np.random.default_rng(1)
    w = torch.full((20000,), 1.0, dtype=torch.bfloat16)
    d = torch.full((20000,), 2.0**-10)  # a quarter of bf16's spacing at 1 (2**-7)... times one half
    out = stochastic_update(w, d, rng).float().numpy()
    assert set(np.unique(out)) <= {1.0, 1.0 + 2.0**-7}
    p_up = np.mean(out > 1)
    assert abs(p_up - 2.0**-10 / 2.0**-7) < 4 * math.sqrt(0.125 * 0.875 / out.size)
    again = stochastic_update(w, d, np.random.default_rng(1)).float().numpy()
    assert np.array_equal(out, again)  # same seed, same draws
    with pytest.raises(TypeError, match="bf16 or fp16"):
        stochastic_update(w.float(), d, rng)


def test_master_update_and_sgd_step_vs_numpy():
    rng = np.random.default_rng(2)
    master = (rng.standard_normal(3000) * 0.3).astype(np.float32)
    grad = bf16_values(rng, 3000, -14, 0)
    for lr in (1e-3, 0.1, 3e-4):
        new, w = sgd_master_step(master, grad, lr)
        want = master - np.float32(lr) * grad
        assert new.dtype == np.float32 and np.array_equal(new, want)
        assert np.array_equal(w, want.astype(BF16).astype(np.float32))
    m_t, w_t = master_update(torch.from_numpy(master), torch.from_numpy(grad), torch.float16)
    assert w_t.dtype == torch.float16 and torch.equal(w_t, m_t.half())
    with pytest.raises(TypeError, match="float32"):
        sgd_master_step(master.astype(np.float64), grad, 0.1)
    with pytest.raises(ValueError, match="shape"):
        sgd_master_step(master[:5], grad[:4], 0.1)


def kahan_numpy(w, c, delta):
    y = delta - c
    s = (w + y).astype(BF16).astype(np.float32)
    return s, ((s - w) - y).astype(BF16).astype(np.float32)


def test_kahan_update_vs_numpy_and_it_keeps_what_rounding_drops():
    rng = np.random.default_rng(3)
    w = bf16_values(rng, 4000, -6, 2)
    c = np.zeros_like(w)
    for _ in range(20):
        d = (np.abs(w) * np.exp2(rng.uniform(-14, -6, w.size))).astype(np.float32)
        s_t, c_t = kahan_update(
            torch.from_numpy(w).to(torch.bfloat16), torch.from_numpy(c).to(torch.bfloat16), torch.from_numpy(d)
        )
        s_n, c_n = kahan_numpy(w, c, d)
        assert np.array_equal(s_t.float().numpy(), s_n) and np.array_equal(c_t.float().numpy(), c_n)
        w, c = s_n, c_n
    # 4096 updates of 1e-4 to a weight of 1: round to nearest never moves, Kahan tracks the sum
    w_rn = w_k = torch.ones(1, dtype=torch.bfloat16)
    c_k = torch.zeros(1, dtype=torch.bfloat16)
    for _ in range(4096):
        d = torch.full((1,), 1e-4)
        w_rn = nearest_update(w_rn, d)
        w_k, c_k = kahan_update(w_k, c_k, d)
    exact = 1 + 4096 * float(np.float32(1e-4))
    assert w_rn.item() == 1.0  # lost all 0.41 of it
    # the bf16 buffer rounds too, so a small drift remains: a few percent of what RN loses
    assert abs(w_k.item() - exact) < 0.05 * (exact - 1)


def test_bf16_second_moment_cannot_decay_with_beta2_0999():
    # every positive finite bf16 v: 0.999 * v rounds back to v (ml_dtypes cast of the fp32 product as
    # the oracle, and the course's rounding of the exact product); 0.99 * v moves every normal one
    codes = np.arange(1, 0x7F80, dtype=np.uint16)
    vals = codes.view(BF16).astype(np.float32)
    assert np.array_equal((vals * np.float32(0.999)).astype(BF16).astype(np.float32), vals)
    assert np.array_equal(round_to(0.999 * vals.astype(np.float64), "bf16"), vals)
    normal = vals >= 2.0**-126
    assert not np.any(round_to(0.99 * vals[normal].astype(np.float64), "bf16") == vals[normal])
    # the trace: fp32 follows the closed form c (1 - beta2^t); bf16 round to nearest never decreases
    # and gets stuck; stochastic rounding follows fp32 on average
    T1, T2, n = 1000, 3000, 64
    g2 = np.concatenate([np.full(T1, 1.0), np.full(T2, 1e-4)])[:, None] * np.ones((1, n))
    fp32 = adam_second_moment(g2, 0.999, "fp32")
    t = np.arange(1, T1 + 1)
    assert np.allclose(fp32[:T1, 0], 1 - 0.999**t, rtol=1e-4)
    rn = adam_second_moment(g2, 0.999, "bf16")
    assert np.all(np.diff(rn, axis=0) >= 0) and rn[-1, 0] == rn[T1 - 1, 0] == 0.25
    sr = adam_second_moment(g2, 0.999, "bf16", "stochastic", rng=np.random.default_rng(0))
    assert np.all(np.abs(sr[[T1 - 1, -1]].mean(axis=1) / fp32[[T1 - 1, -1], 0] - 1) < 0.02)
    assert fp32[-1, 0] < 0.1 * fp32[T1 - 1, 0]
    with pytest.raises(ValueError, match="non-negative"):
        adam_second_moment(-g2)
    with pytest.raises(ValueError, match="beta2"):
        adam_second_moment(g2, 1.0)


def test_bf16_second_moment_against_torch_adam_default_and_fused():
    # torch.optim.Adam on bf16 parameters keeps exp_avg_sq in bf16. Its default path rounds v twice
    # per step (mul_, then addcmul_), its fused kernel once; the course's model with roundings=2 and
    # roundings=1. Constant gradients over many binades, then a hundred times smaller: the values
    # where v stalls agree bit for bit, v never decreases, and the two paths stall at different v
    rng = np.random.default_rng(3)
    levels = round_to(np.exp2(rng.uniform(-20, 10, size=(1, 128))), "bf16")
    T = 2000
    g = np.concatenate([np.repeat(levels, T, axis=0), np.repeat(levels * 0.01, T, axis=0)])
    stalls = {}
    for fused, roundings in ((False, 2), (True, 1)):
        theirs = torch_adam_moments(g, torch.bfloat16, fused=fused)
        assert theirs.dtype == torch.bfloat16
        ours = adam_second_moment(round_to(g, "bf16") ** 2, 0.999, "bf16", roundings=roundings)
        for t in (T - 1, 2 * T - 1):
            assert np.array_equal(theirs.v[t], ours[t])
        assert np.all(np.diff(theirs.v, axis=0) >= 0) and np.all(np.diff(ours, axis=0) >= 0)
        # torch computes in fp32 (a fused multiply-add on the CPU's default path): on the way up a
        # rare step lands one bf16 spacing apart
        assert np.mean(theirs.v != ours) < 1e-3
        stalls[fused] = ours[T - 1] / levels[0] ** 2
    # one rounding: v stops once g^2 / v is under 2.96 .. 4.91; two roundings: under 1.96 .. 3.91
    assert 1 / 4.92 < stalls[True].min() and stalls[True].max() < 1 / 2.95
    assert 1 / 3.92 < stalls[False].min() and stalls[False].max() < 1 / 1.95
    # fp32 parameters: fp32 states, and v follows g^2 down
    fp32 = torch_adam_moments(np.r_[np.ones(1000), np.full(3000, 0.01)], torch.float32)
    assert fp32.dtype == torch.float32 and fp32.v[-1, 0] < 0.1 * fp32.v[999, 0]
    v_hat = fp32.v[-1, 0] / (1 - 0.999**4000)
    assert fp32.step_over_lr()[-1, 0] == pytest.approx(0.01 / math.sqrt(v_hat), rel=1e-5)
    with pytest.raises(ValueError, match="roundings"):
        adam_second_moment(np.ones(3), roundings=3)
    with pytest.raises(ValueError, match="grads"):
        torch_adam_moments(np.ones((2, 2, 2)))


def test_adam_noisy_steps_mean_and_size():
    # the mean step follows mu / sqrt(mu^2 + sigma^2); its size does not fall below m_hat's own
    # noise, rms sqrt((1 - beta1) / (1 + beta1)) = 0.229 at mu = 0 (an EMA of white noise)
    for mu in (0.0, 0.1, 1.0, 3.0):
        r = adam_noisy_steps(mu, 1.0, steps=3000, n=3000, seed=1)
        assert r.mean() == pytest.approx(mu / math.sqrt(mu * mu + 1), abs=0.02)
    r0 = adam_noisy_steps(0.0, 1.0, steps=3000, n=3000, seed=1)
    assert np.sqrt(np.mean(r0**2)) == pytest.approx(math.sqrt(0.1 / 1.9), rel=0.05)
    assert 0.13 < np.median(np.abs(r0)) < 0.18
    # without noise every step is lr
    assert np.allclose(adam_noisy_steps(-2.0, 0.0, steps=50, n=3), -1.0)
    with pytest.raises(ValueError, match="sigma"):
        adam_noisy_steps(0.0, -1.0)


def test_update_rules_reject_bad_input():
    w = torch.ones(3, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="float32"):
        nearest_update(w, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="shape"):
        nearest_update(w, torch.ones(4))
    with pytest.raises(ValueError, match="compensation"):
        kahan_update(w, torch.zeros(3), torch.ones(3))
    with pytest.raises(TypeError, match="master"):
        master_update(w, torch.ones(3))


def test_adam_delta_matches_torch_optim_adam():
    torch.manual_seed(0)  # test-only data; the library takes explicit seeds
    p = torch.randn(500)
    ref = torch.nn.Parameter(p.clone())
    opt = torch.optim.Adam([ref], lr=1e-3, foreach=False)
    state = AdamState(torch.zeros(500), torch.zeros(500))
    ours = p.clone()
    for step in range(1, 21):
        g = torch.randn(500) * 0.01
        ref.grad = g.clone()
        opt.step()
        ours = ours + adam_delta(g, state, step, 1e-3)
    # same formula, different fused operations (lerp, addcdiv): agree to a few float32 ulps
    assert torch.allclose(ours, ref.detach(), rtol=0, atol=20 * 2.0**-24 * float(p.abs().max()))
    with pytest.raises(ValueError, match="from 1"):
        adam_delta(g, state, 0, 1e-3)


def test_update_table_covers_every_rule_and_dtypes_come_from_the_formats():
    assert set(UPDATE_STEPS) == set(UpdateRule)
    assert all(callable(step) for step in UPDATE_STEPS.values())
    # every regime the loop can build finds its rule's step
    assert {r.update for r in REGIMES.values()} == set(UpdateRule)
    # the compute formats and their torch dtypes: FloatFormat.torch_dtype is the one map
    assert sorted(COMPUTE_FORMATS) == ["bf16", "fp16", "fp32"]
    assert [FORMATS[n].torch_dtype for n in COMPUTE_FORMATS] == [torch.float32, torch.bfloat16, torch.float16]
    with pytest.raises(
        ValueError, match=r"compute format 'e4m3fn' is not supported: use one of \['bf16', 'fp16', 'fp32'\]"
    ):
        Regime("x", "e4m3fn", "master")
    # stochastic rounding accepts bf16 and fp16 weights only (the same set as before the reverse lookup)
    rng = np.random.default_rng(0)
    d = torch.zeros(2)
    assert stochastic_update(torch.ones(2, dtype=torch.float16), d, rng).dtype == torch.float16
    for dtype in (torch.float32, torch.float8_e4m3fn, torch.float64):
        with pytest.raises(TypeError, match="bf16 or fp16"):
            stochastic_update(torch.ones(2).to(dtype), d, rng)


@pytest.mark.parametrize("rule", list(UpdateRule))
def test_one_flat_buffer_gets_the_bits_of_each_tensor_updated_alone(rule):
    """train() keeps every parameter in one flat buffer and runs Adam and the update rule once on
    it: each weight must get the bits it gets when its tensor is updated alone, in the order of
    the tensors (stochastic rounding draws from one generator for all of them)."""
    dtype = torch.float32 if rule in (UpdateRule.FP32, UpdateRule.MASTER) else torch.bfloat16
    rng = np.random.default_rng(5)
    shapes = [(64, 16), (64,), (64, 64), (64,), (1, 64), (1,)]
    ws = [torch.from_numpy(bf16_values(rng, math.prod(s), -3, 1).reshape(s)).to(dtype) for s in shapes]
    cs = [torch.zeros_like(w) if rule is UpdateRule.KAHAN else None for w in ws]
    states = [AdamState(torch.zeros(s), torch.zeros(s)) for s in shapes]
    flat_w = start = torch.cat([w.reshape(-1) for w in ws])
    flat_c = torch.zeros_like(flat_w) if rule is UpdateRule.KAHAN else None
    flat_state = AdamState(torch.zeros(flat_w.shape), torch.zeros(flat_w.shape))
    step = UPDATE_STEPS[rule]
    per_rng, flat_rng = np.random.default_rng(9), np.random.default_rng(9)
    for t in range(1, 4):
        gs = [torch.from_numpy(bf16_values(rng, math.prod(s), -9, -3).reshape(s)) for s in shapes]
        ds = [adam_delta(g, st, t, 1e-3) for g, st in zip(gs, states)]
        ws, cs = map(list, zip(*(step(w, c, d, dtype, per_rng) for w, c, d in zip(ws, cs, ds))))
        d = adam_delta(torch.cat([g.reshape(-1) for g in gs]), flat_state, t, 1e-3)
        flat_w, flat_c = step(flat_w, flat_c, d, dtype, flat_rng)
        assert torch.equal(d, torch.cat([x.reshape(-1) for x in ds]))
        assert torch.equal(flat_w, torch.cat([w.reshape(-1) for w in ws]))
        if rule is UpdateRule.KAHAN:
            assert torch.equal(flat_c, torch.cat([c.reshape(-1) for c in cs]))
    assert torch.equal(flat_state.v, torch.cat([s.v.reshape(-1) for s in states]))
    assert (flat_w != start).float().mean() > 0.25  # many weights moved: the comparison saw updates


# ------------------------------------------------------------------ the model and the loop


def test_task_is_deterministic_and_sized():
    task = TeacherStudentTask()
    assert task.n_params == 16 * 64 + 64 + 64 * 64 + 64 + 64 + 1 == 5313
    X1, y1, w1 = task.data()
    X2, y2, w2 = TeacherStudentTask().data()
    assert torch.equal(X1, X2) and torch.equal(y1, y2) and all(torch.equal(a, b) for a, b in zip(w1, w2))
    X3, _, _ = TeacherStudentTask(seed=1).data()
    assert not torch.equal(X1, X3)
    assert abs(float(y1.mean())) < 1e-12 and abs(float(y1.std(unbiased=False)) - 1) < 1e-12
    assert task.param_names() == ["W1", "b1", "W2", "b2", "W3", "b3"]
    with pytest.raises(ValueError, match="sizes"):
        TeacherStudentTask(sizes=(16,))


@pytest.mark.parametrize("dtype,oracle", [(torch.bfloat16, BF16), (torch.float16, np.float16)])
def test_forward_rounds_each_layer_once(dtype, oracle):
    X, _, ws = TeacherStudentTask(n_samples=64).data()
    params = [w.to(dtype) for w in ws]
    got = mlp_forward(params, X).float().numpy().astype(np.float64)
    # numpy reference: float64 arithmetic, one cast to the format per layer output and per tanh

    def cast(a):
        return a.astype(np.float32).astype(oracle).astype(np.float64)

    h = cast(X.numpy().astype(np.float64))
    p64 = [p.float().numpy().astype(np.float64) for p in params]
    for i in range(3):
        z = cast(h @ p64[2 * i].T + p64[2 * i + 1])
        h = cast(np.tanh(z)) if i < 2 else z
    # float64 sums in another order can, very rarely, round the other way: then by one spacing
    same = got == h
    assert same.mean() > 0.99
    assert np.all(np.abs(got - h)[~same] <= ulp(h[~same], "bf16" if dtype == torch.bfloat16 else "fp16"))


def test_training_is_deterministic_and_learns():
    cfg = TrainConfig(steps=60)
    a, b = train("fp32", config=cfg), train("fp32", config=cfg)
    assert np.array_equal(a.losses, b.losses)
    assert a.losses[-1] < 0.2 * a.losses[0]
    s1 = train("bf16, stochastic rounding", config=cfg)
    s2 = train("bf16, stochastic rounding", config=TrainConfig(steps=60, rng_seed=7))
    assert not np.array_equal(s1.losses, s2.losses)  # the rounding draws come from the seed


def test_train_seeds_are_train_runs_on_replaced_seeds_and_ratios_pair_them():
    cfg = TrainConfig(steps=30, rng_seed=3)
    task = TeacherStudentTask(n_samples=64)
    sr = train_seeds("bf16, stochastic rounding", [0, 2], task, cfg)
    ref = train_seeds("fp32", [0, 2], task, cfg)
    # seed s: the task with seed s and rounding draws from rng_seed + s, nothing else changed
    again = train(
        "bf16, stochastic rounding", TeacherStudentTask(n_samples=64, seed=2), TrainConfig(steps=30, rng_seed=5)
    )
    assert np.array_equal(sr[1].losses, again.losses)
    assert sr[0].task == task and sr[1].task.seed == 2
    assert not np.array_equal(sr[0].losses, sr[1].losses)
    ratios = relative_final_loss(sr, ref, last=5)
    want = [np.mean(a.losses[-5:]) / np.mean(b.losses[-5:]) for a, b in zip(sr, ref)]
    assert ratios.shape == (2,) and np.array_equal(ratios, want)
    assert np.array_equal(relative_final_loss(ref, ref), [1.0, 1.0])
    with pytest.raises(ValueError, match="paired"):
        relative_final_loss(sr, ref[::-1])  # seeds crossed
    with pytest.raises(ValueError, match="one reference"):
        relative_final_loss(sr, ref[:1])
    with pytest.raises(ValueError, match="distinct"):
        train_seeds("fp32", [1, 1], task, cfg)
    for bad in ([0, -1], [0, 1.5], [True]):
        with pytest.raises(ValueError, match=rf"^seeds\[{len(bad) - 1}\] must be a non-negative int, got {bad[-1]!r}$"):
            train_seeds("fp32", bad, task, cfg)


def test_power_of_two_loss_multiplier_leaves_fp32_and_bf16_unchanged_but_not_fp16():
    """Exact scaling: every gradient, moment and update scales by a power of two (or not at all)."""
    base, small = TrainConfig(steps=40), TrainConfig(steps=40, loss_multiplier=2.0**-16)
    for name in ("fp32", "bf16 + fp32 master", "bf16, round to nearest"):
        assert np.array_equal(train(name, config=base).losses, train(name, config=small).losses), name
    fp16 = [train("fp16 + master, no scaling", config=c).losses for c in (base, small)]
    assert not np.array_equal(*fp16)


def test_regimes_order_as_the_chapter_says():
    """The claims of chapter 04 at the chapter's settings, checked here on the full run."""
    res = {
        n: train(n)
        for n in [
            "fp32",
            "bf16, round to nearest",
            "bf16 + fp32 master",
            "bf16, stochastic rounding",
            "bf16, Kahan update",
        ]
    }
    ref = res["fp32"].final_loss()
    assert res["bf16, round to nearest"].final_loss() > 3 * ref
    for n in ("bf16 + fp32 master", "bf16, stochastic rounding", "bf16, Kahan update"):
        assert res[n].final_loss() < 1.2 * ref, n
    assert res["bf16, round to nearest"].unchanged[250:].mean() > 0.5
    # an fp32 master loses an update only below half an fp32 spacing: almost never here
    assert res["bf16 + fp32 master"].unchanged.mean() < 1e-3


def test_fp16_without_scaling_loses_gradients_and_scaling_restores_them():
    cfg = TrainConfig(steps=150, loss_multiplier=2.0**-16, record_steps=(150,))
    none = train("fp16 + master, no scaling", config=cfg)
    static = train("fp16 + master, static scale", config=cfg)
    ref = train("fp32", config=cfg)
    assert static.final_loss() < 0.8 * none.final_loss()
    assert abs(static.final_loss() - ref.final_loss()) < 0.05 * ref.final_loss()
    g_none = none.snapshots[150].weight_grads
    g_ref = ref.snapshots[150].weight_grads
    assert np.mean(g_none == 0) > 0.5 > np.mean(g_ref == 0)
    assert none.n_skipped == static.n_skipped == 0 and np.all(static.scales == 2.0**16)


def test_skipped_steps_leave_weights_and_adam_alone():
    cfg = TrainConfig(steps=30, loss_multiplier=1.0)
    hot = Regime("fp16, scale too large", "fp16", UpdateRule.MASTER, StaticScale(2.0**40))
    r = train(hot, config=cfg)
    assert r.n_skipped == 30 and np.all(r.skipped)
    assert np.all(r.losses == r.losses[0])  # nothing ever changed the weights
    d = train(Regime("dyn", "fp16", UpdateRule.MASTER, DynamicScale(init_scale=2.0**40, growth_interval=5)), config=cfg)
    assert d.skipped[0] and not d.skipped[-1]
    assert d.scales[d.n_skipped] == 2.0 ** (40 - d.n_skipped)  # one halving per skipped step at the start


def test_snapshot_moments_sign_flips_and_the_anatomy_of_adams_step():
    steps = 40
    cfg = TrainConfig(steps=steps, record_steps=tuple(range(1, steps + 1)))
    for name in ("fp32", "bf16 + fp32 master"):
        r = train(name, config=cfg)
        grads = np.array([r.snapshots[t].weight_grads for t in range(1, steps + 1)])
        # the snapshot's moments are the ones that made the update, to the bit
        for t in (1, 17, steps):
            s = r.snapshots[t]
            m_hat, v_hat = torch.from_numpy(s.m_hat).float(), torch.from_numpy(s.v_hat).float()
            delta = -(m_hat * cfg.lr) / (torch.sqrt(v_hat) + cfg.eps)
            assert np.array_equal(delta.double().numpy(), s.updates)
        # the moments against an independent float64 replay of Adam over the recorded gradients
        m = v = np.zeros(grads.shape[1])
        for t, g in enumerate(grads, start=1):
            m, v = cfg.beta1 * m + (1 - cfg.beta1) * g, cfg.beta2 * v + (1 - cfg.beta2) * g * g
        s = r.snapshots[steps]
        # (fp32 against float64: a few ulps of the largest term, which cancels in m)
        m_ref, v_ref = m / (1 - cfg.beta1**steps), v / (1 - cfg.beta2**steps)
        assert np.allclose(s.m_hat, m_ref, rtol=1e-5, atol=1e-5 * np.abs(grads).max())
        assert np.allclose(s.v_hat, v_ref, rtol=1e-5, atol=0)
        # sign flips against the recorded gradients
        flips = np.r_[0.0, np.mean(grads[1:] * grads[:-1] < 0, axis=1)]
        assert np.array_equal(r.sign_flips, flips)
    a = adam_step_anatomy(r, steps, cfg, first=2, window=10)
    g, m_hat, sqrt_v = np.abs(s.weight_grads), np.abs(s.m_hat), np.sqrt(s.v_hat)
    assert a.m_over_g == pytest.approx(np.median(m_hat / g))
    assert a.g_over_sqrt_v == pytest.approx(np.median(g / sqrt_v))
    assert a.step_over_lr == pytest.approx(np.median(np.abs(s.updates)) / cfg.lr, rel=1e-6)
    assert a.sign_flips == pytest.approx(flips[-10:].mean())
    assert a.grad_fall == pytest.approx(np.median(np.abs(grads[1])) / np.median(g))
    assert a.memory == pytest.approx(1000) and a.first_weight == pytest.approx(0.999 ** (steps - 2))
    assert len(a.rows()) == 8 and all(len(row) == 2 for row in a.rows())
    with pytest.raises(ValueError, match="record_steps"):
        adam_step_anatomy(train("fp32", config=TrainConfig(steps=3, record_steps=(3,))), 3, cfg)
    with pytest.raises(ValueError, match="first"):
        adam_step_anatomy(r, 5, cfg, first=5)


def test_state_bytes_are_the_recipe():
    cfg = TrainConfig(steps=2)
    n = TeacherStudentTask().n_params
    per = {
        name: sum(train(name, config=cfg).state_bytes.values()) / n
        for name in ("fp32", "bf16 + fp32 master", "bf16, round to nearest", "bf16, Kahan update")
    }
    assert per == {"fp32": 16, "bf16 + fp32 master": 16, "bf16, round to nearest": 12, "bf16, Kahan update": 14}


def test_regime_and_config_validation():
    with pytest.raises(ValueError, match="fp32"):
        Regime("x", "bf16", UpdateRule.FP32)
    with pytest.raises(ValueError, match="fp32"):
        Regime("x", "fp32", "master")
    with pytest.raises(ValueError, match="update rule"):
        Regime("x", "bf16", "sideways")
    with pytest.raises(ValueError, match="not supported"):
        Regime("x", "e4m3fn", "master")
    with pytest.raises(ValueError, match="power of two"):
        TrainConfig(loss_multiplier=0.001)
    with pytest.raises(KeyError, match="known"):
        train("bf17")
    assert Regime("x", "bf16", "kahan").update is UpdateRule.KAHAN
    assert all(isinstance(r, Regime) for r in REGIMES.values())


# ------------------------------------------------------------------ plots (smoke)


def test_chapter_04_05_plots_return_axes():
    cfg = TrainConfig(steps=20, record_steps=(10,), loss_multiplier=2.0**-12)
    rs = [
        train("fp32", config=cfg),
        train("bf16, round to nearest", config=cfg),
        train(Regime("dyn", "fp16", "master", DynamicScale(init_scale=2.0**40, growth_interval=3)), config=cfg),
    ]
    snap = rs[0].snapshots[10]
    axes = [
        plots.plot_training_curves(rs),
        plots.plot_training_curves({r.regime.name: r for r in rs}, log=False),
        plots.plot_unchanged_updates(rs[:2]),
        plots.plot_update_survival(snap.weights, snap.updates, "bf16"),
        plots.plot_gradient_histogram({"act": snap.act_grads, "w": snap.weight_grads}, "fp16", scale=2.0**12),
        plots.plot_gradient_histogram(snap.weight_grads),
        plots.plot_loss_scale(rs[2], ceiling=FORMATS["fp16"].max / rs[0].grad_absmax),
    ]
    by_seed = {"fp32": [rs[0], rs[0]], "bf16, round to nearest": [rs[1], rs[1]]}
    axes += [plots.plot_seed_spread(by_seed), plots.plot_seed_spread(by_seed, relative_to="fp32", log=False)]
    for ax in axes:
        assert isinstance(ax, matplotlib.axes.Axes) and ax.has_data()
    # the relative panel divides step by step by the reference: fp32 / fp32 would be 1 everywhere
    rel = axes[-1]
    line = [ln for ln in rel.get_lines() if ln.get_label() == "bf16, round to nearest"][0]
    assert np.allclose(line.get_ydata(), rs[1].losses / rs[0].losses)
    # the staircase can be drawn apart from the lost points' colour
    ax = plots.plot_update_survival(snap.weights, snap.updates, "bf16", threshold_color="black")
    stair = [ln for ln in ax.get_lines() if ln.get_label().startswith("half the")][0]
    assert matplotlib.colors.same_color(stair.get_color(), "black")
    with pytest.raises(KeyError, match="relative_to"):
        plots.plot_seed_spread(by_seed, relative_to="fp64")
    # regimes that share a compute format each get a colour of their own, in every training figure
    bf16_runs = {name: train(name, config=cfg) for name in ("bf16, round to nearest", "bf16, stochastic rounding")}
    bf16_runs["bf16 + fp32 master"] = train("bf16 + fp32 master", config=cfg)
    for ax in (
        plots.plot_unchanged_updates(bf16_runs),
        plots.plot_training_curves(bf16_runs),
        plots.plot_seed_spread({k: [r] for k, r in bf16_runs.items()}),
    ):
        colours = [
            matplotlib.colors.to_hex(ln.get_color())
            for ln in ax.get_lines()
            if ln.get_label().split(" (")[0] in bf16_runs
        ]
        assert len(colours) == 3 and len(set(colours)) == 3, colours
        assert colours[0] == plots.format_color("bf16")
    _, ax = plt.subplots()
    assert plots.plot_loss_scale(rs[2], ax=ax) is ax
    with pytest.raises(ValueError, match="same size"):
        plots.plot_update_survival(snap.weights, snap.updates[:5])
    plt.close("all")
