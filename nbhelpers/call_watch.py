"""Which of the course's functions a call reached: the watch that keeps an exercise's answer from
being the course's own reference.

An exercise may forbid the course's modules or functions that compute its answer
(``Exercise.forbidden``: ``"nbhelpers.scaling"``, a module and its submodules, or
``"nbhelpers.formats:decode"``, one function by module and qualified name) and allow some of
their functions or modules as tools (``Exercise.allowed``: ``"nbhelpers.rounding:round_to"``;
an allowed function's calls into its own module are its own business, while another forbidden
module reached under it, the course's kernel handed to an allowed launcher, is still watched).

While a student's function runs, :class:`CallWatch` (a profile hook, ``sys.setprofile``) notes
every call of a forbidden Python function, however it was reached: under another name, in a
``functools.partial``, through a helper of the student's or through another of the course's
functions, after the module was reloaded, or from a copy of the module loaded from its file
under another name (a module is known by its name, and a module of another name by the course
file its code came from), or from a copy of its text compiled anywhere else (a function whose
code is, instruction for instruction and name for name, one of the course's loaded functions is
that function). It also notes every call that would hide calls from it (switching the hook off or
replacing it, starting a thread or a process, which the hook does not follow, or compiling and
running code from a string, with ``exec``, ``eval`` or ``compile`` called from code outside the
installed libraries); such a call counts like a forbidden one, since the watch can no longer say
what ran. Before a student's function runs, :meth:`CallWatch.audit` reads its code, and the code
of the notebook's own functions and classes it names, for what reaches past the watch or the
check itself (``ctypes``, ``importlib``, ``ast``, ``gc``, a function's ``__code__``, a frame's
``f_back``, ``sys.setprofile`` and the like); a function that names one scores nothing, as a
forbidden call does. Processes started from Triton's own code (ptxas and the C compiler, when it compiles a
kernel on a GPU) are machinery and do not count.

The course's package is Python; a forbidden module outside it may hold C functions (torch's
``torch._fused_adam_``). The hook sees a C function that Python code calls directly, and notes it
when its module (or the module of the object whose method it is) is forbidden. A C function that
C code calls (``map``, ``functools.partial``) sends no event; where the whole of ``torch`` is
forbidden and torch is loaded, a torch function mode (``torch.overrides.TorchFunctionMode``) is on
as well while the watch is, and notes every torch function however it is reached (torch's own
dispatch asks it). Other C functions (numpy's, ml_dtypes' casts) are not watched.

Standard library only, and no import of the course's package: :mod:`nbhelpers.grading.in_kernel`
carries this module's source into the kernel that grades (in place of its import of it).
"""

from __future__ import annotations

import _thread
import os
import sys
import types
from collections.abc import Iterable
from typing import Any

__all__ = ["CallWatch", "parse_names", "audit_names", "in_profile_hook"]

_THREAD = "started a thread (the check cannot see what a thread calls)"
_PROCESS = "started a process (the check cannot see what another process calls)"
_HOOK = "switched off or replaced the profile hook the check watches calls with"
_EXEC = "compiled or ran code from a string (the check cannot say what that code is)"
_AUDIT = "names what reaches past the check's watch or into the check itself"
_TORCH_MODE = "took off the torch function mode the check watches torch with"
#: The course's own package: Python only, so its calls are seen by their frames (no C functions).
_COURSE = "nbhelpers"

#: What a call that hides calls from the watch is said to do, by the builtin it calls.
_HIDERS_BY_NAME = {
    (sys, "setprofile"): _HOOK,
    (sys, "settrace"): "set a trace function (the check's watch does not allow one)",
    (_thread, "start_new_thread"): _THREAD,
    (_thread, "start_joinable_thread"): _THREAD,
    (os, "fork"): _PROCESS,
    (os, "forkpty"): _PROCESS,
    (os, "posix_spawn"): _PROCESS,
    (os, "posix_spawnp"): _PROCESS,
    (os, "system"): _PROCESS,
}


