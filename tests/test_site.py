"""The course website (`make site`, site/build.py): built once per session from the committed
notebooks, then read as files (every chapter has a page with its title, its figures, rendered
math and its download links; the home page has the chapter table) and in a real browser
(Chromium, driven by Playwright, loading the pages from a local server with no network).
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

from conftest import system_package_missing  # the repository root's conftest.py
from nbhelpers.tooling import install_cell

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DOCS = sorted((ROOT / "docs").glob("*.md"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
INSTALL_CHROMIUM = "sudo apt-get install -y chromium"
# A code cell the page shows unfolded (a chapter's first code cell, which installs the course on
# Colab, is folded away: nbhelpers/tooling/install_cell.py)
UNFOLDED_CELL = "div.cell:not(.tag_hide-cell)"
# what the site's build must not import: the Pages workflow installs the site extra alone
BUILD_NEEDS_NONE_OF = ("nbhelpers", "torch", "triton", "numpy", "matplotlib", "jupyterlab")


# --- reading notebooks and pages ----------------------------------------------------------


def load(notebook: Path) -> dict:
    return json.loads(notebook.read_text(encoding="utf-8"))


def markdown(notebook: Path) -> str:
    return "\n\n".join("".join(cell["source"]) for cell in load(notebook)["cells"] if cell["cell_type"] == "markdown")


def title(notebook: Path) -> str:
    """The text of the notebook's first markdown heading."""
    for line in markdown(notebook).splitlines():
        if re.match(r"#{1,6}\s", line):
            return line.lstrip("#").strip()
    raise AssertionError(f"{notebook.name} has no markdown heading")


def png_outputs(notebook: Path) -> list[bytes]:
    return [
        base64.b64decode("".join(output["data"]["image/png"]))
        for cell in load(notebook)["cells"]
        if cell["cell_type"] == "code"
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]


def display_math(notebook: Path) -> list[str]:
    """The `$$ ... $$` blocks of the notebook's markdown."""
    return re.findall(r"\$\$(.+?)\$\$", markdown(notebook), re.DOTALL)


class Page(HTMLParser):
    """What the tests read from one HTML page: headings, images, links, math elements,
    scripts, tables, and the text that is neither code nor math."""

    SKIP = {"script", "style", "pre", "code"}

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.raw = text
        self.h1: list[str] = []
        self.images: list[str] = []
        self.links: list[str] = []
        self.scripts: list[str] = []
        self.math: list[str] = []
        self.tables: list[str] = []
        self.table_links: list[list[str]] = []  # the links inside each table
        self.plain: list[str] = []
        self._stack: list[tuple[str, bool, bool]] = []  # (tag, opens math, skips text)
        self._h1: list[str] | None = None
        self._math: list[str] | None = None
        self._table: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        elif tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
            if self._table is not None:
                self.table_links[-1].append(attrs["href"])
        elif tag == "script" and attrs.get("src"):
            self.scripts.append(attrs["src"])
        if tag in ("img", "br", "hr", "meta", "link", "input"):
            return  # void elements have no end tag
        classes = (attrs.get("class") or "").split()
        opens_math = "math" in classes and self._math is None
        if opens_math:
            self._math = []
        if tag == "h1" and self._h1 is None:
            self._h1 = []
        if tag == "table":
            self._table = []
            self.table_links.append([])
        self._stack.append((tag, opens_math, tag in self.SKIP))

    def handle_endtag(self, tag):
        while self._stack:
            open_tag, opened_math, _ = self._stack.pop()
            if opened_math:
                self.math.append("".join(self._math))
                self._math = None
            if open_tag == "h1" and self._h1 is not None:
                self.h1.append(" ".join("".join(self._h1).split()).rstrip("#").strip())
                self._h1 = None
            if open_tag == "table" and self._table is not None:
                self.tables.append(" ".join("".join(self._table).split()))
                self._table = None
            if open_tag == tag:
                break

    def handle_data(self, data):
        for sink in (self._h1, self._math, self._table):
            if sink is not None:
                sink.append(data)
        if self._math is None and not any(skips for _, _, skips in self._stack):
            self.plain.append(data)


def page_of(site: Path, notebook: Path) -> Path:
    return site / "notebooks" / f"{notebook.stem}.html"


def built(site: Path, source: Path) -> Path:
    """The copy of a notebook the site was built from (site/build.py stages them next to the
    html folder). The tests compare pages with these copies, so that a notebook edited while
    the tests run is not reported as a broken site."""
    return site.parent / "src" / source.parent.name / source.name


