"""A recorded GEMM run (``benchmarks/gpu_gemm_tflops.py``) against the performance model, kind by
kind, as chapter 09 prints it: every timed row of ours predicted again on the run's own GPU
(:func:`nbhelpers.calibration.gemm_kind_rows`, from the run's own compile table, without the
launch that ``do_bench``'s events hide), once at the datasheet's peaks and once at the peaks that
torch's GEMMs sustained in the same run (:class:`nbhelpers.calibration.Calibration`'s
``flops_fraction``), with the fp8 kernels' speed beside the fast-accumulation kernel's. It imports
the kernels (through :mod:`nbhelpers.calibration`): import it after
:func:`nbhelpers.device.setup_device`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Collection
from dataclasses import replace

from .calibration import GEMM_KIND_KERNELS, Calibration, gemm_kind_rows
from .occupancy import H100, occupancy
from .perf_model import GPU
from .tables import text_table

__all__ = [
    "KIND_NAMES",
    "fill_text",
    "kind_fits",
    "kinds_text",
    "promotion_configs",
    "predicted_configs",
    "promotion_text",
    "promotion_wait",
    "promotion_waits",
    "relative_speeds",
    "sustained_gpu",
    "torch_promotion_speeds",
]

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


def torch_promotion_speeds(gemm_run: dict) -> dict[tuple[int, int, int], float]:
    """{(M, N, K): the speed of torch's promoted fp8 GEMM over its fast-accumulation one}
    (``torch._scaled_mm`` with ``use_fast_accum`` False and True: the ``theirs`` side of the
    ``fp8_rowwise`` and ``fp8_rowwise_fast_accum`` rows), from the run's measured times."""
    times: dict[str, dict[tuple, float]] = {}
    for r in gemm_run["rows"]:
        if r["kind"] in ("fp8_rowwise", "fp8_rowwise_fast_accum") and r.get("ms_theirs") is not None:
            times.setdefault(r["kind"], {})[_shape(r)] = r["ms_theirs"]
    fast, promoted = times.get("fp8_rowwise_fast_accum", {}), times.get("fp8_rowwise", {})
    return {s: fast[s] / ms for s, ms in promoted.items() if s in fast}


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
    torch_speeds = torch_promotion_speeds(gemm_run)
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
        row.append(torch_speeds.get(s, "-"))
        row.append(", ".join(dict.fromkeys(p[1]["bound"] for by in fits.values() if s in by for p in [by[s]])))
        rows.append(tuple(row))
    heads = [
        "M x N x K",
        *KIND_NAMES.values(),
        "promoted / fast",
        "block-scaled / fast",
        "torch promoted / fast",
        "what binds",
    ]
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
    lines.append(
        "  torch._scaled_mm promoted / fast accum, speed: " + _span([v for s, v in torch_speeds.items() if _big(s)])
    )
    return "\n".join(lines)


def fill_text(c: Calibration, gemm_run: dict, compile_table: dict, shape=(1024, 1024, 1024)) -> str:
    """How full the GPU is at ``shape`` for ours in bf16: the config the model picks (at the
    sustained peaks, from the run's compile table), its output tiles against the SMs, and the
    compute time of the busiest SM (its tiles one after another, each at 1/sms of the peak), at
    the datasheet's and the sustained bf16 peak, against the measurement; then torch's own bf16
    and fp8 GEMMs at that shape (rate and time)."""
    M, N, K = shape
    sustained = sustained_gpu(c)
    row = next(r for r in gemm_kind_rows(gemm_run, compile_table["rows"], sustained, "bf16") if _shape(r) == shape)
    bm, bn, _ = (int(v) for v in row["config"].split()[0].split("x"))
    tiles = -(-M // bm) * -(-N // bn)
    waves = -(-tiles // c.spec.sms)
    flops_sm = waves * 2 * bm * bn * K
    lines = [
        f"bf16 {M} x {N} x {K}, ours: {row['config']} -> {tiles} output tiles on {c.spec.sms} SMs "
        f"({min(tiles, c.spec.sms) / c.spec.sms:.0%} busy, {waves} wave{'s' if waves > 1 else ''})"
    ]
    measured = row["ms"] * 1e-3
    # the model's chain: K / BLOCK_K dependent steps, num_stages - 1 of them in flight, one
    # latency each per wave
    stages = int(row["config"].split(" s")[-1].split()[0])
    steps = -(-K // int(row["config"].split()[0].split("x")[2]))
    chain = waves * steps / (stages - 1) * c.spec.latency_s
    lines.append(
        f"  the chain: {steps} steps / {stages - 1} in flight x {c.spec.latency_s * 1e6:.2f} us "
        f"x {waves} wave{'s' if waves > 1 else ''} = {chain * 1e6:.2f} us"
    )
    for name, gpu in (("datasheet", c.spec), ("sustained", sustained)):
        t = flops_sm / (gpu.peak_flops["bf16"] / gpu.sms)
        whole = 2 * M * N * K / gpu.peak_flops["bf16"]
        lines.append(
            f"  compute at the {name} peak: {whole * 1e6:.2f} us over the whole GPU, "
            f"{t * 1e6:.2f} us on the busy SMs; measured {measured * 1e6:.1f} us = {measured / t:.2f}x"
        )
    theirs = {r["kind"]: r for r in gemm_run["rows"] if _shape(r) == shape and r.get("ms_theirs")}
    lines.append(
        "  torch at this shape: "
        + ", ".join(
            f"{KIND_NAMES[k]} {theirs[k]['tflops_theirs']:.0f} TFLOP/s ({theirs[k]['ms_theirs'] * 1e3:.1f} us)"
            for k in ("bf16", "fp8_rowwise", "fp8_rowwise_fast_accum")
            if k in theirs
        )
    )
    return "\n".join(lines)


_WAIT_NOTE = re.compile(r"\(C7517\)[^\n]*")


def _compile_promotion(configs: Collection[str] | None = None) -> dict:
    """Compile the row-scaled fp8 kernel, promoted and fast, at each of ``configs`` (all of the
    compile family's by default) for sm_90 (Triton's compiled mode: call in a process without
    TRITON_INTERPRET) and read ptxas's report: ``{"triton", "ptxas", "configs": {config: {"promoted":
    ..., "fast": ...}}}``."""
    import tempfile
    from pathlib import Path

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    from . import compile_check
    from .families.scaled_gemm import cases

    target = GPUTarget("cuda", 90, 32)
    ptxas = get_ptxas(90).path
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    out = {
        "triton": triton.__version__,
        "ptxas": re.search(r"cuda_(\d+\.\d+)", version).group(1) if "cuda_" in version else version.strip(),
        "configs": {},
    }
    for case in cases():
        if not case.label.endswith("4096^3") or not ("row/col" in case.label or "-> bf16" in case.label):
            continue
        kind = "block" if "block" in case.label else "promoted" if "promoted" in case.label else "fast"
        config = case.config.split(" (")[0]
        if configs is not None and config not in configs:
            continue
        fn = compile_check.kernel_of(case.kernel)
        options, signature, constexprs, attrs = compile_check.launch_spec(fn, case, target)
        k = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
        ptx = k.asm["ptx"]
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "k.ptx"
            src.write_text(ptx)
            r = subprocess.run(
                [ptxas, "-v", "--regAllocOptLevel=2", "--gpu-name=sm_90a", str(src), "-o", str(src) + ".o"],
                capture_output=True,
                text=True,
            )
        log = r.stderr + r.stdout
        body = _loop_body(ptx)
        # the loop: do fp32 adds read the wgmma results before the loop's wait_group?
        wait = body.find("wgmma.wait_group")
        add = body.find("add.f32")
        out["configs"].setdefault(config, {})[kind] = {
            "registers": compile_check.parse_ptxas(log)["registers"],
            "wgmma": body.count("wgmma.mma_async"),
            "adds_before_wait": 0 <= add < wait,
            # the loop's own waits: wgmma.wait_group N lets N groups of wgmma stay in flight
            "wait_groups": [int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", body)],
            "note": " ".join(_WAIT_NOTE.findall(log)),
            # fp32 arithmetic per thread per K step, by opcode (add, mul, fma)
            "fp32_ops": _fp32_ops(body),
        }
    return out


def _loop_body(ptx: str) -> str:
    """The PTX of the K loop: the basic block that holds the wgmma instructions."""
    blocks = re.split(r"\n\$L__BB\d+_\d+:", ptx)
    return max(blocks, key=lambda b: b.count("wgmma.mma_async"))


def _fp32_ops(body: str) -> dict[str, int]:
    """The fp32 ``add``, ``mul`` and ``fma`` instructions of a PTX block (one per thread each)."""
    return {op: len(re.findall(rf"\b{op}(?:\.r[nzmp])?(?:\.ftz)?\.f32\b", body)) for op in ("add", "mul", "fma")}


def _run_compile(configs: list[str] | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = f"import json; from nbhelpers.gemm_report import _compile_promotion as f; print(json.dumps(f({configs!r})))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"compiling for sm_90 failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def promotion_wait(config: str = "128x128x128 w8 s3") -> dict:
    """The row-scaled fp8 kernel compiled here for sm_90 at ``config``, promoted and fast (in a
    child process, so that it works beside the interpreter): for each, ptxas's ``registers``, the
    ``wgmma`` instructions of one ``K`` step, whether the loop's fp32 adds read the wgmma results
    before the loop waits for them (``adds_before_wait``), the loop's own ``wait_groups`` (the N of
    each ``wgmma.wait_group N``) and ptxas's note (C7517) where it had to insert that wait itself;
    with the ``triton`` and ``ptxas`` versions. Needs no GPU."""
    out = _run_compile([config])
    return {"triton": out["triton"], "ptxas": out["ptxas"], **out["configs"].get(config, {})}


def promotion_waits() -> dict:
    """:func:`promotion_wait` at every config of the compile family (one child process):
    ``{"triton", "ptxas", "configs": {config: {"promoted": ..., "fast": ..., "block": ...}}}``
    (``block``: the block-scaled kernel, bf16 out); an entry is missing at a config its kernel
    does not tune over."""
    return _run_compile(None)


def promotion_configs(compile_table: dict, shape: str = "4096^3") -> list[dict]:
    """Every config of the run's compile table (sm_90) for the fp8 kernels, row-scaled promoted
    beside fast and block-scaled: ``config``, and per kind ``registers`` and ``programs`` per SM
    on an H100 (None where that kind has no row at the config, as the promoted kernel at 128x256,
    which it does not tune over), in the table's order."""
    kinds = ("fp8_rowwise", "fp8_rowwise_fast_accum", "block_scaled")
    rows: dict[str, dict] = {}
    for kind in kinds:
        kernel, label, _, _ = GEMM_KIND_KERNELS[kind]
        for r in compile_table["rows"]:
            if (r["kernel"], r["label"], r["target"], r.get("status")) != (
                kernel,
                label.format(shape),
                "sm_90",
                "ok",
            ):
                continue
            config = r["config"].split(" (")[0]
            row = rows.setdefault(config, {"config": config, **dict.fromkeys(kinds)})
            row[kind] = {
                "registers": r["registers"],
                "shared": r["shared"],
                "programs": occupancy(r["registers"], r["num_warps"], r["shared"], H100).blocks,
            }
    return list(rows.values())


def predicted_configs(gemm_run: dict, kind: str) -> dict[str, list[tuple[int, int, int]]]:
    """The configs the run's rows of ``kind`` record, by source: ``{"predicted": {config:
    [shapes]}, "tuned": {config: [shapes]}}``; a run older than ``tuned_config`` has no tuned
    entries."""
    out: dict[str, dict] = {"predicted": {}, "tuned": {}}
    for r in gemm_run["rows"]:
        if r["kind"] != kind:
            continue
        for key in ("predicted", "tuned"):
            if r.get(f"{key}_config"):
                out[key].setdefault(r[f"{key}_config"], []).append(_shape(r))
    return out


def promotion_text(compile_table: dict, waits: dict, gemm_run: dict) -> str:
    """The fp8 kernels (row-scaled promoted and fast, block-scaled) config by config: registers and
    programs per SM from the run's compile table (its Triton), then the same configs compiled here
    (:func:`promotion_waits`): registers, whether the promoted loop's adds read the wgmma results
    before its wait, ptxas's injected wait (C7517), the loop's own ``wgmma.wait_group`` N and its
    fp32 operations per thread per ``K`` step, each as promoted/fast/block-scaled; then the configs
    the run records for each kernel (the model's prediction, and the autotuner's choice
    where the run records it)."""
    here = waits["configs"]

    def each(hs, f):
        return "/".join("-" if h is None else f(h) for h in hs)

    rows = []
    for r in promotion_configs(compile_table):
        hs = [here.get(r["config"], {}).get(k) for k in ("promoted", "fast", "block")]
        rows.append(
            (
                r["config"],
                *(
                    "-" if r[k] is None else f"{r[k]['registers']} / {r[k]['programs']}"
                    for k in ("fp8_rowwise", "fp8_rowwise_fast_accum", "block_scaled")
                ),
                each(hs, lambda h: str(h["registers"])),
                "-" if hs[0] is None else ("yes" if hs[0]["adds_before_wait"] else "no"),
                each(hs, lambda h: "yes" if "C7517" in h["note"] else "no"),
                each(hs, lambda h: ",".join(str(n) for n in h["wait_groups"])),
                each(hs, lambda h: str(sum(h.get("fp32_ops", {}).values()))),
            )
        )
    lines = [
        "the run's compile table: registers / programs per SM; compiled here "
        f"(Triton {waits['triton']}, ptxas {waits['ptxas']}), each promoted/fast/block-scaled",
        text_table(
            rows,
            [
                "config",
                "promoted",
                "fast",
                "block-scaled",
                "here: registers",
                "adds before wait",
                "C7517",
                "wait_group",
                "fp32 ops / step",
            ],
        ),
    ]
    for kind in ("fp8_rowwise", "fp8_rowwise_fast_accum", "block_scaled"):
        chosen = predicted_configs(gemm_run, kind)
        lines.append(
            f"{KIND_NAMES[kind]}: the model predicts "
            + "; ".join(f"{c} ({len(s)} shape{'s' * (len(s) > 1)})" for c, s in chosen["predicted"].items())
            + "; tuned config recorded: "
            + (
                "; ".join(f"{c} ({len(s)} shape{'s' * (len(s) > 1)})" for c, s in chosen["tuned"].items())
                or "none (run predates it)"
            )
        )
    return "\n".join(lines)
