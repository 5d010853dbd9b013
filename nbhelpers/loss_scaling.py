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
    "DynamicLossScaler",
    "DynamicScale",
    "StaticLossScaler",
    "StaticScale",
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
