"""The napkin math of inference (nbhelpers.inference_math) against hand computations: Llama 3 8B's
parameters and KV cache, a decode step's bytes and time, the batch where it turns compute-bound,
what int4 weights and an fp8 KV cache buy, a prefill's bound; and every bad input refused."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from nbhelpers.inference_math import (
    H200_MEMORY_BYTES,
    LLAMA3_8B,
    SCHEMES,
    STORAGE_FORMATS,
    Granularity,
    ModelShape,
    Scheme,
    StorageFormat,
    Term,
    capacity_rows,
    decode_crossover_batch,
    decode_step,
    format_rows,
    kv_bytes_per_token,
    kv_capacity,
    memory_bytes,
    napkin_rows,
    prefill,
    stored_weight_bytes,
)
from nbhelpers.perf_model import GPU, H100_SXM, H200

# Llama 3 8B by hand (Meta's config.json): 32 layers, hidden 4096, 32 heads and 8 KV heads of
# 128, SwiGLU 14,336, vocabulary 128,256, untied
LAYERS, D, HEADS, KV_HEADS, HD, FF, VOCAB = 32, 4096, 32, 8, 128, 14336, 128256
LAYER_PARAMS = D * D + 2 * D * (KV_HEADS * HD) + D * D + 3 * D * FF  # q, k, v, o; gate, up, down
NORMS = (2 * LAYERS + 1) * D
BF16_KV_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V, layers, KV heads, head_dim, bytes: 131,072 B
# numbers per token through HBM per block: qkv in/out, attention q in/out, o in/out, gate-up in/out, down in/out
ACT_BLOCK = (D + D + 2 * 1024) + (D + D) + (D + D) + (D + 2 * FF) + (2 * FF + D)
BW, BF16_PEAK, FP8_PEAK = 4.8e12, 990e12, 1979e12  # H200: NVIDIA's specification, as perf_model.H200 states


def test_the_gpu_numbers_used_by_hand_are_perf_models():
    assert (H200.hbm_bytes_per_s, H200.peak_flops["bf16"], H200.peak_flops["fp8"]) == (BW, BF16_PEAK, FP8_PEAK)


def test_llama3_8b_has_8_03e9_parameters():
    """32 x (4096^2 x 2 + 2 x 4096 x 1024 + 3 x 4096 x 14336) + 2 x 128256 x 4096 + 65 x 4096 =
    8,030,261,248: the "8B" of its name (8.03e9)."""
    n = LAYERS * LAYER_PARAMS + 2 * VOCAB * D + NORMS
    assert n == 8_030_261_248
    assert LLAMA3_8B.n_params == n
    assert round(LLAMA3_8B.n_params / 1e9, 2) == 8.03
    assert LLAMA3_8B.matmul_params == LAYERS * LAYER_PARAMS + VOCAB * D  # the embedding is a gather
    tied = replace(LLAMA3_8B, tied_embeddings=True)
    assert tied.n_params == n - VOCAB * D
    assert "config" in LLAMA3_8B.source.lower()


def test_kv_cache_bytes_per_token_by_hand():
    """bf16: 2 x 32 x 8 x 128 x 2 = 131,072 B a token (128 KiB); fp8 with a per-tensor scale: half;
    int8 with a 16-bit scale per token and head: half plus 2 B for each of its 2 x 32 x 8 rows."""
    assert LLAMA3_8B.kv_numbers_per_token() == 2 * 32 * 8 * 128
    assert kv_bytes_per_token(LLAMA3_8B, "bf16") == BF16_KV_TOKEN == 131_072
    assert kv_bytes_per_token(LLAMA3_8B, "fp8 per-tensor") == BF16_KV_TOKEN / 2
    assert kv_bytes_per_token(LLAMA3_8B, "int8 per-token-head") == BF16_KV_TOKEN / 2 + 2 * 32 * 8 * 2


def test_storage_formats_bits_per_element_by_hand():
    """int4 in groups of 128 with a 16-bit scale: 4 + 16/128 = 4.125 bits; with a 4-bit zero point
    4 + 20/128; groups of 32: 4.5; fp8 with one fp32 scale a row of 4096: 8 + 32/4096; bf16 16."""
    want = {
        "bf16": 16,
        "fp8 per-tensor": 8,
        "fp8 per-channel": 8 + 32 / 4096,
        "int4 g128": 4.125,
        "int4 g128 zp": 4 + 20 / 128,
        "int4 g32": 4.5,
        "int8 per-channel": 8 + 16 / 4096,
    }
    rows = {r["name"]: r for r in format_rows(4096)}
    assert list(rows) == list(STORAGE_FORMATS)
    for name, bits in want.items():
        assert rows[name]["bits_per_element"] == bits, name
        assert rows[name]["bytes_per_element"] == bits / 8, name
    assert rows["int4 g128"]["element_bits"] == 4 and rows["fp8 per-channel"]["element"] == "e4m3fn"
    # a (N, K) tensor: elements and scales counted exactly
    int4 = STORAGE_FORMATS["int4 g128"]
    assert int4.scales(14336, 4096) == 14336 * 32
    assert int4.nbytes(14336, 4096) == 14336 * 4096 / 2 + 14336 * 32 * 2
    assert STORAGE_FORMATS["fp8 per-tensor"].nbytes(4, 8) == 32 + 4


def decode_bytes_by_hand(B: int, L: int) -> float:
    """bf16: the blocks' and the LM head's weights and the norms once, B embedding rows, B x L
    tokens of KV read and B written, B tokens' activations (LM head's input and logits included)."""
    weights = 2 * (LAYERS * LAYER_PARAMS + VOCAB * D + NORMS) + B * 2 * D
    act = B * 2 * (LAYERS * ACT_BLOCK + D + VOCAB)
    return weights + B * (L + 1) * BF16_KV_TOKEN + act


def test_decode_at_batch_1_is_weight_bound_at_16_gb_over_4_8_tb_s():
    """One bf16 token at 8k context: 15.0 GB of weights (the embedding table is gathered, not read)
    and 1.07 GB of KV cache: about the model's 16 GB at 4.8 TB/s, 3.35 ms; its 19 GFLOP take 20 us."""
    c = decode_step(LLAMA3_8B, "bf16", H200, 1, 8192)
    assert c.bytes == decode_bytes_by_hand(1, 8192)
    assert c.bytes_s == c.bytes / BW == c.seconds
    assert c.bound is Term.WEIGHTS
    assert c.compute_s < c.bytes_s / 100
    assert c.seconds == pytest.approx(2 * LLAMA3_8B.n_params / BW, rel=0.01)  # "16 GB / 4.8 TB/s"
    assert 3.3e-3 < c.seconds < 3.4e-3
    attention = 4 * LAYERS * HEADS * HD * 8192
    assert c.flops == 2 * (LAYERS * LAYER_PARAMS + VOCAB * D) + attention


