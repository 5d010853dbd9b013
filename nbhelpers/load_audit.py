"""Watch the loads of a Triton kernel: how many elements it read as NaN where its mask was true.

An exercise launcher fills the memory around each operand with NaN. A load past an edge that a
mask should have stopped then reads NaN, but the NaN reaches the result only if the element it
feeds is stored: a GEMM that forgets the row mask of ``A`` pollutes only accumulator rows past
``M``, which the epilogue's masked store drops. So the launcher does not rely on the result: it
runs the kernel in Triton's interpreter with every ``tl.load`` watched, and counts the elements
that came back NaN under a true mask (the operands the checks pass are finite, so each such
element was read from the padding).

In the interpreter (no GPU) the watched run is the kernel's own run. On a GPU the compiled kernel
cannot be watched, so :func:`run_watching_loads` runs an interpreted copy of it first (on the same
arguments: it writes what the compiled run then writes again), then the compiled kernel, whose
results the caller reads.

The watched run also stops a stray pointer: a load or store under a true mask whose address lies
outside every tensor of the launch raises :class:`StrayPointerError` before it happens. Unwatched,
the interpreter reads or writes whatever memory is there (a misplaced stride can reach far past
the padding), or crashes the process, and on a GPU the compiled kernel would fault; watched, the
answer fails with a message and the notebook goes on.

What the interpreter cannot show at all, :func:`dot_operand_problems` reads from the kernel's
source: a ``tl.dot`` of float32 operands without ``input_precision="ieee"`` (the interpreter
multiplies in float32 whatever it says; an NVIDIA GPU rounds the operands to TF32), and an operand
of ``tl.dot`` loaded under a mask without ``other=`` (the interpreter fills the masked-off lanes
with zeros; on a GPU they are undefined, and the dot sums them).

And what would not run on a GPU at all, :func:`host_code_problems` also reads from the source: in
the interpreter a kernel's body is Python, so it can reach numpy, a function of the notebook or a
loaded value's host data (``.handle.data``, ``int(x)``) and compute its answer on the host; the
launchers of the exercises whose answer is a kernel refuse such a kernel before running it.

The exercise launchers of chapter 09 are built from three pieces here, imported inside their
bodies so that no name a notebook binds stands in for them: :func:`nan_padded` (an operand as a
view into a buffer of NaN, laid out by rows or by columns), :func:`launch_watched` (the audits of
the source, then the watched launch) and :func:`in_both_layouts` (the same launch in both layouts,
which must agree).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class LoadCount:
    """Elements read by the watched ``tl.load`` calls: all of them, and those NaN under a true mask."""

    elements: int = 0
    nan_reads: int = 0


class StrayPointerError(IndexError):
    """A watched kernel's load or store aimed outside every tensor it was given."""


def _buffers_of(args) -> list[tuple[int, int]]:
    """[start, end) addresses of the storage of every tensor in ``args`` (tuples searched too)."""
    out = []
    for arg in args:
        if isinstance(arg, tuple):
            out += _buffers_of(arg)
        elif hasattr(arg, "untyped_storage"):
            storage = arg.untyped_storage()
            out.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return out


def _check_inside(buffers: list[tuple[int, int]], ptrs, mask, what: str) -> None:
    """Raise :class:`StrayPointerError` where a pointer under a true mask lies outside ``buffers``
    (nothing is checked where no launch recorded its tensors)."""
    if not buffers:
        return
    addresses = np.asarray(ptrs.data).astype(np.uint64)
    width = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, end in buffers:
        inside |= (addresses >= start) & (addresses + width <= end)
    stray = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape) & ~inside
    if stray.any():
        raise StrayPointerError(
            f"{int(stray.sum())} of the {addresses.size} elements of a {what} lie outside every tensor "
            "the kernel was given (stopped before the access): a pointer or a mask is wrong"
        )


