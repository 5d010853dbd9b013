"""The compile check (nbhelpers.compile_check; the cases: nbhelpers.tooling.compile_cases): the
course's kernels compiled for sm_90 and sm_80 without a GPU, and the rules a result must keep (no
compile error, shared memory within the target's limit, no spill in a default config).

Here: the parsers and the rules on canned input (each rule shown to fail), a representative
subset of real compiles (the largest default config of each config set, the solutions' kernels,
the A100's missing e4m3, and two configs the course dropped, which the check must catch), and the
committed results file against the cases of today's code. ``make gpu-compile`` compiles every case.
"""

from __future__ import annotations

from nbhelpers.device import setup_device

setup_device(verbose=False)  # before the case lists import the kernel modules: the interpreter on a CPU

import json
import re
from pathlib import Path

import pytest

from nbhelpers.compile_check import (
    SHARED_LIMIT,
    Case,
    check,
    findings,
    instruction_summary,
    kernel_of,
    parse_ptxas,
)
from nbhelpers.families import gemm_args
from nbhelpers.tooling.compile_cases import DEFAULT_RESULTS, course_cases

PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'matmul_kernel' for 'sm_90a'
ptxas info    : Function properties for matmul_kernel
    24 bytes stack frame, 912 bytes spill stores, 784 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 24 bytes cumulative stack size
