"""Tests of nbhelpers.kernels.copy, chapter 08's copy kernels: contiguous, strided and transposed,
bit for bit against torch's own indexing over many lengths and shapes, for float and int types;
the masks (nothing past the end is written); the launchers' errors.

As in test_kernels_gemm.py, ``setup_device()`` runs before the kernel module is imported: without
a GPU it sets TRITON_INTERPRET=1 and the kernels run in Triton's interpreter on the CPU (nothing
here is skipped on a CPU); with a GPU the same tests run the compiled kernels on CUDA tensors.
"""

import os

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import pytest
import torch
import triton

from nbhelpers import kernels
from nbhelpers.kernels.copy import (
    DTYPES,
    copy,
    copy_kernel,
    copy_ref,
    predicted,
    strided_read,
    strided_read_kernel,
    strided_read_ref,
    transpose,
    transpose_kernel,
    transpose_ref,
)

DEV = INFO.device
INTERPRETED = kernels.INTERPRETED

# the integer type of the same width, to compare bit patterns (NaN payloads, -0.0 included)
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
TEST_DTYPES = [
    torch.float32,
    torch.int32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int64,
]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.element_size()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a.cpu()), bits(b.cpu()))


def data(shape, dtype, seed=0) -> torch.Tensor:
    """Random values of ``dtype`` (every bit pattern of an int type; for floats normal values with
    -0.0, inf and a NaN mixed in), on the test device."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape if isinstance(shape, tuple) else (shape,):
        n *= s
    if dtype.is_floating_point:
        x = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
        specials = torch.tensor([-0.0, float("inf"), float("nan"), -float("inf")], dtype=dtype)
        k = min(n, 4)
        x[:k] = specials[:k]
        x = x[torch.randperm(n, generator=g)]
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(max(info.min, -(2**62)), min(info.max, 2**62), (n,), generator=g, dtype=torch.int64)
        x = x.to(dtype)
    return x.reshape(shape).to(DEV)


# ------------------------------------------------------------------ mode


def test_interpreted_flag_follows_the_device():
    assert INTERPRETED == (not INFO.is_gpu)
    assert INTERPRETED == (os.environ.get("TRITON_INTERPRET") == "1")


def test_the_accepted_dtypes_are_the_tested_ones():
    assert set(DTYPES) == set(TEST_DTYPES)


# ------------------------------------------------------------------ contiguous copy

PRIMES = [2, 3, 7, 13, 97, 1009]
LENGTHS = [0, 1, *PRIMES, 15, 16, 17, 31, 32, 33, 100, 1023, 1024, 1025, 3 * 1024 + 5]


@pytest.mark.parametrize("dtype", TEST_DTYPES)
def test_copy_is_bit_exact_for_every_length(dtype):
    for n in LENGTHS:
        x = data(n, dtype, seed=n)
        for block in (16, 1024):
            out = copy(x, block=block)
            assert same_bits(out, copy_ref(x)), (n, block)
            assert out.device == x.device
            assert n == 0 or out.data_ptr() != x.data_ptr()  # a new tensor, not x itself


def test_copy_of_a_large_tensor_in_several_programs():
    x = data(100_003, torch.float32, seed=1)  # prime length: 98 programs of 1024, a ragged tail
    assert same_bits(copy(x), x)
    assert same_bits(copy(x, block=65536), x)


def test_copy_mask_writes_nothing_past_the_end():
    # the kernel on a view into a larger buffer: a missing mask would overwrite the guard values
    n, block = 37, 16
    x = data(n, torch.float32, seed=2)
    buf = torch.full((n + 3 * block,), -7.0, device=DEV)
    copy_kernel[(triton.cdiv(n, block),)](x, buf, n, BLOCK=block)
    assert same_bits(buf[:n], x)
    assert torch.all(buf[n:] == -7.0)


# ------------------------------------------------------------------ strided read

STRIDED_LENGTHS = [0, 1, 2, 7, 31, 32, 33, 97, 1000, 1025]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16, torch.int8, torch.int64])
def test_strided_read_equals_torch_slicing_for_strides_1_to_32(dtype):
    for n in STRIDED_LENGTHS:
        x = data(n, dtype, seed=n + 1)
        for stride in range(1, 33):
            out = strided_read(x, stride, block=16)
            assert same_bits(out, strided_read_ref(x, stride)), (n, stride)
            assert out.shape == (len(range(0, n, stride)),) and out.is_contiguous()


@pytest.mark.parametrize("stride", [1, 2, 8, 32, 33, 1000])
def test_strided_read_default_block_and_long_strides(stride):
    x = data(20_011, torch.float32, seed=stride)  # a prime length
    assert same_bits(strided_read(x, stride), x[::stride].contiguous())


def test_strided_read_mask_stays_inside_x_and_out():
    # 20 outputs from a buffer whose tail past x holds guards: a read past n_out would fetch a
    # guard (-7) into out's guarded tail, a write past n_out would overwrite out's guards
    n_out, stride, block = 20, 3, 16
    src = torch.full((n_out * stride + 4 * block * stride,), -7.0, device=DEV)
    src[: n_out * stride] = data(n_out * stride, torch.float32, seed=3)
    out = torch.full((n_out + 2 * block,), 5.0, device=DEV)
    strided_read_kernel[(triton.cdiv(n_out, block),)](src, out, n_out, stride, BLOCK=block)
    assert same_bits(out[:n_out], src[: n_out * stride : stride].contiguous())
    assert torch.all(out[n_out:] == 5.0)


# ------------------------------------------------------------------ transposed copy

SHAPES = [
    (0, 5),
    (5, 0),
    (1, 1),
    (1, 37),
    (37, 1),
    (16, 16),
    (17, 31),
    (31, 17),
    (64, 48),
    (97, 3),
    (3, 97),
    (100, 129),
    (33, 65),
]


@pytest.mark.parametrize("dtype", TEST_DTYPES)
def test_transpose_is_bit_exact_for_every_shape(dtype):
    for M, N in SHAPES:
        x = data((M, N), dtype, seed=M * 1000 + N)
        for block in ((16, 16), (32, 16), (16, 64)):
            out = transpose(x, block=block)
            assert out.shape == (N, M) and out.is_contiguous()
            assert same_bits(out, transpose_ref(x)), (M, N, block)


def test_transpose_of_strided_views():
    x = data((60, 90), torch.float32, seed=4)
    for view in (x.t(), x[::2, ::3], x[5:47, 7:], x.t()[::3]):
        assert not view.is_contiguous()
        assert same_bits(transpose(view), view.t().contiguous())
    # twice is the identity
    assert same_bits(transpose(transpose(x)), x)


def test_transpose_mask_writes_nothing_outside_the_output():
    # out as a (N, M) window with row stride M + 8 into a guarded buffer: masked-off lanes of the
    # edge tiles must not touch the 8 guard columns or the rows below
    M, N, pad = 20, 23, 8
    x = data((M, N), torch.float32, seed=5)
    buf = torch.full((N + 16, M + pad), -7.0, device=DEV)
    out = buf[:N, :M]
    transpose_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
        x, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BLOCK_M=16, BLOCK_N=16
    )
    assert same_bits(out.contiguous(), x.t().contiguous())
    assert torch.all(buf[:N, M:] == -7.0) and torch.all(buf[N:] == -7.0)


# ------------------------------------------------------------------ bad input


def test_bad_inputs_get_clear_errors():
    x = data(64, torch.float32)
    with pytest.raises(TypeError, match="torch.Tensor"):
        copy(x.cpu().numpy())
    with pytest.raises(TypeError, match="accepted"):
        copy(torch.ones(8, dtype=torch.bool, device=DEV))
    with pytest.raises(TypeError, match="complex64"):
        strided_read(torch.ones(8, dtype=torch.complex64, device=DEV), 2)
    with pytest.raises(ValueError, match="1-D"):
        copy(x.reshape(8, 8))
    with pytest.raises(ValueError, match="1-D"):
        strided_read(x.reshape(8, 8), 2)
    with pytest.raises(ValueError, match="2-D"):
        transpose(x)
    with pytest.raises(ValueError, match="contiguous"):
        copy(x[::2])
    with pytest.raises(ValueError, match="contiguous"):
        strided_read(x[::2], 2)
    for stride in (0, -1, 2.0, True, "2"):
        with pytest.raises(ValueError, match=r"stride must be a positive int \(elements between two reads\)"):
            strided_read(x, stride)
    for block in (0, 8, 24, 2**17, 16.0, True):
        with pytest.raises(ValueError, match="block"):
            copy(x, block=block)
        with pytest.raises(ValueError, match="block"):
            strided_read(x, 2, block=block)
    for block in ((16,), (16, 24), (8, 16), (16, 512), 32, (16.0, 16)):
        with pytest.raises(ValueError, match="BLOCK|block"):
            transpose(x.reshape(8, 8), block=block)


@pytest.mark.skipif(not INTERPRETED, reason="compiled kernels refuse CPU tensors instead")
def test_interpreter_takes_cpu_tensors():
    x = data(10, torch.float32)
    assert x.device.type == "cpu" and copy(x).device.type == "cpu"


@pytest.mark.skipif(INTERPRETED, reason="needs compiled kernels (a GPU)")
def test_compiled_kernels_refuse_cpu_tensors():
    for call in (
        lambda: copy(torch.ones(16)),
        lambda: strided_read(torch.ones(16), 2),
        lambda: transpose(torch.ones((4, 4))),
    ):
        with pytest.raises(ValueError, match="CUDA tensors"):
            call()


# ------------------------------------------------------------------ the GPU benchmark script


def load_benchmark():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_copy_bandwidth.py"
    spec = importlib.util.spec_from_file_location("gpu_copy_bandwidth", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(INFO.is_gpu, reason="on a GPU the script runs: see the test below")
def test_benchmark_refuses_to_run_without_a_gpu(capsys, tmp_path):
    out = tmp_path / "copy.json"
    assert load_benchmark().main(["--out", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_copy_bandwidth.py needs an NVIDIA GPU: ")
    assert captured.out == "" and not out.exists()


@pytest.mark.skipif(not INFO.is_gpu, reason="needs a GPU")
def test_benchmark_runs_on_a_gpu_and_writes_a_labelled_file(tmp_path):
    import json

    out = tmp_path / "copy.json"
    argv = [
        "--n",
        "100003",
        "--n-strided",
        "5003",
        "--strides",
        "2",
        "8",
        "--transpose",
        "100",
        "70",
        "--out",
        str(out),
    ]
    assert load_benchmark().main(argv) == 0
    run = json.loads(out.read_text())
    meta = run["meta"]
    assert meta["gpu"] == torch.cuda.get_device_name(0) and meta["script"] == "benchmarks/gpu_copy_bandwidth.py"
    assert meta["command"].endswith(" ".join(argv[:-1]) + " " + str(out))
    for key in ("driver", "torch", "triton", "date"):
        assert key in meta
    names = [r["name"] for r in run["rows"]]
    assert names[0] == "torch copy" and "strided 8" in names and "torch transpose" in names
    assert all(r["bandwidth"] > 0 and r["ms"] > 0 for r in run["rows"])
    assert all((r.get("predicted_ms") is None) == (r["kernel"] == "torch") for r in run["rows"])


def test_the_models_prediction_for_the_copies():
    """kernels.copy.predicted: the bytes (reads over their sector efficiency, and the writes) at
    the H200's HBM rate, unless the resident programs hold too few bytes in flight."""
    from dataclasses import replace

    from nbhelpers.perf_model import H200, little_bytes

    n = 2**28
    p = predicted("contiguous", n, 1024, registers=18)
    assert p.bound == "HBM" and p.seconds == pytest.approx(8 * n / H200.hbm_bytes_per_s + H200.launch_s)
    strided = predicted("strided", 2**24, 1024, efficiency=1 / 8, registers=28)  # 9 bytes moved per 2 useful
    assert strided.terms["HBM"] == pytest.approx(2**24 * 4 * 9 / H200.hbm_bytes_per_s)
    tile = predicted("transposed", 8192 * 8192, (32, 32), registers=28)
    assert tile.terms == predicted("contiguous", 8192 * 8192, 1024, registers=28).terms  # 1024 elements a program
    # at a latency 100 times longer, 16 programs of 4 KB per SM no longer cover the need
    slow = replace(H200, latency_s=100e-6)
    assert 16 * 4096 * H200.sms < little_bytes(slow, read_share=0.5)  # a copy waits on its reads only
    latency_bound = predicted("contiguous", n, 1024, registers=18, gpu=slow)
    # one step per program: a wave moves its bytes in one latency, so the two latency terms agree
    assert latency_bound.bound in ("bytes in flight", "dependent steps")
    assert latency_bound.terms["bytes in flight"] == pytest.approx(4 * n * slow.latency_s / (16 * 4096 * H200.sms))
    assert latency_bound.seconds > 10 * latency_bound.terms["HBM"]
    load = load_benchmark()  # the benchmark's rows: this prediction at the compile table's registers
    assert load.predicted_ms_of("contiguous", [1024], n, 1.0) == pytest.approx(p.seconds * 1e3)
    with pytest.raises(ValueError, match="pattern must be"):
        predicted("gather", n)
    with pytest.raises(ValueError, match=r"efficiency must be in \(0, 1\]"):
        predicted("strided", n, 1024, efficiency=2.0)
