"""Tests of deviating.analysis.adversarial (trigger search and its random control) and of
deviating.analysis.inspection (mean vs per-head detection)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from deviating.analysis.adversarial import Target, margins, random_triggers, slots_before_sentence, trigger_search
from deviating.analysis.inspection import (detection_rates, flag_inputs, peak_weight, rates_from_scores, suspicion,
                                         weight_before)
from headlab.heads.model import HeadModel
from headlab.models.gpt import GPT, GPTConfig

D_VOCAB = 23


@pytest.fixture(scope="module")
def hm() -> HeadModel:
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=D_VOCAB, n_ctx=16, d_model=32, n_layers=2, n_heads=4, d_mlp=64))
    with torch.no_grad():  # larger embeddings: the context matters, so triggers can win
        model.embed.weight.mul_(8.0)
    return HeadModel(model.eval(), name="tiny")


def _targets(hm, n=12, pos=10, competitors=True):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(1, D_VOCAB, (pos,), generator=g)
        with torch.no_grad():
            logits = hm.forward(ids[None])[0, pos - 1]
        top = logits.argsort(descending=True)
        comp = (int(top[1]),) if competitors else None
        out.append(Target(ids, pos - 1, int(top[0]), comp, (2, 3, 4), "test"))
    return out


def test_margins_are_logit_differences(hm):
    targets = _targets(hm, n=3)
    m = margins(hm, targets)
    for t, value in zip(targets, m):
        with torch.no_grad():
            row = hm.forward(t.ids[None])[0, t.query]
        assert value == pytest.approx(float(row[t.correct] - row[t.competitors[0]]), abs=1e-5)
        assert value > 0  # the correct token is the argmax by construction
    everyone = _targets(hm, n=3, competitors=False)
    m_all = margins(hm, everyone)
    assert torch.allclose(m_all, m, atol=1e-5)  # top-1 vs top-2 either way


def test_target_validation():
    ids = torch.arange(1, 9)
    with pytest.raises(ValueError, match="strictly between position 0 and the query"):
        Target(ids, 5, 1, (2,), (0, 1))
    with pytest.raises(ValueError, match="strictly between"):
        Target(ids, 5, 1, (2,), (5,))
    with pytest.raises(ValueError, match="at least one slot"):
        Target(ids, 5, 1, (2,), ())
    with pytest.raises(ValueError, match="must not contain the correct"):
        Target(ids, 5, 1, (1, 2), (2,))
    with pytest.raises(ValueError, match="outside"):
        Target(ids, 9, 1, (2,), (2,))


def test_random_triggers_rewrite_only_the_slots(hm):
    targets = _targets(hm)
    res = random_triggers(hm, targets, n_draws=5, seed=0, forbidden=[0])
    base = torch.stack([t.ids for t in targets])
    changed = res.ids != base
    assert not changed[:, [0, 1, 5, 6, 7, 8, 9]].any()
    assert (res.ids[:, [2, 3, 4]] != 0).all()  # the forbidden token is never written
    assert torch.allclose(res.margin, margins(hm, targets, res.ids), atol=1e-5)
    assert (res.evaluations == 5).all() and res.method == "random"
    assert res.triggers()[0] == res.ids[0, [2, 3, 4]].tolist()


def test_search_lowers_margins_and_reports_them_truthfully(hm):
    targets = _targets(hm)
    res = trigger_search(hm, targets, n_steps=4, top_k=4, forbidden=[0])
    recomputed = margins(hm, targets, res.ids)
    assert torch.allclose(res.margin, recomputed, atol=1e-4)
    assert (res.margin <= res.clean_margin + 1e-6).all()  # a substitution is kept only if it helps
    assert (res.margin < res.clean_margin - 1e-3).sum() >= len(targets) // 2  # and it usually finds one
    base = torch.stack([t.ids for t in targets])
    assert not (res.ids != base)[:, [0, 1, 5, 6, 7, 8, 9]].any()
    assert (res.evaluations <= 4 * 3 * 4).all()
    assert res.success_rate() == pytest.approx(float(res.success.float().mean()))
    # with the same budget of evaluations, the gradient-guided search does at least as well on the
    # median margin as the best of random draws
    budget = int(res.evaluations.float().mean())
    rand = random_triggers(hm, targets, n_draws=budget, seed=0, forbidden=[0])
    assert float(res.margin.median()) <= float(rand.margin.median()) + 0.5


def test_slots_before_sentence_keep_the_boundary():
    # tokens: <bos> a b c . | d e f g   (sentence 1 = positions 1-4, sentence 2 = 5-8)
    w = SimpleNamespace(sentence=[0, 1, 1, 1, 1, 2, 2, 2, 2],
                        is_sentence_end=[False, False, False, False, True, False, False, False, False])
    assert slots_before_sentence(w, 7, 2) == (2, 3)  # the '.' at 4 is kept
    assert slots_before_sentence(w, 7, 3) == (1, 2, 3)
    assert slots_before_sentence(w, 7, 4) is None  # would reach <bos>


# ------------------------------------------------------------------ detection


def _rows(n, spike_head=None, spike=0.9, seed=0):
    """(n, layer=1, head=4, pos=6) rows: heads spread their weight evenly over keys 1..5 (0.2 each,
    none on the sink 0), with a little noise; optionally one head puts ``spike`` on key 3."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.full((n, 1, 4, 6), 0.2)
    rows[..., 0] = 0.0
    rows[..., 1:] += 0.02 * torch.rand(n, 1, 4, 5, generator=g)
    rows = rows / rows.sum(-1, keepdim=True)
    if spike_head is not None:
        rows[:, 0, spike_head] = (1 - spike) / 4
        rows[:, 0, spike_head, 0] = 0.0
        rows[:, 0, spike_head, 3] = spike
        rows[:, 0, spike_head] /= rows[:, 0, spike_head].sum(-1, keepdim=True)
    return rows


