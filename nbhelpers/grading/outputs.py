"""The output files: the CSV (one row per submission, appended and synced as each finishes) and
the JSON file (every check's details, rewritten atomically at the start and the end of a run,
with a journal of the records added in between), loading them to resume a run, and setting
aside a file that cannot be read instead of overwriting it."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import re
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..exercise_types import EXERCISE_ID_RE
from ..report_text import truncate
from .options import DETAIL_LIMIT, STATUSES, GradeOptions, SeedKind, Status
from .submissions import Submission
from .untrusted import safe_name, safe_text

__all__ = ["CSV_HEAD", "CSV_TAIL", "Outputs", "OutputsBusy", "OutputsUnsafe", "lock_path", "journal_path"]

CSV_HEAD = ["file", "sha256", "chapter"]  # then one column per exercise, then:
CSV_TAIL = ["total", "max", "status", "detail"]
_SHA_RE = re.compile(r"^(?:[0-9a-f]{64})?$")


def _csv_safe(v: Any) -> str:
    """A cell a spreadsheet will not run as a formula (student text can land in detail): a text
    that starts like one gets a ``'`` in front. So does one that starts with ``'`` itself, so that
    two names never make the same cell ("=a" is "'=a", "'=a" is "''=a")."""
    s = "" if v is None else str(v)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r", "'") else s


def _csv_row(rec: dict, columns: list[str]) -> list[str]:
    chapter = rec.get("chapter")
    row = {
        "file": rec["file"],
        "sha256": rec["sha256"],
        "chapter": f"{chapter:02d}" if isinstance(chapter, int) else "",
        "total": rec.get("total", 0),
        "max": "" if rec.get("max") is None else rec["max"],
        "status": rec["status"],
        "detail": truncate(rec.get("detail", ""), DETAIL_LIMIT),
    }
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
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
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
    """Keep a damaged output file under another name (never deleted), saying so on stderr."""
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    k = 1
    while aside.exists():
        k += 1
        aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}-{k}")
    os.replace(path, aside)
    print(
        f"nbhelpers.grade: {safe_name(path)} is damaged ({safe_text(truncate(why, 200))}); kept as "
        f"{safe_name(aside)}, starting it afresh",
        file=sys.stderr,
    )


# ---- the JSON file: the record of every submission, and the truth the CSV is made from ---------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_record(r: Any) -> str | None:
    """Why a record of the JSON file is not one this grader wrote (None: it is)."""
    if not isinstance(r, dict):
        return "a submission that is not an object"
    if not isinstance(r.get("file"), str) or not r["file"] or safe_name(r["file"]) != r["file"]:
        return "a submission without a proper file name"
    if not (isinstance(r.get("sha256"), str) and _SHA_RE.match(r["sha256"])):
        return f"{r['file']}: no sha256"
    if r.get("status") not in STATUSES:
        return f"{r['file']}: unknown status {r.get('status')!r}"
    if r.get("seed") not in tuple(SeedKind):
        return f"{r['file']}: unknown seed kind"
    for key in ("chapter", "chapter_option", "max"):
        if r.get(key) is not None and not _is_int(r[key]):
            return f"{r['file']}: {key} is not a number"
    if not isinstance(r.get("detail", ""), str) or not isinstance(r.get("checks", {}), dict):
        return f"{r['file']}: malformed detail or checks"
    points = [c.get("points") if isinstance(c, dict) else None for c in r.get("checks", {}).values()]
    if not all(_is_int(p) and p >= 0 for p in points) or not all(
        isinstance(k, str) and EXERCISE_ID_RE.match(k) for k in r.get("checks", {})
    ):
        return f"{r['file']}: malformed checks"
    if not _is_int(r.get("total")) or r["total"] != sum(points) or (r.get("max") is not None and r["total"] > r["max"]):
        return f"{r['file']}: its total is not the sum of its points"
    return None


def _load_json(path: Path) -> dict[str, dict]:
    """The records (by file) of an existing JSON file; a damaged file is set aside."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
        if not isinstance(data, dict) or not isinstance(data.get("submissions"), list):
            raise ValueError("not a grades file: no list of submissions")
        records: dict[str, dict] = {}
        for r in data["submissions"]:
            why = _check_record(r)
            if why is None and r["file"] in records:
                why = f"{r['file']} twice"
            if why is not None:
                raise ValueError(why)
            records[r["file"]] = r
        return records
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        _set_aside(path, str(e) or type(e).__name__)
        return {}


def journal_path(json_path: Path) -> Path:
    """The journal beside the JSON file, ``<name>.journal``: one line per record added since the
    JSON file was last written (appended and synced; replayed when a run starts, deleted once
    the JSON file holds them)."""
    return json_path.with_name(json_path.name + ".journal")


