"""What a GPU's compiler says about the course's kernels, asked without a GPU.

Triton compiles a kernel for a named target on any machine: ``triton.compile`` runs the whole
pipeline (Triton IR -> TritonGPU IR -> LLVM IR -> PTX -> cubin), the last step with the ``ptxas``
that ships inside the Triton wheel. Nothing runs, so nothing is timed, but everything the
compiler decides is there to read:

* **registers** per thread, **spill** bytes and the **stack** frame, from ``ptxas -v`` (run again
  here on the kernel's PTX with the flags Triton passes);
* **shared memory** per program (``metadata.shared``: Triton's pipelining buffers, the main
  reason a config does not fit), against the target's per-block limit;
* which **matrix instruction** the ``tl.dot`` became (``wgmma.mma_async`` on sm_90,
  ``mma.sync`` on sm_80, none: a loop of FMAs), with its operand types (``tf32`` or ``f32``
  inputs tell whether fp32 operands went to the tensor cores);
* how many **asynchronous copies** (``cp.async``, TMA's ``cp.async.bulk``) feed the pipeline;
* which **conversions to narrow formats** a cast became (:func:`narrow_conversions`: the
  ``cvt`` instructions to or from fp8, fp6, fp4 and ue8m0, with their rounding and saturation);
* the **loops** of the machine code (SASS, disassembled by the ``nvdisasm`` that ships beside
  ``ptxas``): each loop's instructions per trip, the shortest trip (every forward branch in the
  body taken the cheaper way: a guarded block skipped) and its nesting depth
  (:func:`sass_loops`), also in issue cycles (one instruction a cycle, and an integer pipe that
  takes two cycles per instruction, a shuffle pipe four: :data:`PIPES`). The cycles per trip bound
  how fast a loop can go whatever the memory does (:mod:`nbhelpers.perf_model`'s instruction
  issue).

A :class:`Case` is one kernel with one launch: the argument types and integer values a launcher
passes (Triton specialises a launch on them: an integer equal to 1 becomes a constant, one
divisible by 16 is marked so, and the loads can then be vectorised), the constexprs of one config
and its ``num_warps`` / ``num_stages``. :func:`check` compiles a list of cases in a process pool
and :func:`findings` says which results break a rule: a compile error, shared memory over the
target's limit, or a spill in a config the course uses by default.

Which cases the course has is each kernel family's to say (its manifest in
:mod:`nbhelpers.families`); ``make gpu-compile`` or ``python -m nbhelpers.compile_check --help``
compiles all of them (:mod:`nbhelpers.tooling.compile_cases`, the repository's catalogue, which
also reads the solutions' kernels) and writes the results file chapter 09 reads
(:func:`nbhelpers.results.recorded_compile_check`).

Needs Triton with its NVIDIA backend (the Linux wheels); no GPU, no CUDA driver.
"""

from __future__ import annotations

import ast
import atexit
import dataclasses
import importlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from .families import Case
from .validation import positive_int

__all__ = [
    "SHARED_LIMIT",
    "Case",
    "compile_case",
    "check",
    "findings",
    "parse_ptxas",
    "capability_of",
    "launch_spec",
    "instruction_summary",
    "global_access",
    "narrow_conversions",
    "kernel_exists",
    "sass_loops",
    "PIPES",
    "issue_cycles",
]

ROOT = Path(__file__).resolve().parents[1]

#: the most shared memory one block may use, in bytes, by compute capability (the CUDA C++
#: Programming Guide, "Features and Technical Specifications", table "Technical Specifications per
#: Compute Capability": 227 KB on 9.0 and 10.0, 163 KB on 8.0, 99 KB on 8.6, 8.9 and 12.0, 64 KB
#: on 7.5; above 48 KB a kernel opts in, as Triton's launcher does). Triton's launch fails with
#: OutOfResources above it.
SHARED_LIMIT = {
    90: 227 * 1024,
    100: 227 * 1024,
    80: 163 * 1024,
    86: 99 * 1024,
    89: 99 * 1024,
    120: 99 * 1024,
    75: 64 * 1024,
}


