"""The fp8 GEMMs with a scaling epilogue and with block scales (:mod:`nbhelpers.kernels.scaled_gemm`, chapter 09)."""

from __future__ import annotations

from .manifest import Case, Family, Launch, extremes, gemm_args, pick

SCALED = "nbhelpers.kernels.scaled_gemm:scaled_matmul_kernel"
BLOCKED = "nbhelpers.kernels.scaled_gemm:block_scaled_matmul_kernel"
#: the torch dtype of the compiler's fp8 pointer types, for the launchers' own check of a GPU
TORCH_FP8 = {"fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2"}


def fp8_args(fp8: str, out: str, M: int, N: int, K: int, scales: tuple) -> tuple:
    """A scaled GEMM launcher's arguments: fp8 A and column-major B, C, the two scale pointers, the
    sizes and strides, then the scales' strides."""
    base = gemm_args(fp8, fp8, out, M, N, K, b_col_major=True)
    return base[:3] + ("*fp32", "*fp32") + base[3:] + scales


def cases() -> list[Case]:
    """Every config of the tuned lists at 4096^3 and 1000^3 (defaults only where aligned), row/column
    scales promoted and fast, 128 x 128 block scales with bf16 and fp32 out; and the A100's fp8
    dots: e5m2 compiles for sm_80, e4m3 does not (the launchers say so in a sentence)."""
    from nbhelpers.kernels.scaled_gemm import (
        BLOCK_SCALED_GPU_CONFIGS,
        FP8_FAST_GPU_CONFIGS,
        FP8_GPU_CONFIGS,
        SCALE_BLOCK,
    )

    out = []
    for shape in (4096, 1000):
        aligned = shape % 16 == 0
        nk = -(-shape // SCALE_BLOCK)
        for precise, configs in ((True, FP8_GPU_CONFIGS), (False, FP8_FAST_GPU_CONFIGS)):
            for cfg in configs:
                out.append(
                    Case(
                        SCALED,
                        f"e4m3 row/col scales -> bf16, {'promoted' if precise else 'fast'}, {shape}^3",
                        fp8_args("fp8e4nv", "bf16", shape, shape, shape, (1, 1)),
                        {**cfg.kwargs, "PRECISE_ACC": precise},
                        cfg.num_warps,
                        cfg.num_stages,
                        default=aligned,
                    )
                )
        # block scales: sA (M, K/128) and sB (K/128, N/128), both row-major; bf16 out (timed) and
        # fp32 out (the benchmark's output check)
        for c_out in ("bf16", "fp32") if aligned else ("bf16",):
            for cfg in BLOCK_SCALED_GPU_CONFIGS:
                out.append(
                    Case(
                        BLOCKED,
                        f"e4m3 128x128 block scales -> {c_out}, {shape}^3",
                        fp8_args("fp8e4nv", c_out, shape, shape, shape, (nk, 1, nk, 1)),
                        {**cfg.kwargs, "SCALE_BLOCK_N": SCALE_BLOCK},
                        cfg.num_warps,
                        cfg.num_stages,
                        default=aligned,
                    )
                )
    cfg = FP8_GPU_CONFIGS[-1]
    for fp8, expect in (("fp8e5", None), ("fp8e4nv", "fp8e4nv not supported")):
        out.append(
            Case(
                SCALED,
                f"{'e5m2' if fp8 == 'fp8e5' else 'e4m3'} -> fp32 on sm_80",
                fp8_args(fp8, "fp32", 4096, 4096, 4096, (1, 1)),
                {**cfg.kwargs, "PRECISE_ACC": True},
                cfg.num_warps,
                cfg.num_stages,
                target="sm_80",
                expect_error=expect,
            )
        )
    return out


def exercise_cases() -> list[Case]:
    """Chapter 09's exercise epilogue kernel, launched as its solution launches it."""
    return [
        Case(
            "solutions/ex09_gemm_kernels.ipynb:swap_ab_epilogue_kernel",
            "fp32",
            # M, N, S, group_n, then the strides: the partial tiles', C's, sA's and sB's
            ("*fp32", "*fp32", "*fp32", "*fp32", 100, 90, 3, 32, 14152, 116, 1, 222, 1, 1, 2),
            {"BLOCK_N": 32, "BLOCK_M": 16},
            source="solution",
        )
    ]


def launches() -> list[Launch]:
    """Chapter 09's notebook: scaled_matmul and block_scaled_matmul with block=(32, 32) on e4m3
    operands, M, N, K = 37, 45, 300 (B row-major, fp32 out; block scales 37 x 3 and 3 x 2); its
    gpu_gemm_tflops.py: the fp8 launchers tuned at 4096^3, bf16 out."""
    from nbhelpers.kernels.scaled_gemm import SCALE_BLOCK

    out = []
    small = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": SCALE_BLOCK, "GROUP_M": 8}
    for fp8, dtype, chapters in (("fp8e4nv", "e4m3", ("09",)), ("fp8e5", "e5m2", ())):
        args = gemm_args(fp8, fp8, "fp32", 37, 45, 300)
        case = Case(
            SCALED,
            f"{dtype}, 37 x 300 x 45",
            args[:3] + ("*fp32", "*fp32") + args[3:] + (1, 1),
            {**small, "PRECISE_ACC": True},
        )
        where = "notebook 09" if chapters else "the launcher also takes e5m2; no chapter launches it"
        out.append(Launch("scaled_matmul(block=(32, 32))", dtype, chapters, where, case, fp8=TORCH_FP8[fp8]))
    args = gemm_args("fp8e4nv", "fp8e4nv", "fp32", 37, 150, 300)
    case = Case(
        BLOCKED,
        "e4m3, 37 x 300 x 150",
        args[:3] + ("*fp32", "*fp32") + args[3:] + (3, 1, 2, 1),
        {**small, "SCALE_BLOCK_N": SCALE_BLOCK},
    )
    out.append(Launch("block_scaled_matmul(block=(32, 32))", "e4m3", ("09",), "notebook 09", case, fp8="float8_e4m3fn"))
    every = cases()
    for launch, label in (
        ("scaled_matmul(block=None)", "e4m3 row/col scales -> bf16, promoted, 4096^3"),
        ("scaled_matmul(block=None, fast_accum=True)", "e4m3 row/col scales -> bf16, fast, 4096^3"),
        ("block_scaled_matmul(block=None)", "e4m3 128x128 block scales -> bf16, 4096^3"),
    ):
        kernel = "block_scaled_matmul_kernel" if launch.startswith("block") else "scaled_matmul_kernel"
        for tuned, c in extremes(pick(every, kernel, label)):
            out.append(Launch(launch, "e4m3", ("09",), "benchmarks/gpu_gemm_tflops.py", c, tuned, "float8_e4m3fn"))
    return out


FAMILY = Family(
    name="scaled_gemm",
    module="nbhelpers.kernels.scaled_gemm",
    reference="nbhelpers.scaled_gemm:scaled_mm",
    dtypes=("e4m3", "e5m2"),
    recipes=(
        "nbhelpers.kernels.scaled_gemm:SCALED_MATMUL_RECIPES",
        "nbhelpers.kernels.scaled_gemm:BLOCK_SCALED_RECIPES",
    ),
    tests=("tests/test_kernels_scaled_gemm.py",),
    cases=cases,
    exercise_cases=exercise_cases,
    launches=launches,
    dot_kernels=("scaled_matmul_kernel", "block_scaled_matmul_kernel"),
    order=2,
)
