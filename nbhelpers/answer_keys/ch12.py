"""Chapter 12 exercises: quantized inference. Listed in ``EXERCISES`` for
:mod:`nbhelpers.answer_keys`.

- ``decode_step_time``: predict one decode step of a transformer of any shape, stored in any mix
  of formats, on any GPU: the term that sets its time (weights, KV cache, activations or compute)
  and the time. The inputs are plain dicts (the model's shape, the storage format of each tensor
  kind, the GPU's bandwidth and peaks), so the course's objects and their methods are not the
  student's to call. Reference: :func:`nbhelpers.inference_math.decode_step` on the same model
  built as the course's objects (:func:`as_shape`, :func:`as_scheme`, :func:`as_gpu`), held in
  tests/test_exercises_ch12.py against a count of every tensor written out a second way. The time
  is compared within a relative 1e-9 (a sum of a few dozen float64 terms in any order is
  within 1e-13); the term exactly, except at a tie (the times of the bytes and of the FLOPs
  within 1e-9 of each other), where either side is right. Cases: Llama 3 8B in the chapter's six
  schemes on an H200 and an H100, the batches either side of the crossover
  (:func:`~nbhelpers.inference_math.decode_crossover_batch`), each activation type (bf16, fp16 on
  a GPU whose fp16 peak is half its bf16 one, e4m3fn) with weights and an LM head of each element
  at twice the crossover, a per-tensor KV scale on a model small enough that 4 bytes show, and
  random models, formats (groups that do not divide K, zero points, 32-bit scales, per-tensor
  scales, tied embeddings), GPUs, batches and contexts, some aimed at each choice of peak
  (:data:`STEP_AIMS`: every element as the weights' and as the LM head's at every seed) and, on
  small memory-bound models where a few bytes show (:data:`SMALL_AIMS`), at half bytes, at
  one scale for the whole KV cache, embedding table (a scale a gathered row), LM head or weights,
  and at an embedding table or LM head in groups that do not divide d_model (a gathered row or the
  head counted with its own floored groups, or a gathered row with one scale, fails there); an
  e4m3fn per-tensor embedding at batch 64 and LM head on a tiny model are fixed cases.
- ``gptq_column``: GPTQ's step for one column, from the OBS equations the statement gives: the
  column rounded by a quantizer stated bit for bit (float32, ties to even, clamped), its error
  spread over the columns not yet quantized through the inverse of H restricted to them.
  Reference: :func:`gptq_column_ref`, held in the tests against
  :func:`nbhelpers.weight_quant.gptq_quantize` (the columns chained) and against the
  least-squares optimum of the remaining columns. Codes compared exactly, the updated weights
  within a relative 1e-9 of the largest weight.
- ``channel_vs_group``: construct a weight matrix whose round-to-nearest quantization with one
  scale per output channel loses at least a given fraction of its norm while groups of
  ``group`` columns lose at most another. Judged by the course's engine
  (:func:`nbhelpers.weight_quant.rtn_quantize` and :func:`~nbhelpers.weight_quant.dequantize`);
  :func:`channel_vs_group_example` shows each case has an answer (each bound is a random fraction
  of what it reaches).
- ``kv_scale_granularity``: pick the KV-cache scale granularity (per tensor, head, token, or token
  and head) with the fewest scales whose relative error meets a budget, or None. Reference:
  :func:`kv_scale_granularity_ref`, the errors (:func:`kv_errors`) by the chapter's
  :func:`nbhelpers.quantized_lm.fake_quant` (torch's float8 cast), held in the tests against
  numpy and ml_dtypes. Every budget keeps twice :func:`kv_norm_margin` (what float32 norms can
  move an error) from every error, so the norms in float32 or float64 give the same answer, and
  lies just that far from an error, so a quantizer off the statement (int8 to 128, e5m2, a
  truncation) crosses one; cases aimed at each answer (:func:`_kv_case_for`) put the budget where
  a wrong order of the granularities (the table's order where T < H, a tie to per-token) answers
  wrongly. Cases aimed at quantizers a little off the statement (:data:`KV_OFF_RECIPE`: a float64
  scale, division or dequantization) hold data the statement's quantizer gives back exactly (an
  error of 0) and theirs does not. Compared exactly.

Edge cases come first, then random ones from the seed.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

from ..exercise_types import AfterCall, Case, Exercise, ExerciseKind
from ..inference_math import (
    LLAMA3_8B,
    SCHEMES,
    ModelShape,
    Scheme,
    StorageFormat,
    decode_crossover_batch,
    decode_step,
)
from ..perf_model import GPU, H100_SXM, H200
from ..quantized_lm import fake_quant
from ..report_text import describe
from ..weight_quant import code_range, dequantize, rtn_quantize

# ------------------------------------------------------------------ 1. a decode step, predicted

#: the elements a format of exercise 1 may hold, and their bits
ELEMENT_BITS = {"bf16": 16, "fp16": 16, "e4m3fn": 8, "int8": 8, "int4": 4}
#: the names of the terms, as :class:`nbhelpers.inference_math.Term` spells them
TERMS = ("weights", "KV cache", "activations", "compute")
#: the relative tolerance on the time
TIME_RTOL = 1e-9


def as_shape(shape: dict) -> ModelShape:
    """The course's :class:`~nbhelpers.inference_math.ModelShape` of an exercise's dict."""
    keys = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab", "tied_embeddings")
    return ModelShape(name="exercise", source="an exercise's case", **{k: shape[k] for k in keys})


def as_format(fmt: dict) -> StorageFormat:
    return StorageFormat(
        "exercise",
        fmt["element"],
        fmt["granularity"],
        fmt["group"],
        scale_bits=fmt["scale_bits"],
        zero_bits=fmt["zero_bits"],
    )


def as_scheme(scheme: dict) -> Scheme:
    parts = ("weights", "activations", "kv_cache", "lm_head", "embedding")
    return Scheme("exercise", *(as_format(scheme[p]) for p in parts))


def as_gpu(gpu: dict) -> GPU:
    return GPU("exercise GPU", 132, gpu["hbm_bytes_per_s"], dict(gpu["peak_flops"]), 1e-6, 0.0, "an exercise's case")


def fmt_dict(f: StorageFormat) -> dict:
    """An exercise's dict of a course format."""
    return {
        "element": f.element,
        "granularity": f.granularity.value,
        "group": f.group,
        "scale_bits": f.scale_bits,
        "zero_bits": f.zero_bits,
    }


def scheme_dict(s: Scheme) -> dict:
    parts = ("weights", "activations", "kv_cache", "lm_head", "embedding")
    return {p: fmt_dict(getattr(s, p)) for p in parts}


def shape_dict(s: ModelShape) -> dict:
    keys = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab", "tied_embeddings")
    return {k: getattr(s, k) for k in keys}


def gpu_dict(g: GPU) -> dict:
    return {"hbm_bytes_per_s": g.hbm_bytes_per_s, "peak_flops": {k: g.peak_flops[k] for k in ("bf16", "fp16", "fp8")}}


class ExpectedStep(tuple):
    """(bound, seconds, cost): the answer, with the step's bytes and times (to word the message);
    shown as the answer alone."""

    def __repr__(self) -> str:
        return repr((self[0], self[1]))


def decode_step_time_ref(shape: dict, scheme: dict, gpu: dict, batch: int, context: int) -> ExpectedStep:
    """(the term that sets the step's time, the time in seconds) of one decode step:
    :func:`nbhelpers.inference_math.decode_step` on the course's objects."""
    cost = decode_step(as_shape(shape), as_scheme(scheme), as_gpu(gpu), batch, context)
    return ExpectedStep((cost.bound.value, cost.seconds, cost))


