"""Tests of nbhelpers.kernels.pressure, chapter 09's register-pressure kernel: the column sums and
EXTRA moving averages against the float64 reference, on shapes that divide no block (the masks)
and for several EXTRA (one kernel source, one compiled kernel per EXTRA); the launcher's errors;
and, compiled for sm_90 without a GPU (nbhelpers.compile_check, Triton's NVIDIA backend and its
ptxas), that the registers grow with EXTRA and that past the 255 a thread may have the compiler
spills.

``setup_device()`` runs before the kernel module is imported (the interpreter on a CPU).
"""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)

import math

import pytest
import torch

from nbhelpers.kernels.pressure import BLOCK, KERNEL, NUM_WARPS, decays, ema, ema_ref, launch_args

U32 = 2.0**-24


def bound(x: torch.Tensor, extra: int) -> torch.Tensor:
    """Per output: the sum's gamma_n(u) * sum |x|; each average, a convex combination, rounds
    three times per row (two products, one sum) on values at most max |x|, and earlier errors
    shrink by d < 1 each row: 3 n u max |x| bounds it (loosely, whatever d)."""
    n = x.shape[0]
    xs = x.double().abs().cpu()
    s = (n * U32 / (1 - n * U32)) * xs.sum(0, keepdim=True)
    e = 3 * n * U32 * xs.max(0, keepdim=True).values.expand(extra, -1)
    return torch.cat([s, e]) + 1e-300


@pytest.mark.parametrize("extra", [0, 1, 2, 5])
@pytest.mark.parametrize("shape", [(1, 1), (7, 513), (40, 100), (3, 1100)])
def test_ema_matches_the_reference(extra, shape):
    gen = torch.Generator().manual_seed(extra * 100 + shape[1])
    x = torch.randn(shape, generator=gen).to(INFO.device)
    got = ema(x, extra).double().cpu()
    ref = ema_ref(x, extra)
    assert got.shape == (extra + 1, shape[1])
    assert bool(((got - ref).abs() <= bound(x, extra)).all())


def test_ema_of_a_constant_is_the_constant_and_averages_differ():
    x = torch.full((200, 9), 3.0, device=INFO.device)
    out = ema(x, 3).cpu()
    assert torch.equal(out[0], torch.full((9,), 600.0))  # sums of 3.0: exact in float32
    # after 200 rows of 3.0 from 0 each average is 3 (1 - d^200): d = 1/2, 2/3 reach it, 3/4 nearly
    for j, d in enumerate(decays(3)):
        assert math.isclose(out[j + 1, 0].item(), 3 * (1 - d**200), rel_tol=1e-5)
    x = torch.arange(50, dtype=torch.float32, device=INFO.device).reshape(50, 1)
    out = ema(x, 3).cpu()
    assert len({round(v, 4) for v in out[1:, 0].tolist()}) == 3  # three different decays, three values


def test_decays_and_launch_args():
    assert decays(3) == [0.5, 1 - 1 / 3, 0.75]
    assert launch_args(16, 32) == ("*fp32", "*fp32", 16, 32, 32, 32)
    assert BLOCK % (32 * NUM_WARPS) == 0  # a whole number of registers per thread per average


@pytest.mark.parametrize(
    "x,extra,match",
    [
        ("x", 1, "2-D floating-point"),
        (torch.zeros(3), 1, "2-D floating-point"),
        (torch.zeros((2, 2), dtype=torch.int32), 1, "2-D floating-point"),
        (
            torch.zeros((2, 2)),
            -1,
            r"extra must be a non-negative int \(moving averages besides the column sums\), got -1",
        ),
        (torch.zeros((2, 2)), 1.0, "extra must be a non-negative int"),
        (torch.zeros((2, 2)), True, "extra must be a non-negative int"),
    ],
)
def test_bad_input(x, extra, match):
    with pytest.raises(ValueError, match=match):
        ema(x, extra)
    with pytest.raises(ValueError, match=match):
        ema_ref(x, extra)


def test_compiled_for_sm_90_registers_grow_then_spill():
    """Compiled with Triton's NVIDIA backend and the ptxas it bundles (no GPU needed): each
    average is BLOCK / (32 num_warps) = 4 registers per thread, so 16 averages need at least 64
    registers (ptxas may use more than a kernel needs where that costs no occupancy, so only the
    lower bound is a law), and 64 (256 registers of averages alone) cannot fit in 255: spills."""
    pytest.importorskip("triton.backends.nvidia.compiler")
    from nbhelpers.compile_check import Case, check

    extras = [0, 16, 64]
    rows = check(
        [
            Case(KERNEL, f"EXTRA={k}", launch_args(), {"BLOCK": BLOCK, "EXTRA": k}, num_warps=NUM_WARPS, default=False)
            for k in extras
        ]
    )
    assert [r["status"] for r in rows] == ["ok"] * 3, rows
    r0, r16, r64 = rows
    per_value = BLOCK // (32 * NUM_WARPS)
    assert r16["registers"] >= 16 * per_value and r16["registers"] > r0["registers"]
    assert r0["spill_stores"] == r16["spill_stores"] == 0
    assert r64["registers"] == 255 and r64["spill_stores"] > 0 and r64["spill_loads"] > 0
    assert all(r["shared"] == 0 for r in rows)  # no shared memory: registers alone set the occupancy
