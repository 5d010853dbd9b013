"""What a notebook's top-level statements compute with: the names whose values come from modules
outside a graded function's tools.

An exercise that lists its tools (:attr:`nbhelpers.exercise_types.Exercise.tools`) lets its
function use those and nothing else, and in the grader's sandbox the function is graded where
nothing else is installed (:mod:`nbhelpers.grading.tools_view`). A value the function reads
from the notebook's top level (a global, a default argument, a class attribute) is held to the
same rule: one that a top-level statement computed with ml_dtypes, torch or a course module
outside the tools would carry their answers into the function (a tie's direction found by
rounding) and would not be there when the function is graded. :func:`outside_names` reads the
notebook's code, not its values: the check cell gives it the cells the kernel ran, the grader
the notebook's; both then refuse a function that reads one of the names it returns
(:func:`nbhelpers.call_watch.tools_audit`). Standard library only.
"""

from __future__ import annotations

import ast
import builtins
import sys
from collections.abc import Callable, Iterable

__all__ = ["code_in_text", "outside_names", "outside_of"]


def outside_of(tools: Iterable[str], course: str = "nbhelpers") -> Callable[[str], bool]:
    """Whether a module (``"ml_dtypes"``, ``"nbhelpers.scaling"``) is outside ``tools``: not the
    standard library's, not a tool or a tool's submodule, and not of a tool's package (numpy's
    submodules are numpy's), except that of the course's package only the tools' modules count."""
    tools = tuple(tools)
    roots = {t.split(".")[0] for t in tools} - {course}

    def outside(module: str) -> bool:
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top in roots or top == "__future__" or module == course:
            return False
        return not any(module == t or module.startswith(t + ".") for t in tools)

    return outside


