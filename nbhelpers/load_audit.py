"""Watch the loads of a Triton kernel: how many elements it read as NaN where its mask was true.

An exercise launcher fills the memory around each operand with NaN. A load past an edge that a
mask should have stopped then reads NaN, but the NaN reaches the result only if the element it
feeds is stored: a GEMM that forgets the row mask of ``A`` pollutes only accumulator rows past
``M``, which the epilogue's masked store drops. So the launcher does not rely on the result: it
runs the kernel in Triton's interpreter with every ``tl.load`` watched, and counts the elements
that came back NaN under a true mask (the operands the checks pass are finite, so each such
element was read from the padding). Data that holds NaN itself and is loaded as its int32 bits
(chapter 11's logits) is padded with one NaN's bits that it never holds, :data:`PAD_BITS`, and
the watch counts those read under a true mask too.

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

#: The bits of a NaN that a launcher puts past the edges of an int32 view of float data (the
#: data itself never holds this payload): a load that reads it under a true mask read the padding
#: (:attr:`LoadCount.pad_reads`).
PAD_BITS = 0x7FC0FFEE


@dataclass
class LoadCount:
    """Elements read by the watched ``tl.load`` calls: all of them, those NaN under a true mask,
    and the 32-bit integers equal to :data:`PAD_BITS` under a true mask."""

    elements: int = 0
    nan_reads: int = 0
    pad_reads: int = 0


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
        under = np.broadcast_to(np.asarray(mask.data, dtype=bool), values.shape)
        if values.dtype.kind == "f":
            count.nan_reads += int(np.count_nonzero(np.isnan(values) & under))
        elif values.dtype.kind in "iu" and values.dtype.itemsize == 4:
            count.pad_reads += int(np.count_nonzero((values.view(np.uint32) == PAD_BITS) & under))
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


def _fill_arms(call: ast.Call) -> tuple[ast.expr | None, ast.expr | None]:
    """The two value arms of ``tl.where(condition, x, y)``, by position or keyword."""
    x = call.args[1] if len(call.args) >= 2 else _keyword(call, "x")
    y = call.args[2] if len(call.args) >= 3 else _keyword(call, "y")
    return x, y


def _unfilled(node: ast.AST | None, names: dict[str, bool], helper: Any = None) -> bool:
    """Whether ``node`` carries an unfilled masked load's lanes: the load itself, or anything
    computed from one (a conversion ``.to(...)``, arithmetic, ``tl.trans``, a subscript, a call
    that takes it), or a name last assigned one (``names``: each name's state so far). A
    ``tl.where`` fills them unless both its arms carry them. ``helper(call, names)`` says it for
    a call of a ``@triton.jit`` function (None: not one)."""
    if node is None:
        return False
    if _unfilled_load(node):
        return True
    if isinstance(node, ast.Name):
        return names.get(node.id, False)
    if isinstance(node, ast.Call):
        if _is_tl_call(node, "load"):
            return False  # filled (other=), or unmasked
        if _is_tl_call(node, "where"):
            x, y = _fill_arms(node)
            return _unfilled(x, names, helper) and _unfilled(y, names, helper)
        if helper is not None:
            found = helper(node, names)
            if found is not None:
                return found
        parts = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(node.func, ast.Attribute):  # a method of the value: a.to(...), a.trans()
            parts.append(node.func.value)
        return any(_unfilled(p, names, helper) for p in parts)
    # arithmetic, a subscript, an attribute (a.T), a conditional expression: the lanes stay
    return any(_unfilled(child, names, helper) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))


def _assignments(tree: ast.AST) -> list[tuple[int, str, ast.expr]]:
    """Every assignment to a plain name, in source order: (line, name, value); a tuple assigned
    from a tuple of the same length (``a, b = x, y``) counts as one assignment per name, an
    annotated one (``a: tl.tensor = x``) as a plain one, ``a += x`` as ``a = a + x`` and
    ``(a := x)`` as ``a = x``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            target = node.target
            value = ast.BinOp(left=ast.Name(id=node.target.id, ctx=ast.Load()), op=node.op, right=node.value)
        elif isinstance(node, ast.NamedExpr):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            out.append((node.lineno, target.id, value))
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            out.extend((node.lineno, t.id, v) for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name))
        elif isinstance(target, ast.Tuple):  # a, b = f(x): each name from the whole value
            out.extend((node.lineno, t.id, value) for t in target.elts if isinstance(t, ast.Name))
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


def _dot_operands(call: ast.Call) -> list[ast.expr]:
    return [*call.args[:2], *(k.value for k in call.keywords if k.arg in ("input", "other"))]


def _source_tree(fn: Any) -> ast.FunctionDef:
    """The ``def`` of ``fn`` (a function, or a ``@triton.jit`` one), parsed; ValueError when its
    source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError) as e:
        raise ValueError(f"cannot read the source of {getattr(fn, '__name__', fn)!r} to check its tl.dot calls") from e
    if not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ValueError(f"the source of {getattr(fn, '__name__', fn)!r} is not a def")
    return tree.body[0]


def _jit_callee(call: ast.AST, glob: dict) -> Any:
    """The Python function of the ``@triton.jit`` function ``call`` calls by a global name, or None."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
        value = glob.get(call.func.id)
        if _is_jit_function(value):
            return value.fn
    return None


