"""Grading end to end: ``python -m deviating grade`` on a blank student edition, the full solutions,
a mixed submission and a broken one, each exercise in its own grading worker.

One small notebook is the fixture: four real exercises of the book (their task, stub, solution and
check cells, copied from the chapters), so the test starts 16 short workers, not whole chapters,
each inside the grader's sandbox (bubblewrap: the tests skip without it, and fail under CI).
Every call has a limit of TIMEOUT seconds, so the looping submission cannot stall the run.
The drawn cases (deviating.exercises.drawn) are tested here on the checks that draw them: the solutions
pass them on every seed, each wrong solution of tests/wrong_solutions scores the same on every seed,
and a table of the fixed cases' answers scores 0 on them.
The cheats a submission can try are in test_cheats.py.
"""

from __future__ import annotations

import copy
import functools
import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from cheats.isolation import sandbox_or_skip
from conftest import ROOT, chapter_notebooks
from make_student import find_exercises

from deviating.exercises.grading import gradescope_results, grade_notebook, write_csv
from deviating.exercises.student import student_notebook

pytestmark = pytest.mark.slow

LABELS = ["ex-00-softmax", "ex-06-gini", "ex-03-sink", "ex-09-redundant"]  # numpy only
POINTS = {"ex-00-softmax": 1.0, "ex-06-gini": 2.0, "ex-03-sink": 1.0, "ex-09-redundant": 1.0}
TIMEOUT = 4
SEED = 20261206  # the drawn cases of the fixture's run (a real run draws its seed from os.urandom)


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
    sandbox = sandbox_or_skip()
    grades = {name: grade_notebook(p, timeout=TIMEOUT, sandbox=sandbox, seed=SEED) for name, p in paths.items()}
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
    # the naive softmax overflows on 4 of the 8 drawn rows (only they count); the last-layer sink is right
    # on 4 of the 5 fixed inputs, and on none of the 3 drawn ones (their last layer leans to a decoy)
    assert (by["ex-00-softmax"].passed, by["ex-00-softmax"].total) == (4, 8)
    assert (by["ex-03-sink"].passed, by["ex-03-sink"].total) == (0, 3)
    assert _points(grade) == {"ex-00-softmax": 0.5, "ex-06-gini": 2.0, "ex-03-sink": 0.0, "ex-09-redundant": 0.0}
    assert grade.points == 2.5
    assert "wrong on case 11 of 16, a case drawn from the secret seed: log p plus about 1000" in \
        by["ex-00-softmax"].reason
    # the report says, per failed case (fixed and drawn), the input, the expected value and what came back
    failure = by["ex-00-softmax"].failures[0]
    assert "expected: [0.1, 0.2, 0.3, 0.4]" in failure and "got:      [nan, nan, nan, nan]" in failure
    assert len(by["ex-00-softmax"].failures) == 8 and len(by["ex-03-sink"].failures) == 1 + 3


def test_broken_submission_never_crashes_the_grader(graded) -> None:
    grade = graded["grades"]["broken"]
    by = {e.label: e for e in grade.exercises}
    assert grade.points == 0
    # the stub deleted, the library's softmax imported under its name in a cell that never runs
    assert "no function 'stable_softmax' is defined: the stub cell was deleted" in by["ex-00-softmax"].reason
    # the library's answer, imported by the stub, is not in the worker's view: the stub cell fails, and says why
    assert "ImportError at line 1 of the stub cell" in by["ex-06-gini"].reason, by["ex-06-gini"].reason
    assert "not importable while grading: " in by["ex-06-gini"].reason and "headlab.stats," in by["ex-06-gini"].reason
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
    assert [r["total"] for r in rows] == ["0", "5", "2.5", "0"]
    assert rows[2]["ex-03-sink"] == "0" and rows[2]["ex-06-gini"] == "2" and rows[2]["max"] == "5"
    results = gradescope_results(graded["grades"]["mixed"])
    assert results["score"] == 2.5
    assert [t["max_score"] for t in results["tests"]] == [POINTS[e.label] for e in graded["grades"]["mixed"].exercises]
    assert json.loads(json.dumps(results)) == results  # plain JSON


