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
import numpy as np
import pytest

from conftest import ROOT, chapter_notebooks
from make_student import MalformedExercise, find_exercises, setup_cell_index

from deviating.exercises import ExerciseFailed


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


@pytest.fixture(autouse=True)
def _restore_torch_state():
    """A chapter's setup cell may change process-wide torch state (grad mode, threads, seeds);
    restore it so that the tests after this one see what they would see alone."""
    import torch

    grad, threads, dtype = torch.is_grad_enabled(), torch.get_num_threads(), torch.get_default_dtype()
    rng = torch.get_rng_state()
    yield
    torch.set_grad_enabled(grad)
    torch.set_num_threads(threads)
    torch.set_default_dtype(dtype)
    torch.set_rng_state(rng)


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
    capsys.readouterr()
    _run(nb, exercise.check, namespace, nb_path)  # a stub is unfinished, not wrong: no exception
    printed = capsys.readouterr().out.strip()
    assert printed.startswith(f"✗ {exercise.function} is not implemented yet"), printed
    assert len(printed.splitlines()) == 1, f"a stub's check should print one line, got:\n{printed}"

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
    modules = re.findall(r"from\s+(deviating\.exercises\.\w+)\s+import", source)
    assert modules, f"{exercise.label}: the check cell imports nothing from deviating.exercises.chNN"
    for name in modules:
        module = importlib.import_module(name)
        assert not hasattr(module, exercise.function), (
            f"{name} defines {exercise.function!r}, the function the reader writes: checks never ship solutions"
        )


# --------------------------------------------------------------------------- the check machinery


def _softmax_check():
    from deviating.exercises.ch00 import check_stable_softmax

    return check_stable_softmax


def _good_softmax(scores):
    import numpy as np

    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_wrong_answer_names_case_expected_and_got() -> None:
    import numpy as np

    def global_max_softmax(scores):  # a real mistake: one max for the whole batch
        e = np.exp(scores - scores.max())
        with np.errstate(invalid="ignore"):  # 0/0 on the underflowing row is the point
            return e / e.sum(axis=-1, keepdims=True)

    with pytest.raises(ExerciseFailed) as failure:
        _softmax_check()(global_max_softmax)
    message = str(failure.value)
    assert "case 6 of 8" in message and "very different scales" in message
    assert "expected: [[0.25, 0.75]," in message and "got:" in message and "nan" in message
    assert "hint:" in message and "axis=-1" in message


def test_missing_return_wrong_shape_and_crash_are_explained() -> None:
    import numpy as np

    def no_return(scores):
        np.exp(scores)

    def flattened(scores):
        return _good_softmax(scores).ravel()

    def crashes(scores):
        raise ValueError("boom")

    cases = [(no_return, "forget to `return`"), (flattened, "wrong shape"), (crashes, "raised ValueError on")]
    for fn, words in cases:
        with pytest.raises(ExerciseFailed, match=re.escape(words)):
            _softmax_check()(fn)
    with pytest.raises(ExerciseFailed, match="expects a function"):
        _softmax_check()(np.zeros(3))


def test_tensor_like_answers_are_accepted(capsys) -> None:  # noqa: ANN001
    class FakeTensor:  # what a torch tensor offers, without importing torch
        def __init__(self, array):
            self.array = array

        def detach(self):
            return self

        def cpu(self):
            return self

        def numpy(self):
            return self.array

    _softmax_check()(lambda scores: FakeTensor(_good_softmax(scores)))
    assert capsys.readouterr().out.startswith("✓ <lambda> passed all 8 known-answer checks.")


def test_run_cases_needs_cases() -> None:
    from deviating.exercises import run_cases

    with pytest.raises(ValueError, match="at least one Case"):
        run_cases(_good_softmax, [])


def test_compare_number_accepts_one_close_number_and_explains_the_rest() -> None:
    from deviating.exercises import compare_number

    assert compare_number(0.5, 0.5) is None
    assert compare_number(np.array([0.5 + 1e-8]), 0.5) is None  # a 1-element array is one number
    assert "forget to `return`" in compare_number(None, 0.5)
    assert "shape (2,)" in compare_number([0.5, 0.5], 0.5)
    assert "finite" in compare_number(float("nan"), 0.5)
    assert compare_number(0.6, 0.5) == "expected 0.5, got 0.6"
    assert compare_number(0.50005, 0.5, atol=1e-4, rtol=0) is None
    assert compare_number(0.5002, 0.5, atol=1e-4, rtol=0) is not None


# --------------------------------------------------------------------------- a class, not only a reader


def test_a_stub_prints_one_line_and_a_wrong_answer_renders_as_its_message(capsys) -> None:
    def stub(scores):
        raise NotImplementedError

    _softmax_check()(stub)  # no exception: Run All goes on
    assert capsys.readouterr().out.startswith("✗ stub is not implemented yet")

    def crashes(scores):
        return scores.no_such_attribute

    with pytest.raises(ExerciseFailed) as failure:
        _softmax_check()(crashes)
    rendered = failure.value._render_traceback_()  # what IPython shows instead of a traceback
    assert "raised AttributeError" in rendered[1]
    assert any("where:" in line and "crashes" in line for line in rendered)
    assert not any("_core.py" in line for line in rendered), "the check's own frames must not show"


def test_a_hidden_case_never_prints_its_expected_value() -> None:
    from deviating.exercises import Case, run_cases

    secret = np.array([0.123456, 0.876544])
    with pytest.raises(ExerciseFailed) as failure:
        run_cases(lambda x: x, [Case("a secret", args=(np.zeros(2),), expected=secret, hidden=True)])
    assert "0.1235" not in str(failure.value) and "0.123456" not in str(failure.value)
    assert "(not shown" in str(failure.value)


def test_recording_runs_every_case_and_counts_them(capsys) -> None:
    from deviating.exercises import recording

    def no_stable(scores):  # right on ordinary rows, NaN on the extreme ones
        e = np.exp(np.asarray(scores, dtype=float))
        with np.errstate(invalid="ignore", over="ignore"):
            return e / e.sum(axis=-1, keepdims=True)

    with recording() as results:
        _softmax_check()(no_stable)
        _softmax_check()(_good_softmax)
    capsys.readouterr()
    partial, full = results
    assert (partial.n_passed, partial.total, partial.status) == (4, 8, "failed")
    assert partial.passed == [True, True, False, False, True, False, False, True]
    assert (full.n_passed, full.status) == (8, "passed")


def test_calling_the_librarys_answer_fails_with_the_reason() -> None:
    from deviating.exercises import ForbiddenCall
    from deviating.exercises.ch06 import check_gini

    def gini_of(effects):
        from headlab.stats import gini

        return gini(np.clip(effects, 0, None))

    with pytest.raises(ForbiddenCall, match="headlab.stats.inequality.gini"):
        check_gini(gini_of)
    from headlab.stats import gini

    with pytest.raises(ForbiddenCall, match="the book's own function"):
        check_gini(gini)  # a skipped stub, with the library's name in scope


def test_summary_lists_each_exercise(capsys) -> None:
    from deviating.exercises import summary
    from deviating.exercises._core import _RESULTS

    _RESULTS.clear()

    def unfinished(scores):
        raise NotImplementedError

    _softmax_check()(unfinished)
    _softmax_check()(_good_softmax)
    capsys.readouterr()
    summary()
    out = capsys.readouterr().out
    assert "1 of 2 exercises checked in this session pass." in out
    assert "✗ unfinished: not implemented yet" in out and "✓ _good_softmax" in out
