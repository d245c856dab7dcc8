"""Chapter 5b's exercise checks (deviating.exercises.ch05b): each passes the solution, reports a stub as
not implemented, and rejects every plausible wrong solution of tests/wrong_solutions/ch05b.py.

Until the chapter notebook lands, the solutions are tests/ioi_solutions.py; then this file's job
passes to tests/test_exercises.py and tests/test_wrong_solutions.py (register ch05b there)."""

from __future__ import annotations

import pytest
import torch

import ioi_solutions as solutions
from deviating.exercises import ExerciseFailed, ForbiddenCall, NotImplementedYet
from deviating.exercises import ch05b, ch05b_more
from wrong_solutions.ch05b import CATALOGUE

CHECKS = {
    "ex-05-ioi-metric": ("check_ioi_logit_diff", "ioi_logit_diff"),
    "ex-05-abc-twins": ("check_abc_twins", "abc_twins"),
    "ex-05-attention-between": ("check_attention_between", "attention_between"),
    "ex-05-ioi-dla": ("check_ioi_head_dla", "ioi_head_dla"),
    "ex-05-path-patch-query": ("check_path_patch_query", "path_patch_query"),
    "ex-05-backup": ("check_backup_drop", "backup_drop"),
    "ex-05-faithfulness": ("check_circuit_faithfulness", "circuit_faithfulness"),
}


def _check(label):
    name = CHECKS[label][0]
    return getattr(ch05b, name, None) or getattr(ch05b_more, name)


def test_every_exercise_has_at_least_four_wrong_solutions():
    assert set(CATALOGUE) == set(CHECKS)
    assert all(len(v) >= 4 for v in CATALOGUE.values())


@pytest.mark.parametrize("label", sorted(CHECKS))
def test_the_solution_passes_and_a_stub_is_not_implemented(label, capsys):
    torch.set_num_threads(1)
    check, name = (_check(label), CHECKS[label][1])
    check(getattr(solutions, name))
    assert "✓" in capsys.readouterr().out

    def stub(*args, **kwargs):
        raise NotImplementedError

    stub.__name__ = name
    check(stub)  # prints one line and returns
    assert "not implemented" in capsys.readouterr().out


@pytest.mark.parametrize(("label", "wrong"), [pytest.param(label, fn, id=f"{label}-{fn.__name__}")
                                              for label, fns in CATALOGUE.items() for fn in fns])
def test_the_check_rejects_a_wrong_solution(label, wrong, capsys):
    torch.set_num_threads(1)
    with pytest.raises(ExerciseFailed) as failure:
        _check(label)(wrong)
    assert not isinstance(failure.value, (NotImplementedYet, ForbiddenCall))
    assert " raised " not in str(failure.value).splitlines()[0]
    capsys.readouterr()


def test_the_checks_do_not_define_the_functions_the_reader_writes():
    for _, name in CHECKS.values():
        assert not hasattr(ch05b, name) and not hasattr(ch05b_more, name)


def test_calling_the_librarys_analysis_is_refused():
    from deviating.analysis.ioi import attention_scores  # noqa: F401  (imported: the check refuses its use)

    def uses_library(patterns, query_pos, key_pos):
        from deviating.analysis import ioi

        ioi.effect_fraction(torch.zeros(2, 1), torch.ones(2), torch.zeros(2))
        return patterns[:, :, :, 0, 0].mean(0)

    with pytest.raises(ForbiddenCall):
        ch05b.check_attention_between(uses_library)
