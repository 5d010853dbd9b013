"""Mixed-precision training on the CPU: weight-update regimes, the task, the update rules, the loop.

One small, real training set-up shared by chapters 04 (master weights) and 05 (loss scaling):

* :class:`TeacherStudentTask`: a regression task generated from a seed: inputs ``X`` (N, d) drawn
  from a standard normal, targets from a random "teacher" MLP, and a student MLP of the same
  shape (about 5,300 parameters by default) started from its own random weights.
* :class:`Regime`: how the weights are stored and updated (:class:`UpdateRule`, applied through
  the table :data:`UPDATE_STEPS`), in which format the forward and backward passes run
  (``compute``), and how the loss is scaled (:class:`~nbhelpers.loss_scaling.StaticScale`,
  :class:`~nbhelpers.loss_scaling.DynamicScale` or none; the scalers live in
  :mod:`nbhelpers.loss_scaling`). :data:`REGIMES` holds the ones the chapters compare.
* :func:`train`: one training loop for every regime: full-batch Adam with fp32 optimizer state,
  returning a :class:`TrainResult` (loss per step, updates lost per step, skipped steps, the
  loss scale, the share of gradients that changed sign, snapshots of weights, updates, gradients
  and Adam's moments, and the bytes each kind of state occupies).
* :func:`adam_step_anatomy`: why Adam's steps at one recorded step have the size they have.
* :func:`adam_second_moment` (Adam's ``v`` stored in a low-precision format, rounded once or
  twice per step), :func:`torch_adam_moments` (``torch.optim.Adam``'s own stored moments, its
  outside oracle) and :func:`adam_noisy_steps` (the size of Adam's steps under minibatch noise).

How the low-precision arithmetic is done. Tensors that training stores (weights, activations,
activation gradients, weight gradients) are real torch tensors of the compute dtype
(``torch.bfloat16``, ``torch.float16`` or ``torch.float32``, the formats'
:attr:`~nbhelpers.formats.FloatFormat.torch_dtype`). Every operation between them (matrix
products, tanh, the loss) is computed in float64 and its result cast to the compute dtype with
torch's ``.to()``, in forward and backward alike: the model of a GPU that reads low-precision
inputs, accumulates at high precision (chapter 03) and writes a low-precision output. torch
2.13's cast of float64 to bfloat16 or float16 goes through float32, so it rounds twice; that
differs from one rounding of the float64 value only when the float32 value lands exactly on a
tie of the compute dtype (measured with torch 2.13.0 on 4 million random float64 values: 9 in a
million for bf16, 6 in 100,000 for fp16). Computing in float64 makes the runs the same on every
CPU (a float32 accumulation order varies between CPUs and thread counts; a float64 one does not
change the rounded result in practice). The weight updates use real casts (round to nearest
even), the course's ``round_to`` for stochastic rounding, and fp32 arithmetic written as separate
IEEE operations (no fused multiply-add), for the same reason.

Everything random takes a seed; nothing global is touched.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from types import MappingProxyType

import numpy as np
import torch

from .formats import FORMATS, FloatFormat, finite_values, get_format
from .loss_scaling import DynamicLossScaler, DynamicScale, StaticLossScaler, StaticScale, round_f32
from .rounding import round_to
from .training_memory import MemoryRecipe
from .validation import enum_member, nonnegative_int, positive_int

__all__ = [
    "ADAM_BETAS",
    "AdamStepAnatomy",
    "COMPUTE_FORMATS",
    "REGIMES",
    "UPDATE_STEPS",
    "AdamState",
    "Regime",
    "Snapshot",
    "TeacherStudentTask",
    "TrainConfig",
    "TrainResult",
    "UpdateRule",
    "adam_delta",
    "adam_second_moment",
    "adam_step_anatomy",
    "decay_rounded_away",
    "kahan_update",
    "master_update",
    "mlp_forward",
    "nearest_update",
    "recipe_caveats",
    "relative_final_loss",
    "sgd_master_step",
    "stochastic_update",
    "train",
    "train_seeds",
]

#: The formats training can compute in (their torch dtypes come from ``FloatFormat.torch_dtype``).
COMPUTE_FORMATS: tuple[str, ...] = ("fp32", "bf16", "fp16")

#: The formats :func:`stochastic_update` rounds low-precision weights to.
_STOCHASTIC_FORMATS: tuple[str, ...] = ("bf16", "fp16")


def _compute_name(fmt: FloatFormat | str) -> str:
    name = get_format(fmt).name
    if name not in COMPUTE_FORMATS:
        raise ValueError(f"compute format {name!r} is not supported: use one of {sorted(COMPUTE_FORMATS)}")
    return name


def _format_name(dtype: torch.dtype) -> str | None:
    """The name of the format in FORMATS whose torch dtype is ``dtype`` (None if there is none)."""
    return next((f.name for f in FORMATS.values() if f.torch_name is not None and f.torch_dtype is dtype), None)


# ---------------------------------------------------------------------------------------------
# Regimes
# ---------------------------------------------------------------------------------------------


class UpdateRule(enum.Enum):
    """How a weight update ``delta`` (an fp32 tensor from the optimizer) reaches the weights.

    FP32        fp32 weights, ``w = fp32(w + delta)``; the compute format must be fp32
    MASTER      fp32 master weights ``w = fp32(w + delta)``; forward and backward use a copy
                rounded to the compute format (round to nearest even)
    NEAREST     weights stored in the compute format, ``w = RN(w + delta)``: an update smaller
                than half the spacing at w is lost
    STOCHASTIC  weights in the compute format, ``w = SR(fp32(w + delta))``: rounded up with
                probability equal to the distance from the lower neighbour (chapter 01)
    KAHAN       weights and a compensation buffer ``c`` in the compute format: the part of each
                update that rounding dropped is kept in ``c`` and added to the next update

    Each rule's step is the function :data:`UPDATE_STEPS` maps it to.
    """

    FP32 = "fp32"
    MASTER = "master"
    NEAREST = "nearest"
    STOCHASTIC = "stochastic"
    KAHAN = "kahan"


@dataclass(frozen=True)
class Regime:
    """A training regime: compute format, weight-update rule, loss scaling.

    name: label for tables and legends. compute: "fp32", "bf16" or "fp16" (the dtype of the
    stored activations, gradients and working weights). update: an :class:`UpdateRule` (or its
    value). loss_scale: None, a :class:`~nbhelpers.loss_scaling.StaticScale` or a
    :class:`~nbhelpers.loss_scaling.DynamicScale`.
    """

    name: str
    compute: str
    update: UpdateRule
    loss_scale: StaticScale | DynamicScale | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "compute", _compute_name(self.compute))
        object.__setattr__(self, "update", enum_member(UpdateRule, self.update, "update rule"))
        if (self.update is UpdateRule.FP32) != (self.compute == "fp32"):
            raise ValueError(
                f"regime {self.name!r}: the 'fp32' update rule goes with compute='fp32' and only with it "
                f"(got compute={self.compute!r}, update={self.update.value!r}); low-precision compute "
                "needs 'master', 'nearest', 'stochastic' or 'kahan'"
            )
        if self.loss_scale is not None and not isinstance(self.loss_scale, (StaticScale, DynamicScale)):
            raise TypeError(f"loss_scale must be None, StaticScale or DynamicScale, got {self.loss_scale!r}")

    @property
    def stores_low_precision_weights(self) -> bool:
        """True when the weights themselves live in the compute format (no fp32 copy)."""
        return self.update in (UpdateRule.NEAREST, UpdateRule.STOCHASTIC, UpdateRule.KAHAN)


REGIMES: Mapping[str, Regime] = {
    r.name: r
    for r in [
        Regime("fp32", "fp32", UpdateRule.FP32),
        Regime("bf16, round to nearest", "bf16", UpdateRule.NEAREST),
        Regime("bf16 + fp32 master", "bf16", UpdateRule.MASTER),
        Regime("bf16, stochastic rounding", "bf16", UpdateRule.STOCHASTIC),
        Regime("bf16, Kahan update", "bf16", UpdateRule.KAHAN),
        Regime("fp16 + master, no scaling", "fp16", UpdateRule.MASTER),
        Regime("fp16 + master, static scale", "fp16", UpdateRule.MASTER, StaticScale(2.0**16)),
        Regime("fp16 + master, dynamic scale", "fp16", UpdateRule.MASTER, DynamicScale(growth_interval=20)),
    ]
}


# ---------------------------------------------------------------------------------------------
# The task and the model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TeacherStudentTask:
    """Regression on generated data: a random teacher MLP makes the targets, a student learns them.

    sizes: layer widths, input first (the default 16-64-64-1 student has 5,313 parameters).
    X is (n_samples, sizes[0]) standard normal; y = teacher(X), standardised to mean 0 and
    variance 1 per output. Weights are uniform in +-scale/sqrt(fan_in) (teacher_scale for the
    teacher, 1 for the student: PyTorch's default for nn.Linear); hidden layers use tanh.
    Everything comes from ``numpy.random.default_rng(seed)``, so a task is the same everywhere.
    """

    n_samples: int = 256
    sizes: tuple[int, ...] = (16, 64, 64, 1)
    teacher_scale: float = 1.5
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_samples", positive_int("n_samples", self.n_samples))
        sizes = tuple(self.sizes)
        if len(sizes) < 2:
            raise ValueError(f"sizes must be at least two positive ints (input width first), got {self.sizes!r}")
        sizes = tuple(positive_int(f"sizes[{i}]", s, "a layer width") for i, s in enumerate(sizes))
        object.__setattr__(self, "sizes", sizes)

    @property
    def n_params(self) -> int:
        return sum(a * b + b for a, b in pairwise(self.sizes))

    def param_names(self) -> list[str]:
        """'W1', 'b1', 'W2', ... in the order of the parameter list."""
        return [f"{k}{i + 1}" for i in range(len(self.sizes) - 1) for k in ("W", "b")]

    def data(self) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """(X float32 (N, d), y float64 (N, d_out), student's initial weights as float32 tensors)."""
        rng = np.random.default_rng(self.seed)
        X = rng.standard_normal((self.n_samples, self.sizes[0])).astype(np.float32)
        teacher = _init_weights(self.sizes, rng, self.teacher_scale)
        student = _init_weights(self.sizes, rng, 1.0)
        h = X.astype(np.float64)
        for i in range(len(self.sizes) - 1):
            h = h @ teacher[2 * i].T + teacher[2 * i + 1]
            if i < len(self.sizes) - 2:
                h = np.tanh(h)
        y = (h - h.mean(axis=0)) / h.std(axis=0)
        return (torch.from_numpy(X), torch.from_numpy(y), [torch.from_numpy(w.astype(np.float32)) for w in student])


def _init_weights(sizes: Sequence[int], rng: np.random.Generator, scale: float) -> list[np.ndarray]:
    out = []
    for fan_in, fan_out in pairwise(sizes):
        bound = scale / math.sqrt(fan_in)
        out.append(rng.uniform(-bound, bound, size=(fan_out, fan_in)))
        out.append(rng.uniform(-bound, bound, size=fan_out))
    return out


def mlp_forward(params: Sequence[torch.Tensor], X: torch.Tensor, keep: list | None = None) -> torch.Tensor:
    """The student MLP on inputs X (N, d_in) -> (N, d_out), in the dtype of ``params``.

    Each linear layer and each tanh is computed in float64 and cast to that dtype with ``.to()``,
    in forward and (through autograd's casts) backward; for bf16 and fp16, torch 2.13 rounds
    through float32, i.e. twice (rarely not the one rounding: see the module docstring).
    ``keep``: if a list, the pre-activation of every layer is appended to it (with retain_grad,
    to read the activation gradients).
    """
    if len(params) < 2 or len(params) % 2 or len({p.dtype for p in params}) != 1:
        raise ValueError("params must be [W1, b1, W2, b2, ...], all of one dtype")
    dtype = params[0].dtype
    h = X.to(dtype)
    n_layers = len(params) // 2
    for i in range(n_layers):
        W, b = params[2 * i], params[2 * i + 1]
        z = torch.nn.functional.linear(h.double(), W.double(), b.double()).to(dtype)
        if keep is not None:
            if z.requires_grad:
                z.retain_grad()
            keep.append(z)
        h = torch.tanh(z.double()).to(dtype) if i < n_layers - 1 else z
    return h


# ---------------------------------------------------------------------------------------------
# Optimizer and the update rules (fp32 arithmetic, one IEEE operation at a time)
# ---------------------------------------------------------------------------------------------


@dataclass
class AdamState:
    """Adam's fp32 moments ``m`` and ``v`` for one parameter tensor (same shape as it)."""

    m: torch.Tensor
    v: torch.Tensor


def adam_delta(
    grad: torch.Tensor,
    state: AdamState,
    step: int,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Adam's update for one tensor (the same shape as grad, fp32); updates ``state`` in place.

    grad: fp32 gradient. step: 1 for the first step. Returns ``delta`` to add to the weights:
    ``-lr * m_hat / (sqrt(v_hat) + eps)`` (Kingma and Ba 2015), each operation rounded to fp32.
    """
    if grad.dtype != torch.float32 or state.m.dtype != torch.float32 or state.v.dtype != torch.float32:
        raise TypeError("adam_delta works on float32 gradients and float32 moments")
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    state.m = state.m * beta1 + grad * (1.0 - beta1)
    state.v = state.v * beta2 + (grad * grad) * (1.0 - beta2)
    m_hat = state.m / (1.0 - beta1**step)
    v_hat = state.v / (1.0 - beta2**step)
    return -(m_hat * lr) / (torch.sqrt(v_hat) + eps)


def adam_second_moment(
    g2,
    beta2: float = 0.999,
    fmt: FloatFormat | str = "fp32",
    rounding: str = "nearest_even",
    rng: np.random.Generator | None = None,
    roundings: int = 1,
) -> np.ndarray:
    """Adam's second moment ``v`` stored in ``fmt``, over a sequence of squared gradients.

    g2: (T,) or (T, n) squared gradients, one row per step. From ``v = 0``, each step computes
    ``beta2 * v + (1 - beta2) * g2[t]`` exactly (float64) and rounds it to ``fmt`` with
    ``rounding`` (the course's :func:`~nbhelpers.rounding.round_to`; "stochastic" needs ``rng``):
    once (``roundings=1``, as a fused kernel does), or twice (``roundings=2``: the decay
    ``beta2 * v`` rounded to ``fmt``, then the sum with ``(1 - beta2) * g2[t]`` rounded again, as
    torch's default Adam does with ``mul_`` and then ``addcmul_`` on a low-precision state).
    Returns the stored ``v`` after every step, float64 of g2's shape.
    """
    g2 = np.asarray(g2, dtype=np.float64)
    if g2.ndim not in (1, 2) or g2.shape[0] < 1:
        raise ValueError(f"g2 must have shape (T,) or (T, n) with T >= 1, got {g2.shape}")
    if np.any(g2 < 0) or not np.all(np.isfinite(g2)):
        raise ValueError("g2 holds squared gradients: finite and non-negative")
    if not 0.0 < beta2 < 1.0:
        raise ValueError(f"beta2 must lie in (0, 1), got {beta2!r}")
    if roundings not in (1, 2):
        raise ValueError(f"roundings is 1 (fused) or 2 (decay rounded first), got {roundings!r}")
    out = np.empty_like(g2)
    v = np.zeros(g2.shape[1:])
    for t in range(g2.shape[0]):
        decayed = beta2 * v
        if roundings == 2:
            decayed = round_to(decayed, fmt, rounding, rng=rng)
        v = round_to(decayed + (1.0 - beta2) * g2[t], fmt, rounding, rng=rng)
        out[t] = v
    return out


@dataclass(frozen=True)
class AdamMoments:
    """The moments ``torch.optim.Adam`` stored after every step, as float64 (T, n) arrays."""

    m: np.ndarray
    v: np.ndarray
    dtype: torch.dtype  # the dtype torch kept them in
    betas: tuple[float, float]
    eps: float

    def step_over_lr(self) -> np.ndarray:
        """``|m_hat| / (sqrt(v_hat) + eps)`` after every step, (T, n): Adam's step in units of lr."""
        t = np.arange(1, self.m.shape[0] + 1)[:, None]
        m_hat = self.m / (1.0 - self.betas[0] ** t)
        v_hat = self.v / (1.0 - self.betas[1] ** t)
        return np.abs(m_hat) / (np.sqrt(v_hat) + self.eps)


def torch_adam_moments(
    grads,
    dtype: torch.dtype = torch.bfloat16,
    fused: bool = False,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> AdamMoments:
    """Run ``torch.optim.Adam`` on one parameter of ``dtype`` fed ``grads`` (T,) or (T, n), one row
    per step (cast to ``dtype`` by torch), and return its moments ``exp_avg`` and ``exp_avg_sq`` after every
    step. torch keeps them in the parameter's dtype. ``fused=False`` is torch's default path
    (``mul_``, then ``addcmul_``: two roundings of ``v`` per step), ``fused=True`` its fused kernel
    (one rounding). The outside oracle for :func:`adam_second_moment`.
    """
    g = np.asarray(grads, dtype=np.float64)
    g = g[:, None] if g.ndim == 1 else g
    if g.ndim != 2 or g.shape[0] < 1:
        raise ValueError(f"grads must have shape (T,) or (T, n) with T >= 1, got {np.shape(grads)}")
    p = torch.nn.Parameter(torch.zeros(g.shape[1], dtype=dtype))
    opt = torch.optim.Adam([p], lr=1e-3, betas=betas, eps=eps, fused=fused)
    m, v = np.empty_like(g), np.empty_like(g)
    for t in range(g.shape[0]):
        p.grad = torch.from_numpy(g[t]).to(dtype)
        opt.step()
        state = opt.state[p]
        m[t] = state["exp_avg"].double().numpy()
        v[t] = state["exp_avg_sq"].double().numpy()
    return AdamMoments(m, v, opt.state[p]["exp_avg_sq"].dtype, betas, eps)


def adam_noisy_steps(
    mu: float,
    sigma: float = 1.0,
    steps: int = 5000,
    n: int = 4000,
    seed: int = 0,
    beta1: float = 0.9,
    beta2: float = 0.999,
) -> np.ndarray:
    """Adam's step over lr, ``m_hat / sqrt(v_hat)`` (eps = 0), after ``steps`` steps of minibatch
    gradients: each step's gradient drawn independently from a normal of mean ``mu`` and standard
    deviation ``sigma``, for ``n`` independent weights (float64). Returns the (n,) signed steps.
    """
    positive_int("steps", steps)
    positive_int("n", n)
    if not sigma >= 0 or not math.isfinite(mu):
        raise ValueError(f"need a finite mu and sigma >= 0, got mu={mu!r}, sigma={sigma!r}")
    rng = np.random.default_rng(seed)
    m, v = np.zeros(n), np.zeros(n)
    for _ in range(steps):
        g = mu + sigma * rng.standard_normal(n)
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
    return (m / (1.0 - beta1**steps)) / np.sqrt(v / (1.0 - beta2**steps))


def _check_update_args(w: torch.Tensor, delta: torch.Tensor) -> None:
    if not isinstance(w, torch.Tensor) or not isinstance(delta, torch.Tensor):
        raise TypeError("weights and updates must be torch tensors")
    if delta.dtype != torch.float32:
        raise TypeError(f"the update must be float32 (the optimizer's output), got {delta.dtype}")
    if w.shape != delta.shape:
        raise ValueError(f"weights {tuple(w.shape)} and update {tuple(delta.shape)} differ in shape")


def nearest_update(w: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``RN(fp32(w + delta))`` in w's dtype: a low-precision weight updated in place of a master."""
    _check_update_args(w, delta)
    return (w.float() + delta).to(w.dtype)


def stochastic_update(w: torch.Tensor, delta: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """``SR(fp32(w + delta))`` in w's dtype (bf16 or fp16), with the course's ``round_to``."""
    _check_update_args(w, delta)
    name = _format_name(w.dtype)
    if name not in _STOCHASTIC_FORMATS:
        raise TypeError(f"stochastic_update rounds to bf16 or fp16 weights, got {w.dtype}")
    s = (w.float() + delta).numpy()
    return torch.from_numpy(round_to(s, name, "stochastic", rng=rng).astype(np.float32)).to(w.dtype)


def master_update(
    master: torch.Tensor, delta: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    """(``fp32(master + delta)``, that rounded to nearest in ``dtype``): the master-weight step."""
    _check_update_args(master, delta)
    if master.dtype != torch.float32:
        raise TypeError(f"master weights are float32, got {master.dtype}")
    new = master + delta
    return new, new.to(dtype)


def kahan_update(w: torch.Tensor, c: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Kahan-compensated update of low-precision weights ``w`` with compensation ``c`` (same dtype).

    In fp32: ``y = delta - c``; ``s = RN(w + y)`` in w's dtype; ``c = RN((s - w) - y)`` in w's
    dtype. ``s - w`` is what the weight actually moved, so ``c`` holds the part of the update
    that rounding dropped (with a minus sign), and the next step adds it back. Returns (s, c).
    """
    _check_update_args(w, delta)
    if c.dtype != w.dtype or c.shape != w.shape:
        raise ValueError("the compensation buffer must have the weights' dtype and shape")
    w32 = w.float()
    y = delta - c.float()
    s = (w32 + y).to(w.dtype)
    c_new = ((s.float() - w32) - y).to(w.dtype)
    return s, c_new


def sgd_master_step(master: np.ndarray, grad: np.ndarray, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """One SGD step on fp32 master weights: (new master, its bf16 copy), both float32 arrays.

    ``new_master = fp32(master - fp32(fp32(lr) * grad))``; the copy is new_master rounded to
    nearest even bf16 (the weights the next forward pass uses), returned as float32 values.
    """
    m = np.asarray(master)
    g = np.asarray(grad)
    if m.dtype != np.float32 or g.dtype != np.float32:
        raise TypeError(f"master and grad must be float32 arrays, got {m.dtype} and {g.dtype}")
    if m.shape != g.shape:
        raise ValueError(f"master {m.shape} and grad {g.shape} differ in shape")
    delta = -(torch.from_numpy(g.copy()) * float(np.float32(lr)))
    new, w = master_update(torch.from_numpy(m.copy()), delta, torch.bfloat16)
    return new.numpy(), w.float().numpy()


# One update step of a rule: (w, c, delta, dtype, rng) -> (new w, new c). w: the stored weight
# tensor (fp32 for FP32 and MASTER, the compute dtype otherwise); c: the compensation buffer
# (KAHAN) or None; delta: the fp32 update; dtype: the compute dtype; rng: the generator that
# stochastic rounding draws from.
_UpdateStep = Callable[
    [torch.Tensor, torch.Tensor | None, torch.Tensor, torch.dtype, np.random.Generator],
    tuple[torch.Tensor, torch.Tensor | None],
]

#: Each :class:`UpdateRule`'s step ``(w, c, delta, dtype, rng) -> (new w, new c)``: the one place
#: :func:`train` looks a rule up (``c`` is the KAHAN compensation buffer, None for the others).
UPDATE_STEPS: Mapping[UpdateRule, _UpdateStep] = MappingProxyType(
    {
        UpdateRule.FP32: lambda w, c, d, dtype, rng: (w + d, c),
        UpdateRule.MASTER: lambda w, c, d, dtype, rng: (master_update(w, d, dtype)[0], c),
        UpdateRule.NEAREST: lambda w, c, d, dtype, rng: (nearest_update(w, d), c),
        UpdateRule.STOCHASTIC: lambda w, c, d, dtype, rng: (stochastic_update(w, d, rng), c),
        UpdateRule.KAHAN: lambda w, c, d, dtype, rng: kahan_update(w, c, d),
    }
)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """Full-batch Adam. loss_multiplier multiplies the loss before backward (a power of two).

    ``loss_multiplier = 2**-k`` shifts every gradient of our small model down by 2**-k, to where
    the small gradients of real fp16 training live (above all the per-token activation gradients
    of a mean loss, which carry 1/N for the N tokens on one device; weight gradients, averages,
    do not shrink with N): chapter 05's experiment knob. Adam's eps is multiplied by the same
    factor by default, so in exact arithmetic the updates do not change.
    record_steps: steps (1-based) at which a :class:`Snapshot` is kept.
    scale_eps: whether eps follows loss_multiplier (the default, an experiment's device that
    keeps fp32 runs bit-identical under the shift). Real Adam does not do this: with
    ``scale_eps=False`` eps stays ``eps`` whatever the gradients' size. (Left out of the repr.)
    """

    steps: int = 500
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    loss_multiplier: float = 1.0
    rng_seed: int = 1
    record_steps: tuple[int, ...] = ()
    scale_eps: bool = field(default=True, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", positive_int("steps", self.steps))
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        mantissa = math.frexp(self.loss_multiplier)[0] if self.loss_multiplier > 0 else 0.0
        if mantissa != 0.5:
            raise ValueError(f"loss_multiplier must be a power of two (exact scaling), got {self.loss_multiplier!r}")
        object.__setattr__(self, "record_steps", tuple(int(s) for s in self.record_steps))
        if not isinstance(self.scale_eps, bool):
            raise ValueError(f"scale_eps must be True or False, got {self.scale_eps!r}")


@dataclass
class Snapshot:
    """State at one step (before its update), as float64 numpy arrays.

    weights: the stored weights (master for MASTER); updates: Adam's delta of that step
    (zeros if the step was skipped); weight_grads, act_grads: the gradients the backward pass
    stored in the compute format, divided by the loss scale (not by the loss multiplier), all
    tensors flattened and concatenated. m_hat, v_hat: Adam's bias-corrected moments after the
    last step taken (the ones that made this step's update; zeros before the first step), fp32
    values as Adam computed them, so that ``-lr * m_hat / (sqrt(v_hat) + eps)`` is ``updates``.
    """

    step: int
    weights: np.ndarray
    updates: np.ndarray
    weight_grads: np.ndarray
    act_grads: np.ndarray
    m_hat: np.ndarray
    v_hat: np.ndarray


@dataclass
class TrainResult:
    """What :func:`train` returns. Arrays have one entry per step.

    losses: the mean squared error of each step's forward pass (without the loss multiplier).
    unchanged: fraction of the nonzero updates that left the stored weight unchanged (lost for
    good under round to nearest; kept in expectation or in the compensation buffer otherwise).
    skipped: True where the loss scaler skipped the step. scales: loss scale used at each step.
    grad_absmax: largest |gradient| the backward pass stored (activations and weights), divided
    by the loss scale: the scale at which fp16 would overflow is fp16's max over this.
    sign_flips: share of the weight gradients whose sign is opposite to the previous step's
    (0 at step 1; a zero gradient flips nothing).
    state_bytes: bytes held per kind of state at the end ("weights", "gradients", "master",
    "adam m", "adam v", "compensation"); n_params: parameters of the model. task: the task trained.
    """

    regime: Regime
    losses: np.ndarray
    unchanged: np.ndarray
    skipped: np.ndarray
    scales: np.ndarray
    grad_absmax: np.ndarray
    snapshots: dict[int, Snapshot]
    state_bytes: dict[str, int]
    n_params: int
    final_weights: list[torch.Tensor] = field(repr=False, default_factory=list)
    task: TeacherStudentTask | None = field(repr=False, default=None)
    sign_flips: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    @property
    def n_skipped(self) -> int:
        return int(self.skipped.sum())

    def final_loss(self, last: int = 10) -> float:
        """Mean loss over the last ``last`` steps (smooths stochastic-rounding noise)."""
        return float(np.mean(self.losses[-last:]))


def _flat(tensors) -> np.ndarray:
    return np.concatenate([t.detach().double().reshape(-1).numpy() for t in tensors])


def train(
    regime: Regime | str, task: TeacherStudentTask | None = None, config: TrainConfig | None = None
) -> TrainResult:
    """Train the task's student MLP under ``regime`` (a :class:`Regime` or a key of REGIMES).

    Every regime starts from the same weights (rounded to its storage format) and sees the same
    data; Adam's moments are fp32 in all of them, so the regimes differ only in how weights are
    stored and updated, the compute format and the loss scaling.
    """
    if isinstance(regime, str):
        if regime not in REGIMES:
            raise KeyError(f"unknown regime {regime!r}; known: {', '.join(REGIMES)}")
        regime = REGIMES[regime]
    if not isinstance(regime, Regime):
        raise TypeError(f"regime must be a Regime or a name from REGIMES, got {type(regime).__name__}")
    task = task or TeacherStudentTask()
    config = config or TrainConfig()
    dtype = FORMATS[regime.compute].torch_dtype
    X, y, init = task.data()
    rng = np.random.default_rng(config.rng_seed)
    rule = regime.update
    apply_update = UPDATE_STEPS[rule]

    # Every parameter tensor lives in one flat buffer (W1, b1, W2, ... in order) and the update
    # rules and Adam run once on it: all of them are elementwise, so each weight gets the very
    # bits it would get tensor by tensor, with a sixth of the operations per step.
    shapes = [w.shape for w in init]
    sizes = [w.numel() for w in init]

    def tensors(flat: torch.Tensor) -> list[torch.Tensor]:
        return [part.view(shape) for part, shape in zip(flat.split(sizes), shapes)]

    init_flat = torch.cat([w.reshape(-1) for w in init])
    stored = init_flat.clone() if rule in (UpdateRule.FP32, UpdateRule.MASTER) else init_flat.to(dtype)
    comp = torch.zeros_like(stored) if rule is UpdateRule.KAHAN else None
    state = AdamState(torch.zeros(stored.shape), torch.zeros(stored.shape))
    spec = regime.loss_scale
    scaler = (
        DynamicLossScaler.from_spec(spec)
        if isinstance(spec, DynamicScale)
        else StaticLossScaler(spec.scale)
        if isinstance(spec, StaticScale)
        else None
    )
    # Not what real Adam does: eps follows the loss multiplier unless config.scale_eps is False.
    eps = config.eps * config.loss_multiplier if config.scale_eps else config.eps

    T = config.steps
    losses = np.empty(T)
    unchanged = np.zeros(T)
    grad_absmax = np.zeros(T)
    sign_flips = np.zeros(T)
    prev_grads: torch.Tensor | None = None
    skipped = np.zeros(T, dtype=bool)
    scales = np.ones(T)
    snaps: dict[int, Snapshot] = {}
    adam_step = 0
    grads_held: list[torch.Tensor] = []
    for t in range(1, T + 1):
        scale = scaler.scale if scaler is not None else 1.0
        scales[t - 1] = scale
        params = [w.detach().requires_grad_() for w in tensors(stored.detach().to(dtype))]
        keep: list = []
        out = mlp_forward(params, X, keep)
        mse = torch.mean((out.double() - y) ** 2)
        (mse * (config.loss_multiplier * scale)).backward()
        losses[t - 1] = float(mse.detach())
        grads_held = [p.grad for p in params]
        inv_scale = round_f32(1.0 / scale)
        grads = torch.cat([g.reshape(-1) for g in grads_held]).float() * inv_scale
        act_grads = [z.grad.float() * inv_scale for z in keep]
        found_inf = not bool(torch.isfinite(grads).all())
        grad_absmax[t - 1] = max(float(g.abs().max()) for g in [grads, *act_grads])
        if prev_grads is not None:
            sign_flips[t - 1] = float((torch.sign(grads) * torch.sign(prev_grads) < 0).double().mean())
        prev_grads = grads
        take = scaler.update(found_inf) if scaler is not None else True
        skipped[t - 1] = not take
        if take:
            adam_step += 1
            delta = adam_delta(grads, state, adam_step, config.lr, config.beta1, config.beta2, eps)
        else:
            delta = torch.zeros(stored.shape)
        if t in config.record_steps:
            # the bias-corrected moments exactly as adam_delta computed them
            m_hat = state.m / (1.0 - config.beta1**adam_step) if adam_step else state.m
            v_hat = state.v / (1.0 - config.beta2**adam_step) if adam_step else state.v
            snaps[t] = Snapshot(
                t, _flat([stored]), _flat([delta]), _flat([grads]), _flat(act_grads), _flat([m_hat]), _flat([v_hat])
            )
        if not take:
            continue
        new, comp = apply_update(stored, comp, delta, dtype, rng)
        moving = delta != 0
        unchanged[t - 1] = int((moving & (new == stored)).sum()) / max(int(moving.sum()), 1)
        stored = new

    def nbytes(ts):
        return int(sum(x.numel() * x.element_size() for x in ts if x is not None))

    low = stored.to(dtype) if rule is UpdateRule.MASTER else stored
    state_bytes = {
        "weights": nbytes([low]),
        "gradients": nbytes(grads_held),
        "master": nbytes([stored]) if rule is UpdateRule.MASTER else 0,
        "adam m": nbytes([state.m]),
        "adam v": nbytes([state.v]),
        "compensation": nbytes([comp]),
    }
    return TrainResult(
        regime,
        losses,
        unchanged,
        skipped,
        scales,
        grad_absmax,
        snaps,
        state_bytes,
        task.n_params,
        [w.clone() for w in tensors(stored)],
        task,
        sign_flips,
    )


@dataclass(frozen=True)
class AdamStepAnatomy:
    """Why Adam's steps at one step of a run have their size: medians over the parameters.

    Adam's step in units of lr is ``m_hat / sqrt(v_hat)`` (eps aside), the product of
    ``m_hat / g`` (how far the running mean of the gradient is from the gradient itself: small
    when signs flip and average out) and ``g / sqrt(v_hat)`` (the gradient against the root mean
    square that ``v`` remembers: small when the gradients have fallen since the steps ``v``
    still holds). step: the step looked at; first: the step the gradient's fall is measured from.
    m_over_g, g_over_sqrt_v, step_over_lr: medians of ``|m_hat| / |g|``, ``|g| / sqrt(v_hat)``
    and ``|m_hat| / (sqrt(v_hat) + eps)`` (the median |update| over lr). sign_flips: the mean,
    over the ``window`` steps up to ``step``, of the share of gradients that changed sign from
    the step before. grad_first, grad_now: median |g| at ``first`` and at ``step``. memory:
    ``1 / (1 - beta2)``, the steps over which ``v`` averages. first_weight: ``beta2**(step -
    first)``, what the g² of step ``first`` weighs in ``v_hat`` relative to that of ``step``.
    """

    step: int
    first: int
    window: int
    m_over_g: float
    g_over_sqrt_v: float
    step_over_lr: float
    sign_flips: float
    grad_first: float
    grad_now: float
    memory: float
    first_weight: float

    @property
    def grad_fall(self) -> float:
        """How many times smaller the median |gradient| is at ``step`` than at ``first``."""
        return self.grad_first / self.grad_now

    def rows(self) -> list[tuple[str, str]]:
        """(quantity, value) pairs for a two-column table."""
        s, f = self.step, self.first
        return [
            ("|m_hat| / |g|, median", f"{self.m_over_g:.3g}"),
            ("|g| / sqrt(v_hat), median", f"{self.g_over_sqrt_v:.3g}"),
            ("|m_hat| / sqrt(v_hat) = |update| / lr, median", f"{self.step_over_lr:.3g}"),
            (
                f"gradients that changed sign from the step before, mean of steps {s - self.window + 1}-{s}",
                f"{self.sign_flips:.2%}",
            ),
            (f"median |g| at step {f}, at step {s}", f"{self.grad_first:.2e}, {self.grad_now:.2e}"),
            (f"median |g| at step {f} / at step {s}", f"{self.grad_fall:.1f}"),
            ("beta2's memory 1 / (1 - beta2), steps", f"{self.memory:,.0f}"),
            (f"weight of step {f}'s g² in v_hat against step {s}'s: beta2^{s - f}", f"{self.first_weight:.2f}"),
        ]


def adam_step_anatomy(
    result: TrainResult, step: int, config: TrainConfig, first: int = 1, window: int = 50
) -> AdamStepAnatomy:
    """Split Adam's steps at ``step`` of ``result`` into the parts :class:`AdamStepAnatomy` lists.

    result: a :func:`train` run with snapshots at ``first`` and ``step`` (``config.record_steps``)
    and trained with ``config`` (its beta2 and eps). Parameters with a zero gradient at ``step``
    are left out of the ratios that divide by it.
    """
    snaps = result.snapshots
    missing = [s for s in (first, step) if s not in snaps]
    if missing:
        raise ValueError(f"the run has no snapshot at step(s) {missing}: add them to config.record_steps")
    if not 1 <= first < step or not 1 <= window <= step:
        raise ValueError(f"need 1 <= first < step and 1 <= window <= step, got {first=}, {step=}, {window=}")
    snap = snaps[step]
    g, m_hat, sqrt_v = np.abs(snap.weight_grads), np.abs(snap.m_hat), np.sqrt(snap.v_hat)
    nz = g > 0
    eps = config.eps * config.loss_multiplier if config.scale_eps else config.eps
    return AdamStepAnatomy(
        step=step,
        first=first,
        window=window,
        m_over_g=float(np.median(m_hat[nz] / g[nz])),
        g_over_sqrt_v=float(np.median(g / sqrt_v)),
        step_over_lr=float(np.median(m_hat / (sqrt_v + eps))),
        sign_flips=float(result.sign_flips[step - window : step].mean()),
        grad_first=float(np.median(np.abs(snaps[first].weight_grads))),
        grad_now=float(np.median(g)),
        memory=1.0 / (1.0 - config.beta2),
        first_weight=config.beta2 ** (step - first),
    )


def train_seeds(
    regime: Regime | str,
    seeds: Sequence[int],
    task: TeacherStudentTask | None = None,
    config: TrainConfig | None = None,
) -> list[TrainResult]:
    """One :func:`train` run of ``regime`` per seed, to see how much a result owes to the draw.

    Seed ``s`` replaces the task's seed (inputs, teacher, the student's initial weights) by ``s``
    and the stochastic-rounding generator's seed by ``config.rng_seed + s``; everything else of
    ``task`` and ``config`` is kept. Seed 0 is therefore the run ``train(regime, task, config)``
    of a task with seed 0. Returns the results in the order of ``seeds``.
    """
    task = task or TeacherStudentTask()
    config = config or TrainConfig()
    seeds = [nonnegative_int(f"seeds[{i}]", s) for i, s in enumerate(seeds)]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct non-negative ints, got {seeds!r}")
    return [train(regime, replace(task, seed=s), replace(config, rng_seed=config.rng_seed + s)) for s in seeds]


def relative_final_loss(runs: Sequence[TrainResult], reference: Sequence[TrainResult], last: int = 10) -> np.ndarray:
    """Each run's final loss over the final loss of the reference run of the same seed.

    runs, reference: results of :func:`train_seeds` with the same seeds (paired by position, and
    checked to be on the same task). Returns a float64 array, one ratio per seed (1: as good as
    the reference on that draw). Pairing by seed removes the part of the spread that comes from
    the task itself (some draws are harder for every regime).
    """
    if len(runs) != len(reference) or not runs:
        raise ValueError(f"need one reference run per run, got {len(runs)} runs and {len(reference)} references")
    for r, ref in zip(runs, reference):
        if r.task is None or r.task != ref.task or r.losses.size != ref.losses.size:
            raise ValueError("runs and references must be paired seed by seed (same task, same number of steps)")
    return np.array([r.final_loss(last) / ref.final_loss(last) for r, ref in zip(runs, reference)])


# ------------------------------------------------------------------ what a memory recipe's states assume

ADAM_BETAS = {"adam m": 0.9, "adam v": 0.999}  # the usual beta1 and beta2: the decay of each moment


def decay_rounded_away(fmt: FloatFormat | str, beta: float) -> float:
    """The fraction of the positive normal values ``v`` of ``fmt`` for which ``beta * v`` rounds
    back to ``v`` to nearest (ties to even): the share of states whose decay is lost at every step.

    bf16 with beta = 0.999 gives 1.0 (every value: 1 - beta is below half the relative gap below
    v, at least 2**-9); fp32 gives 0.0 for beta <= 0.999 (that half gap is at most 2**-24).
    Formats of 16 bits or fewer are counted value by value (``beta * v`` in float64, which is
    exact enough: a product of 8 and 53 significant bits rounded to 53 cannot cross a midpoint of
    the format, which has at most 12 significant bits); wider ones are decided from the bounds of
    the relative half gap, and a beta between them is an error."""
    if not 0 < beta < 1:
        raise ValueError(f"beta must lie strictly between 0 and 1, got {beta!r}")
    f = get_format(fmt)
    if f.bits > 16:  # the relative half gap below a normal v lies in [2**-(man_bits+2), 2**-(man_bits+1)]
        if 1 - beta < 2.0 ** -(f.man_bits + 2):
            return 1.0
        if 1 - beta > 2.0 ** -(f.man_bits + 1):
            return 0.0
        raise ValueError(
            f"1 - beta = {1 - beta!r} lies within {f.name}'s relative half gaps; only formats of "
            f"16 bits or fewer are counted value by value"
        )
    v = finite_values(f, nonnegative=True)
    v = v[v >= f.smallest_normal]
    return float(np.mean(round_to(beta * v, f) == v))


def recipe_caveats(recipe: MemoryRecipe) -> list[str]:
    """What a memory recipe's byte count assumes and does not get: each Adam moment stored in a
    float format with round to nearest whose decay (:data:`ADAM_BETAS`) rounds away for some of
    its values (:func:`decay_rounded_away`). Empty when nothing is lost."""
    out = []
    for state, kind in (("adam m", recipe.adam_m), ("adam v", recipe.adam_v)):
        if kind is None or kind == "int8" or recipe.state_rounding != "nearest":
            continue
        lost = decay_rounded_away(kind, ADAM_BETAS[state])
        if lost > 0:
            out.append(
                f"{state} in {kind}: {ADAM_BETAS[state]} * v rounds back to v for {lost:.0%} of "
                f"its normal values, so it never decays (round to nearest)"
            )
    return out
