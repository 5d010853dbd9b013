"""The notebook's top-level names made with modules outside an exercise's tools: read from the
code (nbhelpers.top_level), refused by the check cell and the grader alike."""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest

from nbhelpers import checks
from nbhelpers.answer_keys import ch06, ch07
from nbhelpers.checks import names_made_outside, run_check
from nbhelpers.top_level import outside_names, outside_of

OUT6 = outside_of(ch06.FP8_CHOICE_TOOLS)
OUT7 = outside_of(ch07.TOOLS)

IMPORTS = """
import math
import numpy as np
import ml_dtypes
from nbhelpers.checks import check
from nbhelpers.formats import get_format
import nbhelpers.scaling as sc
"""


def made(*cells: str, outside=OUT6) -> dict[str, str]:
    return outside_names(list(enumerate(cells)), outside)


def test_what_the_tools_leave_out():
    assert [OUT6(m) for m in ("math", "numpy", "numpy.lib.stride_tricks", "collections.abc", "sys")] == [False] * 5
    assert [OUT6(m) for m in ("ml_dtypes", "torch", "nbhelpers.formats", "nbhelpers.rounding")] == [True] * 4
    assert [OUT7(m) for m in ("ml_dtypes", "nbhelpers.formats", "nbhelpers", "nbhelpers.scaling", "torch")] == [
        False,
        False,
        False,
        True,
        True,
    ]


def test_values_from_outside_and_from_the_tools():
    found = made(
        IMPORTS,
        "E4_TOP = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)\nE5_TOP = get_format('e5m2').max\n"
        "TWICE = E4_TOP * 2\nPLAIN = 57344.0\nF32 = np.float32(448)\n_HIDDEN = E4_TOP\n"
        "TIE_UP = float(ml_dtypes.float8_e4m3fn(464.0)) > 448\nQ = sc.quantize\n",
    )
    assert found["E4_TOP"] == "ml_dtypes, in cell 2" and found["E5_TOP"] == "nbhelpers.formats, in cell 2"
    assert {"TWICE", "_HIDDEN", "TIE_UP", "Q", "ml_dtypes", "get_format", "sc", "check"} <= set(found)
    assert not {"PLAIN", "F32", "np", "math"} & set(found)


def test_definitions_that_read_them_and_what_is_bound_again():
    found = made(
        IMPORTS,
        "E4_TOP = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)\n"
        "def by_default(x, top=E4_TOP):\n    return x\n"
        "def in_body(x):\n    return ml_dtypes.bfloat16(x)\n"
        "class Tops:\n    e4m3fn = E4_TOP\n"
        "class Method:\n    def f(self, t=E4_TOP):\n        return t\n"
        "TABLE = []\nTABLE.append(ml_dtypes.float8_e4m3fn(1.0))\n"
        "for k in range(3):\n    LOOPED = sc.quantize\n"
        "TINY = 2.0**-10\nTINY = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).smallest_subnormal)\n"
        "AGAIN = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)\n",
        "AGAIN = 2.0**-7\n%matplotlib inline\n",
    )
    assert {"by_default", "Tops", "Method", "LOOPED", "TINY"} <= set(found)
    assert "TABLE" not in found  # changed in place by a statement the grader does not run
    assert "in_body" not in found  # its body is the function's own code, which the audit reads
    assert "AGAIN" not in found  # bound again from the tools, at the top level


def test_chapter_07s_course_tools_are_inside():
    found = made(
        "import torch\nfrom nbhelpers.formats import get_format\nfrom nbhelpers import formats, scaling\n"
        "import nbhelpers.rounding\nM = get_format('e4m3fn').max\nQ = nbhelpers.scaling.quantize\n"
        "V = torch.finfo(torch.bfloat16).eps\nR = nbhelpers.rounding.round_to(1.0, 'bf16')\n",
        outside=OUT7,
    )
    assert set(found) == {"torch", "scaling", "Q", "V"}


def fp8_choice_reading_globals(x, amax):
    """The solution's fp8_choice, its limits read from globals."""
    x = np.asarray(x, dtype=np.float64)
    nonzero = x != 0
    counts = {}
    for fmt, emin, man_bits, top, tie_goes_up in (("e4m3fn", -6, 3, E4_TOP, False), ("e5m2", -14, 2, E5_TOP, True)):
        scale = float(np.float32(amax / top))
        v = np.abs(x / scale)
        tiny = 2.0 ** (emin - man_bits)
        under = int(np.sum(nonzero & (v <= tiny / 2)))
        mid = top + 2.0 ** (math.floor(math.log2(top)) - man_bits) / 2
        over = int(np.sum(v >= mid)) if tie_goes_up else int(np.sum(v > mid))
        counts[fmt] = (under, over)
    lost = {fmt: u + o for fmt, (u, o) in counts.items()}
    n = int(np.sum(nonzero))
    return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts


E4_TOP, E5_TOP = 448.0, 57344.0


def test_the_check_refuses_a_function_that_reads_one():
    assert run_check("ex06.fp8_choice", fp8_choice_reading_globals).points == 3
    res = run_check("ex06.fp8_choice", fp8_choice_reading_globals, outside={"E4_TOP": "ml_dtypes, in In [3]"})
    assert res.points == 0 and "E4_TOP (from ml_dtypes, in In [3])" in res.error
    # a name the function does not read is no concern of its check
    assert (
        run_check("ex06.fp8_choice", fp8_choice_reading_globals, outside={"OTHER": "ml_dtypes, in In [3]"}).points == 3
    )


def test_the_check_cell_reads_the_cells_the_kernel_ran(monkeypatch):
    ran = ["", IMPORTS, "E4_TOP = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)\n", "E5_TOP = 57344.0\n"]
    shell = types.SimpleNamespace(user_ns={"In": ran})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    found = names_made_outside(checks.get_exercise("ex06.fp8_choice"))
    assert found["E4_TOP"] == "ml_dtypes, in In [2]" and "E5_TOP" not in found
    assert names_made_outside(checks.get_exercise("ex06.flushed_per_tensor")) is None  # no tools: no rule
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert names_made_outside(checks.get_exercise("ex06.fp8_choice")) is None  # not in IPython


@pytest.mark.parametrize("cell", ["x = (", "%%bash\necho hi\n", "!ls\nA = 1\n"])
def test_a_cell_that_is_not_python_adds_nothing(cell):
    assert made(cell) == {}


def test_values_reached_without_naming_the_module():
    """A * import, a dtype numpy finds by a name ml_dtypes registered, a name bound inside a
    statement (a walrus, a comprehension), a call of a function whose body imports from outside:
    each carries the module into the names it binds. Names a * import leaves alone, and what
    the statement binds itself, are not taken for its."""
    import ml_dtypes  # noqa: F401 - registers its type names with numpy, as a notebook's import does

    found = made(
        "import math\nimport numpy as np\nfrom ml_dtypes import *\n",
        "A = float8_e4m3fn\nB = [i * 2 for i in range(3)]\nC = math.pi\n"
        "def f(x, y=2):\n    z = x + y\n    return z\nD = f(1)\n",
    )
    assert set(found) == {"A"}
    found = made(
        "import math\nimport numpy as np\n",
        "TIE = float(np.dtype('float8_e4m3fn').type(464.0)) > 448\n"
        "def g():\n    import ml_dtypes\n    return float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)\n"
        "G = g()\nH = (W := np.dtype('bfloat16'))\nK = [(Y := 2.0) for _ in range(1)]\nF64 = np.dtype('float64')\n",
    )
    assert {"TIE", "G", "H", "W"} <= set(found) and not {"K", "Y", "F64", "g"} & set(found)


@pytest.mark.parametrize(
    "cell",
    [
        "print(E4_TOP, float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max))\n",
        "np.testing.assert_equal(E4_TOP, float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max))\n",
        "E4_TOP == ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max, E5_TOP\n",
        "assert E4_TOP == ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max\n",
    ],
)
def test_a_constant_read_beside_an_outside_module_stays_clear(cell):
    """Printing or comparing 448.0 with ml_dtypes' value leaves it 448.0."""
    consts = "E4_TOP = 448.0\nE5_TOP = math.ldexp(1.75, 15)\nE4_TINY = 2.0**-9\n"
    assert not {"E4_TOP", "E5_TOP"} & set(made(IMPORTS, consts, cell))


@pytest.mark.parametrize(
    "cells",
    [
        ("get_ipython().run_cell_magic('time', '', 'T = float(ml_dtypes.float8_e4m3fn(464.0))\\n')\n",),
        ("get_ipython().run_line_magic('time', 'T = float(ml_dtypes.float8_e4m3fn(464.0))')\n",),
        ("exec('T = float(ml_dtypes.float8_e4m3fn(464.0))')\n",),
        ("globals()['T'] = float(ml_dtypes.float8_e4m3fn(464.0))\n",),
        ("globals().update(T=float(ml_dtypes.float8_e4m3fn(464.0)))\n",),
        ("locals().__setitem__('T', float(ml_dtypes.float8_e4m3fn(464.0)))\n",),
        ("md = __import__('ml_dtypes')\nT = md.float8_e4m3fn(464.0)\n",),
        ("import sys\nT = sys.modules['ml_dtypes'].float8_e4m3fn(464.0)\n",),
    ],
)
def test_names_bound_where_no_assignment_shows_them(cells):
    """A magic's cell, an exec'd string, a store through the namespace, a module by its name:
    each binds T from ml_dtypes, and T is named."""
    assert "T" in made(IMPORTS, *cells)


