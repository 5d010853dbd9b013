"""Top-k over a 128k vocabulary on an NVIDIA GPU: chapter 11's three Triton kernels against torch, timed.

    python benchmarks/gpu_topk.py [--quick] [--dtypes bf16 fp32] [--batches 1 8 64 256]
                                  [--ks 1 8 50 256 1024] [--methods torch.topk torch.sort row two_stage radix]
                                  [--vocab 128256] [--time-limit 120]
                                  [--out benchmarks/results/topk_<gpu>.json]

Needs an NVIDIA GPU: without one (or with TRITON_INTERPRET=1) it prints one line and exits with
code 2. The logits are :func:`nbhelpers.topk.model_like_logits` (as many rows as the largest
batch, 256, over Llama 3's vocabulary, V = 128,256, seed 0; a Gaussian bulk with a lifted head),
cast to bf16 (and fp32); a batch of B rows is the first B of them. For each dtype, k and batch,
five ways to get the k largest logits of each row, largest first, are timed with
``triton.testing.do_bench`` (median ms, CUDA events, L2 flushed before each repetition), as a
caller would call them:

* ``torch.topk``: ``torch.topk(x, k, dim=-1)``;
* ``torch.sort``: ``torch.sort(x, dim=-1, descending=True)``, then the first k columns (a full sort
  of every row; the slice is a view);
* ``row``, ``two_stage``, ``radix``: :func:`nbhelpers.kernels.topk.topk` with that method and the
  launcher's default blocks (the row's ``launch`` field: :func:`nbhelpers.kernels.topk.plan`).
  ``radix`` includes its ``torch.sort`` of the k winners.

**Checked before timed.** Each configuration runs once (Triton compiles it then) and is compared
with :func:`nbhelpers.topk.topk_ref` (ties to the lowest index) on the rows :func:`checked_rows`
picks (every row of a batch up to 8, else the first 8 and 4 more spread to the last), and with
torch on every row. A Triton method must give topk_ref's indices and the same value bits, the
indices of a stable descending ``torch.sort`` (the same rule, computed on the GPU) and
``torch.topk``'s values. torch.topk and torch.sort promise nothing about which of several equal
values' indices they return, so for them only the values are compared (bits against topk_ref,
values against torch.topk). A configuration that fails is a row with an ``error`` and no time.

**Bytes.** Every method is charged the same, the least any top-k must move: one read of the
logits and the write of the k values and k int64 indices,

    bytes = batch * (V * s + k * (s + 8)),   s = 2 (bf16) or 4 (fp32)

(``batch * nbhelpers.topk.pass_cost(V, k, s).bytes``), and ``gb_per_s = bytes / median time``.
Methods that read the row more than once (radix select rereads it for each of its
``ceil(key bits / 8)`` histogram passes and once more to filter; a sort moves the whole row several
times) are slower in this count by design: it is an effective rate. ``fraction_of_peak`` divides it
by the HBM peak of :data:`PEAKS` (the H200's 4.8 TB/s; None on other GPUs). ``vs_torch_topk`` is
ms of torch.topk / ms of the method, same dtype, batch and k (above 1: faster than torch.topk).

Napkin math: at 4.8 TB/s, 256 bf16 rows (65.7 MB, more than the H200's 60 MB of L2) take 13.7 us
to read once; one row (256.5 KB) takes 0.05 us, far below the few microseconds a launch costs, so
at small batches the times measure launches and latency, not bandwidth.

**Skipped, and why.** Rows that were not timed are rows with an ``error`` saying why, never
missing: ``row`` at k >= 256 with 256 rows (:func:`skip_reason`: the running top-k inserts its
candidates one at a time, about 1,385 per row at k = 256 and 5,541 at k = 1024
(:func:`expected_insertions`), each a few dependent block-wide reductions); a configuration
whose one call takes more than :data:`MAX_CALL_MS` (do_bench would repeat it at least 8 times;
the row keeps ``call_ms``); a configuration that does not compile (the row keeps Triton's
message); every row that would start after ``--time-limit`` seconds (gpu_report.py passes 30).
The rows run in order of interest, so that a short run measures what the chapter needs first:
the ``--quick`` set (bf16, batches 1 / 64 / 256, k = 1 (greedy), 50 (sampling), 1024 (a large
candidate set)), then the rest of bf16, then fp32; within a dtype, k by k (each k compiles new
kernels), batch by batch, methods in the order above.

The results file ``benchmarks/results/topk_<gpu-slug>.json`` holds ``meta`` (GPU name, driver,
CUDA, compute capability, torch and Triton versions, UTC date, this script, the command, and the
bytes formula, peak, timer and checks in words) and ``rows``, one per (dtype, batch, k, method)
(see :func:`build_row`). It is rewritten after every row (``meta.complete`` is false until the
last), so a run that fails or is stopped halfway keeps what it measured.

Run time: Triton compiles about 18 kernels per dtype here, one after another (about 20 s for bf16
on a 2-core EPYC, compiled for sm_90 without a GPU; the compile step of gpu_report.py does not warm
them); the timings are about 0.1 s each. On an H100 80GB HBM3 (2026-12-06,
``benchmarks/results/topk_nvidia-h100-80gb-hbm3.json``) ``--time-limit 9`` timed 38 rows of bf16, to
k = 1024 at batch 64; the whole default run should take about 1.5 minutes; gpu_report.py bounds it
with ``--time-limit 30``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed package
    sys.path.insert(0, str(ROOT))

from nbhelpers.device import gpu_run_meta, start_gpu_script  # noqa: E402 (imports no torch)
from nbhelpers.families.topk import TopkRow  # noqa: E402 (imports no torch)
from nbhelpers.perf_model import GPU, H200, prediction_gpu  # noqa: E402 (imports no torch)
from nbhelpers.results import TOPK, ResultsFile, sweep  # noqa: E402 (imports no torch)
from nbhelpers.timing import GPU_TIMER  # noqa: E402 (imports no torch)
from nbhelpers.topk import pass_cost  # noqa: E402 (imports no torch)

SCRIPT = "benchmarks/gpu_topk.py"
VOCAB = 128_256  # Llama 3's vocabulary
DTYPES = ("bf16", "fp32")
VALUE_BYTES = {"bf16": 2, "fp32": 4}
INDEX_BYTES = 8  # every method returns int64 indices
BATCHES = (1, 8, 64, 256)
KS = (1, 8, 50, 256, 1024)
QUICK = {"dtypes": ("bf16",), "batches": (1, 64, 256), "ks": (1, 50, 1024)}
TRITON_METHODS = ("row", "two_stage", "radix")  # nbhelpers.kernels.topk.METHODS
METHODS = ("torch.topk", "torch.sort", *TRITON_METHODS)
SEED = 0
CHECK_FIRST = 8  # rows compared with topk_ref: every row up to this many, then the first 8 ...
CHECK_SPREAD = 4  # ... and this many more, spread to the last row
MAX_CALL_MS = 100.0  # a call slower than this is not given to do_bench (it would repeat it >= 8 times)
DEFAULT_TIME_LIMIT_S = 120.0
# peak HBM bandwidth, bytes/s, by a GPU-name fragment; source: shared/FACTS.md ("GPU memory")
PEAKS = {"h200": (4.8e12, "FACTS.md: H200 about 4.8 TB/s HBM3e peak (NVIDIA H200 specification)")}
BYTES_FORMULA = (
    "batch * (V * s + k * (s + 8)): one read of the logits (s bytes per value: 2 bf16, 4 fp32) plus the "
    "k values and k int64 indices written; the same for every method (an effective rate for methods "
    "that read a row more than once)"
)
CHECKS = (
    "before timing, once per configuration: Triton methods give nbhelpers.topk.topk_ref's indices and "
    "value bits on the checked rows (every row up to 8, else the first 8 and 4 more spread to the last), "
    "a stable descending torch.sort's indices and torch.topk's values on every row; torch.topk and "
    "torch.sort give topk_ref's value bits on the checked rows and torch.topk's values on every row"
)
TIMER = GPU_TIMER
META_KEYS = ("gpu", "driver", "cuda", "capability", "torch", "triton", "date", "script", "command")
#: the keys of every row, and of every row that was timed: the topk family's results row
#: (nbhelpers/families/topk.py, TopkRow), which build_row fills
ROW_KEYS = TOPK.row_keys
TIMED_KEYS = TOPK.timed_keys


# ------------------------------------------------------------------ arguments and the plan


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES), help="logit formats, in run order")
    ap.add_argument("--batches", type=_positive, nargs="+", default=list(BATCHES), help="rows per call")
    ap.add_argument("--ks", type=_positive, nargs="+", default=list(KS), help="values of k")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="what to time")
    ap.add_argument("--vocab", type=_positive, default=VOCAB, help="row length V (default: Llama 3's, %(default)s)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"only {QUICK['dtypes']}, batches {QUICK['batches']}, k in {QUICK['ks']}",
    )
    ap.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        help="start no row after this many seconds (the rest are recorded as skipped; default %(default)s)",
    )
    ap.add_argument("--out", help="results file (default: benchmarks/results/topk_<gpu>.json)")
    args = ap.parse_args(argv)
    if args.quick:
        args.dtypes, args.batches, args.ks = list(QUICK["dtypes"]), list(QUICK["batches"]), list(QUICK["ks"])
    too_big = [k for k in args.ks if k > args.vocab]
    if too_big:
        ap.error(f"--ks: k must be at most the row length V = {args.vocab}, got {too_big}")
    if not args.time_limit > 0:
        ap.error(f"--time-limit must be a positive number of seconds, got {args.time_limit}")
    args.methods = [m for m in METHODS if m in args.methods]  # torch.topk first: the others' ratios need it
    return args


def plan_cases(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(dtype, k, batch) in the order they run: those of the --quick set first, then the rest; within
    each part dtype by dtype, k by k (each k compiles new kernels), batch by batch."""
    cases = [(d, k, b) for d in args.dtypes for k in args.ks for b in args.batches]
    quick = {(d, k, b) for d in QUICK["dtypes"] for k in QUICK["ks"] for b in QUICK["batches"]}
    return [c for c in cases if c in quick] + [c for c in cases if c not in quick]


