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


# ---- ex02.order_matters: a construction, judged by its property


def test_order_matters_cases_are_all_solvable():
    """Every case any seed asks for has n at or above the proven minimum 2**p + 1 and the
    course's own example passes the check's judgement: no student is asked the impossible."""
    from nbhelpers.answer_keys.ch02 import _order_matters_compare, fewest_order_matters_terms, order_matters_ref

    seen = set()
    for seed in (0, 1, 2, 12345, 2**40 + 7):
        for case in cases_for("ex02.order_matters", seed):
            n, acc = case.args
            assert acc in ("bf16", "fp16") and n >= fewest_order_matters_terms(acc)
            target = order_matters_ref(n, acc)
            assert _order_matters_compare(target.example, target) is None, (n, acc)
            seen.add((n, acc))
    assert (257, "bf16") in seen and (2049, "fp16") in seen  # the fewest possible are asked


def test_order_matters_example_for_every_n_across_a_level():
    """The example's shape changes at n = 2**p + 1 + j 2**(p-1): every n through two changes works."""
    from nbhelpers.answer_keys.ch02 import _order_matters_reason, order_matters_example

    for n in range(257, 257 + 2 * 128 + 3):
        assert _order_matters_reason(order_matters_example(n, "bf16"), n, "bf16") is None, n
    for n in (2049, 2050, 3072, 3073, 3074, 4097, 4098):
        assert _order_matters_reason(order_matters_example(n, "fp16"), n, "fp16") is None, n


def test_order_matters_fewest_is_tight():
    """The lemma behind the minimum n = 2**p + 1: one rounded addition of positive values loses
    at most 2**-p of its rounded result (half a spacing), checked on every pair of positive bf16
    values over 12 binades and every pair of positive e5m2 values; the bound is reached (a tie at
    a power of two), so 2**p lossy additions are needed to lose half of a sum."""
    from nbhelpers.answer_keys.ch02 import fewest_order_matters_terms, order_matters_example
    from nbhelpers.rounding import round_to

    assert fewest_order_matters_terms("bf16") == 257 and fewest_order_matters_terms("fp16") == 2049
    for acc, p, lo, hi in (("bf16", 8, -4, 8), ("e5m2", 3, -16, 16)):
        m = np.arange(2 ** (p - 1), 2**p) / 2 ** (p - 1)  # significands in [1, 2)
        v = np.unique(round_to(np.concatenate([m * 2.0**e for e in range(lo, hi)]), acc))
        v = v[np.isfinite(v) & (v > 0)]
        s, a = np.meshgrid(v, v)
        r = round_to(s + a, acc)
        fin = np.isfinite(r)
        loss = (s + a - r)[fin]
        assert np.all(loss <= r[fin] * 2.0**-p)
        assert np.any(loss == r[fin] * 2.0**-p)  # reached: the bound cannot be lowered
    try:
        order_matters_example(256, "bf16")
    except ValueError as e:
        assert "at least 257" in str(e)
    else:
        raise AssertionError("256 terms in bf16 should be refused")


def test_order_matters_reasons_name_the_broken_property():
    from nbhelpers.answer_keys.ch02 import OrderMattersTarget, _order_matters_compare, order_matters_example

    good = order_matters_example(300, "bf16")
    target = OrderMattersTarget(300, "bf16", good)

    def reason(x):
        return _order_matters_compare(x, target)

    assert reason(good) is None
    assert reason(list(good)) is None  # a list of floats is fine
    assert reason(good.astype(np.float32)) is None  # so is any dtype that holds the values
    assert reason(good[:-1]) == "returned 299 terms, expected 300"
    assert reason(None) == reason("abc") == reason(3.0) == "expected a 1-D array of 300 numbers"
    assert reason(good.reshape(3, 100)) == "expected a 1-D array of 300 numbers"
    assert reason(good + 0j) == "expected a 1-D array of 300 real numbers"
    bad = good.copy()
    bad[5] = np.nan
    assert reason(bad) == "term 5 is nan, not a finite number"
    bad[5] = -good[5]
    assert reason(bad) == f"term 5 is {-float(good[5])!r}, not positive"
    bad[5] = 0.0
    assert reason(bad) == "term 5 is 0.0, not positive"
    bad[5] = good[5] * (1 + 2.0**-20)
    assert reason(bad).startswith("term 5 = ") and "is not a value of bf16" in reason(bad)
    assert reason(good[::-1]).startswith("the sum in this order in bf16 is ")
    ones = np.ones(300)  # exact in neither order past 256: the forward sum is judged first
    assert "not the exact 300.0" in reason(ones)
    small = OrderMattersTarget(3, "bf16", good[:3])
    assert _order_matters_compare(np.array([1.0, 2.0, 4.0]), small) == (
        "the sum in reverse order in bf16 is 7.0, more than half of the exact 7.0"
    )

    class Hostile:
        def __array__(self, *a, **k):
            raise RuntimeError("no")

        def __len__(self):
            return 300

    assert reason(Hostile()) is not None  # a failed case, never an exception
