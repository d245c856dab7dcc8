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

__all__ = ["Probe", "probes_from_items", "margins", "margin_metric", "ablation_margins"]


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


def _tables(probes: Sequence[Probe], d_vocab: int) -> tuple[torch.Tensor, ...]:
    """``doc, pos, correct`` ``(n_probes,)`` and the alternatives as a mask ``(n_probes, d_vocab)``."""
    doc = torch.tensor([p.doc for p in probes])
    pos = torch.tensor([p.pos for p in probes])
    correct = torch.tensor([p.correct for p in probes])
    if int(correct.max()) >= d_vocab:
        raise ValueError(f"a probe's token id is outside the {d_vocab} logits")
    others = torch.zeros(len(probes), d_vocab, dtype=torch.bool)
    for i, p in enumerate(probes):
        if p.alternatives is None:
            others[i] = True
            others[i, p.correct] = False
        else:
            others[i, list(p.alternatives)] = True
    return doc, pos, correct, others


def _pair_margins(logits: torch.Tensor, index: torch.Tensor, tables) -> tuple[torch.Tensor, torch.Tensor]:
    """Margins of every (row, probe) pair whose row holds the probe's input: ``(rows, margins)``."""
    doc, pos, correct, others = (t.to(logits.device) for t in tables)
    rows, which = torch.nonzero(index.to(logits.device)[:, None] == doc[None, :], as_tuple=True)
    at = logits[rows, pos[which]].float()  # (pairs, d_vocab)
    right = at.gather(1, correct[which][:, None]).squeeze(1)  # (pairs,)
    best_other = at.masked_fill(~others[which], float("-inf")).max(dim=1).values
    return rows, right - best_other


def margins(logits: torch.Tensor, probes: Sequence[Probe], index: torch.Tensor | None = None) -> torch.Tensor:
    """``(n_probes,)``: each probe's margin in ``logits`` ``(batch, pos, d_vocab)``.

    ``index``: the input each row of ``logits`` holds (default: row ``i`` is input ``i``);
    a probe of input ``d`` is read from the first row holding ``d``.
    """
    if not probes:
        raise ValueError("no probes to score")
    index = torch.arange(logits.shape[0]) if index is None else torch.as_tensor(index)
    first = {}
    for r, d in enumerate(index.tolist()):
        first.setdefault(int(d), r)
    missing = [i for i, p in enumerate(probes) if p.doc not in first]
    if missing:
        raise ValueError(f"probe {missing[0]} reads input {probes[missing[0]].doc}, which is not in the batch")
    rows = torch.tensor([first[p.doc] for p in probes])
    local = [Probe(i, p.pos, p.correct, p.alternatives) for i, p in enumerate(probes)]
    _, values = _pair_margins(logits[rows], torch.arange(len(probes)), _tables(local, logits.shape[-1]))
    return values.cpu()


def margin_metric(probes: Sequence[Probe], n_inputs: int) -> Callable[[torch.Tensor, dict], torch.Tensor]:
    """A per-input metric for :func:`headlab.sweep.sweep`: for each row of a (tiled) batch,
    the mean margin of the probes of its input (``batch["index"]``); NaN for an input with no
    probe of this phenomenon (so average effects with ``nanmean``)."""
    if not probes:
        raise ValueError("no probes to score")
    bad = [p.doc for p in probes if not 0 <= p.doc < n_inputs]
    if bad:
        raise ValueError(f"a probe reads input {bad[0]}, outside 0..{n_inputs - 1}")
    cache: dict[int, tuple] = {}

    def metric(output: torch.Tensor, batch: dict) -> torch.Tensor:
        d_vocab = output.shape[-1]
        if d_vocab not in cache:
            cache[d_vocab] = _tables(probes, d_vocab)
        index = batch["index"]
        rows, values = _pair_margins(output, index, cache[d_vocab])
        total = torch.zeros(len(index), device=output.device).index_add_(0, rows, values)
        count = torch.zeros(len(index), device=output.device).index_add_(0, rows, torch.ones_like(values))
        return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))

    metric.__name__ = "margin"
    return metric


def ablation_margins(hm, inputs, probes: Mapping[str, Sequence[Probe]], mode: str = "zero",
                     reference=None) -> dict[str, torch.Tensor]:
    """The effect of ablating each head alone on each phenomenon's margin, per input.

    ``probes``: phenomenon name -> its probes. Returns name -> ``(n_layers, n_heads,
    n_inputs)``: the mean margin of the input's probes with the head ablated (``mode``,
    ``reference`` as in ``HeadModel.ablate``) minus the same without ablation; NaN for an
    input with no probe of that phenomenon. One forward pass per head serves every
    phenomenon (a :func:`headlab.sweep.sweep` per phenomenon would run each pass again).
    """
    batch = hm.tokenize(inputs)
    n = batch["input_ids"].shape[0]
    metrics = {name: margin_metric(p, n) for name, p in probes.items()}
    index = {"index": torch.arange(n, device=batch["input_ids"].device)}

    def measure() -> dict[str, torch.Tensor]:
        logits = hm.forward(batch)
        return {name: m(logits, index).float().cpu() for name, m in metrics.items()}

    with torch.no_grad():
        clean = measure()
        out = {name: torch.empty(hm.n_layers, hm.n_heads, n) for name in probes}
        for layer, head in hm.heads():
            with hm.ablate([(layer, head)], mode=mode, reference=reference):
                ablated = measure()
            for name in probes:
                out[name][layer, head] = ablated[name] - clean[name]
    return out
