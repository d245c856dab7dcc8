"""The statistics behind chapter 6's verdicts on head importance, each a number with an interval
over items (windows or sentences, never tokens).

Every function takes per-head, per-item effects ``(n_heads, n_items)`` (rows in head order,
``l * n_heads + h``), as :mod:`deviating.experiments.division_of_work` stores them, and returns a
:class:`headlab.stats.Estimate`:

* :func:`tail_gini` -- how unequal the heads' mean effects are (Gini, BCa interval), to be read
  against :func:`reference_gini` (the Gini of as many heads drawn from an exponential
  distribution: "long-tailed" should mean more unequal than that);
* :func:`layer_shares` -- the share of the total effect each layer carries (the layer confound);
* :func:`missed_tail_share` -- how much more of a phenomenon's effect lies outside the top heads
  by average effect than of the average effect itself (selected on one half, measured on the
  other);
* :func:`rank_gap` -- how much worse a proxy ranks the heads than the effect ranks itself on
  other items (split-half);
* :func:`mean_interaction` -- the mean pair interaction ``effect(a+b) - effect(a) - effect(b)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from scipy.stats import rankdata

from headlab import stats
from headlab.stats.results import Estimate

__all__ = ["tail_gini", "reference_gini", "layer_shares", "missed_tail_share", "rank_gap",
           "mean_interaction"]


def _effects(effects, name: str = "effects") -> np.ndarray:
    e = np.asarray(effects, dtype=float)
    if e.ndim != 2 or e.shape[0] < 2 or e.shape[1] < 4:
        raise ValueError(f"{name} must be (n_heads, n_items) with at least 2 heads and 4 items; got shape {e.shape}")
    if not np.isfinite(e).all():
        raise ValueError(f"{name} has non-finite values: keep only the items a metric is defined on")
    return e


def _percentile(values: np.ndarray, value: float, n: int, level: float, method: str) -> Estimate:
    """The percentile interval of the resampled ``values`` as it is (the point is not forced inside it:
    a point outside its own interval says the statistic is biased, and hiding that would mislead)."""
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(float(value), float(lo), float(hi), n, level, method)


def tail_gini(effects, *, n_resamples: int = 1000, seed: int = 0) -> Estimate:
    """Gini of the heads' mean effects (negative effects count as zero), BCa interval over items."""
    return stats.gini_interval(_effects(effects), clip_negative=True, n_resamples=n_resamples, seed=seed)


def reference_gini(n_heads: int, distribution: str = "exponential", seed: int = 0) -> Estimate:
    """The sample Gini of ``n_heads`` values drawn from ``distribution`` (mean and central 95% of draws)."""
    refs = stats.gini_references(n_heads, seed=seed)
    if distribution not in refs:
        raise ValueError(f"unknown reference {distribution!r}: choose from {', '.join(refs)}")
    return refs[distribution]


def layer_shares(effects, n_layers: int) -> np.ndarray:
    """``(n_layers,)``: the share of the total positive mean effect carried by each layer's heads."""
    e = _effects(effects)
    if e.shape[0] % n_layers:
        raise ValueError(f"{e.shape[0]} heads do not split into {n_layers} layers")
    mean = np.clip(e.mean(axis=1), 0, None).reshape(n_layers, -1).sum(axis=1)
    if mean.sum() == 0:
        raise ValueError("no head has a positive mean effect: shares are undefined")
    return mean / mean.sum()


def _bootstrap_halves(statistic: Callable[[np.ndarray, np.ndarray], float], split: stats.Split, *,
                      n_resamples: int, seed: int, level: float, method: str, n: int) -> Estimate:
    rng = np.random.default_rng(seed)
    a, b = np.asarray(split.select), np.asarray(split.measure)
    value = statistic(a, b)
    draws = np.array([statistic(rng.choice(a, a.size), rng.choice(b, b.size)) for _ in range(n_resamples)])
    draws = draws[np.isfinite(draws)]
    if draws.size < n_resamples // 2:
        raise ValueError("most resamples left the statistic undefined: too few items, or constant effects")
    return _percentile(draws, value, n, level, method)


