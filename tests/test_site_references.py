"""The references page of the website and the links to it: every work the chapters cite has an
entry with an anchor (site/references.md), every citation in a chapter's prose links to its entry
(site/citations.py), and no citation-looking text is left without a link.

The site is built by test_site.py's ``site`` fixture, imported here (pytest builds it once more
for this module when both modules run); the build runs with -W, so a warning on the references page
fails it.
"""

from __future__ import annotations

import html
import importlib.util
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import test_site
from test_site import NOTEBOOKS, ROOT, Page, page_of, unlinked_prose

site = test_site.site  # the fixture that builds the site (once per module that uses it)

REFERENCES_MD = ROOT / "site" / "references.md"


def load_citations():
    """site/citations.py, the table of works and their patterns (site/ is not a package)."""
    spec = importlib.util.spec_from_file_location("citations", ROOT / "site" / "citations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("citations", module)
    spec.loader.exec_module(module)
    return module


citations = load_citations()
ANCHORS = [work.anchor for work in citations.WORKS]

# What a citation looks like in prose, whichever work it names: each match must be inside a link.
CITATION_LIKE = {
    # "Micikevicius et al.", "Fasi et al.'s suite", "Xiao et al., 2023"
    "et al.": re.compile(r"\b[A-Z][\w'-]+ et al\."),
    # "Khattak & Mikaitis 2025", "Fasi, Higham, Mikaitis and Pranesh (2021", "Hwu, Kirk and El Hajj, 2022"
    "names and a year": re.compile(
        r"\b[A-Z][a-z][\w'-]*(?:, [A-Z][a-z][\w'-]*)*,? (?:&|and) [A-Z][a-z][\w'-]*(?: [A-Z][a-z][\w'-]*)?"
        r"(?:'s)?,? \(?(?:19|20)\d\d\b"
    ),
    # "Higham 2002", "Boehm (2022)": a name (not an acronym like ICLR or a format) and a year
    "a name and a year": re.compile(r"\b[A-Z][a-z]+,? \((?:19|20)\d\d\b|\b[A-Z][a-z]+,? (?:19|20)\d\d\b"),
    # "Higham ch. 4"
    "a name and a chapter": re.compile(r"\b[A-Z][a-z]+,? ch\. \d"),
    # standards, specifications, documentation, white papers, guides, reports, READMEs
    "a document": re.compile(
        r"\b(?:IEEE 754|[Ss]pecification|[Ww]hitepaper|technical report|Programming Guide|Tuning Guide|"
        r"user guide|PTX ISA|README|[Dd]ocumentation|[Tt]utorials?)\b"
    ),
}
# Text that looks like a citation and is not one, with the reason.
NOT_CITATIONS = {
    "in no specification": "says that a rule is in no specification",
    "Revisiting BFloat16 Training (2020)": "the title and year after its linked authors (Zamirai et al.)",
}


def article(raw: str) -> str:
    return raw.split('<article class="bd-article"', 1)[-1].split("</article>", 1)[0]


def prose_with_code(raw: str) -> str:
    """A page's article as text, code and math included (what the patterns of citations.py are
    matched against), whitespace collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", article(raw), flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", body)).split())


def citation_links(raw: str, titles: bool = False) -> list[tuple[str, ...]]:
    """(href, text) of each citation link on a page; (href, text, title) with `titles`."""
    found = [
        (href, " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split()), html.unescape(title))
        for href, title, text in re.findall(
            r'<a class="[^"]*\bcitation-link\b[^"]*" href="([^"]+)"(?: title="([^"]*)")?>(.*?)</a>',
            raw,
            flags=re.DOTALL,
        )
    ]
    return found if titles else [link[:2] for link in found]


@pytest.fixture(scope="session")
def references(site) -> Path:
    return site / "references.html"


@pytest.fixture(scope="session")
def entries(references) -> dict[str, str]:
    """Anchor -> text of each entry of the references page (a paragraph with an id)."""
    raw = article(references.read_text(encoding="utf-8"))
    found = {}
    for anchor, body in re.findall(r'<p id="([^"]+)">(.*?)</p>', raw, flags=re.DOTALL):
        found[anchor] = " ".join(html.unescape(re.sub(r"<[^>]+>", "", body)).split())
    return found


@pytest.fixture(scope="session")
def chapter_pages(site) -> dict[str, str]:
    return {n.stem: page_of(site, n).read_text(encoding="utf-8") for n in NOTEBOOKS}


# --- the table ----------------------------------------------------------------------------


def test_the_table_has_one_entry_per_anchor_and_patterns_that_compile():
    assert len(set(ANCHORS)) == len(ANCHORS)
    for work in citations.WORKS:
        assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", work.anchor), work.anchor
        assert work.patterns, work.anchor
        for pattern in work.patterns:
            assert re.compile(pattern).pattern


def test_find_citations_reads_a_line_break_as_a_space_and_keeps_offsets():
    text = "as (Micikevicius et al.\n2022) and Fasi, Higham, Mikaitis &\nPranesh 2021 showed"
    found = citations.find_citations(text)
    assert [(c.anchor, c.text) for c in found] == [
        ("micikevicius-2022", "Micikevicius et al.\n2022"),
        ("fasi-2021", "Fasi, Higham, Mikaitis &\nPranesh 2021"),
    ]
    assert all(text[c.start : c.end] == c.text for c in found)
    # the 2018 paper is the one cited without year or title
    assert [c.anchor for c in citations.find_citations("Micikevicius et al. measured")] == ["micikevicius-2018"]


def test_the_detector_finds_citations_and_passes_over_venues_and_formats():
    """What the check below counts as a citation: author names with a year or a chapter, "et
    al.", and named documents; not a venue with its year, a format, or a chapter of this course."""
    for text in (
        "Micikevicius et al. measured",
        "Khattak & Mikaitis 2025",
        "Fasi, Higham, Mikaitis and Pranesh (2021, Numerical",
        "Hwu, Kirk and El Hajj, 2022",
        "Boehm (2022)",
        "Higham ch. 4",
        "the PTX ISA",
        "NVIDIA's H200 specification",
        "the DeepSeek-V3 technical report",
        "DeepGEMM's README",
    ):
        assert any(p.search(text) for p in CITATION_LIKE.values()), text
    for text in ("ICLR 2018", "PPoPP 2023", "IEEE-style formats", "bf16 in 2020 terms", "chapter 03", "the K guide"):
        assert not any(p.search(text) for p in CITATION_LIKE.values()), text


# --- the references page ------------------------------------------------------------------


def test_references_page_exists_and_is_in_the_sidebar(site, references):
    assert references.is_file()
    page = Page(references.read_text(encoding="utf-8"))
    assert page.h1[0] == "References"
    for path in [site / "index.html"] + [page_of(site, n) for n in NOTEBOOKS]:
        raw = path.read_text(encoding="utf-8")
        sidebar = raw.split('id="pst-primary-sidebar"', 1)[-1].split("</nav>", 1)[0]
        prefix = "../" if path.parent.name == "notebooks" else ""
        assert f'href="{prefix}references.html"' in sidebar, f"{path.name}: no link to the references in the sidebar"
    assert ">Reference<" in (site / "index.html").read_text(encoding="utf-8")  # the sidebar's caption


def test_every_entry_has_an_anchor_and_every_anchor_an_entry(entries):
    source = REFERENCES_MD.read_text(encoding="utf-8")
    labels = re.findall(r"^\((.+)\)=$", source, flags=re.MULTILINE)
    assert labels == list(entries), "every entry of references.md is a paragraph under its label"
    assert ANCHORS == labels, "citations.WORKS lists the works in the order of the references page"
    assert sorted(entries) == sorted(ANCHORS), (
        f"entries without a pattern: {sorted(set(entries) - set(ANCHORS))}; "
        f"patterns without an entry: {sorted(set(ANCHORS) - set(entries))}"
    )


def test_entries_are_sorted_within_each_group(references):
    raw = article(references.read_text(encoding="utf-8"))
    groups = re.split(r"<h2\b", raw)[1:]
    assert len(groups) == 2, "papers and books, then specifications, documentation and software"
    for group in groups:
        texts = [
            " ".join(html.unescape(re.sub(r"<[^>]+>", "", body)).split())
            for body in re.findall(r'<p id="[^"]+">(.*?)</p>', group, flags=re.DOTALL)
        ]
        # papers by first author (then year), the rest by name
        keys = [" ".join(re.sub(r"[^a-z0-9 ]", "", t.lower()).split()[:2]) for t in texts]
        assert keys == sorted(keys), [t[:30] for t in texts]


def test_every_entry_links_to_its_work(references, entries):
    raw = article(references.read_text(encoding="utf-8"))
    for anchor, body in re.findall(r'<p id="([^"]+)">(.*?)</p>', raw, flags=re.DOTALL):
        links = re.findall(r'href="([^"]+)"', body)
        assert all(urlsplit(link).scheme == "https" for link in links), (anchor, links)
        # a book, and white papers without a stable address
        if anchor not in ("hwu-2022", "h100-whitepaper", "a100-whitepaper"):
            assert links, f"{anchor}: no link to the work"
        assert len(entries[anchor]) > 40, f"{anchor}: an entry names its authors or publisher, title and year"


# --- the links from the chapters ----------------------------------------------------------


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_every_citation_link_points_at_an_entry(chapter_pages, entries, notebook):
    for href, text in citation_links(chapter_pages[notebook.stem]):
        parts = urlsplit(href)
        assert parts.path == "../references.html", (text, href)
        assert parts.fragment in entries, f"{notebook.stem}: {text!r} links to a missing entry {href}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_every_citation_link_shows_its_entry_as_its_title(chapter_pages, entries, notebook):
    """Hovering over a citation shows the work (authors, year, title) before the reader follows it."""
    for href, text, title in citation_links(chapter_pages[notebook.stem], titles=True):
        entry = entries[urlsplit(href).fragment]
        assert title and entry.startswith(title[:25]), (text, title, entry)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_every_citation_in_the_prose_is_a_link(chapter_pages, notebook):
    prose = " ".join(unlinked_prose(chapter_pages[notebook.stem]).split())
    for phrase in NOT_CITATIONS:
        prose = prose.replace(phrase, " ")
    left = [(kind, m.group(0)) for kind, pattern in CITATION_LIKE.items() for m in pattern.finditer(prose)]
    assert not left, f"{notebook.stem}: citations without a link to the references: {left}"


def test_every_pattern_of_the_table_finds_a_citation_in_some_chapter(chapter_pages):
    """No dead entries: each pattern of each work matches in some chapter's text (and so each
    work of the references page is cited somewhere)."""
    texts = [prose_with_code(raw) for raw in chapter_pages.values()]
    dead = [
        (work.anchor, pattern)
        for work in citations.WORKS
        for pattern in work.patterns
        if not any(re.search(pattern, text) for text in texts)
    ]
    assert not dead, f"patterns that match in no chapter: {dead}"


def test_every_work_is_linked_from_some_chapter(chapter_pages):
    linked = {urlsplit(href).fragment for raw in chapter_pages.values() for href, _ in citation_links(raw)}
    assert sorted(set(ANCHORS) - linked) == []


def test_the_references_page_and_the_home_page_link_no_citation_to_themselves(site, references):
    assert citation_links(references.read_text(encoding="utf-8")) == []
