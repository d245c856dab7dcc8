"""Grading end to end: ``python -m deviating grade`` on a blank student edition, the full solutions,
a mixed submission and a broken one, each exercise in its own grading worker.

One small notebook is the fixture: four real exercises of the book (their task, stub, solution and
check cells, copied from the chapters), so the test starts 16 short workers, not whole chapters.
Every call has a limit of TIMEOUT seconds, so the looping submission cannot stall the run.
The cheats a submission can try are in test_cheats.py.
"""

from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, chapter_notebooks
from make_student import find_exercises

from deviating.exercises.grading import gradescope_results, grade_notebook, write_csv
from deviating.exercises.student import student_notebook

pytestmark = pytest.mark.slow

LABELS = ["ex-00-softmax", "ex-06-gini", "ex-03-sink", "ex-09-redundant"]  # numpy only
POINTS = {"ex-00-softmax": 1.0, "ex-06-gini": 2.0, "ex-03-sink": 1.0, "ex-09-redundant": 1.0}
TIMEOUT = 4


def _book_fixture() -> nbformat.NotebookNode:
    """A notebook in the book's format holding the four exercises, copied from the chapters."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np")]
    for path in chapter_notebooks():
        chapter = nbformat.read(path, as_version=4)
        for ex in find_exercises(chapter, path):
            if ex.label in LABELS:
                nb.cells += [copy.deepcopy(chapter.cells[i]) for i in range(ex.start, ex.check + 1)]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    assert [ex.label for ex in find_exercises(nb)] == sorted(LABELS, key=lambda l: l[3:5])
    return nb


def _stub(nb, function: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if "exercise-stub" in c.metadata.get("tags", []) and f"def {function}(" in c.source)


SOLUTIONS = {  # what students hand in, exercise by exercise
    "naive softmax": "def stable_softmax(scores):\n    e = np.exp(scores)\n    return e / e.sum(axis=-1, keepdims=True)",
    "gini": ("def gini_of(effects):\n    x = np.clip(np.asarray(effects, dtype=float), 0, None)\n"
             "    return float(np.abs(x[:, None] - x[None, :]).sum() / (2 * x.size ** 2 * x.mean()))"),
    "last layer sink": "def find_sink(patterns):\n    return int(patterns[-1].sum(axis=(0, 1)).argmax())",
    "syntax error": "def is_redundant(a, b, both)\n    return True",
    "library gini": ("from headlab.stats import gini  # imported with the cell, not inside the timed check\n\n"
                     "def gini_of(effects):\n    return gini(np.clip(effects, 0, None))"),
    "looping sink": "def find_sink(patterns):\n    while True:\n        pass",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("grading")
    book = _book_fixture()
    student = nbformat.from_dict(student_notebook(book))
    subs = {"blank": student, "solutions": book}

    mixed = copy.deepcopy(student)
    _stub(mixed, "stable_softmax").source = SOLUTIONS["naive softmax"]
    _stub(mixed, "gini_of").source = SOLUTIONS["gini"]
    _stub(mixed, "find_sink").source = SOLUTIONS["last layer sink"]
    subs["mixed"] = mixed  # is_redundant left as the stub

    broken = copy.deepcopy(student)
    broken.cells.remove(_stub(broken, "stable_softmax"))  # a deleted stub, and the library's answer instead:
    broken.cells.insert(1, nbformat.v4.new_code_cell("from deviating.kernels.reference import softmax as stable_softmax"))
    _stub(broken, "gini_of").source = SOLUTIONS["library gini"]
    _stub(broken, "find_sink").source = SOLUTIONS["looping sink"]
    _stub(broken, "is_redundant").source = SOLUTIONS["syntax error"]
    broken.cells.insert(2, nbformat.v4.new_code_cell("while True:\n    pass"))  # a cell that never ends
    broken.cells.insert(3, nbformat.v4.new_code_cell(
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)"))
    subs["broken"] = broken

    paths = {}
    for name, nb in subs.items():
        paths[name] = tmp / f"{name}.ipynb"
        nbformat.write(nb, paths[name])
    grades = {name: grade_notebook(p, timeout=TIMEOUT) for name, p in paths.items()}
    return {"grades": grades, "paths": paths, "tmp": tmp, "student": paths["blank"]}


def _points(grade) -> dict[str, float]:
    return {e.label: e.points for e in grade.exercises}


def test_blank_edition_scores_zero(graded) -> None:
    grade = graded["grades"]["blank"]
    assert grade.points == 0 and grade.max_points == sum(POINTS.values())
    assert {e.label: e.max_points for e in grade.exercises} == POINTS
    assert all(e.reason == "not implemented yet" for e in grade.exercises)


def test_full_solutions_score_full_marks(graded) -> None:
    grade = graded["grades"]["solutions"]
    assert _points(grade) == POINTS, [e.to_json() for e in grade.exercises]


def test_mixed_submission_gets_partial_credit_per_case(graded) -> None:
    grade = graded["grades"]["mixed"]
    by = {e.label: e for e in grade.exercises}
    # the naive softmax overflows on 4 of the 8 rows; the last-layer sink is right on 4 of 5 inputs
    assert (by["ex-00-softmax"].passed, by["ex-00-softmax"].total) == (4, 8)
    assert (by["ex-03-sink"].passed, by["ex-03-sink"].total) == (4, 5)
    assert _points(grade) == {"ex-00-softmax": 0.5, "ex-06-gini": 2.0, "ex-03-sink": 0.8, "ex-09-redundant": 0.0}
    assert grade.points == 3.3
    assert "wrong on case 3 of 8" in by["ex-00-softmax"].reason
    # the report says, per failed case, the input, the expected value and what came back (computed here)
    failure = by["ex-00-softmax"].failures[0]
    assert "expected: [0.1, 0.2, 0.3, 0.4]" in failure and "got:      [nan, nan, nan, nan]" in failure
    assert len(by["ex-00-softmax"].failures) == 4 and len(by["ex-03-sink"].failures) == 1


def test_broken_submission_never_crashes_the_grader(graded) -> None:
    grade = graded["grades"]["broken"]
    by = {e.label: e for e in grade.exercises}
    assert grade.points == 0
    # the stub deleted, the library's softmax imported under its name in a cell that never runs
    assert "no function 'stable_softmax' is defined: the stub cell was deleted" in by["ex-00-softmax"].reason
    assert "headlab.stats.inequality.gini" in by["ex-06-gini"].reason  # the library's answer, from the stub
    assert "time limit of 4 s" in by["ex-03-sink"].reason  # an infinite loop inside the function
    assert by["ex-03-sink"].failures and "ran past the time limit" in by["ex-03-sink"].failures[0]
    assert "no function 'is_redundant'" in by["ex-09-redundant"].reason  # its cell did not compile
    assert "SyntaxError: expected ':'" in by["ex-09-redundant"].reason
    notes = " ".join(grade.notes)
    assert "cell 1: binds stable_softmax, the function that ex-00-softmax asks" in notes
    assert "SyntaxError" in notes and "ex-03-sink: a call ran past the time limit of 4 s" in notes
    # the endless cell and the cell that opens a URL are not stubs: never run, so they cost nothing
    assert "KeyboardInterrupt" not in notes and "example.com" not in notes


def test_csv_gradebook_and_gradescope_results(graded, tmp_path) -> None:
    grades = list(graded["grades"].values())
    write_csv(grades, tmp_path / "grades.csv")
    rows = list(csv.DictReader((tmp_path / "grades.csv").open(encoding="utf-8")))
    assert [r["submission"] for r in rows] == ["blank", "solutions", "mixed", "broken"]
    assert [r["total"] for r in rows] == ["0", "5", "3.3", "0"]
    assert rows[2]["ex-03-sink"] == "0.8" and rows[2]["max"] == "5"
    results = gradescope_results(graded["grades"]["mixed"])
    assert results["score"] == 3.3
    assert [t["max_score"] for t in results["tests"]] == [POINTS[e.label] for e in graded["grades"]["mixed"].exercises]
    assert json.loads(json.dumps(results)) == results  # plain JSON


def test_the_cli_handles_a_file_that_is_not_a_notebook(graded, tmp_path) -> None:
    bad = tmp_path / "bad.ipynb"
    bad.write_text("this is not json")
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "deviating", "grade", str(bad), "--reference", str(graded["student"]),
                           "--gradescope", str(out), "--csv", str(tmp_path / "g.csv")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    assert results["score"] == 0 and "not a readable notebook" in results["output"]
    assert len(results["tests"]) == 4
    proc = subprocess.run([sys.executable, "-m", "deviating", "grade", str(bad), str(bad), "--gradescope", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "exactly one submission" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "deviating", "grade", str(tmp_path / "missing.ipynb")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "missing.ipynb: no such file" in proc.stderr, proc.stderr


def test_importing_a_forbidden_module_inside_the_stub_is_no_forbidden_call() -> None:
    """In a fresh interpreter (as in a grading kernel) the stub's own ``import`` runs the module's and
    its classes' bodies under the guard: only the call of the library's function may be named."""
    code = textwrap.dedent("""
        import numpy as np
        from deviating.exercises import ForbiddenCall
        from deviating.exercises.ch06 import check_gini

        def gini_of(effects):
            from headlab.stats import gini
            return gini(np.clip(effects, 0, None))

        try:
            check_gini(gini_of)
        except ForbiddenCall as err:
            print(err)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "gini_of calls headlab.stats.inequality.gini," in proc.stdout, proc.stdout


