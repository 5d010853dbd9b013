"""Chapter 08 exercises: the references and cases behave as the statements say."""

import numpy as np

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
    out = ch08.masked_copy_ref(x, 16)
    assert out.shape == (37,) and out.dtype == np.int16
    assert (out[:16] == ch08.GUARD_OUT).all() and (out[21:] == ch08.GUARD_OUT).all()
    assert (out[16:21] == x).all()


def test_copy_cases_cover_the_edges():
    cases = ch08._copy_cases(np.random.default_rng(0))
    lengths = {(c.args[0].size, c.args[1]) for c in cases}
    assert (0, 16) in lengths and (1, 16) in lengths and (15, 16) in lengths and (17, 16) in lengths
    assert any(c.args[0].size % c.args[1] for c in cases[9:])
