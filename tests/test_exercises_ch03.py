"""Chapter 03's exercises beyond the table (test_exercises.py): what the comparisons forgive
(the sign of an exact zero, another route to the same answer), and that the references, which
follow the accumulations instead of deriving the answers, agree with sums that run (numpy's
float32, round_to one addition at a time), and that the cases reach accumulators too wide for
any loop."""

import math

import numpy as np
from exercise_table import CHAPTERS
from helpers import SolutionNotebook

from nbhelpers.checks import run_check

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 3)


def solution_functions() -> dict:
    return SolutionNotebook(SPEC.solution, SPEC.namespace).functions()


# ---- ex03.first_inexact_K: a prediction, checked against the sum itself


def _first_inexact_fp32_cumsum(x: float, chunk: int = 1 << 20) -> int:
    """The first K at which a sequential fp32 sum of K copies of x differs from K * x, by running
    the sum: numpy's float32 cumsum adds in order, rounding each step, a chunk at a time."""
    x32 = np.float32(x)
    s, done = np.float32(0.0), 0
    while True:
        part = np.full(chunk, x32, dtype=np.float32)
        part[0] = s + x32  # the step from the previous chunk's last sum, rounded in float32
        sums = np.cumsum(part, dtype=np.float32)
        exact = np.arange(done + 1, done + chunk + 1, dtype=np.float64) * x
        bad = np.flatnonzero(sums.astype(np.float64) != exact)
        if bad.size:
            return done + int(bad[0]) + 1
        s, done = sums[-1], done + chunk


def test_first_inexact_K_reference_against_numpys_float32_sum():
    """For fp32, the reference (binade by binade, in exact arithmetic) against numpy's float32
    cumsum, for every product of the fixed cases and of a random seed's fp32 cases (answers up to
    2**24 + 1); the chunked cumsum itself against a plain loop of float32 additions, with chunks
    of 2**20 and of 7 (the answer inside a late chunk, across many joins)."""
    from nbhelpers.answer_keys.ch03 import first_inexact_K_ref
    from nbhelpers.checks import cases_for

    def loop(x):
        s, k = np.float32(0.0), 0
        while True:
            s, k = np.float32(s + np.float32(x)), k + 1
            if float(s) != k * x:
                return k

    xs = [(255 / 128) ** 2, 1.9921875 * 1.5, -(1.0 + 2.0**-7) * 3 * 2.0**-9, 1.4921875 * 1.8671875 * 2.0**30]
    expected = [loop(x) for x in xs]
    assert all(k < 100_000 for k in expected)
    for chunk in (1 << 20, 7):
        assert [_first_inexact_fp32_cumsum(x, chunk) for x in xs] == expected
    products = {abs(c.args[0] * c.args[1]) for seed in (0, 3) for c in cases_for("ex03.first_inexact_K", seed)}
    for x in sorted(products):
        assert first_inexact_K_ref(x, 1.0, 23) == _first_inexact_fp32_cumsum(x), x


def test_first_inexact_K_reference_against_one_rounding_at_a_time():
    """For accumulators of 8 to 15 mantissa bits (fp32's range), the reference against the sum
    taken one round_to at a time, for many bf16 products at once."""
    from nbhelpers.answer_keys.ch03 import first_inexact_K_ref
    from nbhelpers.formats import FloatFormat
    from nbhelpers.rounding import round_to

    rng = np.random.default_rng(6)
    sig = np.concatenate([[1.0, 1.5, 1.75, 255 / 128], rng.integers(128, 256, 40) / 128])
    x = sig * rng.integers(128, 256, sig.size) / 128 * 2.0 ** rng.integers(-20, 20, sig.size)
    for m in (15, 12, 8):
        f = FloatFormat.custom(8, m)
        s = np.zeros(x.size)
        first = np.zeros(x.size, dtype=np.int64)
        k = 0
        while not first.all():
            k += 1
            s = round_to(s + x, f)
            first[(first == 0) & (s != k * x)] = k
        assert [first_inexact_K_ref(float(v), 1.0, m) for v in x] == first.tolist(), m


