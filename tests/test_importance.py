"""Importance: summaries, tail statistics, rank agreement and group ablations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlab.analysis.importance import (Importance, PairEffects, backup_heads, gradient_importance,
                                head_importance, lorenz_curve, pair_effects, rank_disagreements,
                                subset_effects, top_k_share)
from headlab.heads.ablation import Ablation
from headlab.metrics import LogitMetric, Metric
from tiny_models import make_model, random_batch


def test_lorenz_known_answers():  # the Gini itself is headlab.stats.gini (tests/test_stats.py)
    x, y = lorenz_curve([3, 1, 0])
    np.testing.assert_allclose(x, [0, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(y, [0, 0, 0.25, 1])
    np.testing.assert_allclose(lorenz_curve([-2, 0, 4])[1], lorenz_curve([0, 0, 4])[1])  # negatives carry no share
    with pytest.raises(ValueError, match="no head has a positive effect"):
        lorenz_curve([0, -1])


def test_top_k_share():
    assert top_k_share([5, 1, 1, 1, 2], 1) == pytest.approx(0.5)
    assert top_k_share([5, 1, 1, 1, 2], 2) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="k must be between"):
        top_k_share([1, 2], 3)


def test_rank_disagreements_finds_the_swapped_head():
    a = torch.tensor([[5.0, 4.0], [3.0, 0.1]])
    b = torch.tensor([[5.0, 0.0], [3.0, 4.0]])  # heads 0.1 and 1.1 trade places
    top = rank_disagreements(a, b, n_heads=2, top=2)
    assert {row[0] for row in top} == {(0, 1), (1, 1)}


def test_importance_summaries_and_tail():
    # head 0.0: always 1; head 0.1: small on average, huge on input 3
    effects = torch.tensor([[[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 2.0]]])
    imp = Importance(effects, "zero", "loss")
    torch.testing.assert_close(imp.mean(), torch.tensor([[1.0, 0.5]]))
    torch.testing.assert_close(imp.worst(), torch.tensor([[1.0, 2.0]]))
    assert imp.ranking("mean") == [(0, 0), (0, 1)]
    assert imp.ranking("worst") == [(0, 1), (0, 0)]
    torch.testing.assert_close(imp.mean([3]), torch.tensor([[1.0, 2.0]]))
    torch.testing.assert_close(imp.mean(torch.tensor([True, True, False, False])), torch.tensor([[1.0, 0.0]]))
    assert imp.hidden_in_the_tail(mean_below=0.6, worst_above=1.5) == [((0, 1), 0.5, 2.0, 3)]
    with pytest.raises(ValueError, match="rank by"):
        imp.ranking("median")
    with pytest.raises(ValueError, match="empty"):
        imp.mean([])


def test_pair_effects_are_real_group_ablations():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    pe = pair_effects(hm, batch)
    assert len(pe.pairs) == 2 * 6  # all pairs within each of 2 layers of 4 heads
    with torch.no_grad():
        clean = Metric().bound(hm).score(hm(batch), batch)
        with hm.ablate([(1, 0), (1, 2)]):
            both = Metric().bound(hm).score(hm(batch), batch)
    torch.testing.assert_close(pe.pairs[((1, 0), (1, 2))], both - clean, atol=1e-5, rtol=1e-4)
    inter = pe.interaction((1, 2), (1, 0))
    torch.testing.assert_close(inter, pe.pairs[((1, 0), (1, 2))] - pe.singles[(1, 0)] - pe.singles[(1, 2)])
    red = pe.redundancy_map(1, 4)
    assert torch.isnan(red.diagonal()).all() and red[0, 2] == red[2, 0] == pytest.approx(float(inter.mean()))


def test_backup_heads_known_answer():
    a, b, c = (0, 0), (0, 1), (0, 2)
    pe = PairEffects(
        singles={a: torch.tensor([1.0]), b: torch.tensor([0.0]), c: torch.tensor([0.5])},
        pairs={(a, b): torch.tensor([2.0]), (a, c): torch.tensor([1.5]), (b, c): torch.tensor([0.5])},
    )
    # b alone does nothing; once a is gone, b's removal costs 1.0: b backs a up
    assert backup_heads(pe) == [(a, b, 0.0, 1.0)]
    assert pe.underestimates()["fraction_underestimated"] == pytest.approx(1 / 3)


def test_subset_effects_and_gradients_shapes():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=2, seq=6)
    rows = subset_effects(hm, batch, sizes=(2, 3), n_per_size=3)
    assert [r["size"] for r in rows] == [2, 2, 2, 3, 3, 3]
    imp = head_importance(hm, batch)
    assert imp.effects.shape == (2, 4, 2)
    for r in rows:
        assert r["sum_of_singles"] == pytest.approx(float(sum(imp.mean()[l, h] for l, h in r["heads"])), abs=1e-5)
    grads = gradient_importance(hm, batch, batch_size=1)
    torch.testing.assert_close(grads, hm.head_gradients(batch), atol=1e-5, rtol=1e-4)


def test_gradient_importance_takes_the_metric_and_its_loss_mask():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[:, 3:] = True
    grads = gradient_importance(hm, batch, metric=Metric("loss", loss_mask=mask), batch_size=2)
    torch.testing.assert_close(grads, hm.head_gradients(batch, Metric(loss_mask=mask)), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(grads, hm.head_gradients(batch), atol=1e-4)  # the mask changed what counts
    # a differentiable callable, one token pair per input: chunks keep each input's own pair
    pairs = LogitMetric("logit_diff", [(1, 2), (3, 4), (5, 6)])
    whole = hm.head_gradients(batch, Metric(pairs))
    torch.testing.assert_close(gradient_importance(hm, batch, metric=pairs, batch_size=1), whole, atol=1e-5, rtol=1e-4)
    same_pair = hm.head_gradients(batch, Metric(LogitMetric("logit_diff", (1, 2))))
    assert not torch.allclose(whole[1:], same_pair[1:], atol=1e-4)  # inputs 1 and 2 read their own pairs
    with pytest.raises(ValueError, match="carry no gradient"):
        gradient_importance(hm, batch, metric=lambda output, b: torch.zeros(len(output)))
    with pytest.raises(TypeError, match="unexpected keyword argument 'kind'"):  # removed in 0.2.0
        gradient_importance(hm, batch, kind="loss", loss_mask=mask, batch_size=2)


def test_mean_ablation_reaches_every_group_measurement():
    """pair_effects with an Ablation value: the pair effect equals removing both by hm.ablate."""
    hm = make_model("gpt2")
    batch = random_batch(hm, n=2, seq=6)
    ablation = Ablation("mean", reference=random_batch(hm, n=4, seq=8, seed=3))
    pe = pair_effects(hm, batch, pairs=[((1, 0), (1, 2))], ablation=ablation)
    with torch.no_grad():
        clean = Metric().bound(hm).score(hm(batch), batch)
        with hm.ablate([(1, 0), (1, 2)], ablation=ablation):
            both = Metric().bound(hm).score(hm(batch), batch)
    torch.testing.assert_close(pe.pairs[((1, 0), (1, 2))], both - clean, atol=1e-5, rtol=1e-4)
    zero = pair_effects(hm, batch, pairs=[((1, 0), (1, 2))])
    assert not torch.allclose(zero.pairs[((1, 0), (1, 2))], pe.pairs[((1, 0), (1, 2))])


def test_backup_heads_order_does_not_depend_on_rounding():
    """Both orientations of a pair share one interaction: the tie is broken by head index, so a
    rounding difference in the singles (as between CPU instruction sets) cannot reorder them."""
    a, b = (1, 2), (1, 6)
    # with these singles float32 rounding alone made given - alone larger for one orientation
    # or the other (the old sort put (1.6, 1.2) first for the first and last pairs of values)
    for alone_a, alone_b in ((0.025, 0.035), (0.035, 0.025), (0.0351, 0.0252), (0.0252, 0.0351)):
        pe = PairEffects(
            singles={a: torch.tensor([alone_a]), b: torch.tensor([alone_b])},
            pairs={(a, b): torch.tensor([0.34])},
        )
        rows = backup_heads(pe)
        assert [(r[0], r[1]) for r in rows] == [(a, b), (b, a)]
        assert rows[0][3] - rows[0][2] == pytest.approx(rows[1][3] - rows[1][2], abs=1e-6)
    # a larger interaction still comes first, whatever the head order
    c, d = (0, 0), (0, 1)
    pe = PairEffects(
        singles={a: torch.tensor([0.0]), b: torch.tensor([0.0]), c: torch.tensor([0.0]), d: torch.tensor([0.0])},
        pairs={(c, d): torch.tensor([0.2]), (a, b): torch.tensor([0.5])},
    )
    assert [(r[0], r[1]) for r in backup_heads(pe)] == [(a, b), (b, a), (c, d), (d, c)]
