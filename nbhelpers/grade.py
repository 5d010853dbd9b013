"""Grade a folder of students' exercise notebooks with one command.

::

    python -m nbhelpers.grade PATH... --csv grades.csv --json grades.json [--seed N] [--jobs N]

(installed as the console script ``nbhelpers-grade``). Every ``PATH`` is a notebook or a folder
searched for ``*.ipynb``. For each submission the grader

1. reads the file once, read-only (it is never modified), and takes its code cells;
2. runs them in a fresh Jupyter kernel, in an empty temporary folder, driven by a worker process
   of its own
   (:func:`_worker_main`), with a time limit per cell and a total one (the worker and its kernel
   are killed when the total runs out). Check cells (cells that only call ``check(...)`` or
   ``summary(...)``) are skipped: they are for the student's eyes;
3. adds one last cell that calls each of the chapter's functions on the case *inputs* (sent as
   data, never the expected results) and writes what they return to a file in a plain data
   encoding (JSON with tagged NaN, infinities, -0.0, arrays as dtype, shape and bytes; see
   :func:`_encode`); nothing from the kernel is ever unpickled or executed;
4. judges those results in this process with :func:`nbhelpers.checks.score`, the very code a
   notebook's ``check`` cell uses, against expected results computed here from the course's
   references. The cases come from ``cases_for(exercise, seed)``: seed 0 is what students see,
   any other seed (``--seed``) gives hidden cases. The seed never leaves this process.

Results are written as each submission finishes: one CSV row (appended and synced) and the JSON
file (rewritten atomically), so an interrupted run keeps everything it finished and a rerun
skips submissions already graded (same file, same content) unless ``--regrade``.

A new chapter needs nothing here: the chapter is read from the notebook (``check("exNN.…")``
calls, or an ``exNN`` file name) and its exercises come from ``nbhelpers.exercises.chNN``.

docs/grading.md is the instructor's guide: options, outputs, statuses, the trust model and its
known limits.
"""
from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from . import checks
from .checks import CheckResult, Raised

__all__ = [
    "STATUSES",
    "GradeOptions",
    "Submission",
    "detect_chapter",
    "is_check_cell",
    "read_submission",
    "grade",
    "main",
]

# Submission statuses. The first four are given without running anything; otherwise a
# submission's status says the worst thing that happened while it ran (see _status_of), and its
# points are whatever its functions earned regardless.
STATUSES = (
    "invalid notebook",  # not JSON, not a notebook, unreadable, too large
    "empty",  # no code at all
    "unknown chapter",  # no exNN file name, no check("exNN.…") call, or a chapter without exercises
    "wrong chapter",  # a chapter other than --chapter
    "grader error",  # the grader itself failed (kernel would not start, ...); a rerun retries it
    "timeout",  # the total time limit ran out, a cell was interrupted, or a function ran out of time
    "kernel died",  # the kernel crashed (os._exit, segfault, out of memory)
    "cell error",  # a cell of the notebook raised an exception
    "graded",  # everything ran
)

MAX_NOTEBOOK_BYTES = 50 * 2**20  # a submission larger than this is not read
MAX_OUTPUT_LINE_BYTES = 256 * 2**20  # one exercise's results, as written by the kernel
MAX_KERNEL_STARTS = 5  # a kernel that dies is restarted without the cell (or function) that killed it
_DETAIL_LIMIT = 400  # characters of the CSV's detail column

# Codec limits, shared with the kernel side (the dict is copied into the grading cell).
_LIMITS = {
    "max_depth": 40,  # nesting of tuples, lists, dicts
    "max_items": 2_000_000,  # numbers, strings, ... in one value
    "max_array_bytes": 64 * 2**20,  # one array's raw bytes
    "max_str": 100_000,  # characters of one string
    "max_repr": 200,  # characters of the repr sent for a value that cannot be sent as data
    "max_message": 2_000,  # characters of an exception's message
}


# =============================================================================================
# The codec: plain data both ways, no pickles, no code
# =============================================================================================
#
# _encode / _decode and the kernel-side runner below are also sent, as source text, into the
# student's kernel (see _kernel_source), so they import what they need inside, use nothing else
# from this module but each other and _LIMITS, and never call anything they are handed except
# the student's own function and the methods a value's conversion needs (__float__, __array__).
#
# An encoded value is JSON: null, true/false, ints below 2**63, finite floats (not -0.0),
# strings and lists stand for themselves; everything else is a one-key object:
#   {"$float": "nan" | "inf" | "-inf" | "-0.0"}   {"$int": "0x..."}   {"$complex": [re, im]}
#   {"$tuple": [...]}   {"$dict": [[k, v], ...]}   {"$set": [...]}   {"$frozenset": [...]}
#   {"$bytes": base64}   {"$np": [dtype, base64]}   {"$nd": [dtype, shape, base64]}
#   {"$nd_str": [dtype, shape, [...]]}   {"$nd_obj": [shape, [...]]}
#   {"$rng": [bit generator name, state]}   {"$enum": [module, class, member]}
#   {"$dc": [module, class, {field: value}]}   {"$opaque": [type name, repr]}
# dtype is numpy's dtype.str ("<f8", "|b1") or an ml_dtypes name ("bfloat16").
# "$opaque" stands for a value that cannot be sent as data (a student's own class); it decodes
# to a stand-in object that equals nothing.


