"""Induction heads: one definition, both halves, used by every chapter, the report and the exercises.

An induction head completes ``A B … A`` with ``B``. That takes two things, and a head is called
an induction head only when both are measured:

1. **The attention half.** From a query whose token ``A`` occurred before, it attends to the
   token *after* the earlier ``A`` (:func:`headlab.analysis.detect.induction_score`). Its
   strength is the **lift** over uniform causal attention on the same inputs,
   ``(score - uniform) / (1 - uniform)`` per input (``headlab.analysis.detect.labels.lift``):
   0 for a head that attends no better than uniformly, 1 for a perfect one.
2. **The copying half.** What it reads there, it writes as a vote for the same token: through
   its OV circuit, the token ``t`` it attends to raises ``t``'s own logit
   (:func:`headlab.analysis.detect.ov_copying_score`: ``t`` among the ``COPY_K`` largest logits
   of the head's write when ``t`` is fed alone). The chance rate is ``COPY_K / d_vocab``.

.. rubric:: The rule

* Inputs: sequences in which tokens recur, *of the kind the model is used on* (for the
  attention-only organisms, their own repeated-span task; repeated random tokens are another
  distribution and are named as one). They are split in two halves by
  :func:`headlab.stats.split_items` (``seed``): heads are **selected** on one half (mean lift at
  least ``INDUCTION_LIFT``) and **measured** on the other (the mean lift with its 95% BCa
  bootstrap interval over inputs).
* Which queries count: every query whose token occurred earlier (at ``j < i - 1``). On text where
  common tokens recur by chance (a word such as *the*), a caller may count only the queries
  inside a real repeat -- the second copy of a repeated sentence, of a text given twice -- by
  passing ``queries``; the target, the baseline and the threshold stay the same, and the
  uniform baseline is computed on the same queries.
* The attention half holds for a head selected on the first half whose held-out interval lies
  at or above ``INDUCTION_LIFT``; a selected head whose interval reaches below it is reported as
  *borderline*, never silently kept or dropped.
* The copying half holds when the lower end of the exact (Clopper–Pearson) 95% interval of the
  copying share over the vocabulary's tokens is at least ``COPY_SHARE``.
* An **induction head** is a head for which both halves hold. For an encoder (no unembedding)
  the copying half cannot be measured: such a model has heads that *attend* like induction
  heads, and the result says that copying was not tested.

``INDUCTION_LIFT`` (0.3) is defined once, with the label rule
(``headlab.analysis.detect.labels``): the atlas labels a head ``induction`` when its lift, in
sample on the atlas's repeated random tokens, reaches the same bar. The label is the attention
half on the atlas's texts; this role adds the held-out split and the copying half.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy import stats as sps

from headlab import stats
from headlab.analysis.detect import (
    NotApplicable, induction_score, lift, ov_copying_score, previous_occurrence, uniform_pattern, unembedding,
)
from headlab.analysis.detect.base import mean_over
from headlab.analysis.detect.labels import INDUCTION_LIFT  # the attention half's bar, the atlas label's too
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head, format_head
from headlab.stats.results import Estimate

__all__ = ["INDUCTION_LIFT", "COPY_K", "COPY_SHARE", "InductionHeads", "induction_lifts", "copying_half",
           "induction_heads", "Dependence", "induction_dependence"]

COPY_K = 5             # copying half: the token read is among the head's 5 largest logits ...
COPY_SHARE = 0.5       # ... for at least half of the vocabulary (lower end of the exact 95% interval)


def _check_queries(queries, ids: torch.Tensor) -> torch.Tensor | None:
    if queries is None:
        return None
    q = torch.as_tensor(queries)
    if q.dtype != torch.bool:
        raise ValueError(f"queries must be a bool mask (n_inputs, pos), True where a query counts; got dtype {q.dtype}")
    if tuple(q.shape) != tuple(ids.shape):
        raise ValueError(f"queries must have the inputs' shape {tuple(ids.shape)} (n_inputs, pos); got {tuple(q.shape)}")
    return q.cpu()


def _score(pattern: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, queries: torch.Tensor | None) -> torch.Tensor:
    """:func:`headlab.analysis.detect.induction_score`, counting only ``queries`` when given."""
    if queries is None:
        return induction_score(pattern, ids, mask)
    real = mask.bool()
    tokens = torch.where(real, ids, -1 - torch.arange(ids.shape[1]).expand_as(ids))  # padding matches nothing
    prev = previous_occurrence(tokens)  # (n_inputs, q_pos)
    index = (prev + 1).clamp(min=0)[:, None, :, None].expand(-1, pattern.shape[1], -1, 1)
    weights = pattern.gather(-1, index).squeeze(-1)  # (n_inputs, head, q_pos)
    return mean_over(weights, real & (prev >= 0) & queries, "raise",
                     "query that is both repeated (a token seen earlier at j < i - 1) and in queries")


def induction_lifts(hm, inputs, queries=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-input induction scores and lifts of every head.

    Args:
        hm: a :class:`~headlab.heads.model.HeadModel`.
        inputs: texts or a batch in which every input has a recurring token.
        queries: optional ``(n_inputs, pos)`` bool mask of the inputs' tokenized positions: only
            these queries count (see the module docstring); default every repeated token.

    Returns:
        ``(scores, lifts)``, each ``(n_inputs, n_layers, n_heads)`` float64; ``lifts`` is the
        lift over uniform causal attention (an encoder: over uniform attention on every key) on
        the same input and queries.
    """
    batch = hm.tokenize(inputs)
    with torch.no_grad():
        _, cache = hm.run_with_cache(batch, names=("pattern",))
    ids, mask = cache.input_ids.cpu(), cache.attention_mask.cpu()
    queries = _check_queries(queries, ids)
    uniform = uniform_pattern(mask, causal=hm.causal)
    base = _score(uniform, ids, mask, queries)[:, 0].double()  # (n_inputs,)
    scores = torch.stack([_score(cache.pattern(l).float().cpu(), ids, mask, queries).double()
                          for l in range(hm.n_layers)], dim=1)  # (n_inputs, n_layers, n_heads)
    return scores, lift(scores, base[:, None, None])


