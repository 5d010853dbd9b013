"""What runs in the clean kernel the functions are graded in (nbhelpers.grading.definitions): the
statements of a notebook that an allowlist keeps whole (imports of known modules, defs and
classes with known decorators and bases, assignments of values), on their own lines, and nothing
else; each statement left out with the reason."""

from __future__ import annotations

import glob

import nbformat
import pytest

from nbhelpers.grading.definitions import MAX_DEFINITIONS_PARSE_CHARS, definitions_of
from nbhelpers.grading.submissions import check_cells

CELL = '''import math
from functools import lru_cache
%matplotlib inline
BIAS = 127
TABLE: list = []
for i in range(4):
    TABLE.append(i)
get_ipython().events.register("pre_run_cell", print)
print(BIAS)

@lru_cache(None)
def f(x, y=2):
    """A docstring."""
    return x + y + BIAS

class C:
    z = 1
try:
    import torch
except ImportError:
    torch = None
try:
    risky()
except Exception:
    pass
X = 1; hook()
if True:
    Y = 2
'''


def test_only_the_allowed_statements_are_kept_on_their_own_lines():
    defs = definitions_of([(0, CELL)], [False])
    [[index, kept]] = defs.cells
    assert index == 0
    lines = kept.split("\n")
    assert len(lines) == len(CELL.split("\n"))  # line for line: tracebacks and getsource match
    kept_lines = {0, 1, 3, 4, 10, 11, 12, 13, 15, 16, 17, 18, 19, 20}  # imports, f and its decorator, C, try-import
    for n, (got, want) in enumerate(zip(lines, CELL.split("\n"))):
        assert got == (want if n in kept_lines else ""), (n, want, got)
    left = [first for _, first, _, _ in defs.left_out]
    assert left == [
        "get_ipython().run_line_magic('matplotlib', 'inline')",
        "for i in range(4):",
        'get_ipython().events.register("pre_run_cell", print)',
        "print(BIAS)",
        "try:",
        "X = 1; hook()",
        "X = 1; hook()",
        "if True:",
    ]
    names = {first: n for _, first, n, _ in defs.left_out}
    assert names["for i in range(4):"] == {"TABLE", "i"}  # what it sets or changes, not what it reads
    assert defs.unparsed == []


def test_check_cells_cells_that_do_not_parse_and_cells_past_the_budget_give_nothing():
    cells = [(0, "check('ex01.f', f)"), (1, "def f(:\n    pass"), (2, "x = 1"), (3, "y = 2")]
    defs = definitions_of(cells, [True, False, False, False])
    assert [i for i, _ in defs.cells] == [2, 3] and defs.unparsed == [1]
    deep = (4, "z = " + "-" * 200_000 + "1")  # too deep to parse: the grader is not stopped by it
    huge = (5, "w = 1\n" + "#" * MAX_DEFINITIONS_PARSE_CHARS)
    defs = definitions_of([deep, huge, (6, "v = 3")], [False, False, False])
    assert defs.unparsed == [4, 5, 6] and defs.cells == []  # the budget is spent at the huge cell


@pytest.mark.parametrize("path", sorted(glob.glob("solutions/ex*.ipynb")))
def test_every_solutions_functions_are_all_defined_by_its_definitions(path):
    """The course's own solutions need nothing but their definitions: every function of the
    notebook is defined in the clean kernel's program, on the notebook's own lines."""
    nb = nbformat.read(path, as_version=4)
    cells = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    defs = definitions_of(cells, check_cells(cells))
    program = "\n".join(src for _, src in defs.cells)
    for _, src in cells:
        for line in src.splitlines():
            if line.startswith("def "):
                assert line in program, (path, line)
    assert defs.unparsed == []


def kept_or_why(src: str) -> str | None:
    """None when the last statement of ``src`` is kept, else the reason it is left out (the
    statements before it set the scope: the imports and names it may use)."""
    defs = definitions_of([(0, src)], [False])
    kept = {n for _, text in defs.cells for n, line in enumerate(text.splitlines(), 1) if line.strip()}
    if len(src.rstrip("\n").splitlines()) in kept:
        return None
    return defs.left_out[-1][3] if defs.left_out else "nothing kept and nothing left out"


