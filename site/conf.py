"""Sphinx configuration of the course website (`make site`; site/build.py stages the sources).

The source folder Sphinx reads is the staging folder that site/build.py fills: README.md,
this folder's pages (index.md, references.md, explorer.md), docs/*.md, copies of notebooks/,
exercises/ and solutions/, and exercises.md, the index of the exercises that the build writes
(site/exercise_index.py). Only those pages and the chapter notebooks are pages; exercises and
solutions are copied into the site as downloadable notebooks and linked from their chapter's
page (matched by number: exNN_* goes with NN_*). Nothing is executed: the pages show the
outputs committed in the notebooks. The float format explorer (explorer.md) is a script and a
stylesheet in this folder's _static/, loaded on that page alone.
"""

from __future__ import annotations

import html
import posixpath
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder's modules (citations.py)
import repository
from citations import _in_prose, _join_text_nodes, link_citations

ROOT = Path(__file__).resolve().parents[1]  # the repository

project = "Low-precision numerics for AI accelerators"
author = "the course authors"
copyright = "2026, The course authors"
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
myst_heading_anchors = 3

html_theme = "sphinx_book_theme"
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    # One search box, in the sidebar that stays in view (the theme also puts one in the header).
    "navbar_persistent": [],
}
# The theme's colour mode follows the reader's system until they pick one (without a default
# the theme's script logs an error on every page).
html_context = {"default_mode": "auto"}
# The course's own CSS and script (site/_static): wrapped outputs, and figures that open at
# full size when the column shrinks them.
html_static_path = ["_static"]
# the tab's icon: a sign, an exponent and a mantissa field
html_favicon = "_static/favicon.svg"
html_css_files = ["course.css"]
# A figure saved with twice the pixels (nbhelpers.plots) has its size as width and height: Sphinx
# would wrap such an image in a link to the file, which opens the PNG on a click; course.js opens
# the figure at its full size instead.
html_scaled_image_link = False
html_js_files = ["course.js"]
html_last_updated_fmt = None

# --- the licences and the repository -------------------------------------------------------
# Every page's footer names the two licences (LICENSE: MIT, the code; LICENSE-CONTENT: CC BY 4.0,
# the prose and figures), copied into the site as LICENSE.txt and LICENSE-CONTENT.txt
# (`copy_licences`), and the repository when there is one (site/_templates/course-footer.html).
LICENCES = {"LICENSE": "LICENSE.txt", "LICENSE-CONTENT": "LICENSE-CONTENT.txt"}
# How to cite the course: CITATION.cff, copied into the site's root, which the footer links too.
CITATION = "CITATION.cff"
templates_path = ["_templates"]
html_theme_options["footer_content_items"] = ["copyright", "course-footer", "last-updated"]
# The repository's address, from one place (site/repository.py: pyproject.toml's
# [tool.lowprec-course], overridden by COURSE_REPO_URL, else an https `origin`), or None. With
# one, every page links the repository, its issues and the page's source ("edit this page"), and
# each chapter page has "Open in Colab" and "Binder" buttons for its notebook; without one, none
# of these links is drawn.
REPOSITORY_URL = repository.repository_url(ROOT)
REPOSITORY_BRANCH = repository.branch(ROOT)
html_context["course_repository"] = REPOSITORY_URL
# The theme draws its repository, issue and edit buttons for the hosts it knows; the footer's
# link and the chapters' launch buttons (`files_box`) work for any host.
THEME_HOSTS = ("github.com", "gitlab.com", "bitbucket.org")
if REPOSITORY_URL and urlsplit(REPOSITORY_URL).netloc.lower() in THEME_HOSTS:
    html_theme_options.update(
        repository_url=REPOSITORY_URL,
        repository_branch=REPOSITORY_BRANCH,
        path_to_docs="",  # notebooks/ and docs/ are where the repository keeps them
        use_repository_button=True,
        use_issues_button=True,
        use_edit_page_button=True,
        # the header's launch menu on chapter pages, beside the buttons in the chapter's box
        launch_buttons={
            "binderhub_url": repository.BINDER,
            "notebook_interface": "jupyterlab",
            **({"colab_url": repository.COLAB} if repository.github_parts(REPOSITORY_URL) else {}),
        },
    )
