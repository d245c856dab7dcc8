"""The synthetic language's annotated items as metrics (:class:`headlab.metrics.ItemMetric`): the
right verb form, the right pronoun, the copied token, each against its competitors."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

from headlab.metrics import ItemMetric

__all__ = ["agreement_metric", "pronoun_metric", "copy_metric"]


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