def missed_tail_share(average, tail, *, keep: int, seed: int = 0, n_resamples: int = 1000,
                      level: float = 0.95) -> Estimate:
    """How much of a phenomenon's effect a plan keeping the top ``keep`` heads by average misses.

    The top ``keep`` heads by mean ``average`` effect are chosen on one half of the items; on the
    other half the statistic is the share of the positive mean ``tail`` effect carried by the
    other heads, minus the share of the positive mean ``average`` effect they carry. Positive: the
    heads the average ranking puts low do more of the phenomenon's work than of the average's.

    Args:
        average: ``(n_heads, n_items)`` effects on the average metric (e.g. the loss).
        tail: ``(n_heads, n_items)`` effects on the phenomenon (e.g. its margin lost), same items.
        keep: how many heads the plan keeps.
        seed: the split and the bootstrap.
        n_resamples: bootstrap resamples (items resampled within each half).
        level: confidence level.
    """
    avg, tl = _effects(average, "average"), _effects(tail, "tail")
    if avg.shape != tl.shape:
        raise ValueError(f"average {avg.shape} and tail {tl.shape} must hold the same heads and items")
    if not 1 <= keep < avg.shape[0]:
        raise ValueError(f"keep must be between 1 and {avg.shape[0] - 1}; got {keep}")
    split = stats.split_items(avg.shape[1], seed=seed)

    def statistic(a, b):
        order = np.argsort(-avg[:, a].mean(axis=1), kind="stable")
        out = np.ones(avg.shape[0], dtype=bool)
        out[order[:keep]] = False
        shares = []
        for e in (tl, avg):
            m = np.clip(e[:, b].mean(axis=1), 0, None)
            shares.append(m[out].sum() / m.sum() if m.sum() > 0 else np.nan)
        return shares[0] - shares[1]

    return _bootstrap_halves(statistic, split, n_resamples=n_resamples, seed=seed, level=level, n=len(split.measure),
                             method=f"percentile bootstrap within halves, top {keep} chosen on the other half")


def rank_gap(reference, proxy, *, seed: int = 0, n_resamples: int = 1000, level: float = 0.95) -> Estimate:
    """``spearman(reference_A, reference_B) - spearman(proxy_A, reference_B)`` over heads.

    Half ``A`` of the items gives both rankings, half ``B`` the reference to predict: the first
    term is how well the reference predicts itself on other items (its split-half
    reliability), the second how well the proxy does. Positive: the proxy ranks the heads worse
    than the measurement's own noise allows.

    Args:
        reference: ``(n_heads, n_items)``, e.g. ablation effects.
        proxy: ``(n_heads, n_items)``, e.g. minus the attention entropy, or another task's effects.
    """
    ref, prx = _effects(reference, "reference"), _effects(proxy, "proxy")
    if ref.shape != prx.shape:
        raise ValueError(f"reference {ref.shape} and proxy {prx.shape} must hold the same heads and items")
    split = stats.split_items(ref.shape[1], seed=seed)
    a, b = np.asarray(split.select), np.asarray(split.measure)

    def gap(ia, ib):  # index arrays (n_draws, half): every draw at once
        r_ref_a = rankdata(ref[:, ia].mean(-1), axis=0)  # (n_heads, n_draws)
        r_ref_b = rankdata(ref[:, ib].mean(-1), axis=0)
        r_prx_a = rankdata(prx[:, ia].mean(-1), axis=0)
        return _columns_corr(r_ref_a, r_ref_b) - _columns_corr(r_prx_a, r_ref_b)

    value = float(gap(a[None], b[None])[0])
    rng = np.random.default_rng(seed)
    draws = gap(rng.choice(a, (n_resamples, a.size)), rng.choice(b, (n_resamples, b.size)))
    draws = draws[np.isfinite(draws)]
    if not np.isfinite(value) or draws.size < n_resamples // 2:
        raise ValueError("the rank gap is undefined: a ranking is constant on most resamples")
    return _percentile(draws, value, ref.shape[1], level,
                       "percentile bootstrap within halves (split-half reliability minus proxy)")


def _columns_corr(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of matching columns (NaN for a constant column)."""
    x = x - x.mean(axis=0)
    y = y - y.mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * y).sum(axis=0) / np.sqrt((x * x).sum(axis=0) * (y * y).sum(axis=0))


def mean_interaction(pairs, singles, pair_heads, n_heads: int, *, min_effect: float = 0.0,
                     n_resamples: int = 1000, seed: int = 0) -> Estimate:
    """Mean over pairs (whose mean pair effect exceeds ``min_effect``) of the per-item interaction
    ``effect(a+b) - effect(a) - effect(b)``, with a bootstrap over items.

    Args:
        pairs: ``(n_pairs, n_items)`` effects of ablating both heads of each pair.
        singles: ``(n_layers * n_heads, n_items')`` single effects; their first ``n_items`` items
            are the pairs' items.
        pair_heads: ``[[(l, a), (l, b)], ...]``, one per row of ``pairs``.
        n_heads: heads per layer.
    """
    p = _effects(pairs, "pairs")
    s = np.asarray(singles, dtype=float)[:, :p.shape[1]]
    rows = []
    for k, (a, b) in enumerate(pair_heads):
        if p[k].mean() > min_effect:
            ia, ib = a[0] * n_heads + a[1], b[0] * n_heads + b[1]
            rows.append(p[k] - s[ia] - s[ib])
    if not rows:
        raise ValueError(f"no pair has a mean effect above {min_effect}")
    return stats.bootstrap_mean(np.mean(rows, axis=0), n_resamples=n_resamples, seed=seed)
