"""nbhelpers.timing: the interleaved CPU timer and the GPU timer (every GPU timing goes through it);
nbhelpers.results: the results file that is rewritten after every row, and the sweep that fills
it, so that a benchmark which fails halfway keeps what it measured."""

import json

import pytest

from nbhelpers import timing
from nbhelpers.results import ResultsFile, sweep
from nbhelpers.timing import interleaved_medians


def read(path):
    return json.loads(path.read_text())


def test_interleaved_medians_times_in_rounds_and_drops_the_warm_up(monkeypatch):
    """Every function once per round in the dict's order (a, b, a, b, ...), the warm-up rounds not
    kept, each timing over `calls` calls divided by `calls`, the median per function."""
    order = []
    clock = iter(range(1000))  # perf_counter: 0, 1, 2, ...: each timing spans one tick
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    med = interleaved_medians(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=3, warmup_rounds=1, calls=2
    )
    assert order == ["a", "a", "b", "b"] * 4
    assert med == {"a": 0.5, "b": 0.5}  # one tick over two calls


def test_interleaved_medians_takes_the_median_not_the_best(monkeypatch):
    spans = iter([0, 5, 5, 6, 6, 9])  # three timings: 5, 1, 3 ticks
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(spans))
    assert interleaved_medians({"f": lambda: None}, rounds=3, warmup_rounds=0) == {"f": 3}


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(rounds=0), "^rounds must be a positive int, got 0$"),
        (dict(rounds=2.0), "^rounds must be a positive int, got 2.0$"),
        (dict(rounds=2, warmup_rounds=-1), "^warmup_rounds must be a non-negative int, got -1$"),
        (dict(rounds=2, warmup_rounds=False), "^warmup_rounds must be a non-negative int, got False$"),
        (dict(rounds=2, calls=0), "^calls must be a positive int, got 0$"),
    ],
)
def test_interleaved_medians_refuses_bad_counts(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        interleaved_medians({"f": lambda: None}, **kwargs)
    with pytest.raises(ValueError, match="at least one function"):
        interleaved_medians({}, rounds=1)


# ====================================================================== the GPU timer


@pytest.fixture
def fake_do_bench(monkeypatch):
    """triton.testing.do_bench replaced by a recorder (it needs a GPU): the calls it gets, as
    (fn, keyword arguments); it returns 1.5 ms."""
    import triton.testing

    calls = []

    def do_bench(fn, **kwargs):
        calls.append((fn, kwargs))
        return 1.5

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    return calls


def test_gpu_median_ms_asks_do_bench_for_the_median_with_the_settings_chosen_once(fake_do_bench):
    def fn():
        pass

    ms = timing.gpu_median_ms(fn)
    assert ms == 1.5 and type(ms) is float
    # return_mode is given: do_bench's default is the mean
    assert fake_do_bench == [(fn, {"warmup": timing.GPU_WARMUP_MS, "rep": timing.GPU_REP_MS, "return_mode": "median"})]
    # the words a results file records say the same settings
    assert f"warmup={timing.GPU_WARMUP_MS}, rep={timing.GPU_REP_MS}, return_mode='median'" in timing.GPU_TIMER


@pytest.mark.parametrize("script", ["gpu_topk", "gpu_grouped_gemm"])
def test_a_benchmarks_timer_is_the_one_gpu_timer(fake_do_bench, script):
    from helpers import load_benchmark

    fn = object()
    assert load_benchmark(script)._bench(fn) == 1.5
    assert fake_do_bench == [(fn, {"warmup": timing.GPU_WARMUP_MS, "rep": timing.GPU_REP_MS, "return_mode": "median"})]


def test_tuning_ms_is_the_benchmarks_timer_in_the_form_autotune_takes(fake_do_bench):
    def fn():
        pass

    assert timing.tuning_ms(fn) == 1.5  # the grouped GEMM's tuner: the median
    timing.tuning_ms(fn, quantiles=(0.5, 0.2, 0.8))  # triton.autotune's call
    settings = {"warmup": timing.GPU_WARMUP_MS, "rep": timing.GPU_REP_MS, "return_mode": "median"}
    assert fake_do_bench == [
        (fn, {**settings, "quantiles": None}),
        (fn, {**settings, "quantiles": (0.5, 0.2, 0.8)}),
    ]


# Run where the kernels compile (no TRITON_INTERPRET: the autotuners exist only there; a CPU is
# enough to build them), with triton.testing.do_bench replaced before the kernels are imported:
# every tuner's timing call, as (tuner, do_bench's keyword arguments).
TUNERS_SCRIPT = """
import json, pkgutil, importlib
import torch
import triton.testing
from triton.runtime.autotuner import Autotuner

calls = []


def do_bench(fn, **kwargs):
    calls.append((tuner, {k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()}))
    return [1.0] * len(kwargs["quantiles"]) if kwargs.get("quantiles") else 1.0


triton.testing.do_bench = do_bench
import nbhelpers.kernels as kernels

found = {}
for info in pkgutil.iter_modules(kernels.__path__):
    mod = importlib.import_module(f"nbhelpers.kernels.{info.name}")
    for name, value in vars(mod).items():
        for i, t in enumerate(value.values() if isinstance(value, dict) else [value]):
            if isinstance(t, Autotuner):
                found[f"{info.name}.{name}[{i}]"] = t
from nbhelpers.kernels import grouped_gemm, scaled_gemm

for block_k in (128, 64):  # made on first use
    found[f"scaled_gemm._block_scaled_tuned({block_k})"] = scaled_gemm._block_scaled_tuned(block_k)
for tuner, t in found.items():
    try:
        t.do_bench(lambda: None, quantiles=(0.5, 0.2, 0.8))  # as Autotuner._bench calls it
    except Exception as e:  # Triton's own benchmarker (do_bench=None) needs a GPU driver
        calls.append((tuner, {"error": repr(e)}))
tuner = "grouped_gemm._tuned_launch"
grouped_gemm._launch = lambda *args, **kwargs: None  # what is timed does not matter here
x, w = torch.zeros(8, 16), torch.zeros(2, 16, 16)
grouped_gemm._tuned_launch(x, w, torch.zeros(8, 16), None, "ieee", 8)
print(json.dumps({"calls": calls, "grouped_configs": len(grouped_gemm.GPU_CONFIGS)}))
"""


def test_every_tuner_times_with_tuning_ms():
    """Each triton.autotune of the kernels and the grouped GEMM's own tuner call do_bench with the
    settings of timing.tuning_ms, and with nothing else: a tuner that went back to settings of its
    own (or to Triton's defaults, do_bench=None) fails here."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(timing.__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root)
    out = subprocess.run(
        [sys.executable, "-c", TUNERS_SCRIPT], env=env, cwd=root, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    calls = got["calls"]
    tuners = {t for t, _ in calls}
    # every tuner of the three tuned families was reached
    for prefix in ("gemm._matmul_tuned", "scaled_gemm._scaled_tuned", "scaled_gemm._block_scaled_tuned"):
        assert any(t.startswith(prefix) for t in tuners), (prefix, sorted(tuners))
    assert sum(t == "grouped_gemm._tuned_launch" for t, _ in calls) == got["grouped_configs"]
    settings = {"warmup": timing.GPU_WARMUP_MS, "rep": timing.GPU_REP_MS, "return_mode": "median"}
    for tuner, kwargs in calls:
        quantiles = None if tuner == "grouped_gemm._tuned_launch" else [0.5, 0.2, 0.8]
        assert kwargs == {**settings, "quantiles": quantiles}, tuner


def do_bench_calls(path) -> list[int]:
    """Line numbers of the calls of ``do_bench`` (a bare name or ``triton.testing.do_bench``) in
    a Python file."""
    import ast

    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == "do_bench" or getattr(node.func, "attr", None) == "do_bench")
    ]


def test_every_gpu_timing_in_the_package_and_the_benchmarks_goes_through_the_one_timer(tmp_path):
    from pathlib import Path

    root = Path(timing.__file__).resolve().parents[1]
    files = sorted((root / "nbhelpers").rglob("*.py")) + sorted((root / "benchmarks").glob("*.py"))
    callers = {str(p.relative_to(root)) for p in files if do_bench_calls(p)}
    assert callers == {"nbhelpers/timing.py"}  # the benchmarks' timer and the tuners' (below)
    # the reader sees both spellings
    (tmp_path / "a.py").write_text(
        "import triton\nfrom triton.testing import do_bench\nx = do_bench(f)\ny = triton.testing.do_bench(g, rep=5)\n"
    )
    assert do_bench_calls(tmp_path / "a.py") == [3, 4]


def test_results_file_is_written_after_every_row_and_completed_by_finish(tmp_path):
    path = tmp_path / "sub" / "r.json"
    res = ResultsFile(path, {"gpu": "Test GPU"})
    assert not path.exists()  # nothing measured, nothing written
    res.add({"x": 1})
    assert read(path) == {"meta": {"gpu": "Test GPU", "complete": False}, "rows": [{"x": 1}]}
    res.add({"x": 2})
    assert [r["x"] for r in read(path)["rows"]] == [1, 2] and not list(tmp_path.glob("sub/*.partial"))
    res.finish(rows=[{"x": 1, "y": 10}, {"x": 2, "y": 20}], best="x=2")
    data = read(path)
    assert data["meta"]["complete"] is True and data["best"] == "x=2" and data["rows"][1] == {"x": 2, "y": 20}
    assert list(data) == ["meta", "best", "rows"]


def test_results_file_refuses_bad_input(tmp_path):
    with pytest.raises(TypeError, match="meta must be a dict"):
        ResultsFile(tmp_path / "r.json", ["gpu"])
    res = ResultsFile(tmp_path / "r.json", {})
    with pytest.raises(TypeError, match="a row must be a dict"):
        res.add([1, 2])
    with pytest.raises(ValueError, match="cannot replace meta"):
        res.finish(meta={})
    assert res.finish() == tmp_path / "r.json" and read(tmp_path / "r.json")["rows"] == []


def test_a_sweep_that_fails_on_the_third_case_keeps_the_first_two(tmp_path):
    """The timer raises on the third shape, as a GPU error or a killed run would: the sweep stops
    with the error, and the file holds the two rows measured before it, marked incomplete."""
    calls = []

    def timer(shape):
        calls.append(shape)
        if len(calls) == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return 1.0

    def measure(shape):
        yield {"shape": shape, "ms": timer(shape)}

    res = ResultsFile(tmp_path / "r.json", {"gpu": "Test GPU"})
    with pytest.raises(RuntimeError, match="illegal memory access"):
        sweep([1, 2, 3, 4], measure, res)
    data = read(tmp_path / "r.json")
    assert [r["shape"] for r in data["rows"]] == [1, 2] and data["meta"]["complete"] is False
