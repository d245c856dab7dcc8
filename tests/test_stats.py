"""headlab.stats on cases with known answers: hand-computed or textbook values, and
agreement with scipy where it applies."""

from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest
import torch
from scipy import stats as sps

from headlab import stats as S

# ---------------------------------------------------------------- exact tests


def test_mcnemar_exact_matches_the_binomial_by_hand():
    # 2 items only a is right, 8 only b: P(X <= 2 | n=10, 1/2) = (1 + 10 + 45) / 1024, doubled
    a = [1, 1] + [0] * 8 + [1] * 5 + [0] * 3
    b = [0, 0] + [1] * 8 + [1] * 5 + [0] * 3
    res = S.mcnemar(a, b)
    assert res.pvalue == pytest.approx(2 * 56 / 1024)
    assert res.details == {"a_only": 2, "b_only": 8, "both": 5, "neither": 3}
    assert res.statistic == pytest.approx((2 - 8) / 18)
    assert res.n == 18
    # one-sided: a worse than b
    assert S.mcnemar(a, b, alternative="less").pvalue == pytest.approx(56 / 1024)
    assert S.mcnemar(a, b, alternative="greater").pvalue == pytest.approx(1 - 11 / 1024)


def test_mcnemar_ignores_concordant_items_and_handles_none_discordant():
    same = S.mcnemar([True, False, True], [True, False, True])
    assert same.pvalue == 1.0 and same.statistic == 0
    # adding 100 items both get right changes n, not the p-value
    a, b = [1] * 7 + [0], [0] * 7 + [1]
    assert S.mcnemar(a + [1] * 100, b + [1] * 100).pvalue == pytest.approx(S.mcnemar(a, b).pvalue)
    assert S.mcnemar(a, b).pvalue == pytest.approx(2 * (1 + 8) / 256)


def test_mcnemar_rejects_bad_input():
    with pytest.raises(ValueError, match="paired"):
        S.mcnemar([1, 0], [1])
    with pytest.raises(ValueError, match="0/1"):
        S.mcnemar([1, 2], [1, 0])
    with pytest.raises(ValueError, match="alternative"):
        S.mcnemar([1], [0], alternative="bigger")


def test_binomial_test_by_hand():
    # P(X >= 7 | n=10, 1/2) = (120 + 45 + 10 + 1) / 1024
    res = S.binomial_test(7, 10, 0.5, alternative="greater")
    assert res.pvalue == pytest.approx(176 / 1024)
    assert res.statistic == pytest.approx(0.7)
    assert S.binomial_test(0, 5, 0.5, alternative="less").pvalue == pytest.approx(1 / 32)
    with pytest.raises(ValueError, match="successes"):
        S.binomial_test(11, 10, 0.5)
    with pytest.raises(ValueError, match="p0"):
        S.binomial_test(1, 10, 1.5)


def test_proportion_clopper_pearson_closed_forms():
    # k = 0: the upper end solves (1 - p)^n = alpha/2; k = n: the lower end solves p^n = alpha/2
    zero = S.proportion(0, 10)
    assert zero.value == 0 and zero.low == 0
    assert zero.high == pytest.approx(1 - 0.025 ** (1 / 10))
    full = S.proportion(10, 10)
    assert full.low == pytest.approx(0.025 ** (1 / 10)) and full.high == 1
    # in between: the beta quantiles of the exact interval
    mid = S.proportion(22, 64)
    assert mid.low == pytest.approx(sps.beta.ppf(0.025, 22, 43))
    assert mid.high == pytest.approx(sps.beta.ppf(0.975, 23, 42))
    assert mid.n == 64
    with pytest.raises(ValueError, match="whole"):
        S.proportion(2.5, 10)


def test_fisher_lady_tasting_tea():
    # Fisher's own example: 3 of 4 cups right each way; one-sided p = 17/70, two-sided 34/70
    res = S.fisher(3, 4, 1, 4)
    assert res.pvalue == pytest.approx(34 / 70)
    assert res.statistic == pytest.approx(9.0)
    assert S.fisher(3, 4, 1, 4, alternative="greater").pvalue == pytest.approx(17 / 70)
    # hypergeometric by hand for 4 of 4 vs 0 of 4: 1 / C(8, 4)
    assert S.fisher(4, 4, 0, 4, alternative="greater").pvalue == pytest.approx(1 / comb(8, 4))


