"""The gradebook: the grades of a run (:class:`Grade`), as a CSV file and as Gradescope's ``results.json``.

Both are written atomically (:func:`write_atomically`: a temporary file beside the target, then
``os.replace``), so a reader never sees half a gradebook; the grader writes them only after every
grading worker, and everything it started, has ended (:mod:`deviating.exercises.remote`).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import os
import stat
import tempfile
from pathlib import Path
from dataclasses import dataclass, field

__all__ = ["ExerciseGrade", "Grade", "write_atomically", "write_csv", "gradescope_results"]


@dataclass
class ExerciseGrade:
    """One exercise of one submission: the points earned and why not more."""

    label: str
    title: str
    points: float
    max_points: float
    passed: int = 0
    total: int = 0
    reason: str = ""
    failures: list[str] = field(default_factory=list)  # per failed case: its input, expected and got

    def to_json(self) -> dict:
        return {"label": self.label, "title": self.title, "points": self.points, "max_points": self.max_points,
                "passed": self.passed, "total": self.total, "reason": self.reason, "failures": list(self.failures)}


@dataclass
class Grade:
    """A submission's grade: one :class:`ExerciseGrade` per exercise, and notes on the whole run."""

    submission: str
    exercises: list[ExerciseGrade] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def points(self) -> float:
        return round(sum(e.points for e in self.exercises), 6)

    @property
    def max_points(self) -> float:
        return sum(e.max_points for e in self.exercises)


def write_atomically(path: str | Path, write) -> None:  # noqa: ANN001
    """``write(fh)`` into a new file beside ``path``, then rename it onto ``path`` (never half written)."""
    path = Path(path)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)  # the file's own permissions, kept
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # what open(path, "w") would give (mkstemp's file is private)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            write(fh)
        os.chmod(tmp, mode)
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
