"""Tests of nbhelpers.tables: number formatting and plain-text tables."""

from nbhelpers.tables import fmt_num, text_table


def test_tables():
    assert fmt_num(2.0**-20).startswith("2^-20")
    assert fmt_num(None) == "-" and fmt_num(True) == "yes" and fmt_num(3) == "3"
    t = text_table([("a", 1.5), ("bb", float("inf"))], ["name", "value"])
    lines = t.splitlines()
    assert len(lines) == 4 and len(set(len(line) for line in lines)) == 1
