"""The glossary page of the website (site/glossary.md): built, in the sidebar of every page, one
section per entry under its anchor; every chapter's links to it land on an entry that exists; and
every entry's link to the chapter section that teaches it lands on that section.

The site is built once per session by test_site.py's ``site`` fixture, imported here."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import test_site
from test_site import NOTEBOOKS, page_of

from nbhelpers.tooling import glossary_links

site = test_site.site  # the fixture that builds the site (once per session)

GLOSSARY_HREF = re.compile(r'href="(\.\./glossary\.html#[^"]*)"')


def ids(page: Path) -> set[str]:
    return set(re.findall(r'\sid="([^"]+)"', page.read_text(encoding="utf-8")))


def test_the_glossary_is_a_page_of_the_site_and_in_the_sidebar(site):
    page = site / "glossary.html"
    assert page.is_file()
    assert test_site.Page(page.read_text(encoding="utf-8")).h1[0] == "Glossary"
    for path in [site / "index.html"] + [page_of(site, n) for n in NOTEBOOKS]:
        raw = path.read_text(encoding="utf-8")
        sidebar = raw.split('id="pst-primary-sidebar"', 1)[-1].split("</nav>", 1)[0]
        prefix = "../" if path.parent.name == "notebooks" else ""
        assert f'href="{prefix}glossary.html"' in sidebar, f"{path.name}: no link to the glossary in the sidebar"


def test_every_entry_is_a_section_under_its_anchor(site):
    raw = (site / "glossary.html").read_text(encoding="utf-8")
    sections = set(re.findall(r'<section id="([^"]+)"', raw))
    missing = [a for a in glossary_links.glossary_anchors() if a not in sections]
    assert not missing, missing


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda n: n.stem)
def test_a_chapters_glossary_links_land_on_entries(site, notebook):
    """Each chapter page links the glossary (../site/glossary.md#anchor in the notebook becomes
    ../glossary.html#anchor), and every such link lands on an id of the glossary page."""
    page = page_of(site, notebook)
    hrefs = [html.unescape(h) for h in GLOSSARY_HREF.findall(page.read_text(encoding="utf-8"))]
    assert hrefs, f"{notebook.stem}: no link to the glossary"
    targets = ids(site / "glossary.html")
    broken = [h for h in hrefs if h.split("#", 1)[1] not in targets]
    assert not broken, broken
    generated = [h for h in hrefs if re.fullmatch(r"id\d+", h.split("#", 1)[1])]
    assert not generated, f"links to a generated id, not to the entry's own anchor: {generated}"
    assert "../site/glossary.md" not in page.read_text(encoding="utf-8")  # none left unresolved


def test_every_entry_links_the_chapter_section_that_teaches_it(site):
    raw = (site / "glossary.html").read_text(encoding="utf-8")
    found = re.findall(r'href="(notebooks/[^"#]+\.html)#([^"]+)"', raw)
    assert len(found) >= len(glossary_links.glossary_anchors())
    broken = [f"{p}#{a}" for p, a in found if a not in ids(site / p)]
    assert not broken, broken


def test_the_rounding_entry_says_where_a_tie_has_no_even_neighbour(site):
    """Round to nearest even sends a tie to the neighbour whose last mantissa bit is 0; e8m0fnu has
    no mantissa bit, and the entry gives its rule with an example that round_to agrees with."""
    from nbhelpers.rounding import round_to

    raw = (site / "glossary.html").read_text(encoding="utf-8")
    entry = raw.split('<section id="round-to-nearest-even">', 1)[1].split("</section>", 1)[0]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", entry)).split())
    assert "e8m0fnu has no mantissa bit" in text, text
    example = re.search(r"\((\d+) rounds to (\d+)\)", text)
    assert example, text
    x, shown = (float(g) for g in example.groups())
    assert float(round_to(x, "e8m0fnu", "nearest_even")) == shown
    assert float(round_to(x, "e8m0fnu", "nearest_away")) == shown