def _hiders() -> dict[int, tuple[Any, str]]:
    """id -> (the builtin, what calling it does), for the builtins this interpreter has, and
    ``_posixsubprocess.fork_exec`` (how ``subprocess`` starts a process)."""
    found = [(getattr(mod, name, None), why) for (mod, name), why in _HIDERS_BY_NAME.items()]
    try:
        import _posixsubprocess

        found.append((_posixsubprocess.fork_exec, _PROCESS))
    except (ImportError, AttributeError):  # pragma: no cover - not a POSIX system
        pass
    return {id(fn): (fn, why) for fn, why in found if fn is not None}


def _string_code_builtins() -> dict[int, Any]:
    """id -> builtin, for ``exec``, ``eval`` and ``compile``."""
    import builtins

    return {id(fn): fn for fn in (builtins.exec, builtins.eval, builtins.compile)}


def _library_dirs() -> tuple[str, ...]:
    """The folders of the installed Python and its packages (the standard library, site-packages),
    each ending with a separator: code there is a library's, not a student's."""
    import sysconfig

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, getattr(sys, "base_exec_prefix", sys.prefix)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            dirs.add(sysconfig.get_paths()[key])
        except KeyError:  # pragma: no cover - every CPython has them
            pass
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


def _fingerprint(code: Any) -> Any:
    """What a function's code is, whatever its file, module or name: its instructions, the names
    and constants they use, its arguments and locals; None for code too short to tell apart from a
    student's own (a one-line helper)."""
    raw = getattr(code, "co_code", b"")
    if len(raw) < _MIN_FINGERPRINT_BYTES:
        return None
    consts = tuple(
        c if isinstance(c, (int, float, str, bytes, bool, type(None))) else type(c).__name__ for c in code.co_consts
    )
    return (raw, code.co_names, code.co_varnames, code.co_argcount, consts)


def _codes_of(obj: Any, module: str, out: list, depth: int = 0) -> None:
    """The code objects of a module's own functions and of its classes' methods."""
    if depth > 4:
        return
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                _codes_of(f, module, out, depth + 1)
        return
    if isinstance(obj, types.FunctionType):
        # the function's own code only: a comprehension's or a lambda's is too generic to tell from
        # a student's (a list comprehension over the same names compiles to the same instructions)
        if getattr(obj, "__module__", None) == module and obj.__code__.co_name != "<lambda>":
            out.append(obj.__code__)
        return
    if isinstance(obj, type) and getattr(obj, "__module__", None) == module:
        for value in list(vars(obj).values()):
            _codes_of(value, module, out, depth + 1)


_FINGERPRINTS: dict = {"key": None, "table": {}}


def _course_fingerprints() -> dict:
    """fingerprint -> (module, qualname) of every function of the course's loaded modules, made
    again only when the set of loaded modules changed."""
    loaded = [
        (name, module)
        for name, module in list(sys.modules.items())
        if isinstance(module, types.ModuleType) and (name == _COURSE or name.startswith(_COURSE + "."))
    ]
    key = frozenset((name, id(module)) for name, module in loaded)
    if _FINGERPRINTS["key"] == key:
        return _FINGERPRINTS["table"]
    table: dict = {}
    for name, module in loaded:
        codes: list = []
        try:
            for value in list(vars(module).values()):
                _codes_of(value, name, codes)
        except Exception:  # an odd module: its functions are known by name and file only
            continue
        for code in codes:
            fp = _fingerprint(code)
            if fp is not None:
                table.setdefault(fp, (name, code.co_qualname))
    _FINGERPRINTS["key"], _FINGERPRINTS["table"] = key, table
    return table