def test_at_batch_256_and_32k_context_the_kv_cache_dominates_and_does_not_fit():
    """256 sequences x 32,768 tokens x 128 KiB = 1.1 TB of KV cache a step, 73 times the weights;
    nor does it fit in an H200's 141 GB."""
    c = decode_step(LLAMA3_8B, "bf16", H200, 256, 32768)
    assert c.kv_read_bytes == 256 * 32768 * BF16_KV_TOKEN
    assert c.bytes == decode_bytes_by_hand(256, 32768)
    assert c.bound is Term.KV_CACHE and c.kv_bytes > 50 * c.weight_bytes
    assert c.resident_bytes > H200_MEMORY_BYTES


def crossover_by_hand(L: int) -> float:
    """Bytes = W + B k, FLOP time = B f: B* = (W / BW) / (f - k / BW) (bf16 on the H200)."""
    W = 2 * (LAYERS * LAYER_PARAMS + VOCAB * D + NORMS)
    k = 2 * D + (L + 1) * BF16_KV_TOKEN + 2 * (LAYERS * ACT_BLOCK + D + VOCAB)
    f = (2 * (LAYERS * LAYER_PARAMS + VOCAB * D) + 4 * LAYERS * HEADS * HD * L) / BF16_PEAK
    return math.inf if f <= k / BW else (W / BW) / (f - k / BW)


@pytest.mark.parametrize("L", [1, 128, 256, 512])
def test_the_crossover_batch_matches_the_closed_form_and_the_step_flips_there(L):
    """At short context a big enough batch makes the step compute-bound: below B* the bytes take
    longer, above it the FLOPs (about 300 at 128 tokens in bf16 on an H200)."""
    b = decode_crossover_batch(LLAMA3_8B, "bf16", H200, L)
    assert b == pytest.approx(crossover_by_hand(L), rel=1e-9)
    below, above = math.floor(b), math.floor(b) + 1
    assert decode_step(LLAMA3_8B, "bf16", H200, below, L).bound is not Term.COMPUTE
    step = decode_step(LLAMA3_8B, "bf16", H200, above, L)
    assert step.bound is Term.COMPUTE and step.compute_s > step.bytes_s
    if L == 128:
        assert 250 < b < 350


