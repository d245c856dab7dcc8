"""Grading: ``python -m deviating grade SUBMISSION.ipynb... --csv grades.csv [--gradescope results.json]``.

Each submission runs in its own fresh kernel, in an empty temporary folder, with no network
and a time limit per cell (:mod:`deviating.exercises.sandbox`: a cell past its limit is
interrupted and the notebook goes on; one that ignores the interrupt or kills its kernel is
left out of a fresh run). The student's own check cells are not trusted and not run; after
the notebook, one grading cell per exercise calls the book's check on the student's function
in recording mode (:func:`deviating.exercises.recording`): every known-answer case runs, and
the exercise earns ``points x passed cases / cases``. Points come from the difficulty
(★☆☆ 1, ★★☆ 2, ★★★ 3) unless the exercise-start cell's metadata sets ``{"headlab": {"points": N}}``.

Nothing a submission does crashes the grader: a syntax error, an exception, an infinite loop,
a deleted or renamed stub, a stub that calls the library's own answer, a function that *is*
the library's (a stub deleted, the library's function imported under its name), a kernel that
dies or a file that is not a notebook each give 0 for what they affect, with the reason. A cell
other than a stub that binds the name of a function a stub asks for is reported in the notes.

Which exercises a notebook has comes from ``--reference`` (the handed-out notebook: safest,
since a student cannot edit it), else from the submission's metadata (written by
``scripts/make_student.py``), else from the submission's own exercise markers.
"""

from __future__ import annotations

import csv
import json
import secrets
import shutil
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ExerciseGrade", "Grade", "grade_notebook", "grade_in_kernel", "write_csv", "gradescope_results",
           "add_commands"]

SKIP_TAGS = {"exercise-check", "exercise-summary", "exercise-mode", "skip-execution"}  # not run when grading


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

    def to_json(self) -> dict:
        return {"label": self.label, "title": self.title, "points": self.points, "max_points": self.max_points,
                "passed": self.passed, "total": self.total, "reason": self.reason}


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


# ----------------------------------------------------------------------- inside the kernel


def grade_in_kernel(namespace: dict, spec: dict, nonce: str) -> None:
    """Run one exercise's check on the function ``spec["function"]`` of ``namespace``, in recording
    mode, and print one line ``nonce {json}`` for the grader. Called by the grading cells."""
    import importlib

    from deviating.exercises._core import recording

    def say(**payload) -> None:
        print(f"{nonce} {json.dumps(payload)}", flush=True)

    fn = namespace.get(spec["function"])
    if fn is None:
        say(status="missing", reason=f"no function {spec['function']!r} is defined: the stub cell was deleted, "
                                     "renamed, or failed to run")
        return
    owner = getattr(fn, "__module__", "") or ""
    if owner.split(".")[0] in ("headlab", "deviating"):
        say(status="forbidden", passed=0, total=0,
            reason=f"{spec['function']} is the library's {owner}.{getattr(fn, '__name__', spec['function'])}, "
                   "not the student's own function (the stub cell was deleted or never run, and another cell "
                   "imports the library's answer)")
        return
    try:
        check = getattr(importlib.import_module(spec["check_module"]), spec["check"])
    except (ImportError, AttributeError) as err:
        say(status="error", reason=f"the check {spec['check_module']}.{spec['check']} is unavailable: {err}")
        return
    with recording() as results:
        try:
            check(fn)
        except Exception as err:  # noqa: BLE001 (a check that fails outside its cases)
            say(status="error", reason=f"{type(err).__name__}: {err}")
            return
    if not results:
        say(status="error", reason="the check recorded no result")
        return
    r = results[-1]
    reason = "" if r.status == "passed" else ("not implemented yet" if r.status == "not implemented"
                                              else (r.messages[0].splitlines()[0] if r.messages else r.reason))
    say(status=r.status, passed=r.n_passed, total=r.total, reason=reason)


# ----------------------------------------------------------------------- the grader


def _grading_cell(spec: dict, nonce: str) -> dict:
    import nbformat

    source = ("from deviating.exercises.grading import grade_in_kernel as __grade\n"
              f"__grade(globals(), __import__('json').loads({json.dumps(spec)!r}), {nonce!r})")
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["headlab_grading"] = spec["label"]
    return cell


def _parse(cell: dict, nonce: str) -> dict | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            for line in out.get("text", "").splitlines():
                if line.startswith(nonce + " "):
                    return json.loads(line[len(nonce) + 1:])
    return None


def _cell_error(cell: dict) -> str | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename')}: {out.get('evalue')}"
    return None


