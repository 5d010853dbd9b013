"""The import structure of nbhelpers beyond what import-linter checks: no import cycles, the
package itself imports nothing, no module uses another module's private names.

The layers (tooling > presentation > measurement > kernels > engines > specs, every module in
one) are import-linter's contract in pyproject.toml, run by ``make test`` (``lint-imports``); a new
module adds its name to its layer there. Inside a layer modules may import each other, and
import-linter does not look for cycles there: this file does.

Every module of the package is read with ``ast`` (nothing is imported): module-level imports and
imports inside functions, relative imports resolved against the module's package. From these the
graph of nbhelpers-internal imports is built; a cycle fails the test with the cycle printed.
Dynamic imports
(``importlib.import_module(name)``) are not seen; the one of the course tooling is the exercise
registry's (``nbhelpers.answer_keys`` loading its own chapter modules, ``nbhelpers.answer_keys.chNN``,
by name), an arrow from a package down to its own submodules. Whoever needs the registry imports
``nbhelpers.answer_keys``, statically.

The same reading finds every use of another module's private name (``from .x import _name``,
``x._name``): a module's underscore names are its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "nbhelpers"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE


# ====================================================================== reading the package


def module_files(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (``__init__`` named as its
    package)."""
    root = package_dir.name
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = [root, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``from ... import`` names (relative levels resolved)."""
    if node.level == 0:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    if node.level - 1 > len(base) - 1:
        raise ValueError(f"{name}: relative import beyond the top-level package (line {node.lineno})")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(package_dir: Path) -> dict[str, dict[str, list[int]]]:
    """module -> {imported nbhelpers module -> line numbers}, from every import statement
    anywhere in the module (module level, in functions, in classes, under ``if``)."""
    root = package_dir.name
    files = module_files(package_dir)
    graph: dict[str, dict[str, list[int]]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        edges: dict[str, list[int]] = {}
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                # ``from pkg import sub`` imports the submodule pkg.sub when there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for t in targets:
                if (t == root or t.startswith(root + ".")) and t != name:
                    edges.setdefault(t, []).append(node.lineno)
        graph[name] = edges
    return graph


# ====================================================================== cycles and layers


def find_cycles(graph: dict[str, dict]) -> list[list[str]]:
    """One cycle (a list of modules, the first repeated at the end) per strongly connected
    component with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        components.append(sorted(comp))
    return [_cycle_in(graph, set(comp)) for comp in components]


def _cycle_in(graph, comp: set[str]) -> list[str]:
    """A concrete cycle through the smallest module of a strongly connected component (BFS)."""
    start = min(comp)
    parent = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, {})):
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if w in comp and w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle found in the component {sorted(comp)}")


def format_cycle(graph, cycle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b][0]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(steps + [cycle[-1]])


# ====================================================================== the package


@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE_DIR)


def test_the_package_is_read(graph):
    assert {"nbhelpers", "nbhelpers.formats", "nbhelpers.accumulation", "nbhelpers.plots"} <= set(graph)
    # relative imports resolved, submodules of subpackages found
    assert "nbhelpers.formats" in graph["nbhelpers.accumulation"]
    assert "nbhelpers.accumulation" in graph["nbhelpers.tensor_cores"]
    assert any(k.startswith("nbhelpers.plots.") for k in graph["nbhelpers.plots"])


def test_every_internal_import_names_a_module_of_the_package(graph):
    unknown = [
        f"{a} imports {b}, line {lines[0]}"
        for a, edges in sorted(graph.items())
        for b, lines in sorted(edges.items())
        if b not in graph
    ]
    assert not unknown, "imports of modules that do not exist:\n  " + "\n  ".join(unknown)


def test_no_import_cycles(graph):
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in nbhelpers:\n  " + "\n  ".join(format_cycle(graph, c) for c in cycles)


def test_the_package_itself_imports_nothing(graph):
    """Importing ``nbhelpers`` loads no module of it: a notebook imports what it uses, after the
    setup cell (the kernels must not be imported before setup_device())."""
    assert graph[PACKAGE] == {}, f"nbhelpers/__init__.py imports {sorted(graph[PACKAGE])}"


