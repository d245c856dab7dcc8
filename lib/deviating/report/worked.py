"""The checklist applied to one claim about one head: the measurements of chapter 9's worked example
that the roles of :mod:`headlab.roles` do not already make (which heads are induction
heads, and how much of their score a removed head takes, are
:func:`headlab.roles.induction.induction_heads` and
:func:`~headlab.roles.induction.induction_dependence`):

* :func:`ablation_for`: zero, mean or resample ablation, with a set of inputs as the reference;
* :func:`repeat_loss_rise`: how much removing a head raises the next-token loss at the queries that
  have an induction target (the tokens induction predicts), per input, with a paired interval.
"""

from __future__ import annotations

import torch

from headlab import stats
from headlab.heads.ablation import Ablation
from headlab.metrics import next_token_loss
from headlab.report.detectors import TargetSet

__all__ = ["repeat_loss_rise", "ablation_for"]


def ablation_for(mode: str, ts: TargetSet, seed: int = 0) -> Ablation:
    """The ablation of ``mode`` (``"zero"``, ``"mean"`` or ``"resample"``), with ``ts``'s own inputs as
    the reference of mean and resample ablation."""
    return Ablation() if mode == "zero" else Ablation(mode, reference=ts.batch, seed=seed)


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