"""


def test_parse_ptxas_reads_registers_spills_and_stack():
    assert parse_ptxas(PTXAS_LOG) == {"registers": 255, "spill_stores": 912, "spill_loads": 784, "stack": 24}
    assert parse_ptxas("ptxas info    : Used 40 registers")["spill_stores"] == 0


def test_instruction_summary_names_the_matrix_instruction():
    wg = "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {...};\ncp.async.cg.shared.global [a], [b], 16;"
    assert instruction_summary(wg) == {"mma": "wgmma m64n256k16 f32.bf16.bf16", "cp_async": 1, "tma": 0}
    mma = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {...};"
    assert instruction_summary(mma)["mma"] == "mma.sync m16n8k8 f32.tf32.tf32.f32"
    assert instruction_summary("fma.rn.f32 %f1, %f2, %f3, %f4;")["mma"] == "none"


def _row(**kw):
    base = {
        "kernel": "k",
        "label": "l",
        "config": "c",
        "target": "sm_90",
        "default": True,
        "status": "ok",
        "registers": 100,
        "spill_stores": 0,
        "spill_loads": 0,
        "shared": 1000,
        "shared_limit": SHARED_LIMIT[90],
    }
    return {**base, **kw}


@pytest.mark.parametrize(
    "row, fragment",
    [
        (_row(status="error", error="CompilationError: boom"), "does not compile"),
        (_row(shared=SHARED_LIMIT[90] + 1), "shared memory"),
        (_row(spill_stores=4, spill_loads=4), "spills"),
        (_row(status="ok", expect_error="fp8e4nv not supported"), "expected to stop"),
        (_row(status="error", error="other", expect_error="fp8e4nv not supported"), "expected"),
    ],
)
def test_each_rule_can_fail(row, fragment):
    out = findings([row])
    assert len(out) == 1 and fragment in out[0]


def test_rules_pass_what_they_should():
    assert (
        findings(
            [
                _row(),
                _row(default=False, spill_stores=900),
                _row(status="error", error="fp8e4nv not supported", expect_error="fp8e4nv not supported"),
            ]
        )
        == []
    )


def test_every_config_set_is_in_the_cases():
    from nbhelpers.kernels import gemm, scaled_gemm

    cases = course_cases(sources=("package",))
    have = {
        (
            c.kernel.rpartition(":")[2],
            c.num_warps,
            c.num_stages,
            tuple(sorted((k, v) for k, v in c.constexprs.items() if k.startswith(("BLOCK", "GROUP")))),
        )
        for c in cases
    }
    sets = [("matmul_kernel", cfgs) for cfgs in gemm.GPU_CONFIG_SETS.values()]
    sets += [
        ("scaled_matmul_kernel", scaled_gemm.FP8_GPU_CONFIGS),
        ("scaled_matmul_kernel", scaled_gemm.FP8_FAST_GPU_CONFIGS),
        ("block_scaled_matmul_kernel", scaled_gemm.BLOCK_SCALED_GPU_CONFIGS),
    ]
    for name, cfgs in sets:
        for cfg in cfgs:
            assert (name, cfg.num_warps, cfg.num_stages, tuple(sorted(cfg.kwargs.items()))) in have, (name, cfg)


# ------------------------------------------------------------------ real compiles (a subset)


def _largest_defaults() -> list[Case]:
    """Per kernel and label, the default config with the most accumulator elements per thread:
    the one nearest to spilling."""
    best: dict = {}
    for c in course_cases(sources=("package",)):
        if not c.default or c.target != "sm_90" or "BLOCK_N" not in c.constexprs:
            continue
        load = c.constexprs["BLOCK_M"] * c.constexprs["BLOCK_N"] / c.num_warps
        key = (c.kernel, c.label)
        if key not in best or load > best[key][0]:
            best[key] = (load, c)
    return [c for _, c in best.values()]


SUBSET = (
    _largest_defaults()
    + [c for c in course_cases(sources=("package",)) if c.target == "sm_80"]
    + course_cases(sources=("solution", "test"))
)
# two configs the 2-byte list once also used for fp32 "ieee" operands: too much shared memory
# for one block, and a spill; the check must report both
DROPPED = [
    Case(
        "nbhelpers.kernels.gemm:matmul_kernel",
        "fp32 ieee, dropped",
        gemm_args("fp32", "fp32", "fp32", 4096, 4096, 4096),
        {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "INPUT_PRECISION": "ieee"},
        4,
        4,
    ),
    Case(
        "nbhelpers.kernels.gemm:matmul_kernel",
        "fp32 ieee, dropped",
        gemm_args("fp32", "fp32", "fp32", 4096, 4096, 4096),
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "INPUT_PRECISION": "ieee"},
        8,
        3,
    ),
]


@pytest.fixture(scope="module")
def compiled():
    rows = check(SUBSET + DROPPED, jobs=2)
    return rows[: len(SUBSET)], rows[len(SUBSET) :]


def test_the_subset_compiles_within_the_rules(compiled):
    rows, _ = compiled
    assert len(rows) >= 15
    assert findings(rows) == []
    assert all(r["status"] == "ok" for r in rows if not r.get("expect_error"))


def test_what_the_compiler_chose(compiled):
    rows, _ = compiled
    by = {(r["kernel"], r["label"], r["target"]): r for r in rows}
    mma = {k: r.get("mma") for k, r in by.items()}
    # bf16 and TF32 operands on the tensor cores (wgmma on sm_90); fp32 "ieee" operands by FMA
    assert mma[("matmul_kernel", "bf16 ieee -> bf16, 4096^3", "sm_90")].startswith("wgmma")
    assert mma[("matmul_kernel", "fp32 tf32 -> fp32, 4096^3", "sm_90")].endswith("tf32.tf32")
    assert mma[("matmul_kernel", "fp32 ieee -> fp32, 4096^3", "sm_90")] == "none"
    assert mma[("matmul_kernel", "bf16 ieee -> fp32, matmul() default", "sm_80")].startswith("mma.sync")
    # the exercise's split-K kernel asks for "ieee": no TF32 rounding of its fp32 inputs on any GPU
    assert mma[("split_k_kernel", "fp32", "sm_90")] == "none"
    # an aligned 2-byte GEMM is fed by asynchronous copies; an unaligned one gets none
    assert by[("matmul_kernel", "bf16 ieee -> bf16, 4096^3", "sm_90")]["cp_async"] > 0
    assert by[("matmul_kernel", "bf16 ieee -> bf16, 1000^3", "sm_90")]["cp_async"] == 0
    # the A100 has no e4m3 dot, and has an e5m2 one
    assert "fp8e4nv not supported" in by[("scaled_matmul_kernel", "e4m3 -> fp32 on sm_80", "sm_80")]["error"]
    assert by[("scaled_matmul_kernel", "e5m2 -> fp32 on sm_80", "sm_80")]["status"] == "ok"


def test_the_check_catches_the_dropped_configs(compiled):
    _, dropped = compiled
    too_big, spills = dropped
    assert too_big["shared"] > SHARED_LIMIT[90]
    assert spills["spill_stores"] > 0 and spills["registers"] == 255
    out = findings(dropped)
    assert any("shared memory" in f for f in out) and any("spills" in f for f in out)


# ------------------------------------------------------------------ the committed table


@pytest.mark.parametrize("name,triton", [("compile_check.json", "3.7.1"), ("compile_check_triton-3.6.0.json", "3.6.0")])
def test_the_committed_table_is_todays(name, triton):
    """benchmarks/results/compile_check.json (chapter 09 reads it) holds one complete row for every
    case of today's code and no finding: changing a config means running `make gpu-compile`. So
    does the same check with Triton 3.6.0, the version the course's first GPU machines run: every
    kernel the GPU run launches compiles there too, within the rules."""
    path = Path(DEFAULT_RESULTS).with_name(name)
    data = json.loads(path.read_text())
    assert data["meta"]["triton"] == triton
    assert data["meta"]["complete"] is True and data["findings"] == []
    assert all(r["status"] == "ok" or r.get("expect_error", "\0") in r.get("error", "") for r in data["rows"])
    key = lambda r: (r["kernel"], r["label"], r["config"], r["target"])  # noqa: E731
    recorded = {key(r) for r in data["rows"]}
    expected = {(c.kernel.rpartition(":")[2], c.label, c.config, c.target) for c in course_cases()}
    assert expected - recorded == set(), "cases missing from the table: run make gpu-compile"
    assert recorded - expected == set(), "the table has cases the code no longer has: run make gpu-compile"


CACHE_KEY_PROBE = r"""
import json, os
os.environ.pop("TRITON_INTERPRET", None)
from triton import knobs
from triton.backends.compiler import GPUTarget
from nbhelpers.compile_check import launch_spec, _tensor, _kernel
from nbhelpers.tooling.compile_cases import course_cases
from nbhelpers.kernels.gemm import GPU_CONFIG_SETS
target = GPUTarget("cuda", 90, 32)
out = []
for c in [c for c in course_cases(kernels="matmul_kernel", sources=("package",)) if c.target == "sm_90"][:4]:
    fn = _kernel(c.kernel)
    # what a tuned launch passes: the autotuner runs fn.run(*args, **dict(meta, **config.all_kwargs())),
    # and JITFunction.run adds debug and instrumentation_mode before it binds
    cfg = next(g for s in GPU_CONFIG_SETS.values() for g in s
               if {**g.kwargs, "INPUT_PRECISION": c.constexprs["INPUT_PRECISION"]} == c.constexprs
               and (g.num_warps, g.num_stages) == (c.num_warps, c.num_stages))
    kw = dict({"INPUT_PRECISION": c.constexprs["INPUT_PRECISION"]}, **cfg.all_kwargs())
    kw["debug"] = kw.get("debug", fn.debug) or knobs.runtime.debug
    kw["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature
    backend = make_backend(target)
    bound, spec, opts = create_function_from_signature(fn.signature, fn.params, backend)(
        *[_tensor(a) if isinstance(a, str) else a for a in c.args], **kw)
    run = fn._pack_args(backend, kw, bound, spec, opts)
    ours = launch_spec(fn, c, target)
    out.append([run[0].__dict__ == ours[0].__dict__, run[1:3] == ours[1:3], str(run[3]) == str(ours[3])])
print(json.dumps(out))
"""


def test_the_check_compiles_what_a_tuned_launch_compiles():
    """The options, signature, constants and attributes the compile check hands Triton are those a
    tuned launch on a GPU hands it, so gpu_report's compile step fills the cache the autotuners
    read (compared here, without a GPU, for the first GEMM configs; a fresh process: the kernels
    must be imported without the interpreter)."""
    import subprocess
    import sys

    from nbhelpers.compile_check import ROOT

    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run(
        [sys.executable, "-c", CACHE_KEY_PROBE], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(rows) == 4 and all(all(r) for r in rows), rows


@pytest.mark.parametrize("target", ["sm_75", "sm_70"])
def test_a_gpu_the_full_check_does_not_compile_for(capsys, target):
    """On the GPU run the compile step asks for the GPU's own capability: one below sm_80 (sm_75,
    a T4: the check knows its shared-memory limit, but the sm_90 configs are not compiled for it;
    sm_70: no limit at all) is nothing to prepare with --warm, an error without."""
    from nbhelpers.tooling.compile_cases import main

    assert main(["--target", target, "--warm", "--list"]) == 0
    assert f"nothing to compile for {target}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["--target", target, "--list"])
    assert e.value.code == 2


@pytest.mark.parametrize("jobs", [0, -2, 1.0, True, "2", None])
def test_jobs_must_be_a_positive_int(jobs):
    msg = rf"^jobs must be a positive int \(worker processes\), got {re.escape(repr(jobs))}$"
    with pytest.raises(ValueError, match=msg):
        check([], jobs=jobs)


def test_sm_75_has_the_t4_limit_and_sm_86_gets_the_sm_90_cases():
    """sm_75 (a T4) is a target with its per-block limit, 64 KiB; from sm_80 up a target the course
    lists no cases for gets the sm_90 cases (without those expected to fail)."""
    from nbhelpers.compile_check import capability_of
    from nbhelpers.tooling.compile_cases import cases_for

    assert capability_of("sm_75") == 75 and SHARED_LIMIT[75] == 65_536
    cases = course_cases("copy", sources=("package",))
    assert {c.target for c in cases_for("sm_86", cases)} == {"sm_86"}
    assert len(cases_for("sm_86", cases)) == len([c for c in cases if c.target == "sm_90"])


def test_update_keeps_the_other_rows_and_refuses_another_compiler(tmp_path):
    """--update (nbhelpers.tooling.compile_cases._kept_rows): the rows of the cases compiled now are
    dropped from the old file (the new ones replace them), every other row is kept in its order,
    the run is appended to the meta's updates; a file made by another Triton or ptxas is refused."""
    from nbhelpers.tooling.compile_cases import _kept_rows, _row_key

    case = course_cases("topk")[0]
    kernel, label, config, target = _row_key(case)
    replaced = {"kernel": kernel, "label": label, "config": config, "target": target, "status": "ok"}
    others = [dict(replaced, label="another label"), dict(replaced, target="sm_80")]
    old_meta = {"triton": "3.7.1", "ptxas": "12.9", "date": "then", "complete": True}
    path = tmp_path / "compile_check.json"
    path.write_text(json.dumps({"meta": old_meta, "rows": [others[0], replaced, others[1]], "wall_s": 117.0}))
    meta = {"triton": "3.7.1", "ptxas": "12.9", "command": "c", "date": "now", "machine": "m", "jobs": 2}
    meta["cold_cache"] = True
    kept, new_meta, wall_s = _kept_rows(path, [case], meta)
    assert kept == others and wall_s == 117.0
    assert new_meta["date"] == "then" and "complete" not in new_meta
    assert new_meta["updates"] == [
        {"command": "c", "date": "now", "triton": "3.7.1", "ptxas": "12.9", "machine": "m", "jobs": 2,
         "cold_cache": True, "cases": 1}
    ]  # fmt: skip
    with pytest.raises(SystemExit, match="compiled with triton 3.7.1, this run has 3.8.0"):
        _kept_rows(path, [case], dict(meta, triton="3.8.0"))
    with pytest.raises(SystemExit, match="needs a results file"):
        _kept_rows(tmp_path / "missing.json", [case], meta)


