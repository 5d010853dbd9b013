"""Citations in the chapters' prose, linked to their entries on the references page.

The chapters cite as prose ("Micikevicius et al. 2022", "Higham ch. 4", "the PTX ISA"); the
references page (site/references.md) lists each work once, under an anchor. :data:`WORKS` is the
one table that joins the two: each work's anchor and the regular expressions that recognise its
citations as the chapters write them. :func:`link_citations` (a ``doctree-resolved`` handler,
connected in conf.py) turns every match in a page's prose into a link to the entry.

How a pattern is matched: against the text of a whole paragraph (or table cell, list item's
paragraph, caption), with every whitespace character read as one space, so a citation broken over
two lines matches like one on a single line, and with the text of inline code, emphasis and math
included, so a pattern can look at its neighbours (``(?<=ml_dtypes )README``,
``Dettmers et al\\.(?=, 8-bit Optimizers)``). Only the matched text itself becomes the link, and
only where all of it is plain prose: text inside code, math, headings and existing links is left
alone. Patterns of different works must not match the same text; the first (leftmost) match
wins, as in one alternation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REFERENCES_DOC = "references"  # the docname of site/references.md


@dataclass(frozen=True)
class Work:
    """One entry of the references page: its anchor there, and the patterns of its citations."""

    anchor: str
    patterns: tuple[str, ...]


# Sorted as the references page is: papers and books by first author, then specifications,
# documentation and software by name.
WORKS: tuple[Work, ...] = (
    # --- papers and books ---------------------------------------------------------------------
    Work(
        "boehm-2022",
        (r"Simon Boehm's \"How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance: a Worklog\" \(2022\)",),
    ),
    Work(
        "connolly-2021", (r"Connolly, Higham,? (?:&|and) Mary(?:, SIAM J\. Sci\. Comput\. 43)?(?:,? 2021|,? \(2021\))",)
    ),
    Work(
        "deepseek-v3-2024",
        (
            r"DeepSeek-V3 \(technical report, 2024\)",
            r"(?:[Tt]he )?DeepSeek-V3(?:'s)? (?:technical )?report",
            r"(?<=per )its technical report",
            r"(?<=\. )The technical report(?='s node-limited routing)",
        ),
    ),
    Work("dettmers-2022-8-bit-optimizers", (r"Dettmers et al\.(?=, 8-bit Optimizers via Block-wise Quantization)",)),
    Work("dettmers-2022-llm-int8", (r"Dettmers et al\.,? 2022",)),
    Work(
        "fasi-2021",
        (
            r"Fasi, Higham, Mikaitis,? (?:&|and) Pranesh(?: 2021)?",
            r"Fasi et al\.(?: 2021)?",
        ),
    ),
    Work("frantar-2022", (r"Frantar et al\.,? 2022",)),
    Work("frantar-2024", (r"Frantar et al\.,? 2024", r"Marlin's README")),
    Work(
        "higham-2002",
        (
            r"Higham(?=, Accuracy and Stability of Numerical Algorithms)",
            r"Higham ch\. \d+",
        ),
    ),
    Work("higham-mary-2019", (r"Higham and Mary(?= \(A new approach to probabilistic rounding error analysis)",)),
    Work(
        "hwu-2022",
        (
            r"Hwu, Kirk and El Hajj",
            r"(?<!El Hajj, )Programming Massively Parallel Processors",
            r"(?<=the )PMPP textbook",
        ),
    ),
    Work("khattak-mikaitis-2025", (r"Khattak (?:&|and) Mikaitis(?: \(2025\)| 2025)?",)),
    Work("lin-2023", (r"Lin et al\.,? 2023",)),
    # Micikevicius et al. wrote two of the works cited: the FP8 paper is always cited with its
    # year or its title, so a citation without either is the 2018 paper
    Work("micikevicius-2018", (r"Micikevicius et al\.(?!,? (?:2022|\"FP8 Formats|FP8 Formats))",)),
    Work("micikevicius-2022", (r"Micikevicius et al\.,? 2022",)),
    Work("nvidia-2025-nvfp4", (r"NVIDIA, \"Pretraining Large Language Models with NVFP4\", 2025",)),
    Work("osama-2023", (r"Osama, Merrill, Cecka, Garland and Owens, PPoPP 2023",)),
    Work("park-2026", (r"Park et al\.,? 2026",)),
    Work("rajbhandari-2020", (r"Rajbhandari et al\.,? 2020",)),
    Work("xiao-2023", (r"Xiao et al\.,? 2023",)),
    Work("zamirai-2020", (r"Zamirai et al\.",)),
    # --- specifications, documentation and software ----------------------------------------------
    Work("a100-whitepaper", (r"NVIDIA's A100 (?:Tensor Core GPU Architecture )?whitepaper",)),
    Work("tvm-19432", (r"apache/tvm#19432",)),
    Work("cccl-ptx", (r"NVIDIA's CCCL",)),
    Work(
        "cublas-12-9-blog",
        (
            r"NVIDIA's cuBLAS 12\.9 blog post",
            r"NVIDIA's technical blog post \"Boosting Matrix Multiplication Speed and Flexibility"
            r" with NVIDIA cuBLAS 12\.9\"",
        ),
    ),
    Work("cublas", (r"cuBLAS documentation",)),
    Work("cuda-programming-guide", (r"(?:NVIDIA's )?CUDA C\+\+ Programming Guide",)),
    Work("cuda-library-samples-180", (r"NVIDIA/CUDALibrarySamples#180",)),
    Work("cuda-library-samples-256", (r"NVIDIA/CUDALibrarySamples#256",)),
    Work("cuda-library-samples-310", (r"NVIDIA/CUDALibrarySamples#310",)),
    Work("cutlass", (r"CUTLASS's documentation of its sm_90 kernels",)),
    Work(
        "deepep",
        (
            r"DeepEP's README",
            r"(?<=DeepSeek's library for both \()its README",
            r"(?<=without the NVLink forwarding \()README",
            r"(?<=The )README(?= tests with \"4096 tokens per batch\")",
        ),
    ),
    Work("deepgemm", (r"DeepGEMM's README",)),
    Work("flashinfer", (r"FlashInfer's (?:documentation and )?blog(?: post)?",)),
    Work("graphcore-tensorflow", (r"Graphcore's TensorFlow user guide",)),
    Work("h100-whitepaper", (r"NVIDIA's H100 (?:Tensor Core GPU Architecture )?whitepaper",)),
    Work("h200", (r"NVIDIA's H200 specification",)),
    Work("hopper-tuning-guide", (r"Hopper Tuning Guide",)),
    Work("ieee-754-2019", (r"IEEE 754(?:-2019)?",)),
    Work("intel-sdm", (r"Intel's Software Developer's Manual",)),
    Work("llama-3", (r"Meta's (?:published )?model configuration",)),
    Work("llvm-nvptx-builtins", (r"LLVM's list of NVPTX builtins",)),
    Work("megatron-core", (r"Megatron Core(?='s `?DistributedDataParallelConfig)",)),
    Work("ml-dtypes", (r"(?<=ml_dtypes )README",)),
    Work("ml-dtypes-401", (r"pull request #401(?= on GitHub, jax-ml/ml_dtypes)",)),
    Work("nsight-compute", (r"Nsight Compute", r"NVIDIA's occupancy calculator")),
    Work("mig-parted-120", (r"NVIDIA/mig-parted#120",)),
    Work("ocp-ofp8", (r"OCP 8-bit floating point specification",)),
    Work(
        "ocp-mx",
        (
            r"OCP Microscaling Formats \(MX\) v1\.0 specification",
            r"OCP Microscaling \(MX\) v1\.0",
            r"OCP MX v1\.0",
            r"MX v1\.0 specification",
        ),
    ),
    Work("ptx-isa", (r"(?:NVIDIA's )?PTX ISA",)),
    Work("pytorch-gradscaler", (r"PyTorch's documentation(?= of `?torch\.amp\.GradScaler)",)),
    Work("pytorch-numerical-accuracy", (r"PyTorch's notes on numerical accuracy",)),
    Work("pytorch-154680", (r"pytorch/pytorch#154680",)),
    Work("pytorch-178817", (r"pytorch/pytorch#178817",)),
    Work("torchao-1835", (r"pytorch/ao#1835",)),
    Work("torchao-4364", (r"pytorch/ao#4364",)),
    Work("torchao", (r"torchao 0\.18's source",)),
    Work(
        "transformer-engine",
        (
            r"(?<=read in )release 2\.18",
            r"(?<=Transformer Engine \()release 2\.18",
            r"its delayed-scaling guide",
        ),
    ),
    Work("triton-docs", (r"Triton's documentation",)),
    Work("triton-tutorials", (r"Triton's (?:own )?tutorials", r"Triton's (?:persistent-)?matmul tutorial")),
    Work("triton-puzzles", (r"(?:Sasha Rush's )?Triton-Puzzles",)),
)


@dataclass(frozen=True)
class Citation:
    """One citation found in a text: the work's anchor and where the match lies."""

    anchor: str
    start: int
    end: int
    text: str


