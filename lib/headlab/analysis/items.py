"""Item metrics: turn the synthetic language's annotated items into per-input metrics.

The language module (:mod:`headlab.data.language`) emits *items*: at position ``pos``
of window ``doc``, the model should prefer one token (the agreeing verb, the
right pronoun, the copied token) over others. :class:`ItemMetric` scores every
item of a window at once from the model's logits and averages them per window,
so it can be handed to :func:`headlab.analysis.sweep.sweep`, :func:`headlab.analysis.prune.pruning_curve`
and friends as ``kind=`` — one value per input, under any ablation.

Two scores per item:

* ``"accuracy"``: 1 if the correct token's logit beats every competitor's, else 0
  (ties count as wrong);
* ``"margin"``: correct logit minus the largest competitor logit (smooth, so
  small effects show).

For items whose competitors are "every other token" (copying), use
``competitors=None``: the item is right when the correct token is the argmax.

:func:`margin_share_lost` puts the pieces together for one task of the language: which share
of the task's margin each head carries, by ablation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch

__all__ = ["ItemMetric", "agreement_metric", "pronoun_metric", "copy_metric", "TASKS", "busiest_windows",
           "margin_share_lost"]


@dataclass
class ItemMetric:
    """A per-window metric over annotated items.

    Attributes:
        doc: ``(n_items,)`` window index of each item.
        pos: ``(n_items,)`` position whose logits make the prediction.
        correct: ``(n_items,)`` token id that should win.
        competitors: ``(n_items, max_competitors)`` token ids it must beat, padded with -1;
            ``None``: it must beat every other token (argmax).
        score: ``"accuracy"`` or ``"margin"``.
        n_windows: how many windows the inputs hold (items must index into them).
    """

    doc: torch.Tensor
    pos: torch.Tensor
    correct: torch.Tensor
    competitors: torch.Tensor | None
    n_windows: int
    score: str = "accuracy"

    def __post_init__(self) -> None:
        if self.score not in ("accuracy", "margin"):
            raise ValueError(f"score must be 'accuracy' or 'margin', not {self.score!r}")
        if len(self.doc) == 0:
            raise ValueError("no items: the metric would be undefined")
        if int(self.doc.max()) >= self.n_windows or int(self.doc.min()) < 0:
            raise ValueError(f"items refer to windows outside 0..{self.n_windows - 1}")
        self.__name__ = f"item_{self.score}"

    def restricted(self) -> tuple[torch.Tensor, "ItemMetric"]:
        """``(windows, metric)``: the windows that hold at least one item (the others would score
        NaN), and this metric re-indexed to them — run it on ``ids[windows]``."""
        windows, doc = torch.unique(self.doc, return_inverse=True)
        return windows, ItemMetric(doc, self.pos, self.correct, self.competitors, len(windows), self.score)

    def per_item(self, logits: torch.Tensor) -> torch.Tensor:
        """Scores of every item for logits ``(n_windows, pos, d_vocab)`` of the untiled windows."""
        return self._scores(logits, self.doc, torch.arange(len(self.doc)))

    def _scores(self, logits: torch.Tensor, rows: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Score items ``items`` read from logit rows ``rows`` (equal lengths)."""
        dev = logits.device
        items = items.to(dev)
        at = logits[rows.to(dev), self.pos.to(dev)[items]].float()  # (n, d_vocab)
        correct = self.correct.to(dev)[items][:, None]
        right = at.gather(1, correct)[:, 0]
        if self.competitors is None:
            best_other = at.scatter(1, correct, float("-inf")).max(dim=1).values
        else:
            comp = self.competitors.to(dev)[items]
            best_other = at.gather(1, comp.clamp_min(0)).masked_fill(comp < 0, float("-inf")).max(dim=1).values
        margin = right - best_other
        return (margin > 0).float() if self.score == "accuracy" else margin

    def __call__(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Per-row mean item score for a (possibly tiled) batch of the windows; rows whose window
        holds no item get NaN. Row ``r`` of tile ``t`` holds window ``r - t * n_windows`` (the tiling
        of :func:`headlab.analysis.sweep.sweep`)."""
        n = self.n_windows
        if output.shape[0] % n:
            raise ValueError(f"the metric was built for {n} windows; the batch has {output.shape[0]} rows")
        k = output.shape[0] // n
        dev = output.device
        # an item of window d lives in rows d + n * t, t = 0..k-1
        rows = (self.doc.to(dev)[:, None] + n * torch.arange(k, device=dev)).flatten()
        items = torch.arange(len(self.doc), device=dev).repeat_interleave(k)
        values = self._scores(output, rows, items)
        total = torch.zeros(output.shape[0], device=dev).index_add_(0, rows, values)
        count = torch.zeros(output.shape[0], device=dev).index_add_(0, rows, torch.ones_like(values))
        return total / count  # NaN (0/0) where a window holds no item


def _ids(vocab: Mapping[str, int], words: Iterable[str]) -> list[int]:
    out = []
    for w in words:
        if w not in vocab:
            raise ValueError(f"token {w!r} is not in the tokenizer's vocabulary")
        out.append(vocab[w])
    return out


def _padded(rows: Sequence[Sequence[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [-1] * (width - len(r)) for r in rows], dtype=torch.long)


def agreement_metric(items, vocab: Mapping[str, int], n_windows: int, score: str = "accuracy") -> ItemMetric:
    """Subject-verb agreement: the verb form in the text against the same verb in the other number."""
    items = list(items)
    return ItemMetric(torch.tensor([i.doc for i in items]), torch.tensor([i.pos for i in items]),
                      torch.tensor(_ids(vocab, (i.correct for i in items))),
                      _padded([_ids(vocab, [i.wrong]) for i in items]), n_windows, score)


def pronoun_metric(items, vocab: Mapping[str, int], n_windows: int, score: str = "accuracy") -> ItemMetric:
    """Pronoun resolution: the right pronoun against the other forms of its case."""
    items = list(items)
    return ItemMetric(torch.tensor([i.doc for i in items]), torch.tensor([i.pos for i in items]),
                      torch.tensor(_ids(vocab, (i.correct for i in items))),
                      _padded([_ids(vocab, i.alternatives) for i in items]), n_windows, score)


def copy_metric(items, vocab: Mapping[str, int], n_windows: int, score: str = "accuracy") -> ItemMetric:
    """Copying (repeated spans, rare words): the target must be the argmax over the vocabulary."""
    items = list(items)
    return ItemMetric(torch.tensor([i.doc for i in items]), torch.tensor([i.pos for i in items]),
                      torch.tensor(_ids(vocab, (i.target for i in items))), None, n_windows, score)


TASKS = ("agreement", "pronoun", "copy")


def _task(task: str):
    """``(find items, make metric)`` of a task of the synthetic language."""
    from headlab.data.language import agreement_items, copy_items, pronoun_items

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


def margin_share_lost(hm, docs, task: str, n_windows: int = 16, mode: str = "zero") -> torch.Tensor:
    """``(n_layers, n_heads)``: the share of a task's margin that each head carries, by ablation.

    ``docs``: windows of the synthetic language (``headlab.data.language.pack``); ``task``: one of
    :data:`TASKS`. On the ``n_windows`` windows that hold the most items of the task
    (:func:`busiest_windows`), the task's ``"margin"`` metric (the correct token's logit minus
    the best competitor's, averaged per window) is measured clean, ``m``, and with each head
    ablated in turn (``mode``, as in :func:`headlab.analysis.sweep.sweep`), ``m_h``. The share is

        share(h) = (mean over windows of m - m_h) / (mean over windows of m)

    0: the head does not matter to the task; 1: without it the margin is gone; negative: the
    head worked against the task. Undefined (an error) when the clean margin averages 0.
    """
    from headlab.data.language import encode
    from headlab.analysis.sweep import sweep

    find_items, make_metric = _task(task)
    docs = list(docs)
    chosen = [docs[d] for d in busiest_windows(find_items(docs), len(docs), n_windows)]
    if not chosen:
        raise ValueError(f"the windows hold no {task} items")
    metric = make_metric(find_items(chosen), hm.tokenizer.get_vocab(), len(chosen), score="margin")
    ids = encode(hm.tokenizer, chosen)
    result = sweep(hm, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, mode=mode, kind=metric)
    clean = result.clean.mean()
    if float(clean) == 0.0:
        raise ValueError(f"the clean {task} margin averages 0 on these windows: a share of it is undefined")
    return -result.by_head().mean(-1) / clean  # by_head: m_h - m, (layer, head, window)