def test_at_long_context_no_batch_is_compute_bound():
    """Each bf16 KV byte brings n_heads / n_kv_heads = 4 attention FLOPs, far below the H200's 206
    FLOPs a byte: from about 1k tokens of context the KV cache outgrows the matmuls' FLOPs."""
    assert HEADS / KV_HEADS < BF16_PEAK / BW
    for L in (1024, 8192, 131072):
        assert crossover_by_hand(L) == math.inf == decode_crossover_batch(LLAMA3_8B, "bf16", H200, L)
        assert decode_step(LLAMA3_8B, "bf16", H200, 4096, L).bound is Term.KV_CACHE


def test_int4_weights_cut_the_batch_1_step_by_the_bytes_ratio():
    """Memory-bound both ways, the step's time falls by its bytes' ratio; at short context that is
    the weights' ratio, 3.2x and not 4x: the int4 groups' scales (4.125 bits) and the LM head kept in
    bf16 (1.05 GB of the 4.7)."""
    bf16 = decode_step(LLAMA3_8B, "bf16", H200, 1, 128)
    int4 = decode_step(LLAMA3_8B, "int4 weights", H200, 1, 128)
    assert int4.bound is Term.WEIGHTS
    assert bf16.seconds / int4.seconds == pytest.approx(bf16.bytes / int4.bytes, rel=1e-12)
    head = 2 * VOCAB * D
    int4_weights = LAYERS * LAYER_PARAMS * 4.125 / 8 + 2 * NORMS + head + 2 * D
    assert int4.weight_bytes == int4_weights
    ratio = bf16.weight_bytes / int4.weight_bytes
    assert bf16.seconds / int4.seconds == pytest.approx(ratio, rel=0.01)
    assert 3.1 < ratio < 3.3