# ------------------------------------------------------------------ the loops of the SASS

_SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_3:
        /*0010*/                   LDS R2, [R3] ;
        /*0020*/                   IADD3 R4, R2, 0x1, RZ ;
        /*0030*/              @!P2 BRA `(.L_x_1) ;
        /*0040*/                   IMAD R5, R4, R4, RZ ;
.L_x_2:
        /*0050*/                   SHFL.BFLY PT, R6, R5, 0x10, 0x1f ;
        /*0060*/                   BRA.DIV UR4, `(.L_x_9) ;
        /*0070*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0080*/               @P3 BRA `(.L_x_2) ;
.L_x_1:
        /*0090*/                   IADD3 R7, R7, 0x1, RZ ;
        /*00a0*/               @P5 BRA `(.L_x_3) ;
        /*00b0*/                   EXIT ;
.L_x_9:
        /*00c0*/                   WARPSYNC.COLLECTIVE R8, `(.L_x_10) ;
.L_x_10:
        /*00d0*/                   BRA `(.L_x_2) ;
.L_x_11:
        /*00e0*/                   BRA `(.L_x_11);
"""


def test_sass_loops_counts_each_loop_and_its_shortest_trip():
    """An outer loop (0x10-0xa0, 10 instructions) whose guard at 0x30 skips an inner loop
    (0x50-0x80): its shortest trip is 0x10, 0x20, 0x30, 0x90, 0xa0, five; the inner loop's trip
    passes BRA.DIV (a check, not taken) and counts all four. Each loop's opcodes count every
    instruction of its span once, by the name before the first dot (BRA.DIV is a BRA, a guarded
    @P3 BRA too). The jump back from the out-of-line
    path (0xd0 -> 0x50, past EXIT) is no loop, nor is the trap's branch to itself."""
    from nbhelpers.compile_check import sass_loops

    loops = sass_loops(_SASS)
    inner = {"SHFL": 1, "BRA": 2, "BAR": 1}
    assert loops == [
        {
            "instructions": 10,
            "shortest": 5,
            "cycles": 10,
            "shortest_cycles": 5,
            "opcodes": {"LDS": 1, "IADD3": 2, "IMAD": 1, **inner, "BRA": 4},
            "depth": 0,
        },
        {"instructions": 4, "shortest": 4, "cycles": 4, "shortest_cycles": 4, "opcodes": inner, "depth": 1},
    ]
    assert sass_loops("") == []


def test_issue_cycles_take_the_slowest_of_one_a_cycle_and_each_pipe():
    """One instruction a cycle, and no pipe faster than the CUDA guide's throughput for compute
    capability 9.0 allows: integer ALU instructions and IMAD two cycles each (separate pipes), a
    shuffle four, a population count eight; a predicate guard does not change the instruction."""
    from nbhelpers.compile_check import issue_cycles

    assert issue_cycles(["FFMA R1, R2, R3, R4", "FADD R1, R1, R2", "LDS R2, [R3]"]) == 3
    assert issue_cycles(["LOP3.LUT R1, R2", "@P0 ISETP.GT.AND P1", "IADD3 R1", "FADD R1"]) == 6  # 3 ALU
    assert issue_cycles(["LOP3.LUT R1", "IMAD R2", "LOP3.LUT R3", "IMAD R4"]) == 4  # two pipes side by side
    assert issue_cycles(["SHFL.BFLY PT, R1", "FADD R1", "FADD R2"]) == 4
    assert issue_cycles(["POPC R1, R2"]) == 8
    assert issue_cycles([]) == 0


def test_narrow_conversions_lists_the_fp8_fp4_and_scale_casts():
    from nbhelpers.compile_check import narrow_conversions

    ptx = (
        "cvt.rn.satfinite.e4m3x2.f32 %rs1, %f2, %f1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 %rs2, %f4, %f3;\n"
        "cvt.rn.f16x2.e5m2x2 %r1, %rs3;\n"
        "cvt.rp.satfinite.ue8m0x2.f32 %rs4, %f5, %f6;\n"
        "cvt.rn.satfinite.e2m1x2.f32 %rs5, %f7, %f8;\n"
        "cvt.u64.u32 %rd1, %r2;\ncvt.rn.bf16.f32 %rs6, %f9;"
    )
    assert narrow_conversions(ptx) == [
        "cvt.rn.f16x2.e5m2x2",
        "cvt.rn.satfinite.e2m1x2.f32",
        "cvt.rn.satfinite.e4m3x2.f32",
        "cvt.rp.satfinite.ue8m0x2.f32",
    ]
    assert narrow_conversions("fma.rn.f32 %f1, %f2, %f3, %f4;") == []


def test_global_access_counts_loads_and_stores_by_vector_width():
    from nbhelpers.compile_check import global_access

    ptx = """
    ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    @%p1 ld.global.v4.b32 { %r5, %r6, %r7, %r8 }, [ %rd1 + 2048 ];
    ld.global.b32 %r9, [ %rd2 + 0 ];
    ld.global.nc.L1::evict_last.v2.f32 { %f1, %f2 }, [ %rd3 + 0 ];
    st.global.v4.b32 [ %rd4 + 0 ], { %r1, %r2, %r3, %r4 };
    ld.shared.v4.b32 { %r1, %r2, %r3, %r4 }, [ %r10 + 0 ];
    """
    assert global_access(ptx) == {"ld": {"v4": 2, "1": 1, "v2": 1}, "st": {"v4": 1}}
    assert global_access("fma.rn.f32 %f1, %f2, %f3, %f4;") == {"ld": {}, "st": {}}


def test_a_notebook_kernel_loads_without_the_cells_around_it(tmp_path):
    # a notebook's code cells: the kernel, a constant it reads, and an array built and then
    # changed element by element (`mask[i] = False` has a constant value but is no constant)
    cells = [
        "import numpy as np\nimport triton\nimport triton.language as tl",
        "BLOCK = 16",
        "mask = np.isin(np.arange(8) // 4, [0])\nmask[1] = False",
        "@triton.jit\ndef copy_kernel(x_ptr, y_ptr):\n"
        "    r = tl.arange(0, 16)\n    tl.store(y_ptr + r, tl.load(x_ptr + r))",
    ]
    nb = {"cells": [{"cell_type": "code", "source": c} for c in cells]}
    path = tmp_path / "book.ipynb"
    path.write_text(json.dumps(nb))
    kernel = kernel_of(f"{path}:copy_kernel")
    assert kernel.fn.__name__ == "copy_kernel"
    assert kernel.fn.__globals__["BLOCK"] == 16
    assert "mask" not in kernel.fn.__globals__