def copying_half(hm, k: int = COPY_K, level: float = 0.95) -> dict[Head, Estimate]:
    """The copying share of every head with its exact interval (see the module docstring).

    Raises:
        NotApplicable: for an encoder, which has no unembedding to read a write through.
    """
    d_vocab = unembedding(hm).W_U.shape[1]  # raises NotApplicable for an encoder
    if hm.tokenizer is not None:
        special = set(getattr(hm.tokenizer, "all_special_ids", []) or [])
        tokens = torch.tensor([i for i in range(min(d_vocab, len(hm.tokenizer))) if i not in special])
    else:
        tokens = torch.arange(d_vocab)
    share = ov_copying_score(hm, tokens=tokens, k=k)  # (n_layers, n_heads)
    n = len(tokens)
    out = {}
    for l in range(hm.n_layers):
        for h in range(hm.n_heads):
            hits = int(round(float(share[l, h]) * n))
            out[Head(l, h)] = stats.proportion(hits, n, level=level)
    return out


@dataclass(frozen=True)
class InductionHeads:
    """Which heads are induction heads on some inputs, and the numbers behind the decision.

    Attributes:
        model: the model's name.
        heads: the induction heads (both halves hold), in head order.
        attends: heads whose attention half holds.
        borderline: heads selected on the first half whose held-out interval reaches below the
            threshold.
        copies: heads whose copying half holds (empty when copying was not tested).
        selected: heads whose mean lift on the selection half reaches the threshold.
        lift: every head's held-out mean lift with its interval.
        copying: every head's copying share with its interval (empty for an encoder).
        uniform: uniform attention's mean induction score on the inputs (the baseline).
        chance: the copying share of a write that favours no token, ``COPY_K / d_vocab``.
        split: the selection and measurement halves (input indices).
        copying_tested: False when the model has no unembedding.
        thresholds: the thresholds used.
    """

    model: str
    heads: tuple[Head, ...]
    attends: tuple[Head, ...]
    borderline: tuple[Head, ...]
    copies: tuple[Head, ...]
    selected: tuple[Head, ...]
    lift: dict[Head, Estimate]
    copying: dict[Head, Estimate]
    uniform: float
    chance: float
    split: stats.Split
    copying_tested: bool
    thresholds: dict[str, float] = field(default_factory=dict)

    def names(self, which: str = "heads") -> str:
        """The heads of ``which`` (``"heads"``, ``"attends"``, ``"borderline"``, ``"copies"``) as ``"1.1, 1.3"``."""
        if which not in ("heads", "attends", "borderline", "copies", "selected"):
            raise ValueError(f"which must be heads, attends, borderline, copies or selected; got {which!r}")
        found = getattr(self, which)
        return ", ".join(format_head(h) for h in found) if found else "none"

    def to_json(self) -> dict[str, Any]:
        """The result as plain JSON values (heads as ``[layer, head]``)."""
        def est(e: Estimate) -> dict:
            return {"value": e.value, "low": e.low, "high": e.high, "n": e.n}

        return {
            "model": self.model, "heads": [list(h) for h in self.heads], "attends": [list(h) for h in self.attends],
            "borderline": [list(h) for h in self.borderline], "copies": [list(h) for h in self.copies],
            "selected": [list(h) for h in self.selected], "uniform": self.uniform, "chance": self.chance,
            "copying_tested": self.copying_tested, "thresholds": dict(self.thresholds),
            "lift": [{"head": list(h), **est(e)} for h, e in self.lift.items()],
            "copying": [{"head": list(h), **est(e)} for h, e in self.copying.items()],
        }


