"""Checks for the book's exercises, one module per chapter (``chNN``).

A notebook imports the check it needs explicitly, e.g.
``from deviating.exercises.ch00 import check_stable_softmax``. Every check calls
the reader's function on known-answer inputs, prints one line when it passes,
and raises :class:`ExerciseFailed` with a precise message when it does not
(an unfilled stub only prints one line, so a notebook runs to its end; after
:func:`keep_going`, as in the student edition, a wrong answer too is printed, not raised).
Solutions are never imported here: they live only in the notebooks.
:func:`summary` lists the exercises checked so far; ``python -m deviating grade``
scores whole notebooks (:mod:`deviating.exercises.grading`).

A new check is built on the names exported here (``from deviating.exercises import Case,
run_cases``); they are defined in ``_core``, which is private to this package.
"""

from deviating.exercises._core import (
    Case,
    CheckResult,
    ExerciseFailed,
    ForbiddenCall,
    NotImplementedYet,
    call_reader,
    compare_arrays,
    compare_number,
    keep_going,
    recording,
    run_cases,
    summary,
    to_numpy,
)

__all__ = ["Case", "CheckResult", "ExerciseFailed", "ForbiddenCall", "NotImplementedYet", "call_reader",
           "compare_arrays", "compare_number", "keep_going", "recording", "run_cases", "summary", "to_numpy"]
