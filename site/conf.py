"""Sphinx configuration of the course website (`make site`; site/build.py stages the sources).

The source folder Sphinx reads is the staging folder that site/build.py fills: README.md,
this folder's index.md, and copies of notebooks/, exercises/ and solutions/. Only index.md
and the chapter notebooks are pages; exercises and solutions are copied into the site as
downloadable notebooks and linked from their chapter's page (matched by number: exNN_* goes
with NN_*). Nothing is executed: the pages show the outputs committed in the notebooks.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

project = "Low-precision numerics for AI accelerators"
author = "the course authors"
html_title = "Low-precision numerics"

extensions = [
    "myst_nb",
    # MathJax 3 shipped inside the package and copied into _static/mathjax: the pages
    # render math with no network (Sphinx's default mathjax_path is a CDN).
    "sphinx-mathjax-offline",
]

root_doc = "index"
exclude_patterns = ["README.md", "exercises/**", "solutions/**", "_build", "**.ipynb_checkpoints"]

# Text as the notebooks write it: no curly quotes (code names like fp16's stay greppable).
smartquotes = False

# The notebooks are shown as committed: never executed while the site is built.
nb_execution_mode = "off"
# `$...$` and `$$...$$` in the notebooks' markdown become math nodes that MathJax renders
# (`$$...$$` also inside a paragraph).
myst_enable_extensions = ["dollarmath"]
myst_dmath_double_inline = True

html_theme = "sphinx_book_theme"
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    # One search box, in the sidebar that stays in view (the theme also puts one in the header).
    "navbar_persistent": [],
}
html_last_updated_fmt = None
html_show_sphinx = True

CHAPTER = re.compile(r"notebooks/(\d+)_[^/]+$")
# Folders copied as they are into the built site: the notebooks (the "download this
# notebook" link), the exercises and the solutions.
COPIED_FOLDERS = ("notebooks", "exercises", "solutions")


def chapter_files(srcdir: Path, docname: str) -> dict[str, Path]:
    """The downloadable files of a chapter page: its notebook, and the exercise and
    solution notebooks whose number matches (exNN_*.ipynb for NN_*.ipynb), where they exist."""
    match = CHAPTER.match(docname)
    if not match:
        return {}
    number = match.group(1)
    files = {"notebook": srcdir / f"{docname}.ipynb"}
    for kind in ("exercises", "solutions"):
        found = sorted((srcdir / kind).glob(f"ex{number}_*.ipynb"))
        if len(found) > 1:
            raise ValueError(f"more than one {kind} notebook for chapter {number}: {found}")
        if found:
            files[kind] = found[0]
    return files


def files_box(srcdir: Path, docname: str) -> str:
    """HTML for the box under a chapter's title: download links, relative to the page."""
    files = chapter_files(srcdir, docname)
    if not files:
        return ""

    def link(path: Path, text: str) -> str:
        href = f"../{path.parent.name}/{path.name}"
        return f'<a class="reference download" href="{html.escape(href)}" download>{html.escape(text)}</a>'

    items = [
        f"<li>{link(files['notebook'], 'Download this notebook')} "
        f"(<code>{files['notebook'].name}</code>, with its outputs)</li>"
    ]
    if "exercises" in files:
        items.append(
            f"<li>{link(files['exercises'], 'Exercises')}: "
            f"<code>{files['exercises'].name}</code>, to fill in and check</li>"
        )
    if "solutions" in files:
        items.append(
            f'<li><details class="chapter-solutions"><summary>Solutions (spoilers)</summary>'
            f"{link(files['solutions'], 'Worked solutions')}: "
            f"<code>{files['solutions'].name}</code></details></li>"
        )
    return (
        '<div class="admonition note chapter-files">'
        '<p class="admonition-title">Files for this chapter</p>'
        f'<ul class="simple">{"".join(items)}</ul></div>'
    )


def add_files_box(app, doctree) -> None:
    """Put the chapter's download links right under its title."""
    from docutils import nodes

    box = files_box(Path(app.srcdir), app.env.docname)
    if not box:
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None or not section.children or not isinstance(section[0], nodes.title):
        raise ValueError(f"{app.env.docname}: the notebook does not start with a title heading")
    section.insert(1, nodes.raw("", box, format="html"))


def link_copied_notebooks(app, doctree) -> None:
    """Markdown links to exercise and solution notebooks (README's chapter table) name
    notebooks that are files in the site, not pages: point them at the copied file."""
    from docutils import nodes
    from sphinx import addnodes

    up = "../" * app.env.docname.count("/")
    for node in list(doctree.findall(addnodes.pending_xref)):
        target = node.get("reftarget", "")
        if node.get("refdomain") != "doc" or target.split("/")[0] not in ("exercises", "solutions"):
            continue
        if not (Path(app.srcdir) / f"{target}.ipynb").is_file():
            continue  # left to MyST, which warns about the broken link
        link = nodes.reference("", "", refuri=f"{up}{target}.ipynb", classes=["download"])
        link += node.children
        node.replace_self(link)


def copy_folders(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for name in COPIED_FOLDERS:
        source = Path(app.srcdir) / name
        if source.is_dir():
            target = Path(app.outdir) / name
            target.mkdir(parents=True, exist_ok=True)
            for notebook in sorted(source.glob("*.ipynb")):
                shutil.copy2(notebook, target / notebook.name)


def setup(app):
    app.connect("doctree-read", add_files_box)
    app.connect("doctree-read", link_copied_notebooks)
    app.connect("build-finished", copy_folders)