def test_first_inexact_K_accepts_another_derivation():
    """The answer by another route: the first odd k past 2**p / m, m the product's significand
    with its trailing zeros shifted out via the fp32 bits, returned as a float where it is exact."""
    import struct

    def by_bits(a, b, man_bits):
        bits = struct.unpack("<I", struct.pack("<f", abs(a * b)))[0]
        m = (bits & 0x7FFFFF) | 0x800000
        m >>= (m & -m).bit_length() - 1
        k = 2 ** (man_bits + 1) // m + 1
        k += 1 - k % 2
        return float(k) if k < 2**53 else k

    assert run_check("ex03.first_inexact_K", by_bits).passed


def test_first_inexact_K_cases_reach_wide_accumulators():
    """With any seed, the fixed cases and the random ones alone ask about fp32 and about
    accumulators whose answers need 2**40 additions and more, past 2**53 too."""
    from nbhelpers.answer_keys.ch03 import first_inexact_K_ref
    from nbhelpers.checks import cases_for

    for seed in (0, SPEC.hidden_seed, 12345, 8142093377):
        cases = cases_for("ex03.first_inexact_K", seed)
        for part in (cases, [c for c in cases if not c.label]):
            answers = [first_inexact_K_ref(*c.args) for c in part]
            assert sum(c.args[2] == 23 for c in part) >= 8, seed
            assert sum(k > 2**40 for k in answers) >= 5 and sum(k > 2**53 for k in answers) >= 3, seed


# ---- ex03.once_and_every_step: a prediction, checked against stepped accumulators


def _stepped_by_round_to(n: int, t: float, fmt) -> float:
    """1 + t + ... (n terms) with round_to at every step, one at a time (n small)."""
    from nbhelpers.rounding import round_to

    s = 1.0
    for _ in range(n):
        s = float(round_to(s + t, fmt))
    return s


def test_stepped_sum_agrees_with_one_round_to_at_a_time():
    """_stepped_sum (exact integers, jumping over runs of exact additions) against the same sums
    one round_to at a time (for all j at once), up to 4,100 terms: past bf16's stopping point for
    every j, past fp32's for j >= 12, and past that of an accumulator of 10 mantissa bits."""
    from nbhelpers.answer_keys.ch03 import _stepped_sum
    from nbhelpers.formats import FloatFormat
    from nbhelpers.rounding import round_to

    js = np.arange(31)
    t = 2.0**-js
    for fmt, m in (("bf16", 7), ("fp32", 23), (FloatFormat.custom(8, 10), 10)):
        s = np.ones(js.size)
        for n in range(1, 4101):
            s = round_to(s + t, fmt)
            if n in (1, 2, 3, 127, 128, 129, 255, 256, 257, 300, 1000, 2047, 2048, 2049, 4095, 4096, 4100):
                for j in js:
                    assert _stepped_sum(n, int(j), m) == s[j], (n, int(j), fmt)
        for j in js[:8]:  # just before, at and after bf16's stopping point 2**(8 - j)
            for n in range(2**8 - 2 ** int(j) - 2, 2**8 - 2 ** int(j) + 3):
                assert _stepped_sum(n, int(j), m) == _stepped_by_round_to(n, float(t[j]), fmt), (n, int(j), fmt)