def topk_bytes(batch: int, V: int, k: int, dtype: str) -> int:
    """The bytes a top-k of ``batch`` rows is charged: ``batch * (V * s + k * (s + 8))``."""
    return batch * pass_cost(V, k, VALUE_BYTES[dtype], INDEX_BYTES).bytes


def expected_insertions(V: int, k_pad: int, block_v: int) -> float:
    """Candidates the running top-k of one row inserts, one at a time, when the row's values come in
    random order: it keeps ``k_pad`` of them and reads the row in blocks of ``block_v`` columns, and
    an entry of the block that ends at column ``end`` is inserted when it is among the ``k_pad``
    largest of the first ``end``, which it is with probability ``min(1, k_pad / end)``. So the sum
    over blocks of ``len * min(1, k_pad / end)``: ``k_pad`` for the first block, then about
    ``k_pad / j`` for the j-th: ``k_pad * H(V / block_v)`` in all, H(n) = 1 + 1/2 + ... + 1/n."""
    return sum((min(s + block_v, V) - s) * min(1.0, k_pad / min(s + block_v, V)) for s in range(0, V, block_v))


def skip_reason(method: str, batch: int, k: int, V: int, launch: dict | None = None) -> str | None:
    """Why a configuration is not run at all (None: it is run). ``launch``: the method's
    :func:`nbhelpers.kernels.topk.plan` (K_PAD, BLOCK_V), for the count in the reason."""
    if method == "row" and k >= 256 and batch >= 256:
        n = expected_insertions(V, launch["K_PAD"], launch["BLOCK_V"]) if launch else None
        count = "" if n is None else f" (about {n:,.0f} per row for logits in random order)"
        return (
            f"skipped: the 'row' kernel inserts its candidates one at a time{count}, each a few dependent "
            f"block-wide reductions in the row's one program; too slow for the report's time budget at "
            f"{batch} rows"
        )
    return None


