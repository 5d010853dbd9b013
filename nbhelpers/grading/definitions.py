"""The notebook's definitions: the program the grader builds for the clean kernel the functions
are graded in.

The notebook runs whole in one kernel (its errors and time-outs are reported from there), but its
functions are called in a second, fresh kernel that runs a program the grader builds from the
notebook's syntax tree by an allowlist: each top-level statement is kept whole, on its own lines,
only when everything it runs when it runs is on the list, and left out otherwise, with the reason.
What is kept:

- imports of the modules in :data:`MODULES` (the standard library's pure ones, numpy,
  ml_dtypes, torch, triton and the course's package);
- ``def`` statements whose decorators are in :data:`DECORATORS` (``functools.cache``,
  ``dataclasses.dataclass``, ``triton.jit``, ...) and whose default values are *values* (below);
  their bodies run only when called, and annotations are never evaluated (the program is compiled
  as with ``from __future__ import annotations``);
- assignments of values to plain names: a value is a literal, a tuple, list, set or dict of
  values, arithmetic and comparisons of values, a name a kept statement bound, an attribute
  (not ``_private``) or an item of a value, a ``lambda``, or a call of one of the constructors in
  :data:`CONSTRUCTORS` (``np.float32(...)``, ``math.ldexp(...)``, ``Fraction(...)``,
  ``setup_device()``, ...) on values;
- ``class`` statements with no keywords (no metaclass), bases in :data:`BASES` or kept classes,
  decorators from the list, and bodies of such ``def`` statements and assignments (a docstring,
  ``pass``), that define none of the hooks a class statement would run (:data:`CLASS_HOOKS`);
- ``try`` statements made only of these, with ``except`` clauses that name exception classes.

Everything else is left out: expression statements (``get_ipython().events.register(...)``),
loops and comprehensions, ``if``, ``with``, magics, calls of anything else, assignments to
attributes or items (``builtins.compile = ...``, ``f.__wrapped__ = ...``), and any name with
two underscores at both ends bound at the top level (in a class body, the hooks). So no code of
the student's runs in the clean kernel until the grader calls a graded function, and a hook or a
thread that swaps the functions or forges results cannot be made there at all.

A statement kept shares none of its lines with one left out (``X = 1; hook()`` leaves out both).
The cells are parsed with a budget (:data:`MAX_DEFINITIONS_PARSE_CHARS`): cells past it, and cells
that do not parse, contribute nothing. :func:`program_cell` is the cell the grader runs for each
cell of the program: it compiles the kept lines itself, under a file name of its own
(:func:`code_file`), so that a graded function's code object says which ``def`` made it.
"""

from __future__ import annotations
import __future__

import ast
import builtins
from dataclasses import dataclass, field

from ..top_level import code_in_text
from .submissions import PARSE_LOCK

__all__ = [
    "BASES",
    "CLASS_HOOKS",
    "CONSTRUCTORS",
    "DECORATORS",
    "MAX_DEFINITIONS_PARSE_CHARS",
    "MODULES",
    "Definitions",
    "code_file",
    "definitions_of",
    "names_set",
    "names_read",
    "parse",
    "program_cell",
]

MAX_DEFINITIONS_PARSE_CHARS = 1_000_000  # of one notebook's code cells, in all

#: The modules (by their top-level package) a kept import may load.
MODULES = frozenset(
    {
        "__future__",
        "abc",
        "array",
        "bisect",
        "cmath",
        "collections",
        "dataclasses",
        "decimal",
        "enum",
        "fractions",
        "functools",
        "heapq",
        "itertools",
        "math",
        "numbers",
        "operator",
        "random",
        "statistics",
        "string",
        "struct",
        "textwrap",
        "typing",
        "ml_dtypes",
        "nbhelpers",
        "numpy",
        "torch",
        "triton",
    }
)