#: Modules a student's function may not import or name: they reach past the watch (ctypes can
#: switch the profile hook off unseen; importlib and ast make edited copies of the course's code;
#: gc, inspect and types reach objects and frames the check holds).
_AUDIT_MODULES = frozenset(
    {"ctypes", "importlib", "ast", "gc", "inspect", "types", "marshal", "pickle", "dis", "builtins", "operator"}
)
#: Attribute names and global names that do the same, whatever object they are looked up on.
_AUDIT_NAMES = frozenset(
    {
        "pythonapi",
        "PyEval_SetProfile",
        "PyEval_SetTrace",
        "setprofile",
        "getprofile",
        "settrace",
        "gettrace",
        "_getframe",
        "f_back",
        "f_locals",
        "f_globals",
        "tb_frame",
        "gi_frame",
        "cr_frame",
        "__code__",
        "__globals__",
        "__closure__",
        "co_code",
        "co_consts",
        "CodeType",
        "FunctionType",
        "import_module",
        "spec_from_file_location",
        "module_from_spec",
        "exec_module",
        "get_referrers",
        "get_referents",
        "get_objects",
        "addaudithook",
        "__import__",
        "__builtins__",
        "__loader__",
        "__spec__",
        "__dict__",
        "attrgetter",
        "methodcaller",
        "__getattribute__",
        "modules",
        "__defaults__",
        "__kwdefaults__",
        "cell_contents",
        "resolve_name",
        "locate",
        "call_watch",
        "__reduce_ex__",
        "__reduce__",
    }
)
#: Builtins a student's function may not load by name (``re.compile`` is another function);
#: ``getattr`` and its kin look names up from strings, past what the audit can read.
_AUDIT_BUILTINS = frozenset(
    {"exec", "eval", "compile", "open", "breakpoint", "globals", "vars", "__import__", "getattr", "setattr", "delattr"}
)


def audit_names(fn: Any, limit: int = 200) -> list[str]:
    """What ``fn`` (unwrapped from ``functools.partial`` and caches) and the functions and classes
    of its own module that its code names, transitively, name of :data:`_AUDIT_MODULES`,
    :data:`_AUDIT_NAMES` and :data:`_AUDIT_BUILTINS`: sorted, each once. The code is read, not run:
    its instructions' names (``co_names`` holds every global, attribute and imported name a code
    object uses; a builtin counts only where an instruction loads it as a global, so that
    ``re.compile`` is not ``compile``)."""
    found: set[str] = set()
    seen_codes: set[int] = set()
    todo: list[Any] = [fn]
    home = None
    steps = 0
    while todo and steps < limit:
        steps += 1
        obj = _unwrapped(todo.pop())
        code = getattr(obj, "__code__", None)
        g = getattr(obj, "__globals__", None)
        if isinstance(obj, type):
            if home is not None and obj.__module__ == home.get("__name__"):  # a class of the notebook's own
                todo.extend(v for v in vars(obj).values() if callable(v) or isinstance(v, (staticmethod, classmethod)))
            continue
        if not isinstance(code, types.CodeType) or not isinstance(g, dict):
            continue
        if home is None:
            home = g
        if g is not home:  # another module's function (numpy's, the course's tools): not audited
            continue
        _audit_values(obj, found, todo)
        stack = [code]
        while stack:
            c = stack.pop()
            if id(c) not in seen_codes:
                seen_codes.add(id(c))
                stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
                _audit_code(c, g, found, todo)
    return sorted(found)


def _callables_in(value: Any, depth: int = 0) -> list:
    """The functions a value is or holds (in tuples, lists, sets and dicts, a few levels deep)."""
    if isinstance(value, types.FunctionType):
        return [value]
    if depth < 3 and isinstance(value, (tuple, list, set, frozenset)):
        return [f for v in list(value)[:256] for f in _callables_in(v, depth + 1)]
    if depth < 3 and isinstance(value, dict):
        return [f for v in list(value.values())[:256] for f in _callables_in(v, depth + 1)]
    return []


def _audit_values(fn: Any, found: set, todo: list) -> None:
    """Note what a function holds without naming it in its code: its default arguments and its
    closure's values (``def f(x, _ga=getattr)`` hands ``getattr`` in under another name)."""
    values = list(getattr(fn, "__defaults__", None) or ())
    values += list((getattr(fn, "__kwdefaults__", None) or {}).values())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    for value in values:
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] in _AUDIT_MODULES:
            found.add(f"a default or closure value (the module {value.__name__})")
        elif any(value is b for b in _AUDIT_BUILTIN_OBJECTS):
            found.add(f"a default or closure value (the builtin {value.__name__})")
        else:
            todo.extend(_callables_in(value))