def checked_rows(batch: int) -> list[int]:
    """The rows compared with topk_ref: every row of a batch up to CHECK_FIRST, else the first
    CHECK_FIRST and CHECK_SPREAD more spread evenly to the last row."""
    if batch <= CHECK_FIRST:
        return list(range(batch))
    spread = {CHECK_FIRST - 1 + round(i * (batch - CHECK_FIRST) / CHECK_SPREAD) for i in range(1, CHECK_SPREAD + 1)}
    return sorted(set(range(CHECK_FIRST)) | spread)


def peak_of(gpu: str) -> tuple[float | None, str | None]:
    """The HBM peak (bytes/s) and its source for a GPU name, (None, None) when not in PEAKS."""
    return next(((p, s) for key, (p, s) in PEAKS.items() if key in str(gpu).lower()), (None, None))


# ------------------------------------------------------------------ rows


def build_row(
    dtype: str,
    batch: int,
    V: int,
    k: int,
    method: str,
    ms: float | None = None,
    topk_ms: float | None = None,
    peak: float | None = None,
    launch: dict | None = None,
    checked: int | None = None,
    error: str | None = None,
    **extra,
) -> dict:
    """One results row: the configuration, its bytes, the Triton launch parameters (None for
    torch), how many rows were compared with topk_ref; then either ``ms``, ``gb_per_s``,
    ``fraction_of_peak`` (None without a known peak) and ``vs_torch_topk`` (``topk_ms / ms``, None
    when torch.topk was not timed for this configuration), or ``error`` saying why it was not timed.
    ``extra``: more fields (``call_ms`` of a configuration too slow to time)."""
    size = topk_bytes(batch, V, k, dtype)
    fields = dict(dtype=dtype, batch=batch, V=V, k=k, method=method, bytes=size, launch=launch, checked_rows=checked)
    if error is not None:
        return TOPK.as_dict(TopkRow(**fields, **extra, error=error))
    if ms is None:
        raise ValueError("a row without an error needs its time, ms")
    rate = size / (ms * 1e-3)
    row = TopkRow(
        **fields,
        **extra,
        ms=ms,
        gb_per_s=rate / 1e9,
        fraction_of_peak=None if peak is None else rate / peak,
        vs_torch_topk=None if topk_ms is None else topk_ms / ms,
    )
    return TOPK.as_dict(row)


