"""Keep the repository's set-up files consistent with each other.

The pins for torch and triton live in the Makefile and are repeated in environment.yml and
README.md; CI must run the same command the README gives; the GPU workflow must never run
for pull requests (it runs on a self-hosted machine). PyYAML is not a dependency, so the
YAML files are read as plain text, which is enough for the few facts checked here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def read(relpath: str) -> str:
    return (ROOT / relpath).read_text(encoding="utf-8")


def makefile_pin(name: str) -> str:
    """Value of a `NAME := value` (or `=`, `?=`) line in the Makefile."""
    match = re.search(rf"^{name}\s*[:?]?=\s*(\S+)\s*$", read("Makefile"), re.MULTILINE)
    assert match, f"Makefile has no {name} variable"
    return match.group(1)


def environment_pin(package: str) -> str:
    """Version in a `- package==version` line of environment.yml."""
    pins = re.findall(rf"^\s*-\s*{package}==(\S+)\s*$", read("environment.yml"), re.MULTILINE)
    assert len(pins) == 1, f"environment.yml should pin {package} exactly once, found {pins}"
    return pins[0]


def top_level_block(yaml_text: str, key: str) -> list[str]:
    """The lines of a top-level YAML mapping entry `key:` (the line itself and the more
    indented lines under it), with comments and blank lines dropped."""
    lines = [line.split(" #")[0].rstrip() for line in yaml_text.splitlines()]
    lines = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    heads = (f"{key}:", f'"{key}":', f"'{key}':")
    for i, line in enumerate(lines):
        if line.startswith(heads):
            block = [line]
            for following in lines[i + 1 :]:
                if not following[0].isspace():
                    break
                block.append(following)
            return block
    raise AssertionError(f"no top-level '{key}:' key")


def workflow_triggers(yaml_text: str) -> set[str]:
    """Event names under a workflow's top-level `on:`, in any of YAML's three spellings:
    `on: push`, `on: [push, workflow_dispatch]`, or a block of keys / list items."""
    head, *body = top_level_block(yaml_text, "on")
    inline = head.split(":", 1)[1].strip()
    if inline:
        return {name.strip() for name in inline.strip("[]").split(",") if name.strip()}
    indent = min(len(line) - len(line.lstrip()) for line in body)
    events = set()
    for line in body:
        if len(line) - len(line.lstrip()) == indent:
            item = line.strip().removeprefix("- ")
            events.add(item.split(":", 1)[0].strip().strip("'\""))
    return events


# --- pins -------------------------------------------------------------------------------


def test_makefile_pins_match_environment_yml():
    assert environment_pin("torch") == makefile_pin("TORCH_VERSION")
    assert environment_pin("triton") == makefile_pin("TRITON_VERSION")


def test_readme_mentions_the_pins():
    readme = read("README.md")
    assert f"torch=={makefile_pin('TORCH_VERSION')}" in readme
    assert f"triton=={makefile_pin('TRITON_VERSION')}" in readme


def test_pyproject_leaves_torch_and_triton_to_the_makefile():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads(read("pyproject.toml"))["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    names = {re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower() for req in requirements}
    assert not names & {"torch", "triton"}


def test_environment_yml_installs_this_repo_from_pyproject():
    assert re.search(r"^\s*-\s*-e\s+\.\[lab,test\]\s*$", read("environment.yml"), re.MULTILINE)


# --- the commands the README promises ----------------------------------------------------


def test_readme_quick_start_gives_the_two_commands():
    readme = read("README.md")
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make lab" in quick_start
    assert "make test" in quick_start


def test_makefile_has_the_documented_targets():
    makefile = read("Makefile")
    for target in ("venv", "install", "lab", "test", "exercises", "site", "bench", "clean"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"no '{target}' target"


def test_ci_run_runs_make_test():
    script = read(".ci/run")
    commands = [line.strip() for line in script.splitlines()]
    assert "set -euo pipefail" in commands
    assert "make test" in commands


def test_cpu_workflow_runs_make_test():
    workflow = read(".github/workflows/cpu.yml")
    assert re.search(r"^\s*run:\s*make test\s*$", workflow, re.MULTILINE)


# --- the website and its Pages workflow ----------------------------------------------------


def test_pages_workflow_installs_the_site_extra_alone_builds_and_deploys():
    workflow = read(".github/workflows/pages.yml")
    assert workflow_triggers(workflow) == {"push", "workflow_dispatch"}
    assert re.search(r"^\s*branches:\s*\[main\]\s*$", workflow, re.MULTILINE)
    runs = [m.group(1).strip() for m in re.finditer(r"^\s*run:\s*(.+)$", workflow, re.MULTILINE)]
    # the site extra alone, at the lock's versions: nothing of the course's heavy dependencies
    assert "python -m pip install -c requirements/cpu.txt $(python site/build.py --requirements)" in runs
    assert f"python site/build.py --out {makefile_pin('SITE_DIR')}" in runs
    assert not any(re.search(r"\bmake\b|torch|triton|jupyterlab|\.\[", r) for r in runs), runs
    for action in ("actions/configure-pages@", "actions/upload-pages-artifact@", "actions/deploy-pages@"):
        assert re.search(rf"^\s*(- )?uses:\s*{re.escape(action)}v\d+\s*$", workflow, re.MULTILINE), action
    # What it uploads is what the build (as `make site`) writes: $(SITE_DIR)/html.
    assert re.search(rf"^\s*path:\s*{re.escape(makefile_pin('SITE_DIR'))}/html\s*$", workflow, re.MULTILINE)
    permissions = top_level_block(workflow, "permissions")
    assert any(re.fullmatch(r"\s+pages:\s*write", line) for line in permissions)
    assert any(re.fullmatch(r"\s+id-token:\s*write", line) for line in permissions)


def test_site_build_names_the_site_extra_as_its_requirements():
    import tomllib

    extra = tomllib.loads(read("pyproject.toml"))["project"]["optional-dependencies"]["site"]
    out = subprocess.run(
        [sys.executable, str(ROOT / "site" / "build.py"), "--requirements"], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == extra and all("==" in r for r in extra)  # pinned, as the lock has them


def test_readme_tells_how_to_build_and_view_the_site():
    readme = read("README.md")
    section = readme.split("## The website", 1)[1].split("\n## ", 1)[0]
    assert "make site" in section
    assert "http.server" in section and f"{makefile_pin('SITE_DIR')}/html" in section


def test_make_site_installs_the_site_extra_alone_into_its_own_venv():
    """`make site` needs Sphinx and its theme, not the course's torch, Triton and JupyterLab: it
    installs what `site/build.py --requirements` prints (the site extra) into .venv-site, at the
    lock's versions, as the Pages workflow does, and never depends on `make install`."""
    makefile = read("Makefile")
    site = re.search(r"^site:(.*)\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert site and "install" not in site.group(1).split(), "`make site` must not run `make install`"
    assert "$(SITE_VPY) site/build.py --out $(SITE_DIR)" in site.group(2)
    assert re.search(r"^SITE_VENV\s*:=\s*\.venv-site\s*$", makefile, re.MULTILINE)
    stamp = re.search(r"^\$\(SITE_STAMP\):.*\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1)
    assert "pip install -c requirements/cpu.txt $$($(SITE_VPY) site/build.py --requirements)" in stamp
    assert not re.search(r"torch|triton|jupyterlab|\.\[", stamp), stamp
    assert ".venv-site/" in read(".gitignore").splitlines()
    assert ".venv-site" in re.search(r"^clean:\n\t(.*)", makefile, re.MULTILINE).group(1)


def test_readme_gives_the_measured_time_of_make_site():
    section = read("README.md").split("## The website", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"`make site` from a fresh clone.*? took [\d.]+ (to [\d.]+ )?minutes", " ".join(section.split()))


# --- how to cite the course --------------------------------------------------------------

# the keys CFF 1.2.0 allows at the top level (https://citation-file-format.github.io/1.2.0/schema.json)
CFF_KEYS = {
    "abstract", "authors", "cff-version", "commit", "contact", "date-released", "doi", "identifiers",
    "keywords", "license", "license-url", "message", "preferred-citation", "references", "repository",
    "repository-artifact", "repository-code", "title", "type", "url", "version",
}  # fmt: skip


def test_citation_file_is_cff_1_2_0_with_the_projects_version_and_licences():
    import tomllib

    text = read("CITATION.cff")
    project = tomllib.loads(read("pyproject.toml"))["project"]
    # PyYAML comes with JupyterLab, not as a dependency of its own: without it, the top-level
    # `key: value` lines are read as text
    try:
        import yaml
    except ImportError:
        yaml = None
    if yaml is not None:
        cff = yaml.safe_load(text)
    else:
        cff = {m[1]: m[2].strip().strip('"') for m in re.finditer(r"^([a-z-]+):[ ]?(.*)$", text, re.MULTILINE)}
        cff["authors"] = [{"name": m} for m in re.findall(r"^  - name: \"?([^\"\n]+)", text, re.MULTILINE)]
        cff["license"] = re.findall(r"^  - ([A-Za-z0-9.-]+)$", text.split("\nlicense:", 1)[1], re.MULTILINE)[:2]
    assert set(cff) <= CFF_KEYS, set(cff) - CFF_KEYS
    assert cff["cff-version"] == "1.2.0"
    assert cff["message"] and cff["title"] == "Low-precision numerics for AI accelerators"
    assert cff["authors"] == [{"name": "The course authors"}]
    assert str(cff["version"]) == project["version"]
    assert sorted(cff["license"]) == sorted(project["license"].split(" AND "))
    # the repository's address, where one is set, is the one the website links
    configured = tomllib.loads(read("pyproject.toml"))["tool"]["lowprec-course"]["repository-url"]
    assert cff.get("repository-code", "") == configured


# --- the GPU workflow ---------------------------------------------------------------------


def test_gpu_workflow_runs_only_on_push_and_by_hand():
    assert workflow_triggers(read(".github/workflows/gpu.yml")) == {"push", "workflow_dispatch"}


def test_gpu_workflow_targets_the_gpu_runner_and_requires_a_gpu():
    workflow = read(".github/workflows/gpu.yml")
    assert re.search(r"runs-on:\s*\[self-hosted, linux, x64, gpu\]", workflow)
    assert re.search(r"NBHELPERS_REQUIRE_GPU:\s*[\"']?1[\"']?", workflow)
    assert "make test DEVICE=gpu" in workflow
    steps = re.split(r"^\s*- ", workflow.split("steps:", 1)[1], flags=re.MULTILINE)
    first_step = steps[1]
    assert "nvidia-smi" in first_step


@pytest.mark.parametrize(
    "yaml_text, expected",
    [
        ("on: push\njobs: {}\n", {"push"}),
        ("on: [push, workflow_dispatch]\n", {"push", "workflow_dispatch"}),
        ('"on":\n  push:\n    branches: [main]\n  pull_request:\njobs:\n', {"push", "pull_request"}),
        ("name: x\non:\n  - push\n  # comment\n  - workflow_dispatch\njobs:\n", {"push", "workflow_dispatch"}),
    ],
)
def test_workflow_triggers_reader(yaml_text, expected):
    assert workflow_triggers(yaml_text) == expected


# --- nbval configuration ------------------------------------------------------------------


def test_nbval_ignores_stderr_and_masks_addresses_but_still_compares_bits(tmp_path):
    """Run nbval the way `make test` does on a tiny notebook: a checked cell that also
    writes to stderr and prints an object address and a duration passes; a checked cell
    whose hex bit pattern changed fails."""
    pytest.importorskip("nbval")
    nbformat = pytest.importorskip("nbformat")
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    def notebook(source: str, stdout: str):
        nb = new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        cell = new_code_cell("# NBVAL_CHECK_OUTPUT\n" + source, execution_count=1)
        cell.outputs = [new_output("stream", name="stdout", text=stdout)]
        nb.cells = [cell]
        return nb

    noisy = "import sys\nprint(object(), '0x3f80', '12.5 ms')\n_ = sys.stderr.write('a warning\\n')"
    committed = "<object object at 0x7f00deadbeef> 0x3f80 0.7 ms\n"
    nbformat.write(notebook(noisy, committed), tmp_path / "ok.ipynb")
    nbformat.write(notebook("print('0x3f80')", "0x3f81\n"), tmp_path / "drift.ipynb")

    makefile = read("Makefile")
    nbval_args = re.search(r"^NBVAL_ARGS\s*:=\s*((?:.*\\\n)*.*)$", makefile, re.MULTILINE).group(1)
    nbval_args = nbval_args.replace("\\\n", " ").split()
    assert "--nbval-lax" in nbval_args and "--nbval-current-env" in nbval_args

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rA",
            *nbval_args,
            str(tmp_path),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcomes = {}  # "ok.ipynb::Cell 0" -> "PASSED", from the -rA summary lines
    for line in result.stdout.splitlines():
        if line.startswith(("PASSED ", "FAILED ")):
            outcome, test_id = line.split(" - ")[0].split(" ", 1)
            outcomes[test_id.rsplit("/", 1)[-1]] = outcome
    assert outcomes == {"ok.ipynb::Cell 0": "PASSED", "drift.ipynb::Cell 0": "FAILED"}, result.stdout


# --- the system packages `make test` needs ------------------------------------------------------


def run_system_packages(path: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", str(ROOT / "scripts" / "system-packages.sh")],
        cwd=ROOT,
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_system_packages_names_each_missing_one_with_its_install_command(tmp_path):
    """Without bubblewrap and Chromium on the PATH, and told not to install them, the script prints
    one line for each (what will be skipped, and the command that installs it) and exits 0."""
    empty = tmp_path / "bin"
    empty.mkdir()
    done = run_system_packages(str(empty), SYSTEM_PACKAGES="no")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "make: bubblewrap is not installed: the grader's sandbox tests will be skipped; install it "
        "with: sudo apt-get install -y bubblewrap" in lines
    )
    chromium_elsewhere = Path("/usr/lib/chromium/chromium").exists()  # found without the PATH
    assert any(line.startswith("make: chromium is not installed") for line in lines) != chromium_elsewhere
    assert len(lines) == (1 if chromium_elsewhere else 2), lines
    # with a bwrap and a chromium on the PATH there is nothing to say
    for name in ("bwrap", "chromium"):
        (empty / name).write_text("#!/bin/sh\n")
        (empty / name).chmod(0o755)
    done = run_system_packages(str(empty), SYSTEM_PACKAGES="no")
    assert done.returncode == 0 and done.stdout == "", done.stdout


def test_make_test_runs_the_system_packages_step():
    makefile = read("Makefile")
    assert re.search(r"^test: install system-packages$", makefile, re.MULTILINE)
    assert "sh scripts/system-packages.sh" in makefile


def test_ranges_workflow_tests_both_ends_weekly_and_by_hand():
    workflow = read(".github/workflows/ranges.yml")
    assert workflow_triggers(workflow) == {"schedule", "workflow_dispatch"}
    assert re.search(r"^\s*deps:\s*\[newest, lowest\]\s*$", workflow, re.MULTILINE)
    assert re.search(r"^\s*run:\s*make test DEPS=\$\{\{ matrix.deps \}\}\s*$", workflow, re.MULTILINE)
    makefile = read("Makefile")
    for deps in ("newest", "lowest"):
        assert f"DEPS={deps}" in makefile


def test_system_packages_waits_for_another_apt_get(tmp_path):
    """As root, the script installs with apt-get, and when another apt-get holds the lock (a second
    `make test` started at the same moment) it waits and tries again instead of giving up. An
    apt-get stand-in that is locked twice, then "succeeds" (installing nothing, so the script
    still names the packages afterwards)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    stub = bin_dir / "apt-get"
    stub.write_text(f"""#!/bin/sh
echo "$*" >> {calls}
n=$(wc -l < {calls})
if [ "$n" -le 2 ]; then
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)"; exit 100
fi
exit 0
""")
    stub.chmod(0o755)
    for tool in ("id", "wc", "sleep", "cat"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    done = run_system_packages(str(bin_dir), APT_RETRY_SECONDS="0")
    assert done.returncode == 0, done.stderr
    if os.geteuid() != 0:  # not root: nothing is installed, only named
        assert not calls.exists() and "sudo apt-get install -y bubblewrap" in done.stdout
        return
    lines = calls.read_text().splitlines()
    assert lines[:3] == ["-o DPkg::Lock::Timeout=300 update -qq"] * 3, lines
    assert lines[3].startswith("-o DPkg::Lock::Timeout=300 install -y -qq") and "bubblewrap" in lines[3], lines
    assert "make: installing" in done.stdout and "could not install" not in done.stdout
    assert "make: bubblewrap is not installed" in done.stdout  # the stand-in installed nothing


def test_a_sandbox_test_is_skipped_with_the_reason_or_fails_when_required(tmp_path):
    """A test marked `sandbox`, on a machine whose PATH has no bwrap: skipped, with the reason in
    pytest's summary; with NBHELPERS_REQUIRE_SYSTEM_PACKAGES=1 (CI), an error instead."""
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n@pytest.mark.sandbox\ndef test_grades_in_the_sandbox():\n    assert True\n"
    )
    bare = tmp_path / "bin"
    bare.mkdir()
    inherited = {k: v for k, v in os.environ.items() if k != "NBHELPERS_REQUIRE_SYSTEM_PACKAGES"}  # CI sets it
    base_env = {**inherited, "PYTHONPATH": str(ROOT), "PATH": str(bare)}

    def run(**extra):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-c",
                str(ROOT / "pyproject.toml"),
                "-p",
                "conftest",
                "-p",
                "no:cacheprovider",
                "-q",
                "-rs",
                str(tmp_path / "test_marked.py"),
            ],
            cwd=ROOT,
            env={**base_env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )

    skipped = run()
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "1 skipped" in skipped.stdout
    assert "needs the grader's sandbox, which cannot run here: bubblewrap (bwrap) is not installed" in skipped.stdout
    required = run(NBHELPERS_REQUIRE_SYSTEM_PACKAGES="1")
    assert required.returncode == 1 and "1 error" in required.stdout, required.stdout
    assert "NBHELPERS_REQUIRE_SYSTEM_PACKAGES=1: required here" in required.stdout