def _same_step(got, expected: ExpectedStep) -> str | None:
    bound, seconds, cost = expected
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"returned {describe(got)}, expected a tuple (term, seconds)"
    g_bound, g_s = got
    if type(g_bound) is not str or g_bound not in TERMS:  # a str subclass could lie in its __eq__
        return f"term: returned {describe(g_bound)}, expected one of {', '.join(map(repr, TERMS))}"
    if isinstance(g_s, bool) or not isinstance(g_s, (int, float, np.integer, np.floating)):
        return f"seconds: returned {describe(g_s)}, expected a float"
    g_s = float(g_s)
    parts = (
        f"weights {cost.weight_bytes:.6g} B, KV cache {cost.kv_bytes:.6g} B, activations "
        f"{cost.activation_bytes:.6g} B: {cost.bytes_s:.6g} s; FLOPs {cost.compute_s:.6g} s"
    )
    if not math.isfinite(g_s) or abs(g_s - seconds) > TIME_RTOL * seconds:
        return f"seconds: returned {g_s!r}, expected {seconds!r} ({parts})"
    if g_bound != bound:
        tie = abs(cost.compute_s - cost.bytes_s) <= TIME_RTOL * max(cost.compute_s, cost.bytes_s)
        if tie and bound == "compute":
            terms = {t.value: b for t, b in cost.bytes_by_term.items()}
            if g_bound == max(terms, key=terms.__getitem__):
                return None
        if tie and g_bound == "compute":
            return None
        return f"term: returned {g_bound!r}, expected {bound!r} ({parts})"
    return None


def _fmt(element, granularity="none", group=None, scale_bits=0, zero_bits=0) -> dict:
    return {
        "element": element,
        "granularity": granularity,
        "group": group,
        "scale_bits": scale_bits,
        "zero_bits": zero_bits,
    }


#: a format of each element, for exercise 1's edge cases
STEP_FORMATS = {
    "bf16": _fmt("bf16"),
    "fp16": _fmt("fp16"),
    "e4m3fn": _fmt("e4m3fn", "row", None, 32),
    "int8": _fmt("int8", "row", None, 16),
    "int4": _fmt("int4", "group", 128, 16),
}


def _random_format(rng: np.random.Generator, kind: str, fp8_weights: bool = False) -> dict:
    """A random storage format for the weights, KV cache, LM head or embedding."""
    sb = int(rng.choice([8, 16, 32]))
    g = int(rng.choice([16, 32, 64, 128, 256, int(rng.integers(3, 200))]))
    zb = int(rng.choice([0, 0, 4, 8]))
    if kind == "weights" and fp8_weights:
        fp8 = [_fmt("e4m3fn", "row", None, 32), _fmt("e4m3fn", "tensor", None, 32), _fmt("e4m3fn", "group", g, 8)]
        return fp8[int(rng.integers(len(fp8)))]
    options = [
        _fmt("bf16"),
        _fmt("int4", "group", g, sb, zb),
        _fmt("int8", "row", None, sb),
        _fmt("e4m3fn", "row", None, 32),
        _fmt("int4", "row", None, sb, zb),
    ]
    if kind == "kv_cache":
        options += [_fmt("e4m3fn", "tensor", None, 32), _fmt("int8", "group", g, sb, zb), _fmt("fp16")]
    else:
        options += [_fmt("fp16")]
    if kind == "weights":
        options += [_fmt("e4m3fn", "tensor", None, 32), _fmt("int8", "group", g, sb, zb)]
    return dict(options[int(rng.integers(len(options)))])


def _format_of(rng: np.random.Generator, element: str) -> dict:
    """A random storage format of one element (its granularity, group, scale and zero bits)."""
    sb = int(rng.choice([8, 16, 32]))
    g = int(rng.choice([16, 32, 64, 128, 256, int(rng.integers(3, 200))]))
    zb = int(rng.choice([0, 0, 4, 8]))
    options = {
        "bf16": [_fmt("bf16")],
        "fp16": [_fmt("fp16")],
        "e4m3fn": [_fmt("e4m3fn", "row", None, 32), _fmt("e4m3fn", "tensor", None, 32), _fmt("e4m3fn", "group", g, 8)],
        "int8": [_fmt("int8", "row", None, sb), _fmt("int8", "group", g, sb, zb)],
        "int4": [_fmt("int4", "group", g, sb, zb), _fmt("int4", "row", None, sb, zb)],
    }[element]
    return options[int(rng.integers(len(options)))]


def _random_shape(rng: np.random.Generator) -> dict:
    head_dim = int(rng.choice([32, 64, 80, 96, 128, 256]))
    n_kv = int(rng.choice([1, 2, 4, 8, 16]))
    n_heads = n_kv * int(rng.choice([1, 2, 4, 8]))
    d_model = int(rng.choice([n_heads * head_dim, int(rng.integers(4, 256)) * 64]))
    d_ff = int(rng.choice([int(d_model * rng.uniform(2, 4)), 4 * d_model, int(rng.integers(100, 60000))]))
    return {
        "n_layers": int(rng.integers(1, 97)),
        "d_model": d_model,
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
        "head_dim": head_dim,
        "d_ff": d_ff,
        "vocab": int(rng.choice([int(rng.integers(256, 300_000)), 32000, 128256, 151936])),
        "tied_embeddings": bool(rng.random() < 0.3),
    }


def _random_scheme(rng: np.random.Generator, tied: bool) -> dict:
    w8a8 = rng.random() < 0.3
    act = _fmt("e4m3fn", "row", None, 32) if w8a8 else _fmt(str(rng.choice(["bf16", "bf16", "fp16"])))
    scheme = {
        "weights": _random_format(rng, "weights", fp8_weights=w8a8),
        "activations": act,
        "kv_cache": _random_format(rng, "kv_cache"),
        "lm_head": _random_format(rng, "lm_head") if rng.random() < 0.6 else _fmt("bf16"),
        "embedding": _random_format(rng, "embedding") if rng.random() < 0.4 else _fmt("bf16"),
    }
    if tied:  # a tied model's LM head is its embedding table
        scheme["lm_head"] = dict(scheme["embedding"])
    return scheme


def _random_gpu(rng: np.random.Generator) -> dict:
    bf16 = float(rng.uniform(100e12, 2500e12))
    return {
        "hbm_bytes_per_s": float(rng.uniform(0.5e12, 10e12)),
        "peak_flops": {"bf16": bf16, "fp16": bf16 * float(rng.choice([1.0, 0.5])), "fp8": bf16 * rng.uniform(1, 2.5)},
    }


def _crossover(shape: dict, scheme: dict, gpu: dict, context: int) -> float:
    return decode_crossover_batch(as_shape(shape), as_scheme(scheme), as_gpu(gpu), context)


#: the largest batch of exercise 1's cases
MAX_BATCH = 4096
#: the kinds of random cases of exercise 1 aimed at one choice of the statement (:func:`_aimed_step`),
#: each with how many cases a seed draws of it
STEP_AIMS = (
    ("bf16 activations", len(ELEMENT_BITS)),
    ("fp16 at half rate", len(ELEMENT_BITS)),
    ("W8A8", len(ELEMENT_BITS)),
    ("half bytes", 2),
    ("per-tensor KV scale", 2),
    ("per-tensor embedding", 2),
    ("per-tensor LM head", 2),
    ("per-tensor weights", 2),
    ("group embedding", 2),
    ("group LM head", 2),
)
#: the aims of :data:`STEP_AIMS` at a small memory-bound model, where a few bytes show
SMALL_AIMS = (
    "half bytes",
    "per-tensor KV scale",
    "per-tensor embedding",
    "per-tensor LM head",
    "per-tensor weights",
    "group embedding",
    "group LM head",
)
#: the part of the scheme each per-tensor aim of :data:`SMALL_AIMS` gives one scale
PER_TENSOR_AIMS = {
    "per-tensor embedding": "embedding",
    "per-tensor LM head": "lm_head",
    "per-tensor weights": "weights",
}
#: the part of the scheme each group aim of :data:`SMALL_AIMS` stores in groups that do not divide
#: d_model (a row's last group shorter, with its own scale)
GROUP_AIMS = {
    "group embedding": "embedding",
    "group LM head": "lm_head",
}
#: in the cases of those aims, one scale's bytes are at least this many times the time's tolerance
#: (of the bytes)
PER_TENSOR_SHOWS = 1000