# ------------------------------------------------------------------ data, references, checks


class Logits:
    """One dtype's logits on the device, the first ``rows`` of model_like_logits(rows, V, SEED),
    with what the checks compare against: topk_ref's top ``k_max`` of the checked rows (on the
    CPU) and a stable descending torch.sort's top ``k_max`` of every row (on the device)."""

    def __init__(self, dtype: str, rows: int, V: int, k_max: int, check_rows: list[int], device):
        import torch

        from nbhelpers.topk import model_like_logits, topk_ref

        torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        self.dtype, self.V = dtype, V
        self.x = torch.from_numpy(model_like_logits(rows, V, seed=SEED)).to(device).to(torch_dtype)
        self.as_int = {2: torch.int16, 4: torch.int32}[VALUE_BYTES[dtype]]
        self.ref_rows = sorted(set(check_rows))
        ref_vals, self.ref_idx = topk_ref(self.x[self.ref_rows].cpu(), k_max)
        self.ref_bits = ref_vals.view(self.as_int)
        self.sorted_idx = torch.sort(self.x, dim=-1, descending=True, stable=True).indices[:, :k_max].clone()

    def check(self, method: str, batch: int, k: int, vals, idx, topk_vals) -> str | None:
        """None when (vals, idx), the method's answer for the first ``batch`` rows, passes the
        checks of the module docstring; else what failed, in words."""
        import torch

        if tuple(vals.shape) != (batch, k) or tuple(idx.shape) != (batch, k):
            return f"shapes {tuple(vals.shape)} and {tuple(idx.shape)}, expected {(batch, k)}"
        vals_cpu, idx_cpu = vals.cpu(), idx.cpu()
        for pos, r in enumerate(self.ref_rows):
            if r >= batch:
                continue
            if not torch.equal(vals_cpu[r].view(self.as_int), self.ref_bits[pos, :k]):
                return f"values differ from topk_ref in row {r}"
            if method in TRITON_METHODS and not torch.equal(idx_cpu[r], self.ref_idx[pos, :k]):
                return f"indices differ from topk_ref in row {r}"
        if not torch.equal(vals, topk_vals):
            bad = (vals != topk_vals).any(dim=-1).nonzero()[0, 0].item()
            return f"values differ from torch.topk's in row {bad}"
        if method in TRITON_METHODS and not torch.equal(idx, self.sorted_idx[:batch, :k]):
            bad = (idx != self.sorted_idx[:batch, :k]).any(dim=-1).nonzero()[0, 0].item()
            return f"indices differ from a stable descending torch.sort's in row {bad}"
        return None


