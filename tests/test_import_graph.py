"""The import structure of nbhelpers: the import-linter contracts that check it, and the two rules
no tool checks.

Two contracts in pyproject.toml, run by ``make test`` (``lint-imports``), hold the structure:

- ``layers``: tooling > presentation > measurement > kernels > engines > specs, every module in
  one layer (``exhaustive``); a module imports only from layers below its own. A new module adds
  its name to its layer there.
- ``acyclic_siblings``: no import cycle among the modules of a package, at any depth (the
  modules of ``nbhelpers``, those of ``nbhelpers.plots``, ...). Inside a layer modules may import
  each other, and the layers contract lets a cycle between two of them through; this contract
  does not. A subpackage counts as one module of its parent: ``plots.errors -> metrics ->
  plots.style`` is a cycle between ``plots`` and ``metrics``.

The tests below prove both contracts are configured and that the acyclic one catches a cycle
injected into a copy of the package, then check what import-linter does not look at:

- a package and its own modules import in no circle (``plots/__init__`` importing
  ``plots.style`` which imports ``plots``): the acyclic contract compares a package's modules
  with each other, never with the package itself;
- importing the package itself loads nothing;
- no module uses another module's private names (``from .x import _name``, ``x._name``);
- the map of the layers in the package docstring names every module of the layers contract
  under its layer, and no module that does not exist.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

PACKAGE = "nbhelpers"
ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / PACKAGE


def contract(kind: str, pyproject: Path = ROOT / "pyproject.toml") -> dict:
    """The one import-linter contract of type ``kind`` in pyproject.toml."""
    found = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    of_kind = [c for c in found if c["type"] == kind]
    assert len(of_kind) == 1, f"{len(of_kind)} contracts of type {kind!r} in pyproject.toml"
    return of_kind[0]


def kept_and_broken(output: str) -> tuple[int, int]:
    """The counts of lint-imports' last line, ``Contracts: 2 kept, 0 broken.``"""
    m = re.search(r"^Contracts: (\d+) kept, (\d+) broken\.$", output, re.MULTILINE)
    assert m, output
    return int(m.group(1)), int(m.group(2))


