"""Syntactic and coreference heads, checked against ground truth.

A relation is a gold matrix ``targets`` ``(batch, q_pos, k_pos)`` of bools: each annotated
query's correct key(s), e.g. a verb's subject. A head *points at* a target when its largest
weight on a target is strictly larger than on every other real key (ties miss). Report each
accuracy beside the best fixed offset (:func:`offset_baseline`) and, for coreference, the
nearest preceding noun (:func:`nearest_preceding`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from headlab.analysis.detect.base import check_pattern

VERB_SUBJECT = "verb->subject"
SUBJECT_VERB = "subject->verb"
PRONOUN_ANTECEDENT = "pronoun->antecedent"


# ------------------------------------------------------------------ gold matrices


def pointer_targets(pointers, reverse: bool = False) -> torch.Tensor:
    """Gold matrix ``(batch, pos, pos)`` from pointers ``(batch, pos)`` (``-1`` = none).

    ``pointers[b, i] = j`` makes ``j`` the target of query ``i``; ``reverse=True`` flips
    every arrow (a query can then have several targets).
    """
    pointers = torch.as_tensor(pointers, dtype=torch.long)
    if pointers.dim() == 1:
        pointers = pointers[None]
    if pointers.dim() != 2:
        raise ValueError(f"pointers must be (batch, pos), got shape {tuple(pointers.shape)}")
    batch, pos = pointers.shape
    if bool(((pointers < -1) | (pointers >= pos)).any()):
        raise ValueError(f"pointers must be -1 (none) or a position in 0..{pos - 1}")
    gold = torch.zeros(batch, pos, pos, dtype=torch.bool)
    b, i = torch.nonzero(pointers >= 0, as_tuple=True)
    j = pointers[b, i]
    if reverse:
        gold[b, j, i] = True
    else:
        gold[b, i, j] = True
    return gold


def _gold(targets: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Validate ``targets`` (gold matrix or pointers) and keep real keys of real queries only."""
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets must be a tensor (a (batch, q, k) bool matrix or (batch, pos) pointers), "
                        f"got {type(targets).__name__}")
    if targets.dim() == 2 and not targets.dtype == torch.bool:
        targets = pointer_targets(targets)
    batch, pos = real.shape
    if tuple(targets.shape) != (batch, pos, pos):
        raise ValueError(f"targets must be (batch, q_pos, k_pos) = {(batch, pos, pos)} bools or "
                         f"(batch, pos) = {(batch, pos)} pointers, got {tuple(targets.shape)}")
    targets = targets.to(real.device).bool()
    return targets & real[:, :, None] & real[:, None, :]


def visible_targets(targets: torch.Tensor, causal: bool) -> torch.Tensor:
    """For a causal model, drop the targets a query cannot see (keys after it); else unchanged."""
    if not causal:
        return targets
    pos = targets.shape[-1]
    return targets & torch.ones(pos, pos, dtype=torch.bool, device=targets.device).tril()


def nearest_preceding(candidates: torch.Tensor) -> torch.Tensor:
    """For each position ``i``, the nearest ``j < i`` with ``candidates[b, j]``, else -1: ``(batch, pos)``."""
    candidates = torch.as_tensor(candidates).bool()
    pos = candidates.shape[-1]
    idx = torch.arange(pos)
    before = idx[None, :] < idx[:, None]  # (q_pos, k_pos): j < i
    options = torch.where(before[None] & candidates[:, None, :], idx, torch.full_like(idx, -1))
    return options.max(-1).values  # (batch, pos)


# --------------------------------------------------------------------- accuracies


def _hit_matrix(pattern: torch.Tensor, targets: torch.Tensor, attention_mask: torch.Tensor | None,
                ignore_keys: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hit (batch, head, q_pos), items (batch, q_pos))`` for :func:`relation_hits` and
    :func:`query_hits`."""
    real = check_pattern(pattern, attention_mask)
    gold = _gold(targets, real)  # (batch, q_pos, k_pos)
    keys = real
    if ignore_keys is not None:
        if tuple(ignore_keys.shape) != tuple(real.shape):
            raise ValueError(f"ignore_keys must be (batch, pos) = {tuple(real.shape)}, got {tuple(ignore_keys.shape)}")
        keys = real & ~ignore_keys.to(real.device).bool()
        gold = gold & keys[:, None, :]
    items = gold.any(-1)  # (batch, q_pos)
    neg_inf = torch.tensor(float("-inf"), dtype=pattern.dtype, device=pattern.device)
    on_gold = torch.where(gold[:, None], pattern, neg_inf).amax(-1)  # (batch, head, q_pos)
    other = keys[:, None, :] & ~gold  # (batch, q_pos, k_pos)
    off_gold = torch.where(other[:, None], pattern, neg_inf).amax(-1)  # (batch, head, q_pos)
    return (on_gold > off_gold) & items[:, None, :], items


def relation_hits(pattern: torch.Tensor, targets: torch.Tensor, attention_mask: torch.Tensor | None = None,
                  ignore_keys: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hits (batch, head), items (batch,))``: how many annotated queries each head points
    right, and how many annotated queries (real queries with a real target) each input has.

    ``ignore_keys`` ``(batch, pos)``: keys left out of the comparison (e.g. ``[CLS]``).
    """
    hit, items = _hit_matrix(pattern, targets, attention_mask, ignore_keys)
    return hit.sum(-1), items.sum(-1)