def test_make_test_runs_import_linter_on_the_layers():
    """The layer rules live in pyproject.toml for import-linter, and `make test` runs it."""
    import re
    import tomllib

    root = PACKAGE_DIR.parent
    contract = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    assert contract["type"] == "layers" and contract["exhaustive"] is True and len(contract["layers"]) == 6
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (root / "Makefile").read_text(), re.MULTILINE).group(1)
    assert "lint-imports" in recipe and "ruff check" in recipe and "ruff format --check" in recipe


# ====================================================================== the checker on a made-up package


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_reader_resolves_relative_function_level_and_absolute_imports(tmp_path):
    pkg = write_package(
        tmp_path / "nbhelpers",
        {
            "__init__.py": "",
            "formats.py": "import numpy\n",
            "rounding.py": "from .formats import x\n\ndef f():\n    from . import accumulation\n",
            "accumulation.py": "import nbhelpers.formats as fm\nfrom nbhelpers.kernels import gemm\n",
            "kernels/__init__.py": "INTERPRETED = True\n",
            "kernels/gemm.py": "from . import INTERPRETED\nfrom ..rounding import r\nfrom .. import formats\n",
            "plots/__init__.py": "from .errors import p\n",
            "plots/errors.py": "from ..accumulation import a\nfrom .style import s\n",
            "plots/style.py": "class C:\n    def m(self):\n        from ..tables import t\n",
        },
    )
    g = import_graph(pkg)
    assert g["nbhelpers.formats"] == {}
    assert g["nbhelpers.rounding"] == {"nbhelpers.formats": [1], "nbhelpers.accumulation": [4]}
    assert g["nbhelpers.accumulation"] == {"nbhelpers.formats": [1], "nbhelpers.kernels.gemm": [2]}
    assert g["nbhelpers.kernels.gemm"] == {
        "nbhelpers.kernels": [1],
        "nbhelpers.rounding": [2],
        "nbhelpers.formats": [3],
    }
    assert g["nbhelpers.plots"] == {"nbhelpers.plots.errors": [1]}
    assert g["nbhelpers.plots.errors"] == {"nbhelpers.accumulation": [1], "nbhelpers.plots.style": [2]}
    assert g["nbhelpers.plots.style"] == {"nbhelpers.tables": [3]}  # inside a method; no such module
    assert "nbhelpers.tables" not in g  # ... which the test of the real package reports


def test_a_cycle_is_found_and_printed(tmp_path):
    pkg = write_package(
        tmp_path / "nbhelpers",
        {
            "__init__.py": "",
            "formats.py": "",
            "rounding.py": "from .formats import x\nfrom .accumulation import y\n",
            "accumulation.py": "\n\ndef f():\n    from .tensor_cores import z\n",
            "tensor_cores.py": "from . import rounding\n",
            "metrics.py": "from .rounding import r\n",
        },
    )
    g = import_graph(pkg)
    cycles = find_cycles(g)
    assert cycles == [
        ["nbhelpers.accumulation", "nbhelpers.tensor_cores", "nbhelpers.rounding", "nbhelpers.accumulation"]
    ]
    assert format_cycle(g, cycles[0]) == (
        "nbhelpers.accumulation (line 4) -> nbhelpers.tensor_cores (line 1) "
        "-> nbhelpers.rounding (line 2) -> nbhelpers.accumulation"
    )
    assert find_cycles({"a": {"b": [1]}, "b": {}, "c": {"c": [1]}}) == []


# ====================================================================== private names stay private

