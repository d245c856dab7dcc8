"""The online-softmax exercise's check accepts a right update and rejects plausible wrong ones."""

from __future__ import annotations

import numpy as np
import pytest

from deviating.exercises._core import ExerciseFailed
from deviating.exercises.fused import check_online_softmax_update


def right(m, l, acc, scores, values):
    m_new = max(m, float(np.max(scores)))
    if m_new == -np.inf:  # nothing seen yet: nothing to add
        return m, l, acc
    alpha = np.exp(m - m_new)
    p = np.exp(scores - m_new)
    return m_new, alpha * l + p.sum(), alpha * acc + p @ values


def no_rescale_of_acc(m, l, acc, scores, values):
    m_new = max(m, float(np.max(scores)))
    if m_new == -np.inf:
        return m, l, acc
    p = np.exp(scores - m_new)
    return m_new, np.exp(m - m_new) * l + p.sum(), acc + p @ values


def inverted_rescale(m, l, acc, scores, values):
    m_new = max(m, float(np.max(scores)))
    if m_new == -np.inf:
        return m, l, acc
    alpha = np.exp(m_new - m) if np.isfinite(m) else 0.0
    p = np.exp(scores - m_new)
    return m_new, alpha * l + p.sum(), alpha * acc + p @ values


def max_of_the_tile_only(m, l, acc, scores, values):
    m_new = float(np.max(scores))  # forgets that an earlier tile may hold the max
    if m_new == -np.inf:
        return m, l, acc
    alpha = np.exp(m - m_new)
    p = np.exp(scores - m_new)
    return m_new, alpha * l + p.sum(), alpha * acc + p @ values


def no_max_subtracted(m, l, acc, scores, values):
    p = np.exp(scores)  # overflows for large scores
    return max(m, float(np.max(scores))), l + p.sum(), acc + p @ values


def nan_on_an_empty_tile(m, l, acc, scores, values):
    m_new = max(m, float(np.max(scores)))
    alpha = np.exp(m - m_new)  # -inf - -inf = nan when nothing has been seen
    p = np.exp(scores - m_new)
    return m_new, alpha * l + p.sum(), alpha * acc + p @ values


def stub(m, l, acc, scores, values):
    raise NotImplementedError


def test_right_update_passes(capsys):
    check_online_softmax_update(right)
    out = capsys.readouterr().out
    assert "passed all 8 known-answer checks" in out


@pytest.mark.parametrize("wrong, case", [
    (no_rescale_of_acc, "raises the max"),
    (inverted_rescale, "raises the max"),
    (max_of_the_tile_only, "does not raise the max"),
    (no_max_subtracted, "the first tile"),
    (nan_on_an_empty_tile, "fully masked tile"),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_plausible_wrong_updates_are_rejected(wrong, case):
    with pytest.raises(ExerciseFailed, match=case):
        check_online_softmax_update(wrong)


def test_stub_is_reported_as_not_implemented(capsys):
    check_online_softmax_update(stub)  # like every check: one line, no traceback, so Run All goes on
    assert "not implemented yet" in capsys.readouterr().out
