"""Triton's interpreter without its repeated scans: the same kernels, the same results, less time.

Before the interpreter (``TRITON_INTERPRET=1``) runs a kernel, it points every builtin of
``triton.language`` at its numpy implementation, and it does so again on every call of a
``@triton.jit`` function made from inside a kernel. ``tl.max``, ``tl.min``, ``tl.sum``,
``tl.cumsum`` and ``tl.zeros`` are such functions, so a kernel that takes a maximum in a loop
(the top-k kernels of chapter 11) pays for it at every step. In Triton 3.7.1 each of those calls
lists every member of five namespaces with :func:`inspect.getmembers` and tests every global of
the called function's module with :func:`inspect.ismodule`, and tests every member it lists for
being a builtin. On the course's CPU that was a third of the CPU time of chapter 11's ``row``
kernel and nearly half of its two-stage kernel's (three bf16 rows of 128,256 logits, k = 50:
6.5 s and 26.0 s of CPU time as Triton ships it, 4.2 s and 14.1 s with this module).

:func:`install` wraps the two functions of ``triton.runtime.interpreter`` that scan,
``_patch_builtin`` and ``_patch_lang``, so that the scans are not repeated and what they do is
unchanged:

* ``_patch_builtin(pkg, ...)`` remembers which of the names ``inspect.getmembers(pkg)`` lists
  are builtins: every name that was one at any scan, the first scan made at install, when no
  kernel runs and nothing is patched (later, inside a kernel, the builtins are Triton's stand-ins,
  which are not builtins). Each call reads those attributes now and hands each that is a builtin
  to Triton's ``_patch_attr``, in the same (sorted) order and into the same scope, which is all
  the original does; whether one is a builtin is tested again only when it changed since the
  last call. The namespace is listed again when it gains or loses attributes. The one thing
  assumed: Triton does not bind a builtin to a name of these namespaces that held none (it binds
  stand-ins, and puts the originals back).
* ``_patch_lang(fn)`` is called with a stand-in for ``fn`` whose globals are only those of
  ``fn``'s globals that are ``triton.language`` or ``triton.language.core`` themselves, in
  their order: the very modules, in the very order, that Triton's own filter keeps.

Triton's own ``_patch_attr`` and ``_patch_lang`` do the patching. The wrappers install only
over the two functions whose source this module was checked against (their sha256 below,
Triton 3.7.1's) and leave any other version alone: a Triton that changes them runs as it comes,
slower, until this module is checked against it.
tests/test_kernels_interpreter_cache.py runs kernels with and without it and compares the
results bit for bit and the state ``triton.language`` is left in.
"""

from __future__ import annotations

import hashlib
import inspect
import operator
from typing import Any

__all__ = ["KNOWN_SOURCES", "install", "installed", "source_digests"]

#: sha256 of ``inspect.getsource`` of ``_patch_builtin`` and ``_patch_lang`` in the versions
#: this module was checked against (Triton 3.7.1)
KNOWN_SOURCES: dict[str, str] = {
    "_patch_builtin": "3c21c270fa61fb24d402b2c9bf3d3981f0c8ebaf42e8fd8322872935e60735ce",
    "_patch_lang": "e5beeba74ada48294c1d0dbee3e55a5ac185992e2197b7ee706f3f061d880989",
}


def source_digests() -> dict[str, str | None]:
    """sha256 of the source of Triton's two scanning functions as installed (None for one that
    is missing or has no readable source)."""
    from triton.runtime import interpreter

    out: dict[str, str | None] = {}
    for name in KNOWN_SOURCES:
        fn = getattr(interpreter, name, None)
        original = getattr(fn, "__wrapped__", fn)
        try:
            out[name] = hashlib.sha256(inspect.getsource(original).encode()).hexdigest()
        except (OSError, TypeError):
            out[name] = None
    return out


def installed() -> bool:
    """Whether the wrappers are in place in ``triton.runtime.interpreter``."""
    from triton.runtime import interpreter

    return all(getattr(getattr(interpreter, name, None), "_nbhelpers_cache", False) for name in KNOWN_SOURCES)


