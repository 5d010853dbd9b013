"""The grouped GEMM of a mixture of experts (:mod:`nbhelpers.kernels.grouped_gemm`, chapter 10)."""

from __future__ import annotations

import dataclasses

from .manifest import Benchmark, Case, Family, Launch, ResultsSpec, extremes, pick, timed

WHERE = "nbhelpers.kernels.grouped_gemm:"
#: DeepSeek-V3's up projection: T*k = 32,768 routed rows, 256 experts, K = 7168, N = 2048
R, E, N, K = 32768, 256, 2048, 7168


def _args(dt: str, out: str, w_strides: tuple, fp8: bool = False) -> tuple:
    a = (f"*{dt}", f"*{dt}", f"*{out}", "*i64", "*i32") + (("*fp32", "*fp32") if fp8 else ())
    return a + (R, E, N, K, K, 1) + w_strides + (N, 1) + ((N, 1) if fp8 else ())


def cases() -> list[Case]:
    """The grouped GEMM at DeepSeek-V3's up projection: bf16 with every tuned config, fp8 with its
    default block and K-major expert weights (E, N, K) seen as (E, K, N)."""
    from nbhelpers.kernels.grouped_gemm import DEFAULT_GROUP_M, FP8_DEFAULT_BLOCK, GPU_CONFIGS

    out = []
    for target in ("sm_90", "sm_80"):
        for cfg in GPU_CONFIGS:
            out.append(
                Case(
                    WHERE + "grouped_matmul_kernel",
                    "bf16 -> bf16, DeepSeek-V3 up projection",
                    _args("bf16", "bf16", (K * N, N, 1)),
                    {**cfg.kwargs, "BLOCK_E": E, "GROUP_M": DEFAULT_GROUP_M, "INPUT_PRECISION": "ieee"},
                    cfg.num_warps,
                    cfg.num_stages,
                    target=target,
                )
            )
    bm, bn, bk = FP8_DEFAULT_BLOCK
    out.append(
        Case(
            WHERE + "scaled_grouped_matmul_kernel",
            "e4m3 K-major weights -> bf16, DeepSeek-V3 up projection",
            _args("fp8e4nv", "bf16", (N * K, 1, K), fp8=True),
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "BLOCK_E": E, "GROUP_M": DEFAULT_GROUP_M},
        )
    )
    return out


def fp8_layout_cases(target: str = "sm_90") -> list[Case]:
    """The fp8 kernel at its default block, DeepSeek-V3's up projection, with the expert weights
    in each layout: "K-major" ((E, N, K) contiguous, seen as (E, K, N): what the launcher takes,
    and the case :func:`cases` puts in the compile table) and "N-major" ((E, K, N) contiguous:
    what the launcher refuses), compiled to compare what each makes of the loads."""
    from nbhelpers.kernels.grouped_gemm import DEFAULT_GROUP_M, FP8_DEFAULT_BLOCK

    bm, bn, bk = FP8_DEFAULT_BLOCK
    constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "BLOCK_E": E, "GROUP_M": DEFAULT_GROUP_M}
    return [
        Case(
            WHERE + "scaled_grouped_matmul_kernel",
            f"e4m3 {layout} weights -> bf16, DeepSeek-V3 up projection",
            _args("fp8e4nv", "bf16", strides, fp8=True),
            constexprs,
            target=target,
        )
        for layout, strides in (("K-major", (N * K, 1, K)), ("N-major", (K * N, N, 1)))
    ]


#: the kernel tests' deliberately wrong grouped kernels, each launched as grouped_matmul launches
#: the right one (tests/test_kernels_grouped_gemm.py, run_variant: fp32, 16 x 16 x 16 blocks, the
#: experts [5, 0, 20, 1, 9] over K = 24 and N = 20)
_WRONG_KERNELS = (
    "_no_row_end_mask_kernel",
    "_tile_index_as_expert_kernel",
    "_plain_gemm_rows_kernel",
    "_search_off_by_one_kernel",
    "_unclamped_rows_kernel",
)