_NUMPY_SCALARS = (
    "float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool_ half single double intc uintc"
).split()
#: The callables a kept value may call (by the name they are imported under): constructors that
#: make a value from values and call nothing they are given.
CONSTRUCTORS = frozenset(
    [
        *(
            f"builtins.{n}"
            for n in (
                "int float complex bool str bytes tuple list dict set frozenset range slice "
                "abs min max round pow divmod len sum sorted chr ord hex bin oct"
            ).split()
        ),
        "fractions.Fraction",
        "decimal.Decimal",
        "collections.namedtuple",
        "typing.NamedTuple",
        "typing.TypeVar",
        "dataclasses.field",
        *(f"numpy.{n}" for n in _NUMPY_SCALARS),
        *(
            f"numpy.{n}"
            for n in (
                "array asarray zeros ones full arange linspace dtype finfo iinfo exp2 ldexp nextafter spacing"
            ).split()
        ),
        "numpy.random.default_rng",
        *(f"ml_dtypes.{n}" for n in ("bfloat16 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz".split())),
        *(
            f"ml_dtypes.{n}"
            for n in ("float8_e3m4 float8_e4m3 float8_e4m3b11fnuz float8_e8m0fnu float6_e2m3fn".split())
        ),
        *(f"ml_dtypes.{n}" for n in ("float6_e3m2fn float4_e2m1fn int4 uint4 int2 uint2 finfo iinfo".split())),
        *(f"torch.{n}" for n in "tensor zeros ones full arange device dtype finfo iinfo".split()),
        "triton.Config",
        "triton.cdiv",
        "triton.next_power_of_2",
        "triton.language.constexpr",
        "nbhelpers.device.setup_device",
        "nbhelpers.formats.get_format",
        "nbhelpers.recipes.Recipe",
    ]
)
_CONSTRUCTOR_MODULES = ("math.", "cmath.")  # every function of these
#: constructors that keep a function they are given without calling it
_STORES_FUNCTIONS = frozenset({"dataclasses.field"})

#: The decorators a kept ``def`` or ``class`` may have (bare, or called on values).
DECORATORS = frozenset(
    {
        "functools.cache",
        "functools.lru_cache",
        "functools.cached_property",
        "functools.total_ordering",
        "builtins.staticmethod",
        "builtins.classmethod",
        "builtins.property",
        "dataclasses.dataclass",
        "triton.jit",
        "triton.autotune",
        "triton.heuristics",
    }
)

#: The bases a kept ``class`` may have, besides classes kept before it.
BASES = frozenset(
    {
        "builtins.object",
        "builtins.Exception",
        "builtins.ValueError",
        "builtins.TypeError",
        "builtins.ArithmeticError",
        "builtins.RuntimeError",
        "typing.NamedTuple",
        "typing.Protocol",
        "typing.Generic",
        *(
            f"collections.abc.{n}"
            for n in (
                "Container Hashable Iterable Iterator Reversible Sized Callable Collection Sequence "
                "MutableSequence Set MutableSet Mapping MutableMapping"
            ).split()
        ),
    }
)
#: The bases kept subscripted (``typing.Generic[T]``), on kept values.
_SUBSCRIPTED_BASES = frozenset({"typing.Generic", "typing.Protocol"})

#: Methods that a ``class`` statement, a later one, or a library's type check would call while the
#: program runs: a kept class defines none of them.
CLASS_HOOKS = frozenset(
    {
        "__init_subclass__",
        "__class_getitem__",
        "__set_name__",
        "__mro_entries__",
        "__prepare__",
        "__subclasshook__",
        "__instancecheck__",
        "__subclasscheck__",
    }
)

