"""Chapter 08 exercises: the references and cases behave as the statements say."""

import pickle

import numpy as np
import pytest

from nbhelpers.device import setup_device

# before anything imports nbhelpers.kernels (the launcher test's kernel): the interpreter on a CPU
setup_device(verbose=False)

from nbhelpers.answer_keys import ch08


def test_stream_times_of_the_statement():
    C, S, E = ("clock",), ("sync",), ("event",)
    k = ("launch", 100)
    assert ch08.stream_times_ref([C, k, C], 5, 1024) == ([0, 5], [])  # the launch, not the kernel
    assert ch08.stream_times_ref([C, k, S, C], 5, 1024) == ([0, 105], [])
    assert ch08.stream_times_ref([E, k, E], 5, 1024) == ([], [0, 105])
    # a queue of 2: the third launch waits for the first kernel (ends 105, 205, 305, 405)
    assert ch08.stream_times_ref([k, k, k, C, k, C], 5, 2) == ([110, 210], [])
    # an event recorded after the stream drained is stamped when recorded
    assert ch08.stream_times_ref([("launch", 10), ("host", 100), E], 5, 8) == ([], [105])
    # a kernel queued while the one before runs starts when it ends
    assert ch08.stream_times_ref([k, ("host", 20), ("launch", 10), E], 5, 8) == ([], [115])


def test_stream_comparator_is_strict_and_never_raises():
    e = ([0, 5], [105])
    assert ch08._int_lists(([0, np.int64(5)], [105]), e) is None
    for bad in (None, "x", ([0, 5],), ([0, 5.0], [105]), ([0, 5], [104]), ([0, 5, 6], [105]), ([0, True], [105])):
        assert isinstance(ch08._int_lists(bad, e), str)


def test_transpose_reference_is_the_transpose_between_guards():
    x = np.arange(15, dtype=np.int16).reshape(3, 5)
    out, outside, repeated, loads, stores = ch08.transpose_tiles_ref(x, 16, 32, 2)
    assert out.shape == (5 + 2 * 32, 3 + 2) and out.dtype == np.int16
    assert (out[32:37, :3] == x.T).all() and (out[:32] == ch08.GUARD_OUT).all() and (out[37:] == ch08.GUARD_OUT).all()
    assert (out[:, 3:] == ch08.GUARD_OUT).all() and outside == 0 and repeated == 0
    # one 16 x 32 tile: a warp is a row of it, 3 active rows of 5 int16 (10 bytes, rows 14 bytes
    # apart): rows 0 and 1 one sector each, row 2 (bytes 28-37) two
    assert loads == 4
    # out's tile is 32 x 16: a warp covers two of its rows (3 int16 each, rows 10 bytes apart)
    assert stores == 4  # rows 0-1 (bytes 0-15), 2-3 (20-35: two sectors), 4 (40-45)


def test_least_sectors_of_a_full_aligned_tile():
    # fp32, 64 x 64 tiles on a 64 x 64 matrix with rows of 64: 64 rows of 8 sectors, each way
    assert ch08._least_sectors(64, 64, 64, 4, 64, 64) == 512
    # a column read costs a sector per element: the naive transpose's loads, 16 x as many for int8
    assert ch08._least_sectors(64, 64, 64, 1, 64, 64) == 128


@pytest.fixture(scope="module")
def launcher():
    """The given launcher, defined as the notebook defines it, around a kernel set by the test."""
    import torch
    import triton
    import triton.language as tl

    namespace = {"np": np, "torch": torch, "triton": triton, "tl": tl}
    exec(ch08.LAUNCHER, namespace)
    return namespace


def test_course_kernel_through_the_launcher_gives_the_reference(launcher):
    """nbhelpers' own transpose_kernel (loads along x, stores along out) through the given
    launcher touches exactly the reference's sectors, on ragged, padded, narrow-tile cases."""
    from nbhelpers.kernels.copy import transpose_kernel

    launcher["transpose_kernel"] = transpose_kernel
    for case in ch08._transpose_cases(np.random.default_rng(3))[:16]:
        got = launcher["transpose_tiles"](*case.args)
        expected = ch08.transpose_tiles_ref(*case.args)
        assert ch08._transpose_and_counts(got, expected) is None, case
        assert got[3:] == expected[3:], case  # the least, exactly


