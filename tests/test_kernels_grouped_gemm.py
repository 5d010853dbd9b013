"""Tests of nbhelpers.kernels.grouped_gemm, chapter 10's grouped GEMM kernel: one launch for every
expert, against a float64 reference computed here expert by expert, within the fp32-accumulation
bound of gemm_bounds.error_bound (bit-exact where the sums are exact); the same bits for any
program order (GROUP_M, and the programs run reversed or shuffled); the on-device schedule (tile
offsets, the grid bound, the program order and its Python mirror); no host synchronisation per
call; safety for any device offsets; deliberately wrong kernels that the same comparisons must
catch; bad input; and (GPU only) the tuned path against torch.nn.functional.grouped_mm, the sync
debug mode and a CUDA graph.

As in the other kernel tests, ``setup_device()`` runs first: without a GPU it sets
TRITON_INTERPRET=1 before the kernel module is imported, and the kernels run in Triton's
interpreter on the CPU. The interpreter is slow, so the shapes are small (K, N below 100).
"""

import os
import sys

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import nbhelpers.kernels.grouped_gemm as gg
from nbhelpers import kernels, moe
from nbhelpers.gemm_bounds import error_bound
from nbhelpers.kernels.grouped_gemm import (
    GPU_CONFIGS,
    INTERPRETER_CONFIG,
    expert_tile_of,
    grouped_matmul,
    k_major,
    max_tiles,
    program_tiles,
    scaled_grouped_matmul,
    tile_offsets,
)
from nbhelpers.moe import grouped_matmul_ref, tile_schedule

DEV = INFO.device
INTERPRETED = kernels.INTERPRETED
TC = not INTERPRETED  # bf16/fp16 on a GPU go through the tensor cores: the truncating bound


