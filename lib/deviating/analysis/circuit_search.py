"""The induction circuit of a model found by ablation, and how far ablating heads moves the others' attention.

Chapter 5 finds the induction head of a model and the earlier head it depends on by removing each
earlier head in turn (:func:`induction_circuit`); chapters 3 and 4 ask whether a head's attention
moves when another is removed (:func:`pattern_change`), and whether the later layers read a head
more than its neighbours (:func:`read_by_later_layers`). Both use only :mod:`headlab`'s public API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from headlab.analysis.atlas import repeated_random_tokens
from headlab.analysis.detect import induction_score, previous_token_score
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.heads.model import HeadModel

__all__ = ["InductionCircuit", "induction_circuit", "pattern_change", "clean_patterns", "read_by_later_layers"]


# ---------------------------------------------------------------------- finding the circuit


@dataclass
class InductionCircuit:
    """The induction circuit of a model, found by measurement on repeated random tokens.

    Attributes:
        inputs: the batch the scores were measured on (``input_ids``, ``attention_mask``).
        induction, previous_token: ``(n_inputs, n_layers, n_heads)`` per-input scores of
            every head (:func:`headlab.analysis.detect.induction_score`, ``previous_token_score``).
        induction_head: the head with the highest mean induction score.
        candidates: every head of the layers below the induction head.
        ablated_induction: ``(n_candidates, n_inputs, n_layers, n_heads)``: every head's
            induction score with one candidate ablated (``mode``).
        mode: the ablation mode.
    """

    inputs: dict
    induction: torch.Tensor
    previous_token: torch.Tensor
    induction_head: Head
    candidates: list[Head]
    ablated_induction: torch.Tensor
    mode: str

    def mean(self, name: str) -> torch.Tensor:
        """``(n_layers, n_heads)`` mean over inputs of ``"induction"`` or ``"previous_token"``."""
        if name not in ("induction", "previous_token"):
            raise ValueError(f"name must be 'induction' or 'previous_token', got {name!r}")
        return getattr(self, name).mean(dim=0)

    @property
    def drop(self) -> torch.Tensor:
        """``(n_candidates,)``: how much the induction head's mean score falls when each
        candidate is ablated (clean minus ablated)."""
        layer, head = self.induction_head
        return self.induction[:, layer, head].mean() - self.ablated_induction[:, :, layer, head].mean(dim=1)

    @property
    def feeding_head(self) -> Head:
        """The candidate whose ablation lowers the induction head's score the most."""
        return self.candidates[int(self.drop.argmax())]

    def top_heads(self, name: str, k: int = 5) -> list[tuple[Head, float]]:
        """The ``k`` heads with the highest mean ``name`` score, best first."""
        means = self.mean(name)
        n_heads = means.shape[1]
        order = torch.argsort(means.flatten(), descending=True)[:k]
        return [(Head(*divmod(int(i), n_heads)), float(means.flatten()[i])) for i in order]


