"""The grader attacked: one submission for each class of attack, graded in one run
together with honest submissions, in the sandbox and without it.

Each class is shown with a payload of our own; what every run must show: it finishes (exit 0),
the honest submissions get exactly their points, each attacker gets 0 or a status that names
the fault, the output files are intact and readable (and a rerun grades nothing again), and
nothing an attacker started is left running. Classes that only the sandbox can stop (reading
or writing outside the submission, processes that outlive it, killing others) run in the
sandbox only: without it they would really reach this machine.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import re
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from helpers import (
    EX01_EXERCISE,
    FAST,
    FULL,
    POINTS,
    code_index,
    env,
    insert_code,
    literal,
    mutate,
    set_body,
    solution,
    tree_state,
    write,
)

from nbhelpers.checks import cases_for, exercises_of
from nbhelpers.grading.sandbox import course_package_dir

NAMES = [ex.name for ex in exercises_of(1)]
# No payload here loops forever: limits well above what any submission needs, so that a busy
# machine cannot turn the heaviest payloads (the text bombs) into timeouts.
LIMITS = ["--cell-timeout", "30", "--timeout", "120"]
TAG = "nbgradeattack" + secrets.token_hex(4)  # in every planted name and process: findable afterwards

# The plausible wrong rules a cheat falls back on, one per function (as in tests/exercise_table.py).
WRONG_RULES = {
    "decode_bits": ("if E == 0:", "if False:"),
    "rounding_interval": ("if round(a / q) % 2 == 1:", "if False:"),
    "count_values": ("math.ceil(y / q) if up else math.floor(y / q)", "round(y / q)"),
    "smallest_absorbing": ("2.0 ** (man_bits + 1)", "2.0 ** man_bits"),
    "round_stochastic": ("(u < frac)", "(u < 1 - frac)"),
}


def with_cell(source: str, functions: str = "solution"):
    """The solution notebook with a cell of ``source`` after its imports; its functions as they
    are ("solution"), all answering 0.0 ("zeros"), or removed ("none")."""
    nb = solution()
    for name in NAMES:
        if functions == "zeros":
            set_body(nb, name, "return 0.0")
        elif functions == "none":
            del nb.cells[code_index(nb, f"def {name}(")]
    insert_code(nb, "import math", source)
    return nb


# ---- the payloads --------------------------------------------------------------------------------

IMPORT_REFERENCES = """
import importlib
_m = importlib.import_module("nbhelpers." + "answer" + "_keys" + ".ch01")
for _n in ("decode_bits", "rounding_interval", "count_values", "smallest_absorbing"):
    globals()[_n] = getattr(_m, _n + "_re" + "f")
"""

FORGE_CHANNEL = """
import glob, json, os, sys, threading, time
def _channels():  # its own channel folder, from the connection file on the kernel's command line
    return {os.path.dirname(os.path.abspath(a)) for a in sys.argv if a.endswith(".json")}
def _forged(nonce):
    ids = ["ex01.decode_bits", "ex01.rounding_interval", "ex01.count_values", "ex01.smallest_absorbing"]
    rec = [{"id": i, "results": [{"v": 0.0}] * 400} for i in ids]
    return "".join(json.dumps({**r, **({"n": nonce} if nonce else {})}) + "\\n"
                   for r in rec for nonce in ("", "0" * 32))
for _d in _channels():
    for _f in ("outputs.jsonl", "inputs.json"):
        try:
            if os.path.exists(os.path.join(_d, _f)):
                os.unlink(os.path.join(_d, _f))
            os.symlink("/dev/zero", os.path.join(_d, _f))  # the grader must not read through it
        except OSError:
            pass
def _keep_forging():
    t0 = time.time()
    while time.time() - t0 < 60:
        for _d in _channels():  # the results file wherever it is: in the channel, or a folder in it
            for _p in [os.path.join(_d, "outputs.jsonl")] + glob.glob(os.path.join(_d, "*", "outputs.jsonl")):
                try:
                    with open(_p, "a") as f:
                        f.write(_forged(""))
                except OSError:
                    pass
        time.sleep(0.02)
threading.Thread(target=_keep_forging, daemon=True).start()
"""

FORGE_IN_ASSIGNMENT = FORGE_CHANNEL.replace(
    "threading.Thread(target=_keep_forging, daemon=True).start()",
    "_forger = threading.Thread(target=_keep_forging, daemon=True)\n_started = _forger.start()",
)

# The function finds the grading cell's nonce and results file in its caller's frames and writes
# a record naming a module it planted in the package (which runs code when imported). A grader
# that imported what a result names would run the student's code.
NAMES_A_MODULE = """
import os, sys, json
_MARK = MARKER
try:
    import nbhelpers
    with open(os.path.join(os.path.dirname(nbhelpers.__file__), "TAG.py"), "w") as f:
        f.write(f"open({_MARK!r}, 'w').write('imported')\\nclass Evil:\\n    X = 1\\n")
except OSError:
    pass
def decode_bits(bits, exp_bits, man_bits, specials, largest):
    import json, sys  # in the body: only the allowed imports run where the functions are graded
    f = sys._getframe(1)
    while f is not None and "nonce" not in f.f_locals:
        f = f.f_back
    if f is not None and not globals().get("_done"):
        globals()["_done"] = True
        line = {"id": "ex01.decode_bits", "n": f.f_locals["nonce"],
                "results": [{"v": {"$enum": ["nbhelpers.TAG", "Evil", "X"]}},
                            {"v": {"$dc": ["nbhelpers.TAG", "Evil", {}]}}] * 200}
        with open(f.f_locals["job"]["outputs"], "a") as out:
            out.write(json.dumps(line) + "\\n")
    return 0.0
