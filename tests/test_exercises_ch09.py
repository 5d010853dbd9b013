"""Chapter 09 exercises: the references agree with the course's engines; the compare never crashes."""

import numpy as np
import pytest

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
    assert np.array_equal(ch09.swap_ab_epilogue_ref(acc_t, sA, sB), scaled_mm(qA, qB, sA, sB))


def test_k_ranges_cover_k_once():
    for K in range(1, 80):
        for splits in range(1, 8):
            ranges = ch09.k_ranges(K, splits)
            assert len(ranges) == splits and ranges[0][0] == 0 and ranges[-1][1] == K
            assert all(a <= b for a, b in ranges) and all(r[1] == n[0] for r, n in zip(ranges, ranges[1:]))


def test_split_k_cases_reach_the_hard_ranges():
    """With any seed the random cases alone hold ranges that start inside a K step, a range whose
    last step is short, and an empty range (what a mask against K, a start at 0 or an end not
    clipped to K gets wrong)."""
    from nbhelpers.checks import cases_for

    for seed in (0, 1, 9099, 12345):
        random = [c for c in cases_for("ex09.split_k_matmul", seed) if not c.label]
        seen = set()
        for case in random:
            a, _, splits = case.args
            ranges = ch09.k_ranges(a.shape[1], splits)
            if any(start % ch09.BLOCK for start, end in ranges if end > start):
                seen.add("start inside a step")
            if any(end == start for start, end in ranges):
                seen.add("empty range")
            if any((end - start) % ch09.BLOCK for start, end in ranges):
                seen.add("short last step")
        assert seen == {"start inside a step", "empty range", "short last step"}, (seed, seen)


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
    """Ranges 0 to 16 and 17 to 33 of K = 33: the right partial tiles pass; the whole product in
    range 0's tile and zeros in range 1's (the sum still right) fail, naming the range."""
    a = np.random.default_rng(1).standard_normal((9, 33)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((33, 4)).astype(np.float32)
    expected = ch09.split_k_matmul_ref(a, b, 2)
    assert ch09.k_ranges(33, 2) == [(0, 17), (17, 33)]
    right = np.stack([a[:, :17] @ b[:17], a[:, 17:] @ b[17:]])
    assert ch09._within_bound(right, expected) is None
    one_does_all = np.stack([a @ b, np.zeros((9, 4), np.float32)])
    reason = ch09._within_bound(one_does_all, expected)
    assert reason is not None and "range s = 0" in reason, reason
    # an empty range must store exact zeros
    empty = ch09.split_k_matmul_ref(a[:, :5], b[:5], 4)  # ranges of 2: the last one empty
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


# ---- exercise 3: occupancy from the ptxas line


@pytest.mark.parametrize(
    "got",
    [
        None,
        "x",
        64,
        (64,),
        (64, "registers", 1),
        ("64", "registers"),
        (64.0, "registers"),
        (True, "registers"),
        (64, None),
        (64, 3),
        (64, object()),
        [64, ["registers"]],
        (np.int64(64), b"registers"),
        object(),
    ],
)
def test_same_occupancy_rejects_without_raising(got):
    expected = ch09.resident_warps_ref(32, 4, 0)
    reason = ch09._same_occupancy(got, expected)
    assert isinstance(reason, str) and reason


def test_same_occupancy_accepts_any_binding_limit_and_numpy_ints():
    expected = ch09.resident_warps_ref(32, 4, 0)  # registers and warps both allow 16 blocks
    assert set(expected[1]) == {"registers", "warps"}
    for limit in ("registers", "warps", " Warps "):
        assert ch09._same_occupancy((64, limit), expected) is None
    assert ch09._same_occupancy((np.int64(64), "registers"), expected) is None
    assert ch09._same_occupancy((64, "blocks"), expected) is not None
    assert ch09._same_occupancy([64, "warps"], expected) is None


def test_reference_agrees_with_the_slow_placement_on_every_case():
    from nbhelpers.checks import cases_for
    from nbhelpers.occupancy import occupancy_ref

    for seed in (0, 1, 9099):
        for case in cases_for("ex09.resident_warps", seed):
            warps, limits, _ = ch09.resident_warps_ref(*case.args)
            blocks, ref_limits = occupancy_ref(*case.args)
            assert warps == blocks * case.args[1] and set(limits) == {str(x) for x in ref_limits}, case


@pytest.mark.parametrize(
    "args,wrong,says",
    [
        ((131, 8, 0), 15, "napkin"),  # 65536 / (32 * 131)
        ((80, 1, 0), 25, "sub-partitions"),
        ((64, 4, 64 * 1024), 32, "shared memory limits"),
        ((64, 4, 76 * 1024), 12, "reserves 1 KB"),
        ((40, 4, 45_600), 20, "128 bytes"),
        ((16, 1, 0), 64, "at most 32 blocks"),
    ],
)
def test_a_shortcut_answer_is_named(args, wrong, says):
    expected = ch09.resident_warps_ref(*args)
    reason = ch09._same_occupancy((wrong, "registers"), expected)
    assert reason is not None and says in reason, reason


def test_the_public_cases_defeat_every_shortcut_often():
    """Each shortcut gives a wrong warp count on at least three of the public cases (not just one
    edge case)."""
    from nbhelpers.checks import cases_for

    cases = cases_for("ex09.resident_warps", 0)
    hits = {}
    for case in cases:
        warps, _, hints = ch09.resident_warps_ref(*case.args)
        for text in {t for v in hints.values() for t in v.split("; or ")}:
            hits[text] = hits.get(text, 0) + 1
    assert len(hits) == 7 and min(hits.values()) >= 3, hits


def test_expected_shows_the_answer_only():
    assert repr(ch09.resident_warps_ref(32, 4, 0)) == "(64, 'registers' or 'warps')"
    assert repr(ch09.resident_warps_ref(131, 8, 0)) == "(8, 'registers')"


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
    assert problem.startswith("a tl.load, an operand of the tl.dot"), problem


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