def _scores(hm: HeadModel, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-input induction and previous-token scores of every head: two ``(n, n_layers, n_heads)``."""
    _, cache = hm.run_with_cache(batch, names=("pattern",))
    ids, mask = cache.input_ids.cpu(), cache.attention_mask.cpu()
    ind, prev = [], []
    for layer in range(hm.n_layers):
        pattern = cache.pattern(layer).float().cpu()  # (batch, head, q_pos, k_pos)
        ind.append(induction_score(pattern, ids, mask))
        prev.append(previous_token_score(pattern, mask))
    return torch.stack(ind, dim=1), torch.stack(prev, dim=1)


def induction_circuit(hm: HeadModel, inputs=None, *, n: int = 16, length: int = 20, seed: int = 0,
                      ablation: Ablation | None = None) -> InductionCircuit:
    """Find the induction head of ``hm`` and the earlier heads it depends on.

    ``inputs``: a batch on which every input has a repeated token; default ``n`` sequences of
    ``length`` distinct random tokens repeated once (:func:`headlab.analysis.atlas.repeated_random_tokens`
    with ``seed``). The induction head is the head of layer 1 or above with the highest mean
    induction score (nothing can feed a head of layer 0); every head of the layers below it is
    then removed in turn (``ablation``, default zero ablation) and every head's induction score
    measured again.
    """
    ablation = Ablation.of(ablation)
    if hm.n_layers < 2:
        raise ValueError(f"{hm.name} has one layer: an induction circuit needs a head in an earlier layer "
                         "to feed the induction head (see chapter 5)")
    if inputs is None:
        inputs = repeated_random_tokens(hm, n=n, length=length, seed=seed)
    batch = hm.tokenize(inputs)
    with torch.no_grad():
        induction, previous = _scores(hm, batch)
    means = induction.mean(dim=0)  # (n_layers, n_heads)
    best = int(means.flatten().argmax())
    head = Head(*divmod(best, hm.n_heads))
    if head.layer == 0:  # layer 0 cannot be fed by anything: take the best head above it
        best = int(means[1:].flatten().argmax()) + hm.n_heads
        head = Head(*divmod(best, hm.n_heads))
    candidates = [Head(l, h) for l in range(head.layer) for h in range(hm.n_heads)]
    ablated = []
    for cand in candidates:
        with torch.no_grad(), hm.ablate([cand], ablation=ablation):
            ablated.append(_scores(hm, batch)[0])
    return InductionCircuit(batch, induction, previous, head, candidates, torch.stack(ablated), ablation.mode)


# ------------------------------------------------------------------- who reads whom, by ablation


def pattern_change(hm: HeadModel, inputs, heads: Sequence[Head], *, ablation: Ablation | None = None,
                   clean=None) -> torch.Tensor:
    """How much every head's attention moves when ``heads`` are ablated: ``(n_inputs, n_layers, n_heads)``.

    For each input and head: the mean, over real query positions, of the total-variation
    distance ``0.5 * sum_k |p_ablated[q, k] - p_clean[q, k]|`` between the head's attention
    row with ``heads`` removed (``ablation``, default zero ablation) and its clean row; 0 means the
    head attends exactly as before, 1 that it attends somewhere else entirely. Heads in and below
    the lowest ablated layer cannot move (an ablation acts on the output of a head, which only later
    layers read) and score 0.

    ``clean``: the clean run's patterns on the same inputs (:func:`clean_patterns`), to reuse when
    many heads are ablated in turn; default: run here.
    """
    ablation = Ablation.of(ablation)
    batch = hm.tokenize(inputs)
    if clean is None:
        clean = clean_patterns(hm, batch)
    elif tuple(clean.attention_mask.shape) != tuple(batch["attention_mask"].shape):
        raise ValueError(f"clean= holds patterns of {tuple(clean.attention_mask.shape)} (batch, pos), the inputs are "
                         f"{tuple(batch['attention_mask'].shape)}: pass clean_patterns(hm, inputs) of the same inputs")
    with torch.no_grad():
        with hm.ablate(heads, ablation=ablation):
            _, ablated = hm.run_with_cache(batch, names=("pattern",))
    real = batch["attention_mask"].bool().cpu()  # (batch, pos)
    out = []
    for layer in range(hm.n_layers):
        diff = (ablated.pattern(layer).float() - clean.pattern(layer).float()).abs().cpu()
        tv = 0.5 * diff.sum(-1)  # (batch, head, q_pos)
        tv = (tv * real[:, None, :]).sum(-1) / real.sum(-1, keepdim=True)  # (batch, head)
        out.append(tv)
    return torch.stack(out, dim=1)


def clean_patterns(hm: HeadModel, inputs):
    """The attention patterns of a clean run of ``hm`` on ``inputs`` (an activation cache holding
    ``pattern``), for :func:`pattern_change`'s ``clean``."""
    with torch.no_grad():
        return hm.run_with_cache(hm.tokenize(inputs), names=("pattern",))[1]


def read_by_later_layers(hm: HeadModel, inputs, heads: Sequence[Head], *, ablation: Ablation | None = None,
                         clean=None) -> tuple[torch.Tensor, torch.Tensor]:
    """How far the later layers' attention moves when each of ``heads`` is ablated alone, against
    its layer's other heads: ``(own, neighbours)``, each ``(len(heads), n_inputs)``.

    ``own[i]`` is, per input, the mean over every head of the layers above ``heads[i]`` of its
    :func:`pattern_change` when ``heads[i]`` alone is removed; ``neighbours[i]`` is the same
    averaged over the other heads of that layer, each removed alone. ``own - neighbours > 0``: the
    later layers read this head more than its neighbours. ``clean``: as in :func:`pattern_change`.

    Raises:
        ValueError: for no heads, or a head in the last layer (no later layer reads it).
    """
    heads = [tuple(h) for h in heads]
    if not heads:
        raise ValueError("give at least one (layer, head)")
    last = [h for h in heads if not 0 <= h[0] < hm.n_layers - 1 or not 0 <= h[1] < hm.n_heads]
    if last:
        raise ValueError(f"head {last[0]} is not below the last layer of a {hm.n_layers} x {hm.n_heads} model: "
                         "no later layer can read it")
    if clean is None:
        clean = clean_patterns(hm, inputs)
    moved = {}
    for layer in sorted({l for l, _ in heads}):  # every head of the layer, removed alone
        moved[layer] = torch.stack([pattern_change(hm, inputs, [(layer, h)], ablation=ablation, clean=clean)
                                    [:, layer + 1:].mean((1, 2)) for h in range(hm.n_heads)])
    own = torch.stack([moved[l][h] for l, h in heads])
    rest = torch.stack([torch.cat([moved[l][:h], moved[l][h + 1:]]).mean(0) for l, h in heads])
    return own, rest
