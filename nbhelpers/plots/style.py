"""The course's figure style: one colour per format everywhere, figures as wide as the text
column, legends off the data, axes handling, dash styles.

Every plot function of :mod:`nbhelpers.plots` takes its colours from here, so bf16 is the same
red in chapter 01's bit layouts and in chapter 05's loss-scale curve, and its size: every figure
is :data:`COLUMN_IN` inches wide, so that the notebook's figure (laid out at :data:`FIGURE_DPI`,
``bbox_inches="tight"``) is at most :data:`COLUMN_PX` pixels, the width of the website's text
column, and is shown at its own size, its text as large as it was drawn. Its PNG holds
:data:`PIXEL_RATIO` times as many pixels each way, with that size in the output's metadata, so
that a high-DPI screen shows it sharp (:func:`sharp_inline_figures`).
"""

from __future__ import annotations

import functools
import weakref

from matplotlib.layout_engine import ConstrainedLayoutEngine

from ..formats import FloatFormat, get_format

__all__ = [
    "COLUMN_PX",
    "FIGURE_DPI",
    "PIXEL_RATIO",
    "sharp_inline_figures",
    "sharp_png",
    "TIGHT_PAD_IN",
    "COLUMN_IN",
    "SMALLEST_FONT_PT",
    "column_figsize",
    "subplots",
    "ColumnLayout",
    "legend_below",
    "legend_columns",
    "under_axes",
    "wrap_text",
    "FORMAT_COLORS",
    "format_color",
    "line_color",
    "axes_or_new",
    "DASHES",
    "dashes_by_color",
    "EXTRA_COLORS",
    "distinct_colors",
]

FORMAT_COLORS = {
    "fp32": "#1f77b4",
    "tf32": "#17becf",
    "bf16": "#d62728",
    "fp16": "#ff7f0e",
    "e4m3fn": "#2ca02c",
    "e5m2": "#9467bd",
    "e2m3fn": "#8c564b",
    "e3m2fn": "#e377c2",
    "e2m1fn": "#7f7f7f",
    "e8m0fnu": "#bcbd22",
}


DASHES = ("-", "--", ":", "-.")

# colours for the second, third, ... line of one format in a figure that compares methods on it:
# none of them is a format's colour
EXTRA_COLORS = ("#000000", "#6a3d9a", "#1b9e77", "#a6761d", "#e7298a", "#66a61e")


#: The width in pixels of the website's text column (at a 1280 px window). A figure wider than
#: this is shrunk to fit, and its text with it; every figure of the course is at most this wide.
COLUMN_PX = 688
#: The resolution the notebooks' figures are laid out at: a figure's own dpi, matplotlib's
#: default of 100 (a 10 pt label is then about 14 pixels tall). A page, or JupyterLab, shows a
#: figure at its size at this dpi.
FIGURE_DPI = 100
#: How many pixels of a notebook's PNG make one pixel of the page, each way: the inline backend
#: saves the figures at FIGURE_DPI * PIXEL_RATIO dpi, with their size at FIGURE_DPI as the width
#: and height in the output's metadata (IPython's "retina" PNG), so that a screen with two device
#: pixels per CSS pixel draws every pixel of the figure and the page lays it out as before.
PIXEL_RATIO = 2
#: The margin that ``bbox_inches="tight"`` leaves around what a figure draws, on each side
#: (matplotlib's ``savefig.pad_inches``), in inches.
TIGHT_PAD_IN = 0.1
#: The width in inches of a figure that fills the column: what it draws (kept inside the figure
#: by :class:`ColumnLayout`) plus the two margins is COLUMN_PX pixels at FIGURE_DPI.
COLUMN_IN = COLUMN_PX / FIGURE_DPI - 2 * TIGHT_PAD_IN
#: The smallest font the figures use (legends, notes, labels on the data), in points: 11 pixels
#: at FIGURE_DPI.
SMALLEST_FONT_PT = 8