def grade_notebook(path: str | Path, *, reference: str | Path | None = None, timeout: int = 60,
                   startup_timeout: int = 60) -> Grade:
    """Execute one submission in a sandboxed kernel and grade every exercise (see the module docstring).

    ``timeout`` is the limit of each cell, the grading cells included, in seconds.
    """
    import nbformat

    from deviating.exercises.notebook import MalformedExercise, bound_names, exercise_index
    from deviating.exercises.sandbox import TIMEOUT_ERROR, TIMEOUT_KEY, execute_sandboxed

    path = Path(path)
    grade = Grade(submission=path.stem)
    ref_nb = None
    if reference is not None:
        ref_nb = nbformat.read(reference, as_version=4)
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 (any unreadable file: 0, with the reason)
        nb = None
        grade.notes.append(f"not a readable notebook: {type(err).__name__}: {err}")
    try:
        specs = exercise_index(ref_nb if ref_nb is not None else nb, reference or path) if (ref_nb or nb) else []
    except MalformedExercise as err:
        raise ValueError(f"{path}: cannot tell which exercises it holds ({err}); pass --reference with the "
                         "handed-out notebook") from None
    if nb is not None and not specs:
        raise ValueError(f"{path}: no exercise found (no student-edition metadata, no exercise markers); pass "
                         "--reference with the handed-out notebook")
    grade.exercises = [ExerciseGrade(s["label"], s["title"], 0.0, float(s["points"])) for s in specs]
    if nb is None:
        for e in grade.exercises:
            e.reason = grade.notes[0]
        return grade

    nonce = "HEADLAB-GRADE-" + secrets.token_hex(8)
    kept = [i for i, c in enumerate(nb.cells)
            if not (c.cell_type == "code" and SKIP_TAGS & set(c.metadata.get("tags", [])))]
    cells = [nb.cells[i] for i in kept]
    block = nbformat.v4.new_code_cell("from deviating.exercises.sandbox import block_network as __block\n__block()",
                                      metadata={TIMEOUT_KEY: max(timeout, startup_timeout)})  # imports torch
    nb.cells = [block] + cells + [_grading_cell(s, nonce) for s in specs]
    first_grading = 1 + len(cells)
    with tempfile.TemporaryDirectory(prefix="headlab-grade-") as work:
        for extra in path.parent.iterdir():  # files handed out with the notebook (images, data)
            if extra.is_file() and extra.suffix != ".ipynb" and extra.stat().st_size < 50_000_000:
                shutil.copy2(extra, Path(work) / extra.name)
        run = execute_sandboxed(nb, work, timeout=timeout, startup_timeout=startup_timeout)
    asked = {s["function"]: s["label"] for s in specs if s.get("function")}
    for i, c in zip(kept, cells):  # a cell that provides what a stub asks for (e.g. imports the library's)
        if c.cell_type == "code" and not {"exercise-stub", "solution"} & set(c.metadata.get("tags", [])):
            for name in sorted(bound_names(c.source) & asked.keys()):
                grade.notes.append(f"cell {i}: binds {name}, the function that {asked[name]} asks the student to "
                                   "write (a stub skipped or deleted then passes with whatever this cell provides)")
    for note in run.notes:  # the sandbox numbers the cells of `nb`: number them as in the submission
        index, _, rest = note.partition(": ")
        cell = int(index[5:]) if index.startswith("cell ") and index[5:].isdigit() else None
        if cell is not None and 1 <= cell < first_grading:
            note = f"cell {kept[cell - 1]}: {rest}"
        elif cell is not None and cell >= first_grading:
            note = f"the check of {specs[cell - first_grading]['label']}: {rest}"
        grade.notes.append(note)
    for i in range(1, first_grading):
        if i not in run.skipped and nb.cells[i].cell_type == "code" and (error := _cell_error(nb.cells[i])):
            grade.notes.append(f"cell {kept[i - 1]}: {error}")  # numbered as in the submission
    for index, (e, cell) in enumerate(zip(grade.exercises, nb.cells[first_grading:]), start=first_grading):
        result = _parse(cell, nonce)
        if result is None:
            error = _cell_error(cell)
            if index in run.timed_out or (error or "").startswith((TIMEOUT_ERROR, "KeyboardInterrupt")):
                e.reason = f"its check ran past the time limit of {timeout} s (an infinite loop?)"
            else:
                e.reason = f"its check did not run ({error or (grade.notes[-1] if grade.notes else 'no output')})"
            continue
        e.passed, e.total = int(result.get("passed", 0)), int(result.get("total", 0))
        e.points = round(e.max_points * e.passed / e.total, 6) if e.total else 0.0
        e.reason = result.get("reason", "")
    return grade


# ----------------------------------------------------------------------- outputs


def write_csv(grades: list[Grade], path: str | Path) -> None:
    """One row per submission: its points per exercise, the total, the maximum, and the reasons."""
    labels = list(dict.fromkeys(e.label for g in grades for e in g.exercises))
    with open(path, "w", newline="", encoding="utf-8") as fh:
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


def _cmd_grade(args) -> int:  # noqa: ANN001
    if args.gradescope and len(args.submissions) != 1:
        raise ValueError("--gradescope writes one results.json: give exactly one submission")
    grades = []
    for sub in args.submissions:
        g = grade_notebook(sub, reference=args.reference, timeout=args.timeout)
        grades.append(g)
        print(f"{g.submission}: {g.points:g} / {g.max_points:g}")
        for e in g.exercises:
            print(f"  {e.label:<20} {e.points:>4g} / {e.max_points:g}  {textwrap.shorten(e.reason, 64, placeholder=' ...')}".rstrip())
        for note in g.notes:
            print(f"  note: {textwrap.shorten(note, 86, placeholder=' ...')}")
    if args.csv:
        write_csv(grades, args.csv)
        print(f"wrote {args.csv}")
    if args.gradescope:
        Path(args.gradescope).write_text(json.dumps(gradescope_results(grades[0]), indent=1))
        print(f"wrote {args.gradescope}")
    return 0


def add_commands(sub) -> None:  # noqa: ANN001
    p = sub.add_parser("grade", help="grade student notebooks: points per exercise, CSV and Gradescope output")
    p.add_argument("submissions", nargs="+", help="the students' .ipynb files")
    p.add_argument("--csv", help="write the gradebook here (one row per submission)")
    p.add_argument("--gradescope", help="write Gradescope's results.json here (one submission)")
    p.add_argument("--reference", help="the handed-out notebook (which exercises, how many points)")
    p.add_argument("--timeout", type=int, default=60, help="seconds per cell (default %(default)s)")
    p.set_defaults(func=_cmd_grade)
