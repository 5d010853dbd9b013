"""Exercise definitions, one module per chapter.

``chNN.py`` holds the exercises of chapter NN (``ch01.py`` for the ``ex01.*`` exercises of
``solutions/ex01_*.ipynb``). Each module builds its :class:`nbhelpers.checks.Exercise` objects
(a reference function from nbhelpers, a case generator, the points) and registers them with
:func:`nbhelpers.checks.register` when it is imported. Nothing imports these modules up front:
:func:`nbhelpers.checks.get_exercise` imports ``nbhelpers.exercises.chNN`` the first time an
``exNN.*`` id is asked for.
"""