def sharp_png(fig, **kwargs) -> tuple[bytes, dict[str, int]] | None:
    """``fig`` as a notebook stores it: a PNG of :data:`PIXEL_RATIO` times the pixels of its size at
    its own dpi (``bbox_inches="tight"`` unless ``kwargs``, which go to matplotlib's
    ``print_figure``, say otherwise), with 256 colours at most, and the metadata that shows it at
    that size: ``{"width": w, "height": h}`` in pixels at the figure's dpi. None for a figure that
    draws nothing (as IPython's printers return).

    A line plot of the course holds a few thousand colours, all but a few hundred of them in the
    anti-aliased edges; a palette of 256 keeps every pixel within a few levels of its colour (the
    edges within about 30 of 255) and makes the PNG about a third of the size, so that a figure
    of twice the pixels weighs less than the plain one did."""
    import io

    from IPython.core.pylabtools import print_figure
    from PIL import Image

    kwargs.setdefault("bbox_inches", "tight")
    png = print_figure(fig, "png", dpi=fig.dpi * PIXEL_RATIO, **kwargs)
    if png is None:
        return None
    image = Image.open(io.BytesIO(png))
    width, height = image.size
    # FASTOCTREE is the method that keeps an alpha channel (a transparent figure stays so)
    palette = image.convert("RGBA").quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, format="png", optimize=True)
    return out.getvalue(), {"width": width // PIXEL_RATIO, "height": height // PIXEL_RATIO}


def _sharp_png_base64(fig, **kwargs):
    """:func:`sharp_png` as the shell's PNG formatter wants it: base64 text and the metadata."""
    from base64 import b64encode

    made = sharp_png(fig, **kwargs)
    if made is None:
        return None
    png, metadata = made
    return b64encode(png).decode("ascii"), metadata


def sharp_inline_figures() -> bool:
    """In a notebook, have the shell store every matplotlib figure it shows as :func:`sharp_png`
    makes it: twice the pixels each way (:data:`PIXEL_RATIO`), their size at the figure's dpi in
    the output's metadata, so that the figure takes the same room on the website and in JupyterLab
    as before and a high-DPI screen shows it sharp. It replaces the inline backend's PNG printer
    (plain or "retina"); a notebook that chose another format (``%config
    InlineBackend.figure_formats = ["svg"]``) keeps it.

    :func:`column_figsize` and :class:`ColumnLayout`, which size and lay out every figure of the
    course, call it, so a notebook need not. Returns whether figures are stored that way: False
    outside an IPython shell or when the shell prints figures in no PNG format."""
    try:
        from IPython import get_ipython
    except ImportError:  # a plain Python process: nothing shows figures
        return False
    shell = get_ipython()
    if shell is None:
        return False
    import matplotlib
    from matplotlib.figure import Figure

    if matplotlib.rcParams["backend"] in ("inline", "module://matplotlib_inline.backend_inline"):
        # The inline backend sets the shell's figure printers when it is first imported, which
        # pyplot does at its first figure: import it now, so that it does so before this, not
        # over it.
        import matplotlib_inline.backend_inline  # noqa: F401

    formatter = shell.display_formatter.formatters["image/png"]
    try:
        printer = formatter.lookup_by_type(Figure)
    except KeyError:  # figures are shown in another format: leave them so
        return False
    if getattr(printer, "func", None) is _sharp_png_base64:
        return True
    options = {}
    try:  # the inline backend's options for its printers (bbox_inches="tight")
        from matplotlib_inline.config import InlineBackend

        options = dict(InlineBackend.instance().print_figure_kwargs)
    except ImportError:
        pass
    formatter.for_type(Figure, functools.partial(_sharp_png_base64, **options))
    return True


def column_figsize(height_ratio: float = 0.6) -> tuple[float, float]:
    """(width, height) in inches of a figure as wide as the column, ``height_ratio`` times as tall
    as it is wide. In a notebook it also has the figures saved sharp for high-DPI screens, at the
    same size on the page (:func:`sharp_inline_figures`)."""
    if not height_ratio > 0:
        raise ValueError(f"height_ratio must be positive, got {height_ratio!r}")
    sharp_inline_figures()
    return (COLUMN_IN, COLUMN_IN * height_ratio)


def subplots(nrows: int = 1, ncols: int = 1, height_ratio: float = 0.6, **kwargs):
    """A new figure as wide as the column, ``height_ratio`` times as tall, laid out by
    :class:`ColumnLayout`: :func:`matplotlib.pyplot.subplots` with the course's size and layout
    (``kwargs``, e.g. ``sharex=True``, go to it). Returns ``(fig, axes)`` as it does.

    Panels that would sit side by side at a larger width are better stacked in rows here (each
    keeps the column's width)."""
    import matplotlib.pyplot as plt

    if "figsize" in kwargs or "layout" in kwargs:
        raise TypeError("subplots sets the figure's size and layout: give height_ratio instead")
    return plt.subplots(nrows, ncols, figsize=column_figsize(height_ratio), layout=ColumnLayout(), **kwargs)


def axes_or_new(ax, height_ratio: float = 0.6):
    """``ax`` itself, or the Axes of a new figure from :func:`subplots` (as wide as the column,
    ``height_ratio`` times as tall) when ``ax`` is None."""
    if ax is not None:
        return ax
    _, ax = subplots(height_ratio=height_ratio)
    return ax


# ---------------------------------------------------------------- legends under the axes

# legends placed by legend_below, each with the gap (points) between the x axis' labels and it
_BELOW: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _font_points(size) -> float:
    from matplotlib.font_manager import FontProperties

    return FontProperties(size=size).get_size_in_points()


def _x_decorations_points(ax) -> float:
    """An estimate, from the rc settings, of how far below the axes its x tick labels and x label
    reach (points): the place of a legend under the axes before a layout measures it."""
    import matplotlib as mpl

    rc = mpl.rcParams
    ticks = rc["xtick.major.size"] + rc["xtick.major.pad"] + 1.2 * _font_points(rc["xtick.labelsize"])
    label = rc["axes.labelpad"] + 1.2 * _font_points(rc["axes.labelsize"]) * max(1, ax.get_xlabel().count("\n") + 1)
    return ticks + (label if ax.get_xlabel() else 0.0)


def _text_width_points(text: str, fontsize) -> float:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    return max(
        text_to_path.get_text_width_height_descent(line, FontProperties(size=fontsize), ismath=False)[0]
        for line in str(text).split("\n")
    )


def legend_columns(labels, fontsize=SMALLEST_FONT_PT, width_in: float = COLUMN_IN - 0.8) -> int:
    """How many legend columns of ``labels`` fit side by side in ``width_in`` inches (at least 1)."""
    labels = [str(lab) for lab in labels]
    if not labels:
        return 1
    em = _font_points(fontsize)
    # handle, the gap after it, the text, the space between two columns (matplotlib's defaults)
    entry = (2.0 + 0.8 + 2.0) * em + max(_text_width_points(lab, fontsize) for lab in labels)
    return max(1, min(len(labels), int(width_in * 72 // entry)))


def legend_below(ax, handles=None, labels=None, gap: float = 6.0, **kwargs):
    """The legend of ``ax`` under its x axis, centred, off the data, in as many columns as the
    column's width holds (``ncols`` to choose). ``handles``, ``labels``: as for
    :meth:`matplotlib.axes.Axes.legend` (the Axes' own when None); other ``kwargs`` go to it
    (``title``, ``fontsize``, ...; the font is :data:`SMALLEST_FONT_PT` unless given).

    The legend hangs ``gap`` points under the axes' x tick labels and x label. An estimate from
    the font sizes places it; in a figure laid out by :class:`ColumnLayout` the layout measures
    the labels and moves it, and makes room for it in the figure."""
    from matplotlib.transforms import ScaledTranslation

    if handles is None and labels is None:
        handles, labels = ax.get_legend_handles_labels()
    elif labels is None:
        labels = [h.get_label() for h in handles]
    kwargs.setdefault("fontsize", SMALLEST_FONT_PT)
    if "ncols" not in kwargs and "ncol" not in kwargs:
        kwargs["ncols"] = legend_columns(labels, kwargs["fontsize"])
    args = () if handles is None else (handles, labels)
    legend = ax.legend(*args, loc="upper center", borderaxespad=0.0, **kwargs)
    below = (_x_decorations_points(ax) + gap) / 72
    inches = ax.get_figure(root=True).dpi_scale_trans
    legend.set_bbox_to_anchor((0.5, 0.0), ax.transAxes + ScaledTranslation(0, -below, inches))
    _BELOW[legend] = gap
    return legend


def under_axes(ax):
    """A place under everything ``ax`` draws below itself (its x tick labels, its x label, a legend
    of :func:`legend_below`), for ``xycoords`` of :meth:`matplotlib.axes.Axes.annotate`: ``xy=(0,
    0)`` is the lower left corner of that box, measured at every draw."""
    from matplotlib.transforms import Bbox

    def box(renderer):
        boxes = [ax.get_window_extent(renderer)]
        axis = ax.xaxis.get_tightbbox(renderer)
        if axis is not None:
            boxes.append(axis)
        legend = ax.get_legend()
        if legend is not None and legend in _BELOW:
            boxes.append(legend.get_window_extent(renderer))
        return Bbox.union(boxes)

    return box


def _place_legends_below(fig) -> None:
    """Hang each legend of :func:`legend_below` under its axes' x tick labels and x label, as
    they are measured now."""
    from matplotlib.transforms import ScaledTranslation

    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or legend not in _BELOW:
            continue
        axis_box = ax.xaxis.get_tightbbox()
        drop = 0.0 if axis_box is None else max(0.0, ax.get_window_extent().y0 - axis_box.y0)
        below = drop / fig.dpi + _BELOW[legend] / 72
        legend.set_bbox_to_anchor((0.5, 0.0), ax.transAxes + ScaledTranslation(0, -below, fig.dpi_scale_trans))


# ---------------------------------------------------------------- titles wrapped to their width

# text -> (the text as given, the text as wrapped), so that a title is wrapped again from its words
_WRAPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def wrap_text(text: str, fontsize, width_points: float) -> str:
    """``text`` with line breaks between words so that no line is wider than ``width_points``
    (a word wider than that stays whole, on its own line); its own line breaks are kept."""
    out = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            trial = f"{line} {word}" if line else word
            if line and _text_width_points(trial, fontsize) > width_points:
                out.append(line)
                line = word
            else:
                line = trial
        out.append(line)
    return "\n".join(out)


def _fit_text(text_artist, width_px: float) -> bool:
    """Wrap a Text to ``width_px`` pixels (from the words it was given); True if it changed."""
    shown = text_artist.get_text()
    given, wrapped = _WRAPPED.get(text_artist, (None, None))
    if shown != wrapped:
        given = shown
    if not given or "$" in given:  # no text, or mathtext, which must not be cut between words
        return False
    # 3% to spare: the renderer's glyphs are a little wider than the outlines measured, and a
    # second layout may narrow the Axes a little
    points = 0.97 * width_px * 72 / text_artist.get_figure(root=True).dpi
    new = wrap_text(given, text_artist.get_fontsize(), points)
    _WRAPPED[text_artist] = (given, new)
    if new == shown:
        return False
    text_artist.set_text(new)
    return True


def _fit_texts(fig) -> bool:
    """Wrap each Axes' title and x label to the Axes' width, its y label to its height, and the
    figure's title to the figure's width; True if any changed."""
    changed = False
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        box = ax.get_window_extent()
        for text, width in ((ax.title, box.width), (ax.xaxis.label, box.width), (ax.yaxis.label, box.height)):
            if text.get_visible():
                changed |= _fit_text(text, width)
    suptitle = getattr(fig, "_suptitle", None)  # the Text of fig.suptitle(), None before it is called
    if suptitle is not None:
        changed |= _fit_text(suptitle, fig.bbox.width * 0.98)
    return changed


def _hide_inner_xlabels(fig) -> None:
    """Hide the x label of each Axes whose x tick labels are hidden because it shares its x axis
    with the panel under it (``sharex=True``): one label, under the column of panels."""
    for ax in fig.axes:
        params = ax.xaxis.get_tick_params(which="major")
        shared = len(ax.get_shared_x_axes().get_siblings(ax)) > 1
        if shared and not params.get("labelbottom", True) and not params.get("labeltop", False):
            ax.xaxis.label.set_visible(False)


class ColumnLayout(ConstrainedLayoutEngine):
    """matplotlib's constrained layout (everything the figure draws kept inside it, legends and
    titles included, so that ``bbox_inches="tight"`` cannot widen it), after it wraps each title
    and axis label that is longer than its Axes (a figure's title: than the figure), hangs each
    legend of :func:`legend_below` under its Axes' labels, and hides the x label of the upper
    panels of a column that shares its x axis. In a notebook it has the figures saved sharp for
    high-DPI screens (:func:`sharp_inline_figures`), like :func:`column_figsize`."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        sharp_inline_figures()

    def execute(self, fig):
        _hide_inner_xlabels(fig)
        _place_legends_below(fig)
        super().execute(fig)
        if _fit_texts(fig):
            _place_legends_below(fig)
            super().execute(fig)


def format_color(fmt: FloatFormat | str) -> str:
    """The course colour of a format (grey-blue for custom ones)."""
    return FORMAT_COLORS.get(get_format(fmt).name, "#4a6d8c")


def line_color(spec) -> str:
    """The course colour of a format name, or ``spec`` itself if it is a matplotlib colour."""
    from matplotlib.colors import is_color_like

    try:
        return format_color(spec)
    except (KeyError, ValueError, TypeError):
        if is_color_like(spec):
            return spec
        raise ValueError(f"{spec!r} is neither a format name nor a matplotlib colour") from None


def dashes_by_color(colors) -> list[str]:
    """A dash style per line: lines that share a colour get successive styles from :data:`DASHES`."""
    used: dict[str, int] = {}
    out = []
    for color in colors:
        out.append(DASHES[used.get(color, 0) % len(DASHES)])
        used[color] = used.get(color, 0) + 1
    return out


def distinct_colors(colors) -> list[str]:
    """One colour per line, all different: the first line of each colour keeps it (the course
    colour of its format), each later line that repeats a colour takes the next of
    :data:`EXTRA_COLORS`."""
    seen: set[str] = set()
    extra = 0
    out = []
    for color in colors:
        if color in seen:
            color = EXTRA_COLORS[extra % len(EXTRA_COLORS)]
            extra += 1
        seen.add(color)
        out.append(color)
    return out
