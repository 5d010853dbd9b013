"""Helpers for the course "Low-precision numerics for AI accelerators".

One module per concept: :mod:`nbhelpers.formats` (bit layouts), :mod:`nbhelpers.rounding`,
:mod:`nbhelpers.device` (CPU/GPU selection), :mod:`nbhelpers.plots`, :mod:`nbhelpers.checks`
(exercise checks). Import what you need from the module; nothing happens at import time.
"""
__version__ = "0.1.0"
