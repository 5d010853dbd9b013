"""Helpers for the scripts in benchmarks/: CPU wall-clock timing, and results files that keep
what a run measured.

:func:`interleaved_medians` times CPU functions against each other, the one timer of the course's
CPU measurements (GPU timings need CUDA events: ``triton.testing.do_bench``).
:class:`ResultsFile` is a results file written as it grows, and :func:`sweep` runs a benchmark's
cases one after another into one, so that a run that crashes, runs out of time or is killed
halfway keeps every row it finished: on a short GPU session a benchmark that writes only at the
end can leave nothing.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["interleaved_medians", "write_results", "ResultsFile", "sweep"]


def interleaved_medians(fns: dict, rounds: int, warmup_rounds: int = 1, calls: int = 1) -> dict:
    """Median wall-clock seconds per call of each function of ``fns`` (key -> function of no
    arguments), timed in interleaved rounds: every function once per round, in the dict's order,
    so that a slow spell of a small, shared machine hits all of them alike instead of one. The
    first ``warmup_rounds`` rounds are not kept (allocators, page faults, code paths warming up);
    each timing covers ``calls`` calls in a row and is divided by ``calls`` (for calls too short
    to time alone). Returns key -> median over ``rounds`` rounds.

    Why not :func:`timeit.repeat`: it times one statement at a time, all its repeats in a row, so
    a slow spell of the machine lands on one of the things compared; and why not
    ``torch.utils.benchmark.Timer``: the course times numpy code too, and a median of interleaved
    rounds is what the notebooks print and explain."""
    for name, v in (("rounds", rounds), ("warmup_rounds", warmup_rounds), ("calls", calls)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "warmup_rounds" else 1):
            raise ValueError(f"{name} must be an int >= {0 if name == 'warmup_rounds' else 1}, got {v!r}")
    if not fns:
        raise ValueError("fns must hold at least one function to time")
    times: dict = {k: [] for k in fns}
    for r in range(warmup_rounds + rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            dt = time.perf_counter() - t0
            if r >= warmup_rounds:
                times[key].append(dt / calls)
    return {k: statistics.median(v) for k, v in times.items()}


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
    With ``kind`` (a :class:`nbhelpers.results.ResultsKind`), ``meta`` and every row are checked
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
        # with the schema its reader uses (nbhelpers.results.ResultsKind), a file the reader would
        # refuse is refused here, before it is written
        self.kind = kind
        if kind is not None and kind.missing_in_meta(meta):
            raise ValueError(f"meta of a {kind.stem} results file lacks {', '.join(kind.missing_in_meta(meta))}")
        self.path = Path(path)
        self.meta = {**meta, "complete": False}
        self.rows: list[dict] = []
        self.extra: dict = {}

    def add(self, row: dict) -> dict:
        """Append one row and write the file; returns the row."""
        if not isinstance(row, dict):
            raise TypeError(f"a row must be a dict, got {type(row).__name__}")
        if self.kind is not None and self.kind.missing_in_row(row):
            raise ValueError(f"a row of a {self.kind.stem} results file lacks "
                             f"{', '.join(self.kind.missing_in_row(row))} "
                             f"(a row that was not measured says why in 'error'): {sorted(row)}")
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
                    raise ValueError(f"a row of a {self.kind.stem} results file lacks "
                                     f"{', '.join(self.kind.missing_in_row(row))}: {sorted(row)}")
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
