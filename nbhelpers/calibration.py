"""What a recorded GPU run says about the performance model (:mod:`nbhelpers.perf_model`): the
model's numbers for the run's GPU, three of them fitted to the run, and every other row of the run
predicted again with them, so that a reader sees how far the model is off on rows it was not fitted
to.

A model that is never confronted with a measurement is a guess. The benchmark scripts record each
Triton row's prediction beside its time; this module turns a run into a calibration:

* :func:`calibrate` starts from the specification of the run's GPU (:func:`perf_model.model_gpu`:
  the H100 SXM or the H200) and fits, each from the rows that identify it alone:

  - ``hbm_fraction``: the HBM rate a copy sustains, as a fraction of the specification: torch's own
    contiguous copy in the copy-bandwidth run (the vendor's copy, the best the memory allows);
  - ``flops_fraction``: per dtype, the fastest GEMM of the vendor's library in the GEMM run
    (``torch.matmul`` for bf16; ``torch._scaled_mm`` for fp8) over the specification's dense peak;
  - ``issue_cpi``: the cycles a warp alone on its scheduler spends per instruction it issues, from
    the top-k row kernel at k = 50 and batch 1 (one program of 4 warps on each busy SM, one warp per
    scheduler: the time is its instruction stream, issued one dependent instruction after another):
    the measured time, less the launch, over the model's issue time at one cycle an instruction.

  The latency stays the assumption it was (:data:`perf_model.LATENCY_RANGE_S`): no row of these
  runs is bound by it once the issue waits are counted. The run bounds it from above, though
  (``latency_at_most_s``): a program cannot finish before its chain of dependent steps, so every
  single-launch row's time, less the launch, caps ``steps / stages x latency``.
* :func:`topk_rows`, :func:`copy_rows` and :func:`gemm_rows` predict every Triton row of a run
  again with a given model GPU (the specification's or the calibrated one) and return measured /
  predicted beside the bound, so a chapter can show both.

What it cannot do: fit what the runs do not vary (the latency; the L2, which the model leaves out:
a strided read at stride 16 or more fetches 64 bytes where the model counts a 32-byte sector, and
its rows stay below their prediction), or transfer to another GPU (the fractions and ``issue_cpi``
belong to the GPU, the driver and the Triton version of the run; :attr:`Calibration.run` names
them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from .kernels import copy as kcopy
from .kernels import gemm as kgemm
from .kernels import topk as ktk
from .perf_model import GPU, model_gpu

__all__ = ["Calibration", "calibrate", "copy_rows", "gemm_rows", "topk_rows"]

#: the top-k row that measures issue_cpi: (method, batch, k, dtype)
CPI_ROW = ("row", 1, 50, "bf16")
#: the GEMM runs' kinds whose vendor rows measure each dtype's sustained peak
VENDOR_GEMM_DTYPE = {"bf16": "bf16", "fp8_rowwise": "fp8", "fp8_rowwise_fast_accum": "fp8", "block_scaled": "fp8"}
#: bytes per value of the top-k runs' dtypes
VALUE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: the registers a copy kernel row is predicted with when the compile table has none for it
COPY_REGISTERS = 32
#: bytes per element of the copy runs' dtypes
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Calibration:
    """The specification's GPU (``spec``), the calibrated one (``gpu``: the HBM rate and peaks
    scaled by the fractions, ``issue_cpi`` set), the fitted numbers, ``latency_at_most_s`` (the
    largest latency the run's single-launch rows allow), ``fitted_on`` (the rows each number came
    from) and ``run`` (the GPU, date, driver and Triton of the runs)."""

    spec: GPU
    gpu: GPU
    hbm_fraction: float
    flops_fraction: Mapping[str, float]
    issue_cpi: float
    latency_at_most_s: float | None
    fitted_on: Mapping[str, str]
    run: str


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
    out = []
    for r in run["rows"]:
        if r.get("kind") != "bf16" or r.get("ms_ours") is None:
            continue
        M, N, K = r["M"], r["N"], r["K"]
        aligned = M % 16 == 0 and N % 16 == 0 and K % 16 == 0
        label = f"bf16 ieee -> bf16, {'4096^3' if aligned else '1000^3'}"
        p, config = kgemm.fastest_predicted(compile_rows, "matmul_kernel", label, M, N, K, gpu=gpu)
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


def _latency_at_most(topk_run: dict, gpu: GPU) -> float | None:
    """The largest latency every single-launch top-k row allows: its time, less the launch, over
    its chain of dependent steps counted in latencies."""
    caps = []
    for r in _timed(topk_run["rows"]):
        if not r.get("launch"):
            continue
        preds = _topk_predictions(r, gpu)
        if len(preds) != 1:
            continue
        chain = preds[0].terms["dependent steps"] / gpu.latency_s  # in latencies
        caps.append((r["ms"] * 1e-3 - gpu.launch_s) / chain)
    return min(caps) if caps else None


def calibrate(topk: dict, copy: dict, gemm: dict) -> Calibration:
    """Fit the model to a recorded run of one GPU: ``topk``, ``copy`` and ``gemm`` are the runs of
    ``benchmarks/gpu_topk.py``, ``gpu_copy_bandwidth.py`` and ``gpu_gemm_tflops.py`` as
    :func:`nbhelpers.results.recorded` reads them (the module's docstring says what is fitted
    from which rows). Raises ValueError when the runs name different GPUs, when the model has no
    specification for the GPU, or when a row the fit needs is missing."""
    name = _meta_gpu({"topk": topk, "copy": copy, "gemm": gemm})
    spec = model_gpu(name)
    if spec is None:
        raise ValueError(f"the model has no specification for {name!r}: it knows the H100 SXM and the H200")
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

    method, batch, k, dtype = CPI_ROW
    cpi_rows = [
        r
        for r in _timed(topk["rows"])
        if (r["method"], r["batch"], r["k"], r["dtype"]) == (method, batch, k, dtype) and r.get("launch")
    ]
    if not cpi_rows:
        raise ValueError(
            f"the top-k run has no timed {method} row at batch {batch}, k = {k}, {dtype} to fit issue_cpi to"
        )
    r = cpi_rows[0]
    (p,) = _topk_predictions(r, spec)
    issue = p.terms.get("instruction issue")
    if issue is None:
        raise ValueError("the top-k row kernel's prediction counts no instruction issue: nothing to fit issue_cpi to")
    issue_cpi = max(1.0, (r["ms"] * 1e-3 - spec.launch_s) / issue)
    fitted_on["issue_cpi"] = f"top-k {method}, batch {batch}, k = {k}, {dtype}: {r['ms'] * 1e3:.1f} us"

    gpu = replace(
        spec,
        name=f"{spec.name}, calibrated",
        hbm_bytes_per_s=spec.hbm_bytes_per_s * hbm_fraction,
        peak_flops={d: v * flops_fraction.get(d, 1.0) for d, v in spec.peak_flops.items()},
        issue_cpi=issue_cpi,
    )
    meta = topk["meta"]
    run = f"{name}, {meta.get('date', '?')[:10]}, driver {meta.get('driver', '?')}, Triton {meta.get('triton', '?')}"
    return Calibration(
        spec,
        gpu,
        hbm_fraction,
        MappingProxyType(flops_fraction),
        issue_cpi,
        _latency_at_most(topk, gpu),
        MappingProxyType(fitted_on),
        run,
    )