def _encode(value: Any, strict: bool = False) -> Any:
    """``value`` as JSON-ready data (see the table above); never raises unless ``strict``.

    With ``strict`` (the grader encoding case inputs) a value that would become "$opaque"
    raises ValueError instead.
    """
    import base64 as b64
    import dataclasses
    import enum
    import math as m
    import operator

    import numpy as np

    try:
        import ml_dtypes
    except Exception:  # pragma: no cover - ml_dtypes is a dependency
        ml_dtypes = None

    limits = _LIMITS
    budget = [limits["max_items"]]

    def short_repr(v: Any) -> str:
        try:
            s = repr(v)
        except KeyboardInterrupt:
            raise
        except BaseException:
            s = "<unprintable>"
        if not isinstance(s, str):
            s = "<unprintable>"
        s = " ".join(s.split())
        n = limits["max_repr"]
        return s if len(s) <= n else s[: n - 4] + " ..."

    def type_name(v: Any) -> str:
        try:
            name = type(v).__name__
        except BaseException:  # noqa: BLE001 - a hostile metaclass
            name = "object"
        return name if isinstance(name, str) else "object"

    def opaque(v: Any, why: str = "") -> dict:
        if strict:
            raise ValueError(f"cannot send a {type_name(v)} as data{': ' + why if why else ''}")
        text = short_repr(v) if not why else f"<{type_name(v)}: {why}>"
        return {"$opaque": [type_name(v)[:60], text]}

    def dtype_spec(dt: Any) -> str | None:
        if str(getattr(dt.type, "__module__", "")).startswith("ml_dtypes"):  # kind "V" or "f"
            name = dt.name
            if ml_dtypes is not None and isinstance(getattr(ml_dtypes, name, None), type) \
                    and np.dtype(getattr(ml_dtypes, name)) == dt:
                return name
            return None
        if dt.kind in "biufc" and dt.fields is None and dt.subdtype is None:
            return dt.str
        return None

    def float_code(x: float) -> Any:
        if m.isfinite(x) and not (x == 0 and m.copysign(1.0, x) < 0):
            return x
        return {"$float": "nan" if m.isnan(x) else repr(x)}

    def int_code(n: int) -> Any:
        return n if -(2**63) < n < 2**63 else {"$int": hex(n)}

    def enc(v: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            return opaque(v, "too many values")
        if depth > limits["max_depth"]:
            return opaque(v, "nested too deeply")
        t = type(v)
        if v is None or t is bool:
            return v
        if t is int:
            return int_code(v)
        if t is float:
            return float_code(v)
        if t is str:
            return v if len(v) <= limits["max_str"] else opaque(v, f"a string of length {len(v)}")
        if t is complex:
            return {"$complex": [float_code(v.real), float_code(v.imag)]}
        if isinstance(v, np.ndarray):
            return enc_array(v, depth)
        if isinstance(v, np.generic):
            spec = dtype_spec(v.dtype)
            if spec is not None:
                return {"$np": [spec, b64.b64encode(np.asarray(v).tobytes()).decode("ascii")]}
            if isinstance(v, (np.str_, np.bytes_)):
                return enc(v.item(), depth)
            return opaque(v)
        if isinstance(v, bool):  # bool subclasses (there are none, but be safe)
            return bool(v)
        if isinstance(v, int):
            return int_code(int(v))
        if isinstance(v, float):
            return float_code(float(v))
        if isinstance(v, complex):
            return enc(complex(v), depth)
        if isinstance(v, str):
            return enc(str(v), depth)
        if isinstance(v, (bytes, bytearray)):
            if len(v) > limits["max_array_bytes"]:
                return opaque(v, f"{len(v)} bytes")
            return {"$bytes": b64.b64encode(bytes(v)).decode("ascii")}
        if isinstance(v, tuple):  # a NamedTuple goes as a plain tuple
            return {"$tuple": [enc(x, depth + 1) for x in v]}
        if isinstance(v, list):
            if len(v) > budget[0]:
                return opaque(v, f"a list of length {len(v)}")
            return [enc(x, depth + 1) for x in v]
        if isinstance(v, dict):
            if len(v) > budget[0]:
                return opaque(v, f"a dict of length {len(v)}")
            return {"$dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        if isinstance(v, (set, frozenset)):
            if len(v) > budget[0]:
                return opaque(v, f"a set of length {len(v)}")
            tag = "$frozenset" if isinstance(v, frozenset) else "$set"
            return {tag: [enc(x, depth + 1) for x in v]}
        if isinstance(v, np.random.Generator):
            bg = v.bit_generator
            return {"$rng": [type(bg).__name__, enc(bg.state, depth + 1)]}
        module = getattr(t, "__module__", "") or ""
        if isinstance(module, str) and (module == "nbhelpers" or module.startswith("nbhelpers.")):
            if isinstance(v, enum.Enum):
                return {"$enum": [module, t.__qualname__, v.name]}
            if dataclasses.is_dataclass(v):
                fields = {f.name: enc(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v) if f.init}
                return {"$dc": [module, t.__qualname__, fields]}
        if strict:
            return opaque(v)
        # Something the student made: convert it the way checks.same_value would look at it.
        if any(hasattr(v, a) for a in ("__array__", "__array_interface__", "__array_struct__")):
            a = np.asarray(v)
            if isinstance(a, np.ndarray) and a.dtype.kind != "O":
                return enc_array(a, depth)
            return opaque(v)
        try:
            return int_code(operator.index(v))
        except (TypeError, ValueError):
            pass
        try:
            x = float(v)
        except (TypeError, ValueError, OverflowError):
            return opaque(v)
        return float_code(x) if type(x) is float else opaque(v)

    def enc_array(a: Any, depth: int) -> Any:
        shape = [int(n) for n in a.shape]
        spec = dtype_spec(a.dtype)
        if spec is not None:
            if a.nbytes > limits["max_array_bytes"]:
                return opaque(a, f"an array of shape {tuple(shape)}, too large to send")
            data = np.ascontiguousarray(a).tobytes()
            return {"$nd": [spec, shape, b64.b64encode(data).decode("ascii")]}
        if a.dtype.kind in "US" and a.nbytes <= limits["max_array_bytes"]:
            return {"$nd_str": [a.dtype.str, shape, [enc(x, depth + 1) for x in a.ravel().tolist()]]}
        if a.dtype.kind == "O" and a.size <= budget[0]:
            return {"$nd_obj": [shape, [enc(x, depth + 1) for x in a.ravel().tolist()]]}
        return opaque(a, f"an array of dtype {a.dtype} and shape {tuple(shape)}")

    if strict:
        return enc(value, 0)
    try:
        return enc(value, 0)
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 - a student's __float__, __array__, ... failed
        return opaque(value, "could not be converted")


def _decode(data: Any, make_opaque: Callable[[str, str], Any]) -> Any:
    """The value :func:`_encode` encoded; ``make_opaque(type_name, text)`` makes "$opaque" values.

    Raises ValueError (or another Exception) on data that is not a valid encoding.
    """
    import base64 as b64
    import binascii
    import dataclasses
    import enum
    import importlib
    import re as _re

    import numpy as np

    try:
        import ml_dtypes
    except Exception:  # pragma: no cover
        ml_dtypes = None

    limits = _LIMITS
    name_re = _re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    rngs = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")

    def dtype_of(spec: Any) -> Any:
        if not isinstance(spec, str) or len(spec) > 40:
            raise ValueError("bad dtype")
        if ml_dtypes is not None and _re.match(r"^[a-z0-9_]+$", spec) and isinstance(getattr(ml_dtypes, spec, None), type):
            return np.dtype(getattr(ml_dtypes, spec))
        dt = np.dtype(spec)
        if dt.kind not in "biufcUS" or dt.fields is not None or dt.subdtype is not None:
            raise ValueError(f"dtype {spec!r} not allowed")
        return dt

    def shape_of(s: Any) -> tuple:
        if not isinstance(s, list) or len(s) > 32 or not all(type(n) is int and 0 <= n < 2**40 for n in s):
            raise ValueError("bad shape")
        return tuple(s)

    def raw(text: Any) -> bytes:
        if not isinstance(text, str) or len(text) > 2 * limits["max_array_bytes"]:
            raise ValueError("bad data")
        try:
            return b64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as e:
            raise ValueError("bad base64") from e

    def nbhelpers_class(module: Any, qualname: Any) -> type:
        if not (isinstance(module, str) and isinstance(qualname, str) and name_re.match(module)
                and name_re.match(qualname) and (module == "nbhelpers" or module.startswith("nbhelpers."))):
            raise ValueError("bad class name")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        if not isinstance(obj, type):
            raise ValueError("not a class")
        return obj

    def dec(d: Any, depth: int) -> Any:
        if depth > limits["max_depth"] + 2:
            raise ValueError("nested too deeply")
        if d is None or type(d) in (bool, int, float, str):
            return d
        if type(d) is list:
            return [dec(x, depth + 1) for x in d]
        if type(d) is not dict or len(d) != 1:
            raise ValueError("not an encoded value")
        (tag, v), = d.items()
        if tag == "$float":
            if v not in ("nan", "inf", "-inf", "-0.0"):
                raise ValueError("bad float")
            return float(v)
        if tag == "$int":
            if not isinstance(v, str) or len(v) > 100_000 or not _re.match(r"^-?0x[0-9a-f]+$", v):
                raise ValueError("bad int")
            return int(v, 16)
        if tag == "$complex":
            re_, im_ = (dec(x, depth + 1) for x in v)
            if type(re_) not in (int, float) or type(im_) not in (int, float):
                raise ValueError("bad complex")
            return complex(re_, im_)
        if tag == "$tuple":
            if type(v) is not list:
                raise ValueError("bad tuple")
            return tuple(dec(x, depth + 1) for x in v)
        if tag == "$dict":
            if type(v) is not list:
                raise ValueError("bad dict")
            out = {}
            for pair in v:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("bad dict item")
                out[dec(pair[0], depth + 1)] = dec(pair[1], depth + 1)
            return out
        if tag in ("$set", "$frozenset"):
            if type(v) is not list:
                raise ValueError("bad set")
            items = [dec(x, depth + 1) for x in v]
            return set(items) if tag == "$set" else frozenset(items)
        if tag == "$bytes":
            return raw(v)
        if tag == "$np":
            spec, data = v
            dt = dtype_of(spec)
            buf = raw(data)
            if len(buf) != dt.itemsize or dt.kind in "US":
                raise ValueError("bad scalar")
            return np.frombuffer(buf, dtype=dt)[0]
        if tag == "$nd":
            spec, shape, data = v
            dt, shape, buf = dtype_of(spec), shape_of(shape), raw(data)
            if dt.kind in "US":
                raise ValueError("bad array")
            n = 1
            for k in shape:
                n *= k
            if n * dt.itemsize != len(buf):
                raise ValueError("array size does not match its shape")
            return np.frombuffer(buf, dtype=dt).reshape(shape).copy()
        if tag == "$nd_str":
            spec, shape, items = v
            dt, shape = dtype_of(spec), shape_of(shape)
            if dt.kind not in "US" or type(items) is not list:
                raise ValueError("bad string array")
            items = [dec(x, depth + 1) for x in items]
            return np.array(items, dtype=dt).reshape(shape)
        if tag == "$nd_obj":
            shape, items = v
            shape = shape_of(shape)
            if type(items) is not list:
                raise ValueError("bad object array")
            a = np.empty(len(items), dtype=object)
            for i, x in enumerate(items):
                a[i] = dec(x, depth + 1)
            return a.reshape(shape)
        if tag == "$rng":
            name, state = v
            if name not in rngs:
                raise ValueError("unknown bit generator")
            bg = getattr(np.random, name)()
            bg.state = dec(state, depth + 1)
            return np.random.Generator(bg)
        if tag == "$enum":
            module, qualname, member = v
            cls = nbhelpers_class(module, qualname)
            if not issubclass(cls, enum.Enum) or not isinstance(member, str):
                raise ValueError("not an enum")
            return cls[member]
        if tag == "$dc":
            module, qualname, fields = v
            cls = nbhelpers_class(module, qualname)
            if not dataclasses.is_dataclass(cls) or type(fields) is not dict:
                raise ValueError("not a dataclass")
            return cls(**{str(k): dec(x, depth + 1) for k, x in fields.items()})
        if tag == "$opaque":
            name, text = v
            if not isinstance(name, str) or not isinstance(text, str):
                raise ValueError("bad opaque value")
            return make_opaque(name, text)
        raise ValueError(f"unknown tag {str(tag)[:20]!r}")

    return dec(data, 0)


class _Opaque:
    """Stands for a value a kernel returned that could not be sent as data; equals nothing."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text

    __hash__ = object.__hash__


_STAND_INS: dict[str, type] = {}
_STAND_INS_LOCK = threading.Lock()


def _stand_in(type_name: str, text: str) -> _Opaque:
    """An :class:`_Opaque` whose class has the student's type name (so reports read "returned
    MyThing <...>"), with the kernel's repr as its repr."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(type_name))[:60] or "object"
    if not name[0].isalpha() and name[0] != "_":
        name = "_" + name
    with _STAND_INS_LOCK:
        cls = _STAND_INS.get(name)
        if cls is None:
            cls = type(name, (_Opaque,), {"__slots__": ()}) if len(_STAND_INS) < 1000 else _Opaque
            _STAND_INS[name] = cls
    return cls(checks._truncate(str(text), _LIMITS["max_repr"]))


def _decode_result(data: Any) -> Any:
    """A kernel's encoded return value, or a stand-in when the data is not a valid encoding."""
    try:
        return _decode(data, _stand_in)
    except RecursionError:
        return _stand_in("unreadable", "<a value the grader could not read>")
    except Exception:
        return _stand_in("unreadable", "<a value the grader could not read>")


# =============================================================================================
# Kernel side: the last cell, run inside the student's kernel
# =============================================================================================

def _kernel_main(ns: dict, job: dict) -> None:
    """Call each exercise's function from the notebook's namespace ``ns`` on every case input.

    Writes one JSON line per exercise to ``job["outputs"]``: ``{"start": id}`` before it and
    ``{"id": id, "results": [...]}`` after it (or ``"missing"`` / ``"not_callable"``), where a
    result is ``{"v": value}``, ``{"r": {"type", "message", "ni"}}`` for an exception (``ni``:
    a NotImplementedError) or ``{"t": seconds}`` when the function's time ran out. Each
    exercise's calls together get ``job["budget"]`` seconds (SIGALRM), so one stuck function
    does not cost the others.
    """
    import contextlib
    import json
    import os
    import signal
    import threading
    import time
    import warnings

    import numpy as np

    with open(job["inputs"], encoding="utf-8") as f:
        spec = json.load(f)
    budget = float(job["budget"])
    only = job.get("only")

    class _TimeLimit(BaseException):
        pass

    class _Null:
        def write(self, s):
            return len(s)

        def flush(self):
            pass

    armed = [False]

    def on_alarm(signum, frame):
        if armed[0]:
            raise _TimeLimit()

    can_alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if can_alarm:  # someone else's timer (pytest-timeout, say) is put back at the end
        t_start, old_timer = time.monotonic(), signal.getitimer(signal.ITIMER_REAL)
        old_handler = signal.signal(signal.SIGALRM, on_alarm)

    def arm(seconds):
        armed[0] = True
        if can_alarm:
            signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001), 0.25)  # repeats if swallowed

    def disarm():
        armed[0] = False
        if can_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def no_opaque(name, text):
        raise ValueError("opaque input")

    def describe(e):
        try:
            name = type(e).__name__
            name = name if isinstance(name, str) else "Exception"
        except BaseException:
            name = "Exception"
        try:
            msg = str(e)
            msg = msg if isinstance(msg, str) else ""
        except KeyboardInterrupt:
            raise
        except BaseException:
            msg = ""
        return {"type": name[:100], "message": msg[: _LIMITS["max_message"]],
                "ni": isinstance(e, NotImplementedError)}

    def call(fn, args, kwargs):
        null = _Null()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with np.errstate(all="ignore"), contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                    value = fn(*args, **kwargs)
        except (_TimeLimit, KeyboardInterrupt):
            raise
        except BaseException as e:  # noqa: BLE001 - SystemExit too: a student's bug
            return {"r": describe(e)}
        return {"v": _encode(value)}

    out = open(job["outputs"], "a", encoding="utf-8")

    def emit(record):
        out.write(json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n")
        out.flush()
        os.fsync(out.fileno())

    try:
        for ex in spec["exercises"]:
            if only is not None and ex["id"] not in only:
                continue
            emit({"start": ex["id"]})
            name = ex["name"]
            if name not in ns:
                emit({"id": ex["id"], "missing": True})
                continue
            fn = ns[name]
            if not callable(fn):
                emit({"id": ex["id"], "not_callable": type(fn).__name__[:100]})
                continue
            results = []
            deadline = time.monotonic() + budget
            for i, case in enumerate(ex["cases"]):
                args = [_decode(a, no_opaque) for a in case["a"]]
                kwargs = {k: _decode(v, no_opaque) for k, v in case["k"].items()}
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    results.append({"t": budget})
                    break
                try:
                    arm(remaining)
                    try:
                        r = call(fn, args, kwargs)
                    finally:
                        disarm()
                except _TimeLimit:
                    results.append({"t": budget})
                    break
                results.append(r)
                if i == 0 and "r" in r and r["r"]["ni"]:
                    break  # not written yet: one call is enough (as in checks.run_check)
            emit({"id": ex["id"], "results": results})
    finally:
        disarm()
        if can_alarm:
            signal.signal(signal.SIGALRM, signal.SIG_DFL if old_handler is None else old_handler)
            if old_timer[0] > 0:
                left = old_timer[0] - (time.monotonic() - t_start)
                signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), old_timer[1])
        out.close()


