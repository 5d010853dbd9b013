"""Chapter 09 exercises: the references agree with the course's engines; the compare never crashes."""

import numpy as np
import pytest

from nbhelpers.device import setup_device

# before anything imports nbhelpers.kernels (the split-K reference does): the interpreter on a CPU
setup_device(verbose=False)

from nbhelpers.answer_keys import ch09
from nbhelpers.rounding import round_to
from nbhelpers.scaled_gemm import scaled_mm


def test_swap_ab_epilogue_ref_is_scaled_mm_epilogue():
    """The swapped GEMM's epilogue on qB^T qA^T gives scaled_mm's C, bit for bit."""
    rng = np.random.default_rng(3)
    qA = round_to(rng.standard_normal((7, 40)) * 30, "e4m3fn")
    qB = round_to(rng.standard_normal((40, 5)) * 30, "e4m3fn")
    sA = np.exp2(rng.uniform(-8, 2, (7, 1))).astype(np.float32)
    sB = np.exp2(rng.uniform(-8, 2, (1, 5))).astype(np.float32)
    acc_t = (qB.T @ qA.T).astype(np.float32)  # exact products; float64 sum rounded once, as scaled_mm
    assert np.array_equal(ch09.swap_ab_epilogue_ref(acc_t[None], sA, sB.T, 1), scaled_mm(qA, qB, sA, sB))