def _students_code(frame: Any, libraries: tuple) -> bool:
    """Whether a frame runs code outside the installed libraries and outside the course's package."""
    name = frame.f_code.co_filename
    if isinstance(name, str) and name.startswith("<frozen "):  # importlib, frozen in the interpreter
        return False
    if isinstance(name, str) and os.path.isabs(name):
        real = os.path.realpath(name)
        if real.startswith(libraries) or _course_module(name) is not None:
            return False
    return True


def _unwrapped(obj: Any) -> Any:
    """The function under partials, caches and bound methods."""
    for _ in range(8):
        inner = getattr(obj, "func", None) or getattr(obj, "__wrapped__", None) or getattr(obj, "__func__", None)
        if inner is None or inner is obj:
            break
        obj = inner
    return obj


def _audit_code(c: Any, g: dict, found: set, todo: list) -> None:
    """Note what one code object names (see :func:`audit_names`); queue the functions and classes
    of its module that it names, to be read in turn."""
    import builtins
    import dis

    loaded = {i.argval for i in dis.get_instructions(c) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for name in c.co_names:
        if name in _AUDIT_NAMES or name.split(".")[0] in _AUDIT_MODULES:
            found.add(name)
            continue
        value = g.get(name, _MISSING)
        if value is _MISSING:
            if name in _AUDIT_BUILTINS and name in loaded and hasattr(builtins, name):
                found.add(name)
            continue
        if isinstance(value, types.ModuleType):
            if value.__name__.split(".")[0] in _AUDIT_MODULES:
                found.add(f"{name} (the module {value.__name__})")
        elif any(value is b for b in _AUDIT_BUILTIN_OBJECTS):
            found.add(f"{name} (the builtin {value.__name__})")
        elif callable(value):
            todo.append(value)
        else:
            todo.extend(_callables_in(value))


_MISSING = object()


def _audit_builtin_objects() -> list:
    import builtins

    return [getattr(builtins, n) for n in _AUDIT_BUILTINS if hasattr(builtins, n)]


def _dotted(text: str) -> bool:
    return bool(text) and all(p.isidentifier() for p in text.split("."))


def parse_names(names: Iterable[str], *, functions_only: bool = False) -> tuple[tuple[str, str], ...]:
    """``("nbhelpers.scaling", "nbhelpers.formats:decode")`` as
    ``(("nbhelpers.scaling", ""), ("nbhelpers.formats", "decode"))``: a module (qualified name
    empty) or ``module:qualname``. Raises ValueError for anything else, and for a module when
    ``functions_only``."""
    out = []
    for name in names:
        text = str(name)
        module, sep, qualname = text.partition(":")
        ok = _dotted(module) and (_dotted(qualname) if sep else not functions_only)
        if not ok:
            accepted = "'module:qualname'" if functions_only else "a module ('nbhelpers.scaling') or 'module:qualname'"
            raise ValueError(f"{text!r} names no function: expected {accepted}, e.g. 'nbhelpers.formats:decode'")
        out.append((module, qualname))
    return tuple(out)


class CallWatch:
    """Notes the calls of ``forbidden`` functions while it is on (see the module's docstring);
    inside a call of an ``allowed`` function (or of a function of an allowed module), calls into
    that function's own module are not noted.

    Use as a context manager around the calls to watch (the previous profile hook is put back
    after). :attr:`seen` holds what was noted across every use: ``"module:qualname"`` of each
    forbidden function called from outside the forbidden ones (where a call entered them, not
    every call inside), and a sentence for each call that hid calls from the watch. With nothing
    forbidden the watch does nothing (no hook).
    """

    def __init__(self, forbidden: Iterable[str] = (), allowed: Iterable[str] = ()) -> None:
        pairs = parse_names(forbidden)
        self._modules = tuple(m for m, q in pairs if not q)
        self._functions = frozenset((m, q) for m, q in pairs if q)
        allowed_pairs = parse_names(allowed)
        self._allowed = frozenset((m, q) for m, q in allowed_pairs if q)
        self._allowed_modules = frozenset(m for m, q in allowed_pairs if not q)
        self._hiders = _hiders() if pairs else {}
        self._string_code = _string_code_builtins() if pairs else {}
        self._libraries = _library_dirs() if pairs else ()
        self._fingerprints: dict = {}  # filled by __enter__
        # forbidden modules that may hold C functions: their calls from Python are looked up by module
        self._c_modules = tuple(m for m in self._modules if m != _COURSE and not m.startswith(_COURSE + "."))
        self.seen: set[str] = set()
        self._inside_frame: list = [None, None]  # the allowed call under way (frame, module), if any
        self._old: Any = None
        self._on = False
        self._hook_fn = self._make_hook()
        self._torch_mode: Any = None  # the torch function mode pushed by __enter__, while on

    def __bool__(self) -> bool:
        """Whether there is anything to watch."""
        return bool(self._modules or self._functions)

    def audit(self, fn: Any) -> None:
        """Read ``fn``'s code (:func:`audit_names`) and note what reaches past the watch, when
        anything is forbidden (with nothing forbidden there is nothing to guard)."""
        if not self:
            return
        try:
            names = audit_names(fn)
        except Exception:  # an object too odd to read: its calls are still watched
            return
        if names:
            self.seen.add(f"{_AUDIT} ({', '.join(names[:6])})")

    def _module_verdict(self, module: Any) -> int:
        """_NEUTRAL, _ALLOWED or _FORBIDDEN: what a call of a function of ``module`` is, by module."""
        if not isinstance(module, str):
            return _NEUTRAL
        if module in self._allowed_modules:
            return _ALLOWED
        if any(module == m or module.startswith(m + ".") for m in self._modules):
            return _FORBIDDEN
        return _NEUTRAL

    def _make_hook(self) -> Any:
        """The profile function: a closure over its tables, since it runs on every call and
        return, of Python and of C functions, while the watch is on."""
        by_globals: dict[int, tuple[dict, int, Any]] = {}  # id(f_globals) -> (them, verdict, module)
        seen, allowed, functions, hiders = self.seen, self._allowed, self._functions, self._hiders
        named = frozenset(q for _, q in allowed | functions)
        module_verdict, inside = self._module_verdict, self._inside_frame
        exit_code, torch_code = _EXIT_CODE, _TORCH_FUNCTION_CODE
        c_modules = bool(self._c_modules)
        libraries, watch = self._libraries, self
        by_code: dict[int, tuple[Any, Any]] = {}  # id(code) -> (code, (module, qualname) or None)
        # id(code) -> (code, globals): a call that is neither forbidden, allowed nor a copy
        nothing_to_do: dict[int, tuple[Any, dict]] = {}
        specials = {**{k: (fn, _EXEC) for k, fn in self._string_code.items()}, **hiders}

        def copied(code: Any) -> Any:
            # the course function a function's code is a copy of (compiled from its text elsewhere)
            known = by_code.get(id(code))
            if known is None or known[0] is not code:
                fp = _fingerprint(code)
                known = by_code[id(code)] = (code, watch._fingerprints.get(fp) if fp is not None else None)
            return known[1]

        def students(frame: Any) -> bool:
            return _students_code(frame, libraries)

        def resolve(g: dict, code: Any) -> tuple[dict, int, Any]:
            # a module by its name; a module of the course's package loaded under another name
            # (importlib from its file) by the file its code came from
            module = g.get("__name__")
            verdict = module_verdict(module)
            if verdict == _NEUTRAL:
                course = _course_module(code.co_filename)
                if course is not None:
                    module, verdict = course, module_verdict(course)
                else:
                    source = copied(code)
                    if source is not None:  # not cached by globals: a student's module may hold one copy
                        return (g, module_verdict(source[0]), source[0])
            known = by_globals[id(g)] = (g, verdict, module)
            return known

        def forbidden_caller(caller: Any) -> bool:
            if caller is None:
                return False
            g = caller.f_globals
            known = by_globals.get(id(g))
            if known is None or known[0] is not g:
                known = resolve(g, caller.f_code)
            verdict = known[1]
            pair = (known[2], caller.f_code.co_qualname)
            if verdict == _NEUTRAL:
                source = copied(caller.f_code)  # a copy of a course function calling
                if source is not None:
                    pair, verdict = source, module_verdict(source[0])
            # course code calling course code: the call entered earlier, or an allowed tool's own
            return pair in functions or pair in allowed or verdict in (_FORBIDDEN, _ALLOWED)

        def machinery_below(frame: Any) -> bool:
            # Triton compiling a kernel on a GPU starts ptxas and the C compiler (subprocess); a
            # process started from inside Triton's own code is its machinery, not the student's
            for _ in range(64):
                if frame is None:
                    return False
                module = frame.f_globals.get("__name__")
                if isinstance(module, str) and module.startswith(MACHINERY_PREFIXES):
                    return True
                frame = frame.f_back
            return False

        def hook(frame: Any, event: str, arg: Any) -> None:
            # it runs on every call and return (a Triton kernel in the interpreter makes tens of
            # millions): the common cases, a library's C or Python function, leave early
            if event == "c_call":
                special = specials.get(id(arg))
                if special is not None and special[0] is arg:
                    if special[1] is _EXEC:
                        if students(frame):
                            seen.add(_EXEC)
                    elif frame.f_code is not exit_code and not machinery_below(frame):
                        seen.add(special[1])
                elif c_modules:
                    module = _c_module(arg)
                    if module_verdict(module) == _FORBIDDEN and not forbidden_caller(frame):
                        seen.add(f"{module}:{_c_name(arg)}")
            elif event == "call":
                code, g = frame.f_code, frame.f_globals
                done = nothing_to_do.get(id(code))
                if done is not None and done[0] is code and done[1] is g:
                    return
                known = by_globals.get(id(g))
                if known is None or known[0] is not g:
                    known = resolve(g, code)
                verdict = known[1]
                if verdict == _NEUTRAL and copied(code) is None and code.co_qualname not in named:
                    nothing_to_do[id(code)] = (code, g)  # a copy of no course function, and not named
                    return
                qualname = code.co_qualname
                if verdict == _NEUTRAL and known[2] == g.get("__name__"):
                    source = copied(code)  # one copied function among a student's own
                    if source is not None:
                        verdict, qualname = module_verdict(source[0]), source[1]
                        known = (g, verdict, source[0])
                elif known[2] != g.get("__name__"):
                    source = copied(code)
                    if source is not None:
                        qualname = source[1]
                if qualname in named:  # a function listed by name outranks its module
                    pair = (known[2], qualname)
                    verdict = _ALLOWED if pair in allowed else _FORBIDDEN if pair in functions else verdict
                if verdict == _ALLOWED and inside[0] is None:
                    inside[0], inside[1] = frame, known[2]
                elif verdict == _FORBIDDEN and code is not exit_code and code is not torch_code:
                    if inside[0] is not None and known[2] == inside[1]:
                        return  # an allowed function's own module at work
                    if not forbidden_caller(frame.f_back):
                        seen.add(f"{known[2]}:{qualname}")  # where the call entered
            elif event == "return" and frame is inside[0]:
                inside[0] = None

        return hook

    def __enter__(self) -> CallWatch:
        if self:
            self._old = sys.getprofile()
            self._inside_frame[:] = [None, None]
            self._fingerprints = _course_fingerprints()
            self._on = True
            self._torch_mode = self._push_torch_mode()  # before the hook: torch's own code, not watched
            sys.setprofile(self._hook_fn)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._on:
            return
        self._on = False
        if sys.getprofile() is not self._hook_fn:  # switched off without a call the hook saw
            self.seen.add(_HOOK)
        sys.setprofile(self._old)  # the hook skips this one call: its frame is __exit__'s
        self._old = None
        self._pop_torch_mode()
        self._inside_frame[:] = [None, None]

    def _push_torch_mode(self) -> Any:
        """Where the whole of torch is forbidden and torch is loaded, a torch function mode that notes
        every torch function called while the watch is on (under an allowed tool too: it covers its
        own module only), pushed on torch's stack; else None. Without torch loaded, importing it
        runs torch's Python code, which the hook sees."""
        torch = sys.modules.get("torch")
        if "torch" not in self._modules or torch is None:
            return None
        try:
            mode = _torch_mode_class(torch)(self.seen)
            torch._C._push_on_torch_function_stack(mode)
        except Exception:  # a torch without modes: the hook alone watches it
            return None
        return mode

    def _pop_torch_mode(self) -> None:
        """Take the mode :meth:`_push_torch_mode` pushed off torch's stack. Anything the watched code
        left above it goes with it; a mode that is no longer there was taken off by that code."""
        mode, self._torch_mode = self._torch_mode, None
        if mode is None:
            return
        c = sys.modules["torch"]._C
        above = []
        try:
            while c._len_torch_function_stack() > 0:
                top = c._pop_torch_function_stack()
                if top is mode:
                    break
                above.append(top)
            else:
                self.seen.add(_TORCH_MODE)
        finally:
            for other in reversed(above):  # another mode left on: put back, as it was
                c._push_on_torch_function_stack(other)


def _course_module(filename: Any) -> str | None:
    """The dotted name of the course's module whose file ``filename`` is (``"nbhelpers.formats"``
    for ``.../nbhelpers/formats.py``), or None: read from the loaded package's folder, so that a
    copy of the module loaded under another name from the same file is still the course's."""
    package = sys.modules.get(_COURSE)
    folders = getattr(package, "__path__", None)
    if not isinstance(filename, str) or not folders or not filename.endswith(".py"):
        return None
    for folder in folders:
        try:
            rel = os.path.relpath(os.path.realpath(filename), os.path.realpath(folder))
        except ValueError:  # another drive
            continue
        if rel.startswith(os.pardir) or os.path.isabs(rel):
            continue
        parts = rel[: -len(".py")].split(os.sep)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join([_COURSE, *parts])
    return None


def _c_module(fn: Any) -> Any:
    """The module a C function belongs to: its ``__module__``, or for a method the module of the
    object it is bound to (``torch`` for a tensor's), or of that object's class; None if unknown."""
    try:
        module = getattr(fn, "__module__", None)
        if isinstance(module, str):
            return module
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, types.ModuleType):
            return owner.__name__
        return type(owner).__module__
    except Exception:  # an odd object's attributes: not a module the watch knows
        return None