def exercise_cases() -> list[Case]:
    """Chapter 10's exercise kernel, launched as its solution launches it; the kernel tests' own
    kernels (the lookup probe and the deliberately wrong variants), launched as the tests do."""
    tests = "tests/test_kernels_grouped_gemm.py:"
    rows, experts, n, k = 35, 5, 20, 24
    wrong_args = ("*fp32", "*fp32", "*fp32", "*i64", "*i32", rows, experts, n, k, k, 1, k * n, n, 1, n, 1)
    blocks = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "BLOCK_E": 8, "GROUP_M": 1, "INPUT_PRECISION": "ieee"}
    return [
        Case(
            "solutions/ex10_grouped_gemm.ipynb:tile_lookup_kernel",
            "int32",
            ("*i32", "*i32", 8, 40),
            {"BLOCK_M": 64},
            source="solution",
        ),
        Case(
            tests + "_order_probe_kernel",
            "int64 offsets, 8 experts",
            ("*i64", "*i32", "*i64", 12, 8, 40),
            {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_E": 8, "GROUP_M": 3},
            source="test",
        ),
        *(Case(tests + name, "fp32, a wrong variant", wrong_args, blocks, source="test") for name in _WRONG_KERNELS),
    ]


def launches() -> list[Launch]:
    """grouped_matmul(block=None) tunes over GPU_CONFIGS on the GPU (skipping configs over the
    GPU's shared memory); the fp8 launcher has one fixed block."""
    every = cases()
    out = [
        Launch("grouped_matmul(block=None)", "bf16", ("10",), "notebook 10, benchmarks/gpu_grouped_gemm.py", c, tuned)
        for tuned, c in extremes(pick(every, "grouped_matmul_kernel", "bf16 -> bf16, DeepSeek-V3 up projection"))
    ]
    (c,) = pick(every, "scaled_grouped_matmul_kernel")
    out.append(Launch("scaled_grouped_matmul(block=None)", "e4m3", ("10",), "notebook 10", c, fp8="float8_e4m3fn"))
    return out


@dataclasses.dataclass(frozen=True)
class GroupedGemmRow:
    """One case: the shape, the routing and its load statistics (per-expert loads, the padding and
    the rows dropped at a capacity factor), each implementation's difference from grouped_mm and the
    goals; when timed, ``ms`` and ``tflops`` per implementation and the speedups, and what
    :mod:`nbhelpers.perf_model` predicts for ours on the run's ``meta.model_gpu`` (``predicted_ms``: as called, the tile
    lookup's small kernels launched one by one; ``predicted_graph_ms``: replayed from a CUDA
    graph; ``predicted_config``: the tuner's config the model finds fastest), so that the first
    GPU run also measures the model; ``tuned_config`` and ``tuning_ms``: the config the tuner kept
    for ours and each config's tuning time (absent from rows recorded before they existed)."""

    size: str
    K: int
    N: int
    E: int
    T: int
    top_k: int
    rows: int
    max_load: int
    mean_load: float
    empty_experts: int
    uneven: bool
    capacity_factor: float
    padding_fraction: float
    dropped_rows: int
    rel_diff: dict
    goals: dict
    ms: dict = timed()
    tflops: dict = timed()
    ours_vs_loop: float = timed()
    ours_vs_padded: float = timed()
    ours_vs_grouped_mm: float = timed()
    capacity: int | None = None
    error: str | None = None
    predicted_ms: float | None = None
    predicted_graph_ms: float | None = None
    predicted_config: str | None = None
    tuned_config: str | None = None
    tuning_ms: dict | None = None


GROUPED_GEMM = ResultsSpec(
    "grouped_gemm",
    "benchmarks/gpu_grouped_gemm.py",
    ("gpu", "date", "script", "command", "torch", "triton"),
    GroupedGemmRow,
    reader="recorded_grouped_gemm",
)

FAMILY = Family(
    name="grouped_gemm",
    module="nbhelpers.kernels.grouped_gemm",
    reference="nbhelpers.moe:grouped_matmul_ref",
    dtypes=("fp32", "bf16", "fp16", "e4m3", "e5m2"),
    recipes=("nbhelpers.kernels.grouped_gemm:SCALED_GROUPED_RECIPES",),
    chapters={
        "10": "`kernels.grouped_gemm`: bf16 (tuned) and fp8 e4m3; `benchmarks/gpu_grouped_gemm.py` "
        "(with `torch.nn.functional.grouped_mm`)",
    },
    tests=("tests/test_kernels_grouped_gemm.py",),
    cases=cases,
    exercise_cases=exercise_cases,
    launches=launches,
    dot_kernels=("grouped_matmul_kernel", "scaled_grouped_matmul_kernel"),
    benchmarks=(
        Benchmark(
            "gpu_grouped_gemm",
            80.0,
            50.0,
            50.0,
            "bounded: --time-limit 50 s + the case in flight (about 15 s at T = 32,768) + 10 s start-up; "
            "measured: 44.4 s in the H100 run of 2026-12-06, every case timed",
        ),
    ),
    results=(GROUPED_GEMM,),
    order=5,
)