_KERNEL_FUNCTIONS = (_encode, _decode, _kernel_main)


def _kernel_source() -> str:
    """The source of the codec and runner, to be executed in a fresh namespace in the kernel."""
    import inspect

    parts = ["from __future__ import annotations", f"_LIMITS = {_LIMITS!r}"]
    parts += [inspect.getsource(f) for f in _KERNEL_FUNCTIONS]
    return "\n\n".join(parts)


def _grading_cell(job: dict) -> str:
    """The cell appended to a submission: runs :func:`_kernel_main` on the notebook's namespace.

    Only builtins reached through the ``builtins`` module are used, so a notebook that reuses
    names such as ``exec`` or ``compile`` does not break it.
    """
    return (
        "def __nbhelpers_grade_cell():\n"
        "    import builtins as b\n"
        "    ns = {'__name__': 'nbhelpers_grade_runner'}\n"
        f"    b.exec(b.compile({_kernel_source()!r}, '<nbhelpers.grade>', 'exec'), ns)\n"
        f"    ns['_kernel_main'](b.globals(), {job!r})\n"
        "__nbhelpers_grade_cell()\n"
    )


# =============================================================================================
# Reading a submission
# =============================================================================================

_FILE_CHAPTER_RE = re.compile(r"(?<![A-Za-z0-9])ex(\d{2})(?!\d)", re.IGNORECASE)
_CHECK_CALL_RE = re.compile(r"\bcheck\(\s*(?:exercise_id\s*=\s*)?[\"']ex(\d{2})\.")
_SUMMARY_CALL_RE = re.compile(r"\bsummary\(\s*(?:chapter\s*=\s*)?(\d{1,3})\s*\)")


