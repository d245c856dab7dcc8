"""The new checks name the mistake a wrong answer makes, not only that it is wrong.

tests/test_wrong_solutions.py asserts that every wrong solution of the catalogue is rejected;
this file asserts, for the checks that compare an answer with the answers of common mistakes,
that the message a student reads says which mistake it is.
"""

from __future__ import annotations

import pytest

from wrong_solutions import ch03

from deviating.exercises import ExerciseFailed
from deviating.exercises.ch03 import check_offset_profile, check_previous_token_lift

NAMED = [
    (check_previous_token_lift, ch03.lift_no_baseline, "no baseline"),
    (check_previous_token_lift, ch03.lift_one_over_n, "one baseline for the whole sequence"),
    (check_previous_token_lift, ch03.lift_one_over_length, "one baseline for the whole sequence"),
    (check_previous_token_lift, ch03.lift_includes_first_query, "no previous token"),
    (check_previous_token_lift, ch03.lift_on_the_token_itself, "the query itself"),
    (check_previous_token_lift, ch03.lift_ignores_mask, "padding mask ignored"),
    (check_previous_token_lift, ch03.lift_mean_of_sequence_means, "mean of each sequence's mean"),
    (check_offset_profile, ch03.profile_counts_missing_keys, "no key at q - k"),
    (check_offset_profile, ch03.profile_forward_offsets, "keys after the query"),
    (check_offset_profile, ch03.profile_off_by_one, "shifted by one"),
    (check_offset_profile, ch03.profile_ignores_mask, "padding mask ignored"),
]


@pytest.mark.parametrize(("check", "wrong", "words"), [pytest.param(c, w, s, id=w.__name__) for c, w, s in NAMED])
def test_the_message_names_the_mistake(check, wrong, words, capsys) -> None:  # noqa: ANN001
    with pytest.raises(ExerciseFailed) as failure:
        check(wrong)
    capsys.readouterr()
    assert words in str(failure.value), str(failure.value)
