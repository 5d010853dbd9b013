import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from nbhelpers import plots  # noqa: E402
from nbhelpers.device import NoGPUError, setup_device  # noqa: E402
from nbhelpers.formats import FORMATS  # noqa: E402
from nbhelpers.tables import fmt_num, text_table  # noqa: E402

try:
    import torch

    HAS_GPU = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    HAS_GPU = False


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("NBHELPERS_DEVICE", "NBHELPERS_REQUIRE_GPU", "TRITON_INTERPRET"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_forced_cpu_sets_the_interpreter(clean_env, capsys):
    clean_env.setenv("NBHELPERS_DEVICE", "cpu")
    info = setup_device()
    assert info.device == "cpu" and info.triton_interpreter
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert "device: cpu" in capsys.readouterr().out


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


def test_plot_helpers_return_axes_and_draw():
    for fn, args in [
        (plots.plot_bit_layouts, (FORMATS.values(),)),
        (plots.plot_relative_spacing, (["bf16", "e4m3fn"],)),
        (plots.plot_value_line, (["e2m1fn"],)),
    ]:
        ax = fn(*args)
        assert ax.figure is not None
        plt.close(ax.figure)
    fig, ax = plt.subplots()
    assert plots.plot_rounding_modes("e2m1fn", 0, 6, rng=np.random.default_rng(0), ax=ax, draws=5) is ax
    assert len(ax.lines) >= 5
    plt.close(fig)


def test_every_format_has_its_own_colour():
    colours = [plots.format_color(n) for n in FORMATS]
    assert len(set(colours)) == len(colours)


def test_tables():
    assert fmt_num(2.0**-20).startswith("2^-20")
    assert fmt_num(None) == "-" and fmt_num(True) == "yes" and fmt_num(3) == "3"
    t = text_table([("a", 1.5), ("bb", float("inf"))], ["name", "value"])
    lines = t.splitlines()
    assert len(lines) == 4 and len(set(len(line) for line in lines)) == 1


def test_kernels_imported_for_gpu_before_setup_is_refused(clean_env):
    import sys
    import types

    fake = types.ModuleType("nbhelpers.kernels")
    fake.INTERPRETED = False  # as if imported without TRITON_INTERPRET on a CPU machine
    clean_env.setitem(sys.modules, "nbhelpers.kernels", fake)
    if HAS_GPU:
        assert setup_device(verbose=False).is_gpu
    else:
        with pytest.raises(RuntimeError, match="Restart the kernel"):
            setup_device(verbose=False)
