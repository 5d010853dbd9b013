"""Chapter 04's exercises beyond the table (test_exercises.py): the labelled edge cases hold what
their labels say."""
from nbhelpers.checks import cases_for, get_exercise


def test_edge_cases_hold_what_their_labels_say():
    ex = get_exercise("ex04.master_weight_step")
    case = next(c for c in cases_for(ex, 0) if "copy stays at 1" in c.label)
    new_master, weights = ex.reference(*case.args)
    assert new_master[0] != 1.0 and weights[0] == 1.0
    ex = get_exercise("ex04.kahan_step")
    case = next(c for c in cases_for(ex, 0) if "kept in c" in c.label)
    s, c = ex.reference(*case.args)
    assert s[0] == 1.0 and c[0] < 0