_STATEMENT_WORDS = {
    "Expr": "an expression statement",
    "For": "a for loop",
    "AsyncFor": "a for loop",
    "While": "a while loop",
    "If": "an if statement",
    "With": "a with statement",
    "AsyncWith": "a with statement",
    "Delete": "a del statement",
    "AugAssign": "an augmented assignment",
    "Assert": "an assert statement",
    "Raise": "a raise statement",
    "Global": "a global statement",
    "Nonlocal": "a nonlocal statement",
    "Match": "a match statement",
    "Return": "a return statement",
    "TypeAlias": "a type statement",
}
_BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass
class Definitions:
    """The definitions program of a notebook.

    ``cells``: ``[index, source]`` of each code cell with something kept (the other lines blank);
    ``left_out``: for each statement left out, ``(cell index, first line, the names it binds or
    may change (:func:`names_set`), why)``; ``unparsed``: the indexes of cells that contribute
    nothing because they did not parse or came past the budget; ``functions``: ``[cell index,
    first line, name, source]`` of every function a kept statement makes (a ``def``, a method
    too, from its first decorator, with its text; a ``lambda``, with its statement's text): what
    a graded function's code object is matched to."""

    cells: list[list] = field(default_factory=list)
    left_out: list[tuple[int, str, frozenset[str], str]] = field(default_factory=list)
    unparsed: list[int] = field(default_factory=list)
    functions: list[list] = field(default_factory=list)


def code_file(index: int) -> str:
    """The file name the program's part from code cell ``index`` is compiled under."""
    return f"<notebook cell {index + 1}>"


def program_cell(index: int, source: str, each: bool = False) -> str:
    """The cell the clean kernel runs for one cell of the program: it compiles ``source`` (the
    kept lines) under :func:`code_file` with annotations never evaluated, puts the text where
    ``inspect`` finds it, and runs it in the notebook's namespace. Builtins are reached through
    the ``builtins`` module, and nothing it leaves behind can be rebound by the program (no kept
    statement binds a name with two underscores at both ends).

    ``each`` (a tools kernel's program, where some modules are stand-ins): each statement runs
    on its own, so that one that fails there does not keep the next from running; the cell then
    raises the first error of a ``def`` or ``class`` statement (an assignment that fails there
    leaves its name unbound; a function that reads a value computed with a missing module is
    refused before it runs, :mod:`nbhelpers.top_level`)."""
    name = code_file(index)
    flags = __future__.annotations.compiler_flag
    head = (
        "def __nbhelpers_define():\n"
        "    import builtins as b\n"
        "    import linecache as c\n"
        f"    t, n = {source!r}, {name!r}\n"
        "    c.cache[n] = (b.len(t), None, t.splitlines(True), n)\n"
    )
    if not each:
        return head + f"    b.exec(b.compile(t, n, 'exec', {flags}, True), b.globals())\n__nbhelpers_define()\n"
    return head + (
        "    import ast as a\n"
        "    first = None\n"
        "    for s in a.parse(t, n).body:\n"
        "        try:\n"
        f"            b.exec(b.compile(a.Module([s], []), n, 'exec', {flags}, True), b.globals())\n"
        "        except b.Exception as e:\n"
        "            named = b.isinstance(s, (a.FunctionDef, a.AsyncFunctionDef, a.ClassDef))\n"
        "            first = e if first is None and named else first\n"
        "    if first is not None:\n"
        "        raise first\n"
        "__nbhelpers_define()\n"
    )


