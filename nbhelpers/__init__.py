"""Helpers for the course "Low-precision numerics for AI accelerators".

One module per concept, named after what a chapter needs:

- :mod:`nbhelpers.formats`       bit layouts, limits, encode/decode (chapter 01)
- :mod:`nbhelpers.rounding`      rounding onto a format's grid (chapter 01 on)
- :mod:`nbhelpers.accumulation`  emulated sums, dot products and GEMMs (chapters 02-03)
- :mod:`nbhelpers.device`        CPU/GPU selection and the Triton interpreter switch
- :mod:`nbhelpers.plots`, :mod:`nbhelpers.tables`   figures and text tables
- :mod:`nbhelpers.checks`        exercise checks; :mod:`nbhelpers.exercises` per-chapter specs
- :mod:`nbhelpers.make_exercises`  generate exercises/ from solutions/; :mod:`nbhelpers.grade` grade submissions
- :mod:`nbhelpers.mixed_precision`  training regimes and loss scaling (chapters 04-05)
- :mod:`nbhelpers.kernels`  Triton kernels (import after setup_device); :mod:`nbhelpers.benchmarks` timing

Import what you need from the module; importing the package does nothing else.
"""
__version__ = "0.1.0"