def test_fp8_kv_cache_doubles_the_tokens_that_fit():
    """The same weights, half the bytes a token: twice the tokens (to the floor's one token) and
    twice the sequences at each context; the free bytes are 141e9 B less the stored weights."""
    bf16 = kv_capacity(LLAMA3_8B, "bf16", H200, 32768)
    fp8 = kv_capacity(LLAMA3_8B, "fp8 KV cache", H200, 32768)
    assert bf16.weight_bytes == fp8.weight_bytes == 2 * LLAMA3_8B.n_params
    assert bf16.kv_bytes == H200_MEMORY_BYTES - 2 * LLAMA3_8B.n_params
    assert bf16.tokens == int(bf16.kv_bytes // BF16_KV_TOKEN)
    assert fp8.tokens in (2 * bf16.tokens, 2 * bf16.tokens + 1)
    assert fp8.sequences in (2 * bf16.sequences, 2 * bf16.sequences + 1)
    assert bf16.sequences == bf16.tokens // 32768
    rows = {r["scheme"]: r for r in capacity_rows(contexts=(8192, 32768))}
    assert list(rows) == list(SCHEMES)
    assert rows["bf16"]["sequences 32768"] == bf16.sequences and rows["fp8 KV cache"]["tokens"] == fp8.tokens
    assert kv_capacity(LLAMA3_8B, "bf16", H100_SXM, 8192).kv_bytes == 80e9 - 2 * LLAMA3_8B.n_params
    reserved = kv_capacity(LLAMA3_8B, "bf16", H200, 8192, reserved_bytes=10e9)
    assert reserved.kv_bytes == bf16.kv_bytes - 10e9


def test_prefill_is_compute_bound_from_a_few_hundred_tokens():
    """One prompt: at 64 tokens the weights' bytes still bind; from 256 tokens the FLOPs do (the
    H200's 206 FLOPs a byte against 2 FLOPs a weight a token and 2 bytes a weight). Causal
    attention: P (P + 1) / 2 query-key pairs, about half the square; W8A8's fp8 halves the
    matmuls' time."""
    assert prefill(LLAMA3_8B, "bf16", H200, 1, 64).bound is Term.WEIGHTS
    for P in (256, 512, 2048, 8192):
        assert prefill(LLAMA3_8B, "bf16", H200, 1, P).bound is Term.COMPUTE, P
    c = prefill(LLAMA3_8B, "bf16", H200, 4, 1000)
    assert c.attention_flops == 4 * LAYERS * HEADS * HD * 4 * 1000 * 1001 / 2
    assert c.matmul_flops == 2 * LAYERS * LAYER_PARAMS * 4000 + 2 * VOCAB * D * 4  # logits of the last tokens
    assert c.kv_write_bytes == c.kv_read_bytes == 4000 * BF16_KV_TOKEN
    bf16, fp8 = (prefill(LLAMA3_8B, s, H200, 1, 2048) for s in ("bf16", "fp8 W8A8"))
    assert fp8.bound is Term.COMPUTE and 1.8 < bf16.seconds / fp8.seconds < 2


def test_the_napkin_table_rows():
    rows = napkin_rows()
    assert [(r["step"], r["batch"], r["tokens"]) for r in rows] == [
        *[("decode", B, L) for B in (1, 16, 256) for L in (8192, 32768, 131072)],
        ("prefill", 1, 2048),
        ("prefill", 16, 2048),
    ]
    first = rows[0]
    c = decode_step(LLAMA3_8B, "bf16", H200, 1, 8192)
    assert first["seconds"] == c.seconds and first["bound"] == "weights" and first["fits"]
    assert first["speedup int4 weights"] == c.seconds / decode_step(LLAMA3_8B, "int4 weights", H200, 1, 8192).seconds
    long = rows[8]  # batch 256 at 128k: the fp8 KV cache halves the step, the weights' formats do not matter
    assert long["bound"] == "KV cache" and not long["fits"]
    assert long["speedup fp8 KV cache"] == pytest.approx(2, rel=0.01)
    assert long["speedup int4 weights"] == pytest.approx(1, rel=0.01)
    assert rows[-1]["bound"] == "compute" and rows[-1]["speedup fp8 W8A8"] > 1.8
    assert set(rows[0]) >= {"bytes", "weight_bytes", "kv_bytes", "activation_bytes", "flops", "resident_bytes"}


def test_schemes_compute_at_their_tensor_cores_rate():
    """W8A8's matmuls at the fp8 peak, its bf16 LM head at bf16's; weight-only int4 at bf16's."""
    assert SCHEMES["fp8 W8A8"].compute == "fp8" and SCHEMES["fp8 W8A8"].lm_head_compute == "bf16"
    assert SCHEMES["int4 weights"].compute == "bf16"
    c = decode_step(LLAMA3_8B, "fp8 W8A8", H200, 1, 100)
    want = 2 * LAYERS * LAYER_PARAMS / FP8_PEAK + 2 * VOCAB * D / BF16_PEAK + 4 * LAYERS * HEADS * HD * 100 / BF16_PEAK
    assert c.compute_s == pytest.approx(want, rel=1e-12)
    assert stored_weight_bytes(LLAMA3_8B, "bf16") == 2 * LLAMA3_8B.n_params


def test_the_gpus_memory_sizes():
    assert memory_bytes(H200) == 141e9 and memory_bytes(H100_SXM) == 80e9


# ====================================================================== bad inputs


SHAPE = dict(
    name="s", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128, vocab=256, tied_embeddings=False
)


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(n_kv_heads=3), ValueError, r"n_heads \(4\) must be a multiple of n_kv_heads \(3\)"),
        (dict(n_layers=0), ValueError, "n_layers must be a positive int"),
        (dict(d_ff=1.5), TypeError, "d_ff must be a positive int"),
        (dict(vocab=True), TypeError, "vocab must be a positive int"),
        (dict(tied_embeddings=1), TypeError, "tied_embeddings must be True or False"),
        (dict(source=""), ValueError, "source must say where the numbers come from"),
        (dict(name=None), ValueError, "name must be a non-empty str"),
    ],
)
def test_a_bad_model_shape_is_refused(change, error, match):
    with pytest.raises(error, match=match):
        ModelShape(**{"source": "a test", **SHAPE, **change})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(element="int3"), "element 'int3' is neither int4 / int8 nor a float format"),
        (dict(element="int4", granularity="block"), "unknown granularity 'block'; expected one of"),
        (dict(element="int4", granularity="group", scale_bits=16), "group must be a positive int"),
        (dict(element="int4", granularity="row", group=128, scale_bits=16), "group is only for granularity 'group'"),
        (dict(element="int4", granularity="row"), "granularity 'row' needs scale_bits > 0"),
        (dict(element="bf16", scale_bits=16), "granularity 'none'.* scale_bits = zero_bits = 0"),
        (dict(element="e4m3fn", granularity="row", scale_bits=-1), "scale_bits must be a non-negative int"),
    ],
)
def test_a_bad_storage_format_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StorageFormat("f", **kwargs)


