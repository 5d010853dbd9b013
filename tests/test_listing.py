"""nbhelpers.listing: kernel sources shown as highlighted code (a markdown python block) with the
source itself as plain text, cut between two marker lines on request."""

from __future__ import annotations

import inspect

import pytest

from nbhelpers.device import setup_device

setup_device(verbose=False)  # before importing a kernel, as in the kernel tests: the interpreter on a CPU

from nbhelpers.kernels.copy import copy_kernel
from nbhelpers.listing import Listing, show_source


def test_a_triton_kernel_is_shown_whole_as_python_code():
    listing = show_source(copy_kernel)
    source = inspect.getsource(copy_kernel.fn)
    assert isinstance(listing, Listing) and str(listing) == repr(listing) == source
    md = listing._repr_markdown_()
    assert md.startswith("```python\n") and md.endswith("\n```\n")
    assert md[len("```python\n") : -len("\n```\n")] == source.rstrip()


def test_start_and_stop_cut_at_lines():
    source = inspect.getsource(copy_kernel.fn)
    lines = source.splitlines(keepends=True)
    first, last = 1, len(lines) - 1
    cut = show_source(copy_kernel, start=lines[first].strip(), stop=lines[last].strip())
    assert str(cut) == "".join(lines[first:last])
    assert str(show_source(copy_kernel, start=lines[first].strip())) == "".join(lines[first:])
    with pytest.raises(ValueError, match="no line of copy_kernel contains start='nowhere'"):
        show_source(copy_kernel, start="nowhere")
    with pytest.raises(ValueError, match="after the start contains stop="):
        show_source(copy_kernel, start=lines[last].strip(), stop=lines[first].strip())


def test_several_objects_in_one_listing_and_bad_arguments():
    both = show_source(copy_kernel, show_source)
    assert str(both).startswith(inspect.getsource(copy_kernel.fn).rstrip("\n") + "\n\n")
    assert str(both).endswith(inspect.getsource(show_source))
    with pytest.raises(ValueError, match="give one object"):
        show_source(copy_kernel, show_source, start="def")
    with pytest.raises(TypeError, match="at least one"):
        show_source()
    with pytest.raises(TypeError, match="no source for 3"):
        show_source(3)


def test_a_fence_is_longer_than_any_backticks_in_the_code():
    md = Listing('s = "```"\n')._repr_markdown_()
    assert md.startswith("````python\n") and md.endswith("\n````\n")
