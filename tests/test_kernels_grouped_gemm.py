"""Tests of nbhelpers.kernels.grouped_gemm, chapter 10's grouped GEMM kernel: one launch for every
expert, against a float64 reference computed here expert by expert, within the fp32-accumulation
bound of kernels.gemm.error_bound; deliberately wrong kernels that the same comparison must catch;
bad input; and (GPU only) the tuned path against torch.nn.functional.grouped_mm.

As in the other kernel tests, ``setup_device()`` runs first: without a GPU it sets
TRITON_INTERPRET=1 before the kernel module is imported, and the kernels run in Triton's
interpreter on the CPU. The interpreter is slow, so the shapes are small (K, N below 100).
"""
import os

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from nbhelpers import kernels  # noqa: E402
from nbhelpers.kernels.gemm import error_bound  # noqa: E402
from nbhelpers.kernels.grouped_gemm import (  # noqa: E402
    GPU_CONFIGS,
    INTERPRETER_CONFIG,
    grouped_matmul,
    grouped_matmul_kernel,
    scaled_grouped_matmul,
    schedule_tensor,
)
from nbhelpers.moe import TileSchedule, grouped_matmul_ref, tile_schedule  # noqa: E402

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


def bound(x, w, offsets, out_dtype=torch.float32):
    """Elementwise bound on |C - ref|: kernels.gemm.error_bound of each expert's own product
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
    parts = [x[int(offsets[e]):int(offsets[e + 1])].double() @ w[e].double() for e in range(w.shape[0])]
    return torch.cat(parts) if parts else torch.zeros((0, w.shape[2]), dtype=torch.float64)


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


@pytest.mark.parametrize("name", ["empty first, middle, last", "exactly BLOCK_M and BLOCK_M + 1", "uneven"])
def test_small_integers_are_exact_bit_for_bit(name):
    # every partial sum is an integer below 2**24: any order of fp32 additions is exact, so the
    # kernel must equal the float64 product exactly; a row from the wrong expert, a wrong weight
    # matrix or a missing mask would not
    x, w, offsets = case(COUNTS[name], K=40, N=24, seed=1, ints=True)
    C = grouped_matmul(x, w, offsets, block=(BM, 16, 16))
    assert torch.equal(C.double(), grouped_matmul_ref(x, w, offsets))


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
        assert torch.equal(grouped_matmul(x, w, offsets, block=(BM, 16, 16)),
                           grouped_matmul(x.float(), w.float(), offsets, block=(BM, 16, 16)))


def test_offsets_as_list_and_tensor_and_a_given_schedule():
    x, w, offsets = case([4, 0, 19], K=20, N=18, seed=5)
    C = grouped_matmul(x, w, offsets, block=(BM, 16, 16))
    assert torch.equal(grouped_matmul(x, w, offsets.tolist(), block=(BM, 16, 16)), C)
    assert torch.equal(grouped_matmul(x, w, torch.as_tensor(offsets, dtype=torch.int32), block=(BM, 16, 16)), C)
    assert torch.equal(grouped_matmul(x, w, offsets, block=(BM, 16, 16), schedule=tile_schedule(offsets, BM)), C)


def test_tile_order_does_not_change_the_bits():
    # no program reads or writes another tile's rows, so any order of the tiles gives the same result
    x, w, offsets = case([5, 0, 20, 33, 1], K=24, N=20, seed=6)
    s = tile_schedule(offsets, BM)
    rev = TileSchedule(s.expert[::-1].copy(), s.row_start[::-1].copy(), s.row_end[::-1].copy(), BM)
    assert torch.equal(grouped_matmul(x, w, offsets, block=(BM, 16, 16), schedule=rev),
                       grouped_matmul(x, w, offsets, block=(BM, 16, 16)))


def test_strided_inputs_equal_contiguous_ones():
    x, w, offsets = case([6, 0, 13], K=24, N=20, seed=7)
    xt = x.t().contiguous().t()
    wt = w.transpose(1, 2).contiguous().transpose(1, 2)  # (E, K, N) view of an (E, N, K) weight
    assert xt.stride() != x.stride() and wt.stride() != w.stride()
    assert torch.equal(grouped_matmul(xt, wt, offsets, block=(BM, 16, 16)),
                       grouped_matmul(x, w, offsets, block=(BM, 16, 16)))


def test_no_rows_no_columns_no_k():
    x, w, offsets = case([0, 0, 0], K=8, N=5)
    C = grouped_matmul(x, w, offsets)
    assert C.shape == (0, 5) and C.dtype == torch.float32
    assert grouped_matmul(x, w, offsets, out_dtype=torch.bfloat16).dtype == torch.bfloat16
    x, w, offsets = case([2, 0, 3], K=0, N=4)
    assert torch.equal(grouped_matmul(x, w, offsets), torch.zeros((5, 4), device=DEV))
    x, w, offsets = case([2, 3], K=4, N=0)
    assert grouped_matmul(x, w, offsets).shape == (5, 0)


def test_the_device_schedule_is_one_int32_tensor():
    s = tile_schedule(np.array([0, 5, 5, 40]), BM)
    t = schedule_tensor(s, DEV)
    assert t.dtype == torch.int32 and t.shape == (3, s.num_tiles) and t.is_contiguous()
    assert t.cpu().tolist() == [s.expert.tolist(), s.row_start.tolist(), s.row_end.tolist()]
    assert t.cpu().tolist() == [[0, 2, 2, 2], [0, 5, 21, 37], [5, 40, 40, 40]]


# ------------------------------------------------------------------ wrong kernels must fail
# Each is grouped_matmul_kernel with one plausible mistake, launched the same way (fp32 inputs).


@triton.jit
def _no_row_end_mask_kernel(x_ptr, w_ptr, c_ptr, sched_ptr, num_tiles, num_rows, num_experts, N, K,
                            stride_xm, stride_xk, stride_we, stride_wk, stride_wn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # BUG: masks rows at the end of x_perm instead of the end of the tile's expert, so the last
    # tile of an expert also computes (and stores) the next expert's first rows with its weights
    t = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = tl.load(sched_ptr + t).to(tl.int64)
    row_start = tl.load(sched_ptr + num_tiles + t).to(tl.int64)
    offs_m = row_start + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = offs_m < num_rows
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k[None, :]) * stride_xk,
                    mask=row_ok[:, None] & (k0 + offs_k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + expert * stride_we + (k0 + offs_k[:, None]) * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(k0 + offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=row_ok[:, None] & (offs_n[None, :] < N))


@triton.jit
def _tile_index_as_expert_kernel(x_ptr, w_ptr, c_ptr, sched_ptr, num_tiles, num_rows, num_experts, N, K,
                                 stride_xm, stride_xk, stride_we, stride_wk, stride_wn, stride_cm, stride_cn,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # BUG: takes the expert from the tile's number modulo E (as if every expert had one tile)
    # instead of looking it up in the schedule
    t = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = (t % num_experts).to(tl.int64)
    row_start = tl.load(sched_ptr + num_tiles + t).to(tl.int64)
    row_end = tl.load(sched_ptr + 2 * num_tiles + t).to(tl.int64)
    offs_m = row_start + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = offs_m < row_end
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k[None, :]) * stride_xk,
                    mask=row_ok[:, None] & (k0 + offs_k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + expert * stride_we + (k0 + offs_k[:, None]) * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(k0 + offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=row_ok[:, None] & (offs_n[None, :] < N))


@triton.jit
def _plain_gemm_rows_kernel(x_ptr, w_ptr, c_ptr, sched_ptr, num_tiles, num_rows, num_experts, N, K,
                            stride_xm, stride_xk, stride_we, stride_wk, stride_wn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # BUG: the rows of plain GEMM (t * BLOCK_M) instead of the schedule's row_start, as if every
    # expert's row count were a multiple of BLOCK_M
    t = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = tl.load(sched_ptr + t).to(tl.int64)
    row_end = tl.load(sched_ptr + 2 * num_tiles + t).to(tl.int64)
    offs_m = t.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = offs_m < row_end
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k[None, :]) * stride_xk,
                    mask=row_ok[:, None] & (k0 + offs_k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + expert * stride_we + (k0 + offs_k[:, None]) * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(k0 + offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=row_ok[:, None] & (offs_n[None, :] < N))


def run_variant(kernel, x, w, offsets, schedule, block=(BM, 16, 16)):
    """Launch a (wrong) kernel exactly as grouped_matmul launches the right one (fp32, one launch).
    The output starts as NaN, so a row no program writes cannot pass for a right one."""
    sched = schedule_tensor(schedule, x.device)
    c = torch.full((x.shape[0], w.shape[2]), float("nan"), device=x.device)
    E, K, N = w.shape
    kernel[(sched.shape[1], triton.cdiv(N, block[1]))](
        x, w, c, sched, sched.shape[1], x.shape[0], E, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
        w.stride(2), c.stride(0), c.stride(1), BLOCK_M=block[0], BLOCK_N=block[1], BLOCK_K=block[2])
    return c


def reversed_schedule(s):
    return TileSchedule(s.expert[::-1].copy(), s.row_start[::-1].copy(), s.row_end[::-1].copy(), s.block_m)


WRONG_COUNTS = [5, 0, 20, 1, 9]  # experts that end inside a tile, an empty one, a one-token one


def test_the_right_kernel_passes_the_harness_the_wrong_ones_fail():
    x, w, offsets = case(WRONG_COUNTS, K=24, N=20, seed=8)
    s = tile_schedule(offsets, BM)
    right = torch.empty((x.shape[0], w.shape[2]), device=DEV)
    sched = schedule_tensor(s, DEV)
    grouped_matmul_kernel[(s.num_tiles, triton.cdiv(20, 16))](
        x, w, right, sched, s.num_tiles, 20, 24, x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
        right.stride(0), right.stride(1), BLOCK_M=BM, BLOCK_N=16, BLOCK_K=16, INPUT_PRECISION="ieee")
    assert within_bound(right, x, w, offsets)
    assert not within_bound(run_variant(_tile_index_as_expert_kernel, x, w, offsets, s), x, w, offsets)
    assert not within_bound(run_variant(_plain_gemm_rows_kernel, x, w, offsets, s), x, w, offsets)


def test_a_missing_row_end_mask_fails_once_a_later_tile_cannot_hide_it():
    x, w, offsets = case(WRONG_COUNTS, K=24, N=20, seed=9)
    s = tile_schedule(offsets, BM)
    # tiles run last-to-first: the buggy last tile of an expert now writes the next expert's first
    # rows AFTER that expert's own tile did (on a GPU, which store lands last is a race)
    assert not within_bound(run_variant(_no_row_end_mask_kernel, x, w, offsets, reversed_schedule(s)), x, w, offsets)
    assert within_bound(grouped_matmul(x, w, offsets, block=(BM, 16, 16), schedule=reversed_schedule(s)),
                        x, w, offsets)


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter's sequential program order; a GPU races")
def test_interpreter_runs_tiles_in_order_so_forward_order_hides_the_missing_mask():
    """Measured with Triton 3.7.1: the interpreter runs the programs one after another in grid
    order. Recorded so that nobody trusts a forward-order test of the mask: in grid order, the
    next expert's own tile overwrites the rows the buggy tile spilled into."""
    x, w, offsets = case(WRONG_COUNTS, K=24, N=20, seed=9)
    s = tile_schedule(offsets, BM)
    assert within_bound(run_variant(_no_row_end_mask_kernel, x, w, offsets, s), x, w, offsets), (
        f"Triton {triton.__version__}: the interpreter no longer runs the tiles in grid order (3.7.1 does)")


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


