"""scripts/make_student.py: the student edition, and the errors for malformed exercises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTERS, ROOT, chapter_notebooks
from make_student import MalformedExercise, find_exercises

SCRIPT = ROOT / "scripts" / "make_student.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True)


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("student")
    proc = _run("--out", str(out))
    assert proc.returncode == 0, f"make_student.py failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_real_chapters_are_well_formed() -> None:
    problems = []
    for nb_path in chapter_notebooks():
        try:
            find_exercises(nbformat.read(nb_path, as_version=4), nb_path)
        except MalformedExercise as err:
            problems.append(str(err))
    assert not problems, "malformed exercises:\n" + "\n".join(problems)


@pytest.mark.parametrize("nb_path", chapter_notebooks(), ids=lambda p: p.stem)
def test_student_edition(nb_path: Path, student_dir: Path) -> None:
    original = nbformat.read(nb_path, as_version=4)
    exercises = find_exercises(original, nb_path)
    target = student_dir / nb_path.relative_to(CHAPTERS)
    assert target.is_file(), f"no student edition at {target} (chapter folders must be preserved)"
    student = nbformat.read(target, as_version=4)
    text = json.dumps(student)

    # no solution survives: no tag, no marker, no solution code
    assert not [c for c in student.cells if "solution" in c.metadata.get("tags", [])]
    assert "solution-start" not in text and "solution-end" not in text
    student_lines = {line.strip() for cell in student.cells for line in cell.source.splitlines()}
    for ex in exercises:
        stub_lines = {line.strip() for line in original.cells[ex.stub].source.splitlines()}
        for index in ex.solution_cells:
            for line in original.cells[index].source.splitlines():
                line = line.strip()
                if len(line) >= 16 and line not in stub_lines:  # lines of the solution's own
                    assert line not in student_lines, f"{ex.label}: solution line {line!r} survived"

    # every exercise keeps its task, stub and check, in order
    # (by cell index: identical sources, such as two exercises' end markers, must not collide)
    dropped = {i for ex in exercises for i in range(ex.solution_start, ex.solution_end + 1)}
    kept_index = {i: i - sum(d < i for d in dropped) for i in range(len(original.cells)) if i not in dropped}
    for ex in exercises:
        parts = (ex.start, ex.stub, ex.end, ex.check)
        positions = [kept_index[i] for i in parts]
        assert positions == sorted(positions), f"{ex.label}: task, stub, end and check are out of order"
        for i in parts:
            assert student.cells[kept_index[i]].source == original.cells[i].source, f"{ex.label}: cell {i} changed"
    kept = len(original.cells) - sum(ex.solution_end - ex.solution_start + 1 for ex in exercises)
    summary = 1 if exercises else 0  # a last cell lists the unfinished exercises after Run All
    assert len(student.cells) == kept + summary, "only the solution blocks may be removed"
    if exercises:
        assert student.cells[-1].metadata["tags"] == ["exercise-summary"]
        assert "summary()" in student.cells[-1].source
        recorded = student.metadata["headlab"]["exercises"]
        assert [e["label"] for e in recorded] == [ex.label for ex in exercises]
        assert all(e["check"].startswith("check_") and e["points"] in (1.0, 2.0, 3.0) for e in recorded)

    # outputs and widget state cleared
    for cell in student.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert "widgets" not in student.metadata
    assert student.metadata["headlab"]["edition"] == "student"


# --------------------------------------------------------------------------- malformed exercises


def _md(text: str) -> dict:
    return nbformat.v4.new_markdown_cell(text)


def _code(text: str, *tags: str) -> dict:
    cell = nbformat.v4.new_code_cell(text)
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def _good_cells() -> list:
    """A well-formed exercise, cell by cell (setup cell first)."""
    return [
        _code("import numpy as np"),  # 0: setup
        _md("```{exercise-start} Double it ★☆☆\n:label: ex-07-double\n```\nReturn twice x."),  # 1
        _code("def double(x: float) -> float:\n    \"\"\"2x.\"\"\"\n    raise NotImplementedError", "exercise-stub"),  # 2
        _md("```{exercise-end}\n```"),  # 3
        _md("```{solution-start} ex-07-double\n:class: dropdown\n```"),  # 4
        _code("def double(x: float) -> float:\n    return 2 * x", "solution"),  # 5
        _md("```{solution-end}\n```"),  # 6
        _code("from headlab.exercises.ch07 import check_double\n\ncheck_double(double)", "exercise-check"),  # 7
    ]


def _write(tmp_path: Path, cells: list) -> Path:
    folder = tmp_path / "07_fixture"
    folder.mkdir(exist_ok=True)
    path = folder / "07_fixture.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nbformat.write(nb, path)
    return path


def test_well_formed_fixture_passes(tmp_path: Path) -> None:
    path = _write(tmp_path, _good_cells())
    proc = _run("--out", str(tmp_path / "out"), str(path))
    assert proc.returncode == 0, proc.stderr
    student = nbformat.read(tmp_path / "out" / "07_fixture.ipynb", as_version=4)
    assert [c.metadata.get("tags", []) for c in student.cells if c.cell_type == "code"] == [
        [], ["exercise-stub"], ["exercise-check"], ["exercise-summary"]
    ]
    assert student.metadata["headlab"]["exercises"] == [{
        "label": "ex-07-double", "title": "Double it ★☆☆", "function": "double",
        "check_module": "headlab.exercises.ch07", "check": "check_double", "points": 1.0}]


def _drop(cells: list, *indices: int) -> list:
    return [c for i, c in enumerate(cells) if i not in indices]


MALFORMED = {
    # name: (cells, cell index named in the error, words the error must contain)
    "solution without a stub": (lambda c: _drop(c, 2), 1, "has no stub"),
    "stub without a check": (lambda c: _drop(c, 7), 1, "has no check"),
    "solution label matches no exercise": (
        lambda c: c[:4] + [_md("```{solution-start} ex-07-triple\n:class: dropdown\n```")] + c[5:], 4, "matches no exercise"
    ),
    "unbalanced: exercise never closed": (lambda c: _drop(c, 3), 1, "never closed"),
    "unbalanced: solution never closed": (lambda c: _drop(c, 6), 4, "never closed"),
    "unbalanced: end without start": (lambda c: c + [_md("```{solution-end}\n```")], 8, "without a {solution-start}"),
    "solution cell outside a solution block": (lambda c: c + [_code("x = 1", "solution")], 8, "outside any"),
    "solution not collapsed": (
        lambda c: c[:4] + [_md("```{solution-start} ex-07-double\n```")] + c[5:], 4, ":class: dropdown"
    ),
    "untagged code in a solution": (lambda c: c[:6] + [_code("y = 2")] + c[6:], 6, "untagged code cell"),
    "title without difficulty": (
        lambda c: c[:1] + [_md("```{exercise-start} Double it\n:label: ex-07-double\n```")] + c[2:], 1, "difficulty"
    ),
    "check calls another function": (
        lambda c: c[:7] + [_code("from headlab.exercises.ch07 import check_double\ncheck_double(triple)", "exercise-check")],
        7, "check_<name>(double)",
    ),
    "one-block solution directive": (
        lambda c: c + [_md("```{solution} ex-07-double\nx\n```")], 8, "gated",
    ),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_exercise_fails_naming_notebook_and_cell(name: str, tmp_path: Path) -> None:
    make, cell, words = MALFORMED[name]
    path = _write(tmp_path, make(_good_cells()))
    out = tmp_path / "out"
    proc = _run("--out", str(out), str(path))
    assert proc.returncode != 0, f"{name}: make_student.py accepted a malformed exercise"
    assert str(path) in proc.stderr or path.name in proc.stderr, proc.stderr
    assert f"cell {cell}: " in proc.stderr, f"{name}: expected cell {cell} to be named:\n{proc.stderr}"
    assert words in proc.stderr, f"{name}: expected {words!r} in:\n{proc.stderr}"
    assert not out.exists(), "nothing may be written when an exercise is malformed"


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, _good_cells())
    proc = _run("--check", "--out", str(tmp_path / "out"), str(path))
    assert proc.returncode == 0 and "1 exercises" in proc.stdout
    assert not (tmp_path / "out").exists()
