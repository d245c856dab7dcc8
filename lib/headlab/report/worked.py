"""The checklist applied to one claim about one head: the measurements chapter 9's worked example
makes on each model, each a few lines here so that the chapter stays glue.

* :func:`held_out_head`: the head a detector picks on one half of the inputs, scored on the other
  half against the uniform-attention baseline (:func:`headlab.stats.select_and_measure`);
* :func:`detector_drop`: how much removing a head (zero, mean or resample ablation) lowers another
  head's detector score, per input, with a paired interval;
* :func:`repeat_loss_rise`: how much removing it raises the next-token loss at the queries that
  have an induction target (the tokens induction predicts), per input, with a paired interval.
"""

from __future__ import annotations

import torch

from headlab import stats
from headlab.heads.ablation import Ablation
from headlab.metrics import next_token_loss
from headlab.report.detectors import TargetSet, target_weight

__all__ = ["held_out_head", "detector_drop", "repeat_loss_rise", "ablation_for"]


def held_out_head(weights: torch.Tensor, uniform: torch.Tensor, split: stats.Split,
                  layers=None) -> tuple[tuple[int, int], stats.Selection]:
    """The head with the largest mean detector score on ``split.select``, measured on ``split.measure``.

    Args:
        weights: ``(n_inputs, n_layers, n_heads)`` detector scores (:func:`target_weight`).
        uniform: ``(n_inputs,)`` uniform attention's score on the same inputs (the baseline).
        split: from :func:`headlab.stats.split_items` over the inputs.
        layers: the layers to choose from (default: all).

    Returns:
        ``((layer, head), selection)``; ``selection.lead`` is the held-out lead over uniform attention.
    """
    n, n_layers, n_heads = weights.shape
    layers = list(range(n_layers)) if layers is None else list(layers)
    if torch.isnan(weights).any() or torch.isnan(uniform).any():
        raise ValueError("every input needs a detector score: drop inputs with no induction target first")
    scores = weights[:, layers].reshape(n, -1).T.double().numpy()  # (candidates, inputs)
    sel = stats.select_and_measure(scores, split, baseline=uniform.double().numpy())
    layer, head = divmod(sel.candidate, n_heads)
    return (layers[layer], head), sel


def ablation_for(mode: str, ts: TargetSet, seed: int = 0) -> Ablation:
    """The ablation of ``mode`` (``"zero"``, ``"mean"`` or ``"resample"``), with ``ts``'s own inputs as
    the reference of mean and resample ablation."""
    return Ablation() if mode == "zero" else Ablation(mode, reference=ts.batch, seed=seed)


def detector_drop(hm, ts: TargetSet, head: tuple[int, int], removed: tuple[int, int], mode: str = "zero",
                  seed: int = 0) -> stats.Estimate:
    """Mean over inputs of ``head``'s detector score clean minus with ``removed`` ablated (``mode``),
    with a paired bootstrap interval over the inputs."""
    clean, _ = target_weight(hm, ts)
    with hm.ablate([removed], ablation=ablation_for(mode, ts, seed)):
        ablated, _ = target_weight(hm, ts)
    layer, h = head
    return stats.paired_difference(clean[:, layer, h].double().numpy(), ablated[:, layer, h].double().numpy(),
                                   seed=seed)


@torch.no_grad()
def _repeat_loss(hm, ts: TargetSet) -> torch.Tensor:
    batch = hm.tokenize(ts.batch)
    eligible = (ts.targets.any(-1) & ts.batch["attention_mask"].bool()).to(batch["input_ids"].device)
    logits = hm.forward(batch)
    return next_token_loss(logits, batch["input_ids"], batch["attention_mask"], loss_mask=eligible).float().cpu()


def repeat_loss_rise(hm, ts: TargetSet, removed: tuple[int, int], mode: str = "zero",
                     seed: int = 0) -> stats.Estimate:
    """Mean over inputs of the next-token loss (nats) at the queries that have an induction target,
    with ``removed`` ablated (``mode``) minus clean, with a paired bootstrap interval."""
    clean = _repeat_loss(hm, ts)
    with hm.ablate([removed], ablation=ablation_for(mode, ts, seed)):
        ablated = _repeat_loss(hm, ts)
    return stats.paired_difference(ablated.double().numpy(), clean.double().numpy(), seed=seed)
