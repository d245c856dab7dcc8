"""The gradebook: the grades of a run as a CSV file and as Gradescope's ``results.json``.

Both are written atomically (:func:`write_atomically`: a temporary file beside the target, then
``os.replace``), so a reader never sees half a gradebook; the grader writes them only after every
grading worker, and everything it started, has ended (:mod:`deviating.exercises.remote`).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deviating.exercises.grading import Grade

__all__ = ["write_atomically", "write_csv", "gradescope_results"]


def write_atomically(path: str | Path, write) -> None:  # noqa: ANN001
    """``write(fh)`` into a new file beside ``path``, then rename it onto ``path`` (never half written)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_csv(grades: list[Grade], path: str | Path) -> None:
    """One row per submission: its points per exercise, the total, the maximum, and the reasons (the note
    that a run had no isolation included). Written atomically."""
    write_atomically(path, functools.partial(_csv_rows, grades))


def _csv_rows(grades: list[Grade], fh) -> None:  # noqa: ANN001
    labels = list(dict.fromkeys(e.label for g in grades for e in g.exercises))
    writer = csv.writer(fh)
    writer.writerow(["submission", *labels, "total", "max", "notes"])
    for g in grades:
        by_label = {e.label: e for e in g.exercises}
        notes = "; ".join([f"{e.label}: {e.reason}" for e in g.exercises if e.reason] + g.notes)
        writer.writerow([g.submission, *(f"{by_label[l].points:g}" if l in by_label else "" for l in labels),
                         f"{g.points:g}", f"{g.max_points:g}", notes])


def gradescope_results(grade: Grade) -> dict:
    """Gradescope's autograder ``results.json`` for one submission: one test per exercise."""
    return {
        "score": grade.points,
        "output": "\n".join(grade.notes) or f"{grade.points:g} of {grade.max_points:g} points",
        "tests": [{"name": f"{e.label}: {e.title}", "score": e.points, "max_score": e.max_points,
                   "status": "passed" if e.points == e.max_points else "failed",
                   "output": e.reason or f"all {e.total} known-answer checks passed"} for e in grade.exercises],
    }
