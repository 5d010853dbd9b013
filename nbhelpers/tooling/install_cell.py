"""The install cell: the first code cell of every chapter notebook (``notebooks/NN_*.ipynb``).

A chapter opened on Colab (each chapter page's "Open in Colab" button) starts in a bare Python with
no course in it. The install cell, right after the title, sets the course up there and is a no-op
everywhere else:

* ``nbhelpers`` can be imported (``make lab``, nbval, an earlier run of the cell): nothing happens
  and nothing is printed; the cell imports nothing but ``importlib.util`` and ``sys``;
* on Colab (``google.colab`` in ``sys.modules``) without it: ``git clone`` of the course's repository
  into the working folder, ``pip install`` of what the chapters import (:func:`colab_packages`),
  the clone put on ``sys.path`` and the working folder moved to its ``notebooks/``, where the
  chapters' relative paths point;
* anywhere else without it: a ModuleNotFoundError that says to run ``make lab``.

The cell's text is generated (:func:`cell_source`) from the repository's settings, so that none of
it is typed twice: the address and branch from ``[tool.lowprec-course]`` of pyproject.toml
(``site/repository.py`` reads and normalises them), torch's version from the Makefile's
``TORCH_VERSION``, the other packages from pyproject.toml's dependencies. Where no address is set,
the cell holds ``REPO = None`` and on Colab raises an error that says so instead of cloning. The
committed address is the setting alone: the environment variable and the ``origin`` fallback that
the website also reads describe one build, not the committed notebooks, and a notebook written from
them would differ from clone to clone.

On the website the cell is folded away (its tag ``hide-cell``, with a prompt of its own): a reader of
the page has nothing to install. Rerun after changing the setting, the pins or this module::

    python -m nbhelpers.tooling.install_cell            # put or update the cell in notebooks/
    python -m nbhelpers.tooling.install_cell --check    # exit 1 if a chapter lacks the current cell

The cell is stored without outputs and with no execution count, so nothing has to be re-executed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

# nbformat imports jsonschema, which imports the optional rfc3987_syntax (make_exercises.py says why)
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import nbformat  # noqa: E402

__all__ = [
    "CELL_ID",
    "CELL_METADATA",
    "FIRST_LINE",
    "InstallCellError",
    "cell_problems",
    "cell_source",
    "chapter_notebooks",
    "colab_packages",
    "current_source",
    "install_cell",
    "main",
    "problems",
    "put_cell",
    "repository",
    "requirement_name",
    "write",
]

ROOT = Path(__file__).resolve().parents[2]
# The first line of the cell, which says what it is and by which the tool finds it again.
FIRST_LINE = "# Installs the course on Colab; does nothing where it is installed."
# A fixed cell id: every run of the tool, by anyone, writes the same JSON.
CELL_ID = "install-course"
# On the website: folded, with a prompt that says what is folded.
CELL_METADATA = {
    "tags": ["hide-cell"],
    "mystnb": {
        "code_prompt_show": "Show the cell that installs the course on Colab",
        "code_prompt_hide": "Hide the cell that installs the course on Colab",
    },
}
# pyproject.toml's dependencies that the chapters never import, which Colab's own Jupyter stack
# provides (the grader and the tests use them): installed on Colab they would replace the
# ipykernel that Colab's kernel is built on.
COLAB_PROVIDES = ("ipykernel", "nbclient", "nbformat")
# What the chapters need from the test extra: torchao (chapter 07's outside oracle for the MX
# scale rules) and pygments (chapter 12's model is trained on its source, at one version).
FROM_TEST_EXTRA = ("torchao", "pygments")

CELL_TEMPLATE = """\
{first_line}
import importlib.util
import sys

