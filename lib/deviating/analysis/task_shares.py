"""Which share of a task each head carries: the tasks of the synthetic language, by ablation.

The synthetic language (:mod:`deviating.data.language`) annotates three tasks a model must solve,
:data:`TASKS`: subject-verb agreement, pronoun resolution and copying. Each has an item finder
there and an item metric in :mod:`headlab.metrics`; :func:`margin_share_lost` puts the two
together and asks, head by head, how much of the task's margin is gone once the head is removed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from headlab.heads.ablation import Ablation
from deviating.data.language.metrics import agreement_metric, copy_metric, pronoun_metric

__all__ = ["TASKS", "busiest_windows", "TaskDrops", "margin_drops", "margin_share_lost"]

TASKS = ("agreement", "pronoun", "copy")


def _task(task: str):
    """``(find items, make metric)`` of a task of the synthetic language."""
    from deviating.data.language import agreement_items, copy_items, pronoun_items

    table = {"agreement": (agreement_items, agreement_metric), "pronoun": (pronoun_items, pronoun_metric),
             "copy": (copy_items, copy_metric)}
    if task not in table:
        raise ValueError(f"unknown task {task!r}: choose from {', '.join(TASKS)}")
    return table[task]


def busiest_windows(items, n_docs: int, k: int) -> list[int]:
    """The ``k`` windows (of ``0 .. n_docs - 1``) that hold the most ``items`` (each with ``doc``),
    in increasing order; between windows holding as many items, the earlier one is taken."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    count = [0] * n_docs
    for item in items:
        if not 0 <= item.doc < n_docs:
            raise ValueError(f"an item refers to window {item.doc}, outside 0..{n_docs - 1}")
        count[item.doc] += 1
    ranked = sorted(range(n_docs), key=lambda d: (-count[d], d))
    return sorted(d for d in ranked[:k] if count[d] > 0)


@dataclass(frozen=True)
class TaskDrops:
    """Per-window losses of a task's margin, head by head.

    Attributes:
        task: one of :data:`TASKS`.
        windows: the windows measured (positions into the documents given).
        clean: ``(n_windows,)`` the clean margin per window.
        drops: ``(n_layers, n_heads, n_windows)``: ``(m - m_h) / mean(m)`` per window, where ``m`` is
            the clean margin and ``m_h`` the margin with the head removed; its mean over windows is
            :func:`margin_share_lost`.
        mode: the ablation; ``score``: ``"margin"`` or ``"accuracy"``.
    """

    task: str
    windows: tuple[int, ...]
    clean: torch.Tensor
    drops: torch.Tensor
    mode: str
    score: str

    def share(self, windows=None) -> torch.Tensor:
        """``(n_layers, n_heads)``: the share of the margin lost, over ``windows`` (positions into
        :attr:`windows`; default all)."""
        d = self.drops if windows is None else self.drops[..., torch.as_tensor(list(windows), dtype=torch.long)]
        return d.mean(-1)


def margin_drops(hm, docs, task: str, n_windows: int = 16, *, ablation: Ablation | None = None,
                 score: str = "margin") -> TaskDrops:
    """Per window, the share of a task's clean margin that each head's removal takes away.

    On the ``n_windows`` windows that hold the most items of the task (:func:`busiest_windows`), the
    task's metric (``score="margin"``: the correct token's logit minus the best competitor's;
    ``"accuracy"``: the share of items right), averaged per window, is measured clean and with each
    head removed. The drop is normalised by the *mean* clean value over the windows, so that the
    mean of the drops is the share of :func:`margin_share_lost` and per-window values can be
    resampled (paired over windows) for intervals.

    Raises:
        ValueError: an unknown task, windows without items of the task, or a clean value that
            averages 0.
    """
    from headlab.analysis.sweep import sweep
    from deviating.data.language import encode

    find_items, make_metric = _task(task)
    docs = list(docs)
    chosen_ids = busiest_windows(find_items(docs), len(docs), n_windows)
    chosen = [docs[d] for d in chosen_ids]
    if not chosen:
        raise ValueError(f"the windows hold no {task} items")
    metric = make_metric(find_items(chosen), hm.tokenizer.get_vocab(), len(chosen), score=score)
    ids = encode(hm.tokenizer, chosen)
    result = sweep(hm, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, ablation=ablation,
                   metric=metric)
    clean = result.clean.mean()
    if float(clean) == 0.0:
        raise ValueError(f"the clean {task} {score} averages 0 on these windows: a share of it is undefined")
    return TaskDrops(task, tuple(chosen_ids), result.clean, -result.by_head() / clean, result.mode, score)


def margin_share_lost(hm, docs, task: str, n_windows: int = 16, *, ablation: Ablation | None = None
                      ) -> torch.Tensor:
    """``(n_layers, n_heads)``: the share of a task's margin that each head carries, by ablation.

    On the ``n_windows`` windows that hold the most items of the task (:func:`busiest_windows`),
    the task's ``"margin"`` metric (the correct token's logit minus the best competitor's,
    averaged per window) is measured clean, ``m``, and with each head removed in turn, ``m_h``.
    The share is ``(mean over windows of m - m_h) / (mean over windows of m)``: 0, the head does
    not matter to the task; 1, without it the margin is gone; negative, the head worked against
    the task.

    Args:
        hm: a model of the synthetic language.
        docs: windows of the synthetic language (``deviating.data.language.pack``).
        task: one of :data:`TASKS`.
        n_windows: how many windows to measure on.
        ablation: how a head is removed (default: zero ablation).

    Raises:
        ValueError: an unknown task, windows without items of the task, or a clean margin that
            averages 0 (a share of it is undefined).
    """
    return margin_drops(hm, docs, task, n_windows, ablation=Ablation.of(ablation)).share()
