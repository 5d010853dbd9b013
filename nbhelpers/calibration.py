"""What a recorded GPU run says about the performance model (:mod:`nbhelpers.perf_model`): the
model's numbers for the run's GPU, some of them fitted to the run, and every row of the run
predicted again with them, grouped by how much the fit could have shaped each.

A model that is never confronted with a measurement is a guess. The benchmark scripts record each
Triton row's time; :func:`calibrate` starts from the datasheet of the run's GPU
(:func:`perf_model.model_gpu`: the H100 SXM or the H200) and changes what the run measures:

* ``hbm_fraction``: the HBM rate a copy sustains, as a fraction of the datasheet's: torch's own
  contiguous copy in the copy-bandwidth run (the vendor's copy, the best the memory allows);
* ``flops_fraction``: per dtype, the fastest GEMM of the vendor's library in the GEMM run
  (``torch.matmul`` for bf16; ``torch._scaled_mm`` for fp8) over the datasheet's dense peak;
* ``issue_factor``: how many times its counted issue cycles (:func:`nbhelpers.compile_check.issue_cycles`)
  a warp alone on its scheduler takes, from one row: the top-k row kernel at k = 50 and batch 1
  (one program of 4 warps on each busy SM, one warp per scheduler, bound by its instruction
  stream): the measured time over the model's issue time at a factor of 1.

The launch cost is not fitted either: it stays the assumed 5 us. The runs time with
``triton.testing.do_bench``, whose CUDA events may hide part of the host's launch behind the
L2-clearing kernel before it, but a short row keeps a fixed cost of that order: ``short_row``
reports the shortest two-launch row (the two-stage top-k at k = 1, batch 1), its measured time and
the fitted model's work without launches, so the reader sees what each launch left.

The latency is not fitted. The runs bound it from above instead (``latency_caps_s``, per batch): a
program cannot finish before its chain of dependent steps, so every single-launch top-k row's time
caps ``steps / stages x latency``. Nothing is subtracted first: the events may or may not have seen
part of a launch, and a bound must hold either way. The smallest cap of each batch is kept (batch
1 is an idle memory system, the latency unloaded; a full batch loads it).

Then :func:`topk_rows`, :func:`copy_rows` and :func:`gemm_rows` predict every Triton row again
with a model GPU (the datasheet's or the fitted one) and return measured / predicted beside the
bound, and :func:`topk_groups` sorts the top-k rows by what the fit could have shaped: the
fitted kernel's own loop at other sizes, another kernel, and rows the fit barely moves. The
copy and GEMM rows are no independent test: their model is bound by the very rates fitted, so
their ratios are Triton's rate over torch's.

What it cannot do: fit what the runs do not vary (the clock, which the runs do not record: an SM
slower than the assumed clock looks like a larger ``issue_factor``; the L2, which the model leaves
out: at stride 16 or more a strided read behaves as if DRAM were read 64 bytes at a time where the
model counts a 32-byte sector), or transfer to another GPU (the fractions and ``issue_factor`` belong to the GPU, the
driver and the Triton version of the run; :attr:`Calibration.run` names them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from .kernels import copy as kcopy
from .kernels import gemm as kgemm
from .kernels import grouped_gemm as kgg
from .kernels import pressure as kpressure
from .kernels import topk as ktk
from .moe import expert_counts, padded_traffic, route
from .perf_model import GPU, Launch, model_gpu, predict

__all__ = [
    "Calibration",
    "calibrate",
    "copy_rows",
    "gemm_kind_rows",
    "gemm_rows",
    "grouped_gemm_rows",
    "loop_and_ours_misses",
    "padded_rows",
    "pressure_rows",
    "topk_groups",
    "topk_rows",
]

#: the top-k row that measures issue_factor: (method, batch, k, dtype)
FACTOR_ROW = ("row", 1, 50, "bf16")
#: the GEMM runs' kinds whose vendor rows measure each dtype's sustained peak
VENDOR_GEMM_DTYPE = {"bf16": "bf16", "fp8_rowwise": "fp8", "fp8_rowwise_fast_accum": "fp8", "block_scaled": "fp8"}
#: the GEMM runs' kinds as the compile table names our kernel for each: (kernel, label with "{}" for
#: the shape's alignment, "4096^3" or "1000^3", the dtype of its peak, bytes per operand element);
#: the same as benchmarks/gpu_gemm_tflops.py's COMPILED, which predicted the rows when they ran
GEMM_KIND_KERNELS = {
    "bf16": ("matmul_kernel", "bf16 ieee -> bf16, {}", "bf16", 2),
    "fp8_rowwise": ("scaled_matmul_kernel", "e4m3 row/col scales -> bf16, promoted, {}", "fp8", 1),
    "fp8_rowwise_fast_accum": ("scaled_matmul_kernel", "e4m3 row/col scales -> bf16, fast, {}", "fp8", 1),
    "block_scaled": ("block_scaled_matmul_kernel", "e4m3 128x128 block scales -> bf16, {}", "fp8", 1),
}
#: bytes per value of the top-k runs' dtypes
VALUE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: the registers a copy kernel row is predicted with when the compile table has none for it
COPY_REGISTERS = 32
#: bytes per element of the copy runs' dtypes
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
#: the top-k methods that run the fitted row's loop (the running top-k: "two_stage" runs it per
#: chunk, then a merge)
FITTED_LOOP = ("row", "two_stage")


@dataclass(frozen=True)
class Calibration:
    """``spec``: the datasheet's GPU (:func:`perf_model.model_gpu`); ``gpu``: the
    fitted one (the HBM rate and peaks scaled by the fractions, ``issue_factor`` set); the fitted
    numbers; ``latency_caps_s``: per top-k batch, the largest latency its single-launch rows allow;
    ``fitted_on``: the rows each number came from; ``run``: the GPU, date, driver and Triton of
    the runs; ``short_row``: (label, measured seconds, the fitted model's seconds without its
    launches, launches) of the two-stage top-k at k = 1, batch 1, or None."""

    spec: GPU
    gpu: GPU
    hbm_fraction: float
    flops_fraction: Mapping[str, float]
    issue_factor: float
    latency_caps_s: Mapping[int, float]
    fitted_on: Mapping[str, str]
    run: str
    short_row: tuple[str, float, float, int] | None = None


def _meta_gpu(runs: Mapping[str, dict]) -> str:
    names = {name: run.get("meta", {}).get("gpu") for name, run in runs.items()}
    if len(set(names.values())) != 1 or None in names.values():
        raise ValueError(f"the runs must come from one GPU, named in each run's meta; got {names}")
    return next(iter(names.values()))


def _timed(rows: list[dict]) -> list[dict]:
    return [r for r in rows if "error" not in r and r.get("ms") is not None]


def _topk_predictions(row: dict, gpu: GPU) -> list:
    launch = row["launch"]
    return ktk.predicted(
        row["V"],
        row["k"],
        row["method"],
        rows=row["batch"],
        value_bytes=VALUE_BYTES[row["dtype"]],
        chunk=launch.get("CHUNK"),
        gpu=gpu,
        block_v=launch["BLOCK_V"],
    )


def topk_rows(run: dict, gpu: GPU) -> list[dict]:
    """Every timed Triton row of a top-k run (``benchmarks/gpu_topk.py``), predicted again on
    ``gpu`` with the launch the row records: dtype, batch, k, method, ``ms`` measured,
    ``predicted_ms`` (the launches' sum), ``ratio`` (measured / predicted) and ``bound`` (each
    launch's binding limit, joined by "+")."""
    out = []
    for r in _timed(run["rows"]):
        if not r.get("launch"):
            continue
        preds = _topk_predictions(r, gpu)
        seconds = sum(p.seconds for p in preds)
        out.append(
            {
                "dtype": r["dtype"],
                "batch": r["batch"],
                "k": r["k"],
                "method": r["method"],
                "ms": r["ms"],
                "predicted_ms": seconds * 1e3,
                "ratio": r["ms"] * 1e-3 / seconds,
                "bound": "+".join(p.bound for p in preds),
            }
        )
    return out


def _registers(compile_rows: list[dict], kernel: str, block: list) -> int:
    config = "x".join(map(str, block)) + " "
    for r in compile_rows:
        if r["kernel"] == kernel and r["target"] == "sm_90" and r["config"].startswith(config) and r.get("registers"):
            return int(r["registers"])
    return COPY_REGISTERS


def copy_rows(run: dict, gpu: GPU, compile_rows: list[dict] = ()) -> list[dict]:
    """Every timed Triton row of a copy-bandwidth run (``benchmarks/gpu_copy_bandwidth.py``),
    predicted again on ``gpu`` (:func:`nbhelpers.kernels.copy.predicted`, with each kernel's
    registers from ``compile_rows`` where it has them; a strided read's traffic by the 32-byte
    sector model at its stride): name, pattern, stride, ``ms``, ``predicted_ms``, ``ratio`` and
    ``bound``."""
    itemsize = ITEMSIZE[run["meta"]["dtype"]]
    kernels = {"contiguous": "copy_kernel", "strided": "strided_read_kernel", "transposed": "transpose_kernel"}
    out = []
    for r in _timed(run["rows"]):
        if r["kernel"] != "triton":
            continue
        block = tuple(r["block"]) if len(r["block"]) == 2 else r["block"][0]
        efficiency = r.get("sector_efficiency") or 1.0  # the sector model's, as the run recorded it
        registers = _registers(list(compile_rows), kernels[r["pattern"]], r["block"])
        p = kcopy.predicted(r["pattern"], r["outputs"], block, efficiency, registers, itemsize, gpu=gpu)
        out.append(
            {
                "name": r["name"],
                "pattern": r["pattern"],
                "stride": r["stride"],
                "ms": r["ms"],
                "predicted_ms": p.seconds * 1e3,
                "ratio": r["ms"] * 1e-3 / p.seconds,
                "bound": p.bound,
            }
        )
    return out


def gemm_rows(run: dict, compile_rows: list[dict], gpu: GPU) -> list[dict]:
    """Every timed bf16 row of a GEMM run (``benchmarks/gpu_gemm_tflops.py``: the course's Triton
    GEMM), predicted again on ``gpu``: the fastest config the compile table ``compile_rows``
    holds (:func:`nbhelpers.kernels.gemm.fastest_predicted`; a run's own compile table is the
    one for its Triton). M, N, K, ``ms``, ``predicted_ms``, ``ratio``, ``bound`` and ``config``;
    rows the table has no config for are left out."""
    return gemm_kind_rows(run, compile_rows, gpu, "bf16")


def gemm_kind_rows(run: dict, compile_rows: list[dict], gpu: GPU, kind: str) -> list[dict]:
    """:func:`gemm_rows` for any ``kind`` of a GEMM run (a key of :data:`GEMM_KIND_KERNELS`: ours
    in bf16, the row-scaled fp8 GEMM promoted or with fast accumulation, the block-scaled one),
    each timed row of ours predicted again on ``gpu`` from the compile table ``compile_rows``, at
    the dtype's peak of ``gpu`` and the kind's bytes per operand; same keys as :func:`gemm_rows`."""
    if kind not in GEMM_KIND_KERNELS:
        raise ValueError(f"unknown GEMM kind {kind!r}: one of {sorted(GEMM_KIND_KERNELS)}")
    kernel, label, dtype, in_bytes = GEMM_KIND_KERNELS[kind]
    out = []
    for r in run["rows"]:
        if r.get("kind") != kind or r.get("ms_ours") is None:
            continue
        M, N, K = r["M"], r["N"], r["K"]
        aligned = M % 16 == 0 and N % 16 == 0 and K % 16 == 0
        p, config = kgemm.fastest_predicted(
            compile_rows, kernel, label.format("4096^3" if aligned else "1000^3"), M, N, K, dtype, in_bytes, gpu
        )
        if p is None:
            continue
        out.append(
            {
                "M": M,
                "N": N,
                "K": K,
                "ms": r["ms_ours"],
                "predicted_ms": p.seconds * 1e3,
                "ratio": r["ms_ours"] * 1e-3 / p.seconds,
                "bound": p.bound,
                "config": config,
            }
        )
    return out


def pressure_rows(run: dict, gpu: GPU) -> list[dict]:
    """Every timed row of a register-pressure run (``benchmarks/gpu_register_pressure.py``: chapter
    09's :func:`nbhelpers.kernels.pressure.ema_kernel` on a float32 ``x (rows, cols)``, the
    shape in ``run["meta"]``), predicted again on ``gpu``: one program per ``BLOCK`` columns, the
    row's ``blocks_per_sm`` of them resident per SM, ``rows`` dependent steps each loading ``BLOCK``
    float32 and waiting for them (one step in flight: the loop is not pipelined), ``x`` read once
    and ``k + 1`` rows of ``cols`` float32 written. k, ``warps`` per SM, ``spills``, ``ms``,
    ``predicted_ms``, ``ratio`` (measured / predicted) and ``bound``; rows without a time or an
    occupancy are left out."""
    n_rows, n_cols = run["meta"]["rows"], run["meta"]["cols"]
    loaded = n_rows * n_cols * 4
    out = []
    for r in _timed(run["rows"]):
        if not r.get("blocks_per_sm"):
            continue
        launch = Launch(-(-n_cols // kpressure.BLOCK), r["blocks_per_sm"], kpressure.BLOCK * 4, n_rows, 1)
        p = predict(gpu, launch, loaded + (r["k"] + 1) * n_cols * 4, bytes_loaded=loaded)
        out.append(
            {
                "k": r["k"],
                "warps": r.get("warps_per_sm"),
                "spills": r.get("spills"),
                "ms": r["ms"],
                "predicted_ms": p.seconds * 1e3,
                "ratio": r["ms"] * 1e-3 / p.seconds,
                "bound": p.bound,
            }
        )
    return out


def _routed_loads(r: dict, skew: float = 1.0, seed: int = 0):
    """The per-expert rows of a grouped-GEMM row's routing (the benchmark's ``nbhelpers.moe.route``
    with ``skew`` and ``seed``), checked against what the row recorded of it."""
    loads = expert_counts(route(r["T"], r["E"], r["top_k"], skew=skew, seed=seed).expert_ids, r["E"])
    got = (int(loads.sum()), int(loads.max()), int((loads == 0).sum()))
    if got != (r["rows"], r["max_load"], r["empty_experts"]):
        raise ValueError(
            f"the routing of {r['size']} E={r['E']} T={r['T']} gives (rows, busiest, empty) {got}, the run "
            f"recorded {(r['rows'], r['max_load'], r['empty_experts'])}: not the run's routing"
        )
    return loads


def grouped_gemm_rows(run: dict, compile_rows: list[dict], gpu: GPU) -> list[dict]:
    """Every timed row of a grouped-GEMM run (``benchmarks/gpu_grouped_gemm.py``), predicted again
    on ``gpu`` from the row's routing (rebuilt as the run's ``meta["routing"]`` says, skew 1, seed
    0, and checked against the loads the row recorded): ours, the fastest of the tuner's configs
    in ``compile_rows`` (:func:`nbhelpers.kernels.grouped_gemm.fastest_predicted`), as the longer
    of its host's launches as called and its GPU time (the launches overlap the GPU's work, as they
    do the loop's; the benchmark's timer clears the L2 before each call, which the launches
    overlap too); and the
    loop's GPU time, each active expert its own launch of the fastest config for its rows alone
    (a stand-in for cuBLAS), the GPU's time of each summed, without the host's launches. Per row:
    size, E, T, ``active`` experts, ``ms`` (ours measured), ``predicted_ms``, ``ratio`` (measured /
    predicted), ``bound``, ``config``, ``loop_ms`` (measured), ``loop_gpu_ms`` (the model's),
    ``loop_compute_share`` (the share of ``loop_gpu_ms`` spent in experts the model finds
    compute-bound) and ``loop_us_per_expert`` (the measured loop over its active experts, in us)."""
    out = []
    for r in _timed(run["rows"]):
        loads = _routed_loads(r)
        K, N = r["K"], r["N"]
        p, config = kgg.fastest_predicted(compile_rows, loads, K, N, gpu=gpu)
        if p is None:
            continue
        ours_s = max(p.launch_s, p.seconds - p.launch_s)  # host, GPU: overlapped
        one: dict[int, tuple[float, bool]] = {}
        for n in {int(v) for v in loads if v}:
            q, _ = kgg.fastest_predicted(compile_rows, [n], K, N, gpu=gpu, cuda_graph=True)
            one[n] = (q.seconds - q.launch_s, q.bound == "compute")
        active = int((loads > 0).sum())
        loop_gpu = sum(one[int(n)][0] for n in loads if n)
        loop_compute = sum(one[int(n)][0] for n in loads if n and one[int(n)][1])
        out.append(
            {
                "size": r["size"],
                "E": r["E"],
                "T": r["T"],
                "active": active,
                "ms": r["ms"]["ours"],
                "predicted_ms": ours_s * 1e3,
                "ratio": r["ms"]["ours"] * 1e-3 / ours_s,
                "bound": p.bound,
                "config": config,
                "loop_ms": r["ms"]["loop"],
                "loop_gpu_ms": loop_gpu * 1e3,
                "loop_compute_share": loop_compute / loop_gpu,
                "loop_us_per_expert": r["ms"]["loop"] * 1e3 / active,
            }
        )
    return out


def padded_rows(run: dict, gpu: GPU) -> list[dict]:
    """The padded batch of every timed row of a grouped-GEMM run against a napkin of what
    :func:`nbhelpers.moe.padded_matmul` does: its batched GEMM over E x capacity rows at the rate
    grouped_mm reached on the routed rows (``grouped_mm ms * computed_rows / kept_rows``), plus the
    copies it makes besides (:func:`nbhelpers.moe.padded_traffic`, from the row's own routing) at
    ``gpu``'s HBM rate. Per row: size, E, T, ``uneven``, the measured ``ms`` of all four
    implementations, ``rows_ratio`` (computed / kept rows), ``copy_bytes``, ``index_bytes`` (sent
    from the host per call), ``copies_ms``, ``napkin_ms`` and ``share`` (napkin over measured: what
    the napkin leaves out, host work included, is 1 - share)."""
    out = []
    for r in _timed(run["rows"]):
        t = padded_traffic(_routed_loads(r), r["K"], r["N"], r["capacity_factor"])
        ms = dict(r["ms"])
        copies_ms = t.copy_bytes / gpu.hbm_bytes_per_s * 1e3
        napkin = ms["grouped_mm"] * t.computed_rows / t.kept_rows + copies_ms
        out.append(
            {
                "size": r["size"],
                "E": r["E"],
                "T": r["T"],
                "uneven": r["uneven"],
                "ms": ms,
                "rows_ratio": t.computed_rows / t.kept_rows,
                "copy_bytes": t.copy_bytes,
                "index_bytes": t.index_bytes,
                "copies_ms": copies_ms,
                "napkin_ms": napkin,
                "share": napkin / ms["padded"],
            }
        )
    return out


def loop_and_ours_misses(short: list[dict], long: list[dict], host_us: float) -> list[dict]:
    """How far the model misses the loop and our kernel, row by row, and the quotient of the two.
    ``short`` and ``long``: :func:`grouped_gemm_rows` of one run at the two ends of the latency
    range, in the same order; ``host_us``: the host's cost per active expert. The model's loop is
    the longer of the host's ``active * host_us`` (``host_ms``) and its GPU time, since the launches
    overlap the GPU's work. Per row, each a pair (short latency, long latency): ``loop_miss``
    (measured loop over the model's), ``ours_miss`` (measured ours over the model's) and
    ``quotient`` (``loop_miss / ours_miss``: the measured loop / ours over the model's, which is
    the loop's GEMMs against ours once the model's common rates cancel, but only where the model's
    loop is its GPU time and that time is compute-bound); ``loop_bound`` (``"host"`` or ``"GPU"``:
    which sets the model's loop) and ``loop_compute_share`` (the share of the loop's GPU time in
    compute-bound experts), each a pair too; and ``bound`` (what bounds ours at the long
    latency)."""
    if len(short) != len(long):
        raise ValueError(f"short and long must hold the same rows, got {len(short)} and {len(long)}")
    out = []
    for a, b in zip(short, long):
        if (a["size"], a["E"], a["T"]) != (b["size"], b["E"], b["T"]):
            raise ValueError(f"rows differ: {(a['size'], a['E'], a['T'])} against {(b['size'], b['E'], b['T'])}")
        host = a["active"] * host_us / 1e3
        loop = tuple(r["loop_ms"] / max(host, r["loop_gpu_ms"]) for r in (a, b))
        ours = (a["ratio"], b["ratio"])
        out.append(
            {
                "size": a["size"],
                "E": a["E"],
                "T": a["T"],
                "active": a["active"],
                "host_ms": host,
                "loop_miss": loop,
                "ours_miss": ours,
                "quotient": (loop[0] / ours[0], loop[1] / ours[1]),
                "loop_bound": tuple("host" if host >= r["loop_gpu_ms"] else "GPU" for r in (a, b)),
                "loop_compute_share": (a["loop_compute_share"], b["loop_compute_share"]),
                "bound": b["bound"],
            }
        )
    return out


def _latency_caps(topk_run: dict, gpu: GPU) -> dict[int, float]:
    """Per batch, the largest latency every single-launch top-k row of that batch allows: its
    measured time over its chain of dependent steps counted in latencies (no launch subtracted:
    an upper bound whatever the timer saw of the launch)."""
    caps: dict[int, float] = {}
    for r in _timed(topk_run["rows"]):
        if not r.get("launch"):
            continue
        preds = _topk_predictions(r, gpu)
        if len(preds) != 1:
            continue
        chain = preds[0].terms["dependent steps"] / gpu.latency_s  # in latencies
        cap = r["ms"] * 1e-3 / chain
        caps[r["batch"]] = min(cap, caps.get(r["batch"], cap))
    return dict(sorted(caps.items()))


def topk_groups(rows: list[dict]) -> dict[str, list[dict]]:
    """:func:`topk_rows`' rows, less the one ``issue_factor`` is fitted to, sorted by what the fit
    could have shaped: "the fitted loop" (the running top-k, alone or per chunk, at k > 1: the
    fitted row's own loop at other sizes), "another kernel" (radix select) and "k = 1" (the
    running top-k at k = 1, bound by its chain of steps or by a short loop: the fit barely
    moves them)."""
    groups: dict[str, list[dict]] = {"the fitted loop": [], "another kernel": [], "k = 1": []}
    for r in rows:
        if (r["method"], r["batch"], r["k"], r["dtype"]) == FACTOR_ROW:
            continue
        if r["k"] == 1 and r["method"] in FITTED_LOOP:
            groups["k = 1"].append(r)
        elif r["method"] in FITTED_LOOP:
            groups["the fitted loop"].append(r)
        else:
            groups["another kernel"].append(r)
    return groups


def calibrate(topk: dict, copy: dict, gemm: dict) -> Calibration:
    """Fit the model to a recorded run of one GPU: ``topk``, ``copy`` and ``gemm`` are the runs of
    ``benchmarks/gpu_topk.py``, ``gpu_copy_bandwidth.py`` and ``gpu_gemm_tflops.py`` as
    :func:`nbhelpers.results.recorded` reads them (the module's docstring says what is fitted
    from which rows). Raises ValueError when the runs name different GPUs, when the model has no
    specification for the GPU, or when a row the fit needs is missing."""
    name = _meta_gpu({"topk": topk, "copy": copy, "gemm": gemm})
    datasheet = model_gpu(name)
    if datasheet is None:
        raise ValueError(f"the model has no specification for {name!r}: it knows the H100 SXM and the H200")
    spec = datasheet
    fitted_on: dict[str, str] = {}

    torch_copy = [r for r in _timed(copy["rows"]) if r["kernel"] == "torch" and r["pattern"] == "contiguous"]
    if not torch_copy:
        raise ValueError("the copy run has no timed torch contiguous copy row to fit the HBM rate to")
    best = max(torch_copy, key=lambda r: r["bandwidth"])
    hbm_fraction = best["bandwidth"] / spec.hbm_bytes_per_s
    fitted_on["hbm_fraction"] = f"{best['name']}: {best['bandwidth'] / 1e12:.2f} TB/s"

    flops: dict[str, float] = {}
    for r in gemm["rows"]:
        dtype = VENDOR_GEMM_DTYPE.get(r.get("kind"))
        if dtype is None or r.get("tflops_theirs") is None or not str(r.get("theirs")).startswith("torch"):
            continue  # the peer of the block-scaled rows is the course's own kernel, not the vendor's
        rate = r["tflops_theirs"] * 1e12
        if rate > flops.get(dtype, (0.0, ""))[0]:
            flops[dtype] = (rate, f"{r['theirs']} {r['kind']} {r['M']}x{r['N']}x{r['K']}")
    if "bf16" not in flops:
        raise ValueError("the GEMM run has no timed bf16 row of torch's GEMM to fit the bf16 peak to")
    flops_fraction = {dtype: rate / spec.peak_flops[dtype] for dtype, (rate, _) in flops.items()}
    if "fp16" in spec.peak_flops and "fp16" not in flops_fraction:
        flops_fraction["fp16"] = flops_fraction["bf16"]  # the same tensor cores at the same rate
    for dtype, (rate, row) in flops.items():
        fitted_on[f"flops_fraction[{dtype}]"] = f"{row}: {rate / 1e12:.0f} TFLOP/s"

    method, batch, k, dtype = FACTOR_ROW
    factor_rows = [
        r
        for r in _timed(topk["rows"])
        if (r["method"], r["batch"], r["k"], r["dtype"]) == (method, batch, k, dtype) and r.get("launch")
    ]
    if not factor_rows:
        raise ValueError(
            f"the top-k run has no timed {method} row at batch {batch}, k = {k}, {dtype} to fit issue_factor to"
        )
    r = factor_rows[0]
    (p,) = _topk_predictions(r, spec)
    issue = p.terms.get("instruction issue")
    if issue is None:
        raise ValueError("the top-k row kernel's prediction counts no instruction issue to fit issue_factor to")
    issue_factor = max(1.0, (r["ms"] * 1e-3 - spec.launch_s) / issue)
    fitted_on["issue_factor"] = f"top-k {method}, batch {batch}, k = {k}, {dtype}: {r['ms'] * 1e3:.1f} us"

    gpu = replace(
        spec,
        name=f"{spec.name}, fitted",
        hbm_bytes_per_s=spec.hbm_bytes_per_s * hbm_fraction,
        peak_flops={d: v * flops_fraction.get(d, 1.0) for d, v in spec.peak_flops.items()},
        issue_factor=issue_factor,
    )
    meta = topk["meta"]
    run = f"{name}, {meta.get('date', '?')[:10]}, driver {meta.get('driver', '?')}, Triton {meta.get('triton', '?')}"
    return Calibration(
        spec,
        gpu,
        hbm_fraction,
        MappingProxyType(flops_fraction),
        issue_factor,
        MappingProxyType(_latency_caps(topk, gpu)),
        MappingProxyType(fitted_on),
        run,
        _short_row(topk, gpu),
    )


def _short_row(topk_run: dict, gpu: GPU) -> tuple[str, float, float, int] | None:
    for r in _timed(topk_run["rows"]):
        if (r["method"], r["batch"], r["k"]) == ("two_stage", 1, 1) and r.get("launch"):
            preds = _topk_predictions(r, gpu)
            work = sum(p.seconds - p.launch_s for p in preds)
            return (f"top-k two_stage, batch 1, k = 1, {r['dtype']}", r["ms"] * 1e-3, work, len(preds))
    return None
