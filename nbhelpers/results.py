"""Recorded results files: where they live, how they are named, how they are written and read back.

Scripts in ``benchmarks/`` that need a GPU write their measurements to
``benchmarks/results/<name>_<gpu>.json``, each labelled with the GPU, the date, the script and
the versions. On a machine without a GPU a notebook shows those recorded runs instead of live
ones. Each kernel family's manifest (:mod:`nbhelpers.families`) declares its kinds of file;
this module makes each a :class:`ResultsKind` (:func:`kinds`), the schema shared by the scripts
that write them (through :class:`ResultsFile` and :func:`sweep`, which keep every row a run
finished) and the readers the notebooks call: :func:`recorded` by stem, or by the name the
family gives its reader (``recorded_topk``), found here as a module attribute. It imports no torch and no
Triton, so it works on any machine and before :func:`nbhelpers.device.setup_device`.

The folder is, in this order: the ``results_dir`` a caller passes; the environment variable
``NBHELPERS_RESULTS_DIR``; ``benchmarks/results`` in the current folder or the nearest parent
that has one (a notebook runs in ``notebooks/``, a script at the repository root); the
repository this package was loaded from (an editable install). So an installed, non-editable
copy of the package reads the results of the repository it is run in.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path

from .families import ResultsSpec, results_specs

__all__ = [
    "ENV_VAR",
    "find_results_dir",
    "gpu_slug",
    "ResultsKind",
    "kinds",
    "recorded",
    "recorded_compile_check",
    "write_results",
    "ResultsFile",
    "sweep",
]

ENV_VAR = "NBHELPERS_RESULTS_DIR"
_RELATIVE = Path("benchmarks") / "results"


def find_results_dir(results_dir: str | Path | None = None) -> Path | None:
    """The folder of recorded results (see the module docstring for the search order), or None
    when there is none to be found (nothing recorded can be shown then)."""
    if results_dir is not None:
        return Path(results_dir)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / _RELATIVE).is_dir():
            return folder / _RELATIVE
    source_repo = Path(__file__).resolve().parents[1] / _RELATIVE
    return source_repo if source_repo.is_dir() else None


def gpu_slug(name: str) -> str:
    """A file-name-safe form of a GPU name: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    slug = re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-")
    if not slug:
        raise ValueError(f"cannot make a file name from the GPU name {name!r}")
    return slug


@dataclass(frozen=True)
class ResultsKind:
    """One kind of results file, the schema its writer and its reader share: files named
    ``<stem>_<gpu-slug>.json`` written by ``script``, holding ``meta`` (with every ``meta_keys``)
    and a list ``rows_field`` of rows, each with every ``row_keys`` and, unless it has an
    ``error`` saying why it was not measured, every ``timed_keys``. Each is made from a kernel
    family's :class:`~nbhelpers.families.ResultsSpec` (:func:`kinds`). The scripts build their
    paths with :meth:`path` and write through :class:`ResultsFile` with the kind, which refuses a
    row this module could not read back; the readers read with :meth:`read`."""

    stem: str
    script: str
    meta_keys: tuple
    row_keys: tuple
    timed_keys: tuple = ()
    rows_field: str = "rows"
    allow_empty: bool = False
    spec: ResultsSpec | None = None

    @classmethod
    def of(cls, spec: ResultsSpec) -> ResultsKind:
        """The kind a family's results spec declares."""
        return cls(
            spec.stem,
            spec.script,
            tuple(spec.meta_keys),
            spec.row_keys,
            spec.timed_keys,
            spec.rows_field,
            spec.allow_empty,
            spec,
        )

    def path(self, gpu: str, folder: str | Path) -> Path:
        """``folder / <stem>_<gpu-slug>.json``."""
        return Path(folder) / f"{self.stem}_{gpu_slug(gpu)}.json"

    def missing_in_meta(self, meta: dict) -> list[str]:
        return [k for k in self.meta_keys if k not in meta]

    def missing_in_row(self, row: dict) -> list[str]:
        keys = self.row_keys + (() if "error" in row else self.timed_keys)
        return [k for k in keys if k not in row]

    def missing_in_run(self, run: dict) -> list[str]:
        """What a whole file's content lacks, in words ([] when nothing); KeyError or TypeError
        when it is not shaped like a results file at all."""
        missing = self.missing_in_meta(run["meta"])
        rows = run[self.rows_field]
        if not rows and not self.allow_empty:
            missing.append(f"{self.rows_field} (none)")
        check = self.spec.check if self.spec is not None else None
        for i, r in enumerate(rows):
            missing += [f"{self.rows_field}[{i}].{k}" for k in self.missing_in_row(r)]
            if check is not None:
                missing += check(r)
        return missing

    def read(self, results_dir: str | Path | None = None) -> list[dict]:
        """Every file of this kind in the results folder, parsed and checked, oldest first; []
        when there are none. The file's ``path`` is added to each. A malformed file raises
        ValueError naming it and what it lacks."""
        folder = find_results_dir(results_dir)
        if folder is None:
            return []
        runs = []
        for path in sorted(Path(folder).glob(f"{self.stem}_*.json")):
            try:
                run = json.loads(path.read_text())
                missing = self.missing_in_run(run)
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}: not a results file of {Path(self.script).name} ({e!r})") from e
            if missing:
                raise ValueError(f"{path}: missing {', '.join(missing)}")
            run["path"] = str(path)
            runs.append(run)
        return sorted(runs, key=lambda r: r["meta"]["date"])

    def row(self, row: dict):
        """A row of a file of this kind as its family's frozen row dataclass (the keys it declares;
        a row with an ``error`` has None for what it lacks)."""
        if self.spec is None:
            raise TypeError(f"the {self.stem} kind declares no row type")
        names = [f.name for f in fields(self.spec.row)]
        return self.spec.row(**{k: row.get(k) for k in names if k in row or k in self.timed_keys})

    def rows(self, run: dict) -> list:
        """The rows of one file this kind's reader returned, as the family's row dataclass."""
        return [self.row(r) for r in run[self.rows_field]]

    def as_dict(self, row) -> dict:
        """A row dataclass of this kind as the dict a file holds: every field, except those left at
        None that a row may lack (the optional ones; the timed ones of a row with an ``error``)."""
        if self.spec is None or not isinstance(row, self.spec.row):
            raise TypeError(f"a {self.stem} row must be a {self.spec.row.__name__ if self.spec else 'dict'}")
        out = asdict(row)
        failed = out.get("error") is not None
        required = set(self.row_keys) | (set() if failed else set(self.timed_keys))
        return {k: v for k, v in out.items() if v is not None or k in required}