# --- running on every core ----------------------------------------------------------------------


def makefile_args(name: str) -> list[str]:
    """The words of a `NAME := ...` line of the Makefile, with `$(TEST_WORKERS)` at its default."""
    makefile = read("Makefile")
    value = re.search(rf"^{name}\s*:=\s*((?:.*\\\n)*.*)$", makefile, re.MULTILINE).group(1)
    return value.replace("\\\n", " ").replace("$(TEST_WORKERS)", makefile_pin("TEST_WORKERS")).split()


THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.mark.parametrize("dist", ["make test's", "one test at a time"])
def test_workers_run_a_notebooks_cells_in_order_in_one_kernel(tmp_path, dist):
    """`make test` spreads the tests over the cores with pytest-xdist; a notebook's cells depend
    on the cells above them, so all of a notebook goes to one worker, in order (`--dist
    loadfile`). Spread one test at a time (`--dist load`), the same notebooks fail: the
    check can tell. The kernels get one math thread each (conftest.py sets it for the whole run,
    where the caller did not)."""
    pytest.importorskip("xdist")
    nbformat = pytest.importorskip("nbformat")
    from nbformat.v4 import new_code_cell, new_notebook

    for k in range(4):
        nb = new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [new_code_cell(f"x = {k}")] + [new_code_cell(f"x += 1; assert x == {k + i}") for i in range(1, 6)]
        nbformat.write(nb, tmp_path / f"nb{k}.ipynb")
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [new_code_cell(f"import os\nassert [os.environ.get(v) for v in {THREAD_VARS!r}] == ['1'] * 3")]
    nbformat.write(nb, tmp_path / "threads.ipynb")
    xdist_args = makefile_args("XDIST_ARGS")
    assert xdist_args == ["-n", "logical", "--dist", "loadfile"]
    if dist != "make test's":
        xdist_args = ["-n", "2", "--dist", "load"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p", "conftest"]
        + ["-p", "no:cacheprovider", "-q", *xdist_args, "-n", "2", *makefile_args("NBVAL_ARGS"), str(tmp_path)],
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k not in THREAD_VARS}, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if dist == "make test's":
        assert result.returncode == 0 and "25 passed" in result.stdout, result.stdout[-3000:]
    else:
        assert result.returncode != 0 and "failed" in result.stdout, result.stdout[-3000:]