def induction_heads(hm, inputs, *, queries=None, threshold: float = INDUCTION_LIFT, copy_k: int = COPY_K,
                    copy_share: float = COPY_SHARE, seed: int = 0, level: float = 0.95,
                    n_resamples: int = 2000) -> InductionHeads:
    """The induction heads of ``hm`` on ``inputs``, by the rule of :mod:`headlab.roles.induction`.

    Args:
        hm: the model.
        inputs: texts or a batch with recurring tokens, at least four inputs (two per half).
        queries: only these queries count (``(n_inputs, pos)`` bool, see the module docstring).
        threshold: the lift the attention half needs (``INDUCTION_LIFT``).
        copy_k: how high the token read must rank among the write's logits (``COPY_K``).
        copy_share: the share of tokens for which it must (``COPY_SHARE``).
        seed: the split of the inputs into a selection and a measurement half, and the bootstrap.
        level: the confidence level of the intervals.
        n_resamples: bootstrap resamples per head.

    Returns:
        An :class:`InductionHeads`.
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold is a lift in (0, 1); got {threshold!r}")
    if not 0.0 < copy_share <= 1.0:
        raise ValueError(f"copy_share is a share of tokens in (0, 1]; got {copy_share!r}")
    _, lifts = induction_lifts(hm, inputs, queries)
    n = lifts.shape[0]
    if n < 4:
        raise ValueError(f"induction_heads needs at least 4 inputs (a selection and a measurement half of "
                         f"two or more); got {n}")
    split = stats.split_items(n, seed=seed)
    flat = lifts.numpy()
    heads = [Head(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    selected, held = [], {}
    for head in heads:
        values = flat[:, head.layer, head.head]
        if values[split.select].mean() >= threshold:
            selected.append(head)
        held[head] = stats.bootstrap_mean(values[split.measure], level=level, n_resamples=n_resamples, seed=seed)
    attends = tuple(h for h in selected if held[h].low >= threshold)
    borderline = tuple(h for h in selected if held[h].low < threshold)
    try:
        copying = copying_half(hm, k=copy_k, level=level)
        tested = True
    except NotApplicable:
        copying, tested = {}, False
    copies = tuple(h for h in heads if tested and copying[h].low >= copy_share)
    d_vocab = unembedding(hm).W_U.shape[1] if tested else None
    batch = hm.tokenize(inputs)
    ids, mask = batch["input_ids"].cpu(), batch["attention_mask"].cpu()
    uniform = uniform_pattern(mask, causal=hm.causal)
    base = float(_score(uniform, ids, mask, _check_queries(queries, ids))[:, 0].mean())
    return InductionHeads(
        model=hm.name, heads=tuple(h for h in attends if h in copies), attends=attends, borderline=borderline,
        copies=copies, selected=tuple(selected), lift=held, copying=copying, uniform=base,
        chance=(copy_k / d_vocab) if d_vocab else float("nan"), split=split, copying_tested=tested,
        thresholds={"lift": threshold, "copy_k": copy_k, "copy_share": copy_share},
    )



# ------------------------------------------------------ how much an induction head needs a head


@dataclass(frozen=True)
class Dependence:
    """How much one head's induction score falls when other heads are ablated, on the same inputs.

    Attributes:
        head: the head whose induction score is measured.
        clean: its mean induction score (bootstrap interval over inputs).
        ablated: the same with the ablated heads removed.
        drop: ``clean - ablated`` (paired interval).
        relative: ``1 - mean(ablated) / mean(clean)``, the share of the score lost (paired
            bootstrap interval of the ratio of means).
    """

    head: Head
    clean: Estimate
    ablated: Estimate
    drop: Estimate
    relative: Estimate


def _relative_drop(clean: np.ndarray, ablated: np.ndarray, level: float, n_resamples: int, seed: int) -> Estimate:
    def statistic(c, a, axis=-1):
        return 1.0 - np.mean(a, axis=axis) / np.mean(c, axis=axis)

    value = float(statistic(clean, ablated))
    kind = "BCa" if len(clean) >= stats.BCA_MIN_UNITS else "percentile"  # no BCa on a handful of inputs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.bootstrap((clean, ablated), statistic, paired=True, vectorized=True, confidence_level=level,
                            n_resamples=n_resamples, method=kind, rng=np.random.default_rng(seed))
    low, high = (float(v) for v in res.confidence_interval)
    if not (np.isfinite(low) and np.isfinite(high)):
        low, high = (float(v) for v in np.quantile(res.bootstrap_distribution, [(1 - level) / 2, (1 + level) / 2]))
        kind = "percentile"
    # the interval as it is: a point outside its own interval says the ratio is biased on these inputs
    return Estimate(value, low, high, len(clean), level,
                    f"paired {kind} bootstrap of the ratio of means over {len(clean)} inputs")


def induction_dependence(hm, inputs, removed: Sequence[Head], heads: Sequence[Head], *,
                         items: Sequence[int] | None = None, queries=None, ablation: Ablation | None = None,
                         level: float = 0.95, n_resamples: int = 2000, seed: int = 0) -> dict[Head, Dependence]:
    """How much each of ``heads`` loses of its induction score when ``removed`` are ablated.

    The one computation behind "ablating 0.0 cuts the induction scores by ..." wherever the
    book says it (chapter 5; the checklist report of chapter 9): the induction score
    (:func:`headlab.analysis.detect.induction_score`) of each head in ``heads``, per input,
    clean and with ``removed`` ablated (``ablation``, default zero ablation), with intervals
    from a paired bootstrap over inputs. The input distribution is part of the answer: quote
    it with the number.

    Args:
        hm: the model.
        inputs: texts or a batch with recurring tokens.
        removed: the heads to ablate (e.g. a previous-token head).
        heads: the heads whose scores are measured (e.g. :attr:`InductionHeads.heads`), each in
            a layer above every removed head.
        items: only these inputs (e.g. ``InductionHeads.split.measure``, the half the heads were
            not selected on); default all.
        queries: only these queries count (``(n_inputs, pos)`` bool over all the inputs, before
            ``items`` picks some; see the module docstring).
        ablation: zero (default), mean or resample ablation.
        level: confidence level.
        n_resamples: bootstrap resamples.
        seed: the bootstrap's seed.

    Returns:
        ``{head: Dependence}`` in the order of ``heads``.
    """
    removed = [Head(*h) for h in hm.check_heads(list(removed))]
    heads = [Head(*h) for h in hm.check_heads(list(heads))]
    if not removed or not heads:
        raise ValueError("give at least one head to remove and one head to measure")
    lowest = min(h.layer for h in removed)
    late = [h for h in heads if h.layer <= lowest]
    if late:
        raise ValueError(f"head {format_head(late[0])} is not above every removed head: an ablation only reaches "
                         "the layers after it, so its score cannot change")
    batch = hm.tokenize(inputs)
    queries = _check_queries(queries, batch["input_ids"])
    if items is not None:
        idx = torch.as_tensor(list(items), dtype=torch.long)
        if idx.numel() < 2:
            raise ValueError(f"items must name at least two inputs; got {idx.numel()}")
        batch = {k: v[idx] for k, v in batch.items()}
        queries = None if queries is None else queries[idx.cpu()]
    clean, _ = induction_lifts(hm, batch, queries)
    with hm.ablate(removed, ablation=ablation):
        ablated, _ = induction_lifts(hm, batch, queries)
    out = {}
    for head in heads:
        c = clean[:, head.layer, head.head].numpy()
        a = ablated[:, head.layer, head.head].numpy()
        if c.mean() <= 0:
            raise ValueError(f"head {format_head(head)} has a clean induction score of 0 on these inputs: "
                             "its relative drop is undefined")
        out[head] = Dependence(
            head, stats.bootstrap_mean(c, level=level, n_resamples=n_resamples, seed=seed),
            stats.bootstrap_mean(a, level=level, n_resamples=n_resamples, seed=seed),
            stats.paired_difference(c, a, level=level, n_resamples=n_resamples, seed=seed),
            _relative_drop(c, a, level, n_resamples, seed))
    return out
