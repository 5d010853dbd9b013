"""What a sandboxed kernel that grades functions with listed tools sees of the installed packages.

An exercise that lists its ``tools`` (:attr:`nbhelpers.exercise_types.Exercise.tools`) lets its
function use those modules and nothing else. The call watch refuses what the function reaches
past them, but it runs in the function's own process, where a determined student can reach
anything that process holds. So, in the sandbox, such functions are graded in a kernel of their
own whose file system holds only

- the standard library (the kernel cannot run without it);
- the packages the Jupyter kernel itself runs on: ipykernel and what it requires, read from the
  installed distributions' metadata;
- numpy, the tools' own packages, and of the course's package the tools' modules with the modules
  they import (read from their source);

every other package folder of the environment (ml_dtypes, torch, triton, sympy, ...) is an
empty, read-only folder there, and so is every package folder of another Python installation
the sandbox shows (the base interpreter's, the system's); the course's other modules are not
there at all. What the process does not
hold it cannot be made to run, watch or no watch.

The notebook's imports of what is hidden still succeed there, as stand-ins that compute nothing
(:mod:`nbhelpers.grading.absent`), so that the notebook's other definitions run. A value such a
function reads from the notebook's top level is held to its tools as well: one computed with a
module outside them is refused before the function runs, in the check cell as in the grader
(:mod:`nbhelpers.top_level`).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata as metadata
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ToolsView", "tools_view"]

#: The distribution whose requirements, with their own, a kernel needs to run.
KERNEL_DISTRIBUTION = "ipykernel"


@dataclass(frozen=True)
class ToolsView:
    """hide: folders to be empty and read-only in the kernel's sandbox; course_files: the files of
    the course's package the kernel sees (the rest of its folder is empty); stub: the top-level
    module names (``"torch"``) and course modules (``"nbhelpers.scaling"``) whose imports get a
    stand-in there."""

    hide: tuple[str, ...]
    course_files: tuple[str, ...]
    stub: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"hide": list(self.hide), "course_files": list(self.course_files), "stub": list(self.stub)}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    """The distributions ``dist`` requires, extras left out (a platform's marker is ignored: a
    requirement that is not installed adds nothing)."""
    names = []
    for req in dist.requires or []:
        spec, _, marker = req.partition(";")
        if "extra" in marker:
            continue
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
        if m:
            names.append(m.group(1))
    return names


def _kernel_distributions() -> set[str]:
    """The normalised names of the kernel's distribution and of all it requires, installed."""
    seen: set[str] = set()
    todo = [KERNEL_DISTRIBUTION]
    while todo:
        name = _normal(todo.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        todo += _requirement_names(dist)
    return seen


def _pth_imports(site: Path) -> set[str]:
    """The modules that the ``.pth`` files of ``site`` import when Python starts (an editable
    install's finder, setuptools' shim): the kernel imports them before any code of ours runs."""
    names = set()
    for pth in site.glob("*.pth"):
        try:
            text = pth.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            names.update(re.findall(r"(?:\bimport\s+|__import__\(['\"])([A-Za-z_][A-Za-z0-9_]*)", line))
    return names


def _course_closure(pkg: Path, modules: list[str]) -> set[str]:
    """The course's modules (``"formats"``) that ``modules`` import, themselves included, read
    from their source (imports inside functions too)."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or not (pkg / f"{name}.py").is_file():
            continue
        seen.add(name)
        tree = ast.parse((pkg / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    todo += [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                elif node.level == 0 and node.module and node.module.split(".")[0] == pkg.name:
                    rest = node.module.split(".")[1:]
                    todo += rest[:1] if rest else [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                todo += [a.name.split(".")[1] for a in node.names if a.name.startswith(pkg.name + ".")]
    return seen


def _import_name(entry: Path) -> str:
    return entry.name.split(".")[0]


def _own_sites() -> set[Path]:
    """The package folders of this interpreter's environment (the kernel's)."""
    paths = sysconfig.get_paths()
    return {Path(paths[k]).resolve() for k in ("purelib", "platlib")}


def _other_sites() -> set[Path]:
    """Package folders of other Python installations the sandbox's read-only view holds (the
    base interpreter under a virtual environment, the system's ``dist-packages``): hidden whole
    in a tools kernel, so that a path added at run time finds no package there either."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    found = set()
    for base in {sys.base_prefix, sys.base_exec_prefix, sys.prefix, "/usr", "/usr/local"}:
        paths = sysconfig.get_paths(vars={"base": base, "platbase": base})
        found |= {Path(paths["purelib"]), Path(paths["platlib"])}
        found |= {Path(base) / "lib" / version / "site-packages", Path(base) / "lib" / version / "dist-packages"}
        found.add(Path(base) / "lib" / "python3" / "dist-packages")
    own = _own_sites()
    return {p.resolve() for p in found if p.is_dir() and p.resolve() not in own}


@functools.cache
def tools_view(tools: tuple[str, ...], pkg_dir: str) -> ToolsView:
    """What a kernel that grades functions whose tools are ``tools`` sees, in an installation whose
    course package is the folder ``pkg_dir``."""
    pkg = Path(pkg_dir)
    roots = {t.split(".")[0] for t in tools}
    kernel = _kernel_distributions()
    shown = {"numpy", *roots}
    for name, dists in metadata.packages_distributions().items():
        if any(_normal(d) in kernel for d in dists):
            shown.add(name)
    hide: list[str] = []
    stub: set[str] = set()
    hide += [str(p) for p in sorted(_other_sites()) if not pkg.resolve().is_relative_to(p)]
    for site in sorted(_own_sites()):
        if not site.is_dir():
            continue
        keep = shown | _pth_imports(site)
        for entry in sorted(site.iterdir()):
            name = _import_name(entry)
            if (
                not entry.is_dir()
                or entry.is_symlink()
                or name in keep
                or entry.name.endswith((".dist-info", ".egg-info", ".libs", ".data"))
                or not name.isidentifier()
                or name.startswith("__")
            ):
                continue
            if pkg.resolve().is_relative_to(entry.resolve()):
                continue
            hide.append(str(entry))
            if name not in sys.stdlib_module_names:  # the standard library's own comes first on the path
                stub.add(name)
    course_tools = [t.split(".", 1)[1] for t in tools if t.startswith(pkg.name + ".")]
    modules = _course_closure(pkg, [t.split(".")[0] for t in course_tools])
    files = [str(pkg / "__init__.py"), *(str(pkg / f"{m}.py") for m in sorted(modules))]
    for entry in sorted(pkg.iterdir()):
        name = _import_name(entry)
        if name.isidentifier() and name not in modules and name != "__init__":
            if entry.is_dir() or entry.suffix == ".py":
                stub.add(f"{pkg.name}.{name}")
    return ToolsView(tuple(hide), tuple(files), tuple(sorted(stub)))
