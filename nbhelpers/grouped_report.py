"""A recorded grouped-GEMM run (``benchmarks/gpu_grouped_gemm.py``) as chapter 10, section 5, prints
it: the run's table; the padded batch on the even load against a napkin of its copies; every timed
row of ours predicted again for the run's GPU (:func:`nbhelpers.calibration.grouped_gemm_rows`, from
the run's own compile table), on the datasheet and at the rates torch sustained in the same GPU's
runs (:func:`nbhelpers.calibration_report.fitted_runs`), at both ends of the assumed latency
(:data:`~nbhelpers.perf_model.LATENCY_RANGE_S`); the measured verdict, ours against each of the
others, and against ``grouped_mm`` by the mean rows per expert; the loop's host cost per expert,
read from the loop's own rows; and ours against cuBLAS, the measured loop over ours where the loop
is compute-bound GEMMs.

:func:`run_models` does the predicting once per run (a :class:`RunModel`); each ``*_text`` function
returns the text a cell prints from it, and computes nothing the notebook has to keep. It imports the
kernels (through :mod:`nbhelpers.calibration`): import it after
:func:`nbhelpers.device.setup_device`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from . import calibration
from .calibration import Calibration
from .calibration_report import fitted_runs
from .kernels.grouped_gemm import TILE_LOOKUP_LAUNCHES
from .perf_model import LATENCY_RANGE_S, model_gpu
from .results import gpu_slug, recorded_compile_check
from .tables import text_table

__all__ = [
    "RunModel",
    "cublas_rows",
    "cublas_text",
    "headline_text",
    "loop_over_ours_text",
    "loop_text",
    "models_text",
    "ours_host_text",
    "ours_miss_text",
    "padded_even_rows",
    "padded_over_loop",
    "padded_text",
    "rows_per_expert",
    "rows_per_expert_text",
    "run_models",
    "runs_text",
    "split_k_text",
    "verdict",
    "verdict_text",
]

#: the mean rows per group at or below which PyTorch's bf16 ``grouped_mm`` on an sm_90 GPU runs its
#: small CUTLASS tile (64 x 128, ping-pong) instead of 128 x 256 (cooperative), in
#: ``aten/src/ATen/native/cuda/GroupMM.cu`` as read at a main-branch commit (06c0cf0), not at a
#: release tag: a candidate for where ``grouped_mm`` changes kernel, not checked against a version
GROUPED_MM_SMALL_M = 128

#: what the chapter prints where no grouped-GEMM run is recorded
NOT_RECORDED = (
    "No GPU run is recorded yet (no benchmarks/results/grouped_gemm_*.json): the grouped kernel has not been\n"
    "timed on a GPU. On a machine with an NVIDIA GPU, from the repository root:\n"
    "    make gpu-report                          # every GPU benchmark and notebook (README, 'The GPU run')\n"
    "    python benchmarks/gpu_grouped_gemm.py    # or only this benchmark"
)


def _key(r: dict) -> tuple[str, int, int]:
    return r["size"], r["E"], r["T"]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:g}"


def _span(values) -> str:
    values = sorted(values)
    return f"{values[0]:.2f}-{values[-1]:.2f}"


def _x(v: float) -> str:
    """A speed ratio: two decimals, one from 10 up."""
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _range(values) -> str:
    """``"lo-hi"`` of :func:`_x`, one value when both print alike."""
    lo, hi = _x(min(values)), _x(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def _which(keys) -> str:
    """``(size, E, T)`` keys as ``"size E=.. T=a, b; ..."``, grouped by layer and ``E`` in order."""
    groups: dict[tuple[str, int], list[int]] = {}
    for size, E, T in keys:
        groups.setdefault((size, E), []).append(T)
    return "; ".join(f"{size} E={E} T=" + ", ".join(map(str, Ts)) for (size, E), Ts in groups.items())


def _floor_bytes(r: dict, active: int) -> int:
    """The least bytes one call over a timed row moves: every active expert's weights (``K x N``)
    and each routed row in (``K`` wide) and out (``N`` wide), each once, in bf16."""
    return (active * r["K"] * r["N"] + r["rows"] * (r["K"] + r["N"])) * 2


# ---------------------------------------------------------------- the run and the padded batch


def runs_text(runs: list[dict]) -> str:
    """Each run's GPU, date, versions, command, timer and layers (``size`` with its ``K`` and ``N``), then
    its table: per row the four implementations' times, ours' TFLOP/s and ours' speed over each of
    the others (a row that was not timed shows its error); :data:`NOT_RECORDED` when ``runs`` is
    empty."""
    if not runs:
        return NOT_RECORDED
    out = []
    for run in runs:
        m = run["meta"]
        sizes = {r["size"]: (r["K"], r["N"]) for r in run["rows"]}
        out += [
            f"recorded: {m['gpu']}, {m['date']}, torch {m['torch']}, Triton {m['triton']}",
            f"script: {m['script']}; command: {m['command']}",
            *([f"timer: {m['timer']}"] if "timer" in m else []),
            "layers: " + ", ".join(f"{s} K={k} N={n}" for s, (k, n) in sizes.items()),
        ]
        rows = []
        for r in run["rows"]:
            head = (r["size"], r["E"], r["T"], "uneven" if r["uneven"] else "even")
            if "error" in r:
                rows.append((*head, r["error"], *["-"] * 7))
                continue
            ms = r["ms"]
            rows.append(
                (*head, ms["loop"], ms["padded"], ms["grouped_mm"], ms["ours"], r["tflops"]["ours"])
                + (r["ours_vs_loop"], r["ours_vs_padded"], r["ours_vs_grouped_mm"])
            )
        heads = ["size", "E", "T", "load", "loop ms", "padded ms", "grouped_mm ms", "ours ms", "ours TFLOP/s"]
        out.append(text_table(rows, heads + ["loop / ours", "padded / ours", "grouped_mm / ours"], digits=3))
    return "\n".join(out)


def padded_even_rows(runs: list[dict]) -> list[dict]:
    """:func:`nbhelpers.calibration.padded_rows` of every run whose GPU the model has a datasheet
    for (its HBM rate prices the copies), the even-load rows only (``E = 8``, top-8: every expert
    gets every token, so the capacity factor drops nothing)."""
    out = []
    for run in runs:
        gpu = model_gpu(run["meta"]["gpu"])
        if gpu is not None:
            out += [r for r in calibration.padded_rows(run, gpu) if not r["uneven"]]
    return out


def padded_over_loop(rows: list[dict]) -> list[float]:
    """The padded batch's measured time over the loop's, row by row."""
    return [r["ms"]["padded"] / r["ms"]["loop"] for r in rows]


def padded_text(rows: list[dict]) -> str:
    """:func:`padded_even_rows` as a table (the padded batch's time and its time over the loop's,
    the rows its ``bmm`` computes over the routed ones, its copies and host-built indices, the
    copies at the HBM rate, the napkin and the napkin's share of the measured time), then the
    ranges over all rows and per layer; one line saying so when there is no row."""
    if not rows:
        return "no recorded run on a GPU the model has a datasheet for: no padded batch to compare"
    lines = [
        text_table(
            [
                (r["size"], r["E"], r["T"], r["ms"]["padded"], r["ms"]["padded"] / r["ms"]["loop"])
                + (r["rows_ratio"], r["copy_bytes"] / 1e9, r["index_bytes"] / 1e6)
                + (r["copies_ms"], r["napkin_ms"], r["share"])
                for r in rows
            ],
            ["size", "E", "T", "padded ms", "padded / loop", "bmm rows", "copies GB", "indices MB"]
            + ["copies ms", "napkin ms", "napkin / padded"],
            digits=3,
        )
    ]
    lost = padded_over_loop(rows)
    share = [r["share"] for r in rows]
    lines.append(
        f"even load: the padded batch took {min(lost):.2f}-{max(lost):.2f}x the loop's time; the napkin "
        f"accounts for {min(share):.2f}-{max(share):.2f} of it"
    )
    for size in dict.fromkeys(r["size"] for r in rows):
        gb = [r["copy_bytes"] / 1e9 for r in rows if r["size"] == size]
        sh = [r["share"] for r in rows if r["size"] == size]
        lines.append(
            f"  {size}: copies {min(gb):.3g}-{max(gb):.3g} GB a call, napkin / padded {min(sh):.2f}-{max(sh):.2f}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- the model of the run's GPU


@dataclass(frozen=True)
class RunModel:
    """One recorded grouped-GEMM run against the model of its GPU.

    ``calibration``: the model fitted to the same GPU's copy, GEMM and top-k runs, and ``gemm_run``
    the GEMM run it read (chapter 09's); ``compile_table``: the run's own compile check;
    ``sheet``: every timed row predicted on the datasheet (:func:`calibration.grouped_gemm_rows`,
    its latency); ``fitted``: latency in seconds -> the rows predicted at the fitted rates, one
    entry per latency of :data:`~nbhelpers.perf_model.LATENCY_RANGE_S`, short first;
    ``flagged``: (size, E, T) of each row where ours took longer than at the next larger ``T`` of
    the same layer and ``E`` (whatever its cause, not the kernel's speed); ``host_us``: the least
    measured loop time per active expert (the loop takes at least its host time, so this bounds
    the host's cost a call from above) and ``host_row`` the row it comes from; ``misses``:
    :func:`calibration.loop_and_ours_misses` of the two latencies at that host cost."""

    run: dict
    calibration: Calibration
    gemm_run: dict
    compile_table: dict
    sheet: list[dict]
    fitted: dict[float, list[dict]]
    flagged: frozenset[tuple[str, int, int]]
    host_us: float
    host_row: tuple[str, int, int]
    misses: list[dict]

    @property
    def gpu_name(self) -> str:
        return self.run["meta"]["gpu"]

    @property
    def short(self) -> list[dict]:
        """The fitted rows at the short latency."""
        return self.fitted[min(self.fitted)]

    @property
    def long(self) -> list[dict]:
        """The fitted rows at the long latency."""
        return self.fitted[max(self.fitted)]


def _flagged(rows: list[dict]) -> frozenset[tuple[str, int, int]]:
    out = set()
    for a in rows:
        later = [r for r in rows if (r["size"], r["E"]) == (a["size"], a["E"]) and r["T"] > a["T"]]
        if later and min(later, key=lambda r: r["T"])["ms"] < a["ms"]:
            out.add(_key(a))
    return frozenset(out)


def run_models(
    runs: list[dict], results_dir: str | Path | None = None, latencies: tuple[float, ...] = LATENCY_RANGE_S
) -> dict[str, RunModel]:
    """GPU name -> :class:`RunModel` of each run whose GPU has a datasheet, a fit (a recorded
    top-k, copy and GEMM run of the same GPU) and a compile table of its own
    (``compile_check_<gpu slug>.json``) in ``results_dir``; the other runs are left out
    (:func:`models_text` names them)."""
    fits = {found["gemm"]["meta"]["gpu"]: (c, found["gemm"]) for c, found in fitted_runs(results_dir)}
    out = {}
    for run in runs:
        name = run["meta"]["gpu"]
        table = recorded_compile_check(results_dir, name=f"compile_check_{gpu_slug(name)}.json")
        if model_gpu(name) is None or name not in fits or table is None:
            continue
        c, gemm_run = fits[name]
        fitted = {
            lat: calibration.grouped_gemm_rows(run, table["rows"], replace(c.gpu, latency_s=lat))
            for lat in sorted(latencies)
        }
        sheet = calibration.grouped_gemm_rows(run, table["rows"], model_gpu(name))
        short = fitted[min(fitted)]
        least = min(short, key=lambda r: r["loop_us_per_expert"])
        host_us = least["loop_us_per_expert"]
        out[name] = RunModel(
            run=run,
            calibration=c,
            gemm_run=gemm_run,
            compile_table=table,
            sheet=sheet,
            fitted=fitted,
            flagged=_flagged(sheet),
            host_us=host_us,
            host_row=_key(least),
            misses=calibration.loop_and_ours_misses(short, fitted[max(fitted)], host_us),
        )
    return out


def models_text(runs: list[dict], models: dict[str, RunModel]) -> str:
    """Per run: what the rates were fitted to, then every row of ours measured and predicted, on
    the datasheet and at the fitted rates (the long latency), with what bounds it and the flag;
    then ours' host (the GEMM's launch and the tile lookup's, at the model's cost a launch)
    against the model's GPU time, on the datasheet and fitted, and on how many rows ours' fitted
    model at the short latency gives the same time and bound. A run without a model says so."""
    lines = []
    for run in runs:
        name = run["meta"]["gpu"]
        m = models.get(name)
        if m is None:
            lines.append(f"{name}: no datasheet, fit or compile table: skipped")
            continue
        on = m.calibration.fitted_on
        lines.append(f"fitted: {on['hbm_fraction']}; {on['flops_fraction[bf16]']}")
        rows = []
        for a, b in zip(m.sheet, m.long):
            flag = "slower than at next T" if _key(a) in m.flagged else ""
            rows.append(
                (a["size"], a["E"], a["T"], a["ms"], a["predicted_ms"])
                + (a["ratio"], b["predicted_ms"], b["ratio"], b["bound"], flag)
            )
        lines.append(
            text_table(
                rows,
                ["size", "E", "T", "ours ms", "datasheet ms", "ratio", "fitted ms", "ratio", "bound", "flag"],
                digits=3,
            )
        )
        n = TILE_LOOKUP_LAUNCHES + 1
        for label, gpu, rs in (("datasheet", m.calibration.spec, m.sheet), ("fitted", m.calibration.gpu, m.long)):
            host = n * gpu.launch_s * 1e3
            longer = sum(r["predicted_ms"] > host * (1 + 1e-6) for r in rs)
            lines.append(
                f"ours' host, {label}: {n} launches x {gpu.launch_s * 1e6:.0f} us = {host * 1e3:.0f} us; "
                f"the GPU time longer on {longer} of {len(rs)} rows"
            )
        same = sum(
            math.isclose(a["predicted_ms"], b["predicted_ms"], rel_tol=1e-9) and a["bound"] == b["bound"]
            for a, b in zip(m.short, m.long)
        )
        lat = [_us(t) for t in sorted(m.fitted)]
        lines.append(
            f"ours fitted at {lat[0]} us: the same time and bound as at {lat[-1]} us on {same} of {len(m.long)} rows"
        )
    return "\n".join(lines)


def ours_miss_text(m: RunModel) -> str:
    """Torch's bf16 rates in chapter 09's GEMM run of the same GPU (the best, which the fit took,
    and at 8192^3), chapter 09's GEMM over torch's per shape; ours measured / fitted (the long
    latency) by what bounds ours, the flagged rows out; then the compute-bound row the model misses
    most beside the rows of the same layer and ``T`` (the same routed rows over other ``E``)."""
    ch09 = {
        (g["M"], g["N"], g["K"]): (g["tflops_theirs"], g["ratio"])
        for g in m.gemm_run["rows"]
        if g["kind"] == "bf16" and g.get("tflops_theirs")
    }
    lines = []
    if ch09:
        best = max(ch09, key=lambda s: ch09[s][0])
        cube = ch09.get((8192, 8192, 8192))
        lines.append(
            f"torch.matmul bf16, chapter 09's {len(ch09)} shapes: best {ch09[best][0]:.0f} TFLOP/s at "
            f"{'x'.join(map(str, best))} (the fitted rate)" + (f"; {cube[0]:.0f} at 8192^3" if cube else "")
        )
        lines.append(
            "chapter 09's GEMM over torch.matmul, same shape: "
            + ", ".join(f"{r:.2f}" for r in sorted(r for _, r in ch09.values()))
        )
    kept = [r for r in m.long if _key(r) not in m.flagged]
    for bound in ("HBM", "compute"):
        ratio = sorted(r["ratio"] for r in kept if r["bound"] == bound)
        if not ratio:
            lines.append(f"{bound}-bound: no row")
            continue
        line = f"{bound}-bound, {len(ratio)} rows: measured / fitted {ratio[0]:.2f}-{ratio[-1]:.2f}"
        if bound == "compute" and len(ratio) > 1:
            line += f"; without the highest {ratio[0]:.2f}-{ratio[-2]:.2f}"
        lines.append(line)
    compute = [r for r in kept if r["bound"] == "compute"]
    if compute:
        top = max(compute, key=lambda r: r["ratio"])
        fitted = {_key(r): r for r in m.long}
        for r in m.run["rows"]:
            f = fitted.get(_key(r))
            if f is None or (r["size"], r["T"]) != (top["size"], top["T"]):
                continue
            lines.append(
                f"  {r['size']} E={r['E']} T={r['T']}: {r['rows']} rows, ours {r['tflops']['ours']:.0f} TFLOP/s, "
                f"measured / fitted {f['ratio']:.2f} ({f['bound']}), {r['ours_vs_grouped_mm']:.3f} of "
                "grouped_mm's speed"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------- the measured verdict


def verdict(m: RunModel) -> dict:
    """The run's measured speed ratios, ours against each of the others (``X / ours``: above 1, ours
    is faster). ``grouped_mm``: what bounds ours at the fitted rates (the long latency) -> the
    ratios of those rows; ``loop``: ``(E, size)`` -> the ratios at that layer and ``E``, largest
    ``E`` first (both with the flagged rows out: whatever slowed ours there is not the kernel's
    speed); ``flagged``: ``(size, E, T)`` -> ``grouped_mm / ours`` on each flagged row;
    ``padded``: every row's ratio; ``targets``: each of the benchmark's goals -> (rows where
    ours meets it, rows where it is set), over every row."""
    bound = {_key(r): r["bound"] for r in m.long}
    timed = [r for r in m.run["rows"] if "error" not in r and _key(r) in bound]
    kept = [r for r in timed if _key(r) not in m.flagged]
    grouped_mm: dict[str, list[float]] = {}
    for r in kept:
        grouped_mm.setdefault(bound[_key(r)], []).append(r["ours_vs_grouped_mm"])
    loop: dict[tuple[int, str], list[float]] = {}
    for r in sorted(kept, key=lambda r: -r["E"]):
        loop.setdefault((r["E"], r["size"]), []).append(r["ours_vs_loop"])
    targets = {}
    for goal in ("ours_vs_loop", "ours_vs_padded", "ours_vs_grouped_mm"):
        set_on = [r for r in timed if r["goals"].get(goal) is not None]
        targets[goal] = (sum(r[goal] >= r["goals"][goal] for r in set_on), len(set_on))
    return {
        "grouped_mm": {b: grouped_mm[b] for b in ("HBM", "compute") if b in grouped_mm},
        "loop": loop,
        "flagged": {_key(r): r["ours_vs_grouped_mm"] for r in timed if _key(r) in m.flagged},
        "padded": [r["ours_vs_padded"] for r in timed],
        "targets": targets,
    }


def verdict_text(m: RunModel) -> str:
    """:func:`verdict` as the lines a cell prints: ours against ``grouped_mm`` per bound of ours
    (with the rows where ours is faster) and on the flagged rows, against the loop per ``E`` and
    layer, against the padded batch, and the benchmark's three targets."""
    v = verdict(m)
    lines = ["grouped_mm / ours, by what bounds ours at the fitted rates (the flagged row apart):"]
    for b, xs in v["grouped_mm"].items():
        lines.append(f"  ours {b}-bound, {len(xs)} rows: {_range(xs)}, ours faster on {sum(x > 1 for x in xs)}")
    for (size, E, T), x in v["flagged"].items():
        lines.append(f"  flagged, {size} E={E} T={T}: {_x(x)}")
    by_E: dict[int, list[str]] = {}
    for (E, size), xs in v["loop"].items():
        by_E.setdefault(E, []).append(f"{size} {_range(xs)}")
    lines.append("loop / ours (the flagged row apart):")
    lines += [f"  E={E}: " + ", ".join(t) for E, t in by_E.items()]
    p = v["padded"]
    lines.append(f"padded / ours: {_range(p)}, ours faster on {sum(x > 1 for x in p)} of {len(p)} rows")
    (loop_met, loop_set), (pad_met, pad_set), (gm_met, gm_set) = v["targets"].values()
    lines.append(
        f"targets met: loop / ours >= 2 at E=256 on {loop_met} of {loop_set} rows; padded / ours > 1 "
        f"on {pad_met} of {pad_set} uneven rows; grouped_mm / ours >= 0.8 on {gm_met} of {gm_set} rows"
    )
    return "\n".join(lines)


def rows_per_expert(m: RunModel, split: int = GROUPED_MM_SMALL_M) -> dict:
    """The measured ``grouped_mm / ours`` by the mean rows per expert, ``T k / E`` (the routed rows
    over the experts; the flagged rows out, as in :func:`verdict`). ``by_mean``: each mean, smallest
    first -> its rows; ``at_most`` and ``above``: the rows with a mean at most ``split`` and above
    it (by default :data:`GROUPED_MM_SMALL_M`). Per row: size, E, T, ``mean``, ``ratio``
    (``grouped_mm / ours``), ``bound`` (what bounds ours at the fitted rates, the long latency),
    ``ours_bytes_per_s`` and ``grouped_mm_bytes_per_s`` (:func:`_floor_bytes` over each one's
    measured time)."""
    bound = {_key(r): r for r in m.long}
    rows = []
    for r in m.run["rows"]:
        if "error" in r or _key(r) not in bound or _key(r) in m.flagged:
            continue
        n_bytes = _floor_bytes(r, bound[_key(r)]["active"])
        rows.append(
            {
                "size": r["size"],
                "E": r["E"],
                "T": r["T"],
                "mean": r["rows"] / r["E"],
                "ratio": r["ours_vs_grouped_mm"],
                "bound": bound[_key(r)]["bound"],
                "ours_bytes_per_s": n_bytes / (r["ms"]["ours"] * 1e-3),
                "grouped_mm_bytes_per_s": n_bytes / (r["ms"]["grouped_mm"] * 1e-3),
            }
        )
    by_mean: dict[float, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["mean"]):
        by_mean.setdefault(r["mean"], []).append(r)
    return {
        "by_mean": by_mean,
        "at_most": [r for r in rows if r["mean"] <= split],
        "above": [r for r in rows if r["mean"] > split],
        "split": split,
    }


def rows_per_expert_text(m: RunModel, split: int = GROUPED_MM_SMALL_M) -> str:
    """:func:`rows_per_expert` as a table (per mean: the rows, ``grouped_mm / ours``, on how many
    ours is faster, what bounds ours), then the two sides of ``split`` (the rows where ours is
    faster named on the side where it mostly is not), and on the rows at most ``split`` the rates
    at which ours and ``grouped_mm`` move :func:`_floor_bytes`, beside torch's copy (the fitted
    HBM rate)."""
    v = rows_per_expert(m, split)
    table = text_table(
        [
            (f"{mean:g}", len(rs), _range([r["ratio"] for r in rs]), sum(r["ratio"] > 1 for r in rs))
            + ("/".join(dict.fromkeys(r["bound"] for r in rs)),)
            for mean, rs in v["by_mean"].items()
        ],
        ["rows / expert", "rows", "grouped_mm / ours", "ours faster on", "ours bound"],
    )
    lines = ["grouped_mm / ours by the mean rows per expert, T k / E (the flagged row apart):", table]
    for label, rs in ((f"at most {split}", v["at_most"]), (f"above {split}", v["above"])):
        if not rs:
            lines.append(f"{label}: no row")
            continue
        faster = [_key(r) for r in rs if r["ratio"] > 1]
        hbm = sum(r["bound"] == "HBM" for r in rs)
        line = (
            f"{label} ({min(r['mean'] for r in rs):g}-{max(r['mean'] for r in rs):g}), {len(rs)} rows: "
            f"{_range([r['ratio'] for r in rs])}, ours faster on {len(faster)}"
        )
        if faster and len(faster) <= len(rs) // 2:
            line += f" ({_which(faster)})"
        lines.append(line + f"; ours HBM-bound on {hbm}")
    if v["at_most"]:
        ours = [r["ours_bytes_per_s"] / 1e12 for r in v["at_most"]]
        theirs = [r["grouped_mm_bytes_per_s"] / 1e12 for r in v["at_most"]]
        lines.append(
            f"at most {split}: the least bytes a call moves (active experts' weights, rows in and out) over "
            f"the measured time: ours {min(ours):.2f}-{max(ours):.2f} TB/s, grouped_mm "
            f"{min(theirs):.2f}-{max(theirs):.2f} TB/s; torch's copy "
            f"{m.calibration.gpu.hbm_bytes_per_s / 1e12:.2f} TB/s (the fitted HBM rate)"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- the loop against ours


def loop_text(m: RunModel) -> str:
    """The least loop time per active expert, its row and its multiple of the model's cost a launch;
    then per row: the active experts, the loop's measured time and time per expert, the host's part
    (``active`` x that least), the model's GPU time for the loop at the fitted rates and the short
    latency (each expert its own launch, summed) and which of the two sets the model's loop; then,
    per latency, the rows where the model's GPU time for the loop alone is longer than the
    measured loop (a latency at which the model cannot be the loop's)."""
    lat = [_us(t) for t in sorted(m.fitted)]
    rows = [
        (a["size"], a["E"], a["T"], a["active"], a["loop_ms"], a["loop_us_per_expert"], v["host_ms"])
        + (a["loop_gpu_ms"], v["loop_bound"][0])
        for a, v in zip(m.short, m.misses)
    ]
    size, E, T = m.host_row
    launch_us = m.calibration.gpu.launch_s * 1e6
    heads = ["size", "E", "T", "active", "loop ms", "us / expert", "host ms", "loop GPU ms, model", "loop set by"]
    over = []
    for t, rs in sorted(m.fitted.items()):
        keys = [_key(r) for r in rs if r["loop_gpu_ms"] > r["loop_ms"]]
        over.append(f"{len(keys)} of {len(rs)} rows at {_us(t)} us" + (f" ({_which(keys)})" if keys else ""))
    return "\n".join(
        [
            f"{m.gpu_name}: least loop time per active expert {m.host_us:.1f} us ({size}, E={E}, T={T}), "
            f"{m.host_us / launch_us:.1f} times the model's {launch_us:g} us a launch; "
            f"the model at latency {lat[0]} us",
            text_table(rows, heads, digits=3),
            "the model's loop GPU time alone longer than the measured loop: " + "; ".join(over),
        ]
    )


def split_k_text(m: RunModel, size: str = "deepseek", E: int = 256) -> str:
    """A split-``K`` loop at its floor on one layer's ``E`` at the fewest tokens the run timed: the
    host's time (the active experts at :attr:`RunModel.host_us`) against every active expert's
    weights and its rows in and out read once at the fitted HBM rate; ours' measured time and the
    rate at which it moved the same bytes; the split-``K`` loop over ours, set by the longer of the
    two, and by the bytes alone at the fitted and the datasheet's HBM rate. Empty when the run has
    no such row."""
    timed = [r for r in m.run["rows"] if (r["size"], r["E"]) == (size, E) and "error" not in r]
    if not timed:
        return ""
    r = min(timed, key=lambda r: r["T"])
    (v,) = [v for v in m.misses if _key(v) == (size, E, r["T"])]
    n_bytes = _floor_bytes(r, v["active"])
    fitted_hbm, sheet_hbm = m.calibration.gpu.hbm_bytes_per_s, m.calibration.spec.hbm_bytes_per_s
    ours_s = r["ms"]["ours"] * 1e-3
    floor_ms = n_bytes / fitted_hbm * 1e3
    split = max(v["host_ms"], floor_ms) / r["ms"]["ours"]
    return (
        f"split-K loop, {size} E={E} T={r['T']}: host {v['host_ms']:.2f} ms ({v['active']} experts at "
        f"{m.host_us:.1f} us), floor {n_bytes / 1e9:.2f} GB at {fitted_hbm / 1e12:.2f} TB/s = {floor_ms:.2f} ms; "
        f"ours measured {r['ms']['ours']:.2f} ms, the same bytes at {n_bytes / ours_s / 1e12:.2f} TB/s: split-K "
        f"loop / ours about {split:.2f} at {m.host_us:.1f} us a call; by the bytes alone "
        f"{floor_ms / r['ms']['ours']:.2f} at the fitted rate, {n_bytes / sheet_hbm / ours_s:.2f} at the "
        "datasheet's"
    )


def loop_over_ours_text(m: RunModel, size: str = "deepseek", E: int = 256, max_T: int = 4096) -> str:
    """Section 1's ratio, the loop's time over one grouped call, on the run's GPU for one layer's
    ``E`` up to ``max_T`` tokens: measured, and the model's loop (the longer of its host and GPU
    time) over the model's ours, at the short latency (see :func:`loop_text`)."""
    lines = []
    for a, v in zip(m.short, m.misses):
        if (a["size"], a["E"]) != (size, E) or a["T"] > max_T:
            continue
        model = max(v["host_ms"], a["loop_gpu_ms"]) / a["predicted_ms"]
        lines.append(
            f"{size} E={E} T={a['T']}: loop / ours measured {a['loop_ms'] / a['ms']:.2f}, model {model:.2f} "
            f"at {_us(min(m.fitted))} us"
        )
    return "\n".join(lines)


def ours_host_text(m: RunModel) -> str:
    """Ours' host at the loop's measured cost a call (:attr:`RunModel.host_us`) instead of the
    model's: the GEMM's launch and the tile lookup's, and the rows whose model GPU time (short
    latency) is shorter than that."""
    n = TILE_LOOKUP_LAUNCHES + 1
    slow = [
        f"{a['size']} E={a['E']} T={a['T']} ({a['ms']:.3f} ms measured)"
        for a in m.short
        if a["predicted_ms"] < n * m.host_us * 1e-3
    ]
    return (
        f"ours' host at {m.host_us:.1f} us a launch: {n} launches = {n * m.host_us:.0f} us, above the model's GPU "
        f"time on {len(slow)} of {len(m.short)} rows: " + (", ".join(slow) or "none")
    )


def cublas_rows(m: RunModel) -> list[dict]:
    """The rows where the measured loop / ours is ours against cuBLAS: ours compute-bound (the
    flagged rows out) and, at both ends of the latency range, the model's loop set by its GPU time
    rather than the host's, with every one of its GEMMs compute-bound. Per row: size, E, T,
    ``loop_over_ours`` (measured) and ``model`` (the model's loop over its ours, a pair at the
    short / long latency: near 1, the two do the same work at the same rates)."""
    out = []
    for a, b, v in zip(m.short, m.long, m.misses):
        if v["bound"] != "compute" or _key(v) in m.flagged:
            continue
        if v["loop_bound"] != ("GPU", "GPU") or min(v["loop_compute_share"]) < 1 - 1e-9:
            continue
        out.append(
            {
                "size": a["size"],
                "E": a["E"],
                "T": a["T"],
                "loop_over_ours": a["loop_ms"] / a["ms"],
                "model": tuple(max(v["host_ms"], x["loop_gpu_ms"]) / x["predicted_ms"] for x in (a, b)),
            }
        )
    return out


def cublas_text(m: RunModel) -> str:
    """:func:`cublas_rows` summed up: which rows, the model's loop over its ours there at each
    latency, and the measured loop / ours, ours against cuBLAS."""
    rows = cublas_rows(m)
    if not rows:
        return "no row where the loop is compute-bound cuBLAS GEMMs at both latencies"
    lat = [_us(t) for t in sorted(m.fitted)]
    which = _which(_key(r) for r in rows)
    model = ", ".join(f"{_range([r['model'][i] for r in rows])} at {lat[i]} us" for i in (0, 1))
    return "\n".join(
        [
            f"the loop's GEMMs all compute-bound and setting its time, ours compute-bound, at {lat[0]} and "
            f"{lat[-1]} us: {len(rows)} rows, {which}",
            f"  the model's loop / its ours there: {model}",
            f"  measured loop / ours there, ours against cuBLAS: {_range([r['loop_over_ours'] for r in rows])}",
        ]
    )


def headline_text(m: RunModel) -> str:
    """:func:`verdict` and :func:`cublas_rows` in two lines, for a chapter's summary of results:
    ours against ``grouped_mm`` per bound of ours, against the loop at the largest ``E``, against
    the padded batch, and against cuBLAS."""
    v = verdict(m)
    top = max(E for E, _ in v["loop"])
    gm = ", ".join(f"{_range(xs)} where ours is {b}-bound ({len(xs)} rows)" for b, xs in v["grouped_mm"].items())
    loop = ", ".join(f"{size} {_range(xs)}" for (E, size), xs in v["loop"].items() if E == top)
    cublas = [r["loop_over_ours"] for r in cublas_rows(m)]
    second = f"{m.gpu_name}: loop / ours at E={top}: {loop}; padded / ours {_range(v['padded'])}"
    if cublas:
        second += f"; ours against cuBLAS (loop / ours, {len(cublas)} rows) {_range(cublas)}"
    return f"{m.gpu_name}: grouped_mm / ours {gm}\n{second}"
