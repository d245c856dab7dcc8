"""The student edition of a chapter: the notebook without its solutions, ready to hand out.

:func:`student_notebook` removes every solution block (found by
:func:`deviating.exercises.notebook.find_exercises`), clears outputs and widget state, records the
exercises in the notebook's metadata (what ``python -m deviating grade`` reads) and adds two cells:

- right after the setup cell, one that calls :func:`deviating.exercises.keep_going`: a check that
  finds a wrong answer prints its message instead of raising, so "Run All" never stops at an
  exercise;
- at the end, one that calls :func:`deviating.exercises.summary`: after "Run All", the list of
  the exercises, each passed, unfinished or wrong (with its one-line reason).

``scripts/make_student.py`` writes the editions (and turns their MyST markup into plain Markdown).
"""

from __future__ import annotations

import copy
from pathlib import Path

from deviating.exercises.notebook import find_exercises, setup_cell_index

__all__ = ["student_notebook", "SUMMARY_SOURCE", "KEEP_GOING_SOURCE", "SUMMARY_TAG", "KEEP_GOING_TAG"]

SUMMARY_TAG, KEEP_GOING_TAG = "exercise-summary", "exercise-mode"
SUMMARY_SOURCE = "from deviating.exercises import summary\n\nsummary()  # every exercise checked above: done or still to do"
KEEP_GOING_SOURCE = ("# A check that finds a wrong answer says why and the notebook goes on, so that \"Run All\"\n"
                     "# reaches the last cell, which lists every exercise still to do.\n"
                     "from deviating.exercises import keep_going\n\nkeep_going()")


def _code_cell(cell_id: str, tag: str, source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": {"tags": [tag]},
            "outputs": [], "source": source}


def student_notebook(nb: dict, path: Path | str = "<notebook>") -> dict:
    """The student edition of a notebook (a new dict; see the module docstring).

    Raises :class:`deviating.exercises.notebook.MalformedExercise` when the exercises do not follow
    the book's format.
    """
    exercises = find_exercises(nb, path)
    drop: set[int] = set()
    for ex in exercises:
        assert ex.solution_start is not None and ex.solution_end is not None  # validated
        drop.update(range(ex.solution_start, ex.solution_end + 1))
    setup = setup_cell_index(nb)
    out = copy.deepcopy(nb)
    cells = []
    for i, cell in enumerate(out["cells"]):
        if i in drop:
            continue
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
            cell.get("metadata", {}).pop("execution", None)
        cells.append(cell)
        if exercises and i == setup:
            cells.append(_code_cell("exercise-mode", KEEP_GOING_TAG, KEEP_GOING_SOURCE))
    if exercises:
        cells.append(_code_cell("exercise-summary", SUMMARY_TAG, SUMMARY_SOURCE))
    out["cells"] = cells
    out.get("metadata", {}).pop("widgets", None)
    out.setdefault("metadata", {})["headlab"] = {
        "edition": "student",
        "generated_by": "scripts/make_student.py (do not edit by hand; regenerate)",
        "exercises": [ex.to_json() for ex in exercises],
    }
    return out
