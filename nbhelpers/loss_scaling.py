"""Loss scaling: the scale settings a training regime carries, the scalers, and GradScaler as oracle.

Chapter 05 (loss scaling) uses it, through :func:`nbhelpers.training.train` and directly.

* :class:`StaticScale` and :class:`DynamicScale`: the loss-scaling settings of a
  :class:`nbhelpers.training.Regime` (a constant scale, or ``torch.amp.GradScaler``'s
  parameters with its defaults, those of torch 2.13).
* :class:`DynamicLossScaler` follows ``torch.amp.GradScaler``'s rule (tested against torch 2.13.0
  to give the same scale trajectory): the scale is a float32 number; a step with an inf/NaN gradient is skipped
  and multiplies the scale by ``backoff_factor``; ``growth_interval`` finite steps in a row
  multiply it by ``growth_factor`` (unless that would overflow float32).
  :class:`StaticLossScaler` keeps its scale and only skips.
* :func:`scale_trajectory` runs the dynamic scaler over a sequence of found-inf flags;
  :func:`gradscaler_trajectory` drives the real ``torch.amp.GradScaler("cpu")`` (which runs on
  the CPU in torch 2.13) with the same flags: the outside oracle the tests and the chapter
  compare against.
* Clipping and the scale: :func:`clip_order_run` trains a linear layer for a few steps with a
  real ``GradScaler``, ``torch.nn.utils.clip_grad_norm_`` and torch's SGD or Adam, clipping after
  ``scaler.unscale_`` (the right order) or before it (on the scaled gradients), and returns each
  step's scale and update norm. :func:`adam_first_step_shrink` predicts the first Adam step's
  shrink in the wrong order from the formula (:func:`adam_first_step_norms`, the two step norms),
  for normally distributed gradient elements or a sample of another distribution, and any
  parameter count, including counts too large to allocate.

The scalers work on plain Python numbers (float32 values kept as Python floats); nothing global
is touched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .validation import positive_int, positive_number

__all__ = [
    "ClipRun",
    "DynamicLossScaler",
    "DynamicScale",
    "StaticLossScaler",
    "StaticScale",
    "adam_first_step_norms",
    "adam_first_step_shrink",
    "clip_order_run",
    "gradscaler_trajectory",
    "round_f32",
    "scale_trajectory",
]


def _check_scaler_args(init_scale, growth_factor, backoff_factor, growth_interval) -> None:
    """GradScaler's constraints on its parameters; a ValueError naming the first one broken."""
    for name, v in (("init_scale", init_scale), ("growth_factor", growth_factor), ("backoff_factor", backoff_factor)):
        positive_number(name, v)
    if growth_factor <= 1:
        raise ValueError(f"growth_factor must be > 1 (GradScaler's rule), got {growth_factor}")
    if backoff_factor >= 1:
        raise ValueError(f"backoff_factor must be < 1 (GradScaler's rule), got {backoff_factor}")
    positive_int("growth_interval", growth_interval)


