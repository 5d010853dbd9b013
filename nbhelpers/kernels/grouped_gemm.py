"""A grouped GEMM in Triton for mixture-of-experts layers (chapter 10): every expert's matmul in ONE launch.

The operands (:mod:`nbhelpers.moe` builds them): ``x_perm`` (T*k, K), the routed tokens permuted so
that each expert's rows are contiguous, expert 0 first; ``w`` (E, K, N), one weight matrix per
expert; ``offsets`` (E + 1,), expert e owns rows ``offsets[e]:offsets[e+1]`` of x_perm (an empty
expert has ``offsets[e] == offsets[e+1]``). The result C (T*k, N) has row r = x_perm[r] @ w[e]
for the expert e that owns row r.

How the programs find their work. The host cuts each expert's rows into M-tiles of BLOCK_M rows
(:func:`nbhelpers.moe.tile_schedule`): tile t belongs to expert ``expert[t]``, starts at row
``row_start[t]`` and must not touch rows at or past ``row_end[t]`` (= offsets[expert + 1], the
end of its expert: the next expert's rows start there). An expert with n rows has ceil(n / BLOCK_M)
tiles, an empty expert none, so no program is launched for nothing and no tile mixes two experts.
The launch grid is 2-D, ``(num_tiles, cdiv(N, BLOCK_N))``: program (t, j) computes rows
row_start[t] .. row_start[t] + BLOCK_M (masked at row_end[t]) times columns j*BLOCK_N .. of
w[expert[t]], with an fp32 accumulator over K in BLOCK_K steps (masked at the ragged ends of N and
K, the missing entries read as zero) and one cast to the output type in the epilogue, exactly like
:func:`nbhelpers.kernels.gemm.matmul_kernel`. The tile axis is grid axis 0 (the one programs are
numbered along first), so the programs running together are consecutive M-tiles at the same column
block: the tiles of one expert share that expert's K x BLOCK_N panel of w, which is the operand a
grouped GEMM streams most (E K N elements against T k K for x). A 2-D grid keeps the lookup a
single load per program; axis 1 is limited to 65,535 blocks, far above any expert width here.

The schedule travels to the device as ONE int32 tensor of shape (3, num_tiles): rows expert,
row_start, row_end (one host-to-device copy per call). Pointer offsets are computed in int64:
``expert * E``-strides exceed 2**31 elements at DeepSeek-V3 sizes (256 x 7168 x 2048 = 3.8e9).

The row mask at row_end is what keeps one expert's tile from writing the next expert's rows with
the wrong weights. Without it, on a GPU, the result depends on which program stores last (a race);
in Triton's interpreter, which runs the programs one after another in grid order (measured with
Triton 3.7.1), the next expert's own tile happens to overwrite the damage, so
tests/test_kernels_grouped_gemm.py runs the tiles in reverse order too (the correct kernel gives
the same bits in any tile order).

Tile sizes: ``block=(BLOCK_M, BLOCK_N, BLOCK_K)`` or ``block=None``. On a GPU ``block=None`` times
every configuration in :data:`GPU_CONFIGS` once per (E, N, K, dtypes, power-of-two bucket of T*k)
with ``triton.testing.do_bench`` (``return_mode="median"``; Triton 3.7.1's default is the mean)
and keeps the fastest. It is not ``triton.autotune``: the schedule depends on BLOCK_M, so each candidate needs
its own schedule and grid, built on the host. In the interpreter (autotuning needs a GPU)
``block=None`` is :data:`INTERPRETER_CONFIG`.

The interpreter's gaps are handled as :mod:`nbhelpers.kernels.gemm` handles them (see
:mod:`nbhelpers.kernels`): bf16 and fp16 inputs are upcast to float32 before an interpreted launch
(exact, and so are the products), and a bf16 output is stored as fp32 and rounded by torch
(nearest-even), because the interpreter's own fp32 -> bf16 cast truncates.

Also here: :func:`scaled_grouped_matmul` (:func:`scaled_grouped_matmul_kernel`), the same kernel on
fp8 operands with chapter 06's scales, one per row of x_perm and one per (expert, column) of w,
applied once in the epilogue (they are constant along K).

GPU status: the compiled path (CUDA tensors, the tuner, bf16 on tensor cores) was written without a
GPU and has NOT yet been run on one; the tests marked GPU-only check it when a GPU is there.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ..moe import TileSchedule, check_expert_gemm_args, tile_schedule
from . import INTERPRETED, require_fp8_support
from .gemm import INPUT_PRECISIONS, _check_block

__all__ = [
    "grouped_matmul_kernel",
    "grouped_matmul",
    "scaled_grouped_matmul_kernel",
    "scaled_grouped_matmul",
    "schedule_tensor",
    "GPU_CONFIGS",
    "INTERPRETER_CONFIG",
]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def grouped_matmul_kernel(
    x_ptr, w_ptr, c_ptr, sched_ptr,
    num_tiles, N, K,
    stride_xm, stride_xk,
    stride_we, stride_wk, stride_wn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """Program (t, j): rows row_start[t] .. + BLOCK_M (masked at row_end[t]) of C = x_perm @ w[expert[t]],
    columns j * BLOCK_N .. (masked at N), accumulated in fp32 over K and cast once in the epilogue.
    sched_ptr: int32 (3, num_tiles), rows expert, row_start, row_end (contiguous).
    Grid: (num_tiles, cdiv(N, BLOCK_N))."""
    t = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    # the lookup: this tile's expert and its rows, from the host-built schedule
    expert = tl.load(sched_ptr + t).to(tl.int64)
    row_start = tl.load(sched_ptr + num_tiles + t).to(tl.int64)
    row_end = tl.load(sched_ptr + 2 * num_tiles + t).to(tl.int64)

    offs_m = row_start + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = offs_m < row_end  # never past this expert's last row: the next expert's rows start there
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + expert * stride_we + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
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
    x_ptr, w_ptr, c_ptr, sched_ptr, sx_ptr, sw_ptr,
    num_tiles, N, K,
    stride_xm, stride_xk,
    stride_we, stride_wk, stride_wn,
    stride_cm, stride_cn,
    stride_swe, stride_swn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """:func:`grouped_matmul_kernel` for fp8 operands with chapter 06's scales: x_perm ~ diag(sx) qx
    (one scale per row) and w[e] ~ qw[e] diag(sw[e]) (one scale per expert and column). Both are
    constant along K, so the K loop sums the raw fp8 products in fp32 and the epilogue applies them
    once, fl32(fl32(acc * sx) * sw), in the order of nbhelpers.scaled_gemm's reference. On a GPU the
    fp8 tl.dot is promoted to fp32 every BLOCK_K products (max_num_imprecise_acc)."""
    t = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    expert = tl.load(sched_ptr + t).to(tl.int64)
    row_start = tl.load(sched_ptr + num_tiles + t).to(tl.int64)
    row_end = tl.load(sched_ptr + 2 * num_tiles + t).to(tl.int64)

    offs_m = row_start + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = offs_m < row_end
    col_ok = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + expert * stride_we + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
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
# experts are full. BLOCK_K 64: a 128-byte row of a bf16 tile, as in kernels.gemm.
GPU_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_stages=st, num_warps=w)
    for bm, bn, bk, st, w in [
        (128, 256, 64, 3, 8),
        (128, 128, 64, 4, 8),
        (128, 128, 64, 3, 4),
        (64, 256, 64, 4, 8),
        (64, 128, 64, 4, 4),
        (64, 64, 64, 4, 4),
    ]
]
#: the one configuration ``block=None`` uses in the interpreter. The interpreter's cost is mostly per
#: program, so fewer, larger tiles are faster: at T*k = 512, E = 8, K = 256, N = 128 one call took
#: about 0.3 s with 64^3 tiles against 1.8-3 s with 32^3 and 11-13 s with 16^3 (2-core CPU, Triton 3.7.1)
INTERPRETER_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}

# block=None on a GPU: {(E, N, K, dtype, out_dtype, precision, rows bucket, fixed BLOCK_M): config}
_TUNED: dict[tuple, triton.Config] = {}


def schedule_tensor(schedule: TileSchedule, device) -> torch.Tensor:
    """The schedule as the kernel reads it: int32 (3, num_tiles) on ``device``, rows expert,
    row_start, row_end. One host-to-device copy."""
    packed = np.stack([np.asarray(schedule.expert), np.asarray(schedule.row_start),
                       np.asarray(schedule.row_end)]).astype(np.int32, copy=False)
    return torch.from_numpy(np.ascontiguousarray(packed)).to(device)


def _check_schedule(schedule, offsets: np.ndarray, block_m: int, num_experts: int) -> TileSchedule:
    """Cheap checks that a caller's schedule can be launched safely: its block_m, its shape and
    that every tile stays inside the rows of its own expert (so nothing is read or written out of
    bounds). Whether it covers every row is the caller's promise (tile_schedule keeps it)."""
    if not isinstance(schedule, TileSchedule):
        raise TypeError(f"schedule must be a nbhelpers.moe.TileSchedule (from tile_schedule(offsets, block_m)) "
                        f"or None, got {type(schedule).__name__}")
    if schedule.block_m != block_m:
        raise ValueError(f"schedule.block_m is {schedule.block_m} but the kernel's BLOCK_M is {block_m}: build "
                         f"the schedule with tile_schedule(offsets, {block_m}) or pass block with BLOCK_M = "
                         f"{schedule.block_m}")
    e, r0, r1 = (np.asarray(a) for a in (schedule.expert, schedule.row_start, schedule.row_end))
    if not (e.ndim == r0.ndim == r1.ndim == 1 and len(e) == len(r0) == len(r1)):
        raise ValueError("schedule.expert, row_start and row_end must be 1-D arrays of one length (one entry per "
                         f"tile), got shapes {e.shape}, {r0.shape}, {r1.shape}")
    if len(e) and (e.min() < 0 or e.max() >= num_experts):
        raise ValueError(f"schedule.expert must lie in [0, {num_experts}) (w has {num_experts} experts), "
                         f"got values from {e.min()} to {e.max()}")
    if len(e) and not (np.all(r0 >= offsets[e]) and np.all(r0 < r1) and np.all(r1 == offsets[e + 1])):
        raise ValueError("schedule does not match offsets: each tile must start inside its expert's rows "
                         "(offsets[expert] <= row_start < row_end) and end at row_end == offsets[expert + 1]; "
                         "build it with nbhelpers.moe.tile_schedule(offsets, block_m)")
    return schedule


