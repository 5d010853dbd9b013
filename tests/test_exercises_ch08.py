"""Chapter 08 exercises: the references and cases behave as the statements say."""

import numpy as np

from nbhelpers.device import setup_device

# before anything imports nbhelpers.kernels (the copy reference does): the interpreter on a CPU
setup_device(verbose=False)

from nbhelpers.answer_keys import ch08


def test_sector_counts_of_the_statement():
    assert ch08.sector_count_ref(4, 1, 0) == 4  # 128 bytes, aligned
    assert ch08.sector_count_ref(4, 1, 4) == 5  # misaligned: one more
    assert ch08.sector_count_ref(4, 2, 0) == 8
    assert ch08.sector_count_ref(4, 8, 0) == 32  # one sector per thread
    assert ch08.sector_count_ref(4, 1, 30) == 5  # straddling elements share sectors with neighbours
    assert ch08.sector_count_ref(4, 8, 30) == 33  # each element straddles into the next thread's sector


def test_copy_reference_keeps_the_guards():
    x = np.arange(5, dtype=np.int16)
    out, outside, repeated, extra = ch08.masked_copy_ref(x, 16)
    # no load outside x, each element read once, no sector beyond the least
    assert outside == 0 and repeated == 0 and extra == 0
    assert out.shape == (37,) and out.dtype == np.int16
    assert (out[:16] == ch08.GUARD_OUT).all() and (out[21:] == ch08.GUARD_OUT).all()
    assert (out[16:21] == x).all()


def test_copy_cases_cover_the_edges():
    cases = ch08._copy_cases(np.random.default_rng(0))
    lengths = {(c.args[0].size, c.args[1]) for c in cases}
    assert (0, 16) in lengths and (1, 16) in lengths and (15, 16) in lengths and (17, 16) in lengths
    assert any(c.args[0].size % c.args[1] for c in cases[9:])
    # blocks of several warps, where a warp can be scattered, in the random part, with 1-byte
    # elements among them (where two runs of 16 elements in a warp waste sectors)
    random_part = [c.args for c in cases if not c.label]
    several = [(x, block) for x, block in random_part if block >= 64 and x.size > 32]
    assert len(several) >= 20 and sum(x.itemsize == 1 for x, _ in several) >= 2


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
    assert ch08._sectors_and_efficiency((5, 0.8 * (1 + 1e-15)), e) is None
    for bad in ("x", None, (5,), (4, 0.8), (5, 0.75), (5, "a"), [5, float("nan")]):
        assert isinstance(ch08._sectors_and_efficiency(bad, e), str)


def test_copy_comparator_names_the_count_and_never_raises():
    expected = ch08.masked_copy_ref(np.arange(3, dtype=np.int8), 16)
    buffer = expected[0]
    assert ch08._copy_and_counts((buffer, 0, 0, np.int64(0)), expected) is None
    assert "sectors beyond the least" in ch08._copy_and_counts((buffer, 0, 0, 4), expected)
    assert "loaded outside x: 2" in ch08._copy_and_counts((buffer, 2, 0, 0), expected)
    for bad in ("x", None, (buffer, 0, 0), (buffer[:3], 0, 0, 0), (buffer, 0, "a", 0), (buffer, float("nan"), 0, 0)):
        assert isinstance(ch08._copy_and_counts(bad, expected), str)


def test_the_given_launcher_must_stay_as_given():
    """ex08.masked_copy's launcher is given (Exercise.given): the copy done on the host with every
    count set to 0 (the kernel never run) scores nothing, however right its buffer; the launcher
    with other comments is still the one given."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.answer_keys import ch08
    from nbhelpers.checks import run_check
    from nbhelpers.exercise_types import code_shape

    spec = next(s for s in CHAPTERS if s.chapter == 8)
    nb = SolutionNotebook(spec.solution, spec.namespace)
    old = "    x = torch.from_numpy(np.ascontiguousarray(x))\n"
    on_the_host = (
        "    x = np.ascontiguousarray(x)\n"
        "    out = np.full(x.size + 2 * block, 99, dtype=x.dtype)\n"
        "    out[block : block + x.size] = x\n"
        "    return out, 0, 0, 0\n" + old
    )
    result = run_check("ex08.masked_copy", nb.mutated("masked_copy", old, on_the_host))
    assert not result.passed and result.points == 0 and "must stay as given" in result.error
    recommented = ch08.LAUNCHER.replace("        # a CPU copy of", "        # a copy, on the CPU, of")
    assert recommented != ch08.LAUNCHER and code_shape(recommented) == code_shape(ch08.LAUNCHER)
    assert code_shape(ch08.LAUNCHER) != code_shape(ch08.LAUNCHER.replace("n + 2 * block", "n + block"))
