"""The kernel families' manifests, found by walking this package.

Each module here but :mod:`~nbhelpers.families.manifest` is one family's manifest: it defines
``FAMILY``, a :class:`~nbhelpers.families.manifest.Family` that declares the family's reference,
what its launchers accept, its compile cases, its GPU launches, its benchmarks and its results
files. :func:`families` finds them; the compile check's catalogue, the GPU table, the prepared GPU
run and the readers of recorded results read them from there, so adding a family is adding its
manifest here (and its kernel module in :mod:`nbhelpers.kernels`).

Importing a manifest imports no kernel (a family's case lists import its kernel module when
called): the readers of recorded results use this package before
:func:`nbhelpers.device.setup_device`.
"""

from __future__ import annotations

import importlib
import pkgutil

from .manifest import Benchmark, Case, Family, Launch, ResultsSpec, extremes, gemm_args, operand_buffers, pick, timed

__all__ = [
    "Benchmark",
    "Case",
    "Family",
    "Launch",
    "ResultsSpec",
    "extremes",
    "families",
    "gemm_args",
    "operand_buffers",
    "pick",
    "results_specs",
    "timed",
]


def families() -> list[Family]:
    """Every family whose manifest is a module of this package, in their ``order`` (then by name).
    A module without ``FAMILY`` (the types) is skipped; two families of one name are an error."""
    found: dict[str, Family] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if family is None:
            continue
        if not isinstance(family, Family):
            raise TypeError(f"{module.__name__}.FAMILY is a {type(family).__name__}, not a Family")
        if family.name in found:
            raise ValueError(f"two families are named {family.name!r}")
        found[family.name] = family
    return sorted(found.values(), key=lambda f: (f.order, f.name))


def results_specs() -> dict[str, ResultsSpec]:
    """Every family's results files, by stem."""
    specs: dict[str, ResultsSpec] = {}
    for family in families():
        for spec in family.results:
            if spec.stem in specs:
                raise ValueError(f"two results kinds have the stem {spec.stem!r}")
            specs[spec.stem] = spec
    return specs