def test_swap_ab_epilogue_ref_spreads_group_scales_over_their_columns():
    """B's scales by group of group_n columns: scaled_mm with each group's scale repeated over its
    columns (the last group shorter), bit for bit; one group is a per-tensor scale."""
    rng = np.random.default_rng(4)
    qA = round_to(rng.standard_normal((3, 40)) * 30, "e4m3fn")
    qB = round_to(rng.standard_normal((40, 70)) * 30, "e4m3fn")
    sA = np.exp2(rng.uniform(-8, 2, (3, 1))).astype(np.float32)
    acc_t = (qB.T @ qA.T).astype(np.float32)
    for group_n in (1, 7, 24, 32, 69, 70, 128):
        groups = -(-70 // group_n)
        sB = np.exp2(rng.uniform(-8, 2, (groups, 1))).astype(np.float32)
        cols = np.array([[sB[n // group_n, 0] for n in range(70)]], np.float32)
        got = ch09.swap_ab_epilogue_ref(acc_t[None], sA, sB, group_n)
        assert np.array_equal(got, scaled_mm(qA, qB, sA, cols))
        if groups == 1:
            assert np.array_equal(got, scaled_mm(qA, qB, sA, sB))
    with pytest.raises(ValueError, match="needs 3"):
        ch09.group_scales(np.ones((2, 1), np.float32), 70, 24)


def test_split_sum_is_in_order_of_s():
    """2**24 + 1 + 1 in float32, in order: each 1 lost to the tie to even; another order keeps 2."""
    parts = np.array([[[2.0**24]], [[1.0]], [[1.0]]], np.float32)
    assert ch09.split_sum_ref(parts)[0, 0] == 2.0**24
    assert ch09.split_sum_ref(parts[::-1])[0, 0] == 2.0**24 + 2
    assert ch09.split_sum_ref(parts[:1]).dtype == np.float32


def test_k_ranges_deal_whole_steps_evenly_the_longer_first():
    for K in range(1, 120):
        for splits in range(1, 8):
            ranges = ch09.k_ranges(K, splits)
            assert len(ranges) == splits and ranges[0][0] == 0 and ranges[-1][1] == K
            assert all(r[1] == n[0] for r, n in zip(ranges, ranges[1:]))
            assert all(start % ch09.BLOCK == 0 for start, end in ranges if end > start)
            steps = [-(-(e - b) // ch09.BLOCK) for b, e in ranges]
            assert max(steps) - min(steps) <= 1 and steps == sorted(steps, reverse=True), (K, splits, steps)
    assert ch09.k_ranges(100, 3) == [(0, 48), (48, 80), (80, 100)]  # 7 steps: 3, 2, 2
    assert ch09.k_ranges(5, 4) == [(0, 5), (5, 5), (5, 5), (5, 5)]


def test_split_k_cases_reach_the_hard_runs():
    """With any seed the random cases alone hold uneven runs (which programs get the longer ones
    counts; runs of cdiv(steps, splits) differ), empty runs, a ragged last step and a whole one."""
    from nbhelpers.checks import cases_for

    for seed in (0, 1, 9099, 12345):
        random = [c for c in cases_for("ex09.split_k_matmul", seed) if not c.label]
        seen = set()
        for case in random:
            a, _, splits = case.args
            K = a.shape[1]
            steps = -(-K // ch09.BLOCK)
            if steps % splits and -(-steps // splits) * (splits - 1) < steps:
                seen.add("uneven, cdiv runs differ")
            if steps < splits:
                seen.add("empty run")
            seen.add("ragged last step" if K % ch09.BLOCK else "whole last step")
        assert seen == {"uneven, cdiv runs differ", "empty run", "ragged last step", "whole last step"}, (seed, seen)


@pytest.mark.parametrize("got", [None, "x", np.zeros((2, 2)), np.full((3, 2), np.nan), object()])
def test_within_bound_rejects_without_raising(got):
    ref, bound = np.ones((3, 2)), np.full((3, 2), 1e-6)
    assert isinstance(ch09._within_bound(got, (ref, bound)), str)


def test_within_bound_accepts_inside_the_bound():
    a = np.random.default_rng(1).standard_normal((9, 33)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((33, 4)).astype(np.float32)
    expected = ch09.split_k_matmul_ref(a, b, 1)
    assert ch09._within_bound((a @ b)[None], expected) is None
    missing = ch09._within_bound((a[:, :32] @ b[:32])[None], expected)  # a K column missing
    assert missing is not None and "TF32" not in missing


def test_each_partial_tile_is_checked_on_its_own():
    """K = 33 is 3 steps, 2 and 1 for two programs: 0 to 32 and 32 to 33. The right partial tiles
    pass; the whole product in range 0's tile and zeros in range 1's (the sum still right) fail,
    naming the range."""
    a = np.random.default_rng(1).standard_normal((9, 33)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((33, 4)).astype(np.float32)
    expected = ch09.split_k_matmul_ref(a, b, 2)
    assert ch09.k_ranges(33, 2) == [(0, 32), (32, 33)]
    right = np.stack([a[:, :32] @ b[:32], a[:, 32:] @ b[32:]])
    assert ch09._within_bound(right, expected) is None
    one_does_all = np.stack([a @ b, np.zeros((9, 4), np.float32)])
    reason = ch09._within_bound(one_does_all, expected)
    assert reason is not None and "range s = 0" in reason, reason
    # an empty range must store exact zeros
    empty = ch09.split_k_matmul_ref(a[:, :5], b[:5], 4)  # one step: the last three programs empty
    assert ch09.k_ranges(5, 4)[-1] == (5, 5) and not empty[0][-1].any() and not empty[1][-1].any()


def test_tf32_inputs_fail_the_check_and_the_message_says_why():
    """What tl.dot(a, b) without input_precision="ieee" computes on an NVIDIA GPU: the operands
    rounded to TF32 (nearest, 10 mantissa bits), exact products, fp32 accumulation. Emulated here
    (the interpreter computes in IEEE float32 either way): far outside the float32 bound, and the
    message names the cause; the IEEE answer passes."""
    from nbhelpers.accumulation import emulated_matmul

    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 48)).astype(np.float32)
    b = rng.standard_normal((48, 16)).astype(np.float32)
    expected = ch09.split_k_matmul_ref(a, b, 1)
    tf32 = emulated_matmul(a.astype(np.float64), b.astype(np.float64), "tf32", "fp32")
    msg = ch09._within_bound(tf32[None], expected)
    assert msg is not None and 'input_precision="ieee"' in msg, msg
    ieee = emulated_matmul(a.astype(np.float64), b.astype(np.float64), "fp32", "fp32")
    assert ch09._within_bound(ieee[None], expected) is None


# ---- exercise 3: the register budget


@pytest.mark.parametrize("got", [None, "x", 64.0, (64,), True, np.float64(128), object(), [128]])
def test_same_budget_rejects_without_raising(got):
    reason = ch09._same_budget(got, ch09.register_budget_answer(4, 0, 16))
    assert isinstance(reason, str) and reason


def test_same_budget_accepts_numpy_ints():
    expected = ch09.register_budget_answer(4, 0, 16)
    assert expected == 128 and repr(expected) == "128"
    assert ch09._same_budget(128, expected) is None and ch09._same_budget(np.int64(128), expected) is None


def test_expected_budget_survives_a_round_trip():
    import pickle

    expected = ch09.register_budget_answer(1, 0, 10)
    back = pickle.loads(pickle.dumps(expected))
    assert back == 168 and back.hints == expected.hints


def test_budget_is_the_top_of_its_step():
    """At the budget the SM holds the warps asked for; one register more (where a thread may have
    it) it holds fewer. Checked on every case of three seeds, against nbhelpers.occupancy."""
    from nbhelpers.checks import cases_for
    from nbhelpers.occupancy import H100, occupancy

    for seed in (0, 1, 9099):
        for case in cases_for("ex09.register_budget", seed):
            w, shared, warps = case.args
            r = int(ch09.register_budget_answer(*case.args))
            if r:
                assert occupancy(r, w, shared, H100).warps >= warps, case
            if r < 255:
                assert occupancy(r + 1, w, shared, H100).warps < warps, case


def test_the_steps_the_compiler_lands_on():
    """Chapter 09's sweep: 4-warp programs without shared memory land on 128, 168 and 255."""
    assert [ch09.register_budget_ref(4, 0, w) for w in (16, 12, 8, 4)] == [128, 168, 255, 255]


@pytest.mark.parametrize(
    "args,wrong,says",
    [
        ((1, 0, 10), 170, "steps of 8"),
        ((1, 0, 10), 200, "4 sub-partitions"),
        ((4, 64 * 1024, 16), 128, "shared memory"),
        ((4, 0, 4), 512, "at most 255"),
    ],
)
def test_a_shortcut_answer_is_named(args, wrong, says):
    reason = ch09._same_budget(wrong, ch09.register_budget_answer(*args))
    assert reason is not None and says in reason, reason


def test_the_public_cases_defeat_every_shortcut_often():
    """Each shortcut gives a wrong budget on at least three of the public cases."""
    from nbhelpers.checks import cases_for

    hits: dict[str, int] = {}
    for case in cases_for("ex09.register_budget", 0):
        for text in {t for v in ch09.register_budget_answer(*case.args).hints.values() for t in v.split("; or ")}:
            hits[text] = hits.get(text, 0) + 1
    assert len(hits) == 6 and min(hits.values()) >= 3, hits


# ---- the given launchers


@pytest.mark.parametrize("name", ["split_k_matmul", "swap_ab_epilogue"])
def test_the_given_launchers_must_stay_as_given(name):
    """Both launchers are given (Exercise.given): one that computes on the host, never running the
    kernel, scores nothing, however right its answers; the launcher with other comments is still
    the one given."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check
    from nbhelpers.exercise_types import code_shape

    spec = next(s for s in CHAPTERS if s.chapter == 9)
    nb = SolutionNotebook(spec.solution, spec.namespace)
    launcher = {"split_k_matmul": ch09.SPLIT_K_LAUNCHER, "swap_ab_epilogue": ch09.EPILOGUE_LAUNCHER}[name]
    host = {
        "split_k_matmul": "    return np.stack([a[:, s:e] @ b[s:e] for s, e in "
        "__import__('nbhelpers.answer_keys.ch09').answer_keys.ch09.k_ranges(a.shape[1], splits)])\n",
        "swap_ab_epilogue": "    return __import__('nbhelpers.answer_keys.ch09').answer_keys.ch09.swap_ab_epilogue_ref("
        "parts_t, sA, sB, group_n)\n",
    }[name]
    old = '    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"\n'
    result = run_check(f"ex09.{name}", nb.mutated(name, old, host + old))
    assert not result.passed and result.points == 0 and "must stay as given" in result.error
    recommented = launcher.replace("    # NaN past", "    # NaN beyond").replace("    # one ", "    # a ")
    assert recommented != launcher and code_shape(recommented) == code_shape(launcher)


def test_nan_padded_lays_out_by_rows_and_by_columns():
    from nbhelpers.load_audit import nan_padded

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    rows, cols = nan_padded(x, (1, 2, 3)), nan_padded(x, (1, 2, 3), column_major=True)
    for t in (rows, cols):
        assert t.shape == (2, 3, 4) and np.array_equal(t.numpy(), x)
        assert t.untyped_storage().nbytes() == 3 * 5 * 7 * 4
    assert rows.stride() == (35, 7, 1) and cols.stride() == (35, 1, 5)
    with pytest.raises(ValueError, match="one count"):
        nan_padded(x, (1, 2))


def test_launch_watched_refuses_host_code_before_running():
    import torch
    import triton
    import triton.language as tl

    from nbhelpers.load_audit import launch_watched

    @triton.jit
    def host_kernel(x_ptr):
        x = tl.load(x_ptr + tl.arange(0, 16))
        tl.store(x_ptr + tl.arange(0, 16), x + np.float32(1))

    x = torch.zeros(16)
    with pytest.raises(TypeError, match="np, a module of the host"):
        launch_watched(host_kernel, (1,), x)
    assert not x.any()  # refused before it ran


# ---- the launchers' load watch (nbhelpers.load_audit): a load past an edge fails even unstored


def _copy_rows_kernel():
    """A kernel that copies the first M elements of a 16-wide block, with or without the mask on
    its load (the store is masked either way, so the output is the same), in Triton's
    interpreter whatever the machine (InterpretedFunction is what triton.jit gives there)."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    def copy_rows_kernel(x_ptr, y_ptr, M, MASK_LOAD: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        if MASK_LOAD:
            x = tl.load(x_ptr + offs, mask=offs < M, other=0.0)
        else:
            x = tl.load(x_ptr + offs)
        tl.store(y_ptr + offs, x, mask=offs < M)

    return InterpretedFunction(copy_rows_kernel)


def _padded_row(m: int, block: int = 16):
    import torch

    x = torch.full((block,), float("nan"))
    x[:m] = torch.arange(1, m + 1, dtype=torch.float32)
    return x, torch.zeros(block)


@pytest.mark.parametrize("mask_load,nan_reads", [(True, 0), (False, 6)])
def test_run_watching_loads_counts_padding_read_under_a_true_mask(mask_load, nan_reads):
    from nbhelpers.load_audit import run_watching_loads

    kernel = _copy_rows_kernel()
    x, y = _padded_row(10)
    count = run_watching_loads(kernel, (1,), x, y, 10, MASK_LOAD=mask_load, BLOCK=16)
    assert count.elements == 16 and count.nan_reads == nan_reads
    assert y[:10].tolist() == list(range(1, 11))  # the masked store hides the read either way


def test_run_watching_loads_on_a_compiled_kernel_watches_an_interpreted_copy_then_launches_it():
    """A GPU's compiled kernel cannot be watched: the launcher runs an interpreted copy of its
    source first (counted), then the kernel itself. Simulated with a stand-in for the compiled one."""
    from nbhelpers.load_audit import run_watching_loads

    interpreted = _copy_rows_kernel()
    launches = []

    class Compiled:
        fn = interpreted.fn

        def __getitem__(self, grid):
            return lambda *args, **meta: launches.append((grid, args[2], meta))

    x, y = _padded_row(3)
    count = run_watching_loads(Compiled(), (1,), x, y, 3, MASK_LOAD=False, BLOCK=16)
    assert count.nan_reads == 13 and launches == [((1,), 3, {"MASK_LOAD": False, "BLOCK": 16})]


def test_watched_loads_restores_the_interpreter():
    from triton.runtime.interpreter import GridExecutor, InterpreterBuilder

    from nbhelpers.load_audit import watched_loads

    originals = (InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store)
    init = GridExecutor._init_args_hst
    with pytest.raises(RuntimeError), watched_loads():
        raise RuntimeError("a student's kernel failed")
    assert (InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store) == originals
    assert GridExecutor._init_args_hst is init


def _stray_kernel():
    """Loads x[OFF_LOAD + i] and stores it to y[OFF_STORE + i], i < 16, all unmasked (interpreted)."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    def stray_kernel(x_ptr, y_ptr, OFF_LOAD, OFF_STORE, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + OFF_STORE + offs, tl.load(x_ptr + OFF_LOAD + offs))

    return InterpretedFunction(stray_kernel)


@pytest.mark.parametrize(
    "off_load,off_store,what",
    [(10**9, 0, "load"), (0, 10**9, "store"), (-(10**6), 0, "load"), (1, 0, "load"), (0, 49, "store")],
)
def test_a_stray_pointer_is_stopped_before_it_reads_or_writes(off_load, off_store, what):
    """Far past the tensors (where the raw interpreter crashes the process), before them, and one
    element past the end of a view's storage: an error naming the access, not a crash; y untouched."""
    import torch

    from nbhelpers.load_audit import StrayPointerError, run_watching_loads

    x = torch.arange(16, dtype=torch.float32)
    y = torch.zeros(64)
    with pytest.raises(StrayPointerError, match=f"elements of a {what} lie outside every tensor"):
        run_watching_loads(_stray_kernel(), (1,), x, y, off_load, off_store, BLOCK=16)
    assert not y.any()


def test_accesses_inside_the_storage_of_a_view_are_allowed():
    """A view's padding is the launch's own memory: reading it counts as a NaN read, not a stray pointer."""
    import torch

    from nbhelpers.load_audit import run_watching_loads

    buf = torch.full((32,), float("nan"))
    buf[:16] = torch.arange(16, dtype=torch.float32)
    y = torch.zeros(64)
    count = run_watching_loads(_stray_kernel(), (1,), buf[:16], y, 8, 48, BLOCK=16)
    assert count.nan_reads == 8 and y[48:56].tolist() == list(range(8, 16))


# ---- what the interpreter cannot show: the tl.dot calls, read from the kernel's source ----------


def test_dot_operand_problems_reads_the_source():
    """Written as plain Python: the audit reads the source, whether triton.jit wraps it or not."""
    from nbhelpers.load_audit import dot_operand_problems

    def clean(a_ptr, b_ptr, offs, mask):
        import triton.language as tl

        a = tl.load(a_ptr + offs, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs, mask, 0.0)
        return tl.dot(a, b, input_precision="ieee")

    assert dot_operand_problems(clean) == []

    def unfilled(a_ptr, b_ptr, offs, mask):
        import triton.language as tl

        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs)
        return tl.dot(a, b, input_precision="ieee")

    (problem,) = dot_operand_problems(unfilled)
    assert problem.startswith("a, an operand of the tl.dot") and "undefined" in problem

    def filled_after(a_ptr, b_ptr, offs, mask):  # right: the masked-off lanes set before the dot
        import triton.language as tl

        a = tl.load(a_ptr + offs, mask=mask)
        a = tl.where(mask, a, 0.0)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(a, b, input_precision="ieee")

    assert dot_operand_problems(filled_after) == []

    def inline(a_ptr, b_ptr, offs, mask):
        import triton.language as tl

        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(tl.load(a_ptr + offs, mask=mask), b, input_precision="ieee")

    (problem,) = dot_operand_problems(inline)
    assert problem.startswith("a tl.load, an operand of the tl.dot"), problem

    def tf32(a_ptr, offs):
        import triton.language as tl

        return tl.dot(tl.load(a_ptr + offs), tl.load(a_ptr + offs))

    (problem,) = dot_operand_problems(tf32)
    assert 'no input_precision="ieee"' in problem and "TF32" in problem

    def said_tf32(a_ptr, offs):
        import triton.language as tl

        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, input_precision="tf32")

    (problem,) = dot_operand_problems(said_tf32)
    assert 'no input_precision="ieee"' in problem


PRECISION = "ieee"  # a module constant the audit resolves, as a kernel's globals


def test_dot_operand_problems_follows_names_conversions_and_the_older_keyword():
    """Right answers written another way pass: allow_tf32=False (Triton 3.7.1 maps it to "ieee"),
    a constant or a parameter default that is "ieee". Wrong ones written another way fail: an
    unfilled load converted with .to(...), or copied to a second name before the dot."""
    from nbhelpers.load_audit import dot_operand_problems

    def older_keyword(a_ptr, offs):
        import triton.language as tl

        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, allow_tf32=False)

    def by_constant(a_ptr, offs):
        import triton.language as tl

        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, input_precision=PRECISION)

    def by_default(a_ptr, offs, PREC="ieee"):
        import triton.language as tl

        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, input_precision=PREC)

    for fn in (older_keyword, by_constant, by_default):
        assert dot_operand_problems(fn) == [], fn.__name__

    def tf32_allowed(a_ptr, offs):
        import triton.language as tl

        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, allow_tf32=True)

    (problem,) = dot_operand_problems(tf32_allowed)
    assert "TF32" in problem

    def converted(a_ptr, b_ptr, offs, mask):
        import triton.language as tl

        a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(a, b, input_precision="ieee")

    (problem,) = dot_operand_problems(converted)
    assert problem.startswith("a, an operand of the tl.dot") and "undefined" in problem

    def renamed(a_ptr, b_ptr, offs, mask):
        import triton.language as tl

        a = tl.load(a_ptr + offs, mask=mask)
        a2 = a
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(a2, b, input_precision="ieee")

    (problem,) = dot_operand_problems(renamed)
    assert problem.startswith("a2, an operand of the tl.dot"), problem

    def inline_converted(a_ptr, b_ptr, offs, mask):
        import triton.language as tl

        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(tl.load(a_ptr + offs, mask=mask).to(tl.float32), b, input_precision="ieee")

    (problem,) = dot_operand_problems(inline_converted)
    assert problem.startswith("tl.load(a_ptr + offs, mask=mask).to(tl.float32), an operand of the tl.dot"), problem
    assert "holds a load under a mask without other=" in problem


def test_dot_operand_problems_says_when_it_cannot_read_the_source():
    from nbhelpers.load_audit import dot_operand_problems

    ns: dict = {}
    exec("def kernel(x):\n    return x\n", ns)  # a function with no source file
    with pytest.raises(ValueError, match="cannot read the source of 'kernel'"):
        dot_operand_problems(ns["kernel"])


def test_dot_operand_problems_takes_positional_precision_and_names_the_accumulator():
    """tl.dot(a, b, acc, "ieee") says ieee by position (Triton 3.7.1's fourth parameter); an
    accumulator started as float16 or as a Python float is named; a float32 tl.zeros is not."""
    import triton
    import triton.language as tl

    from nbhelpers.load_audit import dot_operand_problems

    @triton.jit
    def positional(a_ptr, c_ptr):
        offs = tl.arange(0, 16)
        a = tl.load(a_ptr + offs[:, None] * 16 + offs[None, :])
        acc = tl.zeros((16, 16), dtype=tl.float32)
        acc = tl.dot(a, a, acc, "ieee")
        tl.store(c_ptr + offs[:, None] * 16 + offs[None, :], acc)

    assert dot_operand_problems(positional) == []

    @triton.jit
    def half(a_ptr, c_ptr):
        offs = tl.arange(0, 16)
        a = tl.load(a_ptr + offs[:, None] * 16 + offs[None, :])
        acc = tl.zeros((16, 16), dtype=tl.float16)
        for _ in range(2):
            acc += tl.dot(a, a, input_precision="ieee")
        tl.store(c_ptr + offs[:, None] * 16 + offs[None, :], acc)

    (problem,) = dot_operand_problems(half)
    assert "acc, the accumulator of the tl.dot" in problem and "tl.zeros(..., dtype=tl.float32)" in problem

    @triton.jit
    def python_float(a_ptr, c_ptr):
        offs = tl.arange(0, 16)
        a = tl.load(a_ptr + offs[:, None] * 16 + offs[None, :])
        acc = 0.0
        acc += tl.dot(a, a, input_precision="ieee")
        tl.store(c_ptr + offs[:, None] * 16 + offs[None, :], acc)

    (problem,) = dot_operand_problems(python_float)
    assert "acc, the accumulator" in problem