def test_bad_schedules_get_clear_errors():
    x, w, offsets = case([3, 0, 20], K=8, N=8)
    with pytest.raises(ValueError, match="schedule.block_m is 32 but the kernel's BLOCK_M is 16"):
        grouped_matmul(x, w, offsets, block=(16, 16, 16), schedule=tile_schedule(offsets, 32))
    with pytest.raises(TypeError, match="TileSchedule"):
        grouped_matmul(x, w, offsets, block=(16, 16, 16), schedule=[0, 1])
    s = tile_schedule(offsets, 16)
    with pytest.raises(ValueError, match=r"schedule.expert must lie in \[0, 3\)"):
        grouped_matmul(x, w, offsets, block=(16, 16, 16), schedule=s._replace(expert=s.expert + 5))
    other = tile_schedule(np.array([0, 10, 10, 23]), 16)  # a schedule of other offsets
    with pytest.raises(ValueError, match="does not match offsets"):
        grouped_matmul(x, w, offsets, block=(16, 16, 16), schedule=other)
    with pytest.raises(ValueError, match="one length"):
        grouped_matmul(x, w, offsets, block=(16, 16, 16), schedule=s._replace(row_end=s.row_end[:1]))


@pytest.mark.skipif(INTERPRETED, reason="needs compiled kernels (a GPU)")
def test_compiled_kernel_refuses_cpu_tensors():
    x, w, offsets = case([3, 5], K=16, N=16)
    with pytest.raises(ValueError, match="CUDA tensors"):
        grouped_matmul(x.cpu(), w.cpu(), offsets)


