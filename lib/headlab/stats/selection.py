"""Choosing a head honestly: select on one split and measure on the other, correct for
many comparisons, calibrate thresholds against a null, and say how stable a label or a
rank is under resampling of the items."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from headlab.stats.intervals import bootstrap_mean, paired_difference
from headlab.stats.results import Estimate

__all__ = ["Split", "split_items", "Selection", "select_and_measure", "holm", "benjamini_hochberg",
           "null_threshold", "Stability", "stability", "UNSTABLE", "Ranks", "rank_intervals"]

UNSTABLE = "unstable"


@dataclass(frozen=True)
class Split:
    """Two disjoint sets of items: one to select on, one to measure on.

    Attributes:
        select: positions (into the item list) of the items used to choose.
        measure: positions of the held-out items used to report.
        seed: the seed that made the split.
    """

    select: np.ndarray
    measure: np.ndarray
    seed: int


def _item_key(item) -> str:
    if isinstance(item, (bool, np.bool_)):
        raise ValueError(f"item ids must be strings or integers, not booleans ({item!r})")
    if isinstance(item, (int, np.integer)):
        return f"i:{int(item)}"
    if isinstance(item, str):
        return f"s:{item}"
    raise ValueError(f"item ids must be strings or integers (e.g. the sentence, or its index); got {item!r}")


def split_items(items: int | Sequence[str | int], *, fraction: float = 0.5, seed: int = 0) -> Split:
    """Split items into a selection half and a measurement half, deterministically.

    Items are ordered by ``sha256(seed, id)`` and the first ``round(fraction * n)`` go to
    selection: ids, not positions or machines, decide.

    Args:
        items: the item ids (sentences, or their indices), or a count ``n`` for ids ``0..n-1``.
        fraction: share of the items used for selection, strictly between 0 and 1.

    Returns:
        A :class:`Split` of positions into ``items``, each half sorted.

    Raises:
        ValueError: on duplicate ids, fewer than two items, or an empty side.
    """
    if isinstance(items, (int, np.integer)) and not isinstance(items, bool):
        ids: Sequence = range(int(items))
    else:
        ids = list(items)
    keys = [_item_key(i) for i in ids]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"item ids must be unique, {dup[2:]!r} appears twice: deduplicate the items first")
    n = len(keys)
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be strictly between 0 and 1; got {fraction}")
    k = int(round(fraction * n))
    if n < 2 or not 0 < k < n:
        raise ValueError(f"cannot split {n} items at fraction {fraction}: each side needs at least one item")
    digest = [hashlib.sha256(f"{seed}\x1f{key}".encode()).hexdigest() for key in keys]
    order = sorted(range(n), key=lambda i: digest[i])
    return Split(np.sort(np.array(order[:k], dtype=int)), np.sort(np.array(order[k:], dtype=int)), seed)


@dataclass(frozen=True)
class Selection:
    """A candidate chosen on one split and measured on the other.

    Attributes:
        candidate: index of the chosen candidate (row of the score matrix).
        in_sample: its mean score on the selection items (optimistic: it won there).
        measured: its mean score on the held-out items, with a bootstrap interval.
        lead: its held-out lead over the baseline (paired), when a baseline was given.
        split: the split used.
    """

    candidate: int
    in_sample: float
    measured: Estimate
    lead: Estimate | None
    split: Split


def select_and_measure(scores, split: Split, *, baseline=None, higher_is_better: bool = True,
                       level: float = 0.95, n_resamples: int = 9999, seed: int = 0) -> Selection:
    """Choose the best candidate on ``split.select`` and report it on ``split.measure``.

    Print ``measured`` (and ``lead``), never the upward-biased ``in_sample``.

    Args:
        scores: ``(n_candidates, n_items)``, e.g. each head's accuracy per sentence.
        split: from :func:`split_items` over the same items.
        baseline: optional ``(n_items,)``; ``lead`` is then the paired held-out difference.
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2:
        raise ValueError(f"scores must be (n_candidates, n_items); got shape {s.shape}")
    n_items = s.shape[1]
    both = np.concatenate([split.select, split.measure])
    if both.size == 0 or both.max() >= n_items or both.min() < 0:
        raise ValueError(f"the split indexes items up to {both.max()}, but scores has {n_items} items")
    if np.intersect1d(split.select, split.measure).size:
        raise ValueError("the split's halves overlap: make it with split_items")
    means = s[:, split.select].mean(axis=1)
    candidate = int(np.argmax(means) if higher_is_better else np.argmin(means))
    held = s[candidate, split.measure]
    measured = bootstrap_mean(held, level=level, n_resamples=n_resamples, seed=seed)
    lead = None
    if baseline is not None:
        base = np.asarray(baseline, dtype=float)
        if base.shape != (n_items,):
            raise ValueError(f"baseline must have one value per item ({n_items}); got shape {base.shape}")
        lead = paired_difference(held, base[split.measure], level=level, n_resamples=n_resamples, seed=seed)
    return Selection(candidate, float(means[candidate]), measured, lead, split)


