"""A recorded GEMM run (``benchmarks/gpu_gemm_tflops.py``) against the performance model, kind by
kind, as chapter 09 prints it: every timed row of ours predicted again on the run's own GPU
(:func:`nbhelpers.calibration.gemm_kind_rows`, from the run's own compile table, without the
launch that ``do_bench``'s events hide), once at the datasheet's peaks and once at the peaks that
torch's GEMMs sustained in the same run (:class:`nbhelpers.calibration.Calibration`'s
``flops_fraction``), with the fp8 kernels' speed beside the fast-accumulation kernel's. It imports
the kernels (through :mod:`nbhelpers.calibration`): import it after
:func:`nbhelpers.device.setup_device`."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from .calibration import GEMM_KIND_KERNELS, Calibration, gemm_kind_rows
from .perf_model import GPU
from .tables import text_table

__all__ = ["KIND_NAMES", "kind_fits", "kinds_text", "relative_speeds", "sustained_gpu"]

#: the run's kinds as the chapter names them
KIND_NAMES = {
    "bf16": "bf16",
    "fp8_rowwise": "fp8 promoted",
    "fp8_rowwise_fast_accum": "fp8 fast accum",
    "block_scaled": "block-scaled",
}


def _shape(r: dict) -> tuple[int, int, int]:
    return r["M"], r["N"], r["K"]


def _big(shape: tuple[int, int, int]) -> bool:
    """An aligned shape from 2048^3 up: compute-bound, and the kernels' own tiles fill the GPU."""
    M, N, K = shape
    return M % 16 == 0 and N % 16 == 0 and K % 16 == 0 and M * N * K >= 2048**3


def sustained_gpu(c: Calibration) -> GPU:
    """The run's GPU from its datasheet, no launch cost, with each dtype's peak at the rate torch's
    GEMM sustained in the run (``c.flops_fraction``; dtypes the run did not time keep theirs)."""
    spec = replace(c.spec, launch_s=0.0)
    return replace(spec, peak_flops={d: v * c.flops_fraction.get(d, 1.0) for d, v in spec.peak_flops.items()})


def kind_fits(
    c: Calibration, gemm_run: dict, compile_rows: list[dict], left_out: Collection[tuple] = ()
) -> dict[str, dict[tuple[int, int, int], tuple[dict, dict]]]:
    """kind -> {(M, N, K): (the row predicted at the datasheet's peaks, at the sustained ones)},
    both without a launch cost, for every timed row of ours that the compile table has a config
    for; ``left_out``: (kind, M, N, K) of rows not to read (a suspect timing)."""
    datasheet = replace(c.spec, launch_s=0.0)
    sustained = sustained_gpu(c)
    fits = {}
    for kind in GEMM_KIND_KERNELS:
        pairs = zip(
            gemm_kind_rows(gemm_run, compile_rows, datasheet, kind),
            gemm_kind_rows(gemm_run, compile_rows, sustained, kind),
        )
        fits[kind] = {_shape(a): (a, b) for a, b in pairs if (kind, *_shape(a)) not in left_out}
    return fits


def relative_speeds(gemm_run: dict, base: str = "fp8_rowwise_fast_accum") -> dict[str, dict[tuple, float]]:
    """kind -> {(M, N, K): the speed of ours in that kind over ours in ``base`` at the same shape},
    from the run's measured times (``ms_ours``), for the fp8 kinds other than ``base``."""
    times: dict[str, dict[tuple, float]] = {}
    for r in gemm_run["rows"]:
        if r.get("ms_ours") is not None:
            times.setdefault(r["kind"], {})[_shape(r)] = r["ms_ours"]
    if base not in times:
        raise ValueError(f"the run has no timed {base!r} row to compare with")
    return {
        kind: {s: times[base][s] / ms for s, ms in by_shape.items() if s in times[base]}
        for kind, by_shape in times.items()
        if kind != base and GEMM_KIND_KERNELS[kind][2] == GEMM_KIND_KERNELS[base][2]
    }


def _span(values: list[float]) -> str:
    return "-" if not values else f"{min(values):.2f}-{max(values):.2f}"


def kinds_text(c: Calibration, gemm_run: dict, compile_table: dict, left_out: Collection[tuple] = ()) -> str:
    """The peaks, one line per shape (measured / predicted for each kind, datasheet | sustained,
    and the promoted and block-scaled kernels' speed over the fast-accumulation one), then the
    ranges over the aligned shapes from 2048^3 up. ``compile_table``: the run's own compile check
    (:func:`nbhelpers.results.recorded_compile_check`)."""
    fits = kind_fits(c, gemm_run, compile_table["rows"], left_out)
    speeds = relative_speeds(gemm_run)
    speeds = {k: {s: v for s, v in by.items() if (k, *s) not in left_out} for k, by in speeds.items()}
    spec, sustained = c.spec, sustained_gpu(c)
    meta = compile_table["meta"]
    lines = [
        f"{spec.name}, no launch cost, latency {spec.latency_s * 1e6:g} us (assumed); compile table: "
        f"Triton {meta['triton']}, {meta['date'][:10]}"
    ]
    for d in ("bf16", "fp8"):
        if f"flops_fraction[{d}]" in c.fitted_on:
            lines.append(
                f"{d} peak: {spec.peak_flops[d] / 1e12:.0f} TFLOP/s (datasheet), "
                f"{sustained.peak_flops[d] / 1e12:.0f} sustained ({c.flops_fraction[d]:.2f}; "
                f"{c.fitted_on[f'flops_fraction[{d}]'].split(':')[0]})"
            )
    shapes = list(dict.fromkeys(s for by in fits.values() for s in by))
    rows = []
    for s in shapes:
        row = [" x ".join(map(str, s))]
        for kind in GEMM_KIND_KERNELS:
            pair = fits[kind].get(s)
            row.append("-" if pair is None else f"{pair[0]['ratio']:.2f} | {pair[1]['ratio']:.2f}")
        row += [speeds.get(k, {}).get(s, "-") for k in ("fp8_rowwise", "block_scaled")]
        row.append(", ".join(dict.fromkeys(p[1]["bound"] for by in fits.values() if s in by for p in [by[s]])))
        rows.append(tuple(row))
    heads = ["M x N x K", *KIND_NAMES.values(), "promoted / fast", "block-scaled / fast", "what binds"]
    lines.append("measured / predicted (datasheet | sustained peaks), and ours' speed over fp8 fast accum:")
    lines.append(text_table(rows, heads, digits=3))
    lines.append("aligned shapes from 2048^3 up, measured / predicted (datasheet; sustained):")
    for kind, by in fits.items():
        big = [p for s, p in by.items() if _big(s)]
        lines.append(
            f"  {KIND_NAMES[kind]:15s} {_span([a['ratio'] for a, _ in big])}; {_span([b['ratio'] for _, b in big])}"
        )
    for kind, by in speeds.items():
        lines.append(f"  {KIND_NAMES[kind]} / fp8 fast accum, speed: {_span([v for s, v in by.items() if _big(s)])}")
    return "\n".join(lines)
