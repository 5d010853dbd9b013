"""Build the course website: `make site`, or `python site/build.py [--out build/site]`.

Stages the sources into OUT/src (README.md, site/index.md, and copies of notebooks/,
exercises/ and solutions/, every *.ipynb picked up by glob, so a new chapter needs no
configuration), then runs Sphinx with site/conf.py into OUT/html. Nothing is executed and
nothing is downloaded: the pages show the outputs committed in the notebooks. View the result
with `python -m http.server -d build/site/html` and open http://localhost:8000.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
FOLDERS = ("notebooks", "exercises", "solutions")


def stage(src: Path) -> None:
    """Fill `src` with the files Sphinx reads (removing what an earlier build left)."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy2(ROOT / "README.md", src / "README.md")
    shutil.copy2(SITE / "index.md", src / "index.md")
    chapters = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not chapters:
        raise SystemExit(f"error: no notebooks in {ROOT / 'notebooks'}: nothing to build")
    for folder in FOLDERS:
        (src / folder).mkdir()
        for notebook in sorted((ROOT / folder).glob("*.ipynb")):
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
    args = parser.parse_args(argv)
    start = time.perf_counter()
    html = build(args.out.resolve(), args.jobs, args.quiet)
    print(f"site built in {time.perf_counter() - start:.0f} s: {html / 'index.html'}")
    print(f"view it: python -m http.server -d {html} 8000, then open http://localhost:8000")


if __name__ == "__main__":
    sys.exit(main())