# this folder's pages, which the site serves from its root (index.md, references.md, explorer.md)
SITE_PAGES_IN_REPOSITORY = "site"
# The float format explorer (explorer.md): its script and stylesheet (_static/explorer.js,
# .css) are added to that page alone, by `explorer_assets`.
EXPLORER_PAGE = "explorer"
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
    if REPOSITORY_URL:
        launch = repository.launch_links(REPOSITORY_URL, REPOSITORY_BRANCH, f"{docname}.ipynb")
        buttons = " ".join(
            f'<a class="launch-button launch-{name.lower()}" href="{html.escape(url)}">'
            f"{'Open in Colab' if name == 'Colab' else 'Launch on Binder'}</a>"
            for name, url in launch.items()
        )
        items.append(f"<li>Run it in your browser: {buttons}</li>")
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


# "chapter 02", "Chapters 02 and 03", "chapters 08-10": the words, then each two-digit number
CHAPTER_MENTION = re.compile(r"\b([Cc]hapters?)\s+(\d\d(?:(?:,\s*|\s+and\s+|\s+or\s+|\s*-\s*|\s+to\s+)\d\d)*)\b")
CHAPTER_NUMBER = re.compile(r"\d\d")
# a notebook of the course named in code: `notebooks/02_accumulation_error.ipynb`, `exercises/ex02_...`
NOTEBOOK_PATH = re.compile(r"^(notebooks|exercises|solutions)/[\w.-]+\.ipynb$")


def chapter_pages(env) -> dict[str, str]:
    """Chapter number ("02") -> its page's docname ("notebooks/02_accumulation_error")."""
    pages = {}
    for docname in env.found_docs:
        match = re.fullmatch(r"notebooks/(\d\d)_[^/]+", docname)
        if match:
            pages[match.group(1)] = docname
    return pages


def link_chapter_mentions(app, doctree, docname) -> None:
    """Every "chapter NN" in a page's prose links to chapter NN's page (not on that page itself),
    and every notebook of the course named in inline code (``notebooks/02_...ipynb``,
    ``exercises/ex02_...ipynb``) links to its page or its download. Code blocks, headings, math
    and existing links are left alone."""
    from docutils import nodes

    pages = chapter_pages(app.env)
    here = CHAPTER.match(docname)
    here = here.group(1) if here else None
    srcdir = Path(app.srcdir)

    def uri(target_doc: str) -> str:
        return app.builder.get_relative_uri(docname, target_doc)

    # MyST gives each line of a paragraph its own text node: join them first (citations.py)
    _join_text_nodes(doctree)

    for text in list(doctree.findall(nodes.Text)):
        if not _in_prose(text) or not CHAPTER_MENTION.search(text.astext()):
            continue
        value, parts, last = text.astext(), [], 0
        for mention in CHAPTER_MENTION.finditer(value):
            numbers = mention.group(2)
            start = mention.start(2)
            for number in CHAPTER_NUMBER.finditer(numbers):
                target = pages.get(number.group(0))
                if target is None or number.group(0) == here:
                    continue
                a, b = start + number.start(), start + number.end()
                # the first number takes the word with it: "chapter 02" is one link
                if number.start() == 0:
                    a = mention.start()
                parts.append(nodes.Text(value[last:a]))
                link = nodes.reference("", "", refuri=uri(target), classes=["chapter-link"])
                link += nodes.Text(value[a:b])
                parts.append(link)
                last = b
        if parts:
            parts.append(nodes.Text(value[last:]))
            text.parent.replace(text, parts)

    for literal in list(doctree.findall(nodes.literal)):
        if isinstance(literal.parent, nodes.reference) or not NOTEBOOK_PATH.match(literal.astext()):
            continue
        path = literal.astext()
        if not (srcdir / path).is_file():
            continue
        if path.startswith("notebooks/") and path[: -len(".ipynb")] in app.env.found_docs:
            refuri = uri(path[: -len(".ipynb")])
        else:  # exercises and solutions are files of the site, not pages
            refuri = "../" * docname.count("/") + path
        link = nodes.reference("", "", refuri=refuri, classes=["notebook-link"])
        literal.replace_self(link)
        link += literal


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