def _python_of(src: str) -> str:
    """The cell as Python: IPython's syntax (``%magic``, ``!shell``, ``x?``) turned into calls,
    line for line, as the kernel does before running it."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython comes with the kernel
        return src
    try:
        return TransformerManager().transform_cell(src)
    except Exception:  # what does not transform does not parse either
        return src


def parse(src: str) -> ast.Module | None:
    """``ast.parse`` of ``src``, one thread at a time (see ``submissions.PARSE_LOCK``); None when
    it does not parse (a syntax error, or too deep to)."""
    try:
        with PARSE_LOCK:
            return ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _first_line(st: ast.stmt) -> int:
    decorators = getattr(st, "decorator_list", [])
    return min([st.lineno, *(d.lineno for d in decorators)])


def names_read(tree: ast.AST) -> frozenset[str]:
    """The variables a piece of code reads (``x`` in ``x + fmt.name``, not ``name``)."""
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))


def names_bound_locally(tree: ast.AST) -> frozenset[str]:
    """The names the first function defined in ``tree`` binds for itself: its parameters, what it
    assigns, loops over, imports or defines (less what it declares ``global`` or ``nonlocal``).
    A name it only reads is none of these: that one comes from the notebook."""
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))), None)
    if fn is None:
        return frozenset()
    declared = {name for n in ast.walk(fn) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif node is not fn and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
    return frozenset(out - declared)


def names_set(st: ast.stmt, modules: frozenset[str] = frozenset()) -> frozenset[str]:
    """The names a statement binds or may change: assignment targets (and the name under an
    attribute or an item assigned), loop and ``with`` variables, what a ``def``, ``class`` or
    import binds, and the object of a method called as a statement (``TABLE.append(x)``), unless
    it is one of ``modules``, names an import bound to a module (``np.testing.assert_equal(...)``
    changes nothing of ``np``)."""
    out = set()
    for node in ast.walk(st):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out |= _root(node.value)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            if isinstance(node.value.func, ast.Attribute):
                out |= _root(node.value.func.value) - modules
            for text in code_in_text(node.value):  # a magic's cell (%%time), an exec'd string
                inner = parse(text)
                for sub in inner.body if inner is not None else []:
                    out |= names_set(sub, modules)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(out)


def _root(node: ast.expr) -> set[str]:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return {node.id} if isinstance(node, ast.Name) else set()


def _callee(func: ast.expr) -> str:
    """How a call's function is named in a reason: its dotted name, or ``.method`` of a value."""
    node = func
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Name):  # np.abs, round_to
        return _short(func)
    return f".{func.attr}" if isinstance(func, ast.Attribute) else _short(func)


def _short(node: ast.AST, width: int = 40) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - what parsed unparses
        text = type(node).__name__
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


class _Scope:
    """What the statements kept so far bound: each name's kind (``module``, ``object``: a module
    or an object imported, with its qualified name; ``def``, ``class``, ``value``, and ``holds
    code``: a value that holds a function or class of the notebook's)."""

    def __init__(self, parent: _Scope | None = None) -> None:
        self.names: dict[str, tuple[str, str]] = {}
        self.parent = parent

    def all(self) -> dict[str, tuple[str, str]]:
        """Every name bound so far, the innermost binding of each."""
        outer = self.parent.all() if self.parent is not None else {}
        return {**outer, **self.names}

    def get(self, name: str) -> tuple[str, str] | None:
        if name in self.names:
            return self.names[name]
        return self.parent.get(name) if self.parent is not None else None

    def qualname(self, node: ast.expr) -> str | None:
        """The qualified name ``node`` (a name or a chain of attributes) stands for, when it
        starts at a module or an object a kept import bound (or at a builtin nothing rebound)."""
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        if not isinstance(node, ast.Name):
            return None
        bound = self.get(node.id)
        if bound is None:
            return f"builtins.{node.id}" if node.id in _BUILTIN_NAMES else None
        kind, qual = bound
        return qual if kind in ("module", "object") else None


def _reserved(name: str) -> bool:
    return (name.startswith("__") and name.endswith("__")) or name.startswith(("__nbhelpers", "_nbhelpers"))


