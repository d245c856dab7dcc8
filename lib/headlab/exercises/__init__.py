"""Checks for the book's exercises, one module per chapter (``chNN``).

A notebook imports the check it needs explicitly, e.g.
``from headlab.exercises.ch00 import check_stable_softmax``. Every check calls
the reader's function on known-answer inputs, prints one line when it passes,
and raises :class:`ExerciseFailed` with a precise message when it does not.
Solutions are never imported here: they live only in the notebooks.
"""

from headlab.exercises._core import Case, ExerciseFailed, call_reader, compare_arrays, run_cases

__all__ = ["Case", "ExerciseFailed", "call_reader", "compare_arrays", "run_cases"]
