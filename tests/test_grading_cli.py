"""The command line (nbhelpers.grading.cli, run as python -m nbhelpers.grade): its options and
usage errors, and keeping the secret seed out of sight (the command line, prctl)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT, env

from nbhelpers.grading.cli import _seed_from_argv, main


def test_seed_is_taken_off_the_command_line():
    assert _seed_from_argv(["a", "--seed", "42", "--csv", "x"]) == ("42", ["a", "--csv", "x"])
    assert _seed_from_argv(["--seed=7", "b"]) == ("7", ["b"])
    assert _seed_from_argv(["b"]) == (None, ["b"])


def test_grader_is_not_dumpable():
    """With a secret seed the grader makes itself non-dumpable (Linux): other processes of the
    same (non-root) user cannot read its memory, environment or open files in /proc."""
    if not sys.platform.startswith("linux"):
        pytest.skip("prctl is Linux only")
    code = (
        "import ctypes; from nbhelpers.grading.jobs import not_dumpable; libc = ctypes.CDLL(None); "
        "print(libc.prctl(3, 0, 0, 0, 0)); not_dumpable(); print(libc.prctl(3, 0, 0, 0, 0))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "0"]


def test_usage_errors(tmp_path):
    assert main([str(tmp_path / "nope"), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json")]) == 2
    (tmp_path / "folder").mkdir()
    assert main([str(tmp_path / "folder"), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json")]) == 2
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--csv", "g.csv", "--json", "g.json", "--seed", "-1"])
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--csv", "g.csv", "--json", "g.json", "--se", "5"])  # no abbreviations


def test_help_lists_the_options():
    out = subprocess.run(
        [sys.executable, "-m", "nbhelpers.grade", "--help"],
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for option in (
        "--csv FILE",
        "--json FILE",
        "--seed N",
        "--chapter NN",
        "--jobs N",
        "--cell-timeout S",
        "--timeout S",
        "--regrade",
        "--kernel NAME",
        "--no-progress",
        "PATH [PATH ...]",
        "--seed-file FILE",
        "--no-sandbox",
        "--max-memory MB",
        "--max-processes N",
        "--max-cpus N",
        "--max-file-size MB",
        "--max-disk MB",
    ):
        assert option in out, option
    assert "(default 60)" in out and "(default 300)" in out and "--seed-fd" not in out
    assert out.startswith("usage: python -m nbhelpers.grade ")


def test_console_script_is_the_clis_main():
    import nbhelpers.grade

    assert nbhelpers.grade.main is main  # pyproject.toml: nbhelpers-grade = "nbhelpers.grade:main"
    assert "nbhelpers.grade:main" in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seed", "abc"], "argument --seed: the seed must be a non-negative integer, got 'abc'"),
        (["--seed", "-1"], "argument --seed: the seed must be a non-negative integer\n"),
        (["--jobs", "0"], "argument --jobs: expected a positive number, got '0'"),
        (["--jobs", "1.5"], "argument --jobs: expected a positive number, got '1.5'"),
        (["--cell-timeout", "nan"], "argument --cell-timeout: expected a positive number, got 'nan'"),
        (["--timeout", "-3"], "argument --timeout: expected a positive number, got '-3'"),
        (["--chapter", "ex123"], "argument --chapter: a chapter is a number such as 1 or 01, got 'ex123'"),
        (["--max-memory", "-5"], "argument --max-memory: expected a whole number, 0 or more, got '-5'"),
        (["--max-disk", "lots"], "argument --max-disk: expected a whole number, 0 or more, got 'lots'"),
        (["--max-cpus", "-1"], "argument --max-cpus: expected 0 (no limit) or a number of CPUs from 0.01, got '-1'"),
        (["--max-cpus", "nan"], "argument --max-cpus: expected 0 (no limit) or a number of CPUs from 0.01, got 'nan'"),
    ],
)
def test_bad_option_values(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path), "--csv", "g.csv", "--json", "g.json", *args])
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.sandbox
def test_only_the_command_line_makes_the_process_not_dumpable(tmp_path):
    """grade() is a library function and leaves its process as it is; main() with a secret seed
    makes the process non-dumpable before it grades (Linux)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("prctl is Linux only")
    (tmp_path / "ex01_x.ipynb").write_text("{oops")  # graded without a kernel
    code = (
        "import ctypes, sys; from nbhelpers.grading import GradeOptions, grade, main\n"
        "libc = ctypes.CDLL(None)\n"
        "grade([sys.argv[1]], 'a.csv', 'a.json', GradeOptions(seed=5, progress=False))\n"
        "print('dumpable:', libc.prctl(3, 0, 0, 0, 0))\n"
        "main([sys.argv[1], '--csv', 'b.csv', '--json', 'b.json', '--no-progress'])\n"
        "print('dumpable:', libc.prctl(3, 0, 0, 0, 0))\n"
        "main([sys.argv[1], '--csv', 'c.csv', '--json', 'c.json', '--no-progress', '--seed', '5'])\n"
        "print('dumpable:', libc.prctl(3, 0, 0, 0, 0))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env(), cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert [line for line in out.splitlines() if line.startswith("dumpable:")] == [
        "dumpable: 1",
        "dumpable: 1",
        "dumpable: 0",
    ]


@pytest.mark.sandbox
def test_the_seed_from_a_file_or_stdin(tmp_path):
    """--seed-file reads the seed from a file (or - for stdin): it is then on no command line.
    Giving it twice, or a file without a seed, is a usage error that says so."""
    (tmp_path / "ex01_x.ipynb").write_text("{oops")  # graded without a kernel
    (tmp_path / "seed").write_text("8142093377\n")
    (tmp_path / "bad").write_text("my seed")
    base = [
        sys.executable,
        "-m",
        "nbhelpers.grade",
        str(tmp_path / "ex01_x.ipynb"),
        "--csv",
        "g.csv",
        "--json",
        "g.json",
        "--no-progress",
    ]

    def run(*args, stdin=""):
        return subprocess.run([*base, *args], env=env(), cwd=tmp_path, capture_output=True, text=True, input=stdin)

    done = run("--seed-file", str(tmp_path / "seed"))
    assert done.returncode == 0 and "seed: secret" in done.stdout
    done = run("--seed-file", "-", stdin="77\n")
    assert done.returncode == 0 and "seed: secret" in done.stdout
    done = run("--seed-file", str(tmp_path / "seed"), "--seed", "5")
    assert done.returncode == 2 and "--seed or --seed-file, not both" in done.stderr
    done = run("--seed-file", str(tmp_path / "bad"))
    assert done.returncode == 2 and "the seed must be a non-negative integer" in done.stderr
    done = run("--seed-file", str(tmp_path / "missing"))
    assert done.returncode == 2 and "cannot read the seed" in done.stderr


def test_the_package_names_load_when_asked_for_and_a_worker_imports_only_what_it_uses():
    import nbhelpers.grading as grading

    assert set(grading.__all__) == set(grading._WHERE)
    for name in grading.__all__:
        assert getattr(grading, name) is getattr(sys.modules[f"nbhelpers.grading.{grading._WHERE[name]}"], name)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        grading.nothing_here
    code = (
        "import sys; import nbhelpers.grading.worker, nbhelpers.grading.judge_process; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('nbhelpers.grading'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, check=True)
    names = loaded.stdout.split()
    assert "nbhelpers.grading.worker" in names and "nbhelpers.grading.judge_process" in names
    assert not {"nbhelpers.grading.cli", "nbhelpers.grading.run", "nbhelpers.grading.outputs"} & set(names)