def test_a_single_hijacked_head_is_seen_per_head_and_lost_in_the_mean():
    clean, attacked = _rows(8), _rows(8, spike_head=2, seed=1)
    assert torch.allclose(peak_weight(attacked)[:, 0, 2], torch.full((8,), 0.9), atol=1e-6)
    # the mean over 4 heads puts about (0.9 + 3 x 0.2) / 4 = 0.375 on key 3
    assert (peak_weight(attacked.mean(2))[:, 0] < 0.4).all()
    assert flag_inputs(attacked, 0.5, "per_head").all()
    assert not flag_inputs(attacked, 0.5, "mean").any()
    assert not flag_inputs(clean, 0.5, "per_head").any()
    # the sink is ignored by default: a head parked on position 0 is not suspicious
    parked = clean.clone()
    parked[:, 0, 1] = 0.0
    parked[:, 0, 1, 0] = 1.0
    assert not flag_inputs(parked, 0.5, "per_head").any()
    assert flag_inputs(parked, 0.5, "per_head", ignore=()).all()
    with pytest.raises(ValueError, match="per_head' or 'mean"):
        flag_inputs(clean, 0.5, "max")


def test_calibrated_detection_rates():
    calibration, clean = _rows(40, seed=2), _rows(20, seed=3)
    attacked = _rows(10, spike_head=0, spike=0.6, seed=4)
    per_head = detection_rates(calibration, clean, attacked, mode="per_head", calibration_rate=0.05)
    mean = detection_rates(calibration, clean, attacked, mode="mean", calibration_rate=0.05)
    assert per_head["detection_rate"] == 1.0
    assert per_head["false_positive_rate"] <= 0.25
    assert mean["detection_rate"] <= per_head["detection_rate"]
    z = suspicion(attacked, calibration, "per_head")
    assert z.shape == (10,) and (z > 10).all()  # 0.6 is many clean standard deviations above 0.2
    with pytest.raises(ValueError, match="at least two"):
        suspicion(attacked, calibration[:1])
    with pytest.raises(ValueError, match="calibration_rate"):
        detection_rates(calibration, clean, attacked, calibration_rate=1.5)


