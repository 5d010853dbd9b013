"""Chapter 05's exercises beyond the table (test_exercises.py): the student's scaler meets
torch.amp.GradScaler itself."""
from exercise_table import CHAPTERS
from helpers import SolutionNotebook
from nbhelpers.checks import cases_for
from nbhelpers.loss_scaling import gradscaler_trajectory

SPEC = next(spec for spec in CHAPTERS if spec.chapter == 5)


def solution_functions() -> dict:
    return SolutionNotebook(SPEC.solution, SPEC.namespace).functions()


def test_solution_scaler_equals_gradscaler_on_hidden_sequences():
    """The exercise's reference is nbhelpers' scaler; here the student's solution meets GradScaler
    itself on some of the hidden random sequences (torch.amp.GradScaler("cpu"))."""
    ns = solution_functions()
    cases = [c for c in cases_for("ex05.scale_trajectory", 7) if not c.label][:15]
    for c in cases:
        seq, init, growth, backoff, interval = c.args
        if not 2.0**-60 < init < 2.0**60:
            continue  # GradScaler's unscale (grad * 1/scale) needs a moderate scale
        expected, _ = gradscaler_trajectory(seq, init, growth, backoff, interval)
        assert ns["scale_trajectory"](seq, init, growth, backoff, interval) == expected