""".replace("TAG", TAG)

# Wraps count_values: on its first call it finds the grading cell's nonce and results file in the main
# thread's frames and writes a record of its own for count_values (the real answers, so that only the
# second record gives it away).
FORGES_WITH_THE_NONCE = """
_real_count_values = count_values
def _forge_once(a, b, exp_bits, man_bits):
    import json, sys  # in the body: only the allowed imports run where the functions are graded
    if not globals().get("_forged"):
        globals()["_forged"] = True
        for _frame in sys._current_frames().values():
            while _frame is not None and "nonce" not in _frame.f_locals:
                _frame = _frame.f_back
            if _frame is not None:
                _line = {"id": "ex01.count_values", "n": _frame.f_locals["nonce"], "results": []}
                with open(_frame.f_locals["job"]["outputs"], "a") as _out:
                    _out.write(json.dumps(_line) + "\\n")
    return _real_count_values(a, b, exp_bits, man_bits)
count_values = _forge_once
"""
# decode_bits answered by the course's own decode (right values; the statement forbids it)
CALLS_THE_COURSE = """
import math
from nbhelpers import formats as f
kind = {"ieee": f.Specials.IEEE, "fn": f.Specials.FN}.get(specials, f.Specials.FINITE)
fmt = f.FloatFormat.custom(exp_bits, man_bits, kind)
if specials == "fnuz" and bits == 1 << (exp_bits + man_bits):
    return math.nan
shift = math.frexp(fmt.max / largest)[1] - 1  # the bias less the default one
return math.ldexp(float(f.decode(int(bits), fmt)), -shift)
"""

# the watch switched off by a C function (map) calling sys.setprofile, found by names made from
# strings, and back on before the function returns: no list of refused names reads that
HIDES_BY_A_C_CALL = (
    """
import sys, string
get = string.Formatter().get_field
hook = next(iter(get("0.getprofile", (sys,), {})[0], 0))
off = get("0.setprofile", (sys,), {})[0]
list(map(off, [None]))
try:
"""
    + textwrap.indent(CALLS_THE_COURSE, "    ")
    + """
finally:
    list(map(off, [hook]))
"""
)

FORGED_NOTE = "ex01.count_values: tampering: more than one result for this function carried the grading cell's nonce"

PLANT_IMPORT_PATH = """
import os, site, sys, sysconfig
import nbhelpers
_code = f"open({MARKER!r}, 'w').write('planted')\\n"
_targets = [os.path.join(sysconfig.get_paths()["purelib"], "sitecustomize.py"),
            os.path.join(sysconfig.get_paths()["purelib"], "TAG.pth"),
            os.path.join(site.getusersitepackages(), "usercustomize.py"),
            os.path.join(os.path.dirname(nbhelpers.__file__), "TAG.py"),
            os.path.join(os.path.dirname(nbhelpers.__file__), "checks.py"),
            os.path.expanduser("~/.ipython/profile_default/startup/00-TAG.py")]
_wrote = []
for _t in _targets:
    try:
        os.makedirs(os.path.dirname(_t), exist_ok=True)
        with open(_t, "a") as f:
            f.write(_code if not _t.endswith(".pth") else f"import os; {_code}")
        _wrote.append(_t)
    except OSError:
        pass
""".replace("TAG", TAG)

DETACHED = """
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import os, time\\nif os.fork(): os._exit(0)\\n"
                  "while True:\\n    time.sleep(0.5)\\n"
                  "    for p in __import__('glob').glob('/tmp/nbgrade-*/k*/outputs.jsonl'):\\n"
                  "        open(p, 'a').write('{}\\\\n')  # TAG"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
""".replace("TAG", TAG)

OVERWRITE = """
import glob, os
_hit = []
for _p in glob.glob(SUBS + "/*.ipynb") + [SUBS + "/ex01_honest_full.ipynb"]:
    try:
        with open(_p, "w") as f:
            f.write("{}")
        _hit.append(_p)
    except OSError:
        pass
"""

KILLER = """
import os, signal
for _p in os.listdir("/proc"):
    if _p.isdigit() and int(_p) != os.getpid():
        try:
            os.kill(int(_p), signal.SIGKILL)
        except OSError:
            pass
"""

DIES_ONCE = """
import os, signal
if not os.path.exists("../died_once"):
    open("../died_once", "w").close()
    os.kill(os.getpid(), signal.SIGKILL)
"""

HOG = """
_got = []
try:
    _big = bytearray(6 * 2**30)
    _got.append("allocated 6 GB")
except MemoryError:
    _got.append("memory: MemoryError")
try:
    with open("big.bin", "wb") as f:
        for _ in range(300):
            f.write(b"x" * 2**20)
    _got.append("wrote 300 MB")
except OSError as e:
    _got.append(f"file: {e.strerror}")
raise RuntimeError("HOG " + "; ".join(_got))
"""

TEXT_BOMBS = """
def decode_bits(bits, exp_bits, man_bits, specials, largest):
    return " " * 12_000 + "\\n" + "\\ud800\\x1b[2J\\u202e"  # 1070 results: 13 MB, under 16 MiB a line
def rounding_interval(v, exp_bits, man_bits):
    raise ValueError(" " * 1900 + "\\ud800\\x1b]0;pwned\\x07")
def count_values(a, b, exp_bits, man_bits):
    import numpy as np
    return np.zeros(2**21)  # 16 MB a value
def smallest_absorbing(c, exp_bits, man_bits):
    return ["\\udcff" * 1000] * 30  # 60 results of 30,000 escapes: 11 MB, under 16 MiB a line
