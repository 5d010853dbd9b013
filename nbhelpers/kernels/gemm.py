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

Also here: :func:`run_matmul` (float64 data in, float64 C out, used by the notebook's sweeps) and
:func:`torch_matmul` (torch's own GEMM on the same data). The GPU measurements built on them are
in :mod:`nbhelpers.gpu_measurements`; the results files they write are read by
:mod:`nbhelpers.results`.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..formats import get_format
from ..rounding import round_to
from . import INTERPRETED, tuning_bench

__all__ = [
    "matmul_kernel",
    "tile_of",
    "program_tiles",
    "matmul",
    "matmul_ref",
    "error_bound",
    "run_matmul",
    "torch_matmul",
    "INPUT_PRECISIONS",
    "GPU_CONFIGS",
    "GPU_CONFIG_SETS",
    "INTERPRETER_CONFIG",
    "operand_kind",
    "is_aligned",
]

INPUT_PRECISIONS = ("ieee", "tf32")
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
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
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
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=st, num_warps=w)
            for bm, bn, bk, st, w in rows]


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
GPU_CONFIGS = _configs([
    (128, 256, 64, 3, 8),
    (256, 128, 64, 3, 8),
    (128, 128, 64, 4, 4),
    (128, 128, 64, 3, 8),
    (64, 256, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 64, 4, 4),
    (64, 32, 32, 5, 2),
])
#: (operands, aligned) -> the configs tuned over; operands "16-bit" (bf16/fp16), "tf32", "ieee" (fp32 by FMA)
GPU_CONFIG_SETS = {
    ("16-bit", True): GPU_CONFIGS,
    ("16-bit", False): _configs([(128, 128, 64, 3, 8), (128, 128, 32, 4, 8), (128, 64, 32, 4, 4),
                                 (64, 128, 32, 4, 4), (64, 64, 32, 4, 4), (64, 32, 32, 5, 2)]),
    ("tf32", True): _configs([(128, 256, 32, 3, 8), (256, 128, 32, 3, 8), (128, 128, 32, 4, 4),
                              (128, 128, 64, 3, 8), (64, 256, 32, 4, 4), (128, 64, 64, 4, 4),
                              (64, 128, 64, 4, 4), (64, 64, 64, 4, 4), (64, 32, 32, 5, 2)]),
    ("tf32", False): _configs([(128, 128, 64, 3, 8), (128, 128, 32, 4, 8), (64, 256, 32, 4, 4)]),
    ("ieee", True): _configs([(128, 128, 32, 3, 8), (128, 64, 32, 4, 8), (64, 128, 32, 4, 8),
                              (128, 64, 32, 3, 4), (64, 128, 32, 3, 4), (64, 64, 64, 4, 4),
                              (64, 64, 32, 4, 4), (32, 64, 32, 4, 2), (64, 32, 32, 5, 2)]),
    ("ieee", False): _configs([(128, 64, 32, 4, 8), (64, 128, 32, 4, 8), (128, 64, 32, 3, 4),
                               (64, 64, 32, 4, 4), (32, 64, 32, 4, 2)]),
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
_matmul_tuned = {} if INTERPRETED else {
    kind: triton.autotune(configs=configs, key=["M", "N", "K", "INPUT_PRECISION"], do_bench=tuning_bench)(matmul_kernel)
    for kind, configs in GPU_CONFIG_SETS.items()}
_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_block(block) -> tuple[int, int, int]:
    if not isinstance(block, (tuple, list)) or len(block) != 3:
        raise ValueError(f"block must be a tuple (BLOCK_M, BLOCK_N, BLOCK_K), got {block!r}")
    for name, v in zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), block):
        if isinstance(v, bool) or not isinstance(v, int) or v < 16 or v > 256 or v & (v - 1):
            raise ValueError(
                f"{name}={v!r}: block sizes must be powers of two from 16 to 256 "
                "(tl.dot needs at least 16 along each dimension)"
            )
    return tuple(block)


def matmul(a: torch.Tensor, b: torch.Tensor, input_precision: str = "ieee",
           block: tuple[int, int, int] | None = (32, 32, 32), out_dtype: torch.dtype = torch.float32,
           group_m: int = 8) -> torch.Tensor:
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
    if not INTERPRETED and a.device.type != "cuda":
        raise ValueError(
            f"compiled Triton kernels need CUDA tensors, got tensors on {a.device}. Without a GPU, "
            "call nbhelpers.device.setup_device() before importing nbhelpers.kernels (it sets "
            "TRITON_INTERPRET=1)."
        )
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    if isinstance(group_m, bool) or not isinstance(group_m, int) or group_m < 1:
        raise ValueError(f"group_m must be a positive int, got {group_m!r}")
    if block is not None:
        block = _check_block(block)
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
        cfg = dict(INTERPRETER_CONFIG) if block is None else dict(
            zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), block), GROUP_M=group_m)
        grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
        matmul_kernel[grid](*args, INPUT_PRECISION=input_precision, **cfg)
    return c.to(out_dtype)


