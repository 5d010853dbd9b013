"""Chapter 11's top-k kernels (:mod:`nbhelpers.kernels.topk`): running top-k and radix select."""

from __future__ import annotations

import dataclasses

from .manifest import Benchmark, Case, Family, Launch, ResultsSpec, pick, timed

WHERE = "nbhelpers.kernels.topk:"
#: one row of Llama 3's vocabulary
V = 128_256


def cases() -> list[Case]:
    """The kernels as :func:`nbhelpers.kernels.topk.topk` launches them on one row of Llama 3's
    vocabulary, for bf16 and fp32 logits (the kernels read their int16 / int32 bit views) and k =
    8, 50 and 1,024: the running top-k of "row" (one chunk, FINAL) and of "two_stage" (its first
    stage and its merge; where the default chunk covers the row, which the launcher runs as "row",
    with chunks of 8,192 instead), and radix select (k = 50 and 1,024). The configs come from the
    launcher's plan(), with its STAGES (tl.range's num_stages for the loops over the row), and
    Triton's default warps and num_stages otherwise, as the launcher leaves them."""
    from nbhelpers.kernels.topk import plan
    from nbhelpers.topk import KEY_FORMATS

    out = []
    for fmt in ("bf16", "fp32"):
        f = KEY_FORMATS[fmt]
        bits = f"*i{f.bits}"
        keys = {"KEY_BITS": f.bits, "EXP_MASK": f.exp_mask}
        for k in (8, 50, 1024):
            label = f"{fmt} logits, V = {V:,}, k = {k}"
            row = plan(V, k, "row")
            out.append(
                Case(
                    WHERE + "topk_chunk_kernel",
                    label + ", row",
                    (bits, "*i64", bits, "*i64", V, k, V, V, 1),  # the launcher passes idx as the unused part
                    {**keys, "K_PAD": row["K_PAD"], "BLOCK_V": row["BLOCK_V"], "FINAL": True, "STAGES": row["STAGES"]},
                )
            )
            two = plan(V, k, "two_stage")
            suffix = ""
            if two["n_chunks"] == 1:  # the default covers the row (launched as "row"): chunks of 8,192
                two, suffix = plan(V, k, "two_stage", chunk=8192), ", CHUNK = 8,192"
            n = two["n_chunks"]
            out.append(
                Case(
                    WHERE + "topk_chunk_kernel",
                    label + ", two_stage first stage" + suffix,
                    (bits, "*i64", bits, "*i64", V, k, V, two["CHUNK"], n),
                    {**keys, "K_PAD": two["K_PAD"], "BLOCK_V": two["BLOCK_V"], "FINAL": False, "STAGES": two["STAGES"]},
                )
            )
            out.append(
                Case(
                    WHERE + "topk_merge_kernel",
                    label + ", two_stage merge" + suffix,
                    ("*i64", bits, bits, "*i64", k, V, n),
                    {"KEY_BITS": f.bits, "K_PAD": two["K_PAD"], "MERGE_BLOCK": two["MERGE_BLOCK"]},
                )
            )
            if k == 8:  # radix select's code does not depend on k; 50 and 1,024 differ only in
                continue  # Triton's specialisation of k (1,024 is a multiple of 16)
            radix = plan(V, k, "radix")
            out.append(
                Case(
                    WHERE + "radix_select_kernel",
                    label + ", radix",
                    (bits, bits, "*i64", V, k, V),
                    {**keys, "DIGIT_BITS": radix["DIGIT_BITS"], "BLOCK_V": radix["BLOCK_V"], "STAGES": radix["STAGES"]},
                )
            )
    # a vocabulary whose rows are not 16-value aligned (GPT-2's 50,257): Triton cannot prove its
    # loads 16-byte aligned, and leaves the loop unpipelined (the model takes one block in flight)
    row = plan(50_257, 50, "row")
    out.append(
        Case(
            WHERE + "topk_chunk_kernel",
            "bf16 logits, V = 50,257, k = 50, row (rows not 16-value aligned)",
            ("*i16", "*i64", "*i16", "*i64", 50_257, 50, 50_257, 50_257, 1),
            {"KEY_BITS": 16, "EXP_MASK": 0x7F80, "K_PAD": 64, "BLOCK_V": row["BLOCK_V"], "FINAL": True, "STAGES": 3},
            default=False,
        )
    )
    return out


