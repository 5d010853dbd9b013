"""A grouped GEMM in Triton for mixture-of-experts layers (chapter 10): every expert's matmul in ONE launch.

The operands (:mod:`nbhelpers.moe` builds them): ``x_perm`` (T*k, K), the routed tokens permuted so
that each expert's rows are contiguous, expert 0 first; ``w`` (E, K, N), one weight matrix per
expert; ``offsets`` (E + 1,), expert e owns rows ``offsets[e]:offsets[e+1]`` of x_perm (an empty
expert has ``offsets[e] == offsets[e+1]``). The result C (T*k, N) has row r = x_perm[r] @ w[e]
for the expert e that owns row r.

How the programs find their work, without the host. Each expert's rows are cut into M-tiles of
BLOCK_M rows: expert e has ``ceil(count_e / BLOCK_M)`` tiles, an empty expert none, so no tile
mixes two experts (the tiles of :func:`nbhelpers.moe.tile_schedule`). The launcher computes the
running total of the tile counts, ``tile_offsets`` (E + 1,) with ``tile_offsets[e]`` the first
tile of expert e (:func:`tile_offsets`: eight small torch operations on the offsets' device for
int64 offsets, seven for int32 ones, :data:`TILE_LOOKUP_LAUNCHES`). The
grid is 1-D and sized by an upper bound that needs no value from the device: with R = T*k rows,
at most ``min(R, (R + E (BLOCK_M - 1)) // BLOCK_M)`` tiles (:func:`max_tiles`; at most
``cdiv(R, BLOCK_M) + E``), times ``cdiv(N, BLOCK_N)`` column blocks. Expert e owns the programs
``tile_offsets[e] * cdiv(N, BLOCK_N)`` up to ``tile_offsets[e + 1] * cdiv(N, BLOCK_N)``; a program
past the last tile runs no K step and stores nothing (a loop of zero trips rather than an early
``return``: with Triton 3.7.1 the early return cost 24 to 35 registers on sm_90 and made the
128 x 256 and the 128 x 128 (4 warps) tiles spill on sm_80). Each program finds its expert by a
search over the E tile ends (:func:`expert_tile_of`: one vector load of ``tile_offsets[1:]``, and
the expert is the number of ends at or before its tile), then its rows and its column block. So
a call reads no device value on the host: no ``.item()``, no copy back, nothing the launch has to
wait for, and the launch does the same work for any routing of R rows, which is what lets a CUDA
graph capture it once and replay it with other offsets.

Program order inside an expert (GROUP_M, as :func:`nbhelpers.kernels.gemm.tile_of` orders a plain
GEMM): an expert's programs run down a group of GROUP_M M-tiles, column block by column block,
then move to the next group. Programs that run at the same time (a wave: one or two per SM)
then share both the expert's x panels (BLOCK_M x K) and its w panels (K x BLOCK_N): with GROUP_M
at least the expert's tile count, a wave reads each of its x panels once for all the columns it
covers. In a 2-D grid (M-tile, column block) with the tile index fastest, consecutive programs
sweep every expert's tiles at one column block, so each x panel is read again for every column
block: cdiv(N, BLOCK_N) times. :func:`program_tiles` lists the order in Python;
:mod:`nbhelpers.l2_model` counts what each order costs in DRAM traffic: for DeepSeek-V3's up
projection (K = 7168, N = 2048, 256 experts, top-8) with 128 x 128 or 128 x 256 tiles, the default
GROUP_M = 8 models within 2 % of the ideal bytes up to 4,096 tokens and 12-22 % above it at 16,384,
the 2-D grid order 1.4-1.9 times the ideal at 4,096 and 2.4-4.0 times at 16,384 (chapter 10 has
the table and the model's assumptions). The arithmetic of a tile
does not depend on the order: the result is bit-identical for any GROUP_M and any order in which
the programs run.

Each program computes rows row_start .. row_start + BLOCK_M (masked at its expert's end row; the
next expert's rows start there) times columns pid_n * BLOCK_N .. of w[expert], with an fp32
accumulator over K in BLOCK_K steps (masked at the ragged ends of N and K, the missing entries read
as zero) and one cast to the output type in the epilogue, exactly like
:func:`nbhelpers.kernels.gemm.matmul_kernel`. Pointer offsets are computed in int64:
``expert * E``-strides exceed 2**31 elements at DeepSeek-V3 sizes (256 x 7168 x 2048 = 3.8e9).

The row mask at the expert's end is what keeps one expert's tile from writing the next expert's
rows with the wrong weights. Without it, on a GPU, the result depends on which program stores last
(a race); in Triton's interpreter, which runs the programs one after another in grid order
(measured with Triton 3.7.1), the next expert's own tile happens to overwrite the damage, so
tests/test_kernels_grouped_gemm.py also runs the programs in reverse and shuffled orders.

Offsets. Host offsets (a list, a numpy array, or a tensor on another device than x_perm, e.g. the
CPU) are validated as :func:`nbhelpers.moe.check_offsets` says and copied to the device: one
host-to-device copy per call. Offsets that are already a tensor on x_perm's device (int32 or int64,
shape (E + 1,)) are checked for shape and dtype only: reading their values would make the host
wait for the device, so that they start at 0, do not decrease and end at T*k is the caller's
promise. The kernel stays inside x_perm, w and C for ANY values: :func:`tile_offsets` clamps the
offsets to [0, T*k] and takes their running maximum before counting tiles (so the tile offsets
start at 0, never decrease and stay below the grid's bound), each program clamps its expert to
[0, E) and its rows to [offsets[e], offsets[e+1]] within [0, T*k], and both loads and stores are
masked to those rows. Offsets that break the promise give wrong rows (some not written), never an
out-of-bounds access (tests/test_kernels_grouped_gemm.py checks it with guard zones).

Tile sizes: ``block=(BLOCK_M, BLOCK_N, BLOCK_K)`` or ``block=None``. On a GPU ``block=None`` times
every configuration in :data:`GPU_CONFIGS` once per (E, N, K, dtypes, power-of-two bucket of T*k,
GROUP_M) with :func:`nbhelpers.timing.tuning_ms` (the benchmarks' timer: do_bench's median, where
Triton 3.7.1's default is the mean) and keeps the fastest; the tile offsets depend on BLOCK_M, so
each candidate computes its own. In the interpreter (autotuning needs a GPU) ``block=None`` is
:data:`INTERPRETER_CONFIG`.

The interpreter's gaps are handled as :mod:`nbhelpers.kernels.gemm` handles them (see
:mod:`nbhelpers.kernels`): bf16 and fp16 inputs are upcast to float32 before an interpreted launch
(exact, and so are the products), and a bf16 output is stored as fp32 and rounded by torch
(nearest-even), because the interpreter's own fp32 -> bf16 cast truncates.

Also here: :func:`scaled_grouped_matmul` (:func:`scaled_grouped_matmul_kernel`), the same kernel on
fp8 operands with chapter 06's scales, one per row of x_perm and one per (expert, column) of w,
applied once in the epilogue (they are constant along K). Its expert weights must be K-major: an
(E, K, N) tensor whose K axis has stride 1, i.e. the transposed view ``qw_nk.transpose(1, 2)`` of
a contiguous (E, N, K) tensor (:func:`k_major` converts once, when the weights are quantized).
Hopper's fp8 tensor-core instruction (wgmma) takes both operands K-major from shared memory; with
w stored (E, K, N) N-major the compiler transposes the w tile on its way in, through registers,
and that operand gets no asynchronous copies. Compiled for sm_90 with Triton 3.7.1 (the default
64 x 64 x 128 tile, 4 warps, 3 stages, K = 7168, N = 2048) and counted in the PTX: with w N-major,
12 ``cp.async.cg`` copies in 3 commit groups (x's only: w is loaded into registers and written to
shared memory by 70 ``st.shared``), 32 KB of shared memory; with w K-major, 24 copies in 6 commit
groups (x and w pipelined alike), 6 ``st.shared``, 48 KB, 104 registers against the N-major 128;
no spills (chapter 10 compiles both with :func:`nbhelpers.families.grouped_gemm.fp8_layout_cases`). The bf16
kernel takes w in any layout (16-bit wgmma reads either major).

GPU status: the bf16 path (CUDA tensors, the tuner, bf16 on tensor cores) has run on an H100 SXM
with Triton 3.6.0 and torch 2.11.0 (benchmarks/results/grouped_gemm_nvidia-h100-80gb-hbm3.json,
2026-12-06: every output checked against torch's grouped_mm before it was timed). The fp8 kernel
and a CUDA-graph replay have not run on a GPU yet; they compile for sm_90 with Triton 3.6.0 and
3.7.1, and the tests marked GPU-only check them when a GPU is there (the capture after a warm-up
call: with ``block=None`` the first call of a key compiles and tunes, and the tuner's timing
synchronises, which a capture does not allow). The kept config and every config's tuning time are
readable afterwards (:func:`tuned_config`); the benchmark records them from its next run on.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ..moe import check_expert_gemm_operands, check_offsets
from ..occupancy import occupancy
from ..perf_model import GPU, H200, Launch, Prediction, predict, stages_in_flight
from ..recipes import Recipe, ScaleKind
from ..timing import tuning_ms
from ..validation import group_m as check_group_m
from ..validation import positive_int
from . import INTERPRETED, require_fp8_support
from .gemm import INPUT_PRECISIONS
from .launch_checks import FP8_DTYPES, check_block, check_scale, require_kernel_device
from .operands import RecipeSupport

__all__ = [
    "expert_tile_of",
    "grouped_matmul_kernel",
    "grouped_matmul",
    "scaled_grouped_matmul_kernel",
    "scaled_grouped_matmul",
    "tile_offsets",
    "TILE_LOOKUP_LAUNCHES",
    "predicted",
    "fastest_predicted",
    "tuned_config",
    "config_name",
    "TUNED_LABEL",
    "max_tiles",
    "program_tiles",
    "k_major",
    "GPU_CONFIGS",
    "INTERPRETER_CONFIG",
    "FP8_DEFAULT_BLOCK",
    "DEFAULT_GROUP_M",
    "SCALED_GROUPED_RECIPES",
]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_OFFSET_DTYPES = (torch.int32, torch.int64)


def _grouped_problem(rx: Recipe, rw: Recipe) -> str | None:
    if rx.block != (1, None):
        return f"x's block {rx.block} is not per row (1, None)"
    if rw.block != (None, 1):
        return f"the weights' block {rw.block} (on each expert's (K, N)) is not per column (None, 1)"
    return None


#: what :func:`scaled_grouped_matmul` runs: fp8 elements, an fp32 scale per row of x and per
#: expert and output column of w (a weight stored (N, K) and quantized per row, transposed)
SCALED_GROUPED_RECIPES = RecipeSupport(
    "scaled_grouped_matmul",
    elements=("e4m3fn", "e5m2"),
    scales=(ScaleKind.FP32,),
    blocks="x per row (1, None), each expert's w (K, N) per column (None, 1)",
    block_problem=_grouped_problem,
    example="'fp8 e4m3 per-row' for x, and for w as kernel_operand(..., transpose=True) gives it",
)

#: GROUP_M of :func:`grouped_matmul` and :func:`scaled_grouped_matmul` unless told otherwise (as chapter 09's GEMM)
DEFAULT_GROUP_M = 8


@triton.jit
def expert_tile_of(
    pid,
    off_ptr,
    tile_off_ptr,
    num_rows,
    num_experts,
    N,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_E: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """Program number -> (expert, row_start, row_end, pid_n): the expert, the first row of its M-tile,
    the end of its expert's rows (clamped to [0, num_rows]) and its column block. Meaningful for
    pid < tile_off[E] * cdiv(N, BLOCK_N); BLOCK_E >= E, a power of two. tile_off must start at 0 and
    never decrease (the launcher's :func:`tile_offsets` does both): then row_start >= 0."""
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tile = pid // num_pid_n  # expert e owns tiles tile_off[e] .. tile_off[e + 1] - 1
    # the search: the expert of this tile is the number of experts whose tiles end at or before it
    e = tl.arange(0, BLOCK_E)
    ends = tl.load(tile_off_ptr + 1 + e, mask=e < num_experts, other=0)
    expert = tl.sum(((ends <= tile) & (e < num_experts)).to(tl.int32), axis=0)
    expert = tl.minimum(expert, num_experts - 1)
    first_tile = tl.load(tile_off_ptr + expert)
    num_pid_m = tl.load(tile_off_ptr + expert + 1) - first_tile
    # inside the expert: down GROUP_M tiles, column block by column block (gemm.tile_of's order)
    local = pid - first_tile * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (local // num_pid_in_group) * GROUP_M
    group_size_m = tl.maximum(tl.minimum(num_pid_m - first_pid_m, GROUP_M), 1)  # >= 1 for idle programs too
    pid_m = first_pid_m + (local % num_pid_in_group) % group_size_m
    pid_n = (local % num_pid_in_group) // group_size_m
    # the expert's rows, clamped so that no offsets value can point outside x_perm or C
    row_lo = tl.minimum(tl.maximum(tl.load(off_ptr + expert).to(tl.int64), 0), num_rows)
    row_end = tl.minimum(tl.maximum(tl.load(off_ptr + expert + 1).to(tl.int64), row_lo), num_rows)
    row_start = row_lo + pid_m.to(tl.int64) * BLOCK_M
    return expert.to(tl.int64), row_start, row_end, pid_n


@triton.jit
def grouped_matmul_kernel(
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
    """One BLOCK_M x BLOCK_N tile of one expert's product x_perm[rows of e] @ w[e], accumulated in
    fp32 over K and cast once in the epilogue. off_ptr: the (E + 1,) row offsets; tile_off_ptr: the
    (E + 1,) int32 tile offsets (:func:`tile_offsets`). Grid: (max_tiles * cdiv(N, BLOCK_N),), the
    programs past the last tile do nothing."""
    pid = tl.program_id(axis=0)
    # the grid is an upper bound on the tiles: a program past the last one runs no K step, stores nothing
    live = pid < tl.load(tile_off_ptr + num_experts) * tl.cdiv(N, BLOCK_N)
    k_end = tl.where(live, K, 0)
    # the lookup: this program's expert, rows and column block, from the offsets alone
    expert, row_start, row_end, pid_n = expert_tile_of(
        pid, off_ptr, tile_off_ptr, num_rows, num_experts, N, BLOCK_M, BLOCK_N, BLOCK_E, GROUP_M
    )

    offs_m = row_start + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = (offs_m < row_end) & live  # this expert's rows only: the next expert's start at row_end
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + expert * stride_we + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k_end, BLOCK_K):
        x = tl.load(x_ptrs, mask=row_ok[:, None] & (offs_k[None, :] < K - k0), other=0.0)
        w = tl.load(w_ptrs, mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision=INPUT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    # the epilogue: one cast of the fp32 tile, stored only inside this expert's rows
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n[None, :] < N))


@triton.jit
def scaled_grouped_matmul_kernel(
    x_ptr,
    w_ptr,
    c_ptr,
    off_ptr,
    tile_off_ptr,
    sx_ptr,
    sw_ptr,
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
    stride_swe,
    stride_swn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """:func:`grouped_matmul_kernel` for fp8 operands with chapter 06's scales: x_perm ~ diag(sx) qx
    (one scale per row) and w[e] ~ qw[e] diag(sw[e]) (one scale per expert and column). Both are
    constant along K, so the K loop sums the raw fp8 products in fp32 and the epilogue applies them
    once, fl32(fl32(acc * sx) * sw), in the order of nbhelpers.scaled_gemm's reference. w is K-major
    (stride_wk == 1): each (BLOCK_K, BLOCK_N) tile is read K-contiguous, as the fp8 dot wants it. On
    a GPU the fp8 tl.dot is promoted to fp32 every BLOCK_K products (max_num_imprecise_acc)."""
    pid = tl.program_id(axis=0)
    live = pid < tl.load(tile_off_ptr + num_experts) * tl.cdiv(N, BLOCK_N)
    k_end = tl.where(live, K, 0)
    expert, row_start, row_end, pid_n = expert_tile_of(
        pid, off_ptr, tile_off_ptr, num_rows, num_experts, N, BLOCK_M, BLOCK_N, BLOCK_E, GROUP_M
    )

    offs_m = row_start + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = (offs_m < row_end) & live
    col_ok = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + expert * stride_we + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k_end, BLOCK_K):
        x = tl.load(x_ptrs, mask=row_ok[:, None] & (offs_k[None, :] < K - k0), other=0.0)
        w = tl.load(w_ptrs, mask=(offs_k[:, None] < K - k0) & col_ok[None, :], other=0.0)
        acc = tl.dot(x, w, acc, max_num_imprecise_acc=BLOCK_K)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    sx = tl.load(sx_ptr + offs_m, mask=row_ok, other=0.0)
    sw = tl.load(sw_ptr + expert * stride_swe + offs_n * stride_swn, mask=col_ok, other=0.0)
    c = (acc * sx[:, None]) * sw[None, :]
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps). BLOCK_M 64 wastes less of the last tile of
# an expert with few rows (many experts, few tokens each); 128 reuses each w panel more when the
# experts are full. BLOCK_K 64: a 128-byte row of a bf16 tile, as in kernels.gemm. BLOCK_M 16 and
# 32 are the decode tiles (chapter 10, section 6): an expert that sees a few rows computes a
# quarter or an eighth of the padding a 64-row tile would; on sm_90 they compile to mma.sync, not
# wgmma (64 rows per warpgroup). The tuner times every config per power-of-two bucket of T*k, so
# the batch chooses: a decode bucket gets the small tiles where they are faster.
GPU_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_stages=st, num_warps=w)
    for bm, bn, bk, st, w in [
        (128, 256, 64, 3, 8),
        (128, 128, 64, 4, 8),
        (128, 128, 64, 3, 4),
        (64, 256, 64, 4, 8),
        (64, 128, 64, 4, 4),
        (64, 64, 64, 4, 4),
        (32, 128, 64, 4, 4),
        (16, 128, 64, 4, 4),
    ]
]
#: the one configuration ``block=None`` uses in the interpreter. The interpreter's cost is mostly per
#: program, so fewer, larger tiles are faster: at T*k = 512, E = 8, K = 256, N = 128 one call took
#: about 0.3 s with 64^3 tiles against 1.8-3 s with 32^3 and 11-13 s with 16^3 (2-core CPU, Triton 3.7.1)
INTERPRETER_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}
#: the fp8 kernel's block when ``block=None`` (on a GPU and in the interpreter; not tuned)
FP8_DEFAULT_BLOCK = (64, 64, 128)

