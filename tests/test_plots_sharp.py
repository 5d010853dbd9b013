"""Figures sharp on high-DPI screens (nbhelpers.plots.style.sharp_png, sharp_inline_figures): a
notebook stores each figure of the course as a PNG of PIXEL_RATIO times the pixels each way, with
its size on the page in the output's metadata, so that it takes the room it took before; its
palette of 256 colours keeps every pixel close to the plain rendering and the file smaller than
the plain figure at half the pixels."""

import base64
import io
import struct

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import nbformat
import numpy as np
from helpers import inline_png_size
from IPython.core.pylabtools import print_figure
from PIL import Image

from nbhelpers import plots
from nbhelpers.plots.style import COLUMN_PX, PIXEL_RATIO, sharp_inline_figures, sharp_png


def small_figure():
    """A figure of the course: a few lines, a legend, a title, as wide as the column."""
    fig, ax = plots.subplots(height_ratio=0.35)
    x = np.linspace(0, 4, 200)
    for k, fmt in enumerate(("fp32", "bf16", "e4m3fn")):
        ax.plot(x, np.sin(x + k), color=plots.format_color(fmt), label=fmt)
    ax.set_title("three lines")
    plots.legend_below(ax)
    return fig


def rgba(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA")).astype(int)


def test_a_sharp_figure_has_twice_the_pixels_at_the_same_size_on_the_page():
    fig = small_figure()
    png, shown = sharp_png(fig)
    plain_1x = inline_png_size(fig)  # as the inline backend saved it before
    width, height = struct.unpack(">II", png[16:24])
    assert shown == {"width": width // PIXEL_RATIO, "height": height // PIXEL_RATIO}
    assert abs(shown["width"] - plain_1x[0]) <= 1 and abs(shown["height"] - plain_1x[1]) <= 1, (shown, plain_1x)
    assert 0.85 * COLUMN_PX <= shown["width"] <= COLUMN_PX
    # the palette: 256 colours at most, each pixel close to the plain rendering at the same dpi
    image = Image.open(io.BytesIO(png))
    assert image.mode == "P" and len(image.getcolors(256)) <= 256
    plain_2x = print_figure(fig, "png", dpi=fig.dpi * PIXEL_RATIO)
    assert struct.unpack(">II", plain_2x[16:24]) == (width, height)
    error = np.abs(rgba(png) - rgba(plain_2x)).max(axis=2)
    assert error.max() <= 40 and error.mean() < 2.0, (error.max(), error.mean())
    assert (error > 16).mean() < 0.01  # the large errors are in a few edge pixels
    # smaller than the plain figure at the old resolution
    assert len(png) < len(print_figure(fig, "png"))
    plt.close(fig)


def test_an_empty_figure_gives_nothing_and_outside_a_notebook_nothing_is_set():
    fig = plt.figure()
    assert sharp_png(fig) is None  # as IPython's own printers: nothing to show
    plt.close(fig)
    assert sharp_inline_figures() is False  # no IPython shell in this process


KERNEL_CELLS = [
    # a figure of a plot helper's kind, and one a notebook makes with the course's size and layout
    "from nbhelpers import plots\nfig, ax = plots.subplots(height_ratio=0.3)\nax.plot([0, 1], [0, 1]);",
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots(figsize=plots.column_figsize(0.3), layout=plots.ColumnLayout())\n"
    "ax.plot([1, 0]);",
    # a notebook that chose SVG keeps it
    '%config InlineBackend.figure_formats = ["svg"]\nfig, ax = plots.subplots(height_ratio=0.3)\nax.plot([0, 1]);',
]


def test_a_notebook_stores_the_figures_of_the_course_sharp():
    """In a Jupyter kernel, the figures a notebook makes with nbhelpers.plots are stored sharp with
    no setting in the notebook; a notebook that asked for SVG gets SVG."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in KERNEL_CELLS]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    for cell in nb.cells[:2]:
        [output] = [o for o in cell.outputs if o.output_type == "display_data"]
        png = base64.b64decode(output.data["image/png"])
        width, height = struct.unpack(">II", png[16:24])
        shown = output.metadata["image/png"]
        assert shown == {"width": width // PIXEL_RATIO, "height": height // PIXEL_RATIO}, shown
        assert 0.85 * COLUMN_PX <= shown["width"] <= COLUMN_PX
        assert Image.open(io.BytesIO(png)).mode == "P"
    [output] = [o for o in nb.cells[2].outputs if o.output_type == "display_data"]
    assert "image/svg+xml" in output.data and "image/png" not in output.data
    assert not [o for c in nb.cells for o in c.outputs if o.output_type in ("stream", "error")], "the cells printed"
