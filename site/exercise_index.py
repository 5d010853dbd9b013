"""The website's index of the exercises and problems: site/build.py writes it as exercises.md.

It is read without importing the course's package (the site's build needs the site extra alone):

- the exercises from the source of the answer keys, ``nbhelpers/answer_keys/chNN.py``: the
  ``Exercise(...)`` calls of its ``EXERCISES`` list, whose id, title, points and kind are written
  as literals (``kind=ExerciseKind.PREDICT``); anything else there stops the build with the line
  it could not read (tests/test_exercise_index.py holds what is read here to the imported lists);
- the problems from the chapter notebooks: the numbered questions of the markdown cell under a
  "Problems" heading, which the cell that checks their answers (``# checking the answers``)
  follows.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

PAGE = "exercises.md"  # the page's name in the site's sources (its root)
# what an exercise asks (nbhelpers.exercise_types.ExerciseKind: member name -> value), and how the
# index explains each
KINDS = {"PREDICT": "predict", "CONSTRUCT": "construct", "IMPLEMENT": "implement"}
KIND_MEANING = {
    "predict": "work out what a process gives (a count, a threshold, a time, a cost) from the "
    "formats and the rules, and return it; the check compares it with what the process gives, "
    "which the course's reference runs or knows in closed form",
    "construct": "return inputs with stated properties (a sum exact in one order and wrong in the "
    "other, a tensor that one scale flushes); the check judges the properties, and any inputs "
    "that have them pass",
    "implement": "write a routine from its specification (a decoder, a GEMM epilogue, a Triton "
    "kernel); the check compares what it returns with the course's reference",
}
ANSWER_CHECK = "# checking the answers"  # the first comment of the cell that checks the problems
NBVAL_MARKER = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+[ \t]*(\n|$)", re.MULTILINE)
PROBLEMS_HEADING = re.compile(r"^#{1,6}[ \t]+Problems[ \t]*$", re.MULTILINE)
PROBLEM_ITEM = re.compile(r"^(\d+)\.[ \t]+", re.MULTILINE)


class NotReadable(ValueError):
    """The index cannot read an exercise or the problems of a chapter from their source."""


@dataclass(frozen=True)
class ListedExercise:
    """One exercise as the index lists it (the fields of nbhelpers.exercise_types.Exercise it shows)."""

    id: str  # "ex01.decode_bits"
    title: str
    points: int
    kind: str | None  # "predict", "construct", "implement", or None where the answer key states none

    @property
    def chapter(self) -> str:
        """The chapter's two digits: "01"."""
        return self.id[2:4]

    @property
    def name(self) -> str:
        """The function the student writes: "decode_bits"."""
        return self.id.split(".", 1)[1]


@dataclass(frozen=True)
class Problem:
    """One pencil-and-paper problem at the end of a chapter: its number and its text (markdown)."""

    number: int
    text: str


def _literal(node: ast.expr, what: str, where: str, kind: type):
    if isinstance(node, ast.Constant) and type(node.value) is kind:
        return node.value
    raise NotReadable(f"{where}: {what}={ast.unparse(node)} is not a literal {kind.__name__}")


