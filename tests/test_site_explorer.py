"""The float format explorer page of the website (site/explorer.md, site/_static/explorer.js)
against the course's package: the page's numbers are those of nbhelpers.formats (decode,
finite_values, the FloatFormat limits) and nbhelpers.rounding.round_to, compared value by value
in headless Chromium (the site built and served as tests/test_site.py does, with no network).

The script exposes ``window.explorer`` (decode, round, keyNumbers, finiteValues), so most checks
run many values in one call; a few drive the page as a reader does (pick a preset, click a bit,
type a value).
"""

from __future__ import annotations

import html
import json
import math
import re
import runpy
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace
from urllib.parse import parse_qsl, urljoin

import numpy as np
import pytest

# the fixtures of the site's build, its local server and the Chromium page that may reach
# nothing else (pytest finds them by these names here; the tests that take them say noqa: F811)
from test_site import ROOT, Page, browser_page, local_target, server, site  # noqa: F401

from nbhelpers.formats import FORMATS, FloatFormat, Specials, decode, fields, finite_values, ulp
from nbhelpers.rounding import encode, round_to

MODES = ("nearest_even", "nearest_away", "toward_zero")
SMALL = [f for f in FORMATS.values() if f.bits <= 8]  # every code, every grid midpoint
WIDE = [f for f in FORMATS.values() if f.bits > 16]  # tf32, fp32: samples
SEED = 20260101

# Many values go in and out of the page as JSON text: Playwright's own serialization of long
# arrays takes seconds. Numbers travel as their shortest text (explorer.show: "-0", "inf",
# "NaN" included), which reads back as the same float64 on both sides.
JS_DECODE = """([spec, codes]) => JSON.stringify(JSON.parse(codes).map((c) => {
    const d = explorer.decode(spec, c);
    return [explorer.show(d.value), d.cls];
}))"""
JS_DECODE_EXACT = """([spec, codes]) => JSON.stringify(JSON.parse(codes).map((c) =>
    explorer.exactDecimal(explorer.decode(spec, c).value)))"""
JS_ROUND = """([spec, xs, mode, saturate]) => JSON.stringify(JSON.parse(xs).map((x) => {
    const r = explorer.round(spec, x, mode, saturate);
    return [explorer.show(r.x), explorer.show(r.value), r.code, explorer.show(r.absError), explorer.show(r.relError)];
}))"""


def js_decode(page, spec, codes) -> tuple[np.ndarray, list[str]]:
    """The page's value and class of each code."""
    shown = json.loads(page.evaluate(JS_DECODE, [spec, json.dumps([int(c) for c in codes])]))
    return np.array([float(v) for v, _ in shown]), [c for _, c in shown]


def js_exact(page, spec, codes) -> list[str]:
    return json.loads(page.evaluate(JS_DECODE_EXACT, [spec, json.dumps([int(c) for c in codes])]))


def js_round(page, spec, xs: np.ndarray, mode: str, saturate) -> dict[str, np.ndarray]:
    """The page's rounding of each x (sent as Python's repr, the text a reader would type):
    x as the page read it, the result, its code (-1 for none) and the errors."""
    typed = json.dumps([repr(float(x)) for x in xs])
    shown = json.loads(page.evaluate(JS_ROUND, [spec, typed, mode, bool(saturate)]))
    columns = list(zip(*shown))
    out = {key: np.array([float(v) for v in col]) for key, col in zip(("x", "value"), columns[:2])}
    out["code"] = np.array([-1 if c is None else c for c in columns[2]], dtype=np.int64)
    out["abs_error"] = np.array([float(v) for v in columns[3]])
    out["rel_error"] = np.array([float(v) for v in columns[4]])
    return out


# --- the package's side -------------------------------------------------------------------


def spec_of(f: FloatFormat, bias: int | None = None):
    """How the page names a format: a preset's name, or its fields."""
    if f.name in FORMATS and FORMATS[f.name] == f and bias is None:
        return f.name
    spec = {"expBits": f.exp_bits, "manBits": f.man_bits, "specials": f.specials.value}
    if bias is not None:
        spec["bias"] = bias
    return spec


def classes(codes: np.ndarray, f: FloatFormat) -> list[str]:
    """zero, subnormal, normal, inf or NaN for each code, from decode and the fields."""
    v = decode(codes, f)
    exponent = fields(codes, f).exponent
    out = np.where(exponent == 0, "subnormal", "normal").astype(object)
    if f.specials is Specials.POWER_OF_TWO:
        out[:] = "normal"
    out[v == 0] = "zero"
    out[np.isinf(v)] = "inf"
    out[np.isnan(v)] = "NaN"
    return list(out)


def finite_count(f: FloatFormat) -> int:
    """How many distinct finite values (+0 and -0 once): the package's decode of every code, for
    formats of up to 19 bits (tf32); for 32 bits, counted from the layout (the page's formula,
    which the narrower formats check)."""
    if f.bits <= 19:
        v = decode(np.arange(2**f.bits, dtype=np.int64), f)
        return len(np.unique(v[np.isfinite(v)] + 0.0))
    not_finite = {Specials.IEEE: 2 * 2**f.man_bits, Specials.FN: 2, Specials.FINITE: 0}[f.specials]
    return 2**f.bits - not_finite - 1  # -1: +0 and -0


def expected_key_numbers(f: FloatFormat) -> dict:
    return {
        "bits": f.bits,
        "bias": f.bias,
        "emin": f.emin,
        "emax": f.emax,
        "max": f.max,
        "smallestNormal": f.smallest_normal,
        "smallestSubnormal": f.smallest_subnormal,
        "eps": f.eps,
        "unitRoundoff": f.unit_roundoff,
        "finiteValues": finite_count(f),
    }


def same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: equal as float64 values, the sign of zero included; NaN equals NaN."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))


def same(a, b) -> bool:
    """Equal as float64 values, the sign of zero included; NaN equals NaN."""
    if a is None or b is None:
        return a is b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def codes_to_check(f: FloatFormat, rng: np.random.Generator) -> np.ndarray:
    """Every code of a format of at most 16 bits; for wider ones the edges (zeros, the
    subnormal and normal boundaries, max, inf, NaN) and 5,000 random codes."""
    if f.bits <= 16:
        return np.arange(2**f.bits, dtype=np.int64)
    m, top = f.man_bits, (2**f.exp_bits - 1) << f.man_bits
    edges = [0, 1, 2**m - 1, 2**m, 2**m + 1, top - 1, top, top + 1, top + 2**m - 1]
    edges += [c | (1 << (f.bits - 1)) for c in edges]
    return np.concatenate([np.array(edges), rng.integers(0, 2**f.bits, 5_000)]).astype(np.int64)