def query_hits(pattern: torch.Tensor, targets: torch.Tensor,
                      attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Every annotated query on its own: ``(hits (n_queries, head) bool, where (n_queries, 2))``.

    ``where[i] = (input, query position)`` of the ``i``-th annotated query, in that order;
    ``hits[i, h]``: head ``h`` points at a target of that query.
    """
    hit, items = _hit_matrix(pattern, targets, attention_mask, None)
    where = torch.nonzero(items)  # (n_queries, 2), row-major: by input, then position
    return hit[where[:, 0], :, where[:, 1]], where


def relation_accuracy(pattern: torch.Tensor, targets: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      *, pooled: bool = False, ignore_keys: torch.Tensor | None = None,
                      on_empty: str = "raise") -> torch.Tensor:
    """Relation accuracy: the fraction of annotated queries whose argmax key is a target.

    Returns ``(batch, head)`` (inputs with no annotated query raise, or are NaN with
    ``on_empty="nan"``), or with ``pooled=True`` ``(head,)`` over all items of the batch.
    ``targets``: a gold matrix or pointers (:func:`pointer_targets`).
    """
    hits, items = relation_hits(pattern, targets, attention_mask, ignore_keys)
    if pooled:
        total = int(items.sum())
        if total == 0:
            raise ValueError("no annotated query (with a real target) in the batch: the accuracy is undefined")
        return hits.sum(0).to(torch.float64) / total
    if on_empty not in ("raise", "nan"):
        raise ValueError(f"on_empty must be 'raise' or 'nan', got {on_empty!r}")
    if on_empty == "raise" and bool((items == 0).any()):
        raise ValueError(f"inputs {torch.nonzero(items == 0).flatten().tolist()} have no annotated query; "
                         "pass on_empty='nan' to get NaN for them")
    return hits.to(torch.float64) / items[:, None]


@dataclass(frozen=True)
class OffsetBaseline:
    """The best fixed offset for a relation: always point at ``query + offset``.

    ``accuracies`` maps every offset tried to its accuracy on the same items.
    """

    offset: int
    accuracy: float
    n_items: int
    accuracies: dict[int, float] = field(repr=False)


def offset_baseline(targets: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    offsets: Sequence[int] | None = None) -> OffsetBaseline:
    """The accuracy of always pointing at ``query + k``, for the best ``k``, pooled over all
    annotated queries (real queries with a real target). ``offsets`` defaults to every
    non-zero offset that fits; ties go to the smaller ``|k|``, then to the negative one.
    """
    targets = torch.as_tensor(targets)
    if targets.dim() == 2 and targets.dtype != torch.bool:
        targets = pointer_targets(targets)
    batch, pos = targets.shape[0], targets.shape[1]
    real = torch.ones(batch, pos, dtype=torch.bool) if attention_mask is None else attention_mask.bool().cpu()
    gold = _gold(targets.cpu(), real)
    items = gold.any(-1)  # (batch, q_pos)
    n_items = int(items.sum())
    if n_items == 0:
        raise ValueError("no annotated query (with a real target): the offset baseline is undefined")
    if offsets is None:
        offsets = [k for k in range(-(pos - 1), pos) if k != 0]
    accuracies = {}
    for k in offsets:
        hit = gold.diagonal(offset=int(k), dim1=-2, dim2=-1) if abs(k) < pos else torch.zeros(batch, 0, dtype=torch.bool)
        accuracies[int(k)] = float(hit.sum()) / n_items  # gold[b, i, i + k] only where it exists
    best = min(accuracies, key=lambda k: (-accuracies[k], abs(k), k))
    return OffsetBaseline(best, accuracies[best], n_items, accuracies)


def prediction_accuracy(targets: torch.Tensor, predicted: torch.Tensor,
                        attention_mask: torch.Tensor | None = None) -> float:
    """Pooled accuracy of a fixed prediction per query (``predicted`` ``(batch, pos)`` pointers,
    ``-1`` = no prediction, which counts as a miss) on the annotated queries of ``targets``."""
    targets = torch.as_tensor(targets)
    if targets.dim() == 2 and targets.dtype != torch.bool:
        targets = pointer_targets(targets)
    batch, pos = targets.shape[0], targets.shape[1]
    real = torch.ones(batch, pos, dtype=torch.bool) if attention_mask is None else attention_mask.bool().cpu()
    gold = _gold(targets.cpu(), real)
    items = gold.any(-1)
    n_items = int(items.sum())
    if n_items == 0:
        raise ValueError("no annotated query (with a real target): the accuracy is undefined")
    predicted = torch.as_tensor(predicted, dtype=torch.long).cpu()
    if tuple(predicted.shape) != (batch, pos):
        raise ValueError(f"predicted must be (batch, pos) = {(batch, pos)}, got {tuple(predicted.shape)}")
    hit = gold.gather(-1, predicted.clamp(min=0)[..., None]).squeeze(-1) & (predicted >= 0) & items
    return float(hit.sum()) / n_items
