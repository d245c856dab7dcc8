"""Next-token probes of one phenomenon each, and the margin a model gives the right answer.

The synthetic language's evaluation items (``headlab.language.agreement_items``,
``pronoun_items``, ``copy_items``, ``rare_items``) each name a window, a position and the
token that must come next. A :class:`Probe` keeps just that, as token ids, with the
alternatives it must beat: the same verb in the other number, the other pronoun forms, or
(for copying and rare words) every other token of the vocabulary.

The **margin** of a probe is ``logit(correct) - max over alternatives of logit(alt)`` at its
position: positive when the model ranks the right answer first. :func:`margin_metric`
turns a list of probes into a per-input metric for :func:`headlab.sweep.sweep`, so that the
effect of ablating a head can be read phenomenon by phenomenon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

__all__ = ["Probe", "probes_from_items", "margins", "margin_metric"]


@dataclass(frozen=True)
class Probe:
    """Input ``doc``, read up to ``pos``, must predict ``correct`` over ``alternatives``
    (token ids; ``None``: every other token of the vocabulary)."""

    doc: int
    pos: int
    correct: int
    alternatives: tuple[int, ...] | None


def probes_from_items(items: Sequence, vocab: Mapping[str, int]) -> list[Probe]:
    """Probes from evaluation items of ``headlab.language.items``, with ``vocab`` word -> id.

    Agreement items compare ``correct`` with ``wrong``; pronoun items with their
    ``alternatives``; copy and rare items (which have a ``target``) with every other token.
    """
    out = []
    for item in items:
        if hasattr(item, "wrong"):
            correct, alternatives = item.correct, (item.wrong,)
        elif hasattr(item, "alternatives"):
            correct, alternatives = item.correct, tuple(item.alternatives)
        elif hasattr(item, "target"):
            correct, alternatives = item.target, None
        else:
            raise TypeError(f"{type(item).__name__} is not an evaluation item of headlab.language "
                            "(it has no correct/wrong, alternatives or target)")
        missing = [w for w in (correct, *(alternatives or ())) if w not in vocab]
        if missing:
            raise ValueError(f"words {missing} are not in the vocabulary: is this the language's tokenizer?")
        alt = None if alternatives is None else tuple(vocab[w] for w in alternatives)
        out.append(Probe(int(item.doc), int(item.pos), vocab[correct], alt))
    return out


def margins(logits: torch.Tensor, probes: Sequence[Probe], index: torch.Tensor | None = None) -> torch.Tensor:
    """``(n_probes,)``: each probe's margin in ``logits`` ``(batch, pos, d_vocab)``.

    ``index``: the input each row of ``logits`` holds (default: row ``i`` is input ``i``);
    a probe of input ``d`` is read from the first row holding ``d``.
    """
    if not probes:
        raise ValueError("no probes to score")
    rows = {}
    order = range(logits.shape[0]) if index is None else index.tolist()
    for r, d in enumerate(order):
        rows.setdefault(int(d), r)
    out = torch.empty(len(probes), dtype=torch.float32)
    for i, p in enumerate(probes):
        if p.doc not in rows:
            raise ValueError(f"probe {i} reads input {p.doc}, which is not in the batch")
        row = logits[rows[p.doc], p.pos].float()  # (d_vocab,)
        if p.alternatives is None:
            others = torch.cat([row[:p.correct], row[p.correct + 1:]])
        else:
            others = row[list(p.alternatives)]
        out[i] = row[p.correct] - others.max()
    return out


def margin_metric(probes: Sequence[Probe], n_inputs: int) -> Callable[[torch.Tensor, dict], torch.Tensor]:
    """A per-input metric for :func:`headlab.sweep.sweep`: for each row of a (tiled) batch,
    the mean margin of the probes of its input (``batch["index"]``); NaN for an input with no
    probe of this phenomenon (so average effects with ``nanmean``)."""
    by_input: dict[int, list[Probe]] = {}
    for p in probes:
        if not 0 <= p.doc < n_inputs:
            raise ValueError(f"a probe reads input {p.doc}, outside 0..{n_inputs - 1}")
        by_input.setdefault(p.doc, []).append(p)

    def metric(output: torch.Tensor, batch: dict) -> torch.Tensor:
        index = batch["index"].tolist()
        values = torch.full((len(index),), float("nan"))
        for r, d in enumerate(index):
            own = by_input.get(int(d))
            if own:
                local = [Probe(0, p.pos, p.correct, p.alternatives) for p in own]
                values[r] = margins(output[r:r + 1], local).mean()
        return values.to(output.device)

    metric.__name__ = "margin"
    return metric