# block=None on a GPU: {(E, N, K, dtype, out_dtype, precision, rows bucket, GROUP_M): config}
_TUNED: dict[tuple, triton.Config] = {}
# the same key -> each config's tuning time in ms, by :func:`config_name` (what the tuner chose from)
_TUNING_MS: dict[tuple, dict[str, float]] = {}
# the kernels' 1-D grid and int32 program arithmetic: programs and rows stay below this
_INT32_LIMIT = 2**31 - 1


# ------------------------------------------------------------------ the schedule, on the device


def max_tiles(num_rows: int, num_experts: int, block_m: int) -> int:
    """The most M-tiles ``num_rows`` rows can need over ``num_experts`` experts: sum of
    ceil(n_e / block_m) is at most (rows + E (block_m - 1)) // block_m (each expert wastes at most
    block_m - 1 rows of its last tile) and at most rows (a tile holds at least one row). The grid is
    sized by it, so the launch does not depend on the routing."""
    R, E, bm = (int(v) for v in (num_rows, num_experts, block_m))
    return min(R, (R + E * (bm - 1)) // bm)


def tile_offsets(offsets: torch.Tensor, num_rows: int, block_m: int) -> torch.Tensor:
    """(E + 1,) int32 on ``offsets``' device: 0, then the running total of the experts' tile counts
    ceil(count_e / block_m), so expert e owns tiles ``tile_offsets[e]:tile_offsets[e + 1]``. Torch
    operations on the device, none of which reads a value back to the host (a CUDA graph can
    capture them). The offsets are first clamped to [0, num_rows] and made non-decreasing (a running
    maximum): for valid offsets that changes nothing, and for any others the result still starts at
    0, never decreases and stays within :func:`max_tiles`, which is what the kernel's lookup needs
    to stay inside its operands."""
    # clamp first, then int32 (num_rows < 2**31): an int64 value past int32 must not wrap. From
    # here on every tensor is int32, so the scan reads and writes int32 and casts nothing inside
    off = offsets.clamp(0, num_rows).to(torch.int32)
    off = torch.cummax(off, dim=0).values
    tiles = torch.div(off[1:] - off[:-1] + (block_m - 1), block_m, rounding_mode="floor")
    out = torch.zeros(off.shape[0], dtype=torch.int32, device=off.device)
    torch.cumsum(tiles, 0, dtype=torch.int32, out=out[1:])
    return out


#: the torch operations :func:`tile_offsets` runs on int64 offsets before the GEMM, each at least
#: one kernel on a GPU: clamp, cast to int32, cummax, subtract, add, div, zeros, cumsum (the slices
#: are views; int32 offsets skip the cast). The host pays a dispatch and a launch for each
TILE_LOOKUP_LAUNCHES = 8


def predicted(
    loads,
    K: int,
    N: int,
    block: tuple[int, int, int],
    num_warps: int,
    num_stages: int,
    registers: int,
    shared: int,
    in_bytes: int = 2,
    out_bytes: int = 2,
    group_m: int = DEFAULT_GROUP_M,
    cuda_graph: bool = False,
    gpu: GPU = H200,
) -> Prediction:
    """What :mod:`nbhelpers.perf_model` predicts for one call of :func:`grouped_matmul` on experts
    with ``loads`` rows each (bf16 peak): one program per (BLOCK_M, BLOCK_N) tile of each expert,
    so the FLOPs are the *computed* rows' (each expert's last tile is full: an expert with 3 rows
    under a 64-row tile computes 64); bytes from HBM as for one GEMM per expert (each w panel read
    once per row of its tiles, each x panel once per column, divided by ``group_m``; never less
    than each operand once; the output once). Then the host: the GEMM's launch and the
    :data:`TILE_LOOKUP_LAUNCHES` small kernels of the tile lookup each cost ``gpu.launch_s``,
    unless the call is replayed from a CUDA graph (``cuda_graph``: one launch for all)."""
    loads = [int(v) for v in np.asarray(loads).reshape(-1)]
    if not loads or min(loads) < 0 or sum(loads) == 0:
        raise ValueError(f"loads must be the experts' row counts, not all zero, got {loads[:8]}...")
    bm, bn, bk = block
    tiles_n = -(-N // bn)
    tiles_m = [-(-n // bm) for n in loads]
    read = 0.0
    for n, t in zip(loads, tiles_m):
        if n:
            panels = (n * K * tiles_n + K * N * t) * in_bytes / group_m
            read += max(panels, (n * K + K * N) * in_bytes)
    computed = sum(tiles_m) * bm
    per_sm = occupancy(registers, num_warps, shared).blocks
    if per_sm == 0:
        raise ValueError(f"a program of {num_warps} warps, {registers} registers and {shared} B does not fit an SM")
    ahead = stages_in_flight(num_stages)  # the K loop's loads in flight ahead of the step computed
    launch = Launch(sum(tiles_m) * tiles_n, per_sm, (bm + bn) * bk * in_bytes, -(-K // bk), ahead)
    p = predict(gpu, launch, read + sum(loads) * N * out_bytes, 2.0 * computed * N * K, "bf16", bytes_loaded=read)
    host = 0.0 if cuda_graph else TILE_LOOKUP_LAUNCHES * gpu.launch_s
    return Prediction(p.seconds + host, p.bound, p.terms, p.launch_s + host)


#: the compile table's label of the tuner's configs (:mod:`nbhelpers.families.grouped_gemm`)
TUNED_LABEL = "bf16 -> bf16, DeepSeek-V3 up projection"


def fastest_predicted(
    compile_rows, loads, K: int, N: int, gpu: GPU = H200, cuda_graph: bool = False, target: str = "sm_90"
) -> tuple[Prediction | None, str | None]:
    """The model's fastest of the tuner's configs for experts with ``loads`` rows on ``gpu``
    (:func:`predicted`), each at the registers and shared memory the compile table
    ``compile_rows`` records for ``target`` (the rows of :data:`TUNED_LABEL` that compiled, are
    default and do not spill): (its prediction, its config such as "128x256x64 w8 s3"), or
    (None, None) when the table has no such row. The tuner on a GPU keeps the fastest it measures;
    this is the config the model would keep."""
    best: tuple[Prediction | None, str | None] = (None, None)
    for r in compile_rows:
        if (r.get("kernel"), r.get("label"), r.get("target"), r.get("status")) != (
            "grouped_matmul_kernel",
            TUNED_LABEL,
            target,
            "ok",
        ):
            continue
        if not r.get("default") or r.get("spill_stores"):
            continue
        block = tuple(int(v) for v in r["config"].split()[0].split("x"))
        p = predicted(
            loads, K, N, block, r["num_warps"], r["num_stages"], r["registers"], r["shared"],
            cuda_graph=cuda_graph, gpu=gpu,
        )  # fmt: skip
        if best[0] is None or p.seconds < best[0].seconds:
            best = (p, r["config"].split(" (")[0])
    return best


def program_tiles(offsets, N: int, block_m: int, block_n: int, group_m: int = DEFAULT_GROUP_M) -> np.ndarray:
    """The work of each program of :func:`grouped_matmul_kernel` in launch order, in Python (the
    mirror of :func:`expert_tile_of`, for counting what a wave of programs reads): an int64 array
    (programs, 4) of (expert, row_start, row_end, pid_n), one row per program that has a tile (the
    idle programs past the last tile are left out). ``offsets``: valid host offsets (E + 1,)."""
    arr = np.asarray(offsets)
    off = check_offsets(arr, int(arr[-1]) if arr.ndim == 1 and arr.size else 0)
    bm, bn, g = positive_int("block_m", block_m), positive_int("block_n", block_n), check_group_m(group_m)
    num_pid_n = -(-positive_int("N", N) // bn)
    out = []
    for e in range(off.size - 1):
        num_pid_m = -(-int(off[e + 1] - off[e]) // bm)
        in_group = g * num_pid_n
        for local in range(num_pid_m * num_pid_n):
            first = (local // in_group) * g
            size = min(num_pid_m - first, g)
            pid_m, pid_n = first + (local % in_group) % size, (local % in_group) // size
            out.append((e, int(off[e]) + pid_m * bm, int(off[e + 1]), pid_n))
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def _device_offsets(offsets, num_rows: int, num_experts: int, device) -> torch.Tensor:
    """The offsets as the kernel reads them: a tensor on ``device``. A tensor already there is
    checked for dtype and shape only (no value is read: the caller promises them); anything else
    is validated on the host (:func:`nbhelpers.moe.check_offsets`) and copied once."""
    if num_experts < 1:
        raise ValueError("w has no experts (shape (0, K, N)): a grouped GEMM needs at least one")
    if isinstance(offsets, torch.Tensor) and offsets.device == torch.device(device):
        if offsets.dtype not in _OFFSET_DTYPES:
            raise TypeError(f"offsets on the device must be torch.int32 or torch.int64, got {offsets.dtype}")
        if tuple(offsets.shape) != (num_experts + 1,):
            raise ValueError(
                f"offsets must have shape (E + 1,) = ({num_experts + 1},) for w's {num_experts} "
                f"experts, got {tuple(offsets.shape)}"
            )
        return offsets.contiguous()
    off = check_offsets(offsets, num_rows, num_experts=num_experts)
    return torch.as_tensor(off, device=device)


def _check_sizes(rows: int, E: int, N: int, block_m: int, block_n: int) -> int:
    """The grid of a launch: max_tiles * cdiv(N, BLOCK_N) programs, checked against int32."""
    programs = max_tiles(rows, E, block_m) * triton.cdiv(N, block_n)
    if rows + block_m > _INT32_LIMIT or programs > _INT32_LIMIT:
        raise ValueError(
            f"{rows} rows and N = {N} need {programs} programs of {block_m} x {block_n}: the kernel's "
            f"int32 program and row numbers hold at most {_INT32_LIMIT}; split the batch"
        )
    return programs


def _launch(x, w, c, off, cfg: dict, input_precision: str, group_m: int, kernel=None, **launch_opts) -> None:
    """One launch of :func:`grouped_matmul_kernel` (or of ``kernel``, a kernel with its signature:
    the tests launch their deliberately wrong kernels exactly this way), the tile offsets computed
    here, on the device."""
    E, K, N = w.shape
    rows = x.shape[0]
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    grid = (_check_sizes(rows, E, N, bm, bn),)
    if grid[0] == 0:
        return
    (grouped_matmul_kernel if kernel is None else kernel)[grid](
        x,
        w,
        c,
        off,
        tile_offsets(off, rows, bm),
        rows,
        E,
        N,
        K,
        x.stride(0),
        x.stride(1),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        c.stride(0),
        c.stride(1),
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=cfg["BLOCK_K"],
        BLOCK_E=triton.next_power_of_2(E),
        GROUP_M=group_m,
        INPUT_PRECISION=input_precision,
        **launch_opts,
    )


def config_name(cfg: triton.Config) -> str:
    """A tuner's config as the compile table names it: ``"128x256x64 w8 s3"`` (BLOCK_M x BLOCK_N
    x BLOCK_K, warps, stages)."""
    kw = cfg.kwargs
    return f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} w{cfg.num_warps} s{cfg.num_stages}"


def _tuning_key(rows: int, E: int, N: int, K: int, x_dtype, c_dtype, input_precision: str, group_m: int) -> tuple:
    # one tuning per power-of-two bucket of the rows T*k
    return (E, N, K, x_dtype, c_dtype, input_precision, 1 << max(rows - 1, 0).bit_length(), group_m)


def tuned_config(
    x_perm: torch.Tensor,
    w: torch.Tensor,
    out_dtype: torch.dtype = torch.float32,
    input_precision: str = "ieee",
    group_m: int = DEFAULT_GROUP_M,
) -> tuple[str, dict[str, float]] | None:
    """What the tuner of :func:`grouped_matmul` (``block=None``, on a GPU) kept for a call with
    these operands and arguments: ``(config_name, {config_name: tuning ms})``, the config it runs
    and every config's time when it was tuned (:func:`nbhelpers.timing.tuning_ms`); None when no
    call of that key has been tuned in this process (always None in the interpreter)."""
    E, K, N = w.shape
    key = _tuning_key(x_perm.shape[0], E, N, K, x_perm.dtype, out_dtype, input_precision, group_m)
    best = _TUNED.get(key)
    return None if best is None else (config_name(best), dict(_TUNING_MS.get(key, {})))


def _tuned_launch(x, w, c, off, input_precision: str, group_m: int) -> None:
    """block=None on a GPU: time each GPU config once per key (:func:`nbhelpers.timing.tuning_ms`,
    the median), keep the fastest (and every config's time: :func:`tuned_config`). Each candidate
    computes its own tile offsets on the device."""
    E, K, N = w.shape
    rows = x.shape[0]
    key = _tuning_key(rows, E, N, K, x.dtype, c.dtype, input_precision, group_m)

    def run(cfg):
        _launch(x, w, c, off, cfg.kwargs, input_precision, group_m, num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    best = _TUNED.get(key)
    if best is None:
        times = []
        for cfg in GPU_CONFIGS:
            try:
                times.append((tuning_ms(lambda cfg=cfg: run(cfg)), cfg))
            except triton.runtime.errors.OutOfResources:  # too much shared memory on this GPU
                continue
        if not times:
            raise RuntimeError(f"no configuration of GPU_CONFIGS fits this GPU for E={E}, N={N}, K={K}")
        _TUNING_MS[key] = {config_name(cfg): float(ms) for ms, cfg in times}
        best = _TUNED[key] = min(times, key=lambda tc: tc[0])[1]
    run(best)


def _no_schedule(schedule) -> None:
    if schedule is not None:
        raise TypeError(
            "schedule= is no longer accepted: the kernel computes every program's tile on the device "
            "from the offsets (no host-built schedule, no copy per call). Drop the argument; "
            "nbhelpers.moe.tile_schedule still lists the same tiles on the host."
        )


# ------------------------------------------------------------------ the launchers


def grouped_matmul(
    x_perm: torch.Tensor,
    w: torch.Tensor,
    offsets,
    block: tuple[int, int, int] | None = None,
    out_dtype: torch.dtype = torch.float32,
    schedule: None = None,
    input_precision: str = "ieee",
    group_m: int = DEFAULT_GROUP_M,
) -> torch.Tensor:
    """C = the grouped product, by :func:`grouped_matmul_kernel` in one launch: (T*k, N) of ``out_dtype``.

    x_perm: (T*k, K), rows grouped by expert (expert 0 first). w: (E, K, N), expert e computes
    ``x_e @ w[e]``; same dtype as x_perm (float32, bfloat16 or float16) and same device (CUDA for
    compiled kernels; any device in the interpreter); any strides. offsets: (E + 1,) cumulative row
    counts. On the host (a list, a numpy array, a tensor on another device) they are validated by
    :func:`nbhelpers.moe.check_offsets` (start at 0, non-decreasing, end at T*k) and copied to the
    device; as an int32 or int64 tensor on x_perm's device they are used as they are, with no host
    synchronisation: only their shape and dtype are checked, their values are the caller's promise
    (the kernel never leaves its operands whatever they are; see the module docstring). block:
    (BLOCK_M, BLOCK_N, BLOCK_K), powers of two from 16 to 256, or None (tuned on a GPU,
    :data:`INTERPRETER_CONFIG` in the interpreter). out_dtype: float32 (default), bfloat16 or
    float16: the fp32 accumulator tile is cast once in the epilogue. input_precision: ``"ieee"`` or
    ``"tf32"`` (only matters for float32 inputs on a GPU). group_m: M-tiles per group of the
    program order inside an expert (the result does not depend on it). schedule: no longer
    accepted (the kernel builds its schedule on the device); anything but None is a TypeError.

    Rows of C are returned in x_perm's order (un-permuting is :mod:`nbhelpers.moe`'s job). T*k = 0
    gives an empty (0, N) tensor. The float64 reference is :func:`nbhelpers.moe.grouped_matmul_ref`.
    """
    _no_schedule(schedule)
    # shapes, K, dtype match, device match: the checks every expert GEMM shares (no values read)
    E, K, N = check_expert_gemm_operands(x_perm, w)
    if x_perm.dtype not in _DTYPES:
        raise TypeError(
            f"x_perm and w have dtype {x_perm.dtype}; accepted: torch.float32, torch.bfloat16, torch.float16"
        )
    require_kernel_device(x_perm.device)
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    group_m = check_group_m(group_m)
    rows = x_perm.shape[0]
    off = _device_offsets(offsets, rows, E, x_perm.device)
    if block is not None:
        block = check_block(block)
    cfg = None
    if block is not None or INTERPRETED:
        cfg = dict(INTERPRETER_CONFIG) if block is None else dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), block))

    x = x_perm
    if INTERPRETED and x.dtype != torch.float32:
        x, w = x.float(), w.float()  # exact; the interpreter computes bf16 on raw bits
    # the interpreter's fp32 -> bf16 cast truncates: keep the fp32 tile, round it with torch below
    store_dtype = torch.float32 if INTERPRETED and out_dtype == torch.bfloat16 else out_dtype
    c = torch.empty((rows, N), dtype=store_dtype, device=x.device)
    if rows == 0 or N == 0:
        return c.to(out_dtype)
    if K == 0:
        return c.zero_().to(out_dtype)
    if cfg is None:
        _tuned_launch(x, w, c, off, input_precision, group_m)
    else:
        _launch(x, w, c, off, cfg, input_precision, group_m)
    return c.to(out_dtype)


def k_major(w: torch.Tensor) -> torch.Tensor:
    """The same (E, K, N) weights with the K axis contiguous (stride 1): the transposed view of a
    contiguous (E, N, K) copy, as :func:`scaled_grouped_matmul` wants them. One copy, to be made
    once when the weights are stored or quantized, not per call; ``w`` itself if it already is."""
    if not isinstance(w, torch.Tensor) or w.ndim != 3:
        raise ValueError(f"w must be a 3-D torch.Tensor (E, K, N), got {getattr(w, 'shape', type(w).__name__)}")
    if w.shape[1] <= 1 or w.stride(1) == 1:
        return w
    return w.transpose(1, 2).contiguous().transpose(1, 2)


def scaled_grouped_matmul(
    qx: torch.Tensor,
    qw: torch.Tensor,
    sx: torch.Tensor,
    sw: torch.Tensor,
    offsets,
    block: tuple[int, int, int] | None = None,
    out_dtype: torch.dtype = torch.float32,
    schedule: None = None,
    group_m: int = DEFAULT_GROUP_M,
    recipes: tuple[Recipe | str, Recipe | str] | None = None,
) -> torch.Tensor:
    """C ~ the grouped product of the dequantized operands, by :func:`scaled_grouped_matmul_kernel`:
    row r of expert e is ``sx[r] * (qx[r] @ qw[e]) * sw[e]``, (T*k, N) of ``out_dtype``.

    qx: (T*k, K) and qw: (E, K, N), both torch.float8_e4m3fn (or both float8_e5m2), grouped as in
    :func:`grouped_matmul`. qw must be K-major (``qw.stride(1) == 1``): the transposed view
    ``qw_nk.transpose(1, 2)`` of a contiguous (E, N, K) tensor, the layout Hopper's fp8 tensor cores
    read both operands in (see the module docstring); :func:`k_major` makes one from any layout.
    sx: float32 (T*k, 1), one scale per row of x_perm (x ~ qx * sx). sw: float32 (E, N) or
    (E, 1, N), one scale per expert and output column (w[e] ~ qw[e] * sw[e]). offsets, group_m,
    schedule: as in :func:`grouped_matmul`; block: as there, None is one fixed
    :data:`FP8_DEFAULT_BLOCK` on a GPU (NOT tuned, and not yet run on a GPU) and in the interpreter.
    out_dtype: float32 or bfloat16. In the interpreter the fp8 operands are upcast to float32
    (exact, as :mod:`nbhelpers.kernels.scaled_gemm` does) and a bf16 output is rounded by torch.
    recipes: the recipes (x, w) the operands were quantized by, w's in the (K, N) orientation,
    checked against :data:`SCALED_GROUPED_RECIPES` and the dtypes; None: not checked.
    :func:`~nbhelpers.kernels.operands.kernel_operand` makes qx, sx and (from the stacked (E, N, K)
    quantized weights, ``transpose=True``) qw, sw and w's recipe.
    """
    _no_schedule(schedule)
    rxw = None if recipes is None else SCALED_GROUPED_RECIPES.check(recipes)
    E, K, N = check_expert_gemm_operands(qx, qw)
    if qx.dtype not in FP8_DTYPES:
        raise TypeError(
            f"qx and qw have dtype {qx.dtype}; accepted: torch.float8_e4m3fn, torch.float8_e5m2 (quantize first)"
        )
    if rxw is not None:
        SCALED_GROUPED_RECIPES.check_dtypes(*rxw, qx, qw, names=("qx", "qw"))
    require_kernel_device(qx.device)
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype!r}")
    require_fp8_support(qx.dtype, qx.device)  # an A100 cannot compile e4m3: a sentence, not a traceback
    if K > 1 and qw.stride(1) != 1:
        raise ValueError(
            f"qw must be K-major (E, K, N) with stride 1 along K, got strides {tuple(qw.stride())}: store the fp8 "
            "weights as a contiguous (E, N, K) tensor qw_nk and pass qw_nk.transpose(1, 2), or convert once with "
            "nbhelpers.kernels.grouped_gemm.k_major(qw) (a copy: do it when the weights are quantized, not per call)"
        )
    group_m = check_group_m(group_m)
    rows = qx.shape[0]
    off = _device_offsets(offsets, rows, E, qx.device)
    check_scale(sx, [(rows, 1)], "sx", "one scale per row of x_perm", qx.device)
    check_scale(sw, [(E, N), (E, 1, N)], "sw", "one scale per expert and column", qx.device)
    sw = sw.reshape(E, N)
    sx = sx.reshape(rows).contiguous()
    bm, bn, bk = check_block(block) if block is not None else FP8_DEFAULT_BLOCK
    x, w = (qx.float(), qw.float()) if INTERPRETED else (qx, qw)
    c = torch.empty((rows, N), dtype=torch.float32 if INTERPRETED else out_dtype, device=qx.device)
    if rows == 0 or N == 0:
        return c.to(out_dtype)
    if K == 0:
        return c.zero_().to(out_dtype)
    grid = (_check_sizes(rows, E, N, bm, bn),)
    if grid[0]:
        scaled_grouped_matmul_kernel[grid](
            x,
            w,
            c,
            off,
            tile_offsets(off, rows, bm),
            sx,
            sw,
            rows,
            E,
            N,
            K,
            x.stride(0),
            x.stride(1),
            w.stride(0),
            w.stride(1),
            w.stride(2),
            c.stride(0),
            c.stride(1),
            sw.stride(0),
            sw.stride(1),
            BLOCK_M=bm,
            BLOCK_N=bn,
            BLOCK_K=bk,
            BLOCK_E=triton.next_power_of_2(E),
            GROUP_M=group_m,
        )
    return c.to(out_dtype)
