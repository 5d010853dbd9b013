"""Chapter 03's entry of the exercise table (tests/exercise_table.py)."""

from __future__ import annotations

import math

import numpy as np

from exercise_table import ChapterSpec
from nbhelpers.rounding import round_to

SPEC = ChapterSpec(
    3,
    "ex03_gemm.ipynb",
    lambda: {
        "math": math,
        "np": np,
        "round_to": round_to,
        "TENSOR_CORES": __import__("nbhelpers.tensor_cores", fromlist=["TENSOR_CORES"]).TENSOR_CORES,
    },
    (
        "relative_error",
        "round_once_and_every_step",
        "blocked_matmul_fp32",
        "tensor_core_group",
        "fool_the_tensor_core",
    ),
    20,
    4242,
    tuple(
        [
            # the largest element instead of the Frobenius norm
            (
                "relative_error",
                "num = math.sqrt(float(np.sum((C - C_ref) ** 2)))",
                "num = float(np.max(np.abs(C - C_ref)))",
            ),
            # divides by the norm of C instead of C_ref
            ("relative_error", "den = math.sqrt(float(np.sum(C_ref**2)))", "den = math.sqrt(float(np.sum(C**2)))"),
            # no square roots
            ("relative_error", "return num / den", "return (num / den) ** 2"),
            # a zero reference gives 0 whatever C is
            ("relative_error", "return 0.0 if num == 0.0 else math.inf", "return 0.0"),
            # a zero reference gives inf even when C is zero too
            ("relative_error", "return 0.0 if num == 0.0 else math.inf", "return math.inf"),
            # "once": a float64 accumulator instead of fp32 (the probe with the tiny terms last tells)
            ("round_once_and_every_step", "s32 = np.float32(s32 + np.float32(p))", "s32 = np.float64(s32) + p"),
            # "every step": an fp32 accumulator instead of bf16
            (
                "round_once_and_every_step",
                's16 = float(round_to(s16 + p, "bf16"))',
                "s16 = float(np.float32(s16 + p))",
            ),
            # "every step" truncates instead of rounding to nearest
            ("round_once_and_every_step", 'round_to(s16 + p, "bf16")', 'round_to(s16 + p, "bf16", "toward_zero")'),
            # float64 everywhere
            ("blocked_matmul_fp32", "np.float32", "np.float64"),
            # no blocks: sequential
            ("blocked_matmul_fp32", "for start in range(0, K, block):", "for start in range(0, K, K):"),
            # the partial sum is not reset: each block adds the previous ones again
            ("blocked_matmul_fp32", "        partial = np.zeros((M, N), dtype=np.float32)\n", ""),
            # blocks overlap by one product
            ("blocked_matmul_fp32", "min(start + block, K)", "min(start + block + 1, K)"),
            # whole blocks only: the short last block is dropped
            (
                "blocked_matmul_fp32",
                "for start in range(0, K, block):",
                "for start in range(0, K - K % block, block):",
            ),
            # floor instead of truncation toward zero (negative terms)
            ("tensor_core_group", "math.trunc(v / q)", "math.floor(v / q)"),
            # rounds the aligned terms to nearest instead of truncating
            ("tensor_core_group", "math.trunc(v / q)", "round(v / q)"),
            # rounds the sum to nearest in fp32 instead of truncating
            ("tensor_core_group", '"toward_zero"', '"nearest_even"'),
            # aligns to the products only, leaving the accumulator out
            (
                "tensor_core_group",
                "largest = max(abs(v) for v in values)",
                "largest = max([abs(v) for v in values[1:]] or [abs(values[0])])",
            ),
            # one bit fewer kept
            ("tensor_core_group", "E = math.frexp(largest)[1] - 1", "E = math.frexp(largest)[1]"),
            # c added as it is: only the products aligned and truncated
            (
                "tensor_core_group",
                "total = sum(math.trunc(v / q) * q for v in values)",
                "total = values[0] + sum(math.trunc(v / q) * q for v in values[1:])",
            ),
            # built for the V100's alignment and handed in for every GPU: the A100 and H100 keep exact's top bits
            ("fool_the_tensor_core", "e + spec.align_bits + 1", "e + 23 + 1"),
            # one bit short: the last bit kept is 2**e, so exact keeps its leading bit (at least half of it)
            ("fool_the_tensor_core", "e + spec.align_bits + 1", "e + spec.align_bits"),
            # "fp32 would lose it, so the tensor core does": below half of fp32's spacing at P, which the
            # V100 and A100 cut away but the H100's 25 bits keep
            ("fool_the_tensor_core", "e + spec.align_bits + 1", "e + 25"),
            # the V100's group of 4 for every GPU: the wrong length elsewhere
            (
                "fool_the_tensor_core",
                'np.zeros(spec.group("fp16")), np.zeros(spec.group("fp16"))',
                "np.zeros(4), np.zeros(4)",
            ),
            # the large product not cancelled: the exact dot product is P + exact
            ("fool_the_tensor_core", "a[:3] = [P, -P, exact]", "a[:3] = [P, 0.0, exact]"),
            # all zeros: the model returns 0, but the exact dot product is 0 too, not exact
            ("fool_the_tensor_core", "a[:3] = [P, -P, exact]", "a[:3] = 0.0"),
            # "as large as fp16 goes", misremembered as 2**16: not an fp16 value (it rounds to inf)
            ("fool_the_tensor_core", "P = 2.0 ** (e + spec.align_bits + 1)", "P = 2.0**16"),
            # fp16 inputs whose products overflow fp16's range: 256 * 256 = 65536 > 65504
            ("fool_the_tensor_core", "a[:3] = [P, -P, exact]", "a[:3] = [256.0, -256.0, exact]; b[:2] = 256.0"),
            # exact split into factors that are not fp16 values: exact * 3 times 1/3
            ("fool_the_tensor_core", "a[:3] = [P, -P, exact]", "a[:3], b[2] = [P, -P, exact * 3], 1 / 3"),
        ]
    ),
)
