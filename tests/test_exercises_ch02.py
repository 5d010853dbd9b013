"""Chapter 02's exercises beyond the table (test_exercises.py): the promise behind their bit-exact checks."""
import numpy as np

from nbhelpers.checks import cases_for
from nbhelpers.formats import get_format


def test_cases_keep_every_float64_step_exact():
    """The promise behind bit-exact checks: a correct solution's float64 additions are exact.
    Checked directly for the Kahan cases: every intermediate is an integer multiple of the
    smallest power of two among the terms' last bits, and far below 2**53 of those units."""
    for case in cases_for("ex02.kahan_sum", 0) + cases_for("ex02.pairwise_sum", 3):
        x, acc = case.args
        if len(x) == 0:
            continue
        nz = np.abs(x[x != 0])
        if nz.size == 0:
            continue
        _, ex = np.frexp(nz)
        q = 2.0 ** (int(ex.min()) - 1 - get_format(acc).man_bits)  # every term is a multiple of q
        assert np.all(np.mod(x, q) == 0)
        assert np.abs(x).sum() / q < 2.0**52