def test_the_cli_handles_a_file_that_is_not_a_notebook(graded, tmp_path, capsys) -> None:
    bad = tmp_path / "bad.ipynb"
    bad.write_text("this is not json")
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "deviating", "grade", str(bad), "--reference", str(graded["student"]),
                           "--gradescope", str(out), "--csv", str(tmp_path / "g.csv"), "--unsafe-no-isolation"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    assert results["score"] == 0 and "not a readable notebook" in results["output"]
    assert "graded WITHOUT operating-system isolation" in results["output"]  # the gradebook records it
    assert "graded WITHOUT operating-system isolation" in (tmp_path / "g.csv").read_text()
    assert len(results["tests"]) == 4
    from deviating.__main__ import main  # the argument errors in-process: the same entry point, no grading run

    assert main(["grade", str(bad), str(bad), "--gradescope", str(out)]) == 2
    assert "exactly one submission" in capsys.readouterr().err
    assert main(["grade", str(tmp_path / "missing.ipynb")]) == 2
    said = capsys.readouterr().err
    assert "missing.ipynb: no such file" in said and "Traceback" not in said, said


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


# ----------------------------------------------------------------------- the drawn cases (no worker needed)


@functools.lru_cache(maxsize=1)
def _book_exercises() -> dict:
    """label -> (check module, check name, the solution's source, the function's name), read once."""
    found = {}
    for path in chapter_notebooks():
        chapter = nbformat.read(path, as_version=4)
        for ex in find_exercises(chapter, path):
            source = "\n\n".join(chapter.cells[i].source for i in ex.solution_cells)
            found[ex.label] = (ex.check_module, ex.check_name, source, ex.function)
    return found


def _check_and_solution(label: str):  # noqa: ANN202
    """The check of exercise ``label`` and the book's solution of it, run in this process."""
    import importlib

    import numpy as np
    import torch

    module, name, source, function = _book_exercises()[label]
    namespace = {"np": np, "torch": torch, "__name__": "__main__"}  # what every chapter's setup imports
    exec(source, namespace)  # noqa: S102
    return getattr(importlib.import_module(module), name), namespace[function]


def _drawn_score(check, fn, seed: int) -> tuple[int, int]:  # noqa: ANN001
    """(drawn cases passed, drawn cases) of ``check`` on ``fn`` with the secret seed ``seed``."""
    import contextlib
    import io

    from deviating.exercises import recording
    from deviating.exercises.drawn import drawing

    with drawing(seed) as counts, recording() as results, contextlib.redirect_stdout(io.StringIO()):
        check(fn)
    if not counts:
        return 0, 0
    (n,), r = counts, results[-1]
    assert len(r.passed) == r.total
    return int(sum(r.passed[-n:])), n


def _all_labels() -> list[str]:
    return list(_book_exercises())


SEEDS = [1, 977, 2**40 + 3]  # the solution's seeds; a wrong solution's grade is compared on the first two


@pytest.mark.parametrize("label", _all_labels())
def test_the_solution_passes_the_drawn_cases_on_every_seed_and_each_wrong_one_scores_the_same(label) -> None:
    """Every check draws cases from the secret seed (issue 40): the book's solution passes all of them on
    three seeds, and each plausible wrong solution gets one grade on two seeds, never full marks (two
    seeds keep the test's cost at about eleven check runs per exercise: 80 exercises run here)."""
    import wrong_solutions

    check, solution = _check_and_solution(label)
    for seed in SEEDS:
        passed, n = _drawn_score(check, solution, seed)
        assert n > 0, f"{label}: its check draws no case from the secret seed"
        assert passed == n, (seed, passed, n)
    wrong = wrong_solutions.catalogue()[label]
    assert len(wrong) >= 4
    for fn in wrong:
        scores = {_drawn_score(check, fn, seed) for seed in SEEDS[:2]}
        assert len(scores) == 1, (fn.__name__, scores)  # the same grade on every seed
        ((passed, n),) = scores
        assert passed < n, fn.__name__  # and never full marks


