"""Tests of nbhelpers.occupancy: resident blocks and warps per SM from registers, warps per block
and shared memory.

- hand-computed cases, one per rule (the register allocation unit, the sub-partitions, the 1 KB
  shared-memory reserve and its 128-byte unit, the warp and block caps, launches that fail);
- NVIDIA's own worked example (CUDA C++ Best Practices Guide, "Calculating Occupancy": on compute
  capability 7.0, whose register file and warp rules are those of 8.0 and 9.0, 37 registers per
  thread give 75% occupancy with 128-thread blocks and 63% with 320-thread blocks);
- the fast formula against the slow reference (blocks placed one at a time, warp by warp) over a
  grid of every register count, several block sizes and shared-memory sizes, on both SMs;
- bad input raises with a message that names the argument.
"""

from __future__ import annotations

import dataclasses

import pytest

from nbhelpers.occupancy import (
    A100,
    H100,
    SM_SPECS,
    Limit,
    SMSpec,
    allocated_registers,
    allocated_shared,
    occupancy,
    occupancy_ref,
    sm_spec,
)

KB = 1024


def test_spec_figures_are_the_programming_guides():
    # CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
    for spec in (H100, A100):
        assert spec.registers_per_sm == 64 * KB and spec.max_registers_per_thread == 255
        assert spec.max_warps_per_sm == 64 and spec.max_blocks_per_sm == 32
        assert spec.reserved_shared_per_block == 1 * KB
    assert (H100.shared_per_sm, H100.max_shared_per_block) == (228 * KB, 227 * KB)
    assert (A100.shared_per_sm, A100.max_shared_per_block) == (164 * KB, 163 * KB)
    # the largest block fills the SM exactly, with its reserve
    for spec in (H100, A100):
        assert spec.max_shared_per_block + spec.reserved_shared_per_block == spec.shared_per_sm
    assert sm_spec("sm_90") is H100 and sm_spec("sm_80") is A100 and sm_spec(A100) is A100
    assert SM_SPECS == {"sm_90": H100, "sm_80": A100}


@pytest.mark.parametrize("regs,alloc", [(1, 8), (8, 8), (9, 16), (128, 128), (131, 136), (168, 168), (255, 256)])
def test_registers_round_up_to_eight_per_thread(regs, alloc):
    assert allocated_registers(regs) == alloc


@pytest.mark.parametrize(
    "shared,alloc", [(0, 1024), (1, 1152), (128, 1152), (129, 1280), (64 * KB, 65 * KB), (227 * KB, 228 * KB)]
)
def test_shared_memory_adds_the_reserve_and_rounds_to_128_bytes(shared, alloc):
    assert allocated_shared(shared) == alloc