raise ValueError("a lone surrogate \\ud800 and an escape \\x1b[31m in a message")
"""


# The kernel's stdout and stderr are pipes of ipykernel's; the files they were before it took
# them over stay open at other descriptors. The payloads find those files through /proc/self/fd.
# hidden inputs in what a graded function raises: a KeyboardInterrupt (which the grading code once
# let through, its text reaching the CSV), a SystemExit, an exception class named after the inputs,
# and one raised by the grader's own look at the function's source
LEAKS = """
class _Hook(BaseException):
    pass

def _named(args):
    return type("LEAK" + "_".join(str(a) for a in args), (BaseException,), {})

def decode_bits(bits, exp_bits, man_bits, specials, largest):
    raise KeyboardInterrupt("LEAK" + repr((bits, exp_bits, man_bits, specials, largest)))

def rounding_interval(v, exp_bits, man_bits):
    raise SystemExit("LEAK" + repr((v, exp_bits, man_bits)))

def count_values(a, b, exp_bits, man_bits):
    raise _named((a, b, exp_bits, man_bits))("LEAK")
"""
LEAKED = "LEAK"


_OUTPUT_FILES = """
import os, stat
def _output_files():
    for _name in os.listdir("/proc/self/fd"):
        try:
            _fd = int(_name)
            _flags = int(open(f"/proc/self/fdinfo/{_fd}").read().split("flags:")[1].split()[0], 8)
            if stat.S_ISREG(os.fstat(_fd).st_mode) and _flags & (os.O_WRONLY | os.O_RDWR):
                yield _fd
        except (OSError, IndexError, ValueError):
            pass
"""

# Printed by the first attackers graded, into the files behind their kernel's output; a later
# kernel must not be able to read it (it went to the worker's log once, which every kernel of the
# worker inherited).
WRITES_OUTPUT = (
    _OUTPUT_FILES
    + """
for _fd in _output_files():
    os.write(_fd, ("CLASSMATE" + "-OUTPUT " * 1000 + "\\n").encode())
"""
)

# Grows those files past the 64 MB a kernel may write to one file: the next submissions must not
# notice (the worker's log grown to the limit had made the next classmate's kernel fail).
FLOODS_OUTPUT = (
    _OUTPUT_FILES
    + """
_chunk = b"x" * 2**20
for _fd in _output_files():
    try:
        for _ in range(80):
            os.write(_fd, _chunk)
    except OSError:
        pass
"""
)

READS_OUTPUT = (
    _OUTPUT_FILES
    + """
_seen = b""
for _fd in _output_files():
    try:
        with open(f"/proc/self/fd/{_fd}", "rb") as _f:
            _seen += _f.read(2**26)
    except OSError:
        pass
if ("CLASSMATE" + "-OUTPUT").encode() in _seen:
    raise RuntimeError("read what a classmate's kernel printed")
"""
)


# The visible functions raise; a hook swaps in the real ones, from a string, when the grading
# cell arrives (SOURCE is the solution's functions, base64-encoded).
HOOK_SWAP = """
import base64
_hidden = base64.b64decode(SOURCE).decode()
def _swap(info):
    if "__nbhelpers_grade_cell" in (getattr(info, "raw_cell", "") or ""):
        exec(_hidden, get_ipython().user_ns)
REGISTER
"""
REGISTER = 'get_ipython().events.register("pre_run_cell", _swap)'
# Where the code that swaps the stubs for the hidden functions hides: each is a statement of a kind
# the clean kernel once ran (an assignment, a try, an annotation, a class body, an import and an
# assignment to builtins), and each of these would have swapped the functions there.
HIDING_PLACES = {
    "expression": REGISTER,
    "assignment": "_h = " + REGISTER,
    "except": f"try:\n    import _no_such_module\nexcept ({REGISTER}, ImportError)[1]:\n    pass",
    "annotation": "_h: " + REGISTER,
    "class_body": f"class _Hooks:\n    _h = {REGISTER}\n    for _i in range(1):\n        pass",
    # rewrites the grading cell as it is compiled
    "builtins": """import builtins
_compile = builtins.compile
def _compile_swapping(source, *args, **kwargs):
    if "__nbhelpers_grade_cell" in str(source):
        exec(_hidden, get_ipython().user_ns)
    return _compile(source, *args, **kwargs)
builtins.compile = _compile_swapping""",
}
# A decorator that returns the hidden function, with the visible stub as its __wrapped__ (which
# inspect.getsource follows).
DRESS = """
def _dress(stub):
    def run(*args, **kwargs):
        ns = dict(globals())
        exec(_hidden, ns)
        return ns[stub.__name__](*args, **kwargs)
    run.__wrapped__ = stub
    return run
