"""Chapter 10 exercises: the references agree with nbhelpers.moe's padded batch and schedule, the
cases are valid routings whose answers do not depend on evaluation order, and the compares never
crash on a student's odd return value."""

import numpy as np
import pytest
import torch

from nbhelpers import moe
from nbhelpers.answer_keys import ch10
from nbhelpers.checks import cases_for

SEEDS = (0, 1, 1010)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", ["offsets_and_schedule", "dropless_cost"])
def test_cases_are_valid_routings(name, seed):
    for case in cases_for(f"ex10.{name}", seed):
        ids, E = case.args[0], case.args[1]
        moe.Routing.from_ids(ids, E)  # raises on a duplicate expert or one out of range


@pytest.mark.parametrize("seed", SEEDS)
def test_capacity_does_not_depend_on_evaluation_order(seed):
    for case in cases_for("ex10.dropless_cost", seed):
        ids, E, _, factors = case.args
        for factor in factors:
            assert len(ch10.capacity_orders(np.asarray(ids).size, E, factor)) == 1, case


@pytest.mark.parametrize("seed", SEEDS)
def test_dropless_cost_ref_is_what_padded_matmul_and_the_schedule_do(seed):
    """The reference's factor is the smallest of the case's at which moe.padded_matmul drops no
    row (every smaller one drops some), its rows are that batch's E * C, and the grouped rows are
    the tiles of moe.tile_schedule times BLOCK_M."""
    for case in cases_for("ex10.dropless_cost", seed)[:14]:
        ids, E, block_m, factors = case.args
        routing = moe.Routing.from_ids(ids, E)
        x_perm, _, off = moe.permute(torch.zeros(routing.num_tokens, 2), routing)
        dropped = {f: moe.padded_matmul(x_perm, torch.zeros(E, 2, 2), off, capacity_factor=f) for f in factors}
        factor, padded_rows, grouped_rows = ch10.dropless_cost_ref(ids, E, block_m, factors)
        dropless = sorted(f for f, p in dropped.items() if p.dropped_rows == 0)
        assert factor == (dropless[0] if dropless else None)
        if factor is not None:
            assert padded_rows == E * dropped[factor].capacity
        assert grouped_rows == moe.tile_schedule(off, block_m).num_tiles * block_m


def test_dropless_cost_by_hand():
    ids = np.array([[0, 1], [0, 2], [0, 3], [1, 0]])  # counts 4, 2, 1, 1: 8 rows, mean 2
    # factor 1: capacity 2 drops; 2: capacity 4 holds the busiest; tiles of 2 rows: 4 + 2 + 2 + 2
    assert ch10.dropless_cost_ref(ids, 4, 2, (2.0, 1.0, 3.0)) == (2.0, 16, 10)
    assert ch10.dropless_cost_ref(ids, 4, 4, (1.0, 1.5)) == (None, None, 16)


@pytest.mark.parametrize("seed", SEEDS)
def test_lookup_grid_is_an_upper_bound_and_tiles_come_first(seed):
    for case in cases_for("ex10.tile_lookup", seed):
        off, bm = case.args
        out = ch10.tile_lookup_ref(off, bm)
        tiles = moe.tile_schedule(off, bm).num_tiles
        assert out.shape[1] >= tiles
        assert (out[:, tiles:] == -1).all() and (out[0, :tiles] >= 0).all()


def test_the_cases_hold_the_hard_regions():
    counts = [np.diff(c.args[0]) for c in cases_for("ex10.tile_lookup", 0)]
    assert any((c == 0).any() for c in counts) and any((c == 1).any() for c in counts)
    assert any((c % c.max() == 0).all() and c.max() > 1 for c in counts if c.size)
    sched = cases_for("ex10.offsets_and_schedule", 0)
    assert any(np.asarray(c.args[0]).size == 0 for c in sched)
    assert any(np.asarray(c.args[0]).shape[1] > 1 for c in sched)


BAD = [None, "x", 3, [1, 2], np.zeros((2, 2)), np.full((3, 9), np.nan), object(), (1, 2, 3), ("a", "b", "c")]


@pytest.mark.parametrize("got", BAD)
def test_compares_reject_without_raising(got):
    expected = ch10.tile_lookup_ref(np.array([0, 3, 3, 8]), 4)
    assert isinstance(ch10._same_lookup(got, expected), str)
    assert isinstance(ch10._same_cost(got, (2.0, 16, 10)), str)
    assert isinstance(ch10._same_cost(got, (None, None, 10)), str)


def test_lookup_compare_names_unwritten_programs():
    expected = ch10.tile_lookup_ref(np.array([0, 3, 3, 8]), 4)
    got = expected.copy()
    got[:, 1] = ch10.UNWRITTEN
    assert "program 1 wrote nothing" in ch10._same_lookup(got, expected)
    assert ch10._same_lookup(expected.astype(np.int64), expected) is None


