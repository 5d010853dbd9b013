"""Tests of nbhelpers.l2_model, chapter 10's model of the L2 cache between a grouped GEMM's programs
and DRAM: the LRU cache on sequences worked out by hand; the wave model on programs small enough
to count by hand (sharing inside a wave, none across waves when the cache is too small, LRU's
cyclic worst case, pieces that add up); the fast version against the plain one; the orders of a
grouped GEMM; and the DeepSeek-V3-sized layer of the notebook against its napkin formula.
"""

from nbhelpers.device import setup_device

INFO = setup_device(verbose=False)  # program_tiles lives with the kernel: interpreter mode on a CPU

import numpy as np
import pytest

from nbhelpers import moe
from nbhelpers.kernels.grouped_gemm import program_tiles
from nbhelpers.l2_model import (
    H100_SXM,
    H200,
    L2Spec,
    LRUCache,
    column_sweep_order,
    grouped_gemm_panels,
    grouped_gemm_traffic,
    wave_traffic,
    wave_traffic_ref,
)

# ------------------------------------------------------------------ the LRU cache


def test_lru_by_hand():
    c = LRUCache(3)  # three 1-byte items
    hits = [c.access(k, 1) for k in "ABCA"]  # A B C miss, A hit: order now B C A
    assert hits == [False, False, False, True]
    assert c.access("D", 1) is False  # evicts B, the least recently used
    assert "B" not in c and "A" in c and "C" in c and len(c) == 3 and c.used == 3
    assert [c.access(k, 1) for k in "CB"] == [True, False]  # C hit; B miss evicts A (C was used after A)
    assert "A" not in c and [c.access(k, 1) for k in "DCB"] == [True, True, True]


def test_lru_with_sizes():
    c = LRUCache(10)
    assert [c.access("A", 6), c.access("B", 4)] == [False, False] and c.used == 10  # exactly full: both stay
    assert c.access("A", 6) is True
    assert c.access("C", 1) is False and "B" not in c and c.used == 7  # B was least recent
    assert c.access("big", 11) is False and len(c) == 0 and c.used == 0  # larger than the cache: streams through
    with pytest.raises(ValueError, match="capacity_bytes"):
        LRUCache(-1)


def test_a_zero_byte_cache_never_hits():
    c = LRUCache(0)
    assert [c.access("A", 1) for _ in range(3)] == [False] * 3


# ------------------------------------------------------------------ waves, by hand


def prog(*panels):
    return [(tag, pid, nbytes) for tag, pid, nbytes in panels]


def test_one_program_reads_each_panel_once():
    t = wave_traffic([prog(("x", 0, 100), ("w", 0, 50))], wave=1, l2_bytes=0)
    assert t.dram == {"x": 100, "w": 50} and t.ideal == {"x": 100, "w": 50} and t.ratio == 1.0


def test_a_panel_shared_inside_a_wave_is_read_once_across_waves_it_needs_the_cache():
    progs = [prog(("x", 0, 80), ("w", 0, 40)), prog(("x", 1, 80), ("w", 0, 40))]  # both read w panel 0
    assert wave_traffic(progs, wave=2, l2_bytes=0).dram == {"x": 160, "w": 40}  # one wave: shared
    assert wave_traffic(progs, wave=1, l2_bytes=0).dram == {"x": 160, "w": 80}  # two waves, no cache: twice
    assert wave_traffic(progs, wave=1, l2_bytes=10**6).dram == {"x": 160, "w": 40}  # the cache keeps it


def test_lru_cyclic_worst_case_in_lockstep():
    # A (8 bytes), B (8 bytes), A again, one program per wave, 4 pieces of 2 bytes: a 12-byte cache
    # holds 6 pieces. After B it holds A2 A3 B0 B1 B2 B3; the third wave needs A0 first, which
    # evicts A2, then A1 evicts A3: every piece of A misses again (a whole-panel model would keep
    # half of A). A 16-byte cache holds both panels: A hits.
    progs = [prog(("x", "A", 8)), prog(("x", "B", 8)), prog(("x", "A", 8))]
    assert wave_traffic(progs, 1, 12, k_chunks=4).dram == {"x": 24}
    assert wave_traffic(progs, 1, 16, k_chunks=4).dram == {"x": 16}
    assert wave_traffic(progs, 1, 14, k_chunks=4).dram == {"x": 24}  # 7 pieces: still all of A