def matmul_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The slow, obviously right reference: float64 a @ b on the same device, (M, N) float64.

    Products of float32/bf16/fp16 values are exact in float64; the sums carry float64's own
    rounding, at most gamma_K * 2**-53 * (|a| @ |b|), far below any fp32 accumulation error.
    """
    return a.double() @ b.double()


def _gamma(n: int, u: float) -> float:
    if n * u >= 1:
        return math.inf
    return n * u / (1 - n * u)


def error_bound(a: torch.Tensor, b: torch.Tensor, input_precision: str = "ieee",
                tensor_core: bool = False, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An elementwise bound on |C - a @ b| for an fp32-accumulated C, (M, N) float64.

    ``(gamma_K(2**-24) + gamma_K(2**-53)) * (|a| @ |b|)``: any order of K fp32 additions, each
    rounded to nearest, stays within gamma_K u of the sum of |products| (Higham, *Accuracy and
    Stability of Numerical Algorithms*, ch. 3), plus the float64 reference's own error. With
    fp32 inputs rounded to TF32 (``input_precision="tf32"``) each product may also be off by
    (2 u_tf32 + u_tf32**2) of itself, u_tf32 = 2**-11. ``tensor_core=True`` is for bf16/fp16
    inputs on tensor cores, which truncate: in the model of Fasi et al. (2021) one step (the
    accumulator c and a group of g products, aligned, truncated, summed, truncated to fp32) loses
    less than (g + 2) * 2**-23 * (|c| + sum of the group's |products|), so over K/g groups
    (g >= 4) the loss stays within about K * (1 + 2/g) * 2**-23 <= 3K * 2**-24 of the sum of all
    |products|: the bound is taken as gamma_{3K}(2**-24).

    ``out_dtype`` bfloat16 / float16 (the epilogue's cast of the fp32 tile, nearest-even) adds one
    rounding of at most u_out = 2**-8 / 2**-11 of the fp32 value, whose size is at most
    (1 + g) * (|a| @ |b|): the bound becomes (g + u_out * (1 + g)) * (|a| @ |b|).
    """
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    K = a.shape[1]
    u32 = 2.0**-24
    g = _gamma(3 * K if tensor_core else K, u32) + _gamma(K, 2.0**-53)
    if input_precision == "tf32" and a.dtype == torch.float32:
        u_tf = 2.0**-11
        g += 2 * u_tf + u_tf**2
    u_out = {torch.float32: 0.0, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}.get(out_dtype)
    if u_out is None:
        raise TypeError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    g += u_out * (1 + g)
    return g * (a.double().abs() @ b.double().abs())


def _as_kernel_input(x: np.ndarray, fmt: str, device) -> torch.Tensor:
    """float64 data -> the tensor the kernel gets: rounded to ``fmt``; bf16 in the interpreter as
    float32 holding the bf16 values (exact)."""
    xq = round_to(x, fmt)
    dtype = _TORCH_DTYPES[fmt]
    if INTERPRETED and dtype == torch.bfloat16:
        dtype = torch.float32
    return torch.from_numpy(xq).to(device=device, dtype=dtype)


def _default_device() -> str:
    return "cpu" if INTERPRETED else "cuda"


def run_matmul(A, B, in_fmt: str = "bf16", input_precision: str = "ieee",
               block: tuple[int, int, int] = (32, 32, 32), device: str | None = None) -> np.ndarray:
    """The kernel on float64 data: A (M, K), B (K, N) rounded to ``in_fmt`` ("fp32", "bf16" or
    "fp16"), then :func:`matmul`; returns C (M, N) as float64 numpy.

    In the interpreter, bf16 data travels as float32 tensors holding the bf16 values (the
    interpreter cannot compute on bf16; see :func:`matmul`), so the result is the same sum of the
    same exact products, accumulated by numpy in fp32.
    """
    fmt = get_format(in_fmt).name
    if fmt not in _TORCH_DTYPES:
        raise ValueError(f"in_fmt must be one of {tuple(_TORCH_DTYPES)}, got {in_fmt!r}")
    dev = device or _default_device()
    a = _as_kernel_input(np.asarray(A, dtype=np.float64), fmt, dev)
    b = _as_kernel_input(np.asarray(B, dtype=np.float64), fmt, dev)
    return matmul(a, b, input_precision, block).double().cpu().numpy()


def torch_matmul(A, B, in_fmt: str = "bf16", device: str | None = None) -> np.ndarray:
    """torch.matmul on float64 data rounded to ``in_fmt`` ("fp32", "bf16" or "fp16"), in that
    dtype (so the output is rounded to it too); returns C (M, N) as float64 numpy.

    The data are rounded with :func:`nbhelpers.rounding.round_to` before they become torch
    tensors: torch converts float64 to bf16 through float32, which can round twice.
    """
    fmt = get_format(in_fmt).name
    if fmt not in _TORCH_DTYPES:
        raise ValueError(f"in_fmt must be one of {tuple(_TORCH_DTYPES)}, got {in_fmt!r}")
    dev = device or ("cpu" if INTERPRETED or not torch.cuda.is_available() else "cuda")
    a = torch.from_numpy(round_to(np.asarray(A, dtype=np.float64), fmt)).to(dev, _TORCH_DTYPES[fmt])
    b = torch.from_numpy(round_to(np.asarray(B, dtype=np.float64), fmt)).to(dev, _TORCH_DTYPES[fmt])
    return torch.matmul(a, b).double().cpu().numpy()
