"""Tests of nbhelpers.device: the CPU/GPU choice, the Triton-interpreter switch, and the refusals
(a GPU demanded but absent, kernels imported before setup)."""

import os
import sys
import types

import pytest

from nbhelpers.device import NoGPUError, setup_device

try:
    import torch

    HAS_GPU = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    HAS_GPU = False


@pytest.fixture
def clean_env(monkeypatch):
    """A process as a notebook's setup cell finds it: no device variables, and the kernels not
    imported yet (another test file in the same process may have imported them, compiled)."""
    for var in ("NBHELPERS_DEVICE", "NBHELPERS_REQUIRE_GPU", "TRITON_INTERPRET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delitem(sys.modules, "nbhelpers.kernels", raising=False)
    return monkeypatch


def test_forced_cpu_sets_the_interpreter(clean_env, capsys):
    clean_env.setenv("NBHELPERS_DEVICE", "cpu")
    info = setup_device()
    assert info.device == "cpu" and info.triton_interpreter
    assert os.environ["TRITON_INTERPRET"] == "1"
    out = capsys.readouterr().out
    assert "device: cpu" in out
    # the versions of the libraries whose behaviour the chapters show are on the same line
    import ml_dtypes
    import numpy
    import torch

    for name, module in (("torch", torch), ("numpy", numpy), ("ml_dtypes", ml_dtypes)):
        assert f"{name} {module.__version__}" in out
    assert info.ml_dtypes_version == ml_dtypes.__version__ and info.numpy_version == numpy.__version__


def test_auto_picks_what_torch_sees(clean_env):
    info = setup_device(verbose=False)
    assert info.is_gpu == HAS_GPU
    assert (os.environ.get("TRITON_INTERPRET") == "1") == (not HAS_GPU)


def test_require_gpu_fails_instead_of_falling_back(clean_env):
    clean_env.setenv("NBHELPERS_REQUIRE_GPU", "1")
    if HAS_GPU:
        assert setup_device(verbose=False).is_gpu
    else:
        with pytest.raises(NoGPUError, match="NBHELPERS_REQUIRE_GPU"):
            setup_device(verbose=False)


def test_bad_device_value(clean_env):
    with pytest.raises(ValueError, match="'auto', 'cpu' or 'cuda'"):
        setup_device("tpu")


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU-only error path")
def test_cuda_demanded_without_gpu(clean_env):
    with pytest.raises(NoGPUError):
        setup_device("cuda")


def test_kernels_imported_for_gpu_before_setup_is_refused(clean_env):
    fake = types.ModuleType("nbhelpers.kernels")
    fake.INTERPRETED = False  # as if imported without TRITON_INTERPRET on a CPU machine
    clean_env.setitem(sys.modules, "nbhelpers.kernels", fake)
    if HAS_GPU:
        assert setup_device(verbose=False).is_gpu
    else:
        with pytest.raises(RuntimeError, match="Restart the kernel"):
            setup_device(verbose=False)


def test_gpu_unavailable_reason_and_driver_on_this_machine(monkeypatch):
    import torch

    from nbhelpers.device import gpu_unavailable_reason, nvidia_driver_version

    if torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert "TRITON_INTERPRET=1" in gpu_unavailable_reason()
        monkeypatch.delenv("TRITON_INTERPRET")
        assert gpu_unavailable_reason() is None
        assert nvidia_driver_version()  # a GPU machine has a driver to report
    else:
        assert gpu_unavailable_reason() == "PyTorch sees no CUDA GPU (torch.cuda.is_available() is False)"
        monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi, no CUDA: nothing to report
        assert nvidia_driver_version() is None


def test_start_gpu_script_says_why_or_switches_to_compiled_mode(monkeypatch, capsys):
    from nbhelpers import device

    calls = []
    monkeypatch.setattr(device, "setup_device", lambda **kw: calls.append(kw))
    monkeypatch.setattr(device, "gpu_unavailable_reason", lambda: "PyTorch is not installed")
    assert device.start_gpu_script("gpu_x.py", "Try a GPU machine.") is False
    assert capsys.readouterr().err == "gpu_x.py needs an NVIDIA GPU: PyTorch is not installed.\nTry a GPU machine.\n"
    assert calls == []  # nothing switched on a machine that cannot run it
    monkeypatch.setattr(device, "gpu_unavailable_reason", lambda: None)
    assert device.start_gpu_script("gpu_x.py") is True
    assert calls == [{"force": "cuda", "verbose": False}] and capsys.readouterr().err == ""


def test_gpu_run_meta_records_the_run(monkeypatch):
    import torch

    from nbhelpers import device

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(device, "nvidia_driver_version", lambda: "570.1")
    meta = device.gpu_run_meta("benchmarks/x.py", ["--quick", "a b"])
    assert meta["gpu"] == "NVIDIA H200" and meta["capability"] == "9.0" and meta["driver"] == "570.1"
    assert meta["script"] == "benchmarks/x.py" and meta["command"].endswith("benchmarks/x.py --quick 'a b'")
    assert meta["torch"] == torch.__version__ and meta["date"].endswith("+00:00")
    assert meta["model_gpu"] == "H200"
    # the predictions are for the GPU the run is on where the model has its numbers, else an H200's
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    assert device.gpu_run_meta("benchmarks/x.py", [])["model_gpu"] == "H100 SXM"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA A100-SXM4-80GB")
    assert device.gpu_run_meta("benchmarks/x.py", [])["model_gpu"] == "H200"
    import benchmarks.gpu_grouped_gemm as bench

    assert set(bench.META_KEYS) <= set(meta)


def test_cpu_model_and_features_from_proc_cpuinfo(tmp_path, monkeypatch):
    import nbhelpers.device as device

    fake = tmp_path / "cpuinfo"
    fake.write_text(
        "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu avx2 avx512_bf16\n\n"
        "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n"
    )
    real = device._cpuinfo
    monkeypatch.setattr(device, "_cpuinfo", lambda path=None: real(str(fake)))
    assert device.cpu_model() == "Test CPU 9000"  # the first processor's
    assert device.cpu_has("avx512_bf16") is True and device.cpu_has("amx_bf16") is False
    assert device.cpu_has("avx") is False  # whole names, not prefixes
    monkeypatch.setattr(device, "_cpuinfo", lambda path=None: real(str(tmp_path / "absent")))
    assert device.cpu_has("avx2") is None and isinstance(device.cpu_model(), str) and device.cpu_model()


def test_cpu_cache_bytes_and_huge_pages_from_sysfs(tmp_path):
    import nbhelpers.device as device

    root = tmp_path / "cache"
    for i, (level, kind, size) in enumerate(
        [(1, "Data", "32K"), (1, "Instruction", "64K"), (2, "Unified", "1024K"), (3, "Unified", "32M")]
    ):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert device.cpu_cache_bytes(1, str(root)) == 32 * 1024  # the data cache, not the instruction cache
    assert device.cpu_cache_bytes(2, str(root)) == 2**20
    assert device.cpu_cache_bytes(3, str(root)) == 32 * 2**20
    assert device.cpu_cache_bytes(4, str(root)) is None
    assert device.cpu_cache_bytes(3, str(tmp_path / "absent")) is None
    thp = tmp_path / "enabled"
    thp.write_text("always [madvise] never\n")
    assert device.transparent_huge_pages(str(thp)) == "madvise"
    assert device.transparent_huge_pages(str(tmp_path / "absent")) is None


def test_numpy_madvise_hugepage_reads_numpys_switch(monkeypatch):
    import numpy as np

    from nbhelpers import device

    got = device.numpy_madvise_hugepage()
    assert got in (True, False, None)
    if got is not None:  # numpy 2.x: follows its setter
        old = np._core.multiarray._set_madvise_hugepage(False)
        try:
            assert device.numpy_madvise_hugepage() is False
            np._core.multiarray._set_madvise_hugepage(True)
            assert device.numpy_madvise_hugepage() is True
        finally:
            np._core.multiarray._set_madvise_hugepage(old)
    monkeypatch.delattr(np, "_core")
    assert device.numpy_madvise_hugepage() is None