def test_pieces_add_up_to_the_panel():
    # 10 bytes in 4 pieces: 2, 3, 2, 3
    t = wave_traffic([prog(("w", 0, 10))], 1, 0, k_chunks=4)
    assert t.dram == {"w": 10}
    c = LRUCache(5)  # what the model does piece by piece
    assert [c.access(("w", 0, i), n) for i, n in enumerate([2, 3, 2, 3])] == [False] * 4 and c.used == 5


@pytest.mark.parametrize("seed", range(6))
def test_fast_equals_plain(seed):
    rng = np.random.default_rng(seed)
    progs = [
        prog(*((str(rng.choice(["x", "w"])), int(rng.integers(0, 12)), 0) for _ in range(int(rng.integers(1, 4)))))
        for _ in range(int(rng.integers(1, 60)))
    ]
    sizes = {}  # a panel has one size wherever it appears
    progs = [[(t, p, sizes.setdefault((t, p), int(rng.integers(1, 50)))) for t, p, _ in pr] for pr in progs]
    for wave in (1, 3, 7):
        for cap in (0, 30, 200, 10**6):
            for kc in (1, 3, 8):
                assert wave_traffic(progs, wave, cap, kc) == wave_traffic_ref(progs, wave, cap, kc), (wave, cap, kc)


def test_dram_bytes_are_never_below_the_ideal_and_reach_it_with_a_large_cache():
    off = np.array([0, 40, 40, 100, 103])
    order = program_tiles(off, 64, 16, 16, 2)
    panels = grouped_gemm_panels(order, 32, 64, 16, 16)
    for wave, cap in [(1, 0), (3, 1000), (5, 5000), (2, 10**9)]:
        t = wave_traffic(panels, wave, cap)
        assert all(t.dram[k] >= t.ideal[k] for k in t.ideal)
    assert wave_traffic(panels, 2, 10**9).ratio == 1.0


# ------------------------------------------------------------------ grouped GEMM orders, by hand

K_, N_, B = 8, 32, 2  # panels of a 16 x 8 x-tile: 16 * 8 * 2 = 256 B; of an 8 x 16 w-block: 256 B


def test_grouped_gemm_panels_by_hand():
    # one expert of 20 rows: tiles of 16 rows (the second has 4 real rows), 2 column blocks of 16
    order = program_tiles([0, 20], N_, 16, 16, 1)
    assert order.tolist() == [[0, 0, 20, 0], [0, 0, 20, 1], [0, 16, 20, 0], [0, 16, 20, 1]]
    panels = grouped_gemm_panels(order, K_, N_, 16, 16, B)
    assert panels[0] == (("x", 0, 16 * K_ * B), ("w", (0, 0), K_ * 16 * B))
    assert panels[2][0] == ("x", 16, 4 * K_ * B)  # masked rows are not read
    narrow = grouped_gemm_panels(program_tiles([0, 5], 20, 16, 16, 1), K_, 20, 16, 16, B)
    assert narrow[1][1] == ("w", (0, 1), K_ * 4 * B)  # the last column block has 4 columns


def test_two_experts_column_sweep_rereads_x_grouped_order_does_not():
    # two experts of one tile each, two column blocks, waves of 2, no cache: X = W = 256 B
    off = [0, 16, 32]
    sweep = column_sweep_order(off, N_, 16, 16)
    assert sweep.tolist() == [[0, 0, 16, 0], [1, 16, 32, 0], [0, 0, 16, 1], [1, 16, 32, 1]]
    grouped = program_tiles(off, N_, 16, 16, 8)
    assert grouped.tolist() == [[0, 0, 16, 0], [0, 0, 16, 1], [1, 16, 32, 0], [1, 16, 32, 1]]
    t_sweep = wave_traffic(grouped_gemm_panels(sweep, K_, N_, 16, 16, B), 2, 0)
    t_grouped = wave_traffic(grouped_gemm_panels(grouped, K_, N_, 16, 16, B), 2, 0)
    # sweep: each wave reads both x panels and one w panel: 4 X + 4 W... of which 2 X are re-reads
    assert t_sweep.dram == {"x": 4 * 256, "w": 4 * 256} and t_sweep.ideal == {"x": 2 * 256, "w": 4 * 256}
    assert t_grouped.dram == t_grouped.ideal == {"x": 2 * 256, "w": 4 * 256}
    assert t_sweep.ratio == 8 / 6 and t_grouped.ratio == 1.0


