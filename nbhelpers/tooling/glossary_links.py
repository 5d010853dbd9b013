"""Link each glossary term from its first use in each chapter's prose to its entry on the glossary
page (``site/glossary.md``)::

    python -m nbhelpers.tooling.glossary_links            # (re)write the links in notebooks/
    python -m nbhelpers.tooling.glossary_links --check    # exit 1 if a notebook is out of date

:data:`TERMS` is the whole mapping: each term's anchor on the glossary page and the regular
expressions that find it in a chapter's markdown. For every ``notebooks/*.ipynb`` and every term,
the first match in the chapter's markdown cells becomes ``[text](../site/glossary.md#anchor)``,
the link form that works on GitHub, in JupyterLab and, rewritten by ``site/conf.py``'s
``link_site_pages``, on the website. Only prose is linked: never text inside headings, code
(inline or fenced), math, tables, raw HTML tags, existing links, or a citation that the site links
to the references page (``site/citations.py``); code cells are never touched.

The result depends on the prose alone, so a second run changes nothing: a run first takes out the
links it would make (a link to the glossary whose text is a match of its term's patterns), then
links each term's first use again. A link to the glossary written by hand, with other text, is
kept, and its term gets no second link in that chapter. A line that a link makes longer than
:data:`MAX_COLUMNS` is broken at a space outside any code, math or link, as a writer would.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "site" / "glossary.md"
LINK_TARGET = "../site/glossary.md"  # from notebooks/, where the repository keeps the page
MAX_COLUMNS = 100  # the house limit for markdown lines


@dataclass(frozen=True)
class Term:
    """One entry of the glossary: its anchor there, the patterns that find it in prose, and the
    chapters (two-digit numbers) where those patterns mean something else and are left alone."""

    anchor: str
    patterns: tuple[str, ...]
    skip_chapters: tuple[str, ...] = ()


# In the glossary page's order. A space in a pattern matches any run of whitespace, so a term
# broken over two lines is found (a lookbehind, which must have a fixed width, says `\s`).
# Patterns are case-sensitive; terms that open a sentence list both cases. Where two terms could
# match the same words, the longer one comes first in this table (``dynamic loss scaling``
# before ``loss scaling``): a linked span is not linked again.
TERMS: tuple[Term, ...] = (
    # --- formats and rounding
    Term("eps", (r"machine epsilon",)),
    Term("unit-roundoff", (r"unit roundoff",)),
    Term("ulp", (r"unit in the last place", r"\bulps?\b")),
    Term("binade", (r"\bbinades?\b",)),
    Term("subnormal", (r"\b[Ss]ubnormals?\b",)),
    Term(
        "round-to-nearest-even",
        (r"\b[Rr]ound(?:ing|s|ed)?[ -]to[ -]nearest[ -]even\b", r"\bnearest[ -]even\b", r"\bties to even\b"),
    ),
    Term("stochastic-rounding", (r"\b[Ss]tochastic rounding\b", r"\brounded stochastically\b")),
    Term("saturation", (r"\b(?:non-)?[Ss]aturat(?:ion|ing|es|e)\b",)),
    Term("fn-fnu-fnuz", (r"\be[2-8]m[0-7]fnu?z?\b", r"\bfnuz?\b")),
    # --- scales
    Term("amax", (r"\bamax(?:es)?\b",)),
    Term("per-tensor-scale", (r"\b[Pp]er[ -]tensor\b",)),
    Term(
        "per-channel-scale",
        (
            r"\b[Pp]er-(?:row|column|channel|output-channel)\b",
            r"\b[Pp]er (?:row|column|channel|output channel)(?= scal| int8| fp8| e4m3)",
        ),
    ),
    Term("per-token-scale", (r"\b[Pp]er-token(?! loss)\b", r"\b[Pp]er token(?= scal| int8| fp8| e4m3)")),
    Term(
        "per-block-scale",
        # "per block" and "per group" alone also count work per thread block or per fused group
        (r"\b[Pp]er-(?:K-)?block\b(?! digit)", r"\b[Bb]lock-scaled\b", r"\bscales? per (?:block|group)\b"),
    ),
    Term("delayed-and-current-scaling", (r"\b[Dd]elayed scal(?:ing|es?)\b", r"\b[Cc]urrent scal(?:ing|es?)\b")),
    Term(
        "scale",
        (r"(?<!log\s)(?<!loss\s)(?<!static\s)(?<!dynamic\s)(?<![-/])\bscales?\b(?![-/])",),
        # chapter 05's scale is the loss scale, a glossary entry of its own
        skip_chapters=("02", "03", "04", "05"),
    ),
    Term("mx", (r"\bMX(?:FP[468])?\b(?! v1)(?!\))",)),
    Term("nvfp4", (r"\bNVFP4\b",)),
    # --- accumulation and summation
    Term("gamma-n", (r"\ba-priori (?:error )?bound\b",)),
    Term("pairwise-summation", (r"\b[Pp]airwise(?: summation| sum)?\b",)),
    Term("kahan-summation", (r"\bKahan(?: summation|-compensated(?: updates)?| compensation)?\b",)),
    Term("promotion", (r"\b[Pp]romot(?:ion|ing|es|ed|e)\b",)),
    Term("fast-accumulation", (r"\b[Ff]ast accumulation\b",)),
    Term("split-k", (r"\b[Ss]plit-K\b",)),
    Term("epilogue", (r"\b[Ee]pilogues?\b",)),
    # --- training
    Term("master-weights", (r"\b[Mm]aster weights?\b",)),
    Term(
        "dynamic-loss-scaling",
        (r"\b[Dd]ynamic loss scaling\b", r"\b[Dd]ynamic (?:loss )?scaler\b", r"\b[Dd]ynamic scale\b"),
        skip_chapters=("12",),  # dynamic (per-token) activation scales there
    ),
    Term("loss-scaling", (r"\b[Ll]oss scaling\b",)),
    # --- GPU and kernels
    Term("coalescing", (r"\b(?:un)?[Cc]oalesc(?:ed|ing|e)\b",)),
    Term("sector", (r"\b(?:32-byte )?sectors?\b",)),
    Term("occupancy", (r"\b[Oo]ccupancy\b",)),
    Term("tile", (r"\btiles?\b",)),
    Term("grouped-gemm", (r"\b[Gg]rouped GEMMs?\b",)),
    Term("arithmetic-intensity", (r"\b[Aa]rithmetic intensity\b",)),
    Term("roofline", (r"\b[Rr]oofline\b",)),
    Term("littles-law", (r"\bLittle's law\b",)),
    # --- inference
    Term("w4a16", (r"\bW4A16\b",)),
    Term("w8a8", (r"\bW8A8\b",)),
    Term("gptq", (r"\bGPTQ\b",)),
    Term("awq", (r"\bAWQ\b",)),
    Term("smoothquant", (r"\bSmoothQuant\b",)),
    Term("kv-cache", (r"\bKV[ -]cache\b",)),
)

ANCHOR = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# the links this tool writes: [text](../site/glossary.md#anchor), text without brackets
GLOSSARY_LINK = re.compile(r"\[([^\[\]]+)\]\(" + re.escape(LINK_TARGET) + r"#([a-z0-9-]+)\)")


def _compiled(term: Term) -> re.Pattern:
    """One alternation of the term's patterns, a space in them matching any run of whitespace."""
    whitespace = r"\s+"
    return re.compile("|".join("(?:" + p.replace(" ", whitespace) + ")" for p in term.patterns))