@dataclass
class Submission:
    """One submitted notebook, read once.

    file: the path as shown in the outputs; path: where it is; sha256: of its bytes.
    cells: ``(index in the notebook, source)`` of every code cell, when the file is a notebook.
    problem: why the file is not a gradable notebook ("invalid notebook" or "empty"), else None.
    """

    file: str
    path: Path
    sha256: str = ""
    cells: list[tuple[int, str]] = field(default_factory=list)
    problem: str | None = None
    detail: str = ""


def _cells_of(nb: Any) -> list[tuple[int, str]]:
    """Code cells of a parsed notebook (nbformat 4, or 3's worksheets), as (index, source)."""
    if not isinstance(nb, dict):
        raise ValueError(f"not a notebook: the file holds a JSON {type(nb).__name__}, not an object")
    if isinstance(nb.get("cells"), list):
        raw = nb["cells"]
        key = "source"
    elif isinstance(nb.get("worksheets"), list):  # nbformat 3
        raw = [c for ws in nb["worksheets"] if isinstance(ws, dict) for c in (ws.get("cells") or [])]
        key = "input"
    else:
        raise ValueError("not a notebook: it has no list of cells")
    cells = []
    for i, cell in enumerate(raw):
        if not isinstance(cell, dict):
            raise ValueError(f"not a notebook: cell {i + 1} is a {type(cell).__name__}, not an object")
        if cell.get("cell_type") != "code":
            continue
        src = cell.get(key, cell.get("source", ""))
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise ValueError(f"not a notebook: code cell {i + 1} has no text")
        cells.append((i, src))
    return cells


def read_submission(path: Path, file: str | None = None) -> Submission:
    """Read a submission read-only and decide whether it is a notebook with code in it."""
    sub = Submission(file=file or str(path), path=path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as e:
        sub.problem, sub.detail = "invalid notebook", f"cannot read the file: {e.strerror or e}"
        return sub
    sub.sha256 = hashlib.sha256(data).hexdigest()
    if len(data) > MAX_NOTEBOOK_BYTES:
        sub.problem, sub.detail = "invalid notebook", f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MB"
        return sub
    try:
        nb = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        sub.problem, sub.detail = "invalid notebook", "not a notebook: the file is not UTF-8 text"
        return sub
    except (ValueError, RecursionError) as e:
        sub.problem, sub.detail = "invalid notebook", f"not a notebook: invalid JSON ({checks._truncate(str(e), 120)})"
        return sub
    try:
        sub.cells = _cells_of(nb)
    except ValueError as e:
        sub.problem, sub.detail = "invalid notebook", str(e)
        return sub
    if not any(src.strip() for _, src in sub.cells):
        sub.problem, sub.detail = "empty", "the notebook has no code"
    return sub


def detect_chapter(file_name: str, cells: Iterable[tuple[int, str]], expected: int | None = None
                   ) -> tuple[int | None, str]:
    """The chapter a notebook belongs to, and a note when the signs disagree.

    The notebook's own ``check("exNN.…")`` and ``summary(NN)`` calls decide; the file name
    (``exNN_…``) only when there are none, or to choose between several. ``expected`` (the
    ``--chapter`` option) also chooses between several. None when nothing says.
    """
    m = _FILE_CHAPTER_RE.search(Path(file_name).name)
    from_name = int(m.group(1)) if m else None
    text = "\n".join(src for _, src in cells)
    from_calls = {int(c) for c in _CHECK_CALL_RE.findall(text)} | {int(c) for c in _SUMMARY_CALL_RE.findall(text)}
    if len(from_calls) == 1:
        (ch,) = from_calls
        note = (f"its file name says chapter {from_name:02d}, its check cells chapter {ch:02d}"
                if from_name is not None and from_name != ch else "")
        return ch, note
    if len(from_calls) > 1:
        listed = ", ".join(f"{c:02d}" for c in sorted(from_calls))
        for pick in (from_name, expected):
            if pick in from_calls:
                return pick, f"its check cells name chapters {listed}"
        return None, f"its check cells name several chapters ({listed})"
    if from_name is not None:
        return from_name, ""
    return None, ""


def is_check_cell(source: str) -> bool:
    """True for a cell whose every statement is a call of ``check(...)`` or ``summary(...)``
    (possibly assigned, possibly ``checks.check``); such cells are skipped when grading."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    if not tree.body:
        return False
    for stmt in tree.body:
        if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Call):
            f = stmt.value.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in ("check", "summary"):
                continue
        return False
    return True


# =============================================================================================
# Worker: runs one submission's notebook in a kernel (a separate process, killed on timeout)
# =============================================================================================

_current_kernel_pid: list[int] = []


def _kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a kernel and whatever it started)."""
    if not hasattr(os, "killpg"):  # pragma: no cover - not POSIX
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # gone already
        pass


def _worker_main(job_path: str) -> int:
    """Run the notebook described by the job file; report through files, never through stdout.

    Appends events (JSON lines) to ``job["events"]``: cell errors, cells interrupted at the
    time limit, kernel deaths (after which the kernel is restarted without the cell or function
    that killed it), and ``{"event": "done"}`` at the end.
    """
    # nbformat imports jsonschema, which imports the optional rfc3987_syntax when it is installed;
    # that builds a parser and costs about a second per submission. Nothing here validates IRIs.
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)

    def on_term(signum: int, frame: Any) -> None:
        for pid in _current_kernel_pid:
            _kill_group(pid)
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)

    events_file = open(job["events"], "a", encoding="utf-8")

    def event(**kw: Any) -> None:
        events_file.write(json.dumps(kw) + "\n")
        events_file.flush()

    class Client(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):  # keep errors only: bounded memory
            if msg.get("msg_type") == "error":
                content = msg.get("content", {})
                outs.append(nbformat.v4.new_output(
                    "error", ename=str(content.get("ename", ""))[:200],
                    evalue=str(content.get("evalue", ""))[:2000], traceback=[]))
            return None

    cell_timeout = float(job["cell_timeout"])
    cells = [(i, src) for i, src, check_only in job["cells"] if src.strip() and not check_only]
    exercise_ids = list(job["exercise_ids"])
    dead_cells: set[int] = set()
    remaining = list(exercise_ids)
    reported: set[tuple] = set()

    def first_line(src: str) -> str:
        line = next((ln.strip() for ln in src.splitlines() if ln.strip()), "")
        return line if len(line) <= 40 else line[:37] + "..."

    def progress_in_outputs() -> tuple[set[str], list[str]]:
        finished, started = set(), []
        try:
            with open(job["outputs"], encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and isinstance(rec.get("start"), str):
                        started.append(rec["start"])
                    elif isinstance(rec, dict) and isinstance(rec.get("id"), str):
                        finished.add(rec["id"])
        except OSError:
            pass
        return finished, started

    for start in range(1, MAX_KERNEL_STARTS + 1):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src) for _, src in cells]
        client = Client(nb, timeout=int(math.ceil(cell_timeout)), kernel_name=job["kernel_name"],
                        allow_errors=True, interrupt_on_timeout=True, shutdown_kernel="immediate",
                        resources={"metadata": {"path": job["cwd"]}}, startup_timeout=120)
        restart = False
        try:
            with client.setup_kernel():
                pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
                if pid:
                    _current_kernel_pid[:] = [pid]
                    with open(job["kernels"], "a") as f:
                        f.write(f"{pid}\n")
                died_at = None
                for pos, (index, src) in enumerate(cells):
                    if index in dead_cells:
                        continue
                    t0 = time.monotonic()
                    try:
                        cell = client.execute_cell(nb.cells[pos], pos)
                    except DeadKernelError:
                        died_at = index
                        break
                    elapsed = time.monotonic() - t0
                    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
                    if elapsed >= cell_timeout and ("timeout", index) not in reported:
                        reported.add(("timeout", index))
                        event(event="cell_timeout", cell=index + 1, line=first_line(src), seconds=cell_timeout)
                    elif errors and ("error", index) not in reported:
                        reported.add(("error", index))
                        event(event="cell_error", cell=index + 1, line=first_line(src),
                              ename=errors[0].get("ename", ""), evalue=errors[0].get("evalue", ""))
                if died_at is not None:
                    dead_cells.add(died_at)
                    src = dict(cells)[died_at]
                    event(event="kernel_died", cell=died_at + 1, line=first_line(src))
                    restart = True
                else:
                    job_cell = {"inputs": job["inputs"], "outputs": job["outputs"],
                                "budget": float(job["budget"]), "only": remaining}
                    gcell = nbformat.v4.new_code_cell(_grading_cell(job_cell))
                    nb.cells.append(gcell)
                    client.timeout = int(math.ceil(float(job["budget"]) * max(len(remaining), 1) + 30))
                    try:
                        cell = client.execute_cell(gcell, len(nb.cells) - 1)
                    except DeadKernelError:
                        finished, started = progress_in_outputs()
                        running = [s for s in started if s not in finished and s in remaining]
                        if running:
                            event(event="kernel_died", exercise=running[-1])
                            remaining = [e for e in remaining if e not in finished and e != running[-1]]
                            restart = bool(remaining)
                        else:
                            event(event="kernel_died", grading=True)
                    else:
                        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
                        if errors:
                            event(event="grading_error", ename=errors[0].get("ename", ""),
                                  evalue=errors[0].get("evalue", ""))
        finally:
            for pid in _current_kernel_pid:
                _kill_group(pid)  # the kernel's own process group: whatever it started goes too
            _current_kernel_pid.clear()
        if not restart:
            break
    event(event="done", kernel_starts=start)
    events_file.close()
    return 0