def test_column_sweep_covers_the_same_programs():
    off = np.array([0, 5, 5, 70, 71])
    a = column_sweep_order(off, 40, 16, 16)
    b = program_tiles(off, 40, 16, 16, 8)
    assert sorted(map(tuple, a.tolist())) == sorted(map(tuple, b.tolist()))
    assert (np.diff(a[:, 3]) >= 0).all()  # column block by column block


# ------------------------------------------------------------------ the notebook's layer


def test_specs():
    assert H100_SXM.l2_bytes == 50 * 2**20 and H200.l2_bytes == 60 * 2**20 and H100_SXM.sms == H200.sms == 132
    assert "whitepaper" in H100_SXM.source and H200.source.startswith("assumed")
    with pytest.raises(ValueError, match="l2_bytes"):
        L2Spec("x", 0, 1, "")
    with pytest.raises(TypeError, match="L2Spec"):
        grouped_gemm_traffic(program_tiles([0, 16], 16, 16, 16, 1), 16, 16, 16, 16, "H100")


def test_deepseek_sized_column_sweep_matches_its_napkin_formula():
    # T = 4096 tokens, top-8 of 256 experts, K = 7168, N = 2048, 128 x 128 tiles: a wave reads far
    # more than 50 MB, so the sweep reads x once per column block and w once; the grouped order
    # close to the ideal
    K, N, E = 7168, 2048, 256
    off = moe.expert_offsets(moe.route(4096, E, 8, skew=1.0, seed=0).expert_ids, E)
    sweep = grouped_gemm_traffic(column_sweep_order(off, N, 128, 128), K, N, 128, 128, H100_SXM)
    x, w = sweep.ideal["x"], sweep.ideal["w"]
    assert x == 4096 * 8 * K * 2 and w == E * K * N * 2  # every expert is active at T = 4096
    assert sweep.dram["x"] == 16 * x  # 2048 / 128 column blocks: x once per block
    # w once, but for the panels of an expert whose tiles straddle a wave boundary (under 1 %)
    assert w <= sweep.dram["w"] < 1.01 * w
    grouped = grouped_gemm_traffic(program_tiles(off, N, 128, 128, 8), K, N, 128, 128, H100_SXM)
    assert grouped.ideal == sweep.ideal and 1.0 <= grouped.ratio < 1.05 < 1.8 < sweep.ratio


def test_recorded_l2_bytes_reads_the_gpu_reports(tmp_path):
    import json

    from nbhelpers.l2_model import recorded_l2_bytes

    assert recorded_l2_bytes(tmp_path) == []
    (tmp_path / "gpu_report_b.json").write_text(json.dumps({"gpu": "B", "l2_cache_bytes": 62914560, "date": "2026-02"}))
    (tmp_path / "gpu_report_a.json").write_text(json.dumps({"gpu": "A", "l2_cache_bytes": 52428800, "date": "2026-01"}))
    (tmp_path / "gpu_report_c.json").write_text(json.dumps({"gpu": "C", "date": "2026-03"}))  # no L2 recorded
    assert recorded_l2_bytes(tmp_path) == [
        ("A", 52428800, "2026-01", "gpu_report_a.json"),
        ("B", 62914560, "2026-02", "gpu_report_b.json"),
    ]
    # the course's recorded H100 report: 50 MiB, the whitepaper's 50 MB
    h100 = [r for r in recorded_l2_bytes() if "H100" in r[0]]
    assert h100 and all(r[1] == H100_SXM.l2_bytes for r in h100)
