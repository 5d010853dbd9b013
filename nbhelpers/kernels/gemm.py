"""A tiled GEMM in Triton with an fp32 accumulator tile (chapter 03; chapter 09 grows it).

``C = A @ B`` with A (M, K) and B (K, N) in float32, bfloat16 or float16; C (M, N) is float32 by
default, or bfloat16 / float16 (``out_dtype``: the fp32 tile is cast once, in the epilogue).
One program computes one BLOCK_M x BLOCK_N tile of C: it walks along K in steps of BLOCK_K,
loads a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B (masked at the edges, the
missing entries read as zero), and adds their product into an fp32 accumulator tile with
``tl.dot``. The tile is stored once at the end. Work: 2 M N K flops; ideal traffic (each input
read once) (M K + K N) * itemsize + M N * out_itemsize bytes.

Which program computes which tile (:func:`tile_of`, mirrored in Python by :func:`program_tiles`):
programs are numbered along one grid axis, and a GPU runs them roughly in that order, a wave of
about (number of SMs x programs per SM) at a time. Numbered row by row, a wave covers a few rows
of tiles of C across its whole width: it needs those few row-panels of A but *every* column-panel
of B, so B is streamed through the L2 cache once per wave and little of it is still there when
the next wave wants it. Grouped ("super-grouped") ordering numbers the programs column by column
inside groups of GROUP_M tile rows: a wave then covers a roughly square patch of C, GROUP_M tile
rows by (wave / GROUP_M) tile columns, and reads GROUP_M row-panels of A and wave / GROUP_M
column-panels of B. For the same number of tiles computed, a square patch needs far fewer distinct
panels than a flat strip (for a wave of 64 tiles: 8 + 8 panels instead of 1 + 64), so more of the
loads hit in L2 instead of going to DRAM. The arithmetic does not change: each tile is still one
program's fp32 sum in the same order, so the result is bit-identical whatever GROUP_M is.

Tile sizes: :func:`matmul` takes ``block=(BLOCK_M, BLOCK_N, BLOCK_K)``, or ``block=None`` for
the tuned path: on a GPU ``triton.autotune`` times a small set of configs once per (M, N, K,
dtypes, input precision) and keeps the fastest: the set of :data:`GPU_CONFIG_SETS` for the
operands (bf16/fp16, fp32 as TF32, fp32 by FMA) and the shape's alignment, each set chosen so
that every config fits in shared memory and compiles without spilling for sm_90 (the comment
above the sets says why they differ); in the interpreter (autotuning needs a GPU) the one fixed
:data:`INTERPRETER_CONFIG`.

What ``tl.dot`` does to the numbers depends on where it runs:

* on an NVIDIA GPU, bf16/fp16 inputs go to the tensor cores (exact products, fused groups,
  alignment and truncation: :func:`nbhelpers.tensor_cores.tensor_core_matmul` models them);
  fp32 inputs are rounded to TF32 unless ``input_precision="ieee"`` (Triton's documentation);
* in Triton's interpreter (no GPU: ``TRITON_INTERPRET=1``, see :mod:`nbhelpers.kernels`) it is a
  numpy float32 matmul of each tile pair, added to the fp32 tile; ``input_precision`` is ignored.

Two interpreter gaps, measured with Triton 3.7.1 and handled by :func:`matmul` rather than hidden
(tests/test_kernels_gemm.py shows each gap is real on the raw kernel): (1) bfloat16 is held as raw
uint16 bits, so ``tl.dot`` on bf16 operands multiplies bit patterns (wrong, silently); the launcher
therefore upcasts bf16 and fp16 inputs to float32 before the launch. The upcast is exact (every
bf16 and fp16 value is an fp32 value) and so are the products of two such values (8 + 8 or
11 + 11 significant bits fit in fp32's 24), so the kernel sums the same exact products a GPU does,
in fp32. (2) The interpreter's cast of fp32 to bfloat16 truncates instead of rounding to nearest;
for a bf16 output the launcher stores the fp32 tile and rounds it to bf16 with torch
(nearest-even, what the GPU's cast does).

The error bound the kernel is checked against is :func:`nbhelpers.gemm_bounds.error_bound`; the
kernel on float64 data rounded to a format (chapter 03's sweeps) is :func:`nbhelpers.gemm_runs.run_matmul`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..formats import get_format
from ..gemm_bounds import INPUT_PRECISIONS
from ..occupancy import occupancy
from ..perf_model import GPU, H200, Launch, Prediction, predict, stages_in_flight
from ..timing import tuning_ms
from ..validation import group_m as check_group_m
from . import INTERPRETED
from .launch_checks import check_block, require_kernel_device

__all__ = [
    "matmul_kernel",
    "tile_of",
    "program_tiles",
    "matmul",
    "matmul_ref",
    "predicted",
    "fastest_predicted",
    "INPUT_PRECISIONS",
    "GPU_CONFIGS",
    "GPU_CONFIG_SETS",
    "INTERPRETER_CONFIG",
    "operand_kind",
    "is_aligned",
]

# the input formats the kernel takes, with their torch dtypes (FloatFormat.torch_dtype)
_TORCH_DTYPES = {name: get_format(name).torch_dtype for name in ("fp32", "bf16", "fp16")}
_DTYPES = {dt: name for name, dt in _TORCH_DTYPES.items()}


@triton.jit
def tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Program number -> (pid_m, pid_n), the tile of C it computes, in grouped order: programs run
    down a group of GROUP_M tile rows column by column, then move to the next group (the last
    group may be shorter). GROUP_M = 1 is plain row-major order. Why: the module docstring."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    GROUP_M: tl.constexpr = 1,
):
    """One BLOCK_M x BLOCK_N tile of C = A @ B, accumulated in fp32 over K in BLOCK_K steps and
    cast to C's dtype in the epilogue. Grid: (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),), programs in
    the grouped order of :func:`tile_of`."""
    pid_m, pid_n = tile_of(tl.program_id(axis=0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    # the accumulator tile: fp32 whatever the input type
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # rows past M, columns past N and the ragged end of K read as zeros: a zero product
        # adds nothing, so the edge tiles need no special case
        a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < K - k0)
        b_mask = (offs_k[:, None] < K - k0) & (offs_n[None, :] < N)
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)
        b = tl.load(b_ptrs, mask=b_mask, other=0.0)
        acc += tl.dot(a, b, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # the epilogue: one cast of the fp32 tile to the output type (a no-op for fp32)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


def program_tiles(M: int, N: int, block_m: int, block_n: int, group_m: int) -> list[tuple[int, int]]:
    """The tile (pid_m, pid_n) of each program number, in launch order: :func:`tile_of` in Python,
    for counting what a wave of programs reads. A list of cdiv(M, block_m) * cdiv(N, block_n) pairs."""
    num_pid_m, num_pid_n = -(-M // block_m), -(-N // block_n)
    out = []
    for pid in range(num_pid_m * num_pid_n):
        in_group = group_m * num_pid_n
        first = (pid // in_group) * group_m
        size = min(num_pid_m - first, group_m)
        out.append((first + (pid % in_group) % size, (pid % in_group) // size))
    return out


def _configs(rows) -> list:
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=st, num_warps=w)
        for bm, bn, bk, st, w in rows
    ]


# On a GPU, triton.autotune times a set of configs once per (M, N, K, input precision) and keeps the
# fastest. Which set depends on what the tl.dot becomes and on the shape's alignment, because the
# compiler's resources do (benchmarks/results/compile_check.json, `make gpu-compile`, records
# every config's registers, spills and shared memory for sm_90):
#
# * bf16/fp16 operands go to the tensor cores (wgmma on sm_90): large tiles with deep software
#   pipelines; BLOCK_K 64 is a 128-byte row of each tile;
# * fp32 operands with input_precision="tf32" go to the tensor cores too, but each element is 4
#   bytes: the 2-byte list's pipelines would need up to 327,680 B of shared memory (a block may
#   use 232,448 on an H100/H200), so BLOCK_K is 32 where the tile is large;
# * fp32 with "ieee" has no tensor-core instruction: the dot is a loop of FMAs and the whole
#   accumulator tile and both operand tiles pass through registers; the 2-byte list spills there
#   (up to 940 B per thread at 255 registers), so the tiles are smaller or use 8 warps;
# * a shape with a dimension or a stride that is not a multiple of 16 elements ("unaligned", e.g.
#   1000 x 1000 x 1000) gets no 16-byte vector loads: with 2-byte operands no asynchronous copies
#   at all, every element loaded and masked on its own, and most large tiles spill. Those shapes
#   are tuned over configs that compile without spilling there, with Triton 3.7.1 and 3.6.0 alike
#   (the two differ by a few registers, and 3.6.0 spills at 128 x 128 with fp32 operands).
#
#: the 2-byte (bf16/fp16) operands' configs for aligned shapes (also the notebook's table)
GPU_CONFIGS = _configs(
    [
        (128, 256, 64, 3, 8),
        (256, 128, 64, 3, 8),
        (128, 128, 64, 4, 4),
        (128, 128, 64, 3, 8),
        (64, 256, 64, 4, 4),
        (128, 64, 64, 4, 4),
        (64, 128, 64, 4, 4),
        (64, 64, 64, 4, 4),
        (64, 32, 32, 5, 2),
    ]
)
#: (operands, aligned) -> the configs tuned over; operands "16-bit" (bf16/fp16), "tf32", "ieee" (fp32 by FMA)
GPU_CONFIG_SETS = {
    ("16-bit", True): GPU_CONFIGS,
    ("16-bit", False): _configs(
        [
            (128, 128, 64, 3, 8),
            (128, 128, 32, 4, 8),
            (128, 64, 32, 4, 4),
            (64, 128, 32, 4, 4),
            (64, 64, 32, 4, 4),
            (64, 32, 32, 5, 2),
        ]
    ),
    ("tf32", True): _configs(
        [
            (128, 256, 32, 3, 8),
            (256, 128, 32, 3, 8),
            (128, 128, 32, 4, 4),
            (128, 128, 64, 3, 8),
            (64, 256, 32, 4, 4),
            (128, 64, 64, 4, 4),
            (64, 128, 64, 4, 4),
            (64, 64, 64, 4, 4),
            (64, 32, 32, 5, 2),
        ]
    ),
    ("tf32", False): _configs([(128, 128, 64, 3, 8), (128, 128, 32, 4, 8), (64, 256, 32, 4, 4)]),
    ("ieee", True): _configs(
        [
            (128, 128, 32, 3, 8),
            (128, 64, 32, 4, 8),
            (64, 128, 32, 4, 8),
            (128, 64, 32, 3, 4),
            (64, 128, 32, 3, 4),
            (64, 64, 64, 4, 4),
            (64, 64, 32, 4, 4),
            (32, 64, 32, 4, 2),
            (64, 32, 32, 5, 2),
        ]
    ),
    ("ieee", False): _configs(
        [(128, 64, 32, 4, 8), (64, 128, 32, 4, 8), (128, 64, 32, 3, 4), (64, 64, 32, 4, 4), (32, 64, 32, 4, 2)]
    ),
}
#: the one configuration ``block=None`` uses in the interpreter: small tiles keep it fast on a CPU
INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}


def operand_kind(dtype: torch.dtype, input_precision: str) -> str:
    """Which config list a launch tunes over: "16-bit" (bf16, fp16), "tf32" or "ieee" (fp32)."""
    if dtype != torch.float32:
        return "16-bit"
    return "tf32" if input_precision == "tf32" else "ieee"


def is_aligned(tensors, ints) -> bool:
    """True when a launch is specialised as aligned: every data pointer 16-byte aligned and every
    integer argument 1 (Triton makes it a constant) or a multiple of 16 (Triton marks it so, and
    the loads along it can be 16-byte vectors)."""
    return all(t.data_ptr() % 16 == 0 for t in tensors) and all(i == 1 or i % 16 == 0 for i in ints)


# the autotuned kernels exist only where they can run (autotuning times launches on a GPU), one per
# config set. INPUT_PRECISION is in the key: fp32 inputs in TF32 and in IEEE mode are different
# kernels, each tuned on its own
_matmul_tuned = (
    {}
    if INTERPRETED
    else {
        kind: triton.autotune(configs=configs, key=["M", "N", "K", "INPUT_PRECISION"], do_bench=tuning_ms)(
            matmul_kernel
        )
        for kind, configs in GPU_CONFIG_SETS.items()
    }
)
_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    input_precision: str = "ieee",
    block: tuple[int, int, int] | None = (32, 32, 32),
    out_dtype: torch.dtype = torch.float32,
    group_m: int = 8,
) -> torch.Tensor:
    """C = a @ b by :func:`matmul_kernel`: a (M, K), b (K, N) -> C (M, N) of ``out_dtype``.

    a, b: 2-D tensors of the same dtype (float32, bfloat16 or float16) on the same device (CUDA
    for compiled kernels; any device in the interpreter). Any strides. input_precision: ``"ieee"``
    or ``"tf32"`` (only matters for float32 inputs on a GPU). block: (BLOCK_M, BLOCK_N, BLOCK_K),
    powers of two from 16 to 256, or None: autotuned on a GPU over the set of
    :data:`GPU_CONFIG_SETS` for these operands and this shape's alignment (group_m is then the
    configs' 8), :data:`INTERPRETER_CONFIG` in the interpreter. out_dtype: float32
    (default), bfloat16 or float16: the fp32 accumulator tile is cast once in the epilogue.
    group_m: tile rows per group of the program order (:func:`tile_of`); any value gives the same
    numbers.

    In the interpreter, bf16 and fp16 inputs are upcast to float32 before the launch (exact: the
    interpreter would multiply bf16 bit patterns), and a bf16 output is rounded from the fp32 tile
    by torch (the interpreter's own cast truncates). See the module docstring.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; accepted: torch.float32, torch.bfloat16, torch.float16")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} (need a (M, K), b (K, N))"
        )
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"a and b are on different devices: {a.device} and {b.device}")
    require_kernel_device(a.device)
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    group_m = check_group_m(group_m)
    if block is not None:
        block = check_block(block)
    M, K = a.shape
    N = b.shape[1]
    if INTERPRETED and a.dtype != torch.float32:
        a, b = a.float(), b.float()  # exact; the interpreter computes bf16 on raw bits
    # the interpreter's fp32 -> bf16 cast truncates: keep the fp32 tile, round it with torch below
    store_dtype = torch.float32 if INTERPRETED and out_dtype == torch.bfloat16 else out_dtype
    c = torch.empty((M, N), dtype=store_dtype, device=a.device)
    if M == 0 or N == 0 or K == 0:
        return c.zero_().to(out_dtype)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if block is None and not INTERPRETED:
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
        tuned = _matmul_tuned[(operand_kind(a.dtype, input_precision), is_aligned((a, b, c), args[3:]))]
        tuned[grid](*args, INPUT_PRECISION=input_precision)
    else:
        cfg = (
            dict(INTERPRETER_CONFIG)
            if block is None
            else dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), block), GROUP_M=group_m)
        )
        grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
        matmul_kernel[grid](*args, INPUT_PRECISION=input_precision, **cfg)
    return c.to(out_dtype)