def values_to_round(f: FloatFormat, rng: np.random.Generator) -> np.ndarray:
    """Values that test a rounding: every grid value and every midpoint (a tie) of a format of at
    most 8 bits, with the float64 just above and below each tie; a sample of those for wider
    formats; the tie above max (max + half the top gap) and its neighbours; the subnormal
    region; zero; inf and NaN; random values across the range; and all of them negated."""
    if f.bits <= 16:
        grid = finite_values(f, nonnegative=True)
        if f.bits > 8:
            grid = np.sort(rng.choice(grid, 400, replace=False))
            grid = np.unique(np.concatenate([grid, finite_values(f, nonnegative=True)[:20]]))
        lower, upper = grid[:-1], grid[1:]
        if f.bits > 8:  # the sampled values' own upper neighbours
            upper = grid[:-1] + ulp(grid[:-1], f)
    else:  # random positive finite codes below max and their upper neighbours
        codes = rng.integers(0, int(encode(f.max, f)), 200)
        lower = decode(codes, f)
        upper = decode(codes + 1, f)
        grid = lower
    ties = (lower + upper) / 2  # exact: both have at most 24 significant bits
    big = f.max + ulp(f.max, f) / 2
    s, sn = f.smallest_positive, f.smallest_normal
    edges = [0.0, s / 4, s / 2, 0.75 * s, s, 1.5 * s, 2.5 * s, sn, sn * (1 - 2**-30), 1.0, 1 + f.eps / 2]
    edges += [1 - f.eps / 4, f.max, big, np.nextafter(big, 0), np.nextafter(big, np.inf), f.max + ulp(f.max, f)]
    edges += [2 * f.max, 1e300, 5e-324, np.inf, 0.1, 1 / 3, math.pi, 464.0, 65520.0]
    log2 = rng.uniform(math.log2(s) - 2, math.log2(f.max) + 2, 300)
    xs = np.concatenate([grid, ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf), edges, np.exp2(log2)])
    return np.concatenate([xs, -xs, [math.nan]])


def expected_codes(x: np.ndarray, f: FloatFormat, mode: str, saturate) -> np.ndarray:
    """encode's codes; -1 where a format without NaN gets NaN (encode refuses it)."""
    out = np.full(x.shape, -1, dtype=np.int64)
    ok = ~np.isnan(x) if not f.has_nan else np.ones(x.shape, dtype=bool)
    out[ok] = encode(x[ok], f, mode, saturate=saturate)
    return out