def exercise_cases() -> list[Case]:
    """Chapter 11's exercise kernels, launched as the solution launches them (the launcher's row
    stride is V plus one chunk: NaN padding after each row); and the tests' running top-k without
    the ``if`` before ``_absorb`` (not a launch of the course: what the guard buys, chapter 11
    section 4a)."""
    ex11 = "solutions/ex11_topk.ipynb"
    return [
        Case(
            "tests/test_kernels_topk.py:_unguarded_row_kernel",
            f"bf16 logits, V = {V:,}, k = 50, row, no if before _absorb",
            ("*i16", "*i64", V),
            {"KEY_BITS": 16, "EXP_MASK": 0x7F80, "K_PAD": 64, "BLOCK_V": 1024, "STAGES": 3},
            source="test",
            default=False,
        ),
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


def launches() -> list[Launch]:
    """topk's three methods on one row of Llama 3's vocabulary, k = 50."""
    every = cases()
    out = []
    for fmt in ("bf16", "fp32"):
        label = f"{fmt} logits, V = {V:,}, k = 50"
        for kernel, suffix, launch in (
            ("topk_chunk_kernel", "row", 'topk(x, 50, "row")'),
            ("topk_chunk_kernel", "two_stage first stage", 'topk(x, 50, "two_stage"): chunks'),
            ("topk_merge_kernel", "two_stage merge", 'topk(x, 50, "two_stage"): merge'),
            ("radix_select_kernel", "radix", 'topk(x, 50, "radix")'),
        ):
            (c,) = pick(every, kernel, f"{label}, {suffix}")
            out.append(Launch(launch, fmt, ("11",), "notebook 11, benchmarks/gpu_topk.py", c))
    return out


@dataclasses.dataclass(frozen=True)
class TopkRow:
    """One dtype, batch, k and method with its bytes (one read of the logits plus the k values and
    int64 indices written), the Triton launch parameters (None for torch) and how many rows were
    compared with topk_ref; when timed, the median time, the bandwidth, the fraction of the HBM
    peak (None without a known peak) and the speed against torch.topk (None when torch.topk was not
    timed); else ``error`` says why not (with ``call_ms``, one call's time, when it was too slow).
    ``predicted_ms``: the performance model's time for the Triton methods, so that the first GPU run
    also measures how far off the model is."""

    dtype: str
    batch: int
    V: int
    k: int
    method: str
    bytes: int
    launch: dict | None
    checked_rows: int | None
    ms: float = timed()
    gb_per_s: float = timed()
    fraction_of_peak: float | None = timed()
    vs_torch_topk: float | None = timed()
    call_ms: float | None = None
    error: str | None = None
    #: what nbhelpers.perf_model predicts for the launches on the run's meta.model_gpu at its assumed 1 us latency
    #: (kernels.topk.predicted), beside the measurement; None for torch's methods
    predicted_ms: float | None = None


TOPK = ResultsSpec(
    "topk",
    "benchmarks/gpu_topk.py",
    ("gpu", "date", "script", "command", "torch", "triton", "vocab", "bytes", "peak"),
    TopkRow,
    reader="recorded_topk",
)

FAMILY = Family(
    name="topk",
    module="nbhelpers.kernels.topk",
    reference="nbhelpers.topk:topk_ref",
    dtypes=("fp32", "bf16", "fp16"),
    chapters={
        "11": "`kernels.topk` (row, two_stage, radix) on bf16 and fp32 logits; `benchmarks/gpu_topk.py`",
    },
    tests=("tests/test_kernels_topk.py",),
    cases=cases,
    exercise_cases=exercise_cases,
    launches=launches,
    benchmarks=(
        Benchmark(
            "gpu_topk",
            50.0,
            30.0,
            45.0,
            "bounded: --time-limit 30 s (no row starts later; its rows run in order of interest, "
            "the --quick set first) + the row in flight (at most about 5 s: two kernels to compile at "
            "k = 1024) + 10 s start-up; Triton compiles its kernels inside the 30 s (about 1 s each). "
            "In the H100 run of 2026-12-06 the 9 s it had then timed 38 rows, to k = 1024 at batch 64, in a 27.1 "
            "s step",
        ),
    ),
    results=(TOPK,),
    order=6,
)