def case(counts, K, N, seed=0, dtype=torch.float32, ints=False):
    """x_perm (sum(counts), K), w (E, K, N), offsets (E + 1,) for experts with these row counts."""
    counts = np.asarray(counts, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    g = torch.Generator().manual_seed(seed)
    rows, E = int(offsets[-1]), len(counts)
    if ints:  # small integers: every partial sum is an integer below 2**24, so fp32 is exact
        x = torch.randint(-8, 9, (rows, K), generator=g).double()
        w = torch.randint(-8, 9, (E, K, N), generator=g).double()
    else:
        x = torch.randn((rows, K), generator=g, dtype=torch.float64)
        w = torch.randn((E, K, N), generator=g, dtype=torch.float64)
    return x.to(DEV, dtype), w.to(DEV, dtype), offsets


def on_device(offsets, dtype=torch.int64):
    """The offsets as a tensor on the kernels' device: the launcher's no-sync path."""
    return torch.as_tensor(np.asarray(offsets), dtype=dtype, device=DEV)


def bound(x, w, offsets, out_dtype=torch.float32):
    """Elementwise bound on |C - ref|: gemm_bounds.error_bound of each expert's own product
    ((gamma_K(2**-24) + gamma_K(2**-53)) * |x_e| @ |w_e|, plus one rounding to out_dtype),
    stacked in x_perm's row order. tensor_core on a GPU for 2-byte inputs (truncating adders)."""
    tc = TC and x.dtype != torch.float32
    out = torch.zeros((x.shape[0], w.shape[2]), dtype=torch.float64, device=x.device)
    for e in range(w.shape[0]):
        s, t = int(offsets[e]), int(offsets[e + 1])
        if t > s:
            out[s:t] = error_bound(x[s:t], w[e], tensor_core=tc, out_dtype=out_dtype)
    return out


def within_bound(C, x, w, offsets, out_dtype=torch.float32):
    err = (C.double() - grouped_matmul_ref(x, w, offsets)).abs()
    return bool((err <= bound(x, w, offsets, out_dtype)).all())


def reference_by_hand(x, w, offsets):
    """float64, one expert at a time, written out here (a second reference, not moe's)."""
    parts = [x[int(offsets[e]) : int(offsets[e + 1])].double() @ w[e].double() for e in range(w.shape[0])]
    return torch.cat(parts) if parts else torch.zeros((0, w.shape[2]), dtype=torch.float64)


# ------------------------------------------------------------------ running the programs in another order


@pytest.fixture
def program_order(monkeypatch):
    """``program_order(perm)``: from then on (in this test), Triton's interpreter runs the programs
    of a 1-D launch of n programs in the order perm(n) (a permutation of range(n)) instead of grid
    order. Triton 3.7.1's interpreter runs a launch as ``for x in range(grid[0]): ...
    set_grid_idx(x, y, z); fn(...)``; this wraps set_grid_idx. Interpreter only (a GPU has no order)."""
    from triton.runtime import interpreter as ti

    builder = ti.interpreter_builder
    original = builder.set_grid_idx

    def use(perm):
        def set_grid_idx(x, y, z):
            n = builder.grid_dim[0]
            original(int(perm(n)[x]), y, z)

        monkeypatch.setattr(builder, "set_grid_idx", set_grid_idx)

    return use


def reversed_order(n):
    return np.arange(n)[::-1]


def shuffled_order(n):
    return np.random.default_rng(n).permutation(n)


@triton.jit
def _execution_rank_kernel(counter_ptr, out_ptr):
    # which place in the run each program had: 0 for the first to run
    tl.store(out_ptr + tl.program_id(0), tl.atomic_add(counter_ptr, 1))


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter's sequential program order; a GPU has none")
def test_the_program_order_fixture_really_reorders_the_programs(program_order):
    def ranks():
        counter = torch.zeros(1, dtype=torch.int32, device=DEV)
        out = torch.full((12,), -1, dtype=torch.int32, device=DEV)
        _execution_rank_kernel[(12,)](counter, out)
        return out.cpu().numpy()

    assert ranks().tolist() == list(range(12))  # grid order, as Triton 3.7.1's interpreter runs it
    program_order(reversed_order)
    assert ranks().tolist() == list(range(11, -1, -1))
    program_order(shuffled_order)
    assert np.array_equal(ranks()[shuffled_order(12)], np.arange(12))


# ------------------------------------------------------------------ mode


def test_interpreted_flag_follows_the_device():
    assert INTERPRETED == (not INFO.is_gpu)
    assert INTERPRETED == (os.environ.get("TRITON_INTERPRET") == "1")


# ------------------------------------------------------------------ the kernel against float64

BM = 16  # BLOCK_M of the explicit blocks below: the counts are chosen around it
COUNTS = {
    "empty first, middle, last": [0, 5, 0, 21, 0],
    "one-token experts": [1, 1, 0, 1, 2],
    "exactly BLOCK_M and BLOCK_M + 1": [BM, BM + 1, BM - 1],
    "all rows on one expert": [0, 0, 3 * BM + 3, 0],
    "uneven": [7, 40, 0, 1, 17, 33],
}


@pytest.mark.parametrize("name", list(COUNTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_matmul_within_the_fp32_bound(name, dtype):
    counts = COUNTS[name]
    x, w, offsets = case(counts, K=37, N=45, seed=len(name), dtype=dtype)  # K, N: no block divides them
    C = grouped_matmul(x, w, offsets, block=(BM, 16, 16))
    assert C.shape == (sum(counts), 45) and C.dtype == torch.float32 and C.device == x.device
    assert torch.equal(grouped_matmul_ref(x, w, offsets), reference_by_hand(x, w, offsets).to(DEV))
    assert within_bound(C, x, w, offsets)
    # the same launch from offsets already on the device: the same bits
    assert torch.equal(grouped_matmul(x, w, on_device(offsets), block=(BM, 16, 16)), C)


@pytest.mark.parametrize("name", ["empty first, middle, last", "exactly BLOCK_M and BLOCK_M + 1", "uneven"])
@pytest.mark.parametrize("group_m", [1, 8])
def test_small_integers_are_exact_bit_for_bit(name, group_m):
    # every partial sum is an integer below 2**24: any order of fp32 additions is exact, so the
    # kernel must equal the float64 product exactly; a row from the wrong expert, a wrong weight
    # matrix or a missing mask would not
    x, w, offsets = case(COUNTS[name], K=40, N=24, seed=1, ints=True)
    C = grouped_matmul(x, w, offsets, block=(BM, 16, 16), group_m=group_m)
    assert torch.equal(C.double(), grouped_matmul_ref(x, w, offsets))
    assert torch.equal(grouped_matmul(x, w, on_device(offsets, torch.int32), block=(BM, 16, 16), group_m=group_m), C)


def test_fixed_config_and_fp16_inputs():
    x, w, offsets = case([3, 0, 50, 33, 1], K=70, N=33, seed=2, dtype=torch.float16)
    C = grouped_matmul(x, w, offsets, block=None)  # INTERPRETER_CONFIG in the interpreter
    assert within_bound(C, x, w, offsets)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_epilogue_cast_rounds_the_fp32_result_once(out_dtype):
    x, w, offsets = case([9, 0, 20, 1], K=33, N=20, seed=3, dtype=torch.bfloat16)
    C = grouped_matmul(x, w, offsets, block=(BM, 16, 16), out_dtype=out_dtype)
    assert C.dtype == out_dtype and C.shape == (30, 20)
    assert within_bound(C, x, w, offsets, out_dtype=out_dtype)
    # bit-exact: one nearest-even rounding of the kernel's own fp32 result (torch's cast is the oracle)
    assert torch.equal(C, grouped_matmul(x, w, offsets, block=(BM, 16, 16)).to(out_dtype))


def test_bf16_inputs_give_the_same_bits_as_fp32_tensors_holding_them():
    # bf16 values are fp32 values and their products are exact in fp32; in the interpreter the
    # launcher upcasts, on a GPU the compiled fp32 path would use different hardware, so only here
    x, w, offsets = case([5, 18, 0, 2], K=48, N=16, seed=4, dtype=torch.bfloat16)
    if INTERPRETED:
        assert torch.equal(
            grouped_matmul(x, w, offsets, block=(BM, 16, 16)),
            grouped_matmul(x.float(), w.float(), offsets, block=(BM, 16, 16)),
        )


def test_offsets_as_list_array_and_tensors():
    x, w, offsets = case([4, 0, 19], K=20, N=18, seed=5)
    C = grouped_matmul(x, w, offsets, block=(BM, 16, 16))
    assert torch.equal(grouped_matmul(x, w, offsets.tolist(), block=(BM, 16, 16)), C)
    for dtype in (torch.int32, torch.int64):
        assert torch.equal(grouped_matmul(x, w, on_device(offsets, dtype), block=(BM, 16, 16)), C)
        assert torch.equal(grouped_matmul(x, w, torch.as_tensor(offsets, dtype=dtype), block=(BM, 16, 16)), C)
    strided = torch.stack([on_device(offsets), on_device(offsets)], dim=1)[:, 0]  # not contiguous
    assert not strided.is_contiguous()
    assert torch.equal(grouped_matmul(x, w, strided, block=(BM, 16, 16)), C)


@pytest.mark.parametrize("group_m", [1, 2, 3, 100])
def test_group_m_does_not_change_the_bits(group_m):
    # random floats, not integers: a different summation would show in the last bits
    x, w, offsets = case([5, 0, 70, 33, 1, 40], K=24, N=50, seed=6)  # 5 M-tiles of one expert, 4 column blocks
    ref = grouped_matmul(x, w, offsets, block=(BM, 16, 16), group_m=8)
    assert torch.equal(grouped_matmul(x, w, offsets, block=(BM, 16, 16), group_m=group_m), ref)


@pytest.mark.skipif(not INTERPRETED, reason="reorders the interpreter's programs")
@pytest.mark.parametrize("order", [reversed_order, shuffled_order])
def test_program_order_does_not_change_the_bits(order, program_order):
    # no program reads or writes another tile's rows, so any order of the programs gives the same result
    x, w, offsets = case([5, 0, 20, 33, 1], K=24, N=20, seed=6)
    forward = grouped_matmul(x, w, offsets, block=(BM, 16, 16), group_m=2)
    program_order(order)
    assert torch.equal(grouped_matmul(x, w, offsets, block=(BM, 16, 16), group_m=2), forward)
    assert within_bound(forward, x, w, offsets)


def test_strided_inputs_equal_contiguous_ones():
    x, w, offsets = case([6, 0, 13], K=24, N=20, seed=7)
    xt = x.t().contiguous().t()
    wt = w.transpose(1, 2).contiguous().transpose(1, 2)  # (E, K, N) view of an (E, N, K) weight
    assert xt.stride() != x.stride() and wt.stride() != w.stride()
    assert torch.equal(
        grouped_matmul(xt, wt, offsets, block=(BM, 16, 16)), grouped_matmul(x, w, offsets, block=(BM, 16, 16))
    )


def test_no_rows_no_columns_no_k():
    x, w, offsets = case([0, 0, 0], K=8, N=5)
    C = grouped_matmul(x, w, offsets)
    assert C.shape == (0, 5) and C.dtype == torch.float32
    assert grouped_matmul(x, w, offsets, out_dtype=torch.bfloat16).dtype == torch.bfloat16
    assert grouped_matmul(x, w, on_device(offsets)).shape == (0, 5)
    x, w, offsets = case([2, 0, 3], K=0, N=4)
    assert torch.equal(grouped_matmul(x, w, offsets), torch.zeros((5, 4), device=DEV))
    x, w, offsets = case([2, 3], K=4, N=0)
    assert grouped_matmul(x, w, offsets).shape == (5, 0)


# ------------------------------------------------------------------ the schedule on the device


def test_tile_offsets_by_hand():
    # counts 5, 0, 35 in tiles of 16: 1, 0, 3 tiles
    t = tile_offsets(on_device([0, 5, 5, 40]), 40, BM)
    assert t.dtype == torch.int32 and t.device == torch.device(DEV) and t.cpu().tolist() == [0, 1, 1, 4]
    assert tile_offsets(on_device([0, 0, 0], torch.int32), 0, BM).cpu().tolist() == [0, 0, 0]
    assert tile_offsets(on_device([0, 16, 17, 17]), 17, BM).cpu().tolist() == [0, 1, 2, 2]


@pytest.mark.parametrize("seed", range(5))
def test_tile_offsets_count_the_tiles_of_tile_schedule(seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 50, size=int(rng.integers(1, 30)))
    counts[rng.random(counts.size) < 0.3] = 0  # empty experts too
    off = np.concatenate([[0], np.cumsum(counts)])
    for bm in (1, 16, 64):
        s = tile_schedule(off, bm)
        expected = np.concatenate([[0], np.cumsum(np.bincount(s.expert, minlength=len(counts)))])
        assert np.array_equal(tile_offsets(on_device(off), int(off[-1]), bm).cpu().numpy(), expected)
        assert s.num_tiles <= max_tiles(int(off[-1]), len(counts), bm) <= -(-int(off[-1]) // bm) + len(counts)


def test_tile_offsets_of_bad_offsets_still_start_at_zero_and_never_decrease():
    # what the kernel's lookup relies on to stay inside its operands, whatever the offsets hold
    for bad in ([5, -3, 100, 2, 40], [40, 0, 0, 0, 0], [-(2**40), 2**40, -7, 3, 1], [0, 30, 10, 20, 40]):
        t = tile_offsets(on_device(bad), 40, BM).cpu().numpy()
        assert t[0] == 0 and (np.diff(t) >= 0).all() and t[-1] <= max_tiles(40, 4, BM), (bad, t)


def test_max_tiles_is_the_most_any_routing_needs():
    # brute force over every way to split R rows over E experts
    from itertools import product

    for R, E, bm in [(0, 3, 4), (1, 3, 4), (5, 3, 4), (9, 3, 4), (12, 2, 4), (7, 4, 1), (10, 3, 16)]:
        worst = max(sum(-(-n // bm) for n in split) for split in product(range(R + 1), repeat=E) if sum(split) == R)
        assert max_tiles(R, E, bm) == worst, (R, E, bm)


def test_the_grid_does_not_depend_on_the_routing(monkeypatch):
    # what lets a CUDA graph replay one capture for any routing of the same rows
    grids = []
    real = gg.grouped_matmul_kernel

    class Spy:
        def __getitem__(self, grid):
            grids.append(grid)
            return real[grid]

    monkeypatch.setattr(gg, "grouped_matmul_kernel", Spy())
    for counts in ([10, 10, 10, 10], [40, 0, 0, 0], [1, 1, 1, 37]):
        x, w, offsets = case(counts, K=8, N=40, ints=True)
        C = grouped_matmul(x, w, on_device(offsets), block=(BM, 16, 16))
        assert torch.equal(C.double(), grouped_matmul_ref(x, w, offsets))
    assert grids == [(max_tiles(40, 4, BM) * 3,)] * 3


def test_program_tiles_refuses_a_bad_group_m():
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match=rf"^group_m must be a positive int \(tile rows per group .*got {bad!r}$"):
            program_tiles(np.array([0, 4]), 8, 16, 16, bad)


@pytest.mark.parametrize(
    "counts,bm,bn,g",
    [([5, 0, 70, 33, 1], 16, 16, 2), ([0, 3, 0], 16, 32, 8), ([100], 16, 16, 3), ([17, 16, 15, 0, 64], 16, 16, 1)],
)
def test_program_tiles_covers_every_tile_once_in_grouped_order(counts, bm, bn, g):
    N = 40
    off = np.concatenate([[0], np.cumsum(counts)])
    progs = program_tiles(off, N, bm, bn, g)
    s = tile_schedule(off, bm)
    n_col = -(-N // bn)
    assert sorted(map(tuple, progs.tolist())) == sorted(
        (int(e), int(r0), int(r1), j) for e, r0, r1 in zip(s.expert, s.row_start, s.row_end) for j in range(n_col)
    )
    assert (np.diff(progs[:, 0]) >= 0).all()  # expert by expert
    for e in np.unique(progs[:, 0]):
        mine = progs[progs[:, 0] == e]
        tiles = -(-int(off[e + 1] - off[e]) // bm)
        if g == 1:  # row-major inside the expert: one tile sweeps every column block
            assert mine[:n_col, 1].tolist() == [int(off[e])] * n_col
            assert mine[:n_col, 3].tolist() == list(range(n_col))
        elif tiles >= g:  # a full group: down g tiles, then one column block right
            assert mine[: g + 1, 3].tolist() == [0] * g + [1]
            assert mine[:g, 1].tolist() == [int(off[e]) + i * bm for i in range(g)]


@triton.jit
def _order_probe_kernel(
    off_ptr,
    tile_off_ptr,
    out_ptr,
    num_rows,
    num_experts,
    N,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_E: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # the kernel's own lookup, its answers stored: (expert, row_start, row_end, pid_n), -1 when idle
    pid = tl.program_id(0)
    live = pid < tl.load(tile_off_ptr + num_experts) * tl.cdiv(N, BLOCK_N)
    expert, row_start, row_end, pid_n = expert_tile_of(
        pid, off_ptr, tile_off_ptr, num_rows, num_experts, N, BLOCK_M, BLOCK_N, BLOCK_E, GROUP_M
    )
    tl.store(out_ptr + 4 * pid, tl.where(live, expert, -1))
    tl.store(out_ptr + 4 * pid + 1, tl.where(live, row_start, -1))
    tl.store(out_ptr + 4 * pid + 2, tl.where(live, row_end, -1))
    tl.store(out_ptr + 4 * pid + 3, tl.where(live, pid_n.to(tl.int64), -1))


@pytest.mark.parametrize("counts,g", [([5, 0, 70, 33, 1], 2), ([0, 0, 40], 8), ([1], 1), ([3, 0, 0, 0, 0, 0, 0, 9], 3)])
def test_the_kernels_program_order_is_program_tiles(counts, g):
    N, bm, bn = 40, 16, 16
    off = np.concatenate([[0], np.cumsum(counts)])
    rows, E = int(off[-1]), len(counts)
    P = max_tiles(rows, E, bm) * -(-N // bn)
    out = torch.full((4 * P,), -7, dtype=torch.int64, device=DEV)
    off_d = on_device(off)
    _order_probe_kernel[(P,)](
        off_d,
        tile_offsets(off_d, rows, bm),
        out,
        rows,
        E,
        N,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_E=triton.next_power_of_2(E),
        GROUP_M=g,
    )
    got = out.view(P, 4).cpu().numpy()
    progs = program_tiles(off, N, bm, bn, g)
    assert np.array_equal(got[: len(progs)], progs)
    assert (got[len(progs) :] == -1).all()  # the programs past the last tile are idle


# ------------------------------------------------------------------ no host synchronisation per call


class HostRead(AssertionError):
    """A launcher asked for a tensor's values on the host (a device-to-host copy, a sync on a GPU)."""


# every way Python code can turn a tensor into host values, or make a host tensor for the device
HOST_READS = [
    (torch.Tensor, name)
    for name in ("item", "tolist", "cpu", "numpy", "__array__", "__int__", "__index__", "__float__", "__bool__")
] + [(torch, name) for name in ("from_numpy", "as_tensor", "tensor")]


@pytest.fixture
def no_host_reads(monkeypatch):
    """While active, the calls in HOST_READS raise HostRead when nbhelpers code makes them (Triton's
    interpreter, which copies every argument to numpy to run a kernel, may still make them). This
    sees what the launcher does in Python; a synchronising torch operation would not be seen here,
    which is what test_no_sync_and_cuda_graph_capture checks on a GPU."""

    def guard(owner, name):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("nbhelpers"):
                raise HostRead(f"{caller} called {getattr(owner, '__name__', owner)}.{name}")
            return original(*args, **kwargs)

        return wrapper

    def arm():
        for owner, name in HOST_READS:
            monkeypatch.setattr(owner, name, guard(owner, name))

    return arm


def test_device_offsets_need_no_host_read(no_host_reads):
    x, w, offsets = case([5, 0, 20, 33, 1], K=24, N=20, seed=12, ints=True)
    off = on_device(offsets, torch.int32)
    ref = grouped_matmul_ref(x, w, offsets)
    qx, qw, sx, sw, _ = fp8_case([5, 0, 20, 33, 1], K=24, N=20, seed=12)
    fp8_expected = scaled_grouped_matmul(qx, qw, sx, sw, offsets, block=(16, 16, 32))
    no_host_reads()
    for g in (1, 8):
        C = grouped_matmul(x, w, off, block=(BM, 16, 16), group_m=g)
        assert torch.equal(C.double(), ref)
    C = grouped_matmul(x.bfloat16(), w.bfloat16(), off, block=(BM, 16, 16), out_dtype=torch.bfloat16)
    assert torch.equal(C, ref.to(torch.bfloat16))  # exact integers in fp32, rounded once to bf16
    assert torch.equal(scaled_grouped_matmul(qx, qw, sx, sw, off, block=(16, 16, 32)), fp8_expected)


def test_the_host_read_guard_catches_what_a_validating_launcher_does(no_host_reads):
    # the guard is not vacuous: validating offsets on the host (what the launcher does for host
    # offsets, and what it did on every call before the schedule moved to the device) and the copy
    # of host offsets to the device are both caught
    x, w, offsets = case([5, 0, 20], K=8, N=8)
    no_host_reads()
    with pytest.raises(HostRead, match="cpu"):
        moe.check_offsets(on_device(offsets), 25)
    with pytest.raises(HostRead, match="as_tensor"):
        grouped_matmul(x, w, offsets.tolist(), block=(BM, 16, 16))


# ------------------------------------------------------------------ any device offsets: inside the operands

GUARD = 6  # rows of NaN before and after x_perm, one NaN expert on each side of w, sentinels around C
SENTINEL = 12345.0


def guarded(rows, E, K, N, seed=13):
    """x (rows, K), w (E, K, N), c (rows, N) as views into buffers with guard zones: NaN around x and
    w, SENTINEL around (and in) c. A program that reads outside x or w stores a NaN; one that writes
    outside c changes a sentinel of the guard zone."""
    g = torch.Generator().manual_seed(seed)
    bx = torch.full((rows + 2 * GUARD, K), float("nan"))
    bw = torch.full((E + 2, K, N), float("nan"))
    bx[GUARD : GUARD + rows] = torch.randint(-4, 5, (rows, K), generator=g).float()
    bw[1 : 1 + E] = torch.randint(-4, 5, (E, K, N), generator=g).float()
    bc = torch.full((rows + 2 * GUARD, N), SENTINEL)
    bx, bw, bc = bx.to(DEV), bw.to(DEV), bc.to(DEV)
    return bx, bw, bc, bx[GUARD : GUARD + rows], bw[1 : 1 + E], bc[GUARD : GUARD + rows]


def stayed_inside(bc, c, rows) -> bool:
    guards = torch.cat([bc[:GUARD], bc[GUARD + rows :]])
    return bool((guards == SENTINEL).all()) and not bool(c.isnan().any())


BAD_OFFSETS = {  # rows = 30, E = 4
    "negative": [0, -5, 10, 20, 30],
    "past the end": [0, 10, 36, 33, 30],
    "decreasing": [0, 25, 3, 3, 30],
    "not starting at 0": [4, 4, 10, 20, 30],
    "not ending at rows": [0, 10, 20, 25, 27],
}
EXTREME_OFFSETS = [[-(2**40), 2**40, -1, 2**35, 30], [30, 0, 0, 0, 0], [0, 0, 0, 0, 0], [2**31 - 1] * 5]


@pytest.mark.parametrize("name", list(BAD_OFFSETS))
def test_bad_device_offsets_never_leave_the_operands(name):
    rows, E, K, N = 30, 4, 24, 20
    bx, bw, bc, x, w, c = guarded(rows, E, K, N)
    for bad in [BAD_OFFSETS[name]] + EXTREME_OFFSETS:
        bc.fill_(SENTINEL)
        gg._launch(x, w, c, on_device(bad), {"BLOCK_M": BM, "BLOCK_N": 16, "BLOCK_K": 16}, "ieee", 2)
        assert stayed_inside(bc, c, rows), bad
    # the launcher takes them without a word (their values are the caller's promise) and returns
    assert grouped_matmul(x, w, on_device(BAD_OFFSETS[name]), block=(BM, 16, 16)).shape == (rows, N)
    # valid offsets in the same buffers: every row written, exactly
    ok = [0, 5, 5, 17, 30]
    bc.fill_(SENTINEL)
    gg._launch(x, w, c, on_device(ok), {"BLOCK_M": BM, "BLOCK_N": 16, "BLOCK_K": 16}, "ieee", 2)
    assert stayed_inside(bc, c, rows) and torch.equal(c.double(), grouped_matmul_ref(x, w, ok))


# ------------------------------------------------------------------ wrong kernels must fail
# Each is grouped_matmul_kernel with one plausible mistake, launched exactly as grouped_matmul
# launches the right one (gg._launch, fp32 inputs); the K loop and the store are shared here.


@triton.jit
def _tile_body(
    x_ptr,
    w_ptr,
    c_ptr,
    expert,
    row_start,
    row_lo,
    row_end,
    pid_n,
    live,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wk,
    stride_wn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_m = row_start + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = (offs_m >= row_lo) & (offs_m < row_end) & live
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.where(live, K, 0), BLOCK_K):
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k[None, :]) * stride_xk,
            mask=row_ok[:, None] & (k0 + offs_k[None, :] < K),
            other=0.0,
        )
        w = tl.load(
            w_ptr + expert * stride_we + (k0 + offs_k[:, None]) * stride_wk + offs_n[None, :] * stride_wn,
            mask=(k0 + offs_k[:, None] < K) & (offs_n[None, :] < N),
            other=0.0,
        )
        acc += tl.dot(x, w, input_precision="ieee")
    tl.store(
        c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
        acc,
        mask=row_ok[:, None] & (offs_n[None, :] < N),
    )


@triton.jit
def _lookup(
    pid,
    off_ptr,
    tile_off_ptr,
    num_experts,
    N,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_E: tl.constexpr,
    STRICT: tl.constexpr,
):
    """expert_tile_of with GROUP_M = 1 and no clamps; STRICT: the search counts ends < tile (a BUG)."""
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tile = pid // num_pid_n
    e = tl.arange(0, BLOCK_E)
    ends = tl.load(tile_off_ptr + 1 + e, mask=e < num_experts, other=0)
    if STRICT:
        expert = tl.sum(((ends < tile) & (e < num_experts)).to(tl.int32), axis=0)
    else:
        expert = tl.sum(((ends <= tile) & (e < num_experts)).to(tl.int32), axis=0)
    expert = tl.minimum(expert, num_experts - 1)
    first_tile = tl.load(tile_off_ptr + expert)
    pid_m = tile - first_tile
    row_lo = tl.load(off_ptr + expert).to(tl.int64)
    return (
        expert.to(tl.int64),
        tile,
        row_lo,
        row_lo + pid_m * BLOCK_M,
        tl.load(off_ptr + expert + 1).to(tl.int64),
        pid % num_pid_n,
    )


@triton.jit
def _no_row_end_mask_kernel(
    x_ptr,
    w_ptr,
    c_ptr,
    off_ptr,
    tile_off_ptr,
    num_rows,
    num_experts,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wk,
    stride_wn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # BUG: masks rows at the end of x_perm instead of the end of the tile's expert, so the last
    # tile of an expert also computes (and stores) the next expert's first rows with its weights
    pid = tl.program_id(0)
    live = pid < tl.load(tile_off_ptr + num_experts) * tl.cdiv(N, BLOCK_N)
    expert, tile, row_lo, row_start, row_end, pid_n = _lookup(
        pid, off_ptr, tile_off_ptr, num_experts, N, BLOCK_M, BLOCK_N, BLOCK_E, False
    )
    _tile_body(
        x_ptr,
        w_ptr,
        c_ptr,
        expert,
        row_start,
        row_lo * 0,
        num_rows,
        pid_n,
        live,
        N,
        K,
        stride_xm,
        stride_xk,
        stride_we,
        stride_wk,
        stride_wn,
        stride_cm,
        stride_cn,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
    )


@triton.jit
def _tile_index_as_expert_kernel(
    x_ptr,
    w_ptr,
    c_ptr,
    off_ptr,
    tile_off_ptr,
    num_rows,
    num_experts,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wk,
    stride_wn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # BUG: takes the weights of expert (tile index mod E), as if every expert had one tile, instead
    # of the expert the search found
    pid = tl.program_id(0)
    live = pid < tl.load(tile_off_ptr + num_experts) * tl.cdiv(N, BLOCK_N)
    expert, tile, row_lo, row_start, row_end, pid_n = _lookup(
        pid, off_ptr, tile_off_ptr, num_experts, N, BLOCK_M, BLOCK_N, BLOCK_E, False
    )
    _tile_body(
        x_ptr,
        w_ptr,
        c_ptr,
        (tile % num_experts).to(tl.int64),
        row_start,
        row_lo,
        row_end,
        pid_n,
        live,
        N,
        K,
        stride_xm,
        stride_xk,
        stride_we,
        stride_wk,
        stride_wn,
        stride_cm,
        stride_cn,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
    )


@triton.jit
def _plain_gemm_rows_kernel(
    x_ptr,
    w_ptr,
    c_ptr,
    off_ptr,
    tile_off_ptr,
    num_rows,
    num_experts,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wk,
    stride_wn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # BUG: the rows of plain GEMM (tile * BLOCK_M) instead of the expert's first row plus its tiles,
    # as if every expert's row count were a multiple of BLOCK_M
    pid = tl.program_id(0)
    live = pid < tl.load(tile_off_ptr + num_experts) * tl.cdiv(N, BLOCK_N)
    expert, tile, row_lo, row_start, row_end, pid_n = _lookup(
        pid, off_ptr, tile_off_ptr, num_experts, N, BLOCK_M, BLOCK_N, BLOCK_E, False
    )
    _tile_body(
        x_ptr,
        w_ptr,
        c_ptr,
        expert,
        tile.to(tl.int64) * BLOCK_M,
        row_lo * 0,
        row_end,
        pid_n,
        live,
        N,
        K,
        stride_xm,
        stride_xk,
        stride_we,
        stride_wk,
        stride_wn,
        stride_cm,
        stride_cn,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
    )


@triton.jit
def _search_off_by_one_kernel(
    x_ptr,
    w_ptr,
    c_ptr,
    off_ptr,
    tile_off_ptr,
    num_rows,
    num_experts,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wk,
    stride_wn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # BUG: the search counts the experts whose tiles end strictly before the tile, so the first tile
    # of each expert after the first is given to the expert before it
    pid = tl.program_id(0)
    live = pid < tl.load(tile_off_ptr + num_experts) * tl.cdiv(N, BLOCK_N)
    expert, tile, row_lo, row_start, row_end, pid_n = _lookup(
        pid, off_ptr, tile_off_ptr, num_experts, N, BLOCK_M, BLOCK_N, BLOCK_E, True
    )
    _tile_body(
        x_ptr,
        w_ptr,
        c_ptr,
        expert,
        row_start,
        row_lo * 0,
        row_end,
        pid_n,
        live,
        N,
        K,
        stride_xm,
        stride_xk,
        stride_we,
        stride_wk,
        stride_wn,
        stride_cm,
        stride_cn,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
    )


@triton.jit
def _unclamped_rows_kernel(
    x_ptr,
    w_ptr,
    c_ptr,
    off_ptr,
    tile_off_ptr,
    num_rows,
    num_experts,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wk,
    stride_wn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # BUG: trusts the offsets' values: rows from offsets[e] to offsets[e + 1], not clamped to x_perm
    pid = tl.program_id(0)
    live = pid < tl.load(tile_off_ptr + num_experts) * tl.cdiv(N, BLOCK_N)
    expert, tile, row_lo, row_start, row_end, pid_n = _lookup(
        pid, off_ptr, tile_off_ptr, num_experts, N, BLOCK_M, BLOCK_N, BLOCK_E, False
    )
    _tile_body(
        x_ptr,
        w_ptr,
        c_ptr,
        expert,
        row_start,
        row_lo,
        row_end,
        pid_n,
        live,
        N,
        K,
        stride_xm,
        stride_xk,
        stride_we,
        stride_wk,
        stride_wn,
        stride_cm,
        stride_cn,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
    )


def run_variant(kernel, x, w, offsets, block=(BM, 16, 16), group_m=1):
    """Launch a kernel exactly as grouped_matmul launches the right one (fp32, one launch). The
    output starts as NaN, so a row no program writes cannot pass for a right one."""
    c = torch.full((x.shape[0], w.shape[2]), float("nan"), device=x.device)
    gg._launch(
        x, w, c, on_device(offsets), dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), block)), "ieee", group_m, kernel=kernel
    )
    return c


WRONG_COUNTS = [5, 0, 20, 1, 9]  # experts that end inside a tile, an empty one, a one-token one


def test_the_right_kernel_passes_the_harness_the_wrong_ones_fail():
    x, w, offsets = case(WRONG_COUNTS, K=24, N=20, seed=8)
    assert within_bound(run_variant(None, x, w, offsets), x, w, offsets)  # None: grouped_matmul_kernel
    for wrong in (_tile_index_as_expert_kernel, _plain_gemm_rows_kernel, _search_off_by_one_kernel):
        assert not within_bound(run_variant(wrong, x, w, offsets), x, w, offsets), wrong.__name__
    # the harness's own lookup (_lookup, no bug, GROUP_M = 1) is right: the bugs are what fails
    assert within_bound(run_variant(_unclamped_rows_kernel, x, w, offsets), x, w, offsets)


@pytest.mark.skipif(not INTERPRETED, reason="reorders the interpreter's programs")
def test_a_missing_row_end_mask_fails_once_a_later_tile_cannot_hide_it(program_order):
    x, w, offsets = case(WRONG_COUNTS, K=24, N=20, seed=9)
    # programs run last-to-first: the buggy last tile of an expert now writes the next expert's
    # first rows AFTER that expert's own tile did (on a GPU, which store lands last is a race)
    program_order(reversed_order)
    assert not within_bound(run_variant(_no_row_end_mask_kernel, x, w, offsets), x, w, offsets)
    assert within_bound(grouped_matmul(x, w, offsets, block=(BM, 16, 16)), x, w, offsets)


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter's sequential program order; a GPU races")
def test_interpreter_runs_tiles_in_order_so_forward_order_hides_the_missing_mask():
    """Measured with Triton 3.7.1: the interpreter runs the programs one after another in grid
    order. Recorded so that nobody trusts a forward-order test of the mask: in grid order, the
    next expert's own tile overwrites the rows the buggy tile spilled into."""
    x, w, offsets = case(WRONG_COUNTS, K=24, N=20, seed=9)
    assert within_bound(run_variant(_no_row_end_mask_kernel, x, w, offsets), x, w, offsets), (
        f"Triton {triton.__version__}: the interpreter no longer runs the tiles in grid order (3.7.1 does)"
    )


def test_unclamped_rows_leave_the_operands_on_bad_offsets():
    # the safety test above is not vacuous: a kernel that trusts the offsets reads x's NaN guard
    # rows and writes into C's guard zone (offsets chosen to land inside the guard zones)
    rows, E, K, N = 30, 4, 24, 20
    bx, bw, bc, x, w, c = guarded(rows, E, K, N)
    gg._launch(
        x,
        w,
        c,
        on_device([-4, 10, 20, 25, 30 + 4]),
        {"BLOCK_M": BM, "BLOCK_N": 16, "BLOCK_K": 16},
        "ieee",
        1,
        kernel=_unclamped_rows_kernel,
    )
    assert not stayed_inside(bc, c, rows)


# ------------------------------------------------------------------ bad input


def test_bad_inputs_get_clear_errors():
    x, w, offsets = case([3, 0, 5], K=8, N=8)
    with pytest.raises(TypeError, match="torch.Tensor"):
        grouped_matmul(x.cpu().numpy(), w, offsets)
    with pytest.raises(ValueError, match=r"w must be 3-D \(E, K, N\)"):
        grouped_matmul(x, w[0], offsets)
    with pytest.raises(ValueError, match="x_perm must be 2-D"):
        grouped_matmul(x[0], w, offsets)
    with pytest.raises(ValueError, match="K = 8 columns"):
        grouped_matmul(x, w[:, :5], offsets)
    with pytest.raises(TypeError, match="same dtype"):
        grouped_matmul(x, w.half(), offsets)
    with pytest.raises(TypeError, match="accepted: torch.float32, torch.bfloat16, torch.float16"):
        grouped_matmul(x.double(), w.double(), offsets)
    with pytest.raises(ValueError, match="non-decreasing"):
        grouped_matmul(x, w, [0, 5, 3, 8])
    with pytest.raises(ValueError, match="end at the number of rows, 8"):
        grouped_matmul(x, w, [0, 3, 3, 7])
    with pytest.raises(ValueError, match="num_experts \\+ 1 = 4 entries"):
        grouped_matmul(x, w, [0, 3, 8])
    with pytest.raises(ValueError, match="input_precision"):
        grouped_matmul(x, w, offsets, input_precision="tf64")
    with pytest.raises(TypeError, match="out_dtype"):
        grouped_matmul(x, w, offsets, out_dtype=torch.float64)
    for block in [(16, 16), (16, 16, 24), (8, 16, 16), (16, 512, 16), (16.0, 16, 16)]:
        with pytest.raises(ValueError, match="block"):
            grouped_matmul(x, w, offsets, block=block)
    for g in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="group_m must be a positive int"):
            grouped_matmul(x, w, offsets, group_m=g)
    with pytest.raises(ValueError, match="no experts"):
        grouped_matmul(x[:0], w[:0], on_device([0]))


def test_bad_device_offsets_get_clear_errors():
    x, w, offsets = case([3, 0, 5], K=8, N=8)
    with pytest.raises(TypeError, match="offsets on the device must be torch.int32 or torch.int64, got torch.float"):
        grouped_matmul(x, w, on_device(offsets, torch.float32))
    with pytest.raises(ValueError, match=r"shape \(E \+ 1,\) = \(4,\) for w's 3 experts, got \(3,\)"):
        grouped_matmul(x, w, on_device([0, 3, 8]))
    with pytest.raises(ValueError, match=r"got \(2, 4\)"):
        grouped_matmul(x, w, on_device([offsets, offsets]))


def test_a_schedule_is_no_longer_accepted():
    x, w, offsets = case([3, 0, 20], K=8, N=8)
    for f, args in ((grouped_matmul, (x, w)), (scaled_grouped_matmul, fp8_case([3, 0, 20], 16, 16)[:4])):
        with pytest.raises(TypeError, match="schedule= is no longer accepted: the kernel computes every program"):
            f(*args, offsets, block=(16, 16, 16), schedule=tile_schedule(offsets, 16))


@pytest.mark.skipif(INTERPRETED, reason="needs compiled kernels (a GPU)")
def test_compiled_kernel_refuses_cpu_tensors():
    x, w, offsets = case([3, 5], K=16, N=16)
    with pytest.raises(ValueError, match="CUDA tensors"):
        grouped_matmul(x.cpu(), w.cpu(), offsets)


def test_configs():
    assert INTERPRETER_CONFIG["BLOCK_K"] >= 16 and len(GPU_CONFIGS) >= 4
    # the decode tiles beside the prefill ones (chapter 10, section 6)
    assert {c.kwargs["BLOCK_M"] for c in GPU_CONFIGS} == {16, 32, 64, 128}


# ------------------------------------------------------------------ GPU only


@pytest.mark.skipif(INTERPRETED, reason="needs compiled kernels (a GPU): the tuner times launches")
@pytest.mark.parametrize("counts", [[0, 1, 200, 0, 127, 128, 129, 3], [1000] + [0] * 15, [64] * 16])
def test_tuned_bf16_against_torch_grouped_mm(counts):
    x, w, offsets = case(counts, K=1000, N=520, seed=10, dtype=torch.bfloat16)
    C = grouped_matmul(x, w, offsets, block=None, out_dtype=torch.bfloat16)
    assert C.dtype == torch.bfloat16 and within_bound(C, x, w, offsets, out_dtype=torch.bfloat16)
    # torch's grouped GEMM obeys the same bound; both are compared to float64, not to each other
    offs = torch.as_tensor(offsets[1:], dtype=torch.int32, device=DEV)
    theirs = torch.nn.functional.grouped_mm(x, w, offs=offs)
    assert within_bound(theirs, x, w, offsets, out_dtype=torch.bfloat16)
    # the same tuned config again, from device offsets: the same bits
    assert torch.equal(grouped_matmul(x, w, on_device(offsets), block=None, out_dtype=torch.bfloat16), C)


@pytest.mark.skipif(INTERPRETED, reason="needs compiled kernels (a GPU) and 4 GiB of memory")
def test_expert_offsets_past_2_to_the_31_elements():
    # expert 2's weights start 2**31 elements into the storage: int32 pointer arithmetic would wrap
    # (at DeepSeek-V3 sizes, 256 x 7168 x 2048 = 3.8e9 elements); the kernel computes it in int64
    K, N, stride = 64, 64, 2**30
    storage = torch.zeros(2 * stride + K * N, dtype=torch.bfloat16, device=DEV)
    w = storage.as_strided((3, K, N), (stride, N, 1))
    w.copy_(torch.randn((3, K, N), device=DEV).to(torch.bfloat16))
    x, _, offsets = case([5, 0, 70], K=K, N=N, seed=11, dtype=torch.bfloat16)
    C = grouped_matmul(x, w, offsets, block=(64, 64, 64))
    assert within_bound(C, x, w, offsets)
    del storage, w
    torch.cuda.empty_cache()


@pytest.mark.skipif(INTERPRETED, reason="needs a GPU: CUDA's sync debug mode and CUDA graphs")
@pytest.mark.parametrize("block", [(64, 64, 64), None])
def test_no_sync_and_cuda_graph_capture(block):
    counts_a, counts_b = [0, 1, 200, 0, 127, 128, 129, 3], [588, 0, 0, 0, 0, 0, 0, 0]  # 588 rows each
    x, w, offsets = case(counts_a, K=256, N=192, seed=14, dtype=torch.bfloat16)
    off = on_device(offsets)
    C = grouped_matmul(x, w, off, block=block, out_dtype=torch.bfloat16)  # compiles (and tunes) first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronising CUDA call raises from here on
    try:
        again = grouped_matmul(x, w, off, block=block, out_dtype=torch.bfloat16)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(again, C) and within_bound(C, x, w, offsets, out_dtype=torch.bfloat16)
    # one capture, replayed for another routing of the same number of rows
    static_x, static_off = x.clone(), off.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        grouped_matmul(static_x, w, static_off, block=block, out_dtype=torch.bfloat16)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = grouped_matmul(static_x, w, static_off, block=block, out_dtype=torch.bfloat16)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, C)
    x_b, _, offsets_b = case(counts_b, K=256, N=192, seed=15, dtype=torch.bfloat16)
    static_x.copy_(x_b)
    static_off.copy_(on_device(offsets_b))
    graph.replay()
    torch.cuda.synchronize()
    assert within_bound(out, x_b, w, offsets_b, out_dtype=torch.bfloat16)
    assert torch.equal(out, grouped_matmul(x_b, w, offsets_b, block=block, out_dtype=torch.bfloat16))


# ------------------------------------------------------------------ fp8 with chapter 06's scales


def fp8_case(counts, K, N, seed=0, fp8=torch.float8_e4m3fn):
    """qx (rows, K), qw (E, K, N) K-major fp8; sx (rows, 1), sw (E, N) float32 scales; offsets."""
    x, w, offsets = case(counts, K, N, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    qx = (x * 8).clamp(-448, 448).to(fp8)  # clamped before the cast: torch's fp8 overflow has varied
    qw = k_major((w * 8).clamp(-448, 448).to(fp8))
    sx = (torch.rand((x.shape[0], 1), generator=g) + 0.5).to(DEV)
    sw = (torch.rand((w.shape[0], N), generator=g) * 2**-3).to(DEV)
    return qx, qw, sx, sw, offsets


def scaled_ref_and_bound(qx, qw, sx, sw, offsets, out_dtype=torch.float32):
    """float64 reference of the dequantized operands, (qx * sx)_e @ (qw[e] * sw[e]), and the bound:
    the fp32 sum of exact fp8 products (gamma_K(2**-24) of |qx| @ |qw|, as gemm_bounds.error_bound),
    then two fp32 roundings in the epilogue (* sx, * sw: 2 * 2**-24 more), the float64 reference's
    own error, and one rounding to out_dtype; all scaled by |sx| |sw|."""
    ref = grouped_matmul_ref(qx.double() * sx.double(), qw.double() * sw.double()[:, None, :], offsets)
    acc_bound = bound(qx.float(), qw.float(), offsets)  # (gamma_K(u32) + gamma_K(u64)) |qx| @ |qw|
    u_out = {torch.float32: 0.0, torch.bfloat16: 2.0**-8}[out_dtype]
    g = 3 * 2.0**-24 + u_out * (1 + 2.0**-20)
    row_expert = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    scale = sx.double() * sw.double()[torch.as_tensor(row_expert, device=DEV)]
    absprod = grouped_matmul_ref(qx.double().abs(), qw.double().abs(), offsets)
    return ref, (acc_bound * (1 + g) + g * absprod) * scale


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_scaled_fp8_within_the_bound_of_the_dequantized_reference(fp8, out_dtype):
    qx, qw, sx, sw, offsets = fp8_case([0, 5, 0, 17, 1, 40], K=45, N=37, seed=12, fp8=fp8)
    assert qw.stride(1) == 1  # K-major, as the launcher requires
    C = scaled_grouped_matmul(qx, qw, sx, sw, offsets, block=(16, 16, 32), out_dtype=out_dtype)
    assert C.shape == (63, 37) and C.dtype == out_dtype
    ref, bnd = scaled_ref_and_bound(qx, qw, sx, sw, offsets, out_dtype)
    if INTERPRETED:
        assert bool(((C.double() - ref).abs() <= bnd).all())
    else:  # fp8 tensor cores keep a narrow accumulator inside each BLOCK_K group: a loose check only
        assert ((C.double() - ref).norm() / ref.norm()).item() < 2.0**-6
    # (E, 1, N) scales are the same scales; device offsets and another GROUP_M the same bits;
    # default block; a wrong scale (the other expert's) fails
    assert torch.equal(
        scaled_grouped_matmul(qx, qw, sx, sw[:, None, :], offsets, block=(16, 16, 32), out_dtype=out_dtype), C
    )
    assert torch.equal(
        scaled_grouped_matmul(qx, qw, sx, sw, on_device(offsets), block=(16, 16, 32), out_dtype=out_dtype, group_m=1), C
    )
    if INTERPRETED:
        assert bool(((scaled_grouped_matmul(qx, qw, sx, sw, offsets).double() - ref).abs() <= bnd).all())
        wrong = scaled_grouped_matmul(qx, qw, sx, sw.roll(1, dims=0), offsets, block=(16, 16, 32))
        assert not bool(((wrong.double() - ref).abs() <= bnd).all())


def test_k_major_weights():
    w = torch.randn((3, 8, 5), device=DEV)
    km = k_major(w)
    assert km.shape == w.shape and km.stride() == (40, 1, 8) and torch.equal(km, w)
    assert k_major(km) is km  # already K-major: no copy
    one = w[:, :1]
    assert k_major(one) is one  # K = 1: any layout is K-major
    with pytest.raises(ValueError, match=r"3-D torch.Tensor \(E, K, N\)"):
        k_major(w[0])


def test_scaled_fp8_bad_inputs():
    qx, qw, sx, sw, offsets = fp8_case([3, 0, 5], K=16, N=16)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        scaled_grouped_matmul(qx.float(), qw.float(), sx, sw, offsets)
    with pytest.raises(TypeError, match="same dtype"):
        scaled_grouped_matmul(qx, qw.to(torch.float8_e5m2), sx, sw, offsets)
    with pytest.raises(ValueError, match=r"sx must have shape \(8, 1\)"):
        scaled_grouped_matmul(qx, qw, sx[:4], sw, offsets)
    with pytest.raises(ValueError, match="one scale per expert and column"):
        scaled_grouped_matmul(qx, qw, sx, sw[:, :3], offsets)
    with pytest.raises(TypeError, match="sw must be float32"):
        scaled_grouped_matmul(qx, qw, sx, sw.double(), offsets)
    with pytest.raises(TypeError, match="out_dtype"):
        scaled_grouped_matmul(qx, qw, sx, sw, offsets, out_dtype=torch.float16)
    with pytest.raises(ValueError, match="end at the number of rows"):
        scaled_grouped_matmul(qx, qw, sx, sw, [0, 3, 3, 9])
    n_major = qw.contiguous()  # (E, K, N) with N contiguous: the layout the fp8 kernel refuses
    assert n_major.stride(1) != 1
    with pytest.raises(
        ValueError,
        match=r"qw must be K-major \(E, K, N\) with stride 1 along K, got strides "
        r"\(256, 16, 1\).*qw_nk.transpose\(1, 2\).*k_major\(qw\)",
    ):
        scaled_grouped_matmul(qx, n_major, sx, sw, offsets)


def test_fastest_predicted_is_the_fastest_tuned_config_of_the_table():
    from nbhelpers.kernels.grouped_gemm import TUNED_LABEL, fastest_predicted, predicted
    from nbhelpers.perf_model import H100_SXM

    rows = [
        {"kernel": "grouped_matmul_kernel", "label": TUNED_LABEL, "target": "sm_90", "status": "ok",
         "default": True, "spill_stores": 0, "config": cfg, "num_warps": w, "num_stages": st,
         "registers": regs, "shared": shared}
        for cfg, w, st, regs, shared in (
            ("128x256x64 w8 s3 (BLOCK_E=256)", 8, 3, 201, 147456),
            ("64x64x64 w4 s4 (BLOCK_E=256)", 4, 4, 72, 65536),
        )
    ]  # fmt: skip
    spilled = dict(rows[1], spill_stores=8, config="16x16x16 w4 s4")
    other = dict(rows[1], target="sm_80", config="16x32x16 w4 s4")
    loads = [3, 0, 40, 1]
    p, config = fastest_predicted(rows + [spilled, other], loads, 7168, 2048, gpu=H100_SXM)
    each = [
        predicted(loads, 7168, 2048, (128, 256, 64), 8, 3, 201, 147456, gpu=H100_SXM),
        predicted(loads, 7168, 2048, (64, 64, 64), 4, 4, 72, 65536, gpu=H100_SXM),
    ]
    assert p.seconds == min(q.seconds for q in each)
    assert config == ("128x256x64 w8 s3", "64x64x64 w4 s4")[each.index(min(each, key=lambda q: q.seconds))]
    graph, _ = fastest_predicted(rows, loads, 7168, 2048, gpu=H100_SXM, cuda_graph=True)
    assert graph.seconds < p.seconds
    assert fastest_predicted([spilled, other], loads, 7168, 2048) == (None, None)


def test_tuned_config_reports_the_kept_config_and_every_timing(monkeypatch):
    """The tuner's bookkeeping without a GPU: its launches and its timer replaced by stand-ins,
    _tuned_launch keeps the fastest config per key, and tuned_config reads it (and each config's
    time) back for a call of the same shapes and dtypes, in the same power-of-two bucket of rows;
    another bucket or out_dtype has nothing tuned."""
    monkeypatch.setattr(gg, "_TUNED", {})
    monkeypatch.setattr(gg, "_TUNING_MS", {})
    ran = []
    monkeypatch.setattr(gg, "_launch", lambda *a, **kw: ran.append(kw["num_warps"]))
    names = [gg.config_name(c) for c in gg.GPU_CONFIGS]
    fastest = names[len(names) // 2]
    timer = iter(range(len(names)))

    def fake_ms(fn):
        fn()
        i = next(timer)
        return 0.1 if names[i] == fastest else 1.0 + i

    monkeypatch.setattr(gg, "tuning_ms", fake_ms)
    x = torch.empty((100, 32), dtype=torch.bfloat16)
    w = torch.empty((4, 32, 16), dtype=torch.bfloat16)
    c = torch.empty((100, 16), dtype=torch.bfloat16)
    assert gg.tuned_config(x, w, out_dtype=torch.bfloat16) is None
    gg._tuned_launch(x, w, c, None, "ieee", gg.DEFAULT_GROUP_M)
    kept, times = gg.tuned_config(x, w, out_dtype=torch.bfloat16)
    assert kept == fastest and sorted(times) == sorted(names) and times[fastest] == 0.1
    assert len(ran) == len(names) + 1  # each config timed once, then the kept one runs
    assert gg.tuned_config(torch.empty((120, 32), dtype=torch.bfloat16), w, out_dtype=torch.bfloat16)[0] == fastest
    assert gg.tuned_config(torch.empty((200, 32), dtype=torch.bfloat16), w, out_dtype=torch.bfloat16) is None
    assert gg.tuned_config(x, w) is None  # float32 out: another key
    assert gg.config_name(gg.GPU_CONFIGS[0]).count("x") == 2