def test_fisher_on_the_trigger_counts_of_issue_16():
    # a trigger search flips 22/64, the best random trigger 17/64: not distinguishable
    res = S.fisher(22, 64, 17, 64)
    assert res.pvalue == pytest.approx(0.44, abs=0.005)
    assert res.details == {"rate_a": 22 / 64, "rate_b": 17 / 64}


def test_permutation_test_exact_enumeration():
    # C(6, 3) = 20 splits; only the observed one and its mirror are as extreme as |-3|
    res = S.permutation_test([1, 2, 3], [4, 5, 6])
    assert res.statistic == pytest.approx(-3)
    assert res.pvalue == pytest.approx(2 / 20)
    assert S.permutation_test([1, 2, 3], [4, 5, 6], alternative="less").pvalue == pytest.approx(1 / 20)


def test_paired_permutation_test_flips_signs():
    # differences 1, 2, 3, 4: of 16 sign patterns only all-positive reaches the mean 2.5
    res = S.permutation_test([1, 2, 3, 4], [0, 0, 0, 0], paired=True, alternative="greater")
    assert res.statistic == pytest.approx(2.5)
    assert res.pvalue == pytest.approx(1 / 16)
    assert S.permutation_test([1, 2, 3, 4], [0, 0, 0, 0], paired=True).pvalue == pytest.approx(2 / 16)
    # unpaired on the same numbers is a different (weaker) test
    assert S.permutation_test([1, 2, 3, 4], [0, 0, 0, 0]).pvalue == pytest.approx(2 / comb(8, 4))


def test_empirical_pvalue_counts_the_observation():
    null = np.arange(99.0)
    assert S.empirical_pvalue(1000.0, null).pvalue == pytest.approx(1 / 100)
    assert S.empirical_pvalue(-1.0, null).pvalue == pytest.approx(1.0)
    # ties count as extreme: 98 is matched by one null value
    assert S.empirical_pvalue(98.0, null).pvalue == pytest.approx(2 / 100)
    assert S.empirical_pvalue(-1.0, null, alternative="less").pvalue == pytest.approx(1 / 100)
    assert S.empirical_pvalue(49.0, null, alternative="two-sided").pvalue == pytest.approx(1.0)
    with pytest.raises(ValueError, match="finite"):
        S.empirical_pvalue(1.0, [])


# ---------------------------------------------------------------- intervals


def test_bootstrap_mean_agrees_with_scipy():
    x = np.random.default_rng(3).normal(1.0, 2.0, size=40)
    est = S.bootstrap_mean(x, n_resamples=2000, seed=7)
    ref = sps.bootstrap((x,), np.mean, n_resamples=2000, method="BCa", rng=np.random.default_rng(7))
    assert est.value == pytest.approx(x.mean())
    assert (est.low, est.high) == pytest.approx(tuple(ref.confidence_interval))
    assert est.n == 40 and est.level == 0.95 and "BCa" in est.method
    # the same seed gives the same interval; a wider level gives a wider one
    assert S.bootstrap_mean(x, n_resamples=2000, seed=7) == est
    wide = S.bootstrap_mean(x, n_resamples=2000, seed=7, level=0.99)
    assert wide.low < est.low and wide.high > est.high


def test_bootstrap_resamples_items_not_tokens():
    # 10 sentences of 20 identical tokens each: there are 10 independent values, not 200
    rng = np.random.default_rng(0)
    per_item = rng.normal(size=10)
    tokens = np.repeat(per_item, 20)
    items = np.repeat([f"s{i}" for i in range(10)], 20)
    clustered = S.bootstrap_mean(tokens, items, n_resamples=3000, seed=1)
    on_items = S.bootstrap_mean(per_item, n_resamples=3000, seed=1, method="percentile")
    naive = S.bootstrap_mean(tokens, n_resamples=3000, seed=1)
    assert clustered.n == 10 and naive.n == 200
    assert clustered.value == pytest.approx(per_item.mean())
    width = clustered.high - clustered.low
    assert width == pytest.approx(on_items.high - on_items.low, rel=0.25)
    assert naive.high - naive.low < 0.6 * width  # resampling tokens is far too confident


