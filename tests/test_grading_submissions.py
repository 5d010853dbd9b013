"""Reading submissions (nbhelpers.grading.submissions): finding notebooks, reading one
read-only, its code cells, its chapter, and its check cells."""

from __future__ import annotations

import json
import os

import pytest

from nbhelpers.grading import submissions
from nbhelpers.grading.options import Status
from nbhelpers.grading.submissions import check_cells, detect_chapter, find_notebooks, is_check_cell, read_submission


def test_detect_chapter():
    cells = [(0, "import math"), (3, 'check("ex02.decode", f);')]
    assert detect_chapter("ex02_accumulation.ipynb", cells) == (2, "")
    assert detect_chapter("alice.ipynb", cells) == (2, "")
    assert detect_chapter("ex01_x.ipynb", cells)[0] == 2  # the notebook's own calls decide
    assert "file name says chapter 01" in detect_chapter("ex01_x.ipynb", cells)[1]
    assert detect_chapter("ex01 (3).ipynb", [(0, "x = 1")]) == (1, "")
    assert detect_chapter("bob-EX07-final.ipynb", []) == (7, "")
    assert detect_chapter("alex01.ipynb", []) == (None, "")
    assert detect_chapter("notes.ipynb", [(0, "summary(3);")]) == (3, "")
    both = [(0, 'check("ex01.a", a)'), (1, 'check("ex02.b", b)')]
    assert detect_chapter("n.ipynb", both)[0] is None
    assert detect_chapter("n.ipynb", both, expected=2)[0] == 2
    assert detect_chapter("ex01_n.ipynb", both)[0] == 1


def test_is_check_cell():
    assert is_check_cell('check("ex01.decode_bits", decode_bits);')
    assert is_check_cell('r = check("ex01.a", a)\nchecks.check("ex01.b", b)\nsummary(1);')
    assert not is_check_cell('def f(x):\n    return x\ncheck("ex01.f", f)')  # defines f: must run
    assert not is_check_cell("%timeit check()")
    assert not is_check_cell("")
    assert not is_check_cell("print(check)")


def test_check_cells_parse_a_bounded_amount_of_a_submission(monkeypatch):
    """12,000 cells of 4,000 characters of check calls (48 MB) cost the grader at most
    MAX_CHECK_PARSE_CHARS of parsing: the first cells are found to be check cells, the rest are
    not parsed (they run, as any other cell); a cell naming neither check nor summary is never parsed."""
    parsed = []
    real_parse = submissions.ast.parse
    monkeypatch.setattr(submissions.ast, "parse", lambda src, *a, **k: parsed.append(len(src)) or real_parse(src))
    line = 'check("ex01.decode_bits", decode_bits)\n'
    cell = line * (4000 // len(line))
    cells = [(0, "x = 1"), (1, 'check("ex01.a", a)')] + [(i + 2, cell) for i in range(12_000)]
    flags = check_cells(cells)
    assert flags[:3] == [False, True, True] and len(flags) == len(cells)
    assert parsed[0] == len(cells[1][1]) and set(parsed[1:]) == {len(cell)}  # "x = 1" was not parsed
    assert sum(parsed) <= submissions.MAX_CHECK_PARSE_CHARS
    n_parsed = len(parsed) - 1
    assert flags[2 : 2 + n_parsed] == [True] * n_parsed and not any(flags[2 + n_parsed :])
    assert n_parsed >= 40  # an honest notebook's check cells are all found


def test_read_submission(tmp_path):
    p = tmp_path / "a.ipynb"
    p.write_text(json.dumps({"nbformat": 3, "worksheets": [{"cells": [{"cell_type": "code", "input": "x = 1"}]}]}))
    s = read_submission(p)
    assert s.problem is None and s.cells == [(0, "x = 1")] and len(s.sha256) == 64
    p.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["a = 1\n", "b = 2"]}]}))  # no metadata
    assert read_submission(p).cells == [(0, "a = 1\nb = 2")]
    p.write_text(
        json.dumps({"cells": [{"cell_type": "markdown", "source": "# hi"}, {"cell_type": "code", "source": "  \n"}]})
    )
    assert read_submission(p).problem == "empty"
    for text in ("", "{", "null", '{"cells": 3}', '{"cells": [1]}', '{"cells": [{"cell_type": "code", "source": 5}]}'):
        p.write_text(text)
        s = read_submission(p)
        assert s.problem == "invalid notebook" and s.detail, text
    assert read_submission(tmp_path / "missing.ipynb").problem == "invalid notebook"