def run_lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package and the pyproject.toml found in ``cwd``, no cache."""
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "--no-logo"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


# ====================================================================== the contracts


def test_both_contracts_are_configured_and_make_test_runs_them():
    layers = contract("layers")
    assert layers["containers"] == [PACKAGE] and layers["exhaustive"] is True
    acyclic = contract("acyclic_siblings")
    assert acyclic["ancestors"] == [PACKAGE]
    # nothing excused, and deep enough for every subpackage there is
    assert not acyclic.get("ignore_imports") and not acyclic.get("skip_descendants")
    depth = max(len(p.relative_to(PACKAGE_DIR).parts) for p in PACKAGE_DIR.rglob("*.py"))
    assert acyclic.get("depth", 10) >= depth
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    assert "lint-imports" in recipe and "ruff check" in recipe and "ruff format --check" in recipe


def copy_of_the_package(tmp_path: Path) -> Path:
    """The package's modules and pyproject.toml copied under ``tmp_path`` (returned)."""
    shutil.copytree(PACKAGE_DIR, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_lint_imports_keeps_both_contracts_on_the_package():
    run = run_lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert kept_and_broken(run.stdout)[1] == 0


@pytest.mark.parametrize(
    "module, injected, package, arrows",
    [
        # two measurement modules: the layers contract allows both arrows
        ("metrics.py", "from .experiments import gemm_inputs\n", "nbhelpers",
         {".metrics -> .experiments", ".experiments -> .metrics"}),
        # inside a subpackage, in a function: found as well
        ("plots/style.py", "\n\ndef _late():\n    from .errors import plot_error_vs_K\n", "nbhelpers.plots",
         {".style -> .errors", ".errors -> .style"}),
    ],
)  # fmt: skip
def test_an_injected_cycle_breaks_the_acyclic_contract_and_not_the_layers(tmp_path, module, injected, package, arrows):
    root = copy_of_the_package(tmp_path)
    target = root / PACKAGE / module
    target.write_text(target.read_text() + injected)
    run = run_lint_imports(root)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert kept_and_broken(out)[1] == 1, out  # the layers contract is kept
    assert f"No cycles are allowed in {package}." in out, out
    named = [line.strip() for line in out.splitlines() if line.strip().startswith("- .")]
    assert len(named) == 1 and any(named[0].startswith(f"- {a} (") for a in arrows), out


# ====================================================================== what import-linter does not check


def package_self_cycles(graph: grimp.ImportGraph) -> list[str]:
    """'package -> module -> package' for every package of the graph that imports (by any chain)
    one of its own modules which imports (by any chain) the package back."""
    found = []
    for package in sorted(m for m in graph.modules if graph.find_children(m)):
        for module in sorted(graph.find_descendants(package)):
            if graph.chain_exists(importer=package, imported=module) and graph.chain_exists(
                importer=module, imported=package
            ):
                found.append(f"{package} -> {module} -> {package}")
    return found


def test_no_package_and_its_own_modules_import_in_a_circle():
    found = package_self_cycles(grimp.build_graph(PACKAGE, cache_dir=None))
    assert not found, "a package and its own modules in an import cycle:\n  " + "\n  ".join(found)


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_package_and_module_cycle_is_found(tmp_path, monkeypatch):
    write_package(
        tmp_path / "fakepkg",
        {
            "__init__.py": "",
            "formats.py": "",
            "plots/__init__.py": "from .errors import p\n",
            "plots/errors.py": "from ..formats import f\nfrom .style import s\n",
            "plots/style.py": "def f():\n    import fakepkg.plots\n",  # in a function: still a cycle
            "kernels/__init__.py": "INTERPRETED = True\n",
            "kernels/gemm.py": "from . import INTERPRETED\n",  # the package does not import it back: fine
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert package_self_cycles(grimp.build_graph("fakepkg", cache_dir=None)) == [
        "fakepkg.plots -> fakepkg.plots.errors -> fakepkg.plots",
        "fakepkg.plots -> fakepkg.plots.style -> fakepkg.plots",
    ]


def test_the_package_itself_imports_nothing():
    """Importing ``nbhelpers`` loads no module: a notebook imports what it uses, after the setup
    cell (the kernels must not be imported before setup_device())."""
    tree = ast.parse((PACKAGE_DIR / "__init__.py").read_text())
    imports = [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "module", None) == "__future__"
    ]
    assert not imports, "nbhelpers/__init__.py imports:\n  " + "\n  ".join(imports)


# ====================================================================== private names stay private


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
    assert not found, (
        "private names used outside their module (make the name public in its module, "
        "or keep it to that module):\n  " + "\n  ".join(f"{u}, line {lines[0]}" for u, lines in sorted(found.items()))
    )


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


# ====================================================================== the map in the package docstring


def docstring_map(doc: str, package: str = PACKAGE) -> list[tuple[str, list[str]]]:
    """The layers a package docstring describes, in its order: (title, the modules of its
    bullets), from a title line at column 0 (``Engines: the arithmetic...``) followed by bullets
    ``  - :mod:`~package.name` ...``."""
    bullet = re.compile(rf"^  - :mod:`~?{re.escape(package)}\.([\w.]+)`")
    lines = doc.splitlines()
    sections: list[tuple[str, list[str]]] = []
    for line, after in zip(lines, [*lines[1:], ""]):
        title = re.match(r"^([A-Z][a-z]*(?: [a-z]+)*): ", line)
        if title and bullet.match(after):
            sections.append((title.group(1), []))
        elif (m := bullet.match(line)) and sections:
            sections[-1][1].append(m.group(1))
    return sections


def layer_modules(layer: str) -> list[str]:
    """The module names of one layer of an import-linter layers contract (``a : b``
    independent, ``a | b`` not, ``(a)`` optional)."""
    return [name.strip().strip("()").strip() for name in re.split(r"[:|]", layer) if name.strip()]


def map_problems(doc: str, layers: list[str], package_dir: Path) -> list[str]:
    """What the docstring's map gets wrong against the contract's layers (listed top first, the
    docstring lists them bottom first) and the package's files: a layer with no section, a
    module of a layer missing from its section or listed under another, a module named twice, a
    :mod: reference to a module that does not exist."""
    package = package_dir.name
    sections = docstring_map(doc, package)
    problems = []
    if len(sections) != len(layers):
        problems.append(f"{len(sections)} sections for {len(layers)} layers: {[t for t, _ in sections]}")
    layer_of = {m: i for i, layer in enumerate(reversed(layers)) for m in layer_modules(layer)}
    named: dict[str, str] = {}
    for i, (title, modules) in enumerate(sections):
        for m in modules:
            if m in named:
                problems.append(f"{m} is listed under {named[m]} and under {title}")
            named[m] = title
            if m in layer_of and layer_of[m] != i:
                problems.append(f"{m} is listed under {title}, its layer is {layers[::-1][layer_of[m]]!r}")
    for m in sorted(set(layer_of) - set(named)):
        section = sections[layer_of[m]][0] if layer_of[m] < len(sections) else f"layer {layers[::-1][layer_of[m]]!r}"
        problems.append(f"{m} is missing (it belongs under {section})")
    for m in sorted(set(named) - set(layer_of)):
        problems.append(f"{m} is listed under {named[m]} but is in no layer of the contract")
    for m in sorted(set(re.findall(rf":mod:`~?{re.escape(package)}\.([\w.]+)`", doc))):
        path = package_dir.joinpath(*m.split("."))
        if not (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()):
            problems.append(f"{package}.{m} is named but does not exist")
    return problems


def test_the_package_docstring_maps_every_module_to_its_layer():
    import nbhelpers

    layers = contract("layers")
    assert layers["containers"] == [PACKAGE]
    problems = map_problems(nbhelpers.__doc__, layers["layers"], PACKAGE_DIR)
    assert not problems, "nbhelpers/__init__.py's map of the layers:\n  " + "\n  ".join(problems)


def test_a_wrong_map_is_reported(tmp_path):
    write_package(tmp_path / "pkg", {"__init__.py": "", "a.py": "", "b.py": "", "c.py": "", "d/__init__.py": ""})
    layers = ["c : d", "a | b"]  # top first
    doc = (
        "Intro: not a section.\n\n"
        "Bottom: the lowest.\n  - :mod:`~pkg.a`  A\n  - :mod:`~pkg.b`  B, see :mod:`~pkg.d`\n\n"
        "Top: the highest.\n  - :mod:`~pkg.c`  C\n  - :mod:`~pkg.d`  D\n"
    )
    assert docstring_map(doc, "pkg") == [("Bottom", ["a", "b"]), ("Top", ["c", "d"])]
    assert map_problems(doc, layers, tmp_path / "pkg") == []
    wrong = doc.replace("  - :mod:`~pkg.b`  B", "  - :mod:`~pkg.e`  E").replace("pkg.c`  C", "pkg.b`  B")
    assert map_problems(wrong, layers, tmp_path / "pkg") == [
        "b is listed under Top, its layer is 'a | b'",
        "c is missing (it belongs under Top)",
        "e is listed under Bottom but is in no layer of the contract",
        "pkg.e is named but does not exist",
    ]
    assert map_problems(doc, ["x", *layers], tmp_path / "pkg") == [
        "2 sections for 3 layers: ['Bottom', 'Top']",
        "x is missing (it belongs under layer 'x')",
    ]
