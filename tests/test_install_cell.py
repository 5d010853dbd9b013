"""The install cell at the top of every chapter notebook (nbhelpers/tooling/install_cell.py).

Every chapter holds the cell the repository's settings make now, right after its title and with
no outputs. The cell is run in a separate Python four ways: where the course is installed (it does
nothing, prints nothing, imports nothing but the standard library); on a simulated fresh Colab
(a stand-in ``google.colab`` module, no site-packages so no ``nbhelpers``, and ``subprocess.run``
replaced by a recorder whose ``git clone`` leaves a stand-in clone), where it must clone the
repository's branch, install the pinned packages and move into the clone's ``notebooks/``; on Colab
with no repository known (it refuses, cloning nothing); and outside Colab without the course (it
says to run ``make lab``).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from nbhelpers.tooling import install_cell as ic

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "https://github.com/example-org/lowprec-course"

# Runs a cell's source (argv[1]) as a notebook's kernel would, in this process, and writes what
# happened to argv[2] as JSON. argv[3]: "colab" puts a stand-in google.colab module in sys.modules
# and records subprocess.run / check_call instead of running them; the recorder's `git clone` makes
# a clone holding an nbhelpers package and a notebooks/ folder, its `pip install` writes a
# dist-info of the version it installs into argv[4] (on sys.path). argv[5:]: "torch=VERSION"
# puts a stand-in torch of that version in sys.modules first, as a chapter's imports would have;
# "twice" runs the cell a second time.
DRIVER = r"""
import json, os, subprocess, sys, types

source = open(sys.argv[1], encoding="utf-8").read()
report = {"calls": [], "errors": []}
options = sys.argv[5:]
if sys.argv[3] == "colab":
    sys.modules["google.colab"] = types.ModuleType("google.colab")
    site = sys.argv[4]
    sys.path.append(site)

    def run(args, *rest, **kwargs):
        args = [str(a) for a in args]
        report["calls"].append(args)
        if args[:2] == ["git", "clone"]:
            os.makedirs(os.path.join(args[-1], "nbhelpers"))
            os.makedirs(os.path.join(args[-1], "notebooks"))
            with open(os.path.join(args[-1], "nbhelpers", "__init__.py"), "w") as f:
                f.write("FROM_THE_CLONE = True\n")
        if args[1:4] == ["-m", "pip", "install"]:
            for pin in args[4:]:
                name, _, version = pin.partition("==")
                if version:
                    info = os.path.join(site, f"{name}-{version}.dist-info")
                    os.makedirs(info, exist_ok=True)
                    with open(os.path.join(info, "METADATA"), "w") as f:
                        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        return subprocess.CompletedProcess(args, 0)

    def check_call(args, *rest, **kwargs):
        run(args)
        return 0

    subprocess.run, subprocess.check_call = run, check_call
for option in options:
    if option.startswith("torch="):
        torch = types.ModuleType("torch")
        torch.__version__ = option.split("=", 1)[1]
        sys.modules["torch"] = torch
before = set(sys.modules)
path_before = list(sys.path)
for _ in range(2 if "twice" in options else 1):
    try:
        exec(compile(source, "<install cell>", "exec"), {"__name__": "__main__"})
    except Exception as e:
        report["errors"].append([type(e).__name__, str(e)])
report["new_modules"] = sorted(set(sys.modules) - before)
report["cwd"] = os.getcwd()
report["path_added"] = [p for p in sys.path if p not in path_before]
try:
    import nbhelpers
    report["nbhelpers_from_clone"] = getattr(nbhelpers, "FROM_THE_CLONE", False)
except ImportError:
    report["nbhelpers_from_clone"] = None
with open(sys.argv[2], "w") as f:
    json.dump(report, f)
