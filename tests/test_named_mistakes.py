"""The new checks name the mistake a wrong answer makes, not only that it is wrong.

tests/test_wrong_solutions.py asserts that every wrong solution of the catalogue is rejected;
this file asserts, for the checks that compare an answer with the answers of common mistakes,
that the message a student reads says which mistake it is.
"""

from __future__ import annotations

import pytest

from wrong_solutions import ch03, ch04, ch06, ch08

from deviating.exercises import ExerciseFailed
from deviating.exercises.ch03 import check_offset_profile, check_previous_token_lift
from deviating.exercises.ch04 import check_nearest_candidate_accuracy
from deviating.exercises.ch06 import check_resample_ablation
from deviating.exercises.ch08 import check_sae_step

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
    (check_nearest_candidate_accuracy, ch04.candidate_either_direction, "either direction"),
    (check_nearest_candidate_accuracy, ch04.candidate_either_ties_later, "either direction"),
    (check_nearest_candidate_accuracy, ch04.candidate_counts_the_query, "own position"),
    (check_nearest_candidate_accuracy, ch04.candidate_farthest_earlier, "farthest"),
    (check_nearest_candidate_accuracy, ch04.candidate_assumes_sorted, "not sorted"),
    (check_nearest_candidate_accuracy, ch04.candidate_skips_empty, "left out"),
    (check_nearest_candidate_accuracy, ch04.candidate_over_candidates, "number of candidates"),
    (check_resample_ablation, ch06.resample_mean, "mean ablation"),
    (check_resample_ablation, ch06.resample_other_head, "other head"),
    (check_resample_ablation, ch06.resample_other_position, "another position"),
    (check_resample_ablation, ch06.resample_first_position, "first position"),
    (check_resample_ablation, ch06.resample_own_batch, "z's own outputs"),
    (check_resample_ablation, ch06.resample_in_place, "modified its input in place"),
    (check_sae_step, ch08.sae_no_relu, "no ReLU"),
    (check_sae_step, ch08.sae_l1_on_weights, "penalty on the weights"),
    (check_sae_step, ch08.sae_mse_loss_default, "averaged over every entry"),
    (check_sae_step, ch08.sae_sum_over_tokens, "summed over tokens"),
    (check_sae_step, ch08.sae_gradient_ascent, "a step up the gradient"),
    (check_sae_step, ch08.sae_decoder_not_normalised, "left unnormalised"),
    (check_sae_step, ch08.sae_decoder_columns_normalised, "columns of W_dec"),
    (check_sae_step, ch08.sae_loss_after_step, "loss after the step"),
]


@pytest.mark.parametrize(("check", "wrong", "words"), [pytest.param(c, w, s, id=w.__name__) for c, w, s in NAMED])
def test_the_message_names_the_mistake(check, wrong, words, capsys) -> None:  # noqa: ANN001
    with pytest.raises(ExerciseFailed) as failure:
        check(wrong)
    capsys.readouterr()
    assert words in str(failure.value), str(failure.value)


def test_the_sae_step_answers_equal_autograd() -> None:
    """The check's expected values come from gradients derived by hand; torch's autograd agrees."""
    import torch

    from deviating.exercises.ch08 import _sae_inputs, _sae_step_answer

    W_enc, b_enc, W_dec, b_dec, x, l1, lr = _sae_inputs(5, 12, 3, 7, 0.07, 0.3)
    params = [p.clone().requires_grad_(True) for p in (W_enc, b_enc, W_dec, b_dec)]
    f = torch.relu(x @ params[0] + params[1])
    loss = (x - f @ params[2] - params[3]).pow(2).sum(1).mean() + l1 * f.sum(1).mean()
    loss.backward()
    new = [(p - lr * p.grad).detach() for p in params]
    new[2] = new[2] / new[2].norm(dim=1, keepdim=True)
    answer = _sae_step_answer(W_enc, b_enc, W_dec, b_dec, x, l1, lr)
    for mine, theirs in zip(answer[:4], new):
        assert torch.allclose(torch.as_tensor(mine), theirs, atol=1e-12)
    assert abs(answer[4] - loss.item()) < 1e-12
