"""Tests of nbhelpers.kernels.topk, chapter 11's top-k kernels: every method of the ``topk``
launcher ("row", "two_stage", "radix") against nbhelpers.topk.topk_ref **exactly** (the same
indices, ties to the lowest index, and the same value codes, NaN payloads included) and against
torch.topk (the same values, indices valid up to ties), for float32, bfloat16 and float16, on rows
that stress the keys and the tie rule (NaN of both signs and several payloads, +-inf, -0 and +0,
all-equal rows, many ties at the k-th value) and on the shapes that stress the launcher (V not a
multiple of the block or the chunk, k larger than a chunk, k = 1, k = V, 1-D input, a row stride
other than V, no rows); the launch plan; bad input.

As in the other kernel tests, ``setup_device()`` runs first: without a GPU it sets
TRITON_INTERPRET=1 before the kernel module is imported, and the kernels run in Triton's
interpreter on the CPU. There a running top-k costs a loop step per entry it inserts, so "row"
and "two_stage" get small k on short rows, and large k (1,024 on a vocabulary-sized row) goes to
"radix", whose passes do not depend on k.
"""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # before importing the kernels: sets TRITON_INTERPRET=1 on a CPU

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import nbhelpers.kernels.topk as T_K
from nbhelpers import topk as T
from nbhelpers.kernels.topk import (
    DEFAULT_BLOCK_V,
    MERGE_BLOCK,
    METHODS,
    RADIX_BLOCK_V,
    STAGES,
    _absorb,
    _empty_list,
    _packed,
    _signed_keys,
    in_flight_blocks,
    plan,
    predicted,
    topk,
)

DEV = INFO.device
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
INT_VIEW = {16: torch.int16, 32: torch.int32}
# small steps, so that a short row spans several blocks (and chunks) and ends in a partial one
SMALL = {"row": {"block_v": 64}, "two_stage": {"block_v": 32, "chunk": 72}, "radix": {"block_v": 128}}


def bits_of(x: torch.Tensor) -> torch.Tensor:
    """The codes of a float tensor as signed integers (NaN payloads included)."""
    return x.view(INT_VIEW[x.element_size() * 8])