@contextmanager
def watched_loads() -> Iterator[LoadCount]:
    """While the block runs, count what every ``tl.load`` of an interpreted kernel reads (Triton's
    ``InterpreterBuilder.create_masked_load``, which unmasked loads go through too), and stop any
    load or store under a true mask whose address lies outside the tensors of the launch (the
    interpreter would read or write whatever memory is there, or crash the process): it raises
    :class:`StrayPointerError` instead."""
    from triton.runtime.interpreter import GridExecutor, InterpreterBuilder

    count = LoadCount()
    buffers: list[tuple[int, int]] = []
    original = InterpreterBuilder.create_masked_load
    original_store = InterpreterBuilder.create_masked_store
    original_args = GridExecutor._init_args_hst

    def init_args_hst(self, args_dev, kwargs):
        # the tensors as the interpreter holds them (host copies of a GPU's), before it runs
        args_hst, kwargs_hst = original_args(self, args_dev, kwargs)
        buffers.extend(_buffers_of([*args_hst, *kwargs_hst.values()]))
        return args_hst, kwargs_hst

    def create_masked_load(self, ptrs, mask, other, *rest):
        _check_inside(buffers, ptrs, mask, "load")
        loaded = original(self, ptrs, mask, other, *rest)
        values = np.asarray(loaded.data)
        count.elements += values.size
        if values.dtype.kind == "f":
            count.nan_reads += int(np.count_nonzero(np.isnan(values) & np.broadcast_to(mask.data, values.shape)))
        return loaded

    def create_masked_store(self, ptrs, value, mask, *rest):
        _check_inside(buffers, ptrs, mask, "store")
        return original_store(self, ptrs, value, mask, *rest)

    InterpreterBuilder.create_masked_load = create_masked_load
    InterpreterBuilder.create_masked_store = create_masked_store
    GridExecutor._init_args_hst = init_args_hst
    try:
        yield count
    finally:
        InterpreterBuilder.create_masked_load = original
        InterpreterBuilder.create_masked_store = original_store
        GridExecutor._init_args_hst = original_args


def run_watching_loads(kernel: Any, grid: tuple, *args: Any, **meta: Any) -> LoadCount:
    """Launch ``kernel[grid](*args, **meta)`` and return what its loads read (:class:`LoadCount`),
    watched in Triton's interpreter (on a GPU: an interpreted copy run first, then the kernel)."""
    from triton.runtime.interpreter import InterpretedFunction

    interpreted = isinstance(kernel, InterpretedFunction)
    watched = kernel if interpreted else InterpretedFunction(kernel.fn)
    try:
        with watched_loads() as count:
            watched[grid](*args, **meta)
    except Exception as e:
        if isinstance(e.__cause__, StrayPointerError):  # the interpreter wraps what a kernel raises
            raise e.__cause__ from None
        raise
    if not interpreted:
        kernel[grid](*args, **meta)
    return count


def _is_tl_call(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is a call of ``tl.<name>`` (or ``triton.language.<name>``)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _unfilled_load(node: ast.AST) -> bool:
    """Whether ``node`` is a ``tl.load`` under a mask (by keyword or position) without ``other``
    (``other=None``, Triton's default, is none)."""
    if not _is_tl_call(node, "load"):
        return False
    masked = _keyword(node, "mask") is not None or len(node.args) >= 2
    other = _keyword(node, "other")
    if other is None and len(node.args) >= 3:
        other = node.args[2]
    filled = other is not None and not (isinstance(other, ast.Constant) and other.value is None)
    return masked and not filled


def _unfilled(node: ast.AST, names: dict[str, bool]) -> bool:
    """Whether ``node`` carries an unfilled masked load's lanes: the load itself, a conversion of
    one (``tl.load(...).to(tl.float32)``), or a name last assigned one (``names``: each name's
    state so far)."""
    if _unfilled_load(node):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        return _unfilled(node.func.value, names)
    if isinstance(node, ast.Name):
        return names.get(node.id, False)
    if isinstance(node, ast.BinOp):  # arithmetic keeps the undefined lanes undefined
        return _unfilled(node.left, names) or _unfilled(node.right, names)
    if isinstance(node, ast.UnaryOp):
        return _unfilled(node.operand, names)
    return False


def _assignments(tree: ast.AST) -> list[tuple[int, str, ast.expr]]:
    """Every assignment to a plain name, in source order: (line, name, value); a tuple assigned
    from a tuple of the same length (``a, b = x, y``) counts as one assignment per name."""
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name):
            out.append((node.lineno, target.id, value))
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            out.extend((node.lineno, t.id, v) for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name))
    return sorted(out, key=lambda a: a[0])


