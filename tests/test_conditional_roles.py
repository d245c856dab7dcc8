"""headlab.analysis.conditional_roles: the subject head and the fixed-offset baseline, chosen on
one half of the windows, on hand-built pointing tables with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from headlab.analysis.conditional_roles import PointingTable, offset_baseline, subject_head


def _table():
    # 6 items, 1 layer x 3 heads; items 0-3 are "pp" (separated), 4-5 "simple"
    points = np.zeros((6, 1, 3), dtype=bool)
    points[:4, 0, 1] = True  # head 1 finds every pp subject
    points[:2, 0, 2] = True  # head 2 finds half of them ...
    points[4:, 0, 2] = True  # ... and every simple one
    return PointingTable(points, np.zeros_like(points), np.array([-3, -3, -2, -3, 0, 0]),
                         np.array(["pp", "pp+attr", "pp", "pp", "simple", "simple"]), np.array([0, 0, 1, 1, 2, 2]))


def test_the_subject_head_is_chosen_on_separated_constructions_of_the_selection_half():
    t = _table()
    everything = np.ones(6, dtype=bool)
    assert subject_head(t, everything) == (0, 1)  # simple sentences do not count
    assert subject_head(t, everything, constructions=("simple",)) == (0, 2)
    with pytest.raises(ValueError, match="no selection items"):
        subject_head(t, np.zeros(6, dtype=bool))


def test_ties_go_to_the_lower_head():
    t = _table()
    only_first = np.array([True, True, False, False, False, False])  # heads 1 and 2 both right on both
    assert subject_head(t, only_first) == (0, 1)


def test_the_offset_is_the_most_common_on_the_selection_half_ties_to_the_nearer():
    t = _table()
    off, right = offset_baseline(t, np.ones(6, dtype=bool), "pp")
    assert off == -3 and right.tolist() == [True, True, False, True, False, False]
    tie = PointingTable(t.points[:2], t.on_antecedent[:2], np.array([-4, -1]), np.array(["pp", "pp"]), np.zeros(2))
    assert offset_baseline(tie, np.ones(2, dtype=bool), "pp")[0] == -1
