"""The copies of chapter 08 (:mod:`nbhelpers.kernels.copy`): copy, strided read, transpose."""

from __future__ import annotations

import dataclasses

from .manifest import Benchmark, Case, Family, Launch, ResultsSpec, pick

WHERE = "nbhelpers.kernels.copy:"
#: benchmarks/gpu_copy_bandwidth.py's COPY_BLOCKS
COPY_BLOCKS = (1024, 2048, 4096, 8192)


def cases() -> list[Case]:
    """The copy at every block the benchmark times, the strided read at stride 8, the transpose
    with the launcher's default tile and the benchmark's other one."""
    n = 1 << 26
    out = [Case(WHERE + "copy_kernel", "fp32", ("*fp32", "*fp32", n), {"BLOCK": block}) for block in COPY_BLOCKS]
    out.append(Case(WHERE + "strided_read_kernel", "fp32, stride 8", ("*fp32", "*fp32", n // 8, 8), {"BLOCK": 1024}))
    for bm, bn in ((32, 32), (64, 64)):
        out.append(
            Case(
                WHERE + "transpose_kernel",
                "fp32",
                ("*fp32", "*fp32", 8192, 8192, 8192, 1, 8192, 1),
                {"BLOCK_M": bm, "BLOCK_N": bn},
            )
        )
    return out


def exercise_cases() -> list[Case]:
    """Chapter 08's exercise kernel, launched as its solution launches it."""
    return [
        Case(
            "solutions/ex08_gpu_memory.ipynb:transpose_kernel",
            "fp32",
            ("*fp32", "*fp32", 1000, 1000, 1003, 1, 1003, 1),
            {"BLOCK_M": 32, "BLOCK_N": 64},
            source="solution",
        )
    ]


def launches() -> list[Launch]:
    """The copy kernels with the launchers' default blocks and the notebook's others."""
    every = cases()
    out = []
    for kernel, config, launch in (
        ("copy_kernel", "1024 ", "copy(x)"),
        ("copy_kernel", "4096 ", "copy(x, block=4096)"),
        ("strided_read_kernel", "1024 ", "strided_read(x, 8)"),
        ("transpose_kernel", "32x32 ", "transpose(x)"),
        ("transpose_kernel", "64x64 ", "transpose(x, block=(64, 64))"),
    ):
        (c,) = pick(every, kernel, config=config)
        out.append(Launch(launch, "fp32", ("08",), "notebook 08, benchmarks/gpu_copy_bandwidth.py", c))
    return out


@dataclasses.dataclass(frozen=True)
class CopyBandwidthRow:
    """One kernel timed: its bandwidth in useful bytes per second, the sector model's efficiency
    and its predictions. Every row holds every field; None where it does not apply.

    name: the row's label ("copy BLOCK=4096"); kernel: "triton" or "torch"; pattern: "contiguous",
    "strided" or "transposed"; stride: the read stride in elements (None for a transpose);
    block: the Triton launch's BLOCK, or [BLOCK_M, BLOCK_N] (None for torch); outputs: output
    elements; useful_bytes: each output read once and written once, 2 x 4 bytes each; ms: the
    median time; bandwidth: useful bytes per second; sector_efficiency: useful over moved bytes of
    the reads, by the sector model (None: no model for the access); ratio_to_torch_copy:
    bandwidth over torch's contiguous copy's; predicted_bandwidth: the model's bandwidth at torch's
    copy's; predicted_at_peak: the model's at the GPU's HBM peak (None: peak unknown);
    ratio_to_prediction: bandwidth over predicted_bandwidth; predicted_ms: what
    :mod:`nbhelpers.perf_model` predicts for the Triton rows on the run's ``meta.model_gpu`` (through
    :func:`nbhelpers.kernels.copy.predicted`, at the compile table's registers), so that the first
    GPU run also measures how far off the model is (None for torch's rows).
    """

    name: str
    kernel: str
    pattern: str
    stride: int | None
    block: list | None
    outputs: int
    useful_bytes: int
    ms: float
    bandwidth: float
    sector_efficiency: float | None
    ratio_to_torch_copy: float
    predicted_bandwidth: float | None
    predicted_at_peak: float | None
    ratio_to_prediction: float | None
    predicted_ms: float | None = None


COPY_BANDWIDTH = ResultsSpec(
    "copy_bandwidth",
    "benchmarks/gpu_copy_bandwidth.py",
    ("gpu", "date", "script", "command"),
    CopyBandwidthRow,
    reader="recorded_copy_bandwidth",
)


@dataclasses.dataclass(frozen=True)
class LaunchTimingRow:
    """One measurement of ``benchmarks/gpu_launch_timing.py`` (chapter 08, section 2): a timing of
    one launch of the copy, or one try of the race between a non-blocking copy and the host.

    name: the row's label; kind: "timing" or "race". A timing row has method: "wall, no
    synchronize" (host clock around the Triton launch alone), "wall, no synchronize, torch op"
    (the same around torch's ``y.copy_(x)``), "wall + synchronize", "CUDA events, idle stream"
    (events around the launch alone: they time the host's launch too), "CUDA events, busy stream"
    (the same behind work queued first: the kernel alone) or "do_bench";
    repeats: how many times it was timed; seconds, seconds_min, seconds_max: the median and the
    extremes of those times; useful_bytes: the copy's bytes (read and written); bandwidth: those
    over ``seconds``. A race row (one per try) has before and after: the last values of the host
    buffer read at once after the copy was queued and again after ``torch.cuda.synchronize()``;
    expected: what the copy writes there; event_before, event_after: ``event.query()`` of an event
    recorded after the copy, at those two moments.
    """

    name: str
    kind: str
    repeats: int
    method: str | None = None
    seconds: float | None = None
    seconds_min: float | None = None
    seconds_max: float | None = None
    useful_bytes: int | None = None
    bandwidth: float | None = None
    before: list | None = None
    after: list | None = None
    expected: list | None = None
    event_before: bool | None = None
    event_after: bool | None = None


_TIMING_KEYS = ("method", "seconds", "seconds_min", "seconds_max", "useful_bytes", "bandwidth")
_RACE_KEYS = ("before", "after", "expected", "event_before", "event_after")


def _launch_timing_check(row: dict) -> list[str]:
    """What a launch-timing row lacks for its kind, in words."""
    kind = row.get("kind")
    if kind not in ("timing", "race"):
        return [f"{row.get('name')!r}: kind {kind!r} (timing or race)"]
    need = _TIMING_KEYS if kind == "timing" else _RACE_KEYS
    return [f"{row.get('name')!r}.{k}" for k in need if row.get(k) is None]


LAUNCH_TIMING = ResultsSpec(
    "launch_timing",
    "benchmarks/gpu_launch_timing.py",
    ("gpu", "date", "script", "command", "n", "block"),
    LaunchTimingRow,
    check=_launch_timing_check,
    reader="recorded_launch_timing",
)

FAMILY = Family(
    name="copy",
    module="nbhelpers.kernels.copy",
    reference="nbhelpers.kernels.copy:copy_ref",
    dtypes=("fp32", "fp16", "bf16", "fp64", "int8", "uint8", "int16", "int32", "int64"),
    chapters={
        "08": "`kernels.copy` (copy, strided read, transpose) and CUDA-event timings, in the notebook "
        "and `benchmarks/gpu_copy_bandwidth.py`",
    },
    tests=("tests/test_kernels_copy.py",),
    cases=cases,
    exercise_cases=exercise_cases,
    launches=launches,
    benchmarks=(
        Benchmark(
            "gpu_copy_bandwidth",
            30.0,
            None,
            12.0,
            "measured: 8.6 s in the H100 run of 2026-12-06; about 20 timings of 0.06 s "
            "(timing.gpu_median_ms: warmup 10 ms, rep 50 ms), 4 small kernels to compile, 2 GB of buffers",
        ),
        Benchmark(
            "gpu_launch_timing",
            30.0,
            None,
            10.0,
            "estimate (not yet timed on a GPU): start-up with torch and one small compile, about 5 s; "
            "4 x 20 launches of a 512 MiB copy and one do_bench (60 ms); 5 tries of the race on a "
            "256 MiB pinned buffer",
        ),
    ),
    results=(COPY_BANDWIDTH, LAUNCH_TIMING),
    order=4,
)