def _c_name(fn: Any) -> str:
    try:
        name = getattr(fn, "__name__", None)
        return name if isinstance(name, str) and name.isidentifier() else "?"
    except Exception:
        return "?"


def _mode_init(self: Any, seen: set[str]) -> None:
    self.seen = seen


def _torch_function(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
    """The mode's ``__torch_function__``: notes ``torch:<name>``, then runs the function (torch
    takes the mode off its stack meanwhile). The hook does not count this frame as the course's
    code called."""
    self.seen.add(f"torch:{_c_name(func)}")
    return func(*args, **(kwargs or {}))


_TORCH_MODE_CLASSES: dict[int, Any] = {}


def _torch_mode_class(torch: Any) -> Any:
    """The subclass of this torch's ``TorchFunctionMode`` the watch pushes (made once)."""
    base = torch.overrides.TorchFunctionMode
    cls = _TORCH_MODE_CLASSES.get(id(base))
    if cls is None:
        body = {"__init__": _mode_init, "__torch_function__": _torch_function}
        cls = _TORCH_MODE_CLASSES[id(base)] = type("WatchTorchFunctions", (base,), body)
    return cls


_EXIT_CODE = CallWatch.__exit__.__code__
_TORCH_FUNCTION_CODE = _torch_function.__code__
_NEUTRAL, _ALLOWED, _FORBIDDEN = 0, 1, 2
_AUDIT_BUILTIN_OBJECTS = _audit_builtin_objects()
#: instructions shorter than this (a one-line helper) are not told apart from a student's own
_MIN_FINGERPRINT_BYTES = 48
#: Modules whose own subprocesses are machinery: Triton starts ptxas and a C compiler when it
#: compiles a kernel on a GPU.
MACHINERY_PREFIXES = ("triton.",)


#: The code of every watch's profile function (one closure per watch, one code object for all).
_HOOK_CODE = CallWatch()._hook_fn.__code__


def in_profile_hook(frame: Any, depth: int = 8) -> bool:
    """Whether ``frame``, or one of the ``depth`` frames below it, runs a watch's profile function:
    a signal handler that raises there makes CPython drop the profile function, which the watch
    reads as the watched code's switching it off (see ``nbhelpers.grading.in_kernel``)."""
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code is _HOOK_CODE:
            return True
        frame = frame.f_back
    return False
