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
running code from a string: ``exec``, ``eval`` or ``compile`` however reached, C calling it too,
which an audit hook (``sys.addaudithook``) sees unless a library makes the code for itself
(dataclasses, an import); running code from a file that is neither the notebook's, nor an
installed library's, nor the course's; or opening a file of the course's package other than to
import it); such a call counts like a forbidden one, since the watch can no longer say what ran.
Before a student's function runs, :meth:`CallWatch.audit` reads its code, and the code of the
notebook's own functions and classes it names, for what reaches past the watch or the
check itself (``ctypes``, ``importlib``, ``ast``, ``gc``, a function's ``__code__``, a frame's
``f_back``, ``sys.setprofile`` and the like), its strings included, since a format string's
field path reads attributes by name (``"{0.__traceback__.tb_frame}"``); a function that names one
scores nothing, as a forbidden call does, and so does one that calls ``str.format`` on a template
whose field path, made at run time, names one (the watch reads the template at the call), or that
takes ``format`` as a value rather than calling it (``map`` would call it where the watch sees no
call).
Processes started from Triton's own code (ptxas and the C compiler, when it compiles a
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
import functools
import os
import re
import sys
import types
from collections.abc import Iterable
from typing import Any

__all__ = [
    "CallWatch",
    "READ_FINDINGS",
    "parse_names",
    "audit_names",
    "tools_audit",
    "in_profile_hook",
    "string_names",
    "field_path_names",
]

_THREAD = "started a thread (the check cannot see what a thread calls)"
_PROCESS = "started a process (the check cannot see what another process calls)"
_HOOK = "switched off or replaced the profile hook the check watches calls with"
_EXEC = "compiled or ran code from a string (the check cannot say what that code is)"
_AUDIT = "names what reaches past the check's watch or into the check itself"
_OUTSIDE = "uses what this exercise's tools do not include"
#: How the findings of reading a function's code (:meth:`CallWatch.audit`) begin, as against what
#: the watch saw it do: a report lists them first.
READ_FINDINGS = (_AUDIT, _OUTSIDE)
_TORCH_MODE = "took off the torch function mode the check watches torch with"
_FIELD_PATH = "formatted a string whose field path reads what the check forbids"
_COURSE_SOURCE = "read the course's own files (its text, copied and run, would not be the student's answer)"
_UNPICKLED = "unpickled an object of a module this exercise's tools do not include"
#: Modules an unpickled object may name whatever an exercise's tools: the builtins and the
#: helpers pickle's own protocols name (``copyreg``, ``_codecs`` for bytes).
_PICKLE_PLUMBING = frozenset({"builtins", "copyreg", "_codecs", "__builtin__", "copy_reg"})
_FOREIGN_FILE = (
    "ran code from a file that is neither the notebook's nor an installed library's nor the course's "
    "(the grader runs the notebook alone; a copy of the course's code written out and run is such a file)"
)
#: Packages that make code for themselves from text they write (a dataclass's methods, a named
#: tuple's, an import, Triton's launchers): ``exec``, ``eval`` or ``compile`` whose nearest Python
#: frame runs their code (by its file, under the installed libraries: a notebook may name its own
#: globals after any package) runs a library's own text. From any other frame (the student's, or a
#: library's that runs text it is handed: ``runpy``, ``timeit``, ``cProfile``, ``code``,
#: ``doctest``, ``numpy.testing.runstring``, torch.fx's ``_forward_from_src``, a C function such as
#: ``map`` calling ``exec`` for the student's frame) the text is the student's.
_CODE_GENERATORS = frozenset({"dataclasses", "collections", "enum", "importlib", "zipimport", "triton"})
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


#: A live object's key in the profile hook's tables: its identity, as ``id`` gives it, without the
#: ``builtins.id`` audit event ``id`` raises (the watch's audit hook would run on every one)
_key = object.__hash__


def _hiders() -> dict[int, tuple[Any, str]]:
    """id -> (the builtin, what calling it does), for the builtins this interpreter has, and
    ``_posixsubprocess.fork_exec`` (how ``subprocess`` starts a process)."""
    found = [(getattr(mod, name, None), why) for (mod, name), why in _HIDERS_BY_NAME.items()]
    try:
        import _posixsubprocess

        found.append((_posixsubprocess.fork_exec, _PROCESS))
    except (ImportError, AttributeError):  # pragma: no cover - not a POSIX system
        pass
    return {_key(fn): (fn, why) for fn, why in found if fn is not None}


def _generated_text(frame: Any) -> bool:
    """Whether ``exec``, ``eval`` or ``compile`` with ``frame`` as the nearest Python frame runs a
    library's own text (:data:`_CODE_GENERATORS`), or timeit's template around callables (with
    text handed to it, timeit runs the student's text)."""
    if frame is None:
        return False
    module = frame.f_globals.get("__name__")
    if type(module) is not str:
        return False
    if module.partition(".")[0] in _CODE_GENERATORS:
        name = frame.f_code.co_filename
        if type(name) is str and name.startswith("<frozen "):  # importlib, frozen in CPython
            return True
        return type(name) is str and os.path.isabs(name) and os.path.realpath(name).startswith(_LIBRARY_DIRS)
    if module == "timeit":  # Timer.__init__: each text is a callable's name once it takes one
        loc = frame.f_locals
        stmt, setup, names = loc.get("stmt"), loc.get("setup"), loc.get("local_ns")
        names = names if type(names) is dict else {}
        stmt_ok = callable(stmt) or (stmt == "_stmt()" and callable(names.get("_stmt")))
        setup_ok = setup == "pass" or callable(setup) or (setup == "_setup()" and callable(names.get("_setup")))
        return stmt_ok and setup_ok
    return False


def _calls_nothing(code: Any) -> bool:
    """Whether a code object (an annotation's expression) calls, imports and stores nothing: names,
    attributes, subscripts and constants only (``"np.ndarray"``, ``"list[int]"``)."""
    import dis

    if not isinstance(code, types.CodeType):
        return False
    bad = ("CALL", "IMPORT", "STORE", "DELETE", "MAKE_FUNCTION", "BUILD_CLASS", "LOAD_BUILD_CLASS")
    try:
        return not any(i.opname.startswith(bad) for i in dis.get_instructions(code))
    except Exception:  # an odd code object: not vouched for
        return False


def _course_file(path: Any) -> bool:
    """Whether ``path`` (a str, bytes or path-like; not a descriptor) lies in the course's package
    folder, while the package is loaded: its source, its compiled ``__pycache__``."""
    package = sys.modules.get(_COURSE)
    folders = getattr(package, "__path__", None)
    if not folders or isinstance(path, int):
        return False
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return any(real.startswith(os.path.join(os.path.realpath(f), "")) for f in folders)


def _loading_code(frame: Any) -> bool:
    """Whether a file is opened while an import is under way: importlib loading a module (its
    source, its compiled file; Triton reading a kernel's source as the kernel's module runs). A
    loader's ``get_data`` called outside an import (``pkgutil.get_data``) reads text, not code."""
    f = frame
    for _ in range(64):
        if f is None:
            return False
        if f.f_code.co_name in _IMPORTING and f.f_globals.get("__name__") == "importlib._bootstrap":
            return True
        f = f.f_back
    return False


#: importlib's functions under way while an import loads a module
_IMPORTING = frozenset({"_load_unlocked", "_find_and_load", "_find_and_load_unlocked", "_load"})


def _students_text(frame: Any, compiling: bool, code: Any = None) -> bool:
    """Whether ``compile`` (``compiling``) or ``exec``/``eval`` called with ``frame`` as the
    nearest Python frame works on the student's text: not a library's own
    (:func:`_generated_text`), and not a compile that runs nothing (``ast.parse`` makes a tree,
    which Triton and ``inspect`` read sources and signatures with; typing compiles a string
    annotation to check it): code so made runs only through an exec of its own."""
    module = frame.f_globals.get("__name__") if frame is not None else None
    if compiling and module in ("ast", "typing"):
        return False
    # typing evaluates a string annotation (functools.singledispatch's register reads them, and
    # every annotation is a string where annotations are postponed, PEP 563): an expression
    # that calls nothing runs nothing
    if module == "typing" and _calls_nothing(code):
        return False
    return not _generated_text(frame)