def _why_not_value(node: ast.expr | None, scope: _Scope) -> str | None:
    """None when evaluating ``node`` runs nothing of the student's and nothing off the lists;
    otherwise why not."""
    if node is None or isinstance(node, ast.Constant):
        return None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return _first_reason(node.elts, scope)
    if isinstance(node, ast.Starred):
        return _why_not_value(node.value, scope)
    if isinstance(node, ast.Dict):
        return _first_reason([k for k in node.keys if k is not None] + node.values, scope)
    if isinstance(node, ast.UnaryOp):
        return _why_not_value(node.operand, scope)
    if isinstance(node, ast.BinOp):
        return _first_reason([node.left, node.right], scope)
    if isinstance(node, ast.BoolOp):
        return _first_reason(node.values, scope)
    if isinstance(node, ast.Compare):
        return _first_reason([node.left, *node.comparators], scope)
    if isinstance(node, ast.IfExp):
        return _first_reason([node.test, node.body, node.orelse], scope)
    if isinstance(node, ast.Name):
        if scope.get(node.id) is not None or node.id in _BUILTIN_NAMES:
            return None
        return f"it uses {node.id}, which no statement kept before it defines"
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            return f"it reads the private attribute .{node.attr}"
        return _why_not_value(node.value, scope)
    if isinstance(node, ast.Subscript):
        return _first_reason([node.value, node.slice], scope)
    if isinstance(node, ast.Slice):
        return _first_reason([node.lower, node.upper, node.step], scope)
    if isinstance(node, ast.JoinedStr):
        return _first_reason(node.values, scope)
    if isinstance(node, ast.FormattedValue):
        return _first_reason([node.value, node.format_spec], scope)
    if isinstance(node, ast.Lambda):
        return _why_not_arguments(node.args, scope)
    if isinstance(node, ast.Call):
        qual = scope.qualname(node.func)
        if qual is None or not (qual in CONSTRUCTORS or qual.startswith(_CONSTRUCTOR_MODULES)):
            return f"it calls {_callee(node.func)}, which is not one of the constructors kept"
        return _why_not_arguments_of_a_call(node, qual, scope)
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return "it has a comprehension (a loop)"
    return f"it has {_short(node)}, which is not a value the grader keeps"


def _notebook_code_in(node: ast.AST, scope: _Scope) -> str | None:
    """The first function or class of the notebook's that evaluating ``node`` can hand on (a
    ``lambda``, a name a kept ``def`` or ``class`` bound, or a value that holds one), or None."""
    for n in ast.walk(node):
        if isinstance(n, ast.Lambda):
            return "a lambda"
        if isinstance(n, ast.Name) and (scope.get(n.id) or ("", ""))[0] in ("def", "class", "holds code"):
            return n.id
    return None


def _why_not_arguments_of_a_call(call: ast.Call, qual: str, scope: _Scope) -> str | None:
    """Why a call of a kept constructor is not kept: an argument that is not a value, or one that
    hands the notebook's own code to it (``sorted(x, key=f)`` would run ``f``)."""
    parts = call.args + [k.value for k in call.keywords]
    why = _first_reason(parts, scope)
    if why or qual in _STORES_FUNCTIONS:
        return why
    for part in parts:
        code = _notebook_code_in(part, scope)
        if code:
            return f"it hands {code} to {_callee(call.func)}, which could call it"
    return None


def _first_reason(nodes: list, scope: _Scope) -> str | None:
    for n in nodes:
        why = _why_not_value(n, scope)
        if why:
            return why
    return None


def _why_not_arguments(args: ast.arguments, scope: _Scope) -> str | None:
    return _first_reason(args.defaults + [d for d in args.kw_defaults if d is not None], scope)


def _property_accessor(d: ast.expr, scope: _Scope) -> bool:
    """Whether a decorator is ``@x.setter`` (``getter``, ``deleter``) of a method ``x`` the same
    class body defined before, with kept decorators: a property's copy with one more function,
    made without calling the student's code (a method of any other kind has no such attribute,
    and the class statement fails)."""
    if not (isinstance(d, ast.Attribute) and d.attr in ("setter", "getter", "deleter")):
        return False
    return isinstance(d.value, ast.Name) and scope.names.get(d.value.id) == ("def", d.value.id)


def _why_not_decorators(decorators: list[ast.expr], scope: _Scope) -> str | None:
    for d in decorators:
        if _property_accessor(d, scope):
            continue
        call = d if isinstance(d, ast.Call) else None
        qual = scope.qualname(call.func if call else d)
        if qual not in DECORATORS:
            return f"its decorator @{_short(d)} is not one of those kept"
        if call:
            why = _why_not_arguments_of_a_call(call, qual, scope)
            if why:
                return why
    return None