def test_a_stray_store_is_stopped_not_made(launcher):
    """A kernel whose store lands far outside out fails with the watch's error, before the store."""
    import triton
    import triton.language as tl

    from nbhelpers.load_audit import StrayPointerError

    @triton.jit
    def transpose_kernel(x_ptr, out_ptr, M, N, sxm, sxn, som, son, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        offs = tl.arange(0, BLOCK_M)
        tl.store(out_ptr + offs * 1_000_000, tl.load(x_ptr + offs, mask=offs < M), mask=offs < M)

    launcher["transpose_kernel"] = transpose_kernel
    with pytest.raises(StrayPointerError, match="outside every tensor"):
        launcher["transpose_tiles"](np.ones((4, 4), np.float32), 16, 16, 0)


def test_transpose_cases_cover_the_edges():
    cases = ch08._transpose_cases(np.random.default_rng(0))
    random_part = [c.args for c in cases if not c.label]
    assert len(random_part) >= 25
    assert sum(bm != bn for _, bm, bn, _ in random_part) >= 10  # the blocks' roles can be told apart
    assert sum(p > 0 for *_, p in random_part) >= 10  # padded rows: the strides matter
    assert sum(x.shape[0] % bm != 0 or x.shape[1] % bn != 0 for x, bm, bn, _ in random_part) >= 20
    assert sum(x.shape[0] != x.shape[1] for x, *_ in random_part) >= 20
    assert {x.itemsize for x, *_ in random_part} == {1, 2, 4, 8}


def test_transpose_comparator_names_the_count_and_never_raises():
    expected = ch08.transpose_tiles_ref(np.arange(6, dtype=np.int8).reshape(2, 3), 16, 16, 0)
    buffer = expected[0]
    assert ch08._transpose_and_counts((buffer, 0, 0, *expected[3:]), expected) is None
    assert ch08._transpose_and_counts((buffer, 0, 0, expected[3] - 1, expected[4]), expected) is None  # fewer: fine
    assert "the least is" in ch08._transpose_and_counts((buffer, 0, 0, expected[3] + 1, expected[4]), expected)
    assert "loads outside x: 2" in ch08._transpose_and_counts((buffer, 2, 0, *expected[3:]), expected)
    for bad in ("x", None, (buffer, 0, 0, 1), (buffer[:3], 0, 0, 1, 1), (buffer, 0, "a", 1, 1), (buffer, 0.0, 0, 1, 1)):
        assert isinstance(ch08._transpose_and_counts(bad, expected), str)


def test_transpose_comparator_names_out_s_element_not_the_buffer_s():
    """A wrong element of the buffer is named as out[j, i], a guard row or a row's padding."""
    expected = ch08.transpose_tiles_ref(np.arange(6, dtype=np.int8).reshape(2, 3), 16, 16, 4)
    counts = expected[1:]

    def reason(r, c):
        buffer = expected[0].copy()
        buffer[r, c] = 7 if buffer[r, c] != 7 else 8
        return ch08._transpose_and_counts((buffer, *counts), expected)

    assert "first at out[1, 0]:" in reason(16 + 1, 0) and "1 of " in reason(16 + 1, 0)
    assert "a guard row above out (buffer row 15, column 1)" in reason(15, 1)
    assert "a guard row below out (buffer row 19, column 0)" in reason(16 + 3, 0)
    assert "the padding past the end of out's row 2 (buffer column 3)" in reason(16 + 2, 3)
    # as the grader's judge gets it: pickled
    again = pickle.loads(pickle.dumps(expected))
    assert again.guard == 16 and again.shape == (3, 2) and np.array_equal(again[0], expected[0])
    # another shape: same_value's own message
    assert "shape" in ch08._transpose_and_counts((expected[0][1:], *counts), expected)


def test_trace_reference_on_the_statement_cases():
    warp = np.arange(32, dtype=np.int64)
    assert ch08.trace_sectors_ref(warp * 4, 4) == (4, 1.0)  # coalesced
    assert ch08.trace_sectors_ref(30 + warp * 4, 4) == (5, 0.8)  # straddling at both ends
    assert ch08.trace_sectors_ref(np.full(32, 1000), 4) == (1, 4 / 32)  # a broadcast: 4 distinct bytes
    assert ch08.trace_sectors_ref(np.repeat(warp[:16] * 8, 2), 8) == (4, 1.0)  # pairs read twice count once
    assert ch08.trace_sectors_ref(28 + warp * 32, 8) == (33, 256 / (33 * 32))  # each access straddles
    assert ch08.trace_sectors_ref(np.random.default_rng(1).permutation(warp * 4), 4) == (4, 1.0)


def test_trace_cases_have_the_hard_regions_in_the_random_part():
    cases = ch08._trace_cases(np.random.default_rng(5))
    random_part = [c.args for c in cases if not c.label]
    assert len(random_part) >= 50
    straddle = sum(((a % 32) + s - 1 >= 32).any() for a, s in random_part)
    repeated = sum(len(np.unique(a)) < 32 for a, _ in random_part)
    misaligned = sum(a.min() % 32 != 0 for a, _ in random_part)
    assert straddle >= 10 and repeated >= 10 and misaligned >= 30


def test_trace_comparator_never_raises_and_tolerates_rounding():
    e = (5, 0.8)
    assert ch08._sectors_and_efficiency((5, 4 / 5), e) is None
    assert ch08._sectors_and_efficiency((np.int64(5), 0.8 * (1 + 1e-15)), e) is None
    for bad in ("x", None, (5,), (4, 0.8), (5, 0.75), (5, "a"), [5, float("nan")], (5.0, 0.8), (True, 0.8)):
        assert isinstance(ch08._sectors_and_efficiency(bad, e), str)


def test_trace_sectors_may_not_call_the_launcher_s_sector_count():
    """warp_sectors counts sectors for ex08.transpose_tiles's launcher; an answer to
    ex08.trace_sectors that calls it scores nothing, whatever it returns."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check

    spec = next(s for s in CHAPTERS if s.chapter == 8)
    nb = SolutionNotebook(spec.solution, spec.namespace)
    calls = nb.mutated(
        "trace_sectors",
        "    return len(sectors), len(useful) / (sector * len(sectors))",
        "    from nbhelpers.memory_access import MemoryRequest, warp_sectors\n\n"
        "    lanes = np.asarray(addresses).astype(np.uint64)\n"
        "    on = np.ones(lanes.size, dtype=bool)\n"
        '    warp_sectors([MemoryRequest("load", lanes, on, access_bytes)])\n'
        "    return len(sectors), len(useful) / (sector * len(sectors))",
    )
    result = run_check("ex08.trace_sectors", calls)
    assert not result.passed and result.points == 0
    assert "forbidden call" in result.error and "warp_sectors" in result.error


def test_the_given_launcher_must_stay_as_given():
    """ex08.transpose_tiles's launcher is given (Exercise.given): the transpose done on the host
    with the counts typed in (the kernel never run) scores nothing, however right its buffer; the
    launcher with other comments is still the one given."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check
    from nbhelpers.exercise_types import code_shape

    spec = next(s for s in CHAPTERS if s.chapter == 8)
    nb = SolutionNotebook(spec.solution, spec.namespace)
    old = "    problems = host_code_problems(transpose_kernel)\n"
    on_the_host = (
        "    from nbhelpers.answer_keys.ch08 import transpose_tiles_ref\n"
        "    return transpose_tiles_ref(x, block_m, block_n, pad)\n" + old
    )
    result = run_check("ex08.transpose_tiles", nb.mutated("transpose_tiles", old, on_the_host))
    assert not result.passed and result.points == 0 and "must stay as given" in result.error
    recommented = ch08.LAUNCHER.replace("# and compiled, on the GPU", "# and on the GPU, compiled")
    assert recommented != ch08.LAUNCHER and code_shape(recommented) == code_shape(ch08.LAUNCHER)
    assert code_shape(ch08.LAUNCHER) != code_shape(ch08.LAUNCHER.replace("(cols + pad)", "cols"))