def round_f32(x: float) -> float:
    """x rounded to float32 (to nearest even; beyond float32's range: inf), as a Python float."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


# ---------------------------------------------------------------------------------------------
# The settings a regime carries
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StaticScale:
    """A constant loss scale; a step whose gradients hold inf/NaN is skipped."""

    scale: float

    def __post_init__(self) -> None:
        positive_number("StaticScale.scale", self.scale)


@dataclass(frozen=True)
class DynamicScale:
    """Dynamic loss scaling, torch.amp.GradScaler's parameters and defaults (torch 2.13's)."""

    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def __post_init__(self) -> None:
        _check_scaler_args(self.init_scale, self.growth_factor, self.backoff_factor, self.growth_interval)


# ---------------------------------------------------------------------------------------------
# The scalers
# ---------------------------------------------------------------------------------------------


class DynamicLossScaler:
    """The dynamic loss-scaling rule of ``torch.amp.GradScaler``, on plain Python numbers.

    ``scale`` is a float32 value (kept as a Python float). Call :meth:`update` once per step
    with whether that step's gradients held an inf or NaN; it returns True when the optimizer
    step should be taken. A non-finite step: skipped, ``scale *= backoff_factor``, the count of
    good steps restarts. A finite step: taken; after ``growth_interval`` finite steps in a row
    ``scale *= growth_factor`` (kept unchanged if the product overflows float32) and the count
    restarts. Products are formed in float64 and rounded to float32, as GradScaler's kernel does
    in torch 2.13.0 (the tests compare the trajectories bit for bit).
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        _check_scaler_args(init_scale, growth_factor, backoff_factor, growth_interval)
        self.scale = round_f32(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.growth_tracker = 0
        self.skipped = 0

    @classmethod
    def from_spec(cls, spec: DynamicScale) -> DynamicLossScaler:
        return cls(spec.init_scale, spec.growth_factor, spec.backoff_factor, spec.growth_interval)

    def update(self, found_inf: bool) -> bool:
        """Apply the rule for one step; True if the step is taken (its gradients were finite)."""
        if found_inf:
            self.scale = round_f32(self.scale * self.backoff_factor)
            self.growth_tracker = 0
            self.skipped += 1
            return False
        self.growth_tracker += 1
        if self.growth_tracker == self.growth_interval:
            grown = round_f32(self.scale * self.growth_factor)
            if math.isfinite(grown):
                self.scale = grown
            self.growth_tracker = 0
        return True


class StaticLossScaler:
    """A constant loss scale; a step with inf/NaN gradients is skipped (and counted)."""

    def __init__(self, scale: float) -> None:
        StaticScale(scale)  # validates
        self.scale = round_f32(scale)
        self.skipped = 0

    def update(self, found_inf: bool) -> bool:
        if found_inf:
            self.skipped += 1
            return False
        return True


def scale_trajectory(
    found_inf: Sequence[bool],
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> list[float]:
    """The dynamic scaler's scale after each step of a sequence of found-inf flags (a list)."""
    s = DynamicLossScaler(init_scale, growth_factor, backoff_factor, growth_interval)
    out = []
    for flag in found_inf:
        s.update(bool(flag))
        out.append(s.scale)
    return out


def gradscaler_trajectory(
    found_inf: Sequence[bool],
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> tuple[list[float], list[bool]]:
    """The outside oracle: ``torch.amp.GradScaler("cpu")`` driven by a sequence of found-inf flags.

    A one-parameter model goes through GradScaler's public API each step (scale, backward, step,
    update) with its gradient replaced by 0 (finite) or inf (non-finite). The optimizer is SGD
    with weight decay, so a step that is taken moves the parameter even with a zero gradient.
    Returns (the scale after each update, whether each optimizer step was taken).
    """
    _check_scaler_args(init_scale, growth_factor, backoff_factor, growth_interval)
    scaler = torch.amp.GradScaler(
        "cpu",
        init_scale=init_scale,
        growth_factor=growth_factor,
        backoff_factor=backoff_factor,
        growth_interval=growth_interval,
    )
    p = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([p], lr=1.0, weight_decay=0.5)
    scales, taken = [], []
    for flag in found_inf:
        opt.zero_grad()
        with torch.no_grad():
            p.fill_(1.0)
        scaler.scale(p.sum()).backward()
        p.grad = torch.full((1,), math.inf if flag else 0.0)
        scaler.step(opt)
        scaler.update()
        taken.append(bool(p.item() != 1.0))
        scales.append(float(scaler.get_scale()))
    return scales, taken


# ---------------------------------------------------------------------------------------------
# Gradient clipping under loss scaling
# ---------------------------------------------------------------------------------------------

_OPTIMIZERS = ("sgd", "adam")
_CLIP_EPS = 1e-6  # clip_grad_norm_'s coefficient is max_norm / (norm + 1e-6), at most 1


@dataclass(frozen=True)
class ClipRun:
    """What :func:`clip_order_run` returns, one entry per step.

    scales: the loss scale the step used; grad_norms: the norm of the true (unscaled) gradients
    before clipping; update_norms: the norm of the step's change to the weights.
    """

    scales: np.ndarray
    grad_norms: np.ndarray
    update_norms: np.ndarray


def clip_order_run(
    n_in: int,
    n_out: int,
    optimizer: str,
    unscale_first: bool,
    steps: int = 1,
    *,
    init_scale: float = 2.0**16,
    growth_interval: int = 2000,
    max_norm: float = 0.5,
    seed: int = 0,
) -> ClipRun:
    """Train a linear layer (n_in inputs, n_out outputs, with bias) under a real GradScaler.

    Each step draws 64 inputs and targets from a standard normal (a ``torch.Generator`` seeded
    with ``seed``; the weights start uniform in +-1/sqrt(n_in), like ``torch.nn.Linear``), runs
    ``scaler.scale(mse).backward()``, clips with ``clip_grad_norm_(params, max_norm)`` after
    ``scaler.unscale_`` (unscale_first) or before it, then ``scaler.step`` and ``scaler.update``
    (``torch.amp.GradScaler("cpu")`` with init_scale and growth_interval, its other defaults).
    optimizer: "sgd" (learning rate 1: the update is the clipped gradient) or "adam" (torch's
    defaults: lr 1e-3, eps 1e-8). Everything is float64, so that rounding the weights does not
    blur the step. The layer has n_in * n_out + n_out weights.
    """
    n_in, n_out, steps = (positive_int(k, v) for k, v in (("n_in", n_in), ("n_out", n_out), ("steps", steps)))
    if optimizer not in _OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {_OPTIMIZERS}, got {optimizer!r}")
    positive_number("max_norm", max_norm)
    _check_scaler_args(init_scale, 2.0, 0.5, growth_interval)
    gen = torch.Generator().manual_seed(int(seed))
    bound = 1.0 / math.sqrt(n_in)
    params = [
        torch.nn.Parameter((2 * torch.rand(shape, generator=gen, dtype=torch.float64) - 1) * bound)
        for shape in ((n_out, n_in), (n_out,))
    ]
    opt = torch.optim.SGD(params, lr=1.0) if optimizer == "sgd" else torch.optim.Adam(params)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    scales, grad_norms, update_norms = np.empty(steps), np.empty(steps), np.empty(steps)
    for t in range(steps):
        x = torch.randn(64, n_in, generator=gen, dtype=torch.float64)
        y = torch.randn(64, n_out, generator=gen, dtype=torch.float64)
        opt.zero_grad()
        before = torch.cat([p.detach().ravel() for p in params])
        scales[t] = scaler.get_scale()
        loss = torch.nn.functional.mse_loss(x @ params[0].T + params[1], y)
        scaler.scale(loss).backward()
        grad_norms[t] = float(torch.cat([p.grad.ravel() for p in params]).norm()) / scales[t]
        if unscale_first:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        scaler.step(opt)  # unscales here when unscale_ was not called
        scaler.update()
        update_norms[t] = float((torch.cat([p.detach().ravel() for p in params]) - before).norm())
    return ClipRun(scales, grad_norms, update_norms)


def _adam_first_step_rms(element_rms: float, eps: float, elements: np.ndarray | None = None) -> float:
    """sqrt(E[(x / (|x| + eps))**2]) for x of this rms: the root mean square of Adam's first step
    over its learning rate, lr * x / (|x| + eps), per element. x normal with mean 0 (by quadrature)
    when ``elements`` is None, else distributed as ``elements`` rescaled to this rms (a sample
    mean)."""
    if elements is not None:
        x = elements * (element_rms / math.sqrt(float(np.mean(elements * elements))))
        return math.sqrt(float(np.mean((x / (np.abs(x) + eps)) ** 2)))
    a = element_rms / eps
    # a geometric grid resolves the integrand's rise near z = 1/a for any a; beyond z = 40 the
    # half-normal density is below 1e-340
    z = np.geomspace(1e-12, 40.0, 20001)
    density = 2 * np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    return math.sqrt(float(np.trapezoid(density * (a * z / (a * z + 1)) ** 2, z)))


def adam_first_step_norms(
    n: float,
    scale: float,
    max_norm: float,
    true_norm: float | None = None,
    eps: float = 1e-8,
    elements=None,
) -> tuple[float, float]:
    """(right, wrong): the norms of Adam's first step over its learning rate when clip_grad_norm_
    runs after unscaling (right) and before it (wrong).

    The model: n gradient elements of norm true_norm (None: max_norm), drawn from a normal
    distribution with mean 0 or, given ``elements`` (a 1-d sample of any scale), from that
    sample's distribution. The clip scales them to a norm of min(true_norm, max_norm) in the right
    order and, seeing ``scale`` times the norm, to about max_norm / scale in the wrong one (both
    with clip_grad_norm_'s ``+ 1e-6``). Adam's first step is lr * x / (|x| + eps) per element x, so
    for large n its norm is lr * sqrt(n) * sqrt(E[(x / (|x| + eps))**2]). n need not be an
    integer or fit in memory. Whatever the distribution, the wrong order's norm is at most
    max_norm / (scale * eps), reached once every element is far below eps, and the right
    order's at most sqrt(n), reached once every element is far above it.
    """
    for k, v in (("n", n), ("scale", scale), ("max_norm", max_norm), ("eps", eps)):
        positive_number(k, v)
    true_norm = max_norm if true_norm is None else positive_number("true_norm", true_norm)
    if elements is not None:
        elements = np.asarray(elements, dtype=np.float64)
        if elements.ndim != 1 or elements.size < 2 or not np.all(np.isfinite(elements)) or not elements.any():
            raise ValueError("elements must be a finite 1-d sample with a nonzero element")
    right = true_norm * min(1.0, max_norm / (true_norm + _CLIP_EPS))
    wrong = true_norm * min(1.0, max_norm / (scale * true_norm + _CLIP_EPS))
    root_n = math.sqrt(n)
    return tuple(root_n * _adam_first_step_rms(norm / root_n, eps, elements) for norm in (right, wrong))


def adam_first_step_shrink(
    n: float,
    scale: float,
    max_norm: float,
    true_norm: float | None = None,
    eps: float = 1e-8,
    elements=None,
) -> float:
    """How many times smaller Adam's first step is when clip_grad_norm_ runs before unscaling:
    right / wrong of :func:`adam_first_step_norms` (the same arguments; normal elements unless
    ``elements`` gives a sample of their distribution).

    Where the wrong order's elements, about max_norm / (scale sqrt(n)), are far below eps (and
    the right order's far above it), the ratio tends to eps * scale * sqrt(n) / max_norm: the
    wrong order's step is then lr * x / eps.
    """
    right, wrong = adam_first_step_norms(n, scale, max_norm, true_norm, eps, elements)
    return right / wrong