def test_other_seeds_draw_other_cases_and_students_see_none() -> None:
    """Two seeds give different inputs; outside grading a check runs its fixed cases only."""
    import numpy as np

    from deviating.exercises.ch01 import _drawn_one_query_cases
    from deviating.exercises.drawn import drawing, drawn

    assert drawn(_drawn_one_query_cases) == []  # a student's own run: no drawn case at all
    with drawing(1):
        a = drawn(_drawn_one_query_cases)
    with drawing(2):
        b = drawn(_drawn_one_query_cases)
    with drawing(1):
        again = drawn(_drawn_one_query_cases)
    assert len(a) == len(b) == 5
    assert not np.allclose(a[1].args[1].ravel()[:4], b[1].args[1].ravel()[:4])
    assert all(np.array_equal(x, y) for c, d in zip(a, again) for x, y in zip(c.args, d.args))
    with pytest.raises(ValueError, match="non-negative int"):
        with drawing(-1):
            pass


@pytest.mark.parametrize("label,cases", [
    ("ex-00-softmax", "deviating.exercises.ch00:_softmax_cases"),
    ("ex-01-one-query", "deviating.exercises.ch01:_one_query_cases"),
    ("ex-01-causal", "deviating.exercises.ch01:_causal_cases"),
    ("ex-01-name-heads", "deviating.exercises.ch01:_name_cases"),
])
def test_a_table_of_the_fixed_answers_scores_zero_on_the_drawn_cases(label: str, cases: str) -> None:
    """The cheat of a student who reads the checks at home: a stub that looks its input up in a table
    of the fixed cases' answers. It passes every fixed case, and none of the drawn ones."""
    import contextlib
    import importlib
    import io

    import numpy as np

    from deviating.exercises import recording
    from deviating.exercises.drawn import drawing

    module, name = cases.split(":")
    table = [(c.args, c.expected) for c in getattr(importlib.import_module(module), name)()]

    def lookup(*args):  # noqa: ANN002, ANN202
        for known, answer in table:
            if len(known) == len(args) and all(np.shape(a) == np.shape(k) and np.allclose(a, k) for a, k in zip(args, known)):
                return answer
        return np.zeros(np.shape(args[-1])[-1:])

    check, _ = _check_and_solution(label)
    with drawing(99) as counts, recording() as results, contextlib.redirect_stdout(io.StringIO()):
        check(lookup)
    (n,), r = counts, results[-1]
    assert all(r.passed[:-n]) and not any(r.passed[-n:]), r.passed


def test_the_grade_counts_only_the_drawn_cases(graded) -> None:
    """The naive softmax passes 4 of the 8 fixed cases and 4 of the 8 drawn ones: 4 of 8 is the drawn count."""
    (e,) = [e for e in graded["grades"]["mixed"].exercises if e.label == "ex-00-softmax"]
    assert e.total == 8 and sum("a case drawn from the secret seed" in f for f in e.failures) == 4


# ----------------------------------------------------------------------- the grader's own hygiene


def test_a_symlinked_or_special_hand_in_is_refused_with_its_reason(graded, tmp_path) -> None:
    import os

    link = tmp_path / "link.ipynb"
    link.symlink_to(graded["paths"]["solutions"])  # the book's notebook, behind a link: 8 of 8 if followed
    fifo = tmp_path / "fifo.ipynb"
    os.mkfifo(fifo)
    for path, why in ((link, "refused: the submission is a symbolic link"), (fifo, "not a regular file")):
        grade = grade_notebook(path, reference=graded["student"], unsafe=True, seed=SEED)
        assert grade.points == 0 and len(grade.exercises) == 4
        assert any(why in note for note in grade.notes), grade.notes
        assert all(why in e.reason for e in grade.exercises)