def _float32_zeros(node: ast.AST) -> bool:
    """Whether ``node`` is ``tl.zeros(...)`` or ``tl.full(...)`` with ``dtype=tl.float32``."""
    if not (_is_tl_call(node, "zeros") or _is_tl_call(node, "full")):
        return False
    dtype = _keyword(node, "dtype")
    if dtype is None:
        dtype = node.args[1] if _is_tl_call(node, "zeros") and len(node.args) >= 2 else None
        dtype = node.args[2] if dtype is None and _is_tl_call(node, "full") and len(node.args) >= 3 else dtype
    return isinstance(dtype, ast.Attribute) and dtype.attr == "float32"


def _accumulators(tree: ast.AST) -> dict[str, int]:
    """Names a ``tl.dot`` accumulates into (``acc += tl.dot(a, b)``, ``acc = tl.dot(a, b, acc)``),
    each with the line of its first accumulation."""
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            if any(_is_tl_call(n, "dot") for n in ast.walk(node.value)):
                found[node.target.id] = min(node.lineno, found.get(node.target.id, node.lineno))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
            if _is_tl_call(value, "dot"):
                acc = _keyword(value, "acc") or (value.args[2] if len(value.args) >= 3 else None)
                if isinstance(acc, ast.Name) and acc.id == name:
                    found[name] = min(node.lineno, found.get(name, node.lineno))
    return found


