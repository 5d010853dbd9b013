"""Text from a submission made safe where it enters the grader (nbhelpers.grading.untrusted), and
the grader's own text handling linear in the size of what it is given."""

from __future__ import annotations

import time

from nbhelpers.grading.untrusted import safe_data, safe_name, safe_source, safe_text
from nbhelpers.report_text import short_repr, truncate


def test_safe_text_escapes_what_could_act_and_keeps_the_rest():
    assert safe_text("plain text, é, 中文, tab\tand\nnewline") == "plain text, é, 中文, tab\tand\nnewline"
    assert safe_text("a\ud800b") == "a\\ud800b"
    assert safe_text("\x1b[31mred\x07\r") == "\\x1b[31mred\\x07\\x0d"
    assert safe_text("right\u202eto left") == "right\\u202eto left"
    assert safe_name("a\tb\nc") == "a\\x09b\\x0ac"
    assert safe_source("x = 1\r\ny = '\ud83d'") == "x = 1\r\ny = '\\ud83d'"  # code keeps its \r
    for s in (safe_text("\udcff\x00"), safe_name("\ud800\n"), safe_source("\udfff")):
        s.encode("utf-8")


def test_safe_data_walks_without_recursion():
    deep = ["\ud800"]
    for _ in range(100_000):
        deep = [deep, {"k\x1b": "v\ud800"}]
    out = safe_data(deep)
    assert out[1] == {"k\\x1b": "v\\ud800"}


def test_report_text_is_linear_in_a_students_string():
    """A run of spaces used to make the grader's one-line text quadratic (75 s for one result)."""
    t0 = time.process_time()  # CPU seconds of this process: another job on the machine adds none
    for s in (" " * 2_000_000, " " * 1_000_000 + "\n" + " " * 1_000_000, "\n" * 1_000_000):
        truncate(s)
        short_repr(s)
    assert time.process_time() - t0 < 5  # quadratic would take hours
    assert truncate("a  \n\n  b \n") == "a b " and truncate("x" * 300, 10) == "xxxxxx ..."
