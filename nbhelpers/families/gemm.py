"""The tiled GEMM (:mod:`nbhelpers.kernels.gemm`, chapters 03 and 09)."""

from __future__ import annotations

import dataclasses

from .manifest import Benchmark, Case, Family, Launch, ResultsSpec, extremes, gemm_args, pick, timed

KERNEL = "nbhelpers.kernels.gemm:matmul_kernel"


def cases() -> list[Case]:
    """The autotuned path (block=None) as the benchmarks launch it, aligned (4096^3) and not
    (1000^3), with every config of the set the launcher tunes over; and the launcher's default
    block (32, 32, 32), group_m 8, with Triton's default warps and stages."""
    from nbhelpers.kernels.gemm import GPU_CONFIG_SETS

    out = []
    dtypes = {"16-bit": ("bf16", "ieee", "bf16"), "tf32": ("fp32", "tf32", "fp32"), "ieee": ("fp32", "ieee", "fp32")}
    for (kind, aligned), configs in GPU_CONFIG_SETS.items():
        dtype, prec, c_out = dtypes[kind]
        shape = 4096 if aligned else 1000
        for cfg in configs:
            out.append(
                Case(
                    KERNEL,
                    f"{dtype} {prec} -> {c_out}, {shape}^3",
                    gemm_args(dtype, dtype, c_out, shape, shape, shape),
                    {**cfg.kwargs, "INPUT_PRECISION": prec},
                    cfg.num_warps,
                    cfg.num_stages,
                )
            )
    for dtype in ("fp32", "bf16"):
        for target in ("sm_90", "sm_80"):
            out.append(
                Case(
                    KERNEL,
                    f"{dtype} ieee -> fp32, matmul() default",
                    gemm_args(dtype, dtype, "fp32", 256, 256, 256),
                    {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "INPUT_PRECISION": "ieee", "GROUP_M": 8},
                    target=target,
                )
            )
    return out


def exercise_cases() -> list[Case]:
    """Chapter 09's exercise kernel, launched as its solution launches it, and the tests' tile probe."""
    return [
        Case(
            "solutions/ex09_gemm_kernels.ipynb:split_k_kernel",
            "fp32",
            ("*fp32", "*fp32", "*fp32", 100, 90, 70, 3, 86, 1, 106, 1, 9000, 90, 1),
            {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16},
            source="solution",
        ),
        Case(
            "tests/test_kernels_gemm.py:_tile_probe_kernel",
            "int32",
            ("*i32", 100, 257),
            {"BLOCK_M": 32, "BLOCK_N": 32, "GROUP_M": 3},
            source="test",
        ),
    ]


def launches() -> list[Launch]:
    """Chapters 03 and 09: matmul(a, b, block=(32, 32, 32)) with Triton's default warps and stages
    (chapter 03's GPU run at M = N = 16 and K up to 16,384); chapter 09: matmul(block=None) on
    bf16 4096^3, the tuned list's largest and smallest configs."""
    out = []
    fixed = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8}
    numerics = "benchmarks/gpu_gemm_numerics.py"
    for dtype, op, prec, chapters, made_by in (
        ("fp32", "fp32", "ieee", ("03", "09"), f"notebooks 03 and 09, {numerics}"),
        ("tf32", "fp32", "tf32", ("03",), f"notebook 03, {numerics}"),
        ("bf16", "bf16", "ieee", ("03", "09"), f"notebooks 03 and 09, {numerics}"),
        ("fp16", "fp16", "ieee", ("09",), "notebook 09"),
    ):
        args = gemm_args(op, op, "fp32", 16, 16, 4096)
        case = Case(KERNEL, f"{dtype}, 16 x 4096 x 16", args, {**fixed, "INPUT_PRECISION": prec})
        out.append(Launch("matmul(block=(32, 32, 32))", dtype, chapters, made_by, case))
    for tuned, c in extremes(pick(cases(), "matmul_kernel", "bf16 ieee -> bf16, 4096^3")):
        out.append(
            Launch("matmul(block=None)", "bf16", ("09",), "notebook 09, benchmarks/gpu_gemm_tflops.py", c, tuned)
        )
    return out


def _equal_lengths(row: dict) -> list[str]:
    if not (len(row["K"]) == len(row["rel_error"]) == len(row["rel_error_acc"])):
        return [f"equal lengths of K and errors in {row['method']!r}"]
    return []