# The icon script the theme loads on every page: 1.5 MB, most of a page's weight, to turn icons
# into SVG. The theme's stylesheet already draws the same icons with its icon font (which the
# pages load anyway, for the admonitions), so the pages do without the script.
THEME_ICON_SCRIPT = re.compile(r'<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>\n?')


def drop_icon_library(app, exception) -> None:
    """Take the theme's icon script out of every built page, and out of the site."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        lean = THEME_ICON_SCRIPT.sub("", text)
        if lean != text:
            page.write_text(lean, encoding="utf-8")
    for leftover in (out / "_static" / "scripts").glob("fontawesome.js*"):
        leftover.unlink()


def link_site_pages(app, doctree) -> None:
    """A link to one of this folder's pages where the repository keeps it (``../site/explorer.md``
    from a notebook: a link that works on GitHub and in JupyterLab; ``site/glossary.md#ulp`` from
    the index of the exercises, a page of the root) goes to that page of the site, with its anchor
    as written. Other links are left to MyST."""
    from docutils import nodes
    from sphinx import addnodes

    here = posixpath.dirname(app.env.docname)
    for node in list(doctree.findall(addnodes.pending_xref)):
        path, _, anchor = node.get("reftarget", "").partition("#")
        if node.get("reftype") != "myst" or not path.endswith(".md"):
            continue
        target = posixpath.normpath(posixpath.join(here, path))
        name = target.removeprefix("site/")[: -len(".md")]
        if not target.startswith("site/") or "/" in name or not (Path(app.srcdir) / f"{name}.md").is_file():
            continue
        uri = "../" * app.env.docname.count("/") + f"{name}.html" + (f"#{anchor}" if anchor else "")
        link = nodes.reference("", "", refuri=uri, internal=True)
        link += node.children
        node.replace_self(link)


def copy_licences(app, exception) -> None:
    """The two licence files, into the site's root as text files the footer links to, and the
    citation file, as it is."""
    if exception is not None or app.builder.format != "html":
        return
    for name, target in LICENCES.items():
        shutil.copy2(ROOT / name, Path(app.outdir) / target)
    shutil.copy2(ROOT / CITATION, Path(app.outdir) / CITATION)


# The pages the build writes (site/exercise_index.py): their sources are the answer keys and the
# notebooks, so they have no "edit this page" button (`drop_edit_button`).
GENERATED_PAGES = ("exercises",)


INDEX_TABLE = "exercise-table"  # the class of the exercise index's tables (course.css)


def break_names_after_underscores(app, doctree, docname) -> None:
    """In the tables of the exercise index (class ``exercise-table``), a function's name
    (``decode_step_time``) may break only after an underscore, never inside a word: a ``<wbr>``
    follows each underscore, and course.css lets the name break nowhere else."""
    from docutils import nodes

    if docname not in GENERATED_PAGES:
        return
    for table in doctree.findall(nodes.table):
        table["classes"].append(INDEX_TABLE)
        for literal in list(table.findall(nodes.literal)):
            parts = [p for p in re.split(r"(?<=_)", literal.astext()) if p]
            literal.children = []
            for i, part in enumerate(parts):
                if i:
                    literal += nodes.raw("", "<wbr>", format="html")
                literal += nodes.Text(part)


PRINTED_TABLE = "printed-table"  # a cell's printed table (course.css keeps its lines whole)
# the rule under a printed table's header: two or more runs of dashes (nbhelpers.tables.text_table)
TABLE_RULE = re.compile(r" *-{2,}(?: +-{2,})+ *", re.MULTILINE)


def is_row(line: str, rule: str) -> bool:
    """Whether a printed line is a row of the table over ``rule``: not blank, no longer than the
    rule, and blank wherever the rule has a gap between its dashed runs (text_table pads every cell
    to its column), so that a title or a note printed right after the table is not taken in."""
    rule = rule.rstrip()
    if not line.strip() or len(line.rstrip()) > len(rule):
        return False
    start = len(rule) - len(rule.lstrip())
    return all(line[i] == " " for i in range(start, min(len(line), len(rule))) if rule[i] == " ")


def table_spans(lines: list[str]) -> list[tuple[int, int]]:
    """The tables in printed lines, as (first, last + 1) line indices: each one's header (the line
    above a rule of dashed runs), its rule, and the rows under it (:func:`is_row`), up to the
    header of the next table. Titles and notes printed before, between or after tables are not
    part of one."""
    spans = []
    for r, line in enumerate(lines):
        if not TABLE_RULE.fullmatch(line) or (spans and r < spans[-1][1]):
            continue
        first = r - 1 if r and lines[r - 1].strip() else r
        last = r + 1
        while (
            last < len(lines)
            and is_row(lines[last], line)
            and not (last + 1 < len(lines) and TABLE_RULE.fullmatch(lines[last + 1]))
        ):
            last += 1
        spans.append((first, last))
    return spans


def mark_printed_tables(app, doctree, docname) -> None:
    """A table a cell prints (a header over a rule of dashed runs, as text_table draws) becomes an
    output block of its own with the class ``printed-table``: course.css keeps its lines whole, so
    that its columns stay in line, and lets it scroll inside its own box. What the cell prints
    around it, a title or a note, stays in blocks that wrap at the column."""
    from docutils import nodes

    for block in list(doctree.findall(nodes.literal_block)):
        if "output" not in block["classes"]:
            continue
        text = block.astext()
        lines = text.split("\n")
        spans = table_spans(lines)
        if not spans:
            continue
        parts, at = [], 0
        for first, last in spans:
            parts += [(lines[at:first], False), (lines[first:last], True)]
            at = last
        parts.append((lines[at:], False))
        pieces = []
        for chunk, is_table in parts:
            body = "\n".join(chunk)
            if not body.strip():
                continue
            piece = nodes.literal_block(body, body)
            for key, value in block.attributes.items():
                if key not in ("ids", "backrefs", "dupnames", "names"):
                    piece[key] = list(value) if isinstance(value, list) else value
            if is_table:
                piece["classes"].append(PRINTED_TABLE)
            pieces.append(piece)
        block.replace_self(pieces)


def drop_edit_button(app, pagename, templatename, context, doctree) -> None:
    """No "edit this page" on a page the build writes: the theme's button would open a file that
    the repository does not have. Runs after the theme has made its buttons."""
    if pagename not in GENERATED_PAGES:
        return

    def keep(button) -> bool:
        return button.get("label") != "source-edit-button"

    for button in context.get("header_buttons", []):
        if "buttons" in button:
            button["buttons"] = [b for b in button["buttons"] if keep(b)]
    context["header_buttons"] = [b for b in context.get("header_buttons", []) if keep(b)]


def edit_path(app, pagename, templatename, context, doctree) -> None:
    """ "Edit this page" opens the page's source where the repository keeps it: this folder's
    pages are in site/, the others (notebooks/, docs/) where the site has them."""
    if REPOSITORY_URL and "/" not in pagename:
        context["doc_path"] = SITE_PAGES_IN_REPOSITORY


def explorer_assets(app, pagename, templatename, context, doctree) -> None:
    """The explorer's script and stylesheet, on its page and nowhere else."""
    if pagename == EXPLORER_PAGE:
        app.add_css_file("explorer.css")
        app.add_js_file("explorer.js")


def setup(app):
    app.connect("html-page-context", explorer_assets)
    app.connect("html-page-context", edit_path)
    app.connect("html-page-context", drop_edit_button, priority=900)  # after the theme's buttons
    app.connect("doctree-read", add_files_box)
    app.connect("doctree-read", link_copied_notebooks)
    app.connect("doctree-read", link_site_pages)
    app.connect("doctree-resolved", link_chapter_mentions)
    app.connect("doctree-resolved", link_citations)
    app.connect("doctree-resolved", break_names_after_underscores)
    app.connect("doctree-resolved", mark_printed_tables)
    app.connect("build-finished", copy_folders)
    app.connect("build-finished", drop_icon_library)
    app.connect("build-finished", copy_licences)