def kinds() -> dict[str, ResultsKind]:
    """Every kind of GPU results file, by stem: one per results spec of every kernel family's
    manifest (:func:`nbhelpers.families.families`)."""
    return {stem: ResultsKind.of(spec) for stem, spec in results_specs().items()}


def recorded(stem: str, results_dir: str | Path | None = None) -> list[dict]:
    """The results files of the kind ``stem`` (``<stem>_*.json``), parsed, oldest first; [] when
    there are none. Each is ``{"meta": {...}, "<rows field>": [...], ...}`` with the file's
    ``path`` added; the rows are those the kind's row dataclass describes. A malformed file raises
    ValueError naming it and what it lacks."""
    known = kinds()
    if stem not in known:
        raise KeyError(f"no kernel family records {stem!r} results; known: {', '.join(sorted(known))}")
    return known[stem].read(results_dir)


def _reader(kind: ResultsKind) -> Callable[..., list[dict]]:
    def read(results_dir: str | Path | None = None) -> list[dict]:
        return kind.read(results_dir)

    row = kind.spec.row if kind.spec is not None else None
    read.__name__ = read.__qualname__ = kind.spec.reader or f"recorded_{kind.stem}"
    read.__doc__ = (
        f"The results files of ``{kind.script}`` (``{kind.stem}_*.json``), parsed, oldest first; [] "
        f'when there are none. Each is ``{{"meta": {{...}}, "{kind.rows_field}": [...]}}`` with the file\'s '
        f"``path``; meta has {', '.join(kind.meta_keys)}; each row is a dict with the fields of "
        f"``{row.__name__ if row else '?'}``"
        + (f" ({(row.__doc__ or '').strip()})" if row else "")
        + ". A malformed file raises ValueError naming it."
    )
    return read


def __getattr__(name: str):
    """The kinds and readers the families declare, by name: ``TOPK`` (a stem in capitals) is the
    :class:`ResultsKind` of ``topk_*.json`` files, ``recorded_topk`` (the spec's ``reader``, else
    ``recorded_<stem>``) its reader."""
    for kind in kinds().values():
        if name == kind.stem.upper():
            return kind
        if name == ((kind.spec.reader if kind.spec else None) or f"recorded_{kind.stem}"):
            return _reader(kind)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    names = set(globals())
    for kind in kinds().values():
        names |= {kind.stem.upper(), (kind.spec.reader if kind.spec else None) or f"recorded_{kind.stem}"}
    return sorted(names)