def test_cost_compare_takes_numbers_and_whole_rows():
    assert ch10._same_cost((2.0, 16, 10), (2.0, 16, 10)) is None
    assert ch10._same_cost([np.float64(2.0), np.int64(16), 10], (2.0, 16, 10)) is None
    assert ch10._same_cost((None, None, 10), (None, None, 10)) is None
    assert "factor" in ch10._same_cost((2.5, 16, 10), (2.0, 16, 10))
    assert "padded_rows: returned a float" in ch10._same_cost((2.0, 16.0, 10), (2.0, 16, 10))
    assert "grouped_rows" in ch10._same_cost((2.0, 16, 12), (2.0, 16, 10))
    assert "factor: returned None" in ch10._same_cost((None, None, 10), (2.0, 16, 10))
    assert "factor: returned 4.0" in ch10._same_cost((4.0, 32, 10), (None, None, 10))
    assert isinstance(ch10._same_cost((True, 16, 10), (1.0, 16, 10)), str)


def test_schedule_takes_integers_as_arrays_or_lists_never_floats():
    """The offsets and tiles feed a kernel's pointer arithmetic: the right values as floats fail,
    in an array or in a list; integer lists of the right values pass."""
    expected = ch10.offsets_and_schedule_ref(np.array([[0, 1], [1, 0], [2, 0]]), 3, 1)
    assert ch10._same_schedule(expected, expected) is None
    assert ch10._same_schedule(tuple(e.tolist() for e in expected), expected) is None
    as_float_arrays = tuple(e.astype(np.float64) for e in expected)
    assert "float64, expected integers" in ch10._same_schedule(as_float_arrays, expected)
    as_float_lists = tuple([float(v) for v in e] for e in expected)
    assert "holding floats" in ch10._same_schedule(as_float_lists, expected)


def test_the_given_launcher_must_stay_as_given():
    """ex10.tile_lookup's launcher is given (Exercise.given): the schedule computed on the host in
    its place (the kernel never run) scores nothing, whatever it returns; its code written with
    other comments, layout and docstring is still the one given."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check
    from nbhelpers.exercise_types import code_shape

    spec = next(s for s in CHAPTERS if s.chapter == 10)
    nb = SolutionNotebook(spec.solution, spec.namespace)
    src = next(s for s in nb._cells() if "def tile_lookup(" in s)
    body = src[src.index("    problems = host_code_problems") : src.index("    return out.numpy()\n") + 24]
    on_the_host = (
        "    E, rows = len(offsets) - 1, int(offsets[-1])\n"
        "    out = np.full((3, triton.cdiv(rows, block_m) + E), -1, dtype=np.int32)\n"
        "    t = 0\n"
        "    for e in range(E):\n"
        "        for r in range(int(offsets[e]), int(offsets[e + 1]), block_m):\n"
        "            out[:, t] = e, r, offsets[e + 1]\n"
        "            t += 1\n"
        "    return out\n"
    )
    result = run_check("ex10.tile_lookup", nb.mutated("tile_lookup", body, on_the_host), seed=1010)
    assert not result.passed and result.points == 0 and "must stay as given" in result.error
    assert code_shape(ch10.LAUNCHER) == code_shape(ch10.LAUNCHER.replace('"""Run', '"""Start').replace("  #", "  # x"))
    assert code_shape(ch10.LAUNCHER) != code_shape(ch10.LAUNCHER.replace("(index > E)", "(index > E + 1)"))
    assert code_shape("x = 1") is None


def test_the_launcher_stops_a_stray_pointer_before_it_lands():
    """A load aimed far past the offsets (in the bare interpreter it reads whatever lies there, or
    crashes the process) fails the case with a StrayPointerError, before the access."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.checks import run_check

    spec = next(s for s in CHAPTERS if s.chapter == 10)
    nb = SolutionNotebook(spec.solution, spec.namespace)
    far = nb.mutated("tile_lookup", "start = tl.load(off_ptr + e)", "start = tl.load(off_ptr + e * 50000000)")
    result = run_check("ex10.tile_lookup", far, seed=1010)
    assert not result.passed and result.points == 0
    assert "StrayPointerError" in result.error and "stopped before the access" in result.error


def test_the_kernel_audit_names_host_code():
    """host_code_problems: the solution's kernel is clean; a kernel that reaches numpy, a host
    function or a loaded value's handle is named."""
    from exercise_table import CHAPTERS
    from helpers import SolutionNotebook

    from nbhelpers.load_audit import host_code_problems

    spec = next(s for s in CHAPTERS if s.chapter == 10)
    ns = SolutionNotebook(spec.solution, spec.namespace).functions()
    assert host_code_problems(ns["tile_lookup_kernel"]) == []
    assert any("not a @triton.jit function" in p for p in host_code_problems(lambda: 0))
    # imported now, after setup_device(): triton.language made in compiled mode would not run in
    # the interpreter the other tests of this process use
    import ch10_audit_kernels as kernels

    assert host_code_problems(kernels.device_only) == []
    problems = host_code_problems(kernels.escapes)
    for what in (
        "calls the Python builtin int",
        "reaches triton.runtime, the module triton.runtime",
        "reaches tl.core.builtins, the module builtins",
        "has a list",
        "reaches triton.cdiv, a host function of triton",
        "has a dict comprehension",
        "uses np, a module of the host",
        "reads .handle",
        "uses host_helper, a function of the host",
        "calls the Python builtin getattr",
        "has an f-string",
    ):
        assert any(what in p for p in problems), (what, problems)
