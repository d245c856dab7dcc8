"""Grading: ``python -m deviating grade SUBMISSION.ipynb... --csv grades.csv [--gradescope results.json]``.

**The grade is decided in the grader's own process.** For each exercise the grader starts a
grading worker (:mod:`deviating.exercises.worker`): a fresh Python, in the submission's own empty
folder, under resource limits, that holds only the chapter's setup cell (from ``--reference``,
the handed-out notebook, when given) and that exercise's stub cell as the student filled it in.
None of the student's other cells ever runs. The book's check then runs *here*, in recording
mode (:func:`deviating.exercises.recording`), on a stand-in for the student's function
(:class:`deviating.exercises.remote.RemoteFunction`): each call sends the inputs the check chose
to the worker and gets back the returned value as data, decoded by
:func:`deviating.exercises.values.decode` into plain numbers, strings, arrays and tensors, checked
for type and shape on arrival. The expected values, the comparisons, the points and the reasons
live only in this process; nothing the worker prints or patches reaches it.

Why it holds: the only thing that crosses from the student's code to the grader is a value, built
by a strict decoder that runs none of the sender's code (no pickle, no ``__eq__``, no
``__array__``), so a submission can change what its function returns, never how it is judged.
Replacing the grading function, the checks, the recording, ``json``, ``print`` or ``numpy`` in the
worker changes that process only, which decides nothing. What the worker could still do is
*compute* the expected value itself, by reading the check module or the solutions: its audit
hook refuses to open files outside its folder and the Python installation (the check modules
``deviating/exercises/chNN.py`` included) and it holds no expected value in memory (the checks
never run there). Forged output lines, a huge output, ``sys.exit``/``os._exit``, a cell that never
returns, a fork bomb or memory exhaustion end the worker or one call, and give 0 for the cases
they touch, with the reason (:mod:`deviating.exercises.remote`). A case passes only when the
grader's comparison of the decoded value with the expected one says so; the exercise earns
``points x passed cases / cases``. Points come from the difficulty (★☆☆ 1, ★★☆ 2, ★★★ 3) unless
the exercise-start cell's metadata sets ``{"headlab": {"points": N}}``.

Which exercises a notebook has, and their points and checks, come from ``--reference`` (the
handed-out notebook: safest, since a student cannot edit it), else from the submission's metadata
(written by ``scripts/make_student.py``), else from its exercise markers; the check named must be
a ``check_*`` of a ``deviating.exercises.chNN`` module (or ``fused``). Files are copied into a submission's
folder only from the handed-out folder (``--handout``, default the reference's folder), never from
beside the submission. A cell other than a stub that binds the name of a function a stub asks
for is reported in the notes (it is never run).

For production, run the grader in a container without a network and with a read-only root (the
README's "Teaching with this book" gives the exact ``docker run`` command).
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import json
import re
import shutil
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from deviating.exercises import recording
from deviating.exercises.notebook import DEF_RE, STUB_TAG, MalformedExercise, bound_names, exercise_index, \
    setup_cell_index
from deviating.exercises.remote import Limits, RemoteFunction, StubProblem, WorkerFailed

__all__ = ["ExerciseGrade", "Grade", "grade_notebook", "write_csv", "gradescope_results", "add_commands"]

CHECK_MODULE_RE = re.compile(r"^deviating\.exercises\.(ch\d{2}|fused)$")
CHECK_NAME_RE = re.compile(r"^check_[a-z0-9_]+$")
HANDOUT_LIMIT = 50_000_000  # bytes: a bigger handed-out file is not copied


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


# ----------------------------------------------------------------------- the grader


def _stub_source(nb, function: str) -> tuple[int, str] | None:
    """The code that defines ``function``: the submission's stub cell, then any solution cell that defines
    it again (the book's own notebook, graded as a submission). (The stub's index, the joined source.)"""
    cells = [(i, cell.source) for i, cell in enumerate(nb.cells)
             if cell.cell_type == "code" and {STUB_TAG, "solution"} & set(cell.metadata.get("tags", []))
             and function in DEF_RE.findall(cell.source)]
    return (cells[0][0], "\n\n".join(src for _, src in cells)) if cells else None


def _check_of(spec: dict):  # noqa: ANN202
    module, name = str(spec.get("check_module")), str(spec.get("check"))
    if not CHECK_MODULE_RE.match(module) or not CHECK_NAME_RE.match(name):
        raise ValueError(f"the check {module}.{name} is not one of the book's (deviating.exercises.chNN.check_*)")
    check = getattr(importlib.import_module(module), name, None)
    if check is None or name not in getattr(importlib.import_module(module), "__all__", ()):
        raise ValueError(f"the check {module}.{name} does not exist")
    return check


_STUB_REASONS = {
    "missing": "no function {f!r} is defined: the stub cell was deleted, renamed, or does not define it",
    "broken": "its stub cell failed to run ({why}), so no function {f!r} is defined",
    "library": "{f} is the library's {why}, not the student's own function",
    "setup": "the chapter's setup cell failed in the grading worker ({why})",
}


def _grade_exercise(e: ExerciseGrade, spec: dict, nb, setup: str, folder: str, limits: Limits) -> list[str]:
    """Grade one exercise into ``e``; return notes on what happened to its worker."""
    function = spec.get("function") or ""
    try:
        check = _check_of(spec)
    except (ImportError, ValueError) as err:
        e.reason = f"its check is unavailable: {err}"
        return []
    found = _stub_source(nb, function)
    if found is None:
        e.reason = _STUB_REASONS["missing"].format(f=function)
        return []
    fn = RemoteFunction(function, setup, found[1], folder, limits)
    try:
        try:
            fn.start()
        except StubProblem as err:
            e.reason = _STUB_REASONS.get(err.kind, "{why}").format(f=function, why=str(err))
            return [f"cell {found[0]}: {e.reason}"] if err.kind == "broken" else []
        except WorkerFailed as err:
            e.reason = f"its grading worker failed before the first case: {err}"
            return []
        with recording() as results, contextlib.redirect_stdout(io.StringIO()):  # the check's own ✓/✗ line
            try:
                check(fn)
            except Exception as err:  # noqa: BLE001 (a check that fails outside its cases: say so)
                e.reason = f"its check stopped: {type(err).__name__}: {str(err)[:200]}"
                return fn.events
    finally:
        fn.close()
    if not results:
        e.reason = "the check recorded no result"
        return fn.events
    r = results[-1]
    e.passed, e.total = r.n_passed, r.total
    e.points = round(e.max_points * e.passed / e.total, 6) if e.total else 0.0
    e.failures = list(r.messages)
    e.reason = "" if r.status == "passed" else ("not implemented yet" if r.status == "not implemented"
                                                else (r.messages[0].splitlines()[0] if r.messages else r.reason))
    counts = {event: fn.events.count(event) for event in fn.events}  # in order, each once
    return [f"{e.label}: {event}" + (f" ({n} times)" if n > 1 else "") for event, n in counts.items()]


def grade_notebook(path: str | Path, *, reference: str | Path | None = None, timeout: int = 60,
                   startup_timeout: int = 120, handout: str | Path | None = None,
                   limits: Limits | None = None) -> Grade:
    """Grade every exercise of one submission, each in its own grading worker (see the module docstring).

    ``timeout`` is the limit of each call of the student's function, ``startup_timeout`` that of a
    worker's setup, in seconds; ``limits`` sets the others (memory, CPU time, ...). ``handout`` is
    the folder whose files (not notebooks) are copied into the submission's folder: by default the
    reference's folder, and none without a reference.
    """
    import nbformat

    path = Path(path)
    limits = limits or Limits(timeout=timeout, startup=startup_timeout)
    grade = Grade(submission=path.stem)
    ref_nb = nbformat.read(reference, as_version=4) if reference is not None else None
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 (any unreadable file: 0, with the reason)
        nb = None
        grade.notes.append(f"not a readable notebook: {type(err).__name__}: {str(err)[:200]}")
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
    source = ref_nb if ref_nb is not None else nb
    index = setup_cell_index(source)
    setup = source.cells[index].source if index is not None else ""
    asked = {s["function"]: s["label"] for s in specs if s.get("function")}
    for i, c in enumerate(nb.cells):  # a cell that provides what a stub asks for (e.g. imports the library's)
        if c.cell_type == "code" and not {STUB_TAG, "solution"} & set(c.metadata.get("tags", [])) \
                and (ref_nb is not None or i != index):
            for name in sorted(bound_names(c.source) & asked.keys()):
                grade.notes.append(f"cell {i}: binds {name}, the function that {asked[name]} asks the student to "
                                   "write (it is never run: only the stub counts)")
    handout = Path(handout) if handout is not None else (Path(reference).parent if reference is not None else None)
    if handout is not None and not handout.is_dir():
        raise ValueError(f"the handed-out folder {handout} does not exist: pass --handout with the folder of files "
                         "handed out with the notebook")
    with tempfile.TemporaryDirectory(prefix="headlab-grade-") as folder:
        for extra in sorted(handout.iterdir()) if handout is not None else ():
            if extra.is_file() and not extra.is_symlink() and extra.suffix != ".ipynb" \
                    and extra.stat().st_size < HANDOUT_LIMIT:
                shutil.copy2(extra, Path(folder) / extra.name)
        for e, spec in zip(grade.exercises, specs):
            grade.notes += _grade_exercise(e, spec, nb, setup, folder, limits)
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
    for name in [*args.submissions, *([args.reference] if args.reference else [])]:
        if not Path(name).is_file():
            raise ValueError(f"{name}: no such file; give the path of a submitted .ipynb (and --reference the "
                             "handed-out notebook)")
    grades = []
    for sub in args.submissions:
        g = grade_notebook(sub, reference=args.reference, timeout=args.timeout, handout=args.handout,
                           limits=Limits(timeout=args.timeout, memory_mb=args.memory_mb, cpu_s=args.cpu_s))
        grades.append(g)
        print(f"{g.submission}: {g.points:g} / {g.max_points:g}")
        for e in g.exercises:
            print(f"  {e.label:<20} {e.points:>4g} / {e.max_points:g}  {textwrap.shorten(e.reason, 64, placeholder=' ...')}".rstrip())
            if args.details:
                for failure in e.failures:
                    print(textwrap.indent(failure, "      "))
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
    p.add_argument("--handout", help="the folder of files handed out with the notebook, copied into each "
                                     "submission's folder (default: the reference's folder)")
    p.add_argument("--timeout", type=int, default=60, help="seconds per call of a student's function "
                                                          "(default %(default)s)")
    p.add_argument("--memory-mb", type=int, default=4096, help="memory of a grading worker (default %(default)s)")
    p.add_argument("--cpu-s", type=int, default=600, help="CPU seconds of a grading worker (default %(default)s)")
    p.add_argument("--details", action="store_true", help="print every failed case: input, expected, got")
    p.set_defaults(func=_cmd_grade)