# (registers, warps per block, shared bytes, sm) -> (blocks, binding limits): worked by hand
HAND = [
    # 32 regs: 1024 per warp, 16 warps per sub-partition, 64 per SM = the warp cap: both bind
    ((32, 4, 0, "sm_90"), (16, {Limit.REGISTERS, Limit.WARPS})),
    # 128 regs: 4096 per warp, 4 per sub-partition, 16 per SM: 4 blocks of 4, 2 of 8
    ((128, 4, 0, "sm_90"), (4, {Limit.REGISTERS})),
    ((128, 8, 0, "sm_90"), (2, {Limit.REGISTERS})),
    # 131 -> 136 regs: 4352 per warp, 3 per sub-partition (naive 65536 / (32 * 131) = 15.6 warps)
    ((131, 8, 0, "sm_90"), (1, {Limit.REGISTERS})),
    ((131, 4, 0, "sm_90"), (3, {Limit.REGISTERS})),
    # 80 regs, 1-warp blocks: 2560 per warp, 6 per sub-partition = 24 warps (naive 65536/2560 = 25)
    ((80, 1, 0, "sm_90"), (24, {Limit.REGISTERS})),
    # 16 regs, 1 warp: 32 blocks (the block cap) hold only 32 of 64 warps
    ((16, 1, 0, "sm_90"), (32, {Limit.BLOCKS})),
    # 64 KB + 1 KB reserve: 233472 // 66560 = 3 blocks (without the reserve it would be 3.56 -> 3 too)
    ((64, 4, 64 * KB, "sm_90"), (3, {Limit.SHARED_MEMORY})),
    # 76 KB: 3 blocks fit 228 KB exactly without the reserve, only 2 with it
    ((64, 4, 76 * KB, "sm_90"), (2, {Limit.SHARED_MEMORY})),
    # 128 KB of pipelining buffers and 226 registers: registers allow 2 blocks of 4 warps, shared memory 1
    ((226, 4, 128 * KB, "sm_90"), (1, {Limit.SHARED_MEMORY})),
    # A100: 164 KB per SM: 2 blocks of 80 KB (81 KB each with the reserve)
    ((64, 4, 80 * KB, "sm_80"), (2, {Limit.SHARED_MEMORY})),
    ((64, 4, 81 * KB, "sm_80"), (2, {Limit.SHARED_MEMORY})),  # 2 x 82 KB = 164 KB: exactly full
    ((64, 4, 82 * KB, "sm_80"), (1, {Limit.SHARED_MEMORY})),
    # over the per-block limit: no launch
    ((64, 4, 227 * KB + 1, "sm_90"), (0, {Limit.SHARED_MEMORY})),
    ((64, 4, 163 * KB + 1, "sm_80"), (0, {Limit.SHARED_MEMORY})),
    # 16 warps x 255 (256) regs = 131072 > 65536 a block may have: no launch
    ((255, 16, 0, "sm_90"), (0, {Limit.REGISTERS})),
    # 8 warps x 256 = 65536: launches, one block
    ((255, 8, 0, "sm_90"), (1, {Limit.REGISTERS})),
    # 6 warps are checked as 8 (the sub-partitions): 8 x 32 x 256 = 65536 at 255 regs: fits
    ((255, 6, 0, "sm_90"), (1, {Limit.REGISTERS})),
    # 10 warps at 200 regs: 10 x 6400 = 64000 fits, but the launch check counts 12 x 6400 = 76800
    ((200, 10, 0, "sm_90"), (0, {Limit.REGISTERS})),
]


@pytest.mark.parametrize("args,expected", HAND, ids=[str(a) for a, _ in HAND])
def test_hand_computed_cases(args, expected):
    occ = occupancy(*args)
    blocks, limits = expected
    assert occ.blocks == blocks
    assert set(occ.limits) == limits
    assert occ.limit == occ.limits[0]
    assert occ.warps == blocks * args[1]
    assert occ.launches == (blocks > 0)
    assert occupancy_ref(*args) == (blocks, frozenset(limits))


def test_best_practices_guide_example():
    """CUDA C++ Best Practices Guide: 37 registers per thread, 128-thread blocks: 12 blocks, 75%;
    320-thread blocks: 4 blocks, 63%. Its device (7.0) allocates registers as 8.0 and 9.0 do."""
    v100_like = dataclasses.replace(
        H100,
        name="cc 7.0 registers",
        compute_capability="7.0",
        shared_per_sm=96 * KB,
        max_shared_per_block=96 * KB,
        reserved_shared_per_block=0,
    )
    for sm in (v100_like, H100, A100):
        a, b = occupancy(37, 4, sm=sm), occupancy(37, 10, sm=sm)
        assert (a.blocks, a.warps, a.fraction) == (12, 48, 0.75)
        assert (b.blocks, b.warps, b.fraction) == (4, 40, 0.625)  # "63%" in the guide