def matmul_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The slow, obviously right reference: float64 a @ b on the same device, (M, N) float64.

    Products of float32/bf16/fp16 values are exact in float64; the sums carry float64's own
    rounding, at most gamma_K * 2**-53 * (|a| @ |b|), far below any fp32 accumulation error.
    """
    return a.double() @ b.double()


def predicted(
    M: int,
    N: int,
    K: int,
    block: tuple[int, int, int],
    num_warps: int,
    num_stages: int,
    registers: int,
    shared: int,
    dtype: str = "bf16",
    in_bytes: int = 2,
    out_bytes: int = 2,
    group_m: int = 8,
    gpu: GPU = H200,
) -> Prediction:
    """What :mod:`nbhelpers.perf_model` predicts for one launch of a tiled GEMM of this module's
    shape (one program per (BLOCK_M, BLOCK_N) tile, a loop of K / BLOCK_K steps that each load an A
    and a B tile, ``num_stages - 1`` of them in flight ahead of the one computed): 2 M N K FLOPs at
    the ``dtype``'s peak; bytes from HBM: each A panel read once per column of tiles and each B
    panel once per row of tiles, divided by ``group_m`` (the grouped program order keeps a group's
    panels in L2; never less than each operand once), and C written once; residency from the
    compiler's ``registers`` and ``shared`` memory (the compile table's)."""
    bm, bn, bk = block
    tiles_m, tiles_n = -(-M // bm), -(-N // bn)
    operands = M * K * in_bytes * tiles_n + K * N * in_bytes * tiles_m
    bytes_hbm = max(operands / group_m, (M * K + K * N) * in_bytes) + M * N * out_bytes
    per_sm = occupancy(registers, num_warps, shared).blocks
    if per_sm == 0:
        raise ValueError(f"a program of {num_warps} warps, {registers} registers and {shared} B does not fit an SM")
    ahead = stages_in_flight(num_stages)
    # a step loads the rows of A and the columns of B its tile has (masked-off lanes load nothing)
    launch = Launch(tiles_m * tiles_n, per_sm, (min(M, bm) + min(N, bn)) * bk * in_bytes, -(-K // bk), ahead)
    return predict(gpu, launch, bytes_hbm, 2.0 * M * N * K, dtype, bytes_loaded=bytes_hbm - M * N * out_bytes)


def fastest_predicted(
    table_rows: list[dict],
    kernel: str,
    label: str,
    M: int,
    N: int,
    K: int,
    dtype: str = "bf16",
    in_bytes: int = 2,
    gpu: GPU = H200,
) -> tuple[Prediction | None, str | None]:
    """The fastest :func:`predicted` time over the configs a compile table holds for ``kernel``
    under ``label`` for sm_90 (``table_rows``: the rows of
    :func:`nbhelpers.results.recorded_compile_check`): those the course launches by default (an
    autotune list's) and that compiled without a spill, each with its registers and shared
    memory; with the config's short name (``"128x128x64 w8 s3"``). (None, None) where the table
    has no such row."""
    best: tuple[Prediction | None, str | None] = (None, None)
    for r in table_rows:
        if (r["kernel"], r["label"], r["target"], r.get("status")) != (kernel, label, "sm_90", "ok"):
            continue
        if not r.get("default") or r.get("spill_stores"):
            continue
        bm, bn, bk = (int(v) for v in r["config"].split()[0].split("x"))
        p = predicted(
            M, N, K, (bm, bn, bk), r["num_warps"], r["num_stages"], r["registers"], r["shared"], dtype, in_bytes,
            gpu=gpu,
        )  # fmt: skip
        if best[0] is None or p.seconds < best[0].seconds:
            best = (p, r["config"].split(" (")[0])
    return best
