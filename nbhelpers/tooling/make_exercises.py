"""Generate the student notebooks in ``exercises/`` from the worked answers in ``solutions/``.

For every ``solutions/exNN_*.ipynb`` this writes ``exercises/exNN_*.ipynb`` where

* in code cells, each region from a line containing ``### BEGIN SOLUTION`` to the line
  containing ``### END SOLUTION`` (both included) becomes a stub at the BEGIN line's
  indentation::

      # YOUR CODE HERE (about N lines)
      raise NotImplementedError("about N lines")

  with N the number of non-blank, non-comment lines removed;
* in markdown cells, each region from ``<!-- BEGIN SOLUTION -->`` to ``<!-- END SOLUTION -->``
  becomes ``*Your answer here.*``;
* cells tagged ``solution-only`` are dropped, and all outputs and execution counts cleared.

The output is deterministic (cell ids are kept from the solution), so ``--check`` can compare
byte for byte::

    python -m nbhelpers.tooling.make_exercises            # (re)write exercises/
    python -m nbhelpers.tooling.make_exercises --check    # exit 1 if exercises/ is out of date

``--check`` also fails when a solution notebook was committed with outputs.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
from pathlib import Path

# nbformat imports jsonschema, which imports the optional rfc3987_syntax when it is installed (a
# dependency of JupyterLab's); that builds a parser, about 2.5 CPU-s, for IRI formats that no
# notebook schema uses. (The grader's worker does the same.)
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import nbformat  # noqa: E402

__all__ = [
    "SolutionMarkerError",
    "strip_solutions",
    "exercise_text",
    "solution_notebooks",
    "has_outputs",
    "check_folders",
    "write_exercises",
    "main",
]

CODE_BEGIN = "### BEGIN SOLUTION"
CODE_END = "### END SOLUTION"
MD_MARKER = re.compile(r"<!--\s*(BEGIN|END) SOLUTION\s*-->")
MD_STUB = "*Your answer here.*"
SOLUTION_ONLY_TAG = "solution-only"
SOLUTION_NAME = re.compile(r"^ex\d{2}_.+\.ipynb$")


class SolutionMarkerError(ValueError):
    """Unbalanced or nested solution markers in a cell."""


def _lines_word(n: int) -> str:
    return f"about {n} line" if n == 1 else f"about {n} lines"


def _strip_code(source: str, where: str) -> str:
    """Replace every ### BEGIN/END SOLUTION region of a code cell's source by a stub."""
    out: list[str] = []
    begin: int | None = None  # line number (1-based) of the open region's BEGIN
    indent = ""
    n_code = 0
    for lineno, line in enumerate(source.splitlines(keepends=True), start=1):
        has_begin, has_end = CODE_BEGIN in line, CODE_END in line
        if has_begin and has_end:
            raise SolutionMarkerError(f"{where}: line {lineno} holds both {CODE_BEGIN} and {CODE_END}")
        if has_begin:
            if begin is not None:
                raise SolutionMarkerError(
                    f"{where}: nested {CODE_BEGIN} at line {lineno} (the region opened at line {begin} "
                    f"has no {CODE_END} before it)"
                )
            begin, n_code = lineno, 0
            indent = line[: len(line) - len(line.lstrip())]
        elif has_end:
            if begin is None:
                raise SolutionMarkerError(f"{where}: {CODE_END} at line {lineno} without a {CODE_BEGIN} before it")
            newline = line[len(line.rstrip("\r\n")) :]  # keep the END line's line ending (none at the end)
            words = _lines_word(n_code)
            out.append(f"{indent}# YOUR CODE HERE ({words})\n")
            out.append(f'{indent}raise NotImplementedError("{words}"){newline}')
            begin = None
        elif begin is not None:
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                n_code += 1
        else:
            out.append(line)
    if begin is not None:
        raise SolutionMarkerError(f"{where}: {CODE_BEGIN} at line {begin} has no {CODE_END}")
    return "".join(out)


def _strip_markdown(source: str, where: str) -> str:
    """Replace every <!-- BEGIN/END SOLUTION --> region of a markdown cell's source."""
    out: list[str] = []
    pos = 0
    open_at: int | None = None
    for m in MD_MARKER.finditer(source):
        lineno = source.count("\n", 0, m.start()) + 1
        if m.group(1) == "BEGIN":
            if open_at is not None:
                raise SolutionMarkerError(f"{where}: nested <!-- BEGIN SOLUTION --> at line {lineno}")
            out.append(source[pos : m.start()])
            open_at = lineno
        else:
            if open_at is None:
                raise SolutionMarkerError(
                    f"{where}: <!-- END SOLUTION --> at line {lineno} without a <!-- BEGIN SOLUTION --> before it"
                )
            out.append(MD_STUB)
            open_at = None
        pos = m.end()
    if open_at is not None:
        raise SolutionMarkerError(f"{where}: <!-- BEGIN SOLUTION --> at line {open_at} has no <!-- END SOLUTION -->")
    out.append(source[pos:])
    return "".join(out)


def _read(path: Path) -> nbformat.NotebookNode:
    """Read a notebook; a v4.5+ cell without an id gets one derived from the file name and
    its index (nbformat would invent a random one, and the output would not be stable)."""
    d = json.loads(path.read_text(encoding="utf-8"))
    if d.get("nbformat") == 4 and d.get("nbformat_minor", 0) >= 5:
        for index, cell in enumerate(d.get("cells", [])):
            if isinstance(cell, dict) and "id" not in cell:
                cell["id"] = hashlib.sha1(f"{path.name}:{index}".encode()).hexdigest()[:8]
    return nbformat.reads(json.dumps(d), as_version=4)