if importlib.util.find_spec("nbhelpers") is None:
    if "google.colab" not in sys.modules:
        raise ModuleNotFoundError(
            "The course's package, nbhelpers, is not installed in this "
            "Python. Run `make lab` at the root of the course's "
            "repository: it installs the course into .venv and opens "
            "JupyterLab, which runs the chapters (README, Quick start)."
        ) from None
    import os
    import subprocess
    from importlib.metadata import version

    REPO = {repo}
    BRANCH = {branch}
    # torch is pinned as `make lab` pins it rather than left at Colab's
    # release: the chapters' numbers and Triton kernels are checked with
    # torch {torch_version} and the Triton it brings (pip keeps Colab's torch if it
    # is {torch_version}). Should Colab's GPU driver be too old for PyPI's build,
    # torch finds no GPU and the chapters run on the CPU, as on a laptop;
    # pip may warn that Colab's torchvision wants Colab's torch (no
    # chapter uses it). The rest takes pyproject.toml's ranges, not the
    # lock (requirements/gpu.txt), which also pins the IPython and
    # ipykernel that Colab's own kernel runs on.
    PACKAGES = {packages}
    if REPO is None:
        raise RuntimeError(
            "This copy of the notebook names no repository to install the "
            "course from, so it cannot set itself up on Colab. Clone the "
            "course and run `make lab` (README, Quick start)."
        )
    loaded = [m for m in ("torch", "numpy") if m in sys.modules]
    before = {{m: sys.modules[m].__version__ for m in loaded}}
    clone = os.path.abspath(REPO.rsplit("/", 1)[1])
    if not os.path.isdir(clone):
        git = ["git", "clone", "--depth=1", "-b", BRANCH, REPO, clone]
        subprocess.run(git, check=True)
    pip = [sys.executable, "-m", "pip", "install", *PACKAGES]
    subprocess.run(pip, check=True)
    for name, was in before.items():
        if version(name) != was:
            raise RuntimeError(
                f"{{name}} {{was}} was imported before pip installed "
                f"{{version(name)}}: restart the session (Runtime > Restart "
                "session) and run this cell again."
            )
    # nbhelpers comes from the clone, and the chapters' relative paths
    # start in its notebooks/, as in a checkout of the course
    sys.path.insert(0, clone)
    os.chdir(os.path.join(clone, "notebooks"))
