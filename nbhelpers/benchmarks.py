"""Helpers for the scripts in benchmarks/: CPU wall-clock timing, and results files that keep
what a run measured.

:func:`best_time` times a CPU function (GPU timings need CUDA events: ``triton.testing.do_bench``).
:class:`ResultsFile` is a results file written as it grows, and :func:`sweep` runs a benchmark's
cases one after another into one, so that a run that crashes, runs out of time or is killed
halfway keeps every row it finished: on a short GPU session a benchmark that writes only at the
end can leave nothing.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["best_time", "write_results", "ResultsFile", "sweep"]


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Smallest wall-clock time of ``repeats`` calls of ``fn()``, in seconds."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


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

    Nothing is written until the first :meth:`add`; from then on each row is on disk as soon as it
    is added. Each write goes to a temporary file beside the results file and is renamed over it,
    so a reader (or a run killed mid-write) never sees half a file. ``meta["complete"]`` is False
    until :meth:`finish`, which may replace the rows (with derived fields added) and add top-level
    fields (a summary); a file whose run stopped early says so by its ``complete: false``.
    """

    def __init__(self, path: str | os.PathLike, meta: dict):
        if not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict, got {type(meta).__name__}")
        self.path = Path(path)
        self.meta = {**meta, "complete": False}
        self.rows: list[dict] = []
        self.extra: dict = {}

    def add(self, row: dict) -> dict:
        """Append one row and write the file; returns the row."""
        if not isinstance(row, dict):
            raise TypeError(f"a row must be a dict, got {type(row).__name__}")
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
            self.rows = list(rows)
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