class _Reader:
    def __init__(self, outside: Callable[[str], bool], course: str) -> None:
        self.outside = outside
        self.course = course
        self.modules: dict[str, str] = {}  # a name an import bound to a module -> the module
        self.found: dict[str, tuple[str, str]] = {}  # a name -> (the cell, the module)
        self.assigned: set[str] = set()  # names top-level assignments bound (data, not imports)
        self.bound: set[str] = set()  # every name a statement read so far binds
        self.star: str | None = None  # a module outside the tools imported with *
        self.calls: dict[str, str] = {}  # a function whose body reads from outside -> the module

    def why(self, node: ast.AST | None) -> str | None:
        """The module outside the tools that ``node`` reads, if any: through a name from it, a
        module's attribute (``nbhelpers.scaling.quantize``), a call of a function of the
        notebook's whose body reads from one, a name a ``*`` import of one may have bound, or a
        string that numpy reads as one's type (``np.dtype("float8_e4m3fn")``)."""
        if node is None:
            return None
        for n, local in _visible(node, frozenset()):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                if n.id in local:  # a function's, a lambda's, a comprehension's own name
                    continue
                if n.id in self.found:
                    return self.found[n.id][1]
                unknown = n.id not in self.bound and not hasattr(builtins, n.id)
                if self.star is not None and unknown:
                    return self.star
            elif isinstance(n, ast.Attribute):
                path = self.dotted(n)
                if path is not None and self.outside(path):
                    return path
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.calls:
                return self.calls[n.func.id]
            elif isinstance(n, ast.Call) and _imports_by_name(n) is not None and self.outside(_imports_by_name(n)):
                return _imports_by_name(n)
            elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and _folded_str(n.slice):
                key = _folded_str(n.slice)
                if n.value.attr == "modules" and self.outside(key):
                    return key  # sys.modules["ml_dtypes"]
                module = _type_named(key) if n.value.attr in ("sctypeDict", "typeDict") else None
                if module is not None and self.outside(module):
                    return module  # np.sctypeDict["float8_e4m3fn"]
            elif isinstance(n, ast.Import):  # inside a function's body
                module = next((a.name for a in n.names if self.outside(a.name)), None)
                if module is not None:
                    return module
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names = [n.module] if n.module != self.course else [f"{n.module}.{a.name}" for a in n.names]
                module = next((m for m in names if self.outside(m)), None)
                if module is not None:
                    return module
            if isinstance(n, ast.Call):  # a dtype numpy finds by its name: np.dtype("float8_e4m3fn")
                for text in _dtype_names(n):
                    module = _type_named(text)
                    if module is not None and self.outside(module):
                        return module
        return None

    def dotted(self, node: ast.Attribute) -> str | None:
        """The module a chain of attributes from a module's name reaches, its last attribute
        left out (``nbhelpers.scaling`` of ``nbhelpers.scaling.quantize``)."""
        parts = []
        value: ast.expr = node
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in self.modules:
            return None
        return ".".join([self.modules[value.id], *reversed(parts[1:])])

    def bind(self, name: str, where: str, module: str | None, top: bool) -> None:
        self.bound.add(name)
        if module is not None:
            self.found[name] = (where, module)
        elif top:
            self.found.pop(name, None)

    def statement(self, st: ast.stmt, where: str, top: bool) -> None:
        if isinstance(st, ast.Import):
            for a in st.names:
                bound = a.asname or a.name.split(".")[0]
                self.modules[bound] = a.name if a.asname else bound
                self.bind(bound, where, a.name if self.outside(a.name) else None, top)
        elif isinstance(st, ast.ImportFrom):
            for a in st.names:
                if a.name == "*":  # what it binds is not written: any name not bound before
                    source = st.module if st.module != self.course else None
                    if st.level == 0 and source is not None and self.outside(source):
                        self.star = self.star or source
                    continue
                bound = a.asname or a.name
                full = f"{st.module}.{a.name}"
                self.modules[bound] = full
                # of the course's package, the module imported from or imported counts
                source = full if st.module == self.course else st.module
                out = st.level == 0 and st.module is not None and self.outside(source)
                self.bind(bound, where, source if out else None, top)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.definition_statement(st, where)
        elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self.assignment(st, where, top)
            self.stores(st, where)
        elif isinstance(st, ast.Expr):
            for text in code_in_text(st.value):  # a magic's cell, an exec'd string: read as code
                tree = _parse(text)
                for inner in tree.body if tree is not None else []:
                    self.statement(inner, where, False)
            self.namespace_stores(st.value, where)
            self.stores(st, where)
        else:  # if, for, while, with, try: what their headers bind; their bodies
            heads = [getattr(st, f, None) for f in ("iter", "test")]
            heads += [i.context_expr for i in getattr(st, "items", [])]
            module = next((m for m in map(self.why, heads) if m), None)
            if module is not None:
                for n in ast.walk(st):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        self.bind(n.id, where, module, False)
            for field in ("body", "orelse", "finalbody"):
                for inner in getattr(st, field, None) or []:
                    self.statement(inner, where, False)
            for handler in getattr(st, "handlers", None) or []:
                for inner in handler.body:
                    self.statement(inner, where, False)

    def definition_statement(self, st: ast.stmt, where: str) -> None:
        self.bind(st.name, where, self.definition(st), True)
        self.stores(st, where)  # a walrus in its header (an annotation, a default) binds a global
        if isinstance(st, ast.ClassDef):
            return
        body = self.why(st)
        if body is not None:  # X = f() at the top level carries what f's body reads
            self.calls[st.name] = body
        else:
            self.calls.pop(st.name, None)

    def stores(self, st: ast.stmt, where: str) -> None:
        """What a statement binds on the way (``(x := ...)``), from outside when its value
        reads from outside; every name it binds at all, for the ``*`` rule."""
        for n, local in _visible(st, frozenset()):
            if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name) and n.target.id not in local:
                module = self.why(n.value)
                if module is not None:
                    self.found[n.target.id] = (where, module)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                self.bound.add(n.id)

    def namespace_stores(self, value: ast.expr, where: str) -> None:
        """Names an expression binds through the namespace itself: ``globals().update(T=...)``,
        ``globals().__setitem__("T", ...)``, ``globals().setdefault("T", ...)``."""
        for n in ast.walk(value):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _is_globals(n.func.value)):
                continue
            if n.func.attr == "update":
                for k in n.keywords:
                    if k.arg is not None:
                        self.bind(k.arg, where, self.why(k.value), False)
            elif n.func.attr in ("__setitem__", "setdefault") and len(n.args) >= 2 and _constant_str(n.args[0]):
                self.bind(_constant_str(n.args[0]), where, self.why(n.args[1]), False)

    def definition(self, st: ast.stmt) -> str | None:
        """The module outside the tools that a def or class statement reads as it runs: its
        decorators, defaults, bases, and a class body's own statements with its methods'
        decorators and defaults (not a function's body, which the audit of the function reads)."""
        header: list[ast.AST] = list(st.decorator_list)
        if isinstance(st, ast.ClassDef):
            header += st.bases + [k.value for k in st.keywords]
            for s in st.body:
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    header += s.decorator_list + s.args.defaults + [d for d in s.args.kw_defaults if d is not None]
                else:
                    header.append(s)
        else:
            header += st.args.defaults + [d for d in st.args.kw_defaults if d is not None]
        return next((m for m in map(self.why, header) if m), None)

    def assignment(self, st: ast.stmt, where: str, top: bool) -> None:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        value = st.value
        module = self.why(value)
        rest = []
        for target in targets:
            pairs = isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
            if (
                pairs
                and len(target.elts) == len(value.elts)
                and not any(isinstance(e, ast.Starred) for e in target.elts)
            ):
                for t, v in zip(target.elts, value.elts):  # a, b = 448.0, ml_dtypes...: each its own
                    self.assignment(ast.Assign(targets=[t], value=v), where, top)
            elif isinstance(target, ast.Subscript) and _is_globals(target.value):
                key = _constant_str(target.slice)  # globals()["T4"] = ...
                if key is not None:
                    self.bind(key, where, module, False)
            else:
                rest.append(target)
        if isinstance(st, ast.AugAssign) and module is None:
            return
        clear = top and isinstance(st, (ast.Assign, ast.AnnAssign))
        for target in rest:
            whole = isinstance(target, (ast.Name, ast.Tuple, ast.List, ast.Starred))
            for n in ast.walk(target):
                if isinstance(n, ast.Name):
                    if whole:
                        self.assigned.add(n.id)
                    # T[0] = ..., obj.x = ...: changes T or obj, never clears it
                    self.bind(n.id, where, module, clear and whole)