# ====================================================================== compiling one case

_PTR_DTYPES = {
    "fp32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp8e4nv": "float8_e4m3fn",
    "fp8e5": "float8_e5m2",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "i8": "int8",
}


def kernel_exists(ref: str) -> bool:
    """Whether the kernel ``ref`` names is there: a package module's always, a notebook's or a
    file's when the file exists and its source has the name (an exercise not yet written has not)."""
    path, _, name = ref.rpartition(":")
    if path.endswith((".py", ".ipynb")):
        return (ROOT / path).exists() and name in _source_of(path)
    return True


def _source_of(path: str) -> str:
    """A notebook's code cells, or a Python file's text."""
    text = (ROOT / path).read_text()
    if path.endswith(".ipynb"):
        cells = json.loads(text)["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return text


def _is_jit(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and any(
        ast.unparse(d).split("(")[0] in ("triton.jit", "jit") for d in node.decorator_list
    )


def _load_from_source(path: str, name: str):
    """The ``@triton.jit`` function ``name`` of a notebook or a Python file, without running the
    rest: its imports, its module-level constants and its jit functions, written to a module file
    (Triton reads a kernel's source with ``inspect``) and imported."""
    source = _source_of(path)
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a notebook with IPython magics: parse cell by cell
        tree = ast.Module(body=[], type_ignores=[])
        for chunk in source.split("\n\n"):
            try:
                tree.body += ast.parse(chunk).body
            except SyntaxError:
                continue
    keep = [
        n
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom))
        or _is_jit(n)
        # a constant bound to a name; not ``mask[i] = False``, whose array the rest of the
        # notebook builds
        or (
            isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant)
            and all(isinstance(t, ast.Name) for t in n.targets)
        )
    ]
    text = "\n\n".join(ast.unparse(n) for n in keep) + "\n"
    mod_name = "cc_" + re.sub(r"\W", "_", path.rsplit(".", 1)[0])
    if mod_name in sys.modules:  # already loaded by this process
        return getattr(sys.modules[mod_name], name)
    # one file per process: workers compiling side by side must not rewrite each other's
    folder = Path(tempfile.gettempdir()) / f"nbhelpers-compile-check-{os.getpid()}"
    if not folder.exists():
        folder.mkdir()
        atexit.register(shutil.rmtree, folder, True)
    file = folder / f"{mod_name}.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(mod_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _kernel(ref: str):
    path, _, name = ref.rpartition(":")
    if path.endswith((".py", ".ipynb")):
        return _load_from_source(path, name)
    return getattr(importlib.import_module(path), name)


def kernel_of(ref: str):
    """The ``@triton.jit`` function a compile case names: ``module:name`` (imported) or
    ``path.py:name`` / ``path.ipynb:name`` (read from that file, a notebook's code cells)."""
    return _kernel(ref)


def _tensor(spec: str):
    import torch

    return torch.empty(16, dtype=getattr(torch, _PTR_DTYPES[spec.lstrip("*")]))


def parse_ptxas(log: str) -> dict:
    """Registers, spill stores/loads and stack bytes from ``ptxas -v`` output."""

    def grab(pattern, default=0):
        m = re.search(pattern, log)
        return int(m.group(1)) if m else default

    return {
        "registers": grab(r"Used (\d+) registers", None),
        "spill_stores": grab(r"(\d+) bytes spill stores"),
        "spill_loads": grab(r"(\d+) bytes spill loads"),
        "stack": grab(r"(\d+) bytes stack frame"),
    }