# =============================================================================================
# Trusted side: plans, running a worker, judging its results
# =============================================================================================

@dataclass
class GradeOptions:
    seed: int = 0
    chapter: int | None = None
    jobs: int = 1
    cell_timeout: float = 60.0
    timeout: float = 300.0
    regrade: bool = False
    kernel_name: str = "python3"
    progress: bool = True

    @property
    def secret(self) -> bool:
        return self.seed != 0


@dataclass
class _ExercisePlan:
    exercise: checks.Exercise
    cases: list = field(default_factory=list)
    expected: list = field(default_factory=list)
    encoded: list | None = None
    error: str | None = None  # the course's side failed for this exercise


@dataclass
class _ChapterPlan:
    chapter: int
    exercises: list[_ExercisePlan]
    inputs_json: str = ""

    @property
    def max_points(self) -> int:
        return sum(p.exercise.points for p in self.exercises)


def _plan_chapter(chapter: int, seed: int) -> _ChapterPlan | None:
    """Cases, expected results and encoded inputs for every exercise of a chapter (None if it
    has none). Runs in the trusted process only: the seed and the expected results stay here."""
    try:
        exercises = checks.exercises_of(chapter)
    except Exception:  # a chapter module that fails to import: its exercises cannot be graded
        return None
    if not exercises:
        return None
    plans = []
    payload = []
    for ex in exercises:
        p = _ExercisePlan(ex)
        try:
            p.cases = checks.cases_for(ex, seed)
            p.expected = checks.expected_outputs(ex, p.cases)
            p.encoded = [{"a": [_encode(a, strict=True) for a in c.args],
                          "k": {str(k): _encode(v, strict=True) for k, v in c.kwargs.items()}} for c in p.cases]
        except Exception as e:  # noqa: BLE001 - a bug on the course's side, reported per exercise
            p.error = f"the grader cannot check this exercise (not the student's fault): {checks._describe_exception(e)}"
            p.encoded = None
        plans.append(p)
        if p.encoded is not None:
            payload.append({"id": ex.id, "name": ex.name, "cases": p.encoded})
    plan = _ChapterPlan(chapter, plans)
    plan.inputs_json = json.dumps({"exercises": payload}, allow_nan=False, separators=(",", ":"))
    for p in plans:  # the encoded inputs are in inputs_json now
        p.encoded = None
    return plan


def _nbhelpers_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


def _worker_env() -> dict:
    """The environment of a worker and its kernel: ours, with this nbhelpers importable."""
    env = dict(os.environ)
    root = _nbhelpers_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("JPY_PARENT_PID", None)
    return env


class _Running:
    """The worker processes alive right now, so that Ctrl-C can stop them all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: dict[int, tuple[subprocess.Popen, Path]] = {}
        self.stopping = False

    def add(self, proc: subprocess.Popen, jobdir: Path) -> None:
        with self.lock:
            self.procs[proc.pid] = (proc, jobdir)

    def remove(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.procs.pop(proc.pid, None)

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            procs = list(self.procs.values())
        for proc, jobdir in procs:
            _stop_worker(proc, jobdir)


def _is_our_kernel(pid: int, worker_pid: int) -> bool:
    """Whether process ``pid`` is still the kernel our worker ``worker_pid`` started (and not a
    stranger that reused the number): a process group leader whose environment names the worker."""
    try:
        if os.getpgid(pid) != pid:
            return False
    except OSError:
        return False
    environ = Path(f"/proc/{pid}/environ")
    if not environ.parent.exists():
        return True  # no /proc (macOS): the group check is all there is
    try:
        return f"JPY_PARENT_PID={worker_pid}".encode() in environ.read_bytes().split(b"\0")
    except OSError:
        return False


def _stop_worker(proc: subprocess.Popen, jobdir: Path) -> None:
    """Stop a worker and its kernels: SIGTERM (the worker kills its kernel), then SIGKILL."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            pass
    kernels = []
    try:
        kernels = [int(x) for x in (jobdir / "kernels.txt").read_text().split() if x.isdigit()]
    except OSError:
        pass
    for pid in kernels:
        if _is_our_kernel(pid, proc.pid):
            _kill_group(pid)
    if proc.poll() is None:
        _kill_group(proc.pid)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _read_events(path: Path) -> list[dict]:
    events = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if isinstance(e, dict) and isinstance(e.get("event"), str):
                    events.append(e)
    except OSError:
        pass
    return events