def _size(pkg: Any) -> tuple[int, ...]:
    """A cheap fingerprint of the attributes ``pkg`` has: the size of its own namespace and of
    those of the classes it inherits from (a module's MRO is empty here)."""
    owners = inspect.getmro(pkg) if isinstance(pkg, type) else (pkg,)
    return tuple(len(vars(k)) for k in owners)


class _Builtins:
    """The names of a namespace that are or were builtins, and what they were bound to at the last
    call (held, so that a new object cannot take an old one's id)."""

    __slots__ = ("_flags", "_getter", "_last", "_last_ids", "names", "pkg", "size")

    def __init__(self, pkg: Any, size: tuple[int, ...], names: list[str]) -> None:
        self.pkg, self.size, self.names = pkg, size, names
        self._getter = operator.attrgetter(*names) if names else None
        self._last: tuple = ()
        self._last_ids: tuple[int, ...] = ()
        self._flags: list[bool] = []

    def read(self, pkg: Any) -> tuple:
        """The attributes now (AttributeError when one is gone)."""
        if self._getter is None:
            return ()
        got = self._getter(pkg)
        return got if len(self.names) > 1 else (got,)

    def builtins(self, members: tuple) -> list[bool]:
        """Which of ``members`` are builtins, tested again only for those that changed since the
        last call (the stand-ins a launch binds and puts back)."""
        import triton.language as tl

        ids = tuple(map(id, members))
        if len(ids) != len(self._last_ids):
            self._flags = [bool(tl.core.is_builtin(m)) for m in members]
        elif ids != self._last_ids:
            for i, (now, last) in enumerate(zip(ids, self._last_ids)):
                if now != last:
                    self._flags[i] = bool(tl.core.is_builtin(members[i]))
        self._last, self._last_ids = members, ids
        return self._flags


class _Globals:
    """What ``_patch_lang`` reads of a function: its ``__globals__``, here cut to the language
    modules among them."""

    __slots__ = ("__globals__",)

    def __init__(self, g: dict) -> None:
        self.__globals__ = g


def install() -> bool:
    """Wrap Triton's two scanning functions (see the module's docstring); True when the wrappers
    are in place (now or before), False when this Triton's functions are not the ones checked."""
    from triton.runtime import interpreter

    if installed():
        return True
    if source_digests() != KNOWN_SOURCES:
        return False
    import triton.language as tl

    patch_builtin, patch_lang = interpreter._patch_builtin, interpreter._patch_lang
    names: dict[int, _Builtins] = {}

    def scan(pkg) -> _Builtins:
        # the names getmembers lists that are builtins now, added to those that were (and are
        # still there)
        seen = names.get(id(pkg))
        listed = [n for n, m in inspect.getmembers(pkg) if tl.core.is_builtin(m)]
        before = [n for n in seen.names if hasattr(pkg, n)] if seen is not None and seen.pkg is pkg else ()
        entry = names[id(pkg)] = _Builtins(pkg, _size(pkg), sorted(set(listed) | set(before)))
        return entry

    def cached_patch_builtin(pkg, builder, scope):
        # what the original does: patch each builtin among pkg's members, in getmembers' (sorted)
        # order; every attribute that is or was a builtin is read now
        entry = names.get(id(pkg))
        if entry is None or entry.pkg is not pkg or entry.size != _size(pkg):
            entry = scan(pkg)
        try:
            members = entry.read(pkg)
        except AttributeError:  # one was deleted and another added: list the namespace again
            entry = scan(pkg)
            members = entry.read(pkg)
        for name, member, builtin in zip(entry.names, members, entry.builtins(members)):
            if builtin:
                interpreter._patch_attr(pkg, name, member, builder, scope)

    def cached_patch_lang(fn):
        langs = {k: v for k, v in fn.__globals__.items() if v is tl or v is tl.core}
        return patch_lang(_Globals(langs))

    # the namespaces _patch_lang hands to _patch_builtin, listed now, while nothing is patched
    for pkg in (tl, tl.core, tl.tensor, tl.math, tl.core.tensor_descriptor_base):
        scan(pkg)
    for wrapper, original in ((cached_patch_builtin, patch_builtin), (cached_patch_lang, patch_lang)):
        wrapper.__wrapped__ = original
        wrapper._nbhelpers_cache = True
    interpreter._patch_builtin = cached_patch_builtin
    interpreter._patch_lang = cached_patch_lang
    return True
