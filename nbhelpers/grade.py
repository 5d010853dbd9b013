"""Grade a folder of students' exercise notebooks with one command::

    python -m nbhelpers.grade PATH... --csv grades.csv --json grades.json [--seed N] [--jobs N]

This module is the command's entry point (``python -m nbhelpers.grade``, and the console script
``nbhelpers-grade``); the grader is the package :mod:`nbhelpers.grading`, whose docstring says how
it works and which module does what. docs/grading.md is the instructor's guide.

The library API is re-exported here as before: :func:`grade`, :class:`GradeOptions`, ...
"""

from __future__ import annotations

import sys

from .grading import STATUSES, GradeOptions, Submission, detect_chapter, grade, is_check_cell, read_submission
from .grading.cli import main

__all__ = [
    "STATUSES",
    "GradeOptions",
    "Submission",
    "detect_chapter",
    "is_check_cell",
    "read_submission",
    "grade",
    "main",
]

if __name__ == "__main__":
    sys.exit(main())
