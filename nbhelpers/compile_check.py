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
* how many **asynchronous copies** (``cp.async``, TMA's ``cp.async.bulk``) feed the pipeline.

A :class:`Case` is one kernel with one launch: the argument types and integer values a launcher
passes (Triton specialises a launch on them: an integer equal to 1 becomes a constant, one
divisible by 16 is marked so, and the loads can then be vectorised), the constexprs of one config
and its ``num_warps`` / ``num_stages``. :func:`course_cases` lists the cases of every kernel of
the course: the package's kernels with every config their launchers or autotune lists can pick,
the solutions' kernels (read from the solution notebooks) and the tests' own kernels.
:func:`check` compiles a list of cases in a process pool and :func:`findings` says which results
break a rule: a compile error, shared memory over the target's limit, or a spill in a config the
course uses by default.

Run it with ``make gpu-compile`` (all cases) or ``python -m nbhelpers.compile_check --help``; it
writes a results file that chapter 09 reads. ``--update`` compiles only the cases selected (new
kernels: ``--kernels topk --update``) and keeps the file's other rows as they were recorded, so
that their compile times still come from one machine. A subset runs in ``make test``
(tests/test_compile_check.py).

Needs Triton with its NVIDIA backend (the Linux wheels); no GPU, no CUDA driver.
"""

from __future__ import annotations

import argparse
import ast
import atexit
import dataclasses
import datetime as _dt
import importlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = [
    "TARGETS",
    "SHARED_LIMIT",
    "Case",
    "course_cases",
    "compile_case",
    "check",
    "findings",
    "parse_ptxas",
    "capability_of",
    "gemm_args",
    "compile_meta",
    "launch_spec",
    "cases_for",
    "instruction_summary",
    "main",
]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "compile_check.json"

#: target name -> compute capability
TARGETS = {"sm_90": 90, "sm_80": 80}
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


@dataclasses.dataclass(frozen=True)
class Case:
    """One kernel, one launch, one config.

    kernel: where the ``@triton.jit`` function lives: ``"module:function"`` for the package, or
    ``"path/to/file.ipynb:function"`` / ``"path/to/file.py:function"`` (relative to the
    repository) for a notebook's or a test's kernel, read from its source. args: the positional
    arguments as a launch passes them: ``"*bf16"``-style strings for tensors (a pointer of that
    element type), ints for ints. constexprs: the config's compile-time arguments. default: True
    for a config the course launches by default (an autotune list's, a launcher's default): a
    spill there is a finding. expect_error: a substring of the error a case is expected to stop
    with (a dtype the target lacks); the case then passes only if it does stop with it.
    """

    kernel: str
    label: str
    args: tuple
    constexprs: dict
    num_warps: int = 4
    num_stages: int = 3
    target: str = "sm_90"
    source: str = "package"
    default: bool = True
    expect_error: str | None = None

    @property
    def config(self) -> str:
        """The config in one short string: tile sizes first, then warps and stages."""
        keys = [k for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK") if k in self.constexprs]
        tile = "x".join(str(self.constexprs[k]) for k in keys)
        rest = ", ".join(f"{k}={v}" for k, v in self.constexprs.items() if k not in keys)
        return f"{tile} w{self.num_warps} s{self.num_stages}" + (f" ({rest})" if rest else "")


# ====================================================================== the course's cases

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


def gemm_args(a: str, b: str, c: str, M: int, N: int, K: int, b_col_major: bool = False) -> tuple:
    """Pointers and the ints a 2-D GEMM launcher passes for contiguous A (M, K), C (M, N) and B
    (K, N), row-major or (fp8, as torch._scaled_mm wants it) column-major."""
    sbk, sbn = (1, K) if b_col_major else (N, 1)
    return (f"*{a}", f"*{b}", f"*{c}", M, N, K, K, 1, sbk, sbn, N, 1)


def _gemm_cases() -> list[Case]:
    from .kernels.gemm import GPU_CONFIG_SETS

    cases = []
    kernel = "nbhelpers.kernels.gemm:matmul_kernel"
    dtypes = {"16-bit": ("bf16", "ieee", "bf16"), "tf32": ("fp32", "tf32", "fp32"), "ieee": ("fp32", "ieee", "fp32")}
    # the autotuned path (block=None) as the benchmarks launch it, aligned (4096^3) and not (1000^3):
    # every config of the set the launcher tunes over
    for (kind, aligned), configs in GPU_CONFIG_SETS.items():
        dtype, prec, out = dtypes[kind]
        shape = 4096 if aligned else 1000
        for cfg in configs:
            cases.append(
                Case(
                    kernel,
                    f"{dtype} {prec} -> {out}, {shape}^3",
                    gemm_args(dtype, dtype, out, shape, shape, shape),
                    {**cfg.kwargs, "INPUT_PRECISION": prec},
                    cfg.num_warps,
                    cfg.num_stages,
                )
            )
    # the launcher's default block (32, 32, 32), group_m 8, and Triton's default warps and stages
    for dtype in ("fp32", "bf16"):
        for target in ("sm_90", "sm_80"):
            cases.append(
                Case(
                    kernel,
                    f"{dtype} ieee -> fp32, matmul() default",
                    gemm_args(dtype, dtype, "fp32", 256, 256, 256),
                    {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "INPUT_PRECISION": "ieee", "GROUP_M": 8},
                    target=target,
                )
            )
    return cases


def _fp8_args(fp8: str, out: str, M: int, N: int, K: int, scales: tuple) -> tuple:
    base = gemm_args(fp8, fp8, out, M, N, K, b_col_major=True)
    return base[:3] + ("*fp32", "*fp32") + base[3:] + scales


def _scaled_cases() -> list[Case]:
    from .kernels.scaled_gemm import BLOCK_SCALED_GPU_CONFIGS, FP8_FAST_GPU_CONFIGS, FP8_GPU_CONFIGS, SCALE_BLOCK

    cases = []
    scaled = "nbhelpers.kernels.scaled_gemm:scaled_matmul_kernel"
    blocked = "nbhelpers.kernels.scaled_gemm:block_scaled_matmul_kernel"
    for shape in (4096, 1000):
        aligned = shape % 16 == 0
        nk = -(-shape // SCALE_BLOCK)
        for precise, configs in ((True, FP8_GPU_CONFIGS), (False, FP8_FAST_GPU_CONFIGS)):
            for cfg in configs:
                cases.append(
                    Case(
                        scaled,
                        f"e4m3 row/col scales -> bf16, {'promoted' if precise else 'fast'}, {shape}^3",
                        _fp8_args("fp8e4nv", "bf16", shape, shape, shape, (1, 1)),
                        {**cfg.kwargs, "PRECISE_ACC": precise},
                        cfg.num_warps,
                        cfg.num_stages,
                        default=aligned,
                    )
                )
        # block scales: sA (M, K/128) and sB (K/128, N/128), both row-major; bf16 out (timed) and
        # fp32 out (the benchmark's output check)
        for out in ("bf16", "fp32") if aligned else ("bf16",):
            for cfg in BLOCK_SCALED_GPU_CONFIGS:
                cases.append(
                    Case(
                        blocked,
                        f"e4m3 128x128 block scales -> {out}, {shape}^3",
                        _fp8_args("fp8e4nv", out, shape, shape, shape, (nk, 1, nk, 1)),
                        {**cfg.kwargs, "SCALE_BLOCK_N": SCALE_BLOCK},
                        cfg.num_warps,
                        cfg.num_stages,
                        default=aligned,
                    )
                )
    # the A100: e5m2 dots compile for sm_80, e4m3 dots do not (the launchers say so in a sentence)
    cfg = FP8_GPU_CONFIGS[-1]
    for fp8, expect in (("fp8e5", None), ("fp8e4nv", "fp8e4nv not supported")):
        cases.append(
            Case(
                scaled,
                f"{'e5m2' if fp8 == 'fp8e5' else 'e4m3'} -> fp32 on sm_80",
                _fp8_args(fp8, "fp32", 4096, 4096, 4096, (1, 1)),
                {**cfg.kwargs, "PRECISE_ACC": True},
                cfg.num_warps,
                cfg.num_stages,
                target="sm_80",
                expect_error=expect,
            )
        )
    return cases


def _grouped_cases() -> list[Case]:
    """The grouped GEMM of chapter 10 at DeepSeek-V3's up projection (T*k = 32,768 rows, 256
    experts, K = 7168, N = 2048): bf16 with every tuned config, fp8 with its default block and
    K-major expert weights (E, N, K) seen as (E, K, N)."""
    from .kernels.grouped_gemm import DEFAULT_GROUP_M, FP8_DEFAULT_BLOCK, GPU_CONFIGS

    R, E, N, K = 32768, 256, 2048, 7168
    where = "nbhelpers.kernels.grouped_gemm:"

    def args(dt, out, w_strides, fp8=False):
        a = (f"*{dt}", f"*{dt}", f"*{out}", "*i64", "*i32") + (("*fp32", "*fp32") if fp8 else ())
        return a + (R, E, N, K, K, 1) + w_strides + (N, 1) + ((N, 1) if fp8 else ())

    cases = []
    for target in ("sm_90", "sm_80"):
        for cfg in GPU_CONFIGS:
            cases.append(
                Case(
                    where + "grouped_matmul_kernel",
                    "bf16 -> bf16, DeepSeek-V3 up projection",
                    args("bf16", "bf16", (K * N, N, 1)),
                    {**cfg.kwargs, "BLOCK_E": E, "GROUP_M": DEFAULT_GROUP_M, "INPUT_PRECISION": "ieee"},
                    cfg.num_warps,
                    cfg.num_stages,
                    target=target,
                )
            )
    bm, bn, bk = FP8_DEFAULT_BLOCK
    cases.append(
        Case(
            where + "scaled_grouped_matmul_kernel",
            "e4m3 K-major weights -> bf16, DeepSeek-V3 up projection",
            args("fp8e4nv", "bf16", (N * K, 1, K), fp8=True),
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "BLOCK_E": E, "GROUP_M": DEFAULT_GROUP_M},
        )
    )
    return cases


def _pressure_cases() -> list[Case]:
    """Chapter 09's register-pressure kernel at every k benchmarks/gpu_register_pressure.py times:
    not defaults (past k = 58 it spills on purpose)."""
    from .kernels import pressure

    return [
        Case(
            pressure.KERNEL,
            f"EXTRA={k}",
            pressure.launch_args(),
            {"BLOCK": pressure.BLOCK, "EXTRA": k},
            num_warps=pressure.NUM_WARPS,
            default=False,
        )
        for k in range(0, 67, 2)
    ]


def _copy_cases() -> list[Case]:
    cases = []
    n = 1 << 26
    for block in (1024, 2048, 4096, 8192):  # benchmarks/gpu_copy_bandwidth.py's COPY_BLOCKS
        cases.append(Case("nbhelpers.kernels.copy:copy_kernel", "fp32", ("*fp32", "*fp32", n), {"BLOCK": block}))
    cases.append(
        Case(
            "nbhelpers.kernels.copy:strided_read_kernel",
            "fp32, stride 8",
            ("*fp32", "*fp32", n // 8, 8),
            {"BLOCK": 1024},
        )
    )
    for bm, bn in ((32, 32), (64, 64)):  # the launcher's default and the benchmark's other tile
        cases.append(
            Case(
                "nbhelpers.kernels.copy:transpose_kernel",
                "fp32",
                ("*fp32", "*fp32", 8192, 8192, 8192, 1, 8192, 1),
                {"BLOCK_M": bm, "BLOCK_N": bn},
            )
        )
    return cases


def _topk_cases() -> list[Case]:
    """Chapter 11's top-k kernels as :func:`nbhelpers.kernels.topk.topk` launches them on one row
    of Llama 3's vocabulary (V = 128,256), for bf16 and fp32 logits (the kernels read their int16
    / int32 bit views) and k = 8, 50 and 1,024: the running top-k of "row" (one chunk, FINAL) and
    of "two_stage" (its first stage and its merge), and radix select (k = 50 and 1,024). The
    configs come from the launcher's plan(); Triton's default warps and stages, as the launcher
    leaves them."""
    from .kernels.topk import plan
    from .topk import KEY_FORMATS

    V = 128_256
    where = "nbhelpers.kernels.topk:"
    cases = []
    for fmt in ("bf16", "fp32"):
        f = KEY_FORMATS[fmt]
        bits = f"*i{f.bits}"
        keys = {"KEY_BITS": f.bits, "EXP_MASK": f.exp_mask}
        for k in (8, 50, 1024):
            label = f"{fmt} logits, V = {V:,}, k = {k}"
            row = plan(V, k, "row")
            cases.append(
                Case(
                    where + "topk_chunk_kernel",
                    label + ", row",
                    (bits, "*i64", bits, "*i64", V, k, V, V, 1),  # the launcher passes idx as the unused part
                    {**keys, "K_PAD": row["K_PAD"], "BLOCK_V": row["BLOCK_V"], "FINAL": True},
                )
            )
            two = plan(V, k, "two_stage")
            n = two["n_chunks"]
            cases.append(
                Case(
                    where + "topk_chunk_kernel",
                    label + ", two_stage first stage",
                    (bits, "*i64", bits, "*i64", V, k, V, two["CHUNK"], n),
                    {**keys, "K_PAD": two["K_PAD"], "BLOCK_V": two["BLOCK_V"], "FINAL": False},
                )
            )
            cases.append(
                Case(
                    where + "topk_merge_kernel",
                    label + ", two_stage merge",
                    ("*i64", bits, bits, "*i64", k, V, n),
                    {"KEY_BITS": f.bits, "K_PAD": two["K_PAD"]},
                )
            )
            if k == 8:  # radix select's code does not depend on k; 50 and 1,024 differ only in
                continue  # Triton's specialisation of k (1,024 is a multiple of 16)
            radix = plan(V, k, "radix")
            cases.append(
                Case(
                    where + "radix_select_kernel",
                    label + ", radix",
                    (bits, bits, "*i64", V, k, V),
                    {**keys, "DIGIT_BITS": radix["DIGIT_BITS"], "BLOCK_V": radix["BLOCK_V"]},
                )
            )
    return cases


def _solution_cases() -> list[Case]:
    """The solutions' kernels, launched as the solution notebooks launch them (Triton's default
    warps and stages)."""
    ex08, ex09, ex10, ex11 = (
        "solutions/ex08_gpu_memory.ipynb",
        "solutions/ex09_gemm_kernels.ipynb",
        "solutions/ex10_grouped_gemm.ipynb",
        "solutions/ex11_topk.ipynb",
    )
    cases = [
        Case(f"{ex08}:masked_copy_kernel", "fp32", ("*fp32", "*fp32", 1000), {"BLOCK": 256}, source="solution"),
        Case(
            f"{ex09}:tile_matmul_kernel",
            "fp32",
            ("*fp32", "*fp32", "*fp32", 100, 90, 70, 88, 1, 176, 1, 90, 1),
            {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16},
            source="solution",
        ),
        Case(
            f"{ex09}:scaled_epilogue_kernel",
            "fp32",
            ("*fp32", "*fp32", "*fp32", "*fp32", 100, 90, 106, 1, 1, 1),
            {"BLOCK_M": 16, "BLOCK_N": 16},
            source="solution",
        ),
        Case(f"{ex10}:tile_lookup_kernel", "int32", ("*i32", "*i32", 8, 40), {"BLOCK_M": 64}, source="solution"),
        # the launcher's row stride is V plus one chunk (NaN padding after each row)
        Case(
            f"{ex11}:topk_chunk_kernel",
            "fp32, V = 128,256, k = 50",
            ("*fp32", "*i64", 128256, 50, 129280, 126),
            {"CHUNK": 1024, "K_PAD": 64},
            source="solution",
        ),
        Case(
            f"{ex11}:topk_merge_kernel",
            "fp32, V = 128,256, k = 50",
            ("*fp32", "*i64", "*fp32", "*i64", 128256, 50, 129280, 126),
            {"K_PAD": 64, "NC_PAD": 128},
            source="solution",
        ),
    ]
    return [c for c in cases if _kernel_exists(c.kernel)]


def _test_cases() -> list[Case]:
    return [
        c
        for c in [
            Case(
                "tests/test_kernels_gemm.py:_tile_probe_kernel",
                "int32",
                ("*i32", 100, 257),
                {"BLOCK_M": 32, "BLOCK_N": 32, "GROUP_M": 3},
                source="test",
            ),
        ]
        if _kernel_exists(c.kernel)
    ]


def course_cases(kernels: str | None = None, sources=("package", "solution", "test")) -> list[Case]:
    """Every case of the course, or those whose kernel name contains ``kernels``."""
    cases = []
    if "package" in sources:
        cases += _gemm_cases() + _scaled_cases() + _grouped_cases() + _copy_cases() + _pressure_cases() + _topk_cases()
    if "solution" in sources:
        cases += _solution_cases()
    if "test" in sources:
        cases += _test_cases()
    if kernels:
        cases = [c for c in cases if kernels in c.kernel]
    return cases


# ====================================================================== compiling one case


def _kernel_exists(ref: str) -> bool:
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
        or (isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant))
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


def cases_for(target: str, cases: list[Case]) -> list[Case]:
    """The cases to compile for ``target``: its own where the course lists some (sm_90, sm_80),
    else the sm_90 cases compiled for it (what a GPU of that capability would compile). Below
    sm_80 there are none: the sm_90 configs are sized for GPUs with ``cp.async`` and bf16 tensor
    cores, and a T4 (sm_75) compiles their bf16 dots as FMA loops (``python -m
    nbhelpers.gpu_targets`` compiles the chapters' own launches for sm_75)."""
    cap = capability_of(target)
    own = [c for c in cases if c.target == target]
    if own or target in TARGETS.keys():
        return own
    if cap < 80:
        raise ValueError(
            f"the full check compiles for sm_80 and newer, not {target}; "
            "python -m nbhelpers.gpu_targets compiles the chapters' launches for sm_75"
        )
    return [dataclasses.replace(c, target=target) for c in cases if c.target == "sm_90" and not c.expect_error]


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

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
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


def compile_meta(jobs: int, cold: bool, command: str) -> dict:
    """A results file's meta: the command, the UTC date, the Triton, ptxas and Python versions, the
    machine, the jobs, whether the cache was cold, and the shared-memory limits by target."""
    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    try:
        ptxas = get_ptxas(90).version
    except Exception:
        ptxas = None
    from .device import cpu_model

    return {
        "script": "python -m nbhelpers.compile_check",
        "command": command,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "triton": triton.__version__,
        "ptxas": ptxas,
        "python": platform.python_version(),
        "machine": f"{cpu_model() or platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "jobs": jobs,
        "cold_cache": cold,
        "shared_limit": {f"sm_{k}": v for k, v in SHARED_LIMIT.items()},
    }


def _row_key(c) -> tuple:
    """(kernel, label, config, target) of a Case or of a results row: what names one row."""
    if isinstance(c, Case):
        return (c.kernel.rpartition(":")[2], c.label, c.config, c.target)
    return (c["kernel"], c["label"], c["config"], c["target"])


def _kept_rows(path: Path, cases: list[Case], meta: dict) -> tuple[list[dict], dict, float | None]:
    """For ``--update``: the rows of the results file at ``path`` that no case of this run
    replaces (in their order), the file's own meta with this run appended to its ``updates``
    (what ran, when, where, how many cases), and the file's wall time."""
    try:
        old = json.loads(path.read_text())
        old_meta, old_rows = dict(old["meta"]), list(old["rows"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--update needs a results file of this check at {path}: {e}") from None
    for tool in ("triton", "ptxas"):  # rows of one table must come from one compiler
        if old_meta.get(tool) != meta[tool]:
            raise SystemExit(
                f"--update: {path} was compiled with {tool} {old_meta.get(tool)}, this run has "
                f"{meta[tool]}; recompile every case (without --update)"
            )
    now = {_row_key(c) for c in cases}
    kept = [r for r in old_rows if _row_key(r) not in now]
    update = {k: meta[k] for k in ("command", "date", "triton", "ptxas", "machine", "jobs", "cold_cache")}
    old_meta.pop("complete", None)
    old_meta["updates"] = [*old_meta.get("updates", []), {**update, "cases": len(cases)}]
    return kept, old_meta, old.get("wall_s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m nbhelpers.compile_check",
        description="Compile every kernel of the course for sm_90 / sm_80 without a GPU "
        "and check registers, spills and shared memory.",
    )
    ap.add_argument("--kernels", help="only kernels whose name contains this string")
    ap.add_argument("--sources", default="package,solution,test", help="package,solution,test (default: all)")
    ap.add_argument(
        "--target", help="only this target (sm_90, sm_80; another sm_NN from sm_80 up compiles the sm_90 cases for it)"
    )
    ap.add_argument("--defaults-only", action="store_true", help="only the configs the course uses by default")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiles at a time (default: all cores)")
    ap.add_argument("--cold", action="store_true", help="compile into an empty Triton cache (to measure compile times)")
    ap.add_argument("--out", default=str(DEFAULT_RESULTS), help="results file (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="list the cases and stop")
    ap.add_argument(
        "--warm",
        action="store_true",
        help="exit 0 whatever the findings (on a GPU machine: fill Triton's cache before the benchmarks)",
    )
    ap.add_argument("--gpu", help="the GPU this run prepares, recorded in the results file's meta")
    ap.add_argument(
        "--update",
        action="store_true",
        help="replace only the rows of the cases compiled now and keep the results file's others "
        "(with --kernels: add a new kernel's cases without recompiling the course)",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker_loop()
        return 0
    cases = course_cases(args.kernels, tuple(s.strip() for s in args.sources.split(",")))
    if args.target:
        try:
            cases = cases_for(args.target, cases)
        except ValueError as e:
            if args.warm:  # a GPU the check has no limits for: nothing to prepare, not a failure
                print(f"compile check: nothing to compile for {args.target} ({e})")
                return 0
            ap.error(str(e))
    if args.defaults_only:
        cases = [c for c in cases if c.default]
    if args.list:
        for c in cases:
            print(f"{c.target}  {c.kernel}  [{c.label}]  {c.config}{'' if c.default else '  (not default)'}")
        print(f"{len(cases)} cases")
        return 0
    if args.cold:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")
    from .results import ResultsFile

    command = "python -m nbhelpers.compile_check " + " ".join(sys.argv[1:] if argv is None else argv)
    meta = compile_meta(args.jobs, args.cold, command.strip())
    if args.gpu:
        meta["gpu"] = args.gpu
    kept: list[dict] = []
    if args.update:
        kept, meta, old_wall_s = _kept_rows(Path(args.out), cases, meta)
    results = ResultsFile(args.out, meta)
    results.rows = list(kept)  # on disk with the first new row: a stopped run loses none of them
    t0 = time.perf_counter()

    def on_row(r):
        results.add(r)
        state = (
            r["status"]
            if r["status"] != "ok"
            else (f"{r['registers']:3d} regs, spill {r['spill_stores']:4d} B, smem {r['shared']:7,d} B, {r['mma']}")
        )
        print(f"{r['compile_s']:6.1f} s  {r['target']}  {r['kernel']:<28s} {r['config']:<34s} {state}", flush=True)

    new = check(cases, args.jobs, on_row)
    wall_s = round(time.perf_counter() - t0, 1)
    rows = kept + new  # with --update: the whole table is judged and written, the new rows last
    bad = findings(rows)
    if args.update:
        results.meta["updates"][-1]["wall_s"] = wall_s
        wall_s = old_wall_s
    results.finish(rows=rows, wall_s=wall_s, findings=bad)
    print(
        f"{len(new)} cases in {time.perf_counter() - t0:.0f} s with {args.jobs} jobs; wrote {args.out}"
        + (f" ({len(kept)} rows kept)" if args.update else "")
    )
    for b in bad:
        print("FINDING:", b)
    return 1 if bad and not args.warm else 0


if __name__ == "__main__":
    raise SystemExit(main())