def test_the_workers_get_a_file_whole_but_the_exercise_table_a_chapter_at_a_time():
    """What conftest.py's scheduler hands a worker as one: a notebook, a test module, the three
    files that share the built website; tests/test_exercises.py a chapter at a time, which is
    safe because it has no fixture shared beyond a test (its caches are per process)."""
    import conftest

    scope = conftest.xdist_scope
    assert scope("notebooks/09_gemm.ipynb", "notebooks/09_gemm.ipynb::Cell 3") == "notebooks/09_gemm.ipynb"
    assert scope("tests/test_rounding.py", "tests/test_rounding.py::test_x[ex06-1]") == "tests/test_rounding.py"
    site = {scope(f"tests/{n}", f"tests/{n}::test_a") for n in ("test_site.py", "test_site_explorer.py")}
    assert len(site) == 1
    ex = "tests/test_exercises.py"
    assert scope(ex, f"{ex}::test_wrong_implementations_fail[ex06-coarsest_granularity-184]") == f"{ex}::ex06"
    assert scope(ex, f"{ex}::test_solutions_pass_in_process_with_a_hidden_seed[ex11]") == f"{ex}::ex11"
    assert scope(ex, f"{ex}::test_every_chapter_has_an_entry") == ex
    for name in conftest.SPLIT_BY_CHAPTER:
        text = read(f"tests/{name}")
        assert 'scope="module"' not in text and 'scope="session"' not in text, name