PRELUDE = "import functools, math, dataclasses, typing\nimport numpy as np\nfrom nbhelpers.device import setup_device\n"
KEPT = [
    "N, Z = 10_000, 6.0",
    "EPS = 2.0 ** -23 * (1 << 3)",
    'T = {"e4m3": (4, 3), "e5m2": (5, 2)}["e4m3"]',
    "F32 = np.float32(1.5)",
    "A = np.array([1.0, -0.0], dtype=np.float32)",
    "L = math.ldexp(1.0, -24)",
    "info = setup_device()\nDEVICE = info.device",
    "F = lambda x, k=3: x * k",
    "@functools.cache\ndef f(x: undefined_name()) -> undefined_too():\n    return hook(x)",
    "@functools.lru_cache(maxsize=None)\ndef f(x, y=np.float32(2)):\n    return x",
    "@dataclasses.dataclass(frozen=True)\nclass P:\n    'doc'\n    x: int = 0\n"
    "    y: list = dataclasses.field(default_factory=list)\n    def __repr__(self):\n        return hook()",
    "class NT(typing.NamedTuple):\n    a: int\n    b: float = 1.0",
    "@dataclasses.dataclass\nclass Q:\n    x: int\n    y: undefined_name()\n    __slots__ = ()",
    "try:\n    import ml_dtypes\nexcept ImportError:\n    ml_dtypes = None",
    "class E(ValueError):\n    pass",
    # stored, never called: a dataclass field's factory
    "@dataclasses.dataclass\nclass R:\n    xs: list = dataclasses.field(default_factory=list)\n"
    "class S:\n    pass\n@dataclasses.dataclass\nclass T:\n    s: S = dataclasses.field(default_factory=S)",
    "def f(x):\n    return x\nTABLE = {'f': f, 'g': lambda x: x}",
]


@pytest.mark.parametrize("stmt", KEPT, ids=[s.splitlines()[0][:30] for s in KEPT])
def test_statements_an_honest_notebook_uses_are_kept(stmt):
    assert kept_or_why(PRELUDE + stmt) is None


# each: a statement that would run code of the student's (or change the grader's) in the clean
# kernel, and words of the reason it is left out
LEFT_OUT = [
    ("def deco(f):\n    return f\n@deco\ndef g():\n    pass", "decorator @deco"),
    ("@functools.wraps(print)\ndef g():\n    pass", "decorator"),
    ("import builtins", "it imports builtins"),
    ("import numpy.linalg\nnumpy.compile = print", "not to a name"),
    ("compile.__wrapped__ = print", "not to a name"),
    ("np.__dict__['x'] = 1", "not to a name"),
    ("try:\n    pass\nexcept (print('x'),):\n    pass", "except clause"),
    ("try:\n    import numpy\nexcept ImportError:\n    print('x')", "left out"),
    ("x: print('annotation')", "annotation with no value"),
    ("class C:\n    _ = print('x')", "body"),
    ("class C:\n    for i in range(3):\n        pass", "body"),
    ("class B:\n    def __init_subclass__(cls):\n        pass", "__init_subclass__"),
    ("class C:\n    __class_getitem__ = print", "__class_getitem__"),
    ("class C(metaclass=type):\n    pass", "metaclass"),
    ("import enum\nclass C(enum.Enum):\n    A = 1\n    def __init__(self, v):\n        print(v)", "base"),
    ("import abc\nclass C(abc.ABC):\n    pass", "base"),
    ("class C(Exception):\n    @classmethod\n    def __subclasshook__(cls, c):\n        pass", "__subclasshook__"),
    ("def g(x=print('default')):\n    pass", "it calls print"),
    ("F = lambda x=print('default'): x", "it calls print"),
    ("T = [2.0 ** -e for e in range(10)]", "comprehension"),
    ("x = (y := 3)", "not a value"),
    ("from os import *", "imports from os"),
    ("from numpy import *", "star import"),
    ("import os", "it imports os"),
    ("from . import answer_keys", "imports from ."),
    ("__builtins__ = {}", "reserved name"),
    ("def __getattr__(name):\n    pass", "reserved name"),
    ("x = np.load('f.npy', allow_pickle=True)", "it calls np.load"),
    ("x = np.apply_along_axis(print, 0, np.zeros(2))", "np.apply_along_axis"),
    ("x = np.float32(1).__class__", "private attribute"),
    ("x = undefined", "no statement kept before it defines"),
    ("np = {}\nx = np.float32(1)", "it calls np.float32"),
    ("TABLE = []\nTABLE.append(1)", "expression statement"),
    ("X = 1; print(X)", "expression statement"),
    ("if True:\n    X = 1", "if statement"),
    # a constructor that calls what it is handed: the notebook's code would run there
    ("def f(x):\n    return x\nX = sorted([3, 1], key=f)", "hands f to sorted"),
    ("X = max(1, 2, key=lambda v: print(v))", "hands a lambda to max"),
    ("def f(x):\n    return x\nFS = (f,)\nX = min([1, 2], key=FS[0])", "hands FS to min"),
    ("class C:\n    pass\nX = min([1, 2], key=C)", "hands C to min"),
]


@pytest.mark.parametrize("stmt,reason", LEFT_OUT, ids=[s.splitlines()[-1][:30] for s, _ in LEFT_OUT])
def test_what_would_run_the_students_code_is_left_out_with_the_reason(stmt, reason):
    why = kept_or_why(PRELUDE + stmt)
    assert why is not None and reason in why, why


def test_the_program_records_each_function_a_kept_statement_makes():
    src = (
        PRELUDE + "@functools.cache\ndef f(x):\n    return x\nclass C:\n    def m(self):\n        pass\nG = lambda: 1\n"
    )
    defs = definitions_of([(4, src)], [False])
    lines = src.splitlines()
    assert [(i, line, name) for i, line, name, _ in defs.functions] == [
        (4, lines.index("@functools.cache") + 1, "f"),
        (4, lines.index("    def m(self):") + 1, "m"),
        (4, len(lines), "<lambda>"),
    ]
    assert defs.functions[0][3] == "@functools.cache\ndef f(x):\n    return x\n"


