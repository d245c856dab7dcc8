"""Every exercise of every chapter: its check rejects the stub and accepts the solution.

For each exercise (found by scripts/make_student.py's parser) the test runs, in
a fresh namespace, the chapter's setup cell (its imports), then the stub and the
check cell, which must raise ExerciseFailed saying the stub is not implemented;
then the solution and the check cell again, which must pass and print its
success line. So stub, solution and check must be self-contained given the setup
cell: that is the rule CONTRIBUTING.md states for authors.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, chapter_notebooks
from make_student import MalformedExercise, find_exercises, setup_cell_index

from headlab.exercises import ExerciseFailed


def _cases() -> list:
    cases = []
    for nb_path in chapter_notebooks():
        nb = nbformat.read(nb_path, as_version=4)
        try:
            exercises = find_exercises(nb, nb_path)
        except MalformedExercise as err:  # reported by test_student.py; keep collecting
            cases.append(pytest.param(nb_path, None, nb, id=f"{nb_path.stem}-malformed", marks=pytest.mark.skip(reason=str(err))))
            continue
        for ex in exercises:
            cases.append(pytest.param(nb_path, ex, nb, id=ex.label))
    return cases


def _run(nb: dict, index: int, namespace: dict, nb_path: Path) -> None:
    source = nb["cells"][index]["source"]
    code = compile(source, f"{nb_path.relative_to(ROOT)} [cell {index}]", "exec")
    exec(code, namespace)  # noqa: S102 (the book's own notebook code)


@pytest.mark.parametrize(("nb_path", "exercise", "nb"), _cases())
def test_check_rejects_stub_and_accepts_solution(nb_path: Path, exercise, nb, capsys) -> None:  # noqa: ANN001
    setup = setup_cell_index(nb)
    assert setup is not None
    namespace: dict = {"__name__": "__exercise__"}
    _run(nb, setup, namespace, nb_path)

    _run(nb, exercise.stub, namespace, nb_path)
    with pytest.raises(ExerciseFailed, match="not implemented yet") as failure:
        _run(nb, exercise.check, namespace, nb_path)
    assert exercise.function in str(failure.value), "the failure message should name the function"

    for index in exercise.solution_cells:
        _run(nb, index, namespace, nb_path)
    capsys.readouterr()
    try:
        _run(nb, exercise.check, namespace, nb_path)
    except ExerciseFailed as err:
        pytest.fail(f"{exercise.label}: the check rejects the notebook's own solution:\n{err}")
    printed = capsys.readouterr().out
    assert printed.strip().startswith("✓"), f"{exercise.label}: the check printed no success line: {printed!r}"


@pytest.mark.parametrize(("nb_path", "exercise", "nb"), _cases())
def test_checks_do_not_ship_solutions(nb_path: Path, exercise, nb) -> None:  # noqa: ANN001
    """The check module must not define (or import) the function the reader writes."""
    source = nb["cells"][exercise.check]["source"]
    modules = re.findall(r"from\s+(headlab\.exercises\.\w+)\s+import", source)
    assert modules, f"{exercise.label}: the check cell imports nothing from headlab.exercises.chNN"
    for name in modules:
        module = importlib.import_module(name)
        assert not hasattr(module, exercise.function), (
            f"{name} defines {exercise.function!r}, the function the reader writes: checks never ship solutions"
        )
