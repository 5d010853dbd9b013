"""Build the course website: `make site`, or `python site/build.py [--out build/site]`.

Stages the sources into OUT/src (README.md, site/index.md, site/references.md, site/explorer.md,
docs/*.md, copies of notebooks/, exercises/ and solutions/, every *.ipynb picked up by glob, so a
new chapter needs no configuration, and exercises.md, the index of every exercise and problem,
written from the answer keys' source and the notebooks by site/exercise_index.py), then runs
Sphinx with site/conf.py into OUT/html. Nothing is
executed and nothing is downloaded: the pages show the outputs committed in the notebooks. The
chapters are staged as the reader should see them (:func:`page_copy`: no test markers, the
answers' check hidden with the answers), and the chapter notebooks offered for download are those
copies. View the result with `python -m http.server -d build/site/html` and open
http://localhost:8000.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
sys.path.insert(0, str(SITE))  # this folder's modules
import exercise_index  # noqa: E402

FOLDERS = ("notebooks", "exercises", "solutions")

# nbval's markers, a comment line of their own in a code cell: for the tests, not the reader
NBVAL_MARKER = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+[ \t]*(\n|$)", re.MULTILINE)
# the first comment of the code cell that checks the answers of a chapter's problems
ANSWER_CHECK = "# checking the answers"


def page_copy(notebook: dict) -> dict:
    """A chapter notebook (its JSON) as its page shows it: nbval's marker lines taken out of the
    code cells, and the cell that checks the problems' answers (its first line after the markers
    is ``# checking the answers``) tagged ``hide-cell``, so that its output, which prints the
    answers, stays folded away like the answers themselves."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", []))
        stripped = NBVAL_MARKER.sub("", source)
        cell["source"] = stripped.splitlines(keepends=True)
        if stripped.lstrip().startswith(ANSWER_CHECK):
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if "hide-cell" not in tags:
                tags.append("hide-cell")
    return notebook


def stage(src: Path) -> None:
    """Fill `src` with the files Sphinx reads (removing what an earlier build left)."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy2(ROOT / "README.md", src / "README.md")
    shutil.copy2(SITE / "index.md", src / "index.md")
    shutil.copy2(SITE / "references.md", src / "references.md")  # the works the chapters cite
    shutil.copy2(SITE / "explorer.md", src / "explorer.md")  # the float format explorer
    shutil.copy2(SITE / "glossary.md", src / "glossary.md")  # the terms, linked from the chapters
    try:  # every exercise and problem, read from their sources
        page = exercise_index.index_page(ROOT)
    except exercise_index.NotReadable as e:
        raise SystemExit(f"error: the index of the exercises: {e}") from None
    (src / exercise_index.PAGE).write_text(page, encoding="utf-8")
    (src / "docs").mkdir()
    for page in sorted((ROOT / "docs").glob("*.md")):  # the instructors' pages (grading)
        shutil.copy2(page, src / "docs" / page.name)
    chapters = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not chapters:
        raise SystemExit(f"error: no notebooks in {ROOT / 'notebooks'}: nothing to build")
    for folder in FOLDERS:
        (src / folder).mkdir()
        for notebook in sorted((ROOT / folder).glob("*.ipynb")):
            if folder == "notebooks":  # a page
                page = page_copy(json.loads(notebook.read_text(encoding="utf-8")))
                text = json.dumps(page, indent=1, ensure_ascii=False) + "\n"  # as nbformat writes it
                (src / folder / notebook.name).write_text(text, encoding="utf-8")
            else:
                shutil.copy2(notebook, src / folder / notebook.name)


def build(out: Path, jobs: str = "1", quiet: bool = False) -> Path:
    """Build the site under `out`; returns the folder with index.html."""
    try:
        from sphinx.cmd.build import build_main
    except ImportError:
        raise SystemExit(
            "error: Sphinx is not installed; run `make site`, or `.venv/bin/pip install -e '.[site]'` first"
        ) from None
    src, html = out / "src", out / "html"
    stage(src)
    # -W --keep-going: any warning (a broken link in README's table, a notebook Sphinx cannot
    # read) fails the build after reporting all of them. -E: always read every notebook.
    args = [
        "-b",
        "html",
        "-E",
        "-W",
        "--keep-going",
        "-j",
        jobs,
        "-c",
        str(SITE),
        "-d",
        str(out / "doctrees"),
        str(src),
        str(html),
    ]
    if quiet:
        args.insert(0, "-q")
    status = build_main(args)
    if status != 0:
        raise SystemExit(f"error: sphinx-build failed (exit {status})")
    return html


def site_requirements() -> list[str]:
    """The packages the build needs: the ``site`` extra of pyproject.toml, nothing else (the
    build imports neither the course's package nor torch)."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["optional-dependencies"]["site"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "build" / "site",
        help="output folder (default: build/site); the pages go to OUT/html",
    )
    parser.add_argument("--jobs", default="1", help="Sphinx's -j (default: 1)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    parser.add_argument(
        "--requirements",
        action="store_true",
        help="print the packages the build needs (the site extra), one per line, and stop",
    )
    args = parser.parse_args(argv)
    if args.requirements:
        print("\n".join(site_requirements()))
        return
    start = time.perf_counter()
    html = build(args.out.resolve(), args.jobs, args.quiet)
    print(f"site built in {time.perf_counter() - start:.0f} s: {html / 'index.html'}")
    print(f"view it: python -m http.server -d {html} 8000, then open http://localhost:8000")


if __name__ == "__main__":
    sys.exit(main())
