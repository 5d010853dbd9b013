"""nbhelpers.call_watch: the watch that keeps an exercise's answer from calling the course's
reference, however the call is reached; and its use in the check cell (run_check) and the grader's
kernel (in_kernel, through worker.kernel_source)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest

import nbhelpers.formats as formats
from nbhelpers import checks
from nbhelpers.call_watch import CallWatch, parse_names
from nbhelpers.checks import Exercise, exercises_of, get_exercise, run_check
from nbhelpers.formats import decode as renamed_decode


def _module(name: str, source: str) -> types.ModuleType:
    """A module called ``name`` made from ``source`` (a stand-in for one of the course's)."""
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


REF = _module("course.reference", "def answer(x):\n    return 2 * x\n\ndef tool(x):\n    return answer(x) - x\n")
TOOLS = _module("course.tools", "def wrapper(x, ref):\n    return ref.answer(x)\n")


def seen_by(fn, forbidden=("course.reference",), allowed=()) -> set[str]:
    watch = CallWatch(forbidden, allowed)
    with watch:
        fn()
    return watch.seen


def test_a_forbidden_call_is_seen_however_it_is_reached():
    assert seen_by(lambda: REF.answer(1)) == {"course.reference:answer"}
    alias = REF.answer
    assert seen_by(lambda: alias(1)) == {"course.reference:answer"}
    assert seen_by(lambda: functools.partial(REF.answer)(1)) == {"course.reference:answer"}
    assert seen_by(lambda: list(map(REF.answer, [1, 2]))) == {"course.reference:answer"}  # called from C
    assert seen_by(lambda: TOOLS.wrapper(1, REF)) == {"course.reference:answer"}  # through a module not listed
    assert seen_by(lambda: REF.tool(1)) == {"course.reference:tool"}  # where it entered, not each call inside


def _fresh_copy_of_formats() -> types.ModuleType:
    """nbhelpers/formats.py run again as a new module object of the same name (what a reload
    makes), left out of sys.modules: a reload of the real one would give the other modules'
    enums a second identity for the rest of the run."""
    spec = importlib.util.spec_from_file_location("nbhelpers.formats", formats.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_function_by_name_and_a_fresh_copy_of_its_module():
    copy = _fresh_copy_of_formats()
    assert copy.decode is not formats.decode
    watch = CallWatch(["nbhelpers.formats:decode"])
    with watch:
        renamed_decode(0x3C, "e4m3")  # imported under another name
    assert watch.seen == {"nbhelpers.formats:decode"}
    again = CallWatch(["nbhelpers.formats:decode"])
    with again:
        copy.decode(0x3C, copy.get_format("e4m3"))  # a fresh function object of the same def
        formats.get_format("bf16")  # not listed
    assert again.seen == {"nbhelpers.formats:decode"}


def test_a_copy_of_a_course_module_loaded_under_another_name_is_still_the_course(tmp_path, monkeypatch):
    # importlib from the module's own file, under another name (inside the package, so that its
    # relative imports work): its functions' globals name the copy, their code nbhelpers/formats.py
    spec = importlib.util.spec_from_file_location("nbhelpers.sneaky_formats", formats.__file__)
    sneaky = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, sneaky)  # as the copy's dataclasses need
    source = Path(spec.origin).read_text()
    exec(compile(source, spec.origin, "exec"), sneaky.__dict__)
    assert sneaky.__name__ == "nbhelpers.sneaky_formats" and sneaky.decode is not formats.decode
    for forbidden, expected in (
        ("nbhelpers.formats:decode", {"nbhelpers.formats:decode"}),
        ("nbhelpers.formats", {"nbhelpers.formats:decode"}),
        ("nbhelpers", {"nbhelpers.sneaky_formats:decode"}),  # forbidden by its name already
    ):
        watch = CallWatch([forbidden])
        with watch:
            sneaky.decode(0x3C, "e4m3")
        assert watch.seen == expected, forbidden
    # a module of the student's own, of any name, in a file outside the package: not the course's
    mine = tmp_path / "mine.py"
    mine.write_text("def decode(bits, fmt):\n    return bits\n")
    spec = importlib.util.spec_from_file_location("nbhelpers_like", mine)
    own = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(own)
    watch = CallWatch(["nbhelpers.formats"])
    with watch:
        own.decode(0x3C, "e4m3")
    assert watch.seen == set()


def test_an_allowed_function_may_call_what_is_forbidden_but_not_the_other_way():
    assert seen_by(lambda: REF.tool(1), allowed=["course.reference:tool"]) == set()
    assert seen_by(lambda: REF.answer(1), allowed=["course.reference:tool"]) == {"course.reference:answer"}
    assert seen_by(lambda: TOOLS.wrapper(1, REF), allowed=["course.tools"]) == set()  # a module allowed
    # once the allowed call returned, the watch looks again
    assert seen_by(lambda: (REF.tool(1), REF.answer(1)), allowed=["course.reference:tool"]) == {
        "course.reference:answer"
    }


def test_calls_that_hide_calls_count_as_forbidden():
    def hook_off():
        sys.setprofile(None)
        REF.answer(1)

    def trace():
        sys.settrace(None)

    def thread():
        t = threading.Thread(target=REF.answer, args=(1,))
        t.start()
        t.join()

    def process():
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    assert any("profile hook" in s for s in seen_by(hook_off))
    assert any("trace function" in s for s in seen_by(trace))
    assert any("thread" in s for s in seen_by(thread))
    assert any("process" in s for s in seen_by(process))


def test_a_process_triton_starts_is_machinery_and_the_students_is_not():
    """Triton compiling on a GPU runs ptxas and a C compiler through subprocess: not a hidden call."""
    source = "import subprocess, sys\ndef build():\n    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
    machinery = _module("triton.fake_build", source)
    student = _module("student_cell", source)
    assert seen_by(machinery.build) == set()
    assert any("process" in s for s in seen_by(student.build))


def test_an_allowed_tool_covers_its_own_module_only():
    """An allowed function's own module is its business; another forbidden module reached under it
    (the course's kernel handed to an allowed launcher) is still a forbidden call."""
    kernels = _module("course.kernels", "def kernel(x):\n    return 3 * x\n")
    tool = _module(
        "course.tools2", "def launch(fn, x):\n    return helper(fn, x)\n\ndef helper(fn, x):\n    return fn(x)\n"
    )
    watch = CallWatch(["course.kernels", "course.tools2"], allowed=["course.tools2:launch"])
    with watch:
        tool.launch(lambda x: x, 1)  # its own helper: fine
    assert watch.seen == set()
    with watch:
        tool.launch(lambda x: kernels.kernel(x), 1)  # the student's callback calls a forbidden kernel
    assert watch.seen == {"course.kernels:kernel"}


def test_the_previous_hook_comes_back_and_nothing_listed_means_no_hook():
    calls = []

    def outer(frame, event, arg):
        calls.append(event)

    sys.setprofile(outer)
    try:
        with CallWatch(["course.reference"]):
            assert sys.getprofile() is not outer
        assert sys.getprofile() is outer
        with CallWatch([]) as w:
            assert sys.getprofile() is outer and not w
    finally:
        sys.setprofile(None)


def _torch_adam_step(x):
    """Adam's first step on x through torch's fused C function, with no torch.optim in between."""
    import torch

    p, m, v = torch.zeros_like(x), torch.zeros_like(x), torch.zeros_like(x)
    step = torch.ones((), dtype=x.dtype)
    kw = dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    torch._fused_adam_([p], [x.clone()], [m], [v], [], [step], **kw)
    return -p


def test_torch_forbidden_whole_is_watched_in_its_c_functions_however_they_are_reached():
    """torch's optimizers live on C functions (torch._fused_adam_, torch._foreach_norm) that a profile
    hook sees only when Python calls them directly; with the whole of torch forbidden the watch also
    pushes a torch function mode, which torch's own dispatch asks about every function: reached
    through map or functools.partial, or as a tensor's method, it is still noted. It comes off the
    stack with the watch, and numpy alone notes nothing."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([3e-9, -2.0, 0.5], dtype=torch.float64)
    forbidden = ("course.reference", "torch")
    depth = torch._C._len_torch_function_stack()
    assert "torch:_fused_adam_" in seen_by(lambda: _torch_adam_step(x), forbidden)
    assert seen_by(lambda: list(map(torch._foreach_norm, [[x]])), forbidden) == {"torch:_foreach_norm"}
    assert seen_by(lambda: functools.partial(torch._foreach_norm)([x]), forbidden) == {"torch:_foreach_norm"}
    assert "torch:sum" in seen_by(lambda: float(x.sum()), forbidden)
    assert "torch:from_numpy" in seen_by(lambda: torch.from_numpy(np.ones(2)), forbidden)  # no mode: the hook
    assert seen_by(lambda: np.linalg.norm(np.array([3.0, 4.0])), forbidden) == set()
    assert torch._C._len_torch_function_stack() == depth
    # torch not forbidden (or only a part of it): no mode, and torch's C functions are the student's
    assert seen_by(lambda: list(map(torch._foreach_norm, [[x]]))) == set()
    assert seen_by(lambda: float(x.sum()), ("torch.optim",)) == set()
    # an allowed tool covers its own module only: torch run under it is still noted
    tool = _module("course.torch_tool", "def norm(t):\n    return float(t.norm())\n")
    assert "torch:norm" in seen_by(lambda: tool.norm(x), forbidden, allowed=["course.torch_tool"])


def test_taking_the_torch_mode_off_counts_as_hiding_and_a_mode_left_on_is_put_back():
    torch = pytest.importorskip("torch")
    from torch.overrides import TorchFunctionMode

    depth = torch._C._len_torch_function_stack()
    seen = seen_by(lambda: torch._C._pop_torch_function_stack(), ("torch",))
    assert any("torch function mode" in s for s in seen)
    assert torch._C._len_torch_function_stack() == depth

    class Left(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    left = Left()
    try:
        seen = seen_by(lambda: torch._C._push_on_torch_function_stack(left), ("torch",))
        assert not any("torch function mode" in s for s in seen)
        assert torch._C._len_torch_function_stack() == depth + 1  # the code's own mode, as it left it
        assert torch._C._get_function_stack_at(depth) is left
    finally:
        while torch._C._len_torch_function_stack() > depth:
            torch._C._pop_torch_function_stack()


@pytest.mark.parametrize("bad", ["nbhelpers.formats:", "nbhelpers..formats", ":decode", "nbhelpers formats", "a:b c"])
def test_names_that_name_nothing_are_refused_with_the_form_expected(bad):
    with pytest.raises(ValueError, match="module:qualname"):
        parse_names([bad])


def test_an_exercise_refuses_a_malformed_list():
    ok = dict(id="ex01.f", title="t", points=1, reference=lambda: 0, cases=lambda rng: [])
    with pytest.raises(TypeError, match="tuple of names"):
        Exercise(**ok, forbidden="nbhelpers.formats")
    with pytest.raises(ValueError, match="ex01.f: forbidden"):
        Exercise(**ok, forbidden=("nbhelpers.formats:",))
    assert Exercise(**ok, forbidden=["nbhelpers.formats"]).forbidden == ("nbhelpers.formats",)


@pytest.mark.parametrize("chapter", range(1, 12))
def test_every_exercise_forbids_its_reference(chapter):
    for ex in exercises_of(chapter):
        assert "nbhelpers.answer_keys" in ex.forbidden or "nbhelpers" in ex.forbidden, ex.id


def _no_watch(monkeypatch):
    class NoWatch:
        def __init__(self, *a):
            self.seen = set()

        def __enter__(self):
            return self

        def __exit__(self, *a):
            pass

        def audit(self, fn):
            pass

    monkeypatch.setattr(checks, "CallWatch", NoWatch)


def _cheats():
    """Answers that call the course's function the statement forbids: right answers, which only
    the watch fails."""
    from nbhelpers import moe, occupancy, scaling
    from nbhelpers.memory_access import sectors_touched
    from nbhelpers.recipes import Recipe

    def decode_bits(bits, exp_bits, man_bits, specials, largest):
        return get_exercise("ex01.decode_bits").reference(bits, exp_bits, man_bits, specials, largest)

    def flushed_per_tensor(M, K, block_rows, block_cols, element, k, lo, hi):
        # a search with the course's quantizer: the largest float32 in [floor, top] that comes back
        # exactly as a block of its own, for the amax and for a block flushed whole
        def exact_at_most(top, floor):
            v = np.float32(top)
            while v >= floor:
                q, s = scaling.quantize(np.array([[float(v)]]), Recipe(element, (None, None)))
                if float(q[0, 0]) * float(s[0, 0]) == float(v):
                    return float(v), float(s[0, 0])
                v = np.nextafter(v, np.float32(0))
            return None, None

        A, S = exact_at_most(hi, lo)
        tie = S * (0.5 if element == "int8" else 2.0**-10)
        full = exact_at_most(tie, lo)[0] if tie >= lo else None
        part = A * (2.0**-7 if element == "int8" else 2.0**-18)
        br, bc = block_rows or M, block_cols or K
        x = np.full((M, K), A)
        left = k
        for i, j in [(i, j) for i in range(0, M, br) for j in range(0, K, bc)][:-1]:
            view = x[i : i + br, j : j + bc]
            if left >= view.size and full is not None:
                view[...], left = full, left - view.size
            elif left > 0:
                m = min(left, view.size - 1)
                view[...] = np.where(np.arange(view.size) < m, tie, part).reshape(view.shape)
                left -= m
        return x.astype(np.float32)

    def fp8_choice(x, amax):
        # the counts by rounding, which the statement does not allow here (round_to rounds once,
        # so the answer is right)
        from nbhelpers.rounding import round_to

        counts = {}
        for fmt, top in (("e4m3fn", 448.0), ("e5m2", 57344.0)):
            r = round_to(x / max(float(np.float32(amax / top)), 2.0**-149), fmt)
            counts[fmt] = (int(np.sum((x != 0) & (r == 0))), int(np.sum(~np.isfinite(r))))
        lost = {fmt: sum(c) for fmt, c in counts.items()}
        n = int(np.count_nonzero(x))
        return ("e5m2" if 1000 * (lost["e4m3fn"] - lost["e5m2"]) > n else "e4m3fn"), counts

    def trace_sectors(addresses, access_bytes):
        c = sectors_touched(np.asarray(addresses), elem_bytes=access_bytes)
        return c.sectors, c.efficiency

    def register_budget(num_warps, shared, warps):
        fits = [r for r in range(1, 256) if occupancy.occupancy(r, num_warps, shared, occupancy.H100).warps >= warps]
        return max(fits, default=0)

    def offsets_and_schedule(expert_ids, num_experts, block_m):
        off = moe.expert_offsets(expert_ids, num_experts)
        s = moe.tile_schedule(off, block_m)
        return off, s.expert.astype(np.int64), s.row_start.astype(np.int64)

    def topk_key(bits, fmt):
        from nbhelpers.answer_keys import ch11

        return ch11.topk_key_ref(np.asarray(bits), fmt)[0]

    def misordered_clip_ratio(grads, scale, max_norm, optimizer):
        import torch  # measured with torch's C functions: no torch.optim, no clip_grad_norm_

        g = torch.tensor(np.asarray(grads, dtype=np.float64))

        def clipped(x):
            n = torch._foreach_norm([x], 2.0)[0]
            return x * torch.clamp(max_norm / (n + 1e-6), max=1.0)

        def update(x):
            return x if optimizer == "sgd" else _torch_adam_step(x)

        wrong, right = clipped(scale * g) / scale, clipped(g)
        return float(torch.linalg.vector_norm(update(wrong)) / torch.linalg.vector_norm(update(right)))

    return {
        "ex01.decode_bits": decode_bits,
        "ex05.misordered_clip_ratio": misordered_clip_ratio,
        "ex06.flushed_per_tensor": flushed_per_tensor,
        "ex06.fp8_choice": fp8_choice,
        "ex08.trace_sectors": trace_sectors,
        "ex09.register_budget": register_budget,
        "ex10.offsets_and_schedule": offsets_and_schedule,
        "ex11.topk_key": topk_key,
    }


@pytest.mark.parametrize("ex_id", sorted(_cheats()))
def test_an_answer_that_calls_the_course_fails_only_because_of_the_watch(ex_id, monkeypatch):
    cheat = _cheats()[ex_id]
    caught = run_check(ex_id, cheat)
    assert not caught.passed and caught.points == 0
    assert caught.error.startswith(checks.FORBIDDEN_CALL) and "does not allow" in caught.error, caught.error
    _no_watch(monkeypatch)  # the control: without the watch the same answer passes
    assert run_check(ex_id, cheat).passed


def test_the_kernel_gets_the_watch_in_place_of_its_import():
    from nbhelpers.grading.worker import WATCH_IMPORT, kernel_source

    source = kernel_source()
    assert WATCH_IMPORT not in source and "from .." not in source and "import nbhelpers" not in source
    ns: dict = {"__name__": "kernel"}
    exec(compile(source, "<in_kernel>", "exec"), ns)
    watch = ns["CallWatch"](["nbhelpers.formats:decode"])
    with watch:
        renamed_decode(0x3C, "e4m3")
    assert watch.seen == {"nbhelpers.formats:decode"}


def test_the_kernels_watch_sees_torch_where_it_is_forbidden():
    torch = pytest.importorskip("torch")
    from nbhelpers.grading.worker import kernel_source

    ns: dict = {"__name__": "kernel"}
    exec(compile(kernel_source(), "<in_kernel>", "exec"), ns)
    x = torch.tensor([1.0, -2.0], dtype=torch.float64)
    watch = ns["CallWatch"](["nbhelpers", "torch"])
    with watch:
        list(map(torch._foreach_norm, [[x]]))
    assert watch.seen == {"torch:_foreach_norm"}


def test_a_cache_the_reference_filled_is_emptied_before_the_answer_runs():
    # copies_errors is functools.cache'd and the reference fills it for these very cases: a hit
    # runs no Python frame, so an answer that calls it would pass unseen if the cache stayed warm
    def largest_promotion_interval(p, K, bound, acc_bits, group):
        from nbhelpers.answer_keys import ch07

        return max(N for N, e in ch07.copies_errors(p, K, acc_bits, group) if e <= bound)

    result = run_check("ex07.largest_promotion_interval", largest_promotion_interval, seed=0)
    assert not result.passed and result.points == 0
    assert "copies_errors" in str(result)


def _copied_formats(tmp_path=None) -> types.ModuleType:
    """nbhelpers/formats.py's text compiled under a file name of its own, in a module of another
    name: what a student gets by reading the course's file and running it."""
    text = _absolute(Path(formats.__file__).read_text())
    mod = types.ModuleType("student_copy")
    sys.modules["student_copy"] = mod  # its dataclasses look their module up by name
    filename = "<a copy>" if tmp_path is None else str(tmp_path / "copy.py")
    if tmp_path is not None:
        Path(filename).write_text(text)
    exec(compile(text, filename, "exec"), mod.__dict__)
    return mod


def test_a_copy_of_a_course_functions_code_is_that_function_wherever_it_was_compiled(tmp_path):
    copy = _copied_formats()  # compiled here, before the watch: only its calls are watched
    try:
        assert copy.decode.__code__.co_filename == "<a copy>"
        for forbidden, expected in (
            ("nbhelpers.formats:decode", {"nbhelpers.formats:decode"}),
            ("nbhelpers.formats", {"nbhelpers.formats:decode"}),
        ):
            watch = CallWatch([forbidden])
            with watch:
                copy.decode(0x3C, "e4m3")
            assert watch.seen == expected, forbidden
        # the same text in a file of the student's, imported: the same
        spec = importlib.util.spec_from_file_location("student_file_copy", _copied_file(tmp_path))
        own = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = own
        spec.loader.exec_module(own)
        watch = CallWatch(["nbhelpers.formats"])
        with watch:
            own.decode(0x3C, "e4m3")
        assert watch.seen == {"nbhelpers.formats:decode"}
    finally:
        sys.modules.pop("student_copy", None)
        sys.modules.pop("student_file_copy", None)


def _copied_file(tmp_path) -> Path:
    path = tmp_path / "formats_copy.py"
    path.write_text(_absolute(Path(formats.__file__).read_text()))
    return path


def _absolute(text: str) -> str:
    """A course module's text with its relative imports made absolute, as a copy elsewhere needs."""
    import re

    return re.sub(r"from \.(\w*)", lambda m: "from nbhelpers" + ("." + m.group(1) if m.group(1) else ""), text)


def test_compiling_or_running_code_from_a_string_counts_as_hiding():
    def run_text():
        exec("y = 1")

    def compile_text():
        compile("1 + 1", "<s>", "eval")

    def evaluate():
        return eval("1 + 1")

    for fn in (run_text, compile_text, evaluate):
        assert any("from a string" in s for s in seen_by(fn)), fn.__name__
    # a library's own use (a dataclass made at run time, a named tuple) is not the student's
    import collections
    import dataclasses

    def libraries():
        dataclasses.make_dataclass("P", [("x", int)])
        collections.namedtuple("Q", "a b")

    assert seen_by(libraries) == set()


def test_a_students_own_short_or_different_functions_are_not_mistaken_for_the_course():
    mod = _module(
        "student_own",
        "import math\n"
        "def decode(bits, fmt):\n"
        "    # the student's own decoder: not the course's code\n"
        "    sign = -1.0 if bits & 0x80 else 1.0\n"
        "    e, m = (bits >> 3) & 0xF, bits & 0x7\n"
        "    return sign * math.ldexp(1 + m / 8, e - 7) if e else sign * math.ldexp(m / 8, -6)\n",
    )
    watch = CallWatch(["nbhelpers.formats"])
    with watch:
        mod.decode(0x3C, "e4m3")
    assert watch.seen == set()


def test_the_audit_reads_a_function_and_the_notebooks_own_helpers_it_names():
    from nbhelpers.call_watch import audit_names

    ns: dict = {"__name__": "__main__"}
    exec(
        "import sys, math, ctypes as c\n"
        "import numpy as np\n"
        "def clean(x):\n"
        "    return np.float32(math.ldexp(x, 2)) + helper(x)\n"
        "def helper(x):\n"
        "    return sys.float_info.epsilon * x\n"
        "def off(x):\n"
        "    h = sys.getprofile()\n"
        "    c.pythonapi.PyEval_SetProfile(None, None)\n"
        "    return x\n"
        "def calls_off(x):\n"
        "    return off(x)\n"
        "def copies(x):\n"
        "    import importlib\n"
        "    return importlib.import_module('nbhelpers.rounding')\n"
        "def frames(x):\n"
        "    return sys._getframe(1).f_back.f_locals\n"
        "def code(f):\n"
        "    return f.__code__.replace(co_filename='<x>')\n"
        "def runs(text):\n"
        "    return eval(text)\n"
        "def regex(text):\n"
        "    import re\n"
        "    return re.compile(text)\n"
        "class Helper:\n"
        "    def go(self):\n"
        "        return open('x')\n"
        "def uses_class(x):\n"
        "    return Helper().go()\n"
        "def by_string(x):\n"
        "    return getattr(sys, 'getpro' + 'file')()\n"
        "def by_default(x, _ga=getattr):\n"
        "    return _ga(sys, 'getpro' + 'file')()\n"
        "def by_modules(x):\n"
        "    return sys.modules['buil' + 'tins']\n",
        ns,
    )
    assert audit_names(ns["clean"]) == []
    assert audit_names(ns["regex"]) == []  # re.compile is not the builtin
    assert "getprofile" in audit_names(ns["calls_off"]) and "pythonapi" in audit_names(ns["calls_off"])
    assert audit_names(ns["copies"]) == ["import_module", "importlib"]
    assert {"_getframe", "f_back", "f_locals"} <= set(audit_names(ns["frames"]))
    assert audit_names(ns["code"]) == ["__code__"]
    assert audit_names(ns["runs"]) == ["eval"]
    assert audit_names(ns["uses_class"]) == ["open"]
    assert audit_names(ns["by_string"]) == ["getattr"]  # a name built from strings: not readable
    assert audit_names(ns["by_default"]) == ["a default or closure value (the builtin getattr)"]
    assert audit_names(ns["by_modules"]) == ["modules"]
    assert audit_names(functools.partial(ns["runs"], "1")) == ["eval"]
    watch = CallWatch(["nbhelpers.rounding"])
    watch.audit(ns["calls_off"])
    assert any("reaches past the check's watch" in s for s in watch.seen)
    quiet = CallWatch([])
    quiet.audit(ns["calls_off"])  # nothing forbidden, nothing to guard
    assert quiet.seen == set()


def test_functions_handed_in_by_default_or_in_a_container_are_read_too():
    from nbhelpers.call_watch import audit_names

    ns: dict = {"__name__": "__main__"}
    exec(
        "def by_default(x, _off=lambda: __import__('ctypes')):\n"
        "    return _off()\n"
        "TOOLS = (lambda: __import__('sys').getprofile(), 2)\n"
        "def by_tuple(x):\n"
        "    get, _ = TOOLS\n"
        "    return get()\n",
        ns,
    )
    assert "__import__" in audit_names(ns["by_default"])
    assert {"__import__", "getprofile"} <= set(audit_names(ns["by_tuple"]))


# ---------------------------------------------------------------- the allow-list of an exercise's tools
#: decode_bits by the course's decode, the watch switched off or blinded by a route that a list of
#: names the audit refuses cannot read: a C function calling ``sys.setprofile`` (``map``), names
#: made from strings (``string.Formatter().get_field``), a thread started from C, the hook's own
#: closure emptied, ctypes reached through a pickle. Each passed the check before exercises listed
#: their tools.
_CHEAT = """
def _cheat(bits, exp_bits, man_bits, specials, largest):
    import nbhelpers.formats as F
    kind = {"ieee": "ieee", "fn": "fn"}.get(specials, "finite")
    f = F.FloatFormat.custom(exp_bits, man_bits, kind)
    if specials == "fnuz" and bits == 1 << (exp_bits + man_bits):
        return math.nan
    k = math.frexp(f.max / largest)[1] - 1
    return float(np.ldexp(F.decode(bits, f), -k))
"""
_GET = "    import sys, string\n    get = string.Formatter().get_field\n"
_HOOK_NOW = "    h = next(iter(get('0.getprofile', (sys,), {})[0], 0))\n"
_ARGS = "bits, exp_bits, man_bits, specials, largest"
ESCAPES = {
    "setprofile_called_from_c": (
        f"def decode_bits({_ARGS}):\n{_GET}{_HOOK_NOW}"
        "    sp = get('0.setprofile', (sys,), {})[0]\n"
        "    list(map(sp, [None]))\n"
        "    try:\n"
        f"        return _cheat({_ARGS})\n"
        "    finally:\n"
        "        list(map(sp, [h]))\n"
    ),
    "thread_started_from_c": (
        f"def decode_bits({_ARGS}):\n"
        "    import _thread, time\n"
        "    out = []\n"
        "    def work():\n"
        f"        out.append(_cheat({_ARGS}))\n"
        "    list(map(_thread.start_new_thread, [work], [()]))\n"
        "    while not out:\n"
        "        time.sleep(0.0005)\n"
        "    return out[0]\n"
    ),
    "hook_closure_emptied": (
        f"def decode_bits({_ARGS}):\n{_GET}{_HOOK_NOW}"
        f"    v = _cheat({_ARGS})\n"
        "    for c in get('0.__closure__', (h,), {})[0]:\n"
        "        x = get('0.cell_contents', (c,), {})[0]\n"
        "        if type(x) is set:\n"
        "            x.clear()\n"
        "    return v\n"
    ),
    "ctypes_through_a_pickle": (
        f"def decode_bits({_ARGS}):\n{_GET}{_HOOK_NOW}"
        "    import _pickle\n"
        "    api = _pickle.loads(b'cctypes\\npythonapi\\n.')\n"
        "    get('0.PyEval_SetProfile', (api,), {})[0](None, None)\n"
        "    try:\n"
        f"        return _cheat({_ARGS})\n"
        "    finally:\n"
        "        list(map(get('0.setprofile', (sys,), {})[0], [h]))\n"
    ),
}


def _notebook(source: str) -> dict:
    ns: dict = {"__name__": "__main__"}
    exec(compile("import math\nimport numpy as np\n" + source, "/tmp/ipykernel_0/cell.py", "exec"), ns)
    return ns


@pytest.mark.parametrize("route", sorted(ESCAPES))
def test_an_answer_that_escapes_the_watch_by_a_route_no_list_of_names_reads_scores_nothing(route):
    ns = _notebook(_CHEAT + ESCAPES[route])
    res = run_check("ex01.decode_bits", ns["decode_bits"], seed=0)
    assert res.points == 0 and res.error.startswith(checks.FORBIDDEN_CALL), res.error
    assert "tools do not include" in res.error
    # what it names past the tools is listed, the route first
    assert "import sys" in res.error or "import _thread" in res.error


HONEST = """
import math, struct, functools, itertools
from fractions import Fraction
from decimal import Decimal
from collections import namedtuple, defaultdict
from dataclasses import dataclass
import ml_dtypes
TABLE = {"ieee": 1, "fn": 2}
Pair = namedtuple("Pair", "lo hi")
RNG = np.random.default_rng(0)

@dataclass
class Fmt:
    e: int
    m: int
    def bias(self):
        return 2 ** (self.e - 1) - 1

class Grid:
    def __init__(self, e, m):
        self.e, self.m = e, m
        self._cache = {}
    @property
    def spacing(self):
        return 2.0 ** -self.m

@functools.lru_cache(maxsize=None)
def pow2(k):
    return math.ldexp(1.0, k)

def helper(x, scale=2.0, *, f=abs):
    return f(x) * scale

def honest(bits, exp_bits, man_bits, specials, largest):
    from math import frexp
    g = Grid(exp_bits, man_bits)
    b = Fmt(exp_bits, man_bits).bias() + TABLE.get(specials, 0)
    y = struct.unpack("<d", struct.pack("<d", float(largest)))[0]
    fr = Fraction(largest).limit_denominator(10) + Decimal(1).sqrt().to_integral_value()
    w = np.asarray([bits], dtype=np.uint32).view(np.float32)
    v = ml_dtypes.bfloat16(1.5).astype(np.float32) + ml_dtypes.finfo(ml_dtypes.bfloat16).eps
    s = sorted([3, 1, 2], key=lambda t: -t) + list(itertools.product(range(2), repeat=2))
    m = max(map(helper, [1, 2])) + np.finfo(np.float32).eps + frexp(y)[1]
    dd = defaultdict(list)
    dd[1].append(RNG.random(3).sum() + np.linalg.norm(np.ones(2)) + Pair(1, 2).lo + pow2(3))
    try:
        z = 1 / 0
    except ZeroDivisionError as e:
        z = str(e)
    return math.ldexp(g.spacing, b) + int.bit_length(bits) + float.hex(1.0).count("p")

def scaled(x, k=3, *, dtype=float, conv=int, pick=max, how=round, table=(1, 2.5, "s")):
    return dtype(how(conv(x) * k)) + pick(table[:2])

def depth(n):
    return 0 if n <= 1 else 1 + depth(n // 2)

def honest_too(bits, exp_bits, man_bits, specials, largest):
    v = np.asarray(bits, dtype=np.int64)
    sign = np.where((v >> (exp_bits + man_bits)) & 1, -1.0, 1.0)
    m, e = math.frexp(float(largest))
    raw = int.from_bytes(int(bits).to_bytes(4, "little"), "little")
    text = bin(raw) + format(raw, "08b") + f"{largest:.3e}" + "{:x}".format(raw)
    odd = [k * k for k in range(man_bits) if k % 2] + list(map(lambda t: t + 1, {1, 2}))
    return math.ldexp(m, e) * sign + scaled(2) + depth(bits) + len(text) + sum(odd)
"""


def test_the_tools_audit_passes_honest_code_and_names_what_is_outside():
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    ns = _notebook(
        HONEST + "import ctypes as _c\nimport functools as _f\nimport sys as _s\n"
        "API = np.ctypeslib.ctypes.pythonapi\n"
        "OFF = _f.partial(_s.setprofile, None)\n"
        "CACHED = _f.lru_cache(maxsize=None)(_s.getprofile)\n"
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self.lib = self.read_array = 0\n"
        "def by_handle(x):\n"
        "    return API['PyEval_Set' + 'Profile'](None, None)\n"
        "def by_partial(x):\n"
        "    return OFF()\n"
        "def by_cache(x):\n"
        "    return CACHED()\n"
        "def by_own_names(x):\n"
        "    Mine()\n"
        "    return np.lib.format.read_array\n"
        "def by_dunders(x):\n"
        "    try:\n"
        "        1 / 0\n"
        "    except ZeroDivisionError as e:\n"
        "        return e.__traceback__, type(x).__subclasses__(), x.__init__.__globals__\n"
        "def by_generator(x):\n"
        "    return (i for i in x).gi_frame\n"
        "def by_default(x, g=_s._getframe):\n"
        "    return g()\n"
        "class Box:\n"
        "    def __init__(self):\n"
        "        self.store = {}\n"
        "    def __setattr__(self, name, value):\n"
        "        self.__dict__.setdefault('store', {})[name] = value\n"
        "def by_copying(x):\n"
        "    return functools.update_wrapper(Box(), np.linspace, assigned=('__glo' + 'bals__',), updated=())\n"
        "class Raw:\n"
        "    __array_interface__ = {'data': (8, False), 'shape': (1,), 'typestr': '<u8', 'version': 3}\n"
        "def by_address(x):\n"
        "    return np.asarray(Raw())\n"
        "def by_address_made(x):\n"
        "    return np.asarray(type('R', (), {'__array_interface__': x})())\n"
        "class Holder:\n"
        "    HANDLE = API\n"
        "def by_class_value(x):\n"
        "    return Holder.HANDLE['PyEval_Set' + 'Profile'](None, None)\n"
        "def by_pattern(x):\n"
        "    match np.linspace:\n"
        "        case object(__globals__=g):\n"
        "            return g\n"
    )
    assert tools_audit(ns["honest"], COMPUTING_TOOLS) == []
    # defaults that are builtins, data and types, recursion, lambdas, bytes and text formatting
    assert tools_audit(ns["honest_too"], COMPUTING_TOOLS) == []
    assert tools_audit(ns["by_handle"], COMPUTING_TOOLS) == ["API (ctypes.PyDLL)"]
    assert tools_audit(ns["by_partial"], COMPUTING_TOOLS) == ["OFF (functools.partial, holding sys.setprofile)"]
    assert tools_audit(ns["by_cache"], COMPUTING_TOOLS) == ["CACHED (sys.getprofile)"]
    assert tools_audit(ns["by_own_names"], COMPUTING_TOOLS) == [".lib", ".read_array"]
    assert tools_audit(ns["by_dunders"], COMPUTING_TOOLS) == [".__globals__", ".__subclasses__", ".__traceback__"]
    assert tools_audit(ns["by_generator"], COMPUTING_TOOLS) == [".gi_frame"]
    assert tools_audit(ns["by_default"], COMPUTING_TOOLS) == ["a default or closure value (sys._getframe)"]
    assert tools_audit(ns["by_copying"], COMPUTING_TOOLS) == [".__dict__", ".update_wrapper"]
    assert tools_audit(ns["by_address"], COMPUTING_TOOLS) == ["defines __array_interface__"]
    assert tools_audit(ns["by_address_made"], COMPUTING_TOOLS) == ["defines __array_interface__"]
    assert tools_audit(ns["by_class_value"], COMPUTING_TOOLS) == ["Holder.HANDLE (ctypes.PyDLL)"]
    assert tools_audit(ns["by_pattern"], COMPUTING_TOOLS) == ["a match statement's class pattern"]
    assert tools_audit(ns["honest"], ("math",)) != []  # numpy is not a tool there


def test_what_the_tools_attribute_names_reach_is_no_way_past_the_watch():
    """From every tool module of ch01, ch04 and ch07 and what it exports, three attribute names deep by names the audit
    lets pass: no module that reaches past the watch, no function of one."""
    import types as pytypes

    from nbhelpers.call_watch import _TOOL_BUILTINS, _tool_table
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    past = {"sys", "os", "gc", "ctypes", "_ctypes", "_thread", "pickle", "_pickle", "marshal", "importlib"}
    past |= {"subprocess", "inspect", "builtins", "posix", "runpy", "code", "timeit", "multiprocessing"}
    past |= {"string", "operator", "_operator", "types", "io", "copyreg", "signal", "concurrent", "pdb"}
    for tools in (set(COMPUTING_TOOLS) | set(get_exercise("ex07.mx_exponent_range").tools),):
        vocabulary, exported, modules = _tool_table(tuple(sorted(tools)))
        frontier = [sys.modules[m] for m in modules] + list(exported.values())
        seen = {id(o) for o in frontier}
        bad = []
        for _ in range(3):
            nxt = []
            for obj in frontier:
                try:
                    names = [n for n in dir(obj) if n in vocabulary]
                except Exception:
                    continue
                for n in names:
                    try:
                        value = getattr(obj, n)
                    except Exception:
                        continue
                    if id(value) in seen:
                        continue
                    seen.add(id(value))
                    if isinstance(value, (type, pytypes.ModuleType)):  # what holds further names
                        nxt.append(value)
                    if isinstance(value, pytypes.ModuleType):
                        root = value.__name__.split(".")[0]
                    elif (isinstance(value, pytypes.FunctionType) and "." not in value.__qualname__) or (
                        isinstance(value, pytypes.BuiltinFunctionType)
                        and isinstance(value.__self__, pytypes.ModuleType)
                    ):  # a module's function (an object's own methods act on that object)
                        root = str(getattr(value, "__module__", None) or "").split(".")[0]
                        if root == "builtins" and getattr(value, "__name__", "") in _TOOL_BUILTINS:
                            continue
                    else:
                        continue
                    if root in past:
                        bad.append(f"{type(obj).__name__}.{n}: {value!r}"[:120])
            frontier = nxt
        assert bad == []


def test_a_function_of_another_notebook_namespace_is_read_not_refused():
    """A function whose globals are another namespace's (a solution run apart, a helper handed in
    by a closure or a default) is notebook code too: read with its own globals, so an honest one
    passes and one that names what the tools do not include is refused as any other."""
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    apart: dict = {}  # globals with no __name__, as a notebook run apart leaves them
    exec(
        compile(
            "import math\nimport sys\ndef honest(x):\n    return math.floor(x)\n"
            "def hides(x):\n    sys.setprofile(None)\n    return x\n",
            "/tmp/ipykernel_1/apart.py",
            "exec",
        ),
        apart,
    )

    def by_closure(f):
        def g(x):
            return f(x) + 1

        return g

    def by_default(x, f=apart["hides"]):
        return f(x)

    assert tools_audit(by_closure(apart["honest"]), COMPUTING_TOOLS) == []
    assert tools_audit(by_closure(apart["hides"]), COMPUTING_TOOLS) == ["sys (the module sys)", ".setprofile"]
    assert tools_audit(by_default, COMPUTING_TOOLS) == ["sys (the module sys)", ".setprofile"]


#: numpy reads ``__array_interface__`` from an object by name: an object that answers a name made
#: at run time gives numpy an array over any address (the watch's memory included).
ADDRESS_BY_NAME = """
import functools, dataclasses
NAME = "__array_" + "inter" + "face__"

class Any:
    def __init__(self, d):
        self.d = d
    def __getattr__(self, name):
        if name.startswith("__array_i"):
            return self.d
        raise AttributeError(name)

def by_getattr(addr):
    return np.asarray(Any({"data": (addr, False), "shape": (1,), "typestr": "<u8", "version": 3}))

def by_setstate(addr):
    p = functools.partial(len)
    d = {"data": (addr, False), "shape": (1,), "typestr": "<u8", "version": 3}
    p.__setstate__((len, (), {}, {NAME: d}))
    return np.asarray(p)

def by_made_class(addr):
    d = {"data": (addr, False), "shape": (1,), "typestr": "<u8", "version": 3}
    return np.asarray(dataclasses.make_dataclass("R", [], namespace={NAME: d})())
"""


@pytest.mark.parametrize(
    ("route", "named"),
    [
        ("by_getattr", "defines __getattr__"),
        ("by_setstate", ".__setstate__"),
        ("by_made_class", ".make_dataclass"),
    ],
)
def test_an_array_interface_made_at_run_time_is_refused(route, named):
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    ns = _notebook(ADDRESS_BY_NAME)
    here = np.arange(2, dtype=np.uint64)
    assert ns[route](here.ctypes.data)[0] == 0  # the route works: numpy reads the address given
    assert named in tools_audit(ns[route], COMPUTING_TOOLS)


def test_a_library_function_made_a_method_in_another_cell_is_judged_as_a_value():
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    ns = _notebook(
        "import sys\nclass H:\n    sp = staticmethod(sys.setprofile)\n    fl = staticmethod(math.floor)\n"
        "def hides(x):\n    H.sp(None)\n    return x\n"
    )
    assert tools_audit(ns["hides"], COMPUTING_TOOLS) == ["H.sp (sys.setprofile)"]


def test_a_format_strings_field_path_is_read_as_attribute_access():
    """str.format reads a field path's attributes by name (``"{0.__traceback__.tb_frame}"``):
    the audit reads a function's strings for the names it refuses, and the watch reads the
    template each str.format call gets (a path made at run time from pieces no string holds
    whole); plain fields, format specs, f-strings and prose stay allowed."""
    from nbhelpers.call_watch import audit_names, string_names

    for text in ("{}", "{0}-{1}", "{:.3f}", "{x:>8.2e} of {0.real}", "per-token-head", "e.g. np.float32", "_"):
        assert string_names(text) == [], text
    assert string_names("0.__traceback__.tb_frame") == ["__traceback__", "tb_frame"]
    assert string_names("[sealed]._held[1][") == ["_held"]
    assert string_names(".f_back") == string_names("f_back") == ["f_back"]
    assert string_names("{0.__trace") == ["__trace"] and string_names("back__}") == ["back__"]

    ns: dict = {"__name__": "__main__"}
    exec(
        "def honest(a, b, x):\n"
        "    return '{:.3f}'.format(x) + f'{x:.2e} {a!r}' + '{0}-{1}'.format(a, b) + '{}'.format(x)\n"
        "def by_path(err):\n"
        "    return ('{0.__traceback__.tb_frame' + '.f_back}').format(err)\n"
        "def by_map(err):\n"
        "    return '{e}'.format_map({'e': err})\n"
        "def by_formatter(err):\n"
        "    import string\n"
        "    return string.Formatter().vformat('{0}', (err,), {})\n"
        "def made_at_run_time(x):\n"
        "    u = chr(95) * 2\n"
        "    err = ValueError()\n"
        "    return ('{0.' + u + 'class' + u + '}').format(err) and x\n"
        "def mapped(err):\n"
        "    u = chr(95) * 2\n"
        "    return list(map(('{0.' + u + 'class' + u + '}').format, [err]))\n"
        "def mapped_unbound(err):\n"
        "    return list(map(str.format, ['{0}'], [err]))\n"
        "def unbound(x):\n"
        "    u = chr(95) * 2\n"
        "    return str.format('{0.' + u + 'class' + u + '}', x) and str.format('{0}', x) and x\n",
        ns,
    )
    assert audit_names(ns["honest"]) == []
    exec(
        "def documented(x):\n"
        '    """Compares with the object\'s __eq__, as x[_held] in a tb_frame would not."""\n'
        "    return '{:.3f}'.format(x)\n"
        "def docstring_used(err):\n"
        "    '{0.__traceback__.tb_frame}'\n"
        "    return '{0.__traceback__.tb_frame}'.format(err)\n",
        ns,
    )
    assert audit_names(ns["documented"]) == []  # a docstring is prose, never loaded by the code
    assert "a string naming tb_frame" in audit_names(ns["docstring_used"])  # the same text, used
    assert audit_names(ns["by_path"]) == [
        "a string naming __traceback__",
        "a string naming f_back",
        "a string naming tb_frame",
    ]
    assert "format_map" in audit_names(ns["by_map"])
    assert {"Formatter", "vformat"} <= set(audit_names(ns["by_formatter"]))
    assert audit_names(ns["made_at_run_time"]) == audit_names(ns["unbound"]) == []  # nothing to read
    # map calls what it is given from C, unseen by the watch: format may only be called
    assert audit_names(ns["mapped"]) == audit_names(ns["mapped_unbound"]) == ["format taken as a value, not called"]
    for name, seen in (("honest", None), ("made_at_run_time", "__class__"), ("unbound", "__class__")):
        watch = CallWatch(["nbhelpers.rounding"])
        with watch:
            ns[name](1, 2, 0.5) if name == "honest" else ns[name](1.0)
        if seen is None:
            assert watch.seen == set(), name
        else:
            assert any(seen in s for s in watch.seen), (name, watch.seen)


def seen_audited(audited, call, *args) -> set[str]:
    """What a watch that audited ``audited`` first (which tells it the notebook's folder, as the
    check and the grader do) notes while ``call(*args)`` runs."""
    watch = CallWatch(["course.reference"])
    watch.audit(audited)
    with watch:
        call(*args)
    return watch.seen


def _cell_functions(folder: Path, source: str) -> dict:
    """Functions compiled as a notebook's cell is: from a file name in the kernel's cell folder
    that holds no file on disk."""
    ns: dict = {"__name__": "__main__"}
    exec(compile(source, str(folder / "811189970.py"), "exec"), ns)
    return ns


def test_code_from_a_file_the_notebook_does_not_hold_or_text_a_library_runs_is_refused(tmp_path):
    """A copy of the course's code written to a file and run (runpy, or imported from a folder put
    on sys.path) is code the grader's notebook does not hold, however it was edited: the watch
    refuses code from an absolute path outside the audited function's folder, the installed
    libraries and the course; and exec, eval or compile called by a library that runs text it is
    handed (runpy, timeit) counts as the student's own. A logging style formatting a field path
    that reads a traceback's frames counts as the student's str.format. A notebook's other
    cells, dataclasses and named tuples made at run time, a library's own imports and logging
    with plain fields stay allowed."""
    cells = tmp_path / "ipykernel_1"
    elsewhere = tmp_path / "written"
    elsewhere.mkdir()
    (elsewhere / "copied_reference.py").write_text("def answer(x):\n    return 2 * x\nVALUE = answer(21)\n")
    ns = _cell_functions(
        cells,
        "import collections, dataclasses, fractions, logging, runpy, sys, timeit\n"
        "def honest(x):\n"
        "    P = dataclasses.make_dataclass('P', [('x', int)])\n"
        "    Q = collections.namedtuple('Q', 'a b')\n"
        "    r = logging.makeLogRecord({'msg': 'm', 'n': 3})\n"
        "    u = chr(95) * 2  # a dunder in the text, none in a field: a message\n"
        "    s = logging.StrFormatStyle('{msg} {n:>4} uses ' + u + 'array' + u).format(r)\n"
        "    return P(x).x + Q(1, 2).a + fractions.Fraction(1, 3).denominator + len(s)\n"
        "def by_runpy(folder):\n"
        "    return runpy.run_path(folder + '/copied_reference.py')['VALUE']\n"
        "def by_import(folder):\n"
        "    sys.path.insert(0, folder)\n"
        "    try:\n"
        "        import copied_reference\n"
        "    finally:\n"
        "        sys.path.remove(folder)\n"
        "    return copied_reference.answer(1)\n"
        "def by_timeit():\n"
        "    return timeit.Timer('pass', setup='def h():\\n    return 1\\nh()').timeit(1)\n"
        "def by_logging(depth):\n"
        "    try:\n"
        "        raise ValueError('x')\n"
        "    except ValueError as e:\n"
        "        err = e\n"
        "    u = chr(95) * 2\n"
        "    path = '{e.' + u + 'traceback' + u + '.tb' + chr(95) + 'frame}'\n"
        "    return logging.StrFormatStyle(path).format(logging.makeLogRecord({'e': err}))\n",
    )

    def seen_after(call, *args):
        return seen_audited(ns["honest"], call, *args)

    assert seen_after(ns["honest"], 3) == set()
    other_cell = _cell_functions(cells, "def helper(x):\n    return x + 1\n")
    assert seen_after(other_cell["helper"], 1) == set()

    def says(seen: set, words: str) -> bool:
        return any(words in s for s in seen)

    try:
        assert says(seen_after(ns["by_runpy"], str(elsewhere)), "from a string")  # runpy compiles the text
        assert says(seen_after(ns["by_import"], str(elsewhere)), "neither the notebook's")
    finally:
        sys.modules.pop("copied_reference", None)
    assert says(seen_after(ns["by_timeit"]), "from a string")
    assert says(seen_after(ns["by_logging"], 1), "field path reads")
    # with no function audited the watch cannot tell the notebook's folder: files are not judged
    watch = CallWatch(["course.reference"])
    try:
        with watch:
            ns["by_import"](str(elsewhere))
    finally:
        sys.modules.pop("copied_reference", None)
    assert watch.seen == set()


def test_text_run_from_c_or_by_a_library_and_files_under_the_graders_cell_names_are_refused(tmp_path):
    """exec reached as an attribute of the builtins module and called from C (``map``) or through
    ``functools.singledispatch`` sends the profile hook no call of exec from the student's frame:
    CPython's ``exec`` and ``compile`` audit events, which fire however it is reached, note it
    unless the nearest Python frame is a library making its own code (dataclasses, an import) or
    timeit's template around a callable. The grader compiles the notebook as "<notebook cell N>",
    a name of no folder: every file outside the libraries and the course is then foreign. A
    mapping view's repr (a library's own template naming ``__class__``) is not a field path
    handed to a library."""
    folder = tmp_path / "written"
    folder.mkdir()
    (folder / "written_copy.py").write_text("def answer(x):\n    return 2 * x\n")
    ns: dict = {"__name__": "__main__"}
    exec(
        compile(
            "import collections, functools, sys, timeit\n"
            "import numpy as np\n"
            "def honest(x):\n"
            "    t = timeit.timeit(lambda: np.ones(3).sum(), number=2)\n"
            "    s = repr(collections.UserDict({'a': 1}).keys())\n"
            "    return x + (t >= 0) + len(s)\n"
            "def mapped(text):\n"
            "    run = print.__self__.exec\n"
            "    ns = {}\n"
            "    list(map(run, [text], [ns]))\n"
            "    return ns['answer'](1)\n"
            "def dispatched(text):\n"
            "    ns = {}\n"
            "    functools.singledispatch(print.__self__.exec)(text, ns)\n"
            "    return ns['answer'](1)\n"
            "def imported(folder):\n"
            "    sys.path.insert(0, folder)\n"
            "    try:\n"
            "        import written_copy\n"
            "    finally:\n"
            "        sys.path.remove(folder)\n"
            "    return written_copy.answer(1)\n",
            "<notebook cell 3>",
            "exec",
        ),
        ns,
    )

    def seen_after(call, *args):
        return seen_audited(ns["honest"], call, *args)

    text = "def answer(x):\n    return 2 * x\n"
    assert seen_after(ns["honest"], 1) == set()
    for name in ("mapped", "dispatched"):
        assert any("from a string" in s for s in seen_after(ns[name], text)), name
    try:
        assert any("neither the notebook's" in s for s in seen_after(ns["imported"], str(folder)))
    finally:
        sys.modules.pop("written_copy", None)
    # the deny-list audit refuses the route's names: the builtins module through __self__
    from nbhelpers.call_watch import audit_names

    assert "__self__" in audit_names(ns["mapped"])


def test_a_library_that_runs_text_it_is_handed_is_no_code_generator_and_annotations_are_not_text():
    """numpy's testing.runstring runs the text it is handed: numpy is no code generator, and a
    notebook that names its globals after one (``__name__ = "numpy"``) is judged by its code's
    file, not by that name. An annotation that typing evaluates (singledispatch's register under
    ``from __future__ import annotations``) calls nothing and is not the student's text."""
    import numpy.testing

    ns: dict = {"__name__": "__main__", "np": np}
    exec(
        compile(
            "from __future__ import annotations\n"
            "import functools\n"
            "def honest(x):\n"
            "    @functools.singledispatch\n"
            "    def size(v):\n"
            "        return 0\n"
            "    @size.register\n"
            "    def _(v: int):\n"
            "        return v\n"
            "    return size(x)\n"
            "def by_runstring(text):\n"
            "    out = {}\n"
            "    np.testing.runstring(text, out)\n"
            "    return out['answer'](1)\n",
            "<notebook cell 1>",
            "exec",
        ),
        ns,
    )
    posing: dict = {"__name__": "numpy"}  # a namespace named after a generator
    exec(compile("def posing(text):\n    exec(text, {})\n", "<notebook cell 2>", "exec"), posing)

    def seen_after(call, *args):
        return seen_audited(ns["honest"], call, *args)

    assert seen_after(ns["honest"], 3) == set()
    text = "def answer(x):\n    return 2 * x\n"
    assert any("from a string" in s for s in seen_after(ns["by_runstring"], text))
    assert any("from a string" in s for s in seen_after(posing["posing"], text))
    assert numpy.testing.runstring  # the route exists in this numpy
    # the deny-list audit refuses the names of the routes from a module's text to running code
    from nbhelpers.call_watch import audit_names

    named: dict = {"__name__": "__main__"}
    exec(
        "import dataclasses, linecache, pkgutil\n"
        "def by_loader(n):\n    return pkgutil.get_data('nbhelpers', n)\n"
        "def by_cache(p):\n    return linecache.getlines(p)\n"
        "def by_builder(lines):\n    return dataclasses._create_fn('f', (), lines)\n",
        named,
    )
    for name in ("by_loader", "by_cache", "by_builder"):
        assert audit_names(named[name]), name


def test_an_fp8_value_held_where_the_tools_leave_ml_dtypes_out_hands_its_type_over():
    """numpy arrays, scalars and dtypes are data when their element type is a tool's: an
    ml_dtypes scalar, fp8 array or fp8 dtype in a global gives its type to ``type(x)(v)`` or
    ``a.dtype.type(v)`` where ml_dtypes is not among the tools (ex06.fp8_choice); numpy's own
    values stay data."""
    import ml_dtypes

    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    tools = tuple(t for t in COMPUTING_TOOLS if t != "ml_dtypes")
    ns: dict = {
        "__name__": "__main__",
        "np": np,
        "ml_dtypes": ml_dtypes,
        "SCALAR": ml_dtypes.float8_e4m3fn(1.0),
        "ARRAY": np.zeros(2, dtype=ml_dtypes.float8_e5m2),
        "DTYPE": np.dtype(ml_dtypes.float8_e4m3fn),
        "OBJECTS": np.array([ml_dtypes.float8_e4m3fn(1.0)], dtype=object),
        "PAIR": np.zeros(1, dtype=[("a", ml_dtypes.float8_e4m3fn), ("b", np.float64)]),
        "SUB": np.dtype((ml_dtypes.float8_e4m3fn, (2,))),
        "MANY": np.array([0.0] * 300 + [ml_dtypes.float8_e4m3fn(1.0)], dtype=object),
        "UFUNC": np.frompyfunc(ml_dtypes.float8_e4m3fn, 1, 1),
        "VEC": np.vectorize(ml_dtypes.float8_e4m3fn),
        "DEEP": ((((ml_dtypes.float8_e4m3fn,),),),),
        "LONG": [0] * 300 + [ml_dtypes.float8_e4m3fn],
        "KEYS": {ml_dtypes.float8_e4m3fn: 0},
        "PLAIN": (np.float32(2.0), np.zeros(3), np.dtype("float64"), np.add, np.vectorize(abs)),
    }
    exec(
        "def by_scalar(v):\n    return float(type(SCALAR)(v))\n"
        "def by_array(v):\n    return float(ARRAY.dtype.type(v))\n"
        "def by_dtype(v):\n    return float(DTYPE.type(v))\n"
        "def by_objects(v):\n    return float(type(OBJECTS[0])(v))\n"
        "def by_fields(v):\n    return float(PAIR.dtype.fields['a'][0].type(v))\n"
        "def by_subarray(v):\n    return float(SUB.subdtype[0].type(v))\n"
        "def by_many(v):\n    return float(type(MANY[300])(v))\n"
        "def by_ufunc(v):\n    return float(UFUNC(v))\n"
        "def by_vectorize(v):\n    return float(VEC(v))\n"
        "def by_deep(v):\n    return float(DEEP[0][0][0][0](v))\n"
        "def by_long(v):\n    return float(LONG[300](v))\n"
        "def by_keys(v):\n    return float(list(KEYS)[0](v))\n"
        "class Holder:\n    t = ml_dtypes.float8_e4m3fn\n"
        "def by_class(v):\n    return float(Holder.t(v))\n"
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class Made:\n    t: tuple = dataclasses.field(default_factory=lambda: (ml_dtypes.float8_e4m3fn,))\n"
        "def by_dataclass(v):\n    return float(Made().t[0](v))\n"
        "import functools\n"
        "class Cached:\n    @functools.cache\n    def t(self):\n        return ml_dtypes.float8_e4m3fn\n"
        "def by_cached(v):\n    return float(Cached().t()(v))\n"
        "import collections\n"
        "Point = collections.namedtuple('Point', 'x y')\n"
        "class Slotted:\n    __slots__ = ('a',)\n    def __init__(self):\n        self.a = 1.0\n"
        "def honest_classes(v):\n    return Point(v, 1).x + Slotted().a\n"
        "def plain(v):\n    return float(PLAIN[0]) * v + PLAIN[1].sum() + PLAIN[2].itemsize + PLAIN[3](1, 2)\n",
        ns,
    )
    by = ("scalar", "array", "dtype", "objects", "fields", "subarray", "many", "ufunc", "vectorize")
    by += ("deep", "long", "keys", "class", "dataclass", "cached")
    for name in [f"by_{b}" for b in by]:
        assert tools_audit(ns[name], tools), name
        if name not in ("by_ufunc", "by_deep"):  # a made ufunc, a container 5 deep: never data
            assert tools_audit(ns[name], COMPUTING_TOOLS) == [], name  # where ml_dtypes is a tool
    assert tools_audit(ns["plain"], tools) == []
    assert tools_audit(ns["honest_classes"], tools) == []  # a named tuple's fields, a slot


def test_reading_the_courses_files_while_watched_is_noted_and_importing_them_is_not():
    """Every copy of the course's code starts from its text: a watched function that opens a file
    of the course's package (its source, a compiled file) is noted, however the open is reached
    (``open``, ``pathlib``, ``linecache``); the import machinery loading a course module is not."""
    import linecache

    path = formats.__file__

    def by_open():
        with open(path) as f:
            return f.read()[:10]

    def by_pathlib():
        return Path(path).read_text()[:10]

    def by_linecache():
        linecache.checkcache(path)
        linecache.cache.pop(path, None)
        return linecache.getlines(path)[:1]

    def by_import():
        sys.modules.pop("nbhelpers.tables", None)
        return importlib.import_module("nbhelpers.tables").__name__

    def by_loader():  # a loader's get_data outside an import reads text, not code
        import pkgutil

        return pkgutil.get_data("nbhelpers", "formats.py")[:10]

    for fn in (by_open, by_pathlib, by_linecache, by_loader):
        assert any("course's own files" in s for s in seen_by(fn, ("nbhelpers.scaling",))), fn.__name__
    tables = sys.modules.get("nbhelpers.tables")
    try:
        assert seen_by(by_import, ("nbhelpers.scaling",)) == set()
    finally:  # the module every other test imported, back in its place
        if tables is not None:
            sys.modules["nbhelpers.tables"] = tables


def test_where_tools_are_listed_types_outside_them_are_neither_named_nor_unpickled():
    """With ml_dtypes outside an exercise's tools, numpy's table of type names lacks its types while
    the watch is on (a string names no module: ``np.dtype("float8_e4m3fn")`` fails, and the watch
    names the type when that error leaves the call) and comes back whole after; an unpickled object
    naming ml_dtypes is noted, one naming numpy's types only is not. Without a tools list, or with
    ml_dtypes among the tools, nothing is hidden."""
    import pickle

    import ml_dtypes

    from nbhelpers.exercise_types import COMPUTING_TOOLS

    tools = tuple(t for t in COMPUTING_TOOLS if t != "ml_dtypes")
    before = dict(np.sctypeDict)

    def by_name():
        return np.dtype("float8_e4m3fn")

    watch = CallWatch(("nbhelpers.scaling",), (), tools)
    with pytest.raises(TypeError, match="not understood"), watch:
        by_name()
    assert any("ml_dtypes.float8_e4m3fn" in s and "tools do not include" in s for s in watch.seen), watch.seen
    assert np.sctypeDict == before

    def caught():  # the name fails even where the error is caught; nothing is had from it
        try:
            return np.dtype("bfloat16")
        except TypeError:
            return None

    watch = CallWatch(("nbhelpers.scaling",), (), tools)
    with watch:
        assert caught() is None and np.dtype("float32") == np.float32
    assert np.sctypeDict == before

    for listed, expected in ((None, ml_dtypes.float8_e4m3fn), (COMPUTING_TOOLS, ml_dtypes.float8_e4m3fn)):
        with CallWatch(("nbhelpers.scaling",), (), listed):
            assert by_name().type is expected

    fp8 = pickle.dumps(np.array([ml_dtypes.float8_e5m2], dtype=object))
    plain = pickle.dumps(np.arange(3.0))
    watch = CallWatch(("nbhelpers.scaling",), (), tools)
    with watch:
        pickle.loads(plain)
    assert watch.seen == set()
    with watch:
        pickle.loads(fp8)
    assert any("unpickled" in s and "ml_dtypes" in s for s in watch.seen), watch.seen


#: Values that hold ml_dtypes' fp8 types (which round a float64 once, and so answer ex06.fp8_choice
#: without a boundary found) in objects the tools audit once took for data: each is refused where the
#: tools leave ml_dtypes out, and the audit says what the holder holds.
HOLDERS = {
    "a slice": "H = slice(ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)\ndef f(x):\n    return H.start(x)\n",
    "a slice as a default": "def f(x, H=slice(ml_dtypes.float8_e4m3fn, 0)):\n    return H.start(x)\n",
    "a class's slice": "class K:\n    s = slice(ml_dtypes.float8_e4m3fn, 0)\ndef f(x):\n    return K.s.start(x)\n",
    "a dtype's metadata": (
        "H = np.dtype(np.float64, metadata={'t': ml_dtypes.float8_e4m3fn})\ndef f(x):\n    return H.metadata['t'](x)\n"
    ),
    "an array's dtype's metadata": (
        "H = np.zeros(1, np.dtype(np.float64, metadata={'t': ml_dtypes.float8_e4m3fn}))\n"
        "def f(x):\n    return H.dtype.metadata['t'](x)\n"
    ),
    "a dataclass field": "H = dataclasses.field(default=ml_dtypes.float8_e4m3fn)\ndef f(x):\n    return H.default(x)\n",
    "a deque": "H = collections.deque([ml_dtypes.float8_e4m3fn])\ndef f(x):\n    return H[0](x)\n",
    "an itertools.repeat": "H = itertools.repeat(ml_dtypes.float8_e4m3fn)\ndef f(x):\n    return next(H)(x)\n",
    "an object array of slices": (
        "H = np.array([slice(ml_dtypes.float8_e4m3fn, 0)], dtype=object)\ndef f(x):\n    return H[0].start(x)\n"
    ),
    "an instance's attribute": (
        "class Box:\n    pass\nH = Box()\nH.t = ml_dtypes.float8_e4m3fn\ndef f(x):\n    return H.t(x)\n"
    ),
    "an int of the notebook's class": (
        "class Two(int):\n    real = ml_dtypes.float8_e4m3fn\nH = Two(2)\ndef f(x):\n    return H.real(x)\n"
    ),
    "a dataclass field's metadata": (
        "@dataclasses.dataclass\nclass K:\n"
        "    a: int = dataclasses.field(default=0, metadata={'t': ml_dtypes.float8_e4m3fn})\n"
        "def f(x):\n    return dataclasses.fields(K)[0].metadata['t'](x)\n"
    ),
    "a dataclass field's flag": (
        "@dataclasses.dataclass\nclass K:\n    a: int = dataclasses.field(default=0, compare=ml_dtypes.float8_e4m3fn)\n"
        "def f(x):\n    return dataclasses.fields(K)[0].compare(x)\n"
    ),
    "a dataclass's options": (
        "@dataclasses.dataclass(order=ml_dtypes.float8_e4m3fn)\nclass K:\n    a: int = 0\n"
        "def f(x):\n    return K.__dataclass_params__.order(x)\n"
    ),
    "a class's dunder": "class K:\n    __t__ = (ml_dtypes.float8_e4m3fn,)\ndef f(x):\n    return K.__t__[0](x)\n",
    "a class's docstring": (
        "class K:\n    __doc__ = (ml_dtypes.float8_e4m3fn,)\ndef f(x):\n    return K.__doc__[0](x)\n"
    ),
    "a class's annotations": (
        "class K:\n    pass\nK.__annotations__ = {'a': ml_dtypes.float8_e4m3fn}\n"
        "def f(x):\n    return K.__annotations__['a'](x)\n"
    ),
    "a function's annotations": (
        "def f(x):\n    return f.__annotations__['x'](x)\nf.__annotations__['x'] = ml_dtypes.float8_e4m3fn\n"
    ),
    "a cache's parameters": (
        "@functools.lru_cache(maxsize=None, typed=ml_dtypes.float8_e4m3fn)\ndef c(v):\n    return v\n"
        "class Z:\n    cache_parameters = 0\n"
        "def f(x):\n    return c.cache_parameters()['typed'](x)\n"
    ),
    "a structured dtype's title": (
        "H = np.dtype({'names': ['a'], 'formats': [np.float32], 'titles': [ml_dtypes.float8_e4m3fn]})\n"
        "def f(x):\n    return H.fields['a'][2](x)\n"
    ),
    "a defaultdict's factory": (
        "H = collections.defaultdict(ml_dtypes.float8_e4m3fn)\ndef f(x):\n    return H.default_factory(x)\n"
    ),
    "a metaclass's attribute": (
        "class Meta(type):\n    pass\nMeta.t = ml_dtypes.float8_e4m3fn\nclass K(metaclass=Meta):\n    pass\n"
        "def f(x):\n    return K.t(x)\n"
    ),
    "a function's attribute": (
        "def helper():\n    pass\nhelper.t = ml_dtypes.float8_e4m3fn\ndef f(x):\n    return helper.t(x)\n"
    ),
    "a record array's attribute": (
        "H = np.rec.fromarrays([np.zeros(2)], names='a')\nH.t = ml_dtypes.float8_e4m3fn\ndef f(x):\n    return H.t(x)\n"
    ),
    "a property's docstring": (
        "class K:\n    p = property(lambda self: 0, doc=ml_dtypes.float8_e4m3fn)\n"
        "def f(x):\n    return K.p.__doc__(x)\n"
    ),
    "a named tuple's item": (
        "P = collections.namedtuple('P', 'lo hi')\nH = P(ml_dtypes.float8_e4m3fn, 0)\ndef f(x):\n    return H.lo(x)\n"
    ),
}


@pytest.mark.parametrize("holder", sorted(HOLDERS))
def test_what_a_held_object_holds_is_judged_where_the_tools_leave_ml_dtypes_out(holder):
    """No object passes as data for its class alone: a slice's ends, a tool's object's referents, a
    dtype's metadata and an instance of the notebook's own class are read, and the report names
    what they hold. The same function passes where ml_dtypes is a tool."""
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    ns = _notebook("import collections, dataclasses, functools, itertools\nimport ml_dtypes\n" + HOLDERS[holder])
    assert float(ns["f"](1.0625)) == 1.0  # it rounds (a tie to even)
    no_ml_dtypes = tuple(t for t in COMPUTING_TOOLS if t != "ml_dtypes")
    found = tools_audit(ns["f"], no_ml_dtypes)
    assert any("ml_dtypes.float8_e4m3fn" in s for s in found), found
    assert tools_audit(ns["f"], COMPUTING_TOOLS) == []


#: Holders that pass as Python's own machinery of a class or as typing's own, and hold anything.
DISGUISED = {
    "a field getter's doc": (
        "P = collections.namedtuple('P', 'a')\nclass K:\n    g = type(P.a)(0, (ml_dtypes.float8_e4m3fn,))\n"
        "def f(x):\n    return K.g.__doc__[0](x)\n"
    ),
    "a class posing as typing's": (
        "import typing\nclass X(typing.Generic[typing.AnyStr]):\n    __module__ = 'typing'\n"
        "    t = ml_dtypes.float8_e4m3fn\nA = X[str]\ndef f(x):\n    return typing.get_origin(A).t(x)\n"
    ),
}


@pytest.mark.parametrize("holder", sorted(DISGUISED))
def test_a_holder_disguised_as_machinery_or_typing_is_refused(holder):
    """A named tuple's field getter made with any doc, and a class that says its module is typing,
    are neither the class's machinery nor typing's: refused, with or without ml_dtypes in the
    tools."""
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    ns = _notebook("import collections, dataclasses, functools, itertools\nimport ml_dtypes\n" + DISGUISED[holder])
    assert float(ns["f"](1.0625)) == 1.0
    for tools in (COMPUTING_TOOLS, tuple(t for t in COMPUTING_TOOLS if t != "ml_dtypes")):
        found = tools_audit(ns["f"], tools)
        assert any(s.startswith(("A (typing.X)", "K.g (")) for s in found), found


def test_the_watch_cannot_be_switched_off_through_a_held_slice():
    """A slice holding operator.attrgetter, namedtuple and a course function handed the function a
    way to sys (namedtuple's globals) by strings made at run time: the slice is refused for what it
    holds, in ex01, ex04, ex06 and ex07."""
    body = (
        "import collections, operator\nimport nbhelpers.formats\n"
        "S = slice(operator.attrgetter, collections.namedtuple, nbhelpers.formats.decode)\n"
        "def f(*args):\n"
        "    u = chr(95)\n"
        "    system = S.start(u * 2 + 'globals' + u * 2)(S.stop)[u + 'sys']\n"
        "    off, hook = S.start('set' + 'profile')(system), S.start('get' + 'profile')(system)()\n"
        "    list(map(off, [None]))\n"
        "    value = float(S.step(0x38, 'e4m3fn'))\n"
        "    list(map(off, [hook]))\n"
        "    return value\n"
    )
    ns = _notebook(body)
    for exercise in ("ex01.decode_bits", "ex04.lost_update_threshold", "ex06.fp8_choice", "ex07.mx_exponent_range"):
        ex = get_exercise(exercise)
        watch = CallWatch(ex.forbidden, ex.allowed, ex.tools)
        watch.audit(ns["f"])
        assert any("builtins.slice, holding operator" in s for s in watch.seen), (exercise, watch.seen)


#: Honest code a student writes with the tools the statements list: each passes the tools audit.
HONEST_CLASSES = """
import collections, dataclasses, fractions, functools, typing

@dataclasses.dataclass(frozen=True)
class Fmt:
    name: str
    emin: int
    man: int

@dataclasses.dataclass(frozen=True, order=True)
class Fp8(Fmt):
    top: float = 448.0
    notes: list = dataclasses.field(default_factory=list)

    def tiny(self):
        return 2.0 ** (self.emin - self.man)

class Layout:
    def __init__(self, e, m):
        self.exp_bits, self.man_bits = e, m

class Fields(Layout):
    def width(self):
        return 1 + self.exp_bits + self.man_bits

class Row(typing.NamedTuple):
    name: str
    top: float

E4 = Row("e4m3fn", 448.0)

class Lost(ValueError):
    pass

RNG = np.random.default_rng(0)
HALF = fractions.Fraction(1, 2)

@functools.cache
def bound(n):
    return 2.0**n

def f(x: float, scale: typing.Optional[float] = None) -> "float":
    fmt = Fp8("e4m3fn", -6, 3)
    e5 = E4._replace(name="e5m2", top=57344.0)

    @dataclasses.dataclass
    class Local:
        a: float
        b: float = 0.0

    Pair = collections.namedtuple("Pair", ["lo", "hi"])
    bound(3)
    hits = bound.cache_info().hits
    if x < 0:
        raise Lost("negative")
    return (fmt.tiny() + Fields(4, 3).width() + e5.top + Local(x).a + Pair(1, 2).hi + hits
            + float(HALF) + RNG.random() * 0 + len(fmt.notes))
"""


def test_the_tools_audit_passes_honest_classes_dataclasses_and_named_tuples():
    """What the statements promise (collections, dataclasses, typing, functools): a frozen dataclass
    and its subclass (the methods dataclasses writes for them, default factories), a subclass of the
    notebook's own class, a named tuple's _replace and an instance of one held in a global, a
    dataclass and a named tuple made inside the function, a cache's info, an exception of the
    notebook's, a random generator and a Fraction held in globals."""
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    ns = _notebook(HONEST_CLASSES)
    assert ns["f"](1.0) > 0
    assert tools_audit(ns["f"], COMPUTING_TOOLS) == []
    assert tools_audit(ns["f"], tuple(t for t in COMPUTING_TOOLS if t != "ml_dtypes")) == []


def test_frozen_dataclasses_pass_under_postponed_annotations_and_a_class_may_not_hold_a_slot_wrapper():
    """The grader compiles a notebook with annotations postponed: a frozen dataclass's written
    methods are still recognised (dataclasses reads its string annotations in the class's module),
    and the idiom of a frozen dataclass's __post_init__ (object.__setattr__ on self, by a constant
    name) passes; object.__getattribute__ held by a class is no machinery of the class's (it is a
    getattr by any name), nor is a name of another module's class that a tool imports for itself."""
    import __future__

    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    source = (
        "import dataclasses\nimport numpy as np\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Fmt:\n"
        "    name: str\n"
        "    top: float\n"
        "    half: float = dataclasses.field(init=False)\n"
        "    def __post_init__(self):\n"
        "        object.__setattr__(self, 'half', self.top / 2)\n"
        "def f(x: np.ndarray) -> tuple[str, dict[str, tuple[int, int]]]:\n"
        "    return Fmt('e4m3fn', 448.0).half + x\n"
        "class K:\n"
        "    g = object.__getattribute__\n"
        "def g(x):\n"
        "    return K.g(x, 'real')\n"
        "def h(x):\n"
        "    return dataclasses.FunctionType\n"
    )
    ns: dict = {"__name__": "__main__"}
    flags = __future__.annotations.compiler_flag
    exec(compile(source, "/tmp/ipykernel_0/cell.py", "exec", flags=flags, dont_inherit=True), ns)
    assert ns["f"](1.0) == 225.0
    assert tools_audit(ns["f"], COMPUTING_TOOLS) == []
    assert tools_audit(ns["g"], COMPUTING_TOOLS) == ["K.g (builtins.object.__getattribute__)"]
    assert tools_audit(ns["h"], COMPUTING_TOOLS) == [".FunctionType"]

    other: dict = {"__name__": "__main__"}  # __setattr__ on what is not self's own field
    exec(
        compile(source.replace("object.__setattr__(self, 'half'", "object.__setattr__(self.top, 'real'"), "c", "exec"),
        other,
    )
    assert ".__setattr__" in tools_audit(other["f"], COMPUTING_TOOLS)


def test_a_modules_getstate_is_refused_and_protocols_hints_and_abcs_pass(monkeypatch):
    """From Python 3.11 every object has __getstate__, and a module's returns its globals (as vars
    would; dataclasses' hold sys): refused by name. Honest typing: a Protocol (its abc registry is
    the class's machinery), numpy.typing's ArrayLike in a hint (numpy's private protocols), a
    collections.abc base, total_ordering; and ex07's tools (three course modules) do not make the
    course package's every global a name a notebook's attribute may not have."""
    import numpy.typing as npt

    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    ns = _notebook(
        "import collections.abc, dataclasses, functools, typing\n"
        "def by_state(x):\n"
        "    return dataclasses.__getstate__()['s' + 'ys']\n"
        "class HasBits(typing.Protocol):\n"
        "    bits: int\n"
        "class Bits(collections.abc.Sequence):\n"
        "    def __init__(self, v, n):\n"
        "        self.v, self.n = v, n\n"
        "    def __len__(self):\n"
        "        return self.n\n"
        "    def __getitem__(self, i):\n"
        "        if not 0 <= i < self.n:\n"
        "            raise IndexError(i)\n"
        "        return (self.v >> i) & 1\n"
        "@functools.total_ordering\n"
        "class Key:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
        "    def __eq__(self, other):\n"
        "        return self.v == other.v\n"
        "    def __lt__(self, other):\n"
        "        return self.v < other.v\n"
        "def honest(x, proto=HasBits):\n"
        "    return list(Bits(5, 3)) == [1, 0, 1] and Key(1) <= Key(2) and Bits(5, 3).count(1) == 2\n"
    )
    ns["honest"].__annotations__["x"] = npt.ArrayLike  # evaluated, as in a notebook
    assert ns["honest"](0)
    import numpy.ma  # noqa: F401  (its core module has a global v, a string: no name a notebook may not use)

    from nbhelpers import call_watch

    monkeypatch.setattr(call_watch, "_SHADOW_CACHE", {})  # read again, numpy.ma loaded
    assert ".__getstate__" in tools_audit(ns["by_state"], COMPUTING_TOOLS)
    assert tools_audit(ns["honest"], COMPUTING_TOOLS) == []
    ex07_tools = COMPUTING_TOOLS + ("nbhelpers.formats", "nbhelpers.rounding", "nbhelpers.recipes")
    assert tools_audit(ns["honest"], ex07_tools) == []


def test_a_dataclass_method_not_written_by_dataclasses_is_read_and_enum_is_named():
    """A dataclass's method compiled from text of the notebook's own (not what dataclasses writes for
    the class) is read as the notebook's code; a class on enum names its base."""
    from nbhelpers.call_watch import tools_audit
    from nbhelpers.exercise_types import COMPUTING_TOOLS

    ns = _notebook(
        "import dataclasses, enum\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class P:\n"
        "    a: float\n"
        "text = 'def __eq__(self, other):\\n    return getattr(self, \"a\") == other\\n'\n"
        "space = {}\n"
        "exec(compile(text, '<string>', 'exec'), globals(), space)\n"
        "P.__eq__ = space['__eq__']\n"
        "space['__eq__'].__qualname__ = 'P.__eq__'\n"
        "class Kind(enum.Enum):\n"
        "    E4 = 1\n"
        "def f(x):\n"
        "    return P(x) == x\n"
        "def g(x):\n"
        "    return Kind.E4.value + x\n"
    )
    assert ns["f"](1.0)
    assert "the builtin getattr" in tools_audit(ns["f"], COMPUTING_TOOLS)
    assert any("base (enum.Enum)" in s for s in tools_audit(ns["g"], COMPUTING_TOOLS))