def instruction_summary(ptx: str) -> dict:
    """The matrix instruction a kernel's PTX uses (its first shape and types), and its count of
    asynchronous copies."""
    wg = re.search(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.([\w.]+)", ptx)
    mma = re.search(r"\bmma\.sync\.aligned\.(m\d+n\d+k\d+)\.(?:row\.col\.)?([\w.]+)", ptx)
    if wg:
        instr = f"wgmma {wg.group(1)} {wg.group(2)}"
    elif mma:
        instr = f"mma.sync {mma.group(1)} {mma.group(2)}"
    else:
        instr = "none"
    return {
        "mma": instr,
        "cp_async": len(re.findall(r"\bcp\.async\.(?:ca|cg)\.shared", ptx)),
        "tma": len(re.findall(r"\bcp\.async\.bulk\.tensor", ptx)),
    }


#: the packed narrow types of PTX's ``cvt``: fp8, fp6, fp4 and the ue8m0 scale
_NARROW_CVT = re.compile(r"\bcvt(?:\.[\w:]+)*\.(?:e4m3|e5m2|e2m3|e3m2|e2m1|ue8m0)x\d(?:\.[\w:]+)*")


def narrow_conversions(ptx: str) -> list[str]:
    """The distinct ``cvt`` instructions of a kernel's PTX that convert to or from a packed fp8,
    fp6, fp4 or ue8m0 type, sorted: ``["cvt.rn.satfinite.e4m3x2.f32"]`` for a kernel that casts
    fp32 to e4m3. Their modifiers say how the cast rounds and whether it saturates."""
    return sorted(set(_NARROW_CVT.findall(ptx)))


def global_access(ptx: str) -> dict:
    """The kernel's global loads and stores in its PTX, by vector width: ``{"ld": {"v4": 2},
    "st": {"v4": 2}}`` for a copy whose threads each move 16 bytes in one instruction, ``{"ld":
    {"1": 8}, ...}`` for scalar ones. Static counts (a loop's body once), not executions."""
    out: dict = {"ld": {}, "st": {}}
    for op, vec in re.findall(r"\b(ld|st)\.global(?:\.[A-Za-z0-9_:]+)*?(?:\.(v2|v4|v8))?\.[bfsu]\d+\b", ptx):
        width = vec or "1"
        out[op][width] = out[op].get(width, 0) + 1
    return out


#: the pipes of sm_90 that issue a warp instruction at less than one a cycle, with the cycles each
#: instruction holds its pipe (128 over its results per clock per SM in NVIDIA's CUDA C++
#: Programming Guide, the table of arithmetic instruction throughput, compute capability 9.0):
#: 32-bit integer add, compare, min/max, shift and logic 64 a clock (the ALU pipe, 2 cycles);
#: integer multiply-add 64 (IMAD, the FMA pipe's heavy half, 2 cycles); warp shuffle 32 (4); population
#: count and count of leading zeros 16 (8). Every other instruction (fp32 arithmetic at 128,
#: memory, branch and uniform instructions, which go to other units) takes one issue cycle.
PIPES = {
    "alu": (("IADD3", "IADD", "VIADD", "ISETP", "IMNMX", "VIMNMX", "VIMNMX3", "VIADDMNMX", "LOP3", "LOP",
             "SHF", "SHL", "SHR", "SEL", "PRMT", "LEA", "IABS", "SGXT", "P2R", "R2P", "BMSK"), 2),
    "imad": (("IMAD", "IMUL"), 2),
    "shfl": (("SHFL",), 4),
    "popc": (("POPC", "FLO", "BREV"), 8),
}  # fmt: skip
_PIPE_OF = {op: name for name, (ops, _) in PIPES.items() for op in ops}


def _opcode(text: str) -> str:
    """The opcode of one SASS instruction (its text after the address) before its first dot, with
    no predicate guard: ``"@!P0 BAR.SYNC.DEFER_BLOCKING 0x0"`` is ``"BAR"``."""
    words = text.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def _pipe(text: str) -> str | None:
    """The pipe of :data:`PIPES` one SASS instruction (its text after the address) goes to."""
    return _PIPE_OF.get(_opcode(text))


def issue_cycles(texts: list[str]) -> int:
    """The fewest cycles one scheduler needs to issue these instructions: one a cycle, and no pipe
    of :data:`PIPES` faster than it takes them."""
    counts: dict = {}
    for t in texts:
        name = _pipe(t)
        if name:
            counts[name] = counts.get(name, 0) + 1
    return max([len(texts), *(n * PIPES[name][1] for name, n in counts.items())])


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b[^`]*`\((\.L_x_\d+)\)")


def sass_loops(sass: str) -> list[dict]:
    """The loops of a kernel's SASS (``nvdisasm -c`` output), outermost first: every backward
    branch that its target reaches again closes one. For each, ``instructions`` (from its first
    instruction to the branch, nested loops included), ``shortest`` (the fewest instructions one
    trip executes: a predicated branch and ``BRA.DIV``, the check for a diverged warp, may be taken
    or not, a nested loop's back edge is not taken, an unpredicated forward branch is),
    ``cycles`` and ``shortest_cycles`` (the same instructions in issue cycles of one scheduler,
    :func:`issue_cycles`: integer instructions hold their pipe two cycles each), ``opcodes`` (how
    many of its instructions each opcode has, by the opcode's name before its first dot, a
    predicate guard left out: ``{"LDS": 1, "BAR": 1, ...}``) and ``depth`` (0 for an outermost
    loop). Not loops: a branch to itself (the trap after ``EXIT``),
    and the jump back from an out-of-line path (the diverged warp's shuffles, placed after the
    kernel's ``EXIT``)."""
    addr: list[int] = []
    text: list[str] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for line in sass.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _SASS_LINE.search(line)
        if m:
            for name in pending:
                labels[name] = len(addr)
            pending = []
            addr.append(int(m.group(1), 16))
            text.append(m.group(2))
    target = {}
    for i, t in enumerate(text):
        m = _BRANCH.search(t)
        if m and m.group(1) in labels:
            target[i] = labels[m.group(1)]

    def shortest(first: int, last: int) -> list[int] | None:
        """The instructions of the shortest trip from ``first`` to ``last`` over forward edges (a
        DAG), or None when ``last`` cannot be reached."""
        cost = [math.inf] * (last - first + 1)
        back = [-1] * (last - first + 1)
        cost[0] = 1
        for i in range(first, last):
            c = cost[i - first]
            if c == math.inf:
                continue
            j = target.get(i)
            op = text[i].split()[0]
            predicated = op.startswith("@") or op == "BRA.DIV"
            nxt = []
            if j is not None and i < j <= last:
                nxt.append(j)
            ends = op in ("EXIT", "RET", "BRA") or op.startswith("RET.")
            if predicated or not ends:  # falls through (a backward branch's fall-through too)
                nxt.append(i + 1)
            for n in nxt:
                if c + 1 < cost[n - first]:
                    cost[n - first], back[n - first] = c + 1, i
        if cost[-1] == math.inf:
            return None
        path = [last]
        while path[-1] != first:
            path.append(back[path[-1] - first])
        return path[::-1]

    exits = [i for i, t in enumerate(text) if t.split()[0] in ("EXIT", "RET") or t.startswith("RET.")]
    spans = []
    for i, j in target.items():
        # a loop's body never passes an unpredicated EXIT: past one lies out-of-line code
        if j < i and not any(j <= e <= i for e in exits):
            trip = shortest(j, i)
            if trip is not None:
                spans.append((j, i, trip))
    spans.sort(key=lambda s: (s[0], -s[1]))
    return [
        {
            "instructions": last - first + 1,
            "shortest": len(trip),
            "cycles": issue_cycles(text[first : last + 1]),
            "shortest_cycles": issue_cycles([text[k] for k in trip]),
            "opcodes": dict(sorted(Counter(_opcode(t) for t in text[first : last + 1]).items())),
            "depth": sum(1 for f, la, _ in spans if f <= first and last <= la and (f, la) != (first, last)),
        }
        for first, last, trip in spans
    ]


def _sass(cubin: bytes, capability: int) -> str:
    """The cubin disassembled by the ``nvdisasm`` beside Triton's ``ptxas``; "" without one."""
    from triton.backends.nvidia.compiler import get_ptxas

    tool = Path(get_ptxas(capability).path).with_name("nvdisasm")
    if not tool.exists():
        return ""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.cubin"
        src.write_bytes(cubin)
        r = subprocess.run([str(tool), "-c", str(src)], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def _ptxas_info(ptx: str, capability: int) -> dict:
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run(
            [
                get_ptxas(capability).path,
                "-lineinfo",
                "-v",
                "--regAllocOptLevel=2",
                f"--gpu-name={sm_arch_from_capability(capability)}",
                str(src),
                "-o",
                str(src) + ".o",
            ],
            capture_output=True,
            text=True,
        )
    if r.returncode != 0:
        raise RuntimeError(f"ptxas failed: {r.stderr.strip()[-500:]}")
    return parse_ptxas(r.stderr + r.stdout)


def capability_of(target: str) -> int:
    """ "sm_90" -> 90; a clear error for anything else."""
    m = re.fullmatch(r"sm_(\d{2,3})", str(target))
    if not m or int(m.group(1)) not in SHARED_LIMIT:
        raise ValueError(f"target must be one of {', '.join(f'sm_{c}' for c in sorted(SHARED_LIMIT))}, got {target!r}")
    return int(m.group(1))


def launch_spec(fn, case: Case, target) -> tuple:
    """What a launch of ``fn`` with the case's arguments and config hands Triton's compiler on a
    GPU of ``target``: (options, signature, constexprs, attrs), built by Triton's own binder as
    ``JITFunction.run`` builds them, with the options it adds (``debug``, ``instrumentation_mode``),
    so that the compiled kernel lands in Triton's cache under the key a launch on a GPU looks up."""
    from triton import knobs
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    args = [_tensor(a) if isinstance(a, str) else a for a in case.args]
    kwargs = {
        **case.constexprs,
        "num_warps": case.num_warps,
        "num_stages": case.num_stages,
        "debug": bool(knobs.runtime.debug),
        "instrumentation_mode": knobs.compilation.instrumentation_mode,
    }
    bound, spec, opts = binder(*args, **kwargs)
    return fn._pack_args(backend, kwargs, bound, spec, opts)


def compile_case(case: Case) -> dict:
    """Compile one case for its target; a row of the results table. Never raises for a kernel
    that does not compile: the row says so (status "error", the error's last line)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cap = capability_of(case.target)
    row = {
        "kernel": case.kernel.rpartition(":")[2],
        "where": case.kernel.rpartition(":")[0],
        "source": case.source,
        "label": case.label,
        "config": case.config,
        "target": case.target,
        "num_warps": case.num_warps,
        "num_stages": case.num_stages,
        "default": case.default,
    }
    t0 = time.perf_counter()
    try:
        fn = _kernel(case.kernel)
        if not isinstance(fn, triton.runtime.JITFunction):
            raise RuntimeError(
                f"{case.kernel} is a {type(fn).__name__}, not a compiled-mode triton.jit function "
                "(imported with TRITON_INTERPRET=1?)"
            )
        target = GPUTarget("cuda", cap, 32)
        options, signature, constexprs, attrs = launch_spec(fn, case, target)
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
        ptx = compiled.asm["ptx"]
        row.update(_ptxas_info(ptx, cap))
        row.update(instruction_summary(ptx))
        row["global_access"] = global_access(ptx)
        row["cvt_narrow"] = narrow_conversions(ptx)
        sass = _sass(compiled.asm["cubin"], cap)
        if sass:
            row["loops"] = sass_loops(sass)
        row["shared"] = int(compiled.metadata.shared)
        row["shared_limit"] = SHARED_LIMIT[cap]
        row["status"] = "ok"
    except Exception as e:  # a row per case, whatever the compiler raised
        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        msg = next((ln for ln in lines if "not supported" in ln or "error" in ln.lower()), lines[-1] if lines else "")
        row.update(status="error", error=f"{type(e).__name__}: {msg}"[:300])
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    if case.expect_error:
        row["expect_error"] = case.expect_error
    return row


# ====================================================================== running and judging

_ROW = "@@compile-check-row@@ "


def _worker_loop() -> None:
    """``--worker``: read one case per line (JSON) from stdin, compile it, print its row as one
    marked line (anything the compiler itself prints is ignored by the reader)."""
    for line in sys.stdin:
        if line.strip():
            d = json.loads(line)
            row = compile_case(Case(**{**d, "args": tuple(d["args"])}))
            print(_ROW + json.dumps(row), flush=True)


def _interpreted_here() -> bool:
    """True when this process runs Triton's interpreter (a notebook on a CPU after setup_device()):
    its kernels cannot be compiled here, only in a fresh process."""
    kernels = sys.modules.get("nbhelpers.kernels")
    return os.environ.get("TRITON_INTERPRET") == "1" or bool(getattr(kernels, "INTERPRETED", False))


def check(cases: list[Case], jobs: int = 1, on_row=None) -> list[dict]:
    """Compile every case, calling ``on_row(row)`` as each finishes; the rows in the order of
    ``cases``. ``jobs`` worker processes (``python -m nbhelpers.compile_check --worker``, each
    importing Triton once, without ``TRITON_INTERPRET``) take the cases one at a time. With
    ``jobs=1`` in a process not in interpreter mode it compiles here instead."""
    import queue
    import threading

    jobs = positive_int("jobs", jobs, "worker processes")
    cases = list(cases)
    if jobs == 1 and not _interpreted_here():
        rows = []
        for c in cases:
            rows.append(compile_case(c))
            if on_row:
                on_row(rows[-1])
        return rows
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    todo: queue.Queue = queue.Queue()
    for i, c in enumerate(cases):
        todo.put((i, c))
    rows: list = [None] * len(cases)
    lock = threading.Lock()
    errors: list[str] = []

    def work():
        proc = subprocess.Popen(
            [sys.executable, "-m", "nbhelpers.compile_check", "--worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            while True:
                try:
                    i, c = todo.get_nowait()
                except queue.Empty:
                    return
                proc.stdin.write(json.dumps(dataclasses.asdict(c)) + "\n")
                proc.stdin.flush()
                for line in proc.stdout:
                    if line.startswith(_ROW):
                        row = json.loads(line[len(_ROW) :])
                        break
                else:  # the worker died (a compiler crash): this case's row says so
                    row = {
                        "kernel": c.kernel.rpartition(":")[2],
                        "where": c.kernel.rpartition(":")[0],
                        "source": c.source,
                        "label": c.label,
                        "config": c.config,
                        "target": c.target,
                        "default": c.default,
                        "status": "error",
                        "error": f"the compiling process exited with code {proc.wait()}",
                    }
                    with lock:
                        errors.append(row["error"])
                    rows[i] = row
                    if on_row:
                        with lock:
                            on_row(row)
                    return work()  # a fresh worker for the rest
                rows[i] = row
                if on_row:
                    with lock:
                        on_row(row)
        finally:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            proc.wait()

    threads = [threading.Thread(target=work) for _ in range(min(jobs, max(len(cases), 1)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows


def findings(rows: list[dict]) -> list[str]:
    """What breaks a rule, one sentence per row: an unexpected compile error (or an expected one
    that did not come), shared memory over the target's limit, a spill in a default config."""
    out = []
    for r in rows:
        where = f"{r['kernel']} [{r['label']}] {r['config']} on {r['target']}"
        expect = r.get("expect_error")
        if expect:
            if r["status"] == "ok":
                out.append(f"{where}: compiled, but was expected to stop with '{expect}'")
            elif expect not in r.get("error", ""):
                out.append(f"{where}: stopped with {r.get('error')!r}, expected '{expect}'")
            continue
        if r["status"] != "ok":
            out.append(f"{where}: does not compile: {r.get('error')}")
            continue
        if r["shared"] > r["shared_limit"]:
            out.append(
                f"{where}: needs {r['shared']:,} B of shared memory, over the {r['shared_limit']:,} B a block may use"
            )
        if r["default"] and (r["spill_stores"] or r["spill_loads"]):
            out.append(
                f"{where}: spills ({r['spill_stores']} B stores, {r['spill_loads']} B loads, "
                f"{r['registers']} registers)"
            )
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker_loop()
        raise SystemExit(0)
    # the command chapter 09 names: the catalogue of every case, in a process of its own
    raise SystemExit(subprocess.call([sys.executable, "-m", "nbhelpers.tooling.compile_cases", *sys.argv[1:]]))