def _replay_journal(path: Path, records: dict[str, dict]) -> None:
    """Add the records of the journal to ``records`` (a later line for a file wins). A line that
    is not a record this grader writes (the torn last line of a run killed mid-write, or
    anything else) is left out, and said on stderr unless it is the torn last line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as e:
        if path.is_symlink():
            raise OutputsUnsafe(_LINK_WORDS.format(path=safe_name(path))) from None
        print(f"nbhelpers.grade: cannot read {path} ({e.strerror}); its records are graded again", file=sys.stderr)
        return
    try:
        with open(fd, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        print(f"nbhelpers.grade: cannot read {path} ({e.strerror}); its records are graded again", file=sys.stderr)
        return
    bad = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            rec = None
        if rec is None or _check_record(rec) is not None:
            bad += i < len(lines) - 1  # the last line, cut off by a crash, is expected
            continue
        records[rec["file"]] = rec
    if bad:
        print(f"nbhelpers.grade: {path}: {bad} line(s) that are not records left out", file=sys.stderr)


def _journal_fd(path: Path) -> int:
    """The journal opened to append: never through a link, and made new (O_EXCL) where there is
    none, so that nothing planted between two records is written through."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            return os.open(path, flags)
        except FileNotFoundError:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        if path.is_symlink():
            raise OutputsUnsafe(_LINK_WORDS.format(path=safe_name(path))) from None
        raise


# ---- one grader per output file -----------------------------------------------------------------


class OutputsBusy(RuntimeError):
    """Another grader holds the lock of an output file: two runs writing one file lose records."""


class OutputsUnsafe(RuntimeError):
    """The output files' folder can be written by other users, or a file the grader makes beside
    them (``.lock``, ``.journal``) is a symbolic link: the grader would create, lock or read what
    someone else chose."""


_LINK_WORDS = (
    "{path} is a symbolic link; the grader makes that file itself and never follows a link there "
    "(it would create, lock or read the file the link points to): remove the link"
)


def _check_folder(folder: Path) -> None:
    """OutputsUnsafe when users other than the owner (and root) can write in ``folder``: they could
    plant links named like the files the grader makes there. The sticky bit of /tmp does not
    help: it stops others deleting files, not creating them first."""
    st = folder.stat()
    if st.st_mode & stat.S_IWOTH:
        raise OutputsUnsafe(
            f"the folder {safe_name(folder)} of the output files can be written by every user (mode "
            f"{stat.filemode(st.st_mode)}): grade into a folder only you can write, e.g. mkdir -m 700 grades"
        )


def lock_path(path: Path) -> Path:
    """The lock file beside an output file, ``<name>.lock``: held while a run may write it."""
    return path.with_name(path.name + ".lock")


def _lock(path: Path):
    """Take the lock of ``path`` for this process (released when the file is closed or the process
    ends, a kill -9 included); OutputsBusy when another grader holds it."""
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    _check_folder(lock.parent)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        if lock.is_symlink():
            raise OutputsUnsafe(_LINK_WORDS.format(path=safe_name(lock))) from None
        raise
    f = open(fd, "a+b")  # held open for the whole run
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise OutputsBusy(
            f"another grader is writing {path} (it holds {lock}); wait for it to finish, or give this run "
            "other --csv and --json files"
        ) from None
    return f


# ---- the CSV file: made from the records; extra columns an instructor added are kept ----------