def _per_tensor(rng: np.random.Generator) -> dict:
    """A format with one scale for the whole tensor: e4m3fn, or int8 with a zero point."""
    element = str(rng.choice(["e4m3fn", "e4m3fn", "int8"]))
    return _fmt(element, "tensor", None, int(rng.choice([8, 16, 32])), 0 if element == "e4m3fn" else 8)


def _odd_groups(rng: np.random.Generator, d_model: int) -> dict:
    """A group format whose group does not divide ``d_model`` and is shorter than it: a row has two
    groups or more, the last one shorter (int4 or int8 with or without a zero point, or e4m3fn)."""
    group = int(rng.choice([g for g in range(3, d_model) if d_model % g]))
    element = str(rng.choice(["int4", "int4", "int8", "e4m3fn"]))
    if element == "e4m3fn":
        return _fmt(element, "group", group, 8)
    return _fmt(element, "group", group, int(rng.choice([8, 16, 32])), int(rng.choice([0, 4, 8])))


def _aimed_step(rng: np.random.Generator, aim: str, weights: str, head: str) -> Case:
    """A random case aimed at one of :data:`STEP_AIMS`: compute-bound (a batch 1.2 to 3 times the
    crossover, a short context) with the blocks' weights in element ``weights`` and the LM head in
    ``head``, under bf16 activations, or fp16 ones on a GPU whose fp16 peak is half its bf16 one,
    or e4m3fn ones (W8A8: the weights e4m3fn whatever ``weights`` is), each part's peak set by
    the statement's rule (the bf16, fp16 and fp8 peaks all differ); or a small memory-bound model
    whose tensors take a whole number of bytes and a half ("half bytes": 4-bit zero points on an
    odd number of scales) or whose KV cache has one scale for the whole tensor (its bytes are
    counted as nothing, and 4 of them would show), or whose embedding table (untied, at a batch
    of 8 to 64: one scale a gathered row), LM head (untied) or blocks' weights have one scale for
    the whole tensor, or whose embedding table (untied, at a batch of 8 to 64) or LM head (untied)
    is stored in groups that do not divide d_model (:func:`_odd_groups`), where a scale counted
    once too few or too many shows."""
    for _ in range(1000):
        if aim in SMALL_AIMS:
            n_kv = int(rng.choice([1, 2]))
            shape = {
                "n_layers": int(rng.integers(1, 5)),
                "d_model": 16 * int(rng.integers(2, 9)),
                "n_heads": n_kv * int(rng.choice([1, 2, 4])),
                "n_kv_heads": n_kv,
                "head_dim": int(rng.choice([16, 32, 64])),
                "d_ff": 2 * int(rng.integers(50, 500)) + 1,
                "vocab": 2 * int(rng.integers(128, 4000)) + 1,
                "tied_embeddings": bool(rng.random() < 0.3),
            }
        else:
            shape = _random_shape(rng)
        scheme = _random_scheme(rng, shape["tied_embeddings"])
        gpu = _random_gpu(rng)
        context = int(np.exp(rng.uniform(0, math.log(2048))))
        sixteen = _fmt(str(rng.choice(["bf16", "fp16"])))
        if aim in ("bf16 activations", "fp16 at half rate", "W8A8"):
            bf16 = gpu["peak_flops"]["bf16"]
            gpu["peak_flops"].update(fp16=bf16 / 2, fp8=bf16 * float(rng.uniform(1.5, 2.5)))
            scheme["lm_head"] = _format_of(rng, head)
            if aim == "W8A8":
                scheme["activations"] = _fmt("e4m3fn", "row", None, 32)
                scheme["weights"] = _random_format(rng, "weights", fp8_weights=True)
            else:
                scheme["activations"] = _fmt("bf16" if aim == "bf16 activations" else "fp16")
                scheme["weights"] = _format_of(rng, weights)
        elif aim == "half bytes":
            scheme["activations"] = sixteen
            sb = int(rng.choice([8, 16, 32]))
            scheme["weights"] = _fmt("int4", str(rng.choice(["row", "group"])), shape["d_model"] + 1, sb, 4)
            if scheme["weights"]["granularity"] == "row":
                scheme["weights"]["group"] = None
            scheme["embedding"] = _fmt(str(rng.choice(["int4", "int8"])), "row", None, sb, 4)
            scheme["lm_head"] = dict(scheme["embedding"])
        elif aim == "per-tensor KV scale":
            element = str(rng.choice(["e4m3fn", "int8", "int4"]))
            scale_bits = int(rng.choice([8, 16, 32]))
            scheme["kv_cache"] = _fmt(element, "tensor", None, scale_bits, 0 if element == "e4m3fn" else 8)
        elif aim == "per-tensor embedding":
            shape["tied_embeddings"] = False
            scheme["embedding"] = _per_tensor(rng)
        elif aim == "per-tensor LM head":
            shape["tied_embeddings"] = False
            scheme["lm_head"] = _per_tensor(rng)
        elif aim == "per-tensor weights":
            scheme["weights"] = _per_tensor(rng)
            scheme["activations"] = sixteen
        elif aim in GROUP_AIMS:
            shape["tied_embeddings"] = False
            scheme[GROUP_AIMS[aim]] = _odd_groups(rng, shape["d_model"])
        if shape["tied_embeddings"]:  # a tied model's LM head is its embedding table
            scheme["embedding"] = dict(scheme["lm_head"])
        x = _crossover(shape, scheme, gpu, context)
        if aim in SMALL_AIMS:
            batch = int(rng.integers(8 if aim in ("per-tensor embedding", "group embedding") else 1, 65))
            part = PER_TENSOR_AIMS.get(aim, GROUP_AIMS.get(aim))
            if part is not None and batch < x:  # one scale's bytes far above the check's tolerance
                cost = decode_step(as_shape(shape), as_scheme(scheme), as_gpu(gpu), batch, context)
                one = (scheme[part]["scale_bits"] + scheme[part]["zero_bits"]) / 8
                if one < PER_TENSOR_SHOWS * TIME_RTOL * (cost.weight_bytes + cost.kv_bytes + cost.activation_bytes):
                    continue
            if batch < x:
                return Case((shape, scheme, gpu, batch, context))
        elif math.isfinite(x) and 1.2 * x < MAX_BATCH:
            batch = min(MAX_BATCH, math.ceil(x * float(rng.uniform(1.2, 3.0))))
            return Case((shape, scheme, gpu, batch, context))
    raise ValueError(f"no case drawn for {aim!r}")  # never with these ranges


def aimed_elements(rng: np.random.Generator) -> list[tuple[str, str, str]]:
    """(aim, weights' element, LM head's element) of each aimed case of a seed: for each aim every
    element once as the weights' and once as the LM head's, paired at random."""
    elements = list(ELEMENT_BITS)
    out = []
    for aim, n in STEP_AIMS:
        heads = [elements[int(k)] for k in rng.permutation(len(elements))]
        out += [(aim, elements[k % len(elements)], heads[k % len(elements)]) for k in range(n)]
    return out