def test_read_submission_statuses_are_the_csv_words(tmp_path):
    p = tmp_path / "a.ipynb"
    p.write_text("{")
    s = read_submission(p, "shown/a.ipynb")
    assert s.problem is Status.INVALID_NOTEBOOK and s.problem == "invalid notebook" and s.file == "shown/a.ipynb"
    assert f"{s.problem}" == str(s.problem) == "invalid notebook"


def test_find_notebooks(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".ipynb_checkpoints").mkdir()
    for name in ("a/x.ipynb", "a/.ipynb_checkpoints/x-checkpoint.ipynb", "b.ipynb", "a/notes.txt"):
        (tmp_path / name).write_text("{}")
    found = find_notebooks([tmp_path / "a", tmp_path / "b.ipynb", tmp_path / "a" / "x.ipynb"])  # x twice
    assert [f.name for f in found] == [str(tmp_path / "a" / "x.ipynb"), str(tmp_path / "b.ipynb")]
    assert all(f.path.is_absolute() and f.refused is None for f in found)
    assert find_notebooks([tmp_path / "a" / ".ipynb_checkpoints"]) == [  # hidden below the folder given only
        (
            str(tmp_path / "a" / ".ipynb_checkpoints" / "x-checkpoint.ipynb"),
            (tmp_path / "a" / ".ipynb_checkpoints" / "x-checkpoint.ipynb").resolve(),
            None,
        )
    ]
    with pytest.raises(FileNotFoundError):
        find_notebooks([tmp_path / "missing"])


def test_links_are_graded_as_the_file_they_point_to_and_links_outside_are_refused(tmp_path):
    subs = tmp_path / "subs"
    (subs / "deep").mkdir(parents=True)
    (subs / "bob_ex01.ipynb").write_text("{}")
    (subs / "deep" / "carol_ex01.ipynb").write_text("{}")
    (tmp_path / "secret.ipynb").write_text("{}")
    os.symlink(subs / "bob_ex01.ipynb", subs / "aaa_ex01.ipynb")  # named to sort before bob
    os.symlink(tmp_path / "secret.ipynb", subs / "outside.ipynb")
    os.symlink(tmp_path / "nothing.ipynb", subs / "dangling.ipynb")
    os.symlink(tmp_path, subs / "folder_link")  # not followed
    os.mkfifo(subs / "pipe.ipynb")
    found = {f.name: f for f in find_notebooks([subs])}
    assert set(found) == {
        str(subs / n)
        for n in ("bob_ex01.ipynb", "deep/carol_ex01.ipynb", "outside.ipynb", "dangling.ipynb", "pipe.ipynb")
    }
    assert found[str(subs / "bob_ex01.ipynb")].refused is None
    assert "outside the folders" in found[str(subs / "outside.ipynb")].refused
    assert "to nothing" in found[str(subs / "dangling.ipynb")].refused
    assert "not a regular file" in found[str(subs / "pipe.ipynb")].refused
    assert read_submission(subs / "pipe.ipynb").problem == "invalid notebook"  # never blocks


def test_names_and_sources_are_made_safe(tmp_path):
    raw = os.fsencode(tmp_path) + b"/ex01_\xff\x1b[2J.ipynb"
    with open(raw, "w") as f:
        f.write(json.dumps({"cells": [{"cell_type": "code", "source": "s = '\ud800'"}]}))
    (f,) = find_notebooks([tmp_path])
    assert f.name.endswith("ex01_\\udcff\\x1b[2J.ipynb") and f.name.isprintable()
    sub = read_submission(f.path, f.name)
    assert sub.cells == [(0, "s = '\\ud800'")]  # the same string, written as an escape
    sub.cells[0][1].encode("utf-8")


def test_is_check_cell_does_not_parse_huge_cells():
    assert not is_check_cell("x = " + "-" * 300_000 + "1")  # not parsed: no RecursionError, no gigabytes
    assert not is_check_cell("(" * 150 + ")" * 150)
