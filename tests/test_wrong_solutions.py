"""The catalogue of plausible wrong solutions: every one of them must fail its exercise's check.

For each exercise of the book, at least four wrong answers (issue 39) that students really write (wrong
scaling, wrong range, max for mean, ties, one layer, the first input only, mean for zero
ablation, no mask, no abs, an answer hard-coded from a message, the library's own function...),
each asserted to be rejected by the check, while the notebook's own solution passes
(tests/test_exercises.py). So a check cannot quietly weaken again. Each check also keeps at
least one case whose expected value it never prints.
"""

from __future__ import annotations

import importlib
import re

import nbformat
import pytest

from conftest import chapter_notebooks
from make_student import find_exercises

from deviating.exercises import ExerciseFailed, ForbiddenCall, NotImplementedYet, recording

import wrong_solutions

CATALOGUE: dict[str, list] = wrong_solutions.catalogue()


def _exercises() -> dict[str, tuple]:
    """label -> (check function, the stub's function name), from the chapters themselves."""
    found = {}
    for path in chapter_notebooks():
        nb = nbformat.read(path, as_version=4)
        for ex in find_exercises(nb, path):
            source = nb.cells[ex.check].source
            module = re.search(r"from\s+(deviating\.exercises\.\w+)\s+import", source).group(1)
            check = re.search(r"\b(check_\w+)\(", source.split("import", 1)[1].split("\n", 1)[1]).group(1)
            found[ex.label] = (getattr(importlib.import_module(module), check), ex.function)
    return found


EXERCISES = _exercises()


def test_every_exercise_has_a_catalogue_of_at_least_four() -> None:
    assert set(CATALOGUE) == set(EXERCISES), (
        f"exercises without a catalogue: {sorted(set(EXERCISES) - set(CATALOGUE))}; "
        f"catalogues of no exercise: {sorted(set(CATALOGUE) - set(EXERCISES))}")
    thin = {label: len(wrong) for label, wrong in CATALOGUE.items() if len(wrong) < 4}
    assert not thin, f"fewer than 4 wrong solutions: {thin}"


@pytest.mark.parametrize(("label", "wrong"), [pytest.param(label, fn, id=f"{label}-{fn.__name__}")
                                              for label, fns in CATALOGUE.items() for fn in fns])
def test_the_check_rejects_a_wrong_solution(label: str, wrong, capsys, record_property) -> None:  # noqa: ANN001
    check, function = EXERCISES[label]
    with pytest.raises(ExerciseFailed) as failure:
        check(wrong)
    assert not isinstance(failure.value, NotImplementedYet)
    first = str(failure.value).splitlines()[0]
    if wrong.__name__.endswith(("_library", "_kernel")):  # the library's own answer, called from the stub
        assert isinstance(failure.value, ForbiddenCall), first
    else:  # rejected for its answer, not because this catalogue's code crashed
        assert " raised " not in first and not isinstance(failure.value, ForbiddenCall), first
    capsys.readouterr()
    record_property("summary", f"wrong solutions: {label}: {len(CATALOGUE[label])} written, "
                               f"{len(CATALOGUE[label])} rejected")


@pytest.mark.parametrize("label", sorted(CATALOGUE))
def test_some_expected_value_is_never_printed(label: str, capsys) -> None:
    """Run every case with a wrong answer: at least one failure message must hide its expected value."""
    check, _ = EXERCISES[label]
    with recording() as results:
        check(lambda *args, **kwargs: None)
    capsys.readouterr()
    (result,) = results
    assert result.n_passed == 0, f"{label}: a function returning None passed {result.n_passed} cases"
    hidden = [m for m in result.messages if "(not shown" in m]
    assert hidden, f"{label}: every case prints its expected value; mark one Case(..., hidden=True)"
    assert len(hidden) < result.total, f"{label}: every case is hidden; a student needs instructive messages"