"""


def run_cell(tmp_path: Path, source: str, where: str, *options: str, installed: bool = False) -> tuple[dict, str]:
    """Run `source` in a new Python in `tmp_path/work`; (its report, what it printed). Unless
    `installed`, the Python starts without site-packages (-S), so that nbhelpers cannot be
    imported, as on a fresh Colab."""
    work = tmp_path / "work"
    work.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cell.py").write_text(source, encoding="utf-8")
    (tmp_path / "site").mkdir(exist_ok=True)
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if installed:
        env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, *([] if installed else ["-S"]), "-c", DRIVER]
    command += [str(tmp_path / "cell.py"), str(report), where, str(tmp_path / "site"), *options]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(report.read_text()), done.stdout + done.stderr


def makefile_pin(name: str) -> str:
    return re.search(rf"^{name}\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)


def packages() -> list[str]:
    return ic.colab_packages(ROOT)


# --- the notebooks ----------------------------------------------------------------------------


def test_every_chapter_starts_with_the_current_install_cell():
    notebooks = ic.chapter_notebooks(ROOT)
    assert len(notebooks) >= 12
    assert ic.problems(ROOT) == []
    source = ic.current_source(ROOT)
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        cell = nb.cells[1]
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), path.name
        assert cell.cell_type == "code" and cell.source == source, path.name
        assert cell.outputs == [], path.name  # stored empty: the cell prints nothing where it runs
        assert "hide-cell" in cell.metadata["tags"], path.name  # folded on the website
        first_code = [c for c in nb.cells if c.cell_type == "code"][0]
        assert first_code is cell, path.name
    assert ic.main(["--check"]) == 0


def test_the_cell_names_the_repository_of_the_setting_alone():
    with open(ROOT / "pyproject.toml", "rb") as f:
        setting = tomllib.load(f)["tool"]["lowprec-course"]
    repo, branch = ic.repository(ROOT)
    assert branch == (setting.get("repository-branch") or "main")
    expected = setting["repository-url"].strip().rstrip("/").removesuffix(".git") or None
    assert repo == expected
    assert f"    REPO = {json.dumps(repo) if repo else 'None'}\n" in ic.current_source(ROOT)


def test_the_packages_are_the_makefiles_torch_and_what_the_chapters_import():
    pins = packages()
    assert pins[0] == f"torch=={makefile_pin('TORCH_VERSION')}"
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    for name in ("torchao", "pygments"):  # pinned by the test extra, used by chapters 07 and 12
        [pin] = [r for r in project["optional-dependencies"]["test"] if r.startswith(f"{name}==")]
        assert pin in pins
    names = {ic.requirement_name(p) for p in pins}
    assert not names & {"ipykernel", "nbclient", "nbformat", "ipython", "jupyterlab"}, names
    assert {ic.requirement_name(r) for r in project["dependencies"]} - names == {"ipykernel", "nbclient", "nbformat"}
    # every package a chapter imports is installed: triton comes with PyPI's torch (the Makefile)
    imported = set()
    for path in ic.chapter_notebooks(ROOT):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                for node in ast.walk(ast.parse(cell.source)):
                    if isinstance(node, ast.Import):
                        imported |= {a.name.split(".")[0] for a in node.names}
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"nbhelpers"}
    assert "torch" in third_party and "torchao" in third_party
    assert third_party - {"triton"} <= {n.replace("-", "_") for n in names}, third_party


def test_the_cell_passes_the_notebooks_lint_and_format_with_an_address(tmp_path):
    """The committed cells are linted with the notebooks; this holds the cell with an address,
    as it will read once the setting names one, to the same 75 columns."""
    (tmp_path / "ruff.toml").write_text(
        (ROOT / "notebooks" / "ruff.toml")
        .read_text()
        .replace('"../pyproject.toml"', json.dumps(str(ROOT / "pyproject.toml")))
    )
    cell = tmp_path / "cell.py"
    cell.write_text(ic.cell_source(EXAMPLE, "main", packages()) + "\n")
    for args in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *args, str(cell)], cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


# --- running the cell -------------------------------------------------------------------------


def test_where_the_course_is_installed_the_cell_does_nothing(tmp_path):
    report, printed = run_cell(tmp_path, ic.current_source(ROOT), "local", installed=True)
    assert printed == "" and report["errors"] == [] and report["calls"] == []
    # only the standard library is loaded: not torch, not even nbhelpers (it is looked up, not imported)
    assert all(m.split(".")[0] in sys.stdlib_module_names for m in report["new_modules"]), report["new_modules"]
    assert report["cwd"] == str(tmp_path / "work") and report["path_added"] == []
    assert report["nbhelpers_from_clone"] is False  # this checkout's nbhelpers, untouched


def test_on_a_fresh_colab_the_cell_clones_installs_and_moves_into_notebooks(tmp_path):
    source = ic.cell_source(EXAMPLE, "dev", packages())
    report, _ = run_cell(tmp_path, source, "colab", "twice")
    assert report["errors"] == []
    clone = tmp_path / "work" / "lowprec-course"
    git, pip = report["calls"]  # the second run found nbhelpers and did nothing
    assert git == ["git", "clone", "--depth=1", "-b", "dev", EXAMPLE, str(clone)]
    assert pip == [sys.executable, "-m", "pip", "install", *packages()]
    assert f"torch=={makefile_pin('TORCH_VERSION')}" in pip
    assert report["cwd"] == str(clone / "notebooks")
    assert report["path_added"][0] == str(clone) and report["nbhelpers_from_clone"] is True


def test_on_colab_a_new_session_installs_again_into_the_same_clone(tmp_path):
    source = ic.cell_source(EXAMPLE, "main", packages())
    run_cell(tmp_path, source, "colab")
    report, _ = run_cell(tmp_path, source, "colab")  # a restarted session: the clone is there
    assert report["errors"] == []
    assert [call[:4] for call in report["calls"]] == [[sys.executable, "-m", "pip", "install"]]
    assert report["cwd"] == str(tmp_path / "work" / "lowprec-course" / "notebooks")


def test_on_colab_a_torch_imported_before_the_install_asks_for_a_restart(tmp_path):
    source = ic.cell_source(EXAMPLE, "main", packages())
    torch = makefile_pin("TORCH_VERSION")
    report, _ = run_cell(tmp_path / "old", source, "colab", "torch=2.0.0+cu118")
    [(kind, message)] = report["errors"]
    assert kind == "RuntimeError" and f"torch 2.0.0+cu118 was imported before pip installed {torch}" in message
    assert "restart the session" in message
    report, _ = run_cell(tmp_path / "same", source, "colab", f"torch={torch}")
    assert report["errors"] == []  # Colab's torch was the pinned one: pip kept it


def test_on_colab_without_a_repository_the_cell_refuses_and_clones_nothing(tmp_path):
    report, _ = run_cell(tmp_path, ic.cell_source(None, "main", packages()), "colab")
    [(kind, message)] = report["errors"]
    assert kind == "RuntimeError" and "names no repository" in message and "make lab" in message
    assert report["calls"] == [] and report["cwd"] == str(tmp_path / "work")


def test_outside_colab_without_the_course_the_cell_says_how_to_install_it(tmp_path):
    for repo in (EXAMPLE, None):
        report, _ = run_cell(tmp_path / str(bool(repo)), ic.cell_source(repo, "main", packages()), "plain")
        [(kind, message)] = report["errors"]
        assert kind == "ModuleNotFoundError" and "`make lab`" in message and "nbhelpers" in message
        assert report["calls"] == []


# --- the tool -----------------------------------------------------------------------------------


def course_copy(tmp_path: Path, setting: str = "") -> Path:
    """A root with the repository's pyproject.toml (its address set to `setting`), Makefile and
    two chapter notebooks: one without the cell, one with an old cell in the wrong place."""
    root = tmp_path / "course"
    (root / "notebooks").mkdir(parents=True)
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyproject = re.sub(r'(?m)^repository-url = ".*"$', f'repository-url = "{setting}"', pyproject)
    (root / "pyproject.toml").write_text(pyproject)
    shutil.copy(ROOT / "Makefile", root / "Makefile")
    title = nbformat.v4.new_markdown_cell("# 01 · A chapter")
    setup = nbformat.v4.new_code_cell("import numpy as np")
    nbformat.write(nbformat.v4.new_notebook(cells=[title, setup]), root / "notebooks" / "01_a.ipynb")
    old = nbformat.v4.new_code_cell(f"{ic.FIRST_LINE}\nprint('old')", id="old-cell")
    old.outputs = [nbformat.v4.new_output("stream", text="old\n")]
    old.execution_count = 3
    nb = nbformat.v4.new_notebook(cells=[title, nbformat.v4.new_markdown_cell("## Setup"), old, setup])
    nbformat.write(nb, root / "notebooks" / "02_b.ipynb")
    return root


def test_the_tool_puts_the_cell_after_the_title_and_check_finds_what_is_stale(tmp_path, capsys):
    root = course_copy(tmp_path)
    found = ic.problems(root)
    assert found == [
        "notebooks/01_a.ipynb: has no install cell",
        "notebooks/02_b.ipynb: its install cell is cell 2, not cell 1 (right after the title)",
        "notebooks/02_b.ipynb: its install cell is not the current one",
        f"notebooks/02_b.ipynb: its install cell's metadata lacks {ic.CELL_METADATA}",
        "notebooks/02_b.ipynb: its install cell has outputs (it is stored without)",
    ]
    assert ic.main(["--check", "--root", str(root)]) == 1
    assert ic.main(["--root", str(root)]) == 0
    assert ic.problems(root) == [] and ic.main(["--check", "--root", str(root)]) == 0
    first, second = (nbformat.read(root / "notebooks" / n, as_version=4) for n in ("01_a.ipynb", "02_b.ipynb"))
    assert [c.source for c in first.cells] == ["# 01 · A chapter", ic.current_source(root), "import numpy as np"]
    assert first.cells[1].id == ic.CELL_ID and first.cells[1].execution_count is None
    assert [c.source[:12] for c in second.cells] == ["# 01 · A cha", ic.FIRST_LINE[:12], "## Setup", "import numpy"]
    assert second.cells[1].id == "old-cell" and second.cells[1].outputs == []
    assert second.cells[1].execution_count is None
    before = {p: p.read_bytes() for p in (root / "notebooks").glob("*.ipynb")}
    capsys.readouterr()
    assert ic.main(["--root", str(root)]) == 0  # a second run changes nothing
    assert "0 changed" in capsys.readouterr().out
    assert before == {p: p.read_bytes() for p in (root / "notebooks").glob("*.ipynb")}


def test_the_tool_writes_the_address_of_the_setting(tmp_path):
    root = course_copy(tmp_path, setting=EXAMPLE + ".git")
    assert ic.main(["--root", str(root)]) == 0
    nb = nbformat.read(root / "notebooks" / "01_a.ipynb", as_version=4)
    assert f'    REPO = "{EXAMPLE}"\n' in nb.cells[1].source
    # the setting changes: --check says the cells are stale
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text().replace(EXAMPLE, EXAMPLE + "-2"))
    assert ic.problems(root) == [
        f"notebooks/{n}: its install cell is not the current one" for n in ("01_a.ipynb", "02_b.ipynb")
    ]


def test_the_tool_refuses_a_notebook_without_a_title_and_a_cell_without_a_torch_pin(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(ic.InstallCellError, match="starts with its title"):
        ic.put_cell(nb, ic.current_source(ROOT))
    with pytest.raises(ic.InstallCellError, match="pin torch exactly once"):
        ic.cell_source(EXAMPLE, "main", ["numpy>=1.26"])