def _compile(works: tuple[Work, ...]) -> re.Pattern:
    """One alternation of every pattern, each in a named group that says its work."""
    anchors = [work.anchor for work in works]
    if len(set(anchors)) != len(anchors):
        raise ValueError(f"an anchor is used twice in WORKS: {sorted(a for a in anchors if anchors.count(a) > 1)}")
    groups = []
    for i, work in enumerate(works):
        for j, pattern in enumerate(work.patterns):
            re.compile(pattern)  # a broken pattern names itself here, not inside the alternation
            groups.append(f"(?P<w{i}_{j}>{pattern})")
    return re.compile("|".join(groups))


_ALL = _compile(WORKS)


def find_citations(text: str) -> list[Citation]:
    """The citations in `text` (its whitespace read as single spaces), leftmost first."""
    flat = re.sub(r"\s", " ", text)  # one character for one: the offsets stay those of `text`
    found = []
    for match in _ALL.finditer(flat):
        name = next(name for name, value in match.groupdict().items() if value is not None)
        work = WORKS[int(name[1:].split("_")[0])]
        found.append(Citation(work.anchor, match.start(), match.end(), text[match.start() : match.end()]))
    return found


def _join_text_nodes(doctree) -> None:
    """MyST gives each line of a paragraph its own text node: join neighbours, so that a
    citation broken over two lines is one text node."""
    from docutils import nodes

    for element in list(doctree.findall(nodes.Element)):
        i = 0
        while i < len(element.children) - 1:
            a, b = element.children[i], element.children[i + 1]
            if isinstance(a, nodes.Text) and isinstance(b, nodes.Text):
                element.replace(a, nodes.Text(a.astext() + b.astext()))
                element.remove(b)
            else:
                i += 1