def _kind(node: ast.expr, where: str) -> str:
    """``ExerciseKind.PREDICT`` (or the string ``"predict"``) -> "predict"."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ExerciseKind":
        if node.attr in KINDS:
            return KINDS[node.attr]
    elif isinstance(node, ast.Constant) and node.value in KINDS.values():
        return node.value
    raise NotReadable(
        f"{where}: kind={ast.unparse(node)} is none of "
        + ", ".join(f"ExerciseKind.{name}" for name in KINDS)
        + " (the index reads it from the source)"
    )


def read_exercises(source: str, filename: str = "<answer key>") -> list[ListedExercise]:
    """The exercises of a chapter module, from its source: its ``EXERCISES`` list of
    ``Exercise(id, title, points, ..., kind=...)`` calls, in order."""
    tree = ast.parse(source, filename)
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "EXERCISES" for t in targets):
            listed = statement.value
            break
    else:
        raise NotReadable(f"{filename}: no EXERCISES list")
    if not isinstance(listed, (ast.List, ast.Tuple)):
        raise NotReadable(f"{filename}:{listed.lineno}: EXERCISES is not a list written out")
    out = []
    for call in listed.elts:
        where = f"{filename}:{call.lineno}"
        name = getattr(call, "func", None)
        if not (isinstance(call, ast.Call) and getattr(name, "id", getattr(name, "attr", None)) == "Exercise"):
            raise NotReadable(f"{where}: an element of EXERCISES that is not an Exercise(...) call")
        fields = dict(zip(("id", "title", "points"), call.args))
        fields.update({k.arg: k.value for k in call.keywords if k.arg in ("id", "title", "points", "kind")})
        missing = [f for f in ("id", "title", "points") if f not in fields]
        if missing:
            raise NotReadable(f"{where}: Exercise(...) without {', '.join(missing)}")
        out.append(
            ListedExercise(
                id=_literal(fields["id"], "id", where, str),
                title=_literal(fields["title"], "title", where, str),
                points=_literal(fields["points"], "points", where, int),
                kind=_kind(fields["kind"], where) if "kind" in fields else None,
            )
        )
    return out


def chapter_exercises(root: Path) -> dict[str, list[ListedExercise]]:
    """Chapter ("01") -> its exercises, from every ``nbhelpers/answer_keys/chNN.py``."""
    out = {}
    for path in sorted((root / "nbhelpers" / "answer_keys").glob("ch[0-9][0-9].py")):
        exercises = read_exercises(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
        chapter = path.stem[2:]
        wrong = [e.id for e in exercises if e.chapter != chapter]
        if wrong:
            raise NotReadable(f"{path.relative_to(root)} lists exercises of another chapter: {wrong}")
        out[chapter] = exercises
    return out


def read_problems(notebook: dict, filename: str = "<notebook>") -> list[Problem]:
    """The problems of a chapter notebook (its JSON): the numbered questions, up to the folded
    answers (``<details>``), of the markdown cell with a "Problems" heading that the cell which
    checks their answers follows; none where no cell checks answers."""
    cells = notebook.get("cells", [])
    checks = [
        i
        for i, cell in enumerate(cells)
        if cell.get("cell_type") == "code"
        and NBVAL_MARKER.sub("", "".join(cell.get("source", []))).lstrip().startswith(ANSWER_CHECK)
    ]
    if not checks:
        return []
    if len(checks) > 1:
        raise NotReadable(f"{filename}: {len(checks)} cells check answers; a chapter has one")
    above = [i for i in range(checks[0]) if cells[i].get("cell_type") == "markdown"]
    cell = "".join(cells[above[-1]].get("source", [])) if above else ""
    heading = PROBLEMS_HEADING.search(cell)
    if heading is None:
        raise NotReadable(f"{filename}: the markdown cell above the answers' check has no 'Problems' heading")
    questions = cell[heading.end() :].split("<details", 1)[0]
    items = list(PROBLEM_ITEM.finditer(questions))
    problems = []
    for item, following in zip(items, items[1:] + [None]):
        text = questions[item.end() : following.start() if following else len(questions)]
        problems.append(Problem(int(item.group(1)), " ".join(text.split())))
    if [p.number for p in problems] != list(range(1, len(problems) + 1)) or not problems:
        raise NotReadable(f"{filename}: the problems are not numbered 1, 2, 3, ... ({[p.number for p in problems]})")
    return problems


def chapter_title(notebook: dict, filename: str = "<notebook>") -> str:
    """The text of the notebook's first heading: "01 · Float bit layouts: ..."."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", [])).splitlines():
                if re.match(r"#{1,6}\s", line):
                    return line.lstrip("#").strip()
    raise NotReadable(f"{filename}: no markdown heading")


