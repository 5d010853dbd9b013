"""Repo-wide pytest settings for the notebook runs (nbval).

`make test` runs every notebook with ``--nbval-lax``: all cells are executed, and the
outputs of cells marked ``# NBVAL_CHECK_OUTPUT`` are compared with the committed ones.
nbval compares a cell's stderr stream like any other output, so a warning printed by a
library (a deprecation notice, a Triton-interpreter message, a tqdm bar) would fail an
otherwise correct cell. nbval has no command-line switch for this; its documented way
(see "Skipping certain output types" in nbval's docs) is to add the key to the
collector's ``skip_compare``. Errors still fail a cell: they are not stderr streams.
"""

try:
    from nbval.plugin import IPyNbFile
except ImportError:  # nbval not installed: plain unit-test runs still work
    IPyNbFile = None


def pytest_collectstart(collector):
    if IPyNbFile is not None and isinstance(collector, IPyNbFile):
        collector.skip_compare += ("stderr",)