def local_target(site: Path, page: Path, url: str) -> Path | None:
    """The file in the build a relative URL on `page` points at (None for other sites)."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return (page.parent / unquote(parts.path)).resolve()


# --- the build, once per session ----------------------------------------------------------


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """Build the site the way `make site` does, into a temporary folder; the html folder. The
    build runs with the course's package and its heavy dependencies made unimportable, as in the
    Pages workflow, which installs the site extra alone."""
    # Once per session: pytest sets a fixture up once per module that holds it, and
    # tests/test_site_explorer.py and test_site_layout.py import this module's fixtures.
    base = tmp_path_factory.getbasetemp()
    if base not in BUILT:
        BUILT[base] = shared_build(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
    return BUILT[base]


BUILT: dict[Path, Path] = {}  # a session's base temporary folder -> the html folder of its build


def shared_build(folder: Path) -> Path:
    """The html folder of the one build in ``folder``: under pytest-xdist the session's folder
    above every worker's own, so the worker that asks first builds and the others wait for it (a
    lock) and read the same files, rather than each building again; the tests only read them."""
    import fcntl

    out, done = folder / "site-build", folder / "site-build.done"
    with open(folder / "site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            out.mkdir(exist_ok=True)
            done.write_text(str(build_site(out)), encoding="utf-8")
        return Path(done.read_text(encoding="utf-8"))


def build_site(out: Path, repository: str = "") -> Path:
    """Build the site into `out` (see `site`); the html folder. `repository`: the address the
    build is given as the course's repository (COURSE_REPO_URL, site/repository.py); empty, the
    default, for none, whatever the clone's `origin` is, so that every run builds the same site."""
    lean = (
        "import runpy, sys\n"
        f"for name in {BUILD_NEEDS_NONE_OF!r}:\n"
        "    sys.modules[name] = None  # importing it raises ImportError\n"
        f"sys.argv = ['build.py', '--out', {str(out)!r}, '-q']\n"
        f"runpy.run_path({str(ROOT / 'site' / 'build.py')!r}, run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", lean],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COURSE_REPO_URL": repository},
    )
    assert result.returncode == 0, f"site build failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return out / "html"


@pytest.fixture(scope="session")
def pages(site) -> dict[str, Page]:
    return {
        notebook.stem: Page(page_of(site, notebook).read_text(encoding="utf-8"))
        for notebook in NOTEBOOKS
        if page_of(site, notebook).is_file()
    }


# --- the pages, read as files -------------------------------------------------------------


def test_there_are_chapters_to_build():
    """The tests below are parametrized over the notebooks: with none they would check nothing."""
    assert NOTEBOOKS, f"no notebooks in {ROOT / 'notebooks'}"


def test_the_site_is_built_from_every_notebook(site):
    for folder in ("notebooks", "exercises", "solutions"):
        staged = sorted(p.name for p in (site.parent / "src" / folder).glob("*.ipynb"))
        assert staged == sorted(p.name for p in (ROOT / folder).glob("*.ipynb")), folder


def test_every_notebook_has_a_page(site):
    missing = [n.name for n in NOTEBOOKS if not page_of(site, n).is_file()]
    assert not missing, f"no page for {missing}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_page_holds_the_notebook_title(site, pages, notebook):
    assert pages[notebook.stem].h1[:1] == [title(built(site, notebook))]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_every_figure_is_an_image_in_the_site(site, pages, notebook):
    """Each PNG output of the notebook is on its page, byte for byte, as an image file in
    the build (or a data URI)."""
    page = page_of(site, notebook)
    shown = []
    for src in pages[notebook.stem].images:
        if src.startswith("data:image/png;base64,"):
            shown.append(base64.b64decode(src.split(",", 1)[1]))
            continue
        target = local_target(site, page, src)
        if target is not None and target.suffix == ".png":
            assert target.is_file(), f"{notebook.stem}: image {src} is not in the build"
            shown.append(target.read_bytes())
    assert all(data.startswith(PNG_MAGIC) for data in shown)
    digest = lambda blobs: sorted(hashlib.sha256(b).hexdigest() for b in blobs)  # noqa: E731
    assert digest(shown) == digest(png_outputs(built(site, notebook)))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_math_is_left_to_the_renderer_and_no_raw_latex_shows(site, pages, notebook):
    page = pages[notebook.stem]
    for formula in display_math(built(site, notebook)):
        body = " ".join(formula.split())
        assert any(body in " ".join(m.split()) for m in page.math), f"not in a math element: {body}"
    plain = " ".join(page.plain)
    assert not re.search(r"\$\$|\$[^$\s][^$]*\$", plain), "dollar-delimited TeX left in the text"
    assert not re.search(r"\\(frac|times|sum|left|right|text|qquad|gamma|le)\b", plain), (
        "a TeX command outside the math elements"
    )
    if page.math:  # the renderer is loaded from the site itself, never from a CDN
        mathjax = [src for src in page.scripts if "mathjax" in src.lower()]
        assert mathjax, "a page with math loads no MathJax"
        for src in mathjax:
            target = local_target(site, page_of(site, notebook), src)
            assert target is not None and target.is_file(), f"MathJax not bundled: {src}"


def test_the_math_renderer_is_the_offline_one(site, pages):
    """At least one page has math (chapters 01-03 do), so the test above checks something."""
    assert sum(len(display_math(built(site, n))) for n in NOTEBOOKS) >= 1
    assert any(p.math for p in pages.values())
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()


