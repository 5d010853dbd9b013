"""The GPU benchmarks build each results row as their kernel family's row dataclass, on any
machine: a field the dataclass lacks, or a field it requires that the script does not fill, stops
the script at the line that builds the row, before anything is written (the rows of
gpu_topk.py and gpu_grouped_gemm.py: test_gpu_topk_bench.py, test_gpu_grouped_gemm_bench.py).

Each case swaps the family's row type, where the script (or, for chapter 03's GEMM numerics,
:mod:`nbhelpers.gpu_measurements`) looks it up, for one with a field fewer or one more, and builds
a row the way the script does: on a CPU the kernels run in Triton's interpreter.
"""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before any kernel import: TRITON_INTERPRET=1 on a CPU

import dataclasses

import pytest
import torch
from helpers import load_benchmark

import nbhelpers.gpu_measurements as gpu_measurements

copy_bench = load_benchmark("gpu_copy_bandwidth")
tflops_bench = load_benchmark("gpu_gemm_tflops")
pressure_bench = load_benchmark("gpu_register_pressure")


def build_copy_row():
    forecast = copy_bench.predicted_ms_of("strided", [1024], 4096, 0.125)
    return [
        copy_bench.build_row("strided 8", "triton", "strided", 8, [1024], 4096, 0.01, 0.125, 4.0e12, 4.8e12, forecast)
    ]


def build_tflops_rows():
    return [
        tflops_bench.build_row("bf16", 16, 16, 32, rel_diff=1e-3, ms_ours=1.0, ms_theirs=0.9),
        tflops_bench.build_row("block_scaled", 16, 16, 32, error="skipped: past the time limit of 10 s"),
    ]


def build_pressure_row():
    x = torch.randn((8, 1024), generator=torch.Generator().manual_seed(0)).to(INFO.device)

    def info(kernel):  # stand-in compiled facts
        return {"registers": 39, "spills": 0, "shared": 0}

    return [pressure_bench.REGISTER_PRESSURE.as_dict(pressure_bench.measure_case(4, x, lambda fn: 2.0, info_fn=info))]


def build_numerics_series():
    return gpu_measurements.measure_gemm_errors([16], M=4, N=4, seed=0, models=False)


# (the module that names the row type, its name there, a field every row built here holds, builder)
CASES = {
    "gpu_copy_bandwidth": (copy_bench, "CopyBandwidthRow", "block", build_copy_row),
    "gpu_gemm_tflops": (tflops_bench, "GemmTflopsRow", "goal", build_tflops_rows),
    "gpu_register_pressure": (pressure_bench, "RegisterPressureRow", "limit", build_pressure_row),
    "gpu_gemm_numerics": (gpu_measurements, "GemmNumericsSeries", "out_fmt", build_numerics_series),
}


def _field(f: dataclasses.Field) -> tuple:
    if f.default is dataclasses.MISSING:
        return (f.name, f.type)
    return (f.name, f.type, dataclasses.field(default=f.default, metadata=f.metadata))


def without(row_type: type, name: str) -> type:
    """``row_type`` with the field ``name`` left out: a schema that does not know a field."""
    kept = [_field(f) for f in dataclasses.fields(row_type) if f.name != name]
    return dataclasses.make_dataclass(row_type.__name__, kept, frozen=True)


def with_one_more(row_type: type) -> type:
    """``row_type`` with one more required field, ``unfilled``, that no script fills."""
    fields = [("unfilled", int), *(_field(f) for f in dataclasses.fields(row_type))]
    return dataclasses.make_dataclass(row_type.__name__, fields, frozen=True)


@pytest.mark.parametrize("script", CASES)
def test_the_family_row_takes_every_field_the_script_writes(script):
    module, type_name, field, build = CASES[script]
    names = [f.name for f in dataclasses.fields(getattr(module, type_name))]
    for row in build():
        keys = list(row)  # the dict a results file holds, in the dataclass's order
        assert field in keys and [k for k in names if k in keys] == keys


@pytest.mark.parametrize("script", CASES)
def test_a_field_the_family_row_lacks_is_refused_where_the_row_is_built(script, monkeypatch):
    module, type_name, field, build = CASES[script]
    monkeypatch.setattr(module, type_name, without(getattr(module, type_name), field))
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{field}'"):
        build()


@pytest.mark.parametrize("script", CASES)
def test_a_required_field_the_script_does_not_fill_is_refused_where_the_row_is_built(script, monkeypatch):
    module, type_name, _, build = CASES[script]
    monkeypatch.setattr(module, type_name, with_one_more(getattr(module, type_name)))
    with pytest.raises(TypeError, match="missing 1 required .*'unfilled'"):
        build()
