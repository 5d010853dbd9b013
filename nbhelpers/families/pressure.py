"""Chapter 09's register-pressure kernel (:mod:`nbhelpers.kernels.pressure`)."""

from __future__ import annotations

import dataclasses

from .manifest import Benchmark, Case, Family, Launch, ResultsSpec, pick, timed

#: the extra live vectors benchmarks/gpu_register_pressure.py times (past 58 it spills on purpose)
EXTRAS = tuple(range(0, 67, 2))


def cases() -> list[Case]:
    """The kernel at every k the benchmark times: not defaults (past k = 58 it spills on purpose)."""
    from nbhelpers.kernels import pressure

    return [
        Case(
            pressure.KERNEL,
            f"EXTRA={k}",
            pressure.launch_args(),
            {"BLOCK": pressure.BLOCK, "EXTRA": k},
            num_warps=pressure.NUM_WARPS,
            default=False,
        )
        for k in EXTRAS
    ]


def launches() -> list[Launch]:
    """From no extra live values to the most the benchmark times."""
    every = cases()
    out = []
    for extra in (0, EXTRAS[-1]):
        (c,) = pick(every, "ema_kernel", f"EXTRA={extra}")
        out.append(
            Launch(f"pressure.ema(x, {extra})", "fp32", ("09",), "notebook 09, benchmarks/gpu_register_pressure.py", c)
        )
    return out


@dataclasses.dataclass(frozen=True)
class RegisterPressureRow:
    """One k (the extra live vectors): the compiled kernel's registers, spills and shared memory,
    the occupancy they imply, the median time, the bandwidth, the slowdown against k = 0 and the
    bound the occupancy predicts for it. blocks_per_sm: the blocks an SM holds at that occupancy;
    limit: the resource that bounds it ("registers", "shared memory", "warps" or "blocks")."""

    k: int
    rel_diff: float = timed()
    registers: int = timed()
    # Triton's n_spills: local memory per thread in 4-byte words (its driver.c divides
    # CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES by 4), not bytes
    spills: int = timed()
    shared: int = timed()
    warps_per_sm: int = timed()
    blocks_per_sm: int = timed()
    limit: str = timed()
    ms: float = timed()
    gb_per_s: float = timed()
    slowdown: float = timed()
    predicted_slowdown_warps: float | None = None
    predicted_slowdown_waves: float | None = None
    error: str | None = None


REGISTER_PRESSURE = ResultsSpec(
    "register_pressure",
    "benchmarks/gpu_register_pressure.py",
    ("gpu", "date", "script", "command", "torch", "triton", "rows", "cols"),
    RegisterPressureRow,
    reader="recorded_register_pressure",
)

FAMILY = Family(
    name="pressure",
    module="nbhelpers.kernels.pressure",
    reference="nbhelpers.kernels.pressure:ema_ref",
    dtypes=("fp32", "bf16", "fp16", "fp64"),
    tests=("tests/test_kernels_pressure.py",),
    cases=cases,
    launches=launches,
    benchmarks=(
        Benchmark(
            "gpu_register_pressure",
            40.0,
            25.0,
            12.0,
            "bounded: --time-limit 25 s + the k in flight (under a second: 4 GiB "
            "read per launch) + 10 s start-up; its 34 kernels come from the compile step; measured: 8.8 s in the "
            "H100 run of 2026-12-06",
        ),
    ),
    results=(REGISTER_PRESSURE,),
    order=3,
)