"""


def hook_swap_notebook(where: str = "expression"):
    """Stubs that raise, and code that defines the solution's functions for the grading cell,
    hidden in a statement of the kind ``where`` (:data:`HIDING_PLACES`), or ("decorator") each
    stub decorated to run the hidden function."""
    sol = solution()
    hidden = "\n\n".join(sol.cells[code_index(sol, f"def {n}(")].source for n in NAMES)
    register = DRESS if where == "decorator" else HIDING_PLACES[where]
    payload = HOOK_SWAP.replace("REGISTER", register)
    nb = with_cell(payload.replace("SOURCE", repr(base64.b64encode(hidden.encode()).decode())))
    for name in NAMES:
        set_body(nb, name, 'raise NotImplementedError("see the hook")')
        if where == "decorator":
            mutate(nb, name, f"def {name}(", f"@_dress\ndef {name}(")
    return nb


def table_plus_wrong_rule(nb) -> None:
    """Answers the public cases from a table; everything else with a plausible wrong rule."""
    for name in NAMES:
        mutate(nb, name, *WRONG_RULES[name])
        mutate(nb, name, f"def {name}(", f"def _{name}_rule(")
    lines = []
    for ex in exercises_of(1):
        if ex.name == "round_stochastic":  # its reference is not a value to copy: the wrong rule alone
            lines.append(f"def {ex.name}(*args):\n    return _{ex.name}_rule(*args)")
            continue
        table = {repr(c.args): ex.reference(*c.args, **c.kwargs) for c in cases_for(ex, 0)}
        lines.append(f"_T_{ex.name} = {{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in table.items()) + "}")
        lines.append(
            f"def {ex.name}(*args):\n    k = repr(args)\n"
            f"    return _T_{ex.name}[k] if k in _T_{ex.name} else _{ex.name}_rule(*args)"
        )
    nb.cells.append(nbformat.v4.new_code_cell("\n".join(lines)))


def build_class(subs: Path, base: Path, sandbox: bool) -> dict[str, dict]:
    """Write the honest submissions and the attackers; return what each must get: its status
    (or None: any), its total, and text its detail must hold."""
    subs.mkdir(parents=True)
    marker = base / f"{TAG}.marker"
    expect: dict[str, dict] = {}

    def add(name: str, nb, status: str | None, total: int | None, detail: str = "") -> None:
        # as JSON with \u escapes: a lone surrogate cannot be written as UTF-8 (nbformat would fail)
        (subs / name).write_text(json.dumps(nb, indent=1, ensure_ascii=True))
        expect[name] = {"status": status, "total": total, "detail": detail}

    add("ex01_honest_full.ipynb", solution(), "graded", FULL)
    partial = solution()
    mutate(partial, "rounding_interval", *WRONG_RULES["rounding_interval"])
    add("ex01_honest_partial.ipynb", partial, "graded", FULL - POINTS["ex01.rounding_interval"])
    (subs / "ex01_honest_untouched.ipynb").write_bytes(EX01_EXERCISE.read_bytes())
    expect["ex01_honest_untouched.ipynb"] = {"status": "graded", "total": 0, "detail": ""}

    # inputs that used to stop or stall the run
    nb = with_cell(TEXT_BOMBS, "none")
    insert_code(nb, "import math", "x = " + "-" * 200_000 + "1")  # deep expression
    insert_code(nb, "import math", 's = "a lone surrogate in the source: \ud800"')
    add("ex01_text_bombs.ipynb", nb, "cell error", 0, "raised MemoryError")  # the deep expression, in the kernel
    for name in ("=ex01_formula.ipynb", "+ex01_plus.ipynb", "-ex01_dash.ipynb", "@ex01_at.ipynb"):
        add(name, solution(), "graded", FULL)
    raw_name = os.fsencode(subs) + b"/ex01_\xff_\x1b]0;pwned\x07.ipynb"
    with open(raw_name, "wb") as f:
        f.write((subs / "ex01_honest_full.ipynb").read_bytes())
    expect["ex01_\\udcff_\\x1b]0;pwned\\x07.ipynb"] = {"status": "graded", "total": FULL, "detail": ""}
    os.symlink(subs / "ex01_honest_partial.ipynb", subs / "ex01_aaa_link_to_partial.ipynb")
    (base / "outside.ipynb").write_text("not for the grader's eyes")
    os.symlink(base / "outside.ipynb", subs / "ex01_link_outside.ipynb")
    expect["ex01_link_outside.ipynb"] = {"status": "refused", "total": 0, "detail": "outside the folders"}

    # reaching outside its own grading
    # forging from a thread that an expression statement, or an assignment, starts: neither runs
    # where the functions are graded
    add("ex01_forge_channel.ipynb", with_cell(FORGE_CHANNEL, "zeros"), "graded", 0, "")
    add("ex01_forge_in_assignment.ipynb", with_cell(FORGE_IN_ASSIGNMENT, "zeros"), "graded", 0, "")
    add(
        "ex01_names_a_module.ipynb",
        with_cell(NAMES_A_MODULE.replace("MARKER", repr(str(marker))), "zeros"),
        "graded",
        0,
    )
    # a record forged with the nonce, found in the grading cell's frame: a second record of that
    # function, so it earns nothing
    nb = solution()
    insert_code(nb, "def count_values(", FORGES_WITH_THE_NONCE)
    add("ex01_forges_with_the_nonce.ipynb", nb, "graded", FULL - POINTS["ex01.count_values"], FORGED_NOTE)
    add("ex01_hog.ipynb", with_cell(HOG), "cell error", FULL, "HOG memory: MemoryError; file: File too large")
    nb = solution()
    for name in ("decode_bits", "rounding_interval", "count_values"):
        del nb.cells[code_index(nb, f"def {name}(")]
    insert_code(nb, "import math", LEAKS)
    lost = POINTS["ex01.decode_bits"] + POINTS["ex01.rounding_interval"] + POINTS["ex01.count_values"]
    add("ex01_leaks_in_exceptions.ipynb", nb, "graded", FULL - lost)
    # graded first (by each worker), then a submission that reads its kernel's stdout and stderr
    # an exception the kernel cannot send (its message holds a lone surrogate) is still reported
    nb = with_cell('raise ValueError("a lone surrogate \\ud800 in the message")')
    add("ex01_surrogate_error.ipynb", nb, "cell error", FULL, "raised an exception: its message could not be sent")
    # an answer that calls the course's function the statement forbids, under another name, and
    # one that switches the watch off first: the function earns nothing, whatever it returned
    nb = solution()
    set_body(nb, "decode_bits", CALLS_THE_COURSE)
    # in the sandbox ex01's functions are graded where the course's package is not installed:
    # the import is a stand-in there, and the audit's finding is the detail
    said = "tools do not include" if sandbox else "does not allow"
    add("ex01_calls_the_course.ipynb", nb, "graded", FULL - POINTS["ex01.decode_bits"], said)
    nb = solution()
    set_body(nb, "decode_bits", "import sys\nsys.setprofile(None)\n" + CALLS_THE_COURSE)
    add("ex01_hides_from_the_watch.ipynb", nb, "graded", FULL - POINTS["ex01.decode_bits"], "profile hook")
    nb = solution()
    set_body(nb, "decode_bits", HIDES_BY_A_C_CALL)
    add("ex01_hides_by_a_c_call.ipynb", nb, "graded", FULL - POINTS["ex01.decode_bits"], "tools do not include")
    # a hook that swaps in hidden functions: wherever it hides it does not run where the functions
    # are graded (the stubs are graded there); decorated stubs are not defined there at all
    for where in HIDING_PLACES:
        add(f"ex01_hook_in_{where}.ipynb", hook_swap_notebook(where), "graded", 0, "")
    add("ex01_hook_in_decorator.ipynb", hook_swap_notebook("decorator"), "graded", 0, "is not one of those kept")
    add("ex01_a_writes_output.ipynb", with_cell(WRITES_OUTPUT), "graded", FULL)
    add("ex01_a_writes_output_too.ipynb", with_cell(WRITES_OUTPUT), "graded", FULL)
    add("ex01_a_floods_output.ipynb", with_cell(FLOODS_OUTPUT), "graded", FULL)
    add("ex01_zz_reads_output.ipynb", with_cell(READS_OUTPUT), "graded", FULL)
    nb = solution()
    table_plus_wrong_rule(nb)
    add("ex01_table_plus_wrong_rule.ipynb", nb, "graded", 0)
    if sandbox:
        add(
            "ex01_import_references.ipynb",
            with_cell(IMPORT_REFERENCES, "none"),
            "cell error",
            0,
            "No module named 'nbhelpers.answer_keys.ch01'",
        )
        add(
            "ex01_a_plants_import_path.ipynb",
            with_cell(PLANT_IMPORT_PATH.replace("MARKER", repr(str(marker)))),
            "graded",
            FULL,
        )
        add("ex01_detached_process.ipynb", with_cell(DETACHED), "graded", FULL)
        add("ex01_a_overwrites.ipynb", with_cell(OVERWRITE.replace("SUBS", repr(str(subs)))), "graded", FULL)
        add("ex01_a_killer.ipynb", with_cell(KILLER), "graded", FULL)
    else:
        add("ex01_dies_once.ipynb", with_cell(DIES_ONCE), "graded", FULL, "retried in a new kernel")
    return expect


def leftovers() -> list[str]:
    out = subprocess.run(["pgrep", "-af", TAG], capture_output=True, text=True).stdout.splitlines()
    return [ln for ln in out if "pgrep" not in ln]


def source_files(folder: Path) -> dict:
    return {k: v for k, v in tree_state(folder).items() if "__pycache__" not in k}


def planted_files() -> list[Path]:
    import site
    import sysconfig

    places = [Path(sysconfig.get_paths()["purelib"]), Path(site.getusersitepackages()), course_package_dir()]
    return [p for d in places if d.exists() for p in d.glob(f"*{TAG}*")] + [
        p for p in (Path(sysconfig.get_paths()["purelib"]) / "sitecustomize.py",) if p.exists() and TAG in p.read_text()
    ]


@pytest.fixture(scope="module", params=[pytest.param("sandbox", marks=pytest.mark.sandbox), "no-sandbox"])
def attack_run(request, tmp_path_factory):
    sandbox = request.param == "sandbox"
    base = tmp_path_factory.mktemp("attack")
    subs = base / "submissions"
    expect = build_class(subs, base, sandbox)
    package_before = source_files(course_package_dir())
    before = tree_state(subs)
    cmd = [
        sys.executable,
        "-m",
        "nbhelpers.grade",
        ".",
        "--csv",
        str(base / "g.csv"),
        "--json",
        str(base / "g.json"),
        "--seed",
        "424242424242",
        "--jobs",
        "2",
        *LIMITS,
        *([] if sandbox else ["--no-sandbox"]),
    ]
    try:
        proc = subprocess.run(cmd, cwd=subs, env=env(), capture_output=True, timeout=900)
        time.sleep(1)
        alive = leftovers()
        rerun = subprocess.run(cmd, cwd=subs, env=env(), capture_output=True, text=True, timeout=300)
    finally:
        for p in planted_files():  # without the sandbox the package really is writable
            p.unlink()
        subprocess.run(["pkill", "-9", "-f", TAG], capture_output=True)
    return {
        "base": base,
        "subs": subs,
        "expect": expect,
        "proc": proc,
        "rerun": rerun,
        "alive": alive,
        "before": before,
        "package_before": package_before,
        "marker": base / f"{TAG}.marker",
        "sandbox": sandbox,
    }


def records(run) -> dict[str, dict]:
    data = json.loads((run["base"] / "g.json").read_text(encoding="utf-8"))
    return {Path(r["file"]).name: r for r in data["submissions"]}


def test_the_run_finishes_and_the_outputs_are_intact(attack_run):
    proc = attack_run["proc"]
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode(errors="replace")
    text = (attack_run["base"] / "g.csv").read_bytes().decode("utf-8")  # valid UTF-8
    rows = list(csv.DictReader(text.splitlines()))
    files = [r["file"] for r in rows]
    assert len(files) == len(set(files)) == len(attack_run["expect"])
    assert {Path(f.lstrip("'")).name for f in files} == set(attack_run["expect"])
    assert set(records(attack_run)) == set(attack_run["expect"])
    assert b"\x1b]0;pwned" not in proc.stderr  # a file name's escape codes do not reach the terminal


def test_a_rerun_grades_nothing_again(attack_run):
    rerun = attack_run["rerun"]
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "graded 0 submissions" in rerun.stdout and "unreadable" not in rerun.stderr


def test_every_submission_gets_what_it_should(attack_run):
    recs = records(attack_run)
    wrong = []
    for name, want in attack_run["expect"].items():
        r = recs[name]
        if (
            (want["status"] is not None and r["status"] != want["status"])
            or (want["total"] is not None and r["total"] != want["total"])
            or want["detail"] not in r["detail"]
        ):
            wrong.append(f"{name}: {r['status']} {r['total']} ({r['detail'][:300]}); want {want}")
    assert not wrong, "\n".join(wrong)


def test_what_judging_cost_is_on_the_record_in_cpu_seconds(attack_run):
    """Every submission that ran has the CPU seconds its judging took on its record: an honest
    one's well under one (see nbhelpers.grading.judge_process)."""
    recs = records(attack_run)
    for name in ("ex01_honest_full.ipynb", "ex01_honest_partial.ipynb"):
        assert 0.0 < recs[name]["judge_cpu_s"] < 1, (name, recs[name]["judge_cpu_s"])


