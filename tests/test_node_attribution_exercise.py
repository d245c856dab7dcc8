"""The node attribution patching exercise of chapter 5b (deviating.exercises.ch05b_attribution), beyond
what tests/test_exercises.py, test_wrong_solutions.py and test_grading.py check for every exercise
(the notebook's solution passes, the stub is not implemented, every wrong solution fails): each wrong
solution of tests/wrong_solutions/ch05b_attribution.py is told its mistake by name, on the fixed and on
drawn cases, and the library's own attribution patching is refused."""

from __future__ import annotations

import pytest
import torch

from deviating.exercises import ExerciseFailed, ForbiddenCall, NotImplementedYet
from deviating.exercises.ch05b_attribution import check_node_attribution
from deviating.exercises.drawn import drawing
from wrong_solutions.ch05b_attribution import CATALOGUE


@pytest.mark.parametrize("wrong", CATALOGUE["ex-05-node-attribution"], ids=lambda f: f.__name__)
def test_every_wrong_solution_is_rejected_with_its_mistake_named(wrong, capsys):
    torch.set_num_threads(1)
    with pytest.raises(ExerciseFailed) as failure:
        check_node_attribution(wrong)
    assert not isinstance(failure.value, (NotImplementedYet, ForbiddenCall))
    problem = next(line for line in str(failure.value).splitlines() if "problem:" in line)
    assert "entries are off" not in problem, problem  # the check names the mistake, not just a mismatch
    with drawing(5), pytest.raises(ExerciseFailed):
        check_node_attribution(wrong)
    capsys.readouterr()


def test_the_librarys_attribution_patching_is_refused():
    def uses_library(hm, clean, corrupted, end, io_id, s_id):
        from headlab.analysis.attribution import attribution_patch

        return attribution_patch(hm, clean, corrupted)

    with pytest.raises(ForbiddenCall):
        check_node_attribution(uses_library)
