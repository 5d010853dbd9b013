"""The output files: the CSV (one row per submission, appended and synced as each finishes) and
the JSON file (every check's details, rewritten atomically), loading them to resume a run, and
setting aside a file that cannot be read instead of overwriting it."""
from __future__ import annotations

import csv
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..checks import _ID_RE, _truncate
from .options import DETAIL_LIMIT, GradeOptions, Status
from .submissions import Submission

__all__ = ["CSV_HEAD", "CSV_TAIL", "Outputs"]

CSV_HEAD = ["file", "sha256", "chapter"]  # then one column per exercise, then:
CSV_TAIL = ["total", "max", "status", "detail"]


def _csv_safe(v: Any) -> str:
    """A cell a spreadsheet will not run as a formula (student text can land in detail)."""
    s = "" if v is None else str(v)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r") else s


def _csv_row(rec: dict, columns: list[str]) -> list[str]:
    chapter = rec.get("chapter")
    row = {"file": rec["file"], "sha256": rec["sha256"],
           "chapter": f"{chapter:02d}" if isinstance(chapter, int) else "",
           "total": rec.get("total", 0), "max": "" if rec.get("max") is None else rec["max"],
           "status": rec["status"], "detail": _truncate(rec.get("detail", ""), DETAIL_LIMIT)}
    for ex_id, c in (rec.get("checks") or {}).items():
        row[ex_id] = c.get("points", 0) if isinstance(c, dict) else ""
    return [_csv_safe(row.get(col, "")) for col in columns]


def _fsync_write(f: io.TextIOBase) -> None:
    f.flush()
    try:
        os.fsync(f.fileno())
    except OSError:
        pass


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            _fsync_write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _set_aside(path: Path, why: str) -> None:
    """Keep an output file we cannot read under another name instead of overwriting it."""
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(path, aside)
    print(f"nbhelpers.grade: {path} could not be read ({why}); kept as {aside}", file=sys.stderr)


def _load_csv(path: Path) -> tuple[list[str], dict[str, dict]]:
    """Columns and rows (by file, the last row of a file wins) of an existing grades CSV."""
    if not path.exists():
        return [], {}
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            rows = {}
            for row in reader:
                if None in row or None in row.values() or not row.get("file"):  # a torn line
                    continue
                rows[row["file"]] = row
        if columns and columns[:2] != CSV_HEAD[:2]:
            raise ValueError("not a grades file")
        return columns, rows
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as e:
        _set_aside(path, str(e))
        return [], {}


def _load_json(path: Path) -> dict[str, dict]:
    """The records (by file) of an existing JSON file."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        subs = data["submissions"]
        return {r["file"]: r for r in subs if isinstance(r, dict) and isinstance(r.get("file"), str)}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        _set_aside(path, str(e) or type(e).__name__)
        return {}


class Outputs:
    """The CSV and JSON files of a run: loaded at the start, updated as each submission finishes."""

    def __init__(self, csv_path: Path, json_path: Path, opts: GradeOptions) -> None:
        self.csv_path, self.json_path, self.opts = csv_path, json_path, opts
        self.old_columns, self.csv_rows = _load_csv(csv_path)
        self.records = _load_json(json_path)
        self.columns: list[str] = []

    def is_done(self, sub: Submission) -> bool:
        """Already graded with the same content and the same seed kind and chapter option."""
        row, rec = self.csv_rows.get(sub.file), self.records.get(sub.file)
        return (not self.opts.regrade and row is not None and rec is not None
                and row.get("sha256") == sub.sha256 == rec.get("sha256")
                and rec.get("status") != Status.GRADER_ERROR
                and rec.get("seed") == self.opts.seed_kind
                and rec.get("chapter_option") == self.opts.chapter)

    def start(self, exercise_ids: list[str]) -> None:
        """Rewrite the CSV with every row it has and the columns this run needs: ``exercise_ids``,
        then the exercises of earlier runs, then any other column the file had."""
        ex_ids = list(exercise_ids)
        old = [c for c in self.old_columns if c not in CSV_HEAD + CSV_TAIL]
        ex_ids += [c for c in dict.fromkeys(old) if c not in ex_ids and _ID_RE.match(c)]
        extra = [c for c in old if c not in ex_ids]
        self.columns = CSV_HEAD + ex_ids + extra + CSV_TAIL
        self._write_csv()
        self._write_json()

    def add(self, rec: dict) -> None:
        """Record a finished submission: JSON first (atomically), then its CSV row (appended,
        synced). A file graded again gets a second row until :meth:`finish` drops the old one."""
        self.records[rec["file"]] = rec
        self._write_json()
        row = _csv_row(rec, self.columns)
        self.csv_rows[rec["file"]] = dict(zip(self.columns, row))
        with open(self.csv_path, "a", encoding="utf-8", newline="") as f:
            csv.writer(f).writerow(row)
            _fsync_write(f)

    def finish(self) -> None:
        """Rewrite the CSV with one row per file, sorted by file."""
        self._write_csv()

    def _write_csv(self) -> None:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(self.columns)
        for f in sorted(self.csv_rows):
            r = self.csv_rows[f]
            w.writerow([r.get(c, "") or "" for c in self.columns])
        _atomic_write(self.csv_path, buf.getvalue())

    def _write_json(self) -> None:
        data = {
            "grader": {
                "seed": self.opts.seed_kind,
                "chapter": self.opts.chapter,
                "cell_timeout": self.opts.cell_timeout,
                "timeout": self.opts.timeout,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            "submissions": sorted(self.records.values(), key=lambda r: r["file"]),
        }
        _atomic_write(self.json_path, json.dumps(data, indent=1, allow_nan=False, default=str) + "\n")