def _value_of(node: ast.AST | None, fn: Any) -> Any:
    """The value ``node`` stands for when it is a constant, or a name the kernel's globals or its
    parameters' defaults give (a ``tl.constexpr`` unwrapped); None otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if not isinstance(node, ast.Name):
        return None
    value = getattr(fn, "__globals__", {}).get(node.id)
    if value is None:
        try:
            param = inspect.signature(fn).parameters.get(node.id)
        except (TypeError, ValueError):
            param = None
        if param is not None and param.default is not inspect.Parameter.empty:
            value = param.default
    return getattr(value, "value", value)


def dot_operand_problems(kernel: Any) -> list[str]:
    """What a GPU would compute differently from Triton's interpreter at the ``tl.dot`` calls of
    ``kernel`` (a ``@triton.jit`` function), read from its source; [] when nothing.

    - a ``tl.dot`` without ``input_precision="ieee"``: on an NVIDIA GPU float32 operands are then
      rounded to TF32 (10 mantissa bits); the interpreter multiplies them in float32;
    - an operand of ``tl.dot`` that is, or is last assigned above the dot from, a
      ``tl.load(..., mask=...)`` without ``other=`` (or with ``other=None``, the default), or
      arithmetic on one: the masked-off lanes are undefined on a GPU (the interpreter gives
      zeros) and the dot sums them;
    - an accumulator of ``tl.dot`` (``acc += tl.dot(...)``, ``acc = tl.dot(a, b, acc)``) whose
      last assignment before it is not ``tl.zeros(..., dtype=tl.float32)``: the interpreter
      promotes it to float32 at the first addition, a GPU's compiler refuses a loop-carried value
      whose type changes (or accumulates in the narrower type).

    Raises ValueError when the kernel's source cannot be read (a function defined from a string)."""
    fn = getattr(kernel, "fn", kernel)
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise ValueError(f"cannot read the source of {getattr(fn, '__name__', fn)!r} to check its tl.dot calls") from e
    tree = ast.parse(source)
    # every assignment to a plain name, in source order: (line, name, whether it is a masked load
    # without other=); an operand of tl.dot takes the last one above the dot, so a load whose lanes
    # are then filled (a = tl.where(mask, a, 0.0)) is not reported
    assigns = _assignments(tree)
    names: dict[str, bool] = {}
    assigned = []
    for ln, name, value in assigns:  # a copy or a conversion of an unfilled load carries it on
        names[name] = _unfilled(value, names)
        assigned.append((ln, name, names[name]))
    first = getattr(getattr(fn, "__code__", None), "co_firstlineno", 1) - 1
    problems = []
    for node in ast.walk(tree):
        if not _is_tl_call(node, "dot"):
            continue
        line = first + node.lineno
        # input_precision="ieee" (a constant, or a name the kernel's globals or parameter
        # defaults make "ieee"), or the older allow_tf32=False (Triton 3.7.1 maps it to "ieee")
        # by keyword or by position: tl.dot(input, other, acc, input_precision, allow_tf32, ...)
        precision = _keyword(node, "input_precision") or (node.args[3] if len(node.args) >= 4 else None)
        allow = _keyword(node, "allow_tf32") or (node.args[4] if len(node.args) >= 5 else None)
        ieee = _value_of(precision, fn) == "ieee"
        no_tf32 = _value_of(allow, fn) is False
        if not (ieee or no_tf32):
            problems.append(
                f'the tl.dot on line {line} has no input_precision="ieee": on an NVIDIA GPU its '
                "float32 operands are rounded to TF32 (10 mantissa bits)"
            )
        operands = [*node.args[:2], *(k.value for k in node.keywords if k.arg in ("input", "other"))]
        for op in operands:
            if _unfilled_load(op) or (not isinstance(op, ast.Name) and _unfilled(op, {})):
                where = (op.lineno, "a tl.load")
            elif isinstance(op, ast.Name):
                last = [(ln, bad) for ln, name, bad in assigned if name == op.id and ln < node.lineno]
                if not (last and last[-1][1]):
                    continue
                where = (last[-1][0], op.id)
            else:
                continue
            problems.append(
                f"{where[1]}, an operand of the tl.dot on line {line}, is loaded under a mask without "
                f"other= (line {first + where[0]}): on a GPU the masked-off lanes are undefined, and "
                "the dot sums them"
            )
    for name, line in _accumulators(tree).items():
        before = [(ln, value) for ln, n, value in assigns if n == name and ln < line]
        if before and _float32_zeros(before[-1][1]):
            continue
        where = f"line {first + before[-1][0]}" if before else "nowhere above it"
        problems.append(
            f"{name}, the accumulator of the tl.dot on line {first + line}, is not started as "
            f"tl.zeros(..., dtype=tl.float32) ({where}): the interpreter turns it into float32 at the "
            "first addition, while a GPU's compiler refuses a loop-carried value whose type changes"
        )
    return problems


#: What a kernel's code may name beside its parameters and locals: the builtins a Triton kernel
#: compiles with (``range``, ``min``, ...), Triton's modules, other ``@triton.jit`` functions and
#: constants.
_KERNEL_BUILTINS = frozenset({"range", "min", "max", "len", "print", "isinstance"})
#: Attributes of an interpreted value that reach its host data (numpy) and that no compiled kernel
#: has: the interpreter's handles, and conversions to host values.
_HOST_ATTRIBUTES = frozenset({"handle", "data", "item", "tolist", "numpy", "cpu", "base", "ctypes"})


#: Python constructs Triton's frontend does not compile (the interpreter runs them as Python).
_HOST_NODES = {
    ast.List: "a list",
    ast.ListComp: "a list comprehension",
    ast.Dict: "a dict",
    ast.DictComp: "a dict comprehension",
    ast.Set: "a set",
    ast.SetComp: "a set comprehension",
    ast.GeneratorExp: "a generator",
    ast.Lambda: "a lambda",
    ast.Try: "a try statement",
    ast.With: "a with statement",
    ast.Global: "a global statement",
    ast.Nonlocal: "a nonlocal statement",
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.Yield: "a yield",
    ast.ClassDef: "a class",
    ast.JoinedStr: "an f-string",  # a loaded value as text, compared on the host
}


def _is_triton_language(module: Any) -> bool:
    name = getattr(module, "__name__", "")
    return isinstance(name, str) and (name == "triton.language" or name.startswith("triton.language."))


