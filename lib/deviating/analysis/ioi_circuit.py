"""Two tests of a set of heads on the indirect-object task: what takes over when they are removed
(backup behaviour), and how much of the model's behaviour they carry alone (faithfulness).

* :func:`backup_test`: remove some heads (the main name movers) and measure, with intervals over
  prompts, the drop of ``logit(IO) - logit(S)`` and how each remaining head's direct share changes.
  A head whose share *rises* when others are removed takes over part of their work: a backup.
* :func:`faithfulness`: ablate every head **outside** a circuit and compare the metric with the
  whole model's (Wang et al. 2022's ``F(C) / F(M)``), under zero, mean and resample ablation side
  by side, because the number depends on what replaces the removed heads (Miller et al. 2024).
  Mean and resample ablation take the removed heads' outputs from a reference set (the ABC
  prompts): mean ablation over every token of it, resample ablation at the same position of a
  random reference prompt. MLPs and embeddings are never ablated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch

from deviating.analysis.ioi import head_dla, logit_diffs, prompt_batch
from deviating.data.ioi.prompts import IoiPrompts
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.heads.model import HeadModel
from headlab.stats.intervals import bootstrap_mean, paired_difference
from headlab.stats.results import Estimate

__all__ = ["ABLATIONS", "BackupResult", "backup_test", "make_ablation", "faithfulness", "complement"]

ABLATIONS = ("zero", "mean", "resample")


@dataclass
class BackupResult:
    """What :func:`backup_test` measured.

    Attributes:
        removed: the heads ablated.
        clean, ablated: ``(n,)`` the metric per prompt with all heads / with ``removed`` ablated.
        drop: the mean of ``clean - ablated`` with its interval.
        expected_drop: the mean total direct share of ``removed`` on the clean run (what the drop
            would be if nothing else changed), with its interval.
        dla_clean, dla_ablated: ``(n, n_layers, n_heads)`` each head's direct share on the two runs.
        change: ``{head: Estimate}`` the mean change of each remaining head's direct share (ablated - clean).
    """

    removed: list[Head]
    clean: torch.Tensor
    ablated: torch.Tensor
    drop: Estimate
    expected_drop: Estimate
    dla_clean: torch.Tensor
    dla_ablated: torch.Tensor
    change: dict[Head, Estimate]

    def backups(self, threshold: float) -> list[Head]:
        """Heads whose share rises by more than ``threshold`` with the lower end of its interval above 0."""
        return [h for h, e in self.change.items() if e.value > threshold and e.low > 0]


def make_ablation(kind: str, reference: IoiPrompts | None = None, seed: int = 0) -> Ablation:
    """The :class:`~headlab.heads.ablation.Ablation` called ``kind`` (:data:`ABLATIONS`), its reference the
    prompts ``reference`` (needed for ``"mean"`` and ``"resample"``)."""
    if kind not in ABLATIONS:
        raise ValueError(f"unknown ablation {kind!r}: choose from {', '.join(ABLATIONS)}")
    if kind == "zero":
        return Ablation()
    if reference is None:
        raise ValueError(f"{kind} ablation needs reference prompts (e.g. the ABC twins) to take outputs from")
    return Ablation(kind, reference=prompt_batch(reference), seed=seed)


def backup_test(hm: HeadModel, prompts: IoiPrompts, removed: Iterable[Head], ablation: Ablation | None = None,
                *, seed: int = 0) -> BackupResult:
    """Ablate ``removed`` and measure the drop of the metric and each other head's change of direct
    share, with 95% bootstrap intervals over prompts (``seed`` for the resampling)."""
    removed = list(removed)
    if not removed:
        raise ValueError("removed is empty: name the heads whose removal is tested (e.g. the name movers)")
    removed = [tuple(h) for h in hm.check_heads(removed)]
    clean = logit_diffs(hm, prompts)
    ablated = logit_diffs(hm, prompts, removed, ablation)
    dla_clean = head_dla(hm, prompts)
    with hm.ablate(removed, ablation):
        dla_ablated = head_dla(hm, prompts)
    own = sum(dla_clean[:, l, h] for l, h in removed).numpy()
    change = {}
    for l in range(hm.n_layers):
        for h in range(hm.n_heads):
            if (l, h) not in removed:
                change[(l, h)] = paired_difference(dla_ablated[:, l, h].numpy(), dla_clean[:, l, h].numpy(),
                                                    n_resamples=2000, seed=seed)
    return BackupResult(removed, clean, ablated, paired_difference(clean.numpy(), ablated.numpy(), n_resamples=2000, seed=seed),
                        bootstrap_mean(own, n_resamples=2000, seed=seed), dla_clean, dla_ablated, change)


def complement(hm: HeadModel, circuit: Iterable[Head]) -> list[Head]:
    """Every head of ``hm`` not in ``circuit``."""
    circuit = list(circuit)
    keep = {tuple(h) for h in hm.check_heads(circuit)} if circuit else set()
    return [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads) if (l, h) not in keep]


def faithfulness(hm: HeadModel, prompts: IoiPrompts, circuit: Iterable[Head], reference: IoiPrompts,
                 kinds: Iterable[str] = ABLATIONS, *, seed: int = 0) -> dict[str, dict[str, float]]:
    """For each ablation kind: the mean metric of the circuit alone (every other head ablated),
    of no head at all (every head ablated), the whole model's, and ``faithfulness`` = circuit /
    model (1: the circuit alone does what the model does); ``interval`` its 95% bootstrap interval
    over prompts (of the ratio of means)."""
    circuit = list(circuit)
    circuit = [tuple(h) for h in hm.check_heads(circuit)] if circuit else []  # [] : no head kept
    full = logit_diffs(hm, prompts)
    everyone = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    out = {}
    for kind in kinds:
        ablation = make_ablation(kind, reference, seed)
        alone = logit_diffs(hm, prompts, complement(hm, circuit), ablation) if len(circuit) < len(everyone) else full
        none = logit_diffs(hm, prompts, everyone, ablation)
        g = torch.Generator().manual_seed(seed)
        idx = torch.randint(len(prompts), (2000, len(prompts)), generator=g)
        ratios = alone[idx].mean(1) / full[idx].mean(1)
        out[kind] = {"circuit": float(alone.mean()), "no_heads": float(none.mean()), "model": float(full.mean()),
                     "faithfulness": float(alone.mean() / full.mean()),
                     "interval": (float(ratios.quantile(0.025)), float(ratios.quantile(0.975)))}
    return out