def test_cluster_bootstrap_weighs_tokens_like_the_point_estimate():
    # item a has 1 token of value 0, item b 3 tokens of value 1: token mean 0.75
    est = S.bootstrap_mean([0, 1, 1, 1], ["a", "b", "b", "b"], n_resamples=500)
    assert est.value == pytest.approx(0.75)
    assert est.n == 2


def test_bootstrap_degenerate_and_bad_input():
    flat = S.bootstrap_mean([0.5] * 12)
    assert (flat.value, flat.low, flat.high) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="two items"):
        S.bootstrap_mean([1.0])
    with pytest.raises(ValueError, match="index 1"):
        S.bootstrap_mean([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="method"):
        S.bootstrap_mean([1.0, 2.0, 3.0], method="normal")
    with pytest.raises(ValueError, match="one item id per value"):
        S.bootstrap_mean([1.0, 2.0, 3.0], items=[0, 1])


def test_paired_difference_is_the_bootstrap_of_differences():
    rng = np.random.default_rng(5)
    base = rng.normal(size=60)
    a, b = base + 0.3 + 0.1 * rng.normal(size=60), base
    est = S.paired_difference(a, b, n_resamples=2000, seed=2)
    ref = S.bootstrap_mean(a - b, n_resamples=2000, seed=2)
    assert (est.value, est.low, est.high) == (ref.value, ref.low, ref.high)
    assert est.method.startswith("paired")
    assert est.low > 0.2  # the shared item noise cancels
    # treating the groups as independent would be ~10x wider: the pairing matters
    unpaired_se = math.sqrt(a.var(ddof=1) / 60 + b.var(ddof=1) / 60)
    assert est.high - est.low < unpaired_se
    with pytest.raises(ValueError, match="paired"):
        S.paired_difference([1, 2, 3], [1, 2])


def test_over_seeds_t_interval_by_hand():
    est = S.over_seeds([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)  # t(0.975, 2) * s / sqrt(3), s = 1
    assert est.value == 2.0
    assert (est.low, est.high) == pytest.approx((2 - half, 2 + half))
    assert est.n == 3
    with pytest.raises(ValueError, match="at least two seeds"):
        S.over_seeds([0.5])


def test_estimate_side_and_validation():
    e = S.Estimate(0.12, -0.01, 0.24, 82)
    assert e.side(0) == 0 and not e.excludes(0)
    assert e.side(-0.02) == 1 and e.side(0.3) == -1
    assert S.Estimate(1.0, 0.0, 2.0, 5).side(0.0) == 0  # touching is not excluding
    with pytest.raises(ValueError, match="reversed"):
        S.Estimate(0.0, 1.0, -1.0, 3)
    with pytest.raises(ValueError, match="NaN"):
        S.Estimate(float("nan"), 0.0, 1.0, 3)


# ---------------------------------------------------------------- selection


def test_split_items_is_deterministic_disjoint_and_order_free():
    ids = [f"sentence {i}" for i in range(82)]
    sp = S.split_items(ids, seed=0)
    assert len(sp.select) == 41 and len(sp.measure) == 41
    assert set(sp.select).isdisjoint(sp.measure) and set(sp.select) | set(sp.measure) == set(range(82))
    # listing the items in another order puts the same items on each side
    rev = ids[::-1]
    sp_rev = S.split_items(rev, seed=0)
    assert {rev[i] for i in sp_rev.select} == {ids[i] for i in sp.select}
    # another seed, another split; the same seed, the same split
    assert not np.array_equal(S.split_items(ids, seed=1).select, sp.select)
    assert np.array_equal(S.split_items(ids, seed=0).select, sp.select)
    # pinned: the split is defined by sha256, so it never changes across machines or numpy versions
    assert S.split_items(10).select.tolist() == [0, 3, 4, 5, 9]
    assert len(S.split_items(10, fraction=0.3).select) == 3


def test_split_items_refuses_what_would_leak():
    with pytest.raises(ValueError, match="twice"):
        S.split_items(["a", "b", "a"])
    with pytest.raises(ValueError, match="each side"):
        S.split_items(1)
    with pytest.raises(ValueError, match="strings or integers"):
        S.split_items([1.5, 2.5])
    with pytest.raises(ValueError, match="fraction"):
        S.split_items(10, fraction=1.0)


def test_select_and_measure_finds_the_planted_head_and_shows_the_winners_curse():
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(50, 200))  # 50 heads that do nothing
    sp = S.split_items(200, seed=0)
    sel = S.select_and_measure(noise, sp, n_resamples=999)
    assert sel.in_sample > sel.measured.value + 0.15  # chosen as the best of 50: optimistic
    assert sel.measured.low < 0 < sel.measured.high  # held out, nothing is left
    planted = noise.copy()
    planted[17] += 1.0
    sel = S.select_and_measure(planted, sp, baseline=np.zeros(200), n_resamples=999)
    assert sel.candidate == 17 and sel.lead.low > 0.5
    assert sel.measured.n == len(sp.measure)
    low = S.select_and_measure(-planted, sp, higher_is_better=False, n_resamples=99)
    assert low.candidate == 17


def test_holm_and_benjamini_hochberg_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 -> running max 0.02, 0.03, 0.06, 0.06
    assert S.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: 0.005*4/1, 0.01*4/2, 0.03*4/3, 0.04*4/4 -> running min from the top 0.02, 0.02, 0.04, 0.04
    assert S.benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert S.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        S.holm([0.2, 1.2])


def test_null_threshold_is_the_inverted_cdf():
    assert S.null_threshold(np.arange(1, 101)) == 95
    assert S.null_threshold(np.arange(1, 101), level=0.5) == 50
    with pytest.raises(ValueError, match="finite"):
        S.null_threshold([])


def test_stability_of_a_label():
    rng = np.random.default_rng(1)
    strong = rng.normal(2.0, 1.0, size=40)
    label = S.stability(lambda idx: "positive" if strong[idx].mean() > 0 else "negative", 40, n_resamples=300)
    assert label.value == "positive" and label.share == 1.0 and label.label == "positive"
    coin = np.array([-1.0, 1.0] * 20) + 1e-9  # mean a hair above 0: half the resamples flip it
    flip = S.stability(lambda idx: coin[idx].mean() > 0, 40, n_resamples=400, seed=3)
    assert 0.3 < flip.share < 0.7
    assert not flip.stable and flip.label == S.UNSTABLE


def test_rank_intervals():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(5, 30))
    scores[3] += 5.0  # one head dominates every resample
    scores[1] = scores[0]  # two identical heads share a rank
    r = S.rank_intervals(scores, n_resamples=400)
    assert r.rank[3] == 1 and r.low[3] == 1 and r.high[3] == 1 and r.share_top[3] == 1.0
    assert r.rank[0] == r.rank[1]
    assert np.all(r.low <= r.rank) and np.all(r.rank <= r.high)
    assert r.share_top.sum() == pytest.approx(1.0)