def _launch(x, w, c, sched, cfg: dict, input_precision: str, **launch_opts) -> None:
    num_tiles = sched.shape[1]
    E, K, N = w.shape
    grid = (num_tiles, triton.cdiv(N, cfg["BLOCK_N"]))
    grouped_matmul_kernel[grid](
        x, w, c, sched, num_tiles, N, K,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2), c.stride(0), c.stride(1),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
        INPUT_PRECISION=input_precision, **launch_opts)


def _tuned_launch(x, w, c, offsets: np.ndarray, schedule, input_precision: str) -> None:
    """block=None on a GPU: time each GPU config once per key (do_bench), keep the fastest. A given
    schedule fixes BLOCK_M, so only the configs with that BLOCK_M are candidates. NOT yet run on a GPU."""
    from triton.testing import do_bench

    E, K, N = w.shape
    rows = x.shape[0]
    fixed_m = None if schedule is None else schedule.block_m
    key = (E, N, K, x.dtype, c.dtype, input_precision, 1 << max(rows - 1, 0).bit_length(), fixed_m)
    candidates = [cfg for cfg in GPU_CONFIGS if fixed_m is None or cfg.kwargs["BLOCK_M"] == fixed_m]
    if not candidates:
        raise ValueError(f"no GPU config has BLOCK_M = {fixed_m} (the schedule's block_m); GPU_CONFIGS use "
                         f"{sorted({c.kwargs['BLOCK_M'] for c in GPU_CONFIGS})}, or pass block explicitly")
    scheds = {}

    def sched_for(bm):
        if bm not in scheds:
            scheds[bm] = schedule_tensor(schedule if schedule is not None else tile_schedule(offsets, bm), x.device)
        return scheds[bm]

    def run(cfg):
        _launch(x, w, c, sched_for(cfg.kwargs["BLOCK_M"]), cfg.kwargs, input_precision,
                num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    best = _TUNED.get(key)
    if best is None:
        times = []
        for cfg in candidates:
            try:
                times.append((do_bench(lambda cfg=cfg: run(cfg), warmup=5, rep=20, return_mode="median"),
                              cfg))  # short: a tuner
            except triton.runtime.errors.OutOfResources:  # too much shared memory on this GPU
                continue
        if not times:
            raise RuntimeError(f"no configuration of GPU_CONFIGS fits this GPU for E={E}, N={N}, K={K}")
        best = _TUNED[key] = min(times, key=lambda tc: tc[0])[1]
    run(best)


def grouped_matmul(x_perm: torch.Tensor, w: torch.Tensor, offsets,
                   block: tuple[int, int, int] | None = None, out_dtype: torch.dtype = torch.float32,
                   schedule: TileSchedule | None = None, input_precision: str = "ieee") -> torch.Tensor:
    """C = the grouped product, by :func:`grouped_matmul_kernel` in one launch: (T*k, N) of ``out_dtype``.

    x_perm: (T*k, K), rows grouped by expert (expert 0 first). w: (E, K, N), expert e computes
    ``x_e @ w[e]``; same dtype as x_perm (float32, bfloat16 or float16) and same device (CUDA for
    compiled kernels; any device in the interpreter); any strides. offsets: (E + 1,) cumulative row
    counts (numpy, list or torch tensor of integers; validated by :func:`nbhelpers.moe.check_offsets`:
    starts at 0, non-decreasing, ends at T*k). block: (BLOCK_M, BLOCK_N, BLOCK_K), powers of two from
    16 to 256, or None (tuned on a GPU, :data:`INTERPRETER_CONFIG` in the interpreter; see the module
    docstring). out_dtype: float32 (default), bfloat16 or float16: the fp32 accumulator tile is cast
    once in the epilogue. schedule: a :class:`nbhelpers.moe.TileSchedule` built from these offsets
    with block_m == BLOCK_M (saves rebuilding it on every call), or None to build it here.
    input_precision: ``"ieee"`` or ``"tf32"`` (only matters for float32 inputs on a GPU).

    Rows of C are returned in x_perm's order (un-permuting is :mod:`nbhelpers.moe`'s job). T*k = 0
    gives an empty (0, N) tensor. The float64 reference is :func:`nbhelpers.moe.grouped_matmul_ref`.
    """
    # shapes, K, dtype match, device match and the offsets: the checks every expert GEMM shares
    offsets, E, K, N = check_expert_gemm_args(x_perm, w, offsets)
    if x_perm.dtype not in _DTYPES:
        raise TypeError(f"x_perm and w have dtype {x_perm.dtype}; accepted: torch.float32, torch.bfloat16, "
                        "torch.float16")
    if not INTERPRETED and x_perm.device.type != "cuda":
        raise ValueError(
            f"compiled Triton kernels need CUDA tensors, got tensors on {x_perm.device}. Without a GPU, "
            "call nbhelpers.device.setup_device() before importing nbhelpers.kernels (it sets TRITON_INTERPRET=1)."
        )
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    rows = x_perm.shape[0]
    if block is not None:
        block = _check_block(block)
    cfg = None
    if block is not None or INTERPRETED:
        cfg = dict(INTERPRETER_CONFIG) if block is None else dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), block))
    if schedule is not None:
        bm = cfg["BLOCK_M"] if cfg is not None else schedule.block_m
        _check_schedule(schedule, offsets, bm, E)

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
        _tuned_launch(x, w, c, offsets, schedule, input_precision)
    else:
        sched = schedule_tensor(schedule if schedule is not None else tile_schedule(offsets, cfg["BLOCK_M"]),
                                x.device)
        if sched.shape[1]:
            _launch(x, w, c, sched, cfg, input_precision)
    return c.to(out_dtype)


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def scaled_grouped_matmul(qx: torch.Tensor, qw: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor, offsets,
                          block: tuple[int, int, int] | None = None, out_dtype: torch.dtype = torch.float32,
                          schedule: TileSchedule | None = None) -> torch.Tensor:
    """C ~ the grouped product of the dequantized operands, by :func:`scaled_grouped_matmul_kernel`:
    row r of expert e is ``sx[r] * (qx[r] @ qw[e]) * sw[e]``, (T*k, N) of ``out_dtype``.

    qx: (T*k, K) and qw: (E, K, N), both torch.float8_e4m3fn (or both float8_e5m2), grouped as in
    :func:`grouped_matmul`. sx: float32 (T*k, 1), one scale per row of x_perm (x ~ qx * sx). sw:
    float32 (E, N) or (E, 1, N), one scale per expert and output column (w[e] ~ qw[e] * sw[e]).
    offsets, block, schedule: as in :func:`grouped_matmul`; block None is one fixed
    (64, 64, 128) on a GPU (NOT tuned, and NOT yet run on a GPU) and in the interpreter.
    out_dtype: float32 or bfloat16. In the interpreter the fp8 operands are upcast to float32
    (exact, as :mod:`nbhelpers.kernels.scaled_gemm` does) and a bf16 output is rounded by torch.
    """
    offsets, E, K, N = check_expert_gemm_args(qx, qw, offsets)
    if qx.dtype not in _FP8:
        raise TypeError(f"qx and qw have dtype {qx.dtype}; accepted: torch.float8_e4m3fn, torch.float8_e5m2 "
                        "(quantize first)")
    if not INTERPRETED and qx.device.type != "cuda":
        raise ValueError(f"compiled Triton kernels need CUDA tensors, got tensors on {qx.device}. Without a GPU, "
                         "call nbhelpers.device.setup_device() before importing nbhelpers.kernels.")
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype!r}")
    require_fp8_support(qx.dtype, qx.device)  # an A100 cannot compile e4m3: a sentence, not a traceback
    rows = qx.shape[0]
    for name, s_, shapes, meaning in (("sx", sx, [(rows, 1)], "one scale per row of x_perm"),
                                      ("sw", sw, [(E, N), (E, 1, N)], "one scale per expert and column")):
        if not isinstance(s_, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(s_).__name__}")
        if s_.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {s_.dtype}")
        if tuple(s_.shape) not in shapes:
            raise ValueError(f"{name} must have shape {' or '.join(map(str, shapes))} ({meaning}), "
                             f"got {tuple(s_.shape)}")
        if s_.device != qx.device:
            raise ValueError(f"{name} is on {s_.device}, the operands on {qx.device}")
    sw = sw.reshape(E, N)
    sx = sx.reshape(rows).contiguous()
    cfg = (dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), _check_block(block))) if block is not None
           else {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128})
    if schedule is not None:
        _check_schedule(schedule, offsets, cfg["BLOCK_M"], E)
    x, w = (qx.float(), qw.float()) if INTERPRETED else (qx, qw)
    c = torch.empty((rows, N), dtype=torch.float32 if INTERPRETED else out_dtype, device=qx.device)
    if rows == 0 or N == 0:
        return c.to(out_dtype)
    if K == 0:
        return c.zero_().to(out_dtype)
    sched = schedule_tensor(schedule if schedule is not None else tile_schedule(offsets, cfg["BLOCK_M"]), qx.device)
    grid = (sched.shape[1], triton.cdiv(N, cfg["BLOCK_N"]))
    scaled_grouped_matmul_kernel[grid](
        x, w, c, sched, sx, sw, sched.shape[1], N, K,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2), c.stride(0), c.stride(1),
        sw.stride(0), sw.stride(1), **cfg)
    return c.to(out_dtype)