# Uses of another module's private name that predate this test, in modules others own (the
# engines' rounding helpers): each to be made public by its module, then removed from here.
# The test fails when a use not listed appears, and when a listed one is gone.
KNOWN_PRIVATE_USES = {
    "nbhelpers.accumulation uses nbhelpers.rounding._as_rounding",
    "nbhelpers.tensor_cores uses nbhelpers.rounding._as_rounding",
    "nbhelpers.rounding uses nbhelpers.formats._values_to_bits",
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_name_uses(package_dir: Path) -> dict[str, list[int]]:
    """'a uses b._name' -> line numbers, for every use in module a of a private name of another
    module b of the package: ``from b import _name`` (b relative or absolute) and ``b._name``
    where ``b`` is bound to the module by an import (``import nbhelpers.b as m``,
    ``from nbhelpers import b``, ``import nbhelpers.b`` then ``nbhelpers.b._name``). A module's
    own private names are its own to use; a private submodule (``plots/_hidden.py``) is a
    module, not a private name."""
    root = package_dir.name
    files = module_files(package_dir)
    found: dict[str, list[int]] = {}

    def use(a: str, b: str, name: str, line: int) -> None:
        if b != a:
            found.setdefault(f"{a} uses {b}.{name}", []).append(line)

    for name, path in files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases: dict[str, str] = {}  # a name bound to a module of the package -> that module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == root or a.name.startswith(root + "."):
                        if a.asname:
                            aliases[a.asname] = a.name
                        else:
                            aliases[a.name.split(".")[0]] = a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                if not (base == root or base.startswith(root + ".")):
                    continue
                for a in node.names:
                    if f"{base}.{a.name}" in files:
                        aliases[a.asname or a.name] = f"{base}.{a.name}"
                    elif _is_private(a.name):
                        use(name, base, a.name, node.lineno)

        def module_of(expr: ast.expr) -> str | None:
            """The module of the package an expression names (a bound name, or a dotted chain)."""
            if isinstance(expr, ast.Name):
                return aliases.get(expr.id)
            if isinstance(expr, ast.Attribute):
                outer = module_of(expr.value)
                if outer is not None and f"{outer}.{expr.attr}" in files:
                    return f"{outer}.{expr.attr}"
            return None

        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                owner = module_of(node.value)
                if owner is not None and f"{owner}.{node.attr}" not in files:
                    use(name, owner, node.attr, node.lineno)
    return found


def test_no_module_uses_another_modules_private_names():
    found = private_name_uses(PACKAGE_DIR)
    new = sorted(set(found) - KNOWN_PRIVATE_USES)
    gone = sorted(KNOWN_PRIVATE_USES - set(found))
    assert not new, (
        "private names used outside their module (make the name public in its module, "
        "or keep it to that module):\n  " + "\n  ".join(f"{u}, line {found[u][0]}" for u in new)
    )
    assert not gone, "no longer used; remove from KNOWN_PRIVATE_USES:\n  " + "\n  ".join(gone)


def test_private_name_uses_are_found(tmp_path):
    pkg = write_package(
        tmp_path / "nbhelpers",
        {
            "__init__.py": "",
            "formats.py": "_TABLE = {}\n\ndef _bits():\n    return _TABLE\n",  # its own: fine
            "rounding.py": "from .formats import _bits, F\nfrom . import formats\nx = formats._TABLE\n",
            "metrics.py": "import nbhelpers.formats as fm\nimport nbhelpers.plots.style\n\ndef f():\n"
            "    return fm._TABLE, nbhelpers.plots.style._c, fm.__name__, fm.F\n",
            # a private submodule is a module, not a private name: fine
            "plots/__init__.py": "from ._hidden import h\nfrom . import _hidden\nfrom .style import _c as c\n",
            "plots/_hidden.py": "h = 1\n",
            "plots/style.py": "import numpy as np\n_c = np._NoValue\n",
        },
    )
    assert private_name_uses(pkg) == {
        "nbhelpers.rounding uses nbhelpers.formats._bits": [1],
        "nbhelpers.rounding uses nbhelpers.formats._TABLE": [3],
        "nbhelpers.metrics uses nbhelpers.formats._TABLE": [5],
        "nbhelpers.metrics uses nbhelpers.plots.style._c": [5],
        "nbhelpers.plots uses nbhelpers.plots.style._c": [3],
    }
