"""Repository tooling: what writes ``docs/``, reads ``solutions/``, regenerates ``exercises/`` or
the chapters' install cell.

* :mod:`~nbhelpers.tooling.compile_cases`  the course's compile cases and ``make gpu-compile``
* :mod:`~nbhelpers.tooling.gpu_targets`    which GPU runs which chapter (``docs/gpu.md``, ``make gpu-targets``)
* :mod:`~nbhelpers.tooling.install_cell`   the cell at the top of each chapter that installs the course on Colab
* :mod:`~nbhelpers.tooling.make_exercises` ``exercises/`` from ``solutions/`` (``make exercises``)

Nothing the notebooks import imports these modules: they sit above every layer of the package.
"""