def test_only_the_pages_with_math_load_the_math_renderer(site):
    """MathJax (1.2 MB, most of a chapter page's weight) is loaded by every page that has a formula
    and by no other: Sphinx adds it to a page with math nodes only. The explorer writes its two
    powers of two as superscripts, so it has no formula and loads none."""
    with_math, without = [], []
    for path in sorted(site.rglob("*.html")):
        name = str(path.relative_to(site))
        if name.startswith("_"):
            continue
        page = Page(path.read_text(encoding="utf-8"))
        loads = any("mathjax" in src.lower() for src in page.scripts)
        assert loads == bool(page.math), f"{name}: {len(page.math)} formulas, MathJax loaded: {loads}"
        (with_math if page.math else without).append(name)
    assert with_math, "no page has a formula"
    assert {"index.html", "explorer.html", "exercises.html", "references.html"} <= set(without), without
    assert "2<sup>−7</sup>" in (site / "explorer.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_chapter_page_links_its_notebook_exercises_and_solutions(site, pages, notebook):
    page = page_of(site, notebook)
    number = notebook.name.split("_", 1)[0]
    expected = {"notebooks": notebook}
    for kind in ("exercises", "solutions"):
        found = sorted((ROOT / kind).glob(f"ex{number}_*.ipynb"))
        if found:
            expected[kind] = found[0]
    for kind, source in expected.items():
        hrefs = [h for h in pages[notebook.stem].links if h.endswith(f"{kind}/{source.name}")]
        assert hrefs, f"{notebook.stem}: no link to {kind}/{source.name}"
        target = local_target(site, page, hrefs[0])
        assert target is not None and target.is_file(), f"{hrefs[0]} is not in the build"
        assert target.read_bytes() == built(site, source).read_bytes()
    if "solutions" in expected:
        assert "Solutions (spoilers)" in page.read_text(encoding="utf-8")


CHAPTER_WORDS = re.compile(r"\b[Cc]hapters?\s+(\d\d(?:(?:,\s*|\s+and\s+|\s+or\s+|\s*-\s*|\s+to\s+)\d\d)*)\b")


def unlinked_prose(raw: str) -> str:
    """A page's text outside links, code, headings, scripts and math: where a chapter named in
    passing must not be left without its link."""
    body = raw.split('<article class="bd-article"', 1)[-1].split("</article>", 1)[0]
    for tag in ("a", "pre", "code", "script", "style", "h1", "h2", "h3", "h4", "h5", "h6"):
        body = re.sub(rf"<{tag}\b.*?</{tag}>", " ", body, flags=re.DOTALL)
    body = re.sub(r'<(span|div) class="math[^"]*".*?</\1>', " ", body, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_every_chapter_named_in_the_prose_links_to_its_page(site, pages, notebook):
    raw = pages[notebook.stem].raw
    own = notebook.stem[:2]
    numbers = {n.stem[:2]: n.stem for n in NOTEBOOKS}
    left = [
        (m.group(0), n)
        for m in CHAPTER_WORDS.finditer(unlinked_prose(raw))
        for n in re.findall(r"\d\d", m.group(1))
        if n != own and n in numbers
    ]
    assert not left, f"{notebook.stem}: chapters named without a link: {left[:5]}"
    links = re.findall(r'<a class="[^"]*chapter-link[^"]*" href="([^"]+)">([^<]+)</a>', raw)
    for href, text in links:  # each link goes to the chapter its text names
        number = re.findall(r"\d\d", text)[-1]
        assert href == f"{numbers[number]}.html", (text, href)
        assert (page_of(site, notebook).parent / href).is_file()
    linked_code = re.findall(r'<a class="[^"]*notebook-link[^"]*" href="([^"]+)"><code[^>]*>(.*?)</code></a>', raw)
    for href, code in linked_code:  # a notebook named in code links to its page or its download
        assert local_target(site, page_of(site, notebook), href).is_file(), href
    named = re.findall(r"<code[^>]*>(?:<span[^>]*>)?((?:notebooks|exercises|solutions)/[\w.-]+\.ipynb)", raw)
    assert len(linked_code) == len([n for n in named if (ROOT / n).is_file()]), (named, linked_code)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_pages_show_no_test_markers_and_keep_the_answers_folded(site, pages, notebook):
    """nbval's markers (``# NBVAL_CHECK_OUTPUT``) are for the tests: neither a page nor its
    download shows one, though the repository's notebooks keep them. The cell that checks the
    problems' answers prints them: on the page it is folded away (a closed ``<details>``), like
    the answers."""
    raw = pages[notebook.stem].raw
    assert "NBVAL_" not in raw
    assert "NBVAL_" not in built(site, notebook).read_text(encoding="utf-8")
    source = load(notebook)
    assert any("NBVAL_" in "".join(c["source"]) for c in source["cells"] if c["cell_type"] == "code")
    checks = ["".join(c["source"]) for c in source["cells"] if c["cell_type"] == "code"]
    checks = [c for c in checks if "# checking the answers" in c]
    assert raw.count("checking the answers") == len(checks)
    for match in re.finditer(r"checking the answers", raw):
        before = raw[: match.start()]
        opened = before.rfind("<details")
        assert opened > before.rfind("</details>"), f"{notebook.stem}: the answers' check is not folded"
        tag = before[opened : before.index(">", opened)]
        assert " open" not in tag, f"{notebook.stem}: the answers' check is folded but open: {tag}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_pages_fold_the_cell_that_installs_the_course_on_colab(site, pages, notebook):
    """A chapter's first code cell installs the course on Colab and does nothing elsewhere: a
    reader of the page has nothing to install, so the page folds it away (a closed ``<details>``)
    under a prompt that says what it holds. The notebook offered for download keeps it, so that
    the download, opened on Colab, sets itself up too."""
    raw = pages[notebook.stem].raw
    prompt = install_cell.CELL_METADATA["mystnb"]["code_prompt_show"]
    assert raw.count(install_cell.FIRST_LINE) == 1 and raw.count(prompt) == 1, notebook.stem
    before = raw[: raw.index(install_cell.FIRST_LINE)]
    opened = before.rfind("<details")
    assert opened > before.rfind("</details>") and prompt in before[opened:], f"{notebook.stem}: not folded"
    assert " open" not in before[opened : before.index(">", opened)], f"{notebook.stem}: folded but open"
    assert raw.index("Files for this chapter") < opened  # below the title's box of downloads
    download = [c for c in load(built(site, notebook))["cells"] if c["cell_type"] == "code"]
    assert "".join(download[0]["source"]).startswith(install_cell.FIRST_LINE), notebook.stem


def test_every_local_link_and_image_resolves(site, pages):
    index = site / "index.html"
    all_pages = {index: Page(index.read_text(encoding="utf-8"))}
    all_pages.update({page_of(site, n): pages[n.stem] for n in NOTEBOOKS})
    for doc in DOCS:
        all_pages[site / "docs" / f"{doc.stem}.html"] = Page((site / "docs" / f"{doc.stem}.html").read_text("utf-8"))
    broken = []
    for path, page in all_pages.items():
        for url in page.links + page.images + page.scripts:
            target = local_target(site, path, url)
            if target is not None and not target.exists():
                broken.append(f"{path.relative_to(site)} -> {url}")
    assert not broken, broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.stem)
def test_instructors_pages_are_pages_of_the_site(site, doc):
    """docs/*.md (grading; running on a GPU) are pages, linked from the home page, with their own title."""
    page = site / "docs" / f"{doc.stem}.html"
    assert page.is_file()
    heading = next(line for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("# "))
    assert Page(page.read_text(encoding="utf-8")).h1[0] == heading[2:].strip()
    home = Page((site / "index.html").read_text(encoding="utf-8"))
    assert f"docs/{doc.stem}.html" in home.links


def test_home_page_has_the_chapter_table_and_the_setup_commands(site):
    home = Page((site / "index.html").read_text(encoding="utf-8"))
    # The two set-up commands, as code blocks (the highlighter wraps words in spans).
    blocks = [
        html.unescape(re.sub(r"<[^>]+>", "", b)).strip() for b in re.findall(r"<pre>(.*?)</pre>", home.raw, re.DOTALL)
    ]
    assert "make lab" in blocks and "make test" in blocks, blocks
    tables = [i for i, t in enumerate(home.tables) if "exercises" in t and "solutions" in t]
    assert len(tables) == 1, home.tables
    links = home.table_links[tables[0]]  # not the sidebar's: those list every page anyway
    for notebook in NOTEBOOKS:
        href = f"notebooks/{notebook.stem}.html"
        assert href in links, f"the chapter table has no link to {href}"


def test_the_introductions_reach_the_last_chapter(site):
    """The home page's introduction (README's first paragraph) and CITATION.cff's abstract, which
    say what the course covers, name the subject of its last chapter (from its title: "12 ·
    Quantized inference: ..." -> "quantized inference")."""
    subject = re.split(r"[:(]", title(NOTEBOOKS[-1]).split("·", 1)[1], maxsplit=1)[0].strip().lower()
    assert len(subject) > 3, title(NOTEBOOKS[-1])
    raw = (site / "index.html").read_text(encoding="utf-8").split('<article class="bd-article"', 1)[1]
    intro = raw.split("</h1>", 1)[1].split("<h2", 1)[0].split("<section", 1)[0]
    words = lambda text: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split()).lower()  # noqa: E731
    assert subject in words(intro), (subject, words(intro))
    abstract = (ROOT / "CITATION.cff").read_text(encoding="utf-8").split("\nabstract:", 1)[1]
    abstract = abstract.split("\n", 1)[1].split("\nauthors:", 1)[0]  # the folded block's lines
    assert subject in words(abstract), (subject, abstract)


