"""Stand-ins for the modules a tools kernel does not hold (:mod:`nbhelpers.grading.tools_view`).

This module is sent whole, as source text, into that kernel (see
:func:`nbhelpers.grading.worker.absent_cell`) and run there before the notebook's definitions, so
it imports only the standard library. :func:`install` puts a finder first on ``sys.meta_path``:
an import of a hidden module (``import torch``, ``from nbhelpers.scaling import quantize``)
then succeeds, and gives a module whose every name is an :class:`Absent`, which computes nothing.
The notebook's other definitions run as they were written; a function graded there that uses
such a name fails, with the name in the message. The finder hides nothing itself: the files
are not there (the sandbox's doing), and taking the finder away gives nothing more.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__all__ = ["Absent", "AbsentModule", "install"]

#: What a stand-in says when it is used.
WHY = "is not installed in the kernel that grades functions with listed tools (only those tools are)"


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class Absent:
    """A name of a module the kernel does not hold: reading its attributes, indexing or calling it
    gives another stand-in (so that a definition that only names it still runs); any use of it as
    a value (a number, a type, a truth value, an iterable) raises ``ModuleNotFoundError``."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        object.__setattr__(self, "_what", what)

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return Absent(f"{self._what}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise self._error()

    def __call__(self, *args: Any, **kwargs: Any) -> Absent:
        return Absent(f"{self._what}(...)")

    def __getitem__(self, key: Any) -> Absent:
        return Absent(f"{self._what}[...]")

    def __mro_entries__(self, bases: tuple) -> tuple:
        raise self._error()

    def _error(self) -> ModuleNotFoundError:
        return ModuleNotFoundError(f"{self._what} {WHY}")

    def __repr__(self) -> str:
        return f"<{self._what}: not installed here>"

    def _refuse(self, *args: Any) -> Any:
        raise self._error()

    __bool__ = __float__ = __int__ = __index__ = __complex__ = __iter__ = __len__ = _refuse
    __array__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __pow__ = __rpow__ = __neg__ = __abs__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse


class AbsentModule(types.ModuleType):
    """A module the kernel does not hold: each of its names is an :class:`Absent`."""

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return Absent(f"{self.__name__}.{name}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> AbsentModule:
        module = AbsentModule(spec.name)
        module.__path__ = []  # a package: its submodules are stand-ins too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        parts = fullname.split(".")
        if any(".".join(parts[:i]) in self.names for i in range(1, len(parts) + 1)):
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


def install(names: list[str]) -> None:
    """Make imports of ``names`` (top-level modules, or a package's modules such as
    ``"nbhelpers.scaling"``) and of their submodules give stand-ins."""
    sys.meta_path.insert(0, _Finder(frozenset(names)))