def test_an_expression_nested_deeper_than_the_checker_goes_is_left_out_not_a_crash():
    defs = definitions_of([(0, "x = " + "+".join(["1"] * 1500)), (1, "y = 2")], [False, False])
    assert defs.left_out[0][3] == "it is nested too deeply to check" and [i for i, _ in defs.cells] == [1]


def test_names_bound_locally_are_the_functions_own():
    import ast

    from nbhelpers.grading.definitions import names_bound_locally

    src = (
        "def f(offsets, block_m, *args, key=1, **kw):\n"
        "    import numpy as np\n"
        "    total = 0\n"
        "    for i in range(3):\n"
        "        total += TABLE[i]\n"
        "    global COUNT\n"
        "    COUNT = total\n"
        "    def inner(x):\n"
        "        return x\n"
        "    return np.asarray(offsets) + inner(total)\n"
    )
    bound = names_bound_locally(ast.parse(src))
    assert {"offsets", "block_m", "args", "key", "kw", "np", "total", "i", "inner", "x"} <= bound
    assert "TABLE" not in bound and "COUNT" not in bound  # read from, or declared, the notebook's
    assert names_bound_locally(ast.parse("X = 1")) == frozenset()


def test_names_read_are_variables_not_attributes():
    """The grader's note on a name a left-out cell sets reads the function's variables: a field
    read as ``fmt.name`` is not the notebook's global ``name``."""
    from nbhelpers.grading.definitions import names_bound_locally, names_read, parse

    tree = parse("def f(fmt):\n    total = fmt.name + TABLE[0]\n    return total\n")
    assert names_read(tree) == {"fmt", "TABLE", "total"}
    assert names_read(tree) - names_bound_locally(tree) == {"TABLE"}


def test_library_decorators_a_property_setter_and_protocols_are_kept():
    """A property's setter, functools.cached_property and total_ordering, and a typing.Protocol
    base run no code of the student's when the class is made: the class is kept. A setter of a
    name the class body did not define with kept decorators is not."""
    src = (
        "import functools, typing\n"
        "@functools.total_ordering\n"
        "class Key:\n"
        "    def __init__(self, v):\n"
        "        self._v = v\n"
        "    @property\n"
        "    def v(self):\n"
        "        return self._v\n"
        "    @v.setter\n"
        "    def v(self, value):\n"
        "        self._v = value\n"
        "    @functools.cached_property\n"
        "    def double(self):\n"
        "        return 2 * self._v\n"
        "    def __eq__(self, other):\n"
        "        return self._v == other._v\n"
        "    def __lt__(self, other):\n"
        "        return self._v < other._v\n"
        "class HasBits(typing.Protocol):\n"
        "    bits: int\n"
        "class Other:\n"
        "    @elsewhere.setter\n"
        "    def w(self, value):\n"
        "        pass\n"
    )
    defs = definitions_of([(0, src)], [False])
    left = {first: why for _, first, _, why in defs.left_out}
    assert list(left) == ["class Other:"], left
    assert "elsewhere.setter" in left["class Other:"]


def test_generic_and_abstract_bases_are_kept():
    """typing.Generic[T] (T a typing.TypeVar kept before) and collections.abc's abstract classes
    run no code of the student's when the class is made: kept. Generic subscripted with a call
    of the student's, or an abstract class of another module, is not."""
    src = (
        "import typing\n"
        "import collections.abc\n"
        "from typing import Generic, TypeVar\n"
        "T = typing.TypeVar('T')\n"
        "class Box(typing.Generic[T]):\n"
        "    def get(self) -> T:\n"
        "        return self.v\n"
        "class Box2(Generic[T]):\n"
        "    pass\n"
        "class Bits(collections.abc.Sequence):\n"
        "    def __len__(self):\n"
        "        return 0\n"
        "    def __getitem__(self, i):\n"
        "        return i\n"
        "class Odd(typing.Generic[make()]):\n"
        "    pass\n"
        "class Io(io.IOBase):\n"
        "    pass\n"
    )
    defs = definitions_of([(0, src)], [False])
    left = {first: why for _, first, _, why in defs.left_out}
    assert list(left) == ["class Odd(typing.Generic[make()]):", "class Io(io.IOBase):"], left


def test_what_a_left_out_statement_changes():
    """A module's function called as a statement changes nothing of the module's name; a magic's
    cell binds what its code binds."""
    cells = [
        (0, "import numpy as np\nT = []\n"),
        (1, "np.testing.assert_equal(1, 1)\nT.append(3)\n"),
        (2, "%%time\nE4_TOP = 448.0\n"),
    ]
    defs = definitions_of(cells, [False] * 3)
    assert [sorted(names) for _, _, names, _ in defs.left_out] == [[], ["T"], ["E4_TOP"]]