# ---------------------------------------------------------------- inequality


def test_gini_known_values():
    assert S.gini([1, 1, 1, 1]) == pytest.approx(0.0)
    assert S.gini([0, 0, 0, 1]) == pytest.approx(0.75)  # (n - 1) / n
    assert S.gini([1, 2, 3, 4, 5]) == pytest.approx(4 / 15)  # 40 / (2 * 25 * 3)
    x = np.random.default_rng(4).exponential(size=30)
    by_pairs = np.abs(x[:, None] - x[None, :]).sum() / (2 * 30**2 * x.mean())
    assert S.gini(x) == pytest.approx(by_pairs)
    assert S.gini(7 * x) == pytest.approx(S.gini(x))  # scale-free
    assert S.gini(np.stack([x, x * 2]), axis=1) == pytest.approx([by_pairs, by_pairs])
    with pytest.raises(ValueError, match="non-negative"):
        S.gini([1.0, -0.5])
    with pytest.raises(ValueError, match="zero"):
        S.gini([0.0, 0.0])


def test_gini_interval_and_nulls():
    rng = np.random.default_rng(6)
    spread = rng.exponential(size=(40, 1)) ** 3  # very unequal true importances
    effects = spread * rng.exponential(size=(40, 24))
    est = S.gini_interval(effects, n_resamples=999)
    assert est.value == pytest.approx(S.gini(effects.mean(axis=1)))
    assert est.low < est.value < est.high and est.n == 24
    boot = [S.gini(effects[:, rng.integers(0, 24, 24)].mean(axis=1)) for _ in range(400)]
    assert abs(np.median(boot) - (est.low + est.high) / 2) < 0.05
    null = S.gini_permutation_null(effects, n_resamples=199)
    assert null.pvalue == pytest.approx(1 / 200)
    # equal true importances: only item noise makes the Gini positive, and the null says so
    equal = rng.exponential(size=(40, 24))
    assert S.gini_permutation_null(equal, n_resamples=199).pvalue > 0.05
    with pytest.raises(ValueError, match="clip_negative"):
        S.gini_interval(effects - 0.5)
    assert S.gini_interval(effects - 0.01, clip_negative=True, n_resamples=199).value <= 1