def _why_not_target(target: ast.expr, in_class: bool) -> str | None:
    if isinstance(target, ast.Name):
        reserved = target.id in CLASS_HOOKS if in_class else _reserved(target.id)
        return f"it binds {target.id}, a reserved name" if reserved else None
    if isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            why = _why_not_target(t.value if isinstance(t, ast.Starred) else t, in_class)
            if why:
                return why
        return None
    return f"it assigns to {_short(target)}, not to a name"


def _bound_names(target: ast.expr) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _why_left_out(st: ast.stmt, scope: _Scope, in_class: bool = False) -> str | None:
    """None when the statement is kept (and what it binds is added to ``scope``); else why not."""
    if isinstance(st, ast.Pass):
        return None
    if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
        return None  # a docstring
    if isinstance(st, ast.Import) and not in_class:
        for alias in st.names:
            if alias.name.split(".")[0] not in MODULES:
                return f"it imports {alias.name}, which is not one of the modules kept"
            if _reserved(alias.asname or alias.name.split(".")[0]):
                return "it binds a reserved name"
        for alias in st.names:
            if alias.asname:
                scope.names[alias.asname] = ("module", alias.name)
            else:
                top = alias.name.split(".")[0]
                scope.names[top] = ("module", top)
        return None
    if isinstance(st, ast.ImportFrom) and not in_class:
        module = st.module or ""
        if st.level or module.split(".")[0] not in MODULES:
            return f"it imports from {'.' * st.level}{module}, which is not one of the modules kept"
        if module == "__future__":
            return "a future import (the grader compiles the program with annotations never evaluated)"
        for alias in st.names:
            if alias.name == "*":
                return "a star import"
            if _reserved(alias.asname or alias.name):
                return "it binds a reserved name"
        for alias in st.names:
            scope.names[alias.asname or alias.name] = ("object", f"{module}.{alias.name}")
        return None
    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if st.name in CLASS_HOOKS if in_class else _reserved(st.name):
            return f"it defines {st.name}, a reserved name"
        why = _why_not_decorators(st.decorator_list, scope) or _why_not_arguments(st.args, scope)
        if why:
            return why
        scope.names[st.name] = ("def", st.name)
        return None
    if isinstance(st, ast.ClassDef):
        if _reserved(st.name):
            return f"it defines {st.name}, a reserved name"
        if st.keywords:
            return "its class statement has keywords (a metaclass)"
        for base in st.bases:
            if isinstance(base, ast.Subscript) and scope.qualname(base.value) in _SUBSCRIPTED_BASES:
                if _why_not_value(base.slice, scope) is None:
                    continue  # Generic[T]: the library's __class_getitem__ on kept values
            qual = scope.qualname(base)
            kept_class = isinstance(base, ast.Name) and scope.get(base.id) == ("class", base.id)
            if not kept_class and qual not in BASES:
                return f"its base {_short(base)} is not one of the bases kept"
        why = _why_not_decorators(st.decorator_list, scope)
        if why:
            return why
        body = _Scope(scope)
        for inner in st.body:
            why = _why_left_out(inner, body, in_class=True)
            if why:
                return f"its body has a statement left out ({why})"
        scope.names[st.name] = ("class", st.name)
        return None
    if isinstance(st, (ast.Assign, ast.AnnAssign)):
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        if st.value is None:  # a field of a class (``x: int``): the annotation is never evaluated
            if not in_class:
                return "an annotation with no value"
            return _first_target_reason(targets, in_class)
        why = _first_target_reason(targets, in_class) or _why_not_value(st.value, scope)
        if why:
            return why
        for t in targets:
            for name in _bound_names(t):
                # a value that holds a function or class of the notebook's stays one
                kind = "holds code" if _notebook_code_in(st.value, scope) else "value"
                scope.names[name] = (kind, name)
        return None
    if isinstance(st, ast.Try) and not in_class:
        for handler in st.handlers:
            why = _why_not_value(handler.type, scope)
            if why:
                return f"its except clause: {why}"
            if handler.name and _reserved(handler.name):
                return "it binds a reserved name"
        trial = _Scope(scope)
        for inner in st.body + st.orelse + st.finalbody + [s for h in st.handlers for s in h.body]:
            why = _why_left_out(inner, trial)
            if why:
                return f"its try statement has a statement left out ({why})"
        scope.names.update(trial.names)
        return None
    if isinstance(st, ast.ImportFrom | ast.Import | ast.Try):
        return "an import or a try statement inside a class"
    return _STATEMENT_WORDS.get(type(st).__name__, f"a {type(st).__name__} statement")