def test_the_exercise_index_lists_every_exercise_and_problem(site):
    """exercises.html, which the build writes (site/exercise_index.py): a row for every exercise of
    every answer key, in order, with its title, its function, what it asks and its points; every
    problem of every chapter, worded as in the notebook; every link resolving; linked from the
    home page and from the navigation of every page."""
    from test_exercise_index import ANSWER_KEYS, index

    from nbhelpers.answer_keys import exercises_of

    path = site / "exercises.html"
    raw = path.read_text(encoding="utf-8")
    page = Page(raw)
    assert page.h1[:1] == ["Exercises and problems"]
    # a row's words, a name's pieces joined again where a <wbr> parts them (decode_<wbr>bits)
    joined = lambda fragment: re.sub(r"(</span>)?<wbr>(<span[^>]*>)?", "", fragment)  # noqa: E731
    text = lambda fragment: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", joined(fragment))).split())  # noqa: E731
    rows = [text(row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", raw, re.DOTALL)]
    listed = [e for key in ANSWER_KEYS for e in exercises_of(int(key.stem[2:]))]
    assert listed
    # a function's name in the tables may break after an underscore (a <wbr>), nowhere else
    tables = re.findall(r'<table class="[^"]*\bexercise-table\b[^"]*"[^>]*>(.*?)</table>', raw, re.DOTALL)
    names = [n for t in tables for n in re.findall(r"<code[^>]*>(.*?)</code>", t, re.DOTALL)]
    assert len(tables) >= len(ANSWER_KEYS) and len(names) >= len(listed), (len(tables), len(names))
    for name in names:
        bare = re.sub(r"<(?!wbr>)[^>]+>", "", name)  # the spans of the words gone, the <wbr>s kept
        assert bare.replace("<wbr>", "").replace("_", "_<wbr>").removesuffix("<wbr>") == bare, name
    for number, e in ((n, e) for key in ANSWER_KEYS for n, e in enumerate(exercises_of(int(key.stem[2:])), 1)):
        expected = f"{number} {e.title} ( {e.name} ) {e.kind.value if e.kind else ''} {e.points}"
        assert " ".join(expected.split()) in rows, expected
    assert len(rows) == len(listed) + len([r for r in rows if r.startswith("# exercise")])
    # the letters and digits of the words, in order: the markup (code, emphasis) and the spaces
    # around it aside
    letters = lambda words: re.sub(r"[^0-9A-Za-z]", "", words)  # noqa: E731
    body = letters(text(raw.split('<article class="bd-article"', 1)[1]))
    problems = 0
    for notebook in NOTEBOOKS:
        for problem in index.read_problems(load(built(site, notebook)), notebook.name):
            plain = letters(re.sub(r"\]\([^)\s]*\)", "]", problem.text))  # a link's words, not its target
            assert plain in body, f"{notebook.stem}, problem {problem.number}: {problem.text[:60]}"
            problems += 1
    assert problems >= len(NOTEBOOKS)
    for url in page.links:
        target = local_target(site, path, url)
        assert target is None or target.exists(), url
        if target is not None and urlsplit(url).fragment:  # the anchor an author wrote, on its page
            anchor = unquote(urlsplit(url).fragment)
            assert not re.fullmatch(r"id\d+", anchor), f"{url}: a generated id, not the entry's own anchor"
            assert f'id="{anchor}"' in target.read_text(encoding="utf-8"), f"{url}: no such anchor"
    assert "exercises.html" in Page((site / "index.html").read_text(encoding="utf-8")).links
    assert "../exercises.html" in Page(page_of(site, NOTEBOOKS[-1]).read_text(encoding="utf-8")).links


def test_search_index_covers_every_chapter(site):
    assert (site / "search.html").is_file()
    index = (site / "searchindex.js").read_text(encoding="utf-8")
    for notebook in NOTEBOOKS:
        assert f'"notebooks/{notebook.stem}"' in index


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_pages_show_the_committed_outputs(site, pages, notebook):
    """Nothing is executed: the first printed output of the notebook is on its page as committed."""
    streams = [
        "".join(o["text"])
        for c in load(built(site, notebook))["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    ]
    if not streams:
        pytest.skip("no printed output in this notebook")
    first_line = next(line for line in streams[0].splitlines() if line.strip())
    text = html.unescape(re.sub(r"<[^>]+>", "", pages[notebook.stem].raw))
    assert " ".join(first_line.split()) in " ".join(text.split())


OUTPUT_BLOCK = re.compile(r'<div class="(output [^"]*)"><div class="highlight"><pre>(.*?)</pre>', re.S)
TABLE_RULE = re.compile(r" *-{2,}(?: +-{2,})+ *")  # the rule under text_table's header


def test_printed_tables_and_only_they_are_marked_to_keep_their_lines(site, pages):
    """A table a cell prints (a header over a rule of two or more dashed runs, as nbhelpers'
    text_table draws) is an output block of its own with the class the stylesheet keeps whole
    (printed-table): its header, its one rule and rows no wider than the rule, nothing else, so
    that a title or note printed before, between or after tables stays in a block that wraps at the
    column. No other block has a rule."""
    tables = prose = 0
    wrong = []
    for name, page in pages.items():
        for classes, body in OUTPUT_BLOCK.findall(page.raw):
            lines = html.unescape(re.sub(r"<[^>]+>", "", body)).rstrip("\n").split("\n")
            rules = [i for i, line in enumerate(lines) if TABLE_RULE.fullmatch(line)]
            if "printed-table" not in classes.split():
                prose += 1
                if rules:
                    wrong.append(f"{name}: a rule outside a printed table: {lines[0][:60]!r}")
                continue
            tables += 1
            if len(rules) != 1 or rules[0] > 1 or any(len(line.rstrip()) > len(lines[rules[0]]) for line in lines):
                wrong.append(f"{name}: a printed table holding more than a table: {lines[:3]!r}")
    assert tables > 100 and prose > 100, (tables, prose)
    assert not wrong, wrong[:5]
    css = (site / "_static" / "course.css").read_text()
    assert re.search(r"div\.cell_output div\.printed-table pre \{[^}]*white-space: pre;", css)


def test_no_inline_code_runs_into_the_link_after_it(site, pages):
    """Inline code followed by a link on the next source line keeps the space between them on the
    page (it once rendered as "`1x128`tiles"): no chapter's code ends right where a link starts."""
    joined = [
        f"{name}: {html.unescape(re.sub(r'<[^>]+>', '', m))!r}"
        for name, page in pages.items()
        for m in re.findall(r'<code class="docutils literal[^>]*>(?:(?!</code>).)*</code><a class="reference', page.raw)
    ]
    assert not joined, joined


# --- in a real browser --------------------------------------------------------------------


def find_chromium() -> str | None:
    """The Chromium (or Chrome) binary: $CHROMIUM if set, else the usual install places."""
    if "CHROMIUM" in os.environ:
        path = os.environ["CHROMIUM"]
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    # Debian's /usr/bin/chromium is a shell wrapper; Playwright wants the browser itself.
    for path in ("/usr/lib/chromium/chromium",):
        if os.access(path, os.X_OK):
            return path
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server(site):
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture(scope="module")
def browser_page(server):
    """A Chromium page that may only reach the local server: every other request is
    blocked and recorded in `page.outside`. One per test module (tests/test_site_explorer.py
    imports it): Playwright's sync API drives one browser at a time in a thread."""
    chromium = find_chromium()
    if chromium is None and "CHROMIUM" in os.environ:
        system_package_missing(
            f"$CHROMIUM={os.environ['CHROMIUM']!r} is not an executable; unset it, or "
            f"install Chromium with: {INSTALL_CHROMIUM}"
        )
    if chromium is None:
        system_package_missing(f"Chromium is not installed; install it with: {INSTALL_CHROMIUM}")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'"
    )
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox refuses root
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=args)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.outside = []

        def route(request_route):
            url = request_route.request.url
            if url.startswith(server) or url.startswith("data:"):
                request_route.continue_()
            else:
                page.outside.append(url)
                request_route.abort()

        page.route("**/*", route)
        yield page
        browser.close()


def test_browser_shows_the_home_page_with_the_chapter_table(server, browser_page):
    page = browser_page
    page.goto(urljoin(server, "index.html"), wait_until="networkidle")
    table = page.locator("table", has_text="exercises")
    assert table.count() == 1 and table.is_visible()
    first = NOTEBOOKS[0].stem
    assert table.locator(f'a[href="notebooks/{first}.html"]').count() == 1
    assert page.outside == []


def test_browser_renders_a_chapter_figures_and_math_offline(site, server, browser_page):
    page = browser_page
    notebook = next(built(site, n) for n in NOTEBOOKS if display_math(built(site, n)) and png_outputs(built(site, n)))
    page.goto(urljoin(server, f"notebooks/{notebook.stem}.html"), wait_until="networkidle")
    assert page.locator("h1").first.inner_text().rstrip("#").strip() == title(notebook)
    # MathJax 3 replaces each formula with an <mjx-container>; wait for all of them.
    formulas = len(display_math(notebook))
    page.wait_for_function(f"document.querySelectorAll('mjx-container').length >= {formulas}", timeout=20_000)
    figures = page.evaluate("""() => [...document.querySelectorAll('article img')]
        .filter(i => i.src.endsWith('.png')).map(i => [i.complete, i.naturalWidth])""")
    assert len(figures) == len(png_outputs(notebook))
    assert all(complete and width > 0 for complete, width in figures), figures
    assert page.outside == []


def test_browser_search_finds_a_chapter(server, browser_page):
    page = browser_page
    page.goto(urljoin(server, "search.html?q=subnormal"), wait_until="networkidle")
    results = page.locator("ul.search li")
    results.first.wait_for(timeout=20_000)
    assert results.count() >= 1
    assert page.outside == []


# Every figure of a chapter page: [its own width (the width attribute a figure saved with twice
# the pixels carries, else its width in pixels), its width on the page, its proportions as saved,
# its proportions on the page, its height attribute, its height in pixels]
FIGURE_SIZES = """() => [...document.querySelectorAll('article .cell_output img')].map((i) => [
    Number(i.getAttribute('width')) || i.naturalWidth, i.clientWidth,
    i.naturalWidth / i.naturalHeight, i.clientWidth / i.clientHeight,
    Number(i.getAttribute('height')), i.naturalHeight])"""


def test_browser_the_text_column_holds_a_figure_of_the_course_at_its_own_size(site, server, browser_page):
    """At the window the figures are sized for, the text column is at least COLUMN_PX wide, so
    that the page shows a figure of nbhelpers.plots at its own size, its text as drawn: every
    figure of every chapter is drawn at its own width, in its own proportions. A figure saved with
    PIXEL_RATIO times the pixels (nbhelpers.plots.sharp_png) is drawn at the size in its
    metadata: its pixels divided by PIXEL_RATIO."""
    from nbhelpers.plots.style import COLUMN_PX, PIXEL_RATIO

    page = browser_page
    assert page.viewport_size["width"] == 1280
    for notebook in NOTEBOOKS:
        if not png_outputs(built(site, notebook)):
            continue
        page.goto(urljoin(server, f"notebooks/{notebook.stem}.html"), wait_until="networkidle")
        column = page.evaluate("""() => {
            const box = document.querySelector('article .cell_output img').parentElement;
            const style = getComputedStyle(box);
            return box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        }""")
        assert column >= COLUMN_PX, (notebook.stem, column)
        for own, shown, saved, drawn, height, pixels in page.evaluate(FIGURE_SIZES):
            assert shown == own <= COLUMN_PX, (notebook.stem, own, shown)
            assert drawn == pytest.approx(saved, rel=0.01), (notebook.stem, saved, drawn)
            if height:  # a sharp figure: its metadata's size, PIXEL_RATIO times fewer pixels
                assert pixels // PIXEL_RATIO == height, (notebook.stem, height, pixels)
    assert page.outside == []


def test_browser_page_logs_no_errors_and_figures_open_at_full_size(site, server, browser_page):
    """A chapter page logs no error in the console (the theme's colour mode has its default), a
    figure that the column shrinks (in a window narrower than the figures are made for) keeps its
    proportions and can be opened at its full width (the size a sharp figure's metadata gives it)
    and closed with Escape, and a printed line longer than the column wraps instead of scrolling
    sideways, unless it is a row of a printed table."""
    page = browser_page
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    wide = max(NOTEBOOKS, key=lambda n: max((len(p) for p in png_outputs(built(site, n))), default=0))
    viewport = page.viewport_size
    page.set_viewport_size({"width": 560, "height": viewport["height"]})  # a phone's width
    try:
        page.goto(urljoin(server, f"notebooks/{wide.stem}.html"), wait_until="networkidle")
        assert errors == []
        sizes = page.evaluate(FIGURE_SIZES)
        zoomable = page.evaluate("""() => [...document.querySelectorAll('article .cell_output img')]
            .map(i => i.classList.contains('zoomable'))""")
        assert sizes and [own > shown + 1 for own, shown, *_ in sizes] == zoomable, (sizes, zoomable)
        assert any(zoomable), "no figure is wider than the column here"
        # shrunk to the column, each keeps its proportions (a height attribute does not stay)
        for _, _, saved, drawn, *_ in sizes:
            assert drawn == pytest.approx(saved, rel=0.01), (saved, drawn)
        full = next(own for (own, *_), z in zip(sizes, zoomable) if z)
        page.locator("article .cell_output img.zoomable").first.click()
        overlay = page.locator(".figure-zoom img")
        overlay.wait_for(timeout=5_000)
        assert overlay.evaluate("i => i.clientWidth") == full
        page.keyboard.press("Escape")
        assert page.locator(".figure-zoom").count() == 0
    finally:
        page.set_viewport_size(viewport)
    # the page of the longest printed line of the course: what is not a table wraps, not scrolled
    longest = max(
        NOTEBOOKS,
        key=lambda n: max(
            (
                len(line)
                for c in load(built(site, n))["cells"]
                if c["cell_type"] == "code"
                for o in c.get("outputs", [])
                for line in "".join(o.get("text", "")).splitlines()
            ),
            default=0,
        ),
    )
    page.goto(urljoin(server, f"notebooks/{longest.stem}.html"), wait_until="networkidle")
    overflow = page.evaluate("""() => [...document.querySelectorAll('article div.cell_output pre')]
        .filter(p => !p.closest('div.printed-table') && p.scrollWidth > p.clientWidth + 1).length""")
    assert overflow == 0  # a printed table keeps its lines and scrolls (tests/test_site_layout.py)
    assert errors == [] and page.outside == []


def test_browser_copy_button_copies_a_code_cell(site, server, browser_page):
    """Every code block has a copy button (a cell's printed output has none); on the first code
    cell of chapter 01 that the page shows unfolded it puts exactly the cell's code (as the page
    shows it) on the clipboard."""
    page = browser_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.rstrip("/"))
    notebook = NOTEBOOKS[0]
    page.goto(urljoin(server, f"notebooks/{notebook.stem}.html"), wait_until="networkidle")
    blocks = page.locator("article div.cell_input div.highlight")
    assert blocks.count() > 0 and blocks.count() == page.locator("article div.cell_input button.copy-code").count()
    assert page.locator("article div.cell_output button.copy-code").count() == 0  # outputs: none
    shown = page.locator(f"article {UNFOLDED_CELL} div.cell_input div.highlight")
    first_code = next(
        "".join(c["source"])
        for c in load(built(site, notebook))["cells"]
        if c["cell_type"] == "code" and "hide-cell" not in c["metadata"].get("tags", [])
    )
    shown.first.hover()
    shown.first.locator("button.copy-code").click()
    page.wait_for_function(
        f"() => document.querySelector('article {UNFOLDED_CELL} button.copy-code').textContent === 'copied'"
    )
    assert page.evaluate("() => navigator.clipboard.readText()") == first_code.rstrip("\n")
    assert page.outside == []


DOWNLOADS = sorted((ROOT / "solutions").glob("ex*.ipynb")) + sorted((ROOT / "exercises").glob("ex*.ipynb"))

# The code cells of a chapter page whose text runs past their box (the box scrolls sideways):
# the longest line of each. The folded cells are unfolded first: a reader opens them.
WIDE_CELLS = """() => {
    document.querySelectorAll('article details').forEach(d => { d.open = true; });
    return [...document.querySelectorAll('article div.cell_input pre')]
    .filter(p => p.scrollWidth > p.clientWidth)
    .map(p => p.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), ''));
}"""
# The lines, of those given, that run past a code cell's box when put in one: an empty box
# like the page's first unfolded code cell's, next to it in the column.
WIDE_LINES = f"""(lines) => {{
    const cell = document.querySelector('article {UNFOLDED_CELL} div.cell_input pre');
    const probe = cell.cloneNode(false);
    cell.parentNode.appendChild(probe);
    const wide = lines.filter(line => {{
        probe.textContent = line;
        return probe.scrollWidth > probe.clientWidth;
    }});
    probe.remove();
    return wide;
}}"""


def chapter_of_download(notebook: Path) -> Path:
    """The chapter notebook an exercise or solution notebook goes with (exNN_* with NN_*)."""
    number = notebook.name[2:4]
    return next(n for n in NOTEBOOKS if n.name.startswith(f"{number}_"))


LOADED_FOR_FIT: dict[int, tuple[str, str]] = {}  # browser page -> (the chapter page it loaded, its URL then)


def by_chapter_page(notebooks: list[Path]) -> list[Path]:
    """The chapters' notebooks and the downloads, each chapter's downloads just before it: the
    three are checked on one load of the chapter's page (the chapter's own check unfolds its
    folded cells, so it comes last)."""
    order = {n: i for i, n in enumerate(NOTEBOOKS)}
    return sorted(notebooks, key=lambda n: (order[chapter_of(n)], n.parent.name == "notebooks", str(n)))


def chapter_of(notebook: Path) -> Path:
    return notebook if notebook.parent.name == "notebooks" else chapter_of_download(notebook)


@pytest.mark.parametrize(
    "notebook",
    by_chapter_page(NOTEBOOKS + DOWNLOADS),
    ids=lambda n: n.stem if n.parent.name == "notebooks" else f"{n.parent.name}-{n.stem}",
)
def test_browser_code_cells_fit_the_column(site, server, browser_page, notebook):
    """At a window 1280 pixels wide no line of code scrolls sideways: every code cell of a chapter
    page holds its longest line, the folded cell that checks the answers too (it is the narrower
    box; notebooks/ruff.toml formats the code to the width it holds). The exercise and solution
    notebooks are downloads, not pages: each line of their code is put in a code cell's box on
    their chapter's page and must fit it too. A chapter's page is loaded once for the three."""
    page = browser_page
    assert page.viewport_size["width"] == 1280
    url = urljoin(server, f"notebooks/{chapter_of(notebook).stem}.html")
    if LOADED_FOR_FIT.get(id(page)) != (url, page.url):  # not the page this test loaded last
        page.goto(url, wait_until="networkidle")
        page.evaluate("() => document.fonts.ready.then(() => true)")
        LOADED_FOR_FIT[id(page)] = (url, page.url)
    if notebook.parent.name == "notebooks":
        wide = page.evaluate(WIDE_CELLS)
    else:
        lines = [
            line
            for c in load(built(site, notebook))["cells"]
            if c["cell_type"] == "code"
            for line in "".join(c["source"]).splitlines()
        ]
        assert lines
        wide = page.evaluate(WIDE_LINES, lines)
    assert not wide, (
        f"wider than the code column ({len(wide)}, the longest of {max(map(len, wide))} characters): {wide[:5]}"
    )
    assert page.outside == []


COMPRESSIBLE = (".html", ".css", ".js", ".svg", ".json", ".txt", ".map")
PAGE_BUDGET_BYTES = 1_000_000  # a chapter page, cold, as a server that compresses text sends it


def test_browser_a_cold_chapter_page_weighs_under_1_mb(site, server, browser_page):
    """Every chapter page, loaded cold, fetches under 1 MB once its text files are gzipped (as
    GitHub Pages serves them); the theme's 1.5 MB icon script is not among them."""
    page = browser_page
    weights = {}
    for notebook in NOTEBOOKS:
        fetched = []

        def listener(request, fetched=fetched):
            fetched.append(request)

        # an empty page first, so that what the last chapter still fetched (a font MathJax asks for
        # late) is not counted as this one's
        page.goto("about:blank")
        page.on("requestfinished", listener)
        page.goto(urljoin(server, f"notebooks/{notebook.stem}.html"), wait_until="networkidle")
        page.wait_for_timeout(300)
        page.remove_listener("requestfinished", listener)
        total = 0
        for request in fetched:
            path = local_target(site, site / "index.html", urlsplit(request.url).path.lstrip("/"))
            assert path is not None and path.is_file(), request.url
            assert "fontawesome" not in path.name, request.url
            data = path.read_bytes()
            total += len(gzip.compress(data, 6)) if path.suffix in COMPRESSIBLE else len(data)
        weights[notebook.stem] = total
    heavy = {k: v for k, v in weights.items() if v > PAGE_BUDGET_BYTES}
    assert not heavy, heavy
    assert page.outside == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_kernel_sources_are_shown_as_highlighted_python(site, pages, notebook):
    """A cell that shows a kernel's source (``show_source``) puts it on the page as a highlighted
    Python block, not as printed text: every ``@triton.jit`` in an output is a highlighted
    decorator, and each such cell has its highlighted block."""
    raw = pages[notebook.stem].raw
    shown = [
        c
        for c in load(built(site, notebook))["cells"]
        if c["cell_type"] == "code" and "show_source(" in "".join(c["source"])
    ]
    blocks = re.findall(r'<div class="cell_output docutils container">\s*<div class="highlight-python', raw)
    assert len(blocks) >= len(shown)
    outputs = re.findall(r'<div class="cell_output docutils container">(.*?)</div>\s*</div>\s*</div>', raw, re.DOTALL)
    assert not any(
        "@triton.jit" in html.unescape(re.sub(r"<[^>]+>", "", o)) and "highlight-python" not in o for o in outputs
    )
    if shown:
        assert '<span class="nd">@triton</span>' in raw