MARKDOWN_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def from_root(text: str, notebook: str) -> str:
    """Markdown text of a chapter notebook with its relative links rewritten for a page of the
    site's root: ``../site/glossary.md#ulp`` (a site page) becomes ``site/glossary.md#ulp``, the
    page where the repository keeps it, which the build links to the page with its anchor as
    written (site/conf.py, ``link_site_pages``: MyST would resolve ``glossary.md#fn-fnu-fnuz`` to
    the heading's generated id, ``#id6``, where a label and its heading share a slug),
    ``02_accumulation_error.ipynb`` becomes
    ``notebooks/02_accumulation_error.ipynb`` and ``#a-section`` the chapter's own section.
    ``notebook`` is the chapter's path from the repository root; web addresses are kept."""
    folder = posixpath.dirname(notebook)

    def rewrite(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            return m.group(0)
        if target.startswith("#"):
            return m.group(1) + notebook + target + m.group(3)
        path, hash_, fragment = target.partition("#")
        path = posixpath.normpath(posixpath.join(folder, path))
        return m.group(1) + path + hash_ + fragment + m.group(3)

    return MARKDOWN_LINK.sub(rewrite, text)


def _cell(text: str) -> str:
    """Text for a cell of a markdown table."""
    return text.replace("|", "\\|")


def index_page(root: Path) -> str:
    """The index page, as MyST markdown (a page of the site's root: its links are relative to it)."""
    exercises = chapter_exercises(root)
    chapters = {}  # "01" -> (notebook's path from root, title, problems)
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        where = str(path.relative_to(root))
        chapters[path.name[:2]] = (
            path.relative_to(root).as_posix(),
            chapter_title(notebook, where),
            read_problems(notebook, where),
        )
    orphans = sorted(set(exercises) - set(chapters))
    if orphans:
        raise NotReadable(f"answer keys for chapters without a notebook: {orphans}")

    every = [e for chapter in exercises.values() for e in chapter]
    count = {kind: sum(1 for e in every if e.kind == kind) for kind in KIND_MEANING}
    n_problems = sum(len(problems) for _, _, problems in chapters.values())
    lines = [
        "% Generated by site/build.py from nbhelpers/answer_keys/chNN.py and the chapter notebooks",
        "% (site/exercise_index.py): edit those, not this page.",
        "",
        "# Exercises and problems",
        "",
        f"Every exercise and every problem of the course, chapter by chapter: {len(every)} exercises "
        f"worth {sum(e.points for e in every)} points, and {n_problems} problems.",
        "",
        "An **exercise** is a function to write in the chapter's exercise notebook; the check cell "
        "after it calls it on hundreds of cases, prints what passed and what failed, and gives its "
        "points (the chapter's page links the notebook and its worked solutions). Each asks one of "
        "three things:",
        "",
    ]
    for kind, meaning in KIND_MEANING.items():
        lines.append(f"- **{kind}** ({count[kind]} exercises): {meaning}.")
    lines += [
        "",
        "A **problem** is a question to work with pencil and paper at the end of a chapter; on the "
        "chapter's page its answer unfolds under it, and the cell after the answers checks the "
        "numbers. A section a problem names is a section of its chapter.",
    ]
    for chapter, (notebook, title, problems) in chapters.items():
        listed = exercises.get(chapter, [])
        if not listed and not problems:
            continue
        lines += ["", f"## {title}", ""]
        found = sorted((root / "exercises").glob(f"ex{chapter}_*.ipynb"))
        summary = f"[Read the chapter]({notebook})"
        if listed:
            points = sum(e.points for e in listed)
            summary += f"; its {len(listed)} exercises, {points} points"
            if found:
                summary += f", are in `exercises/{found[0].name}`"
        lines += [summary + ".", ""]
        if listed:
            lines += ["| # | exercise (the function you write) | asks you to | points |", "|---|---|---|---|"]
            for number, e in enumerate(listed, 1):
                lines.append(f"| {number} | {_cell(e.title)} (`{e.name}`) | {e.kind or ''} | {e.points} |")
            lines.append("")
        if problems:
            lines += [f"Problems, at the end of the chapter ({len(problems)}):", ""]
            lines += [f"{p.number}. {from_root(p.text, notebook)}" for p in problems]
    return "\n".join(lines) + "\n"