def test_configs():
    assert INTERPRETER_CONFIG["BLOCK_K"] >= 16 and len(GPU_CONFIGS) >= 4
    assert all(c.kwargs["BLOCK_M"] in (64, 128) for c in GPU_CONFIGS)


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
    # the same tuned config again: the same bits
    assert torch.equal(grouped_matmul(x, w, offsets, block=None, out_dtype=torch.bfloat16), C)


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


# ------------------------------------------------------------------ fp8 with chapter 06's scales


def fp8_case(counts, K, N, seed=0, fp8=torch.float8_e4m3fn):
    """qx (rows, K), qw (E, K, N) fp8; sx (rows, 1), sw (E, N) float32 scales; offsets."""
    x, w, offsets = case(counts, K, N, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    qx = (x * 8).clamp(-448, 448).to(fp8)  # clamped before the cast: torch's fp8 overflow has varied
    qw = (w * 8).clamp(-448, 448).to(fp8)
    sx = (torch.rand((x.shape[0], 1), generator=g) + 0.5).to(DEV)
    sw = (torch.rand((w.shape[0], N), generator=g) * 2 ** -3).to(DEV)
    return qx, qw, sx, sw, offsets


def scaled_ref_and_bound(qx, qw, sx, sw, offsets, out_dtype=torch.float32):
    """float64 reference of the dequantized operands, (qx * sx)_e @ (qw[e] * sw[e]), and the bound:
    the fp32 sum of exact fp8 products (gamma_K(2**-24) of |qx| @ |qw|, as kernels.gemm.error_bound),
    then two fp32 roundings in the epilogue (* sx, * sw: 2 * 2**-24 more), the float64 reference's
    own error, and one rounding to out_dtype; all scaled by |sx| |sw|."""
    ref = grouped_matmul_ref(qx.double() * sx.double(), qw.double() * sw.double()[:, None, :], offsets)
    acc_bound = bound(qx.float(), qw.float(), offsets)  # (gamma_K(u32) + gamma_K(u64)) |qx| @ |qw|
    u_out = {torch.float32: 0.0, torch.bfloat16: 2.0 ** -8}[out_dtype]
    g = 3 * 2.0 ** -24 + u_out * (1 + 2.0 ** -20)
    row_expert = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    scale = sx.double() * sw.double()[torch.as_tensor(row_expert, device=DEV)]
    absprod = grouped_matmul_ref(qx.double().abs(), qw.double().abs(), offsets)
    return ref, (acc_bound * (1 + g) + g * absprod) * scale


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_scaled_fp8_within_the_bound_of_the_dequantized_reference(fp8, out_dtype):
    qx, qw, sx, sw, offsets = fp8_case([0, 5, 0, 17, 1, 40], K=45, N=37, seed=12, fp8=fp8)
    C = scaled_grouped_matmul(qx, qw, sx, sw, offsets, block=(16, 16, 32), out_dtype=out_dtype)
    assert C.shape == (63, 37) and C.dtype == out_dtype
    ref, bnd = scaled_ref_and_bound(qx, qw, sx, sw, offsets, out_dtype)
    if INTERPRETED:
        assert bool(((C.double() - ref).abs() <= bnd).all())
    else:  # fp8 tensor cores keep a narrow accumulator inside each BLOCK_K group: a loose check only
        assert ((C.double() - ref).norm() / ref.norm()).item() < 2.0 ** -6
    # (E, 1, N) scales are the same scales; default block; a wrong scale (the other expert's) fails
    assert torch.equal(scaled_grouped_matmul(qx, qw, sx, sw[:, None, :], offsets, block=(16, 16, 32),
                                             out_dtype=out_dtype), C)
    if INTERPRETED:
        assert bool(((scaled_grouped_matmul(qx, qw, sx, sw, offsets).double() - ref).abs() <= bnd).all())
        wrong = scaled_grouped_matmul(qx, qw, sx, sw.roll(1, dims=0), offsets, block=(16, 16, 32))
        assert not bool(((wrong.double() - ref).abs() <= bnd).all())


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