def test_bad_schemes_and_names_are_refused():
    f = STORAGE_FORMATS
    with pytest.raises(ValueError, match="fp8 activations need fp8 weights.* got weights in 'int4'"):
        Scheme("w4a8", f["int4 g128"], f["fp8 per-token"], f["bf16"])
    with pytest.raises(ValueError, match="activations in 'int8' feed no tensor core here"):
        Scheme("a8", f["int8 per-channel"], f["int8 per-channel"], f["bf16"])
    with pytest.raises(ValueError, match="unknown storage format 'int2'; expected one of: bf16"):
        Scheme("x", "int2", "bf16", "bf16")
    with pytest.raises(ValueError, match="unknown scheme 'int3'; expected one of: bf16, int4 weights"):
        decode_step(LLAMA3_8B, "int3", H200, 1, 1)
    with pytest.raises(TypeError, match="alternatives must be a sequence of schemes"):
        napkin_rows(alternatives="fp8 W8A8")


def test_bad_steps_are_refused():
    with pytest.raises(ValueError, match="batch must be a positive int"):
        decode_step(LLAMA3_8B, "bf16", H200, 0, 8192)
    with pytest.raises(TypeError, match="context must be a positive int"):
        decode_step(LLAMA3_8B, "bf16", H200, 1, 8192.0)
    with pytest.raises(TypeError, match="prompt must be a positive int"):
        prefill(LLAMA3_8B, "bf16", H200, 1, True)
    with pytest.raises(TypeError, match="shape must be a ModelShape"):
        decode_step({"d_model": 4096}, "bf16", H200, 1, 1)
    with pytest.raises(TypeError, match="gpu must be a perf_model.GPU"):
        decode_step(LLAMA3_8B, "bf16", "H200", 1, 1)
    no_fp8 = GPU("old", 10, 1e12, {"bf16": 1e14}, 1e-6, 0.0, "a test")
    with pytest.raises(ValueError, match="old has no peak for 'fp8'; it has: bf16"):
        decode_step(LLAMA3_8B, "fp8 W8A8", no_fp8, 1, 1)
    with pytest.raises(ValueError, match="no memory size for GPU 'old'; known: H200, H100 SXM"):
        kv_capacity(LLAMA3_8B, "bf16", no_fp8, 1)
    with pytest.raises(ValueError, match="reserved_bytes must be a non-negative finite number"):
        kv_capacity(LLAMA3_8B, "bf16", H200, 1, reserved_bytes=-1.0)
    with pytest.raises(ValueError, match=r"do not fit in the H100 SXM's 80 GB"):
        kv_capacity(LLAMA3_8B, "bf16", H100_SXM, 1, reserved_bytes=70e9)
    with pytest.raises(ValueError, match="contexts must be a non-empty sequence of positive ints"):
        napkin_rows(contexts=())
    with pytest.raises(ValueError, match=r"each prompt must be a \(batch, prompt\) pair"):
        napkin_rows(prompts=(2048,))
    with pytest.raises(ValueError, match="rows must be a positive int"):
        STORAGE_FORMATS["bf16"].nbytes(0, 4)
    assert Granularity("group") is Granularity.GROUP


def test_a_tied_model_stores_its_table_once_and_reads_it_whole_as_the_lm_head():
    """Tied embeddings: one vocab x d_model table in memory; a decode step still reads it whole
    (it is the LM head) and gathers B rows of it (the embedding)."""
    tied = replace(LLAMA3_8B, name="Llama 3 8B, tied", tied_embeddings=True)
    assert stored_weight_bytes(tied, "bf16") == 2 * tied.n_params == 2 * (LLAMA3_8B.n_params - VOCAB * D)
    c = decode_step(tied, "int4 weights", H200, 3, 10)
    assert c.weight_bytes == LAYERS * LAYER_PARAMS * 4.125 / 8 + 2 * NORMS + 2 * VOCAB * D + 3 * 2 * D