def _step_cases(rng: np.random.Generator) -> list[Case]:
    llama = shape_dict(LLAMA3_8B)
    cases = []
    for name, s in SCHEMES.items():
        cases.append(Case((llama, scheme_dict(s), gpu_dict(H200), 1, 8192), label=f"Llama 3 8B, {name}, H200"))
    cases += [
        Case((llama, scheme_dict(SCHEMES["bf16"]), gpu_dict(H100_SXM), 64, 4096), label="bf16, H100, batch 64"),
        Case(
            (llama, scheme_dict(SCHEMES["fp8 W8A8"]), gpu_dict(H200), 512, 128),
            label="fp8 W8A8 (the LM head in bf16), batch 512",
        ),
        Case((llama, scheme_dict(SCHEMES["int4 weights"]), gpu_dict(H200), 1, 1), label="int4 weights, one token"),
        Case(
            (llama, scheme_dict(SCHEMES["int4 weights + fp8 KV"]), gpu_dict(H200), 256, 131072),
            label="int4 + fp8 KV, batch 256 at 128k context",
        ),
    ]
    # the batches either side of the crossover, where the term changes
    for name, ctx in (("bf16", 256), ("int4 weights", 128), ("fp8 W8A8", 64), ("fp8 KV cache", 1024)):
        x = _crossover(llama, scheme_dict(SCHEMES[name]), gpu_dict(H200), ctx)
        for b in (math.floor(x), math.ceil(x) + (math.ceil(x) == x)):
            cases.append(
                Case((llama, scheme_dict(SCHEMES[name]), gpu_dict(H200), b, ctx), label=f"{name}: near crossover")
            )
    tiny = {
        "n_layers": 1,
        "d_model": 48,
        "n_heads": 3,
        "n_kv_heads": 1,
        "head_dim": 16,
        "d_ff": 100,
        "vocab": 256,
        "tied_embeddings": True,
    }
    odd = {
        "weights": _fmt("int4", "group", 32, 16, 4),
        "activations": _fmt("bf16"),
        "kv_cache": _fmt("int8", "group", 24, 16, 8),
        "lm_head": _fmt("int8", "row", None, 16),
        "embedding": _fmt("int8", "row", None, 16),
    }
    cases.append(Case((tiny, odd, gpu_dict(H200), 3, 7), label="groups of 32 that do not divide 48 or 100, tied"))
    # compute-bound at twice the crossover, where the choice of each part's peak shows: every
    # activation type with weights and an LM head of every element, on a GPU whose three peaks differ
    bf16 = _fmt("bf16")
    peaks = {
        "hbm_bytes_per_s": H200.hbm_bytes_per_s,
        "peak_flops": {"bf16": 990e12, "fp16": 495e12, "fp8": 1979e12},
    }
    for act in ELEMENT_BITS:
        if act in ("int8", "int4"):
            continue
        for w in ELEMENT_BITS if act != "e4m3fn" else ("e4m3fn",):
            for h in ELEMENT_BITS:
                parts = (STEP_FORMATS[w], STEP_FORMATS[act], bf16, STEP_FORMATS[h])
                scheme = dict(zip(("weights", "activations", "kv_cache", "lm_head"), parts), embedding=bf16)
                batch = math.ceil(2 * _crossover(llama, scheme, peaks, 64))
                label = f"{act} activations, {w} weights, {h} LM head: compute-bound"
                cases.append(Case((llama, scheme, peaks, batch, 64), label=label))
    # a KV cache with one scale for the whole tensor, on a model small enough that 4 bytes show
    for kv in (_fmt("e4m3fn", "tensor", None, 32), _fmt("int8", "tensor", None, 16, 8)):
        scheme = {"weights": bf16, "activations": bf16, "kv_cache": kv, "lm_head": bf16, "embedding": bf16}
        label = f"a per-tensor {kv['element']} KV scale (no bytes) on a tiny model"
        cases.append(Case((tiny, scheme, gpu_dict(H200), 2, 9), label=label))
    # one scale for the whole embedding table (one a gathered row, at a batch of 64) and for the
    # whole LM head, on an untied tiny model, memory-bound: 4 bytes show
    per_tensor = _fmt("e4m3fn", "tensor", None, 32)
    untied = dict(tiny, tied_embeddings=False)
    for part, batch in (("embedding", 64), ("lm_head", 4)):
        scheme = {"weights": bf16, "activations": bf16, "kv_cache": bf16, "lm_head": bf16, "embedding": bf16}
        scheme[part] = per_tensor
        label = f"a per-tensor e4m3fn {part.replace('_', ' ')} scale on an untied tiny model, batch {batch}"
        cases.append(Case((untied, scheme, gpu_dict(H200), batch, 9), label=label))
    tiny_odd = dict(tiny, d_ff=99, vocab=257, tied_embeddings=False)
    halves = {"weights": _fmt("int4", "group", 16, 16, 4), "activations": bf16, "kv_cache": bf16, "lm_head": bf16}
    cases.append(
        Case(
            (tiny_odd, dict(halves, embedding=bf16), gpu_dict(H200), 1, 5),
            label="tensors of a whole number of bytes and a half",
        )
    )
    for _ in range(28):
        shape = _random_shape(rng)
        scheme = _random_scheme(rng, shape["tied_embeddings"])
        gpu = _random_gpu(rng)
        context = int(np.exp(rng.uniform(0, math.log(200_000))))
        x = _crossover(shape, scheme, gpu, context)
        if math.isfinite(x) and x < MAX_BATCH - 1 and rng.random() < 0.4:
            batch = max(1, int(rng.choice([math.floor(x), math.ceil(x)])))
        else:
            batch = int(np.exp(rng.uniform(0, math.log(MAX_BATCH))))
        cases.append(Case((shape, scheme, gpu, batch, context)))
    for aim, weights, head in aimed_elements(rng):
        cases.append(_aimed_step(rng, aim, weights, head))
    return cases


# ------------------------------------------------------------------ 2. GPTQ's step for one column

#: the relative tolerance on the updated weights (of the largest weight)
GPTQ_RTOL = 1e-9