"""


class InstallCellError(ValueError):
    """A setting the cell is made from is missing or malformed."""


def load_repository_module() -> ModuleType:
    """site/repository.py, which reads the repository's address (site/ is not a package)."""
    spec = importlib.util.spec_from_file_location("course_site_repository", ROOT / "site" / "repository.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def repository(root: Path = ROOT) -> tuple[str | None, str]:
    """(address, branch) from pyproject.toml's ``[tool.lowprec-course]``; the address is None
    where the setting is empty or not an https repository address."""
    site_repository = load_repository_module()
    configured = site_repository.settings(root).get("repository-url", "")
    return (site_repository.normalise(configured) if configured else None), site_repository.branch(root)


def makefile_variable(root: Path, name: str) -> str:
    """The value of a ``NAME := value`` line of the Makefile."""
    found = re.findall(rf"^{name}\s*[:?]?=\s*(\S+)\s*$", (root / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    if len(found) != 1:
        raise InstallCellError(f"{root / 'Makefile'}: expected one `{name} := ...` line, found {len(found)}")
    return found[0]


def requirement_name(requirement: str) -> str:
    """The distribution name a requirement string starts with, normalised (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    if not match:
        raise InstallCellError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def colab_packages(root: Path = ROOT) -> list[str]:
    """What the cell installs on Colab: torch at the Makefile's version, pyproject.toml's
    dependencies but those Colab provides (:data:`COLAB_PROVIDES`), and the chapters' packages
    from the test extra (:data:`FROM_TEST_EXTRA`) as that extra pins them."""
    with open(root / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    keep = {requirement_name(n) for n in COLAB_PROVIDES}
    packages = [f"torch=={makefile_variable(root, 'TORCH_VERSION')}"]
    packages += [r for r in project["dependencies"] if requirement_name(r) not in keep]
    test_extra = {requirement_name(r): r for r in project["optional-dependencies"]["test"]}
    for name in FROM_TEST_EXTRA:
        if requirement_name(name) not in test_extra:
            raise InstallCellError(f"pyproject.toml's test extra has no {name}, which the chapters need on Colab")
        packages.append(test_extra[requirement_name(name)])
    return packages


def cell_source(repo: str | None, branch: str, packages: list[str]) -> str:
    """The cell's text for a repository address (None: none known), branch and packages."""
    torch = [p for p in packages if requirement_name(p) == "torch"]
    if len(torch) != 1 or "==" not in torch[0]:
        raise InstallCellError(f"the packages must pin torch exactly once (torch==...), got {packages}")
    listed = "".join(f"        {json.dumps(p)},\n" for p in packages)
    return CELL_TEMPLATE.format(
        first_line=FIRST_LINE,
        repo=json.dumps(repo) if repo else "None",
        branch=json.dumps(branch),
        torch_version=torch[0].split("==", 1)[1],
        packages=f"[\n{listed}    ]",
    ).rstrip("\n")  # a notebook cell does not end with a newline (ruff format)


def current_source(root: Path = ROOT) -> str:
    """The cell's text as the repository's settings make it now."""
    repo, branch = repository(root)
    return cell_source(repo, branch, colab_packages(root))


def install_cell(source: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, id=CELL_ID)
    cell.metadata = nbformat.from_dict(CELL_METADATA)
    return cell


def chapter_notebooks(root: Path = ROOT) -> list[Path]:
    """The chapter notebooks, ``notebooks/NN_*.ipynb``."""
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def find(nb: nbformat.NotebookNode) -> list[int]:
    """Indices of the cells that are an install cell (by their first line)."""
    return [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and cell.source.split("\n", 1)[0].strip() == FIRST_LINE
    ]


def cell_problems(nb: nbformat.NotebookNode, source: str) -> list[str]:
    """What is wrong with a notebook's install cell; empty when it is current. The execution
    count and execution timings are not looked at: re-executing a notebook sets them."""
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        return ["does not start with its title (a markdown cell)"]
    found = find(nb)
    if not found:
        return ["has no install cell"]
    out = []
    if len(found) > 1:
        out.append(f"has {len(found)} install cells (cells {found})")
    if found[0] != 1:
        out.append(f"its install cell is cell {found[0]}, not cell 1 (right after the title)")
    cell = nb.cells[found[0]]
    if cell.source != source:
        out.append("its install cell is not the current one")
    if any(cell.metadata.get(key) != value for key, value in CELL_METADATA.items()):
        out.append(f"its install cell's metadata lacks {CELL_METADATA}")
    if cell.outputs:
        out.append("its install cell has outputs (it is stored without)")
    return out


def put_cell(nb: nbformat.NotebookNode, source: str) -> bool:
    """Put the current install cell right after the title, replacing any older one (its id, its
    other metadata and its execution count are kept unless it had outputs); True if `nb` changed."""
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        raise InstallCellError("a chapter notebook starts with its title, a markdown cell")
    if not cell_problems(nb, source):
        return False
    found = find(nb)
    cell = nb.cells[found[0]] if found else install_cell(source)
    for i in reversed(found):
        del nb.cells[i]
    cell.source = source
    cell.metadata.update(nbformat.from_dict(CELL_METADATA))
    if cell.outputs:
        cell.outputs, cell.execution_count = [], None
    nb.cells.insert(1, cell)
    return True


def problems(root: Path = ROOT) -> list[str]:
    """What ``--check`` reports, one line per problem; empty when every chapter is current."""
    notebooks = chapter_notebooks(root)
    if not notebooks:
        return [f"{root / 'notebooks'}: no chapter notebooks (NN_*.ipynb)"]
    source = current_source(root)
    return [
        f"{path.relative_to(root)}: {problem}"
        for path in notebooks
        for problem in cell_problems(nbformat.read(path, as_version=4), source)
    ]


def write(root: Path = ROOT) -> list[Path]:
    """Put the current cell in every chapter notebook; returns the notebooks that changed."""
    source = current_source(root)
    written = []
    for path in chapter_notebooks(root):
        nb = nbformat.read(path, as_version=4)
        if put_cell(nb, source):
            path.write_bytes((nbformat.writes(nb) + "\n").encode("utf-8"))  # as nbformat.write, "\n" ends
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m nbhelpers.tooling.install_cell",
        description="Put the cell that installs the course on Colab at the top of every chapter notebook.",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository's root (default: this checkout)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a chapter lacks the current cell"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            found = problems(args.root)
            for line in found:
                print(line, file=sys.stderr)
            if found:
                print(f"{len(found)} problem(s); run `python -m nbhelpers.tooling.install_cell`", file=sys.stderr)
                return 1
            repo, _ = repository(args.root)
            print(f"every chapter notebook has the current install cell (repository: {repo or 'none set'})")
            return 0
        written = write(args.root)
    except (InstallCellError, OSError, KeyError, tomllib.TOMLDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print(f"{len(chapter_notebooks(args.root))} chapter notebooks, {len(written)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