def method_fn(method: str, x, k: int):
    """The call that is checked and timed: returns (values, indices), each (rows, k)."""
    import torch

    if method == "torch.topk":
        return lambda: torch.topk(x, k, dim=-1)
    if method == "torch.sort":

        def full_sort():
            s = torch.sort(x, dim=-1, descending=True)
            return s.values[:, :k], s.indices[:, :k]

        return full_sort
    from nbhelpers.kernels.topk import topk

    return lambda: topk(x, k, method)


def build_errors() -> tuple:
    """The exceptions that mean a kernel could not be built for this GPU (a compile error, a
    config over the GPU's resources), raised before anything runs on it: the configuration is a
    row that says so. Anything else (a CUDA error) stops the run."""
    from triton.compiler.errors import CompilationError
    from triton.runtime import errors

    return tuple(e for e in (CompilationError, errors.OutOfResources, getattr(errors, "PTXASError", None)) if e)


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]


def _one_call_ms(fn) -> float:
    """Wall-clock ms of one synchronised call (only to decide whether do_bench may time it)."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def _bench(fn) -> float:
    from nbhelpers.timing import gpu_median_ms

    return gpu_median_ms(fn)


# ------------------------------------------------------------------ the loop


def run_cases(
    cases,
    methods,
    results: ResultsFile,
    device,
    time_fn,
    time_limit: float,
    V: int = VOCAB,
    peak: float | None = None,
    clock=time.monotonic,
    probe_fn=_one_call_ms,
    max_call_ms: float = MAX_CALL_MS,
    model: GPU = H200,
) -> list[dict]:
    """Measure each (dtype, k, batch) case with each method into ``results``, one row per method,
    written as soon as it is done (:func:`nbhelpers.results.sweep`). A row that would start after
    ``time_limit`` seconds, one :func:`skip_reason` refuses, one that fails its check or does not
    compile, and one whose call (``probe_fn``, ms) takes more than ``max_call_ms`` are rows saying
    why. Any other error stops the run and propagates, with the rows before it kept. ``time_fn(fn)``
    times one call (``_bench`` on a GPU; the tests pass a stand-in, on the CPU). The logits of a
    dtype are made when its first row runs. ``model``: the GPU the rows' predictions are for."""
    cases = list(cases)
    t_start = clock()
    data: dict = {}
    topk_ms: dict = {}
    late = []

    def logits(dtype):
        if dtype not in data:
            mine = [(k, b) for d, k, b in cases if d == dtype]
            rows = max(b for _, b in mine)
            check = sorted({r for _, b in mine for r in checked_rows(b)})
            data[dtype] = Logits(dtype, rows, V, max(k for k, _ in mine), check, device)
        return data[dtype]

    def one(case):
        import torch

        dtype, k, batch = case
        reference = None
        for method in methods:
            launch = predicted_ms = None
            if method in TRITON_METHODS:
                from nbhelpers.kernels.topk import plan, predicted

                # what topk() plans for this batch and dtype (the two-stage chunk follows both),
                # and what the performance model predicts for it
                launch = plan(V, k, method, rows=batch, value_bytes=VALUE_BYTES[dtype])
                forecast = predicted(V, k, method, rows=batch, value_bytes=VALUE_BYTES[dtype], gpu=model)
                predicted_ms = sum(q.seconds for q in forecast) * 1e3
            label = f"{dtype} batch={batch} k={k} {method}"

            def row(**kw):
                return build_row(dtype, batch, V, k, method, peak=peak, launch=launch, predicted_ms=predicted_ms, **kw)

            if clock() - t_start > time_limit:
                if not late:
                    print(f"  past the time limit of {time_limit:.0f} s: the remaining rows are recorded as skipped")
                late.append(case)
                yield row(error=f"skipped: past the time limit of {time_limit:.0f} s")
                continue
            why = skip_reason(method, batch, k, V, launch)
            if why is not None:
                print(f"  {label}: {why}")
                yield row(error=why)
                continue
            d = logits(dtype)
            x = d.x[:batch]
            checked = sum(r < batch for r in d.ref_rows)
            if reference is None:
                reference = torch.topk(x, k, dim=-1).values
            fn = method_fn(method, x, k)
            try:
                vals, idx = fn()  # Triton compiles the kernels of this configuration here
            except build_errors() as e:
                err = f"did not compile: {_one_line(e)}; not timed"
                print(f"  {label}: {err}")
                yield row(checked=checked, error=err)
                continue
            bad = d.check(method, batch, k, vals, idx, reference)
            if bad is not None:
                err = f"check failed: {bad}; not timed"
                print(f"  {label}: {err}")
                yield row(checked=checked, error=err)
                continue
            call_ms = float(probe_fn(fn))
            if call_ms > max_call_ms:
                err = f"not timed: one call took {call_ms:.0f} ms, more than {max_call_ms:.0f} ms"
                print(f"  {label}: {err}")
                yield row(checked=checked, error=err, call_ms=call_ms)
                continue
            ms = float(time_fn(fn))
            if method == "torch.topk":
                topk_ms[(dtype, batch, k)] = ms
            r = row(ms=ms, topk_ms=topk_ms.get((dtype, batch, k)), checked=checked)
            share = "" if r["fraction_of_peak"] is None else f" ({r['fraction_of_peak']:.0%} of peak)"
            vs = ""
            if method != "torch.topk" and r["vs_torch_topk"] is not None:
                vs = f", x{r['vs_torch_topk']:.2f} vs torch.topk"
            print(f"  {label}: {ms:.4f} ms, {r['gb_per_s']:.0f} GB/s{share}{vs}")
            yield r

    return sweep(cases, one, results)