def _in_prose(text) -> bool:
    """Whether a text node is prose a citation link may be made in: not inside code, math, a
    heading, raw HTML or a link."""
    from docutils import nodes

    parent = text.parent
    while parent is not None:
        if isinstance(
            parent,
            (
                nodes.reference,
                nodes.literal,
                nodes.literal_block,
                nodes.title,
                nodes.raw,
                nodes.math,
                nodes.math_block,
                nodes.FixedTextElement,
            ),
        ):
            return False
        parent = parent.parent
    return True


def entry_texts(references_md: str) -> dict[str, str]:
    """Anchor -> the text of its entry in references.md (a ``(anchor)=`` line, then the entry's
    paragraph), as plain text: markdown links reduced to their text, bare addresses dropped."""
    entries = {}
    for anchor, body in re.findall(r"^\(([^)\s]+)\)=\n(.+?)(?:\n\s*\n|\Z)", references_md, re.MULTILINE | re.DOTALL):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", body)  # [arXiv:...](https://...) -> arXiv:...
        text = re.sub(r",?\s*<https?://[^>]*>", "", text)  # <https://...>
        entries[anchor] = " ".join(text.replace("*", "").replace("`", "").split()).rstrip(",")
    return entries


def link_citations(app, doctree, docname) -> None:
    """Every citation in a page's prose becomes a link to its work's entry on the references
    page (not on the references page itself)."""
    from docutils import nodes

    if docname == REFERENCES_DOC or REFERENCES_DOC not in app.env.found_docs:
        return
    page = app.builder.get_relative_uri(docname, REFERENCES_DOC)
    # the entry's text is the link's title: a reader sees the work before following the link
    titles = entry_texts((Path(app.srcdir) / f"{REFERENCES_DOC}.md").read_text(encoding="utf-8"))
    _join_text_nodes(doctree)
    # the outermost elements that hold text (a paragraph, a table cell's paragraph, a caption):
    # each is matched as one string, so a pattern can see the words around a citation
    blocks = [
        element for element in doctree.findall(nodes.TextElement) if not isinstance(element.parent, nodes.TextElement)
    ]
    for block in blocks:
        texts = list(block.findall(nodes.Text))
        whole, offsets, at = "", [], 0
        for text in texts:
            offsets.append(at)
            whole += text.astext()
            at += len(text.astext())
        by_node: dict[int, list[Citation]] = {}
        for citation in find_citations(whole):
            for k, text in enumerate(texts):
                start, end = offsets[k], offsets[k] + len(text.astext())
                if start <= citation.start and citation.end <= end:
                    if _in_prose(text):
                        by_node.setdefault(k, []).append(citation)
                    break
        for k, citations in by_node.items():
            text, base = texts[k], offsets[k]
            value, parts, last = text.astext(), [], 0
            for citation in citations:
                a, b = citation.start - base, citation.end - base
                parts.append(nodes.Text(value[last:a]))
                link = nodes.reference(
                    "",
                    "",
                    refuri=f"{page}#{citation.anchor}",
                    reftitle=titles.get(citation.anchor, ""),
                    classes=["citation-link"],
                    internal=True,
                )
                link += nodes.Text(value[a:b])
                parts.append(link)
                last = b
            parts.append(nodes.Text(value[last:]))
            parent = text.parent
            i = next(i for i, child in enumerate(parent.children) if child is text)  # Text == Text by value
            parent[i : i + 1] = parts
