"""The website's layout on a phone (390 CSS px) and on a laptop (1280 px), every page of the build
in headless Chromium (the site built and served as tests/test_site.py does, with no network).

At 390 px no page is wider than the screen (a page that slides sideways cuts off the start of
its lines), and no text runs past the right edge of the screen unless it is inside a box that
scrolls on its own (a code cell, a wide table). At 1280 px every ``pre`` and every table of a
page, the folded ones unfolded, holds its text: nothing is hidden past a scroll bar.

Each sweep loads the pages in turn in one browser and reports every page that fails with what
it measured, so one run shows the whole picture.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urljoin

import pytest

# the fixtures of the site's build, its local server and the Chromium page that may reach
# nothing else (pytest finds them by these names here; the tests that take them say noqa: F811)
from test_site import NOTEBOOKS, browser_page, server, site  # noqa: F401

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 900}
LABEL_PX = 9  # the smallest text a reader can read on a phone, in CSS pixels


def site_pages(site: Path) -> list[str]:  # noqa: F811
    """Every HTML page of the build (the theme's own folders left out), as paths from the root."""
    return sorted(
        str(p.relative_to(site))
        for p in site.rglob("*.html")
        if not any(part.startswith("_") for part in p.relative_to(site).parts)
    )


# Wait for what changes the layout after the load event: fonts, and MathJax's typesetting.
SETTLED = """async () => {
    await document.fonts.ready;
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
    return true;
}"""

# At a phone's width: how much wider than the window the document is, and the elements whose
# right edge lies past the window though no box that scrolls on its own holds them (their text
# cannot be reached but by sliding the whole page).
PHONE_MEASURE = """() => {
    const width = window.innerWidth;
    const scrolls = (el) => {
        const x = getComputedStyle(el).overflowX;
        return x === 'auto' || x === 'scroll';
    };
    const held = (el) => {
        for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
            if (scrolls(p)) return p.getBoundingClientRect().right <= width + 1;
        }
        return false;
    };
    const past = [];
    for (const el of document.querySelectorAll('body *')) {
        const box = el.getBoundingClientRect();
        if (box.width === 0 || box.right <= width + 1 || held(el)) continue;
        if (getComputedStyle(el).visibility === 'hidden') continue;
        const name = el.tagName.toLowerCase() + (el.className && typeof el.className === 'string'
            ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
        past.push(`${name} "${el.textContent.trim().slice(0, 40)}" +${Math.round(box.right - width)} px`);
    }
    // the page's longest inline code name outside tables and code blocks: on how many lines it
    // runs and how far its characters reach past its paragraph's right edge
    let code = null;
    for (const c of document.querySelectorAll('article code.literal')) {
        if (c.closest('pre, table') || (code && c.textContent.length <= code.textContent.length)) continue;
        code = c;
    }
    let longest = null;
    if (code) {
        const column = code.closest('p, li, dd, div').getBoundingClientRect().right;
        const text = document.createRange();  // the characters, not the code's padding
        text.selectNodeContents(code);
        const right = Math.max(...[...text.getClientRects()].map((r) => r.right));
        longest = [code.textContent, code.getClientRects().length, right - column];
    }
    return {
        longest,
        scrollWidth: document.documentElement.scrollWidth,
        innerWidth: width,
        past: past.slice(0, 4),
        pastCount: past.length,
    };
}"""

# At a laptop's width, the folded parts unfolded: every pre and every table that does not hold
# its content (a pre scrolls; a table is wider than the box it sits in).
LAPTOP_MEASURE = """() => {
    document.querySelectorAll('details').forEach((d) => { d.open = true; });
    const main = document.querySelector('main') || document.body;
    const wide = [];
    for (const pre of main.querySelectorAll('pre')) {
        if (pre.getBoundingClientRect().width === 0) continue;
        if (pre.closest('div.printed-table')) continue;  // PRINTED_TABLES's subject
        if (pre.scrollWidth > pre.clientWidth + 1) {
            const line = pre.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '');
            wide.push(`pre +${pre.scrollWidth - pre.clientWidth} px: "${line.trim().slice(0, 60)}"`);
        }
    }
    for (const table of main.querySelectorAll('table')) {
        const box = table.parentElement;
        const over = Math.max(table.getBoundingClientRect().width - box.clientWidth, box.scrollWidth - box.clientWidth);
        if (table.getBoundingClientRect().width > 0 && over > 1) {
            const head = table.querySelector('tr');
            const words = (head ? head.textContent : '').trim().replace(/\\s+/g, ' ');
            wide.push(`table +${Math.round(over)} px: "${words.slice(0, 60)}"`);
        }
    }
    return wide;
}"""


def load(page, server: str, path: str) -> None:  # noqa: F811
    page.goto(urljoin(server, path), wait_until="load")
    page.evaluate(SETTLED)


@pytest.fixture
def phone(browser_page):  # noqa: F811
    """The browser page at a phone's width, set back to 1280 px afterwards."""
    viewport = browser_page.viewport_size
    browser_page.set_viewport_size(PHONE)
    yield browser_page
    browser_page.set_viewport_size(viewport)


def test_there_are_pages_to_check(site):  # noqa: F811
    pages = site_pages(site)
    assert "index.html" in pages and any(p.startswith("notebooks/") for p in pages), pages


def test_browser_no_page_is_wider_than_a_phone(site, server, phone):  # noqa: F811
    """At 390 px the document of every page is no wider than the window, and nothing reaches
    past its right edge but inside a box that scrolls on its own: long inline code names wrap
    (the longest of the course runs over several lines, inside its paragraph), the home page's
    chapter table scrolls in its box."""
    failing, longest = [], {}
    for path in site_pages(site):
        load(phone, server, path)
        m = phone.evaluate(PHONE_MEASURE)
        if m["scrollWidth"] > m["innerWidth"] or m["pastCount"]:
            failing.append(
                f"{path}: document {m['scrollWidth']} px in a {m['innerWidth']} px window; "
                f"{m['pastCount']} elements past the edge, e.g. {m['past']}"
            )
        if m["longest"]:
            longest[path] = m["longest"]
    assert not failing, "\n".join(failing)
    path, (text, lines, past) = max(longest.items(), key=lambda kv: len(kv[1][0]))
    assert lines > 1 and past <= 1, f"{path}: `{text}` on {lines} line(s), {past:.0f} px past its paragraph"
    assert phone.outside == []


def test_browser_the_home_page_table_holds_in_its_box_on_a_phone(server, phone):  # noqa: F811
    """The chapter table of the home page fits the window or scrolls inside its own box."""
    load(phone, server, "index.html")
    box = phone.evaluate("""() => {
        const table = [...document.querySelectorAll('article table')]
            .find((t) => t.textContent.includes('exercises'));
        let p = table.parentElement;
        while (p && !['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) p = p.parentElement;
        const holder = p || table;
        return [table.getBoundingClientRect().width, holder.getBoundingClientRect().right, window.innerWidth];
    }""")
    table_width, right, width = box
    assert right <= width + 1, f"the chapter table ({table_width:.0f} px) reaches {right:.0f} px in {width} px"


def test_browser_the_explorer_grid_labels_are_readable_on_a_phone(server, phone):  # noqa: F811
    """The binade labels under the explorer's grid are at least LABEL_PX CSS pixels tall at 390 px."""
    load(phone, server, "explorer.html")
    phone.wait_for_selector("#float-explorer[data-ready=true]", timeout=20_000)
    phone.select_option("#fx-preset", "e4m3fn")  # a format of 8 bits: its grid is drawn
    phone.wait_for_selector("#fx-part-grid .fx-axis-label", timeout=5_000)
    sizes = phone.evaluate("""() => [...document.querySelectorAll('#fx-part-grid .fx-axis-label')]
        .map((t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)""")
    assert sizes and min(sizes) >= LABEL_PX, f"grid labels {min(sizes):.1f} px tall at 390 px"
    doc = phone.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert doc[0] <= doc[1], doc


# The search boxes in view: [the right edge of the magnifying glass (None without one), the left
# edge of the query's text (the input's left edge, border and padding), the query typed in]
SEARCH_BOXES = """() => [...document.querySelectorAll('form.bd-search')]
    .filter((f) => f.getBoundingClientRect().width > 0).map((f) => {
        const icon = f.querySelector('i, svg, .fa-magnifying-glass');
        const input = f.querySelector('input');
        const style = getComputedStyle(input);
        const text = input.getBoundingClientRect().left + input.clientLeft + parseFloat(style.paddingLeft);
        return [icon ? icon.getBoundingClientRect().right : null, text, input.value];
    })"""


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390px", "1280px"])
def test_browser_the_search_icon_leaves_the_query_readable(server, browser_page, viewport):  # noqa: F811
    """The magnifying glass of a search box does not cover the first letter typed into it: on the
    search page, and in the search box that a chapter page opens over itself from its search
    button (the sidebar's at 1280 px, the header's at 390 px), a query typed in."""
    page = browser_page
    before = page.viewport_size
    page.set_viewport_size(viewport)
    try:
        load(page, server, "search.html")
        page.locator("form.bd-search input:visible").first.fill("subnormal")
        boxes = page.evaluate(SEARCH_BOXES)
        load(page, server, f"notebooks/{NOTEBOOKS[0].stem}.html")
        page.locator("button.search-button__button:visible").first.click()
        query = page.locator("form.bd-search input:visible").first
        query.wait_for(timeout=5_000)
        query.fill("subnormal")
        opened = page.evaluate(SEARCH_BOXES)
    finally:
        page.set_viewport_size(before)
    assert len(boxes) == 1 and len(opened) == 1, (boxes, opened)
    for icon_right, text_left, typed in boxes + opened:
        assert typed == "subnormal"
        assert icon_right is not None and icon_right <= text_left, (
            f"the search icon ends at {icon_right:.1f} px, the query starts at {text_left:.1f} px"
        )
    assert page.outside == []


def test_browser_every_pre_and_table_fits_at_1280(site, server, browser_page):  # noqa: F811
    """At 1280 px, every ``pre`` (code cells, fenced blocks, printed output) and every table of
    every page holds its content, the folded parts unfolded: nothing past a scroll bar."""
    page = browser_page
    assert page.viewport_size == LAPTOP
    failing = []
    for path in site_pages(site):
        load(page, server, path)
        wide = page.evaluate(LAPTOP_MEASURE)
        if wide:
            failing.append(f"{path}: {len(wide)} wider than their box: {wide[:4]}")
    assert not failing, "\n".join(failing)
    assert page.outside == []


# Every printed table (site/conf.py marks a cell output that prints one): its text lines, the lines
# the browser drew (its height over its line height), whether it scrolls in its own box, and
# whether it is wider than that box.
PRINTED_TABLES = """() => {
    document.querySelectorAll('details').forEach((d) => { d.open = true; });
    const out = [];
    for (const pre of document.querySelectorAll('div.cell_output div.printed-table pre')) {
        const box = pre.getBoundingClientRect();
        if (box.width === 0) continue;
        const style = getComputedStyle(pre);
        const text = pre.textContent.replace(/\\n$/, '');
        const lines = text.split('\\n').length;
        const pad = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
        const drawn = Math.round((pre.clientHeight - pad) / parseFloat(style.lineHeight));
        out.push({head: text.split('\\n')[0].trim().slice(0, 50), lines, drawn,
                  scrolls: style.overflowX === 'auto' || style.overflowX === 'scroll',
                  wider: pre.scrollWidth > pre.clientWidth + 1,
                  fade: pre.dataset.fade || ''});
    }
    return out;
}"""


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390px", "1280px"])
def test_browser_printed_tables_keep_their_lines_whole(site, server, browser_page, viewport):  # noqa: F811
    """A table a cell prints keeps each of its lines on one line, so that its columns stay in line
    (printed prose wraps at the column instead), and where it is wider than the column it scrolls
    inside its own box, its right side faded to show there is more (course.js): at 390 px and at
    1280 px, on every chapter."""
    page = browser_page
    page.set_viewport_size(viewport)
    try:
        failing, seen, wider = [], 0, 0
        for path in site_pages(site):
            if not path.startswith("notebooks/"):
                continue
            load(page, server, path)
            for t in page.evaluate(PRINTED_TABLES):
                seen += 1
                wider += t["wider"]
                if t["drawn"] != t["lines"] or not t["scrolls"] or (t["fade"] == "right") != t["wider"]:
                    failing.append(f"{path}: {t}")
        assert seen > 100, f"only {seen} printed tables found"
        assert not failing, "\n".join(failing[:8])
        assert wider, "no printed table is wider than its box: the scrolling above went untested"
    finally:
        page.set_viewport_size(LAPTOP)


# The exercise index's tables at a phone's width: for each function name, each of its pieces
# between the breaks the build allows (a <wbr> after each underscore) and on how many lines it
# runs; and the width of the "#" column.
NAME_PIECES = """() => {
    const pieces = [];
    for (const code of document.querySelectorAll('table.exercise-table code')) {
        const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            if (!node.textContent.trim()) continue;
            const range = document.createRange();
            range.selectNodeContents(node);
            const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
            pieces.push([node.textContent, tops.size]);
        }
    }
    const first = [...document.querySelectorAll('table.exercise-table tr > :first-child')];
    return {pieces, number: Math.max(0, ...first.map((c) => c.getBoundingClientRect().width))};
}"""


def test_browser_the_exercise_index_breaks_names_only_after_underscores_on_a_phone(server, phone):  # noqa: F811
    """At 390 px a function's name in the exercise index (decode_step_time) wraps after an
    underscore, never inside a word, and the "#" column gives its width to the names."""
    load(phone, server, "exercises.html")
    m = phone.evaluate(NAME_PIECES)
    assert len(m["pieces"]) > 10, m
    broken = [text for text, lines in m["pieces"] if lines > 1]
    assert not broken, f"names broken inside a word at 390 px: {broken}"
    assert m["number"] == 0, f'the "#" column is {m["number"]:.0f} px wide at 390 px'


def test_browser_the_chapter_files_box_keeps_a_small_indent_on_a_phone(server, phone):  # noqa: F811
    """At 390 px the list in a chapter's "Files for this chapter" box is indented by at most
    20 px (the theme's 40 took a sixth of the width from the links and the buttons)."""
    load(phone, server, f"notebooks/{NOTEBOOKS[0].stem}.html")
    indent = phone.evaluate("parseFloat(getComputedStyle(document.querySelector('div.chapter-files ul')).paddingLeft)")
    assert indent <= 20, f"the files box's list is indented {indent:.0f} px at 390 px"
