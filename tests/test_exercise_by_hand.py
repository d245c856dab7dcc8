"""The by-hand forward pass behind the checks of patching, attribution, the logit lens and pruning
(``deviating.exercises.by_hand``), and the messages those checks give each wrong solution.

The checks' expected values come from :func:`run_by_hand`, so it must equal the model: its
logits, its ``z``, the gate's zero ablation and a ``patch_z`` replacement, on an attention-only
model and on one with MLPs. Then each catalogued wrong solution must be rejected on its first
case with the sentence that names its mistake (test_wrong_solutions.py only asks for a rejection).
"""

from __future__ import annotations

import pytest
import torch

from deviating.exercises import ExerciseFailed
from deviating.exercises.by_hand import last_logit_diff, mean_loss, run_by_hand, tiny_gpt
from deviating.exercises.ch05 import check_head_dla, check_patch_head
from deviating.exercises.ch07 import check_pruning_curve
from deviating.exercises.ch09 import check_logit_lens
from headlab.metrics import next_token_loss

from wrong_solutions import ch05, ch07, ch09

MODELS = {"attention only": dict(seed=0), "with MLPs": dict(seed=1, n_layers=3, n_heads=2, d_model=24, d_mlp=48)}


@pytest.fixture(params=sorted(MODELS))
def model_and_ids(request):
    hm = tiny_gpt(**MODELS[request.param])
    ids = torch.randint(40, (3, 9), generator=torch.Generator().manual_seed(0))
    return hm, ids


def test_the_run_by_hand_equals_the_model(model_and_ids) -> None:
    hm, ids = model_and_ids
    run = run_by_hand(hm, ids)
    with torch.no_grad():
        logits = hm(ids)
    _, cache = hm.run_with_cache(ids, names=("z",))
    assert torch.allclose(run.logits, logits.double(), atol=1e-5)
    for layer in range(hm.n_layers):
        assert torch.allclose(run.z[layer], cache.z(layer).double(), atol=1e-5)
    assert len(run.resid) == hm.n_layers + 1
    ln = hm.model.ln_final
    assert torch.allclose(hm.model.unembed(ln(run.resid[-1].float())).double(), run.logits, atol=1e-5)
    assert mean_loss(run, ids) == pytest.approx(float(next_token_loss(logits, ids, reduction="mean")), abs=1e-5)


def test_zeroing_by_hand_equals_the_gate(model_and_ids) -> None:
    hm, ids = model_and_ids
    heads = [(0, 1), (hm.n_layers - 1, 0)]
    with torch.no_grad(), hm.ablate(heads):
        gated = hm(ids)
    assert torch.allclose(run_by_hand(hm, ids, zero=heads).logits, gated.double(), atol=1e-5)
    assert not torch.allclose(run_by_hand(hm, ids).logits, gated.double(), atol=1e-3)  # the heads mattered


def test_replacing_by_hand_equals_patch_z(model_and_ids) -> None:
    hm, ids = model_and_ids
    other = torch.randint(40, ids.shape, generator=torch.Generator().manual_seed(1))
    _, cache = hm.run_with_cache(other, names=("z",))
    source = cache.z(1)

    def put(layer, z):
        z = z.clone()
        z[:, :, 1] = source[:, :, 1]
        z[:, 4, 0] = source[:, 4, 0]
        return z

    with torch.no_grad(), hm.patch_z(put, layers=[1]):
        patched = hm(ids)
    by_hand = run_by_hand(hm, ids, replace={(1, 1): source[:, :, 1], (1, 0, 4): source[:, 4, 0]})
    assert torch.allclose(by_hand.logits, patched.double(), atol=1e-5)
    assert by_hand.z[1][:, 4, 0].sub(source[:, 4, 0].double()).abs().max() < 1e-6
    assert last_logit_diff(by_hand, 3, 4).shape == (3,)


# each wrong solution: the words its message must contain
NAMED = [
    (check_patch_head, ch05.patch_noising, "this is noising"),
    (check_patch_head, ch05.patch_unnormalised, "not normalised"),
    (check_patch_head, ch05.patch_logit_ratio, "ratio of logits"),
    (check_patch_head, ch05.patch_second_to_last, "one position too early"),
    (check_patch_head, ch05.patch_whole_layer, "every head of the layer"),
    (check_head_dla, ch05.dla_no_scale, "scale is missing"),
    (check_head_dla, ch05.dla_not_centred, "not centred"),
    (check_head_dla, ch05.dla_whole_residual, "whole residual stream"),
    (check_head_dla, ch05.dla_wrong_position, "position is off"),
    (check_head_dla, ch05.dla_no_gamma, "weight is missing"),
    (check_head_dla, ch05.dla_with_bias, "belongs to no head"),
    (check_logit_lens, ch09.lens_no_final_norm, "LayerNorm is skipped"),
    (check_logit_lens, ch09.lens_stream_before, "*before* each layer"),
    (check_logit_lens, ch09.lens_logits, "these are logits"),
    (check_logit_lens, ch09.lens_with_embeddings, "the embeddings are not a layer"),
    (check_logit_lens, ch09.lens_frozen_scale, "afresh"),
    (check_logit_lens, ch09.lens_wrong_axis, "wrong axis"),
    (check_pruning_curve, ch07.curve_kth_head_only, "only the k-th head"),
    (check_pruning_curve, ch07.curve_reversed, "the last k heads"),
    (check_pruning_curve, ch07.curve_counts_from_one, "one head too many"),
    (check_pruning_curve, ch07.curve_accuracy, "accuracy"),
    (check_pruning_curve, ch07.curve_without_zero, "k = 0 included"),
]


@pytest.mark.parametrize(("check", "wrong", "words"), NAMED, ids=[w.__name__ for _, w, _ in NAMED])
def test_each_wrong_solution_is_told_its_mistake(check, wrong, words, capsys) -> None:  # noqa: ANN001
    with pytest.raises(ExerciseFailed) as failure:
        check(wrong)
    message = str(failure.value)
    assert "case 1 of" in message.splitlines()[0], message  # caught on a case whose message is shown
    problem = next(line for line in message.splitlines() if line.strip().startswith("problem:"))
    assert words in problem, message
    capsys.readouterr()


def test_the_catalogues_are_all_named() -> None:
    labels = {"ex-05-patch-head": ch05, "ex-05-head-dla": ch05, "ex-09-logit-lens": ch09,
              "ex-07-pruning-curve": ch07}
    named = {w for _, w, _ in NAMED}
    for label, module in labels.items():
        assert set(module.CATALOGUE[label]) <= named, label