def test_gini_references_match_population_values():
    big = S.gini_references(20000, n_draws=3)
    for name, expected in S.REFERENCE_GINI.items():
        assert big[name].value == pytest.approx(expected, abs=0.02), name
    assert S.REFERENCE_GINI["exponential"] == 0.5
    assert S.REFERENCE_GINI["lognormal sigma=2"] == pytest.approx(0.8427, abs=1e-4)
    small = S.gini_references(72, n_draws=500)
    assert small["exponential"].value < 0.5  # with few heads the sample Gini is biased low
    assert small["exponential"].low < small["exponential"].value < small["exponential"].high


def test_spearman_is_scipys_with_ties_grids_and_checks():
    a = [1.0, 2.0, 2.0, 5.0, 3.0]
    b = [10.0, 20.0, 25.0, 40.0, 30.0]
    # ranks: a -> 1, 2.5, 2.5, 5, 4; b -> 1, 2, 3, 5, 4
    ra, rb = np.array([1, 2.5, 2.5, 5, 4]), np.array([1, 2, 3, 5, 4])
    assert S.spearman(a, b) == pytest.approx(np.corrcoef(ra, rb)[0, 1])
    assert S.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    rng = np.random.default_rng(0)
    grid_a, grid_b = rng.normal(size=(4, 8)), rng.normal(size=(4, 8))
    # two (layers, heads) grids compare head by head (scipy alone would read 8 columns as variables)
    assert S.spearman(grid_a, grid_b) == pytest.approx(sps.spearmanr(grid_a.ravel(), grid_b.ravel()).statistic)
    assert S.spearman(torch.as_tensor(grid_a), torch.as_tensor(grid_b)) == pytest.approx(S.spearman(grid_a, grid_b))
    with pytest.raises(ValueError, match="constant"):
        S.spearman([1, 1, 1], [1, 2, 3])
    with pytest.raises(ValueError, match="equal size"):
        S.spearman([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="non-finite"):
        S.spearman([1, float("nan"), 3], [1, 2, 3])


def test_one_gini_and_one_rank_correlation_in_the_library():
    import headlab.analysis.importance as importance

    assert not hasattr(importance, "gini") and not hasattr(importance, "spearman")
    assert S.gini([0, 0, 4]) == pytest.approx(2 / 3)


def test_an_exact_tie_of_binary_outcomes_gets_its_clopper_pearson_bound():
    tie = S.paired_difference(np.ones(216), np.ones(216))
    u = sps.binomtest(0, 216).proportion_ci(method="exact").high
    assert (tie.value, tie.low, tie.high, tie.n) == (0.0, pytest.approx(-u), pytest.approx(u), 216)
    assert 0.016 < u < 0.018  # about 3.7 / n
    allright = S.bootstrap_mean(np.ones(50))
    assert allright.value == 1.0 and allright.high == 1.0 and allright.low == pytest.approx(0.025 ** (1 / 50))
    flat = S.bootstrap_mean(np.full(10, 0.3))  # not 0/1: no exact bound exists, the zero width is said
    assert flat.low == flat.high == pytest.approx(0.3) and "zero width" in flat.method

