"""The W4A16 GEMM: 16-bit activations times int4 weights with group scales (:mod:`nbhelpers.kernels.w4a16`,
chapter 12)."""

from __future__ import annotations

from .manifest import Case, Family, Launch, pick

KERNEL = "nbhelpers.kernels.w4a16:w4a16_kernel"
#: a Llama-3-8B-sized square projection (4096 x 4096), and the M of each of the launcher's configs
NK = 4096
M_OF = {"decode": 1, "batch": 64, "prefill": 4096}


def w4a16_args(a: str, scale: str, out: str, M: int, N: int, K: int, group: int) -> tuple:
    """The launcher's arguments for contiguous operands: A, the packed codes, the scales, the zero
    points (or the packed codes again, unused, without them), C; M, N, K, the group; the strides."""
    return (f"*{a}", "*u8", f"*{scale}", "*u8", f"*{out}", M, N, K, group, K, 1, N, 1, N, 1, N, 1, N, 1)


def cases() -> list[Case]:
    """Each config of :data:`~nbhelpers.kernels.w4a16.W4A16_CONFIGS` at the M it serves, 4096 x 4096
    weights, for every group (its BLOCK_K is capped at the group) with and without zero points,
    bf16 activations, scales and output; and, at group 128 with zero points, fp16 activations and
    scales, and an fp32 output."""
    from nbhelpers.kernels.w4a16 import GROUPS, W4A16_CONFIGS

    out = []
    for cfg in W4A16_CONFIGS:
        M = M_OF[cfg.name]
        where = f"{cfg.name}, M = {M}, N = K = {NK}"
        variants = [("bf16", "bf16", g, zp) for g in GROUPS for zp in (True, False)]
        variants += [("fp16", "fp16", 128, True), ("bf16", "fp32", 128, True)]
        for a, c_out, group, zp in variants:
            out.append(
                Case(
                    KERNEL,
                    f"{a} A, {'zero points' if zp else 'signed codes'}, group {group} -> {c_out}, {where}",
                    w4a16_args(a, a, c_out, M, NK, NK, group),
                    {**cfg.constexprs(group), "HAS_ZEROS": zp},
                    cfg.num_warps,
                    cfg.num_stages,
                )
            )
    return out


def launches() -> list[Launch]:
    """Chapter 12's launches: bf16 activations times signed int4 codes in groups of 32 (a gate
    projection of the course's model, RTN int4 g32), at M = 1 and 16 (the decode config) and 64 (the
    batch config); the sm_90 cases of the same configs on 4096 x 4096 weights stand for them."""
    every = cases()
    out = []
    for name, ms in (("decode", "M = 1 and 16"), ("batch", "M = 64")):
        label = f"bf16 A, signed codes, group 32 -> bf16, {name}, M = {M_OF[name]}, N = K = {NK}"
        (c,) = pick(every, "w4a16_kernel", label)
        out.append(Launch(f"w4a16_matmul(group=32), {ms}", "bf16", ("12",), "notebook 12", c))
    return out


FAMILY = Family(
    name="w4a16",
    module="nbhelpers.kernels.w4a16",
    reference="nbhelpers.kernels.w4a16:w4a16_ref",
    dtypes=("bf16", "fp16"),
    chapters={
        "12": "`kernels.w4a16` (bf16 activations, int4 weights in groups of 32) on a layer of the course's model"
    },
    tests=("tests/test_kernels_w4a16.py",),
    cases=cases,
    launches=launches,
    dot_kernels=("w4a16_kernel",),
    order=7,
)
