"""Shared helpers for the per-chapter exercise tests (tests/test_exNN.py).

A test takes the function definitions from a solution notebook, runs them in a fresh namespace,
and mutates their source to make deliberately wrong implementations.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import nbformat

ROOT = Path(__file__).resolve().parents[1]


class SolutionNotebook:
    """The code cells of ``solutions/<filename>`` that define functions."""

    def __init__(self, filename: str, namespace: Callable[[], dict]):
        self.path = ROOT / "solutions" / filename
        self.namespace = namespace  # a fresh dict of the names the solutions use (math, np, ...)

    def _cells(self) -> list[str]:
        nb = nbformat.read(self.path, as_version=4)
        return [c.source for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith("def ")]

    def functions(self) -> dict:
        """Every function the solution defines, executed in a fresh namespace."""
        ns = self.namespace()
        for src in self._cells():
            exec(src, ns)
        return ns

    def mutated(self, name: str, old: str, new: str) -> Callable:
        """The solution's ``name`` with ``old`` replaced by ``new`` in its source."""
        src = next(s for s in self._cells() if f"def {name}(" in s)
        assert old in src, f"mutation target {old!r} not found in {name}"
        ns = self.namespace()
        exec(src.replace(old, new), ns)
        return ns[name]
