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
@pytest.mark.parametrize("name", ["offsets_and_schedule", "padding_waste"])
def test_cases_are_valid_routings(name, seed):
    for case in cases_for(f"ex10.{name}", seed):
        ids, E = case.args[0], case.args[1]
        moe.Routing.from_ids(ids, E)  # raises on a duplicate expert or one out of range


@pytest.mark.parametrize("seed", SEEDS)
def test_capacity_does_not_depend_on_evaluation_order(seed):
    for case in cases_for("ex10.padding_waste", seed):
        ids, E, factor = case.args
        assert len(ch10.capacity_orders(np.asarray(ids).size, E, factor)) == 1, case


@pytest.mark.parametrize("seed", SEEDS)
def test_padding_waste_ref_is_what_padded_matmul_does(seed):
    for case in cases_for("ex10.padding_waste", seed)[:12]:
        ids, E, factor = case.args
        routing = moe.Routing.from_ids(ids, E)
        x_perm, _, off = moe.permute(torch.zeros(routing.num_tokens, 2), routing)
        p = moe.padded_matmul(x_perm, torch.zeros(E, 2, 2), off, capacity_factor=factor)
        C, pad, drop = ch10.padding_waste_ref(ids, E, factor)
        assert C == p.capacity
        assert pad == pytest.approx(p.padding_fraction, rel=1e-12, abs=1e-15)
        assert drop == pytest.approx(p.dropped_rows / x_perm.shape[0], rel=1e-12, abs=1e-15)


def test_padding_edge_cases_by_hand():
    ids = np.array([[0, 1], [0, 2], [0, 3], [1, 0]])  # counts 4, 2, 1, 1: 8 rows, capacity 2
    assert ch10.padding_waste_ref(ids, 4, 1.0) == (2, 2 / 8, 2 / 8)


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
    assert isinstance(ch10._same_waste(got, (2, 0.25, 0.25)), str)


def test_lookup_compare_names_unwritten_programs():
    expected = ch10.tile_lookup_ref(np.array([0, 3, 3, 8]), 4)
    got = expected.copy()
    got[:, 1] = ch10.UNWRITTEN
    assert "program 1 wrote nothing" in ch10._same_lookup(got, expected)
    assert ch10._same_lookup(expected.astype(np.int64), expected) is None


def test_waste_compare_accepts_another_evaluation_order():
    assert ch10._same_waste((2, (8 - 6) / 8, 1 - 6 / 8), (2, 0.25, 0.25)) is None
    assert ch10._same_waste([2, 0.25 * (1 + 1e-14), 0.25], (2, 0.25, 0.25)) is None
    assert "capacity" in ch10._same_waste((3, 0.25, 0.25), (2, 0.25, 0.25))
    assert "dropped" in ch10._same_waste((2, 0.25, 0.26), (2, 0.25, 0.25))


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