def _audit_state() -> tuple[Any, Any, Any]:
    """An audit hook (``sys.addaudithook``) and the two functions that tell it which watch is on:
    CPython raises the ``compile`` and ``exec`` events however ``exec``, ``eval`` or ``compile`` is
    reached, from Python or from C (``map(exec, ...)``, which sends the profile hook no event),
    and an audit hook cannot be taken off. While a watch is on, text that is not a library's own
    (:func:`_generated_text`) is noted as the profile hook notes it. Where the watch's exercise
    lists its tools, an unpickled object that names a module outside them (``np.load`` of a
    pickled array holding a type the tools leave out) is noted too: pickle reaches any module by
    its name."""
    # (noted set, thread, the tools' top-level packages or None) of the watches on, innermost last
    active: list[tuple[set, int, Any]] = []

    watched = frozenset({"compile", "exec", "open", "pickle.find_class"})

    def hook(event: str, args: tuple) -> None:
        # every audit event of the process comes here (a frame's f_code read, each one): the
        # common case leaves at once
        if event not in watched or not active:
            return
        noted, thread, roots = active[-1]
        # the watched call's thread only: the kernel's own threads (its output, its heartbeat)
        # are not the student's, and a thread the student starts is noted when it starts
        if _thread.get_ident() != thread:
            return
        if event == "pickle.find_class":
            module = args[0] if args and type(args[0]) is str else ""
            root = module.split(".")[0]
            if roots is not None and root not in roots and root not in _PICKLE_PLUMBING:
                noted.add(f"{_UNPICKLED} ({module})")
            return
        if event == "open":
            if args and _course_file(args[0]) and not _loading_code(sys._getframe(1)):
                noted.add(_COURSE_SOURCE)
            return
        code = args[0] if event == "exec" and args else None
        if _students_text(sys._getframe(1), event == "compile", code):
            noted.add(_EXEC)

    def push(noted: set, roots: Any = None) -> None:
        active.append((noted, _thread.get_ident(), roots))

    def pop(noted: set) -> None:
        for i in range(len(active) - 1, -1, -1):
            if active[i][0] is noted:
                del active[i]
                break

    return hook, push, pop


_AUDIT_HOOK, _audit_push, _audit_pop = _audit_state()


def _hide_type_names(roots: frozenset) -> dict:
    """Take out of numpy's table of type names (``np.sctypeDict``, which ``np.dtype("...")``,
    ``astype("...")`` and every other dtype given as a string read) the types of packages
    outside ``roots``, and return them to be put back by :func:`_show_type_names`. A package that
    registers its types with numpy (ml_dtypes: ``"float8_e4m3fn"``, ``"bfloat16"``) is otherwise
    reached by a string, which no reading of a function's names sees."""
    numpy = sys.modules.get("numpy")
    table = getattr(numpy, "sctypeDict", None)
    if type(table) is not dict:
        return {}
    hidden = {}
    for name, value in list(table.items()):
        module = getattr(value, "__module__", None)
        if type(module) is str and module.split(".")[0] not in roots:
            hidden[name] = value
            del table[name]
    return hidden


def _show_type_names(hidden: dict) -> None:
    """Put back what :func:`_hide_type_names` took out."""
    if hidden:
        sys.modules["numpy"].sctypeDict.update(hidden)


_AUDIT_HOOK_ADDED: list = []  # once a process: an audit hook stays for the interpreter's life


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


#: :func:`_library_dirs`, once: the folders a code generator's frame must run code from
_LIBRARY_DIRS = _library_dirs()


def _known_dirs() -> tuple[str, ...]:
    """The folders code may come from without being a file the notebook does not hold: the
    installed libraries' (:func:`_library_dirs`) and the folders every module loaded when the
    watch goes on was imported from (numpy from a PYTHONPATH entry or the user's site-packages),
    each ending with a separator. Not a folder by its name alone (a user site that holds nothing
    loaded, torch's compile cache): a copy written there would pass."""
    cached = _KNOWN_DIRS.get(len(sys.modules))
    if cached is not None:
        return cached
    dirs = set(_library_dirs())
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if name == "__main__" or not isinstance(path, str) or not os.path.isabs(path):
            continue
        d = os.path.dirname(os.path.realpath(path))
        up = name.count(".") + (1 if os.path.basename(path).startswith("__init__.") else 0)
        for _ in range(up):
            d = os.path.dirname(d)
        dirs.add(os.path.join(d, ""))
    _KNOWN_DIRS.clear()  # one entry: the modules loaded now
    out = _KNOWN_DIRS[len(sys.modules)] = tuple(sorted(dirs))
    return out