def _pvalues(pvalues) -> np.ndarray:
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"pvalues must be a non-empty one-dimensional array; got shape {p.shape}")
    if not ((p >= 0) & (p <= 1)).all():
        raise ValueError(f"p-values must lie in [0, 1]; found {p[~((p >= 0) & (p <= 1))][0]}")
    return p


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence), in input order."""
    p = _pvalues(pvalues)
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (false-discovery-rate control), in input order.

    Computed by :func:`scipy.stats.false_discovery_control`.
    """
    return np.asarray(sps.false_discovery_control(_pvalues(pvalues), method="bh"), dtype=float)


def null_threshold(null, *, level: float = 0.95) -> float:
    """The score a head must exceed to beat the null at ``level``.

    The smallest null value ``t`` with at least ``level`` of the null at or below it (the
    inverted empirical CDF). The null: scores where no specialisation can exist (shuffled
    weights, random tokens, a permuted pattern). Label a head only when its score is > ``t``.
    """
    z = np.asarray(null, dtype=float).ravel()
    if z.size == 0 or not np.isfinite(z).all():
        raise ValueError("null must hold at least one finite value")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    return float(np.quantile(z, level, method="inverted_cdf"))


@dataclass(frozen=True)
class Stability:
    """How often a label (or a choice) survives resampling of the items.

    Attributes:
        value: the label on all items.
        share: share of bootstrap resamples that give the same label.
        threshold: the share required to call the label stable.
    """

    value: Hashable
    share: float
    n_resamples: int
    threshold: float

    @property
    def stable(self) -> bool:
        """Whether the label survived at least ``threshold`` of the resamples."""
        return self.share >= self.threshold

    @property
    def label(self) -> Hashable:
        """The label when stable, otherwise ``"unstable"``: what a chapter prints."""
        return self.value if self.stable else UNSTABLE


def stability(statistic: Callable[[np.ndarray], Hashable], n_items: int, *, n_resamples: int = 1000,
              threshold: float = 0.9, seed: int = 0) -> Stability:
    """Share of bootstrap resamples of the items in which ``statistic`` gives its full-data answer.

    Args:
        statistic: item positions (with repeats) -> a label, e.g. the id of the top head.
            Called once with ``np.arange(n_items)`` for the full-data label.
        threshold: share needed to call the label stable.
    """
    if n_items < 2:
        raise ValueError(f"stability needs at least two items; got {n_items}")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1]; got {threshold}")
    full = statistic(np.arange(n_items))
    rng = np.random.default_rng(seed)
    same = sum(statistic(rng.integers(0, n_items, n_items)) == full for _ in range(n_resamples))
    return Stability(full, same / n_resamples, n_resamples, threshold)


@dataclass(frozen=True)
class Ranks:
    """Every candidate's rank (1 = largest mean score) with a bootstrap interval.

    Attributes:
        rank: ranks on all items.
        low: lower end of each rank's interval (the best rank plausible).
        high: upper end (the worst rank plausible).
        share_top: share of resamples in which each candidate ranks first.
    """

    rank: np.ndarray
    low: np.ndarray
    high: np.ndarray
    share_top: np.ndarray
    n_resamples: int
    level: float


def _ranks(means: np.ndarray) -> np.ndarray:
    # rank 1 = largest; ties share the best rank
    return sps.rankdata(-means, method="min", axis=-1).astype(int)


def rank_intervals(scores, *, level: float = 0.95, n_resamples: int = 2000, seed: int = 0,
                   chunk: int = 250) -> Ranks:
    """Ranks of candidates by mean score, with percentile intervals over resampled items.

    Args:
        scores: ``(n_candidates, n_items)``, e.g. each head's ablation effect per sentence.
        chunk: resamples computed at once (bounds memory).
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2 or s.shape[1] < 2:
        raise ValueError(f"scores must be (n_candidates, n_items) with at least two items; got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite")
    n_items = s.shape[1]
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, n_resamples, chunk):
        idx = rng.integers(0, n_items, (min(chunk, n_resamples - start), n_items))
        out.append(_ranks(s[:, idx].mean(axis=-1).T))  # (chunk, n_candidates)
    boot = np.concatenate(out)
    alpha = (1 - level) / 2
    low = np.quantile(boot, alpha, axis=0, method="inverted_cdf").astype(int)
    high = np.quantile(boot, 1 - alpha, axis=0, method="inverted_cdf").astype(int)
    return Ranks(_ranks(s.mean(axis=1)), low, high, (boot == 1).mean(axis=0), n_resamples, level)
