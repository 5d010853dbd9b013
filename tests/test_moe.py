"""nbhelpers.moe: routing, permutation, offsets, the tile schedule, and the torch expert GEMMs
against a float64 reference and against brute-force Python versions written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nbhelpers import moe

U32 = 2.0**-24  # unit roundoff of fp32
UBF16 = 2.0**-8  # unit roundoff of bf16


def gemm_bound(x_perm: torch.Tensor, w: torch.Tensor, offsets, out_u: float = 0.0) -> torch.Tensor:
    """Per-entry bound on |computed - exact| for an fp32-accumulated expert GEMM whose output is
    rounded once to a format of unit roundoff ``out_u``: gamma_K(fp32) sum_k |x||w| for the sum
    in any order, plus out_u times the computed magnitude (bounded by |exact| + the sum error)."""
    K = x_perm.shape[1]
    gamma = K * U32 / (1 - K * U32)
    absref = moe.grouped_matmul_ref(x_perm.abs(), w.abs(), offsets)
    exact = moe.grouped_matmul_ref(x_perm, w, offsets).abs()
    return gamma * absref + out_u * (exact + gamma * absref) + 1e-300


def brute_offsets(ids: np.ndarray, E: int) -> list[int]:
    out = [0]
    for e in range(E):
        out.append(out[-1] + int(sum(1 for v in ids.ravel() if v == e)))
    return out


def brute_schedule(offsets, bm):
    tiles = []
    for e in range(len(offsets) - 1):
        r = offsets[e]
        while r < offsets[e + 1]:
            tiles.append((e, r, offsets[e + 1]))
            r += bm
    return tiles


# ---------------------------------------------------------------- routing


def test_route_shapes_distinct_weights_and_seed():
    r = moe.route(300, 16, 4, skew=1.0, seed=3)
    assert r.expert_ids.shape == (300, 4) and r.weights.shape == (300, 4)
    assert r.num_tokens == 300 and r.top_k == 4 and r.num_experts == 16
    assert all(len(set(row)) == 4 for row in r.expert_ids.tolist())
    np.testing.assert_allclose(r.weights.sum(axis=1), 1.0, rtol=1e-6)
    assert (r.weights > 0).all()
    r2 = moe.route(300, 16, 4, skew=1.0, seed=3)
    np.testing.assert_array_equal(r.expert_ids, r2.expert_ids)
    assert not np.array_equal(r.expert_ids, moe.route(300, 16, 4, skew=1.0, seed=4).expert_ids)


def test_route_skew_makes_loads_uneven():
    flat = moe.expert_counts(moe.route(20000, 32, 4, skew=0.0, seed=0).expert_ids, 32)
    skewed = moe.expert_counts(moe.route(20000, 32, 4, skew=1.0, seed=0).expert_ids, 32)
    mean = 20000 * 4 / 32
    # uniform: each count is Binomial-like around the mean (sd about 47): all within 6 sd
    assert np.abs(flat - mean).max() < 6 * math.sqrt(mean)
    assert skewed.max() / mean > 2.0 and skewed.min() / mean < 0.5


def test_route_small_batch_leaves_experts_empty_and_single():
    counts = moe.expert_counts(moe.route(24, 64, 2, skew=1.0, seed=0).expert_ids, 64)
    assert (counts == 0).any() and (counts == 1).any() and counts.sum() == 48


def test_route_and_from_ids_reject_bad_input():
    with pytest.raises(ValueError, match="top_k=9 is larger than num_experts=8"):
        moe.route(10, 8, 9)
    with pytest.raises(ValueError, match="skew"):
        moe.route(10, 8, 2, skew=-1)
    with pytest.raises(ValueError, match="top_k=3 is larger than num_experts=2"):
        moe.Routing.from_ids([[0, 1, 0]], 2)
    with pytest.raises(ValueError, match="same expert twice"):
        moe.Routing.from_ids([[0, 1], [2, 2]], 4)
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        moe.Routing.from_ids([[0, 4]], 4)
    with pytest.raises(ValueError, match="2-D"):
        moe.Routing.from_ids([0, 1], 4)
    with pytest.raises(ValueError, match="shape of expert_ids"):
        moe.Routing.from_ids([[0, 1]], 4, weights=[0.5, 0.5])
    with pytest.raises(TypeError, match="integers"):
        moe.Routing.from_ids([[0.0, 1.0]], 4)


# ---------------------------------------------------------------- offsets and permutation


@pytest.mark.parametrize("seed", range(5))
def test_offsets_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    E = int(rng.integers(1, 12))
    ids = rng.integers(0, E, size=(int(rng.integers(0, 30)), 1))
    off = moe.expert_offsets(ids, E)
    assert off.tolist() == brute_offsets(ids, E)
    assert moe.check_offsets(off, ids.size, E).tolist() == off.tolist()


@pytest.mark.parametrize(
    "offsets, rows, message",
    [
        ([1, 3, 5], 5, "start at 0"),
        ([0, 4, 3, 5], 5, r"non-decreasing: offsets\[1\] = 4 > offsets\[2\] = 3"),
        ([0, 2, 4], 5, "end at the number of rows, 5, got 4"),
        ([0], 0, "E \\+ 1 >= 2"),
        ([[0, 1]], 1, "1-D"),
    ],
)
def test_check_offsets_errors(offsets, rows, message):
    with pytest.raises(ValueError, match=message):
        moe.check_offsets(offsets, rows)


def test_check_offsets_types_and_expert_count():
    assert moe.check_offsets(torch.tensor([0, 2, 2], dtype=torch.int32), 2).dtype == np.int64
    with pytest.raises(TypeError, match="integers"):
        moe.check_offsets(np.array([0.0, 2.0]), 2)
    with pytest.raises(ValueError, match="num_experts \\+ 1 = 4"):
        moe.check_offsets([0, 1, 2], 2, num_experts=3)


def test_permutation_is_stable_and_grouped():
    ids = np.array([[2, 0], [1, 2], [0, 1], [2, 1]])
    perm = moe.permutation(ids)
    flat = ids.ravel()
    assert flat[perm].tolist() == sorted(flat.tolist())
    for e in range(3):  # inside an expert, (token, slot) pairs keep their order
        rows = [p for p in perm.tolist() if flat[p] == e]
        assert rows == sorted(rows)


def test_permute_unpermute_with_identity_experts_gives_back_x():
    r = moe.route(40, 6, 3, seed=2)
    x = torch.randn(40, 8, dtype=torch.float64)
    w = torch.eye(8, dtype=torch.float64).expand(6, 8, 8).contiguous()
    y = moe.moe_layer(x, r, w, moe.loop_matmul)  # weights sum to 1 per token
    torch.testing.assert_close(y, x, rtol=1e-6, atol=1e-6)


def test_moe_layer_matches_per_token_reference():
    r = moe.route(33, 8, 2, skew=1.0, seed=5)
    x, w = torch.randn(33, 16), torch.randn(8, 16, 12)
    ref = torch.zeros(33, 12, dtype=torch.float64)
    for t in range(33):
        for j in range(2):
            ref[t] += float(r.weights[t, j]) * (x[t].double() @ w[r.expert_ids[t, j]].double())
    for gemm in (moe.loop_matmul, moe.torch_grouped_mm, moe.grouped_matmul_ref):
        y = moe.moe_layer(
            x.double() if gemm is moe.grouped_matmul_ref else x,
            r,
            w.double() if gemm is moe.grouped_matmul_ref else w,
            gemm,
        )
        assert (y.double() - ref).abs().max() < 1e-4


def test_unpermute_rejects_wrong_sizes():
    r = moe.route(4, 4, 2)
    with pytest.raises(ValueError, match=r"\(8, N\)"):
        moe.unpermute(torch.zeros(7, 3), np.arange(7), r)
    with pytest.raises(ValueError, match="permutation"):
        moe.unpermute(torch.zeros(8, 3), np.zeros(8, dtype=int), r)


# ---------------------------------------------------------------- the tile schedule


@pytest.mark.parametrize("seed", range(8))
def test_tile_schedule_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    E = int(rng.integers(1, 10))
    counts = rng.choice([0, 1, 3, 4, 5, 8, 9, 17], size=E)
    off = np.concatenate([[0], np.cumsum(counts)])
    bm = int(rng.choice([1, 4, 8]))
    s = moe.tile_schedule(off, bm)
    got = list(zip(s.expert.tolist(), s.row_start.tolist(), s.row_end.tolist()))
    assert got == brute_schedule(off.tolist(), bm)
    assert s.block_m == bm and s.num_tiles == len(got)
    assert s.expert.dtype == np.int32 and s.row_start.dtype == np.int32
    # every row is in exactly one tile, and no tile reaches past its expert
    covered = np.zeros(off[-1], dtype=int)
    for e, a, b in got:
        covered[a : min(a + bm, b)] += 1
        assert off[e] <= a < b == off[e + 1]
    assert (covered == 1).all()


def test_tile_schedule_edges():
    s = moe.tile_schedule([0, 0, 4, 5, 5], 4)  # empty first and last, a full tile, one token
    assert s.expert.tolist() == [1, 2] and s.row_start.tolist() == [0, 4] and s.row_end.tolist() == [4, 5]
    assert moe.tile_schedule([0, 0, 0], 16).num_tiles == 0
    with pytest.raises(ValueError, match="block_m"):
        moe.tile_schedule([0, 1], 0)
    with pytest.raises(ValueError, match="non-decreasing"):
        moe.tile_schedule([0, 3, 1], 4)


def test_tile_utilisation():
    assert moe.tile_utilisation([64, 128], 64) == 1.0
    assert moe.tile_utilisation([1], 64) == 1 / 64
    assert moe.tile_utilisation([65, 0], 64) == 65 / 128
    assert math.isnan(moe.tile_utilisation([0, 0], 64))


# ---------------------------------------------------------------- the expert GEMMs


def _problem(counts, K=24, N=20, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    x = torch.randn(int(off[-1]), K, generator=g).to(dtype)
    w = torch.randn(len(counts), K, N, generator=g).to(dtype)
    return x, w, off


COUNTS = [[0, 5, 1, 0, 9], [7], [0, 0, 3], [1, 1, 1, 1], [0, 0, 0]]


@pytest.mark.parametrize("counts", COUNTS)
@pytest.mark.parametrize("gemm", [moe.loop_matmul, moe.torch_grouped_mm])
def test_expert_gemms_fp32_within_bound(counts, gemm):
    x, w, off = _problem(counts)
    got = gemm(x, w, off)
    assert got.shape == (off[-1], 20) and got.dtype == torch.float32
    err = (got.double() - moe.grouped_matmul_ref(x, w, off)).abs()
    assert (err <= gemm_bound(x, w, off)).all()


@pytest.mark.parametrize("gemm", [moe.loop_matmul, moe.torch_grouped_mm])
def test_expert_gemms_bf16_within_bound(gemm):
    x, w, off = _problem([0, 5, 1, 0, 40], K=64, N=24, dtype=torch.bfloat16, seed=1)
    got = gemm(x, w, off)
    assert got.dtype == torch.bfloat16
    err = (got.double() - moe.grouped_matmul_ref(x, w, off)).abs()
    assert (err <= gemm_bound(x, w, off, out_u=UBF16)).all()


def test_torch_grouped_mm_says_when_rows_are_not_16_byte_units():
    x, w, off = _problem([2, 3], K=64, N=20, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="N \\* itemsize = 40 bytes.*multiples of 8"):
        moe.torch_grouped_mm(x, w, off)
    x, w, off = _problem([2, 3], K=64, N=20)  # fp32: 80-byte rows are fine
    assert moe.torch_grouped_mm(x, w, off).shape == (5, 20)


def test_a_gemm_that_uses_the_wrong_expert_fails_the_bound():
    x, w, off = _problem([4, 4, 4])
    shifted = np.array([0, 5, 8, 12])  # off by one: expert 0's last row goes to expert 1
    got = moe.loop_matmul(x, w, shifted)
    err = (got.double() - moe.grouped_matmul_ref(x, w, off)).abs()
    assert not (err <= gemm_bound(x, w, off)).all()


def test_padded_matmul_keeps_the_first_rows_and_counts_waste():
    x, w, off = _problem([0, 5, 1, 0, 10])  # 16 rows, 5 experts
    p = moe.padded_matmul(x, w, off, capacity_factor=1.25)
    assert p.capacity == 4 == moe.capacity(16, 5, 1.25)
    assert p.computed_rows == 20 and p.kept_rows == 0 + 4 + 1 + 0 + 4 and p.dropped_rows == 7
    assert p.padding_fraction == 1 - 9 / 20
    kept_rows = [0, 1, 2, 3, 5, 6, 7, 8, 9]  # expert 1: rows 0-3 of 0-4; expert 2: row 5; expert 4: 6-9 of 6-15
    assert np.nonzero(p.kept)[0].tolist() == kept_rows
    ref = moe.grouped_matmul_ref(x, w, off)
    err = (p.out.double() - ref).abs()
    assert (err[p.kept] <= gemm_bound(x, w, off)[p.kept]).all()
    assert (p.out[~torch.as_tensor(p.kept)] == 0).all()
    big = moe.padded_matmul(x, w, off, capacity_factor=5.0)  # capacity 16: nothing dropped
    assert big.dropped_rows == 0 and big.capacity == 16 and big.padding_fraction == 1 - 16 / 80


def test_capacity_rounds_up():
    assert moe.capacity(10, 4, 1.0) == 3
    assert moe.capacity(8, 4, 1.0) == 2
    with pytest.raises(ValueError, match="capacity_factor"):
        moe.capacity(8, 4, 0)


@pytest.mark.parametrize("gemm", [moe.loop_matmul, moe.torch_grouped_mm, moe.grouped_matmul_ref, moe.padded_matmul])
def test_expert_gemms_reject_bad_input(gemm):
    x, w, off = _problem([2, 3])
    with pytest.raises(ValueError, match=r"\(E, N, K\) needs .transpose"):
        gemm(x, torch.randn(2, 20, 24 + 1), off)
    with pytest.raises(ValueError, match="3-D"):
        gemm(x, w[0], off)
    with pytest.raises(TypeError, match="same dtype"):
        gemm(x, w.double(), off)
    with pytest.raises(ValueError, match="end at the number of rows, 5, got 4"):
        gemm(x, w, [0, 2, 4])
    with pytest.raises(ValueError, match="num_experts \\+ 1 = 3"):
        gemm(x, w, [0, 2, 3, 5])
    with pytest.raises(TypeError, match="torch.Tensor"):
        gemm(x.numpy(), w, off)


def test_layer_cost_deepseek_v3():
    c = moe.layer_cost(4096, 8, 256, 7168, 2048)
    assert c.flops == 2 * 4096 * 8 * 7168 * 2048
    assert c.weight_bytes == 256 * 7168 * 2048 * 2
    assert c.bytes == c.weight_bytes + 4096 * 8 * (7168 + 2048) * 2
    assert moe.layer_cost(1, 8, 256, 7168, 2048, active_experts=8).weight_bytes == 8 * 7168 * 2048 * 2


def test_align_block_size_ref_small_example_by_hand():
    # six tokens, top-2, four experts (chapter 10's example): counts 4, 5, 0, 3
    ids = [[0, 1], [1, 3], [0, 1], [3, 1], [1, 0], [3, 0]]
    a = moe.align_block_size_ref(ids, 4, block_m=4)
    s = 12  # the sentinel: T * k
    assert a.sentinel == s and a.block_m == 4
    assert a.sorted_token_ids.tolist() == [0, 4, 9, 11, 1, 2, 5, 7, 8, s, s, s, 3, 6, 10, s]
    assert a.expert_ids.tolist() == [0, 1, 1, 3]
    assert a.num_tokens_post_padded == 16


@pytest.mark.parametrize("seed", range(4))
def test_align_block_size_ref_against_brute_force(seed):
    r = moe.route(37, 9, 3, skew=1.5, seed=seed)
    for bm in (1, 4, 16):
        a = moe.align_block_size_ref(r.expert_ids, 9, bm)
        flat = r.expert_ids.reshape(-1)
        want, blocks = [], []
        for e in range(9):
            pairs = [i for i in range(flat.size) if flat[i] == e]
            pad = (-len(pairs)) % bm
            want += pairs + [flat.size] * pad
            blocks += [e] * ((len(pairs) + pad) // bm)
        assert a.sorted_token_ids.tolist() == want and a.expert_ids.tolist() == blocks
        assert a.num_tokens_post_padded == len(want) <= flat.size + 9 * (bm - 1)
        assert a.num_tokens_post_padded % bm == 0
    with pytest.raises(ValueError, match="lie in"):
        moe.align_block_size_ref([[0, 9]], 9, 4)
    with pytest.raises(ValueError, match=r"\(T, k\)"):
        moe.align_block_size_ref([0, 1], 9, 4)


def test_layout_rows_by_hand_and_refusals():
    c = np.array([10, 0, 1, 33])
    off = moe.layout_rows(c, 16, "offsets")
    ali = moe.layout_rows(c, 16, "aligned")
    msk = moe.layout_rows(c, 16, "masked", max_m=48)
    assert (off.routed, off.buffer, off.computed, off.padded) == (44, 44, 80, 0)
    assert (ali.buffer, ali.padded, ali.computed_padding) == (80, 36, 36)
    assert (msk.buffer, msk.padded, msk.computed) == (192, 148, 80)
    # the tiles compute what tile_utilisation counts, in every layout
    assert off.routed / off.computed == pytest.approx(moe.tile_utilisation(c, 16))
    assert ali.buffer == moe.align_block_size_ref(np.repeat(np.arange(4), c)[:, None], 4, 16).num_tokens_post_padded
    with pytest.raises(ValueError, match="busiest"):
        moe.layout_rows(c, 16, "masked", max_m=32)
    with pytest.raises(ValueError, match="max_m"):
        moe.layout_rows(c, 16, "masked")
    with pytest.raises(ValueError, match="layout must be"):
        moe.layout_rows(c, 16, "padded")


def test_padded_traffic_by_hand_and_against_padded_matmul():
    """Loads 10, 0, 1, 33 (44 rows), K = 4, N = 2, bf16, factor 1.25: capacity 14, kept 25; the
    zero-filled buffer 56 x 4 and output 44 x 2, four passes over the kept rows of x (4 wide) and
    of y (2 wide); two int64 index arrays of the kept rows."""
    t = moe.padded_traffic([10, 0, 1, 33], K=4, N=2)
    assert t == moe.PaddedTraffic((56 * 4 + 44 * 2 + 4 * 25 * (4 + 2)) * 2, 2 * 25 * 8, 56, 25)
    counts = np.array([7, 3, 0, 12, 1])
    off = np.r_[0, np.cumsum(counts)]
    res = moe.padded_matmul(torch.zeros((off[-1], 8)), torch.zeros((5, 8, 4)), off, 1.25)
    t = moe.padded_traffic(counts, 8, 4, 1.25, itemsize=4)
    assert (t.computed_rows, t.kept_rows) == (res.computed_rows, res.kept_rows)
    # an even load at factor 1.25: nothing dropped, the buffer a quarter larger than the rows
    even = moe.padded_traffic([64] * 8, K=16, N=16)
    assert even.kept_rows == 512 and even.computed_rows == 640
    with pytest.raises(ValueError, match="counts"):
        moe.padded_traffic([], 4, 4)
    with pytest.raises(ValueError):
        moe.padded_traffic([1, 2], 0, 4)