def quantize_column_ref(w, scale, zero, bits: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """(codes, dequantized) of one column by the statement's quantizer: in float32,
    ``clip(rint(fp32(w) * fp32(1 / scale)) + zero, qmin, qmax)``, then ``(q - zero) * scale``
    in float64."""
    qmin, qmax = code_range(bits, symmetric)
    s32 = np.asarray(scale, dtype=np.float32)
    inv = np.float32(1) / s32
    z = np.asarray(zero).astype(np.float32)
    q = np.clip(np.rint(np.asarray(w, dtype=np.float32) * inv) + z, qmin, qmax)
    dq = (q.astype(np.float64) - z.astype(np.float64)) * s32.astype(np.float64)
    return q.astype(np.int8 if symmetric else np.uint8), dq


class ExpectedColumn(tuple):
    """(codes, W_new, W, j): the answer, with the input (to word the message); shown as the
    answer alone."""

    def __repr__(self) -> str:
        return f"(codes {self[0].tolist()}, W_new of shape {self[1].shape})"


def gptq_column_ref(W, H, j: int, scale, zero, bits: int, symmetric: bool) -> ExpectedColumn:
    """Column j quantized, and the columns from j on updated by OBS: with F = {j, ..., K-1} and
    Hinv = (H[F, F])^-1, ``delta = (w_j - dq_j) / Hinv[0, 0]`` and
    ``W[:, F] -= outer(delta, Hinv[0, :])``."""
    W = np.asarray(W, dtype=np.float64)
    codes, dq = quantize_column_ref(W[:, j], scale, zero, bits, symmetric)
    hinv = np.linalg.inv(np.asarray(H, dtype=np.float64)[j:, j:])
    delta = (W[:, j] - dq) / hinv[0, 0]
    out = W.copy()
    out[:, j:] -= np.outer(delta, hinv[0, :])
    out[:, j] = dq  # exact: the column becomes its dequantized value
    return ExpectedColumn((codes, out, W, j))


def _same_column(got, expected: ExpectedColumn) -> str | None:
    """None if ``got`` is (codes, W_new) as the statement asks: codes a numpy array of the stated
    dtype (int8, or uint8 with a zero point) equal to the reference's, W_new a float64 array within
    :data:`GPTQ_RTOL`; and W as the call left it (an :class:`AfterCall`, as the check gives it)
    unchanged, bit for bit."""
    codes, w_new, W, j = expected
    W_after = None
    if isinstance(got, AfterCall):
        W_after = got.args[0] if got.args else None
        got = got.value
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"returned {describe(got)}, expected a tuple (codes, W_new)"
    g_codes, g_w = got
    # exact numpy arrays: a subclass could report a dtype or values its data does not have
    if type(g_codes) is not np.ndarray or g_codes.dtype != codes.dtype or g_codes.shape != codes.shape:
        return f"codes: returned {describe(g_codes)}, expected a numpy array of {codes.dtype} of shape {codes.shape}"
    if type(g_w) is not np.ndarray:
        return f"W_new: returned {describe(g_w)}, expected a numpy array of float64 of shape {w_new.shape}"
    c, w = g_codes, g_w
    bad = np.flatnonzero(c.astype(np.int64) != codes.astype(np.int64))
    if bad.size:
        i = int(bad[0])
        return (
            f"codes: {bad.size} of {c.size} wrong; first: row {i} (w = {W[i, j]!r}): got {int(c[i])}, "
            f"expected {int(codes[i])}"
        )
    if w.shape != w_new.shape or w.dtype != np.float64:
        return f"W_new: returned {describe(g_w)}, expected a numpy array of float64 of shape {w_new.shape}"
    w = w.astype(np.float64)
    tol = GPTQ_RTOL * max(float(np.abs(W).max()), float(np.abs(w_new).max()), 1e-300)
    err = np.abs(w - w_new)
    err[~np.isfinite(w)] = np.inf
    if (err > tol).any():
        r, k = (int(v) for v in np.argwhere(err > tol)[0])
        where = "an earlier column, which must not change" if k < j else f"column {k}"
        return (
            f"W_new: {int((err > tol).sum())} of {w.size} elements off by more than {tol:.3g}; first "
            f"[{r}, {k}] ({where}): got {float(w[r, k])!r}, expected {float(w_new[r, k])!r}"
        )
    if W_after is not None and not (
        type(W_after) is np.ndarray
        and W_after.dtype == W.dtype
        and W_after.shape == W.shape
        and W_after.tobytes() == W.tobytes()
    ):
        return "W changed: the function must leave its argument W as it was and return a new W_new"
    return None


def _hessian(rng: np.random.Generator, K: int) -> np.ndarray:
    """2 X^T X of M > K correlated random tokens, damped by 1 % of its mean diagonal."""
    M = K + int(rng.integers(4, 3 * K + 8))
    mix = rng.normal(size=(K, K)) * rng.uniform(0.1, 1.0)
    X = rng.normal(size=(M, K)) @ (np.eye(K) + mix) * rng.exponential(1.0, size=K)
    H = 2.0 * X.T @ X
    H[np.diag_indices(K)] += 0.01 * np.mean(np.diag(H))
    return (H + H.T) / 2


def _off_recipe_codes(W64: float, s32: np.float32) -> list[float]:
    """Unclamped codes (less the zero point) of one weight by quantizers off the statement's
    float32 recipe: float64 division, of fp32(w) or of w itself; float32 division; the float64
    quotient or the product by the float64 reciprocal rounded to float32; the product by fp32(1 /
    scale) left in float64, of fp32(w) or of w."""
    f32, w32 = np.float32, np.float32(W64)
    s64, inv = float(s32), np.float32(1) / s32
    return [
        float(np.rint(float(w32) / s64)),
        float(np.rint(W64 / s64)),
        float(np.rint(w32 / s32)),
        float(np.rint(f32(float(w32) / s64))),
        float(np.rint(f32(float(w32) * (1.0 / s64)))),
        float(np.rint(float(w32) * float(inv))),
        float(np.rint(W64 * float(inv))),
    ]


def _grid_tie(rng: np.random.Generator, s32: np.float32, lo: int, hi: int) -> tuple[np.float32, float] | None:
    """(scale, w) with a scale a few ulps from ``s32`` (not a power of two) and a float64 weight w
    whose float32 recipe lands exactly halfway, ``fp32(fp32(w) * fp32(1 / scale)) == k + 0.5``
    with ``lo <= k < hi``, while the exact quotient lies on the side of the odd code: ties to even
    give one code, and every quantizer of :func:`_off_recipe_codes` the other. w is fp32(w) nudged
    by a quarter of its ulp towards that side, so that a quantizer that skips fp32(w) differs too.
    None when no nearby scale and code gives one (the fewest codes, 2 bits, may not)."""
    f32 = np.float32
    for _ in range(200):
        k = int(rng.integers(lo, hi))
        s = f32(s32)
        for _ in range(int(rng.integers(0, 6))):
            s = np.nextafter(s, f32(np.inf))
        if float(s) == 2.0 ** round(math.log2(float(s))):
            continue
        inv = f32(1) / s
        w0 = f32((k + 0.5) * float(s))
        for d in (0, 1, -1, 2, -2, 3, -3, 4, -4):
            w = w0
            for _ in range(abs(d)):
                w = np.nextafter(w, f32(np.inf) if d > 0 else f32(-np.inf))
            if w * inv != f32(k + 0.5) or w == 0:
                continue
            ref = float(np.rint(w * inv))  # ties to even
            side = math.copysign(1.0, float(w) / float(s) - (k + 0.5))
            W64 = float(w) + side * math.copysign(0.25, float(w)) * float(np.spacing(abs(w)))
            if f32(W64) == w and all(c != ref for c in _off_recipe_codes(W64, s)):
                return s, W64
    return None


def _column_case(rng, N, K, j, bits, symmetric, label="", spread=1.0, W=None, ties=False, wide=False) -> Case:
    if W is None:
        W = rng.normal(size=(N, K)) * np.exp(rng.normal(size=(N, 1)) * spread) * rng.uniform(0.01, 10)
    W = np.asarray(W, dtype=np.float64)
    qmin, qmax = code_range(bits, symmetric)
    # the scale of each row from its weights (as a per-channel GPTQ takes it), sometimes too small
    # so that the column's codes clamp at both ends
    amax = np.maximum(np.abs(W).max(axis=1), 1e-30)
    if symmetric:
        scale = amax / qmax
        zero = np.zeros(N, dtype=np.int8)
    else:
        lo, hi = np.minimum(W.min(axis=1), 0), np.maximum(W.max(axis=1), 0)
        scale = np.maximum(hi - lo, 1e-30) / (qmax - qmin)
        zero = np.clip(-np.rint(lo / scale), qmin, qmax).astype(np.uint8)
    if wide:
        scale = scale * rng.uniform(0.2, 0.6)
    scale = scale.astype(np.float32)
    if ties == "grid":
        # halfway cases at the row's own scale (a few ulps off): the float32 recipe alone gives the
        # reference's codes (:func:`_grid_tie`); a row that finds none stays as it is
        W = W.copy()
        for r in range(N):
            found = _grid_tie(rng, scale[r], qmin - int(zero[r]), qmax - int(zero[r]))
            if found is not None:
                scale[r], W[r, j] = found
    elif ties:
        # the column on exact halfway points of the float32 grid (a power-of-two scale), nudged in
        # float64 so that w / scale in float64 lies above the tie while fp32(w) is on it
        scale = np.exp2(np.round(np.log2(scale.astype(np.float64)))).astype(np.float32)
        z = zero.astype(np.int64)
        k = rng.integers(qmin - z, qmax - z)  # k and k + 1 both codes (less the zero point)
        W = W.copy()
        W[:, j] = (k + 0.5) * scale.astype(np.float64) * (1 + 2.0**-40)
    return Case((W, _hessian(rng, K), int(j), scale, zero, int(bits), bool(symmetric)), label=label)


def _column_cases(rng: np.random.Generator) -> list[Case]:
    edge = np.random.default_rng(1202)
    cases = [
        _column_case(edge, 6, 8, 0, 4, True, "the first column: F is every column"),
        _column_case(edge, 6, 8, 7, 4, True, "the last column: nothing left to update"),
        _column_case(edge, 5, 9, 3, 4, False, "a zero point"),
        _column_case(edge, 7, 10, 4, 4, True, "halfway cases: ties to even in float32", ties=True),
        _column_case(edge, 7, 10, 5, 4, False, "halfway cases with a zero point", ties=True),
        _column_case(edge, 8, 10, 3, 4, True, "halfway cases at scales not powers of two", ties="grid"),
        _column_case(edge, 8, 10, 6, 8, False, "halfway cases, not powers of two, zero point", ties="grid"),
        _column_case(edge, 8, 12, 6, 3, True, "scales too small: codes clamp at both ends", wide=True),
        _column_case(edge, 8, 12, 2, 4, False, "a zero point, codes clamp", wide=True),
        _column_case(edge, 1, 1, 0, 8, True, "one weight"),
        _column_case(edge, 4, 16, 15, 2, False, "2 bits, last column"),
        _column_case(edge, 3, 6, 1, 8, True, "int8"),
        _column_case(edge, 9, 6, 2, 8, False, "8-bit codes with a zero point (up to 255)"),
    ]
    W = edge.normal(size=(6, 9))
    W[:, 4] = 0.0
    cases.append(_column_case(edge, 6, 9, 4, 4, True, "a column of zeros", W=W))
    cases.append(_column_case(edge, 6, 9, 4, 4, False, "a column of zeros, zero point", W=W))
    for _ in range(24):
        N, K = int(rng.integers(1, 24)), int(rng.integers(2, 40))
        j = int(rng.choice([int(rng.integers(0, K)), int(rng.integers(1, K))]))
        bits = int(rng.choice([2, 3, 4, 4, 4, 8]))
        cases.append(
            _column_case(
                rng,
                N,
                K,
                j,
                bits,
                bool(rng.random() < 0.5),
                spread=float(rng.uniform(0, 2)),
                ties=(False, False, False, True, "grid", "grid")[int(rng.integers(6))],
                wide=bool(rng.random() < 0.5),
            )
        )
    return cases


# ------------------------------------------------------------------ 3. channel vs groups, constructed


def relative_rtn_error(W, bits: int, group: int | None, symmetric: bool) -> float:
    """||W - dequantize(rtn_quantize(W))||_F / ||W||_F by the course's engine (``group=None``:
    one scale per output channel)."""
    w = np.asarray(W, dtype=np.float64)
    q = rtn_quantize(w, bits, group, symmetric)
    return float(np.linalg.norm(w - dequantize(*q, group)) / np.linalg.norm(w))


def channel_vs_group_example(N: int, K: int, group: int, bits: int, symmetric: bool) -> np.ndarray:
    """Each row: one outlier A alone in the first group (the rest of it zeros), and in every other
    group small weights of one sign and magnitude just under half a step of the outlier's scale,
    which one scale per row rounds to 0 while each group's own scale stores them exactly."""
    qmin, qmax = code_range(bits, symmetric)
    A = 1.0
    step = A / qmax if symmetric else A / (qmax - qmin)
    a = 0.499 * step
    W = np.full((N, K), a)
    W[:, :group] = 0.0
    W[:, 0] = A
    return W.astype(np.float32)


class GroupTarget:
    """What :func:`channel_vs_group_ref` expects: the case's numbers, and an example that meets
    them (not compared with anything: it shows the case has an answer)."""

    __slots__ = ("N", "K", "group", "bits", "symmetric", "worse", "better", "example")

    def __init__(self, N, K, group, bits, symmetric, worse, better, example) -> None:
        self.N, self.K, self.group, self.bits, self.symmetric = N, K, group, bits, symmetric
        self.worse, self.better, self.example = worse, better, example

    def __repr__(self) -> str:
        return (
            f"a ({self.N}, {self.K}) matrix: per-channel relative error >= {self.worse:.4g}, groups of "
            f"{self.group} <= {self.better:.4g}"
        )


def channel_vs_group_ref(N, K, group, bits, symmetric, worse, better) -> GroupTarget:
    ex = channel_vs_group_example(N, K, group, bits, symmetric)
    return GroupTarget(N, K, group, bits, symmetric, worse, better, ex)


def channel_vs_group_reason(got, t: GroupTarget) -> str | None:
    """None if ``got`` is a finite float32 or float64 (N, K) array, not all zeros, whose
    per-channel RTN relative error is at least ``worse`` and group error at most ``better``."""
    if not isinstance(got, np.ndarray):
        return f"returned {describe(got)}, expected a numpy array of float32 or float64"
    if got.dtype not in (np.float32, np.float64):
        return f"returned an array of {got.dtype}, expected float32 or float64"
    if got.shape != (t.N, t.K):
        return f"returned an array of shape {got.shape}, expected (N, K) = ({t.N}, {t.K})"
    w = np.array(got, dtype=np.float64, copy=True)
    if not np.isfinite(w).all():
        return "W holds inf or NaN"
    if np.abs(w).max() > 1e30:
        return f"W holds |w| up to {np.abs(w).max():.3g}: keep the weights within 1e30"
    if not (w != 0).any():
        return "W is all zeros: its relative error is not defined"
    e_row = relative_rtn_error(w, t.bits, None, t.symmetric)
    e_group = relative_rtn_error(w, t.bits, t.group, t.symmetric)
    if e_row < t.worse:
        return f"per-channel relative error {e_row:.4g} < {t.worse:.4g} (groups of {t.group}: {e_group:.4g})"
    if e_group > t.better:
        return f"groups of {t.group}: relative error {e_group:.4g} > {t.better:.4g} (per channel: {e_row:.4g})"
    return None


def _group_compare(got, expected: GroupTarget) -> str | None:
    try:
        return channel_vs_group_reason(got, expected)
    except Exception as e:  # a hostile object: a failed case, never a crash
        return f"could not judge the matrix ({type(e).__name__})"


def _group_case(rng, N, K, group, bits, symmetric, label="") -> Case:
    reach = relative_rtn_error(channel_vs_group_example(N, K, group, bits, symmetric), bits, None, symmetric)
    worse = round(reach * float(rng.uniform(0.5, 0.8)), 4)
    better = round(float(np.exp(rng.uniform(math.log(1e-4), math.log(1e-2)))), 6)
    return Case((N, K, group, bits, bool(symmetric), worse, better), label=label)


def _group_cases(rng: np.random.Generator) -> list[Case]:
    edge = np.random.default_rng(1203)
    cases = [
        _group_case(edge, 4, 4096, 32, 4, True, "int4, symmetric, K = 4096, groups of 32"),
        _group_case(edge, 4, 4096, 32, 4, False, "int4 with a zero point"),
        _group_case(edge, 2, 64, 32, 4, True, "two groups a row"),
        _group_case(edge, 3, 256, 16, 8, True, "int8, groups of 16"),
        _group_case(edge, 3, 512, 128, 3, False, "int3 with a zero point, groups of 128"),
        _group_case(edge, 1, 96, 32, 2, True, "2 bits, one row"),
    ]
    for _ in range(8):
        group = int(rng.choice([8, 16, 32, 64, 128]))
        K = group * int(rng.integers(2, 64))
        cases.append(
            _group_case(rng, int(rng.integers(1, 9)), K, group, int(rng.integers(2, 9)), bool(rng.random() < 0.5))
        )
    return cases


# ------------------------------------------------------------------ 4. a KV-cache scale granularity

#: the granularities of exercise 4, in the order that breaks a tie of their counts of scales
KV_GRANULARITIES = ("per-tensor", "per-head", "per-token", "per-token-head")
#: fp32's smallest positive: the floor of a scale, so that an all-zero slice stays zero
KV_MIN_SCALE = 2.0**-149
#: float32's unit roundoff
F32_UNIT = 2.0**-24


def kv_norm_margin(n: int) -> float:
    """How far (relative) taking the norms in float32 rather than float64 can move a relative error
    of ``n`` numbers, or the budget it is compared with: the difference ``x - x_dq`` rounded once an
    element, the squares and their sum in any order (at most ``gamma_n = n u / (1 - n u)`` of the
    sum), the square roots and the ratio rounded, and the budget rounded to float32 (numpy compares
    a float32 with a Python float in float32): below ``(n + 6) u`` with u = 2**-24, float32's unit
    roundoff. Every budget keeps twice this from every error of its case
    (:func:`kv_budget_clear`)."""
    return (n + 6) * F32_UNIT


def kv_budget_clear(errors, budget: float, n: int) -> bool:
    """Whether ``budget`` keeps a relative ``2 * kv_norm_margin(n)`` from each of ``errors`` (an
    error of exactly 0 is 0 in any precision: nothing to keep from), so that the norms in float32
    or float64, and ``<`` or ``<=``, give the same answer."""
    m = 2 * kv_norm_margin(n)
    return budget > 0 and all(e == 0 or abs(e - budget) > m * max(e, budget) for e in errors)


def kv_scale_count(granularity: str, H: int, T: int) -> int:
    return {"per-tensor": 1, "per-head": H, "per-token": T, "per-token-head": H * T}[granularity]


def kv_errors(x: np.ndarray, element: str) -> dict[str, float]:
    """The relative error ``||x - x_dq||_F / ||x||_F`` (float64) of each granularity, x (H, T, D)
    quantized by the chapter's :func:`nbhelpers.quantized_lm.fake_quant` with static scales
    ``max(fp32(amax / max_element), 2**-149)``."""
    t = torch.from_numpy(np.asarray(x, dtype=np.float32))
    m = 127.0 if element == "int8" else 448.0
    dims = {"per-tensor": (0, 1, 2), "per-head": (1, 2), "per-token": (0, 2), "per-token-head": (2,)}
    x64 = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(x64)
    out = {}
    for g in KV_GRANULARITIES:
        amax = t.abs().amax(dim=dims[g], keepdim=True)
        scale = torch.clamp(amax / m, min=KV_MIN_SCALE)
        x_dq = fake_quant(t, scale, element).numpy().astype(np.float64)
        out[g] = float(np.linalg.norm(x64 - x_dq) / norm)
    return out


#: quantizers a little off the statement's float32 recipe, which the cases aimed at them
#: (:func:`_kv_case_off_recipe`) tell apart: the division and the dequantization in float64, the
#: dequantization alone in float64, the scale in float64, the scale as amax * fp32(1 / m)
KV_OFF_RECIPE = ("float64 quantizer", "float64 dequantization", "float64 scale", "scale by 1 / m")


def kv_errors_off(x: np.ndarray, element: str, how: str) -> dict[str, float]:
    """The relative errors of :func:`kv_errors` by a quantizer ``how`` of :data:`KV_OFF_RECIPE`,
    or ``"float32 error"``: the statement's quantizer with the error computed in float32 (a route
    the check accepts: no case sets its budget where that changes the answer). numpy and ml_dtypes."""
    x32 = np.asarray(x, dtype=np.float32)
    x64 = x32.astype(np.float64)
    m = np.float32(127.0 if element == "int8" else 448.0)
    axes = {"per-tensor": None, "per-head": (1, 2), "per-token": (0, 2), "per-token-head": (2,)}
    out = {}
    for g in KV_GRANULARITIES:
        amax = np.abs(x32).max(axis=axes[g], keepdims=True)
        if how == "float64 scale":
            scale = np.maximum(amax.astype(np.float64) / float(m), 2.0**-149)
        elif how == "scale by 1 / m":
            scale = np.maximum(amax * (np.float32(1) / m), np.float32(2.0**-149))
        else:
            scale = np.maximum(amax / m, np.float32(2.0**-149))
        if how == "float64 quantizer":
            v = np.clip(x64 / scale.astype(np.float64), -m, m)
        else:
            v = np.clip(x32 / scale, -m, m)
        q = np.rint(v) if element == "int8" else v.astype(ml_dtypes.float8_e4m3fn).astype(v.dtype)
        if how in ("float64 quantizer", "float64 dequantization"):
            x_dq = q.astype(np.float64) * scale.astype(np.float64)
        else:
            x_dq = (q * scale).astype(np.float64)
        if how == "float32 error":
            d = x32 - (q * scale).astype(np.float32)
            out[g] = float(np.linalg.norm(d) / np.linalg.norm(x32))
        else:
            out[g] = float(np.linalg.norm(x64 - x_dq) / np.linalg.norm(x64))
    return out


def _kv_answer(errors: dict[str, float], H: int, T: int, budget: float) -> str | None:
    order = sorted(KV_GRANULARITIES, key=lambda g: (kv_scale_count(g, H, T), KV_GRANULARITIES.index(g)))
    return next((g for g in order if errors[g] <= budget), None)


def kv_scale_granularity_ref(x: np.ndarray, element: str, budget: float) -> str | None:
    """The granularity with the fewest scales (ties in :data:`KV_GRANULARITIES`' order) whose
    relative error is at most ``budget``; None when none is."""
    H, T, _ = np.shape(x)
    errors = kv_errors(x, element)
    order = sorted(KV_GRANULARITIES, key=lambda g: (kv_scale_count(g, H, T), KV_GRANULARITIES.index(g)))
    return next((g for g in order if errors[g] <= budget), None)


def _kv_x(
    rng: np.random.Generator, H: int, T: int, D: int, heads=1.0, tokens=1.0, outliers=0, zero: str = ""
) -> np.ndarray:
    """Keys (or values) (H, T, D) float32: normal numbers, each head and each token scaled by
    exp(N(0, spread)), a few tokens (attention sinks) much larger, and (``zero`` "head" or
    "token") one head or token all zeros, unless that would leave nothing."""
    x = rng.normal(size=(H, T, D))
    x *= np.exp(rng.normal(size=(H, 1, 1)) * heads)
    x *= np.exp(rng.normal(size=(1, T, 1)) * tokens)
    for _ in range(outliers):
        x[:, int(rng.integers(T)), :] *= float(rng.uniform(20, 2000))
    if zero == "head" and H > 1:
        x[int(rng.integers(H))] = 0.0
    if zero == "token" and T > 1:
        x[:, int(rng.integers(T))] = 0.0
    return x.astype(np.float32)


def _kv_budget(rng: np.random.Generator, x: np.ndarray, element: str, where: str) -> float:
    """A budget: ``"tight"`` just clear of one granularity's error, either side (twice
    :func:`kv_norm_margin` and a little more); ``"gap"`` within the gap between two errors;
    ``"none"`` below every error; ``"all"`` above every one; each clear of every error
    (:func:`kv_budget_clear`), a gap too narrow for it giving way to a tight budget."""
    errors = sorted(set(kv_errors(x, element).values()))
    n, m = x.size, 2.5 * kv_norm_margin(x.size)
    positive = [e for e in errors if e > 0] or [1e-3]
    if where == "none":
        return float(positive[0] * rng.uniform(0.3, 0.9))
    if where == "all":
        return float(errors[-1] * rng.uniform(1.1, 3.0) or 1e-3)
    if where == "gap" and len(errors) > 1:
        i = int(rng.integers(len(errors) - 1))
        if errors[i] > 0:
            lo, hi = math.log(errors[i]), math.log(errors[i + 1])
            b = float(math.exp(lo + (hi - lo) * rng.uniform(0.2, 0.8)))
            if kv_budget_clear(errors, b, n):
                return b
    e = errors[int(rng.integers(len(errors)))]
    side = float(rng.choice([-1.0, 1.0]))
    for e, side in [(e, side), (e, -side), *((p, s) for p in positive for s in (side, -side))]:
        b = float(e * (1 + side * m))
        if kv_budget_clear(errors, b, n):
            return b
    return float(positive[0] * rng.uniform(0.3, 0.9))  # below every error: always clear


def _kv_case(rng, x, element, where, label="") -> Case:
    return Case((x, element, _kv_budget(rng, x, element, where)), label=label)


def _kv_case_for(rng, shape, element: str, target: str, label: str, tries: int = 200, **spread) -> Case | None:
    """A case whose answer is ``target``: data drawn (:func:`_kv_x`) until target's error lies
    below the error of every granularity that comes before it, and a budget at or above target's
    error and below theirs (2.5 times :func:`kv_norm_margin` above target's error, half way in
    the log, or as far below the lowest of theirs, whichever keep clear of every error); None
    (or, for an edge case, an error) when no draw of ``tries`` does."""
    for _ in range(tries):
        x = _kv_x(rng, *shape, **spread)
        H, T, _ = x.shape
        errors = kv_errors(x, element)
        order = sorted(KV_GRANULARITIES, key=lambda g: (kv_scale_count(g, H, T), KV_GRANULARITIES.index(g)))
        before = [errors[g] for g in order[: order.index(target)]]
        top = min(before, default=errors[target] * 4)
        m = 2.5 * kv_norm_margin(x.size)
        if errors[target] * (1 + 2 * m) < top * (1 - 2 * m):
            # just above target's error, half way, or just below the next error up (where the
            # granularities after target in the order may pass too), clear of every error
            budgets = [errors[target] * (1 + m), math.sqrt(errors[target] * top), top * (1 - m)]
            budgets = [float(b) for b in budgets if b > 0 and kv_budget_clear(errors.values(), b, x.size)]
            if budgets:
                return Case((x, element, budgets[int(rng.integers(len(budgets)))]), label=label)
    if label:  # an edge case must be what its label says
        raise ValueError(f"{label}: no data drawn makes {target} the answer")
    return None


def _kv_case_off_recipe(rng, shape, element: str, how: str, label: str = "", tries: int = 200, **spread) -> Case:
    """A case whose answer the quantizer ``how`` of :data:`KV_OFF_RECIPE` gets wrong, whatever
    precision the norms are taken in: data the statement's quantizer leaves exactly as they are
    at one scale for the whole tensor (:func:`_kv_x`'s data quantized and dequantized so, drawn
    until quantizing them again gives them back bit for bit: an error of exactly 0, in any
    precision), where ``how``'s scale, division or product lands off the float32 grid (an error
    above 0), and a budget of 5 to 30% of that error, clear of every error of the case: the
    statement answers per-tensor, ``how`` a finer granularity or None."""
    m = np.float32(127.0 if element == "int8" else 448.0)
    for _ in range(tries):
        x0 = _kv_x(rng, *shape, **spread)
        amax = np.abs(x0).max()
        if amax == 0:
            continue
        scale = np.maximum(amax / m, np.float32(KV_MIN_SCALE))
        v = np.clip(x0 / scale, -m, m)
        q = np.rint(v) if element == "int8" else v.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
        x = (q * scale).astype(np.float32)
        errors, off = kv_errors(x, element), kv_errors_off(x, element, how)
        if errors["per-tensor"] != 0 or not off["per-tensor"] > 0:
            continue
        for _ in range(8):
            b = float(off["per-tensor"] * rng.uniform(0.05, 0.3))
            if kv_budget_clear(errors.values(), b, x.size) and _kv_answer(off, *x.shape[:2], b) != "per-tensor":
                return Case((x, element, b), label=label)
    raise ValueError(f"no data drawn tells {how!r} from the statement's quantizer")


def _kv_cases(rng: np.random.Generator) -> list[Case]:
    edge, cases = np.random.default_rng(1204), []
    x = _kv_x(edge, 8, 64, 32, heads=2.0, tokens=0.3)
    cases.append(_kv_case(edge, x, "int8", "tight", "int8, heads of very different sizes"))
    x = _kv_x(edge, 4, 48, 16, heads=0.2, tokens=0.2, outliers=2)
    cases.append(_kv_case(edge, x, "int8", "gap", "int8, two attention-sink tokens"))
    x = _kv_x(edge, 4, 40, 16, heads=3.0, tokens=2.5, outliers=1)
    cases.append(_kv_case(edge, x, "e4m3fn", "tight", "fp8: sizes spread past e4m3fn's range"))
    for shape, target, label in (
        ((8, 8, 16), "per-head", "as many tokens as heads: per-head first"),
        ((16, 3, 8), "per-token", "fewer tokens than heads: per-token first"),
        ((4, 40, 16), "per-token", "int8, per-token"),
        ((4, 40, 16), "per-token-head", "int8: only the finest meets it"),
    ):
        cases.append(_kv_case_for(edge, shape, "int8", target, label, heads=1.5, tokens=1.5))
    for _ in range(200):  # an all-zero head, per-head the answer
        x = _kv_x(edge, 4, 32, 16, heads=2.0, tokens=0.1)
        x[1] = 0.0
        e = kv_errors(x, "int8")
        b = e["per-head"] * (1 + 2.5 * kv_norm_margin(x.size))
        if b < e["per-tensor"] and kv_budget_clear(e.values(), b, x.size):
            cases.append(Case((x, "int8", b), label="an all-zero head"))
            break
    x = _kv_x(edge, 4, 32, 16, heads=1.0, tokens=1.0)
    cases.append(_kv_case(edge, x, "e4m3fn", "none", "a budget no granularity meets"))
    cases.append(_kv_case(edge, x, "int8", "all", "a budget every granularity meets"))
    x = _kv_x(edge, 1, 1, 1)
    cases.append(Case((x, "int8", 1e-3), label="one number: exact at every granularity"))
    for how, element in zip(KV_OFF_RECIPE, ("int8", "e4m3fn", "int8", "e4m3fn")):
        label = f"{element}: a budget between the errors of the float32 recipe and of a {how}"
        cases.append(_kv_case_off_recipe(edge, (4, 40, 16), element, how, label, heads=1.0, tokens=1.0))
    for _ in range(24):
        H, D = int(rng.choice([1, 2, 4, 8, 8, 16, 16])), int(rng.choice([8, 16, 32, 64]))
        T = int(rng.choice([int(rng.integers(1, 80)), H, int(rng.integers(1, H + 1))]))
        element = str(rng.choice(["int8", "int8", "e4m3fn"]))
        spread = {
            "heads": float(rng.uniform(0, 3)),
            "tokens": float(rng.uniform(0, 3)),
            "outliers": int(rng.integers(0, 3)),
            "zero": str(rng.choice(["", "head", "token"])),
        }
        target = str(rng.choice([*KV_GRANULARITIES, "per-head", "per-token", "none", "all"]))
        case = None
        if target in KV_GRANULARITIES:
            case = _kv_case_for(rng, (H, T, D), element, target, "", tries=20, **spread)
        if case is None:
            x = _kv_x(rng, H, T, D, **spread)
            where = target if target in ("none", "all") else str(rng.choice(["tight", "gap"]))
            case = _kv_case(rng, x, element, where)
        cases.append(case)
    for i, how in enumerate(KV_OFF_RECIPE * 2):
        H, T, D = int(rng.choice([1, 2, 4, 8, 16])), int(rng.integers(2, 80)), int(rng.choice([8, 16, 32, 64]))
        spread = {"heads": float(rng.uniform(0, 2)), "tokens": float(rng.uniform(0, 2))}
        element = ("int8", "e4m3fn")[(i + i // len(KV_OFF_RECIPE)) % 2]  # each quantizer with each element
        cases.append(_kv_case_off_recipe(rng, (H, T, D), element, how, **spread))
    return cases


def _same_granularity(got, expected) -> str | None:
    if got is not None and type(got) is not str:  # a str subclass could lie in its __eq__
        return f"returned {describe(got)}, expected one of {', '.join(map(repr, KV_GRANULARITIES))} or None"
    if got != expected:
        return f"returned {got!r}, expected {expected!r}"
    return None


#: What an answer may not call (Exercise.forbidden): the chapter's arithmetic of a step, GPTQ and
#: the round-to-nearest quantizer (exercise 3 may call them to test its matrix, not in its answer).
FORBIDDEN = (
    "nbhelpers.answer_keys",
    "nbhelpers.inference_math",
    "nbhelpers.weight_quant",
    "nbhelpers.quantized_lm",
)

EXERCISES = [
    Exercise(
        "ex12.decode_step_time",
        "Predict what sets a decode step's time",
        5,
        decode_step_time_ref,
        _step_cases,
        compare=_same_step,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.PREDICT,
    ),
    Exercise(
        "ex12.gptq_column",
        "GPTQ's step for one column, from its equations",
        6,
        gptq_column_ref,
        _column_cases,
        compare=_same_column,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.IMPLEMENT,
        returned_args=(0,),  # W: it must be left unchanged
    ),
    Exercise(
        "ex12.channel_vs_group",
        "A matrix that one scale per channel ruins and groups keep",
        4,
        channel_vs_group_ref,
        _group_cases,
        compare=_group_compare,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.CONSTRUCT,
    ),
    Exercise(
        "ex12.kv_scale_granularity",
        "A KV-cache scale granularity for an error budget",
        4,
        kv_scale_granularity_ref,
        _kv_cases,
        compare=_same_granularity,
        forbidden=FORBIDDEN,
        kind=ExerciseKind.PREDICT,
    ),
]