def outside_names(
    cells: Iterable[tuple[int, str]],
    outside: Callable[[str], bool],
    course: str = "nbhelpers",
    label: Callable[[int], str] = lambda i: f"cell {i + 1}",
) -> dict[str, str]:
    """The top-level names of a notebook whose values come from modules ``outside``
    (:func:`outside_of`), each with why (``"cell 3 (ml_dtypes)"``), from its code cells
    ``(index, source)`` in the order they ran: a name an import of such a module binds, a name
    a statement binds from one or from another such name (later bound from none, at the top
    level, it is clear again), a container a call changes with one, and a def or class whose
    statement reads one (defaults, decorators, bases, class attributes). A cell that is not
    Python (a magic) is read without its IPython lines."""
    reader = _Reader(outside, course)
    for index, source in cells:
        tree = _parse(source)
        if tree is None:
            continue
        for st in tree.body:
            reader.statement(st, label(index), True)
    return {name: f"{module}, in {where}" for name, (where, module) in reader.found.items()}


def _bound_in(body: list[ast.AST]) -> set[str]:
    """What a function's body binds for itself (not what it declares global or nonlocal)."""
    declared = {g for b in body for m in ast.walk(b) if isinstance(m, (ast.Global, ast.Nonlocal)) for g in m.names}
    out = set()
    for b in body:
        for m in ast.walk(b):
            if isinstance(m, ast.Name) and isinstance(m.ctx, ast.Store) and m.id not in declared:
                out.add(m.id)
            elif isinstance(m, (ast.Import, ast.ImportFrom)):
                out |= {(x.asname or x.name).split(".")[0] for x in m.names}
    return out


