"""Which GPU runs which chapter: the chapters' GPU launches compiled for four GPUs, without a GPU.

Every chapter runs on a CPU (Triton's interpreter). On a GPU, chapters 03 and 08-11 launch the
course's Triton kernels compiled, and this module says, per launch, what the compiler does for
compute capability 7.5 (a T4), 8.0 (an A100), 8.9 (an L4, an RTX 40) and 9.0 (an H100, an H200):

* :func:`launches` lists the launches a chapter makes on a GPU (its notebook's GPU cells and its
  ``benchmarks/gpu_*.py`` script), as each kernel family's manifest (:mod:`nbhelpers.families`)
  declares them, each with the config its launcher picks: the fixed block a
  chapter passes, or for a launch tuned on the GPU (``block=None``) the tuned list's configs with
  the largest and the smallest operand buffers ((BLOCK_M + BLOCK_N) x BLOCK_K x stages), not
  every config of the list;
* :func:`run` compiles each launch for each target of :data:`TARGETS` with
  :func:`nbhelpers.compile_check.check` (Triton's ``triton.compile`` and the ``ptxas`` in its
  wheel) and records, per (launch, target): whether it compiles, Triton's error where it does
  not, registers, spills, shared memory against the target's per-block limit, the matrix
  instruction, and whether the launcher itself refuses that GPU before compiling
  (:func:`nbhelpers.kernels.fp8_unsupported_reason`);
* :func:`chapter_summary` and :func:`render` turn the results file into the tables of
  ``docs/gpu.md`` ("Running the course on a GPU"), between its ``<!-- begin generated -->`` and
  ``<!-- end generated -->`` lines.

Run it with ``make gpu-targets`` or ``python -m nbhelpers.tooling.gpu_targets`` (compile, write
``benchmarks/results/compile_targets.json``, rewrite the page's tables); ``--page`` only rewrites
the tables from the results file. Needs Triton with its NVIDIA backend (the Linux wheels); no GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from ..compile_check import SHARED_LIMIT, capability_of, check
from ..families import Case, Launch, families, operand_buffers
from .compile_cases import compile_meta

__all__ = [
    "TARGETS",
    "GPUS",
    "CHAPTERS",
    "RESULTS",
    "PAGE",
    "Launch",
    "launches",
    "matrix_row",
    "run",
    "chapter_summary",
    "render",
    "update_page",
    "main",
]

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "compile_targets.json"
PAGE = ROOT / "docs" / "gpu.md"

#: the targets compiled for, oldest first
TARGETS = ("sm_75", "sm_80", "sm_89", "sm_90")
#: examples of each target's GPUs (NVIDIA's list of CUDA GPUs and their compute capabilities)
GPUS = {"sm_75": "T4", "sm_80": "A100", "sm_89": "L4, RTX 40", "sm_90": "H100, H200"}

#: what a chapter without a GPU path says about it, where it says more than that it has none
CPU_NOTES = {"06": "none: everything runs on the CPU, its `torch._scaled_mm` call too (CPU tensors)"}


def chapters(root: Path = ROOT) -> dict[str, str]:
    """Each chapter's GPU path in words, chapter by chapter (the notebooks in ``notebooks/``): the
    path a kernel family's manifest gives it, else none (everything on the CPU)."""
    paths = {c: p for f in families() for c, p in f.chapters.items()}
    numbers = sorted({p.name[:2] for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb")} | set(paths))
    return {c: paths.get(c) or CPU_NOTES.get(c, "none: everything runs on the CPU") for c in numbers}


#: each chapter's GPU path in words (nothing: the chapter computes on the CPU)
CHAPTERS = chapters()


def dot_kernels() -> tuple[str, ...]:
    """The kernels whose code has a ``tl.dot`` (the others have no matrix instruction to choose)."""
    return tuple(k for f in families() for k in f.dot_kernels)


BEGIN = "<!-- begin generated"
END = "<!-- end generated -->"


def _buffers(c: Case) -> int:
    """(BLOCK_M + BLOCK_N) x BLOCK_K x num_stages: what a config's pipelined operand tiles grow with."""
    return operand_buffers(c)


def launches() -> list[Launch]:
    """The chapters' GPU launches (see the module docstring), each as an sm_90 case: every kernel
    family's (its manifest's ``launches``), family after family."""
    return [launch for f in families() for launch in f.launches()]


# ====================================================================== one row per (launch, target)


def _launcher_error(launch: Launch, target: str) -> str | None:
    """The sentence the launcher raises on a GPU of ``target`` before it compiles, or None."""
    if launch.fp8 is None:
        return None
    from ..kernels import fp8_unsupported_reason

    return fp8_unsupported_reason(launch.fp8, divmod(capability_of(target), 10))


def matrix_row(launch: Launch, compiled: dict) -> dict:
    """A results row: the compile check's row of ``launch`` for one target, with what the launch
    is and the verdict: "runs" (compiles, fits in the target's shared memory, the launcher takes
    it; a spill does not stop it), "launcher refuses", "Triton refuses" (does not compile: the
    row keeps the error) or "over shared memory"."""
    target = compiled["target"]
    refusal = _launcher_error(launch, target)
    ok = compiled["status"] == "ok"
    fits = ok and compiled["shared"] <= compiled["shared_limit"]
    if refusal:
        verdict = "launcher refuses"
    elif not ok:
        verdict = "Triton refuses"
    elif not fits:
        verdict = "over shared memory"
    else:
        verdict = "runs"
    return {
        "launch": launch.launch,
        "dtype": launch.dtype,
        "chapters": list(launch.chapters),
        "made_by": launch.made_by,
        "tuned": launch.tuned,
        "dot": launch.case.kernel.rpartition(":")[2] in dot_kernels(),
        "capability": "{}.{}".format(*divmod(capability_of(target), 10)),
        **compiled,
        "shared_limit": SHARED_LIMIT[capability_of(target)],
        "compiles": ok,
        "fits": fits if ok else None,
        "launcher_error": refusal,
        "verdict": verdict,
    }


def run(jobs: int = 1, on_row=None) -> list[dict]:
    """Compile every launch for every target; the results rows, launch by launch, oldest target first."""
    todo = [(launch, dataclasses.replace(launch.case, target=t)) for launch in launches() for t in TARGETS]
    compiled = check([c for _, c in todo], jobs, on_row)
    return [matrix_row(launch, row) for (launch, _), row in zip(todo, compiled)]


# ====================================================================== the page


def _short_mma(row: dict) -> str:
    """The matrix instruction in a few words: "wgmma bf16", "mma.sync tf32", "FMA"; "no dot" for a
    kernel without one."""
    if not row.get("dot", True):
        return "no dot"
    mma = row.get("mma") or "none"
    if mma == "none":
        return "FMA"
    kind, _shape, types = mma.split(" ", 2)
    operand = types.split(".")[1] if "." in types else types
    return f"{kind} {operand}"


def _size(n: int) -> str:
    """Bytes in a few characters: "512 B", "16 KiB", "120 KiB"."""
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.0f} KiB" if n % 1024 == 0 else f"{n / 1024:.1f} KiB"


def cell(row: dict) -> str:
    """One row as a table cell: what a GPU of that target does with the launch."""
    v = row["verdict"]
    if v in ("launcher refuses", "Triton refuses"):
        return v
    if v == "over shared memory":
        return f"over shared memory ({_size(row['shared'])} > {_size(row['shared_limit'])})"
    text = f"{_short_mma(row)}, {_size(row['shared'])}"
    if row.get("spill_stores"):
        text += f", spills {row['spill_stores']:,} B"
    return text


def _groups(rows: list[dict]) -> dict[tuple, dict[str, list[dict]]]:
    """(launch, dtype) -> target -> its rows (two for a tuned launch), in the rows' order."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["launch"], r["dtype"]), {}).setdefault(r["target"], []).append(r)
    return out


def _runs(rows: list[dict]) -> bool:
    """A launch runs on a target when one of its configs does (a tuner skips the ones that do not)."""
    return any(r["verdict"] == "runs" for r in rows)


def _lost_tensor_cores(group: dict[str, list[dict]], target: str) -> bool:
    """True when the launch runs on ``target`` only as FMA loops although its sm_90 code has a
    matrix instruction."""
    top = [r for r in group.get("sm_90", []) if r["status"] == "ok" and r["mma"] != "none"]
    here = [r for r in group.get(target, []) if r["verdict"] == "runs"]
    return bool(top and here) and all(r["mma"] == "none" for r in here)


def chapter_summary(data: dict) -> list[dict]:
    """Per chapter 01-11: its GPU path, on which targets all its launches run, the lowest of them
    (None: no GPU path), per target the launches that stop it (with why: their verdict) and the
    operand types whose dots run there without tensor cores."""
    groups = _groups([r for r in data["rows"] if r["chapters"]])
    out = []
    for chapter, path in data["chapters"].items():
        mine = {k: g for k, g in groups.items() if chapter in next(iter(g.values()))[0]["chapters"]}
        runs = {t: all(_runs(g.get(t, [])) for g in mine.values()) for t in TARGETS}
        lowest = None
        for i, t in enumerate(TARGETS):
            if mine and all(runs[u] for u in TARGETS[i:]):
                lowest = t
                break
        stops, no_tensor_cores = {}, {}
        for t in TARGETS:
            stops[t] = {}
            for (launch, dtype), g in mine.items():
                if not _runs(g.get(t, [])):
                    why = g[t][0]["verdict"] if g.get(t) else "not compiled"
                    stops[t].setdefault((dtype, why), []).append(launch)
            no_tensor_cores[t] = sorted({dtype for (_, dtype), g in mine.items() if _lost_tensor_cores(g, t)})
        out.append(
            {
                "chapter": chapter,
                "path": path,
                "launches": len(mine),
                "runs": runs,
                "lowest": lowest,
                "stops": stops,
                "no_tensor_cores": no_tensor_cores,
            }
        )
    return out


def _table(head: list[str], rows: list[list[str]]) -> str:
    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(head), "|" + "|".join("---" for _ in head) + "|", *map(line, rows)])


def _target_head() -> list[str]:
    return [f"{t} ({GPUS[t]})" for t in TARGETS]


def render_chapters(data: dict) -> str:
    """The per-chapter table: the GPU path, what each target does with it, the lowest target."""
    rows = []
    for s in chapter_summary(data):
        if not s["launches"]:
            rows.append([s["chapter"], s["path"], *(["CPU only"] * len(TARGETS)), "no GPU needed"])
            continue
        cells = []
        for t in TARGETS:
            if s["runs"][t]:
                text = "runs"
                if s["no_tensor_cores"][t]:
                    text += f" ({', '.join(s['no_tensor_cores'][t])} dots without tensor cores)"
            else:
                text = "stops: " + "; ".join(
                    f"{len(launches)} {dtype} launch{'es' * (len(launches) > 1)}, {why}"
                    for (dtype, why), launches in sorted(s["stops"][t].items())
                )
            cells.append(text)
        lowest = s["lowest"]
        rows.append([s["chapter"], s["path"], *cells, f"{lowest} ({GPUS[lowest]})" if lowest else "none of these"])
    return _table(["chapter", "GPU path", *_target_head(), "lowest"], rows)


def render_matrix(data: dict) -> str:
    """Every launch on every target: the matrix instruction and shared memory, or why not. The
    launch, its operands and its kernel share one column, so that the four targets' columns sit
    side by side in the width of a page."""
    rows = []
    for (launch, dtype), by_target in _groups(data["rows"]).items():
        first = next(iter(by_target.values()))
        for i in range(len(first)):
            r0 = first[i]
            chapters = ", ".join(r0["chapters"]) or "(no chapter)"
            what = f"`{launch}`" + (f", {r0['tuned']}" if r0["tuned"] else "")
            what += f" on {dtype}: `{r0['kernel']} {r0['config'].strip()}`"
            cells = [cell(by_target[t][i]) if t in by_target else "not compiled" for t in TARGETS]
            rows.append([chapters, what, *cells])
    return _table(["chapters", "launch, operands: kernel and config", *_target_head()], rows)


def render_refusals(data: dict) -> str:
    """Each distinct refusal once: who refuses (the launcher, before compiling; Triton's compiler),
    on which targets, for which launches, with the message."""
    seen: dict[tuple, set] = {}
    for r in data["rows"]:
        what = (r["target"], f"`{r['launch']}` on {r['dtype']}")
        if r["launcher_error"]:
            seen.setdefault(("the launcher", r["launcher_error"]), set()).add(what)
        if not r["compiles"]:
            seen.setdefault((f"Triton {data['meta']['triton']}", r.get("error") or ""), set()).add(what)
    rows = []
    for (who, msg), where in sorted(seen.items()):
        targets = ", ".join(t for t in TARGETS if any(w[0] == t for w in where))
        launches = "; ".join(sorted({w[1] for w in where}))
        rows.append([who, targets, launches, f"`{msg}`" if who.startswith("Triton") else msg])
    return _table(["who refuses", "targets", "launches", "message"], rows) if rows else "Nothing is refused."


def render_facts(data: dict) -> str:
    """Sentences read off the rows: which dots lose their matrix instruction where, where wgmma,
    TMA and cp.async appear."""
    rows = data["rows"]
    by = {(r["launch"], r["dtype"], r["tuned"], r["target"]): r for r in rows}
    fma_on: dict[str, set] = {}
    wgmma = set()
    for (launch, dtype, tuned, target), r in by.items():
        top = by.get((launch, dtype, tuned, "sm_90"))
        if top is None or top["status"] != "ok" or top["mma"] == "none":
            continue
        if top["mma"].startswith("wgmma"):
            wgmma.add(f"`{launch}` on {dtype}")
        if r["status"] == "ok" and r["mma"] == "none" and r["verdict"] == "runs":
            fma_on.setdefault(target, set()).add(dtype)
    triton = f"Triton {data['meta']['triton']}"
    lines = []
    f16: dict[tuple, list] = {}
    for r in rows:
        if r["dtype"] in ("e4m3", "e5m2") and r["verdict"] == "runs" and ".f16.f16" in (r["mma"] or ""):
            f16.setdefault((r["launch"], r["dtype"]), []).append(r["target"])
    for t in TARGETS:
        if fma_on.get(t):
            lines.append(
                f"* For {t} ({GPUS[t]}) {triton} compiles the {', '.join(sorted(fma_on[t]))} dots, which "
                "use a matrix instruction on sm_90, to loops of fp32 FMA instructions: they run, in fp32 "
                "arithmetic, without tensor cores."
            )
    if f16:
        lines.append(
            f"* Where {triton} has no fp8 matrix instruction for a dot, it converts the fp8 operands to "
            "fp16 (every fp8 value is an fp16 value) and uses an fp16 `mma.sync`: "
            + "; ".join(f"`{launch}` on {dtype} for {', '.join(ts)}" for (launch, dtype), ts in sorted(f16.items()))
            + "."
        )
    older = sorted(
        {r["mma"].split(" ")[0] for r in rows if r["status"] == "ok" and r["target"] != "sm_90" and r["mma"] != "none"}
    )
    lines.append(
        f"* `wgmma` (Hopper's warpgroup matrix instruction) appears in sm_90 code only, in {len(wgmma)} "
        f"launches ({'; '.join(sorted(wgmma))}); for the older targets the same launches compile to "
        + (" or ".join(f"`{w}`" for w in older) + " or FMA loops." if older else "FMA loops.")
    )
    tma = sorted({r["target"] for r in rows if r.get("tma")})
    lines.append(
        "* TMA (`cp.async.bulk.tensor`, Hopper's tensor memory accelerator) appears in "
        + (
            f"the code for {', '.join(tma)}."
            if tma
            else "none of the compiled kernels, on any target: the kernels load through pointers."
        )
    )
    cp = [t for t in TARGETS if any(r.get("cp_async") for r in rows if r["target"] == t)]
    lines.append(
        "* Asynchronous copies (`cp.async`, what software pipelining with num_stages > 1 loads with) "
        + (f"appear in the code for {', '.join(cp)}" if cp else "appear nowhere")
        + (
            "; the sm_75 code has none (the instruction needs sm_80), so there the stages do not "
            "overlap loads with the dots."
            if "sm_75" not in cp
            else "."
        )
    )
    return "\n".join(lines)


def _chapters(numbers) -> str:
    numbers = list(numbers)
    if not numbers:
        return "none"
    word = "chapter" if len(numbers) == 1 else "chapters"
    return f"{word} {', '.join(numbers[:-1]) + ' and ' if len(numbers) > 1 else ''}{numbers[-1]}"


def render_short(data: dict) -> str:
    """The answer in a few bullets, read off :func:`chapter_summary` and the rows."""
    summary = chapter_summary(data)
    cpu = [s["chapter"] for s in summary if not s["launches"]]
    gpu = [s for s in summary if s["launches"]]
    oldest = TARGETS[0]
    on_oldest = [s for s in gpu if s["lowest"] == oldest]
    lines = [f"* No GPU path (the same on any machine, GPU or not): {_chapters(cpu)}."]
    caveats = []
    for s in on_oldest:
        if s["no_tensor_cores"][oldest]:
            tc = next((t for t in TARGETS if s["runs"][t] and not s["no_tensor_cores"][t]), None)
            caveats.append(
                f"chapter {s['chapter']}'s {', '.join(s['no_tensor_cores'][oldest])} dots run without tensor "
                "cores there" + (f", with them from {tc} ({GPUS[tc]})" if tc else "")
            )
    lines.append(
        f"* GPU paths that run on {oldest} ({GPUS[oldest]}): {_chapters(s['chapter'] for s in on_oldest)}"
        + (f" ({'; '.join(caveats)})" if caveats else "")
        + "."
    )
    for t in TARGETS[1:]:
        need = [s for s in gpu if s["lowest"] == t]
        if need:
            below = TARGETS[: TARGETS.index(t)]
            why = sorted({f"{dtype} launches: {v}" for s in need for u in below for (dtype, v) in s["stops"][u]})
            lines.append(
                f"* GPU paths that need {t} ({GPUS[t]}) or newer: {_chapters(s['chapter'] for s in need)} "
                f"(below it, {'; '.join(why)})."
            )
    never = [s for s in gpu if s["lowest"] is None]
    if never:
        lines.append(f"* GPU paths that run on none of these targets: {_chapters(s['chapter'] for s in never)}.")
    groups = _groups([r for r in data["rows"] if r["chapters"]])
    wg = sorted(
        {
            c
            for g in groups.values()
            for r in g.get("sm_90", [])
            if r["status"] == "ok" and (r["mma"] or "").startswith("wgmma")
            for c in r["chapters"]
        }
    )
    tma = sorted({c for r in data["rows"] if r.get("tma") for c in r["chapters"]})
    lines.append(
        f"* Hopper-only instructions: `wgmma` in the sm_90 code of {_chapters(wg)} (the same launches use "
        "`mma.sync` or FMA loops on the older GPUs); TMA in " + (_chapters(tma) if tma else "no chapter") + "."
    )
    return "\n".join(lines)


def render(data: dict) -> str:
    """The generated part of docs/gpu.md, from the results file's contents."""
    m = data["meta"]
    command = "python -m nbhelpers.tooling.gpu_targets --page"
    head = f"{BEGIN} from {Path(RESULTS).relative_to(ROOT)} by `{command}`: do not edit -->"
    parts = [
        head,
        f"Compiled with Triton {m['triton']} and its ptxas {m['ptxas']} on {m['machine']} "
        f"({m['date'][:10]}, `{m['command']}`), no GPU.",
        "",
        "### In short",
        "",
        render_short(data),
        "",
        "### Chapter by chapter",
        "",
        render_chapters(data),
        "",
        "### What the compiler does",
        "",
        render_facts(data),
        "",
        "### Every launch on every target",
        "",
        "Each cell: the matrix instruction of the kernel's `tl.dot` (`wgmma`, `mma.sync`, or FMA when "
        "there is none; nothing for kernels without a dot) and the shared memory one program uses; "
        "spilled bytes per thread where ptxas spills; or why the launch does not run there.",
        "",
        render_matrix(data),
        "",
        "### Refusals and their messages",
        "",
        render_refusals(data),
        END,
    ]
    return "\n".join(parts)


def update_page(page: str, data: dict) -> str:
    """``page`` with the text between its generated markers replaced by :func:`render` of ``data``."""
    start = page.find(BEGIN)
    end = page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no '{BEGIN} ...' ... '{END}' block")
    return page[:start] + render(data) + page[end + len(END) :]


# ====================================================================== the command


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m nbhelpers.tooling.gpu_targets",
        description="Compile the chapters' GPU launches for sm_75, sm_80, sm_89 and sm_90 without a GPU, "
        "write the results file and the tables of docs/gpu.md.",
    )
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiles at a time (default: all cores)")
    ap.add_argument("--out", default=str(RESULTS), help="results file (default: %(default)s)")
    ap.add_argument("--page-file", default=str(PAGE), help="the page whose tables are rewritten (default: %(default)s)")
    ap.add_argument("--page", action="store_true", help="only rewrite the page's tables from the results file")
    ap.add_argument("--list", action="store_true", help="list the launches and stop")
    args = ap.parse_args(argv)
    if args.list:
        for launch in launches():
            c = launch.case
            chapters = ",".join(launch.chapters) or "-"
            print(f"{chapters:6s} {launch.launch} [{launch.dtype}] {c.kernel} {c.config} {launch.tuned}")
        return 0
    out = Path(args.out)
    if not args.page:
        from ..results import ResultsFile

        command = "python -m nbhelpers.tooling.gpu_targets " + " ".join(sys.argv[1:] if argv is None else argv)
        meta = {k: v for k, v in compile_meta(args.jobs, False, command.strip()).items() if k != "shared_limit"}
        meta["script"] = "python -m nbhelpers.tooling.gpu_targets"
        meta["targets"] = {t: GPUS[t] for t in TARGETS}
        meta["shared_limit"] = {t: SHARED_LIMIT[capability_of(t)] for t in TARGETS}
        results = ResultsFile(out, meta)
        t0 = time.perf_counter()

        def on_row(r):
            state = r["status"] if r["status"] != "ok" else f"{r['registers']} regs, smem {r['shared']:,} B, {r['mma']}"
            print(f"{r['compile_s']:6.1f} s  {r['target']}  {r['kernel']:<28s} {r['config']:<34s} {state}", flush=True)

        rows = run(args.jobs, on_row)
        results.extra["chapters"] = dict(CHAPTERS)
        results.finish(rows=rows, wall_s=round(time.perf_counter() - t0, 1))
        print(f"{len(rows)} rows; wrote {out}")
    data = json.loads(out.read_text())
    page = Path(args.page_file)
    page.write_text(update_page(page.read_text(), data))
    print(f"rewrote the tables of {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