def test_once_and_every_step_cases_reach_ties_and_both_stopping_points():
    """With any seed: exact sums on a bf16 tie, sums stalled in the wide accumulator and in bf16,
    and wide accumulators that stall or stay exact only past 2**40 additions."""
    from nbhelpers.answer_keys.ch03 import once_and_every_step_ref
    from nbhelpers.checks import cases_for
    from nbhelpers.rounding import round_to

    for seed in (0, SPEC.hidden_seed, 12345, 8142093377):
        ties = stalled = stalled16 = far = 0
        for case in cases_for("ex03.once_and_every_step", seed):
            n, j, man_bits = case.args
            p = man_bits + 1
            exact = 1 + n * 2.0**-j
            once, every = once_and_every_step_ref(n, j, man_bits)
            wide = min(exact, max(1.0, 2.0 ** (p - j)))
            up = float(round_to(wide, "bf16", "nearest_away"))
            ties += up != once and wide == exact
            stalled += exact > 2.0 ** (p - j) > 1
            stalled16 += exact > every
            far += man_bits > 23 and n > 2**40 and (j < p and 2.0 ** (p - j) > 1)
        assert ties >= 3 and stalled >= 5 and stalled16 >= 10 and far >= 10, (seed, ties, stalled, stalled16, far)


# ---- ex03.split_k_rescue: a construction, judged with the split-K order and exact sums