def run_meta(base: dict, args: argparse.Namespace) -> dict:
    """The results file's meta: ``base`` (:func:`nbhelpers.device.gpu_run_meta`: GPU, versions,
    date, script, command) and what this run measured, in words: the row length, the logits, the
    timer, the bytes formula, the HBM peak and its source, the checks, the limits."""
    peak, peak_source = peak_of(base["gpu"])
    return {
        **base,
        "vocab": args.vocab,
        "logits": f"nbhelpers.topk.model_like_logits(rows, {args.vocab}, seed={SEED}), float32, cast to each dtype",
        "timer": TIMER,
        "bytes": BYTES_FORMULA,
        "gb_per_s": "bytes / median time / 1e9",
        "peak": peak,
        "peak_source": peak_source,
        "checks": CHECKS,
        "max_call_ms": MAX_CALL_MS,
        "time_limit": args.time_limit,
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)

    if not start_gpu_script("gpu_topk.py"):
        return 2

    import torch
    import triton

    t_start = time.monotonic()
    meta = run_meta(gpu_run_meta(SCRIPT, argv), args)
    gpu, peak = meta["gpu"], meta["peak"]
    print(f"{gpu}, torch {torch.__version__}, triton {triton.__version__}: top-k over V = {args.vocab}")
    out = Path(args.out) if args.out else TOPK.path(gpu, ROOT / "benchmarks" / "results")
    results = ResultsFile(out, meta, TOPK)  # rewritten after every row: a run stopped halfway keeps its rows
    rows = run_cases(
        plan_cases(args),
        args.methods,
        results,
        "cuda",
        _bench,
        args.time_limit,
        V=args.vocab,
        peak=peak,
        model=prediction_gpu(gpu),
    )
    results.finish()
    timed = sum("error" not in r for r in rows)
    print(f"wrote {out}: {timed} of {len(rows)} rows timed ({time.monotonic() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