def stress_rows(fmt: str, V: int, k: int, seed: int) -> torch.Tensor:
    """(7, V) rows of one format: random; few distinct values; all equal; signed zeros with a
    few numbers; NaNs of both signs and three payloads each with +-inf among small integers;
    k - 1 large distinct values over a sea of equal ones (the k-th value tied V - k + 1 times);
    and the same with NaNs on top."""
    f = T.KEY_FORMATS[fmt]
    dt = DTYPES[fmt]
    g = torch.Generator().manual_seed(seed)
    rows = [
        torch.randn(V, generator=g),
        torch.randint(-3, 4, (V,), generator=g).float(),
        torch.full((V,), -2.5),
        torch.where(torch.rand(V, generator=g) < 0.5, -0.0, 0.0),
        torch.randint(-2, 3, (V,), generator=g).float(),
        torch.ones(V),
        torch.ones(V),
    ]
    rows[3][torch.randperm(V, generator=g)[:3]] = torch.tensor([-1.0, 0.5, -0.25])
    x = torch.stack(rows).to(dt)
    # k - 1 distinct values above the sea of ones, in random columns
    top = torch.randperm(V, generator=g)[: k - 1]
    x[5, top] = (2 + torch.arange(k - 1)).to(dt)
    x[6, top] = (2 + torch.arange(k - 1)).to(dt)
    # NaN codes built from the format's masks (the sign bit read as a negative signed int)
    nans = [s | f.exp_mask | p for s in (0, f.sign_bit) for p in (1, (f.man_mask + 1) >> 1, f.man_mask)]
    nans = torch.tensor([c - (1 << f.bits) if c >= f.sign_bit else c for c in nans], dtype=INT_VIEW[f.bits])
    b = bits_of(x)
    pos = torch.randperm(V, generator=g)
    n_nan = max(V // 6, 1)
    b[4, pos[:n_nan]] = nans[torch.randint(0, len(nans), (n_nan,), generator=g)]
    x[4, pos[n_nan : n_nan + 3]] = float("inf")
    x[4, pos[n_nan + 3 : n_nan + 6]] = float("-inf")
    b[6, pos[: min(3, V)]] = nans[:3]
    return x.to(DEV)


def assert_exact(x: torch.Tensor, k: int, method: str, **kw):
    """topk(x, k, method) returns topk_ref's indices and its value codes bit for bit, and agrees
    with torch.topk up to ties."""
    values, indices = topk(x, k, method, **kw)
    ref_values, ref_indices = T.topk_ref(x, k)
    assert values.dtype == x.dtype and indices.dtype == torch.int64
    assert values.shape == indices.shape == (*x.shape[:-1], k)
    assert values.device == indices.device == x.device
    if not torch.equal(indices, ref_indices):
        bad = (indices != ref_indices).reshape(-1, k).any(-1).nonzero().flatten().tolist()
        raise AssertionError(f"{method}, k={k}: indices differ in rows {bad}: {indices} vs {ref_indices}")
    assert torch.equal(bits_of(values), bits_of(ref_values)), f"{method}, k={k}: value codes differ"
    assert_agrees_with_torch_topk(x, k, values)


def assert_agrees_with_torch_topk(x: torch.Tensor, k: int, values: torch.Tensor):
    """torch.topk's values equal ours and its indices are valid, up to ties: distinct, in range,
    and pointing at entries whose top-k keys equal those of our values position by position. The
    codes are compared bit for bit wherever a value has one code only: zeros (-0 ties +0, and
    torch may take either) and NaNs (they tie, and torch's CPU topk of bfloat16 returns every
    NaN as 0x7FC0) are compared by key."""
    tv, ti = torch.topk(x, k)
    f = T.KEY_FORMATS[{torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[x.dtype]]
    key = lambda t: torch.from_numpy(T.topk_keys(T.float_bits(t)[0], f).astype(np.int64))  # noqa: E731
    ours = key(values)
    assert ((ti >= 0) & (ti < x.shape[-1])).all()
    assert all(len(set(r)) == k for r in ti.reshape(-1, k).tolist())
    assert torch.equal(key(torch.gather(bits_of(x), -1, ti).view(x.dtype)), ours)
    assert torch.equal(key(tv), ours)
    single = (ours != f.sign_bit) & (ours != f.all_ones)
    assert torch.equal(bits_of(tv).cpu()[single], bits_of(values).cpu()[single])


# ====================================================================== every method, exactly


@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("method", METHODS)
def test_every_method_equals_topk_ref_on_stress_rows(method, fmt):
    """V = 203: not a multiple of any block (64, 32, 128) or of the chunk (72); k = 1, a k whose
    k-th value is tied many times, and k = 13 on rows built for it."""
    x = stress_rows(fmt, 203, 13, seed=1)
    for k in (1, 4, 13):
        assert_exact(x, k, method, **SMALL[method])


@pytest.mark.parametrize("fmt", list(DTYPES))
def test_two_stage_with_k_larger_than_a_chunk(fmt):
    """k = 100 > chunk = 64: each first-stage list (K_PAD = 128) holds its whole chunk and
    empty slots, which the merge must never take; the last chunk (V = 150) has 22 columns."""
    x = stress_rows(fmt, 150, 100, seed=2)[4:6]  # the NaN row and the tie-at-the-k-th row
    assert_exact(x, 100, "two_stage", chunk=64)
    assert plan(150, 100, "two_stage", chunk=64) == {
        "K_PAD": 128,
        "BLOCK_V": 1024,
        "STAGES": STAGES,
        "CHUNK": 64,
        "n_chunks": 3,
        "MERGE_BLOCK": 1024,  # two lists of 128 at least; 1,024 candidates
    }


def test_the_merge_reads_several_lists_a_step_over_several_steps():
    """V = 4,200 in chunks of 32 columns, k = 50 (K_PAD = 64, so every list ends in fillers): 132
    lists, 8,448 candidates, merged 1,024 a step (16 lists) in nine steps, the last one mostly
    past the end: on a row of negative values, where anything read past the end that passed for a
    key (a zero is +0's) would enter the top k (the merge's code does not depend on the format:
    one is enough here; the stress rows check the tie rule)."""
    gen = torch.Generator().manual_seed(3)
    x = -(torch.rand((1, 4200), generator=gen) + 0.5).to(torch.bfloat16)
    p = plan(4200, 50, "two_stage", chunk=32)
    assert p["n_chunks"] == 132 and p["MERGE_BLOCK"] == 1024 and -(-132 * 64 // 1024) == 9
    assert_exact(x, 50, "two_stage", chunk=32)


@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("method", METHODS)
def test_k_equal_to_V(method, fmt):
    """The whole row, sorted: every empty slot of a K_PAD = 64 list sorted below every value."""
    x = stress_rows(fmt, 37, 5, seed=3)[[1, 3, 4, 6]]
    assert_exact(x, 37, method, **SMALL[method])
    assert_exact(x[:, :1], 1, method)  # V = 1


@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("method", METHODS)
def test_one_row_in_one_dimension(method, fmt):
    x = stress_rows(fmt, 100, 7, seed=4)[6]
    assert x.dim() == 1
    assert_exact(x, 7, method, **SMALL[method])
    values, indices = topk(x, 7, method, **SMALL[method])
    v2, i2 = topk(x[None], 7, method, **SMALL[method])
    assert torch.equal(indices, i2[0]) and torch.equal(bits_of(values), bits_of(v2[0]))


@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("method", METHODS)
def test_a_row_stride_other_than_V(method, fmt):
    """A column slice of a wider tensor (row stride 300, V = 200, last dimension contiguous): the
    kernels read it in place; the columns outside the slice hold larger values and NaNs, which a
    kernel reading past a row's end or with the wrong stride would return."""
    wide = torch.full((4, 300), float("nan"), dtype=DTYPES[fmt], device=DEV)
    wide[:, 250:] = 1e4
    x = wide[:, 40:240]
    x.copy_(stress_rows(fmt, 200, 9, seed=5)[[0, 1, 5, 3]])
    assert x.stride() == (300, 1)
    assert_exact(x, 9, method, **SMALL[method])
    # and a last dimension that is not contiguous: the launcher copies it first
    assert_exact(wide[:, 40:240:2], 9, method, **SMALL[method])


@pytest.mark.parametrize("method", METHODS)
def test_no_rows(method):
    x = torch.zeros((0, 50), device=DEV)
    values, indices = topk(x, 5, method)
    assert values.shape == indices.shape == (0, 5)
    assert values.dtype == torch.float32 and indices.dtype == torch.int64


@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("method", METHODS)
def test_default_plan_on_a_longer_row(method, fmt):
    """The launcher's own defaults (BLOCK_V = 1,024, chunk = 8,192, radix block 2,048) on rows of
    20,000 model-like logits: several blocks and chunks, the last of each partial."""
    x = torch.from_numpy(T.model_like_logits(2, 20_000, seed=6)).to(DTYPES[fmt]).to(DEV)
    assert_exact(x, 8, method)


@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
def test_radix_with_large_k_on_a_vocabulary_row(fmt):
    """Llama 3's vocabulary, 128,256 columns, k = 1,024 and 50: radix select's passes do not
    depend on k (2 histograms for 16-bit keys, 4 for 32-bit), so large k is cheap here; k = 50
    hits many ties in bf16."""
    x = torch.from_numpy(T.model_like_logits(1, 128_256, seed=7)).to(DTYPES[fmt]).to(DEV)
    for k in (1024, 50):
        assert_exact(x, k, "radix")


@pytest.mark.parametrize("method", METHODS)
def test_block_sizes_that_are_not_powers_of_two_are_rounded_up(method):
    x = stress_rows("bf16", 150, 5, seed=8)[:3]
    assert_exact(x, 5, method, block_v=100, chunk=50)
    assert plan(150, 5, method, block_v=100, chunk=50)["BLOCK_V"] == 128


# ====================================================================== the launch plan


def test_plan():
    V = 128_256
    for k, k_pad in ((1, 1), (8, 8), (50, 64), (64, 64), (1024, 1024)):
        row = plan(V, k, "row")
        assert row == {"K_PAD": k_pad, "BLOCK_V": max(DEFAULT_BLOCK_V, k_pad), "STAGES": 3, "CHUNK": V, "n_chunks": 1}
        two = plan(V, k, "two_stage")  # batch 1: one or two blocks a program, all loaded at once,
        if k_pad < 1024:  # unless each chunk's list (1,024 candidates) costs more than its steps
            assert two["CHUNK"] in (two["BLOCK_V"], 2 * two["BLOCK_V"])
        assert two["n_chunks"] == -(-V // two["CHUNK"])
        assert two["MERGE_BLOCK"] == max(1024, 2 * k_pad) == max(MERGE_BLOCK, 2 * k_pad)
        radix = {"K_PAD": k_pad, "BLOCK_V": RADIX_BLOCK_V, "DIGIT_BITS": 8, "STAGES": 3, "n_chunks": 1}
        assert plan(V, k, "radix") == radix

    # the default chunk: of the powers of two from one block to the whole row, the one whose plan
    # the model predicts fastest (the larger on a tie); it grows with the batch
    def total(rows, value_bytes, chunk):
        return sum(q.seconds for q in predicted(V, 50, "two_stage", rows, value_bytes, chunk))

    for value_bytes in (2, 4):
        chunks = []
        for rows in (1, 8, 64, 256, 4096):
            p = plan(V, 50, "two_stage", rows=rows, value_bytes=value_bytes)
            options = [DEFAULT_BLOCK_V * 2**i for i in range(8)]  # 1,024 to 131,072 >= V
            best = min(total(rows, value_bytes, c) for c in options)
            assert total(rows, value_bytes, p["CHUNK"]) == pytest.approx(best, rel=1e-9), (rows, value_bytes)
            assert all(total(rows, value_bytes, c) > best * (1 + 1e-9) for c in options if c > p["CHUNK"])
            chunks.append(p["CHUNK"])
        assert chunks == sorted(chunks) and chunks[0] < chunks[-1], chunks
    # at batch 1 every program loads its whole chunk at once (two blocks, STAGES - 1 ahead): the
    # whole row is in flight in the first latency
    p = plan(V, 50, "two_stage")
    assert p["CHUNK"] <= (STAGES - 1) * p["BLOCK_V"]
    # at batch 256 the rows fill the GPU: one chunk a row (no merge, fewest insertions)
    assert plan(V, 50, "two_stage", rows=256)["n_chunks"] == 1
    # a program keeps STAGES - 1 blocks in flight, no more than its chunk has, at least one
    assert [in_flight_blocks(c, 1024, 3) for c in (1, 1024, 2048, 8192)] == [1, 1, 2, 2]
    assert in_flight_blocks(8192, 1024, 1) == 1 and in_flight_blocks(8192, 1024, 5) == 4
    with pytest.raises(ValueError, match="value_bytes must be 2"):
        plan(V, 50, "two_stage", value_bytes=8)
    # the running top-k reads at least K_PAD columns a step
    assert plan(V, 2000, "row", block_v=64)["BLOCK_V"] == 2048
    assert plan(1000, 8, "two_stage", chunk=300)["n_chunks"] == 4


# ====================================================================== bad input

K_RANGE = r"k must be an int from 1 to 10 \(at most the row length\)"  # rows of 10 below


@pytest.mark.parametrize(
    "x, k, kw, error, match",
    [
        (
            torch.zeros(4, 10, dtype=torch.float64),
            2,
            {},
            TypeError,
            "float32, bfloat16 or float16 values, got torch.float64",
        ),
        (torch.zeros(4, 10, dtype=torch.int32), 2, {}, TypeError, "got torch.int32"),
        (np.zeros((4, 10), dtype=np.float32), 2, {}, TypeError, "topk takes a torch tensor, got ndarray"),
        (torch.zeros(2, 3, 10), 2, {}, ValueError, r"a \(V,\) or \(rows, V\) tensor, got shape \(2, 3, 10\)"),
        (torch.zeros(4, 10), 0, {}, ValueError, rf"^{K_RANGE}, got 0$"),
        (torch.zeros(4, 10), 11, {}, ValueError, rf"^{K_RANGE}, got 11$"),
        (torch.zeros(10), True, {}, ValueError, rf"^{K_RANGE}, got True$"),
        (torch.zeros(10), 2.0, {}, ValueError, rf"^{K_RANGE}, got 2.0$"),
        (
            torch.zeros(4, 10),
            2,
            {"method": "sort"},
            ValueError,
            "method must be one of row, two_stage, radix, got 'sort'",
        ),
        (
            torch.zeros(4, 10),
            2,
            {"method": "two_stage", "chunk": 0},
            ValueError,
            r"chunk must be a positive int \(a number of columns\)",
        ),
        (torch.zeros(4, 10), 2, {"method": "two_stage", "chunk": 2.5}, ValueError, "chunk .* got 2.5"),
        (
            torch.zeros(4, 10),
            2,
            {"method": "radix", "block_v": 0},
            ValueError,
            r"block_v must be a positive int \(a number of columns\)",
        ),
        (torch.zeros(4, 10), 2, {"block_v": True}, ValueError, "block_v .* got True"),
    ],
)
def test_bad_input_is_refused_in_a_sentence(x, k, kw, error, match):
    if isinstance(x, torch.Tensor):
        x = x.to(DEV)
    with pytest.raises(error, match=match):
        topk(x, k, **kw)


def test_the_model_predicts_each_plan_from_its_steps_bytes_and_instructions():
    """kernels.topk.predicted: one prediction per launch topk makes. At batch 1 (bf16, k = 50) the
    row kernel's 126 dependent steps, two blocks in flight at a time (63 us at the assumed 1 us),
    and its issue cycles are close, the issue a little slower; radix select makes three passes of 63
    blocks, also two at a time, but its histograms' instructions bind; the default two-stage plan
    (two blocks per program, 63 lists of 64 merged 16 lists a step by tl.topk) is bound by
    instructions, and predicted faster than chunks of 8,192 and well under
    the row kernel's time. One chunk covering the row is the row kernel: one launch."""
    from nbhelpers.kernels.topk import ISSUE_CYCLES, expected_insertions
    from nbhelpers.perf_model import H200

    V = 128_256
    (row,) = predicted(V, 50, "row")
    assert row.terms["dependent steps"] == pytest.approx(126 / 2 * H200.latency_s)
    step, enter, insertion = ISSUE_CYCLES["topk_chunk_kernel"][64]
    inserted, entered = expected_insertions([1024] * 125 + [V - 125 * 1024], 64)
    assert row.terms["instruction issue"] == pytest.approx(
        (126 * step + entered * enter + inserted * insertion) / H200.clock_hz
    )
    assert 1 < row.terms["instruction issue"] / row.terms["dependent steps"] < 1.2  # close: either may bind
    assert row.bound == "instruction issue"
    (radix,) = predicted(V, 50, "radix")
    assert radix.terms["dependent steps"] == pytest.approx(3 * 63 / 2 * H200.latency_s)
    hist, collect, _ = ISSUE_CYCLES["radix_select_kernel"][64]
    assert radix.bound == "instruction issue"
    assert radix.terms["instruction issue"] == pytest.approx(63 * (2 * hist + collect) / H200.clock_hz)
    default = predicted(V, 50, "two_stage")
    big = predicted(V, 50, "two_stage", chunk=8192)
    assert len(default) == len(big) == 2
    assert default[1].terms["dependent steps"] == pytest.approx(4 * H200.latency_s)  # 4,032 candidates, 1,024 a step
    assert {q.bound for q in default} == {"instruction issue"}
    m_step, _, m_insertion = ISSUE_CYCLES["topk_merge_kernel"][64]
    assert m_insertion == 0  # tl.topk a step, no insertions
    assert default[1].terms["instruction issue"] == pytest.approx(4 * m_step / H200.clock_hz)
    total = lambda ps: sum(q.seconds for q in ps)  # noqa: E731
    assert total(default) < total(big) < row.seconds and total(default) < 0.6 * row.seconds
    # more rows: more bytes, never less time
    assert total(predicted(V, 50, "two_stage", rows=256)) > total(default)
    # a chunk as long as the row: the row kernel's one launch
    assert predicted(V, 50, "two_stage", chunk=V) == predicted(V, 50, "row")


def test_expected_insertions_match_a_count_of_absorbs_rule():
    """expected_insertions against a count: blocks of a random permutation, each block's values
    that beat the list's smallest taken largest first (what _absorb does), on 400 random rows per
    shape; and a row sorted ascending, the worst case, inserts k values from every block."""
    rng = np.random.default_rng(3)

    def count(values, blocks, k):
        best = np.full(k, -np.inf)
        ins = enter = 0
        pos = 0
        for size in blocks:
            block = np.sort(values[pos : pos + size])[::-1]
            pos += size
            took = False
            for v in block:
                if v > best.min():
                    best[best.argmin()] = v
                    ins += 1
                    took = True
                else:
                    break
            enter += took
        return ins, enter

    for blocks, k in (([64] * 40, 8), ([128] * 30 + [37], 64), ([4096, 4096, 1000], 64), ([1024] * 16, 64)):
        n = sum(blocks)
        got = np.mean([count(rng.permutation(n).astype(float), blocks, k) for _ in range(400)], axis=0)
        want = T_K.expected_insertions(blocks, k)
        assert got[0] == pytest.approx(want[0], rel=0.03), (blocks, k)
        assert got[1] == pytest.approx(want[1], rel=0.03, abs=0.1), (blocks, k)
    assert count(np.arange(3000.0), [100] * 30, 8) == (8 * 30, 30)


def test_the_compile_table_shows_the_row_loops_pipelined_and_the_models_registers():
    """benchmarks/results/compile_check.json (make gpu-compile, sm_90): every default launch of the
    running top-k and of radix select has its loads issued by cp.async (Triton's pipeliner staged
    the loop over the row: STAGES - 1 buffers of one block each in shared memory) and no spill;
    the merge, one or two steps, is left as it is. REGISTERS, the model's assumption, is the most
    any default launch of each kernel takes."""
    import json
    from pathlib import Path

    from nbhelpers.kernels.topk import REGISTERS

    table = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "compile_check.json"
    rows = [
        r
        for r in json.loads(table.read_text())["rows"]
        if r["where"] == "nbhelpers.kernels.topk" and r["target"] == "sm_90" and r["default"]
    ]
    assert {r["kernel"] for r in rows} == set(REGISTERS)
    for r in rows:
        assert r["status"] == "ok" and r["spill_stores"] == 0, r
        if r["kernel"] != "topk_merge_kernel":
            assert f"STAGES={STAGES}" in r["config"] and r["cp_async"] > 0, r
            block = int(r["config"].split("BLOCK_V=")[1].split(",")[0].rstrip(")"))
            value_bytes = 2 if "KEY_BITS=16" in r["config"] else 4
            assert r["shared"] >= (STAGES - 1) * block * value_bytes, r
    for kernel, registers in REGISTERS.items():
        assert registers == max(r["registers"] for r in rows if r["kernel"] == kernel), kernel


def test_the_models_issue_cycles_are_the_compile_tables():
    """ISSUE_CYCLES against the loops of the compiled kernels (compile_check.json, sm_90, the
    default launches), in issue cycles: the running top-k's loop over the row holds _absorb's loop
    (depth 1); a step is the outer loop's shortest trip, entering the rest of the outer loop
    outside the inner one, an insertion the inner loop; radix select's passes are loops of depth 0
    (the histogram passes, then the filtering pass). Each entry is the most over bf16 and fp32 and
    over row and first stage, for its K_PAD. The row whose stride is not 16-value aligned is not
    pipelined."""
    import json
    from pathlib import Path

    from nbhelpers.kernels.topk import ISSUE_CYCLES

    table = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "compile_check.json"
    rows = [
        r
        for r in json.loads(table.read_text())["rows"]
        if r["where"] == "nbhelpers.kernels.topk" and r["target"] == "sm_90" and r["default"]
    ]
    derived: dict = {}
    for r in rows:
        k_pad = int(r["config"].split("K_PAD=")[1].split(",")[0].rstrip(")")) if "K_PAD=" in r["config"] else None
        loops = r["loops"]
        if r["kernel"] == "radix_select_kernel":
            *hist, collect = loops
            counts = (max(h["cycles"] for h in hist), collect["cycles"], 0)
            assert all(h["depth"] == 0 for h in loops)
            for k_pad in ISSUE_CYCLES["radix_select_kernel"]:
                old = derived.get(("radix_select_kernel", k_pad), (0, 0, 0))
                derived["radix_select_kernel", k_pad] = tuple(map(max, old, counts))
            continue
        if r["kernel"] == "topk_merge_kernel" and len(loops) == 1:  # tl.topk a step: no insertions
            counts = (loops[0]["shortest_cycles"], 0, 0)
            old = derived.get((r["kernel"], k_pad), (0, 0, 0))
            derived[r["kernel"], k_pad] = tuple(map(max, old, counts))
            continue
        outer, inner = loops
        assert (outer["depth"], inner["depth"]) == (0, 1), r["label"]
        enter = outer["cycles"] - inner["cycles"] - outer["shortest_cycles"]
        if r["kernel"] == "topk_merge_kernel":  # every step enters: no guard
            enter = 0
        counts = (outer["shortest_cycles"], enter, inner["cycles"])
        old = derived.get((r["kernel"], k_pad), (0, 0, 0))
        derived[r["kernel"], k_pad] = tuple(map(max, old, counts))
    assert {(kern, k) for kern, table_ in ISSUE_CYCLES.items() for k in table_} == set(derived)
    for (kernel, k_pad), counts in derived.items():
        assert ISSUE_CYCLES[kernel][k_pad] == counts, (kernel, k_pad)
    (unaligned,) = [
        r
        for r in json.loads(table.read_text())["rows"]
        if r["where"] == "nbhelpers.kernels.topk" and "not 16-value aligned" in r["label"]
    ]
    assert unaligned["cp_async"] == 0 and in_flight_blocks(50_257, 1024, STAGES, row_stride=50_257) == 1


@triton.jit
def _unguarded_row_kernel(
    bits_ptr,
    out_ptr,
    V,
    KEY_BITS: tl.constexpr,
    EXP_MASK: tl.constexpr,
    K_PAD: tl.constexpr,
    BLOCK_V: tl.constexpr,
    STAGES: tl.constexpr,
):
    """topk_chunk_kernel's loop over one whole row without the ``if`` before ``_absorb``: the same
    list, but with a loop (``_absorb``'s ``while``) directly in the pipelined loop's body. The
    compile check compiles it beside the launcher's kernels (families/topk.py): Triton's
    pipeliner leaves this loop's loads alone (cp_async 0 in the table)."""
    row = tl.program_id(0).to(tl.int64)
    best = _empty_list(K_PAD, KEY_BITS)
    kth = tl.min(best)
    for off in tl.range(0, V, BLOCK_V, num_stages=STAGES):
        cols = off + tl.arange(0, BLOCK_V)
        valid = cols < V
        bits = tl.load(bits_ptr + row * V + cols, mask=valid, other=0)
        best, kth = _absorb(best, kth, _packed(_signed_keys(bits, KEY_BITS, EXP_MASK), cols, valid, KEY_BITS), K_PAD)
    tl.store(out_ptr + row * K_PAD + tl.arange(0, K_PAD), tl.sort(best, descending=True))


def test_the_unguarded_loop_keeps_the_same_list():
    """The compile table's unpipelined variant is a working kernel: its sorted list's columns are
    topk_ref's indices (so its row in the table compares like with like)."""
    f = T.KEY_FORMATS["bf16"]
    x = stress_rows("bf16", 300, 8, seed=4)
    out = torch.empty((len(x), 8), dtype=torch.int64, device=DEV)
    bits = bits_of(x).contiguous().to(DEV)
    _unguarded_row_kernel[(len(x),)](bits, out, 300, KEY_BITS=16, EXP_MASK=f.exp_mask, K_PAD=8, BLOCK_V=64, STAGES=3)
    columns = 0xFFFFFFFF - (out.cpu() & 0xFFFFFFFF)
    assert torch.equal(columns, T.topk_ref(x, 8)[1])