def _module_chain_problem(node: ast.Attribute, glob: dict) -> str | None:
    """For ``a.b.c`` rooted at a module of the kernel's globals: where the chain leaves
    ``triton.language`` (``tl.core.builtins``, ``triton.runtime``, ``triton.cdiv``), or None."""
    chain = []
    n: ast.AST = node
    while isinstance(n, ast.Attribute):
        chain.append(n.attr)
        n = n.value
    if not isinstance(n, ast.Name) or not inspect.ismodule(glob.get(n.id)):
        return None
    value, path = glob[n.id], n.id
    for attr in reversed(chain):
        if not inspect.ismodule(value) or not hasattr(value, attr):
            return None  # past the modules: a value of triton.language (tl.float32.primitive_bitwidth)
        root = value.__name__ == "triton"
        value, path = getattr(value, attr), f"{path}.{attr}"
        if inspect.ismodule(value) and not _is_triton_language(value):
            return f"{path}, the module {value.__name__}"
        if root and not _is_triton_language(value) and not _is_jit_function(value):
            return f"{path}, a host function of triton, not of triton.language"
    return None


def _is_jit_function(value: Any) -> bool:
    return type(value).__name__ in ("JITFunction", "InterpretedFunction") and callable(getattr(value, "fn", None))


def _is_constant(value: Any) -> bool:
    value = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    return value is None or isinstance(value, (bool, int, float, str))


def host_code_problems(kernel: Any) -> list[str]:
    """What in ``kernel`` (a ``@triton.jit`` function) runs only on the host, in Triton's
    interpreter, read from its source and globals; [] when nothing. In the interpreter a kernel's
    body is Python: it can call any function, reach numpy through a loaded value's handle and
    read module globals, none of which a GPU kernel can. Reported:

    - a global name that is not Triton (``tl``, ``triton``), another ``@triton.jit`` function
      (checked the same way), a constant or a builtin a kernel compiles with: a numpy or torch
      module, a plain Python function, an array, a class;
    - an attribute that reaches an interpreted value's host data (``.handle``, ``.data``,
      ``.item()``, ``.tolist()``, ``.numpy()``, ``.cpu()``) or any ``__dunder__`` one.

    - a module reached through Triton's that is not ``triton.language`` (``tl.core.builtins``,
      ``triton.runtime.interpreter.np``), or a host function of ``triton`` (``triton.cdiv``);
    - the builtins ``int``, ``float`` and ``bool`` (the interpreter turns a loaded value into a
      Python number with them), and Python constructs Triton does not compile: lists, dicts, sets,
      comprehensions, lambdas, nested functions, f-strings, ``try``, ``with``, imports.

    Not a compiler: a kernel it passes may still fail to compile (a ``break``); it stops the
    escapes that let an interpreted kernel compute on the host."""
    import builtins

    problems: list[str] = []
    seen: set[int] = set()

    def audit(k: Any) -> None:
        fn = getattr(k, "fn", k)
        if id(fn) in seen:
            return
        seen.add(id(fn))
        name = getattr(fn, "__name__", "the kernel")
        if not _is_jit_function(k):
            problems.append(f"{name} is a {type(k).__name__}, not a @triton.jit function")
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            problems.append(f"the source of {name} cannot be read")
            return
        if not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
            problems.append(f"the source of {name} is not a def")
            return
        # the body only (its decorator, @triton.jit, is the host's); lines as in its cell
        body = [n for stmt in tree.body[0].body for n in ast.walk(stmt)]
        first = getattr(getattr(fn, "__code__", None), "co_firstlineno", 1) - 1
        local = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        glob = getattr(fn, "__globals__", {})
        for node in body:
            line = first + node.lineno if hasattr(node, "lineno") else "?"
            if type(node) in _HOST_NODES or isinstance(node, ast.FunctionDef):
                what = _HOST_NODES.get(type(node), "a nested function")
                problems.append(f"{name} has {what} (line {line}): Python that no GPU kernel compiles")
            if isinstance(node, ast.Attribute):
                chain = _module_chain_problem(node, glob)
                if chain is not None:
                    problems.append(f"{name} reaches {chain} (line {line}): not device code")
            if isinstance(node, ast.Attribute) and (
                node.attr in _HOST_ATTRIBUTES or (node.attr.startswith("__") and node.attr.endswith("__"))
            ):
                problems.append(f"{name} reads .{node.attr} (line {line}): a host value, not one a GPU kernel has")
            if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load) or node.id in local:
                continue
            if node.id in glob:
                value = glob[node.id]
                module = value.__name__ if inspect.ismodule(value) else None
                if module is not None and (module == "triton" or module.startswith("triton.")):
                    continue
                if _is_jit_function(value):
                    audit(value)
                    continue
                if _is_constant(value):
                    continue
                problems.append(
                    f"{name} uses {node.id}, a {type(value).__name__} of the host (line {line}): "
                    "a GPU kernel can use only Triton, other @triton.jit functions and constants"
                )
            elif node.id not in _KERNEL_BUILTINS and hasattr(builtins, node.id):
                problems.append(f"{name} calls the Python builtin {node.id} (line {line}): not in a GPU kernel")

    audit(kernel)
    return list(dict.fromkeys(problems))