def _checked(st: ast.stmt, scope: _Scope) -> str | None:
    """:func:`_why_left_out`, for a statement of any depth."""
    try:
        return _why_left_out(st, scope)
    except RecursionError:  # an expression nested deeper than the checker recurses: not kept
        return "it is nested too deeply to check"


def _first_target_reason(targets: list[ast.expr], in_class: bool) -> str | None:
    for t in targets:
        why = _why_not_target(t, in_class)
        if why:
            return why
    return None


def _span(st: ast.stmt) -> set[int]:
    return set(range(_first_line(st), (st.end_lineno or st.lineno) + 1))


def _line_groups(body: list[ast.stmt]) -> list[list[ast.stmt]]:
    """The statements of a cell in runs that share lines (most runs are one statement)."""
    groups: list[list[ast.stmt]] = []
    last = 0
    for st in body:
        if groups and _first_line(st) <= last:
            groups[-1].append(st)
        else:
            groups.append([st])
        last = max(last, st.end_lineno or st.lineno)
    return groups


def _text(lines: list[str], node: ast.stmt) -> str:
    return "\n".join(lines[_first_line(node) - 1 : node.end_lineno or node.lineno]) + "\n"


def _functions_of(index: int, st: ast.stmt, lines: list[str]) -> list[list]:
    """``[cell index, first line, name, source]`` of each function a kept statement makes: a
    ``def`` (a method too) with its text, a ``lambda`` with the statement's."""
    out = []
    for node in ast.walk(st):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append([index, _first_line(node), node.name, _text(lines, node)])
        elif isinstance(node, ast.Lambda):
            out.append([index, node.lineno, "<lambda>", _text(lines, st)])
    return out


def definitions_of(cells: list[tuple[int, str]], check_flags: list[bool]) -> Definitions:
    """The definitions program of a notebook whose code cells are ``cells`` (``(index, source)``),
    check cells (``check_flags``) left out."""
    out, budget, scope = Definitions(), MAX_DEFINITIONS_PARSE_CHARS, _Scope()
    for (index, src), is_check in zip(cells, check_flags):
        if is_check or not src.strip():
            continue
        if len(src) > budget:
            budget = 0
            out.unparsed.append(index)
            continue
        budget -= len(src)
        python = _python_of(src)
        tree = parse(python)
        if tree is None:
            out.unparsed.append(index)
            continue
        lines = python.splitlines()
        kept_lines: set[int] = set()
        for group in _line_groups(tree.body):
            # statements that share a line are kept together or not at all (``X = 1; hook()``),
            # each checked against what the statements kept before it bound
            trial = _Scope(scope)
            whys = [_checked(st, trial) for st in group]
            if not any(whys):
                scope.names.update(trial.names)
                for st in group:
                    kept_lines |= _span(st)
                    out.functions += _functions_of(index, st, lines)
                continue
            for st, why in zip(group, whys):
                first = lines[st.lineno - 1].strip() if st.lineno <= len(lines) else ""
                why = why or "it shares a line with a statement left out"
                modules = frozenset(n for n, (kind, _) in scope.all().items() if kind == "module")
                out.left_out.append((index, first[:60], names_set(st, modules), why))
        if kept_lines:
            text = "\n".join(line if n in kept_lines else "" for n, line in enumerate(lines, start=1))
            out.cells.append([index, text + "\n"])
    return out
