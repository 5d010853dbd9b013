"""The output files (nbhelpers.grading.outputs): cells that cannot be formulas, resuming an
interrupted run, regrading, and output files that cannot be read."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from helpers import EX01_EXERCISE, FAST, FULL, POINTS, read_csv, read_json, set_body, solution, write

from nbhelpers.grading.cli import main
from nbhelpers.grading.options import GradeOptions, Status
from nbhelpers.grading.outputs import Outputs, OutputsBusy, OutputsUnsafe, _csv_safe
from nbhelpers.grading.submissions import Submission


@pytest.fixture
def opened():
    """Outputs(...) for a run after the one before it has ended (its locks let go), as when the
    grader is run again; every one is closed at the end of the test."""
    made = []

    def make(csv_path, json_path, opts):
        for o in made:
            o.close()
        made.append(Outputs(csv_path, json_path, opts))
        return made[-1]

    yield make
    for o in made:
        o.close()


def test_csv_cells_cannot_be_formulas():
    assert _csv_safe('=HYPERLINK("x")') == '\'=HYPERLINK("x")'
    assert _csv_safe("-1+2") == "'-1+2" and _csv_safe("fine") == "fine" and _csv_safe(3) == "3"


def test_csv_cells_of_different_names_differ():
    """The escaping is one-to-one: a name that starts with the escape character is escaped too."""
    names = ["=a", "'=a", "''=a", "a", "'a", "+1", "'+1", "", "'"]
    assert len({_csv_safe(n) for n in names}) == len(names)
    assert _csv_safe("'=a") == "''=a" and _csv_safe("'") == "''"


def test_names_escaped_alike_before_get_rows_of_their_own(tmp_path, opened):
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    out = opened(csv_path, json_path, GradeOptions())
    out.start(["ex01.f"])
    out.add(_rec("=a.ipynb", ex01_f=3))
    out.add(_rec("'=a.ipynb", ex01_f=1))
    out.finish()
    rows = {r["file"]: r for r in csv.DictReader(csv_path.read_text().splitlines())}
    assert {f: r["ex01.f"] for f, r in rows.items()} == {"'=a.ipynb": "3", "''=a.ipynb": "1"}
    again = opened(csv_path, json_path, GradeOptions())
    again.start(["ex01.f"])  # the CSV agrees with the JSON file: nothing set aside
    assert not list(tmp_path.glob("g.csv.unreadable-*")) and csv_path.read_text().count(".ipynb") == 2


# ---- resuming ------------------------------------------------------------------------------------


@pytest.mark.sandbox
def test_rerun_skips_interrupted_run_continues_regrade_redoes(tmp_path, capsys):
    subs = tmp_path / "subs"
    subs.mkdir()
    write(solution(), subs / "ex01_a.ipynb")
    (subs / "ex01_b.ipynb").write_bytes(EX01_EXERCISE.read_bytes())
    (subs / "ex01_c.ipynb").write_text("{oops")
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    args = [str(subs), "--csv", str(csv_path), "--json", str(json_path), "--jobs", "2", *FAST]

    assert main(args) == 0
    first = read_json(json_path)
    assert set(read_csv(csv_path)) == {"ex01_a.ipynb", "ex01_b.ipynb", "ex01_c.ipynb"}
    capsys.readouterr()

    assert main(args) == 0  # nothing new: nothing graded
    assert "graded 0 submissions" in capsys.readouterr().out
    assert {k: r["graded_at"] for k, r in read_json(json_path).items()} == {k: r["graded_at"] for k, r in first.items()}

    # an interrupted run: the CSV holds one row (and a torn line), the JSON one record
    lines = csv_path.read_text().splitlines(keepends=True)
    header, row_a = lines[0], next(ln for ln in lines if "ex01_a.ipynb" in ln)
    csv_path.write_text(header + row_a + "subs/ex01_b.ipynb,3f2a")
    data = json.loads(json_path.read_text())
    data["submissions"] = [r for r in data["submissions"] if r["file"].endswith("ex01_a.ipynb")]
    json_path.write_text(json.dumps(data))
    time.sleep(1.1)  # graded_at has one-second resolution
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "graded 2 submissions" in out and "1 already graded" in out
    again = read_json(json_path)
    assert set(again) == set(first) and set(read_csv(csv_path)) == set(first)
    assert again["ex01_a.ipynb"]["graded_at"] == first["ex01_a.ipynb"]["graded_at"]
    assert read_csv(csv_path)["ex01_a.ipynb"]["total"] == str(FULL)

    # a changed submission is graded again, the others are not
    nb = solution()
    set_body(nb, "count_values", "return 0.0")
    write(nb, subs / "ex01_a.ipynb")
    assert main(args) == 0
    assert "graded 1 submission " in capsys.readouterr().out
    assert read_csv(csv_path)["ex01_a.ipynb"]["total"] == str(FULL - POINTS["ex01.count_values"])

    assert main(args + ["--regrade"]) == 0
    assert "graded 3 submissions" in capsys.readouterr().out
    assert len(read_csv(csv_path)) == 3 and len(read_json(json_path)) == 3

    assert main(args + ["--seed", "77"]) == 0  # graded with the public seed: a secret one redoes all
    assert "graded 3 submissions" in capsys.readouterr().out
    assert json.loads(json_path.read_text())["grader"]["seed"] == "secret"


@pytest.mark.sandbox
def test_unreadable_output_files_are_kept_aside(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ex01_c.ipynb").write_text("{oops")
    (tmp_path / "g.csv").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "g.json").write_text("{not json")
    assert main([str(subs), "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"), *FAST]) == 0
    assert len(list(tmp_path.glob("g.csv.unreadable-*"))) == 1 and len(list(tmp_path.glob("g.json.unreadable-*"))) == 1
    assert read_csv(tmp_path / "g.csv")["ex01_c.ipynb"]["status"] == "invalid notebook"


def _rec(file: str, status: str = "graded", **checks_points) -> dict:
    return {
        "file": file,
        "sha256": "ab" * 32,
        "chapter": 1,
        "status": status,
        "detail": "",
        "events": [],
        "total": sum(checks_points.values()),
        "max": 15,
        "seed": "public",
        "chapter_option": None,
        "checks": {k.replace("_", ".", 1): {"points": v} for k, v in checks_points.items()},
    }


def test_outputs_keep_earlier_columns_and_rows(tmp_path, opened):
    """A run that grades chapter 01 keeps the rows and exercise columns of an earlier chapter 02
    run, and any column it does not know; one row per file, sorted, statuses as words."""
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    csv_path.write_text(
        "file,sha256,chapter,ex02.sum_it,notes,total,max,status,detail\nb.ipynb,cd,02,5,keep me,5,5,graded,\n"
    )
    json_path.write_text(json.dumps({"grader": {}, "submissions": [_rec("b.ipynb", ex02_sum_it=5)]}))
    out = opened(csv_path, json_path, GradeOptions())
    out.start(["ex01.f"])
    assert out.columns == [
        "file",
        "sha256",
        "chapter",
        "ex01.f",
        "ex02.sum_it",
        "notes",
        "total",
        "max",
        "status",
        "detail",
    ]
    out.add(_rec("a.ipynb", Status.CELL_ERROR, ex01_f=3))
    out.add(_rec("a.ipynb", Status.GRADED, ex01_f=4))  # graded again: a second row until finish()
    assert [r["file"] for r in csv.DictReader(csv_path.read_text().splitlines())] == ["b.ipynb", "a.ipynb", "a.ipynb"]
    out.finish()
    rows = list(csv.DictReader(csv_path.read_text().splitlines()))
    assert [(r["file"], r["ex01.f"], r["ex02.sum_it"], r["notes"], r["status"]) for r in rows] == [
        ("a.ipynb", "4", "", "", "graded"),
        ("b.ipynb", "", "5", "keep me", "graded"),
    ]
    data = json.loads(json_path.read_text())
    assert data["grader"]["seed"] == "public" and [r["status"] for r in data["submissions"]] == ["graded", "graded"]


def test_is_done_needs_the_same_content_seed_kind_and_chapter(tmp_path, opened):
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    out = opened(csv_path, json_path, GradeOptions())
    out.start([])
    out.add(_rec("a.ipynb"))
    out.add(_rec("e.ipynb", Status.GRADER_ERROR))
    sub = Submission("a.ipynb", Path("a.ipynb"), sha256="ab" * 32)
    assert opened(csv_path, json_path, GradeOptions()).is_done(sub)
    assert not opened(csv_path, json_path, GradeOptions()).is_done(Submission("e.ipynb", Path("e"), sha256="ab" * 32))
    assert not opened(csv_path, json_path, GradeOptions(regrade=True)).is_done(sub)
    assert not opened(csv_path, json_path, GradeOptions(seed=5)).is_done(sub)
    assert not opened(csv_path, json_path, GradeOptions(chapter=1)).is_done(sub)
    assert not opened(csv_path, json_path, GradeOptions()).is_done(Submission("a.ipynb", Path("a"), sha256="cd"))


def test_damaged_output_files_are_set_aside_and_started_afresh(tmp_path, capsys, opened):
    """NaN in the JSON file, a total that is not the sum of its points, a CSV row edited by hand:
    the file is renamed (never deleted), the grader says so, and the run goes on."""
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    out = opened(csv_path, json_path, GradeOptions())
    out.start(["ex01.f"])
    out.add(_rec("a.ipynb", ex01_f=3))
    out.finish()
    good_json, good_csv = json_path.read_text(), csv_path.read_text()

    for damage in (
        lambda t: t.replace('"total": 3', '"total": NaN'),
        lambda t: t.replace('"total": 3', '"total": 4'),
        lambda t: t.replace('"status": "graded"', '"status": "excellent"'),
    ):
        json_path.write_text(damage(good_json))
        csv_path.write_text(good_csv)
        assert opened(csv_path, json_path, GradeOptions()).records == {}
        err = capsys.readouterr().err
        assert "is damaged" in err and "kept as" in err and "starting it afresh" in err
        aside = sorted(tmp_path.glob("g.json.unreadable-*"))
        assert aside and damage(good_json) in [p.read_text() for p in aside]

    json_path.write_text(good_json)
    csv_path.write_text(good_csv.replace(",3,3,15,graded,", ",6,6,15,graded,"))  # points raised by hand
    out = opened(csv_path, json_path, GradeOptions())
    assert set(out.records) == {"a.ipynb"} and "edited by hand" in capsys.readouterr().err
    out.start(["ex01.f"])
    assert csv_path.read_text() == good_csv  # made again from the JSON file
    assert any(",6,6,15," in p.read_text() for p in tmp_path.glob("g.csv.unreadable-*"))


def test_names_that_look_like_formulas_are_not_regraded(tmp_path, opened):
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    out = opened(csv_path, json_path, GradeOptions())
    out.start(["ex01.f"])
    for name in ("=a.ipynb", "+b.ipynb", "-c.ipynb", "@d.ipynb"):
        out.add(_rec(name, ex01_f=3))
    out.finish()
    assert "'=a.ipynb" in csv_path.read_text()  # written so that a spreadsheet does not run it
    again = opened(csv_path, json_path, GradeOptions())
    for name in ("=a.ipynb", "+b.ipynb", "-c.ipynb", "@d.ipynb"):
        assert again.is_done(Submission(name, Path(name), sha256="ab" * 32))
    again.start(["ex01.f"])
    assert len(list(csv.DictReader(csv_path.read_text().splitlines()))) == 4


# ---- one grader per output file ------------------------------------------------------------------


def test_a_second_grader_on_the_same_files_stops_before_touching_them(tmp_path):
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    first = Outputs(csv_path, json_path, GradeOptions())
    first.start(["ex01.f"])
    first.add(_rec("a.ipynb", ex01_f=3))
    before = (csv_path.read_bytes(), json_path.read_bytes())
    with pytest.raises(OutputsBusy, match=r"another grader is writing .*g\.(csv|json)"):
        Outputs(csv_path, json_path, GradeOptions())
    # sharing one of the two files is enough to be refused
    with pytest.raises(OutputsBusy, match=r"g\.csv"):
        Outputs(csv_path, tmp_path / "other.json", GradeOptions())
    assert (csv_path.read_bytes(), json_path.read_bytes()) == before and not (tmp_path / "other.json").exists()
    first.add(_rec("b.ipynb", ex01_f=1))  # the first run goes on, its records all kept
    first.finish()
    first.close()
    second = Outputs(csv_path, json_path, GradeOptions())  # free again once the first is done
    assert set(second.records) == {"a.ipynb", "b.ipynb"}
    second.close()


def test_the_command_says_another_grader_is_running(tmp_path, capsys):
    subs = tmp_path / "subs"
    subs.mkdir()
    write(solution(), subs / "ex01_a.ipynb")
    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    held = Outputs(csv_path, json_path, GradeOptions())
    try:
        args = [str(subs), "--csv", str(csv_path), "--json", str(json_path), "--no-sandbox", *FAST]
        assert main(args) == 2
        assert "another grader is writing" in capsys.readouterr().err
        assert not csv_path.exists() and not json_path.exists()
    finally:
        held.close()


# ---- the journal: each record costs its own size ---------------------------------------------------


def test_adding_a_record_writes_that_record_not_all_of_them(tmp_path, monkeypatch):
    """The JSON file is rewritten at the start and the end of a run, not once per submission
    (2,000 empty notebooks had taken 148 s: every add rewrote every record)."""
    from nbhelpers.grading import outputs

    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    writes = []
    real = outputs._atomic_write
    monkeypatch.setattr(outputs, "_atomic_write", lambda path, text: writes.append(path.name) or real(path, text))
    with Outputs(csv_path, json_path, GradeOptions()) as out:
        out.start(["ex01.f"])
        assert writes == ["g.csv", "g.json"]
        for i in range(2000):
            out.add(_rec(f"s{i:04d}.ipynb", ex01_f=i % 4))
        assert writes == ["g.csv", "g.json"]  # the adds appended, each its own line
        assert len(outputs.journal_path(json_path).read_text().splitlines()) == 2000
        out.finish()
    assert writes[2:] == ["g.json", "g.csv"] and not outputs.journal_path(json_path).exists()
    assert len(json.loads(json_path.read_text())["submissions"]) == 2000


def test_a_run_killed_mid_write_keeps_every_record_in_its_journal(tmp_path, capsys):
    from nbhelpers.grading import outputs

    csv_path, json_path = tmp_path / "g.csv", tmp_path / "g.json"
    out = Outputs(csv_path, json_path, GradeOptions())
    out.start(["ex01.f"])
    out.add(_rec("a.ipynb", ex01_f=3))
    out.add(_rec("b.ipynb", ex01_f=1))
    out.close()  # killed here: no finish()
    journal = outputs.journal_path(json_path)
    with open(journal, "a") as f:
        f.write('{"file": "c.ipynb", "sha')  # the line being written when it was killed
    assert json.loads(json_path.read_text())["submissions"] == []
    with Outputs(csv_path, json_path, GradeOptions()) as again:
        assert set(again.records) == {"a.ipynb", "b.ipynb"}
        assert again.is_done(Submission("a.ipynb", Path("a.ipynb"), sha256="ab" * 32))
        assert capsys.readouterr().err == ""  # a torn last line is what a kill leaves: not worth a word
        again.start(["ex01.f"])  # folded into the JSON file, the journal gone
        assert not journal.exists() and len(json.loads(json_path.read_text())["submissions"]) == 2
    with open(journal, "w") as f:
        f.write("not a record\n" + json.dumps(_rec("d.ipynb", ex01_f=2)) + "\n")
    with Outputs(csv_path, json_path, GradeOptions()) as third:
        assert "d.ipynb" in third.records and "1 line(s) that are not records" in capsys.readouterr().err


# ---- what the grader makes beside the output files is its own ----------------------------------


def test_links_planted_as_the_lock_or_the_journal_are_refused_not_followed(tmp_path, capsys):
    """A link named like the lock or the journal would have the grader create (as root, say) or
    read the file it points to: the run stops before it, saying which link to remove."""
    from nbhelpers.grading import outputs

    out_dir, elsewhere = tmp_path / "grades", tmp_path / "elsewhere"
    out_dir.mkdir(mode=0o700)
    elsewhere.mkdir()
    csv_path, json_path = out_dir / "g.csv", out_dir / "g.json"
    target = elsewhere / "made_by_the_grader"
    outputs.lock_path(csv_path).symlink_to(target)
    with pytest.raises(OutputsUnsafe, match="g.csv.lock is a symbolic link"):
        Outputs(csv_path, json_path, GradeOptions())
    assert not target.exists()
    outputs.lock_path(csv_path).unlink()

    forged = elsewhere / "records.jsonl"
    forged.write_text(json.dumps(_rec("forged.ipynb", ex01_f=3)) + "\n")
    outputs.journal_path(json_path).symlink_to(forged)
    with pytest.raises(OutputsUnsafe, match="g.json.journal is a symbolic link"):
        Outputs(csv_path, json_path, GradeOptions())
    outputs.journal_path(json_path).unlink()

    with Outputs(csv_path, json_path, GradeOptions()) as out:  # planted while the run goes on
        out.start(["ex01.f"])
        out.add(_rec("a.ipynb", ex01_f=1))
        outputs.journal_path(json_path).unlink()
        outputs.journal_path(json_path).symlink_to(target)
        with pytest.raises(OutputsUnsafe, match="journal is a symbolic link"):
            out.add(_rec("b.ipynb", ex01_f=2))
    assert not target.exists() and forged.read_text().count("\n") == 1

    subs = tmp_path / "subs"
    subs.mkdir()
    write(solution(), subs / "ex01_a.ipynb")
    outputs.lock_path(json_path).unlink()  # the run before left its lock file, as every run does
    outputs.lock_path(json_path).symlink_to(target)
    args = [str(subs), "--csv", str(csv_path), "--json", str(json_path), "--no-sandbox", *FAST]
    assert main(args) == 2
    assert "g.json.lock is a symbolic link" in capsys.readouterr().err and not target.exists()


def test_an_output_folder_every_user_can_write_is_refused(tmp_path, capsys):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: the sticky bit stops deletions, not a link made first
    with pytest.raises(OutputsUnsafe, match="can be written by every user"):
        Outputs(shared / "g.csv", shared / "g.json", GradeOptions())
    assert list(shared.iterdir()) == []
    shared.chmod(0o755)
    with Outputs(shared / "g.csv", shared / "g.json", GradeOptions()) as out:
        out.start(["ex01.f"])
    assert (shared / "g.csv").exists()