def _read_outputs(path: Path, plan: _ChapterPlan) -> dict[str, dict]:
    """Each exercise's results as the kernel wrote them: the first complete line per exercise.
    Robust to anything in the file (it was written by the student's kernel)."""
    ids = {p.exercise.id for p in plan.exercises}
    found: dict[str, dict] = {}
    try:
        f = open(path, "rb")
    except OSError:
        return found
    with f:
        while True:
            line = f.readline(MAX_OUTPUT_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > MAX_OUTPUT_LINE_BYTES:
                while line and not line.endswith(b"\n"):  # skip the rest of the huge line
                    line = f.readline(MAX_OUTPUT_LINE_BYTES)
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if not isinstance(rec, dict) or rec.get("id") not in ids or rec["id"] in found:
                continue
            found[rec["id"]] = rec
    return found


def _timeout_raised(seconds: Any) -> Raised:
    s = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0
    return Raised.from_parts("TimeoutError", f"no result within {s:g} s, the grader's time limit for this function")


def _judge(p: _ExercisePlan, rec: dict | None, missing_reason: tuple[str, str]) -> CheckResult:
    """The CheckResult of one exercise from its kernel record (None: the kernel never wrote one)."""
    ex = p.exercise
    n = len(p.cases)

    def bare(status: str, error: str, n_failed: int = n) -> CheckResult:
        return CheckResult(ex.id, ex.title, 0, ex.points, n, n_failed, [], error, status)

    if p.error is not None:
        return bare("ERROR", p.error, 0)
    if rec is None:
        return bare(*missing_reason)
    if rec.get("missing") is True:
        return bare("MISSING", f"the notebook does not define {ex.name}")
    if "not_callable" in rec:
        # the same words as checks.run_check
        return CheckResult(ex.id, ex.title, 0, ex.points, 0, 0, [], f"expected a function, got {str(rec['not_callable'])[:100]}")
    results = rec.get("results")
    if not isinstance(results, list):
        return bare("ERROR", "the grader could not read this function's results")
    got: list = []
    timed_out = False
    for r in results[:n]:
        if isinstance(r, dict) and "v" in r and len(r) == 1:
            got.append(_decode_result(r["v"]))
        elif isinstance(r, dict) and isinstance(r.get("r"), dict):
            e = r["r"]
            got.append(Raised.from_parts(str(e.get("type", "Exception"))[:100], str(e.get("message", ""))[:4000],
                                         e.get("ni") is True))
        elif isinstance(r, dict) and "t" in r:
            got.append(_timeout_raised(r["t"]))
            timed_out = True
            break
        else:
            got.append(_stand_in("unreadable", "<a result the grader could not read>"))
    result = checks.score(ex, p.cases, p.expected, got)
    if timed_out:
        result.status = "TIMEOUT"
        result.points = 0
    return result


def _event_text(e: dict) -> str:
    where = f"cell {e.get('cell')} ({e.get('line', '')})" if e.get("cell") else ""
    kind = e.get("event")
    if kind == "cell_error":
        what = f"{e.get('ename', '')}: {e.get('evalue', '')}" if e.get("evalue") else str(e.get("ename", ""))
        return f"{where} raised {checks._truncate(what, 160)}"
    if kind == "cell_timeout":
        return f"{where} ran past the {e.get('seconds', 0):g} s limit and was interrupted"
    if kind == "kernel_died":
        if e.get("exercise"):
            return f"the kernel died while checking {e['exercise']}"
        if e.get("grading"):
            return "the kernel died while the functions were checked"
        return f"the kernel died in {where}; the notebook was rerun without that cell"
    if kind == "grading_error":
        return f"the functions could not be checked: {checks._truncate(str(e.get('ename', '')) + ': ' + str(e.get('evalue', '')), 160)}"
    return ""


def _status_of(events: list[dict], total_timeout: bool, worker_failed: bool, results: dict) -> str:
    kinds = {e.get("event") for e in events}
    if total_timeout:
        return "timeout"
    if worker_failed:
        return "grader error"
    if "kernel_died" in kinds:
        return "kernel died"
    if "cell_timeout" in kinds or any(r.status == "TIMEOUT" for r in results.values()):
        return "timeout"
    if kinds & {"cell_error", "grading_error"}:
        return "cell error"
    if any(r.status == "ERROR" for r in results.values()):
        return "grader error"
    return "graded"


def _record(sub: Submission, chapter: int | None, status: str, details: list[str], results: dict,
            max_points: int | None, opts: GradeOptions, seconds: float) -> dict:
    return {
        "file": sub.file,
        "sha256": sub.sha256,
        "chapter": chapter,
        "status": status,
        "detail": "; ".join(d for d in details if d),
        "events": [d for d in details if d],
        "total": sum(r.points for r in results.values()),
        "max": max_points,
        "checks": {k: r.to_dict() for k, r in results.items()},
        "seed": "secret" if opts.secret else "public",
        "chapter_option": opts.chapter,
        "seconds": round(seconds, 2),
        "graded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _zero_results(plan: _ChapterPlan | None, why: str, status: str = "NOT RUN") -> dict:
    if plan is None:
        return {}
    return {p.exercise.id: CheckResult(p.exercise.id, p.exercise.title, 0, p.exercise.points, len(p.cases),
                                       len(p.cases), [], why, status) for p in plan.exercises}


def _grade_one(sub: Submission, plans: dict[int, _ChapterPlan | None], opts: GradeOptions,
               running: _Running) -> dict:
    """Grade one submission; never raises (an unexpected failure is a "grader error" record)."""
    t0 = time.monotonic()
    try:
        return _grade_one_unsafe(sub, plans, opts, running, t0)
    except Exception as e:  # noqa: BLE001 - one submission's failure must not stop the run
        plan = plans.get(opts.chapter) if opts.chapter else None
        return _record(sub, opts.chapter, "grader error", [f"the grader failed: {checks._describe_exception(e)}"],
                       _zero_results(plan, "not checked"), plan.max_points if plan else None, opts,
                       time.monotonic() - t0)


def _grade_one_unsafe(sub: Submission, plans: dict[int, _ChapterPlan | None], opts: GradeOptions,
                      running: _Running, t0: float) -> dict:
    chapter, note = detect_chapter(sub.file, sub.cells, opts.chapter)
    if sub.problem is not None:
        ch = opts.chapter if opts.chapter is not None else chapter
        plan = plans.get(ch) if ch is not None else None
        return _record(sub, ch, sub.problem, [sub.detail], _zero_results(plan, "not checked: " + sub.problem),
                       plan.max_points if plan else None, opts, time.monotonic() - t0)
    if chapter is None:
        plan = plans.get(opts.chapter) if opts.chapter else None
        why = note or "no check(\"exNN.…\") call and no exNN in the file name"
        return _record(sub, None, "unknown chapter", [why], _zero_results(plan, "not checked: unknown chapter"),
                       plan.max_points if plan else None, opts, time.monotonic() - t0)
    if opts.chapter is not None and chapter != opts.chapter:
        plan = plans.get(opts.chapter)
        why = f"this is a chapter {chapter:02d} notebook, not chapter {opts.chapter:02d}" + (f" ({note})" if note else "")
        return _record(sub, chapter, "wrong chapter", [why], _zero_results(plan, "not checked: wrong chapter"),
                       plan.max_points if plan else None, opts, time.monotonic() - t0)
    plan = plans.get(chapter)
    if plan is None:
        return _record(sub, chapter, "unknown chapter", [f"chapter {chapter:02d} has no exercises to grade"],
                       {}, None, opts, time.monotonic() - t0)

    jobdir = Path(tempfile.mkdtemp(prefix="nbgrade-"))
    try:
        kdir = jobdir / "kernel"  # the kernel's working folder, empty
        kdir.mkdir()
        inputs = jobdir / "inputs.json"
        inputs.write_text(plan.inputs_json, encoding="utf-8")
        job = {
            "cells": [[i, src, is_check_cell(src)] for i, src in sub.cells],
            "cwd": str(kdir),
            "inputs": str(inputs),
            "outputs": str(jobdir / "outputs.jsonl"),
            "events": str(jobdir / "events.jsonl"),
            "kernels": str(jobdir / "kernels.txt"),
            "cell_timeout": opts.cell_timeout,
            "budget": opts.cell_timeout,
            "kernel_name": opts.kernel_name,
            "exercise_ids": [p.exercise.id for p in plan.exercises if p.error is None],
        }
        (jobdir / "job.json").write_text(json.dumps(job), encoding="utf-8")
        with open(jobdir / "worker.log", "wb") as log:
            if running.stopping:
                raise KeyboardInterrupt
            proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from nbhelpers.grade import _worker_main; "
                 "sys.exit(_worker_main(sys.argv[1]))", str(jobdir / "job.json")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=str(kdir),
                env=_worker_env(), start_new_session=True)
            running.add(proc, jobdir)
            total_timeout = False
            try:
                proc.wait(timeout=opts.timeout)
            except subprocess.TimeoutExpired:
                total_timeout = True
            finally:
                _stop_worker(proc, jobdir)
                running.remove(proc)
        events = _read_events(jobdir / "events.jsonl")
        outputs = _read_outputs(jobdir / "outputs.jsonl", plan)
        done = any(e.get("event") == "done" for e in events)
        worker_failed = not total_timeout and not done
        if worker_failed and running.stopping:
            raise KeyboardInterrupt
        died = {e.get("exercise") for e in events if e.get("event") == "kernel_died" and e.get("exercise")}
        if total_timeout:
            missing = ("NOT RUN", f"not checked: the notebook ran out of time ({opts.timeout:g} s in all)")
        elif worker_failed:
            missing = ("NOT RUN", "not checked: the grader failed")
        else:
            missing = ("NOT RUN", "not checked: the grading cell did not finish")
        results = {}
        for p in plan.exercises:
            reason = ("DIED", "the kernel died while this function was checked") if p.exercise.id in died else missing
            results[p.exercise.id] = _judge(p, outputs.get(p.exercise.id), reason)
        details = [note] + [_event_text(e) for e in events]
        if total_timeout:
            details.append(f"stopped after {opts.timeout:g} s, the total time limit")
        if worker_failed:
            try:
                tail = (jobdir / "worker.log").read_text(errors="replace").strip().splitlines()[-3:]
            except OSError:
                tail = []
            details.append("the grader's worker failed" + (": " + " | ".join(tail) if tail else ""))
        for r in results.values():
            if r.status in ("TIMEOUT", "MISSING", "DIED", "ERROR"):
                details.append(f"{r.exercise_id}: {r.status.lower()}")
        status = _status_of(events, total_timeout, worker_failed, results)
        return _record(sub, chapter, status, details, results, plan.max_points, opts, time.monotonic() - t0)
    finally:
        shutil.rmtree(jobdir, ignore_errors=True)


# =============================================================================================
# Output files: CSV rows appended as submissions finish, JSON rewritten atomically
# =============================================================================================

_CSV_HEAD = ["file", "sha256", "chapter"]
_CSV_TAIL = ["total", "max", "status", "detail"]


def _csv_safe(v: Any) -> str:
    """A cell a spreadsheet will not run as a formula (student text can land in detail)."""
    s = "" if v is None else str(v)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r") else s


def _csv_row(rec: dict, columns: list[str]) -> list[str]:
    chapter = rec.get("chapter")
    row = {"file": rec["file"], "sha256": rec["sha256"],
           "chapter": f"{chapter:02d}" if isinstance(chapter, int) else "",
           "total": rec.get("total", 0), "max": "" if rec.get("max") is None else rec["max"],
           "status": rec["status"], "detail": checks._truncate(rec.get("detail", ""), _DETAIL_LIMIT)}
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
        if columns and columns[:2] != _CSV_HEAD[:2]:
            raise ValueError("not a grades file")
        return columns, rows
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as e:
        _set_aside(path, str(e))
        return [], {}


def _load_json(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        subs = data["submissions"]
        return {r["file"]: r for r in subs if isinstance(r, dict) and isinstance(r.get("file"), str)}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        _set_aside(path, str(e) or type(e).__name__)
        return {}


class _Outputs:
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
                and rec.get("status") != "grader error"
                and rec.get("seed") == ("secret" if self.opts.secret else "public")
                and rec.get("chapter_option") == self.opts.chapter)

    def start(self, exercise_ids: list[str]) -> None:
        """Rewrite the CSV with every row it has and the columns this run needs."""
        extra = [c for c in self.old_columns if c not in _CSV_HEAD + _CSV_TAIL and c not in exercise_ids]
        self.columns = _CSV_HEAD + exercise_ids + extra + _CSV_TAIL
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
                "seed": "secret" if self.opts.secret else "public",
                "chapter": self.opts.chapter,
                "cell_timeout": self.opts.cell_timeout,
                "timeout": self.opts.timeout,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            "submissions": sorted(self.records.values(), key=lambda r: r["file"]),
        }
        _atomic_write(self.json_path, json.dumps(data, indent=1, allow_nan=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    return str(o)


# =============================================================================================
# The run
# =============================================================================================

def _find_notebooks(paths: Iterable[str | Path]) -> list[tuple[str, Path]]:
    """(shown name, path) of every notebook: files as given, folders searched for *.ipynb
    (skipping hidden folders such as .ipynb_checkpoints). Missing paths raise FileNotFoundError."""
    found: dict[Path, str] = {}
    for p in paths:
        p = Path(p)
        if p.is_dir():
            for q in sorted(p.rglob("*.ipynb")):
                if any(part.startswith(".") for part in q.relative_to(p).parts) or not q.is_file():
                    continue
                found.setdefault(q.resolve(), str(q))
        elif p.exists():
            found.setdefault(p.resolve(), str(p))
        else:
            raise FileNotFoundError(f"no such file or folder: {p}")
    return sorted(((name, path) for path, name in found.items()), key=lambda t: t[0])


@dataclass
class RunSummary:
    graded: int = 0
    skipped: int = 0
    seconds: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    records: list[dict] = field(default_factory=list)

    @property
    def seconds_per_submission(self) -> float:
        return self.seconds / self.graded if self.graded else 0.0


def _progress(total: int, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency; a bare line per submission otherwise
        tqdm = None
    if tqdm is not None:
        return tqdm(total=total, file=sys.stderr, unit="notebook", desc="grading", disable=not enabled,
                    dynamic_ncols=True, mininterval=0.5)

    class Bare:
        n = 0

        def update(self, k: int = 1) -> None:
            self.n += k
            if enabled:
                print(f"grading: {self.n}/{total}", file=sys.stderr)

        def set_postfix_str(self, s: str, refresh: bool = True) -> None:
            pass

        def close(self) -> None:
            pass

    return Bare()


def grade(paths: Iterable[str | Path], csv_path: str | Path, json_path: str | Path,
          opts: GradeOptions | None = None) -> RunSummary:
    """Grade every notebook under ``paths``; write/extend ``csv_path`` and ``json_path``.

    Returns what was done. Raises FileNotFoundError for a path that does not exist; everything
    that can go wrong with a submission becomes its status instead.
    """
    opts = opts or GradeOptions()
    if opts.secret:
        _not_dumpable()
    paths = list(paths)
    found = _find_notebooks(paths)
    if not found:
        raise FileNotFoundError(f"no notebooks (*.ipynb) in {', '.join(map(str, paths))}")
    subs = [read_submission(path, name) for name, path in found]
    outputs = _Outputs(Path(csv_path), Path(json_path), opts)
    todo = [s for s in subs if not outputs.is_done(s)]

    chapters = {opts.chapter} if opts.chapter is not None else set()
    for s in todo:
        ch, _ = detect_chapter(s.file, s.cells, opts.chapter)
        if ch is not None and (opts.chapter is None or ch == opts.chapter):
            chapters.add(ch)
    plans = {ch: _plan_chapter(ch, opts.seed) for ch in sorted(chapters)}
    ex_ids = [p.exercise.id for ch in sorted(plans) if plans[ch] for p in plans[ch].exercises]
    for col in outputs.old_columns:  # keep the columns of exercises graded in earlier runs
        if col not in _CSV_HEAD + _CSV_TAIL and col not in ex_ids and checks._ID_RE.match(col):
            ex_ids.append(col)
    outputs.start(ex_ids)

    summary = RunSummary(skipped=len(subs) - len(todo))
    running = _Running()
    bar = _progress(len(todo), opts.progress)
    t0 = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=max(1, opts.jobs))
    try:
        futures = [pool.submit(_grade_one, s, plans, opts, running) for s in todo]
        for fut in as_completed(futures):
            rec = fut.result()
            outputs.add(rec)
            summary.graded += 1
            summary.statuses[rec["status"]] += 1
            summary.records.append(rec)
            bar.set_postfix_str(f"{Path(rec['file']).name}: {rec['status']}", refresh=False)
            bar.update(1)
    except BaseException:
        running.stop_all()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        bar.close()
    pool.shutdown(wait=True)
    outputs.finish()
    summary.seconds = time.monotonic() - t0
    return summary


def _print_summary(s: RunSummary, opts: GradeOptions, csv_path: str, json_path: str) -> None:
    parts = [f"graded {s.graded} submission{'s' if s.graded != 1 else ''} in {s.seconds:.1f} s"]
    if s.graded:
        parts.append(f"{s.seconds_per_submission:.1f} s per submission with {opts.jobs} at a time")
    if s.skipped:
        parts.append(f"{s.skipped} already graded, skipped (--regrade grades them again)")
    print("; ".join(parts))
    if s.statuses:
        print("  " + "   ".join(f"{k}: {s.statuses[k]}" for k in STATUSES[::-1] if s.statuses[k]))
    totals = [r["total"] for r in s.records if r.get("max")]
    if totals:
        maxes = {r["max"] for r in s.records if r.get("max")}
        of = f" of {maxes.pop()}" if len(maxes) == 1 else ""
        print(f"  points: mean {sum(totals) / len(totals):.1f}{of}, lowest {min(totals)}, highest {max(totals)}")
    print(f"  seed: {'secret (hidden cases)' if opts.secret else 'public (the cases students see)'}")
    print(f"  wrote {csv_path} and {json_path}")


# ---- keeping the seed out of sight ----------------------------------------------------------

def _seed_from_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """The --seed value and the arguments without it."""
    rest, value, i = [], None, 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest += argv[i:]
            break
        if a == "--seed" and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
            continue
        if a.startswith("--seed="):
            value, i = a[len("--seed="):], i + 1
            continue
        rest.append(a)
        i += 1
    return value, rest


def _conceal_seed(argv: list[str]) -> None:
    """If the secret seed is on our command line, start again without it (exec, same process id),
    handing the seed over through a pipe: a student's code can read every process's command line
    (/proc/*/cmdline, ps) but not this pipe. Returns only when there is nothing to do or exec is
    impossible."""
    if os.name != "posix" or "--seed-fd" in argv:
        return
    value, rest = _seed_from_argv(argv)
    if value is None:
        return
    try:
        r, w = os.pipe()
        os.write(w, value.encode()[:4096])
        os.close(w)
        os.set_inheritable(r, True)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "nbhelpers.grade", *rest, "--seed-fd", str(r)])
    except OSError as e:  # pragma: no cover - exec failed: carry on, the seed stays visible
        print(f"nbhelpers.grade: could not hide the seed from the process list ({e})", file=sys.stderr)