def expected_errors(xs: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|x - r| (the same IEEE subtraction) and that over |x|: NaN only where x or the result is
    NaN; 0 for an exact result (inf for inf too); inf where a finite x overflows to inf or inf
    saturates to max, whose relative error is 1, the limit of |x - max| / |x|."""
    with np.errstate(invalid="ignore", divide="ignore"):
        abs_error = np.abs(xs - want)
        rel_error = np.where(np.isfinite(xs), np.where(xs != 0, abs_error / np.abs(xs), 0.0), 1.0)
    exact = xs == want
    abs_error[exact] = rel_error[exact] = 0.0
    nan = np.isnan(xs) | np.isnan(want)
    abs_error[nan] = rel_error[nan] = np.nan
    return abs_error, rel_error


def check_rounding(page, f: FloatFormat, spec, xs: np.ndarray, scale: float = 1.0, errors: bool = True) -> int:
    """The page's rounding of xs * scale in every mode, with the format's overflow and
    saturating, against round_to and encode of xs (times scale); the number of values compared."""
    for mode in MODES:
        for saturate in (None, True):
            shown = js_round(page, spec, xs * scale, mode, saturate)
            assert same_values(shown["x"], xs * scale).all(), "a value did not reach the page as typed"
            want = round_to(xs, f, mode, saturate=saturate) * scale
            ok = same_values(shown["value"], want) & (shown["code"] == expected_codes(xs, f, mode, saturate))
            if errors:
                abs_error, rel_error = expected_errors(xs, want)
                ok &= same_values(shown["abs_error"], abs_error) & same_values(shown["rel_error"], rel_error)
            bad = [(xs[i], shown["value"][i], want[i], shown["code"][i]) for i in np.flatnonzero(~ok)[:4]]
            assert ok.all(), f"{f.name} {mode} saturate={saturate}: {int((~ok).sum())} differ, first {bad}"
    return 6 * len(xs)


# --- the page -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def explorer(server, browser_page):  # noqa: F811
    """The explorer page, loaded once and ready; `page.errors` collects its script errors."""
    page = browser_page
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(urljoin(server, "explorer.html"), wait_until="load")
    page.wait_for_selector("#float-explorer[data-ready=true]", timeout=20_000)
    yield page
    assert page.errors == []
    assert page.outside == []


def check_page(page):
    assert page.errors == [], page.errors
    assert page.outside == [], f"requests outside the local server: {page.outside}"


def test_the_explorer_is_a_page_of_the_site_and_its_script_loads_there_only(site):  # noqa: F811
    """explorer.md is staged and built; its page loads explorer.js and .css from the site
    itself; no other page loads them; the home page links the explorer."""
    assert (site.parent / "src" / "explorer.md").is_file()
    page = site / "explorer.html"
    parsed = Page(page.read_text(encoding="utf-8"))
    assert parsed.h1[:1] == ["Float format explorer"]
    scripts = [s for s in parsed.scripts if "explorer" in s]
    assert len(scripts) == 1, parsed.scripts
    for url in parsed.scripts + parsed.links:
        target = local_target(site, page, url)
        assert target is None or target.exists(), url
    script = local_target(site, page, scripts[0].split("?")[0])
    assert script.read_bytes() == (ROOT / "site" / "_static" / "explorer.js").read_bytes()
    assert 'id="float-explorer"' in parsed.raw
    assert "explorer.css" in parsed.raw
    others = [p for p in site.rglob("*.html") if p != page]
    assert others and not [p for p in others if "explorer.js" in p.read_text(encoding="utf-8")]
    assert "explorer.html" in Page((site / "index.html").read_text(encoding="utf-8")).links


EXPLORER_SECTIONS = {  # the explorer's parts: the heading's label -> the box the script fills
    "fx-bits-heading": "fx-part-bits",
    "fx-key-heading": "fx-part-key",
    "fx-grid-heading": "fx-part-grid",
    "fx-rounding-heading": "fx-part-rounding",
}


def test_the_explorers_headings_are_in_the_pages_contents(site):  # noqa: F811
    """The page declares the explorer's headings (explorer.md), each over the box the script
    fills, so that the page's contents (the theme's list of its sections) lists them."""
    raw = (site / "explorer.html").read_text(encoding="utf-8")
    contents = raw.split('id="pst-page-toc-nav"', 1)[1].split("</nav>", 1)[0]
    for heading, box in EXPLORER_SECTIONS.items():
        assert f'href="#{heading}"' in contents, heading
        section = raw.split(f'<section id="{heading}">', 1)[1].split("</section>", 1)[0]
        assert f'id="{box}"' in section, (heading, box)


def test_the_script_fills_the_declared_parts_and_adds_no_heading(explorer):
    page = explorer
    headings = page.locator("article h2").all_inner_texts()
    assert len(headings) == len(set(headings)), headings
    for box in EXPLORER_SECTIONS.values():
        assert page.locator(f"#{box} > *").count() > 0, box
    assert page.locator("#fx-part-bits #fx-bits").count() == 1
    assert page.locator("#fx-part-rounding #fx-round").count() == 1
    check_page(page)


def test_a_link_to_the_page_where_the_repository_keeps_it_goes_to_the_page(tmp_path):
    """A notebook may link ``../site/explorer.md`` (a link that works on GitHub and in
    JupyterLab); on the site it goes to explorer.html (site/conf.py's link_site_pages)."""
    docutils = pytest.importorskip("docutils.utils", reason="Sphinx is not installed: pip install -e '.[site]'")
    from docutils import nodes
    from sphinx import addnodes

    conf = runpy.run_path(str(ROOT / "site" / "conf.py"))
    (tmp_path / "explorer.md").write_text("# Float format explorer\n", encoding="utf-8")
    doctree = docutils.new_document("<test>")
    targets = ["../site/explorer.md", "../site/explorer.md#rounding-a-value", "../site/missing.md", "explorer.md"]
    for target in targets:
        xref = addnodes.pending_xref("", reftarget=target, reftype="myst", refdomain=None)
        xref += nodes.Text(target)
        doctree += nodes.paragraph("", "", xref)
    app = SimpleNamespace(env=SimpleNamespace(docname="notebooks/01_float_formats"), srcdir=str(tmp_path))
    conf["link_site_pages"](app, doctree)
    links = {n.astext(): n["refuri"] for n in doctree.findall(nodes.reference)}
    assert links == {
        "../site/explorer.md": "../explorer.html",
        "../site/explorer.md#rounding-a-value": "../explorer.html#rounding-a-value",
    }
    assert len(list(doctree.findall(addnodes.pending_xref))) == 2  # left to MyST, which warns


def test_key_numbers_of_every_preset(explorer):
    for f in FORMATS.values():
        shown = explorer.evaluate("(spec) => explorer.keyNumbers(spec)", spec_of(f))
        expected = expected_key_numbers(f)
        for key, value in expected.items():
            assert same(shown[key], value), f"{f.name} {key}: page {shown[key]!r}, package {value!r}"
        assert shown["name"] == f.name
    check_page(explorer)


def check_decode(page, f: FloatFormat, spec, codes: np.ndarray, scale: float = 1.0) -> int:
    """The page's value (exactly, the sign of zero included) and class of each code against
    decode's (times scale); the number of codes compared."""
    values, cls = js_decode(page, spec, codes)
    want = decode(codes, f) * scale
    ok = same_values(values, want) & (np.array(cls) == np.array(classes(codes, f)))
    bad = [(hex(int(codes[i])), values[i], want[i], cls[i]) for i in np.flatnonzero(~ok)[:5]]
    assert ok.all(), f"{f.name}: {int((~ok).sum())} codes differ, first {bad}"
    return len(codes)


def test_every_code_decodes_as_the_package_decodes_it(explorer):
    """Every code of the formats of at most 16 bits, a sample of tf32's and fp32's: the value
    and the class; the exact decimal expansion of every code of the formats of at most 8 bits
    and of 500 codes of each wider one."""
    rng = np.random.default_rng(SEED)
    compared = 0
    for f in FORMATS.values():
        codes = codes_to_check(f, rng)
        compared += check_decode(explorer, f, spec_of(f), codes)
        exact_codes = codes if f.bits <= 8 else codes[:500]
        for code, text, v in zip(exact_codes, js_exact(explorer, spec_of(f), exact_codes), decode(exact_codes, f)):
            if math.isfinite(v):
                assert Decimal(text) == Decimal(float(v)), f"{f.name} {hex(int(code))}: {text}"
    assert compared > 2 * 2**16
    check_page(explorer)


@pytest.mark.parametrize("f", list(FORMATS.values()), ids=lambda f: f.name)
def test_rounding_matches_round_to(explorer, f):
    """Typed values rounded in each mode, with the format's overflow and saturating: the value
    and its code as round_to and encode give them, and the errors against x."""
    check_rounding(explorer, f, spec_of(f), values_to_round(f, np.random.default_rng(SEED)))
    check_page(explorer)


CUSTOM = [
    FloatFormat("e3m4", 3, 4, Specials.IEEE),
    FloatFormat("e3m4fn", 3, 4, Specials.FN),
    FloatFormat("e4m2fn", 4, 2, Specials.FINITE),
    FloatFormat("e1m3fn", 1, 3, Specials.FN),
    FloatFormat("e1m2fn", 1, 2, Specials.FINITE),
    FloatFormat("e5m4", 5, 4, Specials.IEEE),
    FloatFormat("e8m23fn", 8, 23, Specials.FN),
]


@pytest.mark.parametrize("f", CUSTOM, ids=lambda f: f"{f.name}-{f.specials.value}")
def test_formats_built_from_their_fields_match_the_package(explorer, f):
    """Formats that are no preset, given as fields: key numbers, codes and rounding."""
    shown = explorer.evaluate("(spec) => explorer.keyNumbers(spec)", spec_of(f))
    for key, value in expected_key_numbers(f).items():
        assert same(shown[key], value), f"{f.name} {key}: page {shown[key]!r}, package {value!r}"
    rng = np.random.default_rng(SEED)
    check_decode(explorer, f, spec_of(f), codes_to_check(f, rng))
    check_rounding(explorer, f, spec_of(f), values_to_round(f, rng))
    check_page(explorer)


@pytest.mark.parametrize("name, shift", [("e4m3fn", 1), ("e4m3fn", -5), ("e2m1fn", 3), ("e5m2", 20), ("e8m0fnu", -7)])
def test_a_larger_bias_scales_every_value_by_a_power_of_two(explorer, name, shift):
    """The package fixes the bias at 2**(e-1) - 1; the page lets the reader change it. Adding
    `shift` to the bias divides every value by 2**shift and moves the whole grid: decode, the
    limits and the rounding of x * 2**-shift are the package's, scaled."""
    f = FORMATS[name]
    spec = spec_of(f, bias=f.bias + shift)
    scale = 2.0**-shift
    k = explorer.evaluate("(spec) => explorer.keyNumbers(spec)", spec)
    assert k["max"] == f.max * scale and k["smallestNormal"] == f.smallest_normal * scale
    assert same(k["smallestSubnormal"], f.smallest_subnormal and f.smallest_subnormal * scale)
    assert k["eps"] == f.eps and k["finiteValues"] == finite_count(f)
    check_decode(explorer, f, spec, np.arange(2**f.bits), scale)
    xs = values_to_round(f, np.random.default_rng(SEED))
    xs = xs[~((xs != 0) & (np.abs(xs) < 2.0**-900))]  # keeps x * scale a normal float64
    check_rounding(explorer, f, spec, xs, scale, errors=False)
    check_page(explorer)


# --- the page as a reader uses it -----------------------------------------------------------


def shown_value(page) -> str:
    return page.locator("#fx-value").inner_text()


def test_picking_a_preset_shows_its_key_numbers_and_grid(explorer):
    page = explorer
    for f in FORMATS.values():
        page.select_option("#fx-preset", f.name)
        assert page.input_value("#fx-exp") == str(f.exp_bits)
        assert page.input_value("#fx-man") == str(f.man_bits)
        assert page.input_value("#fx-bias") == str(f.bias)
        for key, value in expected_key_numbers(f).items():
            cell = page.locator(f'#fx-key td[data-key="{key}"]')
            if cell.count() == 0:
                continue
            text = cell.inner_text()
            assert same(None if text == "none" else float(text), value), f"{f.name} {key}: {text}"
        ticks = page.locator("#fx-grid-svg line.fx-tick")
        if f.bits <= 8:
            drawn = page.eval_on_selector_all("#fx-grid-svg line.fx-tick", "ls => ls.map(l => l.dataset.value)")
            shown = [float(v) for v in drawn]
            positive = finite_values(f, nonnegative=True)
            assert shown == list(positive[positive > 0]), f.name
        else:
            assert ticks.count() == 0
    check_page(page)


def test_clicking_a_bit_flips_it_and_shows_the_new_value(explorer):
    page = explorer
    page.select_option("#fx-preset", "bf16")
    page.fill("#fx-hex", "0x3F80")
    page.press("#fx-hex", "Enter")
    assert shown_value(page) == "1" and page.locator("#fx-class").inner_text() == "normal"
    page.click('#fx-bits button[data-bit="6"]')  # the top mantissa bit
    assert shown_value(page) == "1.5" and page.input_value("#fx-hex") == "0x3FC0"
    page.click('#fx-bits button[data-bit="15"]')  # the sign
    assert shown_value(page) == "-1.5" and page.input_value("#fx-hex") == "0xBFC0"
    assert page.locator('#fx-bits button[data-bit="15"]').get_attribute("aria-pressed") == "true"
    page.click("#fx-up")
    assert float(shown_value(page)) == float(decode(0xBFC1, "bf16"))
    # e4m3fn: the all-ones code is NaN, the one below it the largest value
    page.select_option("#fx-preset", "e4m3fn")
    page.fill("#fx-hex", "7F")
    page.press("#fx-hex", "Enter")
    assert shown_value(page) == "NaN" and page.locator("#fx-class").inner_text() == "NaN"
    page.click('#fx-bits button[data-bit="0"]')
    assert shown_value(page) == "448"
    # e2m1fn: clicking down to the smallest subnormal, 0.5
    page.select_option("#fx-preset", "e2m1fn")
    page.fill("#fx-hex", "0")
    page.press("#fx-hex", "Enter")
    assert shown_value(page) == "0" and page.locator("#fx-class").inner_text() == "zero"
    page.click('#fx-bits button[data-bit="0"]')
    assert shown_value(page) == "0.5" and page.locator("#fx-class").inner_text() == "subnormal"
    assert Decimal(page.locator("#fx-exact").inner_text()) == Decimal("0.5")
    check_page(page)


def round_row(page, mode: str, saturate) -> object:
    """The row of the rounding table that gives the result of one mode and overflow rule."""
    return page.locator(f'#fx-round tr[data-ways~="{mode}/{"saturating" if saturate else "format"}"]')


def test_a_typed_value_is_shown_rounded_in_each_mode(explorer):
    page = explorer
    page.select_option("#fx-preset", "e4m3fn")
    for typed in ("464", "-0.001", "0.1", "1e9", "0"):
        page.fill("#fx-x", typed)
        x = float(typed)
        assert Decimal(page.locator("#fx-x-exact").inner_text()) == Decimal(x)
        for mode in MODES:
            for saturate in (None, True):
                row = round_row(page, mode, saturate)
                assert row.count() == 1, (typed, mode, saturate)
                text = row.locator("td.fx-result").inner_text()
                want = float(round_to(x, "e4m3fn", mode, saturate=saturate))
                assert same(float(text), want), (typed, mode, saturate, text)
    page.fill("#fx-x", "464")
    even = round_row(page, "nearest_even", None)
    away = round_row(page, "nearest_away", None)
    assert even.locator("td.fx-result").inner_text() == "448"
    assert away.locator("td.fx-result").inner_text() == "NaN"
    away.locator("button.fx-code-link").click()  # the result's code goes to the bits
    assert page.input_value("#fx-hex") == "0x7F" and shown_value(page) == "NaN"
    check_page(page)


def test_e8m0fnu_says_where_its_ties_go(explorer, server):  # noqa: F811
    """e8m0fnu has no mantissa bit, so a tie (3, between 2 and 4) has no even neighbour: both
    nearest modes give the larger power of two, as round_to does, and the format's note says so."""
    page = explorer
    open_state(page, server, "#fmt=e8m0fnu&x=3")
    want = float(round_to(3.0, "e8m0fnu", "nearest_even"))
    assert want == float(round_to(3.0, "e8m0fnu", "nearest_away")) == 4.0
    for mode in ("nearest_even", "nearest_away"):
        assert float(round_row(page, mode, None).locator("td.fx-result").inner_text()) == want, mode
    note = page.locator("#fx-specials-text").inner_text()
    assert "a tie (3 between 2 and 4) has no even neighbour" in note, note
    assert "both nearest modes take the larger" in note, note
    check_page(page)


def test_a_format_set_by_its_fields(explorer):
    page = explorer
    page.select_option("#fx-preset", "fp16")
    page.fill("#fx-exp", "3")
    page.press("#fx-exp", "Enter")
    page.fill("#fx-man", "2")
    page.press("#fx-man", "Enter")
    page.select_option("#fx-specials", "finite")
    assert page.input_value("#fx-preset") == "e3m2fn"  # the fields of a preset are that preset
    assert page.locator('#fx-key td[data-key="max"]').inner_text() == "28" == str(int(FORMATS["e3m2fn"].max))
    page.select_option("#fx-specials", "fn")
    assert page.input_value("#fx-preset") == "custom"
    assert float(page.locator('#fx-key td[data-key="max"]').inner_text()) == FloatFormat.custom(3, 2, "fn").max
    page.fill("#fx-bias", "4")
    page.press("#fx-bias", "Enter")
    assert float(page.locator('#fx-key td[data-key="max"]').inner_text()) == FloatFormat.custom(3, 2, "fn").max / 2
    page.fill("#fx-exp", "1")
    page.press("#fx-exp", "Enter")
    page.select_option("#fx-specials", "ieee")  # one exponent bit leaves IEEE no normal numbers
    assert "exponent bits" in page.locator("#fx-problem").inner_text()
    check_page(page)


# --- the second edition: the spacing at x, its neighbours, stochastic rounding ------------------


class FixedDraws(np.random.Generator):
    """A generator whose uniform draws are the test's: stochastic rounding with chosen u (round_to
    goes up when u < p, the distance from the lower neighbour in units of the spacing)."""

    def __init__(self, u):
        super().__init__(np.random.PCG64(0))
        self._u = np.asarray(u, dtype=np.float64)
        self._at = 0

    def random(self, size=None, dtype=np.float64, out=None):
        n = int(np.prod(size))
        u = self._u[self._at : self._at + n]
        self._at += n
        return u


JS_NEIGHBOURS = """([spec, xs, saturate]) => JSON.stringify(JSON.parse(xs).map((x) => {
    const n = explorer.neighbours(spec, x, saturate);
    return [explorer.show(n.ulp), explorer.show(n.p), n.pExact, n.qExact,
            explorer.show(n.lower.raw), explorer.show(n.lower.value), n.lower.code,
            explorer.show(n.upper.raw), explorer.show(n.upper.value), n.upper.code];
}))"""


def stochastic_codes(xs: np.ndarray, f: FloatFormat, u: np.ndarray, saturate) -> np.ndarray:
    """encode's codes under stochastic rounding with draws u; -1 where a format without NaN gets
    NaN (encode refuses it)."""
    out = np.full(xs.shape, -1, dtype=np.int64)
    ok = ~np.isnan(xs) if not f.has_nan else np.ones(xs.shape, dtype=bool)
    out[ok] = encode(xs[ok], f, "stochastic", rng=FixedDraws(u[ok]), saturate=saturate)
    return out


def check_neighbours(page, f: FloatFormat, spec, xs: np.ndarray) -> int:
    """The page's ulp at each x, its two neighbours (the results they give, and their codes) and
    the probability of the upper one, against the package: ulp(x), and round_to's stochastic
    rounding fed u = p (which must give the lower neighbour) and the float64 just below p (which
    must give the upper one): that pins p to the exact threshold of the package's rule. The
    probabilities, written exactly, sum to 1, and p is the distance from the lower neighbour in
    units of the spacing, in exact rational arithmetic. The number of values compared."""
    typed = json.dumps([repr(float(x)) for x in xs])
    for saturate in (None, True):
        rows = json.loads(page.evaluate(JS_NEIGHBOURS, [spec, typed, bool(saturate)]))
        cols = list(zip(*rows))
        page_ulp, p = (np.array([float(v) for v in c]) for c in cols[:2])
        lower_raw, lower, upper_raw, upper = (np.array([float(v) for v in cols[i]]) for i in (4, 5, 7, 8))
        codes = [np.array([-1 if c is None else c for c in cols[i]], dtype=np.int64) for i in (6, 9)]
        assert same_values(page_ulp, ulp(xs, f)).all(), f"{f.name}: ulp differs"
        assert ((p >= 0) & (p < 1)).all()
        below = np.nextafter(p, -np.inf)
        for got, got_codes, u in ((lower, codes[0], p), (upper, codes[1], below)):
            want = round_to(xs, f, "stochastic", rng=FixedDraws(u), saturate=saturate)
            ok = same_values(got, want) & (got_codes == stochastic_codes(xs, f, u, saturate))
            bad = [(xs[i], got[i], want[i], p[i]) for i in np.flatnonzero(~ok)[:4]]
            assert ok.all(), f"{f.name} saturate={saturate}: {int((~ok).sum())} neighbours differ, first {bad}"
        for i, (p_exact, q_exact) in enumerate(zip(cols[2], cols[3])):
            assert Fraction(p_exact) == Fraction(p[i]) and Fraction(q_exact) == 1 - Fraction(p[i])
        if saturate is None:  # p = (|x| - lower) / (upper - lower), exactly, wherever x has neighbours
            inside = np.isfinite(lower_raw) & np.isfinite(upper_raw) & (upper_raw != lower_raw)
            for x, lo, hi, pi in zip(xs[inside], lower_raw[inside], upper_raw[inside], p[inside]):
                lo, hi = Fraction(abs(lo)), Fraction(abs(hi))
                assert lo <= Fraction(abs(x)) < hi and (Fraction(abs(x)) - lo) / (hi - lo) == Fraction(pi), (f.name, x)
    return 2 * len(xs)


def test_the_ulp_neighbours_and_stochastic_probabilities_match_the_package(explorer):
    """Every preset and the custom formats, on the values that test a rounding (every grid value,
    tie and the float64 on either side of it of the small formats, samples of the wide ones, the
    edges past max and below the smallest subnormal, inf, NaN, random values, all negated)."""
    compared = 0
    for f in [*FORMATS.values(), *CUSTOM]:
        rng = np.random.default_rng(SEED)
        compared += check_neighbours(explorer, f, spec_of(f), values_to_round(f, rng))
    assert compared > 50_000
    check_page(explorer)


JS_ROWS = """() => [...document.querySelectorAll('#fx-round tbody tr')].map((tr) => [
    tr.dataset.ways, tr.querySelector('td.fx-result').dataset.value,
    (tr.querySelector('button.fx-code-link') || {}).textContent || null,
    tr.dataset.pFormat, tr.dataset.pSaturating])"""

ROW_VALUES = ("464", "480", "57344", "61440", "2.6", "2.5", "-0.001", "0", "-0", "nan", "inf", "1e-45", "3.14159")


def test_the_rounding_table_has_one_row_per_distinct_result(explorer):
    """Each mode and overflow rule is in exactly one row, which shows round_to's result; no two
    rows show the same result; stochastic rounding's rows are its possible results (the two
    neighbours), with probabilities that sum to 1 under each rule."""
    page = explorer
    for name in ("e4m3fn", "e5m2", "e2m1fn", "e8m0fnu", "bf16"):
        f = FORMATS[name]
        page.select_option("#fx-preset", name)
        for typed in ROW_VALUES:
            page.fill("#fx-x", typed)
            rows = page.evaluate(JS_ROWS)
            x = float(typed)
            results = [(value, code) for _, value, code, _, _ in rows]
            assert len(set(results)) == len(rows), (name, typed, rows)
            ways = [w for tokens, *_ in rows for w in tokens.split()]
            deterministic = [f"{m}/{r}" for m in MODES for r in ("format", "saturating")]
            assert sorted(w for w in ways if not w.startswith("stochastic")) == sorted(deterministic), (name, typed)
            for tokens, value, code, p_format, p_saturating in rows:
                for token in tokens.split():
                    mode, rule = token.split("/")
                    saturate = True if rule == "saturating" else None
                    if mode == "stochastic":
                        p = Fraction(p_format if rule == "format" else p_saturating)
                        lower, upper = (
                            float(round_to(x, f, "stochastic", rng=FixedDraws([u]), saturate=saturate))
                            for u in (1.0, -1.0)
                        )
                        assert p > 0 and any(same(float(value), v) for v in (lower, upper)), (name, typed, token)
                    else:
                        assert same(float(value), float(round_to(x, f, mode, saturate=saturate))), (name, typed, token)
            for rule, column in (("format", 3), ("saturating", 4)):
                assert sum(Fraction(r[column]) for r in rows) == 1, (name, typed, rule, rows)
                assert all((f"stochastic/{rule}" in r[0].split()) == (Fraction(r[column]) > 0) for r in rows)
    page.select_option("#fx-preset", "bf16")
    page.fill("#fx-x", "3.14159")
    assert page.locator("#fx-round tbody tr").count() == 2  # 3.140625 four ways, 3.15625 by chance
    check_page(page)


def grid_position(page, selector: str) -> float:
    return float(page.locator(selector).get_attribute("x1"))


def test_x_is_marked_on_the_grid_between_its_neighbours(explorer):
    """The typed value's marker lies between the ticks of its two neighbours, which are drawn
    thicker; the spacing and the neighbours are written under the value."""
    page = explorer
    page.select_option("#fx-preset", "e2m1fn")
    for typed, lower, upper in (("2.6", "2", "3"), ("-0.7", "0.5", "1"), ("4", "4", "6"), ("5.5", "4", "6")):
        page.fill("#fx-x", typed)
        marked = page.eval_on_selector_all("#fx-grid-svg .fx-tick-neighbour", "ts => ts.map(t => t.dataset.value)")
        assert sorted(marked, key=float) == sorted({lower, upper}, key=float), (typed, marked)
        at = float(page.locator("#fx-grid-x").get_attribute("data-x"))
        lo = grid_position(page, f'#fx-grid-svg line.fx-tick[data-value="{lower}"]')
        hi = grid_position(page, f'#fx-grid-svg line.fx-tick[data-value="{upper}"]')
        assert lo <= at < hi or at == lo == hi, (typed, lo, at, hi)
        assert page.locator("#fx-grid-x").is_visible()
        assert float(page.locator("#fx-ulp").get_attribute("data-value")) == float(ulp(float(typed), "e2m1fn"))
        assert abs(float(page.locator("#fx-lower").get_attribute("data-value"))) == float(lower)
    page.fill("#fx-x", "0")  # zero is not on a log axis
    assert not page.locator("#fx-grid-x").is_visible()
    page.fill("#fx-x", "2.5")
    check_page(page)


# --- the hex box ---------------------------------------------------------------------------


def test_the_hex_box_reads_the_code_after_a_bit_is_flipped(explorer):
    """Type 4049 in bf16's hex box, then flip the lowest bit: the value is 3.125 and the box reads
    0x4048. Once with Chromium's click, which commits the box as the button takes the focus (the
    bits must survive that, or the click is lost); once with a click that leaves the focus in the
    box, as Safari and Firefox on macOS leave it (the box must not keep the typed code)."""
    page = explorer
    page.select_option("#fx-preset", "bf16")
    page.fill("#fx-hex", "4049")
    page.click('#fx-bits button[data-bit="0"]')
    assert shown_value(page) == "3.125" and page.input_value("#fx-hex") == "0x4048"
    page.fill("#fx-hex", "4049")
    page.press("#fx-hex", "Enter")
    assert shown_value(page) == "3.140625"
    page.locator('#fx-bits button[data-bit="0"]').dispatch_event("click")  # the focus stays in the box
    assert page.evaluate("document.activeElement.id") == "fx-hex"
    assert shown_value(page) == "3.125" and page.input_value("#fx-hex") == "0x4048"
    check_page(page)


# --- the address -----------------------------------------------------------------------------


def state_in_address(page) -> dict[str, str]:
    return dict(parse_qsl(page.evaluate("window.location.hash").lstrip("#")))


def open_state(page, server, hash_: str, fresh: bool = True):  # noqa: F811
    """Open the explorer at an address: loaded afresh (as from a link on another page: a query
    the page ignores makes the address another document's), or, with fresh=False, as a link on
    the page itself opens it (only the part after # changes)."""
    open_state.loads += 1
    query = f"?load={open_state.loads}" if fresh else ""
    page.goto(urljoin(server, "explorer.html") + query + hash_, wait_until="load")
    page.wait_for_selector("#float-explorer[data-ready=true]", timeout=20_000)


open_state.loads = 0


def test_an_address_names_a_state_and_the_page_keeps_it_there(explorer, server):  # noqa: F811
    """Loading an address shows the state it names (a preset, or a format by its fields; a code or
    a value; a mode); each change the reader makes is written back into the address."""
    page = explorer
    open_state(page, server, "#fmt=e4m3fn&code=0x7E&x=464&mode=nearest_away")
    assert page.input_value("#fx-preset") == "e4m3fn" and page.input_value("#fx-hex") == "0x7E"
    assert shown_value(page) == "448" and page.input_value("#fx-x") == "464"
    assert page.input_value("#fx-mode") == "nearest_away"
    assert page.locator("tr.fx-selected td.fx-result").inner_text() == "NaN"  # the mode followed
    assert page.locator("#fx-problem").inner_text() == ""
    open_state(page, server, "#e=3&m=4&bias=5&specials=fn&code=0x12")
    assert page.input_value("#fx-preset") == "custom" and page.input_value("#fx-bias") == "5"
    assert page.input_value("#fx-exp") == "3" and page.input_value("#fx-man") == "4"
    assert page.input_value("#fx-specials") == "fn"
    assert float(shown_value(page)) == float(decode(0x12, FloatFormat.custom(3, 4, "fn"))) / 4
    open_state(page, server, "#fmt=e5m2&x=57344", fresh=False)  # a value, no code: the code x rounds to
    assert page.input_value("#fx-hex") == "0x7B" and shown_value(page) == "57344"
    open_state(page, server, "#fmt=e9m2&code=0x1")  # what the page cannot show, it says
    assert "e9m2" in page.locator("#fx-problem").inner_text() and page.input_value("#fx-preset") == "bf16"
    # and back: every change goes into the address
    open_state(page, server, "")
    assert page.evaluate("window.location.hash") == ""
    page.select_option("#fx-preset", "e2m1fn")
    assert state_in_address(page)["fmt"] == "e2m1fn"
    page.click('#fx-bits button[data-bit="1"]')
    assert state_in_address(page)["code"] == page.input_value("#fx-hex")
    page.fill("#fx-x", "2.6")
    page.select_option("#fx-mode", "stochastic")
    assert state_in_address(page) == {
        "fmt": "e2m1fn",
        "code": page.input_value("#fx-hex"),
        "x": "2.6",
        "mode": "stochastic",
    }
    page.fill("#fx-bias", "3")
    page.press("#fx-bias", "Enter")
    assert {k: v for k, v in state_in_address(page).items() if k in "e m bias specials"} == {
        "e": "2",
        "m": "1",
        "bias": "3",
        "specials": "finite",
    }
    saved = page.evaluate("window.location.hash")
    open_state(page, server, saved)  # the address read back gives the same page
    assert page.input_value("#fx-bias") == "3" and page.input_value("#fx-mode") == "stochastic"
    assert page.evaluate("window.location.hash") == saved
    check_page(page)


EXPLORER_LINK = re.compile(r'href="([^"]*explorer\.html#[^"]*)"')


def test_the_chapters_link_to_states_of_the_explorer_that_open(site, explorer, server):  # noqa: F811
    """Chapters 01, 06 and 07 link to exact states (e4m3fn's 448, e5m2's 57344, e2m1fn's grid,
    e8m0fnu's 2^-127); each link, followed, shows the state it names with no complaint."""
    links = {}
    for number in ("01", "06", "07"):
        (page_file,) = (site / "notebooks").glob(f"{number}_*.html")
        found = [html.unescape(u) for u in EXPLORER_LINK.findall(page_file.read_text(encoding="utf-8"))]
        assert found, f"chapter {number} links to no state of the explorer"
        for url in found:
            assert url.startswith("../explorer.html#"), url  # relative, as the other links
            links[url.split("#", 1)[1]] = number
    shown = {}
    page = explorer
    for state in links:
        open_state(page, server, "#" + state)
        named = dict(parse_qsl(state))
        assert page.locator("#fx-problem").inner_text() == "", state
        assert page.input_value("#fx-preset") == named["fmt"], state
        if "code" in named:
            assert page.input_value("#fx-hex") == named["code"], state
        shown[named["fmt"]] = shown.get(named["fmt"], set()) | {float(shown_value(page))}
    assert 448.0 in shown.get("e4m3fn", ()) and 57344.0 in shown.get("e5m2", ()), shown
    assert 2.0**-127 in shown.get("e8m0fnu", ()) and "e2m1fn" in shown, shown
    check_page(page)


# --- what a reader found on the page ------------------------------------------------------------

PHONE = {"width": 390, "height": 844}


def heading_top(page, heading_id: str) -> float:
    return page.evaluate(f"document.getElementById('{heading_id}').getBoundingClientRect().top")


@pytest.mark.parametrize("viewport", [PHONE, None], ids=["390px", "1280px"])
def test_a_link_to_a_state_opens_at_the_section_it_names(explorer, server, viewport):  # noqa: F811
    """An address with x= opens at "Rounding a value", one with only code= at "The bits" (in the
    top third of the window, below the theme's header); with neither it opens at the top; a
    change of state after the load leaves the scroll where the reader has it."""
    page = explorer
    before = page.viewport_size
    if viewport:
        page.set_viewport_size(viewport)
    try:
        height = page.viewport_size["height"]
        open_state(page, server, "#fmt=e4m3fn&code=0x7E&x=464")
        top = heading_top(page, "fx-rounding-heading")
        assert 40 <= top <= height / 3, f"Rounding a value at {top:.0f} px in a {height} px window"
        scrolled = page.evaluate("window.scrollY")
        page.fill("#fx-x", "465")
        page.locator('#fx-bits button[data-bit="0"]').dispatch_event("click")  # a click, no scroll
        page.select_option("#fx-mode", "toward_zero")
        assert page.evaluate("window.scrollY") == scrolled  # no jump on a change of state
        open_state(page, server, "#fmt=e4m3fn&code=0x7E")
        top = heading_top(page, "fx-bits-heading")
        assert 40 <= top <= height / 3, f"The bits at {top:.0f} px in a {height} px window"
        open_state(page, server, "#fmt=e4m3fn")
        assert page.evaluate("window.scrollY") == 0
    finally:
        page.set_viewport_size(before)
    check_page(page)


ROUND_CELLS = """() => {
    const box = document.querySelector('#fx-round').parentElement.getBoundingClientRect();
    const table = document.querySelector('#fx-round');
    return {box: [box.left, box.right], scroll: [table.parentElement.scrollWidth, table.parentElement.clientWidth],
        cells: [...table.querySelectorAll('tbody td')].map((td) => {
            const r = td.getBoundingClientRect();
            return [td.dataset.label, r.left, r.right, getComputedStyle(td, '::before').content];
        }),
        rows: [...table.querySelectorAll('tbody tr')].map((tr) => tr.getBoundingClientRect().height)};
}"""


def test_the_rounding_table_fits_a_phone_as_cards(explorer, server):  # noqa: F811
    """At 390 px the rounding table needs no sideways scroll: every cell, the modes and the
    probability included, lies inside its box and names its column; a row is under 190 px."""
    page = explorer
    before = page.viewport_size
    page.set_viewport_size(PHONE)
    try:
        open_state(page, server, "#fmt=e4m3fn&code=0x7E&x=464")
        for typed in ("464", "2.6", "1e-3"):
            page.fill("#fx-x", typed)
            m = page.evaluate(ROUND_CELLS)
            (left, right), (scroll_width, client_width) = m["box"], m["scroll"]
            assert scroll_width <= client_width + 1, (typed, m["scroll"])
            labels = {label for label, *_ in m["cells"]}
            assert {"given by", "stochastic: probability", "absolute error"} <= labels
            for label, lo, hi, before_text in m["cells"]:
                assert left - 1 <= lo and hi <= right + 1, (typed, label, lo, hi, left, right)
                assert label in before_text, (label, before_text)
            assert max(m["rows"]) < 190, (typed, m["rows"])
    finally:
        page.set_viewport_size(before)
    m = page.evaluate(ROUND_CELLS)  # at 1280 px, a table with its head
    assert page.locator("#fx-round thead").is_visible() and m["scroll"][0] <= m["scroll"][1] + 1
    check_page(page)


def marker_in_view(page) -> tuple[float, float, float]:
    """The grid marker's centre and its box's left and right edges, in the window."""
    return page.evaluate("""() => {
        const m = document.getElementById('fx-grid-marker').getBoundingClientRect();
        const box = document.getElementById('fx-grid-box').getBoundingClientRect();
        return [(m.left + m.right) / 2, box.left, box.right];
    }""")


def test_the_grid_scrolls_to_the_marked_code_on_a_phone(explorer, server):  # noqa: F811
    """At 390 px the grid scrolls sideways in its box; the marker of the code shown is in view
    after a link opens a state (448, the largest value, at the right end) and after each change
    of code (the smallest subnormal, at the left end, 448 again, then 1); the note under the grid
    does not scroll with it."""
    page = explorer
    before = page.viewport_size
    page.set_viewport_size(PHONE)
    try:
        open_state(page, server, "#fmt=e4m3fn&code=0x7E&x=464")
        box = "document.getElementById('fx-grid-box')"
        assert page.evaluate(f"{box}.scrollWidth > {box}.clientWidth")  # the grid scrolls in its box
        note = page.evaluate("document.querySelector('#fx-grid > p.fx-note').getBoundingClientRect().left")
        assert note >= 0, note  # and the note under it stays in the page
        for code in (None, "01", "7E", "38"):
            if code:
                page.fill("#fx-hex", code)
                page.press("#fx-hex", "Enter")
            at, left, right = marker_in_view(page)
            assert left <= at <= right, (code, at, left, right)
    finally:
        page.set_viewport_size(before)
    check_page(page)


GRID_SIZE = """() => {
    const box = document.getElementById('fx-grid-box');
    const svg = document.getElementById('fx-grid-svg');
    const labels = [...svg.querySelectorAll('.fx-axis-label')]
        .map((t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);
    return [box.scrollWidth, box.clientWidth, svg.getBoundingClientRect().width, Math.min(...labels)];
}"""


def test_the_grid_is_sized_to_its_values(explorer, server):  # noqa: F811
    """The grid is as long as its number of values asks: at 390 px e2m1fn's 7 values fit the box
    (no sideways scroll), an fp8 format's 126 scroll; at 1280 px the short grid is drawn at no
    more than twice its size. Its labels stay at least 9 px tall."""
    page = explorer
    before = page.viewport_size
    try:
        page.set_viewport_size(PHONE)
        open_state(page, server, "#fmt=e2m1fn")
        scroll, client, _, label = page.evaluate(GRID_SIZE)
        assert scroll <= client, f"e2m1fn's grid scrolls at 390 px: {scroll} px in a {client} px box"
        assert label >= 9, label
        open_state(page, server, "#fmt=e4m3fn")
        scroll, client, _, label = page.evaluate(GRID_SIZE)
        assert scroll > client and label >= 9, (scroll, client, label)
        page.set_viewport_size({"width": 1280, "height": 900})
        open_state(page, server, "#fmt=e2m1fn")
        _, client, drawn, label = page.evaluate(GRID_SIZE)
        assert drawn < client and label <= 2 * 11, (drawn, client, label)
    finally:
        page.set_viewport_size(before)
    check_page(page)


def test_the_grid_fades_where_its_box_hides_more_on_a_phone(explorer, server):  # noqa: F811
    """At 390 px the grid's box fades out at each side past which it hides more of the grid:
    the right side at the left end, the left side with the largest code in view, neither for a
    grid that fits."""
    page = explorer
    before = page.viewport_size
    box = "document.getElementById('fx-grid-box')"
    style = f"getComputedStyle({box})"
    fade = lambda: page.evaluate(f"[{box}.dataset.fade, {style}.maskImage || {style}.webkitMaskImage]")  # noqa: E731
    page.set_viewport_size(PHONE)
    try:
        open_state(page, server, "#fmt=e4m3fn&code=0x7E")  # 448, at the right end
        sides, mask = fade()
        assert sides == "left" and mask != "none", (sides, mask)
        page.evaluate(f"{box}.scrollLeft = 0")
        page.wait_for_function(f"{box}.dataset.fade === 'right'", timeout=5_000)
        assert fade()[1] != "none"
        page.evaluate(f"{box}.scrollLeft = {box}.scrollWidth / 3")
        page.wait_for_function(f"{box}.dataset.fade === 'left right'", timeout=5_000)
        open_state(page, server, "#fmt=e2m1fn")
        assert fade() == ["", "none"]
    finally:
        page.set_viewport_size(before)
    check_page(page)


WHOLE_PARTS = """() => [...document.querySelectorAll('#fx-round .fx-whole')].map((span) => {
    const tops = new Set([...span.getClientRects()].map((r) => Math.round(r.top)));
    return [span.textContent, tops.size];
})"""


def test_a_probabilitys_overflow_rule_does_not_break_inside_on_a_phone(explorer, server):  # noqa: F811
    """At 390 px the overflow rule after a probability ("(saturating)") stays on one line: the
    cell, where an exact fraction may break anywhere, does not break it before its ")"."""
    page = explorer
    before = page.viewport_size
    page.set_viewport_size(PHONE)
    try:
        open_state(page, server, "#fmt=e4m3fn&x=464")
        parts = page.evaluate(WHOLE_PARTS)
        assert any(text == "(saturating)" for text, _ in parts), parts
        broken = [text for text, lines in parts if lines > 1]
        assert not broken, broken
    finally:
        page.set_viewport_size(before)
    check_page(page)


def test_an_inf_result_has_an_infinite_error(explorer, server):  # noqa: F811
    """e5m2 rounds 61440 up to inf in two modes: that row's errors read inf, not NaN; NaN is
    only for a NaN result; inf rounded to inf is exact, and saturated to max it is off by inf."""
    page = explorer
    open_state(page, server, "#fmt=e5m2&x=61440")

    def errors(result: str) -> list[str]:
        row = page.locator(f'#fx-round tbody tr:has(td.fx-result[data-value="{result}"])')
        return [row.locator("td").nth(i).inner_text() for i in (3, 4)]

    assert float(round_to(61440.0, "e5m2", "nearest_even")) == math.inf
    assert errors("inf") == ["inf", "inf"]
    assert errors("57344") == ["4096", "0.0666667"]
    page.fill("#fx-x", "inf")
    assert errors("inf") == ["0", "0"] and errors("57344") == ["inf", "1"]
    page.fill("#fx-x", "nan")
    assert errors("NaN") == ["NaN", "NaN"]
    check_page(page)


def test_a_format_with_the_fields_of_a_preset_is_called_by_its_name(explorer, server):  # noqa: F811
    """bf16 named by its fields, or the page's default, is "bf16" in the sentences, not "e8m7"."""
    page = explorer
    count = f"{finite_count(FORMATS['bf16']):,}"
    for hash_ in ("#e=8&m=7&bias=127&specials=ieee&code=0x3F80", "#fmt=bf16&code=0x3F80", ""):
        open_state(page, server, hash_)
        assert page.input_value("#fx-preset") == "bf16"
        assert page.locator("#fx-specials-text").inner_text().startswith("bf16: 16 bits"), hash_
        assert f"bf16 has {count} finite values" in page.locator("#fx-grid").inner_text(), hash_
    page.fill("#fx-exp", "5")
    page.press("#fx-exp", "Enter")
    page.fill("#fx-man", "10")
    page.press("#fx-man", "Enter")
    assert page.locator("#fx-specials-text").inner_text().startswith("fp16:")
    check_page(page)