_KNOWN_DIRS: dict[int, tuple[str, ...]] = {}


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
        "walk_stack",
        "StackSummary",
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
        "__self__",  # a builtin function's is the builtins module (print.__self__.exec)
        "exec",
        # a module's text read, or text run as a module, outside an import; a dataclass's builder
        "pkgutil",
        "linecache",
        "getlines",
        "load_module",
        "get_loader",
        "get_data",
        "get_code",
        "source_to_code",
        "exec_module",
        "_create_fn",
        # str.format's field paths ("{0.attr[key]}") are attribute and item access by name:
        # format_map and vformat take the arguments as a mapping, Formatter overrides the lookup
        "format_map",
        "vformat",
        "Formatter",
        "get_field",
    }
)
#: Attribute names of frames, tracebacks, code objects, generators and coroutines: a string
#: that names one after a dot (a format field path) or is one reaches where the audit forbids.
_FRAME_ATTRIBUTES = frozenset(
    {"f_back", "f_builtins", "f_code", "f_globals", "f_lasti", "f_lineno", "f_locals", "f_trace"}
    | {"tb_frame", "tb_lasti", "tb_lineno", "tb_next"}
    | {"gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "co_code", "co_consts"}
)
#: The methods of str that read a field path.
_FORMATS = frozenset({"format", "format_map"})
#: A run of identifier characters in a string.
_STRING_WORD = re.compile(r"[A-Za-z0-9_]+")


def string_names(text: str) -> list[str]:
    """The names a string constant holds that the audit refuses, sorted, each once: str.format
    reads a field path's attributes and keys by name (``"{0.__traceback__.tb_frame}"``), so a
    string is read as code is. Refused: a dunder, or a piece of one (a word that begins or ends
    with two underscores, as text split to be joined later leaves it); after a dot or a bracket
    (an attribute or a key of a field path), a private name (a leading underscore), a frame's,
    traceback's or code object's attribute or a name of :data:`_AUDIT_NAMES`; and a string that
    is, whole, a private name or a frame's attribute. ``"{:.3f}"``, ``"{0}-{1}"`` and prose name
    nothing refused."""
    out = set()
    if text.isidentifier() and ((text.startswith("_") and text != "_") or text in _FRAME_ATTRIBUTES):
        out.add(text)
    for m in _STRING_WORD.finditer(text):
        word, before = m.group(), text[m.start() - 1 : m.start()]
        if len(word) > 2 and (word.startswith("__") or word.endswith("__")):
            out.add(word)
        elif before in (".", "[") and (word.startswith("_") or word in _FRAME_ATTRIBUTES or word in _AUDIT_NAMES):
            out.add(word)
    return sorted(out)


def field_path_names(text: str) -> list[str]:
    """What :func:`string_names` refuses in the replacement fields of a ``str.format`` template
    only (its field names and nested specs), not in its literal text: a library's message that
    mentions ``__array__`` formats no field path. A template that does not parse names nothing
    (``str.format`` raises on it)."""
    import string

    fields = []
    try:
        for _, name, spec, _ in string.Formatter().parse(text):
            if name is not None:
                fields.append("{" + name + (":" + spec if spec else "") + "}")
    except (ValueError, TypeError):
        return []
    return string_names("".join(fields)) if fields else []


def _strings_in(value: Any, depth: int = 0) -> list[str]:
    """The strings a code object's constant is or holds (tuples and frozensets of constants)."""
    if isinstance(value, str):
        return [value]
    if depth < 4 and isinstance(value, (tuple, frozenset)):
        return [t for v in value for t in _strings_in(v, depth + 1)]
    return []


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
    for value in _held_values(fn):
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

    instructions = list(dis.get_instructions(c))
    loaded = {i.argval for i in instructions if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for i in instructions:  # str.format taken as a value (handed to map, which calls it unseen)
        if i.opname == "LOAD_ATTR" and i.argval in _FORMATS and "NULL|self" not in i.argrepr:
            found.add(f"{i.argval} taken as a value, not called")
    # a format string's field path is attribute access by name; a docstring (the first constant,
    # which the code never loads) is prose for the reader, not a string the function uses
    used = {i.arg for i in instructions if i.opname == "LOAD_CONST"}
    for n, k in enumerate(c.co_consts):
        if n == 0 and isinstance(k, str) and 0 not in used:
            continue
        for text in _strings_in(k):
            found.update(f"a string naming {name}" for name in string_names(text))
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
#: The type of what ``functools.cache`` and ``lru_cache`` make.
_CACHE_PROBE = functools.lru_cache(maxsize=None)(lambda: None)
_CACHE_TYPE = type(_CACHE_PROBE)


def _audit_builtin_objects() -> list:
    import builtins

    return [getattr(builtins, n) for n in _AUDIT_BUILTINS if hasattr(builtins, n)]


# ----------------------------------------------------------------------------- the allow-list audit
#: Builtins a function may load by name where its exercise lists its tools: the data types, the
#: arithmetic and the iteration a computation needs, and the exception classes (added below).
_TOOL_BUILTINS = frozenset(
    "abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict dir divmod"
    " enumerate filter float format frozenset hasattr hash hex id int isinstance issubclass iter len"
    " list map max memoryview min next object oct ord pow print property range repr reversed round"
    " set slice sorted staticmethod str sum super tuple type zip NotImplemented Ellipsis".split()
)
#: Attribute names no tool needs and that reach past the watch, strings made names (``get_field``,
#: ``attrgetter``), code compiled or run from text or a pickle (``load``, ``register`` with its
#: annotations evaluated, ``measure``), or C code (``ctypes``): never allowed, whatever module
#: lists them, and never a name a notebook may define for itself.
_DENIED_ATTRIBUTES = _AUDIT_NAMES | {
    "ctypes",
    "ctypeslib",
    "cffi",
    "capsule",
    "load",
    "loads",
    "compile",
    "exec",
    "eval",
    "get_field",
    "Formatter",
    "register",
    "singledispatch",
    "singledispatchmethod",
    "get_type_hints",
    "ForwardRef",
    "measure",
    "test",
    "make_dataclass",  # a class whose attributes strings name (its namespace, its fields)
    "__setstate__",  # an instance's attributes set from a dict (functools.partial's)
    "__getstate__",  # an object's attribute dict (a module's: dataclasses' holds sys), as vars() gives
    "__reduce_cython__",  # a Cython object's fields, for pickling
    "__setstate_cython__",
    "__forward_code__",  # the code a typing.ForwardRef compiled from its text
    "update_wrapper",  # copies the attributes a tuple of strings names: a getattr by any name
    "wraps",
    "WRAPPER_ASSIGNMENTS",
    "WRAPPER_UPDATES",
    "lookfor",
    "source",
    "who",
    "__getattr__",
    "__setattr__",
    "__delattr__",
    "__subclasses__",
    "__mro__",
    "__bases__",
    "__base__",
    "mro",
    "__self__",
    "__func__",
    "__wrapped__",
    "__traceback__",
    "__class_getitem__",
    "__init_subclass__",
    "__set_name__",
    # modules that reach past the watch, as attributes of another module
    *_AUDIT_MODULES,
    *"sys os subprocess threading _thread multiprocessing concurrent signal shelve runpy code codeop"
    " pdb bdb trace timeit cProfile profile pydoc doctest unittest string weakref copyreg io tempfile"
    " shutil pathlib socket asyncio faulthandler tracemalloc atexit sysconfig site pkgutil zipimport"
    " _pickle _operator _ctypes _imp".split(),
}
#: Protocols through which numpy reads memory at an address the object gives: a notebook may not
#: define them (in a class, or a string that names one), since an array made there reads and writes
#: any of the process's memory, the watch's included; nor the methods that answer an attribute
#: of any name, made at run time (``__getattr__``, ``__getattribute__``), or fill a class body
#: by code (``__prepare__``): numpy asks an object for the protocols by name.
_DENIED_DEFINITIONS = frozenset(
    {
        "__array_interface__",
        "__array_struct__",
        "__cuda_array_interface__",
        "__dlpack__",
        "__dlpack_device__",
        "__getattr__",
        "__getattribute__",
        "__prepare__",
    }
)
#: Attribute names of frames, code objects, generators, coroutines and tracebacks.
_DENIED_PREFIXES = ("f_", "co_", "gi_", "cr_", "ag_", "tb_")
#: The types of plain data: a value of one of them is a constant, whatever holds it.
_DATA_TYPES = (int, float, complex, str, bytes, bool, type(None), range)


def _class_machinery(cls: type, v: Any) -> bool:
    """Whether a class attribute is the class's own machinery, made by Python for it: a slot's or
    its ``__dict__``'s descriptor (of this very class), a named tuple's field getter."""
    if isinstance(v, (types.MemberDescriptorType, types.GetSetDescriptorType)):
        return getattr(v, "__objclass__", None) is cls
    if type(v).__name__ == "_abc_data" and type(v).__module__ in ("_abc", "abc"):
        return True  # the registry abc keeps for an abstract class (typing.Protocol's): no attributes
    return (
        type(v).__name__ == "_tuplegetter"
        and type(v).__module__ in ("collections", "_collections")
        and isinstance(v.__doc__, (str, type(None)))
    )


def _inert_types() -> tuple:
    """Types whose objects hold nothing and call nothing a function could use: a lock (a random
    generator keeps one) and a capsule (a C pointer that only C code can open)."""
    import datetime

    capsule = type(getattr(datetime, "datetime_CAPI", None))
    out = [_thread.LockType, _thread.RLock]
    if capsule.__name__ == "PyCapsule":
        out.append(capsule)
    return tuple(out)


_INERT_TYPES = _inert_types()
#: A named tuple's own methods and fields' names, which a tool's package also uses for objects of
#: its own (numpy's ``_replace``, a string ufunc): a named tuple of the notebook's may have them.
_NAMED_TUPLE_API = frozenset({"_make", "_replace", "_asdict", "_fields", "_field_defaults"})
#: the most items a container the audited function holds may have: each is read
_HELD_ITEMS = 1 << 17
_TOOLS_CACHE: dict = {}


def _add_library_extras(modules: set, names: set, exported: dict) -> None:
    """What a tool makes that no module exports by a public name: a cache's methods and its
    info's fields (functools), the markers of a dataclass's ``__init__`` and its fields' kinds."""
    if "functools" in modules:  # what functools.cache makes: cache_info, cache_clear, its info's fields
        names.update(n for n in dir(_CACHE_TYPE) if not n.startswith("_"))
        names.update(n for n in dir(type(_CACHE_PROBE.cache_info())) if not n.startswith("_"))
        names.add("cache_parameters")  # set on each cache, not its type
    if "dataclasses" in modules:  # the markers of a dataclass's __init__ and its fields' kinds
        for name in ("_HAS_DEFAULT_FACTORY", "_FIELD", "_FIELD_CLASSVAR", "_FIELD_INITVAR"):
            marker = getattr(sys.modules["dataclasses"], name, None)
            if marker is not None:
                exported[id(marker)] = marker


def _tool_table(tools: tuple[str, ...]) -> tuple[frozenset, dict, frozenset]:
    """For the modules ``tools`` names (each exactly, not its submodules): the attribute names a
    function may use on what they give (their public names, a submodule's only where that module
    is a tool too, and the public names of their classes and of the builtin data types), the
    objects they export by id, and the modules themselves. A module that cannot be imported adds
    nothing. Made once per tuple of tools."""
    import builtins
    import importlib

    known = _TOOLS_CACHE.get(tools)
    if known is not None:
        return known
    names: set[str] = set()
    exported: dict[int, Any] = {}
    modules: set[str] = set()
    classes: list[type] = [int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset, range, slice]
    classes.append(type(None))  # in a hint: Optional[float] is Union[float, NoneType]
    builtin_classes = set(classes) | {object}
    roots = {t.split(".")[0] for t in tools}
    for tool in tools:
        try:
            module = importlib.import_module(tool)
        except Exception:  # not installed here: nothing of it is a tool
            continue
        modules.add(tool)
        for name, value in list(vars(module).items()):
            if name.startswith("_"):
                continue
            if isinstance(value, types.ModuleType):
                if value.__name__ in tools:
                    names.add(name)
                continue
            if isinstance(value, type):
                # a class another module made, which a tool imports for itself (typing's
                # WrapperDescriptorType, dataclasses' FunctionType, functools' RLock) is not the
                # tool's: its objects can be anything (a slot wrapper of object.__getattribute__)
                root = str(getattr(value, "__module__", "") or "").split(".")[0].lstrip("_")
                if root not in roots and value not in builtin_classes:
                    continue
                classes.append(value)
            names.add(name)
            exported[id(value)] = value
    for sample in _instance_samples():  # attributes their instances set for themselves
        names.update(n for n in dir(sample) if not n.startswith("_"))
    for cls in classes:
        names.update(n for n in dir(cls) if not n.startswith("_") or (n.startswith("__") and n.endswith("__")))
        names.update(n for n in _instance_fields(cls) if not n.startswith("_"))
        exported[id(cls)] = cls
    for name in dir(builtins):  # the allowed builtins, the exception classes among them
        value = getattr(builtins, name, None)
        if value is not None and _tool_builtin(name):
            exported[id(value)] = value
    _add_library_extras(modules, names, exported)
    names -= _DENIED_ATTRIBUTES
    table = (frozenset(n for n in names if not n.startswith(_DENIED_PREFIXES)), exported, frozenset(modules))
    _TOOLS_CACHE[tools] = table
    return table


def _instance_fields(cls: type) -> list[str]:
    """The attributes a class's instances hold that the class itself does not list: a
    dataclass's fields without a default (``FloatFormat.man_bits``), its slots, a named tuple's
    fields."""
    found: list[str] = []
    fields = getattr(cls, "__dataclass_fields__", None)
    if isinstance(fields, dict):
        found += [k for k in fields if isinstance(k, str)]
    for attr in ("__slots__", "_fields", "__match_args__"):
        value = cls.__dict__.get(attr) if isinstance(getattr(cls, "__dict__", None), types.MappingProxyType) else None
        if isinstance(value, str):
            value = (value,)
        if isinstance(value, (tuple, list)):
            found += [k for k in value if isinstance(k, str)]
    return found


_SHADOW_CACHE: dict = {}


def _shadowed(tools: tuple[str, ...], vocabulary: frozenset) -> frozenset:
    """The names of the public attributes of every loaded module inside a tool's package that are
    not tools' names themselves (``lib``, ``read_array`` in numpy): a notebook may not give its own
    objects such a name, which would make it an attribute name the audit lets pass on any object,
    numpy's modules included."""
    known = _SHADOW_CACHE.get(tools)
    if known is not None:
        return known
    # the course's own modules count one by one (nbhelpers.formats for ex07): the rest of the
    # course's package, its tests' helpers included, is no tool, and its globals (v, x, n) are
    # no tool's names a notebook's own attribute would shadow
    roots = {t.split(".")[0] for t in tools if t.split(".")[0] != _COURSE}
    exact = {t for t in tools if t.split(".")[0] == _COURSE}
    out: set[str] = set()
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or (name.split(".")[0] not in roots and name not in exact):
            continue
        try:
            # a name that holds plain data there (numpy.ma.core's v, a string) reaches nothing:
            # a notebook's own attribute may have it (self.v), whatever else is loaded
            out.update(
                n for n, v in list(vars(module).items()) if not n.startswith("__") and type(v) not in _DATA_TYPES
            )
        except Exception:  # an odd module object: nothing to read
            continue
        out.add(name.rsplit(".", 1)[-1])
    table = _SHADOW_CACHE[tools] = frozenset(out - vocabulary)
    return table


def _instance_samples() -> list:
    """Instances of the tools' classes whose attributes are set by each instance, not its class
    (``np.finfo(...).eps``): read once, where their modules are loaded."""
    out: list = []
    np, mld = sys.modules.get("numpy"), sys.modules.get("ml_dtypes")
    makers = []
    if np is not None:
        makers += [lambda: np.finfo(np.float32), lambda: np.iinfo(np.int32), lambda: np.errstate()]
    if mld is not None:
        makers += [lambda: mld.finfo(mld.bfloat16), lambda: mld.iinfo(mld.int4)]
    for make in makers:
        try:
            out.append(make())
        except Exception:  # another version of the library: its names are read where they are
            continue
    return out


def _is_builtin(name: str) -> bool:
    import builtins

    return hasattr(builtins, name)


def _tool_builtin(name: str) -> bool:
    import builtins

    value = getattr(builtins, name, None)
    if name in _TOOL_BUILTINS:
        return True
    return isinstance(value, type) and issubclass(value, BaseException)


def tools_audit(fn: Any, tools: Iterable[str], limit: int = 200, outside: dict | None = None) -> list[str]:
    """What ``fn`` (unwrapped from ``functools.partial`` and caches), and every function and class
    of its own module that it reaches through the names its code loads, the values those names hold
    (in containers too), default arguments and closures, uses outside ``tools``, sorted, each once.
    The code is read, not run. Allowed: a global that holds one of the notebook's own functions or
    classes (read in turn), one of the modules ``tools`` names, an object such a module exports, or
    plain data (numbers, strings, containers of them, arrays, instances of the notebook's classes);
    a builtin of :data:`_TOOL_BUILTINS` or an exception class; ``import`` of a tool; an attribute
    name that a tool, one of its classes or a builtin data type has, or that the notebook's own code
    stores or its classes define, unless it is one of :data:`_DENIED_ATTRIBUTES` or starts with one
    of :data:`_DENIED_PREFIXES`. Everything else is named in the result: what the function could do
    with it is not something the watch can follow (a module outside the list, a builtin that looks
    names up from strings, a name no tool has). ``outside``: the notebook's top-level names whose
    values came from modules outside the tools, each with where
    (:func:`nbhelpers.top_level.outside_names`): a global of the notebook's that the code loads,
    or a function or class of the notebook's whose statement read one, is named too."""
    reader = _ToolsReader(tuple(sorted(set(tools))), outside)
    todo = reader.todo
    todo.append(fn)
    steps = 0
    while todo and steps < limit:
        steps += 1
        reader.read(_unwrapped(todo.pop()))
    return reader.result()


class _ToolsReader:
    """The state of one :func:`tools_audit`: what it found, the attribute names the code uses and
    the ones the notebook's own code defines, and what is still to read."""

    def __init__(self, tools: tuple[str, ...], outside: dict | None = None) -> None:
        self.tools = tools
        self.outside = dict(outside or {})  # top-level name -> where its value came from
        self.vocabulary, self.exported, self.modules = _tool_table(tools)
        self.found: set[str] = set()
        self.used: set[str] = set()
        self.defined: set[str] = set()
        self.seen_ids: set[int] = set()
        self.todo: list[Any] = []
        self.home: Any = None  # the globals of the function audited: the notebook's
        self.libraries = _library_dirs()
        self.foreign: set[int] = set()  # ids of the functions of other notebook namespaces

    def library(self, code: Any) -> bool:
        """Whether a code object is an installed library's or the course's (by its file)."""
        name = code.co_filename
        if not isinstance(name, str) or name.startswith("<frozen "):
            return True
        return os.path.isabs(name) and (
            os.path.realpath(name).startswith(self.libraries) or _course_module(name) is not None
        )

    def own(self, value: Any) -> bool:
        """Whether a function or class is the notebook's own (defined in the audited module)."""
        mod = getattr(value, "__module__", None)
        return self.home is not None and isinstance(mod, str) and mod == self.home.get("__name__")

    def value_ok(self, value: Any, depth: int = 0) -> bool:
        """Whether a value a global, a default, a closure or a class attribute holds is allowed;
        the notebook's own functions and classes it is or holds are queued to be read."""
        # plain data by its exact type: a subclass of int or str of the notebook's is its class
        if type(value) in _DATA_TYPES or type(value) in _INERT_TYPES or self.exported.get(id(value)) is value:
            return True
        if depth < 3 and type(value) is _CACHE_TYPE:  # functools.cache: the function it calls, its
            extra = dict(getattr(value, "__dict__", None) or {})  # parameters and its attributes
            extra.pop("cache_parameters", None)  # functools' own lambda: what it returns is judged
            held = [value.__wrapped__, value.cache_parameters(), extra]
            return all(self.value_ok(v, depth + 1) for v in held)
        if depth < 3 and isinstance(value, types.MethodType):  # a bound method: function and object
            return self.value_ok(value.__func__, depth + 1) and self.value_ok(value.__self__, depth + 1)
        if isinstance(value, types.ModuleType):
            return value.__name__ in self.modules
        if isinstance(value, (type, types.FunctionType)) and self.own(value):
            self.todo.append(value)
            return True
        if isinstance(value, types.FunctionType) and not self.library(value.__code__):
            self.foreign.add(id(value))  # Python code of no library's (a notebook's, in another
            self.todo.append(value)  # namespace): read in turn, with its own globals
            return True
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
            return False  # a library's function or class that no tool exports
        cls = type(value)
        if self.own(cls):  # an instance of the notebook's own class: its class is read, and what
            self.todo.append(cls)  # the instance holds (its attributes, a named tuple's items);
            attributes = getattr(value, "__dict__", None)  # the names it has are the notebook's
            if isinstance(attributes, dict):
                self.defined.update(k for k in list(attributes)[:_HELD_ITEMS] if isinstance(k, str))
            return self.referents_ok(value, depth)
        # a container is read whole, keys too, or refused: too deep or too large to read is no data
        if type(value) not in (tuple, list, set, frozenset, dict, types.MappingProxyType) and isinstance(
            value, (tuple, list, set, frozenset, dict)
        ):  # a subclass of a container (defaultdict, OrderedDict): its items and all else it holds
            return self.referents_ok(value, depth)
        if isinstance(value, (tuple, list, set, frozenset)):
            items = list(value)
            return depth < 4 and len(items) <= _HELD_ITEMS and all(self.value_ok(v, depth + 1) for v in items)
        if isinstance(value, (dict, types.MappingProxyType)):  # a dataclass field's metadata too
            pairs = list(value.items())
            return (
                depth < 4
                and len(pairs) <= _HELD_ITEMS
                and all(self.value_ok(k, depth + 1) and self.value_ok(v, depth + 1) for k, v in pairs)
            )
        typing = sys.modules.get("typing")
        if typing is not None and isinstance(value, typing.ForwardRef):  # a hint's text (a string
            held = [getattr(value, n, None) for n in ("__forward_arg__", "__forward_value__", "__forward_module__")]
            return depth < 4 and all(self.value_ok(v, depth + 1) for v in held)  # annotation)
        alias = self.alias_ok(value, depth)
        if alias is not None:  # a type hint: list[int], typing.Optional[float], int | None
            return alias
        if any(issubclass(cls, c) for c in _array_types()):
            extra = getattr(value, "__dict__", None)  # np.matrix, a recarray: attributes set on it
            if extra:  # their names are the notebook's
                self.defined.update(k for k in list(extra)[:_HELD_ITEMS] if isinstance(k, str))
            return self.numpy_value_ok(value, depth) and (not extra or self.value_ok(dict(extra), depth + 1))
        np = sys.modules.get("numpy")
        if np is not None and isinstance(value, np.ufunc):  # np.frompyfunc makes one of any function
            return getattr(np, getattr(value, "__name__", ""), None) is value
        if np is not None and isinstance(value, np.vectorize):
            return depth < 3 and self.value_ok(value.pyfunc, depth + 1)
        if id(cls) in self.exported:  # an object of a tool's class (a slice, a deque, a partial, a
            return self.referents_ok(value, depth)  # dataclass field): data only if what it holds is
        return False  # an object of a class no tool exports (a library's handle on C code, say)

    def alias_ok(self, value: Any, depth: int) -> bool | None:
        """None when ``value`` is no type hint made by subscripting (``list[int]``,
        ``typing.Optional[float]``, ``int | None``); else whether its class and arguments are
        allowed (a class of ``collections.abc`` or typing's own is, as a hint)."""
        typing = sys.modules.get("typing")
        try:
            origin = typing.get_origin(value) if typing is not None else None
        except Exception:  # an object typing cannot read: no hint
            return None
        if origin is None:
            return None
        origin_ok = (
            origin is types.UnionType
            or self.hint_class(origin)
            or (
                isinstance(origin, type)
                and origin.__module__ in ("collections.abc", "typing")
                and getattr(sys.modules.get(origin.__module__), origin.__qualname__, None) is origin
            )
            or self.value_ok(origin, depth + 1)
        )
        args = typing.get_args(value)
        return depth < 4 and origin_ok and all(self.hint_class(a) or self.value_ok(a, depth + 1) for a in args)

    def hint_class(self, value: Any) -> bool:
        """Whether a class inside a type hint is a protocol of a tool's package, private or not
        (numpy.typing.ArrayLike names numpy's ``_SupportsArray``): a protocol makes no object."""
        if not isinstance(value, type) or not getattr(value, "_is_protocol", False):
            return False
        roots = {m.split(".")[0] for m in self.modules}
        return str(getattr(value, "__module__", "")).split(".")[0] in roots

    def describe(self, value: Any) -> str:
        """:func:`_what` of a refused value, and of what it holds that is refused (a slice or a
        dataclass field holding an fp8 type), where that is something else."""
        leaf, depth = value, 0
        while depth < 4 and self.holder(leaf):
            inner = next((v for v in self.parts(leaf) if not self.value_ok(v, depth + 1)), None)
            if inner is None:
                break
            leaf, depth = inner, depth + 1
        outer, inner = _what(value), _what(leaf)
        return outer if leaf is value or inner == outer else f"{outer}, holding {inner}"

    def holder(self, value: Any) -> bool:
        """Whether a value is refused for what it holds rather than for what it is: a container,
        a numpy value, an object of a tool's class or of the notebook's own."""
        cls = type(value)
        if isinstance(value, (dict, types.MappingProxyType, tuple, list, set, frozenset)) or cls is _CACHE_TYPE:
            return True
        if any(issubclass(cls, c) for c in _array_types()):
            return True
        return not isinstance(value, type) and (self.own(cls) or id(cls) in self.exported)

    def parts(self, value: Any) -> list:
        """What a value holds, for :meth:`describe`: a container's items (a mapping's keys and
        values), an array's object items and its dtype's metadata, any other object's referents."""
        import gc

        if isinstance(value, (types.FunctionType, type, types.ModuleType)):
            return []
        if type(value) is _CACHE_TYPE:
            extra = {k: v for k, v in (getattr(value, "__dict__", None) or {}).items() if k != "cache_parameters"}
            return [value.__wrapped__, value.cache_parameters(), extra]
        if type(value) in (dict, types.MappingProxyType):
            return [x for pair in list(value.items())[:_HELD_ITEMS] for x in pair]
        if type(value) in (tuple, list, set, frozenset):
            return list(value)[:_HELD_ITEMS]
        np = sys.modules.get("numpy")
        if np is not None and isinstance(value, (np.ndarray, np.generic, np.dtype)):
            dtype = value if isinstance(value, np.dtype) else value.dtype
            items = list((dtype.metadata or {}).values()) + list((getattr(value, "__dict__", None) or {}).values())
            items += [t for f in (dtype.fields or {}).values() for t in f[2:]]  # the fields' titles
            if isinstance(value, np.ndarray) and dtype.hasobject and value.size <= _HELD_ITEMS:
                items += value.ravel().tolist()
            return items
        return [r for r in gc.get_referents(value) if r is not type(value)][:_HELD_ITEMS]

    def referents_ok(self, value: Any, depth: int) -> bool:
        """Whether everything an object holds, as the garbage collector sees it (its attributes'
        dict, its slots, the fields a C type keeps: a slice's ends, a deque's items, a partial's
        function and arguments), is allowed; its own class is judged where it is found."""
        import gc

        held = [r for r in gc.get_referents(value) if r is not type(value)]
        return depth < 4 and len(held) <= _HELD_ITEMS and all(self.value_ok(r, depth + 1) for r in held)

    def numpy_value_ok(self, value: Any, depth: int) -> bool:
        """A numpy array, scalar or dtype is data when its element type is a tool's (numpy's own,
        or ml_dtypes' where ml_dtypes is a tool): an ml_dtypes scalar or fp8 array held where the
        tools leave ml_dtypes out hands its type over (``type(x)(v)``, ``a.dtype.type(v)``). An
        object array is read element by element."""
        np = sys.modules["numpy"]
        dtype = value if isinstance(value, np.dtype) else getattr(value, "dtype", None)
        if isinstance(value, np.generic) and not isinstance(dtype, np.dtype):
            dtype = np.dtype(type(value))
        if not isinstance(dtype, np.dtype) or not self.dtype_ok(dtype, np):
            return False
        if isinstance(value, np.generic) and not self.dtype_ok(np.dtype(type(value)), np):
            return False
        if dtype.hasobject:  # an object array: every item read (a few, or refused)
            items = value.ravel().tolist() if isinstance(value, np.ndarray) and value.size <= _HELD_ITEMS else None
            return items is not None and depth < 3 and all(self.value_ok(v, depth + 1) for v in items)
        return True

    def dtype_ok(self, dtype: Any, np: Any, depth: int = 0) -> bool:
        """A dtype, its fields' and its subarray's, all of a tool's element types."""
        if depth > 8:
            return False
        if dtype.metadata is not None and not self.value_ok(dict(dtype.metadata), 1):  # any object
            return False
        if dtype.fields:  # a field is (dtype, offset) or (dtype, offset, title): a title is any object
            return all(
                self.dtype_ok(f[0], np, depth + 1) and all(self.value_ok(t, depth + 1) for t in f[2:])
                for f in dtype.fields.values()
            )
        if dtype.subdtype is not None:
            return self.dtype_ok(dtype.subdtype[0], np, depth + 1)
        if dtype.type is np.object_:
            return True  # its items are read where it holds them
        module = getattr(dtype.type, "__module__", "") or ""
        return module.partition(".")[0] in {m.partition(".")[0] for m in self.modules}

    def read(self, obj: Any) -> None:
        """Read one function or class (a class only where it is the notebook's own)."""
        if id(obj) in self.seen_ids:
            return
        self.seen_ids.add(id(obj))
        if isinstance(obj, type):
            if self.own(obj):
                self.read_class(obj)
            return
        code = getattr(obj, "__code__", None)
        g = getattr(obj, "__globals__", None)
        if not isinstance(code, types.CodeType) or not isinstance(g, dict):
            return
        if self.home is None:
            self.home = g
        if g is not self.home and id(obj) not in self.foreign:  # a method a library made (a
            return  # namedtuple's): that library's code
        self.made_outside(getattr(obj, "__name__", None), obj)
        for value in _held_values(obj):
            if not self.value_ok(value):
                self.found.add(f"a default or closure value ({self.describe(value)})")
        attributes = getattr(obj, "__dict__", None)  # attributes set on the function: its names
        if attributes:
            self.defined.update(k for k in list(attributes)[:_HELD_ITEMS] if isinstance(k, str))
        if attributes and not self.value_ok(dict(attributes)):
            self.found.add(f"{getattr(obj, '__name__', '?')}'s attributes ({self.describe(dict(attributes))})")
        hints = getattr(obj, "__annotations__", None)
        for value in list(hints.values())[:256] if isinstance(hints, dict) else ():
            if not self.value_ok(value):  # an annotation holds a value as any default does
                self.found.add(f"an annotation ({self.describe(value)})")
        stack = [code]
        while stack:
            c = stack.pop()
            stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
            self.read_code(c, g)

    def made_outside(self, name: Any, obj: Any) -> None:
        """Note a function or class of the notebook's whose statement read a value from outside
        the tools (a default, a class attribute)."""
        if type(name) is str and name in self.outside and self.home is not None and self.home.get(name) is obj:
            self.found.add(f"{name} (its statement reads {self.outside[name]})")

    def read_class(self, cls: type) -> None:
        """A class of the notebook's own: the names it defines are its own, and its own bases'
        too (read in turn); its methods and properties are read; any other class attribute is
        judged as a global is. The methods dataclasses writes for it (:func:`_dataclass_written`)
        are the library's: what they hold is judged, their code is not read."""
        self.made_outside(cls.__name__, cls)
        meta = type(cls)  # its metaclass: its attributes are the class's too (K.name finds them)
        if meta is not type and not any(type(b) is meta for b in cls.__bases__):  # not a base's
            if self.own(meta):
                self.todo.append(meta)
            elif not self.value_ok(meta):
                self.found.add(f"{cls.__name__}'s metaclass ({_what(meta)})")
        for base in cls.__bases__:  # a library's class as a base is a value (enum.Enum is no tool)
            if not self.own(base) and base is not object and not self.value_ok(base):
                self.found.add(f"{cls.__name__}'s base ({_what(base)})")
        for base in cls.__mro__[1:]:
            if self.own(base):
                self.todo.append(base)
        self.defined.update(vars(cls))
        self.defined.update(getattr(cls, "__annotations__", None) or {})
        written = _dataclass_written(cls)
        for k, v in list(vars(cls).items()):
            if k in written:
                for held in _held_values(v):  # the class, the fields' defaults and factories
                    if not self.value_ok(held):
                        self.found.add(f"{cls.__name__}.{k} ({self.describe(held)})")
            elif isinstance(v, (staticmethod, classmethod)) and not isinstance(v.__func__, types.FunctionType):
                if not self.value_ok(v.__func__):  # a library's function made a method: a value
                    self.found.add(f"{cls.__name__}.{k} ({_what(v.__func__)})")
            elif isinstance(v, (types.FunctionType, staticmethod, classmethod)) or (
                isinstance(v, type) and self.own(v)
            ):
                self.todo.append(v)
            elif isinstance(v, type):  # a library's class held as an attribute: a value
                if not self.value_ok(v):
                    self.found.add(f"{cls.__name__}.{k} ({_what(v)})")
            elif isinstance(v, property):
                self.todo.extend(f for f in (v.fget, v.fset, v.fdel) if f is not None)
                if not self.value_ok(v.__doc__):  # property(doc=...) holds any object
                    self.found.add(f"{cls.__name__}.{k} (its doc, {self.describe(v.__doc__)})")
            elif k == "__dataclass_params__":  # dataclasses' record of its options: what it holds
                if not self.referents_ok(v, 0):
                    held = next((r for r in self.parts(v) if not self.value_ok(r, 1)), v)
                    self.found.add(f"{cls.__name__}.{k} ({_what(v)}, holding {self.describe(held)})")
            elif not _class_machinery(cls, v) and not self.value_ok(v):
                # every other attribute, a dunder's too (__doc__, __match_args__, __annotations__,
                # a dataclass's fields whole), and a descriptor (a cached method, a cached
                # property, one of the notebook's): what it holds or calls is judged
                self.found.add(f"{cls.__name__}.{k} ({self.describe(v)})")

    def read_code(self, c: Any, g: dict) -> None:
        """Note what one code object's instructions load, import and name. A class body (a
        class defined inside a function) defines the names it stores and annotates; a named tuple
        made inside a function, the names its strings list."""
        import dis

        instructions = list(dis.get_instructions(c))
        loads = {i.argval for i in instructions if i.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_ATTR", "LOAD_METHOD")}
        if loads & {"namedtuple", "NamedTuple"}:  # its fields, named by strings
            for k in c.co_consts:
                if isinstance(k, str):
                    self.defined.update(w for w in re.split(r"[\s,]+", k) if w.isidentifier())
                elif isinstance(k, tuple):
                    self.defined.update(w for w in k if isinstance(w, str) and w.isidentifier())
        for n, ins in enumerate(instructions):
            op, name = ins.opname, ins.argval
            if op == "LOAD_NAME" and name == "__annotations__":  # a class body's own annotations
                after = instructions[n + 1 : n + 3]
                if [i.opname for i in after] == ["LOAD_CONST", "STORE_SUBSCR"] and isinstance(after[0].argval, str):
                    self.defined.add(after[0].argval)  # an annotated field: `a: float`
                continue
            if op == "STORE_NAME" and isinstance(name, str):  # a class body's attribute
                self.defined.add(name)
            if op == "MATCH_CLASS":  # a class pattern reads attributes by names no co_names holds
                self.found.add("a match statement's class pattern")
            if op in ("LOAD_CONST", "STORE_NAME") and isinstance(name, str) and name in _DENIED_DEFINITIONS:
                self.found.add(f"defines {name}")  # a string naming one, or a class body's
            if not isinstance(name, str):
                continue
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                if g is self.home and name in self.outside:  # its value is judged by where it came from
                    self.found.add(f"{name} (from {self.outside[name]})")
                elif name in g:
                    if not self.value_ok(g[name]):
                        self.found.add(f"{name} ({self.describe(g[name])})")
                elif _is_builtin(name) and not _tool_builtin(name):
                    self.found.add(f"the builtin {name}")
            elif op == "IMPORT_NAME":
                if name not in self.modules:
                    self.found.add(f"import {name}")
            elif op in ("LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM"):
                own_field = _sets_own_field(c, instructions, n)
                if own_field is not None:  # a frozen dataclass's __post_init__ sets its own field
                    self.defined.add(own_field)
                else:
                    self.used.add(name)
            elif op in ("STORE_ATTR", "DELETE_ATTR"):
                self.defined.add(name)

    def result(self) -> list[str]:
        """What was found, sorted: what the code names itself (a module, a builtin) first, then
        the attribute names no tool has and the notebook's own code does not define."""
        defined = self.defined
        self.found.update(f"defines {n}" for n in defined & _DENIED_DEFINITIONS)
        shadow = _shadowed(self.tools, self.vocabulary)
        own = {
            n
            for n in defined
            if n not in _DENIED_ATTRIBUTES
            and (n not in shadow or n in _NAMED_TUPLE_API)
            and not n.startswith(_DENIED_PREFIXES)
        }
        return sorted(self.found) + sorted(f".{n}" for n in self.used - self.vocabulary - own)


#: The methods dataclasses may write for a class from text (compiled from "<string>" with the
#: globals of the class's module, so that they look like the notebook's own code).
_DATACLASS_METHODS = frozenset(
    {"__init__", "__repr__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__setattr__", "__delattr__"}
)


def _dataclass_written(cls: type) -> frozenset:
    """The names of ``cls``'s methods that are exactly what dataclasses writes for a class of its
    fields and parameters: dataclasses is asked to write them again, for a class of the same
    fields made here, and each method's code is compared with its counterpart's. A frozen
    dataclass's ``__setattr__`` names ``__setattr__``, which no function of the notebook's may;
    a method written from text of the student's own is no counterpart of the library's."""
    import dataclasses

    own = vars(cls)
    params, fields = own.get("__dataclass_params__"), own.get("__dataclass_fields__")
    candidates = {
        k: v
        for k, v in own.items()
        if k in _DATACLASS_METHODS and isinstance(v, types.FunctionType) and v.__code__.co_filename == "<string>"
    }
    if not candidates or params is None or not isinstance(fields, dict):
        return frozenset()
    try:
        # the class's own module: dataclasses reads string annotations (postponed) in its globals
        namespace: dict = {"__annotations__": {}, "__module__": cls.__module__}
        for name, f in fields.items():
            namespace["__annotations__"][name] = f.type
            options = {"init": f.init, "repr": f.repr, "hash": f.hash, "compare": f.compare, "kw_only": f.kw_only}
            if f.default is not dataclasses.MISSING:
                options["default"] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                options["default_factory"] = f.default_factory
            namespace[name] = dataclasses.field(**options)
        if hasattr(cls, "__post_init__"):
            namespace["__post_init__"] = lambda self, *args: None
        keys = ("init", "repr", "eq", "order", "unsafe_hash", "frozen")
        probe = dataclasses.dataclass(**{k: getattr(params, k) for k in keys})(type(cls.__name__, (), namespace))
    except Exception:  # fields the probe cannot copy: the methods are read as the notebook's
        return frozenset()
    return frozenset(
        k for k, v in candidates.items() if _same_code(v.__code__, getattr(vars(probe).get(k), "__code__", None))
    )


def _same_code(a: Any, b: Any) -> bool:
    """Whether two code objects do the same: instructions, names, constants (nested code too)."""
    if not isinstance(a, types.CodeType) or not isinstance(b, types.CodeType):
        return False
    parts = ("co_code", "co_names", "co_varnames", "co_freevars", "co_cellvars", "co_argcount")
    parts += ("co_kwonlyargcount", "co_posonlyargcount", "co_flags")
    if any(getattr(a, p) != getattr(b, p) for p in parts) or len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType) or isinstance(y, types.CodeType):
            if not _same_code(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _sets_own_field(code: Any, instructions: list, n: int) -> str | None:
    """The field's name where instruction ``n`` of ``code`` begins
    ``object.__setattr__(self, "name", ...)``: a method (its first parameter ``self``) setting an
    attribute of its own object named by a constant, as a frozen dataclass's ``__post_init__``
    must; else None (``__setattr__`` on anything else, or by a name made at run time, is not)."""
    ins = instructions[n]
    if ins.argval != "__setattr__" or n < 1 or n + 2 >= len(instructions) or code.co_argcount < 1:
        return None
    before, target, field = instructions[n - 1], instructions[n + 1], instructions[n + 2]
    if before.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or before.argval != "object":
        return None
    if target.opname != "LOAD_FAST" or target.argval != code.co_varnames[0]:
        return None
    name = field.argval
    if field.opname != "LOAD_CONST" or not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
        return None
    return name


def _held_values(fn: Any) -> list:
    """What a function holds without naming it in its code: its default arguments and the values
    of its closure's cells."""
    values = list(getattr(fn, "__defaults__", None) or ())
    values += list((getattr(fn, "__kwdefaults__", None) or {}).values())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    return values


def _what(value: Any) -> str:
    """A few words on what a value is, for the audit's list."""
    if isinstance(value, types.ModuleType):
        return f"the module {value.__name__}"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__name__
    module = getattr(value, "__module__", None)
    if module is None and isinstance(value, types.FunctionType):  # globals with no __name__
        return f"the function {name} of a namespace with no name"
    module = module or type(value).__module__
    return f"{module}.{name}" if isinstance(name, str) and isinstance(module, str) else type(value).__name__


def _array_types() -> tuple:
    """numpy's array, scalar and dtype classes, where numpy is loaded: data, whatever their module."""
    np = sys.modules.get("numpy")
    if np is None:
        return ()
    return (np.ndarray, np.generic, np.dtype)


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

    def __init__(
        self,
        forbidden: Iterable[str] = (),
        allowed: Iterable[str] = (),
        tools: Iterable[str] | None = None,
        outside: dict | None = None,
    ) -> None:
        pairs = parse_names(forbidden)
        self._outside = dict(outside or {})  # the notebook's names made outside the tools (tools_audit)
        self._tools = None if tools is None else tuple(m for m, _ in parse_names(tools))
        # the tools' top-level packages (numpy for numpy.random), or None where no tools are listed
        self._roots = None if self._tools is None else frozenset(m.split(".")[0] for m in self._tools)
        self._hidden: dict = {}  # the type names taken out of numpy's table while the watch is on
        self._modules = tuple(m for m, q in pairs if not q)
        self._functions = frozenset((m, q) for m, q in pairs if q)
        allowed_pairs = parse_names(allowed)
        self._allowed = frozenset((m, q) for m, q in allowed_pairs if q)
        self._allowed_modules = frozenset(m for m, q in allowed_pairs if not q)
        self._hiders = _hiders() if pairs else {}
        self._libraries = _library_dirs() if pairs else ()
        self._fingerprints: list = [{}]  # filled by __enter__
        # forbidden modules that may hold C functions: their calls from Python are looked up by module
        self._c_modules = tuple(m for m in self._modules if m != _COURSE and not m.startswith(_COURSE + "."))
        self._noted: set[str] = set()  # what the hook notes: its closure holds this set
        self._audited: set[str] = set()  # what the audit found: nothing the watched code can reach
        self._inside_frame: list = [None, None]  # the allowed call under way (frame, module), if any
        # the folder of the file the audited function was compiled from (a notebook's cells share
        # one): set by audit; code from an absolute path elsewhere, not a library's nor the
        # course's, is a file the notebook does not hold
        self._home: list = [None]
        self._known: list = [()]  # _known_dirs(), when the watch goes on
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
        home = getattr(getattr(_unwrapped(fn), "__code__", None), "co_filename", None)
        if isinstance(home, str) and os.path.isabs(home):
            self._home[0] = os.path.dirname(os.path.realpath(home))
        else:  # compiled from no file (the grader's "<notebook cell N>"): no folder is the notebook's
            self._home[0] = ""
        try:
            names = audit_names(fn)
        except Exception:  # an object too odd to read: its calls are still watched
            names = []
        if names:
            self._audited.add(f"{_AUDIT} ({', '.join(names[:6])})")
        if self._tools is None:
            return
        try:
            outside = tools_audit(fn, self._tools, outside=self._outside)
        except Exception as e:  # what cannot be read cannot be vouched for
            outside = [f"an object the audit could not read ({type(e).__name__})"]
        if outside:
            self._audited.add(f"{_OUTSIDE} ({', '.join(outside[:6])})")

    @property
    def seen(self) -> set[str]:
        """What the watch noted (a new set): each forbidden call and each call that hid calls,
        and what :meth:`audit` found. The audit's findings are kept where the profile hook (which
        the watched code can reach, with ``sys.getprofile``) does not lead."""
        return self._noted | self._audited

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
        by_globals: dict[int, tuple[dict, int, Any]] = {}  # _key(f_globals) -> (them, verdict, module)
        seen, allowed, functions, hiders = self._noted, self._allowed, self._functions, self._hiders
        named = frozenset(q for _, q in allowed | functions)
        inside = self._inside_frame
        modules_listed, allowed_modules = self._modules, self._allowed_modules

        def module_verdict(module: Any) -> int:
            # as _module_verdict, with no way back to the watch from the hook's closure
            if type(module) is not str:
                return _NEUTRAL
            if module in allowed_modules:
                return _ALLOWED
            if any(module == m or module.startswith(m + ".") for m in modules_listed):
                return _FORBIDDEN
            return _NEUTRAL

        exit_code, torch_code = _EXIT_CODE, _TORCH_FUNCTION_CODE
        # this module's namespace; in the grader's kernel the grader's code shares it (its source
        # is carried in with this module's), so encoding a result skips the frames it makes
        own_globals = globals()
        c_modules = bool(self._c_modules)
        libraries, fingerprints = self._libraries, self._fingerprints
        by_code: dict[int, tuple[Any, Any]] = {}  # _key(code) -> (code, (module, qualname) or None)
        # _key(code) -> (code, globals): a call that is neither forbidden, allowed nor a copy
        nothing_to_do: dict[int, tuple[Any, dict]] = {}
        specials = hiders  # exec, eval and compile: the audit hook (_audit_state) sees them all
        bound_builtin = types.BuiltinMethodType
        home, known = self._home, self._known
        field_paths: dict[str, list[str]] = {}  # template -> what its fields refuse (a library's)

        def foreign_file(code: Any) -> bool:
            # code from an absolute path outside the notebook's folder, the libraries and the course
            name = code.co_filename
            if home[0] is None or type(name) is not str or not os.path.isabs(name):
                return False
            real = os.path.realpath(name)
            if os.path.dirname(real) == home[0] or real.startswith(libraries) or real.startswith(known[0]):
                return False
            return _course_module(name) is None

        def copied(code: Any) -> Any:
            # the course function a function's code is a copy of (compiled from its text elsewhere)
            known = by_code.get(_key(code))
            if known is None or known[0] is not code:
                fp = _fingerprint(code)
                known = by_code[_key(code)] = (code, fingerprints[0].get(fp) if fp is not None else None)
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
            known = by_globals[_key(g)] = (g, verdict, module)
            return known

        def forbidden_caller(caller: Any) -> bool:
            if caller is None:
                return False
            g = caller.f_globals
            known = by_globals.get(_key(g))
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
                special = specials.get(_key(arg))
                if special is not None and special[0] is arg:
                    if frame.f_code is not exit_code and not machinery_below(frame):
                        seen.add(special[1])
                elif type(arg) is bound_builtin and type(arg.__self__) is str and arg.__name__ in _FORMATS:
                    # a format string's field paths read attributes and keys by name, as the
                    # string is at the call (made at run time, it was not there to be audited);
                    # str.format called unbound comes here bound to its template too
                    names = string_names(arg.__self__)
                    if names and students(frame):
                        seen.add(f"{_FIELD_PATH} ({', '.join(names[:6])})")
                    elif names and not any(c is arg.__self__ for c in frame.f_code.co_consts):
                        # a library formatting a template handed to it (logging's styles), not
                        # its own constant text (a mapping view's repr)
                        template = arg.__self__
                        paths = field_paths.get(template)
                        if paths is None:
                            paths = field_path_names(template)
                            if len(field_paths) < 4096:
                                field_paths[template] = paths
                        if paths:
                            seen.add(f"{_FIELD_PATH} ({', '.join(paths[:6])})")
                elif c_modules:
                    module = _c_module(arg)
                    if module_verdict(module) == _FORBIDDEN and not forbidden_caller(frame):
                        seen.add(f"{module}:{_c_name(arg)}")
            elif event == "call":
                g = frame.f_globals
                if g is own_globals:  # the watch's own code (in the grader's kernel, the grader's too)
                    return
                code = frame.f_code  # an audited read: the audit hook runs on each
                done = nothing_to_do.get(_key(code))
                if done is not None and done[0] is code and done[1] is g:
                    return
                known = by_globals.get(_key(g))
                if known is None or known[0] is not g:
                    known = resolve(g, code)
                verdict = known[1]
                if verdict == _NEUTRAL and copied(code) is None and code.co_qualname not in named:
                    if foreign_file(code):
                        seen.add(_FOREIGN_FILE)
                    nothing_to_do[_key(code)] = (code, g)  # a copy of no course function, and not named
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
            self._fingerprints[0] = _course_fingerprints()
            if not self._known[0]:
                self._known[0] = _known_dirs()
            if not _AUDIT_HOOK_ADDED:
                sys.addaudithook(_AUDIT_HOOK)
                _AUDIT_HOOK_ADDED.append(True)
            _audit_push(self._noted, self._roots)
            # a type a tool leaves out is not to be had by its name while the watch is on
            self._hidden = _hide_type_names(self._roots) if self._roots is not None else {}
            self._on = True
            self._torch_mode = self._push_torch_mode()  # before the hook: torch's own code, not watched
            sys.setprofile(self._hook_fn)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._on:
            return
        self._on = False
        _audit_pop(self._noted)
        hidden, self._hidden = self._hidden, {}
        _show_type_names(hidden)
        error = exc[1] if len(exc) > 1 else None
        if hidden and isinstance(error, (TypeError, ValueError)):  # numpy did not know a hidden name
            # numpy's words: data type 'float8_e4m3fn' not understood; format number 1 of
            # "(2,)float8_e4m3fn" is not recognized
            quoted = re.findall(r"'([^']*)'|\"([^\"]*)\"", str(error))
            words = {w for pair in quoted for text in pair for w in re.split(r"[^\w]+", text) if w}
            for name, value in hidden.items():
                if name in words:
                    self._audited.add(f"{_OUTSIDE} ({value.__module__}.{value.__name__}, named {name!r})")
                    break
        if sys.getprofile() is not self._hook_fn:  # switched off without a call the hook saw
            self._noted.add(_HOOK)
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
            mode = _torch_mode_class(torch)(self._noted)
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
                self._noted.add(_TORCH_MODE)
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
