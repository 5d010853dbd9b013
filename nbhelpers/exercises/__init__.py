"""Exercise definitions, one module per chapter.

``chNN.py`` holds the exercises of chapter NN (``ch01.py`` for the ``ex01.*`` exercises of
``solutions/ex01_*.ipynb``): its references (functions built on the tested engines of
nbhelpers), its case generators, and an ``EXERCISES`` list of :class:`nbhelpers.checks.Exercise`
objects in the order the notebook presents them. Nothing imports these modules up front:
:func:`nbhelpers.checks.get_exercise` imports ``nbhelpers.exercises.chNN`` when an ``exNN.*`` id
is asked for and reads its ``EXERCISES`` list. A new chapter adds a module; nothing here changes.
"""