def test_a_check_that_passes_a_model_calls_the_function_in_a_worker(tmp_path) -> None:
    """Chapter 5's check hands the student's function a HeadModel: it travels to the worker (as its
    module, tokenizer and name) and the function runs there, on the chapter's setup and its stub only."""
    from deviating.exercises import recording
    from deviating.exercises.ch05 import check_induction_after_ablation
    from deviating.exercises.notebook import setup_cell_index
    from deviating.exercises.remote import Limits, RemoteFunction

    path = next(p for p in chapter_notebooks() if p.name.startswith("05_"))
    chapter = nbformat.read(path, as_version=4)
    ex = next(e for e in find_exercises(chapter, path) if e.check_name == "check_induction_after_ablation")
    setup = chapter.cells[setup_cell_index(chapter)].source
    solution = "\n\n".join(chapter.cells[i].source for i in ex.solution_cells)
    for stub, passed in ((solution, 6), (chapter.cells[ex.stub].source, 0)):
        fn = RemoteFunction(ex.function, setup, stub, tmp_path, Limits(timeout=60, startup=120))
        try:
            with recording() as results:
                check_induction_after_ablation(fn)
        finally:
            fn.close()
        assert results[-1].n_passed == passed, results[-1].messages[:1]
    assert results[-1].status == "not implemented"


def test_a_check_that_wraps_the_function_still_reaches_the_worker(tmp_path) -> None:
    """The online-softmax check of chapter 2's appendix (02b_under_the_hood) wraps the student's
    function (one call per tile): the grader accepts its module, and each wrapped call goes to the
    worker with the check's forbidden modules."""
    from deviating.exercises import recording
    from deviating.exercises.grading import CHECK_MODULE_RE
    from deviating.exercises.fused import check_online_softmax_update
    from deviating.exercises.remote import Limits, RemoteFunction

    path = next(p for p in chapter_notebooks() if p.name.startswith("02b_"))
    chapter = nbformat.read(path, as_version=4)
    ex = next(e for e in find_exercises(chapter, path) if e.check_name == "check_online_softmax_update")
    assert CHECK_MODULE_RE.match(ex.check_module)
    solution = "\n\n".join(chapter.cells[i].source for i in ex.solution_cells)
    fn = RemoteFunction(ex.function, "import numpy as np", solution, tmp_path, Limits(timeout=30))
    try:
        with recording() as results:
            check_online_softmax_update(fn)
    finally:
        fn.close()
    assert results[-1].status == "passed", results[-1].messages[:1]
    assert fn.forbid == ("deviating.kernels", "headlab.kernels")