@pytest.mark.parametrize("sm", ["sm_90", "sm_80"])
def test_formula_matches_the_slow_reference(sm):
    spec = sm_spec(sm)
    shared_sizes = [
        0,
        1,
        4 * KB,
        16 * KB - 1024,
        31 * KB,
        48 * KB,
        75 * KB,
        100 * KB,
        spec.max_shared_per_block,
        spec.max_shared_per_block + 1,
    ]
    for warps in (1, 2, 3, 4, 6, 8, 10, 16, 32):
        for regs in range(1, 256):
            for shared in shared_sizes[:: 1 if regs % 17 == 0 else 5]:
                occ = occupancy(regs, warps, shared, sm)
                assert (occ.blocks, frozenset(occ.limits)) == occupancy_ref(regs, warps, shared, sm), (
                    regs,
                    warps,
                    shared,
                )


def test_naive_division_is_wrong_where_the_rules_bite():
    """The napkin 65536 / (32 r) warps overcounts where rounding, sub-partitions or whole blocks
    bite: what the chapter's exercise asks the student to tell apart."""
    naive = lambda r: min(64, 65536 // (32 * r))  # noqa: E731
    assert naive(131) == 15 and occupancy(131, 1).warps == 12
    assert naive(80) == 25 and occupancy(80, 1).warps == 24
    assert occupancy(128, 8).warps == naive(128)  # where r is a multiple of 8 and blocks divide, it agrees


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"registers_per_thread": 0}, ValueError, r"^registers_per_thread must be an int from 1 to 255, got 0$"),
        ({"registers_per_thread": 256}, ValueError, r"^registers_per_thread must be an int from 1 to 255, got 256$"),
        ({"registers_per_thread": 64.0}, TypeError, r"^registers_per_thread must be an int from 1 to 255, got 64.0$"),
        ({"registers_per_thread": True}, TypeError, r"^registers_per_thread must be an int from 1 to 255, got True$"),
        ({"registers_per_thread": "64"}, TypeError, r"^registers_per_thread must be an int from 1 to 255, got '64'$"),
        ({"num_warps": 0}, ValueError, r"^num_warps must be an int from 1 to 32, got 0$"),
        ({"num_warps": 33}, ValueError, r"^num_warps must be an int from 1 to 32, got 33$"),
        ({"shared_per_block": -1}, ValueError, r"^shared_per_block must be a non-negative int \(bytes\), got -1$"),
        ({"sm": "sm_70"}, ValueError, "unknown SM 'sm_70'"),
    ],
)
def test_bad_input_raises_with_a_clear_message(kwargs, exc, match):
    args = {"registers_per_thread": 64, "num_warps": 4, "shared_per_block": 0, "sm": "sm_90", **kwargs}
    with pytest.raises(exc, match=match):
        occupancy(**args)
    with pytest.raises(exc, match=match):
        occupancy_ref(**args)


def test_numpy_integers_are_accepted():
    np = pytest.importorskip("numpy")
    assert occupancy(np.int64(128), np.int32(4), np.int64(0)).blocks == 4


def test_a_bad_spec_is_refused():
    with pytest.raises(ValueError, match="registers_per_sm must be a positive int"):
        SMSpec("x", "0.0", shared_per_sm=1, max_shared_per_block=1, registers_per_sm=0)


def test_latency_bound_slowdown_two_estimates():
    from nbhelpers.occupancy import latency_bound_slowdown

    # chapter 09's cliff: 8,192 programs, 16 -> 12 per SM on 132 SMs: 4 waves -> 6
    assert latency_bound_slowdown(8192, 16, 12) == pytest.approx((16 / 12, 6 / 4))
    # a grid that fits in one wave either way loses nothing by waves
    assert latency_bound_slowdown(100, 16, 12) == pytest.approx((16 / 12, 1.0))
    # the wave ratio can also be the smaller: 2 full waves before, 2 after
    assert latency_bound_slowdown(132 * 16 * 2, 16, 12)[1] == pytest.approx(3 / 2)
    assert latency_bound_slowdown(132 * 24, 16, 12)[1] == pytest.approx(2 / 2)
    with pytest.raises(ValueError, match="blocks_after must be a positive int"):
        latency_bound_slowdown(10, 4, 0)