@dataclasses.dataclass(frozen=True)
class GemmNumericsSeries:
    """One method's relative errors against K (chapter 03's GPU run).

    input_precision: the kernel's ``tl.dot`` mode ("ieee", "tf32"; None for torch's matmul);
    out_fmt: the format of the output; model_agreement: for the Triton bf16 series, per emulation
    of chapter 03, the fraction of outputs bit-identical to it at each K (None: not compared).
    """

    method: str
    in_fmt: str
    input_precision: str | None
    out_fmt: str
    K: list
    rel_error: list
    rel_error_acc: list
    model_agreement: dict | None = None


@dataclasses.dataclass(frozen=True)
class GemmTflopsRow:
    """One comparison at one shape: ours against torch's, their outputs' relative difference, and
    (when timed) both timings, TFLOP/s and the ratio. goal: the ratio the comparison aims for
    (None: no goal, the ratio is a cost measured). predicted_ms: what :mod:`nbhelpers.perf_model`
    predicts for ours on the run's ``meta.model_gpu``, the fastest over the configs the autotuner times
    (:func:`nbhelpers.kernels.gemm.predicted` at the compile table's registers and shared memory),
    and predicted_config that config: the first GPU run also measures the model. tuned_config: the
    config the autotuner chose for ours at this shape (Triton's ``Autotuner.best_config``; None in
    runs recorded before the benchmark kept it, and where no autotuner ran)."""

    kind: str
    M: int
    N: int
    K: int
    ours: str
    theirs: str
    rel_diff: float | None
    goal: float | None
    ms_ours: float = timed()
    ms_theirs: float = timed()
    tflops_ours: float = timed()
    tflops_theirs: float = timed()
    ratio: float = timed()
    error: str | None = None
    predicted_ms: float | None = None
    predicted_config: str | None = None
    tuned_config: str | None = None


GEMM_NUMERICS = ResultsSpec(
    "gemm_numerics",
    "benchmarks/gpu_gemm_numerics.py",
    ("gpu", "date", "script", "M", "N", "seed"),
    GemmNumericsSeries,
    rows_field="series",
    allow_empty=True,
    check=_equal_lengths,
    reader="recorded_gpu_runs",
)
GEMM_TFLOPS = ResultsSpec(
    "gemm_tflops",
    "benchmarks/gpu_gemm_tflops.py",
    ("gpu", "date", "script", "command", "torch", "triton"),
    GemmTflopsRow,
    reader="recorded_gemm_tflops",
)

FAMILY = Family(
    name="gemm",
    module="nbhelpers.kernels.gemm",
    reference="nbhelpers.kernels.gemm:matmul_ref",
    dtypes=("fp32", "tf32", "bf16", "fp16"),
    chapters={
        "03": "`kernels.gemm.matmul` (32 x 32 x 32 tiles) on fp32, TF32 and bf16 operands, in the "
        "notebook and `benchmarks/gpu_gemm_numerics.py`",
        "09": "`kernels.gemm.matmul` (fixed tiles and tuned), the fp8 `kernels.scaled_gemm` launchers "
        "(e4m3), `kernels.pressure.ema`; `benchmarks/gpu_gemm_tflops.py` (with `torch._scaled_mm`) "
        "and `benchmarks/gpu_register_pressure.py`",
    },
    tests=("tests/test_kernels_gemm.py", "tests/test_kernels_autotune_keys.py"),
    cases=cases,
    exercise_cases=exercise_cases,
    launches=launches,
    dot_kernels=("matmul_kernel",),
    benchmarks=(
        Benchmark(
            "gpu_gemm_numerics",
            30.0,
            None,
            10.0,
            "measured: 6.6 s in the H100 run of 2026-12-06; 16 x 16 outputs at 11 values of K: "
            "launches of microseconds; start-up and a few small compiles",
        ),
        Benchmark(
            "gpu_gemm_tflops",
            95.0,
            65.0,
            55.0,
            "bounded: --time-limit 65 s (no shape starts later) + the shape in flight "
            "(4 comparisons, about 15 s at 8192^3) + 10 s start-up; the tuners time each "
            "config for about 60 ms (timing.tuning_ms: warmup 10 ms, rep 50 ms); measured: 50.0 s in the H100 "
            "run of 2026-12-06, "
            "every shape timed",
        ),
    ),
    results=(GEMM_NUMERICS, GEMM_TFLOPS),
    order=1,
)
