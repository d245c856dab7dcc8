"""Chapter 6's statistics on effects with known answers, and group_effects against sweep."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deviating.analysis.importance_stats import (
    layer_shares, mean_interaction, missed_tail_share, rank_gap, reference_gini, tail_gini,
)

rng = np.random.default_rng(0)


def test_layer_shares_known_answers():
    e = np.repeat(np.array([[1.0], [1.0], [0.0], [2.0]]), 8, axis=1)  # 2 layers x 2 heads
    np.testing.assert_allclose(layer_shares(e, 2), [0.5, 0.5])
    with pytest.raises(ValueError, match="do not split into 3 layers"):
        layer_shares(e, 3)


def test_rank_gap_is_zero_for_the_reference_itself_and_large_for_its_reverse():
    ref = np.linspace(0, 1, 16)[:, None] + 0.05 * rng.standard_normal((16, 40))
    same = rank_gap(ref, ref, n_resamples=300)
    assert same.value == 0.0 and same.low == 0.0 and same.high == 0.0
    reverse = rank_gap(ref, -ref, n_resamples=300)
    assert reverse.value > 1.5 and reverse.low > 1.0


def test_missed_tail_share_sees_a_specialist_the_average_ranks_low():
    n = 40
    avg = np.zeros((8, n)) + np.arange(8, 0, -1)[:, None] * 0.1  # head 0 most important on average
    assert missed_tail_share(avg, avg, keep=2, n_resamples=300).value == pytest.approx(0.0, abs=1e-12)
    tail = np.zeros((8, n))
    tail[7] = 1.0  # the least important head on average does all of the phenomenon's work
    est = missed_tail_share(avg, tail, keep=2, n_resamples=300)
    outside_avg = avg[2:, 0].sum() / avg[:, 0].sum()
    assert est.value == pytest.approx(1.0 - outside_avg)
    assert est.low > 0


def test_mean_interaction_and_gini_against_the_exponential_reference():
    singles = np.zeros((4, 6))
    singles[0], singles[1] = 1.0, 2.0
    pairs = np.stack([np.full(6, 4.0), np.full(6, 0.001)])  # (0.0, 0.1): 4 - 1 - 2 = 1; the other is skipped
    est = mean_interaction(pairs, singles, [[(0, 0), (0, 1)], [(1, 0), (1, 1)]], 2, min_effect=0.01,
                           n_resamples=200)
    assert est.value == pytest.approx(1.0)
    one_head = np.zeros((32, 20))
    one_head[5] = 1.0 + 0.01 * rng.random(20)
    g = tail_gini(one_head, n_resamples=300)
    assert g.value == pytest.approx(31 / 32, abs=1e-3)
    assert g.low > reference_gini(32).high


def test_group_effects_equal_the_sweep_on_the_loss():
    from headlab.analysis.effects import causal_lm_metrics, group_effects
    from headlab.analysis.sweep import sweep
    from headlab.heads.ablation import Ablation
    from tiny_models import make_model, random_batch

    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=7)
    for ablation in (Ablation(), Ablation("mean", reference=batch)):
        ge = group_effects(hm, batch, causal_lm_metrics(), groups=[[(0, 0)], [(0, 1), (1, 0)]], ablation=ablation)
        sw = sweep(hm, batch, groups=[[(0, 0)], [(0, 1), (1, 0)]], ablation=ablation)
        torch.testing.assert_close(ge.effects["loss"].float(), sw.effects, atol=1e-5, rtol=1e-4)
        assert (ge.effects["kl"] >= -1e-9).all()
    with pytest.raises(ValueError, match="empty head set"):
        group_effects(hm, batch, causal_lm_metrics(), groups=[[]])


# ------------------------------------------------------- the hand-rolled bootstraps against scipy (issue 27)


def test_rank_gap_is_scipys_spearman_on_the_halves():
    from scipy import stats as sps

    from headlab import stats

    ref = np.linspace(0, 1, 12)[:, None] + 0.3 * rng.standard_normal((12, 30))
    proxy = ref[::-1] + 0.3 * rng.standard_normal((12, 30))
    split = stats.split_items(30, seed=0)
    a, b = list(split.select), list(split.measure)
    by_scipy = (sps.spearmanr(ref[:, a].mean(1), ref[:, b].mean(1)).statistic
                - sps.spearmanr(proxy[:, a].mean(1), ref[:, b].mean(1)).statistic)
    assert rank_gap(ref, proxy, n_resamples=200).value == pytest.approx(by_scipy)


def test_roc_auc_is_the_mann_whitney_statistic_and_the_auc_difference_matches_scipys_bootstrap():
    from scipy import stats as sps

    from deviating.analysis.inspection import auc_difference, roc_auc

    pos, neg = rng.normal(1.0, 1.0, 40), rng.normal(0.0, 1.0, 50)
    u = sps.mannwhitneyu(pos, neg).statistic
    assert roc_auc(pos, neg) == pytest.approx(u / (pos.size * neg.size))
    n = 80
    ca, cb = rng.normal(0, 1, n), rng.normal(0, 1, n)
    aa, ab = ca + rng.normal(1.0, 1, n), cb + rng.normal(0.3, 1, n)
    hit = rng.random(n) < 0.6
    est = auc_difference(ca, aa, cb, ab, hit, n_resamples=2000, seed=0)

    def statistic(idx):
        i = idx.astype(int)
        p = hit[i]
        return roc_auc(aa[i][p], ca[i]) - roc_auc(ab[i][p], cb[i])

    ref = sps.bootstrap((np.arange(n),), statistic, vectorized=False, method="percentile", n_resamples=2000,
                        rng=np.random.default_rng(1)).confidence_interval
    assert est.value == pytest.approx(statistic(np.arange(n)))
    assert est.low == pytest.approx(ref.low, abs=0.03) and est.high == pytest.approx(ref.high, abs=0.03)


def test_missed_tail_share_agrees_with_scipys_bootstrap_of_two_independent_halves():
    """The statistic resamples each half on its own: scipy's two-sample bootstrap with
    ``paired=False`` is the same procedure, so the two intervals agree up to Monte Carlo error."""
    from scipy import stats as sps

    from headlab import stats

    n_heads, n_items = 12, 80
    avg = rng.gamma(2.0, 0.05, (n_heads, n_items)) + np.linspace(0.2, 0.0, n_heads)[:, None]
    tail = rng.gamma(2.0, 0.05, (n_heads, n_items))
    tail[-3:] += 0.3  # specialists the average ranks low
    est = missed_tail_share(avg, tail, keep=4, n_resamples=3000, seed=0)
    split = stats.split_items(n_items, seed=0)

    def statistic(a, b):
        a, b = a.astype(int), b.astype(int)
        out = np.ones(n_heads, dtype=bool)
        out[np.argsort(-avg[:, a].mean(axis=1), kind="stable")[:4]] = False
        share = [np.clip(e[:, b].mean(axis=1), 0, None) for e in (tail, avg)]
        return share[0][out].sum() / share[0].sum() - share[1][out].sum() / share[1].sum()

    ref = sps.bootstrap((np.asarray(split.select), np.asarray(split.measure)), statistic, paired=False,
                        vectorized=False, method="percentile", n_resamples=3000,
                        rng=np.random.default_rng(5)).confidence_interval
    assert est.value == pytest.approx(statistic(np.asarray(split.select), np.asarray(split.measure)))
    width = ref.high - ref.low
    assert est.low == pytest.approx(ref.low, abs=0.08 * width) and est.high == pytest.approx(ref.high, abs=0.08 * width)


def test_first_failure_interval_agrees_with_scipys_percentile_bootstrap():
    from scipy import stats as sps

    from deviating.analysis.failure import WindowTable, failure_bootstrap, first_failure_interval, first_failures

    counts, n = (0, 2, 4, 6, 8, 10), 15
    # a loss that degrades by about 0.0125 nats per head removed, very differently per window
    slope = rng.gamma(1.5, 0.0083, n)
    sums = 2.0 + np.outer(np.asarray(counts, float), slope) + rng.normal(0, 0.01, (len(counts), n))
    table = WindowTable(counts, sums, np.ones(n), False)
    fb = failure_bootstrap({"loss": table}, {"loss": 0.05}, n_resamples=4000, seed=0)
    est = first_failure_interval(fb, "loss")

    def statistic(idx):
        return float(first_failures(table.means(idx.astype(int)[None]), counts, 0.05, False)[0])

    res = sps.bootstrap((np.arange(n),), statistic, vectorized=False, method="percentile", n_resamples=4000,
                        rng=np.random.default_rng(3))
    assert est.value == statistic(np.arange(n))
    # first failures take the values of counts: the high quantile falls on scipy's count or the next one;
    # the low end is the count before scipy's (the failure lies after the last count that passed)
    step = 2
    assert abs(est.high - res.confidence_interval.high) <= step
    assert abs(est.low - (res.confidence_interval.low - step)) <= step and est.low <= res.confidence_interval.low
    assert est.low < est.high  # the windows differ: the interval has width


def test_no_bca_on_fewer_than_twenty_items():
    from headlab import stats

    few = stats.bootstrap_mean(rng.normal(size=12), n_resamples=999)
    many = stats.bootstrap_mean(rng.normal(size=40), n_resamples=999)
    assert few.method.startswith("percentile") and many.method.startswith("BCa")
    g = stats.gini_interval(np.abs(rng.normal(size=(8, 12))), n_resamples=499)
    assert g.method.startswith("percentile")