def test_a_value_changed_in_place_is_the_graders_to_see():
    """A statement that changes a global in place (T.append(...), a helper that fills it) is one
    the grader leaves out: where the function is graded T is as its assignment made it, and the
    grader's note names the statement. It is not named here, so that the function that reads a
    table, calls its methods or prints it beside a module outside the tools is not refused."""
    found = made(
        IMPORTS,
        "T = []\nUNIT = {'bf16': 2.0**-8}\ndef fill():\n    T.extend([float(ml_dtypes.float8_e4m3fn(464.0))])\n",
        "fill()\nT.append(ml_dtypes.bfloat16(1.0))\nprint(UNIT.get('bf16'), ml_dtypes.finfo(ml_dtypes.bfloat16).eps)\n",
    )
    assert not {"T", "UNIT", "fill"} & set(found)


def test_a_function_s_own_names_are_not_the_notebook_s():
    """A function's parameters and locals, a lambda's parameter and a comprehension's variable
    are not the globals of the same name that a statement computed with a module outside the
    tools."""
    found = made(
        IMPORTS,
        "for w in sc.grid(3):\n    q = w\n",
        "def first_copy_change(w, g, lr):\n    q = 2\n    return w + g * lr + q\n"
        "ulp32 = lambda w: np.spacing(np.float32(w))\nSQ = [q * 2 for q in range(3)]\n"
        "def reads_global():\n    return q\n",
    )
    assert {"w", "q"} <= set(found) and not {"first_copy_change", "ulp32", "SQ", "reads_global"} & set(found)


def test_the_course_formats_fields_are_chapter_07s_tools():
    """A dataclass's fields without defaults are its instances' attributes: FloatFormat.man_bits
    and exp_bits are names of a tool (nbhelpers.formats) for chapter 07."""
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.formats import get_format

    def bits(name):
        f = get_format(name)
        return f.man_bits + f.exp_bits + f.bias + f.emin + f.bits

    assert tools_audit(bits, ch07.TOOLS) == []


@pytest.mark.parametrize(
    "cell",
    [
        "np.testing.assert_equal(TOPS, [float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max), 57344.0])\n",
        "import matplotlib.pyplot as plt\nplt.bar(['e4m3fn', 'e5m2'], TOPS)\n",
        "E4, E4_ML = 448.0, float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)\n",
    ],
)
def test_written_out_values_stay_clear_whatever_is_done_with_them(cell):
    found = made(IMPORTS, "TOPS = [448.0, 57344.0]\nE4 = 448.0\n", cell)
    assert not {"TOPS", "E4"} & set(found)


def test_a_dtype_name_is_a_module_s_only_where_numpy_reads_it():
    """A written-out table that names formats by strings is the notebook's own data; a string
    handed to numpy as a dtype (np.dtype, astype, view, dtype=) reaches ml_dtypes' type."""
    import ml_dtypes  # noqa: F401 - registers its type names with numpy, as a notebook's import does

    found = made(
        "import numpy as np\n",
        "FP8 = {'float8_e4m3fn': ('e4m3fn', -6, 3, 448.0), 'float8_e5m2': ('e5m2', -14, 2, 57344.0)}\n"
        "KNOWN = {'bfloat16': (8, 7)}\nWIDE = 'bfloat16'\n"
        "A = np.zeros(2).astype('float8_e4m3fn')\nB = np.array([1.0], dtype='bfloat16')\n"
        "C = np.zeros(1).view('float8_e5m2')\n",
    )
    assert {"A", "B", "C"} <= set(found) and not {"FP8", "KNOWN", "WIDE"} & set(found)


def test_what_an_outer_scope_evaluates_is_its_own():
    """A lambda's defaults and a comprehension's first iterator are evaluated where they stand:
    T there is the global T."""
    found = made(
        IMPORTS,
        "T = float(ml_dtypes.float8_e4m3fn(464.0))\n"
        "G = lambda T4=T: T4\nTT = [T for T in T]\nTL = (lambda T: T)(T)\nOWN = [T for T in range(3)]\n"
        "H = lambda T: T + 1\n",
    )
    assert {"G", "TT", "TL"} <= set(found) and not {"OWN", "H"} & set(found)


def test_annotations_and_folded_dtype_names_are_read_where_they_are_evaluated():
    """A def's annotations are evaluated where the def stands (a walrus there binds a global);
    a dtype name made of two strings, or looked up in numpy's table, is still ml_dtypes'."""
    import ml_dtypes  # noqa: F401 - registers its type names with numpy, as a notebook's import does

    found = made(
        IMPORTS,
        "def _z() -> (TT := [ml_dtypes.float8_e4m3fn(464.0) > 448]):\n    pass\n"
        "A = np.array([464.0]).astype('float8_' + 'e4m3fn')\nF4 = np.sctypeDict['float8_e4m3fn']\n"
        "B = np.zeros(2).astype('float' + '32')\n",
    )
    assert {"TT", "A", "F4"} <= set(found) and "B" not in found
