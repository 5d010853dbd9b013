"""Every figure the notebooks hold fits the website's text column: each PNG output of notebooks/,
solutions/ and exercises/ is at most ``COLUMN_PX`` pixels wide on the page, so that a page shows it
at its own size, its text as legible as it was drawn (nbhelpers.plots makes every figure that wide
at most; tests/test_plots_column.py holds each helper to it). A figure saved sharp for high-DPI
screens (nbhelpers.plots.sharp_png) has ``PIXEL_RATIO`` times the pixels each way, and its size on
the page, those pixels divided by ``PIXEL_RATIO``, in the output's metadata."""

import base64
import struct
from pathlib import Path

import nbformat
import pytest

from nbhelpers.plots.style import COLUMN_PX, PIXEL_RATIO

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_sizes(path: Path) -> list[tuple[int, int, int]]:
    """(cell index, width, height) on the page of every PNG output of a notebook: the size in the
    output's metadata where it has one (a figure saved with PIXEL_RATIO times the pixels, whose
    pixels must then be that size times PIXEL_RATIO), else the PNG's size in pixels."""
    out = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {}).get("image/png")
            if data is None:
                continue
            png = base64.b64decode("".join(data))
            assert png[:8] == PNG_MAGIC, f"{path.name}, cell {i}: not a PNG"
            width, height = struct.unpack(">II", png[16:24])
            shown = output.get("metadata", {}).get("image/png", {})
            if "width" in shown or "height" in shown:
                size = (shown.get("width"), shown.get("height"))
                assert size == (width // PIXEL_RATIO, height // PIXEL_RATIO), (
                    f"{path.name}, cell {i}: a {width} x {height} PNG shown at {size}, "
                    f"not at 1/{PIXEL_RATIO} of its pixels"
                )
                width, height = size
            out.append((i, width, height))
    return out


def test_the_notebooks_are_found():
    assert len([p for p in NOTEBOOKS if p.parent.name == "notebooks"]) >= 11


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_figure_fits_the_column(path):
    wide = [(cell, width, height) for cell, width, height in png_sizes(path) if width > COLUMN_PX]
    assert not wide, (
        f"{path.relative_to(ROOT)}: figures wider than the {COLUMN_PX}-pixel column (cell, width, height): {wide}; "
        "make them with nbhelpers.plots (plots.column_figsize, plots.ColumnLayout) and run the notebook again"
    )