def write_results(path: str | os.PathLike, data: dict) -> Path:
    """Write ``data`` as JSON to ``path`` through a temporary file beside it, renamed over it, so
    that a reader, or a run killed mid-write, never sees half a file. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
    return path


class ResultsFile:
    """A benchmark's results file, ``{"meta": meta, ..., "rows": rows}``, rewritten after every row.
    With ``kind`` (a :class:`ResultsKind`), ``meta`` and every row are checked
    against the schema the file's reader uses.

    Nothing is written until the first :meth:`add`; from then on each row is on disk as soon as it
    is added. Each write goes to a temporary file beside the results file and is renamed over it,
    so a reader (or a run killed mid-write) never sees half a file. ``meta["complete"]`` is False
    until :meth:`finish`, which may replace the rows (with derived fields added) and add top-level
    fields (a summary); a file whose run stopped early says so by its ``complete: false``.
    """

    def __init__(self, path: str | os.PathLike, meta: dict, kind=None):
        if not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict, got {type(meta).__name__}")
        # with the schema its reader uses (a ResultsKind), a file the reader would
        # refuse is refused here, before it is written
        self.kind = kind
        if kind is not None and kind.missing_in_meta(meta):
            raise ValueError(f"meta of a {kind.stem} results file lacks {', '.join(kind.missing_in_meta(meta))}")
        self.path = Path(path)
        self.meta = {**meta, "complete": False}
        self.rows: list[dict] = []
        self.extra: dict = {}

    def add(self, row: dict) -> dict:
        """Append one row and write the file; returns the row (as a dict). With a kind, the row may
        be its family's row dataclass, written as :meth:`ResultsKind.as_dict` says."""
        if self.kind is not None and is_dataclass(row) and not isinstance(row, type):
            row = self.kind.as_dict(row)
        if not isinstance(row, dict):
            raise TypeError(f"a row must be a dict, got {type(row).__name__}")
        if self.kind is not None and self.kind.missing_in_row(row):
            raise ValueError(
                f"a row of a {self.kind.stem} results file lacks "
                f"{', '.join(self.kind.missing_in_row(row))} "
                f"(a row that was not measured says why in 'error'): {sorted(row)}"
            )
        self.rows.append(row)
        self._write()
        return row

    def finish(self, rows: Iterable[dict] | None = None, **extra) -> Path:
        """Mark the run complete and write the file (also with no rows); ``rows`` replaces the
        rows added, ``extra`` adds top-level fields (not "meta" or "rows"). Returns the path."""
        bad = {"meta", "rows"} & set(extra)
        if bad:
            raise ValueError(f"finish() takes the rows as rows= and cannot replace meta; got {sorted(bad)}")
        if rows is not None:
            rows = list(rows)
            for row in rows:
                if self.kind is not None and self.kind.missing_in_row(row):
                    raise ValueError(
                        f"a row of a {self.kind.stem} results file lacks "
                        f"{', '.join(self.kind.missing_in_row(row))}: {sorted(row)}"
                    )
            self.rows = rows
        self.extra.update(extra)
        self.meta["complete"] = True
        self._write()
        return self.path

    def _write(self) -> None:
        write_results(self.path, {"meta": self.meta, **self.extra, "rows": self.rows})


def sweep(cases: Iterable, measure: Callable[[object], Iterable[dict]], results: ResultsFile) -> list[dict]:
    """Measure each case in turn, adding each row to ``results`` as soon as ``measure`` yields it.

    ``measure(case)`` returns (or yields) the rows of one case; a case it cannot or should not
    measure (a shape a backend rejects, a time budget spent) is a row that says why. An exception
    from ``measure`` ends the sweep and propagates: the rows added before it stay in the file.
    Returns the rows.
    """
    for case in cases:
        for row in measure(case):
            results.add(row)
    return results.rows


_COMPILE_META_KEYS = ("triton", "ptxas", "date", "command", "machine")
_COMPILE_ROW_KEYS = ("kernel", "label", "config", "target", "status")
_COMPILE_OK_KEYS = ("registers", "spill_stores", "spill_loads", "shared", "mma", "cp_async")
_WARPS = re.compile(r"\bw(\d+)\b")


def recorded_compile_check(results_dir: str | Path | None = None, name: str = "compile_check.json") -> dict | None:
    """The results file of ``python -m nbhelpers.compile_check`` (``compile_check.json``: every
    kernel of the course compiled for sm_90 / sm_80 without a GPU), parsed; None when there is
    none. It is ``{"meta": {...}, "rows": [...], "findings": [...]}`` with the Triton and ptxas
    versions, date, command and machine in ``meta``, and one row per case: kernel, label, config,
    target and status, and for a case that compiled its registers, spill stores and loads, shared
    memory in bytes, matrix instruction and asynchronous copies. Each row gets ``num_warps``, read
    from its config (``"128x128x64 w4 s4"``) where the row does not hold it; the file's ``path``
    is added. A malformed file raises ValueError naming it."""
    folder = find_results_dir(results_dir)
    path = None if folder is None else folder / name
    if path is None or not path.is_file():
        return None
    try:
        run = json.loads(path.read_text())
        missing = [k for k in _COMPILE_META_KEYS if k not in run["meta"]]
        for i, r in enumerate(run["rows"]):
            keys = _COMPILE_ROW_KEYS + (_COMPILE_OK_KEYS if r.get("status") == "ok" else ())
            missing += [f"rows[{i}].{k}" for k in keys if k not in r]
            if "num_warps" not in r and "config" in r:
                m = _WARPS.search(str(r["config"]))
                if m is None:
                    missing.append(f"rows[{i}].num_warps (none in its config {r['config']!r})")
                else:
                    r["num_warps"] = int(m.group(1))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a results file of nbhelpers.compile_check ({e!r})") from e
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    run["path"] = str(path)
    return run