def _not_dumpable() -> None:
    """Linux: make this process's memory, environment and open files unreadable to other processes
    of the same user (prctl PR_SET_DUMPABLE 0), so a student's kernel cannot read the seed there.
    Children start dumpable again after exec, so workers and kernels are unaffected."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # pragma: no cover
        pass


def _parse_seed(text: str) -> int:
    try:
        seed = int(text.strip(), 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the seed must be a non-negative integer, got {text!r}") from None
    if seed < 0:
        raise argparse.ArgumentTypeError("the seed must be a non-negative integer")
    return seed


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return v
    return parse


def _chapter_arg(text: str) -> int:
    m = re.fullmatch(r"(?:ex|ch)?(\d{1,2})", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"a chapter is a number such as 1 or 01, got {text!r}")
    return int(m.group(1))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m nbhelpers.grade",
        description="Grade students' exercise notebooks: run each in a fresh kernel, check its "
                    "functions from outside, write a CSV (one row per submission) and a JSON file "
                    "(every check's details). See docs/grading.md.",
        allow_abbrev=False,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="notebooks, or folders searched for *.ipynb")
    p.add_argument("--csv", required=True, metavar="FILE", help="grades, one row per submission")
    p.add_argument("--json", required=True, metavar="FILE", help="details of every check")
    p.add_argument("--seed", type=_parse_seed, default=None, metavar="N",
                   help="secret seed for hidden random cases (default 0: the cases students see)")
    p.add_argument("--seed-fd", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--chapter", type=_chapter_arg, default=None, metavar="NN",
                   help="grade only this chapter; other notebooks get 'wrong chapter'")
    p.add_argument("--jobs", type=_positive(int), default=1, metavar="N", help="submissions graded at once (default 1)")
    p.add_argument("--cell-timeout", type=_positive(float), default=60.0, metavar="S",
                   help="seconds for each cell, and for all calls of one function (default 60)")
    p.add_argument("--timeout", type=_positive(float), default=300.0, metavar="S",
                   help="seconds for a whole submission, kernel start included (default 300)")
    p.add_argument("--regrade", action="store_true", help="grade everything again, even submissions already graded")
    p.add_argument("--kernel", default="python3", metavar="NAME", help="Jupyter kernel (default python3)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    """The command line. Exit status 0 when every submission got a row, 1 when some got
    "grader error" (rerun to retry them), 2 for a usage error, 130 when interrupted."""
    if argv is None:
        argv = sys.argv[1:]
        _conceal_seed(argv)  # returns only when the seed is not on the command line
    args = _parser().parse_args(argv)
    seed = args.seed or 0
    if args.seed_fd is not None:
        try:
            with os.fdopen(args.seed_fd, "rb") as f:
                seed = _parse_seed(f.read(4096).decode())
        except (OSError, argparse.ArgumentTypeError, UnicodeDecodeError) as e:
            print(f"nbhelpers.grade: cannot read the seed: {e}", file=sys.stderr)
            return 2
    opts = GradeOptions(seed=seed, chapter=args.chapter, jobs=args.jobs, cell_timeout=args.cell_timeout,
                        timeout=args.timeout, regrade=args.regrade, kernel_name=args.kernel,
                        progress=not args.no_progress)
    try:
        summary = grade(args.paths, args.csv, args.json, opts)
    except FileNotFoundError as e:
        print(f"nbhelpers.grade: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nbhelpers.grade: interrupted; finished submissions are saved, rerun to continue", file=sys.stderr)
        return 130
    _print_summary(summary, opts, args.csv, args.json)
    return 1 if summary.statuses.get("grader error") else 0


if __name__ == "__main__":
    sys.exit(main())