def test_the_gradebook_is_written_atomically(graded, tmp_path) -> None:
    import os

    from deviating.exercises.gradebook import write_atomically

    target = tmp_path / "grades.csv"
    target.write_text("the old gradebook\n")

    def half_then_crash(fh):  # noqa: ANN001, ANN202
        fh.write("alice,8")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomically(target, half_then_crash)
    assert target.read_text() == "the old gradebook\n" and [p.name for p in tmp_path.iterdir()] == ["grades.csv"]
    write_csv(list(graded["grades"].values()), target)
    assert target.read_text().startswith("submission,") and [p.name for p in tmp_path.iterdir()] == ["grades.csv"]
    fresh = tmp_path / "fresh.csv"
    write_csv(list(graded["grades"].values()), fresh)  # a new gradebook: the permissions open() would give
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask


def test_the_cli_names_a_bad_reference_and_refuses_to_grade_without_bwrap(graded, tmp_path, capsys,
                                                                          monkeypatch) -> None:
    bad = tmp_path / "handout.ipynb"
    bad.write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "deviating", "grade", str(graded["student"]), "--reference", str(bad),
                           "--unsafe-no-isolation"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and f"--reference {bad}: not a readable notebook" in proc.stderr, proc.stderr
    from deviating.__main__ import main  # the same entry point in-process: neither case starts a grading run

    from deviating.exercises.sandbox import find_bwrap

    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on the PATH
    find_bwrap.cache_clear()  # it remembers the bwrap it found, once per process
    try:
        assert main(["grade", str(graded["student"])]) == 2
    finally:
        monkeypatch.undo()
        find_bwrap.cache_clear()
    said = capsys.readouterr().err
    assert "refusing to grade: bubblewrap (bwrap) is not installed" in said and "--unsafe-no-isolation" in said, said
    assert main(["grade", str(graded["student"]), "--seed", "-3", "--unsafe-no-isolation"]) == 2
    said = capsys.readouterr().err
    assert "--seed must be a non-negative integer, got -3" in said and "Traceback" not in said, said


@pytest.mark.parametrize("stub,passes", [
    ("def f(model, x):\n    model.register_forward_pre_hook(lambda m, a: None)\n    return model(x)", False),
    ("def f(model, x):\n    h = model.register_forward_hook(lambda m, a, o: o * 0)\n    try:\n"
     "        return model(x)\n    finally:\n        h.remove()", True),
    ("def f(model, x):\n    import torch\n    torch.nn.modules.module.register_module_forward_hook(\n"
     "        lambda m, a, o: None)\n    return model(x)", False),
])
def test_a_hook_left_on_the_model_fails_in_the_grading_worker(tmp_path, stub: str, passes: bool) -> None:
    """Issue 39: a task that says to remove its hooks is graded on it in the worker too, where the
    check cannot see the worker's copy of the model: the worker counts the hooks on the arguments'
    modules (and torch's global ones) before and after each call."""
    import torch

    from deviating.exercises.remote import Limits, RemoteFunction, WorkerFailed

    fn = RemoteFunction("f", "import torch", stub, tmp_path, Limits(timeout=60, startup=120))
    try:
        model, x = torch.nn.Linear(3, 2), torch.ones(1, 3)
        if passes:
            assert fn(model, x).shape == (1, 2)
            assert not model._forward_hooks  # noqa: SLF001 (the grader's copy: untouched either way)
        else:
            with pytest.raises(WorkerFailed, match=r"left 1 hook\(s\) on the model it was given: remove each hook"):
                fn(model, x)
    finally:
        fn.close()


def test_the_grader_accepts_the_check_of_every_exercise_of_the_book() -> None:
    """A check module split for length (ch07_more, ch05_patching) is still one the grader will run, and a
    module outside the book's exercises is not."""
    from deviating.exercises.grading import _check_of

    for label, (module, name, _, _) in _book_exercises().items():
        assert callable(_check_of({"check_module": module, "check": name})), label
    for module in ("deviating.exercises.grading", "deviating.exercises.ch07_more.x", "os", "deviating.exercises.sandbox"):
        with pytest.raises(ValueError, match="not one of the book's"):
            _check_of({"check_module": module, "check": "check_x"})
