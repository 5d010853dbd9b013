"""Chapter 11's tables of the top-k kernels: what the compiler made of them (the compile table's
registers, ``cp.async`` copies and loop cycles, and what those imply per SM), what the performance
model predicts for the launcher's plans, and a recorded GPU run beside the model of its own GPU.

Each function returns the text a notebook cell prints; every number in it is computed here from
:mod:`nbhelpers.kernels.topk` (plans, :data:`~nbhelpers.kernels.topk.ISSUE_CYCLES`,
:func:`~nbhelpers.kernels.topk.predicted`), :mod:`nbhelpers.perf_model`, :mod:`nbhelpers.occupancy`
and the recorded results files."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from .calibration import topk_rows
from .compile_check import PIPES
from .kernels import topk as ktk
from .occupancy import occupancy
from .perf_model import GPU, H200, HOPPER_FP32_FLOPS_PER_SM_CYCLE, LATENCY_RANGE_S, little_bytes, model_gpu
from .tables import text_table

__all__ = [
    "TOPK_KERNELS",
    "compile_rows",
    "compile_text",
    "chunk_text",
    "issue_text",
    "plans_text",
    "recorded_run_text",
]

#: the kernels the chapter's compile table shows: the running top-k, radix select, and the tests'
#: variant of the running top-k without the ``if`` in front of ``_absorb``
TOPK_KERNELS = ("topk_chunk_kernel", "radix_select_kernel", "_unguarded_row_kernel")
_WARPS = 4  # every top-k launch runs 4 warps a program


def _label(method: str, chunk: int | None) -> str:
    return method if chunk is None else f"{method}, CHUNK={chunk}"


def _seconds(forecast) -> float:
    return sum(q.seconds for q in forecast)


def plans_text(
    V: int,
    k: int,
    cases: Iterable[tuple[str, int | None]],
    gpu: GPU = H200,
    latencies: Sequence[float] = LATENCY_RANGE_S,
) -> str:
    """For each ``(method, chunk)`` at batch 1 (bf16): the plan (chunk, programs per row, dependent
    steps of each launch, blocks in flight, the insertions a first-stage program expects, the
    candidates the merge reads), the
    model's chain of steps and instruction issue per launch, its prediction (launches included)
    and what binds. The prediction is made at each of ``latencies``; a last line says whether the
    latency changed any of them (at 0.1 us)."""
    rows, spread = [], []
    for method, chunk in cases:
        p = ktk.plan(V, k, method, chunk=chunk)
        span = min(p["CHUNK"], V)
        steps = [-(-span // p["BLOCK_V"])]
        if method == "two_stage" and p["n_chunks"] > 1:
            steps.append(-(-p["n_chunks"] * p["K_PAD"] // p["MERGE_BLOCK"]))
        blocks = [p["BLOCK_V"]] * (steps[0] - 1) + [span - (steps[0] - 1) * p["BLOCK_V"]]
        inserted, _ = ktk.expected_insertions(blocks, p["K_PAD"])
        forecast = ktk.predicted(V, k, method, chunk=chunk, gpu=gpu)
        us = [
            1e6 * _seconds(ktk.predicted(V, k, method, chunk=chunk, gpu=replace(gpu, latency_s=t))) for t in latencies
        ]
        spread.append(max(us) - min(us))
        rows.append(
            (
                _label(method, chunk),
                p["CHUNK"],
                p["n_chunks"],
                " + ".join(map(str, steps)),
                ktk.in_flight_blocks(span, p["BLOCK_V"], p["STAGES"]),
                f"{inserted:.0f}",
                f"{p['n_chunks'] * p['K_PAD']:,}" if len(steps) > 1 else "-",
                " + ".join(f"{q.terms['dependent steps'] * 1e6:.1f}" for q in forecast),
                " + ".join(f"{q.terms['instruction issue'] * 1e6:.1f}" for q in forecast),
                f"{1e6 * _seconds(forecast):.1f}",
                ", ".join(q.bound for q in forecast),
            )
        )
    head = [
        "kernel",
        "CHUNK",
        "programs per row",
        "dependent steps",
        "blocks in flight",
        "insertions per program",
        "candidates merged",
        "chain us",
        "issue us",
        "predicted us",
        "what binds",
    ]
    lat = " and ".join(f"{t * 1e6:g}" for t in latencies)
    same = max(spread, default=0.0) < 0.05
    tail = (
        f"predicted the same at a latency of {lat} us (to 0.1 us): the latency binds none of these launches"
        if same
        else f"predicted at a latency of {lat} us: up to {max(spread):.1f} us apart"
    )
    return f"{text_table(rows, head)}\n{tail}"


def issue_text(gpu: GPU = H200, k_pad: int = 64) -> str:
    """How fast an SM issues instructions in the model (schedulers, clock, the pipes that hold an
    instruction longer) and the issue cycles per warp the model takes for the running top-k and the
    merge at ``k_pad`` (:data:`~nbhelpers.kernels.topk.ISSUE_CYCLES`)."""
    step, enter, insertion = ktk.issue_counts("topk_chunk_kernel", k_pad)
    m_step, _, _ = ktk.issue_counts("topk_merge_kernel", k_pad)
    pipes = ", ".join(f"{name} {cyc}" for name, (_, cyc) in PIPES.items())
    return "\n".join(
        [
            f"instruction issue: {gpu.issue_per_sm} schedulers per SM, one instruction a cycle each, at "
            f"{gpu.clock_hz / 1e9:.2f} GHz (the clock the fp32 peak implies: "
            f"{gpu.peak_flops['fp32'] / 1e12:.0f} TFLOP/s over {gpu.sms} SMs x "
            f"{HOPPER_FP32_FLOPS_PER_SM_CYCLE} FLOPs a cycle)",
            f"cycles an instruction holds its pipe (sm_90): {pipes}; every other instruction 1",
            f"the model's issue cycles per warp (ktk.ISSUE_CYCLES, K_PAD = {k_pad}): a step {step}, "
            f"entering _absorb {enter}, an insertion {insertion}; the merge {m_step:,} a step of "
            f"{ktk.MERGE_BLOCK:,} candidates",
        ]
    )


def compile_rows(table: dict, kernels: Sequence[str] = TOPK_KERNELS, k: int = 50) -> list[dict]:
    """The rows of a recorded compile table (:func:`nbhelpers.results.recorded_compile_check`) for
    sm_90, the course's own kernels (not the solutions'), ``kernels`` and this ``k``."""
    tag = f", k = {k},"
    return [
        r
        for r in table["rows"]
        if r["target"] == "sm_90" and r["source"] != "solution" and r["kernel"] in kernels and tag in r["label"] + ","
    ]


def _per_sm(r: dict) -> int:
    return occupancy(r["registers"], r["num_warps"], r["shared"]).blocks


def _value_bytes(r: dict) -> int:
    return 2 if r["label"].startswith(("bf16", "fp16")) else 4


def _insertion(r: dict) -> tuple[object, object]:
    inner = r["loops"][1] if len(r["loops"]) > 1 and r["loops"][1]["depth"] else None
    return ("-", "-") if inner is None else (inner["instructions"], inner["cycles"])


def _one_table(table: dict, k: int) -> str:
    rows = []
    for r in compile_rows(table, k=k):
        loop = r["loops"][0]  # the loop over the row; its shortest trip: a block filtered and skipped
        rows.append(
            (
                r["kernel"],
                r["label"].split(", k =")[0],
                r["label"].split(f"k = {k}, ")[-1],
                r["registers"],
                r["spill_stores"],
                r["cp_async"],
                r["shared"],
                _per_sm(r),
                loop["shortest"],
                loop["shortest_cycles"],
                *_insertion(r),
            )
        )
    head = [
        "kernel",
        "values",
        "launch",
        "registers",
        "spill B",
        "cp.async",
        "shared B",
        "programs per SM",
        "instr. a step",
        "cycles a step",
        "instr. an insertion",
        "cycles an insertion",
    ]
    meta = table["meta"]
    return f"Triton {meta['triton']}, sm_90, k = {k}:\n{text_table(rows, head)}"


def compile_text(tables: Sequence[dict], gpu: GPU = H200, k: int = 50) -> str:
    """The compile tables (one per Triton version) of the running top-k, radix select and the
    unguarded variant at ``k``, then what they imply on ``gpu``: the model's registers for the
    running top-k; bytes in flight per SM (programs per SM x ``STAGES - 1`` blocks) against
    Little's law for one SM; the running top-k's instructions a logit and the logits an SM filters a
    cycle against those the HBM delivers (the first table, Triton's newest); radix select's
    histogram pass in logits a cycle; the unguarded loop's cycles a step over the guarded one's."""
    out = [_one_table(t, k) for t in tables]
    regs = ktk.REGISTERS["topk_chunk_kernel"]
    out.append(
        f"the model's registers for the running top-k (ktk.REGISTERS, the most of any default launch, "
        f"k = 1,024 included): {regs}, {occupancy(regs, _WARPS, 0).blocks} programs per SM"
    )
    need_sm = little_bytes(gpu) / gpu.sms
    block_bytes = (ktk.STAGES - 1) * ktk.DEFAULT_BLOCK_V
    for t in tables:
        for r in compile_rows(t, k=k):
            if r["label"].endswith("two_stage first stage"):
                n = _per_sm(r)
                out.append(
                    f"Triton {t['meta']['triton']}, {r['label'].split(',')[0]}: {n} programs x "
                    f"{ktk.STAGES - 1} blocks = {n * block_bytes * _value_bytes(r) / 1e3:.1f} kB in flight "
                    f"per SM; Little's law asks {need_sm / 1e3:.1f} kB (at the assumed {gpu.latency_s * 1e6:g} us)"
                )
    hbm_per_sm_cycle = gpu.hbm_bytes_per_s / gpu.sms / gpu.clock_hz
    for r in compile_rows(tables[0], k=k):
        values = r["label"].split(",")[0]
        if r["kernel"] == "topk_chunk_kernel" and r["label"].endswith(f"128,256, k = {k}, row"):
            loop = r["loops"][0]
            per_logit = loop["shortest"] * _WARPS * 32 / ktk.DEFAULT_BLOCK_V
            out.append(
                f"{values}, the running top-k: {per_logit:.1f} thread instructions a logit; an SM filters "
                f"{ktk.DEFAULT_BLOCK_V / loop['shortest_cycles']:.1f} logits a cycle, the HBM delivers "
                f"{hbm_per_sm_cycle / _value_bytes(r):.1f}"
            )
        if r["kernel"] == "radix_select_kernel":
            hist = max(h["cycles"] for h in r["loops"][:-1])
            out.append(
                f"{values}, radix select: an SM counts {ktk.RADIX_BLOCK_V / hist:.1f} logits a cycle "
                "in a histogram pass"
            )
    for t in tables:
        step = {
            r["kernel"]: r["loops"][0]["shortest_cycles"]
            for r in compile_rows(t, k=k)
            if r["label"].startswith("bf16 logits, V = 128,256")
            and r["label"].endswith((f"k = {k}, row", "no if before _absorb"))
        }
        if {"_unguarded_row_kernel", "topk_chunk_kernel"} <= step.keys():
            out.append(
                f"Triton {t['meta']['triton']}: the unguarded loop takes "
                f"{step['_unguarded_row_kernel'] / step['topk_chunk_kernel']:.2f} times the guarded one's cycles a step"
            )
    return "\n".join(out)


def chunk_text(V: int, k: int, batches: Iterable[int], chunks: Sequence[int], gpu: GPU = H200) -> str:
    """bf16 logits: for each batch, the row kernel, the two-stage plan at each of ``chunks`` and at
    the launcher's default chunk: programs, the share of the SMs they can keep busy, the
    candidates' extra bytes over the logits', the model's time (both launches) and what binds the
    first launch; then Little's law for the whole GPU in programs of the running top-k."""
    rows = []
    for batch in batches:
        for method, chunk in [("row", None), *(("two_stage", c) for c in chunks), ("two_stage", None)]:
            p = ktk.plan(V, k, method, chunk=chunk, rows=batch)
            programs = batch * p["n_chunks"]
            extra = 2 * programs * p["K_PAD"] * 8 if method == "two_stage" else 0  # written, then read
            label = _label(method, chunk) if chunk or method == "row" else f"{method}, default: {p['CHUNK']}"
            forecast = ktk.predicted(V, k, method, rows=batch, chunk=chunk, gpu=gpu)
            rows.append(
                (
                    batch,
                    label,
                    programs,
                    min(programs / gpu.sms, 1.0),
                    extra / (batch * V * 2),
                    1e6 * _seconds(forecast),
                    forecast[0].bound,
                )
            )
    head = [
        "batch",
        "kernel",
        "programs",
        f"share of {gpu.sms} SMs busy",
        "extra bytes / logit bytes",
        "predicted us",
        "what binds the first launch",
    ]
    need = little_bytes(gpu)
    per_program = (ktk.STAGES - 1) * ktk.DEFAULT_BLOCK_V * 2
    return (
        f"bf16 logits, k = {k}, {gpu.name}\n{text_table(rows, head, digits=3)}\n"
        f"Little's law, {gpu.name}: {need / 1e6:.1f} MB in flight; at {ktk.STAGES - 1} blocks of "
        f"{ktk.DEFAULT_BLOCK_V * 2 // 1024} KiB in flight per program, {need / per_program:.0f} programs"
    )


def recorded_run_text(run: dict) -> str:
    """A recorded top-k run (``benchmarks/gpu_topk.py``): its GPU, date, versions and script, then
    every row (failed or skipped ones with their reason), with the time the model of the run's own
    GPU (:func:`nbhelpers.perf_model.model_gpu`, its datasheet's numbers) predicts for each Triton
    row, and measured / predicted; for a GPU other than the H200, whether the H200's model
    predicts the same."""
    m = run["meta"]
    gpu = model_gpu(m["gpu"])
    key = lambda r: (r["dtype"], r["batch"], r["k"], r["method"])  # noqa: E731
    predicted = {} if gpu is None else {key(r): r["predicted_ms"] for r in topk_rows(run, gpu)}
    rows = []
    for r in run["rows"]:
        timed = "error" not in r
        pred = predicted.get(key(r))
        rows.append(
            (
                r["dtype"],
                r["batch"],
                r["k"],
                r["method"],
                r["ms"] * 1e3 if timed else "-",
                r["gb_per_s"] if timed else "-",
                (r["vs_torch_topk"] if r["vs_torch_topk"] is not None else "-") if timed else r["error"][:60],
                "-" if pred is None else pred * 1e3,
                "-" if pred is None or not timed else r["ms"] / pred,
            )
        )
    model = "no model of this GPU" if gpu is None else f"{gpu.name} model"
    head = [
        "dtype",
        "batch",
        "k",
        "method",
        "median us",
        "GB/s (one read)",
        "torch.topk / method",
        f"predicted us ({model})",
        "measured / predicted",
    ]
    lines = [
        f"recorded: {m['gpu']}, {m['date']}",
        f"torch {m['torch']}, Triton {m['triton']}",
        f"script: {m['script']}; command: {m['command']}; bytes: {m['bytes']}",
        text_table(rows, head, digits=3),
    ]
    if gpu is not None and gpu is not H200:
        other = {key(r): r["predicted_ms"] for r in topk_rows(run, H200)}
        same = all(abs(other[x] - t) <= 1e-3 * t for x, t in predicted.items())
        lines.append(f"the {H200.name} model predicts the same for every Triton row (to 0.1%): {same}")
    return "\n".join(lines)