def test_split_k_order_is_the_tree_of_slices():
    """The judge's split-K order (split_k_matmul_ref) against a scalar float32 implementation of
    the spec, on random bf16 matrices and the tie case whose tree order matters: partial sums
    2**24, 0, 1, 1 give 2**24 + 2 in the tree, 2**24 in slice order or a strided tree."""
    from nbhelpers.answer_keys.ch03 import split_k_matmul_ref
    from nbhelpers.rounding import round_to

    def scalar(A, B, S):
        A, B = np.asarray(A, dtype=np.float32), np.asarray(B, dtype=np.float32)
        M, K = A.shape
        N = B.shape[1]
        L = -(-K // S)

        def tree(parts):
            if len(parts) == 1:
                return parts[0]
            nxt = [np.float32(parts[i] + parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
            return tree(nxt + ([parts[-1]] if len(parts) % 2 else []))

        C = np.empty((M, N))
        for i in range(M):
            for j in range(N):
                parts = []
                for s in range(S):
                    acc = np.float32(0.0)
                    for k in range(s * L, min((s + 1) * L, K)):
                        acc = np.float32(acc + A[i, k] * B[k, j])
                    parts.append(acc)
                C[i, j] = tree(parts)
        return C

    A, B = np.ones((1, 4)), np.array([[2.0**24], [0.0], [1.0], [1.0]])
    assert split_k_matmul_ref(A, B, 4)[0, 0] == 2.0**24 + 2
    f32 = np.float32
    assert ((f32(2**24) + f32(0)) + f32(1)) + f32(1) == 2**24
    rng = np.random.default_rng(3)
    for K, S in [(10, 4), (5, 4), (1, 1), (37, 5), (64, 8), (100, 3)]:
        A = round_to(rng.standard_normal((3, K)) * 2.0 ** rng.integers(-6, 7, (3, K)), "bf16")
        B = round_to(rng.standard_normal((K, 2)) * 2.0 ** rng.integers(-6, 7, (K, 2)), "bf16")
        assert np.array_equal(split_k_matmul_ref(A, B, S), scalar(A, B, S)), (K, S)


def test_every_split_k_rescue_case_is_solvable_by_the_example():
    from nbhelpers.answer_keys.ch03 import _rescue_compare, split_k_rescue_ref
    from nbhelpers.checks import cases_for

    for seed in (0, 1, 7, 12345, 2**40 + 3):
        for case in cases_for("ex03.split_k_rescue", seed):
            target = split_k_rescue_ref(*case.args)
            assert target.S >= 2 and target.lost >= 1
            assert _rescue_compare(target.example, target) is None, case.args


def test_split_k_rescue_judge_names_what_is_wrong_and_never_raises():
    from nbhelpers.answer_keys.ch03 import _rescue_compare, split_k_rescue_ref

    t = split_k_rescue_ref(64, 8, 14)
    a, b = t.example
    assert "not a bf16 value" in _rescue_compare((a + 2.0**-20, b), t)
    assert "expected a pair" in _rescue_compare(a, t)
    assert "values, expected 64" in _rescue_compare((a[:10], b[:10]), t)
    # another answer: two ones before the large product still leave the rest to tie away
    shifted = (np.concatenate([[1.0, 1.0], a[:-2]]), np.concatenate([[1.0, 1.0], b[:-2]]))
    assert _rescue_compare(shifted, t) is None
    cancelling = np.zeros(64), np.zeros(64)
    cancelling[0][:3], cancelling[1][:3] = [2.0**12, 1.0, -(2.0**12)], [2.0**12, 1.0, 2.0**12]
    assert "negative" in _rescue_compare(cancelling, t)  # [2**24, 1, -2**24] would meet any lost
    assert _rescue_compare((np.full(64, 2.0**12), np.ones(64)), t) is not None  # loses in both orders

    class Hostile:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("no")

    assert _rescue_compare((Hostile(), Hostile()), t) is not None
    assert np.array_equal(t.example[0], a)  # the judge copies, never writes


# ---- ex03.moved_accumulators: a prediction over ranges of fp32 values, checked with the model


def _model_count(gpu: str, p: float, n: int, lo_code: int, hi_code: int, sign: float) -> int:
    """How many of the fp32 values with magnitude codes lo_code..hi_code (sign +1 or -1) the model
    moves: the model run on every one of them, 2**20 at a time."""
    from nbhelpers.answer_keys.ch03 import _moved_flags

    total = 0
    for start in range(lo_code, hi_code + 1, 1 << 20):
        codes = np.arange(start, min(start + (1 << 20), hi_code + 1), dtype=np.uint32)
        c = sign * codes.view(np.float32).astype(np.float64)
        total += int(np.count_nonzero(_moved_flags(gpu, p, n, c)))
    return total


def _code(v: float) -> int:
    return int(np.float32(v).view(np.uint32))


def test_moved_accumulators_reference_against_the_model_on_every_value():
    """The reference runs the model on two values a binade; here the model runs on every fp32
    value of 2**18 on each side of both edges of the moved values, of whole binades (a normal one
    and the subnormals' top one) and of the subnormals' bottom, for settings that reach every
    regime (n * p below fp32's smallest subnormal, the two sides' edges apart or together)."""
    from nbhelpers.answer_keys.ch03 import _moved_edges, moved_accumulators_ref

    settings = [
        ("V100", 1.0, 1),
        ("V100", 2.0**-48, 4),
        ("A100", 2.0**-20, 1),
        ("A100", 2.0**-30, 8),
        ("A100", 2.0**-160, 8),
        ("H100", 2.0**-153, 16),
        ("H100", 2.0**-140, 3),
        ("H100", 2.0**40, 2),
    ]
    w = 1 << 18
    for gpu, p, n in settings:
        neg, pos = _moved_edges(gpu, p, n)
        for sign, edge in ((-1.0, neg), (1.0, pos)):
            spans = [(0, 1 << 19), ((1 << 23) - w, (1 << 23) + w), (_code(2.0**-3), _code(2.0**-2) - 1)]
            if 0 < edge < 2.0**128:
                spans.append((_code(edge) - w, _code(edge) + w))
            for lo_code, hi_code in spans:
                lo_code = max(lo_code, 0 if sign > 0 else 1)  # zero once, on the nonnegative side
                lo, hi = (float(np.uint32(c).view(np.float32)) for c in (lo_code, hi_code))
                a, b = (lo, hi) if sign > 0 else (-hi, -lo)
                got = moved_accumulators_ref(gpu, p, n, a, b)
                assert got == _model_count(gpu, p, n, lo_code, hi_code, sign), (gpu, p, n, a, b)


def test_moved_accumulators_cases_reach_every_regime():
    """Over the cases of a seed: zero moved and not; the negative edge above the positive one (a
    GPU keeping more bits than the final truncation needs) and equal; an edge among the
    subnormals; ends on an edge and one fp32 value inside it; a = -0.0; every fp32 value; a > b."""
    from nbhelpers.answer_keys.ch03 import _moved_edges
    from nbhelpers.checks import cases_for

    for seed in (0, SPEC.hidden_seed):
        cases = [c.args for c in cases_for("ex03.moved_accumulators", seed)]
        edges = {(gpu, p, n): _moved_edges(gpu, p, n) for gpu, p, n, _, _ in cases}
        assert any(pos == 0.0 for _, pos in edges.values()) and any(pos > 0 for _, pos in edges.values())
        assert any(neg > pos > 0 for neg, pos in edges.values()) and any(neg == pos for neg, pos in edges.values())
        assert any(0 < pos <= 2.0**-126 or neg <= 2.0**-126 for neg, pos in edges.values())
        assert any(b == edges[(g, p, n)][1] for g, p, n, _, b in cases)
        assert any(-a == edges[(g, p, n)][0] for g, p, n, a, _ in cases)
        assert any(a == 0.0 and math.copysign(1.0, a) < 0 and b > 0 for *_, a, b in cases)
        assert any((a, b) == (-math.inf, math.inf) for *_, a, b in cases)
        assert any(a > b for *_, a, b in cases)
        assert {gpu for gpu, *_ in cases} == {"V100", "A100", "H100"}


def test_moved_accumulators_random_cases_alone_reach_the_subnormal_bottom():
    """The random cases (past the fixed ones) have products whose n * p lies on both sides of
    fp32's smallest subnormal, with every seed, and one in the binade just below it with zero in
    its range: an answer that gets fp32's bottom wrong, or puts it one binade low, cannot hide
    behind the fixed cases."""
    from nbhelpers.checks import cases_for

    for seed in (0, 1, 7, SPEC.hidden_seed):
        cases = [c.args for c in cases_for("ex03.moved_accumulators", seed)][-63:]
        assert any(n * p < 2.0**-149 for _, p, n, _, _ in cases), seed
        assert any(2.0**-149 <= n * p < 2.0**-140 for _, p, n, _, _ in cases), seed
        assert any(2.0**-150 <= n * p < 2.0**-149 and a <= 0.0 <= b for _, p, n, a, b in cases), seed


# ---- ex03.fool_the_tensor_core: a construction, judged by its property

GPUS = ("V100", "A100", "H100")


def test_fool_the_tensor_core_cases_cover_every_established_gpu():
    from nbhelpers.checks import cases_for
    from nbhelpers.tensor_cores import TENSOR_CORES

    assert set(GPUS) == {gpu for gpu, spec in TENSOR_CORES.items() if spec.established}
    for seed in (0, SPEC.hidden_seed, 7):
        gpus = [case.args[0] for case in cases_for("ex03.fool_the_tensor_core", seed)]
        assert all(gpus.count(gpu) >= 5 for gpu in GPUS), gpus


def test_fool_the_tensor_core_examples_have_the_property():
    """The course's example answers every case of several seeds (every case is solvable), and
    the model really is off: it returns 0 where the exact dot product is ``exact``."""
    from nbhelpers.answer_keys.ch03 import _fool_compare, fool_the_tensor_core_ref
    from nbhelpers.checks import cases_for
    from nbhelpers.tensor_cores import TENSOR_CORES

    for seed in (0, SPEC.hidden_seed, 1, 2, 3):
        for case in cases_for("ex03.fool_the_tensor_core", seed):
            gpu, exact = case.args
            target = fool_the_tensor_core_ref(gpu, exact)
            assert _fool_compare(target.example, target) is None, (gpu, exact)
            a, b = target.example
            assert len(a) == TENSOR_CORES[gpu].group("fp16")
            assert TENSOR_CORES[gpu].matmul(a[None, :], b[:, None], "fp16")[0, 0] == 0.0
            assert math.fsum((a * b).tolist()) == exact != 0


def test_an_answer_built_for_the_v100_fools_only_the_v100():
    """The V100's answer (alignment 23 bits), padded with zeros to the other GPUs' group sizes:
    the A100 (24 bits) and H100 (25 bits) keep exact's leading bit, so the model is off by less
    than half, in every case the check draws for them."""
    from nbhelpers.answer_keys.ch03 import _fool_compare, fool_the_tensor_core_example, fool_the_tensor_core_ref
    from nbhelpers.checks import cases_for
    from nbhelpers.tensor_cores import TENSOR_CORES

    for seed in (0, SPEC.hidden_seed):
        for case in cases_for("ex03.fool_the_tensor_core", seed):
            gpu, exact = case.args
            a4, b4 = fool_the_tensor_core_example("V100", exact)
            g = TENSOR_CORES[gpu].group("fp16")
            a, b = np.r_[a4, np.zeros(g - 4)], np.r_[b4, np.zeros(g - 4)]
            reason = _fool_compare((a, b), fool_the_tensor_core_ref(gpu, exact))
            if gpu == "V100":
                assert reason is None
            else:
                assert reason is not None and "less than half" in reason, (gpu, exact, reason)


def test_fool_the_tensor_core_compare_names_the_broken_condition_and_never_crashes():
    from nbhelpers.answer_keys.ch03 import _fool_compare, fool_the_tensor_core_ref

    target = fool_the_tensor_core_ref("A100", 2.0**-10)
    a, b = target.example
    a_before, b_before = a.copy(), b.copy()
    assert _fool_compare((a, b), target) is None
    assert _fool_compare([a.astype(np.float16), b.astype(np.float16)], target) is None  # float16 arrays
    assert _fool_compare((list(a), tuple(b)), target) is None  # any sequences of numbers
    np.testing.assert_array_equal(a, a_before)  # the student's arrays are not modified
    np.testing.assert_array_equal(b, b_before)

    def reason(got):
        r = _fool_compare(got, target)
        assert isinstance(r, str) and r, got
        return r

    for odd in (
        None,
        3.0,
        "ab",
        (a,),
        (a, b, b),
        (None, b),
        (a, "x" * 8),
        ({}, b),
        target,
        (a.reshape(2, 4), b),
        (a + 0j, b),
        (np.array(["1"] * 8), b),
        object(),
    ):
        reason(odd)
    assert "has 7 values, expected 8" in reason((a[:7], b[:7]))
    assert "not a finite number" in reason((np.r_[np.nan, a[1:]], b))
    assert "not a finite number" in reason((np.r_[np.inf, a[1:]], b))
    assert "not an fp16 value" in reason((np.r_[a[:2], 2.0**-10 * 3, a[3:]], np.r_[b[:2], 1 / 3, b[3:]]))
    assert "beyond fp16's largest value" in reason((np.r_[256.0, -256.0, a[2:]], np.r_[256.0, 256.0, b[2:]]))
    assert "not 0.0009765625" in reason((np.zeros(8), np.zeros(8)))
    assert "not 0.0009765625" in reason((np.r_[a[0], 0.0, a[2:]], b))  # P not cancelled
    # exact kept: 2**-10 with P = 2**14 on the A100 (24 bits: the last kept is 2**-10)
    assert "less than half" in reason((np.r_[2.0**14, -(2.0**14), a[2:]], b))
    # the exact sum must be exact itself, not merely round to it in float64 or fp32
    assert "not 0.0009765625" in reason((np.r_[a[:2], 2.0**-10, 2.0**-24, a[4:]], np.r_[b[:3], 2.0**-24, b[4:]]))

    class Hostile:
        def __len__(self):
            return 2

        def __iter__(self):
            raise RuntimeError("no")

    reason(Hostile())
    reason((np.ones(8) * np.nan, np.ones(8)))


def test_fool_the_tensor_core_target_states_the_property():
    from nbhelpers.answer_keys.ch03 import fool_the_tensor_core_ref

    assert repr(fool_the_tensor_core_ref("H100", -(2.0**-11))) == (
        "a, b: 16 fp16 values each, every |a[i]*b[i]| <= 65504, sum(a*b) == -0.00048828125 exactly, "
        "and the H100 model off by >= |-0.00048828125|/2"
    )