def strip_solutions(nb: nbformat.NotebookNode, name: str = "<notebook>") -> nbformat.NotebookNode:
    """The exercise version of a solution notebook (a new notebook; ``nb`` is not changed).

    ``name`` is used in error messages. Raises :class:`SolutionMarkerError` naming the notebook
    and the cell index (0-based, as in ``nb.cells[i]``) for unbalanced or nested markers.
    """
    nb = copy.deepcopy(nb)
    cells = []
    for index, cell in enumerate(nb.cells):
        if SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        where = f"{name}: cell {index}"
        if cell.cell_type == "code":
            cell.source = _strip_code(cell.source, where)
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)  # nbclient's timings are output too
        elif cell.cell_type == "markdown":
            cell.source = _strip_markdown(cell.source, where)
        cells.append(cell)
    nb.cells = cells
    return nb


def exercise_text(solution_path: Path | str) -> str:
    """The exact file content of the exercise notebook generated from ``solution_path``."""
    path = Path(solution_path)
    nb = _read(path)
    text = nbformat.writes(strip_solutions(nb, str(path)))
    return text if text.endswith("\n") else text + "\n"


def solution_notebooks(solutions: Path | str) -> list[Path]:
    """``solutions/exNN_*.ipynb``, sorted by name."""
    folder = Path(solutions)
    return sorted(p for p in folder.glob("*.ipynb") if SOLUTION_NAME.match(p.name))


def has_outputs(path: Path | str) -> bool:
    """Whether a notebook has any code cell with outputs or an execution count."""
    nb = _read(Path(path))
    return any(c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None) for c in nb.cells)


def _generate(solutions: Path, errors: list[str]) -> dict[str, str]:
    """name -> exercise text for every solution; marker errors go to ``errors``."""
    texts = {}
    for sol in solution_notebooks(solutions):
        try:
            texts[sol.name] = exercise_text(sol)
        except SolutionMarkerError as e:  # its message names the notebook and the cell
            errors.append(str(e))
        except (nbformat.ValidationError, ValueError, OSError) as e:  # not a readable notebook
            errors.append(f"{sol}: cannot read: {e}")
    return texts


def check_folders(solutions: Path | str, exercises: Path | str) -> list[str]:
    """Problems that ``--check`` reports, one line each; empty if exercises/ is up to date."""
    solutions, exercises = Path(solutions), Path(exercises)
    problems: list[str] = []
    if not solutions.is_dir():
        return [f"{solutions}: no such folder"]
    for sol in solution_notebooks(solutions):
        try:
            if has_outputs(sol):
                problems.append(
                    f"{sol}: has outputs or execution counts; solutions are committed "
                    f"without them (clear them: jupyter nbconvert --clear-output --inplace {sol})"
                )
        except (nbformat.ValidationError, ValueError, OSError):
            pass  # reported by _generate below
    texts = _generate(solutions, problems)
    for name, text in texts.items():
        target = exercises / name
        if not target.exists():
            problems.append(f"{target}: missing (generated from {solutions / name})")
        elif target.read_bytes() != text.encode("utf-8"):
            problems.append(f"{target}: differs from what {solutions / name} generates")
    if exercises.is_dir():
        for extra in sorted(exercises.glob("*.ipynb")):
            if not (solutions / extra.name).exists():
                problems.append(f"{extra}: no solution {solutions / extra.name} (delete it or add the solution)")
    return problems


def write_exercises(solutions: Path | str, exercises: Path | str) -> list[Path]:
    """Write every exercise notebook whose content changed; returns the paths written.

    Generates all notebooks first and writes nothing if any solution has bad markers or cannot
    be read (raises :class:`SolutionMarkerError` listing every problem).
    """
    solutions, exercises = Path(solutions), Path(exercises)
    errors: list[str] = []
    texts = _generate(solutions, errors)
    if errors:
        raise SolutionMarkerError("\n".join(errors))
    exercises.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        target = exercises / name
        data = text.encode("utf-8")
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)  # bytes, so line endings are "\n" on every OS
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m nbhelpers.tooling.make_exercises",
        description="Generate exercises/exNN_*.ipynb from solutions/exNN_*.ipynb.",
    )
    parser.add_argument("--solutions", default="solutions", help="folder of solution notebooks (default: solutions)")
    parser.add_argument("--exercises", default="exercises", help="folder of exercise notebooks (default: exercises)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if exercises/ differs from what would be generated"
    )
    args = parser.parse_args(argv)
    solutions, exercises = Path(args.solutions), Path(args.exercises)

    if args.check:
        problems = check_folders(solutions, exercises)
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print(f"{len(problems)} problem(s); run `make exercises` to regenerate {exercises}/", file=sys.stderr)
            return 1
        print(f"{exercises}/ is up to date with {solutions}/ ({len(solution_notebooks(solutions))} notebooks)")
        return 0

    if not solutions.is_dir():
        print(f"error: {solutions}: no such folder", file=sys.stderr)
        return 1
    try:
        written = write_exercises(solutions, exercises)
    except SolutionMarkerError as e:
        print(f"error: {e}\nnothing written", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    n = len(solution_notebooks(solutions))
    print(f"{n} exercise notebook(s) in {exercises}/, {len(written)} changed")
    for sol in solution_notebooks(solutions):
        if has_outputs(sol):
            print(f"warning: {sol} has outputs; clear them before committing", file=sys.stderr)
    if exercises.is_dir():
        for extra in sorted(exercises.glob("*.ipynb")):
            if not (solutions / extra.name).exists():
                print(f"warning: {extra} has no solution {solutions / extra.name}; delete it?", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