def _constant(value: Any) -> Any:
    return getattr(value, "value", value) if type(value).__name__ == "constexpr" else value


class _DotAudit:
    """:func:`dot_operand_problems`'s reading of a kernel and of the ``@triton.jit`` functions it
    calls, each with what its caller passes it (which arguments carry unfilled lanes, which are
    constants)."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.done: dict[tuple, bool] = {}
        self.dots: dict[int, bool] = {}

    def has_dot(self, fn: Any) -> bool:
        """Whether ``fn`` or a ``@triton.jit`` function it calls holds a ``tl.dot``."""
        if id(fn) not in self.dots:
            self.dots[id(fn)] = False  # a recursion reads as none
            try:
                tree = _source_tree(fn)
            except ValueError:
                return False
            glob = getattr(fn, "__globals__", {})
            self.dots[id(fn)] = any(
                _is_tl_call(n, "dot") or (_jit_callee(n, glob) is not None and self.has_dot(_jit_callee(n, glob)))
                for n in ast.walk(tree)
            )
        return self.dots[id(fn)]

    def contains_dot(self, node: ast.AST, glob: dict) -> bool:
        return any(
            _is_tl_call(n, "dot") or (_jit_callee(n, glob) is not None and self.has_dot(_jit_callee(n, glob)))
            for n in ast.walk(node)
        )

    def value_of(self, node: ast.AST | None, fn: Any, consts: dict[str, Any]) -> Any:
        """The value ``node`` stands for when it is a constant, ``tl.constexpr(constant)``, or a
        name that ``consts`` (local constants, constant arguments of the caller), the function's
        globals or its parameters' defaults give (a ``tl.constexpr`` unwrapped); None otherwise."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and len(node.args) == 1:
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            return self.value_of(node.args[0], fn, consts) if name == "constexpr" else None
        if not isinstance(node, ast.Name):
            return None
        if node.id in consts:
            return consts[node.id]
        value = getattr(fn, "__globals__", {}).get(node.id)
        if value is None:
            try:
                param = inspect.signature(fn).parameters.get(node.id)
            except (TypeError, ValueError):
                param = None
            if param is not None and param.default is not inspect.Parameter.empty:
                value = param.default
        return _constant(value)

    def function(self, fn: Any, unfilled: dict[str, bool], consts: dict[str, Any], top: bool) -> bool:
        """Read ``fn`` (its parameters in ``unfilled`` carry unfilled lanes, those in ``consts``
        are constants), adding what it finds to ``self.problems``; whether a value it returns
        carries unfilled lanes."""
        key = (id(fn), tuple(sorted(unfilled.items())), tuple(sorted((k, repr(v)) for k, v in consts.items())))
        if key in self.done:
            return self.done[key]
        self.done[key] = False  # a recursion reads as filled
        tree = _source_tree(fn)
        name = getattr(fn, "__name__", "the kernel")
        where = "" if top else f" of {name}"
        glob = getattr(fn, "__globals__", {})
        first = getattr(getattr(fn, "__code__", None), "co_firstlineno", 1) - 1
        params = [a.arg for a in (*tree.args.posonlyargs, *tree.args.args, *tree.args.kwonlyargs)]

        def helper(call: ast.Call, names: dict[str, bool]) -> bool | None:
            callee = _jit_callee(call, glob)
            if callee is None:
                return None
            callee_params = list(inspect.signature(callee).parameters)
            args = dict(zip(callee_params, call.args))
            args.update({k.arg: k.value for k in call.keywords if k.arg is not None})
            consts_in = {p: self.value_of(a, fn, consts_at(call.lineno)) for p, a in args.items()}
            return self.function(
                callee,
                {p: _unfilled(a, names, helper) for p, a in args.items()},
                {p: v for p, v in consts_in.items() if v is not None},
                top=False,
            )

        # every assignment in source order, each with whether its value carries unfilled lanes
        # and the constant it is (if one); a name's state at a line is that of its last
        # assignment above it, so a load whose lanes are then filled (a = tl.where(mask, a, 0.0))
        # is not reported
        history: list[tuple[int, str, bool, Any]] = []

        def names_at(line: int) -> dict[str, bool]:
            names = {p: unfilled.get(p, False) for p in params}
            names.update({n: bad for ln, n, bad, _ in history if ln < line})
            return names

        def consts_at(line: int) -> dict[str, Any]:
            out = {p: v for p, v in consts.items()}
            for ln, n, _, value in history:
                if ln < line:
                    out.pop(n, None)
                    if value is not None:
                        out[n] = value
            return out

        assigns = _assignments(tree)
        for ln, target, value in assigns:
            history.append(
                (ln, target, _unfilled(value, names_at(ln), helper), self.value_of(value, fn, consts_at(ln)))
            )
        returned = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Return) and node.value is not None:
                returned |= _unfilled(node.value, names_at(node.lineno), helper)
            if isinstance(node, ast.Call) and _jit_callee(node, glob) is not None:
                helper(node, names_at(node.lineno))  # its dots read with what this call passes
            if not _is_tl_call(node, "dot"):
                continue
            line = first + node.lineno
            # input_precision="ieee" (any case: Triton lowercases it), or the older
            # allow_tf32=False (Triton 3.7.1 maps it to "ieee"), by keyword or by position:
            # tl.dot(input, other, acc, input_precision, allow_tf32, ...)
            local = consts_at(node.lineno)
            precision = _keyword(node, "input_precision") or (node.args[3] if len(node.args) >= 4 else None)
            allow = _keyword(node, "allow_tf32") or (node.args[4] if len(node.args) >= 5 else None)
            value = self.value_of(precision, fn, local)
            ieee = isinstance(value, str) and value.lower() == "ieee"
            no_tf32 = self.value_of(allow, fn, local) is False
            if not (ieee or no_tf32):
                self.problems.append(
                    f'the tl.dot on line {line}{where} has no input_precision="ieee": on an NVIDIA GPU '
                    "its float32 operands are rounded to TF32 (10 mantissa bits)"
                )
            names = names_at(node.lineno)
            for op in _dot_operands(node):
                if not _unfilled(op, names, helper):
                    continue
                if _unfilled_load(op):
                    said = f"a tl.load, an operand of the tl.dot on line {line}{where}, is loaded under a mask"
                    said += f" without other= (line {first + op.lineno})"
                elif isinstance(op, ast.Name):
                    last = [ln for ln, n, _, _ in history if n == op.id and ln < node.lineno]
                    said = f"{op.id}, an operand of the tl.dot on line {line}{where}, is loaded under a mask"
                    said += f" without other= (line {first + last[-1]})" if last else " without other= (by its caller)"
                else:
                    said = (
                        f"{ast.unparse(op)}, an operand of the tl.dot on line {line}{where}, holds a load "
                        "under a mask without other="
                    )
                self.problems.append(f"{said}: on a GPU the masked-off lanes are undefined, and the dot sums them")
        # the accumulators: a name a tl.dot (or a jit function that holds one) adds into:
        # acc += tl.dot(a, b), acc = acc + tl.dot(a, b), acc = tl.dot(a, b, acc), acc = mma(acc, a, b)
        found: dict[str, int] = {}
        for ln, target, value in assigns:
            if not self.contains_dot(value, glob):
                continue
            operands = {
                id(n) for d in ast.walk(value) if _is_tl_call(d, "dot") for op in _dot_operands(d) for n in ast.walk(op)
            }
            if any(isinstance(n, ast.Name) and n.id == target and id(n) not in operands for n in ast.walk(value)):
                found[target] = min(ln, found.get(target, ln))
        for target, ln in found.items():
            before = [(b, value) for b, n, value in assigns if n == target and b < ln]
            if before and _float32_zeros(before[-1][1]):
                continue
            if not before and not top and target in params:
                continue  # a jit function's accumulator is its caller's
            said = f"line {first + before[-1][0]}" if before else "nowhere above it"
            self.problems.append(
                f"{target}, the accumulator of the tl.dot on line {first + ln}{where}, is not started as "
                f"tl.zeros(..., dtype=tl.float32) ({said}): the interpreter turns it into float32 at the "
                "first addition, while a GPU's compiler refuses a loop-carried value whose type changes"
            )
        self.done[key] = returned
        return returned