def _visible(node: ast.AST, local: frozenset[str]) -> list[tuple[ast.AST, frozenset[str]]]:
    """Every node under ``node`` with the names its scope binds for itself: a function's or a
    lambda's parameters and what its body binds hold in the body, not in its defaults or
    decorators; a comprehension's variables hold past its first iterator, which the enclosing
    scope evaluates."""
    out: list[tuple[ast.AST, frozenset[str]]] = []
    todo: list[tuple[ast.AST, frozenset[str]]] = [(node, local)]
    while todo:
        n, here = todo.pop()
        out.append((n, here))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = n.args
            outer = [*a.defaults, *(d for d in a.kw_defaults if d is not None), *getattr(n, "decorator_list", [])]
            every = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            outer += [x.annotation for x in every if x is not None and x.annotation is not None]
            outer += [n.returns] if getattr(n, "returns", None) is not None else []  # evaluated outside
            todo += [(d, here) for d in outer]
            params = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None}
            body = n.body if isinstance(n.body, list) else [n.body]
            inner = frozenset(here | params | _bound_in(body))
            todo += [(b, inner) for b in body]
        elif isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            names = {m.id for g in n.generators for m in ast.walk(g.target) if isinstance(m, ast.Name)}
            inner = frozenset(here | names)
            todo.append((n.generators[0].iter, here))
            todo += [(g.iter, inner) for g in n.generators[1:]] + [(c, inner) for g in n.generators for c in g.ifs]
            todo += [(e, inner) for e in ([n.key, n.value] if isinstance(n, ast.DictComp) else [n.elt])]
        else:
            todo += [(c, here) for c in ast.iter_child_nodes(n)]
    return out


#: numpy functions that read a dtype from a string argument
_DTYPE_TAKERS = frozenset("dtype astype view array asarray zeros ones full empty arange frombuffer fromiter".split())


def _dtype_names(call: ast.Call) -> list[str]:
    """The strings a call hands numpy as a dtype: any argument of ``np.dtype(...)``,
    ``x.astype(...)``, ``x.view(...)`` or a numpy constructor, and a ``dtype=`` keyword."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    given = [k.value for k in call.keywords if k.arg == "dtype"]
    if name in _DTYPE_TAKERS:
        given += call.args
    return [t for t in map(_folded_str, given) if t]


def _folded_str(node: ast.AST) -> str | None:
    """A string constant, or ``+`` of such (``"float8_" + "e4m3fn"``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded_str(node.left), _folded_str(node.right)
        return left + right if left is not None and right is not None else None
    return _constant_str(node)


def _constant_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_globals(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "vars", "locals")
    )


def _imports_by_name(call: ast.Call) -> str | None:
    """The module ``__import__("m")`` or ``importlib.import_module("m")`` names."""
    func = call.func
    named = (isinstance(func, ast.Name) and func.id == "__import__") or (
        isinstance(func, ast.Attribute) and func.attr == "import_module"
    )
    return _constant_str(call.args[0]) if named and call.args else None


def code_in_text(node: ast.AST) -> list[str]:
    """The code a call runs from text: a cell magic's cell and a line magic's line (IPython's
    ``get_ipython().run_cell_magic("time", "", "x = 1")``), an ``exec`` of a constant string."""
    texts = []
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        if name == "run_cell_magic" and len(n.args) >= 3:
            texts += [t for t in (_constant_str(n.args[1]), _constant_str(n.args[2])) if t]
        elif name == "run_line_magic" and len(n.args) >= 2 and _constant_str(n.args[1]):
            texts.append(_constant_str(n.args[1]))
        elif name in ("exec", "eval") and n.args and _constant_str(n.args[0]):
            texts.append(_constant_str(n.args[0]))
    return texts


def _type_named(text: str) -> str | None:
    """The module of the type numpy finds by the name ``text`` (``"float8_e4m3fn"`` is
    ml_dtypes' once ml_dtypes is imported), if numpy is loaded and has one."""
    numpy = sys.modules.get("numpy")
    table = getattr(numpy, "sctypeDict", None)
    if not isinstance(table, dict) or len(text) > 64:
        return None
    module = getattr(table.get(text), "__module__", None)
    return module if isinstance(module, str) else None


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            return ast.parse("\n".join(lines))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