def _load_csv(path: Path) -> tuple[list[str], dict[str, dict]]:
    """Columns and rows (by the file column as written; the last row of a file wins) of an
    existing grades CSV. Raises ValueError (or OSError, csv.Error) when it cannot be read."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        if columns[:2] != CSV_HEAD[:2] or not set(CSV_TAIL) <= set(columns) or len(set(columns)) != len(columns):
            raise ValueError("not a grades file: its columns are not the grader's")
        rows = {}
        for row in reader:
            if None in row or None in row.values() or not row.get("file"):  # a torn line
                continue
            rows[row["file"]] = row
    return columns, rows


def _csv_disagrees(columns: list[str], rows: dict[str, dict], records: dict[str, dict]) -> str | None:
    """Why the CSV's rows are not what the records give (None: they are). A row of an older
    version of a file (another sha256) is not a disagreement: the run that graded the new one
    stopped before it rewrote the CSV."""
    by_cell = {_csv_safe(f): r for f, r in records.items()}
    for written, row in rows.items():
        rec = by_cell.get(written)
        if rec is None:
            return f"{written}: a row with no record in the JSON file"
        if row.get("sha256") != rec["sha256"]:
            continue
        known = [c for c in columns if c in CSV_HEAD + CSV_TAIL or EXERCISE_ID_RE.match(c)]
        made = dict(zip(known, _csv_row(rec, known)))
        changed = [c for c in known if row.get(c, "") != made[c]]
        if changed:
            return f"{written}: {', '.join(changed[:3])} differ from the JSON file (edited by hand?)"
    return None


class Outputs:
    """The CSV and JSON files of a run: loaded at the start, updated as each submission finishes.

    The JSON file holds the records and is the truth: whether a submission is already graded is
    read there, and the CSV is rewritten from it at the start and the end of every run. Columns
    of the CSV that the grader does not make (an instructor's notes) are kept with their rows.
    A file that cannot be read, holds anything this grader would not have written (NaN, a total
    that is not the sum of its points, ...), or a CSV whose rows disagree with the JSON file, is
    set aside under another name and started afresh, with a message on stderr.

    Each file is locked (``<name>.lock`` beside it) from the start until :meth:`close`: a second
    grader given the same files raises :class:`OutputsBusy` before it reads or writes anything.
    """

    def __init__(self, csv_path: Path, json_path: Path, opts: GradeOptions) -> None:
        self.csv_path, self.json_path, self.opts = csv_path, json_path, opts
        # both files locked before either is read, for as long as this run may write them
        self._locks = []
        try:
            for path in sorted({csv_path.resolve(), json_path.resolve()}):
                self._locks.append(_lock(path))
        except BaseException:
            self.close()
            raise
        try:
            self.records = _load_json(json_path)
            _replay_journal(journal_path(json_path), self.records)
        except BaseException:
            self.close()
            raise
        self.old_columns: list[str] = []
        self.extra: dict[str, dict] = {}  # file -> the values of columns the grader does not make
        if csv_path.exists():
            self._load_csv()
        self.columns: list[str] = []

    def _load_csv(self) -> None:
        try:
            columns, rows = _load_csv(self.csv_path)
            why = _csv_disagrees(columns, rows, self.records)
        except (OSError, UnicodeDecodeError, csv.Error, ValueError) as e:
            columns, rows, why = [], {}, str(e) or type(e).__name__
        if why is not None:
            _set_aside(self.csv_path, why)
            return
        self.old_columns = columns
        files = {_csv_safe(f): f for f in self.records}
        extra = [c for c in columns if c not in CSV_HEAD + CSV_TAIL and not EXERCISE_ID_RE.match(c)]
        self.extra = {files[w]: {c: row.get(c, "") for c in extra} for w, row in rows.items() if w in files}

    def is_done(self, sub: Submission) -> bool:
        """Already graded with the same content and the same seed kind and chapter option."""
        rec = self.records.get(sub.file)
        return (
            not self.opts.regrade
            and rec is not None
            and rec.get("sha256") == sub.sha256
            and rec.get("status") != Status.GRADER_ERROR
            and rec.get("seed") == self.opts.seed_kind
            and rec.get("chapter_option") == self.opts.chapter
        )

    def start(self, exercise_ids: list[str]) -> None:
        """Rewrite both files with every record, and the CSV with the columns this run needs:
        ``exercise_ids``, then the exercises of earlier runs, then the instructor's own columns."""
        ex_ids = list(dict.fromkeys(exercise_ids))
        earlier = [c for c in self.old_columns if EXERCISE_ID_RE.match(c)]
        earlier += [k for r in self.records.values() for k in r.get("checks", {})]
        ex_ids += [c for c in dict.fromkeys(earlier) if c not in ex_ids]
        extra = [c for c in self.old_columns if c not in CSV_HEAD + CSV_TAIL and not EXERCISE_ID_RE.match(c)]
        self.columns = CSV_HEAD + ex_ids + extra + CSV_TAIL
        self._write_csv()
        self._write_json()

    def add(self, rec: dict) -> None:
        """Record a finished submission: a line of the journal first (appended, synced: the
        record is kept from then on), then its CSV row (appended, synced). Each costs the size
        of one record, not of all of them. A file graded again gets a second row until
        :meth:`finish` drops the old one."""
        self.records[rec["file"]] = rec
        with open(_journal_fd(journal_path(self.json_path)), "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(json.dumps(rec, allow_nan=False, default=str) + "\n")
            _fsync_write(f)
        with open(self.csv_path, "a", encoding="utf-8", errors="backslashreplace", newline="") as f:
            csv.writer(f).writerow(self._row(rec["file"]))
            _fsync_write(f)

    def finish(self) -> None:
        """Rewrite the JSON file with every record (the journal then goes) and the CSV with one
        row per file, sorted by file."""
        self._write_json()
        self._write_csv()

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the files' locks (another grader may write them from now on)."""
        for f in self._locks:
            f.close()
        self._locks = []

    def _row(self, file: str) -> list[str]:
        row = _csv_row(self.records[file], self.columns)
        for i, c in enumerate(self.columns):
            if c in self.extra.get(file, {}):
                row[i] = self.extra[file][c]
        return row

    def _write_csv(self) -> None:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(self.columns)
        for f in sorted(self.records):
            w.writerow(self._row(f))
        _atomic_write(self.csv_path, buf.getvalue())

    def _write_json(self) -> None:
        data = {
            "grader": {
                "seed": self.opts.seed_kind,
                "chapter": self.opts.chapter,
                "cell_timeout": self.opts.cell_timeout,
                "timeout": self.opts.timeout,
                "sandbox": self.opts.sandbox,
                "whole_submission_limits": self.opts.whole_submission_limits(),
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            "submissions": sorted(self.records.values(), key=lambda r: r["file"]),
        }
        _atomic_write(self.json_path, json.dumps(data, indent=1, allow_nan=False, default=str) + "\n")
        try:  # the JSON file now holds every record the journal had
            journal_path(self.json_path).unlink()
        except FileNotFoundError:
            pass