# ------------------------------------------------------------------ the exercise launchers' pieces


def nan_padded(x: Any, pad: tuple[int, ...], column_major: bool = False, device: Any = "cpu") -> Any:
    """``x`` (..., R, C) as a float32 torch view into a buffer of NaN ``pad[i]`` elements longer
    along each axis ``i``, laid out by rows (strides (..., C + pad[-1], 1)) or, ``column_major``,
    with its last two axes stored by columns (strides (..., 1, R + pad[-2])). The view's
    shape is ``x``'s; everything past its edges in the buffer is NaN."""
    import torch

    x = np.asarray(x, dtype=np.float32)
    if len(pad) != x.ndim or x.ndim < 2 or min(pad) < 0:
        raise ValueError(f"pad must give one count >= 0 per axis of x, {x.ndim} >= 2 of them: {pad}")
    shape = [n + p for n, p in zip(x.shape, pad)]
    if column_major:
        shape[-2:] = shape[-1], shape[-2]
    buf = torch.full(shape, float("nan"), dtype=torch.float32, device=device)
    if column_major:
        buf = buf.transpose(-2, -1)
    view = buf[tuple(slice(0, n) for n in x.shape)]
    view.copy_(torch.from_numpy(x))
    return view


def launch_watched(kernel: Any, grid: tuple, *args: Any, **meta: Any) -> None:
    """``kernel[grid](*args, **meta)`` as an exercise's launcher runs it: refused before it runs
    if its source computes on the host (:func:`host_code_problems`, TypeError) or holds a
    ``tl.dot`` a GPU computes otherwise than the interpreter (:func:`dot_operand_problems`,
    ValueError); then watched (:func:`run_watching_loads`): IndexError if a load read the NaN
    padding under a true mask, :class:`StrayPointerError` if a load or store aimed outside every
    tensor of the launch (stopped before it happens)."""
    problems = host_code_problems(kernel)
    if problems:
        raise TypeError("; ".join(problems))
    problems = dot_operand_problems(kernel)
    if problems:
        raise ValueError("; ".join(problems))
    reads = run_watching_loads(kernel, grid, *args, **meta)
    if reads.nan_reads:
        raise IndexError(
            f"{reads.nan_reads} of the {reads.elements} elements the kernel's loads read lie past an "
            "edge (NaN padding read where the mask was true): a mask is missing or wrong"
        )


def in_both_layouts(run: Any) -> np.ndarray:
    """``run(column_major)`` with the operands laid out by rows, then by columns; its result,
    failing if the two differ (a kernel that leaves out a stride is right in one layout only)."""
    by_rows = run(False)
    try:
        by_columns = run(True)
    except (IndexError, ValueError) as e:
        raise type(e)(f"{e} (with the operands laid out by columns only: a stride is missing or misplaced)") from None
    if not np.array_equal(by_rows, by_columns, equal_nan=True):
        raise ValueError(
            "the operands laid out by rows and by columns give different results: a stride is missing or misplaced"
        )
    return by_rows