def test_the_functions_graded_are_on_the_record(attack_run):
    """Each record holds the source of every function graded and its hash: the notebook's own
    def, found from the function's code object; a hook's swap never happens."""
    recs = records(attack_run)
    for name in ("ex01_honest_full.ipynb", "ex01_honest_partial.ipynb"):
        sources = recs[name]["graded_sources"]
        assert set(sources) == {ex.id for ex in exercises_of(1)}
        assert all(g["in_notebook"] is True and len(g["sha256"]) == 64 for g in sources.values()), name
        assert "def decode_bits(" in sources["ex01.decode_bits"]["source"]
    for where in HIDING_PLACES:  # the hook never ran there: the stubs were graded
        stubs = recs[f"ex01_hook_in_{where}.ipynb"]["graded_sources"]
        assert set(stubs) == {ex.id for ex in exercises_of(1)}, where
        assert all(g["in_notebook"] is True and "see the hook" in g["source"] for g in stubs.values()), where
    assert recs["ex01_hook_in_decorator.ipynb"]["graded_sources"] == {}  # not defined there


def test_nothing_is_left_and_nothing_was_imported(attack_run):
    assert attack_run["alive"] == [], "an attacker's process outlived its grading"
    assert not attack_run["marker"].exists(), "the grader or a later kernel ran code a submission planted"
    assert tree_state(attack_run["subs"]) == attack_run["before"]