def dot_operand_problems(kernel: Any) -> list[str]:
    """What a GPU would compute differently from Triton's interpreter at the ``tl.dot`` calls of
    ``kernel`` (a ``@triton.jit`` function) and of the ``@triton.jit`` functions it calls, read
    from their source; [] when nothing.

    - a ``tl.dot`` without ``input_precision="ieee"`` (in any case): on an NVIDIA GPU float32
      operands are then rounded to TF32 (10 mantissa bits); the interpreter multiplies them in
      float32;
    - an operand of ``tl.dot`` that carries the lanes of a ``tl.load(..., mask=...)`` without
      ``other=`` (or with ``other=None``, the default): the load itself, a name last assigned
      above the dot from one, or anything computed from one (a conversion, arithmetic,
      ``tl.trans``, a ``@triton.jit`` function that returns it) that no ``tl.where`` filled: the
      masked-off lanes are undefined on a GPU (the interpreter gives zeros) and the dot sums them;
    - an accumulator of ``tl.dot`` (``acc += tl.dot(...)``, ``acc = acc + tl.dot(...)``,
      ``acc = tl.dot(a, b, acc)``, ``acc = helper(acc, ...)`` with a dot inside) whose last
      assignment before it is not ``tl.zeros(..., dtype=tl.float32)``: the interpreter promotes it
      to float32 at the first addition, a GPU's compiler refuses a loop-carried value whose type
      changes (or accumulates in the narrower type).

    Raises ValueError when a source cannot be read (a function defined from a string)."""
    fn = getattr(kernel, "fn", kernel)
    audit = _DotAudit()
    audit.function(fn, {}, {}, top=True)
    return list(dict.fromkeys(audit.problems))


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
