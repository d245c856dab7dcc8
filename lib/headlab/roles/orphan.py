"""Orphan heads: no pattern the catalogue names, yet removing them matters. The one definition.

**Definition.** Given a model, its texts and a metric (the next-token loss, a task margin, the
sentence embedding's cosine or retrieval loss: anything :func:`headlab.analysis.sweep.sweep`
takes), a head is an orphan when:

* **No named pattern**: on the *selection* texts, neither a family of the catalogue nor the local
  window reaches the calibrated lift threshold (the label rule's share, 0.4 of the free weight,
  raised to the 99% quantile of the lifts heads reach on decoy keys when that is higher:
  ``headlab.analysis.detect.calibration.calibrated_thresholds``).
* **Selection split**: among those unnamed heads, the candidates are the ones whose mean effect
  on the selection texts is at least ``threshold`` (1.0) times the mean effect of all heads there.
  The effect of a head on a text is ``|metric(head ablated) - metric(clean)|``.
* **Baseline and measurement**: on the *measurement* texts only, each candidate's effect is
  compared with **the mean head's** effect on the same text; the lead is averaged over texts with
  a paired bootstrap interval (texts are resampled, never tokens).
* A candidate **is** an orphan when that interval lies above 0 (:attr:`OrphanHead.is_orphan`).

The ranks of every head by measured effect come with bootstrap intervals
(:func:`headlab.stats.rank_intervals`), so "the head with the largest effect" is stated with how
often it is the largest. :func:`orphan_heads` runs everything from a model; :func:`orphans_from_effects`
applies the rule to effects and names already measured (a stored sweep, a report).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from headlab.analysis.detect.calibration import NULL_LEVEL, calibrated_thresholds, decoy_lifts
from headlab.analysis.detect.labels import lift
from headlab.analysis.detect.registry import broad_families, families, pattern_scores, score
from headlab.analysis.detect.scores import HeadScores, head_scores
from headlab.analysis.sweep import sweep
from headlab.heads.ablation import Ablation
from headlab.stats import Estimate, Ranks, Split, bootstrap_mean, paired_difference, rank_intervals, split_items

__all__ = ["ORPHAN_EFFECT", "OrphanHead", "Orphans", "named_heads", "orphans_from_effects", "orphan_heads"]

ORPHAN_EFFECT = 1.0  # a candidate's selection effect must be at least this many times the mean head's


@dataclass(frozen=True)
class OrphanHead:
    """One candidate orphan, chosen on the selection texts and measured on the others.

    Attributes:
        head: ``(layer, head)``.
        select_ratio: its selection effect over the mean head's there.
        effect: its mean effect on the measurement texts, with a bootstrap interval.
        lead: its effect minus the mean head's, paired over measurement texts.
        rank: its rank by measured effect (1 = largest), with ``rank_low``/``rank_high``, a 95%
            bootstrap interval.
    """

    head: tuple[int, int]
    select_ratio: float
    effect: Estimate
    lead: Estimate
    rank: int
    rank_low: int
    rank_high: int

    @property
    def is_orphan(self) -> bool:
        """Whether the interval of the lead over the mean head lies above 0."""
        return self.lead.low > 0


@dataclass(frozen=True)
class Orphans:
    """What :func:`orphan_heads` found.

    Attributes:
        candidates: every candidate, by measured effect (largest first, ties by head index).
        named: ``(n_layers, n_heads)`` bool: a family (or the local window) names the head.
        threshold: the lift threshold that named heads (from the decoy null).
        ranks: every head's rank by measured effect, with intervals (:class:`headlab.stats.Ranks`,
            heads in layer-major order).
        metric: the metric's name; ``mode``: the ablation.
        n_select, n_measure: texts on each side.
    """

    candidates: tuple[OrphanHead, ...]
    named: np.ndarray = field(repr=False)
    threshold: float = float("nan")
    ranks: Ranks | None = field(default=None, repr=False)
    metric: str = ""
    mode: str = ""
    n_select: int = 0
    n_measure: int = 0

    @property
    def heads(self) -> tuple[OrphanHead, ...]:
        """The candidates whose lead over the mean head holds on the measurement texts."""
        return tuple(c for c in self.candidates if c.is_orphan)

    def top(self) -> tuple[tuple[int, int], float, int, int]:
        """``(head, share of resamples in which it ranks first, rank low, rank high)`` of the head
        with the largest measured effect (ties by head index)."""
        if self.ranks is None:
            raise ValueError("no ranks were measured")
        n_heads = self.named.shape[1]
        i = int(np.lexsort((np.arange(self.ranks.rank.size), self.ranks.rank))[0])
        return divmod(i, n_heads), float(self.ranks.share_top[i]), int(self.ranks.low[i]), int(self.ranks.high[i])


def named_heads(scores: HeadScores, threshold: float, texts=None) -> np.ndarray:
    """``(n_layers, n_heads)`` bool: some family of the catalogue, or the local window, reaches the
    lift ``threshold`` on ``texts`` (positions; default all) of ``scores``."""
    idx = slice(None) if texts is None else torch.as_tensor(np.asarray(texts), dtype=torch.long)
    best = None
    for name in families() + broad_families():
        if name in scores.per_input and name in scores.uniform and scores.defined(name):
            m = scores.per_input[name][idx].nanmean(0)
            if bool(torch.isnan(m).all()):
                continue
            value = torch.nan_to_num(lift(m, float(scores.uniform[name][idx].nanmean())), nan=-np.inf)
            best = value if best is None else torch.maximum(best, value)
    if best is None:
        raise ValueError("no family score is defined on these texts")
    return (best >= threshold).numpy()


def orphans_from_effects(effects, named, split: Split, *, threshold: float = ORPHAN_EFFECT, lift_threshold=float("nan"),
                         metric: str = "", mode: str = "", level: float = 0.95, n_resamples: int = 9999,
                         seed: int = 0) -> Orphans:
    """The rule of the module on measured effects.

    Args:
        effects: ``(n_layers, n_heads, n_texts)`` per-text effects (absolute values are taken).
        named: ``(n_layers, n_heads)`` bool from :func:`named_heads` (on the selection texts).
        split: positions of the selection and measurement texts.
        threshold: a candidate's selection effect, in units of the mean head's.
        lift_threshold, metric, mode: recorded with the result.
        level, n_resamples, seed: of the intervals.
    """
    eff = np.abs(np.asarray(effects, dtype=float))
    named = np.asarray(named, dtype=bool)
    if eff.ndim != 3 or named.shape != eff.shape[:2]:
        raise ValueError(f"effects must be (n_layers, n_heads, n_texts) and named (n_layers, n_heads); got "
                         f"{eff.shape} and {named.shape}")
    sel, meas = np.asarray(split.select), np.asarray(split.measure)
    if max(sel.max(), meas.max()) >= eff.shape[2]:
        raise ValueError(f"the split indexes texts up to {max(sel.max(), meas.max())}, but there are {eff.shape[2]}")
    n_layers, n_heads = named.shape
    flat = eff.reshape(n_layers * n_heads, -1)
    sel_mean = flat[:, sel].mean(1)
    ratio = sel_mean / sel_mean.mean() if sel_mean.mean() > 0 else np.zeros_like(sel_mean)
    ranks = rank_intervals(flat[:, meas], level=level, seed=seed)
    baseline = flat[:, meas].mean(0)  # the mean head, per measurement text
    kw = dict(level=level, n_resamples=n_resamples, seed=seed)
    out = []
    for i in range(n_layers * n_heads):
        lh = divmod(i, n_heads)
        if named[lh] or not ratio[i] >= threshold:
            continue
        out.append(OrphanHead((int(lh[0]), int(lh[1])), float(ratio[i]), bootstrap_mean(flat[i, meas], **kw),
                              paired_difference(flat[i, meas], baseline, **kw), int(ranks.rank[i]),
                              int(ranks.low[i]), int(ranks.high[i])))
    out.sort(key=lambda c: (-round(c.effect.value, 12), c.head))
    return Orphans(tuple(out), named, float(lift_threshold), ranks, metric, mode, int(sel.size), int(meas.size))


def orphan_heads(hm, texts, metric=None, *, ablation: Ablation | str | None = None, split: Split | None = None,
                 threshold: float = ORPHAN_EFFECT, null_level: float = NULL_LEVEL, level: float = 0.95,
                 n_resamples: int = 9999, seed: int = 0, progress: bool = False) -> Orphans:
    """The orphan heads of ``hm`` on ``texts`` under ``metric`` (module docstring).

    Args:
        hm: the model.
        texts: texts or a token batch (the same inputs score the patterns and the effects).
        metric: anything :func:`headlab.analysis.sweep.sweep` takes (None: the model's own).
        ablation: how a head is removed (default zero; ``Ablation("mean", reference=texts)``...).
        split: selection and measurement texts (positions); default ``split_items(n_texts)``.
        threshold: a candidate's selection effect, in units of the mean head's.
        null_level: quantile of the decoy lifts that names a pattern.
        level, n_resamples, seed: of the intervals.
        progress: show the sweep's progress.
    """
    plain = [s for s in pattern_scores() if not score(s).on_repeats and "token_frequency" not in score(s).needs]
    scores = head_scores(hm, texts, scores=plain)
    split = split_items(scores.n_inputs) if split is None else split
    lift = calibrated_thresholds(decoy_lifts(hm, texts), split.select, level=null_level).lift
    named = named_heads(scores, lift, split.select)
    result = sweep(hm, texts, ablation=Ablation.of(ablation), metric=metric, progress=progress)
    return orphans_from_effects(result.by_head().numpy(), named, split, threshold=threshold, lift_threshold=lift,
                                metric=result.kind, mode=result.mode, level=level, n_resamples=n_resamples, seed=seed)