# --- what may be linked -----------------------------------------------------------------------

_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}(?:[ \t]|$)")
_TABLE_ROW = re.compile(r"^[ \t]*\|")
_BLOCK_START = re.compile(r"(?:[-*+]|\d+[.)])(?:[ \t]|$)|[#>|=]|---|\*\*\*")
_INLINE = re.compile(
    r"(`+).*?\1"  # a code span
    r"|\$\$.*?\$\$|\$[^$\n]+\$"  # math
    r"|!?\[[^\[\]]*\]\([^()\s]*(?:\([^()\s]*\)[^()\s]*)*\)"  # a link or an image
    r"|\[[^\[\]]*\]\[[^\[\]]*\]"  # a reference link
    r"|<[^<>\n]+>"  # an HTML tag, an autolink
    r"|https?://\S+|\b[\w.-]+\.(?:com|org|io)/\S*",  # a bare address
    re.DOTALL,
)


def _load_citations():
    """site/citations.py, the table of the citations the site links (read by path: it belongs to
    the website, not to this package)."""
    path = ROOT / "site" / "citations.py"
    spec = importlib.util.spec_from_file_location("course_site_citations", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def protected_spans(text: str, citations=None) -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets of a markdown cell's text that must not be linked: fenced code
    blocks, headings, table rows, code spans, math, links, HTML tags and addresses, and the
    citations of ``site/citations.py`` (when its module is given)."""
    spans = []
    at, fenced = 0, None
    for line in text.splitlines(keepends=True):
        fence = _FENCE.match(line)
        if fenced is not None or fence or _HEADING.match(line) or _TABLE_ROW.match(line):
            spans.append((at, at + len(line)))
            if fence:
                fenced = None if fenced == fence.group(1) else (fenced or fence.group(1))
        at += len(line)
    spans += [m.span() for m in _INLINE.finditer(text)]
    if citations is not None:
        spans += [(c.start, c.end) for c in citations.find_citations(text)]
    return sorted(spans)


def _overlaps(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return any(a < end and start < b for a, b in spans)


# --- one chapter --------------------------------------------------------------------------------


def unlink(text: str) -> str:
    """Take out the links this tool makes: a glossary link whose text its term's patterns match
    (in full) is replaced by its text. Other links, to the glossary or elsewhere, stay."""
    by_anchor = {term.anchor: _compiled(term) for term in TERMS}

    def plain(match: re.Match) -> str:
        pattern = by_anchor.get(match.group(2))
        return match.group(1) if pattern is not None and pattern.fullmatch(match.group(1)) else match.group(0)

    return GLOSSARY_LINK.sub(plain, text)


def _fit_lines(text: str, changed: list[tuple[int, int]]) -> str:
    """Break the lines that hold part of a span of `changed` and run past MAX_COLUMNS, at the last
    space that leaves the line short enough and lies outside code, math and links (a soft line
    break: the paragraph reads the same). The continuation keeps the line's indentation, or the
    indentation of a list item's text."""
    lines = text.splitlines(keepends=True)
    out, at = [], 0
    for line in lines:
        touched = any(a < at + len(line) and at < b for a, b in changed)
        at += len(line)
        while touched and len(line.rstrip("\n")) > MAX_COLUMNS:
            body = line.rstrip("\n")
            item = re.match(r"^([ \t]*)(?:[-*+]|\d+\.)[ \t]+", body)
            indent = " " * len(item.group(0)) if item else re.match(r"^[ \t]*", body).group(0)
            spans = [m.span() for m in _INLINE.finditer(body)]
            cuts = [
                i
                for i in range(len(body))
                if body[i] == " "
                and len(indent) < i <= MAX_COLUMNS
                and not _overlaps(i, i + 1, spans)
                and body[:i].strip()
                and not re.match(r"^[ \t]*(?:[-*+]|\d+\.)$", body[:i])
            ]
            # a continuation must not start what markdown reads as a new block, nor with a number
            # ("chapter 05" stays on one line)
            cuts = [i for i in cuts if not _BLOCK_START.match(body[i + 1 :]) and not body[i + 1 : i + 2].isdigit()]
            if not cuts:
                break  # nothing to break at: left long, the test of line lengths names it
            cut = cuts[-1]
            out.append(body[:cut] + "\n")
            line = indent + body[cut + 1 :] + line[len(body) :]
        out.append(line)
    return "".join(out)


def link_cells(sources: list[str], chapter: str, citations=None) -> tuple[list[str], dict[str, int]]:
    """Link the first use of each term in a chapter's markdown cells (their sources, in order).
    Returns the new sources and, for each anchor linked, the index of the cell its link is in."""
    sources = [unlink(source) for source in sources]
    linked = {m.group(2) for source in sources for m in GLOSSARY_LINK.finditer(source)}  # by hand
    placed: dict[str, int] = {}
    inserted: dict[int, list[tuple[int, int]]] = {}  # cell -> spans of the links made so far
    for term in TERMS:
        if term.anchor in linked or chapter in term.skip_chapters:
            continue
        pattern = _compiled(term)
        for index, source in enumerate(sources):
            spans = protected_spans(source, citations) + inserted.get(index, [])
            match = next((m for m in pattern.finditer(source) if not _overlaps(*m.span(), spans)), None)
            if match is None:
                continue
            link = f"[{match.group(0)}]({LINK_TARGET}#{term.anchor})"
            sources[index] = source[: match.start()] + link + source[match.end() :]
            shift = len(link) - len(match.group(0))
            inserted[index] = [
                (a + shift if a >= match.end() else a, b + shift if b >= match.end() else b)
                for a, b in inserted.get(index, [])
            ] + [(match.start(), match.start() + len(link))]
            placed[term.anchor] = index
            break
    for index, spans in inserted.items():
        sources[index] = _fit_lines(sources[index], spans)
    return sources, placed


def chapter_number(path: Path) -> str:
    match = re.match(r"(\d\d)_", path.name)
    if not match:
        raise ValueError(f"{path.name}: a chapter notebook's name starts with its number, like 01_float_formats")
    return match.group(1)


def link_notebook(path: Path, write: bool = True, citations=None) -> tuple[bool, dict[str, int]]:
    """Link the glossary terms of one chapter notebook. Returns whether its file would change,
    and the anchors linked. Only markdown cells' sources change; the file is written only if it
    changes and `write` is true."""
    import nbformat

    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    cells = [cell for cell in notebook.cells if cell.cell_type == "markdown"]
    sources, placed = link_cells([cell.source for cell in cells], chapter_number(path), citations)
    changed = False
    for cell, source in zip(cells, sources, strict=True):
        if cell.source != source:
            cell.source = source
            changed = True
    if changed and write:
        nbformat.write(notebook, path)
    return changed, placed


# --- the glossary page ---------------------------------------------------------------------------


def glossary_anchors(text: str | None = None) -> list[str]:
    """The anchors of the glossary page's entries, in order: its ``(anchor)=`` lines."""
    if text is None:
        text = GLOSSARY.read_text(encoding="utf-8")
    return re.findall(r"^\(([^)\s]+)\)=[ \t]*$", text, flags=re.MULTILINE)


def check_terms(anchors: list[str]) -> None:
    """Every term's anchor is well formed, used once, and an entry of the glossary page."""
    names = [term.anchor for term in TERMS]
    bad = [a for a in names if not ANCHOR.fullmatch(a)]
    if bad:
        raise ValueError(f"anchors must be lowercase words joined by hyphens: {bad}")
    twice = sorted({a for a in names if names.count(a) > 1})
    if twice:
        raise ValueError(f"an anchor is used by more than one term: {twice}")
    missing = [a for a in names if a not in anchors]
    if missing:
        raise ValueError(f"terms whose anchor is not an entry of {GLOSSARY.name}: {missing}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook would change")
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapter notebooks (default: every notebooks/*.ipynb)")
    args = parser.parse_args(argv)
    check_terms(glossary_anchors())
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not paths:
        parser.error(f"no notebooks in {ROOT / 'notebooks'}")
    citations = _load_citations()
    stale = []
    for path in paths:
        changed, placed = link_notebook(path, write=not args.check, citations=citations)
        state = ("out of date" if args.check else "updated") if changed else "up to date"
        print(f"{path.name}: {len(placed)} terms linked, {state}")
        if changed:
            stale.append(path.name)
    if args.check and stale:
        print(f"run `python -m nbhelpers.tooling.glossary_links` to link: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
