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
        "first_inexact_K",
        "once_and_every_step",
        "split_k_matmul",
        "smallest_visible_product",
        "fool_the_tensor_core",
    ),
    20,
    4242,
    tuple(
        [
            # ---- first_inexact_K
            # a negative product taken as it is: its "odd part" is negative
            ("first_inexact_K", "x = abs(float(a) * float(b))", "x = float(a) * float(b)"),
            # the first k with k*m > 2**24, even or odd: an even k keeps k*m's odd part below 2**24
            ("first_inexact_K", "    if K % 2 == 0:\n        K += 1\n", ""),
            # the last exact K instead of the first inexact one
            ("first_inexact_K", "    return K\n", "    return K - 1\n"),
            # the sum of ones' answer for every product
            ("first_inexact_K", "K = 2**24 // m + 1", "K = 2**24 + 1"),
            # fp32's 23 stored mantissa bits instead of its 24 significant ones
            ("first_inexact_K", "K = 2**24 // m + 1", "K = 2**23 // m + 1"),
            # "headroom": a product of b significant bits leaves 24 - b bits for the count
            ("first_inexact_K", "K = 2**24 // m + 1", "K = 2 ** (24 - m.bit_length()) + 1"),
            # the product's 16-bit significand (trailing zeros kept) instead of its odd part
            (
                "first_inexact_K",
                "m = int(math.ldexp(math.frexp(x)[0], 53))  # x = m * 2**e with m an integer\n"
                "    while m % 2 == 0:\n"
                "        m //= 2  # the odd part: x = m * 2**e, m odd\n",
                "m = int(math.ldexp(math.frexp(x)[0], 16))\n",
            ),
            # ---- once_and_every_step
            # the tie at the stopping point rounded up: the sum stops one binade later
            ("once_and_every_step", "max(1.0, 2.0 ** (p - j))", "max(1.0, 2.0 ** (p + 1 - j))"),
            # bf16's 7 stored mantissa bits instead of its 8 significant ones
            ("once_and_every_step", "every = min(exact, stop(8))", "every = min(exact, stop(7))"),
            # fp32's 23 stored bits
            ("once_and_every_step", "min(exact, stop(24))", "min(exact, stop(23))"),
            # the stopping point below 1 when 2**-j is below half a spacing: the sum cannot fall below 1
            ("once_and_every_step", "max(1.0, 2.0 ** (p - j))", "2.0 ** (p - j)"),
            # once: the fp32 sum returned without the final rounding to bf16
            (
                "once_and_every_step",
                'once = float(round_to(min(exact, stop(24)), "bf16"))',
                "once = min(exact, stop(24))",
            ),
            # once: the exact sum rounded to bf16, as if the fp32 accumulator never stalled
            (
                "once_and_every_step",
                'once = float(round_to(min(exact, stop(24)), "bf16"))',
                'once = float(round_to(exact, "bf16"))',
            ),
            # the 1 counted among the n terms
            ("once_and_every_step", "exact = 1 + n * t", "exact = 1 + (n - 1) * t"),
            # the final rounding's ties away from zero
            ("once_and_every_step", '"bf16"))', '"bf16", "nearest_away"))'),
            # the final rounding truncates
            ("once_and_every_step", '"bf16"))', '"bf16", "toward_zero"))'),
            # ---- split_k_matmul
            # floor(K / S) products a slice, the rest in the last one
            (
                "split_k_matmul",
                "L = -(-K // S)  # ceil(K / S)\n    bounds = [(s * L, min((s + 1) * L, K)) for s in range(S)]",
                "L = K // S\n    bounds = [(s * L, K if s == S - 1 else (s + 1) * L) for s in range(S)]",
            ),
            # slices as numpy's array_split cuts them: the first K % S one product longer
            (
                "split_k_matmul",
                "bounds = [(s * L, min((s + 1) * L, K)) for s in range(S)]",
                "bounds = [(int(c[0]), int(c[-1]) + 1) for c in np.array_split(np.arange(K), S) if c.size]",
            ),
            # interleaved slices: product k in slice k mod S
            ("split_k_matmul", "for k in range(lo, hi):", "for k in range(s, K, S):"),
            # the partial sums added in slice order instead of a tree
            (
                "split_k_matmul",
                "pairs = [parts[i] + parts[i + 1] for i in range(0, len(parts) - 1, 2)]\n"
                "        parts = pairs + parts[2 * len(pairs) :]",
                "parts = [parts[0] + parts[1]] + parts[2:]",
            ),
            # a tree that pairs slice i with slice i + S/2 (a strided reduction)
            (
                "split_k_matmul",
                "pairs = [parts[i] + parts[i + 1] for i in range(0, len(parts) - 1, 2)]\n"
                "        parts = pairs + parts[2 * len(pairs) :]",
                "h = len(parts) // 2\n        parts = [parts[i] + parts[i + h] for i in range(h)] + parts[2 * h :]",
            ),
            # the tree's additions in float64
            ("split_k_matmul", "parts.append(partial)", "parts.append(partial.astype(np.float64))"),
            # float64 everywhere
            ("split_k_matmul", "partial = np.zeros((M, N), dtype=np.float32)", "partial = np.zeros((M, N))"),
            # ---- smallest_visible_product
            # a negative c treated like a positive one: as if the sum had to reach the next fp32 value
            ("smallest_visible_product", "if c < 0:", "if False:"),
            # the final truncation forgotten: whatever survives the alignment counts
            ("smallest_visible_product", "return max(kept, need)", "return kept"),
            # aligned to the products, not to c: nothing of p is cut
            ("smallest_visible_product", "kept = 2.0 ** (E - spec.align_bits)", "kept = 0.0"),
            # fp32's 23 bits kept below 2**E on every GPU
            ("smallest_visible_product", "kept = 2.0 ** (E - spec.align_bits)", "kept = 2.0 ** (E - 23)"),
            # rounding to nearest in mind: half a spacing above c would do
            ("smallest_visible_product", "need = 2.0 ** (E - 23 -", "need = 2.0 ** (E - 24 -"),
            # E one too high: math.frexp's exponent taken as it is
            ("smallest_visible_product", "E = math.frexp(abs(c))[1] - 1", "E = math.frexp(abs(c))[1]"),
            # n products counted as ceil(log2 n) powers of two
            ("smallest_visible_product", "(int(n).bit_length() - 1)", "(int(n) - 1).bit_length()"),
            # the n products not added up: one must reach the spacing on its own
            (
                "smallest_visible_product",
                "need = 2.0 ** (E - 23 - (int(n).bit_length() - 1))",
                "need = 2.0 ** (E - 23)",
            ),
            # ---- fool_the_tensor_core
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