def test_nbval_fails_an_exercise_notebook_that_scores_what_it_should_not(tmp_path):
    """nbval runs solutions/ and exercises/, and conftest.py reads each one's score from its own
    summary cell. Swapped (the untouched exercise notebook in solutions/, the solution in
    exercises/), both run without an error, and both fail: the check can tell."""
    pytest.importorskip("nbval")
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    name = "ex01_float_formats.ipynb"
    shutil.copy(ROOT / "exercises" / name, tmp_path / "solutions" / name)
    shutil.copy(ROOT / "solutions" / name, tmp_path / "exercises" / name)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p", "conftest"]
        + ["-p", "no:cacheprovider", "-q", "-n", "0", *makefile_args("NBVAL_ARGS"), str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = result.stdout
    assert result.returncode == 1, out[-3000:]
    failed = re.findall(rf"^FAILED (\w+)/{name}::Cell \d+", out, re.MULTILINE)
    assert set(failed) == {"solutions", "exercises"}, out[-3000:]
    # Every failure is the score check, none a cell that raised. Counted in the failure reports
    # only: the short summary repeats the message in full where pytest sees CI set, cut to the
    # terminal's width elsewhere.
    reports = out.split("short test summary info")[0]
    assert reports.count("pytest plugin exception: conftest.py's score check: ") == len(failed), out[-3000:]
    assert "a check in this solution notebook did not pass:\nTODO  ex01." in out, out[-3000:]
    assert "this exercise notebook's summary should print 'TOTAL: 0/" in out, out[-3000:]


def test_every_exercise_notebook_has_the_summary_cell_its_score_is_read_from():
    """conftest.py reads a solution's or exercise's score from the one cell that calls
    summary(N): a notebook without it (or with two) would be run without its score checked."""
    import nbformat

    import conftest

    notebooks = sorted((ROOT / "solutions").glob("ex*.ipynb")) + sorted((ROOT / "exercises").glob("ex*.ipynb"))
    assert len(notebooks) >= 2
    for path in notebooks:
        kind = conftest.exercise_notebook_kind(path)
        assert kind is not None and kind[1] == int(path.name[2:4]), path
        nb = nbformat.read(path, as_version=4)
        calls = [c.source for c in nb.cells if c.cell_type == "code" and conftest.SUMMARY_CALL.search(c.source)]
        assert len(calls) == 1 and f"summary({kind[1]})" in calls[0], (path.name, calls)