def test_weight_before_the_sentence_and_rates_from_scores():
    rows = torch.zeros(2, 1, 2, 6)  # (n, layer, head, pos)
    rows[:, 0, 0] = torch.tensor([0.5, 0.1, 0.1, 0.1, 0.1, 0.1])
    rows[:, 0, 1] = torch.tensor([0.0, 0.0, 0.0, 0.2, 0.3, 0.5])
    out = weight_before(rows, torch.tensor([2, 4]))  # keys 1..2 and 1..4, the sink left out
    assert torch.allclose(out[0, 0], torch.tensor([0.2, 0.0]))
    assert torch.allclose(out[1, 0], torch.tensor([0.4, 0.5]))
    with pytest.raises(ValueError, match="one position per input"):
        weight_before(rows, torch.tensor([1]))
    g = torch.Generator().manual_seed(0)
    calibration = 0.1 + 0.01 * torch.rand(50, 4, generator=g)  # 4 units, all near 0.1
    clean = 0.1 + 0.01 * torch.rand(20, 4, generator=g)
    attacked = clean.clone()
    attacked[:, 2] = 0.6  # one unit far outside its clean range
    r = rates_from_scores(calibration, clean, attacked)
    assert r["detection_rate"] == 1.0 and r["false_positive_rate"] <= 0.2
    # the same shift averaged over the 4 units is a quarter as large, and the units' spreads add up
    r_mean = rates_from_scores(calibration.mean(1, keepdim=True), clean.mean(1, keepdim=True),
                               attacked.mean(1, keepdim=True))
    assert r_mean["detection_rate"] == 1.0  # 0.125 is still far out here: averaging does not hide everything


# ------------------------------------------------ inspectors compared at matched false-positive rates

import numpy as np  # noqa: E402

from deviating.analysis.inspection import auc_difference, inspector_scores, roc_auc, tpr_at_fpr  # noqa: E402


def test_roc_auc_counts_ties_as_half():
    assert roc_auc([3, 4], [1, 2]) == 1.0
    assert roc_auc([1, 2], [3, 4]) == 0.0
    assert roc_auc([1], [1]) == 0.5
    assert roc_auc([1, 3], [2]) == 0.5


def test_tpr_at_fpr_flags_at_most_that_share_of_the_negatives():
    neg = np.arange(10.0)  # at 10% one negative (9) may lie above the threshold (8)
    assert tpr_at_fpr([8.5, 9.5, 7.0], neg, 0.1) == pytest.approx(2 / 3)
    assert tpr_at_fpr([8.5, 9.5, 7.0], neg, 0.0) == pytest.approx(1 / 3)  # nothing above 9
    with pytest.raises(ValueError, match="fpr must be in"):
        tpr_at_fpr([1.0], neg, 1.0)


def test_auc_difference_is_paired_over_items():
    rng = np.random.default_rng(0)
    clean = rng.normal(size=40)
    attacked = clean + 3.0  # inspector a: every attack far above every clean input
    success = np.arange(40) % 2 == 0
    same = auc_difference(clean, attacked, clean, attacked, success, n_resamples=200)
    assert (same.value, same.low, same.high) == (0.0, 0.0, 0.0)
    blind = rng.normal(size=40)  # inspector b: attacked inputs look like clean ones
    diff = auc_difference(clean, attacked, clean, blind, success, n_resamples=500)
    assert diff.value == pytest.approx(roc_auc(attacked[success], clean) - roc_auc(blind[success], clean))
    assert diff.low > 0  # a blind inspector is worse, and the interval says so
    with pytest.raises(ValueError, match="at least two positives"):
        auc_difference(clean, attacked, clean, blind, np.arange(40) == 0)


def test_inspector_scores_per_head_and_in_the_mean():
    rows = torch.zeros(1, 1, 4, 6)  # one input, 4 heads; boundary at key 2
    rows[..., 5] = 1.0
    rows[0, 0, 1] = torch.tensor([0.0, 0.9, 0.0, 0.0, 0.0, 0.1])  # head 1 looks before the sentence
    calib = torch.zeros(2, 1, 4, 6)
    calib[..., 5] = 1.0
    calib[0, 0, :, 5], calib[0, 0, :, 1] = 0.9, 0.1  # every head: 0.1 and 0.3 before, mean 0.2
    calib[1, 0, :, 5], calib[1, 0, :, 1] = 0.7, 0.3
    b, cb = torch.tensor([2]), torch.tensor([2, 2])
    per_head = inspector_scores(rows, b, calib, cb, "before", "per_head")
    assert per_head.item() == pytest.approx((0.9 - 0.2) / float(torch.tensor([0.1, 0.3]).std()), rel=1e-5)
    mean = inspector_scores(rows, b, calib, cb, "before", "mean")  # (0.9 + 0) / 4 = 0.225: diluted
    assert mean.item() == pytest.approx((0.225 - 0.2) / float(torch.tensor([0.1, 0.3]).std()), rel=1e-5)
    with pytest.raises(ValueError, match="inspector must be one of"):
        inspector_scores(rows, b, calib, cb, "entropy")