def test_text_from_a_submission_is_made_safe(attack_run):
    rec = records(attack_run)["ex01_text_bombs.ipynb"]
    text = json.dumps(rec, ensure_ascii=False)
    text.encode("utf-8")  # no lone surrogates left
    assert not any(ch in text for ch in "\x1b\x07\u202e")
    checks = rec["checks"]
    assert "\\udcff" in checks["ex01.smallest_absorbing"]["mismatches"][0]  # shown as an escape
    assert "returned '    " in checks["ex01.decode_bits"]["mismatches"][0]
    assert "too large to send back" in checks["ex01.count_values"]["error"]
    # linear: the 30,000 spaces of every result cost nothing. Bounded in the CPU seconds of judging,
    # never in wall time, which another job on the machine stretches; the quadratic text this
    # replaced took 75 s for one such result.
    assert rec["judge_cpu_s"] < 10, rec["judge_cpu_s"]


def test_nothing_a_graded_function_raises_reaches_the_csv_as_text(attack_run):
    """A graded function that raises KeyboardInterrupt, SystemExit or an exception class named
    after its inputs fails its own exercise like any other exception, and what it raised is in
    the JSON file (which holds the hidden cases anyway), never in the CSV."""
    with open(attack_run["base"] / "g.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["file"].endswith("ex01_leaks_in_exceptions.ipynb")]
    assert len(rows) == 1 and LEAKED not in json.dumps(rows[0]), rows
    rec = records(attack_run)["ex01_leaks_in_exceptions.ipynb"]
    errors = {k: rec["checks"][k]["error"] for k in ("ex01.decode_bits", "ex01.rounding_interval", "ex01.count_values")}
    assert "KeyboardInterrupt" in errors["ex01.decode_bits"] and LEAKED in errors["ex01.decode_bits"], errors
    assert "SystemExit" in errors["ex01.rounding_interval"], errors


def test_the_link_and_odd_names_are_handled(attack_run):
    recs = records(attack_run)
    assert "ex01_aaa_link_to_partial.ipynb" not in recs  # graded under the name of the file it points to
    assert recs["ex01_link_outside.ipynb"]["sha256"] == ""  # refused: never read
    assert all("\x1b" not in f and "\udcff" not in f for f in recs)


def test_the_sandbox_keeps_the_package_read_only(attack_run):
    if not attack_run["sandbox"]:
        pytest.skip("without the sandbox the package is writable by design (the attackers wrote there)")
    assert source_files(course_package_dir()) == attack_run["package_before"]


def test_grading_without_bubblewrap_is_refused(tmp_path, monkeypatch):
    """Where bubblewrap is missing the grader says so in one line, with the install command, and
    grades nothing unless --no-sandbox is given."""
    write(solution(), tmp_path / "ex01_a.ipynb")
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("prlimit",):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if found:
            os.symlink(found, bare / tool)
    e = {**env(), "PATH": str(bare)}
    cmd = [
        sys.executable,
        "-m",
        "nbhelpers.grade",
        str(tmp_path / "ex01_a.ipynb"),
        "--csv",
        str(tmp_path / "g.csv"),
        "--json",
        str(tmp_path / "g.json"),
        *FAST,
    ]
    proc = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "g.csv").exists()
    assert "bubblewrap (bwrap) is not installed" in proc.stderr and "apt-get install bubblewrap" in proc.stderr
    assert "--no-sandbox" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run(
        cmd + ["--no-sandbox"],
        env={**e, "PATH": str(bare) + os.pathsep + os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "without a sandbox" in proc.stderr and "only as trustworthy" in proc.stderr


# ---- limits of a whole submission, and floods of what a kernel sends ---------------------------------

# Four children of 600 MB each: each is under --max-memory 2048, all four together are not.
CHILDREN_HOLD_MEMORY = """
import subprocess, sys, time
_code = (
    "b = bytearray(600 * 2**20)\\nfor j in range(0, len(b), 4096): b[j] = 1\\n"
    "print('held', flush=True)\\nimport time; time.sleep(60)  # TAG"
)
_ps = [subprocess.Popen([sys.executable, "-c", _code], stdout=subprocess.PIPE) for _ in range(4)]
_said = [p.stdout.readline() for p in _ps]  # "held", or nothing from a child that was killed
time.sleep(1)
_held = [said == b"held\\n" and p.poll() is None for said, p in zip(_said, _ps)]
raise RuntimeError(f"children holding 600 MB: {sum(_held)} of 4")
""".replace("TAG", TAG)

# Busy processes, two per core (at most 40), each in a session of its own, for 3 s: how many CPUs
# they got together, measured by the kernel itself.
CPU_HOG = """
import os, subprocess, sys, time
_spin = "import time\\nt = time.time()\\nwhile time.time() - t < 3:\\n    pass\\n# TAG"
_t0 = time.monotonic()
_n = min(2 * (os.cpu_count() or 1), 40)
_ps = [subprocess.Popen([sys.executable, "-c", _spin], start_new_session=True) for _ in range(_n)]
for _p in _ps:
    _p.wait()
_t = os.times()
raise RuntimeError(f"busy processes used {(_t.children_user + _t.children_system) / (time.monotonic() - _t0):.2f} CPUs")
""".replace("TAG", TAG)

# As root, RLIMIT_NPROC is not applied: only a cgroup stops this.
STARTS_PROCESSES = """
import subprocess
_n = 0
try:
    _ps = []
    for _ in range(150):
        _ps.append(subprocess.Popen(["sh", "-c", "sleep 60; : TAG"]))
        _n += 1
except OSError:
    pass
raise RuntimeError(f"processes started: {_n} of 150")
""".replace("TAG", TAG)

FILLS_DEV = """
def _fill(path, mb):
    n = 0
    try:
        with open(path, "wb") as f:
            for _ in range(mb):
                f.write(b"x" * 2**20)
                f.flush()
                n += 1
    except OSError:
        pass
    return n
try:
    open("/dev/nbgrade_planted", "w").close()
    _dev = "writable"
except OSError:
    _dev = "read-only"
_shm, _tmp = _fill("/dev/shm/fill", 100), _fill("/tmp/fill", 100)
raise RuntimeError(f"/dev {_dev}; /dev/shm took {_shm} MB; /tmp took {_tmp} MB")
"""

# Files of 32 MB in its channel folder (the one folder outside its sandbox's own that it can
# write), up to 2,300 MB in all: more than --max-memory 2048, which is what bounds it there
FILLS_CHANNEL = """
import os, sys
_channel = next(os.path.dirname(os.path.abspath(a)) for a in sys.argv if a.endswith(".json"))
for _i in range(72):
    with open(os.path.join(_channel, f"fill{_i}"), "wb") as f:
        for _ in range(32):
            f.write(b"x" * 2**20)
"""

PRINTS_200_MB = 'print("x" * (200 * 2**20))'

# comm_open messages as a widget library sends them, 1 MB of state each, for 4 s: nbclient kept
# every widget's state
OPENS_COMMS = """
import time
_k = get_ipython().kernel
_t0, _i = time.time(), 0
while time.time() - _t0 < 4:
    _k.session.send(_k.iopub_socket, "comm_open", {"comm_id": f"c{_i}", "target_name": "jupyter.widget",
                    "data": {"state": {"_model_module": "m", "_model_name": "w", "v": "z" * 1_000_000}}})
    _i += 1
"""


@pytest.mark.sandbox
def test_whole_submission_limits_and_floods_beside_honest_submissions(tmp_path):
    """Memory held by several children, processes started as root, busy processes, /dev and
    /dev/shm filled, a 200 MB print and a stream of comm messages, graded beside honest
    submissions: the limits hold
    for the submission as a whole where the machine has cgroups (the run says whether it does),
    /dev is read-only and /dev/shm and /tmp are within --max-disk, the worker never holds a flood,
    and the honest rows are exactly what they would be alone."""
    from nbhelpers.grading.cgroups import find_cgroups
    from nbhelpers.grading.cli import default_cpus
    from nbhelpers.grading.sandbox import disk_split

    subs = tmp_path / "subs"
    subs.mkdir()
    write(solution(), subs / "ex01_honest_full.ipynb")
    partial = solution()
    mutate(partial, "rounding_interval", *WRONG_RULES["rounding_interval"])
    write(partial, subs / "ex01_honest_partial.ipynb")
    for name, payload in [
        ("ex01_children_hold_memory", CHILDREN_HOLD_MEMORY),
        ("ex01_starts_processes", STARTS_PROCESSES),
        ("ex01_fills_dev", FILLS_DEV),
        ("ex01_cpu_hog", CPU_HOG),
    ]:
        write(with_cell(payload), subs / f"{name}.ipynb")
    where = find_cgroups()
    if not isinstance(where, str):  # without cgroups it would write its 2.3 GB to this disk
        write(with_cell(FILLS_CHANNEL), subs / "ex01_fills_channel.ipynb")
    for name, payload in [("ex01_prints_200_mb", PRINTS_200_MB), ("ex01_opens_comms", OPENS_COMMS)]:
        nb = solution()
        nb.cells.append(nbformat.v4.new_code_cell(payload))  # last: the cells after a flood lose their output
        write(nb, subs / f"{name}.ipynb")
    # results that cost the grader more than they cost the kernel: a set of 2,000 ints sharing one
    # hash, built once in the kernel, rebuilt for each of the 400 cases by a decoder without limits
    # (quadratic), and arrays of "<U9999" empty strings (80 MB each once made, 10 kB sent)
    for name, setup, body in [
        ("ex01_returns_colliding_sets", "_C = {k * (2**61 - 1) for k in range(1, 2001)}", "return _C"),
        ("ex01_returns_wide_empty_strings", "", 'return np.full(2000, "", dtype="<U9999")'),
    ]:
        nb = solution()
        set_body(nb, "decode_bits", body)
        if setup:
            insert_code(nb, "import math", setup)
        write(nb, subs / f"{name}.ipynb")
    memory_mb, processes, disk_mb = 2048, 64, 64
    cmd = [sys.executable, "-m", "nbhelpers.grade", str(subs), "--csv", str(tmp_path / "g.csv")]
    cmd += ["--json", str(tmp_path / "g.json"), "--jobs", "2", "--no-progress", *LIMITS]
    cmd += ["--max-memory", str(memory_mb), "--max-processes", str(processes), "--max-disk", str(disk_mb)]
    try:
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        grader = subprocess.Popen(cmd, cwd=tmp_path, env=env(), **pipes)
        out, err = grader.communicate(timeout=600)
        proc = subprocess.CompletedProcess(cmd, grader.returncode, out, err)
        alive = leftovers()
    finally:
        subprocess.run(["pkill", "-9", "-f", TAG], capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not alive, alive
    data = json.loads((tmp_path / "g.json").read_text())
    got = {Path(r["file"]).stem: r for r in data["submissions"]}
    assert got["ex01_honest_full"]["total"] == FULL and got["ex01_honest_full"]["detail"] == ""
    assert got["ex01_honest_partial"]["total"] == FULL - POINTS["ex01.rounding_interval"]
    assert got["ex01_honest_partial"]["detail"] == "" and got["ex01_honest_partial"]["status"] == "graded"
    for name in got:  # every attacker keeps its honest functions' points
        assert got[name]["total"] >= FULL - POINTS["ex01.rounding_interval"], (name, got[name]["detail"])

    limits = data["grader"]["whole_submission_limits"]
    assert f"limits of a whole submission: {limits}" in proc.stdout
    if isinstance(where, str):  # no cgroups here: the run must say so, and why
        assert limits.startswith("none: per-process limits only") and where in limits
    else:
        assert limits.startswith(f"cgroup v{where.version}")
        mem = got["ex01_children_hold_memory"]["detail"]
        held = int(re.search(r"children holding 600 MB: (\d) of 4", mem).group(1))
        assert held < 4 and f"its {memory_mb} MB of memory, all its processes together" in mem, mem
        procs = got["ex01_starts_processes"]["detail"]
        started = int(re.search(r"processes started: (\d+) of 150", procs).group(1))
        assert started < processes and f"its limit of {processes} processes and threads" in procs, procs
        if "cpu" in where.parents:  # the run's default: the cores shared among --jobs 2
            hog = got["ex01_cpu_hog"]
            used = float(re.search(r"busy processes used ([0-9.]+) CPUs", hog["detail"]).group(1))
            assert used <= 1.15 * default_cpus(2) + 0.05, (used, default_cpus(2))
            assert "memory, processes and CPU" in limits and hog["kernel_cpu_s"] > 0.5, hog
        fill = got["ex01_fills_channel"]
        if "its channel folder in /dev/shm" in limits:  # a tmpfs: what the kernel writes there is its memory
            assert fill["status"] == "kernel died" and f"its {memory_mb} MB of memory" in fill["detail"], fill
        else:
            assert "its channel folder in the temporary folder, limited per file only" in limits
        assert fill["total"] == FULL, fill["detail"]  # the cell that filled it was left out
        assert not list(Path("/dev/shm").glob(f"nbgrade-channels-{grader.pid}-*"))  # its folder went with it

    dev = re.search(r"/dev (\S+); /dev/shm took (\d+) MB; /tmp took (\d+) MB", got["ex01_fills_dev"]["detail"])
    shm_mb, tmp_mb = disk_split(disk_mb)
    assert dev.group(1) == "read-only", dev.group(0)
    assert int(dev.group(2)) <= shm_mb and int(dev.group(3)) <= tmp_mb, dev.group(0)
    assert int(dev.group(2)) + int(dev.group(3)) <= disk_mb

    for name in ("ex01_returns_colliding_sets", "ex01_returns_wide_empty_strings"):
        r = got[name]  # decode_bits is wrong, judged in bounded time and memory; the rest is right
        assert r["total"] == FULL - POINTS["ex01.decode_bits"] and r["status"] == "graded", r["detail"]
        assert r["checks"]["ex01.decode_bits"]["status"] == "FAIL", r
        # in CPU seconds (a quadratic decoder rebuilds the colliding set for each of 400 cases)
        assert r["judge_cpu_s"] < 10, (name, r["judge_cpu_s"])
    for name in ("ex01_prints_200_mb", "ex01_opens_comms"):  # 620 MB and 480 MB in the worker, uncapped
        assert got[name]["total"] == FULL and got[name]["worker_peak_mb"] < 250, (name, got[name]["worker_peak_mb"])
